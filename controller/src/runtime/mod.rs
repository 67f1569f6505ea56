//! The Runtime reconciler: Runtime -> Gardener Shoot, GardenerCluster, administrators and
//! OIDC in the new cluster, status; safe deletion.
//!
//! Watches Runtimes (KCP) and Shoots in the Gardener project namespace (mapped back by the
//! `infrastructuremanager.kyma-project.io/runtime-id` annotation), and hears of the
//! GardenerClusters from the GardenerCluster reconciler's watch, whose cache it shares, so
//! progress comes from events. Shoots and GardenerClusters are read from the watch caches:
//! a Ready Runtime costs no Gardener request.

pub mod acl;
pub mod admins;
pub mod audit_log;
pub mod classify;
pub mod cluster;
pub mod co_owned;
pub mod delete;
pub mod full_update;
pub mod kyma_system;
pub mod oidc;
pub mod reconcile;
pub mod registry_cache;
pub mod requeue;
pub mod runtime_cache;
pub mod seed;
pub mod shoot_cache;
pub mod status;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kim_shared::api::{GardenerCluster, Runtime};
use kim_shared::config::KimConfig;
use kim_shared::gardener::Shoot;
use kim_shared::names;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use runtime_cache::CachedRuntime;
use serde_json::json;
use shoot_cache::CachedShoot;
use tracing::Instrument;

use crate::gardener::limit::{WriteLimit, WriteLimitSettings};
use crate::records::{Backoff, Records};
use crate::stored::StatusApart;
use crate::{Context, Shutdown};
use status::StatusDraft;

/// `controller` label value in metrics.
pub const CONTROLLER: &str = "runtime";
/// The controller the Runtime condition Events name as their source (upstream's recorder).
pub const RUNTIME_EVENT_REPORTER: &str = "runtime-controller";
/// Field manager of the Runtime status.
pub const STATUS_FIELD_MANAGER: &str = "kim-controller";

/// A reconcile failed in a way only a retry can fix (status is not written this pass).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("cannot {action}: {source}")]
    Api {
        /// What we tried.
        action: &'static str,
        /// Why it failed.
        source: kube::Error,
    },
    /// A Shoot or status could not be serialized (a bug).
    #[error("cannot serialize: {0}")]
    Serialize(serde_json::Error),
    /// The stored Runtime does not read as one: the CRD's schema admitted something this
    /// controller's types refuse (a status written by hand or by another controller, a
    /// Runtime restored from a backup).
    #[error("the stored Runtime cannot be read: {0}")]
    Unreadable(#[from] kim_shared::api::Unreadable),
}

impl crate::metrics::ResultLabel for Error {
    fn result_label(&self) -> &'static str {
        match self {
            Self::Unreadable(_) => crate::metrics::RESULT_UNREADABLE,
            e => match e.kind() {
                classify::ApiErrorKind::Conflict => "conflict",
                classify::ApiErrorKind::Transient => "transient",
                classify::ApiErrorKind::Busy => "busy",
                _ => "error",
            },
        }
    }
}

impl Error {
    /// An API error while doing `action`.
    pub fn api(action: &'static str, source: kube::Error) -> Self {
        Self::Api { action, source }
    }

    fn kind(&self) -> classify::ApiErrorKind {
        match self {
            Self::Api { source, .. } => classify::classify(source),
            Self::Serialize(_) | Self::Unreadable(_) => classify::ApiErrorKind::Permanent,
        }
    }
}

/// Backoff after a write conflict: the watch usually brings the newer object within a
/// second; while it lags (a quiet watch under load), the Runtimes that conflicted do not all
/// write again every half second, together.
pub const CONFLICT_BACKOFF: Backoff = Backoff {
    first: Duration::from_millis(500),
    cap: Duration::from_secs(30),
};

/// Per-object backoff after a failed reconcile: 1 s, 2 s, 4 s ... capped at 5 min.
pub const BACKOFF: Backoff = Backoff {
    first: Duration::from_secs(1),
    cap: Duration::from_secs(300),
};

/// The hold of a Runtime's Gardener writes after permanent refusals of one generation.
#[derive(Debug, Clone, Copy)]
struct PermanentHold {
    generation: i64,
    /// Refusals of this generation so far.
    refusals: u32,
    until: Instant,
}

/// How long the Runtime reconciler waits for the Shoot watch to show its own patch.
const CACHE_LAG_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The Shoot a patch answered with.
struct PatchedShoot {
    uid: String,
    generation: i64,
    at: std::time::Instant,
}

/// What the Runtime reconciler remembers of one Runtime between reconciles. Kept by Runtime
/// name and found by runtime ID too (Shoot and GardenerCluster events carry the ID).
#[derive(Default)]
struct RuntimeRecord {
    /// The Runtime object this record is about: a Runtime created again under the same name
    /// starts with an empty record.
    uid: String,
    /// Runtime generation we last applied to its Shoot (the watch cache may lag).
    applied: Option<i64>,
    /// Shoot generation our last patch answered with, or, without one, when the Runtime
    /// became Ready (drift detection).
    ready_shoot_generation: Option<i64>,
    /// The Shoot our last patch answered with: the watch cache is behind while it shows that
    /// Shoot at an older generation.
    patched_shoot: Option<PatchedShoot>,
    /// A requeue is scheduled (queue depth).
    scheduled: bool,
    /// The count of runtime bootstrapper configuration changes
    /// ([`crate::bootstrapper::ConfigChanges`]) its cluster was last configured at (for a
    /// Runtime without the annotation of the configuration).
    bootstrapped: u64,
    /// Consecutive failed steps in the runtime cluster since the Runtime was last Ready.
    runtime_cluster_failures: u32,
    /// After a permanent refusal of a Gardener write: no write for this generation before
    /// then ([`requeue::PERMANENT_BACKOFF`]).
    backed_off: Option<PermanentHold>,
    /// Consecutive "try later" or transient answers to this Runtime's Gardener writes.
    refused: u32,
    /// No Gardener write before then (after a refusal, see [`requeue::BUSY_BACKOFF`]).
    busy_until: Option<Instant>,
    /// When a Shoot create that got no answer was sent: look for the Shoot before creating it
    /// again, and before the finalizer of a deleted Runtime goes.
    create_unsure: Option<Instant>,
    /// (generation, when): the objects the Shoot references were written for this generation.
    references: Option<(i64, Instant)>,
    /// When we created the Shoot: until the watch shows it, another create would only be
    /// refused (after passing through Gardener's admission once more).
    created: Option<Instant>,
    /// The ACL addresses our last successful Shoot patch carried, and the generation of the
    /// Shoot it answered with: until the watch shows that patch, the cached Shoot still has the
    /// addresses before it.
    acl_applied: Option<(kim_shared::convert::AclAddresses, Option<i64>)>,
    /// The generation whose stop was counted in `unexpected_stops_total`: a reconcile right
    /// after the `Failed` status write may still read `Pending` from the cache.
    stopped: Option<i64>,
    /// The deletion read the GardenerCluster live and found none: the next passes trust the
    /// watch cache (a deleting Shoot's status updates start a pass each, for up to an hour).
    gardener_cluster_gone: bool,
    /// The runtime bootstrapper configuration (digest) whose manifests were last applied to
    /// the cluster: a cluster still noted with an older one gets them once, not on every pass
    /// until its Deployment is rolled out.
    manifests_applied_for: Option<String>,
}

