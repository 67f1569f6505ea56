//! The failures a control plane sees, end to end, each with the controller running (the
//! webhook's are in `webhook::failures`). Runbook: docs/operations.md, "Failures of the
//! control plane".
//!
//! - the KCP kube-apiserver killed and restarted while Runtimes are created: every Runtime
//!   becomes Ready with one Shoot, created once, and the controller's watches resume;
//! - etcd compacted (`/v3/kv/compaction` of its HTTP gateway) while the controller is cut off
//!   from the KCP, and the apiserver's watch cache started anew: the resourceVersions the
//!   controller's watches resume at are gone (`410 Gone`), its caches relist, and the create,
//!   spec change and deletion it missed are all carried out;
//! - the leader is cut off from the KCP (a network partition: its connections to the KCP cut,
//!   new ones closed unanswered) while it reconciles, and keeps reaching Gardener: it steps
//!   down before its Lease expires, the follower takes over, and nothing the old leader sends
//!   reaches the KCP or Gardener after that; every Runtime ends Ready with one Shoot;
//! - Gardener unreachable (connections closed) while Runtimes are provisioned: they stay
//!   `Pending` and are retried with a growing backoff, the health metric reports `error` for
//!   the whole outage (the `KimGardenerUnhealthy` condition), and once Gardener is back every
//!   Runtime becomes Ready and the health `healthy`, without anything done to them: the
//!   controller retries every waiting Runtime as soon as the health probe succeeds again. The outage
//!   lasts `KIM_GARDENER_OUTAGE` (30 s by default; more than the five minutes with
//!   `KIM_GARDENER_OUTAGE=6m`, which also shows the alert's `for: 5m` run out: the condition
//!   must hold five minutes after its detection).
//!
//! The first two stop the KCP apiserver and start an environment of their own each; the
//! others share [`TestEnv::shared`], reaching it through fault proxies of their own.

use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kim_shared::api::{Runtime, RuntimeState};
use kim_shared::gardener::Shoot;
use kim_shared::names;
use kim_tests::controller::*;
use kim_tests::faultproxy::{FaultProxy, Forwarded};
use kim_tests::fixtures::PROJECT_NAMESPACE;
use kim_tests::testenv::{TestEnv, TestEnvOptions};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

const LEASE: &str = "f1c68560.kyma-project.io";
const LEASE_SECONDS: u64 = 6;
const READY_TIMEOUT: Duration = Duration::from_secs(120);

async fn lease(env: &TestEnv, ns: &str) -> Result<Option<Lease>> {
    let leases: Api<Lease> = Api::namespaced(env.kcp_client().await?, ns);
    Ok(leases.get_opt(LEASE).await?)
}

fn holder(lease: &Option<Lease>) -> Option<&str> {
    lease
        .as_ref()
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.holder_identity.as_deref())
}

