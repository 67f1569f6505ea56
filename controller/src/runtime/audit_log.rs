//! Dedicated audit logging behind `--dedicated-audit-logging-enabled` (upstream's
//! `sFnCreateShoot` reservation, `sFnMigrateToDedicatedAuditLog`,
//! `sFnCopyAuditLogReadCredentials`, the claim of `sFnPatchExistingShoot` and the release of
//! `sFnDeleteShoot`). What to reserve, claim, write and copy is decided in
//! `kim_shared::audit_log`; here are the reads and writes: `AuditLog`s of KALM's pool in the
//! controller's namespace (read from a watch, started only with the flag: a Shoot patch or a
//! deletion would otherwise list the whole pool each time), the Shoot patch through the
//! ordinary conversion, and the read credentials applied into the runtime cluster.
//!
//! Names of Secrets appear in conditions and logs; their data never do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kim_shared::api::audit_log::AuditLog;
use kim_shared::api::{Runtime, RuntimeState};
use kim_shared::audit_log::{self as pool, AuditLogError, Pick, TenantUse};
use kim_shared::config::AuditLogTenant;
use kim_shared::gardener::Shoot;
use kim_shared::names::{condition, reason};
use kube::api::{Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use super::Reconciler;
use super::classify::{self, ApiErrorKind, message};
use super::oidc::RUNTIME_CLUSTER_FIELD_MANAGER;
use super::requeue::{PERMANENT_RETRY, RETRY};
use super::status::{CondStatus, StatusDraft};
use crate::context::{Context, Shutdown};
use crate::records::lock;

/// Time allowed for the copy into the runtime cluster.
const RUNTIME_CLUSTER_TIMEOUT: Duration = Duration::from_secs(30);
/// Retry after losing a race for an `AuditLog` (another Runtime or KALM changed it).
const CONFLICT_RETRY: Duration = Duration::from_millis(500);
/// Requeue after the claim when the Shoot must be patched to the dedicated tenant.
const PATCH_SOON: Duration = Duration::from_millis(100);
/// How long a read of the pool waits for the watch (its first list, or an `AuditLog` this
/// replica patched) before the Runtime waits as `Pending`.
const WATCH_WAIT: Duration = Duration::from_secs(5);
/// `CustomAuditLogConfigured` while the suspend annotation holds the patch to the tenant.
pub const SUSPENDED_MESSAGE: &str =
    "Custom AuditLog shoot configuration pending: Shoot patching is suspended";
/// The watch's name in logs and metrics.
const WATCH: &str = "auditlogs";

/// KALM's pool as this replica's watch keeps it.
///
/// A pass decides on the pool as the watch last saw it, so it must see its own writes: a
/// pass that reserved or claimed an `AuditLog` and then read a pool without that write would
/// take a second one. Every patch is therefore remembered until the watch brings the patched
/// object, and a read waits for that (a patch of an object the watch has moved past fails
/// with a conflict, as every patch carries the `resourceVersion` it was decided on).
pub struct PoolWatch {
    store: Store<AuditLog>,
    namespace: String,
    /// Whether the watch has listed the pool.
    listed: tokio::sync::watch::Receiver<bool>,
    /// The watch's last error while it has none listed, for the condition message.
    last_error: Arc<Mutex<Option<String>>>,
    /// `AuditLog`s this replica patched, by name, with the `resourceVersion` each patch replaced.
    written: Mutex<HashMap<String, String>>,
    /// [`WATCH_WAIT`] (shorter in unit tests).
    wait: Duration,
}

/// Why the pool cannot be read now.
#[derive(Debug, thiserror::Error)]
pub enum PoolUnread {
    /// The watch has not listed the pool yet.
    #[error("KALM's AuditLog pool is not listed yet{}", .0.as_deref().map(|e| format!(" ({e})")).unwrap_or_default())]
    NotListed(Option<String>),
    /// The watch has not brought an `AuditLog` as this replica patched it.
    #[error("the watch has not brought AuditLog {0} as patched yet")]
    OwnWriteUnseen(String),
}

impl PoolWatch {
    /// Starts the watch of the `AuditLog`s in the controller's namespace, ended by `shutdown`.
    pub fn start(ctx: &Context, shutdown: Shutdown) -> (Self, tokio::task::JoinHandle<()>) {
        let namespace = ctx.settings.namespace.clone();
        let (store, writer) = reflector::store::<AuditLog>();
        let (listed_tx, listed) = tokio::sync::watch::channel(false);
        let last_error: Arc<Mutex<Option<String>>> = Arc::default();
        let metrics = ctx.metrics.clone();
        metrics.track_watch(WATCH);
        let events = crate::watch::events(
            Api::<AuditLog>::namespaced(ctx.kcp.clone(), &namespace),
            watcher::Config::default(),
            WATCH,
            metrics.clone(),
        )
        .default_backoff()
        .modify(|a| a.managed_fields_mut().clear())
        .reflect(writer);
        let errors = last_error.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            loop {
                let event = tokio::select! {
                    event = events.next() => event,
                    () = shutdown.cancelled() => return,
                };
                match event {
                    None => return,
                    Some(Err(e)) => {
                        crate::watch::report(WATCH, &e, &metrics);
                        *lock(&errors) = Some(e.to_string());
                    }
                    // A relist keeps the store's last list until it is done: reads go on.
                    Some(Ok(watcher::Event::InitDone)) => {
                        *lock(&errors) = None;
                        listed_tx.send_replace(true);
                    }
                    Some(Ok(_)) => {}
                }
            }
        });
        let pool = Self {
            store,
            namespace,
            listed,
            last_error,
            written: Mutex::default(),
            wait: WATCH_WAIT,
        };
        (pool, task)
    }

    /// The pool, once the watch has listed it and brought every patch of this replica.
    async fn read(&self) -> Result<Vec<Arc<AuditLog>>, PoolUnread> {
        let deadline = Instant::now() + self.wait;
        let mut listed = self.listed.clone();
        if tokio::time::timeout(self.wait, listed.wait_for(|l| *l))
            .await
            .is_err()
        {
            return Err(PoolUnread::NotListed(lock(&self.last_error).clone()));
        }
        loop {
            let unseen = self.unseen_write();
            match unseen {
                None => return Ok(self.store.state()),
                Some(name) if Instant::now() >= deadline => {
                    return Err(PoolUnread::OwnWriteUnseen(name));
                }
                Some(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// An `AuditLog` this replica patched that the watch still shows as before the patch;
    /// those it shows changed (or gone) are forgotten.
    fn unseen_write(&self) -> Option<String> {
        let mut written = lock(&self.written);
        written.retain(|name, replaced| {
            let key = ObjectRef::new(name).within(&self.namespace);
            self.store
                .get(&key)
                .is_some_and(|a| a.metadata.resource_version.as_ref() == Some(replaced))
        });
        written.keys().next().cloned()
    }

    /// Remembers that `before` was patched into `after` (a patch that changed nothing keeps
    /// the resourceVersion: there is nothing to wait for).
    fn wrote(&self, before: &AuditLog, after: &AuditLog) {
        if let Some(rv) = &before.metadata.resource_version
            && after.metadata.resource_version.as_ref() != Some(rv)
        {
            lock(&self.written).insert(before.name_any(), rv.clone());
        }
    }
}

fn enabled(reconciler: &Reconciler) -> bool {
    reconciler.ctx.settings.runtime.dedicated_audit_logging
}

fn audit_logs(reconciler: &Reconciler) -> Api<AuditLog> {
    Api::namespaced(
        reconciler.ctx.kcp.clone(),
        &reconciler.ctx.settings.namespace,
    )
}

/// The pool from the watch (started with the flag, so always there when [`enabled`]).
async fn list(reconciler: &Reconciler) -> Result<Vec<Arc<AuditLog>>, PoolUnread> {
    match &reconciler.audit_logs {
        Some(watch) => watch.read().await,
        None => Err(PoolUnread::NotListed(None)),
    }
}

/// Claims `a` again for `runtime_id`, whose Shoot writes to its tenant already.
async fn claim_lost(
    reconciler: &Reconciler,
    a: &AuditLog,
    runtime_id: &str,
) -> Result<(), kube::Error> {
    patch(reconciler, a, &pool::claim_patch(a, runtime_id, now_unix())).await?;
    tracing::warn!(
        audit_log = %a.name_any(),
        "AuditLog claimed again: the Runtime's Shoot writes to its tenant but the pool had lost the claim"
    );
    Ok(())
}

/// [`pool::pick`] for `runtime` (runtime ID `id`), with who writes to each free `AuditLog`'s
/// tenant taken from the Shoot cache.
fn pick<'a>(
    reconciler: &Reconciler,
    runtime: &Runtime,
    all: &'a [Arc<AuditLog>],
    id: &str,
    take_new: bool,
) -> Option<Pick<'a>> {
    let region = &runtime.spec.shoot.region;
    pool::pick(
        all,
        id,
        region,
        take_new,
        tenant_use(reconciler, runtime, all, take_new),
    )
}

/// Who writes to each free `AuditLog`'s tenant, from the Shoot cache (no request). The cache is
/// scanned once, at the first question: a Runtime with a claim or reservation asks none. When
/// `handing_out`, a stack that looks free while another Runtime's Shoot writes to it is logged:
/// the pool lost that claim.
fn tenant_use<'a>(
    reconciler: &'a Reconciler,
    runtime: &'a Runtime,
    pool: &'a [Arc<AuditLog>],
    handing_out: bool,
) -> impl Fn(&AuditLog) -> TenantUse + 'a {
    let writers: std::cell::OnceCell<HashMap<String, Vec<String>>> = std::cell::OnceCell::new();
    let own = runtime.spec.shoot.name.as_str();
    move |a: &AuditLog| {
        let writers = writers.get_or_init(|| {
            let secrets: std::collections::HashSet<&str> =
                pool.iter().filter_map(|a| pool::write_secret(a)).collect();
            let mut writers: HashMap<String, Vec<String>> = HashMap::new();
            for shoot in reconciler.shoots.state() {
                if let Some(secret) = shoot.audit_log_secret().filter(|s| secrets.contains(s)) {
                    writers
                        .entry(secret.to_owned())
                        .or_default()
                        .push(shoot.name_any());
                }
            }
            writers
        });
        let users = pool::write_secret(a).and_then(|s| writers.get(s));
        match users.and_then(|u| u.iter().find(|n| n.as_str() != own)) {
            Some(other) => {
                if handing_out {
                    tracing::warn!(
                        audit_log = %a.name_any(),
                        shoot = %other,
                        "AuditLog is free in the pool but a Shoot writes to its tenant; not handed out"
                    );
                }
                TenantUse::ByOther(other.clone())
            }
            None if users.is_some() => TenantUse::ByThisRuntime,
            None => TenantUse::Unused,
        }
    }
}

