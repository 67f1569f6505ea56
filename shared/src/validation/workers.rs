//! Worker pool rules: names, the main pool, machine, image, volumes, scaling, rolling update,
//! zones and the zone subnet layout.

use super::context::Ctx;
use super::syntax::{self, Scaled};
use super::{Item, ValidationOutcome};
use crate::api::{ProviderType, Runtime};
use crate::config::{KubernetesVersion, parse_image_version};
use crate::convert::zones::{self, MAX_ZONES, ZoneSplitError};
use crate::gardener::Worker;
use ipnet::Ipv4Net;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Longest worker pool (and volume) name Gardener accepts.
pub const POOL_NAME_MAX: usize = 15;

const WORKERS: &str = "spec.shoot.provider.workers";
const ADDITIONAL: &str = "spec.shoot.provider.additionalWorkers";

/// Every pool of the Runtime (`workers`, then `additionalWorkers`) with its field path.
pub(crate) fn pools(rt: &Runtime) -> impl Iterator<Item = (Item, &Worker)> {
    let p = &rt.spec.shoot.provider;
    let main = p.workers.iter().enumerate().map(|(index, w)| {
        (
            Item {
                list: WORKERS,
                index,
            },
            w,
        )
    });
    let extra = p
        .additional_workers
        .iter()
        .flatten()
        .enumerate()
        .map(|(index, w)| {
            (
                Item {
                    list: ADDITIONAL,
                    index,
                },
                w,
            )
        });
    main.chain(extra)
}

/// All worker rules. `nodes` is the valid nodes CIDR (if any), `version` the cluster's
/// Kubernetes version (if valid).
pub(crate) fn check(
    ctx: &Ctx<'_>,
    nodes: Option<Ipv4Net>,
    version: Option<KubernetesVersion>,
    f: &mut ValidationOutcome,
) {
    let rt = ctx.rt;
    let count = rt.spec.shoot.provider.workers.len();
    if count != 1 {
        f.violation(
            WORKERS,
            format!("must hold exactly one (main) worker pool, found {count}; put further pools into {ADDITIONAL}"),
        );
    }

    // Zones of all pools in order of first appearance: the infrastructure config lists them so.
    let mut all_zones: Vec<&str> = Vec::with_capacity(4);
    let mut system_pools = 0usize;
    // Pool name -> the first pool that uses it (a set, so that many pools cost linear time).
    let mut names: std::collections::HashMap<&str, Item> = std::collections::HashMap::new();
    for (at, w) in pools(rt) {
        pool_name(&mut names, at, w, f);
        // On UPDATE, the stored pool of the same name: the configuration's lists hold only
        // what it did not have.
        let stored = stored_pool(ctx, w);
        machine(ctx, at, w, stored, f);
        volumes(ctx, at, w, stored, f);
        scaling(ctx, at, w, stored, f);
        if let Some(v) = version {
            pool_version(at, w, v, f);
        }
        zones(ctx, at, w, stored, &mut all_zones, f);
        if w.system_components.as_ref().is_none_or(|s| s.allow) && w.maximum > 0 {
            system_pools += 1;
            let zones = w.zones.as_ref().map_or(0, Vec::len);
            if usize::try_from(w.maximum).is_ok_and(|m| m < zones) {
                f.violation(
                    at.field("maximum"),
                    format!("{} is below the number of zones ({zones}); a pool that runs system components needs at least one node per zone", w.maximum),
                );
            }
        }
        if let Some(cri) = &w.cri
            && cri.name != "containerd"
        {
            f.violation(
                at.field("cri.name"),
                format!("{:?} is not supported; use containerd", cri.name),
            );
        }
        kubelet(at, w, f);
        preserved_machines(at, w, f);
        super::node_metadata::check(at, w, f);
        if w.control_plane.is_some() {
            // Gardener: a pool with `controlPlane` makes the Shoot self-hosted, and self-hosted
            // Shoots must live in the `garden` namespace, never in a project's.
            f.violation(
                at.field("controlPlane"),
                "is only for self-hosted shoots, which Gardener accepts only in the garden namespace; the infrastructure manager creates shoots in the project namespace, leave controlPlane out",
            );
        }
        match w.update_strategy.as_deref() {
            None | Some("AutoRollingUpdate") => {}
            // Gardener refuses both unless its alpha feature gate InPlaceNodeUpdates is on; it
            // is off by default.
            Some(s @ ("AutoInPlaceUpdate" | "ManualInPlaceUpdate")) => f.violation(
                at.field("updateStrategy"),
                format!("{s} needs Gardener's alpha feature gate InPlaceNodeUpdates, which is off; use AutoRollingUpdate or leave it out"),
            ),
            Some(s) => f.violation(
                at.field("updateStrategy"),
                format!("{s:?} is not an update strategy; use AutoRollingUpdate or leave it out"),
            ),
        }
        if w.provider_config.is_some()
            && rt.spec.shoot.provider.type_ == ProviderType::Aws
            && ctx.cfg.converter.provider.aws.enable_imds_v2
        {
            f.warning(
                at.field("providerConfig"),
                "is replaced by the IMDSv2 WorkerConfig the infrastructure manager sets on every AWS pool (converter.provider.aws.enableIMDSv2)",
            );
        }
    }
    if system_pools == 0 && count > 0 {
        f.violation(
            Item { list: WORKERS, index: 0 }.field("maximum"),
            "at least one pool must allow system components (systemComponents.allow, default true) and have a maximum above 0",
        );
    }
    if all_zones.len() > MAX_ZONES {
        f.violation(
            WORKERS,
            format!(
                "the pools use {} distinct zones; a cluster may use at most {MAX_ZONES}",
                all_zones.len()
            ),
        );
    } else if let Some(nodes) = nodes {
        zone_layout(rt.spec.shoot.provider.type_, nodes, &all_zones, f);
    }
}

