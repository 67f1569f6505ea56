//! Our extension of `converter_config.json`: the top-level `kim` object with what each cloud
//! provider offers (regions and zones, machine types, volume types, machine images, Kubernetes
//! versions) and the defaults the mutating webhook fills in. Upstream KIM ignores the `kim`
//! key, so an extended file still loads there; a file without it loads here with no
//! restrictions.

use super::values::{
    KubernetesVersion, MemoryQuantity, VolumeSize, optional_cidr, parse_image_version,
};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

/// The cloud providers a Runtime can run on (`spec.shoot.provider.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Amazon Web Services, `aws`.
    Aws,
    /// Microsoft Azure, `azure`.
    Azure,
    /// Google Cloud, `gcp`.
    Gcp,
    /// SAP Converged Cloud, `openstack`.
    Openstack,
    /// Alibaba Cloud, `alicloud`.
    Alicloud,
    /// Google Distributed Cloud Hosted, `gdch`.
    Gdch,
}

impl ProviderKind {
    /// Every provider, in declaration order.
    pub const ALL: [ProviderKind; 6] = [
        Self::Aws,
        Self::Azure,
        Self::Gcp,
        Self::Openstack,
        Self::Alicloud,
        Self::Gdch,
    ];

    /// The provider type as written in the Runtime and the Shoot (`aws`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Aws => "aws",
            Self::Azure => "azure",
            Self::Gcp => "gcp",
            Self::Openstack => "openstack",
            Self::Alicloud => "alicloud",
            Self::Gdch => "gdch",
        }
    }

    /// The CloudProfile upstream KIM uses for this provider (`az` for azure,
    /// `converged-cloud-kyma` for openstack, `cat` for gdch), unless the configuration names
    /// another.
    pub fn default_cloud_profile_name(&self) -> &'static str {
        match self {
            Self::Aws => "aws",
            Self::Azure => "az",
            Self::Gcp => "gcp",
            Self::Openstack => "converged-cloud-kyma",
            Self::Alicloud => "alicloud",
            Self::Gdch => "cat",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A provider type that is not one of [`ProviderKind::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown provider type `{0}`; expected one of aws, azure, gcp, openstack, alicloud, gdch")]
pub struct UnknownProvider(pub String);

impl FromStr for ProviderKind {
    type Err = UnknownProvider;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownProvider(s.to_owned()))
    }
}

impl TryFrom<&str> for ProviderKind {
    type Error = UnknownProvider;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl TryFrom<&String> for ProviderKind {
    type Error = UnknownProvider;

    fn try_from(s: &String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// The `kim` object of `converter_config.json`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KimExtension {
    /// `kim.providers`: per provider what it offers and its defaults. A provider that is not
    /// listed is not restricted and has no defaults of its own.
    #[serde(default, deserialize_with = "providers_by_name")]
    pub providers: BTreeMap<ProviderKind, ProviderConfig>,
    /// `kim.seedNetworks`: the networks of the Gardener seeds that may host a Runtime's control
    /// plane; the nodes, pods and services networks of a new Runtime must stay clear of them.
    /// Absent: [`DEFAULT_SEED_NETWORKS`]; an empty list switches the rule off.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "optional_cidr_list"
    )]
    pub seed_networks: Option<Vec<IpNet>>,
}

/// The seed networks KEB keeps a Runtime's custom networks clear of (its `GardenerSeedCIDRs`,
/// `10.243.0.0/17` and `10.243.128.0/17` folded into `10.243.0.0/16`; `240.0.0.0/8` is one of
/// the ranges Gardener reserves, which every Runtime must avoid anyway). KEB's default networks
/// (nodes `10.250.0.0/16`, pods `10.96.0.0/13`, services `10.104.0.0/13`) are clear of them.
pub const DEFAULT_SEED_NETWORKS: [IpNet; 5] = [
    net4([10, 242, 0, 0], 16),
    net4([10, 243, 0, 0], 16),
    net4([10, 64, 0, 0], 11),
    net4([10, 254, 0, 0], 16),
    net4([192, 168, 123, 0], 24),
];

const fn net4(a: [u8; 4], prefix: u8) -> IpNet {
    IpNet::V4(ipnet::Ipv4Net::new_assert(
        std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]),
        prefix,
    ))
}

impl KimExtension {
    /// The seed networks in effect: `kim.seedNetworks`, else [`DEFAULT_SEED_NETWORKS`].
    pub fn seed_networks(&self) -> &[IpNet] {
        self.seed_networks
            .as_deref()
            .unwrap_or(&DEFAULT_SEED_NETWORKS)
    }
}

/// `deserialize_with` for an optional list of canonical CIDRs (IPv4 or IPv6).
fn optional_cidr_list<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<IpNet>>, D::Error> {
    use serde::de::Error;
    let Some(list) = Option::<Vec<String>>::deserialize(d)? else {
        return Ok(None);
    };
    list.iter()
        .map(|s| super::values::parse_cidr(s).map_err(D::Error::custom))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// `kim.providers` read as a struct, so that every error path names the provider
/// (serde_path_to_error cannot see enum map keys) and an unknown provider is an unknown key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProvidersByName {
    aws: Option<ProviderConfig>,
    azure: Option<ProviderConfig>,
    gcp: Option<ProviderConfig>,
    openstack: Option<ProviderConfig>,
    alicloud: Option<ProviderConfig>,
    gdch: Option<ProviderConfig>,
}

fn providers_by_name<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<ProviderKind, ProviderConfig>, D::Error> {
    let p = ProvidersByName::deserialize(d)?;
    Ok([
        (ProviderKind::Aws, p.aws),
        (ProviderKind::Azure, p.azure),
        (ProviderKind::Gcp, p.gcp),
        (ProviderKind::Openstack, p.openstack),
        (ProviderKind::Alicloud, p.alicloud),
        (ProviderKind::Gdch, p.gdch),
    ]
    .into_iter()
    .filter_map(|(kind, config)| config.map(|c| (kind, c)))
    .collect())
}

/// `kim.providers.<provider>`. Every list is optional; a list that is absent allows anything,
/// a list that is present allows only what it names.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderConfig {
    /// `cloudProfileName`: the Gardener CloudProfile of Shoots of this provider; default
    /// [`ProviderKind::default_cloud_profile_name`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_profile_name: Option<String>,
    /// `regions`: the regions Runtimes may use, each with its zones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regions: Option<Vec<RegionConfig>>,
    /// `machineTypes`: the machine types workers may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_types: Option<Vec<MachineTypeConfig>>,
    /// `volumeTypes`: the volume types worker volumes may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_types: Option<Vec<VolumeTypeConfig>>,
    /// `machineImages`: the machine images and versions workers may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_images: Option<Vec<MachineImageConfig>>,
    /// `kubernetes`: the Kubernetes versions Runtimes may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesVersionsConfig>,
    /// `workerScaling`: bounds for the `minimum` and `maximum` of every worker pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_scaling: Option<WorkerScalingBounds>,
    /// `defaults`: values the mutating webhook sets when the Runtime leaves them out.
    #[serde(default)]
    pub defaults: ProviderDefaults,
}

/// `regions[]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegionConfig {
    /// `name`, e.g. `eu-central-1`.
    pub name: String,
    /// `zones`, e.g. `eu-central-1a` (Azure: `1`, `2`, `3`).
    pub zones: Vec<String>,
}

/// CPU architecture of a machine type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// `amd64` (the default).
    #[default]
    Amd64,
    /// `arm64`.
    Arm64,
}

/// `machineTypes[]`: the fields a CloudProfile needs.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineTypeConfig {
    /// `name`, e.g. `m6i.large`.
    pub name: String,
    /// `cpu`: number of vCPUs.
    pub cpu: u32,
    /// `memory`, e.g. `8Gi`.
    pub memory: MemoryQuantity,
    /// `gpu`: number of GPUs (default 0).
    #[serde(default)]
    pub gpu: u32,
    /// `architecture`: `amd64` (default) or `arm64`.
    #[serde(default)]
    pub architecture: Architecture,
}