fn now_unix() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Whether the Runtime still has audit-log work, from its status alone (no request): with
/// the flag, a Runtime that asks for (or has) a dedicated audit log until both conditions are
/// True; without it, one that still shows what the flag left (removed on the next pass).
pub fn unfinished(reconciler: &Reconciler, runtime: &Runtime) -> bool {
    let status = runtime.status.as_ref();
    let cond = |t: &str| runtime.condition(t);
    let has_cr = status.is_some_and(|s| s.audit_log_cr.is_some());
    if enabled(reconciler) {
        let done = |t: &str| cond(t).is_some_and(|c| c.status == CondStatus::True.as_str());
        (pool::requested(runtime) || has_cr)
            && !(done(condition::CUSTOM_AUDIT_LOG_CONFIGURED)
                && done(condition::AUDIT_LOG_CREDENTIALS_COPIED))
    } else {
        has_cr
            || cond(condition::CUSTOM_AUDIT_LOG_CONFIGURED).is_some()
            || cond(condition::AUDIT_LOG_CREDENTIALS_COPIED).is_some()
    }
}

/// Stops provisioning: `Failed`, looked at again once a minute (upstream stops until the
/// Runtime changes; a pool KALM refills then lets it proceed).
fn fail(draft: &mut StatusDraft, type_: &str, reason: &str, message: String) -> Action {
    tracing::warn!(reason, %message, "dedicated audit logging");
    draft.set(type_, CondStatus::False, reason, message);
    draft.state(RuntimeState::Failed);
    Action::requeue(PERMANENT_RETRY)
}

