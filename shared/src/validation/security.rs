//! Rules on `spec.security` (administrators, network filter) and the kube-apiserver ACL.

use super::ValidationOutcome;
use super::context::Ctx;
use super::networking::acl_cidr;
use crate::api::ProviderType;

pub(crate) fn check(ctx: &Ctx<'_>, f: &mut ValidationOutcome) {
    let security = &ctx.rt.spec.security;
    // Administrators are bindings in the runtime cluster, not part of the Shoot, and KEB
    // writes them as given (an empty list for old runtimes without a user ID, entries as the
    // customer typed them): warnings, so that no update of such a Runtime is refused.
    if security.administrators.is_empty() {
        f.warning(
            "spec.security.administrators",
            "names no administrator: no one is bound to cluster-admin in the cluster, and the bindings the infrastructure manager created there are removed",
        );
    }
    let mut seen = std::collections::HashSet::new();
    for (i, admin) in security.administrators.iter().enumerate() {
        if admin.trim().is_empty() {
            f.warning(
                format_args!("spec.security.administrators[{i}]"),
                "is empty and skipped: no binding is created for it",
            );
        } else if admin.trim() != admin {
            f.warning(
                format_args!("spec.security.administrators[{i}]"),
                format_args!("{admin:?} has leading or trailing whitespace: the binding names it exactly so, which no user name {:?} matches", admin.trim()),
            );
        } else if !seen.insert(admin) {
            f.warning(
                format_args!("spec.security.administrators[{i}]"),
                format_args!("{admin:?} is listed twice"),
            );
        }
    }

    let filter = &security.networking.filter;
    if !filter.egress.enabled && filter.ingress.as_ref().is_some_and(|i| i.enabled) {
        f.warning(
            "spec.security.networking.filter.ingress.enabled",
            "is ignored while egress filtering is off: ingress filtering (blackholing) needs the networking filter, which egress.enabled=false switches off",
        );
    }

    let acl = ctx
        .rt
        .spec
        .shoot
        .kubernetes
        .as_ref()
        .and_then(|k| k.kube_api_server.as_ref())
        .and_then(|a| a.acl.as_ref())
        .and_then(|a| a.allowed_cidrs.as_ref());
    let provider = ctx.rt.spec.shoot.provider.type_;
    if acl.is_some_and(|cidrs| !cidrs.is_empty())
        && !matches!(provider, ProviderType::Aws | ProviderType::Azure)
    {
        f.warning(
            "spec.shoot.kubernetes.kubeAPIServer.acl.allowedCIDRs",
            format_args!("is ignored for {provider}: only aws and azure clusters support the kube-apiserver ACL (Gardener's acl extension), so the API server stays reachable from any address"),
        );
    }
    for (i, cidr) in acl.into_iter().flatten().enumerate() {
        let field = || format!("spec.shoot.kubernetes.kubeAPIServer.acl.allowedCIDRs[{i}]");
        match acl_cidr(cidr) {
            Err(why) => f.violation(field(), why),
            Ok(net) if net.trunc() != net => {
                f.warning(
                    field(),
                    format_args!("{cidr} is not in canonical form; it allows {}", net.trunc()),
                );
            }
            Ok(_) => {}
        }
    }
}
