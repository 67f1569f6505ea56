//! Loading good configurations: the shipped example in `deploy/config/` and configurations with
//! only upstream's keys (upstream's own test files are loaded by the upstream-compatibility suite).
#![allow(clippy::unwrap_used)]

use kim_shared::config::{ConfigPaths, KimConfig, KubernetesVersionRejection, ProviderKind};
use std::path::PathBuf;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn example_dir() -> PathBuf {
    repo_root().join("deploy/config")
}

fn load_example() -> KimConfig {
    KimConfig::load(&ConfigPaths::new(
        example_dir().join("converter_config.json"),
    ))
    .unwrap_or_else(|e| panic!("the example config must load: {e}"))
}

/// An operator's configuration that narrows every provider with the optional lists of
/// `kim.providers` (the shipped one leaves them out: the CloudProfiles decide).
fn load_operator() -> KimConfig {
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
    KimConfig::from_parts(
        &read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/core/data/operator_converter_config.json"),
        ),
        Some(&read(example_dir().join("audit_log_tenants.json"))),
        Some(&read(example_dir().join("maintenance_windows.json"))),
    )
    .unwrap_or_else(|e| panic!("the operator config must load: {e}"))
}

/// A converter config with only upstream's keys, as upstream's docs describe it.
const UPSTREAM_CONVERTER: &str = include_str!("data/upstream_converter_config.json");

#[test]
fn the_example_config_loads_with_every_provider_and_no_warning() {
    let config = load_example();
    assert!(
        config.warnings().is_empty(),
        "warnings: {:?}",
        config.warnings()
    );
    for kind in ProviderKind::ALL {
        let p = config
            .provider(kind)
            .unwrap_or_else(|| panic!("example lacks provider {kind}"));
        // Narrowing is off: the Gardener CloudProfiles decide what exists.
        assert!(
            p.regions.is_none()
                && p.machine_types.is_none()
                && p.volume_types.is_none()
                && p.machine_images.is_none()
                && p.kubernetes.is_none(),
            "{kind} narrows what the CloudProfile offers"
        );
        assert!(
            p.check_kubernetes_version(&config.default_kubernetes_version().to_string())
                .is_ok()
        );
    }
    assert_eq!(config.converter.gardener.namespace(), "garden-kyma-dev");
    assert!(config.converter.dns.is_gardener_internal());
}

/// What a provider must offer: (provider, [(region, zones)], machine types, volume types).
type Offer = (
    &'static str,
    &'static [(&'static str, &'static [&'static str])],
    &'static [&'static str],
    &'static [&'static str],
);

#[test]
fn an_operators_narrowing_covers_what_it_lists() {
    let config = load_operator();
    let offers: [Offer; 5] = [
        (
            "aws",
            &[
                (
                    "eu-central-1",
                    &["eu-central-1a", "eu-central-1b", "eu-central-1c"],
                ),
                ("eu-west-1", &["eu-west-1a", "eu-west-1b", "eu-west-1c"]),
                ("us-east-1", &["us-east-1a", "us-east-1b", "us-east-1c"]),
            ],
            &["m6i.large", "m6i.xlarge", "m6i.2xlarge", "m5.large"],
            &["gp2", "gp3"],
        ),
        (
            "azure",
            &[
                ("westeurope", &["1", "2", "3"]),
                ("eastus", &["1", "2", "3"]),
                ("polandcentral", &["1", "2", "3"]),
            ],
            &["Standard_D2s_v5", "Standard_D4s_v5", "Standard_D8s_v5"],
            &["StandardSSD_LRS"],
        ),
        (
            "gcp",
            &[
                (
                    "europe-west3",
                    &["europe-west3-a", "europe-west3-b", "europe-west3-c"],
                ),
                (
                    "us-central1",
                    &["us-central1-a", "us-central1-b", "us-central1-c"],
                ),
            ],
            &["n2-standard-2", "n2-standard-4", "n2-standard-8"],
            &["pd-balanced", "pd-ssd"],
        ),
        (
            "openstack",
            &[("eu-de-1", &["eu-de-1a", "eu-de-1b", "eu-de-1d"])],
            &["g_c2_m8", "g_c4_m16"],
            &[],
        ),
        (
            "alicloud",
            &[("eu-central-1", &["eu-central-1a", "eu-central-1b"])],
            &[],
            &[],
        ),
    ];
    for (provider, regions, machines, volumes) in offers {
        let p = config
            .provider(provider)
            .unwrap_or_else(|| panic!("{provider} missing"));
        for (region, zones) in regions {
            assert!(p.allows_region(region), "{provider} lacks region {region}");
            for zone in *zones {
                assert!(
                    p.allows_zone(region, zone),
                    "{provider} {region} lacks zone {zone}"
                );
            }
        }
        for m in machines {
            assert!(
                p.allows_machine_type(m),
                "{provider} lacks machine type {m}"
            );
        }
        for v in volumes {
            assert!(p.allows_volume_type(v), "{provider} lacks volume type {v}");
        }
    }
    let aws = config.provider(ProviderKind::Aws).unwrap();
    assert!(!aws.allows_region("mars-north-1"));
    assert!(!aws.allows_zone("eu-central-1", "eu-central-1z"));
    assert!(!aws.allows_machine_type("Standard_D2s_v5"));
    assert!(!aws.allows_volume_type("pd-ssd"));
    // gp2 leaves out its quota class: `standard`, as in a CloudProfile.
    let classes: Vec<(&str, &str)> = aws
        .volume_types
        .iter()
        .flatten()
        .map(|v| (v.name.as_str(), v.class.as_str()))
        .collect();
    assert_eq!(classes, [("gp2", "standard"), ("gp3", "standard")]);
    // The image of upstream's Runtime samples stays usable.
    assert!(aws.allows_machine_image("gardenlinux", "1443.9.0"));
    assert!(!aws.allows_machine_image("ubuntu", "1443.9.0"));
}