fn pool_name<'a>(
    seen: &mut std::collections::HashMap<&'a str, Item>,
    at: Item,
    w: &'a Worker,
    f: &mut ValidationOutcome,
) {
    let name = w.name.as_str();
    if !syntax::is_dns_label(name) || name.len() > POOL_NAME_MAX {
        f.violation(
            at.field("name"),
            format!("{name:?} is not a valid pool name; use at most {POOL_NAME_MAX} lower-case letters, digits and '-', starting and ending with a letter or digit, e.g. cpu-worker-0"),
        );
        return;
    }
    // Report each repeat once, at the later pool.
    if let Some(first) = seen.get(name) {
        f.violation(
            at.field("name"),
            format!("{name:?} is already used by {}; pool names must be unique across workers and additionalWorkers", first.path()),
        );
    } else {
        seen.insert(name, at);
    }
}

/// The stored pool of the same name, on UPDATE.
fn stored_pool<'a>(ctx: &Ctx<'a>, w: &Worker) -> Option<&'a Worker> {
    ctx.old
        .and_then(|old| pools(old).map(|(_, o)| o).find(|o| o.name == w.name))
}

fn machine(
    ctx: &Ctx<'_>,
    at: Item,
    w: &Worker,
    stored: Option<&Worker>,
    f: &mut ValidationOutcome,
) {
    let provider_type = ctx.rt.spec.shoot.provider.type_;
    let m = &w.machine;
    let configured = ctx.provider.and_then(|p| p.machine_type(&m.type_));
    if m.type_.is_empty() {
        f.violation(
            at.field("machine.type"),
            format!(
                "must name a machine type of {provider_type}, e.g. {}",
                example_machine(provider_type)
            ),
        );
    } else if let Some(p) = ctx.provider
        && ctx.policy_applies(stored.is_some_and(|o| o.machine.type_ == m.type_))
        && !p.allows_machine_type(&m.type_)
    {
        let allowed: Vec<&str> = p
            .machine_types
            .iter()
            .flatten()
            .map(|t| t.name.as_str())
            .collect();
        f.violation(
            at.field("machine.type"),
            format!(
                "{:?} is not an allowed {provider_type} machine type; use one of {}",
                m.type_,
                allowed.join(", ")
            ),
        );
    }
    if let Some(arch) = &m.architecture {
        let wanted = configured.map(|t| match t.architecture {
            crate::config::Architecture::Amd64 => "amd64",
            crate::config::Architecture::Arm64 => "arm64",
        });
        if !matches!(arch.as_str(), "amd64" | "arm64") {
            f.violation(
                at.field("machine.architecture"),
                format!("{arch:?} is not an architecture; use amd64 or arm64"),
            );
        } else if let Some(wanted) = wanted
            && wanted != arch
            && ctx.policy_applies(stored.is_some_and(|o| {
                o.machine.type_ == m.type_ && o.machine.architecture.as_ref() == Some(arch)
            }))
        {
            f.violation(
                at.field("machine.architecture"),
                format!(
                    "machine type {} is {wanted}; set {wanted} or leave the architecture out",
                    m.type_
                ),
            );
        }
    }
    let Some(image) = &m.image else { return };
    let version = image.version.as_deref().filter(|v| !v.is_empty());
    if let Some(v) = version
        && parse_image_version(v).is_none()
    {
        f.violation(
            at.field("machine.image.version"),
            format!("{v:?} is not a machine image version; use the form 1877.8.0"),
        );
        return;
    }
    let image_kept = stored
        .and_then(|o| o.machine.image.as_ref())
        .is_some_and(|i| i.name == image.name && i.version == image.version);
    if !ctx.policy_applies(image_kept) {
        return;
    }
    let Some(images) = ctx.provider.and_then(|p| p.machine_images.as_ref()) else {
        return;
    };
    if image.name.is_empty() {
        return;
    }
    let Some(listed) = images.iter().find(|i| i.name == image.name) else {
        let names: Vec<&str> = images.iter().map(|i| i.name.as_str()).collect();
        f.violation(
            at.field("machine.image.name"),
            format!(
                "{:?} is not an allowed machine image; use one of {}",
                image.name,
                names.join(", ")
            ),
        );
        return;
    };
    if let Some(v) = version
        && ctx
            .provider
            .is_some_and(|p| !p.allows_machine_image(&image.name, v))
    {
        let versions: Vec<&str> = listed.versions.iter().map(|v| v.version.as_str()).collect();
        f.violation(
            at.field("machine.image.version"),
            format!(
                "{} {v} is not offered; use one of {} or leave the version out for the default",
                image.name,
                versions.join(", ")
            ),
        );
    }
}

