//! End-to-end tests of the kubeconfig reconcilers against the real control plane: the real
//! gardener-apiserver issues admin kubeconfigs (client certificates signed by the shoot's
//! client CA), a second kube-apiserver plays the shoot cluster.
//!
//! Every test runs its own controller on its own KCP namespace. All log output of the test
//! binary is captured; tests check that no kubeconfig, token or key ever reaches it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kim_controller::cli::run::RunArgs;
use kim_controller::runner::Process;
use kim_shared::api::GardenerCluster;
use kim_shared::gardener::Shoot;
use kim_tests::fixtures;
use kim_tests::testenv::{TestEnv, access};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

const FORCE: &str = "operator.kyma-project.io/force-kubeconfig-rotation";
const LAST_SYNC: &str = "operator.kyma-project.io/last-sync";

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

/// Installs (once per binary) a subscriber that writes every log line into a buffer.
fn logs() -> &'static Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_env_filter("debug,kube_client=info,hyper=info,tower=info,rustls=info,h2=info")
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        captured
    })
}

fn log_text() -> String {
    String::from_utf8_lossy(&logs().0.lock().unwrap()).into_owned()
}

/// Fails when any secret part of `kubeconfig` (key, certificate, token) is in the logs.
fn assert_not_logged(kubeconfig: &str) {
    let text = log_text();
    for line in kubeconfig.lines() {
        let Some((field, value)) = line.trim().split_once(':') else {
            continue;
        };
        let value = value.trim();
        let secret_field = ["client-key-data", "client-certificate-data", "token"]
            .iter()
            .any(|f| field.trim().trim_start_matches("- ") == *f);
        if secret_field && value.len() > 16 {
            assert!(
                !text.contains(value),
                "the logs contain the {field} of a kubeconfig"
            );
            assert!(
                !text.contains(&value[..32.min(value.len())]),
                "the logs contain part of the {field} of a kubeconfig"
            );
        }
    }
    assert!(
        !text.contains("PRIVATE KEY"),
        "the logs contain a private key"
    );
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
    shutdown: kim_controller::Shutdown,
    task: tokio::task::JoinHandle<()>,
    metrics: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl Controller {
    async fn start(env: &TestEnv, ns: &str, extra: &[&str]) -> Result<Self> {
        logs();
        let dir = tempfile::tempdir()?;
        let paths = env.write_kubeconfigs(dir.path())?;
        let mut argv: Vec<String> = vec![
            "kim-controller".into(),
            format!("--kcp-kubeconfig-path={}", paths[0].display()),
            format!("--gardener-kubeconfig-path={}", paths[1].display()),
            format!("--gardener-project-name={}", fixtures::PROJECT_NAME),
            format!(
                "--converter-config-filepath={}",
                kim_tests::testenv::repo_root()
                    .join("deploy/config/converter_config.json")
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
        let shutdown = kim_controller::Shutdown::new();
        let process = Process::start(args, shutdown.clone()).await?;
        let metrics = process.metrics_addr;
        let task = tokio::spawn(async move {
            if let Err(e) = process.run().await {
                tracing::warn!("controller stopped: {e}");
            }
        });
        Ok(Self {
            shutdown,
            task,
            metrics,
            _dir: dir,
        })
    }

    async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(30), self.task).await;
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

fn unique(prefix: &str) -> String {
    format!("{prefix}{:04x}", rand::random::<u16>())
}

async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
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
// GardenerCluster

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gardener_cluster_gets_a_working_secret_that_is_rotated_in_time() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-rot").await?;
    let shoot = ready_shoot(env).await?;
    // 600 s is the shortest validity Gardener issues; ratio 0.01 gives a 6 s rotation period.
    let ctl = Controller::start(
        env,
        &ns,
        &[
            "--kubeconfig-expiration-time=600s",
            "--minimal-rotation-time=0.01",
        ],
    )
    .await?;
    let kcp = env.kcp_client().await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let id = unique("rt-");
    gcs.create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;

    let first = wait_for_secret(&secrets, &format!("kubeconfig-{id}")).await?;
    let labels = first.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("operator.kyma-project.io/managed-by")
            .map(String::as_str),
        Some("infrastructure-manager")
    );
    assert_eq!(
        labels.get("operator.kyma-project.io/cluster-name"),
        Some(&id)
    );
    assert_eq!(labels.get("kyma-project.io/shoot-name"), Some(&shoot));
    let owner = &first.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("GardenerCluster", id.as_str())
    );
    let first_sync = last_sync(&first).context("last-sync annotation")?;
    assert!(
        first_sync.parse::<jiff::Timestamp>().is_ok(),
        "last-sync {first_sync} is not RFC 3339"
    );
    let first_kc = kubeconfig_of(&first).unwrap();
    assert!(
        lists_namespaces(&first_kc).await?,
        "the issued kubeconfig cannot list namespaces in the shoot"
    );
    let gc = gcs.get(&id).await?;
    assert!(
        gc.metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f.contains("infrastructure-manager"))
    );
    eventually("status Ready", Duration::from_secs(10), || async {
        Ok(reason(&gcs, &id).await?.filter(|(s, _)| s == "Ready"))
    })
    .await?;

    // Time-based rotation: a new certificate and a new last-sync; the old one still works.
    let rotated = eventually("rotation", Duration::from_secs(30), || async {
        let s = secrets.get(&format!("kubeconfig-{id}")).await?;
        Ok((last_sync(&s).as_ref() != Some(&first_sync)).then_some(s))
    })
    .await?;
    let rotated_kc = kubeconfig_of(&rotated).context("rotated Secret lost its key")?;
    assert_ne!(
        client_cert(&rotated_kc),
        client_cert(&first_kc),
        "rotation must issue a new certificate"
    );
    assert!(lists_namespaces(&rotated_kc).await?);
    assert!(
        lists_namespaces(&first_kc).await?,
        "the old kubeconfig must keep working until it expires"
    );
    let (state, why) = reason(&gcs, &id).await?.context("status")?;
    assert_eq!(
        (state.as_str(), why.as_str()),
        ("Ready", "KubeconfigSecretRotated")
    );

    let metrics = ctl.metrics_text().await?;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("infrastructure_manager_im_kubeconfig_expiration{")
                && l.contains(&format!("runtimeId=\"{id}\""))
                && l.contains("expirationDuration=\"600\"")
        ),
        "no expiration series for {id}:\n{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l
            .starts_with("infrastructure_manager_im_gardener_clusters_state{")
            && l.contains(&format!("runtimeId=\"{id}\""))
            && l.contains("state=\"Ready\"")),
        "no state series for {id}"
    );
    ctl.stop().await;
    assert!(
        log_text().contains("kubeconfig written"),
        "the log capture saw no controller lines"
    );
    assert_not_logged(&first_kc);
    assert_not_logged(&rotated_kc);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_rotation_replaces_the_kubeconfig_in_one_step_and_stays_rotated() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-force").await?;
    let shoot = ready_shoot(env).await?;
    let ctl = Controller::start(env, &ns, &["--kubeconfig-expiration-time=1h"]).await?;
    let kcp = env.kcp_client().await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let id = unique("rt-");
    let secret_name = format!("kubeconfig-{id}");
    gcs.create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;
    let before = wait_for_secret(&secrets, &secret_name).await?;
    let before_kc = kubeconfig_of(&before).unwrap();
    eventually("status Created", Duration::from_secs(10), || async {
        Ok(reason(&gcs, &id)
            .await?
            .filter(|(_, r)| r == "KubeconfigSecretCreated"))
    })
    .await?;

    // Not due: other reconciles (a label change) must not ask Gardener.
    let calls = ctl.adminkubeconfig_calls().await?;
    assert!(
        calls >= 1,
        "the first kubeconfig must have been issued through the guarded client"
    );
    for i in 0..3 {
        let patch = json!({"metadata": {"labels": {"test/poke": i.to_string()}}});
        gcs.patch(&id, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        ctl.adminkubeconfig_calls().await?,
        calls,
        "reconciles without a due rotation called Gardener"
    );

    // Watch the Secret: every version must carry the key.
    let seen: Arc<Mutex<Vec<bool>>> = Arc::default();
    let watch = {
        let seen = seen.clone();
        let stream = watcher(
            secrets.clone(),
            watcher::Config::default().fields(&format!("metadata.name={secret_name}")),
        )
        .applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(s)) = stream.next().await {
                seen.lock()
                    .unwrap()
                    .push(kubeconfig_of(&s).is_some_and(|k| !k.is_empty()));
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    gcs.patch(
        &id,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"annotations": {FORCE: "true"}}})),
    )
    .await?;

    let after = eventually("forced rotation", Duration::from_secs(30), || async {
        let s = secrets.get(&secret_name).await?;
        Ok((kubeconfig_of(&s) != Some(before_kc.clone())).then_some(s))
    })
    .await?;
    let after_kc = kubeconfig_of(&after).unwrap();
    assert_ne!(client_cert(&after_kc), client_cert(&before_kc));
    assert!(lists_namespaces(&after_kc).await?);
    eventually(
        "annotation removed, reason Rotated",
        Duration::from_secs(15),
        || async {
            let gc = gcs.get(&id).await?;
            let gone = !gc
                .metadata
                .annotations
                .unwrap_or_default()
                .contains_key(FORCE);
            let r = reason(&gcs, &id).await?;
            Ok((gone
                && r.as_ref()
                    .is_some_and(|(s, r)| s == "Ready" && r == "KubeconfigSecretRotated"))
            .then_some(()))
        },
    )
    .await?;
    // Upstream reverted to KubeconfigSecretCreated right after: it must stay Rotated.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, why) = reason(&gcs, &id).await?.context("status")?;
    assert_eq!(why, "KubeconfigSecretRotated");
    assert_eq!(
        ctl.adminkubeconfig_calls().await?,
        calls + 1,
        "a forced rotation is exactly one Gardener call"
    );
    watch.abort();
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.len() >= 2,
        "the watcher saw {} versions of the Secret",
        seen.len()
    );
    assert!(
        seen.iter().all(|has_key| *has_key),
        "a version of the Secret lacked its key: {seen:?}"
    );

    // A deleted Secret comes back at once (the controller watches its Secrets), not only at
    // the next rotation an hour later.
    secrets
        .delete(&secret_name, &DeleteParams::default())
        .await?;
    let recreated = wait_for_secret(&secrets, &secret_name).await?;
    let recreated_kc = kubeconfig_of(&recreated).unwrap();
    assert!(lists_namespaces(&recreated_kc).await?);

    ctl.stop().await;
    assert_not_logged(&recreated_kc);
    let errors = error_lines();
    assert!(
        errors.is_empty(),
        "error-level log lines:\n{}",
        errors.join("\n")
    );
    assert_not_logged(&before_kc);
    assert_not_logged(&after_kc);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_is_deleted_when_its_gardener_cluster_went_away_while_the_controller_was_down()
-> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-del").await?;
    let shoot = ready_shoot(env).await?;
    let kcp = env.kcp_client().await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let id = unique("rt-");
    let secret_name = format!("kubeconfig-{id}");

    let ctl = Controller::start(env, &ns, &[]).await?;
    gcs.create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;
    let secret = wait_for_secret(&secrets, &secret_name).await?;
    ctl.stop().await;

    gcs.delete(&id, &DeleteParams::default()).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        secrets.get_opt(&secret_name).await?.is_some(),
        "nothing may delete the Secret while the controller is down"
    );
    assert!(
        gcs.get_opt(&id).await?.is_some(),
        "the finalizer must hold the GardenerCluster"
    );

    let ctl = Controller::start(env, &ns, &[]).await?;
    eventually(
        "Secret and GardenerCluster gone",
        Duration::from_secs(30),
        || async {
            let gone =
                secrets.get_opt(&secret_name).await?.is_none() && gcs.get_opt(&id).await?.is_none();
            Ok(gone.then_some(()))
        },
    )
    .await?;
    ctl.stop().await;
    assert_not_logged(&kubeconfig_of(&secret).unwrap());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// RuntimeAccess (RBAC kubeconfigs)

async fn whoami(client: kube::Client) -> Result<String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let review: SelfSubjectReview = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview", "metadata": {}
    }))?;
    let answer = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default())
}

