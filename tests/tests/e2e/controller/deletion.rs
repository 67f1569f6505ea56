//! Deletion options end to end: safe deletion with
//! `--deletion-grace-period` (the Shoot is hibernated, the Runtime is `Terminating` with a
//! condition saying when, the Shoot is deleted only after the period) and force deletion with
//! `--force-deletion` (the annotation the real gardener-apiserver accepts is set when the
//! Shoot's deletion reports an eligible error code, and only then). A Runtime's deletion
//! deletes only its own GardenerCluster (issue 19). A Runtime whose finalizer is removed by
//! hand leaves no state series behind. A GardenerCluster deletion the KCP refuses is said on
//! the Runtime as upstream says it.

use std::time::Duration;

use anyhow::{Context as _, Result};
use kim_shared::api::{GardenerCluster, Runtime, RuntimeState};
use kim_shared::gardener::Shoot;
use kim_shared::names::{self, condition, reason};
use kim_tests::controller::*;
use kim_tests::fixtures::PROJECT_NAMESPACE;
use kim_tests::testenv::TestEnv;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);

fn hibernated(shoot: &Shoot) -> bool {
    shoot.spec.hibernation.as_ref().and_then(|h| h.enabled) == Some(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn safe_deletion_hibernates_and_deletes_after_the_grace_period() -> Result<()> {
    const GRACE: Duration = Duration::from_secs(10);
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-grace").await?;
    let ctl = start_controller(env, &ns, &["--deletion-grace-period=10s"]).await?;
    let id = format!("grace-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id)?;
    let shoot_name = rt.spec.shoot.name.clone();
    create(env, &rt).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);

    runtimes.delete(&id, &DeleteParams::default()).await?;
    let deleted_at = runtimes
        .get(&id)
        .await?
        .meta()
        .deletion_timestamp
        .clone()
        .context("deletionTimestamp")?
        .0;
    // Hibernated, Terminating, and the condition says when the Shoot goes.
    eventually("Shoot hibernated", Duration::from_secs(30), || async {
        Ok(hibernated(&shoots.get(&shoot_name).await?))
    })
    .await?;
    eventually(
        "Terminating with the grace condition",
        Duration::from_secs(30),
        || async {
            let rt = runtimes.get(&id).await?;
            let ok = rt.status.as_ref().map(|s| s.state) == Some(RuntimeState::Terminating)
                && rt.condition(condition::DEPROVISIONED).is_some_and(|c| {
                    c.reason == reason::PROCESSING
                        && c.message.contains("will be deleted at")
                        && c.message.contains("--deletion-grace-period")
                });
            Ok(ok)
        },
    )
    .await?;
    let message = runtimes
        .get(&id)
        .await?
        .condition(condition::DEPROVISIONED)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    let due = deleted_at
        .checked_add(jiff::SignedDuration::try_from(GRACE)?)?
        .to_string();
    assert!(
        message.contains(&due),
        "condition names the due time {due}: {message}"
    );
    // The state series carries that message: KimRuntimeTerminatingTooLong leaves a Runtime
    // in its grace period alone by it.
    let metrics = ctl.metrics_text().await?;
    let series = metrics
        .lines()
        .find(|l| {
            l.starts_with("infrastructure_manager_im_runtime_state{")
                && l.contains(&format!("runtimeId=\"{id}\""))
        })
        .with_context(|| format!("no runtime_state series of {id}: {metrics}"))?;
    assert!(
        series.contains("state=\"Terminating\"")
            && series.contains("will be deleted at")
            && series.contains("--deletion-grace-period"),
        "{series}"
    );
    // Still there (hibernated, not deleting) well inside the period.
    let shoot = shoots.get(&shoot_name).await?;
    assert!(
        shoot.meta().deletion_timestamp.is_none(),
        "Shoot deleted early"
    );
    assert!(hibernated(&shoot));
    assert!(runtimes.get_opt(&id).await?.is_some());

    // After the period: Shoot deleted, finalizer removed.
    eventually("Runtime gone", TIMEOUT, || async {
        Ok(runtimes.get_opt(&id).await?.is_none())
    })
    .await?;
    assert!(shoots.get_opt(&shoot_name).await?.is_none());
    let gone = jiff::Timestamp::now();
    assert!(
        gone.duration_since(deleted_at) >= jiff::SignedDuration::try_from(GRACE)?,
        "deleted {:?} after the Runtime's deletion, before the grace period",
        gone.duration_since(deleted_at)
    );
    // The Shoot's delete request came after the period (audit log).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let shoot_delete = env
        .audit_events_mentioning(&shoot_name)?
        .into_iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "shoots"
                && e["objectRef"]["name"] == shoot_name.as_str()
                && e["verb"] == "delete"
        })
        .filter_map(|e| e["requestReceivedTimestamp"].as_str().map(str::to_owned))
        .min()
        .context("no Shoot delete in the audit log")?;
    let shoot_delete: jiff::Timestamp = shoot_delete.parse()?;
    assert!(
        shoot_delete.duration_since(deleted_at) >= jiff::SignedDuration::try_from(GRACE)?,
        "Shoot delete requested at {shoot_delete}, Runtime deleted at {deleted_at}"
    );
    ctl.stop().await;
    Ok(())
}