fn example_machine(t: ProviderType) -> &'static str {
    match t {
        ProviderType::Aws => "m6i.large",
        ProviderType::Azure => "Standard_D4s_v5",
        ProviderType::Gcp => "n2-standard-4",
        ProviderType::Openstack => "g_c4_m16",
        ProviderType::Alicloud => "ecs.g8i.xlarge",
        ProviderType::Gdch => "n2-standard-4-gdc",
    }
}

fn volumes(
    ctx: &Ctx<'_>,
    at: Item,
    w: &Worker,
    stored: Option<&Worker>,
    f: &mut ValidationOutcome,
) {
    if let Some(v) = &w.volume {
        let kept = stored
            .and_then(|o| o.volume.as_ref())
            .map(|o| (o.type_ == v.type_, o.size == v.size));
        volume(
            ctx,
            at,
            "volume",
            v.name.as_deref(),
            (&v.size, v.type_.as_deref()),
            kept,
            f,
        );
    }
    let data = w.data_volumes.as_deref().unwrap_or_default();
    if !data.is_empty() && w.volume.is_none() {
        f.violation(
            at.field("volume"),
            "must be set when dataVolumes are set (Gardener requires a root volume then)",
        );
    }
    let mut seen = std::collections::HashSet::new();
    for (i, d) in data.iter().enumerate() {
        let path = format!("dataVolumes[{i}]");
        match d.name.as_str() {
            "" => f.violation(
                at.field(&format!("{path}.name")),
                "must name the data volume, e.g. data-0",
            ),
            n if !seen.insert(n) => {
                f.violation(
                    at.field(&format!("{path}.name")),
                    format!("{n:?} is used twice; data volume names must be unique in the pool"),
                );
            }
            _ => {}
        }
        let kept = stored
            .and_then(|o| o.data_volumes.as_deref())
            .into_iter()
            .flatten()
            .find(|o| o.name == d.name)
            .map(|o| (o.type_ == d.type_, o.size == d.size));
        volume(
            ctx,
            at,
            &path,
            Some(&d.name),
            (&d.size, d.type_.as_deref()),
            kept,
            f,
        );
    }
    if let Some(name) = &w.kubelet_data_volume_name
        && !data.iter().any(|d| &d.name == name)
    {
        f.violation(
            at.field("kubeletDataVolumeName"),
            format!("{name:?} is not one of the pool's dataVolumes; name one of them"),
        );
    }
}