/// `volumeTypes[]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeTypeConfig {
    /// `name`, e.g. `gp3`.
    pub name: String,
    /// `class`: `standard` (default) or `premium` (Gardener quota classes).
    #[serde(default = "standard_class")]
    pub class: String,
    /// `minSize`: smallest allowed volume, e.g. `20Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size: Option<VolumeSize>,
    /// `maxSize`: largest allowed volume, e.g. `1024Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<VolumeSize>,
}

fn standard_class() -> String {
    "standard".to_owned()
}

/// How Gardener classifies a version in a CloudProfile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Classification {
    /// `preview`: only used when named exactly, never chosen for `1.34`-style versions.
    Preview,
    /// `supported` (the default).
    #[default]
    Supported,
    /// `deprecated`: still accepted, to be removed.
    Deprecated,
}

/// `machineImages[]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineImageConfig {
    /// `name`, e.g. `gardenlinux`.
    pub name: String,
    /// `versions`.
    pub versions: Vec<ImageVersion>,
}

/// `machineImages[].versions[]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageVersion {
    /// `version`, e.g. `1877.8.0`.
    pub version: String,
    /// `classification` (default `supported`).
    #[serde(default)]
    pub classification: Classification,
}

/// `kubernetes`: the versions of this provider's CloudProfile.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubernetesVersionsConfig {
    /// `versions`: full `X.Y.Z` versions; absent allows any version at or above the minimum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<Vec<KubernetesVersionEntry>>,
    /// `minimumVersion`: the oldest version a Runtime may ask for, e.g. `1.33`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_version: Option<KubernetesVersion>,
}

