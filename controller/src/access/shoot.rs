//! The objects a RuntimeAccess needs in the shoot cluster: ServiceAccount, (Cluster)Role and
//! binding. Building them is pure; applying and deleting them is a thin async layer.

use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Service, ServiceAccount, ServicePort, ServiceSpec};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kim_shared::access::shoot_rbac_name;
use kim_shared::api::runtime_access::{RoleKind, RuntimeAccess, ShootObjectRef};
use kim_shared::names;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

/// Annotation on every object the controller creates in the shoot: `<kcp namespace>/<name>` of
/// the RuntimeAccess, so an auditor (and the cleanup) knows where it comes from.
pub const ANNOTATION_RUNTIME_ACCESS: &str = "infrastructuremanager.kyma-project.io/runtime-access";

/// Label on every object the controller creates in the shoot: the UID of the RuntimeAccess.
/// Tokens are issued only for a ServiceAccount with this label and the cleanup deletes only
/// objects with it, so a request can neither borrow nor remove what it did not create (a label
/// value cannot hold the `<namespace>/<name>` of the annotation; the UID is also unique over
/// time, so a later request of the same name does not inherit the objects).
pub const LABEL_RUNTIME_ACCESS_UID: &str =
    "infrastructuremanager.kyma-project.io/runtime-access-uid";

/// Field manager in the shoot cluster.
pub const FIELD_MANAGER: &str = "kim-runtime-access";

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The RBAC objects (not the ServiceAccount) a RuntimeAccess wants.
#[derive(Debug, Clone, PartialEq)]
pub enum RbacObject {
    /// A ClusterRole with the spec's rules.
    ClusterRole(ClusterRole),
    /// A Role with the spec's rules.
    Role(Role),
    /// A ClusterRoleBinding to the ServiceAccount.
    ClusterRoleBinding(ClusterRoleBinding),
    /// A RoleBinding to the ServiceAccount.
    RoleBinding(RoleBinding),
}

impl RbacObject {
    /// Kind, name and namespace, as recorded in the status.
    pub fn reference(&self) -> ShootObjectRef {
        let (kind, meta) = match self {
            RbacObject::ClusterRole(o) => ("ClusterRole", &o.metadata),
            RbacObject::Role(o) => ("Role", &o.metadata),
            RbacObject::ClusterRoleBinding(o) => ("ClusterRoleBinding", &o.metadata),
            RbacObject::RoleBinding(o) => ("RoleBinding", &o.metadata),
        };
        ShootObjectRef {
            kind: kind.to_owned(),
            name: meta.name.clone().unwrap_or_default(),
            namespace: meta.namespace.clone(),
        }
    }
}

/// `<kcp namespace>/<name>` of the request.
pub fn origin(ra: &RuntimeAccess) -> String {
    format!("{}/{}", ra.namespace().unwrap_or_default(), ra.name_any())
}

fn meta(ra: &RuntimeAccess, name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some(BTreeMap::from([
            (
                names::LABEL_MANAGED_BY.to_owned(),
                names::MANAGED_BY_INFRASTRUCTURE_MANAGER.to_owned(),
            ),
            (
                LABEL_RUNTIME_ACCESS_UID.to_owned(),
                ra.uid().unwrap_or_default(),
            ),
        ])),
        // Not who asked (`requested-by`): a KCP user's name is no business of the runtime's
        // owner, who reads these objects.
        annotations: Some(BTreeMap::from([(
            ANNOTATION_RUNTIME_ACCESS.to_owned(),
            origin(ra),
        )])),
        ..Default::default()
    }
}

/// The ServiceAccount to create when it does not exist.
pub fn service_account(ra: &RuntimeAccess) -> ServiceAccount {
    let sa = &ra.spec.service_account;
    ServiceAccount {
        metadata: meta(ra, &sa.name, Some(&sa.namespace)),
        ..Default::default()
    }
}

/// What `ra`'s spec makes in the runtime, by name: the ServiceAccount, and the role (when the
/// spec has rules) and binding of [`rbac_objects`].
pub fn spec_objects(ra: &RuntimeAccess) -> Vec<ShootObjectRef> {
    std::iter::once(account_reference(ra))
        .chain(rbac_objects(ra).iter().map(RbacObject::reference))
        .collect()
}

/// `spec.serviceAccount`, as recorded in the status.
pub fn account_reference(ra: &RuntimeAccess) -> ShootObjectRef {
    ShootObjectRef {
        kind: "ServiceAccount".to_owned(),
        name: ra.spec.service_account.name.clone(),
        namespace: Some(ra.spec.service_account.namespace.clone()),
    }
}

/// The role (when the spec has rules) and the binding, in apply order.
pub fn rbac_objects(ra: &RuntimeAccess) -> Vec<RbacObject> {
    let name = shoot_rbac_name(&ra.namespace().unwrap_or_default(), &ra.name_any());
    let sa = &ra.spec.service_account;
    let subjects = Some(vec![Subject {
        kind: "ServiceAccount".to_owned(),
        name: sa.name.clone(),
        namespace: Some(sa.namespace.clone()),
        api_group: None,
    }]);
    let role_ref = |kind: &str, role: &str| RoleRef {
        api_group: Some(RBAC_GROUP.to_owned()),
        kind: kind.to_owned(),
        name: role.to_owned(),
    };
    let mut out = Vec::new();
    if let Some(cr) = &ra.spec.cluster_role {
        out.push(RbacObject::ClusterRole(ClusterRole {
            metadata: meta(ra, &name, None),
            rules: Some(cr.rules.clone()),
            aggregation_rule: None,
        }));
        out.push(RbacObject::ClusterRoleBinding(ClusterRoleBinding {
            metadata: meta(ra, &name, None),
            role_ref: role_ref("ClusterRole", &name),
            subjects,
        }));
    } else if let Some(role) = &ra.spec.role {
        out.push(RbacObject::Role(Role {
            metadata: meta(ra, &name, Some(&role.namespace)),
            rules: Some(role.rules.clone()),
        }));
        out.push(RbacObject::RoleBinding(RoleBinding {
            metadata: meta(ra, &name, Some(&role.namespace)),
            role_ref: role_ref("Role", &name),
            subjects,
        }));
    } else if let Some(r) = &ra.spec.role_ref {
        let kind = match r.kind {
            RoleKind::ClusterRole => "ClusterRole",
            RoleKind::Role => "Role",
        };
        match &r.namespace {
            Some(ns) => out.push(RbacObject::RoleBinding(RoleBinding {
                metadata: meta(ra, &name, Some(ns)),
                role_ref: role_ref(kind, &r.name),
                subjects,
            })),
            None => out.push(RbacObject::ClusterRoleBinding(ClusterRoleBinding {
                metadata: meta(ra, &name, None),
                role_ref: role_ref(kind, &r.name),
                subjects,
            })),
        }
    }
    out
}

