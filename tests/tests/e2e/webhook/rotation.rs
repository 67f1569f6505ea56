//! Certificate rotation under load, through the real apiserver: two webhook replicas share
//! one Secret, lifetimes are seconds, and a client keeps sending Runtime admissions (server-side
//! dry-run creates pass both webhooks). Across several serving-certificate rotations and one CA
//! rotation the client must see zero failures. With the caBundle injection blocked, the old
//! certificate keeps being served; with the caBundle reverted between checks, the new CA does
//! not count as propagated.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kim_certs::{Reason, RotationPolicy};
use kim_tests::testenv::Credentials;
use kim_tests::webhook::{Options, Webhook, env, names, runtime_resource, valid_runtime};
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, PostParams};

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
                // Steady load, not a saturated apiserver: tests beside this one start theirs.
                tokio::time::sleep(Duration::from_millis(10)).await;
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

fn rule(group: &str, resource: &str, verbs: &[&str], names: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![resource.into()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        resource_names: (!names.is_empty()).then(|| names.iter().map(|n| n.to_string()).collect()),
        ..Default::default()
    }
}

/// How many CAs the certificate Secret holds.
async fn secret_cas(secrets: &Api<Secret>, name: &str) -> usize {
    let s = secrets.get(name).await.unwrap();
    let data = s.data.unwrap_or_default();
    pem_count(&String::from_utf8_lossy(
        &data.get("ca.crt").map(|b| b.0.clone()).unwrap_or_default(),
    ))
}

