//! Metrics of the process: upstream's names where upstream has them
//! (`infrastructure_manager_im_*`), plus reconcile duration, queue depth, Gardener requests by
//! code and rate-limit waits, requests to runtime clusters, and how long Runtimes take to
//! provision and to delete.

use std::collections::HashMap;
use std::sync::Mutex;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{Request, Response};
use kim_process::label::Text;
use kube::client::Body;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::records::lock;

/// Prefix of upstream's metrics (`infrastructure_manager_im_runtime_state`).
pub const PREFIX: &str = "infrastructure_manager_im";

/// The `result` of a reconcile that failed because the stored object does not read with our
/// types (the alert `KimObjectCannotBeRead`).
pub const RESULT_UNREADABLE: &str = "unreadable";

/// The `result` of a reconcile that waits for something outside the control plane (a
/// RuntimeAccess deletion for its hibernated cluster): not a failure.
pub const RESULT_WAITING: &str = "waiting";

/// The `operation` values of `gardener_busy_total`.
pub const BUSY_OPERATIONS: [&str; 7] = [
    "create",
    "patch",
    "delete",
    "config_map",
    "get",
    "adminkubeconfig",
    "other",
];

/// The `code` of a Gardener request the client's allow-list refused before sending it.
pub const CODE_DENIED: &str = "denied";

/// A gauge with at most one series per object (by key): setting an object's series removes
/// its previous one, so a changed label (a state, a reason) leaves no stale series behind.
pub struct SeriesPerObject<L> {
    family: Family<L, Gauge>,
    series: Mutex<HashMap<String, L>>,
}

impl<L: Clone + std::hash::Hash + Eq> Default for SeriesPerObject<L> {
    fn default() -> Self {
        Self {
            family: Family::default(),
            series: Mutex::default(),
        }
    }
}

impl<L: Clone + std::hash::Hash + Eq> SeriesPerObject<L> {
    /// The family, to register.
    pub fn family(&self) -> Family<L, Gauge> {
        self.family.clone()
    }

    /// Sets the series of object `key` to `value`, removing its previous one.
    pub fn set(&self, key: &str, labels: L, value: i64) {
        let mut series = lock(&self.series);
        if let Some(old) = series.insert(key.to_owned(), labels.clone())
            && old != labels
        {
            self.family.remove(&old);
        }
        self.family.get_or_create(&labels).set(value);
    }

    /// The objects that have a series.
    pub fn keys(&self) -> Vec<String> {
        lock(&self.series).keys().cloned().collect()
    }

    /// Removes the series of object `key` (it is gone).
    pub fn remove(&self, key: &str) {
        if let Some(old) = lock(&self.series).remove(key) {
            self.family.remove(&old);
        }
    }
}

/// A reconciler's error as the `result` label of `infrastructure_manager_im_reconciles_total`.
pub trait ResultLabel {
    /// The label of this failure (`error`, [`RESULT_UNREADABLE`], ...).
    fn result_label(&self) -> &'static str;
}

/// Labels of `infrastructure_manager_im_runtime_state` (upstream's camelCase names). The
/// fields that carry text from the spec or from an answer are [`Text`], escaped when written.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
#[allow(non_snake_case)]
pub struct RuntimeStateLabels {
    /// The `kyma-project.io/runtime-id` label.
    pub runtimeId: String,
    /// The Runtime's name.
    pub runtimeName: String,
    /// `spec.shoot.name`.
    pub shoot: Text,
    /// `spec.shoot.provider.type`.
    pub provider: Text,
    /// `status.state`.
    pub state: String,
    /// The last condition's message, or `No value` (Gardener's answers quote names).
    pub message: Text,
}

/// Labels naming a reconciler.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `runtime`, `gardener_cluster`, ...
    pub controller: String,
}

/// Labels of a reconcile outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// The reconciler.
    pub controller: String,
    /// `success` or an error kind.
    pub result: String,
}

/// Labels of a request to a runtime (shoot) cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// HTTP method.
    pub method: String,
    /// HTTP status code, or `error` when no response came.
    pub code: String,
}

/// Labels of a Gardener request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GardenerRequestLabels {
    /// HTTP method.
    pub method: String,
    /// HTTP status code, or `timeout`, `error`, `denied` when no response came.
    pub code: String,
}

/// Labels of a Gardener request's duration.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    /// HTTP method.
    pub method: String,
}

/// Labels of a "try later" answer from Gardener.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BusyLabels {
    /// What was refused: `create`, `patch`, `config_map`, ...
    pub operation: String,
}

