//! The Shoot as the Runtime reconciler keeps it in its watch cache.
//!
//! The reconciler reads few fields of a cached Shoot: its metadata (annotations, generation,
//! deletion), its status (last operation and errors) and of the spec only the DNS
//! domain, hibernation, the binding names, the seed, which extensions are enabled (and the
//! addresses of the `acl` one), the Secret of the audit-log credentials, and for the
//! runtime cluster's `kyma-provisioning-info` the IP families and the `infrastructureConfig`
//! (kept as its compact JSON text: a `serde_json::Value` tree of an AWS one is several KiB of
//! map nodes, its text a few hundred bytes). The full
//! typed [`Shoot`] is 4.4 KiB before any of its strings (its many optional sub-structs are
//! inline), and at 10,000 Runtimes the cache is one Shoot per Runtime. [`CachedShoot`] decodes
//! only those fields from the watch (serde skips the rest) and boxes the large parts; a reconcile
//! turns it into a [`Shoot`] with [`CachedShoot::to_shoot`]. Patching reads the whole Shoot from
//! Gardener first ([`super::Reconciler::get_shoot_live`]).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use jiff::Timestamp;
use kim_shared::names;
use kube::ResourceExt;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kim_shared::gardener::shoot::{Dns, Hibernation, Networking};
use kim_shared::gardener::status::ShootCredentials;
use kim_shared::gardener::{
    Extension, LastError, LastOperation, Provider, RawExtension, Shoot, ShootSpec, ShootStatus,
};
use kube::Resource;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// The Shoot watch cache the Runtime reconciler fills and the GardenerCluster reconciler reads,
/// with the one future that says it is filled (`false`: its writer is gone, the controller is
/// stopping). kube's `Store::wait_until_ready` keeps one waker: of the tasks polling it only
/// the last is woken. So every waiter goes through this one [`Shared`] future, which alone
/// polls the store and wakes them all; a second readiness future over the same store would take
/// the wake-up from the first (every parked Runtime worker stayed parked for good once a
/// GardenerCluster waited on the cache too).
/// The store itself is not handed out, so that nothing can wait on it another way.
#[derive(Clone)]
pub struct ShootCache {
    store: Store<CachedShoot>,
    filled: Shared<BoxFuture<'static, bool>>,
}

impl ShootCache {
    /// `store` and its readiness.
    pub fn new(store: Store<CachedShoot>) -> Self {
        let filled = {
            let store = store.clone();
            async move { store.wait_until_ready().await.is_ok() }
                .boxed()
                .shared()
        };
        Self { store, filled }
    }

    /// Resolves once the first list is in the cache (`false`: the controller is stopping).
    pub fn filled(&self) -> Shared<BoxFuture<'static, bool>> {
        self.filled.clone()
    }

    /// The cached Shoot `key`.
    pub fn get(
        &self,
        key: &kube::runtime::reflector::ObjectRef<CachedShoot>,
    ) -> Option<std::sync::Arc<CachedShoot>> {
        self.store.get(key)
    }

    /// Every cached Shoot.
    pub fn state(&self) -> Vec<std::sync::Arc<CachedShoot>> {
        self.store.state()
    }
}

/// What the kubeconfig reconcilers need to know of each runtime cluster's Shoot, and when to
/// look again: when Gardener rotated what signs the cluster's credentials, and whether the
/// cluster is hibernated. The Runtime reconciler's Shoot watch sees it
/// ([`ClusterNotices::observe`]); the GardenerCluster reconciler replaces an admin kubeconfig
/// the CAs' rotation outdated, the RuntimeAccess reconciler the tokens the signing key's
/// rotation outdated, and it leaves a hibernated cluster alone until it is woken up. Neither
/// watches Shoots: they read the facts from [`ClusterFacts`] and are sent the runtime ID once
/// per rotation and process (the first sight of a rotated Shoot included: the receiver decides
/// from its Secret whether anything is to do), and the RuntimeAccess reconciler once per
/// wake-up.
///
/// The facts are taken from each watch event, not from the watch cache: kube-runtime fills its
/// store only once a whole (re-)list is in, after the events of that list have gone by, so a
/// receiver woken by the first sight of a rotation would read a store without it.
pub struct ClusterNotices {
    facts: ClusterFacts,
    cas: UnboundedSender<String>,
    tokens: UnboundedSender<String>,
}

/// Of each rotated or hibernated Shoot, by Shoot name: since when its new credentials are in
/// place, and whether it is hibernated.
#[derive(Clone, Default)]
pub struct ClusterFacts(Arc<Mutex<HashMap<String, Facts>>>);

/// Since when the new credentials of a Shoot's rotations are in place; its hibernation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Facts {
    cas: Option<Timestamp>,
    service_account_key: Option<Timestamp>,
    /// `spec.hibernation.enabled`: hibernation asked for.
    to_hibernate: bool,
    /// `status.hibernated`: Gardener's last word is that it is hibernated.
    hibernated: bool,
}

