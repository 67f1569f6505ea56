//! The admission server over real TLS: protocols, routes, limits, readiness, metrics,
//! certificate swap on a live connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Bytes;
use kim_certs::CertResolver;
use kim_webhook::server::AppState;
use serde_json::{Value, json};

use crate::client;
use crate::support::{self, Options, Running, pki, repo};

/// The webhook's routes plus a cheap `/noop`, started without a serving certificate.
async fn start(max_body: usize) -> Running {
    start_with(max_body, support::routes_with_noop()).await
}

async fn start_with(max_body: usize, routes: axum::Router<Arc<AppState>>) -> Running {
    start_with_shutdown(max_body, routes, None).await
}

async fn start_with_shutdown(
    max_body: usize,
    routes: axum::Router<Arc<AppState>>,
    drain: Option<(tokio::sync::oneshot::Receiver<()>, Duration)>,
) -> Running {
    support::start(Options {
        max_body,
        routes,
        drain,
        certificate: false,
        ..Options::default()
    })
    .await
}

/// Gives the webhook a fresh serving certificate and opens an HTTP/1.1 connection trusting it.
async fn serving_with_client(s: &Running) -> client::Conn {
    let p = pki();
    s.state
        .resolver
        .set(CertResolver::certified_key(&p.cert_pem, &p.key_pem).unwrap());
    client::Conn::connect(
        s.https,
        "localhost",
        client::tls_config(&p.ca_pem, &[b"http/1.1"]),
    )
    .await
    .unwrap()
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (
        code,
        out.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default(),
    )
}

/// A replica whose certificate expired (the rotation stalled, the files were not renewed) is
/// taken out of the endpoints: the apiserver cannot complete a handshake with it.
#[tokio::test]
async fn readiness_fails_once_the_serving_certificate_has_expired() {
    let s = start(1 << 20).await;
    let expired = support::pki_issued(std::time::SystemTime::now() - Duration::from_secs(600));
    s.state.resolver.set(
        CertResolver::certified_key(&expired.cert_pem, &expired.key_pem)
            .expect("an expired certificate still loads"),
    );
    let (code, body) = get(s.admin, "/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("expired"), "{body}");
    let valid = pki();
    s.state
        .resolver
        .set(CertResolver::certified_key(&valid.cert_pem, &valid.key_pem).unwrap());
    assert_eq!(get(s.admin, "/readyz").await.0, 200);
}

/// The project's AWS sample Runtime (shaped as KEB writes it) without its Kubernetes version,
/// so that the defaults have something to add.
fn sample_runtime() -> Value {
    let text = std::fs::read_to_string(repo().join("config/samples/runtime-aws.yaml"))
        .expect("config/samples/runtime-aws.yaml is readable");
    let mut v: Value = serde_yaml_ng::from_str(&text).unwrap();
    v["spec"]["shoot"]["kubernetes"]
        .as_object_mut()
        .unwrap()
        .remove("version");
    v
}

fn review(op: &str, object: Value) -> Bytes {
    Bytes::from(
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"},
                "resource": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimes"},
                "name": "runtime-id", "namespace": "kcp-system", "operation": op,
                "userInfo": {"username": "keb"}, "object": object, "oldObject": null
            }
        }))
        .unwrap(),
    )
}

