//! Deletion without loss (upstream 3.10): the GardenerCluster first, then the Shoot (with
//! `confirmation.gardener.cloud/deletion`), and the finalizer only once the Shoot is gone.
//! Optional safe deletion (`--deletion-grace-period`): hibernate, delete after the period.
//! Optional force deletion (`--force-deletion`): annotate when Gardener reports a code it
//! accepts for it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kim_shared::api::{GardenerCluster, GardenerClusterSpec, Runtime, RuntimeState};
use kim_shared::gardener::Shoot;
use kim_shared::names::{self, condition, reason};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::classify::{self, ApiErrorKind};
use super::requeue::{DELETION_POLL, PERMANENT_RETRY, RETRY, SAFETY_REQUEUE};
use super::status::{CondStatus, StatusDraft};
use super::{CreateMayLand, Error, Reconciler};
use crate::stored::StatusApart;

/// Outcome of a deletion pass.
pub enum Deleted {
    /// Still in progress; write the status.
    Pending(Action),
    /// The finalizer is gone; nothing more to write.
    Finalized,
}

/// One deletion pass.
pub async fn run(
    reconciler: &Arc<Reconciler>,
    runtime: &Runtime,
    shoot: Option<Arc<Shoot>>,
    draft: &mut StatusDraft,
    now: jiff::Timestamp,
) -> Result<Deleted, Error> {
    if !runtime
        .finalizers()
        .iter()
        .any(|f| f == names::RUNTIME_FINALIZER)
    {
        return Ok(Deleted::Finalized);
    }
    draft.state(RuntimeState::Terminating);
    // A Runtime that carries another runtime's ID owns nothing it could name: the
    // GardenerCluster, registry-cache Secrets and Shoot of that ID are the other runtime's.
    if let Err(foreign) = runtime.own_runtime_id() {
        tracing::warn!(error = %foreign, "deleting a Runtime with another runtime's ID: nothing in Gardener or the runtime cluster is touched");
        return release_finalizer(reconciler, runtime).await;
    }
    let runtime_id = reconciler.runtime_id(runtime);
    // Another runtime's Shoot says nothing about this Runtime; it is left alone in step 2.
    draft.shoot(shoot.as_deref().filter(|s| shoot_is_of(s, &runtime_id)));

    // 1. GardenerCluster (its reconciler then deletes the kubeconfig Secret).
    if let Some(action) = delete_gardener_cluster(reconciler, runtime, &runtime_id, draft).await? {
        return Ok(Deleted::Pending(action));
    }

    // 2. Shoot. The watch cache may lag: confirm absence with a live read before the
    // finalizer goes, so a restart can never orphan a Shoot.
    let shoot = match shoot {
        Some(s) => Some(s),
        None => reconciler
            .get_shoot_live(&runtime.spec.shoot.name)
            .await
            .map_err(|e| Error::api("read the Shoot", e))?
            .map(Arc::new),
    };
    let Some(shoot) = shoot else {
        if let Some(may_land) = reconciler.create_may_land(runtime) {
            let (left, what) = match may_land {
                CreateMayLand::Unanswered(left) => (left, "A Shoot create got no final answer"),
                CreateMayLand::ByEarlierLeader(left) => (
                    left,
                    "The controller replica before this one may have sent a Shoot create that got no final answer",
                ),
            };
            // The time, not the seconds left: the message stays the same from pass to pass, so
            // it is written once.
            let until = jiff::SignedDuration::try_from(left)
                .ok()
                .and_then(|left| now.checked_add(left).ok())
                .and_then(|t| t.round(jiff::Unit::Second).ok())
                .unwrap_or(now);
            tracing::info!(%until, "{what}; the Shoot may still be admitted, so the finalizer stays until then");
            draft.set(
                condition::DEPROVISIONED,
                CondStatus::Unknown,
                reason::PROCESSING,
                format!("{what}; the Shoot may still be admitted until {until}, and the finalizer stays until then"),
            );
            return Ok(Deleted::Pending(Action::requeue(
                left.max(Duration::from_secs(1)),
            )));
        }
        return finalize(reconciler, runtime, draft).await;
    };
    if !shoot_is_of(&shoot, &runtime_id) {
        tracing::warn!(shoot = %shoot.name_any(), "the Shoot this Runtime names belongs to another runtime; leaving it and its ConfigMap");
        if let Some(waiting) = release_audit_log(reconciler, runtime, draft).await {
            return Ok(waiting);
        }
        return release_finalizer(reconciler, runtime).await;
    }
    if shoot.meta().deletion_timestamp.is_some() {
        force_deletion_if_allowed(reconciler, &shoot).await;
        draft.set(
            condition::DEPROVISIONED,
            CondStatus::Unknown,
            reason::GARDENER_SHOOT_DELETED,
            "Runtime shoot deletion started",
        );
        return Ok(Deleted::Pending(Action::requeue(DELETION_POLL)));
    }

    if let Some(grace) = reconciler.ctx.settings.runtime.deletion_grace_period
        && let Some(action) =
            hibernate_during_grace(reconciler, runtime, &shoot, draft, grace, now).await
    {
        return Ok(Deleted::Pending(action));
    }

    let api = reconciler.shoots_api();
    let name = shoot.name_any();
    if shoot
        .annotations()
        .get(names::GARDENER_ANNOTATION_CONFIRM_DELETION)
        .map(String::as_str)
        != Some("true")
    {
        // A merge patch of one annotation: an apply of the whole object as read (upstream)
        // would take ownership of fields others manage.
        let patch = json!({"metadata": {"uid": shoot.metadata.uid,
            "annotations": {names::GARDENER_ANNOTATION_CONFIRM_DELETION: "true"}}});
        if let Err(e) = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            if classify::classify(&e) == ApiErrorKind::NotFound {
                // Gone since the cache showed it: the next pass confirms that with a live read.
                return Ok(Deleted::Pending(Action::requeue(RETRY)));
            }
            return Ok(Deleted::Pending(delete_failure(
                reconciler,
                runtime,
                draft,
                reason::GARDENER_SHOOT_DELETED,
                "Gardener API shoot annotate error",
                &e,
            )));
        }
    }
    // Only the Shoot looked at (its UID): one made anew meanwhile is judged in the next pass.
    let only_this = crate::finalizing::only_uid(shoot.metadata.uid.clone());
    match api.delete(&name, &only_this).await {
        Ok(_) => {
            reconciler.gardener_answered(runtime);
            tracing::info!("Shoot deletion started");
            draft.set(
                condition::DEPROVISIONED,
                CondStatus::Unknown,
                reason::GARDENER_SHOOT_DELETED,
                "Runtime shoot deletion started",
            );
            Ok(Deleted::Pending(Action::requeue(DELETION_POLL)))
        }
        Err(e) if classify::classify(&e) == ApiErrorKind::NotFound => {
            finalize(reconciler, runtime, draft).await
        }
        Err(e) => Ok(Deleted::Pending(delete_failure(
            reconciler,
            runtime,
            draft,
            reason::GARDENER_SHOOT_DELETED,
            "Gardener API shoot delete error",
            &e,
        ))),
    }
}

