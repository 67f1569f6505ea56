//! The CustomResourceDefinitions of the infrastructure manager, generated from the Rust types.
//!
//! `crds/*.yaml` in the repository is what [`files`] renders (see `kim-crdgen`); a test fails
//! when the two drift apart. Install CRDs from [`all`] (or those files), not from
//! `Runtime::crd()` directly: [`all`] also applies the normalisation below.

use crate::api::{GardenerCluster, Runtime};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;

/// A CRD could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// YAML serialization of a CRD failed.
    #[error("cannot render CRD {name} as YAML: {source}")]
    Yaml {
        /// `metadata.name` of the CRD.
        name: String,
        /// The serializer's error.
        source: serde_yaml_ng::Error,
    },
}

/// Every CRD the infrastructure manager serves, normalised.
pub fn all() -> Vec<CustomResourceDefinition> {
    [
        Runtime::crd(),
        GardenerCluster::crd(),
        crate::api::runtime_access::RuntimeAccess::crd(),
    ]
    .into_iter()
    .map(normalise)
    .collect()
}

/// File name of a CRD in `crds/`: `<group>_<plural>.yaml`, as upstream (controller-gen) names it.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// The YAML document of one CRD, with a header saying where it comes from.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, CrdError> {
    let body = serde_yaml_ng::to_string(crd).map_err(|source| CrdError::Yaml {
        name: crd.metadata.name.clone().unwrap_or_default(),
        source,
    })?;
    Ok(format!(
        "# Generated from the kim-shared Rust types by `make crds` (kim-crdgen). Do not edit.\n---\n{body}"
    ))
}

/// `(file name, YAML)` for every CRD, in a stable order.
pub fn files() -> Result<Vec<(String, String)>, CrdError> {
    all()
        .iter()
        .map(|crd| Ok((file_name(crd), to_yaml(crd)?)))
        .collect()
}

/// `(kind, schema path, maxItems)`: the bound of every list in the CRDs (`[]` steps into a
/// list's items). Upstream bounds none of them; unbounded lists let one object cost the
/// webhook and the controller work in proportion to whatever a client writes (up to etcd's
/// 1.5 MiB). Each bound is far above what KEB writes or a provider allows, and is listed in
/// `docs/upstream-differences.md`; a test fails when a list has none.
pub const LIST_BOUNDS: &[(&str, &str, i64)] = &[
    // From the subaccount's administrators: generous.
    ("Runtime", ".spec.security.administrators", 5000),
    // One entry per RegistryCacheConfig of the runtime; one cache per upstream registry.
    ("Runtime", ".spec.imageRegistryCache", 100),
    // Exactly one main pool (the webhook says so); AWS and Azure have at most 8 zones.
    ("Runtime", ".spec.shoot.provider.workers", 100),
    ("Runtime", ".spec.shoot.provider.additionalWorkers", 100),
    ("Runtime", ".spec.shoot.controlPlane.zones", 32),
    ("Runtime", ".spec.shoot.provider.workers[].zones", 32),
    (
        "Runtime",
        ".spec.shoot.provider.additionalWorkers[].zones",
        32,
    ),
    (
        "Runtime",
        ".spec.shoot.provider.workers[].cri.containerRuntimes",
        16,
    ),
    (
        "Runtime",
        ".spec.shoot.provider.additionalWorkers[].cri.containerRuntimes",
        16,
    ),
    ("Runtime", ".spec.shoot.provider.workers[].dataVolumes", 64),
    (
        "Runtime",
        ".spec.shoot.provider.additionalWorkers[].dataVolumes",
        64,
    ),
    (
        "Runtime",
        ".spec.shoot.provider.workers[].machineControllerManager.nodeConditions",
        64,
    ),
    (
        "Runtime",
        ".spec.shoot.provider.additionalWorkers[].machineControllerManager.nodeConditions",
        64,
    ),
    ("Runtime", ".spec.shoot.provider.workers[].taints", 128),
    (
        "Runtime",
        ".spec.shoot.provider.additionalWorkers[].taints",
        128,
    ),
    (
        "Runtime",
        ".spec.shoot.kubernetes.kubeAPIServer.acl.allowedCIDRs",
        1000,
    ),
    (
        "Runtime",
        ".spec.shoot.kubernetes.kubeAPIServer.additionalOidcConfig",
        100,
    ),
    (
        "Runtime",
        ".spec.shoot.kubernetes.kubeAPIServer.additionalOidcConfig[].signingAlgs",
        32,
    ),
    (
        "Runtime",
        ".spec.shoot.kubernetes.kubeAPIServer.oidcConfig.signingAlgs",
        32,
    ),
    ("Runtime", ".status.conditions", 64),
    ("Runtime", ".status.shootLastErrors", 64),
    ("Runtime", ".status.shootLastErrors[].codes", 32),
    ("GardenerCluster", ".status.conditions", 64),
    ("RuntimeAccess", ".spec.clusterRole.rules", 256),
    ("RuntimeAccess", ".spec.clusterRole.rules[].apiGroups", 256),
    (
        "RuntimeAccess",
        ".spec.clusterRole.rules[].nonResourceURLs",
        256,
    ),
    (
        "RuntimeAccess",
        ".spec.clusterRole.rules[].resourceNames",
        1000,
    ),
    ("RuntimeAccess", ".spec.clusterRole.rules[].resources", 256),
    ("RuntimeAccess", ".spec.clusterRole.rules[].verbs", 64),
    ("RuntimeAccess", ".spec.role.rules", 256),
    ("RuntimeAccess", ".spec.role.rules[].apiGroups", 256),
    ("RuntimeAccess", ".spec.role.rules[].nonResourceURLs", 256),
    ("RuntimeAccess", ".spec.role.rules[].resourceNames", 1000),
    ("RuntimeAccess", ".spec.role.rules[].resources", 256),
    ("RuntimeAccess", ".spec.role.rules[].verbs", 64),
    ("RuntimeAccess", ".status.conditions", 64),
    ("RuntimeAccess", ".status.shootObjects", 1000),
];

