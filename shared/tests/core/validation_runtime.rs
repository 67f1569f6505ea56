//! CREATE rules on the Runtime as a whole: labels, shoot name, purpose, region, credentials,
//! Kubernetes version, control plane, networking.
#![allow(clippy::unwrap_used)]

use crate::validation_fixtures::*;
use kim_shared::api::ProviderType;
use kim_shared::gardener::shoot::{FailureTolerance, HighAvailability};
use kim_shared::names;
use kim_shared::validation::{ValidationOptions, validate_create, validate_create_with};

#[test]
fn the_sample_is_valid_without_a_warning() {
    let findings = accepts(&sample());
    assert!(findings.warnings.is_empty(), "{:?}", findings.warnings);
    // Ingress filtering with egress filtering off is accepted with a warning; either filter
    // off alone, or both on, is no reason for one.
    for (egress, ingress, warned) in [
        (false, true, true),
        (false, false, false),
        (true, true, false),
    ] {
        let findings = accepts(&runtime(|rt| {
            let filter = &mut rt.spec.security.networking.filter;
            filter.egress.enabled = egress;
            filter.ingress =
                Some(serde_json::from_value(serde_json::json!({"enabled": ingress})).unwrap());
        }));
        if warned {
            assert!(
                findings
                    .warnings
                    .iter()
                    .any(|w| w.starts_with("spec.security.networking.filter.ingress.enabled")),
                "{:?}",
                findings.warnings
            );
        } else {
            assert!(
                findings.warnings.is_empty(),
                "{egress} {ingress}: {:?}",
                findings.warnings
            );
        }
    }
}

#[test]
fn every_required_label_must_be_present() {
    for key in names::REQUIRED_RUNTIME_LABELS {
        let rt = runtime(|rt| set_label(rt, key, None));
        rejects_with(&rt, &format!("metadata.labels[{key}]"), "missing");
    }
}

#[test]
fn required_labels_must_not_be_empty() {
    let rt = runtime(|rt| set_label(rt, names::LABEL_RUNTIME_ID, Some(" ")));
    rejects_with(&rt, "metadata.labels[kyma-project.io/runtime-id]", "empty");
}

/// A Runtime carrying another runtime's ID would be given that runtime's GardenerCluster,
/// registry-cache Secrets and Shoot: the label must be the Runtime's own name.
#[test]
fn the_runtime_id_label_must_equal_the_name() {
    let field = "metadata.labels[kyma-project.io/runtime-id]";
    let evil = runtime(|rt| set_label(rt, names::LABEL_RUNTIME_ID, Some("victim")));
    let v = rejects_with(&evil, field, "must equal the Runtime's name");
    assert!(v.message.contains("\"victim\""), "{}", v.message);
    let generated = runtime(|rt| rt.metadata.name = None);
    rejects_with(&generated, field, "must equal the Runtime's name");
    let upper = runtime(|rt| {
        let id = rt.metadata.name.clone().unwrap().to_uppercase();
        set_label(rt, names::LABEL_RUNTIME_ID, Some(&id));
    });
    accepts(&upper);
    // Stored before the rule: an UPDATE that leaves the label as it was is not refused for it.
    let changed = runtime(|rt| {
        set_label(rt, names::LABEL_RUNTIME_ID, Some("victim"));
        rt.spec
            .security
            .administrators
            .push("another-admin@example.com".into());
    });
    accepts_update(&evil, &changed);
}

#[test]
fn all_label_violations_are_reported_at_once() {
    let rt = runtime(|rt| rt.metadata.labels = None);
    let f = validate_create(&rt, config());
    assert_eq!(
        f.violations.len(),
        names::REQUIRED_RUNTIME_LABELS.len(),
        "{:?}",
        f.violations
    );
}

#[test]
fn a_shoot_name_label_that_differs_is_a_warning() {
    let rt = runtime(|rt| set_label(rt, names::LABEL_SHOOT_NAME, Some("other")));
    let f = accepts(&rt);
    assert!(
        f.warnings
            .iter()
            .any(|w| w.contains("kyma-project.io/shoot-name")),
        "{:?}",
        f.warnings
    );
}

