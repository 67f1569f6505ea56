//! The state every reconciler shares: clients, settings, metrics, event recorder.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder, Reporter};
use prometheus_client::registry::Registry;

use crate::metrics::Metrics;
use crate::settings::Settings;

/// Cancelled when the process stops or loses leadership; reconcilers return soon after.
pub type Shutdown = kim_process::Shutdown;

/// Objects per page of a reconciler watch's initial list. A page is decoded whole and held
/// until the reflector has taken its last object; at 10,000 Runtimes kube's default of 500
/// held about 14 MiB of pages at the peak of a restart (heap profile).
pub const LIST_PAGE_SIZE: u32 = 100;

/// Shared by all reconcilers of the process (wrapped in an `Arc`).
pub struct Context {
    /// Client of the KCP cluster (Runtimes, GardenerClusters, Secrets, Events, Lease).
    pub kcp: kube::Client,
    /// Client of the Gardener project: rate-limited, timed out, verb allow-listed
    /// (see [`crate::gardener::client`]).
    pub gardener: kube::Client,
    /// The same for the Shoot watch, with a rate limiter of its own (as client-go gives each
    /// client one): the pages of a relist do not wait in line behind the reconcilers'
    /// requests. Behind a busy line a relist of 10,000 Shoots (100 pages) would take longer
    /// than etcd keeps its continue token, and start over for good.
    pub gardener_watch: kube::Client,
    /// The Gardener project namespace, `garden-<project>`.
    pub gardener_namespace: String,
    /// What the reconcilers are configured with.
    pub settings: Settings,
    /// The KIM configuration (converter config, audit-log tenants, maintenance windows).
    pub config: Arc<kim_shared::config::KimConfig>,
    /// Metrics of the skeleton and the Runtime reconciler.
    pub metrics: Arc<Metrics>,
    /// The process-wide Prometheus registry; reconcilers register their own metrics here
    /// (under the `infrastructure_manager_im` prefix use [`Context::register_metrics`]).
    pub registry: Arc<Mutex<Registry>>,
    /// Publishes Kubernetes Events on the KCP cluster.
    pub recorder: EventPublisher,
    /// How often Gardener answered its health probe again after failing it (see
    /// [`crate::gardener::health::recoveries`]).
    pub gardener_recoveries: tokio::sync::watch::Receiver<u64>,
}

/// Publishes Kubernetes Events (`events.k8s.io/v1`) without remembering them.
///
/// kube's [`Recorder`] keeps every Event it published for six minutes to count repeats as a
/// series; at 1,000 Runtimes that cache would be the largest single consumer of memory (about
/// 15 KiB per Runtime). Our Events are one per condition change, so repeats are rare and a
/// repeat is simply its own Event.
#[derive(Clone)]
pub struct EventPublisher {
    client: kube::Client,
    reporter: Reporter,
}

impl EventPublisher {
    /// A publisher that reports as `reporter`.
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Self { client, reporter }
    }

    /// Creates the Event in the namespace of `reference`, its note cut to what the API server
    /// accepts.
    pub async fn publish(
        &self,
        ev: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let ev = Event {
            type_: ev.type_,
            reason: ev.reason.clone(),
            note: ev.note.as_deref().map(bounded_note),
            action: ev.action.clone(),
            secondary: ev.secondary.clone(),
        };
        // A Recorder per Event: its cache starts empty and is dropped right after.
        Recorder::new(self.client.clone(), self.reporter.clone())
            .publish(&ev, reference)
            .await
    }
}

/// The longest note of an `events.k8s.io/v1` Event the API server accepts; a longer one is
/// refused and the Event lost, while conditions carry longer messages.
const MAX_NOTE: usize = 1024;

/// `note` cut to [`MAX_NOTE`] bytes on a character boundary, ending in `...` when cut.
fn bounded_note(note: &str) -> String {
    kim_shared::api::cut_marked(note.to_owned(), MAX_NOTE, "...")
}

/// The Gardener clients ([`Context::gardener`], [`Context::gardener_watch`]).
pub struct GardenerClients {
    /// For the reconcilers' requests.
    pub requests: kube::Client,
    /// For the Shoot watch.
    pub watch: kube::Client,
}

/// Name that Events and field managers report.
pub const CONTROLLER_NAME: &str = "kim-controller";

impl Context {
    /// Builds the context; `registry` must already hold [`Metrics`].
    pub fn new(
        kcp: kube::Client,
        gardener: GardenerClients,
        settings: Settings,
        config: Arc<kim_shared::config::KimConfig>,
        metrics: Arc<Metrics>,
        registry: Arc<Mutex<Registry>>,
        gardener_recoveries: tokio::sync::watch::Receiver<u64>,
    ) -> Self {
        let recorder = EventPublisher::new(kcp.clone(), Reporter::from(CONTROLLER_NAME));
        Self {
            gardener_namespace: settings.gardener_namespace.clone(),
            kcp,
            gardener: gardener.requests,
            gardener_watch: gardener.watch,
            settings,
            config,
            metrics,
            registry,
            recorder,
            gardener_recoveries,
        }
    }

    /// Runs `f` with the `infrastructure_manager_im` sub-registry, for a reconciler's metrics.
    pub fn register_metrics(&self, f: impl FnOnce(&mut Registry)) {
        let mut root = crate::records::lock(&self.registry);
        f(root.sub_registry_with_prefix(crate::metrics::PREFIX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_note_is_cut_to_what_the_api_server_accepts() {
        assert_eq!(bounded_note("short"), "short");
        let exact = "x".repeat(MAX_NOTE);
        assert_eq!(bounded_note(&exact), exact);
        let long = "ä".repeat(MAX_NOTE);
        let cut = bounded_note(&long);
        assert!(cut.len() <= MAX_NOTE, "{}", cut.len());
        assert!(cut.len() >= MAX_NOTE - 4, "{}", cut.len());
        assert!(cut.ends_with("..."));
    }
}