/// A fingerprint of everything a RuntimeAccess wants in the shoot (ServiceAccount, roles and
/// bindings, as built for the apply): equal fingerprints mean an apply would change nothing
/// that this controller sets. Stable across processes and versions (FNV-1a over the JSON of the
/// objects, not std's randomly keyed hasher); a change of the object-building code changes it
/// too, so a new controller version re-applies once.
pub fn fingerprint(ra: &RuntimeAccess) -> String {
    let mut docs = vec![serde_json::to_value(service_account(ra)).unwrap_or_default()];
    for obj in rbac_objects(ra) {
        let (kind, value) = match &obj {
            RbacObject::ClusterRole(o) => ("ClusterRole", serde_json::to_value(o)),
            RbacObject::Role(o) => ("Role", serde_json::to_value(o)),
            RbacObject::ClusterRoleBinding(o) => ("ClusterRoleBinding", serde_json::to_value(o)),
            RbacObject::RoleBinding(o) => ("RoleBinding", serde_json::to_value(o)),
        };
        docs.push(serde_json::json!({ "kind": kind, "object": value.unwrap_or_default() }));
    }
    let bytes = serde_json::to_vec(&docs).unwrap_or_default();
    // FNV-1a, 64 bit: 8 bytes are plenty to tell specs apart; a collision would only delay an
    // apply until the next token rotation (which always re-applies).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("fnv1a64:{hash:016x}")
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Whether an object in the shoot was created for this RuntimeAccess: it carries
/// [`LABEL_RUNTIME_ACCESS_UID`] with the request's UID. Pure.
pub fn created_by(labels: &BTreeMap<String, String>, ra: &RuntimeAccess) -> bool {
    match ra.uid() {
        Some(uid) if !uid.is_empty() => labels.get(LABEL_RUNTIME_ACCESS_UID) == Some(&uid),
        _ => false,
    }
}

/// The ServiceAccount of a request, checked to be one this request created. The only way to
/// [`request_token`]: a token is never issued for an account someone else made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedServiceAccount {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl OwnedServiceAccount {
    /// As recorded in the status.
    pub fn reference(&self) -> ShootObjectRef {
        ShootObjectRef {
            kind: "ServiceAccount".to_owned(),
            name: self.name.clone(),
            namespace: Some(self.namespace.clone()),
        }
    }
}

/// Why the ServiceAccount cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ServiceAccountError {
    /// The shoot API failed.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// It exists and this request did not create it.
    #[error(
        "ServiceAccount {namespace}/{name} exists in the runtime and was not created by this RuntimeAccess (no label {LABEL_RUNTIME_ACCESS_UID} with its UID); a RuntimeAccess only issues tokens for a ServiceAccount it creates: choose a name that does not exist"
    )]
    NotOwned {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// It is being deleted, held by finalizers: a token for it stops working a minute after
    /// its deletion, and a new account of the name can only be made once it is gone.
    #[error(
        "ServiceAccount {namespace}/{name} is being deleted and held by the finalizers {finalizers:?}: no token is issued for it, and it is made anew once they are removed (by whoever set them) and it is gone"
    )]
    BeingDeleted {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Its finalizers.
        finalizers: Vec<String>,
    },
    /// A binding this request did not make names it: its tokens would carry the binding's
    /// rights. Checked for a new account, and for one that carries this request's label (which
    /// whoever may patch ServiceAccounts in its namespace can give another request's account).
    #[error(
        "ServiceAccount {namespace}/{name} is a subject of {binding} in the runtime, which this RuntimeAccess did not create; its tokens would carry that binding's rights: choose another name"
    )]
    AlreadyBound {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// `ClusterRoleBinding/<name>` or `RoleBinding/<namespace>/<name>`.
        binding: String,
    },
}

/// Which subjects of a binding count in [`foreign_binding_of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subjects {
    /// The account by name, and the groups of all ServiceAccounts and of those of its
    /// namespace: what a new account of the name would get.
    WithGroups,
    /// The account by name only: what one account has that another of the request's would
    /// not (a group's rights come with any account, the request's own included).
    ByName,
    /// The account by name, in bindings another RuntimeAccess made (its UID label, another
    /// UID): read with a label selector, so cheap enough for every pass.
    ByNameOfOtherRequests,
}

/// A binding this request did not create (its UID label: a binding's labels can be trusted
/// where an account's cannot, because the API server lets only whoever holds the rights of its
/// role, or may `bind` it, change a binding) that would give its ServiceAccount rights, as
/// `ClusterRoleBinding/<name>` or `RoleBinding/<namespace>/<name>`: one whose subjects name the
/// account (as a ServiceAccount, or as the user `system:serviceaccount:<ns>:<name>` its token
/// authenticates as), or with [`Subjects::WithGroups`] the groups of all ServiceAccounts or of
/// those of its namespace. RoleBindings of every namespace count: one elsewhere gives rights
/// there. Kubernetes' own default bindings (label `kubernetes.io/bootstrapping=rbac-defaults`:
/// discovery for all ServiceAccounts) give every account the same, and are not counted.
pub async fn foreign_binding_of(
    shoot: &kube::Client,
    ra: &RuntimeAccess,
    counted: Subjects,
) -> Result<Option<String>, kube::Error> {
    let sa = &ra.spec.service_account;
    let user = format!("system:serviceaccount:{}:{}", sa.namespace, sa.name);
    let namespace_group = format!("system:serviceaccounts:{}", sa.namespace);
    // Kubernetes' defaults are skipped for the groups only: a label is no proof for a binding
    // that names this very account.
    let names_it = |subjects: Option<&Vec<Subject>>, binding_ns: &str, meta: &ObjectMeta| {
        let default = meta
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/bootstrapping"))
            .map(String::as_str)
            == Some("rbac-defaults");
        let labels = meta.labels.as_ref();
        let of_a_request = labels.is_some_and(|l| l.contains_key(LABEL_RUNTIME_ACCESS_UID));
        !created_by(labels.unwrap_or(&BTreeMap::new()), ra)
            && (counted != Subjects::ByNameOfOtherRequests || of_a_request)
            && subjects
                .into_iter()
                .flatten()
                .any(|s| match s.kind.as_str() {
                    "ServiceAccount" => {
                        s.name == sa.name
                            && s.namespace.as_deref().unwrap_or(binding_ns) == sa.namespace
                    }
                    "User" => s.name == user,
                    "Group" => {
                        counted == Subjects::WithGroups
                            && !default
                            && (s.name == "system:serviceaccounts" || s.name == namespace_group)
                    }
                    _ => false,
                })
    };
    let mut params = ListParams::default().limit(BINDINGS_PAGE);
    if counted == Subjects::ByNameOfOtherRequests {
        params = params.labels(LABEL_RUNTIME_ACCESS_UID);
    }
    if let Some(b) = first_in_pages(
        Api::<ClusterRoleBinding>::all(shoot.clone()),
        params.clone(),
        |b| names_it(b.subjects.as_ref(), "", &b.metadata),
    )
    .await?
    {
        return Ok(Some(format!("ClusterRoleBinding/{}", b.name_any())));
    }
    Ok(
        first_in_pages(Api::<RoleBinding>::all(shoot.clone()), params, |b| {
            names_it(
                b.subjects.as_ref(),
                &b.namespace().unwrap_or_default(),
                &b.metadata,
            )
        })
        .await?
        .map(|b| {
            format!(
                "RoleBinding/{}/{}",
                b.namespace().unwrap_or_default(),
                b.name_any()
            )
        }),
    )
}

