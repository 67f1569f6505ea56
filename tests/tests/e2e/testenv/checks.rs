//! End-to-end checks of the environment itself: the real Gardener API with the simulator, the
//! adminkubeconfig path into the shoot cluster, RBAC there, and Gardener's own validation.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kim_shared::gardener::Shoot;
use kim_tests::fixtures;
use kim_tests::testenv::{Credentials, TestEnv, access};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;

fn unique(prefix: &str) -> String {
    format!("{prefix}{:04x}", rand::random::<u16>())
}

async fn wait_for_state(api: &Api<Shoot>, name: &str, state: &'static str) -> Shoot {
    let cond = move |s: Option<&Shoot>| {
        s.and_then(|s| s.status.as_ref())
            .and_then(|st| st.last_operation.as_ref())
            .is_some_and(|op| op.state == state && (state != "Succeeded" || op.progress == 100))
    };
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(api.clone(), name, cond),
    )
    .await
    .unwrap_or_else(|_| panic!("Shoot {name} did not reach {state} within 30 s"))
    .unwrap()
    .unwrap()
}

async fn admin_kubeconfig(env: &TestEnv, name: &str) -> String {
    let client = env.garden_client().await.unwrap();
    let api: Api<Shoot> = Api::namespaced(client, fixtures::PROJECT_NAMESPACE);
    let body = serde_json::json!({"apiVersion": "authentication.gardener.cloud/v1alpha1", "kind": "AdminKubeconfigRequest", "spec": {"expirationSeconds": 600}});
    let resp: serde_json::Value = api
        .create_subresource("adminkubeconfig", name, &PostParams::default(), &body)
        .await
        .unwrap();
    let b64 = resp["status"]["kubeconfig"]
        .as_str()
        .expect("adminkubeconfig response has status.kubeconfig");
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn shoot_reaches_succeeded_and_its_admin_kubeconfig_works_in_the_shoot_cluster() {
    let env = TestEnv::shared().await.unwrap();
    let api: Api<Shoot> = Api::namespaced(
        env.garden_client().await.unwrap(),
        fixtures::PROJECT_NAMESPACE,
    );
    let name = unique("e2e-ok-");
    let shoot: Shoot = serde_json::from_value(fixtures::shoot(&name, "aws").unwrap()).unwrap();
    api.create(&PostParams::default(), &shoot).await.unwrap();

    let done = wait_for_state(&api, &name, "Succeeded").await;
    let status = done.status.unwrap();
    assert_eq!(status.last_operation.unwrap().type_, "Create");
    assert!(done.spec.seed_name.unwrap().starts_with("seed-aws-"));
    assert_eq!(
        status.advertised_addresses.unwrap()[0].url,
        env.shoot().unwrap().server
    );

    let kubeconfig = admin_kubeconfig(env, &name).await;
    let client = access::client_from_yaml("issued", &kubeconfig)
        .await
        .unwrap();
    let nss = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        nss.items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("kube-system"))
    );
}

#[tokio::test]
async fn service_account_token_in_the_shoot_is_allowed_exactly_what_its_role_grants() {
    let env = TestEnv::shared().await.unwrap();
    let ns = env.shoot_namespace("rbac").await.unwrap();
    let admin = env.shoot_client().await.unwrap();
    let sa: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "reader"}})).unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let role: Role = serde_json::from_value(serde_json::json!({"metadata": {"name": "cm-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let rb: RoleBinding =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "cm-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]}))
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &rb)
        .await
        .unwrap();

    let tr: TokenRequest =
        serde_json::from_value(serde_json::json!({"spec": {"expirationSeconds": 600}})).unwrap();
    let tr = Api::<ServiceAccount>::namespaced(admin, &ns)
        .create_token_request("reader", &PostParams::default(), &tr)
        .await
        .unwrap();
    let token = tr.status.unwrap().token.unwrap();
    let sa_client = env
        .shoot()
        .unwrap()
        .client("reader", Credentials::Token(&token))
        .await
        .unwrap();

    // Allowed: list ConfigMaps in its namespace. The RBAC cache may take a moment.
    let cms: Api<ConfigMap> = Api::namespaced(sa_client.clone(), &ns);
    let mut allowed = false;
    for _ in 0..50 {
        if cms.list(&ListParams::default()).await.is_ok() {
            allowed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(allowed, "the Role should allow listing ConfigMaps");
    // Not granted: creating ConfigMaps, reading Secrets, other namespaces.
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}})).unwrap();
    let forbidden =
        |r: Result<(), kube::Error>| matches!(r, Err(kube::Error::Api(e)) if e.code == 403);
    assert!(forbidden(
        cms.create(&PostParams::default(), &cm).await.map(|_| ())
    ));
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(sa_client.clone(), &ns);
    assert!(forbidden(
        secrets.list(&ListParams::default()).await.map(|_| ())
    ));
    let other: Api<ConfigMap> = Api::namespaced(sa_client, "kube-system");
    assert!(forbidden(
        other.list(&ListParams::default()).await.map(|_| ())
    ));
}