/// Waits: `Pending` (a `Failed` Runtime stays so), retried soon.
fn wait(draft: &mut StatusDraft, type_: &str, reason: &str, message: String) -> Action {
    tracing::info!(reason, %message, "dedicated audit logging");
    draft.set(type_, CondStatus::False, reason, message);
    if draft.current_state() != RuntimeState::Failed {
        draft.state(RuntimeState::Pending);
    }
    Action::requeue(RETRY)
}

/// An API call about `AuditLog`s failed: a lost race is retried at once, anything else
/// waits under `type_`.
fn api_failed(draft: &mut StatusDraft, type_: &str, what: &str, e: &kube::Error) -> Action {
    if classify::classify(e) == ApiErrorKind::Conflict {
        tracing::info!(error = %e, "{what}: changed concurrently; retrying");
        return Action::requeue(CONFLICT_RETRY);
    }
    wait(
        draft,
        type_,
        reason::CUSTOM_AUDIT_LOG_ERR,
        format!("{what}: {}", message(e)),
    )
}

/// The pool could not be read: waits under `type_`.
fn unread(draft: &mut StatusDraft, type_: &str, what: &str, e: &PoolUnread) -> Action {
    wait(
        draft,
        type_,
        reason::CUSTOM_AUDIT_LOG_ERR,
        format!("{what}: {e}"),
    )
}

