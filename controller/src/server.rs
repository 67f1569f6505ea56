//! The HTTP endpoints of the process: `/metrics` on `--metrics-bind-address`, `/healthz` and
//! `/readyz` on `--health-probe-bind-address` (upstream: both probes are pings).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use kim_process::http::{BindError, bind, metrics_response, serve};
use prometheus_client::registry::Registry;

/// Serves `/metrics` until `shutdown`; returns the bound address (port 0 picks one).
pub async fn serve_metrics(
    addr: SocketAddr,
    registry: Arc<Mutex<Registry>>,
    shutdown: crate::Shutdown,
) -> Result<SocketAddr, BindError> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(registry);
    spawn(addr, "--metrics-bind-address", app, shutdown).await
}

/// Serves `/healthz` and `/readyz` until `shutdown`.
pub async fn serve_probes(
    addr: SocketAddr,
    shutdown: crate::Shutdown,
) -> Result<SocketAddr, BindError> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }));
    spawn(addr, "--health-probe-bind-address", app, shutdown).await
}

async fn spawn(
    addr: SocketAddr,
    flag: &'static str,
    app: Router,
    shutdown: crate::Shutdown,
) -> Result<SocketAddr, BindError> {
    let listener = bind(addr, flag).await?;
    let bound = listener
        .local_addr()
        .map_err(|source| BindError { flag, addr, source })?;
    tokio::spawn(async move {
        if let Err(e) = serve(listener, app, shutdown.cancelled_owned()).await {
            tracing::error!(error = %e, %bound, "HTTP server stopped");
        }
    });
    Ok(bound)
}

async fn metrics(
    State(registry): State<Arc<Mutex<Registry>>>,
    headers: axum::http::HeaderMap,
) -> Response {
    metrics_response(
        &crate::records::lock(&registry),
        headers.get(axum::http::header::ACCEPT),
    )
}