impl Facts {
    /// Hibernated and staying so: Gardener is done hibernating it and nobody has asked to wake
    /// it up. Its API server does not answer. While it is being hibernated or woken up, or
    /// stuck on the way, the API server may answer: that is not counted.
    fn asleep(&self) -> bool {
        self.to_hibernate && self.hibernated
    }
}

/// The receiving side of [`ClusterNotices`].
pub struct NoticedClusters {
    /// Of each rotated or hibernated Shoot: since when its new credentials are in place,
    /// whether it is hibernated.
    pub facts: ClusterFacts,
    /// Runtime IDs whose CAs were rotated: the GardenerCluster of that name holds the admin
    /// kubeconfig.
    pub cas: UnboundedReceiver<String>,
    /// Runtime IDs whose RuntimeAccesses are to look at their tokens again: the cluster's
    /// ServiceAccount token signing key was rotated, or the cluster was woken up.
    pub tokens: UnboundedReceiver<String>,
}

impl ClusterFacts {
    fn of(&self, shoot: &str) -> Facts {
        crate::records::lock(&self.0)
            .get(shoot)
            .copied()
            .unwrap_or_default()
    }

    /// Since when the new CAs of Shoot `shoot`'s last CA rotation are in place
    /// ([`ShootCredentials::new_cas_since`]).
    pub fn new_cas_since(&self, shoot: &str) -> Option<Timestamp> {
        self.of(shoot).cas
    }

    /// Since when the new ServiceAccount token signing key of Shoot `shoot`'s last key rotation
    /// is in place ([`ShootCredentials::new_service_account_key_since`]).
    pub fn new_service_account_key_since(&self, shoot: &str) -> Option<Timestamp> {
        self.of(shoot).service_account_key
    }

    /// Whether Shoot `shoot`'s cluster is hibernated and stays so ([`Facts::asleep`]);
    /// `false` before the watch delivered it.
    pub fn hibernated(&self, shoot: &str) -> bool {
        self.of(shoot).asleep()
    }

    /// Whether Shoot `shoot`'s cluster is hibernated, or being hibernated or woken up: its API
    /// server may not answer, and that is no failure. `Some(true)` while a wake-up is under
    /// way (it answers soon), `Some(false)` while hibernation is asked for, `None` when it is
    /// awake (or not delivered yet).
    pub fn sleeping(&self, shoot: &str) -> Option<bool> {
        let facts = self.of(shoot);
        (facts.to_hibernate || facts.hibernated).then_some(!facts.to_hibernate)
    }
}

impl ClusterNotices {
    /// The sending side and the receiving one.
    pub fn channel() -> (Self, NoticedClusters) {
        let (cas, cas_rx) = futures::channel::mpsc::unbounded();
        let (tokens, tokens_rx) = futures::channel::mpsc::unbounded();
        let facts = ClusterFacts::default();
        (
            Self {
                facts: facts.clone(),
                cas,
                tokens,
            },
            NoticedClusters {
                facts,
                cas: cas_rx,
                tokens: tokens_rx,
            },
        )
    }

    /// Called with every Shoot the watch delivers: records its facts and sends its runtime ID
    /// for each rotation not sent yet, and as its cluster is woken up.
    fn observe(&self, shoot: &CachedShoot) {
        let credentials = shoot.status.as_ref().and_then(|s| s.credentials.as_deref());
        let now = Facts {
            cas: credentials.and_then(ShootCredentials::new_cas_since),
            service_account_key: credentials
                .and_then(ShootCredentials::new_service_account_key_since),
            to_hibernate: shoot.to_hibernate(),
            hibernated: shoot.status_hibernated(),
        };
        let Some(name) = shoot.metadata.name.as_deref() else {
            return;
        };
        let before = {
            let mut facts = crate::records::lock(&self.facts.0);
            // Only rotated or hibernated Shoots are kept (a Shoot made anew starts without
            // rotations).
            if now == Facts::default() {
                facts.remove(name)
            } else {
                facts.insert(name.to_owned(), now)
            }
        }
        .unwrap_or_default();
        let Some(runtime_id) = shoot.annotations().get(names::SHOOT_ANNOTATION_RUNTIME_ID) else {
            return;
        };
        // A receiver is gone only when the controller stops.
        if now.cas.is_some() && now.cas != before.cas {
            let _ = self.cas.unbounded_send(runtime_id.clone());
        }
        let key_rotated = now.service_account_key.is_some()
            && now.service_account_key != before.service_account_key;
        let woken = before.asleep() && !now.asleep();
        if key_rotated || woken {
            let _ = self.tokens.unbounded_send(runtime_id.clone());
        }
    }

