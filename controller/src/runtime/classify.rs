//! Pure classifications: Gardener `lastErrors` (as upstream's `gardener_error_handler.go`),
//! force-deletion eligibility (Gardener allows it only for five `lastErrors` codes) and API
//! errors: conflicts, transient failures, and Gardener saying "try later" (busy: 429, 503,
//! 504, timeouts, the admission plugins' rate-limit and "not yet ready" 403s).

use kim_shared::gardener::LastError;
use kim_shared::gardener::error_codes as code;

/// Codes that make upstream give up at once.
const FATAL: [&str; 2] = [
    code::ERR_INFRA_UNAUTHENTICATED,
    code::ERR_INFRA_UNAUTHORIZED,
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

/// Upstream's rule: no errors -> not retryable; an auth code -> not retryable; anything else
/// is retried. (Upstream goes on to name the codes it always retries and to check Gardener's
/// `HasNonRetryableErrorCode` set, but that set holds only [`FATAL`] and those codes, so the
/// outcome is already decided.)
pub fn is_retryable(errors: &[LastError]) -> bool {
    !errors.is_empty() && !codes(errors).any(|c| FATAL.contains(&c))
}

/// All codes joined by `, ` (upstream's reason text).
pub fn joined_codes(errors: &[LastError]) -> String {
    codes(errors).collect::<Vec<_>>().join(", ")
}

/// Whether Gardener would accept the force-deletion annotation for these errors.
pub fn force_deletion_allowed(errors: &[LastError]) -> bool {
    codes(errors).any(|c| FORCE_DELETION_CODES.contains(&c))
}

/// Whether a Shoot's last operation says Gardener's scheduler found no seed of its provider
/// ("Failed to schedule Shoot: none out of the 3 seeds has a matching provider for \"aws\""),
/// which no retry mends. Its other refusals (no seed matching the seed selector or the region
/// yet) it retries itself, so the Runtime waits, as upstream's does.
pub fn no_seed_of_provider(description: &str) -> bool {
    description
        .strip_prefix("Failed to schedule Shoot: none out of the ")
        .and_then(|rest| rest.split_once(' '))
        .is_some_and(|(count, rest)| {
            !count.is_empty()
                && count.bytes().all(|b| b.is_ascii_digit())
                && rest.starts_with("seeds has a matching provider for \"")
        })
}

/// How an API error should be handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiErrorKind {
    /// 409: someone wrote first; retry soon with fresh data. Never logged as an error.
    Conflict,
    /// Gardener asks to try later: 429, 503, 504, no answer within the request timeout, and the
    /// 403s its admission plugins give while their caches sync ("not yet ready") or when their
    /// own client's rate limit cannot serve a lookup before the request's deadline. Nothing was
    /// wrong with the request; Gardener is busy. Retry with a growing backoff and send less.
    Busy,
    /// Other 5xx, 401 (Gardener refuses the controller's own credentials) and connection
    /// errors: retry with backoff.
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
    let text = match err {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    };
    kim_shared::redact::credentials(&text).into_owned()
}

/// Classifies a kube client error.
pub fn classify(err: &kube::Error) -> ApiErrorKind {
    match err {
        kube::Error::Api(status) => classify_status(status.code, &status.reason, &status.message),
        kube::Error::Service(e) if timed_out(e.as_ref()) => ApiErrorKind::Busy,
        _ => ApiErrorKind::Transient,
    }
}

/// Whether the answer is a 403 (whatever its [`classify`]).
pub fn is_forbidden(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 403)
}

/// Whether a write that failed with `err` may still have been stored: no answer at all (a
/// timeout, a broken connection), or the apiserver's own timeout (504, "may still be
/// processing the request") or an internal error (500: storage can time out after it wrote).
/// Other answers come before the write or instead of it.
pub fn may_have_been_stored(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => matches!(status.code, 500 | 504),
        _ => true,
    }
}

