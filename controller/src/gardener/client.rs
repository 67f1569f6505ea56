//! Builds the Gardener client: strict TLS, a request timeout, a token-bucket rate limit
//! (`--gardener-ratelimiter-qps/-burst`), the verb allow-list and request counting by code,
//! as one tower layer on kube's default stack.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::{Request, Response};
use kube::client::{Body, ClientBuilder};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tower::{BoxError, Layer, Service, ServiceExt};

use super::allow::AllowList;
use crate::metrics::{CountLayer, Metrics, RequestLabels};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// The Gardener client could not be built; the message names the flag or file at fault.
#[derive(Debug, thiserror::Error)]
pub enum GardenerClientError {
    /// The kubeconfig file is missing or not a kubeconfig.
    #[error("--gardener-kubeconfig-path {path}: cannot read a kubeconfig ({source})")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig turns off certificate checks or is not https.
    #[error(
        "--gardener-kubeconfig-path {path}: {what}; the Gardener connection must be https with \
         certificate verification"
    )]
    Insecure {
        /// The file.
        path: String,
        /// What is insecure.
        what: &'static str,
    },
    /// kube could not build a client from the kubeconfig.
    #[error("--gardener-kubeconfig-path {path}: {source}")]
    Build {
        /// The file.
        path: String,
        /// Why.
        source: kube::Error,
    },
    /// QPS or burst is zero.
    #[error("--gardener-ratelimiter-qps and --gardener-ratelimiter-burst must be at least 1")]
    RateLimit,
}

/// A request that timed out before Gardener answered.
#[derive(Debug, thiserror::Error)]
#[error(
    "Gardener did not answer within {0:?} (--gardener-request-timeout for reads, \
     --gardener-write-timeout for writes and the pages of the Shoot list)"
)]
pub struct Timeout(pub Duration);

/// Settings of the guard layer.
#[derive(Clone)]
pub struct GuardSettings {
    /// Allowed verbs and paths.
    pub allow: AllowList,
    /// Sustained requests per second.
    pub qps: u32,
    /// Burst above the sustained rate.
    pub burst: u32,
    /// Time until the response headers of a read (GET, HEAD) arrive.
    pub timeout: Duration,
    /// Time until the response headers of a write arrive: writes pass Gardener's admission,
    /// which queues them under load, and a write given up on still runs to its end there.
    pub write_timeout: Duration,
}

tokio::task_local! {
    /// When the calling task's last Gardener request left the rate limiter; set by the guard
    /// inside [`answer_time`].
    static SENT: std::cell::Cell<Option<std::time::Instant>>;
}

/// Runs `call` (one Gardener request) and also returns how long Gardener took to answer it:
/// from when it left the client's rate limiter, so the time it queued there (up to the queue
/// ahead divided by `--gardener-ratelimiter-qps`) does not read as a slow Gardener. `None`
/// when the call sent nothing. The guard's future runs inside the caller's task, where the
/// task-local is set.
pub async fn answer_time<F: std::future::Future>(call: F) -> (F::Output, Option<Duration>) {
    SENT.scope(std::cell::Cell::new(None), async {
        let out = call.await;
        let took = SENT.with(|sent| sent.get()).map(|at| at.elapsed());
        (out, took)
    })
    .await
}

/// The tower layer guarding every Gardener request.
#[derive(Clone)]
pub struct GardenerGuardLayer {
    inner: Arc<Guard>,
}

struct Guard {
    allow: AllowList,
    limiter: DefaultDirectRateLimiter,
    /// Requests wait for the limiter one at a time, in arrival order (tokio's `Mutex` is
    /// fair): governor's `until_ready` is not first-come first-served, waiters that wake
    /// together race for the next cell, and under steady contention one can lose for minutes
    /// (at 5 QPS with 64 workers busy, a Shoot watch's reconnect waited 190 s, and no Runtime
    /// became Ready meanwhile). client-go's limiter reserves slots in arrival order too.
    turn: tokio::sync::Mutex<()>,
    timeout: Duration,
    write_timeout: Duration,
    metrics: Arc<Metrics>,
}