/// Merge-patches `a` with `body` (which carries `a`'s `resourceVersion`).
async fn patch(
    reconciler: &Reconciler,
    a: &AuditLog,
    body: &serde_json::Value,
) -> Result<(), kube::Error> {
    let after = audit_logs(reconciler)
        .patch(&a.name_any(), &PatchParams::default(), &Patch::Merge(body))
        .await?;
    if let Some(watch) = &reconciler.audit_logs {
        watch.wrote(a, &after);
    }
    Ok(())
}

/// Before the Shoot is created (upstream's phase 1): a Runtime asking for dedicated audit
/// logging gets an `AuditLog` of its region reserved, or fails with `CustomAuditLogErr`
/// before any Shoot exists. `None`: go on and create the Shoot with the shared tenant.
pub async fn reserve(
    reconciler: &Reconciler,
    runtime: &Runtime,
    draft: &mut StatusDraft,
) -> Option<Action> {
    if !enabled(reconciler) || !pool::requested(runtime) {
        return None;
    }
    const WHAT: &str = "Dedicated audit logging requested but no available configuration found";
    let id = match pool::runtime_id(runtime) {
        Ok(id) => id,
        Err(e) => {
            return Some(fail(
                draft,
                condition::PROVISIONED,
                reason::CUSTOM_AUDIT_LOG_ERR,
                format!("{WHAT}: {e}"),
            ));
        }
    };
    let region = &runtime.spec.shoot.region;
    let all = match list(reconciler).await {
        Ok(all) => all,
        Err(e) => return Some(unread(draft, condition::PROVISIONED, WHAT, &e)),
    };
    let chosen = match pick(reconciler, runtime, &all, id, true) {
        Some(Pick::Claimed(a) | Pick::Reserved(a)) => a,
        // No Shoot yet, so not lost: reserved like a free one.
        Some(Pick::Available(a) | Pick::Lost(a)) => {
            let name = a.name_any();
            if let Err(e) = patch(reconciler, a, &pool::reserve_patch(a, id, now_unix())).await {
                return Some(api_failed(draft, condition::PROVISIONED, WHAT, &e));
            }
            tracing::info!(audit_log = %name, %region, "AuditLog reserved");
            a
        }
        None => {
            let e = AuditLogError::PoolEmpty {
                region: region.clone(),
            };
            return Some(fail(
                draft,
                condition::PROVISIONED,
                reason::CUSTOM_AUDIT_LOG_ERR,
                format!("{WHAT}: {e}"),
            ));
        }
    };
    draft.new.audit_log_cr = Some(chosen.name_any());
    None
}

/// The tenant the conversion of a patch uses: the dedicated one when the Runtime has an
/// `AuditLog` (kept even when `auditLogAccessEnabled` was turned off: dedicated logging is
/// irreversible), claimed now for an existing Runtime that asks for one (upstream's direct
/// claim, ADR 006); `None` for the shared tenant. `Err` is the action to return.
pub async fn tenant_for_patch(
    reconciler: &Reconciler,
    runtime: &Runtime,
    draft: &mut StatusDraft,
) -> Result<Option<AuditLogTenant>, Action> {
    if !enabled(reconciler) {
        return Ok(None);
    }
    let requested = pool::requested(runtime);
    const WHAT: &str = "Dedicated audit logging requested but no available configuration found";
    let id = match pool::runtime_id(runtime) {
        Ok(id) => id,
        Err(_) if !requested => return Ok(None),
        Err(e) => {
            return Err(fail(
                draft,
                condition::PROVISIONED,
                reason::CUSTOM_AUDIT_LOG_ERR,
                format!("{WHAT}: {e}"),
            ));
        }
    };
    let all = list(reconciler)
        .await
        .map_err(|e| unread(draft, condition::PROVISIONED, WHAT, &e))?;
    let region = &runtime.spec.shoot.region;
    let chosen = match pick(reconciler, runtime, &all, id, requested) {
        Some(Pick::Claimed(a)) => {
            if !requested {
                tracing::info!(
                    "Dedicated audit logging is irreversible - ignoring attempt to disable"
                );
            }
            a
        }
        // Provisioning has not reached the claim yet: the reserved tenant, unclaimed (as
        // upstream reads it).
        Some(Pick::Reserved(a)) => a,
        Some(Pick::Lost(a)) => {
            claim_lost(reconciler, a, id)
                .await
                .map_err(|e| api_failed(draft, condition::PROVISIONED, WHAT, &e))?;
            a
        }
        Some(Pick::Available(a)) => {
            let name = a.name_any();
            patch(reconciler, a, &pool::claim_patch(a, id, now_unix()))
                .await
                .map_err(|e| api_failed(draft, condition::PROVISIONED, WHAT, &e))?;
            tracing::info!(audit_log = %name, %region, "Upgrading shared to dedicated audit logging: AuditLog claimed");
            draft.set(
                condition::CUSTOM_AUDIT_LOG_CONFIGURED,
                CondStatus::Unknown,
                reason::CUSTOM_AUDIT_LOG_CONFIGURED,
                "Dedicated audit logging claimed, configuring shoot",
            );
            a
        }
        None if requested => {
            let e = AuditLogError::PoolEmpty {
                region: region.clone(),
            };
            return Err(fail(
                draft,
                condition::PROVISIONED,
                reason::CUSTOM_AUDIT_LOG_ERR,
                format!("{WHAT}: {e}"),
            ));
        }
        None => return Ok(None),
    };
    draft.new.audit_log_cr = Some(chosen.name_any());
    pool::tenant(chosen).map(Some).map_err(|e| {
        wait(
            draft,
            condition::CUSTOM_AUDIT_LOG_CONFIGURED,
            reason::CUSTOM_AUDIT_LOG_ERR,
            e.to_string(),
        )
    })
}

