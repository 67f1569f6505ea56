//! Refusing wrong configurations: every message names the file, the key path and what is
//! expected.
#![allow(clippy::unwrap_used)]

use kim_shared::config::{ConfigError, ConfigPaths, KimConfig};
use serde_json::{Value, json};
use std::path::PathBuf;

/// An operator's configuration: the shipped one with every optional list and default of
/// `kim.providers` filled in (the shipped one leaves them out), so that each key can be broken.
fn example() -> Value {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/core/data/operator_converter_config.json"),
    )
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The example converter config changed by `edit`, loaded without the other files.
fn load_edited(edit: impl FnOnce(&mut Value)) -> Result<KimConfig, ConfigError> {
    let mut v = example();
    edit(&mut v);
    KimConfig::from_parts(&v.to_string(), None, None)
}

fn remove(v: &mut Value, pointer: &str) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let removed = v
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .and_then(|o| o.remove(key));
    assert!(removed.is_some(), "{pointer} is not in the example");
}

/// Sets the value at `pointer`; the key is added when its parent object exists.
fn set(v: &mut Value, pointer: &str, value: Value) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    match v.pointer_mut(parent) {
        Some(Value::Object(o)) => {
            o.insert(key.to_owned(), value);
        }
        Some(Value::Array(a)) => {
            let i: usize = key.parse().unwrap();
            assert!(i < a.len(), "{pointer} is not in the example");
            a[i] = value;
        }
        _ => panic!("{pointer} is not in the example"),
    }
}

/// Asserts that loading failed with exactly `message` (file, key path and expectation),
/// followed at most by the location `(line L, column C)`.
#[track_caller]
fn refused(result: Result<KimConfig, ConfigError>, message: &str) {
    match result {
        Ok(_) => panic!("accepted, expected: {message}"),
        Err(e) => {
            let text = e.to_string();
            let without_location = match text.rsplit_once(" (line ") {
                Some((head, tail)) if tail.contains(", column ") && tail.ends_with(')') => head,
                _ => text.as_str(),
            };
            assert_eq!(without_location, message);
        }
    }
}

/// Asserts that loading failed and that one of the problems is `path: message`.
#[track_caller]
fn refused_with(result: Result<KimConfig, ConfigError>, path: &str, message: &str) {
    let err = match result {
        Ok(_) => panic!("accepted, expected {path}: {message}"),
        Err(e) => e,
    };
    let text = err.to_string();
    assert!(text.starts_with("converter_config.json: "), "{text}");
    assert!(
        err.paths().contains(&path),
        "no problem at {path} in: {text}"
    );
    assert!(
        text.contains(&format!("{path}: {message}")),
        "expected `{path}: {message}` in: {text}"
    );
}

