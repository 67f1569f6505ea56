//! One reconcile of a RuntimeAccess: validate, reach the shoot through the runtime's admin
//! kubeconfig, ensure ServiceAccount and RBAC, issue or keep the token, write status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kim_shared::access::{secret_key, secret_name, service_account_user, validate_runtime_access};
use kim_shared::api::runtime_access::{
    AccessSecretRef, RuntimeAccess, RuntimeAccessStatus, ServiceAccountRef, ShootObjectRef,
};
use kim_shared::api::{GardenerCluster, Runtime, Unreadable};
use kim_shared::gardener::Shoot;
use kim_shared::names;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::finalizer::{self, finalizer};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::Instrument;

use super::kubeconfig::{cluster_endpoint, token_kubeconfig};
use super::metrics::{AccessMetrics, StateLabels};
use super::passes::AccountPasses;
use super::record::{self, SecretFacts};
use super::shoot;
use super::shoot_client::{AdminSecret, ShootAccess, ShootClients};
use super::token::{self, ANNOTATION_TOKEN_EXPIRATION, TokenDecision};
use super::{CONDITION_TYPE, CONTROLLER, FINALIZER};
use crate::Context;
use crate::gardener_cluster::rotation::format_last_sync;
use crate::records::{Backoff, Records, key};
use crate::runtime::classify;
use crate::settings::AccessSettings;
use crate::stored::StatusApart;

/// Field manager of what this reconciler applies in the KCP.
pub const FIELD_MANAGER: &str = "kim-runtime-access";

/// How often to look again while the runtime has no admin kubeconfig yet.
const WAIT_FOR_RUNTIME: Duration = Duration::from_secs(30);

/// When to look again while a pass of another request of the same ServiceAccount runs; the
/// end of that pass asks for this one at once ([`AccountPasses`]), this is the fallback.
const WAIT_FOR_ACCOUNT: Duration = Duration::from_secs(30);

/// When a request whose runtime's cluster is hibernated looks again; the Shoot watch runs it
/// as the cluster is woken up, this is the fallback.
const WAIT_FOR_WAKE_UP: Duration = Duration::from_secs(600);

/// When a request whose cluster is being woken up, and did not answer, looks again.
const WAKING_UP_POLL: Duration = Duration::from_secs(15);

/// When a request that waits for the holder of its ServiceAccount looks again; the holder's
/// deletion runs it at once, this is the fallback.
const WAIT_FOR_HOLDER: Duration = Duration::from_secs(300);

/// When a request refused for what is in the runtime ([`refusal`]: an account, role or binding
/// that is someone else's, a namespace without Pod Security) looks again. Only a change there
/// ends it, and the runtime is not watched; a change of the request runs it at once.
const WAIT_AFTER_REFUSAL: Duration = Duration::from_secs(120);

/// Per-object backoff after a failed reconcile: 1 s doubling to 60 s, jittered. A runtime
/// that answers again is noticed within a minute, which leaves a token due for rotation (at
/// `--access-rotation-ratio` of its lifetime) time to spare; an unreachable runtime's requests
/// cost three KCP reads a minute each, not four times that.
pub const BACKOFF: Backoff = Backoff {
    first: Duration::from_secs(1),
    cap: Duration::from_secs(60),
};

/// State shared by all reconciles.
pub struct Reconciler {
    ctx: Arc<Context>,
    settings: AccessSettings,
    clients: ShootClients,
    /// Tokens delivered and failed, each request's state.
    access_metrics: Arc<AccessMetrics>,
    /// Failures per RuntimeAccess (the backoff).
    records: Records<()>,
    /// The cached requests by runtime ID.
    by_runtime: Arc<super::ByRuntime>,
    /// The passes running, by ServiceAccount: one at a time for each.
    passes: Arc<AccountPasses>,
    /// When the Shoots' ServiceAccount token signing keys were rotated and which clusters are
    /// hibernated, as the Shoot watch delivers it.
    clusters: crate::runtime::shoot_cache::ClusterFacts,
}

impl Reconciler {
    /// Something the request depends on changed (its runtime's admin kubeconfig, the runtime's
    /// token signing key, its cluster woken up): a request waiting out a failure goes on at once.
    pub fn release(
        &self,
        request: &kube::runtime::reflector::ObjectRef<StatusApart<RuntimeAccess>>,
    ) {
        let ns = request.namespace.as_deref().unwrap_or_default();
        self.records.release(&format!("{ns}/{}", request.name));
    }

    /// A reconciler with the given settings; its shoot clients count requests in `metrics`,
    /// its tokens and states are in `access_metrics`.
    pub fn new(
        ctx: Arc<Context>,
        settings: AccessSettings,
        metrics: Arc<super::shoot_client::ShootMetrics>,
        access_metrics: Arc<AccessMetrics>,
        clusters: crate::runtime::shoot_cache::ClusterFacts,
        by_runtime: Arc<super::ByRuntime>,
        passes: Arc<AccountPasses>,
    ) -> Self {
        let timeout = settings.shoot_request_timeout;
        Self {
            ctx,
            settings,
            clients: ShootClients::new(metrics, timeout),
            access_metrics,
            records: Records::default(),
            by_runtime,
            passes,
            clusters,
        }
    }

    /// How long one reconcile may take: each request to a runtime is bounded, but a runtime
    /// cluster can answer slowly page after page (bindings are searched through all of them),
    /// and one such cluster must not hold a worker for long. Every step is idempotent, so a
    /// cut-off reconcile is simply run again.
    pub fn reconcile_timeout(&self) -> Duration {
        self.settings.shoot_request_timeout * RECONCILE_TIMEOUT_REQUESTS
    }

    /// Drops what is kept about a RuntimeAccess that is gone: its record and its share of the
    /// cached runtime-cluster clients.
    fn forget_key(&self, key: &str) {
        self.records.forget(key);
        self.clients.release(key);
        self.access_metrics.remove(key);
    }
}

impl crate::watch::Forget<StatusApart<RuntimeAccess>> for Reconciler {
    fn forget(&self, ra: &StatusApart<RuntimeAccess>) {
        // Those that waited for it as the holder of their account, or for the namespace it
        // shared with them, go on at once.
        let waiting = self
            .by_runtime
            .sharing(&ra.metadata, &ra.spec)
            .into_iter()
            .chain(self.by_runtime.reaching_refs(&ra.metadata, &ra.spec));
        for waiting in waiting {
            self.release(&waiting);
            self.passes.run_next(waiting);
        }
        self.by_runtime.remove(ra);
        self.forget_key(&key(ra));
    }

    fn listed(&self) {
        self.by_runtime.refresh();
    }

    fn forget_missing(&self, present: &[Arc<StatusApart<RuntimeAccess>>]) {
        self.by_runtime.refresh();
        self.clients.drop_idle();
        let mut kept = self.records.keys();
        kept.extend(self.clients.users());
        kept.extend(self.access_metrics.keys());
        crate::watch::forget_absent(present, kept, |key| self.forget_key(key));
    }
}

/// A reconcile may take this many runtime request timeouts (2 minutes at the default 30 s).
const RECONCILE_TIMEOUT_REQUESTS: u32 = 4;

/// A failed step. Messages name objects, never tokens or kubeconfigs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// The API error.
        source: kube::Error,
    },
    /// The admin kubeconfig cannot be used.
    #[error("admin kubeconfig of runtime {runtime}: {reason}")]
    AdminKubeconfig {
        /// The runtime ID.
        runtime: String,
        /// Why (no secret values).
        reason: String,
    },
    /// A step in the shoot or the KCP failed (already in the status).
    #[error("{0}")]
    Step(String),
    /// Finalizer handling failed.
    #[error("finalizer: {0}")]
    Finalizer(String),
    /// The stored RuntimeAccess does not read with our types.
    #[error("the stored RuntimeAccess cannot be read: {0}")]
    Unreadable(Unreadable),
    /// The deletion waits for the runtime's cluster to be woken up: not a failure of the
    /// controller's (`result="waiting"`).
    #[error("{0}")]
    Waits(String, Duration),
    /// The reconcile took longer than [`Reconciler::reconcile_timeout`].
    #[error("the reconcile took longer than {0:?} and was cut off; it is retried")]
    TimedOut(Duration),
}

impl crate::metrics::ResultLabel for Error {
    fn result_label(&self) -> &'static str {
        match self {
            Self::Unreadable(_) => crate::metrics::RESULT_UNREADABLE,
            Self::Waits(..) => crate::metrics::RESULT_WAITING,
            _ => "error",
        }
    }
}

fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}

/// Entry point for the controller.
pub async fn reconcile(
    ra: Arc<StatusApart<RuntimeAccess>>,
    reconciler: Arc<Reconciler>,
) -> Result<Action, Error> {
    let record_key = key(&*ra);
    if let Some(left) = reconciler
        .records
        .begin_pass(&record_key, crate::records::inputs(&ra.metadata))
    {
        return Ok(Action::requeue(left));
    }
    // A request that waits for its account's holder touches nothing in the runtime, so it
    // takes no pass of the account; its deletion does (it may have objects there).
    let holder = reconciler
        .by_runtime
        .account_holder(&ra.metadata, &ra.spec, ra.status());
    let waits = holder.is_some() && ra.metadata.deletion_timestamp.is_none();
    let _pass = if waits {
        None
    } else {
        match reconciler.passes.begin(&ra) {
            Ok(pass) => Some(pass),
            Err(running) => {
                tracing::info!(
                    controller = CONTROLLER,
                    namespace = ra.namespace().unwrap_or_default(),
                    object = ra.name_any(),
                    runtime_id = %ra.spec.runtime_id,
                    running = %running,
                    "a pass of another RuntimeAccess of this ServiceAccount is running; this one follows when it ends"
                );
                return Ok(Action::requeue(WAIT_FOR_ACCOUNT));
            }
        }
    };
    let started = Instant::now();
    let requests: Api<StatusApart<RuntimeAccess>> = Api::namespaced(
        reconciler.ctx.kcp.clone(),
        &ra.namespace().unwrap_or_default(),
    );
    let span = tracing::info_span!(
        "reconcile",
        controller = CONTROLLER,
        namespace = %ra.namespace().unwrap_or_default(),
        object = %ra.name_any(),
        runtime_id = %ra.spec.runtime_id,
    );
    // A RuntimeAccess whose status does not read is not applied (its reconcile fails naming
    // the field) but is still cleaned up when deleted: cleanup takes what it created from the
    // Secret's record and the names in the spec, not only from the status.
    let result = finalizer(&requests, FINALIZER, ra, |event| async {
        match event {
            finalizer::Event::Apply(stored) => {
                let failures = reconciler.records.failures(&record_key);
                match crate::stored::object_or_report(&stored, &reconciler.ctx.recorder, failures)
                    .await
                {
                    Ok(ra) => {
                        let pass = apply(&reconciler, &ra, holder.as_deref());
                        within_limit(&reconciler, &ra, "Error", pass).await
                    }
                    Err(why) => Err(Error::Unreadable(why)),
                }
            }
            finalizer::Event::Cleanup(stored) => {
                // With its status when it reads: a deletion that waits keeps showing what this
                // request created in the runtime.
                let ra = stored.object().unwrap_or_else(|_| stored.without_status());
                within_limit(&reconciler, &ra, "Deleting", cleanup(&reconciler, &ra)).await
            }
        }
    })
    .instrument(span)
    .await;
    let result = crate::finalizing::finalizer_result(result, CONTROLLER, Error::Finalizer);
    if result.is_ok() {
        reconciler.records.succeeded(&record_key);
    }
    reconciler
        .ctx
        .metrics
        .observe_reconcile_result(CONTROLLER, &result, started.elapsed());
    result
}