/// A new TLS connection to the replica at `url` trusting only the CAs of `bundle_pem`, as a
/// new apiserver connection does (open connections keep the certificate they started with, so
/// admissions alone may not notice a certificate the apiserver would refuse).
async fn fresh_handshake(url: &str, bundle_pem: &str) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject as _;
    let addr = url
        .trim_start_matches("https://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(bundle_pem.as_bytes()) {
        roots
            .add(c.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .map(|_| ())
        .map_err(|e| format!("handshake trusting the live caBundle: {e}"))
}

/// Whether `user` may `verb` the ValidatingWebhookConfiguration `name`.
async fn may(admin: &kube::Client, user: &str, verb: &str, name: &str) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            resource_attributes: Some(ResourceAttributes {
                group: Some("admissionregistration.k8s.io".into()),
                resource: Some("validatingwebhookconfigurations".into()),
                verb: Some(verb.into()),
                name: Some(name.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// The webhook loses the permission to patch its configurations before the CA rotation: the
/// new CA enters the Secret but never the caBundle. The serving certificate must stay with the
/// old CA until the old CA expires: admissions through the apiserver keep passing and every new
/// connection trusting the live caBundle (only the old CA) succeeds. The unpropagated-CA gauge
/// says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_cabundle_injection_keeps_the_old_certificate_served() {
    let env = env().await;
    let admin = env.kcp_client().await.unwrap();
    let ns = env.namespace("wh-blocked").await.unwrap();
    let user = format!("kim-webhook-{ns}");
    let n = names(&ns);
    let subject = Subject {
        kind: "User".into(),
        name: user.clone(),
        api_group: Some("rbac.authorization.k8s.io".into()),
        ..Default::default()
    };
    let meta = |name: &str| ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    };
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(
            &PostParams::default(),
            &Role {
                metadata: meta("kim-webhook"),
                rules: Some(vec![rule("", "secrets", &["get", "create", "update"], &[])]),
            },
        )
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: meta("kim-webhook"),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "Role".into(),
                    name: "kim-webhook".into(),
                },
                subjects: Some(vec![subject.clone()]),
            },
        )
        .await
        .unwrap();
    let cluster_role = |verbs: &[&str]| ClusterRole {
        metadata: meta(&user),
        rules: Some(vec![
            rule(
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                verbs,
                &[&n.mutating],
            ),
            rule(
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
                verbs,
                &[&n.validating],
            ),
        ]),
        ..Default::default()
    };
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    roles
        .create(&PostParams::default(), &cluster_role(&["get", "patch"]))
        .await
        .unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    bindings
        .create(
            &PostParams::default(),
            &ClusterRoleBinding {
                metadata: meta(&user),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: user.clone(),
                },
                subjects: Some(vec![subject]),
            },
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !may(&admin, &user, "patch", &n.validating).await {
        assert!(Instant::now() < deadline, "RBAC not effective after 15 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pair = env.ca().client_cert(&user, &[]).unwrap();
    let yaml = env.kcp().kubeconfig(&user, Credentials::Cert(&pair));
    let restricted = kim_tests::testenv::access::client_from_yaml("kcp", &yaml)
        .await
        .unwrap();

    // CA 60 s (its successor is added with 20 s left), serving 9 s, propagation 4 s, checks
    // every second.
    let policy = RotationPolicy::from_lifetimes(
        Duration::from_secs(60),
        Duration::from_secs(9),
        Duration::from_secs(4),
        Duration::from_secs(1),
    );
    policy.validate().unwrap();
    let started = Instant::now();
    let wh = Webhook::start(
        env,
        Options {
            policy,
            namespace: Some(ns.clone()),
            kcp_client: Some(restricted),
            ..Options::default()
        },
    )
    .await;
    assert_eq!(
        pem_count(&wh.ca_bundle(env).await),
        1,
        "one CA after bootstrap"
    );

    // Take the patch permission away; reading stays allowed.
    let mut reduced = cluster_role(&["get"]);
    reduced.metadata.resource_version = roles.get(&user).await.unwrap().metadata.resource_version;
    roles
        .replace(&user, &PostParams::default(), &reduced)
        .await
        .unwrap();
    while may(&admin, &user, "patch", &n.validating).await {
        assert!(
            Instant::now() < deadline + Duration::from_secs(15),
            "patch still allowed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    assert_eq!(
        secret_cas(&secrets, &wh.secret).await,
        1,
        "the CA rotation happened before injection was blocked: the test is too slow"
    );

    // Admissions through the apiserver until shortly before the first CA expires (it was
    // created after `started`, so it lives at least until started + 60 s).
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &runtime_resource());
    let obj: DynamicObject = serde_json::from_value(valid_runtime("blocked", &ns)).unwrap();
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let (mut ok, mut failures) = (0u64, Vec::new());
    let mut second_ca_since: Option<Instant> = None;
    while started.elapsed() < Duration::from_secs(57) {
        match api.create(&pp, &obj).await {
            Ok(_) => ok += 1,
            Err(e) => failures.push(format!("{:.1}s: {e}", started.elapsed().as_secs_f64())),
        }
        if second_ca_since.is_none() && secret_cas(&secrets, &wh.secret).await == 2 {
            second_ca_since = Some(Instant::now());
        }
        let bundle = wh.ca_bundle(env).await;
        assert_eq!(
            pem_count(&bundle),
            1,
            "the caBundle changed although patching is forbidden"
        );
        if let Err(e) = fresh_handshake(&wh.replicas[0].url, &bundle).await {
            failures.push(format!("{:.1}s: {e}", started.elapsed().as_secs_f64()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let unpropagated: Vec<i64> = wh
        .replicas
        .iter()
        .map(|r| r.state.metrics.unpropagated_cas.get())
        .collect();
    let errors = wh.replicas[0].sync_errors.lock().unwrap().clone();
    let _ = roles.delete(&user, &DeleteParams::default()).await;
    let _ = bindings.delete(&user, &DeleteParams::default()).await;
    wh.stop(env).await;

    let second = second_ca_since.expect("the CA rotation happened (a second CA in the Secret)");
    let blocked_for = second.elapsed();
    println!(
        "injection blocked: {ok} admissions, {} failures, second CA unpropagated for {:.1}s",
        failures.len(),
        blocked_for.as_secs_f64()
    );
    assert!(
        blocked_for > Duration::from_secs(8),
        "the new CA was in the Secret for only {blocked_for:?}: twice the propagation time is needed to show anything"
    );
    assert!(
        failures.is_empty(),
        "the serving certificate moved to a CA the apiserver does not trust: {failures:#?}"
    );
    assert!(ok > 20, "the client kept sending: {ok}");
    assert_eq!(
        unpropagated,
        vec![1],
        "the gauge reports the unpropagated CA"
    );
    assert!(
        errors.iter().any(|e| e.contains("caBundle")),
        "injection failed visibly: {errors:?}"
    );
}

/// Someone keeps putting back a caBundle without the new CA between two checks (a GitOps
/// restore, a stale replica): each check finds the new CA missing, so its propagation never
/// completes and no serving certificate is signed by it; once the caBundle stays, it does. The
/// rotator is driven one check at a time, so the reverts always fall between two checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cabundle_reverted_between_checks_holds_the_new_ca_back() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    use kim_certs::{CertResolver, CertRotator, RotationConfig, ServingNames};

    let env = env().await;
    let admin = env.kcp_client().await.unwrap();
    let ns = env.namespace("wh-revert").await.unwrap();
    let n = names(&ns);
    // Configurations of their own, pointing nowhere: nothing in this test is admitted.
    let nowhere = "https://127.0.0.1:1/";
    kim_tests::webhook::apply_configurations(
        &admin,
        &kim_tests::webhook::configurations(&ns, nowhere, nowhere),
    )
    .await;
    // CA 20 s, its successor added with 15 s left; serving 9 s; propagation 3 s.
    let policy = RotationPolicy::from_lifetimes(
        Duration::from_secs(20),
        Duration::from_secs(9),
        Duration::from_secs(3),
        Duration::from_secs(1),
    );
    policy.validate().unwrap();
    let rotator = CertRotator::new(
        admin.clone(),
        RotationConfig {
            namespace: ns.clone(),
            secret_name: n.secret.clone(),
            names: ServingNames {
                dns: vec!["localhost".into()],
                ips: Vec::new(),
            },
            policy,
            mutating_configs: vec![n.mutating.clone()],
            validating_configs: vec![n.validating.clone()],
            field_manager: "kim-webhook".into(),
        },
        CertResolver::new(),
    )
    .unwrap();
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(admin.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    let revert = |bundle: ByteString| {
        let (mutating, validating, n) = (mutating.clone(), validating.clone(), &n);
        async move {
            let mut m = mutating.get(&n.mutating).await.unwrap();
            for w in m.webhooks.iter_mut().flatten() {
                w.client_config.ca_bundle = Some(bundle.clone());
            }
            mutating
                .replace(&n.mutating, &PostParams::default(), &m)
                .await
                .unwrap();
            let mut v = validating.get(&n.validating).await.unwrap();
            for w in v.webhooks.iter_mut().flatten() {
                w.client_config.ca_bundle = Some(bundle.clone());
            }
            validating
                .replace(&n.validating, &PostParams::default(), &v)
                .await
                .unwrap();
        }
    };
    let first = rotator.sync_once().await.unwrap();
    assert_eq!(first.bundle_size, 1);
    let old_bundle = mutating.get(&n.mutating).await.unwrap().webhooks.unwrap()[0]
        .client_config
        .ca_bundle
        .clone()
        .unwrap();
    // Until the second CA is added (5 s) and for four checks after (longer than the
    // propagation time, well before the first CA expires), the first CA's bundle is put back
    // before every check.
    let started = Instant::now();
    let mut reverted_checks = 0;
    while reverted_checks < 4 {
        assert!(started.elapsed() < Duration::from_secs(15), "no second CA");
        tokio::time::sleep(Duration::from_secs(1)).await;
        revert(old_bundle.clone()).await;
        let out = rotator.sync_once().await.unwrap();
        if out.bundle_size > 1 {
            reverted_checks += 1;
            assert_eq!(
                out.unpropagated_cas,
                out.bundle_size - 1,
                "check {reverted_checks} after the caBundle was reverted: a new CA counts as propagated"
            );
        }
    }
    // The caBundle stays: the new CA propagates.
    let mut propagated = false;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if rotator.sync_once().await.unwrap().unpropagated_cas == 0 {
            propagated = true;
            break;
        }
    }
    assert!(propagated, "the new CA never propagated once left alone");
}
