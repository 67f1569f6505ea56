//! The HTTPS admission server (axum over rustls, HTTP/1.1 and HTTP/2 by ALPN) and the
//! plain-HTTP admin server (`/healthz`, `/readyz`, `/metrics`).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::error_handling::HandleErrorLayer;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use http::{HeaderValue, StatusCode, header};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use kim_certs::CertResolver;

use crate::admission::{AdmissionOutcome, mutate, validate};
use crate::audit::AuditSink;
use crate::defaulter::Defaulter;
use crate::metrics::{AdmissionLabels, EndpointLabels, Metrics};
use crate::request::{AdmissionContext, Mode, Object};
use crate::validator::Validator;

/// The largest AdmissionReview the apiserver sends, and the default of `--max-request-bytes`:
/// a review carries `object` and `oldObject`, each at most etcd's request limit of 1.5 MiB
/// (an object written to etcd in one request; a larger new object is refused by etcd after
/// admission anyway), plus the envelope (uid, kind, resource, user info with groups and extra
/// fields), for which 512 KiB is ample.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 3 * 1024 * 1024 + 512 * 1024;

/// What the admission listener lets a client hold (flags of `serve`; the defaults are the
/// flags' defaults). They keep a replica within its memory limit (128 MiB in `deploy/`) and
/// answering while clients send slowly, send much or open many streams.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Time for a TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// Time for the headers of an HTTP/1.1 request (slow-header senders are cut off).
    pub header_read_timeout: Duration,
    /// Time for a whole request after its headers: waiting for buffer space, reading the
    /// body, answering. Longer is of no use once the apiserver has given up (the configurations
    /// in `deploy/` wait at most 2 s; Kubernetes allows at most 30 s).
    pub request_timeout: Duration,
    /// Open connections; beyond, new connections wait in the listen backlog.
    pub max_connections: usize,
    /// Admission requests in flight (reading the body or answering); beyond, a request is
    /// answered 503 at once.
    pub max_requests_in_flight: usize,
    /// Request body bytes that bodies larger than 64 KiB may hold in memory together; such a
    /// body reserves its size before it is read and waits (its connection not read) until it
    /// fits.
    pub max_buffered_request_bytes: usize,
    /// Concurrent streams per HTTP/2 connection.
    pub http2_max_concurrent_streams: u32,
    /// How long a connection may go without a request in flight before it is closed (an
    /// HTTP/2 connection gets GOAWAY; HTTP/1.1 keep-alive waits are cut by
    /// `header_read_timeout` already). Its first request must come within
    /// `header_read_timeout` of the handshake.
    pub idle_timeout: Duration,
    /// Reviews with a body larger than 64 KiB decoded and checked at the same time; the others
    /// wait with their bodies read (and reserved in the buffer budget). Typing a review takes
    /// several times its text in memory; this bounds how much is being typed whatever the
    /// number of executor threads (the allocator's cached free memory still grows with them,
    /// see `docs/webhook.md`, Limits).
    pub max_concurrent_large_reviews: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            tls_handshake_timeout: Duration::from_secs(5),
            header_read_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            max_connections: 256,
            max_requests_in_flight: 1024,
            max_buffered_request_bytes: 16 * 1024 * 1024,
            http2_max_concurrent_streams: 32,
            idle_timeout: Duration::from_secs(60),
            max_concurrent_large_reviews: 2,
        }
    }
}

