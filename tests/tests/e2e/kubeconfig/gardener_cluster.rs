//! GardenerCluster: the admin kubeconfig Secret, its rotation, adoption and clean-up, and the
//! Secrets it must not take over.

use super::*;
use kube::ResourceExt as _;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gardener_cluster_gets_a_working_secret_that_is_rotated_in_time() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-rot").await?;
    let shoot = ready_shoot(env).await?;
    // 600 s is the shortest validity Gardener issues; ratio 0.01 gives a 6 s rotation period.
    let ctl = Controller::start(
        env,
        &ns,
        &[
            "--kubeconfig-expiration-time=600s",
            "--minimal-rotation-time=0.01",
        ],
    )
    .await?;
    let kcp = env.kcp_client().await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let id = unique("rt-");
    gcs.create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;

    let first = wait_for_secret(&secrets, &format!("kubeconfig-{id}")).await?;
    let labels = first.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("operator.kyma-project.io/managed-by")
            .map(String::as_str),
        Some("infrastructure-manager")
    );
    assert_eq!(
        labels.get("operator.kyma-project.io/cluster-name"),
        Some(&id)
    );
    assert_eq!(labels.get("kyma-project.io/shoot-name"), Some(&shoot));
    let owner = &first.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("GardenerCluster", id.as_str())
    );
    let first_sync = last_sync(&first).context("last-sync annotation")?;
    assert!(
        first_sync.parse::<jiff::Timestamp>().is_ok(),
        "last-sync {first_sync} is not RFC 3339"
    );
    let first_kc = kubeconfig_of(&first).unwrap();
    assert!(
        lists_namespaces(&first_kc).await?,
        "the issued kubeconfig cannot list namespaces in the shoot"
    );
    let gc = gcs.get(&id).await?;
    assert!(
        gc.metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f.contains("infrastructure-manager"))
    );
    eventually("status Ready", Duration::from_secs(10), || async {
        Ok(reason(&gcs, &id).await?.filter(|(s, _)| s == "Ready"))
    })
    .await?;

    // Time-based rotation: a new certificate and a new last-sync; the old one still works.
    let rotated = eventually("rotation", Duration::from_secs(30), || async {
        let s = secrets.get(&format!("kubeconfig-{id}")).await?;
        Ok((last_sync(&s).as_ref() != Some(&first_sync)).then_some(s))
    })
    .await?;
    let rotated_kc = kubeconfig_of(&rotated).context("rotated Secret lost its key")?;
    assert_ne!(
        client_cert(&rotated_kc),
        client_cert(&first_kc),
        "rotation must issue a new certificate"
    );
    assert!(lists_namespaces(&rotated_kc).await?);
    assert!(
        lists_namespaces(&first_kc).await?,
        "the old kubeconfig must keep working until it expires"
    );
    let (state, why) = reason(&gcs, &id).await?.context("status")?;
    assert_eq!(
        (state.as_str(), why.as_str()),
        ("Ready", "KubeconfigSecretRotated")
    );

    let metrics = ctl.metrics_text().await?;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("infrastructure_manager_im_kubeconfig_expiration{")
                && l.contains(&format!("runtimeId=\"{id}\""))
                && l.contains("expirationDuration=\"600\"")
                // Today's upstream label name (it was `shootName`).
                && l.contains("shoot=\"")
        ),
        "no expiration series for {id}:\n{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l
            .starts_with("infrastructure_manager_im_gardener_clusters_state{")
            && l.contains(&format!("runtimeId=\"{id}\""))
            && l.contains("state=\"Ready\"")),
        "no state series for {id}"
    );
    ctl.stop().await;
    assert!(
        log_text().contains("kubeconfig written"),
        "the log capture saw no controller lines"
    );
    assert_not_logged(&first_kc);
    assert_not_logged(&rotated_kc);
    Ok(())
}