impl GardenerGuardLayer {
    /// Creates the layer; errors if `qps` or `burst` is zero.
    pub fn new(
        settings: GuardSettings,
        metrics: Arc<Metrics>,
    ) -> Result<Self, GardenerClientError> {
        let qps = NonZeroU32::new(settings.qps).ok_or(GardenerClientError::RateLimit)?;
        let burst = NonZeroU32::new(settings.burst).ok_or(GardenerClientError::RateLimit)?;
        let limiter = RateLimiter::direct(Quota::per_second(qps).allow_burst(burst));
        Ok(Self {
            inner: Arc::new(Guard {
                allow: settings.allow,
                limiter,
                turn: tokio::sync::Mutex::new(()),
                timeout: settings.timeout,
                write_timeout: settings.write_timeout,
                metrics,
            }),
        })
    }
}

/// The guards of the reconcilers' client and of the Shoot watch's
/// (`Context::gardener` and `Context::gardener_watch`): the same settings, a rate limiter each,
/// and for the watch's reads the longer of the reads' and the writes' timeouts.
///
/// kube's watcher starts a list over when one of its pages fails: a relist of 10,000 Shoots is
/// 100 pages, and on a busy gardener-apiserver that answers a few of them after the reads' 3 s
/// the Shoot cache would never be filled. A reconciler's read stays short, so that a worker is
/// not held by a read that is not coming.
pub fn guards(
    settings: GuardSettings,
    metrics: Arc<Metrics>,
) -> Result<(GardenerGuardLayer, GardenerGuardLayer), GardenerClientError> {
    let watch = GuardSettings {
        timeout: settings.timeout.max(settings.write_timeout),
        ..settings.clone()
    };
    Ok((
        GardenerGuardLayer::new(settings, metrics.clone())?,
        GardenerGuardLayer::new(watch, metrics)?,
    ))
}

impl<S> Layer<S> for GardenerGuardLayer {
    type Service = GardenerGuard<S>;
    fn layer(&self, inner: S) -> Self::Service {
        GardenerGuard {
            inner: Arc::new(tokio::sync::Mutex::new(inner)),
            guard: self.inner.clone(),
        }
    }
}

/// The service the layer produces.
pub struct GardenerGuard<S> {
    // kube's stack is not Clone; a short lock covers only readiness and the call itself.
    inner: Arc<tokio::sync::Mutex<S>>,
    guard: Arc<Guard>,
}

impl<S> Clone for GardenerGuard<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            guard: self.guard.clone(),
        }
    }
}

impl<S, B> Service<Request<Body>> for GardenerGuard<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<B>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        let guard = self.guard.clone();
        Box::pin(async move {
            let method = req.method().clone();
            let path = req
                .uri()
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/");
            if let Err(denied) = guard.allow.check(&method, path) {
                guard
                    .metrics
                    .count_gardener_request(method.as_str(), crate::metrics::CODE_DENIED);
                tracing::error!(%denied, "request blocked by the Gardener allow-list");
                return Err(Box::new(denied) as BoxError);
            }
            let queued = std::time::Instant::now();
            {
                let _turn = guard.turn.lock().await;
                guard.limiter.until_ready().await;
            }
            let _ = SENT.try_with(|sent| sent.set(Some(std::time::Instant::now())));
            guard
                .metrics
                .gardener_rate_limit_wait
                .observe(queued.elapsed().as_secs_f64());
            let fut = {
                let mut svc = inner.lock().await;
                svc.ready().await.map_err(Into::into)?;
                svc.call(req)
            };
            let sent = std::time::Instant::now();
            let timeout = if method == http::Method::GET || method == http::Method::HEAD {
                guard.timeout
            } else {
                guard.write_timeout
            };
            match tokio::time::timeout(timeout, fut).await {
                Err(_) => {
                    guard
                        .metrics
                        .count_gardener_request(method.as_str(), "timeout");
                    Err(Box::new(Timeout(timeout)) as BoxError)
                }
                Ok(Err(e)) => {
                    guard
                        .metrics
                        .count_gardener_request(method.as_str(), "error");
                    Err(e.into())
                }
                Ok(Ok(resp)) => {
                    guard
                        .metrics
                        .count_gardener_request(method.as_str(), resp.status().as_str());
                    guard
                        .metrics
                        .observe_gardener_request(method.as_str(), sent.elapsed());
                    Ok(resp)
                }
            }
        })
    }
}