/// One volume: its name, its `(size, type)`, and the configured volume types, for what the
/// stored pool's volume of the same name (`kept`: whether its type and its size are the same)
/// did not have already.
fn volume(
    ctx: &Ctx<'_>,
    at: Item,
    path: &str,
    name: Option<&str>,
    (size, type_): (&str, Option<&str>),
    kept: Option<(bool, bool)>,
    f: &mut ValidationOutcome,
) {
    let (type_kept, size_kept) = kept.unwrap_or((false, false));
    if let Some(n) = name
        && !n.is_empty()
        && (!syntax::is_dns_label(n) || n.len() > POOL_NAME_MAX)
    {
        f.violation(
            at.field(&format!("{path}.name")),
            format!("{n:?} is not a valid volume name; use at most {POOL_NAME_MAX} lower-case letters, digits and '-'"),
        );
    }
    let gib = syntax::parse_gi(size).filter(|g| *g > 0);
    if gib.is_none() {
        f.violation(
            at.field(&format!("{path}.size")),
            format!("{size:?} is not a volume size; use whole gibibytes above 0, e.g. 80Gi"),
        );
    }
    let Some(t) = type_ else { return };
    let Some(p) = ctx.provider else { return };
    match p.volume_type(t) {
        None if p.volume_types.is_some() && ctx.policy_applies(type_kept) => {
            let allowed: Vec<&str> = p
                .volume_types
                .iter()
                .flatten()
                .map(|v| v.name.as_str())
                .collect();
            f.violation(
                at.field(&format!("{path}.type")),
                format!(
                    "{t:?} is not an allowed volume type; use one of {}",
                    allowed.join(", ")
                ),
            );
        }
        Some(vt) if ctx.policy_applies(type_kept && size_kept) => {
            let Some(gib) = gib else { return };
            let min = vt.min_size.map(|s| u64::from(s.gib()));
            let max = vt.max_size.map(|s| u64::from(s.gib()));
            if min.is_some_and(|m| gib < m) || max.is_some_and(|m| gib > m) {
                f.violation(
                    at.field(&format!("{path}.size")),
                    format!(
                        "{size} is outside the sizes of volume type {t}; use {} to {}",
                        min.map_or("1Gi".to_owned(), |m| format!("{m}Gi")),
                        max.map_or("any size".to_owned(), |m| format!("{m}Gi"))
                    ),
                );
            }
        }
        _ => {}
    }
}

