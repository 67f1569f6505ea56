//! The process builder behind `kim-controller run`: clients, configuration, metrics and probe
//! servers, Gardener health check, leader election, then every registered reconciler.
//! `main` stays a few lines; tests start the same [`Process`] in-process.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::registry::Registry;

use crate::cli::run::RunArgs;
use crate::context::{Context, Shutdown};
use crate::gardener::allow::AllowList;
use crate::gardener::client::{self as gclient, GardenerClientError, GuardSettings};
use crate::leader::{LeaderElection, LeaderError, Leadership};
use crate::metrics::Metrics;

/// Why the process could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Logging flags are wrong.
    #[error("{0}")]
    Logging(String),
    /// The async runtime (Tokio) could not start.
    #[error("cannot start the async runtime: {0}")]
    AsyncRuntime(String),
    /// The KCP client could not be built.
    #[error("KCP connection (--kcp-kubeconfig-path, KUBECONFIG or in-cluster): {0}")]
    Kcp(String),
    /// The Gardener client could not be built.
    #[error(transparent)]
    Gardener(#[from] GardenerClientError),
    /// The KIM configuration is missing or wrong.
    #[error(transparent)]
    Config(#[from] kim_shared::config::ConfigError),
    /// The kubeconfig rotation flags are out of range.
    #[error(transparent)]
    Rotation(#[from] crate::gardener_cluster::rotation::RotationPolicyError),
    /// The project flag and the configuration name different Gardener projects.
    #[error(
        "--gardener-project-name is {flag:?} but converter.gardener.projectName in {} is {config:?}: Shoots would be created in garden-{config} and looked for in garden-{flag}; set both to the same project",
        path.display()
    )]
    ProjectMismatch {
        /// `--gardener-project-name`.
        flag: String,
        /// `converter.gardener.projectName`.
        config: String,
        /// The configuration file.
        path: std::path::PathBuf,
    },
    /// `--api-server-acl-enabled` without the ConfigMap that holds the operator addresses.
    #[error(
        "--api-server-acl-enabled needs converter.kubernetes.kubeApiServer.acl.configMapName in {}: the ConfigMap with the operator CIDRs and the KCP's NAT address (keys acl-list.json and kcp-external-nat-ip.json)",
        path.display()
    )]
    AclConfigMap {
        /// The configuration file.
        path: std::path::PathBuf,
    },
    /// A server port could not be bound.
    #[error(transparent)]
    Bind(#[from] kim_process::http::BindError),
    /// Leader election failed.
    #[error(transparent)]
    Leader(#[from] LeaderError),
    /// Another replica took over; the process exits so it restarts as a follower.
    #[error("lost leadership of the Lease; stopping so that only one replica reconciles")]
    LostLeadership,
    /// A reconciler panicked (a bug); the process exits so that a restarted or another replica
    /// takes over.
    #[error("a reconciler panicked (see the log line before); stopping")]
    ReconcilerPanicked,
}

/// How long a stopping leader waits for its Lease release: within the 5 s the Pod's 30 s grace
/// period leaves after the default `--graceful-shutdown-timeout`.
const LEASE_RELEASE_TIMEOUT: Duration = Duration::from_secs(3);

/// A started process: clients built, servers listening, reconcilers not yet running.
pub struct Process {
    /// The shared context handed to every reconciler.
    pub ctx: Arc<Context>,
    /// Bound `/metrics` address.
    pub metrics_addr: SocketAddr,
    /// Bound probes address.
    pub probes_addr: SocketAddr,
    /// This replica's identity in the leader-election Lease (`holderIdentity`).
    pub identity: String,
    /// The election this replica joins before it reconciles (none: it reconciles at once).
    leader_election: Option<LeaderElection>,
    /// How long to wait for in-flight reconciles at shutdown.
    drain_timeout: Duration,
    shutdown: Shutdown,
}

impl Process {
    /// Builds clients and starts the HTTP servers and the Gardener health check.
    pub async fn start(args: RunArgs, shutdown: Shutdown) -> Result<Self, RunError> {
        let settings = args.settings()?;
        let mut config = kim_shared::config::KimConfig::load(
            &kim_shared::config::ConfigPaths::new(&args.converter_config_filepath),
        )?;
        let bootstrapper = &settings.runtime.bootstrapper;
        if bootstrapper.enabled && !bootstrapper.kcp_cluster_trust_bundle.is_empty() {
            config.enable_cluster_trust_bundles();
        }
        let config = Arc::new(config);
        // Upstream takes the project from the flag for reads and deletes and from the
        // configuration for the Shoots it creates; when they differ every Shoot is created where
        // it is never looked for (docs/upstream-differences.md, "One Gardener project").
        let configured = &config.converter.gardener.project_name;
        if *configured != args.gardener_project_name {
            return Err(RunError::ProjectMismatch {
                flag: args.gardener_project_name.clone(),
                config: configured.clone(),
                path: args.converter_config_filepath.clone(),
            });
        }
        if settings.runtime.api_server_acl && config.acl_config_map_name().is_none() {
            return Err(RunError::AclConfigMap {
                path: args.converter_config_filepath.clone(),
            });
        }
        for warning in config.warnings() {
            tracing::warn!(%warning, "configuration");
        }
        let kcp = kcp_client(&args).await?;
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let registry = Arc::new(Mutex::new(registry));

        let gardener_config = gclient::load_config(&args.gardener_kubeconfig_path).await?;
        let gardener_url = gardener_config.cluster_url.to_string();
        let guard = GuardSettings {
            allow: AllowList::new(args.gardener_namespace()),
            qps: args.gardener_ratelimiter_qps,
            burst: args.gardener_ratelimiter_burst,
            timeout: args.gardener_request_timeout,
            write_timeout: args.gardener_write_timeout,
        };
        let (layer, watch_layer) = gclient::guards(guard, metrics.clone())?;
        let gardener_watch = gclient::build(
            gardener_config.clone(),
            &watch_layer,
            &args.gardener_kubeconfig_path,
        )?;
        let gardener = gclient::build(gardener_config, &layer, &args.gardener_kubeconfig_path)?;

        let metrics_addr = crate::server::serve_metrics(
            args.metrics_bind_address,
            registry.clone(),
            shutdown.clone(),
        )
        .await?;
        let probes_addr =
            crate::server::serve_probes(args.health_probe_bind_address, shutdown.clone()).await?;
        let (recoveries, gardener_recoveries) = tokio::sync::watch::channel(0);
        tokio::spawn(crate::gardener::health::run(
            gardener.clone(),
            gardener_url,
            metrics.clone(),
            args.gardener_health_interval,
            recoveries,
            shutdown.clone(),
        ));

        let ctx = Arc::new(Context::new(
            kcp,
            crate::context::GardenerClients {
                requests: gardener,
                watch: gardener_watch,
            },
            settings,
            config,
            metrics,
            registry,
            gardener_recoveries,
        ));
        Ok(Self {
            ctx,
            metrics_addr,
            probes_addr,
            identity: identity(),
            leader_election: args.leader_election(),
            drain_timeout: args.graceful_shutdown_timeout,
            shutdown,
        })
    }

    /// Waits for leadership (with `--leader-elect`), runs the reconcilers until shutdown.
    pub async fn run(self) -> Result<(), RunError> {
        let mut leadership = if let Some(election) = &self.leader_election {
            tracing::info!(
                identity = %self.identity,
                lease = %election.lease,
                namespace = %election.namespace,
                "waiting for leadership"
            );
            self.ctx.metrics.set_leader(&election.lease, false);
            let acquire = Leadership::acquire(self.ctx.kcp.clone(), election, &self.identity);
            let leadership = tokio::select! {
                l = acquire => l?,
                _ = self.shutdown.cancelled() => return Ok(()),
            };
            self.ctx.metrics.set_leader(&election.lease, true);
            Some(leadership)
        } else {
            None
        };
        let crashed = crate::Shutdown::new();
        let tasks = crate::spawn_reconcilers(&self.ctx, &self.shutdown, &crashed);
        let lost = async {
            match leadership.as_mut() {
                Some(l) => l.lost().await,
                None => std::future::pending().await,
            }
        };
        let result = tokio::select! {
            _ = self.shutdown.cancelled() => Ok(()),
            _ = lost => {
                self.shutdown.cancel();
                Err(RunError::LostLeadership)
            }
            // The other reconcilers drain as on SIGTERM; this replica still leads meanwhile.
            _ = crashed.cancelled() => {
                self.shutdown.cancel();
                Err(RunError::ReconcilerPanicked)
            }
        };
        let lost_before = matches!(result, Err(RunError::LostLeadership));
        if lost_before {
            // Another replica may lead by now: no reconcile may finish its writes, so none is
            // drained (controller-runtime exits at once too).
            for (_, task) in &tasks {
                task.abort();
            }
        }
        // A reconcile that hangs (a request without timeout, a bug) must not keep the process
        // alive after SIGTERM: the Pod would sit in Terminating until SIGKILL, and a stuck
        // process keeps its Lease until it expires. A leadership lost while draining ends the
        // drain at once: the next leader may already write.
        let lost_while_draining = async {
            match leadership.as_mut() {
                Some(l) if !lost_before => l.lost().await,
                _ => std::future::pending().await,
            }
        };
        let drained = drain(tasks, self.drain_timeout, lost_while_draining).await;
        if let Some(election) = &self.leader_election {
            self.ctx.metrics.set_leader(&election.lease, false);
        }
        match leadership {
            Some(leadership) if cut_off(&result, &drained) => {
                if !lost_before {
                    tracing::warn!(
                        aborted = ?drained.aborted,
                        lost_leadership = drained.lost_leadership,
                        panicked = matches!(result, Err(RunError::ReconcilerPanicked)),
                        "reconciles were cut off, their last requests may still be processed: the Lease is left to expire instead of being released"
                    );
                }
                leadership.abandon();
            }
            Some(leadership) => leadership.release(LEASE_RELEASE_TIMEOUT).await,
            None => {}
        }
        result
    }
}

/// Whether a reconcile was stopped mid-way, so that the Lease is left to expire: the
/// leadership was lost, a reconciler panicked (its reconciles in flight went with it), or the
/// drain cut some off ([`Drained::cut_off`]).
fn cut_off(result: &Result<(), RunError>, drained: &Drained) -> bool {
    matches!(
        result,
        Err(RunError::LostLeadership | RunError::ReconcilerPanicked)
    ) || drained.cut_off()
}

/// How the reconcilers ended at shutdown.
#[derive(Debug, Default, PartialEq)]
struct Drained {
    /// Reconcilers aborted at the drain timeout.
    aborted: Vec<&'static str>,
    /// The leadership was lost during the drain and every reconciler aborted.
    lost_leadership: bool,
}

impl Drained {
    /// Whether a reconcile was stopped mid-way: a request it had sent may still be processed
    /// (an API server finishes a write whose client went away), so releasing the Lease would
    /// let a follower start while it lands; the Lease expiry gives it that time.
    fn cut_off(&self) -> bool {
        self.lost_leadership || !self.aborted.is_empty()
    }
}

/// [`join_within`], unless `lost` resolves first: then every reconciler is aborted at once.
async fn drain(
    tasks: Vec<(&'static str, tokio::task::JoinHandle<()>)>,
    timeout: std::time::Duration,
    lost: impl std::future::Future<Output = ()>,
) -> Drained {
    let aborts: Vec<_> = tasks.iter().map(|(_, t)| t.abort_handle()).collect();
    let joined = join_within(tasks, timeout);
    tokio::pin!(joined);
    tokio::select! {
        aborted = &mut joined => Drained { aborted, lost_leadership: false },
        () = lost => {
            tracing::warn!("lost the leadership while draining; stopping every reconcile now");
            for abort in &aborts {
                abort.abort();
            }
            joined.await;
            Drained { aborted: Vec::new(), lost_leadership: true }
        }
    }
}

/// Waits for the reconciler tasks until `timeout` has passed (for all of them together) and
/// aborts the ones still running, logging each. Returns the names of the aborted ones.
async fn join_within(
    tasks: Vec<(&'static str, tokio::task::JoinHandle<()>)>,
    timeout: std::time::Duration,
) -> Vec<&'static str> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut aborted = Vec::new();
    for (name, mut task) in tasks {
        match tokio::time::timeout_at(deadline, &mut task).await {
            Ok(Ok(())) => {}
            // Aborted on lost leadership.
            Ok(Err(e)) if e.is_cancelled() => {}
            // `supervised` catches a reconciler's panic and reports it: only a panic in the
            // supervision itself ends here.
            Ok(Err(e)) => {
                tracing::error!(reconciler = name, error = %e, "reconciler task panicked")
            }
            Err(_) => {
                task.abort();
                aborted.push(name);
                tracing::error!(
                    reconciler = name,
                    ?timeout,
                    "reconciler did not stop within --graceful-shutdown-timeout; exiting without it"
                );
            }
        }
    }
    aborted
}

/// Starts the async runtime and runs the process until a signal or lost leadership.
pub fn execute(args: RunArgs) -> Result<(), crate::runner::RunError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::AsyncRuntime(e.to_string()))?;
    let result = runtime.block_on(run(args));
    // Dropping the runtime would wait without limit for blocking tasks (a DNS lookup of a
    // runtime cluster that does not answer); the reconcilers have stopped already.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// `kim-controller run`: logging, signals, [`Process::start`], [`Process::run`].
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    crate::logging::init(&log_filter(&args.log_level()), args.log_format())
        .map_err(RunError::Logging)?;
    for flag in &args.ignored_flags {
        tracing::warn!(%flag, "upstream flag accepted without effect");
    }
    let shutdown = Shutdown::new();
    kim_process::signal::cancel_on_signal(shutdown.clone());
    let process = Process::start(args, shutdown).await?;
    tracing::info!(
        metrics = %process.metrics_addr,
        probes = %process.probes_addr,
        "kim-controller started"
    );
    process.run().await
}