/// Runs one pass of `ra`, cut off after [`Reconciler::reconcile_timeout`]: a runtime that
/// answers each request just within its timeout must not hold a worker for ever. A pass cut
/// off says so in the status (`state`, reason `ReconcileTimedOut`).
async fn within_limit(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    state: &str,
    pass: impl std::future::Future<Output = Result<Action, Error>>,
) -> Result<Action, Error> {
    let limit = reconciler.reconcile_timeout();
    let Ok(result) = tokio::time::timeout(limit, pass).await else {
        let status = timed_out_status(ra, state, limit, Timestamp::now());
        // The reconcile's error says it too: a failed status write is only logged.
        if let Err(e) = write_status(reconciler, ra, status).await {
            tracing::debug!(error = %e, "cannot write the status of a pass that was cut off");
        }
        return Err(Error::TimedOut(limit));
    };
    result
}

/// The status of a pass cut off after `limit`: what the status already lists stays.
fn timed_out_status(
    ra: &RuntimeAccess,
    state: &str,
    limit: Duration,
    now: Timestamp,
) -> RuntimeAccessStatus {
    let msg = format!(
        "the reconcile took longer than {}s ({RECONCILE_TIMEOUT_REQUESTS} runtime request timeouts) and was cut off; it is retried. Check that runtime {} answers promptly",
        limit.as_secs(),
        ra.spec.runtime_id
    );
    status_with(ra, state, "False", REASON_RECONCILE_TIMED_OUT, &msg, now)
}

/// Logs at warn (the failure is in the status and retried) and backs off.
pub fn error_policy(
    ra: Arc<StatusApart<RuntimeAccess>>,
    error: &Error,
    reconciler: Arc<Reconciler>,
) -> Action {
    let record_key = key(&*ra);
    if let Error::Waits(why, retry_in) = error {
        // Its own status write must not run it again at once: a sleeping cluster is asked
        // again at the notice of its wake-up, or when the request changes (the skip annotation).
        reconciler
            .records
            .hold(&record_key, *retry_in, crate::records::inputs(&ra.metadata));
        tracing::info!(
            controller = CONTROLLER,
            namespace = ra.namespace().unwrap_or_default(),
            object = ra.name_any(),
            runtime_id = %ra.spec.runtime_id,
            reason = %why,
            retry_in = ?retry_in,
            "the deletion waits for the runtime's cluster"
        );
        return Action::requeue(*retry_in);
    }
    let delay = reconciler.records.retry_in(&record_key, &BACKOFF);
    reconciler
        .records
        .hold(&record_key, delay, crate::records::inputs(&ra.metadata));
    tracing::warn!(
        controller = CONTROLLER,
        namespace = ra.namespace().unwrap_or_default(),
        object = ra.name_any(),
        runtime_id = %ra.spec.runtime_id,
        error = %crate::redact::logged(error),
        retry_in = ?delay,
        "reconcile failed; retrying"
    );
    Action::requeue(delay)
}

/// The admin kubeconfig Secret of a runtime, read from the KCP (no shoot call).
struct AdminKubeconfig {
    /// The Shoot the GardenerCluster names.
    shoot: String,
    namespace: String,
    name: String,
    resource_version: Option<String>,
    kubeconfig: ByteString,
}

/// Whether the request's kubeconfig (key `key` of its Secret) names another server or CA bundle
/// than the admin kubeconfig. After a rotation of the cluster's CAs the admin kubeconfig is
/// fetched again with the new bundle; a token kubeconfig with the old one stops working when the
/// rotation completes. A kubeconfig that does not read says nothing (no rotation on every pass).
fn endpoint_moved(existing: Option<&Secret>, key: &str, admin: &[u8]) -> bool {
    let endpoint = |bytes: &[u8]| {
        let endpoint = cluster_endpoint(std::str::from_utf8(bytes).ok()?).ok()?;
        Some((endpoint.server, endpoint.ca_data))
    };
    let own = existing
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get(key))
        .and_then(|k| endpoint(&k.0));
    matches!((own, endpoint(admin)), (Some(own), Some(admin)) if own != admin)
}

/// `Ok(None)`: the runtime has no admin kubeconfig (yet, or any more).
async fn admin_kubeconfig(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
) -> Result<Option<AdminKubeconfig>, Error> {
    let ns = ra.namespace().unwrap_or_default();
    let runtime = &ra.spec.runtime_id;
    // Only the spec is read: a GardenerCluster whose status does not read still names the Secret.
    let clusters: Api<StatusApart<GardenerCluster>> =
        Api::namespaced(reconciler.ctx.kcp.clone(), &ns);
    let Some(gc) = clusters
        .get_opt(runtime)
        .await
        .map_err(api(format!("reading GardenerCluster {ns}/{runtime}")))?
    else {
        return Ok(None);
    };
    let loc = &gc.spec.kubeconfig.secret;
    let secrets: Api<Secret> = Api::namespaced(reconciler.ctx.kcp.clone(), &loc.namespace);
    let Some(mut secret) = secrets.get_opt(&loc.name).await.map_err(api(format!(
        "reading Secret {}/{}",
        loc.namespace, loc.name
    )))?
    else {
        reconciler.clients.forget(&loc.namespace, &loc.name);
        return Ok(None);
    };
    // Only the Secret the GardenerCluster reconciler writes: a GardenerCluster that names
    // another one (the Gardener credentials, another runtime's kubeconfig) must not lend it
    // to a RuntimeAccess; the GardenerCluster itself reports SecretNotOwned.
    if !crate::gardener_cluster::secret::belongs_to(&secret, &gc.without_status()) {
        tracing::warn!(
            controller = CONTROLLER,
            object = ra.name_any(),
            secret = %format!("{}/{}", loc.namespace, loc.name),
            "the Secret the runtime's GardenerCluster names is not its admin kubeconfig Secret; not used"
        );
        reconciler.clients.forget(&loc.namespace, &loc.name);
        return Ok(None);
    }
    let Some(kubeconfig) = secret.data.as_mut().and_then(|d| d.remove(&loc.key)) else {
        reconciler.clients.forget(&loc.namespace, &loc.name);
        return Ok(None);
    };
    Ok(Some(AdminKubeconfig {
        shoot: gc.spec.shoot.name.clone(),
        namespace: loc.namespace.clone(),
        name: loc.name.clone(),
        resource_version: secret.metadata.resource_version.take(),
        kubeconfig,
    }))
}

/// The shoot client for an admin kubeconfig (reused while its Secret is unchanged).
async fn shoot_access(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    admin: &AdminKubeconfig,
) -> Result<ShootAccess, Error> {
    reconciler
        .clients
        .get(
            &AdminSecret {
                namespace: &admin.namespace,
                name: &admin.name,
                resource_version: admin.resource_version.as_deref(),
                kubeconfig: &admin.kubeconfig.0,
            },
            &key(ra),
        )
        .await
        .map_err(|e| Error::AdminKubeconfig {
            runtime: ra.spec.runtime_id.clone(),
            reason: e.to_string(),
        })
}

/// A failed step of a pass (in the shoot, or the Secret write): the condition reason, what
/// was being done and the error (no secret values).
struct StepFailed {
    reason: &'static str,
    what: String,
    error: String,
}

/// Condition reason: the ServiceAccount exists and this request did not create it.
pub const REASON_SERVICE_ACCOUNT_NOT_OWNED: &str = "ServiceAccountNotOwned";

/// Condition reason: no client can be built from the runtime's admin kubeconfig (unreadable,
/// or not self-contained and strict: exec plugins, files, no certificate checks).
pub const REASON_ADMIN_KUBECONFIG_UNUSABLE: &str = "AdminKubeconfigUnusable";

/// Condition reason: `spec.role` runs containers in a namespace that lets Pods ask for host
/// access.
pub const REASON_POD_SECURITY_NOT_ENFORCED: &str = "PodSecurityNotEnforced";

/// Condition reason: `spec.role` writes Services in a namespace where the runtime's apiserver
/// admits a Service with external IPs (or where that cannot be told).
pub const REASON_SERVICE_EXTERNAL_IPS_ALLOWED: &str = "ServiceExternalIPsAllowed";

/// Condition reason: the KCP Secret exists and this request does not own it.
pub const REASON_SECRET_NOT_OWNED: &str = "SecretNotOwned";

/// Annotation on a RuntimeAccess: `true` revokes every token issued for it so far (a leaked
/// kubeconfig): the controller replaces the ServiceAccount in the runtime, which invalidates
/// them at once, writes a kubeconfig with a new token (reason `KubeconfigRevoked`) and removes
/// the annotation.
pub const ANNOTATION_REVOKE_TOKENS: &str = "infrastructuremanager.kyma-project.io/revoke-tokens";

/// Condition reason: the request was served, and its runtime is gone or being deleted.
pub const REASON_RUNTIME_GONE: &str = "RuntimeGone";

/// Condition reason: a step in the runtime's cluster failed (it did not answer, or refused).
pub const REASON_SHOOT_ACCESS_FAILED: &str = "ShootAccessFailed";

/// Condition reason: a role or binding of the request's name exists in the runtime and is not
/// the request's, or an aggregation rule was added to its ClusterRole.
pub const REASON_ROLE_NOT_OWNED: &str = "RoleNotOwned";

/// Condition reason: an earlier request of the runtime keeps its ServiceAccount where this
/// one's role writes workloads or changes ServiceAccounts, or the other way round
/// ([`super::ByRuntime::namespace_shared`]).
pub const REASON_NAMESPACE_SHARED: &str = "AccountNamespaceShared";

/// Condition reason: the ServiceAccount is being deleted and held by finalizers; no token is
/// issued for it (the API server stops taking its tokens a minute after the deletion).
pub const REASON_SERVICE_ACCOUNT_BEING_DELETED: &str = "ServiceAccountBeingDeleted";

/// Condition reason: the revocation asked for cannot be done, because the KCP Secret does not
/// record the UID of the account the tokens were issued for (written before that record) and
/// the ServiceAccount in the runtime is not provably the request's (its label removed, or
/// another request's binding names it).
/// The request's own bindings are gone, but the account was not made anew: the tokens issued
/// so far still authenticate as it, with whatever else is bound to it, until someone deletes
/// it there.
pub const REASON_REVOCATION_REFUSED: &str = "RevocationRefused";

/// Condition reason: the runtime's cluster is hibernated and the pass has something to do
/// there.
pub const REASON_RUNTIME_HIBERNATED: &str = "RuntimeHibernated";

/// Condition reason: a pass took longer than [`Reconciler::reconcile_timeout`].
pub const REASON_RECONCILE_TIMED_OUT: &str = "ReconcileTimedOut";

/// Condition reason: the deletion waits: the objects in the runtime cannot be removed (yet).
pub const REASON_SHOOT_CLEANUP_FAILED: &str = "ShootCleanupFailed";

