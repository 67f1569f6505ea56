//! `make bench-kubeconfig`: the GardenerCluster reconciler at scale against the real control
//! plane of the tests (etcd, KCP kube-apiserver, the real gardener-apiserver aggregated, the
//! Gardener simulator), the controller in-process.
//!
//! Two modes for the one costly Gardener endpoint, `shoots/<name>/adminkubeconfig`
//! (`KIM_BENCH_GARDENER`):
//! - `sim` (default, 10,000 clusters): answered by the signing stand-in
//!   ([`kim_tests::simulator::adminkubeconfig`]) through the fault proxy; everything else the
//!   controller asks Gardener still reaches the real gardener-apiserver. The stand-in's answers
//!   are checked against a real one first (same JSON, same kubeconfig layout, same subject and
//!   validity) and a kubeconfig it issued through the controller must list namespaces in the
//!   shoot cluster.
//! - `real` (1,000 clusters): the real gardener-apiserver signs every kubeconfig (a fresh
//!   RSA-2048 key per call, ~370 ms of CPU here), so the waves measure Gardener's key generation.
//!
//! Figures printed (and copied into docs/benchmarks.md):
//! 1. creation wave: N GardenerClusters until every Secret holds a kubeconfig;
//! 2. steady state: Gardener calls while nothing is due, during a window that includes one
//!    extra reconcile of every GardenerCluster (a label change), extrapolated per hour, next to
//!    the rotations that are due per hour with the flags used;
//! 3. rotation wave: a forced rotation of all N until every one is `KubeconfigSecretRotated`;
//! 4. baseline: writing N Secrets of the same size directly, with the same concurrency;
//! 5. CPU seconds per process during each wave (who is the bottleneck), peak memory.
//!
//! Knobs (environment): `KIM_BENCH_GARDENER` (sim), `KIM_BENCH_CLUSTERS` (10000 sim, 1000
//! real), `KIM_BENCH_SHOOTS` (10, shared by the GardenerClusters), `KIM_BENCH_STEADY_SECS` (60),
//! `KIM_BENCH_QPS` (200, Gardener client rate), `KIM_BENCH_WORKERS` (25). A bench
//! target (not part of `make test`); run by `make bench-kubeconfig`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kim_controller::cli::run::RunArgs;
use kim_controller::runner::Process;
use kim_shared::api::GardenerCluster;
use kim_shared::gardener::{AdminKubeconfigRequest, Shoot};
use kim_tests::faultproxy::FaultProxy;
use kim_tests::fixtures;
use kim_tests::simulator::adminkubeconfig::AdminKubeconfigSigner;
use kim_tests::testenv::{TestEnv, TestEnvOptions};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::{Value, json};

const LAST_SYNC: &str = "operator.kyma-project.io/last-sync";
const FORCE: &str = "operator.kyma-project.io/force-kubeconfig-rotation";

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

async fn wait_until<F>(what: &str, timeout: Duration, mut done: F) -> Result<Duration>
where
    F: FnMut() -> bool,
{
    let start = Instant::now();
    loop {
        if done() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            bail!("{what}: not within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn rate(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

/// CPU seconds (user + system) per process name: the control plane's processes and `bench`
/// (this process: controller, fault proxy, signing stand-in, Gardener simulator, bench client).
fn cpu_seconds(pids: &[u32]) -> BTreeMap<String, f64> {
    // USER_HZ is 100 on Linux.
    let ticks = |stat: &str| -> Option<f64> {
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let utime: f64 = f.get(11)?.parse().ok()?;
        let stime: f64 = f.get(12)?.parse().ok()?;
        Some((utime + stime) / 100.0)
    };
    let mut out = BTreeMap::new();
    if let Some(t) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| ticks(&s))
    {
        out.insert("bench".to_string(), t);
    }
    for pid in pids {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if let Some(t) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| ticks(&s))
        {
            *out.entry(comm.trim().to_string()).or_default() += t;
        }
    }
    out
}

fn cpu_delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> String {
    after
        .iter()
        .map(|(k, v)| format!("{k} {:.0} s", v - before.get(k).copied().unwrap_or(0.0)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `/proc/self/status` figure in MiB (`VmHWM`: peak resident, `VmRSS`: now).
fn mem_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// A reflector store kept up to date in the background (a watch: no polling of 10,000 objects).
fn watch_store<K>(
    stream: impl futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
) -> Store<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store::<K>();
    tokio::spawn(
        reflector(writer, stream)
            .default_backoff()
            .applied_objects()
            .for_each(|_| futures::future::ready(())),
    );
    store
}

/// The shape of a JSON value: keys and leaf types, no values.
fn skeleton(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), skeleton(v))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(skeleton).collect()),
        Value::String(_) => json!("string"),
        Value::Number(_) => json!("number"),
        Value::Bool(_) => json!("bool"),
        Value::Null => Value::Null,
    }
}

