//! End to end: the upstream sample Runtime becomes a Shoot that Gardener accepts, the simulator
//! finishes it, the GardenerCluster and the administrators' bindings appear, the Runtime is
//! Ready with upstream's conditions; updates; deletion in order with the finalizer last.

use std::time::Duration;

use anyhow::{Context, Result};
use kim_shared::api::{GardenerCluster, Runtime, RuntimeState};
use kim_shared::gardener::Shoot;
use kim_shared::names;
use kim_tests::controller::*;
use kim_tests::testenv::TestEnv;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};

const READY_TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sample_runtime_provisions_updates_and_deletes() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-life").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let id = format!("rt-{}", &ns[ns.len().saturating_sub(6)..]);
    // Administrators no other test names: the shoot cluster is shared (see `AdminBindings`).
    let first_admin = format!("{id}-first@myorg.com");
    let new_admin = format!("{id}-new@myorg.com");
    let mut rt = sample_runtime(&ns, &id)?;
    rt.spec.security.administrators = vec![first_admin.clone()];
    let bindings = AdminBindings::start(env).await?;
    create(env, &rt).await?;

    // Create -> Ready
    let ready = wait_state(env, &ns, &id, RuntimeState::Ready, READY_TIMEOUT).await?;
    assert!(
        ready
            .finalizers()
            .iter()
            .any(|f| f == names::RUNTIME_FINALIZER)
    );
    check_ready_conditions(&ready)?;
    assert_eq!(
        ready.status.as_ref().and_then(|s| s.provisioning_completed),
        Some(true)
    );
    let garden = env.garden_client().await?;
    let shoots: Api<Shoot> = Api::namespaced(garden, kim_tests::fixtures::PROJECT_NAMESPACE);
    let shoot = shoots.get(&rt.spec.shoot.name).await?;
    assert_eq!(
        shoot.annotations().get(names::SHOOT_ANNOTATION_RUNTIME_ID),
        Some(&id)
    );
    // Who wrote what reads in the garden: the create is ours by name (the User-Agent), the
    // patches are the apply of `kim`.
    let managers: Vec<(String, String)> = shoot
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("kim-controller".to_owned(), "Update".to_owned())),
        "{managers:?}"
    );
    // The structured-auth ConfigMap says whose it is (leftovers can be found in the garden).
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(
        env.garden_client().await?,
        kim_tests::fixtures::PROJECT_NAMESPACE,
    );
    let cm = config_maps
        .get(&format!("structured-auth-config-{}", rt.spec.shoot.name))
        .await?;
    assert_eq!(cm.labels().get(names::LABEL_RUNTIME_ID), Some(&id));
    assert_eq!(
        cm.labels().get(names::LABEL_MANAGED_BY).map(String::as_str),
        Some("infrastructure-manager")
    );
    let gcs: Api<GardenerCluster> = Api::namespaced(env.kcp_client().await?, &ns);
    let gc = gcs.get(&id).await?;
    for key in [
        names::LABEL_RUNTIME_ID,
        names::LABEL_SHOOT_NAME,
        names::LABEL_REGION,
        names::LABEL_PLATFORM_REGION,
    ] {
        assert!(gc.labels().contains_key(key), "GardenerCluster label {key}");
    }
    assert_eq!(
        gc.labels().get(names::LABEL_MANAGED_BY).map(String::as_str),
        Some("infrastructure-manager")
    );
    // Bound before Ready was written; the wait covers only the watch's delay.
    bindings
        .wait_bound(&first_admin, Duration::from_secs(10))
        .await?;

    // Update: change administrators, add a worker pool -> Shoot updated, Ready again.
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    let mut extra = rt.spec.shoot.provider.workers[0].clone();
    extra.name = "extra".into();
    let patch = serde_json::json!({"spec": {
        "security": {"administrators": [new_admin]},
        "shoot": {"provider": {"additionalWorkers": [extra]}}
    }});
    runtimes
        .patch(&id, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, READY_TIMEOUT).await?;
    let shoot = shoots.get(&rt.spec.shoot.name).await?;
    let pools: Vec<_> = shoot
        .spec
        .provider
        .workers
        .iter()
        .flatten()
        .map(|w| w.name.clone())
        .collect();
    assert!(
        pools.contains(&"extra".to_string()),
        "pool added: {pools:?}"
    );
    bindings
        .wait_bound(&new_admin, Duration::from_secs(10))
        .await?;
    bindings
        .wait_unbound(&first_admin, Duration::from_secs(30))
        .await?;

    // Remove the pool again: a full update drops it (SSA alone would keep it).
    let patch = serde_json::json!({"spec": {"shoot": {"provider": {"additionalWorkers": null}}}});
    runtimes
        .patch(&id, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, READY_TIMEOUT).await?;
    let shoot = shoots.get(&rt.spec.shoot.name).await?;
    assert!(
        shoot
            .spec
            .provider
            .workers
            .iter()
            .flatten()
            .all(|w| w.name != "extra"),
        "pool removed"
    );

    // A GardenerCluster deleted by hand (with it its admin kubeconfig) is made anew, and the
    // Runtime is Ready again only with it.
    let before = gcs.get(&id).await?.uid();
    gcs.delete(&id, &DeleteParams::default()).await?;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.kcp_client().await?, &ns);
    eventually("GardenerCluster made anew", READY_TIMEOUT, || async {
        let again = gcs.get_opt(&id).await?.is_some_and(|gc| gc.uid() != before);
        Ok(again
            && secrets
                .get_opt(&format!("kubeconfig-{id}"))
                .await?
                .is_some())
    })
    .await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, READY_TIMEOUT).await?;

    // Delete: GardenerCluster, then Shoot, then the finalizer.
    runtimes.delete(&id, &DeleteParams::default()).await?;
    eventually("Runtime gone", READY_TIMEOUT, || async {
        Ok(runtimes.get_opt(&id).await?.is_none())
    })
    .await?;
    assert!(
        gcs.get_opt(&id).await?.is_none(),
        "GardenerCluster deleted before the finalizer"
    );
    assert!(
        shoots.get_opt(&rt.spec.shoot.name).await?.is_none(),
        "Shoot deleted before the finalizer"
    );

    // The series exist from the start (at 0): the requests this test caused are counted.
    let metrics = ctl.metrics_text().await?;
    let requests = |method: &str| {
        metric_sum(
            &metrics,
            "infrastructure_manager_im_gardener_requests_total",
            &[&format!("method=\"{method}\"")],
        )
    };
    assert!(requests("POST") >= 1.0, "Shoot create counted: {metrics}");
    assert!(requests("DELETE") >= 1.0, "Shoot delete counted: {metrics}");
    ctl.stop().await;
    Ok(())
}