fn forbidden<T>(r: std::result::Result<T, kube::Error>) -> bool {
    matches!(r, Err(kube::Error::Api(s)) if s.code == 403)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_access_for_a_role_can_get_pods_in_one_namespace_and_nothing_else() -> Result<()> {
    use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use kim_shared::api::runtime_access::RuntimeAccess;

    let env = TestEnv::shared().await?;
    let ns = env.namespace("kc-rbac").await?;
    let shoot = ready_shoot(env).await?;
    let ctl = Controller::start(env, &ns, &[]).await?;
    let kcp = env.kcp_client().await?;
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let id = unique("rt-");
    gcs.create(&PostParams::default(), &gardener_cluster(&ns, &id, &shoot))
        .await?;
    let admin_secret = wait_for_secret(&secrets, &format!("kubeconfig-{id}")).await?;
    let admin_kc = kubeconfig_of(&admin_secret).unwrap();
    // Audit identity of the admin kubeconfig: Gardener's admin user.
    let admin_user = whoami(access::client_from_yaml("admin", &admin_kc).await?).await?;
    assert!(
        admin_user.starts_with("gardener.cloud:admin:"),
        "admin kubeconfig authenticates as {admin_user}"
    );

    // In the shoot: a namespace with a Pod and a Secret, and another namespace with a Pod.
    let shoot_admin = env.shoot_client().await?;
    let apps = env.shoot_namespace("apps").await?;
    let other = env.shoot_namespace("other").await?;
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p1"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))?;
    for n in [&apps, &other] {
        Api::<Pod>::namespaced(shoot_admin.clone(), n)
            .create(&PostParams::default(), &pod)
            .await?;
    }
    let shoot_secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s1"}, "stringData": {"k": "v"}}))?;
    Api::<Secret>::namespaced(shoot_admin.clone(), &apps)
        .create(&PostParams::default(), &shoot_secret)
        .await?;

    let requests: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let ra: RuntimeAccess = serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "RuntimeAccess",
        "metadata": {"name": "pod-reader", "namespace": ns},
        "spec": {
            "runtimeId": id,
            "serviceAccount": {"name": "pod-reader", "namespace": apps},
            "role": {"namespace": apps, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
            "tokenExpirationSeconds": 600
        }
    }))?;
    requests.create(&PostParams::default(), &ra).await?;
    let ready = eventually("RuntimeAccess Ready", Duration::from_secs(90), || async {
        let ra = requests.get("pod-reader").await?;
        Ok(ra
            .status
            .clone()
            .filter(|s| s.state.as_deref() == Some("Ready")))
    })
    .await?;
    let secret_ref = ready.secret_ref.clone().context("status.secretRef")?;
    assert_eq!(
        ready.identity.as_deref(),
        Some(format!("system:serviceaccount:{apps}:pod-reader").as_str())
    );
    assert!(ready.token_expiration_timestamp.is_some());
    let kc_secret = secrets.get(&secret_ref.name).await?;
    let token_kc = String::from_utf8(
        kc_secret.data.unwrap_or_default()[&secret_ref.key]
            .0
            .clone(),
    )?;
    assert!(
        !token_kc.contains("client-key-data"),
        "the RBAC kubeconfig must not carry the admin key"
    );
    let client = access::client_from_yaml("rbac", &token_kc).await?;
    assert_eq!(
        whoami(client.clone()).await?,
        format!("system:serviceaccount:{apps}:pod-reader")
    );

    // Allowed: get pods in `apps` (the RBAC cache may take a moment).
    let pods_apps: Api<Pod> = Api::namespaced(client.clone(), &apps);
    eventually("get pod allowed", Duration::from_secs(15), || async {
        Ok(pods_apps.get("p1").await.ok().map(|_| ()))
    })
    .await?;
    // A real 403 for everything else.
    assert!(
        forbidden(
            Api::<Secret>::namespaced(client.clone(), &apps)
                .get("s1")
                .await
        ),
        "secrets must be forbidden"
    );
    assert!(
        forbidden(
            Api::<Pod>::namespaced(client.clone(), &other)
                .get("p1")
                .await
        ),
        "other namespaces must be forbidden"
    );
    assert!(
        forbidden(pods_apps.list(&ListParams::default()).await),
        "list was not granted"
    );

    // Deleting the request removes ServiceAccount, Role, binding and Secret.
    let rbac_name = format!("kim-access:{ns}:pod-reader");
    let created = Api::<ServiceAccount>::namespaced(shoot_admin.clone(), &apps)
        .get_opt("pod-reader")
        .await?
        .is_some()
        && Api::<Role>::namespaced(shoot_admin.clone(), &apps)
            .get_opt(&rbac_name)
            .await?
            .is_some()
        && Api::<RoleBinding>::namespaced(shoot_admin.clone(), &apps)
            .get_opt(&rbac_name)
            .await?
            .is_some();
    assert!(
        created,
        "ServiceAccount, Role and RoleBinding must exist before the deletion"
    );
    requests
        .delete("pod-reader", &DeleteParams::default())
        .await?;
    eventually("everything removed", Duration::from_secs(30), || async {
        let gone = requests.get_opt("pod-reader").await?.is_none()
            && secrets.get_opt(&secret_ref.name).await?.is_none()
            && Api::<ServiceAccount>::namespaced(shoot_admin.clone(), &apps)
                .get_opt("pod-reader")
                .await?
                .is_none()
            && Api::<Role>::namespaced(shoot_admin.clone(), &apps)
                .get_opt(&rbac_name)
                .await?
                .is_none()
            && Api::<RoleBinding>::namespaced(shoot_admin.clone(), &apps)
                .get_opt(&rbac_name)
                .await?
                .is_none();
        Ok(gone.then_some(()))
    })
    .await?;
    ctl.stop().await;
    assert_not_logged(&token_kc);
    assert_not_logged(&admin_kc);
    Ok(())
}
