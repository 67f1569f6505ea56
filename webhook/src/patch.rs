//! The JSON patch of the mutating webhook, computed by diff.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde::Serialize;
use serde_json::Value;

/// The patch that turns the request's object into `defaulted`.
///
/// The diff is taken between the typed original and the typed defaulted object, so only real
/// changes appear (a typed round trip may spell absent fields differently from the raw
/// request). Each operation is then made applicable to the raw object the apiserver holds: an
/// addition below a parent that the raw object lacks becomes one addition of the highest
/// missing ancestor.
pub fn mutation_patch<T: Serialize>(
    original: &T,
    defaulted: &T,
    raw: Option<&Value>,
) -> Result<Patch, serde_json::Error> {
    let before = serde_json::to_value(original)?;
    let after = serde_json::to_value(defaulted)?;
    let diff = diff(&before, &after);
    if diff.0.is_empty() {
        return Ok(diff);
    }
    // Without the raw object (not sent), the typed original is the best description of it.
    let raw = raw.unwrap_or(&before);
    let mut out: Vec<PatchOperation> = Vec::with_capacity(diff.0.len());
    let mut added_roots: Vec<String> = Vec::new();
    for op in diff.0 {
        let path = op.path().as_str().to_string();
        if added_roots
            .iter()
            .any(|root| path.starts_with(&format!("{root}/")))
        {
            continue;
        }
        match &op {
            PatchOperation::Add(_) | PatchOperation::Replace(_) => {
                let ancestor = highest_missing(raw, &path);
                match ancestor {
                    // Present in the raw object: keep the operation as it is.
                    None => out.push(op),
                    Some(root) => {
                        let value = after.pointer(&root).cloned().unwrap_or(Value::Null);
                        let Ok(ptr) = PointerBuf::parse(root.clone()) else {
                            out.push(op);
                            continue;
                        };
                        out.push(PatchOperation::Add(AddOperation { path: ptr, value }));
                        added_roots.push(root);
                    }
                }
            }
            _ => out.push(op),
        }
    }
    Ok(Patch(out))
}

/// The operations `json_patch::diff(before, after)` returns, in the same order, without
/// walking the subtrees the two documents share (defaulting changes a few leaves of a large
/// object; `json_patch::diff` builds and escapes a pointer for every key it visits).
pub fn diff(before: &Value, after: &Value) -> Patch {
    let mut ops = Vec::new();
    diff_into(before, after, &mut PointerBuf::new(), &mut ops);
    Patch(ops)
}

fn diff_into(left: &Value, right: &Value, path: &mut PointerBuf, ops: &mut Vec<PatchOperation>) {
    // Equal subtrees yield no operation in `json_patch::diff` either.
    if left == right {
        return;
    }
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => {
            for (key, rv) in r {
                path.push_back(key);
                match l.get(key) {
                    Some(lv) => diff_into(lv, rv, path, ops),
                    None => ops.push(PatchOperation::Add(AddOperation {
                        path: path.clone(),
                        value: rv.clone(),
                    })),
                }
                path.pop_back();
            }
            for key in l.keys() {
                if !r.contains_key(key) {
                    path.push_back(key);
                    ops.push(PatchOperation::Remove(RemoveOperation {
                        path: path.clone(),
                    }));
                    path.pop_back();
                }
            }
        }
        (Value::Array(l), Value::Array(r)) => {
            // Same index arithmetic as `json_patch::diff`: removals from the end shift the
            // index of the next removal.
            let mut shift = 0usize;
            for idx in 0..l.len().max(r.len()) {
                path.push_back(idx - shift);
                match (l.get(idx), r.get(idx)) {
                    (Some(lv), Some(rv)) => diff_into(lv, rv, path, ops),
                    (Some(_), None) => {
                        shift += 1;
                        ops.push(PatchOperation::Remove(RemoveOperation {
                            path: path.clone(),
                        }));
                    }
                    (None, Some(rv)) => ops.push(PatchOperation::Add(AddOperation {
                        path: path.clone(),
                        value: rv.clone(),
                    })),
                    (None, None) => {}
                }
                path.pop_back();
            }
        }
        _ => ops.push(PatchOperation::Replace(ReplaceOperation {
            path: path.clone(),
            value: right.clone(),
        })),
    }
}

/// The shortest prefix of `path` (a JSON pointer) that does not exist in `doc`, when that is
/// not `path` itself with an existing parent (then a plain add/replace works). `None` when
/// `path` exists.
fn highest_missing(doc: &Value, path: &str) -> Option<String> {
    if doc.pointer(path).is_some() {
        return None;
    }
    let mut prefix = String::new();
    for token in path.split('/').skip(1) {
        prefix.push('/');
        prefix.push_str(token);
        if doc.pointer(&prefix).is_none() {
            return Some(prefix);
        }
    }
    Some(path.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replace_of_typed_zero_value_becomes_add() {
        // Typed original spells an absent map as {} ; the raw object has no such key.
        let before = json!({"spec": {"a": 1, "m": {}}});
        let after = json!({"spec": {"a": 1, "m": {"k": "v"}}});
        let raw = json!({"spec": {"a": 1}});
        let p = mutation_patch(&before, &after, Some(&raw)).expect("patch");
        let mut doc = raw;
        json_patch::patch(&mut doc, &p).expect("applies");
        assert_eq!(doc, json!({"spec": {"a": 1, "m": {"k": "v"}}}));
        assert_eq!(p.0.len(), 1);
        assert_eq!(p.0[0].path().as_str(), "/spec/m");
    }

    #[test]
    fn existing_paths_are_patched_in_place() {
        let before = json!({"spec": {"a": 1, "b": null}});
        let after = json!({"spec": {"a": 1, "b": 2}});
        let raw = json!({"spec": {"a": 1, "b": null}});
        let p = mutation_patch(&before, &after, Some(&raw)).expect("patch");
        let mut doc = raw;
        json_patch::patch(&mut doc, &p).expect("applies");
        assert_eq!(doc, after);
    }

    #[test]
    fn several_additions_below_one_missing_parent_become_one() {
        let before = json!({"spec": {}});
        let after = json!({"spec": {"n": {"x": 1, "y": 2}}});
        let raw = json!({});
        let p = mutation_patch(&before, &after, Some(&raw)).expect("patch");
        let mut doc = raw;
        json_patch::patch(&mut doc, &p).expect("applies");
        assert_eq!(doc, after);
        assert_eq!(p.0.len(), 1, "{p:?}");
    }

    #[test]
    fn no_change_no_patch() {
        let v = json!({"a": 1});
        assert!(mutation_patch(&v, &v, None).expect("patch").0.is_empty());
    }

    #[test]
    fn diff_equals_json_patch_diff() {
        let cases = [
            (json!({"a": 1}), json!({"a": 1})),
            (
                json!({"a": 1, "b": {"c": [1, 2, 3]}}),
                json!({"b": {"c": [1, 5]}, "d": null}),
            ),
            (json!([1, 2, 3, 4]), json!([1])),
            (json!([1]), json!([0, 2, {"x": 1}])),
            (json!({"k/~": {"x": 1}}), json!({"k/~": {"x": 2}})),
            (json!({"a": 1.0}), json!({"a": 1})),
            (
                json!({"a": [{"b": 1}, {"b": 2}]}),
                json!({"a": [{"b": 1}, {"b": 3, "c": 4}]}),
            ),
            (json!(null), json!({"a": 1})),
        ];
        for (before, after) in cases {
            assert_eq!(
                diff(&before, &after),
                json_patch::diff(&before, &after),
                "{before} -> {after}"
            );
        }
    }
}
