//! CIDR rules: parse, canonical form, IPv4, no overlap between pods, services and nodes, clear
//! of the ranges Gardener reserves and of the seed networks; `dualStack` only where the
//! provider supports it.

use super::context::Ctx;
use super::{ValidationOutcome, syntax};
use crate::api::ProviderType;
use crate::convert::zones::{MAX_NODES_PREFIX, MIN_NODES_PREFIX};
use crate::gardener::shoot::reserved_network_overlap;
use ipnet::{IpNet, Ipv4Net};

/// Checks `spec.shoot.networking` and returns the nodes CIDR when it is valid (the zone layout
/// needs it).
pub(crate) fn check(ctx: &Ctx<'_>, f: &mut ValidationOutcome) -> Option<Ipv4Net> {
    let net = &ctx.rt.spec.shoot.networking;
    let nodes = shoot_network(f, "spec.shoot.networking.nodes", &net.nodes);
    let pods = shoot_network(f, "spec.shoot.networking.pods", &net.pods);
    let services = shoot_network(f, "spec.shoot.networking.services", &net.services);
    if pods.is_some() {
        pods_per_pool(ctx, f);
    }
    let named = [("nodes", nodes), ("pods", pods), ("services", services)];
    if ctx.opts.admission_policy {
        seed_networks(ctx, &named, f);
    }
    for (i, (a_key, a)) in named.iter().enumerate() {
        for (b_key, b) in &named[i + 1..] {
            if let (Some(a), Some(b)) = (a, b)
                && overlaps(*a, *b)
            {
                f.violation(
                    format!("spec.shoot.networking.{b_key}"),
                    format!("{b} overlaps the {a_key} network {a}; nodes, pods and services need disjoint ranges"),
                );
            }
        }
    }
    if let Some(t) = &net.type_
        && !syntax::is_dns_label(t)
    {
        f.violation(
            "spec.shoot.networking.type",
            format!(
                "{t:?} is not a networking type; use a lower-case name such as calico or cilium"
            ),
        );
    }
    dual_stack(ctx, f);
    let provider = ctx.rt.spec.shoot.provider.type_;
    let nodes = nodes?;
    // GDCH's split takes any prefix its zones fit in (checked with the zones).
    if needs_zone_layout(provider)
        && provider != ProviderType::Gdch
        && !(MIN_NODES_PREFIX..=MAX_NODES_PREFIX).contains(&nodes.prefix_len())
    {
        f.violation(
            "spec.shoot.networking.nodes",
            format!(
                "{nodes}: for {provider} the prefix length must be between {MIN_NODES_PREFIX} and {MAX_NODES_PREFIX} (the nodes network is split into zone subnets), e.g. 10.250.0.0/16"
            ),
        );
        return None;
    }
    Some(nodes)
}

/// The pods network has room for upstream's `maxPods` clamping: a prefix from /2 and at least
/// one address per pool that sets `kubernetes.kubelet.maxPods` (the conversion's
/// `PodsNetwork` error).
fn pods_per_pool(ctx: &Ctx<'_>, f: &mut ValidationOutcome) {
    let shoot = &ctx.rt.spec.shoot;
    let mut pools: Vec<_> = shoot
        .provider
        .workers
        .iter()
        .chain(shoot.provider.additional_workers.iter().flatten())
        .cloned()
        .collect();
    if let Err(e) = crate::convert::pools::clamp_max_pods(&mut pools, &shoot.networking.pods) {
        let message = e.to_string();
        let message = message
            .strip_prefix("spec.shoot.networking.pods: ")
            .unwrap_or(&message);
        f.violation("spec.shoot.networking.pods", message.to_owned());
    }
}

/// Providers whose infrastructure configuration splits the nodes CIDR into zone subnets.
pub(crate) fn needs_zone_layout(p: ProviderType) -> bool {
    matches!(
        p,
        ProviderType::Aws | ProviderType::Azure | ProviderType::Alicloud | ProviderType::Gdch
    )
}

