//! End-to-end tests of the kubeconfig reconcilers against the real control plane: the real
//! gardener-apiserver issues admin kubeconfigs (client certificates signed by the shoot's
//! client CA), a second kube-apiserver plays the shoot cluster.
//!
//! Every test runs its own controller on its own KCP namespace. All log output of these
//! controllers is captured (each runs on a runtime of its own whose threads log into one
//! buffer); tests check that no kubeconfig, token or key ever reaches it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kim_controller::cli::run::RunArgs;
use kim_shared::api::GardenerCluster;
use kim_shared::gardener::Shoot;
use kim_tests::controller::KillableController;
use kim_tests::fixtures;
use kim_tests::testenv::{TestEnv, access};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

mod gardener_cluster;
mod runtime_access;

const FORCE: &str = "operator.kyma-project.io/force-kubeconfig-rotation";
const LAST_SYNC: &str = "operator.kyma-project.io/last-sync";
const VALID_UNTIL: &str = "infrastructuremanager.kyma-project.io/kubeconfig-valid-until";
const FORCE_SERVED: &str = "infrastructuremanager.kyma-project.io/forced-rotation-served";

// ---------------------------------------------------------------------------------------------
// Captured logs

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log lines of the controllers of these tests.
fn logs() -> &'static Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(Captured::default)
}

/// The subscriber the controllers of these tests log to: every line into [`logs`].
fn log_dispatch() -> tracing::Dispatch {
    static DISPATCH: OnceLock<tracing::Dispatch> = OnceLock::new();
    DISPATCH
        .get_or_init(|| {
            let writer = logs().clone();
            tracing::Dispatch::new(
                tracing_subscriber::fmt()
                    .with_env_filter(
                        "debug,kube_client=info,hyper=info,tower=info,rustls=info,h2=info",
                    )
                    .with_ansi(false)
                    .with_writer(move || writer.clone())
                    .finish(),
            )
        })
        .clone()
}

fn log_text() -> String {
    String::from_utf8_lossy(&logs().0.lock().unwrap()).into_owned()
}

/// Fails when any secret part of `kubeconfig` (key, certificate, token) is in the logs.
fn assert_not_logged(kubeconfig: &str) {
    assert_not_in(&log_text(), kubeconfig, "the logs");
}

/// Asserts that no 24-character piece of `encoded` (the base64 of a credential), wherever it
/// starts, is in `shown`.
fn assert_no_piece(shown: &str, encoded: &str, what: &str) {
    for start in (0..encoded.len().saturating_sub(24)).step_by(8) {
        assert!(
            !shown.contains(&encoded[start..start + 24]),
            "a piece of {what} is shown"
        );
    }
}

/// The name of the admission webhook [`echo_refusal`] answers as.
const ECHO_WEBHOOK: &str = "echo.policy.example";

/// A 403 as an admission webhook or policy engine on Secrets may answer: quoting what it
/// refused (`quote` of the request: its body, or the stored object a webhook gets as
/// `oldObject`).
fn echo_refusal(
    quote: impl Fn(&kim_tests::faultproxy::ProxyRequest) -> String + Send + Sync + 'static,
) -> kim_tests::faultproxy::ApiFault {
    use kim_tests::faultproxy::{ApiFault, ProxyResponse, Responder};
    ApiFault::Respond(Responder(Arc::new(move |req| {
        ProxyResponse {
        status: 403,
        body: serde_json::to_vec(&json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "Forbidden", "code": 403,
            "message": format!("admission webhook \"{ECHO_WEBHOOK}\" denied the request: {}", quote(req)),
        }))
        .unwrap(),
    }
    })))
}

/// [`echo_refusal`] of each request's body, and the bodies it refused.
fn echo_bodies() -> (Arc<Mutex<Vec<Vec<u8>>>>, kim_tests::faultproxy::ApiFault) {
    let quoted: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let sent = quoted.clone();
    let fault = echo_refusal(move |req| {
        sent.lock().unwrap().push(req.body.to_vec());
        String::from_utf8_lossy(&req.body).into_owned()
    });
    (quoted, fault)
}

/// The first value of `secret`'s data as the API carries it (base64).
fn encoded_data(secret: &Secret) -> Option<String> {
    use base64::Engine as _;
    let value = secret.data.as_ref()?.values().next()?;
    Some(base64::engine::general_purpose::STANDARD.encode(&value.0))
}

