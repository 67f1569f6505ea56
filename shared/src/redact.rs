//! Keeps credentials out of messages that quote an API server's answer.
//!
//! An answer to a Secret write may quote the object it refused: an admission webhook or a
//! policy engine on the KCP can put any field of the request into its message, and the API
//! server passes that message on. Such a message goes into a status, an Event or a log line,
//! where anyone who may read those would read the kubeconfig or token the write carried. What
//! credentials look like there is known: base64 (of a kubeconfig, a certificate, a key), a JWT,
//! a hex digest. Those are long runs of token characters mixing upper case, lower case and
//! digits, which no name in a Kubernetes message is (object names are lower case, UUIDs are
//! lower-case hex in short groups).

use std::borrow::Cow;

/// Runs this long or longer are looked at.
const MIN_RUN: usize = 32;

/// What replaces an opaque run.
pub const REDACTED: &str = "<redacted>";

fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '_' | '-' | '.')
}

/// Whether a run of token characters looks like encoded credentials rather than a name.
fn opaque(run: &str) -> bool {
    run.len() >= MIN_RUN
        && run.chars().any(|c| c.is_ascii_uppercase())
        && run.chars().any(|c| c.is_ascii_lowercase())
        && run.chars().any(|c| c.is_ascii_digit())
}

/// `message` with every run that looks like encoded credentials replaced by [`REDACTED`].
pub fn credentials(message: &str) -> Cow<'_, str> {
    let mut out = String::new();
    let mut copied = 0;
    let mut rest = message.char_indices().peekable();
    while let Some((start, c)) = rest.next() {
        if !token_char(c) {
            continue;
        }
        let mut end = start + c.len_utf8();
        while let Some(&(i, c)) = rest.peek() {
            if !token_char(c) {
                break;
            }
            end = i + c.len_utf8();
            rest.next();
        }
        if opaque(&message[start..end]) {
            out.push_str(&message[copied..start]);
            out.push_str(REDACTED);
            copied = end;
        }
    }
    if copied == 0 {
        return Cow::Borrowed(message);
    }
    out.push_str(&message[copied..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_credentials_are_redacted_and_names_are_kept() {
        let jwt = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEyMyJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6a3ltYS1zeXN0ZW06YWRtaW4ifQ.c2lnbmF0dXJlLWJ5dGVzLTEyMzQ1Njc4OTA";
        let b64 =
            "YXBpVmVyc2lvbjogdjEKY2x1c3RlcnM6Ci0gY2x1c3RlcjoKICAgIHNlcnZlcjogaHR0cHM6Ly9hcGkK";
        let msg = format!(
            "admission webhook \"policy.example.com\" denied the request: Secret \"kubeconfig-5f0d6a8e-2c1b-4c1e-9a0b-3e6f0b2d1c7a\" in kcp-system: data.config {b64} and token {jwt} not allowed"
        );
        let shown = credentials(&msg);
        assert!(
            !shown.contains(&b64[..20]) && !shown.contains(&jwt[..20]),
            "{shown}"
        );
        assert_eq!(
            shown,
            "admission webhook \"policy.example.com\" denied the request: Secret \"kubeconfig-5f0d6a8e-2c1b-4c1e-9a0b-3e6f0b2d1c7a\" in kcp-system: data.config <redacted> and token <redacted> not allowed"
        );
    }

    #[test]
    fn ordinary_messages_are_left_as_they_are() {
        for msg in [
            "secrets \"kubeconfig-rt-1\" is forbidden: exceeded quota: secrets, requested: count/secrets=1",
            "Secret \"sa-kubeconfig-team-a\" is invalid: metadata.labels: Invalid value: \"kyma-project.io/runtime-id\"",
            "Internal error occurred: resource quota evaluation timed out",
            "https://api.shoot-1a2b3c.kyma.ondemand.com:443/api/v1/namespaces/kyma-system/secrets",
            "",
        ] {
            assert!(
                matches!(credentials(msg), Cow::Borrowed(m) if m == msg),
                "{msg}"
            );
        }
    }
}
