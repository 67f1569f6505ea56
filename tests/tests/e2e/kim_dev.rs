//! `make run` end to end: the `kim-dev` binary starts the whole local environment with our
//! webhook and controller, prints `kim-dev: ready`, the sample Runtime it applies becomes
//! `Ready`, and SIGTERM stops everything cleanly.
//!
//! Needs `kim-webhook` and `kim-controller` built next to `kim-dev` (`cargo test --workspace`
//! and `make test` build them); the test fails, naming them, when they are not.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kim_shared::api::Runtime;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

const READY_LINE: &str = "kim-dev: ready";

/// kim-dev, killed when a failed assertion ends the test (its control plane dies with it).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn make_run_reaches_ready_and_the_sample_runtime_becomes_ready() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stderr_path = dir.path().join("kim-dev.stderr");
    let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_kim-dev"))
            .arg(format!("--dir={}", dir.path().join("dev").display()))
            .arg("--step-delay=0s")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("starting kim-dev"),
    );
    let stdout = child.0.stdout.take().expect("kim-dev stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let log = || std::fs::read_to_string(&stderr_path).unwrap_or_default();

    let deadline = Instant::now() + Duration::from_secs(300);
    let mut ready = false;
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(line) if line == READY_LINE => {
                ready = true;
                break;
            }
            Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if !ready {
        let _ = child.0.kill();
        panic!(
            "kim-dev did not print `{READY_LINE}` within 300 s; its log:\n{}",
            log()
        );
    }
    for component in ["kim-webhook", "kim-controller"] {
        assert!(
            log().contains(&format!("kim-dev: {component} running")),
            "kim-dev did not start {component} (build it with `cargo build --workspace`); log:\n{}",
            log()
        );
    }

    let kubeconfig = Kubeconfig::read_from(dir.path().join("dev/kcp.kubeconfig"))
        .expect("kim-dev writes kcp.kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kcp.kubeconfig is usable");
    let client = kube::Client::try_from(config).expect("KCP client");
    let runtimes: Api<Runtime> = Api::namespaced(client, "kcp-system");
    let sample: Runtime = serde_yaml_ng::from_str(
        &std::fs::read_to_string(
            kim_tests::testenv::repo_root().join("config/samples/runtime-aws.yaml"),
        )
        .expect("the sample make run applies"),
    )
    .expect("a Runtime");
    let name = sample.metadata.name.expect("the sample has a name");
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut last = String::from("not found");
    loop {
        if let Ok(rt) = runtimes.get(&name).await {
            let status = rt.status.unwrap_or_default();
            last = serde_json::to_string(&status).unwrap_or_default();
            if serde_json::to_value(&status)
                .ok()
                .and_then(|s| s["state"].as_str().map(str::to_owned))
                == Some("Ready".to_owned())
            {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the sample Runtime did not become Ready within 180 s; last status: {last}; kim-dev log:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The dry run the instructions suggest is answered with the CloudProfile checks of the
    // real gardener-apiserver, as in the Deployment, not only with the static rules.
    let invalid: Runtime = serde_yaml_ng::from_str(
        &std::fs::read_to_string(dir.path().join("dev/samples/runtime-invalid.yaml"))
            .expect("kim-dev writes the invalid sample"),
    )
    .expect("the invalid sample is a Runtime");
    let dry_run = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    match runtimes.create(&dry_run, &invalid).await {
        Err(kube::Error::Api(status)) => {
            for expected in [
                "spec.shoot.region: \"mars-north-1\" is not a region of CloudProfile",
                "spec.shoot.provider.workers[0].name: \"a-very-long-pool\" is not a valid pool name",
            ] {
                assert!(
                    status.message.contains(expected),
                    "the dry run's answer lacks {expected:?}: {}",
                    status.message
                );
            }
        }
        other => panic!("the invalid sample was not refused: {other:?}"),
    }
    assert!(
        runtimes
            .get_opt("runtime-invalid")
            .await
            .expect("get")
            .is_none(),
        "a dry run stored the Runtime"
    );

    let term = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .expect("sending SIGTERM");
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.0.try_wait().expect("waiting for kim-dev") {
            assert!(
                status.success(),
                "kim-dev exited with {status}; log:\n{}",
                log()
            );
            break;
        }
        if Instant::now() > deadline {
            let _ = child.0.kill();
            panic!(
                "kim-dev did not stop within 60 s of SIGTERM; log:\n{}",
                log()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(log().contains("kim-dev: stopped"), "log:\n{}", log());
}
