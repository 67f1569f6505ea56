//! The Gardener types the infrastructure manager writes and reads.
//!
//! Everything optional is an `Option` that is skipped when empty, so that a serialized object
//! carries exactly the fields that were set. `serde_json::Value` (through [`RawExtension`])
//! appears only where Gardener itself is free-form: provider, infrastructure, control plane,
//! extension and admission plugin configurations.

pub mod admin_kubeconfig;
pub mod cloud_profile;
pub mod common;
pub mod credentials_binding;
pub mod internal_secret;
pub mod kubernetes;
pub mod project;
pub mod shoot;
pub mod status;
pub mod worker;

pub use admin_kubeconfig::{
    AdminKubeconfigRequest, AdminKubeconfigRequestSpec, AdminKubeconfigRequestStatus,
};
pub use cloud_profile::{CloudProfile, CloudProfileSpec};
pub use common::{Quantity, RawExtension};
pub use credentials_binding::{CredentialsBinding, CredentialsBindingFields};
pub use internal_secret::{InternalSecret, InternalSecretFields};
pub use kubernetes::{KubeApiServerConfig, Kubernetes, OidcConfig};
pub use project::{Project, ProjectSpec, ProjectStatus};
pub use shoot::{ControlPlane, Extension, Shoot, ShootSpec};
pub use status::{LastError, LastOperation, ShootStatus};
pub use worker::{Machine, Provider, ShootMachineImage, Volume, Worker};

/// Values of a Shoot's `status.lastOperation`.
pub mod last_operation {
    /// `lastOperation.state` values.
    pub mod state {
        /// The operation runs.
        pub const PROCESSING: &str = "Processing";
        /// The operation finished successfully.
        pub const SUCCEEDED: &str = "Succeeded";
        /// The operation failed and will be retried.
        pub const ERROR: &str = "Error";
        /// The operation failed and will not be retried.
        pub const FAILED: &str = "Failed";
        /// The operation waits (for example for scheduling).
        pub const PENDING: &str = "Pending";
        /// The operation was aborted.
        pub const ABORTED: &str = "Aborted";
    }

    /// `lastOperation.type` values.
    pub mod kind {
        /// First reconciliation of a new shoot.
        pub const CREATE: &str = "Create";
        /// Any later reconciliation.
        pub const RECONCILE: &str = "Reconcile";
        /// Deletion.
        pub const DELETE: &str = "Delete";
        /// Control plane migration.
        pub const MIGRATE: &str = "Migrate";
        /// Restoration after a migration.
        pub const RESTORE: &str = "Restore";
        /// Live control plane migration.
        pub const LIVE_MIGRATE: &str = "LiveMigrate";
    }
}

/// Error codes of a Shoot's `status.lastErrors[].codes`.
pub mod error_codes {
    /// Infrastructure credentials are invalid.
    pub const ERR_INFRA_UNAUTHENTICATED: &str = "ERR_INFRA_UNAUTHENTICATED";
    /// Infrastructure credentials lack permissions.
    pub const ERR_INFRA_UNAUTHORIZED: &str = "ERR_INFRA_UNAUTHORIZED";
    /// An infrastructure quota is exceeded.
    pub const ERR_INFRA_QUOTA_EXCEEDED: &str = "ERR_INFRA_QUOTA_EXCEEDED";
    /// An infrastructure rate limit is exceeded.
    pub const ERR_INFRA_RATE_LIMITS_EXCEEDED: &str = "ERR_INFRA_RATE_LIMITS_EXCEEDED";
    /// An infrastructure dependency blocks the operation.
    pub const ERR_INFRA_DEPENDENCIES: &str = "ERR_INFRA_DEPENDENCIES";
    /// An infrastructure dependency blocks the operation for now.
    pub const ERR_RETRYABLE_INFRA_DEPENDENCIES: &str = "ERR_RETRYABLE_INFRA_DEPENDENCIES";
    /// Infrastructure resources are depleted.
    pub const ERR_INFRA_RESOURCES_DEPLETED: &str = "ERR_INFRA_RESOURCES_DEPLETED";
    /// Resources in the cluster block its cleanup.
    pub const ERR_CLEANUP_CLUSTER_RESOURCES: &str = "ERR_CLEANUP_CLUSTER_RESOURCES";
    /// The shoot's configuration is wrong.
    pub const ERR_CONFIGURATION_PROBLEM: &str = "ERR_CONFIGURATION_PROBLEM";
    /// The shoot's configuration is wrong for now.
    pub const ERR_RETRYABLE_CONFIGURATION_PROBLEM: &str = "ERR_RETRYABLE_CONFIGURATION_PROBLEM";
    /// A webhook in the shoot blocks the operation.
    pub const ERR_PROBLEMATIC_WEBHOOK: &str = "ERR_PROBLEMATIC_WEBHOOK";
}
