//! Every upstream sample of both folders (`config/samples/*.yaml`,
//! `docs/adr/assets/runtime-examples/*.yaml`, multi-document files included) deserializes into our types and serializes back without
//! losing or inventing a field. Each field of a sample must also be one that upstream's CRD
//! and ours accept.
//!
//! Sample fields upstream itself does not accept are listed in [`NOT_ACCEPTED_UPSTREAM`]: the
//! apiserver refuses them with upstream's CRD as with ours, so our types refuse them too; the
//! round trip runs on the sample with that field corrected. (The samples also carry labels such
//! as `kyma-project.io/controlled-by-provisioner` that upstream no longer reads; labels are
//! free-form metadata, so they are accepted and kept.)

use kim_shared::api::{GardenerCluster, Runtime};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `(sample document, field path, corrected value)`: sample fields upstream's CRD refuses; the
/// document is named relative to its upstream folder.
const NOT_ACCEPTED_UPSTREAM: &[(&str, &str, &str)] = &[
    // `enforceSeedLocation: "true"`: a string where the CRD wants a boolean.
    (
        "docs/adr/assets/runtime-examples/sap-converged-cloud.yaml#0",
        ".spec.shoot.enforceSeedLocation",
        "true",
    ),
];

/// `(file, document)` for every YAML document of the upstream samples of both folders; the
/// file is named `<upstream folder>/<path>`.
fn samples() -> Vec<(String, Value)> {
    let mut documents = Vec::new();
    for (root, folder) in crate::FOLDERS.into_iter().flat_map(|root| {
        ["config/samples", "docs/adr/assets/runtime-examples"].map(|folder| (root, folder))
    }) {
        let dir = crate::upstream_folder(root).join(folder);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("upstream samples expected in {}: {e}", dir.display()))
            .map(|entry| entry.expect("directory entry").path())
            .filter(|path| path.extension().is_some_and(|e| e == "yaml" || e == "yml"))
            .collect();
        // Today's folder also holds the samples' kustomization, which is no object.
        files.retain(|path| !path.ends_with("kustomization.yaml"));
        files.sort();
        assert!(!files.is_empty(), "no sample in {}", dir.display());
        for path in files {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let name = format!(
                "{root}/{folder}/{}",
                path.file_name().expect("name").to_string_lossy()
            );
            for (index, document) in serde_yaml_ng::Deserializer::from_str(&text).enumerate() {
                let value: Value = serde::Deserialize::deserialize(document)
                    .unwrap_or_else(|e| panic!("{name} document {index} is not YAML: {e}"));
                if !value.is_null() {
                    documents.push((format!("{name}#{index}"), value));
                }
            }
        }
    }
    documents
}

/// Removes `null` values: the apiserver drops them (no field of ours is nullable) and an
/// absent `Option` serializes as absent.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// The value at a `.a.b` path (objects only).
fn field_mut<'a>(value: &'a mut Value, path: &str) -> &'a mut Value {
    path.trim_start_matches('.')
        .split('.')
        .fold(value, |v, key| {
            v.get_mut(key).unwrap_or_else(|| panic!("no field {path}"))
        })
}

fn round_trip<T: DeserializeOwned + Serialize>(name: &str, sample: &Value) -> Value {
    let typed: T = serde_json::from_value(sample.clone())
        .unwrap_or_else(|e| panic!("{name} does not deserialize: {e}"));
    serde_json::to_value(&typed).unwrap_or_else(|e| panic!("{name} does not serialize: {e}"))
}

#[test]
fn every_sample_round_trips_through_our_types() {
    let samples = samples();
    let mut kinds = Vec::new();
    for (name, sample) in &samples {
        let kind = sample["kind"].as_str().unwrap_or_default();
        let mut sample = sample.clone();
        for (_, path, corrected) in NOT_ACCEPTED_UPSTREAM
            .iter()
            .filter(|(n, _, _)| name.split_once('/').is_some_and(|(_, rel)| rel == *n))
        {
            assert!(
                serde_json::from_value::<Runtime>(sample.clone()).is_err(),
                "{name}: {path} is invalid upstream, our type must refuse it too"
            );
            *field_mut(&mut sample, path) =
                serde_json::from_str(corrected).expect("corrected value is JSON");
        }
        let sample = &sample;
        let back = match kind {
            "Runtime" => round_trip::<Runtime>(name, sample),
            "GardenerCluster" => round_trip::<GardenerCluster>(name, sample),
            other => panic!("{name}: kind {other:?} has no type in kim-shared"),
        };
        pretty_assertions::assert_eq!(
            without_nulls(sample),
            without_nulls(&back),
            "{name} changed in a round trip"
        );
        kinds.push(kind.to_string());
    }
    // Guard against a silently empty fixture set: ten Runtimes in each folder.
    assert!(
        kinds.iter().filter(|k| *k == "Runtime").count() >= 20,
        "Runtime samples: {kinds:?}"
    );
    assert!(
        kinds.iter().any(|k| k == "GardenerCluster"),
        "no GardenerCluster sample"
    );
}

