//! The rules on a Runtime as a whole (CREATE, and the new object of an UPDATE), and the
//! shoot-level fields: name, purpose, region, credentials, Kubernetes version, control plane.

use super::context::Ctx;
use super::{
    ValidationOptions, ValidationOutcome, labels, networking, oidc, security, syntax, workers,
};
use crate::api::Runtime;
use crate::config::{KimConfig, KubernetesVersion};

/// Gardener limits the project name plus the shoot name to 21 characters on create.
pub const PROJECT_AND_SHOOT_NAME_MAX: usize = 21;

/// Purposes a Shoot in a project namespace may have (`infrastructure` is only allowed in the
/// `garden` namespace, which the infrastructure manager never uses).
pub const PURPOSES: [&str; 4] = ["evaluation", "testing", "development", "production"];

/// Validates a Runtime on CREATE with [`ValidationOptions::default`]: every rule of
/// `docs/validation.md` except the UPDATE and DELETE rules.
pub fn validate_create(rt: &Runtime, cfg: &KimConfig) -> ValidationOutcome {
    validate_create_with(rt, cfg, &ValidationOptions::default())
}

/// [`validate_create`] with explicit [`ValidationOptions`].
pub fn validate_create_with(
    rt: &Runtime,
    cfg: &KimConfig,
    opts: &ValidationOptions,
) -> ValidationOutcome {
    let mut f = ValidationOutcome::default();
    labels::check(rt, &mut f);
    let over = super::runtime_lists_over_bound(rt);
    if !over.is_empty() {
        // Judged by nothing else: some rules compare a list's items pairwise.
        f.violations.extend(over);
        return f;
    }
    spec(&Ctx::new(rt, cfg, None, opts), &mut f);
    f
}

/// All rules on `spec`.
pub(crate) fn spec(ctx: &Ctx<'_>, f: &mut ValidationOutcome) {
    shoot_name(ctx, f);
    shoot_fields(ctx, f);
    without_effect(ctx, f);
    let version = kubernetes_version(ctx, f);
    let nodes = networking::check(ctx, f);
    workers::check(ctx, nodes, version, f);
    oidc::check(ctx, f);
    security::check(ctx, f);
    super::registry_cache::check(ctx, f);
}

fn shoot_name(ctx: &Ctx<'_>, f: &mut ValidationOutcome) {
    const FIELD: &str = "spec.shoot.name";
    let name = ctx.rt.spec.shoot.name.as_str();
    let project = ctx.cfg.converter.gardener.project_name.as_str();
    let max = PROJECT_AND_SHOOT_NAME_MAX.saturating_sub(project.len());
    if !syntax::is_dns_label(name) || name.contains("--") {
        f.violation(
            FIELD,
            format!("{name:?} is not a valid shoot name; use lower-case letters, digits and single '-', starting and ending with a letter or digit, at most {max} characters"),
        );
    } else if name.len() > max {
        f.violation(
            FIELD,
            format!("{name:?} has {} characters; Gardener allows at most {PROJECT_AND_SHOOT_NAME_MAX} for project and shoot name together, so with project {project:?} use at most {max}", name.len()),
        );
    }
}

