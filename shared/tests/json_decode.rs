//! The webhook's small-footprint decoder (`kim_shared::json`) against serde, the authority.
//!
//! - soundness: whenever the fast path succeeds, serde succeeds with an equal Runtime;
//! - `json::from_str` always answers exactly as serde (value, or error message);
//! - the fast path is taken (no fallback) on every sample Runtime, raw and defaulted, and on
//!   Runtimes generated from our CRD's own schema (every field, nested down to the kubelet
//!   settings), so the webhook gets its speed on what KEB sends;
//! - mutated documents (wrong types, nulls, out-of-range integers, duplicate keys, unknown
//!   enum values, escapes, deep nesting, invalid JSON) are answered as serde answers them.

use kim_shared::api::Runtime;
use kim_shared::json;
use kube::CustomResourceExt;
use serde_json::{Map, Value, json};
use std::path::PathBuf;

/// Every Runtime document of the repository's samples (`config/samples`, shaped as KEB writes
/// them).
fn sample_runtimes() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/samples");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("samples expected in {}: {e}", dir.display()))
            .map(|entry| entry.expect("directory entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path).expect("readable sample");
            for (i, doc) in serde_yaml_ng::Deserializer::from_str(&text).enumerate() {
                let v: Value = serde::Deserialize::deserialize(doc).expect("YAML");
                if v["kind"] == "Runtime" {
                    out.push((format!("{}#{i}", path.display()), v));
                }
            }
        }
    }
    assert!(
        out.len() >= 7,
        "expected the sample Runtimes, found {}",
        out.len()
    );
    out
}

/// serde's answer, without `metadata.managedFields`: the fast path checks it as serde does
/// but does not keep it (`kim_shared::json`'s module documentation).
fn serde_without_managed_fields(text: &str) -> serde_json::Result<Runtime> {
    serde_json::from_str::<Runtime>(text).map(without_managed_fields)
}

fn without_managed_fields(mut rt: Runtime) -> Runtime {
    rt.metadata.managed_fields = None;
    rt
}

/// Compares the fast path and `from_str` with serde on one text; returns whether the fast
/// path decoded it.
fn check(name: &str, text: &str) -> bool {
    let serde = serde_without_managed_fields(text);
    let fast = json::fast_from_str::<Runtime>(text);
    if let Ok(f) = &fast {
        match &serde {
            Ok(s) => assert_eq!(f, s, "{name}: the fast path decoded differently\n{text}"),
            Err(e) => panic!("{name}: the fast path accepted what serde refuses ({e})\n{text}"),
        }
    }
    let combined = json::from_str::<Runtime>(text)
        .map(without_managed_fields)
        .map_err(|e| e.to_string());
    assert_eq!(
        combined,
        serde.map_err(|e| e.to_string()),
        "{name}: json::from_str must answer as serde"
    );
    fast.is_ok()
}

#[test]
fn sample_runtimes_take_the_fast_path_and_decode_as_serde_does() {
    let cfg = kim_shared::config::KimConfig::load(&kim_shared::config::ConfigPaths {
        converter_config: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/config/converter_config.json"),
        audit_log_tenants: None,
        maintenance_windows: None,
    });
    for (name, v) in sample_runtimes() {
        for text in [
            v.to_string(),
            serde_json::to_string_pretty(&v).expect("json"),
        ] {
            let serde = serde_json::from_str::<Runtime>(&text);
            assert!(serde.is_ok(), "{name}: {:?}", serde.as_ref().err());
            assert!(
                check(&name, &text),
                "{name}: the fast path fell back to serde"
            );
            if let (Ok(cfg), Ok(mut rt)) = (&cfg, serde) {
                kim_shared::defaults::apply_defaults(&mut rt, cfg);
                let defaulted = serde_json::to_string(&rt).expect("json");
                assert!(
                    check(&format!("{name} (defaulted)"), &defaulted),
                    "{name} (defaulted): the fast path fell back to serde"
                );
            }
        }
    }
}

