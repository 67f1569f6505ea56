//! The shoot cluster: a kube-apiserver that plays every provisioned cluster. After it is ready
//! it gets what Gardener would put into a new shoot: the ClusterRoleBindings for the groups of
//! Gardener-issued admin kubeconfigs, and the CRDs of the extensions our controller writes to.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, Patch, PatchParams};

use super::{ClusterAccess, Result, crds, kube_err};

/// Groups in Gardener-issued admin kubeconfigs; Gardener binds both to `cluster-admin` in every
/// shoot.
pub const ADMIN_GROUPS: [&str; 2] = [
    "gardener.cloud:system:admins",
    "gardener.cloud:project:admins",
];

/// Waits for the shoot API server and installs the bindings and CRDs.
pub(crate) async fn wait_and_bootstrap(shoot: &ClusterAccess, timeout: Duration) -> Result<()> {
    let client = shoot.admin_client().await?;
    super::wait::until(
        "shoot-apiserver /readyz",
        timeout,
        Duration::from_millis(100),
        || {
            let client = client.clone();
            async move { super::wait::readyz(&client).await }
        },
    )
    .await?;
    let crbs: Api<ClusterRoleBinding> = Api::all(client.clone());
    for group in ADMIN_GROUPS {
        let name = group.replace(':', "-");
        let crb: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]
        }))
        .map_err(|e| super::TestEnvError::Other(e.to_string()))?;
        crbs.patch(
            &name,
            &PatchParams::apply("kim-testenv").force(),
            &Patch::Apply(&crb),
        )
        .await
        .map_err(kube_err(format!(
            "binding {group} to cluster-admin in the shoot cluster"
        )))?;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/shoot-crds");
    crds::install_dir(&client, &dir, timeout).await
}
