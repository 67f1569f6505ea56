//! The provider extensions' `infrastructureConfig` and `controlPlaneConfig` (one API version per
//! provider, `<provider>.provider.extensions.gardener.cloud/v1alpha1`), generated on create and
//! merged into the live ones when zones are added.

use super::zones::{self, ZoneSplitError};
use super::{AWS_API_VERSION, ConvertError, Input};
use crate::api::ProviderType;
use ipnet::Ipv4Net;
use serde_json::{Map, Value, json};

const AZURE_API_VERSION: &str = "azure.provider.extensions.gardener.cloud/v1alpha1";
const GCP_API_VERSION: &str = "gcp.provider.extensions.gardener.cloud/v1alpha1";
const OPENSTACK_API_VERSION: &str = "openstack.provider.extensions.gardener.cloud/v1alpha1";
const ALICLOUD_API_VERSION: &str = "alicloud.provider.extensions.gardener.cloud/v1alpha1";
/// The GDCH provider extension is not Gardener's own: its API group is Google's.
const GDCH_API_VERSION: &str = "gdch.provider.extensions.gardener.gdc.goog/v1alpha1";

/// Floating IP pool and load balancer provider of SAP Converged Cloud (upstream constants).
const OPENSTACK_FLOATING_POOL: &str = "FloatingIP-external-kyma-01";
const OPENSTACK_LOAD_BALANCER_PROVIDER: &str = "f5";

/// NAT gateway of every generated Azure zone: on, with Azure's idle timeout of 4 minutes.
const AZURE_NAT_IDLE_TIMEOUT_MINUTES: u32 = 4;

/// The number of an Azure zone name, exactly `"1"` to `"8"` (no sign, no leading zero, so that
/// one zone has one spelling).
pub(super) fn azure_zone_number(zone: &str) -> Option<u32> {
    match zone.as_bytes() {
        [d @ b'1'..=b'8'] => Some(u32::from(d - b'0')),
        _ => None,
    }
}

fn config(api_version: &str, kind: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("apiVersion".to_owned(), json!(api_version));
    m.insert("kind".to_owned(), json!(kind));
    m
}

fn infrastructure(api_version: &str, networks: Value) -> Map<String, Value> {
    let mut m = config(api_version, "InfrastructureConfig");
    m.insert("networks".to_owned(), networks);
    m
}

fn control_plane(api_version: &str) -> Map<String, Value> {
    config(api_version, "ControlPlaneConfig")
}

fn split_error(provider: ProviderType, e: ZoneSplitError) -> ConvertError {
    match e {
        ZoneSplitError::ZoneCount { count, min, max } => ConvertError::ZoneCount {
            provider: provider.as_str(),
            count,
            min,
            max,
        },
        ZoneSplitError::Prefix { prefix, min, max } => ConvertError::NodesPrefix {
            provider: provider.as_str(),
            prefix,
            min,
            max,
        },
    }
}

/// Zones the provider needs at least on create (GCP pins its control plane to the first zone;
/// SAP Converged Cloud configures no zones).
fn min_zones(provider: ProviderType) -> usize {
    match provider {
        ProviderType::Openstack => 0,
        _ => 1,
    }
}

/// Generated zone entries of `networks.zones[]`, one per name, for AWS, Azure and Alibaba.
fn zone_entries(
    provider: ProviderType,
    nodes: Ipv4Net,
    names: &[&str],
) -> Result<Vec<Value>, ConvertError> {
    let err = |e| split_error(provider, e);
    Ok(match provider {
        ProviderType::Aws => zones::aws(nodes, names)
            .map_err(err)?
            .into_iter()
            .map(|z| {
                json!({
                    "internal": z.internal.to_string(),
                    "name": z.name,
                    "public": z.public.to_string(),
                    "workers": z.workers.to_string(),
                })
            })
            .collect(),
        ProviderType::Azure => names
            .iter()
            .zip(zones::eighths(nodes, names.len()).map_err(err)?)
            .map(|(name, cidr)| {
                json!({
                    "cidr": cidr.to_string(),
                    // The caller checked the names (ConvertError::AzureZone).
                    "name": azure_zone_number(name).unwrap_or_default(),
                    "natGateway": {"enabled": true, "idleConnectionTimeoutMinutes": AZURE_NAT_IDLE_TIMEOUT_MINUTES},
                })
            })
            .collect(),
        ProviderType::Alicloud => names
            .iter()
            .zip(zones::eighths(nodes, names.len()).map_err(err)?)
            .map(|(name, cidr)| json!({"name": name, "workers": cidr.to_string()}))
            .collect(),
        ProviderType::Gdch => names
            .iter()
            .zip(zones::gdch(nodes, names.len()).map_err(err)?)
            .map(|(name, cidr)| json!({"CIDR": cidr.to_string(), "name": name}))
            .collect(),
        ProviderType::Gcp | ProviderType::Openstack => Vec::new(),
    })
}

