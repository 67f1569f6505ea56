//! The JSON patch of the mutating webhook, computed by diff.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use std::borrow::Cow;

use kim_shared::json::{DecodeError, Reader};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
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
    let after_at = |p: &str| Some(after.pointer(p).cloned().unwrap_or(Value::Null));
    let exists = |p: &str| raw.pointer(p).is_some();
    Ok(applicable(diff, after_at, |_, p| highest_missing(&exists, p)).unwrap_or_default())
}

/// [`mutation_patch`] for a raw object given as its JSON text (as in the AdmissionReview).
/// The text is only scanned for the paths the operations touch, and only when there is a
/// change: building a JSON tree of the whole object cost more than the diff itself.
pub fn mutation_patch_for_text<T: Serialize>(
    original: &T,
    defaulted: &T,
    raw: Option<&str>,
) -> Result<Patch, serde_json::Error> {
    let Some(raw) = raw else {
        return mutation_patch(original, defaulted, None);
    };
    let before = serde_json::to_value(original)?;
    let after = serde_json::to_value(defaulted)?;
    let diff = diff(&before, &after);
    if diff.0.is_empty() {
        return Ok(diff);
    }
    drop(before);
    let missing = missing_in_text(raw, &diff)?;
    let after_at = |p: &str| Some(after.pointer(p).cloned().unwrap_or(Value::Null));
    Ok(applicable(diff, after_at, |i, _| missing[i].clone()).unwrap_or_default())
}

/// A part of an object that defaulting changed: where it is (an escaped JSON pointer) and its
/// serialized value before and after.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangedPart {
    /// JSON pointer of the part (`""` for the whole object).
    pub pointer: Cow<'static, str>,
    /// The part before defaulting (`null` when absent).
    pub before: Value,
    /// The part after defaulting (`null` when absent).
    pub after: Value,
}

/// [`mutation_patch_for_text`] over the parts that defaulting changed (every change lies below
/// one of them), so that what stayed the same is neither serialized nor compared. `None` when
/// an operation would have to add a parent of a part that the raw object lacks (then take the
/// patch over the whole objects).
pub fn mutation_patch_of_parts(
    parts: &[ChangedPart],
    raw: &str,
) -> Result<Option<Patch>, serde_json::Error> {
    let mut ops = Vec::new();
    for part in parts {
        let mut path = PointerBuf::parse(part.pointer.as_ref())
            .map_err(|e| <serde_json::Error as de::Error>::custom(e.to_string()))?;
        diff_into(&part.before, &part.after, &mut path, &mut ops);
    }
    let diff = Patch(ops);
    if diff.0.is_empty() {
        return Ok(Some(diff));
    }
    let missing = missing_in_text(raw, &diff)?;
    let after_at = |p: &str| {
        parts.iter().find_map(|part| {
            let rest = p.strip_prefix(part.pointer.as_ref())?;
            (rest.is_empty() || rest.starts_with('/'))
                .then(|| part.after.pointer(rest).cloned().unwrap_or(Value::Null))
        })
    };
    Ok(applicable(diff, after_at, |i, _| missing[i].clone()))
}

