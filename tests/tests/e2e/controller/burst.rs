//! A burst of Runtimes created at once against the real gardener-apiserver, with the Gardener
//! client at 500 QPS and the default request timeout: gardener-apiserver's admission (its
//! `ResourceReferenceManager` resolves each Shoot's references through a client limited to
//! client-go's default 5 QPS) refuses or delays creates beyond its pace. Every Runtime must
//! become Ready, none may ever be `Failed` (checked on every status change a watch delivers),
//! and no Shoot may be created twice (one uid per Shoot name). Prints the time to all Ready
//! against N divided by the best create rate gardener-apiserver admitted in the same run (the
//! ratio; not asserted), the create limit and the "try later" answers, and where the time
//! went: when the last Runtime passed each stage of the flow (Shoot created, bound to a Seed,
//! `Succeeded`, GardenerCluster written, GardenerCluster Ready, Runtime Ready) and the spread of
//! the time each Runtime spent in each stage.
//!
//! `KIM_BURST_RUNTIMES` sets N (default 60, so `make test` stays short on a small machine; the
//! figures in docs/benchmarks.md are for 300). Its own environment: the burst must not share
//! gardener-apiserver's admission with the other tests.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use kim_shared::api::{GardenerCluster, Runtime, RuntimeState};
use kim_shared::gardener::Shoot;
use kim_tests::controller::*;
use kim_tests::testenv::{TestEnv, TestEnvOptions};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

#[derive(Default)]
struct Seen {
    /// Runtime -> the first `Failed` status seen, as JSON.
    failed: BTreeMap<String, String>,
    /// Runtimes seen Ready (state and observed generation).
    ready: HashMap<String, Instant>,
    /// Shoot name -> uids seen.
    shoot_uids: HashMap<String, Vec<String>>,
    /// Shoot name -> when the watch first saw it.
    shoot_seen: HashMap<String, Instant>,
    /// Runtime -> when each stage of the flow was first seen.
    stages: HashMap<String, [Option<Instant>; STAGES.len()]>,
}

/// The stages of one Runtime's flow, in order, as the watches see them.
const STAGES: [&str; 6] = [
    "Shoot created",
    "Shoot bound to a Seed",
    "Shoot Succeeded",
    "GardenerCluster written",
    "GardenerCluster Ready",
    "Runtime Ready",
];

impl Seen {
    fn stage(&mut self, runtime: &str, stage: usize) {
        self.stages.entry(runtime.to_owned()).or_default()[stage].get_or_insert_with(Instant::now);
    }
}

/// Where the time went: per stage, when the last Runtime reached it (from `t0`) and the
/// median, 90th percentile and maximum of the time Runtimes took from the previous stage.
fn stage_breakdown(seen: &Seen, t0: Instant) -> String {
    let mut out = String::from(
        "stage | last Runtime reached it at | from the previous stage: median / p90 / max\n",
    );
    for (i, name) in STAGES.iter().enumerate() {
        let reached: Vec<Instant> = seen.stages.values().filter_map(|s| s[i]).collect();
        let last = reached.iter().max().map(|t| format!("{:.1?}", *t - t0));
        let mut spans: Vec<Duration> = seen
            .stages
            .values()
            .filter_map(|s| {
                let from = if i == 0 { Some(t0) } else { s[i - 1] };
                Some(s[i]?.saturating_duration_since(from?))
            })
            .collect();
        spans.sort();
        let q = |f: f64| {
            spans
                .get(((spans.len() as f64 - 1.0) * f).round() as usize)
                .map(|d| format!("{d:.1?}"))
                .unwrap_or_else(|| "-".into())
        };
        out.push_str(&format!(
            "{name} ({} Runtimes) | {} | {} / {} / {}\n",
            reached.len(),
            last.unwrap_or_else(|| "-".into()),
            q(0.5),
            q(0.9),
            q(1.0),
        ));
    }
    out
}

fn burst_size() -> Result<usize> {
    match std::env::var("KIM_BURST_RUNTIMES") {
        Ok(v) => v
            .parse()
            .map_err(|_| anyhow!("KIM_BURST_RUNTIMES={v:?} is not a number")),
        Err(_) => Ok(60),
    }
}

