//! The GardenerCluster status the reconciler wants: upstream's condition type
//! `KubeconfigManagement`, its reasons and message prefixes, with upstream's literal strings.
//! Pure: the caller passes the current conditions and `now`. The strings are `kim_shared::names`'
//! (the Runtime reconciler reads them there).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kim_shared::names;

/// Upstream's only condition type of a GardenerCluster.
pub const CONDITION_TYPE: &str = names::condition::KUBECONFIG_MANAGEMENT;

/// `status.state` when the kubeconfig Secret is in place.
pub const STATE_READY: &str = names::GARDENER_CLUSTER_STATE_READY;
/// `status.state` after a failure.
pub const STATE_ERROR: &str = names::GARDENER_CLUSTER_STATE_ERROR;

/// Upstream's condition reasons, with their literal values (two carry a `ConditionReason` prefix
/// upstream; we keep the literals so dashboards and alerts keep matching).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The Secret was created.
    SecretCreated,
    /// The Secret's kubeconfig was replaced.
    SecretRotated,
    /// Reading the Secret failed.
    FailedToCheckSecret,
    /// Creating the Secret failed.
    FailedToCreateSecret,
    /// Deleting the Secret failed.
    FailedToDeleteSecret,
    /// Replacing the kubeconfig in the Secret failed.
    FailedToUpdateSecret,
    /// Gardener did not issue a kubeconfig.
    FailedToGetKubeconfig,
    /// The Secret exists and is not this GardenerCluster's (not in upstream).
    SecretNotOwned,
}

impl Reason {
    /// The condition reason string.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::SecretCreated => names::reason::KUBECONFIG_SECRET_CREATED,
            Reason::SecretRotated => names::reason::KUBECONFIG_SECRET_ROTATED,
            Reason::FailedToCheckSecret => names::reason::FAILED_TO_CHECK_SECRET,
            Reason::FailedToCreateSecret => names::reason::FAILED_TO_CREATE_SECRET,
            Reason::FailedToDeleteSecret => names::reason::FAILED_TO_DELETE_SECRET,
            Reason::FailedToUpdateSecret => names::reason::FAILED_TO_UPDATE_SECRET,
            Reason::FailedToGetKubeconfig => names::reason::FAILED_TO_GET_KUBECONFIG,
            Reason::SecretNotOwned => "SecretNotOwned",
        }
    }

    /// Upstream's message for the reason.
    pub fn message_prefix(self) -> &'static str {
        match self {
            Reason::SecretCreated => "Secret created successfully.",
            Reason::SecretRotated => "Secret rotated successfully.",
            Reason::FailedToCheckSecret => "Failed to get secret.",
            Reason::FailedToCreateSecret => "Failed to create secret.",
            Reason::FailedToDeleteSecret => "Failed to delete secret.",
            Reason::FailedToUpdateSecret => "Failed to rotate secret.",
            Reason::FailedToGetKubeconfig => "Failed to get kubeconfig.",
            Reason::SecretNotOwned => "Secret not owned.",
        }
    }

    fn is_success(self) -> bool {
        matches!(self, Reason::SecretCreated | Reason::SecretRotated)
    }
}

/// The `status` the reconciler applies.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredStatus {
    /// `Ready` or `Error`.
    pub state: &'static str,
    /// The `KubeconfigManagement` condition.
    pub condition: Condition,
}

/// Status after a successful step with `reason`; `error` (already free of secrets) after a failure.
pub fn desired(
    current: &[Condition],
    reason: Reason,
    error: Option<&str>,
    generation: Option<i64>,
    now: Timestamp,
) -> DesiredStatus {
    let (state, status, message) = match error {
        None if reason.is_success() => (STATE_READY, "True", reason.message_prefix().to_owned()),
        None => (STATE_ERROR, "False", reason.message_prefix().to_owned()),
        Some(err) => (
            STATE_ERROR,
            "False",
            format!("{} Error: {err}", reason.message_prefix()),
        ),
    };
    let previous = current.iter().find(|c| c.type_ == CONDITION_TYPE);
    // Kubernetes convention: the transition time moves only when the status value changes.
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Time(now),
    };
    DesiredStatus {
        state,
        condition: Condition {
            type_: CONDITION_TYPE.to_owned(),
            status: status.to_owned(),
            reason: reason.as_str().to_owned(),
            message: kim_shared::api::condition_message(message),
            last_transition_time,
            observed_generation: generation,
        },
    }
}

