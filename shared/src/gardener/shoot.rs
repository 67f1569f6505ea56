//! The Gardener `Shoot` (`core.gardener.cloud/v1beta1`): the cluster the infrastructure manager
//! creates for each Runtime. Gardener serves it from its aggregated apiserver, so no CRD is
//! generated from this type; the derive gives `Api<Shoot>`.

use super::common::RawExtension;
use super::kubernetes::Kubernetes;
use super::status::ShootStatus;
use super::worker::Provider;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `spec` of a Shoot.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "core.gardener.cloud",
    version = "v1beta1",
    kind = "Shoot",
    plural = "shoots",
    namespaced,
    status = "ShootStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct ShootSpec {
    /// Restrictions on where the shoot's control plane and nodes may run (EU access).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_restrictions: Option<Vec<AccessRestrictionWithOptions>>,
    /// Deprecated add-ons.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addons: Option<Addons>,
    /// Reference to the (Namespaced)CloudProfile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloud_profile: Option<CloudProfileReference>,
    /// Deprecated name of the CloudProfile; forbidden from Kubernetes 1.34.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloud_profile_name: Option<String>,
    /// Control plane settings (high availability).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlane>,
    /// Name of the `security.gardener.cloud/v1alpha1` CredentialsBinding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials_binding_name: Option<String>,
    /// DNS settings; `domain` is immutable once set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    /// Name of the ExposureClass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exposure_class_name: Option<String>,
    /// Extensions; an atomic list, `type` is unique.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Vec<Extension>>,
    /// Hibernation settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hibernation: Option<Hibernation>,
    /// Kubernetes version and component settings (required).
    pub kubernetes: Kubernetes,
    /// Maintenance settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Maintenance>,
    /// Monitoring settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monitoring: Option<Monitoring>,
    /// Networking settings; required when the shoot has workers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub networking: Option<Networking>,
    /// Provider type, configurations and worker pools (required).
    pub provider: Provider,
    /// `evaluation` (default), `testing`, `development`, `production` or `infrastructure`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// Region of the cloud profile (required, immutable).
    pub region: String,
    /// Objects in the project namespace referenced by extensions; an atomic list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<NamedResourceReference>>,
    /// Scheduler name (default `default-scheduler`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// Deprecated name of the SecretBinding; forbidden from Kubernetes 1.34.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_binding_name: Option<String>,
    /// Seed the shoot runs on; changed only through the `binding` subresource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed_name: Option<String>,
    /// Selector for the seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed_selector: Option<SeedSelector>,
    /// System component settings (CoreDNS, node-local DNS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_components: Option<SystemComponents>,
    /// Tolerations of seed taints; merged by `key`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
}

impl ShootSpec {
    /// Whether the extension of `type_` is listed and not `disabled` (absent means on).
    pub fn extension_enabled(&self, type_: &str) -> bool {
        self.extensions
            .iter()
            .flatten()
            .any(|e| e.type_ == type_ && e.disabled != Some(true))
    }
}

/// `spec.accessRestrictions[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct AccessRestrictionWithOptions {
    /// Name of the restriction, for example `eu-access-only`.
    pub name: String,
    /// Options of the restriction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub options: Option<BTreeMap<String, String>>,
}

/// `spec.addons` (deprecated).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Addons {
    /// Kubernetes dashboard add-on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes_dashboard: Option<KubernetesDashboard>,
    /// NGINX ingress add-on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nginx_ingress: Option<NginxIngress>,
}

/// `spec.addons.kubernetesDashboard`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesDashboard {
    /// Whether the add-on is deployed.
    pub enabled: bool,
    /// Authentication mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authentication_mode: Option<String>,
}

/// `spec.addons.nginxIngress`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NginxIngress {
    /// Whether the add-on is deployed.
    pub enabled: bool,
    /// NGINX configuration entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<BTreeMap<String, String>>,
    /// External traffic policy of the load balancer Service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<String>,
    /// Source ranges allowed to reach the load balancer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_balancer_source_ranges: Option<Vec<String>>,
}

/// `spec.cloudProfile`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct CloudProfileReference {
    /// `CloudProfile` (the default when empty) or `NamespacedCloudProfile`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the profile.
    pub name: String,
}

/// Gardener `ControlPlane` (`spec.controlPlane`, also `spec.shoot.controlPlane` of a Runtime).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlane {
    /// High availability of the control plane; immutable once set on a scheduled shoot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub high_availability: Option<HighAvailability>,
    /// Zones the control plane is pinned to (needs `allowZonePinning` in the cloud profile).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
}

/// `controlPlane.highAvailability`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HighAvailability {
    /// The failures the control plane tolerates.
    pub failure_tolerance: FailureTolerance,
}

