//! The real control plane for tests and for `make run`: etcd, the KCP kube-apiserver with the
//! real gardener-apiserver aggregated into it, and a second kube-apiserver that plays every
//! provisioned ("shoot") cluster.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let env = kim_tests::testenv::TestEnv::shared().await?;
//! let ns = env.namespace("my-test").await?;
//! let client = env.kcp_client().await?;
//! # Ok(()) }
//! ```

pub mod access;
mod apiserver;
pub mod bins;
pub mod crds;
mod gardener;
pub use gardener::{
    DISABLED_ADMISSION_PLUGINS, GROUP_VERSIONS, shoot_resource as gardener_shoot_resource,
};
pub mod pki;
pub mod process;
mod shoot;
pub mod wait;
pub mod webhooks;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

pub use access::{ClusterAccess, Credentials};
pub use pki::{Ca, CertPair};

use process::ManagedProcess;

/// Everything that can go wrong while starting or using the environment.
#[derive(Debug, thiserror::Error)]
pub enum TestEnvError {
    /// Binaries are missing (with instructions).
    #[error(transparent)]
    Binaries(#[from] bins::MissingBinaries),
    /// Certificates.
    #[error(transparent)]
    Pki(#[from] pki::PkiError),
    /// A child process.
    #[error(transparent)]
    Process(#[from] process::ProcessError),
    /// Client or kubeconfig.
    #[error(transparent)]
    Access(#[from] access::AccessError),
    /// Something did not become ready.
    #[error("{0}")]
    Timeout(#[from] wait::Timeout),
    /// A file could not be written or read.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was done.
        what: &'static str,
        /// Path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// An API call failed.
    #[error("{what}: {source}")]
    Kube {
        /// What was done.
        what: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// Any other failure, described.
    #[error("{0}")]
    Other(String),
}

/// Result of environment operations.
pub type Result<T, E = TestEnvError> = std::result::Result<T, E>;

pub(crate) fn io_err(
    what: &'static str,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> TestEnvError {
    let path = path.display().to_string();
    move |source| TestEnvError::Io { what, path, source }
}

pub(crate) fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> TestEnvError {
    let what = what.into();
    move |source| TestEnvError::Kube { what, source }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct TestEnvOptions {
    /// Start gardener-apiserver and aggregate it into the KCP API server.
    pub gardener: bool,
    /// Create the Gardener fixtures (project `kyma`, CloudProfiles, bindings, Seeds).
    pub gardener_fixtures: bool,
    /// Start the second kube-apiserver that plays the shoot clusters.
    pub shoot_cluster: bool,
    /// Install every CustomResourceDefinition found in `*.yaml` files of this directory into
    /// the KCP (default: the repository's `crds/`).
    pub crds_dir: Option<PathBuf>,
    /// Run the Gardener simulator in this process with these settings.
    pub simulator: Option<crate::simulator::SimulatorConfig>,
    /// Keep state (certificates, logs, etcd data, kubeconfigs) here instead of a temp dir.
    pub state_dir: Option<PathBuf>,
    /// Upper bound for the whole start-up.
    pub start_timeout: Duration,
    /// Start the KCP API server with `--enable-aggregator-routing`, so that a webhook with a
    /// `service` reference is called at an address of the Service's EndpointSlices (which a
    /// test writes, as the endpoint controller would). Needs `gardener: false`: the routing
    /// refuses the ExternalName Service the Gardener aggregation uses.
    pub aggregator_routing: bool,
    /// The KCP apiserver presents a client certificate to every admission webhook it calls
    /// (an AdmissionConfiguration whose kubeconfig names the user `*`); the certificate's CA
    /// is [`TestEnv::webhook_client_ca_pem`].
    pub webhook_client_cert: bool,
}

impl Default for TestEnvOptions {
    fn default() -> Self {
        Self {
            gardener: true,
            gardener_fixtures: true,
            shoot_cluster: true,
            crds_dir: Some(repo_root().join("crds")),
            simulator: Some(crate::simulator::SimulatorConfig::instant()),
            state_dir: None,
            start_timeout: Duration::from_secs(180),
            aggregator_routing: false,
            webhook_client_cert: false,
        }
    }
}

impl TestEnvOptions {
    /// Only etcd and the KCP API server (with our CRDs): the fastest start.
    pub fn kcp_only() -> Self {
        Self {
            gardener: false,
            gardener_fixtures: false,
            shoot_cluster: false,
            simulator: None,
            ..Self::default()
        }
    }
}

/// The repository root (parent of the `tests` crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The Gardener side of the environment.
#[derive(Debug, Clone)]
pub struct GardenerInfo {
    /// Direct URL of gardener-apiserver (clients should go through the KCP URL).
    pub direct_url: String,
    /// The project namespace of the fixtures.
    pub project_namespace: String,
}

/// What the simulator needs to make `adminkubeconfig` work against the shoot cluster.
#[derive(Clone)]
pub struct ShootClusterInfo {
    /// URL of the shoot API server (`status.advertisedAddresses[external].url`).
    pub url: String,
    /// The client CA the shoot API server trusts; Gardener signs admin kubeconfigs with it.
    /// The key is PKCS#1 RSA, as Gardener requires.
    pub client_ca: CertPair,
    /// The CA of the shoot API server's serving certificate (`<shoot>.ca-cluster`).
    pub cluster_ca_pem: String,
}

impl std::fmt::Debug for ShootClusterInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShootClusterInfo")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// A running control plane. Dropping it stops every process it started.
pub struct TestEnv {
    state_dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
    procs: Mutex<Vec<ManagedProcess>>,
    kcp: ClusterAccess,
    kcp_ca: Arc<Ca>,
    shoot: Option<ClusterAccess>,
    shoot_info: Option<ShootClusterInfo>,
    gardener: Option<GardenerInfo>,
    audit_log: PathBuf,
    binaries: bins::Binaries,
    background: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    startup: Duration,
    phases: Vec<(&'static str, Duration)>,
    webhook_client_ca: Option<String>,
    etcd_url: String,
    /// Flags of the API servers a test may stop and start again, by process name.
    apiserver_args: Vec<(&'static str, Vec<String>)>,
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv")
            .field("state_dir", &self.state_dir)
            .field("kcp", &self.kcp.server)
            .field("shoot", &self.shoot.as_ref().map(|s| &s.server))
            .finish_non_exhaustive()
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if let Ok(bg) = self.background.lock() {
            bg.iter().for_each(tokio::task::JoinHandle::abort);
        }
        // Stop in reverse start order: aggregated server, API servers, then etcd.
        if let Ok(mut procs) = self.procs.lock() {
            while let Some(mut p) = procs.pop() {
                p.stop();
            }
        }
    }
}

struct Files {
    dir: PathBuf,
}

impl Files {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    fn write(&self, name: &str, contents: &str) -> Result<PathBuf> {
        let p = self.path(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(io_err("creating", parent))?;
        }
        access::write_private(&p, contents)?;
        Ok(p)
    }
}

impl TestEnv {
    /// One environment per test process, started on first use with the default options and
    /// shared by all tests (they isolate themselves by namespace). It runs on its own runtime
    /// thread, so it outlives the test that happened to start it; its processes die with the
    /// test process.
    pub async fn shared() -> Result<&'static TestEnv> {
        crate::watchdog::register();
        static SHARED: tokio::sync::OnceCell<std::result::Result<&'static TestEnv, String>> =
            tokio::sync::OnceCell::const_new();
        let res = SHARED
            .get_or_init(|| {
                Self::start_for_process("kim-testenv-shared", TestEnvOptions::default())
            })
            .await;
        res.clone()
            .map_err(|e| TestEnvError::Other(format!("shared test environment: {e}")))
    }

    /// Starts an environment that lives as long as the process, for a `static` that tests of
    /// one kind share (as [`TestEnv::shared`] does for all). It runs on a runtime of its own on
    /// the thread `thread`, so it outlives the test that started it (each test has its own
    /// runtime); its processes die with the test process.
    pub async fn start_for_process(
        thread: &str,
        opts: TestEnvOptions,
    ) -> std::result::Result<&'static TestEnv, String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name(thread.to_owned())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ =
                            tx.send(Err(format!("cannot build the environment's runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    match TestEnv::start(opts).await {
                        Ok(env) => {
                            let env: &'static TestEnv = Box::leak(Box::new(env));
                            let _ = tx.send(Ok(env));
                            // Keep the runtime (and the simulator on it) alive for good.
                            std::future::pending::<()>().await;
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e.to_string()));
                        }
                    }
                });
            });
        match spawned {
            Ok(_) => rx
                .await
                .unwrap_or_else(|_| Err("the environment thread died".into())),
            Err(e) => Err(format!("cannot start the environment thread: {e}")),
        }
    }

    /// Starts an environment owned by the caller. Retries once when a port was taken between
    /// choosing and binding it.
    pub async fn start(opts: TestEnvOptions) -> Result<TestEnv> {
        crate::watchdog::register();
        if opts.aggregator_routing && opts.gardener {
            return Err(TestEnvError::Other(
                "aggregator routing refuses the ExternalName Service of the Gardener aggregation; start without gardener".into(),
            ));
        }
        match Self::start_once(&opts).await {
            Err(e) if e.to_string().contains("address already in use") => {
                tracing::warn!("port race during start-up, retrying once");
                Self::start_once(&opts).await
            }
            other => other,
        }
    }

    async fn start_once(opts: &TestEnvOptions) -> Result<TestEnv> {
        let started = Instant::now();
        let binaries = bins::find()?;
        let (state_dir, temp) = match &opts.state_dir {
            Some(d) => {
                if d.exists() {
                    std::fs::remove_dir_all(d).map_err(io_err("cleaning state dir", d))?;
                }
                std::fs::create_dir_all(d).map_err(io_err("creating state dir", d))?;
                (d.clone(), None)
            }
            None => {
                remove_stale_temp_dirs();
                let t = tempfile::Builder::new()
                    .prefix(&format!("kim-testenv-{}-", std::process::id()))
                    .tempdir()
                    .map_err(io_err("creating temp dir", &std::env::temp_dir()))?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let files = Files {
            dir: state_dir.clone(),
        };

        // Certificates. The RSA client CA (openssl) runs in parallel with the rest.
        let rsa_dir = state_dir.clone();
        let rsa = opts.shoot_cluster.then(|| {
            tokio::task::spawn_blocking(move || pki::rsa_ca("kim-shoot-client-ca", &rsa_dir))
        });
        let kcp_ca = Arc::new(Ca::new("kim-testenv-ca")?);
        let front_proxy_ca = Ca::new("kim-testenv-front-proxy-ca")?;
        let shoot_cluster_ca = Ca::new("kim-shoot-cluster-ca")?;
        let ports = Ports::pick()?;

        let procs: Mutex<Vec<ManagedProcess>> = Mutex::new(Vec::new());
        let starter = Starter {
            procs,
            files: &files,
        };

        // etcd
        let etcd_data = state_dir.join("etcd");
        starter.spawn(
            "etcd",
            &binaries.etcd,
            &apiserver::etcd_args(&etcd_data, ports.etcd_client, ports.etcd_peer),
        )?;
        let etcd_url = format!("http://127.0.0.1:{}", ports.etcd_client);
        starter.wait_etcd(&etcd_url).await?;
        let mut phases = vec![("etcd ready", started.elapsed())];

        // KCP kube-apiserver
        let kcp_dir = state_dir.join("kcp");
        let serving = kcp_ca.serving_cert("kube-apiserver", &["127.0.0.1", "localhost"])?;
        files.write("kcp/serving.crt", &serving.cert_pem)?;
        files.write("kcp/serving.key", &serving.key_pem)?;
        files.write("kcp/client-ca.crt", &kcp_ca.pair.cert_pem)?;
        let (sa_key, sa_pub) = pki::signing_key_pem()?;
        files.write("kcp/sa.key", &sa_key)?;
        files.write("kcp/sa.pub", &sa_pub)?;
        let proxy_client = front_proxy_ca.client_cert("front-proxy-client", &[])?;
        let proxy_ca_file = files.write("kcp/front-proxy-ca.crt", &front_proxy_ca.pair.cert_pem)?;
        let proxy_cert_file = files.write("kcp/front-proxy-client.crt", &proxy_client.cert_pem)?;
        let proxy_key_file = files.write("kcp/front-proxy-client.key", &proxy_client.key_pem)?;
        let audit_policy = files.write("kcp/audit-policy.yaml", apiserver::AUDIT_POLICY)?;
        let audit_log = files.path("kcp/audit.log");
        let (admission_config, webhook_client_ca) = if opts.webhook_client_cert {
            let ca = Ca::new("kim-testenv-webhook-client-ca")?;
            let cert = ca.client_cert("kube-apiserver-webhook-client", &[])?;
            let cert_file = files.write("kcp/webhook-client.crt", &cert.cert_pem)?;
            let key_file = files.write("kcp/webhook-client.key", &cert.key_pem)?;
            let kubeconfig = files.write(
                "kcp/webhook-client.kubeconfig",
                &apiserver::webhook_client_kubeconfig(&cert_file, &key_file),
            )?;
            let config = files.write(
                "kcp/admission-config.yaml",
                &apiserver::admission_config(&kubeconfig),
            )?;
            (Some(config), Some(ca.pair.cert_pem.clone()))
        } else {
            (None, None)
        };
        let kcp_apiserver_args = apiserver::kube_apiserver_args(&apiserver::ApiServerParams {
            port: ports.kcp,
            etcd_url: &etcd_url,
            etcd_prefix: "/registry",
            cert_dir: &kcp_dir,
            audit: Some((&audit_policy, &audit_log)),
            aggregator: Some((&proxy_ca_file, &proxy_cert_file, &proxy_key_file)),
            aggregator_routing: opts.aggregator_routing,
            admission_config: admission_config.as_deref(),
        });
        starter.spawn(
            "kcp-apiserver",
            &binaries.kube_apiserver,
            &kcp_apiserver_args,
        )?;
        let mut apiserver_args = vec![("kcp-apiserver", kcp_apiserver_args)];
        let kcp = ClusterAccess {
            name: "kcp".into(),
            server: format!("https://127.0.0.1:{}", ports.kcp),
            ca_pem: kcp_ca.pair.cert_pem.clone(),
            admin: kcp_ca.client_cert("admin", &["system:masters"])?,
            namespace: None,
        };

        // Shoot kube-apiserver, started at the same time.
        let (shoot, shoot_info) = if opts.shoot_cluster {
            let client_ca = match rsa {
                Some(h) => h
                    .await
                    .map_err(|e| TestEnvError::Other(format!("RSA CA task: {e}")))??,
                None => return Err(TestEnvError::Other("unreachable: no RSA CA task".into())),
            };
            let serving =
                shoot_cluster_ca.serving_cert("kube-apiserver", &["127.0.0.1", "localhost"])?;
            files.write("shoot/serving.crt", &serving.cert_pem)?;
            files.write("shoot/serving.key", &serving.key_pem)?;
            // Two client CAs: ours (for the harness's admin) and the one Gardener signs
            // adminkubeconfig certificates with.
            files.write(
                "shoot/client-ca.crt",
                &format!("{}{}", kcp_ca.pair.cert_pem, client_ca.cert_pem),
            )?;
            let (sa_key, sa_pub) = pki::signing_key_pem()?;
            files.write("shoot/sa.key", &sa_key)?;
            files.write("shoot/sa.pub", &sa_pub)?;
            let args = apiserver::kube_apiserver_args(&apiserver::ApiServerParams {
                port: ports.shoot,
                etcd_url: &etcd_url,
                etcd_prefix: "/kim-shoot",
                cert_dir: &state_dir.join("shoot"),
                audit: None,
                aggregator: None,
                aggregator_routing: false,
                admission_config: None,
            });
            starter.spawn("shoot-apiserver", &binaries.kube_apiserver, &args)?;
            apiserver_args.push(("shoot-apiserver", args));
            let access = ClusterAccess {
                name: "shoot".into(),
                server: format!("https://127.0.0.1:{}", ports.shoot),
                ca_pem: shoot_cluster_ca.pair.cert_pem.clone(),
                admin: kcp_ca.client_cert("admin", &["system:masters"])?,
                namespace: None,
            };
            let info = ShootClusterInfo {
                url: access.server.clone(),
                client_ca,
                cluster_ca_pem: shoot_cluster_ca.pair.cert_pem.clone(),
            };
            // What a separately started `kim-gardener-sim` needs (see its --help).
            files.write("simulator/shoot-url", &info.url)?;
            files.write("simulator/client-ca.crt", &info.client_ca.cert_pem)?;
            files.write("simulator/client-ca.key", &info.client_ca.key_pem)?;
            files.write("simulator/cluster-ca.crt", &info.cluster_ca_pem)?;
            (Some(access), Some(info))
        } else {
            (None, None)
        };

        let timeout = opts.start_timeout;
        starter
            .wait_apiserver("kcp-apiserver", &kcp, timeout)
            .await?;
        kcp.write_admin_kubeconfig(&files.path("kcp.kubeconfig"))?;

        // Gardener needs the KCP; the shoot cluster and CRDs are set up meanwhile.
        let gardener_fut = async {
            if !opts.gardener {
                return Ok(None);
            }
            let mut g = gardener::start(
                &starter,
                &binaries,
                &kcp,
                &kcp_ca,
                &etcd_url,
                ports.gardener,
                timeout,
            )
            .await?;
            let apis_at = started.elapsed();
            if opts.gardener_fixtures {
                crate::fixtures::install(&kcp.admin_client().await?).await?;
                g.project_namespace = crate::fixtures::PROJECT_NAMESPACE.to_string();
            }
            Ok::<_, TestEnvError>(Some((g, apis_at, started.elapsed())))
        };
        let shoot_fut = async {
            if let Some(s) = &shoot {
                shoot::wait_and_bootstrap(s, timeout).await?;
                s.write_admin_kubeconfig(&files.path("shoot.kubeconfig"))?;
            }
            Ok::<_, TestEnvError>(())
        };
        let crds_fut = async {
            if let Some(dir) = &opts.crds_dir {
                crds::install_dir(&kcp.admin_client().await?, dir, timeout).await?;
            }
            Ok::<_, TestEnvError>(())
        };
        phases.push(("kcp-apiserver ready", started.elapsed()));
        let (g, s, c) = tokio::join!(gardener_fut, shoot_fut, crds_fut);
        phases.push((
            "gardener with fixtures, shoot cluster, CRDs ready",
            started.elapsed(),
        ));
        s?;
        c?;
        let gardener = match g? {
            Some((g, apis_at, fixtures_at)) => {
                phases.push(("  gardener APIs available", apis_at));
                phases.push(("  gardener fixtures applied", fixtures_at));
                Some(g)
            }
            None => None,
        };
        let env = TestEnv {
            state_dir,
            _temp: temp,
            procs: starter.procs,
            kcp,
            kcp_ca,
            shoot,
            shoot_info,
            gardener,
            audit_log,
            binaries,
            background: Mutex::new(Vec::new()),
            startup: started.elapsed(),
            phases,
            webhook_client_ca,
            etcd_url,
            apiserver_args,
        };
        if let Some(sim) = &opts.simulator
            && let Some(info) = &env.shoot_info
            && env.gardener.is_some()
        {
            let client = env.kcp_client().await?;
            let handle =
                crate::simulator::Simulator::new(client, sim.clone(), info.clone()).spawn();
            if let Ok(mut bg) = env.background.lock() {
                bg.push(handle);
            }
        }
        tracing::info!(startup_ms = env.startup.as_millis() as u64, dir = %env.state_dir.display(), "test environment ready");
        Ok(env)
    }

    /// How long start-up took.
    pub fn startup_duration(&self) -> Duration {
        self.startup
    }

    /// Start-up milestones with the time since the start.
    pub fn startup_phases(&self) -> &[(&'static str, Duration)] {
        &self.phases
    }

    /// Kills the KCP kube-apiserver, as a crash or an evicted Pod would end it, and starts it
    /// again with the same flags and data; returns once it answers `/readyz`, with how long it
    /// was gone. Everything else keeps running (etcd, Gardener, the shoot cluster). Only for an
    /// environment of the test's own: every client of the shared one would see the outage.
    pub async fn restart_kcp_apiserver(&self) -> Result<Duration> {
        let started = Instant::now();
        self.stop_apiserver("kcp-apiserver")?;
        self.start_apiserver("kcp-apiserver").await?;
        Ok(started.elapsed())
    }

    /// Kills the API server `name` (`kcp-apiserver` or `shoot-apiserver`): its clients get
    /// "connection refused" until [`TestEnv::start_apiserver`]. Only for an environment of the
    /// test's own.
    pub fn stop_apiserver(&self, name: &str) -> Result<()> {
        let mut procs = self
            .procs
            .lock()
            .map_err(|_| TestEnvError::Other("process list poisoned".into()))?;
        procs
            .iter_mut()
            .find(|p| p.name() == name)
            .ok_or_else(|| TestEnvError::Other(format!("no {name} to stop")))?
            .stop();
        Ok(())
    }

    /// Starts the API server `name` stopped by [`TestEnv::stop_apiserver`] again, with the same
    /// flags and data; returns once it answers `/readyz`.
    pub async fn start_apiserver(&self, name: &str) -> Result<()> {
        let args = self
            .apiserver_args
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| a)
            .ok_or_else(|| TestEnvError::Other(format!("no API server {name}")))?;
        {
            let mut procs = self
                .procs
                .lock()
                .map_err(|_| TestEnvError::Other("process list poisoned".into()))?;
            let p = procs
                .iter_mut()
                .find(|p| p.name() == name)
                .ok_or_else(|| TestEnvError::Other(format!("no {name} to start")))?;
            p.stop();
            let log = p.log_path().to_path_buf();
            *p = ManagedProcess::spawn(name, &self.binaries.kube_apiserver, args, &[], &log)?;
        }
        let access = if name == "kcp-apiserver" {
            &self.kcp
        } else {
            self.shoot()?
        };
        let client = access.admin_client().await?;
        wait::until(
            &format!("{name} /readyz after a restart"),
            Duration::from_secs(60),
            Duration::from_millis(100),
            || {
                let client = client.clone();
                async move { wait::readyz(&client).await }
            },
        )
        .await?;
        Ok(())
    }

    /// Compacts etcd's history up to its current revision (etcd's v3 HTTP gateway,
    /// `/v3/kv/compaction`, as `etcdctl compact` does), so that a watch or list at any older
    /// resourceVersion is answered `410 Gone`. Returns the revision compacted to.
    pub async fn compact_etcd(&self) -> Result<i64> {
        let addr = self.etcd_url.trim_start_matches("http://");
        let other = |e: String| TestEnvError::Other(format!("etcd compaction: {e}"));
        // Any range read answers with the current revision in its header ("AA==" is key 0x00).
        let range = http_post_plain(addr, "/v3/kv/range", r#"{"key":"AA==","limit":1}"#)
            .await
            .map_err(other)?;
        let revision: i64 = range["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| other(format!("no revision in {range}")))?;
        let body = serde_json::json!({"revision": revision.to_string(), "physical": true});
        let compacted = http_post_plain(addr, "/v3/kv/compaction", &body.to_string())
            .await
            .map_err(other)?;
        if compacted.get("error").is_some() || compacted.get("code").is_some() {
            return Err(other(format!("refused: {compacted}")));
        }
        Ok(revision)
    }

    /// Directory with certificates, logs and kubeconfigs.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The binaries in use.
    pub fn binaries(&self) -> &bins::Binaries {
        &self.binaries
    }

    /// Access data of the KCP API server (Gardener is aggregated into it).
    pub fn kcp(&self) -> &ClusterAccess {
        &self.kcp
    }

    /// Access data of the shoot API server.
    pub fn shoot(&self) -> Result<&ClusterAccess> {
        self.shoot
            .as_ref()
            .ok_or_else(|| TestEnvError::Other("started without a shoot cluster".into()))
    }

    /// Shoot cluster data for the simulator.
    pub fn shoot_info(&self) -> Result<&ShootClusterInfo> {
        self.shoot_info
            .as_ref()
            .ok_or_else(|| TestEnvError::Other("started without a shoot cluster".into()))
    }

    /// Gardener data.
    pub fn gardener(&self) -> Result<&GardenerInfo> {
        self.gardener
            .as_ref()
            .ok_or_else(|| TestEnvError::Other("started without Gardener".into()))
    }

    /// The CA that signs the KCP serving certificate, client certificates and webhook
    /// serving certificates.
    pub fn ca(&self) -> &Ca {
        &self.kcp_ca
    }

    /// The CA of the client certificate the KCP apiserver presents to admission webhooks,
    /// when started with [`TestEnvOptions::webhook_client_cert`].
    pub fn webhook_client_ca_pem(&self) -> Option<&str> {
        self.webhook_client_ca.as_deref()
    }

    /// An admin client (`system:masters`) for the KCP, which also serves the Gardener API.
    pub async fn kcp_client(&self) -> Result<kube::Client> {
        crate::watchdog::register();
        Ok(self.kcp.admin_client().await?)
    }

    /// An admin client for the Gardener API (the same server as the KCP).
    pub async fn garden_client(&self) -> Result<kube::Client> {
        self.kcp_client().await
    }

    /// An admin client for the shoot cluster.
    pub async fn shoot_client(&self) -> Result<kube::Client> {
        Ok(self.shoot()?.admin_client().await?)
    }

    /// A KCP client authenticated as `user` with `groups`: a client certificate (CN = user,
    /// O = group) for at most one group, impersonation by the admin for more.
    pub async fn kcp_user_client(&self, user: &str, groups: &[&str]) -> Result<kube::Client> {
        Ok(self
            .kcp
            .client_from_yaml(&self.kcp_user_kubeconfig(user, groups)?)
            .await?)
    }

    /// A KCP kubeconfig (YAML) for `user` with `groups` (see [`TestEnv::kcp_user_client`]).
    pub fn kcp_user_kubeconfig(&self, user: &str, groups: &[&str]) -> Result<String> {
        if groups.len() > 1 {
            return Ok(self
                .kcp
                .kubeconfig(user, Credentials::Impersonate(user, groups)));
        }
        let pair = self.kcp_ca.client_cert(user, groups)?;
        Ok(self.kcp.kubeconfig(user, Credentials::Cert(&pair)))
    }

    /// Creates a fresh namespace `<prefix>-<random>` in the KCP and returns its name. Never
    /// deleted: without a controller-manager namespaces cannot finish terminating.
    pub async fn namespace(&self, prefix: &str) -> Result<String> {
        create_namespace(&self.kcp_client().await?, prefix).await
    }

    /// Same as [`TestEnv::namespace`] in the shoot cluster.
    pub async fn shoot_namespace(&self, prefix: &str) -> Result<String> {
        create_namespace(&self.shoot_client().await?, prefix).await
    }

    /// Writes kubeconfig files for the KCP, Gardener and the shoot cluster into `dir`
    /// (`kcp.kubeconfig`, `garden.kubeconfig`, `shoot.kubeconfig`) and returns their paths.
    pub fn write_kubeconfigs(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
        let mut out = vec![
            self.kcp
                .write_admin_kubeconfig(&dir.join("kcp.kubeconfig"))?,
        ];
        let mut garden = self.kcp.clone();
        garden.name = "garden".into();
        garden.namespace = self.gardener.as_ref().map(|g| g.project_namespace.clone());
        out.push(garden.write_admin_kubeconfig(&dir.join("garden.kubeconfig"))?);
        if let Some(s) = &self.shoot {
            out.push(s.write_admin_kubeconfig(&dir.join("shoot.kubeconfig"))?);
        }
        Ok(out)
    }

    /// The KCP audit log (JSON lines).
    pub fn audit_log_path(&self) -> &Path {
        &self.audit_log
    }

    /// The KCP audit events so far of the requests `user` made.
    pub fn audit_events_of(&self, user: &str) -> Result<Vec<serde_json::Value>> {
        let mut events = self.audit_events_mentioning(&format!("\"username\":\"{user}\""))?;
        events.retain(|e| e["user"]["username"] == user);
        Ok(events)
    }

    /// The KCP audit events so far whose line holds `needle` (a name, namespace or user as it
    /// is written in the log's compact JSON). The shared KCP's log grows to hundreds of
    /// megabytes in a full run and is never rotated: it is read line by line, and only the
    /// lines holding the needle are parsed, so that a test polling it costs neither gigabytes
    /// of memory nor seconds of CPU per look.
    pub fn audit_events_mentioning(&self, needle: &str) -> Result<Vec<serde_json::Value>> {
        use std::io::BufRead;
        let file =
            std::fs::File::open(&self.audit_log).map_err(io_err("reading", &self.audit_log))?;
        let mut events = Vec::new();
        for line in std::io::BufReader::with_capacity(1 << 20, file).lines() {
            let line = line.map_err(io_err("reading", &self.audit_log))?;
            if line.contains(needle)
                && let Ok(event) = serde_json::from_str(&line)
            {
                events.push(event);
            }
        }
        Ok(events)
    }

    /// Fails with the log tail if any control-plane process has died.
    pub fn check_processes(&self) -> Result<()> {
        let mut procs = self
            .procs
            .lock()
            .map_err(|_| TestEnvError::Other("process list poisoned".into()))?;
        for p in procs.iter_mut() {
            p.check_running()?;
        }
        Ok(())
    }

    /// Process ids of the control plane (for tests of the teardown).
    pub fn pids(&self) -> Vec<u32> {
        self.procs
            .lock()
            .map(|p| p.iter().filter_map(ManagedProcess::pid).collect())
            .unwrap_or_default()
    }

    /// Runs `task` in the background until the environment is dropped.
    pub fn spawn_background(&self, task: tokio::task::JoinHandle<()>) {
        if let Ok(mut bg) = self.background.lock() {
            bg.push(task);
        }
    }
}

async fn create_namespace(client: &kube::Client, prefix: &str) -> Result<String> {
    let name = format!("{prefix}-{:08x}", rand::random::<u32>());
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"kim-tests/namespace": "true"}}
    }))
    .map_err(|e| TestEnvError::Other(e.to_string()))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .map_err(kube_err(format!("creating namespace {name}")))?;
    Ok(name)
}

/// Removes temp dirs of earlier test processes that are gone (a shared environment lives in a
/// static and is never dropped, so its temp dir is never removed by the process itself).
fn remove_stale_temp_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(rest) = name.strip_prefix("kim-testenv-") else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

struct Ports {
    etcd_client: u16,
    etcd_peer: u16,
    kcp: u16,
    shoot: u16,
    gardener: u16,
}

impl Ports {
    fn pick() -> Result<Self> {
        // Hold all listeners at once so the five ports differ.
        let bind = || std::net::TcpListener::bind("127.0.0.1:0");
        let ls = (0..5)
            .map(|_| bind())
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(io_err("binding", Path::new("127.0.0.1:0")))?;
        let p = |i: usize| ls[i].local_addr().map(|a| a.port()).unwrap_or(0);
        Ok(Self {
            etcd_client: p(0),
            etcd_peer: p(1),
            kcp: p(2),
            shoot: p(3),
            gardener: p(4),
        })
    }
}

/// Start-up state shared by the component starters.
pub(crate) struct Starter<'a> {
    procs: Mutex<Vec<ManagedProcess>>,
    files: &'a Files,
}

