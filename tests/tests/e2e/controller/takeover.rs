//! Take-over from today's upstream KIM: a control plane that switches to us already holds
//! Runtimes with status, their Shoots, GardenerClusters, kubeconfig Secrets and structured
//! authentication ConfigMaps, all written by upstream. Our controller starting on them must
//! change no Shoot (a spec change makes Gardener reconcile the cluster and may roll its nodes),
//! ask Gardener for no kubeconfig that is not due, and keep every Runtime Ready in every status
//! it writes.
//!
//! The objects are laid down as upstream writes them. The Runtime, the Shoot upstream's
//! conversion makes of it and the structured-auth ConfigMap come from the hand-written
//! fixtures of `tests/fixtures/takeover/` (reviewed against upstream's converter, see its
//! README); the rest follows upstream's controllers, as stated where each object is written:
//! field managers (`manager`, the name of upstream's binary, for its creates, updates and
//! status updates; `kim` for its server-side applies), labels, annotations, conditions.
//!
//! Three Runtimes in three states upstream leaves them in:
//! - aws: provisioned, never changed since (the Shoot's last operation is its Create);
//! - azure: the Runtime was changed once (generation 2: KEB edited the administrators), upstream
//!   applied the patch conversion with its field manager `kim`, the Shoot did not change, so
//!   upstream's `Provisioned` reads "Shoot patched without changes";
//! - gcp: provisioned, and Gardener reconciled the Shoot since (its daily reconcile: the last
//!   operation is a `Reconcile`); its kubeconfig Secret is older than the rotation period, so
//!   exactly this one kubeconfig is due;
//! - a second aws one whose cluster cannot be reached (hibernated: its API server is scaled to
//!   zero) and whose Shoot's last Gardener reconcile erred: upstream's restart leaves a Ready
//!   Runtime alone unless its Shoot is mid-reconcile, so it must stay Ready untouched too (it
//!   takes no part in the force-patch below, which does go into its cluster).
//!
//! Gardener calls are counted in the KCP audit log (Gardener is aggregated into the KCP), by
//! the user the controller authenticates as.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kim_shared::api::{GardenerCluster, Runtime, RuntimeState};
use kim_shared::gardener::{AdminKubeconfigRequest, Shoot};
use kim_shared::names;
use kim_tests::controller::*;
use kim_tests::fixtures::PROJECT_NAMESPACE;
use kim_tests::testenv::TestEnv;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// The field manager of upstream's creates, updates and status updates: client-go names it
/// after the binary, which upstream's image calls `manager`.
pub(super) const UPSTREAM_MANAGER: &str = "manager";
/// The field manager of upstream's server-side applies of a Shoot.
const UPSTREAM_APPLY_MANAGER: &str = "kim";
/// The test controller's `--kubeconfig-expiration-time` is 1h with upstream's rotation ratio
/// 0.6: a rotation is due 0.95 x 36 min after the last sync.
const DUE_SYNC_AGE: jiff::SignedDuration = jiff::SignedDuration::from_hours(2);
pub(super) const TIMEOUT: Duration = Duration::from_secs(120);

/// One Runtime as upstream left it.
pub(super) struct Laid {
    pub(super) provider: &'static str,
    pub(super) id: String,
    pub(super) shoot: String,
    /// Whether its kubeconfig is due for rotation.
    pub(super) due: bool,
    /// The Shoot as it was before our controller started.
    pub(super) shoot_before: DynamicObject,
    pub(super) secret_before: Secret,
    pub(super) config_map_before: ConfigMap,
    /// (type, status, reason, message) of the conditions after the take-over: upstream's.
    pub(super) conditions: Vec<(String, String, String, String)>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn taking_over_from_upstream_changes_no_shoot_and_keeps_runtimes_ready() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-takeover").await?;
    let suffix = ns[ns.len().saturating_sub(4)..].to_owned();
    let user = format!("kim-takeover-{suffix}");
    // Built first: it also creates the audit-log credentials Secrets the Shoots reference.
    let wiring = Wiring {
        user: Some(user.clone()),
        ..Wiring::default()
    };
    let (args, dir) = controller_args_wired(env, &ns, &[], &wiring).await?;