/// Sets `maxItems` on the lists of `kind` named in [`LIST_BOUNDS`].
fn bound_lists(kind: &str, schema: &mut JSONSchemaProps, path: &str) {
    if schema.type_.as_deref() == Some("array") {
        if let Some((_, _, max)) = LIST_BOUNDS
            .iter()
            .find(|(k, p, _)| *k == kind && *p == path)
        {
            schema.max_items = Some(*max);
        }
        if let Some(JSONSchemaPropsOrArray::Schema(item)) = schema.items.as_mut() {
            bound_lists(kind, item, &format!("{path}[]"));
        }
    }
    for (name, child) in schema.properties.iter_mut().flat_map(|p| p.iter_mut()) {
        bound_lists(kind, child, &format!("{path}.{name}"));
    }
}

// Brings kube's generated CRD to the shape controller-gen gives upstream's:
// - no `nullable: true` (kube marks every `Option`): upstream's apiserver drops a `null` instead
//   of storing it, so clients never read nulls back;
// - `apiVersion`, `kind` and `metadata` described at the root, no root `title`;
// - `listKind` named;
// - and, unlike upstream, every list bounded ([`LIST_BOUNDS`]).
fn normalise(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    crd.spec.names.list_kind = Some(format!("{}List", crd.spec.names.kind));
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            strip_nullable(schema);
            bound_lists(&crd.spec.names.kind, schema, "");
            schema.title = None;
            let properties = schema.properties.get_or_insert_with(Default::default);
            properties.insert(
                "apiVersion".into(),
                string_property(API_VERSION_DESCRIPTION),
            );
            properties.insert("kind".into(), string_property(KIND_DESCRIPTION));
            properties.insert(
                "metadata".into(),
                JSONSchemaProps {
                    type_: Some("object".into()),
                    ..Default::default()
                },
            );
        }
    }
    crd
}

const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object.\nServers should convert recognized schemas to the latest internal value, and\nmay reject unrecognized values.\nMore info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents.\nServers may infer this from the endpoint the client submits requests to.\nCannot be updated.\nIn CamelCase.\nMore info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

