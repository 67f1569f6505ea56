//! The runtime cluster set-up upstream does before OIDC and administrators: the `kyma-system`
//! namespace and the `kyma-provisioning-info` ConfigMap (`kim_controller::runtime::kyma_system`)
//! in the shoot cluster of the environment, with upstream's name, label, data key and YAML
//! keys, the conditions `KymaSystemNSCreated` and `OidcAndConfigMapConfigured` with upstream's
//! reasons and messages; a change of the Runtime's spec rewrites the ConfigMap.
//!
//! Its own environment: every Runtime of an environment gets the same shoot cluster, and the
//! ConfigMap is one object there that the other controller tests write too.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kim_shared::api::{Runtime, RuntimeState};
use kim_shared::names::{condition, reason};
use kim_tests::controller::{create, eventually, sample_runtime, start_controller, wait_state};
use kim_tests::fixtures;
use kim_tests::testenv::{TestEnv, TestEnvOptions};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

fn details(cm: &ConfigMap) -> Value {
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("details"))
        .expect("the ConfigMap has the key `details`");
    serde_yaml_ng::from_str(text).expect("`details` is YAML")
}

fn condition_of(rt: &Runtime, type_: &str) -> (String, String, String) {
    let c = rt
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
        .unwrap_or_else(|| panic!("no condition {type_}: {:?}", rt.status));
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_runtime_cluster_holds_kyma_system_and_a_current_provisioning_info() {
    let env = &TestEnv::start(TestEnvOptions::default())
        .await
        .unwrap_or_else(|e| panic!("the kyma-system test's own environment: {e}"));
    let ns = env.namespace("ctl-kymasys").await.unwrap();
    let ctl = start_controller(env, &ns, &[]).await.unwrap();
    let id = format!("kymasys-{}", &ns[ns.len().saturating_sub(6)..]);
    let mut rt = sample_runtime(&ns, &id).unwrap();
    let labels = rt.metadata.labels.get_or_insert_with(Default::default);
    labels.insert("kyma-project.io/global-account-id".into(), "ga-1".into());
    labels.insert("kyma-project.io/subaccount-id".into(), "sa-1".into());
    labels.insert("kyma-project.io/instance-id".into(), "inst-1".into());
    labels.insert("operator.kyma-project.io/kyma-name".into(), "kyma-1".into());
    create(env, &rt).await.unwrap();
    let ready = wait_state(env, &ns, &id, RuntimeState::Ready, Duration::from_secs(180))
        .await
        .unwrap();
    assert_eq!(
        condition_of(&ready, condition::KYMA_SYSTEM_NS_CREATED),
        (
            "True".to_owned(),
            reason::KYMA_SYSTEM_NS_READY.to_owned(),
            "Creation of kyma-system Namespace".to_owned()
        )
    );
    assert_eq!(
        condition_of(&ready, condition::OIDC_AND_CONFIG_MAP_CONFIGURED),
        (
            "True".to_owned(),
            reason::OIDC_AND_CONFIG_MAPS_CONFIGURED.to_owned(),
            "OIDC and kyma-provisioning-info configuration completed".to_owned()
        )
    );

    let runtime_client = env.shoot_client().await.unwrap();
    Api::<Namespace>::all(runtime_client.clone())
        .get("kyma-system")
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(runtime_client, "kyma-system");
    let cm = cms.get("kyma-provisioning-info").await.unwrap();
    assert_eq!(
        cm.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("reconciler.kyma-project.io/managed-by"))
            .map(String::as_str),
        Some("infrastructure-manager")
    );
    assert_eq!(
        cm.data
            .as_ref()
            .map(|d| d.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["details".to_owned()])
    );
    let d = details(&cm);
    let worker = &rt.spec.shoot.provider.workers[0];
    assert_eq!(
        d["workerPools"]["kyma"],
        json!({"name": worker.name, "machineType": worker.machine.type_,
               "haZones": worker.zones.as_ref().map_or(0, Vec::len) >= 3,
               "autoScalerMin": worker.minimum, "autoScalerMax": worker.maximum}),
        "{d}"
    );
    for (key, want) in [
        ("globalAccountID", "ga-1"),
        ("subaccountID", "sa-1"),
        ("environmentInstanceID", "inst-1"),
        ("instanceID", "inst-1"),
        ("instanceName", "kyma-1"),
        ("runtimeID", id.as_str()),
        ("region", rt.spec.shoot.region.as_str()),
        ("platformRegion", "cf-eu10"),
    ] {
        assert_eq!(d[key], want, "{key} in {d}");
    }
    // The Seed the test Gardener scheduled the Shoot on is the region's own.
    let shoots = fixtures::api_resource("core.gardener.cloud/v1beta1", "Shoot").unwrap();
    let shoot: kube::api::DynamicObject = Api::namespaced_with(
        env.garden_client().await.unwrap(),
        fixtures::PROJECT_NAMESPACE,
        &shoots,
    )
    .get(&rt.spec.shoot.name)
    .await
    .unwrap();
    assert_eq!(
        d["infrastructureConfig"], shoot.data["spec"]["provider"]["infrastructureConfig"],
        "{d}"
    );
    assert_eq!(
        d["lastReconcileTime"], shoot.data["status"]["lastOperation"]["lastUpdateTime"],
        "{d}"
    );
    assert_eq!(d["seedRegion"], rt.spec.shoot.region.as_str(), "{d}");
    assert_eq!(d["networkDetails"]["dualStackIPEnabled"], false, "{d}");
    assert_eq!(
        d["networkDetails"]["kubeAPIServer"]["acl"],
        serde_json::to_value(
            rt.spec
                .shoot
                .kubernetes
                .as_ref()
                .and_then(|k| k.kube_api_server.as_ref())
                .and_then(|a| a.acl.as_ref())
                .and_then(|a| a.allowed_cidrs.clone())
        )
        .unwrap(),
        "{d}"
    );

    // A change of the Runtime: the ConfigMap follows.
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await.unwrap(), &ns);
    let new_max = worker.maximum + 1;
    runtimes
        .patch(
            &id,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{"op": "replace",
                    "path": "/spec/shoot/provider/workers/0/maximum", "value": new_max}]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    eventually(
        "the ConfigMap carries the new maximum",
        Duration::from_secs(180),
        || {
            let cms = cms.clone();
            async move {
                let cm = cms.get("kyma-provisioning-info").await?;
                Ok(details(&cm)["workerPools"]["kyma"]["autoScalerMax"] == new_max)
            }
        },
    )
    .await
    .unwrap();
    wait_state(env, &ns, &id, RuntimeState::Ready, Duration::from_secs(180))
        .await
        .unwrap();
    ctl.stop().await;
}
