//! RuntimeAccess (RBAC kubeconfigs): what a token kubeconfig grants, its rotation, the
//! least-privilege policy in the controller, and what the controller must not touch.

use super::*;

/// Who the API server takes the client for (a SelfSubjectReview).
async fn user_info(client: kube::Client) -> Result<k8s_openapi::api::authentication::v1::UserInfo> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let review: SelfSubjectReview = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview", "metadata": {}
    }))?;
    let answer = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.and_then(|s| s.user_info).unwrap_or_default())
}

async fn whoami(client: kube::Client) -> Result<String> {
    Ok(user_info(client).await?.username.unwrap_or_default())
}

/// The ID the API server gives the client's credential (`JTI=<id>` for a ServiceAccount token),
/// as its audit log names it.
async fn credential_id(client: kube::Client) -> Result<Option<String>> {
    Ok(user_info(client)
        .await?
        .extra
        .and_then(|mut e| e.remove("authentication.kubernetes.io/credential-id"))
        .and_then(|ids| ids.into_iter().next()))
}

fn forbidden<T>(r: std::result::Result<T, kube::Error>) -> bool {
    matches!(r, Err(kube::Error::Api(s)) if s.code == 403)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_for_a_role_can_get_pods_in_one_namespace_and_nothing_else() -> Result<()> {
    use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use kim_shared::access::ANNOTATION_REQUESTED_BY as REQUESTED_BY;
    use kim_shared::api::runtime_access::RuntimeAccess;

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
// RuntimeAccess: helpers shared by the variants below
fn runtime_access(
    ns: &str,
    name: &str,
    runtime_id: &str,
    spec: serde_json::Value,
) -> Result<kim_shared::api::runtime_access::RuntimeAccess> {
    let mut full = json!({"runtimeId": runtime_id});
    for (k, v) in spec.as_object().context("spec must be an object")? {
        full[k] = v.clone();
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "RuntimeAccess",
        "metadata": {"name": name, "namespace": ns},
        "spec": full,
    }))?)
}

/// The spec of a RuntimeAccess for ServiceAccount `account` in `namespace` that may get
/// ConfigMaps in `apps`, with the shortest token lifetime.
fn configmap_reader(account: &str, namespace: &str, apps: &str) -> serde_json::Value {
    json!({
        "serviceAccount": {"name": account, "namespace": namespace},
        "role": {"namespace": apps, "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
        "tokenExpirationSeconds": 600,
    })
}

/// Waits for `state: Ready` and returns the status.
async fn access_ready(
    requests: &Api<kim_shared::api::runtime_access::RuntimeAccess>,
    name: &str,
) -> Result<kim_shared::api::runtime_access::RuntimeAccessStatus> {
    eventually(
        &format!("RuntimeAccess {name} Ready"),
        Duration::from_secs(60),
        || async {
            Ok(requests
                .get(name)
                .await?
                .status
                .filter(|s| s.state.as_deref() == Some("Ready")))
        },
    )
    .await
}

/// The token kubeconfig the status points at.
async fn access_kubeconfig(
    secrets: &Api<Secret>,
    status: &kim_shared::api::runtime_access::RuntimeAccessStatus,
) -> Result<String> {
    let r = status.secret_ref.as_ref().context("status.secretRef")?;
    let secret = secrets.get(&r.name).await?;
    let bytes = secret
        .data
        .unwrap_or_default()
        .remove(&r.key)
        .context("the kubeconfig Secret lacks its key")?;
    Ok(String::from_utf8(bytes.0)?)
}

fn token_of(kubeconfig: &str) -> Option<String> {
    kubeconfig
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("token:"))
        .map(|t| t.trim().to_owned())
}

