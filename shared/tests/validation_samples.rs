//! Every upstream sample Runtime is admitted after defaulting, once the placeholders a real
//! Gardener would refuse too are replaced ([`fixtures::SAMPLE_REPLACEMENTS`], each with its
//! reason), and the admitted Runtime converts.
#![allow(clippy::unwrap_used)]

#[path = "validation_fixtures/mod.rs"]
mod fixtures;

use fixtures::*;
use kim_shared::api::Runtime;
use kim_shared::defaults::apply_defaults;
use kim_shared::validation::validate_create;

/// Every Runtime YAML of the two upstream sample folders, relative to the upstream copy.
fn runtime_samples() -> Vec<String> {
    let mut out = Vec::new();
    for folder in ["config/samples", "docs/adr/assets/runtime-examples"] {
        let dir = upstream_dir().join(folder);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("upstream samples expected in {}: {e}", dir.display()));
        for entry in entries {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if name.ends_with(".yaml")
                && upstream_json(&format!("{folder}/{name}"))["kind"] == "Runtime"
            {
                out.push(format!("{folder}/{name}"));
            }
        }
    }
    out.sort();
    assert!(
        out.len() >= 10,
        "expected the 10 upstream Runtime samples, found {out:?}"
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
    let json = upstream_json("config/samples/infrastructuremanager_v1_runtime.yaml");
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
    allowed(kim_shared::validation::validate_gardener_cluster(
        &gardener_cluster(),
    ));
}
