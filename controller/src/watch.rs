//! Watch streams as controller triggers.

use std::time::Duration;

use futures::{Stream, StreamExt, future};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff};
use tokio::sync::watch;

/// `events` without its errors, each logged at debug level (the client logs the failure
/// itself).
///
/// kube's `Controller` backs off *all* its trigger streams together when any of them yields an
/// error, so one failing watch would make the controller deaf to the others: while Gardener is
/// unreachable, the Shoot watch's errors delayed Runtime events from the KCP, and the retry of
/// everything that waited for Gardener, by up to 30 s each time. The watches retry on their own
/// (`default_backoff`), so the errors carry nothing the controller needs.
pub fn without_errors<T: Send>(
    events: impl Stream<Item = Result<T, watcher::Error>> + Send,
    watch: &'static str,
) -> impl Stream<Item = Result<T, watcher::Error>> + Send {
    events.filter(move |event| {
        if let Err(e) = event {
            tracing::debug!(watch, error = %e, "watch failed; it retries with its own backoff");
        }
        future::ready(event.is_ok())
    })
}

/// `events` (a raw watch of Gardener) retried like kube's `default_backoff` after an error,
/// but at once when Gardener answers its health probe again (`recoveries` changes): after a
/// long outage the backoff has grown to 30 s, and the Shoot watch would otherwise see the
/// Shoots created right after the recovery only that much later.
pub fn gardener_backoff<T: Send>(
    events: impl Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    mut recoveries: watch::Receiver<u64>,
) -> impl Stream<Item = Result<T, watcher::Error>> + Send {
    recoveries.mark_unchanged();
    let state = (events.boxed(), DefaultBackoff::default(), recoveries, false);
    futures::stream::unfold(
        state,
        |(mut events, mut backoff, mut recoveries, failed)| async move {
            if failed {
                let delay = backoff.next().unwrap_or(Duration::from_secs(30));
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = recovered(&mut recoveries) => backoff.reset(),
                }
            }
            let event = events.next().await?;
            let failed = event.is_err();
            Some((event, (events, backoff, recoveries, failed)))
        },
    )
}

/// Waits for the next recovery of Gardener (for ever once the prober is gone).
async fn recovered(recoveries: &mut watch::Receiver<u64>) {
    if recoveries.changed().await.is_err() {
        future::pending::<()>().await;
    }
    recoveries.mark_unchanged();
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    fn failing_then(items: usize) -> impl Stream<Item = Result<usize, watcher::Error>> + Send {
        futures::stream::iter(
            std::iter::once(Err(watcher::Error::NoResourceVersion)).chain((0..items).map(Ok)),
        )
    }

    #[tokio::test]
    async fn errors_are_dropped_and_events_kept() {
        let events: Vec<usize> = without_errors(failing_then(2), "test")
            .map(|e| e.map_err(|e| e.to_string()).unwrap())
            .collect()
            .await;
        assert_eq!(events, [0, 1]);
    }

    #[tokio::test]
    async fn a_failed_watch_waits_its_backoff_unless_gardener_recovers() {
        let (tx, rx) = watch::channel(0);
        let mut events = Box::pin(gardener_backoff(failing_then(1), rx));
        assert!(matches!(events.next().await, Some(Err(_))));
        assert!(
            events.next().now_or_never().is_none(),
            "the retry waits for the backoff"
        );
        tx.send_modify(|n| *n += 1);
        assert!(
            matches!(events.next().now_or_never(), Some(Some(Ok(0)))),
            "retried at once when Gardener answers again"
        );
    }
}