/// A finalizer of this test that keeps a Shoot in deletion after the simulated gardenlet is
/// done with it (the simulator leaves a Shoot without its own finalizer alone).
const HOLD: &str = "controller-deletion.kim.test/hold";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn force_deletion_is_confirmed_only_for_eligible_codes() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-force").await?;
    let ctl = start_controller(env, &ns, &["--force-deletion"]).await?;
    let suffix = &ns[ns.len().saturating_sub(5)..];
    // (runtime id, Delete-operation error code, force deletion expected)
    let cases = [
        (
            format!("force-{suffix}"),
            "ERR_CLEANUP_CLUSTER_RESOURCES",
            true,
        ),
        (
            format!("noforce-{suffix}"),
            "ERR_INFRA_QUOTA_EXCEEDED",
            false,
        ),
    ];
    for (id, ..) in &cases {
        create(env, &sample_runtime(&ns, id)?).await?;
    }
    for (id, ..) in &cases {
        wait_state(env, &ns, id, RuntimeState::Ready, TIMEOUT).await?;
    }
    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    let set_finalizers = |name: String, hold: bool| {
        let shoots = shoots.clone();
        async move {
            let shoot = shoots.get(&name).await?;
            let mut fins: Vec<String> = shoot
                .finalizers()
                .iter()
                .filter(|f| *f != HOLD)
                .cloned()
                .collect();
            if hold {
                fins.push(HOLD.to_owned());
            }
            let patch = json!({"metadata": {"finalizers": fins}});
            shoots
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
            Ok::<_, anyhow::Error>(())
        }
    };
    for (id, ..) in &cases {
        set_finalizers(shoot_name(id), true).await?;
        runtimes.delete(id, &DeleteParams::default()).await?;
    }
    // The simulated gardenlet finishes the Delete and drops its finalizer; ours holds the
    // Shoot. Then Gardener reports the deletion error (as a real gardenlet would).
    for (id, code, _) in &cases {
        let name = shoot_name(id);
        eventually(
            &format!("{name} held in deletion"),
            Duration::from_secs(60),
            || async {
                let s = shoots.get(&name).await?;
                Ok(s.meta().deletion_timestamp.is_some() && s.finalizers() == [HOLD])
            },
        )
        .await?;
        let now = jiff::Timestamp::now().to_string();
        let status = json!({"status": {
            "lastOperation": {"type": "Delete", "state": "Error", "progress": 10,
                "description": "Deletion of Shoot cluster failed (test).", "lastUpdateTime": now},
            "lastErrors": [{"description": format!("simulated {code}"), "codes": [code],
                "lastUpdateTime": now}]}});
        shoots
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await?;
    }
    let forced = |s: &Shoot| {
        s.annotations()
            .get(names::GARDENER_ANNOTATION_CONFIRM_FORCE_DELETION)
            .is_some_and(|v| v == "true")
    };
    // Eligible: the controller sets the annotation and gardener-apiserver (which checks the
    // codes itself) accepts it.
    let (eligible, ..) = &cases[0];
    eventually(
        "force-deletion annotation on the eligible Shoot",
        Duration::from_secs(30),
        || async { Ok(forced(&shoots.get(&shoot_name(eligible)).await?)) },
    )
    .await?;
    // Not eligible: same events, same time, no annotation; the Runtime stays Terminating.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (other, ..) = &cases[1];
    assert!(
        !forced(&shoots.get(&shoot_name(other)).await?),
        "force deletion set for a code Gardener does not accept for it"
    );
    for (id, ..) in &cases {
        let rt = runtimes.get(id).await?;
        assert_eq!(
            rt.status.as_ref().map(|s| s.state),
            Some(RuntimeState::Terminating),
            "{id} keeps its finalizer while the Shoot exists"
        );
    }
    // Gardener finishes: the Shoots go, then the finalizers.
    for (id, ..) in &cases {
        set_finalizers(shoot_name(id), false).await?;
    }
    for (id, ..) in &cases {
        eventually(&format!("{id} gone"), TIMEOUT, || async {
            Ok(runtimes.get_opt(id).await?.is_none())
        })
        .await?;
        assert!(shoots.get_opt(&shoot_name(id)).await?.is_none());
    }
    ctl.stop().await;
    Ok(())
}

