//! The `kyma-provisioning-info` ConfigMap the controller writes into `kyma-system` of every
//! runtime cluster: what Kyma components read about the cluster they run in (worker pools,
//! account IDs, regions, network details). Key names, value shapes and the single data key
//! `details` (a YAML document with alphabetically sorted keys) are those of upstream KIM, so
//! the components read the same ConfigMap from either controller.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::api::{ProviderType, Runtime};
use crate::gardener::{Shoot, Worker};
use crate::names;

/// Namespace the Kyma components run in; created in every runtime cluster.
pub const KYMA_SYSTEM_NAMESPACE: &str = "kyma-system";
/// Name of the ConfigMap in [`KYMA_SYSTEM_NAMESPACE`].
pub const CONFIG_MAP_NAME: &str = "kyma-provisioning-info";
/// The ConfigMap's only data key.
pub const DETAILS_KEY: &str = "details";

/// The `details` document as JSON (object keys sorted, as `serde_json` keeps them).
///
/// `seed_region` is the region of the Seed the Shoot runs on, when known. Fields upstream
/// omits when empty are omitted here too.
pub fn details(runtime: &Runtime, shoot: &Shoot, seed_region: Option<&str>) -> Value {
    let provider = &runtime.spec.shoot.provider;
    let kyma = provider.workers.first().map_or_else(
        || {
            json!({"name": "", "machineType": "", "haZones": false,
                   "autoScalerMin": 0, "autoScalerMax": 0})
        },
        worker_pool,
    );
    let mut pools = Map::new();
    pools.insert("kyma".into(), kyma);
    if let Some(custom) = &provider.additional_workers
        && !custom.is_empty()
    {
        pools.insert(
            "custom".into(),
            Value::Array(custom.iter().map(worker_pool).collect()),
        );
    }

    let mut network = Map::new();
    network.insert("dualStackIPEnabled".into(), Value::Bool(dual_stack(shoot)));
    let acl = applied_acl(runtime);
    if !acl.is_empty() {
        network.insert("kubeAPIServer".into(), json!({ "acl": acl }));
    }

    let mut out = Map::new();
    out.insert("workerPools".into(), Value::Object(pools));
    out.insert("networkDetails".into(), Value::Object(network));
    let labels = runtime.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).cloned().unwrap_or_default();
    let strings = [
        ("globalAccountID", label(names::LABEL_GLOBAL_ACCOUNT_ID)),
        ("subaccountID", label(names::LABEL_SUBACCOUNT_ID)),
        ("environmentInstanceID", label(names::LABEL_INSTANCE_ID)),
        ("instanceName", label(names::LABEL_KYMA_NAME)),
        ("runtimeID", label(names::LABEL_RUNTIME_ID)),
        ("instanceID", label(names::LABEL_INSTANCE_ID)),
        ("region", runtime.spec.shoot.region.clone()),
        ("platformRegion", runtime.spec.shoot.platform_region.clone()),
        ("seedRegion", seed_region.unwrap_or_default().to_owned()),
    ];
    for (k, v) in strings {
        if !v.is_empty() {
            out.insert(k.into(), Value::String(v));
        }
    }
    if let Some(op) = shoot
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        && let Ok(t) = serde_json::to_value(&op.last_update_time)
    {
        out.insert("lastReconcileTime".into(), t);
    }
    if let Some(infra) = &shoot.spec.provider.infrastructure_config
        && !infra.0.is_null()
    {
        out.insert("infrastructureConfig".into(), infra.0.clone());
    }
    Value::Object(out)
}

/// The ConfigMap's `data`: [`DETAILS_KEY`] holding [`details`] as YAML.
pub fn config_map_data(
    runtime: &Runtime,
    shoot: &Shoot,
    seed_region: Option<&str>,
) -> Result<BTreeMap<String, String>, serde_yaml_ng::Error> {
    let yaml = serde_yaml_ng::to_string(&details(runtime, shoot, seed_region))?;
    Ok([(DETAILS_KEY.to_owned(), yaml)].into())
}