/// Waits until `call` is allowed (RBAC caches in the API server may take a moment), then
/// returns its value.
async fn once_allowed<T, F, Fut>(what: &str, mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, kube::Error>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if tokio::time::Instant::now() > deadline => {
                bail!("{what}: still failing after 15 s: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Deletes the request and waits until it and its Secret are gone.
async fn delete_access(
    requests: &Api<kim_shared::api::runtime_access::RuntimeAccess>,
    secrets: &Api<Secret>,
    name: &str,
    secret: &str,
) -> Result<()> {
    requests.delete(name, &DeleteParams::default()).await?;
    eventually(
        &format!("RuntimeAccess {name} and Secret {secret} gone"),
        Duration::from_secs(30),
        || async {
            let gone =
                requests.get_opt(name).await?.is_none() && secrets.get_opt(secret).await?.is_none();
            Ok(gone.then_some(()))
        },
    )
    .await?;
    // Late reconciles of the deleted object (stale cache) must stay quiet.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_no_finalizer_warnings();
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// RuntimeAccess: token rotation

/// TokenRequest refuses lifetimes under 600 s, so the rotation period is shortened with the
/// ratio flag: 0.01 of a 600 s token is 6 s. Nothing is faked: every token comes from the shoot
/// API server's TokenRequest API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_token_is_rotated_before_expiry_and_the_new_kubeconfig_works() -> Result<()>
{
    use k8s_openapi::api::core::v1::Pod;
    use kim_shared::api::runtime_access::RuntimeAccess;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin: admin_kc,
        kcp,
    } = set_up("kc-ra-rot", &["--access-rotation-ratio=0.01"]).await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let shoot_admin = env.shoot_client().await?;
    let apps = env.shoot_namespace("rot").await?;
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p1"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))?;
    Api::<Pod>::namespaced(shoot_admin.clone(), &apps)
        .create(&PostParams::default(), &pod)
        .await?;

    // Watch the Secret from before its creation: every version must carry the kubeconfig.
    let secret_name = "rotating-kubeconfig";
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
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
                let kc = s
                    .data
                    .as_ref()
                    .and_then(|d| d.get("config"))
                    .and_then(|b| String::from_utf8(b.0.clone()).ok());
                seen.lock().unwrap().push(kc.as_deref().and_then(token_of));
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    let user = format!("system:serviceaccount:{apps}:rotating");
    let ra = runtime_access(
        &ns,
        "rotating",
        &id,
        json!({
            "serviceAccount": {"name": "rotating", "namespace": apps},
            "role": {"namespace": apps, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
            "tokenExpirationSeconds": 600,
            "secret": {"name": secret_name},
        }),
    )?;
    // Watch the request too: the condition reasons in the order they were stored.
    let reasons: Arc<Mutex<Vec<String>>> = Arc::default();
    let reason_watch = {
        let reasons = reasons.clone();
        let stream = watcher(
            requests.clone(),
            watcher::Config::default().fields("metadata.name=rotating"),
        )
        .applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(ra)) = stream.next().await {
                let reason = ra.status.and_then(|s| {
                    s.conditions
                        .into_iter()
                        .find(|c| c.type_ == "KubeconfigReady")
                        .map(|c| c.reason)
                });
                let mut seen = reasons.lock().unwrap();
                if let Some(r) = reason
                    && seen.last() != Some(&r)
                {
                    seen.push(r);
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    requests.create(&PostParams::default(), &ra).await?;
    let first = access_ready(&requests, "rotating").await?;
    let first_kc = access_kubeconfig(&secrets, &first).await?;
    let first_token = token_of(&first_kc).context("token in the first kubeconfig")?;
    let first_expiry = first
        .token_expiration_timestamp
        .clone()
        .context("status.tokenExpirationTimestamp")?
        .0;
    // The API server granted the requested 600 s (give or take the clock's second).
    let granted = first_expiry
        .duration_since(jiff::Timestamp::now())
        .as_secs_f64();
    assert!(
        (560.0..=601.0).contains(&granted),
        "first token expires in {granted} s, expected about 600"
    );

    // Two rotations: the first driven by the requeue after issuing, the second by the requeue
    // of a reconcile that kept a fresh token. Each one a new token and a later expiry.
    let mut tokens = vec![first_token.clone()];
    let mut expiries = vec![first_expiry];
    let mut kubeconfigs = vec![first_kc.clone()];
    for round in 1..=2 {
        let (status, kc) = eventually(
            &format!("rotation {round}"),
            Duration::from_secs(30),
            || async {
                let status = requests.get("rotating").await?.status.unwrap_or_default();
                let kc = access_kubeconfig(&secrets, &status).await?;
                let expiry = status.token_expiration_timestamp.as_ref().map(|t| t.0);
                let rotated = token_of(&kc).is_some_and(|t| !tokens.contains(&t))
                    && expiry.is_some_and(|e| e > *expiries.last().unwrap());
                Ok(rotated.then_some((status, kc)))
            },
        )
        .await?;
        let reason = status
            .conditions
            .iter()
            .find(|c| c.type_ == "KubeconfigReady")
            .map(|c| (c.status.clone(), c.reason.clone()));
        assert_eq!(
            reason,
            Some(("True".to_owned(), "KubeconfigRotated".to_owned())),
            "condition after rotation {round}"
        );
        assert_eq!(status.state.as_deref(), Some("Ready"));
        // The Secret's annotations agree with the status.
        let secret = secrets.get(secret_name).await?;
        let annotations = secret.metadata.annotations.unwrap_or_default();
        let annotated: jiff::Timestamp = annotations
            .get("infrastructuremanager.kyma-project.io/token-expiration")
            .context("token-expiration annotation")?
            .parse()?;
        let expiry = status.token_expiration_timestamp.clone().unwrap().0;
        assert_eq!(annotated.as_second(), expiry.as_second());
        assert!(annotations.contains_key(LAST_SYNC));

        // The new kubeconfig works and is the ServiceAccount.
        let client = access::client_from_yaml("rotated", &kc).await?;
        assert_eq!(whoami(client.clone()).await?, user);
        // The Secret names the token as the runtime cluster's audit log does.
        let token_id = annotations
            .get("infrastructuremanager.kyma-project.io/token-id")
            .context("token-id annotation")?;
        assert_eq!(
            credential_id(client.clone()).await?,
            Some(format!("JTI={token_id}"))
        );
        let pods: Api<Pod> = Api::namespaced(client.clone(), &apps);
        once_allowed("get pod with the rotated kubeconfig", || pods.get("p1")).await?;
        assert!(
            forbidden(
                Api::<Secret>::namespaced(client, &apps)
                    .list(&ListParams::default())
                    .await
            ),
            "the rotated kubeconfig must not gain permissions"
        );
        tokens.push(token_of(&kc).unwrap());
        expiries.push(expiry);
        kubeconfigs.push(kc);
    }
    // Tokens are not revoked by a rotation: the first stays valid until it expires, so a
    // consumer that has not re-read the Secret yet keeps working.
    let old = access::client_from_yaml("first", &first_kc).await?;
    assert_eq!(whoami(old).await?, user);

    // Every version of the Secret the watcher saw held a kubeconfig with a token, and it saw
    // (at least) the three tokens above.
    tokio::time::sleep(Duration::from_millis(500)).await;
    watch.abort();
    reason_watch.abort();
    // Issued once, then Rotated for good: a reconcile that kept a fresh token never put the
    // reason back (upstream's GardenerCluster reverted to "created" after a rotation).
    let reasons = reasons.lock().unwrap().clone();
    assert_eq!(
        reasons,
        ["KubeconfigIssued", "KubeconfigRotated"],
        "condition reasons in the order stored"
    );
    let versions = seen.lock().unwrap().clone();
    assert!(
        versions.iter().all(Option::is_some),
        "a version of the Secret lacked its kubeconfig token: {:?}",
        versions.iter().map(Option::is_some).collect::<Vec<_>>()
    );
    for (i, t) in tokens.iter().enumerate() {
        assert!(
            versions.iter().any(|v| v.as_ref() == Some(t)),
            "the watcher never saw token {i}"
        );
    }

    delete_access(&requests, &secrets, "rotating", secret_name).await?;
    ctl.stop().await;
    for kc in &kubeconfigs {
        assert_not_logged(kc);
    }
    assert_not_logged(&admin_kc);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// RuntimeAccess: shoot calls only when there is something to do

/// A reconcile whose objects were applied for the current spec (fingerprint recorded in the KCP
/// Secret) and whose token is not due makes no shoot call at all: no shoot client, no re-applied
/// ServiceAccount, Role or binding. Counted by the
/// controller's own shoot-request metric, which counts every request its shoot clients send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_reconciles_with_nothing_to_do_make_no_shoot_call() -> Result<()> {
    use k8s_openapi::api::rbac::v1::Role;
    use kim_shared::api::runtime_access::RuntimeAccess;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin: admin_kc,
        kcp,
    } = set_up("kc-ra-quiet", &[]).await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let shoot_admin = env.shoot_client().await?;
    let apps = env.shoot_namespace("quiet").await?;
    let roles: Api<Role> = Api::namespaced(shoot_admin.clone(), &apps);
    let rbac_name = format!("kim-access:{ns}:quiet");

    // 600 s tokens with the default ratio 0.8: no rotation is due during the test.
    let ra = runtime_access(
        &ns,
        "quiet",
        &id,
        json!({
            "serviceAccount": {"name": "quiet", "namespace": apps},
            "role": {"namespace": apps, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
            "tokenExpirationSeconds": 600,
        }),
    )?;
    requests.create(&PostParams::default(), &ra).await?;
    let status = access_ready(&requests, "quiet").await?;
    let kc = access_kubeconfig(&secrets, &status).await?;
    let reconciles = ctl.access_settled().await?;
    // The status, Secret and finalizer writes each triggered another reconcile; only the one
    // that did the work reached the shoot: the five lists of what carries the request's label
    // (a spec not applied yet), ServiceAccount GET (404), the lists of ClusterRoleBindings and
    // of the namespace's RoleBindings (no foreign binding may name a new account) and POST,
    // Role and binding GET (404: none of that name may be someone else's) and POST (created,
    // never applied over something made meanwhile), TokenRequest POST.
    assert!(
        reconciles >= 3,
        "expected follow-up reconciles after the first, saw {reconciles} in all"
    );
    let calls = (
        ctl.shoot_requests(&["method=\"GET\""]).await?,
        ctl.shoot_requests(&["method=\"POST\""]).await?,
        ctl.shoot_requests(&["method=\"PATCH\""]).await?,
        ctl.shoot_requests(&[]).await?,
    );
    assert_eq!(
        calls,
        (10, 4, 0, 14),
        "shoot requests (GET, POST, PATCH, all) after {reconciles} reconciles"
    );
    let role_version = roles.get(&rbac_name).await?.metadata.resource_version;

    // Reconciles with nothing to do: an unrelated label on the request, an unrelated
    // annotation on its Secret (both watched), and the status write's own echo.
    requests
        .patch(
            "quiet",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"unrelated": "1"}}})),
        )
        .await?;
    let secret_name = status.secret_ref.clone().context("status.secretRef")?.name;
    secrets
        .patch(
            &secret_name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"unrelated": "1"}}})),
        )
        .await?;
    requests
        .patch(
            "quiet",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"unrelated": "2"}}})),
        )
        .await?;
    let after_noise = ctl.access_settled().await?;
    assert!(
        after_noise >= reconciles + 2,
        "the label and annotation changes must trigger reconciles ({reconciles} -> {after_noise})"
    );
    assert_eq!(
        ctl.shoot_requests(&[]).await?,
        calls.3,
        "{} reconciles with nothing to do reached the shoot",
        after_noise - reconciles
    );
    assert_eq!(
        roles.get(&rbac_name).await?.metadata.resource_version,
        role_version
    );
    let kept = requests.get("quiet").await?.status.unwrap_or_default();
    assert_eq!(kept.state.as_deref(), Some("Ready"));
    assert_eq!(kept.shoot_objects, status.shoot_objects, "recorded objects");
    assert_eq!(access_kubeconfig(&secrets, &kept).await?, kc);

    // A spec change is applied (one reconcile: the five labelled lists, ServiceAccount GET,
    // Role and binding GET and PATCH, the apply conditional on the version read), with the
    // same token and the same shoot client.
    requests
        .patch(
            "quiet",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"role": {"namespace": apps, "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}}})),
        )
        .await?;
    let changed = eventually("spec change applied", Duration::from_secs(30), || async {
        let status = requests.get("quiet").await?.status.unwrap_or_default();
        Ok(
            (status.observed_generation == Some(2) && status.state.as_deref() == Some("Ready"))
                .then_some(status),
        )
    })
    .await?;
    let role = roles.get(&rbac_name).await?;
    assert_eq!(
        role.rules.unwrap_or_default()[0].verbs,
        ["get", "list"],
        "the changed rules are in the shoot"
    );
    ctl.access_settled().await?;
    assert_eq!(
        (
            ctl.shoot_requests(&["method=\"GET\""]).await?,
            ctl.shoot_requests(&["method=\"POST\""]).await?,
            ctl.shoot_requests(&["method=\"PATCH\""]).await?,
            ctl.shoot_requests(&[]).await?,
        ),
        (18, 4, 2, 24),
        "shoot requests (GET, POST, PATCH, all) after the spec change"
    );
    assert_eq!(
        access_kubeconfig(&secrets, &changed).await?,
        kc,
        "a spec change alone does not need a new token"
    );
    assert_eq!(
        ctl.metric_sum(
            "infrastructure_manager_im_runtime_access_shoot_clients_built_total",
            &[]
        )
        .await?,
        1,
        "one shoot client for the runtime while its admin kubeconfig Secret is unchanged"
    );

    delete_access(&requests, &secrets, "quiet", &secret_name).await?;
    eventually("Role removed", Duration::from_secs(15), || async {
        Ok((!exists(&roles, &rbac_name).await?).then_some(()))
    })
    .await?;
    ctl.stop().await;
    assert_not_logged(&kc);
    assert_not_logged(&admin_kc);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// RuntimeAccess: ClusterRole with rules

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_with_cluster_role_rules_grants_them_cluster_wide_and_nothing_more()
-> Result<()> {
    use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kim_shared::api::runtime_access::RuntimeAccess;

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
    use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use kim_shared::api::runtime_access::RuntimeAccess;

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

// ---------------------------------------------------------------------------------------------
// RuntimeAccess: the least-privilege policy in the controller

/// Waits for the `KubeconfigReady` condition with `reason` and returns it.
async fn access_condition(
    requests: &Api<kim_shared::api::runtime_access::RuntimeAccess>,
    name: &str,
    reason: &str,
) -> Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    eventually(
        &format!("RuntimeAccess {name}: condition {reason}"),
        Duration::from_secs(30),
        || async {
            Ok(requests
                .get(name)
                .await?
                .status
                .and_then(|s| {
                    s.conditions
                        .into_iter()
                        .find(|c| c.type_ == "KubeconfigReady")
                })
                .filter(|c| c.reason == reason))
        },
    )
    .await
}

/// Objects that reach the KCP without the webhook (or were stored before a stricter policy)
/// are held to the same policy by the controller: InvalidSpec naming the field, nothing in the
/// shoot, no Secret. Attack: wildcard rules, a token minter for any ServiceAccount, exec into
/// any pod, every Secret of the cluster. On the code before the fix the token minter, exec
/// and secrets requests were served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_with_forbidden_rules_is_refused_by_the_controller() -> Result<()> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kim_shared::api::runtime_access::RuntimeAccess;

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
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_runs_pods_only_where_pod_security_holds_them() -> Result<()> {
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use kim_shared::api::runtime_access::RuntimeAccess;

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
    // The runtime's owner enforces baseline there: served.
    Api::<Namespace>::all(shoot_admin.clone())
        .patch(
            &apps,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "baseline"}}})),
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

