//! The controller in a test process against a [`TestEnv`]: its flags, how it reaches the
//! clusters, starting, stopping and killing it, its metrics, and the Runtimes the tests create
//! (the sample made provisionable, waits for a state or condition).

use std::path::PathBuf;
use std::time::Duration;

use crate::testenv::TestEnv;
use anyhow::{Context as _, Result, bail, ensure};
use clap::Parser;
use kim_controller::cli::run::RunArgs;
use kim_controller::runner::Process;
use kim_shared::api::{Runtime, RuntimeState};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

/// A controller running in this test process against the shared environment.
pub struct RunningController {
    /// Stops it.
    pub shutdown: kim_controller::Shutdown,
    /// The `run` task; its error, if `run` ended with one.
    pub task: tokio::task::JoinHandle<Result<(), String>>,
    /// `/metrics` address.
    pub metrics: std::net::SocketAddr,
    /// Its identity in the leader-election Lease.
    pub identity: String,
    /// Where the kubeconfigs and config live.
    pub dir: tempfile::TempDir,
}

impl RunningController {
    /// Stops the controller and waits for it; panics (fails the test) when it does not stop
    /// within 30 s, panicked, or ended with an error before (a test whose remaining checks say
    /// "nothing changed" would otherwise pass against a dead controller).
    pub async fn stop(self) {
        self.shutdown.cancel();
        stopped(tokio::time::timeout(Duration::from_secs(30), self.task).await);
    }

    /// Kills the controller at once (no graceful shutdown): a crash.
    pub fn kill(self) {
        self.task.abort();
        self.shutdown.cancel();
    }

    /// The text of `/metrics`.
    pub async fn metrics_text(&self) -> Result<String> {
        metrics_text(self.metrics).await
    }
}

/// The converter config of `deploy/config` pointed at the test Gardener project.
fn write_config(dir: &std::path::Path) -> Result<PathBuf> {
    Ok(crate::fixtures::write_converter_config(
        dir,
        crate::fixtures::PROJECT_NAME,
    )?)
}