/// kube's HTTP trace layer logs every 5xx answer and connection failure at `error`, with no
/// context ("failed with status 503 Service Unavailable"). Those are transient, and the caller
/// (reconciler, health check) logs them with context at the right level, so `error` lines stay
/// things a human should look at. The default applies unless `--log-level` names `kube_client`.
/// (kube's client itself is kept at `error` by [`kim_process::logging::filter`].)
pub const KUBE_TRACE_DIRECTIVE: &str = "kube_client::client::builder=off";

/// `--log-level` with [`KUBE_TRACE_DIRECTIVE`] added unless the filter names `kube_client`.
pub fn log_filter(user: &str) -> String {
    if user.contains("kube_client") {
        user.to_owned()
    } else if user.trim().is_empty() {
        format!("info,{KUBE_TRACE_DIRECTIVE}")
    } else {
        format!("{user},{KUBE_TRACE_DIRECTIVE}")
    }
}

async fn kcp_client(args: &RunArgs) -> Result<kube::Client, RunError> {
    let mut config = match &args.kcp_kubeconfig_path {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| RunError::Kcp(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| RunError::Kcp(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| RunError::Kcp(e.to_string()))?,
    };
    crate::gardener::client::identify(&mut config);
    kube::Client::try_from(config).map_err(|e| RunError::Kcp(e.to_string()))
}

/// `<pod or host name>_<unique suffix>`, as controller-runtime does (`hostname_uuid`): two
/// replicas never share an identity, not even two processes on one host or a restarted pod
/// whose old Lease has not expired yet (it must wait, not resume the old leadership).
fn identity() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STARTED: AtomicU64 = AtomicU64::new(0);
    let host = ["POD_NAME", "HOSTNAME"]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "kim-controller".to_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    format!("{host}_{:x}-{nanos:x}-{n}", std::process::id())
}