/// HTTP/2 flow-control windows. hyper's defaults (1 MiB per stream and per connection) let
/// every connection park a MiB the server has not read yet; with these, `max_connections`
/// connections park at most 32 MiB. A 3.5 MiB review still arrives in a few dozen round trips.
const HTTP2_STREAM_WINDOW: u32 = 64 * 1024;
const HTTP2_CONNECTION_WINDOW: u32 = 128 * 1024;

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
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Set on SIGTERM: `/readyz` fails so that endpoints stop sending reviews here while the
    /// server still answers the ones already on their way.
    pub draining: AtomicBool,
    /// Limits of the admission listener.
    pub limits: Limits,
    /// Request body bytes that may still be buffered (`limits.max_buffered_request_bytes`).
    body_budget: Arc<Semaphore>,
    /// Large reviews that may still start being typed (`limits.max_concurrent_large_reviews`).
    large_reviews: Semaphore,
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
        let limits = Limits::default();
        Self {
            ctx,
            audit,
            metrics,
            registry,
            resolver,
            max_body_bytes,
            draining: AtomicBool::new(false),
            body_budget: budget(&limits, max_body_bytes),
            large_reviews: Semaphore::new(limits.max_concurrent_large_reviews.max(1)),
            limits,
        }
    }

    /// The same state with other listener limits.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.body_budget = budget(&limits, self.max_body_bytes);
        self.large_reviews = Semaphore::new(limits.max_concurrent_large_reviews.max(1));
        self.limits = limits;
        self
    }

    /// Request body bytes reserved right now by bodies larger than 64 KiB (at most
    /// `limits.max_buffered_request_bytes`).
    pub fn buffered_request_bytes(&self) -> usize {
        self.budget_size()
            .saturating_sub(self.body_budget.available_permits())
    }

    /// Waits for and takes one turn to type a large review, as a request with a body above
    /// 64 KiB does before it is decoded; `None` only if the turns are closed. While it is held,
    /// such requests wait (the tests show the bound so).
    pub async fn large_review_turn(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.large_reviews.acquire().await.ok()
    }

    /// Permits of the buffer budget: never below one largest body, so that every body can
    /// be read.
    fn budget_size(&self) -> usize {
        budget_size(&self.limits, self.max_body_bytes)
    }

    /// Ready: a certificate is loaded and has not expired and, when the webhook watches the
    /// Gardener CloudProfiles, they are cached. (A configuration that does not load stops the
    /// program before it serves.)
    pub fn ready(&self) -> Result<(), &'static str> {
        if self.draining.load(Ordering::Relaxed) {
            return Err("shutting down");
        }
        match self.resolver.not_after() {
            None => return Err("no serving certificate loaded yet"),
            Some(t) if t <= SystemTime::now() => {
                return Err("the serving certificate has expired");
            }
            Some(_) => {}
        }
        if let Some(profiles) = &self.ctx.cloud_profiles {
            profiles.ready()?;
        }
        Ok(())
    }
}

fn budget_size(limits: &Limits, max_body_bytes: usize) -> usize {
    limits
        .max_buffered_request_bytes
        .max(max_body_bytes)
        .min(Semaphore::MAX_PERMITS)
        .min(u32::MAX as usize)
}

fn budget(limits: &Limits, max_body_bytes: usize) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(budget_size(limits, max_body_bytes)))
}