    let mut laid = Vec::new();
    for (i, provider) in ["aws", "azure", "gcp"].into_iter().enumerate() {
        let id = format!("tk{i}-{suffix}");
        laid.push(
            lay_down(env, &ns, provider, &id)
                .await
                .with_context(|| format!("laying down the {provider} Runtime as upstream"))?,
        );
    }

    // Upstream's last status of the first Runtime still lists the errors of an operation long
    // over (its Shoot has none now): after the take-over, only what our status sets is left.
    // Upstream wrote the status with `Update`, whose entry keeps owning what it set, so our
    // apply alone could never remove it.
    Api::<Runtime>::namespaced(env.kcp_client().await?, &ns)
        .patch_status(
            &laid[0].id,
            &PatchParams {
                field_manager: Some(UPSTREAM_MANAGER.into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"status": {"shootLastErrors": [{
                "description": "infrastructure reconcile failed: quota exceeded",
                "codes": ["ERR_INFRA_QUOTA_EXCEEDED"],
                "lastUpdateTime": "2026-01-01T00:00:00Z"}]}})),
        )
        .await?;

    let dark_id = format!("tk3-{suffix}");
    let mut dark = lay_down(env, &ns, "aws", &dark_id)
        .await
        .context("laying down the unreachable Runtime as upstream")?;
    go_dark(env, &ns, &mut dark).await?;
    laid.push(dark);

    // Every version of every Runtime from here on.
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    let seen: Arc<Mutex<Vec<Runtime>>> = Arc::default();
    let watch = {
        let seen = seen.clone();
        let stream = watcher(runtimes.clone(), watcher::Config::default()).applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(rt)) = stream.next().await {
                if let Ok(mut seen) = seen.lock() {
                    seen.push(rt);
                }
            }
        })
    };

    // The watch must have listed the Runtimes before the controller can write the first status.
    eventually("the watch listed the Runtimes", TIMEOUT, || async {
        Ok(seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.len() >= laid.len())
    })
    .await?;
    let ctl = start_with_args(args, dir).await?;

    // Reconciled: every Runtime's status names its generation (written at the end of our
    // first pass), every Secret carries our owner reference, the due one is rotated.
    let gcs: Api<GardenerCluster> = Api::namespaced(env.kcp_client().await?, &ns);
    let secrets: Api<Secret> = Api::namespaced(env.kcp_client().await?, &ns);
    for l in &laid {
        eventually(&format!("{} reconciled", l.provider), TIMEOUT, || async {
            let rt = runtimes.get(&l.id).await?;
            Ok(rt.status.as_ref().and_then(|s| s.observed_generation) == rt.metadata.generation)
        })
        .await?;
        let gc_uid = gcs.get(&l.id).await?.uid().context("uid")?;
        eventually(
            &format!("{} kubeconfig Secret adopted", l.provider),
            TIMEOUT,
            || async {
                let s = secrets.get(&names::kubeconfig_secret_name(&l.id)).await?;
                let adopted = s
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == gc_uid);
                let rotated = last_sync(&s) != last_sync(&l.secret_before);
                Ok(adopted && rotated == l.due)
            },
        )
        .await?;
    }
    // Writes that follow the first pass (events of our own status writes) must change
    // nothing either.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let shoots = shoots_api(env).await?;
    let cms: Api<ConfigMap> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    for l in &laid {
        let what = l.provider;
        let now = shoots.get(&l.shoot).await?;
        assert_eq!(
            now.metadata.generation, l.shoot_before.metadata.generation,
            "{what}: the Shoot's generation moved"
        );
        assert_eq!(
            now.data["spec"], l.shoot_before.data["spec"],
            "{what}: the Shoot's spec changed"
        );
        let writes = shoot_writes(env, &user, &l.shoot)?;
        assert!(
            writes.is_empty(),
            "{what}: the controller wrote the Shoot: {writes:?}"
        );

        let calls = admin_kubeconfig_calls(env, &user, &l.shoot)?;
        assert_eq!(
            calls,
            usize::from(l.due),
            "{what}: adminkubeconfig calls by the controller (due: {})",
            l.due
        );
        let secret = secrets.get(&names::kubeconfig_secret_name(&l.id)).await?;
        if l.due {
            assert_ne!(
                secret.data, l.secret_before.data,
                "{what}: the due kubeconfig was not replaced"
            );
        } else {
            assert_eq!(
                secret.data, l.secret_before.data,
                "{what}: a kubeconfig not due was rewritten"
            );
            assert_eq!(
                last_sync(&secret),
                last_sync(&l.secret_before),
                "{what}: last-sync of a kubeconfig not due changed"
            );
        }

        let cm = cms
            .get(&format!("structured-auth-config-{}", l.shoot))
            .await?;
        assert_eq!(
            cm.metadata.resource_version, l.config_map_before.metadata.resource_version,
            "{what}: the structured-auth ConfigMap was written"
        );

        let gc = gcs.get(&l.id).await?;
        assert_eq!(
            gc.status.as_ref().and_then(|s| s.state.as_deref()),
            Some(names::GARDENER_CLUSTER_STATE_READY),
            "{what}: GardenerCluster {:?}",
            gc.status
        );

        let rt = runtimes.get(&l.id).await?;
        let status = rt.status.as_ref().context("status")?;
        assert_eq!(status.state, RuntimeState::Ready, "{what}: {status:?}");
        assert_eq!(
            status
                .shoot_last_operation
                .as_ref()
                .map(|op| op.state.as_str()),
            l.shoot_before.data["status"]["lastOperation"]["state"].as_str(),
            "{what}: the Shoot's last operation is surfaced"
        );
        assert_eq!(
            conditions_of(&rt),
            l.conditions,
            "{what}: conditions changed"
        );
        // The Shoot's errors, and only those: the unreachable one's Shoot has some.
        assert_eq!(
            status.shoot_last_errors.is_some(),
            l.id == dark_id,
            "{what}: shootLastErrors {:?}",
            status.shoot_last_errors
        );
        let status_updates: Vec<_> = rt
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|e| {
                e.subresource.as_deref() == Some("status")
                    && e.operation.as_deref() == Some("Update")
            })
            .collect();
        assert!(
            status_updates.is_empty(),
            "{what}: the status is still co-owned by {status_updates:?}"
        );
    }

    // The first change of a Runtime after the switch (here the operator's force-patch, which
    // applies the Runtime as a change does) applies our conversion with upstream's field
    // manager over upstream's Shoot: for these Runtimes it must be the Shoot upstream made, so
    // neither the Shoot nor its structured-auth ConfigMap changes.
    let reachable: Vec<&Laid> = laid.iter().filter(|l| l.id != dark_id).collect();
    for l in &reachable {
        annotate_runtime(
            &runtimes,
            &l.id,
            names::ANNOTATION_FORCE_PATCH_RECONCILIATION,
            Some("true"),
        )
        .await?;
    }
    for l in &reachable {
        eventually(
            &format!("{} force-patched", l.provider),
            TIMEOUT,
            || async {
                let rt = runtimes.get(&l.id).await?;
                Ok(!rt
                    .annotations()
                    .contains_key(names::ANNOTATION_FORCE_PATCH_RECONCILIATION))
            },
        )
        .await?;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for l in &reachable {
        let what = l.provider;
        let now = shoots.get(&l.shoot).await?;
        assert_eq!(
            now.metadata.generation, l.shoot_before.metadata.generation,
            "{what}: our patch changed the Shoot's generation"
        );
        assert_eq!(
            now.data["spec"], l.shoot_before.data["spec"],
            "{what}: our patch changed the Shoot's spec"
        );
        assert!(
            shoot_writes(env, &user, &l.shoot)?
                .iter()
                .any(|(verb, code)| verb == "patch" && *code < 300),
            "{what}: the force-patch did not apply the Shoot"
        );
        let cm = cms
            .get(&format!("structured-auth-config-{}", l.shoot))
            .await?;
        assert_eq!(
            cm.metadata.resource_version, l.config_map_before.metadata.resource_version,
            "{what}: the structured-auth ConfigMap was rewritten with the same content"
        );
        let rt = runtimes.get(&l.id).await?;
        let provisioned = rt
            .condition(names::condition::PROVISIONED)
            .context("Provisioned")?;
        assert_eq!(
            (provisioned.status.as_str(), provisioned.message.as_str()),
            ("True", "Shoot patched without changes"),
            "{what}"
        );
    }

    watch.abort();
    let seen = seen
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    for l in &laid {
        let versions: Vec<&Runtime> = seen.iter().filter(|rt| rt.name_any() == l.id).collect();
        ensure!(
            versions.len() >= 2,
            "{}: the watch saw {} versions (no status write of ours?)",
            l.provider,
            versions.len()
        );
        for rt in versions {
            let status = rt.status.as_ref().context("status")?;
            assert_eq!(
                status.state,
                RuntimeState::Ready,
                "{}: a status not Ready was written: {status:?}",
                l.provider
            );
            for c in status.conditions.iter().flatten() {
                assert_eq!(
                    c.status, "True",
                    "{}: condition {} flipped: {c:?}",
                    l.provider, c.type_
                );
            }
        }
    }
    ctl.stop().await;
    Ok(())
}

