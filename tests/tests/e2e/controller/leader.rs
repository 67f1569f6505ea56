//! Leader election end to end: two replicas with `--leader-elect` against one KCP. Exactly one
//! holds the Lease and reconciles; the other writes nothing (the KCP audit log, which also
//! records the Gardener API aggregated into it, shows no write by its user). Killing the
//! leader (no graceful release) hands the Lease to the other within the lease duration, and a
//! Runtime created after the failover becomes Ready through it; a graceful stop hands over too.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kim_shared::api::RuntimeState;
use kim_tests::controller::*;
use kim_tests::faultproxy::{ApiFault, FaultProxy, Rule};
use kim_tests::testenv::TestEnv;
use kube::Api;
use serde_json::Value;

const LEASE: &str = "f1c68560.kyma-project.io";
const LEASE_SECONDS: u64 = 6;
const READY_TIMEOUT: Duration = Duration::from_secs(120);

async fn holder(env: &TestEnv, ns: &str) -> Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(env.kcp_client().await?, ns);
    Ok(leases
        .get_opt(LEASE)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

/// Waits until the Lease names one of `candidates`; returns it and how long that took.
async fn wait_holder(
    env: &TestEnv,
    ns: &str,
    candidates: &[&str],
    timeout: Duration,
) -> Result<(String, Duration)> {
    let started = Instant::now();
    loop {
        let h = holder(env, ns).await?;
        if let Some(h) = h.as_deref().filter(|h| candidates.contains(h)) {
            return Ok((h.to_owned(), started.elapsed()));
        }
        if started.elapsed() > timeout {
            bail!("Lease holder {h:?}, wanted one of {candidates:?} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// KCP audit events of `user` that change something (verbs other than get, list, watch).
fn writes_by(env: &TestEnv, user: &str) -> Result<Vec<Value>> {
    Ok(env
        .audit_events_of(user)?
        .into_iter()
        .filter(|e| !matches!(e["verb"].as_str(), Some("get" | "list" | "watch")))
        .collect())
}

/// Whether `user` wrote the status of Runtime `name` (audit log).
fn wrote_status(env: &TestEnv, user: &str, name: &str) -> Result<bool> {
    Ok(writes_by(env, user)?.iter().any(|e| {
        e["objectRef"]["resource"] == "runtimes"
            && e["objectRef"]["subresource"] == "status"
            && e["objectRef"]["name"] == name
    }))
}

fn describe(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            format!(
                "{} {}/{} {}",
                e["verb"].as_str().unwrap_or_default(),
                e["objectRef"]["resource"].as_str().unwrap_or_default(),
                e["objectRef"]["subresource"].as_str().unwrap_or_default(),
                e["objectRef"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// A replica's `leader_election_master_status` (controller-runtime's series, which dashboards of
/// upstream's replicas read); `None` without one.
async fn leads(addr: std::net::SocketAddr) -> Result<Option<f64>> {
    let text = metrics_text(addr).await?;
    Ok(text
        .lines()
        .find(|l| l.starts_with("leader_election_master_status{name=\""))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok()))
}

async fn reconciles(addr: std::net::SocketAddr) -> Result<f64> {
    Ok(metric_sum(
        &metrics_text(addr).await?,
        "infrastructure_manager_im_reconciles_total",
        &[],
    ))
}

/// Gardener requests other than reads (the health check only reads).
async fn gardener_writes(addr: std::net::SocketAddr) -> Result<f64> {
    let text = metrics_text(addr).await?;
    Ok(["POST", "PUT", "PATCH", "DELETE"]
        .iter()
        .map(|m| {
            metric_sum(
                &text,
                "infrastructure_manager_im_gardener_requests_total",
                &[&format!("method=\"{m}\"")],
            )
        })
        .sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_replica_leads_and_the_other_takes_over_when_it_dies() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-leader").await?;
    let suffix = ns[ns.len().saturating_sub(5)..].to_owned();
    let lease_flag = format!("--leader-elect-lease-duration={LEASE_SECONDS}s");
    let flags = ["--leader-elect", lease_flag.as_str()];
    let users: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|r| format!("kim-replica-{r}-{suffix}"))
        .collect();
    let wiring = |i: usize| Wiring {
        user: Some(users[i].clone()),
        ..Default::default()
    };

    // Two replicas start at once; exactly one gets the Lease.
    let (wa, wb) = (wiring(0), wiring(1));
    let (a, b) = tokio::join!(
        KillableController::start_wired(env, &ns, &flags, &wa),
        KillableController::start_wired(env, &ns, &flags, &wb),
    );
    let mut replicas = vec![a?, b?];
    let ids: Vec<String> = replicas.iter().map(|r| r.1.clone()).collect();
    assert_ne!(ids[0], ids[1], "replicas need distinct Lease identities");
    let (leader_id, _) = wait_holder(
        env,
        &ns,
        &[&ids[0], &ids[1]],
        Duration::from_secs(2 * LEASE_SECONDS + 10),
    )
    .await?;
    let leader = ids.iter().position(|i| *i == leader_id).context("leader")?;
    let follower = 1 - leader;

    // The leader reconciles: a Runtime becomes Ready.
    let first = format!("lead1-{suffix}");
    create(env, &sample_runtime(&ns, &first)?).await?;
    wait_state(env, &ns, &first, RuntimeState::Ready, READY_TIMEOUT).await?;
    // Several renewals later the Lease has not moved.
    tokio::time::sleep(Duration::from_secs(2 * LEASE_SECONDS)).await;
    assert_eq!(
        holder(env, &ns).await?.as_deref(),
        Some(leader_id.as_str()),
        "the Lease changed hands without a failure"
    );
    assert!(
        wrote_status(env, &users[leader], &first)?,
        "the leader wrote the Runtime status"
    );
    // The follower reconciled nothing and wrote nothing, to the KCP or to Gardener.
    let follower_writes = writes_by(env, &users[follower])?;
    assert!(
        follower_writes.is_empty(),
        "the follower wrote: {:?}",
        describe(&follower_writes)
    );
    assert_eq!(reconciles(replicas[follower].2).await?, 0.0);
    assert_eq!(gardener_writes(replicas[follower].2).await?, 0.0);
    assert!(reconciles(replicas[leader].2).await? > 0.0);
    assert!(gardener_writes(replicas[leader].2).await? > 0.0);
    assert_eq!(
        leads(replicas[leader].2).await?,
        Some(1.0),
        "the leader's series"
    );
    assert_eq!(
        leads(replicas[follower].2).await?,
        Some(0.0),
        "the follower's series"
    );

    // Kill the leader: no release, the Lease must expire first.
    let dead = replicas.remove(leader);
    let killed = Instant::now();
    dead.0.kill();
    let survivor = replicas.remove(0);
    let (new_id, _) = wait_holder(
        env,
        &ns,
        &[&survivor.1],
        Duration::from_secs(3 * LEASE_SECONDS),
    )
    .await?;
    let took = killed.elapsed();
    eprintln!("takeover after kill: {took:?} (lease {LEASE_SECONDS}s)");
    // The follower takes the Lease once it has seen it unchanged for LEASE_SECONDS (since the
    // last renewal before the kill), at its next look (every 2/15 of that).
    assert!(
        took <= Duration::from_secs(LEASE_SECONDS + 3),
        "takeover took {took:?}"
    );
    assert_eq!(new_id, ids[follower]);

    // A Runtime created after the failover becomes Ready through the new leader.
    let second = format!("lead2-{suffix}");
    create(env, &sample_runtime(&ns, &second)?).await?;
    wait_state(env, &ns, &second, RuntimeState::Ready, READY_TIMEOUT).await?;
    assert!(
        wrote_status(env, &users[follower], &second)?,
        "the new leader wrote the new Runtime's status"
    );
    assert!(reconciles(survivor.2).await? > 0.0);
    assert_eq!(
        leads(survivor.2).await?,
        Some(1.0),
        "the new leader's series"
    );
    wait_state(env, &ns, &first, RuntimeState::Ready, READY_TIMEOUT).await?;

    // A graceful stop releases the Lease: a third replica, waiting, takes over.
    let third = KillableController::start_wired(env, &ns, &flags, &wiring(2)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        holder(env, &ns).await?.as_deref(),
        Some(survivor.1.as_str()),
        "a new replica must not take the Lease from a live leader"
    );
    let third_writes = writes_by(env, &users[2])?;
    assert!(
        third_writes.is_empty(),
        "the waiting replica wrote: {:?}",
        describe(&third_writes)
    );
    // The stopped leader emptied the Lease's holder before its process ended: the waiting
    // replica takes it at its next look. Without the release it would wait until it had seen
    // the Lease unchanged for LEASE_SECONDS.
    survivor.0.stop().await;
    let stop = Instant::now();
    wait_holder(
        env,
        &ns,
        &[&third.1],
        Duration::from_secs(LEASE_SECONDS / 2),
    )
    .await
    .context("the stopped leader did not release the Lease")?;
    eprintln!("takeover after a graceful stop: {:?}", stop.elapsed());
    let last = format!("lead3-{suffix}");
    create(env, &sample_runtime(&ns, &last)?).await?;
    wait_state(env, &ns, &last, RuntimeState::Ready, READY_TIMEOUT).await?;
    assert!(wrote_status(env, &users[2], &last)?);
    third.0.kill();
    Ok(())
}

/// Renewals that fail now and then (an API server restart, a 5xx) are retried at once, however
/// many failed before in the same term: the leader keeps the Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renewal_failures_spread_over_a_term_do_not_end_it() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-renew").await?;
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let lease_flag = format!("--leader-elect-lease-duration={LEASE_SECONDS}s");
    let wiring = Wiring {
        kcp: Some(proxy.access_via(env.kcp())),
        ..Default::default()
    };
    let (ctl, id, _) =
        KillableController::start_wired(env, &ns, &["--leader-elect", &lease_flag], &wiring)
            .await?;
    wait_holder(
        env,
        &ns,
        &[&id],
        Duration::from_secs(2 * LEASE_SECONDS + 10),
    )
    .await?;
    let refused = ApiFault::ServerError(500);
    for round in 1..=4 {
        proxy.inject(Rule {
            method: Some("PUT".into()),
            path_contains: format!("/leases/{LEASE}"),
            fault: refused.clone(),
            times: Some(1),
        });
        eventually(
            "a renewal is refused",
            Duration::from_secs(2 * LEASE_SECONDS),
            || async { Ok(proxy.served_count("PUT", "/leases/", &refused) >= round) },
        )
        .await?;
        // A lease duration later: several renewals after the refused one.
        tokio::time::sleep(Duration::from_secs(LEASE_SECONDS)).await;
        ensure!(
            !ctl.finished(),
            "the leader stepped down after refused renewal {round}"
        );
    }
    ensure!(holder(env, &ns).await?.as_deref() == Some(id.as_str()));
    ctl.kill();
    Ok(())
}

/// Candidates that find the Lease of a dead leader expired at the same moment elect one: each
/// write of the Lease is conditional on the resourceVersion its writer read, so the others get
/// a conflict, see the winner's hold and follow. The winner's release hands the Lease to one of
/// them at its next look.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn candidates_finding_the_lease_expired_together_elect_one() -> Result<()> {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kim_controller::leader::{LeaderElection, Leadership};
    use kube::api::{ObjectMeta, PostParams};

    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-elect").await?;
    let client = env.kcp_client().await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let duration = Duration::from_secs(4);
    leases
        .create(
            &PostParams::default(),
            &Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE.into()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some("dead-leader".into()),
                    lease_duration_seconds: Some(4),
                    renew_time: Some(MicroTime(jiff::Timestamp::UNIX_EPOCH)),
                    lease_transitions: Some(3),
                    ..Default::default()
                }),
            },
        )
        .await?;
    let election = LeaderElection {
        lease: LEASE.into(),
        namespace: ns.clone(),
        duration,
    };
    let candidates: Vec<_> = (0..6)
        .map(|i| {
            let (client, election) = (client.clone(), election.clone());
            let identity = format!("candidate-{i}");
            tokio::spawn(async move { Leadership::acquire(client, &election, &identity).await })
        })
        .collect();
    eventually("a candidate leads", 4 * duration, || async {
        Ok(candidates.iter().any(|c| c.is_finished()))
    })
    .await?;
    // Twice the duration later, while the winner renews, the others still wait.
    tokio::time::sleep(2 * duration).await;
    let (done, waiting): (Vec<_>, Vec<_>) = candidates.into_iter().partition(|c| c.is_finished());
    ensure!(
        done.len() == 1,
        "{} candidates lead at once; Lease: {:?}",
        done.len(),
        leases.get(LEASE).await?.spec
    );
    let winner = done
        .into_iter()
        .next()
        .context("winner")?
        .await?
        .context("the winner's election")?;
    let spec = leases.get(LEASE).await?.spec.context("Lease spec")?;
    let winner_id = spec.holder_identity.clone().context("holder")?;
    ensure!(winner_id.starts_with("candidate-"), "Lease: {spec:?}");
    ensure!(
        spec.lease_transitions == Some(4),
        "one take counts one transition: {spec:?}"
    );

    // The winner steps down: one of the others leads within one look, none before.
    winner.release(Duration::from_secs(5)).await;
    eventually("another candidate leads", duration, || async {
        Ok(waiting.iter().any(|c| c.is_finished()))
    })
    .await?;
    let next = holder(env, &ns).await?;
    ensure!(
        next.as_deref()
            .is_some_and(|h| h != winner_id && h.starts_with("candidate-")),
        "Lease holder after the release: {next:?}"
    );
    for candidate in waiting {
        if candidate.is_finished() {
            candidate
                .await?
                .context("the next leader's election")?
                .abandon();
        } else {
            candidate.abort();
        }
    }
    Ok(())
}
