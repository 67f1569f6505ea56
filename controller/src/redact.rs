//! API errors of writes that carry credentials, cleared of them before they are shown
//! ([`kim_shared::redact`] says what is cleared and why).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::ByteString;

/// The values of a Secret's `data`, as [`api_error`] takes them.
pub fn data_values(data: Option<&BTreeMap<String, ByteString>>) -> impl Iterator<Item = &[u8]> {
    data.into_iter()
        .flat_map(|d| d.values().map(|v| v.0.as_slice()))
}

/// `err` with its API answer (message, and the message and field of every cause) cleared by
/// [`kim_shared::redact::credentials_in`] with `values`: for errors of writes that carry credentials, which are
/// shown in a status and logged.
pub fn api_error(err: kube::Error, values: &[&[u8]]) -> kube::Error {
    let clean = |text: &mut String| {
        if let Cow::Owned(t) = kim_shared::redact::credentials_in(text, values) {
            *text = t;
        }
    };
    match err {
        kube::Error::Api(mut status) => {
            clean(&mut status.message);
            if let Some(details) = status.details.as_mut() {
                for cause in &mut details.causes {
                    clean(&mut cause.message);
                    clean(&mut cause.field);
                }
            }
            kube::Error::Api(status)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_error_loses_credentials_in_its_message_and_causes() {
        let b64 =
            "YXBpVmVyc2lvbjogdjEKY2x1c3RlcnM6Ci0gY2x1c3RlcjoKICAgIHNlcnZlcjogaHR0cHM6Ly9hcGkK";
        let status = kube::core::Status::failure(&format!("denied: {b64}"), "Forbidden")
            .with_code(403)
            .with_details(kube::core::response::StatusDetails {
                causes: vec![kube::core::response::StatusCause {
                    reason: "FieldValueForbidden".into(),
                    message: format!("value {b64}"),
                    field: "data.config".into(),
                }],
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                retry_after_seconds: 0,
            });
        let shown = api_error(kube::Error::Api(Box::new(status)), &[]).to_string();
        assert!(!shown.contains(&b64[..20]), "{shown}");
        assert!(shown.contains("denied: <redacted>"), "{shown}");
    }
}