#[cfg(test)]
mod tests {
    #[test]
    fn kube_trace_errors_are_off_unless_asked_for() {
        assert_eq!(
            super::log_filter("info"),
            "info,kube_client::client::builder=off"
        );
        assert_eq!(
            super::log_filter("info,kube_client=debug"),
            "info,kube_client=debug"
        );
    }

    /// A leadership lost during the drain stops every reconcile at once (the next leader may
    /// already write) and the Lease is then left to expire; a drain that ends in time
    /// releases it.
    #[tokio::test]
    async fn a_leadership_lost_while_draining_aborts_every_reconcile_at_once() {
        use std::time::{Duration, Instant};
        let hung = || tokio::spawn(std::future::pending::<()>());
        let started = Instant::now();
        let drained = super::drain(
            vec![("runtime", hung()), ("gardener_cluster", hung())],
            Duration::from_secs(60),
            tokio::time::sleep(Duration::from_millis(50)),
        )
        .await;
        assert!(drained.lost_leadership);
        assert!(drained.cut_off());
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "waited for the drain timeout"
        );

        let drained = super::drain(
            vec![("runtime", tokio::spawn(async {}))],
            Duration::from_secs(60),
            std::future::pending(),
        )
        .await;
        assert_eq!(drained, super::Drained::default());
        assert!(!drained.cut_off(), "a clean drain releases the Lease");

