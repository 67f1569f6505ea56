//! Runtimes shaped exactly as KEB writes them (`kim_tests::keb`, every plan and shape) through
//! the real apiserver with the webhook checking them against the test landscape's Gardener
//! CloudProfiles: each is admitted and stored exactly as KEB sent it, each broken variant is
//! refused naming its field, KEB's updates are admitted one after the other as sent, and a
//! CloudProfile change is honoured without a restart.
#![allow(clippy::unwrap_used)]

use kim_tests::keb::{corpus, invalid_variants, updates};
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

/// Creates `obj`, again after an answer that is no verdict (429, or 5xx: the apiserver did not
/// reach the webhook in time, and stored nothing), up to three tries: the test is about the
/// webhook's verdicts, and a loaded machine delays the calls.
async fn create(
    api: &Api<DynamicObject>,
    pp: &PostParams,
    obj: &DynamicObject,
) -> kube::Result<DynamicObject> {
    let mut tries = 1;
    loop {
        match api.create(pp, obj).await {
            Err(kube::Error::Api(e)) if tries < 3 && (e.code == 429 || e.code >= 500) => {
                println!("no verdict ({} {}), trying again", e.code, e.message);
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            answer => return answer,
        }
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
        let stored = create(&api, &PostParams::default(), &obj)
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
            match create(&api, &dry_run(), &obj).await {
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

/// KEB's updates of a stored Runtime, one after the other as full Updates of what is stored:
/// each is admitted and stored exactly as KEB sent it (nothing defaulted in between, so no
/// field flaps between KEB's writes).
#[tokio::test]
async fn keb_updates_are_admitted_one_after_the_other_as_sent() {
    let env = TestEnv::shared().await.unwrap();
    let wh = Webhook::start(env, with_cloud_profiles()).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.kcp_client().await.unwrap(), &wh.ns, &runtime_resource());
    let base = corpus()
        .into_iter()
        .find(|k| k.case == "aws-default")
        .expect("the aws-default shape");
    let obj: DynamicObject =
        serde_json::from_value(admissible(base.runtime, "keb-updated", &wh.ns)).unwrap();
    create(&api, &PostParams::default(), &obj).await.unwrap();
    for u in updates() {
        let mut sent = serde_json::to_value(api.get("keb-updated").await.unwrap()).unwrap();
        (u.edit)(&mut sent);
        let obj: DynamicObject = serde_json::from_value(sent.clone()).unwrap();
        let stored = api
            .replace("keb-updated", &PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("KEB's update \"{}\" must be admitted: {e}", u.what));
        let stored = serde_json::to_value(&stored).unwrap();
        assert_eq!(stored["spec"], sent["spec"], "{}: stored as sent", u.what);
        assert_eq!(
            stored["metadata"]["labels"], sent["metadata"]["labels"],
            "{}: labels",
            u.what
        );
    }
    wh.stop(env).await;
}

/// The refusal of a machine type the aws CloudProfile does not list.
const NOT_OFFERED: &str = "is not a machine type of CloudProfile aws";

/// Polls a dry-run create of `obj` every 100 ms until it is admitted (`admitted`) or refused
/// for a machine type the profile does not offer (`!admitted`); returns the seconds it took,
/// or the last answer after 30 s.
async fn until(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    admitted: bool,
) -> Result<f64, String> {
    let since = std::time::Instant::now();
    let mut last = String::new();
    for _ in 0..300 {
        match api.create(&dry_run(), obj).await.map_err(|e| e.to_string()) {
            Ok(_) if admitted => return Ok(since.elapsed().as_secs_f64()),
            Err(e) if !admitted && e.contains(NOT_OFFERED) => {
                return Ok(since.elapsed().as_secs_f64());
            }
            Ok(_) => "admitted".clone_into(&mut last),
            Err(e) => last = e,
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(last)
}

/// A machine type added to the CloudProfile is admitted once the watch has delivered the
/// change, without a restart of the webhook; once removed again, it is refused again.
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
        err.contains("spec.shoot.provider.workers[0].machine.type") && err.contains(NOT_OFFERED),
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
    profiles
        .patch("aws", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let added = until(&api, &obj, true)
        .await
        .unwrap_or_else(|last| panic!("the new machine type was not admitted within 30 s: {last}"));
    println!("new machine type admitted {added:.2} s after the CloudProfile change");

    // Take it out again (the shared landscape stays as it was): refused again, also without
    // a restart.
    let mut aws = profiles.get("aws").await.unwrap();
    let types = aws.data["spec"]["machineTypes"].as_array_mut().unwrap();
    types.retain(|t| t["name"] != json!(new_type));
    let patch: Value = json!({"spec": {"machineTypes": types.clone()}});
    profiles
        .patch("aws", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let removed = until(&api, &obj, false).await.unwrap_or_else(|last| {
        panic!("the removed machine type was still admitted after 30 s: {last}")
    });
    println!("removed machine type refused {removed:.2} s after the CloudProfile change");
    wh.stop(env).await;
}