/// A small deterministic generator (xorshift), so that failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

const STRINGS: &[&str] = &[
    "a",
    "",
    "10.250.0.0/16",
    "with \"quotes\" and \\ backslash",
    "line\nbreak\ttab",
    "é ünïcode 中文",
    "emoji 😀",
    "slash/and\u{1}control",
    "1.31.2",
    "RS256",
];

/// A value of the schema's shape: every object property present with 70% chance.
fn generate(schema: &Value, rng: &mut Rng, depth: usize) -> Value {
    if let Some(choices) = schema.get("enum").and_then(Value::as_array) {
        return choices[rng.below(choices.len())].clone();
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return if rng.chance(50) {
            json!(rng.below(10))
        } else {
            json!(format!("{}%", rng.below(100)))
        };
    }
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return json!({"apiVersion": "v1", "kind": "X", "nested": {"list": [1, "two", null]}});
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => {
            let mut out = Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                let required: Vec<&str> = schema
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                for (key, sub) in props {
                    if required.contains(&key.as_str()) || (depth < 12 && rng.chance(70)) {
                        out.insert(key.clone(), generate(sub, rng, depth + 1));
                    }
                }
            }
            if let Some(sub) = schema.get("additionalProperties").filter(|s| s.is_object()) {
                for i in 0..rng.below(3) {
                    out.insert(format!("key-{i}"), generate(sub, rng, depth + 1));
                }
            }
            Value::Object(out)
        }
        Some("array") => {
            let n = if depth < 12 { rng.below(3) } else { 0 };
            let items = schema
                .get("items")
                .cloned()
                .unwrap_or(json!({"type": "string"}));
            Value::Array((0..n).map(|_| generate(&items, rng, depth + 1)).collect())
        }
        Some("integer") => json!([0, 1, 7, 42, 1000, -3][rng.below(6)]),
        Some("number") => json!([0.5, 1.0, 0.75, 2.0][rng.below(4)]),
        Some("boolean") => json!(rng.chance(50)),
        Some("string") => {
            if schema.get("format").and_then(Value::as_str) == Some("date-time") {
                json!("2026-11-30T12:00:00Z")
            } else if schema.get("format").and_then(Value::as_str) == Some("byte") {
                json!("aGVsbG8=")
            } else {
                json!(STRINGS[rng.below(STRINGS.len())])
            }
        }
        _ => json!(STRINGS[rng.below(STRINGS.len())]),
    }
}

/// The object paths of a value (only through objects and arrays).
fn paths(v: &Value, here: Vec<String>, out: &mut Vec<Vec<String>>) {
    out.push(here.clone());
    match v {
        Value::Object(m) => m.iter().for_each(|(k, c)| {
            let mut p = here.clone();
            p.push(k.clone());
            paths(c, p, out);
        }),
        Value::Array(a) => a.iter().enumerate().for_each(|(i, c)| {
            let mut p = here.clone();
            p.push(i.to_string());
            paths(c, p, out);
        }),
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[String]) -> &'a mut Value {
    path.iter().fold(v, |v, k| match v {
        Value::Array(a) => &mut a[k.parse::<usize>().expect("index")],
        other => &mut other[k.as_str()],
    })
}

const WRONG: &[&str] = &[
    "null",
    "true",
    "\"text\"",
    "12",
    "-1",
    "1.5",
    "1e2",
    "3000000000",
    "99999999999999999999",
    "[]",
    "{}",
    "[1,2]",
    "{\"unknown\":[{\"deep\":null}]}",
];

