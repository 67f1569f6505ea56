//! Gardener simulator: plays gardener-scheduler and gardenlet for Shoots stored in the real
//! gardener-apiserver. It adds the finalizer, binds Shoots to a Seed, runs Create, Reconcile
//! and Delete operations through Processing (progress 0, 30, 70) to Succeeded, writes
//! conditions, `advertisedAddresses` and the client CA objects (InternalSecret
//! `<shoot>.ca-client`, ConfigMap `<shoot>.ca-cluster`) so the real `shoots/adminkubeconfig`
//! returns kubeconfigs that work against the shoot API server, follows hibernation, and injects
//! faults.
//!
//! Faults, most specific first: the Shoot annotation [`FAULT_ANNOTATION`], the key
//! `<namespace>.<shoot>` or `<shoot>` of ConfigMap `garden/kim-gardener-sim`, its key `*`, then
//! [`SimulatorConfig::default_fault`]. Values: `none`, `error:CODE[,CODE]`, `failed:CODE[,CODE]`,
//! `slow:<duration>` (e.g. `slow:5s`), `stuck`, `noseed`; any other value fails the operation
//! with [`INVALID_FAULT_CODE`]. Changes to the ConfigMap re-evaluate all Shoots.
//!
//! Event-driven: a `kube::runtime::Controller` over Shoots; timers only where the simulated
//! gardenlet itself would wait (step delays).

pub mod adminkubeconfig;
pub mod step;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kim_shared::gardener::Shoot;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::fixtures;
use crate::testenv::ShootClusterInfo;
pub use step::Step;

/// Shoot annotation that selects a fault for that Shoot.
pub const FAULT_ANNOTATION: &str = "simulator.kim.kyma-project.io/fault";
/// ConfigMap (in namespace `garden`) with faults per Shoot name.
pub const FAULT_CONFIGMAP: &str = "kim-gardener-sim";
/// Namespace of [`FAULT_CONFIGMAP`].
pub const FAULT_CONFIGMAP_NAMESPACE: &str = "garden";

/// A fault the simulated gardenlet shows for a Shoot.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Fault {
    /// Everything works.
    #[default]
    None,
    /// The operation goes to `Error` with these `lastErrors` codes and stays there while the
    /// fault lasts (Gardener retries Error), then resumes.
    Error(Vec<String>),
    /// The operation goes to `Failed` with these codes (final until a new generation or retry).
    Failed(Vec<String>),
    /// Each step takes this long instead of the configured delay.
    Slow(Duration),
    /// The operation stays at its progress forever.
    Stuck,
    /// No Seed fits: the Shoot stays unscheduled with `lastOperation` Create/Pending and the
    /// scheduler's "Failed to schedule Shoot: none out of the N seeds has a matching provider"
    /// message (which KIM recognises).
    NoSeed,
}

/// The `lastErrors` code of an operation whose fault string does not parse.
pub const INVALID_FAULT_CODE: &str = "KIM_SIMULATOR_INVALID_FAULT";

/// A fault string could not be parsed.
#[derive(Debug, thiserror::Error)]
#[error(
    "invalid simulator fault {0:?}: expected none, stuck, noseed, error:CODE[,CODE], \
     failed:CODE[,CODE] or slow:<duration> (e.g. slow:5s)"
)]
pub struct InvalidFault(pub String);

impl std::str::FromStr for Fault {
    type Err = InvalidFault;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let codes = |rest: &str| -> Vec<String> {
            rest.split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect()
        };
        match s.split_once(':') {
            None if s.is_empty() || s == "none" => Ok(Fault::None),
            None if s == "stuck" => Ok(Fault::Stuck),
            None if s == "noseed" => Ok(Fault::NoSeed),
            None if s == "error" => Ok(Fault::Error(vec!["ERR_INFRA_RATE_LIMITS_EXCEEDED".into()])),
            None if s == "failed" => Ok(Fault::Failed(vec!["ERR_INFRA_QUOTA_EXCEEDED".into()])),
            Some(("error", rest)) => Ok(Fault::Error(codes(rest))),
            Some(("failed", rest)) => Ok(Fault::Failed(codes(rest))),
            Some(("slow", d)) => humantime::parse_duration(d.trim())
                .map(Fault::Slow)
                .map_err(|_| InvalidFault(s.into())),
            _ => Err(InvalidFault(s.into())),
        }
    }
}