/// Gardener caps an admin kubeconfig's validity (`--shoot-admin-kubeconfig-max-expiration`,
/// 24 h by default) below a longer `--kubeconfig-expiration-time`: the Secret says when it
/// really expires, and the expiration metric follows that (the rotation too: unit tests of
/// `rotation::rotate_after_issued`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validity_gardener_caps_is_the_one_reported() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-cap").await?;
    let shoot = ready_shoot(env).await?;
    let ctl = Controller::start(env, &ns, &["--kubeconfig-expiration-time=48h"]).await?;
    let kcp = env.kcp_client().await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let id = unique("rt-");
    gcs.create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;
    let secret = wait_for_secret(&secrets, &format!("kubeconfig-{id}")).await?;
    let synced: jiff::Timestamp = last_sync(&secret).context("last-sync")?.parse()?;
    let until: jiff::Timestamp = secret
        .annotations()
        .get(VALID_UNTIL)
        .context("no valid-until annotation")?
        .parse()?;
    let validity = until.duration_since(synced).as_secs();
    assert!(
        (86_400 - 5..=86_400 + 5).contains(&validity),
        "valid for {validity} s after the last sync, not Gardener's 24 h"
    );
    let expires = until.as_second().to_string();
    eventually(
        "the metric says when it expires",
        Duration::from_secs(10),
        || async {
            let metrics = ctl.metrics_text().await?;
            Ok(metrics
                .lines()
                .any(|l| {
                    l.starts_with("infrastructure_manager_im_kubeconfig_expiration{")
                        && l.contains(&format!("runtimeId=\"{id}\""))
                        && l.contains(&format!("expires=\"{expires}\""))
                        && l.contains(&format!("expirationDuration=\"{validity}\""))
                })
                .then_some(()))
        },
    )
    .await?;
    ctl.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_rotation_replaces_the_kubeconfig_in_one_step_and_stays_rotated() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-force").await?;
    let shoot = ready_shoot(env).await?;
    let ctl = Controller::start(env, &ns, &["--kubeconfig-expiration-time=1h"]).await?;
    let kcp = env.kcp_client().await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let id = unique("rt-");
    let secret_name = format!("kubeconfig-{id}");
    gcs.create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;
    let before = wait_for_secret(&secrets, &secret_name).await?;
    let before_kc = kubeconfig_of(&before).unwrap();
    eventually("status Created", Duration::from_secs(10), || async {
        Ok(reason(&gcs, &id)
            .await?
            .filter(|(_, r)| r == "KubeconfigSecretCreated"))
    })
    .await?;

    // Not due: other reconciles (a label change) must not ask Gardener.
    let calls = ctl.adminkubeconfig_calls().await?;
    assert!(
        calls >= 1,
        "the first kubeconfig must have been issued through the guarded client"
    );
    for i in 0..3 {
        let patch = json!({"metadata": {"labels": {"test/poke": i.to_string()}}});
        gcs.patch(&id, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        ctl.adminkubeconfig_calls().await?,
        calls,
        "reconciles without a due rotation called Gardener"
    );

    // Watch the Secret: every version must carry the key.
    let seen: Arc<Mutex<Vec<bool>>> = Arc::default();
    let watch = {
        let seen = seen.clone();
        let stream = watcher(
            secrets.clone(),
            watcher::Config::default().fields(&format!("metadata.name={secret_name}")),
        )
        .applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(s)) = stream.next().await {
                seen.lock()
                    .unwrap()
                    .push(kubeconfig_of(&s).is_some_and(|k| !k.is_empty()));
            }
        })
    };
    // The watch has listed the Secret before the rotation is asked for.
    eventually(
        "the Secret watch listed",
        Duration::from_secs(30),
        || async { Ok((!seen.lock().unwrap().is_empty()).then_some(())) },
    )
    .await?;
    let asked = ask_forced_rotation(&gcs, &id).await?;

    let after = eventually("forced rotation", Duration::from_secs(30), || async {
        let s = secrets.get(&secret_name).await?;
        Ok((kubeconfig_of(&s) != Some(before_kc.clone())).then_some(s))
    })
    .await?;
    let after_kc = kubeconfig_of(&after).unwrap();
    assert_ne!(client_cert(&after_kc), client_cert(&before_kc));
    // The Secret names the request it served, for a replica that takes over before the
    // annotation is gone.
    assert_eq!(
        after.annotations().get(FORCE_SERVED),
        asked.metadata.resource_version.as_ref()
    );
    assert!(lists_namespaces(&after_kc).await?);
    eventually(
        "annotation removed, reason Rotated",
        Duration::from_secs(15),
        || async {
            let gc = gcs.get(&id).await?;
            let gone = !gc
                .metadata
                .annotations
                .unwrap_or_default()
                .contains_key(FORCE);
            let r = reason(&gcs, &id).await?;
            Ok((gone
                && r.as_ref()
                    .is_some_and(|(s, r)| s == "Ready" && r == "KubeconfigSecretRotated"))
            .then_some(()))
        },
    )
    .await?;
    // Upstream reverted to KubeconfigSecretCreated right after: it must stay Rotated.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, why) = reason(&gcs, &id).await?.context("status")?;
    assert_eq!(why, "KubeconfigSecretRotated");
    assert_eq!(
        ctl.adminkubeconfig_calls().await?,
        calls + 1,
        "a forced rotation is exactly one Gardener call"
    );
    watch.abort();
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.len() >= 2,
        "the watcher saw {} versions of the Secret",
        seen.len()
    );
    assert!(
        seen.iter().all(|has_key| *has_key),
        "a version of the Secret lacked its key: {seen:?}"
    );

    // A deleted Secret comes back at once (the controller watches its Secrets), not only at
    // the next rotation an hour later.
    secrets
        .delete(&secret_name, &DeleteParams::default())
        .await?;
    let recreated = wait_for_secret(&secrets, &secret_name).await?;
    let recreated_kc = kubeconfig_of(&recreated).unwrap();
    assert!(lists_namespaces(&recreated_kc).await?);

    ctl.stop().await;

    // The leader served a forced rotation and stopped before its removal of the annotation went
    // through (the Secret names the version served): the next leader removes the annotation
    // and signs nothing.
    let again = ask_forced_rotation(&gcs, &id).await?;
    secrets
        .patch(
            &secret_name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                FORCE_SERVED: again.metadata.resource_version}}})),
        )
        .await?;
    let next = Controller::start(env, &ns, &["--kubeconfig-expiration-time=1h"]).await?;
    eventually(
        "the served annotation is removed",
        Duration::from_secs(30),
        || async {
            let gc = gcs.get(&id).await?;
            Ok((!gc.annotations().contains_key(FORCE)).then_some(()))
        },
    )
    .await?;
    assert_eq!(
        next.adminkubeconfig_calls().await?,
        0,
        "a forced rotation the previous leader served was signed again"
    );
    next.stop().await;

    // The same, with the kubeconfig due for rotation as well: the rotation for its age is the
    // one signing, and it removes the served annotation (before, it left the annotation and
    // could drop the marker, so the leader after it served the rotation once more).
    let again = ask_forced_rotation(&gcs, &id).await?;
    let long_ago = "2020-01-01T00:00:00Z";
    secrets
        .patch(
            &secret_name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                FORCE_SERVED: again.metadata.resource_version, LAST_SYNC: long_ago}}})),
        )
        .await?;
    let next = Controller::start(env, &ns, &["--kubeconfig-expiration-time=1h"]).await?;
    eventually(
        "rotated for its age, the served annotation removed",
        Duration::from_secs(30),
        || async {
            let gc = gcs.get(&id).await?;
            let secret = secrets.get(&secret_name).await?;
            let synced = secret.annotations().get(LAST_SYNC).map(String::as_str);
            Ok((!gc.annotations().contains_key(FORCE) && synced != Some(long_ago)).then_some(()))
        },
    )
    .await?;
    assert_eq!(
        next.adminkubeconfig_calls().await?,
        1,
        "one rotation, for the kubeconfig's age"
    );
    next.stop().await;
    assert_not_logged(&recreated_kc);
    let errors = error_lines();
    assert!(
        errors.is_empty(),
        "error-level log lines:\n{}",
        errors.join("\n")
    );
    assert_not_logged(&before_kc);
    assert_not_logged(&after_kc);
    Ok(())
}