/// Parses a CIDR of the shoot networks; records a violation at `field` and returns `None` when
/// it does not parse, is not IPv4 or is not canonical.
pub(crate) fn shoot_network(
    f: &mut ValidationOutcome,
    field: &str,
    value: &str,
) -> Option<Ipv4Net> {
    let net = match value.parse::<IpNet>() {
        Ok(IpNet::V4(n)) => n,
        Ok(IpNet::V6(_)) => {
            f.violation(
                field,
                format!(
                    "{value:?} is IPv6; the shoot networks must be IPv4 CIDRs such as 10.250.0.0/16"
                ),
            );
            return None;
        }
        Err(_) => {
            f.violation(
                field,
                format!("{value:?} is not a CIDR; use the form 10.250.0.0/16"),
            );
            return None;
        }
    };
    if net.trunc() != net {
        f.violation(
            field,
            format!("{value:?} is not in canonical form; use {}", net.trunc()),
        );
        return None;
    }
    if let Some(r) = reserved_network_overlap(net) {
        f.violation(field, format!("{value} overlaps {r}, which Gardener reserves; choose a range outside 240.0.0.0/8-244.0.0.0/8"));
    }
    Some(net)
}

/// KEB's default networks, the examples of a network clear of the seed networks.
fn example_network(key: &str) -> &'static str {
    match key {
        "pods" => "10.96.0.0/13",
        "services" => "10.104.0.0/13",
        _ => "10.250.0.0/16",
    }
}

/// The nodes, pods and services networks stay clear of the seed networks (`kim.seedNetworks`),
/// each compared with the seed networks of its own IP family. On UPDATE only a network that
/// changes is checked (they are immutable, so a stored Runtime keeps its networks).
fn seed_networks(ctx: &Ctx<'_>, named: &[(&str, Option<Ipv4Net>); 3], f: &mut ValidationOutcome) {
    let seeds = ctx.cfg.kim.seed_networks();
    if seeds.is_empty() {
        return;
    }
    let now = &ctx.rt.spec.shoot.networking;
    let before = ctx.old.map(|o| &o.spec.shoot.networking);
    let values = [
        (&now.nodes, before.map(|b| &b.nodes)),
        (&now.pods, before.map(|b| &b.pods)),
        (&now.services, before.map(|b| &b.services)),
    ];
    for ((key, cidr), (now, before)) in named.iter().zip(values) {
        let Some(cidr) = *cidr else { continue };
        if before == Some(now) {
            continue;
        }
        let Some(seed) = seeds
            .iter()
            .find(|s| same_family_overlap(**s, IpNet::V4(cidr)))
        else {
            continue;
        };
        let clear: Vec<String> = seeds.iter().map(ToString::to_string).collect();
        let example = example_network(key);
        let example = if example
            .parse::<IpNet>()
            .is_ok_and(|e| seeds.iter().all(|s| !same_family_overlap(*s, e)))
        {
            format!(", e.g. {example}")
        } else {
            String::new()
        };
        f.violation(
            format!("spec.shoot.networking.{key}"),
            format!(
                "{cidr} overlaps the seed network {seed}; the cluster's control plane may run on a seed with that network, so choose a range clear of the seed networks {} (kim.seedNetworks){example}",
                clear.join(", ")
            ),
        );
    }
}