/// The ConfigMap to apply (server-side apply body).
pub fn config_map(
    runtime: &Runtime,
    shoot: &Shoot,
    seed_region: Option<&str>,
) -> Result<Value, serde_yaml_ng::Error> {
    Ok(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIG_MAP_NAME,
            "namespace": KYMA_SYSTEM_NAMESPACE,
            "labels": {
                names::LABEL_RECONCILER_MANAGED_BY: names::MANAGED_BY_INFRASTRUCTURE_MANAGER,
            },
        },
        "data": config_map_data(runtime, shoot, seed_region)?,
    }))
}

/// The `kyma-system` namespace to apply.
pub fn kyma_system_namespace() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": KYMA_SYSTEM_NAMESPACE },
    })
}

fn worker_pool(w: &Worker) -> Value {
    json!({
        "name": w.name,
        "machineType": w.machine.type_,
        "haZones": high_availability(w.zones.as_deref().unwrap_or_default()),
        "autoScalerMin": w.minimum,
        "autoScalerMax": w.maximum,
    })
}

/// Three or more zones, an odd number of them (so a quorum survives losing one).
fn high_availability(zones: &[String]) -> bool {
    zones.len() >= 3 && zones.len() % 2 == 1
}

/// Exactly the two families IPv4 and IPv6.
fn dual_stack(shoot: &Shoot) -> bool {
    let families = shoot
        .spec
        .networking
        .as_ref()
        .and_then(|n| n.ip_families.as_deref())
        .unwrap_or_default();
    families.len() == 2
        && families.iter().any(|f| f == "IPv4")
        && families.iter().any(|f| f == "IPv6")
}