fn json(body: Vec<u8>) -> Response {
    let mut r = Response::new(Body::from(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn too_large(state: &AppState) -> Response {
    state.metrics.refuse("too_large");
    let msg = format!(
        "request body exceeds the limit of {} bytes (--max-request-bytes); the AdmissionReview was not read\n",
        state.max_body_bytes
    );
    (StatusCode::PAYLOAD_TOO_LARGE, msg).into_response()
}

fn rejected(state: &AppState, rejection: BytesRejection) -> Response {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return too_large(state);
    }
    state.metrics.refuse("unreadable");
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
              arrived: Option<axum::Extension<Arrived>>,
              body: Result<Bytes, BytesRejection>| async move {
            let body = match body {
                Ok(b) => b,
                Err(r) => return rejected(&state, r),
            };
            // A large review waits for its turn before it is typed: typing takes several
            // times the body in memory, and the turns bound how many are typed at once
            // whatever the executor's thread count. A usual review never waits.
            let _turn = if body.len() > UNRESERVED_BODY_BYTES {
                match state.large_reviews.acquire().await {
                    Ok(turn) => Some(turn),
                    Err(_) => return internal(&state, "the request budget is closed"),
                }
            } else {
                None
            };
            let started = std::time::Instant::now();
            // Inline on the executor: the work is tens of microseconds, less than a hop to the
            // blocking pool would cost.
            let mut a = admit(&body, &state.ctx, SystemTime::now());
            if let Some(axum::Extension(peer)) = peer {
                a.audit.peer = peer.addr.to_string();
                a.audit.client_certificate = peer.client_certificate;
            }
            if let Some(axum::Extension(Arrived(at))) = arrived {
                a.audit.latency_us = u64::try_from(at.elapsed().as_micros()).unwrap_or(u64::MAX);
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
            if !a.audit.allowed {
                m.count_denial(kind, a.audit.violations.iter().map(|v| v.field.as_str()));
            }
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

/// The admission router: `routes` behind the listener's request limits. Outermost first: a
/// request beyond `max_requests_in_flight` is answered 503 at once (load shedding); one not
/// done within `request_timeout` is answered 408; the body is read under the body limit and
/// the buffer budget ([`buffer_body`]), then handed to the route; a panic is answered 500.
/// Each of these answers is counted in `kim_webhook_requests_refused_total`.
pub fn admission_router(state: Arc<AppState>, routes: Router<Arc<AppState>>) -> Router {
    let timeout = state.limits.request_timeout;
    let on_limit = state.clone();
    let on_panic = state.clone();
    routes
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            move |panic: Box<dyn std::any::Any + Send>| panicked(&on_panic, panic.as_ref()),
        ))
        .layer(DefaultBodyLimit::max(state.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            buffer_body,
        ))
        .layer(
            tower::ServiceBuilder::new()
                .layer(HandleErrorLayer::new(move |e: tower::BoxError| {
                    let state = on_limit.clone();
                    async move { overloaded(&state, &e, timeout) }
                }))
                .load_shed()
                .layer(tower::limit::GlobalConcurrencyLimitLayer::new(
                    state.limits.max_requests_in_flight,
                ))
                .timeout(state.limits.request_timeout),
        )
        .with_state(state)
}

/// The answer when the limits stopped a request.
fn overloaded(state: &AppState, e: &tower::BoxError, timeout: Duration) -> Response {
    if e.is::<tower::timeout::error::Elapsed>() {
        state.metrics.refuse("timeout");
        return (
            StatusCode::REQUEST_TIMEOUT,
            format!("the request was not complete within {timeout:?} (--request-timeout)\n"),
        )
            .into_response();
    }
    if e.is::<tower::load_shed::error::Overloaded>() {
        state.metrics.refuse("overloaded");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many admission requests in flight (--max-requests-in-flight); retry\n",
        )
            .into_response();
    }
    internal(state, &format!("request failed: {e}"))
}

/// The answer when something that cannot happen in a sound process did (a budget closed,
/// an unknown error of the limits): 500, counted as `internal` and logged.
fn internal(state: &AppState, what: &str) -> Response {
    state.metrics.refuse("internal");
    tracing::error!(error = %what, "an admission request failed inside kim-webhook; answered 500 without a decision");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "the webhook failed while answering; this is a bug of kim-webhook, see its log\n",
    )
        .into_response()
}

/// The answer to a request whose handler panicked ([`internal`]); the process goes on serving. The panic's text is logged with credential-like runs removed (it may quote a
/// value of the request).
fn panicked(state: &AppState, panic: &(dyn std::any::Any + Send)) -> Response {
    let text = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    internal(
        state,
        &format!("panicked: {}", kim_shared::redact::credentials(text)),
    )
}

/// Bodies up to this size are read without a reservation: every usual review is far smaller,
/// and what they can hold at once is bounded by the connections and HTTP/2 windows.
const UNRESERVED_BODY_BYTES: usize = 64 * 1024;

/// Reads the body into memory and refuses it once it exceeds the body limit. A larger body
/// first reserves its size (the declared length, or the body limit when none is declared) from
/// the buffer budget, in one step, waiting until it fits; its connection is not read
/// meanwhile. So many large bodies at once cost at most the budget, small reviews never wait
/// behind them, and since a request waits only while it holds no reservation, two requests
/// never wait for each other.
async fn buffer_body(
    State(state): State<Arc<AppState>>,
    req: axum::extract::Request,
    next: Next,
) -> Response {
    let (parts, mut body) = req.into_parts();
    let limit = state.max_body_bytes;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return too_large(&state);
    }
    let mut reservation: Option<OwnedSemaphorePermit> = None;
    if let Some(n) = declared.filter(|n| *n > UNRESERVED_BODY_BYTES) {
        match reserve(&state, n).await {
            Some(r) => reservation = Some(r),
            None => return internal(&state, "the request budget is closed"),
        }
    }
    // One allocation of the declared size (reserved above when large), each chunk copied in
    // and dropped at once: a body never sits in memory twice.
    let mut buf = Vec::with_capacity(declared.unwrap_or(0));
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let data = match frame {
            Ok(f) => match f.into_data() {
                Ok(d) => d,
                // Trailers: nothing to keep.
                Err(_) => continue,
            },
            Err(e) => {
                state.metrics.refuse("unreadable");
                return (
                    StatusCode::BAD_REQUEST,
                    format!("could not read the request body: {e}\n"),
                )
                    .into_response();
            }
        };
        len = len.saturating_add(data.len());
        if len > limit || declared.is_some_and(|n| len > n) {
            return too_large(&state);
        }
        if reservation.is_none() && len > UNRESERVED_BODY_BYTES {
            // No length declared (or a wrong one): reserve for the largest body.
            match reserve(&state, limit).await {
                Some(r) => reservation = Some(r),
                None => return internal(&state, "the request budget is closed"),
            }
        }
        buf.extend_from_slice(&data);
    }
    let response = next
        .run(axum::extract::Request::from_parts(
            parts,
            Body::from(Bytes::from(buf)),
        ))
        .await;
    drop(reservation);
    response
}