/// Simulator settings.
#[derive(Debug, Clone)]
pub struct SimulatorConfig {
    /// Time each step of an operation takes (0 for load tests).
    pub step_delay: Duration,
    /// Fault for Shoots that name none.
    pub default_fault: Fault,
}

impl SimulatorConfig {
    /// No delays, no faults (tests).
    pub fn instant() -> Self {
        Self {
            step_delay: Duration::ZERO,
            default_fault: Fault::None,
        }
    }
}

/// Errors of one reconcile (retried).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// An API call failed.
    #[error("{what}: {source}")]
    Kube {
        /// What was done.
        what: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// No Seed fits.
    #[error("no Seed for provider {0:?}: create one (fixtures do: seed-<provider>-<region>)")]
    NoSeed(String),
    /// An object could not be built (a bug in the simulator).
    #[error("building {0}")]
    Build(String),
}

fn kerr(what: impl Into<String>) -> impl FnOnce(kube::Error) -> SimError {
    let what = what.into();
    move |source| SimError::Kube { what, source }
}

struct Ctx {
    client: kube::Client,
    config: SimulatorConfig,
    shoot: ShootClusterInfo,
    faults: reflector::Store<ConfigMap>,
    /// Per Shoot uid: when the simulator last acted, and on which version with which step.
    last_step: Mutex<HashMap<String, LastStep>>,
}

/// The simulator's last action on one Shoot.
struct LastStep {
    at: Instant,
    resource_version: String,
    step: Step,
}

/// How long the simulator trusts that a write it made will show up in its watch cache: the same
/// step on the same version within this time is not repeated (a real gardenlet does not act
/// twice on one version either). Also the safety requeue after a write.
const STALE_GRACE: Duration = Duration::from_secs(5);

/// The simulator; [`Simulator::spawn`] runs it.
pub struct Simulator {
    client: kube::Client,
    config: SimulatorConfig,
    shoot: ShootClusterInfo,
}

impl Simulator {
    /// A simulator that uses `client` (admin on the Gardener API) and makes Shoots point at
    /// the shoot cluster described by `shoot`.
    pub fn new(client: kube::Client, config: SimulatorConfig, shoot: ShootClusterInfo) -> Self {
        Self {
            client,
            config,
            shoot,
        }
    }

    /// Runs until the task is aborted.
    pub fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run())
    }

    /// Runs until the future is dropped.
    pub async fn run(self) {
        let shoots: Api<Shoot> = Api::all(self.client.clone());
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), FAULT_CONFIGMAP_NAMESPACE);
        let (store, writer) = reflector::store();
        let cm_stream = reflector(
            writer,
            watcher(
                cms,
                watcher::Config::default().fields(&format!("metadata.name={FAULT_CONFIGMAP}")),
            ),
        )
        .default_backoff()
        .touched_objects()
        .filter_map(|r| async move { r.ok().map(|_| ()) });
        let ctx = Arc::new(Ctx {
            client: self.client,
            config: self.config,
            shoot: self.shoot,
            faults: store,
            last_step: Mutex::new(HashMap::new()),
        });
        Controller::new(shoots, watcher::Config::default())
            .reconcile_all_on(cm_stream)
            .run(reconcile, error_policy, ctx)
            .for_each(|r| async move {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "simulator reconcile");
                }
            })
            .await;
    }
}

fn error_policy(_shoot: Arc<Shoot>, err: &SimError, _ctx: Arc<Ctx>) -> Action {
    tracing::debug!(error = %err, "simulator step failed, retrying");
    Action::requeue(Duration::from_millis(500))
}