/// `kubernetes.versions[]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubernetesVersionEntry {
    /// `version`, e.g. `1.35.4`.
    pub version: KubernetesVersion,
    /// `classification` (default `supported`).
    #[serde(default)]
    pub classification: Classification,
}

/// `workerScaling`: a worker pool's `minimum` must be at least `minimum`, its `maximum` at most
/// `maximum`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkerScalingBounds {
    /// `minimum`: lower bound of a pool's `minimum`.
    pub minimum: u32,
    /// `maximum`: upper bound of a pool's `maximum`.
    pub maximum: u32,
}

/// `defaults`: filled in by the mutating webhook where the Runtime has no value; never
/// overrides a value the Runtime sets.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderDefaults {
    /// `machineImage`: overrides `converter.machineImage` for this provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_image: Option<MachineImageRef>,
    /// `volume`: the worker volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<VolumeDefaults>,
    /// `networking`: `spec.shoot.networking`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networking: Option<NetworkingDefaults>,
    /// `workers`: `minimum` and `maximum` of a worker pool that names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkerScalingDefaults>,
    /// `controlPlane`: `spec.shoot.controlPlane`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlaneDefaults>,
}

/// A machine image name and version.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineImageRef {
    /// `name`, e.g. `gardenlinux`.
    pub name: String,
    /// `version`, e.g. `1877.8.0`.
    pub version: String,
}

/// `defaults.volume`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeDefaults {
    /// `type`, e.g. `gp3`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `size`, e.g. `80Gi`.
    pub size: VolumeSize,
}

/// `defaults.networking`; each key is optional.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkingDefaults {
    /// `type`: the networking extension, e.g. `calico` or `cilium`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// `pods`, e.g. `10.96.0.0/13`.
    #[serde(
        default,
        deserialize_with = "optional_cidr",
        skip_serializing_if = "Option::is_none"
    )]
    pub pods: Option<IpNet>,
    /// `services`, e.g. `10.104.0.0/13`.
    #[serde(
        default,
        deserialize_with = "optional_cidr",
        skip_serializing_if = "Option::is_none"
    )]
    pub services: Option<IpNet>,
    /// `nodes`, e.g. `10.250.0.0/16`.
    #[serde(
        default,
        deserialize_with = "optional_cidr",
        skip_serializing_if = "Option::is_none"
    )]
    pub nodes: Option<IpNet>,
}