/// Annotation on a RuntimeAccess being deleted: `true` lets the finalizer go when the objects
/// in the runtime cannot be removed (a runtime that is gone for good or will not wake up): the
/// cleanup is still tried first. The KCP Secret is still deleted; the ServiceAccount, roles and
/// bindings then stay in the runtime.
pub const ANNOTATION_SKIP_SHOOT_CLEANUP: &str =
    "infrastructuremanager.kyma-project.io/skip-shoot-cleanup";

/// Whether the runtime holds what `spec.role` grants safely: Pod Security where it writes
/// workloads, external IPs refused where it writes Services. `Some`: the refusal.
async fn runtime_refusal(
    client: &kube::Client,
    ra: &RuntimeAccess,
) -> Result<Option<StepFailed>, StepFailed> {
    let failed = |what: String| {
        move |e: kube::Error| StepFailed {
            reason: REASON_SHOOT_ACCESS_FAILED,
            what,
            error: classify::message(&e),
        }
    };
    if let Some((namespace, resource)) = kim_shared::access::workload_writes(ra) {
        let level = shoot::pod_security_level(client, namespace)
            .await
            .map_err(failed(format!("reading Namespace {namespace}")))?;
        if !level.as_deref().is_some_and(|l| {
            kim_shared::access::POD_SECURITY_LEVELS_WITHOUT_HOST_ACCESS.contains(&l)
        }) {
            return Ok(Some(StepFailed {
                reason: REASON_POD_SECURITY_NOT_ENFORCED,
                what: "refusing workload writes".to_owned(),
                error: format!(
                    "spec.role writes {resource:?} in namespace {namespace}, which enforces Pod Security {} (label {}): a Pod there could run privileged with the nodes' filesystems, root on a node; label the namespace {}=baseline (or restricted), or grant only reads",
                    level.as_deref().unwrap_or("privileged, the default"),
                    kim_shared::access::LABEL_POD_SECURITY_ENFORCE,
                    kim_shared::access::LABEL_POD_SECURITY_ENFORCE,
                ),
            }));
        }
    }
    let Some(namespace) = kim_shared::access::service_writes(ra) else {
        return Ok(None);
    };
    let answer = shoot::external_ips(client, namespace)
        .await
        .map_err(failed(format!(
            "asking whether namespace {namespace} admits Services with external IPs"
        )))?;
    let why = match answer {
        shoot::ExternalIps::Refused => return Ok(None),
        shoot::ExternalIps::Admitted => "where the cluster admits a Service with external IPs (a server-side dry run was admitted)".to_owned(),
        shoot::ExternalIps::Unclear(with_ip, without) => format!(
            "where it cannot be told whether the cluster admits a Service with external IPs: a server-side dry run was refused both with an external IP ({with_ip}) and without ({without})"
        ),
    };
    Ok(Some(StepFailed {
        reason: REASON_SERVICE_EXTERNAL_IPS_ALLOWED,
        what: "refusing Service writes".to_owned(),
        error: format!(
            "spec.role writes \"services\" in namespace {namespace}, {why}: kube-proxy on every node sends the cluster's traffic for a Service's external IPs to that Service, whatever the address (CVE-2020-8554); refuse external IPs in the cluster (the DenyServiceExternalIPs admission plugin or a ValidatingAdmissionPolicy, see docs/kubeconfigs.md), or grant services only get, list, watch and delete"
        ),
    }))
}

/// Ensures the ServiceAccount, the (Cluster)Role and binding, and removes the objects of an
/// earlier spec (`previous`). Returns what this request created, sorted, and the checked
/// ServiceAccount. A request the runtime does not hold safely ([`runtime_refusal`]) is refused,
/// and its roles and bindings there (of this spec and earlier ones) are removed: a token it
/// still holds authenticates, with no rights of the request's. The caller then takes back the
/// record of what was applied ([`withdraws_grants`]).
async fn ensure_shoot_objects(
    client: &kube::Client,
    ra: &RuntimeAccess,
    previous: Vec<ShootObjectRef>,
    served: bool,
) -> Result<(Vec<ShootObjectRef>, shoot::OwnedServiceAccount, bool), StepFailed> {
    let failed = |what: String| {
        move |e: kube::Error| StepFailed {
            reason: REASON_SHOOT_ACCESS_FAILED,
            what,
            error: classify::message(&e),
        }
    };
    if let Some(refusal) = runtime_refusal(client, ra).await? {
        // Every spec names its role and binding so; the record and the status, which others
        // may write, name at most those.
        let rbac_name = kim_shared::access::shoot_rbac_name(
            &ra.namespace().unwrap_or_default(),
            &ra.name_any(),
        );
        let mut grants: Vec<ShootObjectRef> = shoot::rbac_objects(ra)
            .iter()
            .map(shoot::RbacObject::reference)
            .chain(previous)
            .filter(|o| o.kind != "ServiceAccount" && o.name == rbac_name)
            .collect();
        grants.sort();
        grants.dedup();
        shoot::deletion_order(&mut grants);
        for obj in &grants {
            let what = format!("removing {} {} of a refused request", obj.kind, obj.name);
            // Someone else's object of the name is left without a word: it is looked at again
            // at every refused pass, and `RoleNotOwned` says so once the request is served.
            shoot::delete(client, ra, obj, served, None)
                .await
                .map_err(failed(what))?;
        }
        return Err(refusal);
    }
    let mut created: Vec<ShootObjectRef> = Vec::new();
    let (sa, renewed) = shoot::ensure_service_account(client, ra, served)
        .await
        .map_err(|e| match e {
            shoot::ServiceAccountError::Api(e) => {
                failed("creating the ServiceAccount".to_owned())(e)
            }
            held @ shoot::ServiceAccountError::BeingDeleted { .. } => StepFailed {
                reason: REASON_SERVICE_ACCOUNT_BEING_DELETED,
                what: "waiting for the ServiceAccount".to_owned(),
                error: held.to_string(),
            },
            not_owned @ (shoot::ServiceAccountError::NotOwned { .. }
            | shoot::ServiceAccountError::AlreadyBound { .. }) => StepFailed {
                reason: REASON_SERVICE_ACCOUNT_NOT_OWNED,
                what: "refusing the ServiceAccount".to_owned(),
                error: not_owned.to_string(),
            },
        })?;
    created.push(sa.reference());
    for obj in &shoot::rbac_objects(ra) {
        let what = format!("applying {} {}", obj.reference().kind, obj.reference().name);
        shoot::apply_rbac(client, obj).await.map_err(|e| match e {
            shoot::RbacApplyError::Api(e) => failed(what)(e),
            not_owned @ (shoot::RbacApplyError::NotOwned { .. }
            | shoot::RbacApplyError::Aggregated { .. }) => StepFailed {
                reason: REASON_ROLE_NOT_OWNED,
                what: "refusing a role or binding".to_owned(),
                error: not_owned.to_string(),
            },
        })?;
        created.push(obj.reference());
    }
    // Objects of an earlier spec (for example a Role replaced by a roleRef) are removed, if
    // they carry this request's label.
    let mut stale: Vec<ShootObjectRef> = previous
        .into_iter()
        .filter(|o| !created.contains(o))
        .collect();
    stale.sort();
    stale.dedup();
    shoot::deletion_order(&mut stale);
    for obj in &stale {
        let what = format!("deleting stale {} {}", obj.kind, obj.name);
        let outcome = shoot::delete(client, ra, obj, served, None)
            .await
            .map_err(failed(what))?;
        warn_if_left(ra, obj, &outcome, "recorded ");
    }
    created.sort();
    created.dedup();
    Ok((created, sa, renewed))
}

/// Logs an object of the request's record that [`shoot::delete`] left in the runtime, as not
/// this request's; `recorded` starts the message ("recorded " where the record named it).
fn warn_if_left(
    ra: &RuntimeAccess,
    obj: &ShootObjectRef,
    outcome: &shoot::Deletion,
    recorded: &str,
) {
    match outcome {
        shoot::Deletion::NotOwned => {
            tracing::warn!(controller = CONTROLLER, object = ra.name_any(), kind = %obj.kind, shoot_object = %obj.name, "{recorded}object lacks this RuntimeAccess's label; left in place");
        }
        shoot::Deletion::Bound(binding) => {
            tracing::warn!(controller = CONTROLLER, object = ra.name_any(), kind = %obj.kind, shoot_object = %obj.name, %binding, "{recorded}ServiceAccount is a subject of a binding that makes it another's; left in place");
        }
        shoot::Deletion::Replaced => {
            tracing::warn!(controller = CONTROLLER, object = ra.name_any(), kind = %obj.kind, shoot_object = %obj.name, "{recorded}ServiceAccount was replaced by one this RuntimeAccess did not make (the tokens it issued are dead); left in place");
        }
        shoot::Deletion::Deleted | shoot::Deletion::Absent => {}
    }
}

/// Whether the KCP Secret belongs to this request: our managed-by label and an owner
/// reference with the request's UID. Only such a Secret (or none) is written or deleted, so a
/// request cannot name another Secret of the namespace (credentials, certificates, another
/// runtime's kubeconfig) to have it overwritten or deleted. Pure.
pub fn secret_owned_by(secret: &Secret, ra: &RuntimeAccess) -> bool {
    let labelled = secret
        .labels()
        .get(names::LABEL_MANAGED_BY)
        .map(String::as_str)
        == Some(names::MANAGED_BY_INFRASTRUCTURE_MANAGER);
    let owned = match ra.uid() {
        Some(uid) if !uid.is_empty() => secret
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == uid),
        _ => false,
    };
    labelled && owned
}

