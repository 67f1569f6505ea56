//! `make fuzz-reviews`: randomised AdmissionReviews through the webhook's own entry points, the
//! way the server runs them (coverage-guided fuzzing needs a nightly toolchain; these are
//! property tests over generated input instead).
//!
//! Each case is one review body, built from the repository's samples (`config/samples/*.yaml`,
//! shaped as KEB writes them) in an AdmissionReview as the apiserver sends it, then changed
//! structurally (fields dropped, duplicated, replaced by values of another type or from another
//! sample, huge, empty and unicode strings, numbers such as `-0` and `1e400`, deeply nested
//! arrays, duplicate keys, truncation, random bytes), or fully random. For a Runtime the case
//! runs what the apiserver would: the mutating webhook ([`admission::mutate`]), its patch applied
//! to the object as sent, the validating webhook ([`admission::validate`]) on the result, and
//! for every CREATE or UPDATE it admits the conversion the controller runs
//! ([`to_shoot_with`]). GardenerClusters and RuntimeAccesses go through their validating webhook.
//!
//! The properties, each a failure naming the case:
//! - no panic, and no case slower than [`CASE_LIMIT`] in the webhook's and the conversion's
//!   code (in release runs: `cargo bench`); a hang aborts the run after [`HANG_LIMIT`], naming
//!   the case;
//! - every answer is an AdmissionReview response with the request's uid when the request is
//!   readable; a patch is base64 JSON Patch that applies to the object as sent;
//! - defaulting is idempotent: the defaulted object gets no further patch;
//! - every Runtime the webhooks admit (after defaulting) converts to a Shoot without error.
//!
//! Every case draws from its own generator seeded by the run's seed and the case number, so
//! `--case N` (with the same `--seed`) replays exactly one case and prints its body.
//!
//! `cargo bench` runs `--cases` (env `KIM_FUZZ_CASES`, default 1,000,000); `cargo test` runs a
//! quick 2,000 so that the generator keeps working. Flags: `--cases N`, `--seed S` (env
//! `KIM_FUZZ_SEED`), `--case N`, `--body FILE` (a saved body through the Runtime webhooks).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use kim_shared::api::runtime_access::RuntimeAccess;
use kim_shared::api::{GardenerCluster, Runtime};
use kim_shared::config::{ConfigPaths, KimConfig};
use kim_shared::convert::{ConvertOptions, to_shoot_with};
use kim_shared::validation;
use kim_webhook::admission::{self, AdmissionOutcome};
use kim_webhook::decode;
use kim_webhook::request::AdmissionContext;
use serde_json::{Map, Number, Value, json};

/// The fixed seed of `make fuzz-reviews` (printed with every run).
const DEFAULT_SEED: u64 = 0x4b49_4d5f_6675_7a7a;
const DEFAULT_CASES: u64 = 1_000_000;
const QUICK_CASES: u64 = 2_000;
/// A case slower than this is a failure (the apiserver's webhook timeout is 10 s, its default
/// in our configurations a few seconds; one review must never come near it).
const CASE_LIMIT: Duration = Duration::from_secs(1);
/// A case still running after this is a hang: the run stops, naming it.
const HANG_LIMIT: Duration = Duration::from_secs(20);

/// SplitMix64: small, fast, and the same sequence on every platform and toolchain, so that a
/// seed and a case number name one case for good.
struct Rng(u64);

