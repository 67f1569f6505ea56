//! Cleanup and deletion: what goes with a spec change or the deletion (and only that), and
//! deletion while the runtime cannot be reached or is gone.

use super::*;

// ---------------------------------------------------------------------------------------------
// RuntimeAccess cleanup

/// Attack: the list of objects the cleanup deletes comes from the KCP Secret's annotation (and
/// the status), which others can write: adding an object of the shoot (here a
/// ClusterRoleBinding and a ServiceAccount someone else made) had the controller delete it
/// with the request. Now only objects with this request's label are deleted. On the code
/// before the fix both victims were deleted. Neither is a ServiceAccount that carries the
/// request's UID label, copied by someone who may patch but not delete it: the cleanup looks
/// for the request's account only by its name. The request carries `skip-shoot-cleanup=true`,
/// which must not keep a reachable runtime's objects (it did before: the cleanup skipped the
/// runtime without trying).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_cleanup_deletes_only_objects_it_labelled() -> Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-clean", &[]).await?;
    let shoot_admin = env.shoot_client().await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let apps = env.shoot_namespace("clean").await?;
    let victim = unique("victim-");
    let crbs: Api<ClusterRoleBinding> = Api::all(shoot_admin.clone());
    let accounts: Api<ServiceAccount> = Api::namespaced(shoot_admin.clone(), &apps);
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": victim}}))?,
        )
        .await?;
    crbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": victim},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": victim, "namespace": apps}],
        }))?,
    )
    .await?;

    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let spec = configmap_reader("reader", &apps, &apps);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "reader", &id, spec)?,
        )
        .await?;
    let status = access_ready(&requests, "reader").await?;
    let secret_name = status.secret_ref.clone().context("secretRef")?.name;
    // Another account carrying the request's label.
    let labelled_victim = unique("labelled-");
    let uid = requests.get("reader").await?.metadata.uid.context("uid")?;
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": labelled_victim,
                "labels": {kim_controller::access::shoot::LABEL_RUNTIME_ACCESS_UID: uid}}}))?,
        )
        .await?;
    // The recorded list, with the victims added.
    const SHOOT_OBJECTS: &str = "infrastructuremanager.kyma-project.io/shoot-objects";
    let secret = secrets.get(&secret_name).await?;
    let mut recorded: Vec<serde_json::Value> = serde_json::from_str(
        secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SHOOT_OBJECTS))
            .context("the Secret records the shoot objects")?,
    )?;
    recorded.push(json!({"kind": "ClusterRoleBinding", "name": victim}));
    recorded.push(json!({"kind": "ServiceAccount", "name": victim, "namespace": apps}));
    secrets
        .patch(
            &secret_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                SHOOT_OBJECTS: serde_json::to_string(&recorded)?
            }}})),
        )
        .await?;
    // The way out for an unreachable runtime, set on a reachable one: it must not leave the
    // access behind.
    requests
        .patch(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "infrastructuremanager.kyma-project.io/skip-shoot-cleanup": "true"
            }}})),
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    delete_access(&requests, &secrets, "reader", &secret_name).await?;

    // The request's own objects are gone, the victims are not.
    let rbac = format!("kim-access:{ns}:reader");
    eventually("own objects removed", Duration::from_secs(15), || async {
        let gone = !exists(&accounts, "reader").await?
            && !exists(&Api::<Role>::namespaced(shoot_admin.clone(), &apps), &rbac).await?
            && !exists(
                &Api::<RoleBinding>::namespaced(shoot_admin.clone(), &apps),
                &rbac,
            )
            .await?;
        Ok(gone.then_some(()))
    })
    .await?;
    assert!(
        exists(&crbs, &victim).await?,
        "a ClusterRoleBinding the request did not create was deleted"
    );
    assert!(
        exists(&accounts, &victim).await?,
        "a ServiceAccount the request did not create was deleted"
    );
    assert!(
        exists(&accounts, &labelled_victim).await?,
        "a ServiceAccount carrying a copy of the request's label was deleted"
    );
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// Objects a pass applied before a later step of it failed are in no record (status, Secret):
/// they must not outlive a spec change or the request, still granting access. Simulated by
/// bindings of the request's name carrying its label that no record names (a RoleBinding in
/// the namespace an earlier spec named, a ClusterRoleBinding of an earlier `clusterRole`).
/// On the code before, both stayed: the stale check and the cleanup trusted the records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_objects_no_record_names_go_with_a_spec_change_and_the_deletion()
-> Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
    use kube::ResourceExt;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-unrec", &[]).await?;
    let shoot_admin = env.shoot_client().await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let apps = env.shoot_namespace("unrec").await?;
    let other = env.shoot_namespace("unrec-other").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let spec = configmap_reader("reader", &apps, &apps);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "reader", &id, spec)?,
        )
        .await?;
    let status = access_ready(&requests, "reader").await?;
    let secret_name = status.secret_ref.clone().context("secretRef")?.name;
    let uid = requests.get("reader").await?.uid().context("uid")?;
    let rbac_name = kim_shared::access::shoot_rbac_name(&ns, "reader");
    let binding = |name: &str| -> Result<serde_json::Value> {
        Ok(json!({
            "metadata": {"name": name, "labels": {
                "infrastructuremanager.kyma-project.io/runtime-access-uid": uid,
                "operator.kyma-project.io/managed-by": "infrastructure-manager",
            }},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": apps}],
        }))
    };
    let role_bindings: Api<RoleBinding> = Api::namespaced(shoot_admin.clone(), &other);
    role_bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(binding(&rbac_name)?)?,
        )
        .await?;

    // A spec change: what carries the label and the new spec does not want goes.
    requests
        .patch(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"role": {"namespace": apps, "rules": [
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}}})),
        )
        .await?;
    eventually("spec change applied", Duration::from_secs(30), || async {
        let status = requests.get("reader").await?.status.unwrap_or_default();
        Ok(
            (status.observed_generation == Some(2) && status.state.as_deref() == Some("Ready"))
                .then_some(()),
        )
    })
    .await?;
    eventually(
        "unrecorded RoleBinding removed",
        Duration::from_secs(15),
        || async { Ok((!exists(&role_bindings, &rbac_name).await?).then_some(())) },
    )
    .await?;

    // Another Secret name: the kubeconfig moves, and no copy stays under the old name.
    let rename = |name: &'static str| {
        let requests = requests.clone();
        async move {
            let change = Patch::Merge(json!({"spec": {"secret": {"name": name}}}));
            requests
                .patch("reader", &PatchParams::default(), &change)
                .await
        }
    };
    let renamed = "reader-renamed-kubeconfig";
    rename(renamed).await?;
    eventually(
        "the renamed Secret served",
        Duration::from_secs(30),
        || async {
            let status = requests.get("reader").await?.status.unwrap_or_default();
            Ok(
                (status.secret_ref.as_ref().map(|r| r.name.as_str()) == Some(renamed)
                    && status.state.as_deref() == Some("Ready"))
                .then_some(()),
            )
        },
    )
    .await?;
    assert!(
        secrets
            .get(renamed)
            .await?
            .data
            .is_some_and(|d| d.contains_key("config")),
        "the renamed Secret holds the kubeconfig"
    );
    assert!(
        secrets.get_opt(&secret_name).await?.is_none(),
        "the Secret of the old name stayed with its token"
    );

    // A pass cut off after a rename wrote its Secret but not the status (the status still
    // names `renamed`), then another rename: every Secret of this request but the current one
    // goes, the one in between too. A Secret with the same labels that is not this request's
    // stays.
    // Owned by the request, or by another one of the same name (another UID).
    let secret_of = |name: &str, owned: bool| -> Result<Secret> {
        let owner_uid = if owned {
            uid.clone()
        } else {
            "0c5a2e35-4d4b-4d4e-9b7e-2f1f5d0a9e61".to_owned()
        };
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {
                "operator.kyma-project.io/managed-by": "infrastructure-manager",
                "kyma-project.io/runtime-id": id,
            }, "ownerReferences": [{"apiVersion": "infrastructuremanager.kyma-project.io/v1",
                "kind": "RuntimeAccess", "name": "reader", "uid": owner_uid, "controller": true}]},
            "stringData": {"config": "a kubeconfig"},
        }))?)
    };
    let between = "reader-between-kubeconfig";
    let foreign = "reader-foreign-kubeconfig";
    secrets
        .create(&PostParams::default(), &secret_of(between, true)?)
        .await?;
    secrets
        .create(&PostParams::default(), &secret_of(foreign, false)?)
        .await?;
    let last = "reader-last-kubeconfig";
    rename(last).await?;
    eventually(
        "the last Secret served, every other of the request gone",
        Duration::from_secs(30),
        || async {
            let status = requests.get("reader").await?.status.unwrap_or_default();
            let served = status.secret_ref.as_ref().map(|r| r.name.as_str()) == Some(last)
                && status.state.as_deref() == Some("Ready");
            let left = secrets.get_opt(renamed).await?.is_some()
                || secrets.get_opt(between).await?.is_some();
            Ok((served && !left).then_some(()))
        },
    )
    .await?;
    assert!(
        secrets.get_opt(foreign).await?.is_some(),
        "a Secret that is not the request's was deleted"
    );
    // A rename and a rename back, the first pass cut off after its Secret: the status names the
    // current Secret again. Any other spec change sweeps the one left in between.
    let stray = "reader-stray-kubeconfig";
    secrets
        .create(&PostParams::default(), &secret_of(stray, true)?)
        .await?;
    requests
        .patch(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"tokenExpirationSeconds": 3000}})),
        )
        .await?;
    eventually(
        "the Secret left by a cut-off rename gone after a spec change",
        Duration::from_secs(30),
        || async { Ok(secrets.get_opt(stray).await?.is_none().then_some(())) },
    )
    .await?;
    assert!(
        secrets.get_opt(last).await?.is_some() && secrets.get_opt(foreign).await?.is_some(),
        "the current Secret, or one not the request's, was deleted"
    );
    secrets.delete(foreign, &DeleteParams::default()).await?;
    let secret_name = last.to_owned();

    // The deletion: the same for what appeared since.
    let cluster_bindings: Api<ClusterRoleBinding> = Api::all(shoot_admin.clone());
    let cluster_binding = rbac_name.clone();
    cluster_bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(binding(&cluster_binding)?)?,
        )
        .await?;
    delete_access(&requests, &secrets, "reader", &secret_name).await?;
    assert!(
        !exists(&cluster_bindings, &cluster_binding).await?,
        "a ClusterRoleBinding carrying the request's label outlived it"
    );
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// A live cluster whose admin kubeconfig is missing (its GardenerCluster deleted by hand):
/// deleting a RuntimeAccess must not end with its ServiceAccount and binding still granting
/// access there. The deletion waits (`ShootCleanupFailed`, saying why and how to finish) while
/// the Shoot the Runtime names exists, and completes, removing them, once the kubeconfig is
/// back. The Runtime names the test's Shoot, annotated as another runtime's so that the Runtime
/// reconciler leaves it alone. On the code before the fix the request was gone at once and its
/// objects stayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_deletion_waits_while_the_cluster_lives_without_an_admin_kubeconfig()
-> Result<()> {
    use k8s_openapi::api::rbac::v1::RoleBinding;
    use kim_shared::api::Runtime;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-live", &[]).await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let shoot = gcs.get(&id).await?.spec.shoot.name;
    let shoots: Api<Shoot> =
        Api::namespaced(env.garden_client().await?, fixtures::PROJECT_NAMESPACE);
    shoots
        .patch(
            &shoot,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "infrastructuremanager.kyma-project.io/runtime-id": "another-runtime"
            }}})),
        )
        .await?;
    // Stored under another name than its runtime ID (no webhook here): found by the label.
    let mut runtime = kim_tests::controller::sample_runtime(&ns, &id)?;
    let runtime_name = format!("{id}-named-otherwise");
    runtime.metadata.name = Some(runtime_name.clone());
    runtime.spec.shoot.name = shoot.clone();
    let runtimes: Api<Runtime> = Api::namespaced(kcp.clone(), &ns);
    runtimes.create(&PostParams::default(), &runtime).await?;

    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let shoot_admin = env.shoot_client().await?;
    let apps = env.shoot_namespace("live").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let spec = configmap_reader("reader", &apps, &apps);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "reader", &id, spec)?,
        )
        .await?;
    let status = access_ready(&requests, "reader").await?;
    let secret_name = status.secret_ref.clone().context("secretRef")?.name;

    // The kubeconfig as it was, to be put back: a new one is not issued for a Shoot annotated
    // as another runtime's.
    let admin_secret = format!("kubeconfig-{id}");
    let saved = secrets.get(&admin_secret).await?;
    gcs.delete(&id, &DeleteParams::default()).await?;
    eventually("GardenerCluster gone", Duration::from_secs(30), || async {
        Ok(gcs.get_opt(&id).await?.is_none().then_some(()))
    })
    .await?;
    requests.delete("reader", &DeleteParams::default()).await?;
    let condition = access_condition(&requests, "reader", "ShootCleanupFailed").await?;
    assert!(
        condition.message.contains(&format!("Shoot {shoot} exists"))
            && condition
                .message
                .contains("infrastructuremanager.kyma-project.io/skip-shoot-cleanup=true"),
        "the condition says why and how to finish: {}",
        condition.message
    );
    let accounts: Api<ServiceAccount> = Api::namespaced(shoot_admin.clone(), &apps);
    let bindings: Api<RoleBinding> = Api::namespaced(shoot_admin.clone(), &apps);
    let rbac = format!("kim-access:{ns}:reader");
    assert!(exists(&requests, "reader").await?, "the finalizer holds");
    assert!(exists(&accounts, "reader").await?);

    // The admin kubeconfig is back: the deletion completes and removes what it created.
    gcs.create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;
    let mut restored = Secret {
        data: saved.data.clone(),
        type_: saved.type_.clone(),
        ..Default::default()
    };
    restored.metadata.name = Some(admin_secret.clone());
    restored.metadata.labels = saved.metadata.labels.clone();
    restored.metadata.annotations = saved.metadata.annotations.clone();
    if secrets.get_opt(&admin_secret).await?.is_none() {
        secrets.create(&PostParams::default(), &restored).await?;
    }
    eventually(
        "request, Secret and shoot objects gone",
        Duration::from_secs(60),
        || async {
            let gone = requests.get_opt("reader").await?.is_none()
                && secrets.get_opt(&secret_name).await?.is_none()
                && !exists(&accounts, "reader").await?
                && !exists(&bindings, &rbac).await?;
            Ok(gone.then_some(()))
        },
    )
    .await?;

    // The Runtime's deletion leaves the other runtime's Shoot alone and ends.
    runtimes
        .delete(&runtime_name, &DeleteParams::default())
        .await?;
    eventually("Runtime gone", Duration::from_secs(60), || async {
        Ok(runtimes
            .get_opt(&runtime_name)
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    assert!(
        exists(&shoots, &shoot).await?,
        "another runtime's Shoot was deleted"
    );
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// A runtime that no longer answers (hibernated, gone, network cut): a request's deletion
/// retried for ever without saying why. Now each shoot request gives up after
/// `--access-shoot-request-timeout`, the condition says what is wrong and how to finish, and
/// the documented annotation lets the finalizer go (the KCP Secret is still removed). Here the
/// runtime's API server is replaced by a listener that accepts connections and never answers.
/// On the code before the fix the flag did not exist and no condition appeared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_deletion_reports_an_unreachable_runtime_and_can_be_released() -> Result<()>
{
    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-gone", &["--access-shoot-request-timeout=2s"]).await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let apps = env.shoot_namespace("gone").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let spec = configmap_reader("reader", &apps, &apps);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "reader", &id, spec)?,
        )
        .await?;
    let status = access_ready(&requests, "reader").await?;
    let secret_name = status.secret_ref.clone().context("secretRef")?.name;

    // A black hole: connections are accepted and never answered.
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = hole.local_addr()?.port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = hole.accept().await {
            open.push(conn);
        }
    });
    let mut kc: serde_json::Value = serde_yaml_ng::from_str(&admin)?;
    for c in kc["clusters"].as_array_mut().context("clusters")? {
        c["cluster"]["server"] = json!(format!("https://127.0.0.1:{port}"));
    }
    secrets
        .patch(
            &format!("kubeconfig-{id}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"config": serde_yaml_ng::to_string(&kc)?}})),
        )
        .await?;

    let started = tokio::time::Instant::now();
    requests.delete("reader", &DeleteParams::default()).await?;
    let condition = access_condition(&requests, "reader", "ShootCleanupFailed").await?;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "reported within a few request timeouts: {:?}",
        started.elapsed()
    );
    assert!(
        condition
            .message
            .contains("infrastructuremanager.kyma-project.io/skip-shoot-cleanup=true"),
        "the condition says how to finish: {}",
        condition.message
    );
    assert_eq!(
        requests
            .get("reader")
            .await?
            .status
            .and_then(|s| s.state)
            .as_deref(),
        Some("Deleting")
    );
    assert!(exists(&requests, "reader").await?, "the finalizer holds");

    requests
        .patch(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "infrastructuremanager.kyma-project.io/skip-shoot-cleanup": "true"
            }}})),
        )
        .await?;
    eventually(
        "request and Secret gone",
        Duration::from_secs(40),
        || async {
            let gone = requests.get_opt("reader").await?.is_none()
                && secrets.get_opt(&secret_name).await?.is_none();
            Ok(gone.then_some(()))
        },
    )
    .await?;
    held.abort();
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// A RuntimeAccess whose stored status does not read (a time with ten digits after the second,
/// which the apiserver stores and Go reads, but our types refuse): only it waits. Its reconcile
/// fails naming the field (`result="unreadable"`, one Warning Event), a request created after
/// it is still served, and deleted it is still cleaned up (Secret and shoot objects), its
/// finalizer removed although its status never read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_access_whose_status_does_not_read_waits_alone_and_is_still_cleaned_up()
-> Result<()> {
    use k8s_openapi::api::events::v1::Event;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-unread", &[]).await?;
    let apps = env.shoot_namespace("unread").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let untyped: Api<kube::api::DynamicObject> = Api::namespaced_with(
        kcp.clone(),
        &ns,
        &kube::api::ApiResource::erase::<RuntimeAccess>(&()),
    );
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let accounts: Api<ServiceAccount> = Api::namespaced(env.shoot_client().await?, &apps);
    let spec = |sa: &str| configmap_reader(sa, &apps, &apps);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "broken", &id, spec("broken"))?,
        )
        .await?;
    let status = access_ready(&requests, "broken").await?;
    let secret_name = status.secret_ref.clone().context("secretRef")?.name;
    let unreadable = || async {
        ctl.metric_sum(
            "infrastructure_manager_im_reconciles_total",
            &["controller=\"access\"", "result=\"unreadable\""],
        )
        .await
    };
    assert_eq!(unreadable().await?, 0, "nothing unreadable before");

    untyped
        .patch_status(
            "broken",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"tokenExpirationTimestamp": "2024-01-01T00:00:00.1234567891Z"}}),
            ),
        )
        .await
        .context("the apiserver stores the time")?;
    eventually(
        "the failed reconcile counted",
        Duration::from_secs(30),
        || async { Ok((unreadable().await? >= 1).then_some(())) },
    )
    .await?;
    let notes: Vec<String> = Api::<Event>::namespaced(kcp.clone(), &ns)
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("RuntimeAccess")
                && e.reason.as_deref() == Some("Unreadable")
        })
        .filter_map(|e| e.note)
        .collect();
    assert!(
        notes.len() == 1 && notes[0].contains("status.tokenExpirationTimestamp"),
        "one Warning Event naming the field: {notes:?}"
    );

    // Another request is served meanwhile.
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "other", &id, spec("other"))?,
        )
        .await?;
    access_ready(&requests, "other").await?;
    let watch_errors = ctl
        .metric_sum(
            "infrastructure_manager_im_watch_decode_errors_total",
            &["watch=\"access\""],
        )
        .await?;
    assert_eq!(watch_errors, 0, "the RuntimeAccess watch never failed");

    // Deleted while its status does not read: cleaned up all the same.
    assert!(exists(&accounts, "broken").await?, "its ServiceAccount");
    untyped.delete("broken", &DeleteParams::default()).await?;
    eventually(
        "the unreadable RuntimeAccess, its Secret and its ServiceAccount gone",
        Duration::from_secs(60),
        || async {
            let gone = untyped.get_opt("broken").await?.is_none()
                && secrets.get_opt(&secret_name).await?.is_none()
                && !exists(&accounts, "broken").await?;
            Ok(gone.then_some(()))
        },
    )
    .await?;
    assert!(
        exists(&accounts, "other").await?,
        "the other request's ServiceAccount stays"
    );
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// A consumer told "not ready yet" apart from "gone": a served RuntimeAccess whose runtime was
/// deprovisioned (no Runtime of its ID, and its GardenerCluster deleted) says `RuntimeGone`
/// (state `Error`), naming the Secret whose kubeconfig reaches no cluster; before, it waited as
/// `RuntimeNotReady` for ever, indistinguishable from a runtime being provisioned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_runtime_access_whose_runtime_is_gone_says_so() -> Result<()> {
    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-gone-rt", &[]).await?;
    let apps = env.shoot_namespace("gone-rt").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "reader", &id, configmap_reader("reader", &apps, &apps))?,
        )
        .await?;
    access_ready(&requests, "reader").await?;
    // Deprovisioned: the GardenerCluster goes with its admin kubeconfig Secret (no Runtime of
    // this ID exists in the test namespace).
    Api::<GardenerCluster>::namespaced(kcp.clone(), &ns)
        .delete(&id, &DeleteParams::default())
        .await?;
    let condition = access_condition(&requests, "reader", "RuntimeGone").await?;
    assert!(
        condition.message.contains(&id) && condition.message.contains("reader-kubeconfig"),
        "{}",
        condition.message
    );
    assert_eq!(
        requests
            .get("reader")
            .await?
            .status
            .and_then(|s| s.state)
            .as_deref(),
        Some("Error")
    );
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}