pub(super) async fn shoots_api(env: &TestEnv) -> Result<Api<DynamicObject>> {
    Ok(Api::namespaced_with(
        env.garden_client().await?,
        PROJECT_NAMESPACE,
        &ApiResource::erase::<Shoot>(&()),
    ))
}

/// The fixture of `provider` with the placeholders replaced.
fn fixture(provider: &str, ns: &str, id: &str, shoot: &str) -> Result<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("fixtures/takeover/{provider}.yaml"));
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let text = text
        .replace("RUNTIME_ID", id)
        .replace("SHOOT_NAME", shoot)
        .replace("KCP_NAMESPACE", ns)
        .replace("PROJECT_NAMESPACE", PROJECT_NAMESPACE);
    Ok(serde_yaml_ng::from_str(&text)?)
}

/// Writes one Runtime and everything upstream keeps for it, in the order upstream does.
pub(super) async fn lay_down(
    env: &TestEnv,
    ns: &str,
    provider: &'static str,
    id: &str,
) -> Result<Laid> {
    let shoot_name = shoot_name(id);
    let f = fixture(provider, ns, id, &shoot_name)?;
    let kcp = env.kcp_client().await?;
    let garden = env.garden_client().await?;
    let create = PostParams {
        field_manager: Some(UPSTREAM_MANAGER.into()),
        ..PostParams::default()
    };
    let update = PatchParams {
        field_manager: Some(UPSTREAM_MANAGER.into()),
        ..PatchParams::default()
    };

    // KEB creates the Runtime; upstream adds its finalizer.
    let runtimes: Api<Runtime> = Api::namespaced(kcp.clone(), ns);
    let rt: Runtime = serde_json::from_value(f["runtime"].clone())?;
    runtimes.create(&PostParams::default(), &rt).await?;
    runtimes
        .patch(
            id,
            &update,
            &Patch::Merge(json!({"metadata": {"finalizers": [names::RUNTIME_FINALIZER]}})),
        )
        .await?;

    // sFnCreateShoot: the structured-auth ConfigMap, then the Shoot (a create).
    let cms: Api<ConfigMap> = Api::namespaced(garden.clone(), PROJECT_NAMESPACE);
    cms.create(
        &create,
        &serde_json::from_value(f["structuredAuth"].clone())?,
    )
    .await?;
    let shoots = shoots_api(env).await?;
    let created: DynamicObject = serde_json::from_value(f["shoot"].clone())?;
    shoots
        .create(&create, &created)
        .await
        .context("create the upstream Shoot")?;
    let mut live = wait_succeeded(&shoots, &shoot_name, "Create").await?;

    let mut provisioned = (
        "ShootCreationCompleted",
        "Shoot creation completed".to_owned(),
    );
    match provider {
        "azure" => {
            // KEB changes the Runtime (generation 2); upstream's patch conversion applies the
            // same Shoot with the new generation, so nothing but the annotation changes.
            runtimes
                .patch(
                    id,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"security": {"administrators":
                        ["admin@example.com", "second.admin@example.com"]}}})),
                )
                .await?;
            let generation_before = live.metadata.generation;
            let body = upstream_patch(&f["shoot"], &live, "2")?;
            live = shoots
                .patch(
                    &shoot_name,
                    &PatchParams::apply(UPSTREAM_APPLY_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await
                .context("upstream's server-side apply")?;
            ensure!(
                live.metadata.generation == generation_before,
                "the fixture's patch changed the Shoot: it is not what upstream's patch \
                 conversion makes of the Shoot upstream created"
            );
            provisioned = ("Processing", "Shoot patched without changes".to_owned());
        }
        "gcp" => {
            // Gardener's daily reconcile (the simulator runs it on the operation annotation).
            shoots
                .patch(
                    &shoot_name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations":
                        {names::GARDENER_ANNOTATION_OPERATION: names::GARDENER_OPERATION_RECONCILE}}})),
                )
                .await?;
            live = wait_succeeded(&shoots, &shoot_name, "Reconcile").await?;
        }
        _ => {}
    }

    // sFnHandleKubeconfig: the GardenerCluster (makeGardenerClusterForRuntime).
    let rt = runtimes.get(id).await?;
    let label = |k: &str| rt.labels().get(k).cloned().unwrap_or_default();
    let mut gc_labels = serde_json::Map::new();
    for k in [
        names::LABEL_INSTANCE_ID,
        names::LABEL_RUNTIME_ID,
        names::LABEL_BROKER_PLAN_ID,
        names::LABEL_BROKER_PLAN_NAME,
        names::LABEL_GLOBAL_ACCOUNT_ID,
        names::LABEL_SUBACCOUNT_ID,
        names::LABEL_KYMA_NAME,
    ] {
        gc_labels.insert(k.into(), json!(label(k)));
    }
    gc_labels.insert(
        names::LABEL_PLATFORM_REGION.into(),
        json!(rt.spec.shoot.platform_region),
    );
    gc_labels.insert(names::LABEL_REGION.into(), json!(rt.spec.shoot.region));
    gc_labels.insert(names::LABEL_SHOOT_NAME.into(), json!(shoot_name));
    gc_labels.insert(
        names::LABEL_MANAGED_BY.into(),
        json!(names::MANAGED_BY_INFRASTRUCTURE_MANAGER),
    );
    gc_labels.insert(names::LABEL_INTERNAL.into(), json!("true"));
    let domain = live.data["spec"]["dns"]["domain"]
        .as_str()
        .context("Gardener gave the Shoot no DNS domain")?
        .to_owned();
    let secret_name = names::kubeconfig_secret_name(id);
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), ns);
    let gc: GardenerCluster = serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "GardenerCluster",
        "metadata": {
            "name": id, "namespace": ns,
            "annotations": {names::ANNOTATION_SKR_DOMAIN: domain},
            "labels": gc_labels,
        },
        "spec": {
            "shoot": {"name": shoot_name},
            "kubeconfig": {"secret": {"name": secret_name, "namespace": ns, "key": "config"}},
        },
    }))?;
    gcs.create(&create, &gc).await?;

    // The GardenerCluster controller: the Secret (newSecret: the GardenerCluster's labels plus
    // managed-by and cluster-name, last-sync in RFC 3339 seconds, the kubeconfig as
    // stringData), then its status (UpdateConditionForReadyState).
    // A fresh kubeconfig is signed now, after its Shoot was created, as every real one is (one
    // signed before its Shoot is an earlier cluster's, and is rotated before it is used).
    let due = provider == "gcp";
    let synced = jiff::Timestamp::now()
        - if due {
            DUE_SYNC_AGE
        } else {
            jiff::SignedDuration::ZERO
        };
    let kubeconfig = issue_kubeconfig(env, &shoot_name).await?;
    let mut secret_labels = gc_labels.clone();
    secret_labels.insert(names::LABEL_CLUSTER_NAME.into(), json!(id));
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), ns);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {
            "name": secret_name, "namespace": ns,
            "labels": secret_labels,
            "annotations": {names::ANNOTATION_LAST_SYNC: synced.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()},
        },
        "stringData": {"config": kubeconfig},
    }))?;
    let secret_before = secrets.create(&create, &secret).await?;
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    gcs.patch_status(
        id,
        &update,
        &Patch::Merge(json!({"status": {"state": "Ready", "conditions": [{
            "type": "KubeconfigManagement", "status": "True",
            "reason": "KubeconfigSecretCreated", "message": "Secret created successfully.",
            "lastTransitionTime": now,
        }]}})),
    )
    .await?;

    // sFnApplyClusterRoleBindings: a binding per administrator in the cluster, labelled as
    // upstream's (the shoot cluster is shared: one that exists is left alone).
    ensure_admin_binding(env, "admin@example.com").await?;
    if provider == "azure" {
        ensure_admin_binding(env, "second.admin@example.com").await?;
    }

    // The Runtime's status after upstream's last pass (UpdateStatePending/UpdateStateReady set
    // the conditions in this order; exposeShootStatusInfo copies the Shoot's last operation).
    let conditions = [
        ("Provisioned", provisioned.0, provisioned.1.as_str()),
        (
            "KubeconfigReady",
            "GardenerClusterCRReady",
            "Gardener Cluster CR is ready.",
        ),
        (
            "KymaSystemNSCreated",
            "KymaSystemNSReady",
            "Creation of kyma-system Namespace",
        ),
        (
            "OidcAndConfigMapConfigured",
            "OidcAndConfigMapsConfigured",
            "OIDC and kyma-provisioning-info configuration completed",
        ),
        (
            "Configured",
            "AdministratorsConfigured",
            "Cluster admin configuration completed",
        ),
    ];
    let status = json!({
        "state": "Ready",
        "provisioningCompleted": true,
        "shootLastOperation": live.data["status"]["lastOperation"],
        "conditions": conditions.iter().map(|(t, r, m)| json!({
            "type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": now,
        })).collect::<Vec<_>>(),
    });
    runtimes
        .patch_status(id, &update, &Patch::Merge(json!({ "status": status })))
        .await?;

    let config_map_before = cms
        .get(&format!("structured-auth-config-{shoot_name}"))
        .await?;
    Ok(Laid {
        provider,
        id: id.to_owned(),
        shoot: shoot_name,
        due,
        shoot_before: shoots.get(&live.name_any()).await?,
        secret_before,
        config_map_before,
        conditions: conditions
            .iter()
            .map(|(t, r, m)| {
                (
                    (*t).to_owned(),
                    "True".to_owned(),
                    (*r).to_owned(),
                    (*m).to_owned(),
                )
            })
            .collect(),
    })
}