impl Rng {
    fn for_case(seed: u64, case: u64) -> Rng {
        let mut r = Rng(seed ^ case.wrapping_mul(0xD1B5_4A32_D192_ED03));
        r.next();
        r
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// True with probability `percent` / 100.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// The seeds: the repository's samples as JSON.
struct Seeds {
    runtimes: Vec<Value>,
    gardener_cluster: Value,
    runtime_access: Value,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn load_seeds() -> Seeds {
    let dir = repo_root().join("config/samples");
    let read = |name: &str| -> Value {
        let text = std::fs::read_to_string(dir.join(name))
            .unwrap_or_else(|e| panic!("config/samples/{name}: {e}"));
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("config/samples/{name}: {e}"))
    };
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("runtime-") && n.ends_with(".yaml"))
        .collect();
    names.sort();
    let runtimes: Vec<Value> = names.iter().map(|n| read(n)).collect();
    assert!(
        runtimes.len() >= 5,
        "the Runtime samples of config/samples: {names:?}"
    );
    Seeds {
        runtimes,
        gardener_cluster: read("gardenercluster.yaml"),
        runtime_access: read("runtimeaccess.yaml"),
    }
}

// ---------------------------------------------------------------------------------------------
// Values

/// Marks a string that is replaced, after serialization, by raw text (a JSON token serde_json
/// cannot produce, or an invalid one): `RAW_MARK` + text + `RAW_MARK`.
const RAW_MARK: char = '\u{1}';

fn raw(text: impl std::fmt::Display) -> Value {
    Value::String(format!("{RAW_MARK}{text}{RAW_MARK}"))
}

/// JSON text serde_json never writes: numbers out of range or spelled unusually, invalid
/// escapes and literals, and some that are merely unusual.
const RAW_TOKENS: &[&str] = &[
    "-0",
    "-0.0",
    "0e0",
    "1e400",
    "-1e400",
    "1e-400",
    "1E2",
    "1.0",
    "123456789012345678901234567890",
    "-9223372036854775809",
    "18446744073709551616",
    "NaN",
    "Infinity",
    "01",
    "1.",
    ".5",
    "+1",
    "0x10",
    r#""\ud800""#,
    r#""\udc00\ud800""#,
    r#""\u0000""#,
    r#""\x""#,
    r#""\u00e9\ud83e\udd80""#,
    "tru",
    "nul",
    "[1,]",
    r#"{"a":1,}"#,
    r#"{"a" 1}"#,
    "[",
    "}",
    "\"unterminated",
];

const UNICODE: &[&str] = &[
    "é",
    "日本語",
    "🦀",
    "\u{202e}evil",
    "a\u{0301}",
    "\u{feff}",
    "\u{0}",
    "\u{7f}",
    "\n\t\r",
    "\u{10ffff}",
    "Ω≈ç√∫",
    "ｆｕｌｌｗｉｄｔｈ",
];

/// Strings that look like values of the Runtime's fields, valid or nearly so.
const LOOKALIKES: &[&str] = &[
    "",
    " ",
    "1.35",
    "1.34.4",
    "1.36.3",
    "x",
    "null",
    "true",
    "0",
    "-1",
    "10.250.0.0/16",
    "10.250.0.0/33",
    "0.0.0.0/0",
    "::/0",
    "fd00::/48",
    "256.1.1.1/8",
    "eu-central-1",
    "eu-central-1a",
    "westeurope",
    "1",
    "aws",
    "azure",
    "gcp",
    "openstack",
    "alicloud",
    "sap-converged-cloud",
    "trial",
    "production",
    "evaluation",
    "zone",
    "node",
    "calico",
    "cilium",
    "gardenlinux",
    "m6i.large",
    "Standard_D4s_v5",
    "cpu-worker-0",
    "Bad_Name",
    "-leading",
    "trailing-",
    "a@b",
    "@",
    "jane.doe@example.com",
    "https://kymatest.accounts400.ondemand.com",
    "http://insecure",
    "https://",
    "RS256",
    "none",
    "80Gi",
    "-1Gi",
    "1e3",
    "25%",
    "101%",
    "kyma-aws",
    "c-224f800",
    "2026-11-30T17:12:47Z",
    "not-a-date",
];

fn special_string(rng: &mut Rng) -> String {
    match rng.below(10) {
        0..=3 => (*rng.pick(LOOKALIKES)).to_owned(),
        4 | 5 => (*rng.pick(UNICODE)).to_owned(),
        6 => {
            let len = *rng.pick(&[63usize, 64, 253, 254, 4096]);
            "a".repeat(len)
        }
        7 => {
            // Huge: up to 1 MiB, mostly less.
            let len = *rng.pick(&[10_000usize, 65_536, 300_000, 1 << 20]);
            let unit = *rng.pick(&["a", "é", "🦀", "x-"]);
            unit.repeat(len / unit.len())
        }
        8 => (*rng.pick(LOOKALIKES)).to_uppercase(),
        _ => random_string(rng),
    }
}

fn random_string(rng: &mut Rng) -> String {
    let len = rng.below(24);
    (0..len)
        .map(|_| match rng.below(4) {
            0 => char::from(b'a' + rng.below(26) as u8),
            1 => char::from(b'0' + rng.below(10) as u8),
            2 => *rng.pick(&['-', '.', '/', ':', '_', '@', ' ', '"', '\\', '~']),
            // Any scalar value but the raw-text marker.
            _ => char::from_u32(rng.next() as u32 % 0x11_0000)
                .filter(|&c| c != RAW_MARK)
                .unwrap_or('\u{fffd}'),
        })
        .collect()
}

fn special_number(rng: &mut Rng) -> Value {
    match rng.below(16) {
        0 => json!(0),
        1 => json!(-1),
        2 => json!(1),
        3 => json!(i32::MAX),
        4 => json!(i64::from(i32::MAX) + 1),
        5 => json!(i64::from(i32::MIN) - 1),
        6 => json!(i64::MAX),
        7 => json!(i64::MIN),
        8 => json!(u64::MAX),
        9 => json!(0.5),
        10 => Number::from_f64(-0.0).map_or(Value::Null, Value::Number),
        11 => json!(f64::MAX),
        12 => json!(5e-324),
        13 => json!(9_007_199_254_740_993_u64),
        14 => json!(rng.below(30) as i64),
        _ => raw(rng.pick(RAW_TOKENS)),
    }
}

/// Nested arrays or objects `depth` deep, as raw text (serde_json reads 128 levels at most).
fn deep_nest(rng: &mut Rng) -> Value {
    let depth = *rng.pick(&[10usize, 127, 128, 129, 1_000, 100_000]);
    if rng.chance(50) {
        raw(format!("{}{}", "[".repeat(depth), "]".repeat(depth)))
    } else {
        raw(format!(
            "{}1{}",
            r#"{"a":"#.repeat(depth),
            "}".repeat(depth)
        ))
    }
}

const KEYS: &[&str] = &[
    "name",
    "type",
    "zones",
    "region",
    "version",
    "workers",
    "minimum",
    "maximum",
    "spec",
    "metadata",
    "labels",
    "shoot",
    "provider",
    "x-unknown",
    "",
    "managedFields",
    "Name",
];

fn random_value(rng: &mut Rng, depth: usize) -> Value {
    let pick = if depth >= 4 {
        rng.below(5)
    } else {
        rng.below(8)
    };
    match pick {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(50)),
        2 => special_number(rng),
        3 | 4 => Value::String(special_string(rng)),
        5 => Value::Array(
            (0..rng.below(5))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        6 => {
            let mut m = Map::new();
            for _ in 0..rng.below(5) {
                let k = if rng.chance(70) {
                    (*rng.pick(KEYS)).to_owned()
                } else {
                    random_string(rng)
                };
                m.insert(k, random_value(rng, depth + 1));
            }
            Value::Object(m)
        }
        _ => deep_nest(rng),
    }
}

// ---------------------------------------------------------------------------------------------
// Structural changes

/// Parts of a Runtime worth swapping with another sample's (provider against region, zones
/// against region, ...), and fields worth setting to a value of their own kind.
const RUNTIME_POINTERS: &[&str] = &[
    "/metadata/labels",
    "/metadata/name",
    "/spec/shoot/region",
    "/spec/shoot/platformRegion",
    "/spec/shoot/purpose",
    "/spec/shoot/secretBindingName",
    "/spec/shoot/provider",
    "/spec/shoot/provider/type",
    "/spec/shoot/provider/workers",
    "/spec/shoot/provider/workers/0/zones",
    "/spec/shoot/provider/workers/0/machine",
    "/spec/shoot/provider/workers/0/volume",
    "/spec/shoot/provider/workers/0/minimum",
    "/spec/shoot/provider/workers/0/maximum",
    "/spec/shoot/provider/additionalWorkers",
    "/spec/shoot/networking",
    "/spec/shoot/networking/nodes",
    "/spec/shoot/kubernetes",
    "/spec/shoot/kubernetes/version",
    "/spec/shoot/kubernetes/kubeAPIServer",
    "/spec/shoot/controlPlane",
    "/spec/security",
    "/spec/security/administrators",
];

/// One random change somewhere in `v`: walks down from the root, stopping at each level with
/// probability 1/4, and changes the node it stops at.
fn change_somewhere(v: &mut Value, rng: &mut Rng) {
    let mut node = v;
    loop {
        let descend = match &*node {
            Value::Object(m) => !m.is_empty() && !rng.chance(25),
            Value::Array(a) => !a.is_empty() && !rng.chance(25),
            _ => false,
        };
        if !descend {
            break;
        }
        node = match node {
            Value::Object(m) => {
                let i = rng.below(m.len());
                match m.values_mut().nth(i) {
                    Some(child) => child,
                    None => return,
                }
            }
            Value::Array(a) => {
                let i = rng.below(a.len());
                &mut a[i]
            }
            other => other,
        };
    }
    change_node(node, rng);
}

fn change_node(node: &mut Value, rng: &mut Rng) {
    match node {
        Value::Object(m) if !m.is_empty() && rng.chance(60) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            let key = rng.pick(&keys).clone();
            match rng.below(4) {
                // Drop a field.
                0 | 1 => {
                    m.remove(&key);
                }
                // A field under another name (a typo, an unknown field).
                2 => {
                    if let Some(v) = m.remove(&key) {
                        let new = match rng.below(3) {
                            0 => key.to_uppercase(),
                            1 => format!("{key}s"),
                            _ => random_string(rng),
                        };
                        m.insert(new, v);
                    }
                }
                // An unknown field next to the known ones.
                _ => {
                    let v = random_value(rng, 2);
                    m.insert(format!("{key}X"), v);
                }
            }
        }
        Value::Array(a) if !a.is_empty() && rng.chance(60) => {
            let i = rng.below(a.len());
            match rng.below(5) {
                0 => {
                    a.remove(i);
                }
                // Duplicate an element (duplicate pools, zones, administrators).
                1 | 2 => {
                    let e = a[i].clone();
                    a.insert(i, e);
                }
                // Many copies, some changed: long lists through the duplicate checks.
                3 => {
                    let e = a[i].clone();
                    // At most about 4 MiB added: the server refuses bodies over 7 MiB unread.
                    let size = serde_json::to_string(&e).map_or(1, |t| t.len().max(1));
                    let n = (*rng.pick(&[10usize, 100, 1_000, 5_000])).min((4 << 20) / size);
                    for k in 0..n {
                        let mut c = e.clone();
                        if let Value::String(s) = &mut c
                            && rng.chance(50)
                        {
                            s.push_str(&k.to_string());
                        }
                        a.push(c);
                    }
                }
                _ => a.clear(),
            }
        }
        _ => {
            *node = match rng.below(7) {
                0 => Value::Null,
                1 => Value::String(special_string(rng)),
                2 => special_number(rng),
                3 => deep_nest(rng),
                4 => Value::Bool(rng.chance(50)),
                5 => match node {
                    // Same type, another value: a string kept a string, a number a number.
                    Value::String(_) => Value::String(special_string(rng)),
                    Value::Number(_) => special_number(rng),
                    _ => random_value(rng, 1),
                },
                _ => random_value(rng, 1),
            };
        }
    }
}