/// `bytes` of the buffer budget, once they are free; `None` only if the budget is closed.
async fn reserve(state: &AppState, bytes: usize) -> Option<OwnedSemaphorePermit> {
    // Never more than the budget holds (it is at least one largest body).
    let n = u32::try_from(bytes.min(state.budget_size())).unwrap_or(u32::MAX);
    state.body_budget.clone().acquire_many_owned(n).await.ok()
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
            get(
                |State(s): State<Arc<AppState>>, headers: axum::http::HeaderMap| async move {
                    s.metrics.catch_up_audit(
                        s.audit.dropped(),
                        crate::audit::log_dropped(),
                        crate::audit::write_errors(),
                    );
                    if let Some(profiles) = &s.ctx.cloud_profiles {
                        s.metrics.cloud_profiles_age.set(profiles.age_seconds());
                    }
                    // Also here, not only on /readyz: a replica nobody probes yet (or a
                    // Prometheus scraping before the kubelet's first probe) must not read as
                    // not ready while it is.
                    s.metrics.ready.set(i64::from(s.ready().is_ok()));
                    kim_process::http::metrics_response(&s.registry, headers.get(header::ACCEPT))
                },
            ),
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

/// When a request's headers were read, added to each request: the audit record's latency
/// counts from then, so the time its body took to come and its wait for a turn are in it.
#[derive(Debug, Clone, Copy)]
pub struct Arrived(pub std::time::Instant);

/// Who is at the other end of a connection, added to each of its requests for the audit record.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    /// The TCP peer address.
    pub addr: SocketAddr,
    /// Whether it presented a TLS client certificate.
    pub client_certificate: bool,
}

/// Serves `app` over TLS on `listener` until `shutdown` resolves, then drains open
/// connections for up to `grace`. TLS 1.2 and 1.3; HTTP/1.1 and HTTP/2 chosen by ALPN. With
/// the default [`Limits`].
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) {
    serve_tls_with(listener, tls, app, shutdown, grace, Limits::default()).await;
}

/// The HTTP/1.1 and HTTP/2 settings of the admission listener.
fn http_builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // The read buffer of a connection (hyper's default grows to about 400 KiB each);
        // request heads are far smaller, bodies stream through it.
        .max_buf_size(64 * 1024);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_concurrent_streams)
        // hyper's defaults, stated because they bound what a client can make us hold: header
        // list size, streams reset by the client before we saw them, streams we had to reset.
        .max_header_list_size(16 * 1024)
        .max_pending_accept_reset_streams(20)
        .max_local_error_reset_streams(1024)
        .initial_stream_window_size(HTTP2_STREAM_WINDOW)
        .initial_connection_window_size(HTTP2_CONNECTION_WINDOW)
        // Dead peers are noticed and their connection slot freed.
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10));
    builder
}

/// What one connection has going on, for closing it when idle.
#[derive(Default)]
struct Activity {
    /// (requests in flight, when the last one ended or the connection began, any served).
    state: std::sync::Mutex<(usize, Option<tokio::time::Instant>, bool)>,
    changed: tokio::sync::Notify,
}

impl Activity {
    fn started() -> Arc<Self> {
        let activity = Arc::new(Self::default());
        activity.update(|s| s.1 = Some(tokio::time::Instant::now()));
        activity
    }