/// The kubeconfig inside an AdminKubeconfigRequest answer, with the credentials and CA data
/// blanked (for comparing layouts), and the client certificate's DER.
fn kubeconfig_layout(answer: &Value) -> Result<(String, serde_yaml_ng::Value, Vec<u8>)> {
    let raw = B64.decode(
        answer
            .pointer("/status/kubeconfig")
            .and_then(Value::as_str)
            .context("status.kubeconfig missing")?,
    )?;
    let text = String::from_utf8(raw)?;
    let mut kc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text)?;
    let cert_pem = B64.decode(
        kc["users"][0]["user"]["client-certificate-data"]
            .as_str()
            .context("client-certificate-data missing")?,
    )?;
    let body: String = String::from_utf8(cert_pem)?
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let der = B64.decode(body)?;
    for (list, inner, keys) in [
        ("clusters", "cluster", &["certificate-authority-data"][..]),
        (
            "users",
            "user",
            &["client-certificate-data", "client-key-data"][..],
        ),
    ] {
        if let Some(items) = kc[list].as_sequence_mut() {
            for item in items {
                for key in keys {
                    if let Some(m) = item[inner].as_mapping_mut()
                        && m.contains_key(*key)
                    {
                        m.insert((*key).into(), "<data>".into());
                    }
                }
            }
        }
    }
    Ok((text, kc, der))
}

/// (subject, issuer, validity seconds, public key algorithm) of a DER certificate.
fn cert_facts(der: &[u8]) -> Result<(String, String, i64, String)> {
    let (_, c) = x509_parser::parse_x509_certificate(der)?;
    let v = c.validity();
    Ok((
        c.subject().to_string(),
        c.issuer().to_string(),
        v.not_after.timestamp() - v.not_before.timestamp(),
        c.public_key().algorithm.algorithm.to_id_string(),
    ))
}

/// The stand-in answers as the real gardener-apiserver does, and its kubeconfig works in the
/// shoot cluster. Returns the stand-in's cost per call.
async fn check_stand_in(env: &TestEnv, proxy: &FaultProxy, shoot: &str) -> Result<Duration> {
    let body = AdminKubeconfigRequest::with_expiration(86_400);
    let real_api: Api<Shoot> =
        Api::namespaced(env.garden_client().await?, fixtures::PROJECT_NAMESPACE);
    let sim_api: Api<Shoot> = Api::namespaced(
        proxy.access_via(env.kcp()).admin_client().await?,
        fixtures::PROJECT_NAMESPACE,
    );
    let pp = PostParams::default();
    let real: Value = real_api
        .create_subresource("adminkubeconfig", shoot, &pp, &body)
        .await?;
    let sim: Value = sim_api
        .create_subresource("adminkubeconfig", shoot, &pp, &body)
        .await?;
    ensure!(
        skeleton(&real) == skeleton(&sim),
        "stand-in answer differs in shape from gardener-apiserver's: real {} vs stand-in {}",
        skeleton(&real),
        skeleton(&sim)
    );
    ensure!(
        real["spec"] == sim["spec"] && real["metadata"]["name"] == sim["metadata"]["name"],
        "stand-in spec/metadata differ: real {} {} vs stand-in {} {}",
        real["spec"],
        real["metadata"],
        sim["spec"],
        sim["metadata"]
    );
    let (real_text, real_kc, real_der) = kubeconfig_layout(&real)?;
    let (sim_text, sim_kc, sim_der) = kubeconfig_layout(&sim)?;
    ensure!(
        real_kc == sim_kc,
        "stand-in kubeconfig layout differs from gardener-apiserver's (data fields blanked): \
         real {real_kc:?} vs stand-in {sim_kc:?}"
    );
    let (rs, ri, rv, ralg) = cert_facts(&real_der)?;
    let (ss, si, sv, salg) = cert_facts(&sim_der)?;
    ensure!(
        rs == ss && ri == si && rv == sv,
        "client certificates differ: real ({rs}; {ri}; {rv} s) vs stand-in ({ss}; {si}; {sv} s)"
    );
    // expirationTimestamp is the certificate's NotAfter (within the seconds between the calls).
    let exp = |v: &Value| -> Result<i64> {
        Ok(v["status"]["expirationTimestamp"]
            .as_str()
            .context("expirationTimestamp")?
            .parse::<jiff::Timestamp>()?
            .as_second())
    };
    ensure!(
        (exp(&real)? - exp(&sim)?).abs() <= 60,
        "expirationTimestamp differs by more than a minute"
    );
    println!(
        "stand-in check: same answer shape, kubeconfig layout (bytes {} real, {} stand-in), \
         subject {ss}, issuer {si}, validity {sv} s; client key {ralg} (real) vs {salg} (stand-in)",
        real_text.len(),
        sim_text.len()
    );
    assert_kubeconfig_works(env, &sim_text).await?;
    // Cost per call through the proxy.
    let probes = 50u32;
    let start = Instant::now();
    for _ in 0..probes {
        let _: Value = sim_api
            .create_subresource("adminkubeconfig", shoot, &pp, &body)
            .await?;
    }
    Ok(start.elapsed() / probes)
}

