//! What a token kubeconfig grants (a Role, ClusterRole rules, bound roles, pod security) and
//! the least-privilege policy the controller holds requests to.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_for_a_role_can_get_pods_in_one_namespace_and_nothing_else() -> Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use kim_shared::access::ANNOTATION_REQUESTED_BY as REQUESTED_BY;

    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-rbac").await?;
    let shoot = ready_shoot(env).await?;
    let ctl = Controller::start(env, &ns, &[]).await?;
    let kcp = env.kcp_client().await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let id = unique("rt-");
    gcs.create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;
    let admin_secret = wait_for_secret(&secrets, &format!("kubeconfig-{id}")).await?;
    let admin_kc = kubeconfig_of(&admin_secret).unwrap();
    // Audit identity of the admin kubeconfig: Gardener's admin user.
    let admin_user = whoami(access::client_from_yaml("admin", &admin_kc).await?).await?;
    assert!(
        admin_user.starts_with("gardener.cloud:admin:"),
        "admin kubeconfig authenticates as {admin_user}"
    );

    // In the shoot: a namespace with a Pod and a Secret, and another namespace with a Pod.
    let shoot_admin = env.shoot_client().await?;
    let apps = env.shoot_namespace("apps").await?;
    let other = env.shoot_namespace("other").await?;
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p1"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))?;
    for n in [&apps, &other] {
        Api::<Pod>::namespaced(shoot_admin.clone(), n)
            .create(&PostParams::default(), &pod)
            .await?;
    }
    let shoot_secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s1"}, "stringData": {"k": "v"}}))?;
    Api::<Secret>::namespaced(shoot_admin.clone(), &apps)
        .create(&PostParams::default(), &shoot_secret)
        .await?;

    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let ra: RuntimeAccess = serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "RuntimeAccess",
        // As the admission webhook records the creating user (no webhook runs here).
        "metadata": {"name": "pod-reader", "namespace": ns, "annotations": {REQUESTED_BY: "klm-operator"}},
        "spec": {
            "runtimeId": id,
            "serviceAccount": {"name": "pod-reader", "namespace": apps},
            "role": {"namespace": apps, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
            "tokenExpirationSeconds": 600
        }
    }))?;
    requests.create(&PostParams::default(), &ra).await?;
    let ready = eventually("RuntimeAccess Ready", Duration::from_secs(90), || async {
        let ra = requests.get("pod-reader").await?;
        Ok(ra
            .status
            .clone()
            .filter(|s| s.state.as_deref() == Some("Ready")))
    })
    .await?;
    let secret_ref = ready.secret_ref.clone().context("status.secretRef")?;
    assert_eq!(
        ready.identity.as_deref(),
        Some(format!("system:serviceaccount:{apps}:pod-reader").as_str())
    );
    assert!(ready.token_expiration_timestamp.is_some());
    let kc_secret = secrets.get(&secret_ref.name).await?;
    let token_kc = String::from_utf8(
        kc_secret.data.unwrap_or_default()[&secret_ref.key]
            .0
            .clone(),
    )?;
    assert!(
        !token_kc.contains("client-key-data"),
        "the RBAC kubeconfig must not carry the admin key"
    );
    let client = access::client_from_yaml("rbac", &token_kc).await?;
    assert_eq!(
        whoami(client.clone()).await?,
        format!("system:serviceaccount:{apps}:pod-reader")
    );

    // Allowed: get pods in `apps` (the RBAC cache may take a moment).
    let pods_apps: Api<Pod> = Api::namespaced(client.clone(), &apps);
    eventually("get pod allowed", Duration::from_secs(15), || async {
        Ok(pods_apps.get("p1").await.ok().map(|_| ()))
    })
    .await?;
    // A real 403 for everything else.
    assert!(
        forbidden(
            Api::<Secret>::namespaced(client.clone(), &apps)
                .get("s1")
                .await
        ),
        "secrets must be forbidden"
    );
    assert!(
        forbidden(
            Api::<Pod>::namespaced(client.clone(), &other)
                .get("p1")
                .await
        ),
        "other namespaces must be forbidden"
    );
    assert!(
        forbidden(pods_apps.list(&ListParams::default()).await),
        "list was not granted"
    );

    // Deleting the request removes ServiceAccount, Role, binding and Secret.
    let rbac_name = format!("kim-access:{ns}:pod-reader");
    let created = Api::<ServiceAccount>::namespaced(shoot_admin.clone(), &apps)
        .get_opt("pod-reader")
        .await?
        .is_some()
        && Api::<Role>::namespaced(shoot_admin.clone(), &apps)
            .get_opt(&rbac_name)
            .await?
            .is_some()
        && Api::<RoleBinding>::namespaced(shoot_admin.clone(), &apps)
            .get_opt(&rbac_name)
            .await?
            .is_some();
    assert!(
        created,
        "ServiceAccount, Role and RoleBinding must exist before the deletion"
    );
    // Who asked is on the KCP Secret, and not in the runtime, whose owner reads it.
    let requester = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(REQUESTED_BY).cloned())
    };
    let sa = Api::<ServiceAccount>::namespaced(shoot_admin.clone(), &apps)
        .get("pod-reader")
        .await?;
    let binding = Api::<RoleBinding>::namespaced(shoot_admin.clone(), &apps)
        .get(&rbac_name)
        .await?;
    let kcp_secret = secrets.get(&secret_ref.name).await?;
    assert_eq!(
        requester(&kcp_secret.metadata).as_deref(),
        Some("klm-operator")
    );
    for (what, meta) in [
        ("ServiceAccount", &sa.metadata),
        ("RoleBinding", &binding.metadata),
    ] {
        assert_eq!(requester(meta), None, "{what}");
    }
    requests
        .delete("pod-reader", &DeleteParams::default())
        .await?;
    eventually("everything removed", Duration::from_secs(30), || async {
        let gone = requests.get_opt("pod-reader").await?.is_none()
            && secrets.get_opt(&secret_ref.name).await?.is_none()
            && Api::<ServiceAccount>::namespaced(shoot_admin.clone(), &apps)
                .get_opt("pod-reader")
                .await?
                .is_none()
            && Api::<Role>::namespaced(shoot_admin.clone(), &apps)
                .get_opt(&rbac_name)
                .await?
                .is_none()
            && Api::<RoleBinding>::namespaced(shoot_admin.clone(), &apps)
                .get_opt(&rbac_name)
                .await?
                .is_none();
        Ok(gone.then_some(()))
    })
    .await?;
    ctl.stop().await;
    assert_not_logged(&token_kc);
    assert_not_logged(&admin_kc);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// RuntimeAccess: ClusterRole with rules

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_with_cluster_role_rules_grants_them_cluster_wide_and_nothing_more()
-> Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin: admin_kc,
        kcp,
    } = set_up(
        "kc-ra-cr",
        &["--access-allowed-role-refs=ClusterRole/system:aggregate-to-view"],
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let shoot_admin = env.shoot_client().await?;
    let sa_ns = env.shoot_namespace("cr").await?;
    let shoot_secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s1"}, "stringData": {"k": "v"}}))?;
    Api::<Secret>::namespaced(shoot_admin.clone(), &sa_ns)
        .create(&PostParams::default(), &shoot_secret)
        .await?;

    let rules = json!([{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list"]}]);
    let ra = runtime_access(
        &ns,
        "ns-lister",
        &id,
        json!({
            "serviceAccount": {"name": "ns-lister", "namespace": sa_ns},
            "clusterRole": {"rules": rules},
            "tokenExpirationSeconds": 600,
        }),
    )?;
    requests.create(&PostParams::default(), &ra).await?;
    let status = access_ready(&requests, "ns-lister").await?;
    let kc = access_kubeconfig(&secrets, &status).await?;
    let client = access::client_from_yaml("cluster-role", &kc).await?;
    assert_eq!(
        whoami(client.clone()).await?,
        format!("system:serviceaccount:{sa_ns}:ns-lister")
    );

    // In the shoot: a ClusterRole with exactly the requested rules, bound cluster-wide to the
    // ServiceAccount, all marked as ours.
    let rbac_name = format!("kim-access:{ns}:ns-lister");
    let roles: Api<ClusterRole> = Api::all(shoot_admin.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(shoot_admin.clone());
    let accounts: Api<ServiceAccount> = Api::namespaced(shoot_admin.clone(), &sa_ns);
    let role = roles.get(&rbac_name).await?;
    assert_eq!(serde_json::to_value(&role.rules)?, rules);
    assert_eq!(
        role.metadata.annotations.unwrap_or_default()["infrastructuremanager.kyma-project.io/runtime-access"],
        format!("{ns}/ns-lister")
    );
    let binding = bindings.get(&rbac_name).await?;
    assert_eq!(
        (
            binding.role_ref.kind.as_str(),
            binding.role_ref.name.as_str()
        ),
        ("ClusterRole", rbac_name.as_str())
    );
    let subject = &binding.subjects.unwrap_or_default()[0];
    assert_eq!(
        (
            subject.kind.as_str(),
            subject.name.as_str(),
            subject.namespace.as_deref()
        ),
        ("ServiceAccount", "ns-lister", Some(sa_ns.as_str()))
    );
    let mut recorded: Vec<_> = status
        .shoot_objects
        .iter()
        .map(|o| o.kind.clone())
        .collect();
    recorded.sort();
    assert_eq!(
        recorded,
        ["ClusterRole", "ClusterRoleBinding", "ServiceAccount"]
    );

    // Allowed cluster-wide: list and get namespaces (also ones it has nothing to do with).
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let lp = ListParams::default();
    let listed = once_allowed("list namespaces", || namespaces.list(&lp)).await?;
    assert!(
        listed
            .items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("kube-system")),
        "kube-system missing from the namespace list"
    );
    namespaces.get("kube-system").await?;
    // Nothing more: real 403s for secrets (in its own namespace too), pods and writes.
    assert!(
        forbidden(
            Api::<Secret>::namespaced(client.clone(), &sa_ns)
                .get("s1")
                .await
        ),
        "get secret must be forbidden"
    );
    assert!(
        forbidden(
            Api::<Secret>::all(client.clone())
                .list(&ListParams::default())
                .await
        ),
        "list secrets must be forbidden"
    );
    assert!(
        forbidden(
            Api::<Pod>::all(client.clone())
                .list(&ListParams::default())
                .await
        ),
        "list pods must be forbidden"
    );
    let new_ns: Namespace = serde_json::from_value(json!({"metadata": {"name": unique("nope-")}}))?;
    assert!(
        forbidden(namespaces.create(&PostParams::default(), &new_ns).await),
        "create namespace must be forbidden"
    );
    assert!(
        forbidden(namespaces.delete(&sa_ns, &DeleteParams::default()).await),
        "delete namespace must be forbidden"
    );

    // A spec that changes from rules to a roleRef: the ClusterRole the controller made goes,
    // the binding is recreated for the referenced role (a roleRef cannot change in place), and
    // the same kubeconfig now has the referenced role's rights.
    let switcher = runtime_access(
        &ns,
        "switcher",
        &id,
        json!({
            "serviceAccount": {"name": "switcher", "namespace": sa_ns},
            "clusterRole": {"rules": rules},
            "tokenExpirationSeconds": 600,
        }),
    )?;
    requests.create(&PostParams::default(), &switcher).await?;
    let before = access_ready(&requests, "switcher").await?;
    let switcher_rbac = format!("kim-access:{ns}:switcher");
    assert!(exists(&roles, &switcher_rbac).await?);
    let switcher_kc = access_kubeconfig(&secrets, &before).await?;
    let switcher_client = access::client_from_yaml("switcher", &switcher_kc).await?;
    let pods_everywhere: Api<Pod> = Api::all(switcher_client);
    assert!(forbidden(pods_everywhere.list(&lp).await));
    requests
        .patch(
            "switcher",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {
                "clusterRole": null,
                "roleRef": {"kind": "ClusterRole", "name": "system:aggregate-to-view"}
            }})),
        )
        .await?;
    let after = eventually(
        "switched to the roleRef",
        Duration::from_secs(30),
        || async {
            let status = requests.get("switcher").await?.status.unwrap_or_default();
            let done = status.observed_generation == Some(2)
                && status.state.as_deref() == Some("Ready")
                && !status.shoot_objects.iter().any(|o| o.kind == "ClusterRole");
            Ok(done.then_some(status))
        },
    )
    .await?;
    assert!(
        !exists(&roles, &switcher_rbac).await?,
        "the ClusterRole of the earlier spec must be deleted"
    );
    let rebound = bindings.get(&switcher_rbac).await?;
    assert_eq!(
        (
            rebound.role_ref.kind.as_str(),
            rebound.role_ref.name.as_str()
        ),
        ("ClusterRole", "system:aggregate-to-view")
    );
    assert_eq!(
        access_kubeconfig(&secrets, &after).await?,
        switcher_kc,
        "a spec change alone does not need a new token"
    );
    once_allowed("list pods through the new roleRef", || {
        pods_everywhere.list(&lp)
    })
    .await?;
    delete_access(
        &requests,
        &secrets,
        "switcher",
        &after.secret_ref.clone().unwrap().name,
    )
    .await?;
    assert!(
        exists(&roles, "system:aggregate-to-view").await?,
        "the referenced ClusterRole must stay"
    );

    // Deletion removes ClusterRole, ClusterRoleBinding, ServiceAccount and the Secret.
    let secret_name = status.secret_ref.as_ref().unwrap().name.clone();
    delete_access(&requests, &secrets, "ns-lister", &secret_name).await?;
    eventually("shoot objects removed", Duration::from_secs(15), || async {
        let gone = !exists(&roles, &rbac_name).await?
            && !exists(&bindings, &rbac_name).await?
            && !exists(&accounts, "ns-lister").await?;
        Ok(gone.then_some(()))
    })
    .await?;
    assert!(
        exists(
            &Api::<Secret>::namespaced(shoot_admin.clone(), &sa_ns),
            "s1"
        )
        .await?,
        "the cleanup must not touch other objects in the namespace"
    );
    ctl.stop().await;
    assert_not_logged(&kc);
    assert_not_logged(&admin_kc);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// RuntimeAccess: references to existing roles

/// `view` itself is an aggregated ClusterRole whose rules the controller-manager fills in; the
/// test shoot has no controller-manager, so the references use `system:aggregate-to-view` (the
/// bootstrap ClusterRole `view` aggregates, with the same rules) and a Role made by the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_role_refs_bind_existing_roles_and_deletion_keeps_them() -> Result<()> {
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};

    const VIEW: &str = "system:aggregate-to-view";
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-ra-ref").await?;
    let a = env.shoot_namespace("ref-a").await?;
    let b = env.shoot_namespace("ref-b").await?;
    // Existing roles are bound only from the allow-list.
    let allowed = format!("--access-allowed-role-refs=ClusterRole/{VIEW},Role/{b}/cm-reader");
    let ctl = Controller::start(env, &ns, &[&allowed]).await?;
    let (id, admin_kc) = runtime_with_admin_kubeconfig(env, &ns).await?;
    let kcp = env.kcp_client().await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let shoot_admin = env.shoot_client().await?;
    let cluster_roles: Api<ClusterRole> = Api::all(shoot_admin.clone());
    let view = cluster_roles.get(VIEW).await?;
    assert!(
        view.rules.as_ref().is_some_and(|r| !r.is_empty()),
        "{VIEW} must have rules in the shoot"
    );

    // Existing objects in the shoot: pods in both namespaces, a Secret, a ConfigMap, a Role
    // reading ConfigMaps and a ServiceAccount someone else made.
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p1"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))?;
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c1"}, "data": {"k": "v"}}))?;
    for n in [&a, &b] {
        Api::<Pod>::namespaced(shoot_admin.clone(), n)
            .create(&PostParams::default(), &pod)
            .await?;
    }
    Api::<ConfigMap>::namespaced(shoot_admin.clone(), &b)
        .create(&PostParams::default(), &cm)
        .await?;
    let s1: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s1"}, "stringData": {"k": "v"}}))?;
    Api::<Secret>::namespaced(shoot_admin.clone(), &a)
        .create(&PostParams::default(), &s1)
        .await?;
    let role: Role = serde_json::from_value(json!({"metadata": {"name": "cm-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}))?;
    let roles_b: Api<Role> = Api::namespaced(shoot_admin.clone(), &b);
    roles_b.create(&PostParams::default(), &role).await?;
    let accounts_a: Api<ServiceAccount> = Api::namespaced(shoot_admin.clone(), &a);
    let accounts_b: Api<ServiceAccount> = Api::namespaced(shoot_admin.clone(), &b);
    let foreign: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "preexisting"}}))?;
    accounts_b.create(&PostParams::default(), &foreign).await?;

    let specs = [
        (
            "view-all",
            json!({"serviceAccount": {"name": "view-all", "namespace": a},
                   "roleRef": {"kind": "ClusterRole", "name": VIEW}, "tokenExpirationSeconds": 600}),
        ),
        (
            "view-a",
            json!({"serviceAccount": {"name": "view-a", "namespace": a},
                   "roleRef": {"kind": "ClusterRole", "name": VIEW, "namespace": a}, "tokenExpirationSeconds": 600}),
        ),
        (
            "cm-reader",
            json!({"serviceAccount": {"name": "cm-reader", "namespace": b},
                   "roleRef": {"kind": "Role", "name": "cm-reader", "namespace": b}, "tokenExpirationSeconds": 600}),
        ),
    ];
    for (name, spec) in &specs {
        requests
            .create(
                &PostParams::default(),
                &runtime_access(&ns, name, &id, spec.clone())?,
            )
            .await?;
    }
    let mut kubeconfigs = Vec::new();
    let mut clients = std::collections::BTreeMap::new();
    let mut secret_names = std::collections::BTreeMap::new();
    for (name, _) in &specs {
        let status = access_ready(&requests, name).await?;
        let kc = access_kubeconfig(&secrets, &status).await?;
        clients.insert(*name, access::client_from_yaml(name, &kc).await?);
        kubeconfigs.push(kc);
        secret_names.insert(*name, status.secret_ref.clone().unwrap().name);
        // Only the binding and the ServiceAccount it made are recorded as created: never the role.
        let kinds: Vec<_> = status
            .shoot_objects
            .iter()
            .map(|o| o.kind.as_str())
            .collect();
        assert!(
            !kinds.iter().any(|k| *k == "ClusterRole" || *k == "Role"),
            "{name}: a referenced role was recorded as created: {kinds:?}"
        );
        assert!(
            kinds.contains(&"ServiceAccount"),
            "{name}: ServiceAccount ownership in {kinds:?}"
        );
    }
    let rbac = |name: &str| format!("kim-access:{ns}:{name}");

    // ClusterRole cluster-wide: pods readable in every namespace; secrets and writes refused.
    let c = &clients["view-all"];
    assert_eq!(
        whoami(c.clone()).await?,
        format!("system:serviceaccount:{a}:view-all")
    );
    let crb = Api::<ClusterRoleBinding>::all(shoot_admin.clone())
        .get(&rbac("view-all"))
        .await?;
    assert_eq!(
        (crb.role_ref.kind.as_str(), crb.role_ref.name.as_str()),
        ("ClusterRole", VIEW)
    );
    let lp = ListParams::default();
    for n in [&a, &b] {
        let pods: Api<Pod> = Api::namespaced(c.clone(), n);
        once_allowed("view-all: list pods", || pods.list(&lp)).await?;
    }
    assert!(forbidden(
        Api::<Secret>::namespaced(c.clone(), &a).get("s1").await
    ));
    assert!(forbidden(
        Api::<ConfigMap>::namespaced(c.clone(), &a)
            .create(&PostParams::default(), &cm)
            .await
    ));

    // ClusterRole in one namespace: a RoleBinding there, nothing elsewhere.
    let c = &clients["view-a"];
    let rb = Api::<RoleBinding>::namespaced(shoot_admin.clone(), &a)
        .get(&rbac("view-a"))
        .await?;
    assert_eq!(
        (rb.role_ref.kind.as_str(), rb.role_ref.name.as_str()),
        ("ClusterRole", VIEW)
    );
    assert!(
        !exists(
            &Api::<ClusterRoleBinding>::all(shoot_admin.clone()),
            &rbac("view-a")
        )
        .await?
    );
    let pods_a: Api<Pod> = Api::namespaced(c.clone(), &a);
    once_allowed("view-a: get pod in a", || pods_a.get("p1")).await?;
    assert!(forbidden(
        Api::<Pod>::namespaced(c.clone(), &b).get("p1").await
    ));
    assert!(forbidden(
        Api::<Pod>::all(c.clone())
            .list(&ListParams::default())
            .await
    ));
    assert!(forbidden(
        Api::<Secret>::namespaced(c.clone(), &a).get("s1").await
    ));

    // An existing Role.
    let c = &clients["cm-reader"];
    assert_eq!(
        whoami(c.clone()).await?,
        format!("system:serviceaccount:{b}:cm-reader")
    );
    let cms_b: Api<ConfigMap> = Api::namespaced(c.clone(), &b);
    once_allowed("cm-reader: get configmap", || cms_b.get("c1")).await?;
    assert!(forbidden(
        Api::<Pod>::namespaced(c.clone(), &b).get("p1").await
    ));
    assert!(forbidden(cms_b.list(&ListParams::default()).await));

    // Deletion removes the bindings and the ServiceAccounts the controller made, nothing else.
    for (name, _) in &specs {
        delete_access(&requests, &secrets, name, &secret_names[name]).await?;
    }
    eventually("bindings removed", Duration::from_secs(15), || async {
        let gone = !exists(
            &Api::<ClusterRoleBinding>::all(shoot_admin.clone()),
            &rbac("view-all"),
        )
        .await?
            && !exists(
                &Api::<RoleBinding>::namespaced(shoot_admin.clone(), &a),
                &rbac("view-a"),
            )
            .await?
            && !exists(
                &Api::<RoleBinding>::namespaced(shoot_admin.clone(), &b),
                &rbac("cm-reader"),
            )
            .await?
            && !exists(&accounts_a, "view-all").await?
            && !exists(&accounts_a, "view-a").await?
            && !exists(&accounts_b, "cm-reader").await?;
        Ok(gone.then_some(()))
    })
    .await?;
    assert!(
        exists(&cluster_roles, VIEW).await?,
        "the referenced ClusterRole must stay"
    );
    assert!(
        exists(&roles_b, "cm-reader").await?,
        "the referenced Role must stay"
    );
    assert!(
        exists(&accounts_b, "preexisting").await?,
        "a ServiceAccount the controller did not create must stay"
    );
    ctl.stop().await;
    for kc in &kubeconfigs {
        assert_not_logged(kc);
    }
    assert_not_logged(&admin_kc);
    Ok(())
}

