//! What the KCP kubeconfig Secret records, and the decisions taken from it. Pure.
//!
//! The Secret is read with a GET in every reconcile, so it is never older than what earlier
//! reconciles wrote, unlike the RuntimeAccess the reconcile was handed (the watch cache may lag
//! behind the status this controller wrote a moment ago). So the facts a reconcile must not get
//! wrong live here:
//!
//! - why the current token was issued (`token-reason`: `KubeconfigIssued` or
//!   `KubeconfigRotated`): a reconcile that keeps the token reports it, so a stale status can
//!   never bring back `KubeconfigIssued` after a rotation;
//! - the fingerprint of the objects last applied in the shoot and their list
//!   (`shoot-objects-hash`, `shoot-objects`): a reconcile whose objects are unchanged and whose
//!   token is not due makes no shoot call, and the list (what this request created there) is
//!   reported and cleaned up even when the cached status lacks it.

use k8s_openapi::api::core::v1::Secret;
use kim_shared::api::runtime_access::{RuntimeAccessStatus, ShootObjectRef};
use kim_shared::names;

use super::token::{ANNOTATION_TOKEN_EXPIRATION, TokenCause, TokenDecision, TokenRecord};

/// Annotation on the KCP Secret: the condition reason of the token in it.
pub const ANNOTATION_TOKEN_REASON: &str = "infrastructuremanager.kyma-project.io/token-reason";

/// Annotation on the KCP Secret: [`super::shoot::fingerprint`] of the objects last applied.
pub const ANNOTATION_SHOOT_OBJECTS_HASH: &str =
    "infrastructuremanager.kyma-project.io/shoot-objects-hash";

/// Annotation on the KCP Secret: JSON list of the shoot objects this request created
/// (kind, name, namespace), as applied with that fingerprint.
pub const ANNOTATION_SHOOT_OBJECTS: &str = "infrastructuremanager.kyma-project.io/shoot-objects";

/// Field manager of the two shoot-object annotations. Separate from the manager of the token
/// write, so recording an apply is a small server-side apply of two annotations that leaves the
/// kubeconfig alone, and a token write leaves the annotations alone.
pub const SHOOT_STATE_FIELD_MANAGER: &str = "kim-runtime-access-shoot-state";

/// Reason of a first token (or one issued because the Secret was missing or unreadable).
pub const REASON_ISSUED: &str = "KubeconfigIssued";

/// Reason of a token that replaced one whose rotation was due.
pub const REASON_ROTATED: &str = "KubeconfigRotated";

/// Reason of a token issued after every earlier one was revoked.
pub const REASON_REVOKED: &str = "KubeconfigRevoked";

/// Annotation on the KCP Secret, from the token write of a revocation until a pass sees the
/// request's `revoke-tokens` annotation gone: the `resourceVersion` of the request whose
/// annotation was served. A pass that sees the annotation on that very version (its removal
/// refused, or a watch cache behind) removes it again and revokes nothing; on any later
/// version, the annotation was set again (or stayed while the request changed), and it revokes:
/// a revocation asked for is never taken as served.
pub const ANNOTATION_TOKENS_REVOKED: &str = "infrastructuremanager.kyma-project.io/tokens-revoked";

/// The condition reason for a token issued for `cause`.
pub fn issue_reason(cause: TokenCause) -> &'static str {
    match cause {
        TokenCause::Due | TokenCause::ClusterChanged | TokenCause::SigningKeyRotated => {
            REASON_ROTATED
        }
        TokenCause::Revoked => REASON_REVOKED,
        TokenCause::Missing | TokenCause::Unknown => REASON_ISSUED,
    }
}

