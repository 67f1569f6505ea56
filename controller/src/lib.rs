//! `kim-controller`: the reconcilers of the infrastructure manager in one process.
//!
//! The process skeleton (flags, clients, leader election, metrics and health server, logging)
//! lives here; each reconciler is a module with `pub async fn run(ctx: Arc<Context>,
//! shutdown: Shutdown)` and is registered in the [`reconcilers!`] line below. See
//! `notes/controller-shared.md` for how to plug one in.
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod cli;
pub mod context;
pub mod finalizing;
pub mod gardener;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod runner;
pub mod server;

pub use context::{Context, LIST_PAGE_SIZE, Shutdown};

/// Declares the reconciler modules and [`spawn_reconcilers`], which starts each module's
/// `run(ctx, shutdown)` on its own task once this replica leads.
macro_rules! reconcilers {
    ($($module:ident),+ $(,)?) => {
        $(pub mod $module;)+

        /// Starts every registered reconciler; each returns when `shutdown` is cancelled.
        pub fn spawn_reconcilers(
            ctx: &std::sync::Arc<Context>,
            shutdown: &Shutdown,
        ) -> Vec<(&'static str, tokio::task::JoinHandle<()>)> {
            vec![$((
                stringify!($module),
                tokio::spawn($module::run(ctx.clone(), shutdown.clone())),
            )),+]
        }
    };
}

// One line: add a module name here to run its reconciler in this process.
reconcilers!(runtime, gardener_cluster, access);
