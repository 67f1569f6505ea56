//! Token kubeconfigs over time: issuance, rotation before expiry, retries of refused token
//! requests, revocation, and new credentials of the runtime (CA bundle, signing key).

use super::*;

/// The ID the API server gives the client's credential (`JTI=<id>` for a ServiceAccount token),
/// as its audit log names it.
async fn credential_id(client: kube::Client) -> Result<Option<String>> {
    Ok(user_info(client)
        .await?
        .extra
        .and_then(|mut e| e.remove("authentication.kubernetes.io/credential-id"))
        .and_then(|ids| ids.into_iter().next()))
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
    // of all RoleBindings (no foreign binding may name a new account) and POST,
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
    // the label-selected lists of bindings other requests made (none may name the account),
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
        (20, 4, 2, 26),
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

/// A runtime cluster's admission policy whose refusal reads differently each time (it names
/// the request's UID) changes the RuntimeAccess status at each attempt. The watch event of
/// that status write must not trigger the next attempt (kube-runtime runs an event at once,
/// whatever requeue the failed pass asked for), or the attempts would follow one another as
/// fast as the refusal comes back, past the backoff (1 s doubling), against the KCP and the
/// runtime cluster. The status carries the refusal's message, not a dump of the API answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refusal_that_reads_differently_each_time_is_still_retried_with_backoff() -> Result<()> {
    use k8s_openapi::api::rbac::v1::Role;

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

/// A leaked kubeconfig is revoked without ending the access: `revoke-tokens=true` makes every
/// token issued so far fail at once (the ServiceAccount is replaced, and tokens are bound to
/// its UID), a new kubeconfig is written (`KubeconfigRevoked`) and works, and the annotation
/// is removed. Before, a leaked token stayed valid until it expired (up to 24 h), however
/// often the Secret was rewritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_the_tokens_of_a_runtime_access_ends_a_leaked_kubeconfig_at_once() -> Result<()> {
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

    use kim_controller::access::reconcile::ANNOTATION_REVOKE_TOKENS as REVOKE;
    requests
        .patch(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {REVOKE: "true"}}})),
        )
        .await?;
    let revoked = revoked(&requests, "reader", Duration::from_secs(60)).await?;
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

/// A pass that wrote the token but stopped before it recorded the apply (the shoot-objects
/// annotations of the Secret) and the status: the next pass cannot tell the account from one
/// someone gave the request's marks, so it makes the account anew, and the token the Secret
/// holds, bound to the old account, is replaced in that pass. Kept, it would fail every call
/// until its rotation was due. The stop is made by hand: the controller stopped, the record and
/// the status's list removed, a new controller started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_made_anew_replaces_the_token_the_secret_holds() -> Result<()> {
    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-renew", &[]).await?;
    let apps = env.shoot_namespace("renew").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let (status, first) = served_reader(&requests, &secrets, &ns, &id, &apps).await?;
    let old = access::client_from_yaml("old", &first).await?;
    ctl.access_settled().await?;
    ctl.stop().await;
    let secret_name = status.secret_ref.context("status.secretRef")?.name;
    secrets
        .patch(
            &secret_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                kim_controller::access::record::ANNOTATION_SHOOT_OBJECTS: null,
                kim_controller::access::record::ANNOTATION_SHOOT_OBJECTS_HASH: null,
            }}})),
        )
        .await?;
    requests
        .patch_status(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"shootObjects": null}})),
        )
        .await?;
    let ctl = Controller::start(env, &ns, &[]).await?;
    let second = eventually("a new token", Duration::from_secs(60), || async {
        let kubeconfig = access_kubeconfig(
            &secrets,
            &requests.get("reader").await?.status.unwrap_or_default(),
        )
        .await?;
        Ok((token_of(&kubeconfig) != token_of(&first)).then_some(kubeconfig))
    })
    .await
    .context("the token of the old account was kept")?;
    refused_at_once("the old account's token", &old).await?;
    assert_eq!(
        whoami(access::client_from_yaml("new", &second).await?).await?,
        format!("system:serviceaccount:{apps}:reader")
    );
    ctl.stop().await;
    assert_not_logged(&first);
    assert_not_logged(&second);
    assert_not_logged(&admin);
    Ok(())
}

