//! `make soak`: steady churn against the real control plane for `KIM_SOAK_SECS` (3600), with
//! `kim-controller` and `kim-webhook` each running as its own process (so the figures read
//! from /proc are theirs), started as `kim-dev` starts them (`kim_tests::programs`).
//!
//! The environment: etcd, the KCP kube-apiserver with the real gardener-apiserver, the shoot
//! apiserver and the Gardener simulator (zero step delay). Our webhook configurations are
//! registered (scoped to `kcp-system`, as deployed), so every Runtime and RuntimeAccess write
//! of the churn passes the webhooks. The controller runs with short rotation periods: admin
//! kubeconfigs of 600 s (Gardener's minimum) with `--minimal-rotation-time=0.05` (a rotation
//! about every 29 s per GardenerCluster) and RuntimeAccess tokens of 600 s with
//! `--access-rotation-ratio=0.05` (one about every 30 s per RuntimeAccess).
//!
//! The churn: `KIM_SOAK_RUNTIMES` (8) Runtimes are created at the start; then every
//! `KIM_SOAK_TICK_SECS` (5) one action, in this cycle: create a Runtime; change a Runtime's
//! worker pool (its maximum); hibernate a Shoot or wake one (as Kyma's hibernator does, on the
//! Shoot); issue a RuntimeAccess (a token kubeconfig for a Role in the shoot); delete the
//! oldest RuntimeAccess once more than `KIM_SOAK_ACCESSES` (4) exist; delete the oldest
//! Runtime without a RuntimeAccess (deletion confirmed as the webhook demands) once more than
//! `KIM_SOAK_RUNTIMES` exist. So the population stays put while every object is replaced
//! again and again.
//!
//! Every `KIM_SOAK_SAMPLE_SECS` (30), for both processes: VmRSS, open file descriptors
//! (`/proc/PID/fd`), threads (`/proc/PID/task`), and tokio task gauges when their `/metrics`
//! has any. After `KIM_SOAK_WARMUP_SECS` (600; capped at a third of the run) the verdicts are
//! computed over the rest, with windows of `KIM_SOAK_WINDOW_SECS` (300; capped at a third of
//! the measured span): RSS growth = last window's average over the first window's (target at
//! most 5 %); fds and threads flat = the last window's maximum at most the first window's
//! maximum plus max(4, 10 %) (max - min over the span is printed as well). Then the churn
//! stops and, within `KIM_SOAK_SETTLE_SECS` (300), everything must converge: every Runtime
//! Ready at its generation, every GardenerCluster Ready and one per Runtime, Shoots exactly
//! those of the Runtimes, every RuntimeAccess Ready, no Secret in `kcp-system` but the
//! Runtimes' kubeconfigs and the RuntimeAccesses' Secrets, and no ServiceAccount in the shoot
//! but those of the RuntimeAccesses.
//!
//! Prints the figures and verdicts, writes them into docs/benchmarks.md (not with
//! `KIM_SOAK_NO_DOC=1`) and exits non-zero when a verdict fails. The samples go to
//! `target/soak/samples.csv`, the programs' logs to `target/soak/` (`KIM_SOAK_DIR` to change). The binaries are taken
//! from the bench's own profile directory (`KIM_SOAK_BIN_DIR` to override).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use kim_shared::api::runtime_access::RuntimeAccess;
use kim_shared::api::{GardenerCluster, Runtime, RuntimeState};
use kim_shared::gardener::Shoot;
use kim_shared::names;
use kim_tests::bench::{load_average, status_kib, write_doc_block};
use kim_tests::controller::{controller_files, shoot_name};
use kim_tests::fixtures;
use kim_tests::programs::{self, CONTROLLER, RunningProgram, Started, WEBHOOK};
use kim_tests::testenv::{TestEnv, TestEnvOptions, repo_root};
use kim_tests::webhook::runtime_resource;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

const NS: &str = "kcp-system";
/// Target: RSS of the last window at most this much above the first window's.
const RSS_GROWTH_TARGET: f64 = 0.05;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Debug, Clone, Copy)]
struct Knobs {
    secs: u64,
    warmup: u64,
    sample: u64,
    window: u64,
    tick: u64,
    runtimes: usize,
    accesses: usize,
    settle: u64,
}