/// State of the Runtime reconciler.
pub struct Reconciler {
    /// The shared process context.
    pub ctx: Arc<Context>,
    /// The KIM configuration.
    pub config: Arc<KimConfig>,
    shoots: shoot_cache::ShootCache,
    /// Which Shoot generations gardener-apiserver raised without a change of the spec (not
    /// drift).
    generations: shoot_cache::ShootGenerations,
    clusters: Store<StatusApart<GardenerCluster>>,
    /// Publishes the condition Events of Runtimes (as upstream's `runtime-controller`).
    events: crate::context::EventPublisher,
    /// Resolves to `true` once the Shoot and GardenerCluster caches hold their first full
    /// list, to `false` if the controller stops first.
    caches_ready: Shared<BoxFuture<'static, bool>>,
    records: Arc<Records<RuntimeRecord>>,
    /// Runtimes whose record has `scheduled` set.
    scheduled: AtomicUsize,
    in_flight: AtomicUsize,
    /// Shoot creates in flight across all Runtimes, adapted to Gardener's answers.
    create_limit: Arc<WriteLimit>,
    /// The regions of the Seeds our Shoots run on (for `kyma-provisioning-info`).
    seed_regions: kyma_system::SeedRegions,
    /// The regions with a usable Seed, per provider (for `enforceSeedLocation`).
    usable_regions: seed::UsableRegions,
    /// The API server ACL ConfigMap, when the ACL is managed.
    acl: Option<acl::AclConfigMap>,
    /// Changes of the runtime bootstrapper's configuration seen so far.
    bootstrapper_changes: crate::bootstrapper::ConfigChanges,
    /// KALM's `AuditLog` pool, with `--dedicated-audit-logging-enabled`.
    audit_logs: Option<audit_log::PoolWatch>,
    /// When this replica began to reconcile (after it took the lead): a Shoot create an
    /// earlier leader sent may still be admitted until [`requeue::UNANSWERED_CREATE_LANDS_WITHIN`]
    /// after it.
    began: Began,
}

/// The moment a reconciler began, on both clocks.
#[derive(Clone, Copy)]
struct Began {
    at: Instant,
    wall: jiff::Timestamp,
}

/// Why a deleted Runtime without a Shoot keeps its finalizer a while.
#[derive(Debug, PartialEq)]
pub enum CreateMayLand {
    /// This replica sent a create that got no final answer.
    Unanswered(Duration),
    /// The Runtime existed before this replica began: the replica before it may have sent a
    /// create whose answer died with it.
    ByEarlierLeader(Duration),
}

/// Whether the Runtime was stored before `began`. `creationTimestamp` has whole seconds: one
/// stored in the second `began` falls in counts as later.
fn existed_before(runtime: &Runtime, began: jiff::Timestamp) -> bool {
    let began_second = began.as_second();
    runtime
        .metadata
        .creation_timestamp
        .as_ref()
        .is_some_and(|created| created.0.as_second() < began_second)
}

impl crate::watch::Forget<CachedRuntime> for Reconciler {
    fn forget(&self, runtime: &CachedRuntime) {
        self.forget_runtime(runtime);
    }

    /// Drops the records of Runtimes not cached and the state series of runtime IDs no cached
    /// Runtime has.
    fn forget_missing(&self, present: &[Arc<CachedRuntime>]) {
        let names: HashSet<String> = present.iter().map(|rt| rt.name_any()).collect();
        let ids: HashSet<String> = present.iter().map(|rt| runtime_id(&**rt)).collect();
        for name in self.records.keys() {
            if !names.contains(&name) {
                self.forget_record(&name);
            }
        }
        for id in self.ctx.metrics.runtime_state_ids() {
            if !ids.contains(&id) {
                self.ctx.metrics.remove_runtime_state(&id);
            }
        }
        self.publish_queue_depth();
    }
}

/// Runs the Runtime reconciler until `shutdown`.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: Shutdown,
    shoot_writer: reflector::store::Writer<CachedShoot>,
    shoot_cache: shoot_cache::ShootCache,
    notices: shoot_cache::ClusterNotices,
    clusters: Store<StatusApart<GardenerCluster>>,
    cluster_changes: crate::watch::Following,
) {
    let ns = ctx.settings.namespace.clone();
    let records: Arc<Records<RuntimeRecord>> = Arc::default();
    ctx.metrics
        .track_reconcile_result(CONTROLLER, crate::metrics::RESULT_UNREADABLE);

    let (rt_store, rt_writer) = reflector::store::<CachedRuntime>();
    let generations = shoot_cache::ShootGenerations::default();
    let mut notes = shoot_cache::ShootWatchNotes::new(notices, generations.clone());
    let shoot_store = shoot_writer.as_reader();
    let shoots = crate::watch::gardener_backoff(
        crate::watch::events(
            Api::<CachedShoot>::namespaced(ctx.gardener_watch.clone(), &ctx.gardener_namespace),
            watcher::Config::default(),
            "shoots",
            ctx.metrics.clone(),
        ),
        ctx.gardener_recoveries.clone(),
    )
    .modify(CachedShoot::trim)
    .reflect(shoot_writer)
    .inspect(move |event| {
        if let Ok(event) = event {
            notes.note(event);
        }
    });
    let shoots = crate::watch::settled(shoots, shoot_store, crate::watch::Deletions::Trigger);
    let shoots = crate::watch::without_errors(shoots, "shoots", ctx.metrics.clone());

    let (acl, acl_changes) = acl::watch(&ctx, rt_store.clone()).unzip();
    let bootstrapper_changes = crate::bootstrapper::ConfigChanges::default();
    let bootstrapper_triggers = ctx.settings.runtime.bootstrapper.enabled.then(|| {
        crate::bootstrapper::watch_config(
            ctx.kcp.clone(),
            ctx.settings.namespace.clone(),
            &ctx.settings.runtime.bootstrapper,
            rt_store.clone(),
            bootstrapper_changes.clone(),
            ctx.metrics.clone(),
        )
    });
    let (audit_logs, audit_log_watch) = ctx
        .settings
        .runtime
        .dedicated_audit_logging
        .then(|| audit_log::PoolWatch::start(&ctx, shutdown.clone()))
        .unzip();
    let reconciler = Arc::new(Reconciler {
        audit_logs,
        config: ctx.config.clone(),
        ctx: ctx.clone(),
        caches_ready: caches_ready(
            shoot_cache.filled(),
            cluster_changes.listed,
            shutdown.clone(),
        ),
        acl,
        bootstrapper_changes,
        shoots: shoot_cache,
        generations,
        clusters,
        records: records.clone(),
        scheduled: AtomicUsize::new(0),
        in_flight: AtomicUsize::new(0),
        create_limit: WriteLimit::new(WriteLimitSettings::default()),
        seed_regions: kyma_system::SeedRegions::default(),
        usable_regions: seed::UsableRegions::default(),
        began: Began {
            at: Instant::now(),
            wall: jiff::Timestamp::now(),
        },
        events: crate::context::EventPublisher::new(
            ctx.kcp.clone(),
            Reporter::from(RUNTIME_EVENT_REPORTER),
        ),
    });
    reconciler.publish_create_limit();
    let (runtimes, sweep) = crate::watch::own_kind(
        Api::<CachedRuntime>::namespaced(ctx.kcp.clone(), &ns),
        rt_writer,
        reconciler.clone(),
        None,
        "runtimes",
        ctx.metrics.clone(),
        shutdown.clone(),
    );
    let waiting = reconciler.clone();
    let ns_recovered = ns.clone();
    let recovered = crate::gardener::health::retry_on_recovery(
        ctx.gardener_recoveries.clone(),
        ctx.metrics.clone(),
        CONTROLLER,
        move || {
            waiting
                .waiting_on_gardener()
                .iter()
                .map(|name| ObjectRef::new(name).within(&ns_recovered))
                .collect()
        },
    );
    let shoot_records = records.clone();
    let acl_records = records.clone();
    let bootstrapper_records = records.clone();
    let gc_records = records;
    let ns_shoot = ns.clone();
    let ns_gc = ns;
    let config = ControllerConfig::default()
        .concurrency(ctx.settings.runtime.workers)
        .debounce(Duration::from_millis(50));
    let run = Controller::for_stream(runtimes, rt_store.clone())
        .with_config(config)
        .watches_stream(shoots, move |shoot: CachedShoot| {
            let id = shoot
                .annotations()
                .get(names::SHOOT_ANNOTATION_RUNTIME_ID)?
                .clone();
            Some(runtime_ref(&shoot_records, &id, &ns_shoot))
        })
        .reconcile_on(
            cluster_changes
                .changed
                .map(move |name| runtime_ref(&gc_records, &name, &ns_gc)),
        )
        .reconcile_on(recovered)
        .reconcile_on(
            futures::stream::iter(acl_changes)
                .flatten()
                .inspect(move |r| acl_records.release(&r.name)),
        )
        .reconcile_on(
            futures::stream::iter(bootstrapper_triggers)
                .flatten()
                .inspect(move |r| bootstrapper_records.release(&r.name)),
        )
        .graceful_shutdown_on(shutdown.clone().cancelled_owned())
        .run(reconcile, error_policy, reconciler)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "runtime controller event");
            }
        });
    crate::watch::run_until_stopped(run, rt_store, &shutdown).await;
    for task in std::iter::once(sweep).chain(audit_log_watch) {
        // They end on `shutdown` too; a panic in one is already logged.
        let _ = task.await;
    }
    tracing::info!("runtime reconciler stopped");
}

