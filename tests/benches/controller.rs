//! `make bench-controller`: the Runtime controller at scale against the real apiservers, the real
//! gardener-apiserver and the Gardener simulator at zero step delay.
//!
//! For each size N (`KIM_BENCH_SIZES`, default `1000,10000`), in this order:
//!
//! 1. **controller**: the release `kim-controller` binary runs as its own process (so its peak
//!    RSS, VmHWM, is its own), with the literal environment of `deploy/controller/deployment.yaml`
//!    (`TOKIO_WORKER_THREADS`, `MALLOC_ARENA_MAX`), for a fresh KCP namespace and a fresh Gardener project. N Runtimes
//!    (the upstream sample with unique names, runtime IDs and Shoot names) are created with
//!    `KIM_BENCH_CONCURRENCY` (32) requests in flight; the clock stops when a watch has seen all N
//!    `Ready` with `observedGeneration == generation`. Gardener requests are read from the
//!    controller's `/metrics` (`infrastructure_manager_im_gardener_requests_total{method,code}`)
//!    before, at all-Ready and after a steady window (`KIM_BENCH_STEADY_SECS`, 60) in which all
//!    N stay Ready and nothing changes (target: no request per Ready Runtime). Requests to the
//!    runtime clusters (every Shoot's is the one shoot apiserver of the test environment) are
//!    read the same way, from `infrastructure_manager_im_runtime_cluster_requests_total` and
//!    `infrastructure_manager_im_runtime_access_shoot_requests_total`.
//!    After the steady window the controller is killed and a new process started on the same
//!    state (a crash, a rollout, a new leader): the **takeover** lasts from its start until its
//!    reconciles stop for 5 s, against a reference measured right before, the bench listing the
//!    four kinds the controller watches; its requests, Runtimes seen not Ready meanwhile
//!    (target: none), peak RSS and CPU are reported.
//! 2. **baseline**: the same N objects written straight to the apiservers in another namespace
//!    and project, with the same concurrency: Runtime (finalizer included), Shoot (the same
//!    conversion) through the Gardener API, and as soon as the simulator reports the Shoot
//!    `Succeeded` the GardenerCluster, its status and the Runtime status (copied from the
//!    controller run's end state). The clock stops the same way (a watch sees all N Ready).
//!
//! Admin kubeconfigs: the GardenerCluster reconciler runs in the controller process, but every
//! `kubeconfig-<runtime-id>` Secret is written by the bench (labelled as managed, with a fresh
//! `last-sync`, holding an admin kubeconfig of the shoot apiserver the simulator points every
//! Shoot at): in the controller run as soon as the Runtime's Shoot exists (the controller takes
//! a kubeconfig signed before its Shoot was created for another cluster's and rotates it), in
//! the baseline before the clock starts. The reconciler adopts it (one metadata patch)
//! and reports Ready without asking Gardener: the real gardener-apiserver signs an
//! `adminkubeconfig` in about 370 ms on this machine, which `make bench-kubeconfig` measures.
//!
//! The pace: Shoots are created at about 5 per second in both runs, whatever the concurrency.
//! That is gardener-apiserver's own limit here: its `ResourceReferenceManager` admission plugin
//! resolves each Shoot's `spec.resources` (the audit-log Secret) with a client built with
//! client-go's default rate limit (5 QPS), even though the Secret exists long before; creates
//! that would wait for that client past their deadline are refused with a 403. The limit is the
//! same for the controller and the baseline, so the ratio compares like with like.
//!
//! Knobs (environment): `KIM_BENCH_SIZES` (`1000,10000`), `KIM_BENCH_CONCURRENCY` (32: bench
//! writers and controller workers), `KIM_BENCH_QPS` (500: `--gardener-ratelimiter-qps/-burst`;
//! 5 is the controller's default; each rate has its own block in docs/benchmarks.md),
//! `KIM_BENCH_STEADY_SECS` (60), `KIM_CONTROLLER_BIN` (default: `kim-controller` in this
//! bench's profile directory), `KIM_BENCH_NO_DOC=1` (do not write docs/benchmarks.md),
//! `KIM_BENCH_REPEAT` (1: runs of each size, controller and baseline in turn; with more, the
//! report adds each run's ratio and their median), `KIM_BENCH_BASELINE=0` (the controller runs
//! only, reported on stdout and not written to docs/benchmarks.md).
//!
//! The report also gives each run's pace: when the bench had written all N Runtimes (the
//! controller run writes them all at once, the baseline one by one as it creates their Shoots)
//! and the Shoots created per minute, from their `creationTimestamp`.
//! A bench target (not part of `make test`); run by `make bench-controller`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use futures::{StreamExt, TryFutureExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kim_shared::api::{GardenerCluster, Runtime, RuntimeState};
use kim_shared::config::{ConfigPaths, KimConfig};
use kim_shared::gardener::Shoot;
use kim_shared::names;
use kim_tests::bench::{load_average, proc_status_kib, write_doc_block};
use kim_tests::controller::{audit_secret_names, sample_runtime, shoot_name};
use kim_tests::fixtures;
use kim_tests::programs;
use kim_tests::testenv::process::{ManagedProcess, free_port};
use kim_tests::testenv::{TestEnv, TestEnvOptions, repo_root};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn sizes() -> Result<Vec<u64>> {
    let raw = std::env::var("KIM_BENCH_SIZES").unwrap_or_else(|_| "1000,10000".into());
    raw.split(',')
        .map(|s| {
            s.trim()
                .parse::<u64>()
                .with_context(|| format!("KIM_BENCH_SIZES={raw:?}: {s:?} is not a number"))
        })
        .collect()
}

/// Plain-HTTP GET on our programs' metrics/health ports: (status, body).
async fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    stream.read_to_string(&mut out).await?;
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, out))
}

/// The controller's `/metrics` text.
async fn scrape_metrics(addr: SocketAddr) -> Result<String> {
    let (_, body) = http_get(addr, "/metrics").await?;
    Ok(body)
}

/// Counter values of one metric family by their label set (`method="GET",code="200"`).
fn counters(metrics: &str, family: &str) -> BTreeMap<String, u64> {
    let prefix = format!("{family}{{");
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (labels, value) = rest.rsplit_once("} ")?;
            Some((labels.to_owned(), value.trim().parse::<f64>().ok()? as u64))
        })
        .collect()
}