/// Attack (with the webhook bypassed; the webhook refuses the change): a Runtime's
/// `kyma-project.io/runtime-id` label is pointed at another runtime's ID and the Runtime is
/// deleted. The deletion removed the GardenerCluster of that ID, so the other runtime lost its
/// admin kubeconfig. Now a Runtime whose runtime ID is not its name deletes nothing but its
/// finalizer (and a GardenerCluster that names another shoot is never a Runtime's own).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runtime_deletes_only_its_own_gardener_cluster() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-rtid").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let suffix = &ns[ns.len().saturating_sub(5)..];
    let id = format!("owner-{suffix}");
    create(env, &sample_runtime(&ns, &id)?).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    let kcp = env.kcp_client().await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let runtimes: Api<Runtime> = Api::namespaced(kcp.clone(), &ns);
    // Another runtime's GardenerCluster: its own ID and shoot.
    let victim_id = format!("victim-{suffix}");
    let victim: GardenerCluster = serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "GardenerCluster",
        "metadata": {"name": victim_id, "namespace": ns,
                     "labels": {"kyma-project.io/runtime-id": victim_id}},
        "spec": {
            "shoot": {"name": shoot_name(&victim_id)},
            "kubeconfig": {"secret": {"name": format!("kubeconfig-{victim_id}"),
                                      "namespace": ns, "key": "config"}}
        }
    }))?;
    let victim = gcs.create(&PostParams::default(), &victim).await?;

    runtimes
        .patch(
            &id,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"kyma-project.io/runtime-id": victim_id}}}),
            ),
        )
        .await?;
    runtimes.delete(&id, &DeleteParams::default()).await?;
    eventually("Runtime gone", TIMEOUT, || async {
        Ok(runtimes.get_opt(&id).await?.is_none())
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let left = gcs.get_opt(&victim_id).await?;
    assert!(
        left.as_ref()
            .is_some_and(|gc| gc.metadata.uid == victim.metadata.uid
                && gc.metadata.deletion_timestamp.is_none()),
        "another runtime's GardenerCluster was deleted: {:?}",
        left.map(|gc| gc.metadata.deletion_timestamp)
    );
    ctl.stop().await;
    Ok(())
}

/// Attack (with the webhook bypassed; it refuses both Runtimes): a second Runtime names a
/// ready runtime's Shoot, with the force-patch annotation, and a third also carries that
/// runtime's ID; both are then deleted. Before, the first took the Shoot over (patched it,
/// wrote its OIDC ConfigMap, got a GardenerCluster and so its admin kubeconfig) and its deletion
/// deleted the victim's Shoot; the second's deletion removed the victim's registry-cache
/// Secrets. Now both are refused, and nothing of the victim's changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runtime_naming_another_runtimes_shoot_or_id_touches_nothing_of_it() -> Result<()> {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kim_shared::registry_cache as rc;

    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-foreign").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let suffix = &ns[ns.len().saturating_sub(5)..];
    let victim_id = format!("victim-{suffix}");
    let victim_rt = sample_runtime(&ns, &victim_id)?;
    let victim_shoot = victim_rt.spec.shoot.name.clone();
    create(env, &victim_rt).await?;
    wait_state(env, &ns, &victim_id, RuntimeState::Ready, TIMEOUT).await?;
    let garden = env.garden_client().await?;
    let kcp = env.kcp_client().await?;
    let shoots: Api<Shoot> = Api::namespaced(garden.clone(), PROJECT_NAMESPACE);
    let config_maps: Api<ConfigMap> = Api::namespaced(garden.clone(), PROJECT_NAMESPACE);
    let garden_secrets: Api<Secret> = Api::namespaced(garden.clone(), PROJECT_NAMESPACE);
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let runtimes: Api<Runtime> = Api::namespaced(kcp.clone(), &ns);
    // A registry-cache Secret of the victim, as the registry cache writes it.
    let cache_secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("reg-cache-{suffix}-victim"), "labels": {
            rc::LABEL_MANAGED_BY: rc::MANAGED_BY,
            rc::LABEL_CACHE_ID: "0f5cb4a5-1d7e-4c0a-9d5e-2b0a4e1c9d11",
            rc::LABEL_RUNTIME_ID: victim_id,
        }},
        "stringData": {"username": "u", "password": "p"}
    }))?;
    let cache_secret = garden_secrets
        .create(&PostParams::default(), &cache_secret)
        .await?;
    let config_map_name = names::structured_auth_config_map_name(&victim_shoot);
    let before_shoot = shoots.get(&victim_shoot).await?;
    let before_config_map = config_maps.get(&config_map_name).await?;
    let before_gc = gcs.get(&victim_id).await?;

    // The Shoot thief: its own ID, the victim's shoot name, force-patch.
    let thief_id = format!("thief-{suffix}");
    let mut thief = sample_runtime(&ns, &thief_id)?;
    thief.spec.shoot.name = victim_shoot.clone();
    thief
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            names::ANNOTATION_FORCE_PATCH_RECONCILIATION.into(),
            "true".into(),
        );
    create(env, &thief).await?;
    let failed = wait_state(env, &ns, &thief_id, RuntimeState::Failed, TIMEOUT).await?;
    let c = failed
        .condition(condition::PROVISIONED)
        .context("Provisioned condition")?;
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", reason::CONFIGURATION_ERROR)
    );
    assert!(
        c.message.contains("belongs to runtime") && c.message.contains(&victim_id),
        "{}",
        c.message
    );
    // The impostor: the victim's ID under its own name.
    let impostor_id = format!("impostor-{suffix}");
    let mut impostor = sample_runtime(&ns, &impostor_id)?;
    impostor
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(names::LABEL_RUNTIME_ID.into(), victim_id.clone());
    create(env, &impostor).await?;
    let failed = wait_state(env, &ns, &impostor_id, RuntimeState::Failed, TIMEOUT).await?;
    let c = failed
        .condition(condition::PROVISIONED)
        .context("Provisioned condition")?;
    assert!(
        c.message.contains("must equal the Runtime's name"),
        "{}",
        c.message
    );

    for id in [&thief_id, &impostor_id] {
        runtimes.delete(id, &DeleteParams::default()).await?;
    }
    eventually("both Runtimes gone", TIMEOUT, || async {
        Ok(runtimes.get_opt(&thief_id).await?.is_none()
            && runtimes.get_opt(&impostor_id).await?.is_none())
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let shoot = shoots.get(&victim_shoot).await?;
    assert_eq!(shoot.metadata.generation, before_shoot.metadata.generation);
    assert!(
        shoot.metadata.deletion_timestamp.is_none(),
        "the victim's Shoot is being deleted"
    );
    assert!(
        !shoot
            .annotations()
            .contains_key(names::GARDENER_ANNOTATION_CONFIRM_DELETION),
        "the victim's Shoot was confirmed for deletion"
    );
    assert_eq!(
        config_maps
            .get(&config_map_name)
            .await?
            .metadata
            .resource_version,
        before_config_map.metadata.resource_version,
        "the victim's structured-authentication ConfigMap was written"
    );
    assert!(
        gcs.get_opt(&thief_id).await?.is_none(),
        "the thief got a GardenerCluster"
    );
    assert_eq!(
        gcs.get(&victim_id).await?.metadata.uid,
        before_gc.metadata.uid
    );
    assert_eq!(
        garden_secrets
            .get_opt(&cache_secret.name_any())
            .await?
            .map(|s| s.metadata.uid),
        Some(cache_secret.metadata.uid),
        "the victim's registry-cache Secret was deleted"
    );
    let victim = runtimes.get(&victim_id).await?;
    assert_eq!(
        victim.status.as_ref().map(|s| s.state),
        Some(RuntimeState::Ready)
    );

    // A deletion's Shoot patches carry the UID of the Shoot judged this Runtime's:
    // gardener-apiserver refuses one that names another, so a lagging cache cannot have a
    // Shoot made anew under the name confirmed for deletion or hibernated.
    let other_uid = json!({"metadata": {"uid": "00000000-0000-4000-8000-000000000000",
        "annotations": {names::GARDENER_ANNOTATION_CONFIRM_DELETION: "true"}}});
    let refused = shoots
        .patch(
            &victim_shoot,
            &PatchParams::default(),
            &Patch::Merge(other_uid),
        )
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422),
        "{refused:?}"
    );
    assert!(
        !shoots
            .get(&victim_shoot)
            .await?
            .annotations()
            .contains_key(names::GARDENER_ANNOTATION_CONFIRM_DELETION)
    );

    // The squatter: a shoot name whose structured-authentication ConfigMap another runtime
    // wrote ahead of its Shoot create; the squatter never gets as far as a Shoot (its spec
    // does not convert), and its deletion leaves that ConfigMap.
    let waiting_shoot = format!("wait{suffix}");
    let waiting_config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": names::structured_auth_config_map_name(&waiting_shoot),
            "labels": {names::LABEL_RUNTIME_ID: format!("waiting-{suffix}")}},
        "data": {"config.yaml": "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\n"}
    }))?;
    let waiting_config_map = config_maps
        .create(&PostParams::default(), &waiting_config_map)
        .await?;
    let squatter_id = format!("squatter-{suffix}");
    let mut squatter = sample_runtime(&ns, &squatter_id)?;
    squatter.spec.shoot.name = waiting_shoot.clone();
    squatter.spec.shoot.networking.nodes = "not-a-cidr".into();
    create(env, &squatter).await?;
    let failed = wait_state(env, &ns, &squatter_id, RuntimeState::Failed, TIMEOUT).await?;
    let c = failed
        .condition(condition::PROVISIONED)
        .context("Provisioned condition")?;
    assert_eq!(c.reason, reason::CONVERSION_ERR, "{}", c.message);
    runtimes
        .delete(&squatter_id, &DeleteParams::default())
        .await?;
    eventually("the squatter gone", TIMEOUT, || async {
        Ok(runtimes.get_opt(&squatter_id).await?.is_none())
    })
    .await?;
    assert_eq!(
        config_maps
            .get_opt(&waiting_config_map.name_any())
            .await?
            .map(|cm| cm.metadata.uid),
        Some(waiting_config_map.metadata.uid),
        "the deletion of a Runtime took another runtime's structured-authentication ConfigMap"
    );
    ctl.stop().await;
    Ok(())
}

