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
use crate::metrics::Metrics;

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
#[error("Gardener did not answer within {0:?} (--gardener-request-timeout)")]
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
    /// Time until the response headers arrive.
    pub timeout: Duration,
}

/// The tower layer guarding every Gardener request.
#[derive(Clone)]
pub struct GardenerGuardLayer {
    inner: Arc<Guard>,
}

struct Guard {
    allow: AllowList,
    limiter: DefaultDirectRateLimiter,
    timeout: Duration,
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
                timeout: settings.timeout,
                metrics,
            }),
        })
    }
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
                    .count_gardener_request(method.as_str(), "denied");
                tracing::error!(%denied, "request blocked by the Gardener allow-list");
                return Err(Box::new(denied) as BoxError);
            }
            guard.limiter.until_ready().await;
            let fut = {
                let mut svc = inner.lock().await;
                svc.ready().await.map_err(Into::into)?;
                svc.call(req)
            };
            match tokio::time::timeout(guard.timeout, fut).await {
                Err(_) => {
                    guard
                        .metrics
                        .count_gardener_request(method.as_str(), "timeout");
                    Err(Box::new(Timeout(guard.timeout)) as BoxError)
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

/// Builds the guarded client from a checked config.
pub fn build(
    mut config: kube::Config,
    layer: &GardenerGuardLayer,
    path_for_errors: &Path,
) -> Result<kube::Client, GardenerClientError> {
    // Our layer owns timeouts and retries: a 429 or 5xx surfaces to the reconciler, which
    // requeues with backoff and counts it, instead of being retried invisibly inside kube.
    config.default_retry = false;
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

    #[test]
    fn zero_rate_is_refused() {
        let settings = GuardSettings {
            allow: AllowList::new("garden-x"),
            qps: 0,
            burst: 5,
            timeout: Duration::from_secs(1),
        };
        let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
        assert!(matches!(
            GardenerGuardLayer::new(settings, metrics),
            Err(GardenerClientError::RateLimit)
        ));
    }
}
