//! Updates end to end: bumping the Kubernetes version
//! updates the Shoot and the Runtime is Ready again only after Gardener reconciled the new
//! generation (upstream's `ConfigurationCompleted`); deletion goes GardenerCluster, Shoot,
//! finalizer, in that order (KCP audit log); a Ready Runtime whose Shoot drifts is corrected;
//! the suspend and force-patch annotations work as upstream's; a Runtime behind the generation
//! its Shoot reflects (restored, or created anew) is applied only when forced; a field the
//! conversion stops setting leaves the Shoot.

use std::time::Duration;

use anyhow::{Context as _, Result};
use kim_shared::api::{Runtime, RuntimeState};
use kim_shared::gardener::Shoot;
use kim_shared::names::{self, condition, reason};
use kim_tests::controller::*;
use kim_tests::fixtures::PROJECT_NAMESPACE;
use kim_tests::testenv::TestEnv;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);

fn provisioned(rt: &Runtime) -> (String, String) {
    rt.condition(condition::PROVISIONED)
        .map(|c| (c.status.clone(), c.reason.clone()))
        .unwrap_or_default()
}

fn first_pool_maximum(shoot: &Shoot) -> Option<i64> {
    serde_json::to_value(&shoot.spec.provider.workers)
        .ok()?
        .get(0)?
        .get("maximum")?
        .as_i64()
}

