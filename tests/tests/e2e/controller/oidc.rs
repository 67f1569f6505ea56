//! OIDC in the runtime cluster (`kim_controller::runtime::oidc`) against the real
//! kube-apiserver of the shoot cluster and the OpenIDConnect CRD's own schema
//! (`tests/fixtures/shoot-crds/openidconnects.yaml`): an entry without `usernameClaim` is
//! accepted (it gets `sub`; upstream's object without it is refused), every object is tried
//! and every failure named (upstream reports only the last one), and stale managed
//! objects are removed. Through the controller: a refused OpenIDConnect leaves the Runtime
//! `Pending` with `OidcAndConfigMapConfigured=False/OidcConfigurationErr` naming the object and the
//! apiserver's reason (stored before the retry; upstream loses it), and it becomes `Ready` once
//! the cause is gone. The same for an administrator's binding the cluster refuses
//! (`Configured=False/ConfigurationError`).
//!
//! Its own environment, its tests one at a time: every Runtime of an environment gets the same
//! shoot cluster, the objects `kyma-oidc-<i>` are cluster-scoped, and the other controller
//! tests configure OIDC too.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use kim_controller::runtime::oidc;
use kim_shared::api::{Runtime, RuntimeState};
use kim_shared::names::{condition, reason};
use kim_tests::controller::{create, eventually, sample_runtime, start_controller, wait_state};
use kim_tests::refusal::Refusal;
use kim_tests::testenv::{TestEnv, TestEnvOptions};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

/// The environment of these tests alone (see the module docs), started once.
async fn env() -> &'static TestEnv {
    static ENV: tokio::sync::OnceCell<Result<&'static TestEnv, String>> =
        tokio::sync::OnceCell::const_new();
    ENV.get_or_init(|| TestEnv::start_for_process("kim-testenv-oidc", TestEnvOptions::default()))
        .await
        .clone()
        .unwrap_or_else(|e| panic!("the OIDC tests' own environment: {e}"))
}

/// One test at a time (see the module docs).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn openidconnects(client: kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("authentication.gardener.cloud", "v1alpha1", "OpenIDConnect"),
            "openidconnects",
        ),
    )
}