impl Knobs {
    fn from_env() -> Self {
        let secs = knob("KIM_SOAK_SECS", 3600).max(60);
        let warmup = knob("KIM_SOAK_WARMUP_SECS", 600).min(secs / 3);
        let window = knob("KIM_SOAK_WINDOW_SECS", 300).min((secs - warmup) / 3);
        Knobs {
            secs,
            warmup,
            sample: knob("KIM_SOAK_SAMPLE_SECS", 30).max(1),
            window,
            tick: knob("KIM_SOAK_TICK_SECS", 5).max(1),
            runtimes: knob("KIM_SOAK_RUNTIMES", 8).max(2) as usize,
            accesses: knob("KIM_SOAK_ACCESSES", 4).max(1) as usize,
            settle: knob("KIM_SOAK_SETTLE_SECS", 300),
        }
    }
}

/// What /proc and /metrics say about one process at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct ProcSample {
    rss_kib: u64,
    /// The anonymous part of the RSS (heap, stacks): pages of the binary that are touched for
    /// the first time late (a rare code path) make VmRSS grow without any allocation.
    anon_kib: u64,
    fds: u64,
    threads: u64,
    /// Sum of the tokio task gauges of its /metrics, when it has any.
    tasks: Option<f64>,
}

#[derive(Debug, Clone)]
struct Sample {
    /// Seconds since the churn started.
    t: f64,
    /// Controller, webhook.
    procs: [ProcSample; 2],
}

const NAMES: [&str; 2] = ["kim-controller", "kim-webhook"];

fn read_proc(pid: u32) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| status_kib(&status, key);
    let count =
        |d: &str| std::fs::read_dir(format!("/proc/{pid}/{d}")).map_or(0, |r| r.count() as u64);
    Some(ProcSample {
        rss_kib: kib("VmRSS:")?,
        anon_kib: kib("RssAnon:")?,
        fds: count("fd"),
        threads: count("task"),
        tasks: None,
    })
}

