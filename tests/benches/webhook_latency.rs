//! End-to-end cost of the webhooks: Runtime creates through the real apiserver with and
//! without our webhooks registered, same run, same machine. Prints p50/p99 and the verdict on
//! the target (p99 with the webhooks at most 1.10x the p99 without; the figures in
//! docs/benchmarks.md come from here); asserts only that every create succeeded.
//!
//! A third series registers the same two webhook configurations against a floor: a server on
//! the same TLS and HTTP stack (`kim_webhook::server::serve_tls`) that reads only the request's
//! uid and answers with a constant, the mutating one with the very patch ours computes for this
//! object. No webhook can do less and still work, so the floor's ratio to the series without
//! webhooks is what the apiserver's side of two webhook calls costs here, and ours against the
//! floor is what our handlers add to it.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::routing::post;
use base64::Engine as _;
use kim_tests::testenv::TestEnv;
use kim_tests::webhook::{
    Options, Webhook, configurations, env, kim_config, runtime_resource, valid_runtime,
};
use kube::api::{Api, DynamicObject, PostParams};
use serde::Deserialize;
use serde_json::Value;

const CREATES: usize = 300;

/// Target: p99 of a create with the webhooks at most this many times the p99 without.
const P99_RATIO_TARGET: f64 = 1.10;

/// The name the floor's validating webhook refuses, so that a probe can see it enforced.
const FLOOR_PROBE: &str = "floor-probe";

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

async fn creates(api: &Api<DynamicObject>, ns: &str, prefix: &str) -> Vec<Duration> {
    let mut out = Vec::with_capacity(CREATES);
    for i in 0..CREATES {
        let obj: DynamicObject =
            serde_json::from_value(valid_runtime(&format!("{prefix}-{i}"), ns)).unwrap();
        let t = Instant::now();
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("create {prefix}-{i}: {e}"));
        out.push(t.elapsed());
    }
    out
}

#[derive(Deserialize)]
struct Review<'a> {
    #[serde(borrow)]
    request: ReviewRequest<'a>,
}

#[derive(Deserialize)]
struct ReviewRequest<'a> {
    uid: &'a str,
    #[serde(default)]
    name: Option<&'a str>,
}

type Answer = (
    http::StatusCode,
    [(http::HeaderName, &'static str); 1],
    String,
);

/// The floor's answer: allowed, with `patch` (base64 of a JSON patch) when given; denied for
/// [`FLOOR_PROBE`]. A body that is not a review gets a 400.
fn floor_answer(body: &[u8], patch: Option<&str>) -> Answer {
    let json = [(http::header::CONTENT_TYPE, "application/json")];
    let Ok(review) = serde_json::from_slice::<Review>(body) else {
        return (http::StatusCode::BAD_REQUEST, json, String::new());
    };
    let uid = serde_json::to_string(review.request.uid).unwrap();
    let verdict = match (review.request.name, patch) {
        (Some(FLOOR_PROBE), _) => {
            r#""allowed":false,"status":{"code":403,"message":"floor probe"}"#.to_owned()
        }
        (_, Some(p)) => format!(r#""allowed":true,"patchType":"JSONPatch","patch":"{p}""#),
        (_, None) => r#""allowed":true"#.to_owned(),
    };
    (
        http::StatusCode::OK,
        json,
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{{"uid":{uid},{verdict}}}}}"#
        ),
    )
}