/// A Runtime whose `additionalOidcConfig` holds `entries`.
fn runtime_with(entries: Value) -> Runtime {
    serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "Runtime",
        "metadata": {"name": "oidc", "namespace": "kcp-system"},
        "spec": {
            "shoot": {
                "name": "oidc", "purpose": "development", "region": "eu-central-1",
                "platformRegion": "cf-eu10", "secretBindingName": "s",
                "kubernetes": {"kubeAPIServer": {"additionalOidcConfig": entries}},
                "provider": {"type": "aws", "workers": []},
                "networking": {"nodes": "10.250.0.0/16", "pods": "100.64.0.0/12",
                               "services": "100.104.0.0/13"}
            },
            "security": {"administrators": ["admin@example.com"],
                         "networking": {"filter": {"egress": {"enabled": false}}}}
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn every_openidconnect_is_tried_and_every_failure_named() {
    let _serial = SERIAL.lock().await;
    let env = env().await;
    let runtime_client = env.shoot_client().await.unwrap();
    let api = openidconnects(runtime_client.clone());
    let default = json!({"clientID": "default", "issuerURL": "https://default.example.com",
                         "usernameClaim": "sub"});

    // Two entries, the first without usernameClaim (KEB's Runtimes name it; a Runtime need
    // not): both objects are created, the first with `sub`.
    let rt = runtime_with(json!([
        {"clientID": "a", "issuerURL": "https://a.example.com", "signingAlgs": ["RS256"]},
        {"clientID": "b", "issuerURL": "https://b.example.com", "usernameClaim": "email",
         "usernamePrefix": "-"}
    ]));
    let specs = oidc::wanted(&rt, default.clone());
    oidc::apply(&runtime_client, &specs).await.unwrap();
    let first = api.get("kyma-oidc-0").await.unwrap();
    assert_eq!(
        first.data["spec"]["usernameClaim"], "sub",
        "{:?}",
        first.data
    );
    assert_eq!(first.data["spec"]["clientID"], "a");
    let second = api.get("kyma-oidc-1").await.unwrap();
    assert_eq!(second.data["spec"]["usernameClaim"], "email");

    // Three objects, the last two refused by the CRD's schema (an http issuer; no client
    // ID): the first is still applied, and the error names both failures.
    let bad = vec![
        json!({"clientID": "a2", "issuerURL": "https://a.example.com", "usernameClaim": "sub"}),
        json!({"clientID": "b", "issuerURL": "http://b.example.com", "usernameClaim": "sub"}),
        json!({"issuerURL": "https://c.example.com", "usernameClaim": "sub"}),
    ];
    let err = oidc::apply(&runtime_client, &bad).await.unwrap_err();
    assert!(
        err.contains("OpenIDConnect kyma-oidc-1:") && err.contains("OpenIDConnect kyma-oidc-2:"),
        "{err}"
    );
    assert!(!err.contains("kyma-oidc-0"), "{err}");
    // The apiserver's message and code, not the client's debug dump.
    assert!(
        err.contains("spec.issuerURL") && err.contains("(422)") && !err.contains("Status {"),
        "{err}"
    );
    assert_eq!(
        api.get("kyma-oidc-0").await.unwrap().data["spec"]["clientID"],
        "a2"
    );
    // The refused update left the stored object as it was.
    assert_eq!(
        api.get("kyma-oidc-1").await.unwrap().data["spec"]["issuerURL"],
        "https://b.example.com"
    );

    // Down to one entry: the managed objects no longer wanted are removed.
    oidc::apply(&runtime_client, &bad[..1]).await.unwrap();
    assert!(api.get_opt("kyma-oidc-1").await.unwrap().is_none());
    assert!(api.get_opt("kyma-oidc-2").await.unwrap().is_none());
    assert!(api.get_opt("kyma-oidc-0").await.unwrap().is_some());

    // An entry without an issuer: the configured default.
    let none = runtime_with(json!([{"clientID": "x"}]));
    oidc::apply(&runtime_client, &oidc::wanted(&none, default.clone()))
        .await
        .unwrap();
    assert_eq!(
        api.get("kyma-oidc-0").await.unwrap().data["spec"]["clientID"],
        "default"
    );

    // An empty list (KEB's `oidc: {list: []}`): no provider, every managed object goes.
    let off = runtime_with(json!([]));
    oidc::apply(&runtime_client, &oidc::wanted(&off, default))
        .await
        .unwrap();
    let selector = "operator.kyma-project.io/managed-by=infrastructure-manager";
    let left = api
        .list(&kube::api::ListParams::default().labels(selector))
        .await
        .unwrap();
    assert!(
        left.items.is_empty(),
        "managed OpenIDConnects left: {:?}",
        left.items
            .iter()
            .map(|o| &o.metadata.name)
            .collect::<Vec<_>>()
    );
}

/// An OpenIDConnect upstream KIM created (a plain create by its `manager`) with required
/// claims and a groups claim: once the Runtime drops them (KEB's `requiredClaims: ["-"]`), the
/// apply takes the spec over and they are gone; the create's entry keeps no spec field.
#[tokio::test]
async fn fields_an_upstream_openidconnect_had_go_when_the_runtime_drops_them() {
    let _serial = SERIAL.lock().await;
    let env = env().await;
    let runtime_client = env.shoot_client().await.unwrap();
    let api = openidconnects(runtime_client.clone());
    let _ = api
        .delete("kyma-oidc-0", &Default::default())
        .await
        .map(|_| ());
    eventually("no kyma-oidc-0", Duration::from_secs(30), || async {
        Ok(api.get_opt("kyma-oidc-0").await?.is_none())
    })
    .await
    .unwrap();
    let upstream: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "authentication.gardener.cloud/v1alpha1",
        "kind": "OpenIDConnect",
        "metadata": {"name": "kyma-oidc-0",
                     "labels": {"operator.kyma-project.io/managed-by": "infrastructure-manager"}},
        "spec": {"clientID": "a", "issuerURL": "https://a.example.com", "usernameClaim": "sub",
                 "groupsClaim": "groups", "requiredClaims": {"aud": "kyma"}}
    }))
    .unwrap();
    let pp = kube::api::PostParams {
        field_manager: Some("manager".into()),
        ..Default::default()
    };
    api.create(&pp, &upstream).await.unwrap();

    let rt = runtime_with(json!([
        {"clientID": "a", "issuerURL": "https://a.example.com", "usernameClaim": "sub"}
    ]));
    let default = json!({"clientID": "default", "issuerURL": "https://default.example.com"});
    oidc::apply(&runtime_client, &oidc::wanted(&rt, default))
        .await
        .unwrap();
    let stored = api.get("kyma-oidc-0").await.unwrap();
    let spec = &stored.data["spec"];
    assert_eq!(spec["clientID"], "a", "{spec}");
    assert!(
        spec.get("requiredClaims").is_none() && spec.get("groupsClaim").is_none(),
        "fields the Runtime dropped stayed: {spec}"
    );
    let spec_owners: Vec<_> = stored
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| {
            e.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.get("f:spec").is_some())
        })
        .map(|e| e.manager.clone())
        .collect();
    assert_eq!(spec_owners, [Some("kim".to_owned())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_openidconnect_is_a_stored_condition_and_the_runtime_recovers() {
    let _serial = SERIAL.lock().await;
    let env = env().await;
    let runtime_client = env.shoot_client().await.unwrap();
    // A policy in the runtime's cluster that refuses one client ID, as a real cluster's
    // admission could refuse an OpenIDConnect; its message names the refused object's UID, new
    // at each attempt (as a request ID would be).
    let refusal = Refusal::create_with_message_expression(
        &runtime_client,
        "refuse-blocked-client",
        json!({"apiGroups": ["authentication.gardener.cloud"], "apiVersions": ["*"],
               "operations": ["CREATE", "UPDATE"], "resources": ["openidconnects"]}),
        "object.spec.clientID != 'blocked-client'",
        "'the client blocked-client is not allowed here, object ' + string(object.metadata.uid)",
    )
    .await
    .unwrap();
    // The policy takes effect once the apiserver has compiled it.
    let blocked = vec![json!({"clientID": "blocked-client",
                              "issuerURL": "https://blocked.example.com", "usernameClaim": "sub"})];
    eventually("the policy refuses", Duration::from_secs(30), || {
        let (runtime_client, blocked) = (runtime_client.clone(), blocked.clone());
        async move { Ok(oidc::apply(&runtime_client, &blocked).await.is_err()) }
    })
    .await
    .unwrap();
    // A probe the policy did not refuse yet created the object: the controller's attempts are
    // to create it, each with a new UID.
    let _ = openidconnects(runtime_client.clone())
        .delete("kyma-oidc-0", &Default::default())
        .await;

    let ns = env.namespace("ctl-oidc").await.unwrap();
    let ctl = start_controller(env, &ns, &[]).await.unwrap();
    let id = format!("oidc-{}", &ns[ns.len().saturating_sub(6)..]);
    let mut rt = sample_runtime(&ns, &id).unwrap();
    let entry = rt
        .spec
        .shoot
        .kubernetes
        .as_mut()
        .and_then(|k| k.kube_api_server.as_mut())
        .and_then(|a| a.additional_oidc_config.as_mut())
        .and_then(|c| c.first_mut())
        .expect("the upstream sample has an additionalOidcConfig entry");
    entry.oidc.client_id = Some("blocked-client".into());
    create(env, &rt).await.unwrap();

    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await.unwrap(), &ns);
    let oidc_condition = |rt: &Runtime| {
        rt.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == condition::OIDC_AND_CONFIG_MAP_CONFIGURED)
            })
            .cloned()
    };
    eventually(
        "OidcAndConfigMapConfigured=False stored",
        Duration::from_secs(120),
        || {
            let (runtimes, id) = (runtimes.clone(), id.clone());
            async move {
                let rt = runtimes.get(&id).await?;
                Ok(oidc_condition(&rt).is_some_and(|c| c.status == "False"))
            }
        },
    )
    .await
    .unwrap();
    // It stays so while the policy refuses (each retry fails the same way).
    let rt = runtimes.get(&id).await.unwrap();
    let c = oidc_condition(&rt).unwrap();
    assert_eq!(c.reason, reason::OIDC_CONFIGURATION_ERR, "{c:?}");
    assert!(
        c.message.contains("OpenIDConnect kyma-oidc-0")
            && c.message
                .contains("the client blocked-client is not allowed here"),
        "{c:?}"
    );
    assert_eq!(
        rt.status.as_ref().map(|s| s.state),
        Some(RuntimeState::Pending)
    );
    // Each attempt writes another message; the write's own watch event must not start the
    // next attempt. The backoff (5 s doubling, each delay half to all of it) allows at most 4
    // attempts in 12 s; a loop on the status writes makes one per round trip.
    let mut seen = std::collections::BTreeSet::new();
    let until = std::time::Instant::now() + Duration::from_secs(12);
    while std::time::Instant::now() < until {
        if let Some(c) = oidc_condition(&runtimes.get(&id).await.unwrap()) {
            seen.insert(c.message);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen.len() <= 5, "{} attempts in 12 s: {seen:?}", seen.len());

    // The cause goes: the next retry configures OIDC and the Runtime becomes Ready.
    refusal.delete().await.unwrap();
    let ready = wait_state(env, &ns, &id, RuntimeState::Ready, Duration::from_secs(180))
        .await
        .unwrap();
    let c = oidc_condition(&ready).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", reason::OIDC_AND_CONFIG_MAPS_CONFIGURED)
    );
    assert_eq!(
        openidconnects(runtime_client)
            .get("kyma-oidc-0")
            .await
            .unwrap()
            .data["spec"]["clientID"],
        "blocked-client"
    );
    ctl.stop().await;
}