#[test]
fn every_required_upstream_key_is_named_when_missing() {
    for pointer in [
        "/converter",
        "/cluster",
        "/converter/kubernetes",
        "/converter/kubernetes/defaultVersion",
        "/converter/kubernetes/defaultOperatorOidc",
        "/converter/kubernetes/defaultOperatorOidc/clientID",
        "/converter/kubernetes/defaultOperatorOidc/groupsClaim",
        "/converter/kubernetes/defaultOperatorOidc/issuerURL",
        "/converter/kubernetes/defaultOperatorOidc/signingAlgs",
        "/converter/kubernetes/defaultOperatorOidc/usernameClaim",
        "/converter/kubernetes/defaultOperatorOidc/usernamePrefix",
        "/converter/machineImage",
        "/converter/machineImage/defaultName",
        "/converter/machineImage/defaultVersion",
        "/converter/gardener",
        "/converter/gardener/projectName",
        "/converter/auditLogging",
        "/converter/auditLogging/policyConfigMapName",
        "/converter/auditLogging/tenantConfigPath",
        "/cluster/defaultSharedIASTenant",
        "/cluster/defaultSharedIASTenant/clientID",
        "/cluster/defaultSharedIASTenant/usernamePrefix",
    ] {
        let result = load_edited(|v| remove(v, pointer));
        let path = pointer.trim_start_matches('/').replace('/', ".");
        let err = match result {
            Ok(_) => panic!("accepted a config without {path}"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.starts_with(&format!(
                "converter_config.json: {path}: missing required key"
            )),
            "{path}: {err}"
        );
    }
}

#[test]
fn optional_upstream_keys_may_be_left_out() {
    for pointer in [
        "/converter/dns",
        "/converter/provider",
        "/converter/maintenanceWindow",
        "/converter/kubernetes/enableKubernetesVersionAutoUpdate",
        "/converter/kubernetes/enableMachineImageVersionAutoUpdate",
        "/kim",
        "/kim/providers",
        "/kim/providers/alicloud/defaults",
        "/kim/providers/aws/regions",
        "/kim/providers/aws/defaults/controlPlane",
    ] {
        assert!(
            load_edited(|v| remove(v, pointer)).is_ok(),
            "{pointer} should be optional"
        );
    }
}

#[test]
fn missing_keys_of_the_extension_are_named() {
    for (pointer, path) in [
        (
            "/kim/providers/aws/regions/2/zones",
            "kim.providers.aws.regions[2].zones",
        ),
        (
            "/kim/providers/aws/machineTypes/0/memory",
            "kim.providers.aws.machineTypes[0].memory",
        ),
        (
            "/kim/providers/azure/defaults/volume/size",
            "kim.providers.azure.defaults.volume.size",
        ),
        (
            "/kim/providers/gcp/kubernetes/versions/0/version",
            "kim.providers.gcp.kubernetes.versions[0].version",
        ),
    ] {
        let err = load_edited(|v| remove(v, pointer)).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "converter_config.json: {path}: missing required key"
            )),
            "{err}"
        );
    }
}

#[test]
fn wrong_types_name_the_key_and_the_expected_type() {
    let err =
        load_edited(|v| set(v, "/converter/provider/aws/enableIMDSv2", json!("true"))).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(
            "converter_config.json: converter.provider.aws.enableIMDSv2: expected a boolean, found string \"true\""
        ),
        "{text}"
    );
    assert!(
        text.contains("(line 1, column"),
        "the location is part of the message: {text}"
    );

    let err = load_edited(|v| set(v, "/kim/providers/aws/machineTypes/1/cpu", json!("four")))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("converter_config.json: kim.providers.aws.machineTypes[1].cpu: expected u32, found string \"four\""),
        "{err}"
    );

    let err = load_edited(|v| {
        set(
            v,
            "/kim/providers/gcp/regions",
            json!({"name": "europe-west3"}),
        )
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with(
            "converter_config.json: kim.providers.gcp.regions: expected a sequence, found map"
        ),
        "{err}"
    );
}

#[test]
fn wrong_values_name_the_key_and_what_is_valid() {
    let cases: [(&str, Value, &str); 9] = [
        (
            "/converter/kubernetes/defaultVersion",
            json!("latest"),
            "converter.kubernetes.defaultVersion: expected a Kubernetes version such as `1.34` or `1.34.2`, found `latest`",
        ),
        (
            "/kim/providers/aws/defaults/networking/pods",
            json!("10.96.0.0/33"),
            "kim.providers.aws.defaults.networking.pods: expected a CIDR such as `10.250.0.0/16`, found `10.96.0.0/33`",
        ),
        (
            "/kim/providers/aws/defaults/networking/nodes",
            json!("10.250.1.0/16"),
            "kim.providers.aws.defaults.networking.nodes: `10.250.1.0/16` is not in canonical form: write `10.250.0.0/16`",
        ),
        (
            "/kim/providers/aws/defaults/volume/size",
            json!("80GB"),
            "kim.providers.aws.defaults.volume.size: expected a size in whole gibibytes such as `80Gi`, found `80GB`",
        ),
        (
            "/kim/providers/aws/machineTypes/0/memory",
            json!("lots"),
            "kim.providers.aws.machineTypes[0].memory: expected a memory quantity such as `8Gi` or `512Mi`, found `lots`",
        ),
        (
            "/kim/providers/azure/defaults/controlPlane/highAvailability/failureTolerance/type",
            json!("region"),
            "kim.providers.azure.defaults.controlPlane.highAvailability.failureTolerance.type: unknown variant `region`, expected `node` or `zone`",
        ),
        (
            "/kim/providers/aws/kubernetes/minimumVersion",
            json!("1.x"),
            "kim.providers.aws.kubernetes.minimumVersion: expected a Kubernetes version such as `1.34` or `1.34.2`, found `1.x`",
        ),
        (
            "/kim/providers/aws/machineTypes/0/architecture",
            json!("riscv"),
            "kim.providers.aws.machineTypes[0].architecture: unknown variant `riscv`, expected `amd64` or `arm64`",
        ),
        (
            "/kim/providers/aws/machineImages/0/versions/0/classification",
            json!("expired"),
            "kim.providers.aws.machineImages[0].versions[0].classification: unknown variant `expired`, expected one of `preview`, `supported`, `deprecated`",
        ),
    ];
    for (pointer, value, expected) in cases {
        let err = load_edited(|v| set(v, pointer, value))
            .unwrap_err()
            .to_string();
        let expected = format!("converter_config.json: {expected}");
        assert!(
            err.starts_with(&expected),
            "\n got: {err}\nwant: {expected}"
        );
    }
}