    /// Shoot `name` is gone: its facts go too.
    fn forget(&self, name: &str) {
        crate::records::lock(&self.facts.0).remove(name);
    }

    /// Keeps the facts of the Shoots in `listed` only: a Shoot deleted while the watch was
    /// away shows no deletion, only its absence from the re-list.
    fn retain(&self, listed: &HashSet<String>) {
        crate::records::lock(&self.facts.0).retain(|name, _| listed.contains(name));
    }
}

/// What the Runtime reconciler's Shoot watch notes of each event before the Runtime of the
/// Shoot is reconciled: the facts of its cluster ([`ClusterNotices`]) and the generations
/// raised without a change of the spec. A Shoot deleted, also one the watch missed while away, is forgotten, so that
/// what is kept follows the Shoots there are.
pub struct ShootWatchNotes {
    clusters: ClusterNotices,
    generations: ShootGenerations,
    /// The Shoots of the re-list under way.
    listed: HashSet<String>,
}

impl ShootWatchNotes {
    /// Notes for `clusters` and `generations`.
    pub fn new(clusters: ClusterNotices, generations: ShootGenerations) -> Self {
        Self {
            clusters,
            generations,
            listed: HashSet::new(),
        }
    }

    /// Called with every event of the Shoot watch.
    pub fn note(&mut self, event: &watcher::Event<CachedShoot>) {
        match event {
            watcher::Event::Init => {
                self.generations.relisted();
                self.listed.clear();
            }
            watcher::Event::InitApply(shoot) => {
                self.listed.insert(shoot.name_any());
                self.observe(shoot);
            }
            watcher::Event::Apply(shoot) => self.observe(shoot),
            watcher::Event::Delete(shoot) => {
                let name = shoot.name_any();
                self.clusters.forget(&name);
                self.generations.forget(&name);
            }
            watcher::Event::InitDone => {
                self.clusters.retain(&self.listed);
                self.listed = HashSet::new();
            }
        }
    }

    fn observe(&self, shoot: &CachedShoot) {
        self.clusters.observe(shoot);
        self.generations.observe(shoot);
    }
}

/// Which Shoot generations gardener-apiserver raised without a change of the spec, as the Shoot
/// watch delivers them: for an operation annotation (`gardener.cloud/operation`: `reconcile`,
/// `retry`, the credentials rotations `rotate-*`, `rollout-workers`), or any write while such an
/// annotation waits for the gardenlet. A Ready Runtime's Shoot reaching such a generation has not
/// drifted: a fleet-wide operation would otherwise cost every Shoot a drift re-apply (three
/// Gardener requests).
///
/// A generation counts when the watch shows it one above the previous one with the spec, as
/// gardener-apiserver serialized it, byte for byte the same ([`CachedShoot::spec_hash`]). A
/// re-list forgets what was seen: what it delivers counts as first sight.
#[derive(Clone, Default)]
pub struct ShootGenerations(Arc<Mutex<HashMap<String, GenerationSeen>>>);

#[derive(Clone, Copy, Debug, Default)]
struct GenerationSeen {
    generation: i64,
    spec_hash: u64,
    /// The current generation, when it was raised without a change of the spec.
    without_spec_change: Option<i64>,
}

impl ShootGenerations {
    /// Called with every Shoot the watch delivers.
    fn observe(&self, shoot: &CachedShoot) {
        let Some(generation) = shoot.metadata.generation else {
            return;
        };
        let spec_hash = shoot.spec.hash;
        let mut seen = crate::records::lock(&self.0);
        let entry = seen.entry(shoot.name_any()).or_default();
        if generation != entry.generation {
            // About the current generation only: a Shoot made anew under the name counts from
            // its own generation 1, not from what the earlier one reached.
            let first_sight = entry.generation == 0;
            let unchanged =
                !first_sight && generation == entry.generation + 1 && spec_hash == entry.spec_hash;
            entry.without_spec_change = unchanged.then_some(generation);
        }
        entry.generation = generation;
        entry.spec_hash = spec_hash;
    }

    /// The watch lists anew: what it delivers next is compared with nothing seen before.
    fn relisted(&self) {
        crate::records::lock(&self.0).clear();
    }

    /// Shoot `name` is gone.
    fn forget(&self, name: &str) {
        crate::records::lock(&self.0).remove(name);
    }

    /// Whether gardener-apiserver raised Shoot `shoot` to `generation` without a change of
    /// its spec.
    pub fn raised_without_spec_change(&self, shoot: &str, generation: i64) -> bool {
        crate::records::lock(&self.0)
            .get(shoot)
            .is_some_and(|seen| seen.without_spec_change == Some(generation))
    }
}

