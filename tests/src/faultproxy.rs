//! A fault-injecting HTTPS front proxy for the KCP/Gardener API: clients (e.g. the controller
//! under test) use its URL instead of the API server's; it forwards every request unless a
//! rule says to answer with an API-level fault: 409 Conflict, 5xx, 429 with `Retry-After`, or
//! Gardener's transient 403 "not yet ready to handle request" — the answers a real Gardener
//! gives under load (API Priority and Fairness), on concurrent writes and while its admission
//! plugins resync after a restart.
//!
//! It also plays a network partition ([`FaultProxy::partition`]): open connections are cut and
//! new ones closed unanswered until [`FaultProxy::heal`]; and it keeps a log of the requests it
//! passed on ([`FaultProxy::forwarded`]), so a test can tell when a client last wrote.
//!
//! Identity: a client certificate (signed by the environment CA) is passed on by impersonating
//! its user and group with the admin credentials; a bearer token is passed on as is.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};

use crate::testenv::{Ca, ClusterAccess, Result, TestEnvError};

/// The answer a rule gives instead of forwarding.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiFault {
    /// 409 Conflict, as for a stale resourceVersion.
    Conflict,
    /// A server error with this code (500, 502, 503, 504).
    ServerError(u16),
    /// 429 Too Many Requests with `Retry-After: <seconds>` (API Priority and Fairness).
    TooManyRequests(u32),
    /// 403 "not yet ready to handle request" (Gardener admission caches syncing).
    NotYetReady,
    /// An answer made by a callback instead of the upstream (a stand-in for one endpoint,
    /// e.g. a fast signer for `shoots/adminkubeconfig`).
    Respond(Responder),
    /// Any other Status answer, e.g. a permanent 403 from an admission plugin or 422 Invalid.
    Status {
        /// HTTP code.
        code: u16,
        /// Status reason (`Forbidden`, `Invalid`, ...).
        reason: String,
        /// Status message.
        message: String,
    },
}

/// What a [`Responder`] sees of a request.
#[derive(Debug)]
pub struct ProxyRequest {
    /// HTTP method.
    pub method: String,
    /// Request path (no query).
    pub path: String,
    /// The caller's client-certificate identity (user, groups), if it presented one.
    pub identity: Option<(String, Vec<String>)>,
    /// The request body.
    pub body: Bytes,
}

/// A [`Responder`]'s answer: status code and JSON body.
#[derive(Debug)]
pub struct ProxyResponse {
    /// HTTP status code.
    pub status: u16,
    /// JSON body.
    pub body: Vec<u8>,
}

/// A callback answering requests in place of the upstream (compared by identity).
#[derive(Clone)]
#[allow(clippy::type_complexity)]
pub struct Responder(pub Arc<dyn Fn(&ProxyRequest) -> ProxyResponse + Send + Sync>);

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Responder")
    }
}

impl PartialEq for Responder {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// When a fault applies.
#[derive(Debug, Clone)]
pub struct Rule {
    /// HTTP method (`GET`, `POST`, `PUT`, `PATCH`, `DELETE`); None = any.
    pub method: Option<String>,
    /// Substring of the request path, e.g. `/shoots/` or `/adminkubeconfig`; one with a `?`
    /// is looked for in the path with its query (`/shoots?`: lists and watches of the
    /// collection, not a GET of one Shoot).
    pub path_contains: String,
    /// The fault.
    pub fault: ApiFault,
    /// How many matching requests get it (None = all until cleared).
    pub times: Option<u32>,
}

/// One request that got a fault instead of being forwarded.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    /// HTTP method of the request.
    pub method: String,
    /// Its path (without the query).
    pub path: String,
    /// The fault it got.
    pub fault: ApiFault,
}

/// One request the proxy passed on to the upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct Forwarded {
    /// When it arrived (wall clock, to compare with the times in API objects).
    pub at: SystemTime,
    /// HTTP method.
    pub method: String,
    /// Path (without the query).
    pub path: String,
    /// The query, e.g. `watch=true&resourceVersion=...`.
    pub query: String,
}