/// Audit events (any user) writing `resource` `name`, as (verb, subresource, time).
fn writes(env: &TestEnv, resource: &str, name: &str) -> Result<Vec<(String, String, String)>> {
    Ok(env
        .audit_events_mentioning(name)?
        .into_iter()
        .filter(|e| e["objectRef"]["resource"] == resource && e["objectRef"]["name"] == name)
        .filter(|e| !matches!(e["verb"].as_str(), Some("get" | "list" | "watch")))
        .filter(|e| {
            e["responseStatus"]["code"]
                .as_i64()
                .is_some_and(|c| c < 300)
        })
        .map(|e| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (
                s(&e["verb"]),
                s(&e["objectRef"]["subresource"]),
                s(&e["stageTimestamp"]),
            )
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubernetes_version_bump_waits_for_gardener_and_deletion_goes_in_order() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-upd").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let id = format!("upd-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id)?;
    let shoot_name = rt.spec.shoot.name.clone();
    create(env, &rt).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    let before = shoots.get(&shoot_name).await?;
    let v0 = before.spec.kubernetes.version.clone().unwrap_or_default();
    assert!(v0.starts_with("1.35"), "default version, got {v0}");

    // Bump the Kubernetes version.
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    let patch = json!({"spec": {"shoot": {"kubernetes": {"version": "1.36.3"}}}});
    let bumped = runtimes
        .patch(&id, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    let ready = wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    let shoot = shoots.get(&shoot_name).await?;
    assert_eq!(shoot.spec.kubernetes.version.as_deref(), Some("1.36.3"));
    assert_eq!(
        shoot
            .annotations()
            .get(names::SHOOT_ANNOTATION_RUNTIME_GENERATION)
            .cloned(),
        bumped.metadata.generation.map(|g| g.to_string()),
        "the Shoot records the Runtime generation it was built from"
    );
    // Ready again only after Gardener reconciled the new Shoot generation: upstream's
    // "Runtime processing completed successfully", not the stale "Shoot creation completed"
    // of the Create operation that was still the last one right after the patch.
    assert_eq!(
        provisioned(&ready),
        ("True".into(), reason::CONFIGURATION_COMPLETED.into()),
        "{:?}",
        ready.status
    );
    let op = shoot
        .status
        .as_ref()
        .and_then(|s| s.last_operation.clone())
        .context("lastOperation")?;
    assert_eq!(
        (op.type_.as_str(), op.state.as_str()),
        ("Reconcile", "Succeeded")
    );

    // One Event per condition change: each (reason, note) once, none repeated as a series.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.kcp_client().await?, &ns);
    let ours: Vec<_> = events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(id.as_str()))
        .collect();
    let mut seen = std::collections::HashSet::new();
    for e in &ours {
        // On the Runtime (not its GardenerCluster of the same name): upstream's source and
        // text, `<message>: <namespace>/<name>`.
        if e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Runtime") {
            assert_eq!(
                e.reporting_controller.as_deref(),
                Some("runtime-controller")
            );
            let suffix = format!(": {ns}/{id}");
            assert!(
                e.note.as_deref().is_some_and(|n| n.ends_with(&suffix)),
                "{:?}",
                e.note
            );
        }
        let key = (e.reason.clone(), e.note.clone());
        assert!(seen.insert(key.clone()), "Event {key:?} published twice");
        assert!(
            e.series.as_ref().is_none_or(|s| s.count <= 1),
            "Event {key:?} repeated: {:?}",
            e.series
        );
    }
    let reasons: std::collections::HashSet<_> =
        ours.iter().filter_map(|e| e.reason.as_deref()).collect();
    for want in [
        reason::SHOOT_CREATION_COMPLETED,
        reason::GARDENER_CLUSTER_CR_READY,
        reason::ADMINISTRATORS_CONFIGURED,
        reason::PROCESSING,
        reason::CONFIGURATION_COMPLETED,
    ] {
        assert!(reasons.contains(want), "no {want} Event; got {reasons:?}");
    }

    // Delete: GardenerCluster, then Shoot, then the finalizer; the Shoot's structured
    // authentication ConfigMap goes too (the controller runs with upstream's default
    // `--structured-auth-enabled=false`).
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    let auth_config = names::structured_auth_config_map_name(&shoot_name);
    assert!(config_maps.get_opt(&auth_config).await?.is_some());
    runtimes.delete(&id, &DeleteParams::default()).await?;
    eventually("Runtime gone", TIMEOUT, || async {
        Ok(runtimes.get_opt(&id).await?.is_none())
    })
    .await?;
    assert!(shoots.get_opt(&shoot_name).await?.is_none());
    assert!(
        config_maps.get_opt(&auth_config).await?.is_none(),
        "{auth_config} left behind"
    );
    ctl.stop().await;
    // The audit log is written asynchronously; give it a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let gc_deleted = writes(env, "gardenerclusters", &id)?
        .into_iter()
        .filter(|(verb, ..)| verb == "delete")
        .map(|(.., t)| t)
        .min()
        .context("no delete of the GardenerCluster in the audit log")?;
    let shoot_writes = writes(env, "shoots", &shoot_name)?;
    let shoot_deleted = shoot_writes
        .iter()
        .filter(|(verb, ..)| verb == "delete")
        .map(|(.., t)| t.clone())
        .min()
        .context("no delete of the Shoot in the audit log")?;
    // The Shoot is gone with the last write on it (Gardener's finalizer removal).
    let shoot_gone = shoot_writes
        .iter()
        .map(|(.., t)| t.clone())
        .max()
        .context("Shoot writes")?;
    let finalizer_removed = writes(env, "runtimes", &id)?
        .into_iter()
        .filter(|(verb, sub, _)| sub.is_empty() && (verb == "patch" || verb == "update"))
        .map(|(.., t)| t)
        .max()
        .context("no finalizer removal in the audit log")?;
    assert!(
        gc_deleted < shoot_deleted,
        "GardenerCluster deleted at {gc_deleted}, Shoot at {shoot_deleted}"
    );
    assert!(
        shoot_gone < finalizer_removed,
        "Shoot's last write at {shoot_gone}, finalizer removed at {finalizer_removed}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drift_is_corrected_and_suspend_and_force_patch_work() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-drift").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let id = format!("drift-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id)?;
    let shoot_name = rt.spec.shoot.name.clone();
    create(env, &rt).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    assert_eq!(
        first_pool_maximum(&shoots.get(&shoot_name).await?),
        Some(20)
    );

    let resource_version = |rt: Runtime| rt.resource_version().context("resourceVersion");
    let set_maximum = |maximum: i64| {
        let shoots = shoots.clone();
        let shoot_name = shoot_name.clone();
        async move {
            let mut workers =
                serde_json::to_value(&shoots.get(&shoot_name).await?.spec.provider.workers)?;
            workers[0]["maximum"] = json!(maximum);
            let change = json!({"spec": {"provider": {"workers": workers}}});
            shoots
                .patch(&shoot_name, &PatchParams::default(), &Patch::Merge(change))
                .await?;
            anyhow::Ok(())
        }
    };
    let corrected = || async {
        eventually("drift corrected", Duration::from_secs(60), || async {
            Ok(first_pool_maximum(&shoots.get(&shoot_name).await?) == Some(20))
        })
        .await
    };

    // Drift: someone edits the Shoot of a Ready Runtime; the controller puts it back, and the
    // Runtime is Pending until Gardener reconciled that.
    let since = resource_version(runtimes.get(&id).await?)?;
    set_maximum(7).await?;
    assert_eq!(first_pool_maximum(&shoots.get(&shoot_name).await?), Some(7));
    corrected().await?;
    let settled = [RuntimeState::Pending, RuntimeState::Ready];
    wait_states_since(env, &ns, &id, &since, &settled, TIMEOUT).await?;

    // Someone edits the Shoot while the Runtime waits for Gardener to take a patch of ours:
    // once Ready, the edit is drift, not the new normal.
    set_simulator_fault(env, &shoot_name, Some("stuck")).await?;
    set_maximum(7).await?;
    corrected().await?;
    wait_state(env, &ns, &id, RuntimeState::Pending, TIMEOUT).await?;
    set_maximum(9).await?;
    let since = resource_version(runtimes.get(&id).await?)?;
    set_simulator_fault(env, &shoot_name, None).await?;
    corrected().await?;
    let settled = [
        RuntimeState::Ready,
        RuntimeState::Pending,
        RuntimeState::Ready,
    ];
    wait_states_since(env, &ns, &id, &since, &settled, TIMEOUT).await?;

    // An operator adds a pool by hand (an incident): the drift re-apply changes nothing of
    // ours, leaves the pool (it goes with the Runtime's next change) and the Runtime as it
    // was, without going through the cluster again (Gardener's own operations, waking a
    // hibernated cluster among them, move the generation the same way).
    let provisioned = |rt: &Runtime| {
        rt.condition(condition::PROVISIONED)
            .map(|c| c.message.clone())
            .unwrap_or_default()
    };
    let before = provisioned(&runtimes.get(&id).await?);
    let patches = || async {
        Ok::<_, anyhow::Error>(metric_sum(
            &ctl.metrics_text().await?,
            "infrastructure_manager_im_gardener_requests_total",
            &["method=\"PATCH\""],
        ))
    };
    let patched_before = patches().await?;
    let mut with_pool =
        serde_json::to_value(&shoots.get(&shoot_name).await?.spec.provider.workers)?;
    let mut extra = with_pool[0].clone();
    extra["name"] = json!("ops-pool");
    with_pool.as_array_mut().context("workers")?.push(extra);
    shoots
        .patch(
            &shoot_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"provider": {"workers": with_pool}}})),
        )
        .await?;
    eventually("the drift re-apply", Duration::from_secs(60), || async {
        Ok(patches().await? > patched_before)
    })
    .await?;
    let pools: Vec<String> = shoots
        .get(&shoot_name)
        .await?
        .spec
        .provider
        .workers
        .unwrap_or_default()
        .into_iter()
        .map(|w| w.name)
        .collect();
    assert!(
        pools.iter().any(|p| p == "ops-pool"),
        "the drift re-apply removed the pool an operator added: {pools:?}"
    );
    let after = runtimes.get(&id).await?;
    assert_eq!(
        after.status.as_ref().map(|s| s.state),
        Some(RuntimeState::Ready)
    );
    assert_eq!(
        provisioned(&after),
        before,
        "the Runtime went through its steps again"
    );

    // Gardener operations raise the generation without changing the spec: no drift re-apply,
    // the Runtime stays Ready. gardener-apiserver keeps a rotation's annotation until the
    // gardenlet (here the simulator) takes it, and removes `reconcile` in the very write.
    for operation in ["rotate-ca-start", "reconcile"] {
        let patched_before = patches().await?;
        let generation_before = shoots.get(&shoot_name).await?.metadata.generation;
        shoots
            .patch(
                &shoot_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    names::GARDENER_ANNOTATION_OPERATION: operation
                }}})),
            )
            .await?;
        eventually("Gardener done with the operation", TIMEOUT, || async {
            let shoot = shoots.get(&shoot_name).await?;
            let status = shoot.status.as_ref();
            Ok(shoot.metadata.generation > generation_before
                && !shoot
                    .annotations()
                    .contains_key(names::GARDENER_ANNOTATION_OPERATION)
                && status.and_then(|s| s.observed_generation) == shoot.metadata.generation
                && status
                    .and_then(|s| s.last_operation.as_ref())
                    .is_some_and(|op| op.state == "Succeeded"))
        })
        .await?;
        // Long enough for a re-apply's GET, GET and PATCH.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            patches().await?,
            patched_before,
            "the operation {operation} was taken for drift"
        );
        assert_eq!(
            runtimes.get(&id).await?.status.as_ref().map(|s| s.state),
            Some(RuntimeState::Ready)
        );
    }

    // Suspend: a spec change is not applied to the Shoot while the annotation is set.
    annotate_runtime(
        &runtimes,
        &id,
        names::ANNOTATION_SUSPEND_PATCH_RECONCILIATION,
        Some("true"),
    )
    .await?;
    set_first_pool_maximum(&runtimes, &id, 12).await?;
    // The reconcile of the new generation ran (it writes `observedGeneration`) and left the
    // Shoot alone.
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    assert_eq!(
        first_pool_maximum(&shoots.get(&shoot_name).await?),
        Some(20),
        "the Shoot changed while reconciliation was suspended"
    );
    // Resume: the pending change is applied.
    annotate_runtime(
        &runtimes,
        &id,
        names::ANNOTATION_SUSPEND_PATCH_RECONCILIATION,
        None,
    )
    .await?;
    eventually(
        "change applied after resume",
        Duration::from_secs(60),
        || async { Ok(first_pool_maximum(&shoots.get(&shoot_name).await?) == Some(12)) },
    )
    .await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;

    // Force patch: the Shoot is patched although nothing changed, then the annotation goes.
    annotate_runtime(
        &runtimes,
        &id,
        names::ANNOTATION_FORCE_PATCH_RECONCILIATION,
        Some("true"),
    )
    .await?;
    eventually(
        "force-patch annotation removed",
        Duration::from_secs(60),
        || async {
            Ok(!runtimes
                .get(&id)
                .await?
                .annotations()
                .contains_key(names::ANNOTATION_FORCE_PATCH_RECONCILIATION))
        },
    )
    .await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let annotated = force_annotated_at(env, &id)?.context("force-patch annotation not audited")?;
    let kim = format!("fieldManager={}", names::FIELD_MANAGER);
    let patched_after = env.audit_events_mentioning(&shoot_name)?.iter().any(|e| {
        e["objectRef"]["resource"] == "shoots"
            && e["objectRef"]["name"] == shoot_name.as_str()
            && e["verb"] == "patch"
            && e["requestURI"].as_str().is_some_and(|u| u.contains(&kim))
            && e["requestReceivedTimestamp"]
                .as_str()
                .is_some_and(|t| t > annotated.as_str())
    });
    assert!(
        patched_after,
        "no Shoot patch by {kim} after the force-patch annotation"
    );
    ctl.stop().await;
    Ok(())
}

