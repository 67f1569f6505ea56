//! `spec.provider` of a Shoot and the Gardener worker pool shape, which the Runtime embeds
//! unchanged in `spec.shoot.provider.workers` and `additionalWorkers`.

use super::common::{Quantity, RawExtension, int_or_string};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `spec.provider` of a Shoot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Provider {
    /// Provider type (`aws`, `azure`, `gcp`, `openstack`, `alicloud`); immutable.
    #[serde(rename = "type")]
    pub type_: String,
    /// Provider-specific control plane configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane_config: Option<RawExtension>,
    /// Provider-specific infrastructure configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infrastructure_config: Option<RawExtension>,
    /// Worker pools; server-side apply merges them by `name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<Vec<Worker>>,
    /// Settings for all worker pools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers_settings: Option<WorkersSettings>,
}

/// `spec.provider.workersSettings`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct WorkersSettings {
    /// SSH access to the worker nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssh_access: Option<SshAccess>,
}

/// `spec.provider.workersSettings.sshAccess`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct SshAccess {
    /// Whether SSH access to the nodes is possible; Gardener defaults it to true.
    pub enabled: bool,
}

/// One Gardener worker pool (`core.gardener.cloud/v1beta1` `Worker`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Worker {
    /// Annotations for every Node of this pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// A certificate bundle installed onto every machine of this pool.
    #[serde(rename = "caBundle", skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// Cluster autoscaler settings for this pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_autoscaler: Option<ClusterAutoscalerOptions>,
    /// Control plane settings; only for self-hosted shoots, which this project does not create.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<WorkerControlPlane>,
    /// Container runtime settings; Gardener defaults the name to `containerd`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cri: Option<Cri>,
    /// Additional data volumes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_volumes: Option<Vec<DataVolume>>,
    /// Name of the data volume that holds the kubelet directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet_data_volume_name: Option<String>,
    /// Kubernetes settings of this pool (kubelet configuration, version).
    #[serde(skip_serializing_if = "Option::is_none")]
    // Boxed: inline, the kubelet settings are half of the Worker's 1,872 bytes; boxed, every
    // Runtime in the controller's cache is about 970 bytes smaller per worker pool.
    pub kubernetes: Option<Box<WorkerKubernetes>>,
    /// Labels for every Node of this pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Machine type, image and architecture.
    pub machine: Machine,
    /// Machine controller manager settings of this pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_controller_manager: Option<MachineControllerManagerSettings>,
    /// Maximum number of machines created above `maximum` during a rolling update
    /// (number or percentage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string")]
    pub max_surge: Option<IntOrString>,
    /// Maximum number of machines that may be unavailable during a rolling update
    /// (number or percentage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string")]
    pub max_unavailable: Option<IntOrString>,
    /// Maximum number of machines, spread over the zones.
    pub maximum: i32,
    /// Minimum number of machines, spread over the zones.
    pub minimum: i32,
    /// Name of the pool: a DNS label of at most 15 characters.
    pub name: String,
    /// Scale-up priority for the cluster autoscaler's priority expander.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Provider-specific worker configuration (for example the AWS `WorkerConfig`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_config: Option<RawExtension>,
    /// Kernel settings for every machine of this pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sysctls: Option<BTreeMap<String, String>>,
    /// Whether system components may run in this pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_components: Option<WorkerSystemComponents>,
    /// Taints for every Node of this pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<Taint>>,
    /// `AutoRollingUpdate` (Gardener's default), `AutoInPlaceUpdate` or `ManualInPlaceUpdate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<String>,
    /// Root volume of every machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume: Option<Volume>,
    /// Availability zones the machines are spread over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
}

/// `workers[].clusterAutoscaler`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAutoscalerOptions {
    /// How long the autoscaler waits for a node to be provisioned (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_node_provision_time: Option<String>,
    /// GPU utilisation (0.0 - 1.0) below which a node may be removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_down_gpu_utilization_threshold: Option<f64>,
    /// How long a node must be unneeded before scale-down (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_down_unneeded_time: Option<String>,
    /// How long an unready node must be unneeded before scale-down (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_down_unready_time: Option<String>,
    /// Utilisation (0.0 - 1.0) below which a node may be removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_down_utilization_threshold: Option<f64>,
}

