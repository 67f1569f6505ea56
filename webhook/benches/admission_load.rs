//! `make bench-webhook`: load on the running webhook binary over TLS keep-alive.
//!
//! Starts `target/release/kim-webhook serve` (static TLS files, the repository's example KIM
//! configuration) and, as the reference, this binary once more as a server of two endpoints
//! only the benchmark has (`/noop`: read the body, answer a constant; `/noop/decode`: also
//! decode the body into a generic JSON value), on the same TLS and HTTP stack
//! (`kim_webhook::server::serve_tls`) and allocator. Then, in one run: 16 connections
//! closed-loop against the reference endpoints, `/validate/runtime` and `/mutate/runtime` with
//! real Runtime AdmissionReviews (upstream examples), a paced run at 5,000 requests/s for
//! latency, idle and loaded RSS. Prints the figures and the verdicts on the targets and writes
//! them into the webhook section of docs/benchmarks.md.
//!
//! When `wrk` is installed (`KIM_BENCH_WRK` names another binary), the same server and bodies
//! are measured once more with it, the load generator the issue names: a cross-check that the
//! ratios are the webhook's, not an artifact of our own client.
//!
//! Environment: `KIM_BENCH_SECS` (measured seconds per run, default 5), `KIM_WEBHOOK_BIN`
//! (binary), `KIM_BENCH_NO_DOC=1` (do not touch docs/benchmarks.md).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

#[path = "support/client.rs"]
#[allow(dead_code)]
mod client;
#[path = "support/review_sample.rs"]
mod review_sample;
#[path = "support/webhook_process.rs"]
mod webhook_process;

use webhook_process::{Server, free_port, http_get, repo_root, start_server, status_kib};

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use hyper::body::Bytes;
use kim_webhook::request::Mode;
use serde::Deserialize;
use serde_json::Value;

/// The server's allocator, so that the in-process profile (`KIM_BENCH_PROFILE=1`) costs what
/// the server pays.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CONNECTIONS: usize = 16;
const PACED_RATE: u64 = 5_000;

/// Targets: server CPU per request of the validating and the mutating endpoint at most these
/// multiples of the decode reference's.
const VALIDATE_CPU_TARGET: f64 = 1.5;
const MUTATE_CPU_TARGET: f64 = 1.8;

/// Set (to the HTTPS address) when this binary runs as the reference server.
const REFERENCE_ENV: &str = "KIM_BENCH_REFERENCE_ADDR";
/// The reference server's certificate and key files.
const REFERENCE_CERT_ENV: &str = "KIM_BENCH_REFERENCE_CERT";
const REFERENCE_KEY_ENV: &str = "KIM_BENCH_REFERENCE_KEY";

/// The constant answer of the reference endpoints.
const NOOP_RESPONSE: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"","allowed":true}}"#;

/// Serves the reference endpoints on `addr` until killed: `/noop` reads the body and answers
/// a constant; `/noop/decode` decodes the body into a generic JSON value first, the least any
/// admission endpoint does and the scale the CPU targets are set against.
fn serve_reference(addr: SocketAddr) -> Result<()> {
    use axum::routing::post;
    let cert = std::fs::read_to_string(std::env::var(REFERENCE_CERT_ENV)?)?;
    let key = std::fs::read_to_string(std::env::var(REFERENCE_KEY_ENV)?)?;
    let resolver = kim_certs::CertResolver::new();
    resolver.set(kim_certs::CertResolver::certified_key(&cert, &key)?);
    let tls = Arc::new(kim_certs::server_config(resolver)?);
    let json = || [(http::header::CONTENT_TYPE, "application/json")];
    let app = axum::Router::new()
        .route(
            "/noop",
            post(move |_body: Bytes| async move { (json(), NOOP_RESPONSE) }),
        )
        .route(
            "/noop/decode",
            post(move |body: Bytes| async move {
                match serde_json::from_slice::<Value>(&body) {
                    Ok(v) => {
                        std::hint::black_box(&v);
                        (http::StatusCode::OK, json(), NOOP_RESPONSE)
                    }
                    Err(_) => (http::StatusCode::BAD_REQUEST, json(), NOOP_RESPONSE),
                }
            }),
        )
        .layer(axum::extract::DefaultBodyLimit::max(7 * 1024 * 1024));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        kim_webhook::server::serve_tls(
            listener,
            tls,
            app,
            std::future::pending(),
            Duration::from_secs(1),
        )
        .await;
        Ok(())
    })
}

/// CPU seconds (user + system) of a process, from /proc (clock ticks of 10 ms).
fn cpu_secs(pid: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
            // Fields 14 and 15 (utime, stime); `rest` starts at field 3.
            let u: f64 = rest.get(11)?.parse().ok()?;
            let k: f64 = rest.get(12)?.parse().ok()?;
            Some((u + k) / 100.0)
        })
        .unwrap_or(0.0)
}

