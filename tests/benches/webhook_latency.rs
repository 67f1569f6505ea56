//! End-to-end cost of the webhooks: Runtime creates through the real apiserver with and
//! without our webhooks registered, same run, same machine. Prints p50/p99 and the verdict on
//! the target (p99 with the webhooks at most 1.10x the p99 without; the figures in
//! docs/benchmarks.md come from here); asserts only that every create succeeded.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use kim_tests::webhook::{Options, Webhook, env, runtime_resource, valid_runtime};
use kube::api::{Api, DynamicObject, PostParams};

const CREATES: usize = 300;

/// Target: p99 of a create with the webhooks at most this many times the p99 without.
const P99_RATIO_TARGET: f64 = 1.10;

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
    out.sort();
    out
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
    let plain_ns = env.namespace("no-webhook").await.unwrap();
    let with: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &wh.ns, &runtime_resource());
    let without: Api<DynamicObject> = Api::namespaced_with(client, &plain_ns, &runtime_resource());
    // Warm both paths (connections, caches), then interleave the two series in halves so a
    // load change on the shared machine affects both alike.
    let _ = creates(&without, &plain_ns, "warm").await;
    let mut a = creates(&without, &plain_ns, "a").await;
    let mut b = creates(&with, &wh.ns, "b").await;
    a.extend(creates(&without, &plain_ns, "c").await);
    b.extend(creates(&with, &wh.ns, "d").await);
    a.sort();
    b.sort();
    println!(
        "Runtime create through the apiserver ({} each, sequential): without webhooks p50 {:.2} ms p99 {:.2} ms; with mutating+validating webhooks p50 {:.2} ms p99 {:.2} ms",
        a.len(),
        pct(&a, 0.5),
        pct(&a, 0.99),
        pct(&b, 0.5),
        pct(&b, 0.99)
    );
    let ratio = pct(&b, 0.99) / pct(&a, 0.99);
    println!(
        "create through the apiserver: p99 with the webhooks {ratio:.2}x the p99 without (target <= {P99_RATIO_TARGET:.2}x): {}",
        if ratio <= P99_RATIO_TARGET {
            "met"
        } else {
            "NOT met"
        }
    );
    assert_eq!(a.len(), 2 * CREATES);
    assert_eq!(b.len(), 2 * CREATES);
    wh.stop(env).await;
}