/// What the KCP Secret of a request says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFacts<'a> {
    /// The token part.
    pub token: TokenRecord<'a>,
    /// `token-reason`, as written.
    pub token_reason: Option<&'a str>,
    /// `shoot-objects-hash`, as written.
    pub applied_hash: Option<&'a str>,
    /// `shoot-objects`, parsed; `None` when missing or unreadable.
    pub applied_objects: Option<Vec<ShootObjectRef>>,
    /// [`ANNOTATION_TOKENS_REVOKED`]: the request's `resourceVersion` whose revocation is done.
    pub revoked_at: Option<&'a str>,
    /// [`super::token::ANNOTATION_SERVICE_ACCOUNT_UID`]: the account the token authenticates as.
    pub account_uid: Option<&'a str>,
}

impl<'a> SecretFacts<'a> {
    /// Reads the facts from the Secret (`None`: it does not exist) and its kubeconfig `key`.
    pub fn read(secret: Option<&'a Secret>, key: &str) -> Self {
        let annotation = |k: &str| {
            secret
                .and_then(|s| s.metadata.annotations.as_ref())
                .and_then(|a| a.get(k))
                .map(String::as_str)
        };
        Self {
            token: TokenRecord {
                present: secret
                    .and_then(|s| s.data.as_ref())
                    .and_then(|d| d.get(key))
                    .is_some_and(|v| !v.0.is_empty()),
                issued: annotation(names::ANNOTATION_LAST_SYNC),
                expires: annotation(ANNOTATION_TOKEN_EXPIRATION),
            },
            token_reason: annotation(ANNOTATION_TOKEN_REASON),
            applied_hash: annotation(ANNOTATION_SHOOT_OBJECTS_HASH),
            applied_objects: annotation(ANNOTATION_SHOOT_OBJECTS)
                .and_then(|j| serde_json::from_str(j).ok()),
            revoked_at: annotation(ANNOTATION_TOKENS_REVOKED),
            account_uid: annotation(super::token::ANNOTATION_SERVICE_ACCOUNT_UID),
        }
    }

    /// Whether the request at `resource_version`, annotated `revoke-tokens=true`, asks for a
    /// revocation not yet done.
    pub fn revocation_due(&self, resource_version: Option<&str>) -> bool {
        self.revoked_at.is_none() || self.revoked_at != resource_version
    }

    /// The [`ANNOTATION_TOKENS_REVOKED`] of a Secret written now with a token issued for
    /// `reason` by a pass of the request at `resource_version`: that version after a
    /// revocation, and the mark as it is after a rotation while the served revocation's
    /// `revoke-tokens` annotation (`revoke_requested`) is still there, or the next pass would
    /// revoke the fresh token again.
    pub fn revocation_mark(
        &self,
        reason: &str,
        revoke_requested: bool,
        resource_version: Option<&str>,
    ) -> Option<String> {
        if reason == REASON_REVOKED {
            return Some(resource_version.unwrap_or_default().to_owned());
        }
        revoke_requested
            .then_some(self.revoked_at)
            .flatten()
            .map(str::to_owned)
    }

    /// The objects applied last, when they were applied with `fingerprint` (so nothing in the
    /// shoot needs changing for this spec); `None` when an apply is needed.
    pub fn applied_with(&self, fingerprint: &str) -> Option<&[ShootObjectRef]> {
        if self.applied_hash != Some(fingerprint) {
            return None;
        }
        self.applied_objects.as_deref()
    }

    /// The condition reason of a reconcile that keeps the current token: the one recorded when
    /// it was issued. `cached` (the status as this reconcile was handed it, possibly older than
    /// the Secret) is only consulted for a Secret written before the reason was recorded.
    pub fn kept_reason(&self, cached: Option<&RuntimeAccessStatus>) -> &'static str {
        match self.token_reason {
            Some(REASON_ROTATED) => REASON_ROTATED,
            Some(REASON_REVOKED) => REASON_REVOKED,
            Some(REASON_ISSUED) => REASON_ISSUED,
            _ => {
                let stored = cached.and_then(|s| {
                    s.conditions
                        .iter()
                        .find(|c| c.type_ == super::CONDITION_TYPE && c.status == "True")
                });
                match stored.map(|c| c.reason.as_str()) {
                    Some(REASON_ROTATED) => REASON_ROTATED,
                    Some(REASON_REVOKED) => REASON_REVOKED,
                    _ => REASON_ISSUED,
                }
            }
        }
    }
}