/// Reads the Gardener kubeconfig and refuses one that is not strict https.
pub async fn load_config(path: &Path) -> Result<kube::Config, GardenerClientError> {
    let p = path.display().to_string();
    let kubeconfig = Kubeconfig::read_from(path).map_err(|source| GardenerClientError::Read {
        path: p.clone(),
        source,
    })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| GardenerClientError::Read {
            path: p.clone(),
            source,
        })?;
    check_strict(&config).map_err(|what| GardenerClientError::Insecure { path: p, what })?;
    Ok(config)
}

/// Strict TLS: https only, certificate verification on.
pub fn check_strict(config: &kube::Config) -> Result<(), &'static str> {
    if config.cluster_url.scheme_str() != Some("https") {
        return Err("the server URL is not https");
    }
    if config.accept_invalid_certs {
        return Err("insecure-skip-tls-verify is set");
    }
    Ok(())
}

/// A kubeconfig read from a Secret that the controller refuses to use. Messages name the
/// setting, never a value of the kubeconfig.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretKubeconfigError {
    /// Not UTF-8 or not a kubeconfig.
    #[error("not a readable kubeconfig")]
    Unreadable,
    /// It names something on the controller's machine, runs a program or turns off
    /// certificate checks.
    #[error(
        "{0}; a kubeconfig from a Secret must be self-contained (inline token or certificate data, https with certificate verification)"
    )]
    Insecure(&'static str),
    /// kube cannot turn it into a client configuration.
    #[error("cannot build a client configuration from it")]
    Config,
}

/// What a kubeconfig from a Secret may not contain: anything that reads the controller's
/// files or runs a program there (whoever can write the Secret would choose them), and no
/// turning off of certificate checks. Every cluster and user entry is checked, not only the
/// current context's. Pure.
pub fn check_self_contained(kc: &Kubeconfig) -> Result<(), &'static str> {
    for c in kc.clusters.iter().filter_map(|c| c.cluster.as_ref()) {
        if c.insecure_skip_tls_verify == Some(true) {
            return Err("insecure-skip-tls-verify is set");
        }
        if c.certificate_authority.is_some() {
            return Err("certificate-authority names a file");
        }
        if let Some(server) = &c.server
            && !server.starts_with("https://")
        {
            return Err("the server URL is not https");
        }
    }
    for u in kc.auth_infos.iter().filter_map(|u| u.auth_info.as_ref()) {
        if u.exec.is_some() {
            return Err("an exec credential plugin is configured");
        }
        if u.auth_provider.is_some() {
            return Err("an auth-provider is configured");
        }
        if u.token_file.is_some() {
            return Err("tokenFile names a file");
        }
        if u.client_certificate.is_some() {
            return Err("client-certificate names a file");
        }
        if u.client_key.is_some() {
            return Err("client-key names a file");
        }
    }
    Ok(())
}

/// The `User-Agent` of every request of this program: API servers name the field manager of a
/// write that sets none after it (`kim-controller`, the part before the `/`), and their audit
/// logs show it. kube sends none of its own.
pub const USER_AGENT: &str = concat!("kim-controller/", env!("CARGO_PKG_VERSION"));

/// Adds [`USER_AGENT`] to the headers of `config`.
pub fn identify(config: &mut kube::Config) {
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
}

