//! Pure rules and names for [`RuntimeAccess`]: what the webhook admits and which objects the
//! controller creates in the shoot cluster. No I/O.

use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::runtime_access::{ExistingRoleRef, RoleKind, RuntimeAccess, RuntimeAccessSpec};
use crate::validation::{ValidationOutcome, Violation};

/// Default data key of the kubeconfig Secret.
pub const DEFAULT_SECRET_KEY: &str = "config";

/// Annotation on a RuntimeAccess: the user who created it, as the KCP apiserver authenticated
/// them. The admission webhook sets it on CREATE (whatever the request says) and keeps it on
/// every UPDATE; the controller copies it onto what it creates for the request. An access
/// review reads who asked from the object itself, not only from audit logs kept for a while.
pub const ANNOTATION_REQUESTED_BY: &str = "infrastructuremanager.kyma-project.io/requested-by";

/// Field path of [`ANNOTATION_REQUESTED_BY`] in violations.
const REQUESTED_BY_FIELD: &str =
    "metadata.annotations[infrastructuremanager.kyma-project.io/requested-by]";

/// Who created `ra` ([`ANNOTATION_REQUESTED_BY`]), when recorded.
pub fn requested_by(ra: &RuntimeAccess) -> Option<&str> {
    ra.metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_REQUESTED_BY)
        .map(String::as_str)
}

/// Stamps `ra`, being created by `user`, with its requester (a value the request sends is
/// replaced). On UPDATE (`old`: the stored object) a request without the annotation (a replace
/// from a manifest) gets the stored one back; a request that changes it is left to
/// [`validate_runtime_access_update`], which refuses it, saying so.
pub fn stamp_requester(ra: &mut RuntimeAccess, old: Option<&RuntimeAccess>, user: &str) {
    let value = match old {
        None => user,
        Some(old) => match requested_by(old) {
            Some(was) if requested_by(ra).is_none() => was,
            _ => return,
        },
    };
    ra.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION_REQUESTED_BY.to_owned(), value.to_owned());
}

/// The requester rule of a CREATE by `user`: the annotation, when present (the mutating webhook
/// sets it), names `user`.
pub fn validate_requester_on_create(ra: &RuntimeAccess, user: &str) -> ValidationOutcome {
    let mut f = ValidationOutcome::default();
    if let Some(claimed) = requested_by(ra).filter(|claimed| *claimed != user) {
        push(
            &mut f,
            REQUESTED_BY_FIELD,
            &format!(
                "is set by the admission webhook to the user who creates the RuntimeAccess ({user:?}), not {claimed:?}; leave it out"
            ),
        );
    }
    f
}

/// TokenRequest rejects lifetimes under 10 minutes.
pub const MIN_TOKEN_EXPIRATION_SECONDS: i64 = 600;

/// Verbs no RuntimeAccess grants: each lets the holder act beyond its own rules (grant or bind
/// roles it does not hold, act as another user, approve or sign certificates for any identity).
const FORBIDDEN_VERBS: [(&str, &str); 5] = [
    (
        "escalate",
        "lets the holder create roles with rights it does not have",
    ),
    (
        "bind",
        "lets the holder bind roles with rights it does not have",
    ),
    (
        "impersonate",
        "lets the holder act as any user, group or ServiceAccount",
    ),
    (
        "approve",
        "lets the holder approve certificate requests for any identity",
    ),
    ("sign", "lets the holder sign certificates for any identity"),
];

/// Resources no RuntimeAccess grants, whatever the verb: each hands out the rights of other
/// identities (tokens of any ServiceAccount, a shell in any container of the namespace, the
/// kubelet API, certificate approval, node client certificates).
const FORBIDDEN_RESOURCES: [(&str, &str); 9] = [
    (
        "serviceaccounts/token",
        "issues tokens of other ServiceAccounts",
    ),
    (
        "pods/exec",
        "runs commands in containers, with their ServiceAccounts' rights",
    ),
    (
        "pods/attach",
        "attaches to containers, with their ServiceAccounts' rights",
    ),
    (
        "pods/ephemeralcontainers",
        "adds containers to running pods, with their ServiceAccounts' rights",
    ),
    (
        "nodes/proxy",
        "reaches the kubelet API, which runs commands in any pod of the node",
    ),
    (
        "certificatesigningrequests/approval",
        "approves certificate requests for any identity",
    ),
    ("signers", "approves or signs certificates for any identity"),
    (
        "certificatesigningrequests/nodeclient",
        "has node client certificates approved automatically, for any node identity",
    ),
    (
        "certificatesigningrequests/selfnodeclient",
        "has node client certificates approved automatically, for any node identity",
    ),
];

/// The verbs a cluster-wide rule may have: reads of resources and of non-resource URLs.
const READ_VERBS: [&str; 4] = ["get", "list", "watch", "head"];

/// Subresources that tunnel to a pod or service: cluster-wide they reach kube-system's.
const CLUSTER_WIDE_TUNNELS: [&str; 3] = ["pods/portforward", "pods/proxy", "services/proxy"];

/// Non-resource URL paths no rule may read, with what they serve: the API server's own log
/// files and its debugging handlers (goroutine and heap dumps, the requests in flight with
/// their users). Matched as the path and everything below it.
const INTERNAL_URLS: [(&str, &str); 2] = [
    ("/logs", "serves the log files of the API server's host"),
    (
        "/debug",
        "serves the API server's debugging handlers (goroutine and heap profiles, the requests in flight with their users)",
    ),
];

/// Verbs that change objects.
const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// Resources a cluster-wide rule may not write (spec.clusterRole): each write hands the holder
/// the whole cluster, or keeps its rights after its token expires.
const CLUSTER_WIDE_WRITES: [(&str, &str); 23] = [
    (
        "pods",
        "runs containers in any namespace, kube-system's included, as any ServiceAccount there and with host access",
    ),
    (
        "deployments",
        "runs containers in any namespace, as any ServiceAccount there",
    ),
    (
        "replicasets",
        "runs containers in any namespace, as any ServiceAccount there",
    ),
    (
        "statefulsets",
        "runs containers in any namespace, as any ServiceAccount there",
    ),
    (
        "daemonsets",
        "runs containers on every node, as any ServiceAccount",
    ),
    (
        "jobs",
        "runs containers in any namespace, as any ServiceAccount there",
    ),
    (
        "cronjobs",
        "runs containers in any namespace, as any ServiceAccount there",
    ),
    (
        "replicationcontrollers",
        "runs containers in any namespace, as any ServiceAccount there",
    ),
    (
        "mutatingwebhookconfigurations",
        "intercepts and rewrites requests to the cluster",
    ),
    (
        "validatingwebhookconfigurations",
        "intercepts requests to the cluster",
    ),
    (
        "mutatingadmissionpolicies",
        "rewrites requests to the cluster",
    ),
    (
        "mutatingadmissionpolicybindings",
        "rewrites requests to the cluster",
    ),
    (
        "validatingadmissionpolicies",
        "decides on requests to the cluster",
    ),
    (
        "validatingadmissionpolicybindings",
        "decides on requests to the cluster",
    ),
    (
        "apiservices",
        "routes API groups to a server of the holder's choosing",
    ),
    (
        "clusterrolebindings",
        "hands the holder's rights to other identities, which keep them after the token expires",
    ),
    (
        "rolebindings",
        "hands the holder's rights to other identities, which keep them after the token expires",
    ),
    (
        "clusterroles",
        "hands the holder's rights to other identities through aggregated roles, which keep them after the token expires",
    ),
    (
        "openidconnects",
        "adds an identity provider whose tokens the cluster accepts, for any user name (a cluster administrator's too)",
    ),
    (
        "certificatesigningrequests",
        "requests certificates for identities of the holder's choosing",
    ),
    (
        "customresourcedefinitions",
        "routes conversions of a kind's objects to a webhook of the holder's choosing",
    ),
    (
        "namespaces",
        "changes the Pod Security level of any namespace, kube-system's included",
    ),
    (
        "persistentvolumes",
        "mounts any path of the nodes into pods (hostPath volumes)",
    ),
];

/// Resources whose writes run containers: a Pod spec can ask for privileges, host namespaces
/// and hostPath volumes, which give root on a node (and with it every credential there) unless
/// the namespace enforces Pod Security `baseline` or `restricted`. A StatefulSet rebuilds its
/// Pods from the ControllerRevision its status names, which can be deleted and made again with
/// another Pod template.
const WORKLOADS: [&str; 10] = [
    "pods",
    "pods/ephemeralcontainers",
    "deployments",
    "replicasets",
    "statefulsets",
    "daemonsets",
    "jobs",
    "cronjobs",
    "replicationcontrollers",
    "controllerrevisions",
];

