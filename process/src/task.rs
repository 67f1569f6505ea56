//! Tasks a process cannot do without.

use std::future::Future;

use crate::Shutdown;

/// Runs `work`, a task the process cannot do without (a reconciler, the certificate rotation,
/// a watch the webhook serves from). A panic (a bug) is logged and cancels `crashed`, on which
/// the process stops instead of running on without it. A task that returns (the
/// registry-cache sweep, once done) is no failure, nor is the Tokio runtime ending under it:
/// kube-runtime unwraps the join handle of each reconcile task it spawns, so a task the
/// runtime cancels as it ends (the process exiting after its drain timed out) panics there.
/// That panic counts as a bug while the runtime still runs tasks.
pub async fn supervised(name: &'static str, work: impl Future<Output = ()>, crashed: Shutdown) {
    use futures::FutureExt;
    if let Err(payload) = std::panic::AssertUnwindSafe(work).catch_unwind().await {
        let message = panic_message(payload.as_ref());
        if message.contains("JoinError::Cancelled") && runtime_ending().await {
            tracing::info!(task = name, "task stopped: the runtime ended under it");
            return;
        }
        tracing::error!(
            task = name,
            panic = message,
            "task panicked; stopping the process"
        );
        crashed.cancel();
    }
}

/// Whether the Tokio runtime is ending: it cancels a task spawned then at once.
async fn runtime_ending() -> bool {
    tokio::spawn(async {})
        .await
        .is_err_and(|e| e.is_cancelled())
}

/// The text a panic was raised with (`panic!` with a literal or a format), for the log line.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_task_cancels_crashed_and_one_that_returns_does_not() {
        let crashed = Shutdown::new();
        supervised("returns", async {}, crashed.clone()).await;
        assert!(!crashed.is_cancelled(), "returning is no failure");
        let task = tokio::spawn(supervised(
            "panics",
            async { panic!("a bug in a task") },
            crashed.clone(),
        ));
        assert!(task.await.is_ok(), "the panic is caught in the task");
        assert!(crashed.is_cancelled());
        // What kube-runtime's unwrap of a cancelled reconcile task raises is a bug while the
        // runtime lives.
        let cancelled = async {
            let task = tokio::spawn(std::future::pending::<()>());
            task.abort();
            task.await.unwrap();
        };
        let crashed = Shutdown::new();
        supervised("aborted", cancelled, crashed.clone()).await;
        assert!(crashed.is_cancelled(), "a cancelled task in a live runtime");
        // An ending runtime cancels what is spawned then.
        let ending = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let handle = ending.handle().clone();
        ending.shutdown_background();
        let probe = handle.spawn(async {}).await;
        assert!(probe.is_err_and(|e| e.is_cancelled()));
        let id = 7;
        let formatted = std::panic::catch_unwind(|| panic!("bug {id}")).unwrap_err();
        assert_eq!(panic_message(formatted.as_ref()), "bug 7");
        let literal = std::panic::catch_unwind(|| panic!("a literal")).unwrap_err();
        assert_eq!(panic_message(literal.as_ref()), "a literal");
    }
}