/// `workers[].controlPlane`: ControlPlane specifies that the shoot cluster control plane
/// components should be running in this worker pool. This is only relevant for self-hosted
/// shoot clusters.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct WorkerControlPlane {
    /// Backup holds the object store configuration for the backups of shoot (currently only
    /// etcd). If it is not specified, then there won't be any backups taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<WorkerControlPlaneBackup>,
    /// Exposure holds the exposure configuration for the shoot (either `extension` or `dns` or
    /// omitted/empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exposure: Option<WorkerControlPlaneExposure>,
}

/// `workers[].controlPlane.backup`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerControlPlaneBackup {
    /// CredentialsRef is reference to a resource holding the credentials used for
    /// authentication with the object store service where the backups are stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_ref: Option<CredentialsReference>,
    /// Provider is a provider name. This field is immutable.
    pub provider: String,
    /// ProviderConfig is the configuration passed to BackupBucket resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_config: Option<RawExtension>,
    /// Region is a region name. This field is immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// A Kubernetes `ObjectReference`, replaced as a whole by server-side apply.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct CredentialsReference {
    /// API version of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// If referring to a piece of an object instead of an entire object, the field access
    /// statement, such as `spec.containers{name}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_path: Option<String>,
    /// Kind of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Specific resourceVersion to which this reference is made, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// UID of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// `workers[].controlPlane.exposure`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct WorkerControlPlaneExposure {
    /// DNS specifies that this shoot will be exposed by DNS. Mutually exclusive with Extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsExposure>,
    /// Extension holds the type and provider config of the exposure extension. Mutually
    /// exclusive with DNS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension: Option<ExtensionExposure>,
}

/// `workers[].controlPlane.exposure.dns`: no settings (Gardener's type has none yet).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct DnsExposure {}

/// `workers[].controlPlane.exposure.extension`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionExposure {
    /// ProviderConfig holds the extension specific configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_config: Option<RawExtension>,
    /// Type defines the type of the extension exposure. Defaults to `.spec.provider.type`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// `workers[].cri`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cri {
    /// Additional container runtimes (for example gVisor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_runtimes: Option<Vec<ContainerRuntime>>,
    /// Name of the CRI; only `containerd` is allowed.
    pub name: String,
}

/// `workers[].cri.containerRuntimes[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRuntime {
    /// Configuration passed to the container runtime resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_config: Option<RawExtension>,
    /// Type of the container runtime, for example `gvisor`.
    #[serde(rename = "type")]
    pub type_: String,
}

