//! One reconcile of a GardenerCluster: a thin async shell around the pure decisions in
//! [`super::rotation`], [`super::secret`] and [`super::status`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kim_shared::api::{GardenerCluster, Unreadable};
use kim_shared::names;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::Instrument;

use super::CONTROLLER;
use super::gardener::{IssueError, issue_admin_kubeconfig};
use super::metrics::{ClusterStateLabels, ExpirationLabels, KubeconfigMetrics, go_float};
use super::rotation::{self, RotationDecision, RotationPolicy};
use super::secret::{self as kubeconfig_secret, SecretLocation};
use super::status::{self, DesiredStatus, Reason};
use crate::Context;
use crate::gardener::limit::{WriteLimit, WriteLimitSettings, WriteOutcome};
use crate::records::{Backoff, Records, key};
use crate::runtime::classify::ApiErrorKind;
use crate::runtime::shoot_cache::ClusterFacts;
use crate::stored::StatusApart;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kim_shared::gardener::Shoot;
use kube::core::PartialObjectMeta;

/// Field manager of everything this reconciler applies.
pub const FIELD_MANAGER: &str = "kim-gardener-cluster";

/// Per-object backoff after a failed reconcile: 1 s, 2 s, 4 s, 8 s, then 15 s, each jittered (a failure
/// here is a Secret or one Gardener call, cheap to retry, so a recovery is noticed soon).
pub const BACKOFF: Backoff = Backoff {
    first: Duration::from_secs(1),
    cap: Duration::from_secs(15),
};

/// Look again at a Secret of the same name that is not this GardenerCluster's.
const SECRET_NOT_OWNED_RECHECK: Duration = Duration::from_secs(60);

/// How often a GardenerCluster whose Shoot does not exist, or is another runtime's, asks again
/// (one request).
const REFUSED_SHOOT_RETRY: Duration = Duration::from_secs(300);

/// What the reconciler remembers of one GardenerCluster between reconciles.
#[derive(Default)]
struct ClusterRecord {
    /// resourceVersion of the GardenerCluster whose force annotation was already served: a
    /// reconcile that still sees that version (the watch cache lags behind our own removal of
    /// the annotation) must not rotate a second time.
    forced_served: Option<String>,
    /// The condition reason last published as an Event: a reconcile that still sees the status
    /// from before our own write (the watch cache lags) must not publish the same Event again.
    published_reason: Option<String>,
}

/// A slot of `limit` if one frees within `wait`.
async fn slot_within(
    limit: &Arc<WriteLimit>,
    wait: std::time::Duration,
) -> Option<crate::gardener::limit::WritePermit> {
    tokio::time::timeout(wait, limit.acquire()).await.ok()
}

/// How long a GardenerCluster that found no `adminkubeconfig` slot, or the Shoot cache not
/// filled yet, waits before it looks again (jittered between half and all of it).
const LOOK_AGAIN: crate::records::Backoff = crate::records::Backoff {
    first: std::time::Duration::from_secs(5),
    cap: std::time::Duration::from_secs(5),
};

/// `adminkubeconfig` requests in flight: start at 8; an answer counts as slow only after 10 s, a
/// third of the write timeout, since signing takes a few seconds on a busy gardener-apiserver
/// and only timeouts or "try later" answers mean it is overloaded.
const SIGNING_LIMIT: WriteLimitSettings = WriteLimitSettings {
    initial: 8.0,
    min: 1.0,
    max: 64.0,
    slow: std::time::Duration::from_secs(10),
};

/// Whose a Shoot is, as [`Reconciler::owner_of`] finds it.
enum ShootOwner {
    /// The GardenerCluster's own runtime's (or an unannotated one).
    This,
    /// Another runtime's: its ID.
    Another(String),
    /// Gardener has no such Shoot.
    Missing,
    /// The Shoot cache is not filled yet.
    NotKnownYet,
}

/// State shared by all reconciles of this controller.
pub struct Reconciler {
    ctx: Arc<Context>,
    policy: RotationPolicy,
    metrics: Arc<KubeconfigMetrics>,
    records: Records<ClusterRecord>,
    /// `adminkubeconfig` requests in flight: gardener-apiserver signs each on its own CPUs, and
    /// a request given up on is still signed.
    signing: Arc<WriteLimit>,
    /// The Runtime reconciler's cache of the project's Shoots.
    shoots: crate::runtime::shoot_cache::ShootCache,
    /// Resolves once that cache holds Gardener's first list (shared: kube's store wakes one
    /// waiter only).
    shoots_ready: Shared<BoxFuture<'static, bool>>,
    /// When the Shoots' CAs were rotated, as the Shoot watch delivers it.
    rotations: ClusterFacts,
}