/// `spec.shoot.networking.dualStack`: on CREATE, `true` is refused where the provider cannot
/// be dual stack (upstream silently makes such a Shoot IPv4 only; with
/// [`ValidationOptions::admission_policy`](super::ValidationOptions) off it is only a warning).
/// Warns when the landscape does not support dual stack, and when it changes on an existing
/// cluster (only creation sets the IP families).
fn dual_stack(ctx: &Ctx<'_>, f: &mut ValidationOutcome) {
    const FIELD: &str = "spec.shoot.networking.dualStack";
    let requested = ctx.rt.spec.shoot.networking.dual_stack;
    let provider = ctx.rt.spec.shoot.provider.type_;
    if let Some(old) = ctx.old {
        let before = old.spec.shoot.networking.dual_stack;
        if before.unwrap_or(false) != requested.unwrap_or(false) {
            f.warning(
                FIELD,
                format_args!(
                    "changes from {} to {}, which does not change the existing cluster: its IP families are set when it is created",
                    before.unwrap_or(false),
                    requested.unwrap_or(false)
                ),
            );
        }
        return;
    }
    if requested != Some(true) {
        return;
    }
    if !crate::convert::supports_dual_stack(provider) {
        if ctx.opts.admission_policy {
            f.violation(
                FIELD,
                format!("true is not supported for {provider}: only aws and gcp clusters can be dual stack (IPv4 and IPv6); leave dualStack out or set it to false for an IPv4 cluster"),
            );
        } else {
            f.warning(
                FIELD,
                format_args!("is ignored for {provider}: only aws and gcp clusters can be dual stack; the cluster is IPv4 only"),
            );
        }
    } else if !ctx.cfg.converter.networking.enable_dual_stack_ip {
        f.warning(
            FIELD,
            "is ignored: this landscape does not support dual stack (converter.networking.enableDualStackIP is off); the cluster is IPv4 only",
        );
    }
}

/// Whether two IPv4 networks share an address.
pub(crate) fn overlaps(a: Ipv4Net, b: Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// Whether two networks of the same IP family share an address; networks of different
/// families never overlap (a dual-stack cluster's IPv4 and IPv6 ranges are compared apart).
pub(crate) fn same_family_overlap(a: IpNet, b: IpNet) -> bool {
    match (a, b) {
        (IpNet::V4(a), IpNet::V4(b)) => overlaps(a, b),
        (IpNet::V6(a), IpNet::V6(b)) => a.contains(&b.network()) || b.contains(&a.network()),
        _ => false,
    }
}

/// Parses an ACL CIDR (IPv4 or IPv6). Returns the parsed network, or a message for a violation.
pub(crate) fn acl_cidr(value: &str) -> Result<IpNet, String> {
    value.parse::<IpNet>().map_err(|_| {
        format!("{value:?} is not a CIDR; use the form 203.0.113.0/24 or 2001:db8::/32")
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn canonical_ipv4_only() {
        let mut f = ValidationOutcome::default();
        assert!(shoot_network(&mut f, "n", "10.250.0.0/16").is_some());
        assert!(f.is_allowed());
        assert!(shoot_network(&mut f, "n", "10.250.1.0/16").is_none());
        assert!(
            f.violations[0].message.contains("use 10.250.0.0/16"),
            "{:?}",
            f.violations
        );
        assert!(shoot_network(&mut f, "n", "fd00::/64").is_none());
        assert!(shoot_network(&mut f, "n", "10.250.0.0").is_none());
        assert_eq!(f.violations.len(), 3);
        assert!(shoot_network(&mut f, "n", "240.0.0.0/4").is_some());
        assert_eq!(f.violations.len(), 4);
    }

    #[test]
    fn overlap() {
        let n = |s: &str| s.parse::<Ipv4Net>().unwrap();
        assert!(overlaps(n("10.0.0.0/8"), n("10.250.0.0/16")));
        assert!(overlaps(n("10.250.0.0/16"), n("10.0.0.0/8")));
        assert!(!overlaps(n("10.96.0.0/13"), n("10.104.0.0/13")));
        let m = |s: &str| s.parse::<IpNet>().unwrap();
        assert!(same_family_overlap(m("fd00::/8"), m("fd00:1::/64")));
        assert!(!same_family_overlap(m("fd00::/8"), m("fe80::/10")));
        assert!(!same_family_overlap(m("10.0.0.0/8"), m("::/0")));
        assert!(!same_family_overlap(m("::/0"), m("10.0.0.0/8")));
    }

    #[test]
    fn keb_default_networks_are_clear_of_the_default_seed_networks() {
        for net in ["10.250.0.0/16", "10.96.0.0/13", "10.104.0.0/13"] {
            let net: IpNet = net.parse().unwrap();
            for seed in crate::config::DEFAULT_SEED_NETWORKS {
                assert!(!same_family_overlap(seed, net), "{net} overlaps {seed}");
            }
        }
    }
}