/// GDCH: the nodes CIDR with one subnet per zone, egress on, and the parent network of the
/// configuration (`converter.provider.gdch.parentReference*`; empty namespace and type are
/// left out, the extension then uses its defaults).
fn gdch_configs(
    input: &Input<'_>,
    entries: Vec<Value>,
) -> (Map<String, Value>, Map<String, Value>) {
    let gdch = &input.cfg.converter.provider.gdch;
    let mut parent = Map::new();
    parent.insert("name".to_owned(), json!(gdch.parent_reference_name));
    if !gdch.parent_reference_namespace.is_empty() {
        parent.insert(
            "namespace".to_owned(),
            json!(gdch.parent_reference_namespace),
        );
    }
    if !gdch.parent_reference_type.is_empty() {
        parent.insert("type".to_owned(), json!(gdch.parent_reference_type));
    }
    let mut infra = infrastructure(
        GDCH_API_VERSION,
        json!({
            "nodeCIDR": input.shoot().networking.nodes,
            "parentReference": parent,
            "zones": entries,
        }),
    );
    infra.insert("enableEgress".to_owned(), json!(true));
    (infra, control_plane(GDCH_API_VERSION))
}

/// The configurations of a new Shoot for the pools' zones.
pub(super) fn create(
    input: &Input<'_>,
    nodes: Ipv4Net,
    zones: &[&str],
) -> Result<(Value, Value), ConvertError> {
    let provider = input.shoot().provider.type_;
    let min = min_zones(provider);
    if zones.len() < min {
        return Err(ConvertError::ZoneCount {
            provider: provider.as_str(),
            count: zones.len(),
            min,
            max: if provider == ProviderType::Gdch {
                zones::GDCH_MAX_ZONES
            } else {
                zones::MAX_ZONES
            },
        });
    }
    let cidr = input.shoot().networking.nodes.as_str();
    let entries = zone_entries(provider, nodes, zones)?;
    let (infra, cp) = match provider {
        ProviderType::Aws => {
            let mut infra = infrastructure(
                AWS_API_VERSION,
                json!({"vpc": {"cidr": cidr}, "zones": entries}),
            );
            let mut cp = control_plane(AWS_API_VERSION);
            if super::super::networking::dual_stack_requested(input) {
                infra.insert("dualStack".to_owned(), json!({"enabled": true}));
                cp.insert(
                    "loadBalancerController".to_owned(),
                    json!({"enabled": true}),
                );
            }
            (infra, cp)
        }
        ProviderType::Azure => {
            let mut infra = infrastructure(
                AZURE_API_VERSION,
                json!({"vnet": {"cidr": cidr}, "zones": entries}),
            );
            infra.insert("zoned".to_owned(), json!(true));
            (infra, control_plane(AZURE_API_VERSION))
        }
        ProviderType::Gcp => {
            // `worker` is the deprecated spelling of `workers`; upstream writes both.
            let infra = infrastructure(GCP_API_VERSION, json!({"worker": cidr, "workers": cidr}));
            let mut cp = control_plane(GCP_API_VERSION);
            cp.insert("zone".to_owned(), json!(zones.first()));
            (infra, cp)
        }
        ProviderType::Openstack => {
            let mut infra = infrastructure(OPENSTACK_API_VERSION, json!({"workers": cidr}));
            infra.insert(
                "floatingPoolName".to_owned(),
                json!(OPENSTACK_FLOATING_POOL),
            );
            let mut cp = control_plane(OPENSTACK_API_VERSION);
            cp.insert(
                "loadBalancerProvider".to_owned(),
                json!(OPENSTACK_LOAD_BALANCER_PROVIDER),
            );
            (infra, cp)
        }
        ProviderType::Alicloud => (
            infrastructure(
                ALICLOUD_API_VERSION,
                json!({"vpc": {"cidr": cidr}, "zones": entries}),
            ),
            control_plane(ALICLOUD_API_VERSION),
        ),
        ProviderType::Gdch => gdch_configs(input, entries),
    };
    Ok((Value::Object(infra), Value::Object(cp)))
}

