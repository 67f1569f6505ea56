//! Graceful shutdown under admission load, end to end: two kim-webhook processes behind one
//! webhook registration, Runtimes created continuously through the real kube-apiserver, one
//! replica stopped with SIGTERM. With the default `--shutdown-delay` (5 s) not one create
//! fails; with `--shutdown-delay 0s` creates fail.
//!
//! The wiring is a cluster's: the webhook configurations of `deploy/webhook/webhooks.yaml`
//! call a `service` (not a URL), and the apiserver, started with `--enable-aggregator-routing`,
//! dials one of the Service's ready EndpointSlice addresses for every new connection. There is
//! no kubelet and no endpoint controller, so the test plays both: every [`PROBE_PERIOD`] it
//! probes each replica's `/readyz`, and when a probe fails it removes that replica's
//! EndpointSlice. It sends SIGTERM right after a successful probe, so the apiserver keeps
//! routing to the stopping replica for a whole probe period, as it does in a cluster.
//!
//! Endpoints may not be loopback addresses, so the replicas listen on this machine's first
//! non-loopback IPv4 address (`hostname -I`); their certificate names the Service
//! (`<service>.<namespace>.svc`, the name the apiserver checks).
//!
//! Needs the `kim-webhook` binary built next to this test's binary (`cargo build -p
//! kim-webhook`, part of `make test`), or `KIM_WEBHOOK_BIN`.
#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use kim_tests::testenv::process::{ManagedProcess, free_port};
use kim_tests::testenv::repo_root;
use kim_tests::testenv::{TestEnv, TestEnvOptions};
use kim_tests::webhook::{configurations, runtime_resource, valid_runtime};
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How often the test, as the kubelet, probes readiness (a readiness probe with
/// `periodSeconds: 1, failureThreshold: 1`).
pub(super) const PROBE_PERIOD: Duration = Duration::from_secs(1);
/// Concurrent clients creating Runtimes.
const CREATORS: usize = 6;
const SERVICE: &str = "kim-webhook";
const PORT_NAME: &str = "https";

/// How the replica under load is stopped.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Stop {
    /// SIGTERM: a rollout, a scale-down, a drained node.
    Term,
    /// SIGKILL: the OOM killer, a crashed node.
    Kill,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_under_load_fails_no_admission_only_with_the_shutdown_delay() {
    let ip = host_address();
    let bin = webhook_bin();
    let env = TestEnv::start(TestEnvOptions {
        aggregator_routing: true,
        ..TestEnvOptions::kcp_only()
    })
    .await
    .unwrap();

    let with_delay = scenario(&env, &bin, ip, "5s", Stop::Term, false).await;
    println!("--shutdown-delay 5s: {}", with_delay.summary());
    assert!(
        with_delay.failures.is_empty(),
        "creates failed while a replica shut down with the delay: {:#?}",
        with_delay.failures
    );
    assert!(
        with_delay.stopped_served_after_term > 0,
        "the apiserver sent no review to the stopping replica after SIGTERM, so the test showed nothing: {}",
        with_delay.summary()
    );
    assert!(
        with_delay.other_served_after_exit > 0,
        "the other replica answered after the first one exited: {}",
        with_delay.summary()
    );

    let mut without = scenario(&env, &bin, ip, "0s", Stop::Term, false).await;
    println!("--shutdown-delay 0s: {}", without.summary());
    // The control depends on the apiserver sending a review on a connection the stopped
    // replica is closing, in the second between SIGTERM and its endpoint's removal: a race
    // that a try may not hit (on a loaded machine the apiserver sometimes sends it none, or
    // only reviews already under way, which the replica still answers). Up to four more
    // tries; the control fails only when none of the five lost a create.
    for attempt in 2..=5 {
        if !without.failures.is_empty() {
            break;
        }
        without = scenario(&env, &bin, ip, "0s", Stop::Term, false).await;
        println!("--shutdown-delay 0s, try {attempt}: {}", without.summary());
    }
    for f in &without.failures {
        println!("  {}", f.split(": InternalError").next().unwrap_or(f));
    }
    assert!(
        !without.failures.is_empty(),
        "without the delay, creates routed to the stopped replica before its endpoint was removed should fail: {}",
        without.summary()
    );
    assert!(
        without
            .failures
            .iter()
            .all(|f| f.contains("failed calling webhook")),
        "every failure is a call to the stopped replica: {:#?}",
        without.failures
    );
}

/// What one stop under load showed.
pub(super) struct Report {
    delay: String,
    stop: Stop,
    pub(super) created: u64,
    /// Creates that failed (after the client's retries, if any): when, and the error.
    pub(super) failures: Vec<String>,
    /// Creates that failed once and succeeded on the client's retry.
    pub(super) retried: Vec<String>,
    /// Reviews the stopped replica answered after its SIGTERM.
    stopped_served_after_term: usize,
    /// Reviews the other replica answered after the stopped one exited.
    pub(super) other_served_after_exit: usize,
    /// SIGTERM to the removal of the stopped replica's EndpointSlice.
    pub(super) until_removed: Duration,
    /// SIGTERM to its exit.
    until_exit: Duration,
    /// Connections the apiserver opened to the stopped and to the other replica.
    pub(super) connections: (usize, usize),
}

impl Report {
    pub(super) fn summary(&self) -> String {
        format!(
            "{} creates, {} failed, {} succeeded on a retry; the stopped replica answered {} reviews after the signal, was removed from the endpoints after {:.2} s and exited after {:.2} s; the other answered {} after that",
            self.created,
            self.failures.len(),
            self.retried.len(),
            self.stopped_served_after_term,
            self.until_removed.as_secs_f64(),
            self.until_exit.as_secs_f64(),
            self.other_served_after_exit,
        ) + &format!(
            " (--shutdown-delay {}, {:?}; the apiserver opened {} connections to it, {} to the other)",
            self.delay, self.stop, self.connections.0, self.connections.1
        )
    }
}

/// Two replicas with `--shutdown-delay delay` in a new namespace, load, SIGTERM or SIGKILL
/// (`stop`) to the replica the apiserver is talking to, the kubelet's and endpoint
/// controller's part, the end of load. With `retry`, a client retries a failed create once
/// after three probe periods.
pub(super) async fn scenario(
    env: &TestEnv,
    bin: &Path,
    ip: IpAddr,
    delay: &str,
    stop_by: Stop,
    retry: bool,
) -> Report {
    let client = env.kcp_client().await.unwrap();
    let ns = env.namespace("shutdown").await.unwrap();
    let dir = env.state_dir().join(format!("shutdown-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let host = format!("{SERVICE}.{ns}.svc");
    let cert = env
        .ca()
        .serving_cert("kim-webhook", &[host.as_str()])
        .unwrap();
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    kim_tests::testenv::access::write_private(&cert_file, &cert.cert_pem).unwrap();
    kim_tests::testenv::access::write_private(&key_file, &cert.key_pem).unwrap();
    let mut replicas = Vec::new();
    for i in 0..2 {
        replicas.push(Replica::start(bin, &dir, ip, i, delay, &cert_file, &key_file).await);
    }

    // The Service and, as the endpoint controller would write them for two ready pods, one
    // EndpointSlice per replica (each its own port: both listen on the same address).
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    services
        .create(
            &PostParams::default(),
            &Service {
                metadata: ObjectMeta {
                    name: Some(SERVICE.into()),
                    ..ObjectMeta::default()
                },
                spec: Some(ServiceSpec {
                    // Headless: nothing to allocate; the apiserver routes to the endpoints.
                    cluster_ip: Some("None".into()),
                    ports: Some(vec![ServicePort {
                        name: Some(PORT_NAME.into()),
                        port: 443,
                        ..ServicePort::default()
                    }]),
                    ..ServiceSpec::default()
                }),
                ..Service::default()
            },
        )
        .await
        .unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    for r in &replicas {
        slices
            .create(&PostParams::default(), &r.endpoint_slice(ip))
            .await
            .unwrap();
    }
    register(&client, &ns, env.webhook_ca_bundle()).await;

    // Load.
    let runtimes: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &runtime_resource());
    let stop = Arc::new(AtomicBool::new(false));
    let created = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let retried = Arc::new(Mutex::new(Vec::<String>::new()));
    let started = Instant::now();
    let mut creators = Vec::new();
    for c in 0..CREATORS {
        let (api, stop, created, failures, retried) = (
            runtimes.clone(),
            stop.clone(),
            created.clone(),
            failures.clone(),
            retried.clone(),
        );
        let ns = ns.clone();
        creators.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let obj: DynamicObject =
                    serde_json::from_value(valid_runtime(&format!("load-{c}-{i}"), &ns)).unwrap();
                i += 1;
                let mut result = api.create(&PostParams::default(), &obj).await;
                if let (true, Err(e)) = (retry, &result) {
                    let first = format!("{:.2} s: {e}", started.elapsed().as_secs_f64());
                    // After the longest endpoint removal the kill test allows (three probe
                    // periods): a retry one second later could still reach the dead endpoint.
                    tokio::time::sleep(3 * PROBE_PERIOD).await;
                    result = api.create(&PostParams::default(), &obj).await;
                    if result.is_ok() {
                        retried.lock().unwrap().push(first);
                    }
                }
                match result {
                    Ok(_) => {
                        created.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => failures
                        .lock()
                        .unwrap()
                        .push(format!("{:.2} s: {e}", started.elapsed().as_secs_f64())),
                }
            }
        }));
    }

    // The replica the apiserver is talking to (it keeps a connection open): the one whose
    // answers grow.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before: Vec<usize> = replicas.iter().map(Replica::answered).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let growth: Vec<usize> = replicas
        .iter()
        .zip(&before)
        .map(|(r, b)| r.answered() - b)
        .collect();
    assert!(
        growth.iter().any(|g| *g > 0),
        "no replica is answering under load: {growth:?}; failures: {:?}",
        failures.lock().unwrap()
    );
    let (stopped, other) = if growth[0] >= growth[1] {
        (0, 1)
    } else {
        (1, 0)
    };

    // SIGTERM right after a successful probe.
    assert_eq!(
        readyz(replicas[stopped].admin).await,
        Ok(200),
        "replica {stopped} ready before SIGTERM"
    );
    let answered_at_term = replicas[stopped].answered();
    let term = Instant::now();
    match stop_by {
        Stop::Term => replicas[stopped].terminate(),
        Stop::Kill => replicas[stopped].process.stop(),
    }
    println!(
        "stopped replica {stopped} ({stop_by:?}) {:.2} s into the load",
        started.elapsed().as_secs_f64()
    );
    loop {
        tokio::time::sleep(PROBE_PERIOD).await;
        if readyz(replicas[stopped].admin).await != Ok(200) {
            break;
        }
        assert!(
            term.elapsed() < Duration::from_secs(30),
            "replica {stopped} still ready 30 s after SIGTERM"
        );
    }
    slices
        .delete(&replicas[stopped].slice_name(), &DeleteParams::default())
        .await
        .unwrap();
    let until_removed = term.elapsed();
    // Until it exits (the delay, then the drain), and a while after.
    while replicas[stopped].running() {
        assert!(
            term.elapsed() < Duration::from_secs(40),
            "replica {stopped} did not exit within 40 s of SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let until_exit = term.elapsed();
    let other_at_exit = replicas[other].answered();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for c in creators {
        c.await.unwrap();
    }
    let report = Report {
        delay: delay.to_owned(),
        stop: stop_by,
        created: created.load(Ordering::Relaxed),
        failures: failures.lock().unwrap().clone(),
        retried: retried.lock().unwrap().clone(),
        stopped_served_after_term: replicas[stopped].answered() - answered_at_term,
        other_served_after_exit: replicas[other].answered() - other_at_exit,
        until_removed,
        until_exit,
        connections: (
            replicas[stopped].connections(),
            replicas[other].connections(),
        ),
    };
    unregister(&client, &ns).await;
    report
}

/// One kim-webhook process.
struct Replica {
    index: usize,
    process: ManagedProcess,
    port: u16,
    admin: u16,
    audit: PathBuf,
}

impl Replica {
    async fn start(
        bin: &Path,
        dir: &Path,
        ip: IpAddr,
        index: usize,
        delay: &str,
        cert: &Path,
        key: &Path,
    ) -> Replica {
        let (port, admin) = (free_port().unwrap(), free_port().unwrap());
        let audit = dir.join(format!("audit-{index}.log"));
        let config = repo_root().join("deploy/config/converter_config.json");
        let args = vec![
            "serve".to_owned(),
            format!("--converter-config-filepath={}", config.display()),
            format!("--listen-addr={ip}:{port}"),
            format!("--admin-addr=127.0.0.1:{admin}"),
            format!("--tls-cert-file={}", cert.display()),
            format!("--tls-key-file={}", key.display()),
            format!("--shutdown-delay={delay}"),
            format!("--audit-log-path={}", audit.display()),
            "--log-format=text".to_owned(),
        ];
        let log = dir.join(format!("kim-webhook-{index}.log"));
        let mut process = ManagedProcess::spawn(
            &format!("kim-webhook-{index}"),
            bin,
            &args,
            &[("RUST_LOG", "info")],
            &log,
        )
        .unwrap();
        let started = Instant::now();
        while readyz(admin).await != Ok(200) {
            if let Err(e) = process.check_running() {
                panic!("replica {index} exited: {e}");
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "replica {index} not ready within 30 s (log {})",
                log.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Replica {
            index,
            process,
            port,
            admin,
            audit,
        }
    }

    fn slice_name(&self) -> String {
        format!("{SERVICE}-{}", self.index)
    }

    fn endpoint_slice(&self, ip: IpAddr) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(self.slice_name()),
                labels: Some(
                    [
                        ("kubernetes.io/service-name".to_owned(), SERVICE.to_owned()),
                        (
                            "endpointslice.kubernetes.io/managed-by".to_owned(),
                            "kim-tests".to_owned(),
                        ),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            address_type: "IPv4".into(),
            endpoints: Some(vec![Endpoint {
                addresses: vec![ip.to_string()],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    ..EndpointConditions::default()
                }),
                ..Endpoint::default()
            }]),
            ports: Some(vec![EndpointPort {
                name: Some(PORT_NAME.into()),
                port: Some(i32::from(self.port)),
                protocol: Some("TCP".into()),
                ..EndpointPort::default()
            }]),
        }
    }

    /// Connections the apiserver opened to this replica so far (distinct peers of the audit
    /// records).
    fn connections(&self) -> usize {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|r| r["peer"].as_str().map(str::to_owned))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    }

    /// Reviews answered so far (one audit record each).
    fn answered(&self) -> usize {
        std::fs::read_to_string(&self.audit)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    fn terminate(&self) {
        let pid = self.process.pid().expect("running").to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM {pid}");
    }

    fn running(&mut self) -> bool {
        self.process.check_running().is_ok()
    }
}

fn webhook_resource(kind: &str) -> ApiResource {
    ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

/// Registers `deploy/webhook/webhooks.yaml` for `ns`, calling the Service, and waits until
/// both webhooks answer through it.
async fn register(client: &kube::Client, ns: &str, ca_pem: &str) {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    for mut cfg in configurations(ns, "", "") {
        let kind = cfg["kind"].as_str().unwrap().to_owned();
        for wh in cfg["webhooks"].as_array_mut().unwrap() {
            let url = wh["clientConfig"]["url"].as_str().unwrap().to_owned();
            wh["clientConfig"] = json!({
                "service": {"name": SERVICE, "namespace": ns, "path": url, "port": 443},
                "caBundle": ca,
            });
        }
        let obj: DynamicObject = serde_json::from_value(cfg).unwrap();
        let name = obj.metadata.name.clone().unwrap();
        Api::<DynamicObject>::all_with(client.clone(), &webhook_resource(&kind))
            .patch(
                &name,
                &PatchParams::apply("kim-tests").force(),
                &Patch::Apply(&obj),
            )
            .await
            .unwrap();
    }
    // Enforced: a dry-run create is defaulted (the mutating webhook) and an invalid one is
    // denied (the validating webhook).
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &runtime_resource());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let valid: DynamicObject = serde_json::from_value(valid_runtime("probe", ns)).unwrap();
    let mut invalid_value = valid_runtime("probe", ns);
    invalid_value["spec"]["shoot"]["region"] = json!("nowhere");
    let invalid: DynamicObject = serde_json::from_value(invalid_value).unwrap();
    let started = Instant::now();
    loop {
        let defaulted = api.create(&dry, &valid).await.map(|o| {
            o.data
                .pointer("/spec/shoot/kubernetes/version")
                .cloned()
                .unwrap_or(Value::Null)
        });
        let denied = api
            .create(&dry, &invalid)
            .await
            .err()
            .map(|e| e.to_string());
        let mutating = matches!(&defaulted, Ok(Value::String(_)));
        let validating = denied
            .as_deref()
            .is_some_and(|e| e.contains("denied the request"));
        if mutating && validating {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "webhooks not enforced through the Service after 30 s: defaulted {defaulted:?}, invalid {denied:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn unregister(client: &kube::Client, ns: &str) {
    for cfg in configurations(ns, "", "") {
        let kind = cfg["kind"].as_str().unwrap();
        let name = cfg["metadata"]["name"].as_str().unwrap();
        Api::<DynamicObject>::all_with(client.clone(), &webhook_resource(kind))
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
}

/// The HTTP status of `GET /readyz` on the admin port, or why there is none.
pub(super) async fn readyz(port: u16) -> Result<u16, String> {
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())?;
        s.write_all(b"GET /readyz HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out);
        text.split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("not HTTP: {text}"))
    };
    // A kubelet's probe times out after a second by default.
    tokio::time::timeout(Duration::from_secs(1), probe)
        .await
        .unwrap_or_else(|_| Err("timed out".into()))
}

/// This machine's first IPv4 address that an EndpointSlice accepts (not loopback, not
/// link-local).
pub(super) fn host_address() -> IpAddr {
    let out = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .expect("`hostname -I` runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .filter_map(|a| a.parse::<Ipv4Addr>().ok())
        .find(|a| !a.is_loopback() && !a.is_link_local() && !a.is_unspecified())
        .map(IpAddr::V4)
        .unwrap_or_else(|| {
            panic!(
                "this test needs a non-loopback IPv4 address (EndpointSlices refuse loopback ones); `hostname -I` printed {text:?}"
            )
        })
}

/// The kim-webhook binary: `KIM_WEBHOOK_BIN`, or the one built next to this test.
pub(super) fn webhook_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("KIM_WEBHOOK_BIN") {
        return PathBuf::from(p);
    }
    // This test runs from target/<profile>/deps/.
    let bin = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.join("kim-webhook")))
        .unwrap_or_default();
    assert!(
        bin.exists(),
        "{} is missing: build it first (`cargo build -p kim-webhook`, part of `make test`) or set KIM_WEBHOOK_BIN",
        bin.display()
    );
    bin
}