/// Makes each operation of `diff` applicable to the raw document: `missing(i, path)` gives the
/// highest prefix of operation `i`'s path that the document lacks ([`highest_missing`]);
/// `after_at` gives the defaulted value at a pointer (`None`: not known, then the answer is
/// `None`).
fn applicable(
    diff: Patch,
    after_at: impl Fn(&str) -> Option<Value>,
    missing: impl Fn(usize, &str) -> Option<String>,
) -> Option<Patch> {
    let mut out: Vec<PatchOperation> = Vec::with_capacity(diff.0.len());
    let mut added_roots: Vec<String> = Vec::new();
    for (i, op) in diff.0.into_iter().enumerate() {
        let path = op.path().as_str();
        if added_roots.iter().any(|root| {
            path.strip_prefix(root.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
        }) {
            continue;
        }
        match &op {
            PatchOperation::Add(_) | PatchOperation::Replace(_) => {
                match missing(i, path) {
                    // Present in the raw object: keep the operation as it is.
                    None => out.push(op),
                    Some(root) => {
                        let value = after_at(&root)?;
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
    Some(Patch(out))
}

/// [`highest_missing`] of every operation's path in the JSON `text`, found in one pass over the
/// text that descends only along those paths (everything else is skipped unparsed).
fn missing_in_text(text: &str, diff: &Patch) -> Result<Vec<Option<String>>, serde_json::Error> {
    let tokens: Vec<Vec<String>> = diff
        .0
        .iter()
        .map(|op| {
            op.path()
                .tokens()
                .map(|t| t.decoded().into_owned())
                .collect()
        })
        .collect();
    let mut depths = vec![0usize; tokens.len()];
    let candidates: Vec<usize> = (0..tokens.len())
        .filter(|&i| !tokens[i].is_empty())
        .collect();
    // The object was just read by `kim_shared::json`'s reader, so its (small, now warm) code
    // scans the text; serde's scan answers whatever that reader declines (nesting deeper than it
    // reads).
    let mut r = Reader::new(text);
    let fast = probe(&mut r, &tokens, 0, &candidates, &mut depths).and_then(|()| r.end());
    if fast.is_err() {
        depths.iter_mut().for_each(|d| *d = 0);
        let mut de = serde_json::Deserializer::from_str(text);
        Probe {
            paths: &tokens,
            depth: 0,
            candidates: &candidates,
            depths: &mut depths,
        }
        .deserialize(&mut de)?;
        de.end()?;
    }
    Ok(diff
        .0
        .iter()
        .zip(tokens.iter().zip(depths))
        .map(|(op, (t, existing))| {
            let path = op.path().as_str();
            if existing >= t.len() {
                return None;
            }
            // The first `existing + 1` tokens of the (escaped) pointer.
            let end = path
                .match_indices('/')
                .nth(existing + 1)
                .map_or(path.len(), |(at, _)| at);
            Some(path[..end].to_string())
        })
        .collect())
}

/// [`Probe`] with `kim_shared::json`'s reader: `candidates` are the paths whose first `depth`
/// tokens exist at the cursor; `depths[i]` becomes the number of leading tokens of path `i`
/// that exist.
fn probe(
    r: &mut Reader<'_>,
    paths: &[Vec<String>],
    depth: usize,
    candidates: &[usize],
    depths: &mut [usize],
) -> Result<(), DecodeError> {
    if candidates.is_empty() {
        // The text was decoded before it is scanned, so it is valid JSON.
        return r.skip_valid();
    }
    match r.peek()? {
        b'{' => r.object(&mut |r, key| {
            let mut deeper = Vec::new();
            for &i in candidates {
                if paths[i][depth] == key {
                    depths[i] = depths[i].max(depth + 1);
                    if paths[i].len() > depth + 1 {
                        deeper.push(i);
                    }
                }
            }
            probe(r, paths, depth + 1, &deeper, depths)
        }),
        b'[' => {
            let mut idx = 0usize;
            r.array(&mut |r| {
                let matching: Vec<usize> = candidates
                    .iter()
                    .copied()
                    .filter(|&i| array_index(&paths[i][depth]) == Some(idx))
                    .collect();
                let deeper: Vec<usize> = matching
                    .iter()
                    .copied()
                    .filter(|&i| paths[i].len() > depth + 1)
                    .collect();
                probe(r, paths, depth + 1, &deeper, depths)?;
                for i in matching {
                    depths[i] = depths[i].max(depth + 1);
                }
                idx += 1;
                Ok(())
            })
        }
        _ => r.skip_valid(),
    }
}

/// One level of the scan of [`missing_in_text`]: `candidates` are the paths whose first
/// `depth` tokens exist here; `depths[i]` becomes the number of leading tokens of path `i`
/// that exist.
struct Probe<'p, 'q> {
    paths: &'p [Vec<String>],
    depth: usize,
    candidates: &'q [usize],
    depths: &'q mut [usize],
}

impl<'de> DeserializeSeed<'de> for Probe<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.candidates.is_empty() {
            IgnoredAny::deserialize(d)?;
            return Ok(());
        }
        d.deserialize_any(self)
    }
}

impl Probe<'_, '_> {
    /// The candidates whose next token is matched by `is`, and which of them go deeper.
    fn step(&mut self, is: impl Fn(&str) -> bool) -> Vec<usize> {
        let mut deeper = Vec::new();
        for &i in self.candidates {
            if is(&self.paths[i][self.depth]) {
                self.depths[i] = self.depths[i].max(self.depth + 1);
                if self.paths[i].len() > self.depth + 1 {
                    deeper.push(i);
                }
            }
        }
        deeper
    }
}

impl<'de> Visitor<'de> for Probe<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut idx = 0usize;
        loop {
            // Which candidates this element would match is known before it is read; they are
            // marked only once it turns out to exist.
            let matching: Vec<usize> = self
                .candidates
                .iter()
                .copied()
                .filter(|&i| array_index(&self.paths[i][self.depth]) == Some(idx))
                .collect();
            let deeper: Vec<usize> = matching
                .iter()
                .copied()
                .filter(|&i| self.paths[i].len() > self.depth + 1)
                .collect();
            let next = Probe {
                paths: self.paths,
                depth: self.depth + 1,
                candidates: &deeper,
                depths: &mut *self.depths,
            };
            if seq.next_element_seed(next)?.is_none() {
                return Ok(());
            }
            for i in matching {
                self.depths[i] = self.depths[i].max(self.depth + 1);
            }
            idx += 1;
        }
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let deeper = self.step(|t| t == key);
            map.next_value_seed(Probe {
                paths: self.paths,
                depth: self.depth + 1,
                candidates: &deeper,
                depths: &mut *self.depths,
            })?;
        }
        Ok(())
    }
}

/// An array index token as `serde_json::Value::pointer` reads it (no sign, no leading zero).
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() > 1) {
        return None;
    }
    token.parse().ok()
}

