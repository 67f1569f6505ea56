//! Golden tests: every sample Runtime of the repository (`config/samples/runtime-*.yaml`, shaped
//! as KEB writes them) converts, with the example configuration of `deploy/config`, to the
//! reviewed Shoot and structured-auth ConfigMap kept in `tests/golden/samples/<sample>.json`.
//!
//! Further goldens show what today's upstream extenders write when the example configuration
//! and samples do not trigger them (see their tests): `runtime-gcp-extenders` (the GCP sample,
//! changed), `runtime-aws-dual-stack` and `runtime-aws-acl` (the AWS sample, changed).
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

fn sample(name: &str) -> Runtime {
    let path = fixture::root().join("config/samples").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rt: Runtime =
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    rt.metadata.generation = Some(1);
    rt
}

/// The AWS sample with `networking.dualStack: true`, converted with
/// `converter.networking.enableDualStackIP`. Reviewed against upstream's converter:
/// `networking.ipFamilies: [IPv4, IPv6]` (`TestExtendWithNetworking` "Should configure an
/// DualStackIP shoot if the provider is AWS, landscape supports DualStack and DualStack is
/// enabled on RuntimeCR"), the infrastructure config's `dualStack.enabled` and the control plane
/// config's `loadBalancerController.enabled` (`TestProviderExtenderForCreateAWS` "Create dual
/// stack IP provider config for AWS with worker config and three zones"); everything else as
/// `runtime-aws`.
#[test]
fn dual_stack_converts_to_the_reviewed_shoot() {
    let mut rt = sample("runtime-aws.yaml");
    rt.spec.shoot.networking.dual_stack = Some(true);
    let mut cfg = fixture::config();
    cfg.converter.networking.enable_dual_stack_ip = true;
    fixture::check_with(
        vec![("runtime-aws-dual-stack".to_owned(), rt)],
        &fixture::root().join("tests/golden/samples"),
        &cfg,
    );
}

/// The AWS sample with `kubeAPIServer.acl.allowedCIDRs`, converted as with
/// `--api-server-acl-enabled` and upstream's test ConfigMap (operators `2.2.2.2/29`,
/// `3.3.3.3/29`, `4.4.4.4/29`, KCP `1.1.1.1/32`). Reviewed against upstream's converter: the
/// `acl` extension after the audit log, enabled, with the Runtime's CIDRs, then the operators',
/// then the KCP's (`TestNewApiServerACLExtension` "Should create enabled ACL extension with
/// user, operator and KCP IPs"; order of `TestNewExtensionsExtenderForCreate`); everything else
/// as `runtime-aws`.
#[test]
fn api_server_acl_converts_to_the_reviewed_shoot() {
    let mut rt = sample("runtime-aws.yaml");
    let api = rt
        .spec
        .shoot
        .kubernetes
        .get_or_insert_with(Default::default)
        .kube_api_server
        .get_or_insert_with(Default::default);
    api.acl = Some(
        serde_json::from_value(
            serde_json::json!({"allowedCIDRs": ["203.0.113.0/24", "198.51.100.7/32"]}),
        )
        .expect("acl"),
    );
    let opts = kim_shared::convert::ConvertOptions {
        acl: Some(kim_shared::convert::AclAddresses {
            operator_cidrs: ["2.2.2.2/29", "3.3.3.3/29", "4.4.4.4/29"]
                .map(String::from)
                .to_vec(),
            kcp_nat_ip: "1.1.1.1/32".into(),
        }),
        ..Default::default()
    };
    fixture::check_with_options(
        vec![("runtime-aws-acl".to_owned(), rt)],
        &fixture::root().join("tests/golden/samples"),
        &fixture::config(),
        &opts,
    );
}
