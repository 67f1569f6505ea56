//! Fields a Shoot's earlier writes co-own with `kim`'s apply, and how to let them go; and the
//! same for the status of a Runtime and the OpenIDConnects that upstream KIM wrote
//! ([`take_over`]).
//!
//! Server-side apply removes a field the applier no longer sets only when no other field
//! manager owns it. The Shoot's create (a POST), a full update (a PUT) and upstream KIM's
//! create are `Update` entries in `metadata.managedFields`, and each keeps owning what it wrote,
//! so a field that `kim`'s apply has set since and that a later conversion drops (a feature gate
//! gone from the configuration, a worker pool's label removed from the Runtime) would stay on
//! the Shoot for good. Around each apply, the fields `kim`'s `Apply` entry owns in the parts a
//! Runtime or the configuration decide as a whole ([`RELEASABLE`]) are taken out of those
//! `Update` entries (as client-go's `csaupgrade` moves ownership, with a JSON patch), so an apply releases
//! whatever the conversion stopped setting there. Everything else the create wrote stays
//! co-owned: the fields the patch leaves out on purpose (networking, tolerations, service
//! account settings), what Gardener defaulted, and what the patch writes only under a condition
//! that can change for reasons other than a decision to remove it (DNS, the audit policy, EU
//! access restrictions, the maintenance window of a region).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kim_shared::gardener::Shoot;
use kim_shared::names;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Map, Value, json};

/// Managers of the `Update` entries that are ours: the create and the deletion patches
/// (`kim-controller`, from the User-Agent) and the full update (`kim`).
pub const OUR_UPDATE_MANAGERS: [&str; 2] = [crate::context::CONTROLLER_NAME, names::FIELD_MANAGER];

/// Manager of upstream KIM's create (client-go names it after the binary, `manager` in
/// upstream's image) on Shoots taken over from it. Any tool built with kubebuilder's defaults
/// has that name, so its entry counts as ours only when it holds what upstream's create writes
/// and nothing else does: the runtime-id annotation.
const UPSTREAM_CREATE_MANAGER: &str = "manager";

/// Whether `entry` is an `Update` of ours (see [`OUR_UPDATE_MANAGERS`] and
/// [`UPSTREAM_CREATE_MANAGER`]).
fn is_our_update(entry: &ManagedFieldsEntry) -> bool {
    if entry.operation.as_deref() != Some("Update") || !is_main_resource(entry) {
        return false;
    }
    match entry.manager.as_deref() {
        Some(m) if OUR_UPDATE_MANAGERS.contains(&m) => true,
        Some(UPSTREAM_CREATE_MANAGER) => fields(entry).is_some_and(|f| {
            let key = format!("f:{}", names::SHOOT_ANNOTATION_RUNTIME_ID);
            get_at(f, &["f:metadata", "f:annotations", &key]).is_some()
        }),
        _ => false,
    }
}

/// One of our `Update` entries that co-owns fields with `kim`'s apply: its position in
/// `metadata.managedFields` and what it keeps (`None`: nothing, the entry goes).
#[derive(Debug, Clone, PartialEq)]
struct Release {
    /// Index in `metadata.managedFields`.
    index: usize,
    /// The entry's fields without the released ones; `None` when none is left.
    keeps: Option<Map<String, Value>>,
}

/// What `kim`'s `Apply` entry owns, to be taken out of our `Update` entries (ascending
/// indexes); empty when no `Update` entry of ours co-owns a field with it. Entries of another
/// API version are not compared: a field set is only meaningful in its own.
fn releases(entries: &[ManagedFieldsEntry]) -> Vec<Release> {
    let Some(apply) = entries.iter().find(|e| {
        e.manager.as_deref() == Some(names::FIELD_MANAGER)
            && e.operation.as_deref() == Some("Apply")
            && is_main_resource(e)
    }) else {
        return Vec::new();
    };
    let Some(applied) = fields(apply) else {
        return Vec::new();
    };
    let released = releasable(applied);
    let mut out = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        if !is_our_update(entry) || entry.api_version != apply.api_version {
            continue;
        }
        let Some(owned) = fields(entry) else {
            continue;
        };
        let mut left = owned.clone();
        if subtract(&mut left, &released) {
            out.push(Release {
                index,
                keeps: (!left.is_empty()).then_some(left),
            });
        }
    }
    out
}

