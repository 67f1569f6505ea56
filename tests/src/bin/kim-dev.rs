//! `kim-dev` (behind `make run`): the whole local environment. Builds the control-plane
//! binaries when missing, starts etcd, the KCP kube-apiserver with the real gardener-apiserver,
//! the shoot cluster and the Gardener simulator, then our own programs (see `kim_tests::programs::PROGRAMS`),
//! applies the sample Runtime `config/samples/runtime-aws.yaml`, writes kubeconfigs to
//! `target/kim-dev/`, prints `kim-dev: ready` and runs until Ctrl-C, then cleans up.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use kim_tests::fixtures;
use kim_tests::programs::{self, PROGRAMS, Program, Started};
use kim_tests::simulator::{Fault, SimulatorConfig};
use kim_tests::testenv::process::ManagedProcess;
use kim_tests::testenv::{TestEnv, TestEnvOptions, bins};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
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
        for c in PROGRAMS {
            if let Some(p) = start_program(&env, c, &dir, &config).await? {
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

async fn start_program(
    env: &TestEnv,
    p: &Program,
    dir: &Path,
    config: &Path,
) -> anyhow::Result<Option<ManagedProcess>> {
    match programs::start(env, p, &target_dir(), dir, config, &[]).await? {
        Started::Running(r) => {
            eprintln!("kim-dev: {} running (log: {})", p.binary, r.log.display());
            Ok(Some(r.process))
        }
        Started::NotBuilt(_) => {
            eprintln!(
                "kim-dev: {} not built, skipped (`cargo build --workspace` builds it)",
                p.binary
            );
            Ok(None)
        }
        Started::DoesNothing => {
            eprintln!("kim-dev: {} does nothing yet, skipped", p.binary);
            Ok(None)
        }
    }
}

async fn apply_sample(env: &TestEnv, dir: &Path) -> anyhow::Result<()> {
    let rt = programs::sample()?;
    let samples = dir.join("samples");
    std::fs::create_dir_all(&samples)?;
    std::fs::write(samples.join("runtime.yaml"), serde_yaml_ng::to_string(&rt)?)?;
    let mut invalid = rt.clone();
    invalid["metadata"]["name"] = "runtime-invalid".into();
    invalid["metadata"]["labels"]["kyma-project.io/runtime-id"] = "runtime-invalid".into();
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
    match Api::<DynamicObject>::namespaced_with(
        client,
        &ns,
        &kim_tests::webhook::runtime_resource(),
    )
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