/// The Pod Security level the runtime's apiserver enforces in `namespace` (its label
/// `pod-security.kubernetes.io/enforce`); `None` when unlabelled.
pub async fn pod_security_level(
    shoot: &kube::Client,
    namespace: &str,
) -> Result<Option<String>, kube::Error> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(shoot.clone());
    let ns = namespaces.get(namespace).await?;
    Ok(ns
        .labels()
        .get(kim_shared::access::LABEL_POD_SECURITY_ENFORCE)
        .cloned())
}

/// What the runtime's apiserver answers to a Service with an external IP in a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExternalIps {
    /// Refused, while the same Service without it is admitted.
    Refused,
    /// Admitted: a role there that writes Services could intercept the cluster's traffic for
    /// any address.
    Admitted,
    /// Both refused (the two answers): whether external IPs are refused cannot be told.
    Unclear(String, String),
}

/// An address of TEST-NET-1 (RFC 5737), reserved for documentation and routed nowhere.
const PROBE_EXTERNAL_IP: &str = "192.0.2.1";

/// Asks the runtime's apiserver, with server-side dry runs (nothing is stored, nothing
/// allocated), whether it admits a Service with an external IP in `namespace`: the answer of
/// whatever refuses them there (the `DenyServiceExternalIPs` admission plugin, a
/// ValidatingAdmissionPolicy, a policy webhook), which the API does not show otherwise. When
/// refused, a Service without it is tried as well, so a quota or a policy against every
/// Service is not taken for a refusal of external IPs.
pub async fn external_ips(
    shoot: &kube::Client,
    namespace: &str,
) -> Result<ExternalIps, kube::Error> {
    let services: Api<Service> = Api::namespaced(shoot.clone(), namespace);
    let dry_run = PostParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    let with_ip = services
        .create(&dry_run, &probe_service(Some(PROBE_EXTERNAL_IP)))
        .await;
    let Some(with_ip) = refusal(with_ip)? else {
        return Ok(ExternalIps::Admitted);
    };
    Ok(
        match refusal(services.create(&dry_run, &probe_service(None)).await)? {
            None => ExternalIps::Refused,
            Some(without) => ExternalIps::Unclear(with_ip, without),
        },
    )
}

/// `None` for an admitted Service, the message of a refusal at admission or validation
/// (400, 403, 422); any other error is the apiserver's.
fn refusal(answer: Result<Service, kube::Error>) -> Result<Option<String>, kube::Error> {
    match answer {
        Ok(_) => Ok(None),
        Err(e) if matches!(&e, kube::Error::Api(s) if matches!(s.code, 400 | 403 | 422)) => {
            Ok(Some(crate::runtime::classify::message(&e)))
        }
        Err(e) => Err(e),
    }
}

/// The Service of [`external_ips`]' dry runs.
fn probe_service(external_ip: Option<&str>) -> Service {
    Service {
        metadata: ObjectMeta {
            generate_name: Some("kim-external-ips-probe-".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                port: 80,
                ..ServicePort::default()
            }]),
            external_ips: external_ip.map(|ip| vec![ip.to_owned()]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// Objects per page when bindings are searched: each answer stays far below
/// [`crate::gardener::client::RUNTIME_RESPONSE_BYTES`] however many bindings a cluster has.
const BINDINGS_PAGE: u32 = 500;

/// The first object of `api` listed with `params` that `matches`, read page by page.
async fn first_in_pages<K>(
    api: Api<K>,
    mut params: ListParams,
    matches: impl Fn(&K) -> bool,
) -> Result<Option<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    loop {
        let page = api.list(&params).await?;
        let next = page.metadata.continue_.clone().filter(|t| !t.is_empty());
        if let Some(found) = page.items.into_iter().find(|o| matches(o)) {
            return Ok(Some(found));
        }
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(None),
        }
    }
}

