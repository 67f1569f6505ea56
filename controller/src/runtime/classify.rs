//! Pure classifications: Gardener `lastErrors` (as upstream's `gardener_error_handler.go`),
//! force-deletion eligibility (Gardener allows it only for five `lastErrors` codes) and API
//! errors that are transient (409, 429, 5xx, Gardener's "not yet ready" 403).

use kim_shared::gardener::LastError;
use kim_shared::gardener::error_codes as code;

/// Codes that make upstream give up at once.
const FATAL: [&str; 2] = [
    code::ERR_INFRA_UNAUTHENTICATED,
    code::ERR_INFRA_UNAUTHORIZED,
];

/// Codes upstream always retries (checked after [`FATAL`]).
const RETRYABLE: [&str; 5] = [
    code::ERR_INFRA_RATE_LIMITS_EXCEEDED,
    code::ERR_INFRA_QUOTA_EXCEEDED,
    code::ERR_INFRA_DEPENDENCIES,
    code::ERR_CONFIGURATION_PROBLEM,
    code::ERR_PROBLEMATIC_WEBHOOK,
];

/// Gardener's `HasNonRetryableErrorCode` set.
const GARDENER_NON_RETRYABLE: [&str; 7] = [
    code::ERR_INFRA_UNAUTHENTICATED,
    code::ERR_INFRA_UNAUTHORIZED,
    code::ERR_INFRA_QUOTA_EXCEEDED,
    code::ERR_INFRA_RATE_LIMITS_EXCEEDED,
    code::ERR_INFRA_DEPENDENCIES,
    code::ERR_CONFIGURATION_PROBLEM,
    code::ERR_PROBLEMATIC_WEBHOOK,
];

/// Codes with which Gardener accepts `confirmation.gardener.cloud/force-deletion`.
pub const FORCE_DELETION_CODES: [&str; 5] = [
    code::ERR_CLEANUP_CLUSTER_RESOURCES,
    code::ERR_CONFIGURATION_PROBLEM,
    code::ERR_INFRA_DEPENDENCIES,
    code::ERR_INFRA_UNAUTHENTICATED,
    code::ERR_INFRA_UNAUTHORIZED,
];

fn codes(errors: &[LastError]) -> impl Iterator<Item = &str> {
    errors
        .iter()
        .flat_map(|e| e.codes.iter().flatten())
        .map(String::as_str)
}

/// Upstream's rule: no errors -> not retryable; an auth code -> not retryable; a known
/// retryable code -> retryable; otherwise retryable unless Gardener calls a code non-retryable.
pub fn is_retryable(errors: &[LastError]) -> bool {
    if errors.is_empty() {
        return false;
    }
    if codes(errors).any(|c| FATAL.contains(&c)) {
        return false;
    }
    if codes(errors).any(|c| RETRYABLE.contains(&c)) {
        return true;
    }
    !codes(errors).any(|c| GARDENER_NON_RETRYABLE.contains(&c))
}

/// All codes joined by `, ` (upstream's reason text).
pub fn joined_codes(errors: &[LastError]) -> String {
    codes(errors).collect::<Vec<_>>().join(", ")
}

/// Whether Gardener would accept the force-deletion annotation for these errors.
pub fn force_deletion_allowed(errors: &[LastError]) -> bool {
    codes(errors).any(|c| FORCE_DELETION_CODES.contains(&c))
}

/// How an API error should be handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiErrorKind {
    /// 409: someone wrote first; retry soon with fresh data. Never logged as an error.
    Conflict,
    /// 429, 5xx, timeouts, connection errors, Gardener's "not yet ready" 403: retry with backoff.
    Transient,
    /// 404.
    NotFound,
    /// 409 AlreadyExists on create.
    AlreadyExists,
    /// Anything else (422 Invalid, admission 403s): retrying will not help until input changes.
    Permanent,
}

/// The part of an error fit for a condition message: the API server's message, not the
/// whole response.
pub fn message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}