/// The JSON patch of [`releases`]: for each entry, highest index first (so that a removal does
/// not move the ones still to come), a `test` that the entry is still exactly as read, then
/// the new `fieldsV1` or its removal. Only the entries it changes are guarded: Gardener writes
/// the Shoot's status right after an apply raised the generation, and its writes change other
/// entries (and the resourceVersion), not ours.
fn release_patch(entries: &[ManagedFieldsEntry]) -> Result<Option<json_patch::Patch>, kube::Error> {
    let releases = releases(entries);
    if releases.is_empty() {
        return Ok(None);
    }
    let mut ops = Vec::new();
    for r in releases.iter().rev() {
        let path = format!("/metadata/managedFields/{}", r.index);
        let read = serde_json::to_value(&entries[r.index]).map_err(kube::Error::SerdeError)?;
        ops.push(json!({"op": "test", "path": path, "value": read}));
        match &r.keeps {
            Some(left) => ops
                .push(json!({"op": "replace", "path": format!("{path}/fieldsV1"), "value": left})),
            None => ops.push(json!({"op": "remove", "path": path})),
        }
    }
    serde_json::from_value(Value::Array(ops))
        .map(Some)
        .map_err(kube::Error::SerdeError)
}

/// Takes the releasable fields `kim`'s apply owns out of our `Update` entries of `shoot` (the
/// live Shoot before an apply, or the apply's answer) in one JSON patch ([`release_patch`]).
/// `Ok(false)` when there was nothing to take out. An entry of ours written in between fails
/// the patch's test (422): the Shoot is read again and compared anew, up to
/// [`HAND_OVER_ATTEMPTS`] times.
pub async fn hand_over(api: &Api<Shoot>, shoot: &Shoot) -> Result<bool, kube::Error> {
    let name = shoot.name_any();
    let mut read_again: Option<Shoot> = None;
    let mut attempt = 1;
    loop {
        let current = read_again.as_ref().unwrap_or(shoot);
        let entries = current
            .metadata
            .managed_fields
            .as_deref()
            .unwrap_or_default();
        let Some(patch) = release_patch(entries)? else {
            return Ok(false);
        };
        match api
            .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(e)) if e.code == 422 && attempt < HAND_OVER_ATTEMPTS => {
                read_again = Some(api.get(&name).await?);
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Attempts of [`hand_over`] against a Shoot that others keep writing.
const HAND_OVER_ATTEMPTS: u32 = 3;

/// The parts of a Shoot whose content the Runtime or the configuration decide as a whole, so
/// that what the conversion no longer writes there is meant to go: the worker pools, the
/// kube-apiserver's feature gates and runtime config, the kubelets' feature gates, and the
/// extensions (the patch writes the live list with its changes).
pub const RELEASABLE: [&[&str]; 5] = [
    &["f:spec", "f:provider", "f:workers"],
    &[
        "f:spec",
        "f:kubernetes",
        "f:kubeAPIServer",
        "f:featureGates",
    ],
    &[
        "f:spec",
        "f:kubernetes",
        "f:kubeAPIServer",
        "f:runtimeConfig",
    ],
    &["f:spec", "f:kubernetes", "f:kubelet", "f:featureGates"],
    &["f:spec", "f:extensions"],
];

/// `kim`'s field set cut down to the [`RELEASABLE`] parts.
fn releasable(applied: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for path in RELEASABLE {
        if let Some(value) = get_at(applied, path) {
            insert_at(&mut out, path, value.clone());
        }
    }
    out
}

fn get_at<'a>(map: &'a Map<String, Value>, path: &[&str]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    let value = map.get(*first)?;
    match rest {
        [] => Some(value),
        _ => get_at(value.as_object()?, rest),
    }
}

fn insert_at(map: &mut Map<String, Value>, path: &[&str], value: Value) {
    match path {
        [] => {}
        [last] => {
            map.insert((*last).to_owned(), value);
        }
        [first, rest @ ..] => {
            let next = map
                .entry((*first).to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(next) = next {
                insert_at(next, rest, value);
            }
        }
    }
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

/// Removes from `owned` every path `other` holds too, in the FieldsV1 encoding: a key maps to
/// the set of its children, and the key itself is a member of the set when that set is empty or
/// has the child `"."` (`{}` and `{".": {}}` say the same). A key left with neither children
/// nor membership is removed. Returns whether anything was removed.
fn subtract(owned: &mut Map<String, Value>, other: &Map<String, Value>) -> bool {
    let mut removed = false;
    for (key, theirs) in other {
        if key == "." {
            continue;
        }
        let (Some(Value::Object(mine)), Value::Object(theirs)) = (owned.get_mut(key), theirs)
        else {
            continue;
        };
        let member = |m: &Map<String, Value>| m.is_empty() || m.contains_key(".");
        let (was_member, theirs_member) = (member(mine), member(theirs));
        let mut children = mine.clone();
        children.remove(".");
        let changed_children = subtract(&mut children, theirs);
        let still_member = was_member && !theirs_member;
        if !changed_children && still_member == was_member {
            continue;
        }
        removed = true;
        match (children.is_empty(), still_member) {
            (true, false) => {
                owned.remove(key);
            }
            (true, true) => *mine = Map::new(),
            (false, member) => {
                if member {
                    children.insert(".".to_owned(), Value::Object(Map::new()));
                }
                *mine = children;
            }
        }
    }
    removed
}

/// A part of an object that one writer decides as a whole and others' `Update` entries may
/// co-own: a Runtime's status (upstream KIM writes it with `Update`, and so does
/// `kubectl edit --subresource status`), the spec of an object of ours in a runtime cluster
/// (upstream KIM creates its OpenIDConnects with a plain create).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `status`, written through the status subresource.
    Status,
    /// `spec`, written to the object itself.
    Spec,
}

impl Part {
    /// The managedFields entries that write this part have this subresource.
    fn subresource(self) -> Option<&'static str> {
        match self {
            Self::Status => Some("status"),
            Self::Spec => None,
        }
    }

    /// The part's key in the FieldsV1 encoding.
    fn key(self) -> &'static str {
        match self {
            Self::Status => "f:status",
            Self::Spec => "f:spec",
        }
    }

    /// Whether `entry` writes through this part's subresource (or the object itself).
    fn written_by(self, entry: &ManagedFieldsEntry) -> bool {
        entry.subresource.as_deref().filter(|s| !s.is_empty()) == self.subresource()
    }
}

