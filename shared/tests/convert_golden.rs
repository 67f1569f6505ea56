//! Golden tests: every sample Runtime of the repository (`config/samples/runtime-*.yaml`, shaped
//! as KEB writes them) converts, with the example configuration of `deploy/config`, to the
//! reviewed Shoot and structured-auth ConfigMap kept in `tests/golden/samples/<sample>.json`.
//!
//! A further golden, `runtime-gcp-extenders` (the GCP sample, changed), shows what today's upstream extenders write
//! when the example configuration and samples do not trigger them (see its test).
//!
//! `UPDATE_GOLDEN=1 cargo test -p kim-shared --test convert_golden` rewrites the files; review the
//! diff before committing it. The same check over upstream's samples is part of the
//! upstream-compatibility suite (`tests/upstream_compat/golden.rs`).

#[path = "golden_fixture/mod.rs"]
mod fixture;

use kim_shared::api::Runtime;

#[test]
fn sample_runtimes_convert_to_the_reviewed_shoots() {
    let dir = fixture::root().join("config/samples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "yaml")
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("runtime-"))
        })
        .collect();
    files.sort();
    assert!(
        files.len() >= 7,
        "expected the sample Runtimes in {}",
        dir.display()
    );
    let samples = files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let mut rt: Runtime = serde_yaml_ng::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            // As the controller sees it once stored.
            rt.metadata.generation = Some(1);
            let name = path
                .file_stem()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            (name, rt)
        })
        .collect();
    fixture::check(samples, &fixture::root().join("tests/golden/samples"));
}

/// The GCP sample moved to `me-central2` with a pool above the per-node `maxPods`, converted with
/// kube-apiserver and kubelet feature gates and a runtime config. Reviewed against upstream's
/// converter: tolerations `ksa-assured-workload` of the region (`TestTolerationsExtender` "Should
/// extend Tolerations for me-central2"), `maxPods` 300 -> 254 (`TestMaxPodsClamping` "Clamp
/// maxPods when higher than calculated from pods CIDR"), `featureGates` on kube-apiserver and
/// kubelet (`TestFeatureGatesExtender`), `runtimeConfig` (`TestKubernetesRuntimeConfigExtender`),
/// plus what every golden has (cleanup annotations, machine controller manager defaults, service
/// account settings).
#[test]
fn todays_upstream_extenders_convert_to_the_reviewed_shoot() {
    let path = fixture::root().join("config/samples/runtime-gcp.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rt: Runtime =
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    rt.metadata.generation = Some(1);
    let shoot = &mut rt.spec.shoot;
    shoot.region = "me-central2".into();
    let worker = &mut shoot.provider.workers[0];
    worker.zones = Some(
        ["me-central2-a", "me-central2-b", "me-central2-c"]
            .map(String::from)
            .to_vec(),
    );
    worker.kubernetes = Some(
        serde_json::from_value(serde_json::json!({"kubelet": {"maxPods": 300}}))
            .expect("worker kubernetes"),
    );

    let mut cfg = fixture::config();
    let k = &mut cfg.converter.kubernetes;
    let api = k.kube_api_server.get_or_insert_with(Default::default);
    api.feature_gates = [("ImageVolume".to_owned(), true)].into();
    api.runtime_config = [("resource.k8s.io/v1beta2".to_owned(), true)].into();
    k.kubelet = Some(
        serde_json::from_value(serde_json::json!({"featureGates": {"ImageVolume": true}}))
            .expect("kubelet defaults"),
    );
    fixture::check_with(
        vec![("runtime-gcp-extenders".to_owned(), rt)],
        &fixture::root().join("tests/golden/samples"),
        &cfg,
    );
}
