//! The patch form of the conversion (`live == Some`): what upstream keeps from the live Shoot
//! (workers, Kubernetes version, extensions, resources and provider configs) and the
//! `workers_removed` flag.
#![allow(clippy::unwrap_used)]

use crate::convert_fixture::{config, json, runtime, set_zones};
use kim_shared::api::Runtime;
use kim_shared::convert::{
    AclAddresses, ConvertError, ConvertOptions, Converted, to_shoot, to_shoot_with,
};
use kim_shared::gardener::Shoot;
use kim_shared::gardener::shoot::Extension;
use serde_json::{Value, json};

/// The Shoot as Gardener returns it after creating `rt` (plus what Gardener adds).
/// `spec.imageRegistryCache` as a Runtime carries it.
fn registry_caches(caches: Value) -> Option<kim_shared::api::runtime::ImageRegistryCaches> {
    Some(serde_json::from_value(caches).unwrap())
}

fn live(rt: &Runtime) -> Shoot {
    let mut shoot = to_shoot(rt, &config(), None).unwrap().shoot;
    // Gardener's defaulting and a foreign extension and resource.
    let workers = shoot.spec.provider.workers.as_mut().unwrap();
    workers[0].update_strategy = Some("AutoRollingUpdate".into());
    shoot.spec.extensions.as_mut().unwrap().push(Extension {
        type_: "foreign".into(),
        ..Default::default()
    });
    shoot.spec.resources.as_mut().unwrap().push(serde_json::from_value(json!({
        "name": "shoot-dns-service-dns", "resourceRef": {"apiVersion": "v1", "kind": "Secret", "name": "dns"}
    })).unwrap());
    shoot
}

fn patch(rt: &Runtime, live: &Shoot) -> Converted {
    to_shoot(rt, &config(), Some(live)).unwrap_or_else(|e| panic!("patch conversion failed: {e}"))
}

fn spec(c: &Converted) -> Value {
    json(&c.shoot)["spec"].clone()
}