/// Attack: a RuntimeAccess names a ServiceAccount that already exists in the runtime (a
/// system controller's in kube-system, or any workload's) with a harmless role, and gets a
/// kubeconfig with all of that account's rights. Now a protected namespace is InvalidSpec, and
/// an existing account elsewhere is refused with ServiceAccountNotOwned: no token, no Secret,
/// no binding to it. On the code before the fix both were Ready and the kubeconfig listed
/// every Secret of the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_never_hands_out_an_existing_service_account() -> Result<()> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
    use kim_shared::api::runtime_access::RuntimeAccess;

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
            "already a subject of ClusterRoleBinding/{ghost}-binding"
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
                .contains(&format!("already a subject of {binding}")),
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

/// Attack: a RuntimeAccess names an existing Secret of the namespace as its kubeconfig Secret;
/// the controller overwrote it and deleted it with the request. Now: SecretNotOwned naming it,
/// untouched, and still there after the request is gone. On the code before the fix the
/// request became Ready and the Secret was overwritten, owned and then deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_cannot_overwrite_or_delete_a_secret_it_does_not_own() -> Result<()> {
    use kim_shared::api::runtime_access::RuntimeAccess;

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
    use kim_shared::api::runtime_access::RuntimeAccess;

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
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kim_shared::api::runtime_access::RuntimeAccess;

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
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
    use kim_shared::api::runtime_access::RuntimeAccess;

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
    use kim_shared::api::runtime_access::RuntimeAccess;
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

