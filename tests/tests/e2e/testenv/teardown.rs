//! No control-plane process outlives its test process, however that process ends: a panic
//! that unwinds (TestEnv dropped) or an abort (nothing dropped; the parent-death signal acts).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kim_tests::testenv::{TestEnv, TestEnvOptions};

const MODE: &str = "KIM_TEARDOWN_HELPER_MODE";
const PIDS: &str = "KIM_TEARDOWN_HELPER_PIDS";

/// Run by the tests below in a child process: starts an environment, writes its pids, then
/// panics or aborts as told.
#[tokio::test]
#[ignore = "helper process of the teardown tests; they run it"]
async fn teardown_helper() {
    let mode = std::env::var(MODE).unwrap();
    let env = TestEnv::start(TestEnvOptions {
        crds_dir: None,
        ..TestEnvOptions::kcp_only()
    })
    .await
    .unwrap();
    let pids: Vec<String> = env.pids().iter().map(u32::to_string).collect();
    std::fs::write(std::env::var(PIDS).unwrap(), pids.join(" ")).unwrap();
    match mode.as_str() {
        "abort" => std::process::abort(),
        _ => panic!("deliberate panic with a running TestEnv"),
    }
}

/// The helper as the test harness names it: its module path without the crate.
fn helper_name() -> String {
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    format!("{module}::teardown_helper")
}

fn alive(pid: &str) -> bool {
    // A zombie has exited; only its parent's reaping is pending.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

fn run_helper(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let pids_file = dir.path().join("pids");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", &helper_name()])
        .env(MODE, mode)
        .env(PIDS, &pids_file)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the helper should have died ({mode})"
    );
    let pids = std::fs::read_to_string(Path::new(&pids_file))
        .expect("helper wrote its control-plane pids");
    let pids: Vec<&str> = pids.split_whitespace().collect();
    assert!(
        pids.len() >= 2,
        "expected etcd and kube-apiserver pids, got {pids:?}"
    );
    let start = Instant::now();
    while pids.iter().any(|p| alive(p)) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let left: Vec<&&str> = pids.iter().filter(|p| alive(p)).collect();
    assert!(
        left.is_empty(),
        "processes left after the helper {mode}ed: {left:?}"
    );
}

#[test]
fn no_process_survives_a_panicking_test() {
    run_helper("panic");
}

#[test]
fn no_process_survives_an_aborted_test_process() {
    run_helper("abort");
}