/// Makes `laid`'s cluster unreachable (its kubeconfig points at a closed port, as a hibernated
/// cluster's API server answers no connection) and its Shoot's last operation a Gardener
/// reconcile that erred.
async fn go_dark(env: &TestEnv, ns: &str, laid: &mut Laid) -> Result<()> {
    let secrets: Api<Secret> = Api::namespaced(env.kcp_client().await?, ns);
    let name = names::kubeconfig_secret_name(&laid.id);
    let kubeconfig = laid
        .secret_before
        .data
        .as_ref()
        .and_then(|d| d.get("config"))
        .context("kubeconfig")?;
    let text = String::from_utf8(kubeconfig.0.clone())?;
    let dark: String = text
        .lines()
        .map(|line| match line.split_once("server: ") {
            Some((indent, _)) => format!("{indent}server: https://127.0.0.1:9"),
            None => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    ensure!(dark != text, "no server in the kubeconfig");
    laid.secret_before = secrets
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"config": dark}})),
        )
        .await?;
    let shoots = shoots_api(env).await?;
    // The simulated gardenlet keeps an operation in Error while the Shoot has this fault.
    shoots
        .patch(
            &laid.shoot,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                kim_tests::simulator::FAULT_ANNOTATION: "error:ERR_INFRA_RATE_LIMITS_EXCEEDED"}}})),
        )
        .await?;
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    shoots
        .patch_status(
            &laid.shoot,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "lastOperation": {"type": "Reconcile", "state": "Error", "progress": 40,
                    "description": "Waiting until the infrastructure is reconciled", "lastUpdateTime": now},
                "lastErrors": [{"description": "infrastructure reconcile failed: rate limited",
                    "codes": ["ERR_INFRA_RATE_LIMITS_EXCEEDED"], "lastUpdateTime": now}],
            }})),
        )
        .await?;
    // Given time to undo it, the simulator keeps it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    laid.shoot_before = shoots.get(&laid.shoot).await?;
    ensure!(
        laid.shoot_before.data["status"]["lastOperation"]["state"] == "Error",
        "the Shoot's last operation did not stay Error: {}",
        laid.shoot_before.data["status"]["lastOperation"]
    );
    Ok(())
}