/// Waits until `identity` holds the Lease; returns the Lease.
async fn wait_holder(env: &TestEnv, ns: &str, identity: &str, timeout: Duration) -> Result<Lease> {
    let started = Instant::now();
    loop {
        let l = lease(env, ns).await?;
        if holder(&l) == Some(identity) {
            return l.context("Lease");
        }
        if started.elapsed() > timeout {
            bail!(
                "Lease held by {:?}, wanted {identity} within {timeout:?}",
                holder(&l)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The Shoots (in the project) of Runtime `id`, by its annotation.
async fn shoots_of(env: &TestEnv, id: &str) -> Result<Vec<String>> {
    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    Ok(shoots
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|s| s.annotations().get(names::SHOOT_ANNOTATION_RUNTIME_ID) == Some(&id.to_owned()))
        .map(|s| s.name_any())
        .collect())
}

fn writes_since(forwarded: &[Forwarded], since: SystemTime) -> Vec<String> {
    forwarded
        .iter()
        .filter(|f| f.is_write() && f.at >= since)
        .map(|f| format!("{} {}", f.method, f.path))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_leader_steps_down_before_its_lease_expires() -> Result<()> {
    let started = Instant::now();
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-partition").await?;
    let suffix = ns[ns.len().saturating_sub(5)..].to_owned();
    let lease_flag = format!("--leader-elect-lease-duration={LEASE_SECONDS}s");
    let flags = ["--leader-elect", lease_flag.as_str()];

    // The leader reaches the KCP and Gardener through proxies of its own: the partition cuts
    // it from the KCP only, as when the KCP and Gardener are different clusters.
    let kcp_proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let garden_proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let (leader, leader_id, _) = KillableController::start_wired(
        env,
        &ns,
        &flags,
        &Wiring {
            kcp: Some(kcp_proxy.access_via(env.kcp())),
            gardener: Some(garden_proxy.access_via(env.kcp())),
            ..Wiring::default()
        },
    )
    .await?;
    wait_holder(
        env,
        &ns,
        &leader_id,
        Duration::from_secs(2 * LEASE_SECONDS + 10),
    )
    .await?;
    let (follower, follower_id, _) = KillableController::start_wired(
        env,
        &ns,
        &flags,
        &Wiring {
            user: Some(format!("kim-partition-b-{suffix}")),
            ..Wiring::default()
        },
    )
    .await?;

    // Runtimes to reconcile; the partition starts once the leader writes to Gardener.
    let ids: Vec<String> = (0..6).map(|i| format!("part{i}-{suffix}")).collect();
    for id in &ids {
        create(env, &sample_runtime(&ns, id)?).await?;
    }
    eventually(
        "the leader creates a Shoot",
        Duration::from_secs(60),
        || async {
            Ok(garden_proxy
                .forwarded()
                .iter()
                .any(|f| f.method == "POST" && f.path.ends_with("/shoots")))
        },
    )
    .await?;
    kcp_proxy.partition();
    let partitioned = Instant::now();

    // The follower takes the Lease once it expires; by then the old leader has stopped.
    let taken = wait_holder(
        env,
        &ns,
        &follower_id,
        Duration::from_secs(3 * LEASE_SECONDS),
    )
    .await?;
    let takeover = partitioned.elapsed();
    let still_leading = !leader.finished();
    let acquired: SystemTime = taken
        .spec
        .as_ref()
        .and_then(|s| s.acquire_time.as_ref())
        .map(|t| SystemTime::from(t.0))
        .context("acquireTime of the new leader")?;
    kcp_proxy.heal();

    // Every Runtime becomes Ready through the new leader, each with one Shoot.
    for id in &ids {
        wait_state(env, &ns, id, RuntimeState::Ready, READY_TIMEOUT).await?;
        let shoots = shoots_of(env, id).await?;
        ensure!(shoots.len() == 1, "Runtime {id} has Shoots {shoots:?}");
    }
    // Nothing the old leader sent reached the KCP or Gardener after the follower took over.
    let late_kcp = writes_since(&kcp_proxy.forwarded(), acquired);
    let late_garden = writes_since(&garden_proxy.forwarded(), acquired);
    ensure!(
        late_kcp.is_empty() && late_garden.is_empty(),
        "the old leader wrote after the takeover: KCP {late_kcp:?}, Gardener {late_garden:?}"
    );
    ensure!(
        !still_leading,
        "the partitioned leader still ran when the follower took the Lease ({takeover:?} after the partition)"
    );
    let garden_writes = garden_proxy
        .forwarded()
        .iter()
        .filter(|f| f.is_write())
        .count();
    ensure!(garden_writes > 0, "the old leader never wrote to Gardener");
    eprintln!(
        "partition: takeover {takeover:?} after the partition (Lease {LEASE_SECONDS}s); the old leader wrote {garden_writes} times to Gardener before; test took {:?}",
        started.elapsed()
    );
    leader.kill();
    follower.kill();
    Ok(())
}

/// How long Gardener stays unreachable: `KIM_GARDENER_OUTAGE` (humantime), 30 s by default.
fn outage() -> Result<Duration> {
    match std::env::var("KIM_GARDENER_OUTAGE") {
        Ok(v) => humantime::parse_duration(&v).context("KIM_GARDENER_OUTAGE"),
        Err(_) => Ok(Duration::from_secs(30)),
    }
}

/// The `KimGardenerUnhealthy` condition, `max(infrastructure_manager_im_gardener_health{status="error"}) == 1`,
/// on one scrape.
fn unhealthy(metrics: &str) -> bool {
    metric_sum(
        metrics,
        "infrastructure_manager_im_gardener_health",
        &["status=\"error\""],
    ) >= 1.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gardener_unreachable_during_provisioning_recovers_without_a_hand() -> Result<()> {
    let started = Instant::now();
    let outage = outage()?;
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-outage").await?;
    let suffix = ns[ns.len().saturating_sub(5)..].to_owned();
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let (ctl, _, metrics) = KillableController::start_wired(
        env,
        &ns,
        &["--gardener-health-interval=1s"],
        &Wiring {
            gardener: Some(proxy.access_via(env.kcp())),
            ..Wiring::default()
        },
    )
    .await?;
    eventually("Gardener healthy", Duration::from_secs(30), || async {
        Ok(metric_sum(
            &metrics_text(metrics).await?,
            "infrastructure_manager_im_gardener_health",
            &["status=\"healthy\""],
        ) == 1.0)
    })
    .await?;
    // Reconciles wait for the first full list of Shoots ("no Shoot" must mean no Shoot); a
    // partition before it would hold every Runtime without a status.
    eventually(
        "the Shoot cache filled",
        Duration::from_secs(60),
        || async {
            Ok(metric_sum(
                &metrics_text(metrics).await?,
                "infrastructure_manager_im_watch_lists_total",
                &["watch=\"shoots\""],
            ) >= 1.0)
        },
    )
    .await?;

    proxy.partition();
    let down = Instant::now();
    let ids: Vec<String> = (0..3).map(|i| format!("out{i}-{suffix}")).collect();
    for id in &ids {
        create(env, &sample_runtime(&ns, id)?).await?;
    }
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    // Once a second, as Prometheus would scrape: the alert condition and the Runtimes' states.
    let mut unhealthy_since = None;
    while down.elapsed() < outage {
        let text = metrics_text(metrics).await?;
        match (unhealthy(&text), unhealthy_since) {
            (true, None) => unhealthy_since = Some(down.elapsed()),
            (false, Some(since)) => bail!(
                "the health metric left `error` {:?} into the outage (error since {since:?})",
                down.elapsed()
            ),
            _ => {}
        }
        for rt in runtimes.list(&ListParams::default()).await?.items {
            let state = rt.status.as_ref().map(|s| s.state);
            ensure!(
                state != Some(RuntimeState::Failed) && state != Some(RuntimeState::Ready),
                "{} is {state:?} while Gardener is unreachable: {:?}",
                rt.name_any(),
                rt.status
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let detected = unhealthy_since.context("the health metric never reported `error`")?;
    ensure!(
        detected <= Duration::from_secs(10),
        "the health metric reported `error` only {detected:?} into the outage"
    );
    // The alert's condition held from detection to the end: `for: 5m` fires on a longer outage.
    let held = outage.saturating_sub(detected);
    if outage >= Duration::from_secs(5 * 60 + 10) {
        ensure!(
            held >= Duration::from_secs(5 * 60),
            "condition held {held:?}"
        );
    } else {
        eprintln!(
            "NOT CHECKED: the alert's `for: 5m` (the outage of {outage:?} is shorter than 5m10s; KIM_GARDENER_OUTAGE=6m checks it)"
        );
    }
    for id in &ids {
        let rt = runtimes.get(id).await?;
        ensure!(
            rt.status.as_ref().map(|s| s.state) == Some(RuntimeState::Pending),
            "{id} not Pending at the end of the outage: {:?}",
            rt.status
        );
    }
    // Backoff: per Runtime, attempts grow no faster than 1 s, 2 s, 4 s ...
    let text = metrics_text(metrics).await?;
    let reconciles = metric_sum(
        &text,
        "infrastructure_manager_im_reconciles_total",
        &["controller=\"runtime\""],
    );
    let per_runtime = reconciles / ids.len() as f64;
    let bound = outage.as_secs_f64().log2().ceil() + 4.0;
    ensure!(
        (2.0..=bound).contains(&per_runtime),
        "{reconciles} reconciles of {} Runtimes in {outage:?}; a doubling backoff allows {bound} each",
        ids.len(),
    );

    // Gardener is back: everything recovers on its own.
    proxy.heal();
    let back = Instant::now();
    for id in &ids {
        wait_state(env, &ns, id, RuntimeState::Ready, outage + READY_TIMEOUT).await?;
        let shoots = shoots_of(env, id).await?;
        ensure!(shoots.len() == 1, "Runtime {id} has Shoots {shoots:?}");
    }
    let recovered = back.elapsed();
    let text = metrics_text(metrics).await?;
    ensure!(!unhealthy(&text), "still unhealthy after recovery");
    // They were retried when the health probe saw Gardener again, not each after its own
    // backoff (up to a minute or more after a long outage).
    let woken = metric_sum(
        &text,
        "infrastructure_manager_im_gardener_recovery_retries_total",
        &["controller=\"runtime\""],
    );
    ensure!(
        woken >= ids.len() as f64,
        "{woken} Runtimes retried on Gardener's recovery, expected the {} that waited",
        ids.len()
    );
    eprintln!(
        "Gardener outage {outage:?}: unhealthy after {detected:?}, {per_runtime:.1} reconciles per Runtime, all Ready {recovered:?} after it ended; test took {:?}",
        started.elapsed()
    );
    ctl.kill();
    Ok(())
}

/// Creates Runtime `id`, retrying while the KCP does not answer; an `AlreadyExists` answer
/// means an earlier try was stored although its answer was lost.
async fn create_until_stored(env: &TestEnv, ns: &str, id: &str) -> Result<u32> {
    let api: Api<Runtime> = Api::namespaced(env.kcp_client().await?, ns);
    let rt = sample_runtime(ns, id)?;
    let mut failed = 0;
    loop {
        match api.create(&PostParams::default(), &rt).await {
            Ok(_) => return Ok(failed),
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(failed),
            Err(_) if failed < 300 => {
                failed += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => bail!("creating {id}: {e}"),
        }
    }
}

/// The HTTP codes of the Shoot creates by `user` in the KCP audit log (Gardener is aggregated
/// into the KCP, which passes the requests on undecoded: the records name no Shoot). The
/// records of requests in flight when the apiserver is killed are lost with it.
fn shoot_creates(env: &TestEnv, user: &str) -> Result<Vec<i64>> {
    Ok(env
        .audit_events_of(user)?
        .iter()
        .filter(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "shoots")
        // Not `shoots/adminkubeconfig`.
        .filter(|e| e["objectRef"]["subresource"].is_null())
        .filter_map(|e| e["responseStatus"]["code"].as_i64())
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_kcp_apiserver_restarted_under_load_misses_no_runtime() -> Result<()> {
    let started = Instant::now();
    // An environment of its own: the restart interrupts every client of the KCP.
    let env = &TestEnv::start(TestEnvOptions::default()).await?;
    let ns = env.namespace("ctl-restart").await?;
    let suffix = ns[ns.len().saturating_sub(5)..].to_owned();
    let user = format!("kim-restart-{suffix}");
    let (ctl, _, _) = KillableController::start_wired(
        env,
        &ns,
        &[],
        &Wiring {
            user: Some(user.clone()),
            ..Wiring::default()
        },
    )
    .await?;

    // Load: a Runtime every 250 ms for 10 s, as KEB would send them (retrying while the KCP
    // is away); the KCP apiserver is killed and restarted 3 s in.
    let ids: Vec<String> = (0..40).map(|i| format!("rs{i:02}-{suffix}")).collect();
    let load = async {
        let mut failed = 0;
        for id in &ids {
            failed += create_until_stored(env, &ns, id).await?;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok::<_, anyhow::Error>(failed)
    };
    let restart = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let at = SystemTime::now();
        Ok::<_, anyhow::Error>((env.restart_kcp_apiserver().await?, at))
    };
    let (failed, restart) = tokio::join!(load, restart);
    let (failed, (gone, restarted_at)) = (failed?, restart?);

    for id in &ids {
        wait_state(env, &ns, id, RuntimeState::Ready, 2 * READY_TIMEOUT).await?;
        let shoots = shoots_of(env, id).await?;
        ensure!(shoots.len() == 1, "Runtime {id} has Shoots {shoots:?}");
    }
    // No more Shoots stored than Runtimes (a second Shoot of a Runtime, under another name,
    // would also show in the annotation check above).
    let creates = shoot_creates(env, &user)?;
    let stored = creates.iter().filter(|c| **c == 201).count();
    ensure!(
        stored > 0 && stored <= ids.len(),
        "{stored} Shoot creates stored for {} Runtimes: {creates:?}",
        ids.len()
    );
    // The controller's watches resumed on the restarted apiserver.
    let watches_after = env
        .audit_events_of(&user)?
        .iter()
        .filter(|e| e["verb"] == "watch" && e["objectRef"]["resource"] == "runtimes")
        .filter(|e| {
            e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| SystemTime::from(t) > restarted_at)
        })
        .count();
    ensure!(watches_after > 0, "no Runtime watch after the restart");
    eprintln!(
        "KCP apiserver restart under load: gone {gone:?}; {failed} creates refused meanwhile and retried; {} Runtimes Ready with one Shoot each; audit log: {stored} Shoot creates stored, {} answered otherwise; test took {:?}",
        ids.len(),
        creates.len() - stored,
        started.elapsed()
    );
    ctl.kill();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_compacted_while_the_controller_is_cut_off_its_caches_relist() -> Result<()> {
    let started = Instant::now();
    let env = &TestEnv::start(TestEnvOptions::default()).await?;
    let ns = env.namespace("ctl-compact").await?;
    let suffix = ns[ns.len().saturating_sub(5)..].to_owned();
    // The controller's KCP connections (its watches) go through a proxy; Gardener directly.
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let (ctl, _, metrics) = KillableController::start_wired(
        env,
        &ns,
        &[],
        &Wiring {
            kcp: Some(proxy.access_via(env.kcp())),
            gardener: Some(env.kcp().clone()),
            ..Wiring::default()
        },
    )
    .await?;
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.kcp_client().await?, &ns);
    let (kept, changed, deleted) = (
        format!("keep-{suffix}"),
        format!("change-{suffix}"),
        format!("delete-{suffix}"),
    );
    for id in [&kept, &changed, &deleted] {
        create(env, &sample_runtime(&ns, id)?).await?;
    }
    for id in [&kept, &changed, &deleted] {
        wait_state(env, &ns, id, RuntimeState::Ready, READY_TIMEOUT).await?;
    }

    // Cut off, the controller misses a create, a spec change and a deletion of a Runtime and
    // the deletion of a kubeconfig Secret; then etcd's history is compacted and the
    // apiserver's watch cache starts anew (a restart), so the resourceVersions the
    // controller's watches resume at are gone. (The GardenerClusters' relist reconciles them
    // all, which writes the Secret again too; that the Secrets' relist alone tells of it is
    // `watch::dependents`' unit test.)
    let kubeconfig = names::kubeconfig_secret_name(&kept);
    eventually("the kubeconfig Secret written", READY_TIMEOUT, || async {
        Ok(secrets.get_opt(&kubeconfig).await?.is_some())
    })
    .await?;
    proxy.partition();
    secrets
        .delete(&kubeconfig, &DeleteParams::default())
        .await?;
    let added = format!("added-{suffix}");
    create(env, &sample_runtime(&ns, &added)?).await?;
    runtimes
        .patch(
            &changed,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"security": {"administrators": ["compacted@myorg.com"]}}})),
        )
        .await?;
    runtimes.delete(&deleted, &DeleteParams::default()).await?;
    let revision = env.compact_etcd().await?;
    let gone = env.restart_kcp_apiserver().await?;
    let healed = SystemTime::now();
    proxy.heal();
    let back = Instant::now();

    // The caches relisted (a list, not only a resumed watch), and nothing was lost.
    wait_state(env, &ns, &added, RuntimeState::Ready, READY_TIMEOUT).await?;
    // The spec change reached the Shoot (every Runtime of this environment shares one shoot
    // cluster, where each removes the administrators it does not list: the bindings prove
    // nothing here).
    let generation = runtimes.get(&changed).await?.metadata.generation;
    let garden: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    let changed_shoot = shoot_name(&changed);
    eventually(
        "the spec change reached the Shoot",
        READY_TIMEOUT,
        || async {
            let applied = garden
                .get(&changed_shoot)
                .await?
                .annotations()
                .get(names::SHOOT_ANNOTATION_RUNTIME_GENERATION)
                .and_then(|g| g.parse::<i64>().ok());
            Ok(applied.is_some() && applied == generation)
        },
    )
    .await?;
    eventually("the deleted Runtime is gone", READY_TIMEOUT, || async {
        Ok(runtimes.get_opt(&deleted).await?.is_none())
    })
    .await?;
    eventually(
        "the deleted kubeconfig Secret written again",
        READY_TIMEOUT,
        || async {
            Ok(secrets.get_opt(&kubeconfig).await?.is_some_and(|s| {
                s.data
                    .is_some_and(|d| d.contains_key(names::KUBECONFIG_SECRET_KEY))
            }))
        },
    )
    .await?;
    ensure!(
        shoots_of(env, &deleted).await?.is_empty(),
        "Shoot of {deleted} left"
    );
    for id in [&kept, &changed, &added] {
        wait_state(env, &ns, id, RuntimeState::Ready, READY_TIMEOUT).await?;
        let shoots = shoots_of(env, id).await?;
        ensure!(shoots.len() == 1, "Runtime {id} has Shoots {shoots:?}");
    }
    // A list, not a resumed watch.
    let is_list = |f: &Forwarded| f.at >= healed && f.method == "GET" && !f.is_watch();
    let relists: Vec<String> = proxy
        .forwarded()
        .iter()
        .filter(|f| is_list(f))
        .filter(|f| f.path.ends_with("/runtimes") || f.path.ends_with("/gardenerclusters"))
        .map(|f| format!("{}?{}", f.path, f.query))
        .collect();
    let first_relist = proxy
        .forwarded()
        .iter()
        .find(|f| is_list(f) && f.path.ends_with("/runtimes"))
        .and_then(|f| f.at.duration_since(healed).ok());
    ensure!(
        relists.iter().any(|r| r.contains("/runtimes?")),
        "the Runtime cache did not relist after the compaction: {relists:?}"
    );
    // Each watch retries after its own backoff (up to 30 s), so some may relist later than
    // others.
    for watch in ["runtimes", "gardener_cluster", "gardener_cluster_secrets"] {
        eventually(
            &format!("watch {watch} counted its first list and a relist"),
            Duration::from_secs(60),
            || async {
                Ok(metric_sum(
                    &metrics_text(metrics).await?,
                    "infrastructure_manager_im_watch_lists_total",
                    &[&format!("watch=\"{watch}\"")],
                ) >= 2.0)
            },
        )
        .await?;
    }
    eprintln!(
        "etcd compacted to revision {revision} while the controller was cut off (apiserver restart {gone:?}): relists {relists:?}, the Runtimes' {first_relist:?} after the controller could reach the KCP again; all carried out after {:?}; test took {:?}",
        back.elapsed(),
        started.elapsed()
    );
    ctl.kill();
    Ok(())
}

fn openidconnects(client: kube::Client) -> Api<kube::api::DynamicObject> {
    use kube::api::{ApiResource, GroupVersionKind};
    Api::all_with(
        client,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("authentication.gardener.cloud", "v1alpha1", "OpenIDConnect"),
            "openidconnects",
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runtime_cluster_unreachable_while_its_configuration_changes_recovers() -> Result<()> {
    use kim_shared::api::runtime_access::RuntimeAccess;
    use serde_json::json;

    let started = Instant::now();
    // An environment of its own: its shoot cluster, the runtime cluster of every Runtime in
    // it, goes away.
    let env = &TestEnv::start(TestEnvOptions::default()).await?;
    let ns = env.namespace("ctl-unreach").await?;
    let id = format!("unreach-{}", &ns[ns.len().saturating_sub(5)..]);
    let ctl = KillableController::start(env, &ns, &["--access-shoot-request-timeout=2s"]).await?;
    create(env, &sample_runtime(&ns, &id)?).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, READY_TIMEOUT).await?;
    let apps = env.shoot_namespace("unreach").await?;
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    let accesses: Api<RuntimeAccess> = Api::namespaced(env.kcp_client().await?, &ns);

    // An administrator no other test names: the shoot cluster is shared (see `AdminBindings`).
    let admin = format!("{id}-unreachable@myorg.com");
    let bindings = AdminBindings::start(env).await?;
    // The runtime cluster goes away; meanwhile its administrators and OIDC change and a
    // RuntimeAccess is requested.
    env.stop_apiserver("shoot-apiserver")?;
    let down = Instant::now();
    let mut oidc = runtimes
        .get(&id)
        .await?
        .spec
        .shoot
        .kubernetes
        .and_then(|k| k.kube_api_server)
        .and_then(|a| a.additional_oidc_config)
        .context("the sample has an additionalOidcConfig")?;
    let entry = oidc.first_mut().context("an OIDC entry")?;
    entry.oidc.client_id = Some("unreachable-client".into());
    runtimes
        .patch(
            &id,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "security": {"administrators": [admin]},
                "shoot": {"kubernetes": {"kubeAPIServer": {"additionalOidcConfig": oidc}}},
            }})),
        )
        .await?;
    let access: RuntimeAccess = serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "RuntimeAccess",
        "metadata": {"name": "reader", "namespace": ns},
        "spec": {
            "runtimeId": id,
            "serviceAccount": {"name": "reader", "namespace": apps},
            "role": {"namespace": apps, "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
            "tokenExpirationSeconds": 600,
        },
    }))?;
    accesses.create(&PostParams::default(), &access).await?;

    // While it is away: the Runtime waits (Pending, never Failed), the RuntimeAccess is not
    // Ready.
    eventually(
        "the Runtime Pending while its cluster is away",
        Duration::from_secs(60),
        || async {
            let state = runtimes.get(&id).await?.status.map(|s| s.state);
            ensure!(
                state != Some(RuntimeState::Failed),
                "Failed: a transient error"
            );
            Ok(state == Some(RuntimeState::Pending))
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let rt = runtimes.get(&id).await?;
    ensure!(
        rt.status.as_ref().map(|s| s.state) == Some(RuntimeState::Pending),
        "{id} not Pending while its cluster is away: {:?}",
        rt.status
    );
    let access_state = accesses.get("reader").await?.status.and_then(|s| s.state);
    ensure!(
        access_state.as_deref() != Some("Ready"),
        "RuntimeAccess Ready while the cluster is away"
    );
    let away = down.elapsed();

    // It is back: everything applied without a hand.
    env.start_apiserver("shoot-apiserver").await?;
    let back = Instant::now();
    wait_state(env, &ns, &id, RuntimeState::Ready, 2 * READY_TIMEOUT).await?;
    bindings.wait_bound(&admin, READY_TIMEOUT).await?;
    let oidcs = openidconnects(env.shoot_client().await?);
    eventually("the OIDC change applied", READY_TIMEOUT, || async {
        Ok(oidcs
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .any(|o| o.data["spec"]["clientID"] == "unreachable-client"))
    })
    .await?;
    eventually("the RuntimeAccess Ready", READY_TIMEOUT, || async {
        Ok(accesses
            .get("reader")
            .await?
            .status
            .and_then(|s| s.state)
            .as_deref()
            == Some("Ready"))
    })
    .await?;
    eprintln!(
        "runtime cluster away {away:?}: administrators, OIDC and a RuntimeAccess applied {:?} after it came back; test took {:?}",
        back.elapsed(),
        started.elapsed()
    );
    ctl.kill();
    Ok(())
}

/// Stored objects that do not decode (a condition time with ten digits after the second,
/// which the apiserver stores and Go reads, but our types refuse).
///
/// A Runtime's status: only that Runtime waits. Its reconcile fails naming the field
/// (`reconciles_total{result="unreadable"}`, the alert's metric, and a Warning Event), a
/// controller that starts then still lists every Runtime and provisions a new one, and once
/// the status is fixed the Runtime is reconciled again.
///
/// A GardenerCluster's status: only its own reconcile fails (`result="unreadable"` of the
/// `gardener_cluster` reconciler, a Warning Event), no watch fails, its Runtime stays Ready (the
/// Runtime reconciler reads only its state), a controller that starts then provisions a new
/// Runtime with its kubeconfig, and once fixed the GardenerCluster is reconciled again (a
/// forced rotation is served). Deleted while it does not read, it is still cleaned up: its
/// finalizer goes with its Secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stored_object_that_does_not_decode_is_reported_and_confined() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-decode").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let suffix = &ns[ns.len().saturating_sub(6)..];
    let [broken, second, third] = ["dec", "dec2", "dec3"].map(|p| format!("{p}-{suffix}"));
    create(env, &sample_runtime(&ns, &broken)?).await?;
    let ready = wait_state(env, &ns, &broken, RuntimeState::Ready, READY_TIMEOUT).await?;
    let count = |text: &str, metric: &str, label: &str| metric_sum(text, metric, &[label]);
    let unreadable = |text: &str| {
        count(
            text,
            "infrastructure_manager_im_reconciles_total",
            "result=\"unreadable\"",
        )
    };
    let decode_errors = |text: &str, watch: &str| {
        count(
            text,
            "infrastructure_manager_im_watch_decode_errors_total",
            &format!("watch=\"{watch}\""),
        )
    };
    let text = ctl.metrics_text().await?;
    ensure!(
        unreadable(&text) == 0.0 && decode_errors(&text, "runtimes") == 0.0,
        "nothing unreadable before"
    );

    // Untyped: the answers to the patches do not decode either.
    let kcp = env.kcp_client().await?;
    let runtimes: Api<kube::api::DynamicObject> =
        Api::namespaced_with(kcp.clone(), &ns, &kim_tests::webhook::runtime_resource());
    let clusters: Api<kube::api::DynamicObject> = Api::namespaced_with(
        kcp.clone(),
        &ns,
        &kube::api::ApiResource::erase::<kim_shared::api::GardenerCluster>(&()),
    );
    let hand_edited = |conditions: &serde_json::Value| -> Result<serde_json::Value> {
        let mut bad = conditions.clone();
        bad.as_array_mut()
            .context("conditions")?
            .push(serde_json::json!({
                "type": "EditedByHand", "status": "True", "reason": "Edited", "message": "",
                "lastTransitionTime": "2024-01-01T00:00:00.1234567891Z",
            }));
        Ok(bad)
    };
    let set_conditions = |api: &Api<kube::api::DynamicObject>, conditions: serde_json::Value| {
        let api = api.clone();
        let name = broken.clone();
        async move {
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"status": {"conditions": conditions}})),
            )
            .await
        }
    };

    // A Runtime's status.
    let good = serde_json::to_value(
        ready
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default(),
    )?;
    set_conditions(&runtimes, hand_edited(&good)?)
        .await
        .context("the apiserver stores the time")?;
    eventually(
        "the Runtime's failed reconcile counted",
        READY_TIMEOUT,
        || async { Ok(unreadable(&ctl.metrics_text().await?) >= 1.0) },
    )
    .await?;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(kcp.clone(), &ns);
    let notes: Vec<String> = events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(broken.as_str()))
        .filter(|e| e.reason.as_deref() == Some("Unreadable"))
        .filter_map(|e| e.note)
        .collect();
    ensure!(
        notes.len() == 1
            && notes[0].contains("status.conditions[")
            && notes[0].contains("lastTransitionTime"),
        "one Warning Event naming the field: {notes:?}"
    );
    // A controller that starts now lists the Runtimes and provisions a new one.
    ctl.kill();
    let restarted = jiff::Timestamp::now();
    let ctl = start_controller(env, &ns, &[]).await?;
    create(env, &sample_runtime(&ns, &second)?).await?;
    wait_state(env, &ns, &second, RuntimeState::Ready, 2 * READY_TIMEOUT).await?;
    // Its registry-cache sweep (the cache is off by default) read the Runtimes once, as its
    // Runtime watch did: the unreadable one does not make it list them all every 15 s.
    let since_restart = jiff::Timestamp::now().duration_since(restarted);
    tokio::time::sleep(Duration::from_secs(35).saturating_sub(since_restart.unsigned_abs())).await;
    let lists: Vec<String> = env
        .audit_events_mentioning(&ns)?
        .into_iter()
        .filter(|e| {
            e["verb"] == "list"
                && e["objectRef"]["resource"] == "runtimes"
                && e["objectRef"]["namespace"] == ns.as_str()
                && e["stage"] == "ResponseComplete"
                && e["requestReceivedTimestamp"]
                    .as_str()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .is_some_and(|t| t > restarted)
        })
        .map(|e| e["requestURI"].as_str().unwrap_or_default().to_owned())
        .collect();
    ensure!(
        lists.len() <= 2,
        "Runtimes listed {} times in 35 s after the start: {lists:?}",
        lists.len()
    );
    let text = ctl.metrics_text().await?;
    ensure!(
        unreadable(&text) >= 1.0 && decode_errors(&text, "runtimes") == 0.0,
        "the unreadable Runtime fails alone: {}",
        unreadable(&text)
    );
    // Fixed: reconciled again, as a change of its spec shows.
    set_conditions(&runtimes, good).await?;
    let changed = runtimes
        .patch(
            &broken,
            &PatchParams::default(),
            &Patch::<()>::Json(serde_json::from_value(serde_json::json!([{
                "op": "replace", "path": "/spec/shoot/provider/workers/0/maximum", "value": 21,
            }]))?),
        )
        .await?;
    let generation = changed.metadata.generation.context("generation")?;
    eventually("the fixed Runtime reconciled", READY_TIMEOUT, || async {
        let rt = Api::<Runtime>::namespaced(kcp.clone(), &ns)
            .get(&broken)
            .await?;
        Ok(rt.status.and_then(|s| s.observed_generation) == Some(generation))
    })
    .await?;

    // A GardenerCluster's status: only that GardenerCluster waits.
    let unreadable_of = |text: &str, controller: &str| {
        count(
            text,
            "infrastructure_manager_im_reconciles_total",
            &format!("controller=\"{controller}\",result=\"unreadable\""),
        )
    };
    let gc = clusters.get(&broken).await?;
    let good = gc.data["status"]["conditions"].clone();
    ensure!(
        good.is_array(),
        "the GardenerCluster has conditions: {gc:?}"
    );
    set_conditions(&clusters, hand_edited(&good)?)
        .await
        .context("the apiserver stores the time")?;
    eventually(
        "the GardenerCluster's failed reconcile counted",
        READY_TIMEOUT,
        || async { Ok(unreadable_of(&ctl.metrics_text().await?, "gardener_cluster") >= 1.0) },
    )
    .await?;
    let gc_notes: Vec<String> = events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("GardenerCluster")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(broken.as_str())
        })
        .filter(|e| e.reason.as_deref() == Some("Unreadable"))
        .filter_map(|e| e.note)
        .collect();
    ensure!(
        gc_notes.len() == 1 && gc_notes[0].contains("status.conditions["),
        "one Warning Event on the GardenerCluster naming the field: {gc_notes:?}"
    );
    // A controller that starts now lists everything and provisions a new Runtime, kubeconfig
    // included; the Runtime of the unreadable GardenerCluster stays Ready.
    ctl.kill();
    let ctl = start_controller(env, &ns, &[]).await?;
    create(env, &sample_runtime(&ns, &third)?).await?;
    wait_state(env, &ns, &third, RuntimeState::Ready, 2 * READY_TIMEOUT).await?;
    let text = ctl.metrics_text().await?;
    ensure!(
        unreadable_of(&text, "gardener_cluster") >= 1.0
            && ["gardener_cluster", "runtimes"]
                .iter()
                .all(|w| decode_errors(&text, w) == 0.0),
        "the unreadable GardenerCluster fails alone: {}",
        unreadable_of(&text, "gardener_cluster")
    );
    let typed = Api::<Runtime>::namespaced(kcp.clone(), &ns);
    ensure!(
        typed.get(&broken).await?.status.map(|s| s.state) == Some(RuntimeState::Ready),
        "the Runtime of the unreadable GardenerCluster stays Ready"
    );
    // Fixed: reconciled again, as a forced rotation shows (served, the annotation goes).
    set_conditions(&clusters, good.clone()).await?;
    clusters
        .patch(
            &broken,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                names::ANNOTATION_FORCE_KUBECONFIG_ROTATION: "true"}}})),
        )
        .await?;
    eventually("the forced rotation served", READY_TIMEOUT, || async {
        let gc = clusters.get(&broken).await?;
        Ok(!gc
            .annotations()
            .contains_key(names::ANNOTATION_FORCE_KUBECONFIG_ROTATION))
    })
    .await?;

    // Deleted while its status does not read: the Secret and the finalizer still go.
    set_conditions(&clusters, hand_edited(&good)?).await?;
    let before = clusters.get(&broken).await?;
    let secret_name = before.data["spec"]["kubeconfig"]["secret"]["name"]
        .as_str()
        .context("secret name")?
        .to_owned();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(kcp.clone(), &ns);
    let old_secret = secrets.get(&secret_name).await?.metadata.uid;
    clusters.delete(&broken, &DeleteParams::default()).await?;
    eventually(
        "the unreadable GardenerCluster and its Secret gone",
        READY_TIMEOUT,
        || async {
            let gc_gone = clusters
                .get_opt(&broken)
                .await?
                .and_then(|gc| gc.metadata.uid)
                != before.metadata.uid;
            let secret_gone = secrets
                .get_opt(&secret_name)
                .await?
                .and_then(|s| s.metadata.uid)
                != old_secret;
            Ok(gc_gone && secret_gone)
        },
    )
    .await?;

    // A Runtime deleted while its status does not read is deleted all the same: its Shoot
    // goes, then its finalizer.
    let rt_now = runtimes.get(&broken).await?;
    set_conditions(
        &runtimes,
        hand_edited(&rt_now.data["status"]["conditions"])?,
    )
    .await?;
    let shoot_name = rt_now.data["spec"]["shoot"]["name"]
        .as_str()
        .context("shoot name")?
        .to_owned();
    runtimes.delete(&broken, &DeleteParams::default()).await?;
    eventually(
        "the Runtime whose status does not read deleted",
        2 * READY_TIMEOUT,
        || async { Ok(runtimes.get_opt(&broken).await?.is_none()) },
    )
    .await?;
    let shoots: Api<kim_shared::gardener::Shoot> =
        Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    ensure!(
        shoots.get_opt(&shoot_name).await?.is_none(),
        "the Shoot of the deleted Runtime is gone"
    );
    ctl.kill();
    Ok(())
}