#[test]
fn shoot_name_must_be_a_dns_label() {
    for bad in [
        "Shoot",
        "shoot_1",
        "-shoot",
        "shoot-",
        "",
        "a--b",
        "shoot.one",
    ] {
        let rt = runtime(|rt| rt.spec.shoot.name = bad.into());
        rejects(&rt, "spec.shoot.name");
    }
}

#[test]
fn shoot_name_and_project_name_stay_within_gardeners_limit() {
    // Project `kyma-dev` (8 characters) leaves 13 for the shoot name.
    accepts(&runtime(|rt| rt.spec.shoot.name = "a".repeat(13)));
    rejects_with(
        &runtime(|rt| rt.spec.shoot.name = "a".repeat(14)),
        "spec.shoot.name",
        "at most 13",
    );
}

#[test]
fn purpose_must_be_a_shoot_purpose() {
    for ok in ["evaluation", "testing", "development", "production"] {
        accepts(&runtime(|rt| rt.spec.shoot.purpose = ok.into()));
    }
    for bad in ["", "infrastructure", "prod"] {
        rejects_with(
            &runtime(|rt| rt.spec.shoot.purpose = bad.into()),
            "spec.shoot.purpose",
            "production",
        );
    }
}

#[test]
fn region_must_be_configured_for_the_provider() {
    rejects_with(
        &runtime(|rt| rt.spec.shoot.region = "eu-south-7".into()),
        "spec.shoot.region",
        "eu-central-1",
    );
    // A missing region: the message gives one of the provider's as an example.
    rejects_with(
        &runtime(|rt| rt.spec.shoot.region = String::new()),
        "spec.shoot.region",
        "must name the aws region, e.g. eu-central-1",
    );
    // An Azure region is not an AWS region.
    rejects(
        &runtime(|rt| rt.spec.shoot.region = "westeurope".into()),
        "spec.shoot.region",
    );
}

#[test]
fn region_needs_an_audit_log_tenant_when_audit_logs_are_mandatory() {
    // A region without a tenant names those with one.
    let mut open = config().clone();
    for p in open.kim.providers.values_mut() {
        p.regions = None;
    }
    let mut elsewhere = sample();
    elsewhere.spec.shoot.region = "ap-nowhere-1".into();
    // The zones are judged against it all the same (a region without a tenant may exist).
    let f = validate_create(&elsewhere, &open).presentable();
    let v = f
        .violations
        .iter()
        .find(|v| v.field == "spec.shoot.region")
        .expect("the region is refused");
    assert!(
        v.message.contains("use a region with a tenant: ") && v.message.contains("eu-central-1"),
        "{}",
        v.message
    );
    let mut cfg = config().clone();
    cfg.audit_log_tenants = Default::default();
    let rt = sample();
    let v = denied(validate_create(&rt, &cfg), "spec.shoot.region");
    assert!(
        v.message
            .ends_with("the audit-log tenant file has no aws region"),
        "{}",
        v.message
    );
    let relaxed = ValidationOptions {
        audit_log_mandatory: false,
        ..ValidationOptions::default()
    };
    let f = allowed(validate_create_with(&rt, &cfg, &relaxed));
    assert!(
        f.warnings.iter().any(|w| w.contains("audit")),
        "{:?}",
        f.warnings
    );
}

#[test]
fn secret_binding_name_must_be_an_object_name() {
    for bad in ["hyperscaler secret", "", "UPPER", "a/b"] {
        rejects(
            &runtime(|rt| rt.spec.shoot.secret_binding_name = bad.into()),
            "spec.shoot.secretBindingName",
        );
    }
    accepts(&runtime(|rt| {
        rt.spec.shoot.secret_binding_name = "sb.aws-01".into()
    }));
}

fn with_version(v: &str) -> kim_shared::api::Runtime {
    runtime(|rt| rt.spec.shoot.kubernetes.as_mut().unwrap().version = Some(v.into()))
}

#[test]
fn kubernetes_version_must_be_well_formed() {
    for bad in ["v1.35", "1", "1.35.4.1", "latest", "1.35-rc1"] {
        rejects(&with_version(bad), "spec.shoot.kubernetes.version");
    }
}