/// Starts the floor server and registers both webhook configurations of
/// `deploy/webhook/webhooks.yaml` against it for a namespace of its own; returns that namespace.
async fn start_floor(env: &TestEnv) -> String {
    let ns = env.namespace("webhook-floor").await.unwrap();
    // The patch ours answers for this object: the defaults' diff against the object as sent.
    let sent = valid_runtime("x", &ns);
    let mut defaulted: kim_shared::api::Runtime = serde_json::from_value(sent.clone()).unwrap();
    kim_shared::defaults::apply_defaults(&mut defaulted, &kim_config());
    let patch = json_patch::diff(&sent, &serde_json::to_value(&defaulted).unwrap());
    assert!(!patch.0.is_empty(), "the sample must need defaults");
    let patch: Arc<str> = base64::engine::general_purpose::STANDARD
        .encode(serde_json::to_vec(&patch).unwrap())
        .into();

    let cert = env.webhook_serving_cert().unwrap();
    let resolver = kim_certs::CertResolver::new();
    resolver.set(kim_certs::CertResolver::certified_key(&cert.cert_pem, &cert.key_pem).unwrap());
    let tls = Arc::new(kim_certs::server_config(resolver).unwrap());
    let app = axum::Router::new()
        .route(
            "/mutate/runtime",
            post(move |body: Bytes| {
                let patch = patch.clone();
                async move { floor_answer(&body, Some(&patch)) }
            }),
        )
        .fallback(post(|body: Bytes| async move { floor_answer(&body, None) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    tokio::spawn(kim_webhook::server::serve_tls(
        listener,
        tls,
        app,
        std::future::pending(),
        Duration::from_secs(1),
    ));

    let api: Api<DynamicObject> =
        Api::namespaced_with(env.kcp_client().await.unwrap(), &ns, &runtime_resource());
    let probe = || {
        let (api, ns) = (api.clone(), ns.clone());
        async move {
            let dry = PostParams {
                dry_run: true,
                ..Default::default()
            };
            let refused: DynamicObject =
                serde_json::from_value(valid_runtime(FLOOR_PROBE, &ns)).unwrap();
            if api.create(&dry, &refused).await.is_ok() {
                return Err("the floor's validating webhook is not called yet".to_owned());
            }
            let patched: DynamicObject =
                serde_json::from_value(valid_runtime("floor-patched", &ns)).unwrap();
            let stored = api
                .create(&dry, &patched)
                .await
                .map_err(|e| e.to_string())?;
            match stored.data.pointer("/spec/shoot/kubernetes/version") {
                Some(Value::String(_)) => Ok(()),
                _ => Err("the floor's mutating webhook is not called yet".to_owned()),
            }
        }
    };
    env.register_webhooks(&configurations(&ns, &base, &base), &base, probe)
        .await
        .unwrap();
    ns
}

/// Run by `make bench-webhook` (a bench target without the test harness).
fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(runtime_create_latency_with_and_without_webhooks());
}

async fn runtime_create_latency_with_and_without_webhooks() {
    let env = env().await;
    let client = env.kcp_client().await.unwrap();
    let wh = Webhook::start(env, Options::default()).await;
    let floor_ns = start_floor(env).await;
    let plain_ns = env.namespace("no-webhook").await.unwrap();
    let api =
        |ns: &str| Api::<DynamicObject>::namespaced_with(client.clone(), ns, &runtime_resource());
    let series = [
        ("without", api(&plain_ns), plain_ns.as_str()),
        ("ours", api(&wh.ns), wh.ns.as_str()),
        ("floor", api(&floor_ns), floor_ns.as_str()),
    ];
    // Warm every path (connections, caches), then interleave the series in halves so a load
    // change on the shared machine affects all alike.
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); series.len()];
    for (name, api, ns) in &series {
        let _ = creates(api, ns, &format!("warm-{name}")).await;
    }
    for half in ["a", "b"] {
        for (i, (name, api, ns)) in series.iter().enumerate() {
            times[i].extend(creates(api, ns, &format!("{half}-{name}")).await);
        }
    }
    for t in &mut times {
        t.sort();
    }
    let [without, ours, floor] = [&times[0], &times[1], &times[2]];
    println!(
        "Runtime create through the apiserver ({} each, sequential): without webhooks p50 {:.2} ms p99 {:.2} ms; with our mutating+validating webhooks p50 {:.2} ms p99 {:.2} ms; with the floor webhooks (uid read, constant answer, the same patch) p50 {:.2} ms p99 {:.2} ms",
        without.len(),
        pct(without, 0.5),
        pct(without, 0.99),
        pct(ours, 0.5),
        pct(ours, 0.99),
        pct(floor, 0.5),
        pct(floor, 0.99),
    );
    let ratio = pct(ours, 0.99) / pct(without, 0.99);
    println!(
        "create through the apiserver: p99 with the webhooks {ratio:.2}x the p99 without (target <= {P99_RATIO_TARGET:.2}x): {}; the floor {:.2}x the p99 without; ours {:.2}x the floor's p99 and {:.2}x its p50",
        if ratio <= P99_RATIO_TARGET {
            "met"
        } else {
            "NOT met"
        },
        pct(floor, 0.99) / pct(without, 0.99),
        pct(ours, 0.99) / pct(floor, 0.99),
        pct(ours, 0.5) / pct(floor, 0.5),
    );
    for t in &times {
        assert_eq!(t.len(), 2 * CREATES);
    }
    wh.stop(env).await;
}
