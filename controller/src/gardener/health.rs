//! Background Gardener health check (upstream issue "Dependency health checking"): probes the
//! Gardener API group through the guarded client and publishes
//! `infrastructure_manager_im_gardener_health{url,status}`.

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::sync::watch;

use crate::metrics::Metrics;

/// Path probed: discovery of `core.gardener.cloud`, which also exercises API aggregation.
pub const PROBE_PATH: &str = "/apis/core.gardener.cloud/v1beta1";

/// Probes every `interval` until `shutdown`; `url` is the label value (the server URL).
/// `healthy` carries the latest result (true until a probe fails) to the reconcilers.
pub async fn run(
    client: kube::Client,
    url: String,
    metrics: Arc<Metrics>,
    interval: Duration,
    healthy: watch::Sender<bool>,
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
        healthy.send_replace(status == "healthy");
    }
}

/// Yields once each time Gardener answers a probe again after a failed one, so reconcilers can
/// retry at once what waited for Gardener instead of letting each object sit out its backoff
/// (up to minutes after a long outage). Ends when the prober stops.
pub fn recoveries(healthy: watch::Receiver<bool>) -> impl Stream<Item = ()> + Send {
    futures::stream::unfold(healthy, |mut rx| async move {
        let mut was_healthy = *rx.borrow_and_update();
        loop {
            rx.changed().await.ok()?;
            let now_healthy = *rx.borrow_and_update();
            let recovered = now_healthy && !was_healthy;
            was_healthy = now_healthy;
            if recovered {
                return Some(((), rx));
            }
        }
    })
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

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    #[tokio::test]
    async fn recoveries_yield_only_when_an_error_turns_healthy() {
        let (tx, rx) = watch::channel(true);
        let mut stream = Box::pin(recoveries(rx));
        let next =
            |s: &mut std::pin::Pin<Box<_>>| futures::FutureExt::now_or_never(StreamExt::next(s));
        tx.send_replace(true);
        assert_eq!(next(&mut stream), None, "healthy to healthy is no recovery");
        tx.send_replace(false);
        assert_eq!(next(&mut stream), None, "a failed probe is no recovery");
        tx.send_replace(false);
        assert_eq!(next(&mut stream), None);
        tx.send_replace(true);
        assert_eq!(next(&mut stream), Some(Some(())), "error to healthy");
        tx.send_replace(true);
        assert_eq!(next(&mut stream), None, "only once per recovery");
        tx.send_replace(false);
        assert_eq!(next(&mut stream), None);
        tx.send_replace(true);
        assert_eq!(
            next(&mut stream),
            Some(Some(())),
            "and again after the next outage"
        );
        drop(tx);
        assert_eq!(next(&mut stream), Some(None), "ends with the prober");
    }
}
