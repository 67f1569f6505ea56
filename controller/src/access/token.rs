//! When the ServiceAccount token of a RuntimeAccess must be issued again. Pure: takes `now`.
//!
//! The Secret records when the token was issued (upstream's `operator.kyma-project.io/last-sync`)
//! and when it expires (TokenRequest may shorten the requested lifetime, so the answer counts).

use std::time::Duration;

use jiff::Timestamp;

use crate::gardener_cluster::rotation::{Predating, parse_last_sync, predating};

/// Annotation on the KCP Secret: when the token in it expires (RFC 3339, UTC).
pub const ANNOTATION_TOKEN_EXPIRATION: &str =
    "infrastructuremanager.kyma-project.io/token-expiration";

/// Annotation on the KCP Secret: the token's ID (`jti`), as the runtime cluster's audit log
/// names it (`authentication.kubernetes.io/credential-id: JTI=<id>`).
pub const ANNOTATION_TOKEN_ID: &str = "infrastructuremanager.kyma-project.io/token-id";

/// Annotation on the KCP Secret: the UID of the ServiceAccount the token in it authenticates
/// as (its claim `kubernetes.io` → `serviceaccount` → `uid`). Every token issued since the
/// account was made has it; a revocation deletes the account of that UID, whatever its labels
/// and bindings say by then, and an account of another UID means those tokens are dead already.
pub const ANNOTATION_SERVICE_ACCOUNT_UID: &str =
    "infrastructuremanager.kyma-project.io/service-account-uid";

/// Why a token is issued now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenCause {
    /// No Secret, or no kubeconfig in it.
    Missing,
    /// The issue or expiry annotation is missing or unreadable.
    Unknown,
    /// `rotation_ratio` of the token's lifetime has passed.
    Due,
    /// The request asks to revoke every token issued so far
    /// (`infrastructuremanager.kyma-project.io/revoke-tokens: "true"`).
    Revoked,
    /// The kubeconfig names another server or CA bundle than the runtime's admin kubeconfig:
    /// the cluster's CAs were rotated (the admin kubeconfig, fetched again, carries the new
    /// bundle) or its address moved.
    ClusterChanged,
    /// The cluster's ServiceAccount token signing key was rotated after the token was issued:
    /// the token stops working when the rotation completes.
    SigningKeyRotated,
}

/// The decision for one reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenDecision {
    /// Request a new token now.
    Issue(TokenCause),
    /// The token is fresh; look again after this long.
    Keep {
        /// Time until the rotation is due.
        requeue_after: Duration,
    },
}

/// What the KCP Secret says about the current token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenRecord<'a> {
    /// The Secret exists and holds a kubeconfig under the key.
    pub present: bool,
    /// Raw issue-time annotation.
    pub issued: Option<&'a str>,
    /// Raw expiry annotation.
    pub expires: Option<&'a str>,
}

/// The ratio within the bounds the flag parser enforces (defence for callers that build
/// `AccessSettings` without the flag parser).
pub fn clamp_ratio(rotation_ratio: f64) -> f64 {
    if rotation_ratio.is_nan() {
        return super::MAX_ROTATION_RATIO;
    }
    rotation_ratio.clamp(super::MIN_ROTATION_RATIO, super::MAX_ROTATION_RATIO)
}