/// A GardenerCluster made ahead under a new Runtime's ID that names another runtime's Shoot:
/// its admin kubeconfig is that cluster's, so the new Runtime must configure nothing through
/// it (its administrators would become cluster admins of the victim's cluster). Every Shoot
/// here shares one cluster, so a binding of the new Runtime's administrator anywhere is the
/// breach.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gardener_cluster_naming_another_shoot_lends_its_cluster_to_no_runtime() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-lent").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let suffix = &ns[ns.len().saturating_sub(5)..];
    let victim_id = format!("victim-{suffix}");
    let victim = sample_runtime(&ns, &victim_id)?;
    create(env, &victim).await?;
    wait_state(env, &ns, &victim_id, RuntimeState::Ready, TIMEOUT).await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(env.kcp_client().await?, &ns);
    let mut lent = gcs.get(&victim_id).await?;
    let new_id = format!("borrower-{suffix}");
    lent.metadata = kube::api::ObjectMeta {
        name: Some(new_id.clone()),
        namespace: Some(ns.clone()),
        labels: Some(
            [(names::LABEL_RUNTIME_ID.to_owned(), new_id.clone())]
                .into_iter()
                .collect(),
        ),
        ..Default::default()
    };
    lent.spec.kubeconfig.secret.name = format!("kubeconfig-{new_id}");
    lent.status = None;
    gcs.create(&PostParams::default(), &lent).await?;

    let admin = format!("{new_id}@myorg.com");
    let mut borrower = sample_runtime(&ns, &new_id)?;
    borrower.spec.security.administrators = vec![admin.clone()];
    let bindings = AdminBindings::start(env).await?;
    create(env, &borrower).await?;
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    eventually("the lent GardenerCluster refused", TIMEOUT, || async {
        let rt = runtimes.get(&new_id).await?;
        Ok(rt
            .condition(condition::KUBECONFIG_READY)
            .is_some_and(|c| c.status == "False" && c.reason == reason::KUBERNETES_ERR))
    })
    .await?;
    let rt = runtimes.get(&new_id).await?;
    assert_eq!(
        rt.status.as_ref().map(|s| s.state),
        Some(RuntimeState::Pending)
    );
    assert!(
        !bindings.seen_bound(&admin),
        "the borrower's administrator was bound through another runtime's kubeconfig"
    );
    // Nor is the victim's admin kubeconfig written where the lent GardenerCluster points.
    eventually(
        "the lent GardenerCluster refused its kubeconfig",
        TIMEOUT,
        || async {
            let gc = gcs.get(&new_id).await?;
            Ok(gc
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| {
                    c.message
                        .contains(&format!("belongs to runtime {victim_id}"))
                }))
        },
    )
    .await?;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.kcp_client().await?, &ns);
    anyhow::ensure!(
        secrets
            .get_opt(&format!("kubeconfig-{new_id}"))
            .await?
            .is_none(),
        "the victim's admin kubeconfig was written for the lent GardenerCluster"
    );
    // A restarted controller reconciles it at once, before its Shoot cache is filled: still
    // refused.
    ctl.kill();
    let ctl = start_controller(env, &ns, &[]).await?;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    anyhow::ensure!(
        secrets
            .get_opt(&format!("kubeconfig-{new_id}"))
            .await?
            .is_none(),
        "a restarted controller wrote the victim's admin kubeconfig for the lent GardenerCluster"
    );
    ctl.stop().await;
    Ok(())
}