fn shoot_fields(ctx: &Ctx<'_>, f: &mut ValidationOutcome) {
    let shoot = &ctx.rt.spec.shoot;
    if !PURPOSES.contains(&shoot.purpose.as_str()) {
        f.violation(
            "spec.shoot.purpose",
            format!(
                "{:?} is not a shoot purpose; use one of {}",
                shoot.purpose,
                PURPOSES.join(", ")
            ),
        );
    }

    let provider_type = shoot.provider.type_;
    if shoot.region.is_empty() {
        f.violation(
            "spec.shoot.region",
            format!(
                "must name the {provider_type} region, e.g. {}",
                example_region(provider_type)
            ),
        );
    } else if let Some(p) = ctx.provider
        && ctx.policy_applies(ctx.old.is_some_and(|o| o.spec.shoot.region == shoot.region))
        && !p.allows_region(&shoot.region)
    {
        let allowed: Vec<&str> = p
            .regions
            .iter()
            .flatten()
            .map(|r| r.name.as_str())
            .collect();
        f.violation(
            "spec.shoot.region",
            format!(
                "{:?} is not an allowed {provider_type} region; use one of {}",
                shoot.region,
                allowed.join(", ")
            ),
        );
    } else if ctx
        .cfg
        .audit_log_tenant(provider_type.as_str(), &shoot.region)
        .is_err()
    {
        // Checked only for an otherwise valid region, so that a wrong region gets one message.
        if ctx.opts.audit_log_mandatory {
            // Only regions the configuration allows, when it lists them.
            let regions: Vec<&str> = ctx
                .cfg
                .audit_log_regions(provider_type.as_str())
                .filter(|r| ctx.provider.is_none_or(|p| p.allows_region(r)))
                .collect();
            let advice = if regions.is_empty() {
                format!("the audit-log tenant file has no {provider_type} region")
            } else {
                format!(
                    "use a region with a tenant: {}",
                    super::shortened(regions.iter())
                )
            };
            f.violation(
                "spec.shoot.region",
                format!(
                    "{} for {provider_type} region {:?} and audit logs are mandatory; {advice}",
                    super::NO_AUDIT_LOG_TENANT,
                    shoot.region
                ),
            );
        } else {
            f.warning("spec.shoot.region", format_args!("no audit-log tenant is configured for {provider_type} region {:?}; the cluster gets no audit logging", shoot.region));
        }
    }

    if !syntax::is_dns_subdomain(&shoot.secret_binding_name) {
        f.violation(
            "spec.shoot.secretBindingName",
            format!("{:?} is not a valid SecretBinding name; use lower-case letters, digits, '-' and '.', at most 253 characters", shoot.secret_binding_name),
        );
    }

    if let Some(cp) = &shoot.control_plane {
        if let Some(ha) = &cp.high_availability {
            let t = ha.failure_tolerance.type_.as_str();
            if !matches!(t, "node" | "zone") {
                f.violation(
                    "spec.shoot.controlPlane.highAvailability.failureTolerance.type",
                    format!("{t:?} is not a failure tolerance; use node or zone"),
                );
            }
        }
        if let Some(zones) = &cp.zones {
            let zone_ha = cp
                .high_availability
                .as_ref()
                .is_some_and(|h| h.failure_tolerance.type_ == "zone");
            let wanted = if zone_ha { 3 } else { 1 };
            let unique = zones
                .iter()
                .enumerate()
                .all(|(i, z)| !zones[..i].contains(z));
            if zones.len() != wanted || !unique {
                f.violation(
                    "spec.shoot.controlPlane.zones",
                    if zone_ha {
                        "must list exactly 3 distinct zones for failure tolerance zone".to_owned()
                    } else {
                        "must list exactly 1 zone without failure tolerance zone (node, or none)"
                            .to_owned()
                    },
                );
            }
        }
    }

    let provider = &shoot.provider;
    if provider.infrastructure_config.is_some() {
        f.warning(
            "spec.shoot.provider.infrastructureConfig",
            "is ignored: the infrastructure manager generates the infrastructure configuration",
        );
    }
    if provider.control_plane_config.is_some() {
        f.warning(
            "spec.shoot.provider.controlPlaneConfig",
            "is ignored: the infrastructure manager generates the control plane configuration",
        );
    }
}

/// Fields KEB writes that the infrastructure manager does not act on (neither does upstream's):
/// admitted with a warning, on CREATE and when an update changes them.
fn without_effect(ctx: &Ctx<'_>, f: &mut ValidationOutcome) {
    let rt = ctx.rt;
    let vpc = rt
        .spec
        .shoot
        .networking
        .vpc_network
        .as_deref()
        .filter(|v| !v.is_empty());
    if let Some(vpc) = vpc
        && ctx
            .old
            .is_none_or(|o| o.spec.shoot.networking.vpc_network.as_deref() != Some(vpc))
    {
        f.warning(
            "spec.shoot.networking.vpcNetwork",
            format_args!("{vpc:?} has no effect yet: the infrastructure manager creates a new network laid out from spec.shoot.networking.nodes (as upstream does); an existing VPC or VNet cannot be used"),
        );
    }
}

fn example_region(t: crate::api::ProviderType) -> &'static str {
    use crate::api::ProviderType::*;
    match t {
        Aws => "eu-central-1",
        Azure => "westeurope",
        Gcp => "europe-west3",
        Openstack => "eu-de-1",
        Alicloud => "eu-central-1",
        Gdch => "us-west16",
    }
}

/// Checks `spec.shoot.kubernetes.version` and returns the version the cluster gets (the
/// configured default when the Runtime names none), if it parses.
fn kubernetes_version(ctx: &Ctx<'_>, f: &mut ValidationOutcome) -> Option<KubernetesVersion> {
    const FIELD: &str = "spec.shoot.kubernetes.version";
    let Some(v) = explicit_version(ctx.rt) else {
        return Some(*ctx.cfg.default_kubernetes_version());
    };
    let parsed = match v.parse::<KubernetesVersion>() {
        Ok(parsed) => parsed,
        Err(why) => {
            f.violation(FIELD, why);
            return None;
        }
    };
    if let Some(p) = ctx.provider
        && ctx.policy_applies(ctx.old.is_some_and(|o| explicit_version(o) == Some(v)))
        && let Err(why) = p.check_kubernetes_version(v)
    {
        f.violation(
            FIELD,
            format!(
                "{why}; use a version the {} configuration offers",
                ctx.rt.spec.shoot.provider.type_
            ),
        );
    }
    Some(parsed)
}

/// `spec.shoot.kubernetes.version` when set and not empty (empty means "use the default", as
/// upstream treats it).
pub(crate) fn explicit_version(rt: &Runtime) -> Option<&str> {
    rt.spec
        .shoot
        .kubernetes
        .as_ref()
        .and_then(|k| k.version.as_deref())
        .filter(|v| !v.is_empty())
}

/// The Kubernetes version the cluster gets: the Runtime's, or the configured default.
pub(crate) fn effective_version(rt: &Runtime, cfg: &KimConfig) -> Option<KubernetesVersion> {
    match explicit_version(rt) {
        Some(v) => v.parse().ok(),
        None => Some(*cfg.default_kubernetes_version()),
    }
}