/// Objects that reach the KCP without the webhook (or were stored before a stricter policy)
/// are held to the same policy by the controller: InvalidSpec naming the field, nothing in the
/// shoot, no Secret. Attack: wildcard rules, a token minter for any ServiceAccount, exec into
/// any pod, every Secret of the cluster, a token that changes its own account (so that a
/// revocation no longer ends it), a Service's load-balancer address and a mesh-wide route (the
/// cluster's traffic for any address or host to the holder). On the code before the fix the
/// token minter, exec, secrets, own-account and traffic requests were served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_with_forbidden_rules_is_refused_by_the_controller() -> Result<()> {
    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-strict", &[]).await?;
    let shoot_admin = env.shoot_client().await?;
    let sa_ns = env.shoot_namespace("wild").await?;
    let role = |rules: serde_json::Value| json!({"role": {"namespace": sa_ns, "rules": rules}});
    let cluster_role = |rules: serde_json::Value| json!({"clusterRole": {"rules": rules}});
    let cases = [
        (
            "wild",
            role(json!([{"apiGroups": [""], "resources": ["*"], "verbs": ["*"]}])),
            "spec.role.rules[0]",
        ),
        (
            "minter",
            role(
                json!([{"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]}]),
            ),
            "spec.role.rules[0].resources",
        ),
        (
            "exec",
            role(
                json!([{"apiGroups": [""], "resources": ["pods", "pods/exec"], "verbs": ["get", "create"]}]),
            ),
            "spec.role.rules[0].resources",
        ),
        (
            "secrets",
            cluster_role(json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}])),
            "spec.clusterRole.rules[0].resources",
        ),
        (
            // The role's own Namespace: relabelled `privileged`, its pods may mount the node.
            "own-namespace",
            role(
                json!([{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "patch"]}]),
            ),
            "spec.role.rules[0].resources",
        ),
        (
            // A Pod made with the token runs as the account, past a revocation.
            "own-account-pods",
            role(
                json!([{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "create"]}]),
            ),
            "spec.role.namespace",
        ),
        (
            // The token could take the request's label off its own account, or set a
            // finalizer on it, so that a revocation no longer ends it.
            "own-account-patch",
            role(
                json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
                       {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "patch"]}]),
            ),
            "spec.role.rules[1]",
        ),
        (
            // Traffic for any address to the holder's Service (CVE-2020-8554).
            "lb-status",
            role(
                json!([{"apiGroups": [""], "resources": ["services", "services/status"], "verbs": ["get", "patch"]}]),
            ),
            "spec.role.rules[0].resources",
        ),
        (
            // Every sidecar's traffic for any host, from one namespace.
            "mesh-routes",
            role(
                json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
                       {"apiGroups": ["networking.istio.io"], "resources": ["virtualservices"], "verbs": ["create"]}]),
            ),
            "spec.role.rules[1].resources",
        ),
        (
            "kube-system-pods",
            cluster_role(
                json!([{"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get", "create"]}]),
            ),
            "spec.clusterRole.rules[0].resources",
        ),
    ];
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    for (name, grant, _) in &cases {
        let mut spec = json!({
            "serviceAccount": {"name": name, "namespace": sa_ns},
            "tokenExpirationSeconds": 600,
        });
        for (k, v) in grant.as_object().context("grant")? {
            spec[k] = v.clone();
        }
        requests
            .create(
                &PostParams::default(),
                &runtime_access(&ns, name, &id, spec)?,
            )
            .await?;
    }
    let mut conditions = Vec::new();
    for (name, _, _) in &cases {
        conditions.push(access_condition(&requests, name, "InvalidSpec").await);
    }
    // Nothing created is checked first: a served grant is the attack's outcome.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (name, _, _) in &cases {
        assert!(
            !exists(
                &Api::<ServiceAccount>::namespaced(shoot_admin.clone(), &sa_ns),
                name
            )
            .await?,
            "{name}: a refused request must not create anything in the shoot"
        );
        assert!(
            !exists(
                &Api::<Secret>::namespaced(kcp.clone(), &ns),
                &format!("{name}-kubeconfig")
            )
            .await?,
            "{name}: no kubeconfig for a refused request"
        );
    }
    for ((name, _, field), condition) in cases.iter().zip(conditions) {
        let condition = condition?;
        assert_eq!(condition.status, "False");
        assert!(
            condition.message.contains(field),
            "{name}: message names the field {field}: {}",
            condition.message
        );
    }
    for (name, _, _) in &cases {
        requests.delete(name, &DeleteParams::default()).await?;
    }
    eventually("refused requests gone", Duration::from_secs(30), || async {
        let left = requests.list(&ListParams::default()).await?.items.len();
        Ok((left == 0).then_some(()))
    })
    .await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// Attack: a RuntimeAccess whose namespaced role may create Pods, where Pod Security is not
