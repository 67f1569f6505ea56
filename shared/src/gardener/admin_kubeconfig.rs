//! `AdminKubeconfigRequest` (`authentication.gardener.cloud/v1alpha1`): the body and answer of
//! `POST .../shoots/<name>/adminkubeconfig`. Nothing is stored; each call returns a fresh
//! kubeconfig.

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// `spec` of an `AdminKubeconfigRequest`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "authentication.gardener.cloud",
    version = "v1alpha1",
    kind = "AdminKubeconfigRequest",
    namespaced,
    status = "AdminKubeconfigRequestStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct AdminKubeconfigRequestSpec {
    /// Requested validity in seconds: at least 600, Gardener caps it at its configured maximum
    /// (24h by default) and defaults it to 3600.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration_seconds: Option<i64>,
}

/// `status` of an `AdminKubeconfigRequest`.
#[derive(Serialize, Deserialize, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdminKubeconfigRequestStatus {
    /// When the client certificate expires (its NotAfter); read this rather than assuming the
    /// requested validity.
    pub expiration_timestamp: Time,
    /// The kubeconfig (YAML); base64 on the wire.
    pub kubeconfig: ByteString,
}

// The kubeconfig holds a private key: Debug output must never show it.
impl std::fmt::Debug for AdminKubeconfigRequestStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminKubeconfigRequestStatus")
            .field("expiration_timestamp", &self.expiration_timestamp)
            .field(
                "kubeconfig",
                &format_args!("<{} bytes redacted>", self.kubeconfig.0.len()),
            )
            .finish()
    }
}

impl AdminKubeconfigRequest {
    /// A request body for a kubeconfig valid for `expiration_seconds`.
    pub fn with_expiration(expiration_seconds: i64) -> Self {
        Self::new(
            "",
            AdminKubeconfigRequestSpec {
                expiration_seconds: Some(expiration_seconds),
            },
        )
    }
}