/// This binary as the reference server, with the webhook's serving certificate; `admin` is
/// unused (the reference has no admin port).
fn start_reference(webhook: &Server) -> Result<Server> {
    let https: SocketAddr = format!("127.0.0.1:{}", free_port()).parse()?;
    let child = Command::new(std::env::current_exe()?)
        .env(REFERENCE_ENV, https.to_string())
        .env(REFERENCE_CERT_ENV, webhook.dir.path().join("tls.crt"))
        .env(REFERENCE_KEY_ENV, webhook.dir.path().join("tls.key"))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting the reference server")?;
    let server = Server {
        child,
        https,
        admin: https,
        ca_pem: webhook.ca_pem.clone(),
        dir: tempfile::tempdir()?,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect_timeout(&https, Duration::from_secs(1)).is_err() {
        if Instant::now() > deadline {
            bail!("the reference server did not listen within 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(server)
}

/// One of the repository's sample Runtimes (`config/samples`, shaped as KEB writes them).
fn runtime_example(example: &str) -> Result<Value> {
    let path = repo_root().join("config/samples").join(example);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_yaml_ng::from_str(&text)?)
}

/// The example after the mutating webhook, as the validating webhook receives it.
fn defaulted(obj: &Value) -> Result<Value> {
    let cfg = kim_shared::config::KimConfig::load(&kim_shared::config::ConfigPaths::new(
        repo_root().join("deploy/config/converter_config.json"),
    ))?;
    let mut rt: kim_shared::api::Runtime = serde_json::from_value(obj.clone())?;
    kim_shared::defaults::apply_defaults(&mut rt, &cfg);
    Ok(serde_json::to_value(&rt)?)
}

/// A CREATE AdmissionReview of the example as the apiserver sends it when KEB creates it
/// (with the managedFields, and for the validating webhook the store's `uid`,
/// `creationTimestamp` and `generation`; [`review_sample`], whose shape the end-to-end tests
/// check against the real apiserver): for the mutating webhook the example as sent, for the
/// validating webhook (and the reference rows) after the defaults.
fn runtime_review(example: &Value, mode: Mode) -> Result<Bytes> {
    let object = match mode {
        Mode::Mutate => example.clone(),
        Mode::Validate => defaulted(example)?,
    };
    let review = review_sample::create_review(
        &object,
        example,
        mode,
        "kyma-environment-broker",
        "system:serviceaccount:kcp-system:kcp-kyma-environment-broker",
    );
    Ok(Bytes::from(serde_json::to_vec(&review)?))
}

#[derive(Default, Clone)]
struct RunStats {
    requests: u64,
    errors: u64,
    denied: u64,
    latencies_us: Vec<u32>,
    elapsed: Duration,
    /// CPU seconds the server process used during the measured windows.
    server_cpu: f64,
    /// CPU seconds this load generator used during the measured windows.
    client_cpu: f64,
    /// Seconds the server's admission handler spent (its latency histogram's sum) and the
    /// requests it counted, over the whole call including warm-up; admission endpoints only.
    handler: Option<(f64, u64)>,
}

impl RunStats {
    fn merge(&mut self, o: RunStats) {
        self.requests += o.requests;
        self.errors += o.errors;
        self.denied += o.denied;
        self.latencies_us.extend(o.latencies_us);
        self.elapsed += o.elapsed;
        self.server_cpu += o.server_cpu;
        self.client_cpu += o.client_cpu;
        self.handler = match (self.handler, o.handler) {
            (Some((s, n)), Some((s2, n2))) => Some((s + s2, n + n2)),
            (a, b) => a.or(b),
        };
    }
    /// Mean server-side handler time in microseconds (admission endpoints only).
    fn handler_us(&self) -> Option<f64> {
        mean_us(self.handler)
    }
    /// Server CPU microseconds per request.
    fn server_us(&self) -> f64 {
        self.server_cpu * 1e6 / self.requests.max(1) as f64
    }
    /// Server plus load-generator CPU microseconds per request.
    fn total_us(&self) -> f64 {
        (self.server_cpu + self.client_cpu) * 1e6 / self.requests.max(1) as f64
    }
    fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
    fn pct(&self, p: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return 0.0;
        }
        let i = ((self.latencies_us.len() as f64 * p).ceil() as usize)
            .clamp(1, self.latencies_us.len())
            - 1;
        f64::from(self.latencies_us[i]) / 1000.0
    }
}

/// Closed loop (`rate == None`) or paced per connection (`Some(total rate)`).
async fn run(
    server_addr: SocketAddr,
    ca: &str,
    path: &'static str,
    body: Bytes,
    warmup: Duration,
    measure: Duration,
    rate: Option<u64>,
) -> Result<RunStats> {
    let tls = client::tls_config(ca, &[b"http/1.1"]);
    let mut tasks = Vec::new();
    let start = Instant::now() + Duration::from_millis(200);
    let measure_from = start + warmup;
    let end = measure_from + measure;
    for _ in 0..CONNECTIONS {
        let mut conn = client::Conn::connect(server_addr, "localhost", tls.clone()).await?;
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let mut st = RunStats::default();
            let mut ticker = rate.map(|r| {
                let mut t = tokio::time::interval_at(
                    tokio::time::Instant::from_std(start),
                    Duration::from_secs_f64(CONNECTIONS as f64 / r as f64),
                );
                t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                t
            });
            tokio::time::sleep_until(tokio::time::Instant::from_std(start)).await;
            loop {
                if let Some(t) = ticker.as_mut() {
                    t.tick().await;
                }
                let sent = Instant::now();
                if sent >= end {
                    break;
                }
                let reply = conn.post(path, body.clone()).await;
                let done = Instant::now();
                if sent < measure_from {
                    continue;
                }
                st.requests += 1;
                match reply {
                    Ok(r) if r.status == 200 => {
                        if memchr_allowed_false(&r.body) {
                            st.denied += 1;
                        }
                    }
                    _ => st.errors += 1,
                }
                st.latencies_us
                    .push(u32::try_from(done.duration_since(sent).as_micros()).unwrap_or(u32::MAX));
            }
            st
        }));
    }
    let mut total = RunStats {
        elapsed: measure,
        ..RunStats::default()
    };
    for t in tasks {
        let st = t.await?;
        total.requests += st.requests;
        total.errors += st.errors;
        total.denied += st.denied;
        total.latencies_us.extend(st.latencies_us);
    }
    total.latencies_us.sort_unstable();
    Ok(total)
}