/// Whether the Shoot may have to be patched to the dedicated tenant (after [`configure`]
/// found it elsewhere): with the flag, while `CustomAuditLogConfigured` is set and not True.
/// No request; the Runtime reconciler's patch decision then asks [`shoot_patch_needed`].
pub fn shoot_patch_pending(reconciler: &Reconciler, draft: &StatusDraft) -> bool {
    enabled(reconciler)
        && draft
            .condition(condition::CUSTOM_AUDIT_LOG_CONFIGURED)
            .is_some_and(|c| c.status != CondStatus::True.as_str())
}

/// Whether the Shoot of a Runtime whose `AuditLog` is claimed must be patched to its tenant.
/// Asked only when [`shoot_patch_pending`], so other Runtimes cost no request.
/// `Ok(Some(why))`: patch; `Err` is the action to return.
pub async fn shoot_patch_needed(
    reconciler: &Reconciler,
    runtime: &Runtime,
    shoot: &Shoot,
    draft: &mut StatusDraft,
) -> Result<Option<&'static str>, Action> {
    if !shoot_patch_pending(reconciler, draft) {
        return Ok(None);
    }
    let Ok(id) = pool::runtime_id(runtime) else {
        return Ok(None);
    };
    const WHAT: &str = "Custom AuditLog shoot configuration could not be patched, will retry";
    let all = list(reconciler)
        .await
        .map_err(|e| unread(draft, condition::CUSTOM_AUDIT_LOG_CONFIGURED, WHAT, &e))?;
    let Some(Pick::Claimed(chosen)) = pick(reconciler, runtime, &all, id, false) else {
        return Ok(None);
    };
    let Ok(tenant) = pool::tenant(chosen) else {
        return Ok(None);
    };
    match reconciler.get_shoot_live(&shoot.name_any()).await {
        Ok(Some(live)) if !kim_shared::convert::audit_log_in_place(&live, &tenant) => {
            Ok(Some("dedicated audit log"))
        }
        Ok(_) => Ok(None),
        Err(e) => Err(api_failed(
            draft,
            condition::CUSTOM_AUDIT_LOG_CONFIGURED,
            "Gardener API shoot get error",
            &e,
        )),
    }
}