/// enforced, runs a privileged Pod with the node's filesystem: root on the node and every
/// credential there. Now: refused (PodSecurityNotEnforced) and nothing created, until the
/// namespace enforces `baseline`; then it is served. On the code before it was Ready at once.
/// The refusal is no failed reconcile: only the runtime's owner or the requester can end it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_runs_pods_only_where_pod_security_holds_them() -> Result<()> {
    use k8s_openapi::api::core::v1::Namespace;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-psa", &[]).await?;
    let shoot_admin = env.shoot_client().await?;
    let apps = env.shoot_namespace("deployer").await?;
    // The account apart from the workloads it may write (refused otherwise).
    let accounts = env.shoot_namespace("deployer-sa").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let spec = json!({
        "serviceAccount": {"name": "deployer", "namespace": accounts},
        "role": {"namespace": apps, "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "create", "patch"]},
        ]},
        "tokenExpirationSeconds": 600,
    });
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "deployer", &id, spec)?,
        )
        .await?;
    let failed_before = ctl.access_reconciles_with("error").await?;
    let refused = access_condition(&requests, "deployer", "PodSecurityNotEnforced").await?;
    assert!(
        refused.message.contains(&format!(
            "writes \"deployments\" in namespace {apps}, which enforces Pod Security privileged, the default"
        )),
        "{}",
        refused.message
    );
    assert!(
        !exists(
            &Api::<ServiceAccount>::namespaced(shoot_admin.clone(), &accounts),
            "deployer"
        )
        .await?,
        "nothing is created for a refused request"
    );
    assert!(
        !exists(
            &Api::<Secret>::namespaced(kcp.clone(), &ns),
            "deployer-kubeconfig"
        )
        .await?
    );
    ctl.assert_no_access_failure_since(failed_before, "a refusal counted as a failed reconcile")
        .await?;
    // The runtime's owner enforces baseline there: served at the next look (every two
    // minutes), or at once when the request changes.
    Api::<Namespace>::all(shoot_admin.clone())
        .patch(
            &apps,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "baseline"}}})),
        )
        .await?;
    requests
        .patch(
            "deployer",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"e2e/nudge": "1"}}})),
        )
        .await?;
    access_ready(&requests, "deployer").await?;
    requests
        .delete("deployer", &DeleteParams::default())
        .await?;
    eventually("request gone", Duration::from_secs(30), || async {
        Ok(requests.get_opt("deployer").await?.is_none().then_some(()))
    })
    .await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// The ValidatingAdmissionPolicy and its binding that `docs/kubeconfigs.md` gives for refusing