#[test]
fn unknown_keys_in_the_extension_are_refused_and_unknown_providers_too() {
    let err = load_edited(|v| {
        let aws = v
            .pointer_mut("/kim/providers/aws")
            .unwrap()
            .as_object_mut()
            .unwrap();
        let regions = aws.remove("regions").unwrap();
        aws.insert("regoins".into(), regions);
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with(
            "converter_config.json: kim.providers.aws.regoins: unknown key; expected one of"
        ),
        "{err}"
    );

    let err = load_edited(|v| {
        let providers = v
            .pointer_mut("/kim/providers")
            .unwrap()
            .as_object_mut()
            .unwrap();
        let ops = providers.remove("openstack").unwrap();
        providers.insert("sap-converged-cloud".into(), ops);
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("converter_config.json: kim.providers.sap-converged-cloud: unknown key; expected one of `aws`, `azure`, `gcp`, `openstack`, `alicloud`"),
        "{err}"
    );
}

#[test]
fn empty_lists_and_empty_values_are_refused() {
    refused_with(
        load_edited(|v| set(v, "/kim/providers/aws/regions/2/zones", json!([]))),
        "kim.providers.aws.regions[2].zones",
        "must not be empty",
    );
    refused_with(
        load_edited(|v| set(v, "/kim/providers/gcp/machineTypes", json!([]))),
        "kim.providers.gcp.machineTypes",
        "must not be empty: name at least one machine type, or leave the key out to allow any",
    );
    refused_with(
        load_edited(|v| set(v, "/converter/gardener/projectName", json!(""))),
        "converter.gardener.projectName",
        "`` is not a Gardener project name",
    );
    refused_with(
        load_edited(|v| set(v, "/cluster/defaultSharedIASTenant/clientID", json!(" "))),
        "cluster.defaultSharedIASTenant.clientID",
        "must not be empty",
    );
}

/// A bound may equal its partner (one volume size, one pool size) and a default may sit on
/// a bound; only a minimum above its maximum is refused, at the maximum's key.
#[test]
fn size_and_scaling_bounds_may_be_equal_but_not_crossed() {
    let types = "/kim/providers/aws/volumeTypes";
    let scaling = "/kim/providers/aws/workerScaling";
    // gp3 is the default volume type, 80Gi its default size.
    let equal = load_edited(|v| {
        set(v, &format!("{types}/1/minSize"), json!("80Gi"));
        set(v, &format!("{types}/1/maxSize"), json!("80Gi"));
        set(v, scaling, json!({"minimum": 3, "maximum": 3}));
        set(
            v,
            "/kim/providers/aws/defaults/workers",
            json!({"minimum": 3, "maximum": 3}),
        );
    });
    assert!(equal.is_ok(), "{:?}", equal.err());
    let crossed = load_edited(|v| {
        set(v, &format!("{types}/0/minSize"), json!("100Gi"));
        set(v, &format!("{types}/0/maxSize"), json!("99Gi"));
        set(v, scaling, json!({"minimum": 4, "maximum": 3}));
    })
    .unwrap_err()
    .to_string();
    for expected in [
        "kim.providers.aws.volumeTypes[0].maxSize: 99Gi is smaller than minSize 100Gi",
        "kim.providers.aws.workerScaling.maximum: 3 is smaller than workerScaling.minimum 4",
    ] {
        assert!(crossed.contains(expected), "{crossed}");
    }
}

/// A default network that shares any address with 240.0.0.0/8-244.0.0.0/8 is refused: inside,
/// at either end, or spanning the whole range; one just outside is not.
#[test]
fn default_networks_keep_clear_of_gardeners_reserved_range() {
    for (cidr, refused) in [
        ("240.0.0.0/8", true),
        ("244.0.0.0/6", true),
        ("224.0.0.0/3", true),
        ("236.0.0.0/6", false),
        ("245.0.0.0/8", false),
    ] {
        let result = load_edited(|v| {
            set(
                v,
                "/kim/providers/aws/defaults/networking/pods",
                json!(cidr),
            )
        });
        let reserved = format!(
            "kim.providers.aws.defaults.networking.pods: {cidr} overlaps 240.0.0.0/8-244.0.0.0/8, which Gardener reserves"
        );
        match (refused, result) {
            (false, Ok(_)) => {}
            (false, Err(e)) => panic!("{cidr} is outside the reserved range: {e}"),
            (true, Err(e)) => assert!(e.to_string().contains(&reserved), "{cidr}: {e}"),
            (true, Ok(_)) => panic!("{cidr} was admitted"),
        }
    }
}

/// Gardener-internal DNS means all three `converter.dns` keys empty: any one key alone is a
/// half-configured DNS provider, and the two missing keys are named.
#[test]
fn one_dns_key_alone_asks_for_the_other_two() {
    let keys = ["secretName", "domainPrefix", "providerType"];
    for set_key in keys {
        let err = load_edited(|v| {
            let mut dns = json!({"secretName": "", "domainPrefix": "", "providerType": ""});
            dns[set_key] = json!("x");
            set(v, "/converter/dns", dns);
        })
        .unwrap_err()
        .to_string();
        for key in keys {
            assert_eq!(
                err.contains(&format!("converter.dns.{key}")),
                key != set_key,
                "{set_key} alone: {err}"
            );
        }
    }
    let none = load_edited(|v| {
        set(
            v,
            "/converter/dns",
            json!({"secretName": "", "domainPrefix": "", "providerType": ""}),
        )
    })
    .unwrap();
    assert!(none.converter.dns.is_gardener_internal());
}

#[test]
fn semantic_rules_are_checked_and_all_problems_listed() {
    let err = load_edited(|v| {
        set(
            v,
            "/converter/gardener/projectName",
            json!("kyma-development"),
        );
        set(
            v,
            "/converter/kubernetes/defaultOperatorOidc/issuerURL",
            json!("http://issuer.example.com"),
        );
        set(
            v,
            "/converter/kubernetes/defaultOperatorOidc/signingAlgs",
            json!(["RS256", "HS256"]),
        );
        set(
            v,
            "/converter/dns",
            json!({"secretName": "dns", "domainPrefix": "", "providerType": "aws-route53"}),
        );
        set(
            v,
            "/kim/providers/azure/regions/0/zones",
            json!(["1", "2", "westeurope-1"]),
        );
        set(
            v,
            "/kim/providers/aws/regions/1/name",
            json!("eu-central-1"),
        );
        set(
            v,
            "/kim/providers/aws/defaults/networking/services",
            json!("10.96.0.0/16"),
        );
        set(
            v,
            "/kim/providers/gcp/defaults/volume/type",
            json!("pd-extreme"),
        );
        set(
            v,
            "/kim/providers/gcp/defaults/workers",
            json!({"minimum": 5, "maximum": 2}),
        );
        set(
            v,
            "/kim/providers/openstack/defaults/workers",
            json!({"minimum": 1, "maximum": 500}),
        );
        set(
            v,
            "/kim/providers/alicloud/defaults/volume/size",
            json!("10Gi"),
        );
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("converter_config.json: 11 problems:\n"),
        "{text}"
    );
    for (path, message) in [
        (
            "converter.kubernetes.defaultOperatorOidc.issuerURL",
            "expected an https:// URL",
        ),
        (
            "converter.kubernetes.defaultOperatorOidc.signingAlgs[1]",
            "`HS256` is not a supported signing algorithm",
        ),
        (
            "converter.dns.domainPrefix",
            "must be set when any of secretName, domainPrefix, providerType is set",
        ),
        (
            "converter.gardener.projectName",
            "`kyma-development` is not a Gardener project name: expected at most 10",
        ),
        (
            "kim.providers.azure.regions[0].zones[2]",
            "Azure zone names are the numbers 1 to 8, found `westeurope-1`",
        ),
        (
            "kim.providers.aws.regions[1]",
            "`eu-central-1` is listed twice",
        ),
        (
            "kim.providers.aws.defaults.networking.services",
            "10.96.0.0/16 overlaps pods 10.96.0.0/13",
        ),
        (
            "kim.providers.gcp.defaults.volume.type",
            "`pd-extreme` is not listed in volumeTypes",
        ),
        (
            "kim.providers.gcp.defaults.workers.maximum",
            "2 is smaller than minimum 5",
        ),
        (
            "kim.providers.openstack.defaults.workers.maximum",
            "500 is above workerScaling.maximum 300",
        ),
        (
            "kim.providers.alicloud.defaults.volume.size",
            "10Gi is outside the bounds of volume type cloud_essd (20Gi to 1024Gi)",
        ),
    ] {
        assert!(
            text.contains(&format!("\n  {path}: {message}")),
            "missing `{path}: {message}` in:\n{text}"
        );
    }
}

#[test]
fn defaults_must_be_offered_by_the_provider() {
    refused_with(
        load_edited(|v| set(v, "/converter/kubernetes/defaultVersion", json!("1.30"))),
        "kim.providers.aws.kubernetes",
        "does not allow converter.kubernetes.defaultVersion: 1.30 is older than the minimum version 1.33",
    );
    refused_with(
        load_edited(|v| set(v, "/converter/kubernetes/defaultVersion", json!("1.36"))),
        "kim.providers.aws.kubernetes",
        "does not allow converter.kubernetes.defaultVersion: 1.36 is not offered",
    );
    refused_with(
        load_edited(|v| {
            set(
                v,
                "/kim/providers/aws/defaults/machineImage/version",
                json!("1.0.0"),
            )
        }),
        "kim.providers.aws.defaults.machineImage",
        "gardenlinux 1.0.0 is not listed in machineImages",
    );
    refused_with(
        load_edited(|v| {
            remove(v, "/kim/providers/gcp/defaults/machineImage");
            set(
                v,
                "/converter/machineImage/defaultVersion",
                json!("934.0.0"),
            );
        }),
        "kim.providers.gcp.defaults.machineImage",
        "missing, and converter.machineImage (gardenlinux 934.0.0) is not listed in kim.providers.gcp.machineImages",
    );
    refused_with(
        load_edited(|v| {
            set(
                v,
                "/kim/providers/aws/kubernetes/minimumVersion",
                json!("1.40"),
            )
        }),
        "kim.providers.aws.kubernetes.minimumVersion",
        "1.40 is newer than every listed version",
    );
    refused_with(
        load_edited(|v| {
            set(
                v,
                "/kim/providers/aws/kubernetes/versions/1/version",
                json!("1.35"),
            )
        }),
        "kim.providers.aws.kubernetes.versions[1].version",
        "expected a full version such as `1.35.0`, found `1.35`",
    );
}

#[test]
fn files_that_are_not_json_are_refused_with_a_location() {
    let err = KimConfig::from_parts("{\"converter\": ", None, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("converter_config.json: not valid JSON: EOF while parsing a value (line 1"),
        "{err}"
    );
    let err = KimConfig::from_parts(&format!("{} trailing", example()), None, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "converter_config.json: not valid JSON: trailing characters (line 1, column"
        ),
        "{err}"
    );
}

#[test]
fn audit_log_tenant_files_are_checked_like_upstream() {
    let converter = example().to_string();
    let audit = r#"{"aws": {"eu-central-1": {"tenantID": "", "serviceURL": "auditlog.example.com", "secretName": "Audit_Secret"}}}"#;
    let err = KimConfig::from_parts(&converter, Some(audit), None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "audit-log tenant file: 3 problems:\n  \
         aws.eu-central-1.tenantID: must not be empty\n  \
         aws.eu-central-1.serviceURL: expected a URL such as `https://auditlog.example.com:3001`, found `auditlog.example.com`\n  \
         aws.eu-central-1.secretName: `Audit_Secret` is not a valid Secret name (lower-case DNS subdomain)"
    );
    let missing =
        r#"{"aws": {"eu-central-1": {"tenantID": "t", "serviceURL": "https://a.example.com"}}}"#;
    let err = KimConfig::from_parts(&converter, Some(missing), None)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("audit-log tenant file: aws.eu-central-1.secretName: missing required key (line 1, column"), "{err}");
}

#[test]
fn unknown_audit_log_providers_and_uncovered_regions_warn() {
    let converter = example().to_string();
    let audit = r#"{"sap-converged-cloud": {"eu-de-1": {"tenantID": "t", "serviceURL": "https://a.example.com", "secretName": "s"}}}"#;
    let config = KimConfig::from_parts(&converter, Some(audit), None).unwrap();
    let warnings: Vec<String> = config.warnings().iter().map(ToString::to_string).collect();
    assert!(
        warnings
            .iter()
            .any(|w| w
                .starts_with("audit-log tenant file: sap-converged-cloud: not a provider type")),
        "{warnings:?}"
    );
    assert!(
        warnings.iter().any(|w| w
            .starts_with("audit-log tenant file: aws.eu-central-1: no tenant for allowed region")),
        "{warnings:?}"
    );
}

#[test]
fn maintenance_windows_are_checked_like_gardener() {
    let converter = example().to_string();
    let short = r#"{"eu-central-1": {"begin": "200000+0000", "end": "201000+0000"}}"#;
    refused(
        KimConfig::from_parts(&converter, None, Some(short)),
        "maintenance window file: eu-central-1: the window 200000+0000-201000+0000 lasts 0h10m; Gardener needs 30 minutes to 6 hours",
    );
    let bad_time = "eu-central-1:\n  begin: \"25:00\"\n  end: \"000000+0000\"\n";
    let err = KimConfig::from_parts(&converter, None, Some(bad_time))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("maintenance window file: eu-central-1.begin: expected a time in Gardener's format HHMMSS+HHMM"),
        "{err}"
    );
    let config_map = "kind: ConfigMap\napiVersion: v1\ndata:\n  config: |\n    {\"eu-central-1\": {\"begin\": \"200000+0000\"}}\n";
    let err = KimConfig::from_parts(&converter, None, Some(config_map))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "maintenance window file: data.config.eu-central-1.end: missing required key"
        ),
        "{err}"
    );
    let no_key = "kind: ConfigMap\napiVersion: v1\ndata:\n  windows: \"{}\"\n";
    let err = KimConfig::from_parts(&converter, None, Some(no_key))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("maintenance window file: data.config: missing required key"),
        "{err}"
    );
}