impl Forwarded {
    /// Whether it is a watch (`watch=true` or `watch=1`).
    pub fn is_watch(&self) -> bool {
        self.query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1")
    }

    /// Whether it changes something (not GET, HEAD or OPTIONS).
    pub fn is_write(&self) -> bool {
        !matches!(self.method.as_str(), "GET" | "HEAD" | "OPTIONS")
    }
}

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    url: String,
    rules: Arc<Mutex<Vec<Rule>>>,
    hits: Arc<Mutex<Vec<Served>>>,
    forwarded: Arc<Mutex<Vec<Forwarded>>>,
    partitioned: Arc<AtomicBool>,
    cut: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Upstream {
    addr: String,
    host: ServerName<'static>,
    /// Presents the admin certificate (for impersonation).
    as_admin: Arc<rustls::ClientConfig>,
    /// No client certificate (bearer tokens pass through).
    anonymous: Arc<rustls::ClientConfig>,
}

fn other(e: impl std::fmt::Display) -> TestEnvError {
    TestEnvError::Other(format!("fault proxy: {e}"))
}

fn certs(pem: &str) -> Result<Vec<CertificateDer<'static>>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<std::result::Result<_, _>>()
        .map_err(other)
}

fn key(pem: &str) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(other)
}

impl FaultProxy {
    /// Starts a proxy in front of `upstream`, serving a certificate from `ca` (the CA that also
    /// signed the upstream's certificate and client certificates, as in the test environment).
    pub async fn start(upstream: &ClusterAccess, ca: &Ca) -> Result<FaultProxy> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in certs(&upstream.ca_pem)? {
            roots.add(c).map_err(other)?;
        }
        let client_builder = || {
            rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map(|b| b.with_root_certificates(roots.clone()))
                .map_err(other)
        };
        let as_admin = client_builder()?
            .with_client_auth_cert(
                certs(&upstream.admin.cert_pem)?,
                key(&upstream.admin.key_pem)?,
            )
            .map_err(other)?;
        let anonymous = client_builder()?.with_no_client_auth();
        let hostport = upstream.server.trim_start_matches("https://").to_string();
        let host = hostport
            .rsplit_once(':')
            .map(|(h, _)| h.to_string())
            .unwrap_or_default();
        let upstream = Arc::new(Upstream {
            addr: hostport,
            host: ServerName::try_from(host).map_err(other)?,
            as_admin: Arc::new(as_admin),
            anonymous: Arc::new(anonymous),
        });