/// A KCP restored from a backup (or a Runtime created anew) holds a Runtime older than the one
/// its Shoot was last patched from: its spec is not written over the Shoot, neither for a change
/// of its own nor for another reason, and it says why until the force-patch annotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runtime_behind_its_shoot_is_applied_only_when_forced() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-behind").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let id = format!("behind-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id)?;
    let shoot_name = rt.spec.shoot.name.clone();
    create(env, &rt).await?;
    let ready = wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    let generation = ready.metadata.generation.context("generation")?;
    assert_eq!(
        first_pool_maximum(&shoots.get(&shoot_name).await?),
        Some(20)
    );

    // The Shoot was patched from a later generation than the Runtime has (as after a restore).
    let later = generation + 10;
    let annotate = json!({"metadata": {"annotations": {
        names::SHOOT_ANNOTATION_RUNTIME_GENERATION: later.to_string()}}});
    shoots
        .patch(
            &shoot_name,
            &PatchParams::default(),
            &Patch::Merge(annotate),
        )
        .await?;
    let behind = |rt: &Runtime, at: i64| {
        rt.condition(condition::PROVISIONED).is_some_and(|c| {
            c.reason == reason::RUNTIME_BEHIND_SHOOT
                && c.status == "Unknown"
                && c.message.contains(&format!(
                    "generation {later} of this Runtime (annotation {}), the Runtime is at generation {at}",
                    names::SHOOT_ANNOTATION_RUNTIME_GENERATION
                ))
        })
    };
    // Seen as soon as the Shoot shows it.
    eventually("the Runtime says it is behind", TIMEOUT, || async {
        Ok(behind(&runtimes.get(&id).await?, generation))
    })
    .await?;
    // A change of the Runtime (its generation still below) is not applied, and it says why.
    set_first_pool_maximum(&runtimes, &id, 12).await?;
    let changed = generation + 1;
    eventually("the changed Runtime says it is behind", TIMEOUT, || async {
        Ok(behind(&runtimes.get(&id).await?, changed))
    })
    .await?;
    let held = runtimes.get(&id).await?;
    let status = held.status.as_ref().context("status")?;
    // Seen, and not done: what KEB waits for (Ready at the generation) does not happen.
    assert_eq!(status.state, RuntimeState::Pending);
    assert_eq!(status.observed_generation, Some(changed));
    // Another event (a label) while held changes nothing either: the controller looked (it
    // reads the Runtime's generation live before it holds) and wrote nothing.
    let reads = |env: &TestEnv| -> Result<usize> {
        Ok(env
            .audit_events_mentioning(&id)?
            .iter()
            .filter(|e| {
                e["objectRef"]["resource"] == "runtimes"
                    && e["objectRef"]["name"] == id.as_str()
                    && e["verb"] == "get"
                    && e["userAgent"]
                        .as_str()
                        .is_some_and(|a| a.starts_with("kim-controller/"))
            })
            .count())
    };
    let before = reads(env)?;
    runtimes
        .patch(
            &id,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"e2e-touch": "1"}}})),
        )
        .await?;
    eventually("the label change reconciled", TIMEOUT, || async {
        Ok(reads(env)? > before)
    })
    .await?;
    let shoot = shoots.get(&shoot_name).await?;
    assert_eq!(first_pool_maximum(&shoot), Some(20), "older spec applied");
    assert_eq!(
        shoot
            .annotations()
            .get(names::SHOOT_ANNOTATION_RUNTIME_GENERATION)
            .map(String::as_str),
        Some(later.to_string().as_str())
    );
    assert!(behind(&runtimes.get(&id).await?, changed));

    // Force patch: this Runtime is applied as it is, and it is Ready at its generation.
    annotate_runtime(
        &runtimes,
        &id,
        names::ANNOTATION_FORCE_PATCH_RECONCILIATION,
        Some("true"),
    )
    .await?;
    eventually("forced change applied", TIMEOUT, || async {
        Ok(first_pool_maximum(&shoots.get(&shoot_name).await?) == Some(12))
    })
    .await?;
    let ready = wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    assert_eq!(
        shoots
            .get(&shoot_name)
            .await?
            .annotations()
            .get(names::SHOOT_ANNOTATION_RUNTIME_GENERATION)
            .cloned(),
        ready.metadata.generation.map(|g| g.to_string())
    );
    ctl.stop().await;
    Ok(())
}

