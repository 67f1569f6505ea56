//! Our kinds with a status (GardenerCluster, RuntimeAccess) as the reconcilers read them: the
//! status decoded apart from the rest.
//!
//! A list decodes as a whole, so one stored object whose status our types refuse (a condition
//! time with ten digits after the second, which the apiserver stores and Go reads; a value a
//! newer controller writes) would fail every list and watch of its kind and stop the
//! reconciler for all objects. [`StatusApart`] keeps such a status as where and why it does
//! not read: that object's reconcile fails naming the field ([`report_unreadable`]), the
//! others go on. The metadata and spec are decoded with the list: the CRD schema requires and
//! types every field of both specs, so the apiserver stores none our types refuse.
//!
//! The Runtime has its own cached form (`runtime::runtime_cache`), which also keeps the spec as
//! text to save memory.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kim_shared::api::runtime_access::{RuntimeAccess, RuntimeAccessSpec, RuntimeAccessStatus};
use kim_shared::api::{
    GardenerCluster, GardenerClusterSpec, GardenerClusterStatus, Unreadable, decode_field,
};
use kube::Resource;
use kube::runtime::events::{Event, EventType};
use serde::de::DeserializeOwned;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A custom resource of ours with a spec and a status.
pub trait WithStatus: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static {
    /// The spec type.
    type Spec: Serialize + DeserializeOwned + Clone + Debug + Send + Sync;
    /// The status type.
    type Status: Serialize + DeserializeOwned + Clone + Debug + Send + Sync;

    /// The object from its parts.
    fn from_parts(metadata: ObjectMeta, spec: Self::Spec, status: Option<Self::Status>) -> Self;
}

impl WithStatus for GardenerCluster {
    type Spec = GardenerClusterSpec;
    type Status = GardenerClusterStatus;

    fn from_parts(metadata: ObjectMeta, spec: Self::Spec, status: Option<Self::Status>) -> Self {
        Self {
            metadata,
            spec,
            status,
        }
    }
}

impl WithStatus for RuntimeAccess {
    type Spec = RuntimeAccessSpec;
    type Status = RuntimeAccessStatus;

    fn from_parts(metadata: ObjectMeta, spec: Self::Spec, status: Option<Self::Status>) -> Self {
        Self {
            metadata,
            spec,
            status,
        }
    }
}

/// An object's metadata as the watch caches keep it: serde skips `managedFields` while decoding.
///
/// No reconciler reads them from a cache, and decoded they are most of a list page: one field
/// tree per writer, a JSON value per field. A heap profile of a takeover at 1,000 Runtimes put
/// 4.0 of the 4.7 MiB that the pages in flight held in them. The answers to our own writes that
/// need them are read as other types (`PartialObjectMeta` for the Runtime status).
pub fn cached_metadata<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    // Every field of `ObjectMeta` but `managedFields`; the test below fails to build when
    // k8s-openapi adds one.
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Wire {
        annotations: Option<BTreeMap<String, String>>,
        creation_timestamp: Option<Time>,
        deletion_grace_period_seconds: Option<i64>,
        deletion_timestamp: Option<Time>,
        finalizers: Option<Vec<String>>,
        generate_name: Option<String>,
        generation: Option<i64>,
        labels: Option<BTreeMap<String, String>>,
        name: Option<String>,
        namespace: Option<String>,
        owner_references: Option<Vec<OwnerReference>>,
        resource_version: Option<String>,
        self_link: Option<String>,
        uid: Option<String>,
    }
    let w = Wire::deserialize(d)?;
    Ok(ObjectMeta {
        annotations: w.annotations,
        creation_timestamp: w.creation_timestamp,
        deletion_grace_period_seconds: w.deletion_grace_period_seconds,
        deletion_timestamp: w.deletion_timestamp,
        finalizers: w.finalizers,
        generate_name: w.generate_name,
        generation: w.generation,
        labels: w.labels,
        managed_fields: None,
        name: w.name,
        namespace: w.namespace,
        owner_references: w.owner_references,
        resource_version: w.resource_version,
        self_link: w.self_link,
        uid: w.uid,
    })
}

/// An object whose status was decoded apart (see the module documentation).
#[derive(Clone, Debug)]
pub struct StatusApart<K: WithStatus> {
    /// The object's metadata.
    pub metadata: ObjectMeta,
    /// The object's spec.
    pub spec: K::Spec,
    /// The status as stored, or where and why it does not read.
    status: Result<Option<K::Status>, Unreadable>,
    /// `status.state`, read even when the rest of the status does not: whether a
    /// GardenerCluster is Ready is all other reconcilers ask of its status.
    state: Option<String>,
}