/// Records in the KCP Secret which objects were applied for which fingerprint (its own field
/// manager: the kubeconfig and token annotations stay untouched).
async fn record_shoot_objects(
    secrets: &Api<Secret>,
    name: &str,
    resource_version: Option<&str>,
    fingerprint: &str,
    objects: &[ShootObjectRef],
) -> Result<(), kube::Error> {
    let list = serde_json::to_string(objects).unwrap_or_else(|_| "[]".to_owned());
    // The resourceVersion of the Secret as checked (or as just written): an apply never
    // creates a Secret here, nor writes into one that was replaced meanwhile.
    let patch = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,

            "annotations": {
                record::ANNOTATION_SHOOT_OBJECTS_HASH: fingerprint,
                record::ANNOTATION_SHOOT_OBJECTS: list,
            }
        }
    });
    let mut patch = patch;
    if let Some(rv) = resource_version {
        patch["metadata"]["resourceVersion"] = json!(rv);
    }
    secrets
        .patch(
            name,
            &PatchParams::apply(record::SHOOT_STATE_FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map(|_| ())
}

/// One pass of a request that is not being deleted; `holder` is the request that holds its
/// ServiceAccount ([`super::ByRuntime::account_holder`]) when it is another.
async fn apply(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    holder: Option<&str>,
) -> Result<Action, Error> {
    let now = Timestamp::now();
    let validation = validate_runtime_access(ra, &reconciler.settings.policy);
    if !validation.is_allowed() {
        let msg = validation
            .violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        write_status(
            reconciler,
            ra,
            status_with(ra, "Error", "False", "InvalidSpec", &msg, now),
        )
        .await?;
        return Ok(Action::await_change());
    }
    if let Some(holder) = holder {
        let account = &ra.spec.service_account;
        let msg = format!(
            "refusing the ServiceAccount: ServiceAccount {}/{} of runtime {} is the account of RuntimeAccess {holder}, the first of the requests that name it; one ServiceAccount serves one RuntimeAccess: this one is served once {holder} is gone, or create a RuntimeAccess with another spec.serviceAccount instead",
            account.namespace, account.name, ra.spec.runtime_id
        );
        write_status(
            reconciler,
            ra,
            status_with(
                ra,
                "Error",
                "False",
                REASON_SERVICE_ACCOUNT_NOT_OWNED,
                &msg,
                now,
            ),
        )
        .await?;
        // Waiting is not a failure: counted as an error and retried with backoff, a few
        // waiting requests would make most of the reconciles of a quiet controller fail. The
        // holder's deletion runs this one at once (`Forget`), as does a relist.
        return Ok(Action::requeue(WAIT_FOR_HOLDER));
    }
    if let Some((other, shared)) =
        reconciler
            .by_runtime
            .namespace_shared(&ra.metadata, &ra.spec, ra.status.as_ref())
    {
        let msg = shared.message(&other, &ra.spec.runtime_id);
        write_status(
            reconciler,
            ra,
            status_with(ra, "Error", "False", REASON_NAMESPACE_SHARED, &msg, now),
        )
        .await?;
        // As a request waiting for the holder of its account: no failure, run again at the
        // other's deletion (`Forget`).
        return Ok(Action::requeue(WAIT_FOR_HOLDER));
    }

    // The KCP Secret, read fresh: the token and what was applied in the shoot, durably. It
    // must not exist or be ours before anything is done for this request.
    let name = secret_name(ra);
    let key = secret_key(ra);
    let ns = ra.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(reconciler.ctx.kcp.clone(), &ns);
    let existing = secrets
        .get_opt(&name)
        .await
        .map_err(api(format!("reading Secret {ns}/{name}")))?;
    if let Some(taken) = existing.as_ref().filter(|s| !secret_owned_by(s, ra)) {
        return secret_not_owned(reconciler, ra, taken, now).await;
    }
    let Some(admin) = admin_kubeconfig(reconciler, ra).await? else {
        return without_admin_kubeconfig(reconciler, ra, existing.is_some(), now).await;
    };

    let facts = SecretFacts::read(existing.as_ref(), &key);
    let revoke_requested = annotated_true(ra, ANNOTATION_REVOKE_TOKENS);
    let revoke = revoke_requested && facts.revocation_due(ra.metadata.resource_version.as_deref());
    let decision = if revoke {
        TokenDecision::Issue(token::TokenCause::Revoked)
    } else if endpoint_moved(existing.as_ref(), &key, &admin.kubeconfig.0) {
        TokenDecision::Issue(token::TokenCause::ClusterChanged)
    } else {
        // Nothing before the Shoot watch delivered the Shoot: it sends the runtime's requests
        // again when it sees a rotation.
        let new_key_since = reconciler
            .clusters
            .new_service_account_key_since(&admin.shoot);
        token::decide(
            facts.token,
            reconciler.settings.rotation_ratio,
            new_key_since,
            now,
        )
    };
    let fingerprint = shoot::fingerprint(ra);

    // The shoot is reached only when something is to be done there: objects applied for
    // another spec (or never), or a token to issue (which also re-applies the objects, the
    // periodic drift correction). A reconcile with nothing to do makes no shoot call.
    let needs_shoot = record::needs_shoot(&facts, &fingerprint, decision);
    // A revocation is tried all the same: its cluster may answer sooner than the watch shows
    // it woken up, and a leaked token must not work there meanwhile.
    if needs_shoot && !revoke_requested && reconciler.clusters.hibernated(&admin.shoot) {
        hibernated(reconciler, ra, &admin.shoot, None, now).await?;
        return Ok(Action::requeue(WAIT_FOR_WAKE_UP));
    }
    let (reached, shoot_objects) = if needs_shoot {
        match apply_shoot_objects(reconciler, ra, &admin, &facts, &fingerprint, revoke).await {
            Ok((reached, created)) => (Some(reached), created),
            Err(f) => {
                if withdraws_grants(f.reason)
                    && facts.applied_hash != Some(WITHDRAWN)
                    && let Some(secret) = existing.as_ref()
                {
                    record_shoot_objects(
                        &secrets,
                        &name,
                        secret.metadata.resource_version.as_deref(),
                        WITHDRAWN,
                        &[shoot::account_reference(ra)],
                    )
                    .await
                    .map_err(|e| crate::redact::secret_error(e, secret.data.as_ref()))
                    .map_err(api(format!(
                        "recording the withdrawn grants in Secret {ns}/{name}"
                    )))?;
                }
                return failed_step(reconciler, ra, &admin.shoot, decision, f, now).await;
            }
        }
    } else {
        let applied = facts
            .applied_with(&fingerprint)
            .map(<[ShootObjectRef]>::to_vec)
            .unwrap_or_default();
        (None, applied)
    };

    // An account made anew (a revocation, or one this request was never served with) ends every
    // token issued for the old one, the Secret's included.
    let decision = match (&reached, decision) {
        (Some(r), TokenDecision::Keep { .. }) if r.account_renewed => {
            TokenDecision::Issue(token::TokenCause::Missing)
        }
        (_, decision) => decision,
    };
    let secret = KcpSecret {
        api: &secrets,
        name: &name,
        key: &key,
        existing: existing.as_ref(),
    };
    let (reason, expires, requeue, written) = match decision {
        TokenDecision::Keep { requeue_after } => {
            // From the Secret, never from the cached status: a cache that has not seen the
            // last rotation's status must not turn KubeconfigRotated back into Issued.
            let reason = facts.kept_reason(ra.status.as_ref());
            let expires = facts
                .token
                .expires
                .and_then(crate::gardener_cluster::rotation::parse_last_sync);
            (reason, expires, requeue_after, None)
        }
        TokenDecision::Issue(cause) => {
            let issue = Issue {
                cause,
                revoke_requested,
                facts: &facts,
                now,
            };
            let written = match issue_token(reconciler, ra, &admin, reached, &secret, issue).await {
                Ok(w) => w,
                Err(Stop::Failed(f)) => {
                    return failed_step(reconciler, ra, &admin.shoot, decision, f, now).await;
                }
                Err(Stop::Error(e)) => {
                    reconciler.access_metrics.failed(decision);
                    return Err(e);
                }
            };
            reconciler.access_metrics.delivered(cause);
            let lifetime_left = written.expires.duration_since(now).as_secs_f64().max(1.0);
            let requeue = Duration::from_secs_f64(
                lifetime_left * token::clamp_ratio(reconciler.settings.rotation_ratio),
            );
            let reason = record::issue_reason(cause);
            (reason, Some(written.expires), requeue, Some(written))
        }
    };
    // The Secret as this pass left it: its version (the precondition of the record below) and
    // its values (to clear errors of).
    let (resource_version, secret_data) = match written {
        Some(w) => (w.resource_version, w.data),
        None => (
            existing
                .as_ref()
                .and_then(|s| s.metadata.resource_version.clone()),
            existing.as_ref().and_then(|s| s.data.clone()),
        ),
    };
    if revoke_requested {
        served_revocation(reconciler, ra).await?;
    } else if facts.revoked_at.is_some() {
        // The request's annotation is gone: the next one is a new revocation.
        let patch = json!({"metadata": {"annotations": {record::ANNOTATION_TOKENS_REVOKED: null}}});
        secrets
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| crate::redact::secret_error(e, secret_data.as_ref()))
            .map_err(api(format!(
                "clearing the revocation mark of Secret {ns}/{name}"
            )))?;
    }
    if facts.applied_with(&fingerprint) != Some(shoot_objects.as_slice())
        && let Err(e) = record_shoot_objects(
            &secrets,
            &name,
            resource_version.as_deref(),
            &fingerprint,
            &shoot_objects,
        )
        .await
    {
        return fail(
            reconciler,
            ra,
            "SecretWriteFailed",
            &format!("recording the shoot objects in Secret {ns}/{name}"),
            classify::message(&crate::redact::secret_error(e, secret_data.as_ref())),
            now,
        )
        .await;
    }
    if let Err(e) = delete_renamed(&secrets, ra, &name).await {
        return fail(
            reconciler,
            ra,
            "SecretWriteFailed",
            "deleting the Secret of the previous spec.secret.name",
            classify::message(&e),
            now,
        )
        .await;
    }
    let message = format!(
        "kubeconfig for {} in Secret {ns}/{name}",
        service_account_user(&ra.spec)
    );
    let mut status = status_with(ra, "Ready", "True", reason, &message, now);
    status.secret_ref = Some(AccessSecretRef {
        name,
        namespace: ns,
        key,
    });
    status.identity = Some(service_account_user(&ra.spec));
    status.token_expiration_timestamp = expires.map(Time);
    status.shoot_objects = shoot_objects;
    write_status(reconciler, ra, status).await?;
    Ok(Action::requeue(requeue))
}

/// The request names a Secret it does not own: says whose it is, writes nothing.
async fn secret_not_owned(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    taken: &Secret,
    now: Timestamp,
) -> Result<Action, Error> {
    let ns = ra.namespace().unwrap_or_default();
    let name = secret_name(ra);
    // Any requester may name any free `*-kubeconfig` Secret: say whose it is.
    let ours = taken
        .labels()
        .get(names::LABEL_MANAGED_BY)
        .map(String::as_str)
        == Some(names::MANAGED_BY_INFRASTRUCTURE_MANAGER);
    let holder = taken
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|_| ours)
        .find(|o| {
            o.kind == "RuntimeAccess"
                && o.api_version == RuntimeAccess::api_version(&())
                && ra.uid().as_deref() != Some(o.uid.as_str())
        })
        .map(|o| format!(" (it is the Secret of RuntimeAccess {ns}/{})", o.name))
        .unwrap_or_default();
    let msg = format!(
        "Secret {ns}/{name} exists and is not owned by this RuntimeAccess (label {}={} and an owner reference to it){holder}; the controller writes only a Secret it creates: set spec.secret.name to a Secret that does not exist",
        names::LABEL_MANAGED_BY,
        names::MANAGED_BY_INFRASTRUCTURE_MANAGER
    );
    write_status(
        reconciler,
        ra,
        status_with(ra, "Error", "False", REASON_SECRET_NOT_OWNED, &msg, now),
    )
    .await?;
    // The Secret may be deleted later; look again now and then.
    Ok(Action::requeue(WAIT_FOR_RUNTIME))
}

/// The runtime has no admin kubeconfig: not ready yet, or (for a request that was served,
/// `served`) gone.
async fn without_admin_kubeconfig(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    served: bool,
    now: Timestamp,
) -> Result<Action, Error> {
    // A request that was served (its Secret exists) whose Runtime is gone or being deleted:
    // the runtime was deprovisioned and will not come back, which a consumer cannot tell from
    // "not ready yet" otherwise. A request not served yet may come before its Runtime.
    let runtime_gone = served
        && runtime_of(reconciler, ra)
            .await?
            .is_none_or(|rt| rt.metadata.deletion_timestamp.is_some());
    if runtime_gone {
        let ns = ra.namespace().unwrap_or_default();
        let name = secret_name(ra);
        let msg = format!(
            "runtime {} is gone or being deleted (no Runtime of that ID, or one being deleted, and no admin kubeconfig): the kubeconfig in Secret {ns}/{name} reaches no cluster. Delete this RuntimeAccess once done with the runtime; should the runtime's kubeconfig come back (a restored KCP), it is served again",
            ra.spec.runtime_id
        );
        let status = status_with(ra, "Error", "False", REASON_RUNTIME_GONE, &msg, now);
        write_status(reconciler, ra, status).await?;
        // The admin kubeconfig Secret's return triggers it (see `affected_requests`).
        return Ok(Action::await_change());
    }
    let msg = format!(
        "waiting for the admin kubeconfig of GardenerCluster {}",
        ra.spec.runtime_id
    );
    let status = status_with(ra, "Pending", "False", "RuntimeNotReady", &msg, now);
    write_status(reconciler, ra, status).await?;
    Ok(Action::requeue(WAIT_FOR_RUNTIME))
}

