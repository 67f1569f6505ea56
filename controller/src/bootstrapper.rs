//! The runtime bootstrapper's reads and writes (behind `--runtime-bootstrapper-enabled`; the
//! decisions are `kim_shared::bootstrapper`'s): the KCP ConfigMap, pull Secret and
//! ClusterTrustBundle copied into the runtime cluster, the manifests applied, the Deployment
//! read; and the config reload watcher, which has every runtime cluster configured again when
//! one of those KCP objects changes.
//!
//! Errors name objects and the apiserver's reason, never their data (the pull Secret and the
//! manifests may hold credentials).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kim_shared::bootstrapper::{
    DEFAULT_NAMESPACE, FIELD_MANAGER, MANIFESTS_KEY, Manifests, Settings, Status, Watched, status,
};
use kim_shared::names;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::Scope;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::runtime::runtime_cache::CachedRuntime;

/// What went wrong, with the step that failed (it decides the condition's reason).
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// Reading or copying the ConfigMap, pull Secret or ClusterTrustBundle.
    #[error("{0}")]
    Configure(String),
    /// Reading the manifests or the Deployment.
    #[error("{0}")]
    Status(String),
    /// Applying the manifests.
    #[error("{0}")]
    Apply(String),
}

/// The type of an image pull Secret.
const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";

fn gvk_resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// `what` and the API server's message, with credential-like runs removed (an admission
/// webhook of the runtime cluster may quote what we wrote).
fn api_message(what: &str, e: &kube::Error) -> String {
    format!("{what}: {}", crate::runtime::classify::message(e))
}

/// [`api_message`] for a refused write of `secret`'s data: the answer may quote what was
/// written (a webhook of the runtime cluster echoing the request), so its values go, however
/// short, and their base64.
fn refused_write_message(what: &str, e: kube::Error, secret: &DynamicObject) -> String {
    let carried = secret_values(secret);
    let carried: Vec<&[u8]> = carried.iter().map(Vec::as_slice).collect();
    api_message(what, &crate::redact::api_error(e, &carried))
}

/// The decoded values of a Secret read as a [`DynamicObject`] (`data` holds base64), and of a
/// value that is JSON (a `.dockerconfigjson`) each string in it: an echo may quote one
/// password out of the document.
fn secret_values(secret: &DynamicObject) -> Vec<Vec<u8>> {
    values_carried(secret.data.get("data"), None)
}

/// The values a Secret of the manifests carries: its `data` decoded and its `stringData`.
fn manifest_secret_values(obj: &Value) -> Vec<Vec<u8>> {
    values_carried(obj.get("data"), obj.get("stringData"))
}

/// The values of a Secret's `data` (base64) and `stringData` (as written), and of each value
/// that is JSON every string in it.
fn values_carried(data: Option<&Value>, string_data: Option<&Value>) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    fn strings(v: &Value, out: &mut Vec<Vec<u8>>) {
        match v {
            Value::String(s) => out.push(s.as_bytes().to_vec()),
            Value::Array(items) => items.iter().for_each(|i| strings(i, out)),
            Value::Object(map) => map.values().for_each(|i| strings(i, out)),
            _ => {}
        }
    }
    fn values(v: Option<&Value>) -> impl Iterator<Item = &str> {
        v.and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.values())
            .filter_map(Value::as_str)
    }
    let decoded =
        values(data).filter_map(|v| base64::engine::general_purpose::STANDARD.decode(v).ok());
    let written = values(string_data).map(|v| v.as_bytes().to_vec());
    let mut out = Vec::new();
    for value in decoded.chain(written) {
        if let Ok(doc) = serde_json::from_slice::<Value>(&value) {
            strings(&doc, &mut out);
        }
        out.push(value);
    }
    out
}

/// The KCP object `kind`/`name` as the config reload watcher last saw it; read from `api`
/// before the watcher has listed it. The error names `what`.
async fn kcp_object(
    changes: &ConfigChanges,
    api: Api<DynamicObject>,
    kind: &str,
    name: &str,
    what: &str,
) -> Result<Arc<DynamicObject>, String> {
    let mut known = changes.object(kind, name);
    if matches!(known, Known::NotListed) {
        // Right after the start: the watcher lists within moments.
        changes.listed(LISTING_WAIT).await;
        known = changes.object(kind, name);
    }
    match known {
        Known::Found(obj) => Ok(obj),
        Known::Missing => Err(format!("reading {what}: it does not exist")),
        Known::NotListed => api
            .get(name)
            .await
            .map(Arc::new)
            .map_err(|e| api_message(&format!("reading {what}"), &e)),
    }
}