/// What upstream's patch conversion (`NewConverterPatch`) applies for a Runtime whose change
/// does not reach the Shoot: the create conversion without its create-only extenders (the
/// token expiration; tolerations, dual-stack networking and DNS are not set for these
/// Runtimes), the live Shoot's extensions and resources as the starting point, the live
/// infrastructure and control plane configs (no zone added), the live Kubernetes version when
/// it is higher than the Runtime's (Gardener stores the full patch version) and each live
/// worker's update strategy (`alignWorkersWithGardener`).
fn upstream_patch(created: &Value, live: &DynamicObject, generation: &str) -> Result<Value> {
    let mut body = created.clone();
    body["metadata"]["annotations"][names::SHOOT_ANNOTATION_RUNTIME_GENERATION] = json!(generation);
    let spec = &live.data["spec"];
    let kube_api_server = body["spec"]["kubernetes"]["kubeAPIServer"]
        .as_object_mut()
        .context("kubeAPIServer")?;
    kube_api_server.remove("serviceAccountConfig");
    body["spec"]["kubernetes"]["version"] = spec["kubernetes"]["version"].clone();
    body["spec"]["extensions"] = spec["extensions"].clone();
    body["spec"]["resources"] = spec["resources"].clone();
    for key in ["infrastructureConfig", "controlPlaneConfig"] {
        body["spec"]["provider"][key] = spec["provider"][key].clone();
    }
    let workers = body["spec"]["provider"]["workers"]
        .as_array_mut()
        .context("workers")?;
    for (worker, live_worker) in workers
        .iter_mut()
        .zip(spec["provider"]["workers"].as_array().into_iter().flatten())
    {
        if let Some(strategy) = live_worker.get("updateStrategy") {
            worker["updateStrategy"] = strategy.clone();
        }
    }
    Ok(body)
}

