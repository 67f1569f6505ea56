//! `InternalSecret` (`core.gardener.cloud/v1beta1`, namespaced): a Secret only Gardener
//! reads; `<shoot>.ca-client` holds the client CA that signs admin kubeconfigs. Its fields sit
//! at the top level, like a core Secret.

use k8s_openapi::ByteString;
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The fields of an InternalSecret (serialized at the top level of the object).
#[derive(CustomResource, Serialize, Deserialize, Clone, PartialEq, Default)]
#[kube(
    group = "core.gardener.cloud",
    version = "v1beta1",
    kind = "InternalSecret",
    namespaced,
    no_spec,
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct InternalSecretFields {
    /// Secret data (base64 on the wire).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<BTreeMap<String, ByteString>>,
    /// Whether the data can no longer change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub immutable: Option<bool>,
    /// Write-only plain-text data, merged into `data` by the server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub string_data: Option<BTreeMap<String, String>>,
    /// Secret type.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

// Holds CA private keys: Debug shows the keys of the data, never the values.
impl std::fmt::Debug for InternalSecretFields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InternalSecretFields")
            .field(
                "data_keys",
                &self.data.as_ref().map(|d| d.keys().collect::<Vec<_>>()),
            )
            .field("immutable", &self.immutable)
            .field(
                "string_data_keys",
                &self
                    .string_data
                    .as_ref()
                    .map(|d| d.keys().collect::<Vec<_>>()),
            )
            .field("type_", &self.type_)
            .finish()
    }
}
