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
use kim_shared::api::GardenerCluster;
use kim_shared::api::runtime_access::{
    AccessSecretRef, RuntimeAccess, RuntimeAccessStatus, ShootObjectRef,
};
use kim_shared::names;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::finalizer::{self, finalizer};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::Instrument;

use super::kubeconfig::token_kubeconfig;
use super::record::{self, SecretFacts};
use super::shoot::{self, RbacObject};
use super::shoot_client::{AdminSecret, ShootAccess, ShootClients};
use super::token::{self, ANNOTATION_TOKEN_EXPIRATION, TokenDecision};
use super::{AccessArgs, CONDITION_TYPE, CONTROLLER, FINALIZER};
use crate::Context;
use crate::gardener_cluster::rotation::format_last_sync;

/// Field manager of what this reconciler applies in the KCP.
pub const FIELD_MANAGER: &str = "kim-runtime-access";

/// How often to look again while the runtime has no admin kubeconfig yet.
const WAIT_FOR_RUNTIME: Duration = Duration::from_secs(30);

/// Backoff after a failed reconcile.
const RETRY_AFTER: Duration = Duration::from_secs(15);

/// State shared by all reconciles.
pub struct Reconciler {
    ctx: Arc<Context>,
    args: AccessArgs,
    clients: ShootClients,
}

impl Reconciler {
    /// A reconciler with the given flags; its shoot clients count requests in `metrics`.
    pub fn new(
        ctx: Arc<Context>,
        args: AccessArgs,
        metrics: Arc<super::shoot_client::ShootMetrics>,
    ) -> Self {
        Self {
            ctx,
            args,
            clients: ShootClients::new(metrics),
        }
    }
}

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
}

fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}

/// Entry point for the controller.
pub async fn reconcile(ra: Arc<RuntimeAccess>, r: Arc<Reconciler>) -> Result<Action, Error> {
    let started = Instant::now();
    let requests: Api<RuntimeAccess> =
        Api::namespaced(r.ctx.kcp.clone(), &ra.namespace().unwrap_or_default());
    let span = tracing::info_span!(
        "reconcile",
        controller = CONTROLLER,
        namespace = %ra.namespace().unwrap_or_default(),
        name = %ra.name_any(),
        runtime_id = %ra.spec.runtime_id,
    );
    let result = finalizer(&requests, FINALIZER, ra, |event| async {
        match event {
            finalizer::Event::Apply(ra) => apply(&r, &ra).await,
            finalizer::Event::Cleanup(ra) => cleanup(&r, &ra).await,
        }
    })
    .instrument(span)
    .await;
    let result = crate::finalizing::settle(result, CONTROLLER, Error::Finalizer);
    let outcome = if result.is_ok() { "success" } else { "error" };
    r.ctx
        .metrics
        .observe_reconcile(CONTROLLER, outcome, started.elapsed());
    result
}

/// Logs at warn (the failure is in the status and retried) and backs off.
pub fn error_policy(ra: Arc<RuntimeAccess>, error: &Error, _r: Arc<Reconciler>) -> Action {
    tracing::warn!(
        controller = CONTROLLER,
        namespace = ra.namespace().unwrap_or_default(),
        name = ra.name_any(),
        error = %error,
        "reconcile failed; retrying"
    );
    Action::requeue(RETRY_AFTER)
}

/// The admin kubeconfig Secret of a runtime, read from the KCP (no shoot call).
struct AdminKubeconfig {
    namespace: String,
    name: String,
    resource_version: Option<String>,
    kubeconfig: ByteString,
}

/// `Ok(None)`: the runtime has no admin kubeconfig (yet, or any more).
async fn admin_kubeconfig(
    r: &Reconciler,
    ra: &RuntimeAccess,
) -> Result<Option<AdminKubeconfig>, Error> {
    let ns = ra.namespace().unwrap_or_default();
    let runtime = &ra.spec.runtime_id;
    let clusters: Api<GardenerCluster> = Api::namespaced(r.ctx.kcp.clone(), &ns);
    let Some(gc) = clusters
        .get_opt(runtime)
        .await
        .map_err(api(format!("reading GardenerCluster {ns}/{runtime}")))?
    else {
        return Ok(None);
    };
    let loc = &gc.spec.kubeconfig.secret;
    let secrets: Api<Secret> = Api::namespaced(r.ctx.kcp.clone(), &loc.namespace);
    let Some(mut secret) = secrets.get_opt(&loc.name).await.map_err(api(format!(
        "reading Secret {}/{}",
        loc.namespace, loc.name
    )))?
    else {
        r.clients.forget(&loc.namespace, &loc.name);
        return Ok(None);
    };
    let Some(kubeconfig) = secret.data.as_mut().and_then(|d| d.remove(&loc.key)) else {
        r.clients.forget(&loc.namespace, &loc.name);
        return Ok(None);
    };
    Ok(Some(AdminKubeconfig {
        namespace: loc.namespace.clone(),
        name: loc.name.clone(),
        resource_version: secret.metadata.resource_version.take(),
        kubeconfig,
    }))
}

