//! Small value types shared by the Gardener objects and the Runtime: free-form provider
//! configuration and resource quantities, with the schemas upstream's CRDs use for them.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// A free-form embedded object (Go `runtime.RawExtension`), such as a `providerConfig`,
/// `infrastructureConfig` or `controlPlaneConfig`. Gardener itself does not type these: each
/// provider extension defines its own `apiVersion`/`kind`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(transparent)]
pub struct RawExtension(pub serde_json::Value);

impl RawExtension {
    /// The embedded object as JSON.
    pub fn as_value(&self) -> &serde_json::Value {
        &self.0
    }
}

impl From<serde_json::Value> for RawExtension {
    fn from(value: serde_json::Value) -> Self {
        Self(value)
    }
}

impl JsonSchema for RawExtension {
    fn schema_name() -> Cow<'static, str> {
        "RawExtension".into()
    }

    fn inline_schema() -> bool {
        true
    }

    // Upstream's CRDs keep every field of an embedded object (no pruning).
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
        })
    }
}

/// A Kubernetes resource quantity (`"100m"`, `"1Gi"` or a plain integer), as the kubelet
/// reservation and eviction settings use it. Kept as written: this crate does no arithmetic on it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(transparent)]
pub struct Quantity(pub IntOrString);

impl JsonSchema for Quantity {
    fn schema_name() -> Cow<'static, str> {
        "Quantity".into()
    }

    fn inline_schema() -> bool {
        true
    }

    // Same shape as controller-gen emits for resource.Quantity.
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
            "x-kubernetes-int-or-string": true,
        })
    }
}

/// Schema of an int-or-string field (`maxSurge`, `maxUnavailable`) as controller-gen emits it.
pub(crate) fn int_or_string(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": true,
    })
}

/// Schema of a `[]byte` field: base64 text (`format: byte`).
pub(crate) fn byte_string(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "format": "byte",
    })
}