/// The Gardener project comes from two places, as upstream's does: the flag and the
/// configuration (docs/upstream-differences.md, "One Gardener project"). When they differ the controller does not start, naming both, instead of
/// creating Shoots where it never looks for them.
#[tokio::test]
async fn a_project_flag_that_differs_from_the_configuration_stops_the_start() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-project").await?;
    let (mut args, _dir) = controller_args(env, &ns, &[]).await?;
    args.gardener_project_name = "other".into();
    let err =
        match kim_controller::runner::Process::start(args, kim_controller::Shutdown::default())
            .await
        {
            Ok(_) => anyhow::bail!("the controller started with two different projects"),
            Err(e) => e.to_string(),
        };
    assert!(
        err.contains("--gardener-project-name is \"other\"")
            && err.contains("converter.gardener.projectName in ")
            && err.contains("converter_config.json")
            && err.contains(&format!("is \"{}\"", kim_tests::fixtures::PROJECT_NAME)),
        "{err}"
    );
    Ok(())
}

/// Someone deletes the Shoot of a Ready Runtime: while Gardener deletes it the Runtime says so
/// (`Pending`, "being deleted outside"), then the Shoot is made anew and the admin kubeconfig
/// rotated at once (the new cluster has a new CA; before, the old kubeconfig stayed until its
/// rotation fell due).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shoot_deleted_outside_is_made_anew_with_a_new_admin_kubeconfig() -> Result<()> {
    const HOLD: &str = "kim-test/hold";
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-anew").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let id = format!("anew-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id)?;
    let shoot_name = rt.spec.shoot.name.clone();
    create(env, &rt).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, READY_TIMEOUT).await?;
    let shoots: Api<Shoot> = Api::namespaced(
        env.garden_client().await?,
        kim_tests::fixtures::PROJECT_NAMESPACE,
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.kcp_client().await?, &ns);
    let last_sync = |s: &k8s_openapi::api::core::v1::Secret| {
        s.annotations().get(names::ANNOTATION_LAST_SYNC).cloned()
    };
    let secret_name = format!("kubeconfig-{id}");
    let synced = last_sync(&secrets.get(&secret_name).await?);
    let old = shoots.get(&shoot_name).await?;

    // Held by a finalizer of ours, so the deletion can be watched.
    let mut finalizers = old.finalizers().to_vec();
    finalizers.push(HOLD.to_owned());
    let hold = serde_json::json!({"metadata": {
        "finalizers": finalizers,
        "annotations": {names::GARDENER_ANNOTATION_CONFIRM_DELETION: "true"},
    }});
    shoots
        .patch(&shoot_name, &PatchParams::default(), &Patch::Merge(hold))
        .await?;
    shoots.delete(&shoot_name, &DeleteParams::default()).await?;
    // The Runtime says the Shoot is deleted outside.
    wait_condition(
        env,
        &ns,
        &id,
        RuntimeState::Pending,
        names::condition::PROVISIONED,
        |c| c.status == "Unknown" && c.message.contains("being deleted outside"),
        READY_TIMEOUT,
    )
    .await?;

    let held = shoots.get(&shoot_name).await?;
    let released: Vec<String> = held
        .finalizers()
        .iter()
        .filter(|f| *f != HOLD)
        .cloned()
        .collect();
    shoots
        .patch(
            &shoot_name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": released}})),
        )
        .await?;
    eventually("the Shoot made anew", READY_TIMEOUT, || async {
        Ok(shoots
            .get_opt(&shoot_name)
            .await?
            .is_some_and(|s| s.uid() != old.uid() && s.metadata.deletion_timestamp.is_none()))
    })
    .await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, READY_TIMEOUT).await?;
    eventually("the admin kubeconfig rotated", READY_TIMEOUT, || async {
        Ok(last_sync(&secrets.get(&secret_name).await?) != synced)
    })
    .await?;
    ctl.stop().await;
    Ok(())
}

