//! `make bench-webhook-abuse`: the webhook binary under attack.
//!
//! Starts `target/release/kim-webhook serve` with its default limits (static TLS files, the
//! repository's example KIM configuration) and runs phases of `KIM_BENCH_SECS` seconds each
//! (default 10): a baseline without attack, then slow header senders, slow body senders, an
//! HTTP/2 stream flood, many concurrent maximum-size malformed bodies, and Runtimes with
//! 100,000 administrators. Throughout, a probe sends well-formed validating reviews over one
//! HTTP/2 connection opened before the attacks (as the apiserver keeps its connection) and a
//! second probe asks `/healthz` on the admin port. For each phase it prints the server's peak
//! RSS against the 128 MiB memory limit of `deploy/`, the health-check latencies and the
//! well-formed admissions' latencies (p50/p99/max) and failures, next to the baseline measured
//! in the same run, and the apiserver's webhook timeouts of `deploy/` as the bound.
//!
//! Environment: `KIM_BENCH_SECS` (seconds per phase), `KIM_WEBHOOK_BIN` (binary).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

#[path = "support/client.rs"]
#[allow(dead_code)]
mod client;
#[path = "support/review_sample.rs"]
mod review_sample;
#[path = "support/webhook_process.rs"]
#[allow(dead_code)]
mod webhook_process;

use webhook_process::{Server, http_get, repo_root, start_server, status_kib};

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hyper::body::Bytes;
use kim_webhook::request::Mode;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// The memory limit of the webhook container in `deploy/webhook/deployment.yaml`.
const MEMORY_LIMIT_MIB: f64 = 128.0;
/// The longest `timeoutSeconds` of `deploy/webhook/webhooks.yaml` (the validating webhooks;
/// the mutating one waits 1 s).
const APISERVER_TIMEOUT: Duration = Duration::from_secs(2);
/// The probe's pace: one well-formed review and one health check every this long.
const PROBE_EVERY: Duration = Duration::from_millis(50);

/// A validating CREATE review of the AWS sample Runtime as the apiserver sends it, with
/// `administrators` replaced when given.
fn review(administrators: Option<Vec<String>>) -> Result<Bytes> {
    let path = repo_root().join("config/samples/runtime-aws.yaml");
    let mut example: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path)?)?;
    if let Some(a) = administrators {
        example["spec"]["security"]["administrators"] = json!(a);
    }
    let cfg = kim_shared::config::KimConfig::load(&kim_shared::config::ConfigPaths::new(
        repo_root().join("deploy/config/converter_config.json"),
    ))?;
    let mut rt: kim_shared::api::Runtime = serde_json::from_value(example.clone())?;
    kim_shared::defaults::apply_defaults(&mut rt, &cfg);
    let object = serde_json::to_value(&rt)?;
    let review = review_sample::create_review(
        &object,
        &example,
        Mode::Validate,
        "kyma-environment-broker",
        "system:serviceaccount:kcp-system:kcp-kyma-environment-broker",
    );
    Ok(Bytes::from(serde_json::to_vec(&review)?))
}