/// Service external IPs, named after `namespace` and bound to it alone (the runtime cluster is
/// shared by the tests), plus `extra` validations.
fn external_ips_policy(
    namespace: &str,
    extra: &[serde_json::Value],
) -> Result<(
    k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy,
    k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
)> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/kubeconfigs.md"
    ))?;
    let block = doc
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains("kind: ValidatingAdmissionPolicy"))
        .context("docs/kubeconfigs.md gives no ValidatingAdmissionPolicy")?;
    let yaml: String = block
        .lines()
        .map(|l| format!("{}\n", l.strip_prefix("  ").unwrap_or(l)))
        .collect();
    let mut docs = Vec::new();
    for d in serde_yaml_ng::Deserializer::from_str(&yaml) {
        docs.push(serde_json::to_value(
            <serde_yaml_ng::Value as serde::Deserialize>::deserialize(d)?,
        )?);
    }
    let [mut policy, mut binding] = <[serde_json::Value; 2]>::try_from(docs).map_err(|d| {
        anyhow::anyhow!("expected a policy and a binding, got {} documents", d.len())
    })?;
    let name = external_ips_policy_name(namespace);
    policy["metadata"]["name"] = json!(name);
    for v in extra {
        policy["spec"]["validations"]
            .as_array_mut()
            .context("validations")?
            .push(v.clone());
    }
    binding["metadata"]["name"] = json!(name);
    binding["spec"]["policyName"] = json!(name);
    binding["spec"]["matchResources"] = json!({"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": namespace}}});
    Ok((
        serde_json::from_value(policy)?,
        serde_json::from_value(binding)?,
    ))
}