/// Replaces a part of `rt` by the same part of another sample (or a value of its own kind).
fn cross_over(rt: &mut Value, seeds: &Seeds, rng: &mut Rng) {
    let ptr = *rng.pick(RUNTIME_POINTERS);
    let donor = rng.pick(&seeds.runtimes);
    let replacement = match donor.pointer(ptr) {
        Some(v) if rng.chance(80) => v.clone(),
        Some(Value::String(_)) | None => Value::String((*rng.pick(LOOKALIKES)).to_owned()),
        Some(Value::Number(_)) => special_number(rng),
        Some(_) => random_value(rng, 1),
    };
    if let Some(slot) = rt.pointer_mut(ptr) {
        *slot = replacement;
    } else if let Some((parent, key)) = ptr.rsplit_once('/')
        && let Some(Value::Object(m)) = rt.pointer_mut(parent)
    {
        m.insert(key.to_owned(), replacement);
    }
}

/// The Runtime as KEB would send it, with some changes.
fn changed_runtime(seeds: &Seeds, rng: &mut Rng) -> Value {
    let mut rt = rng.pick(&seeds.runtimes).clone();
    // A fifth stays as it is (besides the defaults left out below): the admitted path must be
    // well covered, not only the refusals.
    if rng.chance(30)
        && let Some(k) = rt
            .pointer_mut("/spec/shoot/kubernetes")
            .and_then(Value::as_object_mut)
    {
        k.remove("version");
    }
    if rng.chance(20) {
        return rt;
    }
    for _ in 0..=rng.below(3) {
        if rng.chance(45) {
            cross_over(&mut rt, seeds, rng);
        } else {
            change_somewhere(&mut rt, rng);
        }
    }
    rt
}