/// The runtime's cluster is hibernated while the pass has a token to issue or objects to apply
/// there: it waits, as a request waits for its runtime's admin kubeconfig, and is not a failed
/// reconcile. The Shoot watch runs it as the wake-up is asked for (a pass before the cluster
/// answers fails and is retried with backoff); a token already issued works again then until
/// it expires.
async fn hibernated(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    shoot: &str,
    failure: Option<&str>,
    now: Timestamp,
) -> Result<(), Error> {
    let msg = match failure {
        None => format!(
            "the cluster of runtime {} (Shoot {shoot}) is hibernated: the kubeconfig is issued or rotated, and the objects in the cluster applied, once it is woken up",
            ra.spec.runtime_id
        ),
        // The answer may quote what was sent; the status gets it without credentials.
        Some(failure) => kim_shared::redact::credentials(&format!(
            "the cluster of runtime {} (Shoot {shoot}) is hibernated, or being hibernated or woken up, and did not answer ({failure}): tokens are issued, rotated or revoked, and the objects in it applied, once it answers",
            ra.spec.runtime_id
        ))
        .into_owned(),
    };
    let status = status_with(ra, "Pending", "False", REASON_RUNTIME_HIBERNATED, &msg, now);
    write_status(reconciler, ra, status).await
}

/// How long a request whose cluster sleeps waits: a cluster being woken up answers soon, one
/// that is (being) hibernated when its wake-up is asked for ([`WAIT_FOR_WAKE_UP`], the Shoot
/// watch's notice ends it early).
fn wait_for_sleeping(waking: bool) -> Duration {
    if waking {
        WAKING_UP_POLL
    } else {
        WAIT_FOR_WAKE_UP
    }
}

/// A failed step of a pass: a cluster that does not answer because it sleeps (hibernated, or
/// being hibernated or woken up) is waited for ([`hibernated`]); any other failure is
/// [`undelivered`]. Only the steps that reach the cluster count: a refusal is an answer.
async fn failed_step(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    shoot: &str,
    decision: TokenDecision,
    f: StepFailed,
    now: Timestamp,
) -> Result<Action, Error> {
    let unanswered = f.reason == REASON_SHOOT_ACCESS_FAILED || f.reason == "TokenRequestFailed";
    match reconciler.clusters.sleeping(shoot) {
        Some(waking) if unanswered => {
            let failure = format!("{}: {}", f.what, f.error);
            hibernated(reconciler, ra, shoot, Some(&failure), now).await?;
            Ok(Action::requeue(wait_for_sleeping(waking)))
        }
        _ if refusal(f.reason) => refused(reconciler, ra, decision, f, now).await,
        _ => undelivered(reconciler, ra, decision, f, now).await,
    }
}

/// Whether a step failed with `reason` removed the request's roles and bindings in the runtime
/// ([`ensure_shoot_objects`]).
fn withdraws_grants(reason: &str) -> bool {
    [
        REASON_POD_SECURITY_NOT_ENFORCED,
        REASON_SERVICE_EXTERNAL_IPS_ALLOWED,
    ]
    .contains(&reason)
}

/// The record of what was applied, after [`withdraws_grants`]: only the account, under a
/// fingerprint no spec has, so every later pass reaches the runtime and applies the grants
/// again once it holds them (a spec reverted to the one recorded would otherwise find nothing
/// to do, and report Ready without them).
const WITHDRAWN: &str = "withdrawn";

/// Whether a step's failure is a refusal for what is in the runtime: someone else's account,
/// role or binding, or a namespace that lets Pods reach the nodes. Only a change there (by
/// the requester or the runtime's owner) ends it; the controller did not fail. A refused
/// revocation is alerted all the same (`KimRuntimeAccessRevocationRefused`): tokens someone
/// asked to end still work.
fn refusal(reason: &str) -> bool {
    [
        REASON_SERVICE_ACCOUNT_NOT_OWNED,
        REASON_ROLE_NOT_OWNED,
        REASON_POD_SECURITY_NOT_ENFORCED,
        REASON_SERVICE_EXTERNAL_IPS_ALLOWED,
        REASON_REVOCATION_REFUSED,
    ]
    .contains(&reason)
}

/// A pass refused for what is in the runtime: said in the status as a failed step is, but not
/// a failed reconcile (retried every minute and counted, a few refused requests would make most
/// of the reconciles of a quiet controller fail); looked at again after [`WAIT_AFTER_REFUSAL`].
async fn refused(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    decision: TokenDecision,
    f: StepFailed,
    now: Timestamp,
) -> Result<Action, Error> {
    reconciler.access_metrics.failed(decision);
    let msg = failure_status(reconciler, ra, f.reason, &f.what, f.error, now).await?;
    // Its own status write must not run it again at once: nothing in the runtime changed.
    reconciler.records.hold(
        &key(ra),
        WAIT_AFTER_REFUSAL,
        crate::records::inputs(&ra.metadata),
    );
    tracing::info!(controller = CONTROLLER, namespace = ra.namespace().unwrap_or_default(), object = ra.name_any(), runtime_id = %ra.spec.runtime_id, reason = f.reason, message = %msg, retry_in = ?WAIT_AFTER_REFUSAL, "request refused");
    Ok(Action::requeue(WAIT_AFTER_REFUSAL))
}

/// A pass that had a token to deliver, or objects to apply, and stopped at a failed step:
/// counted, and said in the status.
async fn undelivered(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    decision: TokenDecision,
    f: StepFailed,
    now: Timestamp,
) -> Result<Action, Error> {
    reconciler.access_metrics.failed(decision);
    fail(reconciler, ra, f.reason, &f.what, f.error, now).await
}

/// The runtime reached through its admin kubeconfig, with the request's ServiceAccount there.
struct Reached {
    access: ShootAccess,
    service_account: shoot::OwnedServiceAccount,
    /// The account was made anew: a token issued before for it is dead.
    account_renewed: bool,
}

/// Reaches the runtime, and applies the request's objects there, removing those of an earlier
/// spec (and on `revoke` replacing the ServiceAccount first). Returns what this request has
/// there now.
async fn apply_shoot_objects(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    admin: &AdminKubeconfig,
    facts: &SecretFacts<'_>,
    fingerprint: &str,
    revoke: bool,
) -> Result<(Reached, Vec<ShootObjectRef>), StepFailed> {
    let access = reach(reconciler, ra, admin).await?;
    let served = served_with_its_account(reconciler, ra)
        .await
        .map_err(|e| StepFailed {
            reason: REASON_SHOOT_ACCESS_FAILED,
            what: "reading the RuntimeAccess".to_owned(),
            error: classify::message(&e),
        })?;
    // What this request created before: the durable record and the (maybe older) status,
    // and for a spec not applied yet what carries its label (a failed pass applied
    // objects it never recorded). Token rotations of an applied spec skip the lists.
    let mut previous = facts.applied_objects.clone().unwrap_or_default();
    previous.extend(
        ra.status
            .as_ref()
            .map(|s| s.shoot_objects.clone())
            .unwrap_or_default(),
    );
    if facts.applied_with(fingerprint).is_none() {
        let labelled = shoot::labelled(&access.client, ra)
            .await
            .map_err(|e| StepFailed {
                reason: REASON_SHOOT_ACCESS_FAILED,
                what: "listing the objects of this RuntimeAccess".to_owned(),
                error: classify::message(&e),
            })?;
        previous.extend(labelled);
    }
    // Revoked: every token is bound to the ServiceAccount's UID, so a new account of the
    // same name (made below) invalidates all tokens issued so far, at once.
    if revoke {
        replace_service_account(&access.client, ra, served, facts.account_uid)
            .await
            .map_err(|refused| StepFailed {
                reason: match refused {
                    Replacement::Failed(_) => REASON_SHOOT_ACCESS_FAILED,
                    Replacement::NotOwned(_) => REASON_REVOCATION_REFUSED,
                },
                what: "revoking the tokens".to_owned(),
                error: refused.into_message(),
            })?;
    }
    let (created, service_account, account_renewed) =
        ensure_shoot_objects(&access.client, ra, previous, served).await?;
    Ok((
        Reached {
            access,
            service_account,
            account_renewed,
        },
        created,
    ))
}

/// Whether `status` lists `account` among the objects its request created. Pure.
pub fn lists_account(status: Option<&RuntimeAccessStatus>, account: &ServiceAccountRef) -> bool {
    status.is_some_and(|s| {
        s.shoot_objects.iter().any(|o| {
            o.kind == "ServiceAccount"
                && o.name == account.name
                && o.namespace.as_deref() == Some(account.namespace.as_str())
        })
    })
}

/// Whether the request was served with its ServiceAccount: its status lists the account among
/// the objects it created (written by this controller from the first pass that served it on,
/// from what the KCP Secret records; a failure keeps the list). The status handed to the pass
/// may be older than the pass that served it, so one that does not list it is read again.
async fn served_with_its_account(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
) -> Result<bool, kube::Error> {
    let lists =
        |status: Option<&RuntimeAccessStatus>| lists_account(status, &ra.spec.service_account);
    if lists(ra.status.as_ref()) {
        return Ok(true);
    }
    let requests: Api<StatusApart<RuntimeAccess>> = Api::namespaced(
        reconciler.ctx.kcp.clone(),
        &ra.namespace().unwrap_or_default(),
    );
    let fresh = requests.get_opt(&ra.name_any()).await?;
    Ok(fresh
        .and_then(|f| f.object().ok())
        .is_some_and(|f| f.uid() == ra.uid() && lists(f.status.as_ref())))
}

/// The shoot client for the runtime, or the failure to build one.
async fn reach(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    admin: &AdminKubeconfig,
) -> Result<ShootAccess, StepFailed> {
    shoot_access(reconciler, ra, admin)
        .await
        .map_err(|e| StepFailed {
            reason: REASON_ADMIN_KUBECONFIG_UNUSABLE,
            what: "reaching the runtime".to_owned(),
            error: e.to_string(),
        })
}

/// The request's KCP Secret, as read at the start of the pass.
struct KcpSecret<'a> {
    api: &'a Api<Secret>,
    name: &'a str,
    key: &'a str,
    existing: Option<&'a Secret>,
}

/// Why and when a token is issued.
struct Issue<'a> {
    cause: token::TokenCause,
    revoke_requested: bool,
    facts: &'a SecretFacts<'a>,
    now: Timestamp,
}

/// What stops a token's delivery: a failed step (said in the status) or an error of the pass.
enum Stop {
    Failed(StepFailed),
    Error(Error),
}