/// Longest wait for a connection to a runtime's API server.
pub const RUNTIME_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The client configuration of a kubeconfig read from a Secret (a runtime's admin
/// kubeconfig): [`check_self_contained`], then [`check_strict`] on the result, and `timeout`
/// for each read and write (connecting: at most [`RUNTIME_CONNECT_TIMEOUT`]), so an unreachable
/// or hibernated cluster fails a call instead of holding it. The one way kubeconfigs from
/// Secrets become clients.
pub async fn config_from_secret(
    bytes: &[u8],
    timeout: Duration,
) -> Result<kube::Config, SecretKubeconfigError> {
    let yaml = std::str::from_utf8(bytes).map_err(|_| SecretKubeconfigError::Unreadable)?;
    let kc = Kubeconfig::from_yaml(yaml).map_err(|_| SecretKubeconfigError::Unreadable)?;
    check_self_contained(&kc).map_err(SecretKubeconfigError::Insecure)?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|_| SecretKubeconfigError::Config)?;
    check_strict(&config).map_err(SecretKubeconfigError::Insecure)?;
    // A runtime's API server that takes longer than this to accept a connection is not
    // reachable (a dropped route, a firewall): fail fast rather than hold a worker.
    config.connect_timeout = Some(timeout.min(RUNTIME_CONNECT_TIMEOUT));
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    // kube's retry waits out any `Retry-After` the server sends (a webhook in the runtime
    // cluster can make it days) and retries up to 15 times: [`runtime_client`] retries a few
    // times on its own terms instead.
    config.default_retry = false;
    identify(&mut config);
    Ok(config)
}

/// Retries of a request a runtime's API server answered with 429, 503 or 504.
pub const RUNTIME_RETRIES: u32 = 3;

/// Requests queued for one runtime client's connection pool (each reconcile sends one at a
/// time; many reconciles share a client).
const RUNTIME_BUFFER: usize = 256;

/// The most a runtime's API server may send in one answer. kube reads an answer whole before
/// decoding it, and a decoded object takes several times its JSON; the customer owns the
/// cluster and can make what we list (bindings, labelled objects) huge. A usual answer is a
/// few KiB, a list of every ClusterRoleBinding of a large cluster about 1 MiB.
pub const RUNTIME_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// The client of a runtime cluster, from a config made by [`config_from_secret`]: a 429, 503
/// or 504 retried up to [`RUNTIME_RETRIES`] times after 0.5 s doubling to at most 4 s, whatever
/// `Retry-After` says (an API server under load answers those now and then; the reconciler's
/// backoff takes over after that); requests counted in `requests`; answers longer than
/// [`RUNTIME_RESPONSE_BYTES`] cut off with an error that says so.
pub fn runtime_client(
    config: kube::Config,
    requests: Family<RequestLabels, Counter>,
) -> Result<kube::Client, kube::Error> {
    let retry = kube::client::retry::RetryPolicy::new(
        Duration::from_millis(500),
        Duration::from_secs(4),
        RUNTIME_RETRIES,
        false,
    )
    .map_err(|e| kube::Error::Service(e.into()))?;
    Ok(ClientBuilder::try_from(config)?
        // The retry resends a request, so the service under it must be cloneable.
        .with_layer(&tower::buffer::BufferLayer::new(RUNTIME_BUFFER))
        .with_layer(&tower::retry::RetryLayer::new(retry))
        .with_layer(&CountLayer(requests))
        .with_layer(&tower::util::MapResponseLayer::new(limit_body))
        .build())
}

type LimitedBody = http_body_util::combinators::MapErr<
    http_body_util::Limited<Box<kube::client::DynBody>>,
    fn(BoxError) -> BoxError,
>;

fn limit_body(response: Response<Box<kube::client::DynBody>>) -> Response<LimitedBody> {
    use http_body_util::BodyExt;
    response.map(|body| {
        http_body_util::Limited::new(body, RUNTIME_RESPONSE_BYTES)
            .map_err(too_long as fn(BoxError) -> BoxError)
    })
}

fn too_long(e: BoxError) -> BoxError {
    if e.is::<http_body_util::LengthLimitError>() {
        format!(
            "the runtime's API server answered with more than {} MiB, the most kim-controller reads in one answer",
            RUNTIME_RESPONSE_BYTES / (1024 * 1024)
        )
        .into()
    } else {
        e
    }
}

