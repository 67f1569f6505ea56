//! One reconcile of a Runtime that is not being deleted: finalizer, validation, create or
//! patch the Shoot, follow its `lastOperation`, GardenerCluster, administrators and OIDC,
//! `Ready`. Each step records conditions in a [`StatusDraft`]; the caller writes it once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kim_shared::api::{Runtime, RuntimeState};
use kim_shared::gardener::Shoot;
use kim_shared::gardener::last_operation::{kind, state};
use kim_shared::names::{self, condition, reason};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::classify::{self, ApiErrorKind};
use super::full_update::FullUpdate;
use super::requeue::{PERMANENT_RETRY, RETRY, SAFETY_REQUEUE, SLOT_WAIT};
use super::seed::Regions;
use super::status::{CondStatus, StatusDraft};
use super::{Error, Reconciler, cluster};
use crate::gardener::limit::WriteOutcome;

/// Does the non-deletion part of a reconcile.
pub async fn apply(
    reconciler: &Arc<Reconciler>,
    runtime: &Runtime,
    shoot: Option<Arc<Shoot>>,
    draft: &mut StatusDraft,
) -> Result<Action, Error> {
    ensure_finalizer(reconciler, runtime).await?;

    // Validation first: a Runtime stored before the webhook existed must fail clearly. A
    // missing audit-log tenant is left to the step below, which fails with upstream's reason
    // `AuditLogErr` when `--audit-log-mandatory` is set. The admission policy rules are the
    // webhook's business: a stored Runtime that predates them still converts.
    let opts = kim_shared::validation::ValidationOptions {
        audit_log_mandatory: false,
        admission_policy: false,
    };
    let findings = kim_shared::validation::validate_create_with(runtime, &reconciler.config, &opts)
        .presentable();
    if !findings.is_allowed() {
        let msg = findings
            .violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return Ok(match shoot.as_deref() {
            Some(s) if super::delete::shoot_is_of(s, &reconciler.runtime_id(runtime)) => {
                patch_conversion_failed(reconciler, runtime, draft, &msg).await
            }
            _ => conversion_failed(draft, &msg),
        });
    }

    let Some(shoot) = shoot else {
        return create_shoot(reconciler, runtime, draft).await;
    };
    let runtime_id = reconciler.runtime_id(runtime);
    if !super::delete::shoot_is_of(&shoot, &runtime_id) {
        return Ok(foreign_shoot(draft, &shoot));
    }
    draft.shoot(Some(&shoot));
    if shoot.meta().deletion_timestamp.is_some() {
        // Someone else deletes the Shoot; nothing to do until it is gone (then we create anew).
        draft.set(
            condition::PROVISIONED,
            CondStatus::Unknown,
            reason::PROCESSING,
            "Shoot is being deleted outside of the infrastructure manager",
        );
        draft.state(RuntimeState::Pending);
        return Ok(Action::requeue(SAFETY_REQUEUE));
    }

    if reconciler.shoot_cache_behind(runtime, &shoot) {
        // The Shoot watch has not shown the generation our last patch made: this Shoot's last
        // operation is the one before the patch, and judging it (or patching from it) would
        // report the Runtime Ready before Gardener even started the update. The watch's event
        // brings the Runtime back; the requeue only guards against a missed one.
        return Ok(Action::requeue(RETRY));
    }
    let facts = patch_facts(reconciler, runtime, &shoot, draft);
    let decision = should_patch(&facts);
    match decision {
        PatchDecision::Patch(why) => {
            if update_asked(runtime, &facts) {
                begin_update(reconciler, runtime, draft).await?;
            }
            return patch_shoot(reconciler, runtime, &shoot, draft, why).await;
        }
        PatchDecision::Suspended => {
            tracing::info!(
                "Reconciliation is suspended. Remove \"{}\" annotation to resume reconciliation",
                names::ANNOTATION_SUSPEND_PATCH_RECONCILIATION
            );
        }
        PatchDecision::RuntimeBehind(shoot_generation) => {
            return runtime_behind(
                reconciler,
                runtime,
                &runtime_id,
                &shoot,
                draft,
                shoot_generation,
            )
            .await;
        }
        PatchDecision::UpToDate | PatchDecision::IfAuditLogElsewhere => {}
    }

    let ready = super::status::ready_for_its_spec(runtime)
        && !super::audit_log::unfinished(reconciler, runtime)
        && !super::registry_cache::unfinished(reconciler, runtime)
        && status_is_of(runtime, &shoot);
    // A change of the runtime bootstrapper's configuration is taken to the cluster by the steps
    // after provisioning (`cluster::after_provisioned`), Shoot untouched.
    let bootstrapper_outdated =
        reconciler.bootstrapper_outdated(runtime) && awake_and_settled(&shoot);
    if ready && !bootstrapper_outdated {
        // A GardenerCluster deleted by hand takes the admin kubeconfig with it: it is made
        // anew, and the Runtime stays Ready (nothing in the cluster changed).
        ensure_gardener_cluster(reconciler, runtime, &runtime_id, &shoot).await?;
        // Ready and handled: nothing to do until the spec or the Shoot changes.
        return Ok(Action::await_change());
    }
    if !bootstrapper_outdated && ready_as_upstream_left_it(runtime, &shoot) {
        // Upstream KIM leaves a Ready Runtime alone after a restart unless its Shoot is
        // mid-reconcile, and so do we after taking over from it: the status gains its
        // observedGeneration and nothing else changes. Going on would turn Runtimes Pending
        // whose cluster is hibernated or refuses a write, or whose Shoot's last Gardener
        // reconcile erred, with no change of theirs.
        return Ok(Action::await_change());
    }

    if let Some(action) = follow_last_operation(&shoot, draft) {
        return Ok(action);
    }
    // Asked only once the Shoot is settled, as the step that found it elsewhere was.
    if decision == PatchDecision::IfAuditLogElsewhere {
        match super::audit_log::shoot_patch_needed(reconciler, runtime, &shoot, draft).await {
            Ok(Some(why)) => return patch_shoot(reconciler, runtime, &shoot, draft, why).await,
            Ok(None) => {}
            Err(action) => return Ok(action),
        }
    }
    cluster::after_provisioned(reconciler, runtime, &shoot, draft).await
}

/// Whether the Runtime's spec changed since its Shoot was last patched, and its status does
/// not describe that generation yet: an update KEB waits for. (A force-patch of a Runtime whose
/// Shoot carries its generation, as after taking over from upstream, is none.)
fn update_asked(runtime: &Runtime, facts: &PatchFacts) -> bool {
    let observed = runtime.status.as_ref().and_then(|s| s.observed_generation);
    facts.applied.is_none_or(|a| a < facts.generation) && observed != Some(facts.generation)
}

