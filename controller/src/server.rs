//! The HTTP endpoints of the process: `/metrics` on `--metrics-bind-address`, `/healthz` and
//! `/readyz` on `--health-probe-bind-address` (upstream: both probes are pings).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// Serves `/metrics` until `shutdown`; returns the bound address (port 0 picks one).
pub async fn serve_metrics(
    addr: SocketAddr,
    registry: Arc<Mutex<Registry>>,
    shutdown: crate::Shutdown,
) -> std::io::Result<SocketAddr> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(registry);
    serve(addr, app, shutdown).await
}

/// Serves `/healthz` and `/readyz` until `shutdown`.
pub async fn serve_probes(
    addr: SocketAddr,
    shutdown: crate::Shutdown,
) -> std::io::Result<SocketAddr> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }));
    serve(addr, app, shutdown).await
}

async fn serve(
    addr: SocketAddr,
    app: Router,
    shutdown: crate::Shutdown,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, %bound, "HTTP server stopped");
        }
    });
    Ok(bound)
}

async fn metrics(State(registry): State<Arc<Mutex<Registry>>>) -> impl IntoResponse {
    let text = {
        let guard = match registry.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        crate::metrics::encode(&guard)
    };
    match text {
        Ok(body) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}