        let serving = ca.serving_cert("kim-fault-proxy", &["127.0.0.1", "localhost"])?;
        let mut client_roots = rustls::RootCertStore::empty();
        for c in certs(&ca.pair.cert_pem)? {
            client_roots.add(c).map_err(other)?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(client_roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(other)?;
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(other)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs(&serving.cert_pem)?, key(&serving.key_pem)?)
            .map_err(other)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(other)?;
        let addr: SocketAddr = listener.local_addr().map_err(other)?;
        let rules: Arc<Mutex<Vec<Rule>>> = Arc::default();
        let hits: Arc<Mutex<Vec<Served>>> = Arc::default();
        let forwarded: Arc<Mutex<Vec<Forwarded>>> = Arc::default();
        let partitioned: Arc<AtomicBool> = Arc::default();
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let (r, h, f, p, c) = (
            rules.clone(),
            hits.clone(),
            forwarded.clone(),
            partitioned.clone(),
            cut.clone(),
        );
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                // Subscribed before the check: a partition that starts after it cuts this one.
                let mut cut_rx = c.subscribe();
                if p.load(Ordering::SeqCst) {
                    drop(tcp);
                    continue;
                }
                let (acceptor, upstream, rules, hits, forwarded, partitioned) = (
                    acceptor.clone(),
                    upstream.clone(),
                    r.clone(),
                    h.clone(),
                    f.clone(),
                    p.clone(),
                );
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let identity = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(identity);
                    let service = hyper::service::service_fn(move |req| {
                        handle(
                            req,
                            upstream.clone(),
                            rules.clone(),
                            hits.clone(),
                            forwarded.clone(),
                            partitioned.clone(),
                            identity.clone(),
                        )
                    });
                    let io = hyper_util::rt::TokioIo::new(tls);
                    let serve = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .with_upgrades();
                    // Dropping the connection closes it, with any watch streaming through it.
                    tokio::select! {
                        _ = serve => {}
                        _ = cut_rx.changed() => {}
                    }
                });
            }
        });
        Ok(FaultProxy {
            url: format!("https://{addr}"),
            rules,
            hits,
            forwarded,
            partitioned,
            cut,
            task,
        })
    }

    /// The proxy URL (`https://127.0.0.1:<port>`); the upstream's CA verifies it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `access` with the server replaced by the proxy URL (for kubeconfigs and clients).
    pub fn access_via(&self, access: &ClusterAccess) -> ClusterAccess {
        ClusterAccess {
            server: self.url.clone(),
            ..access.clone()
        }
    }

    /// Adds a rule (rules are checked in order; the first match applies).
    pub fn inject(&self, rule: Rule) {
        if let Ok(mut rules) = self.rules.lock() {
            rules.push(rule);
        }
    }

    /// Removes all rules.
    pub fn clear(&self) {
        if let Ok(mut rules) = self.rules.lock() {
            rules.clear();
        }
    }

    /// Cuts every open connection (watches included); clients reconnect at once.
    pub fn cut_connections(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// Starts a network partition: open connections are cut, new ones closed unanswered.
    pub fn partition(&self) {
        self.partitioned.store(true, Ordering::SeqCst);
        self.cut_connections();
    }

    /// Ends the partition.
    pub fn heal(&self) {
        self.partitioned.store(false, Ordering::SeqCst);
    }

    /// Every request passed on to the upstream so far, in order.
    pub fn forwarded(&self) -> Vec<Forwarded> {
        self.forwarded.lock().map(|f| f.clone()).unwrap_or_default()
    }

    /// How many requests got a fault so far.
    pub fn faults_served(&self) -> u64 {
        self.hits.lock().map(|h| h.len() as u64).unwrap_or(0)
    }

    /// Every request that got a fault so far, in order.
    pub fn served(&self) -> Vec<Served> {
        self.hits.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// How many requests with `method` and a path containing `path_contains` got `fault`.
    pub fn served_count(&self, method: &str, path_contains: &str, fault: &ApiFault) -> usize {
        self.served()
            .iter()
            .filter(|s| {
                s.method.eq_ignore_ascii_case(method)
                    && s.path.contains(path_contains)
                    && &s.fault == fault
            })
            .count()
    }
}

/// (user, groups) from a client certificate, or None for the admin (forwarded as is).
fn identity(cert: &CertificateDer<'_>) -> Option<(String, Vec<String>)> {
    let (_, c) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let user = c
        .subject()
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups: Vec<String> = c
        .subject()
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some((user, groups))
}

type Body = BoxBody<Bytes, hyper::Error>;

fn status_response(fault: &ApiFault, path: &str) -> Response<Body> {
    let (code, reason, message) = match fault {
        ApiFault::Conflict => (409, "Conflict", "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again".to_string()),
        ApiFault::ServerError(c) => (*c, if *c == 503 { "ServiceUnavailable" } else { "InternalError" }, format!("Internal error occurred: injected fault for {path}")),
        ApiFault::TooManyRequests(_) => (429, "TooManyRequests", "The server has received too many requests and has asked us to try again later".to_string()),
        ApiFault::NotYetReady => (403, "Forbidden", format!("{path} is forbidden: not yet ready to handle request")),
        // Answered by its callback in `handle`; never reaches here.
        ApiFault::Respond(_) => (500, "InternalError", format!("responder for {path} not run")),
        ApiFault::Status {
            code,
            reason,
            message,
        } => (*code, reason.as_str(), message.clone()),
    };
    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    let mut resp = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    if let ApiFault::TooManyRequests(secs) = fault
        && let Ok(v) = http::HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(http::header::RETRY_AFTER, v);
    }
    resp
}

