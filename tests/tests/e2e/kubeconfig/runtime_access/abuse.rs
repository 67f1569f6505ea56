//! What a RuntimeAccess must not be able to do: take over objects it did not create, use
//! credentials that are not its own, run an exec plugin, or leak a token.

use super::*;

/// Attack: a RuntimeAccess names a ServiceAccount that already exists in the runtime (a
/// system controller's in kube-system, or any workload's) with a harmless role, and gets a
/// kubeconfig with all of that account's rights. Now a protected namespace is InvalidSpec, and
/// an existing account elsewhere is refused with ServiceAccountNotOwned: no token, no Secret,
/// no binding to it. On the code before the fix both were Ready and the kubeconfig listed
/// every Secret of the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_never_hands_out_an_existing_service_account() -> Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-sa", &[]).await?;
    let shoot_admin = env.shoot_client().await?;
    let apps = env.shoot_namespace("victims").await?;
    // Powerful accounts: one in kube-system, one in a workload namespace, both cluster-admin.
    let powerful = unique("powerful-");
    for sa_ns in ["kube-system", apps.as_str()] {
        Api::<ServiceAccount>::namespaced(shoot_admin.clone(), sa_ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": powerful}}))?,
            )
            .await?;
        let crb: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": format!("{powerful}-{sa_ns}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": powerful, "namespace": sa_ns}],
        }))?;
        Api::<ClusterRoleBinding>::all(shoot_admin.clone())
            .create(&PostParams::default(), &crb)
            .await?;
    }
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let harmless = |sa_ns: &str| configmap_reader(&powerful, sa_ns, &apps);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "system", &id, harmless("kube-system"))?,
        )
        .await?;
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "borrow", &id, harmless(&apps))?,
        )
        .await?;
    // An account that does not exist yet but is already bound cluster-admin (a leftover
    // binding, or one made before its account): creating it would hand over the binding.
    let ghost = unique("ghost-");
    let ghost_binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{ghost}-binding")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": ghost, "namespace": apps}],
    }))?;
    Api::<ClusterRoleBinding>::all(shoot_admin.clone())
        .create(&PostParams::default(), &ghost_binding)
        .await?;
    let mut bound = harmless(&apps);
    bound["serviceAccount"]["name"] = json!(ghost);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "ghost", &id, bound)?,
        )
        .await?;

    // The same through a RoleBinding of another namespace (rights there), and through the
    // user name the account's tokens authenticate as.
    let elsewhere = env.shoot_namespace("elsewhere").await?;
    let ghost_rb = unique("ghost-rb-");
    let ghost_user = unique("ghost-user-");
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{ghost_rb}-binding"), "namespace": elsewhere},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"kind": "ServiceAccount", "name": ghost_rb, "namespace": apps}],
    }))?;
    Api::<RoleBinding>::namespaced(shoot_admin.clone(), &elsewhere)
        .create(&PostParams::default(), &rb)
        .await?;
    let as_user: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{ghost_user}-binding")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io",
                      "name": format!("system:serviceaccount:{apps}:{ghost_user}")}],
    }))?;
    Api::<ClusterRoleBinding>::all(shoot_admin.clone())
        .create(&PostParams::default(), &as_user)
        .await?;
    for (name, sa) in [("ghost-rb", &ghost_rb), ("ghost-user", &ghost_user)] {
        let mut bound = harmless(&apps);
        bound["serviceAccount"]["name"] = json!(sa);
        requests
            .create(
                &PostParams::default(),
                &runtime_access(&ns, name, &id, bound)?,
            )
            .await?;
    }

    let invalid = access_condition(&requests, "system", "InvalidSpec").await;
    let refused = access_condition(&requests, "borrow", "ServiceAccountNotOwned").await;
    let already_bound = access_condition(&requests, "ghost", "ServiceAccountNotOwned").await;
    let bound_elsewhere = access_condition(&requests, "ghost-rb", "ServiceAccountNotOwned").await;
    let bound_as_user = access_condition(&requests, "ghost-user", "ServiceAccountNotOwned").await;
    // No kubeconfig is checked first: a kubeconfig of the borrowed account is the attack's
    // outcome.
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    for name in ["system", "borrow", "ghost", "ghost-rb", "ghost-user"] {
        assert!(
            !exists(&secrets, &format!("{name}-kubeconfig")).await?,
            "{name}: a kubeconfig of an existing or already bound ServiceAccount was issued"
        );
    }
    let already_bound = already_bound?;
    assert!(
        already_bound.message.contains(&format!(
            "is a subject of ClusterRoleBinding/{ghost}-binding"
        )),
        "the condition names the binding: {}",
        already_bound.message
    );
    assert!(
        !exists(
            &Api::<ServiceAccount>::namespaced(shoot_admin.clone(), &apps),
            &ghost
        )
        .await?,
        "an account that a foreign binding names was created"
    );
    for (condition, binding) in [
        (
            bound_elsewhere?,
            format!("RoleBinding/{elsewhere}/{ghost_rb}-binding"),
        ),
        (
            bound_as_user?,
            format!("ClusterRoleBinding/{ghost_user}-binding"),
        ),
    ] {
        assert!(
            condition
                .message
                .contains(&format!("is a subject of {binding}")),
            "the condition names the binding: {}",
            condition.message
        );
    }
    let invalid = invalid?;
    assert!(
        invalid.message.contains("spec.serviceAccount.namespace"),
        "{}",
        invalid.message
    );
    let refused = refused?;
    assert_eq!(refused.status, "False");
    assert!(
        refused.message.contains(&format!("{apps}/{powerful}")),
        "the condition names the ServiceAccount: {}",
        refused.message
    );
    assert!(
        !exists(
            &Api::<RoleBinding>::namespaced(shoot_admin.clone(), &apps),
            &format!("kim-access:{ns}:borrow")
        )
        .await?,
        "nothing is bound to an account the request did not create"
    );

    // Deleting the requests leaves the accounts (not theirs) in place.
    for name in ["system", "borrow", "ghost", "ghost-rb", "ghost-user"] {
        requests.delete(name, &DeleteParams::default()).await?;
    }
    eventually("requests gone", Duration::from_secs(30), || async {
        let left = requests.list(&ListParams::default()).await?.items.len();
        Ok((left == 0).then_some(()))
    })
    .await?;
    for sa_ns in ["kube-system", apps.as_str()] {
        assert!(
            exists(
                &Api::<ServiceAccount>::namespaced(shoot_admin.clone(), sa_ns),
                &powerful
            )
            .await?,
            "{sa_ns}/{powerful} must stay"
        );
    }
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// Attack: whoever may patch ServiceAccounts in a namespace (a RuntimeAccess's role may grant
/// that) gives another request's account, bound to that request's rights, the UID label of a
/// request of their own that names it, or the marks of an account made before that label, and
/// gets a kubeconfig of the other request's account. Now a labelled account that a binding of
/// another request names is refused like a new one: no token, the condition names the binding,
/// and the account is not adopted. On the code before, the thief's request turned Ready. The
/// thief's request is of another runtime ID whose admin kubeconfig reaches the same cluster:
/// the KCP cannot tell that the two name one account (one runtime's second request of an
/// account waits in the KCP), so the check in the runtime is what holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_never_issues_a_token_for_another_requests_account_relabelled_as_its_own()
-> Result<()> {
    use kim_controller::access::shoot::{ANNOTATION_RUNTIME_ACCESS, LABEL_RUNTIME_ACCESS_UID};
    use kube::ResourceExt;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-relabel", &[]).await?;
    let (same_cluster, admin_too) = runtime_with_admin_kubeconfig(env, &ns).await?;
    let shoot_admin = env.shoot_client().await?;
    let apps = env.shoot_namespace("relabel").await?;
    let account = unique("victim-");
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    for (name, runtime) in [("victim", &id), ("thief", &same_cluster)] {
        requests
            .create(
                &PostParams::default(),
                &runtime_access(&ns, name, runtime, configmap_reader(&account, &apps, &apps))?,
            )
            .await?;
        if name == "victim" {
            access_ready(&requests, name).await?;
        }
    }
    let victim_uid = requests.get("victim").await?.uid().context("victim uid")?;
    let thief_uid = requests.get("thief").await?.uid().context("thief uid")?;
    let accounts: Api<ServiceAccount> = Api::namespaced(shoot_admin.clone(), &apps);
    let mark = |marks: serde_json::Value| {
        let accounts = accounts.clone();
        let account = account.clone();
        async move {
            accounts
                .patch(
                    &account,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "metadata": marks })),
                )
                .await
        }
    };
    // The thief's request is refused while it retries; a change of its annotations asks for a
    // pass at once.
    let mut nudges = 0;
    let mut refused_with = async |words: &str| -> Result<String> {
        nudges += 1;
        annotate(&requests, "thief", json!({"e2e/nudge": nudges.to_string()})).await?;
        let condition =
            access_condition_saying(&requests, "thief", "ServiceAccountNotOwned", words).await?;
        Ok(condition.message)
    };
    let not_ours = "was not created by this RuntimeAccess";
    refused_with(not_ours).await?;

    let bound = format!("is a subject of RoleBinding/{apps}/kim-access:{ns}:victim");
    let variants = [
        (
            "the thief's UID label",
            json!({"labels": {LABEL_RUNTIME_ACCESS_UID: thief_uid}}),
        ),
        (
            "the marks of an account made before the UID label",
            json!({"labels": {LABEL_RUNTIME_ACCESS_UID: null},
                   "annotations": {ANNOTATION_RUNTIME_ACCESS: format!("{ns}/thief")}}),
        ),
    ];
    for (variant, marks) in variants {
        let marked = mark(marks).await?;
        refused_with(&bound).await.context(variant)?;
        assert!(
            !exists(&secrets, "thief-kubeconfig").await?,
            "{variant}: a kubeconfig of the victim's account was issued"
        );
        // An account with the marks of one made before the UID label gets the label once it
        // is found to be the request's own: not this one.
        let live = accounts.get(&account).await?;
        assert_eq!(
            live.labels().get(LABEL_RUNTIME_ACCESS_UID),
            marked.labels().get(LABEL_RUNTIME_ACCESS_UID),
            "{variant}: the thief's request adopted the victim's account"
        );
        // The victim's marks back: the thief's request is refused as before.
        mark(json!({"labels": {LABEL_RUNTIME_ACCESS_UID: victim_uid},
                    "annotations": {ANNOTATION_RUNTIME_ACCESS: format!("{ns}/victim")}}))
        .await?;
        refused_with(not_ours).await.context(variant)?;
    }
    delete_access(&requests, &secrets, "thief", "thief-kubeconfig").await?;
    assert!(
        exists(&accounts, &account).await?,
        "the thief's cleanup deleted the victim's account"
    );
    access_ready(&requests, "victim").await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    assert_not_logged(&admin_too);
    Ok(())
}

