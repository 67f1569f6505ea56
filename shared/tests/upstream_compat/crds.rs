//! Our CRDs accept everything upstream's CRDs accept.
//!
//! Reads every CRD in `config/crd/bases/` of both upstream folders (the 2025 baseline
//! `upstream/` and today's `upstream-2026-07/`) and walks its `openAPIV3Schema` next to ours: every field path upstream has must exist in ours with the same type (and
//! format, int-or-string, preserve-unknown-fields, list type, validations), the same required
//! fields and at least upstream's enum values. CRD names, scope, versions, subresources and
//! printer columns must be the same. The few deliberate differences are listed in
//! [`ALLOWED_DIFFERENCES`] and recorded in `docs/upstream-differences.md`; the baseline may
//! differ where upstream itself changed a field since ([`BASELINE_CHANGED_UPSTREAM`]).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// `(CRD name, schema path, what differs)`: deliberate, documented differences.
const ALLOWED_DIFFERENCES: &[(&str, &str, &str)] = &[
    // A Runtime without `spec` cannot be processed; upstream's CRD accepts one, ours refuses it.
    (
        "runtimes.infrastructuremanager.kyma-project.io",
        "",
        "required",
    ),
    // Conditions are keyed by type so that server-side apply merges them one by one
    // (upstream's GardenerCluster already does this; its Runtime does not).
    (
        "runtimes.infrastructuremanager.kyma-project.io",
        ".status.conditions",
        "x-kubernetes-list-type",
    ),
    (
        "runtimes.infrastructuremanager.kyma-project.io",
        ".status.conditions",
        "x-kubernetes-list-map-keys",
    ),
];

/// `(CRD name, schema path, what differs)`: fields upstream changed after the 2025 baseline;
/// ours follow today's upstream, so only the baseline comparison allows them.
const BASELINE_CHANGED_UPSTREAM: &[(&str, &str, &str)] = &[
    // An object `{enabled}` in 2025, a list of caches today. Objects stored in the 2025 shape
    // are still read (docs/upstream-differences.md, "Objects stored in the 2025 shape").
    (
        "runtimes.infrastructuremanager.kyma-project.io",
        ".spec.imageRegistryCache",
        "type",
    ),
    (
        "runtimes.infrastructuremanager.kyma-project.io",
        ".spec.imageRegistryCache.enabled",
        "missing",
    ),
    (
        "runtimes.infrastructuremanager.kyma-project.io",
        ".spec.imageRegistryCache",
        "required",
    ),
];

/// Which upstream folder a comparison reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Folder {
    /// `upstream/`, the 2025 baseline.
    Baseline,
    /// `upstream-2026-07/`, upstream today.
    Today,
}

/// Validation keywords that must be equal wherever upstream sets them.
const SAME_IF_UPSTREAM_SETS: &[&str] = &[
    "format",
    "pattern",
    "maxLength",
    "minLength",
    "minimum",
    "maximum",
    "maxItems",
    "minItems",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "anyOf",
];

fn upstream_crd_dir(folder: Folder) -> PathBuf {
    let root = match folder {
        Folder::Baseline => crate::baseline(),
        Folder::Today => crate::today(),
    };
    root.join("config/crd/bases")
}

fn upstream_crds(folder: Folder) -> Vec<Value> {
    let dir = upstream_crd_dir(folder);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("upstream CRDs expected in {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no upstream CRD found in {}",
        dir.display()
    );
    let mut crds = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(document)
                .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
            if !value.is_null() {
                crds.push(value);
            }
        }
    }
    crds
}

fn our_crds() -> BTreeMap<String, Value> {
    kim_shared::crds::all()
        .into_iter()
        .map(|crd| {
            let value = serde_json::to_value(&crd).expect("CRD serializes");
            (crd.metadata.name.clone().expect("CRD has a name"), value)
        })
        .collect()
}

/// One node of a schema, reduced to what decides which objects it accepts.
#[derive(Debug)]
struct Node<'a> {
    schema: &'a Value,
}