/// A binding of the name a request would use, made by someone else with another roleRef: the
/// controller must not delete it to make its own (Kubernetes forbids changing a roleRef, which
/// is when the controller replaces its own bindings). The request fails naming it; on the code
/// before, the binding was deleted and replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_never_replaces_a_binding_it_did_not_make() -> Result<()> {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    use kim_shared::api::runtime_access::RuntimeAccess;
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
    let condition = access_condition(&requests, "taker", "ShootAccessFailed").await?;
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
    let condition = access_condition(&requests, "taker2", "ShootAccessFailed").await?;
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
    let condition = access_condition(&requests, "agg", "ShootAccessFailed").await?;
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

/// A runtime cluster's admission policy whose refusal reads differently each time (it names
/// the request's UID) changes the RuntimeAccess status at each attempt. The watch event of
/// that status write must not trigger the next attempt (kube-runtime runs an event at once,
/// whatever requeue the failed pass asked for), or the attempts would follow one another as
/// fast as the refusal comes back, past the backoff (1 s doubling), against the KCP and the
/// runtime cluster. The status carries the refusal's message, not a dump of the API answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refusal_that_reads_differently_each_time_is_still_retried_with_backoff() -> Result<()> {
    use k8s_openapi::api::rbac::v1::Role;
    use kim_shared::api::runtime_access::RuntimeAccess;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-varying", &[]).await?;
    let shoot_admin = env.shoot_client().await?;
    let apps = env.shoot_namespace("varying").await?;
    let account = unique("varying-");
    let role_name = kim_shared::access::shoot_rbac_name(&ns, "varying");
    let refusal = kim_tests::refusal::Refusal::create_with_message_expression(
        &shoot_admin,
        &format!("refuse-{account}"),
        json!({"apiGroups": ["rbac.authorization.k8s.io"], "apiVersions": ["v1"],
               "operations": ["CREATE", "UPDATE"], "resources": ["roles"]}),
        &format!("object.metadata.name != '{role_name}'"),
        "'no roles here, request ' + string(object.metadata.uid)",
    )
    .await?;
    // The policy takes effect once the apiserver has compiled it: probe with a Role of the
    // same name elsewhere.
    let probe_ns = env.shoot_namespace("varying-probe").await?;
    let roles: Api<Role> = Api::namespaced(shoot_admin.clone(), &probe_ns);
    eventually("the policy refuses", Duration::from_secs(30), || async {
        let role: Role = serde_json::from_value(json!({"metadata": {"name": role_name}}))?;
        let answer = roles
            .patch(
                &role_name,
                &kube::api::PatchParams::apply("e2e-probe"),
                &kube::api::Patch::Apply(&role),
            )
            .await;
        Ok(answer.is_err().then_some(()))
    })
    .await?;

    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let spec = configmap_reader(&account, &apps, &apps);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "varying", &id, spec)?,
        )
        .await?;
    let message_now = || async {
        let status = requests.get("varying").await?.status.unwrap_or_default();
        anyhow::Ok(
            status
                .conditions
                .into_iter()
                .find(|c| c.type_ == "KubeconfigReady" && c.reason == "ShootAccessFailed")
                .map(|c| c.message),
        )
    };
    eventually("ShootAccessFailed", Duration::from_secs(60), || async {
        message_now().await
    })
    .await?;
    // Every attempt leaves another message: count them over 12 s.
    let mut seen = std::collections::BTreeSet::new();
    let until = std::time::Instant::now() + Duration::from_secs(12);
    while std::time::Instant::now() < until {
        if let Some(m) = message_now().await? {
            assert!(m.contains("no roles here, request "), "{m}");
            assert!(
                !m.contains("Status {") && !m.contains("ApiError"),
                "the message is the refusal, not a dump of the answer: {m}"
            );
            seen.insert(m);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The backoff (1 s doubling, each delay half to all of it) allows at most 6 attempts in
    // 12 s; a loop on the status writes makes one per round trip.
    assert!(
        (2..=7).contains(&seen.len()),
        "{} attempts in 12 s: {seen:?}",
        seen.len()
    );

    refusal.delete().await?;
    access_ready(&requests, "varying").await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// The runtime's cluster refuses the TokenRequest (an admission policy on
/// `serviceaccounts/token` for this one account): the request shows `state: Error` with
/// `TokenRequestFailed` and the apiserver's reason, no kubeconfig Secret is written, and it
/// becomes Ready once the cause goes (no test saw this step fail before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_request_is_an_error_without_a_kubeconfig_until_it_passes() -> Result<()> {
    use kim_shared::api::runtime_access::RuntimeAccess;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-tokenref", &[]).await?;
    let shoot_admin = env.shoot_client().await?;
    let apps = env.shoot_namespace("tokenref").await?;
    let account = unique("refused-");
    let refusal = kim_tests::refusal::Refusal::create(
        &shoot_admin,
        &format!("refuse-{account}"),
        json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
               "resources": ["serviceaccounts/token"]}),
        &format!("!request.name.startsWith('{account}')"),
        "no tokens for this account here",
    )
    .await?;
    // The policy takes effect once the apiserver has compiled it: probe with an account of
    // the same prefix.
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts: Api<ServiceAccount> = Api::namespaced(shoot_admin.clone(), &apps);
    let probe = format!("{account}-probe");
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": probe}}))?,
        )
        .await?;
    eventually("the policy refuses", Duration::from_secs(30), || async {
        let request: TokenRequest =
            serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 600}}))?;
        let answer: std::result::Result<TokenRequest, kube::Error> = accounts
            .create_subresource("token", &probe, &PostParams::default(), &request)
            .await;
        let refused = answer.is_err();
        Ok(refused.then_some(()))
    })
    .await?;

    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let spec = configmap_reader(&account, &apps, &apps);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "tokenref", &id, spec)?,
        )
        .await?;
    let condition = eventually("TokenRequestFailed", Duration::from_secs(60), || async {
        let status = requests.get("tokenref").await?.status.unwrap_or_default();
        Ok(status
            .conditions
            .into_iter()
            .find(|c| c.type_ == "KubeconfigReady" && c.reason == "TokenRequestFailed")
            .filter(|_| status.state.as_deref() == Some("Error")))
    })
    .await?;
    assert!(
        condition
            .message
            .contains("no tokens for this account here"),
        "{}",
        condition.message
    );
    assert!(
        secrets.get_opt("tokenref-kubeconfig").await?.is_none(),
        "a kubeconfig Secret was written without a token"
    );

    refusal.delete().await?;
    access_ready(&requests, "tokenref").await?;
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
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::RoleBinding;
    use kim_shared::api::Runtime;
    use kim_shared::api::runtime_access::RuntimeAccess;

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
    use kim_shared::api::runtime_access::RuntimeAccess;

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
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::events::v1::Event;
    use kim_shared::api::runtime_access::RuntimeAccess;

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