/// `defaults.workers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkerScalingDefaults {
    /// `minimum` nodes of the pool.
    pub minimum: u32,
    /// `maximum` nodes of the pool.
    pub maximum: u32,
}

/// `defaults.controlPlane`, in the Runtime's shape.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControlPlaneDefaults {
    /// `highAvailability`.
    pub high_availability: HighAvailabilityDefaults,
}

/// `defaults.controlPlane.highAvailability`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HighAvailabilityDefaults {
    /// `failureTolerance`.
    pub failure_tolerance: FailureToleranceDefaults,
}

/// `defaults.controlPlane.highAvailability.failureTolerance`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailureToleranceDefaults {
    /// `type`: `node` or `zone`.
    #[serde(rename = "type")]
    pub type_: FailureToleranceType,
}

/// Control-plane failure tolerance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureToleranceType {
    /// `node`: replicas on different nodes.
    Node,
    /// `zone`: replicas in different zones (needs a seed with 3 zones).
    Zone,
}

impl FailureToleranceType {
    /// `node` or `zone`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Node => "node",
            Self::Zone => "zone",
        }
    }
}

/// Why a Kubernetes version is not allowed for a provider.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KubernetesVersionRejection {
    /// The version does not parse.
    #[error("{0}")]
    Unparsable(String),
    /// The version is older than `minimumVersion`.
    #[error("{version} is older than the minimum version {minimum}")]
    BelowMinimum {
        /// The version asked for.
        version: KubernetesVersion,
        /// The configured minimum.
        minimum: KubernetesVersion,
    },
    /// No listed version matches (preview versions match only when named exactly).
    #[error("{version} is not offered; offered versions: {offered}")]
    NotOffered {
        /// The version asked for.
        version: KubernetesVersion,
        /// The offered versions, comma-separated.
        offered: String,
    },
}

impl ProviderConfig {
    /// The region called `name`, if the provider lists regions.
    pub fn region(&self, name: &str) -> Option<&RegionConfig> {
        self.regions.as_ref()?.iter().find(|r| r.name == name)
    }

    /// True when Runtimes may use region `name` (always, when no regions are listed).
    pub fn allows_region(&self, name: &str) -> bool {
        self.regions.is_none() || self.region(name).is_some()
    }

    /// True when `zone` is a zone of `region` (always, when no regions are listed).
    pub fn allows_zone(&self, region: &str, zone: &str) -> bool {
        match &self.regions {
            None => true,
            Some(_) => self
                .region(region)
                .is_some_and(|r| r.zones.iter().any(|z| z == zone)),
        }
    }

    /// The machine type called `name`, if the provider lists machine types.
    pub fn machine_type(&self, name: &str) -> Option<&MachineTypeConfig> {
        self.machine_types.as_ref()?.iter().find(|m| m.name == name)
    }

    /// True when workers may use machine type `name` (always, when none are listed).
    pub fn allows_machine_type(&self, name: &str) -> bool {
        self.machine_types.is_none() || self.machine_type(name).is_some()
    }

    /// The volume type called `name`, if the provider lists volume types.
    pub fn volume_type(&self, name: &str) -> Option<&VolumeTypeConfig> {
        self.volume_types.as_ref()?.iter().find(|v| v.name == name)
    }

    /// True when worker volumes may use type `name` (always, when none are listed).
    pub fn allows_volume_type(&self, name: &str) -> bool {
        self.volume_types.is_none() || self.volume_type(name).is_some()
    }

