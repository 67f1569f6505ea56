//! Pure rules and names for [`RuntimeAccess`]: what the webhook admits and which objects the
//! controller creates in the shoot cluster. No I/O.

use k8s_openapi::api::rbac::v1::PolicyRule;

use crate::api::runtime_access::{RoleKind, RuntimeAccess, RuntimeAccessSpec};
use crate::validation::{Findings, Violation};

/// Default data key of the kubeconfig Secret.
pub const DEFAULT_SECRET_KEY: &str = "config";

/// TokenRequest rejects lifetimes under 10 minutes.
pub const MIN_TOKEN_EXPIRATION_SECONDS: i64 = 600;

/// Verbs that let a holder grant itself more than its rules say.
const ESCALATING_VERBS: [&str; 3] = ["escalate", "bind", "impersonate"];

/// Roles that grant everything; binding them is a wildcard grant.
const ALL_POWERFUL_ROLES: [&str; 1] = ["cluster-admin"];

/// What the operator allows in [`RuntimeAccess`] objects (controller and webhook flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessPolicy {
    /// Admit `*` in rules, the verbs `escalate`/`bind`/`impersonate`, and `cluster-admin`.
    pub allow_wildcards: bool,
    /// Longest token lifetime a request may ask for, in seconds.
    pub max_token_expiration_seconds: i64,
}

impl Default for AccessPolicy {
    fn default() -> Self {
        Self {
            allow_wildcards: false,
            max_token_expiration_seconds: 24 * 3600,
        }
    }
}

/// Name of the KCP Secret for this request: `spec.secret.name` or `<name>-kubeconfig`.
pub fn secret_name(ra: &RuntimeAccess) -> String {
    ra.spec
        .secret
        .as_ref()
        .and_then(|s| s.name.clone())
        .unwrap_or_else(|| {
            format!(
                "{}-kubeconfig",
                ra.metadata.name.as_deref().unwrap_or_default()
            )
        })
}

/// Data key of the KCP Secret: `spec.secret.key` or `config`.
pub fn secret_key(ra: &RuntimeAccess) -> String {
    ra.spec
        .secret
        .as_ref()
        .and_then(|s| s.key.clone())
        .unwrap_or_else(|| DEFAULT_SECRET_KEY.to_owned())
}

/// Name of the (Cluster)Role and binding created in the shoot:
/// `kim-access:<kcp namespace>:<name>`, unique per request and telling an auditor its origin.
pub fn shoot_rbac_name(kcp_namespace: &str, name: &str) -> String {
    format!("kim-access:{kcp_namespace}:{name}")
}

/// The user name the kubeconfig authenticates as (what the shoot's audit log shows).
pub fn service_account_user(spec: &RuntimeAccessSpec) -> String {
    format!(
        "system:serviceaccount:{}:{}",
        spec.service_account.namespace, spec.service_account.name
    )
}