/// When the force-patch annotation was last set on the Runtime (audit log).
fn force_annotated_at(env: &TestEnv, id: &str) -> Result<Option<String>> {
    Ok(env
        .audit_events_mentioning(id)?
        .into_iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "runtimes"
                && e["objectRef"]["name"] == id
                && e["verb"] == "patch"
                && e["requestObject"]["metadata"]["annotations"]
                    [names::ANNOTATION_FORCE_PATCH_RECONCILIATION]
                    == "true"
        })
        .filter_map(|e| e["requestReceivedTimestamp"].as_str().map(str::to_owned))
        .max())
}

/// The first pool's labels on the Shoot.
fn first_pool_labels(shoot: &Shoot) -> Value {
    serde_json::to_value(&shoot.spec.provider.workers)
        .ok()
        .and_then(|w| w.get(0).and_then(|p| p.get("labels")).cloned())
        .unwrap_or(Value::Null)
}

/// What the Shoot's create set and the patch leaves out on purpose.
fn create_only(shoot: &Shoot) -> Result<Value> {
    let spec = serde_json::to_value(&shoot.spec)?;
    Ok(json!({
        "dns": spec["dns"],
        "networking": spec["networking"],
        "tolerations": spec["tolerations"],
        "serviceAccountConfig": spec["kubernetes"]["kubeAPIServer"]["serviceAccountConfig"],
    }))
}