/// A reconcile that failed; messages name the object and never contain secrets.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The KCP API failed while reading or writing `what`.
    #[error("{what}: {source}")]
    Kcp {
        /// What was being done.
        what: String,
        /// The API error.
        source: kube::Error,
    },
    /// Gardener did not issue a kubeconfig.
    #[error(transparent)]
    Gardener(#[from] IssueError),
    /// Adding or removing the finalizer failed.
    #[error("finalizer: {0}")]
    Finalizer(String),
    /// The stored GardenerCluster does not read with our types.
    #[error("the stored GardenerCluster cannot be read: {0}")]
    Unreadable(Unreadable),
    /// Reading the Shoot from Gardener failed.
    #[error("reading Shoot {shoot} from Gardener: {source}")]
    ShootRead {
        /// The shoot.
        shoot: String,
        /// The API error.
        source: kube::Error,
    },
    /// The reconcile took longer than `--gardener-ctrl-reconcilation-timeout`.
    #[error("reconcile took longer than {0:?} (--gardener-ctrl-reconcilation-timeout)")]
    Timeout(Duration),
}

impl crate::metrics::ResultLabel for Error {
    fn result_label(&self) -> &'static str {
        match self {
            Self::Unreadable(_) => crate::metrics::RESULT_UNREADABLE,
            _ => "error",
        }
    }
}

fn kcp(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Kcp { what, source }
}

impl Reconciler {
    /// A reconciler with the given rotation policy.
    pub fn new(
        ctx: Arc<Context>,
        policy: RotationPolicy,
        metrics: Arc<KubeconfigMetrics>,
        shoots: crate::runtime::shoot_cache::ShootCache,
        rotations: ClusterFacts,
    ) -> Self {
        Self {
            records: Records::default(),
            ctx,
            policy,
            metrics,
            signing: WriteLimit::new(SIGNING_LIMIT),
            shoots_ready: shoots.filled(),
            shoots,
            rotations,
        }
    }

    /// Whose Shoot `shoot` is: `Another(id)` when its runtime-id annotation names a runtime
    /// other than `runtime_id`. Whoever may write a GardenerCluster chooses the Shoot it names:
    /// without this, one could have another runtime's admin kubeconfig written into a Secret it
    /// reads. Read from the Runtime reconciler's Shoot cache once it is filled (a restart must
    /// not issue what was refused before), else from Gardener: a Shoot too new for the cache.
    /// A Shoot without the annotation is a runtime's from before the infrastructure manager,
    /// as the Runtime reconciler takes it.
    /// Waits for the cache until `deadline` at most.
    async fn owner_of(
        &self,
        shoot: &str,
        runtime_id: &str,
        deadline: tokio::time::Instant,
    ) -> Result<ShootOwner, Error> {
        let annotated = |meta: &ObjectMeta| {
            crate::runtime::delete::owning_runtime(meta)
                .filter(|owner| *owner != runtime_id)
                .map_or(ShootOwner::This, |owner| {
                    ShootOwner::Another(owner.to_owned())
                })
        };
        if !tokio::time::timeout_at(deadline, self.shoots_ready.clone())
            .await
            .unwrap_or(false)
        {
            return Ok(ShootOwner::NotKnownYet);
        }
        let key = ObjectRef::new(shoot).within(&self.ctx.gardener_namespace);
        if let Some(cached) = self.shoots.get(&key) {
            return Ok(annotated(&cached.metadata));
        }
        let shoots: Api<PartialObjectMeta<Shoot>> =
            Api::namespaced(self.ctx.gardener.clone(), &self.ctx.gardener_namespace);
        match shoots.get_metadata_opt(shoot).await {
            Ok(Some(live)) => Ok(annotated(&live.metadata)),
            Ok(None) => Ok(ShootOwner::Missing),
            Err(source) => Err(Error::ShootRead {
                shoot: shoot.to_owned(),
                source,
            }),
        }
    }

    /// Drops what is kept about the GardenerCluster `key`, which is gone: its record and metric
    /// series.
    fn forget_key(&self, key: &str) {
        self.metrics.remove(key);
        self.records.forget(key);
    }
}

impl crate::watch::Forget<StatusApart<GardenerCluster>> for Reconciler {
    fn forget(&self, gc: &StatusApart<GardenerCluster>) {
        self.forget_key(&key(gc));
    }

    fn forget_missing(&self, present: &[Arc<StatusApart<GardenerCluster>>]) {
        let mut kept = self.records.keys();
        kept.extend(self.metrics.keys());
        crate::watch::forget_absent(present, kept, |key| self.forget_key(key));
    }
}

impl Reconciler {
    /// Ends the hold of the GardenerCluster `r` after a failure: something it depends on
    /// changed, and the pass that asks for runs now.
    pub fn release(&self, r: &ObjectRef<StatusApart<GardenerCluster>>) {
        self.records.release(&format!(
            "{}/{}",
            r.namespace.as_deref().unwrap_or_default(),
            r.name
        ));
    }