#[test]
fn the_example_defaults_are_upstreams_only() {
    // Every default beyond upstream's (Kubernetes version, machine image) changes what KEB
    // asked for, so the shipped configuration names none (docs/defaults.md).
    let config = load_example();
    for kind in ProviderKind::ALL {
        let d = &config.provider(kind).unwrap().defaults;
        assert!(d.networking.is_none(), "{kind}: networking default");
        assert!(d.volume.is_none(), "{kind}: volume default");
        assert!(d.control_plane.is_none(), "{kind}: control plane default");
        assert!(d.workers.is_some_and(|w| w.minimum <= w.maximum));
        assert_eq!(config.default_machine_image(kind).name, "gardenlinux");
    }
    assert_eq!(config.cloud_profile_name(ProviderKind::Azure), "az");
    assert_eq!(
        config.cloud_profile_name(ProviderKind::Openstack),
        "converged-cloud-kyma"
    );
}

#[test]
fn gdch_shoots_and_the_webhook_use_upstreams_gdch_cloud_profile_unless_kim_names_one() {
    let mut config = load_example();
    config.converter.provider.gdch.cloud_profile_name = "cat-eu".into();
    assert_eq!(config.cloud_profile_name(ProviderKind::Gdch), "cat");
    config
        .kim
        .providers
        .get_mut(&ProviderKind::Gdch)
        .unwrap()
        .cloud_profile_name = None;
    assert_eq!(config.cloud_profile_name(ProviderKind::Gdch), "cat-eu");
    config.converter.provider.gdch.cloud_profile_name = String::new();
    assert_eq!(config.cloud_profile_name(ProviderKind::Gdch), "cat");
    // Other providers have no such upstream key.
    config
        .kim
        .providers
        .get_mut(&ProviderKind::Aws)
        .unwrap()
        .cloud_profile_name = None;
    config.converter.provider.gdch.cloud_profile_name = "cat-eu".into();
    assert_eq!(config.cloud_profile_name(ProviderKind::Aws), "aws");
}

#[test]
fn kubernetes_versions_are_checked_against_minimum_list_and_preview() {
    let config = load_operator();
    let aws = config.provider(ProviderKind::Aws).unwrap();
    assert!(aws.check_kubernetes_version("1.35").is_ok());
    assert!(aws.check_kubernetes_version("1.34.4").is_ok());
    assert!(
        aws.check_kubernetes_version("1.36.3").is_ok(),
        "a preview version named exactly is allowed"
    );
    assert!(
        matches!(
            aws.check_kubernetes_version("1.36"),
            Err(KubernetesVersionRejection::NotOffered { .. })
        ),
        "1.36 only has a preview version, which Gardener never picks for a minor-only version"
    );
    let err = aws.check_kubernetes_version("1.28.7").unwrap_err();
    assert_eq!(
        err.to_string(),
        "1.28.7 is older than the minimum version 1.33"
    );
    let err = aws.check_kubernetes_version("1.34.1").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("1.34.1 is not offered; offered versions: 1.36.3, 1.35.4"),
        "{err}"
    );
    assert!(matches!(
        aws.check_kubernetes_version("latest"),
        Err(KubernetesVersionRejection::Unparsable(_))
    ));
}

#[test]
fn the_example_audit_log_and_maintenance_files_are_read_relative_to_the_converter_config() {
    let config = load_example();
    let tenant = config.audit_log_tenant("aws", "eu-central-1").unwrap();
    assert_eq!(tenant.secret_name, "auditlog-credentials-aws");
    let window = config.maintenance_window("eu-central-1").unwrap();
    assert_eq!(
        (window.begin.as_str(), window.end.as_str()),
        ("200000+0000", "000000+0000")
    );
    assert_eq!(window.duration_seconds(), 4 * 3600);
}