/// The kubeconfig authenticates against the shoot API server (lists namespaces).
async fn assert_kubeconfig_works(env: &TestEnv, kubeconfig: &str) -> Result<()> {
    let client = env.shoot()?.client_from_yaml(kubeconfig).await?;
    let n = Api::<Namespace>::all(client)
        .list_metadata(&ListParams::default().limit(5))
        .await
        .context("listing namespaces in the shoot cluster with an issued kubeconfig")?
        .items
        .len();
    ensure!(n > 0, "no namespaces listed in the shoot cluster");
    Ok(())
}

async fn for_all<F, Fut>(n: u64, concurrency: usize, f: F) -> Result<()>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    futures::stream::iter(0..n)
        .map(f)
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Run by `make bench-kubeconfig` (a bench target without the test harness).
fn main() -> Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(bench_kubeconfig())
}

async fn bench_kubeconfig() -> Result<()> {
    let sim = match std::env::var("KIM_BENCH_GARDENER").as_deref() {
        Ok("sim") | Err(_) => true,
        Ok("real") => false,
        Ok(other) => bail!("KIM_BENCH_GARDENER={other}: expected sim or real"),
    };
    let n = knob("KIM_BENCH_CLUSTERS", if sim { 10_000 } else { 1_000 });
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
    let start = Instant::now();
    loop {
        let mut ready = 0;
        for name in &shoot_names {
            let s = shoot_api.get(name).await?;
            if s.status
                .and_then(|st| st.last_operation)
                .is_some_and(|op| op.state == "Succeeded" && op.progress == 100)
            {
                ready += 1;
            }
        }
        if ready == shoot_names.len() {
            break;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(120),
            "shoots not Succeeded within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // What one kubeconfig costs the real Gardener: sequential adminkubeconfig calls.
    let probe = Instant::now();
    let probes = 3u32;
    for _ in 0..probes {
        let body = AdminKubeconfigRequest::with_expiration(86_400);
        let _: Value = shoot_api
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
    let mut paths = env.write_kubeconfigs(dir.path())?;
    // Sim: the controller's Gardener client goes through the proxy, which answers
    // adminkubeconfig with the stand-in and forwards everything else.
    let (signer, proxy, stand_in_per_call) = if sim {
        let signer = Arc::new(AdminKubeconfigSigner::new(env.shoot_info()?)?);
        let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
        proxy.inject(signer.rule());
        let per = check_stand_in(&env, &proxy, &shoot_names[0]).await?;
        let mut garden = proxy.access_via(env.kcp());
        garden.name = "garden".into();
        garden.namespace = Some(fixtures::PROJECT_NAMESPACE.into());
        paths[1] =
            garden.write_admin_kubeconfig(&dir.path().join("garden-via-proxy.kubeconfig"))?;
        (Some(signer), Some(proxy), Some(per))
    } else {
        (None, None, None)
    };
    let served = || signer.as_ref().map_or(0, |s| s.served());

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
            fixtures::write_converter_config(&dir.path().join("config"), fixtures::PROJECT_NAME)?
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
    let rss_before_controller = mem_mib("VmRSS");
    let shutdown = kim_controller::Shutdown::new();
    let process = Process::start(args, shutdown.clone()).await?;
    let addr = process.metrics_addr;
    let task = tokio::spawn(async move {
        let _ = process.run().await;
    });

    // The bench's view of progress: watches (polling lists of 10,000 objects would load the
    // apiserver the benchmark measures).
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let gc_store = watch_store(watcher(gcs.clone(), watcher::Config::default()));
    let secret_store = watch_store(watcher(
        Api::<PartialObjectMeta<Secret>>::namespaced(kcp.clone(), &ns),
        watcher::Config::default()
            .labels("operator.kyma-project.io/managed-by=infrastructure-manager"),
    ));
    gc_store.wait_until_ready().await?;
    secret_store.wait_until_ready().await?;
    let pids = env.pids();

    // 1. Creation wave.
    let cpu0 = cpu_seconds(&pids);
    let start = Instant::now();
    let calls_before = gardener_calls(addr).await?;
    let served_before = served();
    for_all(n, 32, |i| {
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
            Ok(())
        }
    })
    .await?;
    let created = start.elapsed();
    wait_until("creation wave", Duration::from_secs(7200), || {
        secret_store
            .state()
            .iter()
            .filter(|s| {
                s.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(LAST_SYNC))
            })
            .count() as u64
            >= n
    })
    .await?;
    let wave = start.elapsed();
    let creation_calls = gardener_calls(addr).await? - calls_before;
    let creation_served = served() - served_before;
    let creation_cpu = cpu_delta(&cpu0, &cpu_seconds(&pids));
    // A kubeconfig the controller stored works in the shoot cluster.
    let sample = Api::<Secret>::namespaced(kcp.clone(), &ns)
        .get(&format!("kubeconfig-rt-{:05}", n - 1))
        .await?;
    let sample_kubeconfig = sample
        .data
        .as_ref()
        .and_then(|d| d.get("config"))
        .context("sample Secret has no key config")?;
    let sample_len = sample_kubeconfig.0.len();
    assert_kubeconfig_works(&env, std::str::from_utf8(&sample_kubeconfig.0)?).await?;
    // Let the follow-up reconciles (status and finalizer events) settle.
    tokio::time::sleep(Duration::from_secs(10)).await;

    // 2. Steady state: nothing is due; poke every GardenerCluster once (a label change).
    let calls_before = gardener_calls(addr).await?;
    let served_before = served();
    let steady_start = Instant::now();
    for_all(n, 32, |i| {
        let gcs = gcs.clone();
        async move {
            let patch = json!({"metadata": {"labels": {"bench/poke": "1"}}});
            gcs.patch(
                &format!("rt-{i:05}"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
            Ok(())
        }
    })
    .await?;
    let remaining = Duration::from_secs(steady_secs).saturating_sub(steady_start.elapsed());
    tokio::time::sleep(remaining).await;
    let steady_window = steady_start.elapsed();
    let steady_calls = gardener_calls(addr).await? - calls_before;
    let steady_served = served() - served_before;
    let due_per_hour = n as f64 * 3600.0 / (0.95 * ratio * 24.0 * 3600.0);

    // 3. Rotation wave: force all N.
    let cpu0 = cpu_seconds(&pids);
    let calls_before = gardener_calls(addr).await?;
    let served_before = served();
    let start = Instant::now();
    for_all(n, 32, |i| {
        let gcs = gcs.clone();
        async move {
            let patch = json!({"metadata": {"annotations": {FORCE: "true"}}});
            gcs.patch(
                &format!("rt-{i:05}"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
            Ok(())
        }
    })
    .await?;
    let annotated = start.elapsed();
    wait_until("rotation wave", Duration::from_secs(7200), || {
        gc_store
            .state()
            .iter()
            .filter(|gc| {
                !gc.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(FORCE))
                    && gc
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.reason == "KubeconfigSecretRotated"))
            })
            .count() as u64
            >= n
    })
    .await?;
    let rotation = start.elapsed();
    let rotation_calls = gardener_calls(addr).await? - calls_before;
    let rotation_served = served() - served_before;
    let rotation_cpu = cpu_delta(&cpu0, &cpu_seconds(&pids));
    // Late double rotations would show here.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let rotation_calls_settled = gardener_calls(addr).await? - calls_before;
    let peak_rss = mem_mib("VmHWM");

    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
    drop(proxy);

    // 4. Baseline: N Secrets of a kubeconfig's size, written directly with the same concurrency.
    let base_ns = env.namespace("bench-base").await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &base_ns);
    let payload = vec![b'x'; sample_len];
    let cpu0 = cpu_seconds(&pids);
    let start = Instant::now();
    for_all(n, workers as usize, |i| {
        let secrets = secrets.clone();
        let payload = payload.clone();
        async move {
            let s = Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(format!("kubeconfig-rt-{i:05}")),
                    annotations: Some(BTreeMap::from([(
                        LAST_SYNC.into(),
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
            Ok(())
        }
    })
    .await?;
    let baseline = start.elapsed();
    let baseline_cpu = cpu_delta(&cpu0, &cpu_seconds(&pids));

    println!(
        "== make bench-kubeconfig: {n} GardenerClusters on {shoots} shoots, {workers} workers, Gardener client {qps} qps, adminkubeconfig by {} ==",
        if sim {
            "the signing stand-in (fault proxy); everything else by the real gardener-apiserver"
        } else {
            "the real gardener-apiserver"
        }
    );
    println!(
        "gardener-apiserver: {:.0} ms per adminkubeconfig call, sequential ({} cores on this machine)",
        per_call.as_secs_f64() * 1000.0,
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    if let Some(per) = stand_in_per_call {
        println!(
            "signing stand-in:   {:.1} ms per adminkubeconfig call through the proxy, sequential",
            per.as_secs_f64() * 1000.0
        );
    }
    println!(
        "creation wave:  {:>8.1} s  ({:.0} clusters/s; all created after {:.1} s), Gardener calls {creation_calls} ({:.3} per cluster; stand-in served {creation_served})",
        wave.as_secs_f64(),
        rate(n, wave),
        created.as_secs_f64(),
        creation_calls as f64 / n as f64
    );
    println!("  CPU: {creation_cpu}");
    println!(
        "steady state:   {steady_calls} Gardener calls (stand-in served {steady_served}) in {:.0} s incl. one extra reconcile of every cluster = {:.0} calls/hour; rotations due with --kubeconfig-expiration-time={expiration} --minimal-rotation-time={ratio}: {due_per_hour:.0}/hour (upstream: 2 calls per reconcile)",
        steady_window.as_secs_f64(),
        rate(steady_calls, steady_window) * 3600.0,
    );
    println!(
        "rotation wave:  {:>8.1} s  ({:.0} clusters/s; all annotated after {:.1} s), Gardener calls {rotation_calls} ({rotation_calls_settled} 10 s later; stand-in served {rotation_served})",
        rotation.as_secs_f64(),
        rate(n, rotation),
        annotated.as_secs_f64(),
    );
    println!("  CPU: {rotation_cpu}");
    println!(
        "baseline:       {:>8.1} s  ({:.0} Secrets/s) writing {n} Secrets of {sample_len} bytes directly, {workers} at a time",
        baseline.as_secs_f64(),
        rate(n, baseline)
    );
    println!("  CPU: {baseline_cpu}");
    println!(
        "rotation wave / baseline: {:.1}x",
        rotation.as_secs_f64() / baseline.as_secs_f64()
    );
    println!(
        "memory: bench process peak RSS {peak_rss:.0} MiB (controller, proxy, stand-in, simulator and the bench's own watches of {n} GardenerClusters and Secret metadata), {rss_before_controller:.0} MiB before the controller started"
    );
    Ok(())
}