/// Ensures the ServiceAccount exists and was created by this request, and returns it with
/// whether it was made anew (every token issued before is dead):
/// - missing: created, unless a binding this request did not make names it or a group it would
///   be in ([`Subjects::WithGroups`]: a new account would get that binding's rights);
/// - there without this request's marks (its UID label, or those of an account made before
///   that label): refused;
/// - there with them while the request was `served` with an account of that name: used, unless
///   a binding another RuntimeAccess made names it ([`Subjects::ByNameOfOtherRequests`]: the
///   record is by name, so the account may since have been handed to another request, made
///   anew by it and given this request's marks);
/// - there with them while it was not: whoever may patch ServiceAccounts in the namespace can
///   give an account these marks, so it may be another request's. Refused when a binding this
///   request did not make names it ([`Subjects::ByName`]: that request's rights); otherwise
///   deleted and created anew: a token issued for it before (to another request whose account
///   it was) is bound to the old UID and stops working.
///
/// Only the holder of an account among the requests of a runtime gets here
/// ([`super::ByRuntime::account_holder`]), one pass at a time (`AccountPasses`). These checks
/// are what holds for one request after another, and for passes one after the other where the
/// KCP cannot tell that two requests name one account (two runtime IDs whose admin kubeconfigs
/// reach one cluster); passes of two such requests at once are not kept apart.
pub async fn ensure_service_account(
    shoot: &kube::Client,
    ra: &RuntimeAccess,
    served: bool,
) -> Result<(OwnedServiceAccount, bool), ServiceAccountError> {
    let sa = &ra.spec.service_account;
    let api: Api<ServiceAccount> = Api::namespaced(shoot.clone(), &sa.namespace);
    let owned = OwnedServiceAccount {
        namespace: sa.namespace.clone(),
        name: sa.name.clone(),
    };
    let not_owned = || ServiceAccountError::NotOwned {
        namespace: sa.namespace.clone(),
        name: sa.name.clone(),
    };
    let unbound = |subjects| async move {
        match foreign_binding_of(shoot, ra, subjects).await? {
            Some(binding) => Err(ServiceAccountError::AlreadyBound {
                namespace: sa.namespace.clone(),
                name: sa.name.clone(),
                binding,
            }),
            None => Ok(()),
        }
    };
    let create = || async {
        unbound(Subjects::WithGroups).await?;
        match api
            .create(&PostParams::default(), &service_account(ra))
            .await
        {
            Ok(_) => Ok(None),
            // Created concurrently: ours only if it carries our marks. Gone again meanwhile: a
            // race, tried again.
            Err(e) if is_status(&e, 409) => match api.get_opt(&sa.name).await? {
                Some(existing) => Ok(Some(existing)),
                None => Err(ServiceAccountError::Api(e)),
            },
            Err(e) => Err(ServiceAccountError::Api(e)),
        }
    };
    let existing = match api.get_opt(&sa.name).await? {
        Some(existing) => existing,
        None => match create().await? {
            None => return Ok((owned, true)),
            Some(existing) => existing,
        },
    };
    // Whoever's it is, an account being deleted goes away (or stays, held): neither is a
    // refusal.
    if existing.metadata.deletion_timestamp.is_some() {
        return Err(being_deleted(&existing));
    }
    let labelled = created_by(existing.labels(), ra);
    if !labelled && !created_before_the_uid_label(&existing, ra) {
        return Err(not_owned());
    }
    if !served {
        unbound(Subjects::ByName).await?;
        let dp = crate::finalizing::only_uid(existing.metadata.uid.clone());
        match api.delete(&sa.name, &dp).await {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) => {}
            // 409: replaced meanwhile by an account this pass has not looked at: the next pass
            // looks at it.
            Err(e) => return Err(e.into()),
        }
        return match create().await? {
            None => Ok((owned, true)),
            Some(held) if held.metadata.deletion_timestamp.is_some() => Err(being_deleted(&held)),
            // Made again by someone else.
            Some(_) => Err(not_owned()),
        };
    }
    unbound(Subjects::ByNameOfOtherRequests).await?;
    if !labelled {
        // Made by this request before objects carried the UID label: label it, conditional on
        // the version that was checked.
        let patch = serde_json::json!({"metadata": {
            "resourceVersion": existing.resource_version(),
            "labels": {LABEL_RUNTIME_ACCESS_UID: ra.uid().unwrap_or_default()},
        }});
        api.patch(&sa.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok((owned, false))
}

fn being_deleted(sa: &ServiceAccount) -> ServiceAccountError {
    ServiceAccountError::BeingDeleted {
        namespace: sa.namespace().unwrap_or_default(),
        name: sa.name_any(),
        finalizers: sa.finalizers().to_vec(),
    }
}

/// A ServiceAccount this controller created for `ra` before it labelled objects with the
/// request's UID, by its marks: no UID label at all, our managed-by label and the request's
/// origin annotation. Whoever may patch ServiceAccounts can set these marks too, so
/// [`ensure_service_account`] trusts them only for a request served with the account. Pure.
pub fn created_before_the_uid_label(sa: &impl kube::Resource, ra: &RuntimeAccess) -> bool {
    let labels = sa.labels();
    !labels.contains_key(LABEL_RUNTIME_ACCESS_UID)
        && labels.get(names::LABEL_MANAGED_BY).map(String::as_str)
            == Some(names::MANAGED_BY_INFRASTRUCTURE_MANAGER)
        && sa.annotations().get(ANNOTATION_RUNTIME_ACCESS) == Some(&origin(ra))
}

/// Applies one RBAC object (server-side apply). A binding whose roleRef changed is recreated,
/// because Kubernetes forbids changing a roleRef.
pub async fn apply_rbac(shoot: &kube::Client, obj: &RbacObject) -> Result<(), RbacApplyError> {
    let reference = obj.reference();
    match obj {
        RbacObject::ClusterRole(o) => {
            // An aggregation rule makes the controller-manager fill in the rules from other
            // roles: whoever added it would decide what the request grants.
            let aggregated = |live: &ClusterRole| live.aggregation_rule.is_some();
            apply_checked(Api::all(shoot.clone()), o, &reference, aggregated, false).await
        }
        RbacObject::Role(o) => {
            let api = Api::<Role>::namespaced(shoot.clone(), &ns(&o.metadata));
            apply_checked(api, o, &reference, |_| false, false).await
        }
        RbacObject::ClusterRoleBinding(o) => {
            apply_checked(Api::all(shoot.clone()), o, &reference, |_| false, true).await
        }
        RbacObject::RoleBinding(o) => {
            let api = Api::<RoleBinding>::namespaced(shoot.clone(), &ns(&o.metadata));
            apply_checked(api, o, &reference, |_| false, true).await
        }
    }
}

/// Creates `desired` when it does not exist (a create fails if someone made one meanwhile; the
/// next pass looks again), else applies it conditional on the version read, and only over an
/// object a request of this name made that `refused` does not refuse: a forced apply would
/// take over whatever it names. A binding whose roleRef changed (Kubernetes forbids changing
/// one) is deleted, conditional on its UID, and created anew.
async fn apply_checked<K>(
    api: Api<K>,
    desired: &K,
    reference: &ShootObjectRef,
    refused: impl Fn(&K) -> bool,
    binding: bool,
) -> Result<(), RbacApplyError>
where
    K: kube::Resource + serde::Serialize + serde::de::DeserializeOwned + Clone + std::fmt::Debug,
{
    let name = name_of(desired.meta());
    let create = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let Some(live) = api.get_opt(&name).await? else {
        api.create(&create, desired).await?;
        return Ok(());
    };
    if !made_by_a_request_of_this_name(live.meta(), desired.meta()) {
        return Err(RbacApplyError::NotOwned {
            reference: reference.clone(),
        });
    }
    if refused(&live) {
        return Err(RbacApplyError::Aggregated {
            reference: reference.clone(),
        });
    }
    let mut body = desired.clone();
    body.meta_mut().resource_version = live.meta().resource_version.clone();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api.patch(&name, &params, &Patch::Apply(&body)).await {
        Ok(_) => Ok(()),
        Err(e) if binding && is_status(&e, 422) => {
            let dp = crate::finalizing::only_uid(live.meta().uid.clone());
            api.delete(&name, &dp).await?;
            api.create(&create, desired).await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Why [`apply_rbac`] did not apply.
#[derive(Debug, thiserror::Error)]
pub enum RbacApplyError {
    /// The runtime's API server refused or did not answer.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// An object of that name exists that no RuntimeAccess of this name made.
    #[error(
        "{} {} exists in the runtime and was not created by this RuntimeAccess (no label {LABEL_RUNTIME_ACCESS_UID} with its UID); the controller changes only roles and bindings it created: delete it, or give the RuntimeAccess another name", reference.kind, reference.name
    )]
    NotOwned {
        /// The object.
        reference: ShootObjectRef,
    },
    /// Our ClusterRole carries an aggregation rule someone added.
    #[error(
        "{} {} has an aggregationRule, which this controller never sets: its rules would come from other roles; remove the aggregationRule or delete the role", reference.kind, reference.name
    )]
    Aggregated {
        /// The object.
        reference: ShootObjectRef,
    },
}