/// An account made before the controller labelled its objects with the request's UID (the
/// managed-by label and the request's annotation, no UID label) is the request's own when the
/// request was served with it, as every pass that reaches the runtime counts it: a revocation
/// replaces it. The revocation's delete counted only the UID label and refused
/// (`RevocationRefused`), the tokens kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_replaces_an_account_made_before_the_uid_label() -> Result<()> {
    use kim_controller::access::reconcile::ANNOTATION_REVOKE_TOKENS as REVOKE;
    use kim_controller::access::shoot::LABEL_RUNTIME_ACCESS_UID;
    use kube::ResourceExt;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-legacy", &[]).await?;
    let apps = env.shoot_namespace("legacy").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let (_, leaked) = served_reader(&requests, &secrets, &ns, &id, &apps).await?;
    let leaked_client = access::client_from_yaml("leaked", &leaked).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(env.shoot_client().await?, &apps);
    let legacy = accounts
        .patch(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {LABEL_RUNTIME_ACCESS_UID: null}}})),
        )
        .await?;
    annotate(&requests, "reader", json!({REVOKE: "true"})).await?;
    revoked(&requests, "reader", Duration::from_secs(60)).await?;
    assert_ne!(
        accounts.get("reader").await?.uid(),
        legacy.uid(),
        "replaced"
    );
    refused_at_once("the leaked token", &leaked_client).await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    assert_not_logged(&leaked);
    Ok(())
}

/// Attack: whoever may change ServiceAccounts in the runtime (another request's role, a
/// listed `edit`) strips a leaked token's account of the request's marks and binds it
/// elsewhere, so that a revocation takes it for someone else's and leaves it, with its tokens
/// (`RevocationRefused`). Now the Secret records the UID of the account its tokens were issued
/// for, and the revocation deletes the account of that UID whatever its labels and bindings
/// say: the leaked token is refused at once. A new account of the name waits until no binding
/// the request did not make names it; then the request is served with it. The request's
/// deletion takes the account of the recorded UID in the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_ends_the_tokens_of_an_account_stripped_of_its_marks() -> Result<()> {
    use k8s_openapi::api::rbac::v1::RoleBinding;
    use kim_controller::access::reconcile::ANNOTATION_REVOKE_TOKENS as REVOKE;
    use kim_controller::access::token::ANNOTATION_SERVICE_ACCOUNT_UID;
    use kube::ResourceExt;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-stripped", &[]).await?;
    let apps = env.shoot_namespace("stripped").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let (status, leaked) = served_reader(&requests, &secrets, &ns, &id, &apps).await?;
    let leaked_client = access::client_from_yaml("leaked", &leaked).await?;
    let shoot_admin = env.shoot_client().await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(shoot_admin.clone(), &apps);
    let served_with = accounts.get("reader").await?.uid().context("account uid")?;
    let secret_name = &status.secret_ref.as_ref().context("status.secretRef")?.name;
    let recorded = || async {
        let secret = secrets.get(secret_name).await?;
        anyhow::Ok(
            secret
                .annotations()
                .get(ANNOTATION_SERVICE_ACCOUNT_UID)
                .cloned(),
        )
    };
    assert_eq!(
        recorded().await?,
        Some(served_with.clone()),
        "the Secret names the account its token authenticates as"
    );
    strip_marks(&accounts, "reader").await?;
    let elsewhere: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "keeps-the-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": apps}],
    }))?;
    let bindings = Api::<RoleBinding>::namespaced(shoot_admin.clone(), &apps);
    bindings.create(&PostParams::default(), &elsewhere).await?;
    annotate(&requests, "reader", json!({REVOKE: "true"})).await?;
    refused_at_once("the leaked token", &leaked_client).await?;
    // A new account of the name would carry the binding's rights: refused until it goes.
    access_condition_saying(
        &requests,
        "reader",
        "ServiceAccountNotOwned",
        &format!("is a subject of RoleBinding/{apps}/keeps-the-reader"),
    )
    .await?;
    bindings
        .delete("keeps-the-reader", &DeleteParams::default())
        .await?;
    annotate(&requests, "reader", json!({"e2e/nudge": "1"})).await?;
    let served = revoked(&requests, "reader", Duration::from_secs(60)).await?;
    let renewed = accounts.get("reader").await?;
    assert_ne!(
        renewed.uid().as_deref(),
        Some(served_with.as_str()),
        "made anew"
    );
    let kubeconfig = access_kubeconfig(&secrets, served.status.as_ref().context("status")?).await?;
    let client = access::client_from_yaml("renewed", &kubeconfig).await?;
    assert_eq!(
        whoami(client).await?,
        format!("system:serviceaccount:{apps}:reader")
    );
    assert_eq!(recorded().await?, renewed.uid());
    // The request's deletion takes the account its tokens authenticate as, marks or not.
    strip_marks(&accounts, "reader").await?;
    delete_access(&requests, &secrets, "reader", secret_name).await?;
    assert!(
        !exists(&accounts, "reader").await?,
        "the account of the deleted request's tokens stayed"
    );
    ctl.stop().await;
    assert_not_logged(&admin);
    assert_not_logged(&leaked);
    assert_not_logged(&kubeconfig);
    Ok(())
}