/// Whether `entry` is someone else's `Update` that owns fields of `part`.
fn co_owns(entry: &ManagedFieldsEntry, ours: &str, part: Part) -> bool {
    entry.operation.as_deref() == Some("Update")
        && part.written_by(entry)
        && entry.manager.as_deref() != Some(ours)
        && fields(entry).is_some_and(|f| f.contains_key(part.key()))
}

/// Whether fields of `part` are co-owned by someone else's `Update` ([`take_over`] takes
/// them).
pub fn co_owned(entries: &[ManagedFieldsEntry], ours: &str, part: Part) -> bool {
    entries.iter().any(|e| co_owns(e, ours, part))
}

/// The JSON patch that moves the fields of `part` out of every `Update` entry of someone else
/// into the `Apply` entry of `ours` (as client-go's `csaupgrade` does): an entry left with
/// nothing is removed, one that owns more (labels, finalizers) keeps the rest. Each entry is
/// guarded by a `test` that it is as read. `None` when there is nothing to move or no `Apply`
/// entry of ours yet (the first apply makes it).
fn take_over_patch(
    entries: &[ManagedFieldsEntry],
    ours: &str,
    part: Part,
) -> Result<Option<json_patch::Patch>, kube::Error> {
    let Some((apply_index, apply)) = entries.iter().enumerate().find(|(_, e)| {
        e.manager.as_deref() == Some(ours)
            && e.operation.as_deref() == Some("Apply")
            && part.written_by(e)
    }) else {
        return Ok(None);
    };
    let Some(mut owned) = fields(apply).cloned() else {
        return Ok(None);
    };
    let taken: Vec<usize> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| co_owns(e, ours, part) && e.api_version == apply.api_version)
        .map(|(i, _)| i)
        .collect();
    if taken.is_empty() {
        return Ok(None);
    }
    let read = |i: usize| serde_json::to_value(&entries[i]).map_err(kube::Error::SerdeError);
    let path = |i: usize| format!("/metadata/managedFields/{i}");
    let mut kept = Vec::new();
    for &i in &taken {
        let mut theirs = fields(&entries[i]).cloned().unwrap_or_default();
        if let Some(moved) = theirs.remove(part.key()) {
            union(
                &mut owned,
                &Map::from_iter([(part.key().to_owned(), moved)]),
            );
        }
        kept.push((i, theirs));
    }
    let mut ops = vec![
        json!({"op": "test", "path": path(apply_index), "value": read(apply_index)?}),
        json!({"op": "replace", "path": format!("{}/fieldsV1", path(apply_index)), "value": owned}),
    ];
    // Highest index first, so that a removal does not move the ones still to come.
    for (i, theirs) in kept.into_iter().rev() {
        ops.push(json!({"op": "test", "path": path(i), "value": read(i)?}));
        if theirs.is_empty() {
            ops.push(json!({"op": "remove", "path": path(i)}));
        } else {
            ops.push(
                json!({"op": "replace", "path": format!("{}/fieldsV1", path(i)), "value": theirs}),
            );
        }
    }
    serde_json::from_value(Value::Array(ops))
        .map(Some)
        .map_err(kube::Error::SerdeError)
}