#[test]
fn generated_runtimes_take_the_fast_path_and_mutations_are_answered_as_serde_answers_them() {
    let crd = serde_json::to_value(Runtime::crd()).expect("crd");
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    assert!(schema.is_object(), "the CRD has a schema");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut fast, mut valid, mut mutated) = (0, 0, 0);
    for case in 0..1500 {
        let mut doc = generate(schema, &mut rng, 0);
        doc["apiVersion"] = json!("infrastructuremanager.kyma-project.io/v1");
        doc["kind"] = json!("Runtime");
        doc["metadata"] = json!({
            "name": "runtime-1",
            "namespace": "kcp-system",
            "labels": {"kyma-project.io/runtime-id": "runtime-1", "x": STRINGS[rng.below(STRINGS.len())]},
            "creationTimestamp": "2026-11-30T12:00:00Z",
            "generation": rng.below(5),
            "finalizers": ["runtime-controller.infrastructure-manager.kyma-project.io/deletion-hook"],
            "managedFields": [{"manager": "keb", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
        });
        let text = doc.to_string();
        if serde_json::from_str::<Runtime>(&text).is_ok() {
            valid += 1;
            assert!(
                check(&format!("case {case}"), &text),
                "case {case}: the fast path fell back on a valid Runtime\n{text}"
            );
            fast += 1;
        } else {
            check(&format!("case {case}"), &text);
        }
        // One mutation: a wrong value somewhere, a removed field, or an extra unknown one.
        let mut all = Vec::new();
        paths(&doc, Vec::new(), &mut all);
        let path = &all[1 + rng.below(all.len() - 1)];
        let mut m = doc.clone();
        match rng.below(3) {
            0 => {
                *at(&mut m, path) =
                    serde_json::from_str(WRONG[rng.below(WRONG.len())]).expect("json")
            }
            1 => {
                let (last, parent) = path.split_last().expect("non-root");
                if let Value::Object(o) = at(&mut m, parent) {
                    o.remove(last);
                }
            }
            _ => {
                if let Value::Object(o) = at(&mut m, path) {
                    o.insert("notAField".into(), json!({"a": [1, {"b": "c"}]}));
                }
            }
        }
        check(&format!("case {case} mutated at {path:?}"), &m.to_string());
        mutated += 1;
    }
    assert!(
        valid > 1000,
        "the generator should mostly produce valid Runtimes: {valid}/1500"
    );
    assert_eq!(fast, valid);
    assert_eq!(mutated, 1500);
}

#[test]
fn byte_level_edits_never_make_the_fast_path_disagree_with_serde() {
    // Random edits of the text itself (not of a parsed value): a byte deleted, inserted or
    // replaced by one of JSON's structural characters, digits, escapes or letters; a span
    // duplicated. Most results are invalid JSON; whatever the fast path accepts must be what
    // serde accepts, equal, and `json::from_str` must answer as serde.
    let (_, base) = sample_runtimes()
        .into_iter()
        .find(|(n, _)| n.ends_with("aws.yaml#0"))
        .expect("aws.yaml");
    let text = base.to_string().into_bytes();
    const ALPHABET: &[u8] = b"{}[],:\"\\ 0123456789.-+eEtrufalsn/u\taZ";
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut accepted, mut refused) = (0, 0);
    for case in 0..4000 {
        let mut t = text.clone();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(t.len());
            match rng.below(4) {
                0 => {
                    t.remove(at);
                }
                1 => t.insert(at, ALPHABET[rng.below(ALPHABET.len())]),
                2 => t[at] = ALPHABET[rng.below(ALPHABET.len())],
                _ => {
                    let len = 1 + rng.below(20).min(t.len() - at - 1);
                    let span = t[at..at + len].to_vec();
                    t.splice(at..at, span);
                }
            }
        }
        let Ok(edited) = String::from_utf8(t) else {
            continue;
        };
        if check(&format!("byte edit {case}"), &edited) {
            accepted += 1;
        } else {
            refused += 1;
        }
    }
    // Both kinds occur: edits inside strings keep the document valid, most others do not.
    assert!(
        accepted > 100 && refused > 1000,
        "accepted {accepted}, refused {refused}"
    );
}