/// How long a pass waits for the config reload watcher's first list before it reads the KCP
/// itself.
const LISTING_WAIT: Duration = Duration::from_secs(10);

/// [`kcp_object`] for the copy step.
async fn read(
    changes: &ConfigChanges,
    api: Api<DynamicObject>,
    kind: &str,
    name: &str,
    what: &str,
) -> Result<Arc<DynamicObject>, BootstrapError> {
    kcp_object(changes, api, kind, name, what)
        .await
        .map_err(BootstrapError::Configure)
}

/// Copies the configuration into the runtime cluster (upstream `Configure`).
pub async fn configure(
    kcp: &Client,
    kcp_namespace: &str,
    changes: &ConfigChanges,
    runtime_client: &Client,
    s: &Settings,
) -> Result<(), BootstrapError> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    // The pull Secret is read and checked first, so that a refused one leaves nothing copied.
    let secret_res = gvk_resource("", "v1", "Secret", "secrets");
    let pull_secret = if s.kcp_pull_secret_name.is_empty() {
        None
    } else {
        let secret = read(
            changes,
            Api::namespaced_with(kcp.clone(), kcp_namespace, &secret_res),
            "Secret",
            &s.kcp_pull_secret_name,
            &format!("Secret {kcp_namespace}/{}", s.kcp_pull_secret_name),
        )
        .await?;
        // Upstream refuses to start with a pull Secret of another type; a runtime cluster
        // could not pull with it.
        let type_ = secret.data.get("type").and_then(Value::as_str);
        if type_ != Some(DOCKER_CONFIG_JSON) {
            return Err(BootstrapError::Configure(format!(
                "Secret {kcp_namespace}/{} is of type {}, not {DOCKER_CONFIG_JSON}",
                s.kcp_pull_secret_name,
                type_.unwrap_or("Opaque")
            )));
        }
        Some(secret)
    };
    let cm_res = gvk_resource("", "v1", "ConfigMap", "configmaps");
    let cm = read(
        changes,
        Api::namespaced_with(kcp.clone(), kcp_namespace, &cm_res),
        "ConfigMap",
        &s.kcp_config_name,
        &format!("ConfigMap {kcp_namespace}/{}", s.kcp_config_name),
    )
    .await?;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": s.skr_config_name, "namespace": s.skr_namespace},
        "data": cm.data.get("data").cloned().unwrap_or(Value::Null)});
    Api::<DynamicObject>::namespaced_with(runtime_client.clone(), &s.skr_namespace, &cm_res)
        .patch(&s.skr_config_name, &pp, &Patch::Apply(body))
        .await
        .map_err(|e| {
            BootstrapError::Configure(api_message(
                &format!(
                    "applying ConfigMap {}/{}",
                    s.skr_namespace, s.skr_config_name
                ),
                &e,
            ))
        })?;

    if let Some(secret) = pull_secret {
        let body = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": s.skr_pull_secret_name, "namespace": s.skr_namespace},
            "type": secret.data.get("type").cloned().unwrap_or(Value::Null),
            "data": secret.data.get("data").cloned().unwrap_or(Value::Null)});
        Api::<DynamicObject>::namespaced_with(
            runtime_client.clone(),
            &s.skr_namespace,
            &secret_res,
        )
        .patch(&s.skr_pull_secret_name, &pp, &Patch::Apply(body))
        .await
        .map_err(|e| {
            BootstrapError::Configure(refused_write_message(
                &format!(
                    "applying Secret {}/{}",
                    s.skr_namespace, s.skr_pull_secret_name
                ),
                e,
                &secret,
            ))
        })?;
    }

    if !s.kcp_cluster_trust_bundle.is_empty() {
        let res = cluster_trust_bundles();
        let ctb = read(
            changes,
            Api::all_with(kcp.clone(), &res),
            "ClusterTrustBundle",
            &s.kcp_cluster_trust_bundle,
            &format!("ClusterTrustBundle {}", s.kcp_cluster_trust_bundle),
        )
        .await?;
        let body = json!({"apiVersion": "certificates.k8s.io/v1beta1",
            "kind": "ClusterTrustBundle",
            "metadata": {"name": s.skr_cluster_trust_bundle},
            "spec": ctb.data.get("spec").cloned().unwrap_or(Value::Null)});
        Api::<DynamicObject>::all_with(runtime_client.clone(), &res)
            .patch(&s.skr_cluster_trust_bundle, &pp, &Patch::Apply(body))
            .await
            .map_err(|e| {
                BootstrapError::Configure(api_message(
                    &format!("applying ClusterTrustBundle {}", s.skr_cluster_trust_bundle),
                    &e,
                ))
            })?;
    }
    Ok(())
}

