//! Keeps credentials out of messages that quote an API server's answer.
//!
//! An answer to a Secret write may quote the object it refused: an admission webhook or a
//! policy engine can put any field of the request into its message (and its causes), and the
//! API server passes that on. Such a message goes into a status, an Event or a log line, where
//! anyone who may read those would read the kubeconfig, token or password the write carried.
//!
//! Two rules, both applied by [`credentials_in`]:
//! - what looks like encoded credentials: a run of token characters (letters, digits and
//!   `+ / = _ - .`) of 32 or more holding a piece between separators of 20 or more characters
//!   that mixes upper case, lower case and digits (base64 of a kubeconfig, certificate or key,
//!   a JWT). Names do not (object names are lower case, UUIDs lower-case hex in short groups,
//!   paths and resource IDs are made of short pieces);
//! - the values the write carried, when the caller knows them: each one, and its base64, of 8
//!   or more characters (a short password is no long run).

use std::borrow::Cow;

use base64::Engine;

/// Runs this long or longer are looked at.
const MIN_RUN: usize = 32;
/// A piece between separators this long, mixing cases and digits, makes a run opaque.
const MIN_PIECE: usize = 20;
/// Known values shorter than this are not looked for (they would match ordinary words).
const MIN_VALUE: usize = 8;

/// What replaces a credential.
pub const REDACTED: &str = "<redacted>";

fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '_' | '-' | '.')
}

/// Whether a run of token characters looks like encoded credentials rather than a name.
fn opaque(run: &str) -> bool {
    run.len() >= MIN_RUN
        && run
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|piece| {
                piece.len() >= MIN_PIECE
                    && piece.chars().any(|c| c.is_ascii_uppercase())
                    && piece.chars().any(|c| c.is_ascii_lowercase())
                    && piece.chars().any(|c| c.is_ascii_digit())
            })
}

/// `message` with every run that looks like encoded credentials replaced by [`REDACTED`].
pub fn credentials(message: &str) -> Cow<'_, str> {
    credentials_in(message, &[])
}

/// [`credentials`], and every occurrence of each of `values` (and of its base64) of at least
/// 8 bytes replaced too: the values a refused write carried.
pub fn credentials_in<'a>(message: &'a str, values: &[&[u8]]) -> Cow<'a, str> {
    let mut out = Cow::Borrowed(message);
    for value in values.iter().filter(|v| v.len() >= MIN_VALUE) {
        let encoded = base64::engine::general_purpose::STANDARD.encode(value);
        let plain = String::from_utf8_lossy(value);
        for needle in [encoded.as_str(), plain.as_ref()] {
            if out.contains(needle) {
                out = Cow::Owned(out.replace(needle, REDACTED));
            }
        }
    }
    match opaque_runs(&out) {
        Some(redacted) => Cow::Owned(redacted),
        None => out,
    }
}

/// The values of a Secret's `data`, as [`credentials_in`] and [`status_in`] take them.
pub fn data_values(
    data: Option<&std::collections::BTreeMap<String, k8s_openapi::ByteString>>,
) -> impl Iterator<Item = &[u8]> {
    data.into_iter()
        .flat_map(|d| d.values().map(|v| v.0.as_slice()))
}

/// An API server's answer (`Status`) with its message and the message and field of every cause
/// cleared by [`credentials_in`] with `values`: for answers to requests that carry or touch
/// credentials, before they are shown.
pub fn status_in(status: &mut kube::core::Status, values: &[&[u8]]) {
    let clean = |text: &mut String| {
        if let Cow::Owned(t) = credentials_in(text, values) {
            *text = t;
        }
    };
    clean(&mut status.message);
    if let Some(details) = status.details.as_mut() {
        for cause in &mut details.causes {
            clean(&mut cause.message);
            clean(&mut cause.field);
        }
    }
}

/// `message` with its opaque runs replaced, or `None` when it has none.
fn opaque_runs(message: &str) -> Option<String> {
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
        return None;
    }
    out.push_str(&message[copied..]);
    Some(out)
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
            "RuntimeAccess/5f0d6a8e-2c1b-4c1e-9a0b-3e6f0b2d1c7a",
            "ServiceAccount victims-77520fb8/ghost-7f35 is a subject of ClusterRoleBinding/ghost-7f35-binding in the runtime",
            "/subscriptions/1f2e3d4c-5b6a-4789-9abc-def012345678/resourceGroups/MyGroup01/providers/Microsoft.Network/virtualNetworks/Vnet01",
            "github.com/gardener/gardener/pkg/apis/core/v1beta1.Shoot",
            "",
        ] {
            assert!(
                matches!(credentials(msg), Cow::Borrowed(m) if m == msg),
                "{msg}"
            );
        }
    }

    /// A short password is no long run: the values the write carried are looked for as they
    /// are and as base64.
    #[test]
    fn the_values_a_write_carried_are_redacted_however_short() {
        let password = b"hunter2!x";
        let msg = "denied: data.password aHVudGVyMiF4 (hunter2!x) is weak; user \"me\"";
        assert_eq!(
            credentials_in(msg, &[password, b"me"]),
            "denied: data.password <redacted> (<redacted>) is weak; user \"me\""
        );
    }

    #[test]
    fn an_answer_loses_the_values_in_its_message_and_causes() {
        let key = b"-----BEGIN PRIVATE KEY-----\nshort key\n-----END PRIVATE KEY-----\n";
        let quoted = String::from_utf8_lossy(key);
        let mut status = kube::core::Status::failure(&format!("denied: {quoted}"), "Forbidden");
        status.details = Some(kube::core::response::StatusDetails {
            causes: vec![kube::core::response::StatusCause {
                reason: "FieldValueForbidden".into(),
                message: format!("tls.key is {quoted}"),
                field: "data[tls.key]".into(),
            }],
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
        status_in(&mut status, &[key]);
        assert_eq!(status.message, "denied: <redacted>");
        let cause = &status
            .details
            .as_ref()
            .map(|d| d.causes.clone())
            .unwrap_or_default()[0];
        assert_eq!(cause.message, "tls.key is <redacted>");
        assert_eq!(cause.field, "data[tls.key]");
    }
}
