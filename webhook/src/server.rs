//! The HTTPS admission server (axum over rustls, HTTP/1.1 and HTTP/2 by ALPN) and the
//! plain-HTTP admin server (`/healthz`, `/readyz`, `/metrics`).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use http::{HeaderValue, StatusCode, header};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use kim_certs::CertResolver;

use crate::admission::{AdmissionOutcome, mutate, validate};
use crate::audit::AuditSink;
use crate::defaulter::Defaulter;
use crate::metrics::{AdmissionLabels, EndpointLabels, Metrics};
use crate::request::{AdmissionContext, Mode, Object};
use crate::validator::Validator;

/// Everything a request handler needs.
pub struct AppState {
    /// Settings of the admitted types.
    pub ctx: AdmissionContext,
    /// The audit trail.
    pub audit: AuditSink,
    /// Metrics.
    pub metrics: Metrics,
    /// The registry the metrics live in (encoded by `/metrics`).
    pub registry: Registry,
    /// The serving certificate.
    pub resolver: Arc<CertResolver>,
    /// Whether the configuration was loaded and checked.
    pub config_valid: AtomicBool,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Set on SIGTERM: `/readyz` fails so that endpoints stop sending reviews here while the
    /// server still answers the ones already on their way.
    pub draining: AtomicBool,
}

impl AppState {
    /// State with fresh metrics.
    pub fn new(
        ctx: AdmissionContext,
        audit: AuditSink,
        resolver: Arc<CertResolver>,
        max_body_bytes: usize,
    ) -> Self {
        let mut registry = Registry::default();
        let metrics = Metrics::new(&mut registry);
        Self {
            ctx,
            audit,
            metrics,
            registry,
            resolver,
            config_valid: AtomicBool::new(true),
            max_body_bytes,
            draining: AtomicBool::new(false),
        }
    }

    /// Ready: a certificate is loaded and the configuration is valid.
    pub fn ready(&self) -> Result<(), &'static str> {
        if self.draining.load(Ordering::Relaxed) {
            return Err("shutting down");
        }
        if !self.resolver.is_loaded() {
            return Err("no serving certificate loaded yet");
        }
        if !self.config_valid.load(Ordering::Relaxed) {
            return Err("the KIM configuration is not valid");
        }
        Ok(())
    }
}