fn scaling(
    ctx: &Ctx<'_>,
    at: Item,
    w: &Worker,
    stored: Option<&Worker>,
    f: &mut ValidationOutcome,
) {
    if w.minimum < 0 {
        f.violation(
            at.field("minimum"),
            format!("{} is negative; use 0 or more", w.minimum),
        );
    }
    let provider_type = ctx.rt.spec.shoot.provider.type_;
    let bounds = ctx.provider.and_then(|p| p.worker_scaling);
    let minimum_checked = ctx.policy_applies(stored.is_some_and(|o| o.minimum == w.minimum));
    let maximum_checked = ctx.policy_applies(stored.is_some_and(|o| o.maximum == w.maximum));
    // A minimum above the upper bound is the fault: "raise maximum to the minimum" would
    // contradict the bound.
    let minimum_too_high = bounds
        .filter(|_| minimum_checked)
        .is_some_and(|b| i64::from(w.minimum) > i64::from(b.maximum));
    if w.maximum < w.minimum && !minimum_too_high {
        f.violation(
            at.field("maximum"),
            format!(
                "{} is below minimum {}; use at least {}",
                w.maximum,
                w.minimum,
                w.minimum.max(0)
            ),
        );
    }
    if let Some(b) = bounds {
        if minimum_checked && i64::from(w.minimum) < i64::from(b.minimum) {
            f.violation(
                at.field("minimum"),
                format!(
                    "{} is below the lower bound kim.providers.{provider_type}.workerScaling.minimum; use at least {}",
                    w.minimum, b.minimum
                ),
            );
        }
        if minimum_too_high {
            f.violation(
                at.field("minimum"),
                format!(
                    "{} is above the upper bound kim.providers.{provider_type}.workerScaling.maximum; use at most {}",
                    w.minimum, b.maximum
                ),
            );
        }
        if maximum_checked && i64::from(w.maximum) > i64::from(b.maximum) {
            f.violation(
                at.field("maximum"),
                format!(
                    "{} is above the upper bound kim.providers.{provider_type}.workerScaling.maximum; use at most {}",
                    w.maximum, b.maximum
                ),
            );
        }
    }
    let surge = rolling_value(at, "maxSurge", w.max_surge.as_ref(), f);
    let unavailable = rolling_value(at, "maxUnavailable", w.max_unavailable.as_ref(), f);
    if let Some(Scaled::Percent(p)) = unavailable
        && p > 100
    {
        f.violation(
            at.field("maxUnavailable"),
            format!("{p}% is above 100%; use at most 100%"),
        );
    }
    // Gardener's defaults when unset: maxSurge 1, maxUnavailable 0.
    let surge_zero = match (&w.max_surge, surge) {
        (None, _) => false,
        (Some(_), s) => s.is_some_and(Scaled::is_zero),
    };
    let unavailable_zero = w.max_unavailable.is_none() || unavailable.is_some_and(Scaled::is_zero);
    if surge_zero && unavailable_zero {
        let zones = w.zones.as_ref().map_or(1, |z| z.len().max(1));
        f.violation(
            at.field("maxSurge"),
            format!("maxSurge and maxUnavailable are both 0, so nodes could never be replaced; set maxSurge to the number of zones ({zones})"),
        );
    }
}

/// Parses a `maxSurge`/`maxUnavailable` value; records a violation when it is malformed or
/// negative.
fn rolling_value(
    at: Item,
    key: &str,
    v: Option<&IntOrString>,
    f: &mut ValidationOutcome,
) -> Option<Scaled> {
    let parsed = match v? {
        IntOrString::Int(n) => Some(Scaled::Count(i64::from(*n))),
        IntOrString::String(s) => match syntax::parse_scaled(s) {
            // Gardener takes text only as a percentage.
            Some(Scaled::Count(n)) => {
                f.violation(
                    at.field(key),
                    format!("\"{s}\" is a number written as text; write it as a number ({n}) or as a percentage (\"{n}%\")"),
                );
                return None;
            }
            other => other,
        },
    };
    match parsed {
        Some(Scaled::Count(n) | Scaled::Percent(n)) if n < 0 => {
            f.violation(
                at.field(key),
                format!("{n} is negative; use a number or percentage of 0 or more"),
            );
            None
        }
        None => {
            f.violation(
                at.field(key),
                "is neither a number nor a percentage; use e.g. 3 or \"25%\"",
            );
            None
        }
        ok => ok,
    }
}

/// A pool's own Kubernetes version must not be newer than the control plane and at most three
/// minors older (Gardener's rule).
fn pool_version(at: Item, w: &Worker, cluster: KubernetesVersion, f: &mut ValidationOutcome) {
    let Some(v) = w.kubernetes.as_ref().and_then(|k| k.version.as_deref()) else {
        return;
    };
    let field = || at.field("kubernetes.version");
    let Ok(pool) = v.parse::<KubernetesVersion>() else {
        f.violation(
            field(),
            format!("{v:?} is not a Kubernetes version; use the form 1.34 or 1.34.2"),
        );
        return;
    };
    if !cluster.is_at_least(&pool) {
        f.violation(
            field(),
            format!("{pool} is newer than the cluster version {cluster}; use at most {cluster}"),
        );
    } else if pool.major() != cluster.major() || cluster.minor().saturating_sub(pool.minor()) > 3 {
        f.violation(
            field(),
            format!(
                "{pool} is more than three minor versions older than the cluster version {cluster}"
            ),
        );
    }
}

