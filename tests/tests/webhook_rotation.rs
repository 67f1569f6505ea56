//! Certificate rotation under load, through the real apiserver: two webhook replicas share
//! one Secret, lifetimes are seconds, and a client keeps sending Runtime admissions (server-side
//! dry-run creates pass both webhooks). Across several serving-certificate rotations and one CA
//! rotation the client must see zero failures.
#![allow(clippy::unwrap_used)]

mod webhook_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kim_certs::{Reason, RotationPolicy};
use kube::api::{Api, DynamicObject, PostParams};
use webhook_support::{Options, Webhook, env, runtime_resource, valid_runtime};

fn pem_count(bundle: &str) -> usize {
    bundle.matches("-----BEGIN CERTIFICATE-----").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_failed_admissions_across_serving_and_ca_rotations() {
    let env = env().await;
    // CA 40 s (renewed with 16 s left), serving 9 s (renewed with 3 s left), a new CA is
    // trusted for 4 s before it signs (the apiserver picks up a new caBundle within about a
    // second; 4 s leaves room on a loaded CI machine), checks every second.
    let policy = RotationPolicy::from_lifetimes(
        Duration::from_secs(40),
        Duration::from_secs(9),
        Duration::from_secs(4),
        Duration::from_secs(1),
    );
    policy.validate().unwrap();
    let wh = Webhook::start(
        env,
        Options {
            policy,
            replicas: 2,
            ..Options::default()
        },
    )
    .await;
    let initial_bundle = wh.ca_bundle(env).await;
    assert_eq!(pem_count(&initial_bundle), 1, "one CA after bootstrap");

    let api: Api<DynamicObject> =
        Api::namespaced_with(env.kcp_client().await.unwrap(), &wh.ns, &runtime_resource());
    let ok = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let run_for = Duration::from_secs(44);
    let started = Instant::now();
    let mut clients = Vec::new();
    for c in 0..4 {
        let (api, ok, failures) = (api.clone(), ok.clone(), failures.clone());
        let obj: DynamicObject =
            serde_json::from_value(valid_runtime(&format!("load-{c}"), &wh.ns)).unwrap();
        clients.push(tokio::spawn(async move {
            let pp = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            while started.elapsed() < run_for {
                match api.create(&pp, &obj).await {
                    Ok(_) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => failures
                        .lock()
                        .unwrap()
                        .push(format!("{:.1}s: {e}", started.elapsed().as_secs_f64())),
                }
            }
        }));
    }
    // Watch the caBundle while the load runs: it must hold two CAs at some point.
    let mut max_bundle = 1;
    let mut bundles_seen = std::collections::BTreeSet::new();
    while started.elapsed() < run_for {
        let b = wh.ca_bundle(env).await;
        max_bundle = max_bundle.max(pem_count(&b));
        bundles_seen.insert(b);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for c in clients {
        c.await.unwrap();
    }

    let failures = failures.lock().unwrap().clone();
    let ok = ok.load(Ordering::Relaxed);
    let mut serving_issued = 0;
    let mut ca_added = 0;
    for (i, r) in wh.replicas.iter().enumerate() {
        let outcomes = r.outcomes.lock().unwrap().clone();
        let loads = outcomes.iter().filter(|o| o.loaded_new_serving).count();
        serving_issued += outcomes
            .iter()
            .filter(|o| o.issued_serving.is_some_and(|r| r != Reason::Missing))
            .count();
        ca_added += outcomes
            .iter()
            .filter(|o| o.added_ca == Some(Reason::RenewalDue))
            .count();
        assert!(
            loads >= 4,
            "replica {i} loaded only {loads} serving certificates"
        );
        let errors = r.sync_errors.lock().unwrap().clone();
        assert!(
            errors.is_empty(),
            "replica {i} synchronisation errors: {errors:?}"
        );
    }
    println!(
        "rotation under load: {ok} admissions, {} failures, {serving_issued} serving rotations, {ca_added} CA rotation(s), max {max_bundle} CAs in the bundle, {} distinct bundles",
        failures.len(),
        bundles_seen.len()
    );
    assert!(
        failures.is_empty(),
        "admissions failed during rotation: {failures:#?}"
    );
    assert!(ok > 200, "the client kept sending: {ok}");
    assert!(
        serving_issued >= 3,
        "at least three serving rotations: {serving_issued}"
    );
    assert!(ca_added >= 1, "one CA rotation: {ca_added}");
    assert_eq!(
        max_bundle, 2,
        "old and new CA both trusted during the overlap"
    );
    assert!(bundles_seen.len() >= 2, "the bundle changed");
    wh.stop(env).await;
}