        let drained = super::drain(
            vec![("runtime", hung())],
            Duration::from_millis(50),
            std::future::pending(),
        )
        .await;
        assert_eq!(drained.aborted, vec!["runtime"]);
        assert!(
            drained.cut_off(),
            "an aborted reconcile leaves the Lease to expire"
        );
    }

    /// A reconciler that panicked took its reconciles in flight with it: their last requests
    /// may still land, so the Lease is left to expire, as after a lost leadership; a clean stop
    /// releases it.
    #[test]
    fn a_panicked_reconciler_leaves_the_lease_to_expire() {
        use super::{Drained, RunError, cut_off};
        let clean = Drained::default();
        assert!(cut_off(&Err(RunError::ReconcilerPanicked), &clean));
        assert!(cut_off(&Err(RunError::LostLeadership), &clean));
        assert!(!cut_off(&Ok(()), &clean));
        let aborted = Drained {
            aborted: vec!["runtime"],
            lost_leadership: false,
        };
        assert!(cut_off(&Ok(()), &aborted));
    }

    /// A reconciler that does not return after shutdown (a request without timeout, a bug)
    /// is aborted once --graceful-shutdown-timeout has passed; the others are waited for.
    #[tokio::test]
    async fn shutdown_waits_for_reconcilers_up_to_the_timeout_then_aborts_the_hung_one() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::{Duration, Instant};

        struct SetOnDrop(Arc<AtomicBool>);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let hung_dropped = Arc::new(AtomicBool::new(false));
        let slow_done = Arc::new(AtomicBool::new(false));
        let guard = SetOnDrop(hung_dropped.clone());
        let done = slow_done.clone();
        let tasks = vec![
            ("quick", tokio::spawn(async {})),
            (
                "hung",
                tokio::spawn(async move {
                    let _guard = guard;
                    std::future::pending::<()>().await
                }),
            ),
            (
                "slow",
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    done.store(true, Ordering::SeqCst);
                }),
            ),
        ];
        let started = Instant::now();
        let aborted = super::join_within(tasks, Duration::from_millis(500)).await;
        let took = started.elapsed();
        assert_eq!(aborted, vec!["hung"]);
        assert!(
            slow_done.load(Ordering::SeqCst),
            "the slow reconciler was not waited for"
        );
        // It waited the timeout for the hung one (no upper bound: the machine's load decides).
        assert!(took >= Duration::from_millis(500), "took {took:?}");
        // The aborted task is dropped by the runtime soon after the abort.
        for _ in 0..100 {
            if hung_dropped.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            hung_dropped.load(Ordering::SeqCst),
            "the hung reconciler was not aborted"
        );
    }

    #[test]
    fn identities_are_unique_within_a_process() {
        let (a, b) = (super::identity(), super::identity());
        assert_ne!(a, b);
        assert!(a.contains('_'), "{a}");
    }
}
