//! Watch streams as controller triggers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use std::fmt::Debug;

use futures::{FutureExt, Stream, StreamExt, future};
use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::metrics::Metrics;

/// What a reconciler keeps per object (records, metric series, clients) and drops once the
/// object is gone: a deleted object is never reconciled again, so its reconciler is told.
pub trait Forget<K>: Send + Sync + 'static {
    /// The watch reports `obj` deleted (an object whose finalizer was removed by hand goes
    /// without a last reconcile).
    fn forget(&self, obj: &K);

    /// `present` is every cached object: drop what is kept about any other ([`sweep`]).
    fn forget_missing(&self, present: &[Arc<K>]);

    /// A (re)list has just replaced the cache as a whole.
    fn listed(&self) {}
}

/// For [`Forget::forget_missing`]: calls `forget` with each key of `kept` (what a reconciler
/// keeps, by [`crate::records::key`]) that no object of `present` has.
pub fn forget_absent<K: Resource>(present: &[Arc<K>], kept: Vec<String>, forget: impl Fn(&str)) {
    let present: std::collections::HashSet<String> =
        present.iter().map(|o| crate::records::key(&**o)).collect();
    for key in kept.iter().filter(|k| !present.contains(*k)) {
        forget(key);
    }
}

/// The events of a watch of `api` with `config`'s selectors, each (re)list in pages of
/// [`crate::LIST_PAGE_SIZE`], every complete one counted in
/// `infrastructure_manager_im_watch_lists_total{watch}`.
///
/// Not as streaming lists (KEP-3157), which client-go's informers use from 1.35 on: kube-rs 5
/// streams from resourceVersion 0, which an API server may answer from a watch cache that lags
/// behind (several replicas), where a paged list is a consistent read; and it passes over an
/// object that does not decode and completes the list without it, where a paged list fails as
/// a whole, so a Shoot missing from the cache could mean a Shoot that does not read.
pub fn events<K>(
    api: Api<K>,
    config: watcher::Config,
    watch: &'static str,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    metrics.track_lists(watch);
    watcher::watcher(api, config.page_size(crate::LIST_PAGE_SIZE)).inspect(move |event| {
        if let Ok(watcher::Event::InitDone) = event {
            metrics.count_watch_list(watch);
        }
    })
}

/// The watch of a reconciler's own kind in its namespace, filling the store of `writer`:
/// listed as [`events`] does, retried with kube's default backoff (the cached types of our
/// kinds decode without managedFields, [`crate::stored::cached_metadata`]). `forget` hears of
/// every object the watch sees deleted, and of what the cache holds every [`SWEEP_PERIOD`] (the
/// task returned, which ends on `shutdown`); `followers`, another reconciler that reads the
/// same store, hear of the objects to look at again ([`Followers`]). Errors are reported as
/// `watch`'s and dropped ([`without_errors`]).
pub fn own_kind<K>(
    api: Api<K>,
    writer: Writer<K>,
    forget: Arc<impl Forget<K>>,
    followers: Option<Followers>,
    watch: &'static str,
    metrics: Arc<Metrics>,
    shutdown: crate::Shutdown,
) -> (
    impl Stream<Item = Result<K, watcher::Error>> + Send,
    tokio::task::JoinHandle<()>,
)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let events = events(api, watcher::Config::default(), watch, metrics.clone()).default_backoff();
    let (objects, sweep) = cached(events, writer, forget, followers, shutdown);
    (without_errors(objects, watch, metrics), sweep)
}

/// [`own_kind`] from its watch events.
fn cached<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    writer: Writer<K>,
    forget: Arc<impl Forget<K>>,
    followers: Option<Followers>,
    shutdown: crate::Shutdown,
) -> (
    impl Stream<Item = Result<K, watcher::Error>> + Send,
    tokio::task::JoinHandle<()>,
)
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    let sweeping = forget.clone();
    let store = writer.as_reader();
    // The store's own readiness wakes one waiter only (kube's Controller, which polls it
    // too): the sweep and the followers learn of the first list from the stream instead.
    let (listed_tx, changed) = match followers {
        Some(f) => (f.listed, Some(f.changed)),
        None => (tokio::sync::watch::channel(false).0, None),
    };
    let sweep = tokio::spawn(sweep(
        store.clone(),
        listed_tx.subscribe(),
        every(SWEEP_PERIOD),
        move |present| sweeping.forget_missing(present),
        shutdown,
    ));
    let events = events.reflect(writer).inspect(move |event| match event {
        Ok(watcher::Event::Delete(obj)) => forget.forget(obj),
        // Reflected already: the store holds the list.
        Ok(watcher::Event::InitDone) => {
            forget.listed();
            listed_tx.send_replace(true);
        }
        _ => {}
    });
    // Followers hear of deletions; the reconciler of the kind skips them below.
    let deletions = if changed.is_some() {
        Deletions::Trigger
    } else {
        Deletions::Skip
    };
    let own = triggers(events, store, deletions).filter_map(move |trigger| {
        futures::future::ready(match trigger {
            Ok((obj, gone)) => {
                if let Some(changed) = &changed {
                    // Unbounded, so a busy follower never holds this watch up. The send fails
                    // only once the follower has stopped: at shutdown, or after a panic,
                    // which stops the process.
                    let _ = changed.unbounded_send(obj.name_any());
                }
                // The reconciler of the kind does not reconcile a deleted object.
                (!gone).then_some(Ok(obj))
            }
            Err(e) => Some(Err(e)),
        })
    });
    (own.map(|t| t.map(Arc::unwrap_or_clone)), sweep)
}

