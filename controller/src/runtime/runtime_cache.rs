//! The Runtime as the Runtime reconciler keeps it in its watch cache.
//!
//! The cache holds every Runtime of the namespace for the life of the process, and the spec is
//! most of a Runtime: decoded into [`RuntimeSpec`], the AWS sample (`config/samples/`) takes
//! about 3.8 KB of heap (its worker pool is Gardener's whole `Worker` shape, mostly inline
//! options), its compact JSON text about 1.1 KB. [`CachedRuntime`] keeps the metadata and the
//! status decoded (the reconciler's routing, records and status decisions read them) and the
//! spec as text; a reconcile decodes the spec once ([`CachedRuntime::to_runtime`]), some tens
//! of microseconds against the requests it makes.
//!
//! A spec or status that does not decode (a status written by another controller or by hand, a
//! Runtime restored from a backup) fails that Runtime's reconcile, naming the field, and not
//! the watch of all Runtimes: a list fails as a whole, so one such Runtime would otherwise
//! stop the reconciler for every Runtime.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kim_shared::api::{
    Runtime, RuntimeSpec, RuntimeStatus, Unreadable, decode_field, decode_field_text,
};
use kube::Resource;
use serde::{Deserialize, Deserializer};

/// What the watch cache keeps of a Runtime.
#[derive(Clone, Debug)]
pub struct CachedRuntime {
    /// The Runtime's metadata, without managedFields ([`crate::stored::cached_metadata`]).
    pub metadata: ObjectMeta,
    /// The spec's compact JSON text.
    spec: Box<str>,
    /// `spec.shoot.name` (empty when missing), for log lines that have no decoded spec.
    shoot_name: Box<str>,
    /// The status as stored, or where and why it does not read.
    status: Result<Option<RuntimeStatus>, Unreadable>,
}

impl<'de> Deserialize<'de> for CachedRuntime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default, deserialize_with = "crate::stored::cached_metadata")]
            metadata: ObjectMeta,
            #[serde(default)]
            spec: serde_json::Value,
            #[serde(default)]
            status: Option<serde_json::Value>,
        }
        let wire = Wire::deserialize(d)?;
        let shoot_name = wire
            .spec
            .pointer("/shoot/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .into();
        let spec = serde_json::to_string(&wire.spec)
            .map_err(serde::de::Error::custom)?
            .into_boxed_str();
        let status = match wire.status {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(status) => decode_field(&status, "status").map(Some),
        };
        Ok(Self {
            metadata: wire.metadata,
            spec,
            shoot_name,
            status,
        })
    }
}

impl CachedRuntime {
    /// The whole Runtime, its spec decoded from the cached text; the field at fault when the
    /// spec or the status does not read.
    pub fn to_runtime(&self) -> Result<Runtime, Unreadable> {
        let spec: RuntimeSpec = decode_field_text(&self.spec, "spec")?;
        Ok(Runtime {
            metadata: self.metadata.clone(),
            spec,
            status: self.status.clone()?,
        })
    }

    /// The Runtime without its status (the spec decoded); the field at fault when the spec does
    /// not read.
    pub fn without_status(&self) -> Result<Runtime, Unreadable> {
        Ok(Runtime {
            metadata: self.metadata.clone(),
            spec: decode_field_text(&self.spec, "spec")?,
            status: None,
        })
    }

    /// The status as stored; `None` too when it does not read.
    pub fn status(&self) -> Option<&RuntimeStatus> {
        self.status.as_ref().ok().and_then(Option::as_ref)
    }

    /// `spec.shoot.name`, empty when missing.
    pub fn shoot_name(&self) -> &str {
        &self.shoot_name
    }
}

impl Resource for CachedRuntime {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Runtime::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        Runtime::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        Runtime::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        Runtime::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> serde_json::Value {
        let text = include_str!("../../../config/samples/runtime-aws.yaml");
        let mut value: serde_json::Value = serde_yaml_ng::from_str(text).unwrap();
        value["status"] = serde_json::json!({
            "state": "Ready", "observedGeneration": 2, "provisioningCompleted": true,
            "conditions": [{"type": "Provisioned", "status": "True", "reason": "ConfigurationCompleted",
                "message": "Runtime processing completed successfully",
                "lastTransitionTime": "2026-12-01T00:00:00Z", "observedGeneration": 2}]
        });
        value
    }