/// The last step before `Ready` (upstream's `sFnMigrateToDedicatedAuditLog` and
/// `sFnCopyAuditLogReadCredentials`): claims the Runtime's `AuditLog`, patches the Shoot to
/// its tenant when it is not there yet, then copies the read credentials into the runtime
/// cluster. Without the flag it removes what the flag left: the read credentials in the runtime
/// cluster and the conditions and `status.auditLogCR`. `None`: go on.
pub async fn configure(
    reconciler: &Reconciler,
    runtime: &Runtime,
    shoot: &Shoot,
    runtime_client: &kube::Client,
    draft: &mut StatusDraft,
) -> Option<Action> {
    if !enabled(reconciler) {
        if unfinished(reconciler, runtime)
            && let Err(cause) = remove_read_credentials(runtime_client).await
        {
            return Some(wait(
                draft,
                condition::AUDIT_LOG_CREDENTIALS_COPIED,
                reason::CREDENTIALS_COPY_ERR,
                format!(
                    "Failed to remove read credentials: Secret {}/{}: {cause}",
                    pool::READ_CREDENTIALS_NAMESPACE,
                    pool::READ_CREDENTIALS_SECRET
                ),
            ));
        }
        draft.remove(condition::CUSTOM_AUDIT_LOG_CONFIGURED);
        draft.remove(condition::AUDIT_LOG_CREDENTIALS_COPIED);
        draft.new.audit_log_cr = None;
        return None;
    }
    let requested = pool::requested(runtime);
    // Neither asked for nor given one: no request (upstream's migration step returns here too).
    if !requested
        && runtime
            .status
            .as_ref()
            .is_none_or(|s| s.audit_log_cr.is_none())
    {
        return None;
    }
    const WHAT: &str = "Failed to get and claim dedicated audit log configuration";
    let id = match pool::runtime_id(runtime) {
        Ok(id) => id,
        Err(_) if !requested => return None,
        Err(e) => {
            return Some(fail(
                draft,
                condition::CUSTOM_AUDIT_LOG_CONFIGURED,
                reason::CUSTOM_AUDIT_LOG_ERR,
                format!("{WHAT}: {e}"),
            ));
        }
    };
    let all = match list(reconciler).await {
        Ok(all) => all,
        Err(e) => {
            return Some(unread(
                draft,
                condition::CUSTOM_AUDIT_LOG_CONFIGURED,
                WHAT,
                &e,
            ));
        }
    };
    let region = &runtime.spec.shoot.region;
    let chosen = match pick(reconciler, runtime, &all, id, requested) {
        Some(Pick::Claimed(a)) => a,
        Some(Pick::Lost(a)) => {
            if let Err(e) = claim_lost(reconciler, a, id).await {
                return Some(api_failed(
                    draft,
                    condition::CUSTOM_AUDIT_LOG_CONFIGURED,
                    WHAT,
                    &e,
                ));
            }
            a
        }
        Some(Pick::Reserved(a) | Pick::Available(a)) => {
            let name = a.name_any();
            if let Err(e) = patch(reconciler, a, &pool::claim_patch(a, id, now_unix())).await {
                return Some(api_failed(
                    draft,
                    condition::CUSTOM_AUDIT_LOG_CONFIGURED,
                    WHAT,
                    &e,
                ));
            }
            tracing::info!(audit_log = %name, "Successfully claimed AuditLogCR");
            a
        }
        None if requested => {
            let e = AuditLogError::PoolEmpty {
                region: region.clone(),
            };
            return Some(fail(
                draft,
                condition::CUSTOM_AUDIT_LOG_CONFIGURED,
                reason::CUSTOM_AUDIT_LOG_ERR,
                format!("{WHAT}: {e}"),
            ));
        }
        None => return None,
    };
    draft.new.audit_log_cr = Some(chosen.name_any());
    let tenant = match pool::tenant(chosen) {
        Ok(t) => t,
        Err(e) => {
            return Some(wait(
                draft,
                condition::CUSTOM_AUDIT_LOG_CONFIGURED,
                reason::CUSTOM_AUDIT_LOG_ERR,
                e.to_string(),
            ));
        }
    };

    // The watch cache keeps no provider configs: the extension is compared on the live Shoot.
    let live = match reconciler.get_shoot_live(&shoot.name_any()).await {
        Ok(Some(live)) => live,
        Ok(None) => return Some(Action::requeue(RETRY)),
        Err(e) => {
            return Some(api_failed(
                draft,
                condition::CUSTOM_AUDIT_LOG_CONFIGURED,
                "Gardener API shoot get error",
                &e,
            ));
        }
    };
    if !kim_shared::convert::audit_log_in_place(&live, &tenant) {
        // The patch decision holds every patch of a suspended Runtime: it waits for the
        // annotation to go (a change of the Runtime), not in a loop.
        if runtime.patch_suspended() {
            tracing::info!(
                "Shoot audit log configuration differs; not patched while Shoot patching is suspended"
            );
            draft.set(
                condition::CUSTOM_AUDIT_LOG_CONFIGURED,
                CondStatus::Unknown,
                reason::CUSTOM_AUDIT_LOG_CONFIGURED,
                SUSPENDED_MESSAGE,
            );
            draft.state(RuntimeState::Pending);
            return Some(Action::await_change());
        }
        // The Runtime reconciler patches the Shoot on the next pass (its patch decision asks
        // [`shoot_patch_needed`]), through the ordinary conversion, which takes the claimed
        // tenant.
        tracing::info!("Shoot audit log configuration differs, patching shoot");
        draft.set(
            condition::CUSTOM_AUDIT_LOG_CONFIGURED,
            CondStatus::Unknown,
            reason::CUSTOM_AUDIT_LOG_CONFIGURED,
            "Custom AuditLog shoot configuration pending",
        );
        draft.state(RuntimeState::Pending);
        return Some(Action::requeue(PATCH_SOON));
    }
    draft.set(
        condition::CUSTOM_AUDIT_LOG_CONFIGURED,
        CondStatus::True,
        reason::CUSTOM_AUDIT_LOG_CONFIGURED,
        "Custom AuditLog shoot configuration completed",
    );
    copy_read_credentials(reconciler, &all, chosen, runtime_client, draft).await
}

