//! The Shoot changes server-side apply cannot make, done as one full update (PUT) of the live
//! object as Gardener stores it.
//!
//! Two cases:
//! - **worker pools removed** (upstream issue 640): SSA merges the `workers` list by name and
//!   keeps pools another manager co-owns, so the removed pool would stay;
//! - **`secretBindingName` migration**: a Shoot created by upstream KIM (or before Gardener
//!   deprecated it) carries `spec.secretBindingName`, which our field manager does not own.
//!   Applying `credentialsBindingName` over it would leave both set, which Gardener refuses
//!   (mutually exclusive); Gardener accepts the migration only when one update sets
//!   `credentialsBindingName` and removes `secretBindingName`.
//!
//! The update starts from the raw JSON of the live Shoot (read fresh, with its
//! `resourceVersion`), not from our typed [`Shoot`]: the typed model leaves out fields we do not
//! manage, and a PUT of it would silently drop them from the stored Shoot.

use kim_shared::gardener::Shoot;
use serde_json::Value;

/// What the full update changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FullUpdate {
    /// Replace `spec.provider.workers` (and the provider configs that describe the pools).
    pub workers: bool,
    /// Replace `spec.secretBindingName` with `spec.credentialsBindingName`.
    pub migrate_binding: bool,
}

impl FullUpdate {
    /// What `live` needs before `converted` can be applied; `None` when SSA alone suffices.
    pub fn needed(live: &Shoot, converted: &Shoot, workers_removed: bool) -> Option<Self> {
        let migrate_binding = live.spec.secret_binding_name.is_some()
            && converted.spec.credentials_binding_name.is_some();
        let update = Self {
            workers: workers_removed,
            migrate_binding,
        };
        (update != Self::default()).then_some(update)
    }