    #[test]
    fn the_cached_runtime_is_the_runtime_as_decoded_whole() {
        let value = sample();
        let full: Runtime = serde_json::from_value(value.clone()).unwrap();
        let cached: CachedRuntime = serde_json::from_str(&value.to_string()).unwrap();
        assert_eq!(cached.to_runtime().unwrap(), full);
        assert_eq!(cached.shoot_name(), full.spec.shoot.name);
        assert!(!cached.shoot_name().is_empty());
        // Decoded from a borrowed text too (what the watch does) and from a value.
        let from_value: CachedRuntime = serde_json::from_value(value).unwrap();
        assert_eq!(from_value.to_runtime().unwrap(), full);
    }

    #[test]
    fn managed_fields_are_not_kept() {
        let mut value = sample();
        value["metadata"]["managedFields"] = serde_json::json!([{"manager": "kyma-environment-broker",
            "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:shoot": {}}}}]);
        let cached: CachedRuntime = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(cached.metadata.managed_fields, None);
        let full: Runtime = serde_json::from_value(value).unwrap();
        assert_eq!(
            cached.metadata,
            ObjectMeta {
                managed_fields: None,
                ..full.metadata
            }
        );
    }

    #[test]
    fn a_status_stored_without_state_reads_as_pending() {
        // Upstream's CRD did not require `state` before October 2024.
        for status in [
            serde_json::json!({}),
            serde_json::json!({"conditions": [{"type": "Provisioned", "status": "Unknown",
                "reason": "Processing", "message": "", "lastTransitionTime": "2024-08-01T00:00:00Z"}]}),
        ] {
            let mut value = sample();
            value["status"] = status.clone();
            let cached: CachedRuntime = serde_json::from_value(value).expect("decodes");
            let state = cached.status().map(|s| s.state);
            assert_eq!(
                state,
                Some(kim_shared::api::RuntimeState::Pending),
                "{status}"
            );
        }
    }

    #[test]
    fn the_spec_is_kept_as_its_compact_text() {
        let value = sample();
        let cached: CachedRuntime = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&cached.spec).unwrap(),
            value["spec"]
        );
        assert!(!cached.spec.contains(char::is_whitespace));
    }

    #[test]
    fn a_spec_or_status_that_does_not_decode_fails_its_runtime_not_the_cache() {
        let mut bad_spec = sample();
        bad_spec["spec"]["shoot"]["provider"]["workers"] = serde_json::json!("not a list");
        // A condition time with ten fractional digits: the apiserver stores it, k8s-openapi's
        // `Time` refuses it.
        let mut bad_status = sample();
        bad_status["status"]["conditions"][0]["lastTransitionTime"] =
            serde_json::json!("2024-01-01T00:00:00.1234567891Z");
        for (value, field) in [
            (bad_spec, "spec.shoot.provider.workers"),
            (bad_status, "status.conditions[0].lastTransitionTime"),
        ] {
            // As the watch reads it: one item of a list.
            let list = serde_json::json!({
                "apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "RuntimeList",
                "metadata": {"resourceVersion": "1"}, "items": [value],
            })
            .to_string();
            let list: kube::core::ObjectList<CachedRuntime> =
                serde_json::from_str(&list).expect("the list decodes");
            let cached = list.items.into_iter().next().expect("one item");
            let err = cached.to_runtime().unwrap_err();
            assert_eq!(err.field, field);
            assert!(!err.reason.is_empty());
            assert_eq!(
                cached.metadata.name.as_deref(),
                Some("dbfd7ad6-b625-4bf2-9718-c1dbf22a7b94")
            );
            assert!(cached.status().is_none() || field.starts_with("spec"));
            // Without its status (what a deletion reads): only a spec at fault fails.
            match (field.starts_with("spec"), cached.without_status()) {
                (false, Ok(runtime)) => {
                    assert!(runtime.status.is_none());
                    assert!(!runtime.spec.shoot.name.is_empty());
                }
                (true, Err(e)) => assert_eq!(e.field, field),
                (spec_at_fault, other) => {
                    panic!("{field} (spec at fault: {spec_at_fault}): {other:?}")
                }
            }
        }
    }
}