/// Whether the error chain holds the Gardener client's request timeout.
fn timed_out(mut e: &(dyn std::error::Error + 'static)) -> bool {
    loop {
        if e.is::<crate::gardener::client::Timeout>() {
            return true;
        }
        match e.source() {
            Some(next) => e = next,
            None => return false,
        }
    }
}

/// Phrases of gardener-apiserver (and the Kubernetes apiserver library under it) that mean
/// "not now": an admission plugin's caches are still syncing, or a lookup it makes through its
/// own rate-limited client (client-go's token bucket, 5 QPS by default) would wait past the
/// request's deadline. A `failed to resolve resource reference` 403 for an object that does not
/// exist says `not found` and stays permanent.
const BUSY_PHRASES: [&str; 4] = [
    "not yet ready",
    "rate limiter Wait",
    "would exceed context deadline",
    "context deadline exceeded",
];

/// Classifies by HTTP code, Status reason and message.
pub fn classify_status(code: u16, reason: &str, message: &str) -> ApiErrorKind {
    match code {
        404 => ApiErrorKind::NotFound,
        409 if reason == "AlreadyExists" => ApiErrorKind::AlreadyExists,
        409 => ApiErrorKind::Conflict,
        408 | 429 | 503 | 504 => ApiErrorKind::Busy,
        _ if BUSY_PHRASES.iter().any(|p| message.contains(p)) => ApiErrorKind::Busy,
        // Gardener refuses the controller's credentials (a token rotated or revoked, the
        // authenticator down): nothing is wrong with the Runtime, and it must not turn `Failed`
        // for KEB while the credentials are fixed.
        401 => ApiErrorKind::Transient,
        500..=599 => ApiErrorKind::Transient,
        _ => ApiErrorKind::Permanent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_missing_provider_is_a_scheduling_failure_for_good() {
        assert!(no_seed_of_provider(
            "Failed to schedule Shoot: none out of the 3 seeds has a matching provider for \"aws\""
        ));
        for waits in [
            "Failed to schedule Shoot: none out of the 3 seeds has the matching labels required by seed selector of 'Shoot' (selector: 'seed.gardener.cloud/region=eu-central-1')",
            "Failed to schedule Shoot: none out of the  seeds has a matching provider for \"aws\"",
            "Failed to schedule Shoot: none out of the 3 seeds is in region \"eu-central-1\"",
            "Shoot cluster has been successfully reconciled.",
            "",
        ] {
            assert!(!no_seed_of_provider(waits), "{waits}");
        }
    }

    #[test]
    fn a_write_may_have_been_stored_without_an_answer_or_after_a_server_timeout() {
        let answer = |code: u16, reason: &str| {
            kube::Error::Api(
                kube::core::Status::failure("m", reason)
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(may_have_been_stored(&answer(504, "Timeout")));
        assert!(may_have_been_stored(&answer(500, "InternalError")));
        assert!(may_have_been_stored(
            &kube::Error::LinesCodecMaxLineLengthExceeded
        ));
        for (code, reason) in [
            (403, "Forbidden"),
            (409, "AlreadyExists"),
            (422, "Invalid"),
            (429, "TooManyRequests"),
            (503, "ServiceUnavailable"),
        ] {
            assert!(!may_have_been_stored(&answer(code, reason)), "{code}");
        }
    }

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
            classify_status(500, "InternalError", "boom"),
            ApiErrorKind::Transient
        );
        assert_eq!(
            classify_status(502, "", "bad gateway"),
            ApiErrorKind::Transient
        );
        assert_eq!(
            classify_status(403, "Forbidden", "Unsupported value: machine type"),
            ApiErrorKind::Permanent
        );
        assert_eq!(classify_status(422, "Invalid", ""), ApiErrorKind::Permanent);
        assert_eq!(classify_status(404, "NotFound", ""), ApiErrorKind::NotFound);
        assert_eq!(
            classify_status(401, "Unauthorized", "Unauthorized"),
            ApiErrorKind::Transient
        );
        assert_eq!(
            classify_status(408, "Timeout", "request timed out"),
            ApiErrorKind::Busy
        );
        assert_eq!(
            classify_status(400, "BadRequest", "bad request"),
            ApiErrorKind::Permanent
        );
    }

    /// gardener-apiserver's answers as they come over the wire (testdata/README.md says which
    /// were captured from the test environment).
    #[test]
    fn real_gardener_answers() {
        let table: [(&str, &str, ApiErrorKind); 9] = [
            (
                "403-reference-rate-limited",
                include_str!("testdata/403-reference-rate-limited.json"),
                ApiErrorKind::Busy,
            ),
            (
                "403-reference-not-found",
                include_str!("testdata/403-reference-not-found.json"),
                ApiErrorKind::Permanent,
            ),
            (
                "409-already-exists",
                include_str!("testdata/409-already-exists.json"),
                ApiErrorKind::AlreadyExists,
            ),
            (
                "429",
                include_str!("testdata/handmade-429-too-many-requests.json"),
                ApiErrorKind::Busy,
            ),
            (
                "503",
                include_str!("testdata/handmade-503-service-unavailable.json"),
                ApiErrorKind::Busy,
            ),
            (
                "504",
                include_str!("testdata/handmade-504-timeout.json"),
                ApiErrorKind::Busy,
            ),
            (
                "401",
                include_str!("testdata/handmade-401-unauthorized.json"),
                ApiErrorKind::Transient,
            ),
            (
                "403-not-yet-ready",
                include_str!("testdata/handmade-403-not-yet-ready.json"),
                ApiErrorKind::Busy,
            ),
            (
                "500-deadline",
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Internal error occurred: context deadline exceeded","reason":"InternalError","code":500}"#,
                ApiErrorKind::Busy,
            ),
        ];
        for (name, body, want) in table {
            let status: kube::core::Status =
                serde_json::from_str(body).unwrap_or_else(|e| panic!("{name}: {e}"));
            let err = kube::Error::Api(Box::new(status));
            assert_eq!(classify(&err), want, "{name}");
        }
    }

    #[test]
    fn condition_message_is_the_servers_message_and_code() {
        let status: kube::core::Status = serde_json::from_str(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"shoots \"c-1\" already exists","reason":"AlreadyExists","code":409}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            message(&kube::Error::Api(Box::new(status))),
            "shoots \"c-1\" already exists (409)"
        );
        let other = kube::Error::Service("connection reset".into());
        assert_eq!(message(&other), other.to_string());
    }

    #[test]
    fn no_answer_within_the_request_timeout_is_busy() {
        let timeout = crate::gardener::client::Timeout(std::time::Duration::from_secs(3));
        let err = kube::Error::Service(Box::new(timeout));
        assert_eq!(classify(&err), ApiErrorKind::Busy);
        // As kube's client buffer hands it over: wrapped, the timeout as the source.
        #[derive(Debug, thiserror::Error)]
        #[error("buffered service failed")]
        struct Wrapped(#[source] crate::gardener::client::Timeout);
        let err = kube::Error::Service(Box::new(Wrapped(crate::gardener::client::Timeout(
            std::time::Duration::from_secs(3),
        ))));
        assert_eq!(classify(&err), ApiErrorKind::Busy);
        let other = kube::Error::Service("connection reset".into());
        assert_eq!(classify(&other), ApiErrorKind::Transient);
    }
}