impl Node<'_> {
    fn kind(&self) -> String {
        if self.schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            return "int-or-string".into();
        }
        match self.schema.get("type") {
            Some(Value::String(t)) => t.clone(),
            _ => "<no type>".into(),
        }
    }

    fn preserves_unknown(&self) -> bool {
        self.schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
    }

    fn required(&self) -> BTreeSet<String> {
        self.schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn enum_values(&self) -> Option<Vec<Value>> {
        self.schema.get("enum").and_then(Value::as_array).cloned()
    }
}

/// Every node of a schema by path: `.a.b` for properties, `[]` for items, `{}` for map values.
fn walk<'a>(schema: &'a Value, path: String, out: &mut BTreeMap<String, Node<'a>>) {
    out.insert(path.clone(), Node { schema });
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, child) in properties {
            walk(child, format!("{path}.{name}"), out);
        }
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        walk(items, format!("{path}[]"), out);
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        walk(values, format!("{path}{{}}"), out);
    }
}

fn allowed(folder: Folder, crd: &str, path: &str, what: &str) -> bool {
    ALLOWED_DIFFERENCES.contains(&(crd, path, what))
        || (folder == Folder::Baseline && BASELINE_CHANGED_UPSTREAM.contains(&(crd, path, what)))
        || (what == "maxItems" && bounded_by_us(crd, path))
}

/// The list at `path` of CRD `crd` carries one of our documented bounds
/// (`kim_shared::crds::LIST_BOUNDS`, each recorded in `docs/upstream-differences.md`).
fn bounded_by_us(crd: &str, path: &str) -> bool {
    let Some(kind) = kim_shared::crds::all()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(crd))
        .map(|c| c.spec.names.kind)
    else {
        return false;
    };
    kim_shared::crds::LIST_BOUNDS
        .iter()
        .any(|(k, p, _)| *k == kind && *p == path)
}

/// Every way `ours` accepts less than (or differs in shape from) `upstream`.
fn compare_schemas(folder: Folder, crd: &str, upstream: &Value, ours: &Value) -> Vec<String> {
    let mut theirs_nodes = BTreeMap::new();
    let mut our_nodes = BTreeMap::new();
    walk(upstream, String::new(), &mut theirs_nodes);
    walk(ours, String::new(), &mut our_nodes);

    let mut problems = Vec::new();
    let mut preserved_prefixes: Vec<String> = Vec::new();
    for (path, theirs) in &theirs_nodes {
        let shown = if path.is_empty() {
            "<root>"
        } else {
            path.as_str()
        };
        // Inside a preserve-unknown-fields object the schema below is not enforced.
        if preserved_prefixes
            .iter()
            .any(|p| path.starts_with(p.as_str()))
        {
            continue;
        }
        let Some(mine) = our_nodes.get(path) else {
            if !allowed(folder, crd, path, "missing") {
                problems.push(format!("{crd}: field {shown} is missing"));
            }
            continue;
        };
        if theirs.kind() != mine.kind() && !allowed(folder, crd, path, "type") {
            problems.push(format!(
                "{crd}: field {shown} has type {} upstream but {} here",
                theirs.kind(),
                mine.kind()
            ));
        }
        if theirs.preserves_unknown() {
            preserved_prefixes.push(path.clone());
            if !mine.preserves_unknown() {
                problems.push(format!(
                    "{crd}: field {shown} keeps unknown fields upstream but prunes them here"
                ));
            }
        }
        if theirs.required() != mine.required() && !allowed(folder, crd, path, "required") {
            problems.push(format!(
                "{crd}: field {shown} requires {:?} upstream but {:?} here",
                theirs.required(),
                mine.required()
            ));
        }
        match (theirs.enum_values(), mine.enum_values()) {
            (Some(their_values), Some(my_values)) => {
                for value in their_values.iter().filter(|v| !my_values.contains(v)) {
                    problems.push(format!(
                        "{crd}: field {shown} refuses upstream's value {value}"
                    ));
                }
            }
            (Some(_), None) => {
                problems.push(format!("{crd}: field {shown} lost upstream's enum"));
            }
            (None, Some(my_values)) if !allowed(folder, crd, path, "enum") => {
                problems.push(format!(
                    "{crd}: field {shown} restricts values to {my_values:?}; upstream does not"
                ));
            }
            _ => {}
        }
        for keyword in SAME_IF_UPSTREAM_SETS {
            let (t, m) = (theirs.schema.get(*keyword), mine.schema.get(*keyword));
            // A list type of ours that upstream lacks makes ours stricter (unique keys), and
            // so does a bound on a list that upstream leaves unbounded.
            let differs = match t {
                Some(t) => m.is_none_or(|m| !same_value(t, m)),
                None => {
                    m.is_some()
                        && (keyword.starts_with("x-kubernetes-list") || *keyword == "maxItems")
                }
            };
            if differs && !allowed(folder, crd, path, keyword) {
                problems.push(format!(
                    "{crd}: field {shown} has {keyword} {t:?} upstream but {m:?} here"
                ));
            }
        }
    }
    problems
}

