//! Set-up of the webhook end-to-end tests: one KCP-only control plane per test process, and per
//! test a namespace, in-process webhook replica(s) with certificate rotation against the real
//! apiserver, and the webhook configurations of `deploy/webhook/webhooks.yaml` pointed at them
//! and scoped to that namespace.
// Test set-up: a failure panics the test that called it, naming what failed.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::testenv::{TestEnv, TestEnvOptions, repo_root};
use kim_certs::{
    CertResolver, CertRotator, RotationConfig, RotationPolicy, ServingNames, SyncOutcome,
};
use kim_shared::config::{ConfigPaths, KimConfig};
use kim_webhook::audit::AuditSink;
use kim_webhook::request::AdmissionContext;
use kim_webhook::server::{AppState, admission_router, serve_tls};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The KCP-only environment of the webhook tests of this process, started once; it outlives
/// the test that started it.
pub async fn env() -> &'static TestEnv {
    crate::watchdog::register();
    static ENV: tokio::sync::OnceCell<Result<&'static TestEnv, String>> =
        tokio::sync::OnceCell::const_new();
    let started = ENV
        .get_or_init(|| {
            TestEnv::start_for_process("kim-testenv-webhook", TestEnvOptions::kcp_only())
        })
        .await;
    match started {
        Ok(env) => env,
        Err(e) => panic!("the webhook end-to-end tests need the KCP test environment: {e}"),
    }
}

pub fn kim_config() -> KimConfig {
    KimConfig::load(&ConfigPaths::new(
        repo_root().join("deploy/config/converter_config.json"),
    ))
    .expect("deploy/config/converter_config.json loads")
}

/// How to run the webhook under test.
pub struct Options {
    /// Certificate lifetimes.
    pub policy: RotationPolicy,
    /// Independent replicas (own server, resolver and rotator; one Secret). The mutating
    /// configuration calls the first, the validating configuration the last.
    pub replicas: usize,
    /// Deletion protection flag.
    pub deletion_protection: bool,
    /// What RuntimeAccess objects may grant (`--access-allowed-role-refs`, ...).
    pub access_policy: kim_shared::access::AccessPolicy,
    /// Namespace to run in, created by the caller (e.g. to grant RBAC on [`names`] first);
    /// `None`: a new one.
    pub namespace: Option<String>,
    /// Client for the webhook's own KCP calls (certificate Secret, caBundle), e.g. one bound
    /// only to the deployed RBAC; `None`: the admin client.
    pub kcp_client: Option<kube::Client>,
    /// Where to keep every admission request body as it arrived (path, JSON), to compare
    /// with what the tests and benchmarks send.
    pub capture: Option<Captured>,
    /// `--audit-log-path`: the audit records also go to this file (meant for one replica).
    pub audit_file: Option<std::path::PathBuf>,
    /// `--client-ca-file`: clients must present a certificate of this CA (PEM).
    pub client_ca_pem: Option<String>,
    /// `--gardener-kubeconfig-path`: check Runtimes against the landscape's CloudProfiles,
    /// watched through the webhook's read-only Gardener client. Needs an environment with
    /// Gardener (`TestEnv::shared`); [`env`] has none.
    pub cloud_profiles: bool,
}

/// Admission request bodies the webhook received: (path, body).
pub type Captured = Arc<Mutex<Vec<(String, Value)>>>;

/// `app` keeping a copy of each request body in `captured` (the body passes on unchanged).
fn capturing(app: axum::Router, captured: Captured) -> axum::Router {
    app.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let captured = captured.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = axum::body::to_bytes(body, 8 << 20)
                    .await
                    .unwrap_or_default();
                if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
                    captured
                        .lock()
                        .unwrap()
                        .push((parts.uri.path().to_string(), v));
                }
                next.run(axum::extract::Request::from_parts(
                    parts,
                    axum::body::Body::from(bytes),
                ))
                .await
            }
        },
    ))
}