fn cluster_trust_bundles() -> ApiResource {
    gvk_resource(
        "certificates.k8s.io",
        "v1beta1",
        "ClusterTrustBundle",
        "clustertrustbundles",
    )
}

/// Where the installation stands, with the wanted manifests (upstream `InstallationInfo`).
pub async fn installation(
    kcp: &Client,
    kcp_namespace: &str,
    changes: &ConfigChanges,
    runtime_client: &Client,
    s: &Settings,
) -> Result<(Status, Manifests), BootstrapError> {
    let cm_res = gvk_resource("", "v1", "ConfigMap", "configmaps");
    let cm = kcp_object(
        changes,
        Api::namespaced_with(kcp.clone(), kcp_namespace, &cm_res),
        "ConfigMap",
        &s.manifests_config_map_name,
        &format!("ConfigMap {kcp_namespace}/{}", s.manifests_config_map_name),
    )
    .await
    .map_err(BootstrapError::Status)?;
    let text = cm
        .data
        .pointer(&format!("/data/{}", MANIFESTS_KEY.replace('/', "~1")))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let manifests =
        Manifests::parse(text, &s.skr_namespace, &s.skr_deployment_name).map_err(|e| {
            BootstrapError::Status(format!(
                "ConfigMap {kcp_namespace}/{}: {e}",
                s.manifests_config_map_name
            ))
        })?;
    let deployments = gvk_resource("apps", "v1", "Deployment", "deployments");
    let dep = Api::<DynamicObject>::namespaced_with(
        runtime_client.clone(),
        &s.skr_namespace,
        &deployments,
    )
    .get_opt(&s.skr_deployment_name)
    .await
    .map_err(|e| {
        BootstrapError::Status(api_message(
            &format!(
                "reading Deployment {}/{}",
                s.skr_namespace, s.skr_deployment_name
            ),
            &e,
        ))
    })?;
    let dep = dep.map(|d| serde_json::to_value(d).unwrap_or(Value::Null));
    Ok((status(dep.as_ref(), &manifests.version), manifests))
}

/// Applies the manifests by server-side apply in their order, each object's resource found by
/// discovery; the bootstrapper Deployment (the last) as the runtime cluster answered its apply.
pub async fn apply_manifests(
    runtime_client: &Client,
    manifests: &Manifests,
) -> Result<Value, BootstrapError> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let mut last = Value::Null;
    for obj in &manifests.objects {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default();
        let kind = obj["kind"].as_str().unwrap_or_default();
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, caps) = kube::discovery::pinned_kind(runtime_client, &gvk)
            .await
            .map_err(|e| {
                BootstrapError::Apply(api_message(&format!("finding {api_version} {kind}"), &e))
            })?;
        let mut body = obj.clone();
        let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
            let ns = obj
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or(DEFAULT_NAMESPACE)
                .to_owned();
            body["metadata"]["namespace"] = json!(ns);
            Api::namespaced_with(runtime_client.clone(), &ns, &resource)
        } else {
            if let Some(m) = body["metadata"].as_object_mut() {
                m.remove("namespace");
            }
            Api::all_with(runtime_client.clone(), &resource)
        };
        let answer = api
            .patch(name, &pp, &Patch::Apply(body))
            .await
            .map_err(|e| {
                let what = format!("applying {kind} {name}");
                BootstrapError::Apply(if kind == "Secret" {
                    let carried = manifest_secret_values(obj);
                    let carried: Vec<&[u8]> = carried.iter().map(Vec::as_slice).collect();
                    api_message(&what, &crate::redact::api_error(e, &carried))
                } else {
                    api_message(&what, &e)
                })
            })?;
        last = serde_json::to_value(answer).unwrap_or(Value::Null);
    }
    Ok(last)
}