/// A Shoot create that got no answer may still be admitted after the controller stopped
/// waiting for it (the apiserver handles it until its own request timeout). A Runtime deleted
/// meanwhile keeps its finalizer until such a Shoot could have landed; one that lands is
/// deleted with the Runtime, not left orphaned in Gardener.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shoot_whose_create_got_no_answer_is_not_orphaned_by_a_deletion() -> Result<()> {
    // Answered after the controller's 1 s write timeout: it never sees the answer.
    late_shoot_outlives_no_deletion("ctl-unanswered", Duration::from_millis(1500), false).await
}

/// The same across a crash: the replica that sent the create dies before the deletion, and
/// the replica after it knows nothing of that create. On the code before, what made the
/// finalizer wait lived only in the dead replica's memory: this Runtime was finalized and its
/// Shoot landed orphaned.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shoot_whose_create_got_no_answer_before_a_crash_is_not_orphaned_by_a_deletion()
-> Result<()> {
    late_shoot_outlives_no_deletion("ctl-unans-crash", Duration::ZERO, true).await
}

/// The same with the apiserver's own timeout answered at once (504 "may still be processing
/// the request"). On the code before, only a missing answer held the finalizer: this Runtime
/// was finalized and its Shoot landed orphaned.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shoot_whose_create_timed_out_in_the_apiserver_is_not_orphaned_by_a_deletion()
-> Result<()> {
    late_shoot_outlives_no_deletion("ctl-timedout", Duration::ZERO, false).await
}

