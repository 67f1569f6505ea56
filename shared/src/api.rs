//! The custom resources of the infrastructure manager (`infrastructuremanager.kyma-project.io`).

pub mod gardener_cluster;
pub mod runtime;

pub use gardener_cluster::{GardenerCluster, GardenerClusterSpec, GardenerClusterStatus};
pub use runtime::{ProviderType, Runtime, RuntimeSpec, RuntimeState, RuntimeStatus};

/// API group of the infrastructure manager's resources.
pub const GROUP: &str = "infrastructuremanager.kyma-project.io";
/// API version of the infrastructure manager's resources.
pub const VERSION: &str = "v1";