#[test]
fn kubernetes_version_must_be_offered_and_not_below_the_minimum() {
    accepts(&with_version("1.35.4"));
    accepts(&with_version("1.34"));
    rejects_with(
        &with_version("1.32.1"),
        "spec.shoot.kubernetes.version",
        "minimum",
    );
    rejects_with(
        &with_version("1.35.9"),
        "spec.shoot.kubernetes.version",
        "not offered",
    );
    // Preview versions only when named exactly.
    accepts(&with_version("1.36.3"));
    rejects(&with_version("1.36"), "spec.shoot.kubernetes.version");
}

#[test]
fn a_missing_or_empty_version_means_the_default() {
    accepts(&runtime(|rt| {
        rt.spec.shoot.kubernetes.as_mut().unwrap().version = None
    }));
    accepts(&with_version(""));
}

#[test]
fn control_plane_failure_tolerance_is_node_or_zone() {
    let rt = runtime(|rt| {
        rt.spec
            .shoot
            .control_plane
            .as_mut()
            .unwrap()
            .high_availability = Some(HighAvailability {
            failure_tolerance: FailureTolerance {
                type_: "rack".into(),
            },
        });
    });
    rejects(
        &rt,
        "spec.shoot.controlPlane.highAvailability.failureTolerance.type",
    );
}

#[test]
fn control_plane_zones_follow_the_failure_tolerance() {
    let rt = runtime(|rt| {
        rt.spec.shoot.control_plane.as_mut().unwrap().zones = Some(vec!["eu-central-1a".into()])
    });
    rejects_with(&rt, "spec.shoot.controlPlane.zones", "exactly 3");
    let rt = runtime(|rt| {
        let zones = ["eu-central-1a", "eu-central-1b", "eu-central-1c"]
            .map(String::from)
            .to_vec();
        rt.spec.shoot.control_plane.as_mut().unwrap().zones = Some(zones);
    });
    accepts(&rt);
}

#[test]
fn an_acl_off_aws_and_azure_is_a_warning() {
    let warned = |f: &kim_shared::validation::ValidationOutcome, field: &str| {
        f.warnings.iter().any(|w| w.starts_with(field))
    };
    let asking = |cidrs: serde_json::Value| {
        runtime(|rt| {
            let k = rt
                .spec
                .shoot
                .kubernetes
                .get_or_insert_with(Default::default);
            let api = k.kube_api_server.get_or_insert_with(Default::default);
            api.acl =
                Some(serde_json::from_value(serde_json::json!({"allowedCIDRs": cidrs})).unwrap());
        })
    };
    let f = accepts(&sample());
    assert!(!warned(&f, "spec.shoot.kubernetes.kubeAPIServer.acl"));
    let f = accepts(&asking(serde_json::json!(["10.0.0.0/8"])));
    // The sample is an AWS Runtime: its ACL is applied (with `--api-server-acl-enabled`).
    assert!(
        !warned(&f, "spec.shoot.kubernetes.kubeAPIServer.acl"),
        "{:?}",
        f.warnings
    );
    let mut gcp = asking(serde_json::json!(["10.0.0.0/8"]));
    gcp.spec.shoot.provider.type_ = ProviderType::Gcp;
    let f = validate_create(&gcp, config());
    assert!(
        warned(
            &f,
            "spec.shoot.kubernetes.kubeAPIServer.acl.allowedCIDRs: is ignored for gcp"
        ),
        "{:?}",
        f.warnings
    );
    // An empty list asks for nothing.
    let f = accepts(&asking(serde_json::json!([])));
    assert!(!warned(&f, "spec.shoot.kubernetes.kubeAPIServer.acl"));
}