/// `controlPlane.highAvailability.failureTolerance`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct FailureTolerance {
    /// `node` or `zone`.
    #[serde(rename = "type")]
    pub type_: String,
}

/// `spec.dns`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Dns {
    /// External domain of the shoot, `<shoot>.<domainPrefix>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// DNS providers (deprecated in favour of the shoot-dns-service providerConfig).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub providers: Option<Vec<DnsProvider>>,
}

/// `spec.dns.providers[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DnsProvider {
    /// Credentials of the provider (replaces `secretName` from Kubernetes 1.35).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials_ref: Option<CrossVersionObjectReference>,
    /// Domains the provider serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domains: Option<DnsIncludeExclude>,
    /// Whether this is the primary provider.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary: Option<bool>,
    /// Secret with the provider credentials.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// Provider type, for example `aws-route53`.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Hosted zones the provider serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zones: Option<DnsIncludeExclude>,
}

/// Include/exclude lists of DNS domains or zones.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct DnsIncludeExclude {
    /// Excluded entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclude: Option<Vec<String>>,
    /// Included entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include: Option<Vec<String>>,
}

/// A reference by API version, kind and name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CrossVersionObjectReference {
    /// API version of the referent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the referent.
    pub kind: String,
    /// Name of the referent.
    pub name: String,
}

/// `spec.extensions[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Extension {
    /// Whether the extension is switched off for this shoot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    /// Extension-specific configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_config: Option<RawExtension>,
    /// Extension type, for example `shoot-networking-filter`.
    #[serde(rename = "type")]
    pub type_: String,
}

/// `spec.hibernation`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Hibernation {
    /// Whether the shoot is (to be) hibernated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Cron schedules for hibernation and wake-up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedules: Option<Vec<HibernationSchedule>>,
}

/// `spec.hibernation.schedules[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct HibernationSchedule {
    /// Cron spec for waking up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    /// IANA time zone of the schedule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Cron spec for hibernating.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
}

/// `spec.maintenance`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Maintenance {
    /// Automatic updates in the maintenance window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_update: Option<MaintenanceAutoUpdate>,
    /// Automatic credential rotation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_rotation: Option<MaintenanceAutoRotation>,
    /// When true, spec changes roll out only in the maintenance window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confine_spec_update_rollout: Option<bool>,
    /// The maintenance window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_window: Option<MaintenanceTimeWindow>,
}

/// `spec.maintenance.autoUpdate`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceAutoUpdate {
    /// Whether the Kubernetes patch version is updated automatically (required key).
    pub kubernetes_version: bool,
    /// Whether machine image versions are updated automatically.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_image_version: Option<bool>,
}

/// `spec.maintenance.autoRotation`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct MaintenanceAutoRotation {
    /// Rotation of individual credentials.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials: Option<MaintenanceCredentialsAutoRotation>,
}

/// `spec.maintenance.autoRotation.credentials`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceCredentialsAutoRotation {
    /// ETCD encryption key rotation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etcd_encryption_key: Option<MaintenanceRotationConfig>,
    /// Observability credentials rotation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observability: Option<MaintenanceRotationConfig>,
    /// SSH key pair rotation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssh_keypair: Option<MaintenanceRotationConfig>,
}

/// One automatic rotation setting.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceRotationConfig {
    /// Rotation period (duration, 30m..90d; `0` disables).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rotation_period: Option<String>,
}

/// `spec.maintenance.timeWindow`, format `HHMMSS+ZZZZ`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct MaintenanceTimeWindow {
    /// Start of the window, for example `220000+0100`.
    pub begin: String,
    /// End of the window.
    pub end: String,
}

/// `spec.monitoring`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Monitoring {
    /// Alerting settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alerting: Option<Alerting>,
}

/// `spec.monitoring.alerting`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Alerting {
    /// E-mail addresses that receive alerts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email_receivers: Option<Vec<String>>,
}

/// Gardener reserves `240.0.0.0/8` to `244.0.0.0/8` for the kube-apiserver and VPN mappings: no
/// shoot network may intersect them. The reserved /8 that `net` intersects, if any.
pub fn reserved_network_overlap(net: ipnet::Ipv4Net) -> Option<ipnet::Ipv4Net> {
    (240..=244u8)
        .map(|first| ipnet::Ipv4Net::new_assert(std::net::Ipv4Addr::new(first, 0, 0, 0), 8))
        .find(|r| r.contains(&net.network()) || net.contains(&r.network()))
}