/// Gardener rotates the cluster's certificate authorities (`rotate-ca-start`). Once the new CAs
/// are in place (`status.credentials.rotation.certificateAuthorities.lastInitiationFinishedTime`)
/// the admin kubeconfig is fetched again, because one signed before stops working when the
/// rotation completes. It is fetched once, and the Runtime stays Ready. A rotation while no
/// controller ran is acted on at the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rotation_of_the_clusters_cas_rotates_the_admin_kubeconfig() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-ca").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let id = format!("ca-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id)?;
    let shoot_name = rt.spec.shoot.name.clone();
    create(env, &rt).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, READY_TIMEOUT).await?;
    let shoots: Api<Shoot> = Api::namespaced(
        env.garden_client().await?,
        kim_tests::fixtures::PROJECT_NAMESPACE,
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.kcp_client().await?, &ns);
    let secret_name = format!("kubeconfig-{id}");
    let last_sync = |s: &k8s_openapi::api::core::v1::Secret| -> Option<jiff::Timestamp> {
        s.annotations()
            .get(names::ANNOTATION_LAST_SYNC)?
            .parse()
            .ok()
    };
    let before = secrets.get(&secret_name).await?;
    let synced = last_sync(&before).context("the admin kubeconfig's last-sync")?;

    let prepared = prepare_rotation(&shoots, &shoot_name, "certificateAuthorities", synced).await?;
    eventually(
        "the admin kubeconfig fetched again",
        READY_TIMEOUT,
        || async {
            Ok(last_sync(&secrets.get(&secret_name).await?).is_some_and(|t| t >= prepared))
        },
    )
    .await?;
    let rotated = secrets.get(&secret_name).await?;
    anyhow::ensure!(
        rotated
            .data
            .as_ref()
            .and_then(|d| d.get(names::KUBECONFIG_SECRET_KEY))
            != before
                .data
                .as_ref()
                .and_then(|d| d.get(names::KUBECONFIG_SECRET_KEY)),
        "the kubeconfig is the one signed before the rotation"
    );
    let gc: GardenerCluster = Api::namespaced(env.kcp_client().await?, &ns)
        .get(&id)
        .await?;
    anyhow::ensure!(
        gc.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.reason == "KubeconfigSecretRotated")),
        "the GardenerCluster says the kubeconfig was rotated: {:?}",
        gc.status
    );
    // Once: the kubeconfig signed after the new CAs stays until its rotation is due.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = secrets.get(&secret_name).await?;
    anyhow::ensure!(
        after.resource_version() == rotated.resource_version(),
        "the admin kubeconfig was fetched again after the rotation (last-sync {:?}, then {:?})",
        last_sync(&rotated),
        last_sync(&after)
    );
    let runtime = wait_state(env, &ns, &id, RuntimeState::Ready, READY_TIMEOUT).await?;
    check_ready_conditions(&runtime)?;

    // A second rotation while no controller runs is acted on when one starts.
    ctl.stop().await;
    let synced = last_sync(&after).context("the admin kubeconfig's last-sync")?;
    let prepared = prepare_rotation(&shoots, &shoot_name, "certificateAuthorities", synced).await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    eventually(
        "the admin kubeconfig fetched again after a start",
        READY_TIMEOUT,
        || async {
            Ok(last_sync(&secrets.get(&secret_name).await?).is_some_and(|t| t >= prepared))
        },
    )
    .await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, READY_TIMEOUT).await?;
    ctl.stop().await;
    Ok(())
}