/// `workers[].dataVolumes[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct DataVolume {
    /// Whether the volume is encrypted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Name of the volume, unique in the pool.
    pub name: String,
    /// Size, for example `50Gi`.
    pub size: String,
    /// Volume type of the cloud profile.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// `workers[].volume`: the root disk.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct Volume {
    /// Whether the volume is encrypted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Name of the volume.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Size, for example `50Gi` (must match `^(\d)+Gi$`).
    pub size: String,
    /// Volume type of the cloud profile, for example `gp3`.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// `workers[].kubernetes`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct WorkerKubernetes {
    /// Kubelet configuration of the pool; replaces the shoot-level kubelet configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfig>,
    /// Kubernetes version of the pool (at most the control plane version).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Gardener `KubeletConfig` (on a worker pool, and on the shoot).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfig {
    /// Maximum number of container log files per container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_log_max_files: Option<i32>,
    /// Maximum size of a container log file before it is rotated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_log_max_size: Option<Quantity>,
    /// Whether CPU CFS quota enforcement is on.
    #[serde(rename = "cpuCFSQuota", skip_serializing_if = "Option::is_none")]
    pub cpu_cfs_quota: Option<bool>,
    /// CPU manager policy (`none` or `static`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_manager_policy: Option<String>,
    /// Hard eviction thresholds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_hard: Option<KubeletConfigEviction>,
    /// Maximum pod termination grace period when soft eviction thresholds are met (seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Minimum amount reclaimed when an eviction is performed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_minimum_reclaim: Option<KubeletConfigEvictionMinimumReclaim>,
    /// How long the kubelet waits before leaving an eviction pressure condition (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_pressure_transition_period: Option<String>,
    /// Soft eviction thresholds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_soft: Option<KubeletConfigEviction>,
    /// Grace periods of the soft eviction thresholds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_soft_grace_period: Option<KubeletConfigEvictionSoftGracePeriod>,
    /// Whether the kubelet refuses to start with swap on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_swap_on: Option<bool>,
    /// Kubelet feature gates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<BTreeMap<String, bool>>,
    /// Disk usage percentage above which image garbage collection always runs.
    #[serde(
        rename = "imageGCHighThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage percentage below which image garbage collection never runs.
    #[serde(
        rename = "imageGCLowThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Maximum age an unused image is kept (duration).
    #[serde(rename = "imageMaximumGCAge", skip_serializing_if = "Option::is_none")]
    pub image_maximum_gc_age: Option<String>,
    /// Minimum age of an unused image before it is garbage collected (duration).
    #[serde(rename = "imageMinimumGCAge", skip_serializing_if = "Option::is_none")]
    pub image_minimum_gc_age: Option<String>,
    /// Resources reserved for Kubernetes components.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_reserved: Option<KubeletConfigReserved>,
    /// Maximum number of image pulls in parallel; positive, not with `serializeImagePulls`.
    /// Unset means no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_parallel_image_pulls: Option<i32>,
    /// Maximum number of pods per node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i32>,
    /// Swap behaviour.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_swap: Option<MemorySwapConfiguration>,
    /// Maximum number of process IDs per pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_pids_limit: Option<i64>,
    /// Whether the kubelet errors if kernel flags differ from its defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protect_kernel_defaults: Option<bool>,
    /// Maximum size of a burst of image pulls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry_burst: Option<i32>,
    /// Image pull rate limit (queries per second).
    #[serde(rename = "registryPullQPS", skip_serializing_if = "Option::is_none")]
    pub registry_pull_qps: Option<i32>,
    /// Whether `RuntimeDefault` is the default seccomp profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_default: Option<bool>,
    /// Whether images are pulled one at a time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serialize_image_pulls: Option<bool>,
    /// Idle timeout of streaming connections (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streaming_connection_idle_timeout: Option<String>,
    /// Resources reserved for OS system daemons.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_reserved: Option<KubeletConfigReserved>,
}

/// Eviction thresholds (`evictionHard`, `evictionSoft`), for example `memoryAvailable: 100Mi`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct KubeletConfigEviction {
    /// Threshold for `imagefs.available`.
    #[serde(rename = "imageFSAvailable", skip_serializing_if = "Option::is_none")]
    pub image_fs_available: Option<String>,
    /// Threshold for `imagefs.inodesFree`.
    #[serde(rename = "imageFSInodesFree", skip_serializing_if = "Option::is_none")]
    pub image_fs_inodes_free: Option<String>,
    /// Threshold for `memory.available`.
    #[serde(rename = "memoryAvailable", skip_serializing_if = "Option::is_none")]
    pub memory_available: Option<String>,
    /// Threshold for `nodefs.available`.
    #[serde(rename = "nodeFSAvailable", skip_serializing_if = "Option::is_none")]
    pub node_fs_available: Option<String>,
    /// Threshold for `nodefs.inodesFree`.
    #[serde(rename = "nodeFSInodesFree", skip_serializing_if = "Option::is_none")]
    pub node_fs_inodes_free: Option<String>,
}