/// Another reconciler's share of a kind's own watch ([`own_kind`]), which it reads instead of
/// watching and caching the kind a second time: the watch sends the name of each object it
/// applies or deletes as it comes, and at the end of each (re)list of every object listed and
/// every one the list no longer has ([`settled`] with [`Deletions::Trigger`]), and sets
/// `listed` once the store holds the first list.
pub struct Followers {
    /// Set once the store holds the first list.
    pub listed: tokio::sync::watch::Sender<bool>,
    /// The names of the objects to look at again.
    pub changed: futures::channel::mpsc::UnboundedSender<String>,
}

/// What a follower holds of a shared watch ([`Followers`]).
pub struct Following {
    /// Whether the store holds the first list.
    pub listed: tokio::sync::watch::Receiver<bool>,
    /// The names of the objects to look at again.
    pub changed: futures::channel::mpsc::UnboundedReceiver<String>,
}

/// The two ends of a shared watch.
pub fn follow() -> (Followers, Following) {
    let (listed, listed_rx) = tokio::sync::watch::channel(false);
    let (changed, changed_rx) = futures::channel::mpsc::unbounded();
    (
        Followers { listed, changed },
        Following {
            listed: listed_rx,
            changed: changed_rx,
        },
    )
}

/// Whether [`settled`] passes on the objects a watch reports deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deletions {
    /// Each deleted object is a trigger too (a watch of objects another kind depends on).
    Trigger,
    /// Deleted objects trigger nothing (a watch of the reconciled kind: a deleted object is
    /// not reconciled).
    Skip,
}

/// The objects of a reflected watch (`events`, already applied to `store`) as controller
/// triggers: each object applied (and, with [`Deletions::Trigger`], deleted) as it comes, and
/// the objects of a (re)list only at its end, once `store` holds the list: all of them, and
/// with [`Deletions::Trigger`] those the list no longer has.
///
/// kube's store swaps a relist in only at its end (`InitDone`), while kube's
/// `applied_objects` passes each listed object on at once: a reconcile it triggers reads the
/// object from the store as it was before the relist (an older version), or not at all (an
/// object created while the watch was cut off is not found, and dropped), and nothing
/// triggers it again. After an API server restart, a KEB update or a new Runtime of the gap
/// would have waited for an unrelated event.
pub fn settled<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    store: Store<K>,
    deletions: Deletions,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    triggers(events, store, deletions)
        // One clone at a time, as the Controller takes each trigger.
        .map(|trigger| trigger.map(|(obj, _)| Arc::unwrap_or_clone(obj)))
}

/// [`settled`]'s triggers, each with whether the object is gone (deleted, or no longer listed).
fn triggers<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    store: Store<K>,
    deletions: Deletions,
) -> impl Stream<Item = Result<(Arc<K>, bool), watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    // What the store held when the list began (with `Deletions::Trigger`).
    let mut before: Vec<Arc<K>> = Vec::new();
    events
        .map(move |event| {
            let triggers: Vec<Result<(Arc<K>, bool), watcher::Error>> = match event {
                Ok(watcher::Event::Apply(obj)) => vec![Ok((Arc::new(obj), false))],
                Ok(watcher::Event::Delete(obj)) if deletions == Deletions::Trigger => {
                    vec![Ok((Arc::new(obj), true))]
                }
                Ok(watcher::Event::Delete(_) | watcher::Event::InitApply(_)) => Vec::new(),
                Ok(watcher::Event::Init) => {
                    if deletions == Deletions::Trigger {
                        before = store.state();
                    }
                    Vec::new()
                }
                Ok(watcher::Event::InitDone) => {
                    let listed = store.state();
                    let before = std::mem::take(&mut before);
                    let gone: Vec<Arc<K>> = if before.is_empty() {
                        Vec::new()
                    } else {
                        let present: std::collections::HashSet<ObjectRef<K>> =
                            listed.iter().map(|o| ObjectRef::from_obj(&**o)).collect();
                        before
                            .into_iter()
                            .filter(|o| !present.contains(&ObjectRef::from_obj(&**o)))
                            .collect()
                    };
                    let listed = listed.into_iter().map(|o| Ok((o, false)));
                    listed
                        .chain(gone.into_iter().map(|o| Ok((o, true))))
                        .collect()
                }
                Err(e) => vec![Err(e)],
            };
            futures::stream::iter(triggers)
        })
        .flatten()
}