/// Attack: an account handed to another request while its old token is still out. The
/// thief's request makes account X and gets a kubeconfig; the victim's request names X too
/// (it waits: X is the account of the thief's request, made first); the thief gives X the
/// victim's UID label and deletes its own request, whose cleanup leaves X (no longer labelled
/// the thief's). The victim's request then took X and bound its rights to it, and the thief's
/// kubeconfig, valid for its whole lifetime, carried them. Now a request never served with an
/// account makes it anew: the thief's token (bound to the old account's UID) is refused, the
/// victim's works with the victim's rights. One ServiceAccount serves one request of a
/// runtime: the victim's request waits in the KCP while the thief's exists (two live requests
/// of one account could hand it to each other between the checks in the runtime), and goes on
/// as soon as the thief's is gone, without a nudge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_of_an_account_that_another_request_takes_over_is_refused() -> Result<()> {
    use kim_controller::access::shoot::LABEL_RUNTIME_ACCESS_UID;
    use kube::ResourceExt;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-handover", &[]).await?;
    let shoot_admin = env.shoot_client().await?;
    let apps = env.shoot_namespace("handover").await?;
    let account = unique("shared-");
    let identity = format!("system:serviceaccount:{apps}:{account}");
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "thief", &id, configmap_reader(&account, &apps, &apps))?,
        )
        .await?;
    let status = access_ready(&requests, "thief").await?;
    let kept = access_kubeconfig(&secrets, &status).await?;
    let thief = access::client_from_yaml("thief", &kept).await?;
    assert_eq!(whoami(thief.clone()).await?, identity);

    // The victim's rights: listing Pods in the namespace, which the thief's role lacks.
    let failed_before = ctl.access_reconciles_with("error").await?;
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "victim", &id, pods_lister(&account, &apps, &apps))?,
        )
        .await?;
    access_condition_saying(
        &requests,
        "victim",
        "ServiceAccountNotOwned",
        &format!("is the account of RuntimeAccess {ns}/thief"),
    )
    .await?;
    // It waits in the KCP: nothing of it in the runtime, no kubeconfig.
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(shoot_admin.clone(), &apps);
    assert!(!exists(&bindings, &format!("kim-access:{ns}:victim")).await?);
    assert!(!exists(&secrets, "victim-kubeconfig").await?);
    let victim_uid = requests.get("victim").await?.uid().context("victim uid")?;
    let accounts: Api<ServiceAccount> = Api::namespaced(shoot_admin.clone(), &apps);
    let old_uid = accounts.get(&account).await?.uid();
    accounts
        .patch(
            &account,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {LABEL_RUNTIME_ACCESS_UID: victim_uid}}})),
        )
        .await?;
    // Waiting requests look again only every 5 minutes on their own: served within a minute,
    // the victim's request was run by the thief's deletion.
    delete_access(&requests, &secrets, "thief", "thief-kubeconfig").await?;
    let status = access_ready(&requests, "victim").await?;
    assert_eq!(
        ctl.access_reconciles_with("error").await?,
        failed_before,
        "waiting for the holder counted as a failed reconcile"
    );
    assert_ne!(
        accounts.get(&account).await?.uid(),
        old_uid,
        "the victim's request took over the account it was never served with"
    );
    refused_at_once("the thief's token", &thief).await?;
    let victim = access_kubeconfig(&secrets, &status).await?;
    assert_eq!(
        whoami(access::client_from_yaml("victim", &victim).await?).await?,
        identity
    );
    lists_pods(&victim, &apps).await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// Attack: a served request takes back an account it handed over. The thief's request is