/// Request `reader` (ConfigMaps in `apps`) for runtime `id`, served: its status and kubeconfig.
async fn served_reader(
    requests: &Api<RuntimeAccess>,
    secrets: &Api<Secret>,
    ns: &str,
    id: &str,
    apps: &str,
) -> Result<(RuntimeAccessStatus, String)> {
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
    requests: &Api<RuntimeAccess>,
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

    let (shoots, shoot) = runtime_shoot(env, &kcp, &ns, &id).await?;
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

/// The state gauge of RuntimeAccesses.
const STATE: &str = "infrastructure_manager_im_runtime_access_state";

/// The Shoot of runtime `id`, marked with its runtime ID as the Runtime reconciler marks it.
async fn runtime_shoot(
    env: &TestEnv,
    kcp: &kube::Client,
    ns: &str,
    id: &str,
) -> Result<(Api<Shoot>, String)> {
    let shoot = Api::<GardenerCluster>::namespaced(kcp.clone(), ns)
        .get(id)
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
    Ok((shoots, shoot))
}

/// Asks Gardener (the simulator) to hibernate or wake Shoot `shoot` and waits until it is done.
async fn hibernate(shoots: &Api<Shoot>, shoot: &str, enabled: bool) -> Result<()> {
    shoots
        .patch(
            shoot,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hibernation": {"enabled": enabled}}})),
        )
        .await?;
    eventually(
        &format!("Shoot {shoot} hibernated: {enabled}"),
        Duration::from_secs(60),
        || async {
            let s = shoots.get(shoot).await?;
            let status = s.status.as_ref();
            let done = status.and_then(|st| st.hibernated) == Some(enabled)
                && s.metadata.generation == status.and_then(|st| st.observed_generation)
                && status
                    .and_then(|st| st.last_operation.as_ref())
                    .is_some_and(|op| op.state == "Succeeded");
            Ok(done.then_some(()))
        },
    )
    .await
}

/// A request of a runtime whose cluster is hibernated waits: `Pending` with
/// `RuntimeHibernated`, nothing done in the cluster, no failed reconcile (a hibernated trial
/// runtime would otherwise retry every minute, and count as an error each time, until woken).
/// As the Shoot watch sees the wake-up asked for it is served at once: waiting requests look
/// again only every 10 minutes on their own. What guards access is tried whatever the watch
/// shows, and done where the cluster answers: a revocation, and the cleanup of a deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_of_a_hibernated_cluster_waits_and_is_served_when_it_is_woken_up() -> Result<()> {
    use kim_controller::access::reconcile::ANNOTATION_REVOKE_TOKENS as REVOKE;
    use kube::ResourceExt;

    let Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    } = set_up("kc-ra-sleep", &[]).await?;
    let apps = env.shoot_namespace("ra-sleep").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let (shoots, shoot) = runtime_shoot(env, &kcp, &ns, &id).await?;
    hibernate(&shoots, &shoot, true).await?;
    let failed_before = ctl.access_reconciles_with("error").await?;

    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "reader", &id, configmap_reader("reader", &apps, &apps))?,
        )
        .await?;
    access_condition_saying(&requests, "reader", "RuntimeHibernated", "is hibernated").await?;
    let waiting = requests.get("reader").await?.status.context("status")?;
    assert_eq!(waiting.state.as_deref(), Some("Pending"));
    assert!(waiting.secret_ref.is_none(), "a kubeconfig was written");
    let accounts: Api<ServiceAccount> = Api::namespaced(env.shoot_client().await?, &apps);
    assert!(
        !exists(&accounts, "reader").await?,
        "the hibernated cluster was acted on"
    );
    let state = |state: &str, reason: &str| {
        let labels = [
            "name=\"reader\"".to_owned(),
            format!("runtimeId=\"{id}\""),
            format!("serviceAccount=\"{apps}/reader\""),
            format!("state=\"{state}\""),
            format!("reason=\"{reason}\""),
        ];
        let ctl = &ctl;
        async move {
            let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
            ctl.metric_sum(STATE, &labels).await
        }
    };
    assert_eq!(state("Pending", "RuntimeHibernated").await?, 1);

    hibernate(&shoots, &shoot, false).await?;
    let status = access_ready(&requests, "reader").await?;
    let first = access_kubeconfig(&secrets, &status).await?;
    assert_eq!(
        whoami(access::client_from_yaml("reader", &first).await?).await?,
        format!("system:serviceaccount:{apps}:reader")
    );
    assert_eq!(state("Ready", "KubeconfigIssued").await?, 1);
    assert_eq!(
        ctl.metric_sum(STATE, &["name=\"reader\""]).await?,
        1,
        "one series per request"
    );
    assert_eq!(
        ctl.access_reconciles_with("error").await?,
        failed_before,
        "waiting for a hibernated cluster counted as a failed reconcile"
    );

    // Hibernated again, but answering (here: always; in Gardener, early in a wake-up): a
    // revocation is served, and a deletion removes what the request created there. A new
    // request waiting shows that the controller sees the cluster hibernated by then.
    hibernate(&shoots, &shoot, true).await?;
    requests
        .create(
            &PostParams::default(),
            &runtime_access(&ns, "probe", &id, configmap_reader("probe", &apps, &apps))?,
        )
        .await?;
    access_condition_saying(&requests, "probe", "RuntimeHibernated", "is hibernated").await?;
    requests
        .patch(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {REVOKE: "true"}}})),
        )
        .await?;
    eventually(
        "revoked while hibernated",
        Duration::from_secs(60),
        || async {
            let ra = requests.get("reader").await?;
            let kc = access_kubeconfig(&secrets, ra.status.as_ref().context("status")?).await?;
            Ok(
                (!ra.annotations().contains_key(REVOKE) && token_of(&kc) != token_of(&first))
                    .then_some(()),
            )
        },
    )
    .await?;
    refused_at_once(
        "the revoked token",
        &access::client_from_yaml("first", &first).await?,
    )
    .await?;
    delete_access(&requests, &secrets, "reader", "reader-kubeconfig").await?;
    assert!(
        !exists(&accounts, "reader").await?,
        "the deletion left the ServiceAccount in a cluster that answers"
    );
    assert_eq!(
        ctl.metric_sum(STATE, &["name=\"reader\""]).await?,
        0,
        "the state series outlived the request"
    );
    ctl.stop().await;
    assert_not_logged(&admin);
    assert_not_logged(&first);
    Ok(())
}