/// An administrator's binding that the runtime's cluster refuses: `Configured=False` with
/// `ConfigurationError` and the apiserver's reason, the Runtime `Pending`, `Ready` once the
/// cause is gone (no test saw this step fail before).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_administrator_binding_is_a_stored_condition_and_the_runtime_recovers() {
    let _serial = SERIAL.lock().await;
    let env = env().await;
    let runtime_client = env.shoot_client().await.unwrap();
    let ns = env.namespace("ctl-admins").await.unwrap();
    let id = format!("adm-{}", &ns[ns.len().saturating_sub(6)..]);
    let admin = format!("{id}-blocked@example.com");
    let refusal = Refusal::create(
        &runtime_client,
        "refuse-blocked-admin",
        json!({"apiGroups": ["rbac.authorization.k8s.io"], "apiVersions": ["*"],
               "operations": ["CREATE", "UPDATE"], "resources": ["clusterrolebindings"]}),
        "!has(object.subjects) || !object.subjects.exists(s, s.name.endsWith('-blocked@example.com'))",
        "this administrator is not allowed here",
    )
    .await
    .unwrap();
    // The policy takes effect once the apiserver has compiled it: probe with a binding of
    // another refused name (removed again if it got through).
    let probes: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> =
        Api::all(runtime_client.clone());
    let mut probe =
        kim_controller::runtime::admins::binding_for(&format!("{id}-probe-blocked@example.com"));
    let probe_name = format!("{id}-probe");
    probe.metadata.name = Some(probe_name.clone());
    probe.metadata.generate_name = None;
    eventually("the policy refuses", Duration::from_secs(30), || {
        let (probes, probe, probe_name) = (probes.clone(), probe.clone(), probe_name.clone());
        async move {
            match probes.create(&Default::default(), &probe).await {
                Ok(_) => {
                    probes.delete(&probe_name, &Default::default()).await?;
                    Ok(false)
                }
                Err(_) => Ok(true),
            }
        }
    })
    .await
    .unwrap();

    let ctl = start_controller(env, &ns, &[]).await.unwrap();
    let mut rt = sample_runtime(&ns, &id).unwrap();
    rt.spec.security.administrators = vec![admin.clone()];
    create(env, &rt).await.unwrap();
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await.unwrap(), &ns);
    eventually("Configured=False stored", Duration::from_secs(120), || {
        let (runtimes, id) = (runtimes.clone(), id.clone());
        async move {
            let rt = runtimes.get(&id).await?;
            Ok(rt
                .condition(condition::CONFIGURED)
                .is_some_and(|c| c.status == "False"))
        }
    })
    .await
    .unwrap();
    let rt = runtimes.get(&id).await.unwrap();
    let c = rt.condition(condition::CONFIGURED).unwrap();
    assert_eq!(c.reason, reason::CONFIGURATION_ERROR, "{c:?}");
    assert!(
        c.message
            .starts_with("failed to update kubeconfig admin access: ")
            && c.message.contains("this administrator is not allowed here"),
        "{c:?}"
    );
    assert_eq!(
        rt.status.as_ref().map(|s| s.state),
        Some(RuntimeState::Pending)
    );

    refusal.delete().await.unwrap();
    wait_state(env, &ns, &id, RuntimeState::Ready, Duration::from_secs(400))
        .await
        .unwrap();
    ctl.stop().await;
}