impl<K: WithStatus> StatusApart<K> {
    /// The whole object; the field at fault when its status does not read.
    pub fn object(&self) -> Result<K, Unreadable> {
        Ok(K::from_parts(
            self.metadata.clone(),
            self.spec.clone(),
            self.status.clone()?,
        ))
    }

    /// The object without its status, which cleaning up after a deleted object does not need.
    pub fn without_status(&self) -> K {
        K::from_parts(self.metadata.clone(), self.spec.clone(), None)
    }

    /// The status, when there is one and it reads.
    pub fn status(&self) -> Option<&K::Status> {
        self.status.as_ref().ok().and_then(Option::as_ref)
    }

    /// Where and why the status does not read, if it does not.
    pub fn unreadable(&self) -> Option<&Unreadable> {
        self.status.as_ref().err()
    }

    /// `status.state`, also when the rest of the status does not read.
    pub fn state(&self) -> Option<&str> {
        self.state.as_deref()
    }
}

impl<'de, K: WithStatus> Deserialize<'de> for StatusApart<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire<S> {
            #[serde(default, deserialize_with = "cached_metadata")]
            metadata: ObjectMeta,
            spec: S,
            #[serde(default)]
            status: Option<serde_json::Value>,
        }
        let wire = Wire::<K::Spec>::deserialize(d)?;
        let state = wire
            .status
            .as_ref()
            .and_then(|s| s.get("state"))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned);
        let status = match wire.status {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(status) => decode_field(&status, "status").map(Some),
        };
        Ok(Self {
            metadata: wire.metadata,
            spec: wire.spec,
            status,
            state,
        })
    }
}

/// What kube's `finalizer` helper requires of the object type; it writes what reads (a status
/// that does not read is left out).
impl<K: WithStatus> Serialize for StatusApart<K> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut out = s.serialize_struct("StatusApart", 5)?;
        out.serialize_field("apiVersion", &K::api_version(&()))?;
        out.serialize_field("kind", &K::kind(&()))?;
        out.serialize_field("metadata", &self.metadata)?;
        out.serialize_field("spec", &self.spec)?;
        if let Ok(Some(status)) = &self.status {
            out.serialize_field("status", status)?;
        }
        out.end()
    }
}

impl<K: WithStatus> Resource for StatusApart<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The whole object; when its status does not read, the field at fault, reported as
/// [`report_unreadable`] does.
pub async fn object_or_report<K: WithStatus>(
    stored: &StatusApart<K>,
    recorder: &crate::context::EventPublisher,
    failures_before: u32,
) -> Result<K, Unreadable> {
    let read = stored.object();
    if let Err(why) = &read {
        report_unreadable(recorder, stored, failures_before, why).await;
    }
    read
}

