//! Golden tests: every sample Runtime of the repository (`config/samples/runtime-*.yaml`, shaped
//! as KEB writes them) converts, with the example configuration of `deploy/config`, to the
//! reviewed Shoot and structured-auth ConfigMap kept in `tests/golden/samples/<sample>.json`.
//!
//! Further goldens show what today's upstream extenders write when the example configuration
//! and samples do not trigger them, each from a sample changed in its test:
//! `runtime-gcp-extenders`, `runtime-aws-dual-stack` and `runtime-aws-acl`, `runtime-gdch` (the
//! GDCH provider) and `runtime-aws-registry-cache` (an update with registry caches and
//! `maxParallelImagePulls`; a worker `controlPlane` is refused at admission, see
//! `docs/validation.md`).
//!
//! `UPDATE_GOLDEN=1 cargo test -p kim-shared --test core convert_golden` rewrites the files; review the
//! diff before committing it. The same check over upstream's samples is part of the
//! upstream-compatibility suite (`tests/upstream_compat/golden.rs`).

use crate::golden_fixture as fixture;
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

/// Reads a repository sample as the controller sees it once stored (generation 1).
fn repository_sample(name: &str) -> Runtime {
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
    let mut rt = repository_sample("runtime-aws.yaml");
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
    let mut rt = repository_sample("runtime-aws.yaml");
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

/// The GCP sample moved to the GDCH provider (region `us-west16`, three zones, nodes
/// `10.180.0.0/16`). Reviewed against upstream's converter: cloud profile `cat` from
/// `converter.provider.gdch.cloudProfileName` (`TestCloudProfileExtender` "Override cloud profile
/// for gdch when provided"), the infrastructure config with `nodeCIDR`, three `/18` zone subnets
/// and `enableEgress` (`TestProviderExtenderForCreateGDCH` "Create provider specific config for
/// GDCH with three zones (reference input /16 -> three /18)"), the parent reference of
/// `converter.provider.gdch`, the TypeMeta-only control plane config, and calico with VXLAN and
/// overlay (`TestNetworkingExtender` "Should configure VXLan overlay networking if the provider
/// is GDCH").
#[test]
fn the_gdch_provider_converts_to_the_reviewed_shoot() {
    let mut rt = repository_sample("runtime-gcp.yaml");
    let shoot = &mut rt.spec.shoot;
    shoot.region = "us-west16".into();
    shoot.secret_binding_name = "kyma-gdch".into();
    shoot.networking.nodes = "10.180.0.0/16".into();
    shoot.provider.type_ = kim_shared::api::ProviderType::Gdch;
    let worker = &mut shoot.provider.workers[0];
    worker.machine.type_ = "n2-standard-4-gdc".into();
    if let Some(volume) = worker.volume.as_mut() {
        volume.type_ = Some("standard-rwo".into());
    }
    worker.zones = Some(
        ["us-west16-a", "us-west16-b", "us-west16-c"]
            .map(String::from)
            .to_vec(),
    );
    let findings = kim_shared::validation::validate_create(&rt, &fixture::config());
    assert!(findings.is_allowed(), "{:?}", findings.violations);
    fixture::check(
        vec![("runtime-gdch".to_owned(), rt)],
        &fixture::root().join("tests/golden/samples"),
    );
}

/// The AWS sample with two registry caches (one with credentials), `maxParallelImagePulls` on
/// the main pool, converted as an update over the Shoot it was created as (upstream writes the
/// registry cache on patch only). Reviewed against upstream's converter: the `registry-cache`
/// extension with both caches, `secretReferenceName` = the garden Secret of the cache's UID and
/// no `http` (`TestNewRegistryCacheExtension` "should create registry cache extension" and
/// "should omit secret reference when SecretReferenceName is nil"), the Secret as a
/// `spec.resources` entry of that name (`TestNewResourcesExtenderForPatch` "should remove old
/// reg-cache resources and add new ones"), the pool's kubelet passed on unchanged
/// (`assertProvider` of the provider tests copies the Runtime's workers).
#[test]
fn registry_caches_on_update_convert_to_the_reviewed_shoot() {
    let mut rt = repository_sample("runtime-aws.yaml");
    rt.spec.image_registry_cache = Some(
        serde_json::from_value(serde_json::json!([
            {"name": "quay", "namespace": "kyma-system", "uid": "9c6f3a52-0d1e-4d4b-a7a4-2a6c1f0e2b11",
             "config": {"upstream": "quay.io", "remoteURL": "https://quay.io",
                        "volume": {"size": "20Gi", "storageClassName": "default"},
                        "garbageCollection": {"ttl": "72h"}, "http": {"tls": true},
                        "secretReferenceName": "quay-credentials",
                        "proxy": {"httpsProxy": "http://proxy.kyma-system:3128"}}},
            {"name": "docker", "namespace": "default", "uid": "5e1b8f2d-7c3a-4e6f-9b0d-8a2c4e6f1a22",
             "config": {"upstream": "docker.io"}}
        ]))
        .expect("caches"),
    );
    let kubelet = rt.spec.shoot.provider.workers[0]
        .kubernetes
        .get_or_insert_with(Default::default)
        .kubelet
        .get_or_insert_with(Default::default);
    kubelet.max_parallel_image_pulls = Some(5);
    let cfg = fixture::config();
    let findings = kim_shared::validation::validate_create(&rt, &cfg);
    assert!(findings.is_allowed(), "{:?}", findings.violations);
    let opts = kim_shared::convert::ConvertOptions {
        registry_cache_secrets: [(
            "9c6f3a52-0d1e-4d4b-a7a4-2a6c1f0e2b11".to_owned(),
            "reg-cache-9c6f3a52".to_owned(),
        )]
        .into(),
        ..Default::default()
    };
    fixture::check_patch(
        "runtime-aws-registry-cache",
        &rt,
        &cfg,
        &opts,
        &fixture::root().join("tests/golden/samples"),
    );
}