/// JSON equality where `0` and `0.0` are the same number (k8s-openapi keeps bounds as f64).
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn compare_crds(folder: Folder, upstream: &Value, ours: &Value) -> Vec<String> {
    let name = upstream["metadata"]["name"]
        .as_str()
        .unwrap_or("<unnamed>")
        .to_string();
    let mut problems = Vec::new();
    for key in ["group", "scope", "names"] {
        if upstream["spec"][key] != ours["spec"][key] {
            problems.push(format!(
                "{name}: spec.{key} is {} upstream but {} here",
                upstream["spec"][key], ours["spec"][key]
            ));
        }
    }
    let empty = Vec::new();
    let their_versions = upstream["spec"]["versions"].as_array().unwrap_or(&empty);
    let our_versions = ours["spec"]["versions"].as_array().unwrap_or(&empty);
    for theirs in their_versions {
        let version = theirs["name"].as_str().unwrap_or_default();
        let Some(mine) = our_versions.iter().find(|v| v["name"] == theirs["name"]) else {
            problems.push(format!("{name}: version {version} is missing"));
            continue;
        };
        for key in [
            "served",
            "storage",
            "subresources",
            "additionalPrinterColumns",
        ] {
            if theirs[key] != mine[key] {
                problems.push(format!(
                    "{name} {version}: {key} is {} upstream but {} here",
                    theirs[key], mine[key]
                ));
            }
        }
        problems.extend(compare_schemas(
            folder,
            &name,
            &theirs["schema"]["openAPIV3Schema"],
            &mine["schema"]["openAPIV3Schema"],
        ));
    }
    problems
}

/// Every incompatibility of ours with the CRDs of `folder`.
fn incompatibilities(folder: Folder) -> Vec<String> {
    let ours = our_crds();
    let mut problems = Vec::new();
    for upstream in upstream_crds(folder) {
        let name = upstream["metadata"]["name"]
            .as_str()
            .expect("upstream CRD has a name");
        match ours.get(name) {
            Some(mine) => problems.extend(compare_crds(folder, &upstream, mine)),
            None => problems.push(format!("{name}: no CRD of ours")),
        }
    }
    problems
}