/// Asserts that `text` (shown in `place`) holds no credential of `kubeconfig`, whole or in part.
fn assert_not_in(text: &str, kubeconfig: &str, place: &str) {
    let mut checked = 0;
    for line in kubeconfig.lines() {
        let Some((field, value)) = line.trim().split_once(':') else {
            continue;
        };
        let value = value.trim();
        let secret_field = ["client-key-data", "client-certificate-data", "token"]
            .iter()
            .any(|f| field.trim().trim_start_matches("- ") == *f);
        if secret_field && value.len() > 16 {
            checked += 1;
            assert!(
                !text.contains(value),
                "{place} contain the {field} of a kubeconfig"
            );
            assert!(
                !text.contains(&value[..32.min(value.len())]),
                "{place} contain part of the {field} of a kubeconfig"
            );
        }
    }
    assert!(
        !text.contains("PRIVATE KEY"),
        "{place} contain a private key"
    );
    assert!(
        checked > 0,
        "the kubeconfig compared with {place} holds no credential field"
    );
}

/// A finalizer patch that finds its object already gone is harmless (a stale cache entry ran
/// the cleanup twice) and must not be logged as a failed reconcile.
fn assert_no_finalizer_warnings() {
    let noisy: Vec<String> = log_text()
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("failed to remove finalizer"))
        .map(str::to_owned)
        .collect();
    assert!(noisy.is_empty(), "finalizer warnings: {noisy:#?}");
}