#[test]
fn registry_caches_are_checked_field_by_field() {
    let with = |caches: serde_json::Value| {
        runtime(|rt| {
            rt.spec.image_registry_cache = Some(serde_json::from_value(caches).unwrap());
        })
    };
    let good = serde_json::json!([
        {"name": "quay", "namespace": "kyma-system", "uid": "u-1",
         "config": {"upstream": "quay.io:443", "remoteURL": "https://quay.io",
                    "volume": {"size": "20Gi"}, "garbageCollection": {"ttl": "0s"},
                    "secretReferenceName": "quay-credentials",
                    "proxy": {"httpsProxy": "http://proxy:3128"}}},
        {"name": "docker", "namespace": "default", "uid": "u-2", "config": {"upstream": "docker.io"}}
    ]);
    let f = accepts(&with(good));
    assert!(
        !f.warnings
            .iter()
            .any(|w| w.starts_with("spec.imageRegistryCache")),
        "{:?}",
        f.warnings
    );
    let bad = serde_json::json!([
        {"name": "", "namespace": "ns", "uid": "u-1",
         "config": {"upstream": "https://quay.io", "remoteURL": "quay.io",
                    "volume": {"size": "0"}, "garbageCollection": {"ttl": "a week"},
                    "secretReferenceName": "Not_Valid",
                    "proxy": {"httpProxy": "proxy:3128"}}},
        {"name": "b", "namespace": "ns", "uid": "u-1", "config": {"upstream": "docker.io"}},
        {"name": "c", "namespace": "ns", "uid": "u-3", "config": {"upstream": "docker.io"}}
    ]);
    let f = kim_shared::validation::validate_create(&with(bad), config());
    for (field, words) in [
        ("spec.imageRegistryCache[0].name", "must not be empty"),
        (
            "spec.imageRegistryCache[0].config.upstream",
            "is not a registry host",
        ),
        (
            "spec.imageRegistryCache[0].config.remoteURL",
            "http:// or https://",
        ),
        (
            "spec.imageRegistryCache[0].config.volume.size",
            "positive quantity",
        ),
        (
            "spec.imageRegistryCache[0].config.garbageCollection.ttl",
            "is not a duration",
        ),
        (
            "spec.imageRegistryCache[0].config.secretReferenceName",
            "not a valid reference name",
        ),
        (
            "spec.imageRegistryCache[0].config.proxy.httpProxy",
            "http:// or https://",
        ),
        (
            "spec.imageRegistryCache[1].uid",
            "already the uid of spec.imageRegistryCache[0]",
        ),
        (
            "spec.imageRegistryCache[2].config.upstream",
            "already cached by spec.imageRegistryCache[1]",
        ),
    ] {
        assert!(
            f.violations
                .iter()
                .any(|v| v.field == field && v.message.contains(words)),
            "{field}: {words}: {:?}",
            f.violations
        );
    }
    // A size given as a number must be positive too.
    let sized = |size: serde_json::Value| {
        with(serde_json::json!([
            {"name": "quay", "namespace": "kyma-system", "uid": "u-1",
             "config": {"upstream": "quay.io", "volume": {"size": size}}}
        ]))
    };
    accepts(&sized(serde_json::json!(1024)));
    // Kubernetes takes any whole number as a quantity: 10 GiB in bytes is above 2^31.
    accepts(&sized(serde_json::json!(10_737_418_240_i64)));
    for size in [0, -1] {
        let f = kim_shared::validation::validate_create(&sized(serde_json::json!(size)), config());
        assert!(
            f.violations
                .iter()
                .any(|v| v.field == "spec.imageRegistryCache[0].config.volume.size"),
            "{size}: {:?}",
            f.violations
        );
    }
    // The 2025 object shape is admitted with a warning naming the field.
    let f = accepts(&with(serde_json::json!({"enabled": true})));
    assert!(
        f.warnings
            .iter()
            .any(|w| w.starts_with("spec.imageRegistryCache: holds the 2025 object shape")),
        "{:?}",
        f.warnings
    );
}

#[test]
fn ignored_provider_configs_are_warnings() {
    let rt = runtime(|rt| {
        rt.spec.shoot.provider.infrastructure_config =
            Some(serde_json::json!({"kind": "InfrastructureConfig"}).into());
        rt.spec.shoot.provider.control_plane_config =
            Some(serde_json::json!({"kind": "ControlPlaneConfig"}).into());
    });
    let f = accepts(&rt);
    assert!(
        f.warnings
            .iter()
            .any(|w| w.starts_with("spec.shoot.provider.infrastructureConfig"))
    );
    assert!(
        f.warnings
            .iter()
            .any(|w| w.starts_with("spec.shoot.provider.controlPlaneConfig"))
    );
}