/// The name of [`external_ips_policy`] and its binding for `namespace`.
fn external_ips_policy_name(namespace: &str) -> String {
    format!("deny-service-external-ips-{namespace}")
}

/// The policy of [`external_ips_policy`] in the runtime, for `namespace`.
struct ExternalIpsPolicy {
    policies: Api<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>,
    bindings: Api<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>,
    namespace: String,
}

impl ExternalIpsPolicy {
    /// Creates the policy, with `extra` validations, and its binding.
    async fn put(&self, extra: &[serde_json::Value]) -> Result<()> {
        let (policy, binding) = external_ips_policy(&self.namespace, extra)?;
        self.policies
            .create(&PostParams::default(), &policy)
            .await?;
        self.bindings
            .create(&PostParams::default(), &binding)
            .await?;
        Ok(())
    }

    /// Deletes the policy and its binding.
    async fn lift(&self) -> Result<()> {
        let name = external_ips_policy_name(&self.namespace);
        self.policies
            .delete(&name, &DeleteParams::default())
            .await?;
        self.bindings
            .delete(&name, &DeleteParams::default())
            .await?;
        Ok(())
    }
}

/// A Service `name` on port 80, with `external_ip` if given.
fn service(name: &str, external_ip: Option<&str>) -> Result<k8s_openapi::api::core::v1::Service> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"ports": [{"port": 80}], "externalIPs": external_ip.map(|ip| vec![ip])},
    }))?)
}