/// Whether this reconcile has to reach the shoot: the token is due (which also re-applies the
/// objects, as periodic drift correction), or the objects recorded in the Secret were applied
/// for another spec (or never).
pub fn needs_shoot(facts: &SecretFacts<'_>, fingerprint: &str, decision: TokenDecision) -> bool {
    matches!(decision, TokenDecision::Issue(_)) || facts.applied_with(fingerprint).is_none()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};

    use super::*;

    fn secret(annotations: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                "config".to_owned(),
                ByteString(b"kubeconfig".to_vec()),
            )])),
            ..Default::default()
        }
    }

    #[test]
    fn the_revocation_mark_outlives_a_rotation_until_the_annotation_goes() {
        let marked = secret(&[(ANNOTATION_TOKENS_REVOKED, "41")]);
        let marked = SecretFacts::read(Some(&marked), "config");
        assert_eq!(
            marked.revocation_mark(REASON_REVOKED, true, Some("57")),
            Some("57".to_owned())
        );
        assert_eq!(
            marked.revocation_mark(REASON_ROTATED, true, Some("57")),
            Some("41".to_owned()),
            "a rotation while the annotation is still there"
        );
        assert_eq!(
            marked.revocation_mark(REASON_ROTATED, false, Some("57")),
            None,
            "the annotation is gone: the next one is a new revocation"
        );
        let unmarked = secret(&[]);
        let unmarked = SecretFacts::read(Some(&unmarked), "config");
        assert!(
            unmarked
                .revocation_mark(REASON_REVOKED, true, Some("5"))
                .is_some()
        );
        assert_eq!(
            unmarked.revocation_mark(REASON_ROTATED, true, Some("5")),
            None
        );
        assert_eq!(
            unmarked.revocation_mark(REASON_ISSUED, false, Some("5")),
            None
        );
    }

    #[test]
    fn a_revocation_is_served_once_per_version_of_the_request() {
        let marked = secret(&[(ANNOTATION_TOKENS_REVOKED, "41")]);
        let marked = SecretFacts::read(Some(&marked), "config");
        assert!(
            !marked.revocation_due(Some("41")),
            "the served version, seen again (a cache behind, a refused removal)"
        );
        assert!(
            marked.revocation_due(Some("63")),
            "set again after the removal: a new revocation"
        );
        let unmarked = secret(&[]);
        let unmarked = SecretFacts::read(Some(&unmarked), "config");
        assert!(unmarked.revocation_due(Some("41")));
        assert!(unmarked.revocation_due(None));
        // A Secret of the release that marked `true`: revoked once more, never skipped.
        let old = secret(&[(ANNOTATION_TOKENS_REVOKED, "true")]);
        assert!(SecretFacts::read(Some(&old), "config").revocation_due(Some("41")));
    }

    fn status(reason: &str) -> RuntimeAccessStatus {
        RuntimeAccessStatus {
            state: Some("Ready".into()),
            conditions: vec![Condition {
                type_: super::super::CONDITION_TYPE.into(),
                status: "True".into(),
                reason: reason.into(),
                message: String::new(),
                last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
                observed_generation: Some(1),
            }],
            ..Default::default()
        }
    }

    /// The race of upstream's GardenerCluster ("reason reverted to KubeconfigSecretCreated"):
    /// reconcile A rotates the token and writes `KubeconfigRotated`; reconcile B, handed the
    /// object from a watch cache that has not seen A's status yet (still `KubeconfigIssued`),
    /// keeps the fresh token. Copying the cached reason would write `KubeconfigIssued` back;
    /// the Secret B reads says the token was a rotation.
    #[test]
    fn a_kept_token_reports_the_reason_recorded_in_the_secret_not_the_cached_status() {
        let rotated = secret(&[(ANNOTATION_TOKEN_REASON, REASON_ROTATED)]);
        let facts = SecretFacts::read(Some(&rotated), "config");
        let stale = status(REASON_ISSUED);
        assert_eq!(facts.kept_reason(Some(&stale)), REASON_ROTATED);
        assert_eq!(facts.kept_reason(None), REASON_ROTATED);
        // And the other way round: a stale cache cannot turn a first token into a rotation.
        let issued = secret(&[(ANNOTATION_TOKEN_REASON, REASON_ISSUED)]);
        let facts = SecretFacts::read(Some(&issued), "config");
        assert_eq!(
            facts.kept_reason(Some(&status(REASON_ROTATED))),
            REASON_ISSUED
        );
    }

    #[test]
    fn a_secret_without_the_reason_falls_back_to_the_stored_one() {
        let old = secret(&[]);
        let facts = SecretFacts::read(Some(&old), "config");
        assert_eq!(
            facts.kept_reason(Some(&status(REASON_ROTATED))),
            REASON_ROTATED
        );
        assert_eq!(
            facts.kept_reason(Some(&status("RuntimeNotReady"))),
            REASON_ISSUED
        );
        assert_eq!(facts.kept_reason(None), REASON_ISSUED);
    }

    #[test]
    fn the_shoot_is_left_alone_only_for_applied_objects_and_a_token_that_is_not_due() {
        let objects = r#"[{"kind":"Role","name":"r","namespace":"apps"}]"#;
        let s = secret(&[
            (ANNOTATION_SHOOT_OBJECTS_HASH, "fnv1a64:1"),
            (ANNOTATION_SHOOT_OBJECTS, objects),
        ]);
        let facts = SecretFacts::read(Some(&s), "config");
        let keep = TokenDecision::Keep {
            requeue_after: Duration::from_secs(60),
        };
        assert!(!needs_shoot(&facts, "fnv1a64:1", keep));
        assert_eq!(
            facts.applied_with("fnv1a64:1").map(<[_]>::len),
            Some(1),
            "the recorded objects are reported"
        );
        assert!(needs_shoot(&facts, "fnv1a64:2", keep), "spec changed");
        assert!(
            needs_shoot(&facts, "fnv1a64:1", TokenDecision::Issue(TokenCause::Due)),
            "a due token re-applies (drift correction)"
        );
        // Unreadable list: apply again rather than report nothing.
        let broken = secret(&[
            (ANNOTATION_SHOOT_OBJECTS_HASH, "fnv1a64:1"),
            (ANNOTATION_SHOOT_OBJECTS, "not json"),
        ]);
        assert!(needs_shoot(
            &SecretFacts::read(Some(&broken), "config"),
            "fnv1a64:1",
            keep
        ));
        // No Secret at all.
        assert!(needs_shoot(
            &SecretFacts::read(None, "config"),
            "fnv1a64:1",
            keep
        ));
    }

    #[test]
    fn reasons_of_issued_tokens() {
        assert_eq!(issue_reason(TokenCause::Due), REASON_ROTATED);
        assert_eq!(issue_reason(TokenCause::ClusterChanged), REASON_ROTATED);
        assert_eq!(issue_reason(TokenCause::SigningKeyRotated), REASON_ROTATED);
        assert_eq!(issue_reason(TokenCause::Missing), REASON_ISSUED);
        assert_eq!(issue_reason(TokenCause::Unknown), REASON_ISSUED);
        assert_eq!(issue_reason(TokenCause::Revoked), REASON_REVOKED);
        // Kept afterwards, the token still reports its revocation.
        let revoked = secret(&[(ANNOTATION_TOKEN_REASON, REASON_REVOKED)]);
        let facts = SecretFacts::read(Some(&revoked), "config");
        assert_eq!(
            facts.kept_reason(Some(&status(REASON_ISSUED))),
            REASON_REVOKED
        );
        let old = secret(&[]);
        let facts = SecretFacts::read(Some(&old), "config");
        assert_eq!(
            facts.kept_reason(Some(&status(REASON_REVOKED))),
            REASON_REVOKED
        );
    }
}