fn memchr_allowed_false(body: &[u8]) -> bool {
    body.windows(15).any(|w| w == b"\"allowed\":false")
}

/// Server-side latency histogram of one endpoint from /metrics: (upper bound, cumulative).
fn server_histogram(admin: SocketAddr, webhook: &str) -> Vec<(f64, u64)> {
    let Ok((_, text)) = http_get(admin, "/metrics") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in text.lines() {
        if !line.starts_with("kim_webhook_admission_duration_seconds_bucket")
            || !line.contains(&format!("webhook=\"{webhook}\""))
        {
            continue;
        }
        let le = line
            .split("le=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("");
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap_or(f64::NAN)
        };
        let count = line
            .rsplit(' ')
            .next()
            .and_then(|c| c.parse::<f64>().ok())
            .unwrap_or(0.0) as u64;
        out.push((le, count));
    }
    out
}

/// Sum (seconds) and count of the server-side latency histogram of one webhook, from /metrics:
/// the wall time spent in the admission handler (decode, rules, response; not the audit record
/// or the metrics), including any time its thread was preempted.
fn server_handler_total(admin: SocketAddr, webhook: &str) -> Option<(f64, u64)> {
    let (_, text) = http_get(admin, "/metrics").ok()?;
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l.contains(&format!("webhook=\"{webhook}\"")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    // Before the first request of a webhook its histogram is not exported yet: zero.
    Some((
        value("kim_webhook_admission_duration_seconds_sum").unwrap_or(0.0),
        value("kim_webhook_admission_duration_seconds_count").unwrap_or(0.0) as u64,
    ))
}

/// What the handler histogram counted between two scrapes.
fn handler_delta(before: Option<(f64, u64)>, after: Option<(f64, u64)>) -> Option<(f64, u64)> {
    before
        .zip(after)
        .map(|((s0, n0), (s1, n1))| (s1 - s0, n1.saturating_sub(n0)))
}

/// Mean microseconds per request of a (seconds, requests) total.
fn mean_us(total: Option<(f64, u64)>) -> Option<f64> {
    total
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| s * 1e6 / n as f64)
}

/// The webhook whose handler histogram an endpoint feeds.
fn webhook_of(path: &str) -> Option<&'static str> {
    if path.starts_with("/validate/") {
        Some("validate")
    } else if path.starts_with("/mutate/") {
        Some("mutate")
    } else {
        None
    }
}

/// The smallest bucket bound below which at least `p` of the requests between two scrapes fell.
fn server_pct(before: &[(f64, u64)], after: &[(f64, u64)], p: f64) -> Option<f64> {
    let delta: Vec<(f64, u64)> = after
        .iter()
        .map(|(le, c)| {
            (
                *le,
                c - before
                    .iter()
                    .find(|(l, _)| l == le)
                    .map(|(_, c)| *c)
                    .unwrap_or(0),
            )
        })
        .collect();
    let total = delta.last()?.1;
    delta
        .iter()
        .find(|(_, c)| *c as f64 >= total as f64 * p)
        .map(|(le, _)| *le)
}