/// Copies the `AuditLog`'s read credentials into `kyma-system/auditlog-read-credentials` of
/// the runtime cluster (server-side apply). `None`: copied.
async fn copy_read_credentials(
    reconciler: &Reconciler,
    all: &[Arc<AuditLog>],
    chosen: &AuditLog,
    runtime_client: &kube::Client,
    draft: &mut StatusDraft,
) -> Option<Action> {
    let refused = |draft: &mut StatusDraft, e: AuditLogError| {
        Some(fail(
            draft,
            condition::AUDIT_LOG_CREDENTIALS_COPIED,
            reason::CREDENTIALS_COPY_ERR,
            format!("Failed to copy read credentials: {e}"),
        ))
    };
    let source = match pool::read_credentials_source(all, chosen) {
        Ok(s) => s,
        Err(AuditLogError::Incomplete { .. }) => {
            return Some(wait(
                draft,
                condition::AUDIT_LOG_CREDENTIALS_COPIED,
                reason::CREDENTIALS_COPY_ERR,
                "Waiting for read credentials secret to be configured".to_owned(),
            ));
        }
        Err(e) => return refused(draft, e),
    };
    let secrets: Api<Secret> = Api::namespaced(
        reconciler.ctx.kcp.clone(),
        &reconciler.ctx.settings.namespace,
    );
    let secret = match secrets.get(source).await {
        Ok(s) => s,
        Err(e) => {
            return Some(wait(
                draft,
                condition::AUDIT_LOG_CREDENTIALS_COPIED,
                reason::CREDENTIALS_COPY_ERR,
                format!(
                    "Failed to copy read credentials: Secret {source}: {}",
                    message(&e)
                ),
            ));
        }
    };
    if let Err(e) = pool::check_source_secret(chosen, &secret) {
        return refused(draft, e);
    }
    let body = pool::read_credentials_secret(secret.data.as_ref(), secret.type_.as_deref());
    let target: Api<Secret> =
        Api::namespaced(runtime_client.clone(), pool::READ_CREDENTIALS_NAMESPACE);
    let pp = PatchParams::apply(RUNTIME_CLUSTER_FIELD_MANAGER).force();
    let applied = tokio::time::timeout(
        RUNTIME_CLUSTER_TIMEOUT,
        target.patch(pool::READ_CREDENTIALS_SECRET, &pp, &Patch::Apply(&body)),
    )
    .await;
    let cause = match applied {
        Ok(Ok(_)) => None,
        // The answer may quote the credentials the write carried (a webhook of the runtime
        // cluster echoing the request): their values go, however they look.
        Ok(Err(e)) => {
            let carried: Vec<&[u8]> = crate::redact::data_values(secret.data.as_ref()).collect();
            Some(message(&crate::redact::api_error(e, &carried)))
        }
        Err(_) => Some("timed out".to_owned()),
    };
    if let Some(cause) = cause {
        return Some(wait(
            draft,
            condition::AUDIT_LOG_CREDENTIALS_COPIED,
            reason::CREDENTIALS_COPY_ERR,
            format!(
                "Failed to copy read credentials: Secret {}/{}: {cause}",
                pool::READ_CREDENTIALS_NAMESPACE,
                pool::READ_CREDENTIALS_SECRET
            ),
        ));
    }
    tracing::info!(source_secret = %source, "Successfully copied read credentials to SKR");
    draft.set(
        condition::AUDIT_LOG_CREDENTIALS_COPIED,
        CondStatus::True,
        reason::CREDENTIALS_COPIED,
        "Audit log read credentials copied to runtime",
    );
    None
}

/// Without the flag, the read credentials a Runtime got while it was on are deleted from the
/// runtime cluster (only the Secret we wrote: it carries our label).
async fn remove_read_credentials(runtime_client: &kube::Client) -> Result<(), String> {
    let api: Api<Secret> =
        Api::namespaced(runtime_client.clone(), pool::READ_CREDENTIALS_NAMESPACE);
    let work = async {
        let Some(secret) = api.get_opt(pool::READ_CREDENTIALS_SECRET).await? else {
            return Ok(());
        };
        let ours = secret
            .labels()
            .get(kim_shared::names::LABEL_MANAGED_BY)
            .is_some_and(|v| v == kim_shared::names::MANAGED_BY_INFRASTRUCTURE_MANAGER);
        if ours {
            api.delete(pool::READ_CREDENTIALS_SECRET, &Default::default())
                .await?;
            tracing::info!("read credentials removed from the runtime cluster");
        }
        Ok::<_, kube::Error>(())
    };
    match tokio::time::timeout(RUNTIME_CLUSTER_TIMEOUT, work).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if classify::classify(&e) == ApiErrorKind::NotFound => Ok(()),
        Ok(Err(e)) => Err(message(&e)),
        Err(_) => Err("timed out".to_owned()),
    }
}