/// An object key, borrowed from the text when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
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

/// The shortest prefix of `path` (a JSON pointer) that does not exist in the document
/// (`exists` tells), when that is not `path` itself with an existing parent (then a plain
/// add/replace works). `None` when `path` exists.
fn highest_missing(exists: &impl Fn(&str) -> bool, path: &str) -> Option<String> {
    if exists(path) {
        return None;
    }
    let mut end = 0;
    for token in path.split('/').skip(1) {
        end += 1 + token.len();
        if !exists(&path[..end]) {
            return Some(path[..end].to_string());
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
    fn scan_of_the_text_finds_what_the_json_tree_finds() {
        let with_escape = json!({
            "a": {"b/c": [1, {"d~e": null}], "": 2},
            "l": [],
            "s": "x",
            "n": null,
            "esc\"aped": {"k": true}
        });
        // `kim_shared::json`'s reader scans both; serde scans what nests deeper than it reads.
        let mut plain = with_escape.clone();
        plain.as_object_mut().expect("object").remove("esc\"aped");
        let mut deep = with_escape.clone();
        deep["deep"] = (0..110).fold(json!(1), |v, _| json!([v]));
        let deep_pointer = format!("/deep{}", "/0".repeat(105));
        let pointers = [
            "",
            "/",
            "/a",
            "/a/b~1c",
            "/a/b~1c/0",
            "/a/b~1c/1",
            "/a/b~1c/1/d~0e",
            "/a/b~1c/2",
            "/a/b~1c/01",
            "/a/b~1c/+1",
            "/a/",
            "/l",
            "/l/0",
            "/l/0/x",
            "/s",
            "/s/0",
            "/n",
            "/n/x",
            "/x",
            "/x/y/z",
            "/esc\"aped/k",
            "/esc\"aped/j",
            "/a/b/c",
            deep_pointer.as_str(),
        ];
        let patch = Patch(
            pointers
                .iter()
                .map(|p| {
                    PatchOperation::Add(AddOperation {
                        path: PointerBuf::parse(*p).expect("pointer"),
                        value: Value::Null,
                    })
                })
                .collect(),
        );
        for (doc, fast) in [(&plain, true), (&with_escape, true), (&deep, false)] {
            let text = serde_json::to_string(doc).expect("json");
            let tokens: Vec<Vec<String>> = pointers
                .iter()
                .map(|p| {
                    PointerBuf::parse(*p)
                        .expect("pointer")
                        .tokens()
                        .map(|t| t.decoded().into_owned())
                        .collect()
                })
                .collect();
            let all: Vec<usize> = (1..tokens.len()).collect();
            let mut depths = vec![0; tokens.len()];
            assert_eq!(
                probe(&mut Reader::new(&text), &tokens, 0, &all, &mut depths).is_ok(),
                fast,
                "{text}"
            );
            let missing = missing_in_text(&text, &patch).expect("scan");
            let exists = |p: &str| doc.pointer(p).is_some();
            for (p, m) in pointers.iter().zip(missing) {
                assert_eq!(m, highest_missing(&exists, p), "{p:?} in {text}");
            }
        }
    }

    #[test]
    fn patch_from_text_equals_patch_from_tree() {
        let cases = [
            (
                json!({"spec": {"a": 1, "m": {}}}),
                json!({"spec": {"a": 1, "m": {"k": "v"}}}),
                json!({"spec": {"a": 1}}),
            ),
            (
                json!({"spec": {}}),
                json!({"spec": {"n": {"x": 1, "y": 2}}}),
                json!({}),
            ),
            (
                json!({"spec": {"a": [1]}}),
                json!({"spec": {"a": [1, 2], "b": 3}}),
                json!({"spec": {"a": [1]}}),
            ),
            (json!({"a": 1}), json!({"a": 1}), json!({"a": 1})),
        ];
        for (before, after, raw) in cases {
            let text = raw.to_string();
            assert_eq!(
                mutation_patch_for_text(&before, &after, Some(&text)).expect("patch"),
                mutation_patch(&before, &after, Some(&raw)).expect("patch"),
                "{before} -> {after} on {raw}"
            );
        }
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
