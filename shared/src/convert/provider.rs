//! `spec.provider`: worker pools, the provider's infrastructure and control
//! plane configurations with upstream's zone subnet layout, machine image defaults, AWS IMDSv2
//! and `workersSettings`.

mod infra;
pub mod pools;
pub mod zones;

use super::{ConvertError, Input, version};
use crate::api::ProviderType;
use crate::api::runtime::RuntimeProvider;
use crate::gardener::worker::{SshAccess, WorkersSettings};
use crate::gardener::{RawExtension, Shoot, ShootMachineImage, Worker};
use ipnet::Ipv4Net;
use serde_json::{Value, json};

/// API group of the AWS provider extension's configurations.
const AWS_API_VERSION: &str = "aws.provider.extensions.gardener.cloud/v1alpha1";

/// Worker pools, provider configurations and settings of a new Shoot.
pub(super) fn create(input: &Input<'_>, shoot: &mut Shoot) -> Result<(), ConvertError> {
    let p = &input.shoot().provider;
    let mut workers = runtime_workers(p)?;
    let zones = zone_union(&workers);
    check_zone_names(p, &zones)?;
    let nodes = nodes(input)?;
    let (infrastructure, control_plane) = infra::create(input, nodes, &zones)?;
    finish_workers(input, &mut workers)?;

    let provider = &mut shoot.spec.provider;
    provider.type_ = p.type_.as_str().to_owned();
    provider.infrastructure_config = Some(RawExtension(infrastructure));
    provider.control_plane_config = Some(RawExtension(control_plane));
    provider.workers = Some(workers);
    provider.workers_settings = Some(workers_settings());
    Ok(())
}

/// Worker pools, provider configurations and settings for an update of `live`. Returns whether
/// live pools are missing from the result (they need a full update to go away).
pub(super) fn patch(
    input: &Input<'_>,
    live: &Shoot,
    shoot: &mut Shoot,
) -> Result<bool, ConvertError> {
    let p = &input.shoot().provider;
    let live_infra =
        live.spec
            .provider
            .infrastructure_config
            .as_ref()
            .ok_or(ConvertError::LiveShoot {
                field: "spec.provider.infrastructureConfig",
                message: "missing; a Shoot created by the infrastructure manager always has one",
            })?;
    let mut workers = runtime_workers(p)?;
    let live_workers = live.spec.provider.workers.as_deref().unwrap_or_default();
    if live_workers.is_empty() {
        return Err(ConvertError::LiveShoot {
            field: "spec.provider.workers",
            message: "the live Shoot has no worker pools to update",
        });
    }

    // Pools keep the order of the live Shoot; new pools go last, in Runtime order.
    workers.sort_by_key(|w| {
        live_workers
            .iter()
            .position(|l| l.name == w.name)
            .unwrap_or(usize::MAX)
    });

    let runtime_zones = zone_union(&workers);
    check_zone_names(p, &runtime_zones)?;
    let nodes = nodes(input)?;
    let live_zones = zone_union(live_workers);
    let added: Vec<&str> = runtime_zones
        .iter()
        .copied()
        .filter(|z| !live_zones.contains(z))
        .collect();
    let live_cp = live.spec.provider.control_plane_config.as_ref();
    let (infrastructure, control_plane) =
        if added.is_empty() || infra::is_azure_lite(p.type_, &live_infra.0) {
            (live_infra.0.clone(), live_cp.map(|c| c.0.clone()))
        } else {
            // Zones are only ever added: the live ones first, in their order, then the new ones.
            let merged: Vec<&str> = live_zones.iter().chain(&added).copied().collect();
            infra::patch(input, nodes, &live_infra.0, live_cp.map(|c| &c.0), &merged)?
        };

    finish_workers(input, &mut workers)?;
    for w in &mut workers {
        if let Some(l) = live_workers.iter().find(|l| l.name == w.name) {
            align_with_live(w, l);
        }
    }
    let removed = live_workers
        .iter()
        .any(|l| !workers.iter().any(|w| w.name == l.name));

    let provider = &mut shoot.spec.provider;
    provider.type_ = p.type_.as_str().to_owned();
    provider.infrastructure_config = Some(RawExtension(infrastructure));
    provider.control_plane_config = control_plane.map(RawExtension);
    provider.workers = Some(workers);
    provider.workers_settings = Some(workers_settings());
    Ok(removed)
}

/// The main pool followed by the additional pools; exactly one main pool.
fn runtime_workers(p: &RuntimeProvider) -> Result<Vec<Worker>, ConvertError> {
    if p.workers.len() != 1 {
        return Err(ConvertError::MainWorkerCount {
            found: p.workers.len(),
        });
    }
    Ok(p.workers
        .iter()
        .chain(p.additional_workers.iter().flatten())
        .cloned()
        .collect())
}

/// The zones of all pools, each once, in order of first appearance.
fn zone_union(workers: &[Worker]) -> Vec<&str> {
    let mut zones: Vec<&str> = Vec::new();
    for z in workers.iter().flat_map(|w| w.zones.iter().flatten()) {
        if !zones.contains(&z.as_str()) {
            zones.push(z);
        }
    }
    zones
}