/// Every Shoot create is answered 504 after `answer_after`; the first one is admitted all the
/// same once the deletion of the Runtime is seen waiting for it (with `crash`, the deletion by
/// a new controller: the one that sent the create is killed first), well within the time such
/// a create can land.
async fn late_shoot_outlives_no_deletion(
    prefix: &str,
    answer_after: Duration,
    crash: bool,
) -> Result<()> {
    use kim_tests::faultproxy::{ApiFault, FaultProxy, ProxyResponse, Responder, Rule};
    use kube::api::{ApiResource, DynamicObject};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let land = Arc::new(tokio::sync::Notify::new());
    // The late create's own answer: the Shoot may be deleted again before a poll could see it.
    let (landed_tx, landed_rx) = tokio::sync::oneshot::channel::<Result<()>>();
    let landed_tx = Arc::new(std::sync::Mutex::new(Some(landed_tx)));
    let env = TestEnv::shared().await?;
    let ns = env.namespace(prefix).await?;
    let id = format!("unans-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id)?;
    let shoot_name = rt.spec.shoot.name.clone();
    let garden = env.garden_client().await?;
    let shoots: Api<Shoot> = Api::namespaced(garden.clone(), PROJECT_NAMESPACE);
    let raw_shoots: Api<DynamicObject> = Api::namespaced_with(
        garden.clone(),
        PROJECT_NAMESPACE,
        &ApiResource::erase::<Shoot>(&()),
    );

    // The first create is admitted later all the same, as the apiserver may do.
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let landing = Arc::new(AtomicBool::new(false));
    let handle = tokio::runtime::Handle::current();
    let responder = {
        let landing = landing.clone();
        let land = land.clone();
        Responder(Arc::new(move |req| {
            if req.path.ends_with("/shoots") && !landing.swap(true, Ordering::SeqCst) {
                let raw_shoots = raw_shoots.clone();
                let body = req.body.clone();
                let land = land.clone();
                let landed_tx = landed_tx.lock().ok().and_then(|mut tx| tx.take());
                handle.spawn(async move {
                    land.notified().await;
                    let created = async {
                        let shoot: DynamicObject = serde_json::from_slice(&body)?;
                        raw_shoots.create(&PostParams::default(), &shoot).await?;
                        anyhow::Ok(())
                    }
                    .await;
                    if let Some(tx) = landed_tx {
                        let _ = tx.send(created);
                    }
                });
            }
            std::thread::sleep(answer_after);
            ProxyResponse {
                status: 504,
                body: json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "the request timed out", "reason": "Timeout", "code": 504})
                .to_string()
                .into_bytes(),
            }
        }))
    };
    proxy.inject(Rule {
        method: Some("POST".into()),
        path_contains: format!("/namespaces/{PROJECT_NAMESPACE}/shoots"),
        fault: ApiFault::Respond(responder),
        times: None,
    });
    let wiring = Wiring {
        gardener: Some(proxy.access_via(env.kcp())),
        ..Default::default()
    };
    let ctl = start_controller_wired(env, &ns, &["--gardener-write-timeout=1s"], &wiring).await?;
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    create(env, &rt).await?;
    eventually("the first create sent", TIMEOUT, || async {
        Ok(landing.load(Ordering::SeqCst))
    })
    .await?;
    eventually("the create's timeout seen", TIMEOUT, || async {
        let rt = runtimes.get(&id).await?;
        Ok(rt
            .condition(condition::PROVISIONED)
            .is_some_and(|c| c.reason == reason::GARDENER_BUSY))
    })
    .await?;
    let (ctl, waits_because) = if crash {
        ctl.kill();
        runtimes.delete(&id, &DeleteParams::default()).await?;
        let ctl =
            start_controller_wired(env, &ns, &["--gardener-write-timeout=1s"], &wiring).await?;
        (
            ctl,
            "The controller replica before this one may have sent a Shoot create that got no final answer",
        )
    } else {
        runtimes.delete(&id, &DeleteParams::default()).await?;
        (ctl, "A Shoot create got no final answer")
    };

    // The finalizer waits, saying why, while the unanswered create may still land.
    eventually(
        "the deletion waits for the unanswered create",
        TIMEOUT,
        || async {
            let Some(rt) = runtimes.get_opt(&id).await? else {
                anyhow::bail!(
                    "the Runtime was finalized while its unanswered create could still land"
                );
            };
            Ok(rt.condition(condition::DEPROVISIONED).is_some_and(|c| {
                c.message.starts_with(waits_because)
                    && c.message.contains("the Shoot may still be admitted until")
            }))
        },
    )
    .await?;
    land.notify_one();
    tokio::time::timeout(TIMEOUT, landed_rx)
        .await
        .context("the late Shoot create did not return")?
        .context("the late Shoot create was dropped")?
        .context("the late Shoot create failed")?;
    // The Shoot goes with the Runtime: one finalized before the Shoot landed would leave it.
    eventually("Runtime gone", TIMEOUT, || async {
        Ok(runtimes.get_opt(&id).await?.is_none())
    })
    .await?;
    anyhow::ensure!(
        shoots.get_opt(&shoot_name).await?.is_none(),
        "the Shoot outlived its Runtime"
    );
    ctl.stop().await;
    Ok(())
}