impl Default for Options {
    fn default() -> Self {
        Self {
            policy: RotationPolicy::from_lifetimes(
                Duration::from_secs(3600),
                Duration::from_secs(600),
                Duration::from_secs(1),
                Duration::from_secs(1),
            ),
            replicas: 1,
            deletion_protection: true,
            access_policy: kim_shared::access::AccessPolicy::default(),
            namespace: None,
            kcp_client: None,
            capture: None,
            audit_file: None,
            client_ca_pem: None,
            cloud_profiles: false,
        }
    }
}

/// The per-test names of the objects the webhook in namespace `ns` writes.
pub struct Names {
    /// Certificate Secret (in `ns`).
    pub secret: String,
    /// MutatingWebhookConfiguration.
    pub mutating: String,
    /// ValidatingWebhookConfiguration.
    pub validating: String,
}

/// The names [`Webhook::start`] uses in namespace `ns`.
pub fn names(ns: &str) -> Names {
    let cfgs = configurations(ns, "", "");
    Names {
        secret: format!("kim-webhook-cert-{ns}"),
        mutating: cfgs[0]["metadata"]["name"].as_str().unwrap().to_string(),
        validating: cfgs[1]["metadata"]["name"].as_str().unwrap().to_string(),
    }
}

/// One replica.
pub struct Replica {
    pub url: String,
    pub state: Arc<AppState>,
    pub outcomes: Arc<Mutex<Vec<SyncOutcome>>>,
    pub sync_errors: Arc<Mutex<Vec<String>>>,
}

/// The webhook under test.
pub struct Webhook {
    pub ns: String,
    pub mutating: String,
    pub validating: String,
    pub secret: String,
    pub replicas: Vec<Replica>,
    stop: watch::Sender<bool>,
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

/// Writes `cfgs` ([`configurations`]) with `client`.
pub async fn apply_configurations(client: &kube::Client, cfgs: &[Value]) {
    for cfg in cfgs {
        let ar = webhook_resource(cfg["kind"].as_str().unwrap());
        let obj: DynamicObject = serde_json::from_value(cfg.clone()).unwrap();
        Api::<DynamicObject>::all_with(client.clone(), &ar)
            .patch(
                obj.metadata.name.as_deref().unwrap(),
                &PatchParams::apply("kim-e2e").force(),
                &Patch::Apply(&obj),
            )
            .await
            .unwrap();
    }
}

/// The configurations of `deploy/webhook/webhooks.yaml`, renamed for `ns`, calling `urls`
/// (mutating, validating), matching only `ns`, without caBundle (the rotator writes it).
pub fn configurations(ns: &str, mutating_url: &str, validating_url: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo_root().join("deploy/webhook/webhooks.yaml")).unwrap();
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let mut v: Value = serde::Deserialize::deserialize(doc).unwrap();
        let kind = v["kind"].as_str().unwrap().to_string();
        let base = if kind.starts_with("Mutating") {
            mutating_url
        } else {
            validating_url
        };
        let name = format!("{}-{ns}", v["metadata"]["name"].as_str().unwrap());
        v["metadata"]["name"] = json!(name);
        for wh in v["webhooks"].as_array_mut().unwrap() {
            let path = wh["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap()
                .to_string();
            wh["clientConfig"] = json!({"url": format!("{base}{path}")});
            wh["namespaceSelector"] = json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [ns]}]});
        }
        out.push(v);
    }
    out
}