/// Waits until the runtime's API server answers `client` with 401 (the apiserver checks a
/// token's account UID from its informer: a moment may pass after a revocation).
async fn refused_at_once(what: &str, client: &kube::Client) -> Result<()> {
    eventually(
        &format!("{what} refused"),
        Duration::from_secs(15),
        || async {
            Ok(match whoami(client.clone()).await {
                Err(e) => e
                    .downcast_ref::<kube::Error>()
                    .is_some_and(|e| matches!(e, kube::Error::Api(s) if s.code == 401))
                    .then_some(()),
                Ok(_) => None,
            })
        },
    )
    .await
}

/// A leaked kubeconfig is revoked without ending the access: `revoke-tokens=true` makes every
/// token issued so far fail at once (the ServiceAccount is replaced, and tokens are bound to
/// its UID), a new kubeconfig is written (`KubeconfigRevoked`) and works, and the annotation
/// is removed. Before, a leaked token stayed valid until it expired (up to 24 h), however
/// often the Secret was rewritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_the_tokens_of_a_runtime_access_ends_a_leaked_kubeconfig_at_once() -> Result<()> {
    use kim_shared::api::runtime_access::RuntimeAccess;
    use kube::ResourceExt;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-revoke", &[]).await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let apps = env.shoot_namespace("revoke").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "reader", &id, configmap_reader("reader", &apps, &apps))?,
        )
        .await?;
    let status = access_ready(&requests, "reader").await?;
    let leaked = access_kubeconfig(&secrets, &status).await?;
    let leaked_client = access::client_from_yaml("leaked", &leaked).await?;
    let identity = format!("system:serviceaccount:{apps}:reader");
    assert_eq!(whoami(leaked_client.clone()).await?, identity);

    const REVOKE: &str = "infrastructuremanager.kyma-project.io/revoke-tokens";
    requests
        .patch(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {REVOKE: "true"}}})),
        )
        .await?;
    let revoked = eventually("revoked", Duration::from_secs(60), || async {
        let ra = requests.get("reader").await?;
        let served = !ra.annotations().contains_key(REVOKE);
        let reason = ra
            .status
            .as_ref()
            .and_then(|s| s.conditions.first())
            .map(|c| c.reason.clone());
        Ok((served && reason.as_deref() == Some("KubeconfigRevoked")).then_some(ra))
    })
    .await?;
    let fresh = access_kubeconfig(&secrets, revoked.status.as_ref().context("status")?).await?;
    assert_ne!(token_of(&fresh), token_of(&leaked), "a new token");
    assert_eq!(
        whoami(access::client_from_yaml("fresh", &fresh).await?).await?,
        identity,
        "the new kubeconfig works"
    );
    refused_at_once("the leaked token", &leaked_client).await?;
    // Served once: the mark on the Secret that keeps a late pass from revoking again goes once
    // the annotation is seen gone, and the new token stays.
    let secret_name = &revoked
        .status
        .as_ref()
        .context("status")?
        .secret_ref
        .as_ref()
        .context("secretRef")?
        .name;
    const MARK: &str = "infrastructuremanager.kyma-project.io/tokens-revoked";
    eventually(
        "the revocation mark cleared",
        Duration::from_secs(30),
        || async {
            let secret = secrets.get(secret_name).await?;
            Ok((!secret.annotations().contains_key(MARK)).then_some(()))
        },
    )
    .await?;
    assert_eq!(
        token_of(&access_kubeconfig(&secrets, revoked.status.as_ref().context("status")?).await?),
        token_of(&fresh)
    );
    const TOKENS: &str = "infrastructure_manager_im_runtime_access_tokens_total";
    assert_eq!(
        ctl.metric_sum(TOKENS, &["result=\"revoked\""]).await?,
        1,
        "revoked once"
    );

    // A second revocation is served as the first.
    requests
        .patch(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {REVOKE: "true"}}})),
        )
        .await?;
    let again = eventually("revoked again", Duration::from_secs(60), || async {
        let ra = requests.get("reader").await?;
        let kc = access_kubeconfig(&secrets, ra.status.as_ref().context("status")?).await?;
        let served = !ra.annotations().contains_key(REVOKE) && token_of(&kc) != token_of(&fresh);
        Ok(served.then_some(kc))
    })
    .await?;
    let fresh_client = access::client_from_yaml("fresh", &fresh).await?;
    refused_at_once("the second kubeconfig's predecessor", &fresh_client).await?;
    assert_eq!(
        whoami(access::client_from_yaml("again", &again).await?).await?,
        identity
    );
    assert_eq!(
        ctl.metric_sum(TOKENS, &["result=\"revoked\""]).await?,
        2,
        "revoked twice in all"
    );

    // A revocation that cannot make the account again (someone else's binding names it now)
    // leaves no binding of ours behind: whoever creates an account of that name gets nothing.
    let shoot_admin = env.shoot_client().await?;
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(shoot_admin.clone(), &apps);
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "someone-elses"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": apps}],
            }))?,
        )
        .await?;
    requests
        .patch(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {REVOKE: "true"}}})),
        )
        .await?;
    access_condition(&requests, "reader", "ServiceAccountNotOwned").await?;
    let ours = format!("kim-access:{ns}:reader");
    assert!(!exists(&bindings, &ours).await?, "our binding was left");
    assert!(
        !exists(
            &Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(shoot_admin, &apps),
            "reader"
        )
        .await?
    );
    ctl.stop().await;
    assert_not_logged(&leaked);
    assert_not_logged(&fresh);
    assert_not_logged(&again);
    assert_not_logged(&admin);
    Ok(())
}