/// The sum of the tokio task gauges in a /metrics text (any series whose name mentions tokio
/// and tasks), or `None` when there are none.
fn tokio_tasks(metrics: &str) -> Option<f64> {
    let values: Vec<f64> = metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            let name = l.split(['{', ' ']).next().unwrap_or_default();
            name.contains("tokio") && name.contains("task")
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

async fn scrape(addr: SocketAddr) -> String {
    programs::http_get(addr, "/metrics")
        .await
        .map(|(_, body)| body)
        .unwrap_or_default()
}

/// Counts of the churn's actions: (succeeded, failed) per kind, and the first errors.
#[derive(Default)]
struct Ops {
    counts: BTreeMap<&'static str, (u64, u64)>,
    errors: Vec<String>,
}

impl Ops {
    fn record(&mut self, kind: &'static str, r: Result<bool>) {
        let e = self.counts.entry(kind).or_default();
        match r {
            Ok(true) => e.0 += 1,
            Ok(false) => {}
            Err(err) => {
                e.1 += 1;
                let line = format!("{kind}: {err:#}");
                eprintln!("  churn: {line}");
                if self.errors.len() < 10 {
                    self.errors.push(line);
                }
            }
        }
    }
}

/// The churn's view of what it created.
struct World {
    kcp: kube::Client,
    garden: kube::Client,
    shoot_ns: String,
    runtimes: Api<DynamicObject>,
    /// Runtime ids, oldest first.
    live: VecDeque<String>,
    /// RuntimeAccess names with their runtime id, oldest first.
    accesses: VecDeque<(String, String)>,
    /// Runtime ids whose Shoot the churn hibernated.
    hibernated: VecDeque<String>,
    next: u64,
    template: Value,
}

impl World {
    async fn create_runtime(&mut self) -> Result<bool> {
        let id = format!("soak-{:05}", self.next);
        self.next += 1;
        let mut rt = self.template.clone();
        rt["metadata"]["name"] = json!(id);
        rt["metadata"]["namespace"] = json!(NS);
        for label in [names::LABEL_RUNTIME_ID, names::LABEL_KYMA_NAME] {
            rt["metadata"]["labels"][label] = json!(id);
        }
        rt["metadata"]["labels"][names::LABEL_SHOOT_NAME] = json!(shoot_name(&id));
        rt["spec"]["shoot"]["name"] = json!(shoot_name(&id));
        let obj: DynamicObject = serde_json::from_value(rt)?;
        self.runtimes
            .create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating Runtime {id}"))?;
        self.live.push_back(id);
        Ok(true)
    }

    /// The `n`-th live Runtime, counting round the list.
    fn pick(&self, n: u64) -> Option<String> {
        (!self.live.is_empty()).then(|| self.live[(n % self.live.len() as u64) as usize].clone())
    }

    async fn update_workers(&mut self, n: u64) -> Result<bool> {
        let Some(id) = self.pick(n) else {
            return Ok(false);
        };
        let rt = self.runtimes.get(&id).await?;
        let mut workers = rt.data["spec"]["shoot"]["provider"]["workers"].clone();
        let max = workers[0]["maximum"].as_u64().unwrap_or(20);
        workers[0]["maximum"] = json!(if max == 20 { 21 } else { 20 });
        self.runtimes
            .patch(
                &id,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"shoot": {"provider": {"workers": workers}}}})),
            )
            .await
            .with_context(|| format!("changing the worker pool of {id}"))?;
        Ok(true)
    }

    /// Wakes the longest-hibernated Shoot on every other call while one is hibernated, else
    /// hibernates the Shoot of a Runtime that is not.
    async fn hibernate_or_wake(&mut self, n: u64) -> Result<bool> {
        let shoots: Api<Shoot> = Api::namespaced(self.garden.clone(), fixtures::PROJECT_NAMESPACE);
        let (id, enabled) =
            if !self.hibernated.is_empty() && (n.is_multiple_of(2) || self.hibernated.len() > 2) {
                (self.hibernated.pop_front().unwrap(), false)
            } else {
                let Some(id) = (0..self.live.len() as u64)
                    .filter_map(|k| self.pick(n + k))
                    .find(|id| !self.hibernated.contains(id))
                else {
                    return Ok(false);
                };
                self.hibernated.push_back(id.clone());
                (id, true)
            };
        shoots
            .patch(
                &shoot_name(&id),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"hibernation": {"enabled": enabled}}})),
            )
            .await
            .with_context(|| format!("setting hibernation of {id}'s Shoot to {enabled}"))?;
        Ok(true)
    }

    async fn issue_access(&mut self, n: u64) -> Result<bool> {
        let Some(id) = self.pick(n) else {
            return Ok(false);
        };
        let name = format!("soak-ra-{:05}", n);
        let ra: RuntimeAccess = serde_json::from_value(json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
            "kind": "RuntimeAccess",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "runtimeId": id,
                "serviceAccount": {"name": name, "namespace": self.shoot_ns},
                "role": {"namespace": self.shoot_ns,
                         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
                "tokenExpirationSeconds": 600
            }
        }))?;
        Api::<RuntimeAccess>::namespaced(self.kcp.clone(), NS)
            .create(&PostParams::default(), &ra)
            .await
            .with_context(|| format!("creating RuntimeAccess {name}"))?;
        self.accesses.push_back((name, id));
        Ok(true)
    }

    async fn drop_access(&mut self, cap: usize) -> Result<bool> {
        if self.accesses.len() <= cap {
            return Ok(false);
        }
        let (name, _) = self.accesses.pop_front().unwrap();
        Api::<RuntimeAccess>::namespaced(self.kcp.clone(), NS)
            .delete(&name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting RuntimeAccess {name}"))?;
        Ok(true)
    }

    async fn delete_runtime(&mut self, keep: usize) -> Result<bool> {
        if self.live.len() <= keep {
            return Ok(false);
        }
        let Some(pos) = self
            .live
            .iter()
            .position(|id| !self.accesses.iter().any(|(_, r)| r == id))
        else {
            return Ok(false);
        };
        let id = self.live.remove(pos).unwrap();
        self.hibernated.retain(|h| *h != id);
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        self.runtimes
            .patch(
                &id,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    names::ANNOTATION_DELETION_CONFIRMED: now}}})),
            )
            .await
            .with_context(|| format!("confirming the deletion of {id}"))?;
        self.runtimes
            .delete(&id, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting Runtime {id}"))?;
        Ok(true)
    }
}

/// Counts changes of the data of the Secrets in `kcp-system`: admin kubeconfigs
/// (`kubeconfig-*`) and the rest (RuntimeAccess tokens).
#[derive(Default)]
struct Rotations {
    seen: HashMap<String, u64>,
    admin: u64,
    tokens: u64,
}