#[tokio::test]
async fn gardener_rejects_a_worker_pool_name_longer_than_15_characters() {
    let env = TestEnv::shared().await.unwrap();
    let api: Api<Shoot> = Api::namespaced(
        env.garden_client().await.unwrap(),
        fixtures::PROJECT_NAMESPACE,
    );
    let name = unique("e2e-bad-");
    let mut shoot = fixtures::shoot(&name, "aws").unwrap();
    shoot["spec"]["provider"]["workers"][0]["name"] = serde_json::json!("a-very-long-pool");
    assert_eq!("a-very-long-pool".len(), 16);
    let shoot: Shoot = serde_json::from_value(shoot).unwrap();
    let err = api
        .create(&PostParams::default(), &shoot)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err}")
    };
    // The error a real Gardener gives (strategy validation, 422 Invalid).
    assert_eq!(status.code, 422, "{status:?}");
    assert_eq!(status.reason, "Invalid");
    assert!(
        status
            .message
            .ends_with("spec.provider.workers[0].name: Too long: may not be more than 15 bytes"),
        "unexpected message: {}",
        status.message
    );
}

#[tokio::test]
async fn deletion_needs_confirmation_and_the_simulator_then_removes_the_shoot() {
    let env = TestEnv::shared().await.unwrap();
    let api: Api<Shoot> = Api::namespaced(
        env.garden_client().await.unwrap(),
        fixtures::PROJECT_NAMESPACE,
    );
    let name = unique("e2e-del-");
    let shoot: Shoot = serde_json::from_value(fixtures::shoot(&name, "gcp").unwrap()).unwrap();
    api.create(&PostParams::default(), &shoot).await.unwrap();
    wait_for_state(&api, &name, "Succeeded").await;

    let err = api
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403 && s.message.contains("confirmation.gardener.cloud/deletion")),
        "{err}"
    );

    let patch = serde_json::json!({"metadata": {"annotations": {"confirmation.gardener.cloud/deletion": "true"}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    let uid = api
        .get(&name)
        .await
        .map(|s| s.metadata.uid.unwrap_or_default())
        .unwrap_or_default();
    tokio::time::timeout(
        Duration::from_secs(30),
        kube::runtime::wait::await_condition(
            api.clone(),
            &name,
            kube::runtime::conditions::is_deleted(&uid),
        ),
    )
    .await
    .expect("Shoot deleted within 30 s")
    .unwrap();
}

#[tokio::test]
async fn a_fault_from_the_configmap_fails_the_create_with_error_codes() {
    let env = TestEnv::shared().await.unwrap();
    let client = env.garden_client().await.unwrap();
    let name = unique("e2e-fail-");
    let cms: Api<ConfigMap> = Api::namespaced(
        client.clone(),
        kim_tests::simulator::FAULT_CONFIGMAP_NAMESPACE,
    );
    let patch = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": kim_tests::simulator::FAULT_CONFIGMAP},
        "data": {name.clone(): "failed:ERR_INFRA_QUOTA_EXCEEDED"}});
    cms.patch(
        kim_tests::simulator::FAULT_CONFIGMAP,
        &PatchParams::apply(&name),
        &Patch::Apply(&patch),
    )
    .await
    .unwrap();

    let api: Api<Shoot> = Api::namespaced(client, fixtures::PROJECT_NAMESPACE);
    let shoot: Shoot = serde_json::from_value(fixtures::shoot(&name, "azure").unwrap()).unwrap();
    api.create(&PostParams::default(), &shoot).await.unwrap();
    let failed = wait_for_state(&api, &name, "Failed").await;
    let errors = failed.status.unwrap().last_errors.unwrap();
    assert_eq!(
        errors[0].codes.as_deref(),
        Some(&["ERR_INFRA_QUOTA_EXCEEDED".to_string()][..])
    );
}

