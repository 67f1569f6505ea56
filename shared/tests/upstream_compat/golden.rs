//! Golden tests: every upstream sample Runtime (the baseline's `config/samples` and
//! `docs/adr/assets/runtime-examples`) converts to the reviewed Shoot and structured-auth
//! ConfigMap kept in `tests/golden/convert/<sample>.json`, with the example configuration of
//! `deploy/config`.
//!
//! `UPDATE_GOLDEN=1 make upstream-compat` rewrites the files; review the
//! diff before committing it.
//!
//! Review (done for every file, field by field, against upstream's converter and Gardener's
//! Shoot, extension and provider-config API):
//! - metadata: name = `spec.shoot.name`; namespace `garden-kyma-dev` (`converter.gardener.projectName`);
//!   annotations runtime-id (label), runtime-generation (1, see `sample`), licence-type only for
//!   the samples with `licenceType` (aws-trial, azure-lite); labels `account`/`subaccount` from
//!   the account labels.
//! - spec.purpose/region/networking/controlPlane copied; `credentialsBindingName` = the Runtime's
//!   `secretBindingName` (no `secretBindingName`); `cloudProfile` {CloudProfile, aws|az|gcp|
//!   converged-cloud-kyma} (no `cloudProfileName`); `exposureClassName: converged-cloud-internet`
//!   only for openstack; `seedSelector` region label only with `enforceSeedLocation: true`;
//!   `accessRestrictions` eu-access-only only for platform region cf-eu11 (not cd-eu11, cf-us10);
//!   no `spec.dns` (the example config uses Gardener-internal DNS).
//! - kubernetes: the Runtime's version or the default `1.35`; `kubeAPIServer.structuredAuthentication`
//!   `structured-auth-config-<shoot>` and no `oidcConfig`; audit policy ConfigMap `audit-policy`
//!   for regions with a tenant (all samples); no `enableStaticTokenKubeconfig`.
//! - maintenance: autoUpdate kubernetesVersion true, machineImageVersion false; timeWindow only for
//!   production purpose (eu-central-1/eu-de-1 20:00-00:00, eastus 04:00-08:00, us-central1 07:00-11:00).
//! - provider: workers copied with the sample's image; AWS workers get the IMDSv2 WorkerConfig
//!   (enableIMDSv2 true); workersSettings.sshAccess.enabled false; infrastructure and control plane
//!   configs in the provider extensions' v1alpha1 shapes with upstream's zone subnets (AWS /16:
//!   10.250.0.0/19, .32.0/20, .48.0/20, ...; AWS /22: .0.0/25, .0.128/26, .0.192/26; Azure /22: .0.0/25,
//!   .0.128/25, .1.0/25 with NAT gateways; GCP control plane zone = first zone; openstack
//!   floating pool FloatingIP-external-kyma-01 and load balancer f5).
//! - resources: `auditlog-credentials` -> Secret of the region's tenant.
//! - extensions in upstream order: networking filter (disabled: every sample has egress off, so no
//!   blackholing config), cert (shootIssuers), DNS (internal: replication on, sync from spec, no
//!   providers), OIDC (disabled false), audit log (tenant of the region).
//! - today's upstream extenders (reviewed against its converter and tests, name of the test case
//!   in parentheses): the three cleanup grace-period annotations 120/120/60 on every Shoot
//!   (`TestAnnotationsExtender` "Create with basic annotations"); `kubernetes.kubelet: {}` and no
//!   kube-apiserver `featureGates`/`runtimeConfig`, as the example config sets none
//!   (`TestFeatureGatesExtender`, `TestKubernetesRuntimeConfigExtender`);
//!   `kubeAPIServer.serviceAccountConfig {extendTokenExpiration: false, maxTokenExpiration:
//!   720h0m0s}` (`TestNewExpirationTimeExtender`, "between boundaries" with the example's `720h`);
//!   every pool's `machineControllerManager {machineDrainTimeout: 15m0s, maxEvictRetries: 2}`
//!   (`TestApplyMachineControllerManagerConfig` "nil settings get defaults applied"); no sample
//!   sets `maxPods` or a gVisor runtime, so `TestMaxPodsClamping` and `TestConverter_GVisorNetRaw`
//!   are covered by the unit tests only; no me-central2 sample, so no tolerations
//!   (`TestTolerationsExtender` "Should not extend Tolerations for eu-de-1").
//! - structured auth ConfigMap: the sample's `oidcConfig` (issuer + client present): audience =
//!   clientID, username claim `sub` with the legacy default prefix `<issuer>#` (the samples set no
//!   usernamePrefix), groups claim `groups` with prefix "".

use kim_shared::api::Runtime;
use std::path::{Path, PathBuf};

// The golden-file check of the kim-shared tests (`tests/core`); this suite uses a part of it.
#[allow(dead_code)]
#[path = "../core/golden_fixture.rs"]
mod fixture;

fn upstream() -> PathBuf {
    crate::baseline()
}

/// The samples, by golden name.
fn samples() -> Vec<(String, PathBuf)> {
    let mut out = vec![(
        "infrastructuremanager_v1_runtime".to_owned(),
        upstream().join("config/samples/infrastructuremanager_v1_runtime.yaml"),
    )];
    let dir = upstream().join("docs/adr/assets/runtime-examples");
    let mut examples: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{} is missing: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    examples.sort();
    assert_eq!(
        examples.len(),
        9,
        "expected the nine ADR runtime examples in {}",
        dir.display()
    );
    for p in examples {
        let stem = p
            .file_stem()
            .expect("file name")
            .to_string_lossy()
            .into_owned();
        out.push((stem, p));
    }
    out
}

/// A sample as the controller would see it once stored: generation 1. The sap-converged-cloud
/// example writes `enforceSeedLocation: "true"` (a string), which upstream's own CRD rejects;
/// that is asserted and then corrected to the boolean the author meant.
fn sample(path: &Path) -> Runtime {
    let mut text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if text.contains("enforceSeedLocation: \"true\"") {
        let err = serde_yaml_ng::from_str::<Runtime>(&text).expect_err("a string is not a boolean");
        assert!(
            err.to_string().contains("enforceSeedLocation") || err.to_string().contains("boolean"),
            "{err}"
        );
        text = text.replace("enforceSeedLocation: \"true\"", "enforceSeedLocation: true");
    }
    let mut rt: Runtime =
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    rt.metadata.generation = Some(1);
    rt
}

#[test]
fn upstream_samples_convert_to_the_reviewed_shoots() {
    let samples = samples()
        .into_iter()
        .map(|(name, path)| {
            let rt = sample(&path);
            (name, rt)
        })
        .collect();
    fixture::check(samples, &fixture::root().join("tests/golden/convert"));
}
