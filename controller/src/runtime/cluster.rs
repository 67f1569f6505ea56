//! After the Shoot is reconciled: the GardenerCluster (and so the admin kubeconfig Secret the
//! GardenerCluster reconciler maintains), then OIDC and administrators in the new cluster
//! through that kubeconfig, after the `kyma-system` namespace and the `kyma-provisioning-info`
//! ConfigMap (upstream `sFnHandleKubeconfig`, `sFnCreateKymaNamespace`, `sFnConfigureSKR`,
//! `sFnApplyClusterRoleBindings`).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kim_shared::api::{GardenerCluster, Runtime, RuntimeState};
use kim_shared::gardener::Shoot;
use kim_shared::names::{self, condition, reason};
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::classify::{self, ApiErrorKind};
use super::requeue::{PERMANENT_RETRY, RETRY, SAFETY_REQUEUE};
use super::status::{CondStatus, StatusDraft};
use super::{Error, Reconciler, admins, kyma_system, oidc};

/// Time allowed for all calls into the new cluster in one reconcile.
const RUNTIME_CLUSTER_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs one step in the new cluster within [`RUNTIME_CLUSTER_TIMEOUT`]. On an error or a timeout the
/// condition `cond` turns False with `reason` and "`what`: <cause>", the Runtime stays Pending
/// and the returned action retries with the Runtime's growing backoff; `None` means the step
/// succeeded.
async fn runtime_cluster_step<E: std::fmt::Display>(
    reconciler: &Reconciler,
    runtime: &Runtime,
    draft: &mut StatusDraft,
    cond: &str,
    reason: &str,
    what: &str,
    step: impl std::future::Future<Output = Result<(), E>>,
) -> Option<Action> {
    let cause = match tokio::time::timeout(RUNTIME_CLUSTER_TIMEOUT, step).await {
        Ok(Ok(())) => return None,
        Ok(Err(e)) => {
            tracing::info!(error = %e, "{what}");
            e.to_string()
        }
        Err(_) => "timed out".to_owned(),
    };
    draft.set(cond, CondStatus::False, reason, format!("{what}: {cause}"));
    draft.state(RuntimeState::Pending);
    Some(Action::requeue(reconciler.runtime_cluster_failed(runtime)))
}