const GARDENER_REQUESTS: &str = "infrastructure_manager_im_gardener_requests_total";
const RECONCILES: &str = "infrastructure_manager_im_reconciles_total";
const BUSY: &str = "infrastructure_manager_im_gardener_busy_total";
/// Requests to runtime clusters: the Runtime and registry-cache reconcilers', and the
/// RuntimeAccess reconciler's.
const CLUSTER_REQUESTS: [&str; 2] = [
    "infrastructure_manager_im_runtime_cluster_requests_total",
    "infrastructure_manager_im_runtime_access_shoot_requests_total",
];

/// Requests to runtime clusters by label set, both families added up.
fn cluster_counters(metrics: &str) -> BTreeMap<String, u64> {
    let mut sum = BTreeMap::new();
    for family in CLUSTER_REQUESTS {
        for (labels, v) in counters(metrics, family) {
            *sum.entry(labels).or_insert(0) += v;
        }
    }
    sum
}

/// `after - before` per label set, without the zero entries.
fn delta(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// `method="POST",code="201"` -> `POST 201`.
fn short_labels(labels: &str) -> String {
    let mut parts: Vec<(String, String)> = labels
        .split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_owned(), v.trim_matches('"').to_owned()))
        })
        .collect();
    parts.sort_by_key(|(k, _)| if k == "method" { 0 } else { 1 });
    parts
        .into_iter()
        .map(|(_, v)| v)
        .collect::<Vec<_>>()
        .join(" ")
}