#[test]
fn from_parts_needs_no_files() {
    let audit = r#"{"aws": {"eu-central-1": {"tenantID": "79c64792-9c1e-4c1b-9941-ef7560dd3eae",
        "serviceURL": "https://auditlog.example.com:3001", "secretName": "auditlog-secret"}}}"#;
    let config = KimConfig::from_parts(UPSTREAM_CONVERTER, Some(audit), None).unwrap();
    assert!(config.audit_log_tenant("aws", "eu-central-1").is_ok());
    assert!(!config.audit_log_tenants.is_empty());
    assert!(config.maintenance_windows.0.is_empty());

    let config = KimConfig::from_parts(
        UPSTREAM_CONVERTER,
        None,
        Some(r#"{"westeurope": {"begin": "220000+0100", "end": "020000+0100"}}"#),
    )
    .unwrap();
    assert!(config.audit_log_tenants.is_empty());
    assert_eq!(
        config
            .maintenance_window("westeurope")
            .unwrap()
            .duration_seconds(),
        4 * 3600
    );
}

/// Today's upstream (since 2025-10) reads `enableMachineImageVersionAutoUpdate` only; the
/// doubled "Version" key it read before is ignored with a warning that names the right one.
#[test]
fn the_machine_image_auto_update_key_is_upstreams_of_today() {
    const KEY: &str = r#""enableMachineImageVersionAutoUpdate": false"#;
    assert!(UPSTREAM_CONVERTER.contains(KEY));
    let on = UPSTREAM_CONVERTER.replace(KEY, r#""enableMachineImageVersionAutoUpdate": true"#);
    let old_key =
        UPSTREAM_CONVERTER.replace(KEY, r#""enableMachineImageVersionVersionAutoUpdate": true"#);
    let neither = UPSTREAM_CONVERTER.replace(&format!("{KEY},"), "");
    for (name, json, expected, warned) in [
        ("on", &on, true, false),
        ("off", &UPSTREAM_CONVERTER.to_owned(), false, false),
        ("neither", &neither, false, false),
        ("the old key", &old_key, false, true),
    ] {
        let config =
            KimConfig::from_parts(json, None, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            config
                .converter
                .kubernetes
                .enable_machine_image_version_auto_update,
            expected,
            "{name}"
        );
        let warnings: Vec<_> = config.warnings().iter().map(|w| w.to_string()).collect();
        assert_eq!(
            warnings
                .iter()
                .any(|w| w.contains("enableMachineImageVersionVersionAutoUpdate")
                    && w.contains("the key is enableMachineImageVersionAutoUpdate")),
            warned,
            "{name}: {warnings:?}"
        );
    }
}

#[test]
fn upstream_documentation_capitalisation_of_oidc_keys_loads() {
    // Upstream's docs write `ClientID`, `IssuerURL`, ...; Go's JSON decoder accepts that.
    let json = UPSTREAM_CONVERTER
        .replace("\"clientID\"", "\"ClientID\"")
        .replace("\"groupsClaim\"", "\"GroupsClaim\"")
        .replace("\"issuerURL\"", "\"IssuerURL\"")
        .replace("\"signingAlgs\"", "\"SigningAlgs\"")
        .replace("\"usernameClaim\"", "\"UsernameClaim\"")
        .replace("\"usernamePrefix\"", "\"UsernamePrefix\"");
    let config = KimConfig::from_parts(&json, None, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        config.cluster.default_shared_ias_tenant.issuer_url,
        "https://some.others.tokens.com"
    );
}

#[test]
fn keys_of_newer_upstream_versions_load_and_unknown_ones_are_reported() {
    let json = UPSTREAM_CONVERTER.replace(
        r#""defaultVersion": "1.29","#,
        r#""defaultVersion": "1.29", "kubeApiServer": {"acl": {"configMapName": "kcp-acl"}}, "someFutureKey": 1,"#,
    );
    let config = KimConfig::from_parts(&json, None, None).unwrap_or_else(|e| panic!("{e}"));
    let acl = config
        .converter
        .kubernetes
        .kube_api_server
        .as_ref()
        .and_then(|k| k.acl.as_ref());
    assert_eq!(
        acl.and_then(|a| a.config_map_name.as_deref()),
        Some("kcp-acl")
    );
    let warnings: Vec<String> = config.warnings().iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "converter_config.json: converter.kubernetes.someFutureKey: unknown key, ignored (check its spelling)"
        ]
    );
}