/// In-process cost of each step of one admission (no TLS, no HTTP), microseconds per call.
fn profile_steps(create: &Bytes, create_defaulted: &Bytes) -> Result<()> {
    use kim_webhook::admission::{AdmissionContext, mutate, validate};
    let cfg = kim_shared::config::KimConfig::load(&kim_shared::config::ConfigPaths::new(
        repo_root().join("deploy/config/converter_config.json"),
    ))?;
    let ctx = AdmissionContext {
        config: Some(Arc::new(cfg.clone())),
        ..AdmissionContext::default()
    };
    let n = 20_000u32;
    let time = |label: &str, f: &mut dyn FnMut()| {
        for _ in 0..1000 {
            f();
        }
        let t = Instant::now();
        for _ in 0..n {
            f();
        }
        println!(
            "  {label:<44} {:>7.2} us",
            t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
        );
    };
    println!("in-process cost per admission:");
    // The steps timed both hot and cold (below).
    let mut decode_review = || {
        let r: kube::core::admission::AdmissionReview<kim_shared::api::Runtime> =
            serde_json::from_slice(create_defaulted).unwrap();
        std::hint::black_box(r);
    };
    let mut decode_value = || {
        let r: Value = serde_json::from_slice(create_defaulted).unwrap();
        std::hint::black_box(r);
    };
    // The object alone: typed by serde with everything, and as the server types it (without
    // the managedFields).
    let object_text =
        serde_json::from_slice::<Value>(create_defaulted)?["request"]["object"].to_string();
    let mut decode_serde = || {
        let r: kim_shared::api::Runtime = serde_json::from_str(&object_text).unwrap();
        std::hint::black_box(r);
    };
    let mut decode_object = || {
        let r: kim_shared::api::Runtime = kim_webhook::decode::object(&object_text).unwrap();
        std::hint::black_box(r);
    };
    let mut admit_validate = || {
        std::hint::black_box(validate::<kim_shared::api::Runtime>(
            create_defaulted,
            &ctx,
            SystemTime::now(),
        ));
    };
    let mut admit_mutate = || {
        std::hint::black_box(mutate::<kim_shared::api::Runtime>(
            create,
            &ctx,
            SystemTime::now(),
        ));
    };
    time(
        "decode AdmissionReview<Runtime> (defaulted)",
        &mut decode_review,
    );
    time("decode into serde_json::Value", &mut decode_value);
    time("decode the Runtime, all of it", &mut decode_serde);
    time(
        "decode the Runtime, without managedFields",
        &mut decode_object,
    );
    // The Runtime as the server holds it (without the managedFields).
    let rt: kim_shared::api::Runtime = kim_webhook::decode::object(&object_text).unwrap();
    time("validate_create", &mut || {
        std::hint::black_box(kim_shared::validation::validate_create(&rt, &cfg));
    });
    time("apply_defaults (clone + default)", &mut || {
        let mut r = rt.clone();
        kim_shared::defaults::apply_defaults(&mut r, &cfg);
        std::hint::black_box(r);
    });
    time("to_value(Runtime)", &mut || {
        std::hint::black_box(serde_json::to_value(&rt).unwrap());
    });
    // The mutating path's own steps: the object as sent as a JSON value, and the patch.
    let mutate_object = serde_json::from_slice::<Value>(create)?["request"]["object"].to_string();
    time(
        "object as sent into Value, without managedFields",
        &mut || {
            std::hint::black_box(kim_webhook::decode::object_value(&mutate_object).unwrap());
        },
    );
    let sent = kim_webhook::decode::object_value(&mutate_object)?;
    time("type the Runtime from that Value", &mut || {
        let r = kim_shared::api::Runtime::deserialize(&sent).unwrap();
        std::hint::black_box(r);
    });
    let mut defaulted_rt: kim_shared::api::Runtime = kim_webhook::decode::object(&mutate_object)?;
    kim_shared::defaults::apply_defaults(&mut defaulted_rt, &cfg);
    let after = serde_json::to_value(&defaulted_rt)?;
    time("json_patch::diff(as sent, defaulted)", &mut || {
        std::hint::black_box(json_patch::diff(&sent, &after));
    });
    time(
        "admit validate (full, audit to tracing off)",
        &mut admit_validate,
    );
    time("admit mutate (full)", &mut admit_mutate);
    // The same calls from a cold start: the thread sleeps 50 us before each (as a server thread
    // waits for its next request), so caches and branch predictors have lost part of their
    // state. Only the call is timed.
    let cold = |label: &str, f: &mut dyn FnMut()| {
        let n = 5_000u32;
        let mut spent = Duration::ZERO;
        for _ in 0..n {
            std::thread::sleep(Duration::from_micros(50));
            let t = Instant::now();
            f();
            spent += t.elapsed();
        }
        println!(
            "  {label:<44} {:>7.2} us",
            spent.as_secs_f64() * 1e6 / f64::from(n)
        );
    };
    println!("cold (50 us sleep before each call):");
    cold(
        "decode AdmissionReview<Runtime> (defaulted)",
        &mut decode_review,
    );
    cold("decode into serde_json::Value", &mut decode_value);
    cold("decode the Runtime, all of it", &mut decode_serde);
    cold(
        "decode the Runtime, without managedFields",
        &mut decode_object,
    );
    cold(
        "admit validate (full, audit to tracing off)",
        &mut admit_validate,
    );
    cold("admit mutate (full)", &mut admit_mutate);
    let sink = kim_webhook::audit::AuditSink::log_only();
    let a = validate::<kim_shared::api::Runtime>(create_defaulted, &ctx, SystemTime::now());
    let mut emit = || sink.emit(&a.audit);
    time("audit emit, hot loop (server's logging, sinks)", &mut emit);
    cold("audit emit (the server's logging, to sinks)", &mut emit);
    Ok(())
}