/// The kube-apiserver ACL, reported for the providers whose ACL extension is in use (AWS and
/// Azure) only.
fn applied_acl(runtime: &Runtime) -> Vec<String> {
    if !matches!(
        runtime.spec.shoot.provider.type_,
        ProviderType::Aws | ProviderType::Azure
    ) {
        return Vec::new();
    }
    runtime
        .spec
        .shoot
        .kubernetes
        .as_ref()
        .and_then(|k| k.kube_api_server.as_ref())
        .and_then(|a| a.acl.as_ref())
        .and_then(|a| a.allowed_cidrs.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime(yaml: &str) -> Runtime {
        serde_yaml_ng::from_str(yaml).expect("test Runtime parses")
    }

    fn shoot(yaml: &str) -> Shoot {
        serde_yaml_ng::from_str(yaml).expect("test Shoot parses")
    }

    const RUNTIME: &str = r#"
apiVersion: infrastructuremanager.kyma-project.io/v1
kind: Runtime
metadata:
  name: rt
  namespace: kcp-system
  labels:
    kyma-project.io/global-account-id: ga
    kyma-project.io/subaccount-id: sa
    kyma-project.io/instance-id: inst
    kyma-project.io/runtime-id: rid
    operator.kyma-project.io/kyma-name: kname
spec:
  shoot:
    name: s
    purpose: production
    region: eu-central-1
    platformRegion: cf-eu10
    secretBindingName: sb
    kubernetes:
      kubeAPIServer:
        acl:
          allowedCIDRs: ["10.0.0.0/8"]
    networking:
      nodes: 10.250.0.0/16
      pods: 100.64.0.0/12
      services: 100.104.0.0/13
    provider:
      type: aws
      workers:
      - name: cpu-worker-0
        machine: {type: m6i.large}
        minimum: 3
        maximum: 20
        zones: [a, b, c]
      additionalWorkers:
      - name: extra
        machine: {type: m6i.xlarge}
        minimum: 1
        maximum: 2
        zones: [a, b]
  security:
    administrators: [admin@example.com]
    networking:
      filter:
        egress: {enabled: false}
"#;

    const SHOOT: &str = r#"
apiVersion: core.gardener.cloud/v1beta1
kind: Shoot
metadata: {name: s, namespace: garden-p}
spec:
  region: eu-central-1
  kubernetes: {}
  networking: {ipFamilies: [IPv4, IPv6]}
  provider:
    type: aws
    infrastructureConfig:
      apiVersion: aws.provider.extensions.gardener.cloud/v1alpha1
      kind: InfrastructureConfig
status:
  lastOperation:
    description: done
    lastUpdateTime: "2026-07-01T10:00:00Z"
    progress: 100
    state: Succeeded
    type: Reconcile
"#;

    #[test]
    fn details_carry_upstream_keys_and_values() {
        let d = details(&runtime(RUNTIME), &shoot(SHOOT), Some("eu-west-1"));
        assert_eq!(
            d,
            json!({
                "workerPools": {
                    "kyma": {"name": "cpu-worker-0", "machineType": "m6i.large", "haZones": true,
                             "autoScalerMin": 3, "autoScalerMax": 20},
                    "custom": [{"name": "extra", "machineType": "m6i.xlarge", "haZones": false,
                                "autoScalerMin": 1, "autoScalerMax": 2}],
                },
                "globalAccountID": "ga",
                "subaccountID": "sa",
                "environmentInstanceID": "inst",
                "instanceName": "kname",
                "runtimeID": "rid",
                "instanceID": "inst",
                "lastReconcileTime": "2026-07-01T10:00:00Z",
                "region": "eu-central-1",
                "platformRegion": "cf-eu10",
                "infrastructureConfig": {
                    "apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1",
                    "kind": "InfrastructureConfig",
                },
                "networkDetails": {"dualStackIPEnabled": true,
                                   "kubeAPIServer": {"acl": ["10.0.0.0/8"]}},
                "seedRegion": "eu-west-1",
            })
        );
    }

    #[test]
    fn empty_values_are_omitted_and_acl_only_for_aws_and_azure() {
        let mut rt = runtime(RUNTIME);
        rt.metadata.labels = None;
        rt.spec.shoot.provider.type_ = ProviderType::Gcp;
        rt.spec.shoot.provider.additional_workers = Some(Vec::new());
        let mut sh = shoot(SHOOT);
        sh.status = None;
        sh.spec.networking = None;
        sh.spec.provider.infrastructure_config = None;
        let d = details(&rt, &sh, None);
        let keys: Vec<&String> = d
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        assert_eq!(
            keys,
            ["networkDetails", "platformRegion", "region", "workerPools"]
        );
        assert_eq!(d["networkDetails"], json!({"dualStackIPEnabled": false}));
        assert_eq!(d["workerPools"].get("custom"), None);
    }

    #[test]
    fn config_map_has_upstream_name_label_and_yaml_details() {
        let cm =
            config_map(&runtime(RUNTIME), &shoot(SHOOT), Some("eu-west-1")).expect("serialises");
        assert_eq!(cm["metadata"]["name"], "kyma-provisioning-info");
        assert_eq!(cm["metadata"]["namespace"], "kyma-system");
        assert_eq!(
            cm["metadata"]["labels"]["reconciler.kyma-project.io/managed-by"],
            "infrastructure-manager"
        );
        let text = cm["data"]["details"].as_str().expect("details is text");
        // Sorted keys, as upstream's YAML writer emits them.
        assert!(text.starts_with("environmentInstanceID: inst\nglobalAccountID: ga\n"));
        let back: Value = serde_yaml_ng::from_str(text).expect("details is YAML");
        assert_eq!(
            back,
            details(&runtime(RUNTIME), &shoot(SHOOT), Some("eu-west-1"))
        );
    }

    #[test]
    fn high_availability_needs_an_odd_number_of_at_least_three_zones() {
        let z = |n: usize| vec![String::new(); n];
        assert!(!high_availability(&z(1)));
        assert!(!high_availability(&z(2)));
        assert!(high_availability(&z(3)));
        assert!(!high_availability(&z(4)));
        assert!(high_availability(&z(5)));
    }
}
