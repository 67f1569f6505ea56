//! `make bench-kubeconfig`: the GardenerCluster reconciler at scale against the real
//! gardener-apiserver (which signs a fresh client certificate per kubeconfig).
//!
//! Figures printed (and to be copied into docs/benchmarks.md):
//! 1. creation wave: N GardenerClusters until every Secret holds a kubeconfig;
//! 2. steady state: Gardener calls while nothing is due, during a window that includes one
//!    extra reconcile of every GardenerCluster (a label change), extrapolated per hour, next to
//!    the rotations that are due per hour with the flags used;
//! 3. rotation wave: a forced rotation of all N until every one is `KubeconfigSecretRotated`;
//! 4. baseline: writing N Secrets of the same size directly, with the same concurrency.
//!
//! Knobs (environment): `KIM_BENCH_CLUSTERS` (10000), `KIM_BENCH_SHOOTS` (10, shared by the
//! GardenerClusters), `KIM_BENCH_STEADY_SECS` (60), `KIM_BENCH_QPS` (200, Gardener client rate),
//! `KIM_BENCH_WORKERS` (25). Ignored in `make test`; run by `make bench-kubeconfig`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kim_controller::cli::run::RunArgs;
use kim_controller::runner::Process;
use kim_shared::api::GardenerCluster;
use kim_shared::gardener::Shoot;
use kim_tests::fixtures;
use kim_tests::testenv::{TestEnv, TestEnvOptions};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use serde_json::json;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn metrics(addr: std::net::SocketAddr) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await?;
    let mut out = String::new();
    stream.read_to_string(&mut out).await?;
    Ok(out)
}