/// A review of `size` bytes that is valid JSON but no Runtime: its administrators list fills
/// the body and ends in a number, so the server types almost all of it before the type error,
/// and then locates the error with a second typed pass (no JSON tree).
fn malformed_max_size(size: usize) -> Bytes {
    let head = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"infrastructuremanager.kyma-project.io","version":"v1","kind":"Runtime"},"resource":{"group":"infrastructuremanager.kyma-project.io","version":"v1","resource":"runtimes"},"operation":"CREATE","userInfo":{"username":"x"},"object":{"spec":{"security":{"administrators":["#;
    let tail = b"5]}}}}}";
    let mut body = head.to_vec();
    let entry = b"\"admin-0000000@example.com\",";
    while body.len() + entry.len() + tail.len() < size {
        body.extend_from_slice(entry);
    }
    body.extend_from_slice(tail);
    body.resize(size, b' ');
    Bytes::from(body)
}

#[derive(Default)]
struct Samples {
    ok_us: Vec<u64>,
    failures: u64,
    first_failure: Option<String>,
}

impl Samples {
    fn pct(&self, p: f64) -> f64 {
        if self.ok_us.is_empty() {
            return f64::NAN;
        }
        let mut v = self.ok_us.clone();
        v.sort_unstable();
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        v[i] as f64 / 1000.0
    }
    fn max(&self) -> f64 {
        self.ok_us
            .iter()
            .max()
            .map_or(f64::NAN, |m| *m as f64 / 1000.0)
    }
}

struct PhaseResult {
    name: &'static str,
    admissions: Samples,
    health: Samples,
    peak_rss_kib: u64,
    attack_requests: u64,
}

/// The well-formed probe: one review every [`PROBE_EVERY`] over `conn` until `stop`; each
/// must be answered 200 with `allowed: true` within the apiserver's timeout.
async fn probe_admissions(
    mut conn: client::Conn,
    body: Bytes,
    stop: Arc<AtomicBool>,
) -> (client::Conn, Samples) {
    let mut s = Samples::default();
    let mut tick = tokio::time::interval(PROBE_EVERY);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let started = Instant::now();
        let r = tokio::time::timeout(
            APISERVER_TIMEOUT,
            conn.post("/validate/runtime", body.clone()),
        )
        .await;
        let took = started.elapsed();
        let failure = match r {
            Err(_) => Some(format!("no answer within {APISERVER_TIMEOUT:?}")),
            Ok(Err(e)) => Some(format!("request failed: {e}")),
            Ok(Ok(reply)) if reply.status != 200 => Some(format!("HTTP {}", reply.status)),
            Ok(Ok(reply)) => {
                let v: Value = serde_json::from_slice(&reply.body).unwrap_or_default();
                (v["response"]["allowed"] != true).then(|| format!("not allowed: {v}"))
            }
        };
        match failure {
            None => s.ok_us.push(took.as_micros() as u64),
            Some(f) => {
                s.failures += 1;
                s.first_failure.get_or_insert(f);
            }
        }
    }
    (conn, s)
}

/// The health probe: `/healthz` every [`PROBE_EVERY`] until `stop`.
fn probe_health(admin: SocketAddr, stop: Arc<AtomicBool>) -> Samples {
    let mut s = Samples::default();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        match http_get(admin, "/healthz") {
            Ok((200, _)) => s.ok_us.push(started.elapsed().as_micros() as u64),
            other => {
                s.failures += 1;
                s.first_failure.get_or_insert(format!("{other:?}"));
            }
        }
        std::thread::sleep(PROBE_EVERY);
    }
    s
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

async fn tls(server: &Server, alpn: &[u8]) -> std::io::Result<Tls> {
    let tcp = tokio::net::TcpStream::connect(server.https).await?;
    tokio_rustls::TlsConnector::from(client::tls_config(&server.ca_pem, &[alpn]))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// Slowloris: send the request head one byte per second; reconnect when cut off.
async fn slow_headers(server: Arc<Server>, stop: Arc<AtomicBool>, count: Arc<AtomicU64>) {
    let head = b"POST /validate/runtime HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut c) = tls(&server, b"http/1.1").await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        count.fetch_add(1, Ordering::Relaxed);
        for b in head.iter().cycle() {
            if stop.load(Ordering::Relaxed)
                || c.write_all(&[*b]).await.is_err()
                || c.flush().await.is_err()
            {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Slow body: a 3 MiB Content-Length, then 1 KiB per second; reconnect when cut off.
async fn slow_body(server: Arc<Server>, stop: Arc<AtomicBool>, count: Arc<AtomicU64>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut c) = tls(&server, b"http/1.1").await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        count.fetch_add(1, Ordering::Relaxed);
        let head = b"POST /validate/runtime HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 3145728\r\n\r\n";
        if c.write_all(head).await.is_err() {
            continue;
        }
        let chunk = [b' '; 1024];
        loop {
            if stop.load(Ordering::Relaxed)
                || c.write_all(&chunk).await.is_err()
                || c.flush().await.is_err()
            {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// HTTP/2 flood: `streams` requests in flight on one connection, each a small malformed
/// review, sent as fast as they are answered; reconnect when the connection fails.
async fn h2_flood(
    server: Arc<Server>,
    streams: usize,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(io) = tls(&server, b"h2").await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok((send, conn)) = h2::client::handshake(io).await else {
            continue;
        };
        tokio::spawn(conn);
        let mut tasks = Vec::new();
        for _ in 0..streams {
            let mut send = send.clone();
            let (stop, count) = (stop.clone(), count.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(s) = send.ready().await else { return };
                    send = s;
                    let req = http::Request::post("https://localhost/validate/runtime")
                        .body(())
                        .unwrap();
                    let Ok((resp, mut body)) = send.send_request(req, false) else {
                        return;
                    };
                    if body
                        .send_data(Bytes::from_static(b"{\"apiVersion\":[[[[[[[[}"), true)
                        .is_err()
                    {
                        return;
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                    let Ok(resp) = resp.await else { return };
                    let mut body = resp.into_body();
                    while let Some(chunk) = body.data().await {
                        match chunk {
                            Ok(c) => {
                                let _ = body.flow_control().release_capacity(c.len());
                            }
                            Err(_) => break,
                        }
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    }
}

/// Closed loop of `body` on `path` over one connection (reconnecting after errors).
async fn closed_loop(
    server: Arc<Server>,
    path: &'static str,
    body: Bytes,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut c) = client::Conn::connect(
            server.https,
            "localhost",
            client::tls_config(&server.ca_pem, &[b"http/1.1"]),
        )
        .await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            count.fetch_add(1, Ordering::Relaxed);
            if c.post(path, body.clone()).await.is_err() {
                break;
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Attack {
    None,
    SlowHeaders(usize),
    SlowBodies(usize),
    H2Flood { connections: usize, streams: usize },
    MalformedMax(usize),
    ManyAdministrators(usize),
}

fn main() -> Result<()> {
    let secs: u64 = std::env::var("KIM_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let phase_len = Duration::from_secs(secs);
    let server = Arc::new(start_server("warn", Stdio::null())?);
    let pid = server.child.id();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let well_formed = review(None)?;
    let admins: Vec<String> = (0..100_000)
        .map(|i| format!("admin-{i:06}@example.com"))
        .collect();
    let hundred_thousand = review(Some(admins))?;
    let max_size = kim_webhook::server::DEFAULT_MAX_REQUEST_BYTES;
    let malformed = malformed_max_size(max_size);
    println!(
        "kim-webhook under attack: {} s per phase; well-formed review {} bytes, 100,000 administrators {} bytes, malformed {} bytes (the limit)",
        secs,
        well_formed.len(),
        hundred_thousand.len(),
        malformed.len()
    );
    if hundred_thousand.len() > max_size {
        bail!("the 100,000-administrator review exceeds the body limit; adjust the names");
    }
    let idle_rss = status_kib(pid, "VmRSS:");
    // What the server answers to each kind of body, once, before any attack.
    rt.block_on(async {
        let mut c = client::Conn::connect(
            server.https,
            "localhost",
            client::tls_config(&server.ca_pem, &[b"h2"]),
        )
        .await?;
        for (label, body) in [
            ("well-formed", &well_formed),
            ("100,000 administrators", &hundred_thousand),
            ("malformed", &malformed),
        ] {
            let started = Instant::now();
            let r = c.post("/validate/runtime", body.clone()).await?;
            let took = started.elapsed();
            let v: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            let msg: String = v["response"]["status"]["message"]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(160)
                .collect();
            println!(
                "  {label}: HTTP {} allowed={} in {:.1} ms {msg}",
                r.status,
                v["response"]["allowed"],
                took.as_secs_f64() * 1000.0
            );
        }
        anyhow::Ok(())
    })?;

    let phases: Vec<(&'static str, Attack)> = vec![
        ("baseline (no attack)", Attack::None),
        ("240 slow header senders", Attack::SlowHeaders(240)),
        ("240 slow body senders", Attack::SlowBodies(240)),
        (
            "HTTP/2 flood (16 connections x 32 streams)",
            Attack::H2Flood {
                connections: 16,
                streams: 32,
            },
        ),
        (
            "32 concurrent max-size malformed bodies",
            Attack::MalformedMax(32),
        ),
        (
            "4 concurrent Runtimes with 100,000 administrators",
            Attack::ManyAdministrators(4),
        ),
    ];

    // The probe's connection, as the apiserver's: opened once, before any attack.
    let mut probe_conn = Some(rt.block_on(client::Conn::connect(
        server.https,
        "localhost",
        client::tls_config(&server.ca_pem, &[b"h2"]),
    ))?);
    let mut results = Vec::new();
    for (name, attack) in phases {
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let mut attackers = Vec::new();
        {
            let _guard = rt.enter();
            let spawn_n = |n: usize, f: &dyn Fn() -> tokio::task::JoinHandle<()>| {
                (0..n).map(|_| f()).collect::<Vec<_>>()
            };
            attackers.extend(match attack {
                Attack::None => Vec::new(),
                Attack::SlowHeaders(n) => spawn_n(n, &|| {
                    tokio::spawn(slow_headers(server.clone(), stop.clone(), count.clone()))
                }),
                Attack::SlowBodies(n) => spawn_n(n, &|| {
                    tokio::spawn(slow_body(server.clone(), stop.clone(), count.clone()))
                }),
                Attack::H2Flood {
                    connections,
                    streams,
                } => spawn_n(connections, &|| {
                    tokio::spawn(h2_flood(
                        server.clone(),
                        streams,
                        stop.clone(),
                        count.clone(),
                    ))
                }),
                Attack::MalformedMax(n) => spawn_n(n, &|| {
                    tokio::spawn(closed_loop(
                        server.clone(),
                        "/validate/runtime",
                        malformed.clone(),
                        stop.clone(),
                        count.clone(),
                    ))
                }),
                Attack::ManyAdministrators(n) => spawn_n(n, &|| {
                    tokio::spawn(closed_loop(
                        server.clone(),
                        "/validate/runtime",
                        hundred_thousand.clone(),
                        stop.clone(),
                        count.clone(),
                    ))
                }),
            });
        }
        // Let the attack build up before measuring.
        std::thread::sleep(Duration::from_secs(2));
        let done = Arc::new(AtomicBool::new(false));
        let health = std::thread::spawn({
            let (admin, m) = (server.admin, done.clone());
            move || probe_health(admin, m)
        });
        let admissions = rt.spawn(probe_admissions(
            probe_conn.take().context("probe connection")?,
            well_formed.clone(),
            done.clone(),
        ));
        let started = Instant::now();
        let mut peak = 0;
        while started.elapsed() < phase_len {
            peak = peak.max(status_kib(pid, "VmRSS:"));
            std::thread::sleep(Duration::from_millis(20));
        }
        done.store(true, Ordering::Relaxed);
        let (conn, admissions) = rt.block_on(admissions)?;
        probe_conn = Some(conn);
        let health = health
            .join()
            .map_err(|_| anyhow::anyhow!("health probe panicked"))?;
        stop.store(true, Ordering::Relaxed);
        for a in attackers {
            a.abort();
        }
        results.push(PhaseResult {
            name,
            admissions,
            health,
            peak_rss_kib: peak,
            attack_requests: count.load(Ordering::Relaxed),
        });
        // Let the server settle (timeouts cut the last attackers' connections).
        std::thread::sleep(Duration::from_secs(3));
        if server_gone(pid) {
            bail!("the webhook exited during {name}");
        }
    }
    let hwm = status_kib(pid, "VmHWM:");

    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "\nidle RSS {:.1} MiB; peak RSS over the whole run (VmHWM) {:.1} MiB = {:.0}% of the {MEMORY_LIMIT_MIB:.0} MiB limit",
        mib(idle_rss),
        mib(hwm),
        mib(hwm) / MEMORY_LIMIT_MIB * 100.0
    );
    println!(
        "well-formed admissions: one validating review every {PROBE_EVERY:?} over one HTTP/2 connection opened before the attacks; bound: the apiserver's timeout of {APISERVER_TIMEOUT:?}\n"
    );
    println!(
        "| phase | attack connections or requests | peak RSS MiB | admissions ok / failed | admission p50 / p99 / max ms | health ok / failed | health p50 / p99 / max ms |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let base = &results[0];
    for r in &results {
        println!(
            "| {} | {} | {:.1} | {} / {} | {:.2} / {:.2} / {:.1} | {} / {} | {:.2} / {:.2} / {:.1} |",
            r.name,
            r.attack_requests,
            mib(r.peak_rss_kib),
            r.admissions.ok_us.len(),
            r.admissions.failures,
            r.admissions.pct(0.5),
            r.admissions.pct(0.99),
            r.admissions.max(),
            r.health.ok_us.len(),
            r.health.failures,
            r.health.pct(0.5),
            r.health.pct(0.99),
            r.health.max(),
        );
    }
    println!();
    let mut all_ok = true;
    for r in &results {
        if let Some(f) = &r.admissions.first_failure {
            println!("{}: first failed admission: {f}", r.name);
            all_ok = false;
        }
        if let Some(f) = &r.health.first_failure {
            println!("{}: first failed health check: {f}", r.name);
            all_ok = false;
        }
        println!(
            "{}: admission p99 {:.1}x the baseline's, max {:.0}% of the apiserver's timeout; peak RSS {:.0}% of the limit",
            r.name,
            r.admissions.pct(0.99) / base.admissions.pct(0.99),
            r.admissions.max() / APISERVER_TIMEOUT.as_secs_f64() / 10.0,
            mib(r.peak_rss_kib) / MEMORY_LIMIT_MIB * 100.0
        );
    }
    let under_limit = mib(hwm) < MEMORY_LIMIT_MIB;
    println!(
        "\nverdict: {} (every well-formed admission answered within {APISERVER_TIMEOUT:?}, every health check answered, peak RSS under {MEMORY_LIMIT_MIB:.0} MiB)",
        if all_ok && under_limit {
            "PASS"
        } else {
            "FAIL"
        }
    );
    Ok(())
}

fn server_gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
        || std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map(|s| s.contains("State:\tZ"))
            .unwrap_or(true)
}