/// Classifies a kube client error.
pub fn classify(err: &kube::Error) -> ApiErrorKind {
    match err {
        kube::Error::Api(status) => classify_status(status.code, &status.reason, &status.message),
        _ => ApiErrorKind::Transient,
    }
}

/// Classifies by HTTP code, Status reason and message.
pub fn classify_status(code: u16, reason: &str, message: &str) -> ApiErrorKind {
    match code {
        404 => ApiErrorKind::NotFound,
        409 if reason == "AlreadyExists" => ApiErrorKind::AlreadyExists,
        409 => ApiErrorKind::Conflict,
        429 | 500..=599 => ApiErrorKind::Transient,
        // Gardener's admission plugins answer 403 while their caches sync after a restart;
        // upstream retries every 403 on update for this reason.
        403 if message.contains("not yet ready") => ApiErrorKind::Transient,
        _ => ApiErrorKind::Permanent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errs(codes: &[&str]) -> Vec<LastError> {
        vec![LastError {
            codes: Some(codes.iter().map(|c| c.to_string()).collect()),
            description: "boom".into(),
            ..Default::default()
        }]
    }

    #[test]
    fn upstream_retry_classification() {
        assert!(!is_retryable(&[]));
        assert!(!is_retryable(&errs(&[code::ERR_INFRA_UNAUTHORIZED])));
        assert!(!is_retryable(&errs(&[
            code::ERR_INFRA_QUOTA_EXCEEDED,
            code::ERR_INFRA_UNAUTHENTICATED
        ])));
        assert!(is_retryable(&errs(&[code::ERR_INFRA_RATE_LIMITS_EXCEEDED])));
        assert!(is_retryable(&errs(&[code::ERR_CONFIGURATION_PROBLEM])));
        assert!(is_retryable(&errs(&[
            code::ERR_RETRYABLE_INFRA_DEPENDENCIES
        ])));
        assert!(is_retryable(&errs(&["ERR_SOMETHING_NEW"])));
        // no codes at all but an error: retryable (Gardener does not call it non-retryable)
        assert!(is_retryable(&errs(&[])));
    }

    #[test]
    fn reason_joins_codes() {
        let e = errs(&[code::ERR_INFRA_QUOTA_EXCEEDED, code::ERR_INFRA_DEPENDENCIES]);
        assert_eq!(
            joined_codes(&e),
            "ERR_INFRA_QUOTA_EXCEEDED, ERR_INFRA_DEPENDENCIES"
        );
    }

    #[test]
    fn force_deletion_codes() {
        assert!(force_deletion_allowed(&errs(&[
            code::ERR_CLEANUP_CLUSTER_RESOURCES
        ])));
        assert!(!force_deletion_allowed(&errs(&[
            code::ERR_INFRA_QUOTA_EXCEEDED
        ])));
        assert!(!force_deletion_allowed(&[]));
    }

    #[test]
    fn api_errors() {
        assert_eq!(
            classify_status(409, "Conflict", "modified"),
            ApiErrorKind::Conflict
        );
        assert_eq!(
            classify_status(409, "AlreadyExists", ""),
            ApiErrorKind::AlreadyExists
        );
        assert_eq!(
            classify_status(429, "TooManyRequests", ""),
            ApiErrorKind::Transient
        );
        assert_eq!(
            classify_status(503, "ServiceUnavailable", ""),
            ApiErrorKind::Transient
        );
        assert_eq!(
            classify_status(
                403,
                "Forbidden",
                "shoots is forbidden: not yet ready to handle request"
            ),
            ApiErrorKind::Transient
        );
        assert_eq!(
            classify_status(403, "Forbidden", "Unsupported value: machine type"),
            ApiErrorKind::Permanent
        );
        assert_eq!(classify_status(422, "Invalid", ""), ApiErrorKind::Permanent);
        assert_eq!(classify_status(404, "NotFound", ""), ApiErrorKind::NotFound);
    }
}