/// `metadata.managedFields` as the apiserver sends it (a Runtime created by KEB, then written
/// by the controller): checked exactly as serde checks it, and not kept.
#[test]
fn managed_fields_are_checked_as_serde_checks_them_and_not_kept() {
    let (_, mut base) = sample_runtimes()
        .into_iter()
        .find(|(n, _)| n.ends_with("aws.yaml#0"))
        .expect("aws.yaml");
    base["metadata"]["managedFields"] = json!([
        {"apiVersion": "infrastructuremanager.kyma-project.io/v1", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:kyma-project.io/runtime-id": {}}},
                      "f:spec": {".": {}, "f:shoot": {".": {}, "f:name": {}, "f:provider": {".": {}, "f:workers": {}}}}},
         "manager": "kyma-environment-broker", "operation": "Update", "time": "2026-11-30T17:12:47Z"},
        {"apiVersion": "infrastructuremanager.kyma-project.io/v1", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:status": {".": {}, "f:conditions": {}, "f:state": {}}},
         "manager": "kim-controller", "operation": "Apply", "subresource": "status",
         "time": "2026-11-30T17:12:48Z", "notAField": [1, {"a": null}]},
    ]);
    let text = base.to_string();
    let fast = json::fast_from_str::<Runtime>(&text).expect("the fast path reads managedFields");
    assert_eq!(fast.metadata.managed_fields, None, "checked, not kept");
    let serde = serde_json::from_str::<Runtime>(&text).expect("serde reads them");
    assert_eq!(
        serde.metadata.managed_fields.as_ref().map(Vec::len),
        Some(2)
    );
    assert!(check("managedFields", &text));
    // Values serde accepts (the fast path takes them) and refuses (the fast path declines).
    let entry = &base["metadata"]["managedFields"][0];
    let with = |field: &str, value: Value| {
        let mut doc = base.clone();
        let mut e = entry.clone();
        e[field] = value;
        doc["metadata"]["managedFields"] = json!([e]);
        doc.to_string()
    };
    let accepted = [
        with("manager", Value::Null),
        with("time", Value::Null),
        with("fieldsV1", json!([1, "x", null])),
        with("subresource", json!("status")),
        {
            let mut doc = base.clone();
            doc["metadata"]["managedFields"] = Value::Null;
            doc.to_string()
        },
    ];
    for (i, t) in accepted.iter().enumerate() {
        assert!(
            check(&format!("accepted {i}"), t),
            "accepted {i}: fast path\n{t}"
        );
    }
    let refused = [
        with("manager", json!(5)),
        with("operation", json!(["Update"])),
        with("time", json!("yesterday")),
        with("time", json!(1_764_522_767)),
        {
            let mut doc = base.clone();
            doc["metadata"]["managedFields"] = json!({"manager": "keb"});
            doc.to_string()
        },
        {
            let mut doc = base.clone();
            doc["metadata"]["managedFields"] = json!(["keb"]);
            doc.to_string()
        },
    ];
    // Timestamps (here and in `creationTimestamp`): the fast path parses them as serde does.
    for time in [
        "2026-11-30T17:12:47Z",
        "2026-11-30T17:12:47.123456789Z",
        "2026-11-30T17:12:47+02:00",
        "2026-11-30t17:12:47z",
        "2026-11-30 17:12:47Z",
        "2026-11-30T17:12:47",
        "2026-11-30",
        "2026-02-30T17:12:47Z",
        "2026-11-30T24:00:00Z",
        "",
    ] {
        for doc in [with("time", json!(time)), {
            let mut doc = base.clone();
            doc["metadata"]["creationTimestamp"] = json!(time);
            doc.to_string()
        }] {
            let fast = check(&format!("time {time:?}"), &doc);
            assert_eq!(
                fast,
                serde_json::from_str::<Runtime>(&doc).is_ok(),
                "time {time:?}: the fast path takes exactly what serde accepts"
            );
        }
    }
    for (i, t) in refused.iter().enumerate() {
        assert!(
            serde_json::from_str::<Runtime>(t).is_err(),
            "refused {i}: serde refuses it"
        );
        assert!(
            !check(&format!("refused {i}"), t),
            "refused {i}: the fast path declines"
        );
    }
}

