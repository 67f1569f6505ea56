//! The state every reconciler shares: clients, flags, metrics, event recorder.

use std::sync::{Arc, Mutex};

use kube::runtime::events::{Recorder, Reporter};
use prometheus_client::registry::Registry;

use crate::cli::run::RunArgs;
use crate::metrics::Metrics;

/// Cancelled when the process stops or loses leadership; reconcilers return soon after.
pub type Shutdown = tokio_util::sync::CancellationToken;

/// Shared by all reconcilers of the process (wrapped in an `Arc`).
pub struct Context {
    /// Client of the KCP cluster (Runtimes, GardenerClusters, Secrets, Events, Lease).
    pub kcp: kube::Client,
    /// Client of the Gardener project: rate-limited, timed out, verb allow-listed
    /// (see [`crate::gardener::client`]).
    pub gardener: kube::Client,
    /// The Gardener project namespace, `garden-<project>`.
    pub gardener_namespace: String,
    /// The flags the process was started with.
    pub args: RunArgs,
    /// The KIM configuration (converter config, audit-log tenants, maintenance windows).
    pub config: Arc<kim_shared::config::KimConfig>,
    /// Metrics of the skeleton and the Runtime reconciler.
    pub metrics: Arc<Metrics>,
    /// The process-wide Prometheus registry; reconcilers register their own metrics here
    /// (under the `infrastructure_manager_im` prefix use [`Context::register_metrics`]).
    pub registry: Arc<Mutex<Registry>>,
    /// Publishes Kubernetes Events on the KCP cluster.
    pub recorder: Recorder,
}

/// Name that Events and field managers report.
pub const CONTROLLER_NAME: &str = "kim-controller";

impl Context {
    /// Builds the context; `registry` must already hold [`Metrics`].
    pub fn new(
        kcp: kube::Client,
        gardener: kube::Client,
        args: RunArgs,
        config: Arc<kim_shared::config::KimConfig>,
        metrics: Arc<Metrics>,
        registry: Arc<Mutex<Registry>>,
    ) -> Self {
        let recorder = Recorder::new(kcp.clone(), Reporter::from(CONTROLLER_NAME));
        Self {
            gardener_namespace: args.gardener_namespace(),
            kcp,
            gardener,
            args,
            config,
            metrics,
            registry,
            recorder,
        }
    }

    /// Runs `f` with the `infrastructure_manager_im` sub-registry, for a reconciler's metrics.
    pub fn register_metrics(&self, f: impl FnOnce(&mut Registry)) {
        // A poisoned lock only means another registration panicked; the registry is intact.
        let mut root = match self.registry.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(root.sub_registry_with_prefix(crate::metrics::PREFIX));
    }
}