    /// True when workers may use image `name` in `version` (always, when no images are
    /// listed). Versions compare as semantic versions, so `1877.8` equals `1877.8.0`.
    pub fn allows_machine_image(&self, name: &str, version: &str) -> bool {
        let Some(images) = &self.machine_images else {
            return true;
        };
        let mut listed = images
            .iter()
            .filter(|i| i.name == name)
            .flat_map(|i| i.versions.iter());
        // The exact spelling is the common case; only a different spelling is parsed.
        if listed.clone().any(|v| v.version == version) {
            return true;
        }
        let Some(wanted) = parse_image_version(version) else {
            return false;
        };
        listed.any(|v| parse_image_version(&v.version).as_ref() == Some(&wanted))
    }

    /// Checks `version` (`1.35` or `1.35.4`) against `minimumVersion` and the listed versions.
    /// A `major.minor` version needs a listed non-preview version of that minor, as Gardener
    /// expands it to the newest such version.
    pub fn check_kubernetes_version(
        &self,
        version: &str,
    ) -> Result<KubernetesVersion, KubernetesVersionRejection> {
        let version: KubernetesVersion = version
            .parse()
            .map_err(KubernetesVersionRejection::Unparsable)?;
        let Some(k) = &self.kubernetes else {
            return Ok(version);
        };
        if let Some(minimum) = &k.minimum_version
            && !version.is_at_least(minimum)
        {
            return Err(KubernetesVersionRejection::BelowMinimum {
                version,
                minimum: *minimum,
            });
        }
        if let Some(versions) = &k.versions {
            let offered = versions.iter().any(|v| {
                version.is_satisfied_by(&v.version)
                    && (version.is_full() || v.classification != Classification::Preview)
            });
            if !offered {
                let list: Vec<String> = versions.iter().map(|v| v.version.to_string()).collect();
                return Err(KubernetesVersionRejection::NotOffered {
                    version,
                    offered: list.join(", "),
                });
            }
        }
        Ok(version)
    }
}

/// Context of the provider checks: what the upstream part of the file says.
pub(crate) struct GlobalDefaults<'a> {
    pub kubernetes_version: &'a KubernetesVersion,
    pub machine_image_name: &'a str,
    pub machine_image_version: &'a str,
    /// The seed networks in effect (`kim.seedNetworks` or the defaults).
    pub seed_networks: &'a [IpNet],
}

