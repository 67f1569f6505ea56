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
//!
//! And a replica that Gardener does not give the CloudProfiles stays out of the endpoints
//! (not Ready) until it does.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

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

/// A replica started while Gardener refuses the CloudProfile list is not Ready, and its
/// `/readyz` says why, so no endpoint sends it a review it could only refuse ("not cached
/// yet"); it turns Ready once Gardener answers, without a restart. A watch that breaks later
/// and is refused for a while counts as confirmed again (age 0) once its restart has stayed up
/// for a minute, though no CloudProfile changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_not_ready_until_gardener_answers_the_cloudprofile_list() {
    use kim_tests::faultproxy::{ApiFault, FaultProxy, Rule};
    use kim_tests::testenv::process::{ManagedProcess, free_port};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let env = TestEnv::shared().await.unwrap();
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await.unwrap();
    proxy.inject(Rule {
        method: Some("GET".into()),
        path_contains: "/cloudprofiles".into(),
        fault: ApiFault::ServerError(503),
        times: None,
    });
    let dir = tempfile::tempdir().unwrap();
    let mut garden = proxy.access_via(env.kcp());
    garden.name = "garden".into();
    garden.namespace = Some(kim_tests::fixtures::PROJECT_NAMESPACE.to_owned());
    let garden_file = dir.path().join("garden.kubeconfig");
    kim_tests::testenv::access::write_private(&garden_file, &garden.admin_kubeconfig()).unwrap();
    let cert = env
        .ca()
        .serving_cert("kim-webhook", &["localhost"])
        .unwrap();
    let (cert_file, key_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    kim_tests::testenv::access::write_private(&cert_file, &cert.cert_pem).unwrap();
    kim_tests::testenv::access::write_private(&key_file, &cert.key_pem).unwrap();
    let (port, admin) = (free_port().unwrap(), free_port().unwrap());
    let config = kim_tests::testenv::repo_root().join("deploy/config/converter_config.json");
    let args = vec![
        "serve".to_owned(),
        format!("--converter-config-filepath={}", config.display()),
        format!("--gardener-kubeconfig-path={}", garden_file.display()),
        format!("--listen-addr=127.0.0.1:{port}"),
        format!("--admin-addr=127.0.0.1:{admin}"),
        format!("--tls-cert-file={}", cert_file.display()),
        format!("--tls-key-file={}", key_file.display()),
        "--log-format=text".to_owned(),
    ];
    let log = dir.path().join("kim-webhook.log");
    let mut process = ManagedProcess::spawn(
        "kim-webhook",
        &webhook_bin(),
        &args,
        &[("RUST_LOG", "info")],
        &log,
    )
    .unwrap();
    let get = |path: &'static str| async move {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", admin)).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        std::io::Result::Ok(out)
    };
    let probe = || get("/readyz");
    let age = || async {
        let metrics = get("/metrics").await.ok()?;
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("kim_webhook_cloud_profiles_age_seconds "))
            .and_then(|v| v.trim().parse::<i64>().ok())
    };

    // Refused lists: the probe answers, and says not ready, naming the cache.
    let mut refused_probes = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(6) {
        process.check_running().unwrap();
        if let Ok(answer) = probe().await {
            assert!(
                answer.starts_with("HTTP/1.1 503"),
                "ready while the CloudProfiles are refused: {answer}"
            );
            assert!(
                answer.contains("the Gardener CloudProfiles are not cached yet"),
                "{answer}"
            );
            refused_probes += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(refused_probes > 5, "the admin server hardly answered");
    assert!(
        proxy.served_count("GET", "/cloudprofiles", &ApiFault::ServerError(503)) > 0,
        "the webhook never asked for the CloudProfiles"
    );

    // Gardener answers: Ready without a restart.
    proxy.clear();
    let healed = Instant::now();
    loop {
        process.check_running().unwrap();
        if probe()
            .await
            .is_ok_and(|answer| answer.starts_with("HTTP/1.1 200"))
        {
            break;
        }
        assert!(
            healed.elapsed() < Duration::from_secs(60),
            "not ready 60 s after Gardener answered (log {})",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(age().await, Some(0), "confirmed right after the list");

    // Other tests of the shared environment write CloudProfiles (convert_gardener adds to
    // one, others create and delete their own): a watch of them from now on, straight to the
    // KCP, tells whether an event could have confirmed the profiles. It starts before the
    // pause: an event the webhook's watch had not delivered yet when it broke comes to its
    // restarted watch, so it must be counted here too.
    let profile_events = {
        use futures::StreamExt;
        let api: kube::Api<kim_shared::gardener::cloud_profile::CloudProfile> =
            kube::Api::all(env.garden_client().await.unwrap());
        let from = api
            .list_metadata(&Default::default())
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap_or_default();
        let mut events = api
            .watch(&kube::api::WatchParams::default(), &from)
            .await
            .unwrap()
            .boxed();
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = seen.clone();
        let task = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                match event {
                    Ok(kube::api::WatchEvent::Bookmark(_)) => {}
                    // An error ends the watch: count it as a possible event, not as none.
                    _ => {
                        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
            // A watch the server ended may have missed one.
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        (seen, task)
    };
    // The watch breaks and its restart is refused twice: once Gardener answers again the
    // profiles count as confirmed, though no CloudProfile changes (so no event follows).
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.inject(Rule {
        method: Some("GET".into()),
        path_contains: "/cloudprofiles".into(),
        fault: ApiFault::ServerError(500),
        times: Some(2),
    });
    proxy.cut_connections();
    let broken = Instant::now();
    let broken_at = std::time::SystemTime::now();
    while proxy.served_count("GET", "/cloudprofiles", &ApiFault::ServerError(500)) < 2 {
        assert!(
            broken.elapsed() < Duration::from_secs(60),
            "the watch was not restarted (log {})",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The age counts whole seconds from the first refusal, and both refusals may come within
    // a second (kube's first backoff is under one): a read at once could show 0 while stale.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut ages = Vec::new();
    loop {
        process.check_running().unwrap();
        let now = age().await;
        ages.push(now);
        if now == Some(0) {
            break;
        }
        // Confirmed once the restarted watch has stayed up for a minute.
        assert!(
            broken.elapsed() < Duration::from_secs(150),
            "still stale 150 s after the watch broke, Gardener answering: {ages:?} (log {})",
            log.display()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The shared environment is not quiet: a restarted watch whose resourceVersion Gardener no
    // longer serves (its watch cache moved on under other tests' load) lists again, and another
    // test may change a CloudProfile. A fresh list and an event each confirm at once, whenever
    // they come.
    let relisted = proxy.forwarded().iter().any(|f| {
        f.path.ends_with("/cloudprofiles")
            && f.method == "GET"
            && !f.is_watch()
            && f.at >= broken_at
    });
    // The event that confirmed the webhook's cache may reach this watch a moment later.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let profile_changed = profile_events.0.load(std::sync::atomic::Ordering::Relaxed) > 0;
    profile_events.1.abort();
    if relisted || profile_changed {
        println!(
            "confirmed at once by a fresh list ({relisted}) or a CloudProfile event ({profile_changed}): {ages:?}"
        );
        process.stop();
        return;
    }
    assert!(
        ages.iter().any(|a| a.is_some_and(|a| a > 0)),
        "never stale after the watch broke: {ages:?}"
    );
    // Not before the restarted watch's answer has stood for a minute (a lower bound: a loaded
    // machine only makes it later).
    assert!(
        broken.elapsed() >= Duration::from_secs(60),
        "confirmed {:?} after the watch broke, with no fresh list and no CloudProfile event: {ages:?}",
        broken.elapsed()
    );
    process.stop();
}