async fn delete_gardener_cluster(
    reconciler: &Reconciler,
    runtime: &Runtime,
    runtime_id: &str,
    draft: &mut StatusDraft,
) -> Result<Option<Action>, Error> {
    let api: Api<StatusApart<GardenerCluster>> = reconciler.gardener_clusters(runtime);
    // Absent from the cache: confirmed once with a live read (the cache may lag behind a
    // GardenerCluster just made), then the cache is trusted.
    let gc = match reconciler.gardener_cluster(runtime, runtime_id) {
        Some(gc) => Some(gc),
        None if reconciler.gardener_cluster_gone(runtime) => None,
        None => {
            let live = api
                .get_opt(runtime_id)
                .await
                .map_err(|e| Error::api("read the GardenerCluster", e))?
                .map(Arc::new);
            if live.is_none() {
                reconciler.note_gardener_cluster_gone(runtime);
            }
            live
        }
    };
    // The GardenerCluster is found by the runtime-id label, which its editors could point at
    // another runtime's: it is this Runtime's only if it names this Runtime's shoot.
    let gc = match gc {
        Some(gc) if gardener_cluster_is_of(&gc.spec, runtime) => gc,
        other => {
            let message = match other {
                Some(foreign) => {
                    let shoot = &foreign.spec.shoot.name;
                    tracing::warn!(gardener_cluster = runtime_id, %shoot, "GardenerCluster of this runtime ID names another shoot; not deleting it");
                    format!(
                        "GardenerCluster {runtime_id} names shoot {shoot:?}, not this Runtime's: left in place"
                    )
                }
                None => "Gardener Cluster CR successfully deleted".to_owned(),
            };
            draft.set(
                condition::DEPROVISIONED,
                CondStatus::True,
                reason::GARDENER_CLUSTER_CR_DELETED,
                message,
            );
            return Ok(None);
        }
    };
    if gc.meta().deletion_timestamp.is_none() {
        // Conditional on the UID that was checked: a GardenerCluster replaced meanwhile stays.
        let dp = crate::finalizing::only_uid(gc.meta().uid.clone());
        match api.delete(runtime_id, &dp).await {
            Ok(_) => {}
            Err(e) if classify::classify(&e) == ApiErrorKind::NotFound => return Ok(None),
            Err(e) => {
                // A refusal (not a conflict or a passing fault) gets upstream's condition; the
                // failing pass still writes it, and the error keeps the retry's backoff.
                if classify::classify(&e) == ApiErrorKind::Permanent {
                    draft.set(
                        condition::DEPROVISIONED,
                        CondStatus::False,
                        reason::GARDENER_ERR,
                        format!("Gardener API delete error: {}", classify::message(&e)),
                    );
                }
                return Err(Error::api("delete the GardenerCluster", e));
            }
        }
    }
    draft.set(
        condition::DEPROVISIONED,
        CondStatus::Unknown,
        reason::GARDENER_CLUSTER_CR_DELETED,
        "Runtime shoot deletion started",
    );
    Ok(Some(Action::requeue(DELETION_POLL)))
}