/// A consumer told "not ready yet" apart from "gone": a served RuntimeAccess whose runtime was
/// deprovisioned (no Runtime of its ID, and its GardenerCluster deleted) says `RuntimeGone`
/// (state `Error`), naming the Secret whose kubeconfig reaches no cluster; before, it waited as
/// `RuntimeNotReady` for ever, indistinguishable from a runtime being provisioned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_runtime_access_whose_runtime_is_gone_says_so() -> Result<()> {
    use kim_shared::api::runtime_access::RuntimeAccess;

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

/// Request `reader` (ConfigMaps in `apps`) for runtime `id`, served: its status and kubeconfig.
async fn served_reader(
    requests: &Api<kim_shared::api::runtime_access::RuntimeAccess>,
    secrets: &Api<Secret>,
    ns: &str,
    id: &str,
    apps: &str,
) -> Result<(kim_shared::api::runtime_access::RuntimeAccessStatus, String)> {
    requests
        .create(
            &PostParams::default(),
            &runtime_access(ns, "reader", id, configmap_reader("reader", apps, apps))?,
        )
        .await?;
    let status = access_ready(requests, "reader").await?;
    let kubeconfig = access_kubeconfig(secrets, &status).await?;
    Ok((status, kubeconfig))
}

/// Request `reader` was served again after a rotation of Gardener's (`first` is its kubeconfig
/// before): a new token, reason `KubeconfigRotated`, a kubeconfig that works, and no further
/// issue within 3 s.
async fn reissued_once(
    requests: &Api<kim_shared::api::runtime_access::RuntimeAccess>,
    secrets: &Api<Secret>,
    first: &str,
    apps: &str,
) -> Result<()> {
    let status = requests.get("reader").await?.status.context("status")?;
    let second = access_kubeconfig(secrets, &status).await?;
    anyhow::ensure!(token_of(&second) != token_of(first), "a new token");
    let reason = status
        .conditions
        .iter()
        .find(|c| c.type_ == "KubeconfigReady")
        .map(|c| c.reason.clone());
    assert_eq!(reason.as_deref(), Some("KubeconfigRotated"));
    let client = access::client_from_yaml("reissued", &second).await?;
    assert_eq!(
        whoami(client).await?,
        format!("system:serviceaccount:{apps}:reader")
    );
    let secret_name = &status.secret_ref.as_ref().context("status.secretRef")?.name;
    let written = secrets.get(secret_name).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    anyhow::ensure!(
        secrets.get(secret_name).await?.metadata.resource_version
            == written.metadata.resource_version,
        "the token kubeconfig was issued again after the rotation was served"
    );
    Ok(())
}