/// The shoot client for an admin kubeconfig (reused while its Secret is unchanged).
async fn shoot_access(
    r: &Reconciler,
    ra: &RuntimeAccess,
    admin: &AdminKubeconfig,
) -> Result<ShootAccess, Error> {
    r.clients
        .get(&AdminSecret {
            namespace: &admin.namespace,
            name: &admin.name,
            resource_version: admin.resource_version.as_deref(),
            kubeconfig: &admin.kubeconfig.0,
        })
        .await
        .map_err(|e| Error::AdminKubeconfig {
            runtime: ra.spec.runtime_id.clone(),
            reason: e.to_string(),
        })
}

/// A failed step in the shoot: what was being done and the error (no secret values).
struct ShootStepFailed {
    what: String,
    error: String,
}

/// Ensures the ServiceAccount, the (Cluster)Role and binding, and removes the objects of an
/// earlier spec (`previous`). Returns what this request created, sorted.
async fn ensure_shoot_objects(
    client: &kube::Client,
    ra: &RuntimeAccess,
    previous: Vec<ShootObjectRef>,
) -> Result<Vec<ShootObjectRef>, ShootStepFailed> {
    let failed = |what: String| {
        move |e: kube::Error| ShootStepFailed {
            what,
            error: e.to_string(),
        }
    };
    let mut created: Vec<ShootObjectRef> = Vec::new();
    let sa = shoot::ensure_service_account(client, ra)
        .await
        .map_err(failed("creating the ServiceAccount".to_owned()))?;
    created.extend(sa);
    for obj in &shoot::rbac_objects(ra) {
        let what = format!("applying {} {}", obj.reference().kind, obj.reference().name);
        shoot::apply_rbac(client, obj).await.map_err(failed(what))?;
        created.push(obj.reference());
    }
    // Objects of an earlier spec (for example a Role replaced by a roleRef) are removed.
    let mut stale: Vec<ShootObjectRef> = previous
        .into_iter()
        .filter(|o| !created.contains(o))
        .collect();
    stale.sort();
    stale.dedup();
    shoot::deletion_order(&mut stale);
    for obj in &stale {
        let what = format!("deleting stale {} {}", obj.kind, obj.name);
        shoot::delete(client, obj).await.map_err(failed(what))?;
    }
    created.sort();
    created.dedup();
    Ok(created)
}