fn name_of(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn ns(meta: &ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_default()
}

/// Whether `live` was made for the RuntimeAccess `desired` is built for: this one (its UID
/// label), or an earlier one of the same name (our managed-by label and the same origin
/// annotation). Pure.
fn made_by_a_request_of_this_name(live: &ObjectMeta, desired: &ObjectMeta) -> bool {
    let label = |m: &ObjectMeta, k: &str| m.labels.as_ref().and_then(|l| l.get(k)).cloned();
    let annotation =
        |m: &ObjectMeta, k: &str| m.annotations.as_ref().and_then(|a| a.get(k)).cloned();
    let this_one = label(desired, LABEL_RUNTIME_ACCESS_UID).is_some()
        && label(live, LABEL_RUNTIME_ACCESS_UID) == label(desired, LABEL_RUNTIME_ACCESS_UID);
    let same_origin = label(live, names::LABEL_MANAGED_BY).as_deref()
        == Some(names::MANAGED_BY_INFRASTRUCTURE_MANAGER)
        && annotation(desired, ANNOTATION_RUNTIME_ACCESS).is_some()
        && annotation(live, ANNOTATION_RUNTIME_ACCESS)
            == annotation(desired, ANNOTATION_RUNTIME_ACCESS);
    this_one || same_origin
}

/// What [`delete`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deletion {
    /// Deleted (or already being deleted).
    Deleted,
    /// Not there.
    Absent,
    /// There, but without this request's label: left alone.
    NotOwned,
    /// A ServiceAccount a binding names that makes it another's (`ClusterRoleBinding/<name>`
    /// or `RoleBinding/<namespace>/<name>`): left alone.
    Bound(String),
    /// A ServiceAccount of another UID than the one the request's tokens were issued for, and
    /// without the request's marks (or named by another's binding): left alone, and those
    /// tokens are dead (the API server takes a token only while the account of its name has
    /// the UID it was issued for). One of another UID with the marks is deleted as before.
    Replaced,
}

/// Deletes one object, but only when it carries this request's [`LABEL_RUNTIME_ACCESS_UID`]:
/// the list of objects comes from the status and a KCP Secret annotation, which others can
/// write, so it is a hint, not a licence. The delete is conditional on the UID that was read,
/// so an object replaced in between is not deleted either. A ServiceAccount only when it is
/// the request's `spec.serviceAccount` and either, for a request `served` with it, has the UID
/// `issued_for` (the account the request's tokens authenticate as,
/// [`super::token::ANNOTATION_SERVICE_ACCOUNT_UID`]: its labels and the bindings that name it
/// may have changed since, it is deleted all the same), or carries the label and, unless the
/// request was `served` with it (see [`ensure_service_account`]), no binding another request
/// made names it.
pub async fn delete(
    shoot: &kube::Client,
    ra: &RuntimeAccess,
    obj: &ShootObjectRef,
    served: bool,
    issued_for: Option<&str>,
) -> Result<Deletion, kube::Error> {
    let ns = obj.namespace.clone().unwrap_or_default();
    match obj.kind.as_str() {
        "ServiceAccount" => {
            // A request only ever makes the account of its `spec.serviceAccount`, which never
            // changes.
            let account = &ra.spec.service_account;
            if obj.name != account.name || ns != account.namespace {
                return Ok(Deletion::NotOwned);
            }
            // The record is the controller's own only for a request it served with the
            // account (its status, which only the controller writes, lists it): a KCP Secret
            // with the request's marks and any UID can be made by whoever may create Secrets.
            let Some(uid) = issued_for.filter(|_| served) else {
                return delete_marked_account(shoot, ra, &obj.name, served).await;
            };
            let accounts = Api::<ServiceAccount>::namespaced(shoot.clone(), &ns);
            let Some(live) = accounts.get_metadata_opt(&obj.name).await? else {
                return Ok(Deletion::Absent);
            };
            if live.metadata.uid.as_deref() != Some(uid) {
                return Ok(
                    match delete_marked_account(shoot, ra, &obj.name, served).await? {
                        Deletion::NotOwned | Deletion::Bound(_) => Deletion::Replaced,
                        outcome => outcome,
                    },
                );
            }
            let dp = crate::finalizing::only_uid(Some(uid.to_owned()));
            match accounts.delete(&obj.name, &dp).await {
                Ok(_) => Ok(Deletion::Deleted),
                Err(e) if is_status(&e, 404) => Ok(Deletion::Absent),
                // Another account of the name since the read: the tokens' is gone.
                Err(e) if is_status(&e, 409) => Ok(Deletion::Replaced),
                Err(e) => Err(e),
            }
        }
        "ClusterRole" => {
            delete_owned(Api::<ClusterRole>::all(shoot.clone()), ra, &obj.name, false).await
        }
        "ClusterRoleBinding" => {
            delete_owned(
                Api::<ClusterRoleBinding>::all(shoot.clone()),
                ra,
                &obj.name,
                false,
            )
            .await
        }
        "Role" => {
            delete_owned(
                Api::<Role>::namespaced(shoot.clone(), &ns),
                ra,
                &obj.name,
                false,
            )
            .await
        }
        "RoleBinding" => {
            delete_owned(
                Api::<RoleBinding>::namespaced(shoot.clone(), &ns),
                ra,
                &obj.name,
                false,
            )
            .await
        }
        // Nothing else is ever created; an unknown kind in the record is not ours to delete.
        _ => Ok(Deletion::NotOwned),
    }
}