/// Tells an object's readers that the controller cannot read it: a Warning Event `Unreadable`
/// naming the field, on the first failed reconcile in a row only (`failures_before`: the
/// failures before this one; the reconciler's log line follows at every retry).
pub async fn report_unreadable<K: Resource<DynamicType = ()>>(
    recorder: &crate::context::EventPublisher,
    object: &K,
    failures_before: u32,
    why: &Unreadable,
) {
    if failures_before > 0 {
        return;
    }
    let event = Event {
        type_: EventType::Warning,
        reason: "Unreadable".into(),
        note: Some(format!(
            "the controller cannot read this {} ({why}); it is not reconciled until the field is fixed",
            K::kind(&())
        )),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &object.object_ref(&())).await {
        tracing::info!(error = %e, "could not publish an Event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(status: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
            "kind": "GardenerCluster",
            "metadata": {"name": "rt-1", "namespace": "kcp-system"},
            "spec": {
                "kubeconfig": {"secret": {"key": "config", "name": "kubeconfig-rt-1", "namespace": "kcp-system"}},
                "shoot": {"name": "c-1"},
            },
            "status": status,
        })
    }

    fn condition(time: &str) -> serde_json::Value {
        serde_json::json!({"type": "KubeconfigReady", "status": "True", "reason": "KubeconfigSecretCreated",
            "message": "", "lastTransitionTime": time})
    }

    #[test]
    fn cached_metadata_is_all_of_it_but_managed_fields() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let time = Time("2026-12-01T00:00:00Z".parse().unwrap());
        let text = |s: &str| Some(s.to_owned());
        let map = |k: &str| Some(BTreeMap::from([(k.to_owned(), "v".to_owned())]));
        // A struct literal naming every field: a field k8s-openapi adds fails the build here.
        let full = ObjectMeta {
            annotations: map("a"),
            creation_timestamp: Some(time.clone()),
            deletion_grace_period_seconds: Some(30),
            deletion_timestamp: Some(time),
            finalizers: Some(vec!["f".into()]),
            generate_name: text("g-"),
            generation: Some(3),
            labels: map("l"),
            managed_fields: Some(vec![ManagedFieldsEntry {
                manager: text("kim"),
                ..Default::default()
            }]),
            name: text("rt-1"),
            namespace: text("kcp-system"),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Runtime".into(),
                name: "rt-1".into(),
                uid: "u-0".into(),
                ..Default::default()
            }]),
            resource_version: text("42"),
            self_link: text("/x"),
            uid: text("u-1"),
        };
        let cached = cached_metadata(serde_json::to_value(&full).unwrap()).unwrap();
        assert_eq!(
            cached,
            ObjectMeta {
                managed_fields: None,
                ..full
            }
        );
        let mut value = cluster(serde_json::json!({"state": "Ready"}));
        value["metadata"]["managedFields"] =
            serde_json::json!([{"manager": "kim", "fieldsV1": {"f:spec": {}}}]);
        let stored: StatusApart<GardenerCluster> = serde_json::from_value(value).unwrap();
        assert_eq!(stored.metadata.managed_fields, None);
        assert_eq!(stored.metadata.name.as_deref(), Some("rt-1"));
    }

    #[test]
    fn a_readable_object_reads_whole() {
        let value = cluster(serde_json::json!({"state": "Ready",
            "conditions": [condition("2026-12-01T00:00:00Z")]}));
        let stored: StatusApart<GardenerCluster> = serde_json::from_value(value.clone()).unwrap();
        let whole: GardenerCluster = serde_json::from_value(value).unwrap();
        assert_eq!(stored.object().unwrap(), whole);
        assert_eq!(stored.state(), Some("Ready"));
        assert!(stored.unreadable().is_none());
    }

    #[test]
    fn a_status_that_does_not_read_is_kept_as_its_field_and_state() {
        let value = cluster(serde_json::json!({"state": "Ready",
            "conditions": [condition("2026-12-01T00:00:00.1234567891Z")]}));
        assert!(serde_json::from_value::<GardenerCluster>(value.clone()).is_err());
        let stored: StatusApart<GardenerCluster> = serde_json::from_value(value).unwrap();
        let why = stored.object().unwrap_err();
        assert_eq!(why.field, "status.conditions[0].lastTransitionTime");
        assert_eq!(stored.unreadable(), Some(&why));
        assert_eq!(stored.state(), Some("Ready"), "the state still reads");
        let bare = stored.without_status();
        assert_eq!(bare.spec.shoot.name, "c-1");
        assert!(bare.status.is_none());
    }

    #[test]
    fn one_object_that_does_not_read_leaves_the_list_readable() {
        let list = serde_json::json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "GardenerClusterList",
            "metadata": {"resourceVersion": "7"},
            "items": [
                cluster(serde_json::json!({"state": "Ready", "conditions": [condition("2026-12-01T00:00:00Z")]})),
                cluster(serde_json::json!({"conditions": [condition("yesterday")]})),
                cluster(serde_json::Value::Null),
            ],
        });
        let read: kube::core::ObjectList<StatusApart<GardenerCluster>> =
            serde_json::from_value(list).unwrap();
        let unreadable: Vec<bool> = read
            .items
            .iter()
            .map(|o| o.unreadable().is_some())
            .collect();
        assert_eq!(unreadable, [false, true, false]);
        assert_eq!(read.items[2].object().unwrap().status, None);
    }

    #[test]
    fn it_serializes_what_reads() {
        let value = cluster(serde_json::json!({"state": "Ready",
            "conditions": [condition("2026-12-01T00:00:00Z")]}));
        let stored: StatusApart<GardenerCluster> = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(serde_json::to_value(&stored).unwrap(), value);
        let broken = cluster(serde_json::json!({"conditions": [condition("yesterday")]}));
        let stored: StatusApart<GardenerCluster> = serde_json::from_value(broken).unwrap();
        assert!(
            serde_json::to_value(&stored)
                .unwrap()
                .get("status")
                .is_none()
        );
    }

    #[test]
    fn a_runtime_access_status_reads_apart_too() {
        let value = serde_json::json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "RuntimeAccess",
            "metadata": {"name": "keb", "namespace": "kcp-system"},
            "spec": {"runtimeId": "rt-1", "serviceAccount": {"name": "keb", "namespace": "kyma-system"}},
            "status": {"state": "Ready", "tokenExpirationTimestamp": "soon"},
        });
        let stored: StatusApart<RuntimeAccess> = serde_json::from_value(value).unwrap();
        assert_eq!(
            stored.unreadable().map(|u| u.field.as_str()),
            Some("status.tokenExpirationTimestamp")
        );
        assert_eq!(stored.without_status().spec.runtime_id, "rt-1");
    }
}