/// What the watch cache keeps of a Shoot.
#[derive(Clone, Debug, Deserialize)]
pub struct CachedShoot {
    /// The Shoot's metadata, without managedFields ([`crate::stored::cached_metadata`]).
    #[serde(default, deserialize_with = "crate::stored::cached_metadata")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    spec: HashedSpec,
    #[serde(default)]
    status: Option<CachedStatus>,
}

/// Of the status, what the reconciler reads; serde skips the rest (conditions, constraints,
/// ...) while decoding.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CachedStatus {
    credentials: Option<Box<ShootCredentials>>,
    hibernated: Option<bool>,
    last_errors: Option<Vec<LastError>>,
    last_operation: Option<Box<LastOperation>>,
    observed_generation: Option<i64>,
}

/// The spec fields kept, and a hash of the whole spec as gardener-apiserver serialized it.
#[derive(Clone, Debug, Default)]
struct HashedSpec {
    fields: CachedSpec,
    hash: u64,
}

impl<'de> Deserialize<'de> for HashedSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Option::<Box<RawValue>>::deserialize(d)?;
        let Some(raw) = raw.filter(|r| r.get() != "null") else {
            return Ok(Self::default());
        };
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hasher::write(&mut hasher, raw.get().as_bytes());
        Ok(Self {
            fields: serde_json::from_str(raw.get()).map_err(serde::de::Error::custom)?,
            hash: std::hash::Hasher::finish(&hasher),
        })
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CachedSpec {
    credentials_binding_name: Option<String>,
    dns: Option<Box<Dns>>,
    extensions: Option<CachedExtensions>,
    hibernation: Option<Box<Hibernation>>,
    networking: Option<CachedNetworking>,
    #[serde(default)]
    provider: CachedProvider,
    purpose: Option<String>,
    region: Option<String>,
    /// Of `spec.resources`, the Secret of the `auditlog-credentials` entry only.
    #[serde(default, rename = "resources", deserialize_with = "audit_log_secret")]
    audit_log_secret: Option<Box<str>>,
    secret_binding_name: Option<String>,
    seed_name: Option<String>,
}

/// The Secret the `auditlog-credentials` resource names: the audit-log tenant whose write
/// credentials the Shoot uses.
fn audit_log_secret<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<str>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Entry {
        name: String,
        resource_ref: Ref,
    }
    #[derive(Deserialize)]
    struct Ref {
        name: String,
    }
    Ok(Option::<Vec<Entry>>::deserialize(d)?
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.name == kim_shared::names::AUDITLOG_CREDENTIALS_RESOURCE)
        .map(|e| e.resource_ref.name.into_boxed_str()))
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CachedNetworking {
    ip_families: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CachedProvider {
    /// The JSON text of `infrastructureConfig`.
    #[serde(default, deserialize_with = "compact_json")]
    infrastructure_config: Option<Box<str>>,
}

/// An embedded object as its compact JSON text; `null` as absent.
fn compact_json<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<str>>, D::Error> {
    Option::<serde_json::Value>::deserialize(d)?
        .filter(|v| !v.is_null())
        .map(|v| serde_json::to_string(&v).map(String::into_boxed_str))
        .transpose()
        .map_err(serde::de::Error::custom)
}

/// An extension without its `providerConfig`.
#[derive(Clone, Debug)]
struct CachedExtension {
    type_: String,
    disabled: Option<bool>,
}

/// The extensions, and the one `providerConfig` the reconciler reads: the `acl` extension's
/// (its addresses are compared with the ACL ConfigMap), as its JSON text.
#[derive(Clone, Debug)]
struct CachedExtensions {
    list: Vec<CachedExtension>,
    acl_config: Option<Box<str>>,
}

/// The extension whose `providerConfig` is cached.
const ACL_EXTENSION: &str = "acl";

impl<'de> Deserialize<'de> for CachedExtensions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Every config is taken as its JSON text, unparsed: only the `acl` one is kept.
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Decoded {
            #[serde(rename = "type")]
            type_: String,
            disabled: Option<bool>,
            provider_config: Option<Box<RawValue>>,
        }
        let decoded = Vec::<Decoded>::deserialize(d)?;
        let acl_config = decoded
            .iter()
            .find(|e| e.type_ == ACL_EXTENSION)
            .and_then(|e| e.provider_config.as_deref())
            .map(|raw| raw.get().into());
        Ok(Self {
            list: decoded
                .into_iter()
                .map(|e| CachedExtension {
                    type_: e.type_,
                    disabled: e.disabled,
                })
                .collect(),
            acl_config,
        })
    }
}

impl CachedShoot {
    /// `spec.hibernation.enabled`.
    fn to_hibernate(&self) -> bool {
        self.spec
            .fields
            .hibernation
            .as_ref()
            .and_then(|h| h.enabled)
            .unwrap_or(false)
    }