/// The runtime bootstrapper's configuration as the config reload watcher last saw it: a
/// digest of the watched objects (none before each was listed once) and how often it changed
/// since.
#[derive(Clone, Debug, Default)]
pub struct ConfigChanges(Arc<Mutex<SeenConfig>>, Arc<tokio::sync::Notify>);

#[derive(Debug, Default)]
struct SeenConfig {
    /// The watched objects as last delivered, by (kind, name): the passes read them from here,
    /// not from the KCP (at 10,000 Runtimes a configuration change would otherwise cost 40,000
    /// reads, each of the manifests ConfigMap a full copy of the manifests).
    objects: BTreeMap<(String, String), Arc<DynamicObject>>,
    /// Every watched object was listed once: what `objects` lacks does not exist.
    listed: bool,
    digest: Option<String>,
    /// The digest before an object went missing: what a configuration whole again is
    /// compared with.
    last: Option<String>,
    changes: u64,
}

impl ConfigChanges {
    /// The digest of the configuration (`None` until every watched object was listed) and the
    /// number of changes seen after the first listing.
    pub fn now(&self) -> (Option<String>, u64) {
        let seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (seen.digest.clone(), seen.changes)
    }

    /// The watched object `kind`/`name` as last delivered.
    fn object(&self, kind: &str, name: &str) -> Known<Arc<DynamicObject>> {
        let seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match seen.objects.get(&(kind.to_owned(), name.to_owned())) {
            Some(obj) => Known::Found(obj.clone()),
            None if seen.listed => Known::Missing,
            None => Known::NotListed,
        }
    }

    /// Keeps `obj` (`None`: gone) as the watched object `key`.
    fn keep(&self, key: &(String, String), obj: Option<DynamicObject>) {
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match obj {
            Some(obj) => seen.objects.insert(key.clone(), Arc::new(obj)),
            None => seen.objects.remove(key),
        };
    }