/// Waits until the simulated gardenlet finished an operation of `kind` on the current
/// generation.
async fn wait_succeeded(api: &Api<DynamicObject>, name: &str, kind: &str) -> Result<DynamicObject> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let s = api.get(name).await?;
        let op = &s.data["status"]["lastOperation"];
        let current = s.data["status"]["observedGeneration"].as_i64() == s.metadata.generation;
        if current && op["type"] == kind && op["state"] == "Succeeded" && op["progress"] == 100 {
            return Ok(s);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("Shoot {name}: no {kind} Succeeded within {TIMEOUT:?}: {op}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// An admin kubeconfig from Gardener, as upstream's kubeconfig provider asks for it (24 h, its
/// default `--kubeconfig-expiration-time`). Requested as the test's admin, not the controller.
async fn issue_kubeconfig(env: &TestEnv, shoot: &str) -> Result<String> {
    let api: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    let answer: AdminKubeconfigRequest = api
        .create_subresource(
            "adminkubeconfig",
            shoot,
            &PostParams::default(),
            &AdminKubeconfigRequest::with_expiration(86_400),
        )
        .await?;
    let bytes = answer.status.context("no status")?.kubeconfig.0;
    Ok(String::from_utf8(bytes)?)
}

/// Creates upstream's binding of `admin` unless the shoot cluster has one (labelled
/// `reconciler.kyma-project.io/managed-by: infrastructure-manager`, named `admin-<random>`).
async fn ensure_admin_binding(env: &TestEnv, admin: &str) -> Result<()> {
    if admin_bound(env, admin).await? {
        return Ok(());
    }
    let crbs: Api<ClusterRoleBinding> = Api::all(env.shoot_client().await?);
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {
            "generateName": "admin-",
            "labels": {names::LABEL_RECONCILER_MANAGED_BY: names::MANAGED_BY_INFRASTRUCTURE_MANAGER},
        },
        "subjects": [{"kind": "User", "name": admin, "apiGroup": "rbac.authorization.k8s.io"}],
        "roleRef": {"kind": "ClusterRole", "name": "cluster-admin", "apiGroup": "rbac.authorization.k8s.io"},
    }))?;
    crbs.create(&PostParams::default(), &crb).await?;
    Ok(())
}