#[test]
fn load_names_the_file_it_cannot_read_and_the_key_that_pointed_there() {
    let dir = tempfile::tempdir().unwrap();
    let converter = dir.path().join("converter_config.json");
    std::fs::write(&converter, example().to_string()).unwrap();
    let err = KimConfig::load(&ConfigPaths::new(&converter))
        .unwrap_err()
        .to_string();
    let audit = dir.path().join("audit_log_tenants.json");
    assert!(
        err.starts_with(&format!(
            "{}: cannot read the audit-log tenant file (converter.auditLogging.tenantConfigPath): ",
            audit.display()
        )),
        "{err}"
    );

    std::fs::write(&converter, "{}").unwrap();
    let err = KimConfig::load(&ConfigPaths::new(&converter))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!(
            "{}: converter: missing required key",
            converter.display()
        )),
        "{err}"
    );
}

#[test]
fn todays_upstream_values_that_would_fail_every_conversion_are_refused() {
    // Upstream's TestNewExpirationTimeExtender case "30d": Go durations have no days.
    refused_with(
        load_edited(|v| {
            set(
                v,
                "/converter/kubernetes/kubeApiServer/maxTokenExpiration",
                json!("30d"),
            );
        }),
        "converter.kubernetes.kubeApiServer.maxTokenExpiration",
        "expected a Go duration such as `720h` (no days), found `30d`",
    );
    // Upstream's TestApplyMachineControllerManagerConfig "invalid ... returns error" cases.
    refused_with(
        load_edited(|v| {
            set(
                v,
                "/converter/provider/worker/defaultMachineDrainTimeout",
                json!("fifteen"),
            );
        }),
        "converter.provider.worker.defaultMachineDrainTimeout",
        "expected a Go duration such as `15m`, found `fifteen`",
    );
    for bad in ["two", "-1", "2147483648"] {
        refused_with(
            load_edited(|v| {
                set(
                    v,
                    "/converter/provider/worker/defaultMaxEvictRetries",
                    json!(bad),
                );
            }),
            "converter.provider.worker.defaultMaxEvictRetries",
            &format!("expected a whole number from 0 to 2147483647 such as `2`, found `{bad}`"),
        );
    }
    refused_with(
        load_edited(|v| {
            set(
                v,
                "/converter/tolerations",
                json!({"me-central2": [{"key": ""}]}),
            );
        }),
        "converter.tolerations.me-central2[0].key",
        "must not be empty",
    );
}