/// served with account X; the victim's request names X too (refused). The thief gives X the
/// victim's UID label and revokes its own tokens, which removes its bindings (X, no longer
/// labelled its own, stays); the victim's request makes X anew and binds its rights to it. The
/// thief then gives the new X its own UID label: its status still lists an account of that
/// name, so at its next token the account counted as its own, and the token carried the
/// victim's rights. Now a binding another RuntimeAccess made that names the account refuses it
/// (`ServiceAccountNotOwned` naming the victim's binding), no kubeconfig is written, and a
/// revocation does not delete the victim's account either. As in
/// `runtime_access_never_issues_a_token_for_another_requests_account_relabelled_as_its_own`, the
/// thief's request is of another runtime ID of the same cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_request_never_takes_back_an_account_it_handed_over() -> Result<()> {
    use kim_controller::access::shoot::LABEL_RUNTIME_ACCESS_UID;
    use kube::ResourceExt;

    use kim_controller::access::reconcile::ANNOTATION_REVOKE_TOKENS as REVOKE;
    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-takeback", &[]).await?;
    let (same_cluster, admin_too) = runtime_with_admin_kubeconfig(env, &ns).await?;
    let shoot_admin = env.shoot_client().await?;
    let apps = env.shoot_namespace("takeback").await?;
    let account = unique("shared-");
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let accounts: Api<ServiceAccount> = Api::namespaced(shoot_admin.clone(), &apps);
    let label = |uid: String| {
        let accounts = accounts.clone();
        let account = account.clone();
        async move {
            accounts
                .patch(
                    &account,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {LABEL_RUNTIME_ACCESS_UID: uid}}})),
                )
                .await
        }
    };
    requests
        .create(
            &PostParams::default(),
            &runtime_access(
                &ns,
                "thief",
                &same_cluster,
                configmap_reader(&account, &apps, &apps),
            )?,
        )
        .await?;
    access_ready(&requests, "thief").await?;
    let thief_uid = requests.get("thief").await?.uid().context("thief uid")?;
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "victim", &id, pods_lister(&account, &apps, &apps))?,
        )
        .await?;
    access_condition(&requests, "victim", "ServiceAccountNotOwned").await?;
    let victim_uid = requests.get("victim").await?.uid().context("victim uid")?;

    // Handed over: the thief's bindings go with its revocation, the account stays. (With its
    // Secret, which records the account its tokens were issued for, the revocation would
    // delete that account whatever its label; a Secret written before that record does not.)
    label(victim_uid).await?;
    secrets
        .delete("thief-kubeconfig", &DeleteParams::default())
        .await?;
    annotate(&requests, "thief", json!({REVOKE: "true"})).await?;
    let thief_binding = format!("kim-access:{ns}:thief");
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(shoot_admin.clone(), &apps);
    eventually(
        "the thief's binding gone",
        Duration::from_secs(60),
        || async { Ok((!exists(&bindings, &thief_binding).await?).then_some(())) },
    )
    .await?;
    annotate(&requests, "thief", json!({REVOKE: null})).await?;
    annotate(&requests, "victim", json!({"e2e/nudge": "1"})).await?;
    let status = access_ready(&requests, "victim").await?;
    let victims = accounts.get(&account).await?.uid();

    // Taken back: the thief's label on the new account, and a token due (its Secret gone).
    label(thief_uid).await?;
    let thief_secret = "thief-kubeconfig";
    if exists(&secrets, thief_secret).await? {
        secrets
            .delete(thief_secret, &DeleteParams::default())
            .await?;
    }
    annotate(&requests, "thief", json!({"e2e/nudge": "1"})).await?;
    let refused = access_condition_saying(
        &requests,
        "thief",
        "ServiceAccountNotOwned",
        &format!("RoleBinding/{apps}/kim-access:{ns}:victim"),
    )
    .await?;
    assert_eq!(refused.status, "False");
    assert!(
        !exists(&secrets, thief_secret).await?,
        "a kubeconfig of the victim's account was issued to the thief"
    );
    // A revocation of the thief's tokens leaves the victim's account alone: refused (alerted
    // through the state gauge), and no failed reconcile.
    let failed_before = ctl.access_reconciles_with("error").await?;
    annotate(&requests, "thief", json!({REVOKE: "true"})).await?;
    access_condition_saying(
        &requests,
        "thief",
        "RevocationRefused",
        &format!("revoking the tokens: ServiceAccount {apps}/{account} is a subject of RoleBinding/{apps}/kim-access:{ns}:victim, which this RuntimeAccess did not create: it is another's account"),
    )
    .await?;
    ctl.assert_no_access_failure_since(
        failed_before,
        "a refused revocation counted as a failed reconcile",
    )
    .await?;
    assert_eq!(
        accounts.get(&account).await?.uid(),
        victims,
        "the thief's revocation deleted the victim's account"
    );
    lists_pods(&access_kubeconfig(&secrets, &status).await?, &apps).await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    assert_not_logged(&admin_too);
    Ok(())
}

