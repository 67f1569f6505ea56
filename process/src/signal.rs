//! Shutdown: one token that SIGTERM or Ctrl-C cancels and every task watches.

/// Cancelled when the process is to stop; tasks return soon after.
pub type Shutdown = tokio_util::sync::CancellationToken;

/// Cancels `shutdown` on SIGTERM or Ctrl-C (spawned on the current Tokio runtime).
pub fn cancel_on_signal(shutdown: Shutdown) {
    tokio::spawn(async move {
        signal().await;
        tracing::info!("stopping on signal");
        shutdown.cancel();
    });
}

/// Resolves on SIGTERM or Ctrl-C.
async fn signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM; stopping on Ctrl-C only");
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