impl From<StepFailed> for Stop {
    fn from(f: StepFailed) -> Self {
        Self::Failed(f)
    }
}

/// The Secret written with a new token.
struct Written {
    expires: Timestamp,
    resource_version: Option<String>,
    data: Option<BTreeMap<String, ByteString>>,
}

/// Requests a token for the request's ServiceAccount (reaching the runtime and ensuring the
/// account first unless `reached` already did) and writes its kubeconfig into the KCP Secret.
async fn issue_token(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    admin: &AdminKubeconfig,
    reached: Option<Reached>,
    secret: &KcpSecret<'_>,
    issue: Issue<'_>,
) -> Result<Written, Stop> {
    let reached = match reached {
        Some(r) => r,
        None => {
            let access = reach(reconciler, ra, admin).await?;
            let served = served_with_its_account(reconciler, ra)
                .await
                .map_err(api("reading the RuntimeAccess"))
                .map_err(Stop::Error)?;
            let (_, service_account, account_renewed) =
                ensure_shoot_objects(&access.client, ra, Vec::new(), served).await?;
            Reached {
                access,
                service_account,
                account_renewed,
            }
        }
    };
    let lifetime = ra.spec.token_expiration_seconds.unwrap_or_else(|| {
        i64::try_from(reconciler.settings.token_expiration.as_secs()).unwrap_or(3600)
    });
    let issued = shoot::request_token(&reached.access.client, &reached.service_account, lifetime)
        .await
        .map_err(|e| StepFailed {
            reason: "TokenRequestFailed",
            what: "requesting a ServiceAccount token".to_owned(),
            error: match &e {
                shoot::TokenError::Api(e) => classify::message(e),
                other => other.to_string(),
            },
        })?;
    let user = service_account_user(&ra.spec);
    let kubeconfig = token_kubeconfig(
        &reached.access.endpoint,
        &user,
        &ra.spec.service_account.namespace,
        &issued.token,
    )
    .map_err(|e| {
        Stop::Error(Error::AdminKubeconfig {
            runtime: ra.spec.runtime_id.clone(),
            reason: e.to_string(),
        })
    })?;
    let reason = record::issue_reason(issue.cause);
    let mut desired = kubeconfig_secret(
        ra,
        secret.name,
        secret.key,
        kubeconfig,
        IssuedAt {
            now: issue.now,
            expires: issued.expires,
            reason,
            token_id: issued.id.clone(),
            account_uid: issued.account_uid.clone(),
            revoked_at: issue.facts.revocation_mark(
                reason,
                issue.revoke_requested,
                ra.metadata.resource_version.as_deref(),
            ),
        },
    );
    // Into the Secret checked at the start of the pass, or a new one: an existing Secret is
    // written with its resourceVersion as precondition, a missing one is created (409 if
    // someone made one meanwhile), so a Secret that appeared or changed since the check is
    // never taken over.
    let resource_version = secret
        .existing
        .and_then(|s| s.metadata.resource_version.as_deref());
    let written = match resource_version {
        Some(rv) => {
            desired.metadata.resource_version = Some(rv.to_owned());
            secret
                .api
                .patch(
                    secret.name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&desired),
                )
                .await
        }
        None => {
            secret
                .api
                .create(
                    &kube::api::PostParams {
                        field_manager: Some(FIELD_MANAGER.to_owned()),
                        ..Default::default()
                    },
                    &desired,
                )
                .await
        }
    };
    let written = written.map_err(|e| {
        // The kubeconfig written, its token, and the one it replaces (a webhook's
        // `oldObject`).
        let carried: Vec<&[u8]> = crate::redact::data_values(desired.data.as_ref())
            .chain([issued.token.as_bytes()])
            .chain(crate::redact::data_values(
                secret.existing.and_then(|s| s.data.as_ref()),
            ))
            .collect();
        let ns = ra.namespace().unwrap_or_default();
        StepFailed {
            reason: "SecretWriteFailed",
            what: format!("writing Secret {ns}/{}", secret.name),
            error: classify::message(&crate::redact::api_error(e, &carried)),
        }
    })?;
    tracing::info!(controller = CONTROLLER, object = ra.name_any(), runtime_id = %ra.spec.runtime_id, secret = %secret.name, cause = ?issue.cause, token_id = issued.id.as_deref().unwrap_or_default(), expires = %issued.expires, identity = %user, "ServiceAccount kubeconfig written");
    Ok(Written {
        expires: issued.expires,
        resource_version: written.metadata.resource_version,
        data: written.data,
    })
}

/// After a spec change (or while the status records no Secret of this name), deletes every
/// other Secret of this request: no copy of the kubeconfig stays behind under an old name (its
/// token stays valid until it expires; the revocation annotation ends it sooner). Found by
/// this request's labels and owner reference, not only by the name the status holds: a pass
/// cut off after a rename wrote the new Secret but not the status, and a second rename would
/// otherwise leave the Secret in between. An error comes cleared of the Secret's data.
async fn delete_renamed(
    secrets: &Api<Secret>,
    ra: &RuntimeAccess,
    current: &str,
) -> Result<(), kube::Error> {
    // After a spec change, or while no Secret is recorded: a pass cut off after a rename,
    // and a rename back, leave the status naming the current Secret.
    let status = ra.status.as_ref();
    let recorded = status
        .and_then(|s| s.secret_ref.as_ref())
        .is_some_and(|r| r.name == current);
    let observed = status.and_then(|s| s.observed_generation) == ra.metadata.generation;
    if recorded && observed {
        return Ok(());
    }
    let selector = format!(
        "{}={},{}={}",
        names::LABEL_MANAGED_BY,
        names::MANAGED_BY_INFRASTRUCTURE_MANAGER,
        names::LABEL_RUNTIME_ID,
        ra.spec.runtime_id
    );
    let listed = secrets
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?;
    for secret in listed
        .items
        .iter()
        .filter(|s| s.metadata.name.as_deref() != Some(current) && secret_owned_by(s, ra))
    {
        let name = secret.name_any();
        // Conditional on the UID that was checked: a Secret made anew meanwhile stays.
        let only_this = crate::finalizing::only_uid(secret.metadata.uid.clone());
        match secrets.delete(&name, &only_this).await {
            Ok(_) => {
                tracing::info!(
                    controller = CONTROLLER,
                    secret = %name,
                    "deleted the Secret of a previous spec.secret.name"
                );
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            // The answer may quote the Secret (an admission webhook's oldObject).
            Err(e) => return Err(crate::redact::secret_error(e, secret.data.as_ref())),
        }
    }
    Ok(())
}

async fn fail(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    reason: &str,
    what: &str,
    e: impl std::fmt::Display,
    now: Timestamp,
) -> Result<Action, Error> {
    let msg = failure_status(reconciler, ra, reason, what, e, now).await?;
    Err(Error::Step(msg))
}

/// Writes the status `Error` with `reason` and the message `<what>: <e>`, which it returns.
async fn failure_status(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    reason: &str,
    what: &str,
    e: impl std::fmt::Display,
    now: Timestamp,
) -> Result<String, Error> {
    // The answer to a Secret write may quote the kubeconfig it carried (an admission webhook's
    // message); the status and the log get the message without it.
    let msg = kim_shared::redact::credentials(&format!("{what}: {e}")).into_owned();
    write_status(
        reconciler,
        ra,
        status_with(ra, "Error", "False", reason, &msg, now),
    )
    .await?;
    Ok(msg)
}

/// Removes what the request created in the shoot (when the shoot is still reachable) and its
/// KCP Secret (when it is ours).
async fn cleanup(reconciler: &Reconciler, ra: &RuntimeAccess) -> Result<Action, Error> {
    let ns = ra.namespace().unwrap_or_default();
    let name = secret_name(ra);
    let secrets: Api<Secret> = Api::namespaced(reconciler.ctx.kcp.clone(), &ns);
    let mut objs: Vec<ShootObjectRef> = ra
        .status
        .as_ref()
        .map(|s| s.shoot_objects.clone())
        .unwrap_or_default();
    // What the Secret recorded (durable even when the cached status is older), if it is ours.
    let existing = secrets
        .get_opt(&name)
        .await
        .map_err(api(format!("reading Secret {ns}/{name}")))?
        .filter(|s| secret_owned_by(s, ra));
    let facts = SecretFacts::read(existing.as_ref(), &secret_key(ra));
    objs.extend(facts.applied_objects.clone().unwrap_or_default());
    let served = served_with_its_account(reconciler, ra)
        .await
        .map_err(api("reading the RuntimeAccess"))?;
    // The ServiceAccount, role and binding have names this request uses: delete them even if
    // a status write was lost. Each only if it carries this request's label.
    objs.extend(shoot::spec_objects(ra));
    // The annotation lets a deletion go that cannot remove the objects; it never keeps a
    // reachable runtime from being cleaned up.
    let skip = annotated_true(ra, ANNOTATION_SKIP_SHOOT_CLEANUP);
    // With the annotation, a runtime that answers too slowly to finish within the pass's limit
    // counts as failed too.
    let issued_for = facts.account_uid.map(str::to_owned);
    let removal = remove_from_runtime(reconciler, ra, objs, served, issued_for.as_deref());
    let removed = if skip {
        let limit = reconciler.reconcile_timeout() / 2;
        tokio::time::timeout(limit, removal)
            .await
            .unwrap_or_else(|_| {
                Err(CleanupWaits::step(format!(
                    "the runtime did not finish answering within {}s",
                    limit.as_secs()
                )))
            })
    } else {
        removal.await
    };
    let in_runtime = match removed {
        Ok(removed) => removed,
        Err(waiting) if skip => {
            tracing::warn!(controller = CONTROLLER, object = ra.name_any(), uid = ra.uid().unwrap_or_default(), runtime_id = %ra.spec.runtime_id, reason = %waiting.message, "{ANNOTATION_SKIP_SHOOT_CLEANUP}=true: the objects of this RuntimeAccess in the runtime are left in place");
            "left in place (skip-shoot-cleanup)"
        }
        Err(waiting) => {
            cleanup_waits(reconciler, ra, waiting.reason(), &waiting.message).await;
            return Err(waiting.error);
        }
    };
    if let Some(secret) = existing {
        // Conditional on the UID that was checked: a Secret replaced meanwhile stays.
        let dp = crate::finalizing::only_uid(secret.metadata.uid.clone());
        match secrets.delete(&name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                let e = crate::redact::secret_error(e, secret.data.as_ref());
                return Err(api(format!("deleting Secret {ns}/{name}"))(e));
            }
        }
    }
    tracing::info!(
        controller = CONTROLLER,
        object = ra.name_any(),
        uid = ra.uid().unwrap_or_default(),
        runtime_id = %ra.spec.runtime_id,
        runtime_objects = in_runtime,
        "RuntimeAccess cleaned up"
    );
    reconciler.forget_key(&key(ra));
    Ok(Action::await_change())
}

/// Why the ServiceAccount was not replaced.
enum Replacement {
    /// A call failed (the message quotes it).
    Failed(String),
    /// The account is not this request's (no label of it, or another's binding names it).
    NotOwned(String),
}

impl Replacement {
    fn into_message(self) -> String {
        match self {
            Self::Failed(m) | Self::NotOwned(m) => m,
        }
    }
}