/// Attack: a RuntimeAccess names an existing Secret of the namespace as its kubeconfig Secret;
/// the controller overwrote it and deleted it with the request. Now: SecretNotOwned naming it,
/// untouched, and still there after the request is gone. On the code before the fix the
/// request became Ready and the Secret was overwritten, owned and then deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_cannot_overwrite_or_delete_a_secret_it_does_not_own() -> Result<()> {
    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-secret", &[]).await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let apps = env.shoot_namespace("ra-secret").await?;
    // Another consumer's kubeconfig Secret, of the form a RuntimeAccess may name.
    let victim = victim_secret(&secrets, "klm-kubeconfig").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let mut spec = configmap_reader("thief", &apps, &apps);
    spec["secret"] = json!({"name": "klm-kubeconfig"});
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "thief", &id, spec)?,
        )
        .await?;
    // A name of the control plane's own Secrets is refused before any Secret is looked at,
    // whether it exists or not (it could be claimed while absent).
    let mut spec = configmap_reader("claimer", &apps, &apps);
    spec["secret"] = json!({"name": "gardener-credentials"});
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "claimer", &id, spec)?,
        )
        .await?;
    // The Secret is checked first: what happened to it is the attack's outcome.
    let condition = access_condition(&requests, "thief", "SecretNotOwned").await;
    let claimed = access_condition(&requests, "claimer", "InvalidSpec").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_untouched(&secrets, &victim).await?;
    assert!(
        !exists(&secrets, "gardener-credentials").await?,
        "a RuntimeAccess claimed the name of the Gardener credentials"
    );
    let condition = condition?;
    assert!(
        condition
            .message
            .contains(&format!("Secret {ns}/klm-kubeconfig")),
        "the condition names the Secret: {}",
        condition.message
    );
    let claimed = claimed?;
    assert!(
        claimed.message.contains("spec.secret.name"),
        "{}",
        claimed.message
    );
    // A request that took the usual name of another's Secret first: the other is told whose
    // it is.
    let mut spec = configmap_reader("squatter", &apps, &apps);
    spec["secret"] = json!({"name": "later-kubeconfig"});
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "squatter", &id, spec)?,
        )
        .await?;
    access_ready(&requests, "squatter").await?;
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "later", &id, configmap_reader("later", &apps, &apps))?,
        )
        .await?;
    let taken = access_condition(&requests, "later", "SecretNotOwned").await?;
    assert!(
        taken
            .message
            .contains(&format!("the Secret of RuntimeAccess {ns}/squatter")),
        "{}",
        taken.message
    );
    for name in ["thief", "claimer", "squatter", "later"] {
        requests.delete(name, &DeleteParams::default()).await?;
    }
    eventually("requests gone", Duration::from_secs(30), || async {
        let left = requests.list(&ListParams::default()).await?.items.len();
        Ok((left == 0).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_untouched(&secrets, &victim).await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Kubeconfigs read from Secrets

/// Attack: whoever can write a runtime's admin kubeconfig Secret (or a Secret recognised as
/// one) puts an exec credential plugin in it; building the shoot client ran that program in
/// the controller's container. Now the kubeconfig is refused with a condition naming the exec
/// plugin and the program never runs. On the code before the fix the marker file appeared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_kubeconfig_with_an_exec_plugin_is_refused_and_never_run() -> Result<()> {
    let Setup {
        env,
        ns,
        ctl,
        id: _,
        admin,
        kcp,
    } = set_up("kc-exec", &[]).await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let dir = tempfile::tempdir()?;
    let marker = dir.path().join("exec-ran");
    // The admin kubeconfig's cluster, with an exec plugin instead of the client certificate.
    let mut kc: serde_json::Value = serde_yaml_ng::from_str(&admin)?;
    kc["users"] = json!([{"name": "evil", "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "/bin/sh",
        "args": ["-c", format!("touch {}; exit 1", marker.display())],
        "interactiveMode": "Never",
    }}}]);
    for c in kc["contexts"].as_array_mut().context("contexts")? {
        c["context"]["user"] = json!("evil");
    }
    let id = unique("rt-");
    // Recognised as upstream's Secret of this runtime, synced just now: the GardenerCluster
    // reconciler adopts it and leaves its data alone.
    let upstream: Secret = serde_json::from_value(json!({
        "metadata": {
            "name": format!("kubeconfig-{id}"),
            "labels": {
                "kyma-project.io/runtime-id": id,
                "operator.kyma-project.io/managed-by": "infrastructure-manager",
            },
            "annotations": {LAST_SYNC: jiff::Timestamp::now().to_string()},
        },
        "stringData": {"config": serde_yaml_ng::to_string(&kc)?},
    }))?;
    secrets.create(&PostParams::default(), &upstream).await?;
    Api::<GardenerCluster>::namespaced(kcp.clone(), &ns)
        .create(
            &PostParams::default(),
            &gardener_cluster(&ns, &id, "no-shoot"),
        )
        .await?;
    let apps = env.shoot_namespace("exec").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let spec = configmap_reader("reader", &apps, &apps);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "reader", &id, spec)?,
        )
        .await?;
    let condition = access_condition(&requests, "reader", "AdminKubeconfigUnusable").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !marker.exists(),
        "the exec plugin of a kubeconfig from a Secret ran in the controller"
    );
    let condition = condition?;
    assert!(
        condition.message.contains("exec"),
        "the condition names the exec plugin: {}",
        condition.message
    );
    requests.delete("reader", &DeleteParams::default()).await?;
    ctl.stop().await;
    assert!(!marker.exists(), "not during the cleanup either");
    assert_not_logged(&admin);
    Ok(())
}