/// Taking over from upstream KIM: a `kubeconfig-<runtime-id>` Secret upstream wrote (its
/// labels, an RFC 3339 `last-sync` within the rotation period, no owner of ours, here also
/// owned by something else) is adopted with one metadata patch: our owner reference and
/// labels are added, the other owner, the kubeconfig and `last-sync` stay, and Gardener is not
/// asked for a new kubeconfig.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_upstream_wrote_is_adopted_with_its_kubeconfig_and_other_owners() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-adopt").await?;
    let shoot = ready_shoot(env).await?;
    let kcp = env.kcp_client().await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let id = unique("rt-");
    let secret_name = format!("kubeconfig-{id}");
    let other: k8s_openapi::api::core::v1::ConfigMap = Api::namespaced(kcp.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "other-owner"}}))?,
        )
        .await?;
    let other_uid = other.metadata.uid.clone().context("uid")?;
    let synced = jiff::Timestamp::now().to_string();
    let upstream: Secret = serde_json::from_value(json!({
        "metadata": {
            "name": secret_name,
            "labels": {
                "kyma-project.io/runtime-id": id,
                "kyma-project.io/shoot-name": shoot,
                "kyma-project.io/instance-id": "instance-1",
                "operator.kyma-project.io/managed-by": "infrastructure-manager",
            },
            "annotations": {LAST_SYNC: synced},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                 "name": "other-owner", "uid": other_uid}],
        },
        "data": {"config": "dXBzdHJlYW0ta3ViZWNvbmZpZw=="},
    }))?;
    secrets.create(&PostParams::default(), &upstream).await?;

    let ctl = Controller::start(env, &ns, &[]).await?;
    let gc = gcs
        .create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;
    let gc_uid = gc.metadata.uid.clone().context("uid")?;
    let adopted = eventually("the Secret adopted", Duration::from_secs(30), || async {
        let s = secrets.get(&secret_name).await?;
        let ours = s
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == gc_uid);
        Ok(ours.then_some(s))
    })
    .await?;
    let owners: Vec<String> = adopted
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|o| o.uid.clone())
        .collect();
    assert_eq!(
        owners,
        vec![other_uid, gc_uid],
        "other owner kept, ours added"
    );
    assert_eq!(
        kubeconfig_of(&adopted).as_deref(),
        Some("upstream-kubeconfig")
    );
    assert_eq!(last_sync(&adopted), Some(synced));
    assert_eq!(
        adopted
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .get("operator.kyma-project.io/cluster-name"),
        Some(&id)
    );
    assert_eq!(
        ctl.adminkubeconfig_calls().await?,
        0,
        "no new kubeconfig asked for"
    );
    ctl.stop().await;
    Ok(())
}