/// A field the create set and the conversion stops setting leaves the Shoot: after the first
/// apply hands the create's co-owned fields to `kim`, a label removed from a worker pool goes
/// with the next apply, while the fields only the create sets (DNS, networking) stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_field_the_conversion_stops_setting_leaves_the_shoot() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-release").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let id = format!("release-{}", &ns[ns.len().saturating_sub(6)..]);
    let mut rt = sample_runtime(&ns, &id)?;
    rt.spec.shoot.provider.workers[0].labels = Some(
        [("team", "blue"), ("tier", "gold")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    );
    let shoot_name = rt.spec.shoot.name.clone();
    create(env, &rt).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    let created = shoots.get(&shoot_name).await?;
    assert_eq!(
        first_pool_labels(&created),
        json!({"team": "blue", "tier": "gold"})
    );
    let set_at_create = create_only(&created)?;
    assert!(
        !set_at_create["dns"].is_null() && !set_at_create["networking"].is_null(),
        "the create sets DNS and networking: {set_at_create}"
    );

    // The first apply (a spec change) hands over what the create co-owns.
    set_first_pool_maximum(&runtimes, &id, 12).await?;
    eventually("first change applied", Duration::from_secs(60), || async {
        Ok(first_pool_maximum(&shoots.get(&shoot_name).await?) == Some(12))
    })
    .await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    // The whole stored spec, fields our model leaves out included.
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        env.garden_client().await?,
        PROJECT_NAMESPACE,
        &kim_tests::fixtures::api_resource("core.gardener.cloud/v1beta1", "Shoot")?,
    );
    let before = raw.get(&shoot_name).await?.data["spec"].clone();

    // A label removed from the Runtime is removed from the Shoot.
    edit_first_pool(&runtimes, &id, |pool| {
        pool["labels"]
            .as_object_mut()
            .context("the pool's labels")?
            .remove("team");
        Ok(())
    })
    .await?;
    eventually(
        "label removed from the Shoot",
        Duration::from_secs(60),
        || async {
            Ok(first_pool_labels(&shoots.get(&shoot_name).await?) == json!({"tier": "gold"}))
        },
    )
    .await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    let after = shoots.get(&shoot_name).await?;
    assert_eq!(
        create_only(&after)?,
        set_at_create,
        "a field only the create sets changed"
    );
    // Nothing else of the spec changed: Gardener's defaults and the create's fields stay.
    let mut expected = before;
    expected["provider"]["workers"][0]["labels"]
        .as_object_mut()
        .context("the pool's labels")?
        .remove("team");
    assert_eq!(raw.get(&shoot_name).await?.data["spec"], expected);
    ctl.stop().await;
    Ok(())
}

