//! Fixtures and assertions shared by the `validation_*` and `defaults_*` tests, included with
//! `#[path = "validation_fixtures/mod.rs"] mod fixtures;` (a folder, so that it is not a test
//! target of its own).
//!
//! The base Runtime is upstream's sample (`../shared/upstream/config/samples/
//! infrastructuremanager_v1_runtime.yaml`) with the placeholders a real Gardener would refuse
//! replaced (see [`sample`]); the configuration is the example in `deploy/config`.
#![allow(dead_code, clippy::unwrap_used)]

use kim_shared::api::{GardenerCluster, Runtime};
use kim_shared::config::{ConfigPaths, KimConfig};
use kim_shared::validation::{
    DeletionPolicy, Findings, Violation, validate_create, validate_delete, validate_update,
};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The upstream repository copy next to this repository (`../shared/upstream`).
pub fn upstream_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/upstream")
}

/// The example KIM configuration of `deploy/config`, loaded once.
pub fn config() -> &'static KimConfig {
    static CONFIG: OnceLock<KimConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/config/converter_config.json");
        KimConfig::load(&ConfigPaths::new(&path))
            .unwrap_or_else(|e| panic!("example configuration {} must load: {e}", path.display()))
    })
}

/// Reads an upstream YAML file (`path` relative to the upstream copy) as JSON, so that tests can
/// correct a placeholder before it meets the typed decoder.
pub fn upstream_json(path: &str) -> serde_json::Value {
    let file = upstream_dir().join(path);
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("upstream sample expected at {}: {e}", file.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{} is not YAML: {e}", file.display()))
}

/// Replacements every upstream Runtime sample needs before a real Gardener would take it, each
/// with the reason. Applied to the JSON form; a replacement whose field the sample lacks is
/// skipped.
pub const SAMPLE_REPLACEMENTS: &[(&str, &str, &str)] = &[
    (
        "/spec/shoot/secretBindingName",
        "\"hyperscaler-secret\"",
        "\"hyperscaler secret\" contains a space: no Kubernetes object (SecretBinding) can have that name",
    ),
    (
        "/spec/shoot/kubernetes/version",
        "\"1.35.4\"",
        "1.28.7 is long out of Gardener's support; the example configuration offers 1.33 and newer",
    ),
    (
        "/spec/shoot/enforceSeedLocation",
        "true",
        "the sap-converged-cloud sample writes the string \"true\" where the CRD declares a boolean",
    ),
];

/// An upstream Runtime sample with [`SAMPLE_REPLACEMENTS`] applied.
pub fn upstream_runtime(path: &str) -> Runtime {
    let mut json = upstream_json(path);
    for (pointer, value, _why) in SAMPLE_REPLACEMENTS {
        if let Some(slot) = json.pointer_mut(pointer) {
            *slot = serde_json::from_str(value).unwrap();
        }
    }
    serde_json::from_value(json)
        .unwrap_or_else(|e| panic!("{path} does not decode as a Runtime: {e}"))
}

/// The base fixture: upstream's `config/samples` Runtime (AWS, eu-central-1, three zones),
/// corrected as [`upstream_runtime`] says. It is valid as it is.
pub fn sample() -> Runtime {
    static SAMPLE: OnceLock<Runtime> = OnceLock::new();
    SAMPLE
        .get_or_init(|| upstream_runtime("config/samples/infrastructuremanager_v1_runtime.yaml"))
        .clone()
}

/// Upstream's GardenerCluster sample.
pub fn gardener_cluster() -> GardenerCluster {
    let json = upstream_json("config/samples/infrastructuremanager_v1_gardenercluster.yaml");
    serde_json::from_value(json).unwrap()
}

/// A Runtime built from the sample and changed by `edit`.
pub fn runtime(edit: impl FnOnce(&mut Runtime)) -> Runtime {
    let mut rt = sample();
    edit(&mut rt);
    rt
}

fn list(f: &Findings) -> String {
    f.violations.iter().map(|v| format!("\n  {v}")).collect()
}

/// Asserts that `findings` admit the object.
pub fn allowed(findings: Findings) -> Findings {
    assert!(
        findings.is_allowed(),
        "expected the object to be admitted, but:{}",
        list(&findings)
    );
    findings
}

/// Asserts that `findings` deny the object for `field` and for no other field; returns the
/// violation of `field`.
pub fn denied(findings: Findings, field: &str) -> Violation {
    let hit = findings
        .violations
        .iter()
        .find(|v| v.field == field)
        .cloned();
    let Some(hit) = hit else {
        panic!("expected a violation of {field}, got:{}", list(&findings));
    };
    let others: Vec<&Violation> = findings
        .violations
        .iter()
        .filter(|v| v.field != field)
        .collect();
    assert!(
        others.is_empty(),
        "expected only violations of {field}, also got:{}",
        list(&findings)
    );
    assert!(
        !hit.message.is_empty(),
        "{field}: the message must say what would be valid"
    );
    hit
}

/// Asserts that validation on CREATE admits `rt`; returns the findings (for warnings).
pub fn accepts(rt: &Runtime) -> Findings {
    allowed(validate_create(rt, config()))
}

/// Asserts that validation on CREATE denies `rt` for `field` (and nothing else).
pub fn rejects(rt: &Runtime, field: &str) -> Violation {
    denied(validate_create(rt, config()), field)
}

/// [`rejects`], and the message contains `needle`.
pub fn rejects_with(rt: &Runtime, field: &str, needle: &str) -> Violation {
    let v = rejects(rt, field);
    assert!(
        v.message.contains(needle),
        "{field}: expected {needle:?} in the message, got {:?}",
        v.message
    );
    v
}

/// Asserts that validation on UPDATE from `old` admits `new`.
pub fn accepts_update(old: &Runtime, new: &Runtime) -> Findings {
    allowed(validate_update(old, new, config()))
}

/// Asserts that validation on UPDATE from `old` denies `new` for `field` (and nothing else).
pub fn rejects_update(old: &Runtime, new: &Runtime, field: &str) -> Violation {
    denied(validate_update(old, new, config()), field)
}

/// Validation on DELETE with the default policy at `now` (RFC3339).
pub fn delete_at(rt: &Runtime, now: &str) -> Findings {
    validate_delete(rt, &DeletionPolicy::default(), now.parse().unwrap())
}

/// Sets a label (or removes it with `None`).
pub fn set_label(rt: &mut Runtime, key: &str, value: Option<&str>) {
    let labels = rt.metadata.labels.get_or_insert_with(Default::default);
    match value {
        Some(v) => labels.insert(key.to_owned(), v.to_owned()),
        None => labels.remove(key),
    };
}

/// Sets an annotation.
pub fn set_annotation(rt: &mut Runtime, key: &str, value: &str) {
    rt.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.to_owned(), value.to_owned());
}

/// The main worker pool.
pub fn main_pool(rt: &mut Runtime) -> &mut kim_shared::gardener::Worker {
    &mut rt.spec.shoot.provider.workers[0]
}