    /// Every watched object was listed once.
    fn all_listed(&self) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .listed = true;
        self.1.notify_waiters();
    }

    /// Waits at most `limit` until every watched object was listed once.
    async fn listed(&self, limit: Duration) {
        let listed = async {
            loop {
                // Registered before the look, so that a listing in between is not missed.
                let notified = self.1.notified();
                if self
                    .0
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .listed
                {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(limit, listed).await;
    }

    /// Forgets the digest (an object is missing); whether there was one.
    fn forget(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .digest
            .take()
            .is_some()
    }

    /// Takes `digest`; whether it is a change (not the first one, nor the one there was
    /// before an object went missing and came back as it was).
    fn take(&self, digest: String) -> bool {
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let changed = seen.last.as_ref().is_some_and(|last| *last != digest);
        if changed {
            seen.changes += 1;
        }
        seen.digest = Some(digest.clone());
        seen.last = Some(digest);
        changed
    }
}

/// What the config reload watcher knows of an object.
#[derive(Debug)]
enum Known<T> {
    /// As last delivered.
    Found(T),
    /// Listed, and not there.
    Missing,
    /// Not listed yet (right after the start).
    NotListed,
}

/// One watched object of the runtime bootstrapper's configuration, as last seen.
#[derive(Debug, Default)]
struct WatchedObject {
    /// (kind, name).
    key: (String, String),
    /// Its current list is complete.
    listed: bool,
    /// The list under way has held it.
    relisted: bool,
    /// What the digest covers ([`digest_input`]); `None` while it does not exist.
    input: Option<Value>,
    /// A Secret's type and data, compared in memory only.
    content: Option<Value>,
}

impl WatchedObject {
    /// `obj` as the watch delivers it. A Secret's digest input (its `resourceVersion`) moves
    /// only when its type or data change, not on a label or annotation someone adds.
    fn seen(&mut self, kind: &str, obj: &DynamicObject) {
        if kind == "Secret" {
            let content = json!({"type": obj.data["type"], "data": obj.data["data"]});
            if self.input.is_some() && self.content.as_ref() == Some(&content) {
                return;
            }
            self.content = Some(content);
        }
        self.input = Some(digest_input(kind, obj));
    }
}

/// What of a watched object the digest covers: its content without metadata, for a Secret only
/// its `resourceVersion` (the digest is written onto Runtimes, which more people read than the
/// pull Secret; a hash of a short password would let them guess it).
fn digest_input(kind: &str, obj: &DynamicObject) -> Value {
    if kind == "Secret" {
        return json!({"resourceVersion": obj.metadata.resource_version});
    }
    let mut content = obj.data.clone();
    if let Some(m) = content.as_object_mut() {
        m.remove("metadata");
    }
    content
}

/// FNV-1a over the JSON of `seen` (its keys sorted): stable across processes of one release,
/// so a replica that takes over compares what the previous one wrote.
fn digest(seen: &BTreeMap<(String, String), Value>) -> String {
    let text = serde_json::to_vec(&seen.iter().collect::<Vec<_>>()).unwrap_or_default();
    let hash = text.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// The config reload watcher: watches the KCP objects the bootstrapper copies or applies and
/// keeps `changes` up to date. Once each was listed it yields the Runtimes of `runtimes` whose
/// cluster was configured with another configuration (annotation
/// [`names::ANNOTATION_RUNTIME_BOOTSTRAPPER_CONFIG`]: a change while no replica led, or one a
/// replica before this one had not taken to every cluster); after a change it yields every
/// Runtime. Their next pass configures their cluster again.
///
/// Upstream sets the force-patch annotation on every Runtime instead. No Shoot is patched here:
/// the bootstrapper concerns the runtime cluster alone, a pass that fails is retried by the
/// controller with the Runtime's backoff (a failed write of the annotation was lost), and a
/// Runtime held behind its Shoot (a KCP restored from a backup) is not released by it (the
/// annotation is also the operator's release of that hold).
pub fn watch_config(
    kcp: Client,
    kcp_namespace: String,
    settings: &Settings,
    runtimes: Store<CachedRuntime>,
    changes: ConfigChanges,
    metrics: Arc<crate::metrics::Metrics>,
) -> impl Stream<Item = ObjectRef<CachedRuntime>> + Send + use<> {
    let watched = settings.watched();
    let mut objects: Vec<WatchedObject> = Vec::with_capacity(watched.len());
    let streams: Vec<_> = watched
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            let (res, namespaced, name) = match w {
                Watched::ConfigMap(n) => {
                    (gvk_resource("", "v1", "ConfigMap", "configmaps"), true, n)
                }
                Watched::Secret(n) => (gvk_resource("", "v1", "Secret", "secrets"), true, n),
                Watched::ClusterTrustBundle(n) => (cluster_trust_bundles(), false, n),
            };
            let api: Api<DynamicObject> = if namespaced {
                Api::namespaced_with(kcp.clone(), &kcp_namespace, &res)
            } else {
                Api::all_with(kcp.clone(), &res)
            };
            let kind = res.kind.clone();
            objects.push(WatchedObject {
                key: (kind.clone(), name.clone()),
                ..WatchedObject::default()
            });
            crate::watch::events(
                api,
                watcher::Config::default().fields(&format!("metadata.name={name}")),
                "bootstrapper_config",
                metrics.clone(),
            )
            .default_backoff()
            .map(move |event| (i, kind.clone(), event))
            .boxed()
        })
        .collect();
    futures::stream::select_all(streams)
        .filter_map(move |(i, kind, event)| {
            let Some(object) = objects.get_mut(i) else {
                return futures::future::ready(None);
            };
            match event {
                Ok(watcher::Event::Init) => {
                    object.listed = false;
                    object.relisted = false;
                }
                Ok(watcher::Event::InitApply(obj) | watcher::Event::Apply(obj)) => {
                    object.relisted = true;
                    object.seen(&kind, &obj);
                    changes.keep(&object.key, Some(obj));
                }
                Ok(watcher::Event::InitDone) => {
                    // A list that did not hold it: it is gone.
                    if !object.relisted {
                        object.input = None;
                        object.content = None;
                        changes.keep(&object.key, None);
                    }
                    object.listed = true;
                }
                Ok(watcher::Event::Delete(_)) => {
                    object.input = None;
                    object.content = None;
                    changes.keep(&object.key, None);
                }
                Err(e) => {
                    tracing::warn!(error = %e, kind, "watching the runtime bootstrapper's configuration");
                    return futures::future::ready(None);
                }
            }
            if !objects.iter().all(|o| o.listed) {
                return futures::future::ready(None);
            }
            changes.all_listed();
            let inputs: Option<BTreeMap<(String, String), Value>> = objects
                .iter()
                .map(|o| o.input.clone().map(|v| (o.key.clone(), v)))
                .collect();
            // While one is missing there is no configuration to note or compare: the clusters
            // stay as they are, and the steps that copy it report it missing.
            let Some(inputs) = inputs else {
                if changes.forget() {
                    tracing::warn!(
                        kind,
                        "a runtime bootstrapper object is missing; runtime clusters are not configured again until it is back"
                    );
                }
                return futures::future::ready(None);
            };
            let fired = Some(digest(&inputs))
                .filter(|d| changes.now().0.as_ref() != Some(d))
                .map(|d| {
                    let changed = changes.take(d.clone());
                    if changed {
                        tracing::info!(
                            kind,
                            digest = %d,
                            "runtime bootstrapper configuration changed; configuring every runtime cluster again"
                        );
                    }
                    (changed, d)
                });
            futures::future::ready(fired)
        })
        .flat_map(move |(changed, digest)| {
            let due: Vec<ObjectRef<CachedRuntime>> = runtimes
                .state()
                .iter()
                .filter(|rt| {
                    changed
                        || rt
                            .annotations()
                            .get(names::ANNOTATION_RUNTIME_BOOTSTRAPPER_CONFIG)
                            .is_some_and(|applied| *applied != digest)
                })
                .map(|rt| ObjectRef::from_obj(&**rt))
                .collect();
            if !changed && !due.is_empty() {
                tracing::info!(
                    runtimes = due.len(),
                    digest = %digest,
                    "runtime clusters configured with another runtime bootstrapper configuration; configuring them again"
                );
            }
            futures::stream::iter(due)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(kind: &str, rv: &str, data: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": kind,
            "metadata": {"name": "x", "namespace": "kcp-system", "resourceVersion": rv},
            "data": data,
        }))
        .expect("an object")
    }

    /// A label or annotation someone adds to the pull Secret (a new `resourceVersion`, the same
    /// data) does not move its digest input; new data does.
    #[test]
    fn a_secret_moves_the_digest_only_with_its_data() {
        let mut watched = WatchedObject::default();
        watched.seen("Secret", &object("Secret", "1", json!({"p": "pw-1"})));
        let first = watched.input.clone();
        watched.seen("Secret", &object("Secret", "2", json!({"p": "pw-1"})));
        assert_eq!(watched.input, first);
        watched.seen("Secret", &object("Secret", "3", json!({"p": "pw-2"})));
        assert_ne!(watched.input, first);
        let mut cm = WatchedObject::default();
        cm.seen("ConfigMap", &object("ConfigMap", "1", json!({"k": "a"})));
        let before = cm.input.clone();
        cm.seen("ConfigMap", &object("ConfigMap", "2", json!({"k": "b"})));
        assert_ne!(cm.input, before);
    }

    /// The digest other replicas compare: the same for the same content, whatever metadata
    /// changed; another one for other content; for a Secret, its version and never its data.
    #[test]
    fn the_digest_follows_content_and_a_secrets_version_only() {
        let of = |entries: Vec<(&str, DynamicObject)>| {
            let seen: BTreeMap<(String, String), Value> = entries
                .into_iter()
                .map(|(kind, o)| ((kind.to_owned(), o.name_any()), digest_input(kind, &o)))
                .collect();
            digest(&seen)
        };
        let cm = |rv: &str, v: &str| ("ConfigMap", object("ConfigMap", rv, json!({"k": v})));
        assert_eq!(of(vec![cm("1", "a")]), of(vec![cm("7", "a")]));
        assert_ne!(of(vec![cm("1", "a")]), of(vec![cm("1", "b")]));
        let secret = |rv: &str, v: &str| ("Secret", object("Secret", rv, json!({"p": v})));
        assert_eq!(of(vec![secret("1", "pw-1")]), of(vec![secret("1", "pw-2")]));
        assert_ne!(of(vec![secret("1", "pw-1")]), of(vec![secret("2", "pw-1")]));
        let input = digest_input("Secret", &object("Secret", "3", json!({"p": "pw-1"})));
        assert!(!input.to_string().contains("pw-1"), "{input}");
        assert_eq!(of(vec![cm("1", "a")]).len(), 16);
    }

    #[test]
    fn a_refused_pull_secret_write_that_quotes_it_leaks_no_value() {
        use base64::Engine as _;
        let short = "pw-12345";
        let config = format!(r#"{{"auths":{{"r.example":{{"password":"{short}"}}}}}}"#);
        let encoded = base64::engine::general_purpose::STANDARD.encode(&config);
        let secret: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull"},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": encoded},
        }))
        .expect("a Secret");
        // A runtime cluster's webhook echoes the request: decoded, encoded, and a quoted part.
        let message = format!(
            "admission webhook \"echo\" denied the request: {config} / {encoded} / password={short}"
        );
        let e = kube::Error::Api(
            serde_json::from_value(json!({
                "status": "Failure", "message": message, "reason": "Forbidden", "code": 403,
            }))
            .expect("a Status"),
        );
        let text = refused_write_message("applying Secret kyma-system/pull", e, &secret);
        for leaked in [config.as_str(), encoded.as_str(), short] {
            assert!(!text.contains(leaked), "{leaked} in {text}");
        }
        assert!(
            text.starts_with("applying Secret kyma-system/pull: admission webhook \"echo\" denied"),
            "{text}"
        );
        assert!(text.ends_with("(403)"), "{text}");
    }

    /// A Secret of the manifests that a webhook of the runtime cluster echoes: neither its
    /// `data` (decoded) nor its `stringData` reaches the message.
    #[test]
    fn a_manifest_secret_carries_its_data_and_string_data() {
        use base64::Engine as _;
        let token = "tk-98765";
        let obj = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"a": base64::engine::general_purpose::STANDARD.encode("pw-1")},
            "stringData": {"b": format!(r#"{{"token":"{token}"}}"#), "c": "plain-2"}});
        let carried: Vec<String> = manifest_secret_values(&obj)
            .into_iter()
            .map(|v| String::from_utf8(v).unwrap_or_default())
            .collect();
        for value in ["pw-1", token, "plain-2"] {
            assert!(
                carried.iter().any(|c| c == value),
                "{value} not in {carried:?}"
            );
        }
    }

    /// A configuration is a change when its digest differs from the one before, also across
    /// an object missing for a while; the first one, and one back as it was, are not.
    #[test]
    fn a_change_is_counted_also_across_a_missing_object() {
        let changes = ConfigChanges::default();
        assert!(!changes.take("a".into()));
        assert_eq!(changes.now(), (Some("a".into()), 0));
        assert!(changes.forget());
        assert_eq!(changes.now(), (None, 0));
        assert!(!changes.take("a".into()));
        assert_eq!(changes.now(), (Some("a".into()), 0));
        assert!(changes.forget());
        assert!(changes.take("b".into()));
        assert_eq!(changes.now(), (Some("b".into()), 1));
        assert!(changes.take("c".into()));
        assert_eq!(changes.now(), (Some("c".into()), 2));
    }

    /// The passes read the watcher's copy: nothing known before its first list (a pass waits
    /// for that list), then what it delivered, and what it did not deliver is missing.
    #[tokio::test]
    async fn the_watchers_copy_is_known_once_listed() {
        let changes = ConfigChanges::default();
        let key = ("ConfigMap".to_owned(), "cfg".to_owned());
        assert!(matches!(
            changes.object("ConfigMap", "cfg"),
            Known::NotListed
        ));
        let waiting = {
            let changes = changes.clone();
            tokio::spawn(async move { changes.listed(Duration::from_secs(30)).await })
        };
        tokio::task::yield_now().await;
        changes.keep(&key, Some(object("ConfigMap", "1", json!({"k": "a"}))));
        changes.all_listed();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by the list")
            .expect("the waiter");
        assert!(
            matches!(changes.object("ConfigMap", "cfg"), Known::Found(o) if o.data["data"]["k"] == "a")
        );
        assert!(matches!(changes.object("Secret", "pull"), Known::Missing));
        changes.keep(&key, None);
        assert!(matches!(changes.object("ConfigMap", "cfg"), Known::Missing));
        // Listed already: no wait.
        tokio::time::timeout(
            Duration::from_millis(100),
            changes.listed(Duration::from_secs(30)),
        )
        .await
        .expect("no wait once listed");
    }
}
