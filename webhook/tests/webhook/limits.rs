//! The admission listener under attack, in-process over real TLS: slow headers, slow bodies,
//! slow handshakes, more requests, connections and HTTP/2 streams than allowed, oversized and
//! many large bodies, clients without the apiserver's certificate. Each test performs the
//! attack and checks that the replica cuts it off and keeps answering.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Bytes;
use kim_certs::CertResolver;
use kim_webhook::metrics::RefusedLabels;
use kim_webhook::server::{DEFAULT_MAX_REQUEST_BYTES, Limits};
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::client;
use crate::support::{self, Options, Running};

/// Upper bound for waiting on something the server must do; far above every limit the tests
/// configure, so only a missing limit runs into it.
const PATIENCE: Duration = Duration::from_secs(5);

/// The webhook's routes plus `/noop` (reads the body, answers a constant), behind `limits`.
async fn start(limits: Limits, max_body: usize, client_ca: Option<&str>) -> Running {
    support::start(Options {
        limits,
        max_body,
        client_ca: client_ca.map(str::to_owned),
        ..Options::default()
    })
    .await
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

/// A TLS connection offering `alpn`, nothing sent yet.
async fn tls(s: &Running, alpn: &[&[u8]]) -> Tls {
    let tcp = TcpStream::connect(s.https).await.unwrap();
    tokio_rustls::TlsConnector::from(client::tls_config(&s.ca_pem, alpn))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// A raw HTTP/1.1-over-TLS connection, for writing requests byte by byte.
async fn raw(s: &Running) -> Tls {
    tls(s, &[b"http/1.1"]).await
}

/// Reads until the server closes (or fails) the connection; `None` if it does not within
/// [`PATIENCE`].
async fn until_closed(io: &mut (impl tokio::io::AsyncRead + Unpin)) -> Option<String> {
    let mut out = Vec::new();
    match tokio::time::timeout(PATIENCE, io.read_to_end(&mut out)).await {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(_) => None,
    }
}

/// The status line's code of a response read from `io`, `None` if none arrives in time.
async fn status_of(io: &mut Tls) -> Option<u16> {
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(PATIENCE, io.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    String::from_utf8_lossy(&buf[..n])
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
}

async fn healthz(admin: SocketAddr) -> u16 {
    let mut s = TcpStream::connect(admin).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// An HTTP/1.1 connection to the admission port.
async fn conn(s: &Running) -> client::Conn {
    client::Conn::connect(
        s.https,
        "localhost",
        client::tls_config(&s.ca_pem, &[b"http/1.1"]),
    )
    .await
    .unwrap()
}

async fn noop(s: &Running) -> u16 {
    let mut c = conn(s).await;
    c.post("/noop", Bytes::from_static(b"{}"))
        .await
        .unwrap()
        .status
}

/// `kim_webhook_requests_refused_total{reason}` of `s`.
fn refused(s: &Running, reason: &'static str) -> u64 {
    s.state
        .metrics
        .refused
        .get_or_create(&RefusedLabels { reason })
        .get()
}

fn short(f: impl FnOnce(&mut Limits)) -> Limits {
    let mut l = Limits::default();
    f(&mut l);
    l
}

#[tokio::test]
async fn a_slow_header_sender_is_cut_off() {
    let s = start(
        short(|l| l.header_read_timeout = Duration::from_millis(200)),
        1 << 20,
        None,
    )
    .await;
    let mut slow = raw(&s).await;
    slow.write_all(b"POST /noop HTTP/1.1\r\nHost: localhost\r\nX-Slow: 1")
        .await
        .unwrap();
    slow.flush().await.unwrap();
    assert!(
        until_closed(&mut slow).await.is_some(),
        "a connection whose headers never end is closed"
    );
    assert_eq!(noop(&s).await, 200, "others are served");
}

#[tokio::test]
async fn a_slow_body_sender_gets_408() {
    let s = start(
        short(|l| l.request_timeout = Duration::from_millis(300)),
        1 << 20,
        None,
    )
    .await;
    let mut slow = raw(&s).await;
    slow.write_all(b"POST /noop HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{\"a\":")
        .await
        .unwrap();
    slow.flush().await.unwrap();
    assert_eq!(status_of(&mut slow).await, Some(408));
    assert_eq!(refused(&s, "timeout"), 1, "the 408 is counted");
    assert_eq!(
        s.state.buffered_request_bytes(),
        0,
        "its buffered bytes are returned"
    );
    assert_eq!(noop(&s).await, 200);
}

#[tokio::test]
async fn a_client_that_never_completes_the_handshake_is_cut_off() {
    let s = start(
        short(|l| l.tls_handshake_timeout = Duration::from_millis(200)),
        1 << 20,
        None,
    )
    .await;
    let mut tcp = TcpStream::connect(s.https).await.unwrap();
    assert!(
        until_closed(&mut tcp).await.is_some(),
        "a silent client is disconnected"
    );
}

/// A client that completes the TLS handshake and then sends nothing, whatever protocol ALPN
/// settled, is disconnected after the header timeout (hyper's own protocol detection would
/// wait for its first bytes without a timer, and the connection would keep its slot).
#[tokio::test]
async fn a_client_silent_after_the_handshake_is_cut_off() {
    let s = start(
        short(|l| l.header_read_timeout = Duration::from_millis(300)),
        1 << 20,
        None,
    )
    .await;
    let protocols: [&[&[u8]]; 3] = [&[b"h2"], &[b"http/1.1"], &[]];
    for alpn in protocols {
        let mut silent = tls(&s, alpn).await;
        assert!(
            until_closed(&mut silent).await.is_some(),
            "ALPN {alpn:?}: a client silent after the handshake is disconnected"
        );
    }
}

/// An HTTP/2 connection without a request in flight for the idle timeout is closed (GOAWAY); a
/// request whose body comes after several idle timeouts keeps it open and is answered.
#[tokio::test]
async fn an_idle_http2_connection_is_closed_and_a_busy_one_is_not() {
    let s = start(
        short(|l| l.idle_timeout = Duration::from_millis(300)),
        1 << 20,
        None,
    )
    .await;
    let (send, conn) = h2::client::handshake(tls(&s, &[b"h2"]).await)
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let mut send = send.ready().await.unwrap();
    let req = http::Request::post("https://localhost/noop")
        .body(())
        .unwrap();
    let (resp, mut body) = send.send_request(req, false).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    body.send_data(Bytes::from_static(b"{}"), true).unwrap();
    assert_eq!(resp.await.unwrap().status(), 200);
    assert!(
        tokio::time::timeout(PATIENCE, conn).await.is_ok(),
        "an idle HTTP/2 connection is closed"
    );
}

#[tokio::test]
async fn requests_beyond_the_limit_get_503_and_health_checks_answer() {
    let s = start(short(|l| l.max_requests_in_flight = 2), 1 << 20, None).await;
    // Two requests whose bodies never end hold both slots.
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut c = raw(&s).await;
        c.write_all(b"POST /noop HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{")
            .await
            .unwrap();
        c.flush().await.unwrap();
        holders.push(c);
    }
    let mut shed = None;
    for _ in 0..100 {
        match noop(&s).await {
            503 => {
                shed = Some(503);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    assert_eq!(shed, Some(503), "the third request is shed");
    assert!(refused(&s, "overloaded") >= 1, "the 503 is counted");
    assert_eq!(healthz(s.admin).await, 200, "health checks still answer");
    drop(holders);
    let mut served = false;
    for _ in 0..100 {
        if noop(&s).await == 200 {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served, "served again once the slots are free");
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_until_one_closes() {
    let s = start(short(|l| l.max_connections = 2), 1 << 20, None).await;
    let first = raw(&s).await;
    let _second = raw(&s).await;
    let tcp = TcpStream::connect(s.https).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(client::tls_config(&s.ca_pem, &[b"h2"]));
    let third = connector.connect(ServerName::try_from("localhost").unwrap(), tcp);
    tokio::pin!(third);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut third)
            .await
            .is_err(),
        "the third connection is not served while two are open"
    );
    drop(first);
    let third = tokio::time::timeout(PATIENCE, third).await;
    assert!(
        matches!(third, Ok(Ok(_))),
        "served once a slot is free: {third:?}"
    );
}

#[tokio::test]
async fn http2_streams_per_connection_are_capped() {
    let s = start(short(|l| l.http2_max_concurrent_streams = 8), 1 << 20, None).await;
    let (send, conn) = h2::client::handshake(tls(&s, &[b"h2"]).await)
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut send = send.ready().await.unwrap();
    let req = http::Request::post("https://localhost/noop")
        .body(())
        .unwrap();
    let (resp, mut body) = send.send_request(req, false).unwrap();
    body.send_data(Bytes::from_static(b"{}"), true).unwrap();
    assert_eq!(resp.await.unwrap().status(), 200);
    assert_eq!(
        send.current_max_send_streams(),
        8,
        "the server announces its stream limit"
    );
    // A header list over 16 KiB is refused.
    let big = "x".repeat(20 * 1024);
    let req = http::Request::post("https://localhost/noop")
        .header("x-big", big)
        .body(())
        .unwrap();
    let mut send = send.ready().await.unwrap();
    let refused = match send.send_request(req, true) {
        Err(_) => true,
        Ok((resp, _)) => match resp.await {
            Err(_) => true,
            Ok(r) => r.status() == 431,
        },
    };
    assert!(refused, "oversized header list refused");
}

#[tokio::test]
async fn the_default_body_limit_fits_the_largest_review_and_no_more() {
    let s = start(Limits::default(), DEFAULT_MAX_REQUEST_BYTES, None).await;
    // object and oldObject at etcd's 1.5 MiB each.
    let mut object = json!({"apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "Runtime",
        "metadata": {"name": "r", "namespace": "kcp-system", "annotations": {"big": ""}}});
    let bare = serde_json::to_vec(&object).unwrap().len();
    object["metadata"]["annotations"]["big"] = json!("x".repeat(1536 * 1024 - bare));
    assert_eq!(serde_json::to_vec(&object).unwrap().len(), 1536 * 1024);
    let review = runtime_review("UPDATE", &object, Some(&object));
    assert!(review.len() > 3 << 20 && review.len() <= DEFAULT_MAX_REQUEST_BYTES);
    let mut c = client::Conn::connect(
        s.https,
        "localhost",
        client::tls_config(&s.ca_pem, &[b"h2"]),
    )
    .await
    .unwrap();
    let r = c
        .post("/validate/runtime", Bytes::from(review))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "the largest review is read and answered");
    let r = c
        .post(
            "/noop",
            Bytes::from(vec![b' '; DEFAULT_MAX_REQUEST_BYTES + 1]),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 413);
    // A declared length over the limit is refused before the body is sent.
    let mut declared = raw(&s).await;
    declared
        .write_all(
            format!(
                "POST /noop HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
                DEFAULT_MAX_REQUEST_BYTES + 1
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    declared.flush().await.unwrap();
    assert_eq!(status_of(&mut declared).await, Some(413));
}

#[tokio::test]
async fn bodies_in_memory_are_bounded_by_the_budget() {
    let s = start(
        short(|l| l.max_buffered_request_bytes = 256 * 1024),
        256 * 1024,
        None,
    )
    .await;
    // One request has sent 200 KiB of its 250 KiB and stalls; it has reserved all of it.
    let mut first = raw(&s).await;
    first
        .write_all(b"POST /noop HTTP/1.1\r\nHost: localhost\r\nContent-Length: 256000\r\n\r\n")
        .await
        .unwrap();
    first.write_all(&vec![b' '; 200 * 1024]).await.unwrap();
    first.flush().await.unwrap();
    for _ in 0..250 {
        if s.state.buffered_request_bytes() >= 200 * 1024 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(s.state.buffered_request_bytes() >= 200 * 1024);
    // A second body of 100 KiB does not fit beside it: it waits, it is not read.
    let mut c = client::Conn::connect(
        s.https,
        "localhost",
        client::tls_config(&s.ca_pem, &[b"h2"]),
    )
    .await
    .unwrap();
    let second = c.post("/noop", Bytes::from(vec![b' '; 100 * 1024]));
    tokio::pin!(second);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut second)
            .await
            .is_err(),
        "the second body waits for room"
    );
    assert!(s.state.buffered_request_bytes() <= 256 * 1024);
    // Once the first completes, the second is served.
    first
        .write_all(&vec![b' '; 256000 - 200 * 1024])
        .await
        .unwrap();
    first.flush().await.unwrap();
    assert_eq!(status_of(&mut first).await, Some(200));
    let second = tokio::time::timeout(PATIENCE, second).await;
    assert!(
        matches!(&second, Ok(Ok(r)) if r.status == 200),
        "second served"
    );
    assert_eq!(s.state.buffered_request_bytes(), 0);
    // Small bodies (every usual review) need no reservation: served while a large one waits.
    let mut holder = raw(&s).await;
    holder
        .write_all(b"POST /noop HTTP/1.1\r\nHost: localhost\r\nContent-Length: 256000\r\n\r\n{")
        .await
        .unwrap();
    holder.flush().await.unwrap();
    for _ in 0..250 {
        if s.state.buffered_request_bytes() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(s.state.buffered_request_bytes(), 256000);
    let mut c2 = client::Conn::connect(
        s.https,
        "localhost",
        client::tls_config(&s.ca_pem, &[b"h2"]),
    )
    .await
    .unwrap();
    let small = c2.post("/noop", Bytes::from(vec![b' '; 32 * 1024]));
    let small = tokio::time::timeout(PATIENCE, small).await;
    assert!(
        matches!(&small, Ok(Ok(r)) if r.status == 200),
        "small body served"
    );
}

/// An AdmissionReview of a Runtime `object` (and `old`) as the apiserver sends it.
fn runtime_review(operation: &str, object: &Value, old: Option<&Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "kind": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"},
            "resource": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimes"},
            "operation": operation, "userInfo": {"username": "keb"}, "object": object, "oldObject": old}
    }))
    .unwrap()
}

#[tokio::test]
async fn large_reviews_are_typed_a_bounded_number_at_a_time() {
    let s = start(
        short(|l| l.max_concurrent_large_reviews = 1),
        DEFAULT_MAX_REQUEST_BYTES,
        None,
    )
    .await;
    // A Runtime review of `size` bytes and more (an annotation carries the bulk).
    let review = |size: usize| {
        let object = json!({"apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "Runtime",
            "metadata": {"name": "r", "namespace": "kcp-system", "annotations": {"big": "x".repeat(size)}}});
        Bytes::from(runtime_review("CREATE", &object, None))
    };
    let conn = || async {
        client::Conn::connect(
            s.https,
            "localhost",
            client::tls_config(&s.ca_pem, &[b"h2"]),
        )
        .await
        .unwrap()
    };
    // The only turn is taken: a large review is read but waits to be typed.
    let turn = s.state.large_review_turn().await.unwrap();
    let mut c = conn().await;
    let large = c.post("/validate/runtime", review(200 * 1024));
    tokio::pin!(large);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut large)
            .await
            .is_err(),
        "a large review waits for its turn"
    );
    // A usual review does not wait for one.
    let mut c2 = conn().await;
    let small = tokio::time::timeout(PATIENCE, c2.post("/validate/runtime", review(1024))).await;
    assert!(
        matches!(&small, Ok(Ok(r)) if r.status == 200),
        "a usual review is answered meanwhile"
    );
    drop(turn);
    let large = tokio::time::timeout(PATIENCE, large).await;
    assert!(
        matches!(&large, Ok(Ok(r)) if r.status == 200),
        "the large review is answered once the turn is free"
    );
}

/// A CA (PEM) and a client certificate signed by it (PEM chain, PEM key).
fn client_pki() -> (String, String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "apiserver-client-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::default();
    leaf.distinguished_name
        .push(DnType::CommonName, "kube-apiserver-webhook-client");
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

fn tls_with_client_cert(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(cfg)
}

/// Sends one request over a fresh connection; `Err` when the TLS handshake or the request
/// fails.
async fn try_post(s: &Running, tls: Arc<rustls::ClientConfig>) -> Result<u16, String> {
    let mut c = client::Conn::connect(s.https, "localhost", tls)
        .await
        .map_err(|e| e.to_string())?;
    c.post("/noop", Bytes::from_static(b"{}"))
        .await
        .map(|r| r.status)
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn with_a_client_ca_only_its_certificates_are_served() {
    let (client_ca, cert, key) = client_pki();
    let s = start(Limits::default(), 1 << 20, Some(&client_ca)).await;
    assert_eq!(
        try_post(&s, tls_with_client_cert(&s.ca_pem, &cert, &key)).await,
        Ok(200),
        "a client with a certificate of the CA is served"
    );
    let anonymous = try_post(&s, client::tls_config(&s.ca_pem, &[b"h2"])).await;
    assert!(anonymous.is_err(), "no certificate: {anonymous:?}");
    let (_, other_cert, other_key) = client_pki();
    let stranger = try_post(&s, tls_with_client_cert(&s.ca_pem, &other_cert, &other_key)).await;
    assert!(stranger.is_err(), "another CA's certificate: {stranger:?}");
    assert_eq!(healthz(s.admin).await, 200, "the admin port stays open");
}

#[tokio::test]
async fn a_bad_client_ca_bundle_is_refused_at_start() {
    for bad in [
        "",
        "not a certificate",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    ] {
        let r = kim_certs::server_config_for(
            CertResolver::new(),
            kim_certs::TlsMinVersion::default(),
            Some(bad),
        );
        assert!(r.is_err(), "{bad:?} accepted");
    }
}

#[tokio::test]
async fn a_panicking_handler_gets_500_is_counted_and_the_replica_goes_on() {
    let routes = support::routes_with_noop().route(
        "/panic",
        axum::routing::post(|| async {
            if std::hint::black_box(true) {
                panic!("a bug");
            }
            "{}"
        }),
    );
    let s = support::start(Options {
        limits: short(|l| l.max_requests_in_flight = 1),
        routes,
        ..Options::default()
    })
    .await;
    for _ in 0..2 {
        let mut c = conn(&s).await;
        let r = c.post("/panic", Bytes::from_static(b"{}")).await.unwrap();
        assert_eq!(r.status, 500);
        assert!(
            String::from_utf8_lossy(&r.body).contains("bug of kim-webhook"),
            "{:?}",
            r.body
        );
    }
    assert_eq!(refused(&s, "internal"), 2);
    // The only request slot was given back both times.
    assert_eq!(noop(&s).await, 200);
}

/// The audit record's latency runs from the request's arrival, not from when its body was
/// read: a review whose body came late (and that the apiserver may have given up on) shows
/// how long it really took.
#[tokio::test]
async fn the_audit_latency_counts_from_the_request_s_arrival() {
    let dir = tempfile::tempdir().unwrap();
    let trail = dir.path().join("audit.log");
    let s = support::start(Options {
        audit_file: Some(trail.clone()),
        ..Options::default()
    })
    .await;
    let mut slow = raw(&s).await;
    slow.write_all(
        b"POST /validate/runtime HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{",
    )
    .await
    .unwrap();
    let late = Duration::from_millis(400);
    tokio::time::sleep(late).await;
    slow.write_all(b"}").await.unwrap();
    let answer = until_closed(&mut slow).await.expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut record = None;
    for _ in 0..100 {
        let text = std::fs::read_to_string(&trail).unwrap_or_default();
        if let Some(line) = text.lines().next() {
            record = Some(serde_json::from_str::<Value>(line).unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let record = record.expect("an audit record");
    let latency = record["latency_us"].as_u64().expect("latency_us");
    assert!(
        latency >= u64::try_from(late.as_micros()).unwrap(),
        "{latency} us recorded for a body that came {late:?} after the headers: {record}"
    );
}