fn error_lines() -> Vec<String> {
    log_text()
        .lines()
        .filter(|l| l.contains(" ERROR "))
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Controller in this process

struct Controller {
    inner: KillableController,
    metrics: std::net::SocketAddr,
}

impl Controller {
    async fn start(env: &TestEnv, ns: &str, extra: &[&str]) -> Result<Self> {
        Self::start_via(env, ns, extra, None).await
    }

    /// [`Controller::start`] reaching the KCP through `kcp` (a fault proxy's access) instead.
    async fn start_via(
        env: &TestEnv,
        ns: &str,
        extra: &[&str],
        kcp: Option<kim_tests::testenv::ClusterAccess>,
    ) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut paths = env.write_kubeconfigs(dir.path())?;
        if let Some(kcp) = kcp {
            paths[0] = dir.path().join("kcp-via.kubeconfig");
            access::write_private(&paths[0], &kcp.admin_kubeconfig())?;
        }
        let mut argv: Vec<String> = vec![
            "kim-controller".into(),
            format!("--kcp-kubeconfig-path={}", paths[0].display()),
            format!("--gardener-kubeconfig-path={}", paths[1].display()),
            format!("--gardener-project-name={}", fixtures::PROJECT_NAME),
            format!(
                "--converter-config-filepath={}",
                fixtures::write_converter_config(
                    &dir.path().join("config"),
                    fixtures::PROJECT_NAME
                )?
                .display()
            ),
            format!("--namespace={ns}"),
            "--metrics-bind-address=127.0.0.1:0".into(),
            "--health-probe-bind-address=127.0.0.1:0".into(),
            "--gardener-ratelimiter-qps=100".into(),
            "--gardener-ratelimiter-burst=100".into(),
            "--gardener-request-timeout=30s".into(),
        ];
        argv.extend(extra.iter().map(|s| s.to_string()));
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        let args = Cli::try_parse_from(argv)?.run;
        let (inner, _, metrics) =
            KillableController::start_with_args(args, dir, Some(log_dispatch())).await?;
        Ok(Self { inner, metrics })
    }

    async fn stop(self) {
        self.inner.stop().await;
    }

    async fn metrics_text(&self) -> Result<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(self.metrics).await?;
        stream
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .await?;
        let mut out = String::new();
        stream.read_to_string(&mut out).await?;
        Ok(out)
    }

    /// Sum of the samples of one metric whose line contains every one of `labels`.
    async fn metric_sum(&self, name: &str, labels: &[&str]) -> Result<u64> {
        let text = self.metrics_text().await?;
        Ok(text
            .lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                    && labels.iter().all(|want| l.contains(want))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum())
    }

    /// Requests the RuntimeAccess reconciler sent to shoot API servers, by `method="..."`.
    async fn shoot_requests(&self, labels: &[&str]) -> Result<u64> {
        self.metric_sum(
            "infrastructure_manager_im_runtime_access_shoot_requests_total",
            labels,
        )
        .await
    }

    /// RuntimeAccess reconciles so far (any result).
    async fn access_reconciles(&self) -> Result<u64> {
        self.metric_sum(
            "infrastructure_manager_im_reconciles_total",
            &["controller=\"access\""],
        )
        .await
    }

    /// RuntimeAccess reconciles so far with `result` (`error`, `waiting`, ...).
    async fn access_reconciles_with(&self, result: &str) -> Result<u64> {
        self.metric_sum(
            "infrastructure_manager_im_reconciles_total",
            &["controller=\"access\"", &format!("result=\"{result}\"")],
        )
        .await
    }

    /// Waits until the RuntimeAccess reconciles settle ([`Self::access_settled`]), then asserts
    /// that none failed since the count `failed_before` (`access_reconciles_with("error")`).
    async fn assert_no_access_failure_since(&self, failed_before: u64, what: &str) -> Result<()> {
        self.access_settled().await?;
        assert_eq!(
            self.access_reconciles_with("error").await?,
            failed_before,
            "{what}"
        );
        Ok(())
    }

    /// Waits until no RuntimeAccess reconcile ran for 1.5 s; returns the reconcile count.
    async fn access_settled(&self) -> Result<u64> {
        let mut last = self.access_reconciles().await?;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let now = self.access_reconciles().await?;
            if now == last {
                return Ok(now);
            }
            last = now;
        }
        bail!("RuntimeAccess reconciles did not settle within 30 s")
    }

    /// Successful adminkubeconfig calls so far (`POST` answered 201).
    async fn adminkubeconfig_calls(&self) -> Result<u64> {
        let text = self.metrics_text().await?;
        Ok(text
            .lines()
            .filter(|l| {
                l.starts_with("infrastructure_manager_im_gardener_requests_total{")
                    && l.contains("method=\"POST\"")
                    && l.contains("code=\"201\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum())
    }
}

// ---------------------------------------------------------------------------------------------
// Fixtures

/// `prefix` and four hex digits, unique in the process: the tests share one environment, and
/// 16 random bits per name once gave two tests the same Shoot name in a full run.
fn unique(prefix: &str) -> String {
    use std::sync::LazyLock;
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: LazyLock<AtomicU16> = LazyLock::new(|| AtomicU16::new(rand::random()));
    format!("{prefix}{:04x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            // "Try later" and requests without an answer are "not yet" (`try_later`).
            Err(e) if kim_tests::controller::try_later(&e) => {}
            Err(e) => return Err(e),
        }
        if tokio::time::Instant::now() > deadline {
            bail!("{what}: not within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A Shoot the simulator has reconciled (so `adminkubeconfig` works for it).
async fn ready_shoot(env: &TestEnv) -> Result<String> {
    let api: Api<Shoot> = Api::namespaced(env.garden_client().await?, fixtures::PROJECT_NAMESPACE);
    let name = unique("kc");
    let shoot: Shoot = serde_json::from_value(fixtures::shoot(&name, "aws")?)?;
    api.create(&PostParams::default(), &shoot).await?;
    eventually("shoot Succeeded", Duration::from_secs(120), || async {
        let s = api.get(&name).await?;
        let done = s
            .status
            .as_ref()
            .and_then(|st| st.last_operation.as_ref())
            .is_some_and(|op| op.state == "Succeeded" && op.progress == 100);
        Ok(done.then_some(()))
    })
    .await?;
    Ok(name)
}

fn gardener_cluster(ns: &str, runtime_id: &str, shoot: &str) -> GardenerCluster {
    serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "GardenerCluster",
        "metadata": {
            "name": runtime_id,
            "namespace": ns,
            "labels": {
                "kyma-project.io/runtime-id": runtime_id,
                "kyma-project.io/shoot-name": shoot,
                "kyma-project.io/instance-id": "instance-1",
            }
        },
        "spec": {
            "shoot": {"name": shoot},
            "kubeconfig": {"secret": {"name": format!("kubeconfig-{runtime_id}"), "namespace": ns, "key": "config"}}
        }
    }))
    .expect("valid GardenerCluster")
}

fn kubeconfig_of(secret: &Secret) -> Option<String> {
    let bytes = secret.data.as_ref()?.get("config")?;
    String::from_utf8(bytes.0.clone()).ok()
}

fn last_sync(secret: &Secret) -> Option<String> {
    secret
        .metadata
        .annotations
        .as_ref()?
        .get(LAST_SYNC)
        .cloned()
}

fn client_cert(kubeconfig: &str) -> String {
    kubeconfig
        .lines()
        .find(|l| l.trim_start().starts_with("client-certificate-data:"))
        .unwrap_or_default()
        .to_owned()
}

/// Annotates the GardenerCluster `name` for a forced rotation; returns it as stored.
async fn ask_forced_rotation(gcs: &Api<GardenerCluster>, name: &str) -> Result<GardenerCluster> {
    Ok(gcs
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {FORCE: "true"}}})),
        )
        .await?)
}