#[tokio::test]
async fn readiness_waits_for_a_certificate_then_admits_over_http1_and_h2() {
    let s = start(1 << 20).await;
    let (code, body) = get(s.admin, "/readyz").await;
    assert_eq!(code, 503);
    assert!(body.contains("no serving certificate"), "{body}");
    assert_eq!(get(s.admin, "/healthz").await.0, 200);

    let p = pki();
    s.state
        .resolver
        .set(CertResolver::certified_key(&p.cert_pem, &p.key_pem).unwrap());
    assert_eq!(get(s.admin, "/readyz").await.0, 200);

    // Mutate, then validate the defaulted object.
    for alpn in [&b"http/1.1"[..], b"h2"] {
        let mut c =
            client::Conn::connect(s.https, "localhost", client::tls_config(&p.ca_pem, &[alpn]))
                .await
                .unwrap();
        assert_eq!(c.is_h2(), alpn == b"h2");
        let r = c
            .post("/mutate/runtime", review("CREATE", sample_runtime()))
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["response"]["allowed"], true, "{v}");
        assert_eq!(v["response"]["uid"], "u-1");
        let patch = v["response"]["patch"]
            .as_str()
            .expect("defaults produce a patch");
        use base64::Engine;
        let ops: json_patch::Patch = serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(patch)
                .unwrap(),
        )
        .unwrap();
        let mut obj = sample_runtime();
        json_patch::patch(&mut obj, &ops).expect("the patch applies to the request object");
        assert!(
            obj["spec"]["shoot"]["kubernetes"]["version"].is_string(),
            "version defaulted"
        );

        let r = c
            .post("/validate/runtime", review("CREATE", obj))
            .await
            .unwrap();
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["response"]["allowed"], true, "{v}");
    }

    let (_, metrics) = get(s.admin, "/metrics").await;
    assert!(metrics.contains("kim_webhook_admission_requests_total{webhook=\"mutate\",kind=\"Runtime\",operation=\"CREATE\",allowed=\"true\"} 2"), "{metrics}");
    assert!(
        metrics.contains("kim_webhook_admission_duration_seconds_bucket"),
        "{metrics}"
    );
}

#[tokio::test]
async fn invalid_runtime_denied_with_field_path_and_malformed_body_answered() {
    let s = start(1 << 20).await;
    let mut c = serving_with_client(&s).await;

    let mut bad = sample_runtime();
    bad["spec"]["shoot"]["provider"]["workers"][0]["name"] = json!("Not_A_DNS_Label");
    let r = c
        .post("/validate/runtime", review("CREATE", bad))
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["response"]["allowed"], false);
    assert_eq!(v["response"]["status"]["code"], 422);
    let msg = v["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.contains("spec.shoot.provider.workers[0].name"), "{msg}");

    let r = c
        .post("/validate/runtime", Bytes::from_static(b"{\"kind\":"))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["response"]["allowed"], false);
    assert!(
        v["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("malformed AdmissionReview")
    );

    // The connection survives both.
    let r = c.post("/noop", Bytes::from_static(b"{}")).await.unwrap();
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn only_admissions_are_served() {
    let s = start_with(1 << 20, kim_webhook::routes()).await;
    let mut c = serving_with_client(&s).await;
    // The benchmark's reference endpoints live in the benchmark, not in the webhook.
    for path in ["/noop", "/noop/decode", "/noop/spin"] {
        let r = c.post(path, Bytes::from_static(b"{}")).await.unwrap();
        assert_eq!(r.status, 404, "{path} must not be served");
    }
    let r = c
        .post("/validate/runtime", Bytes::from_static(b"{}"))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "the admission routes are served");
}

#[tokio::test]
async fn oversized_body_gets_a_clear_413() {
    let s = start(64 * 1024).await;
    let mut c = serving_with_client(&s).await;
    let r = c
        .post("/validate/runtime", Bytes::from(vec![b' '; 65 * 1024]))
        .await
        .unwrap();
    assert_eq!(r.status, 413);
    let text = String::from_utf8_lossy(&r.body);
    assert!(
        text.contains("65536") && text.contains("--max-request-bytes"),
        "{text}"
    );
    let (_, metrics) = get(s.admin, "/metrics").await;
    assert!(
        metrics.contains("kim_webhook_requests_refused_total{reason=\"too_large\"} 1")
            && metrics.contains("kim_webhook_requests_refused_total{reason=\"overloaded\"} 0"),
        "{metrics}"
    );
}