/// A rotation of the cluster's CAs gives the admin kubeconfig a new CA bundle (old and new CAs
/// while the rotation is prepared). A token kubeconfig with the old bundle would stop working
/// when the rotation completes, so it is issued again with the admin kubeconfig's bundle, once,
/// and works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_ca_bundle_in_the_admin_kubeconfig_reaches_the_token_kubeconfigs() -> Result<()> {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as B64;
    use kim_shared::api::runtime_access::RuntimeAccess;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-ca", &[]).await?;
    let apps = env.shoot_namespace("ra-ca").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let (_, first) = served_reader(&requests, &secrets, &ns, &id, &apps).await?;
    let ca_of = |yaml: &str| -> Result<String> {
        let kc = kube::config::Kubeconfig::from_yaml(yaml)?;
        kc.clusters
            .first()
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.certificate_authority_data.clone())
            .context("a kubeconfig with a CA bundle")
    };
    anyhow::ensure!(
        ca_of(&first)? == ca_of(&admin)?,
        "the bundle of the admin kubeconfig"
    );

    // The admin kubeconfig gets a bundle of two CAs: its own twice, a new bundle that the
    // cluster's serving certificate still verifies against.
    let pem = B64.decode(ca_of(&admin)?)?;
    let bundle = B64.encode([pem.clone(), pem].concat());
    let mut rotated = kube::config::Kubeconfig::from_yaml(&admin)?;
    for cluster in rotated
        .clusters
        .iter_mut()
        .filter_map(|c| c.cluster.as_mut())
    {
        cluster.certificate_authority_data = Some(bundle.clone());
    }
    // JSON is YAML.
    let rotated = serde_json::to_string(&rotated)?;
    secrets
        .patch(
            &format!("kubeconfig-{id}"),
            &PatchParams::default(),
            &Patch::Merge(
                json!({"data": {kim_shared::names::KUBECONFIG_SECRET_KEY: B64.encode(&rotated)}}),
            ),
        )
        .await?;
    eventually(
        "the token kubeconfig with the new bundle",
        Duration::from_secs(60),
        || async {
            let status = requests.get("reader").await?.status.context("status")?;
            let kubeconfig = access_kubeconfig(&secrets, &status).await?;
            Ok((ca_of(&kubeconfig)? == bundle).then_some(()))
        },
    )
    .await?;
    reissued_once(&requests, &secrets, &first, &apps).await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    Ok(())
}

