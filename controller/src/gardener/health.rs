//! Background Gardener health check (upstream issue "Dependency health checking"): probes the
//! Gardener API group through the guarded client and publishes
//! `infrastructure_manager_im_gardener_health{url,status}`.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::watch;

use crate::metrics::Metrics;

/// Path probed: discovery of `core.gardener.cloud`, which also exercises API aggregation.
pub const PROBE_PATH: &str = "/apis/core.gardener.cloud/v1beta1";

/// Probes every `interval` until `shutdown`; `url` is the label value (the server URL).
/// `recoveries` counts the probes that succeeded after a failed one, for the reconcilers.
pub async fn run(
    client: kube::Client,
    url: String,
    metrics: Arc<Metrics>,
    interval: Duration,
    recoveries: watch::Sender<u64>,
    shutdown: crate::Shutdown,
) {
    metrics.set_gardener_health(&url, "unknown");
    let mut healthy = true;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let status = probe(&client).await;
        metrics.set_gardener_health(&url, status);
        let now_healthy = status == "healthy";
        if now_healthy && !healthy {
            recoveries.send_modify(|n| *n += 1);
        }
        healthy = now_healthy;
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

/// Yields once each time Gardener answers a probe again after a failed one (a count of such
/// recoveries in `recoveries`; two close together may yield once), so reconcilers can retry at
/// once what waited for Gardener instead of letting each object sit out its backoff (up to
/// minutes after a long outage). Ends when the prober stops.
pub fn recoveries(mut recoveries: watch::Receiver<u64>) -> impl Stream<Item = ()> + Send {
    recoveries.mark_unchanged();
    futures::stream::unfold(recoveries, |mut rx| async move {
        rx.changed().await.ok()?;
        rx.mark_unchanged();
        Some(((), rx))
    })
}

/// Reconcile triggers for `controller`: the objects `waiting` names each time Gardener recovers
/// (see [`recoveries`]), counted in `infrastructure_manager_im_gardener_recovery_retries_total`
/// and logged.
pub fn retry_on_recovery<K>(
    recoveries_seen: watch::Receiver<u64>,
    metrics: Arc<Metrics>,
    controller: &'static str,
    waiting: impl Fn() -> Vec<ObjectRef<K>> + Send + 'static,
) -> impl Stream<Item = ObjectRef<K>> + Send
where
    K: Resource + Send + 'static,
    K::DynamicType: Send,
{
    recoveries(recoveries_seen).flat_map(move |()| {
        let refs = waiting();
        metrics.retried_after_recovery(controller, refs.len());
        tracing::info!(
            controller,
            objects = refs.len(),
            "Gardener answers again; retrying what waited for it now"
        );
        futures::stream::iter(refs)
    })
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    #[tokio::test]
    async fn recoveries_yield_once_per_count_change() {
        let (tx, rx) = watch::channel(3);
        let mut stream = Box::pin(recoveries(rx));
        let next =
            |s: &mut std::pin::Pin<Box<_>>| futures::FutureExt::now_or_never(StreamExt::next(s));
        assert_eq!(
            next(&mut stream),
            None,
            "recoveries before the start do not count"
        );
        tx.send_modify(|n| *n += 1);
        assert_eq!(next(&mut stream), Some(Some(())));
        assert_eq!(next(&mut stream), None, "only once per recovery");
        tx.send_modify(|n| *n += 1);
        assert_eq!(
            next(&mut stream),
            Some(Some(())),
            "and again after the next outage"
        );
        drop(tx);
        assert_eq!(next(&mut stream), Some(None), "ends with the prober");
    }
}
