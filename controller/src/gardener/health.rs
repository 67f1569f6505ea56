//! Background Gardener health check (upstream issue "Dependency health checking"): probes the
//! Gardener API group through the guarded client and publishes
//! `infrastructure_manager_im_gardener_health{url,status}`.

use std::sync::Arc;
use std::time::Duration;

use crate::metrics::Metrics;

/// Path probed: discovery of `core.gardener.cloud`, which also exercises API aggregation.
pub const PROBE_PATH: &str = "/apis/core.gardener.cloud/v1beta1";

/// Probes every `interval` until `shutdown`; `url` is the label value (the server URL).
pub async fn run(
    client: kube::Client,
    url: String,
    metrics: Arc<Metrics>,
    interval: Duration,
    shutdown: crate::Shutdown,
) {
    metrics.set_gardener_health(&url, "unknown");
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let status = probe(&client).await;
        metrics.set_gardener_health(&url, status);
    }
}

/// One probe: `healthy` when the API group answers, `error` otherwise.
pub async fn probe(client: &kube::Client) -> &'static str {
    let req = match http::Request::get(PROBE_PATH).body(Vec::new()) {
        Ok(r) => r,
        Err(_) => return "error",
    };
    match client.request_text(req).await {
        Ok(_) => "healthy",
        Err(e) => {
            tracing::warn!(error = %e, "Gardener health probe failed");
            "error"
        }
    }
}
