//! OIDC in the runtime cluster (`kim_controller::runtime::oidc`) against the real
//! kube-apiserver of the shoot cluster and the OpenIDConnect CRD's own schema
//! (`tests/fixtures/shoot-crds/openidconnects.yaml`): an entry without `usernameClaim` is
//! accepted (it gets `sub`; upstream's object without it is refused), every object is tried
//! and every failure named (upstream reports only the last one, quirk 7), and stale managed
//! objects are removed. Its own test binary: the other controller tests configure OIDC in
//! their shoot cluster too, and these objects are cluster-scoped.
#![allow(clippy::unwrap_used)]

use kim_controller::runtime::oidc;
use kim_shared::api::Runtime;
use kim_tests::testenv::TestEnv;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

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
    let env = TestEnv::shared().await.unwrap();
    let skr = env.shoot_client().await.unwrap();
    let api = openidconnects(skr.clone());
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
    oidc::apply(&skr, &specs).await.unwrap();
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
    let err = oidc::apply(&skr, &bad).await.unwrap_err();
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
    oidc::apply(&skr, &bad[..1]).await.unwrap();
    assert!(api.get_opt("kyma-oidc-1").await.unwrap().is_none());
    assert!(api.get_opt("kyma-oidc-2").await.unwrap().is_none());
    assert!(api.get_opt("kyma-oidc-0").await.unwrap().is_some());

    // No usable entry: the configured default.
    let none = runtime_with(json!([{"clientID": "x"}]));
    oidc::apply(&skr, &oidc::wanted(&none, default))
        .await
        .unwrap();
    assert_eq!(
        api.get("kyma-oidc-0").await.unwrap().data["spec"]["clientID"],
        "default"
    );
}