#[tokio::test]
async fn certificate_swap_keeps_open_connections_and_serves_new_handshakes() {
    let s = start(1 << 20).await;
    let (p1, p2) = (pki(), pki());
    s.state
        .resolver
        .set(CertResolver::certified_key(&p1.cert_pem, &p1.key_pem).unwrap());
    let mut old = client::Conn::connect(
        s.https,
        "localhost",
        client::tls_config(&p1.ca_pem, &[b"h2"]),
    )
    .await
    .unwrap();
    assert_eq!(
        old.post("/noop", Bytes::from_static(b"{}"))
            .await
            .unwrap()
            .status,
        200
    );

    s.state
        .resolver
        .set(CertResolver::certified_key(&p2.cert_pem, &p2.key_pem).unwrap());
    assert_eq!(
        old.post("/noop", Bytes::from_static(b"{}"))
            .await
            .unwrap()
            .status,
        200,
        "open connection survives"
    );
    assert!(
        client::Conn::connect(
            s.https,
            "localhost",
            client::tls_config(&p1.ca_pem, &[b"h2"])
        )
        .await
        .is_err()
    );
    let mut new = client::Conn::connect(
        s.https,
        "localhost",
        client::tls_config(&p2.ca_pem, &[b"h2"]),
    )
    .await
    .unwrap();
    assert_eq!(
        new.post("/noop", Bytes::from_static(b"{}"))
            .await
            .unwrap()
            .status,
        200
    );
}

#[tokio::test]
async fn plain_http_is_refused_and_tls12_is_accepted() {
    let s = start(1 << 20).await;
    let p = pki();
    s.state
        .resolver
        .set(CertResolver::certified_key(&p.cert_pem, &p.key_pem).unwrap());
    // Plain HTTP on the TLS port gets no HTTP answer.
    let (code, _) = get(s.https, "/noop").await;
    assert_eq!(code, 0);
    // TLS 1.2 only works (the minimum we accept).
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(p.ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    use rustls::pki_types::pem::PemObject;
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS12])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut c = client::Conn::connect(s.https, "localhost", Arc::new(cfg))
        .await
        .expect("TLS 1.2 accepted");
    assert_eq!(
        c.post("/noop", Bytes::from_static(b"{}"))
            .await
            .unwrap()
            .status,
        200
    );
}

/// On SIGTERM the replica reports not ready at once and keeps answering, on open and on new
/// connections, until the shutdown delay has passed; only then does it stop accepting.
#[tokio::test]
async fn shutdown_reports_not_ready_and_keeps_serving_for_the_delay() {
    let (signal, received) = tokio::sync::oneshot::channel();
    let delay = Duration::from_millis(1500);
    let s = start_with_shutdown(1 << 20, kim_webhook::routes(), Some((received, delay))).await;
    let mut open = serving_with_client(&s).await;
    assert_eq!(get(s.admin, "/readyz").await.0, 200);

    signal.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (code, body) = get(s.admin, "/readyz").await;
    assert_eq!(
        (code, body.contains("shutting down")),
        (503, true),
        "{body}"
    );
    let r = open
        .post("/validate/runtime", review("CREATE", sample_runtime()))
        .await
        .expect("an open connection is still answered during the delay");
    assert_eq!(r.status, 200);
    // ... and then closed (`Connection: close`): the client dials again, and reaches a replica
    // still in the endpoints, instead of sending its next review over this connection until
    // the drain closes it under that review.
    assert!(
        open.post("/validate/runtime", review("CREATE", sample_runtime()))
            .await
            .is_err(),
        "an HTTP/1.1 connection is closed after its answer during the delay"
    );
    let mut fresh = serving_with_client(&s).await;
    let r = fresh
        .post("/validate/runtime", review("CREATE", sample_runtime()))
        .await
        .expect("a new connection is still accepted during the delay");
    assert_eq!(r.status, 200);

    tokio::time::sleep(delay).await;
    assert!(
        tokio::net::TcpStream::connect(s.https).await.is_err(),
        "after the delay the listener is closed"
    );
}