fn main() -> Result<()> {
    if let Ok(addr) = std::env::var(REFERENCE_ENV) {
        return serve_reference(addr.parse()?);
    }
    if std::env::var_os("KIM_BENCH_PROFILE").is_some() {
        // The server's own logging set-up (JSON logs, audit records by their own layer),
        // writing to sinks, so that "audit emit" costs what it costs in the server.
        let _audit_log = kim_webhook::run::init_logging_to(
            kim_process::logging::LogFormat::Json,
            std::io::sink,
            std::io::sink(),
        );
        let example = runtime_example("runtime-aws.yaml")?;
        return profile_steps(
            &runtime_review(&example, Mode::Mutate)?,
            &runtime_review(&example, Mode::Validate)?,
        );
    }
    let secs: u64 = std::env::var("KIM_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let measure = Duration::from_secs(secs);
    let warmup = Duration::from_secs(1);
    let server = start_server(
        &std::env::var("KIM_BENCH_RUST_LOG").unwrap_or_else(|_| "info".into()),
        Stdio::inherit(),
    )?;
    let reference = start_reference(&server)?;
    std::thread::sleep(Duration::from_secs(1));
    let idle_rss = status_kib(server.child.id(), "VmRSS:");
    // The admission endpoints are the webhook's, the others the reference server's.
    let serving = |path: &str| {
        if webhook_of(path).is_some() {
            &server
        } else {
            &reference
        }
    };

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let example = runtime_example("runtime-aws.yaml")?;
    let create = runtime_review(&example, Mode::Mutate)?;
    let create_defaulted = runtime_review(&example, Mode::Validate)?;
    let noop = create_defaulted.clone();
    let body_size = create_defaulted.len();

    // Interleaved rounds: on a machine shared with other work, a change of background load
    // then hits all endpoints alike instead of one of them.
    let endpoints = [
        ("no-op (reference)", "/noop", noop.clone()),
        (
            "validate Runtime",
            "/validate/runtime",
            create_defaulted.clone(),
        ),
        ("mutate Runtime", "/mutate/runtime", create.clone()),
        // The least an admission endpoint does: decode the review (into a generic value) and
        // answer. The scale the CPU targets are set against.
        (
            "decode only (reference)",
            "/noop/decode",
            create_defaulted.clone(),
        ),
    ];
    // `KIM_BENCH_ONLY=/validate/runtime` (or another path): load on that endpoint alone for the
    // measured time and print its figures, e.g. to profile the server (`perf record -p`).
    if let Ok(only) = std::env::var("KIM_BENCH_ONLY") {
        let Some((label, path, body)) = endpoints.iter().find(|(_, p, _)| *p == only) else {
            bail!(
                "KIM_BENCH_ONLY={only}: not one of /noop, /noop/decode, /validate/runtime, /mutate/runtime"
            );
        };
        let target = serving(path);
        let server_pid = target.child.id().to_string();
        println!("server pid {server_pid} https {}", target.https);
        let webhook = webhook_of(path);
        let h0 = webhook.and_then(|w| server_handler_total(server.admin, w));
        let (s0, c0) = (cpu_secs(&server_pid), cpu_secs("self"));
        let t0 = Instant::now();
        let mut st = rt.block_on(run(
            target.https,
            &target.ca_pem,
            path,
            body.clone(),
            warmup,
            measure,
            None,
        ))?;
        let share = measure.as_secs_f64() / t0.elapsed().as_secs_f64();
        st.server_cpu = (cpu_secs(&server_pid) - s0) * share;
        st.client_cpu = (cpu_secs("self") - c0) * share;
        let h1 = webhook.and_then(|w| server_handler_total(server.admin, w));
        st.handler = handler_delta(h0, h1);
        println!(
            "{label:<18} {:>9.0} req/s  server CPU {:.1} us/req  server+client CPU {:.1} us/req  handler {} us/req  errors {}",
            st.rps(),
            st.server_us(),
            st.total_us(),
            st.handler_us()
                .map(|h| format!("{h:.1}"))
                .unwrap_or("-".into()),
            st.errors
        );
        return Ok(());
    }
    let rounds: u32 = 4;
    let slice = measure / rounds;
    let mut rows: Vec<(&str, RunStats)> = endpoints
        .iter()
        .map(|(l, _, _)| (*l, RunStats::default()))
        .collect();
    for _ in 0..rounds {
        for (i, (_, path, body)) in endpoints.iter().enumerate() {
            let webhook = webhook_of(path);
            let target = serving(path);
            let server_pid = target.child.id().to_string();
            let h0 = webhook.and_then(|w| server_handler_total(server.admin, w));
            let (s0, c0) = (cpu_secs(&server_pid), cpu_secs("self"));
            let t0 = Instant::now();
            let mut st = rt.block_on(run(
                target.https,
                &target.ca_pem,
                path,
                body.clone(),
                warmup / 2,
                slice,
                None,
            ))?;
            let h1 = webhook.and_then(|w| server_handler_total(server.admin, w));
            st.handler = handler_delta(h0, h1);
            // CPU over the whole call includes warm-up; scale it to the measured window.
            let share = slice.as_secs_f64() / t0.elapsed().as_secs_f64();
            st.server_cpu = (cpu_secs(&server_pid) - s0) * share;
            st.client_cpu = (cpu_secs("self") - c0) * share;
            rows[i].1.merge(st);
        }
    }
    for (label, st) in &mut rows {
        st.latencies_us.sort_unstable();
        println!(
            "{label:<18} {:>9.0} req/s  p50 {:.3} ms  p99 {:.3} ms  p99.9 {:.3} ms  server CPU {:.1} us/req  server+client CPU {:.1} us/req  handler {} us/req  errors {}  denied {}",
            st.rps(),
            st.pct(0.5),
            st.pct(0.99),
            st.pct(0.999),
            st.server_us(),
            st.total_us(),
            st.handler_us()
                .map(|h| format!("{h:.1}"))
                .unwrap_or("-".into()),
            st.errors,
            st.denied
        );
    }
    let before = server_histogram(server.admin, "validate");
    let handler_before = server_handler_total(server.admin, "validate");
    let paced = rt.block_on(run(
        server.https,
        &server.ca_pem,
        "/validate/runtime",
        create.clone(),
        warmup,
        measure,
        Some(PACED_RATE),
    ))?;
    let after = server_histogram(server.admin, "validate");
    let paced_handler_us = mean_us(handler_delta(
        handler_before,
        server_handler_total(server.admin, "validate"),
    ));
    let server_p99 = server_pct(&before, &after, 0.99);
    let server_p50 = server_pct(&before, &after, 0.5);
    let loaded_rss = status_kib(server.child.id(), "VmRSS:");
    println!(
        "paced {PACED_RATE} req/s validate: achieved {:.0} req/s, client p50 {:.3} ms p99 {:.3} ms p99.9 {:.3} ms, server p50 <= {} ms, server p99 <= {} ms, handler mean {} us, errors {}",
        paced.rps(),
        paced.pct(0.5),
        paced.pct(0.99),
        paced.pct(0.999),
        server_p50
            .map(|v| format!("{:.3}", v * 1000.0))
            .unwrap_or("?".into()),
        server_p99
            .map(|v| format!("{:.3}", v * 1000.0))
            .unwrap_or("?".into()),
        paced_handler_us
            .map(|h| format!("{h:.1}"))
            .unwrap_or("?".into()),
        paced.errors
    );
    println!(
        "RSS idle {:.1} MiB, after load {:.1} MiB",
        idle_rss as f64 / 1024.0,
        loaded_rss as f64 / 1024.0
    );

    let noop_rps = rows[0].1.rps();
    let ratio = |i: usize| rows[i].1.rps() / noop_rps * 100.0;
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    // The rows are no-op, validate, mutate, decode (as `endpoints`). Server CPU per request
    // does not depend on what else runs on a shared machine, throughput does.
    let cpu_vs_decode = |i: usize| rows[i].1.server_us() / rows[3].1.server_us();
    let checks = [
        format!(
            "server CPU per request: no-op {:.1} us, decode only (reference) {:.1} us, validate {:.1} us, mutate {:.1} us; server + load generator: {:.1} / {:.1} / {:.1} / {:.1} us",
            rows[0].1.server_us(),
            rows[3].1.server_us(),
            rows[1].1.server_us(),
            rows[2].1.server_us(),
            rows[0].1.total_us(),
            rows[3].1.total_us(),
            rows[1].1.total_us(),
            rows[2].1.total_us()
        ),
        format!(
            "validating endpoint: server CPU per request {:.2}x the decode reference's (target <= {VALIDATE_CPU_TARGET}x): {}",
            cpu_vs_decode(1),
            verdict(cpu_vs_decode(1) <= VALIDATE_CPU_TARGET)
        ),
        format!(
            "mutating endpoint: server CPU per request {:.2}x the decode reference's (target <= {MUTATE_CPU_TARGET}x): {}",
            cpu_vs_decode(2),
            verdict(cpu_vs_decode(2) <= MUTATE_CPU_TARGET)
        ),
        format!(
            "throughput (shared machine, load generator included): validate {:.0}%, mutate {:.0}% and {:.0}% for the decode reference, of the no-op's; the admission handlers take {} us (validate) and {} us (mutate) of wall time on average under this load (their latency histograms, preemption included)",
            ratio(1),
            ratio(2),
            ratio(3),
            rows[1]
                .1
                .handler_us()
                .map(|h| format!("{h:.1}"))
                .unwrap_or("?".into()),
            rows[2]
                .1
                .handler_us()
                .map(|h| format!("{h:.1}"))
                .unwrap_or("?".into())
        ),
        format!(
            "server-side p99 at {PACED_RATE} req/s <= {} ms (target < 1 ms): {}",
            server_p99
                .map(|v| format!("{:.3}", v * 1000.0))
                .unwrap_or("?".into()),
            verdict(server_p99.is_some_and(|v| v <= 0.001))
        ),
        format!(
            "idle RSS {:.1} MiB (target < 30 MiB): {}",
            idle_rss as f64 / 1024.0,
            verdict(idle_rss < 30 * 1024)
        ),
    ];
    for c in &checks {
        println!("{c}");
    }
    let wrk = wrk_crosscheck((&server, &reference), &endpoints, measure)?;
    for line in wrk.lines() {
        println!("{line}");
    }

    if std::env::var_os("KIM_BENCH_NO_DOC").is_none() {
        let mut md = String::new();
        md.push_str("<!-- webhook-bench:start (written by `make bench-webhook`; edit the bench, not this block) -->\n");
        md.push_str(&format!(
            "Run: {} UTC, {} connections, HTTP/1.1 keep-alive over TLS 1.3, {} s measured per row in 4 interleaved rounds (0.5 s warm-up each), load generator on the same {}-core machine. Body: the KEB-shaped `config/samples/runtime-aws.yaml` (complete as KEB writes it, so defaulting adds nothing and `/mutate` answers without a patch) in a CREATE AdmissionReview as the apiserver sends it (with managedFields; `webhook/benches/support/review_sample.rs`), defaulted for `/validate` and the reference rows ({} bytes), as sent for `/mutate`. `/noop` and `/noop/decode` are served by the benchmark binary itself on the webhook's TLS and HTTP stack (`kim_webhook::server::serve_tls`, mimalloc), `/validate` and `/mutate` by `kim-webhook serve`. Audit records on (stdout to /dev/null).\n\n",
            jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M"),
            CONNECTIONS,
            secs,
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            body_size
        ));
        md.push_str("| endpoint | req/s | % of no-op | p50 ms | p99 ms | p99.9 ms | server CPU us/req | server+client CPU us/req | handler wall us/req (server-side mean) | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (i, (label, st)) in rows.iter().enumerate() {
            md.push_str(&format!(
                "| {label} | {:.0} | {:.0}% | {:.3} | {:.3} | {:.3} | {:.1} | {:.1} | {} | {} |\n",
                st.rps(),
                if i == 0 { 100.0 } else { ratio(i) },
                st.pct(0.5),
                st.pct(0.99),
                st.pct(0.999),
                st.server_us(),
                st.total_us(),
                st.handler_us()
                    .map(|h| format!("{h:.1}"))
                    .unwrap_or("-".into()),
                st.errors
            ));
        }
        md.push_str(&format!(
            "\nPaced at {PACED_RATE} req/s on `/validate/runtime`: achieved {:.0} req/s; client-side p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms; server-side (handler histogram) p50 <= {} ms, p99 <= {} ms, mean {} us.\n\nRSS: idle {:.1} MiB, after the runs {:.1} MiB.\n\n",
            paced.rps(),
            paced.pct(0.5),
            paced.pct(0.99),
            paced.pct(0.999),
            server_p50.map(|v| format!("{:.3}", v * 1000.0)).unwrap_or("?".into()),
            server_p99.map(|v| format!("{:.3}", v * 1000.0)).unwrap_or("?".into()),
            paced_handler_us.map(|h| format!("{h:.1}")).unwrap_or("?".into()),
            idle_rss as f64 / 1024.0,
            loaded_rss as f64 / 1024.0
        ));
        for c in &checks {
            md.push_str(&format!("- {c}\n"));
        }
        md.push_str(&format!("\n{wrk}"));
        md.push_str("<!-- webhook-bench:end -->\n");
        write_doc(&md)?;
    }
    Ok(())
}

/// The endpoints again (no-op first), driven by `wrk` with the same bodies, connections and
/// servers (the admission endpoints `webhook`'s, the others `reference`'s): interleaved
/// rounds, throughput, wrk's latency percentiles and the server's CPU per request. Markdown,
/// or one line saying why it was not run.
fn wrk_crosscheck(
    (webhook, reference): (&Server, &Server),
    endpoints: &[(&str, &str, Bytes)],
    measure: Duration,
) -> Result<String> {
    let wrk = std::env::var_os("KIM_BENCH_WRK")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("wrk"));
    let Some(version) = wrk_version(&wrk) else {
        return Ok(format!(
            "Cross-check with wrk: not run, `{}` is not installed (Debian: `apt-get install wrk`; `make bench-webhook` installs it where it can).\n",
            wrk.display()
        ));
    };
    let dir = tempfile::tempdir()?;
    // wrk sends one fixed request per connection, over and over, on keep-alive.
    let script = dir.path().join("post.lua");
    std::fs::write(
        &script,
        "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nlocal f = assert(io.open(os.getenv(\"KIM_WRK_BODY\"), \"rb\"))\nwrk.body = f:read(\"*a\")\nf:close()\n",
    )?;
    let rounds = 3u32;
    // wrk takes whole seconds.
    let slice = Duration::from_secs(measure.as_secs().div_ceil(u64::from(rounds)).max(1));
    let serving = |path: &str| {
        if webhook_of(path).is_some() {
            webhook
        } else {
            reference
        }
    };
    let mut body_files = Vec::new();
    for (i, (_, _, body)) in endpoints.iter().enumerate() {
        let file = dir.path().join(format!("body-{i}.json"));
        std::fs::write(&file, body)?;
        body_files.push(file);
    }
    let mut totals: Vec<WrkTotals> = endpoints.iter().map(|_| WrkTotals::default()).collect();
    for _ in 0..rounds {
        for (i, (_, path, _)) in endpoints.iter().enumerate() {
            let body_file = &body_files[i];
            let server = serving(path);
            let server_pid = server.child.id().to_string();
            let s0 = cpu_secs(&server_pid);
            let out = Command::new(&wrk)
                .args(["-t2", &format!("-c{CONNECTIONS}"), "--latency", "-s"])
                .arg(&script)
                .arg(format!("-d{}s", slice.as_secs()))
                .arg(format!("https://{}{path}", server.https))
                .env("KIM_WRK_BODY", body_file)
                .output()
                .with_context(|| format!("running {}", wrk.display()))?;
            let server_cpu = cpu_secs(&server_pid) - s0;
            let text = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() || text.contains("Non-2xx") || text.contains("Socket errors") {
                bail!(
                    "wrk on {path} failed or saw errors:\n{text}{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let (requests, secs) = wrk_requests(&text)
                .with_context(|| format!("no request count in wrk's output:\n{text}"))?;
            let t = &mut totals[i];
            t.requests += requests;
            t.secs += secs;
            t.server_cpu += server_cpu;
            t.p50s
                .push(wrk_percentile(&text, "50%").unwrap_or(f64::NAN));
            t.p99s
                .push(wrk_percentile(&text, "99%").unwrap_or(f64::NAN));
        }
    }
    let noop = totals[0].rps();
    let range = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{lo:.3}-{hi:.3}")
    };
    let mut md = format!(
        "Cross-check with wrk ({}, the load generator the issue names; OpenSSL client, 2 threads, {CONNECTIONS} connections, keep-alive), same servers and bodies, {rounds} interleaved rounds of {} s. wrk checks the status code only; the rows above check that every answer is allowed.\n\n| endpoint | req/s | % of no-op | p50 ms (per round) | p99 ms (per round) | server CPU us/req |\n|---|---:|---:|---:|---:|---:|\n",
        version,
        slice.as_secs()
    );
    for ((label, _, _), t) in endpoints.iter().zip(&totals) {
        md.push_str(&format!(
            "| {label} | {:.0} | {:.0}% | {} | {} | {:.1} |\n",
            t.rps(),
            t.rps() / noop * 100.0,
            range(&t.p50s),
            range(&t.p99s),
            t.server_cpu / t.requests.max(1) as f64 * 1e6
        ));
    }
    // The rows are no-op, validate, mutate, decode only (as `endpoints` in main).
    let cpu = |i: usize| {
        totals
            .get(i)
            .map_or(0.0, |t| t.server_cpu / t.requests.max(1) as f64)
    };
    let vs_decode = |i: usize| cpu(i) / cpu(3);
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    md.push_str(&format!(
        "\n- with wrk: server CPU per validating request {:.2}x the decode reference's (target <= {VALIDATE_CPU_TARGET}x): {}; per mutating request {:.2}x (target <= {MUTATE_CPU_TARGET}x): {}\n",
        vs_decode(1),
        verdict(vs_decode(1) <= VALIDATE_CPU_TARGET),
        vs_decode(2),
        verdict(vs_decode(2) <= MUTATE_CPU_TARGET),
    ));
    Ok(md)
}

/// One endpoint's wrk rounds added up.
#[derive(Default)]
struct WrkTotals {
    requests: u64,
    secs: f64,
    /// Server CPU seconds over the rounds.
    server_cpu: f64,
    /// p50 and p99 latency of each round, ms.
    p50s: Vec<f64>,
    p99s: Vec<f64>,
}

impl WrkTotals {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.secs
    }
}

