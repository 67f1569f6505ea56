//! The registry cache (upstream ADRs 002 and 003, `--registry-cache-config-controller-enabled`).
//!
//! On: the registry cache controller reads each runtime cluster's `RegistryCacheConfig`s (when
//! its Kyma resource lists the `registry-cache` module) and writes them into the Runtime's
//! `spec.imageRegistryCache` by server-side apply. It is triggered as upstream's: by the KCP
//! kubeconfig Secret of the Runtime (created, labels or annotations changed), by the runtime
//! watcher calling the [`listener`], and every `--registry-cache-reconcile-period`. The Runtime
//! reconciler then copies the credentials into the Gardener project
//! ([`crate::runtime::registry_cache`]) and writes the
//! Shoot's `registry-cache` extension.
//!
//! Off: [`sweep`] removes what the registry cache wrote.

pub mod listener;
pub mod sweep;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kim_shared::api::runtime::ImageRegistryCache;
use kim_shared::api::{Runtime, RuntimeState};
use kim_shared::names;
use kim_shared::registry_cache as rc;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Controller, Predicate, PredicateConfig, WatchStreamExt, predicates, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::Instrument;

use crate::{Context, Shutdown};

/// The `controller` label of this reconciler's metrics.
pub const CONTROLLER: &str = "registry_cache";
/// Time allowed for one reconcile's calls into the runtime cluster and the KCP.
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(30);
/// Retries after a failed reconcile: 30 s doubling to 10 minutes, jittered. A hibernated or
/// unreachable cluster costs a timeout per attempt; the runtime watcher's call (the
/// [`listener`]) brings a changed cluster's caches sooner.
const BACKOFF: crate::records::Backoff = crate::records::Backoff {
    first: Duration::from_secs(30),
    cap: Duration::from_secs(600),
};
/// The least time between two reads of one runtime cluster. Anyone who reaches the
/// [`listener`] can send events; each would start a read at once (kube-runtime runs a trigger
/// at once, whatever the last pass asked for). An event within this time of the last pass is
/// served when it has passed, not dropped.
const MIN_INTERVAL: Duration = Duration::from_secs(5);
/// Runtime clusters read at once. Each read may wait [`RECONCILE_TIMEOUT`] for a cluster that
/// does not answer (hibernated, or dropping packets): one at a time, as upstream does, a few
/// such clusters would hold back every other Runtime's caches for minutes after each period or
/// runtime watcher burst.
const WORKERS: u16 = 8;

/// Runs the registry cache (on) or its sweeper (off) until `shutdown`.
/// `clusters` says which runtime clusters are hibernated.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: Shutdown,
    clusters: crate::runtime::shoot_cache::ClusterFacts,
) {
    if ctx.settings.registry_cache.enabled {
        run_controller(ctx, shutdown, clusters).await;
    } else {
        sweep::run(ctx, shutdown).await;
    }
}

/// A reconcile failed; retried with [`BACKOFF`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call failed.
    #[error("cannot {action}: {source}")]
    Api {
        /// What we tried.
        action: &'static str,
        /// Why it failed.
        source: kube::Error,
    },
    /// The runtime cluster cannot be reached.
    #[error(transparent)]
    RuntimeCluster(#[from] crate::runtime::cluster::SkrError),
    /// The reconcile took longer than [`RECONCILE_TIMEOUT`].
    #[error("timed out")]
    Timeout,
    /// The runtime cluster holds more RegistryCacheConfigs than a Runtime can name.
    #[error(
        "the runtime cluster holds more than {MAX_CONFIGS} RegistryCacheConfigs, the most spec.imageRegistryCache of a Runtime holds; remove some"
    )]
    TooManyConfigs,
    /// A RegistryCacheConfig does not read; the Runtime's caches stay as they are.
    #[error(transparent)]
    UnreadableConfig(#[from] rc::UnreadableConfig),
}

impl crate::metrics::ResultLabel for Error {
    fn result_label(&self) -> &'static str {
        "error"
    }
}

/// The most RegistryCacheConfigs read from a runtime cluster: the CRD's `maxItems` of
/// `spec.imageRegistryCache`. The list is read in pages of [`CONFIG_PAGE`], so a cluster
/// that holds many large ones costs a bounded amount of memory before it is refused.
const MAX_CONFIGS: usize = 100;
/// Page size of the RegistryCacheConfig list.
const CONFIG_PAGE: u32 = 25;

fn api(action: &'static str) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Api { action, source }
}

