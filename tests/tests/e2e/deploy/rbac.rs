//! The controller's RBAC in `deploy/controller/rbac.yaml` is enough, and it is all the
//! controller gets: the controller runs with a KCP identity bound only to those roles (as its
//! ServiceAccount is in a deployment), provisions a Runtime to Ready with leader election on,
//! issues an RBAC kubeconfig (RuntimeAccess) and deletes the Runtime; the KCP apiserver's own
//! audit log shows no request of that identity refused with 403.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};
use kim_shared::api::runtime_access::RuntimeAccess;
use kim_shared::api::{Runtime, RuntimeState};
use kim_tests::controller::*;
use kim_tests::testenv::TestEnv;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

/// The RBAC of `deploy/controller/rbac.yaml` for namespace `ns`, with the bindings' subject
/// replaced by the user `user` (the tests authenticate by certificate, not as a
/// ServiceAccount; the rules are what is under test) and the cluster-scoped names suffixed
/// with `ns` (the environment is shared).
struct DeployRbac {
    role: Role,
    binding: RoleBinding,
    cluster_role: ClusterRole,
    cluster_binding: ClusterRoleBinding,
}

fn deploy_rbac(ns: &str, user: &str) -> Result<DeployRbac> {
    let path = kim_tests::testenv::repo_root().join("deploy/controller/rbac.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let (mut role, mut binding, mut cluster_role, mut cluster_binding) = (None, None, None, None);
    for value in kim_tests::fixtures::yaml_documents(&text)? {
        match value["kind"].as_str() {
            Some("Role") => role = Some(serde_json::from_value::<Role>(value)?),
            Some("RoleBinding") => binding = Some(serde_json::from_value::<RoleBinding>(value)?),
            Some("ClusterRole") => {
                cluster_role = Some(serde_json::from_value::<ClusterRole>(value)?);
            }
            Some("ClusterRoleBinding") => {
                cluster_binding = Some(serde_json::from_value::<ClusterRoleBinding>(value)?);
            }
            other => bail!("unexpected kind {other:?} in {}", path.display()),
        }
    }
    let (Some(mut role), Some(mut binding), Some(mut cluster_role), Some(mut cluster_binding)) =
        (role, binding, cluster_role, cluster_binding)
    else {
        bail!(
            "{} must hold a Role, a RoleBinding, a ClusterRole and a ClusterRoleBinding",
            path.display()
        );
    };
    let subjects = Some(vec![Subject {
        kind: "User".into(),
        name: user.to_owned(),
        api_group: Some("rbac.authorization.k8s.io".into()),
        namespace: None,
    }]);
    role.metadata.namespace = Some(ns.to_owned());
    binding.metadata.namespace = Some(ns.to_owned());
    binding.subjects = subjects.clone();
    let suffixed = |name: &str| format!("{name}-{ns}");
    ensure!(
        cluster_binding.role_ref.name == cluster_role.metadata.name.clone().unwrap_or_default(),
        "the ClusterRoleBinding binds the ClusterRole"
    );
    cluster_role.metadata.name = cluster_role.metadata.name.as_deref().map(suffixed);
    cluster_binding.metadata.name = cluster_binding.metadata.name.as_deref().map(suffixed);
    cluster_binding.role_ref.name = suffixed(&cluster_binding.role_ref.name);
    cluster_binding.subjects = subjects;
    Ok(DeployRbac {
        role,
        binding,
        cluster_role,
        cluster_binding,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn controller_works_with_exactly_the_deployed_rbac() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-rbac").await?;
    let user = format!("kim-controller-{ns}");
    let kcp = env.kcp_client().await?;

    let rbac = deploy_rbac(&ns, &user)?;
    Api::<Role>::namespaced(kcp.clone(), &ns)
        .create(&PostParams::default(), &rbac.role)
        .await?;
    Api::<RoleBinding>::namespaced(kcp.clone(), &ns)
        .create(&PostParams::default(), &rbac.binding)
        .await?;
    Api::<ClusterRole>::all(kcp.clone())
        .create(&PostParams::default(), &rbac.cluster_role)
        .await?;
    Api::<ClusterRoleBinding>::all(kcp.clone())
        .create(&PostParams::default(), &rbac.cluster_binding)
        .await?;

    // The controller's KCP identity: that user, in no group. Gardener stays the project
    // admin (a separate cluster and kubeconfig in a deployment).
    let (mut args, dir) = controller_args(env, &ns, &["--leader-elect"]).await?;
    reach_kcp_as(env, &mut args, &dir, &user)?;
    let ctl = start_with_args(args, dir).await?;

    // The flow; whatever its outcome, the audit log is checked for refusals first, so that a
    // missing permission is named instead of showing up as a timeout.
    let flow = async {
        let id = format!("rt-{}", &ns[ns.len().saturating_sub(6)..]);
        let rt = sample_runtime(&ns, &id)?;
        create(env, &rt).await?;
        wait_state(env, &ns, &id, RuntimeState::Ready, Duration::from_secs(120)).await?;

        // An RBAC kubeconfig through the same identity.
        let shoot_ns = env.shoot_namespace("rbac").await?;
        let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
        let ra: RuntimeAccess = serde_json::from_value(json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
            "kind": "RuntimeAccess",
            "metadata": {"name": "reader", "namespace": ns},
            "spec": {
                "runtimeId": id,
                "serviceAccount": {"name": "reader", "namespace": shoot_ns},
                "role": {"namespace": shoot_ns,
                         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
                "tokenExpirationSeconds": 600
            }
        }))?;
        requests.create(&PostParams::default(), &ra).await?;
        eventually("RuntimeAccess Ready", Duration::from_secs(90), || {
            let requests = requests.clone();
            async move {
                let ra = requests.get("reader").await?;
                Ok(ra
                    .status
                    .is_some_and(|s| s.state.as_deref() == Some("Ready")))
            }
        })
        .await?;
        requests.delete("reader", &DeleteParams::default()).await?;
        eventually("RuntimeAccess gone", Duration::from_secs(60), || {
            let requests = requests.clone();
            async move { Ok(requests.get_opt("reader").await?.is_none()) }
        })
        .await?;

        // Deletion: GardenerCluster, Shoot, finalizer, all through the same identity.
        let runtimes: Api<Runtime> = Api::namespaced(kcp.clone(), &ns);
        runtimes.delete(&id, &DeleteParams::default()).await?;
        eventually("Runtime gone", Duration::from_secs(120), || {
            let runtimes = runtimes.clone();
            let id = id.clone();
            async move { Ok(runtimes.get_opt(&id).await?.is_none()) }
        })
        .await?;
        anyhow::Ok(())
    }
    .await;
    ctl.stop().await;

    // The apiserver's audit log: the identity made requests, none was refused.
    let (count, used, refused) = audit_of(env, &user)?;
    eprintln!("requests of the controller identity: {used:#?}");
    assert!(
        count > 10 || flow.is_err(),
        "the audit log holds only {count} requests of {user}; is the audit policy logging it?"
    );
    assert!(
        refused.is_empty(),
        "deploy/controller/rbac.yaml lacks permissions; refused: {refused:#?}"
    );
    flow?;
    // Not too wide either: every granted verb was used by the flow, or is used by a feature
    // the flow leaves off (named with it below).
    let granted: BTreeSet<(String, String)> = rbac
        .role
        .rules
        .iter()
        .flatten()
        .chain(rbac.cluster_role.rules.iter().flatten())
        .flat_map(|rule| {
            let resources = rule.resources.clone().unwrap_or_default();
            resources
                .into_iter()
                .flat_map(|r| rule.verbs.iter().map(move |v| (r.clone(), v.clone())))
        })
        .collect();
    let used: BTreeSet<(String, String)> = used
        .iter()
        .filter_map(|u| u.split_once(' '))
        .map(|(r, v)| (r.to_owned(), v.to_owned()))
        .collect();
    let elsewhere: BTreeSet<(String, String)> = NOT_IN_THIS_FLOW
        .iter()
        .map(|(r, v, _)| ((*r).to_owned(), (*v).to_owned()))
        .collect();
    let stale: Vec<_> = elsewhere.difference(&granted).collect();
    assert!(
        stale.is_empty(),
        "NOT_IN_THIS_FLOW names what deploy/controller/rbac.yaml does not grant: {stale:?}"
    );
    let unused: Vec<_> = granted
        .difference(&used)
        .filter(|g| !elsewhere.contains(*g))
        .collect();
    assert!(
        unused.is_empty(),
        "deploy/controller/rbac.yaml grants what the controller never used: {unused:?}"
    );
    Ok(())
}

/// Grants the flow above does not use, with the feature that does (each has its own e2e test),
/// or that the audit log does not show.
const NOT_IN_THIS_FLOW: [(&str, &str, &str); 14] = [
    (
        "runtimes",
        "get",
        "a Runtime read again when its Shoot is ahead of it, and by the registry cache controller",
    ),
    (
        "leases",
        "get",
        "leader election: the test environment's audit policy leaves leases out (noise)",
    ),
    (
        "leases",
        "create",
        "leader election: the test environment's audit policy leaves leases out (noise)",
    ),
    (
        "leases",
        "update",
        "leader election: the test environment's audit policy leaves leases out (noise)",
    ),
    (
        "configmaps",
        "get",
        "the runtime bootstrapper's ConfigMap (--runtime-bootstrapper-enabled)",
    ),
    (
        "configmaps",
        "list",
        "the API server ACL ConfigMap watch (--api-server-acl-enabled)",
    ),
    (
        "configmaps",
        "watch",
        "the API server ACL ConfigMap watch (--api-server-acl-enabled)",
    ),
    (
        "auditlogs",
        "list",
        "KALM's AuditLogs (--dedicated-audit-logging-enabled)",
    ),
    (
        "auditlogs",
        "watch",
        "KALM's AuditLogs (--dedicated-audit-logging-enabled)",
    ),
    (
        "auditlogs",
        "patch",
        "claiming KALM's AuditLogs (--dedicated-audit-logging-enabled)",
    ),
    (
        "clustertrustbundles",
        "get",
        "the runtime bootstrapper's CA bundle (--runtime-bootstrapper-enabled)",
    ),
    (
        "clustertrustbundles",
        "list",
        "the runtime bootstrapper's CA bundle watch (--runtime-bootstrapper-enabled)",
    ),
    (
        "clustertrustbundles",
        "watch",
        "the runtime bootstrapper's CA bundle watch (--runtime-bootstrapper-enabled)",
    ),
    (
        "leases",
        "patch",
        "the previous release renews its lease by PATCH and keeps leading through a rollout",
    ),
];

/// The requests of `user` in the KCP apiserver's audit log: (distinct `resource verb` pairs,
/// those refused with 403).
fn audit_of(env: &TestEnv, user: &str) -> Result<(usize, Vec<String>, Vec<String>)> {
    let mine = env.audit_events_of(user)?;
    let describe = |e: &serde_json::Value| {
        let r = &e["objectRef"];
        let sub = r["subresource"]
            .as_str()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        format!(
            "{}{} {}",
            r["resource"].as_str().unwrap_or(""),
            sub,
            e["verb"].as_str().unwrap_or("")
        )
    };
    let mut used: Vec<String> = mine.iter().map(describe).collect();
    used.sort();
    used.dedup();
    let refused = mine
        .iter()
        .filter(|e| e["responseStatus"]["code"] == 403)
        .map(|e| format!("{} {}", describe(e), e["requestURI"]))
        .collect();
    Ok((mine.len(), used, refused))
}