fn per_runtime(d: &BTreeMap<String, u64>, n: u64) -> String {
    if d.is_empty() {
        return "none".into();
    }
    d.iter()
        .map(|(k, v)| format!("{} {:.2}", short_labels(k), *v as f64 / n as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

fn total(d: &BTreeMap<String, u64>) -> u64 {
    d.values().sum()
}

/// A `kB` field of /proc/<pid>/status, in MiB.
fn proc_status_mib(pid: u32, key: &str) -> Option<f64> {
    proc_status_kib(pid, key).map(|kib| kib as f64 / 1024.0)
}

/// User + system CPU time of a process (clock ticks of 10 ms, the Linux default).
fn proc_cpu(pid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = text.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// Counts objects of a watch that ever matched `pred` and remembers when the count last grew.
struct Tracker {
    state: Arc<TrackerState>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct TrackerState {
    seen: Mutex<HashSet<String>>,
    last: Mutex<Option<Instant>>,
}

impl Tracker {
    fn start<K>(api: Api<K>, pred: impl Fn(&K) -> bool + Send + Sync + 'static) -> Self
    where
        K: Resource<DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
    {
        let state = Arc::new(TrackerState::default());
        let t = state.clone();
        let task = tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(item) = stream.next().await {
                let Ok(obj) = item else { continue };
                if pred(&obj) && t.seen.lock().unwrap().insert(obj.name_any()) {
                    *t.last.lock().unwrap() = Some(Instant::now());
                }
            }
        });
        Tracker { state, task }
    }

    fn count(&self) -> usize {
        self.state.seen.lock().unwrap().len()
    }

    fn last(&self) -> Option<Instant> {
        *self.state.last.lock().unwrap()
    }

    /// Waits until `n` objects matched; prints progress every 30 s.
    async fn wait(&self, what: &str, n: usize, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let mut next_report = Duration::from_secs(30);
        loop {
            let c = self.count();
            if c >= n {
                return Ok(());
            }
            if start.elapsed() > timeout {
                bail!("{what}: {c} of {n} within {timeout:?}");
            }
            if start.elapsed() > next_report {
                eprintln!(
                    "  {what}: {c}/{n} after {:.0} s (load {})",
                    start.elapsed().as_secs_f64(),
                    load_average()
                );
                next_report += Duration::from_secs(30);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long one run may take: Shoot creation is gated at about 5 per second by the
/// gardener-apiserver of the test environment (see the module docs), so N Runtimes need N/5 s;
/// twice that plus ten minutes.
fn run_timeout(n: u64) -> Duration {
    Duration::from_secs(600 + n * 2 / 5)
}

fn runtime_ready(rt: &Runtime) -> bool {
    rt.status.as_ref().is_some_and(|s| {
        s.state == RuntimeState::Ready && s.observed_generation == rt.metadata.generation
    })
}

fn shoot_succeeded(s: &Shoot) -> bool {
    s.status
        .as_ref()
        .and_then(|st| st.last_operation.as_ref())
        .is_some_and(|op| op.type_ == "Create" && op.state == "Succeeded" && op.progress == 100)
}

/// A Gardener project of its own (namespace `garden-<project>` with the fixtures' bindings,
/// Secrets and ConfigMaps), so each run's controller watches only its own Shoots.
async fn create_project(env: &TestEnv, project: &str) -> Result<String> {
    let client = env.garden_client().await?;
    let namespace = format!("garden-{project}");
    let mut ranked: Vec<(u8, Value)> = Vec::new();
    for o in fixtures::objects()? {
        let kind = o["kind"].as_str().unwrap_or_default().to_owned();
        let own = match kind.as_str() {
            "Namespace" => o["metadata"]["name"] == fixtures::PROJECT_NAMESPACE,
            "Project" => true,
            _ => o["metadata"]["namespace"] == fixtures::PROJECT_NAMESPACE,
        };
        if !own {
            continue;
        }
        let text = serde_json::to_string(&o)?.replace(fixtures::PROJECT_NAMESPACE, &namespace);
        let mut o: Value = serde_json::from_str(&text)?;
        match kind.as_str() {
            "Namespace" => {
                o["metadata"]["labels"]["project.gardener.cloud/name"] = json!(project);
            }
            "Project" => o["metadata"]["name"] = json!(project),
            _ => {}
        }
        let rank = match kind.as_str() {
            "Namespace" => 0,
            "Project" | "Secret" | "ConfigMap" => 1,
            _ => 2,
        };
        ranked.push((rank, o));
    }
    // The audit-log Secrets named in deploy/config (the controller's configuration).
    for name in audit_secret_names()? {
        ranked.push((
            1,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": name, "namespace": namespace},
                   "type": "Opaque", "stringData": {"auditlog-credentials": "test", "clientID": "fake", "clientSecret": "fake"}}),
        ));
    }
    for rank in 0..3 {
        for (_, o) in ranked.iter().filter(|(r, _)| *r == rank) {
            fixtures::apply(&client, o)
                .await
                .with_context(|| format!("project {project}: {}", o["kind"]))?;
        }
    }
    // gardener-apiserver resolves references from its informer caches.
    tokio::time::sleep(Duration::from_secs(3)).await;
    Ok(namespace)
}

/// deploy/config with `projectName` set to `project`; returns the converter config path.
fn write_config(dir: &Path, project: &str) -> Result<PathBuf> {
    Ok(kim_tests::fixtures::write_converter_config(dir, project)?)
}

/// N Runtimes from the upstream sample (as the webhook would store it), unique names.
fn runtimes(ns: &str, tag: &str, n: u64) -> Result<Vec<Runtime>> {
    let template = sample_runtime(ns, "template")?;
    let width = n.saturating_sub(1).max(1).to_string().len();
    Ok((0..n)
        .map(|i| {
            let id = format!("{tag}-{i:0width$}");
            let mut rt = template.clone();
            rt.metadata.name = Some(id.clone());
            let labels = rt.metadata.labels.get_or_insert_with(Default::default);
            labels.insert(names::LABEL_RUNTIME_ID.into(), id.clone());
            labels.insert(names::LABEL_SHOOT_NAME.into(), shoot_name(&id));
            rt.spec.shoot.name = shoot_name(&id);
            rt
        })
        .collect())
}

/// `kubeconfig-<id>` as the GardenerCluster reconciler writes it (managed-by label, last-sync
/// now), holding `kubeconfig`.
fn kubeconfig_secret(id: &str, kubeconfig: &str) -> Secret {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(names::kubeconfig_secret_name(id)),
            labels: Some(BTreeMap::from([
                (
                    names::LABEL_MANAGED_BY.to_owned(),
                    names::MANAGED_BY_INFRASTRUCTURE_MANAGER.to_owned(),
                ),
                (names::LABEL_RUNTIME_ID.to_owned(), id.to_owned()),
            ])),
            annotations: Some(BTreeMap::from([(
                names::ANNOTATION_LAST_SYNC.to_owned(),
                now,
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            names::KUBECONFIG_SECRET_KEY.to_owned(),
            ByteString(kubeconfig.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

/// Writes `kubeconfig-<runtime-id>` for every Runtime ([`kubeconfig_secret`]). Returns the time
/// it took.
async fn write_kubeconfig_secrets(
    kcp: &kube::Client,
    ns: &str,
    rts: &[Runtime],
    kubeconfig: &str,
    concurrency: usize,
) -> Result<Duration> {
    let api: Api<Secret> = Api::namespaced(kcp.clone(), ns);
    let start = Instant::now();
    futures::stream::iter(rts)
        .map(|rt| {
            let api = api.clone();
            async move {
                let secret = kubeconfig_secret(&rt.name_any(), kubeconfig);
                api.create(&PostParams::default(), &secret).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(start.elapsed())
}

/// For the controller run: writes each Runtime's `kubeconfig-<runtime-id>` as soon as its
/// Shoot exists (the GardenerCluster reconciler would sign one only later, once the Shoot is
/// provisioned), so it is adopted as signed for that Shoot. One written before the Shoot
/// existed is another cluster's to the controller, which rotates it through Gardener.
fn sign_when_shoots_appear(
    kcp: &kube::Client,
    garden: kube::Client,
    ns: &str,
    project: &str,
    kubeconfig: &str,
) -> tokio::task::JoinHandle<()> {
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), ns);
    let shoots: Api<Shoot> = Api::namespaced(garden, &format!("garden-{project}"));
    let kubeconfig = kubeconfig.to_owned();
    tokio::spawn(async move {
        let mut written = HashSet::new();
        let mut events = watcher(shoots, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(event) = events.next().await {
            let Ok(shoot) = event else { continue };
            let Some(id) = shoot.annotations().get(names::SHOOT_ANNOTATION_RUNTIME_ID) else {
                continue;
            };
            if written.insert(id.clone()) {
                // 409: the GardenerCluster reconciler signed one first.
                let _ = secrets
                    .create(&PostParams::default(), &kubeconfig_secret(id, &kubeconfig))
                    .await;
            }
        }
    })
}

/// Creates the Runtimes with `concurrency` requests in flight.
async fn create_runtimes(kcp: &kube::Client, ns: &str, rts: &[Runtime], c: usize) -> Result<()> {
    let api: Api<Runtime> = Api::namespaced(kcp.clone(), ns);
    futures::stream::iter(rts)
        .map(|rt| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), rt)
                    .await
                    .with_context(|| format!("creating Runtime {}", rt.name_any()))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(c)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

#[derive(Debug, Clone)]
struct Figures {
    n: u64,
    /// Which repetition of this size (0 for the first).
    run: usize,
    /// Time from the first create until all N are Ready.
    ready: Duration,
    /// Time until all N Shoots were Succeeded (from the same start).
    shoots: Duration,
    /// Time to pre-write the kubeconfig Secrets (outside `ready`).
    secrets: Duration,
    /// Time until the bench had written all N Runtimes (from the same start).
    runtimes_written: Duration,
    /// Shoots created in each minute from the start (their `creationTimestamp`).
    creates_per_minute: Vec<u64>,
    /// Gardener requests by label set, creation until all Ready.
    gardener: BTreeMap<String, u64>,
    /// Gardener requests during the steady window.
    steady_gardener: BTreeMap<String, u64>,
    /// "Try later" answers by operation, creation until all Ready.
    busy: BTreeMap<String, u64>,
    /// Requests to runtime clusters by label set, creation until all Ready.
    cluster: BTreeMap<String, u64>,
    /// Requests to runtime clusters during the steady window.
    steady_cluster: BTreeMap<String, u64>,
    /// Runtime reconciles during the steady window.
    steady_reconciles: BTreeMap<String, u64>,
    steady_window: Duration,
    /// Peak RSS (VmHWM) and RSS at the end, MiB.
    hwm_mib: f64,
    rss_mib: f64,
    /// Controller CPU time until all Ready.
    cpu: Duration,
    /// The controller killed after the steady window and started again on the same state
    /// (controller runs only).
    takeover: Option<Takeover>,
    /// The end state, for the baseline to copy.
    runtime_status: Value,
    gc_status: Value,
}

struct Setup {
    ns: String,
    project: String,
    dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    config: PathBuf,
    rts: Vec<Runtime>,
    secrets: Duration,
}

async fn setup(
    env: &TestEnv,
    kind: &str,
    n: u64,
    run: usize,
    kubeconfig: Option<&str>,
    c: usize,
) -> Result<Setup> {
    // Project names stay short: Gardener limits project + Shoot name length (21 together).
    // Repeated runs of one size get a letter (b, c, ...) after the size.
    let again = match run {
        0 => String::new(),
        i => char::from(b'a' + (i % 26) as u8).to_string(),
    };
    let tag = format!("{}{n}{again}", &kind[..1]);
    let project = format!("b{tag}");
    create_project(env, &project).await?;
    let ns = env.namespace(&format!("cbench-{kind}-{n}{again}")).await?;
    let dir = tempfile::tempdir()?;
    let paths = env.write_kubeconfigs(dir.path())?;
    let config = write_config(dir.path(), &project)?;
    let rts = runtimes(&ns, &tag, n)?;
    let secrets = match kubeconfig {
        Some(k) => write_kubeconfig_secrets(&env.kcp_client().await?, &ns, &rts, k, c).await?,
        None => Duration::ZERO,
    };
    Ok(Setup {
        ns,
        project,
        dir,
        paths,
        config,
        rts,
        secrets,
    })
}

fn controller_binary() -> Result<PathBuf> {
    if let Ok(p) = std::env::var("KIM_CONTROLLER_BIN") {
        return Ok(PathBuf::from(p));
    }
    // target/<profile>/deps/controller-<hash> -> target/<profile>/kim-controller
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("kim-controller"))
        .context("no directory above the bench binary")?;
    if !bin.exists() {
        bail!(
            "{} is missing: run `cargo build --release -p kim-controller` (make bench-controller does)",
            bin.display()
        );
    }
    Ok(bin)
}

async fn controller_run(
    env: &TestEnv,
    n: u64,
    run: usize,
    kubeconfig: &str,
    c: usize,
    qps: u64,
    steady: Duration,
) -> Result<Figures> {
    let s = setup(env, "ctl", n, run, None, c).await?;
    let kcp = env.kcp_client().await?;
    let metrics_addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let health_addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let logs = repo_root().join("target/controller-bench");
    std::fs::create_dir_all(&logs)?;
    // One log per run: a repeated size must not overwrite the log of its earlier runs.
    let log = logs.join(match run {
        0 => format!("kim-controller-{n}.log"),
        i => format!("kim-controller-{n}-run{}.log", i + 1),
    });
    let _ = std::fs::remove_file(&log);
    let args: Vec<String> = vec![
        "run".into(),
        format!("--kcp-kubeconfig-path={}", s.paths[0].display()),
        format!("--gardener-kubeconfig-path={}", s.paths[1].display()),
        format!("--gardener-project-name={}", s.project),
        format!("--converter-config-filepath={}", s.config.display()),
        format!("--namespace={}", s.ns),
        format!("--metrics-bind-address={metrics_addr}"),
        format!("--health-probe-bind-address={health_addr}"),
        format!("--gardener-ratelimiter-qps={qps}"),
        format!("--gardener-ratelimiter-burst={qps}"),
        format!("--runtime-ctrl-workers-cnt={c}"),
        format!("--gardener-cluster-ctrl-workers-cnt={c}"),
        "--log-format=json".into(),
        "--log-level=info,kube=warn".into(),
    ];
    // The Deployment's environment, so the peak RSS is the shipped configuration's.
    let environment = programs::CONTROLLER.environment()?;
    let envs: Vec<(&str, &str)> = environment
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut proc = start_controller(&args, &envs, &log, health_addr).await?;
    let pid = proc.pid().context("controller has no pid")?;
    let scrape = || scrape_metrics(metrics_addr);
    let first = scrape().await?;
    let before = counters(&first, GARDENER_REQUESTS);
    let busy_before = counters(&first, BUSY);
    let cluster_before = cluster_counters(&first);
    let cpu_before = proc_cpu(pid).unwrap_or_default();

    let ready = Tracker::start(
        Api::<Runtime>::namespaced(kcp.clone(), &s.ns),
        runtime_ready,
    );
    let shoots = Tracker::start(
        Api::<Shoot>::namespaced(env.garden_client().await?, &format!("garden-{}", s.project)),
        shoot_succeeded,
    );
    let signer = sign_when_shoots_appear(
        &kcp,
        env.garden_client().await?,
        &s.ns,
        &s.project,
        kubeconfig,
    );
    let (t0, wall0) = (Instant::now(), jiff::Timestamp::now());
    create_runtimes(&kcp, &s.ns, &s.rts, c).await?;
    let runtimes_written = t0.elapsed();
    let timeout = run_timeout(n);
    if let Err(e) = ready
        .wait("controller: Runtimes Ready", n as usize, timeout)
        .await
    {
        bail!(
            "{e}; Shoots Succeeded: {}; controller log: {}",
            shoots.count(),
            log.display()
        );
    }
    let all_ready = ready.last().unwrap_or_else(Instant::now) - t0;
    let shoots_done = shoots.last().unwrap_or_else(Instant::now) - t0;
    let cpu = proc_cpu(pid).unwrap_or_default().saturating_sub(cpu_before);
    let at_ready = scrape().await?;
    let gardener = delta(&counters(&at_ready, GARDENER_REQUESTS), &before);
    let busy = delta(&counters(&at_ready, BUSY), &busy_before);
    let cluster = delta(&cluster_counters(&at_ready), &cluster_before);

    // Steady state: all N Ready, nothing changes.
    let steady_start = Instant::now();
    tokio::time::sleep(steady).await;
    let after = scrape().await?;
    let steady_window = steady_start.elapsed();
    let steady_gardener = delta(
        &counters(&after, GARDENER_REQUESTS),
        &counters(&at_ready, GARDENER_REQUESTS),
    );
    let steady_reconciles = delta(
        &counters(&after, RECONCILES),
        &counters(&at_ready, RECONCILES),
    );
    let steady_cluster = delta(&cluster_counters(&after), &cluster_counters(&at_ready));
    proc.check_running()?;
    let hwm_mib = proc_status_mib(pid, "VmHWM:").unwrap_or(0.0);
    let rss_mib = proc_status_mib(pid, "VmRSS:").unwrap_or(0.0);

    let unready = Tracker::start(Api::<Runtime>::namespaced(kcp.clone(), &s.ns), |rt| {
        !runtime_ready(rt)
    });
    proc.stop();
    signer.abort();
    let takeover = takeover(
        env,
        &s,
        &args,
        &envs,
        &log,
        metrics_addr,
        health_addr,
        &unready,
    )
    .await?;
    let creates_per_minute = creates_per_minute(env, &s.project, wall0).await?;

    let first = s.rts[0].name_any();
    let rt = Api::<Runtime>::namespaced(kcp.clone(), &s.ns)
        .get(&first)
        .await?;
    let gc = Api::<GardenerCluster>::namespaced(kcp.clone(), &s.ns)
        .get(&first)
        .await?;
    drop(s.dir);
    Ok(Figures {
        n,
        run,
        ready: all_ready,
        shoots: shoots_done,
        secrets: s.secrets,
        runtimes_written,
        creates_per_minute,
        gardener,
        steady_gardener,
        busy,
        cluster,
        steady_cluster,
        steady_reconciles,
        steady_window,
        hwm_mib,
        rss_mib,
        cpu,
        takeover: Some(takeover),
        runtime_status: serde_json::to_value(&rt.status)?,
        gc_status: serde_json::to_value(&gc.status)?,
    })
}

/// Starts `kim-controller` with `args` and waits for its `/readyz`.
async fn start_controller(
    args: &[String],
    envs: &[(&str, &str)],
    log: &Path,
    health_addr: SocketAddr,
) -> Result<ManagedProcess> {
    let mut proc = ManagedProcess::spawn("kim-controller", &controller_binary()?, args, envs, log)?;
    let started = Instant::now();
    loop {
        proc.check_running()?;
        if matches!(http_get(health_addr, "/readyz").await, Ok((200, _))) {
            return Ok(proc);
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!(
                "kim-controller not ready within 30 s (log: {})",
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a new controller process does on the state of N Ready Runtimes (a rollout, a crash,
/// a new leader).
#[derive(Debug, Clone)]
struct Takeover {
    /// From the start of the new process until its reconciles stopped for [`QUIET`].
    busy: Duration,
    /// The reference, measured right before: the bench itself lists what the controller's
    /// watches list at a start (Runtimes, GardenerClusters and Secrets of the namespace,
    /// Shoots of the project), 100 per page as the controller does.
    lists: Duration,
    reconciles: BTreeMap<String, u64>,
    gardener: BTreeMap<String, u64>,
    cluster: BTreeMap<String, u64>,
    /// Runtimes seen not Ready at any moment of the takeover.
    unready: usize,
    hwm_mib: f64,
    cpu: Duration,
}

/// Reconciles that stop for this long end a takeover.
const QUIET: Duration = Duration::from_secs(5);

#[allow(clippy::too_many_arguments)]
async fn takeover(
    env: &TestEnv,
    s: &Setup,
    args: &[String],
    envs: &[(&str, &str)],
    log: &Path,
    metrics_addr: SocketAddr,
    health_addr: SocketAddr,
    unready: &Tracker,
) -> Result<Takeover> {
    let kcp = env.kcp_client().await?;
    let garden = env.garden_client().await?;
    let page = kube::api::ListParams::default().limit(100);
    let started = Instant::now();
    list_all(&Api::<Runtime>::namespaced(kcp.clone(), &s.ns), &page).await?;
    list_all(
        &Api::<GardenerCluster>::namespaced(kcp.clone(), &s.ns),
        &page,
    )
    .await?;
    list_all(&Api::<Secret>::namespaced(kcp.clone(), &s.ns), &page).await?;
    list_all(
        &Api::<Shoot>::namespaced(garden, &format!("garden-{}", s.project)),
        &page,
    )
    .await?;
    let lists = started.elapsed();

    let log = log.with_extension("takeover.log");
    let _ = std::fs::remove_file(&log);
    let started = Instant::now();
    let mut proc = start_controller(args, envs, &log, health_addr).await?;
    let pid = proc.pid().context("controller has no pid")?;
    let scrape = || scrape_metrics(metrics_addr);
    let mut last = (BTreeMap::new(), Instant::now());
    let body = loop {
        proc.check_running()?;
        let body = scrape().await?;
        let reconciles = counters(&body, RECONCILES);
        let runtimes: u64 = reconciles
            .iter()
            .filter(|(k, _)| k.contains("controller=\"runtime\""))
            .map(|(_, v)| v)
            .sum();
        if reconciles != last.0 {
            last = (reconciles, Instant::now());
        } else if runtimes >= s.rts.len() as u64 && last.1.elapsed() >= QUIET {
            break body;
        }
        if started.elapsed() > run_timeout(s.rts.len() as u64) {
            bail!("takeover: reconciles did not stop (log: {})", log.display());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let figures = Takeover {
        busy: last.1 - started,
        lists,
        reconciles: counters(&body, RECONCILES),
        gardener: counters(&body, GARDENER_REQUESTS),
        cluster: cluster_counters(&body),
        unready: unready.count(),
        hwm_mib: proc_status_mib(pid, "VmHWM:").unwrap_or(0.0),
        cpu: proc_cpu(pid).unwrap_or_default(),
    };
    proc.stop();
    Ok(figures)
}

/// Lists every object of `api` page by page.
async fn list_all<K>(api: &Api<K>, page: &kube::api::ListParams) -> Result<usize>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut params = page.clone();
    let mut n = 0;
    loop {
        let list = api.list(&params).await?;
        n += list.items.len();
        match list.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(n),
        }
    }
}

/// The series of `counters` above zero, `none` when there are none.
fn nonzero(counters: &BTreeMap<String, u64>) -> String {
    let shown: Vec<String> = counters
        .iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| format!("{} {v}", short_labels(k)))
        .collect();
    if shown.is_empty() {
        "none".to_owned()
    } else {
        shown.join(", ")
    }
}

/// The takeover rows of the report.
fn takeover_table(ctls: &[&Figures]) -> String {
    let mut md = String::from(
        "Takeover: after the steady window the controller is killed and a new process starts on \
         the same state (N Ready Runtimes, their Shoots, GardenerClusters and kubeconfig \
         Secrets). Busy: from its start until its reconciles stop for 5 s; reference: the bench \
         listing the four kinds it watches, 100 per page, right before.\n\n\
         | Runtimes | busy | reference: lists | busy / lists | reconciles | Gardener requests | runtime-cluster requests | Runtimes not Ready meanwhile | peak RSS | CPU |\n\
         | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |\n",
    );
    for f in ctls {
        let Some(t) = &f.takeover else { continue };
        md.push_str(&format!(
            "| {} (run {}) | {:.1} s | {:.2} s | {:.1}x | {} | {} | {} | {} | {:.0} MiB | {:.1} s |\n",
            f.n,
            f.run + 1,
            secs(t.busy),
            secs(t.lists),
            secs(t.busy) / secs(t.lists).max(0.001),
            nonzero(&t.reconciles),
            nonzero(&t.gardener),
            total(&t.cluster),
            t.unready,
            t.hwm_mib,
            secs(t.cpu),
        ));
    }
    md.push('\n');
    md
}

async fn baseline_run(
    env: &TestEnv,
    n: u64,
    run: usize,
    kubeconfig: &str,
    c: usize,
    template: &Figures,
) -> Result<Figures> {
    let s = setup(env, "base", n, run, Some(kubeconfig), c).await?;
    let kcp = env.kcp_client().await?;
    let garden = env.garden_client().await?;
    let gns = format!("garden-{}", s.project);
    let cfg = KimConfig::load(&ConfigPaths::new(&s.config))?;
    let by_shoot: HashMap<String, usize> = s
        .rts
        .iter()
        .enumerate()
        .map(|(i, rt)| (rt.spec.shoot.name.clone(), i))
        .collect();
    let runtimes: Api<Runtime> = Api::namespaced(kcp.clone(), &s.ns);
    let clusters: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &s.ns);
    let shoots_api: Api<Shoot> = Api::namespaced(garden.clone(), &gns);
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(garden.clone(), &gns);

    let ready = Tracker::start(runtimes.clone(), runtime_ready);
    // Succeeded Shoots go to the writers of the second half as the simulator finishes them.
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Shoot>();
    let watch_api = shoots_api.clone();
    let succeeded = tokio::spawn(async move {
        let mut sent = HashSet::new();
        let mut stream = watcher(watch_api, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(item) = stream.next().await {
            let Ok(shoot) = item else { continue };
            if shoot_succeeded(&shoot) && sent.insert(shoot.name_any()) {
                let _ = tx.send(shoot);
            }
        }
    });
    let shoots_done: Arc<Mutex<Option<Instant>>> = Arc::default();

    let (t0, wall0) = (Instant::now(), jiff::Timestamp::now());
    let first_half = futures::stream::iter(&s.rts)
        .map(|rt| {
            let (runtimes, shoots_api, cfg) = (runtimes.clone(), shoots_api.clone(), &cfg);
            let config_maps = config_maps.clone();
            async move {
                let mut rt = rt.clone();
                rt.metadata.finalizers = Some(vec![names::RUNTIME_FINALIZER.to_owned()]);
                let stored = runtimes
                    .create(&PostParams::default(), &rt)
                    .await
                    .with_context(|| format!("creating Runtime {}", rt.name_any()))?;
                let converted = kim_shared::convert::to_shoot(&stored, cfg, None)?;
                // As the controller: the structured-authentication ConfigMap the Shoot names.
                if let Some(cm) = &converted.structured_auth {
                    config_maps.create(&PostParams::default(), cm).await?;
                }
                shoots_api
                    .create(&PostParams::default(), &converted.shoot)
                    .await
                    .with_context(|| format!("creating Shoot {}", rt.spec.shoot.name))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(c)
        .try_collect::<Vec<_>>()
        .map_ok(|_| t0.elapsed());
    let rts = &s.rts;
    let done_clock = shoots_done.clone();
    let second_half = tokio_stream_from(rx)
        .take(n as usize)
        .enumerate()
        .map(|(i, shoot)| {
            if i + 1 == n as usize {
                *done_clock.lock().unwrap() = Some(Instant::now());
            }
            let (runtimes, clusters) = (runtimes.clone(), clusters.clone());
            let rt = by_shoot.get(&shoot.name_any()).map(|i| &rts[*i]);
            async move {
                let rt = rt.with_context(|| format!("Shoot {} is not ours", shoot.name_any()))?;
                let id = rt.name_any();
                let gc = kim_controller::runtime::cluster::gardener_cluster_for(rt, &id, &shoot);
                clusters.create(&PostParams::default(), &gc).await?;
                let pp = PatchParams::apply("bench").force();
                clusters
                    .patch_status(
                        &id,
                        &pp,
                        &Patch::Apply(json!({
                            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
                            "kind": "GardenerCluster",
                            "status": template.gc_status,
                        })),
                    )
                    .await?;
                let mut status = template.runtime_status.clone();
                status["observedGeneration"] = json!(1);
                runtimes
                    .patch_status(
                        &id,
                        &pp,
                        &Patch::Apply(json!({
                            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
                            "kind": "Runtime",
                            "status": status,
                        })),
                    )
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(c)
        .try_collect::<Vec<_>>();
    // Both halves run at once; an error in either ends the run (the second half would
    // otherwise wait for Shoots that never come).
    let timeout = run_timeout(n);
    let (runtimes_written, _) =
        tokio::time::timeout(timeout, async { tokio::try_join!(first_half, second_half) })
            .await
            .with_context(|| {
                format!(
                    "baseline: not all written within {timeout:?}; Runtimes Ready: {}",
                    ready.count()
                )
            })??;
    ready
        .wait("baseline: Runtimes Ready", n as usize, run_timeout(n))
        .await?;
    let all_ready = ready.last().unwrap_or_else(Instant::now) - t0;
    let shoots = shoots_done.lock().unwrap().unwrap_or_else(Instant::now) - t0;
    succeeded.abort();
    Ok(Figures {
        n,
        run,
        ready: all_ready,
        shoots,
        secrets: s.secrets,
        runtimes_written,
        creates_per_minute: creates_per_minute(env, &s.project, wall0).await?,
        // The bench's own Gardener requests: the structured-authentication ConfigMap and the
        // Shoot created per Runtime (plus one watch).
        gardener: BTreeMap::from([("method=\"POST\",code=\"201\"".to_owned(), 2 * n)]),
        steady_gardener: BTreeMap::new(),
        busy: BTreeMap::new(),
        cluster: BTreeMap::new(),
        steady_cluster: BTreeMap::new(),
        steady_reconciles: BTreeMap::new(),
        steady_window: Duration::ZERO,
        hwm_mib: 0.0,
        rss_mib: 0.0,
        cpu: Duration::ZERO,
        takeover: None,
        runtime_status: Value::Null,
        gc_status: Value::Null,
    })
}

/// Shoots of the project created in each minute from `start`, by their `creationTimestamp`
/// (read once, after the run): shows whether creates kept gardener-apiserver's pace from the
/// first minute or started slow.
async fn creates_per_minute(
    env: &TestEnv,
    project: &str,
    start: jiff::Timestamp,
) -> Result<Vec<u64>> {
    let shoots: Api<Shoot> =
        Api::namespaced(env.garden_client().await?, &format!("garden-{project}"));
    let mut minutes = Vec::new();
    for shoot in shoots.list_metadata(&Default::default()).await? {
        let Some(created) = shoot.metadata.creation_timestamp else {
            continue;
        };
        let offset = created.0.as_second() - start.as_second();
        let minute = usize::try_from(offset.max(0) / 60)?;
        if minutes.len() <= minute {
            minutes.resize(minute + 1, 0);
        }
        minutes[minute] += 1;
    }
    Ok(minutes)
}

/// An unbounded receiver as a stream.
fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The figures as Markdown (also printed).
fn report(results: &[(Figures, Figures)], c: usize, qps: u64, repeat: usize) -> String {
    let mut md = String::new();
    md.push_str(&format!(
        "Simulator step delay 0; {c} writers in the bench and `--runtime-ctrl-workers-cnt={c}`, \
         `--gardener-cluster-ctrl-workers-cnt={c}`, `--gardener-ratelimiter-qps/-burst={qps}`; \
         {} cores; load average at the end {}; default request timeouts. Both runs create Shoots \
         at gardener-apiserver's pace here, about 5 per second (its admission resolves each \
         Shoot's audit-log Secret reference with a 5 QPS client; see the bench's module docs).\n\n",
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        load_average()
    ));
    md.push_str("| Runtimes | controller: all Ready | baseline: all Ready | controller / baseline | Shoots Succeeded (ctl / base) | controller peak RSS (VmHWM) | controller CPU | kubeconfig Secrets pre-written (ctl / base, not timed) |\n");
    md.push_str("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    let label = |f: &Figures| {
        if repeat > 1 {
            format!("{} (run {})", f.n, f.run + 1)
        } else {
            f.n.to_string()
        }
    };
    for (ctl, base) in results {
        md.push_str(&format!(
            "| {} | {:.1} s ({:.0}/s) | {:.1} s ({:.0}/s) | {:.2}x | {:.1} s / {:.1} s | {:.0} MiB (RSS at end {:.0} MiB) | {:.1} s | {:.1} s / {:.1} s |\n",
            label(ctl),
            secs(ctl.ready),
            ctl.n as f64 / secs(ctl.ready),
            secs(base.ready),
            base.n as f64 / secs(base.ready),
            secs(ctl.ready) / secs(base.ready),
            secs(ctl.shoots),
            secs(base.shoots),
            ctl.hwm_mib,
            ctl.rss_mib,
            secs(ctl.cpu),
            secs(ctl.secrets),
            secs(base.secrets),
        ));
    }
    md.push('\n');
    if repeat > 1 {
        md.push_str(&medians(results));
    }
    md.push_str("Pace: when the bench had written all N Runtimes, and Shoots created per minute from the start (their `creationTimestamp`; the last minute is partial):\n\n");
    md.push_str("| Runtimes | Runtimes written (ctl / base) | Shoot creates per minute, controller | baseline |\n");
    md.push_str("| ---: | ---: | --- | --- |\n");
    for (ctl, base) in results {
        md.push_str(&format!(
            "| {} | {:.1} s / {:.1} s | {} | {} |\n",
            label(ctl),
            secs(ctl.runtimes_written),
            secs(base.runtimes_written),
            pace(&ctl.creates_per_minute),
            pace(&base.creates_per_minute),
        ));
    }
    md.push('\n');
    if let (Some((small_c, small_b)), Some((big_c, big_b))) = (results.first(), results.last())
        && big_c.n > small_c.n
    {
        md.push_str(&format!(
            "Scaling {} -> {} Runtimes ({:.0}x): controller {:.1}x the time, baseline {:.1}x.\n\n",
            small_c.n,
            big_c.n,
            big_c.n as f64 / small_c.n as f64,
            secs(big_c.ready) / secs(small_c.ready),
            secs(big_b.ready) / secs(small_b.ready),
        ));
    }
    let ctls: Vec<&Figures> = results.iter().map(|(ctl, _)| ctl).collect();
    md.push_str(&request_tables(&ctls, &label));
    md.push_str(&takeover_table(&ctls));
    md
}

/// The controller's requests to Gardener and to the runtime clusters per Runtime, one row per
/// run.
fn request_tables(ctls: &[&Figures], label: &dyn Fn(&Figures) -> String) -> String {
    let mut md = String::new();
    md.push_str("Gardener requests per Runtime (`infrastructure_manager_im_gardener_requests_total`, method and code; watches count as GET):\n\n");
    md.push_str("| Runtimes | creation until all Ready | writes answered 2xx / other writes (retries, refusals) per Runtime | \"try later\" answers | steady window, all Ready | Runtime reconciles in the window |\n");
    md.push_str("| ---: | --- | --- | --- | --- | --- |\n");
    for ctl in ctls {
        let writes = |ok: bool| -> u64 {
            ctl.gardener
                .iter()
                .filter(|(k, _)| !k.contains("method=\"GET\""))
                .filter(|(k, _)| k.contains("code=\"2") == ok)
                .map(|(_, v)| v)
                .sum()
        };
        md.push_str(&format!(
            "| {} | {} (total {}) | {:.2} / {:.2} | {} | {} requests in {:.0} s ({}) | {} |\n",
            label(ctl),
            per_runtime(&ctl.gardener, ctl.n),
            total(&ctl.gardener),
            writes(true) as f64 / ctl.n as f64,
            writes(false) as f64 / ctl.n as f64,
            if ctl.busy.is_empty() {
                "none".to_owned()
            } else {
                ctl.busy
                    .iter()
                    .map(|(k, v)| format!("{} {v}", short_labels(k)))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            total(&ctl.steady_gardener),
            secs(ctl.steady_window),
            per_runtime(&ctl.steady_gardener, ctl.n),
            if ctl.steady_reconciles.is_empty() {
                "none".to_owned()
            } else {
                ctl.steady_reconciles
                    .iter()
                    .map(|(k, v)| format!("{} {v}", short_labels(k)))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ));
    }
    md.push_str("\nRequests to the runtime cluster per Runtime (`infrastructure_manager_im_runtime_cluster_requests_total` and `infrastructure_manager_im_runtime_access_shoot_requests_total`, method and code; every Shoot's cluster is the test environment's one shoot apiserver):\n\n");
    md.push_str("| Runtimes | creation until all Ready | steady window, all Ready |\n");
    md.push_str("| ---: | --- | --- |\n");
    for ctl in ctls {
        md.push_str(&format!(
            "| {} | {} (total {}) | {} requests in {:.0} s ({}) |\n",
            label(ctl),
            per_runtime(&ctl.cluster, ctl.n),
            total(&ctl.cluster),
            total(&ctl.steady_cluster),
            secs(ctl.steady_window),
            per_runtime(&ctl.steady_cluster, ctl.n),
        ));
    }
    md
}

/// With `KIM_BENCH_BASELINE=0`: the controller runs alone (the baseline does not depend on the
/// controller's flags; a run at the default 5 QPS measures the controller's own client).
fn controller_report(ctls: &[Figures], c: usize, qps: u64) -> String {
    let mut md = format!(
        "Controller alone (KIM_BENCH_BASELINE=0). Simulator step delay 0; {c} writers in the bench and \
         `--runtime-ctrl-workers-cnt={c}`, `--gardener-cluster-ctrl-workers-cnt={c}`, \
         `--gardener-ratelimiter-qps/-burst={qps}`; {} cores; load average at the end {}; default \
         request timeouts.\n\n",
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        load_average()
    );
    md.push_str("| Runtimes | controller: all Ready | Shoots Succeeded | Runtimes written | Shoot creates per minute | peak RSS (VmHWM) | CPU | kubeconfig Secrets pre-written (not timed) |\n");
    md.push_str("| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n");
    for ctl in ctls {
        md.push_str(&format!(
            "| {} (run {}) | {:.1} s ({:.1}/s) | {:.1} s | {:.1} s | {} | {:.0} MiB (RSS at end {:.0} MiB) | {:.1} s | {:.1} s |\n",
            ctl.n,
            ctl.run + 1,
            secs(ctl.ready),
            ctl.n as f64 / secs(ctl.ready),
            secs(ctl.shoots),
            secs(ctl.runtimes_written),
            pace(&ctl.creates_per_minute),
            ctl.hwm_mib,
            ctl.rss_mib,
            secs(ctl.cpu),
            secs(ctl.secrets),
        ));
    }
    md.push('\n');
    let refs: Vec<&Figures> = ctls.iter().collect();
    md.push_str(&request_tables(&refs, &|f: &Figures| {
        format!("{} (run {})", f.n, f.run + 1)
    }));
    md.push_str(&takeover_table(&refs));
    md
}

/// Per size with more than one run: each run's ratio (controller / baseline, measured back to
/// back) and their median, so that one run's slow machine does not decide the figure.
fn medians(results: &[(Figures, Figures)]) -> String {
    let mut by_size: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for (ctl, base) in results {
        by_size
            .entry(ctl.n)
            .or_default()
            .push(secs(ctl.ready) / secs(base.ready));
    }
    let mut out = String::new();
    for (n, ratios) in by_size {
        let listed: Vec<String> = ratios.iter().map(|r| format!("{r:.2}x")).collect();
        out.push_str(&format!(
            "{n} Runtimes, {} runs: controller / baseline {}; median **{:.2}x**.\n\n",
            ratios.len(),
            listed.join(", "),
            median(ratios),
        ));
    }
    out
}

/// The median (the mean of the middle two for an even count); 0 for none.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        l if l % 2 == 1 => v[l / 2],
        l => (v[l / 2 - 1] + v[l / 2]) / 2.0,
    }
}

/// Creates per minute: the first five minutes one by one, then the range of the full minutes
/// after them.
fn pace(per_minute: &[u64]) -> String {
    let head: Vec<String> = per_minute.iter().take(5).map(u64::to_string).collect();
    let mut out = head.join(", ");
    // The last minute is partial; the range covers the full ones after the first five.
    if let Some(rest) = per_minute.get(5..per_minute.len().saturating_sub(1))
        && let (Some(lo), Some(hi)) = (rest.iter().min(), rest.iter().max())
    {
        out.push_str(&format!(
            ", then {lo}-{hi} for {} minutes, {} in the last",
            rest.len(),
            per_minute.last().copied().unwrap_or(0)
        ));
    }
    out
}

/// Replaces the marked block in docs/benchmarks.md (creating the section if absent). One block
/// per client rate: the bench at the default 5 QPS and at 500 QPS measures different limits
/// (the controller's own client, gardener-apiserver's admission).
fn write_doc(block: &str, qps: u64) -> Result<()> {
    write_doc_block(
        &repo_root().join("docs/benchmarks.md"),
        &format!("controller-bench-qps{qps}"),
        &format!("`make bench-controller` with KIM_BENCH_QPS={qps}"),
        "## Controller (`make bench-controller`)",
        block,
    )?;
    Ok(())
}

/// Run by `make bench-controller` (a bench target without the test harness).
fn main() -> Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(bench_controller())
}

async fn bench_controller() -> Result<()> {
    let sizes = sizes()?;
    let c = knob("KIM_BENCH_CONCURRENCY", 32).max(1) as usize;
    let qps = knob("KIM_BENCH_QPS", 500).max(1);
    let steady = Duration::from_secs(knob("KIM_BENCH_STEADY_SECS", 60));
    let repeat = knob("KIM_BENCH_REPEAT", 1).clamp(1, 26) as usize;
    controller_binary()?;
    let opts = TestEnvOptions::default();
    let step_delay = opts.simulator.as_ref().map(|s| s.step_delay);
    if step_delay != Some(Duration::ZERO) {
        bail!("the simulator must run at zero step delay, is {step_delay:?}");
    }
    let env = TestEnv::start(opts).await?;
    // One admin credential for the shoot apiserver, used by every kubeconfig Secret.
    let kubeconfig = env.shoot()?.admin_kubeconfig();

    let baseline = knob("KIM_BENCH_BASELINE", 1) != 0;
    let mut results = Vec::new();
    let mut alone = Vec::new();
    for n in sizes {
        for run in 0..repeat {
            let which = format!("{n} Runtimes, run {} of {repeat}", run + 1);
            eprintln!("== controller run, {which} (load {})", load_average());
            let ctl = controller_run(&env, n, run, &kubeconfig, c, qps, steady).await?;
            eprintln!(
                "   all Ready in {:.1} s, peak RSS {:.0} MiB",
                secs(ctl.ready),
                ctl.hwm_mib
            );
            if !baseline {
                alone.push(ctl);
                continue;
            }
            eprintln!("== baseline run, {which} (load {})", load_average());
            let base = baseline_run(&env, n, run, &kubeconfig, c, &ctl).await?;
            eprintln!("   all Ready in {:.1} s", secs(base.ready));
            results.push((ctl, base));
        }
    }
    if !baseline {
        // Not written to docs/benchmarks.md: its blocks hold controller and baseline side by side.
        println!(
            "== make bench-controller ==\n{}",
            controller_report(&alone, c, qps)
        );
        return Ok(());
    }
    let md = report(&results, c, qps, repeat);
    println!("== make bench-controller ==\n{md}");
    if std::env::var("KIM_BENCH_NO_DOC").is_err() {
        write_doc(&md, qps)?;
        println!("(written to docs/benchmarks.md)");
    }
    Ok(())
}