struct Reconciler {
    ctx: Arc<Context>,
    /// The pacing of reads per kubeconfig Secret (`<namespace>/<name>`): consecutive failures
    /// (reset on success) and the wait before the next read (the backoff after a failure,
    /// [`MIN_INTERVAL`] after a success); dropped with the Secret.
    passes: crate::records::Records<()>,
    /// Which runtime clusters are hibernated, as the Runtime reconciler's Shoot watch sees it.
    clusters: crate::runtime::shoot_cache::ClusterFacts,
}

async fn run_controller(
    ctx: Arc<Context>,
    shutdown: Shutdown,
    clusters: crate::runtime::shoot_cache::ClusterFacts,
) {
    let ns = ctx.settings.namespace.clone();
    // The series KimReconcileErrors reads exist from the start, so its first failure shows
    // in `rate()`.
    for result in ["success", "error"] {
        ctx.metrics.track_reconcile_result(CONTROLLER, result);
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(1024);
    let listener = tokio::spawn(listener::serve(
        ctx.settings.registry_cache.listener_port,
        tx,
        shutdown.clone(),
    ));
    let selector = format!(
        "{},{}={}",
        names::LABEL_RUNTIME_ID,
        names::LABEL_MANAGED_BY,
        rc::MANAGED_BY
    );
    let (store, writer) = reflector::store::<Secret>();
    // What is kept per Secret goes with the Secret: the cache is compared with the records
    // every sweep period, once listed.
    let (listed_tx, listed) = tokio::sync::watch::channel(false);
    // Only which kubeconfig Secrets exist matters here; their data stays out of the cache.
    let secrets = crate::watch::events(
        Api::<Secret>::namespaced(ctx.kcp.clone(), &ns),
        watcher::Config::default().labels(&selector),
        "registry_cache_secrets",
        ctx.metrics.clone(),
    )
    .default_backoff()
    .modify(|s| {
        s.data = None;
        s.string_data = None;
        s.managed_fields_mut().clear();
    })
    .reflect(writer)
    .inspect({
        let listed_tx = listed_tx.clone();
        move |event| {
            if let Ok(watcher::Event::InitDone) = event {
                listed_tx.send_replace(true);
            }
        }
    });
    let secrets = crate::watch::settled(secrets, store.clone(), crate::watch::Deletions::Skip)
        .predicate_filter(
            predicates::labels.combine(predicates::annotations),
            PredicateConfig::default(),
        );
    let events = futures::stream::unfold(rx, move |mut rx| {
        let ns = ns.clone();
        async move {
            let runtime_id = rx.recv().await?;
            let key = ObjectRef::new(&names::kubeconfig_secret_name(&runtime_id)).within(&ns);
            Some((key, rx))
        }
    });
    let reconciler = Arc::new(Reconciler {
        ctx: ctx.clone(),
        passes: Default::default(),
        clusters,
    });
    let sweep = tokio::spawn(crate::watch::sweep(
        store.clone(),
        listed,
        crate::watch::every(crate::watch::SWEEP_PERIOD),
        {
            let reconciler = reconciler.clone();
            move |present| {
                crate::watch::forget_absent(present, reconciler.passes.keys(), |key| {
                    reconciler.passes.forget(key);
                })
            }
        },
        shutdown.clone(),
    ));
    tracing::info!("registry cache controller started");
    let run = Controller::for_stream(secrets, store.clone())
        .with_config(ControllerConfig::default().concurrency(WORKERS))
        .reconcile_on(events)
        .graceful_shutdown_on(shutdown.clone().cancelled_owned())
        .run(reconcile, error_policy, reconciler)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "registry cache controller event");
            }
        });
    crate::watch::run_until_stopped(run, store, &shutdown).await;
    let _ = listener.await;
    let _ = sweep.await;
    tracing::info!("registry cache controller stopped");
}