/// Builds the guarded client from a checked config.
pub fn build(
    mut config: kube::Config,
    layer: &GardenerGuardLayer,
    path_for_errors: &Path,
) -> Result<kube::Client, GardenerClientError> {
    // Our layer owns timeouts and retries: a 429 or 5xx surfaces to the reconciler, which
    // requeues with backoff and counts it, instead of being retried invisibly inside kube.
    config.default_retry = false;
    identify(&mut config);
    let builder = ClientBuilder::try_from(config).map_err(|source| GardenerClientError::Build {
        path: path_for_errors.display().to_string(),
        source,
    })?;
    Ok(builder.with_layer(layer).build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_tls() {
        let mut c = kube::Config::new("https://g.example:443".parse().unwrap());
        assert_eq!(check_strict(&c), Ok(()));
        c.accept_invalid_certs = true;
        assert_eq!(check_strict(&c), Err("insecure-skip-tls-verify is set"));
        let c = kube::Config::new("http://g.example".parse().unwrap());
        assert_eq!(check_strict(&c), Err("the server URL is not https"));
    }

    const INLINE: &str = r#"
apiVersion: v1
kind: Config
current-context: s1
clusters:
- name: s1
  cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: ""}
contexts:
- name: s1
  context: {cluster: s1, user: s1}
users:
- name: s1
  user: {token: abc}
"#;

    /// A plain-HTTP server that answers every request with `answer` and counts the requests.
    async fn serve(answer: Vec<u8>) -> (http::Uri, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = count.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (answer, counted) = (answer.clone(), counted.clone());
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let Ok(n) = conn.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        if seen.windows(4).any(|w| w == b"\r\n\r\n") {
                            seen.clear();
                            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            if conn.write_all(&answer).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (url.parse().unwrap(), count)
    }

    /// A runtime client (as the reconcilers build it) for the server at `url`.
    async fn runtime_client_for(url: http::Uri) -> kube::Client {
        let mut config = config_from_secret(INLINE.as_bytes(), Duration::from_secs(5))
            .await
            .unwrap();
        config.cluster_url = url;
        runtime_client(config, Family::default()).unwrap()
    }

    #[tokio::test]
    async fn a_runtime_answer_over_the_limit_is_an_error_that_says_so() {
        let body = format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"big\"}},\"data\":{{\"x\":\"{}\"}}}}",
            "a".repeat(RUNTIME_RESPONSE_BYTES)
        );
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        answer.extend_from_slice(body.as_bytes());
        let (url, _) = serve(answer).await;
        let client = runtime_client_for(url).await;
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client, "default");
        let err = api.get("big").await.unwrap_err().to_string();
        assert!(err.contains("more than 8 MiB"), "{err}");
    }

    /// A 429 is retried a few times, quickly, whatever `Retry-After` asks for, then returned.
    #[tokio::test]
    async fn a_runtime_retry_after_is_not_waited_for() {
        let status = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"slow down","reason":"TooManyRequests","code":429}"#;
        let answer = format!(
            "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3600\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{status}",
            status.len()
        )
        .into_bytes();
        let (url, requests) = serve(answer).await;
        let client = runtime_client_for(url).await;
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client, "default");
        let answered = tokio::time::timeout(Duration::from_secs(20), api.get("x"))
            .await
            .expect("the 429 is returned, not retried after an hour");
        assert!(
            matches!(answered, Err(kube::Error::Api(ref s)) if s.code == 429),
            "{answered:?}"
        );
        assert_eq!(
            requests.load(std::sync::atomic::Ordering::SeqCst),
            1 + RUNTIME_RETRIES as usize
        );
    }

    #[tokio::test]
    async fn secret_kubeconfigs_must_be_self_contained_and_strict() {
        let t = Duration::from_secs(7);
        let ok = config_from_secret(INLINE.as_bytes(), t).await.unwrap();
        assert!(!ok.default_retry, "kube's retry is off");
        assert_eq!(ok.connect_timeout, Some(t));
        assert_eq!(ok.read_timeout, Some(t));
        let long = Duration::from_secs(30);
        let ok = config_from_secret(INLINE.as_bytes(), long).await.unwrap();
        assert_eq!(ok.connect_timeout, Some(RUNTIME_CONNECT_TIMEOUT));
        assert_eq!(ok.read_timeout, Some(long));
        assert_eq!(ok.write_timeout, Some(long));
        let cases = [
            (
                "user: {token: abc}",
                "user: {exec: {command: /bin/sh, apiVersion: client.authentication.k8s.io/v1}}",
                "exec",
            ),
            (
                "user: {token: abc}",
                "user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}",
                "tokenFile",
            ),
            (
                "user: {token: abc}",
                "user: {client-certificate: /etc/c.pem, client-key: /etc/k.pem}",
                "client-certificate",
            ),
            (
                "user: {token: abc}",
                "user: {auth-provider: {name: oidc, config: {}}}",
                "auth-provider",
            ),
            (
                "certificate-authority-data: \"\"",
                "certificate-authority: /etc/ca.pem",
                "certificate-authority",
            ),
            (
                "certificate-authority-data: \"\"",
                "insecure-skip-tls-verify: true",
                "insecure-skip-tls-verify",
            ),
            ("https://127.0.0.1:6443", "http://127.0.0.1:6443", "https"),
        ];
        for (from, to, what) in cases {
            let kc = INLINE.replace(from, to);
            assert_ne!(kc, INLINE, "{what}: the case changes the kubeconfig");
            let err = config_from_secret(kc.as_bytes(), t).await.unwrap_err();
            assert!(
                matches!(&err, SecretKubeconfigError::Insecure(m) if m.contains(what)),
                "{what}: {err}"
            );
            assert!(!err.to_string().contains("/etc/"), "no values in {err}");
        }
        assert_eq!(
            config_from_secret(b"\xff", t).await.unwrap_err(),
            SecretKubeconfigError::Unreadable
        );
    }

    #[test]
    fn zero_rate_is_refused() {
        let settings = GuardSettings {
            allow: AllowList::new("garden-x"),
            qps: 0,
            burst: 5,
            timeout: Duration::from_secs(1),
            write_timeout: Duration::from_secs(1),
        };
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        assert!(matches!(
            GardenerGuardLayer::new(settings, metrics),
            Err(GardenerClientError::RateLimit)
        ));
    }

    /// The guards of [`guards`] for namespace `garden-x`.
    fn guards_at(
        qps: u32,
        burst: u32,
        timeout: Duration,
        write_timeout: Duration,
    ) -> (GardenerGuardLayer, GardenerGuardLayer) {
        let settings = GuardSettings {
            allow: AllowList::new("garden-x"),
            qps,
            burst,
            timeout,
            write_timeout,
        };
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        guards(settings, metrics).expect("guards")
    }

    /// A guard for namespace `garden-x` at `qps`, `burst`.
    fn layer_at(qps: u32, burst: u32) -> GardenerGuardLayer {
        let settings = GuardSettings {
            allow: AllowList::new("garden-x"),
            qps,
            burst,
            timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
        };
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        GardenerGuardLayer::new(settings, metrics).expect("layer")
    }

    /// A Shoot list in `garden-x`.
    fn shoots_get() -> Request<Body> {
        Request::get("/apis/core.gardener.cloud/v1beta1/namespaces/garden-x/shoots")
            .body(Body::empty())
            .expect("request")
    }

    /// Under steady contention every request gets its turn in arrival order: 24 callers each
    /// sending back to back at 20 QPS, burst 1. Counted in order, not time, so a loaded machine
    /// cannot fail it: no request is overtaken by more than one request per other caller.
    /// Without the arrival-order turn, waiters race for each token and some are overtaken
    /// many rounds over.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_rate_limit_serves_waiters_in_arrival_order() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        const CALLERS: usize = 24;
        let layer = layer_at(20, 1);
        let inner = tower::service_fn(|_req: Request<Body>| async {
            Ok::<_, std::convert::Infallible>(Response::new(Body::empty()))
        });
        let svc = layer.layer(inner);
        let until = std::time::Instant::now() + Duration::from_secs(4);
        let arrivals = Arc::new(AtomicUsize::new(0));
        // The arrival ticket of each answered request, in the order answered.
        let answered = Arc::new(std::sync::Mutex::new(Vec::new()));
        let callers: Vec<_> = (0..CALLERS)
            .map(|_| {
                let (mut svc, arrivals, answered) =
                    (svc.clone(), arrivals.clone(), answered.clone());
                tokio::spawn(async move {
                    while std::time::Instant::now() < until {
                        let req = shoots_get();
                        let ticket = arrivals.fetch_add(1, Ordering::SeqCst);
                        svc.ready().await.expect("ready");
                        svc.call(req).await.expect("answer");
                        answered.lock().expect("answered").push(ticket);
                    }
                })
            })
            .collect();
        for c in callers {
            c.await.expect("caller");
        }
        let answered = answered.lock().expect("answered").clone();
        assert!(answered.len() > 2 * CALLERS, "{} answered", answered.len());
        let most_overtaken = answered
            .iter()
            .enumerate()
            .map(|(at, ticket)| answered[..at].iter().filter(|t| *t > ticket).count())
            .max()
            .unwrap_or_default();
        assert!(
            most_overtaken <= CALLERS,
            "a request was overtaken by {most_overtaken} later ones"
        );
    }

    /// The Shoot watch's requests do not wait behind the reconcilers': at 1 QPS, burst 1, a
    /// reconciler request that has to wait leaves the watch's first request free to go.
    #[tokio::test]
    async fn the_watch_has_a_rate_limit_of_its_own() {
        let (requests, watch) = guards_at(1, 1, Duration::from_secs(5), Duration::from_secs(5));
        let answer = || {
            tower::service_fn(|_req: Request<Body>| async {
                Ok::<_, std::convert::Infallible>(Response::new(Body::empty()))
            })
        };
        let mut requests = requests.layer(answer());
        let mut watch = watch.layer(answer());
        requests.call(shoots_get()).await.expect("answer");
        let waiting = tokio::spawn(requests.call(shoots_get()));
        tokio::task::yield_now().await;
        let started = std::time::Instant::now();
        watch.call(shoots_get()).await.expect("answer");
        let watch_took = started.elapsed();
        waiting.await.expect("task").expect("answer");
        let request_took = started.elapsed();
        assert!(
            watch_took < Duration::from_millis(500) && request_took >= Duration::from_millis(500),
            "the watch's request took {watch_took:?}, the waiting reconciler request {request_took:?}"
        );
    }

    /// A page of the Shoot list that takes longer than a reconciler's read may take is still
    /// waited for, up to the writes' timeout.
    #[tokio::test]
    async fn the_watch_waits_for_a_page_as_long_as_for_a_write() {
        let (requests, watch) =
            guards_at(100, 100, Duration::from_millis(200), Duration::from_secs(5));
        let slow = || {
            tower::service_fn(|_req: Request<Body>| async {
                tokio::time::sleep(Duration::from_millis(600)).await;
                Ok::<_, std::convert::Infallible>(Response::new(Body::empty()))
            })
        };
        let read = requests.layer(slow()).call(shoots_get()).await;
        assert!(
            read.as_ref().is_err_and(|e| e.is::<Timeout>()),
            "a reconciler's read: {:?}",
            read.map(|r| r.status())
        );
        let page = watch.layer(slow()).call(shoots_get()).await;
        assert!(page.is_ok(), "the watch's page: {:?}", page.err());
    }

    /// The answer time of a call leaves out its wait in the rate limit: at 1 QPS the second
    /// call queues about a second, the inner service answers in 50 ms.
    #[tokio::test]
    async fn the_answer_time_leaves_out_the_rate_limit_wait() {
        let layer = layer_at(1, 1);
        let mut svc = layer.layer(tower::service_fn(|_req: Request<Body>| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, std::convert::Infallible>(Response::new(Body::empty()))
        }));
        let mut took = Vec::new();
        for _ in 0..2 {
            let started = std::time::Instant::now();
            let (answer, answered_in) = answer_time(svc.call(shoots_get())).await;
            answer.expect("answer");
            took.push((
                started.elapsed(),
                answered_in.expect("the guard marks when it sent"),
            ));
        }
        let (whole, answered) = took[1];
        // The second call queues for what is left of the limiter's second after the first
        // call: whatever the machine's load adds to the calls, the queueing is left out.
        let queued = Duration::from_secs(1)
            .saturating_sub(took[0].0)
            .saturating_sub(Duration::from_millis(200));
        assert!(
            answered >= Duration::from_millis(50) && whole.saturating_sub(answered) >= queued,
            "answer time {answered:?} of a call that took {whole:?}, the first {:?}",
            took[0].0
        );
    }
}