/// KEB takes `Ready` a few seconds (4 s) after a spec change for "update done", and `Failed`
/// for "update failed": until a patch carries the new generation, the Runtime is `Pending`,
/// whichever later step fails or waits, and a `Ready` or `Failed` one (the verdict on the spec
/// before) says so before the Gardener calls, which may take longer. The status write at the
/// end of the pass publishes the Events of the whole pass.
async fn begin_update(
    reconciler: &Reconciler,
    runtime: &Runtime,
    draft: &mut StatusDraft,
) -> Result<(), Error> {
    let verdict_shown = matches!(
        draft.current_state(),
        RuntimeState::Ready | RuntimeState::Failed
    );
    draft.state(RuntimeState::Pending);
    if verdict_shown {
        draft.set(
            condition::PROVISIONED,
            CondStatus::Unknown,
            reason::PROCESSING,
            "Shoot is pending for update",
        );
        draft.observed();
        reconciler.apply_status(runtime, draft).await?;
    }
    Ok(())
}

async fn ensure_finalizer(reconciler: &Reconciler, runtime: &Runtime) -> Result<(), Error> {
    crate::finalizing::add(
        &reconciler.runtimes(runtime),
        runtime,
        names::RUNTIME_FINALIZER,
    )
    .await
    .map_err(|e| Error::api("add the finalizer to the Runtime", e))
}

async fn create_shoot(
    reconciler: &Arc<Reconciler>,
    runtime: &Runtime,
    draft: &mut StatusDraft,
) -> Result<Action, Error> {
    if draft.condition(condition::PROVISIONED).is_none() {
        draft.set(
            condition::PROVISIONED,
            CondStatus::Unknown,
            reason::INITIALISED,
            "Runtime initialized",
        );
    }
    if let Some(action) = check_seed(reconciler, runtime, draft).await {
        return Ok(action);
    }
    if reconciler.ctx.settings.runtime.audit_log_mandatory
        && reconciler
            .config
            .audit_log_tenant(
                runtime.spec.shoot.provider.type_.as_str(),
                &runtime.spec.shoot.region,
            )
            .is_err()
    {
        tracing::warn!(
            provider = runtime.spec.shoot.provider.type_.as_str(),
            region = %runtime.spec.shoot.region,
            "no audit log tenant for provider and region"
        );
        draft.set(
            condition::PROVISIONED,
            CondStatus::False,
            reason::AUDIT_LOG_ERR,
            "Failed to configure audit logs",
        );
        draft.state(RuntimeState::Failed);
        return Ok(Action::await_change());
    }
    // Gardener said "try later" to this Runtime recently, or refused this generation: no
    // request before the hold ends.
    if let Some(wait) = reconciler
        .busy_hold(runtime)
        .or_else(|| reconciler.backoff_remaining(runtime))
    {
        return Ok(Action::requeue(wait));
    }
    // We created the Shoot and the watch has not shown it yet (it lags under load).
    if let Some(wait) = reconciler.awaiting_created(runtime) {
        draft.state(RuntimeState::Pending);
        return Ok(Action::requeue(wait.min(RETRY)));
    }
    // Waiting for a create slot with the referenced objects written for this generation:
    // nothing is left to do before the create, so look again without converting (thousands
    // of Runtimes waiting while Gardener is slow would otherwise convert each every two
    // seconds).
    if reconciler.create_limit.full() && reconciler.references_written(runtime) {
        reconciler.publish_create_limit();
        return Ok(Action::requeue(SLOT_WAIT.random_delay(1)));
    }
    if let Some(action) = super::audit_log::reserve(reconciler, runtime, draft).await {
        return Ok(action);
    }
    let converted = match prepare(reconciler, runtime, None, draft, false).await {
        Ok(c) => c,
        Err(action) => return Ok(action),
    };
    // The objects the Shoot references exist a while before the Shoot, so gardener-apiserver's
    // admission finds them in its informer cache instead of reading them through its own
    // rate-limited client.
    if let Some(wait) = reconciler.references_settling(runtime) {
        return Ok(Action::requeue(wait));
    }
    let Some(permit) = reconciler.create_limit.try_acquire() else {
        reconciler.publish_create_limit();
        return Ok(Action::requeue(SLOT_WAIT.random_delay(1)));
    };
    reconciler.publish_create_limit();
    let name = converted.shoot.name_any();
    // A create that timed out may have been admitted after we stopped waiting: look first.
    if reconciler.create_unsure(runtime) {
        match reconciler.get_shoot_live(&name).await {
            Ok(Some(shoot)) => {
                permit.finish(WriteOutcome::Other);
                reconciler.publish_create_limit();
                tracing::info!(
                    "Shoot exists (an earlier create was admitted); waiting for its watch event"
                );
                reconciler.gardener_answered(runtime);
                draft.shoot(Some(&shoot));
                draft.set(
                    condition::PROVISIONED,
                    CondStatus::Unknown,
                    reason::SHOOT_CREATION_PENDING,
                    "Shoot is pending",
                );
                draft.state(RuntimeState::Pending);
                return Ok(Action::requeue(SAFETY_REQUEUE));
            }
            Ok(None) => {}
            Err(e) => {
                permit.finish(outcome_of(&e));
                reconciler.publish_create_limit();
                return Ok(gardener_failure(
                    reconciler,
                    runtime,
                    draft,
                    reason::GARDENER_ERR,
                    ("get", "Gardener API shoot get error"),
                    &e,
                ));
            }
        }
    }
    let api: Api<Shoot> = reconciler.shoots_api();
    let sent = Instant::now();
    let (created, answered_in) =
        crate::gardener::client::answer_time(api.create(&PostParams::default(), &converted.shoot))
            .await;
    let answered_in = answered_in.unwrap_or_else(|| sent.elapsed());
    match created {
        Ok(_) => {
            permit.finish(WriteOutcome::Answered(answered_in));
            reconciler.publish_create_limit();
            reconciler.record_shoot_created(runtime);
            tracing::info!("Shoot created");
            reconciler.gardener_answered(runtime);
            reconciler.shoot_created(runtime);
            draft.set(
                condition::PROVISIONED,
                CondStatus::Unknown,
                reason::SHOOT_CREATION_PENDING,
                "Shoot is pending",
            );
            draft.state(RuntimeState::Pending);
            Ok(Action::requeue(SAFETY_REQUEUE))
        }
        Err(e) if classify::classify(&e) == ApiErrorKind::AlreadyExists => {
            permit.finish(WriteOutcome::Answered(answered_in));
            reconciler.publish_create_limit();
            reconciler.gardener_answered(runtime);
            // Our watch cache is behind (or a restart interrupted us after the create): the
            // Shoot exists; its watch event brings it.
            tracing::debug!("Shoot already exists; waiting for its watch event");
            draft.state(RuntimeState::Pending);
            Ok(Action::requeue(RETRY))
        }
        Err(e) => {
            permit.finish(outcome_of(&e));
            reconciler.publish_create_limit();
            // No answer, or the apiserver's own timeout: the create may have been admitted
            // after all.
            if classify::may_have_been_stored(&e) {
                reconciler.set_create_unsure(runtime, sent);
            }
            let kind = classify::classify(&e);
            let action = gardener_failure(
                reconciler,
                runtime,
                draft,
                reason::GARDENER_ERR,
                ("create", "Gardener API create error"),
                &e,
            );
            if kind == ApiErrorKind::Permanent {
                // Write the referenced objects again before the next attempt: one of them may
                // be what Gardener refused.
                reconciler.forget_references(runtime);
                return Ok(Action::requeue(reconciler.back_off(runtime)));
            }
            Ok(action)
        }
    }
}