/// A revocation whose runtime cluster is hibernated and does not answer waits for it
/// (`Pending` with `RuntimeHibernated`, not a failure). A deletion waits too: `Deleting`
/// with `RuntimeHibernated`, counted as `result="waiting"` (not as a failed reconcile), what it
/// created there left in place, and finished as the Shoot watch sees the wake-up asked for
/// (the next look would come only 10 minutes later). Its own environment: the runtime
/// cluster's API server is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_waits_for_a_hibernated_cluster_that_does_not_answer() -> Result<()> {
    use kim_controller::access::reconcile::ANNOTATION_REVOKE_TOKENS as REVOKE;
    use kim_tests::testenv::TestEnvOptions;

    let env = &TestEnv::start(TestEnvOptions::default()).await?;
    let ns = env.namespace("kc-ra-asleep").await?;
    let ctl = Controller::start(env, &ns, &[]).await?;
    let (id, admin) = runtime_with_admin_kubeconfig(env, &ns).await?;
    let kcp = env.kcp_client().await?;
    let apps = env.shoot_namespace("ra-asleep").await?;
    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let (_, kubeconfig) = served_reader(&requests, &secrets, &ns, &id, &apps).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(env.shoot_client().await?, &apps);
    let (shoots, shoot) = runtime_shoot(env, &kcp, &ns, &id).await?;
    hibernate(&shoots, &shoot, true).await?;
    env.stop_apiserver("shoot-apiserver")?;
    let (failed_before, waited_before) = (
        ctl.access_reconciles_with("error").await?,
        ctl.access_reconciles_with("waiting").await?,
    );

    // A revocation is tried, and waits for the cluster to answer without failing.
    requests
        .patch(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {REVOKE: "true"}}})),
        )
        .await?;
    access_condition_saying(&requests, "reader", "RuntimeHibernated", "did not answer").await?;
    assert_eq!(
        requests
            .get("reader")
            .await?
            .status
            .context("status")?
            .state
            .as_deref(),
        Some("Pending")
    );

    requests.delete("reader", &DeleteParams::default()).await?;
    access_condition_saying(
        &requests,
        "reader",
        "RuntimeHibernated",
        "the deletion waits",
    )
    .await?;
    assert_eq!(
        requests
            .get("reader")
            .await?
            .status
            .context("status")?
            .state
            .as_deref(),
        Some("Deleting")
    );
    eventually(
        "the waiting deletion counted",
        Duration::from_secs(30),
        || async {
            Ok((ctl.access_reconciles_with("waiting").await? > waited_before).then_some(()))
        },
    )
    .await?;
    assert_eq!(
        ctl.access_reconciles_with("error").await?,
        failed_before,
        "the deletion waiting for a hibernated cluster counted as a failed reconcile"
    );
    assert!(exists(&secrets, "reader-kubeconfig").await?);

    env.start_apiserver("shoot-apiserver").await?;
    assert!(
        exists(&accounts, "reader").await?,
        "the ServiceAccount is gone before the deletion ran"
    );
    hibernate(&shoots, &shoot, false).await?;
    eventually(
        "RuntimeAccess reader and its ServiceAccount gone",
        Duration::from_secs(60),
        || async {
            let gone = requests.get_opt("reader").await?.is_none()
                && !exists(&accounts, "reader").await?
                && !exists(&secrets, "reader-kubeconfig").await?;
            Ok(gone.then_some(()))
        },
    )
    .await?;
    ctl.stop().await;
    assert_not_logged(&admin);
    assert_not_logged(&kubeconfig);
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
    use kim_controller::access::reconcile::ANNOTATION_REVOKE_TOKENS as REVOKE;
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