/// A watch of objects that trigger another kind's reconciles (their owners, or the objects
/// that name them), as triggers: what `note` takes from an object (what its triggers need) for
/// each object applied or deleted as it comes, and at the end of a relist for each object that
/// is new or changed (by resourceVersion) and each the relist no longer has (a changed object
/// also with its former note where that differs: a Secret given another owner concerns both); errors reported
/// under `watch` and dropped ([`without_errors`]). The first list triggers nothing: the
/// reconcilers' own first lists reconcile every object, and each reads these objects from the
/// API server, not from this watch.
///
/// kube's `owns` and `watches` pass a relist's objects on as they come, all of them, and
/// nothing for the objects it no longer has: a Secret deleted while the watch was away (a 410
/// after an API server restart or an etcd compaction) never told its GardenerCluster, which
/// waited for its next periodic pass with the runtime's kubeconfig gone, while 10,000
/// unchanged Secrets asked for 10,000 reconciles. Their errors also back off every trigger of
/// the reconciler (see [`without_errors`]). What is kept between lists is each object's key,
/// resourceVersion and note, not the object: for 10,000 kubeconfig Secrets a store of their
/// trimmed metadata took 25 MiB, keys, versions and owner names 3 MiB (RSS measured once, in
/// a test not kept, 2026-12-07; the same notes with kube's `ObjectRef`s took 7 MiB).
pub fn dependents<K, N>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    note: impl Fn(&K) -> N + Send + 'static,
    watch: &'static str,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = N> + Send
where
    K: Resource + Send + 'static,
    N: Clone + PartialEq + Send + 'static,
{
    let key = |o: &K| -> Box<str> {
        format!(
            "{}/{}",
            o.meta().namespace.as_deref().unwrap_or_default(),
            o.name_any()
        )
        .into()
    };
    let noted = move |o: &K| -> (Box<str>, N) {
        (o.resource_version().unwrap_or_default().into(), note(o))
    };
    // The objects there are, and those a list in progress has brought: resourceVersion and note.
    let mut known: HashMap<Box<str>, (Box<str>, N)> = HashMap::new();
    let mut listed: HashMap<Box<str>, (Box<str>, N)> = HashMap::new();
    let mut listed_once = false;
    without_errors(events, watch, metrics)
        .map(move |event| {
            let notes: Vec<N> = match event {
                Ok(watcher::Event::Apply(o)) => {
                    let (version, n) = noted(&o);
                    let was = known.insert(key(&o), (version, n.clone()));
                    with_former(n, was.map(|(_, n)| n))
                }
                Ok(watcher::Event::Delete(o)) => {
                    known.remove(&key(&o));
                    vec![noted(&o).1]
                }
                Ok(watcher::Event::Init) => {
                    listed.clear();
                    Vec::new()
                }
                Ok(watcher::Event::InitApply(o)) => {
                    listed.insert(key(&o), noted(&o));
                    Vec::new()
                }
                Ok(watcher::Event::InitDone) => {
                    let before = std::mem::replace(&mut known, std::mem::take(&mut listed));
                    if std::mem::replace(&mut listed_once, true) {
                        let mut notes = Vec::new();
                        for (k, (version, n)) in &known {
                            match before.get(k) {
                                Some((was, _)) if was == version => {}
                                was => notes
                                    .extend(with_former(n.clone(), was.map(|(_, n)| n.clone()))),
                            }
                        }
                        let gone = before.into_iter().filter(|(k, _)| !known.contains_key(k));
                        notes.extend(gone.map(|(_, (_, n))| n));
                        notes
                    } else {
                        Vec::new()
                    }
                }
                Err(_) => Vec::new(),
            };
            futures::stream::iter(notes)
        })
        .flatten()
}

/// The note of a changed object, and its former note where that differs: a Secret whose owner
/// changed concerns the owner it had too.
fn with_former<N: PartialEq>(note: N, former: Option<N>) -> Vec<N> {
    match former {
        Some(former) if former != note => vec![note, former],
        _ => vec![note],
    }
}

/// [`dependents`] of the Secrets the controller labelled as its own in `namespace` (the
/// kubeconfig Secrets of GardenerClusters and RuntimeAccesses): only those, and only their
/// metadata, so a deleted or emptied one is noticed at once (after a failure, once its
/// backoff ends) and no kubeconfig is cached.
pub fn managed_secrets<N, F>(
    kcp: kube::Client,
    namespace: &str,
    note: F,
    watch: &'static str,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = N> + Send + use<N, F>
where
    N: Clone + PartialEq + Send + 'static,
    F: Fn(&PartialObjectMeta<Secret>) -> N + Send + 'static,
{
    let managed = format!(
        "{}={}",
        kim_shared::names::LABEL_MANAGED_BY,
        kim_shared::names::MANAGED_BY_INFRASTRUCTURE_MANAGER
    );
    let secrets = events(
        Api::<PartialObjectMeta<Secret>>::namespaced(kcp, namespace),
        watcher::Config::default().labels(&managed),
        watch,
        metrics.clone(),
    )
    .default_backoff();
    dependents(secrets, note, watch, metrics)
}

/// How often [`sweep`] hands over what the cache holds.
pub const SWEEP_PERIOD: Duration = Duration::from_secs(60);

/// A tick every `period`, the first after one period.
pub fn every(period: Duration) -> impl Stream<Item = ()> + Send {
    futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(period).await;
        Some(((), ()))
    })
}

