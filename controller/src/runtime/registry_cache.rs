//! The registry cache's garden Secrets: the credentials of a runtime cluster's registry caches
//! copied into the Gardener project (the Shoot's `registry-cache` extension reads them there),
//! replaced when they change and deleted when no cache references them; and the state of the
//! runtime cluster's `RegistryCacheConfig`s (upstream's garden secret syncer, manager and
//! status manager).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kim_shared::api::runtime::ImageRegistryCache;
use kim_shared::names;
use kim_shared::registry_cache::{self as rc, ConfigState, GardenSecret, Refusal, SyncStep};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::status::CondStatus;

/// Time allowed for the calls into the runtime cluster in one step.
const RUNTIME_CLUSTER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Why the credentials could not be copied. Never holds Secret data.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The Runtime's cache entry may not make us copy that Secret.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Reading the runtime cluster failed.
    #[error("runtime cluster: cannot {action}: {source}")]
    Runtime {
        /// What we tried.
        action: &'static str,
        /// Why it failed.
        source: kube::Error,
    },
    /// Writing the Gardener project failed.
    #[error("Gardener project: cannot {action}: {source}")]
    Gardener {
        /// What we tried.
        action: &'static str,
        /// Why it failed.
        source: kube::Error,
    },
}

/// The API of `RegistryCacheConfig` in the runtime cluster.
pub fn config_resource() -> ApiResource {
    ApiResource {
        group: rc::CONFIG_GROUP.to_owned(),
        version: rc::CONFIG_VERSION.to_owned(),
        api_version: format!("{}/{}", rc::CONFIG_GROUP, rc::CONFIG_VERSION),
        kind: rc::CONFIG_KIND.to_owned(),
        plural: rc::CONFIG_PLURAL.to_owned(),
    }
}

/// The registry cache Secrets of the Gardener project: of one Runtime, or all.
pub struct GardenSecrets {
    api: Api<Secret>,
    namespace: String,
}