/// Deletes the request's account `name` by its marks: its marks can be another request's
/// account's, relabelled, so one that a binding another RuntimeAccess made names is that
/// request's. For a request never served with it, any binding it did not make counts; for one
/// `served` with it, only another request's (someone may have bound more to its own account
/// since: it goes at a revocation all the same). An account made before the UID label, with
/// the request's marks, is its own when the request was served with it (as
/// [`ensure_service_account`] counts it).
async fn delete_marked_account(
    shoot: &kube::Client,
    ra: &RuntimeAccess,
    name: &str,
    served: bool,
) -> Result<Deletion, kube::Error> {
    let counted = if served {
        Subjects::ByNameOfOtherRequests
    } else {
        Subjects::ByName
    };
    if let Some(binding) = foreign_binding_of(shoot, ra, counted).await? {
        return Ok(Deletion::Bound(binding));
    }
    delete_owned(
        Api::<ServiceAccount>::namespaced(shoot.clone(), &ra.spec.service_account.namespace),
        ra,
        name,
        served,
    )
    .await
}

/// Deletes `name` if it carries the request's UID label (or, with `before_the_uid_label`, the
/// marks of an object made before that label).
async fn delete_owned<K>(
    api: Api<K>,
    ra: &RuntimeAccess,
    name: &str,
    before_the_uid_label: bool,
) -> Result<Deletion, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Some(meta) = api.get_metadata_opt(name).await? else {
        return Ok(Deletion::Absent);
    };
    let owned = created_by(meta.labels(), ra)
        || (before_the_uid_label && created_before_the_uid_label(&meta, ra));
    if !owned {
        return Ok(Deletion::NotOwned);
    }
    let dp = crate::finalizing::only_uid(meta.metadata.uid.clone());
    match api.delete(name, &dp).await {
        Ok(_) => Ok(Deletion::Deleted),
        Err(e) if is_status(&e, 404) => Ok(Deletion::Absent),
        // 409: the UID changed, so the object was replaced by another one: not ours.
        Err(e) if is_status(&e, 409) => Ok(Deletion::NotOwned),
        Err(e) => Err(e),
    }
}

/// What in the shoot carries this request's [`LABEL_RUNTIME_ACCESS_UID`], whatever the records
/// say: objects a pass applied before a later step of it failed are in no record, and would
/// otherwise outlive a spec change and the request itself, still granting access. Five
/// label-selected metadata lists. The label can be copied by anyone who may write in the
/// runtime cluster, so what one pass acts on is bounded: roles and bindings only of this
/// request's name (every spec names them so), the ServiceAccount only of `spec.serviceAccount`
/// (which never changes), and at most [`LABELLED_PER_KIND`] objects of a kind (no spec history
/// makes more of its own; the rest is left).
pub async fn labelled(
    shoot: &kube::Client,
    ra: &RuntimeAccess,
) -> Result<Vec<ShootObjectRef>, kube::Error> {
    let Some(uid) = ra.uid().filter(|uid| !uid.is_empty()) else {
        return Ok(Vec::new());
    };
    let lp = ListParams::default()
        .labels(&format!("{LABEL_RUNTIME_ACCESS_UID}={uid}"))
        .limit(LABELLED_PER_KIND);
    let name = shoot_rbac_name(&ra.namespace().unwrap_or_default(), &ra.name_any());
    let rbac = lp.clone().fields(&format!("metadata.name={name}"));
    let mut out = Vec::new();
    out.extend(listed::<ClusterRoleBinding>(shoot, &rbac).await?);
    out.extend(listed::<RoleBinding>(shoot, &rbac).await?);
    out.extend(listed::<ClusterRole>(shoot, &rbac).await?);
    out.extend(listed::<Role>(shoot, &rbac).await?);
    let account = &ra.spec.service_account;
    let accounts = lp.fields(&format!("metadata.name={}", account.name));
    let listed_accounts = Api::<ServiceAccount>::namespaced(shoot.clone(), &account.namespace)
        .list_metadata(&accounts)
        .await?;
    out.extend(
        listed_accounts
            .items
            .into_iter()
            .map(|meta| ShootObjectRef {
                kind: <ServiceAccount as kube::Resource>::kind(&()).into_owned(),
                name: meta.name_any(),
                namespace: meta.namespace(),
            }),
    );
    Ok(out)
}

/// Objects of one kind [`labelled`] returns at most.
pub const LABELLED_PER_KIND: u32 = 16;

async fn listed<K>(
    shoot: &kube::Client,
    lp: &ListParams,
) -> Result<impl Iterator<Item = ShootObjectRef>, kube::Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = Api::<K>::all(shoot.clone()).list_metadata(lp).await?;
    Ok(list.items.into_iter().map(|meta| ShootObjectRef {
        kind: K::kind(&()).into_owned(),
        name: meta.name_any(),
        namespace: meta.namespace(),
    }))
}

/// Order for deletion: bindings first (access ends at once), then roles, then the account.
pub fn deletion_order(objs: &mut [ShootObjectRef]) {
    let rank = |k: &str| match k {
        "ClusterRoleBinding" | "RoleBinding" => 0,
        "ClusterRole" | "Role" => 1,
        _ => 2,
    };
    objs.sort_by_key(|o| rank(&o.kind));
}

