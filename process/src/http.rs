//! The plain-HTTP server of probes and metrics.

use std::future::Future;
use std::net::SocketAddr;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// A port could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} ({flag}): {source}")]
pub struct BindError {
    /// The flag naming the address.
    pub flag: &'static str,
    /// The address.
    pub addr: SocketAddr,
    /// Why.
    pub source: std::io::Error,
}

/// Binds a TCP listener, naming the flag when it fails.
pub async fn bind(addr: SocketAddr, flag: &'static str) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { flag, addr, source })
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets open requests finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// The registry in the OpenMetrics text format, as `/metrics` answers.
pub fn metrics_response(registry: &Registry) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, registry) {
        Ok(()) => {
            let mut response = Response::new(body.into());
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            response
        }
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics: {e}\n"),
        )
            .into_response(),
    }
}