/// Ensures the GardenerCluster, then configures the cluster; ends in `Ready`.
pub async fn after_provisioned(
    reconciler: &Arc<Reconciler>,
    runtime: &Runtime,
    shoot: &Shoot,
    draft: &mut StatusDraft,
) -> Result<Action, Error> {
    let runtime_id = reconciler.runtime_id(runtime);
    let gc = reconciler.gardener_cluster(runtime, &runtime_id);
    let Some(gc) = gc else {
        match create_gardener_cluster(reconciler, runtime, &runtime_id, shoot).await {
            Ok(()) => {}
            Err(e) => {
                draft.set(
                    condition::KUBECONFIG_READY,
                    CondStatus::False,
                    reason::KUBERNETES_ERR,
                    classify::message(&e),
                );
                return Ok(transient_or_failed(draft, &e));
            }
        }
        draft.set(
            condition::KUBECONFIG_READY,
            CondStatus::Unknown,
            reason::GARDENER_CLUSTER_CR_CREATED,
            "Gardener Cluster CR created, waiting for readiness",
        );
        draft.state(RuntimeState::Pending);
        return Ok(Action::requeue(SAFETY_REQUEUE));
    };
    if !super::delete::gardener_cluster_is_of(&gc.spec, runtime) {
        // Its admin kubeconfig is another cluster's: configuring administrators and OIDC
        // through it would change that cluster.
        draft.set(
            condition::KUBECONFIG_READY,
            CondStatus::False,
            reason::KUBERNETES_ERR,
            format!(
                "GardenerCluster {runtime_id} names shoot {:?}, not this Runtime's {:?}; the label {} must name this Runtime's GardenerCluster",
                gc.spec.shoot.name,
                runtime.spec.shoot.name,
                names::LABEL_RUNTIME_ID
            ),
        );
        draft.state(RuntimeState::Pending);
        return Ok(Action::requeue(SAFETY_REQUEUE));
    }
    let gc_ready = gc.state() == Some(names::GARDENER_CLUSTER_STATE_READY);
    if !gc_ready {
        draft.state(RuntimeState::Pending);
        return Ok(Action::requeue(SAFETY_REQUEUE));
    }
    draft.set(
        condition::KUBECONFIG_READY,
        CondStatus::True,
        reason::GARDENER_CLUSTER_CR_READY,
        "Gardener Cluster CR is ready.",
    );

    // A Shoot made anew (deleted by someone else) is a new cluster with a new CA, and the
    // kubeconfig the GardenerCluster holds may still be the old cluster's: its rotation is
    // forced now that Gardener can sign one (it signs none for a Shoot without addresses).
    // Decided from the Secret and the Shoot, so a restart in between forgets nothing. One
    // signed before a rotation of the cluster's CAs stops working when the rotation completes;
    // the GardenerCluster reconciler replaces it, told by the Shoot watch (forcing it here as
    // well would have Gardener sign twice).
    let created = shoot.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let runtime_client = match tokio::time::timeout(
        RUNTIME_CLUSTER_TIMEOUT,
        reconciler.runtime_cluster_client(
            runtime,
            &runtime_id,
            kubeconfigs_valid_from(shoot, jiff::Timestamp::now()),
        ),
    )
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e @ SkrError::SignedBefore { valid_from, .. })) => {
            if Some(valid_from) == created {
                tracing::info!(error = %e, "forcing the rotation of the admin kubeconfig");
                force_rotation(reconciler, runtime, &runtime_id).await;
            } else {
                tracing::info!(error = %e, "waiting for the rotation of the admin kubeconfig");
            }
            draft.set(
                condition::KUBECONFIG_READY,
                CondStatus::Unknown,
                reason::GARDENER_CLUSTER_CR_CREATED,
                format!("{e}; waiting for its rotation"),
            );
            draft.state(RuntimeState::Pending);
            return Ok(Action::requeue(RETRY));
        }
        Ok(Err(e)) => {
            tracing::info!(error = %e, "cannot build a client for the runtime cluster yet");
            draft.set(
                condition::CONFIGURED,
                CondStatus::False,
                reason::CONFIGURATION_ERROR,
                "failed to update kubeconfig admin access",
            );
            draft.state(RuntimeState::Pending);
            return Ok(Action::requeue(reconciler.runtime_cluster_failed(runtime)));
        }
        Err(_) => {
            tracing::info!(
                error = format!("timed out after {RUNTIME_CLUSTER_TIMEOUT:?}"),
                "cannot build a client for the runtime cluster yet"
            );
            draft.set(
                condition::CONFIGURED,
                CondStatus::False,
                reason::CONFIGURATION_ERROR,
                "failed to update kubeconfig admin access",
            );
            draft.state(RuntimeState::Pending);
            return Ok(Action::requeue(reconciler.runtime_cluster_failed(runtime)));
        }
    };

    if let Some(action) = runtime_cluster_step(
        reconciler,
        runtime,
        draft,
        condition::KYMA_SYSTEM_NS_CREATED,
        reason::KYMA_SYSTEM_NS_ERROR,
        "failed to create kyma-system namespace",
        kyma_system::apply_namespace(&runtime_client),
    )
    .await
    {
        return Ok(action);
    }
    draft.set(
        condition::KYMA_SYSTEM_NS_CREATED,
        CondStatus::True,
        reason::KYMA_SYSTEM_NS_READY,
        "Creation of kyma-system Namespace",
    );

    if reconciler.ctx.settings.runtime.bootstrapper.enabled
        && let Some(action) = bootstrap(reconciler, runtime, &runtime_client, draft).await
    {
        return Ok(action);
    }

    if let Some(action) =
        super::registry_cache::after_provisioned(reconciler, &runtime_client, runtime, draft).await
    {
        return Ok(action);
    }

    draft.remove(condition::LEGACY_OIDC_CONFIGURED);
    if let Some(action) = runtime_cluster_step(
        reconciler,
        runtime,
        draft,
        condition::OIDC_AND_CONFIG_MAP_CONFIGURED,
        reason::CONFIG_MAP_ERR,
        "Failed to apply kyma-provisioning-info config map, scheduling for retry",
        kyma_system::apply_provisioning_info(reconciler, &runtime_client, runtime, shoot),
    )
    .await
    {
        return Ok(action);
    }
    if oidc::extension_enabled(shoot) {
        let default = serde_json::to_value(&reconciler.config.cluster.default_shared_ias_tenant)
            .map(oidc_spec_from_provider)
            .map_err(Error::Serialize)?;
        let specs = oidc::wanted(runtime, default);
        if let Some(action) = runtime_cluster_step(
            reconciler,
            runtime,
            draft,
            condition::OIDC_AND_CONFIG_MAP_CONFIGURED,
            reason::OIDC_CONFIGURATION_ERR,
            "failed to configure OIDC",
            oidc::apply(&runtime_client, &specs),
        )
        .await
        {
            return Ok(action);
        }
        draft.set(
            condition::OIDC_AND_CONFIG_MAP_CONFIGURED,
            CondStatus::True,
            reason::OIDC_AND_CONFIG_MAPS_CONFIGURED,
            "OIDC and kyma-provisioning-info configuration completed",
        );
    } else {
        draft.set(
            condition::OIDC_AND_CONFIG_MAP_CONFIGURED,
            CondStatus::True,
            reason::OIDC_AND_CONFIG_MAPS_CONFIGURED,
            "OIDC extension disabled",
        );
    }

    if let Some(action) = runtime_cluster_step(
        reconciler,
        runtime,
        draft,
        condition::CONFIGURED,
        reason::CONFIGURATION_ERROR,
        "failed to update kubeconfig admin access",
        admins::apply(&runtime_client, &runtime.spec.security.administrators),
    )
    .await
    {
        return Ok(action);
    }
    draft.set(
        condition::CONFIGURED,
        CondStatus::True,
        reason::ADMINISTRATORS_CONFIGURED,
        "Cluster admin configuration completed",
    );
    if let Some(action) =
        super::audit_log::configure(reconciler, runtime, shoot, &runtime_client, draft).await
    {
        return Ok(action);
    }
    draft.state(RuntimeState::Ready);
    draft.provisioning_completed();
    reconciler.record_ready(runtime, shoot);
    tracing::info!("Runtime is Ready");
    Ok(Action::await_change())
}