/// Path of the first occurrence of `zone` in the Runtime's pools.
fn zone_field(p: &RuntimeProvider, zone: &str) -> String {
    let lists = [
        ("workers", p.workers.as_slice()),
        (
            "additionalWorkers",
            p.additional_workers.as_deref().unwrap_or_default(),
        ),
    ];
    for (list, workers) in lists {
        for (i, w) in workers.iter().enumerate() {
            if let Some(j) = w.zones.iter().flatten().position(|z| z == zone) {
                return format!("spec.shoot.provider.{list}[{i}].zones[{j}]");
            }
        }
    }
    "spec.shoot.provider.workers[0].zones".to_owned()
}

/// Azure zones are numbers: the infrastructure config names zones by integer.
fn check_zone_names(p: &RuntimeProvider, zones: &[&str]) -> Result<(), ConvertError> {
    if p.type_ != ProviderType::Azure {
        return Ok(());
    }
    match zones.iter().find(|z| infra::azure_zone_number(z).is_none()) {
        Some(zone) => Err(ConvertError::AzureZone {
            field: zone_field(p, zone),
            zone: (*zone).to_owned(),
        }),
        None => Ok(()),
    }
}

/// `spec.shoot.networking.nodes`, the workers CIDR of every provider configuration.
fn nodes(input: &Input<'_>) -> Result<Ipv4Net, ConvertError> {
    let value = &input.shoot().networking.nodes;
    value
        .parse::<Ipv4Net>()
        .map_err(|_| ConvertError::NodesCidr {
            value: value.clone(),
        })
}

/// In upstream's order: machine image defaults, on AWS with `enableIMDSv2` the IMDSv2 worker
/// configuration, `maxPods` clamping and the machine controller manager defaults.
fn finish_workers(input: &Input<'_>, workers: &mut [Worker]) -> Result<(), ConvertError> {
    let kind = super::placement::kind(input.shoot().provider.type_);
    let default = input.cfg.default_machine_image(kind);
    for w in workers.iter_mut() {
        let image = w
            .machine
            .image
            .get_or_insert_with(ShootMachineImage::default);
        if image.name.is_empty() {
            image.name = default.name.clone();
        }
        if image.version.as_deref().is_none_or(str::is_empty) {
            // The default version belongs to the default image. Another image without a version
            // is left to Gardener, which gives it that image's newest supported version
            // (upstream puts the default image's version on it, which its CloudProfile lacks).
            image.version = (image.name == default.name).then(|| default.version.clone());
        }
    }
    if input.shoot().provider.type_ == ProviderType::Aws
        && input.cfg.converter.provider.aws.enable_imds_v2
    {
        for w in workers.iter_mut() {
            require_imds_v2(w);
        }
    }
    pools::clamp_max_pods(workers, &input.shoot().networking.pods)?;
    pools::machine_controller_manager(workers, &input.cfg.converter.provider.worker);
    Ok(())
}

/// Requires IMDSv2 tokens (hop limit 2) in the pool's AWS `WorkerConfig`. Upstream replaces
/// the whole config; we keep the rest of an existing `WorkerConfig`.
fn require_imds_v2(w: &mut Worker) {
    let options = json!({"httpPutResponseHopLimit": 2, "httpTokens": "required"});
    let is_worker_config = |m: &serde_json::Map<String, Value>| {
        m.get("apiVersion").and_then(Value::as_str) == Some(AWS_API_VERSION)
            && m.get("kind").and_then(Value::as_str) == Some("WorkerConfig")
    };
    match w.provider_config.as_mut().map(|c| &mut c.0) {
        Some(Value::Object(config)) if is_worker_config(config) => {
            config.insert("instanceMetadataOptions".to_owned(), options);
        }
        _ => {
            w.provider_config = Some(RawExtension(json!({
                "apiVersion": AWS_API_VERSION,
                "instanceMetadataOptions": options,
                "kind": "WorkerConfig",
            })));
        }
    }
}

/// SSH access to the nodes is off (upstream PR 316).
fn workers_settings() -> WorkersSettings {
    WorkersSettings {
        ssh_access: Some(SshAccess { enabled: false }),
    }
}

/// Aligns a pool with its live counterpart (upstream PR 685): the live update strategy when
/// none is set, the live zone order with new zones appended (zones are never removed), never
/// a lower machine image version of the same image (the live one when none is asked for), and
/// never a lower Kubernetes version of the pool (Gardener's maintenance raises it; a downgrade
/// is refused).
fn align_with_live(w: &mut Worker, live: &Worker) {
    if w.update_strategy.is_none() {
        w.update_strategy.clone_from(&live.update_strategy);
    }
    if let Some(live_zones) = &live.zones
        && w.zones.as_ref() != Some(live_zones)
    {
        let mut zones = live_zones.clone();
        for z in w.zones.iter().flatten() {
            if !zones.contains(z) {
                zones.push(z.clone());
            }
        }
        w.zones = Some(zones);
    }
    if let (Some(image), Some(live_image)) = (w.machine.image.as_mut(), live.machine.image.as_ref())
        && image.name == live_image.name
        && let Some(live_version) = &live_image.version
    {
        // Without a version of its own (an image Gardener chose the version of) the pool keeps
        // the live one: an unrelated change must not upgrade its nodes' operating system.
        image.version = Some(match image.version.take() {
            Some(desired) => version::not_below(desired, Some(live_version)),
            None => live_version.clone(),
        });
    }
    let live_pool_version = live.kubernetes.as_ref().and_then(|k| k.version.as_deref());
    if let Some(k) = w.kubernetes.as_mut()
        && let Some(desired) = k.version.take()
    {
        k.version = Some(version::not_below(desired, live_pool_version));
    }
}