fn zones<'a>(
    ctx: &Ctx<'_>,
    at: Item,
    w: &'a Worker,
    stored: Option<&Worker>,
    all: &mut Vec<&'a str>,
    f: &mut ValidationOutcome,
) {
    let shoot = &ctx.rt.spec.shoot;
    let provider_type = shoot.provider.type_;
    let list = w.zones.as_deref().unwrap_or_default();
    if list.is_empty() {
        // Legacy "Azure lite" pools were created without zones; they may stay so (a stored
        // one the controller re-checks is such a pool too: the conversion keeps its layout).
        let legacy = provider_type == ProviderType::Azure
            && (!ctx.opts.admission_policy
                || stored.is_some_and(|o| o.zones.as_deref().unwrap_or_default().is_empty()));
        if !legacy {
            f.violation(
                at.field("zones"),
                format!(
                    "must list at least one zone of region {}, e.g. {}",
                    shoot.region,
                    example_zone(provider_type, &shoot.region)
                ),
            );
        }
        return;
    }
    let region_kept = ctx.old.is_some_and(|o| o.spec.shoot.region == shoot.region);
    let region_known = ctx.provider.is_none_or(|p| p.allows_region(&shoot.region))
        || !ctx.policy_applies(region_kept);
    let stored_zones = stored.and_then(|o| o.zones.as_deref()).unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    for (j, zone) in list.iter().enumerate() {
        let field = || at.field(&format!("zones[{j}]"));
        if !seen.insert(zone) {
            f.violation(
                field(),
                format!("{zone:?} is listed twice; list each zone once"),
            );
            continue;
        }
        let kept = stored_zones.contains(zone);
        if region_known && let Some(why) = zone_problem(ctx, zone, kept) {
            f.violation(field(), why);
        }
        if !all.contains(&zone.as_str()) {
            all.push(zone);
        }
    }
}

/// Why `zone` is not a zone of the Runtime's region: from the configuration when it lists the
/// region's zones (unless the stored pool has it, `kept`), else by the provider's naming rule,
/// which the conversion relies on.
fn zone_problem(ctx: &Ctx<'_>, zone: &str, kept: bool) -> Option<String> {
    let shoot = &ctx.rt.spec.shoot;
    let region = shoot.region.as_str();
    let provider_type = shoot.provider.type_;
    if let Some(p) = ctx.provider
        && p.regions.is_some()
        && ctx.policy_applies(kept)
    {
        if p.allows_zone(region, zone) {
            return None;
        }
        let zones = p
            .region(region)
            .map(|r| r.zones.join(", "))
            .unwrap_or_default();
        return Some(format!(
            "{zone:?} is not a zone of region {region}; use one of {zones}"
        ));
    }
    let ok = match provider_type {
        // Exactly one digit 1-8: `parse` alone would admit "+1", which the conversion refuses.
        ProviderType::Azure => matches!(zone.as_bytes(), [b'1'..=b'8']),
        ProviderType::Aws | ProviderType::Openstack => {
            zone_suffix(zone, region).is_some_and(is_letter)
        }
        ProviderType::Gcp | ProviderType::Gdch => zone_suffix(zone, region)
            .and_then(|s| s.strip_prefix('-'))
            .is_some_and(is_letter),
        ProviderType::Alicloud => {
            zone_suffix(zone, region).is_some_and(|s| is_letter(s.strip_prefix('-').unwrap_or(s)))
        }
    };
    (!ok).then(|| {
        format!(
            "{zone:?} is not a zone of {provider_type} region {region}; use a zone such as {}",
            example_zone(provider_type, region)
        )
    })
}