#[tokio::test]
async fn the_fault_proxy_injects_api_faults_and_forwards_everything_else_with_the_callers_identity()
{
    use kim_tests::faultproxy::{ApiFault, FaultProxy, Rule};
    let env = TestEnv::shared().await.unwrap();
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await.unwrap();
    let via = proxy.access_via(env.kcp());
    let client = via.admin_client().await.unwrap();
    let api: Api<Shoot> = Api::namespaced(client, fixtures::PROJECT_NAMESPACE);
    let name = unique("e2e-proxy-");
    let shoot: Shoot = serde_json::from_value(fixtures::shoot(&name, "aws").unwrap()).unwrap();

    proxy.inject(Rule {
        method: Some("POST".into()),
        path_contains: "/shoots".into(),
        fault: ApiFault::NotYetReady,
        times: Some(1),
    });
    proxy.inject(Rule {
        method: Some("GET".into()),
        path_contains: format!("/shoots/{name}"),
        fault: ApiFault::TooManyRequests(1),
        times: Some(1),
    });
    let err = api
        .create(&PostParams::default(), &shoot)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403 && s.message.contains("not yet ready to handle request")),
        "{err}"
    );
    api.create(&PostParams::default(), &shoot).await.unwrap();
    // kube clients retry 429 (and 503/504) by themselves, honouring Retry-After: the GET
    // succeeds after the injected 429.
    assert_eq!(
        api.get(&name).await.unwrap().metadata.name.as_deref(),
        Some(name.as_str())
    );
    assert_eq!(proxy.faults_served(), 2);
    proxy.inject(Rule {
        method: Some("PATCH".into()),
        path_contains: format!("/shoots/{name}"),
        fault: ApiFault::Conflict,
        times: None,
    });
    let patch = serde_json::json!({"metadata": {"labels": {"x": "y"}}});
    let err = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"),
        "{err}"
    );
    proxy.clear();
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();

    // A user without rights gets the real server's 403 through the proxy.
    let pair = env.ca().client_cert("nobody", &["some-group"]).unwrap();
    let nobody = via
        .client("nobody", Credentials::Cert(&pair))
        .await
        .unwrap();
    let err = Api::<Shoot>::namespaced(nobody, fixtures::PROJECT_NAMESPACE)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403 && s.message.contains("\"nobody\"")),
        "{err}"
    );
}

#[tokio::test]
async fn hibernation_is_a_reconcile_that_ends_hibernated() {
    let env = TestEnv::shared().await.unwrap();
    let api: Api<Shoot> = Api::namespaced(
        env.garden_client().await.unwrap(),
        fixtures::PROJECT_NAMESPACE,
    );
    let name = unique("e2e-hib-");
    let shoot: Shoot =
        serde_json::from_value(fixtures::shoot(&name, "openstack").unwrap()).unwrap();
    api.create(&PostParams::default(), &shoot).await.unwrap();
    wait_for_state(&api, &name, "Succeeded").await;

    let patch = serde_json::json!({"spec": {"hibernation": {"enabled": true}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let cond = |s: Option<&Shoot>| {
        s.and_then(|s| s.status.as_ref()).is_some_and(|st| {
            st.hibernated == Some(true)
                && st
                    .last_operation
                    .as_ref()
                    .is_some_and(|op| op.type_ == "Reconcile" && op.state == "Succeeded")
        })
    };
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(api.clone(), &name, cond),
    )
    .await
    .expect("hibernated within 30 s")
    .unwrap();
}

#[tokio::test]
async fn a_shoot_without_a_fitting_seed_stays_pending_with_the_schedulers_message() {
    let env = TestEnv::shared().await.unwrap();
    let api: Api<Shoot> = Api::namespaced(
        env.garden_client().await.unwrap(),
        fixtures::PROJECT_NAMESPACE,
    );
    let name = unique("e2e-noseed-");
    let mut shoot = fixtures::shoot(&name, "alicloud").unwrap();
    shoot["metadata"]["annotations"] =
        serde_json::json!({kim_tests::simulator::FAULT_ANNOTATION: "noseed"});
    let shoot: Shoot = serde_json::from_value(shoot).unwrap();
    api.create(&PostParams::default(), &shoot).await.unwrap();
    let pending = wait_for_state(&api, &name, "Pending").await;
    let op = pending.status.unwrap().last_operation.unwrap();
    assert!(
        op.description
            .starts_with("Failed to schedule Shoot: none out of the ")
            && op
                .description
                .ends_with("seeds has a matching provider for \"alicloud\""),
        "{}",
        op.description
    );
    assert!(pending.spec.seed_name.is_none());
}