    /// The GardenerClusters whose last reconcile failed, to retry now that Gardener answers
    /// again (their failure count, and so their next backoff, stays until one succeeds).
    pub fn failing(&self) -> Vec<ObjectRef<StatusApart<GardenerCluster>>> {
        self.records
            .select(|failures, _| failures > 0)
            .iter()
            .filter_map(|key| key.split_once('/'))
            .map(|(ns, name)| ObjectRef::new(name).within(ns))
            .collect()
    }
}

/// Entry point for the controller: the finalizer wraps apply and cleanup. A GardenerCluster
/// whose status does not read is not applied (its reconcile fails naming the field) but is
/// still cleaned up when deleted: cleanup reads only its metadata and spec.
pub async fn reconcile(
    gc: Arc<StatusApart<GardenerCluster>>,
    reconciler: Arc<Reconciler>,
) -> Result<Action, Error> {
    let record_key = key(&*gc);
    // After a failure the watch event of its own status write (whose message may quote the
    // failure, and read differently each time) must not start the next attempt before the
    // backoff: each attempt may ask Gardener for an admin kubeconfig.
    if let Some(left) = reconciler
        .records
        .begin_pass(&record_key, crate::records::inputs(&gc.metadata))
    {
        return Ok(Action::requeue(left));
    }
    let started = Instant::now();
    let namespace = gc.namespace().unwrap_or_default();
    let api: Api<StatusApart<GardenerCluster>> =
        Api::namespaced(reconciler.ctx.kcp.clone(), &namespace);
    let timeout = reconciler.ctx.settings.gardener_cluster.reconcile_timeout;
    // Every line of this reconcile carries the cluster's identity (never its kubeconfig).
    let span = tracing::info_span!(
        "reconcile",
        controller = CONTROLLER,
        namespace = %namespace,
        object = %gc.name_any(),
        runtime_id = gc.labels().get(names::LABEL_RUNTIME_ID).map(String::as_str).unwrap_or_default(),
        shoot = %gc.spec.shoot.name,
    );
    let work = finalizer(&api, super::FINALIZER, gc, |event| async {
        match event {
            finalizer::Event::Apply(stored) => {
                let failures = reconciler.records.failures(&record_key);
                match crate::stored::object_or_report(&stored, &reconciler.ctx.recorder, failures)
                    .await
                {
                    Ok(gc) => apply(&reconciler, &gc, Timestamp::now()).await,
                    Err(why) => Err(Error::Unreadable(why)),
                }
            }
            finalizer::Event::Cleanup(stored) => {
                cleanup(&reconciler, &stored.without_status()).await
            }
        }
    });
    let result = match tokio::time::timeout(timeout, work.instrument(span)).await {
        Err(_) => Err(Error::Timeout(timeout)),
        Ok(outcome) => finalizer_result(outcome),
    };
    reconciler
        .ctx
        .metrics
        .observe_reconcile_result(CONTROLLER, &result, started.elapsed());
    if result.is_ok() {
        reconciler.records.succeeded(&record_key);
    }
    result
}

/// [`crate::finalizing::finalizer_result`] for GardenerClusters.
fn finalizer_result(outcome: Result<Action, finalizer::Error<Error>>) -> Result<Action, Error> {
    crate::finalizing::finalizer_result(outcome, CONTROLLER, Error::Finalizer)
}

/// Retry policy: log (at warn: the failure is retried and already in the status) and back off.
pub fn error_policy(
    gc: Arc<StatusApart<GardenerCluster>>,
    error: &Error,
    reconciler: Arc<Reconciler>,
) -> Action {
    // Jittered: GardenerClusters that failed together (Gardener down) do not come back together.
    let record_key = key(&*gc);
    let delay = reconciler.records.retry_in(&record_key, &BACKOFF);
    reconciler
        .records
        .hold(&record_key, delay, crate::records::inputs(&gc.metadata));
    tracing::warn!(
        controller = CONTROLLER,
        namespace = gc.namespace().unwrap_or_default(),
        object = gc.name_any(),
        runtime_id = gc.labels().get(names::LABEL_RUNTIME_ID).map(String::as_str).unwrap_or_default(),
        error = %crate::redact::logged(error),
        retry_in = ?delay,
        "reconcile failed; retrying"
    );
    Action::requeue(delay)
}

