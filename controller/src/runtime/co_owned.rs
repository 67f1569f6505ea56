//! Fields a Shoot's earlier writes co-own with `kim`'s apply, and how to let them go.
//!
//! Server-side apply removes a field the applier no longer sets only when no other field
//! manager owns it. The Shoot's create (a POST), a full update (a PUT) and upstream KIM's
//! create are `Update` entries in `metadata.managedFields`, and each keeps owning what it wrote,
//! so a field that `kim`'s apply has set since and that a later conversion drops (a feature gate
//! gone from the configuration, a worker pool's label removed from the Runtime) would stay on
//! the Shoot for good. After an apply, the fields `kim`'s `Apply` entry owns are taken out of
//! those `Update` entries (as client-go's `csaupgrade` moves ownership), so the next apply
//! releases whatever the conversion stopped setting. What only those entries own is left alone:
//! the fields the patch leaves out on purpose (networking, tolerations, service account
//! settings), what Gardener defaulted at the create, and `spec.dns` (see [`releasable`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kim_shared::gardener::Shoot;
use kim_shared::names;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Map, Value, json};

/// Managers of the `Update` entries that are ours: the create and the deletion patches
/// (`kim-controller`, from the User-Agent), the full update (`kim`), and upstream KIM's create
/// (its binary, `manager`) on Shoots taken over from it.
pub const OUR_UPDATE_MANAGERS: [&str; 3] = ["kim-controller", names::FIELD_MANAGER, "manager"];

/// The managedFields with what `kim`'s `Apply` entry owns taken out of our `Update` entries
/// (entries left empty dropped); `None` when no `Update` entry of ours co-owns a field with it.
/// Entries of another API version are not compared: a field set is only meaningful in its own.
pub fn without_co_owned(entries: &[ManagedFieldsEntry]) -> Option<Vec<ManagedFieldsEntry>> {
    let apply = entries.iter().find(|e| {
        e.manager.as_deref() == Some(names::FIELD_MANAGER)
            && e.operation.as_deref() == Some("Apply")
            && is_main_resource(e)
    })?;
    let applied = fields(apply)?;
    let mut changed = false;
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let ours = entry.operation.as_deref() == Some("Update")
            && entry
                .manager
                .as_deref()
                .is_some_and(|m| OUR_UPDATE_MANAGERS.contains(&m))
            && is_main_resource(entry)
            && entry.api_version == apply.api_version;
        let Some(owned) = fields(entry).filter(|_| ours) else {
            out.push(entry.clone());
            continue;
        };
        let mut left = owned.clone();
        if !subtract(&mut left, &releasable(applied)) {
            out.push(entry.clone());
            continue;
        }
        changed = true;
        if !left.is_empty() {
            let mut kept = entry.clone();
            kept.fields_v1 = Some(FieldsV1(Value::Object(left)));
            out.push(kept);
        }
    }
    changed.then_some(out)
}

/// Takes the fields `kim`'s apply owns out of our `Update` entries of the Shoot `applied` (the
/// answer to that apply), in one JSON patch that holds only while the Shoot is still at the
/// answer's resourceVersion. `Ok(false)` when there was nothing to take out. A Shoot written
/// in between refuses the patch; the next apply's answer is compared again.
pub async fn hand_over(api: &Api<Shoot>, applied: &Shoot) -> Result<bool, kube::Error> {
    let Some(entries) = applied
        .metadata
        .managed_fields
        .as_deref()
        .and_then(without_co_owned)
    else {
        return Ok(false);
    };
    let patch = json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": applied.resource_version()},
        {"op": "replace", "path": "/metadata/managedFields", "value": entries},
    ]);
    let patch: json_patch::Patch =
        serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
    api.patch(
        &applied.name_any(),
        &PatchParams::default(),
        &Patch::Json::<()>(patch),
    )
    .await?;
    Ok(true)
}

/// What of `kim`'s field set may be taken from the `Update` entries: all but `spec.dns`. The
/// patch writes DNS only while the configuration names an external provider, and Gardener
/// refuses a change of the domain, so DNS stays co-owned by the create and is never released.
fn releasable(applied: &Map<String, Value>) -> Map<String, Value> {
    let mut out = applied.clone();
    if let Some(Value::Object(spec)) = out.get_mut("f:spec") {
        spec.remove("f:dns");
    }
    out
}

/// The status subresource has entries of its own; only the object's are compared.
fn is_main_resource(entry: &ManagedFieldsEntry) -> bool {
    entry.subresource.as_deref().is_none_or(str::is_empty)
}

fn fields(entry: &ManagedFieldsEntry) -> Option<&Map<String, Value>> {
    if entry.fields_type.as_deref() != Some("FieldsV1") {
        return None;
    }
    entry.fields_v1.as_ref()?.0.as_object()
}

