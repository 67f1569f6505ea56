//! API errors of writes that carry credentials, cleared of them before they are shown
//! ([`kim_shared::redact`] says what is cleared and why).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;

pub use kim_shared::redact::data_values;

/// `err` with its API answer (message, and the message and field of every cause) cleared by
/// [`kim_shared::redact::credentials_in`] with `values`: for errors of writes that carry credentials, which are
/// shown in a status and logged.
pub fn api_error(err: kube::Error, values: &[&[u8]]) -> kube::Error {
    match err {
        kube::Error::Api(mut status) => {
            kim_shared::redact::status_in(&mut status, values);
            kube::Error::Api(status)
        }
        other => other,
    }
}

/// [`api_error`] for a request on a Secret holding `data`: an admission webhook sees the whole
/// Secret on every write, patch or delete (as `object` or `oldObject`), also when the request
/// itself carries no data, and may quote it.
pub fn secret_error(err: kube::Error, data: Option<&BTreeMap<String, ByteString>>) -> kube::Error {
    api_error(err, &data_values(data).collect::<Vec<_>>())
}

/// A reconcile's error as its retry log line shows it: cleared by
/// [`kim_shared::redact::credentials`] as well, for an answer quoting a Secret that reached it
/// without [`secret_error`].
pub fn logged(err: &impl std::fmt::Display) -> String {
    kim_shared::redact::credentials(&err.to_string()).into_owned()
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