/// Ensures the Secret holds a valid kubeconfig; talks to Gardener only when a rotation is due.
async fn apply(
    reconciler: &Reconciler,
    gc: &GardenerCluster,
    now: Timestamp,
) -> Result<Action, Error> {
    let loc = SecretLocation::of(gc);
    let secrets: Api<Secret> = Api::namespaced(reconciler.ctx.kcp.clone(), &loc.namespace);
    let existing = match secrets.get_opt(&loc.name).await {
        Ok(s) => s,
        Err(e) => {
            let msg = e.to_string();
            write_status(
                reconciler,
                gc,
                status::desired(
                    conditions(gc),
                    Reason::FailedToCheckSecret,
                    Some(&msg),
                    gc.metadata.generation,
                    now,
                ),
            )
            .await?;
            return Err(kcp(format!(
                "reading Secret {}/{}",
                loc.namespace, loc.name
            ))(e));
        }
    };
    if existing
        .as_ref()
        .is_some_and(|s| !kubeconfig_secret::belongs_to(s, gc))
    {
        let msg = format!(
            "Secret {}/{} exists and is not this GardenerCluster's kubeconfig Secret (label {}={} and an owner reference to it, or upstream's {} or {} label naming it); it is neither written nor deleted: set spec.kubeconfig.secret.name to a Secret that does not exist",
            loc.namespace,
            loc.name,
            names::LABEL_MANAGED_BY,
            names::MANAGED_BY_INFRASTRUCTURE_MANAGER,
            names::LABEL_CLUSTER_NAME,
            names::LABEL_RUNTIME_ID,
        );
        tracing::warn!(controller = CONTROLLER, object = gc.name_any(), secret = %loc.name, "Secret not owned by this GardenerCluster; left alone");
        write_status(
            reconciler,
            gc,
            status::desired(
                conditions(gc),
                Reason::SecretNotOwned,
                Some(&msg),
                gc.metadata.generation,
                now,
            ),
        )
        .await?;
        return Ok(Action::requeue(SECRET_NOT_OWNED_RECHECK));
    }
    // The kubeconfig KCP components use expires as its last-sync says, whatever this pass
    // decides: a process that starts while rotations fail has no other moment to report it.
    // (A Secret another GardenerCluster owns is that one's to report: the series are keyed by
    // their labels, and two writers of one would remove each other's.)
    if let Some(secret) = &existing {
        record_expiration(reconciler, gc, secret);
    }
    let forced = rotation::force_pending(
        gc.annotations()
            .contains_key(names::ANNOTATION_FORCE_KUBECONFIG_ROTATION),
        gc.resource_version().as_deref(),
        served_force(reconciler, gc, existing.as_ref()).as_deref(),
    );
    let state = kubeconfig_secret::state(existing.as_ref(), &loc.key);
    let rotate_after = rotation::rotate_after_issued(
        &reconciler.policy,
        &gc.name_any(),
        kubeconfig_secret::annotation(existing.as_ref(), names::ANNOTATION_LAST_SYNC)
            .and_then(rotation::parse_last_sync),
        kubeconfig_secret::valid_until(existing.as_ref()),
    );
    // Nothing before the Shoot watch delivered the Shoot: it sends this GardenerCluster again
    // when it sees a rotation.
    let new_cas_since = reconciler.rotations.new_cas_since(&gc.spec.shoot.name);
    match rotation::decide(rotate_after, state, forced, new_cas_since, now) {
        RotationDecision::Wait { requeue_after } => {
            if gc
                .annotations()
                .contains_key(names::ANNOTATION_FORCE_KUBECONFIG_ROTATION)
            {
                // Served already, but the removal may have failed: remove it (again). A no-op
                // when it is gone and this was only a stale read.
                remove_force_annotation(reconciler, gc).await?;
            }
            if let Some(secret) = &existing {
                adopt(gc, secret, &secrets).await?;
            }
            write_status(
                reconciler,
                gc,
                status::unchanged(conditions(gc), gc.metadata.generation, now),
            )
            .await?;
            Ok(Action::requeue(requeue_after))
        }
        RotationDecision::Rotate(cause) => {
            // The waits before the adminkubeconfig request (the Shoot cache, a slot) count
            // against the reconcile's timeout: waited for long, the timeout could cut off the
            // request after Gardener signed, and the next attempt would ask for another
            // kubeconfig. So both together wait a quarter of it at most, which leaves the
            // request its whole write timeout at the defaults (15 s of 60 s), and the cluster
            // looks again soon.
            let waits_end = tokio::time::Instant::now()
                + reconciler.ctx.settings.gardener_cluster.reconcile_timeout / 4;
            let shoot = gc.spec.shoot.name.clone();
            let refusal = match reconciler
                .owner_of(&shoot, &gc.name_any(), waits_end)
                .await?
            {
                ShootOwner::This => None,
                ShootOwner::Another(owner) => {
                    tracing::warn!(controller = CONTROLLER, object = gc.name_any(), shoot = %shoot, owner = %owner, "refusing the kubeconfig of another runtime's shoot");
                    Some(format!(
                        "Shoot {shoot} belongs to runtime {owner} (annotation {}), not to {}: a GardenerCluster gets the kubeconfig of its own runtime's Shoot only",
                        names::SHOOT_ANNOTATION_RUNTIME_ID,
                        gc.name_any()
                    ))
                }
                ShootOwner::Missing => Some(format!("Shoot {shoot} not found in Gardener")),
                ShootOwner::NotKnownYet => {
                    tracing::debug!(
                        controller = CONTROLLER,
                        object = gc.name_any(),
                        "the Shoot cache is not filled yet; looking again"
                    );
                    return Ok(Action::requeue(LOOK_AGAIN.random_delay(1)));
                }
            };
            if let Some(msg) = refusal {
                failed_to_get_kubeconfig(reconciler, gc, &msg, now).await?;
                return Ok(Action::requeue(REFUSED_SHOOT_RETRY));
            }
            let wait = waits_end.saturating_duration_since(tokio::time::Instant::now());
            let Some(permit) = slot_within(&reconciler.signing, wait).await else {
                tracing::debug!(waited = ?wait, "no adminkubeconfig slot free; looking again");
                return Ok(Action::requeue(LOOK_AGAIN.random_delay(1)));
            };
            let sent = std::time::Instant::now();
            let (issued, answered_in) =
                crate::gardener::client::answer_time(issue_admin_kubeconfig(
                    &reconciler.ctx.gardener,
                    &reconciler.ctx.gardener_namespace,
                    &shoot,
                    reconciler.policy.expiration_seconds(),
                ))
                .await;
            permit.finish(match &issued {
                Ok(_) => WriteOutcome::Answered(answered_in.unwrap_or_else(|| sent.elapsed())),
                Err(IssueError::Refused { source, .. })
                    if crate::runtime::classify::classify(source) == ApiErrorKind::Busy =>
                {
                    reconciler
                        .ctx
                        .metrics
                        .count_gardener_busy("adminkubeconfig");
                    WriteOutcome::Busy
                }
                Err(_) => WriteOutcome::Other,
            });
            let issued = match issued {
                Ok(k) => k,
                Err(e) => {
                    failed_to_get_kubeconfig(reconciler, gc, &e.to_string(), now).await?;
                    if e.is_not_found() {
                        // The Shoot is gone, or not there yet: its Runtime may make it anew
                        // (no event of ours tells), so look again now and then.
                        tracing::info!(controller = CONTROLLER, object = gc.name_any(), shoot = %shoot, retry_in = ?REFUSED_SHOOT_RETRY, "shoot not found");
                        return Ok(Action::requeue(REFUSED_SHOOT_RETRY));
                    }
                    return Err(e.into());
                }
            };
            // A forced rotation served before (its annotation's removal failed) keeps its
            // marker through this rotation for another cause: without it, the next leader would
            // serve it once more (admin kubeconfigs cannot be revoked).
            let annotated = gc
                .annotations()
                .contains_key(names::ANNOTATION_FORCE_KUBECONFIG_ROTATION);
            let served = if forced {
                gc.resource_version()
            } else {
                served_force(reconciler, gc, existing.as_ref()).filter(|_| annotated)
            };
            let issued_until = issued.expires;
            let mut desired = kubeconfig_secret::desired(
                gc,
                issued.kubeconfig,
                now,
                kubeconfig_secret::Issued {
                    valid_until: issued.expires,
                    force_served: served.as_deref(),
                },
            );
            // Server-side apply replaces key and last-sync in place, so the key is present at
            // every moment (upstream blanked it on a forced rotation). Only into the Secret
            // checked above (its resourceVersion is the precondition) or a new one (a create,
            // which fails if one appeared meanwhile): never into a Secret not checked.
            let written = match existing
                .as_ref()
                .and_then(|s| s.metadata.resource_version.clone())
            {
                Some(rv) => {
                    desired.metadata.resource_version = Some(rv);
                    let params = PatchParams::apply(FIELD_MANAGER).force();
                    secrets
                        .patch(&loc.name, &params, &Patch::Apply(&desired))
                        .await
                }
                None => {
                    let params = kube::api::PostParams {
                        field_manager: Some(FIELD_MANAGER.to_owned()),
                        ..Default::default()
                    };
                    secrets.create(&params, &desired).await
                }
            };
            let reason = if cause.replaces_existing() {
                Reason::SecretRotated
            } else {
                Reason::SecretCreated
            };
            let written = match written {
                Ok(s) => s,
                Err(e) => {
                    // The answer may quote the kubeconfig the write carried, or the one it
                    // replaces (an admission webhook's message, `object` or `oldObject`): the
                    // status and the log get neither.
                    let carried: Vec<&[u8]> = crate::redact::data_values(desired.data.as_ref())
                        .chain(crate::redact::data_values(
                            existing.as_ref().and_then(|s| s.data.as_ref()),
                        ))
                        .collect();
                    let e = crate::redact::api_error(e, &carried);
                    let failed = if existing.is_some() {
                        Reason::FailedToUpdateSecret
                    } else {
                        Reason::FailedToCreateSecret
                    };
                    let msg = e.to_string();
                    write_status(
                        reconciler,
                        gc,
                        status::desired(
                            conditions(gc),
                            failed,
                            Some(&msg),
                            gc.metadata.generation,
                            now,
                        ),
                    )
                    .await?;
                    return Err(kcp(format!(
                        "writing Secret {}/{}",
                        loc.namespace, loc.name
                    ))(e));
                }
            };
            if let Some(expires) = issued.expires
                && expires
                    .checked_add(jiff::SignedDuration::from_secs(60))
                    .unwrap_or(expires)
                    < rotation::expires_at(&reconciler.policy, now, None)
            {
                // Gardener caps the validity (--shoot-admin-kubeconfig-max-expiration, 24h by
                // default); the rotation follows the validity issued.
                tracing::warn!(
                    controller = CONTROLLER,
                    object = gc.name_any(),
                    expires = %expires,
                    "Gardener issued a shorter validity than --kubeconfig-expiration-time; rotating by the validity issued; lower the flag to Gardener's maximum"
                );
            }
            tracing::info!(
                controller = CONTROLLER,
                object = gc.name_any(),
                shoot = %shoot,
                secret = %loc.name,
                cause = ?cause,
                expires = ?issued.expires,
                "kubeconfig written"
            );
            record_expiration(reconciler, gc, &written);
            if forced {
                if let Some(rv) = gc.resource_version() {
                    reconciler
                        .records
                        .with(&key(gc), |record| record.forced_served = Some(rv));
                }
                remove_force_annotation(reconciler, gc).await?;
            } else if annotated && let Err(e) = remove_force_annotation(reconciler, gc).await {
                // Served before, and the marker kept: the next pass removes it again; this
                // rotation's status is written all the same.
                tracing::info!(controller = CONTROLLER, object = %gc.name_any(), error = %e, "the served force annotation was not removed; the next pass tries again");
            }
            write_status(
                reconciler,
                gc,
                status::desired(conditions(gc), reason, None, gc.metadata.generation, now),
            )
            .await?;
            Ok(Action::requeue(rotation::rotate_after_issued(
                &reconciler.policy,
                &gc.name_any(),
                Some(now),
                issued_until,
            )))
        }
    }
}