/// Gardener POSTs (adminkubeconfig requests) by the controller so far, any response code.
async fn gardener_calls(addr: std::net::SocketAddr) -> Result<u64> {
    Ok(metrics(addr)
        .await?
        .lines()
        .filter(|l| l.starts_with("infrastructure_manager_im_gardener_requests_total{"))
        // The only POST of the GardenerCluster reconciler is shoots/<name>/adminkubeconfig.
        .filter(|l| l.contains("method=\"POST\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum())
}

async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let start = Instant::now();
    loop {
        if f().await? {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            bail!("{what}: not within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn rate(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with `make bench-kubeconfig`"]
async fn bench_kubeconfig() -> Result<()> {
    let n = knob("KIM_BENCH_CLUSTERS", 10_000);
    let shoots = knob("KIM_BENCH_SHOOTS", 10).max(1);
    let steady_secs = knob("KIM_BENCH_STEADY_SECS", 60);
    let qps = knob("KIM_BENCH_QPS", 200);
    let workers = knob("KIM_BENCH_WORKERS", 25);
    let env = TestEnv::start(TestEnvOptions::default()).await?;
    let kcp = env.kcp_client().await?;
    let ns = env.namespace("bench").await?;

    // A few shoots, reconciled by the simulator; the GardenerClusters share them.
    let shoot_api: Api<Shoot> =
        Api::namespaced(env.garden_client().await?, fixtures::PROJECT_NAMESPACE);
    let mut shoot_names = Vec::new();
    for i in 0..shoots {
        let name = format!("bench{i}");
        let shoot: Shoot = serde_json::from_value(fixtures::shoot(&name, "aws")?)?;
        shoot_api.create(&PostParams::default(), &shoot).await?;
        shoot_names.push(name);
    }
    for name in &shoot_names {
        wait_until("shoot Succeeded", Duration::from_secs(120), || async {
            let s = shoot_api.get(name).await?;
            Ok(s.status
                .and_then(|st| st.last_operation)
                .is_some_and(|op| op.state == "Succeeded" && op.progress == 100))
        })
        .await?;
    }

    // What one kubeconfig costs Gardener: sequential adminkubeconfig calls.
    let probe = Instant::now();
    let probes = 5u32;
    for _ in 0..probes {
        let body = kim_shared::gardener::AdminKubeconfigRequest::with_expiration(86_400);
        let _: serde_json::Value = shoot_api
            .create_subresource(
                "adminkubeconfig",
                &shoot_names[0],
                &PostParams::default(),
                &body,
            )
            .await?;
    }
    let per_call = probe.elapsed() / probes;

    let dir = tempfile::tempdir()?;
    let paths = env.write_kubeconfigs(dir.path())?;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }
    let expiration = "24h";
    let ratio = 0.6;
    let args = Cli::try_parse_from([
        "kim-controller".to_owned(),
        format!("--kcp-kubeconfig-path={}", paths[0].display()),
        format!("--gardener-kubeconfig-path={}", paths[1].display()),
        format!("--gardener-project-name={}", fixtures::PROJECT_NAME),
        format!(
            "--converter-config-filepath={}",
            kim_tests::testenv::repo_root()
                .join("deploy/config/converter_config.json")
                .display()
        ),
        format!("--namespace={ns}"),
        "--metrics-bind-address=127.0.0.1:0".into(),
        "--health-probe-bind-address=127.0.0.1:0".into(),
        format!("--gardener-ratelimiter-qps={qps}"),
        format!("--gardener-ratelimiter-burst={qps}"),
        "--gardener-request-timeout=60s".into(),
        format!("--gardener-cluster-ctrl-workers-cnt={workers}"),
        format!("--kubeconfig-expiration-time={expiration}"),
        format!("--minimal-rotation-time={ratio}"),
    ])?
    .run;
    let shutdown = kim_controller::Shutdown::new();
    let process = Process::start(args, shutdown.clone()).await?;
    let addr = process.metrics_addr;
    let task = tokio::spawn(async move {
        let _ = process.run().await;
    });

    // 1. Creation wave.
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets_meta: Api<PartialObjectMeta<Secret>> = Api::namespaced(kcp.clone(), &ns);
    let managed =
        ListParams::default().labels("operator.kyma-project.io/managed-by=infrastructure-manager");
    let start = Instant::now();
    let calls_before = gardener_calls(addr).await?;
    futures::stream::iter(0..n)
        .map(|i| {
            let gcs = gcs.clone();
            let ns = ns.clone();
            let shoot = shoot_names[(i % shoots) as usize].clone();
            async move {
                let id = format!("rt-{i:05}");
                let gc: GardenerCluster = serde_json::from_value(json!({
                    "apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "GardenerCluster",
                    "metadata": {"name": id, "namespace": ns, "labels": {"kyma-project.io/runtime-id": id, "kyma-project.io/shoot-name": shoot}},
                    "spec": {"shoot": {"name": shoot}, "kubeconfig": {"secret": {"name": format!("kubeconfig-{id}"), "namespace": ns, "key": "config"}}}
                }))?;
                gcs.create(&PostParams::default(), &gc).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    wait_until("creation wave", Duration::from_secs(3600), || async {
        let list = secrets_meta.list_metadata(&managed).await?;
        let done = list
            .items
            .iter()
            .filter(|s| {
                s.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("operator.kyma-project.io/last-sync"))
            })
            .count() as u64;
        Ok(done >= n)
    })
    .await?;
    let wave = start.elapsed();
    let creation_calls = gardener_calls(addr).await? - calls_before;
    // Let the follow-up reconciles (status and finalizer events) settle.
    tokio::time::sleep(Duration::from_secs(5)).await;

    // 2. Steady state: nothing is due; poke every GardenerCluster once (a label change).
    let calls_before = gardener_calls(addr).await?;
    let steady_start = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let gcs = gcs.clone();
            async move {
                let patch = json!({"metadata": {"labels": {"bench/poke": "1"}}});
                gcs.patch(
                    &format!("rt-{i:05}"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    let remaining = Duration::from_secs(steady_secs).saturating_sub(steady_start.elapsed());
    tokio::time::sleep(remaining).await;
    let steady_window = steady_start.elapsed();
    let steady_calls = gardener_calls(addr).await? - calls_before;
    let due_per_hour = n as f64 * 3600.0 / (0.95 * ratio * 24.0 * 3600.0);

    // 3. Rotation wave: force all N.
    let calls_before = gardener_calls(addr).await?;
    let start = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let gcs = gcs.clone();
            async move {
                let patch = json!({"metadata": {"annotations": {"operator.kyma-project.io/force-kubeconfig-rotation": "true"}}});
                gcs.patch(&format!("rt-{i:05}"), &PatchParams::default(), &Patch::Merge(&patch)).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    wait_until("rotation wave", Duration::from_secs(3600), || async {
        let list = gcs.list(&ListParams::default()).await?;
        let done = list
            .items
            .iter()
            .filter(|gc| {
                !gc.metadata.annotations.as_ref().is_some_and(|a| {
                    a.contains_key("operator.kyma-project.io/force-kubeconfig-rotation")
                }) && gc
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.reason == "KubeconfigSecretRotated"))
            })
            .count() as u64;
        Ok(done >= n)
    })
    .await?;
    let rotation = start.elapsed();
    let rotation_calls = gardener_calls(addr).await? - calls_before;

    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(30), task).await;

    // 4. Baseline: N Secrets of a kubeconfig's size, written directly with the same concurrency.
    let sample_len = {
        let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
        secrets
            .get("kubeconfig-rt-00000")
            .await?
            .data
            .and_then(|d| d.get("config").map(|v| v.0.len()))
            .unwrap_or(6000)
    };
    let base_ns = env.namespace("bench-base").await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &base_ns);
    let payload = vec![b'x'; sample_len];
    let start = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let secrets = secrets.clone();
            let payload = payload.clone();
            async move {
                let s = Secret {
                    metadata: kube::api::ObjectMeta {
                        name: Some(format!("kubeconfig-rt-{i:05}")),
                        annotations: Some(BTreeMap::from([(
                            "operator.kyma-project.io/last-sync".into(),
                            "2026-01-01T00:00:00Z".into(),
                        )])),
                        ..Default::default()
                    },
                    data: Some(BTreeMap::from([("config".into(), ByteString(payload))])),
                    ..Default::default()
                };
                secrets
                    .patch(
                        &format!("kubeconfig-rt-{i:05}"),
                        &PatchParams::apply("bench").force(),
                        &Patch::Apply(&s),
                    )
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(workers as usize)
        .try_collect::<Vec<_>>()
        .await?;
    let baseline = start.elapsed();

    println!(
        "== make bench-kubeconfig: {n} GardenerClusters on {shoots} shoots, {workers} workers, Gardener client {qps} qps =="
    );
    println!(
        "gardener-apiserver: {:.0} ms per adminkubeconfig call, sequential ({} cores on this machine)",
        per_call.as_secs_f64() * 1000.0,
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    println!(
        "creation wave:  {:>8.1} s  ({:.0} clusters/s), Gardener calls {creation_calls} ({:.2} per cluster)",
        wave.as_secs_f64(),
        rate(n, wave),
        creation_calls as f64 / n as f64
    );
    println!(
        "steady state:   {steady_calls} Gardener calls in {:.0} s incl. one extra reconcile of every cluster = {:.0} calls/hour; rotations due with --kubeconfig-expiration-time={expiration} --minimal-rotation-time={ratio}: {due_per_hour:.0}/hour (upstream: 2 calls per reconcile)",
        steady_window.as_secs_f64(),
        rate(steady_calls, steady_window) * 3600.0,
    );
    println!(
        "rotation wave:  {:>8.1} s  ({:.0} clusters/s), Gardener calls {rotation_calls}",
        rotation.as_secs_f64(),
        rate(n, rotation)
    );
    println!(
        "baseline:       {:>8.1} s  ({:.0} Secrets/s) writing {n} Secrets of {sample_len} bytes directly",
        baseline.as_secs_f64(),
        rate(n, baseline)
    );
    println!(
        "rotation wave / baseline: {:.1}x",
        rotation.as_secs_f64() / baseline.as_secs_f64()
    );
    Ok(())
}
