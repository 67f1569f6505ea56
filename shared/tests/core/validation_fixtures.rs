//! Fixtures and assertions shared by the `validation_*` and `defaults_*` tests (and the
//! upstream-compatibility suite, which includes this file as a module of its own).
//!
//! The base Runtime is the project's AWS sample (`config/samples/runtime-aws.yaml`, shaped as KEB
//! writes it); the configuration is an operator's that narrows every list ([`config`]) or the
//! shipped one ([`shipped_config`]).
#![allow(clippy::unwrap_used)]

use kim_shared::api::{GardenerCluster, Runtime};
use kim_shared::config::{ConfigPaths, KimConfig};
use kim_shared::validation::{
    DeletionPolicy, ValidationOutcome, Violation, validate_create, validate_delete, validate_update,
};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The repository's own samples (`config/samples`).
pub fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/samples")
}

/// An operator's KIM configuration, loaded once: the shipped one (`deploy/config`) with every
/// optional narrowing list and default of `kim.providers` filled in
/// (`tests/core/data/operator_converter_config.json`), so that the rules on them are exercised.
pub fn config() -> &'static KimConfig {
    static CONFIG: OnceLock<KimConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let read = |p: PathBuf| {
            std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        };
        KimConfig::from_parts(
            &read(root.join("tests/core/data/operator_converter_config.json")),
            Some(&read(root.join("../deploy/config/audit_log_tenants.json"))),
            Some(&read(
                root.join("../deploy/config/maintenance_windows.json"),
            )),
        )
        .unwrap_or_else(|e| panic!("the operator configuration must load: {e}"))
    })
}

/// The shipped KIM configuration of `deploy/config`, loaded once.
pub fn shipped_config() -> &'static KimConfig {
    static CONFIG: OnceLock<KimConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/config/converter_config.json");
        KimConfig::load(&ConfigPaths::new(&path))
            .unwrap_or_else(|e| panic!("example configuration {} must load: {e}", path.display()))
    })
}

/// Reads one of the repository's samples (`name` in `config/samples`).
pub fn sample_file<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let file = samples_dir().join(name);
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("sample expected at {}: {e}", file.display()));
    serde_yaml_ng::from_str(&text)
        .unwrap_or_else(|e| panic!("{} does not decode: {e}", file.display()))
}

/// One of the repository's sample Runtimes, e.g. `sample_runtime("runtime-gcp.yaml")`.
pub fn sample_runtime(name: &str) -> Runtime {
    sample_file(name)
}

/// The base fixture: the AWS sample (eu-central-1, three zones). It is valid as it is.
pub fn sample() -> Runtime {
    static SAMPLE: OnceLock<Runtime> = OnceLock::new();
    SAMPLE
        .get_or_init(|| sample_runtime("runtime-aws.yaml"))
        .clone()
}

/// The GardenerCluster sample.
pub fn gardener_cluster() -> GardenerCluster {
    sample_file("gardenercluster.yaml")
}

/// A Runtime built from the sample and changed by `edit`.
pub fn runtime(edit: impl FnOnce(&mut Runtime)) -> Runtime {
    let mut rt = sample();
    edit(&mut rt);
    rt
}

fn list(f: &ValidationOutcome) -> String {
    f.violations.iter().map(|v| format!("\n  {v}")).collect()
}

/// Asserts that `findings` admit the object.
pub fn allowed(findings: ValidationOutcome) -> ValidationOutcome {
    assert!(
        findings.is_allowed(),
        "expected the object to be admitted, but:{}",
        list(&findings)
    );
    findings
}

/// Asserts that `findings` deny the object for `field` and for no other field; returns the
/// violation of `field`.
pub fn denied(findings: ValidationOutcome, field: &str) -> Violation {
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
pub fn accepts(rt: &Runtime) -> ValidationOutcome {
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
pub fn accepts_update(old: &Runtime, new: &Runtime) -> ValidationOutcome {
    allowed(validate_update(old, new, config()))
}

/// Asserts that validation on UPDATE from `old` denies `new` for `field` (and nothing else).
pub fn rejects_update(old: &Runtime, new: &Runtime, field: &str) -> Violation {
    denied(validate_update(old, new, config()), field)
}

/// Validation on DELETE with the default policy at `now` (RFC3339).
pub fn delete_at(rt: &Runtime, now: &str) -> ValidationOutcome {
    validate_delete(
        &rt.metadata,
        &DeletionPolicy::default(),
        now.parse().unwrap(),
    )
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

/// The sample with the main pool's volume of type `type_` and size `size`.
pub fn with_volume(type_: &str, size: &str) -> Runtime {
    runtime(|rt| {
        let Some(v) = main_pool(rt).volume.as_mut() else {
            panic!("the sample's main pool has a volume");
        };
        v.type_ = Some(type_.into());
        v.size = size.into();
    })
}