/// Deletes the Secret (if it is ours) and the metric series; the finalizer goes after this.
async fn cleanup(reconciler: &Reconciler, gc: &GardenerCluster) -> Result<Action, Error> {
    let loc = SecretLocation::of(gc);
    let secrets: Api<Secret> = Api::namespaced(reconciler.ctx.kcp.clone(), &loc.namespace);
    let existing = secrets.get_opt(&loc.name).await.map_err(kcp(format!(
        "reading Secret {}/{}",
        loc.namespace, loc.name
    )))?;
    match existing {
        Some(secret) if kubeconfig_secret::belongs_to(&secret, gc) => {
            // Conditional on the UID that was checked: a Secret replaced meanwhile stays.
            let dp = crate::finalizing::only_uid(secret.metadata.uid.clone());
            if let Err(e) = secrets.delete(&loc.name, &dp).await {
                let not_found = matches!(&e, kube::Error::Api(s) if s.code == 404 || s.code == 409);
                if !not_found {
                    let e = crate::redact::secret_error(e, secret.data.as_ref());
                    let msg = e.to_string();
                    write_status(
                        reconciler,
                        gc,
                        status::desired(
                            conditions(gc),
                            Reason::FailedToDeleteSecret,
                            Some(&msg),
                            gc.metadata.generation,
                            Timestamp::now(),
                        ),
                    )
                    .await?;
                    return Err(kcp(format!(
                        "deleting Secret {}/{}",
                        loc.namespace, loc.name
                    ))(e));
                }
            }
            tracing::info!(controller = CONTROLLER, object = gc.name_any(), secret = %loc.name, "kubeconfig Secret deleted with its GardenerCluster");
        }
        Some(_) => {
            tracing::warn!(controller = CONTROLLER, object = gc.name_any(), secret = %loc.name, "Secret not labelled for this GardenerCluster; left in place");
        }
        None => {}
    }
    reconciler.forget_key(&key(gc));
    Ok(Action::await_change())
}