/// An SRE removes the finalizer of a Runtime stuck in `Terminating` by hand: the controller
/// never reconciles it again, and drops its state series (else `KimRuntimeTerminatingTooLong`
/// would fire for it until the next restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runtime_whose_finalizer_is_removed_by_hand_leaves_no_state_series() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-unfinalized").await?;
    // A long grace period holds the deletion in `Terminating`.
    let ctl = start_controller(env, &ns, &["--deletion-grace-period=1h"]).await?;
    let id = format!("unfin-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id)?;
    let shoot_name = rt.spec.shoot.name.clone();
    create(env, &rt).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    runtimes.delete(&id, &DeleteParams::default()).await?;
    wait_state(env, &ns, &id, RuntimeState::Terminating, TIMEOUT).await?;
    let series_of = |text: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("infrastructure_manager_im_runtime_state{")
                    && l.contains(&format!("runtimeId=\"{id}\""))
            })
            .map(str::to_owned)
    };
    let metrics = ctl.metrics_text().await?;
    let series = series_of(&metrics).context("no state series while Terminating")?;
    assert!(series.contains("state=\"Terminating\""), "{series}");

    let patch = json!({"metadata": {"finalizers": null}});
    runtimes
        .patch(&id, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    eventually("Runtime gone", TIMEOUT, || async {
        Ok(runtimes.get_opt(&id).await?.is_none())
    })
    .await?;
    eventually("its state series gone", Duration::from_secs(30), || async {
        Ok(series_of(&ctl.metrics_text().await?).is_none())
    })
    .await?;
    ctl.stop().await;

    // The Shoot the deletion held back is left behind by the removed finalizer: delete it.
    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    let confirm =
        json!({"metadata": {"annotations": {"confirmation.gardener.cloud/deletion": "true"}}});
    shoots
        .patch(&shoot_name, &PatchParams::default(), &Patch::Merge(confirm))
        .await?;
    shoots.delete(&shoot_name, &DeleteParams::default()).await?;
    Ok(())
}

/// The dedicated audit log is released once the Shoot is gone, so a KALM that does not answer
/// (here: no `AuditLog` API at all in this environment) holds only the finalizer, not the
/// Shoot's deletion, and the Runtime says `Terminating` meanwhile. On the code before, the
/// release ran first in every pass: the Shoot was never deleted and the state stayed `Ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_audit_log_release_that_fails_holds_the_finalizer_not_the_shoot_deletion() -> Result<()>
{
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-kalm-down").await?;
    let ctl = start_controller(env, &ns, &["--dedicated-audit-logging-enabled=true"]).await?;
    let id = format!("kalm-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id)?;
    let shoot_name = rt.spec.shoot.name.clone();
    create(env, &rt).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    runtimes.delete(&id, &DeleteParams::default()).await?;
    eventually("Shoot deleted", TIMEOUT, || async {
        Ok(shoots.get_opt(&shoot_name).await?.is_none())
    })
    .await?;
    // The release keeps failing: the finalizer stays, the state and the condition say why.
    wait_condition(
        env,
        &ns,
        &id,
        RuntimeState::Terminating,
        condition::DEPROVISIONED,
        |c| {
            c.status == "False"
                && c.reason == reason::AUDIT_LOG_ERR
                && c.message.contains("Dedicated audit log release error")
        },
        TIMEOUT,
    )
    .await?;
    ctl.stop().await;

    // Without the feature nothing is to release: the deletion ends.
    let ctl = start_controller(env, &ns, &[]).await?;
    eventually("Runtime gone", TIMEOUT, || async {
        Ok(runtimes.get_opt(&id).await?.is_none())
    })
    .await?;
    ctl.stop().await;
    Ok(())
}

/// A GardenerCluster delete the KCP refuses (here: the controller's Role lost `delete` on
/// gardenerclusters) shows upstream's `Deprovisioned=False/GardenerErr` "Gardener API delete
/// error: ..." on the Runtime, which keeps its finalizer and Shoot; once the delete is
/// allowed again the deletion goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_gardener_cluster_delete_is_said_on_the_runtime() -> Result<()> {
    use k8s_openapi::api::rbac::v1::Role;
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-gc-refused").await?;
    let kcp = env.kcp_client().await?;
    let suffix = &ns[ns.len().saturating_sub(6)..];
    let user = format!("kim-gc-refused-{suffix}");
    super::audit_log::bind_deployed_role(&kcp, &ns, &user).await?;
    let (mut args, dir) = controller_args(env, &ns, &[]).await?;
    reach_kcp_as(env, &mut args, &dir, &user)?;
    let ctl = start_with_args(args, dir).await?;
    let id = format!("gcref-{suffix}");
    let rt = sample_runtime(&ns, &id)?;
    create(env, &rt).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;

    // The Role without `delete` on gardenerclusters.
    let roles: Api<Role> = Api::namespaced(kcp.clone(), &ns);
    let set_gc_delete = |allowed: bool| {
        let roles = roles.clone();
        async move {
            let name = roles.list(&Default::default()).await?.items[0].name_any();
            let mut role = roles.get(&name).await?;
            for rule in role.rules.iter_mut().flatten() {
                if rule
                    .resources
                    .iter()
                    .flatten()
                    .any(|r| r == "gardenerclusters")
                {
                    rule.verbs.retain(|v| v != "delete");
                    if allowed {
                        rule.verbs.push("delete".into());
                    }
                }
            }
            roles.replace(&name, &PostParams::default(), &role).await?;
            anyhow::Ok(())
        }
    };
    set_gc_delete(false).await?;
    let runtimes: Api<Runtime> = Api::namespaced(kcp.clone(), &ns);
    runtimes.delete(&id, &DeleteParams::default()).await?;
    eventually("Deprovisioned=False/GardenerErr", TIMEOUT, || async {
        let rt = runtimes.get(&id).await?;
        Ok(rt.condition(condition::DEPROVISIONED).is_some_and(|c| {
            c.status == "False"
                && c.reason == reason::GARDENER_ERR
                && c.message.starts_with("Gardener API delete error: ")
                && c.message.contains("forbidden")
        }))
    })
    .await?;
    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    assert!(shoots.get_opt(&rt.spec.shoot.name).await?.is_some());

    set_gc_delete(true).await?;
    eventually("the Runtime is gone", TIMEOUT, || async {
        Ok(runtimes.get_opt(&id).await?.is_none())
    })
    .await?;
    ctl.stop().await;
    // Each of the Shoot's deletion events starts a pass: the GardenerCluster gone from the
    // cache is confirmed with one live read, not one per pass.
    let passes_after_the_gardener_cluster = env
        .audit_events_of(&user)?
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "runtimes"
                && e["objectRef"]["subresource"] == "status"
                && e["verb"] == "patch"
        })
        .count();
    let reads = env
        .audit_events_of(&user)?
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "gardenerclusters"
                && e["objectRef"]["name"] == id.as_str()
                && e["verb"] == "get"
        })
        .count();
    assert_eq!(
        reads, 1,
        "live reads of the GardenerCluster ({passes_after_the_gardener_cluster} status writes)"
    );
    Ok(())
}