/// Attack: a GardenerCluster (which whoever may write GardenerClusters controls) naming a
/// Secret the controller does not own, such as the Gardener credentials or another runtime's
/// kubeconfig, had the RuntimeAccess reconciler act in that cluster with it and hand out a
/// token there. Now only the GardenerCluster's own kubeconfig Secret is used: the request
/// waits and nothing is created with the foreign credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_access_never_uses_a_secret_its_gardener_cluster_does_not_own() -> Result<()> {
    let Setup {
        env,
        ns,
        ctl,
        id: _,
        admin,
        kcp,
    } = set_up("kc-foreign", &[]).await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let id = unique("rt-");
    // Working credentials of the shoot cluster, in a Secret the controller did not write.
    let foreign = format!("credentials-{id}");
    let credentials: Secret = serde_json::from_value(json!({
        "metadata": {"name": foreign},
        "stringData": {"kubeconfig": admin},
    }))?;
    secrets.create(&PostParams::default(), &credentials).await?;
    let mut gc = gardener_cluster(&ns, &id, "no-shoot");
    gc.spec.kubeconfig.secret.name = foreign.clone();
    gc.spec.kubeconfig.secret.key = "kubeconfig".into();
    Api::<GardenerCluster>::namespaced(kcp.clone(), &ns)
        .create(&PostParams::default(), &gc)
        .await?;
    let apps = env.shoot_namespace("foreign").await?;
    let account = unique("reader-");
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let spec = configmap_reader(&account, &apps, &apps);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "reader", &id, spec)?,
        )
        .await?;
    let condition = access_condition(&requests, "reader", "RuntimeNotReady").await?;
    assert!(
        condition
            .message
            .contains("waiting for the admin kubeconfig"),
        "{}",
        condition.message
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(env.shoot_client().await?, &apps);
    assert!(
        accounts.get_opt(&account).await?.is_none(),
        "a ServiceAccount was created with credentials the GardenerCluster does not own"
    );
    assert!(
        secrets.get_opt("reader-kubeconfig").await?.is_none(),
        "a kubeconfig was handed out"
    );
    requests.delete("reader", &DeleteParams::default()).await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// A binding of the name a request would use, made by someone else with another roleRef: the
/// controller must not delete it to make its own (Kubernetes forbids changing a roleRef, which
/// is when the controller replaces its own bindings). The request fails naming it; on the code
/// before, the binding was deleted and replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_never_replaces_a_binding_it_did_not_make() -> Result<()> {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    use kube::ResourceExt;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-taken", &[]).await?;
    let shoot_admin = env.shoot_client().await?;
    let sa_ns = env.shoot_namespace("taken").await?;
    let name = format!("kim-access:{ns}:taker");
    let bindings: Api<ClusterRoleBinding> = Api::all(shoot_admin.clone());
    let theirs = bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "ServiceAccount", "name": "someone", "namespace": sa_ns}],
            }))?,
        )
        .await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let rules = json!([{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(
                &ns,
                "taker",
                &id,
                json!({
                    "serviceAccount": {"name": "taker", "namespace": sa_ns},
                    "clusterRole": {"rules": rules},
                    "tokenExpirationSeconds": 600,
                }),
            )?,
        )
        .await?;
    let condition = access_condition(&requests, "taker", "RoleNotOwned").await?;
    assert!(condition.message.contains(&name), "{}", condition.message);
    let live = bindings.get(&name).await?;
    assert_eq!(live.uid(), theirs.uid(), "their binding was replaced");
    assert_eq!(live.role_ref.name, "view");

    // A role of the request's name that someone else made is not rewritten either (a forced
    // apply would take it over, rules and all, and leave an aggregationRule of theirs).
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let role_name = format!("kim-access:{ns}:taker2");
    let roles: Api<ClusterRole> = Api::all(shoot_admin.clone());
    let their_role = roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": role_name},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
            }))?,
        )
        .await?;
    requests
        .create(
            &PostParams::default(),
            &runtime_access(
                &ns,
                "taker2",
                &id,
                json!({
                    "serviceAccount": {"name": "taker2", "namespace": sa_ns},
                    "clusterRole": {"rules": rules},
                    "tokenExpirationSeconds": 600,
                }),
            )?,
        )
        .await?;
    let condition = access_condition(&requests, "taker2", "RoleNotOwned").await?;
    assert!(
        condition.message.contains(&role_name)
            && condition
                .message
                .contains("was not created by this RuntimeAccess"),
        "{}",
        condition.message
    );
    let live = roles.get(&role_name).await?;
    assert_eq!(live.uid(), their_role.uid());
    assert_eq!(
        live.rules.as_ref().map(|r| r[0].resources.clone()),
        Some(Some(vec!["pods".to_owned()])),
        "their role was rewritten"
    );
    assert!(
        bindings.get_opt(&role_name).await?.is_none(),
        "a binding to their role was made"
    );

    // An aggregationRule added to a role the controller made would decide what the request
    // grants from then on: its next apply is refused, the role left as it is.
    let agg_name = format!("kim-access:{ns}:agg");
    requests
        .create(
            &PostParams::default(),
            &runtime_access(
                &ns,
                "agg",
                &id,
                json!({
                    "serviceAccount": {"name": "agg", "namespace": sa_ns},
                    "clusterRole": {"rules": rules},
                    "tokenExpirationSeconds": 600,
                }),
            )?,
        )
        .await?;
    access_ready(&requests, "agg").await?;
    roles
        .patch(
            &agg_name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"aggregationRule": {"clusterRoleSelectors": [
                {"matchLabels": {"e2e-aggregate": "all"}}]}})),
        )
        .await?;
    requests
        .patch(
            "agg",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"clusterRole": {"rules": [
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list"]}]}}})),
        )
        .await?;
    let condition = access_condition(&requests, "agg", "RoleNotOwned").await?;
    assert!(
        condition.message.contains("has an aggregationRule"),
        "{}",
        condition.message
    );
    assert!(roles.get(&agg_name).await?.aggregation_rule.is_some());
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// The RuntimeAccess twin of the GardenerCluster's quoting test: an answer to the token
/// kubeconfig's Secret write, and to its delete, that quotes the Secret (as an admission
/// webhook or a policy engine on Secrets may) shows no part of the kubeconfig in the
/// condition, the Events or the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_secret_write_that_quotes_the_token_leaks_it_nowhere() -> Result<()> {
    use k8s_openapi::api::events::v1::Event;
    use kim_tests::faultproxy::{FaultProxy, Rule};
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-ra-echo").await?;
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let ctl = Controller::start_via(env, &ns, &[], Some(proxy.access_via(env.kcp()))).await?;
    let (id, _admin) = runtime_with_admin_kubeconfig(env, &ns).await?;
    let kcp = env.kcp_client().await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let apps = env.shoot_namespace("echo").await?;
    // The token kubeconfig's first write is a create.
    let (quoted, fault) = echo_bodies();
    proxy.inject(Rule {
        method: Some("POST".into()),
        path_contains: format!("/namespaces/{ns}/secrets"),
        fault,
        times: None,
    });
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "reader", &id, configmap_reader("reader", &apps, &apps))?,
        )
        .await?;
    let refused = access_condition(&requests, "reader", "SecretWriteFailed").await?;
    let body = quoted
        .lock()
        .unwrap()
        .first()
        .cloned()
        .context("no Secret write")?;
    let written: Secret = serde_json::from_slice(&body)?;
    let kubeconfig = written
        .data
        .as_ref()
        .and_then(|d| d.values().next())
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .context("the write carried no kubeconfig")?;
    let token = token_of(&kubeconfig).context("no token in the kubeconfig")?;
    let encoded = encoded_data(&written).context("encoded data")?;
    assert!(
        refused.message.contains("echo.policy.example") && refused.message.contains("<redacted>"),
        "{}",
        refused.message
    );

    // Written once the refusal stops; then its delete is refused, quoting the stored Secret.
    proxy.clear();
    let status = access_ready(&requests, "reader").await?;
    let secret_name = status
        .secret_ref
        .as_ref()
        .context("secretRef")?
        .name
        .clone();
    let stored = secrets.get(&secret_name).await?;
    let stored_kubeconfig = access_kubeconfig(&secrets, &status).await?;
    let stored_token = token_of(&stored_kubeconfig).context("no stored token")?;
    let stored_encoded = encoded_data(&stored).context("stored encoded data")?;
    let old_object = serde_json::to_string(&stored)?;
    proxy.inject(Rule {
        method: Some("DELETE".into()),
        path_contains: format!("/namespaces/{ns}/secrets/{secret_name}"),
        fault: echo_refusal(move |_| old_object.clone()),
        times: None,
    });
    requests.delete("reader", &DeleteParams::default()).await?;
    let refused_delete = format!("deleting Secret {ns}/{secret_name}");
    eventually(
        "the refused delete logged",
        Duration::from_secs(60),
        || async {
            Ok(log_text()
                .lines()
                .any(|l| l.contains("echo.policy.example") && l.contains(&refused_delete))
                .then_some(()))
        },
    )
    .await?;
    assert!(
        proxy.served().iter().any(|s| s.method == "DELETE"),
        "the delete was not refused"
    );
    proxy.clear();
    eventually(
        "the RuntimeAccess gone once the refusal stops",
        Duration::from_secs(60),
        || async { Ok(requests.get_opt("reader").await?.is_none().then_some(())) },
    )
    .await?;
    ctl.stop().await;

    let notes: Vec<String> = Api::<Event>::namespaced(kcp, &ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("echo.policy.example")),
        "no Event of the refused write: {notes:?}"
    );
    let log = log_text();
    for shown in notes.iter().chain([&refused.message, &log]) {
        for secret in [&token, &stored_token] {
            assert!(!shown.contains(secret.as_str()), "a token is shown");
        }
        for encoded in [&encoded, &stored_encoded] {
            assert_no_piece(shown, encoded, "an encoded kubeconfig");
        }
    }
    assert_not_in(&refused.message, &kubeconfig, "the status");
    assert_not_logged(&kubeconfig);
    assert_not_logged(&stored_kubeconfig);
    Ok(())
}

