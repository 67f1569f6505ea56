//! What the reconcilers are configured with. The runner makes these once from the flags
//! (`cli::run`), so a reconciler never reads the command line and can be built without it.

use std::time::Duration;

use kim_shared::access::AccessPolicy;

use crate::gardener_cluster::rotation::RotationPolicy;

/// Settings shared by every reconciler of the process.
#[derive(Debug, Clone)]
pub struct Settings {
    /// KCP namespace holding Runtimes, GardenerClusters, RuntimeAccesses and their Secrets.
    pub namespace: String,
    /// The Gardener project namespace, `garden-<project>`.
    pub gardener_namespace: String,
    /// The Runtime reconciler's.
    pub runtime: RuntimeSettings,
    /// The GardenerCluster reconciler's.
    pub gardener_cluster: GardenerClusterSettings,
    /// The RuntimeAccess reconciler's.
    pub access: AccessSettings,
}

/// Settings of the Runtime reconciler.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// Reconciles running at once.
    pub workers: u16,
    /// Fail provisioning when no audit-log tenant exists for provider and region.
    pub audit_log_mandatory: bool,
    /// Safe deletion: hibernate a deleted Runtime's Shoot and delete it only after this period.
    pub deletion_grace_period: Option<Duration>,
    /// Confirm force deletion on a deleting Shoot when Gardener reports an error it accepts.
    pub force_deletion: bool,
    /// Upstream's `--api-server-acl-enabled`: the `acl` extension is managed, with the
    /// operator CIDRs and the KCP's NAT address of the ConfigMap
    /// `converter.kubernetes.kubeApiServer.acl.configMapName` in [`Settings::namespace`].
    pub api_server_acl: bool,
    /// Upstream's `--network-restriction-enabled`: the `shoot-networking-filter` extension
    /// is managed.
    pub network_restriction: bool,
    /// Upstream's `--runtime-bootstrapper-*` flags.
    pub bootstrapper: kim_shared::bootstrapper::Settings,
}

/// Settings of the GardenerCluster reconciler.
#[derive(Debug, Clone)]
pub struct GardenerClusterSettings {
    /// Reconciles running at once.
    pub workers: u16,
    /// Longest time one reconcile may take.
    pub reconcile_timeout: Duration,
    /// Validity requested for admin kubeconfigs and when they are rotated.
    pub rotation: RotationPolicy,
}

/// Settings of the RuntimeAccess reconciler.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessSettings {
    /// Reconciles running at once (each may wait on a runtime's API server).
    pub workers: u16,
    /// Token lifetime when a RuntimeAccess does not set `spec.tokenExpirationSeconds`.
    pub token_expiration: Duration,
    /// Fraction of a token's lifetime after which it is replaced.
    pub rotation_ratio: f64,
    /// Time allowed for each request to a runtime's API server.
    pub shoot_request_timeout: Duration,
    /// What a RuntimeAccess may ask for.
    pub policy: AccessPolicy,
}