/// A Shoot watch that lags behind the controller's own patch does not make the Runtime Ready
/// on the previous operation's outcome: while the watch cannot show the patched generation,
/// the Runtime of the new generation stays Pending; once it can, the Runtime is Ready with the
/// patched Shoot. (Before, the pass after the patch judged the cached Shoot of the previous
/// generation, whose last operation had succeeded.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lagging_shoot_watch_does_not_make_an_update_ready() -> Result<()> {
    use kim_tests::faultproxy::{ApiFault, FaultProxy, Rule};
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-upd-lag").await?;
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let ctl = start_controller_wired(
        env,
        &ns,
        &[],
        &Wiring {
            gardener: Some(proxy.access_via(env.kcp())),
            ..Wiring::default()
        },
    )
    .await?;
    let id = format!("lag-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id)?;
    let shoot_name = rt.spec.shoot.name.clone();
    create(env, &rt).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    let before = shoots.get(&shoot_name).await?;

    // The Shoot watch breaks and its restarts (lists and watches of the collection) are
    // refused; reads of one Shoot and patches go through.
    proxy.inject(Rule {
        method: Some("GET".into()),
        path_contains: format!("/namespaces/{PROJECT_NAMESPACE}/shoots?"),
        fault: ApiFault::ServerError(500),
        times: None,
    });
    proxy.cut_connections();
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    let maximum = first_pool_maximum(&before).context("maximum")?;
    let mut workers = serde_json::to_value(&rt.spec.shoot.provider.workers)?;
    workers[0]["maximum"] = json!(maximum + 1);
    let bumped = runtimes
        .patch(
            &id,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"shoot": {"provider": {"workers": workers}}}})),
        )
        .await?;
    let generation = bumped.metadata.generation;
    // Patched through the live Shoot, and reconciled by Gardener (the simulator), while the
    // controller's cache still holds the Shoot before the patch.
    eventually("the Shoot patched", TIMEOUT, || async {
        let shoot = shoots.get(&shoot_name).await?;
        Ok(first_pool_maximum(&shoot) == Some(maximum + 1))
    })
    .await?;
    let lagging = std::time::Instant::now();
    while lagging.elapsed() < Duration::from_secs(15) {
        let now = runtimes.get(&id).await?;
        let status = now.status.as_ref();
        assert!(
            !(status.map(|s| s.state) == Some(RuntimeState::Ready)
                && status.and_then(|s| s.observed_generation) == generation),
            "Ready for generation {generation:?} while the Shoot watch shows the Shoot before the patch: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        proxy.served_count(
            "GET",
            &format!("/namespaces/{PROJECT_NAMESPACE}/shoots"),
            &ApiFault::ServerError(500)
        ) > 0,
        "the Shoot watch was not held back"
    );

    proxy.clear();
    eventually("Ready for the new generation", TIMEOUT, || async {
        let now = runtimes.get(&id).await?;
        let status = now.status.as_ref();
        Ok(status.map(|s| s.state) == Some(RuntimeState::Ready)
            && status.and_then(|s| s.observed_generation) == generation)
    })
    .await?;
    ctl.stop().await;
    Ok(())
}