/// Whether the answer is a refusal at admission or validation (403, 422).
fn forbidden_or_invalid<T>(r: std::result::Result<T, kube::Error>) -> bool {
    matches!(r, Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422)
}

/// Attack: a RuntimeAccess whose role may create Services, in a cluster that admits external
/// IPs, names another cluster's address (an API server, a registry) as a Service's external IP:
/// kube-proxy on every node sends the cluster's traffic for that address to the Service, to be
/// read or cut off (CVE-2020-8554). Now: refused (ServiceExternalIPsAllowed) and nothing
/// created until the cluster refuses external IPs (with the policy the docs give); then served,
/// and the token may create Services but none with an external IP. With the policy lifted, the
/// next pass refuses it again and removes its role and binding: the token may create no
/// Service, also after the spec goes back to the one applied before; with the policy back, it
/// is served again with its binding. A policy that refuses every Service leaves it unclear,
/// and a request is refused, saying so. On the code before it was Ready at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_writes_services_only_where_external_ips_are_refused() -> Result<()> {
    use k8s_openapi::api::core::v1::Service;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-eips", &[]).await?;
    let shoot_admin = env.shoot_client().await?;
    let apps = env.shoot_namespace("exposer").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let spec = json!({
        "serviceAccount": {"name": "exposer", "namespace": apps},
        "role": {"namespace": apps, "rules": [
            {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "create", "patch"]},
        ]},
        "tokenExpirationSeconds": 600,
    });
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "exposer", &id, spec)?,
        )
        .await?;
    let failed_before = ctl.access_reconciles_with("error").await?;
    let refused = access_condition(&requests, "exposer", "ServiceExternalIPsAllowed").await?;
    assert!(
        refused.message.contains(&format!(
            "writes \"services\" in namespace {apps}, where the cluster admits a Service with external IPs"
        )),
        "{}",
        refused.message
    );
    let services: Api<Service> = Api::namespaced(shoot_admin.clone(), &apps);
    assert_eq!(
        services.list(&ListParams::default()).await?.items.len(),
        0,
        "the controller's questions were dry runs"
    );
    assert!(
        !exists(
            &Api::<ServiceAccount>::namespaced(shoot_admin.clone(), &apps),
            "exposer"
        )
        .await?,
        "nothing is created for a refused request"
    );
    ctl.assert_no_access_failure_since(failed_before, "a refusal counted as a failed reconcile")
        .await?;

    // The runtime's owner refuses external IPs there, with the policy of the docs.
    let policy = ExternalIpsPolicy {
        policies: Api::all(shoot_admin.clone()),
        bindings: Api::all(shoot_admin.clone()),
        namespace: apps.clone(),
    };
    policy.put(&[]).await?;
    let with_ip = service("intercept", Some("192.0.2.10"))?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    eventually("the policy in force", Duration::from_secs(30), || async {
        Ok(forbidden_or_invalid(services.create(&dry_run, &with_ip).await).then_some(()))
    })
    .await?;
    annotate(&requests, "exposer", json!({"e2e/nudge": "1"})).await?;
    let ready = access_ready(&requests, "exposer").await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let token =
        access::client_from_yaml("exposer", &access_kubeconfig(&secrets, &ready).await?).await?;
    let as_token: Api<Service> = Api::namespaced(token, &apps);
    let plain = service("plain", None)?;
    let post = PostParams::default();
    once_allowed("creating a Service", || as_token.create(&post, &plain)).await?;
    match as_token.create(&PostParams::default(), &with_ip).await {
        Err(kube::Error::Api(s)) => assert!(
            s.message.contains("Services may not have external IPs"),
            "{}",
            s.message
        ),
        other => bail!("a Service with an external IP was not refused: {other:?}"),
    }

    // The runtime's owner lifts the policy: the request's next pass (here a spec change, at
    // the latest its next rotation) refuses it and removes its role and binding, so the token
    // it holds still authenticates but may write no Service.
    policy.lift().await?;
    let other = service("other", None)?;
    eventually("the policy lifted", Duration::from_secs(30), || async {
        Ok(services
            .create(&dry_run, &with_ip)
            .await
            .is_ok()
            .then_some(()))
    })
    .await?;
    let services_rule = |verbs: &[&str]| {
        json!({"spec": {"role": {"namespace": apps, "rules": [
            {"apiGroups": [""], "resources": ["services"], "verbs": verbs},
        ]}}})
    };
    requests
        .patch(
            "exposer",
            &PatchParams::default(),
            &Patch::Merge(services_rule(&["get", "list", "watch", "create", "patch"])),
        )
        .await?;
    access_condition_saying(
        &requests,
        "exposer",
        "ServiceExternalIPsAllowed",
        "a server-side dry run was admitted",
    )
    .await?;
    let role_binding = format!("kim-access:{ns}:exposer");
    assert!(
        !exists(
            &Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(shoot_admin.clone(), &apps),
            &role_binding
        )
        .await?,
        "the refused request's binding stayed"
    );
    eventually(
        "the token's rights gone",
        Duration::from_secs(15),
        || async {
            Ok(forbidden(as_token.create(&PostParams::default(), &other).await).then_some(()))
        },
    )
    .await?;
    // Back to the spec whose objects were recorded as applied: still refused, never Ready
    // without its binding.
    requests
        .patch(
            "exposer",
            &PatchParams::default(),
            &Patch::Merge(services_rule(&["get", "list", "create", "patch"])),
        )
        .await?;
    eventually(
        "the reverted spec refused",
        Duration::from_secs(60),
        || async {
            let ra = requests.get("exposer").await?;
            let status = ra.status.context("status")?;
            let reason = status.conditions.first().map(|c| c.reason.clone());
            anyhow::ensure!(
                status.state.as_deref() != Some("Ready"),
                "Ready without its binding: {reason:?}"
            );
            Ok((status.observed_generation == ra.metadata.generation
                && reason.as_deref() == Some("ServiceExternalIPsAllowed"))
            .then_some(()))
        },
    )
    .await?;
    // The policy in force again: served, with its binding.
    policy.put(&[]).await?;
    eventually(
        "the policy in force again",
        Duration::from_secs(30),
        || async {
            Ok(forbidden_or_invalid(services.create(&dry_run, &with_ip).await).then_some(()))
        },
    )
    .await?;
    annotate(&requests, "exposer", json!({"e2e/nudge": "2"})).await?;
    access_ready(&requests, "exposer").await?;
    once_allowed("creating a Service again", || {
        as_token.create(&post, &other)
    })
    .await?;
    policy.lift().await?;

    // A policy against every Service hides whether external IPs are refused: a request made
    // meanwhile is refused, saying so.
    policy
        .put(&[json!({"expression": "false", "message": "no Services here"})])
        .await?;
    let unnamed: Service = serde_json::from_value(json!({
        "metadata": {"generateName": "plain-"},
        "spec": {"ports": [{"port": 80}]},
    }))?;
    eventually("no Service admitted", Duration::from_secs(30), || async {
        Ok(forbidden_or_invalid(services.create(&dry_run, &unnamed).await).then_some(()))
    })
    .await?;
    let spec = json!({
        "serviceAccount": {"name": "exposer-2", "namespace": apps},
        "role": {"namespace": apps, "rules": [
            {"apiGroups": [""], "resources": ["services"], "verbs": ["update"]},
        ]},
        "tokenExpirationSeconds": 600,
    });
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "exposer-2", &id, spec)?,
        )
        .await?;
    let unclear = access_condition_saying(
        &requests,
        "exposer-2",
        "ServiceExternalIPsAllowed",
        "cannot be told",
    )
    .await?;
    assert!(
        unclear.message.contains("no Services here") && unclear.message.contains("(422)"),
        "{}",
        unclear.message
    );
    requests
        .delete("exposer-2", &DeleteParams::default())
        .await?;
    policy.lift().await?;
    requests.delete("exposer", &DeleteParams::default()).await?;
    eventually("request gone", Duration::from_secs(30), || async {
        Ok(requests.get_opt("exposer").await?.is_none().then_some(()))
    })
    .await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}
