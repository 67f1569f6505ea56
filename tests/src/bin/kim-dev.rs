//! `kim-dev` (behind `make run`): the whole local environment. Builds the control-plane
//! binaries when missing, starts etcd, the KCP kube-apiserver with the real gardener-apiserver,
//! the shoot cluster and the Gardener simulator, then our own programs (see [`COMPONENTS`]),
//! applies the sample Runtime `config/samples/runtime-aws.yaml`, writes kubeconfigs to
//! `target/kim-dev/`, prints `kim-dev: ready` and runs until Ctrl-C, then cleans up.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use kim_tests::fixtures;
use kim_tests::simulator::{Fault, SimulatorConfig};
use kim_tests::testenv::process::{ManagedProcess, free_port};
use kim_tests::testenv::{TestEnv, TestEnvOptions, bins, repo_root, wait};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;

/// Local KIM environment on a real control plane.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Where kubeconfigs, logs and state go.
    #[arg(long, default_value = "target/kim-dev")]
    dir: PathBuf,
    /// Time each step of a simulated Shoot operation takes (3 steps per operation).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    step_delay: Duration,
    /// Simulated Gardener fault for every Shoot: none, stuck, error:CODES, failed:CODES, slow:DURATION.
    #[arg(long, default_value = "none")]
    fault: Fault,
    /// Do not start kim-webhook and kim-controller even if they are built.
    #[arg(long)]
    no_components: bool,
    /// Do not apply the sample Runtime.
    #[arg(long)]
    no_sample: bool,
}

/// Ports and files a component's command line may use.
struct Wiring {
    dir: PathBuf,
    config: PathBuf,
    port: u16,
    admin_port: u16,
}

/// One of our programs that `kim-dev` runs when it is built and does something.
struct Component {
    /// Binary name in the cargo target directory.
    binary: &'static str,
    /// Text its `--help` must contain; an empty `main` (the state before a program is
    /// written) prints nothing and is skipped.
    help_marker: &'static str,
    /// Command line.
    args: fn(&Wiring) -> Vec<String>,
    /// Plain-HTTP readiness path on `admin_port`.
    ready_path: &'static str,
    /// Whether its webhook configurations (deploy/webhook/webhooks.yaml) get registered.
    webhooks: bool,
}

/// The sample Runtime `make run` creates, relative to the repository root.
const SAMPLE_RUNTIME: &str = "config/samples/runtime-aws.yaml";

