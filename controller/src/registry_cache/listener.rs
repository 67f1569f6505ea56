//! The listener the runtime watcher calls when a runtime cluster's registry cache
//! configuration changes (upstream: runtime-watcher's listener, contract version 2):
//! `POST /v2/infrastructure-manager-registry-cache/event`, a JSON `WatchEvent` body of at most
//! 16 KiB, and the runtime watcher's client certificate in `X-Forwarded-Client-Cert`, put there
//! by the KCP gateway after mutual TLS; its common name is the runtime ID.
//!
//! The event only names a Runtime to reconcile: nothing in it is read besides the ID, so a
//! caller that reaches the listener can at most make the controller look at a runtime cluster
//! earlier than its period.

use std::net::SocketAddr;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::routing::post;
use http::{HeaderMap, StatusCode};
use kim_shared::registry_cache as rc;
use kim_shared::validation::syntax::is_dns_subdomain;
use tokio::sync::mpsc;

use crate::Shutdown;

/// Serves the listener on all interfaces at `port` until `shutdown`; the runtime IDs of the
/// events go to `events`.
pub async fn serve(port: u16, events: mpsc::Sender<String>, shutdown: Shutdown) {
    let addr = SocketAddr::from(([0, 0, 0, 0], port));
    let listener = match kim_process::http::bind(addr, "--registry-cache-listener-port").await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "registry cache listener not started");
            return;
        }
    };
    tracing::info!(%addr, path = %path(), "registry cache listener started");
    if let Err(e) =
        kim_process::http::serve(listener, router(events), shutdown.cancelled_owned()).await
    {
        tracing::error!(error = %e, "registry cache listener stopped");
    }
}

/// The listener's path.
pub fn path() -> String {
    format!("/v2/{}/event", rc::LISTENER_COMPONENT)
}

/// The listener's routes.
pub fn router(events: mpsc::Sender<String>) -> Router {
    Router::new()
        .route(&path(), post(event))
        .layer(DefaultBodyLimit::max(rc::LISTENER_BODY_LIMIT))
        .with_state(events)
}

/// The body of an event (upstream's `WatchEvent`); only its shape is checked.
#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct WatchEvent {
    watched: serde_json::Value,
    #[serde(rename = "watchedGvk")]
    watched_gvk: serde_json::Value,
}

async fn event(
    State(events): State<mpsc::Sender<String>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let runtime_id = match runtime_id(&headers) {
        Ok(id) => id,
        Err((code, message)) => {
            tracing::info!(%message, "registry cache listener: event refused");
            return (code, message);
        }
    };
    if serde_json::from_slice::<WatchEvent>(&body).is_err() {
        return (
            StatusCode::BAD_REQUEST,
            "could not unmarshal watcher event".to_owned(),
        );
    }
    tracing::debug!(runtime_id, "registry cache listener: event");
    match events.send(runtime_id).await {
        Ok(()) => (StatusCode::OK, String::new()),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the registry cache controller is stopping".to_owned(),
        ),
    }
}

/// The runtime ID of the caller: the common name of the client certificate the gateway
/// forwards.
fn runtime_id(headers: &HeaderMap) -> Result<String, (StatusCode, String)> {
    let refuse = |code, msg: &str| (code, msg.to_owned());
    let header = headers.get(rc::XFCC_HEADER).ok_or_else(|| {
        refuse(
            StatusCode::UNAUTHORIZED,
            "no X-Forwarded-Client-Cert header",
        )
    })?;
    if header.len() > rc::XFCC_LIMIT {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "X-Forwarded-Client-Cert header value too long",
        ));
    }
    let header = header.to_str().map_err(|_| {
        refuse(
            StatusCode::BAD_REQUEST,
            "X-Forwarded-Client-Cert is not text",
        )
    })?;
    let encoded = rc::xfcc_certificate(header)
        .ok_or_else(|| refuse(StatusCode::UNAUTHORIZED, "empty client certificate"))?;
    let pem = percent_encoding::percent_decode_str(encoded).decode_utf8_lossy();
    let pem = pem.trim_matches('"');
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|_| refuse(StatusCode::BAD_REQUEST, "client certificate is not PEM"))?;
    let cert = block.parse_x509().map_err(|_| {
        refuse(
            StatusCode::BAD_REQUEST,
            "client certificate is not an X.509 certificate",
        )
    })?;
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default();
    if !is_dns_subdomain(cn) {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "client certificate common name is not a runtime ID",
        ));
    }
    Ok(cn.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use http::Request;
    use tower::ServiceExt;

    fn cert(cn: &str) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.self_signed(&key).unwrap().pem()
    }

    fn encoded(pem: &str) -> String {
        percent_encoding::utf8_percent_encode(pem, percent_encoding::NON_ALPHANUMERIC).to_string()
    }

    const BODY: &str = r#"{"watched":{"name":"c","namespace":"n"},"watchedGvk":{"group":"core.kyma-project.io","version":"v1beta1","kind":"RegistryCacheConfig"}}"#;

    async fn call(xfcc: Option<String>, body: &str) -> (StatusCode, Option<String>) {
        let (tx, mut rx) = mpsc::channel(4);
        let mut req = Request::post(path());
        if let Some(v) = xfcc {
            req = req.header(rc::XFCC_HEADER, v);
        }
        let res = router(tx)
            .oneshot(req.body(Body::from(body.to_owned())).unwrap())
            .await
            .unwrap();
        (res.status(), rx.try_recv().ok())
    }

    #[tokio::test]
    async fn the_certificate_common_name_is_the_runtime_id() {
        let header = format!("Hash=ab;Cert=\"{}\";Subject=\"\"", encoded(&cert("rt-1")));
        assert_eq!(
            call(Some(header), BODY).await,
            (StatusCode::OK, Some("rt-1".to_owned()))
        );
    }

    #[tokio::test]
    async fn events_without_a_usable_certificate_are_refused() {
        assert_eq!(call(None, BODY).await, (StatusCode::UNAUTHORIZED, None));
        assert_eq!(
            call(Some("Hash=ab".into()), BODY).await,
            (StatusCode::UNAUTHORIZED, None)
        );
        assert_eq!(
            call(Some("Cert=\"not-a-pem\"".into()), BODY).await,
            (StatusCode::BAD_REQUEST, None)
        );
        let path_trick = format!("Cert=\"{}\"", encoded(&cert(concat!("..", "/kube-system"))));
        assert_eq!(
            call(Some(path_trick), BODY).await,
            (StatusCode::BAD_REQUEST, None)
        );
        let header = format!("Cert=\"{}\"", encoded(&cert("rt-1")));
        assert_eq!(
            call(Some(header.clone()), "{}").await,
            (StatusCode::BAD_REQUEST, None)
        );
        let big = format!(
            "{{\"watched\":\"{}\"}}",
            "x".repeat(rc::LISTENER_BODY_LIMIT)
        );
        assert_eq!(
            call(Some(header), &big).await.0,
            StatusCode::PAYLOAD_TOO_LARGE
        );
    }
}