/// One future that all reconciles await for the first full lists of both caches (the Shoots',
/// and the GardenerClusters' that the GardenerCluster reconciler shares, `clusters_listed`):
/// `true` once both are filled, `false` when `shutdown` comes first.
///
/// `Store::wait_until_ready` (kube-runtime 5) keeps a single waker: of many reconciles waiting
/// on it at once only the last one is woken, the others stay parked for good (after a restart
/// with a backlog, every worker but one would hang there and the controller go silent). A
/// [`Shared`] future polls the Shoot store with its own waker and wakes every waiter; the
/// GardenerCluster store is polled by its own reconciler's Controller, so that watch tells
/// when it is filled instead.
///
/// It also ends on `shutdown`: a graceful shutdown stops polling the watch streams but keeps
/// them (and so the stores' writers) alive until every in-flight reconcile has returned, so a
/// reconcile parked on a cache that was still listing would wait for ever and the process
/// would never exit (seen after SIGTERM during a restart at 10,000 Runtimes while
/// gardener-apiserver answered 503s).
fn caches_ready(
    shoots_filled: Shared<BoxFuture<'static, bool>>,
    mut clusters_listed: tokio::sync::watch::Receiver<bool>,
    shutdown: Shutdown,
) -> Shared<BoxFuture<'static, bool>> {
    async move {
        let filled = async {
            // An error means the watch is gone: the controller is stopping.
            shoots_filled.await && clusters_listed.wait_for(|listed| *listed).await.is_ok()
        };
        tokio::select! {
            filled = filled => filled,
            _ = shutdown.cancelled() => false,
        }
    }
    .boxed()
    .shared()
}

/// The runtime ID label, or the Runtime's name when the label is missing.
fn runtime_id(runtime: &impl Resource) -> String {
    runtime
        .labels()
        .get(names::LABEL_RUNTIME_ID)
        .cloned()
        .unwrap_or_else(|| runtime.name_any())
}

fn runtime_ref(
    records: &Records<RuntimeRecord>,
    runtime_id: &str,
    ns: &str,
) -> ObjectRef<CachedRuntime> {
    let name = records
        .key_of(runtime_id)
        .unwrap_or_else(|| runtime_id.to_owned());
    // An event of the Runtime's Shoot or GardenerCluster: not the Runtime's own write.
    records.release(&name);
    ObjectRef::new(&name).within(ns)
}

async fn reconcile(
    cached: Arc<CachedRuntime>,
    reconciler: Arc<Reconciler>,
) -> Result<Action, Error> {
    let runtime_id = runtime_id(&*cached);
    // `object`, not `name`: the JSON lines name the span itself `name`.
    let span = tracing::info_span!(
        "reconcile",
        controller = CONTROLLER,
        namespace = %cached.namespace().unwrap_or_default(),
        object = %cached.name_any(),
        runtime_id = %runtime_id,
        shoot = %cached.shoot_name(),
    );
    reconciler.in_flight.fetch_add(1, Ordering::Relaxed);
    let started = Instant::now();
    let result = match cached.to_runtime() {
        Ok(runtime) => {
            reconcile_inner(&runtime, &reconciler, &runtime_id)
                .instrument(span)
                .await
        }
        Err(e) => {
            reconciler.report_unreadable(&cached, &e).await;
            // A deleted Runtime is deleted all the same: its deletion reads the metadata and
            // the spec, and writes conditions of its own.
            match cached.without_status() {
                Ok(runtime) if runtime.metadata.deletion_timestamp.is_some() => {
                    reconcile_inner(&runtime, &reconciler, &runtime_id)
                        .instrument(span)
                        .await
                }
                _ => Err(Error::Unreadable(e)),
            }
        }
    };
    reconciler.in_flight.fetch_sub(1, Ordering::Relaxed);
    reconciler
        .ctx
        .metrics
        .observe_reconcile_result(CONTROLLER, &result, started.elapsed());
    if let Ok(action) = &result {
        reconciler.records.succeeded(&cached.name_any());
        let scheduled = *action != Action::await_change();
        // A Runtime that was finalized has no record any more and needs no requeue.
        if scheduled
            || reconciler
                .records
                .read(&cached.name_any(), |_| ())
                .is_some()
        {
            reconciler.set_scheduled(&*cached, scheduled);
        }
    }
    reconciler.publish_queue_depth();
    result
}

