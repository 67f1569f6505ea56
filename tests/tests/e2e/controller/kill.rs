//! Crash safety: killing the controller at random points while 200 Runtimes are provisioned and
//! deleted leaves no Shoot created twice (a watch records every Shoot's UID), no orphan Shoot
//! or GardenerCluster and no stuck finalizer.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};

use anyhow::Result;
use kim_shared::api::{GardenerCluster, Runtime};
use kim_shared::gardener::Shoot;
use kim_shared::names;
use kim_tests::controller::*;
use kim_tests::testenv::{TestEnv, TestEnvOptions};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use rand::Rng;

const RUNTIMES: usize = 200;

// A restarted controller with a backlog must not park its reconcile workers on the watch-cache
// readiness (see `caches_ready` in the Runtime reconciler): with all workers but one parked for
// good, the last controller would make no progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_at_random_points_leaves_nothing_behind() -> Result<()> {
    // An environment of its own: 200 Runtimes and nine controller starts load the servers, and
    // a failure would leave up to 200 Shoots that every later controller lists and watches.
    let env = &TestEnv::start(TestEnvOptions::default()).await?;
    let ns = env.namespace("ctl-kill").await?;
    let suffix = ns[ns.len().saturating_sub(4)..].to_owned();
    let ids: Vec<String> = (0..RUNTIMES).map(|i| format!("k{suffix}{i:03}")).collect();
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    let wanted: HashSet<String> = ids.iter().map(|id| shoot_name(id)).collect();
    let shoots: Api<Shoot> = Api::namespaced(
        env.garden_client().await?,
        kim_tests::fixtures::PROJECT_NAMESPACE,
    );
    // Every Shoot of these Runtimes the watch sees, by name: more than one UID for a name is a
    // Shoot created twice.
    let seen: Arc<Mutex<HashMap<String, HashSet<String>>>> = Arc::default();
    let watch = {
        let (seen, wanted) = (seen.clone(), wanted.clone());
        let events = watcher(shoots.clone(), watcher::Config::default())
            .default_backoff()
            .applied_objects();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                if let Ok(shoot) = event
                    && wanted.contains(&shoot.name_any())
                    && let Ok(mut seen) = seen.lock()
                {
                    seen.entry(shoot.name_any())
                        .or_default()
                        .insert(shoot.uid().unwrap_or_default());
                }
            }
        })
    };
    for id in &ids {
        create(env, &sample_runtime(&ns, id)?).await?;
    }
    let extra = [
        "--runtime-ctrl-workers-cnt=25",
        "--gardener-cluster-ctrl-workers-cnt=25",
    ];
    // Provisioning with crashes. The first round runs until the first Shoot is created, then
    // for a random while more: on a loaded machine a controller's start alone can take longer
    // than a random kill point, and the crashes must interrupt real work.
    for round in 0..4 {
        let ctl = KillableController::start(env, &ns, &extra).await?;
        if round == 0 {
            eventually("the first Shoot", Duration::from_secs(180), || {
                let seen = seen.clone();
                async move { Ok(seen.lock().is_ok_and(|s| !s.is_empty())) }
            })
            .await?;
        }
        let ms = rand::rng().random_range(500..4000);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ctl.kill();
        eprintln!("round {round}: killed after {ms} ms");
    }
    // The crashes interrupted real work: Shoots exist before the deletions start.
    let created = shoots
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|s| wanted.contains(&s.name_any()))
        .count();
    eprintln!("{created} of {RUNTIMES} Shoots exist before the deletions");
    assert!(created > 0, "no Shoot was created in the crash rounds");
    // Delete everything, and keep crashing.
    for id in &ids {
        runtimes.delete(id, &DeleteParams::default()).await?;
    }
    for round in 0..4 {
        let ctl = KillableController::start(env, &ns, &extra).await?;
        let ms = rand::rng().random_range(500..4000);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ctl.kill();
        eprintln!("delete round {round}: killed after {ms} ms");
    }
    // A last controller runs to the end.
    let ctl = start_controller(env, &ns, &extra).await?;
    eventually("all Runtimes gone", Duration::from_secs(600), || {
        let runtimes = runtimes.clone();
        async move {
            Ok(runtimes
                .list(&ListParams::default().limit(1))
                .await?
                .items
                .is_empty())
        }
    })
    .await?;
    ctl.stop().await;

    watch.abort();
    let (watched, twice): (usize, Vec<String>) = {
        let seen = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        let twice = seen
            .iter()
            .filter(|(_, uids)| uids.len() > 1)
            .map(|(name, _)| name.clone())
            .collect();
        (seen.len(), twice)
    };
    // The watch saw at least the Shoots listed before the deletions, or it proves nothing.
    assert!(
        watched >= created,
        "the watch saw {watched} Shoots, {created} were listed"
    );
    assert!(twice.is_empty(), "Shoots created twice: {twice:?}");
    let left: Vec<String> = shoots
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|s| {
            wanted.contains(&s.name_any())
                || ids
                    .iter()
                    .any(|id| s.annotations().get(names::SHOOT_ANNOTATION_RUNTIME_ID) == Some(id))
        })
        .map(|s| s.name_any())
        .collect();
    assert!(left.is_empty(), "orphan Shoots: {left:?}");
    let gcs: Api<GardenerCluster> = Api::namespaced(env.kcp_client().await?, &ns);
    let gcs_left = gcs.list(&ListParams::default()).await?.items;
    assert!(
        gcs_left.is_empty(),
        "orphan GardenerClusters: {:?}",
        gcs_left.iter().map(|g| g.name_any()).collect::<Vec<_>>()
    );
    Ok(())
}