fn changed_object(seed: &Value, rng: &mut Rng) -> Value {
    let mut v = seed.clone();
    if rng.chance(20) {
        return v;
    }
    for _ in 0..=rng.below(3) {
        change_somewhere(&mut v, rng);
    }
    v
}

// ---------------------------------------------------------------------------------------------
// Reviews

/// Which admitted type a case is about.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Runtime,
    GardenerCluster,
    RuntimeAccess,
}

impl Kind {
    fn gvk(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Kind::Runtime => (
                "infrastructuremanager.kyma-project.io",
                "Runtime",
                "runtimes",
            ),
            Kind::GardenerCluster => (
                "infrastructuremanager.kyma-project.io",
                "GardenerCluster",
                "gardenerclusters",
            ),
            Kind::RuntimeAccess => (
                "infrastructuremanager.kyma-project.io",
                "RuntimeAccess",
                "runtimeaccesses",
            ),
        }
    }
}

/// An AdmissionReview as the apiserver sends it (managedFields, userInfo extra, options).
fn review(kind: Kind, op: &str, object: Value, old: Value, rng: &mut Rng) -> Value {
    let (group, k, resource) = kind.gvk();
    let with_managed = |mut o: Value| {
        if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert(
                "managedFields".into(),
                json!([{"apiVersion": format!("{group}/v1"), "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {".": {}, "f:shoot": {".": {}}}},
                    "manager": "kyma-environment-broker", "operation": "Update",
                    "time": "2026-11-30T17:12:47Z"}]),
            );
        }
        o
    };
    let name = object
        .pointer("/metadata/name")
        .or_else(|| old.pointer("/metadata/name"))
        .cloned()
        .unwrap_or(json!(""));
    let mut request = json!({
        "uid": format!("{:016x}-review", rng.next()),
        "kind": {"group": group, "version": "v1", "kind": k},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "requestKind": {"group": group, "version": "v1", "kind": k},
        "name": name,
        "namespace": "kcp-system",
        "operation": op,
        "userInfo": {
            "username": "system:serviceaccount:kcp-system:kcp-kyma-environment-broker",
            "uid": "3f0c8a52-5d0e-4c1b-9d8e-1f2a3b4c5d6e",
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/pod-name": ["keb-7d9c8b6f5-x2x4z"]}
        },
        "object": with_managed(object),
        "oldObject": with_managed(old),
        "dryRun": rng.chance(10),
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "keb"}
    });
    if rng.chance(3) {
        request["subResource"] = json!("status");
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// JSON text of `v`, with the raw-text markers replaced by their text.
fn render(v: &Value) -> Vec<u8> {
    let text = serde_json::to_string(v).unwrap();
    // serde_json escapes the marker character as \u0001.
    const ESCAPED: &str = "\\u0001";
    if !text.contains(ESCAPED) {
        return text.into_bytes();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    // `"\u0001<text>\u0001"`: the quotes go too. The text was escaped by serde_json; undo the
    // escapes of `"` and `\` it may contain.
    while let Some(start) = rest.find(&format!("\"{ESCAPED}")) {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1 + ESCAPED.len()..];
        let Some(end) = after.find(&format!("{ESCAPED}\"")) else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        match serde_json::from_str::<String>(&format!("\"{}\"", &after[..end])) {
            Ok(inner) => out.push_str(&inner),
            Err(_) => {
                out.push_str(&rest[start..start + 1 + ESCAPED.len() + end + ESCAPED.len() + 1])
            }
        }
        rest = &after[end + ESCAPED.len() + 1..];
    }
    out.push_str(rest);
    out.into_bytes()
}

/// Changes of the text itself.
fn change_text(body: &mut Vec<u8>, rng: &mut Rng) {
    if body.is_empty() {
        return;
    }
    match rng.below(9) {
        // Truncated.
        0 | 1 => {
            let at = rng.below(body.len());
            body.truncate(at);
        }
        // Random bytes inserted (not necessarily UTF-8).
        2 => {
            let at = rng.below(body.len());
            let bytes: Vec<u8> = (0..1 + rng.below(16)).map(|_| rng.next() as u8).collect();
            body.splice(at..at, bytes);
        }
        // A byte replaced.
        3 => {
            let at = rng.below(body.len());
            body[at] = rng.next() as u8;
        }
        // A duplicate key: `"key":<value>,` before an existing `"key":`.
        4 | 5 => {
            let ends: Vec<usize> = body
                .windows(2)
                .enumerate()
                .filter(|(_, w)| w == b"\":")
                .map(|(i, _)| i)
                .collect();
            if ends.is_empty() {
                return;
            }
            let end = *rng.pick(&ends);
            let Some(start) = body[..end].iter().rposition(|&b| b == b'"') else {
                return;
            };
            let key = body[start..=end].to_vec();
            let value = if rng.chance(50) {
                render(&random_value(rng, 2))
            } else {
                b"\"dup\"".to_vec()
            };
            let mut insert = key;
            insert.push(b':');
            insert.extend(value);
            insert.push(b',');
            body.splice(start..start, insert);
        }
        // Byte-order mark, whitespace, trailing data, two documents.
        6 => {
            let prefixes: [&[u8]; 3] = [b"\xef\xbb\xbf", b"   \n\t", b""];
            let prefix = *rng.pick(&prefixes);
            body.splice(0..0, prefix.iter().copied());
            let suffixes: [&[u8]; 5] = [b" trailing", b"{}", b"\n", b"\0", b""];
            let suffix = *rng.pick(&suffixes);
            body.extend_from_slice(suffix);
        }
        // A number replaced by an unusual spelling.
        7 => {
            let digits: Vec<usize> = body
                .iter()
                .enumerate()
                .filter(|(i, b)| {
                    b.is_ascii_digit() && *i > 0 && matches!(body[i - 1], b':' | b'[' | b',')
                })
                .map(|(i, _)| i)
                .collect();
            if digits.is_empty() {
                return;
            }
            let start = *rng.pick(&digits);
            let end = body[start..]
                .iter()
                .position(|b| !matches!(b, b'0'..=b'9' | b'.' | b'e' | b'E' | b'-' | b'+'))
                .map_or(body.len(), |n| start + n);
            let token = rng.pick(RAW_TOKENS).as_bytes().to_vec();
            body.splice(start..end, token);
        }
        // The middle cut out.
        _ => {
            let a = rng.below(body.len());
            let b = a + rng.below(body.len() - a);
            body.drain(a..b);
        }
    }
}

/// One generated case: what to send and to which type's webhooks.
struct Case {
    kind: Kind,
    body: Vec<u8>,
}

fn generate(seeds: &Seeds, rng: &mut Rng) -> Case {
    let kind = match rng.below(100) {
        0..=87 => Kind::Runtime,
        88..=93 => Kind::GardenerCluster,
        _ => Kind::RuntimeAccess,
    };
    // Fully random: bytes, or any JSON value as the body.
    if rng.chance(4) {
        let body = match rng.below(3) {
            0 => (0..rng.below(2048)).map(|_| rng.next() as u8).collect(),
            1 => render(&random_value(rng, 0)),
            _ => Vec::new(),
        };
        return Case { kind, body };
    }
    let fresh = |rng: &mut Rng| match kind {
        Kind::Runtime => changed_runtime(seeds, rng),
        Kind::GardenerCluster => changed_object(&seeds.gardener_cluster, rng),
        Kind::RuntimeAccess => changed_object(&seeds.runtime_access, rng),
    };
    let unchanged = |rng: &mut Rng| match kind {
        Kind::Runtime => rng.pick(&seeds.runtimes).clone(),
        Kind::GardenerCluster => seeds.gardener_cluster.clone(),
        Kind::RuntimeAccess => seeds.runtime_access.clone(),
    };
    let (op, object, old) = match rng.below(100) {
        0..=59 => ("CREATE", fresh(rng), Value::Null),
        60..=84 => {
            // An update of a stored object: mostly one stored as the samples are, the new one
            // changed from it.
            let old = if rng.chance(80) {
                unchanged(rng)
            } else {
                fresh(rng)
            };
            let mut new = old.clone();
            if matches!(kind, Kind::Runtime) && rng.chance(50) {
                cross_over(&mut new, seeds, rng);
            } else {
                change_somewhere(&mut new, rng);
            }
            ("UPDATE", new, old)
        }
        85..=96 => ("DELETE", Value::Null, fresh(rng)),
        _ => (
            *rng.pick(&["CONNECT", "PATCH", "create", ""]),
            fresh(rng),
            Value::Null,
        ),
    };
    let mut review = review(kind, op, object, old, rng);
    // The envelope changed too.
    if rng.chance(8) {
        change_somewhere(&mut review, rng);
    }
    let mut body = render(&review);
    if rng.chance(15) {
        for _ in 0..=rng.below(2) {
            change_text(&mut body, rng);
        }
    }
    Case { kind, body }
}

// ---------------------------------------------------------------------------------------------
// Running a case

/// What the webhooks answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// A Runtime CREATE or UPDATE admitted by both webhooks (and converted).
    Admitted,
    /// A Runtime UPDATE admitted whose stored object would not have been admitted on CREATE
    /// (the conversion is not checked: see [`runtime_case`]).
    AdmittedUnchecked,
    /// Allowed without a judgement: DELETE, CONNECT, subresources, other types' allowed.
    AllowedOther,
    /// Read, and denied by a rule (or for its kind, version or shape).
    Denied,
    /// The review was read but an object does not match the type (a field of the wrong type,
    /// a duplicate field, ...): denied naming the field.
    Schema,
    /// Not read: not JSON, or not an AdmissionReview.
    Malformed,
}