/// The Pod Security levels under which a Pod cannot ask for host access (label
/// `pod-security.kubernetes.io/enforce` of its namespace).
pub const POD_SECURITY_LEVELS_WITHOUT_HOST_ACCESS: [&str; 2] = ["baseline", "restricted"];

/// The label of a namespace that says which Pod Security level the apiserver enforces there.
pub const LABEL_POD_SECURITY_ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// The namespace and a resource of `spec.role` whose writes (create, update, patch) run
/// containers there; `None` when its rules run none. The controller serves such a request only
/// for a namespace that enforces [`POD_SECURITY_LEVELS_WITHOUT_HOST_ACCESS`].
pub fn workload_writes(ra: &RuntimeAccess) -> Option<(&str, &str)> {
    workload_writes_of(&ra.spec)
}

fn workload_writes_of(spec: &RuntimeAccessSpec) -> Option<(&str, &str)> {
    let role = spec.role.as_ref()?;
    let resource = role.rules.iter().find_map(|rule| {
        let writes = rule
            .verbs
            .iter()
            .any(|v| matches!(v.as_str(), "create" | "update" | "patch"));
        writes
            .then(|| {
                rule.resources
                    .iter()
                    .flatten()
                    .find(|r| WORKLOADS.contains(&r.as_str()))
            })
            .flatten()
    })?;
    Some((role.namespace.as_str(), resource.as_str()))
}

/// The namespace and a resource of `spec.role` through which its token reaches the
/// ServiceAccounts of that namespace: workload writes (a Pod runs as any account of its
/// namespace, and keeps it past the account's revocation) or changes of ServiceAccounts (their
/// labels and finalizers). The controller refuses a request whose such namespace holds another
/// request's account, and one whose account is in another request's such namespace.
pub fn reaches_accounts_in(spec: &RuntimeAccessSpec) -> Option<(&str, &str)> {
    if let Some(found) = workload_writes_of(spec) {
        return Some(found);
    }
    let role = spec.role.as_ref()?;
    role.rules
        .iter()
        .any(changes_service_accounts)
        .then_some((role.namespace.as_str(), "serviceaccounts"))
}

/// Whether `rule` updates or patches ServiceAccounts (what changes an existing account's
/// labels and finalizers).
fn changes_service_accounts(rule: &PolicyRule) -> bool {
    rule.verbs
        .iter()
        .any(|v| matches!(v.as_str(), "update" | "patch"))
        && rule
            .resources
            .iter()
            .flatten()
            .any(|r| r == "serviceaccounts")
}

/// Whether `spec.role` creates, updates or patches Services, and in which namespace: a Service
/// with `externalIPs` makes kube-proxy on every node send the cluster's traffic for those
/// addresses to it (CVE-2020-8554), unless the cluster refuses external IPs. The controller
/// serves such a request only where a server-side dry run of a Service with an external IP is
/// refused.
pub fn service_writes(ra: &RuntimeAccess) -> Option<&str> {
    let role = ra.spec.role.as_ref()?;
    role.rules
        .iter()
        .any(|rule| {
            rule.verbs
                .iter()
                .any(|v| matches!(v.as_str(), "create" | "update" | "patch"))
                && rule.resources.iter().flatten().any(|r| r == "services")
        })
        .then_some(role.namespace.as_str())
}

/// Resources whose writes in one namespace redirect traffic beyond it, whatever the cluster's
/// admission: a Service's load-balancer address in its status (kube-proxy sends the cluster's
/// traffic for that address to the Service, CVE-2020-8554); endpoints, and the Pod IPs they
/// are made from, which point a Service at any address, other namespaces' Pods included, past
/// their network policies (CVE-2021-25740; Kubernetes' own `edit` and `admin` roles stopped granting them); and the
/// Istio objects that apply to the whole mesh from any namespace (exported to every namespace
/// unless `exportTo` says otherwise; Kyma runs Istio in every runtime).
const TRAFFIC_REDIRECTS: [(&str, &str); 7] = [
    (
        "pods/status",
        "sets a Pod's IP addresses, which the endpoints of its Services follow, so a Service points at any address (CVE-2021-25740)",
    ),
    (
        "services/status",
        "sets a Service's load-balancer address, and kube-proxy on every node then sends the cluster's traffic for that address to the Service (CVE-2020-8554)",
    ),
    (
        "endpoints",
        "points a Service at any address, other namespaces' Pods included, past their network policies (CVE-2021-25740)",
    ),
    (
        "endpointslices",
        "points a Service at any address, other namespaces' Pods included, past their network policies (CVE-2021-25740)",
    ),
    (
        "virtualservices",
        "routes the traffic of every Istio sidecar for any host, other namespaces' Services included, to destinations of the holder's choosing",
    ),
    (
        "serviceentries",
        "adds hosts to the Istio mesh's registry, so that every sidecar sends the traffic for any host name (an external API, another namespace's Service) to addresses of the holder's choosing",
    ),
    (
        "gateways",
        "binds hosts on the cluster's shared Istio ingress gateway, with any certificate of the gateway's namespace, taking over other applications' ingress traffic (a Gateway API Gateway of that name is refused alike)",
    ),
];

/// RBAC objects of a namespace: whoever may write them can bind its own rules to anyone.
const NAMESPACED_RBAC: [&str; 2] = ["roles", "rolebindings"];

/// The Namespace object and its subresources. The API server counts a request for Namespace
/// `x` as one in namespace `x`, so a Role in `x` that writes `namespaces` writes `x` itself:
/// its Pod Security labels (privileged pods with host access follow), its finalizers, its
/// deletion.
const NAMESPACE_ITSELF: [&str; 3] = ["namespaces", "namespaces/status", "namespaces/finalize"];

/// Namespaces of the cluster's own components: a ServiceAccount, Role or binding there shares
/// the namespace with controllers whose Secrets and tokens it could reach.
pub const BUILT_IN_PROTECTED_NAMESPACES: &str = "kube-*, garden*, kyma-system, istio-system";

/// An existing role a RuntimeAccess may bind (`--access-allowed-role-refs`), for every request
/// or only for those one user created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedRoleRef {
    /// The role.
    pub role: ListedRole,
    /// `<role>=<user>`: only for RuntimeAccesses whose [`ANNOTATION_REQUESTED_BY`] names this
    /// user (the webhook sets it to the creating user and keeps it). A role that hands out more
    /// than rules may (`cluster-admin` for the component that installs modules) is thus not
    /// open to every requester.
    pub requester: Option<String>,
}

/// The role of an [`AllowedRoleRef`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListedRole {
    /// `ClusterRole/<name>`: the ClusterRole, cluster-wide or in one namespace.
    ClusterRole(String),
    /// `Role/<namespace>/<name>`: the Role in its namespace.
    Role {
        /// Namespace of the Role.
        namespace: String,
        /// Name of the Role.
        name: String,
    },
}

impl std::str::FromStr for AllowedRoleRef {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refused = || {
            format!(
                "{s:?} is not a role reference; write ClusterRole/<name> or Role/<namespace>/<name>, optionally followed by =<user> to allow it only for RuntimeAccesses that user created"
            )
        };
        let (role, requester) = match s.split_once('=') {
            Some((role, user)) if !user.trim().is_empty() => (role, Some(user.trim().to_owned())),
            Some(_) => return Err(refused()),
            None => (s, None),
        };
        let parts: Vec<&str> = role.split('/').collect();
        let role = match parts.as_slice() {
            ["ClusterRole", name] if is_path_segment(name) => {
                ListedRole::ClusterRole((*name).to_owned())
            }
            ["Role", namespace, name] if is_dns_label(namespace) && is_path_segment(name) => {
                ListedRole::Role {
                    namespace: (*namespace).to_owned(),
                    name: (*name).to_owned(),
                }
            }
            _ => return Err(refused()),
        };
        Ok(Self { role, requester })
    }
}

impl std::fmt::Display for AllowedRoleRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.role {
            ListedRole::ClusterRole(name) => write!(f, "ClusterRole/{name}")?,
            ListedRole::Role { namespace, name } => write!(f, "Role/{namespace}/{name}")?,
        }
        match &self.requester {
            Some(user) => write!(f, "={user}"),
            None => Ok(()),
        }
    }
}