/// A process that starts while a kubeconfig's rotation fails (here its Shoot is gone) reports
/// when the kubeconfig KCP components use expires, from its `last-sync`, so that
/// `KimKubeconfigExpiresSoon` can fire; the Secret is left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_whose_rotation_fails_reports_its_expiry_from_the_start() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-expiry").await?;
    let kcp = env.kcp_client().await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let id = unique("rt-");
    let shoot = format!("gone{}", &id[id.len() - 6..]);
    // Due since hours (rotation after 0.95 x 0.6 x 24 h); valid for 4 more hours.
    let synced = jiff::Timestamp::now()
        .checked_sub(jiff::SignedDuration::from_hours(20))?
        .round(jiff::Unit::Second)?;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {
            "name": format!("kubeconfig-{id}"),
            "labels": {
                "kyma-project.io/runtime-id": id,
                "kyma-project.io/shoot-name": shoot,
                "operator.kyma-project.io/managed-by": "infrastructure-manager",
            },
            "annotations": {LAST_SYNC: synced.to_string()},
        },
        "data": {"config": "dXBzdHJlYW0ta3ViZWNvbmZpZw=="},
    }))?;
    let before = secrets.create(&PostParams::default(), &secret).await?;

    let ctl = Controller::start(env, &ns, &[]).await?;
    gcs.create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;
    eventually("FailedToGetKubeconfig", Duration::from_secs(30), || async {
        Ok(reason(&gcs, &id)
            .await?
            .filter(|(_, why)| why == "FailedToGetKubeconfig"))
    })
    .await?;
    let expires = synced
        .checked_add(jiff::SignedDuration::from_hours(24))?
        .as_second();
    let metrics = ctl.metrics_text().await?;
    let series = metrics
        .lines()
        .find(|l| {
            l.starts_with("infrastructure_manager_im_kubeconfig_expiration{")
                && l.contains(&format!("runtimeId=\"{id}\""))
        })
        .with_context(|| format!("no expiration series for {id}:\n{metrics}"))?;
    assert!(
        series.ends_with(&format!(" {expires}")),
        "expires at last-sync + 24 h ({expires}): {series}"
    );
    assert_eq!(
        kubeconfig_of(&secrets.get(&format!("kubeconfig-{id}")).await?),
        kubeconfig_of(&before),
        "the kubeconfig is kept"
    );
    ctl.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_is_deleted_when_its_gardener_cluster_went_away_while_the_controller_was_down()
-> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-del").await?;
    let shoot = ready_shoot(env).await?;
    let kcp = env.kcp_client().await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let id = unique("rt-");
    let secret_name = format!("kubeconfig-{id}");

    let ctl = Controller::start(env, &ns, &[]).await?;
    gcs.create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;
    let secret = wait_for_secret(&secrets, &secret_name).await?;
    ctl.stop().await;

    gcs.delete(&id, &DeleteParams::default()).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        secrets.get_opt(&secret_name).await?.is_some(),
        "nothing may delete the Secret while the controller is down"
    );
    assert!(
        gcs.get_opt(&id).await?.is_some(),
        "the finalizer must hold the GardenerCluster"
    );

    let ctl = Controller::start(env, &ns, &[]).await?;
    eventually(
        "Secret and GardenerCluster gone",
        Duration::from_secs(30),
        || async {
            let gone =
                secrets.get_opt(&secret_name).await?.is_none() && gcs.get_opt(&id).await?.is_none();
            Ok(gone.then_some(()))
        },
    )
    .await?;
    ctl.stop().await;
    assert_not_logged(&kubeconfig_of(&secret).unwrap());
    assert_no_finalizer_warnings();
    Ok(())
}

/// Attack: a GardenerCluster names an existing Secret as its kubeconfig Secret, either one
/// that is nobody's kubeconfig or another runtime's admin kubeconfig Secret (with that
/// runtime's ID as its label). The controller adopted or overwrote it and deleted it with the
/// GardenerCluster. Now both are refused with SecretNotOwned naming the Secret and survive
/// the deletion. On the code before the fix neither condition appeared and both Secrets were
/// taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gardener_cluster_cannot_take_over_a_secret_it_does_not_own() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-gc-secret").await?;
    let ctl = Controller::start(env, &ns, &[]).await?;
    let (other_id, admin) = runtime_with_admin_kubeconfig(env, &ns).await?;
    let shoot = ready_shoot(env).await?;
    let kcp = env.kcp_client().await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let victim = victim_secret(&secrets, "gardener-credentials").await?;
    let other_secret = format!("kubeconfig-{other_id}");
    let other = secrets.get(&other_secret).await?;

    let mut credentials = gardener_cluster(&ns, &unique("rt-"), &shoot);
    credentials.spec.kubeconfig.secret.name = "gardener-credentials".into();
    credentials.spec.kubeconfig.secret.key = "kubeconfig".into();
    let mut hijack = gardener_cluster(&ns, &unique("rt-"), &shoot);
    hijack.spec.kubeconfig.secret.name = other_secret.clone();
    hijack
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("kyma-project.io/runtime-id".into(), other_id.clone());
    let mut names = Vec::new();
    for gc in [&credentials, &hijack] {
        gcs.create(&PostParams::default(), gc).await?;
        names.push(gc.metadata.name.clone().context("name")?);
    }
    let mut conditions = Vec::new();
    for name in &names {
        conditions.push(
            eventually("SecretNotOwned", Duration::from_secs(30), || async {
                let gc = gcs.get(name).await?;
                Ok(gc.status.and_then(|s| {
                    let c = s.conditions?.into_iter().find(|c| {
                        c.type_ == "KubeconfigManagement" && c.reason == "SecretNotOwned"
                    })?;
                    Some((s.state.unwrap_or_default(), c))
                }))
            })
            .await,
        );
    }
    // The Secrets are checked first: what happened to them is the attack's outcome.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_untouched(&secrets, &victim).await?;
    assert_untouched(&secrets, &other).await?;
    for (found, secret) in conditions
        .into_iter()
        .zip(["gardener-credentials", &other_secret])
    {
        let (state, condition) = found?;
        assert_eq!(state, "Error");
        assert!(
            condition.message.contains(&format!("Secret {ns}/{secret}")),
            "the condition names the Secret: {}",
            condition.message
        );
    }
    for name in &names {
        gcs.delete(name, &DeleteParams::default()).await?;
    }
    eventually("GardenerClusters gone", Duration::from_secs(30), || async {
        let mut gone = true;
        for name in &names {
            gone &= gcs.get_opt(name).await?.is_none();
        }
        Ok(gone.then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_untouched(&secrets, &victim).await?;
    assert_untouched(&secrets, &other).await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// An answer to the kubeconfig Secret write that quotes the request, as an admission webhook
/// or a policy engine on Secrets may, puts no part of the kubeconfig into the GardenerCluster's
/// status or the log: the quoted message arrives with the credentials redacted. So does the
/// answer to its delete, which quotes the stored Secret (a webhook's oldObject).
/// The message of the GardenerCluster's condition whose reason ends in `reason`, if it has one.
async fn condition_message(
    gcs: &Api<GardenerCluster>,
    name: &str,
    reason: &str,
) -> Result<Option<String>> {
    let gc = gcs.get(name).await?;
    Ok(gc
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.reason.ends_with(reason))
        .map(|c| c.message))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_secret_write_that_quotes_the_kubeconfig_leaks_it_nowhere() -> Result<()> {
    use kim_tests::faultproxy::{FaultProxy, Rule};
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-echo").await?;
    let shoot = ready_shoot(env).await?;
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let (quoted, fault) = echo_bodies();
    proxy.inject(Rule {
        method: Some("POST".into()),
        path_contains: format!("/namespaces/{ns}/secrets"),
        fault,
        times: None,
    });
    let ctl = Controller::start_via(env, &ns, &[], Some(proxy.access_via(env.kcp()))).await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(env.kcp_client().await?, &ns);
    let id = unique("rt-");
    gcs.create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;
    let message = eventually(
        "the refused write in the status",
        Duration::from_secs(60),
        || condition_message(&gcs, &id, "FailedToCreateSecret"),
    )
    .await;
    let message = match message {
        Ok(m) => m,
        Err(e) => bail!(
            "{e}; status: {:?}; requests answered: {}",
            gcs.get(&id).await?.status,
            quoted.lock().unwrap().len()
        ),
    };

    // A refused delete of the written Secret, whose answer quotes the stored Secret as a
    // webhook's oldObject: the same in the status, its Event and the log.
    proxy.clear();
    let secrets: Api<Secret> = Api::namespaced(env.kcp_client().await?, &ns);
    let secret_name = format!("kubeconfig-{id}");
    let stored = eventually(
        "the Secret written once the refusal stops",
        Duration::from_secs(60),
        || async { Ok(secrets.get_opt(&secret_name).await?) },
    )
    .await?;
    let stored_encoded = encoded_data(&stored).context("the stored Secret has no kubeconfig")?;
    let old_object = serde_json::to_string(&stored)?;
    proxy.inject(Rule {
        method: Some("DELETE".into()),
        path_contains: format!("/namespaces/{ns}/secrets/{secret_name}"),
        fault: echo_refusal(move |_| old_object.clone()),
        times: None,
    });
    gcs.delete(&id, &DeleteParams::default()).await?;
    let refused_delete = eventually(
        "the refused delete in the status",
        Duration::from_secs(60),
        || condition_message(&gcs, &id, "FailedToDeleteSecret"),
    )
    .await?;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(env.kcp_client().await?, &ns);
    let notes = eventually(
        "an Event of the refused delete",
        Duration::from_secs(30),
        || async {
            let notes: Vec<String> = events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|e| {
                    e.reason
                        .as_deref()
                        .is_some_and(|r| r.ends_with("FailedToDeleteSecret"))
                })
                .filter_map(|e| e.note)
                .collect();
            Ok((!notes.is_empty()).then_some(notes))
        },
    )
    .await;
    let notes = match notes {
        Ok(notes) => notes,
        Err(e) => {
            let reasons: Vec<_> = events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .map(|e| e.reason)
                .collect();
            bail!("{e}; Events: {reasons:?}")
        }
    };
    proxy.clear();
    eventually(
        "the GardenerCluster gone once the refusal stops",
        Duration::from_secs(60),
        || async { Ok(gcs.get_opt(&id).await?.is_none().then_some(())) },
    )
    .await?;
    ctl.stop().await;
    assert!(
        refused_delete.contains("echo.policy.example") && refused_delete.contains("<redacted>"),
        "{refused_delete}"
    );
    assert!(
        notes.iter().all(|n| n.contains("echo.policy.example")),
        "{notes:?}"
    );
    for shown in notes.iter().chain([&refused_delete, &log_text()]) {
        assert_no_piece(shown, &stored_encoded, "the stored kubeconfig");
    }

    let body = quoted
        .lock()
        .unwrap()
        .first()
        .cloned()
        .context("no Secret write")?;
    let written: Secret = serde_json::from_slice(&body)?;
    let encoded = encoded_data(&written).context("the write carried no kubeconfig")?;
    let kubeconfig = kubeconfig_of(&written).context("kubeconfig text")?;
    // The quoting reached the status and the log, redacted.
    assert!(
        message.contains("echo.policy.example") && message.contains("<redacted>"),
        "{message}"
    );
    assert!(
        log_text().contains("echo.policy.example"),
        "the refused write was not logged"
    );
    for shown in [message.as_str(), log_text().as_str()] {
        assert_no_piece(shown, &encoded, "the base64 kubeconfig");
    }
    assert_not_in(&message, &kubeconfig, "the status");
    assert_not_logged(&kubeconfig);
    Ok(())
}

/// A refused Secret write whose message reads differently each time (it counts the attempts)
/// changes the GardenerCluster's status at each attempt. The watch event of that status write
/// must not start the next attempt ahead of the backoff (1 s doubling, each delay half to all
/// of it): each attempt asks Gardener for an admin kubeconfig, and attempts one after another
/// would spend the Gardener client's budget on one cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_that_reads_differently_each_time_is_still_retried_with_backoff() -> Result<()> {
    use kim_tests::faultproxy::{FaultProxy, Rule};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-varying").await?;
    let shoot = ready_shoot(env).await?;
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let attempts = Arc::new(AtomicUsize::new(0));
    let counted = attempts.clone();
    proxy.inject(Rule {
        method: Some("POST".into()),
        path_contains: format!("/namespaces/{ns}/secrets"),
        fault: echo_refusal(move |_| {
            format!("attempt {}", counted.fetch_add(1, Ordering::SeqCst) + 1)
        }),
        times: None,
    });
    let ctl = Controller::start_via(env, &ns, &[], Some(proxy.access_via(env.kcp()))).await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(env.kcp_client().await?, &ns);
    let id = unique("rt-");
    gcs.create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;
    eventually(
        "the refused write in the status",
        Duration::from_secs(60),
        || async {
            let message = condition_message(&gcs, &id, "FailedToCreateSecret").await?;
            Ok(message.filter(|m| m.contains("attempt")))
        },
    )
    .await?;
    let before = attempts.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(12)).await;
    let made = attempts.load(Ordering::SeqCst) - before;
    // The backoff allows at most 6 attempts in 12 s; a loop on the status writes makes one
    // per round trip.
    assert!((1..=7).contains(&made), "{made} attempts in 12 s");

    proxy.clear();
    let secrets: Api<Secret> = Api::namespaced(env.kcp_client().await?, &ns);
    eventually(
        "the Secret written once the refusal stops",
        Duration::from_secs(60),
        || async { Ok(secrets.get_opt(&format!("kubeconfig-{id}")).await?) },
    )
    .await?;
    ctl.stop().await;
    Ok(())
}