impl GardenSecrets {
    /// The Secrets in `namespace` (`garden-<project>`) through the Gardener client.
    pub fn new(gardener: &kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(gardener.clone(), namespace),
            namespace: namespace.to_owned(),
        }
    }

    /// Lists the Secrets the selector names, keeping only those that are ours.
    async fn list(&self, selector: &str) -> Result<Vec<(GardenSecret, Secret)>, kube::Error> {
        let list = self
            .api
            .list(&ListParams::default().labels(selector))
            .await?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|s| {
                let mut info =
                    GardenSecret::from_labels(&s.name_any(), s.metadata.labels.as_ref()?)?;
                info.created = s.metadata.creation_timestamp.as_ref().map(|t| t.0);
                Some((info, s))
            })
            .collect())
    }

    /// The registry cache Secrets of one Runtime.
    pub async fn of_runtime(
        &self,
        runtime_id: &str,
    ) -> Result<Vec<(GardenSecret, Secret)>, kube::Error> {
        self.list(&rc::runtime_secrets_selector(runtime_id)).await
    }

    /// Every registry cache Secret of the project.
    pub async fn all(&self) -> Result<Vec<(GardenSecret, Secret)>, kube::Error> {
        self.list(&rc::all_secrets_selector()).await
    }

    /// Deletes one Secret of ours, `name` as listed with its `data`; one already gone is fine.
    /// An error is cleared of the Secret's credentials (a refusal may quote `oldObject`).
    pub async fn delete(
        &self,
        name: &str,
        data: Option<&BTreeMap<String, k8s_openapi::ByteString>>,
    ) -> Result<(), kube::Error> {
        match self.api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(crate::redact::secret_error(e, data)),
        }
    }

    /// Copies the credentials of the Runtime's caches (upstream's `GardenSecretSyncer`) and
    /// returns, per cache UID, the garden Secret the Shoot is to reference.
    pub async fn sync(
        &self,
        runtime_client: &kube::Client,
        runtime_id: &str,
        caches: &[ImageRegistryCache],
    ) -> Result<BTreeMap<String, String>, SyncError> {
        let gardener = |action| move |source| SyncError::Gardener { action, source };
        let runtime = |action| move |source| SyncError::Runtime { action, source };
        let existing = self
            .of_runtime(runtime_id)
            .await
            .map_err(gardener("list the registry cache Secrets"))?;
        let infos: Vec<GardenSecret> = existing.iter().map(|(i, _)| i.clone()).collect();
        let mut names = rc::secret_names(&infos, runtime_id);
        for cache in rc::with_credentials(caches) {
            let Some((namespace, secret_name)) = rc::credentials_source(cache)? else {
                continue;
            };
            let configs: Api<DynamicObject> =
                Api::namespaced_with(runtime_client.clone(), namespace, &config_resource());
            let live = configs
                .get_opt(&cache.name)
                .await
                .map_err(runtime("read the RegistryCacheConfig"))?;
            let live = live.map(|o| serde_json::to_value(o).unwrap_or_default());
            rc::check_config(cache, live.as_ref())?;
            let source = Api::<Secret>::namespaced(runtime_client.clone(), namespace)
                .get_opt(secret_name)
                .await
                .map_err(runtime("read the credentials Secret"))?
                .ok_or_else(|| Refusal::NoSecret {
                    name: cache.name.clone(),
                    namespace: namespace.to_owned(),
                    secret: secret_name.to_owned(),
                })?;
            let data = source.data.unwrap_or_default();
            rc::check_keys(cache, data.iter().map(|(k, v)| (k.as_str(), v.0.len())))?;
            let current = rc::current(&infos, runtime_id, &cache.uid)
                .and_then(|info| existing.iter().find(|(i, _)| i.name == info.name));
            let same = current.is_some_and(|(_, s)| s.data.as_ref() == Some(&data));
            let step = rc::sync_step(current.map(|(i, _)| i), same);
            if let SyncStep::Replace { old } = &step {
                let dirty = json!({"metadata": {"labels": {rc::LABEL_DIRTY: "true"}}});
                match self
                    .api
                    .patch(old, &PatchParams::default(), &Patch::Merge(dirty))
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => {
                        let data = current.and_then(|(_, s)| s.data.as_ref());
                        let e = crate::redact::secret_error(e, data);
                        return Err(gardener("label a replaced Secret dirty")(e));
                    }
                }
            }
            if step != SyncStep::Keep {
                let name = rc::new_secret_name(rand::random::<u128>());
                // A refusal may quote the credentials it carried, however short.
                let carried: Vec<&[u8]> = crate::redact::data_values(Some(&data)).collect();
                let quoted = |e| crate::redact::api_error(e, &carried);
                let data: BTreeMap<String, Value> = data
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::to_value(v).unwrap_or_default()))
                    .collect();
                let body = rc::garden_secret(&name, &self.namespace, runtime_id, cache, &data);
                let secret: Secret = serde_json::from_value(body)
                    .map_err(|e| gardener("build the Secret")(kube::Error::SerdeError(e)))?;
                self.api
                    .create(&PostParams::default(), &secret)
                    .await
                    .map_err(quoted)
                    .map_err(gardener("create the registry cache Secret"))?;
                tracing::info!(cache = %cache.name, namespace = %cache.namespace, secret = %name, "registry cache credentials copied to the Gardener project");
                names.insert(cache.uid.clone(), name);
            }
        }
        Ok(names)
    }

    /// Deletes the Runtime's Secrets that no cache references any more, and replaced ones
    /// (upstream's `DeleteUnused`), but those the Shoot `shoot` (when given) still references:
    /// a Shoot not patched to the spec yet (its patches suspended, or failing) keeps them, and
    /// Gardener's next reconcile of it would fail on a missing resource.
    pub async fn delete_unused(
        &self,
        runtime_id: &str,
        caches: &[ImageRegistryCache],
        shoot: Option<&str>,
    ) -> Result<(), kube::Error> {
        let existing = self.of_runtime(runtime_id).await?;
        let infos: Vec<GardenSecret> = existing.iter().map(|(i, _)| i.clone()).collect();
        let unused = rc::unused(&infos, runtime_id, caches);
        if unused.is_empty() {
            return Ok(());
        }
        // Read live, and only when there is something to delete: the Shoot cache keeps none of
        // `spec.resources` but the audit-log Secret.
        let referenced: std::collections::HashSet<String> = match shoot {
            Some(name) => {
                let shoots: Api<kim_shared::gardener::Shoot> =
                    Api::namespaced(self.api.clone().into_client(), &self.namespace);
                shoots
                    .get_opt(name)
                    .await?
                    .and_then(|s| s.spec.resources)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|r| r.resource_ref.name)
                    .collect()
            }
            None => Default::default(),
        };
        for name in unused {
            if referenced.contains(name) {
                tracing::info!(secret = %name, "unused registry cache Secret kept: the Shoot still references it");
                continue;
            }
            let data = existing
                .iter()
                .find(|(i, _)| i.name == name)
                .and_then(|(_, s)| s.data.as_ref());
            self.delete(name, data).await?;
            tracing::info!(secret = %name, "unused registry cache Secret deleted");
        }
        Ok(())
    }

    /// Deletes every Secret of the Runtime (it is deleted, its Shoot gone).
    pub async fn delete_all(&self, runtime_id: &str) -> Result<(), kube::Error> {
        self.delete_unused(runtime_id, &[], None).await
    }
}