/// A finalizer on the request's account (a controller of the runtime's, or another request's
/// token that may patch ServiceAccounts in its namespace; the request's own may not) keeps it
/// terminating after the revocation's delete. The pass went on with that account: bindings
/// applied again and a token issued for it, `Ready`/`KubeconfigRevoked`, while the API server
/// stops taking tokens of an account deleted a minute ago, the new one included. Now: the
/// revocation takes the bindings and says the account is held (`ServiceAccountBeingDeleted`
/// naming the finalizer), issues nothing, and makes the account anew once the finalizer is
/// gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalizer_on_the_account_does_not_outlive_a_revocation() -> Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::rbac::v1::RoleBinding;
    use kim_controller::access::reconcile::ANNOTATION_REVOKE_TOKENS as REVOKE;
    use kube::ResourceExt;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-hold", &[]).await?;
    let shoot_admin = env.shoot_client().await?;
    let apps = env.shoot_namespace("hold").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let spec = json!({
        "serviceAccount": {"name": "holder", "namespace": apps},
        "role": {"namespace": apps, "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
        ]},
        "tokenExpirationSeconds": 3600,
    });
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "holder", &id, spec)?,
        )
        .await?;
    let status = access_ready(&requests, "holder").await?;
    let leaked = access_kubeconfig(&secrets, &status).await?;
    let leaked_client = access::client_from_yaml("leaked", &leaked).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(shoot_admin.clone(), &apps);
    let held_uid = accounts
        .patch(
            "holder",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["e2e.kyma-project.io/hold"]}})),
        )
        .await?
        .uid();

    annotate(&requests, "holder", json!({REVOKE: "true"})).await?;
    let held = access_condition_saying(
        &requests,
        "holder",
        "ServiceAccountBeingDeleted",
        "e2e.kyma-project.io/hold",
    )
    .await?;
    assert!(
        held.message.contains("is being deleted"),
        "{}",
        held.message
    );
    let bindings: Api<RoleBinding> = Api::namespaced(shoot_admin.clone(), &apps);
    let binding = format!("kim-access:{ns}:holder");
    assert!(
        !exists(&bindings, &binding).await?,
        "the binding was applied again"
    );
    assert_eq!(
        token_of(&access_kubeconfig(&secrets, &status).await?),
        token_of(&leaked),
        "a token was issued for the account being deleted"
    );
    // The leaked token reads nothing (its bindings are gone), and the API server stops taking
    // it a minute after the account's deletion.
    let leaked_reads = Api::<ConfigMap>::namespaced(leaked_client.clone(), &apps);
    eventually(
        "the leaked token refused",
        Duration::from_secs(30),
        || async {
            Ok(match leaked_reads.list(&Default::default()).await {
                Err(kube::Error::Api(s)) if [401, 403].contains(&s.code) => Some(()),
                _ => None,
            })
        },
    )
    .await?;
    refused_within("the leaked token", &leaked_client, Duration::from_secs(90)).await?;
    assert!(
        accounts.get("holder").await?.uid() == held_uid,
        "the held account is still there"
    );

    // The finalizer goes: the account is made anew, and the request served with it.
    accounts
        .patch(
            "holder",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    let revoked = revoked(&requests, "holder", Duration::from_secs(90)).await?;
    assert_ne!(accounts.get("holder").await?.uid(), held_uid);
    let fresh = access_kubeconfig(&secrets, revoked.status.as_ref().context("status")?).await?;
    let fresh_client = access::client_from_yaml("fresh", &fresh).await?;
    let (fresh_reads, everything) = (
        Api::<ConfigMap>::namespaced(fresh_client.clone(), &apps),
        Default::default(),
    );
    once_allowed("the new kubeconfig's read", || {
        fresh_reads.list(&everything)
    })
    .await?;
    refused_at_once("the leaked token", &leaked_client).await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    assert_not_logged(&leaked);
    assert_not_logged(&fresh);
    Ok(())
}