/// Gives a Secret written by upstream KIM (or before a namespace change) our owner reference
/// and labels, once. Cheap no-op when already in place.
async fn adopt(gc: &GardenerCluster, secret: &Secret, secrets: &Api<Secret>) -> Result<(), Error> {
    let loc = SecretLocation::of(gc);
    let Some(owner) = kubeconfig_secret::owner_reference(gc, &loc.namespace) else {
        return Ok(());
    };
    let has_owner = secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == owner.uid);
    let has_label = secret
        .labels()
        .get(names::LABEL_MANAGED_BY)
        .map(String::as_str)
        == Some(names::MANAGED_BY_INFRASTRUCTURE_MANAGER);
    if has_owner && has_label {
        return Ok(());
    }
    // A merge patch of metadata only: data and last-sync stay as they are. A merge patch
    // replaces lists whole, so the list is the Secret's own plus ours, and the read's
    // resourceVersion makes a concurrent change fail with 409 (retried) instead of losing a
    // reference written meanwhile.
    let mut owners = secret.metadata.owner_references.clone().unwrap_or_default();
    if !has_owner {
        owners.push(owner);
    }
    let patch = json!({
        "metadata": {
            "resourceVersion": secret.metadata.resource_version,
            "ownerReferences": owners,
            "labels": {
                names::LABEL_MANAGED_BY: names::MANAGED_BY_INFRASTRUCTURE_MANAGER,
                names::LABEL_CLUSTER_NAME: gc.name_any(),
            }
        }
    });
    secrets
        .patch(&loc.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| crate::redact::secret_error(e, secret.data.as_ref()))
        .map_err(kcp(format!(
            "adopting Secret {}/{}",
            loc.namespace, loc.name
        )))?;
    Ok(())
}