/// On deletion (upstream's `ReleaseDedicated`), once the Shoot is gone: the Runtime's
/// `AuditLog` is marked orphaned and a reservation never claimed goes back to the pool. A
/// failure keeps the finalizer (the caller retries), so a Runtime created again under the same
/// name never finds the old claim; a KALM that does not answer holds only the finalizer, not
/// the Shoot's deletion.
pub async fn release(reconciler: &Reconciler, runtime: &Runtime) -> Result<(), ReleaseError> {
    if !enabled(reconciler) {
        return Ok(());
    }
    // A Runtime whose runtime ID is not its name never got an AuditLog from us; one carrying
    // that ID belongs to the Runtime of that name.
    let Ok(id) = pool::runtime_id(runtime) else {
        return Ok(());
    };
    let all = list(reconciler).await?;
    for r in pool::releases(&all, id) {
        let Some(a) = all.iter().find(|a| a.name_any() == r.name) else {
            continue;
        };
        patch(reconciler, a, &r.patch)
            .await
            .map_err(ReleaseError::Patch)?;
        tracing::info!(audit_log = %r.name, "released dedicated audit log");
    }
    Ok(())
}

/// Why [`release`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// The pool could not be read.
    #[error("cannot read the AuditLogs: {0}")]
    Unread(#[from] PoolUnread),
    /// A patch failed.
    #[error("cannot release the Runtime's AuditLog: {}", message(.0))]
    Patch(kube::Error),
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;

    fn audit_log(name: &str, rv: &str) -> AuditLog {
        let mut a = AuditLog::new(name, Default::default());
        a.metadata.namespace = Some("kcp-system".into());
        a.metadata.resource_version = Some(rv.into());
        a
    }

    /// A pass that patched an `AuditLog` reads the pool only once the watch brought the
    /// patched object: a read of the pool before would not show its own reservation or claim.
    #[tokio::test]
    async fn a_read_waits_until_the_watch_brings_this_replicas_own_patch() {
        let (store, mut writer) = reflector::store::<AuditLog>();
        let (_listed_tx, listed) = tokio::sync::watch::channel(true);
        let before = audit_log("a", "1");
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(before.clone()));
        writer.apply_watcher_event(&Event::InitDone);
        let watch = PoolWatch {
            store,
            namespace: "kcp-system".into(),
            listed,
            last_error: Arc::default(),
            written: Mutex::default(),
            wait: Duration::from_millis(100),
        };
        assert_eq!(watch.read().await.map(|p| p.len()).ok(), Some(1));

        // A patch that changed nothing leaves nothing to wait for.
        watch.wrote(&before, &before);
        assert!(watch.read().await.is_ok());
        watch.wrote(&before, &audit_log("a", "2"));
        assert!(matches!(
            watch.read().await,
            Err(PoolUnread::OwnWriteUnseen(name)) if name == "a"
        ));
        // The patched object arrives while a read waits: that read returns it.
        let waiting = PoolWatch {
            wait: Duration::from_secs(10),
            written: Mutex::new(lock(&watch.written).clone()),
            listed: watch.listed.clone(),
            store: watch.store.clone(),
            namespace: watch.namespace.clone(),
            last_error: Arc::default(),
        };
        let arrives = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            writer.apply_watcher_event(&Event::Apply(audit_log("a", "2")));
        });
        let pool = waiting.read().await.expect("the patch is in the pool");
        assert_eq!(pool[0].metadata.resource_version.as_deref(), Some("2"));
        assert!(
            lock(&waiting.written).is_empty(),
            "a seen write is forgotten"
        );
        arrives.await.expect("the watch event");
    }

    /// Before its first list the pool is not read, and the condition says why.
    #[tokio::test]
    async fn an_unlisted_pool_is_not_read_and_names_the_watch_error() {
        let (store, _writer) = reflector::store::<AuditLog>();
        let (_listed_tx, listed) = tokio::sync::watch::channel(false);
        let watch = PoolWatch {
            store,
            namespace: "kcp-system".into(),
            listed,
            last_error: Arc::new(Mutex::new(Some("404 page not found".into()))),
            written: Mutex::default(),
            wait: Duration::from_millis(100),
        };
        let e = watch.read().await.expect_err("not listed");
        assert_eq!(
            e.to_string(),
            "KALM's AuditLog pool is not listed yet (404 page not found)"
        );
    }
}