/// Gardener rotates the cluster's ServiceAccount token signing key
/// (`rotate-serviceaccount-key-start`). Once the new key is in place
/// (`status.credentials.rotation.serviceAccountKey.lastInitiationFinishedTime`), a token issued
/// before is issued again, because it stops working when the rotation completes. It is issued
/// once, and the new kubeconfig works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_of_the_token_signing_key_issues_the_tokens_again() -> Result<()> {
    use kim_shared::api::runtime_access::RuntimeAccess;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-sakey", &[]).await?;
    let apps = env.shoot_namespace("ra-sakey").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let (status, first) = served_reader(&requests, &secrets, &ns, &id, &apps).await?;
    let secret_name = status
        .secret_ref
        .as_ref()
        .context("status.secretRef")?
        .name
        .clone();
    let issued_at = |secret: &Secret| -> Option<jiff::Timestamp> {
        secret
            .metadata
            .annotations
            .as_ref()?
            .get(LAST_SYNC)?
            .parse()
            .ok()
    };
    let issued = issued_at(&secrets.get(&secret_name).await?).context("the token's last-sync")?;

    // The Shoot of the runtime, as the Runtime reconciler marks it.
    let shoot = Api::<GardenerCluster>::namespaced(kcp.clone(), &ns)
        .get(&id)
        .await?
        .spec
        .shoot
        .name;
    let shoots: Api<Shoot> =
        Api::namespaced(env.garden_client().await?, fixtures::PROJECT_NAMESPACE);
    shoots
        .patch(
            &shoot,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                kim_shared::names::SHOOT_ANNOTATION_RUNTIME_ID: id,
            }}})),
        )
        .await?;
    let prepared =
        kim_tests::controller::prepare_rotation(&shoots, &shoot, "serviceAccountKey", issued)
            .await?;
    eventually(
        "a token issued after the new key",
        Duration::from_secs(60),
        || async {
            let secret = secrets.get(&secret_name).await?;
            Ok(issued_at(&secret).filter(|t| *t >= prepared).map(|_| ()))
        },
    )
    .await?;
    reissued_once(&requests, &secrets, &first, &apps).await?;
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
    use kim_shared::api::runtime_access::RuntimeAccess;
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

/// A revocation asked for again before any pass saw the first one's annotation gone is served,
/// not taken for the first (its mark on the KCP Secret names the request's version it served).
/// A ValidatingAdmissionPolicy keeps the mark from being cleared, so the second request meets
/// the first one's mark, as after a failover or with a watch behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_asked_again_before_the_first_was_seen_done_is_served() -> Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use kim_shared::api::runtime_access::RuntimeAccess;
    use kube::ResourceExt;

    let Setup {
        env,
        ns,
        ctl,
        id,
        kcp,
        ..
    } = set_up("kc-ra-rerevoke", &[]).await?;
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let apps = env.shoot_namespace("rerevoke").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "reader", &id, configmap_reader("reader", &apps, &apps))?,
        )
        .await?;
    let status = access_ready(&requests, "reader").await?;
    const MARK: &str = "infrastructuremanager.kyma-project.io/tokens-revoked";
    let policy_name = format!("keep-revocation-mark-{ns}");
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(kcp.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(kcp.clone());
    policies
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": policy_name},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                        "operations": ["UPDATE"], "resources": ["secrets"]}]},
                    "validations": [{
                        "expression": format!("!(has(oldObject.metadata.annotations) && '{MARK}' in oldObject.metadata.annotations) || (has(object.metadata.annotations) && '{MARK}' in object.metadata.annotations)"),
                        "message": "the revocation mark stays (test)",
                    }],
                },
            }))?,
        )
        .await?;
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": policy_name},
                "spec": {"policyName": policy_name, "validationActions": ["Deny"],
                    "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}},
            }))?,
        )
        .await?;
    // In force once a probe Secret's mark cannot be removed.
    let probe: Secret = serde_json::from_value(json!({
        "metadata": {"name": "policy-probe", "annotations": {MARK: "1"}},
    }))?;
    secrets.create(&PostParams::default(), &probe).await?;
    eventually("the policy in force", Duration::from_secs(30), || async {
        // Marked again first: a removal before the policy was in force went through.
        secrets
            .patch(
                "policy-probe",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {MARK: "1"}}})),
            )
            .await?;
        let removed = secrets
            .patch(
                "policy-probe",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {MARK: null}}})),
            )
            .await;
        Ok(removed.is_err().then_some(()))
    })
    .await?;
    let tokens = "infrastructure_manager_im_runtime_access_tokens_total";
    let revoked = || ctl.metric_sum(tokens, &["result=\"revoked\""]);
    const REVOKE: &str = "infrastructuremanager.kyma-project.io/revoke-tokens";
    let annotate = || async {
        requests
            .patch(
                "reader",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {REVOKE: "true"}}})),
            )
            .await
    };
    let served = |count: u64| {
        let (requests, secrets, status) = (&requests, &secrets, &status);
        async move {
            eventually(
                &format!("revocation {count} served"),
                Duration::from_secs(60),
                || async {
                    let ra = requests.get("reader").await?;
                    let done = !ra.annotations().contains_key(REVOKE) && revoked().await? == count;
                    Ok(done.then_some(()))
                },
            )
            .await?;
            access_kubeconfig(secrets, status).await
        }
    };
    annotate().await?;
    let first = served(1).await?;
    let secret_name = status
        .secret_ref
        .as_ref()
        .context("secretRef")?
        .name
        .clone();
    let marked = secrets.get(&secret_name).await?;
    assert!(
        marked.annotations().contains_key(MARK),
        "the mark stays while the policy refuses its removal"
    );
    // Asked again: the request's annotation is back, the first one's mark still there.
    annotate().await?;
    let second = served(2).await?;
    assert_ne!(token_of(&second), token_of(&first), "a new token");
    bindings
        .delete(&policy_name, &DeleteParams::default())
        .await?;
    policies
        .delete(&policy_name, &DeleteParams::default())
        .await?;
    ctl.stop().await;
    Ok(())
}