/// Checks one provider's section; `path` is `kim.providers.<provider>`.
pub(crate) fn check_provider(
    kind: ProviderKind,
    p: &ProviderConfig,
    global: &GlobalDefaults<'_>,
    c: &mut super::error::Checker,
) {
    let path = format!("kim.providers.{kind}");
    if let Some(name) = &p.cloud_profile_name
        && !super::values::is_dns_subdomain(name)
    {
        c.problem(
            format!("{path}.cloudProfileName"),
            format!("`{name}` is not a valid CloudProfile name (lower-case DNS subdomain)"),
        );
    }
    if let Some(regions) = &p.regions {
        check_regions(kind, regions, &format!("{path}.regions"), c);
    }
    if let Some(types) = &p.machine_types {
        let list = format!("{path}.machineTypes");
        non_empty_list(types, &list, "machine type", c);
        unique_names(types.iter().map(|t| t.name.as_str()), &list, c);
        for (i, t) in types.iter().enumerate() {
            if t.cpu == 0 {
                c.problem(format!("{list}[{i}].cpu"), "must be at least 1");
            }
        }
    }
    if let Some(types) = &p.volume_types {
        let list = format!("{path}.volumeTypes");
        non_empty_list(types, &list, "volume type", c);
        unique_names(types.iter().map(|t| t.name.as_str()), &list, c);
        for (i, t) in types.iter().enumerate() {
            if !matches!(t.class.as_str(), "standard" | "premium") {
                c.problem(
                    format!("{list}[{i}].class"),
                    format!("expected `standard` or `premium`, found `{}`", t.class),
                );
            }
            if let (Some(min), Some(max)) = (t.min_size, t.max_size)
                && min > max
            {
                c.problem(
                    format!("{list}[{i}].maxSize"),
                    format!("{max} is smaller than minSize {min}"),
                );
            }
        }
    }
    if let Some(images) = &p.machine_images {
        let list = format!("{path}.machineImages");
        non_empty_list(images, &list, "machine image", c);
        unique_names(images.iter().map(|i| i.name.as_str()), &list, c);
        for (i, image) in images.iter().enumerate() {
            let versions = format!("{list}[{i}].versions");
            non_empty_list(&image.versions, &versions, "version", c);
            for (j, v) in image.versions.iter().enumerate() {
                if parse_image_version(&v.version).is_none() {
                    c.problem(
                        format!("{versions}[{j}].version"),
                        format!(
                            "expected a machine image version such as `1877.8.0`, found `{}`",
                            v.version
                        ),
                    );
                }
            }
            unique_names(
                image.versions.iter().map(|v| v.version.as_str()),
                &versions,
                c,
            );
        }
    }
    if let Some(k) = &p.kubernetes {
        check_kubernetes(p, k, global, &format!("{path}.kubernetes"), c);
    }
    if let Some(bounds) = &p.worker_scaling
        && bounds.minimum > bounds.maximum
    {
        c.problem(
            format!("{path}.workerScaling.maximum"),
            format!(
                "{} is smaller than workerScaling.minimum {}",
                bounds.maximum, bounds.minimum
            ),
        );
    }
    check_defaults(kind, p, global, &format!("{path}.defaults"), c);
}

fn check_regions(
    kind: ProviderKind,
    regions: &[RegionConfig],
    path: &str,
    c: &mut super::error::Checker,
) {
    non_empty_list(regions, path, "region", c);
    unique_names(regions.iter().map(|r| r.name.as_str()), path, c);
    for (i, region) in regions.iter().enumerate() {
        c.non_empty(format!("{path}[{i}].name"), &region.name);
        let zones = format!("{path}[{i}].zones");
        if region.zones.is_empty() {
            c.problem(
                &zones,
                format!(
                    "must not be empty: list the zones of region `{}`",
                    region.name
                ),
            );
        }
        unique_names(region.zones.iter().map(String::as_str), &zones, c);
        for (j, zone) in region.zones.iter().enumerate() {
            c.non_empty(format!("{zones}[{j}]"), zone);
            // Upstream's Azure network layout numbers zones 1 to 8.
            if kind == ProviderKind::Azure && !matches!(zone.as_bytes(), [b'1'..=b'8']) {
                c.problem(
                    format!("{zones}[{j}]"),
                    format!("Azure zone names are the numbers 1 to 8, found `{zone}`"),
                );
            }
        }
    }
}

fn check_kubernetes(
    p: &ProviderConfig,
    k: &KubernetesVersionsConfig,
    global: &GlobalDefaults<'_>,
    path: &str,
    c: &mut super::error::Checker,
) {
    if let Some(versions) = &k.versions {
        let list = format!("{path}.versions");
        non_empty_list(versions, &list, "version", c);
        let mut seen = BTreeSet::new();
        for (i, v) in versions.iter().enumerate() {
            if !v.version.is_full() {
                c.problem(
                    format!("{list}[{i}].version"),
                    format!(
                        "expected a full version such as `{}.0`, found `{}`",
                        v.version, v.version
                    ),
                );
            } else if !seen.insert(v.version.sort_key()) {
                c.problem(
                    format!("{list}[{i}].version"),
                    format!("`{}` is listed twice", v.version),
                );
            }
        }
        if let Some(minimum) = &k.minimum_version
            && !versions.is_empty()
            && !versions.iter().any(|v| v.version.is_at_least(minimum))
        {
            c.problem(
                format!("{path}.minimumVersion"),
                format!("{minimum} is newer than every listed version"),
            );
        }
    }
    if let Err(why) = p.check_kubernetes_version(&global.kubernetes_version.to_string()) {
        c.problem(
            path,
            format!("does not allow converter.kubernetes.defaultVersion: {why}"),
        );
    }
}