async fn reconcile(secret: Arc<Secret>, reconciler: Arc<Reconciler>) -> Result<Action, Error> {
    let ctx = &reconciler.ctx;
    // Upstream's "controlled by KIM" check, and the name that goes with the label: a Secret
    // labelled with another Runtime's ID does not make us read that Runtime's cluster through
    // it (the cluster is reached through the Runtime's own kubeconfig Secret anyway).
    let labels = secret.labels();
    let Some(runtime_id) = labels
        .get(names::LABEL_RUNTIME_ID)
        .filter(|v| !v.is_empty())
    else {
        return Ok(Action::await_change());
    };
    if labels.get(names::LABEL_MANAGED_BY).map(String::as_str) != Some(rc::MANAGED_BY)
        || secret.name_any() != names::kubeconfig_secret_name(runtime_id)
    {
        return Ok(Action::await_change());
    }
    // A listener event does not cut the wait short; a change of the Secret's labels or
    // annotations (what the watch passes on) does.
    let key = crate::records::key(&*secret);
    let inputs = crate::records::inputs(&secret.metadata);
    if let Some(left) = reconciler.passes.begin_pass(&key, inputs) {
        return Ok(Action::requeue(left));
    }
    let span = tracing::info_span!("reconcile", controller = CONTROLLER, runtime_id = %runtime_id);
    let period = ctx.settings.registry_cache.reconcile_period;
    let started = std::time::Instant::now();
    let result = match tokio::time::timeout(
        RECONCILE_TIMEOUT,
        apply(ctx, &reconciler.clusters, runtime_id).instrument(span),
    )
    .await
    {
        // Jittered by up to a tenth either way: the reads of clusters whose Secrets were
        // listed together (every one after a start) spread over the period.
        Ok(Ok(true)) if !period.is_zero() => Ok(Action::requeue(
            period.mul_f64(0.9 + 0.2 * rand::random::<f64>()),
        )),
        Ok(Ok(_)) => Ok(Action::await_change()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::Timeout),
    };
    ctx.metrics
        .observe_reconcile_result(CONTROLLER, &result, started.elapsed());
    if result.is_ok() {
        reconciler.passes.succeeded(&key);
        reconciler.passes.hold(&key, MIN_INTERVAL, inputs);
    }
    result
}

fn error_policy(secret: Arc<Secret>, err: &Error, reconciler: Arc<Reconciler>) -> Action {
    let key = crate::records::key(&*secret);
    let retry_in = reconciler.passes.retry_in(&key, &BACKOFF);
    reconciler
        .passes
        .hold(&key, retry_in, crate::records::inputs(&secret.metadata));
    let runtime_id = secret
        .labels()
        .get(names::LABEL_RUNTIME_ID)
        .map(String::as_str)
        .unwrap_or_default();
    tracing::warn!(controller = CONTROLLER, runtime_id, secret = %secret.name_any(), error = %crate::redact::logged(err), ?retry_in, "registry cache: reconcile failed; retrying");
    Action::requeue(retry_in)
}

/// Reads the runtime cluster's configuration into the Runtime. `false`: there is no Runtime to
/// keep current (gone or being deleted).
async fn apply(
    ctx: &Context,
    clusters: &crate::runtime::shoot_cache::ClusterFacts,
    runtime_id: &str,
) -> Result<bool, Error> {
    let ns = &ctx.settings.namespace;
    let runtimes: Api<Runtime> = Api::namespaced(ctx.kcp.clone(), ns);
    let Some(runtime) = runtimes
        .get_opt(runtime_id)
        .await
        .map_err(api("read the Runtime"))?
    else {
        return Ok(false);
    };
    let terminating = runtime
        .status
        .as_ref()
        .is_some_and(|s| s.state == RuntimeState::Terminating);
    if runtime.metadata.deletion_timestamp.is_some() || terminating {
        return Ok(false);
    }
    // A hibernated cluster does not answer (a timeout per attempt, and a failed reconcile that
    // would count against KimReconcileErrors until it is woken up), and its configuration
    // cannot change while it sleeps: the Runtime keeps its caches. After the wake-up the
    // runtime watcher's events, or the period, bring changes.
    if clusters.hibernated(&runtime.spec.shoot.name) {
        tracing::debug!(
            runtime_id,
            "the runtime cluster is hibernated; its registry cache configuration is read once it is woken up"
        );
        return Ok(true);
    }
    let client = crate::runtime::cluster::runtime_cluster_client(ctx, ns, runtime_id, None).await?;
    let desired = read_caches(&client).await?;
    let version = read_credentials_version(&client, &desired).await?;
    let key = names::ANNOTATION_REGISTRY_CACHE_CREDENTIALS;
    let same_caches = runtime.spec.image_registry_caches() == desired.as_slice();
    let same_version = runtime.annotation(key) == version.as_deref();
    if same_caches && same_version {
        return Ok(true);
    }
    if same_caches {
        tracing::info!(
            runtime_id,
            "registry cache credentials changed in the runtime cluster"
        );
    } else {
        tracing::info!(
            runtime_id,
            caches = desired.len(),
            "updating the Runtime with the runtime cluster's registry cache configuration"
        );
    }
    write_caches(&runtimes, &runtime, &desired, version.as_deref()).await?;
    Ok(true)
}