/// A forced rotation whose annotation removal meets a changed GardenerCluster (409: a label
/// written, a status write between the read and the removal) still signs one admin kubeconfig:
/// the annotation is removed from the version read again, not left for the next pass to serve
/// once more (admin kubeconfigs cannot be revoked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_rotation_whose_removal_conflicts_signs_once() -> Result<()> {
    use kim_tests::faultproxy::{ApiFault, FaultProxy, Rule};
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-force-409").await?;
    let shoot = ready_shoot(env).await?;
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let ctl = Controller::start_via(env, &ns, &[], Some(proxy.access_via(env.kcp()))).await?;
    let kcp = env.kcp_client().await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let id = unique("rt-");
    gcs.create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;
    let before = wait_for_secret(&secrets, &format!("kubeconfig-{id}")).await?;
    eventually("status Created", Duration::from_secs(10), || async {
        Ok(reason(&gcs, &id)
            .await?
            .filter(|(_, r)| r == "KubeconfigSecretCreated"))
    })
    .await?;
    let calls = ctl.adminkubeconfig_calls().await?;
    // The first removal of the annotation (a merge patch of the object, not its status) meets
    // a conflict.
    proxy.inject(Rule {
        method: Some("PATCH".into()),
        path_contains: format!("/gardenerclusters/{id}?"),
        fault: ApiFault::Conflict,
        times: Some(1),
    });
    ask_forced_rotation(&gcs, &id).await?;
    eventually(
        "rotated, annotation removed",
        Duration::from_secs(30),
        || async {
            let gc = gcs.get(&id).await?;
            let gone = !kube::ResourceExt::annotations(&gc).contains_key(FORCE);
            let rotated = kubeconfig_of(&secrets.get(&format!("kubeconfig-{id}")).await?)
                != kubeconfig_of(&before);
            Ok((gone && rotated).then_some(()))
        },
    )
    .await?;
    assert_eq!(
        proxy.served_count(
            "PATCH",
            &format!("/gardenerclusters/{id}"),
            &ApiFault::Conflict
        ),
        1,
        "the removal did not meet its conflict"
    );
    // Passes that follow (the status write, the annotation's removal) sign nothing more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        ctl.adminkubeconfig_calls().await?,
        calls + 1,
        "a forced rotation is exactly one Gardener call, conflict or not"
    );
    ctl.stop().await;
    Ok(())
}