/// `kubernetes.kubelet.maxParallelImagePulls`: positive, and not together with serialized
/// image pulls (the kubelet then pulls one image at a time).
fn kubelet(at: Item, w: &Worker, f: &mut ValidationOutcome) {
    let Some(kubelet) = w.kubernetes.as_ref().and_then(|k| k.kubelet.as_ref()) else {
        return;
    };
    let Some(n) = kubelet.max_parallel_image_pulls else {
        return;
    };
    if n < 1 {
        f.violation(
            at.field("kubernetes.kubelet.maxParallelImagePulls"),
            format!("{n} is not a positive number; leave it out for no limit"),
        );
    } else if n > 1 && kubelet.serialize_image_pulls == Some(true) {
        f.violation(
            at.field("kubernetes.kubelet.maxParallelImagePulls"),
            format!(
                "{n} is more than 1 while serializeImagePulls is true (one image at a time); set serializeImagePulls to false, or maxParallelImagePulls to 1 or leave it out"
            ),
        );
    }
}

/// `machineControllerManager.autoPreserveFailedMachineMax`, as Gardener bounds it: not
/// negative, at most `maximum`, and at most `maximum - 1` on a pool that runs system
/// components (the default), so that one machine is left for them.
fn preserved_machines(at: Item, w: &Worker, f: &mut ValidationOutcome) {
    let Some(n) = w
        .machine_controller_manager
        .as_ref()
        .and_then(|m| m.auto_preserve_failed_machine_max)
    else {
        return;
    };
    let field = || at.field("machineControllerManager.autoPreserveFailedMachineMax");
    let system_components = w.system_components.as_ref().is_none_or(|s| s.allow);
    if n < 0 {
        f.violation(field(), format!("{n} is negative; use 0 or more"));
    } else if system_components && w.maximum > 0 && n > w.maximum - 1 {
        f.violation(
            field(),
            format!(
                "{n} is more than maximum - 1 ({}): the pool runs system components, which need one machine that is not preserved; use at most {}",
                w.maximum - 1,
                w.maximum - 1
            ),
        );
    } else if n > w.maximum {
        f.violation(
            field(),
            format!(
                "{n} is more than the pool's maximum ({}); use at most {}",
                w.maximum, w.maximum
            ),
        );
    }
}

fn zone_suffix<'z>(zone: &'z str, region: &str) -> Option<&'z str> {
    zone.strip_prefix(region).filter(|_| !region.is_empty())
}

fn is_letter(s: &str) -> bool {
    s.len() == 1 && s.as_bytes()[0].is_ascii_lowercase()
}

fn example_zone(t: ProviderType, region: &str) -> String {
    match t {
        ProviderType::Azure => "1".to_owned(),
        ProviderType::Gcp | ProviderType::Gdch => format!("{region}-a"),
        ProviderType::Aws | ProviderType::Openstack | ProviderType::Alicloud => {
            format!("{region}a")
        }
    }
}

/// The zone subnets the infrastructure manager will generate (the conversion's own layout
/// functions, upstream's algorithm) must fit into the nodes CIDR.
fn zone_layout(
    provider: ProviderType,
    nodes: Ipv4Net,
    all_zones: &[&str],
    f: &mut ValidationOutcome,
) {
    if all_zones.is_empty() {
        return; // Reported at the pools.
    }
    let result = match provider {
        ProviderType::Aws => zones::aws(nodes, all_zones).map(drop),
        ProviderType::Azure | ProviderType::Alicloud => {
            zones::eighths(nodes, all_zones.len()).map(drop)
        }
        ProviderType::Gdch => zones::gdch(nodes, all_zones.len()).map(drop),
        ProviderType::Gcp | ProviderType::Openstack => Ok(()),
    };
    match result {
        Ok(()) => {}
        Err(ZoneSplitError::Prefix {
            prefix: p,
            min,
            max,
        }) => f.violation(
            "spec.shoot.networking.nodes",
            format!(
                "{nodes}: a /{p} network cannot be split into zone subnets; use a prefix from /{min} to /{max}"
            ),
        ),
        // The pools' zones are what is wrong, not the network.
        Err(ZoneSplitError::ZoneCount { count, min, max }) => f.violation(
            "spec.shoot.provider.workers",
            format!(
                "the pools use {count} distinct zones; a {provider} cluster uses {min} to {max}"
            ),
        ),
    }
}