/// Attack: a request whose role may run workloads in the namespace where another request keeps
/// its ServiceAccount (Pod Security `baseline` there, so the workload rule lets it pass) makes a
/// Pod with `serviceAccountName` of that account: the other request's rights, and past its
/// revocation (the kubelet asks for the token of the account by name). Now the later of the two
/// is refused (`AccountNamespaceShared` naming the other), nothing is made for it in the
/// runtime, and it is served as soon as the other is gone; a request whose account would be
/// where another's role writes workloads is refused the same way. No failed reconcile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_never_runs_workloads_where_another_keeps_its_account() -> Result<()> {
    use k8s_openapi::api::core::v1::Namespace;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-shared-ns", &[]).await?;
    let shoot_admin = env.shoot_client().await?;
    let team = env.shoot_namespace("team").await?;
    let accounts = env.shoot_namespace("runners").await?;
    Api::<Namespace>::all(shoot_admin.clone())
        .patch(
            &team,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "baseline"}}})),
        )
        .await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "owner", &id, configmap_reader("owner", &team, &team))?,
        )
        .await?;
    access_ready(&requests, "owner").await?;
    let failed_before = ctl.access_reconciles_with("error").await?;
    let runner = |name: &str, account_ns: &str| {
        json!({
            "serviceAccount": {"name": name, "namespace": account_ns},
            "role": {"namespace": team, "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create"]}]},
            "tokenExpirationSeconds": 600,
        })
    };
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "runner", &id, runner("runner", &accounts))?,
        )
        .await?;
    let refused = access_condition_saying(
        &requests,
        "runner",
        "AccountNamespaceShared",
        &format!("where RuntimeAccess {ns}/owner keeps its ServiceAccount owner"),
    )
    .await?;
    assert!(
        refused.message.contains("spec.role writes \"pods\""),
        "{}",
        refused.message
    );
    assert!(!exists(&secrets, "runner-kubeconfig").await?);
    assert!(
        !exists(
            &Api::<ServiceAccount>::namespaced(shoot_admin.clone(), &accounts),
            "runner"
        )
        .await?,
        "nothing is made in the runtime for a refused request"
    );
    ctl.assert_no_access_failure_since(failed_before, "a refusal counted as a failed reconcile")
        .await?;

    // The owner goes: the runner is served at once, not at its fallback five minutes later.
    delete_access(&requests, &secrets, "owner", "owner-kubeconfig").await?;
    access_ready(&requests, "runner").await?;
    // Now a request whose account would be where the runner runs Pods is the later one.
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "late", &id, configmap_reader("late", &team, &team))?,
        )
        .await?;
    access_condition_saying(
        &requests,
        "late",
        "AccountNamespaceShared",
        &format!("spec.serviceAccount is in namespace {team}"),
    )
    .await?;
    assert!(!exists(&secrets, "late-kubeconfig").await?);
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// Attack: whoever may create Secrets in the KCP namespace and RuntimeAccesses forges the
/// record of a request that was never served (a Secret with the request's marks whose
/// `service-account-uid` is the UID of another request's account), then deletes the request:
/// its cleanup would delete the account of that UID whatever its marks, ending the other
/// request's access. Now the record counts only for a request whose status lists the account
/// (written only by the controller): the victim's account stays and its kubeconfig works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_account_record_never_deletes_another_requests_account() -> Result<()> {
    use kim_controller::access::token::ANNOTATION_SERVICE_ACCOUNT_UID;
    use kube::ResourceExt;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-forged", &[]).await?;
    let apps = env.shoot_namespace("forged").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let accounts: Api<ServiceAccount> = Api::namespaced(env.shoot_client().await?, &apps);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "victim", &id, pods_lister("shared", &apps, &apps))?,
        )
        .await?;
    let status = access_ready(&requests, "victim").await?;
    let victims = accounts.get("shared").await?.uid().context("account uid")?;
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "forger", &id, configmap_reader("shared", &apps, &apps))?,
        )
        .await?;
    access_condition(&requests, "forger", "ServiceAccountNotOwned").await?;
    let forger = requests.get("forger").await?;
    let forged: Secret = serde_json::from_value(json!({
        "metadata": {
            "name": "forger-kubeconfig",
            "labels": {kim_shared::names::LABEL_MANAGED_BY: kim_shared::names::MANAGED_BY_INFRASTRUCTURE_MANAGER},
            "annotations": {ANNOTATION_SERVICE_ACCOUNT_UID: victims},
            "ownerReferences": [{
                "apiVersion": "infrastructuremanager.kyma-project.io/v1",
                "kind": "RuntimeAccess",
                "name": "forger",
                "uid": forger.uid().context("forger uid")?,
            }],
        },
        "data": {"config": ""},
    }))?;
    secrets.create(&PostParams::default(), &forged).await?;
    delete_access(&requests, &secrets, "forger", "forger-kubeconfig").await?;
    assert_eq!(
        accounts.get("shared").await?.uid().as_deref(),
        Some(victims.as_str()),
        "the forged record deleted the victim's account"
    );
    let victim = access_kubeconfig(&secrets, &status).await?;
    lists_pods(&victim, &apps).await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    assert_not_logged(&victim);
    Ok(())
}
