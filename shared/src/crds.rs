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

// Brings kube's generated CRD to the shape controller-gen gives upstream's:
// - no `nullable: true` (kube marks every `Option`): upstream's apiserver drops a `null` instead
//   of storing it, so clients never read nulls back;
// - `apiVersion`, `kind` and `metadata` described at the root, no root `title`;
// - `listKind` named.
fn normalise(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    crd.spec.names.list_kind = Some(format!("{}List", crd.spec.names.kind));
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            strip_nullable(schema);
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