/// `spec.networking`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Networking {
    /// `IPv4` and/or `IPv6` (default `[IPv4]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_families: Option<Vec<String>>,
    /// Node CIDR.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<String>,
    /// Pod CIDR (immutable once set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods: Option<String>,
    /// Networking-extension configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_config: Option<RawExtension>,
    /// Service CIDR (immutable once set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub services: Option<String>,
    /// Networking extension, for example `calico` (immutable).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// `spec.resources[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NamedResourceReference {
    /// Name of the reference, unique in the list.
    pub name: String,
    /// The referenced object in the project namespace.
    pub resource_ref: CrossVersionObjectReference,
}

/// `spec.seedSelector`: a label selector plus provider types.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SeedSelector {
    /// Label selector requirements.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
    /// Labels the seed must carry, for example `seed.gardener.cloud/region`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Provider types of eligible seeds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_types: Option<Vec<String>>,
}

/// `spec.systemComponents`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SystemComponents {
    /// CoreDNS settings.
    #[serde(rename = "coreDNS", skip_serializing_if = "Option::is_none")]
    pub core_dns: Option<CoreDns>,
    /// Node-local DNS settings.
    #[serde(rename = "nodeLocalDNS", skip_serializing_if = "Option::is_none")]
    pub node_local_dns: Option<NodeLocalDns>,
}

/// `spec.systemComponents.coreDNS`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct CoreDns {
    /// Autoscaling mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<CoreDnsAutoscaling>,
    /// Query rewriting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewriting: Option<CoreDnsRewriting>,
}

/// `coreDNS.autoscaling`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct CoreDnsAutoscaling {
    /// `horizontal` (default) or `cluster-proportional`.
    pub mode: String,
}

/// `coreDNS.rewriting`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CoreDnsRewriting {
    /// Suffixes that are rewritten.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub common_suffixes: Option<Vec<String>>,
}

/// `spec.systemComponents.nodeLocalDNS`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct NodeLocalDns {
    /// Whether node-local DNS is deployed.
    pub enabled: bool,
    /// Whether queries to the cluster DNS use TCP.
    #[serde(
        rename = "forceTCPToClusterDNS",
        skip_serializing_if = "Option::is_none"
    )]
    pub force_tcp_to_cluster_dns: Option<bool>,
    /// Whether queries to the upstream DNS use TCP.
    #[serde(
        rename = "forceTCPToUpstreamDNS",
        skip_serializing_if = "Option::is_none"
    )]
    pub force_tcp_to_upstream_dns: Option<bool>,
    /// Whether forwarding to the upstream DNS is switched off.
    #[serde(
        rename = "disableForwardToUpstreamDNS",
        skip_serializing_if = "Option::is_none"
    )]
    pub disable_forward_to_upstream_dns: Option<bool>,
}