    /// `status.hibernated`.
    fn status_hibernated(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.hibernated)
            .unwrap_or(false)
    }

    /// The Secret of the Shoot's `auditlog-credentials` resource.
    pub fn audit_log_secret(&self) -> Option<&str> {
        self.spec.fields.audit_log_secret.as_deref()
    }

    /// Drops what no reconcile reads but the metadata delivers: the labels (the Runtime's,
    /// copied onto its Shoot).
    pub fn trim(&mut self) {
        self.metadata.labels = None;
    }

    /// The cached fields as a [`Shoot`]; every other spec field is at its default.
    pub fn to_shoot(&self) -> Shoot {
        let spec = &self.spec.fields;
        Shoot {
            metadata: self.metadata.clone(),
            spec: ShootSpec {
                credentials_binding_name: spec.credentials_binding_name.clone(),
                dns: spec.dns.as_deref().cloned(),
                extensions: spec.extensions.as_ref().map(|extensions| {
                    extensions
                        .list
                        .iter()
                        .map(|e| Extension {
                            disabled: e.disabled,
                            // JSON text from the watch, so it parses.
                            provider_config: (e.type_ == ACL_EXTENSION)
                                .then_some(extensions.acl_config.as_deref())
                                .flatten()
                                .and_then(|text| serde_json::from_str(text).ok())
                                .map(RawExtension),
                            type_: e.type_.clone(),
                        })
                        .collect()
                }),
                hibernation: spec.hibernation.as_deref().cloned(),
                networking: spec.networking.as_ref().map(|n| Networking {
                    ip_families: n.ip_families.clone(),
                    ..Default::default()
                }),
                provider: Provider {
                    // The text was written by `compact_json`, so it parses.
                    infrastructure_config: spec
                        .provider
                        .infrastructure_config
                        .as_deref()
                        .and_then(|text| serde_json::from_str(text).ok())
                        .map(RawExtension),
                    ..Default::default()
                },
                purpose: spec.purpose.clone(),
                region: spec.region.clone().unwrap_or_default(),
                secret_binding_name: spec.secret_binding_name.clone(),
                seed_name: spec.seed_name.clone(),
                ..Default::default()
            },
            status: self.status.as_ref().map(|st| ShootStatus {
                credentials: st.credentials.as_deref().cloned(),
                hibernated: st.hibernated,
                last_errors: st.last_errors.clone(),
                last_operation: st.last_operation.as_deref().cloned(),
                observed_generation: st.observed_generation,
                ..Default::default()
            }),
        }
    }
}