/// Removes from `owned` every field `other` owns too, in the FieldsV1 encoding: a key maps to
/// an empty object when the field (or, for `"."`, the node itself) is owned as a whole, and to
/// the set of its children otherwise. A node left without children is removed, since an empty
/// object would claim the whole field. A field owned whole on one side and by children on the
/// other is kept: that mismatch means the two sets do not describe the same schema. Returns
/// whether anything was removed.
fn subtract(owned: &mut Map<String, Value>, other: &Map<String, Value>) -> bool {
    let mut removed = false;
    for (key, theirs) in other {
        let Some(Value::Object(mine)) = owned.get_mut(key) else {
            continue;
        };
        let Value::Object(theirs) = theirs else {
            continue;
        };
        match (mine.is_empty(), theirs.is_empty()) {
            (true, true) => {
                owned.remove(key);
                removed = true;
            }
            (false, false) if subtract(mine, theirs) => {
                removed = true;
                if mine.is_empty() {
                    owned.remove(key);
                }
            }
            _ => {}
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(manager: &str, operation: &str, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: Some("core.gardener.cloud/v1beta1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: None,
            time: None,
        }
    }

    fn fields_of(entries: &[ManagedFieldsEntry], manager: &str, operation: &str) -> Option<Value> {
        entries
            .iter()
            .find(|e| {
                e.manager.as_deref() == Some(manager) && e.operation.as_deref() == Some(operation)
            })
            .and_then(|e| e.fields_v1.clone())
            .map(|f| f.0)
    }

    /// The create owns DNS, a worker pool and its label, a feature gate and a label; the apply
    /// owns the DNS domain and the same pool, label and gate. The create keeps DNS (never
    /// released) and what the apply does not own, and no node it keeps is left empty.
    #[test]
    fn the_create_keeps_only_what_the_apply_does_not_own() {
        let create = json!({
            "f:metadata": {"f:labels": {".": {}, "f:a": {}, "f:b": {}}},
            "f:spec": {
                "f:dns": {".": {}, "f:domain": {}},
                "f:kubernetes": {"f:kubeAPIServer": {"f:featureGates": {".": {}, "f:G": {}}}},
                "f:provider": {"f:workers": {
                    "k:{\"name\":\"cpu-worker-0\"}": {".": {}, "f:name": {}, "f:maximum": {},
                        "f:labels": {".": {}, "f:team": {}}},
                }},
            },
        });
        let apply = json!({
            "f:metadata": {"f:labels": {"f:a": {}}},
            "f:spec": {
                "f:dns": {"f:domain": {}},
                "f:kubernetes": {"f:kubeAPIServer": {"f:featureGates": {"f:G": {}}}},
                "f:provider": {"f:workers": {
                    "k:{\"name\":\"cpu-worker-0\"}": {".": {}, "f:name": {}, "f:maximum": {},
                        "f:labels": {"f:team": {}}},
                }},
            },
        });
        let status = ManagedFieldsEntry {
            subresource: Some("status".into()),
            ..entry("kim-controller", "Update", json!({"f:status": {".": {}}}))
        };
        let before = vec![
            entry("kim-controller", "Update", create),
            entry("kim", "Apply", apply.clone()),
            status.clone(),
        ];
        let after = without_co_owned(&before).expect("the create co-owns fields");
        assert_eq!(
            fields_of(&after, "kim-controller", "Update"),
            Some(json!({
                "f:metadata": {"f:labels": {".": {}, "f:b": {}}},
                "f:spec": {
                    "f:dns": {".": {}, "f:domain": {}},
                    "f:kubernetes": {"f:kubeAPIServer": {"f:featureGates": {".": {}}}},
                    "f:provider": {"f:workers": {
                        "k:{\"name\":\"cpu-worker-0\"}": {"f:labels": {".": {}}},
                    }},
                },
            }))
        );
        assert_eq!(fields_of(&after, "kim", "Apply"), Some(apply));
        assert!(after.contains(&status), "the status entry is not compared");
        assert_eq!(
            without_co_owned(&after),
            None,
            "a second pass finds nothing"
        );
    }

    #[test]
    fn an_entry_left_empty_goes_and_foreign_entries_stay() {
        let apply = json!({"f:spec": {"f:provider": {"f:workers": {}}}});
        let before = vec![
            entry(
                "kim",
                "Update",
                json!({"f:spec": {"f:provider": {"f:workers": {}}}}),
            ),
            entry(
                "manager",
                "Update",
                json!({"f:spec": {"f:provider": {"f:workers": {}}}}),
            ),
            entry("gardener-controller-manager", "Update", apply.clone()),
            entry("kim", "Apply", apply),
        ];
        let after = without_co_owned(&before).expect("our updates co-own the workers");
        let managers: Vec<_> = after
            .iter()
            .map(|e| (e.manager.as_deref(), e.operation.as_deref()))
            .collect();
        assert_eq!(
            managers,
            [
                (Some("gardener-controller-manager"), Some("Update")),
                (Some("kim"), Some("Apply"))
            ]
        );
    }

    #[test]
    fn nothing_to_do_without_an_apply_or_an_overlap_or_in_another_version() {
        let create = json!({"f:spec": {"f:dns": {".": {}}}});
        assert_eq!(
            without_co_owned(&[entry("kim-controller", "Update", create.clone())]),
            None
        );
        assert_eq!(
            without_co_owned(&[
                entry("kim-controller", "Update", create.clone()),
                entry("kim", "Apply", json!({"f:spec": {"f:hibernation": {}}})),
            ]),
            None
        );
        let old_version = ManagedFieldsEntry {
            api_version: Some("core.gardener.cloud/v1alpha1".into()),
            ..entry("kim-controller", "Update", create.clone())
        };
        assert_eq!(
            without_co_owned(&[old_version, entry("kim", "Apply", create)]),
            None
        );
    }

    /// A field owned whole by one entry and by its children in the other is not touched.
    #[test]
    fn a_whole_field_against_its_children_is_kept() {
        let before = vec![
            entry("kim-controller", "Update", json!({"f:spec": {"f:x": {}}})),
            entry("kim", "Apply", json!({"f:spec": {"f:x": {"f:y": {}}}})),
        ];
        assert_eq!(without_co_owned(&before), None);
    }
}