/// The runtime bootstrapper (upstream `sFnInitializeRuntimeBootstrapper`): the configuration
/// copied, the manifests applied when the Deployment is missing or of another version or the
/// cluster has an older configuration than the current one, and
/// the Runtime kept `Pending` (looked at again every [`BOOTSTRAP_RETRY`]) until the Deployment
/// is ready; `None` when it is. A runtime cluster that does not answer, or refuses the
/// configuration, is retried with the Runtime's growing runtime-cluster backoff instead.
async fn bootstrap(
    reconciler: &Reconciler,
    runtime: &Runtime,
    runtime_client: &kube::Client,
    draft: &mut StatusDraft,
) -> Option<Action> {
    use crate::bootstrapper::{BootstrapError, apply_manifests, configure, installation};
    use kim_shared::bootstrapper::{Status, condition_for};
    let kcp = &reconciler.ctx.kcp;
    let ns = &reconciler.ctx.settings.namespace;
    let s = &reconciler.ctx.settings.runtime.bootstrapper;
    // Read first: a change seen during this pass is configured by the next one.
    let configuration = reconciler.bootstrapper_changes.now();
    // The cluster has an older configuration: the manifests are applied again too (once per
    // configuration), so that a change of them reaches it also without a new version of the
    // Deployment.
    let reconfigure = reconciler.manifests_outdated(runtime, configuration.0.as_ref());
    let pending = |draft: &mut StatusDraft, reason: &str, message: &str| {
        draft.set(
            condition::RUNTIME_BOOTSTRAPPER_READY,
            CondStatus::False,
            reason,
            message,
        );
        draft.state(RuntimeState::Pending);
        Some(Action::requeue(BOOTSTRAP_RETRY))
    };
    let failed = |draft: &mut StatusDraft, reason: &str, message: &str| {
        pending(draft, reason, message)?;
        Some(Action::requeue(reconciler.runtime_cluster_failed(runtime)))
    };
    let result = tokio::time::timeout(RUNTIME_CLUSTER_TIMEOUT, async {
        let changes = &reconciler.bootstrapper_changes;
        configure(kcp, ns, changes, runtime_client, s).await?;
        let (status, manifests) = installation(kcp, ns, changes, runtime_client, s).await?;
        let (status, applied) = match status {
            Status::NotStarted | Status::UpgradeNeeded => {
                let applied = apply_manifests(runtime_client, &manifests).await;
                (status, Some(applied.map(drop)))
            }
            // Judged by the Deployment as the apply left it (a changed template starts a
            // rollout); a failed apply is a failed upgrade.
            _ if reconfigure => match apply_manifests(runtime_client, &manifests).await {
                Ok(deployment) => (
                    kim_shared::bootstrapper::status(Some(&deployment), &manifests.version),
                    Some(Ok(())),
                ),
                Err(e) => (Status::UpgradeNeeded, Some(Err(e))),
            },
            _ => (status, None),
        };
        Ok::<_, BootstrapError>((status, applied))
    })
    .await;
    let (status, applied) = match result {
        Err(_) => {
            return failed(
                draft,
                reason::RUNTIME_BOOTSTRAPPER_STATUS_UNKNOWN,
                "Runtime bootstrapper status check failed",
            );
        }
        Ok(Err(e)) => {
            tracing::info!(error = %e, "runtime bootstrapper");
            return match e {
                BootstrapError::Configure(_) => failed(
                    draft,
                    reason::RUNTIME_BOOTSTRAPPER_CONFIGURATION_FAILED,
                    "Failed to copy configuration to the runtime cluster",
                ),
                _ => failed(
                    draft,
                    reason::RUNTIME_BOOTSTRAPPER_STATUS_UNKNOWN,
                    "Runtime bootstrapper status check failed",
                ),
            };
        }
        Ok(Ok(r)) => r,
    };
    let apply_failed = match &applied {
        Some(Err(e)) => {
            tracing::info!(error = %e, "runtime bootstrapper manifests");
            true
        }
        Some(Ok(())) => {
            reconciler.manifests_applied(runtime, configuration.0.clone());
            false
        }
        None => false,
    };
    let (type_, cond_status, cond_reason, message) = condition_for(status, apply_failed);
    match status {
        Status::Ready => {
            draft.set(type_, CondStatus::True, cond_reason, message);
            reconciler.record_bootstrapped(runtime, configuration).await;
            None
        }
        Status::Failed => {
            draft.set(type_, CondStatus::False, cond_reason, message);
            draft.state(RuntimeState::Failed);
            Some(Action::requeue(PERMANENT_RETRY))
        }
        _ if apply_failed => failed(draft, cond_reason, message),
        _ => {
            debug_assert_eq!(cond_status, "False");
            pending(draft, cond_reason, message)
        }
    }
}