/// What a create's answer tells the create limit.
fn outcome_of(e: &kube::Error) -> WriteOutcome {
    match classify::classify(e) {
        ApiErrorKind::Busy => WriteOutcome::Busy,
        _ => WriteOutcome::Other,
    }
}

/// With `enforceSeedLocation`, refuses to create a Shoot Gardener could never schedule: no
/// usable Seed of the provider in the region gives `Failed` with upstream's `SeedNotFound`,
/// naming the regions that have one. Upstream stops there until the Runtime changes; we look
/// again once a minute, so the Runtime proceeds once a Seed becomes usable. `None`: go on.
async fn check_seed(
    reconciler: &Reconciler,
    runtime: &Runtime,
    draft: &mut StatusDraft,
) -> Option<Action> {
    if runtime.spec.shoot.enforce_seed_location != Some(true) {
        return None;
    }
    let provider = runtime.spec.shoot.provider.type_.as_str();
    let region = &runtime.spec.shoot.region;
    match reconciler
        .usable_regions
        .get(&reconciler.ctx.gardener, provider)
        .await
    {
        Regions::Listed(regions) if regions.iter().any(|r| r == region) => None,
        Regions::Listed(regions) => {
            tracing::warn!(provider, %region, "no usable Seed in the region; no Shoot created");
            draft.set(
                condition::PROVISIONED,
                CondStatus::False,
                reason::SEED_NOT_FOUND,
                format!(
                    "Cannot find available seed for the region {region}. The following regions \
                     have seeds ready: [{}].",
                    regions.join(" ")
                ),
            );
            draft.state(RuntimeState::Failed);
            Some(Action::requeue(PERMANENT_RETRY))
        }
        Regions::Failed(e) => Some(gardener_failure(
            reconciler,
            runtime,
            draft,
            reason::GARDENER_ERR,
            (
                "other",
                &format!("Failed to verify whether seed is available for the region {region}"),
            ),
            &e,
        )),
        // The Runtime whose list failed reported it; this one waits without a refusal of its
        // own (Gardener answered once).
        Regions::FailedRecently(wait) => Some(Action::requeue(wait)),
    }
}

