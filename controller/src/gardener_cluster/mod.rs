//! The GardenerCluster reconciler: keeps Secret `kubeconfig-<runtime-id>` filled with an admin
//! kubeconfig from Gardener's `shoots/adminkubeconfig` and rotates it on time, as upstream's
//! kubeconfig controller does, with upstream's bugs fixed:
//!
//! - Gardener is asked only when a rotation is due (upstream: on every reconcile);
//! - a forced rotation replaces the kubeconfig in one update, so the key never disappears, and
//!   leaves `KubeconfigSecretRotated` (status by server-side apply: no conflicts);
//! - a finalizer and an owner reference delete the Secret with its GardenerCluster, even when
//!   the controller was down at that moment.

pub mod gardener;
pub mod metrics;
pub mod reconcile;
pub mod rotation;
pub mod secret;
pub mod status;

use std::sync::Arc;

use futures::SinkExt;
use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::Secret;
use kim_shared::api::GardenerCluster;
use kube::Api;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

use crate::{Context, Shutdown};
use metrics::KubeconfigMetrics;
use reconcile::Reconciler;

/// Name of this reconciler in metrics and logs.
pub const CONTROLLER: &str = "gardener_cluster";

/// Finalizer on a GardenerCluster: its Secret is deleted before the object goes, even when the
/// controller was down at deletion time (upstream has none; see docs/upstream-differences.md).
pub const FINALIZER: &str =
    "gardenercluster-controller.infrastructure-manager.kyma-project.io/deletion-hook";

/// The process's one GardenerCluster watch, read by two reconcilers: this one reconciles each
/// GardenerCluster it sees; the Runtime reconciler asks whether a Runtime's GardenerCluster
/// exists and is Ready, and is woken when one changes or goes. One cache instead of one per
/// reconciler saves a second copy of every GardenerCluster (at 10,000 Runtimes about 10 MB)
/// and a second watch connection.
pub struct ClusterWatch {
    /// The GardenerClusters, without managedFields.
    pub store: Store<GardenerCluster>,
    /// Created and changed GardenerClusters: this reconciler's trigger.
    pub applied: mpsc::Receiver<GardenerCluster>,
    /// Created, changed and deleted GardenerClusters: the Runtime reconciler's trigger.
    pub touched: mpsc::Receiver<GardenerCluster>,
    /// Runs the watch until `shutdown` or until both triggers are dropped.
    pub task: tokio::task::JoinHandle<()>,
}

/// Starts the GardenerCluster watch ([`ClusterWatch`]).
///
/// kube's shared reflector (`reflect_shared`) would do the fan-out but does not pass deletions
/// on, and the Runtime reconciler must see those (it recreates a deleted GardenerCluster). The
/// triggers are bounded: a slow reconciler slows the watch instead of queueing objects.
pub fn watch(ctx: &Context, shutdown: Shutdown) -> ClusterWatch {
    let clusters: Api<GardenerCluster> = Api::namespaced(ctx.kcp.clone(), &ctx.settings.namespace);
    // The cache without managedFields: a heap profile at 1,000 Runtimes put them at about
    // 10 KiB of each cached GardenerCluster, and no reconciler reads them.
    let (store, writer) = reflector::store::<GardenerCluster>();
    let events = watcher(
        clusters,
        watcher::Config::default().page_size(crate::LIST_PAGE_SIZE),
    )
    .default_backoff()
    .modify(|o| o.managed_fields_mut().clear())
    .reflect(writer);
    let (mut applied_tx, applied) = mpsc::channel(TRIGGER_BUFFER);
    let (mut touched_tx, touched) = mpsc::channel(TRIGGER_BUFFER);
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                event = events.next() => event,
            };
            let (object, deleted) = match event {
                None => return,
                Some(Err(e)) => {
                    tracing::debug!(watch = "gardenerclusters", error = %e, "watch failed; it retries with its own backoff");
                    continue;
                }
                Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => (o, false),
                Some(Ok(watcher::Event::Delete(o))) => (o, true),
                Some(Ok(watcher::Event::Init | watcher::Event::InitDone)) => continue,
            };
            // A dropped receiver (its reconciler stopped) only ends that trigger.
            let to_runtimes = touched_tx.send(object.clone());
            if deleted {
                let _ = to_runtimes.await;
            } else {
                let (_, _) = futures::join!(to_runtimes, applied_tx.send(object));
            }
            if applied_tx.is_closed() && touched_tx.is_closed() {
                return;
            }
        }
    });
    ClusterWatch {
        store,
        applied,
        touched,
        task,
    }
}

/// Objects a trigger holds before the watch waits for its reconciler.
const TRIGGER_BUFFER: usize = 256;

/// Runs the GardenerCluster reconciler until `shutdown`, triggered by `applied` (from
/// [`watch`]) and reading `store`.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: Shutdown,
    store: Store<GardenerCluster>,
    applied: mpsc::Receiver<GardenerCluster>,
) {
    let settings = &ctx.settings.gardener_cluster;
    let policy = settings.rotation;
    let workers = settings.workers.max(1);
    let metrics = Arc::new(KubeconfigMetrics::default());
    ctx.register_metrics(|r| metrics.register(r));
    let namespace = ctx.settings.namespace.clone();
    let secrets: Api<PartialObjectMeta<Secret>> = Api::namespaced(ctx.kcp.clone(), &namespace);
    // Watch only our Secrets, and only their metadata: a deleted or emptied Secret is noticed
    // at once, without caching kubeconfigs in memory.
    let managed = format!(
        "{}={}",
        kim_shared::names::LABEL_MANAGED_BY,
        kim_shared::names::MANAGED_BY_INFRASTRUCTURE_MANAGER
    );
    let reconciler = Arc::new(Reconciler::new(ctx.clone(), policy, metrics));
    let failing = reconciler.clone();
    let recovered = crate::gardener::health::retry_on_recovery(
        ctx.gardener_recoveries.clone(),
        ctx.metrics.clone(),
        CONTROLLER,
        move || failing.failing(),
    );
    let stream = applied.map(Ok::<_, watcher::Error>);
    Controller::for_stream(stream, store)
        .owns(secrets, watcher::Config::default().labels(&managed))
        .with_config(controller::Config::default().concurrency(workers))
        .reconcile_on(recovered)
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile::reconcile, reconcile::error_policy, reconciler)
        .for_each(|result| async move {
            if let Err(e) = result {
                // Reconcile failures are logged (without secrets) by `error_policy`; what
                // remains here are watch hiccups the controller retries by itself.
                tracing::debug!(controller = CONTROLLER, error = %e, "controller event");
            }
        })
        .await;
}