/// [`Outcome::Schema`] or [`Outcome::Malformed`] for a body that does not decode.
fn undecodable(body: &[u8]) -> Outcome {
    match decode::raw_review(body) {
        Ok(r) if r.request.is_some() => Outcome::Schema,
        _ => Outcome::Malformed,
    }
}

struct Ctx {
    cfg: Arc<KimConfig>,
    /// The webhook with its default flags, and with `--audit-log-mandatory=false`.
    strict: AdmissionContext,
    lenient: AdmissionContext,
}

fn context() -> Ctx {
    let cfg = Arc::new(
        KimConfig::load(&ConfigPaths::new(
            repo_root().join("deploy/config/converter_config.json"),
        ))
        .expect("deploy/config/converter_config.json loads"),
    );
    let strict = AdmissionContext {
        config: Some(cfg.clone()),
        ..AdmissionContext::default()
    };
    let mut lenient = strict.clone();
    lenient.validation.audit_log_mandatory = false;
    Ctx {
        cfg,
        strict,
        lenient,
    }
}

/// The `response` of an answer, checked for shape and uid.
fn response(a: &AdmissionOutcome, body: &[u8]) -> Result<Value, String> {
    let v: Value = serde_json::from_slice(&a.body).map_err(|e| format!("answer not JSON: {e}"))?;
    if v["apiVersion"] != "admission.k8s.io/v1" || v["kind"] != "AdmissionReview" {
        return Err(format!("answer is not an AdmissionReview: {v}"));
    }
    let r = v["response"].clone();
    if !r["allowed"].is_boolean() || !r["uid"].is_string() {
        return Err(format!("answer without allowed/uid: {r}"));
    }
    if let Ok(raw) = decode::raw_review(body)
        && let Some(req) = raw.request
        && r["uid"] != req.uid.as_str()
    {
        return Err(format!(
            "answer uid {} is not the request's {:?}",
            r["uid"], req.uid
        ));
    }
    Ok(r)
}