/// How often an unfinished runtime bootstrapper installation is looked at again (upstream's).
const BOOTSTRAP_RETRY: Duration = Duration::from_secs(30);

/// The config's OIDC provider (camelCase JSON) as an `OpenIDConnect` spec.
fn oidc_spec_from_provider(v: serde_json::Value) -> serde_json::Value {
    let get = |k: &str| v.get(k).cloned().unwrap_or(serde_json::Value::Null);
    let mut spec = serde_json::json!({
        "issuerURL": get("issuerURL"),
        "clientID": get("clientID"),
        "usernameClaim": get("usernameClaim"),
        "usernamePrefix": get("usernamePrefix"),
        "groupsClaim": get("groupsClaim"),
        "supportedSigningAlgs": get("signingAlgs"),
    });
    if let Some(m) = spec.as_object_mut() {
        m.retain(|_, v| !v.is_null());
    }
    spec
}

fn transient_or_failed(draft: &mut StatusDraft, e: &kube::Error) -> Action {
    match classify::classify(e) {
        ApiErrorKind::Permanent => {
            draft.state(RuntimeState::Failed);
            Action::requeue(PERMANENT_RETRY)
        }
        _ => {
            draft.state(RuntimeState::Pending);
            Action::requeue(RETRY)
        }
    }
}