/// The names of the audit-log credentials Secrets that deploy/config's tenants name, sorted and
/// without duplicates.
pub fn audit_secret_names() -> Result<Vec<String>> {
    let tenants: Value = serde_json::from_str(&std::fs::read_to_string(
        crate::testenv::repo_root().join("deploy/config/audit_log_tenants.json"),
    )?)?;
    let mut names: Vec<String> = tenants
        .as_object()
        .into_iter()
        .flat_map(|p| p.values())
        .filter_map(|regions| regions.as_object())
        .flat_map(|r| r.values())
        .filter_map(|t| t["secretName"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// The audit-log credentials Secrets the Shoots reference (`spec.resources`), which Gardener's
/// ResourceReferenceManager requires in the project namespace.
async fn ensure_audit_secrets(env: &TestEnv) -> Result<()> {
    use k8s_openapi::api::core::v1::Secret;
    let names = audit_secret_names()?;
    let api: Api<Secret> = Api::namespaced(
        env.garden_client().await?,
        crate::fixtures::PROJECT_NAMESPACE,
    );
    for name in names {
        let mut secret = Secret::default();
        secret.metadata.name = Some(name);
        secret.string_data = Some([("auditlog-credentials".to_owned(), "test".to_owned())].into());
        match api.create(&PostParams::default(), &secret).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    // gardener-apiserver resolves references from its informer cache.
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(())
}

/// How a test controller reaches the clusters; the default is the admin of the KCP for both
/// the KCP and Gardener (which is aggregated into the KCP).
#[derive(Default, Clone)]
pub struct Wiring {
    /// Authenticate to the KCP and Gardener as this user (a client certificate in
    /// `system:masters`), so that the audit log tells replicas apart.
    pub user: Option<String>,
    /// Reach Gardener through this access instead, e.g. a fault proxy's
    /// [`crate::faultproxy::FaultProxy::access_via`] of the KCP.
    pub gardener: Option<crate::testenv::ClusterAccess>,
    /// Reach the KCP through this access instead (Gardener too, unless `gardener` says
    /// otherwise).
    pub kcp: Option<crate::testenv::ClusterAccess>,
}

/// Writes the KCP and Gardener kubeconfigs `wiring` asks for into `dir`.
fn write_wired_kubeconfigs(
    env: &TestEnv,
    dir: &std::path::Path,
    wiring: &Wiring,
) -> Result<(PathBuf, PathBuf)> {
    use crate::testenv::Credentials;
    let paths = env.write_kubeconfigs(dir)?;
    let (mut kcp, mut garden) = (paths[0].clone(), paths[1].clone());
    let pair = match &wiring.user {
        Some(user) => Some((
            user.as_str(),
            env.ca().client_cert(user, &["system:masters"])?,
        )),
        None => None,
    };
    let kcp_access = wiring.kcp.clone().unwrap_or_else(|| env.kcp().clone());
    if wiring.kcp.is_some() || pair.is_some() {
        kcp = dir.join("kcp-wired.kubeconfig");
        let yaml = match &pair {
            Some((user, pair)) => kcp_access.kubeconfig(user, Credentials::Cert(pair)),
            None => kcp_access.admin_kubeconfig(),
        };
        crate::testenv::access::write_private(&kcp, &yaml)?;
    }
    if wiring.gardener.is_some() || wiring.kcp.is_some() || pair.is_some() {
        let mut access = wiring.gardener.clone().unwrap_or(kcp_access);
        access.name = "garden".into();
        access.namespace = Some(crate::fixtures::PROJECT_NAMESPACE.to_owned());
        let yaml = match &pair {
            Some((user, pair)) => access.kubeconfig(user, Credentials::Cert(pair)),
            None => access.admin_kubeconfig(),
        };
        garden = dir.join("garden-wired.kubeconfig");
        crate::testenv::access::write_private(&garden, &yaml)?;
    }
    Ok((kcp, garden))
}

/// What a test controller reads, in a folder that lives as long as this value.
pub struct ControllerFiles {
    /// kubeconfig of the KCP.
    pub kcp: PathBuf,
    /// kubeconfig of the Gardener project.
    pub garden: PathBuf,
    /// The KIM configuration (`converter_config.json`, the fixtures' project).
    pub config: PathBuf,
    /// The folder holding them.
    pub dir: tempfile::TempDir,
}

/// Writes the files a controller against the shared environment reads, and creates the
/// audit-log Secrets its Shoots reference.
pub async fn controller_files(env: &TestEnv, wiring: &Wiring) -> Result<ControllerFiles> {
    ensure_audit_secrets(env).await?;
    let dir = tempfile::tempdir()?;
    let (kcp, garden) = write_wired_kubeconfigs(env, dir.path(), wiring)?;
    let config = write_config(dir.path())?;
    Ok(ControllerFiles {
        kcp,
        garden,
        config,
        dir,
    })
}

/// Flags for a controller of namespace `ns` against the shared environment.
pub async fn controller_args(
    env: &TestEnv,
    ns: &str,
    extra: &[&str],
) -> Result<(RunArgs, tempfile::TempDir)> {
    controller_args_wired(env, ns, extra, &Wiring::default()).await
}

/// [`controller_args`] reaching the clusters as `wiring` says.
pub async fn controller_args_wired(
    env: &TestEnv,
    ns: &str,
    extra: &[&str],
    wiring: &Wiring,
) -> Result<(RunArgs, tempfile::TempDir)> {
    let ControllerFiles {
        kcp,
        garden,
        config,
        dir,
    } = controller_files(env, wiring).await?;
    let mut argv: Vec<String> = vec![
        "kim-controller".into(),
        format!("--kcp-kubeconfig-path={}", kcp.display()),
        format!("--gardener-kubeconfig-path={}", garden.display()),
        format!("--gardener-project-name={}", crate::fixtures::PROJECT_NAME),
        format!("--converter-config-filepath={}", config.display()),
        format!("--namespace={ns}"),
        "--metrics-bind-address=127.0.0.1:0".into(),
        "--health-probe-bind-address=127.0.0.1:0".into(),
        "--gardener-ratelimiter-qps=200".into(),
        "--gardener-ratelimiter-burst=200".into(),
        "--gardener-request-timeout=30s".into(),
        "--kubeconfig-expiration-time=1h".into(),
        "--log-format=text".into(),
    ];
    argv.extend(extra.iter().map(|s| s.to_string()));
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }
    let args = Cli::try_parse_from(argv)?.run;
    let _ =
        kim_controller::logging::init("info,kube=warn", kim_controller::logging::LogFormat::Text);
    Ok((args, dir))
}

/// Starts a controller for namespace `ns` with extra flags.
pub async fn start_controller(
    env: &TestEnv,
    ns: &str,
    extra: &[&str],
) -> Result<RunningController> {
    start_controller_wired(env, ns, extra, &Wiring::default()).await
}

/// [`start_controller`] reaching the clusters as `wiring` says.
pub async fn start_controller_wired(
    env: &TestEnv,
    ns: &str,
    extra: &[&str],
    wiring: &Wiring,
) -> Result<RunningController> {
    let (args, dir) = controller_args_wired(env, ns, extra, wiring).await?;
    start_with_args(args, dir).await
}

/// Makes the controller of `args` reach the KCP as `user` (a client certificate, in no group)
/// instead of the admin, through a kubeconfig written into `dir`.
pub fn reach_kcp_as(
    env: &TestEnv,
    args: &mut RunArgs,
    dir: &tempfile::TempDir,
    user: &str,
) -> Result<()> {
    let pair = env.ca().client_cert(user, &[])?;
    let path = dir.path().join("kcp-restricted.kubeconfig");
    crate::testenv::access::write_private(
        &path,
        &env.kcp()
            .kubeconfig(user, crate::testenv::Credentials::Cert(&pair)),
    )?;
    args.kcp_kubeconfig_path = Some(path);
    Ok(())
}

/// Starts a controller with `args` as built by [`controller_args`] (and changed by the
/// test); `dir` holds its files and lives as long as it runs.
pub async fn start_with_args(args: RunArgs, dir: tempfile::TempDir) -> Result<RunningController> {
    let shutdown = kim_controller::Shutdown::new();
    let process = Process::start(args, shutdown.clone()).await?;
    let metrics = process.metrics_addr;
    let identity = process.identity.clone();
    let task = tokio::spawn(async move {
        process.run().await.map_err(|e| {
            eprintln!("controller stopped: {e}");
            e.to_string()
        })
    });
    Ok(RunningController {
        shutdown,
        task,
        metrics,
        identity,
        dir,
    })
}

/// The text of `/metrics` at `addr`.
pub async fn metrics_text(addr: std::net::SocketAddr) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await?;
    let mut out = String::new();
    stream.read_to_string(&mut out).await?;
    Ok(out)
}

/// The sum of every sample of `metric` whose labels contain all of `labels` (`k="v"` strings).
pub fn metric_sum(text: &str, metric: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let name = series.split('{').next()?;
            (name == metric && labels.iter().all(|want| series.contains(want)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// A controller on its own runtime, so that killing it stops every task at its next await
/// point, mid-reconcile, as a crash would, and so that its log lines can go to the test.
pub struct KillableController {
    runtime: Option<tokio::runtime::Runtime>,
    shutdown: kim_controller::Shutdown,
    task: Option<tokio::task::JoinHandle<Result<(), String>>>,
    _dir: tempfile::TempDir,
}

/// Fails the test unless a controller's `run` task (waited for with a timeout) ended well.
fn stopped(
    waited: Result<Result<Result<(), String>, tokio::task::JoinError>, tokio::time::error::Elapsed>,
) {
    match waited {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => panic!("the controller had stopped with an error: {e}"),
        Ok(Err(e)) => panic!("the controller's task failed: {e}"),
        Err(_) => panic!("the controller did not stop within 30 s of its shutdown"),
    }
}

impl Drop for KillableController {
    // Dropping a runtime inside async code panics; a test that fails early still drops this.
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl KillableController {
    /// Starts one.
    pub async fn start(env: &TestEnv, ns: &str, extra: &[&str]) -> Result<Self> {
        Ok(Self::start_wired(env, ns, extra, &Wiring::default())
            .await?
            .0)
    }

    /// Starts one reaching the clusters as `wiring` says; also returns its Lease identity and
    /// `/metrics` address once its process has started.
    pub async fn start_wired(
        env: &TestEnv,
        ns: &str,
        extra: &[&str],
        wiring: &Wiring,
    ) -> Result<(Self, String, std::net::SocketAddr)> {
        let (args, dir) = controller_args_wired(env, ns, extra, wiring).await?;
        Self::start_with_args(args, dir, None).await
    }

    /// Starts one with `args` as built by [`controller_args`] (and changed by the test); `dir`
    /// holds its files. With `logs`, every line the controller logs goes to that subscriber
    /// instead of the process's (it is the default of its runtime's threads), so a test reads
    /// the lines of its own controllers while other tests of the process log elsewhere. Also
    /// returns its Lease identity and `/metrics` address once its process has started.
    pub async fn start_with_args(
        args: RunArgs,
        dir: tempfile::TempDir,
        logs: Option<tracing::Dispatch>,
    ) -> Result<(Self, String, std::net::SocketAddr)> {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(2).enable_all();
        if let Some(logs) = logs {
            builder.on_thread_start(move || {
                // For the thread's whole life: dropping the guard would restore the process's.
                std::mem::forget(tracing::dispatcher::set_default(&logs));
            });
        }
        let runtime = builder.build()?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let shutdown = kim_controller::Shutdown::new();
        let stop = shutdown.clone();
        let task = runtime.spawn(async move {
            match Process::start(args, stop).await {
                Ok(p) => {
                    let _ = tx.send(Ok((p.identity.clone(), p.metrics_addr)));
                    p.run().await.map_err(|e| {
                        tracing::warn!("controller stopped: {e}");
                        e.to_string()
                    })
                }
                Err(e) => {
                    let e = format!("controller did not start: {e}");
                    let _ = tx.send(Err(e.clone()));
                    Err(e)
                }
            }
        });
        let (identity, metrics) = rx
            .await
            .map_err(|_| anyhow::anyhow!("controller runtime ended before start-up"))?
            .map_err(anyhow::Error::msg)?;
        let controller = Self {
            runtime: Some(runtime),
            shutdown,
            task: Some(task),
            _dir: dir,
        };
        Ok((controller, identity, metrics))
    }

    /// Whether its process has ended (e.g. on lost leadership).
    pub fn finished(&self) -> bool {
        self.task
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
    }

    /// Kills it: no graceful shutdown, in-flight requests are dropped.
    pub fn kill(mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }

    /// Stops it gracefully (as on SIGTERM) and waits up to 30 s for the process to end;
    /// panics as [`RunningController::stop`] does.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            stopped(tokio::time::timeout(Duration::from_secs(30), task).await);
        }
    }
}

/// The AWS sample Runtime (`config/samples/runtime-aws.yaml`), made to fit the test Gardener
/// (credentials binding, a unique name and shoot name).
pub fn sample_runtime(ns: &str, id: &str) -> Result<Runtime> {
    let path = crate::testenv::repo_root().join("config/samples/runtime-aws.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let mut rt: Runtime = serde_yaml_ng::from_str(&text)?;
    rt.metadata.name = Some(id.to_owned());
    rt.metadata.namespace = Some(ns.to_owned());
    let labels = rt.metadata.labels.get_or_insert_with(Default::default);
    labels.insert("kyma-project.io/runtime-id".into(), id.to_owned());
    labels.insert("kyma-project.io/shoot-name".into(), shoot_name(id));
    labels.insert(
        "kyma-project.io/region".into(),
        rt.spec.shoot.region.clone(),
    );
    rt.spec.shoot.name = shoot_name(id);
    rt.spec.shoot.secret_binding_name = crate::fixtures::credentials_name("aws");
    rt.spec.shoot.enforce_seed_location = None;
    rt.spec.shoot.platform_region = "cf-eu10".into();
    if let Some(k) = rt.spec.shoot.kubernetes.as_mut() {
        k.version = None;
    }
    // What the mutating webhook does before the Runtime is stored.
    let cfg = kim_shared::config::KimConfig::load(&kim_shared::config::ConfigPaths::new(
        crate::testenv::repo_root().join("deploy/config/converter_config.json"),
    ))?;
    kim_shared::defaults::apply_defaults(&mut rt, &cfg);
    Ok(rt)
}

/// A short Shoot name for a runtime id (Gardener limits project + shoot name length).
pub fn shoot_name(id: &str) -> String {
    let compact: String = id.chars().filter(|c| *c != '-').collect();
    let tail: String = compact
        .chars()
        .skip(compact.chars().count().saturating_sub(14))
        .collect();
    format!("s{tail}")
}

/// Creates a Runtime.
pub async fn create(env: &TestEnv, rt: &Runtime) -> Result<Runtime> {
    let api: Api<Runtime> = Api::namespaced(
        env.kcp_client().await?,
        rt.metadata.namespace.as_deref().unwrap_or_default(),
    );
    Ok(api.create(&PostParams::default(), rt).await?)
}

/// Changes the Runtime's first worker pool's `maximum` (a spec change the Shoot follows).
pub async fn set_first_pool_maximum(runtimes: &Api<Runtime>, id: &str, maximum: i32) -> Result<()> {
    edit_first_pool(runtimes, id, |pool| {
        pool["maximum"] = json!(maximum);
        Ok(())
    })
    .await
}

/// Changes the first worker pool of the Runtime `id` with `f`, in a merge patch of the whole
/// list (as KEB writes it).
pub async fn edit_first_pool(
    runtimes: &Api<Runtime>,
    id: &str,
    f: impl FnOnce(&mut Value) -> Result<()>,
) -> Result<()> {
    use kube::api::{Patch, PatchParams};
    let rt = runtimes.get(id).await?;
    let mut workers = serde_json::to_value(&rt.spec.shoot.provider.workers)?;
    f(&mut workers[0])?;
    runtimes
        .patch(
            id,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"shoot": {"provider": {"workers": workers}}}})),
        )
        .await?;
    Ok(())
}

/// Sets (`Some`) or removes (`None`) the annotation `key` of the Runtime `id` (a merge patch),
/// as an operator does with the suspend and force-patch annotations.
pub async fn annotate_runtime(
    runtimes: &Api<Runtime>,
    id: &str,
    key: &str,
    value: Option<&str>,
) -> Result<()> {
    use kube::api::{Patch, PatchParams};
    let patch = json!({"metadata": {"annotations": {key: value}}});
    runtimes
        .patch(id, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

/// Waits until the Runtime `ns/name` is in `state` and its condition `type_` satisfies
/// `holds`; returns it. On timeout the error shows the last status.
pub async fn wait_condition(
    env: &TestEnv,
    ns: &str,
    name: &str,
    state: RuntimeState,
    type_: &str,
    holds: impl Fn(&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition) -> bool,
    timeout: Duration,
) -> Result<Runtime> {
    let wanted = format!("{state:?} with the {type_} condition wanted");
    wait_runtime(env, ns, name, &wanted, timeout, |rt| {
        rt.status.as_ref().is_some_and(|s| s.state == state)
            && rt.condition(type_).is_some_and(&holds)
    })
    .await
}

/// Waits until the Runtime's state is `want`, failing with its status otherwise.
pub async fn wait_state(
    env: &TestEnv,
    ns: &str,
    name: &str,
    want: RuntimeState,
    timeout: Duration,
) -> Result<Runtime> {
    wait_runtime(env, ns, name, &format!("{want:?}"), timeout, |rt| {
        rt.status.as_ref().is_some_and(|s| s.state == want)
            && rt.status.as_ref().and_then(|s| s.observed_generation) == rt.metadata.generation
    })
    .await
}

/// Waits until the Runtime has gone through `states`, in this order (other states between
/// them allowed), in the writes after `resource_version`. A poll can see a `Ready` written
/// before a pass that makes the Runtime `Pending` for a while; the watch sees every write.
pub async fn wait_states_since(
    env: &TestEnv,
    ns: &str,
    name: &str,
    resource_version: &str,
    states: &[RuntimeState],
    timeout: Duration,
) -> Result<Runtime> {
    use futures::StreamExt as _;
    use kube::api::{WatchEvent, WatchParams};
    let api: Api<Runtime> = Api::namespaced(env.kcp_client().await?, ns);
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut seen = Vec::new();
    let mut left = states.iter().peekable();
    let watched = async {
        let mut events = api.watch(&params, resource_version).await?.boxed();
        while let Some(event) = events.next().await {
            let WatchEvent::Modified(rt) = event? else {
                continue;
            };
            let state = rt.status.as_ref().map(|s| s.state);
            if seen.last() != Some(&state) {
                seen.push(state);
            }
            if left.next_if(|want| state == Some(**want)).is_some() && left.peek().is_none() {
                return Ok(rt);
            }
        }
        bail!("the watch of Runtime {ns}/{name} ended")
    };
    match tokio::time::timeout(timeout, watched).await {
        Ok(done) => done,
        Err(_) => bail!(
            "Runtime {ns}/{name} did not go through {states:?} within {timeout:?}; its states since resourceVersion {resource_version}: {seen:?}"
        ),
    }
}

/// Sets the Gardener simulator's fault for Shoot `shoot` (`None`: no fault).
pub async fn set_simulator_fault(env: &TestEnv, shoot: &str, fault: Option<&str>) -> Result<()> {
    use crate::simulator::{FAULT_CONFIGMAP, FAULT_CONFIGMAP_NAMESPACE};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Patch, PatchParams};
    let api: Api<ConfigMap> = Api::namespaced(env.kcp_client().await?, FAULT_CONFIGMAP_NAMESPACE);
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": FAULT_CONFIGMAP, "namespace": FAULT_CONFIGMAP_NAMESPACE},
        "data": {shoot: fault.unwrap_or("none")}});
    api.patch(
        FAULT_CONFIGMAP,
        &PatchParams::apply(&format!("kim-tests-fault-{shoot}")).force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(())
}

/// Waits until the Runtime `ns/name` satisfies `done`; on timeout the error says it is not
/// `wanted` and shows the last status.
async fn wait_runtime(
    env: &TestEnv,
    ns: &str,
    name: &str,
    wanted: &str,
    timeout: Duration,
    done: impl Fn(&Runtime) -> bool,
) -> Result<Runtime> {
    let api: Api<Runtime> = Api::namespaced(env.kcp_client().await?, ns);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let rt = api.get(name).await?;
        if done(&rt) {
            return Ok(rt);
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "Runtime {ns}/{name} not {wanted} within {timeout:?}; status: {}",
                serde_json::to_string_pretty(&rt.status)?
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until `f` returns true. An API answer that says "try later" (429, 5xx: the aggregated
/// gardener-apiserver briefly unavailable on a loaded machine) or a request that got no answer
/// counts as "not yet"; any other error ends the wait.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match f().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) if try_later(&e) => last_error = Some(e),
            Err(e) => return Err(e),
        }
        if tokio::time::Instant::now() > deadline {
            match last_error {
                Some(e) => bail!("{what}: not within {timeout:?} (last answer: {e:#})"),
                None => bail!("{what}: not within {timeout:?}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Whether `e` is an API server's "try later" (429, 5xx) or a request without an answer.
pub fn try_later(e: &anyhow::Error) -> bool {
    match e.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(status)) => status.code == 429 || status.code >= 500,
        Some(kube::Error::HyperError(_) | kube::Error::Service(_)) => true,
        _ => false,
    }
}

/// Whether the shoot cluster has a ClusterRoleBinding managed by the infrastructure manager
/// that binds `cluster-admin` to `admin`.
///
/// All tests share one shoot cluster, and every Runtime that reaches `Ready` makes its own
/// administrators the only bound ones there, so a binding seen now may be gone a moment later.
/// To show that a controller bound or unbound an administrator, use [`AdminBindings`] with an
/// administrator no other test names.
pub async fn admin_bound(env: &TestEnv, admin: &str) -> Result<bool> {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let crbs: Api<ClusterRoleBinding> = Api::all(env.shoot_client().await?);
    let selector = admin_selector();
    Ok(crbs
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?
        .items
        .iter()
        .any(|b| binds_admin(b, admin)))
}

fn admin_selector() -> String {
    format!(
        "{}={}",
        kim_shared::names::LABEL_RECONCILER_MANAGED_BY,
        kim_shared::names::MANAGED_BY_INFRASTRUCTURE_MANAGER
    )
}

fn binds_admin(b: &k8s_openapi::api::rbac::v1::ClusterRoleBinding, admin: &str) -> bool {
    b.role_ref.name == "cluster-admin" && b.subjects.iter().flatten().any(|s| s.name == admin)
}

/// Records, from the moment it starts, every administrator binding created in and deleted from
/// the shared shoot cluster. Other tests' Runtimes rebind their administrators and unbind
/// everyone else's at any time, so what a test can attribute to its own controller is the
/// creation of a binding for an administrator only its Runtime names, and that binding's
/// deletion.
pub struct AdminBindings {
    events: std::sync::Arc<std::sync::Mutex<Vec<AdminEvent>>>,
    task: tokio::task::JoinHandle<()>,
}

struct AdminEvent {
    deleted: bool,
    binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding,
}

impl AdminEvent {
    fn name(&self) -> Option<&str> {
        self.binding.metadata.name.as_deref()
    }
}

impl AdminBindings {
    /// Starts watching; returns once the watch has listed the bindings that exist now.
    pub async fn start(env: &TestEnv) -> Result<Self> {
        use futures::StreamExt;
        use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
        use kube::runtime::{WatchStreamExt, watcher};
        let crbs: Api<ClusterRoleBinding> = Api::all(env.shoot_client().await?);
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
        let sink = events.clone();
        let task = tokio::spawn(async move {
            let mut listed = Some(listed_tx);
            let mut stream = std::pin::pin!(
                watcher(crbs, watcher::Config::default().labels(&admin_selector()))
                    .default_backoff()
            );
            while let Some(ev) = stream.next().await {
                let event = match ev {
                    Ok(watcher::Event::Apply(binding) | watcher::Event::InitApply(binding)) => {
                        AdminEvent {
                            deleted: false,
                            binding,
                        }
                    }
                    Ok(watcher::Event::Delete(binding)) => AdminEvent {
                        deleted: true,
                        binding,
                    },
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = listed.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    Ok(watcher::Event::Init) | Err(_) => continue,
                };
                if let Ok(mut v) = sink.lock() {
                    v.push(event);
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(30), listed_rx)
            .await
            .context("the administrator bindings were not listed within 30s")?
            .context("the administrator binding watch ended")?;
        Ok(Self { events, task })
    }

    /// Whether every binding of `admin` seen so far (created, or there when the watch began)
    /// has been deleted; an error if there was none.
    fn all_unbound(&self, admin: &str) -> Result<bool> {
        let events = self
            .events
            .lock()
            .map_err(|_| anyhow::anyhow!("the administrator binding record is poisoned"))?;
        let mut bound = events
            .iter()
            .filter(|e| !e.deleted && binds_admin(&e.binding, admin))
            .peekable();
        ensure!(bound.peek().is_some(), "{admin} was never bound");
        Ok(bound.all(|b| events.iter().any(|e| e.deleted && e.name() == b.name())))
    }

    /// Whether a binding of `admin` has been seen (created, or there when the watch began).
    pub fn seen_bound(&self, admin: &str) -> bool {
        self.events.lock().is_ok_and(|events| {
            events
                .iter()
                .any(|e| !e.deleted && binds_admin(&e.binding, admin))
        })
    }

    /// Waits until a binding of `admin` has been seen.
    pub async fn wait_bound(&self, admin: &str, timeout: Duration) -> Result<()> {
        eventually(
            &format!("a binding of {admin} created"),
            timeout,
            || async { Ok(self.seen_bound(admin)) },
        )
        .await
    }

    /// Waits until every binding of `admin` seen so far has been deleted.
    pub async fn wait_unbound(&self, admin: &str, timeout: Duration) -> Result<()> {
        eventually(
            &format!("the bindings of {admin} deleted"),
            timeout,
            || async { self.all_unbound(admin) },
        )
        .await
    }
}

impl Drop for AdminBindings {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Checks upstream's conditions of a `Ready` Runtime: Provisioned, KubeconfigReady and
/// Configured all True with the reasons of a finished provisioning.
pub fn check_ready_conditions(rt: &Runtime) -> Result<()> {
    use kim_shared::names::{condition, reason};
    for (t, want) in [
        (condition::PROVISIONED, reason::SHOOT_CREATION_COMPLETED),
        (
            condition::KUBECONFIG_READY,
            reason::GARDENER_CLUSTER_CR_READY,
        ),
        (condition::CONFIGURED, reason::ADMINISTRATORS_CONFIGURED),
    ] {
        let c = rt
            .condition(t)
            .with_context(|| format!("condition {t} missing"))?;
        if (c.status.as_str(), c.reason.as_str()) != ("True", want) {
            bail!(
                "condition {t} is {}/{}, want True/{want}",
                c.status,
                c.reason
            );
        }
    }
    Ok(())
}

/// Runtime sample files as `(file stem, YAML as JSON)`.
pub fn read_samples(files: &[std::path::PathBuf]) -> Result<Vec<(String, serde_json::Value)>> {
    files
        .iter()
        .map(|p| {
            let stem = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let text = std::fs::read_to_string(p).with_context(|| p.display().to_string())?;
            Ok((stem, serde_yaml_ng::from_str(&text)?))
        })
        .collect()
}

/// A sample made provisionable in the test landscape, defaulted (what the mutating webhook
/// does). Replacements, each for a reason a real Gardener or apiserver would refuse the sample
/// too:
/// - `metadata.namespace`, `metadata.name`, the runtime-id and shoot-name labels and
///   `spec.shoot.name`: unique per test run (samples share IDs and names);
/// - `spec.shoot.secretBindingName` -> the test landscape's binding of the provider;
/// - `spec.shoot.kubernetes.version` -> removed, so the configured default applies (upstream's
///   samples name 1.28.7, out of Gardener's support);
/// - `spec.shoot.enforceSeedLocation: "true"` (a string in one upstream sample, which the CRD
///   schema refuses) -> `true`;
/// - `spec.security.administrators` -> one list for all: every Shoot of the test landscape
///   points at the same cluster, where each Runtime keeps only its own administrators' bindings.
pub fn provisionable(mut rt: Value, ns: &str, id: &str) -> Result<Runtime> {
    rt["metadata"]["namespace"] = json!(ns);
    rt["metadata"]["name"] = json!(id);
    let shoot = shoot_name(id);
    let labels = rt["metadata"]["labels"]
        .as_object_mut()
        .context("the sample has labels")?;
    labels.insert(kim_shared::names::LABEL_RUNTIME_ID.into(), json!(id));
    labels.insert("kyma-project.io/shoot-name".into(), json!(shoot));
    rt["spec"]["shoot"]["name"] = json!(shoot);
    let provider = rt["spec"]["shoot"]["provider"]["type"]
        .as_str()
        .context("spec.shoot.provider.type")?
        .to_owned();
    rt["spec"]["shoot"]["secretBindingName"] = json!(crate::fixtures::credentials_name(&provider));
    if let Some(k) = rt
        .pointer_mut("/spec/shoot/kubernetes")
        .and_then(Value::as_object_mut)
    {
        k.remove("version");
    }
    if rt
        .pointer("/spec/shoot/enforceSeedLocation")
        .is_some_and(Value::is_string)
    {
        rt["spec"]["shoot"]["enforceSeedLocation"] = json!(true);
    }
    rt["spec"]["security"]["administrators"] = json!(["admin@example.com"]);
    let mut rt: Runtime = serde_json::from_value(rt)?;
    let cfg = kim_shared::config::KimConfig::load(&kim_shared::config::ConfigPaths::new(
        crate::testenv::repo_root().join("deploy/config/converter_config.json"),
    ))?;
    kim_shared::defaults::apply_defaults(&mut rt, &cfg);
    Ok(rt)
}

/// Creates every sample in a fresh namespace with a controller running, waits until each is
/// `Ready` with upstream's conditions and its administrators bound in the cluster, then deletes
/// them all and checks that their Shoots are gone.
pub async fn provision_and_delete_samples(
    env: &TestEnv,
    namespace_prefix: &str,
    samples: Vec<(String, serde_json::Value)>,
) -> Result<()> {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    use kube::api::{DeleteParams, ListParams};
    use kube::{Api, ResourceExt};
    ensure!(!samples.is_empty(), "no sample to provision");
    let ns = env.namespace(namespace_prefix).await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let suffix = &ns[ns.len().saturating_sub(4)..];

    let mut runtimes = Vec::new();
    for (i, (stem, sample)) in samples.into_iter().enumerate() {
        let id = format!("rt{i}-{suffix}");
        let rt = provisionable(sample, &ns, &id).with_context(|| stem.clone())?;
        create(env, &rt)
            .await
            .with_context(|| format!("create {stem}"))?;
        runtimes.push((stem, rt));
    }

    let ns_ref = ns.as_str();
    let ready = futures::future::join_all(runtimes.iter().map(|(stem, rt)| async move {
        wait_state(
            env,
            ns_ref,
            &rt.name_any(),
            RuntimeState::Ready,
            Duration::from_secs(180),
        )
        .await
        .with_context(|| format!("sample {stem}"))
    }))
    .await;
    let crbs: Api<ClusterRoleBinding> = Api::all(env.shoot_client().await?);
    let selector = format!(
        "{}={}",
        kim_shared::names::LABEL_RECONCILER_MANAGED_BY,
        kim_shared::names::MANAGED_BY_INFRASTRUCTURE_MANAGER
    );
    let bindings = crbs.list(&ListParams::default().labels(&selector)).await?;
    for ((stem, rt), ready) in runtimes.iter().zip(ready) {
        let ready = ready?;
        check_ready_conditions(&ready).with_context(|| format!("sample {stem}"))?;
        let admins = &rt.spec.security.administrators;
        ensure!(!admins.is_empty(), "{stem} names administrators");
        for admin in admins {
            ensure!(
                bindings
                    .items
                    .iter()
                    .any(|b| b.role_ref.name == "cluster-admin"
                        && b.subjects.iter().flatten().any(|s| &s.name == admin)),
                "{stem}: administrator {admin} is not bound to cluster-admin"
            );
        }
    }

    let api: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    for (_, rt) in &runtimes {
        api.delete(&rt.name_any(), &DeleteParams::default()).await?;
    }
    eventually(
        "every sample Runtime gone",
        Duration::from_secs(180),
        || {
            let api = api.clone();
            async move { Ok(api.list(&ListParams::default()).await?.items.is_empty()) }
        },
    )
    .await?;
    let shoots: Api<kim_shared::gardener::Shoot> = Api::namespaced(
        env.garden_client().await?,
        crate::fixtures::PROJECT_NAMESPACE,
    );
    for (stem, rt) in &runtimes {
        ensure!(
            shoots.get_opt(&rt.spec.shoot.name).await?.is_none(),
            "{stem}: the Shoot outlived its Runtime"
        );
    }
    ctl.stop().await;
    Ok(())
}

/// Writes into Shoot `shoot`'s status, as the gardenlet does once a `rotate-*-start` is done, that
/// the new credentials of `rotation` (`certificateAuthorities` or `serviceAccountKey`) are in
/// place a second after `signed` (both times have whole seconds), once that second is over.
/// Returns that time.
pub async fn prepare_rotation(
    shoots: &Api<kim_shared::gardener::Shoot>,
    shoot: &str,
    rotation: &str,
    signed: jiff::Timestamp,
) -> Result<jiff::Timestamp> {
    let prepared = signed.checked_add(jiff::SignedDuration::from_secs(1))?;
    while jiff::Timestamp::now() <= prepared {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = json!({"status": {"credentials": {"rotation": {
        rotation: {
            "phase": "Prepared",
            "lastInitiationTime": signed.to_string(),
            "lastInitiationFinishedTime": prepared.to_string(),
        }
    }}}});
    shoots
        .patch_status(
            shoot,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&status),
        )
        .await?;
    Ok(prepared)
}
