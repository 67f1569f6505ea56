//! The webhook's defences against other clients than the apiserver, through the real
//! kube-apiserver: with `--client-ca-file` only a client presenting a certificate of that CA
//! (the apiserver, configured by its AdmissionConfiguration) is served; and the CRDs bound
//! their lists, so the apiserver refuses an oversized Runtime before any webhook sees it.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use kim_tests::testenv::{TestEnv, TestEnvOptions};
use kim_tests::webhook::{Options, Webhook, runtime_resource, valid_runtime};
use kube::api::{Api, DynamicObject, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;

/// A KCP whose apiserver presents a client certificate to admission webhooks, started once
/// per test process (the other webhook tests' apiserver presents none).
async fn env() -> &'static TestEnv {
    static ENV: tokio::sync::OnceCell<Result<&'static TestEnv, String>> =
        tokio::sync::OnceCell::const_new();
    ENV.get_or_init(|| {
        TestEnv::start_for_process(
            "kim-testenv-client-cert",
            TestEnvOptions {
                webhook_client_cert: true,
                ..TestEnvOptions::kcp_only()
            },
        )
    })
    .await
    .clone()
    .unwrap_or_else(|e| panic!("the hardening tests need the KCP test environment: {e}"))
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

/// Sends one review to `url` over TLS trusting `ca_bundle`, without a client certificate.
async fn post_without_certificate(url: &str, ca_bundle: &str) -> Result<u16, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_bundle.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let addr = url.trim_start_matches("https://");
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake::<_, String>(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = http::Request::post("/validate/runtime")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body("{}".to_string())
        .unwrap();
    send.send_request(req)
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| format!("request: {e}"))
}

/// The apiserver, presenting its certificate, gets answers (a valid Runtime is admitted, an
/// invalid one denied by our webhook); a client without a certificate is refused in the TLS
/// handshake, so it never reaches the admission code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_apiserver_with_its_client_certificate_is_served() {
    let env = env().await;
    let client_ca = env
        .webhook_client_ca_pem()
        .expect("started with webhook_client_cert")
        .to_string();
    // start() waits until the apiserver's reviews are answered: with the client CA required,
    // that is the apiserver's certificate being accepted.
    let wh = Webhook::start(
        env,
        Options {
            client_ca_pem: Some(client_ca),
            ..Options::default()
        },
    )
    .await;
    let client = env.kcp_client().await.unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client, &wh.ns, &runtime_resource());
    let good: DynamicObject = serde_json::from_value(valid_runtime("good", &wh.ns)).unwrap();
    api.create(&dry_run(), &good)
        .await
        .expect("the apiserver's review is answered and the Runtime admitted");
    let mut bad = valid_runtime("bad", &wh.ns);
    bad["spec"]["shoot"]["provider"]["workers"][0]["name"] = json!("Bad_Name");
    let bad: DynamicObject = serde_json::from_value(bad).unwrap();
    let denied = api.create(&dry_run(), &bad).await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.message.contains("vruntime.infrastructuremanager.kyma-project.io") && s.message.contains("workers[0].name")),
        "denied by our webhook: {denied:?}"
    );

    let bundle = wh.ca_bundle(env).await;
    for replica in &wh.replicas {
        // Refused for the missing certificate, not for a server it could not verify or reach:
        // with TLS 1.3 the client's side of the handshake completes (the server's certificate
        // verified against the bundle), then the server's alert ends the connection before
        // any answer.
        let plain = post_without_certificate(&replica.url, &bundle).await;
        assert!(
            plain
                .as_ref()
                .is_err_and(|e| e.starts_with("request:") || e.contains("CertificateRequired")),
            "a client without a certificate is refused: {plain:?}"
        );
    }
    wh.stop(env).await;
    // The control: the same client is answered by replicas that require no certificate, so
    // the refusal above is the certificate's.
    let open = Webhook::start(env, Options::default()).await;
    let bundle = open.ca_bundle(env).await;
    for replica in &open.replicas {
        let answered = post_without_certificate(&replica.url, &bundle).await;
        assert!(answered.is_ok(), "answered without mTLS: {answered:?}");
    }
    open.stop(env).await;
}

/// A Runtime with more administrators than the CRD's bound is refused by the apiserver's
/// schema validation, before any webhook decodes it; one at the bound passes the schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apiserver_refuses_a_runtime_above_a_list_bound() {
    let env = env().await;
    let bound = kim_shared::crds::LIST_BOUNDS
        .iter()
        .find(|(k, p, _)| *k == "Runtime" && *p == ".spec.security.administrators")
        .map(|(_, _, max)| usize::try_from(*max).unwrap())
        .unwrap();
    let ns = env.namespace("list-bounds").await.unwrap();
    let client = env.kcp_client().await.unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &runtime_resource());
    let with_admins = |name: &str, n: usize| -> DynamicObject {
        let mut rt = valid_runtime(name, &ns);
        rt["spec"]["security"]["administrators"] = json!(
            (0..n)
                .map(|i| format!("admin-{i}@example.com"))
                .collect::<Vec<_>>()
        );
        serde_json::from_value(rt).unwrap()
    };
    let over = api
        .create(&dry_run(), &with_admins("over", bound + 1))
        .await;
    assert!(
        matches!(&over, Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("spec.security.administrators") && s.message.contains(&format!("must have at most {bound} items"))),
        "refused by the schema: {over:?}"
    );
    api.create(&dry_run(), &with_admins("at", bound))
        .await
        .expect("a Runtime at the bound passes the schema");
}