/// Sets a condition for a failed Gardener call and picks the requeue: transient errors keep
/// the state `Pending`, permanent ones `Failed` (upstream: `Pending` for both). "Try later"
/// answers ([`ApiErrorKind::Busy`]) and other transient errors hold the Runtime's Gardener
/// writes for a growing, jittered time ([`BUSY_BACKOFF`]); a busy Gardener gets the reason
/// `GardenerBusy`. `operation` is the call's label in `gardener_busy_total`, `what` its
/// description in the condition.
pub fn gardener_failure(
    reconciler: &Reconciler,
    runtime: &Runtime,
    draft: &mut StatusDraft,
    why: &str,
    (operation, what): (&'static str, &str),
    e: &kube::Error,
) -> Action {
    let kind = classify::classify(e);
    let message = format!("{what}: {}", classify::message(e));
    match kind {
        ApiErrorKind::Busy | ApiErrorKind::Transient => {
            let wait = reconciler.gardener_refused(runtime, kind, operation);
            if kind == ApiErrorKind::Busy {
                tracing::info!(error = %e, retry_in = ?wait, "{what}: Gardener is busy; retrying");
                draft.set(
                    condition::PROVISIONED,
                    CondStatus::Unknown,
                    reason::GARDENER_BUSY,
                    format!("Gardener is busy, retrying: {message}"),
                );
            } else {
                tracing::info!(error = %e, retry_in = ?wait, "{what}; retrying");
                draft.set(condition::PROVISIONED, CondStatus::Unknown, why, message);
            }
            if draft.current_state() != RuntimeState::Ready {
                draft.state(RuntimeState::Pending);
            }
            Action::requeue(wait)
        }
        ApiErrorKind::Conflict | ApiErrorKind::AlreadyExists | ApiErrorKind::NotFound => {
            tracing::info!(error = %e, "{what}; retrying");
            draft.set(condition::PROVISIONED, CondStatus::Unknown, why, message);
            if draft.current_state() != RuntimeState::Ready {
                draft.state(RuntimeState::Pending);
            }
            Action::requeue(RETRY)
        }
        ApiErrorKind::Permanent => {
            tracing::warn!(error = %e, "{what}");
            draft.set(condition::PROVISIONED, CondStatus::False, why, message);
            draft.state(RuntimeState::Failed);
            Action::requeue(PERMANENT_RETRY)
        }
    }
}

/// What creating and patching share before they write the Shoot: the conversion (an error
/// fails the Runtime with `ConversionErr`) and the structured-authentication ConfigMap the
/// Shoot points to. (Both callers check the hold after a permanent refusal before they come
/// here.) `Err` is the action to return.
async fn prepare(
    reconciler: &Arc<Reconciler>,
    runtime: &Runtime,
    live: Option<&Shoot>,
    draft: &mut StatusDraft,
    drift: bool,
) -> Result<kim_shared::convert::Converted, Action> {
    let acl = match super::acl::addresses(reconciler, runtime) {
        Ok(acl) => acl,
        // Decided once the watch has listed it (moments after a start), not failed for it; said
        // in the condition, so that a watch that cannot list (its RBAC) is seen.
        Err(e @ super::acl::AclError::NotRead { .. }) => {
            tracing::info!(error = %e, "waiting for the API server ACL ConfigMap");
            draft.set(
                condition::PROVISIONED,
                CondStatus::Unknown,
                reason::PROCESSING,
                format!("waiting: {e}"),
            );
            return Err(Action::requeue(RETRY));
        }
        Err(e) => {
            // Not the Runtime's fault: looked at again once a minute, so the Runtime proceeds
            // once the ConfigMap is right.
            conversion_failed(draft, &e);
            return Err(Action::requeue(PERMANENT_RETRY));
        }
    };
    // A new Shoot starts with the shared tenant; the dedicated one comes with a patch.
    let dedicated_audit_log = match live {
        Some(_) => super::audit_log::tenant_for_patch(reconciler, runtime, draft).await?,
        None => None,
    };
    // Upstream writes the registry cache on patch only, never on create.
    // A drift re-apply restores the spec, not the credentials (with their change pending, they
    // are copied as for any patch): it writes the Runtime's current garden Secrets the Shoot references
    // again and leaves the runtime cluster alone, which may be asleep (Gardener moves the
    // generation when it wakes or hibernates the cluster too).
    let on_shoot = match live {
        Some(live)
            if drift
                && reconciler.ctx.settings.registry_cache.enabled
                && !kim_shared::convert::registry_cache_credentials_changed(runtime, live) =>
        {
            super::registry_cache::current_on_shoot(reconciler, runtime, live).await
        }
        _ => None,
    };
    let registry_cache_secrets = match (live, on_shoot) {
        (Some(_), Some(secrets)) => secrets,
        // A drift re-apply that changes nothing ends without the steps after provisioning,
        // which would mark the caches Ready again: it does not mark them Pending.
        (Some(_), None) => {
            super::registry_cache::before_patch(reconciler, runtime, draft, !drift).await?
        }
        (None, _) => Default::default(),
    };
    let opts = kim_shared::convert::ConvertOptions {
        dedicated_audit_log,
        audit_log_mandatory: reconciler.ctx.settings.runtime.audit_log_mandatory,
        network_restriction: reconciler.ctx.settings.runtime.network_restriction,
        acl,
        registry_cache_secrets,
    };
    let converted =
        match kim_shared::convert::to_shoot_with(runtime, &reconciler.config, live, &opts) {
            Ok(c) => c,
            Err(e) if live.is_some() => {
                // `before_patch` has just set the configs `Pending`: say the failure on every
                // pass, not only the first of the generation.
                super::registry_cache::on_conversion_failed(reconciler, runtime).await;
                return Err(conversion_failed(draft, &e));
            }
            Err(e) => return Err(conversion_failed(draft, &e)),
        };
    // Before a create, once per generation: a retried create reuses the ConfigMap already
    // written (and does not reset its settling time).
    if let Some(cm) = &converted.structured_auth
        && (live.is_some() || !reconciler.references_written(runtime))
    {
        if let Err(e) = reconciler.apply_config_map(cm, live.is_none()).await {
            return Err(gardener_failure(
                reconciler,
                runtime,
                draft,
                reason::OIDC_CONFIGURATION_ERR,
                (
                    "config_map",
                    "Failed to create structured authentication config map",
                ),
                &e,
            ));
        }
        if live.is_none() {
            reconciler.references_applied(runtime);
        }
    }
    Ok(converted)
}

/// Whether the Runtime's status was written for this Shoot (see
/// [`super::status::of_an_earlier_shoot`]). A Shoot made anew after the last status write (its
/// write lost to a crash or a refusal) is a new cluster that the steps after provisioning have
/// not set up.
fn status_is_of(runtime: &Runtime, shoot: &Shoot) -> bool {
    !super::status::of_an_earlier_shoot(runtime.status.as_ref(), shoot)
}

/// The Shoot is awake and Gardener is done with it: a Ready Runtime's cluster is configured
/// again after a change of ours (the bootstrapper's configuration) only then. A hibernated
/// cluster does not answer, and one Gardener is reconciling would turn the Runtime `Pending`
/// for a change that is not the cluster's; the Shoot's next event (woken, reconciled) brings
/// the Runtime back.
fn awake_and_settled(shoot: &Shoot) -> bool {
    let hibernated = shoot
        .spec
        .hibernation
        .as_ref()
        .and_then(|h| h.enabled)
        .unwrap_or(false);
    let status = shoot.status.as_ref();
    let observed = shoot.metadata.generation <= status.and_then(|s| s.observed_generation);
    let succeeded = status
        .and_then(|s| s.last_operation.as_ref())
        .is_some_and(|op| op.state == state::SUCCEEDED);
    !hibernated && observed && succeeded
}

/// A Ready status written by upstream KIM (it sets no `observedGeneration`) whose Shoot is not
/// mid-reconcile (upstream's restart guard: a newer generation than Gardener observed, or a
/// last operation that is still pending or processing).
fn ready_as_upstream_left_it(runtime: &Runtime, shoot: &Shoot) -> bool {
    let upstream_ready = runtime
        .status
        .as_ref()
        .is_some_and(|s| s.state == RuntimeState::Ready && s.observed_generation.is_none());
    let status = shoot.status.as_ref();
    let mid_reconcile = shoot.metadata.generation > status.and_then(|s| s.observed_generation)
        || status
            .and_then(|s| s.last_operation.as_ref())
            .is_none_or(|op| matches!(op.state.as_str(), state::PENDING | state::PROCESSING));
    upstream_ready && !mid_reconcile
}

/// The Shoot reflects a later generation of this Runtime than the Runtime has: the Runtime was
/// restored from a backup of the KCP, or created anew (a migration), after the Shoot was last
/// patched. Its spec may be older than the Shoot's, so nothing is applied, neither to the Shoot
/// nor to the runtime cluster (administrators), except a missing GardenerCluster (the admin
/// kubeconfig of the cluster as it is), and the Runtime is `Pending` with
/// `RuntimeBehindShoot` (so a KEB update waiting for `Ready` at its generation does not pass)
/// until someone compares and sets the force-patch annotation. A watch that lags (another
/// replica patched from a generation ours has not seen yet) only delays: the generation is read
/// live first.
async fn runtime_behind(
    reconciler: &Reconciler,
    runtime: &Runtime,
    runtime_id: &str,
    shoot: &Shoot,
    draft: &mut StatusDraft,
    shoot_generation: i64,
) -> Result<Action, Error> {
    let live = reconciler
        .runtimes(runtime)
        .get_opt(&runtime.name_any())
        .await
        .map_err(|e| Error::api("read the Runtime", e))?;
    let Some(live) = live else {
        // Gone meanwhile: its deletion event decides.
        return Ok(Action::await_change());
    };
    let generation = live.metadata.generation.unwrap_or(0);
    if generation >= shoot_generation {
        return Ok(Action::requeue(RETRY));
    }
    // The admin kubeconfig concerns the cluster as it is, not the spec: a Runtime created anew
    // for an existing Shoot gets its GardenerCluster while held.
    ensure_gardener_cluster(reconciler, runtime, runtime_id, shoot).await?;
    tracing::warn!(
        shoot_generation,
        generation,
        "the Shoot reflects a later generation of this Runtime than it has (restored or created anew?); nothing is applied"
    );
    draft.set(
        condition::PROVISIONED,
        CondStatus::Unknown,
        reason::RUNTIME_BEHIND_SHOOT,
        format!(
            "The Shoot reflects generation {shoot_generation} of this Runtime (annotation {}), the Runtime is at generation {generation}: it was restored from a backup or created anew, and its spec may be older than the Shoot's. Nothing is applied to the Shoot or the runtime cluster; compare spec.shoot with the Shoot, then set the annotation {}=\"true\" to apply this Runtime as it is",
            names::SHOOT_ANNOTATION_RUNTIME_GENERATION,
            names::ANNOTATION_FORCE_PATCH_RECONCILIATION
        ),
    );
    draft.state(RuntimeState::Pending);
    Ok(Action::await_change())
}

/// Makes the Runtime's GardenerCluster when the cache has none.
async fn ensure_gardener_cluster(
    reconciler: &Reconciler,
    runtime: &Runtime,
    runtime_id: &str,
    shoot: &Shoot,
) -> Result<(), Error> {
    if reconciler.gardener_cluster(runtime, runtime_id).is_some() {
        return Ok(());
    }
    cluster::create_gardener_cluster(reconciler, runtime, runtime_id, shoot)
        .await
        .map_err(|e| Error::api("create the GardenerCluster", e))?;
    tracing::info!("GardenerCluster made anew");
    Ok(())
}

/// The Shoot `spec.shoot.name` names is another runtime's: nothing is written, neither to it
/// nor for it (no GardenerCluster, no ConfigMap), until the Runtime names a Shoot of its own.
fn foreign_shoot(draft: &mut StatusDraft, shoot: &Shoot) -> Action {
    let owner = shoot
        .annotations()
        .get(names::SHOOT_ANNOTATION_RUNTIME_ID)
        .map_or("", String::as_str);
    tracing::warn!(shoot = %shoot.name_any(), owner, "the Shoot this Runtime names belongs to another runtime");
    draft.set(
        condition::PROVISIONED,
        CondStatus::False,
        reason::CONFIGURATION_ERROR,
        format!(
            "Shoot {} belongs to runtime {owner:?} (annotation {}); spec.shoot.name must name a Shoot of this runtime",
            shoot.name_any(),
            names::SHOOT_ANNOTATION_RUNTIME_ID
        ),
    );
    draft.state(RuntimeState::Failed);
    Action::await_change()
}

/// A Runtime that cannot become a Shoot (invalid, or the conversion refused it): `Failed` with
/// upstream's `ConversionErr` until its spec changes.
fn conversion_failed(draft: &mut StatusDraft, cause: &dyn std::fmt::Display) -> Action {
    draft.set(
        condition::PROVISIONED,
        CondStatus::False,
        reason::CONVERSION_ERR,
        format!("Runtime conversion error {cause}"),
    );
    draft.state(RuntimeState::Failed);
    Action::await_change()
}

/// [`conversion_failed`] for a Runtime whose Shoot exists and that fails validation (nothing
/// else touches the registry caches then): on the first pass of the generation, its runtime
/// cluster's `RegistryCacheConfig`s also say that they will not be applied.
async fn patch_conversion_failed(
    reconciler: &Reconciler,
    runtime: &Runtime,
    draft: &mut StatusDraft,
    cause: &(dyn std::fmt::Display + Sync),
) -> Action {
    if !draft.conversion_failed_before() {
        super::registry_cache::on_conversion_failed(reconciler, runtime).await;
    }
    conversion_failed(draft, cause)
}

/// Reads the live Shoot as Gardener stores it (every field, with its resourceVersion), applies
/// `update` to it and writes it back with one PUT; a concurrent change fails with 409 and the
/// caller retries.
async fn full_update(
    reconciler: &Reconciler,
    name: &str,
    update: FullUpdate,
    converted: &Shoot,
) -> Result<(), kube::Error> {
    tracing::info!(why = update.why(), "full update of the Shoot");
    let resource = kube::api::ApiResource::erase::<Shoot>(&());
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        reconciler.ctx.gardener.clone(),
        &reconciler.ctx.gardener_namespace,
        &resource,
    );
    let live = api.get(name).await?;
    let mut raw = serde_json::to_value(&live).map_err(kube::Error::SerdeError)?;
    update.apply(&mut raw, converted).map_err(|m| {
        kube::Error::SerdeError(serde::de::Error::custom(format!("Shoot {name}: {m}")))
    })?;
    let updated: kube::api::DynamicObject =
        serde_json::from_value(raw).map_err(kube::Error::SerdeError)?;
    let pp = PostParams {
        field_manager: Some(names::FIELD_MANAGER.to_owned()),
        ..Default::default()
    };
    api.replace(name, &pp, &updated).await?;
    Ok(())
}