fn fault_for(shoot: &Shoot, ctx: &Ctx) -> Fault {
    // A fault that does not parse fails the operation with a code of its own, so a typo in a
    // test's fault shows in the Runtime's status instead of passing as a healthy Shoot.
    let parse = |v: &str| {
        v.parse::<Fault>().unwrap_or_else(|e| {
            tracing::error!(error = %e, "the Shoot's operation fails with {INVALID_FAULT_CODE}");
            Fault::Failed(vec![INVALID_FAULT_CODE.to_owned()])
        })
    };
    if let Some(v) = shoot.annotations().get(FAULT_ANNOTATION) {
        return parse(v);
    }
    let key = reflector::ObjectRef::new(FAULT_CONFIGMAP).within(FAULT_CONFIGMAP_NAMESPACE);
    if let Some(cm) = ctx.faults.get(&key) {
        let data = cm.data.clone().unwrap_or_default();
        let ns = shoot.namespace().unwrap_or_default();
        let name = shoot.name_any();
        for k in [format!("{ns}.{name}"), name, "*".to_string()] {
            if let Some(v) = data.get(&k) {
                return parse(v);
            }
        }
    }
    ctx.config.default_fault.clone()
}

async fn reconcile(shoot: Arc<Shoot>, ctx: Arc<Ctx>) -> Result<Action, SimError> {
    let uid = shoot.uid().unwrap_or_default();
    let fault = fault_for(&shoot, &ctx);
    let rv = shoot.resource_version().unwrap_or_default();
    let (since, acted) = ctx
        .last_step
        .lock()
        .ok()
        .and_then(|m| {
            m.get(&uid).map(|l| {
                let elapsed = l.at.elapsed();
                let acted =
                    (l.resource_version == rv && elapsed < STALE_GRACE).then(|| l.step.clone());
                (Some(elapsed), acted)
            })
        })
        .unwrap_or((None, None));
    let step = step::next(&shoot, &fault, since, ctx.config.step_delay);
    tracing::debug!(shoot = %shoot.name_any(), ?step, "simulator");
    // The watch cache still holds the version this very step was already taken on: the write's
    // event is on its way. Repeating the step on stale data (every requeue, under load) is what
    // made the simulator write the same Shoots over and over and fall behind at 1,000 Shoots.
    if acted.as_ref() == Some(&step) && !matches!(step, Step::Wait(_)) {
        return Ok(Action::requeue(STALE_GRACE));
    }
    let api: Api<Shoot> =
        Api::namespaced(ctx.client.clone(), &shoot.namespace().unwrap_or_default());
    let name = shoot.name_any();
    match &step {
        Step::Wait(Some(d)) => return Ok(Action::requeue(*d)),
        Step::Wait(None) => return Ok(Action::await_change()),
        Step::AddFinalizer => {
            let mut fins = shoot.finalizers().to_vec();
            fins.push(step::FINALIZER.into());
            let patch = json!({"metadata": {"finalizers": fins, "resourceVersion": shoot.resource_version()}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kerr("adding finalizer"))?;
        }
        Step::RemoveFinalizer => {
            delete_ca_objects(&ctx.client, &shoot).await?;
            let fins: Vec<String> = shoot
                .finalizers()
                .iter()
                .filter(|f| *f != step::FINALIZER)
                .cloned()
                .collect();
            let patch = json!({"metadata": {"finalizers": fins, "resourceVersion": shoot.resource_version()}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kerr("removing finalizer"))?;
            if let Ok(mut m) = ctx.last_step.lock() {
                m.remove(&uid);
            }
            return Ok(Action::await_change());
        }
        Step::Bind => match bind(&ctx.client, &shoot).await {
            Err(SimError::NoSeed(_)) => unschedulable(&ctx.client, &api, &shoot).await?,
            other => other?,
        },
        Step::Unschedulable => unschedulable(&ctx.client, &api, &shoot).await?,
        Step::Start(op) => {
            if shoot.annotations().contains_key(step::OPERATION) {
                let patch = json!({"metadata": {"annotations": {step::OPERATION: null}}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(kerr("removing operation annotation"))?;
            }
            if *op != "Delete" {
                ensure_ca_objects(&ctx.client, &ctx.shoot, &shoot).await?;
            }
            write_status(&api, &shoot, &ctx.shoot, op, "Processing", 0, None).await?;
        }
        Step::Progress(p) => {
            let op = last_op_type(&shoot);
            write_status(&api, &shoot, &ctx.shoot, &op, "Processing", *p, None).await?;
        }
        Step::Succeed => {
            let op = last_op_type(&shoot);
            write_status(&api, &shoot, &ctx.shoot, &op, "Succeeded", 100, None).await?;
        }
        Step::Error(codes) | Step::Fail(codes) => {
            let state = if matches!(step, Step::Error(_)) {
                "Error"
            } else {
                "Failed"
            };
            let op = last_op_type(&shoot);
            let progress = shoot
                .status
                .as_ref()
                .and_then(|s| s.last_operation.as_ref())
                .map(|o| o.progress)
                .unwrap_or(0);
            write_status(&api, &shoot, &ctx.shoot, &op, state, progress, Some(codes)).await?;
        }
    }
    if let Ok(mut m) = ctx.last_step.lock() {
        m.insert(
            uid,
            LastStep {
                at: Instant::now(),
                resource_version: rv,
                step,
            },
        );
    }
    // The write triggers a watch event, which runs the next step (or a Wait for the step delay);
    // the requeue is only a safety net for a write that changed nothing (no event).
    Ok(Action::requeue(ctx.config.step_delay.max(STALE_GRACE)))
}

fn last_op_type(shoot: &Shoot) -> String {
    shoot
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        .map(|o| o.type_.clone())
        .unwrap_or_else(|| "Create".into())
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

const CONDITION_TYPES: [&str; 5] = [
    "APIServerAvailable",
    "ControlPlaneHealthy",
    "ObservabilityComponentsHealthy",
    "EveryNodeReady",
    "SystemComponentsHealthy",
];

async fn write_status(
    api: &Api<Shoot>,
    shoot: &Shoot,
    cluster: &ShootClusterInfo,
    op: &str,
    state: &str,
    progress: i32,
    codes: Option<&Vec<String>>,
) -> Result<(), SimError> {
    let ts = now();
    let ns = shoot.namespace().unwrap_or_default();
    let project = ns.strip_prefix("garden-").unwrap_or(&ns).to_string();
    let name = shoot.name_any();
    let description = match (op, state) {
        (_, "Succeeded") => format!("{op} of Shoot cluster succeeded."),
        (_, "Error" | "Failed") => format!("{op} of Shoot cluster failed (simulated)."),
        ("Delete", _) => "Deleting Shoot cluster (simulated).".to_string(),
        _ => format!("{op} of Shoot cluster in progress (simulated)."),
    };
    let cond_status = match state {
        "Succeeded" if op != "Delete" => "True",
        "Error" | "Failed" => "False",
        _ => "Progressing",
    };
    let conditions: Vec<serde_json::Value> = CONDITION_TYPES
        .iter()
        .map(|t| {
            json!({"type": t, "status": cond_status, "lastTransitionTime": ts, "lastUpdateTime": ts,
                   "reason": if cond_status == "True" { "HealthChecksPassed" } else { "Simulated" },
                   "message": if cond_status == "True" { "All checks passed (simulated)." } else { "Simulated." }})
        })
        .collect();
    let hibernation = shoot
        .spec
        .hibernation
        .as_ref()
        .and_then(|h| h.enabled)
        .unwrap_or(false);
    let previously_hibernated = shoot
        .status
        .as_ref()
        .and_then(|s| s.hibernated)
        .unwrap_or(false);
    let hibernated = if state == "Succeeded" && op != "Delete" {
        hibernation
    } else {
        previously_hibernated
    };
    // Gardener's descriptions quote the names of the flow and task that failed.
    let last_errors = codes.map(|codes| {
        json!([{"description": format!("task \"Simulated step\" failed: simulated failure: {}", codes.join(", ")), "codes": codes, "lastUpdateTime": ts}])
    });
    let mut status = json!({
        "observedGeneration": shoot.metadata.generation,
        "technicalID": format!("shoot--{project}--{name}"),
        "uid": shoot.uid(),
        "clusterIdentity": format!("shoot--{project}--{name}-{}-kim-testenv", shoot.uid().unwrap_or_default()),
        "gardener": {"id": "kim-gardener-sim", "name": "kim-gardener-sim", "version": crate::testenv::bins::version("GARDENER_VERSION").trim_start_matches('v')},
        "seedName": shoot.spec.seed_name,
        "hibernated": hibernated,
        "lastOperation": {"type": op, "state": state, "progress": progress, "description": description, "lastUpdateTime": ts},
        "lastErrors": last_errors,
        "conditions": conditions,
    });
    if op != "Delete" {
        status["advertisedAddresses"] = json!([{"name": "external", "url": cluster.url}]);
    }
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": status})),
    )
    .await
    .map_err(kerr(format!("writing status of Shoot {ns}/{name}")))?;
    Ok(())
}

/// Binds the Shoot to a Seed, as gardener-scheduler does. The decision to bind comes from the
/// watch cache, which lags under load: the Shoot is read from the apiserver first, and one that
/// is already bound counts as done (binding it again is refused with a 500 "already assigned",
/// and retrying that refusal every half second is what kept the simulator busy at 300 Shoots).
async fn bind(client: &kube::Client, shoot: &Shoot) -> Result<(), SimError> {
    let ns = shoot.namespace().unwrap_or_default();
    let name = shoot.name_any();
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &crate::testenv::gardener_shoot_resource(),
    );
    let mut raw = api
        .get(&name)
        .await
        .map_err(kerr(format!("reading Shoot {ns}/{name}")))?;
    if bound_seed(&raw).is_some() {
        return Ok(());
    }
    let seeds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &fixtures::api_resource("core.gardener.cloud/v1beta1", "Seed")
            .map_err(|e| SimError::Build(e.to_string()))?,
    );
    let list = seeds
        .list(&ListParams::default())
        .await
        .map_err(kerr("listing Seeds"))?;
    let provider = shoot.spec.provider.type_.clone();
    let matches_provider =
        |s: &&DynamicObject| s.data["spec"]["provider"]["type"] == provider.as_str();
    let seed = list
        .items
        .iter()
        .filter(matches_provider)
        .find(|s| s.data["spec"]["provider"]["region"] == shoot.spec.region.as_str())
        .or_else(|| list.items.iter().find(matches_provider))
        .map(ResourceExt::name_any)
        .ok_or_else(|| SimError::NoSeed(provider.clone()))?;
    raw.data["spec"]["seedName"] = json!(seed);
    match api
        .replace_subresource("binding", &name, &PostParams::default(), &raw)
        .await
    {
        Ok(_) => Ok(()),
        // Bound between the read and the write (another reconcile of the same Shoot).
        Err(kube::Error::Api(e)) if already_assigned(&e.message) => Ok(()),
        Err(e) => Err(SimError::Kube {
            what: format!("binding Shoot {ns}/{name} to Seed {seed}"),
            source: e,
        }),
    }
}

/// The Seed a Shoot (as read from the apiserver) is bound to.
fn bound_seed(raw: &DynamicObject) -> Option<&str> {
    raw.data["spec"]["seedName"]
        .as_str()
        .filter(|s| !s.is_empty())
}

/// gardener-apiserver's answer to binding a Shoot that already has a Seed.
fn already_assigned(message: &str) -> bool {
    message.contains("already assigned")
}

/// The status gardener-scheduler writes when no Seed fits.
async fn unschedulable(
    client: &kube::Client,
    api: &Api<Shoot>,
    shoot: &Shoot,
) -> Result<(), SimError> {
    let seeds = Api::<DynamicObject>::all_with(
        client.clone(),
        &fixtures::api_resource("core.gardener.cloud/v1beta1", "Seed")
            .map_err(|e| SimError::Build(e.to_string()))?,
    )
    .list(&ListParams::default())
    .await
    .map_err(kerr("listing Seeds"))?;
    let description = format!(
        "Failed to schedule Shoot: none out of the {} seeds has a matching provider for {:?}",
        seeds.items.len(),
        shoot.spec.provider.type_
    );
    let status = json!({"status": {"lastOperation": {"type": "Create", "state": "Pending", "progress": 0,
        "description": description, "lastUpdateTime": now()}}});
    api.patch_status(
        &shoot.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .map_err(kerr("writing the unschedulable status"))?;
    Ok(())
}

fn ca_client_name(shoot: &Shoot) -> String {
    format!("{}.ca-client", shoot.name_any())
}

fn ca_cluster_name(shoot: &Shoot) -> String {
    format!("{}.ca-cluster", shoot.name_any())
}

/// Writes `<shoot>.ca-client` (InternalSecret with the shoot client CA and key) and
/// `<shoot>.ca-cluster` (ConfigMap with the shoot cluster CA), as the gardenlet does.
async fn ensure_ca_objects(
    client: &kube::Client,
    cluster: &ShootClusterInfo,
    shoot: &Shoot,
) -> Result<(), SimError> {
    let ns = shoot.namespace().unwrap_or_default();
    let owner = shoot
        .controller_owner_ref(&())
        .map(|o| vec![o])
        .unwrap_or_default();
    let pp = PatchParams::apply("kim-gardener-sim").force();
    let isr = fixtures::api_resource("core.gardener.cloud/v1beta1", "InternalSecret")
        .map_err(|e| SimError::Build(e.to_string()))?;
    let internal: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &isr);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "core.gardener.cloud/v1beta1", "kind": "InternalSecret",
        "metadata": {"name": ca_client_name(shoot), "namespace": ns, "ownerReferences": owner,
                     "labels": {"gardener.cloud/role": "ca-client", "shoot.gardener.cloud/name": shoot.name_any()}},
        "type": "Opaque",
        "data": {"ca.crt": B64.encode(&cluster.client_ca.cert_pem), "ca.key": B64.encode(&cluster.client_ca.key_pem)}
    }))
    .map_err(|e| SimError::Build(e.to_string()))?;
    internal
        .patch(&ca_client_name(shoot), &pp, &Patch::Apply(&obj))
        .await
        .map_err(kerr("writing the ca-client InternalSecret"))?;
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": ca_cluster_name(shoot), "namespace": ns, "ownerReferences": owner,
                     "labels": {"shoot.gardener.cloud/name": shoot.name_any()}},
        "data": {"ca.crt": cluster.cluster_ca_pem}
    }))
    .map_err(|e| SimError::Build(e.to_string()))?;
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .patch(&ca_cluster_name(shoot), &pp, &Patch::Apply(&cm))
        .await
        .map_err(kerr("writing the ca-cluster ConfigMap"))?;
    Ok(())
}

