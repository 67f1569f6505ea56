//! Our programs (`kim-webhook`, `kim-controller`) as processes of their own against a
//! [`TestEnv`], as `kim-dev` and `make soak` run them: the command line of each (see
//! [`PROGRAMS`]), start-up until ready, the webhook's serving certificate and configurations.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use kube::api::{Api, DynamicObject, PostParams};

use crate::fixtures;
use crate::testenv::process::{ManagedProcess, free_port};
use crate::testenv::{TestEnv, repo_root, wait};

/// Ports and files a program's command line may use.
pub struct Wiring {
    /// Where its kubeconfigs (`kcp.kubeconfig`, `garden.kubeconfig`, as
    /// [`TestEnv::write_kubeconfigs`] names them), certificate and log live.
    pub dir: PathBuf,
    /// The KIM configuration (`converter_config.json`).
    pub config: PathBuf,
    /// Serving port: admissions (TLS) or `/metrics`.
    pub port: u16,
    /// Plain-HTTP port of the health checks (and the webhook's `/metrics`).
    pub admin_port: u16,
}

/// One of our programs.
pub struct Program {
    /// Binary name in the cargo target directory.
    pub binary: &'static str,
    /// Text its `--help` must contain; an empty `main` (the state before a program is
    /// written) prints nothing and is skipped.
    pub help_marker: &'static str,
    /// Command line.
    pub args: fn(&Wiring) -> Vec<String>,
    /// Plain-HTTP readiness path on `admin_port`.
    pub ready_path: &'static str,
    /// Whether its webhook configurations (deploy/webhook/webhooks.yaml) get registered.
    pub webhooks: bool,
    /// Its Deployment manifest, relative to the repository root: the program runs with the
    /// manifest's literal environment (thread and malloc-arena bounds, log filter).
    pub deployment: &'static str,
}

impl Program {
    /// The literal environment of its Deployment manifest ([`deployment_env`]).
    pub fn environment(&self) -> anyhow::Result<Vec<(String, String)>> {
        let manifest = std::fs::read_to_string(crate::testenv::repo_root().join(self.deployment))
            .with_context(|| format!("reading {}", self.deployment))?;
        Ok(deployment_env(&manifest)?)
    }

    /// Where its `/metrics` is served.
    pub fn metrics_addr(&self, w: &Wiring) -> SocketAddr {
        let port = if self.webhooks { w.admin_port } else { w.port };
        SocketAddr::from(([127, 0, 0, 1], port))
    }
}

/// The sample Runtime `make run` creates, relative to the repository root.
pub const SAMPLE_RUNTIME: &str = "config/samples/runtime-aws.yaml";

/// The webhook, as [`PROGRAMS`] starts it.
pub const WEBHOOK: &Program = &PROGRAMS[0];
/// The controller, as [`PROGRAMS`] starts it.
pub const CONTROLLER: &Program = &PROGRAMS[1];

/// Our programs, in start order. Add an entry when a program gains a mode worth running.
pub const PROGRAMS: &[Program] = &[
    Program {
        binary: "kim-webhook",
        help_marker: "serve",
        args: |w| {
            vec![
                "serve".into(),
                format!("--converter-config-filepath={}", w.config.display()),
                // As deploy/webhook/deployment.yaml: Runtimes are checked against the
                // CloudProfiles of the real gardener-apiserver.
                format!(
                    "--gardener-kubeconfig-path={}",
                    w.dir.join("garden.kubeconfig").display()
                ),
                format!("--listen-addr=127.0.0.1:{}", w.port),
                format!("--admin-addr=127.0.0.1:{}", w.admin_port),
                format!(
                    "--tls-cert-file={}",
                    w.dir.join("webhook/tls.crt").display()
                ),
                format!("--tls-key-file={}", w.dir.join("webhook/tls.key").display()),
                format!(
                    "--audit-log-path={}",
                    w.dir.join("webhook/audit.log").display()
                ),
                "--log-format=text".into(),
            ]
        },
        ready_path: "/readyz",
        deployment: "deploy/webhook/deployment.yaml",
        webhooks: true,
    },
    Program {
        binary: "kim-controller",
        help_marker: "Run the reconcilers",
        args: |w| {
            vec![
                "run".into(),
                format!(
                    "--kcp-kubeconfig-path={}",
                    w.dir.join("kcp.kubeconfig").display()
                ),
                format!(
                    "--gardener-kubeconfig-path={}",
                    w.dir.join("garden.kubeconfig").display()
                ),
                format!("--gardener-project-name={}", fixtures::PROJECT_NAME),
                format!("--converter-config-filepath={}", w.config.display()),
                format!("--metrics-bind-address=127.0.0.1:{}", w.port),
                format!("--health-probe-bind-address=127.0.0.1:{}", w.admin_port),
                "--log-format=text".into(),
            ]
        },
        ready_path: "/readyz",
        deployment: "deploy/controller/deployment.yaml",
        webhooks: false,
    },
];