/// What decides whether the Shoot is patched, read without a request.
#[derive(Debug, Default, Clone, Copy)]
struct PatchFacts {
    /// The suspend annotation: wins over every reason below.
    suspended: bool,
    /// The force-patch annotation.
    forced: bool,
    /// The Runtime's generation.
    generation: i64,
    /// The Runtime generation the Shoot reflects (its annotation, or what we applied last).
    applied: Option<i64>,
    /// Someone changed the Shoot spec of a Ready Runtime.
    drifted: bool,
    /// Registry caches asked for are not on the Shoot.
    registry_cache_missing: bool,
    /// The registry cache credentials in the runtime cluster changed since the Shoot's garden
    /// Secrets were copied.
    registry_cache_credentials_changed: bool,
    /// The dedicated audit log step found the Shoot on another tenant.
    audit_log_pending: bool,
    /// The Shoot's ACL does not allow the addresses the ACL ConfigMap gives now.
    acl_outdated: bool,
}

fn patch_facts(
    reconciler: &Reconciler,
    runtime: &Runtime,
    shoot: &Shoot,
    draft: &StatusDraft,
) -> PatchFacts {
    let annotated = shoot
        .annotations()
        .get(names::SHOOT_ANNOTATION_RUNTIME_GENERATION)
        .and_then(|v| v.parse::<i64>().ok());
    let suspended = runtime.patch_suspended();
    PatchFacts {
        suspended,
        forced: runtime
            .annotations()
            .get(names::ANNOTATION_FORCE_PATCH_RECONCILIATION)
            .is_some_and(|v| v == "true"),
        generation: runtime.metadata.generation.unwrap_or(0),
        applied: match reconciler.applied_generation(runtime) {
            // We applied this very generation (a force patch of a Runtime that was behind):
            // the cached Shoot may not show it yet.
            Some(ours) if Some(ours) == runtime.metadata.generation => Some(ours),
            ours => annotated.max(ours),
        },
        // Not asked while suspended: its first sight takes the baseline, which a suspension
        // must not set.
        drifted: !suspended && reconciler.shoot_drifted(runtime, shoot),
        registry_cache_missing: kim_shared::convert::registry_cache_missing(runtime, shoot),
        registry_cache_credentials_changed: reconciler.ctx.settings.registry_cache.enabled
            && kim_shared::convert::registry_cache_credentials_changed(runtime, shoot),
        audit_log_pending: super::audit_log::shoot_patch_pending(reconciler, draft),
        acl_outdated: super::acl::outdated(reconciler, runtime, shoot),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PatchDecision {
    Patch(&'static str),
    Suspended,
    UpToDate,
    /// The Shoot reflects this later generation of the Runtime: apply nothing.
    RuntimeBehind(i64),
    /// Patch when the live Shoot is not on the dedicated audit log's tenant (a request:
    /// [`super::audit_log::shoot_patch_needed`]).
    IfAuditLogElsewhere,
}

/// Why a Ready Runtime's Shoot is patched though neither the Runtime nor anything of ours
/// changed.
const DRIFT: &str = "Shoot spec changed outside of the infrastructure manager";

/// The one patch decision: every reason to patch the Shoot passes the suspend annotation first,
/// and a Runtime behind its Shoot is held before both.
fn should_patch(f: &PatchFacts) -> PatchDecision {
    // Only a restored or re-created Runtime is behind the generation applied from it: its
    // older spec is not written anywhere, suspended or not, until someone forces it.
    if let Some(a) = f.applied
        && a > f.generation
        && !f.forced
    {
        return PatchDecision::RuntimeBehind(a);
    }
    if f.suspended {
        return PatchDecision::Suspended;
    }
    if f.forced {
        return PatchDecision::Patch("force-patch annotation");
    }
    match f.applied {
        None => return PatchDecision::Patch("runtime-generation annotation missing"),
        Some(a) if a < f.generation => {
            return PatchDecision::Patch("Runtime generation ahead of the Shoot");
        }
        Some(_) => {}
    }
    if f.drifted {
        return PatchDecision::Patch(DRIFT);
    }
    if f.registry_cache_missing {
        return PatchDecision::Patch("registry caches asked for are not on the Shoot");
    }
    if f.registry_cache_credentials_changed {
        return PatchDecision::Patch("registry cache credentials changed in the runtime cluster");
    }
    if f.acl_outdated {
        return PatchDecision::Patch("API server ACL ConfigMap changed");
    }
    if f.audit_log_pending {
        return PatchDecision::IfAuditLogElsewhere;
    }
    PatchDecision::UpToDate
}

async fn patch_shoot(
    reconciler: &Arc<Reconciler>,
    runtime: &Runtime,
    cached: &Shoot,
    draft: &mut StatusDraft,
    why: &'static str,
) -> Result<Action, Error> {
    // Gardener refused this Runtime's last write for now, or refused this generation: no
    // request before the hold ends.
    if let Some(wait) = reconciler
        .busy_hold(runtime)
        .or_else(|| reconciler.backoff_remaining(runtime))
    {
        return Ok(Action::requeue(wait));
    }
    tracing::info!(why, "patching Shoot");
    // The watch cache holds a slim Shoot; the conversion and the full-update decision need
    // the whole live object (and a fresh one is the better base for a patch anyway).
    let live = match reconciler.get_shoot_live(&cached.name_any()).await {
        // Gone since the cache saw it, or going: the next event (deletion) decides what to do.
        // An apply now would make a Shoot anew once the deletion finishes, past the create
        // limit and its checks for a create already sent.
        Ok(Some(s)) if s.metadata.deletion_timestamp.is_some() => {
            return Ok(Action::requeue(RETRY));
        }
        Ok(Some(s)) => s,
        Ok(None) => return Ok(Action::requeue(RETRY)),
        Err(e) => {
            return Ok(patch_failure(
                reconciler,
                runtime,
                draft,
                "Gardener API shoot get error",
                &e,
            ));
        }
    };
    let live = &live;
    // Read before the conversion reads them: a ConfigMap change in between is not mistaken
    // for one this patch carried.
    let acl = super::acl::addresses(reconciler, runtime).ok().flatten();
    let drift = why == DRIFT;
    let converted = match prepare(reconciler, runtime, Some(live), draft, drift).await {
        Ok(c) => c,
        Err(action) => return Ok(action),
    };
    let acl_on = |s: &Shoot| s.spec.extension_enabled(kim_shared::names::extension::ACL);
    if acl_on(live) && !acl_on(&converted.shoot) {
        tracing::warn!(
            "the Shoot's API server ACL is switched off: --api-server-acl-enabled is off, or the Runtime asks for no ACL"
        );
    }
    let api = reconciler.shoots_api();
    let name = live.name_any();
    // Before the apply too, so that this apply already releases what the conversion dropped
    // (the hand-over after an earlier apply may have lost a race with Gardener's writes).
    hand_over(&api, live).await;
    // Drift is undone by the apply, which leaves a pool someone else added (an operator during
    // an incident): it goes with the Runtime's next change, as upstream's does, not seconds
    // after it was added.
    if let Some(update) =
        FullUpdate::needed(live, &converted.shoot, converted.workers_removed && !drift)
        && let Err(e) = full_update(reconciler, &name, update, &converted.shoot).await
    {
        let what = "Gardener API shoot update error";
        return Ok(write_failed(reconciler, runtime, draft, live, drift, what, &e).await);
    }
    let mut body = serde_json::to_value(&converted.shoot).map_err(Error::Serialize)?;
    body["apiVersion"] = json!("core.gardener.cloud/v1beta1");
    body["kind"] = json!("Shoot");
    if let Some(o) = body.as_object_mut() {
        o.remove("status");
    }
    if let Some(m) = body["metadata"].as_object_mut() {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    let pp = PatchParams::apply(names::FIELD_MANAGER).force();
    let patched = match api.patch(&name, &pp, &Patch::Apply(body)).await {
        Ok(s) => s,
        Err(e) => {
            let what = "Gardener API shoot patch error";
            return Ok(write_failed(reconciler, runtime, draft, live, drift, what, &e).await);
        }
    };
    reconciler.gardener_answered(runtime);
    reconciler.record_applied(runtime, &patched);
    hand_over(&api, &patched).await;
    reconciler.record_acl_applied(runtime, acl.map(|a| (a, patched.metadata.generation)));
    if runtime
        .annotations()
        .contains_key(names::ANNOTATION_FORCE_PATCH_RECONCILIATION)
    {
        reconciler
            .annotate(
                runtime,
                names::ANNOTATION_FORCE_PATCH_RECONCILIATION,
                serde_json::Value::Null,
            )
            .await
            .map_err(|e| Error::api("remove the force-patch annotation from the Runtime", e))?;
    }
    draft.shoot(Some(&patched));
    if drift && patched.metadata.generation == live.metadata.generation {
        // Nothing of ours had changed: Gardener's own operations (waking the cluster,
        // migrating its control plane, a credentials rotation) move the generation too. The
        // Runtime stays as it is; its cluster may not answer now.
        return Ok(Action::await_change());
    }
    if patched.metadata.generation == live.metadata.generation {
        draft.set(
            condition::PROVISIONED,
            CondStatus::True,
            reason::PROCESSING,
            "Shoot patched without changes",
        );
        return cluster::after_provisioned(reconciler, runtime, &patched, draft).await;
    }
    draft.set(
        condition::PROVISIONED,
        CondStatus::Unknown,
        reason::PROCESSING,
        "Shoot is pending for update after patch",
    );
    draft.state(RuntimeState::Pending);
    Ok(Action::requeue(SAFETY_REQUEUE))
}

/// [`super::co_owned::hand_over`], logged; a failure only delays the release of fields a later
/// conversion drops until the next attempt.
async fn hand_over(api: &Api<Shoot>, shoot: &Shoot) {
    match super::co_owned::hand_over(api, shoot).await {
        Ok(true) => tracing::info!("fields the Shoot's create co-owned handed to the apply"),
        Ok(false) => {}
        Err(e) => tracing::info!(error = %e, "fields co-owned with the apply not handed over"),
    }
}

/// What follows a refused write of the Shoot (the full update or the apply) that started from
/// `live`: a drift correction (`drift`) Gardener refuses for good is kept ([`drift_kept`]);
/// anything else is a failed patch.
async fn write_failed(
    reconciler: &Reconciler,
    runtime: &Runtime,
    draft: &mut StatusDraft,
    live: &Shoot,
    drift: bool,
    what: &str,
    e: &kube::Error,
) -> Action {
    if drift && refused_for_good(e) {
        drift_kept(reconciler, runtime, live, e).await
    } else {
        patch_failure(reconciler, runtime, draft, what, e)
    }
}

/// Whether Gardener's validation or admission refuses the Shoot as written (422 `Invalid`), so
/// that sending it again cannot succeed. Other permanent answers (a 400 or 415 about our own
/// request) are failures of ours, reported as such.
fn refused_for_good(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422 && s.reason == "Invalid")
}

/// Gardener refuses to undo a change someone made to the Shoot of a Ready Runtime (a change it
/// will not revert). The Runtime stays as it is: its spec and its cluster are unchanged, and a
/// `Failed` would tell KEB that an update failed. The Shoot as it is becomes the baseline, and a
/// Warning Event (`DriftNotCorrected`) and the log say what was refused.
async fn drift_kept(
    reconciler: &Reconciler,
    runtime: &Runtime,
    live: &Shoot,
    e: &kube::Error,
) -> Action {
    reconciler.keep_drift(runtime, live);
    let cause = classify::message(e);
    tracing::warn!(error = %e, "Gardener refuses to undo a change of the Shoot; the change is kept");
    reconciler
        .warn(
            runtime,
            "DriftNotCorrected",
            "PatchShoot",
            format!(
                "Shoot {} was changed outside of the infrastructure manager and Gardener refuses to undo it; the change is kept: {cause}",
                live.name_any()
            ),
        )
        .await;
    Action::await_change()
}

fn patch_failure(
    reconciler: &Reconciler,
    runtime: &Runtime,
    draft: &mut StatusDraft,
    what: &str,
    e: &kube::Error,
) -> Action {
    let kind = classify::classify(e);
    if kind == ApiErrorKind::Conflict {
        tracing::info!(error = %e, "conflict while writing the Shoot; retrying");
        draft.set(
            condition::PROVISIONED,
            CondStatus::Unknown,
            reason::PROCESSING,
            "Shoot is pending for update after conflict error",
        );
        draft.state(RuntimeState::Pending);
        return Action::requeue(Duration::from_secs(1));
    }
    let cause = classify::message(e);
    let retried = match kind {
        ApiErrorKind::Busy => Some((
            reason::GARDENER_BUSY,
            format!("Gardener is busy, retrying: {what}: {cause}"),
        )),
        ApiErrorKind::Transient => Some((reason::PROCESSING, format!("{what}: {cause}"))),
        // Upstream retries a forbidden patch as pending (Gardener answers 403 now and then to
        // writes that are allowed), and KEB fails an update at once on `Failed`.
        ApiErrorKind::Permanent if classify::is_forbidden(e) => Some((
            reason::PROCESSING,
            format!("Shoot is pending for update after forbidden error: {what}: {cause}"),
        )),
        _ => None,
    };
    match retried {
        Some((why, message)) => {
            // Held until then: no patch of this Runtime before (see `patch_shoot`).
            let wait = reconciler.gardener_refused(runtime, kind, "patch");
            tracing::info!(error = %e, retry_in = ?wait, "{what}; retrying");
            draft.set(condition::PROVISIONED, CondStatus::Unknown, why, message);
            draft.state(RuntimeState::Pending);
            Action::requeue(wait)
        }
        None => {
            let hold = reconciler.back_off(runtime);
            tracing::warn!(error = %e, retry_in = ?hold, "{what}");
            draft.set(
                condition::PROVISIONED,
                CondStatus::False,
                reason::PROCESSING_ERR,
                format!("{what}: {cause}"),
            );
            draft.state(RuntimeState::Failed);
            Action::requeue(hold)
        }
    }
}

/// Follows the Shoot's `lastOperation` (upstream `sFnWaitForShootCreation` / `Reconcile`).
/// Returns `None` when the Shoot is reconciled and the next steps may run.
fn follow_last_operation(shoot: &Shoot, draft: &mut StatusDraft) -> Option<Action> {
    let status = shoot.status.as_ref();
    let Some(op) = status.and_then(|s| s.last_operation.as_ref()) else {
        draft.set(
            condition::PROVISIONED,
            CondStatus::Unknown,
            reason::SHOOT_CREATION_PENDING,
            "Shoot is pending",
        );
        draft.state(RuntimeState::Pending);
        return Some(Action::requeue(SAFETY_REQUEUE));
    };
    // A finished operation that predates the Shoot's current generation (gardenlet sets
    // observedGeneration when it starts the next one) says nothing about our latest patch:
    // right after a patch the previous Create/Succeeded is still the last operation, and
    // trusting it marked the Runtime Ready before Gardener even started the update.
    let stale = matches!(
        (status.and_then(|s| s.observed_generation), shoot.metadata.generation),
        (Some(seen), Some(current)) if seen < current
    );
    if stale && matches!(op.state.as_str(), state::SUCCEEDED | state::FAILED) {
        draft.set(
            condition::PROVISIONED,
            CondStatus::Unknown,
            reason::PROCESSING,
            "Shoot is pending for update after patch",
        );
        draft.state(RuntimeState::Pending);
        return Some(Action::requeue(SAFETY_REQUEUE));
    }
    let creating = op.type_ == kind::CREATE;
    let errors = status
        .and_then(|s| s.last_errors.clone())
        .unwrap_or_default();
    match op.state.as_str() {
        state::SUCCEEDED => {
            // A Ready Runtime that already reports a finished provisioning keeps the reason it
            // has: upstream leaves Ready Runtimes alone unless their Shoot is mid-reconcile, so
            // after a take-over its last word ("Shoot patched without changes", or
            // `ShootCreationCompleted` on a Shoot Gardener has reconciled since) still holds.
            // Our own patches set the condition to Unknown first, so their outcome is still
            // written below.
            let finished = draft.current_state() == RuntimeState::Ready
                && draft
                    .condition(condition::PROVISIONED)
                    .is_some_and(|c| c.status == CondStatus::True.as_str());
            if finished {
                return None;
            }
            if creating {
                draft.set(
                    condition::PROVISIONED,
                    CondStatus::True,
                    reason::SHOOT_CREATION_COMPLETED,
                    "Shoot creation completed",
                );
            } else {
                draft.set(
                    condition::PROVISIONED,
                    CondStatus::True,
                    reason::CONFIGURATION_COMPLETED,
                    "Runtime processing completed successfully",
                );
            }
            None
        }
        state::FAILED => {
            if classify::is_retryable(&errors) {
                let msg = if creating {
                    "Retryable gardener errors during cluster provisioning"
                } else {
                    "Retryable gardener errors during cluster reconcile"
                };
                draft.set(
                    condition::PROVISIONED,
                    CondStatus::Unknown,
                    reason::SHOOT_CREATION_PENDING,
                    msg,
                );
                draft.state(RuntimeState::Pending);
                Some(Action::requeue(Duration::from_secs(60)))
            } else {
                if creating {
                    draft.set(
                        condition::PROVISIONED,
                        CondStatus::False,
                        reason::CREATION_ERR,
                        "Shoot creation failed",
                    );
                } else {
                    draft.set(
                        condition::PROVISIONED,
                        CondStatus::False,
                        reason::PROCESSING_ERR,
                        classify::joined_codes(&errors),
                    );
                }
                draft.state(RuntimeState::Failed);
                Some(Action::await_change())
            }
        }
        // Processing, Pending, Aborted, Error (Gardener retries Error itself)
        _ => {
            if creating && classify::no_seed_of_provider(&op.description) {
                draft.set(
                    condition::PROVISIONED,
                    CondStatus::False,
                    reason::CREATION_ERR,
                    "Shoot creation failed, no matching seeds",
                );
                draft.state(RuntimeState::Failed);
                return Some(Action::await_change());
            }
            if creating {
                draft.set(
                    condition::PROVISIONED,
                    CondStatus::Unknown,
                    reason::SHOOT_CREATION_PENDING,
                    "Shoot creation in progress",
                );
            } else {
                draft.set(
                    condition::PROVISIONED,
                    CondStatus::Unknown,
                    reason::PROCESSING,
                    "Shoot update is in progress",
                );
            }
            draft.state(RuntimeState::Pending);
            Some(Action::requeue(SAFETY_REQUEUE))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{PatchDecision, PatchFacts, awake_and_settled, should_patch, status_is_of};
    use kim_shared::api::Runtime;
    use kim_shared::gardener::Shoot;

    #[test]
    fn a_cluster_is_configured_again_only_awake_and_settled() {
        let shoot = |hibernated: bool, generation: i64, observed: i64, state: &str| -> Shoot {
            let mut shoot = Shoot::default();
            shoot.metadata.generation = Some(generation);
            shoot.spec.hibernation = Some(kim_shared::gardener::shoot::Hibernation {
                enabled: Some(hibernated),
                ..Default::default()
            });
            shoot.status = Some(
                serde_json::from_value(serde_json::json!({
                    "observedGeneration": observed, "lastOperation": {
                        "description": "", "lastUpdateTime": "2026-12-04T10:00:00Z",
                        "progress": 100, "state": state, "type": "Reconcile"}}))
                .expect("a Shoot status"),
            );
            shoot
        };
        assert!(awake_and_settled(&shoot(false, 3, 3, "Succeeded")));
        assert!(!awake_and_settled(&shoot(true, 3, 3, "Succeeded")));
        assert!(!awake_and_settled(&shoot(false, 4, 3, "Succeeded")));
        assert!(!awake_and_settled(&shoot(false, 3, 3, "Processing")));
        assert!(!awake_and_settled(&Shoot::default()));
    }

    #[test]
    fn a_status_is_of_a_shoot_created_no_later_than_the_operation_it_reports() {
        let runtime = |reported: Option<&str>| -> Runtime {
            let mut runtime = Runtime::new("rt", Default::default());
            runtime.status = Some(
                serde_json::from_value(serde_json::json!({
                    "state": "Ready",
                    "shootLastOperation": reported.map(|t| serde_json::json!({
                        "description": "", "lastUpdateTime": t, "progress": 100,
                        "state": "Succeeded", "type": "Reconcile"})),
                }))
                .expect("status"),
            );
            runtime
        };
        let shoot = |created: Option<&str>| -> Shoot {
            let mut shoot = Shoot::default();
            shoot.metadata.creation_timestamp = created.map(|t| {
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t.parse().expect("time"))
            });
            shoot
        };
        let reported = Some("2026-12-04T10:00:00Z");
        assert!(status_is_of(
            &runtime(reported),
            &shoot(Some("2026-12-04T09:00:00Z"))
        ));
        assert!(status_is_of(
            &runtime(reported),
            &shoot(Some("2026-12-04T10:00:00Z"))
        ));
        // Made anew after the status was written.
        assert!(!status_is_of(
            &runtime(reported),
            &shoot(Some("2026-12-04T10:00:01Z"))
        ));
        // Nothing to compare: as before.
        assert!(status_is_of(
            &runtime(None),
            &shoot(Some("2026-12-04T10:00:01Z"))
        ));
        assert!(status_is_of(&runtime(reported), &shoot(None)));
    }

    fn up_to_date() -> PatchFacts {
        PatchFacts {
            generation: 3,
            applied: Some(3),
            ..Default::default()
        }
    }

    /// Every reason to patch, each alone.
    fn each_reason() -> Vec<PatchFacts> {
        let base = up_to_date();
        vec![
            PatchFacts {
                forced: true,
                ..base
            },
            PatchFacts {
                applied: None,
                ..base
            },
            PatchFacts {
                applied: Some(2),
                ..base
            },
            PatchFacts {
                drifted: true,
                ..base
            },
            PatchFacts {
                registry_cache_missing: true,
                ..base
            },
            PatchFacts {
                registry_cache_credentials_changed: true,
                ..base
            },
            PatchFacts {
                audit_log_pending: true,
                ..base
            },
            PatchFacts {
                acl_outdated: true,
                ..base
            },
        ]
    }

    #[test]
    fn nothing_to_do_is_up_to_date() {
        assert_eq!(should_patch(&up_to_date()), PatchDecision::UpToDate);
    }

    #[test]
    fn a_runtime_behind_its_shoot_is_not_applied_unless_forced() {
        let behind = PatchFacts {
            applied: Some(4),
            ..up_to_date()
        };
        assert_eq!(should_patch(&behind), PatchDecision::RuntimeBehind(4));
        // No other reason writes its older spec over the Shoot.
        for facts in each_reason()
            .into_iter()
            .filter(|f| !f.forced && f.applied.is_some())
        {
            assert_eq!(
                should_patch(&PatchFacts {
                    applied: Some(4),
                    ..facts
                }),
                PatchDecision::RuntimeBehind(4),
                "{facts:?}"
            );
        }
        let forced = PatchFacts {
            forced: true,
            ..behind
        };
        assert_eq!(
            should_patch(&forced),
            PatchDecision::Patch("force-patch annotation")
        );
        // Suspended or not: the suspension does not stop the runtime-cluster steps.
        let suspended = PatchFacts {
            suspended: true,
            ..behind
        };
        assert_eq!(should_patch(&suspended), PatchDecision::RuntimeBehind(4));
        let forced_while_suspended = PatchFacts {
            forced: true,
            ..suspended
        };
        assert_eq!(
            should_patch(&forced_while_suspended),
            PatchDecision::Suspended
        );
    }

    #[test]
    fn each_reason_patches_unless_suspended() {
        for facts in each_reason() {
            let decision = should_patch(&facts);
            assert!(
                matches!(
                    decision,
                    PatchDecision::Patch(_) | PatchDecision::IfAuditLogElsewhere
                ),
                "{facts:?}: {decision:?}"
            );
            let suspended = PatchFacts {
                suspended: true,
                ..facts
            };
            assert_eq!(
                should_patch(&suspended),
                PatchDecision::Suspended,
                "{facts:?}"
            );
        }
    }

    #[test]
    fn the_audit_log_and_credentials_reasons_are_named() {
        let reasons = each_reason();
        assert_eq!(
            should_patch(&reasons[5]),
            PatchDecision::Patch("registry cache credentials changed in the runtime cluster")
        );
        assert_eq!(
            should_patch(&reasons[6]),
            PatchDecision::IfAuditLogElsewhere
        );
        // A patch for another reason takes the dedicated tenant along (the conversion reads it).
        let both = PatchFacts {
            forced: true,
            ..reasons[6]
        };
        assert_eq!(
            should_patch(&both),
            PatchDecision::Patch("force-patch annotation")
        );
    }
}