/// Labels of `leader_election_master_status` (controller-runtime's series, which upstream's
/// binary exports).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    /// The Lease's name.
    pub name: String,
}

/// Labels of `infrastructure_manager_im_gardener_health`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HealthLabels {
    /// The probed Gardener URL.
    pub url: String,
    /// `healthy`, `error` or `unknown`.
    pub status: String,
}

/// The metrics the skeleton and the Runtime reconciler maintain.
pub struct Metrics {
    /// One series per runtime ID.
    runtime_state: SeriesPerObject<RuntimeStateLabels>,
    /// Upstream `unexpected_stops_total`: Runtimes that became `Failed`.
    pub unexpected_stops: Counter,
    /// Reconcile durations by controller.
    pub reconcile_duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    /// Reconciles by controller and result.
    pub reconciles: Family<ReconcileLabels, Counter>,
    /// Objects waiting for a reconcile (scheduled requeues plus in-flight) by controller.
    pub queue_depth: Family<ControllerLabels, Gauge>,
    /// Requests to Gardener by method and response code.
    pub gardener_requests: Family<GardenerRequestLabels, Counter>,
    /// Latest Gardener health probe: 1 for the current status, 0 for the others.
    pub gardener_health: Family<HealthLabels, Gauge>,
    /// Time until Gardener's response headers, by method (timeouts not included).
    pub gardener_request_duration: Family<MethodLabels, Histogram, fn() -> Histogram>,
    /// Gardener answers that said "try later" (429, 503, 504, rate-limit or not-ready 403,
    /// timeout) by the operation refused; the Runtime stays `Pending` and retries.
    pub gardener_busy: Family<BusyLabels, Counter>,
    /// Objects retried at once, by controller, because Gardener answered its health probe
    /// again after failing it.
    pub gardener_recovery_retries: Family<ControllerLabels, Counter>,
    /// Shoot creates allowed in flight at once (adapts to Gardener's answers).
    pub shoot_create_limit: Gauge,
    /// Shoot creates in flight.
    pub shoot_creates_in_flight: Gauge,
    /// From a Runtime's creation to its first Ready. Without labels, so the series exists
    /// from the start and the first Runtime counts in `increase()` (a series born with its
    /// first observation does not).
    pub runtime_provisioning_duration: Histogram,
    /// From a Runtime's deletion timestamp to the removal of its finalizer.
    pub runtime_deletion_duration: Histogram,
    /// Time each Gardener request waited in the client's token-bucket rate limiter
    /// (`--gardener-ratelimiter-qps/-burst`), zero included.
    pub gardener_rate_limit_wait: Histogram,
    /// Requests the Runtime and registry-cache reconcilers sent to runtime clusters, by method
    /// and code (no label per cluster: one series set for any number of Runtimes).
    pub runtime_cluster_requests: Family<RequestLabels, Counter>,
    /// Watch steps that failed because an object did not decode, by watch.
    watch_decode_errors: Family<WatchLabels, Counter>,
    /// Complete lists (the first and each relist), by watch.
    watch_lists: Family<WatchLabels, Counter>,
    /// 1 while this replica holds the leader-election Lease, 0 while it waits or after.
    leader: Family<LeaseLabels, Gauge>,
}