async fn wait_for_secret(secrets: &Api<Secret>, name: &str) -> Result<Secret> {
    eventually(
        "kubeconfig Secret with key config",
        Duration::from_secs(60),
        || async {
            Ok(secrets
                .get_opt(name)
                .await?
                .filter(|s| kubeconfig_of(s).is_some()))
        },
    )
    .await
}

async fn reason(gcs: &Api<GardenerCluster>, name: &str) -> Result<Option<(String, String)>> {
    let gc = gcs.get(name).await?;
    Ok(gc.status.and_then(|s| {
        let c = s
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "KubeconfigManagement")?;
        Some((s.state.unwrap_or_default(), c.reason))
    }))
}

async fn lists_namespaces(kubeconfig: &str) -> Result<bool> {
    let client = access::client_from_yaml("issued", kubeconfig).await?;
    let nss = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await?;
    Ok(nss
        .items
        .iter()
        .any(|n| n.metadata.name.as_deref() == Some("kube-system")))
}

// ---------------------------------------------------------------------------------------------
// Set-up shared by GardenerCluster and RuntimeAccess tests

/// What most tests start from: a namespace of their own with a controller for it, and in it
/// a runtime whose admin kubeconfig Secret exists.
struct Setup {
    env: &'static TestEnv,
    ns: String,
    ctl: Controller,
    /// The runtime's ID.
    id: String,
    /// Its admin kubeconfig.
    admin: String,
    kcp: kube::Client,
}

/// [`Setup`] in a new namespace named after `prefix`, the controller started with `extra`.
async fn set_up(prefix: &str, extra: &[&str]) -> Result<Setup> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace(prefix).await?;
    let ctl = Controller::start(env, &ns, extra).await?;
    let (id, admin) = runtime_with_admin_kubeconfig(env, &ns).await?;
    let kcp = env.kcp_client().await?;
    Ok(Setup {
        env,
        ns,
        ctl,
        id,
        admin,
        kcp,
    })
}

/// A runtime whose admin kubeconfig Secret exists: a ready Shoot and its GardenerCluster.
async fn runtime_with_admin_kubeconfig(env: &TestEnv, ns: &str) -> Result<(String, String)> {
    let shoot = ready_shoot(env).await?;
    let kcp = env.kcp_client().await?;
    let id = unique("rt-");
    Api::<GardenerCluster>::namespaced(kcp.clone(), ns)
        .create(&PostParams::default(), &gardener_cluster(ns, &id, &shoot))
        .await?;
    let secret = wait_for_secret(&Api::namespaced(kcp, ns), &format!("kubeconfig-{id}")).await?;
    Ok((id, kubeconfig_of(&secret).context("admin kubeconfig")?))
}

async fn exists<K>(api: &Api<K>, name: &str) -> Result<bool>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api.get_opt(name).await?.is_some())
}

/// A Secret of the KCP namespace that is nobody's kubeconfig (as `gardener-credentials` or the
/// webhook's certificate Secret).
async fn victim_secret(secrets: &Api<Secret>, name: &str) -> Result<Secret> {
    let victim: Secret = serde_json::from_value(json!({
        "metadata": {"name": name},
        "data": {"kubeconfig": "Y3JlZGVudGlhbHM=", "config": "Y3JlZGVudGlhbHM="},
    }))?;
    Ok(secrets.create(&PostParams::default(), &victim).await?)
}

/// The victim is as it was: same data, no owner, not deleted.
async fn assert_untouched(secrets: &Api<Secret>, before: &Secret) -> Result<()> {
    let name = before.metadata.name.clone().context("name")?;
    let now = secrets
        .get_opt(&name)
        .await?
        .with_context(|| format!("Secret {name} was deleted"))?;
    assert_eq!(now.metadata.uid, before.metadata.uid, "{name} was replaced");
    assert_eq!(now.data, before.data, "{name}: data changed");
    assert_eq!(
        now.metadata.owner_references, before.metadata.owner_references,
        "{name}: owners changed"
    );
    assert_eq!(
        now.metadata.resource_version, before.metadata.resource_version,
        "{name} was written"
    );
    Ok(())
}