/// A registry-cache Secret in the Gardener project whose delete is refused (here: an admission
/// policy) holds the finalizer, and the Runtime says why:
/// `Deprovisioned=False/RegistryCacheGardenClusterCleanupFailed`. Once the delete is allowed
/// the deletion ends and the Secret is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_registry_cache_secret_delete_holds_the_finalizer_and_says_why() -> Result<()> {
    use k8s_openapi::api::core::v1::Secret;
    use kim_shared::registry_cache as rc;
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-rc-refused").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let suffix = &ns[ns.len().saturating_sub(6)..];
    let id = format!("rcref-{suffix}");
    create(env, &sample_runtime(&ns, &id)?).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    let garden = env.garden_client().await?;
    let garden_secrets: Api<Secret> = Api::namespaced(garden.clone(), PROJECT_NAMESPACE);
    let prefix = format!("reg-cache-refused-{suffix}");
    let secret = |name: &str, runtime_id: &str| -> Result<Secret> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {
                rc::LABEL_MANAGED_BY: rc::MANAGED_BY,
                rc::LABEL_CACHE_ID: "0f5cb4a5-1d7e-4c0a-9d5e-2b0a4e1c9d11",
                rc::LABEL_RUNTIME_ID: runtime_id,
            }},
            "stringData": {"username": "u", "password": "p"}
        }))?)
    };
    let cache_secret = garden_secrets
        .create(
            &PostParams::default(),
            &secret(&format!("{prefix}-a"), &id)?,
        )
        .await?;
    let refusal = kim_tests::refusal::Refusal::create(
        &garden,
        &format!("refuse-{prefix}"),
        json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"],
               "resources": ["secrets"]}),
        &format!("!request.name.startsWith('{prefix}')"),
        "registry-cache Secrets stay here",
    )
    .await?;
    // The policy takes effect once the apiserver has compiled it: probe with a Secret of the
    // same prefix that belongs to no Runtime.
    let probe = format!("{prefix}-probe");
    garden_secrets
        .create(&PostParams::default(), &secret(&probe, "nobody")?)
        .await?;
    eventually("the policy refuses", Duration::from_secs(30), || async {
        match garden_secrets
            .delete(&probe, &DeleteParams::default())
            .await
        {
            Err(e) => Ok(e.to_string().contains("registry-cache Secrets stay here")),
            // Deleted before the policy applied: another probe.
            Ok(_) => {
                garden_secrets
                    .create(&PostParams::default(), &secret(&probe, "nobody")?)
                    .await?;
                Ok(false)
            }
        }
    })
    .await?;

    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    runtimes.delete(&id, &DeleteParams::default()).await?;
    wait_condition(
        env,
        &ns,
        &id,
        RuntimeState::Terminating,
        condition::DEPROVISIONED,
        |c| {
            c.status == "False"
                && c.reason == reason::REGISTRY_CACHE_GARDEN_CLUSTER_CLEANUP_FAILED
                && c.message.contains("registry-cache Secrets stay here")
        },
        TIMEOUT,
    )
    .await?;
    assert!(
        garden_secrets
            .get_opt(&cache_secret.name_any())
            .await?
            .is_some()
    );

    refusal.delete().await?;
    eventually("the policy is gone", Duration::from_secs(30), || async {
        Ok(garden_secrets
            .delete(&probe, &DeleteParams::default())
            .await
            .is_ok())
    })
    .await?;
    // A refused delete is retried after a minute; a change of the Runtime brings it sooner.
    annotate_runtime(&runtimes, &id, "kim-test/nudge", Some("1")).await?;
    eventually("Runtime gone", TIMEOUT, || async {
        Ok(runtimes.get_opt(&id).await?.is_none())
    })
    .await?;
    assert!(
        garden_secrets
            .get_opt(&cache_secret.name_any())
            .await?
            .is_none(),
        "the registry-cache Secret outlived its Runtime"
    );
    ctl.stop().await;
    Ok(())
}