/// `spec.tolerations[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Toleration {
    /// Key of the tolerated seed taint.
    pub key: String,
    /// Value of the tolerated taint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::Shoot;
    use serde_json::{Value, json};

    fn round_trip(name: &str, shoot: &Value) {
        let typed: Shoot = serde_json::from_value(shoot.clone())
            .unwrap_or_else(|e| panic!("{name} does not deserialize: {e}"));
        let back = serde_json::to_value(&typed).expect("Shoot serializes");
        pretty_assertions::assert_eq!(shoot, &back, "{name} changed in a round trip");
    }

    /// Every Shoot the conversion writes (its golden files) survives a round trip unchanged.
    #[test]
    fn converted_shoots_round_trip() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden/convert");
        let mut count = 0;
        for entry in std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("golden Shoots expected in {}: {e}", dir.display()))
        {
            let path = entry.expect("directory entry").path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("golden file readable");
            let golden: Value = serde_json::from_str(&text).expect("golden file is JSON");
            round_trip(&path.display().to_string(), &golden["shoot"]);
            count += 1;
        }
        assert!(
            count >= 10,
            "only {count} golden Shoots in {}",
            dir.display()
        );
    }

    /// The fields the controller reads from a live Shoot, as Gardener reports them.
    #[test]
    fn a_shoot_as_gardener_reports_it_round_trips() {
        let shoot = json!({
            "apiVersion": "core.gardener.cloud/v1beta1",
            "kind": "Shoot",
            "metadata": {
                "name": "rt-abc",
                "namespace": "garden-kyma",
                "annotations": {"confirmation.gardener.cloud/deletion": "true"},
                "finalizers": ["gardener"],
                "generation": 3
            },
            "spec": {
                "cloudProfile": {"kind": "CloudProfile", "name": "aws"},
                "credentialsBindingName": "secret",
                "dns": {"domain": "rt-abc.kyma.example.com"},
                "extensions": [{"type": "shoot-oidc-service", "disabled": false}],
                "kubernetes": {
                    "version": "1.33.2",
                    "kubeAPIServer": {
                        "structuredAuthentication": {"configMapName": "structured-auth-config-rt-abc"},
                        "auditConfig": {"auditPolicy": {"configMapRef": {"name": "policy"}}},
                        "requests": {"maxNonMutatingInflight": 400, "maxMutatingInflight": 200},
                        "eventTTL": "1h0m0s"
                    },
                    "kubeControllerManager": {"nodeCIDRMaskSize": 24, "nodeMonitorGracePeriod": "40s"},
                    "kubeProxy": {"mode": "IPTables", "enabled": true},
                    "kubelet": {"failSwapOn": true, "imageMinimumGCAge": "2m0s", "imageMaximumGCAge": "0s"}
                },
                "maintenance": {
                    "autoUpdate": {"kubernetesVersion": true, "machineImageVersion": false},
                    "timeWindow": {"begin": "200000+0000", "end": "000000+0000"}
                },
                "networking": {"type": "calico", "nodes": "10.250.0.0/16", "pods": "10.96.0.0/13",
                               "services": "10.104.0.0/13", "ipFamilies": ["IPv4"]},
                "provider": {
                    "type": "aws",
                    "infrastructureConfig": {"apiVersion": "aws.provider.extensions.gardener.cloud/v1alpha1",
                                             "kind": "InfrastructureConfig", "networks": {"vpc": {"cidr": "10.250.0.0/16"}}},
                    "workers": [{
                        "name": "cpu-worker-0",
                        "machine": {"type": "m6i.large", "image": {"name": "gardenlinux", "version": "1592.1.0"},
                                    "architecture": "amd64"},
                        "minimum": 3, "maximum": 20, "maxSurge": 3, "maxUnavailable": 0,
                        "volume": {"type": "gp3", "size": "50Gi"},
                        "zones": ["eu-central-1a", "eu-central-1b"],
                        "cri": {"name": "containerd"},
                        "systemComponents": {"allow": true},
                        "updateStrategy": "AutoRollingUpdate"
                    }],
                    "workersSettings": {"sshAccess": {"enabled": false}}
                },
                "purpose": "production",
                "region": "eu-central-1",
                "schedulerName": "default-scheduler",
                "seedName": "aws-eu1",
                "seedSelector": {"matchLabels": {"seed.gardener.cloud/region": "eu-central-1"}},
                "tolerations": [{"key": "ksa-assured-workload"}]
            },
            "status": {
                "advertisedAddresses": [{"name": "external", "url": "https://api.rt-abc.kyma.example.com"}],
                "conditions": [{"type": "APIServerAvailable", "status": "True",
                                "lastTransitionTime": "2026-08-01T10:00:00Z",
                                "lastUpdateTime": "2026-08-01T10:00:00Z",
                                "reason": "HealthzRequestSucceeded", "message": "API server /healthz endpoint responded with success status code."}],
                "gardener": {"id": "abc", "name": "gardenlet-1", "version": "v1.149.0"},
                "hibernated": false,
                "lastErrors": [{"description": "quota", "codes": ["ERR_INFRA_QUOTA_EXCEEDED"], "taskID": "t1",
                                "lastUpdateTime": "2026-08-01T10:00:00Z"}],
                "lastOperation": {"type": "Create", "state": "Succeeded", "progress": 100,
                                  "description": "Shoot cluster has been successfully reconciled.",
                                  "lastUpdateTime": "2026-08-01T10:00:00Z"},
                "observedGeneration": 3,
                "seedName": "aws-eu1",
                "technicalID": "shoot--kyma--rt-abc",
                "uid": "6b0e"
            }
        });
        round_trip("live shoot", &shoot);
    }
}

#[cfg(test)]
mod reserved_network_tests {
    use super::reserved_network_overlap;

    #[test]
    fn the_reserved_range_is_240_to_244_and_any_overlap_names_the_first_reserved_8() {
        let overlap = |cidr: &str| {
            reserved_network_overlap(cidr.parse().expect("cidr")).map(|r| r.to_string())
        };
        for clear in [
            "239.255.255.0/24",
            "245.0.0.0/8",
            "10.250.0.0/16",
            "224.0.0.0/5",
            "236.0.0.0/6",
        ] {
            assert_eq!(overlap(clear), None, "{clear}");
        }
        for (cidr, reserved) in [
            ("240.0.0.0/8", "240.0.0.0/8"),
            ("244.255.255.255/32", "244.0.0.0/8"),
            ("242.1.0.0/16", "242.0.0.0/8"),
            ("240.0.0.0/4", "240.0.0.0/8"),
            ("0.0.0.0/0", "240.0.0.0/8"),
            ("240.0.0.0/5", "240.0.0.0/8"),
        ] {
            assert_eq!(overlap(cidr).as_deref(), Some(reserved), "{cidr}");
        }
    }
}
