//! RuntimeAccess (RBAC kubeconfigs): what a token kubeconfig grants, its rotation, the
//! least-privilege policy in the controller, and what the controller must not touch.

use super::*;
use k8s_openapi::api::core::v1::ServiceAccount;
use kim_shared::api::runtime_access::{RuntimeAccess, RuntimeAccessStatus};

mod abuse;
mod cleanup;
mod grants;
mod tokens;

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

fn forbidden<T>(r: std::result::Result<T, kube::Error>) -> bool {
    matches!(r, Err(kube::Error::Api(s)) if s.code == 403)
}

// ---------------------------------------------------------------------------------------------
// RuntimeAccess: helpers shared by the variants below
fn runtime_access(
    ns: &str,
    name: &str,
    runtime_id: &str,
    spec: serde_json::Value,
) -> Result<RuntimeAccess> {
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
async fn access_ready(requests: &Api<RuntimeAccess>, name: &str) -> Result<RuntimeAccessStatus> {
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
async fn access_kubeconfig(secrets: &Api<Secret>, status: &RuntimeAccessStatus) -> Result<String> {
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

/// Waits until the runtime's API server answers `client` with 401 (the apiserver checks a
/// token's account UID from its informer: a moment may pass after a revocation).
async fn refused_at_once(what: &str, client: &kube::Client) -> Result<()> {
    refused_within(what, client, Duration::from_secs(15)).await
}

/// Waits up to `within` until the runtime's API server answers `client` with 401.
async fn refused_within(what: &str, client: &kube::Client, within: Duration) -> Result<()> {
    eventually(&format!("{what} refused"), within, || async {
        Ok(match whoami(client.clone()).await {
            Err(e) => e
                .downcast_ref::<kube::Error>()
                .is_some_and(|e| matches!(e, kube::Error::Api(s) if s.code == 401))
                .then_some(()),
            Ok(_) => None,
        })
    })
    .await
}

/// Waits up to `within` until the revocation asked of request `name` is served: the annotation
/// gone and the condition `KubeconfigRevoked`. Returns the request.
async fn revoked(
    requests: &Api<RuntimeAccess>,
    name: &str,
    within: Duration,
) -> Result<RuntimeAccess> {
    use kim_controller::access::reconcile::ANNOTATION_REVOKE_TOKENS;
    use kube::ResourceExt;
    eventually("revoked", within, || async {
        let ra = requests.get(name).await?;
        let reason = ra
            .status
            .as_ref()
            .and_then(|s| s.conditions.first())
            .map(|c| c.reason.clone());
        let served = !ra.annotations().contains_key(ANNOTATION_REVOKE_TOKENS);
        Ok((served && reason.as_deref() == Some("KubeconfigRevoked")).then_some(ra))
    })
    .await
}

/// Deletes the request and waits until it and its Secret are gone.
async fn delete_access(
    requests: &Api<RuntimeAccess>,
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
// RuntimeAccess: the least-privilege policy in the controller

/// Waits up to 60 s for the `KubeconfigReady` condition with `reason` whose message contains
/// `words` (a request refused with backoff comes back within a minute) and returns it.
async fn access_condition_saying(
    requests: &Api<RuntimeAccess>,
    name: &str,
    reason: &str,
    words: &str,
) -> Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    eventually(
        &format!("RuntimeAccess {name}: condition {reason} saying {words:?}"),
        Duration::from_secs(60),
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
                .filter(|c| c.reason == reason && c.message.contains(words)))
        },
    )
    .await
}

/// Merges `annotations` into the request's (a change of them asks for a pass at once, also of
/// a request waiting out its backoff).
async fn annotate(
    requests: &Api<RuntimeAccess>,
    name: &str,
    annotations: serde_json::Value,
) -> Result<()> {
    requests
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await?;
    Ok(())
}

/// [`configmap_reader`] whose role lists Pods in `apps` instead.
fn pods_lister(account: &str, namespace: &str, apps: &str) -> serde_json::Value {
    let mut spec = configmap_reader(account, namespace, apps);
    spec["role"]["rules"] = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]);
    spec
}

/// Waits until the kubeconfig may list Pods in `apps` (RBAC caches may take a moment).
async fn lists_pods(kubeconfig: &str, apps: &str) -> Result<()> {
    let client = access::client_from_yaml("pods-lister", kubeconfig).await?;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, apps);
    let lp = ListParams::default();
    once_allowed("listing pods", || pods.list(&lp)).await?;
    Ok(())
}

/// Takes the request's marks (the UID and managed-by labels) off account `name`, as someone
/// who may change ServiceAccounts in the runtime could.
async fn strip_marks(accounts: &Api<ServiceAccount>, name: &str) -> Result<()> {
    use kim_controller::access::shoot::LABEL_RUNTIME_ACCESS_UID;
    accounts
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                LABEL_RUNTIME_ACCESS_UID: null,
                kim_shared::names::LABEL_MANAGED_BY: null}}})),
        )
        .await?;
    Ok(())
}

/// [`access_condition_saying`] anything: waits for the `KubeconfigReady` condition with `reason`.
async fn access_condition(
    requests: &Api<RuntimeAccess>,
    name: &str,
    reason: &str,
) -> Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    access_condition_saying(requests, name, reason, "").await
}