/// Builds a client for the runtime cluster from the admin kubeconfig Secret
/// `kubeconfig-<runtime-id>` (key `config`) that the GardenerCluster reconciler maintains.
/// Its requests are counted in `infrastructure_manager_im_runtime_cluster_requests_total`.
pub async fn runtime_cluster_client(
    ctx: &crate::context::Context,
    namespace: &str,
    runtime_id: &str,
    valid_from: Option<jiff::Timestamp>,
) -> Result<kube::Client, SkrError> {
    let name = names::kubeconfig_secret_name(runtime_id);
    let secret = Api::<Secret>::namespaced(ctx.kcp.clone(), namespace)
        .get(&name)
        .await
        .map_err(|e| SkrError::Secret {
            name: name.clone(),
            source: e,
        })?;
    if let Some(valid_from) = valid_from.filter(|&from| signed_before(&secret, Some(from))) {
        return Err(SkrError::SignedBefore { name, valid_from });
    }
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(names::KUBECONFIG_SECRET_KEY))
        .map(|b| b.0.clone())
        .ok_or_else(|| SkrError::NoKey { name: name.clone() })?;
    let config = crate::gardener::client::config_from_secret(&bytes, RUNTIME_CLUSTER_TIMEOUT)
        .await
        .map_err(|source| SkrError::Parse {
            name: name.clone(),
            source,
        })?;
    crate::gardener::client::runtime_client(config, ctx.metrics.runtime_cluster_requests.clone())
        .map_err(|e| SkrError::Client { name, source: e })
}

/// Since when an admin kubeconfig of the Shoot's cluster is good: since the Shoot was created
/// (one signed before is an earlier cluster's of the same name) and since the new CAs of its
/// last certificate-authority rotation were in place (one signed before stops working when the
/// rotation completes). New CAs in place by a clock ahead of ours (`now`) count once ours gets
/// there, as the GardenerCluster reconciler counts them: a kubeconfig signed before then would
/// predate them too.
fn kubeconfigs_valid_from(shoot: &Shoot, now: jiff::Timestamp) -> Option<jiff::Timestamp> {
    let created = shoot.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let new_cas = shoot
        .status
        .as_ref()
        .and_then(|s| s.new_cas_since())
        .filter(|&since| since <= now);
    created.max(new_cas)
}

/// Whether the Secret's kubeconfig was signed (its `last-sync`) before `valid_from`. Both times
/// have whole seconds; a kubeconfig cannot be signed in the second its Shoot is created (the
/// Shoot has no address yet), and one signed in the second the new CAs were in place counts as
/// signed after (as the GardenerCluster reconciler counts it). A Secret without a readable
/// `last-sync` says nothing.
fn signed_before(secret: &Secret, valid_from: Option<jiff::Timestamp>) -> bool {
    let signed = secret
        .annotations()
        .get(names::ANNOTATION_LAST_SYNC)
        .and_then(|raw| crate::gardener_cluster::rotation::parse_last_sync(raw));
    matches!((signed, valid_from), (Some(signed), Some(from)) if signed < from)
}

/// The runtime cluster cannot be reached yet. Messages never contain the kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum SkrError {
    /// The Secret cannot be read (not yet written, usually).
    #[error("kubeconfig Secret {name}: {source}")]
    Secret {
        /// Secret name.
        name: String,
        /// Why.
        source: kube::Error,
    },
    /// The Secret has no `config` key (for example during a forced rotation).
    #[error("kubeconfig Secret {name} has no key `config` yet")]
    NoKey {
        /// Secret name.
        name: String,
    },
    /// The kubeconfig does not parse or is not strict enough (exec plugins, files, no
    /// certificate checks).
    #[error("kubeconfig Secret {name}: key `config`: {source}")]
    Parse {
        /// Secret name.
        name: String,
        /// Why (no values of the kubeconfig).
        source: crate::gardener::client::SecretKubeconfigError,
    },
    /// The Secret's kubeconfig was signed before the Shoot was created (it is the admin
    /// kubeconfig of an earlier cluster of the same name) or before its cluster's certificate
    /// authorities were rotated.
    #[error(
        "kubeconfig Secret {name} holds an admin kubeconfig signed before {valid_from}, when the Shoot was created or its certificate authorities were rotated"
    )]
    SignedBefore {
        /// Secret name.
        name: String,
        /// Since when a kubeconfig is good.
        valid_from: jiff::Timestamp,
    },
    /// No client could be built.
    #[error("kubeconfig Secret {name}: {source}")]
    Client {
        /// Secret name.
        name: String,
        /// Why.
        source: kube::Error,
    },
}