/// Checks a new [`RuntimeAccess`]; one violation per wrong field.
pub fn validate_runtime_access(ra: &RuntimeAccess, policy: &AccessPolicy) -> Findings {
    let mut f = Findings::default();
    let spec = &ra.spec;
    if let Some(name) = ra.metadata.name.as_deref() {
        // The RBAC names embed it; keep it a DNS label so `<name>-kubeconfig` stays a valid Secret name.
        if !is_dns_label(name) {
            push(
                &mut f,
                "metadata.name",
                "must be a DNS label (lower-case alphanumerics and '-', at most 63 characters)",
            );
        }
    }
    if !is_dns_subdomain(&spec.runtime_id) {
        push(
            &mut f,
            "spec.runtimeId",
            "must be the name of a GardenerCluster (a DNS subdomain)",
        );
    }
    if !is_dns_subdomain(&spec.service_account.name) {
        push(
            &mut f,
            "spec.serviceAccount.name",
            "must be a DNS subdomain (lower-case alphanumerics, '-', '.')",
        );
    }
    if !is_dns_label(&spec.service_account.namespace) {
        push(
            &mut f,
            "spec.serviceAccount.namespace",
            "must be a DNS label (lower-case alphanumerics and '-', at most 63 characters)",
        );
    }
    let chosen = [
        spec.cluster_role.is_some(),
        spec.role.is_some(),
        spec.role_ref.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if chosen != 1 {
        push(
            &mut f,
            "spec",
            "set exactly one of clusterRole, role and roleRef",
        );
    }
    if let Some(cr) = &spec.cluster_role {
        check_rules(&mut f, "spec.clusterRole.rules", &cr.rules, true, policy);
    }
    if let Some(role) = &spec.role {
        if !is_dns_label(&role.namespace) {
            push(
                &mut f,
                "spec.role.namespace",
                "must be a DNS label (lower-case alphanumerics and '-', at most 63 characters)",
            );
        }
        check_rules(&mut f, "spec.role.rules", &role.rules, false, policy);
    }
    if let Some(r) = &spec.role_ref {
        if !is_path_segment(&r.name) {
            push(
                &mut f,
                "spec.roleRef.name",
                "must be a non-empty role name without '/' or '%', and not '.' or '..'",
            );
        }
        match (&r.kind, r.namespace.as_deref()) {
            (RoleKind::Role, None) => push(
                &mut f,
                "spec.roleRef.namespace",
                "is required for kind Role",
            ),
            (_, Some(ns)) if !is_dns_label(ns) => push(
                &mut f,
                "spec.roleRef.namespace",
                "must be a DNS label (lower-case alphanumerics and '-', at most 63 characters)",
            ),
            _ => {}
        }
        if r.kind == RoleKind::ClusterRole
            && ALL_POWERFUL_ROLES.contains(&r.name.as_str())
            && !policy.allow_wildcards
        {
            push(
                &mut f,
                "spec.roleRef.name",
                "binds cluster-admin, which grants everything; not allowed by the access policy (--access-allow-wildcards)",
            );
        }
    }
    if let Some(secs) = spec.token_expiration_seconds
        && !(MIN_TOKEN_EXPIRATION_SECONDS..=policy.max_token_expiration_seconds).contains(&secs)
    {
        push(
            &mut f,
            "spec.tokenExpirationSeconds",
            &format!(
                "must be between {MIN_TOKEN_EXPIRATION_SECONDS} and {} seconds",
                policy.max_token_expiration_seconds
            ),
        );
    }
    if let Some(secret) = &spec.secret {
        if let Some(name) = &secret.name
            && !is_dns_subdomain(name)
        {
            push(
                &mut f,
                "spec.secret.name",
                "must be a DNS subdomain (lower-case alphanumerics, '-', '.')",
            );
        }
        if let Some(key) = &secret.key
            && !is_config_key(key)
        {
            push(
                &mut f,
                "spec.secret.key",
                "must consist of alphanumerics, '-', '_' or '.'",
            );
        }
    }
    f
}

/// Checks an update: the runtime and the ServiceAccount are immutable (changing them would
/// orphan what was created in the shoot), and the new object must itself be valid.
pub fn validate_runtime_access_update(
    old: &RuntimeAccess,
    new: &RuntimeAccess,
    policy: &AccessPolicy,
) -> Findings {
    let mut f = validate_runtime_access(new, policy);
    if old.spec.runtime_id != new.spec.runtime_id {
        push(
            &mut f,
            "spec.runtimeId",
            "is immutable; create a new RuntimeAccess for another runtime",
        );
    }
    if old.spec.service_account != new.spec.service_account {
        push(
            &mut f,
            "spec.serviceAccount",
            "is immutable; create a new RuntimeAccess for another ServiceAccount",
        );
    }
    f
}

fn check_rules(
    f: &mut Findings,
    field: &str,
    rules: &[PolicyRule],
    cluster_scoped: bool,
    policy: &AccessPolicy,
) {
    if rules.is_empty() {
        push(f, field, "must contain at least one rule");
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("{field}[{i}]");
        if rule.verbs.is_empty() {
            push(f, &format!("{at}.verbs"), "must name at least one verb");
        }
        let resources = rule.resources.as_deref().unwrap_or_default();
        let urls = rule.non_resource_urls.as_deref().unwrap_or_default();
        match (resources.is_empty(), urls.is_empty()) {
            (true, true) => push(
                f,
                &at,
                "must name resources (with apiGroups) or nonResourceURLs",
            ),
            (false, false) => push(f, &at, "must not mix resources and nonResourceURLs"),
            _ => {}
        }
        if !urls.is_empty() && !cluster_scoped {
            push(
                f,
                &format!("{at}.nonResourceURLs"),
                "is only allowed in a clusterRole",
            );
        }
        if !resources.is_empty() && rule.api_groups.as_deref().unwrap_or_default().is_empty() {
            push(
                f,
                &format!("{at}.apiGroups"),
                "must be set for resources (\"\" is the core group)",
            );
        }
        if policy.allow_wildcards {
            continue;
        }
        let lists: [(&str, &[String]); 5] = [
            ("verbs", &rule.verbs),
            ("apiGroups", rule.api_groups.as_deref().unwrap_or_default()),
            ("resources", resources),
            (
                "resourceNames",
                rule.resource_names.as_deref().unwrap_or_default(),
            ),
            ("nonResourceURLs", urls),
        ];
        for (name, values) in lists {
            if values.iter().any(|v| v.contains('*')) {
                push(
                    f,
                    &format!("{at}.{name}"),
                    "contains a wildcard '*'; name each item (wildcards need --access-allow-wildcards)",
                );
            }
        }
        for verb in &rule.verbs {
            if ESCALATING_VERBS.contains(&verb.as_str()) {
                push(
                    f,
                    &format!("{at}.verbs"),
                    &format!(
                        "'{verb}' lets the holder escalate its privileges; not allowed by the access policy (--access-allow-wildcards)"
                    ),
                );
            }
        }
    }
}

fn push(f: &mut Findings, field: &str, message: &str) {
    f.violations.push(Violation {
        field: field.to_owned(),
        message: message.to_owned(),
    });
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

fn is_config_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn is_path_segment(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '%'])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::api::runtime_access::{
        AccessSecretSpec, ClusterRoleSpec, ExistingRoleRef, RoleSpec, RuntimeAccessSpec,
        ServiceAccountRef,
    };

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        PolicyRule {
            api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
            resources: Some(resources.iter().map(|s| s.to_string()).collect()),
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn pods_reader() -> RuntimeAccess {
        RuntimeAccess::new(
            "klm",
            RuntimeAccessSpec {
                runtime_id: "6a1c7f3e-5b8d-4c2a-9e0f-1d2b3c4d5e6f".into(),
                service_account: ServiceAccountRef {
                    name: "klm".into(),
                    namespace: "kyma-system".into(),
                },
                cluster_role: None,
                role: Some(RoleSpec {
                    namespace: "default".into(),
                    rules: vec![rule(&[""], &["pods"], &["get"])],
                }),
                role_ref: None,
                token_expiration_seconds: Some(3600),
                secret: None,
            },
        )
    }

    fn fields(ra: &RuntimeAccess, policy: &AccessPolicy) -> Vec<String> {
        validate_runtime_access(ra, policy)
            .violations
            .into_iter()
            .map(|v| v.field)
            .collect()
    }

    fn rejects(ra: &RuntimeAccess, field: &str) {
        let got = fields(ra, &AccessPolicy::default());
        assert!(
            got.iter().any(|f| f == field),
            "expected a violation at {field}, got {got:?}"
        );
    }

    #[test]
    fn accepts_a_role_reading_pods() {
        assert_eq!(
            fields(&pods_reader(), &AccessPolicy::default()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn requires_exactly_one_permission_source() {
        let mut ra = pods_reader();
        ra.spec.role = None;
        rejects(&ra, "spec");
        ra.spec.role = pods_reader().spec.role;
        ra.spec.role_ref = Some(ExistingRoleRef {
            kind: RoleKind::ClusterRole,
            name: "view".into(),
            namespace: None,
        });
        rejects(&ra, "spec");
    }

    #[test]
    fn rejects_wildcards_and_escalation_unless_allowed() {
        let mut ra = pods_reader();
        ra.spec.role = None;
        ra.spec.cluster_role = Some(ClusterRoleSpec {
            rules: vec![
                rule(&["*"], &["pods"], &["get"]),
                rule(&[""], &["roles"], &["bind", "list"]),
            ],
        });
        rejects(&ra, "spec.clusterRole.rules[0].apiGroups");
        rejects(&ra, "spec.clusterRole.rules[1].verbs");
        let open = AccessPolicy {
            allow_wildcards: true,
            ..Default::default()
        };
        assert_eq!(fields(&ra, &open), Vec::<String>::new());
    }

    #[test]
    fn rejects_binding_cluster_admin_unless_allowed() {
        let mut ra = pods_reader();
        ra.spec.role = None;
        ra.spec.role_ref = Some(ExistingRoleRef {
            kind: RoleKind::ClusterRole,
            name: "cluster-admin".into(),
            namespace: None,
        });
        rejects(&ra, "spec.roleRef.name");
        let open = AccessPolicy {
            allow_wildcards: true,
            ..Default::default()
        };
        assert!(validate_runtime_access(&ra, &open).is_allowed());
    }

    #[test]
    fn role_ref_of_kind_role_needs_a_namespace() {
        let mut ra = pods_reader();
        ra.spec.role = None;
        ra.spec.role_ref = Some(ExistingRoleRef {
            kind: RoleKind::Role,
            name: "reader".into(),
            namespace: None,
        });
        rejects(&ra, "spec.roleRef.namespace");
    }

    #[test]
    fn rejects_invalid_names_and_lifetimes() {
        let mut ra = pods_reader();
        ra.spec.service_account.name = "KLM".into();
        ra.spec.service_account.namespace = "kyma.system".into();
        ra.spec.runtime_id = String::new();
        ra.spec.token_expiration_seconds = Some(60);
        ra.spec.secret = Some(AccessSecretSpec {
            name: Some("Bad_Name".into()),
            key: Some("a/b".into()),
        });
        for field in [
            "spec.serviceAccount.name",
            "spec.serviceAccount.namespace",
            "spec.runtimeId",
            "spec.tokenExpirationSeconds",
            "spec.secret.name",
            "spec.secret.key",
        ] {
            rejects(&ra, field);
        }
    }

    #[test]
    fn rules_need_verbs_and_targets_and_urls_only_cluster_wide() {
        let mut ra = pods_reader();
        let mut r = rule(&[""], &[], &[]);
        r.non_resource_urls = Some(vec!["/healthz".into()]);
        ra.spec.role.as_mut().unwrap().rules = vec![r, rule(&[], &["pods"], &["get"])];
        rejects(&ra, "spec.role.rules[0].verbs");
        rejects(&ra, "spec.role.rules[0].nonResourceURLs");
        rejects(&ra, "spec.role.rules[1].apiGroups");
    }

    #[test]
    fn service_account_and_runtime_are_immutable() {
        let old = pods_reader();
        let mut new = pods_reader();
        new.spec.service_account.name = "keb".into();
        new.spec.runtime_id = "other".into();
        let got: Vec<_> = validate_runtime_access_update(&old, &new, &AccessPolicy::default())
            .violations
            .into_iter()
            .map(|v| v.field)
            .collect();
        assert!(got.contains(&"spec.serviceAccount".to_string()), "{got:?}");
        assert!(got.contains(&"spec.runtimeId".to_string()), "{got:?}");
    }

    #[test]
    fn names_default_and_identify_the_request() {
        let mut ra = pods_reader();
        ra.metadata.namespace = Some("kcp-system".into());
        assert_eq!(secret_name(&ra), "klm-kubeconfig");
        assert_eq!(secret_key(&ra), "config");
        assert_eq!(
            shoot_rbac_name("kcp-system", "klm"),
            "kim-access:kcp-system:klm"
        );
        assert_eq!(
            service_account_user(&ra.spec),
            "system:serviceaccount:kyma-system:klm"
        );
    }
}