/// Our programs, in start order. Add an entry when a program gains a mode worth running.
const COMPONENTS: &[Component] = &[
    Component {
        binary: "kim-webhook",
        help_marker: "serve",
        args: |w| {
            vec![
                "serve".into(),
                format!("--converter-config-filepath={}", w.config.display()),
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
        webhooks: true,
    },
    Component {
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
        webhooks: false,
    },
];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kube_client=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let dir = std::path::absolute(&args.dir).context("resolving --dir")?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

    ensure_binaries()?;
    eprintln!(
        "kim-dev: starting etcd, kube-apiserver, gardener-apiserver, shoot cluster, simulator ..."
    );
    let env = TestEnv::start(TestEnvOptions {
        state_dir: Some(dir.join("state")),
        simulator: Some(SimulatorConfig {
            step_delay: args.step_delay,
            default_fault: args.fault.clone(),
        }),
        ..TestEnvOptions::default()
    })
    .await
    .context("starting the control plane")?;
    eprintln!(
        "kim-dev: control plane up in {:.1?}",
        env.startup_duration()
    );
    env.write_kubeconfigs(&dir)?;
    let config = write_dev_config(&dir)?;

    let mut running: Vec<ManagedProcess> = Vec::new();
    if !args.no_components {
        for c in COMPONENTS {
            if let Some(p) = start_component(&env, c, &dir, &config).await? {
                running.push(p);
            }
        }
    }
    if !args.no_sample {
        apply_sample(&env, &dir).await?;
    }
    print_instructions(&env, &dir);
    println!("kim-dev: ready");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    eprintln!("kim-dev: stopping");
    for mut p in running.into_iter().rev() {
        p.stop();
    }
    drop(env);
    eprintln!("kim-dev: stopped");
    Ok(())
}

/// Runs tests/bins/build.sh when a binary is missing (its progress lines go to stderr).
fn ensure_binaries() -> anyhow::Result<()> {
    if bins::find().is_ok() {
        return Ok(());
    }
    eprintln!(
        "kim-dev: control-plane binaries missing, building them (first time: about 15-25 minutes)"
    );
    let status = Command::new(bins::build_script())
        .stdout(Stdio::null())
        .status()
        .context("running tests/bins/build.sh")?;
    if !status.success() {
        bail!("tests/bins/build.sh failed ({status})");
    }
    bins::find()?;
    Ok(())
}

/// The example configuration with the fixtures' project name (the example names its own).
fn write_dev_config(dir: &Path) -> anyhow::Result<PathBuf> {
    fixtures::write_converter_config(&dir.join("config"), fixtures::PROJECT_NAME)
        .context("writing the KIM configuration from deploy/config")
}

fn target_dir() -> PathBuf {
    // kim-dev runs from target/<profile>/, next to the other binaries.
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default()
}

async fn start_component(
    env: &TestEnv,
    c: &Component,
    dir: &Path,
    config: &Path,
) -> anyhow::Result<Option<ManagedProcess>> {
    let bin = target_dir().join(c.binary);
    if !bin.exists() {
        eprintln!(
            "kim-dev: {} not built, skipped (`cargo build --workspace` builds it)",
            c.binary
        );
        return Ok(None);
    }
    let help = Command::new(&bin).arg("--help").output();
    let does_something =
        help.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(c.help_marker));
    if !does_something {
        eprintln!("kim-dev: {} does nothing yet, skipped", c.binary);
        return Ok(None);
    }
    let wiring = Wiring {
        dir: dir.to_path_buf(),
        config: config.to_path_buf(),
        port: free_port()?,
        admin_port: free_port()?,
    };
    if c.webhooks {
        let cert = env.webhook_serving_cert()?;
        std::fs::create_dir_all(dir.join("webhook"))?;
        kim_tests::testenv::access::write_private(&dir.join("webhook/tls.crt"), &cert.cert_pem)?;
        kim_tests::testenv::access::write_private(&dir.join("webhook/tls.key"), &cert.key_pem)?;
    }
    let log = dir.join(format!("{}.log", c.binary));
    let mut proc = ManagedProcess::spawn(
        c.binary,
        &bin,
        &(c.args)(&wiring),
        &[("RUST_LOG", "info")],
        &log,
    )?;
    let url = format!("127.0.0.1:{}", wiring.admin_port);
    let ready = wait::until(
        &format!("{} {}", c.binary, c.ready_path),
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let url = url.clone();
            let exited = proc.check_running().err().map(|e| e.to_string());
            async move {
                if let Some(e) = exited {
                    return Err(wait::NotYet::Fail(e));
                }
                http_status(&url, c.ready_path)
                    .await
                    .and_then(|s| {
                        if s == 200 {
                            Ok(())
                        } else {
                            Err(format!("HTTP {s}"))
                        }
                    })
                    .map_err(Into::into)
            }
        },
    )
    .await;
    if let Err(e) = ready {
        bail!(
            "{} did not become ready: {e} (log: {})",
            c.binary,
            log.display()
        );
    }
    if c.webhooks {
        register_webhooks(env, wiring.port).await?;
    }
    eprintln!("kim-dev: {} running (log: {})", c.binary, log.display());
    Ok(Some(proc))
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
    let sample = fixed_sample()?;
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

fn runtime_resource() -> ApiResource {
    ApiResource {
        group: "infrastructuremanager.kyma-project.io".into(),
        version: "v1".into(),
        api_version: "infrastructuremanager.kyma-project.io/v1".into(),
        kind: "Runtime".into(),
        plural: "runtimes".into(),
    }
}

async fn dry_run_create(client: &kube::Client, obj: &serde_json::Value) -> Result<(), String> {
    let dynamic: DynamicObject = serde_json::from_value(obj.clone()).map_err(|e| e.to_string())?;
    let ns = dynamic.metadata.namespace.clone().unwrap_or_default();
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &runtime_resource())
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