/// A program running as its own process.
pub struct RunningProgram {
    /// The process (killed on drop).
    pub process: ManagedProcess,
    /// Its ports and files.
    pub wiring: Wiring,
    /// Its log file.
    pub log: PathBuf,
    /// Where its `/metrics` is served.
    pub metrics: SocketAddr,
}

/// What [`start`] did.
pub enum Started {
    /// Running and ready (its webhooks registered and enforced).
    Running(Box<RunningProgram>),
    /// The binary is not in `bin_dir`.
    NotBuilt(PathBuf),
    /// The binary does nothing yet (its `--help` lacks the marker).
    DoesNothing,
}

/// Starts `program` from `bin_dir` with its command line plus `extra` flags, its kubeconfigs
/// and log in `dir`, and waits until it is ready; the webhook's configurations are registered
/// (scoped as deploy/webhook/webhooks.yaml scopes them) and enforced before this returns.
pub async fn start(
    env: &TestEnv,
    program: &Program,
    bin_dir: &Path,
    dir: &Path,
    config: &Path,
    extra: &[String],
) -> anyhow::Result<Started> {
    let bin = bin_dir.join(program.binary);
    if !bin.exists() {
        return Ok(Started::NotBuilt(bin));
    }
    let help = Command::new(&bin).arg("--help").output();
    if !help.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(program.help_marker)) {
        return Ok(Started::DoesNothing);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    env.write_kubeconfigs(dir)?;
    let wiring = Wiring {
        dir: dir.to_path_buf(),
        config: config.to_path_buf(),
        port: free_port()?,
        admin_port: free_port()?,
    };
    if program.webhooks {
        let cert = env.webhook_serving_cert()?;
        std::fs::create_dir_all(dir.join("webhook"))?;
        crate::testenv::access::write_private(&dir.join("webhook/tls.crt"), &cert.cert_pem)?;
        crate::testenv::access::write_private(&dir.join("webhook/tls.key"), &cert.key_pem)?;
    }
    let log = dir.join(format!("{}.log", program.binary));
    let mut args = (program.args)(&wiring);
    args.extend(extra.iter().cloned());
    let environment = program.environment()?;
    let envs: Vec<(&str, &str)> = environment
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut proc = ManagedProcess::spawn(program.binary, &bin, &args, &envs, &log)?;
    let admin = SocketAddr::from(([127, 0, 0, 1], wiring.admin_port));
    let ready = wait::until(
        &format!("{} {}", program.binary, program.ready_path),
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let exited = proc.check_running().err().map(|e| e.to_string());
            async move {
                if let Some(e) = exited {
                    return Err(wait::NotYet::Fail(e));
                }
                match http_get(admin, program.ready_path).await {
                    Ok((200, _)) => Ok(()),
                    Ok((s, _)) => Err(format!("HTTP {s}").into()),
                    Err(e) => Err(e.to_string().into()),
                }
            }
        },
    )
    .await;
    if let Err(e) = ready {
        bail!(
            "{} did not become ready: {e} (log: {})",
            program.binary,
            log.display()
        );
    }
    if program.webhooks {
        register_webhooks(env, wiring.port).await?;
    }
    let metrics = program.metrics_addr(&wiring);
    Ok(Started::Running(Box::new(RunningProgram {
        process: proc,
        wiring,
        log,
        metrics,
    })))
}

