//! Runtimes shaped exactly as KEB writes them (`kim_tests::keb`, every plan and shape) through
//! the real apiserver with the webhook checking them against the test landscape's Gardener
//! CloudProfiles: each is admitted and stored exactly as KEB sent it, each broken variant is
//! refused naming its field, and a CloudProfile change is honoured without a restart.
#![allow(clippy::unwrap_used)]

use kim_tests::keb::{corpus, invalid_variants};
use kim_tests::testenv::TestEnv;
use kim_tests::webhook::{Options, Webhook, admissible, runtime_resource, valid_runtime};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The webhook as deployed: with the Gardener CloudProfiles (the shared environment has
/// Gardener and the test landscape).
fn with_cloud_profiles() -> Options {
    Options {
        cloud_profiles: true,
        ..Options::default()
    }
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

#[tokio::test]
async fn keb_runtimes_are_admitted_as_sent_and_broken_ones_refused_naming_the_field() {
    let env = TestEnv::shared().await.unwrap();
    let wh = Webhook::start(env, with_cloud_profiles()).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.kcp_client().await.unwrap(), &wh.ns, &runtime_resource());
    let mut refused = 0;
    for (i, k) in corpus().into_iter().enumerate() {
        let input = admissible(k.runtime.clone(), &format!("keb-{i}"), &wh.ns);
        let obj: DynamicObject = serde_json::from_value(input.clone()).unwrap();
        let stored = api
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("{} ({}) must be admitted: {e}", k.case, k.plan));
        let stored = serde_json::to_value(&stored).unwrap();
        assert_eq!(
            stored["spec"], input["spec"],
            "{}: stored exactly as KEB sent it (no default added)",
            k.case
        );
        assert_eq!(
            stored["metadata"]["labels"], input["metadata"]["labels"],
            "{}: labels",
            k.case
        );
        for v in invalid_variants(&k) {
            let input = admissible(v.runtime.clone(), &format!("keb-{i}-bad"), &wh.ns);
            let obj: DynamicObject = serde_json::from_value(input).unwrap();
            match api.create(&dry_run(), &obj).await {
                Ok(_) => panic!("{} with a bad {} was admitted", k.case, v.what),
                Err(kube::Error::Api(e)) => {
                    assert!(
                        e.message.contains(v.field),
                        "{} with a bad {}: the refusal must name {}: {}",
                        k.case,
                        v.what,
                        v.field,
                        e.message
                    );
                    refused += 1;
                }
                Err(e) => panic!("{}: {e}", k.case),
            }
        }
    }
    assert!(refused > 200, "{refused}");
    wh.stop(env).await;
}

/// A machine type added to the CloudProfile is admitted once the watch has delivered the
/// change, without a restart of the webhook.
#[tokio::test]
async fn a_machine_type_added_to_the_cloud_profile_is_honoured_without_restart() {
    let env = TestEnv::shared().await.unwrap();
    let wh = Webhook::start(env, with_cloud_profiles()).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.kcp_client().await.unwrap(), &wh.ns, &runtime_resource());
    let new_type = format!("m8i.kim{}", &wh.ns[wh.ns.len() - 5..]);
    let mut rt = valid_runtime("new-machine", &wh.ns);
    rt["spec"]["shoot"]["provider"]["workers"][0]["machine"]["type"] = json!(new_type);
    let obj: DynamicObject = serde_json::from_value(rt).unwrap();
    let err = api.create(&dry_run(), &obj).await.unwrap_err().to_string();
    assert!(
        err.contains("spec.shoot.provider.workers[0].machine.type")
            && err.contains("is not a machine type of CloudProfile aws"),
        "{err}"
    );

    let profiles = Api::<DynamicObject>::all_with(
        env.garden_client().await.unwrap(),
        &kim_tests::fixtures::api_resource("core.gardener.cloud/v1beta1", "CloudProfile").unwrap(),
    );
    let mut aws = profiles.get("aws").await.unwrap();
    let types = aws.data["spec"]["machineTypes"].as_array_mut().unwrap();
    types.push(json!({"name": new_type, "cpu": "2", "gpu": "0", "memory": "8Gi", "usable": true, "architecture": "amd64"}));
    let patch: Value = json!({"spec": {"machineTypes": types.clone()}});
    let changed = std::time::Instant::now();
    profiles
        .patch("aws", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let mut last = String::new();
    for _ in 0..300 {
        match api.create(&dry_run(), &obj).await {
            Ok(_) => {
                println!(
                    "new machine type admitted {:.2} s after the CloudProfile change",
                    changed.elapsed().as_secs_f64()
                );
                wh.stop(env).await;
                return;
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the new machine type was not admitted within 30 s: {last}");
}