impl Reconciler {
    /// A client for the Runtime's cluster; with `valid_from`, none from a kubeconfig signed
    /// before then ([`SkrError::SignedBefore`]).
    pub async fn runtime_cluster_client(
        &self,
        runtime: &Runtime,
        runtime_id: &str,
        valid_from: Option<jiff::Timestamp>,
    ) -> Result<kube::Client, SkrError> {
        runtime_cluster_client(
            &self.ctx,
            &runtime.namespace().unwrap_or_default(),
            runtime_id,
            valid_from,
        )
        .await
    }
}

/// The GardenerCluster a Runtime gets: named after the runtime ID, with upstream's labels.
pub fn gardener_cluster_for(runtime: &Runtime, runtime_id: &str, shoot: &Shoot) -> GardenerCluster {
    let mut labels = std::collections::BTreeMap::new();
    for key in names::LABELS_COPIED_TO_GARDENER_CLUSTER {
        if let Some(v) = runtime.labels().get(key) {
            labels.insert(key.to_owned(), v.clone());
        }
    }
    labels.insert(
        names::LABEL_PLATFORM_REGION.to_owned(),
        runtime.spec.shoot.platform_region.clone(),
    );
    labels.insert(
        names::LABEL_REGION.to_owned(),
        runtime.spec.shoot.region.clone(),
    );
    labels.insert(
        names::LABEL_SHOOT_NAME.to_owned(),
        runtime.spec.shoot.name.clone(),
    );
    labels.insert(
        names::LABEL_MANAGED_BY.to_owned(),
        names::MANAGED_BY_INFRASTRUCTURE_MANAGER.to_owned(),
    );
    labels.insert(names::LABEL_INTERNAL.to_owned(), "true".to_owned());
    let mut gc = GardenerCluster::new(
        runtime_id,
        kim_shared::api::GardenerClusterSpec {
            kubeconfig: kim_shared::api::gardener_cluster::Kubeconfig {
                secret: kim_shared::api::gardener_cluster::SecretKeyRef {
                    key: names::KUBECONFIG_SECRET_KEY.to_owned(),
                    name: names::kubeconfig_secret_name(runtime_id),
                    namespace: runtime.namespace().unwrap_or_default(),
                },
            },
            shoot: kim_shared::api::gardener_cluster::ShootReference {
                name: runtime.spec.shoot.name.clone(),
            },
        },
    );
    gc.metadata.namespace = runtime.namespace();
    gc.metadata.labels = Some(labels);
    if let Some(domain) = shoot.spec.dns.as_ref().and_then(|d| d.domain.clone()) {
        gc.metadata.annotations = Some([(names::ANNOTATION_SKR_DOMAIN.to_owned(), domain)].into());
    }
    gc
}

/// Forces the rotation of the GardenerCluster's admin kubeconfig (the Shoot was made anew, so
/// the one it holds is the old cluster's). A failure is logged: the next pass asks again.
async fn force_rotation(reconciler: &Reconciler, runtime: &Runtime, runtime_id: &str) {
    let patch = serde_json::json!({"metadata": {"annotations": {
        names::ANNOTATION_FORCE_KUBECONFIG_ROTATION: "true"
    }}});
    match reconciler
        .gardener_clusters::<crate::stored::StatusApart<kim_shared::api::GardenerCluster>>(runtime)
        .patch(
            runtime_id,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => tracing::info!("the Shoot was made anew: its admin kubeconfig is rotated"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot force the rotation of the admin kubeconfig of a Shoot made anew")
        }
    }
}

