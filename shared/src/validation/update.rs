//! UPDATE rules: what may not change once the shoot exists, plus all CREATE rules on the new
//! object where the update touches them.

use super::context::Ctx;
use super::runtime::{self, effective_version};
use super::workers::pools;
use super::{ValidationOptions, ValidationOutcome, labels};
use crate::api::Runtime;
use crate::config::KimConfig;
use crate::convert::zones::MAX_ZONES;

/// Validates an UPDATE from `old` (stored) to `new` with [`ValidationOptions::default`].
pub fn validate_update(old: &Runtime, new: &Runtime, cfg: &KimConfig) -> ValidationOutcome {
    validate_update_with(old, new, cfg, &ValidationOptions::default())
}

/// Validates an UPDATE from `old` (stored) to `new`.
///
/// The CREATE rules run on `new` only for the parts the update changes (labels, spec), so that
/// a Runtime stored before a rule existed still accepts metadata-only updates such as its
/// finalizer being added or removed. While the Runtime is being deleted only the immutability
/// rules apply.
pub fn validate_update_with(
    old: &Runtime,
    new: &Runtime,
    cfg: &KimConfig,
    opts: &ValidationOptions,
) -> ValidationOutcome {
    let mut f = ValidationOutcome::default();
    let deleting = new.metadata.deletion_timestamp.is_some();
    if !deleting && old.metadata.labels != new.metadata.labels {
        labels::check_changed(Some(old), new, &mut f);
    }
    runtime_id_unchanged(
        old.label(crate::names::LABEL_RUNTIME_ID),
        new.label(crate::names::LABEL_RUNTIME_ID),
        &mut f,
    );
    // An unchanged spec breaks no rule on it (a finalizer's removal, a label).
    if old.spec == new.spec {
        return f;
    }
    // Lists over the CRD's bounds are judged by nothing else: some rules compare a list's
    // items pairwise, or with the other object's.
    let over = super::runtime_lists_over_bound(new);
    if !over.is_empty() {
        f.violations.extend(over);
        return f;
    }
    if !super::runtime_lists_over_bound(old).is_empty() {
        // A stored object over a bound (stored before the bounds and kept by the API server's
        // ratcheting, or a review that did not come from the API server): the rules on
        // changes would compare it item by item, so the new object is judged as a new one.
        runtime::spec(&Ctx::new(new, cfg, None, opts), &mut f);
        return f;
    }
    if !deleting {
        runtime::spec(&Ctx::new(new, cfg, Some(old), opts), &mut f);
    }
    immutable(old, new, cfg, &mut f);
    f
}

fn immutable(old: &Runtime, new: &Runtime, cfg: &KimConfig, f: &mut ValidationOutcome) {
    let (o, n) = (&old.spec.shoot, &new.spec.shoot);
    let mut fixed = |field: &str, before: &str, after: &str| {
        if before != after {
            f.violation(
                field,
                format!("is immutable: changing it would need a new cluster; keep {before:?}"),
            );
        }
    };
    fixed("spec.shoot.name", &o.name, &n.name);
    fixed(
        "spec.shoot.provider.type",
        o.provider.type_.as_str(),
        n.provider.type_.as_str(),
    );
    fixed("spec.shoot.region", &o.region, &n.region);
    fixed(
        "spec.shoot.platformRegion",
        &o.platform_region,
        &n.platform_region,
    );
    fixed(
        "spec.shoot.secretBindingName",
        &o.secret_binding_name,
        &n.secret_binding_name,
    );
    fixed(
        "spec.shoot.networking.nodes",
        &o.networking.nodes,
        &n.networking.nodes,
    );
    fixed(
        "spec.shoot.networking.pods",
        &o.networking.pods,
        &n.networking.pods,
    );
    fixed(
        "spec.shoot.networking.services",
        &o.networking.services,
        &n.networking.services,
    );
    // Unset -> set is allowed: the shoot already has a type, which the default names.
    if let Some(before) = &o.networking.type_ {
        fixed(
            "spec.shoot.networking.type",
            before,
            n.networking.type_.as_deref().unwrap_or_default(),
        );
    }
    if let Some(before) = failure_tolerance(old) {
        fixed(
            "spec.shoot.controlPlane.highAvailability.failureTolerance.type",
            before,
            failure_tolerance(new).unwrap_or_default(),
        );
    }

    // Zones of a pool may be added, never removed: its machines and subnets live there.
    for (at, w) in pools(new) {
        let Some((_, before)) = pools(old).find(|(_, p)| p.name == w.name) else {
            continue;
        };
        let now = w.zones.as_deref().unwrap_or_default();
        let removed: Vec<&str> = before
            .zones
            .iter()
            .flatten()
            .filter(|z| !now.contains(z))
            .map(String::as_str)
            .collect();
        if !removed.is_empty() {
            f.violation(
                at.field("zones"),
                format!(
                    "zones may be added, not removed; keep {} in pool {:?}",
                    removed.join(", "),
                    w.name
                ),
            );
        }
    }

    // The cluster keeps every zone it ever had (pools may go, their zones stay in the
    // infrastructure), so old and new zones together must stay within the limit.
    let mut zones: Vec<&str> = Vec::new();
    for z in pools(old)
        .chain(pools(new))
        .flat_map(|(_, w)| w.zones.iter().flatten())
    {
        if !zones.contains(&z.as_str()) {
            zones.push(z);
        }
    }
    if zones.len() > MAX_ZONES {
        f.violation(
            "spec.shoot.provider.workers",
            format!("the cluster keeps its {} existing zones and may use at most {MAX_ZONES} in all; the new zones would make {}", distinct(old), zones.len()),
        );
    }

    if let (Some(before), Some(after)) = (effective_version(old, cfg), effective_version(new, cfg))
        && !after.is_at_least(&before)
    {
        f.violation(
            "spec.shoot.kubernetes.version",
            format!("{after} is lower than the current version {before}; Kubernetes cannot be downgraded, use {before} or newer"),
        );
    }
}

fn failure_tolerance(rt: &Runtime) -> Option<&str> {
    let ha = rt
        .spec
        .shoot
        .control_plane
        .as_ref()?
        .high_availability
        .as_ref()?;
    Some(ha.failure_tolerance.type_.as_str())
}

/// Number of distinct zones over all pools of `rt`.
fn distinct(rt: &Runtime) -> usize {
    let mut zones: Vec<&str> = Vec::new();
    for z in pools(rt).flat_map(|(_, w)| w.zones.iter().flatten()) {
        if !zones.contains(&z.as_str()) {
            zones.push(z);
        }
    }
    zones.len()
}

/// `kyma-project.io/runtime-id` names the runtime's GardenerCluster, kubeconfig Secret and
/// RuntimeAccesses: changed, the controller would configure, and on deletion delete, another
/// runtime's. Shared by the Runtime and GardenerCluster UPDATE rules.
pub(crate) fn runtime_id_unchanged(
    old: Option<&str>,
    new: Option<&str>,
    f: &mut ValidationOutcome,
) {
    if old == new {
        return;
    }
    let keep = match old {
        Some(v) => format!("keep {v:?}"),
        None => "leave it unset".to_owned(),
    };
    f.violation(
        format!("metadata.labels[{}]", crate::names::LABEL_RUNTIME_ID),
        format!(
            "is immutable: it names the runtime's GardenerCluster and kubeconfig Secret; {keep}"
        ),
    );
}