/// The version of the credentials Secrets the caches reference
/// ([`rc::credentials_version`]), from their metadata only: their data is not read here. A
/// reference the Runtime reconciler would refuse to copy counts as a missing Secret.
async fn read_credentials_version(
    client: &kube::Client,
    caches: &[ImageRegistryCache],
) -> Result<Option<String>, Error> {
    let mut versions = std::collections::BTreeMap::new();
    for cache in rc::with_credentials(caches) {
        let Ok(Some((namespace, name))) = rc::credentials_source(cache) else {
            continue;
        };
        let meta = Api::<Secret>::namespaced(client.clone(), namespace)
            .get_metadata_opt(name)
            .await
            .map_err(api(
                "read a registry credentials Secret of the runtime cluster",
            ))?;
        if let Some(rv) = meta.and_then(|m| m.metadata.resource_version) {
            versions.insert((namespace, name), rv);
        }
    }
    Ok(rc::credentials_version(caches, |namespace, name| {
        versions.get(&(namespace, name)).cloned()
    }))
}

/// The Kyma resource's API.
fn kyma_resource() -> ApiResource {
    ApiResource {
        group: "operator.kyma-project.io".to_owned(),
        version: "v1beta2".to_owned(),
        api_version: rc::KYMA_API_VERSION.to_owned(),
        kind: "Kyma".to_owned(),
        plural: "kymas".to_owned(),
    }
}

/// The runtime cluster's caches: none unless its Kyma resource lists the registry-cache
/// module.
pub async fn read_caches(client: &kube::Client) -> Result<Vec<ImageRegistryCache>, Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds
        .get_opt(rc::KYMA_CRD)
        .await
        .map_err(api("read the Kyma CRD of the runtime cluster"))?
        .is_none()
    {
        return Ok(Vec::new());
    }
    let kymas: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), rc::KYMA_NAMESPACE, &kyma_resource());
    let Some(kyma) = kymas
        .get_opt(rc::KYMA_NAME)
        .await
        .map_err(api("read the Kyma resource of the runtime cluster"))?
    else {
        return Ok(Vec::new());
    };
    if !rc::module_enabled(&kyma.data) {
        return Ok(Vec::new());
    }
    let configs: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &crate::runtime::registry_cache::config_resource(),
    );
    let mut values: Vec<serde_json::Value> = Vec::new();
    let mut page = ListParams::default().limit(CONFIG_PAGE);
    loop {
        let list = match configs.list(&page).await {
            Ok(list) => list,
            // The module is listed but its CRD is not installed yet.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Vec::new()),
            Err(e) => {
                return Err(api("list the RegistryCacheConfigs of the runtime cluster")(
                    e,
                ));
            }
        };
        values.extend(
            list.items
                .into_iter()
                .filter_map(|o| serde_json::to_value(o).ok()),
        );
        if values.len() > MAX_CONFIGS {
            return Err(Error::TooManyConfigs);
        }
        match list.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => page = page.continue_token(&token),
            None => break,
        }
    }
    Ok(rc::caches_from_configs(&values)?)
}

/// Writes `spec.imageRegistryCache` and the credentials version
/// (`names::ANNOTATION_REGISTRY_CACHE_CREDENTIALS`) in one write, so a new cache list and its
/// credentials make one Shoot patch: a list by server-side apply (field manager
/// `registrycachecontroller`, as upstream's), removed when empty (upstream leaves it out).
async fn write_caches(
    runtimes: &Api<Runtime>,
    runtime: &Runtime,
    caches: &[ImageRegistryCache],
    version: Option<&str>,
) -> Result<(), Error> {
    let name = runtime.name_any();
    let key = names::ANNOTATION_REGISTRY_CACHE_CREDENTIALS;
    if caches.is_empty() || version.is_none() && runtime.annotation(key).is_some() {
        // A merge patch removes the annotation whoever wrote it; server-side apply would
        // only drop it when this field manager owns it.
        let mut body = json!({"metadata": {"annotations": {key: version}}});
        if caches.is_empty() {
            body["spec"] = json!({"imageRegistryCache": null});
        }
        runtimes
            .patch(&name, &PatchParams::default(), &Patch::Merge(body))
            .await
            .map_err(api("remove the registry caches from the Runtime"))?;
        if caches.is_empty() {
            return Ok(());
        }
    }
    let mut body = json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "Runtime",
        "metadata": {"name": name},
        "spec": {"imageRegistryCache": caches},
    });
    if let Some(version) = version {
        body["metadata"]["annotations"] = json!({key: version});
    }
    runtimes
        .patch(
            &name,
            &PatchParams::apply(rc::FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(api("write the registry caches into the Runtime"))?;
    Ok(())
}