/// Starts the webhook's CloudProfile cache as the binary does (a garden kubeconfig file, the
/// read-only client) and waits until it is ready.
async fn watch_cloud_profiles(
    env: &TestEnv,
    ns: &str,
    stop: watch::Receiver<bool>,
) -> Arc<kim_webhook::profiles::CloudProfiles> {
    let dir = env.state_dir().join(format!("webhook-garden-{ns}"));
    let paths = env.write_kubeconfigs(&dir).unwrap();
    let garden = paths
        .iter()
        .find(|p| p.ends_with("garden.kubeconfig"))
        .unwrap();
    let gardener = kim_webhook::profiles::gardener_client(garden)
        .await
        .unwrap();
    let mut rx = stop;
    let profiles = kim_webhook::profiles::CloudProfiles::start(
        gardener,
        async move {
            let _ = rx.wait_for(|v| *v).await;
        },
        Default::default(),
    );
    for _ in 0..600 {
        if profiles.ready().is_ok() {
            return profiles;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the CloudProfiles were not cached within 30 s");
}

impl Webhook {
    /// Starts the replicas, registers the configurations and waits until the apiserver
    /// enforces both (a server-side dry run of an invalid Runtime is denied by our webhook).
    pub async fn start(env: &TestEnv, opts: Options) -> Webhook {
        let ns = match &opts.namespace {
            Some(ns) => ns.clone(),
            None => env.namespace("webhook").await.unwrap(),
        };
        let client = env.kcp_client().await.unwrap();
        let webhook_client = opts.kcp_client.clone().unwrap_or_else(|| client.clone());
        let (stop, stop_rx) = watch::channel(false);
        let secret = names(&ns).secret;
        let config = Arc::new(kim_config());
        let mut listeners = Vec::new();
        for _ in 0..opts.replicas.max(1) {
            listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let urls: Vec<String> = listeners
            .iter()
            .map(|l| format!("https://127.0.0.1:{}", l.local_addr().unwrap().port()))
            .collect();
        let cloud_profiles = if opts.cloud_profiles {
            Some(watch_cloud_profiles(env, &ns, stop_rx.clone()).await)
        } else {
            None
        };
        let cfgs = configurations(&ns, &urls[0], urls.last().unwrap());
        let mutating = cfgs[0]["metadata"]["name"].as_str().unwrap().to_string();
        let validating = cfgs[1]["metadata"]["name"].as_str().unwrap().to_string();
        apply_configurations(&client, &cfgs).await;

        let mut replicas = Vec::new();
        for (listener, url) in listeners.into_iter().zip(urls) {
            // Every field is set; the update keeps this compiling when one is added.
            #[allow(clippy::needless_update)]
            let ctx = AdmissionContext {
                deletion_protection: opts.deletion_protection,
                access_policy: opts.access_policy.clone(),
                deletion_window: Duration::from_secs(120),
                config: Some(config.clone()),
                cloud_profiles: cloud_profiles.clone(),
                ..AdmissionContext::default()
            };
            let audit = match &opts.audit_file {
                Some(path) => AuditSink::with_file(path.clone(), 10 << 20, 2).unwrap(),
                None => AuditSink::log_only(),
            };
            let state = Arc::new(AppState::new(ctx, audit, CertResolver::new(), 7 << 20));
            let rotator = Arc::new(
                CertRotator::new(
                    webhook_client.clone(),
                    RotationConfig {
                        namespace: ns.clone(),
                        secret_name: secret.clone(),
                        names: ServingNames {
                            dns: vec!["localhost".into()],
                            ips: vec!["127.0.0.1".parse().unwrap()],
                        },
                        policy: opts.policy.clone(),
                        mutating_configs: vec![mutating.clone()],
                        validating_configs: vec![validating.clone()],
                        field_manager: "kim-webhook".into(),
                    },
                    state.resolver.clone(),
                )
                .unwrap(),
            );
            let outcomes = Arc::new(Mutex::new(Vec::new()));
            let sync_errors = Arc::new(Mutex::new(Vec::new()));
            let (o, e) = (outcomes.clone(), sync_errors.clone());
            let (counted, metered) = (rotator.clone(), state.clone());
            let mut rx = stop_rx.clone();
            tokio::spawn(rotator.run(
                async move {
                    let _ = rx.wait_for(|v| *v).await;
                },
                // As the binary does: the metrics see every synchronisation.
                move |r| {
                    metered
                        .metrics
                        .observe_cert_sync(r, counted.unpropagated_cas());
                    match r {
                        Ok(out) => o.lock().unwrap().push(out.clone()),
                        Err(err) => e.lock().unwrap().push(err.to_string()),
                    }
                },
            ));
            let tls = Arc::new(
                kim_certs::server_config_for(
                    state.resolver.clone(),
                    kim_certs::TlsMinVersion::default(),
                    opts.client_ca_pem.as_deref(),
                )
                .unwrap(),
            );
            let mut app = admission_router(state.clone(), kim_webhook::routes());
            if let Some(c) = &opts.capture {
                app = capturing(app, c.clone());
            }
            let mut rx = stop_rx.clone();
            tokio::spawn(serve_tls(
                listener,
                tls,
                app,
                async move {
                    let _ = rx.wait_for(|v| *v).await;
                },
                Duration::from_secs(1),
            ));
            replicas.push(Replica {
                url,
                state,
                outcomes,
                sync_errors,
            });
        }
        let wh = Webhook {
            ns,
            mutating,
            validating,
            secret,
            replicas,
            stop,
        };
        wh.wait_enforced(env).await;
        wh
    }

    async fn wait_enforced(&self, env: &TestEnv) {
        let client = env.kcp_client().await.unwrap();
        let api: Api<DynamicObject> = Api::namespaced_with(client, &self.ns, &runtime_resource());
        let mut bad = valid_runtime("probe", &self.ns);
        bad["spec"]["shoot"]["provider"]["workers"][0]["name"] = json!("Bad_Name");
        let obj: DynamicObject = serde_json::from_value(bad).unwrap();
        let mut last = String::new();
        for _ in 0..300 {
            match api
                .create(
                    &PostParams {
                        dry_run: true,
                        ..PostParams::default()
                    },
                    &obj,
                )
                .await
            {
                Err(kube::Error::Api(s))
                    if s.message
                        .contains("vruntime.infrastructuremanager.kyma-project.io") =>
                {
                    // Also the mutating webhook must answer (it runs first): a valid probe passes.
                    let good: DynamicObject =
                        serde_json::from_value(valid_runtime("probe", &self.ns)).unwrap();
                    match api
                        .create(
                            &PostParams {
                                dry_run: true,
                                ..PostParams::default()
                            },
                            &good,
                        )
                        .await
                    {
                        Ok(_) => return,
                        Err(e) => last = format!("valid probe: {e}"),
                    }
                }
                Err(e) => last = e.to_string(),
                Ok(_) => last = "invalid probe admitted".into(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "webhooks in {} not enforced within 30 s; last: {last}",
            self.ns
        );
    }

    /// Stops the replicas and removes the configurations (a `failurePolicy: Fail` webhook
    /// without a server would block its namespace).
    pub async fn stop(self, env: &TestEnv) {
        let client = env.kcp_client().await.unwrap();
        for (kind, name) in [
            ("MutatingWebhookConfiguration", &self.mutating),
            ("ValidatingWebhookConfiguration", &self.validating),
        ] {
            let _ = Api::<DynamicObject>::all_with(client.clone(), &webhook_resource(kind))
                .delete(name, &DeleteParams::default())
                .await;
        }
        let _ = self.stop.send(true);
    }

    /// The caBundle currently in the validating configuration (PEM).
    pub async fn ca_bundle(&self, env: &TestEnv) -> String {
        let client = env.kcp_client().await.unwrap();
        let obj = Api::<DynamicObject>::all_with(
            client,
            &webhook_resource("ValidatingWebhookConfiguration"),
        )
        .get(&self.validating)
        .await
        .unwrap();
        let b64 = obj.data["webhooks"][0]["clientConfig"]["caBundle"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        use base64::Engine;
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap_or_default(),
        )
        .unwrap()
    }
}

pub fn runtime_resource() -> ApiResource {
    ApiResource {
        group: "infrastructuremanager.kyma-project.io".into(),
        version: "v1".into(),
        api_version: "infrastructuremanager.kyma-project.io/v1".into(),
        kind: "Runtime".into(),
        plural: "runtimes".into(),
    }
}

/// Reads one of the repository's samples (YAML, `config/samples/<name>`).
pub fn sample(name: &str) -> Value {
    let p = repo_root().join("config/samples").join(name);
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("sample {} missing: {e}", p.display()));
    serde_yaml_ng::from_str(&text).unwrap()
}

/// A Runtime placed in the test's namespace under a unique name.
pub fn admissible(mut rt: Value, name: &str, ns: &str) -> Value {
    rt["metadata"]["namespace"] = json!(ns);
    rt["metadata"]["name"] = json!(name);
    // KEB names a Runtime after its runtime ID, and admission holds the label to the name.
    if let Some(labels) = rt["metadata"]["labels"].as_object_mut()
        && labels.contains_key(kim_shared::names::LABEL_RUNTIME_ID)
    {
        labels.insert(kim_shared::names::LABEL_RUNTIME_ID.into(), json!(name));
    }
    rt
}

/// A valid Runtime: the AWS sample (`config/samples/runtime-aws.yaml`) with its Kubernetes
/// version left to the defaults, so that the mutating webhook has a field to fill.
pub fn valid_runtime(name: &str, ns: &str) -> Value {
    let mut rt = sample("runtime-aws.yaml");
    if let Some(k) = rt
        .pointer_mut("/spec/shoot/kubernetes")
        .and_then(Value::as_object_mut)
    {
        k.remove("version");
    }
    admissible(rt, name, ns)
}

/// Creates `input` through the apiserver with the webhooks registered and asserts that what is
/// stored is the input with the documented defaults applied (spec), labels untouched. Returns
/// the expected (defaulted) object.
pub async fn create_with_only_the_documented_defaults(
    api: &Api<DynamicObject>,
    cfg: &KimConfig,
    what: &str,
    input: &Value,
) -> Value {
    let obj: DynamicObject = serde_json::from_value(input.clone()).unwrap();
    let stored = api
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("{what} must be admitted: {e}"));
    let mut expected: kim_shared::api::Runtime = serde_json::from_value(input.clone()).unwrap();
    kim_shared::defaults::apply_defaults(&mut expected, cfg);
    let expected = serde_json::to_value(&expected).unwrap();
    let stored = serde_json::to_value(&stored).unwrap();
    assert_eq!(
        stored["spec"], expected["spec"],
        "{what}: stored spec = input + documented defaults"
    );
    assert_eq!(
        stored["metadata"]["labels"], input["metadata"]["labels"],
        "{what}: labels untouched"
    );
    expected
}

/// How long one kubectl call may take; its own waits (`kubectl wait --timeout`) are shorter.
const KUBECTL_LIMIT: Duration = Duration::from_secs(180);

/// Runs kubectl against the KCP; returns (success, stdout + stderr). Async: the webhook under
/// test runs on the test's own runtime and must keep answering while kubectl waits.
pub async fn kubectl(env: &TestEnv, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use tokio::io::AsyncWriteExt;
    let kubectl = env
        .binaries()
        .kubectl
        .clone()
        .expect("kubectl next to kube-apiserver (make testenv-bins builds it)");
    let dir = env.state_dir().join("webhook-e2e");
    std::fs::create_dir_all(&dir).unwrap();
    // One file per call: concurrent tests rewriting a shared file let kubectl read a
    // half-written kubeconfig (it then falls back to localhost:8080).
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let kubeconfig = env
        .kcp()
        .write_admin_kubeconfig(
            &dir.join(format!("admin-{}-{call}.kubeconfig", std::process::id())),
        )
        .unwrap();
    let mut child = tokio::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).await.unwrap();
    }
    drop(input);
    // A kubectl that hangs (a stalled connection) fails its test instead of the whole run;
    // dropping it on timeout kills it.
    let out = match tokio::time::timeout(KUBECTL_LIMIT, child.wait_with_output()).await {
        Ok(out) => out.unwrap(),
        Err(_) => {
            return (
                false,
                format!(
                    "`kubectl {}` did not finish within {} s",
                    args.join(" "),
                    KUBECTL_LIMIT.as_secs()
                ),
            );
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