impl AllowedRoleRef {
    /// Whether this entry names the role `r` (whoever the requester).
    fn names(&self, r: &ExistingRoleRef) -> bool {
        match (&self.role, &r.kind) {
            (ListedRole::ClusterRole(name), RoleKind::ClusterRole) => *name == r.name,
            (ListedRole::Role { namespace, name }, RoleKind::Role) => {
                *name == r.name && Some(namespace.as_str()) == r.namespace.as_deref()
            }
            _ => false,
        }
    }
}

/// What the operator allows in [`RuntimeAccess`] objects (controller and webhook flags, set
/// alike in both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessPolicy {
    /// Longest token lifetime a request may ask for, in seconds.
    pub max_token_expiration_seconds: i64,
    /// Namespaces refused besides [`BUILT_IN_PROTECTED_NAMESPACES`]
    /// (`--access-protected-namespaces`).
    pub protected_namespaces: Vec<String>,
    /// Existing roles `spec.roleRef` may name (`--access-allowed-role-refs`); empty: none,
    /// only rules.
    pub allowed_role_refs: Vec<AllowedRoleRef>,
}

impl Default for AccessPolicy {
    fn default() -> Self {
        Self {
            max_token_expiration_seconds: 24 * 3600,
            protected_namespaces: Vec::new(),
            allowed_role_refs: Vec::new(),
        }
    }
}

impl AccessPolicy {
    /// Whether `namespace` is one a RuntimeAccess may not use: `kube-*`, `garden*`,
    /// `kyma-system`, `istio-system` (an EnvoyFilter there rewrites every sidecar's traffic) or
    /// one of [`AccessPolicy::protected_namespaces`].
    pub fn is_protected_namespace(&self, namespace: &str) -> bool {
        namespace.starts_with("kube-")
            || namespace.starts_with("garden")
            || namespace == "kyma-system"
            || namespace == "istio-system"
            || self.protected_namespaces.iter().any(|n| n == namespace)
    }

    /// Whether `spec.roleRef` names a role of the allow-list, for a request created by
    /// `requester` (its [`ANNOTATION_REQUESTED_BY`]).
    pub fn allows_role_ref(&self, r: &ExistingRoleRef, requester: Option<&str>) -> bool {
        self.allowed_role_refs.iter().any(|a| {
            a.names(r)
                && a.requester
                    .as_deref()
                    .is_none_or(|only| Some(only) == requester)
        })
    }
}

/// Prefix of the admin kubeconfig Secrets of GardenerClusters (`kubeconfig-<runtime-id>`); a
/// RuntimeAccess never writes there.
pub const ADMIN_KUBECONFIG_SECRET_PREFIX: &str = "kubeconfig-";
/// How the name of every RuntimeAccess kubeconfig Secret ends (the default is
/// `<metadata.name>-kubeconfig`).
pub const ACCESS_SECRET_SUFFIX: &str = "-kubeconfig";