// The Shoot patches of a deletion carry the UID of the Shoot judged to be this Runtime's (the
// cached copy): gardener-apiserver refuses a change of it (422), so a Shoot made anew under the
// name since, another runtime's, is neither unprotected nor hibernated by a cache that lags.

/// Whether a Shoot is the one of the runtime `runtime_id`: its runtime-id annotation names
/// that runtime, or it has none (a Shoot from before the infrastructure manager, taken over).
/// Whoever writes a Runtime chooses `spec.shoot.name`, so a Runtime that names another
/// runtime's Shoot must neither patch, take over nor delete it. Pure.
pub fn shoot_is_of(shoot: &Shoot, runtime_id: &str) -> bool {
    owning_runtime(shoot.meta()).is_none_or(|id| id == runtime_id)
}

/// The runtime a Shoot's runtime-id annotation names; `None` for a Shoot without it (which
/// [`shoot_is_of`] counts as any runtime's).
pub fn owning_runtime(shoot: &ObjectMeta) -> Option<&str> {
    shoot
        .annotations
        .as_ref()?
        .get(names::SHOOT_ANNOTATION_RUNTIME_ID)
        .map(String::as_str)
}

/// Whether a GardenerCluster (its spec) is the one of `runtime`: it names the Runtime's shoot
/// (the shoot name is immutable and unique in the project). Pure.
pub fn gardener_cluster_is_of(gc: &GardenerClusterSpec, runtime: &Runtime) -> bool {
    gc.shoot.name == runtime.spec.shoot.name
}

