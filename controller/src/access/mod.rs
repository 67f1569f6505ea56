//! The RuntimeAccess reconciler: least-privilege, ServiceAccount-based kubeconfigs for a
//! runtime (upstream issue "RBAC kubeconfigs for Clusters"). For each request it creates the
//! ServiceAccount, (Cluster)Role and binding in the shoot cluster through the admin kubeconfig
//! Secret of the runtime's GardenerCluster, issues a token through the TokenRequest API, stores
//! a kubeconfig in a KCP Secret referenced from the status, rotates it before it expires and,
//! on deletion (finalizer), removes everything it created.

pub mod kubeconfig;
pub mod metrics;
pub mod passes;
pub mod reconcile;
pub mod record;
pub mod shoot;
pub mod shoot_client;
pub mod token;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kim_shared::api::runtime_access::{RuntimeAccess, RuntimeAccessSpec, RuntimeAccessStatus};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::stored::StatusApart;
use crate::{Context, Shutdown};

/// Condition type of a RuntimeAccess.
pub const CONDITION_TYPE: &str = "KubeconfigReady";

/// Name of this reconciler in metrics and logs.
pub const CONTROLLER: &str = "access";

/// Name of the watch of the managed Secrets in metrics and logs.
pub const SECRETS_WATCH: &str = "access_secrets";

/// Finalizer on a RuntimeAccess: the shoot objects and the Secret go before the object does.
pub const FINALIZER: &str =
    "runtimeaccess-controller.infrastructure-manager.kyma-project.io/cleanup";

/// Smallest `--access-rotation-ratio`: below it a rotation would not leave the API server time
/// to answer before the next one is due.
pub const MIN_ROTATION_RATIO: f64 = 0.01;

/// Largest `--access-rotation-ratio`: consumers get at least 5 % of the lifetime to pick up the
/// new kubeconfig before the old token expires.
pub const MAX_ROTATION_RATIO: f64 = 0.95;

/// What the requests need to know of a change of a Secret labelled as ours.
#[derive(Clone, Debug, PartialEq, Eq)]
///
/// Names only: kept per Secret between lists ([`crate::watch::dependents`]), they take a third
/// of the memory of `ObjectRef`s.
struct SecretNote {
    /// The requests that own it (a request's own kubeconfig Secret), by name.
    owners: Box<[Box<str>]>,
    /// Named like a runtime's admin kubeconfig (`kubeconfig-<runtime-id>`): its event is none of
    /// the requests' own writes, and ends the hold of a request that failed
    /// ([`crate::records::Records::release`]).
    admin_kubeconfig: bool,
    /// The runtime whose admin kubeconfig it is: named `kubeconfig-<runtime-id>` and labelled
    /// with that runtime ID.
    runtime: Option<Box<str>>,
}

impl SecretNote {
    fn of(secret: &PartialObjectMeta<Secret>) -> Self {
        let owners = secret
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| {
                o.kind == "RuntimeAccess"
                    && o.api_version
                        .starts_with("infrastructuremanager.kyma-project.io/")
            })
            .map(|o| o.name.as_str().into())
            .collect();
        let name = secret.metadata.name.as_deref().unwrap_or_default();
        let runtime = secret
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(kim_shared::names::LABEL_RUNTIME_ID))
            .filter(|id| {
                name == format!("{}{id}", kim_shared::access::ADMIN_KUBECONFIG_SECRET_PREFIX)
            })
            .map(|id| id.as_str().into());
        Self {
            owners,
            admin_kubeconfig: name.starts_with(kim_shared::access::ADMIN_KUBECONFIG_SECRET_PREFIX),
            runtime,
        }
    }
}

