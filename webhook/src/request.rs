//! What every part of the webhook shares about one admission: which webhook answers ([`Mode`]),
//! the settings of the admitted types ([`AdmissionContext`]) and the decoded request
//! ([`Request`]). Nearly a leaf: it uses only the CloudProfile cache (`profiles`, a leaf), so
//! decoding, the handlers and the audit trail all depend on it and not on each other.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::admission::Operation;
use kube::core::{GroupVersionKind, GroupVersionResource, Resource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The `apiVersion` of the only AdmissionReview version we speak.
pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

/// A resource type the webhook can admit: a Kubernetes object that serde reads and writes.
pub trait Object:
    Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Send + Sync + 'static
{
}

impl<T> Object for T where
    T: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Send + Sync + 'static
{
}

/// Which webhook is answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Defaulting; answers with a JSON patch.
    Mutate,
    /// Validation; answers allowed or denied.
    Validate,
}

impl Mode {
    /// Name used in metrics and audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Mutate => "mutate",
            Mode::Validate => "validate",
        }
    }
}

/// Settings the admitted types need besides the object. The admitted types' defaults and
/// rules are implemented on it (the `Defaulter` and `Validator` traits).
#[derive(Debug, Clone)]
pub struct AdmissionContext {
    /// Deletion protection of Runtimes.
    pub deletion_protection: bool,
    /// How old a deletion confirmation may be.
    pub deletion_window: Duration,
    /// Users whose Runtime deletes need no confirmation (KEB's ServiceAccount by default).
    pub deletion_trusted_principals: Vec<String>,
    /// The KIM configuration (defaults and allowed values); `None` denies Runtimes.
    pub config: Option<Arc<kim_shared::config::KimConfig>>,
    /// The Gardener CloudProfiles Runtimes are checked against (`--gardener-kubeconfig-path`);
    /// `None`: only the configuration's rules apply.
    pub cloud_profiles: Option<Arc<crate::profiles::CloudProfiles>>,
    /// What RuntimeAccess objects may grant.
    pub access_policy: kim_shared::access::AccessPolicy,
    /// Settings of the Runtime validation that are flags (`--audit-log-mandatory`), the same
    /// as the controller's so that what is admitted is provisioned.
    pub validation: kim_shared::validation::ValidationOptions,
}

impl Default for AdmissionContext {
    fn default() -> Self {
        Self {
            deletion_protection: true,
            deletion_window: Duration::from_secs(120),
            deletion_trusted_principals: kim_shared::validation::DeletionPolicy::default()
                .trusted_principals,
            config: None,
            cloud_profiles: None,
            access_policy: kim_shared::access::AccessPolicy::default(),
            validation: kim_shared::validation::ValidationOptions::default(),
        }
    }
}

/// The request of an AdmissionReview: what the handlers judge and the audit record names. `T`
/// is the objects' type: the admitted type, or their JSON text as sent while decoding
/// (the `decode` module). Only what the webhook uses is read; `requestKind`, `options` and the
/// like are skipped by the parser.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request<T> {
    /// Copied into the response; correlates with the apiserver's audit log.
    pub uid: String,
    /// Kind of the object, as the apiserver names it.
    pub kind: GroupVersionKind,
    /// Resource of the object (required in a review; not judged).
    pub resource: GroupVersionResource,
    /// `status` and the like; subresources are not judged.
    #[serde(default)]
    pub sub_resource: Option<String>,
    /// Name of the object (empty on CREATE with generateName).
    #[serde(default)]
    pub name: String,
    /// Namespace of the object.
    #[serde(default)]
    pub namespace: Option<String>,
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: Operation,
    /// Who asks, as the apiserver authenticated them.
    pub user_info: UserInfo,
    /// The object as sent (CREATE, UPDATE).
    pub object: Option<T>,
    /// The stored object (UPDATE, DELETE); `None` when it does not read as `T`
    /// (`old_object_unreadable`).
    pub old_object: Option<T>,
    /// The stored object when it does not read as `T`: what it is judged on instead.
    #[serde(skip)]
    pub old_object_unreadable: Option<UnreadableOld>,
    /// Whether nothing will be persisted.
    #[serde(default)]
    pub dry_run: bool,
}

impl<T> Request<T> {
    /// The same request with `object` and `old_object` in place of its own (and no unreadable
    /// stored object).
    pub fn with_objects<U>(self, object: Option<U>, old_object: Option<U>) -> Request<U> {
        Request {
            uid: self.uid,
            kind: self.kind,
            resource: self.resource,
            sub_resource: self.sub_resource,
            name: self.name,
            namespace: self.namespace,
            operation: self.operation,
            user_info: self.user_info,
            object,
            old_object,
            old_object_unreadable: None,
            dry_run: self.dry_run,
        }
    }
}

/// A stored object that does not read as its type (written before a rule or a type existed, or
/// by hand): its metadata, and the first field at fault with serde's reason.
#[derive(Debug, Clone)]
pub struct UnreadableOld {
    /// The object's metadata (without `managedFields`).
    pub metadata: ObjectMeta,
    /// Path of the value at fault (`spec.shoot.name`, `.` for the object itself).
    pub field: String,
    /// Why it is not the type's.
    pub reason: String,
}

/// The name of an operation as the apiserver spells it.
pub fn operation_name(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}
