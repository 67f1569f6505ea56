//! The custom resources of the infrastructure manager (`infrastructuremanager.kyma-project.io`).

pub mod audit_log;
pub mod gardener_cluster;
pub mod runtime;
pub mod runtime_access;

pub use gardener_cluster::{GardenerCluster, GardenerClusterSpec, GardenerClusterStatus};
pub use runtime::{
    ForeignRuntimeId, ProviderType, Runtime, RuntimeSpec, RuntimeState, RuntimeStatus,
};

/// Where and why a field of an object does not read as its type.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct Unreadable {
    /// The field at fault, from the object's root (`spec.volume.size`).
    pub field: String,
    /// Serde's reason.
    pub reason: String,
}

/// Decodes `value`, the field `field` of an object (`spec`), naming the field at fault below
/// it when it is no `T`.
pub fn decode_field<T: serde::de::DeserializeOwned>(
    value: &serde_json::Value,
    field: &str,
) -> Result<T, Unreadable> {
    serde_path_to_error::deserialize(value).map_err(|e| unreadable(field, e))
}

/// Decodes `text`, the JSON text of the field `field` of an object, as [`decode_field`].
pub fn decode_field_text<T: serde::de::DeserializeOwned>(
    text: &str,
    field: &str,
) -> Result<T, Unreadable> {
    let mut de = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| unreadable(field, e))
}

fn unreadable(field: &str, e: serde_path_to_error::Error<serde_json::Error>) -> Unreadable {
    Unreadable {
        field: match e.path().to_string().as_str() {
            "." => field.to_owned(),
            path => format!("{field}.{path}"),
        },
        reason: e.into_inner().to_string(),
    }
}

/// API group of the infrastructure manager's resources.
pub const GROUP: &str = "infrastructuremanager.kyma-project.io";
/// API version of the infrastructure manager's resources.
pub const VERSION: &str = "v1";

/// Schema of a `[]metav1.Condition` status field, as controller-gen emits it (with the
/// validations k8s-openapi's schema lacks), and a list keyed by `type` so that server-side
/// apply merges conditions one by one.
pub(crate) fn conditions_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "List of status conditions to indicate the status of a ServiceInstance.",
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "description": "Condition contains details for one aspect of the current state of this API Resource.",
            "type": "object",
            "required": ["lastTransitionTime", "message", "reason", "status", "type"],
            "properties": {
                "lastTransitionTime": {
                    "description": "lastTransitionTime is the last time the condition transitioned from one status to another.",
                    "type": "string",
                    "format": "date-time",
                },
                "message": {
                    "description": "message is a human readable message indicating details about the transition. This may be an empty string.",
                    "type": "string",
                    "maxLength": 32768,
                },
                "observedGeneration": {
                    "description": "observedGeneration represents the .metadata.generation that the condition was set based upon.",
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0,
                },
                "reason": {
                    "description": "reason contains a programmatic identifier indicating the reason for the condition's last transition.",
                    "type": "string",
                    "maxLength": 1024,
                    "minLength": 1,
                    "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                },
                "status": {
                    "description": "status of the condition, one of True, False, Unknown.",
                    "type": "string",
                    "enum": ["True", "False", "Unknown"],
                },
                "type": {
                    "description": "type of condition in CamelCase or in foo.example.com/CamelCase.",
                    "type": "string",
                    "maxLength": 316,
                    "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
                },
            },
        },
    })
}

/// The longest condition message written, in bytes. The CRDs allow 32768; a longer one makes
/// the whole status write fail, and messages carry text from outside (a runtime cluster's
/// error, one line per object), so they are cut well below that.
pub const MAX_CONDITION_MESSAGE: usize = 4096;

/// `message` cut to [`MAX_CONDITION_MESSAGE`] bytes at a character boundary, marked as cut.
pub fn condition_message(message: String) -> String {
    cut_marked(message, MAX_CONDITION_MESSAGE, " ... (cut)")
}

/// `text` cut to at most `max` bytes at a character boundary, ending in `mark` when cut.
pub fn cut_marked(mut text: String, max: usize, mark: &str) -> String {
    if text.len() > max {
        let mut end = max.saturating_sub(mark.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(mark);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_condition_messages_are_cut_at_a_character_boundary() {
        assert_eq!(condition_message("short".into()), "short");
        let exact = "x".repeat(MAX_CONDITION_MESSAGE);
        assert_eq!(condition_message(exact.clone()), exact);
        let long = "é".repeat(MAX_CONDITION_MESSAGE);
        let cut = condition_message(long);
        assert!(cut.len() <= MAX_CONDITION_MESSAGE, "{}", cut.len());
        assert!(cut.ends_with(" ... (cut)"));
        assert!(cut.starts_with("éé"));
    }
}