async fn reconcile_inner(
    runtime: &Runtime,
    reconciler: &Arc<Reconciler>,
    runtime_id: &str,
) -> Result<Action, Error> {
    // Never decide on an empty cache: "no Shoot" must mean no Shoot. Stopping before the
    // caches are filled decides nothing; the next leader reconciles this Runtime.
    if !reconciler.caches_ready.clone().await {
        return Ok(Action::await_change());
    }
    let key = runtime.name_any();
    if let Some(left) = reconciler
        .records
        .begin_pass(&key, crate::records::inputs(&runtime.metadata))
    {
        return Ok(Action::requeue(left));
    }
    // Only a Runtime's own ID routes Shoot and GardenerCluster events to it: a Runtime carrying
    // another's would take that runtime's events away.
    if runtime.own_runtime_id().is_ok() {
        reconciler
            .records
            .set_alias(&runtime.name_any(), runtime_id);
    }
    let now = jiff::Timestamp::now();
    let mut draft = StatusDraft::new(runtime, now);
    let shoot = reconciler.shoot(&runtime.spec.shoot.name);
    let deleting = runtime.meta().deletion_timestamp.is_some();
    let outcome = if deleting {
        match delete::run(reconciler, runtime, shoot, &mut draft, now).await {
            Ok(delete::Deleted::Finalized) => return Ok(Action::await_change()),
            Ok(delete::Deleted::Pending(a)) => Ok(a),
            Err(e) => Err(e),
        }
    } else {
        reconcile::apply(reconciler, runtime, shoot, &mut draft).await
    };
    draft.observed();
    match outcome {
        Ok(action) => {
            reconciler.write_status(runtime, &draft).await?;
            Ok(action)
        }
        Err(e) => {
            // The state a failing pass reached is still published with its Events and state
            // series: a deletion's `Terminating` (the alert on deletions that take too long
            // counts Runtimes by state), an update's `Pending` (already written early).
            let stored = runtime.status.as_ref().map(|s| s.state).unwrap_or_default();
            if deleting || draft.current_state() != stored {
                if let Err(write) = reconciler.write_status(runtime, &draft).await {
                    tracing::debug!(error = %write, "cannot write the status of a failing pass");
                }
            } else {
                // The stored state, for a Runtime whose passes fail since this process started
                // (an outage, a new leader): it is counted by state all the same.
                reconciler.publish_state(runtime, &StatusDraft::new(runtime, now));
            }
            Err(e)
        }
    }
}

fn error_policy(runtime: Arc<CachedRuntime>, err: &Error, reconciler: Arc<Reconciler>) -> Action {
    let failures = reconciler.records.failed(&runtime.name_any());
    let runtime_id = runtime_id(&*runtime);
    match err.kind() {
        classify::ApiErrorKind::Conflict => {
            let delay = CONFLICT_BACKOFF.random_delay(failures);
            tracing::info!(controller = CONTROLLER, runtime_id, shoot = %runtime.shoot_name(), error = %crate::redact::logged(err), retry_in = ?delay, "conflict; retrying with fresh data");
            Action::requeue(delay)
        }
        kind => {
            let delay = BACKOFF.random_delay(failures);
            if kind == classify::ApiErrorKind::Permanent {
                tracing::error!(controller = CONTROLLER, runtime_id, shoot = %runtime.shoot_name(), error = %crate::redact::logged(err), retry_in = ?delay, "reconcile failed");
            } else {
                tracing::warn!(controller = CONTROLLER, runtime_id, shoot = %runtime.shoot_name(), error = %crate::redact::logged(err), retry_in = ?delay, "reconcile failed; retrying");
            }
            Action::requeue(delay)
        }
    }
}

impl Reconciler {
    /// Tells the Runtime's readers that it cannot be read.
    async fn report_unreadable(&self, runtime: &CachedRuntime, why: &kim_shared::api::Unreadable) {
        let failures = self.records.failures(&runtime.name_any());
        crate::stored::report_unreadable(&self.ctx.recorder, runtime, failures, why).await;
    }

    /// The runtime ID label, or the Runtime's name when the label is missing.
    pub fn runtime_id(&self, runtime: &Runtime) -> String {
        runtime_id(runtime)
    }

    /// Runtimes in the Runtime's namespace, the answers to our writes read as the cache reads
    /// them: a status our types refuse does not fail a write that succeeded.
    pub fn runtimes(&self, runtime: &Runtime) -> Api<CachedRuntime> {
        Api::namespaced(
            self.ctx.kcp.clone(),
            &runtime.namespace().unwrap_or_default(),
        )
    }