/// The requests a change of a Secret labelled as ours concerns: its owner (the request's own
/// kubeconfig Secret), and, for a runtime's admin kubeconfig Secret
/// (`kubeconfig-<runtime-id>`), every request of that runtime, so that a request waiting for it
/// is served as soon as it is written and one whose runtime goes learns it then, not at its
/// next rotation.
fn affected_requests(
    secret: &SecretNote,
    namespace: &str,
    requests: &ByRuntime,
) -> Vec<ObjectRef<StatusApart<RuntimeAccess>>> {
    let mut affected: Vec<ObjectRef<StatusApart<RuntimeAccess>>> = secret
        .owners
        .iter()
        .map(|name| ObjectRef::new(name).within(namespace))
        .collect();
    if let Some(id) = &secret.runtime {
        affected.extend(requests.of(id));
    }
    affected
}

/// The cached RuntimeAccesses by runtime ID, so that an admin kubeconfig Secret's event finds
/// the requests of its runtime without going through all of them: a relist of 10,000 Secrets
/// would otherwise go through 10,000 requests each. Added to as the watch applies requests
/// (a request's `runtimeId` never changes), taken from as it deletes them, and made again
/// from the cache at the end of every (re)list and by every sweep (a request deleted while the
/// watch was away is never delivered as deleted).
pub struct ByRuntime {
    cache: reflector::Store<StatusApart<RuntimeAccess>>,
    index: std::sync::Mutex<HashMap<String, HashSet<ObjectRef<StatusApart<RuntimeAccess>>>>>,
}