/// Records in the KCP Secret which objects were applied for which fingerprint (its own field
/// manager: the kubeconfig and token annotations stay untouched).
async fn record_shoot_objects(
    secrets: &Api<Secret>,
    name: &str,
    fingerprint: &str,
    objects: &[ShootObjectRef],
) -> Result<(), kube::Error> {
    let list = serde_json::to_string(objects).unwrap_or_else(|_| "[]".to_owned());
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
    secrets
        .patch(
            name,
            &PatchParams::apply(record::SHOOT_STATE_FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map(|_| ())
}

async fn apply(r: &Reconciler, ra: &RuntimeAccess) -> Result<Action, Error> {
    let now = Timestamp::now();
    let findings = validate_runtime_access(ra, &r.args.policy());
    if !findings.is_allowed() {
        let msg = findings
            .violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        write_status(
            r,
            ra,
            status_with(ra, "Error", "False", "InvalidSpec", &msg, now),
        )
        .await?;
        return Ok(Action::await_change());
    }
    let Some(admin) = admin_kubeconfig(r, ra).await? else {
        let msg = format!(
            "waiting for the admin kubeconfig of GardenerCluster {}",
            ra.spec.runtime_id
        );
        write_status(
            r,
            ra,
            status_with(ra, "Pending", "False", "RuntimeNotReady", &msg, now),
        )
        .await?;
        return Ok(Action::requeue(WAIT_FOR_RUNTIME));
    };

    // The KCP Secret, read fresh: the token and what was applied in the shoot, durably.
    let name = secret_name(ra);
    let key = secret_key(ra);
    let ns = ra.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(r.ctx.kcp.clone(), &ns);
    let existing = secrets
        .get_opt(&name)
        .await
        .map_err(api(format!("reading Secret {ns}/{name}")))?;
    let facts = SecretFacts::read(existing.as_ref(), &key);
    let decision = token::decide(facts.token, r.args.rotation_ratio, now);
    let fingerprint = shoot::fingerprint(ra);

    // The shoot is reached only when something is to be done there: objects applied for
    // another spec (or never), or a token to issue (which also re-applies the objects, the
    // periodic drift correction). A reconcile with nothing to do makes no shoot call.
    let mut access: Option<ShootAccess> = None;
    let shoot_objects = if record::needs_shoot(&facts, &fingerprint, decision) {
        let a = shoot_access(r, ra, &admin).await?;
        // What this request created before: the durable record and the (maybe older) status.
        let mut previous = facts.applied_objects.clone().unwrap_or_default();
        previous.extend(
            ra.status
                .as_ref()
                .map(|s| s.shoot_objects.clone())
                .unwrap_or_default(),
        );
        match ensure_shoot_objects(&a.client, ra, previous).await {
            Ok(created) => {
                access = Some(a);
                created
            }
            Err(f) => return fail(r, ra, "ShootAccessFailed", &f.what, f.error, now).await,
        }
    } else {
        facts
            .applied_with(&fingerprint)
            .map(<[ShootObjectRef]>::to_vec)
            .unwrap_or_default()
    };

    let (reason, expires, requeue) = match decision {
        TokenDecision::Keep { requeue_after } => {
            // From the Secret, never from the cached status: a cache that has not seen the
            // last rotation's status must not turn KubeconfigRotated back into Issued.
            let reason = facts.kept_reason(ra.status.as_ref());
            let expires = facts
                .token
                .expires
                .and_then(crate::gardener_cluster::rotation::parse_last_sync);
            (reason, expires, requeue_after)
        }
        TokenDecision::Issue(cause) => {
            let access = match access.take() {
                Some(a) => a,
                None => shoot_access(r, ra, &admin).await?,
            };
            let lifetime = ra.spec.token_expiration_seconds.unwrap_or_else(|| {
                i64::try_from(r.args.token_expiration.as_secs()).unwrap_or(3600)
            });
            let issued = match shoot::request_token(&access.client, ra, lifetime).await {
                Ok(t) => t,
                Err(e) => {
                    return fail(
                        r,
                        ra,
                        "TokenRequestFailed",
                        "requesting a ServiceAccount token",
                        e,
                        now,
                    )
                    .await;
                }
            };
            let user = service_account_user(&ra.spec);
            let kubeconfig = token_kubeconfig(
                &access.endpoint,
                &user,
                &ra.spec.service_account.namespace,
                &issued.token,
            )
            .map_err(|e| Error::AdminKubeconfig {
                runtime: ra.spec.runtime_id.clone(),
                reason: e.to_string(),
            })?;
            let reason = record::issue_reason(cause);
            let desired = kubeconfig_secret(
                ra,
                &name,
                &key,
                kubeconfig,
                IssuedAt {
                    now,
                    expires: issued.expires,
                    reason,
                },
            );
            if let Err(e) = secrets
                .patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&desired),
                )
                .await
            {
                return fail(
                    r,
                    ra,
                    "SecretWriteFailed",
                    &format!("writing Secret {ns}/{name}"),
                    e,
                    now,
                )
                .await;
            }
            tracing::info!(controller = CONTROLLER, name = ra.name_any(), runtime_id = %ra.spec.runtime_id, secret = %name, cause = ?cause, "ServiceAccount kubeconfig written");
            let lifetime_left = issued.expires.duration_since(now).as_secs_f64().max(1.0);
            let requeue =
                Duration::from_secs_f64(lifetime_left * token::clamp_ratio(r.args.rotation_ratio));
            (reason, Some(issued.expires), requeue)
        }
    };
    if facts.applied_with(&fingerprint) != Some(shoot_objects.as_slice())
        && let Err(e) = record_shoot_objects(&secrets, &name, &fingerprint, &shoot_objects).await
    {
        return fail(
            r,
            ra,
            "SecretWriteFailed",
            &format!("recording the shoot objects in Secret {ns}/{name}"),
            e,
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
    write_status(r, ra, status).await?;
    Ok(Action::requeue(requeue))
}

async fn fail(
    r: &Reconciler,
    ra: &RuntimeAccess,
    reason: &str,
    what: &str,
    e: impl std::fmt::Display,
    now: Timestamp,
) -> Result<Action, Error> {
    let msg = format!("{what}: {e}");
    write_status(r, ra, status_with(ra, "Error", "False", reason, &msg, now)).await?;
    Err(Error::Step(msg))
}

/// Removes what the request created in the shoot (when the shoot is still reachable) and its
/// KCP Secret.
async fn cleanup(r: &Reconciler, ra: &RuntimeAccess) -> Result<Action, Error> {
    let ns = ra.namespace().unwrap_or_default();
    let name = secret_name(ra);
    let secrets: Api<Secret> = Api::namespaced(r.ctx.kcp.clone(), &ns);
    let mut objs: Vec<ShootObjectRef> = ra
        .status
        .as_ref()
        .map(|s| s.shoot_objects.clone())
        .unwrap_or_default();
    // What the Secret recorded (durable even when the cached status is older).
    let existing = secrets
        .get_opt(&name)
        .await
        .map_err(api(format!("reading Secret {ns}/{name}")))?;
    objs.extend(
        SecretFacts::read(existing.as_ref(), &secret_key(ra))
            .applied_objects
            .unwrap_or_default(),
    );
    // The role and binding carry names only this request uses: delete them even if a status
    // write was lost. The ServiceAccount only when a record says we created it.
    objs.extend(shoot::rbac_objects(ra).iter().map(RbacObject::reference));
    objs.sort();
    objs.dedup();
    shoot::deletion_order(&mut objs);
    match admin_kubeconfig(r, ra).await? {
        Some(admin) => {
            let access = shoot_access(r, ra, &admin).await?;
            for obj in &objs {
                shoot::delete(&access.client, obj)
                    .await
                    .map_err(api(format!(
                        "deleting {} {} in the shoot",
                        obj.kind, obj.name
                    )))?;
            }
        }
        // The runtime (and with it the shoot) is gone or going: nothing left to clean there.
        None => {
            tracing::info!(controller = CONTROLLER, name = ra.name_any(), runtime_id = %ra.spec.runtime_id, "runtime has no admin kubeconfig; skipping shoot cleanup")
        }
    }
    match secrets.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(api(format!("deleting Secret {ns}/{name}"))(e)),
    }
    tracing::info!(
        controller = CONTROLLER,
        name = ra.name_any(),
        "RuntimeAccess cleaned up"
    );
    Ok(Action::await_change())
}

/// When and why a token was issued, as recorded on its Secret.
struct IssuedAt {
    now: Timestamp,
    expires: Timestamp,
    reason: &'static str,
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
            annotations: Some(BTreeMap::from([
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
            ])),
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
            message: message.to_owned(),
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
    r: &Reconciler,
    ra: &RuntimeAccess,
    status: RuntimeAccessStatus,
) -> Result<(), Error> {
    if ra.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let requests: Api<RuntimeAccess> =
        Api::namespaced(r.ctx.kcp.clone(), &ra.namespace().unwrap_or_default());
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
    publish_reason_change(r, ra, &status).await;
    Ok(())
}

/// One Event per change of the condition reason (messages hold names, never credentials).
async fn publish_reason_change(r: &Reconciler, ra: &RuntimeAccess, status: &RuntimeAccessStatus) {
    let reason_of = |s: Option<&RuntimeAccessStatus>| {
        s.and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_TYPE))
            .map(|c| (c.reason.clone(), c.status.clone(), c.message.clone()))
    };
    let Some((reason, cond_status, message)) = reason_of(Some(status)) else {
        return;
    };
    if reason_of(ra.status.as_ref()).map(|(r, _, _)| r) == Some(reason.clone()) {
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
    if let Err(e) = r.ctx.recorder.publish(&event, &ra.object_ref(&())).await {
        tracing::debug!(controller = CONTROLLER, error = %e, "event not published");
    }
}