fn allowed(r: &Value) -> bool {
    r["allowed"] == true
}

/// The JSON patch of a mutating answer, if any.
fn patch_of(r: &Value) -> Result<Option<json_patch::Patch>, String> {
    let Some(p) = r.get("patch") else {
        return Ok(None);
    };
    if r["patchType"] != "JSONPatch" {
        return Err(format!("patch without patchType JSONPatch: {r}"));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(p.as_str().unwrap_or_default())
        .map_err(|e| format!("patch not base64: {e}"))?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| format!("patch not a JSON Patch: {e}"))
}

/// Time spent in the webhook's and the controller's code (the checks of this harness, which
/// read some answers twice, do not count).
#[derive(Default)]
struct Spent(Duration);

impl Spent {
    fn run<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let t0 = Instant::now();
        let r = f();
        self.0 += t0.elapsed();
        r
    }
}

fn run_case(ctx: &Ctx, case: &Case, lenient: bool, spent: &mut Spent) -> Result<Outcome, String> {
    let now = SystemTime::now();
    let actx = if lenient { &ctx.lenient } else { &ctx.strict };
    let body = case.body.as_slice();
    match case.kind {
        Kind::GardenerCluster => {
            let a = spent.run(|| admission::validate::<GardenerCluster>(body, actx, now));
            let r = response(&a, body)?;
            Ok(judged::<GardenerCluster>(body, &r))
        }
        Kind::RuntimeAccess => {
            let a = spent.run(|| admission::validate::<RuntimeAccess>(body, actx, now));
            let r = response(&a, body)?;
            Ok(judged::<RuntimeAccess>(body, &r))
        }
        Kind::Runtime => runtime_case(ctx, actx, body, lenient, now, spent),
    }
}

/// The outcome of an answer `r` to `body` for a type that is only validated.
fn judged<T: kim_webhook::request::Object>(body: &[u8], r: &Value) -> Outcome {
    match decode::review::<T>(body) {
        Err(_) => undecodable(body),
        Ok(_) if allowed(r) => Outcome::AllowedOther,
        Ok(_) => Outcome::Denied,
    }
}

fn runtime_case(
    ctx: &Ctx,
    actx: &AdmissionContext,
    body: &[u8],
    lenient: bool,
    now: SystemTime,
    spent: &mut Spent,
) -> Result<Outcome, String> {
    let mutated = spent.run(|| admission::mutate::<Runtime>(body, actx, now));
    let mutated = response(&mutated, body)?;
    let Ok(typed) = decode::review::<Runtime>(body) else {
        let outcome = undecodable(body);
        if allowed(&mutated) {
            // An object that is no Runtime passes on unchanged to the apiserver's schema
            // check; the validating webhook refuses whatever that check lets through.
            if outcome != Outcome::Schema || patch_of(&mutated)?.is_some() {
                return Err(
                    "mutate allowed a malformed review, or patched an object that does not decode"
                        .into(),
                );
            }
            let validated = spent.run(|| admission::validate::<Runtime>(body, actx, now));
            if allowed(&response(&validated, body)?) {
                return Err("validate allowed a review that does not decode".into());
            }
        }
        return Ok(outcome);
    };
    if !allowed(&mutated) {
        return Ok(Outcome::Denied);
    }
    let Some(req) = typed.review.request.as_ref() else {
        return Err("mutate allowed a review without a request".into());
    };
    let judged = matches!(
        req.operation,
        kube::core::admission::Operation::Create | kube::core::admission::Operation::Update
    ) && req.sub_resource.as_deref().is_none_or(str::is_empty);
    // What the apiserver hands the validating webhook: the object as sent with the patch
    // applied.
    let validate_body = match (patch_of(&mutated)?, typed.object_text.get()) {
        (Some(patch), Some(raw)) => {
            // The object as the webhook read it for the patch: without managedFields, which
            // the patch never touches and the validation never reads (and which may nest
            // deeper than serde_json builds trees).
            let mut object =
                decode::object_value(raw).map_err(|e| format!("object as sent: {e}"))?;
            json_patch::patch(&mut object, &patch)
                .map_err(|e| format!("the defaults patch does not apply to the object: {e}"))?;
            // In place of the object's text, the rest of the review as it was.
            let start = (raw.as_ptr() as usize)
                .checked_sub(body.as_ptr() as usize)
                .filter(|s| s + raw.len() <= body.len())
                .ok_or("the object's text is not part of the body")?;
            let mut text = body[..start].to_vec();
            text.extend(serde_json::to_vec(&object).unwrap());
            text.extend_from_slice(&body[start + raw.len()..]);
            // Defaulting is idempotent: the defaulted object needs no further patch.
            let again = spent.run(|| admission::mutate::<Runtime>(&text, actx, now));
            let again = response(&again, &text)?;
            if !allowed(&again) || again.get("patch").is_some() {
                return Err(format!(
                    "defaulting is not idempotent: the defaulted object gets {again}"
                ));
            }
            text
        }
        (Some(_), None) => return Err("a patch for a request without object".into()),
        (None, _) => body.to_vec(),
    };
    let validated = spent.run(|| admission::validate::<Runtime>(&validate_body, actx, now));
    let validated = response(&validated, &validate_body)?;
    if !allowed(&validated) {
        return Ok(Outcome::Denied);
    }
    if !judged {
        return Ok(Outcome::AllowedOther);
    }
    let typed = decode::review::<Runtime>(&validate_body)
        .map_err(|e| format!("the validated review does not decode: {e}"))?;
    let Some(req) = typed.review.request else {
        return Err("validated review without request".into());
    };
    let Some(new) = req.object else {
        return Err("admitted CREATE/UPDATE without object".into());
    };
    let opts = ConvertOptions {
        audit_log_mandatory: !lenient,
        ..ConvertOptions::default()
    };
    // An update converts against the Shoot of the stored Runtime. The property is about
    // Runtimes the webhooks let in: an update of a stored Runtime that would not have been
    // admitted on CREATE is judged only on what it changes (a Runtime stored before a rule
    // existed must still take its finalizer off), so it may stay as unconvertible as it was.
    let live = match &req.old_object {
        None => None,
        Some(old) => {
            let mut stored = old.clone();
            kim_shared::defaults::apply_defaults(&mut stored, &ctx.cfg);
            let admissible =
                validation::validate_create_with(&stored, &ctx.cfg, &actx.validation).is_allowed();
            match spent.run(|| to_shoot_with(old, &ctx.cfg, None, &opts)) {
                Ok(c) if admissible => Some(c.shoot),
                _ => return Ok(Outcome::AdmittedUnchecked),
            }
        }
    };
    spent
        .run(|| to_shoot_with(&new, &ctx.cfg, live.as_ref(), &opts))
        .map_err(|e| {
            format!(
                "admitted but not converted: {e}\n{}",
                serde_json::to_string(&new.spec).unwrap_or_default()
            )
        })?;
    Ok(Outcome::Admitted)
}