#[test]
fn seed_networks_are_canonical_cidrs_and_provider_defaults_stay_clear_of_them() {
    refused(
        load_edited(|v| {
            set(
                v,
                "/kim/seedNetworks",
                json!(["10.242.0.0/16", "10.243.1.0/16"]),
            )
        }),
        "converter_config.json: kim.seedNetworks: `10.243.1.0/16` is not in canonical form: write `10.243.0.0/16`",
    );
    refused_with(
        load_edited(|v| {
            set(v, "/kim/seedNetworks", json!(["fd00::/8", "10.96.0.0/12"]));
        }),
        "kim.providers.aws.defaults.networking.pods",
        "10.96.0.0/13 overlaps the seed network 10.96.0.0/12 (kim.seedNetworks)",
    );
    // Absent: the defaults, which the example's default networks (KEB's) stay clear of.
    let cfg = load_edited(|_| {}).unwrap();
    assert_eq!(cfg.kim.seed_networks, None);
    assert_eq!(
        cfg.kim.seed_networks(),
        kim_shared::config::DEFAULT_SEED_NETWORKS
    );
    let cfg = load_edited(|v| set(v, "/kim/seedNetworks", json!([]))).unwrap();
    assert!(cfg.kim.seed_networks().is_empty());
}

/// A maintenance window file that is not YAML gets the same "not valid YAML" answer with its
/// line and column wherever the syntax breaks; a document of the wrong shape names the key.
#[test]
fn maintenance_window_syntax_errors_are_told_apart_from_wrong_shapes() {
    let converter = example().to_string();
    let window = r#"a: {begin: "200000+0000", end: "210000+0000"}"#;
    for (text, expected) in [
        (
            "\"unterminated\n".to_owned(),
            "maintenance window file: not valid YAML: found unexpected end of stream at line 2 column 1, while scanning a quoted scalar (line 2, column 1)",
        ),
        (
            "eu-central-1: \"unterminated\n".to_owned(),
            "maintenance window file: not valid YAML: found unexpected end of stream at line 2 column 1, while scanning a quoted scalar at line 1 column 15 (line 2, column 1)",
        ),
        (
            format!("{window}\n- b\n"),
            "maintenance window file: not valid YAML: did not find expected key at line 2 column 1, while parsing a block mapping (line 2, column 1)",
        ),
        (
            "- a\n- b\n".to_owned(),
            "maintenance window file: (top level): expected a map, found sequence (line 1, column 1)",
        ),
    ] {
        let err = KimConfig::from_parts(&converter, None, Some(&text)).unwrap_err();
        assert_eq!(err.to_string(), expected, "{text:?}");
    }
}
