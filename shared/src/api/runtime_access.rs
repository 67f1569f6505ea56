//! `RuntimeAccess`: a standing request for a least-privilege kubeconfig of one runtime.
//!
//! The controller creates a ServiceAccount and its RBAC in the runtime's (shoot) cluster, issues
//! a token kubeconfig for it through the TokenRequest API, keeps it in a Secret in the KCP and
//! rotates it before it expires. Every consumer (KEB, KLM, ...) gets its own ServiceAccount, so
//! the shoot's audit log tells them apart. Why this name: see `docs/kubeconfigs.md`.

use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired access to one runtime. Exactly one of `clusterRole`, `role` and `roleRef` is set.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructuremanager.kyma-project.io",
    version = "v1",
    kind = "RuntimeAccess",
    plural = "runtimeaccesses",
    shortname = "rtaccess",
    namespaced,
    status = "RuntimeAccessStatus",
    derive = "PartialEq",
    doc = "A least-privilege, ServiceAccount-based kubeconfig for one runtime, rotated before it expires.",
    printcolumn = r#"{"name":"STATE","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"RUNTIME-ID","type":"string","jsonPath":".spec.runtimeId"}"#,
    printcolumn = r#"{"name":"SERVICE-ACCOUNT","type":"string","jsonPath":".spec.serviceAccount.name"}"#,
    printcolumn = r#"{"name":"SECRET","type":"string","jsonPath":".status.secretRef.name"}"#,
    printcolumn = r#"{"name":"REQUESTED-BY","type":"string","priority":1,"jsonPath":".metadata.annotations.infrastructuremanager\\.kyma-project\\.io/requested-by"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeAccessSpec {
    /// The runtime ID. The GardenerCluster of this name in the same namespace provides the
    /// admin kubeconfig through which the controller manages the shoot cluster. Immutable.
    // Enforced by the apiserver too (a CEL rule), so it holds while no webhook answers: what
    // the controller created in one runtime cluster would otherwise be left there.
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf",
        "message": "is immutable; create a new RuntimeAccess for another runtime"
    }]))]
    pub runtime_id: String,
    /// The ServiceAccount in the shoot cluster the kubeconfig authenticates as. Immutable.
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf",
        "message": "is immutable; create a new RuntimeAccess for another ServiceAccount"
    }]))]
    pub service_account: ServiceAccountRef,
    /// Creates a ClusterRole with these rules and binds it cluster-wide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_role: Option<ClusterRoleSpec>,
    /// Creates a Role with these rules in one namespace and binds it there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<RoleSpec>,
    /// Binds an existing ClusterRole or Role of the shoot cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_ref: Option<ExistingRoleRef>,
    /// Lifetime of the issued token in seconds (at least 600). The controller's
    /// `--access-token-expiration` applies when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_expiration_seconds: Option<i64>,
    /// Where the kubeconfig is stored in the KCP (always in this object's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<AccessSecretSpec>,
}

/// A ServiceAccount in the shoot cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountRef {
    /// Name of the ServiceAccount (created when missing).
    pub name: String,
    /// Namespace of the ServiceAccount; it must exist (the controller never creates or deletes
    /// namespaces, which could hold other workloads).
    pub namespace: String,
}

/// A ClusterRole the controller creates and binds with a ClusterRoleBinding.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRoleSpec {
    /// The rules of the ClusterRole.
    pub rules: Vec<PolicyRule>,
}

/// A Role the controller creates in `namespace` and binds there with a RoleBinding.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleSpec {
    /// Namespace of the Role and its binding; it must exist.
    pub namespace: String,
    /// The rules of the Role.
    pub rules: Vec<PolicyRule>,
}

/// Kind of an existing role to bind.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RoleKind {
    /// A ClusterRole: bound cluster-wide, or in `namespace` with a RoleBinding when given.
    ClusterRole,
    /// A Role in `namespace`.
    Role,
}

/// An existing ClusterRole or Role in the shoot cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExistingRoleRef {
    /// `ClusterRole` or `Role`.
    pub kind: RoleKind,
    /// Name of the role.
    pub name: String,
    /// Namespace of the binding: required for a Role; for a ClusterRole it limits the grant to
    /// this namespace (RoleBinding) instead of the whole cluster (ClusterRoleBinding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// The KCP Secret holding the kubeconfig.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessSecretSpec {
    /// Secret name; default `<metadata.name>-kubeconfig`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Data key; default `config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Observed state of a [`RuntimeAccess`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeAccessStatus {
    /// `Pending`, `Ready`, `Error` or `Deleting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Conditions keyed by type (`KubeconfigReady`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::api::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The KCP Secret holding the kubeconfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<AccessSecretRef>,
    /// The user name the kubeconfig authenticates as in the shoot (its audit-log identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// When the current token expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_expiration_timestamp: Option<Time>,
    /// Objects the controller created in the shoot cluster; they are deleted with this object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shoot_objects: Vec<ShootObjectRef>,
}

/// Name, namespace and key of the KCP Secret holding the kubeconfig.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessSecretRef {
    /// Secret name.
    pub name: String,
    /// Secret namespace.
    pub namespace: String,
    /// Data key holding the kubeconfig.
    pub key: String,
}

/// One object the controller created in the shoot cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShootObjectRef {
    /// `ServiceAccount`, `ClusterRole`, `ClusterRoleBinding`, `Role` or `RoleBinding`.
    pub kind: String,
    /// Object name.
    pub name: String,
    /// Object namespace (none for cluster-scoped kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}
