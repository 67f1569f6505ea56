//! Every sample Runtime of the repository (`config/samples/runtime-*.yaml`, shaped as KEB writes
//! them) is provisioned by the controller: Shoot accepted by the real gardener-apiserver,
//! finished by the simulator, GardenerCluster created, the sample's administrators bound in the
//! cluster, Runtime `Ready` with upstream's conditions; then deleted, finalizer last. The same
//! over upstream's samples is part of the upstream-compatibility suite.
//!
//! Its own environment: every Runtime of an environment gets the same shoot cluster, where each
//! Runtime keeps only its own administrators' bindings, so the other controller tests' Runtimes
//! would remove the samples' bindings while this test checks them.

use anyhow::{Result, anyhow, ensure};
use kim_tests::controller::*;
use kim_tests::testenv::{TestEnv, TestEnvOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_sample_runtime_is_provisioned_and_deleted() -> Result<()> {
    let dir = kim_tests::testenv::repo_root().join("config/samples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .is_some_and(|n| n.starts_with("runtime-") && n.ends_with(".yaml"))
        })
        .collect();
    files.sort();
    ensure!(
        files.len() >= 7,
        "expected the sample Runtimes in {}",
        dir.display()
    );
    let env = &TestEnv::start(TestEnvOptions::default())
        .await
        .map_err(|e| anyhow!("the samples test's own environment: {e}"))?;
    provision_and_delete_samples(env, "ctl-samples", read_samples(&files)?).await
}