/// Name of the KCP Secret for this request: `spec.secret.name` or `<name>-kubeconfig`.
pub fn secret_name(ra: &RuntimeAccess) -> String {
    ra.spec
        .secret
        .as_ref()
        .and_then(|s| s.name.clone())
        .unwrap_or_else(|| {
            format!(
                "{}{ACCESS_SECRET_SUFFIX}",
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
pub fn validate_runtime_access(ra: &RuntimeAccess, policy: &AccessPolicy) -> ValidationOutcome {
    let mut f = ValidationOutcome::default();
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
    check_namespace(
        &mut f,
        "spec.serviceAccount.namespace",
        &spec.service_account.namespace,
        policy,
    );
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
        check_rules(&mut f, "spec.clusterRole.rules", &cr.rules, true);
    }
    if let Some(role) = &spec.role {
        if !is_dns_label(&role.namespace) {
            push(
                &mut f,
                "spec.role.namespace",
                "must be a DNS label (lower-case alphanumerics and '-', at most 63 characters)",
            );
        }
        check_namespace(&mut f, "spec.role.namespace", &role.namespace, policy);
        check_rules(&mut f, "spec.role.rules", &role.rules, false);
    }
    if let Some((namespace, resource)) = workload_writes(ra)
        && namespace == spec.service_account.namespace
    {
        // A Pod runs as any ServiceAccount of its namespace, and the kubelet renews its
        // token for the account of that name: a revocation (a new account) would not end it.
        push(
            &mut f,
            "spec.role.namespace",
            &format!(
                "{namespace:?} is also the namespace of spec.serviceAccount, and spec.role writes {resource:?} there: a Pod made with the token could run as the account, and the kubelet renews its token even after the tokens are revoked; keep the account in a namespace the role does not write workloads in (spec.serviceAccount cannot change: create a new RuntimeAccess), or grant only reads there"
            ),
        );
    }
    if let Some(role) = &spec.role
        && role.namespace == spec.service_account.namespace
        && let Some(i) = role.rules.iter().position(changes_service_accounts)
    {
        // The token could change its own account: remove the request's UID label, so that a
        // revocation may not delete it (the account is no longer provably the request's), or
        // set a finalizer that keeps it after the delete.
        push(
            &mut f,
            &format!("spec.role.rules[{i}]"),
            &format!(
                "updates or patches \"serviceaccounts\" in {:?}, the namespace of spec.serviceAccount: the token could change its own account (its labels, its finalizers) so that a revocation no longer ends it; keep the account in a namespace the role does not change ServiceAccounts in (spec.serviceAccount cannot change: create a new RuntimeAccess), or grant only get, list, watch, create and delete of serviceaccounts there",
                role.namespace
            ),
        );
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
        if let Some(ns) = r.namespace.as_deref() {
            check_namespace(&mut f, "spec.roleRef.namespace", ns, policy);
        }
        let requester = requested_by(ra);
        let for_others: Vec<&str> = policy
            .allowed_role_refs
            .iter()
            .filter(|a| a.names(r))
            .filter_map(|a| a.requester.as_deref())
            .collect();
        if !policy.allows_role_ref(r, requester) && !for_others.is_empty() {
            push(
                &mut f,
                "spec.roleRef",
                &format!(
                    "this role is allowed only for RuntimeAccesses created by {} (--access-allowed-role-refs), and this one was created by {} (annotation {ANNOTATION_REQUESTED_BY}); ask one of them, or give the rules in spec.role or spec.clusterRole instead",
                    for_others.join(", "),
                    requester.map_or_else(|| "nobody known".to_owned(), |u| format!("{u:?}")),
                ),
            );
        } else if !policy.allows_role_ref(r, requester) {
            let listed = if policy.allowed_role_refs.is_empty() {
                "none is listed".to_owned()
            } else {
                policy
                    .allowed_role_refs
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let named = match (&r.kind, r.namespace.as_deref()) {
                (RoleKind::Role, Some(ns)) => format!("Role/{ns}/{}", r.name),
                (RoleKind::Role, None) => format!("Role/<namespace>/{}", r.name),
                (RoleKind::ClusterRole, _) => format!("ClusterRole/{}", r.name),
            };
            push(
                &mut f,
                "spec.roleRef",
                &format!(
                    "{named} is not in the controller's allow-list of existing roles (--access-allowed-role-refs: {listed}); give the rules in spec.role or spec.clusterRole instead"
                ),
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
        if let Some(name) = &secret.name {
            if !is_dns_subdomain(name) {
                push(
                    &mut f,
                    "spec.secret.name",
                    "must be a DNS subdomain (lower-case alphanumerics, '-', '.')",
                );
            } else if name.starts_with(ADMIN_KUBECONFIG_SECRET_PREFIX) {
                push(
                    &mut f,
                    "spec.secret.name",
                    &format!(
                        "{name:?} has the form of a runtime's admin kubeconfig Secret ({ADMIN_KUBECONFIG_SECRET_PREFIX}<runtime-id>); choose another name or leave it unset for <metadata.name>-kubeconfig"
                    ),
                );
            } else if !name.ends_with(ACCESS_SECRET_SUFFIX) {
                // The controller creates the Secret when it is missing and re-creates it when it
                // is deleted: a free choice could claim a name the control plane's own Secrets
                // have while they are absent (the webhook's certificate, the Gardener
                // credentials during a rotation).
                push(
                    &mut f,
                    "spec.secret.name",
                    &format!(
                        "{name:?} does not end in {ACCESS_SECRET_SUFFIX}; use a name such as <metadata.name>{ACCESS_SECRET_SUFFIX}, or leave it unset for that"
                    ),
                );
            }
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
/// orphan what was created in the shoot), and a changed spec must itself be valid. An update
/// that leaves the spec alone (a finalizer, a label, the status) or of an object being deleted
/// is not held to the CREATE rules, so that a request stored before a stricter policy can
/// still be finalized and deleted (the controller refuses to serve it).
pub fn validate_runtime_access_update(
    old: &RuntimeAccess,
    new: &RuntimeAccess,
    policy: &AccessPolicy,
) -> ValidationOutcome {
    let deleting = new.metadata.deletion_timestamp.is_some();
    let mut f = if !deleting && (old.spec != new.spec || old.metadata.name != new.metadata.name) {
        validate_runtime_access(new, policy)
    } else {
        ValidationOutcome::default()
    };
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
    f.extend(validate_requester_update(&old.metadata, new));
    f
}

/// Who may change what a RuntimeAccess grants: only the user who created it (its
/// [`ANNOTATION_REQUESTED_BY`]), when recorded. Requesters share the right to update
/// RuntimeAccesses, and a spec change by another could redirect the kubeconfig into a Secret
/// they read (`spec.secret`) or widen the grant, and a role listed for one requester only
/// would serve whoever edits that requester's object. Others may still annotate it (revoke its
/// tokens) or delete it.
pub fn validate_spec_change_by(
    old: &RuntimeAccess,
    new: &RuntimeAccess,
    user: &str,
) -> ValidationOutcome {
    let mut f = ValidationOutcome::default();
    if let Some(requester) = requested_by(old)
        && old.spec != new.spec
        && user != requester
    {
        push(
            &mut f,
            "spec",
            &format!(
                "only the user who created this RuntimeAccess ({requester:?}, annotation {ANNOTATION_REQUESTED_BY}) may change its spec, not {user:?}; create a RuntimeAccess of your own, or delete this one"
            ),
        );
    }
    f
}

/// The requester rule of an UPDATE from the stored metadata `old` (also when the rest of the
/// stored object does not read): [`ANNOTATION_REQUESTED_BY`] never changes, and is never added.
pub fn validate_requester_update(old: &ObjectMeta, new: &RuntimeAccess) -> ValidationOutcome {
    let mut f = ValidationOutcome::default();
    let was = old
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_REQUESTED_BY))
        .map(String::as_str);
    match (was, requested_by(new)) {
        (Some(was), now) if now != Some(was) => push(
            &mut f,
            REQUESTED_BY_FIELD,
            &format!(
                "records who created the RuntimeAccess ({was:?}); it cannot be changed or removed"
            ),
        ),
        (None, Some(_)) => push(
            &mut f,
            REQUESTED_BY_FIELD,
            "is set only by the admission webhook, when a RuntimeAccess is created; leave it out",
        ),
        _ => {}
    }
    f
}

/// The rules of an update that repairs a stored RuntimeAccess which does not read, whose
/// metadata `old` does: [`validate_requester_update`], and, since what the update changes in the
/// spec cannot be told, only the requester repairs it (as [`validate_spec_change_by`] holds
/// spec changes to the requester). Others may still delete it.
pub fn validate_repair_by(old: &ObjectMeta, new: &RuntimeAccess, user: &str) -> ValidationOutcome {
    let mut f = validate_requester_update(old, new);
    let requester = old
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_REQUESTED_BY));
    if let Some(requester) = requester
        && user != requester
    {
        push(
            &mut f,
            "spec",
            &format!(
                "the stored RuntimeAccess does not read, so what this update changes cannot be told; only the user who created it ({requester:?}, annotation {ANNOTATION_REQUESTED_BY}) may repair it, not {user:?}; others may delete it"
            ),
        );
    }
    f
}

fn check_namespace(f: &mut ValidationOutcome, field: &str, namespace: &str, policy: &AccessPolicy) {
    if policy.is_protected_namespace(namespace) {
        push(
            f,
            field,
            &format!(
                "{namespace:?} is a protected namespace ({BUILT_IN_PROTECTED_NAMESPACES}{}{}); use a namespace of your workloads",
                if policy.protected_namespaces.is_empty() {
                    ""
                } else {
                    ", "
                },
                policy.protected_namespaces.join(", ")
            ),
        );
    }
}

fn check_rules(f: &mut ValidationOutcome, field: &str, rules: &[PolicyRule], cluster_scoped: bool) {
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
        for refusal in forbidden_grants(rule, cluster_scoped) {
            push(f, &format!("{at}.{}", refusal.list), &refusal.message);
        }
    }
}

/// One thing a rule grants that no RuntimeAccess may grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForbiddenGrant {
    /// The list of the rule at fault: `verbs`, `apiGroups`, `resources` or `nonResourceURLs`.
    pub list: &'static str,
    /// What it grants and what to write instead.
    pub message: String,
}

/// What `rule` grants that a RuntimeAccess never may: a wildcard in any list, a verb of
/// [`FORBIDDEN_VERBS`], a resource of [`FORBIDDEN_RESOURCES`], `secrets` in a cluster-wide
/// rule (`cluster_scoped`: a ClusterRole bound cluster-wide) or a write of `secrets` anywhere,
/// or a write of [`CLUSTER_WIDE_WRITES`] in a cluster-wide rule. Resources are matched in every
/// API group: a wildcard group is refused anyway, and a same-named resource elsewhere is
/// refused rather than guessed harmless. Empty: the rule may be granted.
pub fn forbidden_grants(rule: &PolicyRule, cluster_scoped: bool) -> Vec<ForbiddenGrant> {
    let mut out = Vec::new();
    let resources = rule.resources.as_deref().unwrap_or_default();
    let lists: [(&'static str, &[String]); 4] = [
        ("verbs", &rule.verbs),
        ("apiGroups", rule.api_groups.as_deref().unwrap_or_default()),
        ("resources", resources),
        (
            "nonResourceURLs",
            rule.non_resource_urls.as_deref().unwrap_or_default(),
        ),
    ];
    for (list, values) in lists {
        if let Some(v) = values.iter().find(|v| v.contains('*')) {
            out.push(ForbiddenGrant {
                list,
                message: format!(
                    "{v:?} is a wildcard, which a RuntimeAccess never grants; name each item"
                ),
            });
        }
    }
    for verb in &rule.verbs {
        if let Some((_, why)) = FORBIDDEN_VERBS.iter().find(|(v, _)| v == verb) {
            out.push(ForbiddenGrant {
                list: "verbs",
                message: format!(
                    "{verb:?} {why}; a RuntimeAccess never grants it (remove the verb)"
                ),
            });
        }
    }
    // Cluster-wide, every verb but a read counts as a write: custom verbs and the HTTP verbs
    // of non-resource URLs included.
    let write_verb = rule.verbs.iter().find(|v| {
        if cluster_scoped {
            !READ_VERBS.contains(&v.as_str())
        } else {
            WRITE_VERBS.contains(&v.as_str())
        }
    });
    if cluster_scoped
        && resources.is_empty()
        && let Some(verb) = write_verb
    {
        out.push(ForbiddenGrant {
            list: "verbs",
            message: format!(
                "{verb:?} on non-resource URLs changes the API server's state (log levels, debug handlers); a cluster-wide rule may only read (get, head)"
            ),
        });
    }
    for url in rule.non_resource_urls.iter().flatten() {
        let internal = INTERNAL_URLS.iter().find(|(prefix, _)| {
            url.strip_prefix(prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        });
        if let Some((prefix, why)) = internal {
            out.push(ForbiddenGrant {
                list: "nonResourceURLs",
                message: format!(
                    "{url:?} {why}; a RuntimeAccess never grants {prefix} or a path below it"
                ),
            });
        }
    }
    for resource in resources {
        if let Some((_, why)) = FORBIDDEN_RESOURCES.iter().find(|(r, _)| r == resource) {
            out.push(ForbiddenGrant {
                list: "resources",
                message: format!(
                    "{resource:?} {why}; a RuntimeAccess never grants it (remove the resource)"
                ),
            });
        } else if cluster_scoped && resource == "secrets" {
            out.push(ForbiddenGrant {
                list: "resources",
                message: "\"secrets\" cluster-wide reads every ServiceAccount token and credential of the cluster; grant secrets only in spec.role (one namespace)".to_owned(),
            });
        } else if resource == "secrets"
            && let Some(verb) = write_verb
        {
            out.push(ForbiddenGrant {
                list: "resources",
                message: format!(
                    "{verb:?} on \"secrets\" mints tokens of any ServiceAccount of the namespace that never expire (a Secret of type kubernetes.io/service-account-token); grant secrets only get, list and watch"
                ),
            });
        } else if cluster_scoped && CLUSTER_WIDE_TUNNELS.contains(&resource.as_str()) {
            out.push(ForbiddenGrant {
                list: "resources",
                message: format!(
                    "{resource:?} cluster-wide opens connections to any pod or service, kube-system's included, past their network policies; grant it only in spec.role (one namespace)"
                ),
            });
        } else if cluster_scoped && let Some(verb) = write_verb {
            // Read-only, whatever the resource: the ways a cluster-wide write takes over or
            // disables a cluster (leader leases, API priority, DNS config maps, any custom
            // resource of an add-on) cannot all be listed.
            let why = CLUSTER_WIDE_WRITES
                .iter()
                .find(|(r, _)| r == resource)
                .map_or(
                    "reaches every namespace, kube-system's included",
                    |(_, why)| why,
                );
            out.push(ForbiddenGrant {
                list: "resources",
                message: format!(
                    "{verb:?} on {resource:?} cluster-wide {why}; a cluster-wide rule may only read (get, list, watch), writes belong in spec.role (one namespace)"
                ),
            });
        } else if let Some(verb) = write_verb
            && NAMESPACE_ITSELF.contains(&resource.as_str())
        {
            out.push(ForbiddenGrant {
                list: "resources",
                message: format!(
                    "{verb:?} on {resource:?} in spec.role writes the role's own namespace (the API server counts a Namespace as in itself): its Pod Security labels among others, which lets the token run privileged pods; grant {resource} only get, list and watch"
                ),
            });
        } else if let Some(verb) = write_verb
            && let Some((_, why)) = TRAFFIC_REDIRECTS.iter().find(|(r, _)| r == resource)
        {
            out.push(ForbiddenGrant {
                list: "resources",
                message: format!(
                    "{verb:?} on {resource:?} {why}; grant {resource} only get, list and watch"
                ),
            });
        } else if let Some(verb) = write_verb
            && NAMESPACED_RBAC.contains(&resource.as_str())
        {
            out.push(ForbiddenGrant {
                list: "resources",
                message: format!(
                    "{verb:?} on {resource:?} lets the token bind its rules to other identities (system:authenticated among them), which keep them after the token expires and this RuntimeAccess is deleted; grant {resource} only get, list and watch"
                ),
            });
        }
    }
    out
}

fn push(f: &mut ValidationOutcome, field: &str, message: &str) {
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
                    namespace: "apps".into(),
                },
                cluster_role: None,
                role: Some(RoleSpec {
                    namespace: "apps".into(),
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

    /// An update may change the permissions, never the runtime or the account: what was
    /// created in one runtime cluster, or for one account, would be left behind.
    #[test]
    fn runtime_and_service_account_are_immutable() {
        let policy = AccessPolicy::default();
        let update_fields = |new: &RuntimeAccess| -> Vec<String> {
            validate_runtime_access_update(&pods_reader(), new, &policy)
                .violations
                .into_iter()
                .map(|v| v.field)
                .collect()
        };
        let mut wider = pods_reader();
        if let Some(role) = wider.spec.role.as_mut() {
            role.rules.push(rule(&[""], &["configmaps"], &["get"]));
        }
        assert_eq!(update_fields(&wider), Vec::<String>::new());
        let mut moved = pods_reader();
        moved.spec.runtime_id = "another-runtime".into();
        assert_eq!(update_fields(&moved), ["spec.runtimeId"]);
        let mut renamed = pods_reader();
        renamed.spec.service_account.name = "other".into();
        assert_eq!(update_fields(&renamed), ["spec.serviceAccount"]);
        // A deletion in progress is not held to the rules, but still to immutability.
        let mut deleting = moved.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(update_fields(&deleting), ["spec.runtimeId"]);
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

    fn cluster_rules(rules: Vec<PolicyRule>) -> RuntimeAccess {
        let mut ra = pods_reader();
        ra.spec.role = None;
        ra.spec.cluster_role = Some(ClusterRoleSpec { rules });
        ra
    }

    /// The messages of the violations at `field`.
    fn messages_at(ra: &RuntimeAccess, policy: &AccessPolicy, field: &str) -> Vec<String> {
        validate_runtime_access(ra, policy)
            .violations
            .into_iter()
            .filter(|v| v.field == field)
            .map(|v| v.message)
            .collect()
    }

    #[test]
    fn wildcards_are_refused_in_every_list() {
        let mut urls = rule(&[], &[], &["get"]);
        urls.resources = None;
        urls.api_groups = None;
        urls.non_resource_urls = Some(vec!["/api/*".into()]);
        let ra = cluster_rules(vec![
            rule(&["*"], &["pods"], &["get"]),
            rule(&[""], &["*"], &["get"]),
            rule(&[""], &["pods"], &["*"]),
            rule(&[""], &["pods/*"], &["get"]),
            urls,
        ]);
        for field in [
            "spec.clusterRole.rules[0].apiGroups",
            "spec.clusterRole.rules[1].resources",
            "spec.clusterRole.rules[2].verbs",
            "spec.clusterRole.rules[3].resources",
            "spec.clusterRole.rules[4].nonResourceURLs",
        ] {
            let got = messages_at(&ra, &AccessPolicy::default(), field);
            assert!(
                got.iter().any(|m| m.contains("wildcard")),
                "{field}: {got:?}"
            );
        }
    }

    #[test]
    fn verbs_that_escalate_or_approve_are_refused_in_roles_and_cluster_roles() {
        for verb in ["escalate", "bind", "impersonate", "approve", "sign"] {
            let ra = cluster_rules(vec![rule(
                &["rbac.authorization.k8s.io"],
                &["roles"],
                &["get", verb],
            )]);
            let got = messages_at(
                &ra,
                &AccessPolicy::default(),
                "spec.clusterRole.rules[0].verbs",
            );
            assert!(
                got.iter()
                    .any(|m| m.contains(verb) && m.contains("never grants")),
                "{verb}: {got:?}"
            );
            let mut ra = pods_reader();
            ra.spec.role.as_mut().unwrap().rules = vec![rule(&[""], &["users"], &[verb])];
            rejects(&ra, "spec.role.rules[0].verbs");
        }
    }

    #[test]
    fn resources_that_hand_out_other_identities_are_refused_whatever_the_verb() {
        for (group, resource) in [
            ("", "serviceaccounts/token"),
            ("", "pods/exec"),
            ("", "pods/attach"),
            ("", "pods/ephemeralcontainers"),
            ("", "nodes/proxy"),
            ("certificates.k8s.io", "certificatesigningrequests/approval"),
            ("certificates.k8s.io", "signers"),
        ] {
            let mut ra = pods_reader();
            ra.spec.role.as_mut().unwrap().rules =
                vec![rule(&[group], &["pods", resource], &["get", "create"])];
            let got = messages_at(
                &ra,
                &AccessPolicy::default(),
                "spec.role.rules[0].resources",
            );
            assert_eq!(got.len(), 1, "{resource}: {got:?}");
            assert!(got[0].contains(resource), "{resource}: {got:?}");
        }
    }

    #[test]
    fn secrets_are_refused_cluster_wide_and_allowed_in_one_namespace() {
        let ra = cluster_rules(vec![rule(&[""], &["configmaps", "secrets"], &["get"])]);
        let got = messages_at(
            &ra,
            &AccessPolicy::default(),
            "spec.clusterRole.rules[0].resources",
        );
        assert!(got.iter().any(|m| m.contains("spec.role")), "{got:?}");
        let mut ra = pods_reader();
        ra.spec.role.as_mut().unwrap().rules =
            vec![rule(&[""], &["secrets"], &["get", "list", "watch"])];
        assert_eq!(fields(&ra, &AccessPolicy::default()), Vec::<String>::new());
        // Writing Secrets mints ServiceAccount tokens: refused in one namespace too.
        for verb in WRITE_VERBS {
            for cluster_scoped in [false, true] {
                let got =
                    forbidden_grants(&rule(&[""], &["secrets"], &["get", verb]), cluster_scoped);
                assert_eq!(got.len(), 1, "{verb}: {got:?}");
                assert!(
                    got[0].message.contains(if cluster_scoped {
                        "spec.role"
                    } else {
                        "service-account-token"
                    }),
                    "{}",
                    got[0].message
                );
            }
        }
    }

    #[test]
    fn node_client_certificates_are_refused_whatever_the_verb() {
        for resource in [
            "certificatesigningrequests/nodeclient",
            "certificatesigningrequests/selfnodeclient",
        ] {
            for cluster_scoped in [false, true] {
                let got = forbidden_grants(
                    &rule(&["certificates.k8s.io"], &[resource], &["create"]),
                    cluster_scoped,
                );
                assert_eq!(got.len(), 1, "{resource}: {got:?}");
                assert!(got[0].message.contains("node client certificates"));
            }
        }
    }

    #[test]
    fn harmless_rules_have_no_forbidden_grants() {
        for cluster_scoped in [false, true] {
            assert_eq!(
                forbidden_grants(
                    &rule(
                        &["", "apps"],
                        &["pods", "pods/log", "deployments"],
                        &["get", "list", "watch"]
                    ),
                    cluster_scoped
                ),
                Vec::new()
            );
        }
    }

    #[test]
    fn cluster_wide_rules_may_not_write_what_takes_over_the_cluster() {
        for (group, resource) in [
            ("", "pods"),
            ("apps", "deployments"),
            ("apps", "daemonsets"),
            ("batch", "jobs"),
            ("batch", "cronjobs"),
            (
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
            ),
            (
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
            ),
            ("apiregistration.k8s.io", "apiservices"),
            ("rbac.authorization.k8s.io", "clusterrolebindings"),
            ("rbac.authorization.k8s.io", "rolebindings"),
            ("rbac.authorization.k8s.io", "clusterroles"),
            ("authentication.gardener.cloud", "openidconnects"),
            ("certificates.k8s.io", "certificatesigningrequests"),
            ("apiextensions.k8s.io", "customresourcedefinitions"),
            ("", "namespaces"),
            ("", "persistentvolumes"),
        ] {
            for verb in WRITE_VERBS {
                let got = forbidden_grants(&rule(&[group], &[resource], &["get", verb]), true);
                assert_eq!(got.len(), 1, "{verb} {resource}: {got:?}");
                assert_eq!(got[0].list, "resources");
                assert!(got[0].message.contains("spec.role"), "{}", got[0].message);
                // In one namespace (spec.role) a write stays the requester's choice, but for
                // the namespace's RBAC objects and the Namespace itself.
                if !matches!(resource, "rolebindings" | "namespaces") {
                    assert_eq!(
                        forbidden_grants(&rule(&[group], &[resource], &[verb]), false),
                        Vec::new()
                    );
                }
            }
            let read = rule(&[group], &[resource], &["get", "list", "watch"]);
            assert_eq!(forbidden_grants(&read, true), Vec::new(), "{resource}");
        }
        // Custom verbs and non-resource writes cluster-wide; tunnels to any pod.
        for (verbs, resources, urls) in [
            (&["escalate-ish"][..], &["widgets"][..], &[][..]),
            (&["put"][..], &[][..], &["/livez"][..]),
        ] {
            let r = PolicyRule {
                verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
                resources: (!resources.is_empty())
                    .then(|| resources.iter().map(|v| (*v).to_owned()).collect()),
                non_resource_urls: (!urls.is_empty())
                    .then(|| urls.iter().map(|v| (*v).to_owned()).collect()),
                api_groups: (!resources.is_empty()).then(|| vec!["example.com".to_owned()]),
                ..Default::default()
            };
            assert_eq!(forbidden_grants(&r, true).len(), 1, "{verbs:?}");
        }
        for tunnel in ["pods/portforward", "pods/proxy", "services/proxy"] {
            assert_eq!(
                forbidden_grants(&rule(&[""], &[tunnel], &["get"]), true).len(),
                1
            );
            assert_eq!(
                forbidden_grants(&rule(&[""], &[tunnel], &["get"]), false),
                Vec::new()
            );
        }
        // Any other cluster-wide write too: leader leases, API priority, DNS config maps, an
        // add-on's resources.
        for (group, resource) in [
            ("coordination.k8s.io", "leases"),
            ("flowcontrol.apiserver.k8s.io", "flowschemas"),
            ("", "configmaps"),
            ("", "nodes"),
            ("networking.istio.io", "envoyfilters"),
        ] {
            let got = forbidden_grants(&rule(&[group], &[resource], &["patch"]), true);
            assert_eq!(got.len(), 1, "{resource}: {got:?}");
            assert!(
                got[0].message.contains("reaches every namespace"),
                "{}",
                got[0].message
            );
            assert_eq!(
                forbidden_grants(&rule(&[group], &[resource], &["patch"]), false),
                Vec::new()
            );
        }
    }

    #[test]
    fn a_namespaced_role_may_not_write_its_namespace() {
        for resource in NAMESPACE_ITSELF {
            for verb in WRITE_VERBS {
                let got = forbidden_grants(&rule(&[""], &[resource], &[verb]), false);
                assert_eq!(got.len(), 1, "{verb} {resource}: {got:?}");
                assert!(
                    got[0].message.contains("Pod Security labels"),
                    "{}",
                    got[0].message
                );
            }
        }
        let read = rule(&[""], &["namespaces"], &["get", "list", "watch"]);
        assert_eq!(forbidden_grants(&read, false), Vec::new());
    }

    #[test]
    fn a_namespaced_role_may_not_write_the_namespaces_rbac() {
        for resource in ["roles", "rolebindings"] {
            for verb in WRITE_VERBS {
                let got = forbidden_grants(
                    &rule(&["rbac.authorization.k8s.io"], &[resource], &[verb]),
                    false,
                );
                assert_eq!(got.len(), 1, "{verb} {resource}: {got:?}");
                assert!(
                    got[0].message.contains("after the token expires"),
                    "{}",
                    got[0].message
                );
            }
            let read = rule(
                &["rbac.authorization.k8s.io"],
                &[resource],
                &["get", "list"],
            );
            assert_eq!(forbidden_grants(&read, false), Vec::new());
        }
    }

    #[test]
    fn a_namespaced_role_may_not_redirect_traffic_beyond_its_namespace() {
        for (group, resource, cve) in [
            ("", "services/status", "CVE-2020-8554"),
            ("", "pods/status", "CVE-2021-25740"),
            ("", "endpoints", "CVE-2021-25740"),
            ("discovery.k8s.io", "endpointslices", "CVE-2021-25740"),
            (
                "networking.istio.io",
                "virtualservices",
                "every Istio sidecar",
            ),
            ("networking.istio.io", "serviceentries", "every sidecar"),
            (
                "networking.istio.io",
                "gateways",
                "shared Istio ingress gateway",
            ),
        ] {
            for verb in WRITE_VERBS {
                let got = forbidden_grants(&rule(&[group], &[resource], &[verb]), false);
                assert_eq!(got.len(), 1, "{verb} {resource}: {got:?}");
                assert_eq!(got[0].list, "resources");
                assert!(
                    got[0].message.contains(cve)
                        && got[0].message.contains("only get, list and watch"),
                    "{}",
                    got[0].message
                );
            }
            let read = rule(&[group], &[resource], &["get", "list", "watch"]);
            assert_eq!(forbidden_grants(&read, false), Vec::new());
        }
        // Services themselves stay grantable: the controller serves them where the cluster
        // refuses external IPs.
        let services = rule(&[""], &["services"], &["get", "create", "patch", "delete"]);
        assert_eq!(forbidden_grants(&services, false), Vec::new());
    }

    #[test]
    fn no_rule_reads_the_api_server_s_logs_or_debugging_handlers() {
        let urls = |paths: &[&str]| PolicyRule {
            non_resource_urls: Some(paths.iter().map(|p| (*p).to_owned()).collect()),
            verbs: vec!["get".to_owned()],
            ..PolicyRule::default()
        };
        for refused in [
            "/logs",
            "/logs/",
            "/logs/kube-apiserver.log",
            "/debug/pprof/heap",
            "/debug",
        ] {
            let got = forbidden_grants(&urls(&[refused]), true);
            assert_eq!(got.len(), 1, "{refused}: {got:?}");
            assert_eq!(got[0].list, "nonResourceURLs");
        }
        assert_eq!(
            forbidden_grants(
                &urls(&["/healthz", "/version", "/metrics", "/logsx", "/debugging"]),
                true
            ),
            Vec::new()
        );
    }

    #[test]
    fn service_writes_of_the_namespaced_role_are_found() {
        let mut ra = pods_reader();
        assert_eq!(service_writes(&ra), None);
        let role = ra.spec.role.as_mut().expect("role");
        role.rules
            .push(rule(&[""], &["services"], &["get", "list", "delete"]));
        assert_eq!(
            service_writes(&ra),
            None,
            "reads and deletes redirect nothing"
        );
        for verb in ["create", "update", "patch"] {
            let mut ra = ra.clone();
            let role = ra.spec.role.as_mut().expect("role");
            role.rules
                .push(rule(&[""], &["configmaps", "services"], &[verb]));
            let namespace = role.namespace.clone();
            assert_eq!(service_writes(&ra), Some(namespace.as_str()), "{verb}");
        }
    }

    #[test]
    fn system_and_configured_namespaces_are_refused_everywhere() {
        let policy = AccessPolicy {
            protected_namespaces: vec!["monitoring".into()],
            ..Default::default()
        };
        for ns in [
            "kube-system",
            "kube-public",
            "garden",
            "garden-kyma",
            "kyma-system",
            "istio-system",
            "monitoring",
        ] {
            let mut ra = pods_reader();
            ra.spec.service_account.namespace = ns.into();
            ra.spec.role.as_mut().unwrap().namespace = ns.into();
            let got = fields(&ra, &policy);
            assert!(
                got.contains(&"spec.serviceAccount.namespace".to_owned()),
                "{ns}: {got:?}"
            );
            assert!(
                got.contains(&"spec.role.namespace".to_owned()),
                "{ns}: {got:?}"
            );
            let mut ra = pods_reader();
            ra.spec.role = None;
            ra.spec.role_ref = Some(ExistingRoleRef {
                kind: RoleKind::ClusterRole,
                name: "view".into(),
                namespace: Some(ns.into()),
            });
            let open = AccessPolicy {
                allowed_role_refs: vec!["ClusterRole/view".parse().unwrap()],
                ..policy.clone()
            };
            assert_eq!(
                fields(&ra, &open),
                vec!["spec.roleRef.namespace".to_owned()],
                "{ns}"
            );
        }
        let mut ra = pods_reader();
        ra.spec.service_account.namespace = "monitoring".into();
        assert!(
            validate_runtime_access(&ra, &AccessPolicy::default()).is_allowed(),
            "only when configured"
        );
        ra.spec.service_account.namespace = "kube".into();
        assert!(
            validate_runtime_access(&ra, &policy).is_allowed(),
            "kube-* needs the dash"
        );
    }

    #[test]
    fn role_refs_only_from_the_allow_list() {
        let mut ra = pods_reader();
        ra.spec.role = None;
        ra.spec.role_ref = Some(ExistingRoleRef {
            kind: RoleKind::ClusterRole,
            name: "view".into(),
            namespace: None,
        });
        let got = messages_at(&ra, &AccessPolicy::default(), "spec.roleRef");
        assert!(
            got.iter()
                .any(|m| m.contains("ClusterRole/view") && m.contains("none is listed")),
            "{got:?}"
        );
        let policy = AccessPolicy {
            allowed_role_refs: vec![
                "ClusterRole/view".parse().unwrap(),
                "Role/apps/reader".parse().unwrap(),
            ],
            ..Default::default()
        };
        assert!(validate_runtime_access(&ra, &policy).is_allowed());
        ra.spec.role_ref = Some(ExistingRoleRef {
            kind: RoleKind::ClusterRole,
            name: "cluster-admin".into(),
            namespace: None,
        });
        rejects(&ra, "spec.roleRef");
        assert!(!validate_runtime_access(&ra, &policy).is_allowed());
        ra.spec.role_ref = Some(ExistingRoleRef {
            kind: RoleKind::Role,
            name: "reader".into(),
            namespace: Some("apps".into()),
        });
        assert!(validate_runtime_access(&ra, &policy).is_allowed());
        ra.spec.role_ref = Some(ExistingRoleRef {
            kind: RoleKind::Role,
            name: "reader".into(),
            namespace: Some("other".into()),
        });
        assert!(
            !validate_runtime_access(&ra, &policy).is_allowed(),
            "a Role is allowed in its namespace only"
        );
        ra.spec.role_ref = Some(ExistingRoleRef {
            kind: RoleKind::ClusterRole,
            name: "reader".into(),
            namespace: Some("apps".into()),
        });
        assert!(
            !validate_runtime_access(&ra, &policy).is_allowed(),
            "kinds are not mixed up"
        );
    }

    /// A role beyond what rules may grant (cluster-admin for the component that installs
    /// modules) is allowed for that component's requests only: by the requester the webhook
    /// recorded, not by a name the request chooses.
    #[test]
    fn a_role_listed_for_one_requester_is_refused_to_others() {
        let klm = "system:serviceaccount:kcp-system:lifecycle-manager";
        let policy = AccessPolicy {
            allowed_role_refs: vec![
                format!("ClusterRole/cluster-admin={klm}").parse().unwrap(),
                "ClusterRole/view".parse().unwrap(),
            ],
            ..Default::default()
        };
        let mut ra = pods_reader();
        ra.spec.role = None;
        ra.spec.role_ref = Some(ExistingRoleRef {
            kind: RoleKind::ClusterRole,
            name: "cluster-admin".into(),
            namespace: None,
        });
        let got = messages_at(&ra, &policy, "spec.roleRef");
        assert!(
            got.iter()
                .any(|m| m.contains(klm) && m.contains("nobody known")),
            "no requester recorded: refused, naming who may: {got:?}"
        );
        stamp_requester(&mut ra, None, "system:serviceaccount:kcp-system:keb");
        let got = messages_at(&ra, &policy, "spec.roleRef");
        assert!(
            got.iter()
                .any(|m| m.contains(klm) && m.contains("system:serviceaccount:kcp-system:keb")),
            "{got:?}"
        );
        let mut by_klm = pods_reader();
        by_klm.spec = ra.spec.clone();
        stamp_requester(&mut by_klm, None, klm);
        assert!(validate_runtime_access(&by_klm, &policy).is_allowed());
        // An entry without a requester stays open to all.
        ra.spec.role_ref = Some(ExistingRoleRef {
            kind: RoleKind::ClusterRole,
            name: "view".into(),
            namespace: None,
        });
        assert!(validate_runtime_access(&ra, &policy).is_allowed());
    }

    #[test]
    fn allowed_role_refs_parse_and_print_alike() {
        for s in [
            "ClusterRole/view",
            "Role/apps/reader",
            "ClusterRole/system:aggregate-to-view",
            "ClusterRole/cluster-admin=system:serviceaccount:kcp-system:lifecycle-manager",
            "Role/apps/reader=alice@example.com",
        ] {
            let parsed: AllowedRoleRef = s.parse().unwrap();
            assert_eq!(parsed.to_string(), s);
        }
        for bad in [
            "view",
            "ClusterRole/",
            "Role/apps",
            "Role/Apps/x",
            "Secret/x",
            "ClusterRole/a/b",
            "ClusterRole/view=",
            "=alice",
        ] {
            let err = bad.parse::<AllowedRoleRef>().unwrap_err();
            assert!(err.contains("ClusterRole/<name>"), "{bad}: {err}");
        }
    }

    #[test]
    fn workload_writes_of_the_namespaced_role_are_found() {
        let rule = |resources: &[&str], verbs: &[&str]| PolicyRule {
            api_groups: Some(vec!["".into(), "apps".into(), "batch".into()]),
            resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            ..Default::default()
        };
        let mut ra = pods_reader();
        assert_eq!(workload_writes(&ra), None, "reads only");
        let role = ra.spec.role.as_mut().expect("a role");
        role.rules = vec![
            rule(&["configmaps"], &["create"]),
            rule(&["pods"], &["get", "delete"]),
            rule(&["cronjobs"], &["list", "patch"]),
        ];
        let namespace = role.namespace.clone();
        assert_eq!(workload_writes(&ra), Some((namespace.as_str(), "cronjobs")));
        for resource in [
            "pods",
            "pods/ephemeralcontainers",
            "deployments",
            "daemonsets",
            "controllerrevisions",
        ] {
            ra.spec.role.as_mut().expect("a role").rules = vec![rule(&[resource], &["update"])];
            assert_eq!(workload_writes(&ra).map(|(_, r)| r), Some(resource));
        }
        // A cluster-wide rule is refused at admission for these writes already.
        ra.spec.role = None;
        assert_eq!(workload_writes(&ra), None);
    }

    /// A token that may run Pods in its account's namespace could start one as that account,
    /// which keeps the account's rights after a revocation.
    #[test]
    fn workload_writes_in_the_account_s_own_namespace_are_refused() {
        let mut ra = pods_reader();
        ra.spec.role.as_mut().expect("a role").rules =
            vec![rule(&["apps"], &["deployments"], &["create"])];
        rejects(&ra, "spec.role.namespace");
        let message = validate_runtime_access(&ra, &AccessPolicy::default())
            .violations
            .into_iter()
            .find(|v| v.field == "spec.role.namespace")
            .map(|v| v.message)
            .unwrap_or_default();
        assert!(message.contains("\"deployments\""), "{message}");
        // The same writes for an account kept elsewhere.
        ra.spec.service_account.namespace = "kim-access".into();
        assert_eq!(fields(&ra, &AccessPolicy::default()), Vec::<String>::new());
    }

    /// A token that may change its own ServiceAccount could remove the request's UID label or
    /// set a finalizer, so that a revocation no longer ends it.
    #[test]
    fn changes_of_service_accounts_in_the_account_s_own_namespace_are_refused() {
        let mut ra = pods_reader();
        let reads = rule(&[""], &["pods"], &["get"]);
        for verb in ["patch", "update"] {
            ra.spec.role.as_mut().expect("a role").rules =
                vec![reads.clone(), rule(&[""], &["serviceaccounts"], &[verb])];
            rejects(&ra, "spec.role.rules[1]");
        }
        let message = validate_runtime_access(&ra, &AccessPolicy::default())
            .violations
            .into_iter()
            .find(|v| v.field == "spec.role.rules[1]")
            .map(|v| v.message)
            .unwrap_or_default();
        assert!(
            message.contains("the namespace of spec.serviceAccount"),
            "{message}"
        );
        // Making and deleting accounts changes none of an existing one's marks.
        ra.spec.role.as_mut().expect("a role").rules = vec![rule(
            &[""],
            &["serviceaccounts"],
            &["get", "list", "watch", "create", "delete"],
        )];
        assert_eq!(fields(&ra, &AccessPolicy::default()), Vec::<String>::new());
        // The same changes for an account kept elsewhere.
        ra.spec.role.as_mut().expect("a role").rules =
            vec![rule(&[""], &["serviceaccounts"], &["patch"])];
        ra.spec.service_account.namespace = "kim-access".into();
        assert_eq!(fields(&ra, &AccessPolicy::default()), Vec::<String>::new());
    }

    #[test]
    fn the_namespace_whose_accounts_a_role_reaches_is_found() {
        let mut ra = pods_reader();
        assert_eq!(reaches_accounts_in(&ra.spec), None, "reads only");
        for (resource, verb) in [("deployments", "create"), ("serviceaccounts", "patch")] {
            ra.spec.role.as_mut().expect("a role").rules =
                vec![rule(&["", "apps"], &[resource], &[verb])];
            assert_eq!(reaches_accounts_in(&ra.spec), Some(("apps", resource)));
        }
        ra.spec.role.as_mut().expect("a role").rules = vec![rule(
            &[""],
            &["serviceaccounts"],
            &["get", "create", "delete"],
        )];
        assert_eq!(reaches_accounts_in(&ra.spec), None);
    }

    #[test]
    fn the_admin_kubeconfig_secret_names_are_refused() {
        let mut ra = pods_reader();
        ra.spec.secret = Some(AccessSecretSpec {
            name: Some("kubeconfig-6a1c7f3e".into()),
            key: None,
        });
        rejects(&ra, "spec.secret.name");
        ra.spec.secret = Some(AccessSecretSpec {
            name: Some("klm-kubeconfig".into()),
            key: None,
        });
        assert!(validate_runtime_access(&ra, &AccessPolicy::default()).is_allowed());
        // The control plane's own Secrets cannot be claimed while they are absent.
        for name in [
            "gardener-credentials",
            "infrastructure-manager-webhook-cert",
        ] {
            ra.spec.secret = Some(AccessSecretSpec {
                name: Some(name.into()),
                key: None,
            });
            rejects(&ra, "spec.secret.name");
        }
    }

    #[test]
    fn an_update_that_keeps_the_spec_is_not_held_to_a_stricter_policy() {
        let mut stored = pods_reader();
        stored.spec.service_account.namespace = "kyma-system".into();
        let mut finalized = stored.clone();
        finalized.metadata.finalizers = Some(vec!["x".into()]);
        assert!(
            validate_runtime_access_update(&stored, &finalized, &AccessPolicy::default())
                .is_allowed()
        );
        let mut changed = finalized.clone();
        changed.spec.token_expiration_seconds = Some(1200);
        assert!(
            !validate_runtime_access_update(&stored, &changed, &AccessPolicy::default())
                .is_allowed()
        );
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
            "system:serviceaccount:apps:klm"
        );
    }

    #[test]
    fn the_requester_is_the_creating_user_and_stays_so() {
        let keb = "system:serviceaccount:kcp-system:klm";
        let policy = AccessPolicy::default();
        // CREATE: a value the request sends is replaced by the creating user.
        let mut created = pods_reader();
        created.metadata.annotations =
            Some([(ANNOTATION_REQUESTED_BY.to_owned(), "admin".to_owned())].into());
        assert!(!validate_requester_on_create(&created, keb).is_allowed());
        stamp_requester(&mut created, None, keb);
        assert_eq!(requested_by(&created), Some(keb));
        assert!(validate_requester_on_create(&created, keb).is_allowed());
        assert!(
            validate_requester_on_create(&pods_reader(), keb).is_allowed(),
            "without the mutating webhook: no stamp, no refusal"
        );

        // UPDATE: the stored value is kept, whoever updates and whatever they send.
        let mut updated = created.clone();
        updated.metadata.annotations = Some(
            [(
                ANNOTATION_REQUESTED_BY.to_owned(),
                "someone-else".to_owned(),
            )]
            .into(),
        );
        let refused = validate_runtime_access_update(&created, &updated, &policy);
        assert_eq!(
            refused
                .violations
                .iter()
                .map(|v| v.field.as_str())
                .collect::<Vec<_>>(),
            [REQUESTED_BY_FIELD]
        );
        stamp_requester(&mut updated, Some(&created), "someone-else");
        assert_eq!(
            requested_by(&updated),
            Some("someone-else"),
            "a change is left to the validation, which refuses it"
        );
        let mut replaced = created.clone();
        replaced.metadata.annotations = None;
        assert!(!validate_runtime_access_update(&created, &replaced, &policy).is_allowed());
        stamp_requester(&mut replaced, Some(&created), "someone-else");
        assert_eq!(requested_by(&replaced), Some(keb), "a replace gets it back");
        assert!(validate_runtime_access_update(&created, &replaced, &policy).is_allowed());

        // Stored before the stamp: the updater does not become the requester.
        let legacy = pods_reader();
        let mut untouched = legacy.clone();
        stamp_requester(&mut untouched, Some(&legacy), "intruder");
        assert_eq!(untouched, legacy);
        let mut claimed = legacy.clone();
        stamp_requester(&mut claimed, None, "intruder");
        assert!(!validate_runtime_access_update(&legacy, &claimed, &policy).is_allowed());
    }

    #[test]
    fn only_the_requester_changes_what_a_runtime_access_grants() {
        let klm = "system:serviceaccount:kcp-system:lifecycle-manager";
        let mut old = pods_reader();
        stamp_requester(&mut old, None, klm);
        let mut redirected = old.clone();
        redirected.spec.secret = Some(AccessSecretSpec {
            name: Some("mine-kubeconfig".into()),
            key: None,
        });
        let refused =
            validate_spec_change_by(&old, &redirected, "system:serviceaccount:kcp-system:keb");
        assert_eq!(
            refused
                .violations
                .iter()
                .map(|v| v.field.as_str())
                .collect::<Vec<_>>(),
            ["spec"]
        );
        assert!(refused.violations[0].message.contains(klm));
        assert!(validate_spec_change_by(&old, &redirected, klm).is_allowed());
        // Annotations (a revocation) by others pass; so does any change of an object stored
        // before requesters were recorded.
        let mut annotated = old.clone();
        annotated
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                "infrastructuremanager.kyma-project.io/revoke-tokens".into(),
                "true".into(),
            );
        assert!(validate_spec_change_by(&old, &annotated, "sre").is_allowed());
        let legacy = pods_reader();
        let mut changed = legacy.clone();
        changed.spec.token_expiration_seconds = Some(1200);
        assert!(validate_spec_change_by(&legacy, &changed, "anyone").is_allowed());
    }
}