// ---------------------------------------------------------------------------------------------
// The run

struct Args {
    cases: u64,
    seed: u64,
    only: Option<u64>,
    body: Option<PathBuf>,
    quick: bool,
}

fn args() -> Args {
    let argv: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        argv.iter()
            .position(|a| a == name)
            .and_then(|i| argv.get(i + 1))
            .cloned()
    };
    let number = |s: String, what: &str| -> u64 {
        let s = s.replace('_', "");
        let parsed = match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => s.parse(),
        };
        parsed.unwrap_or_else(|e| panic!("{what} {s:?}: {e}"))
    };
    // `cargo bench` passes --bench; `cargo test` runs this target without it.
    let quick = !argv.iter().any(|a| a == "--bench");
    let cases = flag("--cases")
        .or_else(|| std::env::var("KIM_FUZZ_CASES").ok())
        .map_or(if quick { QUICK_CASES } else { DEFAULT_CASES }, |s| {
            number(s, "--cases")
        });
    let seed = flag("--seed")
        .or_else(|| std::env::var("KIM_FUZZ_SEED").ok())
        .map_or(DEFAULT_SEED, |s| number(s, "--seed"));
    let only = flag("--case").map(|s| number(s, "--case"));
    let body = flag("--body").map(PathBuf::from);
    Args {
        cases,
        seed,
        only,
        body,
        quick,
    }
}

#[derive(Default)]
struct Tally {
    by_kind: [[u64; 6]; 3],
    failures: Vec<(u64, String)>,
    max_case: Duration,
    max_case_index: u64,
    max_body: usize,
    over_10ms: u64,
}

fn kind_index(k: Kind) -> usize {
    match k {
        Kind::Runtime => 0,
        Kind::GardenerCluster => 1,
        Kind::RuntimeAccess => 2,
    }
}

fn outcome_index(o: Outcome) -> usize {
    match o {
        Outcome::Admitted => 0,
        Outcome::AdmittedUnchecked => 1,
        Outcome::AllowedOther => 2,
        Outcome::Denied => 3,
        Outcome::Schema => 4,
        Outcome::Malformed => 5,
    }
}