/// Rotates once `rotation_ratio` (0 < r < 1) of the token's lifetime has passed, so a consumer
/// always has the remaining fraction to pick up the new kubeconfig, and at once when the
/// cluster's token signing key is new since after the token was issued (`new_key_since`,
/// [`kim_shared::gardener::status::TwoStepRotation::new_since`]).
pub fn decide(
    record: TokenRecord<'_>,
    rotation_ratio: f64,
    new_key_since: Option<Timestamp>,
    now: Timestamp,
) -> TokenDecision {
    if !record.present {
        return TokenDecision::Issue(TokenCause::Missing);
    }
    let (Some(issued), Some(expires)) = (
        record.issued.and_then(parse_last_sync),
        record.expires.and_then(parse_last_sync),
    ) else {
        return TokenDecision::Issue(TokenCause::Unknown);
    };
    let lifetime = expires.duration_since(issued).as_secs_f64();
    if lifetime <= 0.0 || issued > now {
        return TokenDecision::Issue(TokenCause::Unknown);
    }
    let key = predating(issued, new_key_since, now);
    if key == Predating::Yes {
        return TokenDecision::Issue(TokenCause::SigningKeyRotated);
    }
    let age = now.duration_since(issued).as_secs_f64();
    let rotate_at = lifetime * clamp_ratio(rotation_ratio);
    if age >= rotate_at {
        TokenDecision::Issue(TokenCause::Due)
    } else {
        let remaining = Duration::from_secs_f64(rotate_at - age);
        TokenDecision::Keep {
            requeue_after: key.wait_at_most(remaining),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record<'a>(issued: &'a str, expires: &'a str) -> TokenRecord<'a> {
        TokenRecord {
            present: true,
            issued: Some(issued),
            expires: Some(expires),
        }
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_token_issued_before_the_signing_key_was_rotated_is_replaced() {
        let r = record("2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z");
        let now = at("2026-01-01T00:30:00Z");
        assert_eq!(
            decide(r, 0.8, Some(at("2026-01-01T00:00:01Z")), now),
            TokenDecision::Issue(TokenCause::SigningKeyRotated)
        );
        for since in ["2026-01-01T00:00:00Z", "2025-12-31T23:59:59Z"] {
            assert_eq!(
                decide(r, 0.8, Some(at(since)), now),
                TokenDecision::Keep {
                    requeue_after: Duration::from_secs(18 * 60)
                },
                "{since}"
            );
        }
        // In place by a clock ahead of ours: the rotation waits until our clock gets there.
        assert_eq!(
            decide(r, 0.8, Some(at("2026-01-01T00:30:20Z")), now),
            TokenDecision::Keep {
                requeue_after: Duration::from_secs(20)
            }
        );
        assert_eq!(
            decide(r, 0.8, Some(at("2026-01-01T00:30:00Z")), now),
            TokenDecision::Issue(TokenCause::SigningKeyRotated)
        );
        // A missing token keeps its own cause.
        let missing = TokenRecord {
            present: false,
            issued: None,
            expires: None,
        };
        assert_eq!(
            decide(missing, 0.8, Some(at("2026-01-01T00:00:01Z")), now),
            TokenDecision::Issue(TokenCause::Missing)
        );
    }

    #[test]
    fn keeps_a_fresh_token_until_the_ratio_of_its_lifetime() {
        let r = record("2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z");
        assert_eq!(
            decide(r, 0.8, None, at("2026-01-01T00:30:00Z")),
            TokenDecision::Keep {
                requeue_after: Duration::from_secs(18 * 60)
            }
        );
        assert_eq!(
            decide(r, 0.8, None, at("2026-01-01T00:48:00Z")),
            TokenDecision::Issue(TokenCause::Due)
        );
    }

    #[test]
    fn a_600s_token_with_ratio_001_rotates_after_6s() {
        let r = record("2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z");
        assert_eq!(
            decide(r, 0.01, None, at("2026-01-01T00:00:01Z")),
            TokenDecision::Keep {
                requeue_after: Duration::from_secs(5)
            }
        );
        assert_eq!(
            decide(r, 0.01, None, at("2026-01-01T00:00:06Z")),
            TokenDecision::Issue(TokenCause::Due)
        );
        // Out-of-range ratios are held to the flag's bounds.
        assert_eq!(
            decide(r, 0.0, None, at("2026-01-01T00:00:06Z")),
            TokenDecision::Issue(TokenCause::Due)
        );
        assert_eq!(
            decide(r, 2.0, None, at("2026-01-01T00:09:00Z")),
            TokenDecision::Keep {
                requeue_after: Duration::from_secs(30)
            }
        );
    }

    #[test]
    fn issues_when_missing_or_unreadable() {
        let now = at("2026-01-01T00:00:00Z");
        let missing = TokenRecord {
            present: false,
            issued: None,
            expires: None,
        };
        assert_eq!(
            decide(missing, 0.8, None, now),
            TokenDecision::Issue(TokenCause::Missing)
        );
        let r = record("garbage", "2026-01-01T01:00:00Z");
        assert_eq!(
            decide(r, 0.8, None, now),
            TokenDecision::Issue(TokenCause::Unknown)
        );
        let backwards = record("2026-01-01T01:00:00Z", "2026-01-01T00:00:00Z");
        assert_eq!(
            decide(backwards, 0.8, None, now),
            TokenDecision::Issue(TokenCause::Unknown)
        );
    }
}
