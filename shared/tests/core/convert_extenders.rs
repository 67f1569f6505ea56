//! One focused test per conversion step (create form), in upstream's extender order (the steps
//! of `docs/conversion.md`), plus the error cases listed there.
#![allow(clippy::unwrap_used)]

use crate::convert_fixture::{config, json, runtime, set_zones};
use kim_shared::api::Runtime;
use kim_shared::config::{DnsConfig, KimConfig};
use kim_shared::convert::{
    AclAddresses, ConvertError, ConvertOptions, Converted, to_shoot, to_shoot_with,
};
use serde_json::{Value, json};

fn create(rt: &Runtime, cfg: &KimConfig) -> Converted {
    to_shoot(rt, cfg, None).unwrap_or_else(|e| panic!("conversion failed: {e}"))
}

fn spec(rt: &Runtime) -> Value {
    json(&create(rt, &config()).shoot)["spec"].clone()
}

fn extension(spec: &Value, type_: &str) -> Option<Value> {
    spec["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == type_)
        .cloned()
}

fn fails(rt: &Runtime, cfg: &KimConfig) -> ConvertError {
    to_shoot(rt, cfg, None).expect_err("conversion must fail")
}

#[test]
fn base_object_uses_credentials_binding_and_copies_the_networks() {
    let mut rt = runtime("aws");
    rt.spec.shoot.control_plane =
        serde_json::from_value(json!({"highAvailability": {"failureTolerance": {"type": "zone"}}}))
            .unwrap();
    let shoot = json(&create(&rt, &config()).shoot);
    assert_eq!(shoot["apiVersion"], "core.gardener.cloud/v1beta1");
    assert_eq!(shoot["kind"], "Shoot");
    assert_eq!(shoot["metadata"]["name"], "c-1234567");
    assert_eq!(shoot["metadata"]["namespace"], "garden-kyma-dev");
    let spec = &shoot["spec"];
    assert_eq!(spec["purpose"], "evaluation");
    assert_eq!(spec["region"], "eu-central-1");
    assert_eq!(spec["credentialsBindingName"], "hyperscaler");
    assert!(
        spec.get("secretBindingName").is_none(),
        "forbidden from Kubernetes 1.34"
    );
    assert_eq!(
        spec["networking"],
        json!({"type": "calico", "nodes": "10.250.0.0/16", "pods": "10.96.0.0/13", "services": "10.104.0.0/13"})
    );
    assert_eq!(
        spec["controlPlane"]["highAvailability"]["failureTolerance"]["type"],
        "zone"
    );
}

#[test]
fn annotations_carry_runtime_id_generation_cleanup_grace_periods_and_licence() {
    let mut rt = runtime("aws");
    let annotations =
        |rt: &Runtime| json(&create(rt, &config()).shoot)["metadata"]["annotations"].clone();
    assert_eq!(
        annotations(&rt),
        json!({
            "infrastructuremanager.kyma-project.io/runtime-id": "runtime-id-1",
            "infrastructuremanager.kyma-project.io/runtime-generation": "3",
            "shoot.gardener.cloud/cleanup-extended-apis-finalize-grace-period-seconds": "120",
            "shoot.gardener.cloud/cleanup-kubernetes-resources-finalize-grace-period-seconds": "120",
            "shoot.gardener.cloud/cleanup-webhooks-finalize-grace-period-seconds": "60",
        })
    );
    rt.spec.shoot.licence_type = Some(String::new());
    assert!(
        annotations(&rt)
            .get("infrastructuremanager.kyma-project.io/licence-type")
            .is_none()
    );
    rt.spec.shoot.licence_type = Some("TestDevelopmentAndDemo".into());
    assert_eq!(
        annotations(&rt)["infrastructuremanager.kyma-project.io/licence-type"],
        "TestDevelopmentAndDemo"
    );
}

#[test]
fn labels_carry_the_accounts() {
    let shoot = json(&create(&runtime("aws"), &config()).shoot);
    assert_eq!(
        shoot["metadata"]["labels"],
        json!({"account": "ga-1", "subaccount": "sa-1"})
    );
}

#[test]
fn missing_account_label_is_an_error_naming_it() {
    let mut rt = runtime("aws");
    rt.metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("kyma-project.io/subaccount-id");
    let err = fails(&rt, &config());
    assert_eq!(
        err.runtime_field().as_deref(),
        Some("metadata.labels[kyma-project.io/subaccount-id]")
    );
    assert!(
        err.to_string()
            .starts_with("metadata.labels[kyma-project.io/subaccount-id]:"),
        "{err}"
    );
}

#[test]
fn seed_selector_only_when_seed_location_is_enforced() {
    let mut rt = runtime("aws");
    assert!(spec(&rt).get("seedSelector").is_none());
    rt.spec.shoot.enforce_seed_location = Some(false);
    assert!(spec(&rt).get("seedSelector").is_none());
    rt.spec.shoot.enforce_seed_location = Some(true);
    assert_eq!(
        spec(&rt)["seedSelector"],
        json!({"matchLabels": {"seed.gardener.cloud/region": "eu-central-1"}})
    );
}

#[test]
fn oidc_is_structured_authentication_with_the_operator_default() {
    let rt = runtime("aws");
    let converted = create(&rt, &config());
    let spec = &json(&converted.shoot)["spec"];
    assert_eq!(
        spec["kubernetes"]["kubeAPIServer"]["structuredAuthentication"],
        json!({"configMapName": "structured-auth-config-c-1234567"})
    );
    assert!(
        spec["kubernetes"]["kubeAPIServer"]
            .get("oidcConfig")
            .is_none(),
        "removed in Gardener 1.142"
    );
    let cm = converted.structured_auth.expect("ConfigMap");
    assert_eq!(
        cm.metadata.name.as_deref(),
        Some("structured-auth-config-c-1234567")
    );
    assert_eq!(cm.metadata.namespace.as_deref(), Some("garden-kyma-dev"));
    let config: Value = serde_yaml_ng::from_str(&cm.data.unwrap()["config.yaml"]).unwrap();
    assert_eq!(
        config,
        json!({
            "apiVersion": "apiserver.config.k8s.io/v1beta1",
            "kind": "AuthenticationConfiguration",
            "jwt": [{
                "issuer": {"url": "https://kymatest.accounts400.ondemand.com", "audiences": ["12b13a26-d993-4d0c-aa08-5f5852bbdff6"]},
                "claimMappings": {"username": {"claim": "sub", "prefix": "-"}, "groups": {"claim": "groups", "prefix": ""}},
            }],
        })
    );
}

#[test]
fn oidc_from_the_runtime_with_legacy_prefix_defaults() {
    let auth = |oidc: Value| {
        let mut rt = runtime("aws");
        rt.spec.shoot.kubernetes =
            serde_json::from_value(json!({"kubeAPIServer": {"oidcConfig": oidc}})).unwrap();
        let cm = create(&rt, &config()).structured_auth.unwrap();
        let config: Value = serde_yaml_ng::from_str(&cm.data.unwrap()["config.yaml"]).unwrap();
        config["jwt"][0].clone()
    };
    let jwt = auth(
        json!({"issuerURL": "https://issuer.example.com", "clientID": "c", "groupsClaim": "g", "groupsPrefix": "gp:"}),
    );
    assert_eq!(
        jwt["issuer"],
        json!({"url": "https://issuer.example.com", "audiences": ["c"]})
    );
    assert_eq!(
        jwt["claimMappings"]["username"],
        json!({"claim": "sub", "prefix": "https://issuer.example.com#"})
    );
    assert_eq!(
        jwt["claimMappings"]["groups"],
        json!({"claim": "g", "prefix": "gp:"})
    );

    let jwt = auth(json!({"issuerURL": "https://i", "clientID": "c", "usernameClaim": "email"}));
    assert_eq!(
        jwt["claimMappings"],
        json!({"username": {"claim": "email", "prefix": ""}})
    );

    // Without a client the operator default applies (upstream: both must be set).
    let jwt = auth(json!({"issuerURL": "https://i"}));
    assert_eq!(
        jwt["issuer"]["url"],
        "https://kymatest.accounts400.ondemand.com"
    );
}

#[test]
fn cloud_profile_per_provider() {
    for (provider, name) in [
        ("aws", "aws"),
        ("azure", "az"),
        ("gcp", "gcp"),
        ("openstack", "converged-cloud-kyma"),
        ("alicloud", "alicloud"),
    ] {
        let spec = spec(&runtime(provider));
        assert_eq!(
            spec["cloudProfile"],
            json!({"kind": "CloudProfile", "name": name}),
            "{provider}"
        );
        assert!(
            spec.get("cloudProfileName").is_none(),
            "forbidden from Kubernetes 1.34"
        );
    }
}

#[test]
fn exposure_class_only_for_openstack() {
    assert_eq!(
        spec(&runtime("openstack"))["exposureClassName"],
        "converged-cloud-internet"
    );
    for provider in ["aws", "azure", "gcp", "alicloud"] {
        assert!(
            spec(&runtime(provider)).get("exposureClassName").is_none(),
            "{provider}"
        );
    }
}

#[test]
fn eu_access_restriction_for_eu_platform_regions() {
    let mut rt = runtime("aws");
    assert!(spec(&rt).get("accessRestrictions").is_none());
    for region in ["cf-eu11", "cf-ch20"] {
        rt.spec.shoot.platform_region = region.into();
        assert_eq!(
            spec(&rt)["accessRestrictions"],
            json!([{
                "name": "eu-access-only",
                "options": {
                    "support.gardener.cloud/eu-access-for-cluster-addons": "true",
                    "support.gardener.cloud/eu-access-for-cluster-nodes": "true",
                },
            }])
        );
    }
}

#[test]
fn aws_provider_reproduces_the_reference_zone_example() {
    let mut rt = runtime("aws");
    set_zones(
        &mut rt,
        &[
            "eu-central-1a",
            "eu-central-1b",
            "eu-central-1c",
            "eu-central-1d",
        ],
    );
    let provider = &spec(&rt)["provider"];
    assert_eq!(provider["type"], "aws");
    assert_eq!(
        provider["infrastructureConfig"],
        json!({
            "apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1",
            "kind": "InfrastructureConfig",
            "networks": {
                "vpc": {"cidr": "10.250.0.0/16"},
                "zones": [
                    {"name": "eu-central-1a", "workers": "10.250.0.0/19", "public": "10.250.32.0/20", "internal": "10.250.48.0/20"},
                    {"name": "eu-central-1b", "workers": "10.250.64.0/19", "public": "10.250.96.0/20", "internal": "10.250.112.0/20"},
                    {"name": "eu-central-1c", "workers": "10.250.128.0/19", "public": "10.250.160.0/20", "internal": "10.250.176.0/20"},
                    {"name": "eu-central-1d", "workers": "10.250.192.0/22", "public": "10.250.196.0/22", "internal": "10.250.200.0/22"},
                ],
            },
        })
    );
    assert_eq!(
        provider["controlPlaneConfig"],
        json!({"apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1", "kind": "ControlPlaneConfig"})
    );
    assert_eq!(
        provider["workersSettings"],
        json!({"sshAccess": {"enabled": false}})
    );
}

#[test]
fn azure_provider_reproduces_the_reference_zone_example() {
    let mut rt = runtime("azure");
    set_zones(&mut rt, &["1", "2", "3"]);
    let provider = &spec(&rt)["provider"];
    let nat = json!({"enabled": true, "idleConnectionTimeoutMinutes": 4});
    assert_eq!(
        provider["infrastructureConfig"],
        json!({
            "apiVersion": "azure.provider.extensions.gardener.cloud/v1alpha1",
            "kind": "InfrastructureConfig",
            "networks": {
                "vnet": {"cidr": "10.250.0.0/16"},
                "zones": [
                    {"name": 1, "cidr": "10.250.0.0/19", "natGateway": nat},
                    {"name": 2, "cidr": "10.250.32.0/19", "natGateway": nat},
                    {"name": 3, "cidr": "10.250.64.0/19", "natGateway": nat},
                ],
            },
            "zoned": true,
        })
    );
}

#[test]
fn gcp_openstack_and_alicloud_provider_configs() {
    let mut gcp = runtime("gcp");
    set_zones(&mut gcp, &["europe-west3-b", "europe-west3-a"]);
    let p = &spec(&gcp)["provider"];
    assert_eq!(
        p["infrastructureConfig"]["networks"],
        json!({"worker": "10.250.0.0/16", "workers": "10.250.0.0/16"})
    );
    assert_eq!(
        p["controlPlaneConfig"]["zone"], "europe-west3-b",
        "the first zone of the pools"
    );

    let p = &spec(&runtime("openstack"))["provider"];
    assert_eq!(
        p["infrastructureConfig"]["floatingPoolName"],
        "FloatingIP-external-kyma-01"
    );
    assert_eq!(
        p["infrastructureConfig"]["networks"],
        json!({"workers": "10.250.0.0/16"})
    );
    assert_eq!(p["controlPlaneConfig"]["loadBalancerProvider"], "f5");

    let mut ali = runtime("alicloud");
    set_zones(&mut ali, &["ap-southeast-1a", "ap-southeast-1b"]);
    let p = &spec(&ali)["provider"];
    assert_eq!(
        p["infrastructureConfig"]["networks"],
        json!({
            "vpc": {"cidr": "10.250.0.0/16"},
            "zones": [{"name": "ap-southeast-1a", "workers": "10.250.0.0/19"}, {"name": "ap-southeast-1b", "workers": "10.250.32.0/19"}],
        })
    );
    assert_eq!(
        p["controlPlaneConfig"]["apiVersion"],
        "alicloud.provider.extensions.gardener.cloud/v1alpha1"
    );
}

#[test]
fn zones_are_the_ordered_union_of_all_pools() {
    let mut rt = runtime("azure");
    set_zones(&mut rt, &["2"]);
    let mut extra = rt.spec.shoot.provider.workers[0].clone();
    extra.name = "extra".into();
    extra.zones = Some(vec!["3".into(), "2".into(), "1".into()]);
    rt.spec.shoot.provider.additional_workers = Some(vec![extra]);
    let p = &spec(&rt)["provider"];
    let names: Vec<&Value> = p["infrastructureConfig"]["networks"]["zones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|z| &z["name"])
        .collect();
    assert_eq!(names, [&json!(2), &json!(3), &json!(1)]);
    let workers: Vec<&Value> = p["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| &w["name"])
        .collect();
    assert_eq!(workers, [&json!("cpu-worker-0"), &json!("extra")]);
}

#[test]
fn machine_image_defaults_fill_what_is_missing() {
    let mut rt = runtime("gcp");
    rt.spec.shoot.provider.workers[0].machine.image = None;
    let mut extra = rt.spec.shoot.provider.workers[0].clone();
    extra.name = "extra".into();
    extra.machine.image = serde_json::from_value(json!({"name": "gardenlinux"})).unwrap();
    let mut named = extra.clone();
    named.name = "named".into();
    named.machine.image = serde_json::from_value(json!({"name": "", "version": "1.2.3"})).unwrap();
    let mut other = extra.clone();
    other.name = "other".into();
    other.machine.image =
        serde_json::from_value(json!({"name": "suse-chost", "version": ""})).unwrap();
    rt.spec.shoot.provider.additional_workers = Some(vec![extra, named, other]);
    let workers = spec(&rt)["provider"]["workers"].clone();
    assert_eq!(
        workers[0]["machine"]["image"],
        json!({"name": "gardenlinux", "version": "1877.8.0"})
    );
    assert_eq!(
        workers[1]["machine"]["image"],
        json!({"name": "gardenlinux", "version": "1877.8.0"})
    );
    assert_eq!(
        workers[2]["machine"]["image"],
        json!({"name": "gardenlinux", "version": "1.2.3"})
    );
    // The default version is the default image's: another image gets its newest from Gardener.
    assert_eq!(
        workers[3]["machine"]["image"],
        json!({"name": "suse-chost"})
    );
}

#[test]
fn aws_imds_v2_worker_config_keeps_other_worker_settings() {
    let mut rt = runtime("aws");
    rt.spec.shoot.provider.workers[0].provider_config = Some(
        json!({"apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1", "kind": "WorkerConfig", "cpuOptions": {"coreCount": 2}}).into(),
    );
    let mut cfg = config();
    assert!(
        cfg.converter.provider.aws.enable_imds_v2,
        "the example config enables IMDSv2"
    );
    let imds = json!({"httpPutResponseHopLimit": 2, "httpTokens": "required"});
    let worker = json(&create(&rt, &cfg).shoot)["spec"]["provider"]["workers"][0].clone();
    assert_eq!(worker["providerConfig"]["instanceMetadataOptions"], imds);
    assert_eq!(
        worker["providerConfig"]["cpuOptions"],
        json!({"coreCount": 2})
    );

    rt.spec.shoot.provider.workers[0].provider_config = None;
    let worker = json(&create(&rt, &cfg).shoot)["spec"]["provider"]["workers"][0].clone();
    assert_eq!(
        worker["providerConfig"],
        json!({"apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1", "kind": "WorkerConfig", "instanceMetadataOptions": imds})
    );

    // A configuration that is not an AWS WorkerConfig (another kind or API version) is
    // replaced by one, as upstream does, not extended.
    for foreign in [
        json!({"apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1", "kind": "ControlPlaneConfig", "cpuOptions": {"coreCount": 2}}),
        json!({"apiVersion": "azure.provider.extensions.gardener.cloud/v1alpha1", "kind": "WorkerConfig", "cpuOptions": {"coreCount": 2}}),
    ] {
        rt.spec.shoot.provider.workers[0].provider_config = Some(foreign.clone().into());
        let worker = json(&create(&rt, &cfg).shoot)["spec"]["provider"]["workers"][0].clone();
        assert_eq!(
            worker["providerConfig"],
            json!({"apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1", "kind": "WorkerConfig", "instanceMetadataOptions": imds}),
            "{foreign}"
        );
    }
    rt.spec.shoot.provider.workers[0].provider_config = None;

    cfg.converter.provider.aws.enable_imds_v2 = false;
    let worker = json(&create(&rt, &cfg).shoot)["spec"]["provider"]["workers"][0].clone();
    assert!(worker.get("providerConfig").is_none());
    // Other providers never get it.
    let gcp = spec(&runtime("gcp"));
    assert!(
        gcp["provider"]["workers"][0]
            .get("providerConfig")
            .is_none()
    );
}

#[test]
fn tolerations_of_the_region_from_the_configuration() {
    assert!(spec(&runtime("gcp")).get("tolerations").is_none());
    let mut rt = runtime("gcp");
    rt.spec.shoot.region = "me-central2".into();
    set_zones(&mut rt, &["me-central2-a"]);
    assert_eq!(
        spec(&rt)["tolerations"],
        json!([{"key": "ksa-assured-workload"}])
    );

    // Any region, with values; a region without an entry or with an empty list gets none.
    let mut cfg = config();
    cfg.converter.tolerations = serde_json::from_value(json!({
        "europe-west3": [{"key": "a"}, {"key": "b", "value": "v"}],
        "me-central2": [],
    }))
    .unwrap();
    let tolerations = |rt: &Runtime| {
        json(&create(rt, &cfg).shoot)["spec"]
            .get("tolerations")
            .cloned()
    };
    assert_eq!(
        tolerations(&runtime("gcp")),
        Some(json!([{"key": "a"}, {"key": "b", "value": "v"}]))
    );
    assert_eq!(tolerations(&rt), None);
}

#[test]
fn feature_gates_and_runtime_config_from_the_configuration() {
    // The example configuration sets none: only the empty Shoot-wide kubelet, as upstream.
    let k = &spec(&runtime("aws"))["kubernetes"];
    assert!(k["kubeAPIServer"].get("featureGates").is_none());
    assert!(k["kubeAPIServer"].get("runtimeConfig").is_none());
    assert_eq!(k["kubelet"], json!({}));

    let mut cfg = config();
    let api = cfg
        .converter
        .kubernetes
        .kube_api_server
        .get_or_insert_with(Default::default);
    api.feature_gates = [("AnonymousAuthConfigurableEndpoints".to_owned(), true)].into();
    api.runtime_config = [("resource.k8s.io/v1beta1".to_owned(), true)].into();
    cfg.converter.kubernetes.kubelet =
        Some(serde_json::from_value(json!({"featureGates": {"KubeletTracing": false}})).unwrap());
    let k = &json(&create(&runtime("aws"), &cfg).shoot)["spec"]["kubernetes"];
    assert_eq!(
        k["kubeAPIServer"]["featureGates"],
        json!({"AnonymousAuthConfigurableEndpoints": true})
    );
    assert_eq!(
        k["kubeAPIServer"]["runtimeConfig"],
        json!({"resource.k8s.io/v1beta1": true})
    );
    assert_eq!(
        k["kubelet"],
        json!({"featureGates": {"KubeletTracing": false}})
    );
    // The structured authentication set before them stays.
    assert!(k["kubeAPIServer"]["structuredAuthentication"].is_object());
}

#[test]
fn service_account_tokens_expire_within_30_to_90_days() {
    let sa = |max: &str| {
        let mut cfg = config();
        cfg.converter
            .kubernetes
            .kube_api_server
            .get_or_insert_with(Default::default)
            .max_token_expiration = max.to_owned();
        json(&create(&runtime("aws"), &cfg).shoot)["spec"]["kubernetes"]["kubeAPIServer"]
            ["serviceAccountConfig"]
            .clone()
    };
    // Upstream's cases: unset and too short -> 30 days, too long -> 90 days, else as given.
    assert_eq!(
        sa(""),
        json!({"extendTokenExpiration": false, "maxTokenExpiration": "720h0m0s"})
    );
    assert_eq!(sa("24h")["maxTokenExpiration"], "720h0m0s");
    assert_eq!(sa("2400h")["maxTokenExpiration"], "2160h0m0s");
    assert_eq!(sa("1200h")["maxTokenExpiration"], "1200h0m0s");
    assert_eq!(sa("1000h30m")["maxTokenExpiration"], "1000h30m0s");
    assert_eq!(
        spec(&runtime("aws"))["kubernetes"]["kubeAPIServer"]["serviceAccountConfig"],
        json!({"extendTokenExpiration": false, "maxTokenExpiration": "720h0m0s"})
    );
}

#[test]
fn every_pool_gets_machine_controller_manager_defaults() {
    let mut rt = runtime("aws");
    let mut second = rt.spec.shoot.provider.workers[0].clone();
    second.name = "pool-2".into();
    second.machine_controller_manager = Some(
        serde_json::from_value(
            json!({"machineDrainTimeout": "30m", "machineHealthTimeout": "10m"}),
        )
        .unwrap(),
    );
    rt.spec.shoot.provider.additional_workers = Some(vec![second]);
    let workers = spec(&rt)["provider"]["workers"].clone();
    assert_eq!(
        workers[0]["machineControllerManager"],
        json!({"machineDrainTimeout": "15m0s", "maxEvictRetries": 2})
    );
    // What the pool sets is kept; only the missing value is filled in.
    assert_eq!(
        workers[1]["machineControllerManager"],
        json!({"machineDrainTimeout": "30m", "machineHealthTimeout": "10m", "maxEvictRetries": 2})
    );

    // Upstream's defaults (15m, 2) when the configuration has no `provider.worker`.
    let mut cfg = config();
    cfg.converter.provider.worker = Default::default();
    assert_eq!(
        json(&create(&runtime("aws"), &cfg).shoot)["spec"]["provider"]["workers"][0]["machineControllerManager"],
        json!({"machineDrainTimeout": "15m0s", "maxEvictRetries": 2})
    );
    cfg.converter.provider.worker.default_machine_drain_timeout = "1h".into();
    cfg.converter.provider.worker.default_max_evict_retries = "5".into();
    assert_eq!(
        json(&create(&runtime("aws"), &cfg).shoot)["spec"]["provider"]["workers"][0]["machineControllerManager"],
        json!({"machineDrainTimeout": "1h0m0s", "maxEvictRetries": 5})
    );
}

fn with_max_pods(rt: &mut Runtime, max_pods: &[Option<i32>]) {
    let main = rt.spec.shoot.provider.workers[0].clone();
    let pools: Vec<_> = max_pods
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut w = main.clone();
            w.name = format!("pool-{i}");
            w.kubernetes =
                m.map(|m| serde_json::from_value(json!({"kubelet": {"maxPods": m}})).unwrap());
            w
        })
        .collect();
    rt.spec.shoot.provider.workers = vec![pools[0].clone()];
    rt.spec.shoot.provider.additional_workers = Some(pools[1..].to_vec());
}

fn max_pods(rt: &Runtime) -> Vec<Value> {
    spec(rt)["provider"]["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["kubernetes"]["kubelet"]["maxPods"].clone())
        .collect()
}

#[test]
fn max_pods_is_clamped_per_node_and_to_the_pods_network() {
    // Per node at most the usable addresses of a /24; pools without maxPods stay without.
    let mut rt = runtime("aws");
    with_max_pods(&mut rt, &[Some(300), None, Some(110)]);
    assert_eq!(max_pods(&rt), vec![json!(254), Value::Null, json!(110)]);

    // A /24 pods network (254 addresses): lowered from the last pool backwards, none below 1
    // (254 + 110 = 364: the last pool to 1, then the first by the remaining 1).
    rt.spec.shoot.networking.pods = "10.96.0.0/24".into();
    assert_eq!(max_pods(&rt), vec![json!(253), Value::Null, json!(1)]);
    with_max_pods(&mut rt, &[Some(110), Some(110), Some(110)]);
    assert_eq!(max_pods(&rt), vec![json!(110), json!(110), json!(34)]);
    // /30: 2 usable addresses; /31: 2; /32: 1.
    rt.spec.shoot.networking.pods = "10.96.0.0/30".into();
    with_max_pods(&mut rt, &[Some(5), Some(5)]);
    assert_eq!(max_pods(&rt), vec![json!(1), json!(1)]);
    rt.spec.shoot.networking.pods = "10.96.0.0/32".into();
    with_max_pods(&mut rt, &[Some(5), None]);
    assert_eq!(max_pods(&rt), vec![json!(1), Value::Null]);
}

#[test]
fn max_pods_beyond_the_pods_network_is_an_error_and_refused_at_admission() {
    let mut rt = runtime("aws");
    rt.spec.shoot.networking.pods = "10.96.0.0/32".into();
    with_max_pods(&mut rt, &[Some(5), Some(5)]);
    let err = fails(&rt, &config());
    assert_eq!(
        err.runtime_field().as_deref(),
        Some("spec.shoot.networking.pods")
    );
    assert!(err.to_string().contains("1 usable pod addresses"), "{err}");
    let refused = kim_shared::validation::validate_create(&rt, &config());
    assert!(
        refused
            .violations
            .iter()
            .any(|v| v.field == "spec.shoot.networking.pods" && v.message.contains("maxPods")),
        "{refused:?}"
    );
}

#[test]
fn gvisor_runtimes_get_net_raw_unless_set() {
    let mut rt = runtime("aws");
    let cri = |runtimes: Value| {
        serde_json::from_value(json!({"name": "containerd", "containerRuntimes": runtimes}))
            .unwrap()
    };
    let main = rt.spec.shoot.provider.workers[0].clone();
    let pool = |name: &str, runtimes: Value| {
        let mut w = main.clone();
        w.name = name.into();
        w.cri = Some(cri(runtimes));
        w
    };
    let gvisor = |config: Value| json!({"type": "gvisor", "providerConfig": config});
    rt.spec.shoot.provider.workers = vec![pool("plain", json!([{"type": "gvisor"}]))];
    rt.spec.shoot.provider.additional_workers = Some(vec![
        pool(
            "flags",
            json!([gvisor(json!({
                "apiVersion": "gvisor.runtime.extensions.config.gardener.cloud/v1alpha1",
                "kind": "GVisorConfiguration",
                "configFlags": {"debug": "false", "nvproxy": "false"}
            }))]),
        ),
        pool(
            "off",
            json!([gvisor(json!({
                "apiVersion": "gvisor.runtime.extensions.config.gardener.cloud/v1alpha1",
                "kind": "GVisorConfiguration",
                "configFlags": {"net-raw": "false"}
            }))]),
        ),
        pool("mixed", json!([{"type": "other"}, {"type": "gvisor"}])),
    ]);
    let default = json!({
        "apiVersion": "gvisor.runtime.extensions.config.gardener.cloud/v1alpha1",
        "kind": "GVisorConfiguration",
        "configFlags": {"net-raw": "true"}
    });
    let check = |spec: &Value| {
        let runtimes =
            |i: usize| spec["provider"]["workers"][i]["cri"]["containerRuntimes"].clone();
        assert_eq!(runtimes(0), json!([gvisor(default.clone())]));
        assert_eq!(
            runtimes(1)[0]["providerConfig"]["configFlags"],
            json!({"debug": "false", "nvproxy": "false", "net-raw": "true"})
        );
        assert_eq!(
            runtimes(2)[0]["providerConfig"]["configFlags"],
            json!({"net-raw": "false"})
        );
        assert_eq!(
            runtimes(3),
            json!([{"type": "other"}, gvisor(default.clone())])
        );
    };
    let created = create(&rt, &config());
    check(&json(&created.shoot)["spec"]);
    // The patch form writes the same (no flip-flop against the Shoot just created).
    let patched = to_shoot(&rt, &config(), Some(&created.shoot)).unwrap();
    check(&json(&patched.shoot)["spec"]);
}

fn external_dns() -> KimConfig {
    let mut cfg = config();
    cfg.converter.dns = DnsConfig {
        secret_name: "dns-secret".into(),
        domain_prefix: "dev.kyma.example.com".into(),
        provider_type: "aws-route53".into(),
    };
    cfg
}

#[test]
fn dns_external_uses_credentials_ref_and_internal_sets_nothing() {
    let rt = runtime("aws");
    assert!(
        spec(&rt).get("dns").is_none(),
        "Gardener-internal DNS in the example config"
    );
    let spec = json(&create(&rt, &external_dns()).shoot)["spec"].clone();
    assert_eq!(
        spec["dns"],
        json!({
            "domain": "c-1234567.dev.kyma.example.com",
            "providers": [{
                "credentialsRef": {"apiVersion": "v1", "kind": "Secret", "name": "dns-secret"},
                "domains": {"include": ["c-1234567.dev.kyma.example.com"]},
                "primary": true,
                "type": "aws-route53",
            }],
        })
    );
    assert!(
        spec["dns"]["providers"][0].get("secretName").is_none(),
        "forbidden from Kubernetes 1.35"
    );
}

#[test]
fn extensions_in_upstream_order_with_their_configs() {
    let spec = json(&create(&runtime("aws"), &external_dns()).shoot)["spec"].clone();
    let types: Vec<&str> = spec["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "shoot-networking-filter",
            "shoot-cert-service",
            "shoot-dns-service",
            "shoot-oidc-service",
            "shoot-auditlog-service"
        ]
    );
    assert_eq!(
        extension(&spec, "shoot-networking-filter").unwrap(),
        json!({"type": "shoot-networking-filter", "disabled": false})
    );
    assert_eq!(
        extension(&spec, "shoot-cert-service").unwrap()["providerConfig"],
        json!({"apiVersion": "service.cert.extensions.gardener.cloud/v1alpha1", "kind": "CertConfig", "shootIssuers": {"enabled": true}})
    );
    assert_eq!(
        extension(&spec, "shoot-dns-service").unwrap()["providerConfig"],
        json!({
            "apiVersion": "service.dns.extensions.gardener.cloud/v1alpha1",
            "kind": "DNSConfig",
            "dnsProviderReplication": {"enabled": true},
            "syncProvidersFromShootSpecDNS": true,
            "providers": [{
                "credentials": "shoot-dns-service-dns-secret",
                "domains": {"include": ["c-1234567.dev.kyma.example.com"]},
                "type": "aws-route53",
            }],
        })
    );
    assert_eq!(
        extension(&spec, "shoot-oidc-service").unwrap(),
        json!({"type": "shoot-oidc-service", "disabled": false})
    );
    assert_eq!(
        extension(&spec, "shoot-auditlog-service").unwrap()["providerConfig"],
        json!({
            "apiVersion": "service.auditlog.extensions.gardener.cloud/v1alpha1",
            "kind": "AuditlogConfig",
            "type": "standard",
            "tenantID": "068ab4af-5f68-5072-8962-1ced6f2de4b6",
            "serviceURL": "https://auditlog.eu-central-1.example.com:3001",
            "secretReferenceName": "auditlog-credentials",
        })
    );
    assert!(
        extension(&spec, "registry-cache").is_none(),
        "never on create"
    );
}

#[test]
fn networking_filter_follows_egress_and_ingress() {
    let mut rt = runtime("aws");
    rt.spec.security.networking.filter =
        serde_json::from_value(json!({"egress": {"enabled": false}, "ingress": {"enabled": true}}))
            .unwrap();
    assert_eq!(
        extension(&spec(&rt), "shoot-networking-filter").unwrap(),
        json!({"type": "shoot-networking-filter", "disabled": true})
    );
    rt.spec.security.networking.filter =
        serde_json::from_value(json!({"egress": {"enabled": true}, "ingress": {"enabled": true}}))
            .unwrap();
    assert_eq!(
        extension(&spec(&rt), "shoot-networking-filter").unwrap(),
        json!({"type": "shoot-networking-filter", "disabled": false, "providerConfig": {"egressFilter": {"blackholingEnabled": true}}})
    );
}

#[test]
fn acl_and_nvidia_extensions() {
    let mut rt = runtime("aws");
    rt.spec.shoot.kubernetes =
        serde_json::from_value(json!({"kubeAPIServer": {"acl": {"allowedCIDRs": ["1.2.3.0/24"]}}}))
            .unwrap();
    rt.spec.shoot.enable_nvidia_openshell = Some(true);
    // Not managed: no ACL even though the Runtime asks for one.
    assert!(extension(&spec(&rt), "acl").is_none());
    let opts = ConvertOptions {
        acl: Some(AclAddresses {
            operator_cidrs: vec!["10.0.0.0/8".into()],
            kcp_nat_ip: "5.6.7.8".into(),
        }),
        ..Default::default()
    };
    let spec = json(&to_shoot_with(&rt, &config(), None, &opts).unwrap().shoot)["spec"].clone();
    assert_eq!(
        extension(&spec, "acl").unwrap(),
        json!({
            "type": "acl",
            "disabled": false,
            "providerConfig": {"rule": {"action": "ALLOW", "cidrs": ["1.2.3.0/24", "10.0.0.0/8", "5.6.7.8"], "type": "remote_ip"}},
        })
    );
    assert_eq!(
        extension(&spec, "shoot-nvidia-openshell").unwrap(),
        json!({"type": "shoot-nvidia-openshell", "disabled": false})
    );
    // Only AWS and Azure support the ACL extension.
    let mut gcp = runtime("gcp");
    gcp.spec.shoot.kubernetes = rt.spec.shoot.kubernetes.clone();
    let spec = json(&to_shoot_with(&gcp, &config(), None, &opts).unwrap().shoot)["spec"].clone();
    assert!(extension(&spec, "acl").is_none());
}

/// A Shoot written with one set of ACL addresses is outdated for any other set, and when its
/// `acl` extension is gone or off; never for a Runtime that asks for no ACL.
#[test]
fn acl_outdated_compares_the_live_cidrs_with_the_config_map() {
    let mut rt = runtime("aws");
    rt.spec.shoot.kubernetes =
        serde_json::from_value(json!({"kubeAPIServer": {"acl": {"allowedCIDRs": ["1.2.3.0/24"]}}}))
            .unwrap();
    let addresses = AclAddresses {
        operator_cidrs: vec!["10.0.0.0/8".into()],
        kcp_nat_ip: "5.6.7.8/32".into(),
    };
    let opts = ConvertOptions {
        acl: Some(addresses.clone()),
        ..Default::default()
    };
    let shoot = to_shoot_with(&rt, &config(), None, &opts).unwrap().shoot;
    assert!(!kim_shared::convert::acl_outdated(&rt, &addresses, &shoot));

    let moved = AclAddresses {
        kcp_nat_ip: "5.6.7.9/32".into(),
        ..addresses.clone()
    };
    assert!(kim_shared::convert::acl_outdated(&rt, &moved, &shoot));
    let more = AclAddresses {
        operator_cidrs: vec!["10.0.0.0/8".into(), "192.0.2.0/24".into()],
        ..addresses.clone()
    };
    assert!(kim_shared::convert::acl_outdated(&rt, &more, &shoot));

    let mut off = shoot.clone();
    for ext in off.spec.extensions.iter_mut().flatten() {
        if ext.type_ == "acl" {
            ext.disabled = Some(true);
        }
    }
    assert!(kim_shared::convert::acl_outdated(&rt, &addresses, &off));
    let mut gone = shoot.clone();
    if let Some(list) = gone.spec.extensions.as_mut() {
        list.retain(|e| e.type_ != "acl");
    }
    assert!(kim_shared::convert::acl_outdated(&rt, &addresses, &gone));

    let mut no_acl = rt.clone();
    no_acl.spec.shoot.kubernetes = None;
    assert!(!kim_shared::convert::acl_outdated(&no_acl, &moved, &gone));
}

#[test]
fn kubernetes_version_from_the_runtime_or_the_default() {
    let mut rt = runtime("aws");
    assert_eq!(spec(&rt)["kubernetes"]["version"], "1.35.4");
    rt.spec.shoot.kubernetes = None;
    assert_eq!(spec(&rt)["kubernetes"]["version"], "1.35");
    rt.spec.shoot.kubernetes = serde_json::from_value(json!({"version": ""})).unwrap();
    assert_eq!(spec(&rt)["kubernetes"]["version"], "1.35");
}

#[test]
fn maintenance_window_only_for_production() {
    let mut rt = runtime("aws");
    assert_eq!(
        spec(&rt)["maintenance"],
        json!({"autoUpdate": {"kubernetesVersion": true, "machineImageVersion": false}})
    );
    rt.spec.shoot.purpose = "production".into();
    assert_eq!(
        spec(&rt)["maintenance"]["timeWindow"],
        json!({"begin": "200000+0000", "end": "000000+0000"})
    );
}

#[test]
fn audit_log_sets_policy_and_credentials_resource() {
    let spec = spec(&runtime("aws"));
    assert_eq!(
        spec["kubernetes"]["kubeAPIServer"]["auditConfig"],
        json!({"auditPolicy": {"configMapRef": {"name": "audit-policy"}}})
    );
    assert_eq!(
        spec["resources"],
        json!([{"name": "auditlog-credentials", "resourceRef": {"apiVersion": "v1", "kind": "Secret", "name": "auditlog-credentials-aws"}}])
    );
}

/// Upstream's `fixPolicyConfigMapName`: the annotation `"true"` in any case selects the
/// `experimental-audit-policy` ConfigMap; any other value, the configured one.
#[test]
fn experimental_audit_policy_annotation_selects_its_config_map() {
    let policy = |value: Option<&str>| {
        let mut rt = runtime("aws");
        if let Some(v) = value {
            rt.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(
                    "operator.kyma-project.io/experimental-audit-policy".into(),
                    v.into(),
                );
        }
        spec(&rt)["kubernetes"]["kubeAPIServer"]["auditConfig"]["auditPolicy"]["configMapRef"]
            ["name"]
            .clone()
    };
    assert_eq!(policy(Some("true")), "experimental-audit-policy");
    assert_eq!(policy(Some("TRUE")), "experimental-audit-policy");
    assert_eq!(policy(Some("yes")), "audit-policy");
    assert_eq!(policy(None), "audit-policy");
}

#[test]
fn audit_log_tenant_missing() {
    let mut rt = runtime("aws");
    rt.spec.shoot.region = "us-gov-1".into();
    let err = fails(&rt, &config());
    assert_eq!(err.runtime_field().as_deref(), Some("spec.shoot.region"));
    assert!(err.to_string().contains("us-gov-1"), "{err}");
    // Not mandatory: converted without audit logging.
    let opts = ConvertOptions {
        audit_log_mandatory: false,
        ..Default::default()
    };
    let spec = json(&to_shoot_with(&rt, &config(), None, &opts).unwrap().shoot)["spec"].clone();
    assert!(spec.get("resources").is_none());
    assert!(
        spec["kubernetes"]["kubeAPIServer"]
            .get("auditConfig")
            .is_none()
    );
    assert!(extension(&spec, "shoot-auditlog-service").is_none());
}

#[test]
fn errors_name_the_runtime_field() {
    let cfg = config();
    let field = |rt: &Runtime| fails(rt, &cfg).runtime_field().unwrap();

    let mut rt = runtime("aws");
    let extra = rt.spec.shoot.provider.workers[0].clone();
    rt.spec.shoot.provider.workers.push(extra);
    assert_eq!(field(&rt), "spec.shoot.provider.workers");
    rt.spec.shoot.provider.workers.clear();
    assert_eq!(fails(&rt, &cfg), ConvertError::MainWorkerCount { found: 0 });

    let mut rt = runtime("gcp");
    rt.spec.shoot.networking.nodes = "10.250.0.0".into();
    assert_eq!(
        fails(&rt, &cfg),
        ConvertError::NodesCidr {
            value: "10.250.0.0".into()
        }
    );

    let mut rt = runtime("aws");
    rt.spec.shoot.networking.nodes = "10.250.0.0/25".into();
    assert_eq!(
        fails(&rt, &cfg),
        ConvertError::NodesPrefix {
            provider: "aws",
            prefix: 25,
            min: 16,
            max: 24
        }
    );
    assert_eq!(field(&rt), "spec.shoot.networking.nodes");

    let mut rt = runtime("aws");
    set_zones(&mut rt, &[]);
    assert_eq!(
        fails(&rt, &cfg),
        ConvertError::ZoneCount {
            provider: "aws",
            count: 0,
            min: 1,
            max: 8
        }
    );
    // Every provider but SAP Converged Cloud needs a zone, not only those whose zone split
    // counts them (AWS).
    for provider in ["azure", "gcp", "alicloud"] {
        let mut rt = runtime(provider);
        set_zones(&mut rt, &[]);
        assert!(
            matches!(
                fails(&rt, &cfg),
                ConvertError::ZoneCount {
                    count: 0,
                    min: 1,
                    ..
                }
            ),
            "{provider}"
        );
    }
    let nine: Vec<String> = (0..9).map(|i| format!("z{i}")).collect();
    set_zones(
        &mut rt,
        &nine.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert_eq!(
        fails(&rt, &cfg),
        ConvertError::ZoneCount {
            provider: "aws",
            count: 9,
            min: 1,
            max: 8
        }
    );
    assert_eq!(field(&rt), "spec.shoot.provider.workers[0].zones");

    let mut rt = runtime("azure");
    let mut extra = rt.spec.shoot.provider.workers[0].clone();
    extra.name = "extra".into();
    extra.zones = Some(vec!["1".into(), "westeurope-1".into()]);
    rt.spec.shoot.provider.additional_workers = Some(vec![extra]);
    assert_eq!(
        field(&rt),
        "spec.shoot.provider.additionalWorkers[0].zones[1]"
    );
    set_zones(&mut rt, &["01"]);
    assert_eq!(field(&rt), "spec.shoot.provider.workers[0].zones[0]");

    // Openstack configures no zones: none is fine.
    let mut rt = runtime("openstack");
    set_zones(&mut rt, &[]);
    assert!(to_shoot(&rt, &cfg, None).is_ok());
}

fn dual_stack_config(enabled: bool) -> KimConfig {
    let mut cfg = config();
    cfg.converter.networking.enable_dual_stack_ip = enabled;
    cfg
}

fn dual_stack_runtime(provider: &str, dual_stack: Option<bool>) -> Runtime {
    let mut rt = runtime(provider);
    rt.spec.shoot.networking.dual_stack = dual_stack;
    rt
}

/// Upstream's `TestExtendWithNetworking` "Should configure an DualStackIP shoot if the provider
/// is AWS, landscape supports DualStack and DualStack is enabled on RuntimeCR" and
/// `TestProviderExtenderForCreateAWS` "Create dual stack IP provider config for AWS with worker
/// config and three zones".
#[test]
fn dual_stack_aws_sets_ip_families_infrastructure_and_load_balancer_controller() {
    let mut rt = dual_stack_runtime("aws", Some(true));
    set_zones(
        &mut rt,
        &["eu-central-1a", "eu-central-1b", "eu-central-1c"],
    );
    let spec = json(&create(&rt, &dual_stack_config(true)).shoot)["spec"].clone();
    assert_eq!(spec["networking"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    let infra = &spec["provider"]["infrastructureConfig"];
    assert_eq!(infra["dualStack"], json!({"enabled": true}));
    assert_eq!(infra["networks"]["zones"].as_array().unwrap().len(), 3);
    assert_eq!(
        spec["provider"]["controlPlaneConfig"],
        json!({
            "apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1",
            "kind": "ControlPlaneConfig",
            "loadBalancerController": {"enabled": true},
        })
    );
    // The other networking fields stay (upstream's "Should append DualStackIP configuration
    // to existing networking config").
    assert_eq!(spec["networking"]["type"], "calico");
    assert_eq!(spec["networking"]["nodes"], "10.250.0.0/16");
}

/// Upstream's "Should configure an DualStackIP shoot if the provider is GCP, landscape
/// supports DualStack and DualStack is enabled on RuntimeCR": only the IP families, GCP's
/// provider configs have no dual-stack settings.
#[test]
fn dual_stack_gcp_sets_only_the_ip_families() {
    let rt = dual_stack_runtime("gcp", Some(true));
    let dual = json(&create(&rt, &dual_stack_config(true)).shoot)["spec"].clone();
    let single = json(&create(&rt, &dual_stack_config(false)).shoot)["spec"].clone();
    assert_eq!(dual["networking"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    assert_eq!(dual["provider"], single["provider"]);
}

/// Upstream's "Should do not configure an DualStackIP shoot if the provider is other than AWS
/// or GCP", "... if the landscape do not supports DualStack" and "... if the DualStack was
/// disabled for RuntimeCR": the Shoot is exactly the single-stack one.
#[test]
fn dual_stack_not_honoured_gives_the_single_stack_shoot() {
    for (provider, dual_stack, enabled) in [
        ("azure", Some(true), true),
        ("openstack", Some(true), true),
        ("alicloud", Some(true), true),
        ("aws", Some(true), false),
        ("gcp", Some(true), false),
        ("aws", Some(false), true),
        ("aws", None, true),
    ] {
        let rt = dual_stack_runtime(provider, dual_stack);
        let got = create(&rt, &dual_stack_config(enabled)).shoot;
        let single = create(&runtime(provider), &config()).shoot;
        assert_eq!(
            got, single,
            "{provider} dualStack={dual_stack:?} enabled={enabled}"
        );
        assert!(json(&got)["spec"]["networking"].get("ipFamilies").is_none());
    }
}

/// Upstream's `TestNewApiServerACLExtension` "Should create enabled ACL extension with user,
/// operator and KCP IPs", with the addresses of upstream's test ConfigMap.
#[test]
fn acl_from_upstreams_config_map() {
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_yaml_ng::from_str(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: acl-ip-list\n  namespace: kcp-system\n\
         data:\n  acl-list.json: >-\n    [\"2.2.2.2/29\",\"3.3.3.3/29\",\"4.4.4.4/29\"]\n  \
         kcp-external-nat-ip.json: '\"1.1.1.1/32\"'\n",
    )
    .unwrap();
    let addresses = AclAddresses::from_config_map_data(&cm.data.unwrap()).unwrap();
    assert_eq!(
        addresses,
        AclAddresses {
            operator_cidrs: vec![
                "2.2.2.2/29".into(),
                "3.3.3.3/29".into(),
                "4.4.4.4/29".into()
            ],
            kcp_nat_ip: "1.1.1.1/32".into(),
        }
    );
    let mut rt = runtime("azure");
    rt.spec.shoot.kubernetes = serde_json::from_value(
        json!({"kubeAPIServer": {"acl": {"allowedCIDRs": ["10.0.0.1/32", "10.0.0.2/32"]}}}),
    )
    .unwrap();
    assert!(kim_shared::convert::acl_requested(&rt));
    let opts = ConvertOptions {
        acl: Some(addresses),
        ..Default::default()
    };
    let spec = json(&to_shoot_with(&rt, &config(), None, &opts).unwrap().shoot)["spec"].clone();
    assert_eq!(
        extension(&spec, "acl").unwrap(),
        json!({
            "type": "acl",
            "disabled": false,
            "providerConfig": {"rule": {
                "action": "ALLOW",
                "cidrs": ["10.0.0.1/32", "10.0.0.2/32", "2.2.2.2/29", "3.3.3.3/29", "4.4.4.4/29", "1.1.1.1/32"],
                "type": "remote_ip",
            }},
        })
    );
    // Upstream's "Should not include ACL extension for new Shoot when ACL is empty on Runtime
    // CR".
    rt.spec.shoot.kubernetes =
        serde_json::from_value(json!({"kubeAPIServer": {"acl": {"allowedCIDRs": []}}})).unwrap();
    assert!(!kim_shared::convert::acl_requested(&rt));
    let spec = json(&to_shoot_with(&rt, &config(), None, &opts).unwrap().shoot)["spec"].clone();
    assert!(extension(&spec, "acl").is_none());
}

#[test]
fn acl_config_map_errors_name_the_key() {
    let data = |operators: &str, kcp: &str| {
        [
            ("acl-list.json".to_owned(), operators.to_owned()),
            ("kcp-external-nat-ip.json".to_owned(), kcp.to_owned()),
        ]
        .into_iter()
        .collect::<std::collections::BTreeMap<_, _>>()
    };
    let err = |d| AclAddresses::from_config_map_data(&d).unwrap_err();
    assert!(err(data("[\"2.2.2.2/29\"]", "1.1.1.1/32")).starts_with("kcp-external-nat-ip.json:"));
    assert!(err(data("2.2.2.2/29", "\"1.1.1.1/32\"")).starts_with("acl-list.json:"));
    assert!(
        err(data("[\"2.2.2.2/29\", \"nope\"]", "\"1.1.1.1/32\"")).starts_with("acl-list.json[1]:")
    );
    let missing = AclAddresses::from_config_map_data(&Default::default()).unwrap_err();
    assert!(missing.contains("acl-list.json is missing"), "{missing}");
    // A bare address is a single-address network.
    assert!(AclAddresses::from_config_map_data(&data("[]", "\"1.1.1.1\"")).is_ok());
}

/// Upstream's `TestNewExtensionsExtenderForCreate` "Should not include Network filter
/// extension for new Shoot when network restriction is globally disabled".
#[test]
fn network_restriction_off_writes_no_networking_filter() {
    let rt = runtime("aws");
    let opts = ConvertOptions {
        network_restriction: false,
        ..Default::default()
    };
    let spec = json(&to_shoot_with(&rt, &config(), None, &opts).unwrap().shoot)["spec"].clone();
    assert!(extension(&spec, "shoot-networking-filter").is_none());
    let types: Vec<&str> = spec["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "shoot-cert-service",
            "shoot-dns-service",
            "shoot-oidc-service",
            "shoot-auditlog-service"
        ]
    );
}