#[test]
fn networks_must_parse_as_canonical_ipv4_cidrs() {
    for (field, value, needle) in [
        ("nodes", "10.250.0.0", "not a CIDR"),
        ("nodes", "10.250.1.0/16", "10.250.0.0/16"),
        ("pods", "fd00::/48", "IPv6"),
        ("services", "100.104.0.0/33", "not a CIDR"),
    ] {
        let rt = runtime(|rt| {
            let n = &mut rt.spec.shoot.networking;
            *match field {
                "nodes" => &mut n.nodes,
                "pods" => &mut n.pods,
                _ => &mut n.services,
            } = value.into();
        });
        rejects_with(&rt, &format!("spec.shoot.networking.{field}"), needle);
    }
}

#[test]
fn networks_must_not_overlap() {
    let rt = runtime(|rt| rt.spec.shoot.networking.services = "10.250.128.0/17".into());
    rejects_with(
        &rt,
        "spec.shoot.networking.services",
        "overlaps the nodes network",
    );
    let rt = runtime(|rt| rt.spec.shoot.networking.services = "10.96.0.0/13".into());
    rejects_with(
        &rt,
        "spec.shoot.networking.services",
        "overlaps the pods network",
    );
}

#[test]
fn networks_must_avoid_gardeners_reserved_ranges() {
    rejects_with(
        &runtime(|rt| rt.spec.shoot.networking.pods = "240.0.0.0/8".into()),
        "spec.shoot.networking.pods",
        "reserves",
    );
}

#[test]
fn networks_must_stay_clear_of_the_seed_networks() {
    for (field, value, seed, example) in [
        ("nodes", "10.242.0.0/20", "10.242.0.0/16", "10.250.0.0/16"),
        ("pods", "10.64.0.0/13", "10.64.0.0/11", "10.96.0.0/13"),
        (
            "services",
            "192.168.0.0/16",
            "192.168.123.0/24",
            "10.104.0.0/13",
        ),
    ] {
        let rt = runtime(|rt| {
            let n = &mut rt.spec.shoot.networking;
            *match field {
                "nodes" => &mut n.nodes,
                "pods" => &mut n.pods,
                _ => &mut n.services,
            } = value.into();
        });
        let v = rejects_with(
            &rt,
            &format!("spec.shoot.networking.{field}"),
            &format!("overlaps the seed network {seed}"),
        );
        assert!(
            v.message.ends_with(&format!("10.242.0.0/16, 10.243.0.0/16, 10.64.0.0/11, 10.254.0.0/16, 192.168.123.0/24 (kim.seedNetworks), e.g. {example}")),
            "{v}"
        );
        // The controller does not hold stored Runtimes to it.
        let stored = ValidationOptions {
            admission_policy: false,
            ..ValidationOptions::default()
        };
        let f = validate_create_with(&rt, config(), &stored);
        assert!(
            !f.violations.iter().any(|v| v.message.contains("seed")),
            "{:?}",
            f.violations
        );
        // A stored Runtime keeps its (immutable) networks through updates.
        let mut changed = rt.clone();
        changed
            .spec
            .security
            .administrators
            .push("john.doe@example.com".into());
        accepts_update(&rt, &changed);
    }
    // Configured seed networks replace the defaults; IPv6 seed networks concern only IPv6
    // networks, and an empty list switches the rule off.
    let mut cfg = config().clone();
    cfg.kim.seed_networks = Some(vec![
        "10.250.0.0/24".parse().unwrap(),
        "fd00::/8".parse().unwrap(),
    ]);
    let f = validate_create(&sample(), &cfg);
    let v = denied(f, "spec.shoot.networking.nodes");
    assert!(v.message.contains("seed network 10.250.0.0/24"), "{v}");
    assert!(!v.message.contains("e.g. 10.250.0.0/16"), "{v}");
    let on_seed = runtime(|rt| rt.spec.shoot.networking.nodes = "10.242.0.0/16".into());
    cfg.kim.seed_networks = Some(vec!["fd00::/8".parse().unwrap()]);
    assert!(validate_create(&on_seed, &cfg).is_allowed());
    cfg.kim.seed_networks = Some(Vec::new());
    assert!(validate_create(&on_seed, &cfg).is_allowed());
}