async fn register_webhooks(env: &TestEnv, port: u16) -> anyhow::Result<()> {
    let file = repo_root().join("deploy/webhook/webhooks.yaml");
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let mut configs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v = <serde_json::Value as serde::Deserialize>::deserialize(doc)?;
        if v["kind"]
            .as_str()
            .is_some_and(|k| k.ends_with("WebhookConfiguration"))
        {
            configs.push(v);
        }
    }
    let client = env.kcp_client().await?;
    let sample = sample()?;
    env.register_webhooks(&configs, &format!("https://127.0.0.1:{port}"), || {
        let (client, sample) = (client.clone(), sample.clone());
        async move {
            // Enforced once a dry-run create reaches the webhook (any answer but a call failure).
            match dry_run_create(&client, &sample).await {
                Ok(()) => Ok(()),
                Err(e) if e.contains("failed calling webhook") => Err(e),
                Err(_) => Ok(()),
            }
        }
    })
    .await?;
    Ok(())
}

async fn dry_run_create(client: &kube::Client, obj: &serde_json::Value) -> Result<(), String> {
    let dynamic: DynamicObject = serde_json::from_value(obj.clone()).map_err(|e| e.to_string())?;
    let ns = dynamic.metadata.namespace.clone().unwrap_or_default();
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &crate::webhook::runtime_resource())
        .create(
            &PostParams {
                dry_run: true,
                field_manager: None,
            },
            &dynamic,
        )
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The sample Runtime `make run` creates ([`SAMPLE_RUNTIME`]), bound to this landscape's
/// credentials for its provider, as a user would write it (the webhook adds the defaults).
pub fn sample() -> anyhow::Result<serde_json::Value> {
    let path = repo_root().join(SAMPLE_RUNTIME);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the sample Runtime {}", path.display()))?;
    let mut rt: serde_json::Value = serde_yaml_ng::from_str(&text)?;
    let provider = rt["spec"]["shoot"]["provider"]["type"]
        .as_str()
        .unwrap_or("aws")
        .to_string();
    rt["spec"]["shoot"]["secretBindingName"] = fixtures::credentials_name(&provider).into();
    Ok(rt)
}

/// Plain-HTTP GET on our programs' admin and metrics ports: (status, whole response).
pub async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no HTTP status")?;
    Ok((status, text))
}

/// The environment a Deployment manifest gives its first container, literal values only
/// (entries with `valueFrom` need a Pod). `make run`, `make soak` and `make bench-controller`
/// start a program with its Deployment's environment, so what they measure is what the manifest
/// ships (`TOKIO_WORKER_THREADS`, `MALLOC_ARENA_MAX`).
pub fn deployment_env(manifest: &str) -> crate::testenv::Result<Vec<(String, String)>> {
    let docs = crate::fixtures::yaml_documents(manifest)?;
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .ok_or_else(|| {
            crate::testenv::TestEnvError::Other("no Deployment in the manifest".into())
        })?;
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(env
        .iter()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_owned(),
                e["value"].as_str()?.to_owned(),
            ))
        })
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn deployment_env_takes_the_literal_values_of_the_first_container() {
        let manifest = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: x}
---
apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
        - name: manager
          env:
            - name: POD_NAMESPACE
              valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
            - {name: MALLOC_ARENA_MAX, value: "2"}
            - {name: RUST_LOG, value: info}
        - name: sidecar
          env: [{name: OTHER, value: "1"}]
"#;
        assert_eq!(
            deployment_env(manifest).unwrap(),
            vec![
                ("MALLOC_ARENA_MAX".to_owned(), "2".to_owned()),
                ("RUST_LOG".to_owned(), "info".to_owned())
            ]
        );
        assert!(deployment_env("kind: Service").is_err());
    }

    #[test]
    fn the_deployments_bound_threads_and_malloc_arenas() {
        let controller = [("TOKIO_WORKER_THREADS", "2"), ("MALLOC_ARENA_MAX", "2")];
        let webhook = [("TOKIO_WORKER_THREADS", "2")];
        for (program, bounds) in [(CONTROLLER, &controller[..]), (WEBHOOK, &webhook[..])] {
            let env = program.environment().unwrap();
            for (name, value) in bounds {
                assert!(
                    env.contains(&((*name).to_owned(), (*value).to_owned())),
                    "{}: {name}={value} in {env:?}",
                    program.deployment
                );
            }
        }
    }
}