/// Server-side apply removes a field the applier stops setting only when no other manager
/// owns it. Some parts are this controller's alone, but another writer's `Update` entry keeps
/// owning what it set: `shootLastErrors` of an operation long over would stay on a Runtime
/// taken over from upstream KIM for good, and so would the required claims a customer removed
/// from an OpenIDConnect upstream KIM created. So the fields of such entries in `part` move
/// into our `Apply` entry ([`take_over_patch`], a patch of the object's managedFields), and the
/// next apply removes what it does not set. `Ok(false)`: nothing to move (or an entry changed in
/// between, which the next write retries).
pub async fn take_over<K>(
    api: &Api<K>,
    object: &K,
    ours: &str,
    part: Part,
) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let entries = object.meta().managed_fields.as_deref().unwrap_or_default();
    let Some(patch) = take_over_patch(entries, ours, part)? else {
        return Ok(false);
    };
    match api
        .patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 422 => {
            tracing::info!(error = %e, "fields of another writer not taken over: an entry changed meanwhile; the next write tries again");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Adds every path of `other` to `owned`, in the FieldsV1 encoding (see [`subtract`]): a key
/// owned in either stays owned (`"."`) when it has children.
fn union(owned: &mut Map<String, Value>, other: &Map<String, Value>) {
    let member = |m: &Map<String, Value>| m.is_empty() || m.contains_key(".");
    for (key, theirs) in other {
        let Value::Object(theirs) = theirs else {
            continue;
        };
        match owned.get_mut(key) {
            Some(Value::Object(mine)) => {
                let is_member = member(mine) || member(theirs);
                let mut children = mine.clone();
                children.remove(".");
                let mut their_children = theirs.clone();
                their_children.remove(".");
                union(&mut children, &their_children);
                if is_member && !children.is_empty() {
                    children.insert(".".to_owned(), Value::Object(Map::new()));
                }
                *mine = children;
            }
            _ => {
                owned.insert(key.clone(), Value::Object(theirs.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
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

    /// The managedFields after the hand-over's patch; `None` when there is nothing to release.
    fn without_co_owned(entries: &[ManagedFieldsEntry]) -> Option<Vec<ManagedFieldsEntry>> {
        let patch = release_patch(entries).unwrap()?;
        let mut doc = json!({"metadata": {"managedFields": entries}});
        json_patch::patch(&mut doc, &patch).unwrap();
        Some(serde_json::from_value(doc["metadata"]["managedFields"].take()).unwrap())
    }

    /// The managedFields after the take-over's patch of `part` for `ours`.
    fn taken_over(
        entries: &[ManagedFieldsEntry],
        ours: &str,
        part: Part,
    ) -> Vec<ManagedFieldsEntry> {
        let patch = take_over_patch(entries, ours, part)
            .unwrap()
            .expect("a patch");
        let mut doc = json!({"metadata": {"managedFields": entries}});
        json_patch::patch(&mut doc, &patch).unwrap();
        serde_json::from_value(doc["metadata"]["managedFields"].take()).unwrap()
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

    /// The create owns labels, DNS, the audit policy, a worker pool and its label and a feature
    /// gate; the apply owns the same. The create keeps what lies outside the releasable parts
    /// and the nodes the apply owns only children of.
    #[test]
    fn the_create_keeps_only_what_the_apply_does_not_own_in_the_releasable_parts() {
        let create = json!({
            "f:metadata": {"f:labels": {".": {}, "f:a": {}, "f:b": {}}},
            "f:spec": {
                "f:dns": {".": {}, "f:domain": {}},
                "f:kubernetes": {"f:kubeAPIServer": {
                    "f:auditConfig": {".": {}, "f:auditPolicy": {}},
                    "f:featureGates": {".": {}, "f:G": {}},
                }},
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
                "f:kubernetes": {"f:kubeAPIServer": {
                    "f:auditConfig": {"f:auditPolicy": {}},
                    "f:featureGates": {"f:G": {}},
                }},
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
                "f:metadata": {"f:labels": {".": {}, "f:a": {}, "f:b": {}}},
                "f:spec": {
                    "f:dns": {".": {}, "f:domain": {}},
                    "f:kubernetes": {"f:kubeAPIServer": {
                        "f:auditConfig": {".": {}, "f:auditPolicy": {}},
                        "f:featureGates": {},
                    }},
                    "f:provider": {"f:workers": {
                        "k:{\"name\":\"cpu-worker-0\"}": {"f:labels": {}},
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

    /// The patch tests only the entries it changes: another manager's entry written in between
    /// (Gardener's status) does not refuse it, a change of ours does.
    #[test]
    fn the_patch_guards_only_the_entries_it_changes() {
        let workers = json!({"f:spec": {"f:provider": {"f:workers": {}}}});
        let entries = vec![
            entry("kim", "Update", workers.clone()),
            entry("gardenlet", "Update", json!({"f:status": {}})),
            entry(
                "kim-controller",
                "Update",
                json!({"f:spec": {"f:provider": {"f:workers": {}}, "f:dns": {}}}),
            ),
            entry("kim", "Apply", workers),
        ];
        let patch = release_patch(&entries)
            .unwrap()
            .expect("two entries co-own");
        let doc = |entries: &[ManagedFieldsEntry]| json!({"metadata": {"managedFields": entries}});
        let mut kept_dns = entries[2].clone();
        kept_dns.fields_v1 = Some(FieldsV1(json!({"f:spec": {"f:dns": {}}})));
        let expected = doc(&[entries[1].clone(), kept_dns, entries[3].clone()]);

        let mut applied = doc(&entries);
        json_patch::patch(&mut applied, &patch).unwrap();
        assert_eq!(applied, expected);

        let mut status_written = entries.clone();
        status_written[1].fields_v1 = Some(FieldsV1(json!({"f:status": {"f:x": {}}})));
        let mut applied = doc(&status_written);
        json_patch::patch(&mut applied, &patch).expect("another entry changed: still applies");
        // The emptied `kim` Update entry went, so Gardener's is first now.
        assert_eq!(
            applied["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:status": {"f:x": {}}})
        );

        let mut ours_written = entries.clone();
        ours_written[2].fields_v1 = Some(FieldsV1(json!({"f:spec": {"f:dns": {}, "f:x": {}}})));
        assert!(
            json_patch::patch(&mut doc(&ours_written), &patch).is_err(),
            "an entry of ours changed in between: refused"
        );
    }

    /// `{}` and `{".": {}}` both say the node itself is in the set.
    #[test]
    fn membership_is_read_from_both_encodings() {
        let mut owned = json!({"f:x": {}, "f:y": {".": {}, "f:z": {}}});
        let other = json!({"f:x": {".": {}}, "f:y": {}});
        assert!(subtract(
            owned.as_object_mut().unwrap(),
            other.as_object().unwrap()
        ));
        assert_eq!(owned, json!({"f:y": {"f:z": {}}}));
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

    /// Upstream's create is told from another tool named `manager` by the runtime-id
    /// annotation it writes.
    #[test]
    fn a_manager_entry_is_ours_only_with_the_runtime_id_annotation() {
        let workers = json!({"f:provider": {"f:workers": {}}});
        let annotation = format!("f:{}", names::SHOOT_ANNOTATION_RUNTIME_ID);
        let upstream_create = json!({
            "f:metadata": {"f:annotations": {".": {}, annotation.clone(): {}}},
            "f:spec": workers,
        });
        let other_tool = json!({
            "f:metadata": {"f:annotations": {".": {}, "f:team": {}}},
            "f:spec": workers,
        });
        let apply = entry("kim", "Apply", json!({"f:spec": workers}));
        let after = without_co_owned(&[entry("manager", "Update", upstream_create), apply.clone()])
            .expect("upstream's create co-owns the workers");
        assert_eq!(
            fields_of(&after, "manager", "Update"),
            Some(json!({"f:metadata": {"f:annotations": {".": {}, annotation: {}}}}))
        );
        assert_eq!(
            without_co_owned(&[entry("manager", "Update", other_tool), apply]),
            None,
            "another tool named manager keeps what it owns"
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

    /// A node owned itself by the create and only through children by the apply stays the
    /// create's.
    #[test]
    fn a_node_keeps_its_own_membership_when_the_other_owns_only_children() {
        let before = vec![
            entry(
                "kim-controller",
                "Update",
                json!({"f:spec": {"f:extensions": {}}}),
            ),
            entry(
                "kim",
                "Apply",
                json!({"f:spec": {"f:extensions": {"k:{\"type\":\"a\"}": {}}}}),
            ),
        ];
        assert_eq!(without_co_owned(&before), None);
    }

    fn status_entry(manager: &str, operation: &str, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: Some("infrastructuremanager.kyma-project.io/v1".into()),
            subresource: Some("status".into()),
            ..entry(manager, operation, fields)
        }
    }

    /// Upstream's `Update` of the status owns `shootLastErrors` and a condition we do not
    /// write; ours owns the state and our conditions. Afterwards ours owns all of it, upstream's
    /// entry is gone, and the object's own entries are untouched.
    #[test]
    fn the_status_upstream_wrote_moves_into_our_apply_entry() {
        let upstream = status_entry(
            "manager",
            "Update",
            json!({"f:status": {".": {}, "f:state": {}, "f:shootLastErrors": {},
                "f:conditions": {"k:{\"type\":\"Provisioned\"}": {".": {}, "f:status": {}},
                    "k:{\"type\":\"Old\"}": {".": {}, "f:status": {}}}}}),
        );
        let ours = status_entry(
            "kim-controller",
            "Apply",
            json!({"f:status": {"f:state": {}, "f:observedGeneration": {},
                "f:conditions": {"k:{\"type\":\"Provisioned\"}": {"f:status": {}, "f:reason": {}}}}}),
        );
        let create = entry("keb", "Update", json!({"f:spec": {"f:shoot": {}}}));
        let entries = vec![create.clone(), upstream, ours];
        assert!(co_owned(&entries, "kim-controller", Part::Status));
        let after = taken_over(&entries, "kim-controller", Part::Status);
        assert_eq!(after.len(), 2);
        assert_eq!(after[0], create);
        assert_eq!(
            fields_of(&after, "kim-controller", "Apply"),
            Some(
                json!({"f:status": {".": {}, "f:state": {}, "f:observedGeneration": {},
                "f:shootLastErrors": {},
                "f:conditions": {
                    "k:{\"type\":\"Provisioned\"}": {".": {}, "f:status": {}, "f:reason": {}},
                    "k:{\"type\":\"Old\"}": {".": {}, "f:status": {}}}}})
            )
        );
        assert!(!co_owned(&after, "kim-controller", Part::Status));
        // Nothing to move afterwards; and nothing before our first apply made our entry.
        assert!(
            take_over_patch(&after, "kim-controller", Part::Status)
                .unwrap()
                .is_none()
        );
        let before_ours = vec![
            create,
            status_entry("manager", "Update", json!({"f:status": {}})),
        ];
        assert!(
            take_over_patch(&before_ours, "kim-controller", Part::Status)
                .unwrap()
                .is_none()
        );
    }

    /// Upstream's create of an OpenIDConnect owns its spec and the managed-by label; ours
    /// owns part of the spec. Afterwards the spec is ours alone, and the label (not ours to
    /// decide) stays with the create's entry. A status entry is no part of the spec.
    #[test]
    fn the_spec_upstream_created_moves_into_our_apply_entry_and_the_rest_stays() {
        let upstream = entry(
            "manager",
            "Update",
            json!({"f:metadata": {"f:labels": {".": {}, "f:operator.kyma-project.io/managed-by": {}}},
                "f:spec": {".": {}, "f:clientID": {}, "f:requiredClaims": {".": {}, "f:aud": {}}}}),
        );
        let ours = entry(
            "kim",
            "Apply",
            json!({"f:metadata": {"f:labels": {"f:operator.kyma-project.io/managed-by": {}}},
                "f:spec": {"f:clientID": {}}}),
        );
        let status = ManagedFieldsEntry {
            subresource: Some("status".into()),
            ..entry("other", "Update", json!({"f:status": {}}))
        };
        let entries = vec![upstream, ours, status.clone()];
        assert!(co_owned(&entries, "kim", Part::Spec));
        let after = taken_over(&entries, "kim", Part::Spec);
        assert_eq!(after.len(), 3);
        assert_eq!(
            fields_of(&after, "manager", "Update"),
            Some(
                json!({"f:metadata": {"f:labels": {".": {}, "f:operator.kyma-project.io/managed-by": {}}}})
            )
        );
        assert_eq!(
            fields_of(&after, "kim", "Apply"),
            Some(
                json!({"f:metadata": {"f:labels": {"f:operator.kyma-project.io/managed-by": {}}},
                "f:spec": {".": {}, "f:clientID": {}, "f:requiredClaims": {".": {}, "f:aud": {}}}})
            )
        );
        assert_eq!(after[2], status);
        assert!(!co_owned(&after, "kim", Part::Spec));
    }
}
