//! The RuntimeAccess reconciler: least-privilege, ServiceAccount-based kubeconfigs for a
//! runtime (upstream issue "RBAC kubeconfigs for Clusters"). For each request it creates the
//! ServiceAccount, (Cluster)Role and binding in the shoot cluster through the admin kubeconfig
//! Secret of the runtime's GardenerCluster, issues a token through the TokenRequest API, stores
//! a kubeconfig in a KCP Secret referenced from the status, rotates it before it expires and,
//! on deletion (finalizer), removes everything it created.

pub mod kubeconfig;
pub mod metrics;
pub mod reconcile;
pub mod record;
pub mod shoot;
pub mod shoot_client;
pub mod token;

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kim_shared::api::runtime_access::RuntimeAccess;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::{reflector, watcher};

use crate::stored::StatusApart;
use crate::{Context, Shutdown};

/// Condition type of a RuntimeAccess.
pub const CONDITION_TYPE: &str = "KubeconfigReady";

/// Name of this reconciler in metrics and logs.
pub const CONTROLLER: &str = "access";

/// Finalizer on a RuntimeAccess: the shoot objects and the Secret go before the object does.
pub const FINALIZER: &str =
    "runtimeaccess-controller.infrastructure-manager.kyma-project.io/cleanup";

/// Smallest `--access-rotation-ratio`: below it a rotation would not leave the API server time
/// to answer before the next one is due.
pub const MIN_ROTATION_RATIO: f64 = 0.01;

/// Largest `--access-rotation-ratio`: consumers get at least 5 % of the lifetime to pick up the
/// new kubeconfig before the old token expires.
pub const MAX_ROTATION_RATIO: f64 = 0.95;

/// Runs the RuntimeAccess reconciler until `shutdown`.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
    let settings = ctx.settings.access.clone();
    let workers = settings.workers.max(1);
    let namespace = ctx.settings.namespace.clone();
    let requests: Api<StatusApart<RuntimeAccess>> = Api::namespaced(ctx.kcp.clone(), &namespace);
    let secrets: Api<PartialObjectMeta<Secret>> = Api::namespaced(ctx.kcp.clone(), &namespace);
    let managed = format!(
        "{}={}",
        kim_shared::names::LABEL_MANAGED_BY,
        kim_shared::names::MANAGED_BY_INFRASTRUCTURE_MANAGER
    );
    let metrics = Arc::new(shoot_client::ShootMetrics::default());
    ctx.register_metrics(|r| metrics.register(r));
    let tokens = Arc::new(metrics::TokenMetrics::default());
    ctx.register_metrics(|r| tokens.register(r));
    let reconciler = Arc::new(reconcile::Reconciler::new(
        ctx.clone(),
        settings,
        metrics,
        tokens,
    ));
    ctx.metrics.track_watch(CONTROLLER);
    ctx.metrics
        .track_reconcile_result(CONTROLLER, crate::metrics::RESULT_UNREADABLE);
    let (store, writer) = reflector::store();
    let (stream, sweep) =
        crate::watch::own_kind(requests, writer, reconciler.clone(), shutdown.clone());
    let run = Controller::for_stream(stream, store.clone())
        .owns(secrets, watcher::Config::default().labels(&managed))
        .with_config(controller::Config::default().concurrency(workers))
        .graceful_shutdown_on(shutdown.clone().cancelled_owned())
        .run(reconcile::reconcile, reconcile::error_policy, reconciler)
        .for_each(|result| {
            crate::watch::report_run(CONTROLLER, &result, &ctx.metrics);
            futures::future::ready(())
        });
    crate::watch::run_until_stopped(run, store, &shutdown).await;
    // It ends on `shutdown` too; a panic in it is already logged.
    let _ = sweep.await;
}