impl Resource for CachedShoot {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Shoot::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        Shoot::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        Shoot::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        Shoot::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cached copy keeps every field the reconciler reads (status, DNS domain, hibernation,
    /// binding names, enabled extensions, the ACL's addresses, seed, the audit-log Secret) and
    /// drops the rest.
    #[test]
    fn cached_copy_keeps_what_the_reconciler_reads() {
        let json = serde_json::json!({
            "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
            "metadata": {"name": "s", "namespace": "garden-p", "generation": 3,
                "annotations": {"infrastructuremanager.kyma-project.io/runtime-id": "rt"},
                "managedFields": [{"manager": "kim", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"region": "eu-central-1", "purpose": "production", "seedName": "seed-aws",
                "secretBindingName": "sb", "credentialsBindingName": "cb",
                "dns": {"domain": "a.example.com"}, "hibernation": {"enabled": true},
                "resources": [{"name": "other", "resourceRef": {"apiVersion": "v1", "kind": "Secret", "name": "o"}},
                    {"name": "auditlog-credentials", "resourceRef": {"apiVersion": "v1", "kind": "Secret", "name": "write-al-1"}}],
                "extensions": [{"type": "shoot-oidc-service", "disabled": false, "providerConfig": {"big": "x"}},
                    {"type": "acl", "disabled": false, "providerConfig": {"rule": {"action": "ALLOW", "cidrs": ["1.1.1.1/32"], "type": "remote_ip"}}}],
                "kubernetes": {"version": "1.35.4"},
                "networking": {"type": "calico", "nodes": "10.250.0.0/16", "ipFamilies": ["IPv4", "IPv6"]},
                "provider": {"type": "aws", "workers": [{"name": "w", "machine": {"type": "m5.large"}, "minimum": 1, "maximum": 3}],
                             "controlPlaneConfig": {"big": "z"},
                             "infrastructureConfig": {"apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1",
                                 "kind": "InfrastructureConfig", "networks": {"vpc": {"cidr": "10.250.0.0/16"},
                                 "zones": [{"name": "eu-central-1a", "workers": "10.250.0.0/19"}]}}}},
            "status": {"observedGeneration": 3, "lastOperation": {"type": "Create", "state": "Succeeded", "progress": 100,
                "description": "done", "lastUpdateTime": "2026-01-01T00:00:00Z"},
                "lastErrors": [{"description": "d", "codes": ["ERR_INFRA_QUOTA_EXCEEDED"], "lastUpdateTime": "2026-01-01T00:00:00Z"}],
                "conditions": [{"type": "APIServerAvailable", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z",
                                "lastUpdateTime": "2026-01-01T00:00:00Z", "reason": "r", "message": "m"}],
                "credentials": {"rotation": {
                    "certificateAuthorities": {"phase": "Prepared", "lastInitiationTime": "2026-01-02T00:00:00Z",
                        "lastInitiationFinishedTime": "2026-01-02T00:05:00Z"},
                    "sshKeypair": {"lastInitiationTime": "2026-01-02T00:00:00Z"}}}}
        });
        let full: Shoot = serde_json::from_value(json.clone()).unwrap();
        let mut cached: CachedShoot = serde_json::from_value(json).unwrap();
        cached.trim();
        assert_eq!(cached.audit_log_secret(), Some("write-al-1"));
        let shoot = cached.to_shoot();
        assert_eq!(shoot.metadata.managed_fields, None);
        assert_eq!(shoot.metadata.labels, None);
        assert_eq!(shoot.metadata.annotations, full.metadata.annotations);
        assert_eq!(shoot.metadata.generation, Some(3));
        let (st, full_st) = (
            shoot.status.as_ref().unwrap(),
            full.status.as_ref().unwrap(),
        );
        assert_eq!(st.last_operation, full_st.last_operation);
        assert_eq!(st.last_errors, full_st.last_errors);
        assert_eq!(st.observed_generation, Some(3));
        assert_eq!(st.conditions, None);
        assert_eq!(st.credentials, full_st.credentials);
        assert_eq!(
            st.new_cas_since(),
            Some("2026-01-02T00:05:00Z".parse().unwrap())
        );
        assert_eq!(shoot.spec.dns, full.spec.dns);
        assert_eq!(shoot.spec.hibernation, full.spec.hibernation);
        assert_eq!(shoot.spec.secret_binding_name.as_deref(), Some("sb"));
        assert_eq!(shoot.spec.credentials_binding_name.as_deref(), Some("cb"));
        assert_eq!(shoot.spec.seed_name.as_deref(), Some("seed-aws"));
        assert_eq!(shoot.spec.region, "eu-central-1");
        assert!(super::super::oidc::extension_enabled(&shoot));
        assert_eq!(
            shoot.spec.extensions.as_ref().unwrap()[0].provider_config,
            None
        );
        // The ACL's addresses stay: they are compared with the ACL ConfigMap.
        assert_eq!(
            shoot.spec.extensions.as_ref().unwrap()[1],
            full.spec.extensions.as_ref().unwrap()[1]
        );
        assert!(shoot.spec.provider.workers.is_none());
        assert_eq!(shoot.spec.provider.control_plane_config, None);
        assert_eq!(
            shoot.spec.provider.infrastructure_config,
            full.spec.provider.infrastructure_config
        );
        let networking = shoot.spec.networking.as_ref().unwrap();
        assert_eq!(
            networking.ip_families,
            full.spec.networking.as_ref().unwrap().ip_families
        );
        assert_eq!(networking.nodes, None);
        assert_eq!(shoot.spec.kubernetes.version, None);
        // kyma-provisioning-info is written from the cached copy without reading the Shoot.
        let runtime = kim_shared::api::Runtime::new("rt", Default::default());
        assert_eq!(
            kim_shared::provisioning_info::details(&runtime, &shoot, Some("eu")),
            kim_shared::provisioning_info::details(&runtime, &full, Some("eu"))
        );
        // The whole point: the cached form is a fraction of the typed Shoot.
        assert!(std::mem::size_of::<CachedShoot>() * 3 < std::mem::size_of::<Shoot>());
    }

    /// Each rotation is sent once, as the runtime ID, to the receiver of what was rotated;
    /// Shoots without a rotation or a runtime ID are not sent.
    #[tokio::test]
    async fn a_rotation_is_sent_once_to_whom_it_concerns() {
        let shoot = |name: &str, runtime_id: Option<&str>, cas: Option<&str>, key: Option<&str>| {
            serde_json::from_value::<CachedShoot>(serde_json::json!({
                "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
                "metadata": {"name": name, "namespace": "garden-p", "annotations": runtime_id
                    .map(|id| serde_json::json!({names::SHOOT_ANNOTATION_RUNTIME_ID: id}))},
                "status": {"credentials": {"rotation": {
                    "certificateAuthorities": {"lastInitiationFinishedTime": cas},
                    "serviceAccountKey": {"lastInitiationFinishedTime": key}}}}
            }))
            .unwrap()
        };
        let (notices, mut noticed) = ClusterNotices::channel();
        let first = Some("2026-01-02T00:05:00Z");
        let later = Some("2026-02-02T00:05:00Z");
        notices.observe(&shoot("a", Some("rt-a"), first, None));
        notices.observe(&shoot("a", Some("rt-a"), first, None));
        notices.observe(&shoot("b", Some("rt-b"), None, None));
        notices.observe(&shoot("c", None, first, first));
        notices.observe(&shoot("a", Some("rt-a"), later, None));
        notices.observe(&shoot("a", Some("rt-a"), later, first));
        notices.observe(&shoot("d", Some("rt-d"), None, first));
        notices.observe(&shoot("d", Some("rt-d"), None, first));
        // The times are kept for every rotated Shoot, with a runtime ID or without.
        let at = |t: Option<&str>| t.map(|t| t.parse::<Timestamp>().unwrap());
        assert_eq!(noticed.facts.new_cas_since("a"), at(later));
        assert_eq!(noticed.facts.new_service_account_key_since("a"), at(first));
        assert_eq!(noticed.facts.new_cas_since("c"), at(first));
        assert_eq!(noticed.facts.new_service_account_key_since("d"), at(first));
        assert_eq!(noticed.facts.new_cas_since("b"), None);
        // A Shoot made anew starts without rotations.
        notices.observe(&shoot("a", Some("rt-a"), None, None));
        assert_eq!(noticed.facts.new_cas_since("a"), None);
        drop(notices);
        let cas: Vec<String> = futures::StreamExt::collect(&mut noticed.cas).await;
        assert_eq!(cas, ["rt-a", "rt-a"]);
        let keys: Vec<String> = futures::StreamExt::collect(&mut noticed.tokens).await;
        assert_eq!(keys, ["rt-a", "rt-d"]);
    }

    /// A cluster counts as hibernated while Gardener is done hibernating it and nobody asked to
    /// wake it up; its runtime's RuntimeAccesses hear of it once, as the wake-up is asked for.
    #[tokio::test]
    async fn a_wake_up_is_sent_once_to_the_runtime_accesses() {
        let shoot = |name: &str, enabled: Option<bool>, hibernated: Option<bool>| {
            serde_json::from_value::<CachedShoot>(serde_json::json!({
                "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
                "metadata": {"name": name, "namespace": "garden-p",
                    "annotations": {names::SHOOT_ANNOTATION_RUNTIME_ID: format!("rt-{name}")}},
                "spec": {"hibernation": {"enabled": enabled}},
                "status": {"hibernated": hibernated},
            }))
            .unwrap()
        };
        let (notices, mut noticed) = ClusterNotices::channel();
        // Awake at first sight: nothing kept, nothing sent.
        notices.observe(&shoot("a", None, None));
        notices.observe(&shoot("a", Some(false), Some(false)));
        assert!(!noticed.facts.hibernated("a"));
        // Being hibernated (the API server may still answer), hibernated, being woken up (it
        // may answer again), awake.
        for (enabled, hibernated, counted) in [
            (true, false, false),
            (true, true, true),
            (false, true, false),
            (false, false, false),
        ] {
            notices.observe(&shoot("a", Some(enabled), Some(hibernated)));
            assert_eq!(
                noticed.facts.hibernated("a"),
                counted,
                "{enabled} {hibernated}"
            );
            let sleeping = (enabled || hibernated).then_some(!enabled);
            assert_eq!(
                noticed.facts.sleeping("a"),
                sleeping,
                "{enabled} {hibernated}"
            );
        }
        // Hibernated at first sight, then woken up; hibernated again and deleted.
        notices.observe(&shoot("b", Some(true), Some(true)));
        assert!(noticed.facts.hibernated("b"));
        notices.observe(&shoot("b", Some(false), Some(true)));
        notices.observe(&shoot("b", Some(false), Some(false)));
        assert!(!noticed.facts.hibernated("b"));
        notices.observe(&shoot("c", Some(true), Some(true)));
        notices.forget("c");
        assert!(!noticed.facts.hibernated("c"));
        drop(notices);
        let tokens: Vec<String> = futures::StreamExt::collect(&mut noticed.tokens).await;
        assert_eq!(tokens, ["rt-a", "rt-b"]);
        let cas: Vec<String> = futures::StreamExt::collect(&mut noticed.cas).await;
        assert!(cas.is_empty());
    }

    /// A generation counts as raised without a change of the spec when the watch shows it one
    /// above the previous one with the same spec.
    #[test]
    fn a_generation_raised_without_a_spec_change_is_known() {
        let shoot = |generation: i64, region: &str| {
            serde_json::from_value::<CachedShoot>(serde_json::json!({
                "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
                "metadata": {"name": "s", "namespace": "garden-p", "generation": generation},
                "spec": {"region": region, "provider": {"type": "aws", "workers": [{"name": "w"}]}},
            }))
            .unwrap()
        };
        let generations = ShootGenerations::default();
        // First sight: nothing known of the update that raised it.
        generations.observe(&shoot(4, "a"));
        assert!(!generations.raised_without_spec_change("s", 4));
        // An operation annotation (or any write while one waits) raises it, spec unchanged.
        generations.observe(&shoot(5, "a"));
        assert!(generations.raised_without_spec_change("s", 5));
        // Other events of that generation change nothing.
        generations.observe(&shoot(5, "a"));
        assert!(generations.raised_without_spec_change("s", 5));
        // A spec change, also one not kept in the cache (the workers).
        generations.observe(&shoot(6, "b"));
        assert!(!generations.raised_without_spec_change("s", 6));
        let mut workers = shoot(7, "b");
        assert_eq!(workers.spec.hash, shoot(6, "b").spec.hash);
        workers = serde_json::from_value(serde_json::json!({
            "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
            "metadata": {"name": "s", "namespace": "garden-p", "generation": 7},
            "spec": {"region": "b", "provider": {"type": "aws", "workers": [{"name": "x"}]}},
        }))
        .unwrap();
        generations.observe(&workers);
        assert!(!generations.raised_without_spec_change("s", 7));
        // Two generations at once: not known what happened in between.
        generations.observe(&shoot(9, "b"));
        assert!(!generations.raised_without_spec_change("s", 9));
        assert!(!generations.raised_without_spec_change("other", 5));
        // The Shoot made anew: its generations count from its own first.
        generations.observe(&shoot(10, "b"));
        assert!(generations.raised_without_spec_change("s", 10));
        generations.observe(&shoot(1, "b"));
        for generation in 2..=10 {
            generations.observe(&shoot(generation, &format!("r{generation}")));
        }
        assert!(!generations.raised_without_spec_change("s", 10));
        // A re-list: what comes next is first sight.
        generations.relisted();
        generations.observe(&shoot(11, "r10"));
        assert!(!generations.raised_without_spec_change("s", 11));
    }

    /// What is kept of a Shoot goes with it: at its deletion, or when a re-list no longer
    /// delivers it.
    #[test]
    fn a_deleted_shoot_is_forgotten() {
        let shoot = |name: &str, generation: i64| {
            serde_json::from_value::<CachedShoot>(serde_json::json!({
                "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
                "metadata": {"name": name, "namespace": "garden-p", "generation": generation},
                "spec": {"region": "a"},
                "status": {"credentials": {"rotation": {
                    "certificateAuthorities": {"lastInitiationFinishedTime": "2026-01-02T00:05:00Z"}}}}
            }))
            .unwrap()
        };
        let (notices, noticed) = ClusterNotices::channel();
        let generations = ShootGenerations::default();
        let mut notes = ShootWatchNotes::new(notices, generations.clone());
        let kept = |name: &str| {
            (
                noticed.facts.new_cas_since(name).is_some(),
                crate::records::lock(&generations.0).contains_key(name),
            )
        };
        for name in ["a", "b", "c"] {
            notes.note(&watcher::Event::Apply(shoot(name, 1)));
            notes.note(&watcher::Event::Apply(shoot(name, 2)));
            assert_eq!(kept(name), (true, true));
        }
        assert!(generations.raised_without_spec_change("a", 2));
        notes.note(&watcher::Event::Delete(shoot("a", 2)));
        assert_eq!(kept("a"), (false, false));
        assert!(!generations.raised_without_spec_change("a", 2));
        // "c" was deleted while the watch was away: the re-list does not deliver it.
        notes.note(&watcher::Event::Init);
        notes.note(&watcher::Event::InitApply(shoot("b", 2)));
        notes.note(&watcher::Event::InitDone);
        assert_eq!(kept("b"), (true, true));
        assert_eq!(kept("c"), (false, false));
    }

    /// A Shoot without spec or status (as a watch may deliver while it is created) decodes.
    #[test]
    fn a_bare_shoot_decodes() {
        let cached: CachedShoot = serde_json::from_value(serde_json::json!({
            "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
            "metadata": {"name": "s", "namespace": "garden-p"}
        }))
        .unwrap();
        let shoot = cached.to_shoot();
        assert!(shoot.status.is_none());
        assert_eq!(shoot.spec.provider.infrastructure_config, None);
        assert_eq!(shoot.spec.networking, None);
    }

    /// An explicit `null` embedded object is no object, as in the typed Shoot.
    #[test]
    fn a_null_infrastructure_config_is_absent() {
        let cached: CachedShoot = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s"},
            "spec": {"provider": {"type": "aws", "infrastructureConfig": null}}
        }))
        .unwrap();
        assert_eq!(cached.to_shoot().spec.provider.infrastructure_config, None);
    }
}
