//! The kube-apiserver ACL (`--api-server-acl-enabled`): the operator CIDRs and the KCP's NAT
//! address come from the ConfigMap `converter.kubernetes.kubeApiServer.acl.configMapName` in
//! the KCP namespace, kept by a watch.
//!
//! The Shoots follow the ConfigMap by comparison, not by a mark: a Ready Runtime whose Shoot
//! does not allow the addresses the ConfigMap gives now is patched
//! ([`kim_shared::convert::acl_outdated`]), and a change of the ConfigMap's data enqueues every
//! Runtime that asks for an ACL. So a change made while no replica ran, during a change of
//! leader, or whose patch failed reaches every Shoot all the same.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{Stream, StreamExt, future, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kim_shared::api::Runtime;
use kim_shared::convert::{AclAddresses, acl_outdated, acl_requested};
use kim_shared::gardener::Shoot;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use super::Reconciler;
use super::runtime_cache::CachedRuntime;
use crate::context::Context;

/// Why the ACL addresses could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AclError {
    /// The watch has not listed the ConfigMap yet (just started, or the KCP does not answer).
    #[error("the API server ACL ConfigMap {namespace}/{name} has not been read yet")]
    NotRead {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The ConfigMap does not exist.
    #[error("the API server ACL ConfigMap {namespace}/{name} does not exist")]
    Missing {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The ConfigMap's data is not upstream's format.
    #[error("the API server ACL ConfigMap {namespace}/{name} is invalid: {message}")]
    Invalid {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What is wrong, naming the key.
        message: String,
    },
}

/// The watched ACL ConfigMap.
pub struct AclConfigMap {
    store: Store<ConfigMap>,
    /// The watch has listed the ConfigMap once (the store is empty before, as it is when the
    /// ConfigMap does not exist).
    listed: Arc<AtomicBool>,
    name: String,
    namespace: String,
}

impl AclConfigMap {
    /// The addresses the ConfigMap gives now.
    fn addresses(&self) -> Result<AclAddresses, AclError> {
        if !self.listed.load(Ordering::Acquire) {
            return Err(AclError::NotRead {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
            });
        }
        let cm = self
            .store
            .get(&ObjectRef::new(&self.name).within(&self.namespace))
            .ok_or_else(|| AclError::Missing {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
            })?;
        let empty = BTreeMap::new();
        AclAddresses::from_config_map_data(cm.data.as_ref().unwrap_or(&empty)).map_err(|message| {
            AclError::Invalid {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                message,
            }
        })
    }
}

/// The ACL addresses to convert `runtime` with: `None` when the ACL is not managed, empty
/// addresses for a Runtime that asks for no ACL (a live `acl` extension is then switched off
/// without the ConfigMap being read), else the ConfigMap's.
pub fn addresses(
    reconciler: &Reconciler,
    runtime: &Runtime,
) -> Result<Option<AclAddresses>, AclError> {
    let Some(acl) = &reconciler.acl else {
        return Ok(None);
    };
    if !acl_requested(runtime) {
        return Ok(Some(AclAddresses::default()));
    }
    acl.addresses().map(Some)
}

/// Whether the cached `shoot` does not allow the addresses the ConfigMap gives now for
/// `runtime`, and our last patch, which the cache may not show yet, did not carry them
/// either. `false` when the ACL is not managed or the ConfigMap is not read yet, missing or
/// invalid: the conversion reports that once the Runtime changes, and a patch now could only
/// fail.
pub fn outdated(reconciler: &Reconciler, runtime: &Runtime, shoot: &Shoot) -> bool {
    // Most Runtimes ask for no ACL: their reconcile need not parse the ConfigMap.
    if !acl_requested(runtime) {
        return false;
    }
    let Some(Ok(addresses)) = reconciler.acl.as_ref().map(AclConfigMap::addresses) else {
        return false;
    };
    let patched = patch_covers(
        reconciler.acl_applied(runtime).as_ref(),
        &addresses,
        shoot.metadata.generation,
    );
    acl_outdated(runtime, &addresses, shoot) && !patched
}

/// Whether our last ACL patch (the addresses it carried, the generation of the Shoot it
/// answered) already carries `addresses` for a cached Shoot of `cached_generation`. The record
/// counts until the cache shows a newer Shoot than the patch's answer: someone changed it
/// since, and only the Shoot itself tells what it allows.
fn patch_covers(
    applied: Option<&(AclAddresses, Option<i64>)>,
    addresses: &AclAddresses,
    cached_generation: Option<i64>,
) -> bool {
    applied.is_some_and(|(applied, generation)| {
        applied == addresses && cached_generation <= *generation
    })
}

/// The watch of the ACL ConfigMap, and what it triggers: every Runtime of `runtimes` that asks
/// for an ACL, once the ConfigMap is first listed (reconciles before that did not compare) and
/// after each change of its data.
pub fn watch(
    ctx: &Context,
    runtimes: Store<CachedRuntime>,
) -> Option<(
    AclConfigMap,
    impl Stream<Item = ObjectRef<CachedRuntime>> + Send + use<>,
)> {
    if !ctx.settings.runtime.api_server_acl {
        return None;
    }
    // Checked at start: the flag is refused without the name.
    let name = ctx.config.acl_config_map_name()?.to_owned();
    let namespace = ctx.settings.namespace.clone();
    let (store, writer) = reflector::store::<ConfigMap>();
    let api: Api<ConfigMap> = Api::namespaced(ctx.kcp.clone(), &namespace);
    let events = crate::watch::events(
        api,
        watcher::Config::default().fields(&format!("metadata.name={name}")),
        "acl_configmap",
        ctx.metrics.clone(),
    )
    .default_backoff()
    .modify(|cm| cm.managed_fields_mut().clear())
    .reflect(writer);
    let events = crate::watch::without_errors(events, "acl_configmap", ctx.metrics.clone());
    let listed = Arc::new(AtomicBool::new(false));
    let first_list = listed.clone();
    let mut changes = DataChanges::default();
    let triggers = events
        .filter_map(move |event| {
            let fire = event.is_ok_and(|event| {
                let changed = changes.note(&event);
                let first = matches!(event, watcher::Event::InitDone)
                    && !first_list.swap(true, Ordering::AcqRel);
                changed || first
            });
            future::ready(fire.then_some(()))
        })
        .flat_map(move |()| {
            tracing::info!("API server ACL ConfigMap read; the Shoots with an ACL follow it");
            let wanting: Vec<ObjectRef<CachedRuntime>> = runtimes
                .state()
                .iter()
                // A spec that does not decode fails its own reconcile.
                .filter(|rt| rt.to_runtime().is_ok_and(|full| acl_requested(&full)))
                .map(|rt| ObjectRef::from_obj(&**rt))
                .collect();
            stream::iter(wanting)
        });
    Some((
        AclConfigMap {
            store,
            listed,
            name,
            namespace,
        },
        triggers,
    ))
}

/// Whether the ConfigMap's data changed, from the events of its watch.
#[derive(Default)]
struct DataChanges {
    /// The data last seen: `None` before the first list, empty while the ConfigMap is gone.
    seen: Option<BTreeMap<String, String>>,
    /// The data of the list under way (`None`: it has no ConfigMap so far).
    listed: Option<BTreeMap<String, String>>,
}

impl DataChanges {
    /// Whether `event` changed the data seen. A (re)list is compared at its end, once the
    /// watch's store holds it (the reconciles it triggers read the ConfigMap from there). A
    /// ConfigMap that is gone (deleted, or missing from a relist) changes nothing: the
    /// Runtimes keep the ACL they have until it is back.
    fn note(&mut self, event: &watcher::Event<ConfigMap>) -> bool {
        match event {
            watcher::Event::Init => {
                self.listed = None;
                false
            }
            watcher::Event::InitApply(cm) => {
                self.listed = Some(cm.data.clone().unwrap_or_default());
                false
            }
            watcher::Event::InitDone => match self.listed.take() {
                Some(data) => self.seen_now(data),
                None => self.gone(),
            },
            watcher::Event::Apply(cm) => self.seen_now(cm.data.clone().unwrap_or_default()),
            watcher::Event::Delete(_) => self.gone(),
        }
    }

    fn gone(&mut self) -> bool {
        self.seen = Some(BTreeMap::new());
        false
    }

    fn seen_now(&mut self, data: BTreeMap<String, String>) -> bool {
        let changed = self.seen.as_ref().is_some_and(|before| *before != data);
        self.seen = Some(data);
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change of the data triggers once the store holds it: for a relist only at its end.
    #[test]
    fn a_data_change_triggers_once_the_watch_holds_it() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let cm = |value: &str| ConfigMap {
            data: Some(BTreeMap::from([(
                "acl-list.json".to_owned(),
                value.to_owned(),
            )])),
            ..Default::default()
        };
        let mut changes = DataChanges::default();
        let fired: Vec<bool> = [
            Init,
            InitApply(cm("a")),
            InitDone,
            Apply(cm("a")),
            Apply(cm("b")),
            // A relist that brings another value: at its end.
            Init,
            InitApply(cm("c")),
            InitDone,
            // One that brings the same.
            Init,
            InitApply(cm("c")),
            InitDone,
            // Gone (deleted, or not in a relist), then back.
            Delete(cm("c")),
            Apply(cm("c")),
            Init,
            InitDone,
            Init,
            InitApply(cm("c")),
            InitDone,
        ]
        .iter()
        .map(|event| changes.note(event))
        .collect();
        assert_eq!(
            fired,
            [
                false, false, false, false, true, false, false, true, false, false, false, false,
                true, false, false, false, false, true
            ]
        );
    }

    fn addresses(nat: &str) -> AclAddresses {
        AclAddresses {
            operator_cidrs: vec!["10.0.0.0/8".to_owned()],
            kcp_nat_ip: nat.to_owned(),
        }
    }

    #[test]
    fn our_patch_counts_until_the_cache_shows_a_newer_shoot() {
        let now = addresses("1.2.3.4");
        let patch = (now.clone(), Some(7));
        // The cache still shows the Shoot before our patch, or the patch's answer itself.
        assert!(patch_covers(Some(&patch), &now, Some(6)));
        assert!(patch_covers(Some(&patch), &now, Some(7)));
        // Someone changed the Shoot after our patch: only the Shoot tells what it allows.
        assert!(!patch_covers(Some(&patch), &now, Some(8)));
        // The ConfigMap changed since the patch, or we never patched.
        assert!(!patch_covers(Some(&patch), &addresses("5.6.7.8"), Some(7)));
        assert!(!patch_covers(None, &now, Some(7)));
        // An answer without a generation bounds nothing newer.
        assert!(!patch_covers(Some(&(now.clone(), None)), &now, Some(1)));
    }
}