/// The most Shoots admitted in any `window` (sliding over the admission times), per second.
fn best_rate(mut admitted: Vec<Instant>, window: Duration) -> f64 {
    admitted.sort();
    let mut best = 0usize;
    let mut start = 0;
    for end in 0..admitted.len() {
        while admitted[end] - admitted[start] > window {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best as f64 / window.as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_runtimes_becomes_ready_without_failing() -> Result<()> {
    let n = burst_size()?;
    ensure!(n > 0, "KIM_BURST_RUNTIMES must be at least 1");
    let env = &TestEnv::start(TestEnvOptions::default())
        .await
        .map_err(|e| anyhow!("the burst test's own environment: {e}"))?;
    let kcp = env.kcp_client().await?;
    let garden = env.garden_client().await?;
    let ns = env.namespace("ctl-burst").await?;
    let ns = ns.as_str();

    let (mut args, dir) = controller_args(env, ns, &[]).await?;
    let kim_controller::cli::Invocation::Run(defaults) =
        kim_controller::cli::parse(["kim-controller"])?
    else {
        anyhow::bail!("no arguments must mean run");
    };
    args.gardener_request_timeout = defaults.gardener_request_timeout;
    args.gardener_ratelimiter_qps = 500;
    args.gardener_ratelimiter_burst = 500;
    let controller = start_with_args(args, dir).await?;

    let seen = Arc::new(Mutex::new(Seen::default()));
    let names: Vec<String> = (0..n).map(|i| format!("burst-{i:05}")).collect();
    let ours: HashMap<String, String> = names
        .iter()
        .map(|id| (shoot_name(id), id.clone()))
        .collect();

    let runtimes = watcher(
        Api::<Runtime>::namespaced(kcp.clone(), ns),
        watcher::Config::default(),
    )
    .applied_objects();
    let rt_seen = seen.clone();
    let rt_task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(runtimes);
        while let Ok(Some(rt)) = stream.try_next().await {
            let Some(status) = rt.status.as_ref() else {
                continue;
            };
            let mut s = rt_seen.lock().unwrap_or_else(|p| p.into_inner());
            match status.state {
                RuntimeState::Failed => {
                    let json = serde_json::to_string(status).unwrap_or_default();
                    s.failed.entry(rt.name_any()).or_insert(json);
                }
                RuntimeState::Ready if status.observed_generation == rt.metadata.generation => {
                    s.ready.entry(rt.name_any()).or_insert_with(Instant::now);
                    s.stage(&rt.name_any(), 5);
                }
                _ => {}
            }
        }
    });
    let shoots = watcher(
        Api::<Shoot>::namespaced(garden.clone(), kim_tests::fixtures::PROJECT_NAMESPACE),
        watcher::Config::default(),
    )
    .applied_objects();
    let shoot_seen = seen.clone();
    let shoot_task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(shoots);
        while let Ok(Some(shoot)) = stream.try_next().await {
            let name = shoot.name_any();
            let Some(runtime) = ours.get(&name) else {
                continue;
            };
            let uid = shoot.uid().unwrap_or_default();
            let mut s = shoot_seen.lock().unwrap_or_else(|p| p.into_inner());
            s.stage(runtime, 0);
            if shoot
                .spec
                .seed_name
                .as_deref()
                .is_some_and(|s| !s.is_empty())
            {
                s.stage(runtime, 1);
            }
            let op = shoot
                .status
                .as_ref()
                .and_then(|st| st.last_operation.as_ref());
            if op.is_some_and(|op| op.type_ == "Create" && op.state == "Succeeded") {
                s.stage(runtime, 2);
            }
            s.shoot_seen
                .entry(name.clone())
                .or_insert_with(Instant::now);
            let uids = s.shoot_uids.entry(name).or_default();
            if !uids.contains(&uid) {
                uids.push(uid);
            }
        }
    });
    let clusters = watcher(
        Api::<GardenerCluster>::namespaced(kcp.clone(), ns),
        watcher::Config::default(),
    )
    .applied_objects();
    let gc_seen = seen.clone();
    let gc_task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(clusters);
        while let Ok(Some(gc)) = stream.try_next().await {
            let Some(runtime) = gc.runtime_id().map(str::to_owned) else {
                continue;
            };
            let mut s = gc_seen.lock().unwrap_or_else(|p| p.into_inner());
            s.stage(&runtime, 3);
            let state = gc.status.as_ref().and_then(|st| st.state.as_deref());
            if state == Some("Ready") {
                s.stage(&runtime, 4);
            }
        }
    });

    let t0 = Instant::now();
    futures::stream::iter(names.iter().map(|id| async move {
        let rt = sample_runtime(ns, id)?;
        create(env, &rt).await.map(|_| ())
    }))
    .buffer_unordered(32)
    .try_collect::<Vec<_>>()
    .await?;
    let written = t0.elapsed();

    // Generous: the test asserts that all become Ready, not how fast.
    let deadline = Duration::from_secs(300) + Duration::from_secs(3) * n as u32;
    loop {
        let (ready, failed) = {
            let s = seen.lock().unwrap_or_else(|p| p.into_inner());
            (s.ready.len(), s.failed.len())
        };
        if ready >= n || failed > 0 || t0.elapsed() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let metrics = controller.metrics_text().await.unwrap_or_default();
    controller.stop().await;
    rt_task.abort();
    shoot_task.abort();
    gc_task.abort();

    let s = seen.lock().unwrap_or_else(|p| p.into_inner());
    let all_ready = s.ready.values().max().map(|t| *t - t0);
    let rate = best_rate(
        s.shoot_seen.values().copied().collect(),
        Duration::from_secs(10),
    );
    let busy: f64 = metric_sum(
        &metrics,
        "infrastructure_manager_im_gardener_busy_total",
        &[],
    );
    let posts = metric_sum(
        &metrics,
        "infrastructure_manager_im_gardener_requests_total",
        &["method=\"POST\""],
    );
    let gardener_all = metric_sum(
        &metrics,
        "infrastructure_manager_im_gardener_requests_total",
        &[],
    );
    let limit = metric_sum(
        &metrics,
        "infrastructure_manager_im_shoot_create_limit",
        &[],
    );
    eprintln!(
        "burst: N={n}, Runtimes written in {written:.1?}; all Ready after {all_ready:.1?}; \
         best admitted create rate {rate:.2}/s (10 s window), N/rate {:.1} s, ratio {}; \
         Gardener requests {gardener_all} ({:.2} per Runtime, POST {posts}), \"try later\" \
         answers {busy}, create limit at the end {limit}",
        n as f64 / rate.max(f64::MIN_POSITIVE),
        all_ready
            .map(|t| format!(
                "{:.2}",
                t.as_secs_f64() / (n as f64 / rate.max(f64::MIN_POSITIVE))
            ))
            .unwrap_or_else(|| "-".into()),
        gardener_all / n as f64,
    );
    eprintln!("burst: where the time went\n{}", stage_breakdown(&s, t0));
    if !s.failed.is_empty() {
        bail!(
            "{} Runtime(s) were Failed at some point, e.g. {:?}",
            s.failed.len(),
            s.failed.iter().next()
        );
    }
    let twice: Vec<_> = s
        .shoot_uids
        .iter()
        .filter(|(_, uids)| uids.len() > 1)
        .collect();
    ensure!(twice.is_empty(), "Shoots created more than once: {twice:?}");
    ensure!(
        s.ready.len() == n,
        "{} of {n} Runtimes Ready within {deadline:?}; Shoots seen: {}",
        s.ready.len(),
        s.shoot_seen.len()
    );
    ensure!(
        s.shoot_uids.len() == n,
        "{} Shoots for {n} Runtimes",
        s.shoot_uids.len()
    );
    Ok(())
}

#[test]
fn best_rate_counts_the_fullest_window() {
    let t = Instant::now();
    let at = |ms: u64| t + Duration::from_millis(ms);
    let admitted = vec![at(0), at(100), at(200), at(5_000), at(5_100)];
    assert_eq!(best_rate(admitted, Duration::from_secs(1)), 3.0);
    assert_eq!(best_rate(Vec::new(), Duration::from_secs(1)), 0.0);
}