/// `text` with whitespace around every structural character outside strings.
fn spaced(text: &str) -> String {
    let (mut out, mut in_string, mut escaped) = (String::new(), false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '}' | '[' | ']' | ',' | ':' => {
                out.push_str(" \r\n\t");
                out.push(c);
                out.push_str("\n  ");
            }
            _ => out.push(c),
        }
    }
    out
}

#[test]
fn textual_edge_cases_are_answered_as_serde_answers_them() {
    let (_, base) = sample_runtimes()
        .into_iter()
        .find(|(n, _)| n.ends_with("aws.yaml#0"))
        .expect("aws.yaml");
    let text = base.to_string();
    let spec_at = text.find("\"spec\":{").expect("spec") + "\"spec\":{".len();
    let mut cases = vec![
        // Duplicate keys: serde refuses a duplicate struct field, keeps the last map entry.
        text.replacen(
            "\"spec\":{",
            "\"spec\":{\"security\":{\"administrators\":[]},",
            1,
        ),
        text.replacen("\"labels\":{", "\"labels\":{\"x\":\"1\",\"x\":\"2\",", 1),
        text.replacen("\"metadata\":{", "\"metadata\":{\"name\":\"a\",", 1),
        // Keys with escapes, read as serde reads them: a duplicate of `security`, a field.
        text.replacen(
            "\"spec\":{",
            "\"spec\":{\"\\u0073ecurity\":{\"administrators\":[]},",
            1,
        ),
        // Invalid JSON inside an ignored field, trailing data, truncation, trailing comma.
        text.replacen("\"spec\":{", "\"spec\":{\"ignored\":01,", 1),
        text.replacen("\"spec\":{", "\"spec\":{\"ignored\":1.,", 1),
        text.replacen("\"spec\":{", "\"spec\":{\"ignored\":[1,],", 1),
        text.replacen("\"spec\":{", "\"spec\":{\"ignored\":\"\\x\",", 1),
        text.replacen("\"spec\":{", "\"spec\":{\"ignored\":tru,", 1),
        format!("{text} x"),
        text[..text.len() / 2].to_string(),
        // Whitespace everywhere JSON allows it.
        spaced(&text),
        // Deep nesting in an ignored field: past serde's limit of 128 and just under ours.
        format!(
            "{}\"ignored\":{}{},{}",
            &text[..spec_at],
            "[".repeat(200),
            "]".repeat(200),
            &text[spec_at..]
        ),
        format!(
            "{}\"ignored\":{}{},{}",
            &text[..spec_at],
            "[".repeat(90),
            "]".repeat(90),
            &text[spec_at..]
        ),
        // Unknown enum value, wrong-case field name, numbers as strings.
        text.replacen("\"type\":\"aws\"", "\"type\":\"AWS\"", 1),
        text.replacen("\"name\":", "\"Name\":", 1),
        text.replacen("\"spec\":{", "\"\\u0073pec\":{", 1),
        text.replacen("\"maximum\":", "\"maximum\":\"3\",\"x\":", 1),
    ];
    cases.push(String::new());
    cases.push("null".into());
    cases.push("[]".into());
    for (i, c) in cases.iter().enumerate() {
        check(&format!("edge case {i}"), c);
    }
    // Deep nesting must not overflow the stack, whatever serde answers.
    let deep = format!(
        "{{\"spec\":{}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    check("100,000 nested arrays", &deep);
    // The whitespace variant is still a valid Runtime, and takes the fast path.
    if let Err(e) = serde_json::from_str::<Runtime>(&cases[11]) {
        panic!("the whitespace variant must stay a valid Runtime: {e}");
    }
    assert!(check("whitespace", &cases[11]));
    let escaped = cases
        .iter()
        .find(|c| c.contains("\\u0073pec"))
        .expect("case");
    assert!(
        check("an escaped key", escaped),
        "keys with escapes are read in one pass"
    );
}
