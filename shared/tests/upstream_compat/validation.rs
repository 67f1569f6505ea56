//! Every upstream sample Runtime of both folders (the 2025 baseline and today) is admitted after
//! defaulting, once the placeholders a real
//! Gardener would refuse too are replaced ([`SAMPLE_REPLACEMENTS`], each with its reason), and
//! the admitted Runtime converts.

use crate::fixtures::{allowed, config};
use kim_shared::api::{GardenerCluster, Runtime};
use kim_shared::defaults::apply_defaults;
use kim_shared::validation::validate_create;

/// Reads an upstream YAML file (`path` = `<upstream folder>/<path in it>`, for example
/// `upstream-2026-07/config/samples/...`) as JSON, so that a test can correct a placeholder
/// before it meets the typed decoder.
pub fn upstream_json(path: &str) -> serde_json::Value {
    let (root, rel) = path
        .split_once('/')
        .unwrap_or_else(|| panic!("{path} names no upstream folder"));
    let file = crate::upstream_folder(root).join(rel);
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
    // The ADR examples carry the placeholder runtime ID "runtime-id" under names such as
    // "aws-full"; KEB names every Runtime after its runtime ID, and admission holds the label
    // to the name.
    let name = json["metadata"]["name"].clone();
    if let Some(id) = json.pointer_mut("/metadata/labels/kyma-project.io~1runtime-id") {
        *id = name;
    }
    serde_json::from_value(json)
        .unwrap_or_else(|e| panic!("{path} does not decode as a Runtime: {e}"))
}

/// Every Runtime YAML of the two sample folders of both upstream folders.
fn runtime_samples() -> Vec<String> {
    let mut out = Vec::new();
    for (root, folder) in crate::FOLDERS.into_iter().flat_map(|root| {
        ["config/samples", "docs/adr/assets/runtime-examples"].map(|folder| (root, folder))
    }) {
        let dir = crate::upstream_folder(root).join(folder);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("upstream samples expected in {}: {e}", dir.display()));
        for entry in entries {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if name.ends_with(".yaml")
                && upstream_json(&format!("{root}/{folder}/{name}"))["kind"] == "Runtime"
            {
                out.push(format!("{root}/{folder}/{name}"));
            }
        }
    }
    out.sort();
    assert!(
        out.len() >= 20,
        "expected the 10 upstream Runtime samples of each folder, found {out:?}"
    );
    out
}

#[test]
fn every_upstream_sample_is_admitted_after_defaulting_and_converts() {
    for path in runtime_samples() {
        let mut rt: Runtime = upstream_runtime(&path);
        apply_defaults(&mut rt, config());
        let findings = validate_create(&rt, config());
        assert!(
            findings.is_allowed(),
            "{path} is refused:{}",
            findings
                .violations
                .iter()
                .map(|v| format!("\n  {v}"))
                .collect::<String>()
        );
        if let Err(e) = kim_shared::convert::to_shoot(&rt, config(), None) {
            panic!("{path} is admitted but does not convert: {e}");
        }
    }
}

#[test]
fn the_raw_samples_are_refused_for_exactly_the_replaced_placeholders() {
    // Without the replacements, the validation names the fields the replacements fix.
    let json = upstream_json("upstream/config/samples/infrastructuremanager_v1_runtime.yaml");
    let mut rt: Runtime = serde_json::from_value(json).unwrap();
    apply_defaults(&mut rt, config());
    let f = validate_create(&rt, config());
    let mut fields: Vec<&str> = f.violations.iter().map(|v| v.field.as_str()).collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "spec.shoot.kubernetes.version",
            "spec.shoot.secretBindingName"
        ],
        "{:?}",
        f.violations
    );
}

#[test]
fn the_gardener_cluster_sample_is_admitted() {
    let json =
        upstream_json("upstream/config/samples/infrastructuremanager_v1_gardenercluster.yaml");
    let gc: GardenerCluster = serde_json::from_value(json).unwrap();
    allowed(kim_shared::validation::validate_gardener_cluster(&gc));
}