/// Sets the `RegistryCacheConfigured` condition and state of the runtime cluster's
/// `RegistryCacheConfig`s of `caches`; one that is gone is skipped. Failures are logged: the
/// status is for the runtime cluster's users, the Runtime's condition is what we act on.
pub async fn set_config_states(
    runtime_client: &kube::Client,
    caches: &[ImageRegistryCache],
    state: ConfigState,
    reason: &str,
    message: &str,
) {
    let now = jiff::Timestamp::now().to_string();
    for cache in caches {
        let api: Api<DynamicObject> =
            Api::namespaced_with(runtime_client.clone(), &cache.namespace, &config_resource());
        let result = async {
            let Some(live) = api.get_opt(&cache.name).await? else {
                return Ok(());
            };
            if live.metadata.uid.as_deref() != Some(cache.uid.as_str()) {
                return Ok(());
            }
            let status = rc::config_status(
                &live.data["status"],
                state,
                reason,
                message,
                live.metadata.generation,
                &now,
            );
            if status["state"] == live.data["status"]["state"]
                && status["conditions"] == live.data["status"]["conditions"]
            {
                return Ok(());
            }
            let body = json!({
                "metadata": {"resourceVersion": live.metadata.resource_version},
                "status": status,
            });
            api.patch_status(&cache.name, &PatchParams::default(), &Patch::Merge(body))
                .await
                .map(|_| ())
        }
        .await;
        if let Err(e) = result {
            tracing::info!(cache = %cache.name, namespace = %cache.namespace, error = %e, "cannot write the RegistryCacheConfig status");
        }
    }
}