/// Removes the force-rotation annotation from the GardenerCluster as read, the rotation that
/// serves it done. The resourceVersion makes the removal conditional. When the GardenerCluster
/// changed since (a label, a status write), the annotation still on it is the same request (it
/// was never removed, so it was never asked for again), and it is removed with the version read
/// now: left, the next pass would see it on a new version and sign another admin kubeconfig,
/// which cannot be revoked.
async fn remove_force_annotation(
    reconciler: &Reconciler,
    gc: &GardenerCluster,
) -> Result<(), Error> {
    let api: Api<StatusApart<GardenerCluster>> = Api::namespaced(
        reconciler.ctx.kcp.clone(),
        &gc.namespace().unwrap_or_default(),
    );
    let mut version = gc.resource_version();
    // Changed concurrently more often than this: the next pass signs again, rather than this
    // one spinning on a GardenerCluster someone keeps writing.
    for _ in 0..REMOVAL_ATTEMPTS {
        let patch = json!({"metadata": {
            "annotations": {names::ANNOTATION_FORCE_KUBECONFIG_ROTATION: null},
            "resourceVersion": version,
        }});
        match api
            .patch(
                &gc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if crate::runtime::classify::classify(&e) == ApiErrorKind::Conflict => {
                let live = api
                    .get_metadata_opt(&gc.name_any())
                    .await
                    .map_err(kcp(format!("reading GardenerCluster {}", gc.name_any())))?;
                match live.filter(|l| {
                    l.annotations()
                        .contains_key(names::ANNOTATION_FORCE_KUBECONFIG_ROTATION)
                }) {
                    Some(live) => version = live.resource_version(),
                    None => return Ok(()),
                }
            }
            Err(e) => {
                return Err(kcp(format!(
                    "removing {} from GardenerCluster {}",
                    names::ANNOTATION_FORCE_KUBECONFIG_ROTATION,
                    gc.name_any()
                ))(e));
            }
        }
    }
    Ok(())
}

/// How often the removal of the force-rotation annotation is tried against a GardenerCluster
/// that changes meanwhile.
const REMOVAL_ATTEMPTS: usize = 3;

/// Applies `want` to the status subresource unless it is already there, publishes one Event
/// when the reason changes, and refreshes the state metric.
/// Writes the status of a GardenerCluster that got no kubeconfig, saying why (`msg`).
async fn failed_to_get_kubeconfig(
    reconciler: &Reconciler,
    gc: &GardenerCluster,
    msg: &str,
    now: Timestamp,
) -> Result<(), Error> {
    let want = status::desired(
        conditions(gc),
        Reason::FailedToGetKubeconfig,
        Some(msg),
        gc.metadata.generation,
        now,
    );
    write_status(reconciler, gc, want).await
}