/// An Azure Shoot created without zones (upstream PR 664): its configurations are kept as they
/// are, even when the pools name zones.
pub(super) fn is_azure_lite(provider: ProviderType, live_infra: &Value) -> bool {
    provider == ProviderType::Azure
        && live_infra
            .pointer("/networks/zones")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
}

/// The name of a live zone entry as a string (Azure names are numbers).
fn zone_name(zone: &Value) -> Option<String> {
    match zone.get("name")? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn not_an_object() -> ConvertError {
    ConvertError::LiveShoot {
        field: "spec.provider.infrastructureConfig",
        message: "is not an object with an object `networks`",
    }
}

/// The configurations for an update that adds zones. The live infrastructure config is kept
/// with everything in it; only the entries of new zones are added to `networks.zones`, each with
/// the subnets of its position (live zones first), and a missing VPC/VNet CIDR is set. The live
/// control plane config is kept. GCP and SAP Converged Cloud configure no zones: both configs
/// stay as they are (GCP's control plane keeps its first zone). GDCH, as upstream does, gets
/// both configs generated anew for the live zones followed by the new ones.
pub(super) fn patch(
    input: &Input<'_>,
    nodes: Ipv4Net,
    live_infra: &Value,
    live_cp: Option<&Value>,
    merged: &[&str],
) -> Result<(Value, Option<Value>), ConvertError> {
    let provider = input.shoot().provider.type_;
    let network_key = match provider {
        ProviderType::Aws | ProviderType::Alicloud => "vpc",
        ProviderType::Azure => "vnet",
        ProviderType::Gcp | ProviderType::Openstack => {
            return Ok((live_infra.clone(), live_cp.cloned()));
        }
        ProviderType::Gdch => {
            let entries = zone_entries(provider, nodes, merged)?;
            let (infra, cp) = gdch_configs(input, entries);
            return Ok((Value::Object(infra), Some(Value::Object(cp))));
        }
    };

    let mut infra = live_infra.clone();
    let networks = infra
        .as_object_mut()
        .and_then(|m| {
            m.entry("networks")
                .or_insert_with(|| json!({}))
                .as_object_mut()
        })
        .ok_or_else(not_an_object)?;

    let live_zones: Vec<Value> = networks
        .get("zones")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let live_names: Vec<String> = live_zones.iter().filter_map(zone_name).collect();
    let mut order: Vec<&str> = live_names.iter().map(String::as_str).collect();
    for z in merged {
        if !order.contains(z) {
            order.push(z);
        }
    }
    let generated = zone_entries(provider, nodes, &order)?;
    let mut zones = live_zones;
    zones.extend(generated.into_iter().skip(live_names.len()));
    networks.insert("zones".to_owned(), Value::Array(zones));

    let network = networks.entry(network_key).or_insert_with(|| json!({}));
    if let Some(network) = network.as_object_mut()
        && !network.contains_key("id")
        && !network.contains_key("name")
        && !network.contains_key("cidr")
    {
        network.insert("cidr".to_owned(), json!(input.shoot().networking.nodes));
    }
    if provider == ProviderType::Azure
        && let Some(m) = infra.as_object_mut()
    {
        m.insert("zoned".to_owned(), json!(true));
    }

    let cp = live_cp.cloned().unwrap_or_else(|| {
        let api_version = match provider {
            ProviderType::Aws => AWS_API_VERSION,
            ProviderType::Azure => AZURE_API_VERSION,
            _ => ALICLOUD_API_VERSION,
        };
        Value::Object(control_plane(api_version))
    });
    Ok((infra, Some(cp)))
}