/// The same with the Shoot made anew while no controller ran: the replica that made it died
/// before it wrote the Runtime's status (here the Shoot is made anew by hand, as that replica
/// would have made it, with the Runtime still `Ready` for the old Shoot). The next replica
/// sets the new cluster up and rotates its admin kubeconfig. On the code before, both lived
/// in the dead replica's memory: the Runtime stayed `Ready` with the old cluster's
/// kubeconfig and nothing set up in the new cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shoot_made_anew_while_no_controller_ran_is_set_up_with_a_new_admin_kubeconfig()
-> Result<()> {
    use kube::api::{ApiResource, DynamicObject, ObjectMeta, PostParams};
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-anew-dead").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let id = format!("anewd-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id)?;
    let shoot_name = rt.spec.shoot.name.clone();
    create(env, &rt).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, READY_TIMEOUT).await?;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.kcp_client().await?, &ns);
    let secret_name = format!("kubeconfig-{id}");
    let last_sync = |s: &k8s_openapi::api::core::v1::Secret| {
        s.annotations().get(names::ANNOTATION_LAST_SYNC).cloned()
    };
    let synced = last_sync(&secrets.get(&secret_name).await?);
    ctl.kill();

    let shoots: Api<DynamicObject> = Api::namespaced_with(
        env.garden_client().await?,
        kim_tests::fixtures::PROJECT_NAMESPACE,
        &ApiResource::erase::<Shoot>(&()),
    );
    let old = shoots.get(&shoot_name).await?;
    shoots
        .patch(
            &shoot_name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                names::GARDENER_ANNOTATION_CONFIRM_DELETION: "true"}}})),
        )
        .await?;
    shoots.delete(&shoot_name, &DeleteParams::default()).await?;
    eventually("the old Shoot gone", READY_TIMEOUT, || async {
        Ok(shoots.get_opt(&shoot_name).await?.is_none())
    })
    .await?;
    // Whole seconds: the new Shoot must be created in a later second than the kubeconfig was
    // signed, as any Shoot Gardener could sign for is.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut annotations = old.metadata.annotations.clone().unwrap_or_default();
    annotations.remove(names::GARDENER_ANNOTATION_CONFIRM_DELETION);
    let mut anew = DynamicObject {
        types: old.types.clone(),
        metadata: ObjectMeta {
            name: old.metadata.name.clone(),
            namespace: old.metadata.namespace.clone(),
            labels: old.metadata.labels.clone(),
            annotations: Some(annotations),
            ..Default::default()
        },
        data: old.data.clone(),
    };
    if let Some(data) = anew.data.as_object_mut() {
        data.remove("status");
    }
    let anew = shoots.create(&PostParams::default(), &anew).await?;
    anyhow::ensure!(anew.uid() != old.uid(), "the Shoot was not made anew");

    let ctl = start_controller(env, &ns, &[]).await?;
    eventually(
        "the new cluster's admin kubeconfig",
        READY_TIMEOUT,
        || async { Ok(last_sync(&secrets.get(&secret_name).await?) != synced) },
    )
    .await?;
    // Ready again, with a status written for the new Shoot (its operation, not the old one's).
    let created = anew
        .metadata
        .creation_timestamp
        .clone()
        .ok_or_else(|| anyhow::anyhow!("the new Shoot has no creationTimestamp"))?;
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    eventually("Ready for the new Shoot", READY_TIMEOUT, || async {
        let rt = runtimes.get(&id).await?;
        let status = rt.status.as_ref();
        Ok(status.is_some_and(|s| s.state == RuntimeState::Ready)
            && status
                .and_then(|s| s.shoot_last_operation.as_ref())
                .is_some_and(|op| op.last_update_time >= created))
    })
    .await?;
    ctl.stop().await;
    Ok(())
}
