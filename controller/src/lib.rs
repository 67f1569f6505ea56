//! `kim-controller`: the reconcilers of the infrastructure manager in one process.
//!
//! The process (flags in [`cli`], clients, leader election, metrics and health server) is built
//! by [`runner`] on the skeleton both binaries share (`kim-process`); the flags become
//! [`settings::Settings`] once, there. Each reconciler is a module with `pub async fn run(ctx:
//! Arc<Context>, shutdown: Shutdown)`, reads its own settings from the [`Context`], and is
//! started by [`spawn_reconcilers`]: to add one, add its module and a line there.
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
/// `shutdown` is cancelled.
pub fn spawn_reconcilers(
    ctx: &std::sync::Arc<Context>,
    shutdown: &Shutdown,
) -> Vec<(&'static str, tokio::task::JoinHandle<()>)> {
    vec![
        (
            "runtime",
            tokio::spawn(runtime::run(ctx.clone(), shutdown.clone())),
        ),
        (
            "gardener_cluster",
            tokio::spawn(gardener_cluster::run(ctx.clone(), shutdown.clone())),
        ),
        (
            "access",
            tokio::spawn(access::run(ctx.clone(), shutdown.clone())),
        ),
        (
            "registry_cache",
            tokio::spawn(registry_cache::run(ctx.clone(), shutdown.clone())),
        ),
    ]
}