/// `N requests in S.SSs` from wrk's summary.
fn wrk_requests(text: &str) -> Option<(u64, f64)> {
    let line = text.lines().find(|l| l.contains(" requests in "))?;
    let mut words = line.split_whitespace();
    let n = words.next()?.parse().ok()?;
    let secs = words.nth(2)?.trim_end_matches([',', 's']).parse().ok()?;
    Some((n, secs))
}

/// A percentile line of wrk's `--latency` table (`99%    3.98ms`), in milliseconds.
fn wrk_percentile(text: &str, label: &str) -> Option<f64> {
    let value = text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some(label)).then(|| w.next()).flatten()
    })?;
    let (num, scale) = if let Some(v) = value.strip_suffix("us") {
        (v, 1e-3)
    } else if let Some(v) = value.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = value.strip_suffix('s') {
        (v, 1e3)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|v| v * scale)
}

/// `wrk <version>`, or `None` when `wrk` cannot be run.
fn wrk_version(wrk: &Path) -> Option<String> {
    let out = Command::new(wrk).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.split_whitespace()
            .nth(1)
            .map_or_else(|| "wrk".into(), |v| format!("wrk {v}")),
    )
}

/// Replaces the marked block in docs/benchmarks.md (creating the webhook section if absent).
fn write_doc(block: &str) -> Result<()> {
    let path = repo_root().join("docs/benchmarks.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|_| "# Benchmarks\n".to_string());
    let new = match (
        text.find("<!-- webhook-bench:start"),
        text.find("<!-- webhook-bench:end -->"),
    ) {
        (Some(a), Some(b)) if b > a => {
            let end = b + "<!-- webhook-bench:end -->\n".len().min(text.len() - b);
            format!("{}{}{}", &text[..a], block, &text[end..])
        }
        _ => format!(
            "{}\n## Webhook (`make bench-webhook`)\n\nDirect load on `kim-webhook` over TLS (no apiserver in the path).\n\n{}",
            text.trim_end(),
            block
        ),
    };
    std::fs::write(&path, new)?;
    println!("wrote {}", path.display());
    Ok(())
}
