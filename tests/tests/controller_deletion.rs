//! Deletion options end to end (issue 6 deliverable 2): safe deletion with
//! `--deletion-grace-period` (the Shoot is hibernated, the Runtime is `Terminating` with a
//! condition saying when, the Shoot is deleted only after the period) and force deletion with
//! `--force-deletion` (the annotation the real gardener-apiserver accepts is set when the
//! Shoot's deletion reports an eligible error code, and only then; ignored until the simulator
//! can fail a Delete).

#[path = "controller_common.rs"]
mod common;

use std::time::Duration;

use anyhow::{Context as _, Result};
use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kim_shared::api::{Runtime, RuntimeState};
use kim_shared::gardener::Shoot;
use kim_shared::names::{self, condition, reason};
use kim_tests::fixtures::PROJECT_NAMESPACE;
use kim_tests::simulator::{FAULT_CONFIGMAP, FAULT_CONFIGMAP_NAMESPACE};
use kim_tests::testenv::TestEnv;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);

async fn set_fault(env: &TestEnv, shoot: &str, fault: &str) -> Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(env.kcp_client().await?, FAULT_CONFIGMAP_NAMESPACE);
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": FAULT_CONFIGMAP, "namespace": FAULT_CONFIGMAP_NAMESPACE},
        "data": {shoot: fault}});
    api.patch(
        FAULT_CONFIGMAP,
        &PatchParams::apply(&format!("controller-deletion-{shoot}")).force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(())
}

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
        .audit_events()?
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

// The simulated gardenlet applies `error:`/`failed:` faults to Create and Reconcile only; a
// Delete always succeeds, so the Shoot never reports a deletion error to confirm. Needs the
// simulator to keep a Delete in `Error` with the fault's codes (tests/src/simulator/step.rs).
#[ignore = "the Gardener simulator cannot fail a Delete operation yet (issue 6)"]
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
    // Watch every version of both Shoots: the eligible one vanishes soon after it is annotated.
    let seen_forced = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let watch = {
        use futures::StreamExt;
        let seen = seen_forced.clone();
        let stream = kube::runtime::watcher(shoots.clone(), Default::default());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(kube::runtime::watcher::Event::Apply(s)) = event
                    && s.annotations()
                        .get(names::GARDENER_ANNOTATION_CONFIRM_FORCE_DELETION)
                        .is_some_and(|v| v == "true")
                    && let Ok(mut seen) = seen.lock()
                {
                    seen.push(s.name_any());
                }
            }
        })
    };
    // The Shoots' deletion will fail with the code (the simulated gardenlet keeps it in Error).
    for (id, code, _) in &cases {
        set_fault(env, &shoot_name(id), &format!("error:{code}")).await?;
        runtimes.delete(id, &DeleteParams::default()).await?;
    }
    let forced = |s: &Shoot| {
        s.annotations()
            .get(names::GARDENER_ANNOTATION_CONFIRM_FORCE_DELETION)
            .is_some_and(|v| v == "true")
    };
    // Eligible: the deletion finishes although the fault stays, because the controller
    // confirmed force deletion (Gardener, here the simulated gardenlet, then skips cleanup).
    let (eligible, ..) = &cases[0];
    eventually(
        &format!("{eligible} gone through force deletion"),
        TIMEOUT,
        || async { Ok(runtimes.get_opt(eligible).await?.is_none()) },
    )
    .await?;
    let name = shoot_name(eligible);
    assert!(
        seen_forced
            .lock()
            .map(|s| s.contains(&name))
            .unwrap_or(false),
        "the Shoot {name} was never seen with the force-deletion annotation"
    );
    // Not eligible: the Shoot stays in Error, unconfirmed, the Runtime Terminating.
    let (other, code, _) = &cases[1];
    let name = shoot_name(other);
    eventually(
        &format!("{name}: Delete in Error with {code}"),
        Duration::from_secs(60),
        || async {
            let status = shoots.get(&name).await?.status.unwrap_or_default();
            Ok(status
                .last_operation
                .is_some_and(|op| op.type_ == "Delete" && op.state == "Error")
                && status
                    .last_errors
                    .unwrap_or_default()
                    .iter()
                    .any(|e| e.codes.iter().flatten().any(|c| c == code)))
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !forced(&shoots.get(&name).await?)
            && !seen_forced
                .lock()
                .map(|s| s.contains(&name))
                .unwrap_or(true),
        "force deletion set for a code Gardener does not accept for it"
    );
    watch.abort();
    assert_eq!(
        runtimes.get(other).await?.status.map(|s| s.state),
        Some(RuntimeState::Terminating)
    );
    // Faults gone: both deletions finish, finalizers last.
    for (id, ..) in &cases {
        set_fault(env, &shoot_name(id), "none").await?;
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