#[test]
fn our_crds_accept_everything_upstream_accepts_today() {
    let problems = incompatibilities(Folder::Today);
    assert!(
        problems.is_empty(),
        "{} incompatibilities with today's upstream:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn our_crds_accept_everything_the_baseline_accepts() {
    let problems = incompatibilities(Folder::Baseline);
    assert!(
        problems.is_empty(),
        "{} incompatibilities:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn comparison_notices_a_missing_field_and_a_changed_type() {
    // The checker itself must be able to fail: remove one field and retype another.
    let upstream = upstream_crds(Folder::Today)
        .into_iter()
        .find(|c| c["metadata"]["name"] == "runtimes.infrastructuremanager.kyma-project.io")
        .expect("upstream Runtime CRD");
    let mut ours = our_crds()["runtimes.infrastructuremanager.kyma-project.io"].clone();
    let shoot = &mut ours["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["shoot"]["properties"];
    shoot
        .as_object_mut()
        .expect("shoot properties")
        .remove("licenceType");
    shoot["enforceSeedLocation"]["type"] = Value::String("string".into());

    let problems = compare_crds(Folder::Today, &upstream, &ours).join("\n");
    assert!(
        problems.contains("field .spec.shoot.licenceType is missing"),
        "{problems}"
    );
    assert!(
        problems.contains(
            "field .spec.shoot.enforceSeedLocation has type boolean upstream but string here"
        ),
        "{problems}"
    );
}

#[test]
fn list_bounds_are_documented_and_undocumented_ones_are_noticed() {
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/upstream-differences.md"),
    )
    .expect("docs/upstream-differences.md");
    for (kind, path, max) in kim_shared::crds::LIST_BOUNDS {
        let row = format!("| {kind} | `{path}` | {max} |");
        assert!(
            docs.contains(&row),
            "docs/upstream-differences.md lacks the row {row}"
        );
    }
    // A bound not in LIST_BOUNDS is a difference the comparison reports.
    let upstream = upstream_crds(Folder::Today)
        .into_iter()
        .find(|c| c["metadata"]["name"] == "runtimes.infrastructuremanager.kyma-project.io")
        .expect("upstream Runtime CRD");
    let mut ours = our_crds()["runtimes.infrastructuremanager.kyma-project.io"].clone();
    let shoot = &mut ours["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["shoot"]["properties"];
    assert_eq!(shoot["provider"]["properties"]["workers"]["maxItems"], 100);
    shoot["networking"]["properties"]["nodes"]["maxItems"] = Value::from(3);
    let problems = compare_crds(Folder::Today, &upstream, &ours).join("\n");
    assert!(
        problems.contains(
            "field .spec.shoot.networking.nodes has maxItems None upstream but Some(Number(3)) here"
        ),
        "{problems}"
    );
    assert!(
        !problems.contains(".spec.shoot.provider.workers has maxItems"),
        "{problems}"
    );
}

#[test]
fn runtime_conditions_are_a_map_keyed_by_type() {
    let ours = our_crds();
    for name in [
        "runtimes.infrastructuremanager.kyma-project.io",
        "gardenerclusters.infrastructuremanager.kyma-project.io",
    ] {
        let conditions = &ours[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["status"]["properties"]["conditions"];
        assert_eq!(conditions["x-kubernetes-list-type"], "map", "{name}");
        assert_eq!(
            conditions["x-kubernetes-list-map-keys"],
            serde_json::json!(["type"]),
            "{name}"
        );
    }
}

#[test]
fn the_list_shaped_registry_cache_is_allowed_against_the_baseline_only() {
    // Today's upstream and ours agree on the list; the 2025 object shape differs, and only the
    // baseline comparison lets that pass. Turning ours back into the object shape must fail
    // against today's CRD.
    let today = upstream_crds(Folder::Today)
        .into_iter()
        .find(|c| c["metadata"]["name"] == "runtimes.infrastructuremanager.kyma-project.io")
        .expect("today's Runtime CRD");
    let mut ours = our_crds()["runtimes.infrastructuremanager.kyma-project.io"].clone();
    let spec = &mut ours["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"];
    spec["imageRegistryCache"] = serde_json::json!({
        "type": "object",
        "properties": {"enabled": {"type": "boolean"}},
        "required": ["enabled"],
    });
    let problems = compare_crds(Folder::Today, &today, &ours).join("\n");
    assert!(
        problems.contains("field .spec.imageRegistryCache has type array upstream but object here"),
        "{problems}"
    );
    assert!(
        problems.contains("field .spec.imageRegistryCache[].config.upstream is missing"),
        "{problems}"
    );
    let baseline = incompatibilities(Folder::Baseline);
    assert!(baseline.is_empty(), "{baseline:?}");
}

#[test]
fn today_has_the_gdch_provider_and_ours_accepts_it() {
    let ours = our_crds();
    let types = &ours["runtimes.infrastructuremanager.kyma-project.io"]["spec"]["versions"][0]["schema"]
        ["openAPIV3Schema"]["properties"]["spec"]["properties"]["shoot"]["properties"]["provider"]
        ["properties"]["type"]["enum"];
    assert!(
        types
            .as_array()
            .is_some_and(|t| t.contains(&Value::from("gdch"))),
        "{types}"
    );
}