    fn update(&self, f: impl FnOnce(&mut (usize, Option<tokio::time::Instant>, bool))) {
        {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut state);
        }
        self.changed.notify_waiters();
    }

    /// A request began; it ends when the guard goes.
    fn begin(self: &Arc<Self>) -> ActivityGuard {
        self.update(|s| {
            s.0 += 1;
            s.2 = true;
        });
        ActivityGuard(self.clone())
    }

    /// Resolves once no request has been in flight for `idle` (`first` before any request),
    /// with whether any was served.
    async fn idle(&self, first: Duration, idle: Duration) -> bool {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (in_flight, since, served) = *self.state.lock().unwrap_or_else(|p| p.into_inner());
            let Some(since) = since.filter(|_| in_flight == 0) else {
                changed.await;
                continue;
            };
            let limit = if served { idle } else { first };
            tokio::select! {
                () = tokio::time::sleep_until(since + limit) => return served,
                () = changed => {}
            }
        }
    }
}

struct ActivityGuard(Arc<Activity>);

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        self.0.update(|s| {
            s.0 = s.0.saturating_sub(1);
            s.1 = Some(tokio::time::Instant::now());
        });
    }
}

/// The least time a connection closed for being idle has to finish what slipped in before its
/// GOAWAY (at least the request timeout).
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// [`serve_tls`] with `limits` on connections, handshakes, headers, idle time and HTTP/2
/// streams (the per-request limits are [`admission_router`]'s).
pub async fn serve_tls_with(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
    limits: Limits,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
    let builder = http_builder(&limits);
    let max_connections = limits.max_connections.max(1);
    let connections = Arc::new(Semaphore::new(max_connections));
    let handshake_timeout = limits.tls_handshake_timeout;
    let (first_request, idle_timeout) = (limits.header_read_timeout, limits.idle_timeout);
    // A request that slipped in before the GOAWAY may take as long as any other.
    let close_grace = CLOSE_GRACE.max(limits.request_timeout);
    tokio::pin!(shutdown);
    loop {
        // A free connection slot first: at the cap, new connections wait in the backlog.
        let slot = tokio::select! {
            _ = &mut shutdown => break,
            slot = connections.clone().acquire_owned() => match slot {
                Ok(s) => s,
                Err(_) => break,
            },
        };
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
        let mut stopping = stopping.clone();
        tokio::spawn(async move {
            let _slot = slot;
            // The handshake runs in the connection's task so a slow client never blocks accept.
            let tls = match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await {
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
            // The protocol ALPN settled: hyper's own detection reads the first bytes without
            // a timer, so a client silent after the handshake would keep its slot.
            let builder = if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                builder.http2_only()
            } else {
                builder.http1_only()
            };
            let activity = Activity::started();
            let tracked = activity.clone();
            // Added to each request's extensions (cheaper than a router layer per connection).
            let service = tower::ServiceExt::map_request(
                app,
                move |mut req: http::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(peer_info);
                    req.extensions_mut()
                        .insert(Arrived(std::time::Instant::now()));
                    req
                },
            );
            let service =
                TowerToHyperService::new(tower::ServiceExt::map_future(service, move |answer| {
                    let guard = tracked.begin();
                    async move {
                        let answered = answer.await;
                        drop(guard);
                        answered
                    }
                }));
            let conn = builder.serve_connection(TokioIo::new(tls), service);
            tokio::pin!(conn);
            // The server's stop is bounded by its grace period as a whole.
            let (why, wait) = tokio::select! {
                served = conn.as_mut() => {
                    if let Err(e) = served {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    return;
                }
                _ = stopping.wait_for(|stop| *stop) => ("the server stops", grace),
                served = activity.idle(first_request, idle_timeout) => {
                    if !served {
                        // Nothing asked, nothing to finish: an HTTP/2 client that never sent
                        // its preface would not take a GOAWAY either.
                        tracing::debug!(%peer, "no request after the handshake; closed");
                        return;
                    }
                    ("idle", close_grace)
                }
            };
            tracing::debug!(%peer, why, "closing the connection");
            conn.as_mut().graceful_shutdown();
            if tokio::time::timeout(wait, conn).await.is_err() {
                tracing::debug!(%peer, "connection did not close in time; dropped");
            }
        });
    }
    drop(listener);
    stopping_tx.send_replace(true);
    // Every connection task holds a slot until it ends.
    let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(grace, connections.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "connections still open after the shutdown grace period; closing them"
        );
    }
}