/// Until `shutdown`, at each of `ticks` once `store` holds its first list: `forget_missing`
/// with every object in `store`.
///
/// The watch's Delete events ([`own_kind`]) do not report every disappearance: objects
/// deleted while the watch was disconnected vanish with the relist, and a reconcile still
/// running when the deletion arrives may write its record or series again. The sweep catches
/// those within a tick.
pub async fn sweep<K>(
    store: Store<K>,
    mut listed: tokio::sync::watch::Receiver<bool>,
    ticks: impl Stream<Item = ()>,
    forget_missing: impl Fn(&[Arc<K>]),
    shutdown: crate::Shutdown,
) where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    tokio::select! {
        ready = listed.wait_for(|listed| *listed) => if ready.is_err() { return },
        _ = shutdown.cancelled() => return,
    }
    let mut ticks = std::pin::pin!(ticks);
    loop {
        tokio::select! {
            tick = ticks.next() => if tick.is_none() { return },
            _ = shutdown.cancelled() => return,
        }
        forget_missing(&store.state());
    }
}

/// Runs a reconciler's `Controller` (`run`) until it ends, or until `shutdown` comes before
/// `store` (the Controller's own) has its first list. kube's Controller holds its runner until
/// that store is ready and, once shut down, no longer polls the watch that would fill it: a
/// process stopped right after its start (or while the API server does not answer the list)
/// would wait for the whole drain timeout. Before the first list no reconcile ran, so there is
/// nothing to drain.
pub async fn run_until_stopped<K>(
    run: impl std::future::Future<Output = ()>,
    store: Store<K>,
    shutdown: &crate::Shutdown,
) where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let stopped_unlisted = async {
        shutdown.cancelled().await;
        if let Some(Ok(())) = store.wait_until_ready().now_or_never() {
            // Listed: the Controller drains its reconciles and ends on its own.
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = run => {}
        () = stopped_unlisted => tracing::debug!("stopped before the first list; nothing to drain"),
    }
}

/// `events` without its errors, each reported ([`report`]).
///
/// kube's `Controller` backs off *all* its trigger streams together when any of them yields an
/// error, so one failing watch would make the controller deaf to the others: while Gardener is
/// unreachable, the Shoot watch's errors delayed Runtime events from the KCP, and the retry of
/// everything that waited for Gardener, by up to 30 s each time. The watches retry on their own
/// (`default_backoff`), so the errors carry nothing the controller needs.
pub fn without_errors<T: Send>(
    events: impl Stream<Item = Result<T, watcher::Error>> + Send,
    watch: &'static str,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = Result<T, watcher::Error>> + Send {
    metrics.track_watch(watch);
    events.filter(move |event| {
        if let Err(e) = event {
            report(watch, e, &metrics);
        }
        future::ready(event.is_ok())
    })
}

/// Whether a watch failed because an object (or a list of them) did not decode with our types.
///
/// A watch event that does not decode reaches us as an API error with no code, message or
/// reason: kube's client tries each line that is no `WatchEvent` as a `Status`, whose fields
/// all have defaults, so any JSON object passes (kube-client 5). The apiserver's own error
/// events always carry a code.
pub fn is_decode_error(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::SerdeError(_))
        | watcher::Error::WatchStartFailed(kube::Error::SerdeError(_))
        | watcher::Error::WatchFailed(kube::Error::SerdeError(_)) => true,
        watcher::Error::WatchFailed(kube::Error::Api(s)) => {
            s.code == 0 && s.message.is_empty() && s.reason.is_empty()
        }
        _ => false,
    }
}

/// Reports what a reconciler's `Controller::run` yields besides its results: a failed watch
/// step ([`report`]; none today, every trigger stream drops its errors, [`without_errors`]);
/// the rest at debug level (reconcile failures are logged, without secrets, by each
/// reconciler's `error_policy`).
pub fn report_run<T, E: std::error::Error + 'static>(
    controller: &'static str,
    result: &Result<T, kube::runtime::controller::Error<E, watcher::Error>>,
    metrics: &Metrics,
) {
    match result {
        Err(kube::runtime::controller::Error::QueueError(e)) => report(controller, e, metrics),
        Err(e) => tracing::debug!(controller, error = %e, "controller event"),
        Ok(_) => {}
    }
}