/// Deletes what this request made in the runtime, bindings first, so that the
/// ServiceAccount is created anew (with a new UID) by the apply that follows. The bindings go
/// first: while they exist, whoever creates an account of that name would hold their rights.
/// The account the tokens were issued for (UID `issued_for`, from the Secret) is deleted
/// whatever its labels; without that record, an account without this request's label is not
/// replaced, and its tokens not revoked.
async fn replace_service_account(
    client: &kube::Client,
    ra: &RuntimeAccess,
    served: bool,
    issued_for: Option<&str>,
) -> Result<(), Replacement> {
    let mut objs = shoot::spec_objects(ra);
    shoot::deletion_order(&mut objs);
    for obj in &objs {
        let outcome = shoot::delete(client, ra, obj, served, issued_for)
            .await
            .map_err(|e| {
                Replacement::Failed(format!(
                    "deleting {} {}: {}",
                    obj.kind,
                    obj.name,
                    classify::message(&e)
                ))
            })?;
        let account = format!(
            "ServiceAccount {}/{}",
            obj.namespace.as_deref().unwrap_or_default(),
            obj.name
        );
        match outcome {
            shoot::Deletion::NotOwned if obj.kind == "ServiceAccount" => {
                return Err(Replacement::NotOwned(format!(
                    "{account} lacks this RuntimeAccess's label {}: it is not replaced, so its tokens stay valid; delete it in the runtime to revoke them",
                    shoot::LABEL_RUNTIME_ACCESS_UID
                )));
            }
            shoot::Deletion::Bound(binding) => {
                return Err(Replacement::NotOwned(format!(
                    "{account} is a subject of {binding}, which this RuntimeAccess did not create: it is another's account and is not replaced, so its tokens stay valid"
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Removes [`ANNOTATION_REVOKE_TOKENS`] once the revocation is done. Not conditional on the
/// version read: a request set again meanwhile came before this revocation, which served it.
async fn served_revocation(reconciler: &Reconciler, ra: &RuntimeAccess) -> Result<(), Error> {
    let requests: Api<StatusApart<RuntimeAccess>> = Api::namespaced(
        reconciler.ctx.kcp.clone(),
        &ra.namespace().unwrap_or_default(),
    );
    let patch = json!({"metadata": {"annotations": {ANNOTATION_REVOKE_TOKENS: null}}});
    requests
        .patch(
            &ra.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(api(format!(
            "removing {ANNOTATION_REVOKE_TOKENS} from RuntimeAccess {}",
            ra.name_any()
        )))?;
    tracing::info!(controller = CONTROLLER, object = ra.name_any(), uid = ra.uid().unwrap_or_default(), runtime_id = %ra.spec.runtime_id, identity = %service_account_user(&ra.spec), "every earlier token of the RuntimeAccess revoked (ServiceAccount replaced)");
    Ok(())
}

/// Why the objects in the runtime could not be removed (yet).
struct CleanupWaits {
    /// The condition message: what failed and how to finish.
    message: String,
    /// The reconcile's error.
    error: Error,
}

impl CleanupWaits {
    /// Waits for a reason that is the reconcile's error too.
    fn step(message: String) -> Self {
        Self {
            error: Error::Step(message.clone()),
            message,
        }
    }

    /// The condition reason: the cluster is hibernated, or the cleanup failed.
    fn reason(&self) -> &'static str {
        match self.error {
            Error::Waits(..) => REASON_RUNTIME_HIBERNATED,
            _ => REASON_SHOOT_CLEANUP_FAILED,
        }
    }
}

/// Whether `ra` carries `annotation: "true"`.
fn annotated_true(ra: &RuntimeAccess, annotation: &str) -> bool {
    ra.annotations()
        .get(annotation)
        .is_some_and(|v| v == "true")
}

/// Removes what the request created in the runtime. `Ok`: what became of it (for the log);
/// `Err`: the deletion must wait.
async fn remove_from_runtime(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    objs: Vec<ShootObjectRef>,
    served: bool,
    issued_for: Option<&str>,
) -> Result<&'static str, CleanupWaits> {
    let cannot = |e: Error| CleanupWaits {
        message: format!(
            "cannot remove the objects of this RuntimeAccess in runtime {}: {e}; the deletion is retried until they are removed. If the runtime is gone for good or stays hibernated, annotate the RuntimeAccess with {ANNOTATION_SKIP_SHOOT_CLEANUP}=true to finish the deletion without it",
            ra.spec.runtime_id
        ),
        error: e,
    };
    match admin_kubeconfig(reconciler, ra).await.map_err(cannot)? {
        Some(admin) => {
            match delete_in_shoot(reconciler, ra, &admin, objs, served, issued_for).await {
                Ok(()) => Ok("removed"),
                // Tried first all the same: a cluster that answers is cleaned up, whatever the
                // watch shows. One that does not answer because it sleeps is waited for, not
                // failed; the Shoot watch runs the deletion again as its wake-up is asked for.
                Err(e) if let Some(waking) = reconciler.clusters.sleeping(&admin.shoot) => {
                    let message = format!(
                        "the cluster of runtime {} (Shoot {}) is hibernated{} and did not answer ({e}): the objects of this RuntimeAccess in it are removed once it answers, and the deletion waits until then. If the runtime stays hibernated and access to it does not matter, annotate the RuntimeAccess with {ANNOTATION_SKIP_SHOOT_CLEANUP}=true to finish the deletion without it",
                        ra.spec.runtime_id,
                        admin.shoot,
                        if waking { " (being woken up)" } else { "" }
                    );
                    Err(CleanupWaits {
                        error: Error::Waits(message.clone(), wait_for_sleeping(waking)),
                        message,
                    })
                }
                Err(e) => Err(cannot(e)),
            }
        }
        None => match live_shoot(reconciler, ra).await.map_err(cannot)? {
            // A live cluster whose admin kubeconfig is missing or not ours (its
            // GardenerCluster deleted by hand, a Secret relabelled): what this request
            // created there still grants access, so the deletion waits.
            Some(shoot) => {
                let message = format!(
                    "runtime {} has no admin kubeconfig this controller may use (its GardenerCluster, or the Secret it names, is missing or not the controller's) while its Shoot {shoot} exists: the objects of this RuntimeAccess in it cannot be removed yet; the deletion is retried until they are or the Shoot is being deleted. If access to that cluster does not matter, annotate the RuntimeAccess with {ANNOTATION_SKIP_SHOOT_CLEANUP}=true to finish the deletion without it",
                    ra.spec.runtime_id
                );
                Err(CleanupWaits::step(message))
            }
            // The runtime's Shoot is gone or being deleted: its cluster goes with it.
            None => Ok(
                "none: the runtime has no admin kubeconfig and its Shoot is gone or being deleted",
            ),
        },
    }
}

/// Says why the deletion waits (`Deleting`, `ShootCleanupFailed`). The reconcile's error
/// carries the reason too, so a failed status write is only logged.
async fn cleanup_waits(reconciler: &Reconciler, ra: &RuntimeAccess, reason: &str, msg: &str) {
    let status = status_with(ra, "Deleting", "False", reason, msg, Timestamp::now());
    if let Err(e) = write_status(reconciler, ra, status).await {
        tracing::debug!(error = %e, "cannot write the status of a waiting deletion");
    }
}

/// The Runtime of `ra`'s runtime ID in the request's namespace, found as the Runtime
/// reconciler finds IDs (the `kyma-project.io/runtime-id` label, else the name): `<runtimeId>`
/// unless its label names another ID, else one labelled with it (a Runtime stored under
/// another name, which no webhook checked). Read as untyped data, so that a Runtime our types
/// cannot read still answers; the label list from the apiserver's cache.
async fn runtime_of(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
) -> Result<Option<DynamicObject>, Error> {
    let ns = ra.namespace().unwrap_or_default();
    let runtime_id = &ra.spec.runtime_id;
    let runtimes: Api<DynamicObject> = Api::namespaced_with(
        reconciler.ctx.kcp.clone(),
        &ns,
        &ApiResource::erase::<Runtime>(&()),
    );
    let labelled = |rt: &DynamicObject| {
        rt.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::LABEL_RUNTIME_ID))
            .cloned()
    };
    if let Some(runtime) = runtimes
        .get_opt(runtime_id)
        .await
        .map_err(api(format!("reading Runtime {ns}/{runtime_id}")))?
        && labelled(&runtime).is_none_or(|id| id == *runtime_id)
    {
        return Ok(Some(runtime));
    }
    Ok(runtimes
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("{}={runtime_id}", names::LABEL_RUNTIME_ID))
                .match_any(),
        )
        .await
        .map_err(api(format!("listing Runtimes {ns}/{runtime_id}")))?
        .items
        .into_iter()
        .next())
}

/// The name of the Shoot of `ra`'s runtime while it exists and is not being deleted, as its
/// Runtime ([`runtime_of`]) names it. `None` when the Runtime or the Shoot is gone or either
/// is being deleted.
async fn live_shoot(reconciler: &Reconciler, ra: &RuntimeAccess) -> Result<Option<String>, Error> {
    let Some(runtime) = runtime_of(reconciler, ra).await? else {
        return Ok(None);
    };
    // A Runtime being deleted takes its cluster with it (first hibernated during a deletion
    // grace period): nothing to wait for.
    if runtime.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let Some(shoot) = runtime.data["spec"]["shoot"]["name"].as_str() else {
        return Ok(None);
    };
    let shoots: Api<Shoot> = Api::namespaced(
        reconciler.ctx.gardener.clone(),
        &reconciler.ctx.gardener_namespace,
    );
    let live = shoots
        .get_metadata_opt(shoot)
        .await
        .map_err(api(format!("reading Shoot {shoot}")))?
        .is_some_and(|meta| meta.metadata.deletion_timestamp.is_none());
    Ok(live.then(|| shoot.to_owned()))
}

/// Deletes `objs` and whatever else carries this request's label in the shoot (each only if
/// it carries the label), bindings first; the first failure ends it, so an unreachable runtime
/// costs one request timeout per attempt.
async fn delete_in_shoot(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    admin: &AdminKubeconfig,
    mut objs: Vec<ShootObjectRef>,
    served: bool,
    issued_for: Option<&str>,
) -> Result<(), Error> {
    let access = shoot_access(reconciler, ra, admin).await?;
    objs.extend(shoot::labelled(&access.client, ra).await.map_err(api(
        "listing the objects of this RuntimeAccess in the shoot",
    ))?);
    objs.sort();
    objs.dedup();
    shoot::deletion_order(&mut objs);
    for obj in &objs {
        let outcome = shoot::delete(&access.client, ra, obj, served, issued_for)
            .await
            .map_err(api(format!(
                "deleting {} {} in the shoot",
                obj.kind, obj.name
            )))?;
        warn_if_left(ra, obj, &outcome, "");
    }
    Ok(())
}

/// When and why a token was issued, as recorded on its Secret.
struct IssuedAt {
    now: Timestamp,
    expires: Timestamp,
    reason: &'static str,
    /// [`shoot::IssuedToken::id`].
    token_id: Option<String>,
    /// [`shoot::IssuedToken::account_uid`].
    account_uid: Option<String>,
    /// The request's `revoke-tokens` annotation is served at this `resourceVersion` of it: the
    /// Secret's [`record::ANNOTATION_TOKENS_REVOKED`].
    revoked_at: Option<String>,
}

fn kubeconfig_secret(
    ra: &RuntimeAccess,
    name: &str,
    key: &str,
    kubeconfig: Vec<u8>,
    issued: IssuedAt,
) -> Secret {
    let owner = ra.controller_owner_ref(&()).map(|mut o| {
        o.block_owner_deletion = None;
        vec![o]
    });
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: ra.namespace(),
            labels: Some(BTreeMap::from([
                (
                    names::LABEL_MANAGED_BY.to_owned(),
                    names::MANAGED_BY_INFRASTRUCTURE_MANAGER.to_owned(),
                ),
                (
                    names::LABEL_RUNTIME_ID.to_owned(),
                    ra.spec.runtime_id.clone(),
                ),
            ])),
            annotations: Some(
                [
                    (
                        names::ANNOTATION_LAST_SYNC.to_owned(),
                        format_last_sync(issued.now),
                    ),
                    (
                        ANNOTATION_TOKEN_EXPIRATION.to_owned(),
                        format_last_sync(issued.expires),
                    ),
                    (
                        record::ANNOTATION_TOKEN_REASON.to_owned(),
                        issued.reason.to_owned(),
                    ),
                ]
                .into_iter()
                .chain(
                    issued
                        .token_id
                        .map(|id| (token::ANNOTATION_TOKEN_ID.to_owned(), id)),
                )
                .chain(
                    issued
                        .account_uid
                        .map(|uid| (token::ANNOTATION_SERVICE_ACCOUNT_UID.to_owned(), uid)),
                )
                .chain(
                    issued
                        .revoked_at
                        .map(|at| (record::ANNOTATION_TOKENS_REVOKED.to_owned(), at)),
                )
                .chain(kim_shared::access::requested_by(ra).map(|by| {
                    (
                        kim_shared::access::ANNOTATION_REQUESTED_BY.to_owned(),
                        by.to_owned(),
                    )
                }))
                .collect(),
            ),
            owner_references: owner,
            ..Default::default()
        },
        data: Some(BTreeMap::from([(key.to_owned(), ByteString(kubeconfig))])),
        type_: Some("Opaque".to_owned()),
        ..Default::default()
    }
}

