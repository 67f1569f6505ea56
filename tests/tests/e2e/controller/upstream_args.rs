//! Drop-in: the `kim-controller` binary started with exactly the argument list of upstream's
//! Deployment (no subcommand, upstream's flag names and values) starts and provisions a Runtime.
//! Only what upstream takes from its Pod is the test environment's: the mounted Gardener
//! kubeconfig and KIM configuration, the in-cluster KCP access, the namespace and the ports.
//!
//! Needs `kim-controller` built next to the test binary (`cargo build -p kim-controller`;
//! `cargo test --workspace` and `make test` build it); the test fails naming it when it is not.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use kim_shared::api::{Runtime, RuntimeState};
use kim_tests::controller::*;
use kim_tests::fixtures::{PROJECT_NAME, UPSTREAM_MANAGER_ARGS};
use kim_tests::testenv::TestEnv;
use kube::Api;
use kube::api::DeleteParams;

/// Kills the controller when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn controller_binary() -> PathBuf {
    // The test binary runs from target/<profile>/deps/.
    let bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent()?.parent().map(|d| d.join("kim-controller")))
        .unwrap_or_default();
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p kim-controller`",
        bin.display()
    );
    bin
}

/// Upstream's arguments with the Gardener kubeconfig and project of the test environment.
fn upstream_args_here(garden: &std::path::Path) -> Vec<String> {
    UPSTREAM_MANAGER_ARGS
        .iter()
        .map(|arg| match arg.split_once('=') {
            Some(("--gardener-kubeconfig-path", _)) => {
                format!("--gardener-kubeconfig-path={}", garden.display())
            }
            Some(("--gardener-project-name", _)) => {
                format!("--gardener-project-name={PROJECT_NAME}")
            }
            _ => (*arg).to_owned(),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_deployment_arguments_start_and_reconcile() -> Result<()> {
    let bin = controller_binary();
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-upargs").await?;
    let files = controller_files(env, &Wiring::default()).await?;
    let mut args = upstream_args_here(&files.garden);
    assert_eq!(args.len(), UPSTREAM_MANAGER_ARGS.len());
    // What upstream's Pod gives its binary otherwise: in-cluster KCP access (controller-runtime's
    // -kubeconfig flag out of a cluster), the converter configuration at its default mount path,
    // the namespace and fixed ports.
    args.extend([
        format!("-kubeconfig={}", files.kcp.display()),
        format!("--converter-config-filepath={}", files.config.display()),
        format!("--namespace={ns}"),
        "--metrics-bind-address=127.0.0.1:0".to_owned(),
        "--health-probe-bind-address=127.0.0.1:0".to_owned(),
    ]);
    let log_path = files.dir.path().join("kim-controller.log");
    let log = std::fs::File::create(&log_path)?;
    let child = Command::new(&bin)
        .args(&args)
        .env_remove("RUST_LOG")
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let _running = Running(child);
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    let id = format!("up-{}", &ns[ns.len().saturating_sub(6)..]);
    create(env, &sample_runtime(&ns, &id)?).await?;
    let ready = wait_state(env, &ns, &id, RuntimeState::Ready, Duration::from_secs(180))
        .await
        .with_context(|| format!("kim-controller's log:\n{}", read_log()))?;
    check_ready_conditions(&ready)?;
    let log = read_log();
    ensure!(
        log.contains("kim-controller started"),
        "no start line in the log:\n{log}"
    );
    ensure!(
        !log.contains("accepted without effect"),
        "every flag of upstream's Deployment is acted on, yet:\n{log}"
    );

    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    runtimes.delete(&id, &DeleteParams::default()).await?;
    eventually("the Runtime deleted", Duration::from_secs(180), || {
        let runtimes = runtimes.clone();
        let id = id.clone();
        async move { Ok(runtimes.get_opt(&id).await?.is_none()) }
    })
    .await
    .with_context(|| format!("kim-controller's log:\n{}", read_log()))?;
    Ok(())
}