/// Before a patch of the Shoot (upstream `sFnSyncRegistryCacheGardenSecrets`): with the
/// registry cache on and caches listed, the runtime cluster's `RegistryCacheConfig`s turn
/// `Pending` (with `mark_pending`) and their credentials are copied; returns the garden Secret per cache UID for the
/// conversion. A failure sets `RegistryCacheConfigured` False and is the action to return.
pub async fn before_patch(
    reconciler: &super::Reconciler,
    runtime: &kim_shared::api::Runtime,
    draft: &mut super::status::StatusDraft,
    mark_pending: bool,
) -> Result<BTreeMap<String, String>, kube::runtime::controller::Action> {
    let ctx = &reconciler.ctx;
    let caches = runtime.spec.image_registry_caches();
    if !ctx.settings.registry_cache.enabled || caches.is_empty() {
        return Ok(BTreeMap::new());
    }
    if mark_pending
        && super::status::ready_for_its_spec(runtime)
        && runtime
            .condition(names::condition::REGISTRY_CACHE_CONFIGURED)
            .is_some_and(|c| c.status == CondStatus::True.as_str())
    {
        // Stored before the patch: a patch for the caches alone leaves the generation as it
        // is, and a pass cut off after it (a crash, a failed status write) would leave nothing
        // else that tells the next pass to finish the caches (`after_provisioned`). A condition
        // that is not True already says so ([`unfinished`]), and so does a spec change (the
        // status's `Pending` with the new generation, written before the patch).
        draft.set(
            names::condition::REGISTRY_CACHE_CONFIGURED,
            CondStatus::Unknown,
            names::reason::PROCESSING,
            "Registry cache configuration is being applied",
        );
        if let Err(e) = reconciler.apply_status(runtime, draft).await {
            tracing::info!(error = %e, "cannot store that the registry cache is being configured; retrying");
            return Err(kube::runtime::controller::Action::requeue(
                super::requeue::RETRY,
            ));
        }
    }
    let runtime_id = reconciler.runtime_id(runtime);
    let result = async {
        let client = reconciler
            .runtime_cluster_client(runtime, &runtime_id, None)
            .await
            .map_err(|e| e.to_string())?;
        if mark_pending {
            set_config_states(
                &client,
                caches,
                ConfigState::Pending,
                names::reason::REGISTRY_CACHE_CONFIGURED,
                "",
            )
            .await;
        }
        let secrets = GardenSecrets::new(&ctx.gardener, &ctx.gardener_namespace);
        match secrets.sync(&client, &runtime_id, caches).await {
            Ok(names) => Ok(names),
            Err(e) => {
                // The answer to a Secret create may quote the credentials it carried (the
                // values are redacted where the create failed; this catches the rest).
                let e = kim_shared::redact::credentials(&e.to_string()).into_owned();
                set_config_states(
                    &client,
                    caches,
                    ConfigState::Failed,
                    rc::REASON_GARDEN_CONFIGURATION_FAILED,
                    &e,
                )
                .await;
                Err(e)
            }
        }
    };
    match tokio::time::timeout(RUNTIME_CLUSTER_TIMEOUT, result).await {
        Ok(Ok(names)) => Ok(names),
        Ok(Err(message)) => Err(failed(
            draft,
            names::reason::REGISTRY_CACHE_GARDEN_CLUSTER_CONFIGURATION_FAILED,
            message,
        )),
        Err(_) => Err(failed(
            draft,
            names::reason::REGISTRY_CACHE_GARDEN_CLUSTER_CONFIGURATION_FAILED,
            "timed out".to_owned(),
        )),
    }
}

/// The garden Secrets `live` references for the Runtime's caches
/// ([`kim_shared::convert::registry_cache_secrets_on`]), when each is the Runtime's current one
/// for its cache as Gardener lists them (not replaced by a rotation, not another Runtime's, not
/// gone); `None` otherwise, and then the credentials are copied from the runtime cluster as for
/// any patch.
pub async fn current_on_shoot(
    reconciler: &super::Reconciler,
    runtime: &kim_shared::api::Runtime,
    live: &kim_shared::gardener::Shoot,
) -> Option<BTreeMap<String, String>> {
    let on_shoot = kim_shared::convert::registry_cache_secrets_on(runtime, live)?;
    if on_shoot.is_empty() {
        return Some(on_shoot);
    }
    let ctx = &reconciler.ctx;
    let runtime_id = reconciler.runtime_id(runtime);
    let listed = GardenSecrets::new(&ctx.gardener, &ctx.gardener_namespace)
        .of_runtime(&runtime_id)
        .await
        .ok()?;
    let infos: Vec<GardenSecret> = listed.into_iter().map(|(info, _)| info).collect();
    let current = rc::secret_names(&infos, &runtime_id);
    on_shoot
        .iter()
        .all(|(uid, name)| current.get(uid) == Some(name))
        .then_some(on_shoot)
}

/// Whether a Runtime's caches are not known to be configured: the registry cache is on, the
/// Runtime has caches, and `RegistryCacheConfigured` is not True (a patch for them began, or
/// never finished). Such a Runtime is not left alone as `Ready`: its next pass finishes them.
pub fn unfinished(reconciler: &super::Reconciler, runtime: &kim_shared::api::Runtime) -> bool {
    reconciler.ctx.settings.registry_cache.enabled
        && !runtime.spec.image_registry_caches().is_empty()
        && runtime
            .condition(names::condition::REGISTRY_CACHE_CONFIGURED)
            .is_none_or(|c| c.status != CondStatus::True.as_str())
}