/// Field paths of `value` that `schema` does not declare (outside free-form parts) or whose
/// value has another type than declared.
fn undeclared_fields(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let type_ok = match (schema.get("type").and_then(Value::as_str), value) {
        _ if int_or_string => value.is_i64() || value.is_u64() || value.is_string(),
        (Some("boolean"), v) => v.is_boolean(),
        (Some("string"), v) => v.is_string(),
        (Some("integer"), v) => v.is_i64() || v.is_u64(),
        (Some("number"), v) => v.is_number(),
        (Some("object"), v) => v.is_object(),
        (Some("array"), v) => v.is_array(),
        _ => true,
    };
    if !type_ok {
        out.push(format!("{path} (wrong type: {value})"));
        return;
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let values = schema.get("additionalProperties").filter(|v| v.is_object());
            for (key, child) in map {
                let child_path = format!("{path}.{key}");
                match (properties.and_then(|p| p.get(key)), values) {
                    (Some(child_schema), _) | (None, Some(child_schema)) => {
                        undeclared_fields(child_schema, child, &child_path, out)
                    }
                    (None, None) => out.push(child_path),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    undeclared_fields(item_schema, item, &format!("{path}[{index}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn crd_schema(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

/// The upstream CRD of `plural` in the folder (`upstream` or `upstream-2026-07`).
fn upstream_crd(root: &str, plural: &str) -> Value {
    let path = crate::upstream_folder(root)
        .join("config/crd/bases")
        .join(format!(
            "infrastructuremanager.kyma-project.io_{plural}.yaml"
        ));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("upstream CRD is YAML"))
        .find(|v: &Value| !v.is_null())
        .unwrap_or_else(|| panic!("{} holds no CRD", Path::new(&path).display()))
}

#[test]
fn every_sample_field_is_declared_upstream_and_here() {
    let ours: Vec<Value> = kim_shared::crds::all()
        .iter()
        .map(|crd| serde_json::to_value(crd).expect("CRD serializes"))
        .collect();
    let mut problems = Vec::new();
    let mut refused_upstream = Vec::new();
    for (name, sample) in samples() {
        let plural = match sample["kind"].as_str() {
            Some("Runtime") => "runtimes",
            Some("GardenerCluster") => "gardenerclusters",
            other => panic!("{name}: unexpected kind {other:?}"),
        };
        // Each sample against the CRD of its own folder.
        let root = name.split('/').next().expect("folder");
        let upstream = upstream_crd(root, plural);
        let mine = ours
            .iter()
            .find(|c| c["spec"]["names"]["plural"] == plural)
            .expect("our CRD for the sample's kind");
        for (whose, crd) in [("upstream", &upstream), ("our", mine)] {
            let mut fields = Vec::new();
            // metadata is checked by the apiserver itself, not by the CRD schema.
            let mut body = sample.clone();
            body.as_object_mut()
                .expect("sample is an object")
                .remove("metadata");
            undeclared_fields(crd_schema(crd), &body, "", &mut fields);
            for field in fields {
                let known = NOT_ACCEPTED_UPSTREAM.iter().any(|(n, p, _)| {
                    name.split_once('/').is_some_and(|(_, rel)| rel == *n)
                        && field.starts_with(&format!("{p} "))
                });
                if !known {
                    problems.push(format!("{name}: {field} is not accepted by {whose} CRD"));
                } else if whose == "upstream" {
                    refused_upstream.push(name.clone());
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for (name, path, _) in NOT_ACCEPTED_UPSTREAM {
        assert!(
            crate::FOLDERS
                .iter()
                .all(|root| refused_upstream.contains(&format!("{root}/{name}"))),
            "{name}: {path} is listed as refused upstream but upstream's CRD accepts it"
        );
    }
}