async fn hibernate_during_grace(
    reconciler: &Reconciler,
    runtime: &Runtime,
    shoot: &Shoot,
    draft: &mut StatusDraft,
    grace: Duration,
    now: jiff::Timestamp,
) -> Option<Action> {
    let since = runtime.meta().deletion_timestamp.as_ref()?.0;
    let due = since
        .checked_add(jiff::SignedDuration::try_from(grace).ok()?)
        .ok()?;
    if now >= due {
        return None;
    }
    let hibernated = shoot.spec.hibernation.as_ref().and_then(|h| h.enabled) == Some(true);
    if !hibernated {
        let patch = json!({"metadata": {"uid": shoot.metadata.uid},
            "spec": {"hibernation": {"enabled": true}}});
        if let Err(e) = reconciler
            .shoots_api()
            .patch(
                &shoot.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
        {
            return Some(delete_failure(
                reconciler,
                runtime,
                draft,
                reason::GARDENER_SHOOT_DELETED,
                "Gardener API shoot hibernate error",
                &e,
            ));
        }
        tracing::info!(%due, "Shoot hibernated for the deletion grace period");
    }
    draft.set(
        condition::DEPROVISIONED,
        CondStatus::Unknown,
        reason::PROCESSING,
        format!("Shoot hibernated; it will be deleted at {due} (--deletion-grace-period)"),
    );
    let wait = due.duration_since(now).unsigned_abs();
    Some(Action::requeue(
        wait.min(SAFETY_REQUEUE).max(Duration::from_secs(1)),
    ))
}

async fn force_deletion_if_allowed(reconciler: &Reconciler, shoot: &Shoot) {
    if !reconciler.ctx.settings.runtime.force_deletion {
        return;
    }
    let errors = shoot
        .status
        .as_ref()
        .and_then(|s| s.last_errors.clone())
        .unwrap_or_default();
    let set = shoot
        .annotations()
        .contains_key(names::GARDENER_ANNOTATION_CONFIRM_FORCE_DELETION);
    if set || !classify::force_deletion_allowed(&errors) {
        return;
    }
    let patch = json!({"metadata": {"uid": shoot.metadata.uid,
        "annotations": {names::GARDENER_ANNOTATION_CONFIRM_FORCE_DELETION: "true"}}});
    match reconciler
        .shoots_api()
        .patch(
            &shoot.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => {
            tracing::info!(codes = %classify::joined_codes(&errors), "force deletion confirmed")
        }
        Err(e) => {
            tracing::info!(error = %e, "could not set the force-deletion annotation; retrying")
        }
    }
}

async fn finalize(
    reconciler: &Reconciler,
    runtime: &Runtime,
    draft: &mut StatusDraft,
) -> Result<Deleted, Error> {
    // Every Shoot we write uses structured authentication, so its ConfigMap exists whatever
    // `--structured-auth-enabled` says (upstream deletes it only with the flag on; with it
    // off, as deployed, one ConfigMap would be left in the project per deleted Runtime).
    let name = names::structured_auth_config_map_name(&runtime.spec.shoot.name);
    match delete_own_config_map(reconciler, runtime, &name).await {
        Ok(()) => {}
        Err(e) if classify::classify(&e) == ApiErrorKind::NotFound => {}
        Err(e) => {
            return Ok(Deleted::Pending(delete_failure(
                reconciler,
                runtime,
                draft,
                reason::STRUCTURED_CONFIG_DELETED,
                "Gardener API structured authentication configmap delete error",
                &e,
            )));
        }
    }
    if let Some(waiting) = release_audit_log(reconciler, runtime, draft).await {
        return Ok(waiting);
    }
    if let Err(e) = super::registry_cache::on_delete(reconciler, runtime).await {
        return Ok(Deleted::Pending(delete_failure(
            reconciler,
            runtime,
            draft,
            reason::REGISTRY_CACHE_GARDEN_CLUSTER_CLEANUP_FAILED,
            "Gardener API registry cache secret delete error",
            &e,
        )));
    }
    release_finalizer(reconciler, runtime).await
}

/// Deletes the structured-authentication ConfigMap `name` unless it is labelled with another
/// runtime's ID: its name comes from the shoot name the Runtime chose, and a Runtime that
/// names the shoot of another whose Shoot does not exist yet must not take that one's
/// ConfigMap with it. One without the label (written by upstream) is this Runtime's. The
/// delete is conditional on the UID read.
async fn delete_own_config_map(
    reconciler: &Reconciler,
    runtime: &Runtime,
    name: &str,
) -> Result<(), kube::Error> {
    let api = reconciler.config_maps_api();
    let Some(cm) = api.get_metadata_opt(name).await? else {
        return Ok(());
    };
    let runtime_id = reconciler.runtime_id(runtime);
    if let Some(owner) = cm.labels().get(names::LABEL_RUNTIME_ID)
        && *owner != runtime_id
    {
        tracing::warn!(config_map = name, %owner, "the structured authentication ConfigMap of this shoot name belongs to another runtime; leaving it");
        return Ok(());
    }
    api.delete(name, &crate::finalizing::only_uid(cm.metadata.uid))
        .await
        .map(|_| ())
}

/// Releases the dedicated audit log ([`super::audit_log::release`]); on failure the deletion
/// waits (finalizer kept) with `Deprovisioned=False/AuditLogErr` naming the cause.
async fn release_audit_log(
    reconciler: &Reconciler,
    runtime: &Runtime,
    draft: &mut StatusDraft,
) -> Option<Deleted> {
    let e = super::audit_log::release(reconciler, runtime).await.err()?;
    tracing::warn!(error = %e, retry_in = ?DELETION_POLL, "cannot release the dedicated audit log; the finalizer stays");
    draft.set(
        condition::DEPROVISIONED,
        CondStatus::False,
        reason::AUDIT_LOG_ERR,
        format!("Dedicated audit log release error: {e}"),
    );
    Some(Deleted::Pending(Action::requeue(DELETION_POLL)))
}

/// Removes the finalizer and forgets the Runtime; the last step of every deletion.
async fn release_finalizer(reconciler: &Reconciler, runtime: &Runtime) -> Result<Deleted, Error> {
    match crate::finalizing::remove(
        &reconciler.runtimes(runtime),
        runtime,
        names::RUNTIME_FINALIZER,
    )
    .await
    {
        Ok(()) => {}
        // A pass queued from a stale cache entry ran after the finalizer had gone: done.
        Err(e) if classify::classify(&e) == ApiErrorKind::NotFound => {
            tracing::debug!("Runtime already gone when removing its finalizer");
            reconciler.forget_runtime(runtime);
            return Ok(Deleted::Finalized);
        }
        Err(e) => return Err(Error::api("remove the finalizer from the Runtime", e)),
    }
    if let Some(since) = runtime.meta().deletion_timestamp.as_ref() {
        reconciler
            .ctx
            .metrics
            .observe_deletion(super::elapsed_since(since.0));
    }
    reconciler.forget_runtime(runtime);
    tracing::info!("Runtime deleted, finalizer removed");
    Ok(Deleted::Finalized)
}

/// How long a deletion waits after Gardener refused one of its writes with an answer of `kind`
/// that is neither "try later" nor transient: a refusal (an admission policy, 422) as long as a
/// refused create or patch, a conflict or a Shoot gone meanwhile soon.
fn retry_after_refusal(kind: ApiErrorKind) -> Duration {
    match kind {
        ApiErrorKind::Permanent => PERMANENT_RETRY,
        _ => RETRY,
    }
}

/// A failed Gardener write of the deletion. "Try later" and transient answers back off per
/// Runtime as creates and patches do (2 s doubling to 60 s), so a busy Gardener does not get
/// two writes per deleting Runtime every few seconds; others wait [`retry_after_refusal`].
fn delete_failure(
    reconciler: &Reconciler,
    runtime: &Runtime,
    draft: &mut StatusDraft,
    reason: &'static str,
    what: &str,
    e: &kube::Error,
) -> Action {
    let kind = classify::classify(e);
    let wait = match kind {
        ApiErrorKind::Busy | ApiErrorKind::Transient => {
            reconciler.gardener_refused(runtime, kind, "delete")
        }
        other => retry_after_refusal(other),
    };
    if kind == ApiErrorKind::Permanent {
        tracing::warn!(error = %e, "{what}");
    } else {
        tracing::info!(error = %e, retry_in = ?wait, "{what}; retrying");
    }
    draft.set(
        condition::DEPROVISIONED,
        CondStatus::False,
        reason,
        format!("{what}: {}", classify::message(e)),
    );
    Action::requeue(wait)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kim_shared::api::gardener_cluster::{Kubeconfig, SecretKeyRef, ShootReference};

    #[test]
    fn a_refused_deletion_is_retried_as_seldom_as_a_refused_create() {
        // One DELETE a minute per Runtime a policy refuses, not every few seconds.
        assert_eq!(
            retry_after_refusal(ApiErrorKind::Permanent),
            PERMANENT_RETRY
        );
        assert_eq!(retry_after_refusal(ApiErrorKind::Conflict), RETRY);
        assert_eq!(retry_after_refusal(ApiErrorKind::NotFound), RETRY);
    }

    #[test]
    fn a_gardener_cluster_is_the_runtimes_only_if_it_names_its_shoot() {
        let mut runtime = Runtime::new("rt", Default::default());
        runtime.spec.shoot.name = "s1".into();
        let gc = |shoot: &str| GardenerClusterSpec {
            kubeconfig: Kubeconfig {
                secret: SecretKeyRef {
                    key: "config".into(),
                    name: "kubeconfig-rt".into(),
                    namespace: "kcp-system".into(),
                },
            },
            shoot: ShootReference { name: shoot.into() },
        };
        assert!(gardener_cluster_is_of(&gc("s1"), &runtime));
        assert!(!gardener_cluster_is_of(&gc("s2"), &runtime));
    }

    #[test]
    fn a_shoot_is_the_runtimes_unless_it_names_another_runtime() {
        let shoot = |owner: Option<&str>| {
            let mut shoot = Shoot::default();
            shoot.metadata.annotations = owner
                .map(|id| [(names::SHOOT_ANNOTATION_RUNTIME_ID.to_owned(), id.to_owned())].into());
            shoot
        };
        assert!(shoot_is_of(&shoot(Some("rt")), "rt"));
        assert!(!shoot_is_of(&shoot(Some("victim")), "rt"));
        assert!(
            shoot_is_of(&shoot(None), "rt"),
            "taken over from before KIM"
        );
    }
}