/// A token for the ServiceAccount. Deliberately not `Debug`.
pub struct IssuedToken {
    /// The bearer token.
    pub token: String,
    /// When it expires, as the API server says.
    pub expires: jiff::Timestamp,
    /// The token's ID (its `jti` claim), which the runtime cluster's audit log names for every
    /// request made with it (`authentication.kubernetes.io/credential-id: JTI=<id>`).
    pub id: Option<String>,
    /// The UID of the ServiceAccount it authenticates as (its `kubernetes.io` →
    /// `serviceaccount` → `uid` claim): the API server takes it only while the account of its
    /// name has this UID.
    pub account_uid: Option<String>,
}

/// The claims of a JWT that name it and its account, read without checking the signature
/// (the runtime cluster's API server just issued it to us): its `jti` and the UID of its
/// ServiceAccount. `None` for a token that is no JWT, and for a claim that is not a plain
/// identifier of at most 128 characters (the values go into annotations and logs).
fn claims(token: &str) -> Option<serde_json::Value> {
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&json).ok()
}

/// `value` if it is a plain identifier (letters, digits, `-`) of at most 128 characters.
fn plain_identifier(value: Option<&serde_json::Value>) -> Option<String> {
    let id = value?.as_str()?;
    let plain = !id.is_empty()
        && id.len() <= 128
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    plain.then(|| id.to_owned())
}

/// The `jti` claim of a JWT (see [`claims`]).
pub fn token_id(token: &str) -> Option<String> {
    plain_identifier(claims(token)?.get("jti"))
}

/// The UID of the ServiceAccount a token authenticates as (see [`claims`]).
pub fn token_account_uid(token: &str) -> Option<String> {
    plain_identifier(claims(token)?.pointer("/kubernetes.io/serviceaccount/uid"))
}

/// Why no token was issued (never contains a token).
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The API server refused the TokenRequest.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The answer carried no token or no expiry.
    #[error("the TokenRequest answer has no token or no expirationTimestamp")]
    Empty,
}