fn watch_rotations(kcp: kube::Client) -> (Arc<Mutex<Rotations>>, tokio::task::JoinHandle<()>) {
    let state = Arc::new(Mutex::new(Rotations::default()));
    let s = state.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher(
            Api::<Secret>::namespaced(kcp, NS),
            watcher::Config::default(),
        )
        .default_backoff()
        .applied_objects()
        .boxed();
        while let Some(item) = stream.next().await {
            let Ok(secret) = item else { continue };
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for (k, v) in secret.data.iter().flatten() {
                k.hash(&mut h);
                v.0.hash(&mut h);
            }
            let hash = h.finish();
            let name = secret.name_any();
            let mut r = s.lock().unwrap();
            if let Some(old) = r.seen.insert(name.clone(), hash)
                && old != hash
            {
                if name.starts_with("kubeconfig-") {
                    r.admin += 1;
                } else {
                    r.tokens += 1;
                }
            }
        }
    });
    (state, task)
}

fn runtime_ready(rt: &Runtime) -> bool {
    rt.status.as_ref().is_some_and(|s| {
        s.state == RuntimeState::Ready && s.observed_generation == rt.metadata.generation
    })
}

/// What is not (yet) converged; empty when everything is.
async fn unconverged(
    kcp: &kube::Client,
    garden: &kube::Client,
    shoot: &kube::Client,
    shoot_ns: &str,
    secrets_before: &BTreeSet<String>,
) -> Result<Vec<String>> {
    let lp = ListParams::default();
    let mut out = Vec::new();
    let rts = Api::<Runtime>::namespaced(kcp.clone(), NS)
        .list(&lp)
        .await?
        .items;
    let ids: BTreeSet<String> = rts.iter().map(ResourceExt::name_any).collect();
    for rt in &rts {
        if !runtime_ready(rt) {
            out.push(format!(
                "Runtime {} not Ready at its generation ({:?}, deleting: {})",
                rt.name_any(),
                rt.status.as_ref().map(|s| &s.state),
                rt.meta().deletion_timestamp.is_some()
            ));
        }
    }
    let gcs = Api::<GardenerCluster>::namespaced(kcp.clone(), NS)
        .list(&lp)
        .await?
        .items;
    for gc in &gcs {
        let state = gc.status.as_ref().and_then(|s| s.state.as_deref());
        if state != Some("Ready") {
            out.push(format!("GardenerCluster {} is {state:?}", gc.name_any()));
        }
    }
    let gc_names: BTreeSet<String> = gcs.iter().map(ResourceExt::name_any).collect();
    if gc_names != ids {
        out.push(format!(
            "GardenerClusters {gc_names:?} do not match the Runtimes {ids:?}"
        ));
    }
    let want_shoots: BTreeSet<String> = rts.iter().map(|r| r.spec.shoot.name.clone()).collect();
    let shoots: BTreeSet<String> =
        Api::<Shoot>::namespaced(garden.clone(), fixtures::PROJECT_NAMESPACE)
            .list(&lp)
            .await?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
    if shoots != want_shoots {
        out.push(format!(
            "Shoots {shoots:?} do not match the Runtimes' {want_shoots:?}"
        ));
    }
    let ras = Api::<RuntimeAccess>::namespaced(kcp.clone(), NS)
        .list(&lp)
        .await?
        .items;
    let mut want_secrets: BTreeSet<String> = ids
        .iter()
        .map(|id| names::kubeconfig_secret_name(id))
        .collect();
    for ra in &ras {
        let status = ra.status.as_ref();
        if status.and_then(|s| s.state.as_deref()) != Some("Ready") {
            out.push(format!(
                "RuntimeAccess {} is {:?}",
                ra.name_any(),
                status.and_then(|s| s.state.as_deref())
            ));
        }
        if let Some(r) = status.and_then(|s| s.secret_ref.as_ref()) {
            want_secrets.insert(r.name.clone());
        }
    }
    let secrets: BTreeSet<String> = Api::<Secret>::namespaced(kcp.clone(), NS)
        .list(&lp)
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .filter(|n| !secrets_before.contains(n))
        .collect();
    let leftover: Vec<&String> = secrets.difference(&want_secrets).collect();
    let missing: Vec<&String> = want_secrets.difference(&secrets).collect();
    if !leftover.is_empty() || !missing.is_empty() {
        out.push(format!(
            "Secrets in {NS}: leftover {leftover:?}, missing {missing:?}"
        ));
    }
    let want_sas: BTreeSet<String> = ras.iter().map(ResourceExt::name_any).collect();
    let sas: BTreeSet<String> = Api::<ServiceAccount>::namespaced(shoot.clone(), shoot_ns)
        .list(&lp)
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .filter(|n| n != "default")
        .collect();
    if sas != want_sas {
        out.push(format!(
            "ServiceAccounts in the shoot {sas:?} do not match the RuntimeAccesses {want_sas:?}"
        ));
    }
    Ok(out)
}