#[test]
fn fields_without_effect_are_admitted_with_a_warning() {
    let rt = runtime(|rt| {
        rt.spec.audit_log_access_enabled = Some(true);
        rt.spec.shoot.networking.vpc_network = Some("vpc-0a1b2c".into());
    });
    let f = accepts(&rt);
    assert!(
        f.warnings.iter().any(|w| {
            w.starts_with("spec.shoot.networking.vpcNetwork") && w.contains("has no effect yet")
        }),
        "{:?}",
        f.warnings
    );
    // Dedicated audit logging is the controller's (`--dedicated-audit-logging-enabled`).
    assert!(
        !f.warnings
            .iter()
            .any(|w| w.contains("auditLogAccessEnabled")),
        "{:?}",
        f.warnings
    );
    // Said once: an update that leaves them as they are does not repeat it.
    let mut changed = rt.clone();
    changed
        .spec
        .security
        .administrators
        .push("john.doe@example.com".into());
    let f = accepts_update(&rt, &changed);
    assert!(
        !f.warnings.iter().any(|w| w.contains("has no effect yet")),
        "{:?}",
        f.warnings
    );
    let off = runtime(|rt| rt.spec.audit_log_access_enabled = Some(false));
    assert!(accepts(&off).warnings.is_empty());
}

#[test]
fn nodes_prefix_is_16_to_24_where_the_provider_splits_it_into_zones() {
    rejects_with(
        &runtime(|rt| rt.spec.shoot.networking.nodes = "10.0.0.0/15".into()),
        "spec.shoot.networking.nodes",
        "between 16 and 24",
    );
    rejects(
        &runtime(|rt| rt.spec.shoot.networking.nodes = "10.250.0.0/25".into()),
        "spec.shoot.networking.nodes",
    );
    accepts(&runtime(|rt| {
        rt.spec.shoot.networking.nodes = "10.250.0.0/24".into()
    }));
    // GCP does not split the nodes network.
    let gcp = sample_runtime("runtime-gcp.yaml");
    let mut wide = gcp.clone();
    wide.spec.shoot.networking.nodes = "10.0.0.0/12".into();
    assert_eq!(wide.spec.shoot.provider.type_, ProviderType::Gcp);
    accepts(&wide);
}

#[test]
fn networking_type_must_be_a_name() {
    rejects(
        &runtime(|rt| rt.spec.shoot.networking.type_ = Some("Calico CNI".into())),
        "spec.shoot.networking.type",
    );
    accepts(&runtime(|rt| {
        rt.spec.shoot.networking.type_ = Some("cilium".into())
    }));
}

/// Every sample of `config/samples` (shaped as KEB writes them) is admitted: each Runtime after
/// the mutating webhook's defaults, which change nothing KEB set, and converts; the
/// GardenerCluster and the RuntimeAccess under the default access policy.
#[test]
fn every_sample_of_the_repository_is_admitted() {
    let mut names: Vec<String> = std::fs::read_dir(samples_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("runtime-") && n.ends_with(".yaml"))
        .collect();
    names.sort();
    assert!(
        names.len() >= 7,
        "expected the sample Runtimes, found {names:?}"
    );
    for name in &names {
        let sent = sample_runtime(name);
        let mut rt = sent.clone();
        kim_shared::defaults::apply_defaults(&mut rt, config());
        let findings = validate_create(&rt, config());
        assert!(findings.is_allowed(), "{name}: {:?}", findings.violations);
        // The defaults only add: every field the sample sets is stored as sent.
        let sent = serde_json::to_value(&sent).unwrap();
        let stored = serde_json::to_value(&rt).unwrap();
        kept(name, "", &sent, &stored);
        if let Err(e) = kim_shared::convert::to_shoot(&rt, config(), None) {
            panic!("{name} is admitted but does not convert: {e}");
        }
    }
    allowed(kim_shared::validation::validate_gardener_cluster(
        &gardener_cluster(),
    ));
    let access: kim_shared::api::runtime_access::RuntimeAccess = sample_file("runtimeaccess.yaml");
    allowed(kim_shared::access::validate_runtime_access(
        &access,
        &kim_shared::access::AccessPolicy::default(),
    ));
}

