//! A Runtime with `enforceSeedLocation` in a region whose only Seed is not ready gets no Shoot:
//! `Failed` with upstream's `Provisioned=False/SeedNotFound`; once the Seed is ready again the
//! controller's next look creates the Shoot.
//!
//! Its own environment: the test takes a Seed of the landscape out of service, which would
//! refuse the other controller tests' Runtimes in that region.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use kim_shared::api::RuntimeState;
use kim_shared::gardener::Shoot;
use kim_shared::names::{condition, reason};
use kim_tests::controller::*;
use kim_tests::fixtures;
use kim_tests::testenv::{TestEnv, TestEnvOptions};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::json;

/// The controller looks again once a minute.
const RETRY_TIMEOUT: Duration = Duration::from_secs(150);

async fn set_gardenlet_ready(env: &TestEnv, seed: &str, status: &str) -> Result<()> {
    let ar = fixtures::api_resource("core.gardener.cloud/v1beta1", "Seed")?;
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let body = json!({"status": {"conditions": [
        {"type": "GardenletReady", "status": status, "reason": "Simulated",
         "message": "Set by the seeds test.", "lastTransitionTime": now, "lastUpdateTime": now}
    ]}});
    Api::<DynamicObject>::all_with(env.garden_client().await?, &ar)
        .patch_status(seed, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .with_context(|| format!("set GardenletReady={status} on Seed {seed}"))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_shoot_without_a_usable_seed_in_the_region() -> Result<()> {
    let env = &TestEnv::start(TestEnvOptions::default())
        .await
        .map_err(|e| anyhow!("the seeds test's own environment: {e}"))?;
    let ns = env.namespace("ctl-seeds").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let id = format!("rt-{}", &ns[ns.len().saturating_sub(6)..]);
    let mut rt = sample_runtime(&ns, &id)?;
    rt.spec.shoot.enforce_seed_location = Some(true);
    let seed = fixtures::seed_name("aws", &rt.spec.shoot.region);
    set_gardenlet_ready(env, &seed, "False").await?;
    create(env, &rt).await?;

    let failed = wait_state(env, &ns, &id, RuntimeState::Failed, RETRY_TIMEOUT).await?;
    let c = failed
        .condition(condition::PROVISIONED)
        .context("Provisioned condition")?;
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", reason::SEED_NOT_FOUND)
    );
    assert!(
        c.message
            .contains(&format!("for the region {}", rt.spec.shoot.region)),
        "{}",
        c.message
    );
    let shoots: Api<Shoot> =
        Api::namespaced(env.garden_client().await?, fixtures::PROJECT_NAMESPACE);
    ensure!(
        shoots.get_opt(&rt.spec.shoot.name).await?.is_none(),
        "a Shoot was created for a region without a usable Seed"
    );

    set_gardenlet_ready(env, &seed, "True").await?;
    eventually(
        "the Shoot is created once the Seed is ready",
        RETRY_TIMEOUT,
        || {
            let shoots = shoots.clone();
            let name = rt.spec.shoot.name.clone();
            async move { Ok(shoots.get_opt(&name).await?.is_some()) }
        },
    )
    .await?;
    let provisioned = wait_state(env, &ns, &id, RuntimeState::Ready, RETRY_TIMEOUT).await?;
    check_ready_conditions(&provisioned)?;
    ctl.stop().await;
    Ok(())
}
