//! Start-up of the whole environment.
#![allow(clippy::unwrap_used)]

use k8s_openapi::api::core::v1::Namespace;
use kim_tests::testenv::TestEnv;
use kube::api::{Api, ListParams};

#[tokio::test]
async fn shared_environment_starts_and_serves_kcp_gardener_and_shoot() {
    let env = TestEnv::shared().await.unwrap();
    for (phase, at) in env.startup_phases() {
        eprintln!("  {at:>10.2?}  {phase}");
    }
    eprintln!(
        "start-up took {:?} ({})",
        env.startup_duration(),
        env.state_dir().display()
    );
    let kcp = env.kcp_client().await.unwrap();
    let nss = Api::<Namespace>::all(kcp)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        nss.items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("garden-kyma"))
    );
    let shoot = env.shoot_client().await.unwrap();
    Api::<Namespace>::all(shoot)
        .list(&ListParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn every_configured_region_has_a_ready_seed_with_the_region_label() {
    use kim_tests::fixtures;
    use kube::api::DynamicObject;
    let env = TestEnv::shared().await.unwrap();
    let ar = fixtures::api_resource("core.gardener.cloud/v1beta1", "Seed").unwrap();
    let seeds = Api::<DynamicObject>::all_with(env.garden_client().await.unwrap(), &ar)
        .list(&ListParams::default().labels("seed.gardener.cloud/region=eu-central-1"))
        .await
        .unwrap();
    let aws = seeds
        .items
        .iter()
        .find(|s| s.data["spec"]["provider"]["type"] == "aws")
        .expect("an aws Seed in eu-central-1");
    let ready = aws.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "GardenletReady" && c["status"] == "True");
    assert!(ready, "{:?}", aws.data["status"]);
    assert_eq!(aws.data["status"]["lastOperation"]["state"], "Succeeded");
    let all = Api::<DynamicObject>::all_with(env.garden_client().await.unwrap(), &ar);
    for p in fixtures::data::providers().unwrap() {
        for (region, _) in &p.regions {
            let name = fixtures::seed_name(&p.provider, region);
            let seed = all
                .get_opt(&name)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("Seed {name} missing"));
            assert_eq!(
                seed.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("seed.gardener.cloud/region"))
                    .map(String::as_str),
                Some(region.as_str()),
                "Seed {name}: region label"
            );
            let ready = seed.data["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "GardenletReady" && c["status"] == "True")
                });
            assert!(ready, "Seed {name} not ready: {:?}", seed.data["status"]);
        }
    }
}