fn types(spec: &Value) -> Vec<String> {
    spec["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

/// The index of the `shoot-dns-service` extension in a Shoot's JSON.
fn dns_index(shoot: &Value) -> usize {
    types(&shoot["spec"])
        .iter()
        .position(|t| t == "shoot-dns-service")
        .unwrap()
}

/// `converter.dns` of an external DNS provider.
fn external_dns(cfg: &mut kim_shared::config::KimConfig) {
    cfg.converter.dns.secret_name = "dns".into();
    cfg.converter.dns.domain_prefix = "kyma.example.com".into();
    cfg.converter.dns.provider_type = "aws-route53".into();
}

#[test]
fn unchanged_runtime_patches_to_the_created_shoot_without_tolerations_and_token_settings() {
    let mut rt = runtime("gcp");
    rt.spec.shoot.region = "me-central2".into();
    set_zones(&mut rt, &["me-central2-a"]);
    let mut cfg = config();
    external_dns(&mut cfg);
    let created = to_shoot(&rt, &cfg, None).unwrap().shoot;
    assert!(created.spec.dns.is_some() && created.spec.tolerations.is_some());
    let api_server = |s: &Shoot| s.spec.kubernetes.kube_api_server.clone().unwrap();
    assert!(api_server(&created).service_account_config.is_some());
    let patched = to_shoot(&rt, &cfg, Some(&created)).unwrap();
    assert!(!patched.workers_removed);
    assert_eq!(patched.shoot.spec.dns, created.spec.dns, "DNS as created");
    assert_eq!(patched.shoot.spec.tolerations, None);
    // Upstream writes the service account settings on create only, too.
    assert_eq!(api_server(&patched.shoot).service_account_config, None);
    // Everything else is the same: the cleanup annotations, feature gates, machine controller
    // manager defaults and clamped maxPods are written alike on create and patch.
    let mut expected = created.clone();
    expected.spec.tolerations = None;
    if let Some(api) = expected.spec.kubernetes.kube_api_server.as_mut() {
        api.service_account_config = None;
    }
    assert_eq!(patched.shoot, expected);
}

/// A Shoot upstream created before 2026-05 names its DNS provider's credentials by
/// `secretName`, in `spec.dns` and in the `shoot-dns-service` extension; Gardener forbids that
/// from Kubernetes 1.35. The patch writes both as the create does now (upstream's
/// `NewDNSExtenderForPatch` and `dnsExtensionForPatch`).
#[test]
fn dns_credentials_by_secret_name_are_moved_to_the_references_of_today() {
    let rt = runtime("aws");
    let mut cfg = config();
    external_dns(&mut cfg);
    let created = to_shoot(&rt, &cfg, None).unwrap().shoot;
    let mut old = json(&created);
    let domain = format!("{}.kyma.example.com", rt.spec.shoot.name);
    old["spec"]["dns"]["providers"] = json!([{
        "domains": {"include": [domain]}, "primary": true, "secretName": "dns", "type": "aws-route53"
    }]);
    let dns_extension = |shoot: &Value| shoot["spec"]["extensions"][dns_index(shoot)].clone();
    let index = dns_index(&old);
    old["spec"]["extensions"][index]["providerConfig"]["providers"] = json!([{
        "domains": {"include": [domain]}, "secretName": "dns", "type": "aws-route53"
    }]);
    let old: Shoot = serde_json::from_value(old).unwrap();
    let patched = to_shoot(&rt, &cfg, Some(&old)).unwrap().shoot;
    assert_eq!(patched.spec.dns, created.spec.dns);
    let provider = &patched
        .spec
        .dns
        .as_ref()
        .unwrap()
        .providers
        .as_ref()
        .unwrap()[0];
    assert_eq!(provider.secret_name, None);
    assert_eq!(provider.credentials_ref.as_ref().unwrap().name, "dns");
    assert_eq!(
        dns_extension(&json(&patched)),
        dns_extension(&json(&created))
    );

    // Once moved, the live extension is kept as it is, keys the extension's config does not
    // have included.
    let mut moved = json(&patched);
    let index = dns_index(&moved);
    moved["spec"]["extensions"][index]["providerConfig"]["someoneElses"] = json!(1);
    let moved: Shoot = serde_json::from_value(moved).unwrap();
    let again = json(&to_shoot(&rt, &cfg, Some(&moved)).unwrap().shoot);
    assert_eq!(dns_extension(&again)["providerConfig"]["someoneElses"], 1);
}

/// A live Shoot under another domain (made under another `domainPrefix`) keeps its DNS and
/// its DNS extension: Gardener refuses a changed domain, and the extension's providers must
/// name the Shoot's domain.
#[test]
fn dns_under_another_domain_is_kept() {
    let rt = runtime("aws");
    let mut cfg = config();
    external_dns(&mut cfg);
    let mut live = json(&to_shoot(&rt, &cfg, None).unwrap().shoot);
    let old_domain = format!("{}.old.example.com", rt.spec.shoot.name);
    live["spec"]["dns"]["domain"] = json!(old_domain);
    live["spec"]["dns"]["providers"][0]["domains"]["include"] = json!([old_domain]);
    let index = dns_index(&live);
    live["spec"]["extensions"][index]["providerConfig"]["providers"][0]["domains"]["include"] =
        json!([old_domain]);
    let kept = live["spec"]["extensions"][index].clone();
    let live: Shoot = serde_json::from_value(live).unwrap();
    let patched = json(&to_shoot(&rt, &cfg, Some(&live)).unwrap().shoot);
    assert_eq!(patched["spec"].get("dns"), None);
    assert_eq!(patched["spec"]["extensions"][index], kept);
}

/// A live Shoot whose DNS has no providers (made before custom domains, or with
/// Gardener-internal DNS) keeps its `spec.dns` and its DNS extension.
#[test]
fn dns_without_providers_is_kept() {
    let rt = runtime("aws");
    let mut cfg = config();
    external_dns(&mut cfg);
    let mut live = json(&to_shoot(&rt, &cfg, None).unwrap().shoot);
    live["spec"]["dns"] = json!({"domain": "old.example.com"});
    let index = dns_index(&live);
    let kept = json!({"apiVersion": "service.dns.extensions.gardener.cloud/v1alpha1",
        "kind": "DNSConfig", "providers": null, "syncProvidersFromShootSpecDNS": true});
    live["spec"]["extensions"][index]["providerConfig"] = kept.clone();
    let live: Shoot = serde_json::from_value(live).unwrap();
    let patched = json(&to_shoot(&rt, &cfg, Some(&live)).unwrap().shoot);
    assert_eq!(patched["spec"].get("dns"), None);
    assert_eq!(patched["spec"]["extensions"][index]["providerConfig"], kept);
}

/// Gardener does not move a Shoot to another CloudProfile: a configuration that names another
/// one reaches new Shoots only, a patch keeps the one the Shoot has (also from the field of
/// older Shoots, `cloudProfileName`).
#[test]
fn a_patch_keeps_the_shoots_cloud_profile() {
    let rt = runtime("aws");
    let live = live(&rt);
    assert_eq!(
        spec(&patch(&rt, &live))["cloudProfile"],
        json!({"kind": "CloudProfile", "name": "aws"})
    );
    let mut cfg = config();
    cfg.kim
        .providers
        .entry(kim_shared::config::ProviderKind::Aws)
        .or_default()
        .cloud_profile_name = Some("aws-next".into());
    let created = to_shoot(&rt, &cfg, None).unwrap();
    assert_eq!(spec(&created)["cloudProfile"]["name"], "aws-next");
    let patched = to_shoot(&rt, &cfg, Some(&live)).unwrap();
    assert_eq!(
        spec(&patched)["cloudProfile"],
        json!({"kind": "CloudProfile", "name": "aws"})
    );
    let mut older = live.clone();
    older.spec.cloud_profile = None;
    older.spec.cloud_profile_name = Some("aws-legacy".into());
    let patched = to_shoot(&rt, &cfg, Some(&older)).unwrap();
    assert_eq!(
        spec(&patched)["cloudProfile"],
        json!({"kind": "CloudProfile", "name": "aws-legacy"})
    );
}

#[test]
fn kubernetes_and_image_versions_never_go_down() {
    let rt = runtime("aws");
    let mut live = live(&rt);
    live.spec.kubernetes.version = Some("1.35.9".into());
    live.spec.provider.workers.as_mut().unwrap()[0]
        .machine
        .image
        .as_mut()
        .unwrap()
        .version = Some("1877.9.0".into());
    let mut rt = rt;
    rt.spec.shoot.provider.workers[0].kubernetes =
        Some(serde_json::from_value(json!({"version": "1.34.2"})).unwrap());
    live.spec.provider.workers.as_mut().unwrap()[0].kubernetes =
        Some(serde_json::from_value(json!({"version": "1.35.1"})).unwrap());
    let s = spec(&patch(&rt, &live));
    assert_eq!(s["kubernetes"]["version"], "1.35.9");
    assert_eq!(
        s["provider"]["workers"][0]["machine"]["image"]["version"],
        "1877.9.0"
    );
    assert_eq!(
        s["provider"]["workers"][0]["kubernetes"]["version"], "1.35.1",
        "the pool's version Gardener's maintenance raised"
    );

    // Upgrades go through; another image name is not compared.
    let mut up = rt.clone();
    up.spec.shoot.kubernetes.as_mut().unwrap().version = Some("1.36.3".into());
    up.spec.shoot.provider.workers[0].kubernetes =
        Some(serde_json::from_value(json!({"version": "1.36.1"})).unwrap());
    up.spec.shoot.provider.workers[0].machine.image =
        serde_json::from_value(json!({"name": "ubuntu", "version": "1.0.0"})).unwrap();
    let s = spec(&patch(&up, &live));
    assert_eq!(s["kubernetes"]["version"], "1.36.3");
    assert_eq!(
        s["provider"]["workers"][0]["machine"]["image"],
        json!({"name": "ubuntu", "version": "1.0.0"})
    );
    assert_eq!(
        s["provider"]["workers"][0]["kubernetes"]["version"],
        "1.36.1"
    );

    // An image without a version keeps the one Gardener gave it: no operating system upgrade
    // with an unrelated change.
    let mut unversioned = rt.clone();
    unversioned.spec.shoot.provider.workers[0].machine.image =
        serde_json::from_value(json!({"name": "suse-chost"})).unwrap();
    let mut live = live.clone();
    live.spec.provider.workers.as_mut().unwrap()[0]
        .machine
        .image =
        serde_json::from_value(json!({"name": "suse-chost", "version": "15.5.20250101"})).unwrap();
    let s = spec(&patch(&unversioned, &live));
    assert_eq!(
        s["provider"]["workers"][0]["machine"]["image"],
        json!({"name": "suse-chost", "version": "15.5.20250101"})
    );
}

#[test]
fn zones_are_only_added_and_the_live_infrastructure_config_is_merged() {
    let mut rt = runtime("aws");
    set_zones(&mut rt, &["eu-central-1b", "eu-central-1a"]);
    let mut live = live(&rt);
    // Fields upstream keeps (and one it would drop) in the live config.
    let infra = &mut live.spec.provider.infrastructure_config.as_mut().unwrap().0;
    infra["enableECRAccess"] = json!(false);
    infra["enableDedicatedTenancyForVPC"] = json!(true);
    infra["networks"]["zones"][0]["elasticIPAllocationID"] = json!("eipalloc-1");
    live.spec.provider.control_plane_config.as_mut().unwrap().0["loadBalancerController"] =
        json!({"enabled": true});

    // The Runtime drops 1b and adds 1c.
    set_zones(&mut rt, &["eu-central-1a", "eu-central-1c"]);
    let s = spec(&patch(&rt, &live));
    assert_eq!(
        s["provider"]["workers"][0]["zones"],
        json!(["eu-central-1b", "eu-central-1a", "eu-central-1c"])
    );
    let infra = &s["provider"]["infrastructureConfig"];
    assert_eq!(infra["enableECRAccess"], false);
    assert_eq!(infra["enableDedicatedTenancyForVPC"], true);
    assert_eq!(
        infra["networks"]["zones"],
        json!([
            {"name": "eu-central-1b", "workers": "10.250.0.0/19", "public": "10.250.32.0/20", "internal": "10.250.48.0/20", "elasticIPAllocationID": "eipalloc-1"},
            {"name": "eu-central-1a", "workers": "10.250.64.0/19", "public": "10.250.96.0/20", "internal": "10.250.112.0/20"},
            {"name": "eu-central-1c", "workers": "10.250.128.0/19", "public": "10.250.160.0/20", "internal": "10.250.176.0/20"},
        ])
    );
    assert_eq!(infra["networks"]["vpc"], json!({"cidr": "10.250.0.0/16"}));
    assert_eq!(
        s["provider"]["controlPlaneConfig"]["loadBalancerController"],
        json!({"enabled": true})
    );
}

#[test]
fn adding_a_zone_keeps_a_named_network_and_completes_what_the_live_configs_lack() {
    fn live_infra(live: &mut Shoot) -> &mut Value {
        &mut live.spec.provider.infrastructure_config.as_mut().unwrap().0
    }
    for (provider, key, first, second, api) in [
        (
            "aws",
            "vpc",
            "eu-central-1a",
            "eu-central-1b",
            "aws.provider.extensions.gardener.cloud/v1alpha1",
        ),
        (
            "azure",
            "vnet",
            "1",
            "2",
            "azure.provider.extensions.gardener.cloud/v1alpha1",
        ),
    ] {
        let mut rt = runtime(provider);
        set_zones(&mut rt, &[first]);
        let mut live = live(&rt);
        set_zones(&mut rt, &[first, second]);
        let infra_of =
            |live: &Shoot| spec(&patch(&rt, live))["provider"]["infrastructureConfig"].clone();
        // A network named by id or by name, or with its own CIDR, is left as it is.
        for network in [
            json!({"id": "net-1"}),
            json!({"name": "net-1", "resourceGroup": "rg-1"}),
            json!({"cidr": "10.1.0.0/16"}),
        ] {
            live_infra(&mut live)["networks"][key] = network.clone();
            assert_eq!(infra_of(&live)["networks"][key], network, "{provider}");
        }
        // Without one, the nodes CIDR.
        live_infra(&mut live)["networks"]
            .as_object_mut()
            .unwrap()
            .remove(key);
        assert_eq!(
            infra_of(&live)["networks"][key],
            json!({"cidr": "10.250.0.0/16"}),
            "{provider}"
        );
        // Azure's infrastructure is zoned once it has zones; AWS's has no such field.
        live_infra(&mut live)
            .as_object_mut()
            .unwrap()
            .remove("zoned");
        assert_eq!(
            infra_of(&live).get("zoned").cloned(),
            (provider == "azure").then_some(json!(true)),
            "{provider}"
        );
        // A live Shoot without a control plane config gets the provider's.
        live.spec.provider.control_plane_config = None;
        assert_eq!(
            spec(&patch(&rt, &live))["provider"]["controlPlaneConfig"]["apiVersion"],
            api,
            "{provider}"
        );
    }
}

#[test]
fn without_added_zones_the_live_configs_are_kept_verbatim() {
    let rt = runtime("aws");
    let mut live = live(&rt);
    let marker = json!({"apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1", "kind": "InfrastructureConfig", "networks": {"vpc": {"id": "vpc-1"}}});
    live.spec.provider.infrastructure_config = Some(marker.clone().into());
    let mut changed = rt.clone();
    changed.spec.shoot.networking.nodes = "10.251.0.0/16".into();
    let s = spec(&patch(&changed, &live));
    assert_eq!(s["provider"]["infrastructureConfig"], marker);
}

#[test]
fn azure_zone_added_and_azure_lite_kept() {
    let mut rt = runtime("azure");
    set_zones(&mut rt, &["1"]);
    let live = live(&rt);
    set_zones(&mut rt, &["1", "2"]);
    let s = spec(&patch(&rt, &live));
    let nat = json!({"enabled": true, "idleConnectionTimeoutMinutes": 4});
    assert_eq!(
        s["provider"]["infrastructureConfig"]["networks"]["zones"],
        json!([{"name": 1, "cidr": "10.250.0.0/19", "natGateway": nat}, {"name": 2, "cidr": "10.250.32.0/19", "natGateway": nat}])
    );
    assert_eq!(s["provider"]["infrastructureConfig"]["zoned"], true);

    // An Azure Shoot created without zones keeps its configs whatever the pools say.
    let mut lite = live.clone();
    let lite_infra = json!({"apiVersion": "azure.provider.extensions.gardener.cloud/v1alpha1", "kind": "InfrastructureConfig", "networks": {"vnet": {"cidr": "10.250.0.0/16"}, "workers": "10.250.0.0/16"}});
    lite.spec.provider.infrastructure_config = Some(lite_infra.clone().into());
    assert_eq!(
        spec(&patch(&rt, &lite))["provider"]["infrastructureConfig"],
        lite_infra
    );
}

#[test]
fn gcp_keeps_its_control_plane_zone_when_zones_are_added() {
    let mut rt = runtime("gcp");
    set_zones(&mut rt, &["europe-west3-b"]);
    let live = live(&rt);
    set_zones(&mut rt, &["europe-west3-a", "europe-west3-b"]);
    let s = spec(&patch(&rt, &live));
    assert_eq!(
        s["provider"]["controlPlaneConfig"]["zone"],
        "europe-west3-b"
    );
    assert_eq!(
        s["provider"]["workers"][0]["zones"],
        json!(["europe-west3-b", "europe-west3-a"])
    );
}

#[test]
fn worker_pools_keep_the_live_order_and_removal_is_flagged() {
    let mut rt = runtime("aws");
    let (a, b, c) = (
        pool_named(&rt, "a"),
        pool_named(&rt, "b"),
        pool_named(&rt, "c"),
    );
    rt.spec.shoot.provider.additional_workers = Some(vec![b.clone(), a.clone()]);
    let mut live = live(&rt);
    // Gardener's order differs from the Runtime's.
    live.spec.provider.workers.as_mut().unwrap().reverse();
    rt.spec.shoot.provider.additional_workers = Some(vec![c, a, b]);
    let patched = patch(&rt, &live);
    assert!(!patched.workers_removed);
    let names: Vec<String> = spec(&patched)["provider"]["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["a", "b", "cpu-worker-0", "c"]);

    rt.spec.shoot.provider.additional_workers = Some(vec![pool_named(&rt, "a")]);
    assert!(patch(&rt, &live).workers_removed, "pool b is gone");
}

fn pool_named(rt: &Runtime, name: &str) -> kim_shared::gardener::Worker {
    let mut w = rt.spec.shoot.provider.workers[0].clone();
    w.name = name.into();
    w
}

#[test]
fn live_update_strategy_is_kept_when_unset() {
    let rt = runtime("aws");
    let live = live(&rt);
    assert_eq!(
        spec(&patch(&rt, &live))["provider"]["workers"][0]["updateStrategy"],
        "AutoRollingUpdate"
    );
    let mut set = rt.clone();
    set.spec.shoot.provider.workers[0].update_strategy = Some("AutoInPlaceUpdate".into());
    assert_eq!(
        spec(&patch(&set, &live))["provider"]["workers"][0]["updateStrategy"],
        "AutoInPlaceUpdate"
    );
}

#[test]
fn foreign_extensions_and_resources_are_preserved_managed_ones_replaced() {
    let rt = runtime("aws");
    let mut live = live(&rt);
    // A live cert config with an issuer the user added, a disabled networking filter.
    let exts = live.spec.extensions.as_mut().unwrap();
    exts[0].disabled = Some(true);
    exts[1].provider_config.as_mut().unwrap().0["issuers"] = json!([{"name": "custom"}]);
    let s = spec(&patch(&rt, &live));
    assert_eq!(
        types(&s),
        [
            "shoot-networking-filter",
            "shoot-cert-service",
            "shoot-dns-service",
            "shoot-oidc-service",
            "shoot-auditlog-service",
            "foreign"
        ]
    );
    assert_eq!(
        s["extensions"][0]["disabled"], false,
        "networking filter follows the Runtime"
    );
    assert_eq!(
        s["extensions"][1]["providerConfig"]["issuers"],
        json!([{"name": "custom"}]),
        "cert is not managed on patch"
    );
    assert_eq!(
        s["resources"],
        json!([
            {"name": "auditlog-credentials", "resourceRef": {"apiVersion": "v1", "kind": "Secret", "name": "auditlog-credentials-aws"}},
            {"name": "shoot-dns-service-dns", "resourceRef": {"apiVersion": "v1", "kind": "Secret", "name": "dns"}},
        ])
    );
}

#[test]
fn audit_log_extension_replaced_only_when_the_tenant_changed() {
    let rt = runtime("aws");
    let mut live = live(&rt);
    let audit = live
        .spec
        .extensions
        .as_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e.type_ == "shoot-auditlog-service")
        .unwrap();
    audit.provider_config.as_mut().unwrap().0["extra"] = json!("kept");
    let s = spec(&patch(&rt, &live));
    assert_eq!(s["extensions"][4]["providerConfig"]["extra"], "kept");

    let mut cfg = config();
    let tenant = cfg
        .audit_log_tenants
        .0
        .get_mut("aws")
        .unwrap()
        .get_mut("eu-central-1")
        .unwrap();
    tenant.tenant_id = "new-tenant".into();
    tenant.secret_name = "new-secret".into();
    let s = json(&to_shoot(&rt, &cfg, Some(&live)).unwrap().shoot)["spec"].clone();
    assert_eq!(
        s["extensions"][4]["providerConfig"]["tenantID"],
        "new-tenant"
    );
    assert!(s["extensions"][4]["providerConfig"].get("extra").is_none());
    assert_eq!(
        s["resources"][0]["resourceRef"]["name"], "new-secret",
        "the credentials follow the tenant"
    );
}

#[test]
fn registry_cache_nvidia_and_acl_on_patch() {
    let mut rt = runtime("aws");
    let mut live = live(&rt);
    live.spec.extensions.as_mut().unwrap().push(Extension {
        type_: "registry-cache".into(),
        disabled: Some(false),
        provider_config: Some(json!({"caches": [{"upstream": "docker.io"}]}).into()),
    });
    live.spec.extensions.as_mut().unwrap().push(Extension {
        type_: "shoot-nvidia-openshell".into(),
        disabled: Some(false),
        ..Default::default()
    });

    let find = |s: &Value, t: &str| {
        s["extensions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["type"] == t)
            .cloned()
    };

    // No caches (upstream's remove strategy, "Should remove RegistryCache extension when cache
    // list is empty on Runtime CR without changing order and data of other extensions"): the
    // live registry-cache extension is dropped, the others keep their order; NVIDIA off:
    // disabled.
    let s = spec(&patch(&rt, &live));
    assert_eq!(find(&s, "registry-cache"), None);
    // An empty list of caches is no caches too.
    let mut empty = rt.clone();
    empty.spec.image_registry_cache = registry_caches(json!([]));
    assert_eq!(find(&spec(&patch(&empty, &live)), "registry-cache"), None);
    let mut expected = types(&spec(&Converted {
        shoot: live.clone(),
        structured_auth: None,
        workers_removed: false,
    }));
    expected.retain(|t| t != "registry-cache");
    assert_eq!(types(&s), expected, "the others keep their order");
    assert_eq!(
        find(&s, "shoot-nvidia-openshell").unwrap(),
        json!({"type": "shoot-nvidia-openshell", "disabled": true})
    );

    // The 2025 object shape names no cache: the live extension is kept as it is.
    rt.spec.image_registry_cache = registry_caches(json!({"enabled": true}));
    let s = spec(&patch(&rt, &live));
    assert_eq!(
        find(&s, "registry-cache").unwrap(),
        json!({"type": "registry-cache", "disabled": false, "providerConfig": {"caches": [{"upstream": "docker.io"}]}})
    );

    // Today's list: every cache with its settings, credentials by the garden Secret's name.
    rt.spec.image_registry_cache = registry_caches(json!([
        {"name": "quay", "namespace": "kyma-system", "uid": "u-1",
         "config": {"upstream": "quay.io", "remoteURL": "https://quay.io",
                    "volume": {"size": "20Gi", "storageClassName": "premium"},
                    "garbageCollection": {"ttl": "24h"}, "http": {"tls": false},
                    "secretReferenceName": "quay-credentials",
                    "proxy": {"httpProxy": "http://proxy:3128", "httpsProxy": "http://proxy:3129"}}},
        {"name": "docker", "namespace": "default", "uid": "u-2",
         "config": {"upstream": "docker.io", "volume": {"size": 10_737_418_240_i64}}}
    ]));
    let err = to_shoot(&rt, &config(), Some(&live)).unwrap_err();
    assert_eq!(
        err,
        ConvertError::RegistryCacheSecret {
            index: 0,
            uid: "u-1".into()
        }
    );
    assert_eq!(err.runtime_field(), None);
    let opts = ConvertOptions {
        registry_cache_secrets: [("u-1".to_owned(), "reg-cache-abc".to_owned())].into(),
        ..Default::default()
    };
    let s = json(
        &to_shoot_with(&rt, &config(), Some(&live), &opts)
            .unwrap()
            .shoot,
    )["spec"]
        .clone();
    assert_eq!(
        find(&s, "registry-cache").unwrap(),
        json!({
            "type": "registry-cache",
            "disabled": false,
            "providerConfig": {"apiVersion": "registry.extensions.gardener.cloud/v1alpha3", "kind": "RegistryConfig", "caches": [
                {"upstream": "quay.io", "remoteURL": "https://quay.io",
                 "volume": {"size": "20Gi", "storageClassName": "premium"},
                 "garbageCollection": {"ttl": "24h0m0s"}, "secretReferenceName": "reg-cache-abc",
                 "proxy": {"httpProxy": "http://proxy:3128", "httpsProxy": "http://proxy:3129"}},
                // A size written as a number goes out as text, as Go's Quantity writes it.
                {"upstream": "docker.io", "volume": {"size": "10737418240"}}
            ]},
        })
    );
    let resources = s["resources"].as_array().unwrap();
    assert!(
        resources.contains(&json!({"name": "reg-cache-abc", "resourceRef": {"apiVersion": "v1", "kind": "Secret", "name": "reg-cache-abc"}})),
        "{resources:?}"
    );

    // A live Secret of a cache that is gone is dropped, other resources stay.
    live.spec.resources = Some(
        serde_json::from_value(json!([
            {"name": "reg-cache-old", "resourceRef": {"apiVersion": "v1", "kind": "Secret", "name": "reg-cache-old"}},
            {"name": "foreign", "resourceRef": {"apiVersion": "v1", "kind": "Secret", "name": "foreign"}}
        ]))
        .unwrap(),
    );
    let s = json(
        &to_shoot_with(&rt, &config(), Some(&live), &opts)
            .unwrap()
            .shoot,
    )["spec"]
        .clone();
    let names: Vec<&str> = s["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(
        names.contains(&"foreign") && names.contains(&"reg-cache-abc"),
        "{names:?}"
    );
    assert!(!names.contains(&"reg-cache-old"), "{names:?}");
    rt.spec.image_registry_cache = None;

    // ACL managed but no longer requested: a live one is switched off.
    live.spec.extensions.as_mut().unwrap().push(Extension {
        type_: "acl".into(),
        disabled: Some(false),
        ..Default::default()
    });
    let opts = ConvertOptions {
        acl: Some(Default::default()),
        ..Default::default()
    };
    let s = json(
        &to_shoot_with(&rt, &config(), Some(&live), &opts)
            .unwrap()
            .shoot,
    )["spec"]
        .clone();
    assert_eq!(
        find(&s, "acl").unwrap(),
        json!({"type": "acl", "disabled": true})
    );
    // Not managed (upstream's `--api-server-acl-enabled` off): switched off too, as upstream's
    // `AclNeedsToBeEnabled` decides.
    assert_eq!(
        find(&spec(&patch(&rt, &live)), "acl").unwrap(),
        json!({"type": "acl", "disabled": true})
    );
}

#[test]
fn broken_live_shoot_is_reported_as_such() {
    let rt = runtime("aws");
    let mut live = live(&rt);
    live.spec.provider.infrastructure_config = None;
    let err = to_shoot(&rt, &config(), Some(&live)).unwrap_err();
    assert!(
        matches!(
            err,
            ConvertError::LiveShoot {
                field: "spec.provider.infrastructureConfig",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.runtime_field(), None);

    let mut live = self::live(&rt);
    live.spec.provider.workers = None;
    let err = to_shoot(&rt, &config(), Some(&live)).unwrap_err();
    assert!(
        matches!(
            err,
            ConvertError::LiveShoot {
                field: "spec.provider.workers",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn todays_upstream_extenders_write_the_same_on_patch_as_on_create() {
    let mut rt = runtime("aws");
    rt.spec.shoot.networking.pods = "10.96.0.0/24".into();
    let w = &mut rt.spec.shoot.provider.workers[0];
    w.kubernetes = Some(serde_json::from_value(json!({"kubelet": {"maxPods": 300}})).unwrap());
    w.cri = Some(
        serde_json::from_value(
            json!({"name": "containerd", "containerRuntimes": [{"type": "gvisor"}]}),
        )
        .unwrap(),
    );
    let mut cfg = config();
    let api = cfg
        .converter
        .kubernetes
        .kube_api_server
        .get_or_insert_with(Default::default);
    api.feature_gates = [("SomeGate".to_owned(), true)].into();
    api.runtime_config = [("some.group/v1".to_owned(), true)].into();
    cfg.converter.kubernetes.kubelet =
        Some(serde_json::from_value(json!({"featureGates": {"OtherGate": false}})).unwrap());

    let created = to_shoot(&rt, &cfg, None).unwrap().shoot;
    // A live Shoot as Gardener stores it: the same values (durations already in Go's form).
    let patched = to_shoot(&rt, &cfg, Some(&created)).unwrap().shoot;
    let (c, p) = (json(&created), json(&patched));
    assert_eq!(p["metadata"]["annotations"], c["metadata"]["annotations"]);
    for key in ["featureGates", "runtimeConfig"] {
        assert_eq!(
            p["spec"]["kubernetes"]["kubeAPIServer"][key],
            c["spec"]["kubernetes"]["kubeAPIServer"][key]
        );
    }
    assert_eq!(
        p["spec"]["kubernetes"]["kubelet"],
        json!({"featureGates": {"OtherGate": false}})
    );
    let worker = &p["spec"]["provider"]["workers"][0];
    assert_eq!(worker, &c["spec"]["provider"]["workers"][0]);
    assert_eq!(worker["kubernetes"]["kubelet"]["maxPods"], 254);
    assert_eq!(
        worker["machineControllerManager"],
        json!({"machineDrainTimeout": "15m0s", "maxEvictRetries": 2})
    );
    assert_eq!(
        worker["cri"]["containerRuntimes"][0]["providerConfig"]["configFlags"],
        json!({"net-raw": "true"})
    );
    // Patching the patched Shoot again changes nothing (no flip-flop).
    let again = to_shoot(&rt, &cfg, Some(&patched)).unwrap().shoot;
    assert_eq!(again, patched);
}

/// Upstream's `TestNewExtensionsExtenderForPatch`: "Should not add Network filter extension
/// when network restriction is globally disabled and none exists" and "Should leave existing
/// Network filter extension untouched when network restriction is globally disabled".
#[test]
fn network_restriction_off_leaves_the_networking_filter_alone() {
    let mut rt = runtime("aws");
    let off = ConvertOptions {
        network_restriction: false,
        ..Default::default()
    };
    let mut live = live(&rt);
    // A live filter as a human set it: kept as it is although the Runtime asks otherwise.
    let filter = live
        .spec
        .extensions
        .as_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e.type_ == "shoot-networking-filter")
        .unwrap();
    filter.disabled = Some(false);
    let before = live.spec.extensions.clone();
    rt.spec.security.networking.filter =
        serde_json::from_value(json!({"egress": {"enabled": false}})).unwrap();
    let patched = to_shoot_with(&rt, &config(), Some(&live), &off).unwrap();
    assert_eq!(patched.shoot.spec.extensions, before);
    // None on the live Shoot: none added.
    live.spec
        .extensions
        .as_mut()
        .unwrap()
        .retain(|e| e.type_ != "shoot-networking-filter");
    let patched = to_shoot_with(&rt, &config(), Some(&live), &off).unwrap();
    assert!(!types(&spec(&patched)).contains(&"shoot-networking-filter".to_owned()));
    // On (the default): the Runtime's filter is appended.
    let on = spec(&patch(&rt, &live));
    assert_eq!(types(&on).last().unwrap(), "shoot-networking-filter");
}

/// Upstream's "Should update ACL extension without changing order and data of other
/// extensions" and "Should not add ACL extension when acl is disabled".
#[test]
fn acl_is_updated_in_place_with_new_addresses() {
    let mut rt = runtime("aws");
    rt.spec.shoot.kubernetes = serde_json::from_value(
        json!({"kubeAPIServer": {"acl": {"allowedCIDRs": ["1.1.1.1/32", "2.2.2.2/32"]}}}),
    )
    .unwrap();
    let managed = |kcp: &str| ConvertOptions {
        acl: Some(AclAddresses {
            operator_cidrs: vec!["192.168.1.0/24".into()],
            kcp_nat_ip: kcp.into(),
        }),
        ..Default::default()
    };
    let created = to_shoot_with(&rt, &config(), None, &managed("172.16.0.1/32"))
        .unwrap()
        .shoot;
    let before = types(&json(&created)["spec"]);
    let patched = to_shoot_with(&rt, &config(), Some(&created), &managed("172.16.0.2/32"))
        .unwrap()
        .shoot;
    let s = json(&patched)["spec"].clone();
    assert_eq!(types(&s), before, "same order, replaced in place");
    let acl = s["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "acl")
        .unwrap();
    assert_eq!(
        acl["providerConfig"]["rule"]["cidrs"],
        json!([
            "1.1.1.1/32",
            "2.2.2.2/32",
            "192.168.1.0/24",
            "172.16.0.2/32"
        ])
    );
    // Not managed (flag off) and none live: none added.
    let mut live = created.clone();
    live.spec
        .extensions
        .as_mut()
        .unwrap()
        .retain(|e| e.type_ != "acl");
    assert!(!types(&spec(&patch(&rt, &live))).contains(&"acl".to_owned()));
}

/// Upstream's provider patch keeps `dualStack` of the live AWS infrastructure config; its
/// networking extender runs on create only. A dual-stack Shoot patched, also with a zone
/// added, stays dual stack and never loses the load balancer controller.
#[test]
fn dual_stack_shoot_stays_dual_stack_on_patch() {
    let mut rt = runtime("aws");
    rt.spec.shoot.networking.dual_stack = Some(true);
    let mut cfg = config();
    cfg.converter.networking.enable_dual_stack_ip = true;
    let created = to_shoot(&rt, &cfg, None).unwrap().shoot;
    let patched = to_shoot(&rt, &cfg, Some(&created)).unwrap().shoot;
    let (c, p) = (json(&created), json(&patched));
    assert_eq!(
        p["spec"]["provider"]["infrastructureConfig"],
        c["spec"]["provider"]["infrastructureConfig"]
    );
    assert_eq!(
        p["spec"]["provider"]["controlPlaneConfig"],
        c["spec"]["provider"]["controlPlaneConfig"]
    );
    // The families are left to what creation set (server-side apply keeps them).
    assert!(p["spec"]["networking"].get("ipFamilies").is_none());
    set_zones(&mut rt, &["eu-central-1a", "eu-central-1b"]);
    let p = json(&to_shoot(&rt, &cfg, Some(&created)).unwrap().shoot);
    assert_eq!(
        p["spec"]["provider"]["infrastructureConfig"]["dualStack"],
        json!({"enabled": true})
    );
    assert_eq!(
        p["spec"]["provider"]["infrastructureConfig"]["networks"]["zones"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        p["spec"]["provider"]["controlPlaneConfig"]["loadBalancerController"],
        json!({"enabled": true})
    );
}

#[test]
fn a_dedicated_audit_log_tenant_replaces_the_shared_one_and_is_then_in_place() {
    use kim_shared::config::AuditLogTenant;
    let rt = runtime("aws");
    let live = live(&rt);
    let dedicated = AuditLogTenant {
        tenant_id: "subaccount-1".into(),
        service_url: "https://auditlog.dedicated.example".into(),
        secret_name: "dedicated-write-1".into(),
    };
    assert!(!kim_shared::convert::audit_log_in_place(&live, &dedicated));
    let opts = ConvertOptions {
        dedicated_audit_log: Some(dedicated.clone()),
        ..Default::default()
    };
    let patched = to_shoot_with(&rt, &config(), Some(&live), &opts)
        .unwrap()
        .shoot;
    let s = json(&patched)["spec"].clone();
    let ext = s["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "shoot-auditlog-service")
        .unwrap();
    assert_eq!(ext["providerConfig"]["tenantID"], "subaccount-1");
    assert_eq!(
        ext["providerConfig"]["serviceURL"],
        "https://auditlog.dedicated.example"
    );
    assert!(
        s["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "auditlog-credentials"
                && r["resourceRef"]["name"] == "dedicated-write-1"),
        "{s}"
    );
    assert!(kim_shared::convert::audit_log_in_place(
        &patched, &dedicated
    ));
    // A region without a shared tenant converts with the dedicated one even when audit logs
    // are mandatory.
    let mut far = rt.clone();
    far.spec.shoot.region = "nowhere-1".into();
    assert!(to_shoot_with(&far, &config(), Some(&live), &ConvertOptions::default()).is_err());
    assert!(to_shoot_with(&far, &config(), Some(&live), &opts).is_ok());
}

#[test]
fn an_audit_log_is_in_place_only_with_the_tenants_extension_and_its_secret_as_credentials() {
    use kim_shared::config::AuditLogTenant;
    let rt = runtime("aws");
    let tenant = AuditLogTenant {
        tenant_id: "subaccount-1".into(),
        service_url: "https://auditlog.dedicated.example".into(),
        secret_name: "dedicated-write-1".into(),
    };
    let opts = ConvertOptions {
        dedicated_audit_log: Some(tenant.clone()),
        ..Default::default()
    };
    let good = json(
        &to_shoot_with(&rt, &config(), Some(&live(&rt)), &opts)
            .unwrap()
            .shoot,
    );
    let in_place = |edit: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        edit(&mut v);
        let shoot: Shoot = serde_json::from_value(v).unwrap();
        kim_shared::convert::audit_log_in_place(&shoot, &tenant)
    };
    assert!(in_place(&|_| {}));
    let credentials = |v: &mut Value| -> Value {
        let list = v["spec"]["resources"].as_array_mut().unwrap();
        let i = list
            .iter()
            .position(|r| r["name"] == "auditlog-credentials")
            .unwrap();
        list.remove(i)
    };
    // Each part of the credentials reference counts: its name, the kind and the Secret.
    for (field, value) in [
        ("/name", "other-credentials"),
        ("/resourceRef/kind", "ConfigMap"),
        ("/resourceRef/name", "shared-write"),
    ] {
        let edit = |v: &mut Value| {
            let mut r = credentials(v);
            *r.pointer_mut(field).unwrap() = json!(value);
            v["spec"]["resources"].as_array_mut().unwrap().push(r);
        };
        assert!(!in_place(&edit), "{field} = {value}");
    }
    // The extension as the tenant wants it is not enough without the credentials.
    assert!(!in_place(&|v| {
        credentials(v);
    }));
    // Nor the credentials without the tenant's keys in the extension.
    assert!(!in_place(&|v| {
        let ext = v["spec"]["extensions"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|e| e["type"] == "shoot-auditlog-service")
            .unwrap();
        ext["providerConfig"]["tenantID"] = json!("subaccount-2");
    }));
}

#[test]
fn registry_cache_secrets_on_a_shoot_without_other_resources() {
    // No audit-log tenant in the region and audit logs not mandatory: no other resources.
    let mut rt = runtime("aws");
    rt.spec.shoot.region = "us-gov-1".into();
    let opts = ConvertOptions {
        audit_log_mandatory: false,
        registry_cache_secrets: [("u-1".to_owned(), "reg-cache-abc".to_owned())].into(),
        ..Default::default()
    };
    let convert = |rt: &Runtime, live: &Shoot| {
        json(
            &to_shoot_with(rt, &config(), Some(live), &opts)
                .unwrap()
                .shoot,
        )["spec"]
            .clone()
    };
    let mut live = to_shoot_with(&rt, &config(), None, &opts).unwrap().shoot;
    assert_eq!(live.spec.resources, None);
    assert!(convert(&rt, &live).get("resources").is_none());
    let mut cached = rt.clone();
    cached.spec.image_registry_cache = registry_caches(json!([
        {"name": "quay", "namespace": "kyma-system", "uid": "u-1",
         "config": {"upstream": "quay.io", "secretReferenceName": "quay-credentials"}}
    ]));
    assert_eq!(
        convert(&cached, &live)["resources"],
        json!([{"name": "reg-cache-abc", "resourceRef": {"apiVersion": "v1", "kind": "Secret", "name": "reg-cache-abc"}}])
    );
    // The last cache gone: the list is sent empty, so that its entry is dropped.
    live.spec.resources = Some(
        serde_json::from_value(json!([
            {"name": "reg-cache-abc", "resourceRef": {"apiVersion": "v1", "kind": "Secret", "name": "reg-cache-abc"}}
        ]))
        .unwrap(),
    );
    assert_eq!(convert(&rt, &live)["resources"], json!([]));
}

#[test]
fn a_shoot_created_without_the_asked_for_registry_caches_needs_one_patch() {
    let mut rt = runtime("aws");
    rt.spec.image_registry_cache = registry_caches(json!([
        {"name": "docker", "namespace": "default", "uid": "u-2", "config": {"upstream": "docker.io"}}
    ]));
    // Created without the extension (upstream's create), so one patch is due.
    let created = to_shoot(&rt, &config(), None).unwrap().shoot;
    assert!(kim_shared::convert::registry_cache_missing(&rt, &created));
    // The patch writes it; after it nothing more is due.
    let patched = patch(&rt, &live(&rt)).shoot;
    assert!(!kim_shared::convert::registry_cache_missing(&rt, &patched));
    // A disabled extension is not the cache asked for.
    let mut disabled = patched.clone();
    for e in disabled.spec.extensions.iter_mut().flatten() {
        if e.type_ == "registry-cache" {
            e.disabled = Some(true);
        }
    }
    assert!(kim_shared::convert::registry_cache_missing(&rt, &disabled));
    // No caches asked for (none, an empty list, the 2025 shape): nothing is due.
    for caches in [None, Some(json!([])), Some(json!({"enabled": true}))] {
        rt.spec.image_registry_cache = caches.map(|c| serde_json::from_value(c).unwrap());
        assert!(!kim_shared::convert::registry_cache_missing(&rt, &created));
    }
}

#[test]
fn a_re_apply_takes_the_registry_cache_secrets_the_shoot_references() {
    use kim_shared::convert::registry_cache_secrets_on;
    let mut rt = runtime("aws");
    rt.spec.image_registry_cache = registry_caches(json!([
        {"name": "docker", "namespace": "team", "uid": "u-2",
         "config": {"upstream": "docker.io", "secretReferenceName": "creds"}},
        {"name": "quay", "namespace": "team", "uid": "u-3",
         "config": {"upstream": "quay.io"}}
    ]));
    let opts = ConvertOptions {
        registry_cache_secrets: [("u-2".to_owned(), "reg-cache-1".to_owned())].into(),
        ..Default::default()
    };
    let live = live(&rt);
    // Before the first patch the Shoot has no extension: the secrets must be copied.
    assert_eq!(registry_cache_secrets_on(&rt, &live), None);
    let patched = to_shoot_with(&rt, &config(), Some(&live), &opts)
        .unwrap()
        .shoot;
    let found = registry_cache_secrets_on(&rt, &patched).expect("the patched Shoot names them");
    assert_eq!(found, opts.registry_cache_secrets);
    // Applied again with what it found, the spec is the one patched.
    let again = to_shoot_with(
        &rt,
        &config(),
        Some(&patched),
        &ConvertOptions {
            registry_cache_secrets: found,
            ..Default::default()
        },
    )
    .unwrap()
    .shoot;
    assert_eq!(
        serde_json::to_value(&again.spec).unwrap(),
        serde_json::to_value(&patched.spec).unwrap()
    );
    // Changed by hand: the extension's entry, the resource, the extension's state.
    fn extension(s: &mut Shoot) -> &mut Extension {
        s.spec
            .extensions
            .iter_mut()
            .flatten()
            .find(|e| e.type_ == "registry-cache")
            .unwrap()
    }
    let edit = |f: &dyn Fn(&mut Shoot)| {
        let mut s = patched.clone();
        f(&mut s);
        registry_cache_secrets_on(&rt, &s)
    };
    assert_eq!(
        edit(
            &|s| extension(s).provider_config.as_mut().unwrap().0["caches"][0]["upstream"] =
                json!("ghcr.io")
        ),
        None
    );
    assert_eq!(
        edit(&|s| s
            .spec
            .resources
            .as_mut()
            .unwrap()
            .retain(|r| r.name != "reg-cache-1")),
        None
    );
    assert_eq!(
        edit(&|s| {
            for r in s.spec.resources.iter_mut().flatten() {
                r.name = r.name.replace("reg-cache-1", "reg-cache-9");
            }
        }),
        None
    );
    assert_eq!(
        edit(&|s| {
            for r in s.spec.resources.iter_mut().flatten() {
                r.resource_ref.name = r.resource_ref.name.replace("reg-cache-1", "reg-cache-9");
            }
        }),
        None
    );
    assert_eq!(edit(&|s| extension(s).disabled = Some(true)), None);
    // No cache with credentials: nothing to find, nothing missing.
    rt.spec.image_registry_cache = registry_caches(json!([
        {"name": "quay", "namespace": "team", "uid": "u-3", "config": {"upstream": "quay.io"}}
    ]));
    assert_eq!(
        registry_cache_secrets_on(&rt, &live),
        Some(Default::default())
    );
}

#[test]
fn a_credentials_rotation_needs_one_patch_which_records_it_on_the_shoot() {
    use kim_shared::names::ANNOTATION_REGISTRY_CACHE_CREDENTIALS as KEY;
    let mut rt = runtime("aws");
    rt.spec.image_registry_cache = registry_caches(json!([
        {"name": "docker", "namespace": "team", "uid": "u-2",
         "config": {"upstream": "docker.io", "secretReferenceName": "creds"}}
    ]));
    let opts = ConvertOptions {
        registry_cache_secrets: [("u-2".to_owned(), "reg-cache-1".to_owned())].into(),
        ..Default::default()
    };
    let live = live(&rt);
    // No version read yet: nothing is due, nothing is written.
    assert!(!kim_shared::convert::registry_cache_credentials_changed(
        &rt, &live
    ));
    let patched = to_shoot_with(&rt, &config(), Some(&live), &opts)
        .unwrap()
        .shoot;
    assert!(
        !patched
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .contains_key(KEY)
    );
    // The registry cache controller read a version the Shoot does not record: one patch.
    rt.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(KEY.to_owned(), "u-2=41".to_owned());
    assert!(kim_shared::convert::registry_cache_credentials_changed(
        &rt, &patched
    ));
    // The create does not copy credentials, so it records no version.
    let created = to_shoot(&rt, &config(), None).unwrap().shoot;
    assert!(
        !created
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .contains_key(KEY)
    );
    let patched = to_shoot_with(&rt, &config(), Some(&live), &opts)
        .unwrap()
        .shoot;
    assert_eq!(
        patched.metadata.annotations.as_ref().unwrap()[KEY],
        "u-2=41"
    );
    assert!(!kim_shared::convert::registry_cache_credentials_changed(
        &rt, &patched
    ));
    // The next rotation.
    rt.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(KEY.to_owned(), "u-2=57".to_owned());
    assert!(kim_shared::convert::registry_cache_credentials_changed(
        &rt, &patched
    ));
}