/// Labels naming a watch.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    /// The watch: `runtimes`, `shoots`, `gardener_cluster`, `access`,
    /// ... (docs/operations.md, watch-cannot-decode).
    pub watch: String,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry` (the root registry).
    pub fn register(registry: &mut Registry) -> std::sync::Arc<Self> {
        let m = Metrics {
            runtime_state: SeriesPerObject::default(),
            unexpected_stops: Counter::default(),
            reconcile_duration: Family::new_with_constructor(duration_histogram),
            reconciles: Family::default(),
            queue_depth: Family::default(),
            gardener_requests: Family::default(),
            gardener_health: Family::default(),
            gardener_request_duration: Family::new_with_constructor(request_histogram),
            gardener_busy: Family::default(),
            gardener_recovery_retries: Family::default(),
            shoot_create_limit: Gauge::default(),
            shoot_creates_in_flight: Gauge::default(),
            runtime_provisioning_duration: lifecycle_histogram(),
            runtime_deletion_duration: lifecycle_histogram(),
            gardener_rate_limit_wait: rate_limit_histogram(),
            runtime_cluster_requests: Family::default(),
            watch_decode_errors: Family::default(),
            watch_lists: Family::default(),
            leader: Family::default(),
        };
        // Upstream registers this counter without a prefix.
        registry.register(
            "unexpected_stops",
            "Runtimes that became Failed",
            m.unexpected_stops.clone(),
        );
        // controller-runtime's name, which dashboards of upstream's replicas read.
        registry.register(
            "leader_election_master_status",
            "Whether this replica holds the leader-election Lease named by name (1) or waits for it (0)",
            m.leader.clone(),
        );
        let sub = registry.sub_registry_with_prefix(PREFIX);
        sub.register(
            "runtime_state",
            "State of each Runtime (always 1; the labels carry the state)",
            m.runtime_state.family(),
        );
        sub.register(
            "reconcile_duration_seconds",
            "Duration of one reconcile",
            m.reconcile_duration.clone(),
        );
        sub.register("reconciles", "Reconciles by result", m.reconciles.clone());
        sub.register(
            "reconcile_queue_depth",
            "Objects with a scheduled or running reconcile",
            m.queue_depth.clone(),
        );
        sub.register(
            "gardener_requests",
            "Requests sent to Gardener by method and response code",
            m.gardener_requests.clone(),
        );
        sub.register(
            "gardener_health",
            "Latest Gardener health probe (1 marks the current status)",
            m.gardener_health.clone(),
        );
        sub.register(
            "gardener_request_duration_seconds",
            "Time until Gardener's response headers by method",
            m.gardener_request_duration.clone(),
        );
        sub.register(
            "gardener_busy",
            "Gardener answers that said try later (408, 429, 503, 504, rate-limit or not-ready 403, timeout) by operation",
            m.gardener_busy.clone(),
        );
        sub.register(
            "gardener_recovery_retries",
            "Objects retried at once because Gardener answered its health probe again after failing it",
            m.gardener_recovery_retries.clone(),
        );
        sub.register(
            "shoot_create_limit",
            "Shoot creates allowed in flight at once (grows on quick answers, halves when Gardener is busy)",
            m.shoot_create_limit.clone(),
        );
        sub.register(
            "shoot_creates_in_flight",
            "Shoot creates in flight",
            m.shoot_creates_in_flight.clone(),
        );
        sub.register(
            "runtime_provisioning_duration_seconds",
            "Time from a Runtime's creation to its first Ready state",
            m.runtime_provisioning_duration.clone(),
        );
        sub.register(
            "runtime_deletion_duration_seconds",
            "Time from a Runtime's deletion timestamp to the removal of its finalizer",
            m.runtime_deletion_duration.clone(),
        );
        sub.register(
            "gardener_rate_limit_wait_seconds",
            "Time a Gardener request waited in the client's rate limiter (--gardener-ratelimiter-qps/-burst)",
            m.gardener_rate_limit_wait.clone(),
        );
        sub.register(
            "runtime_cluster_requests",
            "Requests the Runtime and registry-cache reconcilers sent to runtime clusters by method and code",
            m.runtime_cluster_requests.clone(),
        );
        sub.register(
            "watch_decode_errors",
            "Watch steps that failed because a stored object does not decode; the watch sees no change until it is fixed",
            m.watch_decode_errors.clone(),
        );
        sub.register(
            "watch_lists",
            "Complete lists of each watch: its first, then one per relist (after a 410 Gone, when its resourceVersion is no longer served)",
            m.watch_lists.clone(),
        );
        // At 0 from the start, so that a first answer shows in `increase()` and the
        // dashboards have a series before Gardener is ever busy.
        for operation in BUSY_OPERATIONS {
            drop(m.gardener_busy.get_or_create(&BusyLabels {
                operation: operation.to_owned(),
            }));
        }
        // At 0 from the start: the allow-list's first refusal must show in `increase()`
        // (KimGardenerRequestsDenied), and a series born at 1 would not.
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            drop(m.gardener_requests.get_or_create(&GardenerRequestLabels {
                method: method.to_owned(),
                code: CODE_DENIED.to_owned(),
            }));
        }
        std::sync::Arc::new(m)
    }

    /// Creates the decode-error series of `watch` at 0, so that its first error counts in
    /// `increase()`.
    pub fn track_watch(&self, watch: &str) {
        drop(self.watch_decode_errors.get_or_create(&WatchLabels {
            watch: watch.to_owned(),
        }));
    }

    /// Creates the list series of `watch` at 0, so that its first list counts in `increase()`.
    pub fn track_lists(&self, watch: &str) {
        drop(self.watch_lists.get_or_create(&WatchLabels {
            watch: watch.to_owned(),
        }));
    }

    /// Counts one complete list of `watch`.
    pub fn count_watch_list(&self, watch: &str) {
        self.watch_lists
            .get_or_create(&WatchLabels {
                watch: watch.to_owned(),
            })
            .inc();
    }

    /// Counts one failed step of `watch` on an object that does not decode.
    pub fn count_watch_decode_error(&self, watch: &str) {
        self.watch_decode_errors
            .get_or_create(&WatchLabels {
                watch: watch.to_owned(),
            })
            .inc();
    }

    /// Failed steps of `watch` counted so far.
    #[cfg(test)]
    pub fn watch_decode_errors(&self, watch: &str) -> u64 {
        self.watch_decode_errors
            .get_or_create(&WatchLabels {
                watch: watch.to_owned(),
            })
            .get()
    }

    /// Records a Runtime's first Ready, `took` after its creation.
    pub fn observe_provisioning(&self, took: Duration) {
        self.runtime_provisioning_duration
            .observe(took.as_secs_f64());
    }

    /// Records a Runtime's finalizer removal, `took` after its deletion timestamp.
    pub fn observe_deletion(&self, took: Duration) {
        self.runtime_deletion_duration.observe(took.as_secs_f64());
    }

    /// Counts one "try later" answer to `operation`.
    pub fn count_gardener_busy(&self, operation: &str) {
        self.gardener_busy
            .get_or_create(&BusyLabels {
                operation: operation.to_owned(),
            })
            .inc();
    }

    /// Records how long Gardener took to answer a request.
    pub fn observe_gardener_request(&self, method: &str, took: Duration) {
        self.gardener_request_duration
            .get_or_create(&MethodLabels {
                method: method.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// Publishes whether this replica holds the Lease `lease`.
    pub fn set_leader(&self, lease: &str, leading: bool) {
        self.leader
            .get_or_create(&LeaseLabels {
                name: lease.to_owned(),
            })
            .set(i64::from(leading));
    }

    /// Sets the state series of one runtime, removing its previous series.
    pub fn set_runtime_state(&self, labels: RuntimeStateLabels) {
        let key = labels.runtimeId.clone();
        self.runtime_state.set(&key, labels, 1);
    }

    /// The runtime IDs that have a state series.
    pub fn runtime_state_ids(&self) -> Vec<String> {
        self.runtime_state.keys()
    }

    /// Removes the state series of a runtime (after its finalizer is gone).
    pub fn remove_runtime_state(&self, runtime_id: &str) {
        self.runtime_state.remove(runtime_id);
    }

    /// Counts `objects` retried by `controller` because Gardener is reachable again.
    pub fn retried_after_recovery(&self, controller: &str, objects: usize) {
        self.gardener_recovery_retries
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .inc_by(objects as u64);
    }

    /// Creates the series of `controller`'s `result` at 0, so that the first such reconcile
    /// counts in `increase()` (an alert's).
    pub fn track_reconcile_result(&self, controller: &str, result: &str) {
        drop(self.reconciles.get_or_create(&ReconcileLabels {
            controller: controller.to_owned(),
            result: result.to_owned(),
        }));
    }

    /// Records one reconcile.
    pub fn observe_reconcile(&self, controller: &str, result: &str, took: Duration) {
        self.reconcile_duration
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .observe(took.as_secs_f64());
        self.reconciles
            .get_or_create(&ReconcileLabels {
                controller: controller.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }

    /// Records one reconcile: `success`, or the failure's [`ResultLabel`].
    pub fn observe_reconcile_result<T, E: ResultLabel>(
        &self,
        controller: &str,
        result: &Result<T, E>,
        took: Duration,
    ) {
        let outcome = match result {
            Ok(_) => "success",
            Err(e) => e.result_label(),
        };
        self.observe_reconcile(controller, outcome, took);
    }

    /// Sets the queue depth of a controller.
    pub fn set_queue_depth(&self, controller: &str, depth: usize) {
        self.queue_depth
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// Counts one Gardener request.
    pub fn count_gardener_request(&self, method: &str, code: &str) {
        self.gardener_requests
            .get_or_create(&GardenerRequestLabels {
                method: method.to_owned(),
                code: code.to_owned(),
            })
            .inc();
    }

    /// Publishes a health probe result: `status` gets 1, the other two 0.
    pub fn set_gardener_health(&self, url: &str, status: &str) {
        for s in ["healthy", "error", "unknown"] {
            self.gardener_health
                .get_or_create(&HealthLabels {
                    url: url.to_owned(),
                    status: s.to_owned(),
                })
                .set(i64::from(s == status));
        }
    }
}

/// A client layer that counts every request in a family by method and response code.
#[derive(Clone)]
pub struct CountLayer(pub Family<RequestLabels, Counter>);

impl<S> tower::Layer<S> for CountLayer {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Counted {
            inner,
            requests: self.0.clone(),
        }
    }
}

/// The service [`CountLayer`] produces.
pub struct Counted<S> {
    inner: S,
    requests: Family<RequestLabels, Counter>,
}

impl<S, B> tower::Service<Request<Body>> for Counted<S>
where
    S: tower::Service<Request<Body>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<B>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let method = req.method().as_str().to_owned();
        let requests = self.requests.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let result = fut.await;
            let code = match &result {
                Ok(resp) => resp.status().as_str().to_owned(),
                Err(_) => "error".to_owned(),
            };
            requests
                .get_or_create(&RequestLabels { method, code })
                .inc();
            result
        })
    }
}

fn duration_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

/// Gardener answers: from a fast read to admission queueing of tens of seconds.
fn request_histogram() -> Histogram {
    Histogram::new([
        0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0,
    ])
}

/// Provisioning and deletion: Gardener takes minutes to an hour; seconds in tests.
fn lifecycle_histogram() -> Histogram {
    Histogram::new([
        1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
        7200.0, // Deletions include --deletion-grace-period (72 h in production): up to 4 days.
        14400.0, 43200.0, 86400.0, 172800.0, 259200.0, 345600.0,
    ])
}

/// Rate-limit waits: none while under the burst, then fractions of a second per request, up
/// to seconds when a relist meets a busy bucket.
fn rate_limit_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

/// Renders the registry in the OpenMetrics text format.
pub fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(state: &str) -> RuntimeStateLabels {
        RuntimeStateLabels {
            runtimeId: "rt-1".into(),
            runtimeName: "rt-1".into(),
            shoot: "s1".into(),
            provider: "aws".into(),
            state: state.into(),
            message: "No value".into(),
        }
    }

    #[test]
    fn upstream_names_and_one_series_per_runtime() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.set_runtime_state(labels("Pending"));
        m.set_runtime_state(labels("Ready"));
        m.unexpected_stops.inc();
        let text = encode(&registry).unwrap();
        assert!(
            text.contains(
                "infrastructure_manager_im_runtime_state{runtimeId=\"rt-1\",runtimeName=\"rt-1\",shoot=\"s1\",provider=\"aws\""
            ),
            "{text}"
        );
        assert!(text.contains("state=\"Ready\""), "{text}");
        assert!(!text.contains("state=\"Pending\""), "{text}");
        assert!(text.contains("\nunexpected_stops_total 1"), "{text}");
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            let series = format!(
                "infrastructure_manager_im_gardener_requests_total{{method=\"{method}\",code=\"denied\"}} 0\n"
            );
            assert!(text.contains(&series), "{series} missing: {text}");
        }
        for operation in BUSY_OPERATIONS {
            let series = format!(
                "infrastructure_manager_im_gardener_busy_total{{operation=\"{operation}\"}} 0\n"
            );
            assert!(text.contains(&series), "{series} missing: {text}");
        }
        m.remove_runtime_state("rt-1");
        let text = encode(&registry).unwrap();
        assert!(!text.contains("runtimeId=\"rt-1\""), "{text}");
    }

    #[test]
    fn lifecycle_durations_by_provider_and_rate_limit_waits() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.observe_provisioning(Duration::from_secs(700));
        m.observe_deletion(Duration::from_secs(3));
        m.gardener_rate_limit_wait.observe(0.0);
        let text = encode(&registry).unwrap();
        for line in [
            "infrastructure_manager_im_runtime_provisioning_duration_seconds_bucket{le=\"600.0\"} 0",
            "infrastructure_manager_im_runtime_provisioning_duration_seconds_bucket{le=\"900.0\"} 1",
            "infrastructure_manager_im_runtime_deletion_duration_seconds_bucket{le=\"5.0\"} 1",
            "infrastructure_manager_im_gardener_rate_limit_wait_seconds_bucket{le=\"0.001\"} 1",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[test]
    fn health_marks_one_status() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.set_gardener_health("https://g", "unknown");
        m.set_gardener_health("https://g", "healthy");
        let text = encode(&registry).unwrap();
        assert!(
            text.contains(
                "infrastructure_manager_im_gardener_health{url=\"https://g\",status=\"healthy\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "infrastructure_manager_im_gardener_health{url=\"https://g\",status=\"unknown\"} 0"
            ),
            "{text}"
        );
    }
}