fn json(body: Vec<u8>) -> Response {
    let mut r = Response::new(Body::from(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn rejected(state: &AppState, rejection: BytesRejection) -> Response {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        state.metrics.rejected_too_large.inc();
        let msg = format!(
            "request body exceeds the limit of {} bytes (--max-request-bytes); the AdmissionReview was not read\n",
            state.max_body_bytes
        );
        return (StatusCode::PAYLOAD_TOO_LARGE, msg).into_response();
    }
    (
        rejection.status(),
        format!(
            "could not read the request body: {}\n",
            rejection.body_text()
        ),
    )
        .into_response()
}

/// The route of the mutating webhook of `T` (metrics label `kind`).
pub fn mutating_route<T>(kind: &'static str) -> MethodRouter<Arc<AppState>>
where
    T: Object + PartialEq,
    AdmissionContext: Defaulter<T>,
{
    admission_route(Mode::Mutate, kind, mutate::<T>)
}

/// The route of the validating webhook of `T` (metrics label `kind`).
pub fn validating_route<T>(kind: &'static str) -> MethodRouter<Arc<AppState>>
where
    T: Object,
    AdmissionContext: Validator<T>,
{
    admission_route(Mode::Validate, kind, validate::<T>)
}

/// A route answering AdmissionReviews with `admit`, counted and audited.
fn admission_route(
    mode: Mode,
    kind: &'static str,
    admit: fn(&[u8], &AdmissionContext, SystemTime) -> AdmissionOutcome,
) -> MethodRouter<Arc<AppState>> {
    post(
        move |State(state): State<Arc<AppState>>,
              peer: Option<axum::Extension<Peer>>,
              body: Result<Bytes, BytesRejection>| async move {
            let body = match body {
                Ok(b) => b,
                Err(r) => return rejected(&state, r),
            };
            let started = std::time::Instant::now();
            // Inline on the executor: the work is tens of microseconds, less than a hop to the
            // blocking pool would cost.
            let mut a = admit(&body, &state.ctx, SystemTime::now());
            if let Some(axum::Extension(peer)) = peer {
                a.audit.peer = peer.addr.to_string();
                a.audit.client_certificate = peer.client_certificate;
            }
            let m = &state.metrics;
            m.admissions
                .get_or_create(&AdmissionLabels {
                    webhook: mode.as_str(),
                    kind,
                    // Empty when the request could not be read.
                    operation: match a.audit.operation {
                        "" => "unknown",
                        op => op,
                    },
                    allowed: if a.audit.allowed { "true" } else { "false" },
                })
                .inc();
            m.latency
                .get_or_create(&EndpointLabels {
                    webhook: mode.as_str(),
                    kind,
                })
                .observe(started.elapsed().as_secs_f64());
            state.audit.emit(&a.audit);
            let mut response = json(a.body);
            // While draining, an HTTP/1.1 connection is closed after its answer: the apiserver
            // picks an endpoint only when it dials, and would keep sending reviews over its open
            // keep-alive connections until the drain closes them under a request on its way
            // (`write: broken pipe`, a failed admission). Dialling again reaches a replica that
            // is still in the endpoints. (HTTP/2 drops the header; its drain sends GOAWAY, which
            // clients answer by retrying the unprocessed requests on a new connection.)
            if state.draining.load(Ordering::Relaxed) {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            response
        },
    )
}

/// The admission router: `routes` plus the body limit.
pub fn admission_router(state: Arc<AppState>, routes: Router<Arc<AppState>>) -> Router {
    let limit = state.max_body_bytes;
    routes.layer(DefaultBodyLimit::max(limit)).with_state(state)
}

/// The admin router: liveness, readiness, metrics.
pub fn admin_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(|State(s): State<Arc<AppState>>| async move {
                match s.ready() {
                    Ok(()) => {
                        s.metrics.ready.set(1);
                        (StatusCode::OK, "ok\n".to_string())
                    }
                    Err(why) => {
                        s.metrics.ready.set(0);
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("not ready: {why}\n"),
                        )
                    }
                }
            }),
        )
        .route(
            "/metrics",
            get(|State(s): State<Arc<AppState>>| async move {
                s.metrics
                    .audit_dropped
                    .set(i64::try_from(s.audit.dropped()).unwrap_or(i64::MAX));
                s.metrics
                    .audit_log_dropped
                    .set(i64::try_from(crate::audit::log_dropped()).unwrap_or(i64::MAX));
                kim_process::http::metrics_response(&s.registry)
            }),
        )
        .with_state(state)
}

/// Resolves `delay` after `signal`: from the signal on, `state` reports not ready (so the
/// endpoints drop this replica) while the servers keep answering; then they may stop. Without the
/// delay, reviews routed here before the endpoints update would fail (with `failurePolicy: Fail`,
/// a refused Runtime write).
pub async fn drain_after(state: Arc<AppState>, signal: impl Future<Output = ()>, delay: Duration) {
    signal.await;
    state.draining.store(true, Ordering::Relaxed);
    tracing::info!(delay = ?delay, "shutting down: not ready, still serving until the delay ends");
    tokio::time::sleep(delay).await;
}

/// Serves `app` over plain HTTP until `shutdown` resolves.
pub use kim_process::http::serve as serve_plain;

/// Who is at the other end of a connection, added to each of its requests for the audit record.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    /// The TCP peer address.
    pub addr: SocketAddr,
    /// Whether it presented a TLS client certificate.
    pub client_certificate: bool,
}

/// Serves `app` over TLS on `listener` until `shutdown` resolves, then drains open
/// connections for up to `grace`. TLS 1.2 and 1.3; HTTP/1.1 and HTTP/2 chosen by ALPN.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let builder = builder.clone();
        let app = app.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            // The handshake runs in the connection's task so a slow client never blocks accept.
            let tls =
                match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
            let peer_info = Peer {
                addr: peer,
                client_certificate: tls.get_ref().1.peer_certificates().is_some(),
            };
            // Added to each request's extensions (cheaper than a router layer per connection).
            let service = TowerToHyperService::new(tower::ServiceExt::map_request(
                app,
                move |mut req: http::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(peer_info);
                    req
                },
            ));
            let conn = builder
                .serve_connection(TokioIo::new(tls), service)
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "connections still open after the shutdown grace period; closing them"
        );
    }
}
