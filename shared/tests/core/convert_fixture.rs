//! Fixtures of the conversion tests: the example configuration and small valid Runtimes.

use kim_shared::api::Runtime;
use kim_shared::config::{ConfigPaths, KimConfig};
use kim_shared::gardener::Shoot;
use serde_json::json;
use std::path::{Path, PathBuf};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The example configuration of `deploy/config`.
pub fn config() -> KimConfig {
    let path = root().join("deploy/config/converter_config.json");
    KimConfig::load(&ConfigPaths::new(&path))
        .unwrap_or_else(|e| panic!("example config {}: {e}", path.display()))
}

/// Region and zones of each provider in the example configuration.
pub fn region(provider: &str) -> (&'static str, [&'static str; 3]) {
    match provider {
        "aws" => (
            "eu-central-1",
            ["eu-central-1a", "eu-central-1b", "eu-central-1c"],
        ),
        "azure" => ("westeurope", ["1", "2", "3"]),
        "gcp" => (
            "europe-west3",
            ["europe-west3-a", "europe-west3-b", "europe-west3-c"],
        ),
        "openstack" => ("eu-de-1", ["eu-de-1a", "eu-de-1b", "eu-de-1d"]),
        "alicloud" => (
            "ap-southeast-1",
            ["ap-southeast-1a", "ap-southeast-1b", "ap-southeast-1c"],
        ),
        other => panic!("no fixture region for {other}"),
    }
}

/// A machine type of each provider in the example configuration.
pub fn machine_type(provider: &str) -> &'static str {
    match provider {
        "aws" => "m6i.large",
        "azure" => "Standard_D4s_v5",
        "gcp" => "n2-standard-4",
        "openstack" => "g_c4_m16",
        "alicloud" => "ecs.g8i.xlarge",
        other => panic!("no fixture machine type for {other}"),
    }
}

/// A minimal valid Runtime of `provider` with one pool in the first zone.
pub fn runtime(provider: &str) -> Runtime {
    let (region, zones) = region(provider);
    let machine = machine_type(provider);
    let value = json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "Runtime",
        "metadata": {
            "name": "runtime-id-1",
            "namespace": "kcp-system",
            "generation": 3,
            "labels": {
                "kyma-project.io/instance-id": "instance-1",
                "kyma-project.io/runtime-id": "runtime-id-1",
                "kyma-project.io/broker-plan-id": "plan-1",
                "kyma-project.io/broker-plan-name": "plan",
                "kyma-project.io/global-account-id": "ga-1",
                "kyma-project.io/subaccount-id": "sa-1",
                "kyma-project.io/shoot-name": "c-1234567",
                "kyma-project.io/region": region,
                "operator.kyma-project.io/kyma-name": "kyma-1",
            },
        },
        "spec": {
            "shoot": {
                "name": "c-1234567",
                "purpose": "evaluation",
                "platformRegion": "cf-us10",
                "region": region,
                "secretBindingName": "hyperscaler",
                "kubernetes": {"version": "1.35.4"},
                "provider": {
                    "type": provider,
                    "workers": [{
                        "name": "cpu-worker-0",
                        "machine": {"type": machine, "image": {"name": "gardenlinux", "version": "1877.7.0"}},
                        "minimum": 1,
                        "maximum": 3,
                        "zones": [zones[0]],
                    }],
                },
                "networking": {
                    "type": "calico",
                    "nodes": "10.250.0.0/16",
                    "pods": "10.96.0.0/13",
                    "services": "10.104.0.0/13",
                },
            },
            "security": {
                "administrators": ["admin@example.com"],
                "networking": {"filter": {"egress": {"enabled": true}}},
            },
        },
    });
    serde_json::from_value(value).expect("fixture Runtime")
}

/// The zones of every pool of `rt`.
pub fn set_zones(rt: &mut Runtime, zones: &[&str]) {
    rt.spec.shoot.provider.workers[0].zones = Some(zones.iter().map(|z| (*z).to_owned()).collect());
}

/// The Shoot as JSON, for concise assertions.
pub fn json(shoot: &Shoot) -> serde_json::Value {
    serde_json::to_value(shoot).expect("serializable Shoot")
}
