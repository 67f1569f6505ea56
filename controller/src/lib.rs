//! `kim-controller`: the reconcilers of the infrastructure manager in one process.
//!
//! The process (flags in [`cli`], clients, leader election, metrics and health server) is built
//! by [`runner`] on the skeleton both binaries share (`kim-process`); the flags become
//! [`settings::Settings`] once, there. Each reconciler is a module with `pub async fn run(ctx:
//! Arc<Context>, shutdown: Shutdown, ..)`, reads its own settings from the [`Context`], and is
//! started by [`spawn_reconcilers`]: to add one, add its module and a line there. What
//! reconcilers share is made there too: the Runtime reconciler's Shoot cache is read by the
//! GardenerCluster reconciler (`run`'s third argument of both).
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod bootstrapper;
pub mod cli;
pub mod context;
pub mod finalizing;
pub mod gardener;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod records;
pub mod redact;
pub mod runner;
pub mod server;
pub mod settings;
pub mod stored;
pub mod watch;

pub use context::{Context, LIST_PAGE_SIZE, Shutdown};

pub mod access;
pub mod gardener_cluster;
pub mod registry_cache;
pub mod runtime;

/// Starts every reconciler on its own task once this replica leads; each returns when
/// `shutdown` is cancelled. A reconciler that panics cancels `crashed` (see [`supervised`]).
pub fn spawn_reconcilers(
    ctx: &std::sync::Arc<Context>,
    shutdown: &Shutdown,
    crashed: &Shutdown,
) -> Vec<(&'static str, tokio::task::JoinHandle<()>)> {
    // The Runtime reconciler watches the Shoots; the GardenerCluster reconciler reads its cache
    // to check whose Shoot it asks a kubeconfig for.
    let (shoots, shoot_writer) =
        kube::runtime::reflector::store::<runtime::shoot_cache::CachedShoot>();
    let shoots = runtime::shoot_cache::ShootCache::new(shoots);
    let (rotations, rotated) = runtime::shoot_cache::CredentialRotations::channel();
    vec![
        spawn_supervised(
            "runtime",
            runtime::run(
                ctx.clone(),
                shutdown.clone(),
                shoot_writer,
                shoots.clone(),
                rotations,
            ),
            crashed,
        ),
        spawn_supervised(
            "gardener_cluster",
            gardener_cluster::run(
                ctx.clone(),
                shutdown.clone(),
                shoots,
                rotated.times.clone(),
                rotated.cas,
            ),
            crashed,
        ),
        spawn_supervised(
            "access",
            access::run(
                ctx.clone(),
                shutdown.clone(),
                rotated.times,
                rotated.service_account_keys,
            ),
            crashed,
        ),
        spawn_supervised(
            "registry_cache",
            registry_cache::run(ctx.clone(), shutdown.clone()),
            crashed,
        ),
    ]
}

/// Spawns `work` as the [`supervised`] reconciler `name`.
fn spawn_supervised(
    name: &'static str,
    work: impl Future<Output = ()> + Send + 'static,
    crashed: &Shutdown,
) -> (&'static str, tokio::task::JoinHandle<()>) {
    (name, tokio::spawn(supervised(name, work, crashed.clone())))
}

/// Runs one reconciler. A panic (a bug) is logged and cancels `crashed`: the process then
/// stops and gives up its Lease, as a controller-runtime manager does when a runnable fails,
/// instead of leading on with that kind of object unreconciled. A reconciler that returns
/// (the registry-cache sweep, once done) is no failure, nor is the Tokio runtime ending under a
/// running reconcile: kube-runtime unwraps the join handle of each reconcile task it spawns, so
/// a task the runtime cancels as it ends (the process exiting after its drain timed out)
/// panics there. That panic counts as a bug while the runtime still runs tasks.
pub async fn supervised(name: &'static str, work: impl Future<Output = ()>, crashed: Shutdown) {
    use futures::FutureExt;
    if let Err(payload) = std::panic::AssertUnwindSafe(work).catch_unwind().await {
        let message = panic_message(payload.as_ref());
        if message.contains("JoinError::Cancelled") && runtime_ending().await {
            tracing::info!(
                reconciler = name,
                "reconciler stopped: the runtime ended under a running reconcile"
            );
            return;
        }
        tracing::error!(
            reconciler = name,
            panic = message,
            "reconciler panicked; stopping the process"
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
    async fn a_panicking_reconciler_cancels_crashed_and_one_that_returns_does_not() {
        let crashed = Shutdown::new();
        supervised("returns", async {}, crashed.clone()).await;
        assert!(!crashed.is_cancelled(), "returning is no failure");
        let task = tokio::spawn(supervised(
            "panics",
            async { panic!("a bug in a reconciler") },
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
