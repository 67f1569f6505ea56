//! `CloudProfile` (`core.gardener.cloud/v1beta1`, cluster-scoped): what a provider offers
//! (Kubernetes versions, machine images and types, regions, volume types). Only the parts the
//! infrastructure manager and its test fixtures use are typed.

use super::common::{Quantity, RawExtension};
use super::shoot::SeedSelector;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// `spec` of a CloudProfile.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "core.gardener.cloud",
    version = "v1beta1",
    kind = "CloudProfile",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct CloudProfileSpec {
    /// CA bundle for the provider's endpoints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// Control plane settings of shoots using this profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<CloudProfileControlPlane>,
    /// Offered Kubernetes versions.
    pub kubernetes: KubernetesSettings,
    /// Limits for shoots using this profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Offered machine images.
    pub machine_images: Vec<MachineImage>,
    /// Offered machine types.
    pub machine_types: Vec<MachineType>,
    /// Provider-specific configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_config: Option<RawExtension>,
    /// Offered regions and zones.
    pub regions: Vec<Region>,
    /// Seeds eligible for shoots using this profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed_selector: Option<SeedSelector>,
    /// Provider type; must equal the shoot's `provider.type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Offered volume types.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_types: Option<Vec<VolumeType>>,
}

/// `spec.controlPlane`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CloudProfileControlPlane {
    /// Whether shoots may pin their control plane to zones (Go `omitempty`: absent is false).
    #[serde(default)]
    pub allow_zone_pinning: bool,
}

/// `spec.kubernetes`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct KubernetesSettings {
    /// Offered versions.
    pub versions: Vec<ExpirableVersion>,
}

/// A version with classification and expiry.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ExpirableVersion {
    /// `preview`, `supported`, `deprecated` or `expired`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classification: Option<String>,
    /// When the version expires (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration_date: Option<String>,
    /// The classifications the version goes through (Gardener's successor of `classification`
    /// and `expirationDate`, which count only without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Vec<LifecycleStage>>,
    /// The version, `X.Y.Z`.
    pub version: String,
}

/// `versions[].lifecycle[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleStage {
    /// `unavailable`, `preview`, `supported`, `deprecated` or `expired`.
    pub classification: String,
    /// From when (RFC 3339); unset: from the beginning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
}

/// `spec.limits`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Maximum sum of all worker pools' `minimum`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_nodes_total: Option<i32>,
}

/// `spec.machineImages[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MachineImage {
    /// Image name, for example `gardenlinux`.
    pub name: String,
    /// `patch`, `minor` or `major`: how far automatic updates may go.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<String>,
    /// Offered versions.
    pub versions: Vec<MachineImageVersion>,
}

/// `spec.machineImages[].versions[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MachineImageVersion {
    /// Supported CPU architectures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architectures: Option<Vec<String>>,
    /// `preview`, `supported`, `deprecated` or `expired`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classification: Option<String>,
    /// Supported container runtimes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cri: Option<Vec<CloudProfileCri>>,
    /// When the version expires (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration_date: Option<String>,
    /// See [`ExpirableVersion::lifecycle`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Vec<LifecycleStage>>,
    /// Constraint on the kubelet versions this image supports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet_version_constraint: Option<String>,
    /// The image version.
    pub version: String,
}

/// `versions[].cri[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CloudProfileCri {
    /// CRI name, `containerd`.
    pub name: String,
    /// Additional container runtimes this CRI offers (gVisor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_runtimes: Option<Vec<CloudProfileContainerRuntime>>,
}

/// `versions[].cri[].containerRuntimes[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct CloudProfileContainerRuntime {
    /// Runtime type, `gvisor`.
    #[serde(rename = "type")]
    pub type_: String,
}

/// `spec.machineTypes[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MachineType {
    /// CPU architecture.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// Number of CPUs.
    pub cpu: Quantity,
    /// Number of GPUs.
    pub gpu: Quantity,
    /// Memory size.
    pub memory: Quantity,
    /// Name, for example `m6i.large`.
    pub name: String,
    /// Local storage of the machine type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage: Option<MachineTypeStorage>,
    /// Whether new pools may use the type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usable: Option<bool>,
}

/// `machineTypes[].storage`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MachineTypeStorage {
    /// Storage class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Minimum volume size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_size: Option<Quantity>,
    /// Fixed storage size.
    #[serde(rename = "size", skip_serializing_if = "Option::is_none")]
    pub storage_size: Option<Quantity>,
    /// Storage type.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// `spec.regions[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Region {
    /// Access restrictions the region supports (for example `eu-access-only`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_restrictions: Option<Vec<AccessRestriction>>,
    /// Region name, for example `eu-central-1`.
    pub name: String,
    /// Availability zones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<AvailabilityZone>>,
}

/// `regions[].accessRestrictions[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct AccessRestriction {
    /// Name of the restriction.
    pub name: String,
}

/// `regions[].zones[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AvailabilityZone {
    /// Zone name, for example `eu-central-1a`.
    pub name: String,
    /// Machine types not available in this zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable_machine_types: Option<Vec<String>>,
    /// Volume types not available in this zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable_volume_types: Option<Vec<String>>,
}

/// `spec.volumeTypes[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct VolumeType {
    /// Volume class.
    pub class: String,
    /// Minimum size of volumes of this type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_size: Option<Quantity>,
    /// Name, for example `gp3`.
    pub name: String,
    /// Whether new volumes may use the type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usable: Option<bool>,
}