fn status_with(
    ra: &RuntimeAccess,
    state: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> RuntimeAccessStatus {
    let previous = ra
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_TYPE));
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Time(now),
    };
    RuntimeAccessStatus {
        state: Some(state.to_owned()),
        conditions: vec![Condition {
            type_: CONDITION_TYPE.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: kim_shared::api::condition_message(message.to_owned()),
            last_transition_time,
            observed_generation: ra.metadata.generation,
        }],
        observed_generation: ra.metadata.generation,
        // Keep what is already known (the cleanup needs the created objects); a success
        // overwrites these fields.
        secret_ref: ra.status.as_ref().and_then(|s| s.secret_ref.clone()),
        identity: ra.status.as_ref().and_then(|s| s.identity.clone()),
        token_expiration_timestamp: ra
            .status
            .as_ref()
            .and_then(|s| s.token_expiration_timestamp.clone()),
        shoot_objects: ra
            .status
            .as_ref()
            .map(|s| s.shoot_objects.clone())
            .unwrap_or_default(),
    }
}

/// Applies the status unless it is already there.
async fn write_status(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    status: RuntimeAccessStatus,
) -> Result<(), Error> {
    // Before the comparison: after a start the stored status is the one to publish.
    reconciler
        .access_metrics
        .set_state(&key(ra), state_labels(ra, &status));
    if ra.status.as_ref() == Some(&status) {
        return Ok(());
    }
    // Its answer read as the watch reads: see the GardenerCluster reconciler's write_status.
    let requests: Api<StatusApart<RuntimeAccess>> = Api::namespaced(
        reconciler.ctx.kcp.clone(),
        &ra.namespace().unwrap_or_default(),
    );
    let patch = json!({
        "apiVersion": RuntimeAccess::api_version(&()),
        "kind": RuntimeAccess::kind(&()),
        "status": status,
    });
    requests
        .patch_status(
            &ra.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(api(format!(
            "writing status of RuntimeAccess {}",
            ra.name_any()
        )))?;
    publish_reason_change(reconciler, ra, &status).await;
    Ok(())
}

/// The state series of `ra` with `status`.
fn state_labels(ra: &RuntimeAccess, status: &RuntimeAccessStatus) -> StateLabels {
    let account = &ra.spec.service_account;
    StateLabels {
        name: ra.name_any(),
        runtimeId: kim_process::label::Text(ra.spec.runtime_id.clone()),
        serviceAccount: kim_process::label::Text(format!("{}/{}", account.namespace, account.name)),
        state: status.state.clone().unwrap_or_default(),
        reason: status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_TYPE)
            .map(|c| c.reason.clone())
            .unwrap_or_default(),
    }
}

/// One Event per change of the condition reason (messages hold names, never credentials).
async fn publish_reason_change(
    reconciler: &Reconciler,
    ra: &RuntimeAccess,
    status: &RuntimeAccessStatus,
) {
    let reason_of = |s: Option<&RuntimeAccessStatus>| {
        s.and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_TYPE))
            .map(|c| (c.reason.clone(), c.status.clone(), c.message.clone()))
    };
    let Some((reason, cond_status, message)) = reason_of(Some(status)) else {
        return;
    };
    if reason_of(ra.status.as_ref()).map(|(current, _, _)| current) == Some(reason.clone()) {
        return;
    }
    let event = Event {
        type_: if cond_status == "True" {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason,
        note: Some(message),
        action: "Reconcile".into(),
        secondary: None,
    };
    // Informational only: a failed publish must not fail the reconcile.
    if let Err(e) = reconciler
        .ctx
        .recorder
        .publish(&event, &ra.object_ref(&()))
        .await
    {
        tracing::debug!(controller = CONTROLLER, error = %e, "event not published");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kim_shared::api::runtime_access::{RoleSpec, RuntimeAccessSpec, ServiceAccountRef};

    #[test]
    fn a_token_kubeconfig_for_another_server_or_ca_bundle_is_issued_again() {
        let kubeconfig = |server: &str, ca: &str, user: &str| {
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: s\nclusters:\n- name: s\n  cluster: {{server: \"{server}\", certificate-authority-data: {ca}}}\ncontexts:\n- name: s\n  context: {{cluster: s, user: {user}}}\nusers:\n- name: {user}\n  user: {{token: t}}\n"
            )
        };
        let admin = kubeconfig("https://api.s", "T0xE", "admin");
        let secret = |kc: &str| Secret {
            data: Some(BTreeMap::from([(
                "config".to_owned(),
                ByteString(kc.as_bytes().to_vec()),
            )])),
            ..Default::default()
        };
        let same = secret(&kubeconfig("https://api.s", "T0xE", "sa"));
        assert!(!endpoint_moved(Some(&same), "config", admin.as_bytes()));
        let old_bundle = secret(&kubeconfig("https://api.s", "T0xEIE5FVw", "sa"));
        assert!(endpoint_moved(
            Some(&old_bundle),
            "config",
            admin.as_bytes()
        ));
        let moved = secret(&kubeconfig("https://api.t", "T0xE", "sa"));
        assert!(endpoint_moved(Some(&moved), "config", admin.as_bytes()));
        // Nothing to compare: the token's own schedule decides.
        assert!(!endpoint_moved(None, "config", admin.as_bytes()));
        assert!(!endpoint_moved(
            Some(&old_bundle),
            "other",
            admin.as_bytes()
        ));
        assert!(!endpoint_moved(
            Some(&secret("not: [a kubeconfig")),
            "config",
            admin.as_bytes()
        ));
        assert!(!endpoint_moved(
            Some(&old_bundle),
            "config",
            b"not: [a kubeconfig"
        ));
    }

    fn request(uid: &str) -> RuntimeAccess {
        let mut ra = RuntimeAccess::new(
            "klm",
            RuntimeAccessSpec {
                runtime_id: "rt-1".into(),
                service_account: ServiceAccountRef {
                    name: "klm".into(),
                    namespace: "apps".into(),
                },
                cluster_role: None,
                role: Some(RoleSpec {
                    namespace: "apps".into(),
                    rules: Vec::new(),
                }),
                role_ref: None,
                token_expiration_seconds: None,
                secret: None,
            },
        );
        ra.metadata.namespace = Some("kcp-system".into());
        ra.metadata.uid = Some(uid.into());
        ra
    }

    #[test]
    fn only_a_secret_written_for_this_request_is_its_own() {
        let ra = request("uid-1");
        let issued = IssuedAt {
            now: Timestamp::UNIX_EPOCH,
            expires: Timestamp::UNIX_EPOCH,
            reason: record::REASON_ISSUED,
            token_id: None,
            account_uid: None,
            revoked_at: None,
        };
        let ours = kubeconfig_secret(&ra, "klm-kubeconfig", "config", b"k".to_vec(), issued);
        assert!(secret_owned_by(&ours, &ra));
        assert!(
            !ours
                .annotations()
                .contains_key(record::ANNOTATION_TOKENS_REVOKED),
            "no revocation served"
        );
        let served = IssuedAt {
            now: Timestamp::UNIX_EPOCH,
            expires: Timestamp::UNIX_EPOCH,
            reason: record::REASON_ROTATED,
            token_id: None,
            account_uid: None,
            revoked_at: Some("41".to_owned()),
        };
        let marked = kubeconfig_secret(&ra, "klm-kubeconfig", "config", b"k".to_vec(), served);
        assert_eq!(
            marked
                .annotations()
                .get(record::ANNOTATION_TOKENS_REVOKED)
                .map(String::as_str),
            Some("41")
        );
        assert!(
            !secret_owned_by(&ours, &request("uid-2")),
            "a later request of the same name"
        );
        let mut unlabelled = ours.clone();
        unlabelled.metadata.labels = None;
        assert!(!secret_owned_by(&unlabelled, &ra));
        let mut foreign = ours.clone();
        foreign.metadata.owner_references = None;
        assert!(
            !secret_owned_by(&foreign, &ra),
            "labelled alone is not enough: credentials can carry any label"
        );
        assert!(!secret_owned_by(&Secret::default(), &ra));
    }

    #[test]
    fn a_pass_cut_off_says_so_and_keeps_what_the_status_lists() {
        let mut ra = request("uid-1");
        let listed = vec![ShootObjectRef {
            kind: "ServiceAccount".into(),
            name: "klm".into(),
            namespace: Some("apps".into()),
        }];
        ra.status = Some(RuntimeAccessStatus {
            state: Some("Ready".into()),
            identity: Some("system:serviceaccount:apps:klm".into()),
            shoot_objects: listed.clone(),
            ..RuntimeAccessStatus::default()
        });
        let status = timed_out_status(
            &ra,
            "Deleting",
            Duration::from_secs(120),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(status.state.as_deref(), Some("Deleting"));
        let condition = &status.conditions[0];
        assert_eq!(
            (condition.reason.as_str(), condition.status.as_str()),
            (REASON_RECONCILE_TIMED_OUT, "False")
        );
        assert!(
            condition.message.contains("longer than 120s") && condition.message.contains("rt-1"),
            "{}",
            condition.message
        );
        assert_eq!(
            status.shoot_objects, listed,
            "the access review still sees them"
        );
        assert_eq!(
            status.identity.as_deref(),
            Some("system:serviceaccount:apps:klm")
        );
    }
}