#[test]
fn a_loaded_converter_config_serializes_back_to_the_same_configuration() {
    let config = load_example();
    let json = serde_json::json!({
        "converter": config.converter,
        "cluster": config.cluster,
        "kim": config.kim,
    })
    .to_string();
    let again = KimConfig::from_parts(&json, None, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.converter, config.converter);
    assert_eq!(again.cluster, config.cluster);
    assert_eq!(again.kim, config.kim);
    // Written back with upstream's key, so upstream KIM reads the flag too.
    assert!(json.contains("\"enableMachineImageVersionAutoUpdate\":false"));
}

/// The keys today's upstream added to `converter_config.json` load as upstream writes them,
/// without a warning, and give the values the conversion uses.
#[test]
fn todays_upstream_converter_keys_load_without_warning() {
    let mut v: serde_json::Value = serde_json::from_str(UPSTREAM_CONVERTER).unwrap();
    let converter = &mut v["converter"];
    converter["kubernetes"]["kubeApiServer"] = serde_json::json!({
        "maxTokenExpiration": "721h",
        "acl": {"configMapName": "acl-ip-list"},
        "featureGates": {"ImageVolume": true},
        "runtimeConfig": {"resource.k8s.io/v1beta2": true}
    });
    converter["kubernetes"]["kubelet"] =
        serde_json::json!({"featureGates": {"ImageVolume": false}});
    converter["provider"]["worker"] =
        serde_json::json!({"defaultMaxEvictRetries": "3", "defaultMachineDrainTimeout": "20m"});
    converter["provider"]["gdch"] = serde_json::json!({
        "cloudProfileName": "cat",
        "parentReferenceName": "org",
        "parentReferenceNamespace": "gpc-system",
        "parentReferenceType": "Organization"
    });
    converter["tolerations"] =
        serde_json::json!({"me-central2": [{"key": "ksa-assured-workload"}]});
    converter["networking"] = serde_json::json!({"enableDualStackIP": true});
    converter["gardener"]["enableCredentialBinding"] = serde_json::json!(true);
    let config =
        KimConfig::from_parts(&v.to_string(), None, None).unwrap_or_else(|e| panic!("{e}"));
    assert!(config.warnings().is_empty(), "{:?}", config.warnings());
    assert!(config.converter.networking.enable_dual_stack_ip);
    assert_eq!(
        config.converter.gardener.enable_credential_binding,
        Some(true)
    );
    assert_eq!(config.acl_config_map_name(), Some("acl-ip-list"));

    let c = &config.converter;
    let api = c.kubernetes.api_server();
    assert_eq!(api.max_token_expiration().as_secs(), 721 * 3600);
    assert!(api.feature_gates().unwrap()["ImageVolume"]);
    assert!(api.runtime_config().unwrap()["resource.k8s.io/v1beta2"]);
    assert!(!c.kubernetes.kubelet_feature_gates()["ImageVolume"]);
    assert_eq!(c.provider.worker.max_evict_retries(), 3);
    assert_eq!(c.provider.worker.machine_drain_timeout().as_secs(), 20 * 60);
    assert_eq!(c.provider.gdch.cloud_profile_name, "cat");
    assert_eq!(c.provider.gdch.parent_reference_type, "Organization");
    assert_eq!(c.tolerations["me-central2"][0].key, "ksa-assured-workload");
    // Written back with the same keys, so the file stays readable by upstream.
    let written = serde_json::to_value(c).unwrap();
    assert_eq!(
        written["kubernetes"]["kubeApiServer"]["maxTokenExpiration"],
        "721h"
    );
    assert_eq!(
        written["provider"]["worker"]["defaultMachineDrainTimeout"],
        "20m"
    );
    assert_eq!(
        written["kubernetes"]["kubelet"]["featureGates"]["ImageVolume"],
        false
    );
    assert_eq!(written["networking"]["enableDualStackIP"], true);
    assert_eq!(written["gardener"]["enableCredentialBinding"], true);
}

/// Upstream writes the deprecated `secretBindingName` when `enableCredentialBinding` is false;
/// we always write `credentialsBindingName`, and say so when the key asks otherwise.
#[test]
fn credential_binding_switched_off_is_a_warning() {
    let mut v: serde_json::Value = serde_json::from_str(UPSTREAM_CONVERTER).unwrap();
    v["converter"]["gardener"]["enableCredentialBinding"] = serde_json::json!(false);
    let config =
        KimConfig::from_parts(&v.to_string(), None, None).unwrap_or_else(|e| panic!("{e}"));
    let warnings: Vec<String> = config.warnings().iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "converter_config.json: converter.gardener.enableCredentialBinding: false is not honoured"
        ),
        "{warnings:?}"
    );
    assert!(
        !config.converter.networking.enable_dual_stack_ip,
        "off by default"
    );
}
