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

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    fn round_trip<T: DeserializeOwned + Serialize>(object: Value) -> T {
        let typed: T = serde_json::from_value(object.clone()).expect("deserializes");
        let back = serde_json::to_value(&typed).expect("serializes");
        pretty_assertions::assert_eq!(object, back);
        typed
    }

    #[test]
    fn admin_kubeconfig_request_body_is_gardeners() {
        let body =
            serde_json::to_value(AdminKubeconfigRequest::with_expiration(600)).expect("serializes");
        assert_eq!(
            body,
            json!({
                "apiVersion": "authentication.gardener.cloud/v1alpha1",
                "kind": "AdminKubeconfigRequest",
                "metadata": {"name": ""},
                "spec": {"expirationSeconds": 600}
            })
        );
    }

    #[test]
    fn admin_kubeconfig_answer_decodes_and_hides_the_kubeconfig() {
        let answer: AdminKubeconfigRequest = round_trip(json!({
            "apiVersion": "authentication.gardener.cloud/v1alpha1",
            "kind": "AdminKubeconfigRequest",
            "metadata": {"name": "rt-abc", "namespace": "garden-kyma"},
            "spec": {"expirationSeconds": 600},
            "status": {"kubeconfig": "YXBpVmVyc2lvbjogdjEK", "expirationTimestamp": "2026-08-01T10:10:00Z"}
        }));
        let status = answer.status.expect("status");
        assert_eq!(status.kubeconfig.0, b"apiVersion: v1\n");
        let shown = format!("{status:?}");
        assert!(
            !shown.contains("apiVersion") && shown.contains("redacted"),
            "{shown}"
        );
    }

    #[test]
    fn credentials_binding_fields_sit_at_the_top_level() {
        let binding: CredentialsBinding = round_trip(json!({
            "apiVersion": "security.gardener.cloud/v1alpha1", "kind": "CredentialsBinding",
            "metadata": {"name": "aws", "namespace": "garden-kyma"},
            "credentialsRef": {"apiVersion": "v1", "kind": "Secret", "name": "aws", "namespace": "garden-kyma"},
            "provider": {"type": "aws"}
        }));
        assert_eq!(binding.spec.provider.type_, "aws");
    }

    #[test]
    fn internal_secret_round_trips_and_hides_its_data() {
        let secret: InternalSecret = round_trip(json!({
            "apiVersion": "core.gardener.cloud/v1beta1", "kind": "InternalSecret",
            "metadata": {"name": "rt-abc.ca-client", "namespace": "garden-kyma"},
            "type": "Opaque",
            "data": {"ca.crt": "Y2VydA==", "ca.key": "a2V5"}
        }));
        let shown = format!("{:?}", secret.spec);
        assert!(
            shown.contains("ca.key") && !shown.contains("ByteString"),
            "{shown}"
        );
    }

    #[test]
    fn project_and_cloud_profile_fixtures_round_trip() {
        round_trip::<Project>(json!({
            "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Project",
            "metadata": {"name": "kyma"},
            "spec": {
                "namespace": "garden-kyma",
                "owner": {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "admin"},
                "members": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "admin", "role": "admin"}]
            },
            "status": {"phase": "Ready", "observedGeneration": 1}
        }));
        round_trip::<CloudProfile>(json!({
            "apiVersion": "core.gardener.cloud/v1beta1", "kind": "CloudProfile",
            "metadata": {"name": "aws"},
            "spec": {
                "type": "aws",
                "kubernetes": {"versions": [{"version": "1.33.2", "classification": "supported"}]},
                "machineImages": [{"name": "gardenlinux", "updateStrategy": "major", "versions": [
                    {"version": "1592.1.0", "cri": [{"name": "containerd"}], "architectures": ["amd64", "arm64"],
                     "classification": "supported"}]}],
                "machineTypes": [{"name": "m6i.large", "cpu": "2", "gpu": "0", "memory": "8Gi", "usable": true,
                                  "architecture": "amd64"},
                                 {"name": "m6i.xlarge", "cpu": 4, "gpu": 0, "memory": "16Gi"}],
                "regions": [{"name": "eu-central-1", "zones": [{"name": "eu-central-1a"}]}],
                "volumeTypes": [{"name": "gp3", "class": "standard", "usable": true, "minSize": "20Gi"}]
            }
        }));
    }
}
