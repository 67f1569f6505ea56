//! `CredentialsBinding` (`security.gardener.cloud/v1alpha1`, namespaced): binds provider
//! credentials to shoots in a project. Its fields sit at the top level, without `spec`.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// The fields of a CredentialsBinding (serialized at the top level of the object).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "security.gardener.cloud",
    version = "v1alpha1",
    kind = "CredentialsBinding",
    namespaced,
    no_spec,
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsBindingFields {
    /// The Secret or WorkloadIdentity holding the credentials.
    pub credentials_ref: ObjectReference,
    /// Provider the credentials are for.
    pub provider: BindingProvider,
    /// Quotas that apply to shoots using this binding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quotas: Option<Vec<ObjectReference>>,
}

/// `provider` of a CredentialsBinding.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct BindingProvider {
    /// Provider type; must equal the shoot's `provider.type`.
    #[serde(rename = "type")]
    pub type_: String,
}