/// Figures of one series (one process, one quantity) after the warm-up.
#[derive(Debug, Clone, Copy)]
struct Series {
    first_avg: f64,
    last_avg: f64,
    first_max: f64,
    last_max: f64,
    min: f64,
    max: f64,
}

fn series(samples: &[Sample], k: &Knobs, end: f64, f: impl Fn(&Sample) -> f64) -> Option<Series> {
    let (w0, w) = (k.warmup as f64, k.window as f64);
    let after: Vec<&Sample> = samples.iter().filter(|s| s.t >= w0).collect();
    let first: Vec<f64> = after
        .iter()
        .filter(|s| s.t < w0 + w)
        .map(|s| f(s))
        .collect();
    let last: Vec<f64> = after
        .iter()
        .filter(|s| s.t > end - w)
        .map(|s| f(s))
        .collect();
    let all: Vec<f64> = after.iter().map(|s| f(s)).collect();
    if first.is_empty() || last.is_empty() {
        return None;
    }
    let avg = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let max = |v: &[f64]| v.iter().copied().fold(f64::MIN, f64::max);
    Some(Series {
        first_avg: avg(&first),
        last_avg: avg(&last),
        first_max: max(&first),
        last_max: max(&last),
        min: all.iter().copied().fold(f64::MAX, f64::min),
        max: max(&all),
    })
}

/// Flat: the last window's maximum at most the first window's plus max(4, 10 %).
fn flat(s: &Series) -> bool {
    s.last_max <= s.first_max + (s.first_max * 0.10).max(4.0)
}

fn bin_dir() -> Result<PathBuf> {
    if let Ok(p) = std::env::var("KIM_SOAK_BIN_DIR") {
        return Ok(PathBuf::from(p));
    }
    // target/<profile>/deps/soak-<hash> -> target/<profile>/
    let exe = std::env::current_exe()?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .context("no directory above the bench binary")
}

async fn start_program(
    env: &TestEnv,
    p: &programs::Program,
    dir: &Path,
    config: &Path,
    extra: &[String],
) -> Result<RunningProgram> {
    match programs::start(env, p, &bin_dir()?, dir, config, extra).await? {
        Started::Running(r) => Ok(*r),
        Started::NotBuilt(bin) => bail!(
            "{} is missing: `make soak` builds it (cargo build --release -p kim-controller -p kim-webhook)",
            bin.display()
        ),
        Started::DoesNothing => bail!("{} does not run anything", p.binary),
    }
}

/// Run by `make soak` (a bench target without the test harness).
fn main() -> Result<()> {
    let passed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(soak())?;
    if !passed {
        eprintln!("soak: a verdict failed (see above)");
        std::process::exit(1);
    }
    Ok(())
}

