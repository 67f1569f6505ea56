//! `kim-controller`: the reconcilers of the infrastructure manager in one process.
//!
//! The process (flags in [`cli`], clients, leader election, metrics and health server) is built
//! by [`runner`] on the skeleton both binaries share (`kim-process`); the flags become
//! [`settings::Settings`] once, there. Each reconciler is a module with `pub async fn run(ctx:
//! Arc<Context>, shutdown: Shutdown, ..)`, reads its own settings from the [`Context`], and is
//! started by [`spawn_reconcilers`]: to add one, add its module and a line there. What
//! reconcilers share is made there too: the Runtime reconciler's Shoot cache is read by the
//! GardenerCluster reconciler (`run`'s third argument of both), and the GardenerCluster
//! reconciler's cache by the Runtime reconciler, which hears from that watch which
//! GardenerClusters changed ([`watch::Followers`]).
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
/// `shutdown` is cancelled. A reconciler that panics cancels `crashed`: the process then stops
/// and gives up its Lease, as a controller-runtime manager does when a runnable fails, instead
/// of leading on with that kind of object unreconciled (see [`kim_process::task::supervised`]).
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
    let (notices, noticed) = runtime::shoot_cache::ClusterNotices::channel();
    // The other way round for GardenerClusters: the GardenerCluster reconciler watches them,
    // the Runtime reconciler reads its cache and hears which changed (one list and one copy of
    // each in the process).
    let (clusters, cluster_writer) =
        kube::runtime::reflector::store::<stored::StatusApart<kim_shared::api::GardenerCluster>>();
    let (cluster_followers, cluster_changes) = watch::follow();
    vec![
        spawn_supervised(
            "runtime",
            runtime::run(
                ctx.clone(),
                shutdown.clone(),
                shoot_writer,
                shoots.clone(),
                notices,
                clusters,
                cluster_changes,
            ),
            crashed,
        ),
        spawn_supervised(
            "gardener_cluster",
            gardener_cluster::run(
                ctx.clone(),
                shutdown.clone(),
                shoots,
                noticed.facts.clone(),
                noticed.cas,
                cluster_writer,
                cluster_followers,
            ),
            crashed,
        ),
        spawn_supervised(
            "access",
            access::run(
                ctx.clone(),
                shutdown.clone(),
                noticed.facts.clone(),
                noticed.tokens,
            ),
            crashed,
        ),
        spawn_supervised(
            "registry_cache",
            registry_cache::run(ctx.clone(), shutdown.clone(), noticed.facts),
            crashed,
        ),
    ]
}

/// Spawns `work` as the supervised reconciler `name`.
fn spawn_supervised(
    name: &'static str,
    work: impl Future<Output = ()> + Send + 'static,
    crashed: &Shutdown,
) -> (&'static str, tokio::task::JoinHandle<()>) {
    (
        name,
        tokio::spawn(kim_process::task::supervised(name, work, crashed.clone())),
    )
}