async fn delete_ca_objects(client: &kube::Client, shoot: &Shoot) -> Result<(), SimError> {
    let ns = shoot.namespace().unwrap_or_default();
    let isr = fixtures::api_resource("core.gardener.cloud/v1beta1", "InternalSecret")
        .map_err(|e| SimError::Build(e.to_string()))?;
    let ignore_404 = |r: Result<_, kube::Error>| match r {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Ok(()),
    };
    ignore_404(
        Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &isr)
            .delete(&ca_client_name(shoot), &DeleteParams::default())
            .await
            .map(|_| ()),
    )
    .map_err(kerr("deleting the ca-client InternalSecret"))?;
    ignore_404(
        Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .delete(&ca_cluster_name(shoot), &DeleteParams::default())
            .await
            .map(|_| ()),
    )
    .map_err(kerr("deleting the ca-cluster ConfigMap"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shoot_with_a_seed_is_bound() {
        let raw = |seed: serde_json::Value| -> DynamicObject {
            serde_json::from_value(json!({"apiVersion": "core.gardener.cloud/v1beta1",
                "kind": "Shoot", "metadata": {"name": "s"}, "spec": {"seedName": seed}}))
            .unwrap()
        };
        assert_eq!(bound_seed(&raw(json!("seed-aws"))), Some("seed-aws"));
        assert_eq!(bound_seed(&raw(json!(""))), None);
        assert_eq!(bound_seed(&raw(json!(null))), None);
        assert!(already_assigned(
            "Internal error occurred: update of binding rejected, shoot is already assigned to the same seed"
        ));
        assert!(!already_assigned("etcdserver: request timed out"));
    }

    #[test]
    fn faults_parse() {
        assert_eq!("none".parse::<Fault>().unwrap(), Fault::None);
        assert_eq!("stuck".parse::<Fault>().unwrap(), Fault::Stuck);
        assert_eq!(
            "failed:ERR_INFRA_QUOTA_EXCEEDED, ERR_X"
                .parse::<Fault>()
                .unwrap(),
            Fault::Failed(vec!["ERR_INFRA_QUOTA_EXCEEDED".into(), "ERR_X".into()])
        );
        assert_eq!(
            "slow:2s".parse::<Fault>().unwrap(),
            Fault::Slow(Duration::from_secs(2))
        );
        assert!("explode".parse::<Fault>().is_err());
    }
}
