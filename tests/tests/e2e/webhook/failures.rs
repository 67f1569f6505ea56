//! A webhook replica killed (SIGKILL: the OOM killer, a crashed node) under admission load
//! through the real kube-apiserver, two replicas behind the webhooks' Service: the wiring and
//! the test's part as kubelet and endpoint controller are `webhook::shutdown`'s (whose test
//! stops a replica with SIGTERM, which fails no admission at all).
//!
//! A kill cannot be drained: the reviews in flight on the killed replica's connection, and the
//! connections the apiserver opens to its endpoint until the readiness probe removes it, fail
//! with "failed calling webhook" (the apiserver does not retry a webhook call). What a client
//! that retries such a failure once, after the endpoint is gone (three probe periods), must
//! see: not one lost admission, every
//! first failure a failed call to a webhook, and the killed replica's endpoint removed within a
//! few probe periods.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use kim_tests::testenv::{TestEnv, TestEnvOptions};

use super::shutdown::{Stop, host_address, scenario, webhook_bin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_under_load_loses_no_admission_beyond_one_retry() {
    let started = Instant::now();
    let ip = host_address();
    let bin = webhook_bin();
    let env = TestEnv::start(TestEnvOptions {
        aggregator_routing: true,
        ..TestEnvOptions::kcp_only()
    })
    .await
    .unwrap();
    let report = scenario(&env, &bin, ip, "5s", Stop::Kill, true).await;
    println!("SIGKILL under load: {}", report.summary());
    for r in &report.retried {
        println!(
            "  retried: {}",
            r.split(": InternalError").next().unwrap_or(r)
        );
    }
    assert!(
        report.failures.is_empty(),
        "admissions lost although the client retried once: {:#?}",
        report.failures
    );
    assert!(
        report
            .retried
            .iter()
            .all(|f| f.contains("failed calling webhook")),
        "a first failure that is not a call to the killed replica: {:#?}",
        report.retried
    );
    // The kill hit a replica the apiserver was sending reviews to (else nothing was at risk).
    assert!(
        report.connections.0 > 0,
        "the apiserver never reached the killed replica: {}",
        report.summary()
    );
    assert!(
        report.other_served_after_exit > 0,
        "the other replica answered after the kill: {}",
        report.summary()
    );
    println!("test took {:?}", started.elapsed());
}