pub(super) fn last_sync(secret: &Secret) -> Option<String> {
    secret
        .metadata
        .annotations
        .as_ref()?
        .get(names::ANNOTATION_LAST_SYNC)
        .cloned()
}

pub(super) fn conditions_of(rt: &Runtime) -> Vec<(String, String, String, String)> {
    rt.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .map(|c| {
            (
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
            )
        })
        .collect()
}

/// Successful `shoots/<shoot>/adminkubeconfig` requests by `user` (KCP audit log).
fn admin_kubeconfig_calls(env: &TestEnv, user: &str, shoot: &str) -> Result<usize> {
    Ok(env
        .audit_events_of(user)?
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "shoots"
                && e["objectRef"]["subresource"] == "adminkubeconfig"
                && e["objectRef"]["name"] == shoot
                && e["responseStatus"]["code"]
                    .as_i64()
                    .is_some_and(|c| c < 300)
        })
        .count())
}

/// Writes of the Shoot itself (no subresource) by `user`, as (verb, code).
fn shoot_writes(env: &TestEnv, user: &str, shoot: &str) -> Result<Vec<(String, i64)>> {
    Ok(env
        .audit_events_of(user)?
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "shoots"
                && e["objectRef"]["name"] == shoot
                && e["objectRef"]["subresource"].is_null()
                && !matches!(e["verb"].as_str(), Some("get" | "list" | "watch"))
        })
        .map(|e| {
            (
                e["verb"].as_str().unwrap_or_default().to_owned(),
                e["responseStatus"]["code"].as_i64().unwrap_or_default(),
            )
        })
        .collect())
}
