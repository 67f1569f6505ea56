//! The answers of the webhook, serialized by serde as an `admission.k8s.io/v1`
//! AdmissionReview: allowed, denied (with a message, or with one cause per violated field), a
//! JSON patch, warnings, and the annotations the apiserver writes into its own audit log.

use std::collections::BTreeMap;

use base64::Engine;
use json_patch::Patch;
use kim_shared::validation::Violation;
use kube::core::Status;
use kube::core::response::{StatusCause, StatusDetails};
use serde::Serialize;

use crate::request::REVIEW_API_VERSION;

/// The `response` of an AdmissionReview.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    /// The request's uid.
    pub uid: String,
    /// The decision.
    pub allowed: bool,
    /// Why a request is denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// The JSON patch (base64 of its JSON text, as the apiserver's `[]byte`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// `JSONPatch` when there is a patch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<&'static str>,
    /// Written by the apiserver into its audit log, prefixed with the webhook's name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub audit_annotations: BTreeMap<&'static str, String>,
    /// Shown to the client (`Warning: ...` in kubectl).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Review<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: &'a Response,
}

impl Response {
    /// Allows the request.
    pub fn allowed(uid: impl Into<String>) -> Self {
        Self {
            uid: uid.into(),
            allowed: true,
            ..Self::default()
        }
    }

    /// Denies the request with `message` (the request is well-formed but not ours to admit).
    pub fn denied(uid: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            uid: uid.into(),
            status: Some(Status {
                message: message.into(),
                ..Status::default()
            }),
            ..Self::default()
        }
    }

    /// Denies a request that could not be read (HTTP code 400, reason `InvalidRequest`).
    pub fn bad_request(uid: impl Into<String>, message: &str) -> Self {
        Self {
            uid: uid.into(),
            status: Some(Status::failure(message, "InvalidRequest").with_code(400)),
            ..Self::default()
        }
    }

    /// Denies a request the webhook cannot judge yet (HTTP code 503, reason
    /// `ServiceUnavailable`): the client should retry the same object.
    pub fn unavailable(uid: impl Into<String>, why: &str) -> Self {
        Self {
            uid: uid.into(),
            status: Some(
                Status::failure(
                    &format!("the webhook cannot judge this request yet: {why}; retry shortly"),
                    "ServiceUnavailable",
                )
                .with_code(503),
            ),
            ..Self::default()
        }
    }

    /// Denies the request for `violations` (at least one): HTTP `code` and `reason`, one cause
    /// per field, a message naming every field, and the fields in the audit annotations.
    pub fn rejected(
        uid: impl Into<String>,
        (code, reason): (u16, &str),
        violations: &[Violation],
        (kind, name): (&str, &str),
    ) -> Self {
        let message = violations
            .iter()
            .map(Violation::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        let fields = violations
            .iter()
            .map(|v| v.field.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let causes = violations
            .iter()
            .map(|v| StatusCause {
                reason: "FieldValueInvalid".into(),
                message: v.message.clone(),
                field: v.field.clone(),
            })
            .collect();
        Self {
            uid: uid.into(),
            status: Some(Status {
                code,
                message,
                reason: reason.to_string(),
                details: Some(StatusDetails {
                    name: name.to_string(),
                    group: String::new(),
                    kind: kind.to_string(),
                    uid: String::new(),
                    causes,
                    retry_after_seconds: 0,
                }),
                ..Status::default()
            }),
            audit_annotations: BTreeMap::from([
                ("decision", "denied".to_string()),
                ("violations", crate::audit::cut(&fields, 1000).into_owned()),
            ]),
            ..Self::default()
        }
    }

    /// Allows the request with `patch` (no patch when it is empty) and names the patched paths
    /// in the audit annotations.
    pub fn patched(uid: impl Into<String>, patch: &Patch) -> Result<Self, serde_json::Error> {
        let mut response = Self::allowed(uid);
        if patch.0.is_empty() {
            return Ok(response);
        }
        let text = serde_json::to_vec(patch)?;
        response.patch = Some(base64::engine::general_purpose::STANDARD.encode(text));
        response.patch_type = Some("JSONPatch");
        response
            .audit_annotations
            .insert("patched-paths", patch_paths(patch).join(","));
        Ok(response)
    }

    /// Adds warnings for the client.
    pub fn with_warnings(mut self, warnings: Vec<String>) -> Self {
        self.warnings = warnings;
        self
    }

    /// The human-readable reason of a denial (empty when allowed).
    pub fn message(&self) -> &str {
        self.status.as_ref().map_or("", |s| s.message.as_str())
    }

    /// The AdmissionReview carrying this response, as JSON.
    pub fn to_review_json(&self) -> Vec<u8> {
        let review = Review {
            api_version: REVIEW_API_VERSION,
            kind: "AdmissionReview",
            response: self,
        };
        serde_json::to_vec(&review).unwrap_or_else(|e| {
            // Serializing these types cannot fail in practice; still answer something valid.
            let fallback = Self::bad_request(
                self.uid.clone(),
                &format!("internal error serializing the response: {e}"),
            );
            let review = Review {
                response: &fallback,
                ..review
            };
            serde_json::to_vec(&review).unwrap_or_default()
        })
    }
}

/// The JSON pointers a patch writes to.
pub fn patch_paths(patch: &Patch) -> Vec<String> {
    patch
        .0
        .iter()
        .map(|op| op.path().as_str().to_string())
        .collect()
}