/// Requests a token through the TokenRequest API for a ServiceAccount this request created.
pub async fn request_token(
    shoot: &kube::Client,
    sa: &OwnedServiceAccount,
    expiration_seconds: i64,
) -> Result<IssuedToken, TokenError> {
    let api: Api<ServiceAccount> = Api::namespaced(shoot.clone(), &sa.namespace);
    let request = TokenRequest {
        metadata: ObjectMeta::default(),
        spec: Some(TokenRequestSpec {
            audiences: None,
            expiration_seconds: Some(expiration_seconds),
            bound_object_ref: None,
        }),
        status: None,
    };
    let answer: TokenRequest = api
        .create_subresource("token", &sa.name, &PostParams::default(), &request)
        .await?;
    let status = answer.status.unwrap_or_default();
    match (status.token, status.expiration_timestamp) {
        (Some(token), Some(expires)) if !token.is_empty() => Ok(IssuedToken {
            id: token_id(&token),
            account_uid: token_account_uid(&token),
            token,
            expires: expires.0,
        }),
        _ => Err(TokenError::Empty),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_id_is_the_jwt_jti_claim_when_it_is_a_plain_identifier() {
        use base64::Engine;
        let jwt = |claims: serde_json::Value| {
            let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            format!(
                "{}.{}.c2ln",
                b64.encode(br#"{"alg":"RS256"}"#),
                b64.encode(claims.to_string())
            )
        };
        let id = "9c1f2d7e-4b3a-4f0e-8d6c-2a1b0c9d8e7f";
        assert_eq!(
            token_id(&jwt(
                serde_json::json!({"jti": id, "sub": "system:serviceaccount:a:b"})
            )),
            Some(id.to_owned())
        );
        assert_eq!(token_id(&jwt(serde_json::json!({"sub": "x"}))), None);
        assert_eq!(
            token_id(&jwt(serde_json::json!({"jti": "a\nforged line"}))),
            None
        );
        assert_eq!(
            token_id(&jwt(serde_json::json!({"jti": "x".repeat(129)}))),
            None
        );
        assert_eq!(token_id("not-a-jwt"), None);
        assert_eq!(token_id("a.!!!.c"), None);
        // The claims of a ServiceAccount token the TokenRequest API issues.
        let account = "4d0f3b4e-1c2a-4e5f-9a8b-7c6d5e4f3a2b";
        let bound = jwt(serde_json::json!({
            "jti": id,
            "kubernetes.io": {"namespace": "a", "serviceaccount": {"name": "b", "uid": account}},
        }));
        assert_eq!(token_account_uid(&bound), Some(account.to_owned()));
        assert_eq!(
            token_account_uid(&jwt(serde_json::json!({
                "kubernetes.io": {"serviceaccount": {"uid": "a b"}}
            }))),
            None
        );
        assert_eq!(
            token_account_uid(&jwt(serde_json::json!({"jti": id}))),
            None
        );
    }
    use k8s_openapi::api::rbac::v1::PolicyRule;
    use kim_shared::api::runtime_access::{
        ExistingRoleRef, RoleSpec, RuntimeAccessSpec, ServiceAccountRef,
    };

    fn request() -> RuntimeAccess {
        let mut ra = RuntimeAccess::new(
            "klm",
            RuntimeAccessSpec {
                runtime_id: "rt-1".into(),
                service_account: ServiceAccountRef {
                    name: "klm".into(),
                    namespace: "kyma-system".into(),
                },
                cluster_role: None,
                role: Some(RoleSpec {
                    namespace: "apps".into(),
                    rules: vec![PolicyRule {
                        api_groups: Some(vec!["".into()]),
                        resources: Some(vec!["pods".into()]),
                        verbs: vec!["get".into()],
                        ..Default::default()
                    }],
                }),
                role_ref: None,
                token_expiration_seconds: None,
                secret: None,
            },
        );
        ra.metadata.namespace = Some("kcp-system".into());
        ra
    }

    #[test]
    fn only_a_binding_of_a_request_of_this_name_is_replaced() {
        let mut ra = request();
        ra.metadata.uid = Some("uid-now".into());
        let desired = match &rbac_objects(&ra)[1] {
            RbacObject::RoleBinding(b) => b.metadata.clone(),
            other => panic!("binding expected, got {other:?}"),
        };
        // This request's own.
        assert!(made_by_a_request_of_this_name(&desired, &desired));
        // An earlier request of the same name, deleted without its cleanup.
        let mut earlier = desired.clone();
        earlier
            .labels
            .get_or_insert_with(Default::default)
            .insert(LABEL_RUNTIME_ACCESS_UID.into(), "uid-before".into());
        assert!(made_by_a_request_of_this_name(&earlier, &desired));
        // Someone else's: no labels, or ours without the origin, or another origin.
        assert!(!made_by_a_request_of_this_name(
            &ObjectMeta::default(),
            &desired
        ));
        let mut labelled_only = earlier.clone();
        labelled_only.annotations = None;
        assert!(!made_by_a_request_of_this_name(&labelled_only, &desired));
        let mut other_origin = earlier;
        other_origin
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANNOTATION_RUNTIME_ACCESS.into(), "kcp-system/other".into());
        assert!(!made_by_a_request_of_this_name(&other_origin, &desired));
    }

    #[test]
    fn a_role_request_makes_a_role_and_a_binding_to_the_service_account() {
        let objs = rbac_objects(&request());
        let refs: Vec<_> = objs.iter().map(RbacObject::reference).collect();
        assert_eq!(
            refs.iter()
                .map(|r| (r.kind.as_str(), r.name.as_str(), r.namespace.as_deref()))
                .collect::<Vec<_>>(),
            vec![
                ("Role", "kim-access:kcp-system:klm", Some("apps")),
                ("RoleBinding", "kim-access:kcp-system:klm", Some("apps")),
            ]
        );
        let RbacObject::RoleBinding(b) = &objs[1] else {
            panic!("binding expected")
        };
        assert_eq!(b.role_ref.kind, "Role");
        let s = &b.subjects.as_ref().unwrap()[0];
        assert_eq!(
            (s.kind.as_str(), s.name.as_str(), s.namespace.as_deref()),
            ("ServiceAccount", "klm", Some("kyma-system"))
        );
        assert_eq!(
            b.metadata.annotations.as_ref().unwrap()[ANNOTATION_RUNTIME_ACCESS],
            "kcp-system/klm"
        );
    }

    #[test]
    fn a_cluster_role_ref_with_namespace_is_bound_only_there() {
        let mut ra = request();
        ra.spec.role = None;
        ra.spec.role_ref = Some(ExistingRoleRef {
            kind: RoleKind::ClusterRole,
            name: "view".into(),
            namespace: Some("apps".into()),
        });
        let objs = rbac_objects(&ra);
        assert_eq!(objs.len(), 1);
        let RbacObject::RoleBinding(b) = &objs[0] else {
            panic!("RoleBinding expected")
        };
        assert_eq!(
            (b.role_ref.kind.as_str(), b.role_ref.name.as_str()),
            ("ClusterRole", "view")
        );
    }

    #[test]
    fn the_fingerprint_changes_with_what_is_applied_and_only_with_that() {
        let ra = request();
        let fp = fingerprint(&ra);
        assert_eq!(fp, fingerprint(&request()), "stable for the same spec");
        assert!(fp.starts_with("fnv1a64:") && fp.len() == "fnv1a64:".len() + 16);
        // Not applied in the shoot: no new fingerprint.
        let mut longer = request();
        longer.spec.token_expiration_seconds = Some(7200);
        assert_eq!(fingerprint(&longer), fp);
        // A rule, a namespace or the kind of grant: a new fingerprint.
        let mut more_verbs = request();
        if let Some(role) = more_verbs.spec.role.as_mut() {
            role.rules[0].verbs.push("list".into());
        }
        let mut moved = request();
        if let Some(role) = moved.spec.role.as_mut() {
            role.namespace = "other".into();
        }
        let mut referenced = request();
        referenced.spec.role = None;
        referenced.spec.role_ref = Some(ExistingRoleRef {
            kind: RoleKind::ClusterRole,
            name: "view".into(),
            namespace: None,
        });
        let all = [
            fp.clone(),
            fingerprint(&more_verbs),
            fingerprint(&moved),
            fingerprint(&referenced),
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn only_objects_with_the_requests_uid_label_are_its_own() {
        let mut ra = request();
        let sa = service_account(&ra);
        assert!(
            !created_by(sa.labels(), &ra),
            "a request without a UID owns nothing"
        );
        ra.metadata.uid = Some("uid-1".into());
        let sa = service_account(&ra);
        assert!(created_by(sa.labels(), &ra));
        for obj in rbac_objects(&ra) {
            let labels = match &obj {
                RbacObject::ClusterRole(o) => o.labels(),
                RbacObject::Role(o) => o.labels(),
                RbacObject::ClusterRoleBinding(o) => o.labels(),
                RbacObject::RoleBinding(o) => o.labels(),
            };
            assert!(created_by(labels, &ra), "{:?}", obj.reference());
        }
        let mut other = ra.clone();
        other.metadata.uid = Some("uid-2".into());
        assert!(
            !created_by(sa.labels(), &other),
            "same name, another request"
        );
        assert!(!created_by(&BTreeMap::new(), &ra));
    }

    #[test]
    fn an_account_made_before_the_uid_label_is_recognised_by_label_and_origin() {
        let mut ra = request();
        ra.metadata.uid = Some("uid-1".into());
        let mut legacy = service_account(&ra);
        if let Some(l) = legacy.metadata.labels.as_mut() {
            l.remove(LABEL_RUNTIME_ACCESS_UID);
        }
        assert!(created_before_the_uid_label(&legacy, &ra));
        let mut other = ra.clone();
        other.metadata.name = Some("other".into());
        assert!(
            !created_before_the_uid_label(&legacy, &other),
            "another request's origin"
        );
        let mut foreign = legacy.clone();
        foreign.metadata.labels = None;
        assert!(
            !created_before_the_uid_label(&foreign, &ra),
            "without our managed-by label"
        );
        let mut current = service_account(&other);
        if let Some(a) = current.metadata.annotations.as_mut() {
            a.insert(ANNOTATION_RUNTIME_ACCESS.into(), origin(&ra));
        }
        assert!(
            !created_before_the_uid_label(&current, &ra),
            "a UID label of another request is final"
        );
    }

    #[test]
    fn bindings_are_deleted_before_roles_and_accounts() {
        let r = |k: &str| ShootObjectRef {
            kind: k.into(),
            name: "n".into(),
            namespace: None,
        };
        let mut objs = vec![r("ServiceAccount"), r("Role"), r("RoleBinding")];
        deletion_order(&mut objs);
        assert_eq!(
            objs.iter().map(|o| o.kind.as_str()).collect::<Vec<_>>(),
            vec!["RoleBinding", "Role", "ServiceAccount"]
        );
    }
}