impl Starter<'_> {
    pub(crate) fn spawn(&self, name: &str, program: &Path, args: &[String]) -> Result<()> {
        let log = self.files.path(&format!("{name}.log"));
        let p = ManagedProcess::spawn(name, program, args, &[], &log)?;
        if let Ok(mut procs) = self.procs.lock() {
            procs.push(p);
        }
        Ok(())
    }

    /// `Fail` with the log tail when the named process has exited.
    pub(crate) fn check(&self, name: &str) -> Result<(), wait::NotYet> {
        let mut procs = self
            .procs
            .lock()
            .map_err(|_| wait::NotYet::Fail("process list poisoned".into()))?;
        match procs.iter_mut().find(|p| p.name() == name) {
            Some(p) => p
                .check_running()
                .map_err(|e| wait::NotYet::Fail(e.to_string())),
            None => Ok(()),
        }
    }

    async fn wait_etcd(&self, url: &str) -> Result<()> {
        let addr = url.trim_start_matches("http://").to_string();
        let r = wait::until(
            "etcd /health",
            Duration::from_secs(20),
            Duration::from_millis(50),
            || {
                let addr = addr.clone();
                async move {
                    self.check("etcd")?;
                    let body = http_get_plain(&addr, "/health").await?;
                    if body.contains("\"health\":\"true\"") {
                        Ok(())
                    } else {
                        Err(body.into())
                    }
                }
            },
        )
        .await;
        Ok(r?)
    }

    pub(crate) async fn wait_apiserver(
        &self,
        name: &str,
        access: &ClusterAccess,
        timeout: Duration,
    ) -> Result<()> {
        let client = access.admin_client().await?;
        let r = wait::until(
            &format!("{name} /readyz"),
            timeout,
            Duration::from_millis(100),
            || {
                let client = client.clone();
                async move {
                    self.check(name)?;
                    wait::readyz(&client).await
                }
            },
        )
        .await;
        r.map_err(|mut timeout| {
            // Why the checks fail is in the server's own log.
            let log = self.procs.lock().ok().and_then(|procs| {
                procs
                    .iter()
                    .find(|p| p.name() == name)
                    .map(|p| process::log_tail(p.log_path(), 15))
            });
            if let Some(log) = log {
                timeout.last = format!("{}\n{name}'s log ends:\n{log}", timeout.last);
            }
            timeout.into()
        })
    }
}

/// Minimal HTTP/1.0 POST of JSON to etcd's plain-HTTP gRPC gateway; the JSON answer.
async fn http_post_plain(addr: &str, path: &str, body: &str) -> Result<serde_json::Value, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let req = format!(
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)
        .await
        .map_err(|e| e.to_string())?;
    let json = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .ok_or_else(|| format!("no HTTP body in {buf:?}"))?;
    serde_json::from_str(json).map_err(|e| format!("{e}: {json}"))
}

/// Minimal HTTP/1.0 GET for etcd's plain-HTTP health endpoint.
async fn http_get_plain(addr: &str, path: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)
        .await
        .map_err(|e| e.to_string())?;
    Ok(buf)
}