    /// GardenerClusters in the Runtime's namespace, read as `K` (a created one is typed; read
    /// ones are [`StatusApart`], so that one whose status does not read is still seen).
    pub fn gardener_clusters<K>(&self, runtime: &Runtime) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Api::namespaced(
            self.ctx.kcp.clone(),
            &runtime.namespace().unwrap_or_default(),
        )
    }

    /// Shoots in the Gardener project namespace.
    pub fn shoots_api(&self) -> Api<Shoot> {
        Api::namespaced(self.ctx.gardener.clone(), &self.ctx.gardener_namespace)
    }

    /// ConfigMaps in the Gardener project namespace.
    pub fn config_maps_api(&self) -> Api<ConfigMap> {
        Api::namespaced(self.ctx.gardener.clone(), &self.ctx.gardener_namespace)
    }

    /// The Shoot from the watch cache (only the fields [`CachedShoot`] keeps).
    pub fn shoot(&self, name: &str) -> Option<Arc<Shoot>> {
        self.shoots
            .get(&ObjectRef::new(name).within(&self.ctx.gardener_namespace))
            .map(|c| Arc::new(c.to_shoot()))
    }

    /// The whole Shoot read from Gardener (the watch cache keeps a slim copy, see
    /// [`CachedShoot`]): before patching it, and to confirm absence before removing a
    /// finalizer.
    pub async fn get_shoot_live(&self, name: &str) -> Result<Option<Shoot>, kube::Error> {
        self.shoots_api().get_opt(name).await
    }

    /// The GardenerCluster from the watch cache.
    pub fn gardener_cluster(
        &self,
        runtime: &Runtime,
        runtime_id: &str,
    ) -> Option<Arc<StatusApart<GardenerCluster>>> {
        self.clusters
            .get(&ObjectRef::new(runtime_id).within(&runtime.namespace().unwrap_or_default()))
    }

    /// The deletion found no GardenerCluster of `runtime` in a live read.
    pub fn gardener_cluster_gone(&self, runtime: &Runtime) -> bool {
        self.record(runtime, |record| record.gardener_cluster_gone)
    }

    /// Notes that a live read found no GardenerCluster of `runtime`.
    pub fn note_gardener_cluster_gone(&self, runtime: &Runtime) {
        self.record(runtime, |record| record.gardener_cluster_gone = true);
    }

    /// Creates or updates a ConfigMap in the Gardener project namespace by server-side apply.
    /// One that already holds the same YAML documents is left alone: upstream's serialiser
    /// quotes differently (`""` where ours writes `''`), and rewriting the structured-auth
    /// ConfigMap of every Shoot upstream created would change its content for nothing.
    /// `before_create`: no Shoot references the ConfigMap yet, so it is written without that
    /// read (one Gardener request less per new Runtime).
    pub async fn apply_config_map(
        &self,
        cm: &ConfigMap,
        before_create: bool,
    ) -> Result<(), kube::Error> {
        let name = cm.name_any();
        if !before_create
            && let Some(live) = self.config_maps_api().get_opt(&name).await?
            && same_yaml_data(live.data.as_ref(), cm.data.as_ref())
        {
            return Ok(());
        }
        let mut body = serde_json::to_value(cm).unwrap_or_default();
        body["apiVersion"] = json!("v1");
        body["kind"] = json!("ConfigMap");
        self.config_maps_api()
            .patch(
                &name,
                &PatchParams::apply(names::FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map(|_| ())
    }

    /// Remaining hold after a permanent error for the Runtime's current generation (a forced
    /// patch ignores it).
    fn backoff_remaining(&self, runtime: &Runtime) -> Option<Duration> {
        if runtime
            .annotations()
            .contains_key(names::ANNOTATION_FORCE_PATCH_RECONCILIATION)
        {
            return None;
        }
        let hold = self.record(runtime, |record| record.backed_off)?;
        let now = Instant::now();
        (Some(hold.generation) == runtime.metadata.generation && hold.until > now)
            .then(|| hold.until - now)
    }

    /// Holds the Runtime's Gardener writes after a permanent refusal: 1 minute, doubling for
    /// each further refusal of the same generation up to 30 minutes (a new generation starts
    /// over). Returns the hold.
    fn back_off(&self, runtime: &Runtime) -> Duration {
        let Some(generation) = runtime.metadata.generation else {
            return requeue::PERMANENT_BACKOFF.first;
        };
        self.record(runtime, |record| {
            let refusals = match record.backed_off {
                Some(h) if h.generation == generation => h.refusals.saturating_add(1),
                _ => 1,
            };
            let hold = requeue::PERMANENT_BACKOFF.random_delay(refusals);
            record.backed_off = Some(PermanentHold {
                generation,
                refusals,
                until: Instant::now() + hold,
            });
            hold
        })
    }

    /// Remaining hold after Gardener refused one of this Runtime's writes.
    fn busy_hold(&self, runtime: &Runtime) -> Option<Duration> {
        let until = self.record(runtime, |record| record.busy_until)?;
        until.checked_duration_since(Instant::now())
    }

    /// Gardener refused a write of this Runtime with "try later" (`kind` Busy, counted in
    /// `gardener_busy_total` under `operation`) or a transient error: one more refusal, and the
    /// hold until the next attempt, which is returned.
    fn gardener_refused(
        &self,
        runtime: &Runtime,
        kind: classify::ApiErrorKind,
        operation: &str,
    ) -> Duration {
        if kind == classify::ApiErrorKind::Busy {
            self.ctx.metrics.count_gardener_busy(operation);
        }
        self.record(runtime, |record| {
            record.refused = record.refused.saturating_add(1);
            let wait = requeue::BUSY_BACKOFF.random_delay(record.refused);
            record.busy_until = Some(Instant::now() + wait);
            wait
        })
    }

    /// The Runtimes whose last reconcile failed or whose Gardener writes were refused, with
    /// their hold lifted: Gardener answers again, so they retry now. Failure and refusal counts
    /// stay until an answer resets them, so a Gardener that is still busy meets the same
    /// backoff as before.
    fn waiting_on_gardener(&self) -> Vec<String> {
        self.records.select(|failures, record| {
            let waiting = failures > 0 || record.refused > 0;
            if waiting {
                record.busy_until = None;
            }
            waiting
        })
    }

    /// Gardener answered a write of this Runtime: the backoff starts from the beginning.
    fn gardener_answered(&self, runtime: &Runtime) {
        self.record(runtime, |record| {
            record.refused = 0;
            record.busy_until = None;
            record.create_unsure = None;
            // A write of this generation went through (a force-patch, say): the hold after
            // an earlier refusal of it is over, and a later refusal starts anew.
            record.backed_off = None;
        });
    }

    /// Whether to look for the Shoot before creating it: a create got no answer, or one
    /// succeeded longer than [`requeue::CREATED_WATCH_WAIT`] ago and the watch has not shown
    /// the Shoot yet.
    fn create_unsure(&self, runtime: &Runtime) -> bool {
        self.record(runtime, |record| {
            record.create_unsure.is_some() || record.created.is_some()
        })
    }

    /// Time left to wait for the watch event of a Shoot we created.
    fn awaiting_created(&self, runtime: &Runtime) -> Option<Duration> {
        let created = self.record(runtime, |record| record.created)?;
        (created + requeue::CREATED_WATCH_WAIT).checked_duration_since(Instant::now())
    }

    fn shoot_created(&self, runtime: &Runtime) {
        self.record(runtime, |record| record.created = Some(Instant::now()));
    }

    fn set_create_unsure(&self, runtime: &Runtime, sent: Instant) {
        self.record(runtime, |record| record.create_unsure = Some(sent));
    }

    /// Time left in which a Shoot create of this Runtime that got no answer may still be
    /// admitted ([`requeue::UNANSWERED_CREATE_LANDS_WITHIN`]): one this replica sent, or, for
    /// a Runtime older than this replica's lead, one the replica before may have sent (what it
    /// knew died with it).
    fn create_may_land(&self, runtime: &Runtime) -> Option<CreateMayLand> {
        let left = |sent: Instant| {
            (sent + requeue::UNANSWERED_CREATE_LANDS_WITHIN).checked_duration_since(Instant::now())
        };
        if let Some(sent) = self.record(runtime, |record| record.create_unsure) {
            return left(sent).map(CreateMayLand::Unanswered);
        }
        existed_before(runtime, self.began.wall)
            .then(|| left(self.began.at))
            .flatten()
            .map(CreateMayLand::ByEarlierLeader)
    }

    /// Whether the objects the Shoot references were written for the current generation.
    fn references_written(&self, runtime: &Runtime) -> bool {
        let generation = runtime.metadata.generation;
        self.record(runtime, |record| {
            record
                .references
                .is_some_and(|(g, _)| Some(g) == generation)
        })
    }

    fn references_applied(&self, runtime: &Runtime) {
        if let Some(g) = runtime.metadata.generation {
            self.record(runtime, |record| {
                record.references = Some((g, Instant::now()))
            });
        }
    }

    fn forget_references(&self, runtime: &Runtime) {
        self.record(runtime, |record| record.references = None);
    }

    /// Time left until the referenced objects written for this generation have existed for
    /// [`requeue::REFERENCES_LEAD`].
    fn references_settling(&self, runtime: &Runtime) -> Option<Duration> {
        let generation = runtime.metadata.generation;
        let written = self.record(runtime, |record| record.references)?;
        if Some(written.0) != generation {
            return None;
        }
        (written.1 + requeue::REFERENCES_LEAD).checked_duration_since(Instant::now())
    }

    /// Publishes the create limit and the creates in flight.
    fn publish_create_limit(&self) {
        let m = &self.ctx.metrics;
        m.shoot_create_limit
            .set(i64::from(self.create_limit.limit()));
        m.shoot_creates_in_flight
            .set(i64::from(self.create_limit.in_flight()));
    }

    fn applied_generation(&self, runtime: &Runtime) -> Option<i64> {
        self.record(runtime, |record| record.applied)
    }

    /// The ACL addresses our last Shoot patch carried, with the generation of its answer.
    fn acl_applied(
        &self,
        runtime: &Runtime,
    ) -> Option<(kim_shared::convert::AclAddresses, Option<i64>)> {
        self.record(runtime, |record| record.acl_applied.clone())
    }

    fn record_acl_applied(
        &self,
        runtime: &Runtime,
        applied: Option<(kim_shared::convert::AclAddresses, Option<i64>)>,
    ) {
        self.record(runtime, |record| record.acl_applied = applied);
    }

    /// The runtime bootstrapper's configuration is not the one this Runtime's cluster was last
    /// configured with: a Ready Runtime's next pass configures it again. Its annotation says
    /// which one that was; a Runtime without it (configured before the annotation existed) is
    /// outdated once the configuration changes while this replica leads.
    fn bootstrapper_outdated(&self, runtime: &Runtime) -> bool {
        let (Some(digest), changes) = self.bootstrapper_changes.now() else {
            return false;
        };
        match runtime
            .annotations()
            .get(names::ANNOTATION_RUNTIME_BOOTSTRAPPER_CONFIG)
        {
            Some(applied) => *applied != digest,
            None => changes > 0 && self.record(runtime, |record| record.bootstrapped) < changes,
        }
    }

    /// The manifests of configuration `digest` are to be applied to this Runtime's cluster
    /// because it is noted with an older configuration ([`Self::bootstrapper_outdated`]) and
    /// they were not applied for `digest` yet.
    fn manifests_outdated(&self, runtime: &Runtime, digest: Option<&String>) -> bool {
        digest.is_some()
            && self.bootstrapper_outdated(runtime)
            && self.record(runtime, |record| {
                record.manifests_applied_for.as_ref() != digest
            })
    }

    /// The manifests of configuration `digest` were applied to this Runtime's cluster.
    fn manifests_applied(&self, runtime: &Runtime, digest: Option<String>) {
        self.record(runtime, |record| record.manifests_applied_for = digest);
    }

    /// The cluster was configured with the bootstrapper configuration `seen`
    /// ([`crate::bootstrapper::ConfigChanges::now`]): remembered, and written onto the Runtime
    /// for the replica that leads next. A failed write is logged; the next leader then
    /// configures the cluster once more.
    async fn record_bootstrapped(&self, runtime: &Runtime, seen: (Option<String>, u64)) {
        let (digest, changes) = seen;
        self.record(runtime, |record| {
            record.bootstrapped = record.bootstrapped.max(changes);
        });
        let Some(digest) = digest else { return };
        let key = names::ANNOTATION_RUNTIME_BOOTSTRAPPER_CONFIG;
        if runtime.annotations().get(key) == Some(&digest) {
            return;
        }
        if let Err(e) = self.annotate(runtime, key, json!(digest)).await {
            tracing::info!(error = %e, "cannot note the runtime bootstrapper configuration on the Runtime");
        }
    }

    /// Sets the Runtime's annotation `key` to `value` (`null` removes it) by a merge patch.
    async fn annotate(
        &self,
        runtime: &Runtime,
        key: &str,
        value: serde_json::Value,
    ) -> Result<(), kube::Error> {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        self.runtimes(runtime)
            .patch(
                &runtime.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map(|_| ())
    }

    /// A Shoot was created for the Runtime: what was patched or seen of an earlier Shoot of
    /// the name says nothing about this one.
    fn record_shoot_created(&self, runtime: &Runtime) {
        self.record(runtime, |record| {
            record.acl_applied = None;
            record.ready_shoot_generation = None;
            record.patched_shoot = None;
        });
    }

    fn record_applied(&self, runtime: &Runtime, shoot: &Shoot) {
        self.record(runtime, |record| {
            if let Some(g) = runtime.metadata.generation {
                record.applied = Some(g);
            }
            // Our own patch is not drift.
            if let Some(g) = shoot.metadata.generation {
                record.ready_shoot_generation = Some(g);
                record.patched_shoot = shoot.metadata.uid.clone().map(|uid| PatchedShoot {
                    uid,
                    generation: g,
                    at: std::time::Instant::now(),
                });
            }
        });
    }

    /// Gardener refused for good to undo a change made to `shoot`: the Shoot as it is becomes
    /// the drift baseline, so the refused correction is not sent again at every pass.
    fn keep_drift(&self, runtime: &Runtime, shoot: &Shoot) {
        self.record(runtime, |record| {
            record.ready_shoot_generation = shoot.metadata.generation;
        });
    }

    /// Publishes a Warning Event on the Runtime that no condition carries (its note names
    /// objects and Gardener's answer, never credentials).
    async fn warn(&self, runtime: &Runtime, reason: &str, action: &str, note: String) {
        let event = Event {
            type_: EventType::Warning,
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        self.publish(runtime, &event).await;
    }

    /// Publishes `event` on the Runtime; a refusal is logged, not an error of the pass.
    async fn publish(&self, runtime: &Runtime, event: &Event) {
        if let Err(e) = self.events.publish(event, &runtime.object_ref(&())).await {
            tracing::info!(error = %e, "could not publish an Event");
        }
    }

    /// The Runtime became Ready on `shoot`. Its generation becomes the drift baseline only
    /// when there is none (a new Shoot, a start): a baseline our patch set stays, so a change
    /// someone made to the Shoot while the Runtime waited for Gardener is drift on the next
    /// pass, not the new normal. A generation Gardener raised without a change of the spec
    /// moves the baseline there ([`Self::shoot_drifted`]).
    fn record_ready(&self, runtime: &Runtime, shoot: &Shoot) {
        self.record(runtime, |record| {
            record.runtime_cluster_failures = 0;
            if record.ready_shoot_generation.is_none() {
                record.ready_shoot_generation = shoot.metadata.generation;
            }
        });
    }

    /// A step in the runtime cluster failed: the wait before the next attempt
    /// ([`requeue::RUNTIME_CLUSTER_BACKOFF`]). The Runtime is held for it: the status write
    /// of this pass (whose message may quote a request ID of the cluster's refusal) does not
    /// start the next one; a change of the Runtime, or an event of its Shoot, its
    /// GardenerCluster, the ACL or bootstrapper configuration ([`Records::release`]) does.
    fn runtime_cluster_failed(&self, runtime: &Runtime) -> Duration {
        let delay = self.record(runtime, |record| {
            record.runtime_cluster_failures = record.runtime_cluster_failures.saturating_add(1);
            requeue::RUNTIME_CLUSTER_BACKOFF.random_delay(record.runtime_cluster_failures)
        });
        self.records.hold(
            &runtime.name_any(),
            delay,
            crate::records::inputs(&runtime.metadata),
        );
        delay
    }

    /// Counts the Runtime's stop on an error nobody retries, once per generation.
    fn count_stop(&self, runtime: &Runtime) {
        let generation = runtime.metadata.generation.unwrap_or_default();
        let first = self.record(runtime, |r| {
            r.stopped.replace(generation) != Some(generation)
        });
        if first {
            self.ctx.metrics.unexpected_stops.inc();
        }
    }

    /// Runs `f` on the Runtime's record; a record of an earlier object of the same name is
    /// replaced by an empty one first.
    fn record<T>(&self, runtime: &impl Resource, f: impl FnOnce(&mut RuntimeRecord) -> T) -> T {
        let uid = runtime.uid().unwrap_or_default();
        self.records.with(&runtime.name_any(), |record| {
            if record.uid != uid {
                if record.scheduled {
                    self.scheduled.fetch_sub(1, Ordering::Relaxed);
                }
                *record = RuntimeRecord {
                    uid,
                    ..RuntimeRecord::default()
                };
            }
            f(record)
        })
    }

    fn set_scheduled(&self, runtime: &impl Resource, scheduled: bool) {
        let was = self.record(runtime, |record| {
            std::mem::replace(&mut record.scheduled, scheduled)
        });
        match (was, scheduled) {
            (false, true) => self.scheduled.fetch_add(1, Ordering::Relaxed),
            (true, false) => self.scheduled.fetch_sub(1, Ordering::Relaxed),
            _ => 0,
        };
    }

    /// Whether `shoot` (from the watch cache) is the Shoot our last patch answered with, at an
    /// older generation: the cache lags behind our own write. For at most
    /// [`CACHE_LAG_LIMIT`] after the patch: a watch that lags longer is broken, and the
    /// Runtime is judged on what it shows, as without the patch (a Shoot made anew under the
    /// name has another UID, one restored from a backup may carry an older generation).
    fn shoot_cache_behind(&self, runtime: &Runtime, shoot: &Shoot) -> bool {
        let (Some(current), Some(uid)) = (shoot.metadata.generation, shoot.metadata.uid.as_deref())
        else {
            return false;
        };
        self.record(runtime, |record| {
            record.patched_shoot.as_ref().is_some_and(|p| {
                p.uid == uid && current < p.generation && p.at.elapsed() < CACHE_LAG_LIMIT
            })
        })
    }

    /// A Ready Runtime whose Shoot's generation moved since it became Ready: someone changed
    /// the Shoot spec (upstream never corrects Ready runtimes; we re-apply). A generation one
    /// above, raised without a change of the spec (a Gardener operation annotation,
    /// [`shoot_cache::ShootGenerations`]), becomes the baseline.
    fn shoot_drifted(&self, runtime: &Runtime, shoot: &Shoot) -> bool {
        let ready = runtime
            .status
            .as_ref()
            .is_some_and(|s| s.state == kim_shared::api::RuntimeState::Ready);
        let Some(current) = shoot.metadata.generation else {
            return false;
        };
        let unchanged = self
            .generations
            .raised_without_spec_change(&shoot.name_any(), current);
        self.record(runtime, |record| match record.ready_shoot_generation {
            Some(seen) if ready && unchanged && current == seen + 1 => {
                record.ready_shoot_generation = Some(current);
                false
            }
            Some(seen) => ready && current > seen,
            None => {
                // First sight after a start: take the current Shoot as the baseline.
                if ready {
                    record.ready_shoot_generation = Some(current);
                }
                false
            }
        })
    }

    /// Drops what is kept about a Runtime that is gone: its record and its state series.
    fn forget_runtime(&self, runtime: &impl Resource) {
        self.forget_record(&runtime.name_any());
        if let Some(id) = runtime.labels().get(names::LABEL_RUNTIME_ID) {
            self.ctx.metrics.remove_runtime_state(id);
        }
    }

    fn forget_record(&self, name: &str) {
        if let Some(record) = self.records.forget(name)
            && record.scheduled
        {
            self.scheduled.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn publish_queue_depth(&self) {
        self.ctx.metrics.set_queue_depth(
            CONTROLLER,
            self.scheduled.load(Ordering::Relaxed) + self.in_flight.load(Ordering::Relaxed),
        );
    }

    /// Writes the draft as the Runtime's status (server-side apply on `/status`), nothing else
    /// (no Event, no metric).
    async fn apply_status(&self, runtime: &Runtime, draft: &StatusDraft) -> Result<(), Error> {
        let body = json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
            "kind": "Runtime",
            "status": draft.new,
        });
        // The answer is read for its managedFields only (whether upstream co-owns the status),
        // which the cached form of a Runtime leaves out.
        let api: Api<kube::core::PartialObjectMeta<Runtime>> = Api::namespaced(
            self.ctx.kcp.clone(),
            &runtime.namespace().unwrap_or_default(),
        );
        let (name, params, patch) = (
            runtime.name_any(),
            PatchParams::apply(STATUS_FIELD_MANAGER).force(),
            Patch::Apply(&body),
        );
        let apply = || api.patch_status(&name, &params, &patch);
        let written = apply()
            .await
            .map_err(|e| Error::api("write the Runtime status", e))?;
        let entries = written
            .metadata
            .managed_fields
            .as_deref()
            .unwrap_or_default();
        if co_owned::co_owned(entries, STATUS_FIELD_MANAGER, co_owned::Part::Status) {
            // Once per Runtime written by upstream: what it wrote and we do not goes now.
            let part = co_owned::Part::Status;
            match co_owned::take_over(&api, &written, STATUS_FIELD_MANAGER, part).await {
                Ok(true) => {
                    tracing::info!("status fields of another writer taken over");
                    apply()
                        .await
                        .map_err(|e| Error::api("write the Runtime status", e))?;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::info!(error = %e, "status fields of another writer not taken over")
                }
            }
        }
        Ok(())
    }

    /// Writes the status once if it changed, publishes one Event per changed condition and
    /// refreshes the state metric.
    async fn write_status(&self, runtime: &Runtime, draft: &StatusDraft) -> Result<(), Error> {
        if draft.changed() {
            self.apply_status(runtime, draft).await?;
            // Every way into `Failed` (conversion, audit log, Gardener's refusal or failed
            // operation, the bootstrapper, a foreign Shoot) is a stop, counted once per
            // generation.
            let was_failed = runtime
                .status
                .as_ref()
                .is_some_and(|s| s.state == kim_shared::api::RuntimeState::Failed);
            if draft.new.state == kim_shared::api::RuntimeState::Failed && !was_failed {
                self.count_stop(runtime);
            }
            if draft.completes_provisioning()
                && let Some(created) = runtime.metadata.creation_timestamp.as_ref()
            {
                self.ctx
                    .metrics
                    .observe_provisioning(elapsed_since(created.0));
            }
            for change in draft.changes() {
                let event = Event {
                    type_: if change.status == "False" {
                        EventType::Warning
                    } else {
                        EventType::Normal
                    },
                    reason: change.reason.clone(),
                    // Upstream's text: the condition's message and the Runtime.
                    note: Some(format!(
                        "{}: {}/{}",
                        change.message,
                        runtime.namespace().unwrap_or_default(),
                        runtime.name_any()
                    )),
                    action: change.type_.clone(),
                    secondary: None,
                };
                self.publish(runtime, &event).await;
            }
        }
        self.publish_state(runtime, draft);
        Ok(())
    }

    /// Sets the Runtime's state series to the state and last condition message of `draft`.
    fn publish_state(&self, runtime: &Runtime, draft: &StatusDraft) {
        if let Some(id) = runtime.runtime_id() {
            self.ctx
                .metrics
                .set_runtime_state(crate::metrics::RuntimeStateLabels {
                    runtimeId: id.to_owned(),
                    runtimeName: runtime.name_any(),
                    shoot: runtime.spec.shoot.name.as_str().into(),
                    provider: runtime.spec.shoot.provider.type_.as_str().into(),
                    state: draft.new.state.as_str().to_owned(),
                    message: draft.last_message().into(),
                });
        }
    }
}

/// Time from `since` until now; zero when `since` lies ahead (clock skew between the API
/// server and this process).
pub(crate) fn elapsed_since(since: jiff::Timestamp) -> std::time::Duration {
    std::time::Duration::try_from(jiff::Timestamp::now().duration_since(since)).unwrap_or_default()
}

/// Whether two ConfigMap `data` maps hold the same keys with equal texts or equal YAML
/// documents.
fn same_yaml_data(
    a: Option<&std::collections::BTreeMap<String, String>>,
    b: Option<&std::collections::BTreeMap<String, String>>,
) -> bool {
    let parse = |text: &str| serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text).ok();
    let empty = std::collections::BTreeMap::new();
    let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
    a.len() == b.len()
        && a.iter().all(|(key, text)| {
            b.get(key).is_some_and(|other| {
                text == other || parse(text).is_some_and(|v| Some(v) == parse(other))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_existed_before_a_reconciler_only_when_stored_in_an_earlier_second() {
        let runtime_created = |at: &str| {
            let mut runtime = Runtime::new("rt", Default::default());
            runtime.metadata.creation_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    at.parse().expect("timestamp"),
                ));
            runtime
        };
        let began: jiff::Timestamp = "2026-12-04T10:00:00.700Z".parse().expect("timestamp");
        assert!(existed_before(
            &runtime_created("2026-12-04T09:59:59Z"),
            began
        ));
        assert!(!existed_before(
            &runtime_created("2026-12-04T10:00:00Z"),
            began
        ));
        assert!(!existed_before(
            &runtime_created("2026-12-04T10:00:01Z"),
            began
        ));
        assert!(!existed_before(
            &Runtime::new("rt", Default::default()),
            began
        ));
    }

    #[test]
    fn yaml_data_compares_documents_not_quoting() {
        let map = |text: &str| {
            std::collections::BTreeMap::from([("config.yaml".to_owned(), text.to_owned())])
        };
        let upstream = map(
            "jwt:\n- claimMappings:\n    groups:\n      prefix: \"\"\n    username:\n      prefix: '-'\n",
        );
        let ours = map(
            "jwt:\n- claimMappings:\n    groups:\n      prefix: ''\n    username:\n      prefix: '-'\n",
        );
        assert!(same_yaml_data(Some(&upstream), Some(&ours)));
        let other = map("jwt:\n- claimMappings:\n    groups:\n      prefix: x\n");
        assert!(!same_yaml_data(Some(&upstream), Some(&other)));
        assert!(!same_yaml_data(None, Some(&ours)));
        assert!(same_yaml_data(None, None));
        let mut more = ours.clone();
        more.insert("other".into(), "a".into());
        assert!(!same_yaml_data(Some(&more), Some(&ours)));
    }

    /// Parks 25 waiters (as many as `--runtime-ctrl-workers-cnt` in the crash test) on empty
    /// caches, fills them, and counts the waiters that finish.
    async fn parked_waiters_wake(through_shared: bool) -> usize {
        let (shoots, mut shoot_writer) = reflector::store::<CachedShoot>();
        let (clusters, mut gc_writer) = reflector::store::<StatusApart<GardenerCluster>>();
        let (clusters_listed, listed) = tokio::sync::watch::channel(false);
        let filled = shoot_cache::ShootCache::new(shoots.clone()).filled();
        let ready = caches_ready(filled, listed, Shutdown::new());
        let waiters: Vec<_> = (0..25)
            .map(|_| {
                let ready = ready.clone();
                let shoots = shoots.clone();
                let clusters = clusters.clone();
                tokio::spawn(async move {
                    if through_shared {
                        assert!(ready.await, "the caches were filled");
                    } else {
                        let _ = shoots.wait_until_ready().await;
                        let _ = clusters.wait_until_ready().await;
                    }
                })
            })
            .collect();
        // Let every reconcile park on the caches before they fill, as after a restart.
        tokio::time::sleep(Duration::from_millis(50)).await;
        for event in [watcher::Event::Init, watcher::Event::InitDone] {
            shoot_writer.apply_watcher_event(&event);
        }
        for event in [watcher::Event::Init, watcher::Event::InitDone] {
            gc_writer.apply_watcher_event(&event);
        }
        clusters_listed.send_replace(true);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let woken = waiters.iter().filter(|w| w.is_finished()).count();
        waiters.iter().for_each(|w| w.abort());
        woken
    }

    #[tokio::test]
    async fn every_parked_reconcile_wakes_when_the_caches_fill() {
        assert_eq!(parked_waiters_wake(true).await, 25);
    }

    /// Why [`caches_ready`] exists: kube's `Store::wait_until_ready` wakes only the last of
    /// several parked waiters. If this fails after a kube upgrade, the wrapper can go.
    #[tokio::test]
    async fn kube_store_readiness_wakes_only_one_parked_waiter() {
        assert_eq!(parked_waiters_wake(false).await, 1);
    }

    /// The GardenerCluster reconciler waits on the same Shoot cache after the Runtime workers
    /// parked (a rotation falls due while a new leader lists): both wake.
    #[tokio::test]
    async fn both_reconcilers_wake_when_the_shoot_cache_fills() {
        let (shoots, mut shoot_writer) = reflector::store::<CachedShoot>();
        let (clusters_listed, listed) = tokio::sync::watch::channel(false);
        let cache = shoot_cache::ShootCache::new(shoots);
        let ready = caches_ready(cache.filled(), listed, Shutdown::new());
        let workers: Vec<_> = (0..25).map(|_| tokio::spawn(ready.clone())).collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let gardener_cluster = tokio::spawn(cache.filled());
        tokio::time::sleep(Duration::from_millis(50)).await;
        for event in [watcher::Event::Init, watcher::Event::InitDone] {
            shoot_writer.apply_watcher_event(&event);
        }
        clusters_listed.send_replace(true);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            gardener_cluster.is_finished(),
            "the GardenerCluster waiter woke"
        );
        let woken = workers.iter().filter(|w| w.is_finished()).count();
        workers.iter().for_each(|w| w.abort());
        assert_eq!(woken, 25, "every parked Runtime worker woke");
    }

    /// Caches that never fill (their list keeps failing) must not hold a reconcile past
    /// shutdown: the graceful shutdown waits for every in-flight reconcile.
    #[tokio::test]
    async fn parked_reconciles_return_on_shutdown_before_the_caches_fill() {
        let (shoots, _shoot_writer) = reflector::store::<CachedShoot>();
        let (_clusters_listed, listed) = tokio::sync::watch::channel(false);
        let shutdown = Shutdown::new();
        let ready = caches_ready(
            shoot_cache::ShootCache::new(shoots).filled(),
            listed,
            shutdown.clone(),
        );
        let waiters: Vec<_> = (0..5).map(|_| tokio::spawn(ready.clone())).collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(waiters.iter().all(|w| !w.is_finished()), "caches are empty");
        shutdown.cancel();
        for w in waiters {
            let filled = tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("a parked reconcile returns on shutdown")
                .expect("no panic");
            assert!(!filled, "stopping is not readiness");
        }
    }

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(BACKOFF.delay(1), Duration::from_secs(1));
        assert_eq!(BACKOFF.delay(2), Duration::from_secs(2));
        assert_eq!(BACKOFF.delay(5), Duration::from_secs(16));
        assert_eq!(BACKOFF.delay(50), Duration::from_secs(300));
    }
}