fn typed(type_: &str) -> JSONSchemaProps {
    JSONSchemaProps {
        type_: Some(type_.into()),
        ..Default::default()
    }
}

fn string_property(description: &str) -> JSONSchemaProps {
    JSONSchemaProps {
        description: Some(description.into()),
        type_: Some("string".into()),
        ..Default::default()
    }
}

fn strip_nullable(schema: &mut JSONSchemaProps) {
    schema.nullable = None;
    // kube's rewriter empties the branches of an int-or-string `anyOf`; controller-gen (and the
    // apiserver's structural schema rules) keep `integer` and `string` there.
    if schema.x_kubernetes_int_or_string == Some(true) && schema.any_of.is_some() {
        schema.any_of = Some(vec![typed("integer"), typed("string")]);
    }
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        strip_nullable(child);
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(item)) => strip_nullable(item),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items.iter_mut().for_each(strip_nullable),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(extra)) = schema.additional_properties.as_mut() {
        strip_nullable(extra);
    }
    for list in [&mut schema.any_of, &mut schema.all_of, &mut schema.one_of] {
        list.iter_mut().flatten().for_each(strip_nullable);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema_of(crd: &CustomResourceDefinition) -> serde_json::Value {
        serde_json::to_value(&crd.spec.versions[0].schema).expect("schema serializes")
    }

    #[test]
    fn no_field_is_nullable() {
        for crd in all() {
            let text = schema_of(&crd).to_string();
            assert!(
                !text.contains("\"nullable\""),
                "{} still has nullable",
                file_name(&crd)
            );
        }
    }

    #[test]
    fn int_or_string_branches_keep_their_types() {
        let runtime = all()
            .into_iter()
            .find(|c| c.spec.names.kind == "Runtime")
            .expect("Runtime CRD");
        let text = schema_of(&runtime).to_string();
        assert!(
            text.contains("\"x-kubernetes-int-or-string\":true"),
            "no int-or-string field"
        );
        assert!(
            !text.contains("\"anyOf\":[{},{}]"),
            "empty anyOf branches remain"
        );
        assert!(text.contains("\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]"));
    }

    /// Every list's path and `maxItems`.
    fn lists(schema: &serde_json::Value, path: String, out: &mut Vec<(String, Option<i64>)>) {
        if schema["type"] == "array" {
            out.push((path.clone(), schema["maxItems"].as_i64()));
            lists(&schema["items"], format!("{path}[]"), out);
        }
        if let Some(props) = schema["properties"].as_object() {
            for (name, child) in props {
                lists(child, format!("{path}.{name}"), out);
            }
        }
        if schema["additionalProperties"].is_object() {
            lists(&schema["additionalProperties"], format!("{path}{{}}"), out);
        }
    }

    #[test]
    fn every_list_is_bounded_and_every_bound_names_a_list() {
        let mut seen = Vec::new();
        for crd in all() {
            let kind = crd.spec.names.kind.clone();
            let mut found = Vec::new();
            lists(
                &schema_of(&crd)["openAPIV3Schema"],
                String::new(),
                &mut found,
            );
            for (path, max) in found {
                assert!(max.is_some(), "{kind} {path} has no maxItems");
                seen.push((kind.clone(), path));
            }
        }
        for (kind, path, max) in LIST_BOUNDS {
            assert!(
                seen.iter().any(|(k, p)| k == kind && p == path),
                "LIST_BOUNDS names {kind} {path}, which is not a list"
            );
            assert!(*max >= 16, "{kind} {path}: {max} leaves no room");
        }
    }

    #[test]
    fn file_names_follow_upstream() {
        let names: Vec<String> = all().iter().map(file_name).collect();
        for upstream in [
            "infrastructuremanager.kyma-project.io_runtimes.yaml",
            "infrastructuremanager.kyma-project.io_gardenerclusters.yaml",
        ] {
            assert!(
                names.iter().any(|n| n == upstream),
                "{upstream} missing from {names:?}"
            );
        }
        let unique: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(
            unique.len(),
            names.len(),
            "two CRDs share a file name: {names:?}"
        );
    }
}