/// `evictionMinimumReclaim`: quantities reclaimed per signal.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct KubeletConfigEvictionMinimumReclaim {
    /// Minimum reclaim for `imagefs.available`.
    #[serde(rename = "imageFSAvailable", skip_serializing_if = "Option::is_none")]
    pub image_fs_available: Option<Quantity>,
    /// Minimum reclaim for `imagefs.inodesFree`.
    #[serde(rename = "imageFSInodesFree", skip_serializing_if = "Option::is_none")]
    pub image_fs_inodes_free: Option<Quantity>,
    /// Minimum reclaim for `memory.available`.
    #[serde(rename = "memoryAvailable", skip_serializing_if = "Option::is_none")]
    pub memory_available: Option<Quantity>,
    /// Minimum reclaim for `nodefs.available`.
    #[serde(rename = "nodeFSAvailable", skip_serializing_if = "Option::is_none")]
    pub node_fs_available: Option<Quantity>,
    /// Minimum reclaim for `nodefs.inodesFree`.
    #[serde(rename = "nodeFSInodesFree", skip_serializing_if = "Option::is_none")]
    pub node_fs_inodes_free: Option<Quantity>,
}

/// `evictionSoftGracePeriod`: durations per signal.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct KubeletConfigEvictionSoftGracePeriod {
    /// Grace period for `imagefs.available`.
    #[serde(rename = "imageFSAvailable", skip_serializing_if = "Option::is_none")]
    pub image_fs_available: Option<String>,
    /// Grace period for `imagefs.inodesFree`.
    #[serde(rename = "imageFSInodesFree", skip_serializing_if = "Option::is_none")]
    pub image_fs_inodes_free: Option<String>,
    /// Grace period for `memory.available`.
    #[serde(rename = "memoryAvailable", skip_serializing_if = "Option::is_none")]
    pub memory_available: Option<String>,
    /// Grace period for `nodefs.available`.
    #[serde(rename = "nodeFSAvailable", skip_serializing_if = "Option::is_none")]
    pub node_fs_available: Option<String>,
    /// Grace period for `nodefs.inodesFree`.
    #[serde(rename = "nodeFSInodesFree", skip_serializing_if = "Option::is_none")]
    pub node_fs_inodes_free: Option<String>,
}

/// `kubeReserved` / `systemReserved`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfigReserved {
    /// Reserved CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    /// Reserved ephemeral storage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<Quantity>,
    /// Reserved memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
    /// Reserved process IDs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<Quantity>,
}

/// `kubelet.memorySwap`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemorySwapConfiguration {
    /// `LimitedSwap` or `UnlimitedSwap`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_behavior: Option<String>,
}

/// `workers[].machine`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct Machine {
    /// CPU architecture (`amd64` or `arm64`); Gardener infers it from the machine type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// Machine image; Gardener picks one from the cloud profile when it is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ShootMachineImage>,
    /// Machine type of the cloud profile, for example `m6i.large`.
    #[serde(rename = "type")]
    pub type_: String,
}

/// `workers[].machine.image`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShootMachineImage {
    /// Image name, for example `gardenlinux`.
    pub name: String,
    /// Provider-specific image configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_config: Option<RawExtension>,
    /// Image version, for example `1592.1.0`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// `workers[].machineControllerManager`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineControllerManagerSettings {
    /// Maximum number of failed machines preserved automatically for analysis.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_preserve_failed_machine_max: Option<i32>,
    /// Whether the health timeout is ignored for machines in `Failed` state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_health_timeout: Option<bool>,
    /// Timeout of an in-place update (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_place_update_timeout: Option<String>,
    /// Timeout of a machine creation (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_creation_timeout: Option<String>,
    /// Timeout of a machine drain (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_drain_timeout: Option<String>,
    /// Timeout after which an unhealthy machine is replaced (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_health_timeout: Option<String>,
    /// How long a failed machine is preserved (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_preserve_timeout: Option<String>,
    /// Maximum number of eviction retries during a drain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_evict_retries: Option<i32>,
    /// Node conditions that mark a machine unhealthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_conditions: Option<Vec<String>>,
}

/// `workers[].systemComponents`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct WorkerSystemComponents {
    /// Whether system components may be scheduled onto this pool.
    pub allow: bool,
}