/// Status when nothing had to be done: keeps a successful reason (so a forced rotation stays
/// `KubeconfigSecretRotated`; upstream reverted it to `KubeconfigSecretCreated`), otherwise
/// reports the Secret as created.
pub fn unchanged(current: &[Condition], generation: Option<i64>, now: Timestamp) -> DesiredStatus {
    let kept = current
        .iter()
        .find(|c| c.type_ == CONDITION_TYPE && c.status == "True")
        .and_then(|c| match c.reason.as_str() {
            "KubeconfigSecretRotated" => Some(Reason::SecretRotated),
            "KubeconfigSecretCreated" => Some(Reason::SecretCreated),
            _ => None,
        });
    desired(
        current,
        kept.unwrap_or(Reason::SecretCreated),
        None,
        generation,
        now,
    )
}

/// True when applying `want` would change nothing (so the reconciler skips the write).
pub fn is_current(state: Option<&str>, current: &[Condition], want: &DesiredStatus) -> bool {
    state == Some(want.state) && current.iter().any(|c| c == &want.condition)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    fn later() -> Timestamp {
        "2026-01-01T01:00:00Z".parse().unwrap()
    }

    #[test]
    fn success_is_ready_with_upstream_reason_and_message() {
        let s = desired(&[], Reason::SecretCreated, None, Some(3), now());
        assert_eq!(s.state, "Ready");
        assert_eq!(s.condition.type_, "KubeconfigManagement");
        assert_eq!(s.condition.status, "True");
        assert_eq!(s.condition.reason, "KubeconfigSecretCreated");
        assert_eq!(s.condition.message, "Secret created successfully.");
        assert_eq!(s.condition.observed_generation, Some(3));
    }

    #[test]
    fn failure_is_error_with_prefixed_message_and_literal_reason() {
        let s = desired(
            &[],
            Reason::FailedToCreateSecret,
            Some("forbidden"),
            None,
            now(),
        );
        assert_eq!(s.state, "Error");
        assert_eq!(s.condition.status, "False");
        assert_eq!(s.condition.reason, "ConditionReasonFailedToCreateSecret");
        assert_eq!(
            s.condition.message,
            "Failed to create secret. Error: forbidden"
        );
    }

    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let created = desired(&[], Reason::SecretCreated, None, None, now()).condition;
        let rotated = desired(
            std::slice::from_ref(&created),
            Reason::SecretRotated,
            None,
            None,
            later(),
        );
        assert_eq!(rotated.condition.last_transition_time, Time(now()));
        let failed = desired(
            &[rotated.condition],
            Reason::FailedToGetKubeconfig,
            Some("x"),
            None,
            later(),
        );
        assert_eq!(failed.condition.last_transition_time, Time(later()));
    }

    #[test]
    fn a_quiet_reconcile_keeps_rotated() {
        let rotated = desired(&[], Reason::SecretRotated, None, None, now()).condition;
        let s = unchanged(std::slice::from_ref(&rotated), None, later());
        assert_eq!(s.condition.reason, "KubeconfigSecretRotated");
        assert!(is_current(Some("Ready"), &[rotated], &s));
    }

    #[test]
    fn a_quiet_reconcile_after_an_error_reports_created() {
        let failed = desired(&[], Reason::FailedToGetKubeconfig, Some("x"), None, now()).condition;
        let s = unchanged(std::slice::from_ref(&failed), None, later());
        assert_eq!(s.condition.reason, "KubeconfigSecretCreated");
        assert_eq!(s.state, "Ready");
        assert!(!is_current(Some("Error"), &[failed], &s));
    }
}
