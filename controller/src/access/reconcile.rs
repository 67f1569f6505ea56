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

use super::kubeconfig::{ClusterEndpoint, cluster_endpoint, token_kubeconfig};
use super::shoot::{self, RbacObject};
use super::token::{self, ANNOTATION_TOKEN_EXPIRATION, TokenDecision, TokenRecord};
use super::{AccessArgs, CONTROLLER, FINALIZER};
use crate::Context;
use crate::gardener_cluster::rotation::format_last_sync;

/// Field manager of what this reconciler applies in the KCP.
pub const FIELD_MANAGER: &str = "kim-runtime-access";

/// Condition type of a RuntimeAccess.
pub const CONDITION_TYPE: &str = "KubeconfigReady";

/// How often to look again while the runtime has no admin kubeconfig yet.
const WAIT_FOR_RUNTIME: Duration = Duration::from_secs(30);

/// Backoff after a failed reconcile.
const RETRY_AFTER: Duration = Duration::from_secs(15);

/// State shared by all reconciles.
pub struct Reconciler {
    ctx: Arc<Context>,
    args: AccessArgs,
}

impl Reconciler {
    /// A reconciler with the given flags.
    pub fn new(ctx: Arc<Context>, args: AccessArgs) -> Self {
        Self { ctx, args }
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
    let result = match result {
        Ok(a) => Ok(a),
        Err(finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e)) => Err(e),
        // A reconcile from a stale cache entry cleaned up again after the object had left.
        Err(
            finalizer::Error::RemoveFinalizer(kube::Error::Api(s))
            | finalizer::Error::AddFinalizer(kube::Error::Api(s)),
        ) if s.is_not_found() => {
            tracing::debug!(
                controller = CONTROLLER,
                "RuntimeAccess already gone when patching its finalizer"
            );
            Ok(Action::await_change())
        }
        Err(other) => Err(Error::Finalizer(other.to_string())),
    };
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

/// The shoot client and endpoint of a runtime, from its GardenerCluster's admin kubeconfig.
struct ShootAccess {
    client: kube::Client,
    endpoint: ClusterEndpoint,
}

/// `Ok(None)`: the runtime has no usable admin kubeconfig (yet, or any more).
async fn shoot_access(r: &Reconciler, ra: &RuntimeAccess) -> Result<Option<ShootAccess>, Error> {
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
    let Some(secret) = secrets.get_opt(&loc.name).await.map_err(api(format!(
        "reading Secret {}/{}",
        loc.namespace, loc.name
    )))?
    else {
        return Ok(None);
    };
    let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(&loc.key)) else {
        return Ok(None);
    };
    let bad = |reason: String| Error::AdminKubeconfig {
        runtime: runtime.clone(),
        reason,
    };
    let yaml = std::str::from_utf8(&bytes.0).map_err(|_| bad("not UTF-8".into()))?;
    let endpoint = cluster_endpoint(yaml).map_err(|e| bad(e.to_string()))?;
    let kc =
        kube::config::Kubeconfig::from_yaml(yaml).map_err(|_| bad("not a kubeconfig".into()))?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|_| bad("cannot build a client configuration".into()))?;
    let client =
        kube::Client::try_from(config).map_err(|e| bad(format!("cannot build a client: {e}")))?;
    Ok(Some(ShootAccess { client, endpoint }))
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
    let Some(access) = shoot_access(r, ra).await? else {
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
    let mut created: Vec<ShootObjectRef> = Vec::new();
    let sa = shoot::ensure_service_account(&access.client, ra).await;
    let sa = match sa {
        Ok(sa) => sa,
        Err(e) => {
            return fail(
                r,
                ra,
                "ShootAccessFailed",
                "creating the ServiceAccount",
                e,
                now,
            )
            .await;
        }
    };
    created.extend(sa);
    let wanted = shoot::rbac_objects(ra);
    for obj in &wanted {
        if let Err(e) = shoot::apply_rbac(&access.client, obj).await {
            let what = format!("applying {} {}", obj.reference().kind, obj.reference().name);
            return fail(r, ra, "ShootAccessFailed", &what, e, now).await;
        }
        created.push(obj.reference());
    }
    // Objects of an earlier spec (for example a Role replaced by a roleRef) are removed.
    let previous = ra
        .status
        .as_ref()
        .map(|s| s.shoot_objects.clone())
        .unwrap_or_default();
    let mut stale: Vec<ShootObjectRef> = previous
        .into_iter()
        .filter(|o| !created.contains(o))
        .collect();
    shoot::deletion_order(&mut stale);
    for obj in &stale {
        if let Err(e) = shoot::delete(&access.client, obj).await {
            return fail(
                r,
                ra,
                "ShootAccessFailed",
                &format!("deleting stale {} {}", obj.kind, obj.name),
                e,
                now,
            )
            .await;
        }
    }

    let name = secret_name(ra);
    let key = secret_key(ra);
    let ns = ra.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(r.ctx.kcp.clone(), &ns);
    let existing = secrets
        .get_opt(&name)
        .await
        .map_err(api(format!("reading Secret {ns}/{name}")))?;
    let annotation = |k: &str| {
        existing
            .as_ref()
            .and_then(|s| s.metadata.annotations.as_ref())
            .and_then(|a| a.get(k))
            .map(String::as_str)
    };
    let record = TokenRecord {
        present: existing
            .as_ref()
            .and_then(|s| s.data.as_ref())
            .and_then(|d| d.get(&key))
            .is_some_and(|v| !v.0.is_empty()),
        issued: annotation(names::ANNOTATION_LAST_SYNC),
        expires: annotation(ANNOTATION_TOKEN_EXPIRATION),
    };
    let (reason, expires, requeue) = match token::decide(record, r.args.rotation_ratio, now) {
        TokenDecision::Keep { requeue_after } => {
            let reason = ra
                .status
                .as_ref()
                .and_then(|s| {
                    s.conditions
                        .iter()
                        .find(|c| c.type_ == CONDITION_TYPE && c.status == "True")
                })
                .map(|c| c.reason.clone())
                .unwrap_or_else(|| "KubeconfigIssued".to_owned());
            let expires = record
                .expires
                .and_then(crate::gardener_cluster::rotation::parse_last_sync);
            (reason, expires, requeue_after)
        }
        TokenDecision::Issue(cause) => {
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
            let desired = kubeconfig_secret(ra, &name, &key, kubeconfig, now, issued.expires);
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
            let reason = if matches!(cause, token::TokenCause::Due) {
                "KubeconfigRotated"
            } else {
                "KubeconfigIssued"
            };
            let lifetime_left = issued.expires.duration_since(now).as_secs_f64().max(1.0);
            let requeue =
                Duration::from_secs_f64(lifetime_left * token::clamp_ratio(r.args.rotation_ratio));
            (reason.to_owned(), Some(issued.expires), requeue)
        }
    };
    let message = format!(
        "kubeconfig for {} in Secret {ns}/{name}",
        service_account_user(&ra.spec)
    );
    let mut status = status_with(ra, "Ready", "True", &reason, &message, now);
    status.secret_ref = Some(AccessSecretRef {
        name,
        namespace: ns,
        key,
    });
    status.identity = Some(service_account_user(&ra.spec));
    status.token_expiration_timestamp = expires.map(Time);
    created.sort();
    created.dedup();
    status.shoot_objects = created;
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
    let mut objs: Vec<ShootObjectRef> = ra
        .status
        .as_ref()
        .map(|s| s.shoot_objects.clone())
        .unwrap_or_default();
    // The role and binding carry names only this request uses: delete them even if a status
    // write was lost. The ServiceAccount only when the status says we created it.
    objs.extend(shoot::rbac_objects(ra).iter().map(RbacObject::reference));
    objs.sort();
    objs.dedup();
    shoot::deletion_order(&mut objs);
    match shoot_access(r, ra).await {
        Ok(Some(access)) => {
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
        Ok(None) => {
            tracing::info!(controller = CONTROLLER, name = ra.name_any(), runtime_id = %ra.spec.runtime_id, "runtime has no admin kubeconfig; skipping shoot cleanup")
        }
        Err(e) => return Err(e),
    }
    let ns = ra.namespace().unwrap_or_default();
    let name = secret_name(ra);
    let secrets: Api<Secret> = Api::namespaced(r.ctx.kcp.clone(), &ns);
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

fn kubeconfig_secret(
    ra: &RuntimeAccess,
    name: &str,
    key: &str,
    kubeconfig: Vec<u8>,
    now: Timestamp,
    expires: Timestamp,
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
                    format_last_sync(now),
                ),
                (
                    ANNOTATION_TOKEN_EXPIRATION.to_owned(),
                    format_last_sync(expires),
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