fn check_defaults(
    kind: ProviderKind,
    p: &ProviderConfig,
    global: &GlobalDefaults<'_>,
    path: &str,
    c: &mut super::error::Checker,
) {
    let d = &p.defaults;
    match &d.machine_image {
        Some(image) => {
            let at = format!("{path}.machineImage");
            c.non_empty(format!("{at}.name"), &image.name);
            if parse_image_version(&image.version).is_none() {
                c.problem(
                    format!("{at}.version"),
                    format!(
                        "expected a machine image version such as `1877.8.0`, found `{}`",
                        image.version
                    ),
                );
            } else if !p.allows_machine_image(&image.name, &image.version) {
                c.problem(
                    at,
                    format!(
                        "{} {} is not listed in machineImages",
                        image.name, image.version
                    ),
                );
            }
        }
        None => {
            if parse_image_version(global.machine_image_version).is_some()
                && !p.allows_machine_image(global.machine_image_name, global.machine_image_version)
            {
                c.problem(
                    format!("{path}.machineImage"),
                    format!(
                        "missing, and converter.machineImage ({} {}) is not listed in \
                         kim.providers.{kind}.machineImages: set a default image this provider offers",
                        global.machine_image_name, global.machine_image_version
                    ),
                );
            }
        }
    }
    if let Some(volume) = &d.volume {
        let at = format!("{path}.volume");
        if c.non_empty(format!("{at}.type"), &volume.type_) {
            match (&p.volume_types, p.volume_type(&volume.type_)) {
                (Some(_), None) => c.problem(
                    format!("{at}.type"),
                    format!("`{}` is not listed in volumeTypes", volume.type_),
                ),
                (_, Some(t)) => {
                    if t.min_size.is_some_and(|min| volume.size < min)
                        || t.max_size.is_some_and(|max| volume.size > max)
                    {
                        c.problem(
                            format!("{at}.size"),
                            format!(
                                "{} is outside the bounds of volume type {} ({} to {})",
                                volume.size,
                                t.name,
                                t.min_size.map_or("0Gi".to_owned(), |s| s.to_string()),
                                t.max_size.map_or("unbounded".to_owned(), |s| s.to_string())
                            ),
                        );
                    }
                }
                (None, None) => {}
            }
        }
    }
    if let Some(net) = &d.networking {
        check_networking(
            kind,
            net,
            global.seed_networks,
            &format!("{path}.networking"),
            c,
        );
    }
    if let Some(workers) = &d.workers {
        let at = format!("{path}.workers");
        if workers.minimum > workers.maximum {
            c.problem(
                format!("{at}.maximum"),
                format!(
                    "{} is smaller than minimum {}",
                    workers.maximum, workers.minimum
                ),
            );
        }
        if let Some(bounds) = &p.worker_scaling {
            if workers.minimum < bounds.minimum {
                c.problem(
                    format!("{at}.minimum"),
                    format!(
                        "{} is below workerScaling.minimum {}",
                        workers.minimum, bounds.minimum
                    ),
                );
            }
            if workers.maximum > bounds.maximum {
                c.problem(
                    format!("{at}.maximum"),
                    format!(
                        "{} is above workerScaling.maximum {}",
                        workers.maximum, bounds.maximum
                    ),
                );
            }
        }
    }
}