/// The sample Runtime `make run` creates (`config/samples/runtime-aws.yaml`), bound to this
/// landscape's credentials for its provider.
fn fixed_sample() -> anyhow::Result<serde_json::Value> {
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

async fn apply_sample(env: &TestEnv, dir: &Path) -> anyhow::Result<()> {
    let rt = fixed_sample()?;
    let samples = dir.join("samples");
    std::fs::create_dir_all(&samples)?;
    std::fs::write(samples.join("runtime.yaml"), serde_yaml_ng::to_string(&rt)?)?;
    let mut invalid = rt.clone();
    invalid["metadata"]["name"] = "runtime-invalid".into();
    invalid["spec"]["shoot"]["provider"]["workers"][0]["name"] = "a-very-long-pool".into();
    invalid["spec"]["shoot"]["region"] = "mars-north-1".into();
    std::fs::write(
        samples.join("runtime-invalid.yaml"),
        serde_yaml_ng::to_string(&invalid)?,
    )?;

    let client = env.kcp_client().await?;
    let ns = rt["metadata"]["namespace"]
        .as_str()
        .unwrap_or("kcp-system")
        .to_string();
    let ns_obj: DynamicObject = serde_json::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )?;
    let ns_res = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Namespace".into(),
        plural: "namespaces".into(),
    };
    Api::<DynamicObject>::all_with(client.clone(), &ns_res)
        .patch(&ns, &PatchParams::apply("kim-dev"), &Patch::Apply(&ns_obj))
        .await
        .context("creating the sample namespace")?;
    let dynamic: DynamicObject = serde_json::from_value(rt.clone())?;
    let name = dynamic.metadata.name.clone().unwrap_or_default();
    match Api::<DynamicObject>::namespaced_with(client, &ns, &runtime_resource())
        .patch(
            &name,
            &PatchParams::apply("kim-dev").force(),
            &Patch::Apply(&dynamic),
        )
        .await
    {
        Ok(_) => eprintln!("kim-dev: applied sample Runtime {ns}/{name}"),
        Err(e) => eprintln!("kim-dev: WARNING: the sample Runtime {ns}/{name} was rejected: {e}"),
    }
    Ok(())
}

fn print_instructions(env: &TestEnv, dir: &Path) {
    let rel = |p: PathBuf| {
        p.strip_prefix(std::env::current_dir().unwrap_or_default())
            .map(Path::to_path_buf)
            .unwrap_or(p)
    };
    let kcp = rel(dir.join("kcp.kubeconfig"));
    println!();
    println!(
        "export KUBECONFIG={}   # KCP (Runtimes, GardenerClusters)",
        kcp.display()
    );
    println!(
        "export GARDEN_KUBECONFIG={}   # Gardener API (Shoots in {})",
        rel(dir.join("garden.kubeconfig")).display(),
        fixtures::PROJECT_NAMESPACE
    );
    println!(
        "export SHOOT_KUBECONFIG={}   # the cluster every Shoot points at",
        rel(dir.join("shoot.kubeconfig")).display()
    );
    let kubectl = env
        .binaries()
        .kubectl
        .clone()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "kubectl".into());
    let samples = rel(dir.join("samples"));
    println!();
    println!(
        "try this (kubectl {} matches the servers: {kubectl}):",
        bins::version("K8S_VERSION")
    );
    println!("  kubectl get runtimes -A");
    println!("  kubectl apply -f config/samples/runtime-gcp.yaml   # another provider's sample");
    println!("  kubectl get runtimes -n kcp-system -w");
    println!(
        "  kubectl apply --dry-run=server -f {}/runtime-invalid.yaml",
        samples.display()
    );
    println!(
        "  kubectl --kubeconfig $GARDEN_KUBECONFIG get shoots -n {} -w",
        fixtures::PROJECT_NAMESPACE
    );
    println!("  kubectl --kubeconfig $SHOOT_KUBECONFIG get namespaces");
    println!(
        "  logs: {}/*.log, control plane: {}/state/*.log",
        dir.display(),
        dir.display()
    );
    println!();
}

/// Status code of a plain-HTTP GET (for our programs' admin ports).
async fn http_status(addr: &str, path: &str) -> Result<u16, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.map_err(|e| e.to_string())?;
    let head = String::from_utf8_lossy(&buf);
    head.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| "no HTTP status".to_string())
}