async fn handle(
    mut req: Request<Incoming>,
    upstream: Arc<Upstream>,
    rules: Arc<Mutex<Vec<Rule>>>,
    hits: Arc<Mutex<Vec<Served>>>,
    forwarded: Arc<Mutex<Vec<Forwarded>>>,
    partitioned: Arc<AtomicBool>,
    identity: Option<(String, Vec<String>)>,
) -> std::result::Result<Response<Body>, hyper::Error> {
    if partitioned.load(Ordering::SeqCst) {
        // Never answered: the partition cuts this connection.
        std::future::pending::<()>().await;
    }
    let path = req.uri().path().to_string();
    let path_and_query = format!("{path}?{}", req.uri().query().unwrap_or_default());
    let fault = rules.lock().ok().and_then(|mut rules| {
        let i = rules.iter().position(|r| {
            let target = if r.path_contains.contains('?') {
                &path_and_query
            } else {
                &path
            };
            target.contains(&r.path_contains)
                && r.method
                    .as_deref()
                    .is_none_or(|m| m.eq_ignore_ascii_case(req.method().as_str()))
        })?;
        let fault = rules[i].fault.clone();
        if let Some(t) = rules[i].times.as_mut() {
            *t = t.saturating_sub(1);
            if *t == 0 {
                rules.remove(i);
            }
        }
        Some(fault)
    });
    if let Some(f) = fault {
        if let Ok(mut h) = hits.lock() {
            h.push(Served {
                method: req.method().as_str().to_owned(),
                path: path.clone(),
                fault: f.clone(),
            });
        }
        if let ApiFault::Respond(responder) = &f {
            let method = req.method().to_string();
            let body = req.into_body().collect().await?.to_bytes();
            let out = (responder.0)(&ProxyRequest {
                method,
                path,
                identity,
                body,
            });
            let mut resp = Response::new(
                Full::new(Bytes::from(out.body))
                    .map_err(|never| match never {})
                    .boxed(),
            );
            *resp.status_mut() =
                StatusCode::from_u16(out.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            return Ok(resp);
        }
        return Ok(status_response(&f, &path));
    }
    if let Ok(mut f) = forwarded.lock() {
        f.push(Forwarded {
            at: SystemTime::now(),
            method: req.method().as_str().to_owned(),
            path: path.clone(),
            query: req.uri().query().unwrap_or_default().to_owned(),
        });
    }
    // Pass the caller's identity on.
    let tls = if req.headers().contains_key(http::header::AUTHORIZATION) {
        upstream.anonymous.clone()
    } else {
        if let Some((user, groups)) =
            identity.filter(|(_, g)| !g.iter().any(|g| g == "system:masters"))
        {
            let h = req.headers_mut();
            if let Ok(v) = http::HeaderValue::from_str(&user) {
                h.insert("Impersonate-User", v);
            }
            for g in groups {
                if let Ok(v) = http::HeaderValue::from_str(&g) {
                    h.append("Impersonate-Group", v);
                }
            }
        }
        upstream.as_admin.clone()
    };
    match forward(req, &upstream, tls).await {
        Ok(resp) => Ok(resp),
        Err(e) => Ok(status_response(
            &ApiFault::ServerError(502),
            &format!("{path} (proxy: {e})"),
        )),
    }
}

async fn forward(
    req: Request<Incoming>,
    upstream: &Upstream,
    tls: Arc<rustls::ClientConfig>,
) -> std::result::Result<Response<Body>, String> {
    let tcp = TcpStream::connect(&upstream.addr)
        .await
        .map_err(|e| e.to_string())?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(upstream.host.clone(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    // The connection lives until the (possibly streaming) response body is done.
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    Ok(resp.map(BodyExt::boxed))
}