    /// Short reason for the log.
    pub fn why(&self) -> &'static str {
        match (self.workers, self.migrate_binding) {
            (true, true) => "worker pools removed and secretBindingName migration",
            (true, false) => "worker pools removed",
            (false, _) => "secretBindingName migration",
        }
    }

    /// Rewrites the raw live Shoot `raw` in place. Every field this update does not name is
    /// kept as stored, including fields our typed model does not know.
    pub fn apply(&self, raw: &mut Value, converted: &Shoot) -> Result<(), &'static str> {
        let spec = raw
            .get_mut("spec")
            .and_then(Value::as_object_mut)
            .ok_or("the live Shoot has no spec object")?;
        if self.migrate_binding {
            spec.remove("secretBindingName");
            if let Some(name) = &converted.spec.credentials_binding_name {
                spec.insert("credentialsBindingName".into(), Value::String(name.clone()));
            }
        }
        if self.workers {
            let provider = spec
                .get_mut("provider")
                .and_then(Value::as_object_mut)
                .ok_or("the live Shoot has no spec.provider object")?;
            let want = &converted.spec.provider;
            provider.insert("workers".into(), to_value(&want.workers)?);
            for (key, value) in [
                ("infrastructureConfig", &want.infrastructure_config),
                ("controlPlaneConfig", &want.control_plane_config),
            ] {
                match value {
                    Some(v) => {
                        provider.insert(key.into(), to_value(v)?);
                    }
                    None => {
                        provider.remove(key);
                    }
                }
            }
        }
        if let Some(meta) = raw.get_mut("metadata").and_then(Value::as_object_mut) {
            // The apiserver refuses a PUT carrying managedFields it did not expect to change;
            // leaving them out keeps the stored ones.
            meta.remove("managedFields");
        }
        Ok(())
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Result<Value, &'static str> {
    serde_json::to_value(v).map_err(|_| "the converted worker pools do not serialize")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shoot(v: Value) -> Shoot {
        serde_json::from_value(v).unwrap()
    }

    fn live_raw() -> Value {
        json!({
            "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
            "metadata": {"name": "s1", "namespace": "garden-kyma", "resourceVersion": "42",
                "managedFields": [{"manager": "kim"}], "annotations": {"keep": "me"}},
            "spec": {
                "region": "eu-central-1", "kubernetes": {"version": "1.33.9"},
                "secretBindingName": "aws-binding",
                "futureField": {"unknown": true},
                "provider": {"type": "aws",
                    "workers": [{"name": "a", "machine": {"type": "m5.large"}, "minimum": 1, "maximum": 3},
                                {"name": "b", "machine": {"type": "m5.large"}, "minimum": 1, "maximum": 3}],
                    "infrastructureConfig": {"zones": ["a", "b"]},
                    "workersSettings": {"sshAccess": {"enabled": false}}}
            },
            "status": {"technicalID": "shoot--kyma--s1"}
        })
    }

    fn converted(with_infra: bool) -> Shoot {
        let mut provider = json!({"type": "aws",
            "workers": [{"name": "a", "machine": {"type": "m5.large"}, "minimum": 1, "maximum": 3}]});
        if with_infra {
            provider["infrastructureConfig"] = json!({"zones": ["a"]});
        }
        shoot(json!({"metadata": {"name": "s1"},
            "spec": {"region": "eu-central-1", "kubernetes": {"version": "1.33.9"},
                     "credentialsBindingName": "aws-binding",
                     "provider": provider}}))
    }

    #[test]
    fn not_needed_for_a_plain_patch() {
        let mut live = shoot(live_raw());
        live.spec.secret_binding_name = None;
        assert_eq!(FullUpdate::needed(&live, &converted(true), false), None);
    }

    #[test]
    fn migration_is_needed_when_the_live_shoot_has_a_secret_binding() {
        let live = shoot(live_raw());
        let got = FullUpdate::needed(&live, &converted(true), false).unwrap();
        assert!(got.migrate_binding && !got.workers);
        let both = FullUpdate::needed(&live, &converted(true), true).unwrap();
        assert!(both.migrate_binding && both.workers);
    }

    #[test]
    fn migration_swaps_the_binding_and_keeps_everything_else() {
        let mut raw = live_raw();
        let update = FullUpdate {
            workers: false,
            migrate_binding: true,
        };
        update.apply(&mut raw, &converted(true)).unwrap();
        assert_eq!(raw["spec"].get("secretBindingName"), None);
        assert_eq!(raw["spec"]["credentialsBindingName"], "aws-binding");
        // Unmodelled and unmanaged fields survive, the resourceVersion guards the PUT.
        assert_eq!(raw["spec"]["futureField"], json!({"unknown": true}));
        assert_eq!(
            raw["spec"]["provider"]["workers"].as_array().unwrap().len(),
            2
        );
        assert_eq!(raw["metadata"]["resourceVersion"], "42");
        assert_eq!(raw["metadata"]["annotations"]["keep"], "me");
        assert_eq!(raw["metadata"].get("managedFields"), None);
        assert_eq!(raw["status"]["technicalID"], "shoot--kyma--s1");
    }

    #[test]
    fn worker_removal_replaces_pools_and_provider_configs_only() {
        let mut raw = live_raw();
        let update = FullUpdate {
            workers: true,
            migrate_binding: false,
        };
        update.apply(&mut raw, &converted(true)).unwrap();
        let workers = raw["spec"]["provider"]["workers"].as_array().unwrap();
        assert_eq!(workers.len(), 1);
        assert_eq!(workers[0]["name"], "a");
        assert_eq!(
            raw["spec"]["provider"]["infrastructureConfig"],
            json!({"zones": ["a"]})
        );
        assert_eq!(
            raw["spec"]["provider"]["workersSettings"],
            json!({"sshAccess": {"enabled": false}})
        );
        assert_eq!(raw["spec"]["secretBindingName"], "aws-binding");
        assert_eq!(raw["spec"]["futureField"], json!({"unknown": true}));

        // A config the conversion no longer produces is removed, not kept stale.
        let mut raw = live_raw();
        update.apply(&mut raw, &converted(false)).unwrap();
        assert_eq!(raw["spec"]["provider"].get("infrastructureConfig"), None);
    }

    #[test]
    fn a_shoot_without_spec_is_an_error_not_a_panic() {
        let mut raw = json!({"metadata": {"name": "x"}});
        let update = FullUpdate {
            workers: true,
            migrate_binding: false,
        };
        assert!(update.apply(&mut raw, &converted(true)).is_err());
    }
}