fn main() {
    let args = args();
    let seeds = load_seeds();
    let ctx = context();
    // Panics are caught per case and reported with the case; the hook would print each twice.
    std::panic::set_hook(Box::new(|_| {}));

    if let Some(path) = &args.body {
        // A saved body (target/fuzz-reviews/case-N.json) through the Runtime webhooks.
        let body = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let t0 = Instant::now();
        let m = admission::mutate::<Runtime>(&body, &ctx.strict, SystemTime::now());
        println!("mutate: {:?}, answer {} bytes", t0.elapsed(), m.body.len());
        let t0 = Instant::now();
        let v = admission::validate::<Runtime>(&body, &ctx.strict, SystemTime::now());
        println!(
            "validate: {:?}, answer {} bytes",
            t0.elapsed(),
            v.body.len()
        );
        let c = Case {
            kind: Kind::Runtime,
            body,
        };
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
            run_case(&ctx, &c, false, &mut Spent::default())
        }));
        println!("{}: {r:?}", path.display());
        std::process::exit(i32::from(!matches!(r, Ok(Ok(_)))));
    }
    if let Some(case) = args.only {
        let mut rng = Rng::for_case(args.seed, case);
        let c = generate(&seeds, &mut rng);
        let lenient = rng.chance(12);
        println!("{}", String::from_utf8_lossy(&c.body));
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
            run_case(&ctx, &c, lenient, &mut Spent::default())
        }));
        println!("case {case} (seed {:#x}): {r:?}", args.seed);
        std::process::exit(i32::from(!matches!(r, Ok(Ok(_)))));
    }

    println!(
        "random reviews: {} cases, seed {:#x} (replay one: --seed {:#x} --case N)",
        args.cases, args.seed, args.seed
    );
    // The watchdog: a case running longer than HANG_LIMIT stops the run, naming it.
    let current = Arc::new(AtomicU64::new(u64::MAX));
    let since = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    {
        let (current, since) = (current.clone(), since.clone());
        let seed = args.seed;
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(200));
                let case = current.load(Ordering::Acquire);
                let at = Duration::from_millis(since.load(Ordering::Acquire));
                if case != u64::MAX && started.elapsed().saturating_sub(at) > HANG_LIMIT {
                    eprintln!(
                        "FAIL: case {case} still running after {HANG_LIMIT:?} (a hang); replay with --seed {seed:#x} --case {case}"
                    );
                    std::process::exit(2);
                }
            }
        });
    }

    let mut t = Tally::default();
    let out_dir = repo_root().join("target/fuzz-reviews");
    for case in 0..args.cases {
        let mut rng = Rng::for_case(args.seed, case);
        let c = generate(&seeds, &mut rng);
        let lenient = rng.chance(12);
        t.max_body = t.max_body.max(c.body.len());
        since.store(
            u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            Ordering::Release,
        );
        current.store(case, Ordering::Release);
        let mut spent = Spent::default();
        let result =
            std::panic::catch_unwind(AssertUnwindSafe(|| run_case(&ctx, &c, lenient, &mut spent)));
        let mut took = spent.0;
        // Over the limit: measured twice more, the fastest counts, so that a case is not
        // blamed for another process taking the core (a slow case stays slow).
        if !args.quick && took > CASE_LIMIT && matches!(result, Ok(Ok(_))) {
            for _ in 0..2 {
                let mut again = Spent::default();
                let _ = run_case(&ctx, &c, lenient, &mut again);
                took = took.min(again.0);
            }
        }
        current.store(u64::MAX, Ordering::Release);
        if took > t.max_case {
            t.max_case = took;
            t.max_case_index = case;
        }
        if took > Duration::from_millis(10) {
            t.over_10ms += 1;
        }
        let failure = match result {
            Ok(Ok(o)) => {
                t.by_kind[kind_index(c.kind)][outcome_index(o)] += 1;
                // Enforced in release runs only: a debug build on a shared machine measures
                // neither the webhook nor its limit.
                (!args.quick && took > CASE_LIMIT)
                    .then(|| format!("took {took:?} (limit {CASE_LIMIT:?})"))
            }
            Ok(Err(e)) => Some(e),
            Err(panic) => Some(format!(
                "panicked: {}",
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )),
        };
        if let Some(f) = failure {
            let short: String = f.chars().take(2000).collect();
            eprintln!("FAIL case {case}: {short}");
            let _ = std::fs::create_dir_all(&out_dir);
            let _ = std::fs::write(out_dir.join(format!("case-{case}.json")), &c.body);
            t.failures.push((case, short));
        }
        if !args.quick && case > 0 && case % 100_000 == 0 {
            println!(
                "  {case} cases, {:.0} s, {} failures",
                started.elapsed().as_secs_f64(),
                t.failures.len()
            );
        }
    }
    let elapsed = started.elapsed();
    report(&args, &t, elapsed);
    if !t.failures.is_empty() {
        eprintln!(
            "{} of {} cases failed (bodies in {}); replay one with --seed {:#x} --case N",
            t.failures.len(),
            args.cases,
            out_dir.display(),
            args.seed
        );
        std::process::exit(1);
    }
    // The generator must reach every outcome, or the properties hold vacuously.
    let rt = t.by_kind[0];
    let runtime_cases: u64 = rt.iter().sum();
    assert!(
        rt[0] * 10 >= runtime_cases,
        "under a tenth of the Runtime cases were admitted ({} of {runtime_cases}): the conversion property is barely exercised",
        rt[0]
    );
    for (o, name) in [(3, "denied"), (4, "schema"), (5, "malformed")] {
        assert!(
            rt[o] * 20 >= runtime_cases,
            "under a twentieth of the Runtime cases were {name} ({} of {runtime_cases})",
            rt[o]
        );
    }
    for (k, name) in [(1, "GardenerCluster"), (2, "RuntimeAccess")] {
        assert!(
            t.by_kind[k][2] > 0 && t.by_kind[k][3] > 0,
            "{name}: no case allowed or none denied: {:?}",
            t.by_kind[k]
        );
    }
}

fn report(args: &Args, t: &Tally, elapsed: Duration) {
    let per_case_us = elapsed.as_secs_f64() * 1e6 / args.cases.max(1) as f64;
    println!(
        "random reviews: {} cases in {:.1} s ({per_case_us:.0} us per case), seed {:#x}, {} failures",
        args.cases,
        elapsed.as_secs_f64(),
        args.seed,
        t.failures.len()
    );
    println!(
        "  slowest case {} at {:.1} ms; {} cases over 10 ms; largest body {} bytes",
        t.max_case_index,
        t.max_case.as_secs_f64() * 1e3,
        t.over_10ms,
        t.max_body
    );
    println!(
        "  kind             admitted+converted  admitted-unchecked  allowed-other   denied   schema  malformed"
    );
    for (k, name) in [(0, "Runtime"), (1, "GardenerCluster"), (2, "RuntimeAccess")] {
        let [a, u, o, d, s, m] = t.by_kind[k];
        println!("  {name:<16} {a:>18}  {u:>18}  {o:>13}  {d:>7}  {s:>7}  {m:>9}");
    }
}