async fn write_status(
    reconciler: &Reconciler,
    gc: &GardenerCluster,
    want: DesiredStatus,
) -> Result<(), Error> {
    let current = conditions(gc);
    let state = gc.status.as_ref().and_then(|s| s.state.as_deref());
    record_state(reconciler, gc, &want);
    if status::is_current(state, current, &want) {
        return Ok(());
    }
    let previous_reason = reconciler
        .records
        .read(&key(gc), |record| record.published_reason.clone())
        .flatten()
        .or_else(|| {
            current
                .iter()
                .find(|c| c.type_ == status::CONDITION_TYPE)
                .map(|c| c.reason.clone())
        });
    // Its answer read as the watch reads: a status (of another writer) that does not read must
    // not fail a write that succeeded.
    let api: Api<StatusApart<GardenerCluster>> = Api::namespaced(
        reconciler.ctx.kcp.clone(),
        &gc.namespace().unwrap_or_default(),
    );
    let patch = json!({
        "apiVersion": GardenerCluster::api_version(&()),
        "kind": GardenerCluster::kind(&()),
        "status": { "state": want.state, "conditions": [want.condition] }
    });
    api.patch_status(
        &gc.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(kcp(format!(
        "writing status of GardenerCluster {}",
        gc.name_any()
    )))?;
    if previous_reason.as_deref() != Some(want.condition.reason.as_str()) {
        let event = Event {
            type_: if want.condition.status == "True" {
                EventType::Normal
            } else {
                EventType::Warning
            },
            reason: want.condition.reason.clone(),
            note: Some(want.condition.message.clone()),
            action: "Reconcile".into(),
            secondary: None,
        };
        let reason = want.condition.reason.clone();
        reconciler
            .records
            .with(&key(gc), |record| record.published_reason = Some(reason));
        // An Event is informational: failing to publish it must not fail the reconcile.
        if let Err(e) = reconciler
            .ctx
            .recorder
            .publish(&event, &gc.object_ref(&()))
            .await
        {
            tracing::debug!(controller = CONTROLLER, object = gc.name_any(), error = %e, "event not published");
        }
    }
    Ok(())
}

/// The GardenerCluster `resourceVersion` whose forced rotation was served: by this replica, or
/// as the kubeconfig Secret says (written by the replica that led before).
fn served_force(
    reconciler: &Reconciler,
    gc: &GardenerCluster,
    secret: Option<&Secret>,
) -> Option<String> {
    reconciler
        .records
        .read(&key(gc), |record| record.forced_served.clone())
        .flatten()
        .or_else(|| {
            kubeconfig_secret::annotation(secret, names::ANNOTATION_FORCE_SERVED).map(str::to_owned)
        })
}

fn conditions(gc: &GardenerCluster) -> &[Condition] {
    gc.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

fn record_state(reconciler: &Reconciler, gc: &GardenerCluster, want: &DesiredStatus) {
    // Upstream sets the series only for GardenerClusters with a runtime-id label.
    let Some(runtime_id) = gc.labels().get(names::LABEL_RUNTIME_ID) else {
        return;
    };
    reconciler.metrics.set_state(
        &key(gc),
        ClusterStateLabels {
            runtimeId: runtime_id.clone(),
            shoot: gc
                .labels()
                .get(names::LABEL_SHOOT_NAME)
                .cloned()
                .unwrap_or_default(),
            state: want.state.to_owned(),
            reason: want.condition.reason.clone(),
        },
    );
}

fn record_expiration(reconciler: &Reconciler, gc: &GardenerCluster, secret: &Secret) {
    let Some((runtime_id, shoot)) = kubeconfig_secret::metric_ids(secret.metadata.labels.as_ref())
    else {
        return;
    };
    let Some(last_sync) = secret
        .annotations()
        .get(names::ANNOTATION_LAST_SYNC)
        .and_then(|raw| rotation::parse_last_sync(raw))
    else {
        return;
    };
    let policy = &reconciler.policy;
    let expires_at = rotation::expires_at(
        policy,
        last_sync,
        kubeconfig_secret::valid_until(Some(secret)),
    );
    // The validity it really has, and the rotation period as the same share of it, when
    // Gardener issued less than asked (the labels then agree with `expires`).
    let validity = std::time::Duration::try_from(expires_at.duration_since(last_sync))
        .unwrap_or_default()
        .min(policy.expiration());
    let rotation = policy
        .rotation_period()
        .mul_f64(validity.as_secs_f64() / policy.expiration().as_secs_f64());
    let expires = expires_at.as_second();
    reconciler.metrics.set_expiration(
        &key(gc),
        ExpirationLabels {
            runtimeId: runtime_id,
            shoot,
            expires: expires.to_string(),
            rotationDuration: go_float(rotation.as_secs()),
            expirationDuration: go_float(validity.as_secs()),
        },
        expires,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("gone", if code == 404 { "NotFound" } else { "Conflict" })
                .with_code(code)
                .boxed(),
        )
    }

    /// A signing slot is waited for at most `wait`; one freed within it is taken.
    #[tokio::test]
    async fn a_signing_slot_is_waited_for_only_so_long() {
        let limit = WriteLimit::new(WriteLimitSettings {
            initial: 1.0,
            ..SIGNING_LIMIT
        });
        let held = limit.try_acquire().expect("the one slot");
        let wait = std::time::Duration::from_millis(300);
        let started = std::time::Instant::now();
        assert!(slot_within(&limit, wait).await.is_none());
        assert!(started.elapsed() >= wait);
        let freeing = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            drop(held);
        });
        assert!(
            slot_within(&limit, std::time::Duration::from_secs(5))
                .await
                .is_some()
        );
        freeing.await.expect("freed");
    }

    #[test]
    fn a_finalizer_patch_on_an_object_already_gone_is_success() {
        let result = finalizer_result(Err(finalizer::Error::RemoveFinalizer(api_error(404))));
        assert_eq!(result.ok(), Some(Action::await_change()));
        let result = finalizer_result(Err(finalizer::Error::AddFinalizer(api_error(404))));
        assert_eq!(result.ok(), Some(Action::await_change()));
    }

    #[test]
    fn other_finalizer_failures_are_still_errors() {
        assert!(matches!(
            finalizer_result(Err(finalizer::Error::RemoveFinalizer(api_error(409)))),
            Err(Error::Finalizer(_))
        ));
        assert!(matches!(
            finalizer_result(Err(finalizer::Error::CleanupFailed(Error::Timeout(
                Duration::from_secs(1)
            )))),
            Err(Error::Timeout(_))
        ));
    }
}