/// Reports a failed step of `watch`. A connection or API error is logged at debug level: the
/// client logs it itself, and the watch retries. An object that does not decode is different:
/// the list fails as a whole at every retry, so the watch sees nothing new (for every object of
/// the kind) until the object is fixed; a watch event that does not decode is lost, and the next
/// list fails. That is logged as a warning (for a list the serde error, which names the line
/// and column and the type expected, never the response text) and counted in
/// `infrastructure_manager_im_watch_decode_errors_total{watch}`.
pub fn report(watch: &'static str, e: &watcher::Error, metrics: &Metrics) {
    if is_decode_error(e) {
        metrics.count_watch_decode_error(watch);
        let error = match e {
            watcher::Error::WatchFailed(kube::Error::Api(_)) => {
                "a watch event's object does not decode (kube passes on no detail)".to_owned()
            }
            other => other.to_string(),
        };
        tracing::warn!(
            watch,
            error,
            "a watched object does not decode; this watch sees no change until it is fixed"
        );
    } else if is_refused(e) {
        tracing::warn!(
            watch,
            error = %e,
            "the API server refuses this watch (RBAC or credentials); it sees no change until that is fixed"
        );
    } else {
        tracing::debug!(watch, error = %e, "watch failed; it retries with its own backoff");
    }
}

/// Whether the API server refused a watch step for who asked (401, 403): unlike a restart or
/// a network cut, that does not heal by itself, so it is logged where an operator sees it.
pub fn is_refused(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 401 || s.code == 403,
        _ => false,
    }
}

