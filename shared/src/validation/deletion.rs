//! Deletion protection (upstream's proposed deletion-protection ADR): a Runtime may be
//! deleted only while it carries a fresh, explicit confirmation.

use super::{DeletionPolicy, ValidationOutcome};
use crate::names::ANNOTATION_DELETION_CONFIRMED;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::time::Duration;

const FIELD: &str = "metadata.annotations[operator.kyma-project.io/deletion-confirmed]";

/// Validates a DELETE of the stored Runtime with `metadata` by `user` (the name the apiserver
/// authenticated): a principal of `policy.trusted_principals` deletes without confirmation,
/// anyone else as [`validate_delete`] says.
pub fn validate_delete_by(
    metadata: &ObjectMeta,
    policy: &DeletionPolicy,
    user: &str,
    now: jiff::Timestamp,
) -> ValidationOutcome {
    if !user.is_empty() && policy.trusted_principals.iter().any(|p| p == user) {
        return ValidationOutcome::default();
    }
    validate_delete(metadata, policy, now)
}

/// Validates a DELETE of the stored Runtime with `metadata`: with the policy enabled, the annotation
/// `operator.kyma-project.io/deletion-confirmed` must hold an RFC3339 UTC time that is not after `now` and at most
/// `policy.window` before it.
pub fn validate_delete(
    metadata: &ObjectMeta,
    policy: &DeletionPolicy,
    now: jiff::Timestamp,
) -> ValidationOutcome {
    let confirmed = metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_DELETION_CONFIRMED));
    confirmation(confirmed.map(String::as_str), policy, now)
}

/// The rule on the annotation value alone (absent = `None`).
pub(crate) fn confirmation(
    value: Option<&str>,
    policy: &DeletionPolicy,
    now: jiff::Timestamp,
) -> ValidationOutcome {
    let mut f = ValidationOutcome::default();
    if !policy.enabled {
        return f;
    }
    let window = human(policy.window);
    let example = now.strftime("%Y-%m-%dT%H:%M:%SZ");
    let Some(value) = value else {
        f.violation(
            FIELD,
            format!("deletion is not confirmed; set this annotation to the current time in RFC3339 UTC (e.g. {example}) at most {window} before deleting"),
        );
        return f;
    };
    let utc = value.ends_with('Z') || value.ends_with('z') || value.ends_with("+00:00");
    let parsed = value.parse::<jiff::Timestamp>().ok().filter(|_| utc);
    let Some(confirmed) = parsed else {
        f.violation(
            FIELD,
            format!("{value:?} is not an RFC3339 UTC time; use the form {example}"),
        );
        return f;
    };
    if confirmed > now {
        f.violation(
            FIELD,
            format!(
                "confirmation time {value} is in the future; use a time not after now ({example})"
            ),
        );
        return f;
    }
    let age = now.duration_since(confirmed);
    let too_old = jiff::SignedDuration::try_from(policy.window).is_ok_and(|w| age > w);
    if too_old {
        f.violation(
            FIELD,
            format!("confirmation time {value} is older than {window}; set it again to the current time (e.g. {example}) and delete within {window}"),
        );
    }
    f
}

/// `2m`, `90s`, `1h`: the window as an operator would write it.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s > 0 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s > 0 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else if d.subsec_nanos() == 0 {
        format!("{s}s")
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn now() -> jiff::Timestamp {
        "2026-04-22T10:00:00Z".parse().unwrap()
    }

    fn check(value: Option<&str>) -> ValidationOutcome {
        confirmation(value, &DeletionPolicy::default(), now())
    }

    #[test]
    fn fresh_confirmation_allows() {
        assert!(check(Some("2026-04-22T10:00:00Z")).is_allowed());
        assert!(check(Some("2026-04-22T09:58:00Z")).is_allowed());
        assert!(check(Some("2026-04-22T09:59:30.5+00:00")).is_allowed());
    }

    #[test]
    fn missing_invalid_future_expired_deny() {
        for (value, needle) in [
            (None, "not confirmed"),
            (Some("yes"), "not an RFC3339 UTC time"),
            (Some("2026-04-22T12:00:00+02:00"), "not an RFC3339 UTC time"),
            (Some("2026-04-22T10:00:01Z"), "in the future"),
            (Some("2026-04-22T09:57:59Z"), "older than 2m"),
        ] {
            let f = check(value);
            assert_eq!(f.violations.len(), 1, "{value:?}");
            assert_eq!(f.violations[0].field, FIELD);
            assert!(
                f.violations[0].message.contains(needle),
                "{value:?}: {}",
                f.violations[0]
            );
        }
    }

    #[test]
    fn disabled_policy_allows_everything() {
        let off = DeletionPolicy {
            enabled: false,
            ..DeletionPolicy::default()
        };
        assert!(confirmation(None, &off, now()).is_allowed());
    }

    #[test]
    fn trusted_principals_delete_without_confirmation() {
        let meta = ObjectMeta::default();
        let policy = DeletionPolicy::default();
        assert!(
            validate_delete_by(&meta, &policy, DeletionPolicy::KEB_SERVICE_ACCOUNT, now())
                .is_allowed()
        );
        for user in [
            "kubernetes-admin",
            "system:serviceaccount:kcp-system:other",
            "system:serviceaccount:kcp-system:kcp-kyma-environment-broker-x",
            "",
        ] {
            let f = validate_delete_by(&meta, &policy, user, now());
            assert_eq!(f.violations.len(), 1, "{user}");
            assert_eq!(f.violations[0].field, FIELD);
        }
        let none = DeletionPolicy {
            trusted_principals: Vec::new(),
            ..DeletionPolicy::default()
        };
        assert!(
            !validate_delete_by(&meta, &none, DeletionPolicy::KEB_SERVICE_ACCOUNT, now())
                .is_allowed()
        );
    }

    #[test]
    fn window_is_configurable() {
        let p = DeletionPolicy {
            window: Duration::from_secs(3600),
            ..DeletionPolicy::default()
        };
        assert!(confirmation(Some("2026-04-22T09:30:00Z"), &p, now()).is_allowed());
        for (d, text) in [
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(7200), "2h"),
            (Duration::from_secs(120), "2m"),
            (Duration::ZERO, "0s"),
            (Duration::from_millis(1500), "1500ms"),
        ] {
            assert_eq!(human(d), text);
        }
    }
}