impl ByRuntime {
    /// An empty index of the requests in `cache`.
    pub fn new(cache: reflector::Store<StatusApart<RuntimeAccess>>) -> Self {
        Self {
            cache,
            index: Default::default(),
        }
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, HashSet<ObjectRef<StatusApart<RuntimeAccess>>>>>
    {
        crate::records::lock(&self.index)
    }

    /// Adds `ra` under its runtime ID.
    pub fn insert(&self, ra: &StatusApart<RuntimeAccess>) {
        self.lock()
            .entry(ra.spec.runtime_id.clone())
            .or_default()
            .insert(ObjectRef::from_obj(ra));
    }

    /// Removes `ra`.
    pub fn remove(&self, ra: &StatusApart<RuntimeAccess>) {
        let mut index = self.lock();
        if let Some(refs) = index.get_mut(&ra.spec.runtime_id) {
            refs.remove(&ObjectRef::from_obj(ra));
            if refs.is_empty() {
                index.remove(&ra.spec.runtime_id);
            }
        }
    }

    /// Holds exactly what the cache holds. The cache is read under the index's lock: the watch
    /// writes an applied or deleted object to the cache before it inserts or removes it here,
    /// so a change the read missed waits for the lock and lands on the new index. A relist's
    /// objects are inserted here only after its end, when the cache holds them and this
    /// refresh has run ([`crate::watch::settled`]).
    pub fn refresh(&self) {
        let mut index = self.lock();
        let mut fresh: HashMap<String, HashSet<_>> = HashMap::new();
        for ra in self.cache.state() {
            fresh
                .entry(ra.spec.runtime_id.clone())
                .or_default()
                .insert(ObjectRef::from_obj(&*ra));
        }
        *index = fresh;
    }

    /// The requests of runtime `id`.
    pub fn of(&self, id: &str) -> Vec<ObjectRef<StatusApart<RuntimeAccess>>> {
        self.lock()
            .get(id)
            .map(|refs| refs.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// [`Self::sharing`], as cached.
    fn sharing_the_account(
        &self,
        meta: &ObjectMeta,
        spec: &RuntimeAccessSpec,
    ) -> impl Iterator<Item = Arc<StatusApart<RuntimeAccess>>> {
        let account = spec.service_account.clone();
        let uid = meta.uid.clone();
        self.of(&spec.runtime_id)
            .into_iter()
            .filter_map(|r| self.cache.get(&r))
            .filter(move |other| {
                other.metadata.uid != uid
                    && other.spec.service_account.name == account.name
                    && other.spec.service_account.namespace == account.namespace
            })
    }

    /// The other cached requests of a request's runtime that name the same ServiceAccount.
    pub fn sharing(
        &self,
        meta: &ObjectMeta,
        spec: &RuntimeAccessSpec,
    ) -> Vec<ObjectRef<StatusApart<RuntimeAccess>>> {
        self.sharing_the_account(meta, spec)
            .map(|other| ObjectRef::from_obj(&*other))
            .collect()
    }

    /// The other cached requests of a request's runtime whose ServiceAccount its role reaches,
    /// or whose role reaches its ServiceAccount ([`kim_shared::access::reaches_accounts_in`]:
    /// workload writes or ServiceAccount changes in the account's namespace).
    fn reaching(
        &self,
        meta: &ObjectMeta,
        spec: &RuntimeAccessSpec,
    ) -> impl Iterator<Item = (Arc<StatusApart<RuntimeAccess>>, NamespaceShared)> {
        let uid = meta.uid.clone();
        let own_account = spec.service_account.namespace.clone();
        let own_reach = kim_shared::access::reaches_accounts_in(spec)
            .map(|(ns, resource)| (ns.to_owned(), resource.to_owned()));
        self.of(&spec.runtime_id)
            .into_iter()
            .filter_map(|r| self.cache.get(&r))
            .filter(move |other| other.metadata.uid != uid)
            .filter_map(move |other| {
                let other_account = &other.spec.service_account;
                let shared = match &own_reach {
                    Some((ns, resource)) if *ns == other_account.namespace => {
                        NamespaceShared::ItsAccount {
                            namespace: ns.clone(),
                            resource: resource.clone(),
                            account: other_account.name.clone(),
                        }
                    }
                    _ => {
                        let (ns, resource) = kim_shared::access::reaches_accounts_in(&other.spec)?;
                        if ns != own_account {
                            return None;
                        }
                        NamespaceShared::OurAccount {
                            namespace: ns.to_owned(),
                            resource: resource.to_owned(),
                        }
                    }
                };
                Some((other, shared))
            })
    }

    /// The requests of the runtime that [`Self::namespace_shared`] refuses because of this one
    /// (or it because of them): run again when it goes.
    pub fn reaching_refs(
        &self,
        meta: &ObjectMeta,
        spec: &RuntimeAccessSpec,
    ) -> Vec<ObjectRef<StatusApart<RuntimeAccess>>> {
        self.reaching(meta, spec)
            .map(|(other, _)| ObjectRef::from_obj(&*other))
            .collect()
    }

    /// Why a request is refused: an earlier request of its runtime (by creation time, then one
    /// served with its account before one that was not, then UID, as [`Self::account_holder`];
    /// requests being deleted count until they are gone) keeps its ServiceAccount in the
    /// namespace this request's role writes workloads or changes ServiceAccounts in, or writes
    /// workloads or changes ServiceAccounts in the namespace of this request's account. A Pod
    /// made there runs as any account of the namespace, with its rights, and keeps it past the
    /// account's revocation (the kubelet asks for the token of the account by name); a changed
    /// account no longer reads as the request's. Of two such requests the first is served.
    pub fn namespace_shared(
        &self,
        meta: &ObjectMeta,
        spec: &RuntimeAccessSpec,
        status: Option<&RuntimeAccessStatus>,
    ) -> Option<(String, NamespaceShared)> {
        let own = (
            meta.creation_timestamp.clone(),
            !reconcile::lists_account(status, &spec.service_account),
            meta.uid.clone(),
        );
        self.reaching(meta, spec)
            .map(|(other, shared)| {
                let order = (
                    other.metadata.creation_timestamp.clone(),
                    !reconcile::lists_account(other.status(), &other.spec.service_account),
                    other.metadata.uid.clone(),
                );
                (order, other, shared)
            })
            .filter(|(order, _, _)| *order < own)
            .min_by(|a, b| a.0.cmp(&b.0))
            .map(|(_, other, shared)| {
                (
                    format!(
                        "{}/{}",
                        other.namespace().unwrap_or_default(),
                        other.name_any()
                    ),
                    shared,
                )
            })
    }

    /// The request, as `<namespace>/<name>`, that holds the ServiceAccount a request names:
    /// the first of the cached requests of the runtime that name it, by creation time, then
    /// (creation times are whole seconds) one whose status lists the account before one whose
    /// does not, then by UID. `None` when it is this request. Requests being deleted count
    /// until they are gone.
    ///
    /// One ServiceAccount serves one request: the others wait in the KCP, so that the passes
    /// that touch the account in the runtime are the holder's only (and a flood of requests
    /// naming another's account costs it nothing); [`passes::AccountPasses`] keeps the passes
    /// of a holder and its successor apart as one goes.
    pub fn account_holder(
        &self,
        meta: &ObjectMeta,
        spec: &RuntimeAccessSpec,
        status: Option<&RuntimeAccessStatus>,
    ) -> Option<String> {
        let own = (
            meta.creation_timestamp.clone(),
            !reconcile::lists_account(status, &spec.service_account),
            meta.uid.clone(),
        );
        self.sharing_the_account(meta, spec)
            .map(|other| {
                let order = (
                    other.metadata.creation_timestamp.clone(),
                    !reconcile::lists_account(other.status(), &other.spec.service_account),
                    other.metadata.uid.clone(),
                );
                (order, other)
            })
            .filter(|(order, _)| *order < own)
            .min_by(|a, b| a.0.cmp(&b.0))
            .map(|(_, other)| {
                format!(
                    "{}/{}",
                    other.namespace().unwrap_or_default(),
                    other.name_any()
                )
            })
    }
}

/// How a request and an earlier one of its runtime share a namespace
/// ([`ByRuntime::namespace_shared`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespaceShared {
    /// This request's role writes `resource` in `namespace`, where the other keeps its
    /// ServiceAccount `account`.
    ItsAccount {
        namespace: String,
        resource: String,
        account: String,
    },
    /// The other's role writes `resource` in `namespace`, where this request's ServiceAccount is.
    OurAccount { namespace: String, resource: String },
}

impl NamespaceShared {
    /// The condition message of a request refused because of `other` (`<namespace>/<name>`) in
    /// runtime `runtime_id`.
    pub fn message(&self, other: &str, runtime_id: &str) -> String {
        match self {
            Self::ItsAccount {
                namespace,
                resource,
                account,
            } => format!(
                "spec.role writes {resource:?} in namespace {namespace} of runtime {runtime_id}, where RuntimeAccess {other} keeps its ServiceAccount {account}: a Pod made with this token could run as that account, with its rights and past its revocation, and a changed account no longer reads as that request's; grant these writes in a namespace that holds no other request's ServiceAccount (this one is served once {other} is gone)"
            ),
            Self::OurAccount {
                namespace,
                resource,
            } => format!(
                "spec.serviceAccount is in namespace {namespace} of runtime {runtime_id}, where the role of RuntimeAccess {other} writes {resource:?}: a Pod made with its token could run as this account, and keep it past a revocation; keep the account in a namespace where no other request writes workloads or ServiceAccounts (spec.serviceAccount cannot change: create a new RuntimeAccess; this one is served once {other} is gone)"
            ),
        }
    }
}

/// Runs the RuntimeAccess reconciler until `shutdown`.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: Shutdown,
    clusters: crate::runtime::shoot_cache::ClusterFacts,
    tokens_due: futures::channel::mpsc::UnboundedReceiver<String>,
) {
    let settings = ctx.settings.access.clone();
    let workers = settings.workers.max(1);
    let namespace = ctx.settings.namespace.clone();
    let requests: Api<StatusApart<RuntimeAccess>> = Api::namespaced(ctx.kcp.clone(), &namespace);
    let metrics = Arc::new(shoot_client::ShootMetrics::default());
    ctx.register_metrics(|r| metrics.register(r));
    let access_metrics = Arc::new(metrics::AccessMetrics::default());
    ctx.register_metrics(|r| access_metrics.register(r));
    let (store, writer) = reflector::store();
    let by_runtime = Arc::new(ByRuntime::new(store.clone()));
    let (followers, following) = futures::channel::mpsc::unbounded();
    let reconciler = Arc::new(reconcile::Reconciler::new(
        ctx.clone(),
        settings,
        metrics,
        access_metrics,
        clusters,
        by_runtime.clone(),
        Arc::new(passes::AccountPasses::new(followers)),
    ));
    ctx.metrics
        .track_reconcile_result(CONTROLLER, crate::metrics::RESULT_UNREADABLE);
    let (stream, sweep) = crate::watch::own_kind(
        requests,
        writer,
        reconciler.clone(),
        None,
        CONTROLLER,
        ctx.metrics.clone(),
        shutdown.clone(),
    );
    let stream = stream.inspect({
        let by_runtime = by_runtime.clone();
        move |applied| {
            if let Ok(ra) = applied {
                by_runtime.insert(ra);
            }
        }
    });
    let requests_of = by_runtime.clone();
    let (released, due_released) = (reconciler.clone(), reconciler.clone());
    let due_requests = {
        let requests = by_runtime;
        tokens_due
            .flat_map(move |id| futures::stream::iter(requests.of(&id)))
            .inspect(move |r| due_released.release(r))
    };
    let secrets = crate::watch::managed_secrets(
        ctx.kcp.clone(),
        &namespace,
        SecretNote::of,
        SECRETS_WATCH,
        ctx.metrics.clone(),
    )
    .flat_map(move |secret: SecretNote| {
        let affected = affected_requests(&secret, &namespace, &requests_of);
        if secret.admin_kubeconfig {
            for r in &affected {
                released.release(r);
            }
        }
        futures::stream::iter(affected)
    });
    let run = Controller::for_stream(stream, store.clone())
        .reconcile_on(secrets)
        .reconcile_on(due_requests)
        .reconcile_on(following)
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

/// A request `kcp-system/<name>` (UID `uid-<name>`, made at `created`) of `runtime_id` for the
/// ServiceAccount `account` (namespace, name), for unit tests.
#[cfg(test)]
pub(crate) fn test_request(
    name: &str,
    runtime_id: &str,
    account: (&str, &str),
    created: &str,
) -> StatusApart<RuntimeAccess> {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "RuntimeAccess",
        "metadata": {"name": name, "namespace": "kcp-system", "uid": format!("uid-{name}"),
            "creationTimestamp": created},
        "spec": {
            "runtimeId": runtime_id,
            "serviceAccount": {"namespace": account.0, "name": account.1},
            "role": {"namespace": "apps", "rules": []},
        },
    }))
    .expect("a RuntimeAccess")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher;
    use serde_json::json;

    fn request(name: &str, runtime_id: &str) -> StatusApart<RuntimeAccess> {
        test_request(name, runtime_id, ("apps", name), "2026-12-07T10:00:00Z")
    }

    #[test]
    fn the_first_request_of_a_service_account_holds_it() {
        let (cache, mut writer) = reflector::store();
        let store = ByRuntime::new(cache);
        let at = |second: u32| format!("2026-12-07T10:00:{second:02}Z");
        let mut req = |name: &str, runtime: &str, account: (&str, &str), created: String| {
            let ra = test_request(name, runtime, account, &created);
            writer.apply_watcher_event(&watcher::Event::Apply(ra.clone()));
            store.insert(&ra);
            ra
        };
        let klm = req("klm", "rt-1", ("apps", "klm"), at(10));
        // Made earlier, but not the same account: another runtime, namespace or name.
        req("elsewhere", "rt-2", ("apps", "klm"), at(1));
        req("kyma", "rt-1", ("kyma", "klm"), at(1));
        req("renamed", "rt-1", ("apps", "klm2"), at(1));
        let thief = req("thief", "rt-1", ("apps", "klm"), at(11));
        let holder = |ra: &StatusApart<RuntimeAccess>| {
            store.account_holder(&ra.metadata, &ra.spec, ra.status())
        };
        assert_eq!(holder(&klm), None);
        assert_eq!(holder(&thief).as_deref(), Some("kcp-system/klm"));
        // The same second: the UID orders them ("uid-a..." first)...
        let twin = req("a-twin", "rt-1", ("apps", "klm"), at(10));
        assert_eq!(holder(&klm).as_deref(), Some("kcp-system/a-twin"));
        assert_eq!(holder(&twin), None);
        assert_eq!(holder(&thief).as_deref(), Some("kcp-system/a-twin"));
        // ... unless one was served with the account: it keeps it.
        let mut served: serde_json::Value = serde_json::to_value(klm.object().unwrap()).unwrap();
        served["status"] = json!({"shootObjects": [
            {"kind": "ServiceAccount", "name": "klm", "namespace": "apps"}]});
        let klm: StatusApart<RuntimeAccess> = serde_json::from_value(served).unwrap();
        writer.apply_watcher_event(&watcher::Event::Apply(klm.clone()));
        assert_eq!(holder(&klm), None);
        assert_eq!(holder(&twin).as_deref(), Some("kcp-system/klm"));
    }

    /// A request whose role writes `resource` (with `verb`) in `role_ns`.
    fn writer(
        name: &str,
        runtime_id: &str,
        account_ns: &str,
        role_ns: &str,
        grant: (&str, &str),
        created: &str,
    ) -> StatusApart<RuntimeAccess> {
        let mut value =
            serde_json::to_value(test_request(name, runtime_id, (account_ns, name), created))
                .unwrap();
        value["spec"]["role"] = json!({"namespace": role_ns, "rules": [
            {"apiGroups": ["", "apps"], "resources": [grant.0], "verbs": ["get", grant.1]}]});
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn of_two_requests_sharing_a_namespace_of_accounts_and_their_writes_the_first_is_served() {
        let (cache, mut writer_) = reflector::store();
        let store = ByRuntime::new(cache);
        let mut add = |ra: StatusApart<RuntimeAccess>| {
            writer_.apply_watcher_event(&watcher::Event::Apply(ra.clone()));
            store.insert(&ra);
            ra
        };
        let at = |second: u32| format!("2026-12-07T10:00:{second:02}Z");
        // B keeps its account in "team"; A (later) runs Deployments there.
        let b = add(writer(
            "b",
            "rt-1",
            "team",
            "team-apps",
            ("configmaps", "get"),
            &at(1),
        ));
        let a = add(writer(
            "a",
            "rt-1",
            "accounts",
            "team",
            ("deployments", "create"),
            &at(2),
        ));
        // Not sharing: another runtime, a reads-only role, writes elsewhere.
        add(writer("c", "rt-2", "x", "team", ("pods", "create"), &at(0)));
        add(writer("d", "rt-1", "y", "team", ("pods", "get"), &at(0)));
        add(writer(
            "e",
            "rt-1",
            "z",
            "elsewhere",
            ("pods", "create"),
            &at(0),
        ));
        let shared = |ra: &StatusApart<RuntimeAccess>| {
            store.namespace_shared(&ra.metadata, &ra.spec, ra.status())
        };
        assert_eq!(shared(&b), None, "the first is served");
        assert_eq!(
            shared(&a),
            Some((
                "kcp-system/b".to_owned(),
                NamespaceShared::ItsAccount {
                    namespace: "team".into(),
                    resource: "deployments".into(),
                    account: "b".into()
                }
            ))
        );
        // The other way round: F, later, keeps its account where A changes ServiceAccounts.
        let g = add(writer(
            "g",
            "rt-1",
            "other",
            "shared",
            ("serviceaccounts", "patch"),
            &at(3),
        ));
        let f = add(writer(
            "f",
            "rt-1",
            "shared",
            "f-apps",
            ("configmaps", "get"),
            &at(4),
        ));
        assert_eq!(
            shared(&f),
            Some((
                "kcp-system/g".to_owned(),
                NamespaceShared::OurAccount {
                    namespace: "shared".into(),
                    resource: "serviceaccounts".into()
                }
            ))
        );
        assert_eq!(shared(&g), None);
        // The same second: the UID orders them ("uid-a..." first), unless one was served with
        // its account: it stays served.
        let h = add(writer(
            "h",
            "rt-1",
            "h-accounts",
            "tie",
            ("pods", "create"),
            &at(5),
        ));
        let mut served = serde_json::to_value(writer(
            "z",
            "rt-1",
            "tie",
            "z-apps",
            ("pods", "get"),
            &at(5),
        ))
        .unwrap();
        served["status"] = json!({"shootObjects": [
            {"kind": "ServiceAccount", "name": "z", "namespace": "tie"}]});
        let z = add(serde_json::from_value(served).unwrap());
        assert_eq!(shared(&z), None, "served before");
        assert_eq!(
            shared(&h).map(|(other, _)| other).as_deref(),
            Some("kcp-system/z")
        );
        // Each is run again when the other goes.
        assert_eq!(names(store.reaching_refs(&b.metadata, &b.spec)), ["a"]);
        assert_eq!(names(store.reaching_refs(&g.metadata, &g.spec)), ["f"]);
    }

    fn secret(value: serde_json::Value) -> PartialObjectMeta<Secret> {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret", "metadata": value}))
            .unwrap()
    }

    fn names(refs: Vec<ObjectRef<StatusApart<RuntimeAccess>>>) -> Vec<String> {
        let mut names: Vec<String> = refs.into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    #[test]
    fn an_admin_kubeconfig_secret_concerns_every_request_of_its_runtime() {
        let (cache, mut writer) = reflector::store();
        let store = ByRuntime::new(cache);
        for ra in [
            request("klm", "rt-1"),
            request("keb", "rt-1"),
            request("other", "rt-2"),
            request("gone", "rt-1"),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(ra.clone()));
            store.insert(&ra);
        }
        writer.apply_watcher_event(&watcher::Event::Delete(request("gone", "rt-1")));
        store.remove(&request("gone", "rt-1"));
        let admin = secret(json!({"name": "kubeconfig-rt-1", "namespace": "kcp-system",
            "labels": {"kyma-project.io/runtime-id": "rt-1"}}));
        assert_eq!(
            names(affected_requests(
                &SecretNote::of(&admin),
                "kcp-system",
                &store
            )),
            ["keb", "klm"]
        );
        // A request's own Secret: its owner only, although it carries the runtime ID too.
        let own = secret(json!({"name": "klm-kubeconfig", "namespace": "kcp-system",
            "labels": {"kyma-project.io/runtime-id": "rt-1"},
            "ownerReferences": [{"apiVersion": "infrastructuremanager.kyma-project.io/v1",
                "kind": "RuntimeAccess", "name": "klm", "uid": "u-1"}]}));
        assert_eq!(
            names(affected_requests(
                &SecretNote::of(&own),
                "kcp-system",
                &store
            )),
            ["klm"]
        );
        // Someone else's Secret named like an admin kubeconfig of another runtime ID label.
        let other = secret(json!({"name": "kubeconfig-rt-1", "namespace": "kcp-system",
            "labels": {"kyma-project.io/runtime-id": "rt-2"}}));
        assert!(affected_requests(&SecretNote::of(&other), "kcp-system", &store).is_empty());
        // A sweep leaves exactly what the cache holds: requests deleted while the watch was
        // away go, and one the watch has cached but not yet indexed comes.
        // A relist indexes its objects before kube swaps them into the cache at its end, so a
        // sweep during it drops them; the refresh at the list's end (`Forget::listed`) brings
        // them back.
        writer.apply_watcher_event(&watcher::Event::Init);
        for ra in [request("keb", "rt-1"), request("new", "rt-2")] {
            writer.apply_watcher_event(&watcher::Event::InitApply(ra.clone()));
            store.insert(&ra);
        }
        store.refresh();
        assert_eq!(
            names(store.of("rt-2")),
            ["other"],
            "the cache holds the list before the relist until its end"
        );
        writer.apply_watcher_event(&watcher::Event::InitDone);
        store.refresh();
        assert_eq!(
            names(affected_requests(
                &SecretNote::of(&admin),
                "kcp-system",
                &store
            )),
            ["keb"]
        );
        assert_eq!(names(store.of("rt-2")), ["new"]);
    }
}