/// After the Shoot is reconciled (upstream `sFnCleanupRegistryCacheGardenSecrets`): unused
/// garden Secrets are deleted, the `RegistryCacheConfig`s turn `Ready` and
/// `RegistryCacheConfigured` is True; without caches (or with the registry cache off) the
/// condition goes. `None`: go on.
pub async fn after_provisioned(
    reconciler: &super::Reconciler,
    runtime_client: &kube::Client,
    runtime: &kim_shared::api::Runtime,
    draft: &mut super::status::StatusDraft,
) -> Option<kube::runtime::controller::Action> {
    let ctx = &reconciler.ctx;
    if !ctx.settings.registry_cache.enabled {
        draft.remove(names::condition::REGISTRY_CACHE_CONFIGURED);
        return None;
    }
    let caches = runtime.spec.image_registry_caches();
    let runtime_id = reconciler.runtime_id(runtime);
    let secrets = GardenSecrets::new(&ctx.gardener, &ctx.gardener_namespace);
    let shoot = Some(runtime.spec.shoot.name.as_str());
    if let Err(e) = secrets.delete_unused(&runtime_id, caches, shoot).await {
        return Some(failed(
            draft,
            names::reason::REGISTRY_CACHE_GARDEN_CLUSTER_CLEANUP_FAILED,
            format!("cannot delete unused registry cache Secrets: {e}"),
        ));
    }
    if caches.is_empty() {
        draft.remove(names::condition::REGISTRY_CACHE_CONFIGURED);
        return None;
    }
    let _ = tokio::time::timeout(
        RUNTIME_CLUSTER_TIMEOUT,
        set_config_states(
            runtime_client,
            caches,
            ConfigState::Ready,
            names::reason::REGISTRY_CACHE_CONFIGURED,
            "",
        ),
    )
    .await;
    draft.set(
        names::condition::REGISTRY_CACHE_CONFIGURED,
        CondStatus::True,
        names::reason::REGISTRY_CACHE_CONFIGURED,
        "Registry cache configured successfully",
    );
    None
}

/// The Runtime's Shoot exists but the Runtime cannot become its patch (it is `Failed` with
/// `ConversionErr` until its spec changes; upstream's `setRegistryCacheStatusFailed`): the
/// `RegistryCacheConfig`s turn `Error`, so that the runtime cluster's users see that their
/// caches will not be applied rather than `Pending` for good. Failures are logged.
pub async fn on_conversion_failed(
    reconciler: &super::Reconciler,
    runtime: &kim_shared::api::Runtime,
) {
    let caches = runtime.spec.image_registry_caches();
    if !reconciler.ctx.settings.registry_cache.enabled || caches.is_empty() {
        return;
    }
    let runtime_id = reconciler.runtime_id(runtime);
    let work = async {
        match reconciler
            .runtime_cluster_client(runtime, &runtime_id, None)
            .await
        {
            Ok(client) => {
                set_config_states(
                    &client,
                    caches,
                    ConfigState::Failed,
                    rc::REASON_EXTENSION_CONFIGURATION_FAILED,
                    rc::MESSAGE_EXTENSION_CONFIGURATION_FAILED,
                )
                .await
            }
            Err(e) => {
                tracing::info!(error = %e, "cannot reach the runtime cluster to set the RegistryCacheConfig status")
            }
        }
    };
    if tokio::time::timeout(RUNTIME_CLUSTER_TIMEOUT, work)
        .await
        .is_err()
    {
        tracing::info!("timed out setting the RegistryCacheConfig status");
    }
}

/// When the Runtime is deleted and its Shoot is gone: every garden Secret of the Runtime goes,
/// with the registry cache on or off (off, nothing else would delete them).
pub async fn on_delete(
    reconciler: &super::Reconciler,
    runtime: &kim_shared::api::Runtime,
) -> Result<(), kube::Error> {
    let ctx = &reconciler.ctx;
    GardenSecrets::new(&ctx.gardener, &ctx.gardener_namespace)
        .delete_all(&reconciler.runtime_id(runtime))
        .await
}

/// `RegistryCacheConfigured` False, the Runtime Pending, retried.
fn failed(
    draft: &mut super::status::StatusDraft,
    reason: &str,
    message: String,
) -> kube::runtime::controller::Action {
    tracing::info!(%message, "registry cache");
    draft.set(
        names::condition::REGISTRY_CACHE_CONFIGURED,
        CondStatus::False,
        reason,
        message,
    );
    draft.state(kim_shared::api::RuntimeState::Pending);
    kube::runtime::controller::Action::requeue(super::requeue::RETRY)
}