/// Creates the Runtime's GardenerCluster; one that exists already is fine.
pub(super) async fn create_gardener_cluster(
    reconciler: &Reconciler,
    runtime: &Runtime,
    runtime_id: &str,
    shoot: &Shoot,
) -> Result<(), kube::Error> {
    let api: Api<kim_shared::api::GardenerCluster> = reconciler.gardener_clusters(runtime);
    match api
        .create(
            &PostParams::default(),
            &gardener_cluster_for(runtime, runtime_id, shoot),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if classify::classify(&e) == ApiErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::{kubeconfigs_valid_from, signed_before};
    use k8s_openapi::api::core::v1::Secret;
    use kim_shared::gardener::Shoot;
    use kim_shared::names;

    #[test]
    fn a_kubeconfig_signed_before_its_shoot_was_created_is_another_clusters() {
        let secret = |last_sync: Option<&str>| {
            let mut secret = Secret::default();
            secret.metadata.annotations = last_sync.map(|t| {
                std::collections::BTreeMap::from([(
                    names::ANNOTATION_LAST_SYNC.to_owned(),
                    t.to_owned(),
                )])
            });
            secret
        };
        let created: Option<jiff::Timestamp> = Some("2026-12-04T10:00:00Z".parse().expect("time"));
        assert!(signed_before(
            &secret(Some("2026-12-04T09:59:59Z")),
            created
        ));
        assert!(!signed_before(
            &secret(Some("2026-12-04T10:00:00Z")),
            created
        ));
        assert!(!signed_before(
            &secret(Some("2026-12-04T10:00:01Z")),
            created
        ));
        // Nothing to compare: the kubeconfig is used as before.
        assert!(!signed_before(&secret(None), created));
        assert!(!signed_before(&secret(Some("yesterday")), created));
        assert!(!signed_before(&secret(Some("2026-12-04T09:59:59Z")), None));
    }

    #[test]
    fn kubeconfigs_are_valid_from_the_later_of_creation_and_the_new_cas() {
        let shoot = |created: &str, ca_rotation: serde_json::Value| -> Shoot {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
                "metadata": {"name": "s", "creationTimestamp": created},
                "spec": {"region": "r", "provider": {"type": "aws"}, "kubernetes": {}},
                "status": {"credentials": {"rotation": {"certificateAuthorities": ca_rotation}}},
            }))
            .expect("a Shoot")
        };
        let ts = |t: &str| Some(t.parse::<jiff::Timestamp>().expect("time"));
        let now = "2026-12-07T00:00:00Z".parse().expect("time");
        let kubeconfigs_valid_from_now = |shoot: &Shoot| kubeconfigs_valid_from(shoot, now);
        let created = "2026-12-04T10:00:00Z";
        assert_eq!(
            kubeconfigs_valid_from_now(&shoot(created, serde_json::json!({}))),
            ts(created)
        );
        // Being prepared: the CAs of the last rotation count.
        assert_eq!(
            kubeconfigs_valid_from_now(&shoot(
                created,
                serde_json::json!({"phase": "Preparing", "lastInitiationTime": "2026-12-05T08:00:00Z"})
            )),
            ts(created)
        );
        assert_eq!(
            kubeconfigs_valid_from_now(&shoot(
                created,
                serde_json::json!({"phase": "Prepared", "lastInitiationTime": "2026-12-05T08:00:00Z",
                    "lastInitiationFinishedTime": "2026-12-05T08:05:00Z"})
            )),
            ts("2026-12-05T08:05:00Z")
        );
        // Completed, the time the new CAs were in place still counts, not the completion.
        assert_eq!(
            kubeconfigs_valid_from_now(&shoot(
                created,
                serde_json::json!({"phase": "Completed", "lastInitiationFinishedTime": "2026-12-05T08:05:00Z",
                    "lastCompletionTime": "2026-12-06T08:00:00Z"})
            )),
            ts("2026-12-05T08:05:00Z")
        );
        // A Gardener that reports only the completion.
        assert_eq!(
            kubeconfigs_valid_from_now(&shoot(
                created,
                serde_json::json!({"phase": "Completed", "lastCompletionTime": "2026-12-06T08:00:00Z"})
            )),
            ts("2026-12-06T08:00:00Z")
        );
        // In place by a clock ahead of ours: not yet.
        assert_eq!(
            kubeconfigs_valid_from_now(&shoot(
                created,
                serde_json::json!({"lastInitiationFinishedTime": "2026-12-07T00:00:05Z"})
            )),
            ts(created)
        );
        // A rotation before this Shoot was created (the Shoot's status is new): creation counts.
        assert_eq!(
            kubeconfigs_valid_from_now(&shoot(
                created,
                serde_json::json!({"lastInitiationFinishedTime": "2026-12-01T00:00:00Z"})
            )),
            ts(created)
        );
    }
}