/// Asserts that every value of `sent` is in `stored` unchanged (`stored` may add fields).
fn kept(name: &str, at: &str, sent: &serde_json::Value, stored: &serde_json::Value) {
    use serde_json::Value;
    match (sent, stored) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let inner = b
                    .get(k)
                    .unwrap_or_else(|| panic!("{name}: {at}/{k} was dropped"));
                kept(name, &format!("{at}/{k}"), v, inner);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                kept(name, &format!("{at}/{i}"), x, y);
            }
        }
        _ => assert_eq!(sent, stored, "{name}: the defaults changed {at}"),
    }
}

#[test]
fn dual_stack_only_where_the_provider_supports_it() {
    const FIELD: &str = "spec.shoot.networking.dualStack";
    let warned = |f: &kim_shared::validation::ValidationOutcome, needle: &str| {
        f.warnings
            .iter()
            .any(|w| w.starts_with(FIELD) && w.contains(needle))
    };
    let dual = runtime(|rt| rt.spec.shoot.networking.dual_stack = Some(true));
    // The example configuration does not enable dual stack.
    let f = accepts(&dual);
    assert!(
        warned(&f, "converter.networking.enableDualStackIP is off"),
        "{:?}",
        f.warnings
    );
    let mut enabled = config().clone();
    enabled.converter.networking.enable_dual_stack_ip = true;
    let f = validate_create(&dual, &enabled);
    assert!(f.is_allowed(), "{:?}", f.violations);
    assert!(
        !f.warnings.iter().any(|w| w.starts_with(FIELD)),
        "{:?}",
        f.warnings
    );
    let refused = |f: &kim_shared::validation::ValidationOutcome| {
        f.violations.iter().find(|v| v.field == FIELD).cloned()
    };
    // The example configuration restricts azure; only dualStack matters here.
    enabled.kim.providers.clear();
    let mut azure = dual.clone();
    azure.spec.shoot.provider.type_ = ProviderType::Azure;
    azure.spec.shoot.provider.workers[0].zones = Some(vec!["1".into()]);
    let refusal = refused(&validate_create(&azure, &enabled)).unwrap();
    assert!(
        refusal
            .message
            .contains("only aws and gcp clusters can be dual stack"),
        "{refusal}"
    );
    // `false` on any provider is what every cluster gets anyway.
    let mut ipv4 = azure.clone();
    ipv4.spec.shoot.networking.dual_stack = Some(false);
    assert_eq!(refused(&validate_create(&ipv4, &enabled)), None);
    // The controller validates stored Runtimes without the admission policy: an azure Runtime
    // stored with dualStack (which upstream ignores) keeps being converted.
    let stored = ValidationOptions {
        admission_policy: false,
        ..ValidationOptions::default()
    };
    let f = validate_create_with(&azure, &enabled, &stored);
    assert_eq!(refused(&f), None);
    assert!(warned(&f, "is ignored for azure"), "{:?}", f.warnings);
    // Creation sets the IP families; a change later does not reach the cluster.
    let f = accepts_update(&sample(), &dual);
    assert!(warned(&f, "changes from false to true"), "{:?}", f.warnings);
    let mut azure_before = azure.clone();
    azure_before.spec.shoot.networking.dual_stack = None;
    let f = kim_shared::validation::validate_update(&azure_before, &azure, &enabled);
    assert_eq!(refused(&f), None, "an update is not refused for it");
    assert!(warned(&f, "changes from false to true"), "{:?}", f.warnings);
    let f = accepts(&sample());
    assert!(
        !f.warnings.iter().any(|w| w.starts_with(FIELD)),
        "{:?}",
        f.warnings
    );
}
