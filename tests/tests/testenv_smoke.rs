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
