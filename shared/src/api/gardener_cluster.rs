//! `GardenerCluster`: asks for a kubeconfig Secret of a shoot, kept fresh by rotation.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// GardenerClusterSpec defines the desired state of GardenerCluster
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "infrastructuremanager.kyma-project.io",
    version = "v1",
    kind = "GardenerCluster",
    namespaced,
    status = "GardenerClusterStatus",
    doc = "GardenerCluster is the Schema for the clusters API",
    printcolumn = r#"{"name":"STATE","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"RUNTIME-ID","type":"string","jsonPath":".metadata.labels.kyma-project\\.io/runtime-id"}"#,
    printcolumn = r#"{"name":"SHOOT-NAME","type":"string","jsonPath":".metadata.labels.kyma-project\\.io/shoot-name"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    derive = "PartialEq",
    derive = "Default"
)]
pub struct GardenerClusterSpec {
    /// Kubeconfig defines the desired kubeconfig location
    pub kubeconfig: Kubeconfig,
    /// Shoot defines the name of the Shoot resource
    pub shoot: ShootReference,
}

/// Shoot defines the name of the Shoot resource
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct ShootReference {
    /// Name of the Shoot in the Gardener project namespace.
    pub name: String,
}

/// Kubeconfig defines the desired kubeconfig location
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct Kubeconfig {
    /// SecretKeyRef defines the location, and structure of the secret containing kubeconfig
    pub secret: SecretKeyRef,
}

/// SecretKeyRef defines the location, and structure of the secret containing kubeconfig
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct SecretKeyRef {
    /// Data key that holds the kubeconfig (upstream uses `config`).
    pub key: String,
    /// Name of the Secret (upstream uses `kubeconfig-<runtime-id>`).
    pub name: String,
    /// Namespace of the Secret.
    pub namespace: String,
}

/// GardenerClusterStatus defines the observed state of GardenerCluster
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct GardenerClusterStatus {
    /// List of status conditions to indicate the status of a ServiceInstance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::conditions_schema")]
    pub conditions: Option<Vec<Condition>>,
    /// State signifies current state of Gardener Cluster.
    /// Value can be one of ("Ready", "Processing", "Error", "Deleting").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

impl GardenerCluster {
    /// The runtime ID, from the `kyma-project.io/runtime-id` label.
    pub fn runtime_id(&self) -> Option<&str> {
        label(&self.metadata, crate::names::LABEL_RUNTIME_ID)
    }
}

pub(crate) fn label<'a>(
    metadata: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    metadata.labels.as_ref()?.get(key).map(String::as_str)
}