fn check_networking(
    kind: ProviderKind,
    net: &NetworkingDefaults,
    seeds: &[IpNet],
    path: &str,
    c: &mut super::error::Checker,
) {
    if let Some(t) = &net.type_
        && !super::values::is_dns_label(t, 63)
    {
        c.problem(
            format!("{path}.type"),
            format!("expected a networking type such as `calico` or `cilium`, found `{t}`"),
        );
    }
    let named = [
        ("pods", net.pods),
        ("services", net.services),
        ("nodes", net.nodes),
    ];
    for (key, cidr) in named {
        let Some(cidr) = cidr else { continue };
        let IpNet::V4(v4) = cidr else {
            c.problem(
                format!("{path}.{key}"),
                format!("{cidr} is IPv6; default networks must be IPv4 CIDRs"),
            );
            continue;
        };
        if crate::gardener::shoot::reserved_network_overlap(v4).is_some() {
            c.problem(
                format!("{path}.{key}"),
                format!("{cidr} overlaps 240.0.0.0/8-244.0.0.0/8, which Gardener reserves"),
            );
        }
    }
    for (key, cidr) in named {
        if let Some(cidr) = cidr
            && let Some(seed) = seeds
                .iter()
                .find(|s| s.contains(&cidr) || cidr.contains(*s))
        {
            c.problem(
                format!("{path}.{key}"),
                format!("{cidr} overlaps the seed network {seed} (kim.seedNetworks); every Runtime that takes this default would be refused"),
            );
        }
    }
    for (i, (a_key, a)) in named.iter().enumerate() {
        for (b_key, b) in &named[i + 1..] {
            if let (Some(a), Some(b)) = (a, b)
                && (a.contains(b) || b.contains(a))
            {
                c.problem(
                    format!("{path}.{b_key}"),
                    format!("{b} overlaps {a_key} {a}"),
                );
            }
        }
    }
    // Upstream's AWS and Azure subnet algorithms need a nodes prefix of /16 to /24.
    if matches!(kind, ProviderKind::Aws | ProviderKind::Azure)
        && let Some(nodes) = net.nodes
        && !(16..=24).contains(&nodes.prefix_len())
    {
        c.problem(
            format!("{path}.nodes"),
            format!("{nodes}: the prefix length must be between 16 and 24 for {kind}"),
        );
    }
}

fn non_empty_list<T>(list: &[T], path: &str, what: &str, c: &mut super::error::Checker) {
    if list.is_empty() {
        c.problem(
            path,
            format!(
                "must not be empty: name at least one {what}, or leave the key out to allow any"
            ),
        );
    }
}

fn unique_names<'a>(
    names: impl Iterator<Item = &'a str>,
    path: &str,
    c: &mut super::error::Checker,
) {
    let mut seen = BTreeSet::new();
    for (i, name) in names.enumerate() {
        if !seen.insert(name) {
            c.problem(format!("{path}[{i}]"), format!("`{name}` is listed twice"));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn images(versions: &[&str]) -> ProviderConfig {
        serde_json::from_value(serde_json::json!({
            "machineImages": [
                {"name": "gardenlinux", "versions": versions.iter().map(|v| serde_json::json!({"version": v})).collect::<Vec<_>>()},
                {"name": "ubuntu", "versions": [{"version": "22.4.0"}]}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn machine_images_match_exactly_or_as_semantic_versions() {
        let p = images(&["1877.8.0", "1443.9"]);
        // As listed.
        assert!(p.allows_machine_image("gardenlinux", "1877.8.0"));
        assert!(p.allows_machine_image("gardenlinux", "1443.9"));
        // Another spelling of a listed version, either way round.
        assert!(p.allows_machine_image("gardenlinux", "1877.8"));
        assert!(p.allows_machine_image("gardenlinux", "1443.9.0"));
        // Not listed, listed for another image, unparsable.
        assert!(!p.allows_machine_image("gardenlinux", "1877.9.0"));
        assert!(!p.allows_machine_image("gardenlinux", "22.4.0"));
        assert!(!p.allows_machine_image("gardenlinux", "latest"));
        assert!(!p.allows_machine_image("suse", "1877.8.0"));
        // No images configured: anything goes.
        assert!(ProviderConfig::default().allows_machine_image("any", "1"));
    }
}