/// `events` (a raw watch of Gardener) retried like kube's `default_backoff` after an error,
/// but at once when Gardener answers its health probe again (`recoveries` changes): after a
/// long outage the backoff has grown to 30 s, and the Shoot watch would otherwise see the
/// Shoots created right after the recovery only that much later.
pub fn gardener_backoff<K: Send + 'static>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    mut recoveries: watch::Receiver<u64>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send {
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
            // A watch shown to work again (a whole list, or a change) starts from the shortest
            // delay, so that errors spread apart (gardener-apiserver replicas rolling one by
            // one) do not add up to the longest one. Not the start of a list (`Init`) nor one
            // of its pages: kube's watcher begins every retried list with `Init`, and a list
            // that keeps failing would be retried every second.
            if matches!(
                event,
                Ok(watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_))
            ) {
                backoff.reset();
            }
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
    use super::*;

    fn failing_then(
        items: usize,
    ) -> impl Stream<Item = Result<watcher::Event<usize>, watcher::Error>> + Send {
        futures::stream::iter(
            std::iter::once(Err(watcher::Error::NoResourceVersion))
                .chain((0..items).map(|i| Ok(watcher::Event::Apply(i)))),
        )
    }

    fn cm(name: &str) -> k8s_openapi::api::core::v1::ConfigMap {
        k8s_openapi::api::core::v1::ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// A Controller future that never ends unless its store is listed and it drains, as kube's
    /// does when shut down before its first list.
    #[tokio::test]
    async fn a_stop_before_the_first_list_does_not_wait_for_the_drain() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::{reflector, watcher};
        let (store, _writer) = reflector::store::<ConfigMap>();
        let shutdown = crate::Shutdown::new();
        shutdown.cancel();
        let stopped =
            run_until_stopped(std::future::pending::<()>(), store, &shutdown).now_or_never();
        assert!(stopped.is_some(), "an unlisted reconciler stops at once");

        // Listed: the Controller's own graceful shutdown decides (it drains), not the stop.
        let (store, mut writer) = reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let shutdown = crate::Shutdown::new();
        shutdown.cancel();
        let waiting =
            run_until_stopped(std::future::pending::<()>(), store, &shutdown).now_or_never();
        assert!(waiting.is_none(), "a listed reconciler drains first");
        let (store, _writer) = reflector::store::<ConfigMap>();
        let done = run_until_stopped(async {}, store, &crate::Shutdown::new()).now_or_never();
        assert!(done.is_some(), "it ends when the Controller ends");
    }

    /// The sweep waits for the first list, then at each tick hands over the keys of what the
    /// store holds: an object gone from the store (deleted, or missing from a relist) is no
    /// longer among them. It learns of the first list from its own signal: the store's
    /// readiness wakes only its latest waiter, and kube's Controller waits on it too (here: a
    /// second waiter polled after the sweep).
    #[tokio::test]
    async fn the_sweep_hands_over_what_the_store_holds_at_each_tick() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::reflector;
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let (tick, ticks) = futures::channel::mpsc::unbounded::<()>();
        let (seen, mut swept) = futures::channel::mpsc::unbounded::<Vec<String>>();
        let shutdown = crate::Shutdown::new();
        let (listed_tx, listed) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(sweep(
            store.clone(),
            listed,
            ticks,
            move |present: &[Arc<ConfigMap>]| {
                let mut keys: Vec<String> =
                    present.iter().map(|o| crate::records::key(&**o)).collect();
                keys.sort();
                let _ = seen.unbounded_send(keys);
            },
            shutdown.clone(),
        ));
        // Before the first list a tick sweeps nothing (an empty cache would forget everything);
        // it is taken once the list is there.
        tick.unbounded_send(()).expect("sweep running");
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(swept.try_recv().is_err(), "swept before the first list");
        // Another waiter on the store's readiness, as kube's Controller runner.
        let runner = tokio::spawn(async move { store.wait_until_ready().await.is_ok() });
        tokio::task::yield_now().await;
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(cm("a")),
            watcher::Event::InitApply(cm("b")),
            watcher::Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
        }
        listed_tx.send_replace(true);
        assert!(
            runner.await.expect("runner"),
            "the other waiter is ready too"
        );
        assert_eq!(swept.next().await, Some(vec!["ns/a".into(), "ns/b".into()]));
        writer.apply_watcher_event(&watcher::Event::Delete(cm("a")));
        tick.unbounded_send(()).expect("sweep running");
        assert_eq!(swept.next().await, Some(vec!["ns/b".into()]));
        shutdown.cancel();
        task.await.expect("the sweep ends on shutdown");
    }

    /// The reconciler hears of each deletion the watch reports, and of the end of each
    /// (re)list only once the store holds that list as a whole: kube swaps a relist into the
    /// store at its end, and the RuntimeAccess index is rebuilt from the store then.
    #[tokio::test]
    async fn the_reconciler_hears_deletions_and_the_end_of_each_list() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::reflector;
        use watcher::Event::{Delete, Init, InitApply, InitDone};
        struct Heard {
            store: Store<ConfigMap>,
            calls: std::sync::Mutex<Vec<String>>,
        }
        impl Heard {
            fn push(&self, call: String) {
                self.calls.lock().expect("not poisoned").push(call);
            }
        }
        impl Forget<ConfigMap> for Heard {
            fn forget(&self, obj: &ConfigMap) {
                self.push(format!("forget {}", obj.name_any()));
            }
            fn forget_missing(&self, _: &[Arc<ConfigMap>]) {}
            fn listed(&self) {
                let mut names: Vec<String> =
                    self.store.state().iter().map(|o| o.name_any()).collect();
                names.sort();
                self.push(format!("listed {}", names.join(",")));
            }
        }
        let events = futures::stream::iter(
            [
                Init,
                InitApply(cm("a")),
                InitApply(cm("b")),
                InitDone,
                Delete(cm("a")),
                // A relist: the store keeps `b` alone until its end.
                Init,
                InitApply(cm("b")),
                InitApply(cm("c")),
                InitDone,
            ]
            .map(Ok),
        );
        let (store, writer) = reflector::store::<ConfigMap>();
        let heard = Arc::new(Heard {
            store: store.clone(),
            calls: Default::default(),
        });
        let shutdown = crate::Shutdown::new();
        let (objects, sweep) = cached(events, writer, heard.clone(), None, shutdown.clone());
        let mut applied: Vec<String> = objects
            .map(|o| o.expect("no error").name_any())
            .collect()
            .await;
        shutdown.cancel();
        sweep.await.expect("the sweep ends on shutdown");
        // Each list's objects come at its end, in no particular order.
        applied.sort();
        assert_eq!(applied, ["a", "b", "b", "c"]);
        assert_eq!(
            *heard.calls.lock().expect("not poisoned"),
            ["listed a,b", "forget a", "listed b,c"]
        );
    }

    /// A follower of a shared watch hears of every object the reconciler of the kind does, and
    /// of those deleted or gone from a relist, which that reconciler does not reconcile.
    #[tokio::test]
    async fn a_follower_hears_of_deletions_the_reconciler_of_the_kind_skips() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::reflector;
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        struct Nothing;
        impl Forget<ConfigMap> for Nothing {
            fn forget(&self, _: &ConfigMap) {}
            fn forget_missing(&self, _: &[Arc<ConfigMap>]) {}
        }
        let events = futures::stream::iter(
            [
                Init,
                InitApply(cm("a")),
                InitApply(cm("b")),
                InitDone,
                Apply(cm("b")),
                Delete(cm("a")),
                // A relist without `b`, deleted while the watch was away.
                Init,
                InitApply(cm("c")),
                InitDone,
            ]
            .map(Ok),
        );
        let (store, writer) = reflector::store::<ConfigMap>();
        let shutdown = crate::Shutdown::new();
        let (followers, following) = follow();
        assert!(!*following.listed.borrow(), "not listed before the list");
        let (objects, sweep) = cached(
            events,
            writer,
            Arc::new(Nothing),
            Some(followers),
            shutdown.clone(),
        );
        let mut own: Vec<String> = objects
            .map(|o| o.expect("no error").name_any())
            .collect()
            .await;
        shutdown.cancel();
        sweep.await.expect("the sweep ends on shutdown");
        own.sort();
        assert_eq!(own, ["a", "b", "b", "c"]);
        let mut heard: Vec<String> = following.changed.collect().await;
        heard.sort();
        assert_eq!(heard, ["a", "a", "b", "b", "b", "c"]);
        assert!(*following.listed.borrow(), "listed");
        assert_eq!(store.state().len(), 1);
    }

    /// Every trigger is passed on when the store holds the object at the version triggered (or,
    /// for a deletion, no longer holds it): a relist's objects only at its end, with those it
    /// no longer has when deletions trigger too.
    #[tokio::test]
    async fn a_relist_triggers_its_objects_once_the_store_holds_them() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::reflector;
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let at = |name: &str, version: &str| {
            let mut o = cm(name);
            o.metadata.resource_version = Some(version.into());
            o
        };
        let events = || {
            futures::stream::iter(
                [
                    Init,
                    InitApply(at("a", "1")),
                    InitApply(at("gone", "1")),
                    InitDone,
                    Apply(at("a", "2")),
                    // The watch was cut off: meanwhile `a` changed, `gone` was deleted and
                    // `new` created.
                    Init,
                    InitApply(at("a", "3")),
                    InitApply(at("new", "1")),
                    InitDone,
                    Delete(at("a", "3")),
                ]
                .map(Ok),
            )
        };
        for (deletions, expected) in [
            (
                Deletions::Trigger,
                vec![
                    "a@1 stored 1",
                    "a@2 stored 2",
                    "a@3 stored -",
                    "a@3 stored 3",
                    "gone@1 stored -",
                    "gone@1 stored 1",
                    "new@1 stored 1",
                ],
            ),
            (
                Deletions::Skip,
                vec![
                    "a@1 stored 1",
                    "a@2 stored 2",
                    "a@3 stored 3",
                    "gone@1 stored 1",
                    "new@1 stored 1",
                ],
            ),
        ] {
            let (store, writer) = reflector::store::<ConfigMap>();
            let triggers = settled(events().reflect(writer), store.clone(), deletions);
            let mut seen: Vec<String> = triggers
                .map(|o| {
                    let o = o.expect("no error");
                    let stored = store
                        .get(&ObjectRef::from_obj(&o))
                        .and_then(|s| s.metadata.resource_version.clone())
                        .unwrap_or_else(|| "-".into());
                    let version = o.metadata.resource_version.clone().unwrap_or_default();
                    format!("{}@{version} stored {stored}", o.name_any())
                })
                .collect()
                .await;
            seen.sort();
            assert_eq!(seen, expected, "{deletions:?}");
        }
    }

    /// The first list triggers nothing; a change as it comes; at a relist's end what is new or
    /// changed, and what the relist no longer has (a Secret deleted while the watch was away)
    /// with its last note: one the watch applied, not one of a list that started over. A change
    /// that changed the note (another owner) triggers the former note too. A failed watch step
    /// is dropped, not passed to the Controller (which would back off all its triggers).
    #[tokio::test]
    async fn dependents_trigger_what_a_relist_changed_or_no_longer_has_and_drop_errors() {
        use k8s_openapi::api::core::v1::Secret;
        use kube::core::PartialObjectMeta;
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let secret = |name: &str, version: &str, owner: &str| {
            let mut s: PartialObjectMeta<Secret> = serde_json::from_value(serde_json::json!({
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata",
                "metadata": {"name": name, "namespace": "kcp-system", "labels": {"owner": owner}},
            }))
            .expect("metadata");
            s.metadata.resource_version = Some(version.into());
            s
        };
        let events = futures::stream::iter([
            Ok(Init),
            Ok(InitApply(secret("kubeconfig-a", "1", "x"))),
            Ok(InitApply(secret("kubeconfig-b", "1", "x"))),
            Ok(InitApply(secret("kubeconfig-c", "1", "x"))),
            Ok(InitApply(secret("kubeconfig-f", "1", "x"))),
            Ok(InitApply(secret("kubeconfig-g", "1", "x"))),
            Ok(InitDone),
            Err(watcher::Error::NoResourceVersion),
            Ok(Apply(secret("kubeconfig-a", "2", "y"))),
            Ok(Apply(secret("kubeconfig-g", "2", "x"))),
            Ok(Delete(secret("kubeconfig-c", "2", "x"))),
            Ok(Apply(secret("kubeconfig-e", "1", "x"))),
            // Cut off: meanwhile `a` changed owner again, `g` changed, `b` and `e` were deleted
            // and `d` created (`f` as it was); the first try of the relist breaks off after one
            // object.
            Ok(Init),
            Ok(InitApply(secret("kubeconfig-e", "2", "x"))),
            Ok(Init),
            Ok(InitApply(secret("kubeconfig-a", "3", "z"))),
            Ok(InitApply(secret("kubeconfig-d", "1", "x"))),
            Ok(InitApply(secret("kubeconfig-f", "1", "x"))),
            Ok(InitApply(secret("kubeconfig-g", "3", "x"))),
            Ok(InitDone),
        ]);
        let metrics = Metrics::register(&mut Default::default());
        let note =
            |s: &PartialObjectMeta<Secret>| format!("{}:{}", s.name_any(), s.labels()["owner"]);
        let seen: Vec<String> = dependents(events, note, "test", metrics).collect().await;
        let (changes, relist) = seen.split_at(5);
        assert_eq!(
            changes,
            [
                "kubeconfig-a:y",
                "kubeconfig-a:x",
                "kubeconfig-g:x",
                "kubeconfig-c:x",
                "kubeconfig-e:x"
            ]
        );
        let mut relist = relist.to_vec();
        relist.sort();
        assert_eq!(
            relist,
            [
                "kubeconfig-a:y",
                "kubeconfig-a:z",
                "kubeconfig-b:x",
                "kubeconfig-d:x",
                "kubeconfig-e:x",
                "kubeconfig-g:x"
            ]
        );
    }

    #[tokio::test]
    async fn errors_are_dropped_and_events_kept() {
        let metrics = Metrics::register(&mut Default::default());
        let events: Vec<usize> = without_errors(failing_then(2), "test", metrics)
            .map(|e| match e {
                Ok(watcher::Event::Apply(i)) => i,
                other => panic!("{other:?}"),
            })
            .collect()
            .await;
        assert_eq!(events, [0, 1]);
    }

    #[test]
    fn only_objects_that_do_not_decode_are_counted_and_warned() {
        let decode = || {
            kube::Error::SerdeError(serde_json::from_str::<u8>("true").expect_err("not a number"))
        };
        let metrics = Metrics::register(&mut Default::default());
        // What kube makes of a watch event whose object does not decode.
        let event_status: kube::core::Status =
            serde_json::from_str(r#"{"type":"MODIFIED","object":{"kind":"Runtime"}}"#)
                .expect("any object reads as a Status");
        for e in [
            watcher::Error::InitialListFailed(decode()),
            watcher::Error::WatchStartFailed(decode()),
            watcher::Error::WatchFailed(decode()),
            watcher::Error::WatchFailed(kube::Error::Api(event_status.boxed())),
        ] {
            assert!(is_decode_error(&e), "{e}");
            report("runtimes", &e, &metrics);
        }
        let gone: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 410, "reason": "Expired", "message": "too old resource version",
        }))
        .expect("status");
        for e in [
            watcher::Error::NoResourceVersion,
            watcher::Error::InitialListFailed(kube::Error::LinesCodecMaxLineLengthExceeded),
            watcher::Error::WatchFailed(kube::Error::Api(gone.boxed())),
        ] {
            assert!(!is_decode_error(&e), "{e}");
            report("runtimes", &e, &metrics);
        }
        assert_eq!(metrics.watch_decode_errors("runtimes"), 4);
        assert_eq!(metrics.watch_decode_errors("shoots"), 0);
    }

    #[test]
    fn a_watch_refused_for_who_asks_is_told_apart_from_passing_failures() {
        let status = |code: u16, reason: &str| {
            let s: kube::core::Status = serde_json::from_value(serde_json::json!({
                "status": "Failure", "code": code, "reason": reason, "message": "m",
            }))
            .expect("status");
            kube::Error::Api(s.boxed())
        };
        for e in [
            watcher::Error::InitialListFailed(status(403, "Forbidden")),
            watcher::Error::WatchStartFailed(status(401, "Unauthorized")),
            watcher::Error::WatchFailed(status(403, "Forbidden")),
        ] {
            assert!(is_refused(&e), "{e}");
        }
        for e in [
            watcher::Error::InitialListFailed(status(503, "ServiceUnavailable")),
            watcher::Error::WatchFailed(status(410, "Expired")),
            watcher::Error::NoResourceVersion,
        ] {
            assert!(!is_refused(&e), "{e}");
        }
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
            matches!(
                events.next().now_or_never(),
                Some(Some(Ok(watcher::Event::Apply(0))))
            ),
            "retried at once when Gardener answers again"
        );
    }

    /// A watch shown to work (a whole list, a change) between errors resets the backoff: an
    /// error after it waits the first delay (kube's default: 0.8 s, jittered up to 1.6 s), not
    /// the third (3.2 s to 6.4 s). The start of a list that fails again does not: kube's
    /// watcher begins each retried list with `Init`.
    #[tokio::test]
    async fn a_working_watch_resets_the_backoff_a_failing_list_does_not() {
        use watcher::Event;
        let waits = |items: Vec<Result<Event<u8>, watcher::Error>>| async move {
            let (_tx, rx) = watch::channel(0);
            let mut events = Box::pin(gardener_backoff(futures::stream::iter(items), rx));
            let mut waits = Vec::new();
            loop {
                let before = std::time::Instant::now();
                let Some(_) = events.next().await else { break };
                waits.push(before.elapsed());
            }
            waits
        };
        let err = || Err(watcher::Error::NoResourceVersion);
        let listed = waits(vec![
            err(),
            err(),
            Ok(Event::InitDone),
            err(),
            Ok(Event::Apply(1)),
        ])
        .await;
        // The wait after the 2nd error has grown; the one after the list has not.
        assert!(listed[2] >= Duration::from_millis(1600), "{listed:?}");
        assert!(listed[4] >= Duration::from_millis(800), "{listed:?}");
        assert!(listed[4] < Duration::from_millis(3000), "{listed:?}");
        let relisting = waits(vec![
            err(),
            Ok(Event::Init),
            Ok(Event::InitApply(1)),
            err(),
            Ok(Event::Init),
        ])
        .await;
        // Two failed lists in a row: the second retry waits the second delay.
        assert!(relisting[3] < Duration::from_millis(100), "{relisting:?}");
        assert!(relisting[4] >= Duration::from_millis(1600), "{relisting:?}");
    }
}