async fn soak() -> Result<bool> {
    let k = Knobs::from_env();
    let out_dir = std::env::var("KIM_SOAK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("target/soak"));
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir)?;
    eprintln!(
        "soak: {k:?}; starting the control plane (load {})",
        load_average()
    );
    let env = TestEnv::start(TestEnvOptions::default()).await?;
    let kcp = env.kcp_client().await?;
    let garden = env.garden_client().await?;
    let shoot = env.shoot_client().await?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}}))?;
    Api::<Namespace>::all(kcp.clone())
        .patch(NS, &PatchParams::apply("kim-soak"), &Patch::Apply(&ns))
        .await?;
    // The KIM configuration and the audit-log Secrets the Shoots reference.
    let files = controller_files(&env, &Default::default()).await?;

    let garden_kubeconfig = out_dir.join("webhook/garden.kubeconfig");
    let webhook = start_program(
        &env,
        WEBHOOK,
        &out_dir.join("webhook"),
        &files.config,
        &[format!(
            "--gardener-kubeconfig-path={}",
            garden_kubeconfig.display()
        )],
    )
    .await?;
    let controller = start_program(
        &env,
        CONTROLLER,
        &out_dir.join("controller"),
        &files.config,
        &[
            format!("--namespace={NS}"),
            "--kubeconfig-expiration-time=600s".into(),
            "--minimal-rotation-time=0.05".into(),
            "--access-rotation-ratio=0.05".into(),
            "--gardener-ratelimiter-qps=20".into(),
            "--gardener-ratelimiter-burst=20".into(),
        ],
    )
    .await?;
    let mut procs = [controller, webhook];
    let pids = [
        procs[0].process.pid().context("controller pid")?,
        procs[1].process.pid().context("webhook pid")?,
    ];
    let metrics = [procs[0].metrics, procs[1].metrics];
    let has_tasks = [
        tokio_tasks(&scrape(metrics[0]).await).is_some(),
        tokio_tasks(&scrape(metrics[1]).await).is_some(),
    ];
    eprintln!(
        "soak: controller pid {} (log {}), webhook pid {} (log {})",
        pids[0],
        procs[0].log.display(),
        pids[1],
        procs[1].log.display()
    );

    let secrets_before: BTreeSet<String> = Api::<Secret>::namespaced(kcp.clone(), NS)
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let (rotations, rotation_task) = watch_rotations(kcp.clone());
    let shoot_ns = env.shoot_namespace("soak").await?;
    let mut world = World {
        kcp: kcp.clone(),
        garden: garden.clone(),
        shoot_ns: shoot_ns.clone(),
        runtimes: Api::namespaced_with(kcp.clone(), NS, &runtime_resource()),
        live: VecDeque::new(),
        accesses: VecDeque::new(),
        hibernated: VecDeque::new(),
        next: 0,
        template: programs::sample()?,
    };
    let mut ops = Ops::default();

    // Sampling runs beside the churn.
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let t0 = Instant::now();
    let sampler = {
        let samples = samples.clone();
        let every = Duration::from_secs(k.sample);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let mut s = Sample {
                    t: t0.elapsed().as_secs_f64(),
                    procs: [ProcSample::default(); 2],
                };
                for i in 0..2 {
                    let Some(mut p) = read_proc(pids[i]) else {
                        continue;
                    };
                    if has_tasks[i] {
                        p.tasks = tokio_tasks(&scrape(metrics[i]).await);
                    }
                    s.procs[i] = p;
                }
                samples.lock().unwrap().push(s);
            }
        })
    };

    for _ in 0..k.runtimes {
        let r = world.create_runtime().await;
        ops.record("create Runtime", r);
    }
    let churn_end = Duration::from_secs(k.secs);
    let mut tick = tokio::time::interval(Duration::from_secs(k.tick));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n: u64 = 0;
    let mut next_report = Duration::from_secs(60);
    let step_timeout = Duration::from_secs(30);
    while t0.elapsed() < churn_end {
        tick.tick().await;
        for p in procs.iter_mut() {
            p.process.check_running()?;
        }
        let cycle = n / 6;
        let (kind, r) = match n % 6 {
            0 => (
                "create Runtime",
                tokio::time::timeout(step_timeout, world.create_runtime()).await,
            ),
            1 => (
                "change worker pool",
                tokio::time::timeout(step_timeout, world.update_workers(cycle)).await,
            ),
            2 => (
                "hibernate/wake Shoot",
                tokio::time::timeout(step_timeout, world.hibernate_or_wake(cycle)).await,
            ),
            3 => (
                "issue RuntimeAccess",
                tokio::time::timeout(step_timeout, world.issue_access(cycle)).await,
            ),
            4 => (
                "delete RuntimeAccess",
                tokio::time::timeout(step_timeout, world.drop_access(k.accesses)).await,
            ),
            _ => (
                "delete Runtime",
                tokio::time::timeout(step_timeout, world.delete_runtime(k.runtimes)).await,
            ),
        };
        ops.record(
            kind,
            r.unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {step_timeout:?}"))),
        );
        n += 1;
        if t0.elapsed() >= next_report {
            let last = samples.lock().unwrap().last().cloned();
            if let Some(s) = last {
                eprintln!(
                    "  {:>5.0} s: controller RSS {:.1} MiB fds {} threads {}; webhook RSS {:.1} MiB fds {} threads {}; Runtimes {} RuntimeAccesses {} (load {})",
                    s.t,
                    s.procs[0].rss_kib as f64 / 1024.0,
                    s.procs[0].fds,
                    s.procs[0].threads,
                    s.procs[1].rss_kib as f64 / 1024.0,
                    s.procs[1].fds,
                    s.procs[1].threads,
                    world.live.len(),
                    world.accesses.len(),
                    load_average()
                );
            }
            next_report += Duration::from_secs(60);
        }
    }
    let churned = t0.elapsed().as_secs_f64();
    sampler.abort();
    let samples = samples.lock().unwrap().clone();
    let (admin_rotations, token_rotations) = {
        let r = rotations.lock().unwrap();
        (r.admin, r.tokens)
    };
    rotation_task.abort();

    // Convergence once the churn has stopped.
    eprintln!("soak: churn stopped after {churned:.0} s; waiting for convergence");
    let settle_start = Instant::now();
    let mut problems;
    loop {
        problems = unconverged(&kcp, &garden, &shoot, &shoot_ns, &secrets_before)
            .await
            .unwrap_or_else(|e| vec![format!("listing: {e:#}")]);
        if problems.is_empty() || settle_start.elapsed() > Duration::from_secs(k.settle) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let settled = settle_start.elapsed();
    for p in procs.iter_mut() {
        p.process.check_running()?;
    }
    let controller_metrics = scrape(metrics[0]).await;
    let webhook_metrics = scrape(metrics[1]).await;

    // Figures and verdicts.
    let mut md = String::new();
    let mut passed = true;
    md.push_str(&format!(
        "{:.0} s of churn ({} s warm-up, windows of {} s, a sample every {} s: {} samples), \
         {} Runtimes kept, one action every {} s; {} build; {} cores, load average at the end {}.\n\n",
        churned,
        k.warmup,
        k.window,
        k.sample,
        samples.len(),
        k.runtimes,
        k.tick,
        if cfg!(debug_assertions) { "debug" } else { "release" },
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        load_average()
    ));
    md.push_str("| churn action | done | failed |\n| --- | ---: | ---: |\n");
    for (kind, (okc, errc)) in &ops.counts {
        md.push_str(&format!("| {kind} | {okc} | {errc} |\n"));
    }
    md.push_str(&format!(
        "| admin kubeconfig rotations (Secret data changed) | {admin_rotations} | |\n\
         | RuntimeAccess token rotations (Secret data changed) | {token_rotations} | |\n\n"
    ));
    let sum = kim_tests::controller::metric_sum;
    const ADMISSIONS: &str = "kim_webhook_admission_requests_total";
    md.push_str(&format!(
        "Gardener requests of the controller in the whole run: {:.0}; admissions answered by \
         the webhook: {:.0} (denied: {:.0}).\n\n",
        sum(
            &controller_metrics,
            "infrastructure_manager_im_gardener_requests_total",
            &[]
        ),
        sum(&webhook_metrics, ADMISSIONS, &[]),
        // An empty sum is -0.0.
        sum(&webhook_metrics, ADMISSIONS, &["allowed=\"false\""]).abs(),
    ));
    md.push_str("| process | quantity | first window avg | last window avg | growth | max - min after warm-up (first / last window max) | verdict |\n");
    md.push_str("| --- | --- | ---: | ---: | ---: | ---: | --- |\n");
    for (i, name) in NAMES.iter().enumerate() {
        let rss = series(&samples, &k, churned, |s| {
            s.procs[i].rss_kib as f64 / 1024.0
        });
        let anon = series(&samples, &k, churned, |s| {
            s.procs[i].anon_kib as f64 / 1024.0
        });
        let fds = series(&samples, &k, churned, |s| s.procs[i].fds as f64);
        let threads = series(&samples, &k, churned, |s| s.procs[i].threads as f64);
        let (Some(rss), Some(anon), Some(fds), Some(threads)) = (rss, anon, fds, threads) else {
            md.push_str(&format!(
                "| {name} | | | | | too few samples after the warm-up | FAILED |\n"
            ));
            passed = false;
            continue;
        };
        let growth = rss.last_avg / rss.first_avg - 1.0;
        let rss_ok = growth <= RSS_GROWTH_TARGET;
        passed &= rss_ok;
        md.push_str(&format!(
            "| {name} | RSS (MiB) | {:.1} | {:.1} | {:+.1} % | {:.1} ({:.1} / {:.1}) | {} (target <= {:.0} %) |\n",
            rss.first_avg,
            rss.last_avg,
            growth * 100.0,
            rss.max - rss.min,
            rss.first_max,
            rss.last_max,
            if rss_ok { "met" } else { "NOT met" },
            RSS_GROWTH_TARGET * 100.0
        ));
        md.push_str(&format!(
            "| {name} | of it anonymous (RssAnon, MiB) | {:.1} | {:.1} | {:+.1} % | {:.1} ({:.1} / {:.1}) | (not a verdict) |\n",
            anon.first_avg,
            anon.last_avg,
            (anon.last_avg / anon.first_avg - 1.0) * 100.0,
            anon.max - anon.min,
            anon.first_max,
            anon.last_max,
        ));
        for (what, s) in [("open fds", fds), ("threads", threads)] {
            let ok = flat(&s);
            passed &= ok;
            md.push_str(&format!(
                "| {name} | {what} | {:.1} | {:.1} | {:+.1} | {:.0} ({:.0} / {:.0}) | {} |\n",
                s.first_avg,
                s.last_avg,
                s.last_avg - s.first_avg,
                s.max - s.min,
                s.first_max,
                s.last_max,
                if ok { "flat" } else { "NOT flat" }
            ));
        }
        match series(&samples, &k, churned, |s| s.procs[i].tasks.unwrap_or(0.0)) {
            Some(t) if has_tasks[i] => md.push_str(&format!(
                "| {name} | tokio tasks | {:.1} | {:.1} | {:+.1} | {:.0} ({:.0} / {:.0}) | {} |\n",
                t.first_avg,
                t.last_avg,
                t.last_avg - t.first_avg,
                t.max - t.min,
                t.first_max,
                t.last_max,
                if flat(&t) { "flat" } else { "NOT flat" }
            )),
            _ => md.push_str(&format!(
                "| {name} | tokio tasks | | | | its /metrics exposes no tokio task gauge | not measured |\n"
            )),
        }
    }
    md.push('\n');
    if problems.is_empty() {
        md.push_str(&format!(
            "Converged {:.0} s after the churn stopped: every Runtime Ready at its generation, \
             one Ready GardenerCluster per Runtime, Shoots exactly the Runtimes', every \
             RuntimeAccess Ready, no leftover Secret or ServiceAccount.\n",
            settled.as_secs_f64()
        ));
    } else {
        passed = false;
        md.push_str(&format!(
            "NOT converged {:.0} s after the churn stopped:\n\n",
            settled.as_secs_f64()
        ));
        for p in &problems {
            md.push_str(&format!("- {p}\n"));
        }
    }
    if !ops.errors.is_empty() {
        md.push_str("\nFirst churn errors:\n\n");
        for e in &ops.errors {
            md.push_str(&format!("- {e}\n"));
        }
    }

    let mut csv = String::from(
        "t_s,ctl_rss_kib,ctl_anon_kib,ctl_fds,ctl_threads,ctl_tasks,wh_rss_kib,wh_anon_kib,wh_fds,wh_threads,wh_tasks\n",
    );
    for s in &samples {
        let p = |i: usize| {
            let q = &s.procs[i];
            format!(
                "{},{},{},{},{}",
                q.rss_kib,
                q.anon_kib,
                q.fds,
                q.threads,
                q.tasks.map(|t| t.to_string()).unwrap_or_default()
            )
        };
        csv.push_str(&format!("{:.0},{},{}\n", s.t, p(0), p(1)));
    }
    std::fs::write(out_dir.join("samples.csv"), csv)?;
    println!("== make soak ==\n{md}");
    println!("soak: {}", if passed { "PASSED" } else { "FAILED" });
    if std::env::var("KIM_SOAK_NO_DOC").is_err() {
        write_doc(&md)?;
        println!(
            "(written to docs/benchmarks.md; samples in {})",
            out_dir.join("samples.csv").display()
        );
    }
    drop(procs);
    drop(files);
    Ok(passed)
}

/// Replaces the marked block in docs/benchmarks.md (creating the section if absent).
fn write_doc(block: &str) -> Result<()> {
    write_doc_block(
        &repo_root().join("docs/benchmarks.md"),
        "soak",
        "`make soak`",
        "## Soak (`make soak`)",
        block,
    )?;
    Ok(())
}
