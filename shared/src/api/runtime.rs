//! `Runtime`: what KEB asks for (one Kyma runtime, i.e. one Gardener shoot), and the progress
//! the infrastructure manager reports back.
//!
//! The shape follows upstream's CRD (`api/v1/runtime_types.go`) plus the fields KEB writes
//! today (`auditLogAccessEnabled`, `enableNvidiaOpenshell`, `acl`, `dualStack`, `vpcNetwork`,
//! `jwks`). Worker pools are Gardener's own [`Worker`] shape, embedded unchanged.

use crate::gardener::common::{Quantity, RawExtension, byte_string};
use crate::gardener::{ControlPlane, LastError, LastOperation, OidcConfig, Worker};
use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// RuntimeSpec defines the desired state of Runtime
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "infrastructuremanager.kyma-project.io",
    version = "v1",
    kind = "Runtime",
    namespaced,
    status = "RuntimeStatus",
    doc = "Runtime is the Schema for the runtimes API",
    printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.shoot.provider.type"}"#,
    printcolumn = r#"{"name":"Region","type":"string","jsonPath":".spec.shoot.region"}"#,
    printcolumn = r#"{"name":"STATE","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSpec {
    /// Whether the customer may read the runtime's audit logs (set by KEB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_log_access_enabled: Option<bool>,
    /// The registry caches of the runtime (written by the registry cache controller); the
    /// conversion configures them in the Shoot's `registry-cache` extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_registry_cache: Option<ImageRegistryCaches>,
    /// Administrators and network filtering.
    pub security: Security,
    /// The cluster to create.
    pub shoot: RuntimeShoot,
}

/// `spec.imageRegistryCache`: a list of caches. Objects stored before the CRD took the list
/// shape hold an object `{enabled: bool}` there, which the API server returns as an object
/// (pruned by the new schema to `{}`), so decoding accepts both and keeps which one it read
/// (see `docs/upstream-differences.md`).
#[derive(Clone, Debug, PartialEq)]
pub enum ImageRegistryCaches {
    /// Today's shape: one entry per `RegistryCacheConfig` of the runtime.
    List(Vec<ImageRegistryCache>),
    /// The 2025 shape (any object), read from a stored object; it names no cache.
    Legacy(LegacyImageRegistryCache),
}

impl ImageRegistryCaches {
    /// The caches; none for the 2025 shape.
    pub fn caches(&self) -> &[ImageRegistryCache] {
        match self {
            Self::List(caches) => caches,
            Self::Legacy(_) => &[],
        }
    }
}

impl Serialize for ImageRegistryCaches {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::List(caches) => caches.serialize(s),
            Self::Legacy(legacy) => legacy.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ImageRegistryCaches {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // Decided by the JSON type, so that an error inside a list entry keeps its own message.
        match serde_json::Value::deserialize(d)? {
            value @ serde_json::Value::Array(_) => serde_json::from_value(value)
                .map(Self::List)
                .map_err(D::Error::custom),
            value @ serde_json::Value::Object(_) => serde_json::from_value(value)
                .map(Self::Legacy)
                .map_err(D::Error::custom),
            other => Err(D::Error::custom(format!(
                "spec.imageRegistryCache: expected a list of caches, found {other}"
            ))),
        }
    }
}

impl JsonSchema for ImageRegistryCaches {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ImageRegistryCaches".into()
    }

    fn inline_schema() -> bool {
        true
    }

    // The CRD declares only today's list shape: new objects are written as lists.
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <Vec<ImageRegistryCache>>::json_schema(generator)
    }
}

/// The 2025 shape of `spec.imageRegistryCache`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct LegacyImageRegistryCache {
    /// Whether the `registry-cache` extension was wanted; absent once the API server pruned it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `spec.imageRegistryCache[]`: one `RegistryCacheConfig` of the runtime.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct ImageRegistryCache {
    /// The cache's configuration.
    pub config: RegistryCacheConfigSpec,
    /// Name of the `RegistryCacheConfig`.
    pub name: String,
    /// Namespace of the `RegistryCacheConfig`.
    pub namespace: String,
    /// UID of the `RegistryCacheConfig`; keys the garden Secret with its credentials.
    pub uid: String,
}

/// RegistryCacheConfigSpec defines the desired state of RegistryCacheConfig.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryCacheConfigSpec {
    /// GarbageCollection contains settings for the garbage collection of content from the cache.
    /// Defaults to enabled garbage collection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub garbage_collection: Option<RegistryCacheGarbageCollection>,
    /// HTTP contains settings for the HTTP server that hosts the registry cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<RegistryCacheHttp>,
    /// Proxy contains settings for a proxy used in the registry cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<RegistryCacheProxy>,
    /// RemoteURL is the remote registry URL, `<scheme><host>[:<port>]` with scheme `https://`
    /// or `http://`; the host corresponds to `upstream`.
    #[serde(rename = "remoteURL", default, skip_serializing_if = "Option::is_none")]
    pub remote_url: Option<String>,
    /// SecretReferenceName is the name of the reference for the Secret containing the upstream
    /// registry credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_reference_name: Option<String>,
    /// Upstream is the remote registry host to cache.
    pub upstream: String,
    /// Volume contains settings for the registry cache volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<RegistryCacheVolume>,
}

/// `config.garbageCollection`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct RegistryCacheGarbageCollection {
    /// TTL is the time to live of a blob in the cache.
    /// Set to 0s to disable the garbage collection.
    /// Defaults to 168h (7 days).
    #[schemars(extend("default" = "168h"))]
    pub ttl: String,
}

/// `config.http`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct RegistryCacheHttp {
    /// TLS indicates whether TLS is enabled for the HTTP server of the registry cache.
    /// Defaults to true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<bool>,
}

/// `config.proxy`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryCacheProxy {
    /// HTTPProxy field represents the proxy server for HTTP connections which is used by the
    /// registry cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_proxy: Option<String>,
    /// HTTPSProxy field represents the proxy server for HTTPS connections which is used by the
    /// registry cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub https_proxy: Option<String>,
}

/// `config.volume`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryCacheVolume {
    /// Size is the size of the registry cache volume.
    /// Defaults to 10Gi.
    /// This field is immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "10Gi"))]
    pub size: Option<Quantity>,
    /// StorageClassName is the name of the StorageClass used by the registry cache volume.
    /// This field is immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// `spec.shoot`: the cluster to create.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeShoot {
    /// ControlPlane holds information about the general settings for the control plane of a shoot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlane>,
    /// Enables the `shoot-nvidia-openshell` extension (set by KEB for allow-listed accounts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_nvidia_openshell: Option<bool>,
    /// Places the control plane in a seed of the same region (KEB's `colocateControlPlane`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforce_seed_location: Option<bool>,
    /// Kubernetes version and kube-apiserver settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<RuntimeKubernetes>,
    /// Licence type; copied to the Shoot annotation
    /// `infrastructuremanager.kyma-project.io/licence-type`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub licence_type: Option<String>,
    /// Name of the Shoot.
    pub name: String,
    /// Node, pod and service networks.
    pub networking: RuntimeNetworking,
    /// SAP platform region, for example `cf-eu11`.
    pub platform_region: String,
    /// Provider type and worker pools.
    pub provider: RuntimeProvider,
    /// Gardener shoot purpose (`evaluation`, `testing`, `development`, `production`,
    /// `infrastructure`).
    pub purpose: String,
    /// Provider region, for example `eu-central-1`.
    pub region: String,
    /// Name of the Gardener SecretBinding with the hyperscaler credentials.
    pub secret_binding_name: String,
}

/// `spec.shoot.kubernetes`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeKubernetes {
    /// kube-apiserver settings.
    #[serde(rename = "kubeAPIServer", skip_serializing_if = "Option::is_none")]
    pub kube_api_server: Option<RuntimeApiServer>,
    /// Kubernetes version; the KIM configuration's default applies when it is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// `spec.shoot.kubernetes.kubeAPIServer`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeApiServer {
    /// Allow-list of client networks for the kube-apiserver (`acl` extension).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acl: Option<Acl>,
    /// OIDC providers created as `OpenIDConnect` resources (`kyma-oidc-<i>`) in the cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub additional_oidc_config: Option<Vec<AdditionalOidcConfig>>,
    /// OIDCConfig contains configuration settings for the OIDC provider.
    /// Note: Descriptions were taken from the Kubernetes documentation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oidc_config: Option<OidcConfig>,
}

/// `kubeAPIServer.acl`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct Acl {
    /// Client CIDRs allowed to reach the kube-apiserver (operator and KCP addresses are added).
    #[serde(rename = "allowedCIDRs", skip_serializing_if = "Option::is_none")]
    pub allowed_cidrs: Option<Vec<String>>,
}

/// An `additionalOidcConfig` entry: Gardener's OIDC settings plus the issuer's keys.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct AdditionalOidcConfig {
    /// The Gardener OIDC settings (inlined).
    #[serde(flatten)]
    pub oidc: OidcConfig,
    /// The issuer's JSON Web Key Set, for issuers the cluster cannot reach (base64 in JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "byte_string")]
    pub jwks: Option<ByteString>,
}

/// `spec.shoot.provider`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeProvider {
    /// Worker pools appended after the main pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub additional_workers: Option<Vec<Worker>>,
    /// Accepted for compatibility; the infrastructure manager generates this configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane_config: Option<RawExtension>,
    /// Accepted for compatibility; the infrastructure manager generates this configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infrastructure_config: Option<RawExtension>,
    /// The hyperscaler.
    #[serde(rename = "type")]
    pub type_: ProviderType,
    /// The main worker pool (exactly one).
    pub workers: Vec<Worker>,
}

/// `spec.shoot.provider.type`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProviderType {
    /// Amazon Web Services.
    #[default]
    Aws,
    /// Microsoft Azure.
    Azure,
    /// Google Cloud Platform.
    Gcp,
    /// SAP Cloud Infrastructure (OpenStack, "SAP Converged Cloud").
    Openstack,
    /// Alibaba Cloud.
    Alicloud,
    /// Google Distributed Cloud Hosted.
    Gdch,
}

impl ProviderType {
    /// Every provider type, in upstream's enum order.
    pub const ALL: [ProviderType; 6] = [
        Self::Aws,
        Self::Azure,
        Self::Gcp,
        Self::Openstack,
        Self::Alicloud,
        Self::Gdch,
    ];

    /// The JSON value, for example `aws`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Aws => "aws",
            Self::Azure => "azure",
            Self::Gcp => "gcp",
            Self::Openstack => "openstack",
            Self::Alicloud => "alicloud",
            Self::Gdch => "gdch",
        }
    }
}

impl fmt::Display for ProviderType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `spec.shoot.networking`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeNetworking {
    /// IPv4 plus IPv6 networking, where the provider supports it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dual_stack: Option<bool>,
    /// Node CIDR, for example `10.250.0.0/16`; also the workers CIDR of the infrastructure.
    pub nodes: String,
    /// Pod CIDR.
    pub pods: String,
    /// Service CIDR.
    pub services: String,
    /// Networking extension, for example `calico`.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Existing VPC/VNet to create the cluster in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vpc_network: Option<String>,
}

/// `spec.security`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct Security {
    /// Users (names or e-mails) bound to `cluster-admin` in the cluster.
    pub administrators: Vec<String>,
    /// Network filtering.
    pub networking: NetworkingSecurity,
}

/// `spec.security.networking`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct NetworkingSecurity {
    /// The `shoot-networking-filter` settings.
    pub filter: Filter,
}

/// `spec.security.networking.filter`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct Filter {
    /// Egress filtering is a default filtering mode for `shoot-networking-fitler` extension.
    pub egress: Egress,
    /// Ingress filtering can be enabled for `shoot-networking-fitler` extension with
    /// the blackholing feature, see https://github.com/gardener/gardener-extension-shoot-networking-filter/blob/master/docs/usage/shoot-networking-filter.md#ingress-filtering
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingress: Option<Ingress>,
}

/// Ingress filtering can be enabled for `shoot-networking-fitler` extension with
/// the blackholing feature, see https://github.com/gardener/gardener-extension-shoot-networking-filter/blob/master/docs/usage/shoot-networking-filter.md#ingress-filtering
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct Ingress {
    /// It means that the blackholing filtering is enabled on the per shoot level.
    pub enabled: bool,
}

/// Egress filtering is a default filtering mode for `shoot-networking-fitler` extension.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct Egress {
    /// Whether egress filtering is on; the extension is disabled when false.
    pub enabled: bool,
}

/// RuntimeStatus defines the observed state of Runtime
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = state_required)]
pub struct RuntimeStatus {
    /// Name of the AuditLog custom resource chosen for this Runtime.
    #[serde(
        rename = "auditLogCR",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub audit_log_cr: Option<String>,
    /// List of status conditions, one per type (see [`crate::names::condition`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::conditions_schema")]
    pub conditions: Option<Vec<Condition>>,
    /// The Runtime generation the status describes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Set once the first provisioning completed; never reset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provisioning_completed: Option<bool>,
    /// The Shoot's last errors, as Gardener reports them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shoot_last_errors: Option<Vec<LastError>>,
    /// The Shoot's last operation, as Gardener reports it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shoot_last_operation: Option<LastOperation>,
    /// State signifies current state of Runtime
    // Read as `Pending` when missing: upstream's CRD made `state` required only in October
    // 2024, and a status stored before without it must not fail the watch of every Runtime.
    // The CRD still requires it, as upstream's does ([`state_required`]).
    #[serde(default)]
    pub state: RuntimeState,
}

/// The schema of `status` as upstream's CRD has it: `state` required and without a default,
/// although decoding reads a missing one as `Pending`.
fn state_required(schema: &mut schemars::Schema) {
    if let Some(state) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("state"))
        .and_then(serde_json::Value::as_object_mut)
    {
        state.remove("default");
    }
    if let Some(required) = schema
        .ensure_object()
        .entry("required")
        .or_insert_with(|| serde_json::json!([]))
        .as_array_mut()
        && !required.contains(&serde_json::json!("state"))
    {
        required.push(serde_json::json!("state"));
    }
}

/// `status.state` of a Runtime.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default, JsonSchema)]
pub enum RuntimeState {
    /// Provisioning, updating or waiting.
    #[default]
    Pending,
    /// The cluster exists and is configured.
    Ready,
    /// Deletion is in progress.
    Terminating,
    /// A step failed; see the conditions.
    Failed,
}

impl RuntimeState {
    /// The JSON value, for example `Ready`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => crate::names::STATE_PENDING,
            Self::Ready => crate::names::STATE_READY,
            Self::Terminating => crate::names::STATE_TERMINATING,
            Self::Failed => crate::names::STATE_FAILED,
        }
    }
}

impl fmt::Display for RuntimeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Runtime whose `kyma-project.io/runtime-id` label is not its name
/// ([`Runtime::own_runtime_id`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the label kyma-project.io/runtime-id ({label:?}) must equal the Runtime's name ({name:?}): the runtime ID names the GardenerCluster, the kubeconfig Secret and the Shoot's owner, and only names are unique"
)]
pub struct ForeignRuntimeId {
    /// The label's value (empty when missing).
    pub label: String,
    /// The Runtime's name (empty when missing).
    pub name: String,
}

impl RuntimeSpec {
    /// The registry caches of `spec.imageRegistryCache`; none when the field is absent or holds
    /// the 2025 object shape.
    pub fn image_registry_caches(&self) -> &[ImageRegistryCache] {
        self.image_registry_cache
            .as_ref()
            .map_or(&[], ImageRegistryCaches::caches)
    }
}

impl Runtime {
    /// The runtime ID, from the `kyma-project.io/runtime-id` label.
    pub fn runtime_id(&self) -> Option<&str> {
        super::gardener_cluster::label(&self.metadata, crate::names::LABEL_RUNTIME_ID)
    }

    /// The runtime ID when it is this Runtime's own: the `kyma-project.io/runtime-id` label
    /// when it equals the Runtime's name (ASCII case aside: KEB names a Runtime after its
    /// lower-cased runtime ID), the name when the label is missing. Names are unique in the
    /// namespace, labels are not: a Runtime carrying another's ID would otherwise be given that
    /// runtime's GardenerCluster, registry-cache Secrets and Shoot to delete.
    pub fn own_runtime_id(&self) -> Result<&str, ForeignRuntimeId> {
        let name = self.metadata.name.as_deref().unwrap_or_default();
        match self.runtime_id() {
            None if !name.is_empty() => Ok(name),
            Some(id) if !name.is_empty() && id.eq_ignore_ascii_case(name) => Ok(id),
            id => Err(ForeignRuntimeId {
                label: id.unwrap_or_default().to_owned(),
                name: name.to_owned(),
            }),
        }
    }

    /// The value of a label, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        super::gardener_cluster::label(&self.metadata, key)
    }

    /// The value of an annotation, if set.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    /// Whether the Runtime carries the annotation that suspends every patch of its Shoot
    /// (`"true"`; it wins over the force-patch annotation and over every other reason to patch).
    pub fn patch_suspended(&self) -> bool {
        self.annotation(crate::names::ANNOTATION_SUSPEND_PATCH_RECONCILIATION) == Some("true")
    }

    /// The status condition of the given type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status.as_ref()?.condition(type_)
    }
}

impl RuntimeStatus {
    /// The condition of the given type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn enum_names_match_their_json() {
        for provider in ProviderType::ALL {
            assert_eq!(
                serde_json::to_value(provider).expect("serializes"),
                json!(provider.as_str())
            );
        }
        for state in [
            RuntimeState::Pending,
            RuntimeState::Ready,
            RuntimeState::Terminating,
            RuntimeState::Failed,
        ] {
            assert_eq!(
                serde_json::to_value(state).expect("serializes"),
                json!(state.as_str())
            );
        }
    }

    #[test]
    fn runtime_id_comes_from_the_label() {
        let mut runtime = Runtime::new("rt", RuntimeSpec::default());
        assert_eq!(runtime.runtime_id(), None);
        runtime.metadata.labels = Some(
            [(
                crate::names::LABEL_RUNTIME_ID.to_string(),
                "abc".to_string(),
            )]
            .into(),
        );
        assert_eq!(runtime.runtime_id(), Some("abc"));
        assert_eq!(
            crate::names::kubeconfig_secret_name("abc"),
            "kubeconfig-abc"
        );
    }

    #[test]
    fn the_own_runtime_id_is_the_label_only_when_it_names_the_runtime() {
        let with = |name: Option<&str>, label: Option<&str>| {
            let mut rt = Runtime::new("x", RuntimeSpec::default());
            rt.metadata.name = name.map(str::to_owned);
            rt.metadata.labels =
                label.map(|l| [(crate::names::LABEL_RUNTIME_ID.to_owned(), l.to_owned())].into());
            rt.own_runtime_id().map(str::to_owned)
        };
        assert_eq!(with(Some("rt-1"), Some("rt-1")), Ok("rt-1".into()));
        assert_eq!(with(Some("rt-1"), Some("RT-1")), Ok("RT-1".into()));
        assert_eq!(with(Some("rt-1"), None), Ok("rt-1".into()));
        let foreign = with(Some("evil"), Some("victim")).expect_err("foreign");
        assert_eq!(
            (foreign.label.as_str(), foreign.name.as_str()),
            ("victim", "evil")
        );
        assert!(
            foreign
                .to_string()
                .contains("must equal the Runtime's name")
        );
        assert!(
            with(None, Some("victim")).is_err(),
            "generateName: no name to compare"
        );
        assert!(with(None, None).is_err());
        assert!(with(Some("rt-1"), Some("")).is_err());
    }

    #[test]
    fn keb_fields_round_trip() {
        let spec = json!({
            "auditLogAccessEnabled": true,
            "security": {"administrators": ["a@b.c"], "networking": {"filter": {"egress": {"enabled": true}}}},
            "shoot": {
                "name": "s", "purpose": "production", "platformRegion": "cf-eu11", "region": "eu-central-1",
                "secretBindingName": "sb", "enableNvidiaOpenshell": false,
                "kubernetes": {"kubeAPIServer": {
                    "acl": {"allowedCIDRs": ["1.2.3.4/32"]},
                    "additionalOidcConfig": [{"clientID": "c", "issuerURL": "https://i", "jwks": "e30=",
                                              "requiredClaims": {"k": "v"}}]
                }},
                "networking": {"nodes": "10.250.0.0/16", "pods": "10.96.0.0/13", "services": "10.104.0.0/13",
                               "type": "calico", "dualStack": true},
                "provider": {"type": "alicloud", "workers": [{"name": "cpu-worker-0", "machine": {"type": "ecs.g8i.large"},
                             "minimum": 1, "maximum": 3, "maxSurge": "25%", "maxUnavailable": 0,
                             "kubernetes": {"kubelet": {"maxPods": 110, "kubeReserved": {"cpu": "80m", "memory": 1}}}}]}
            }
        });
        let typed: RuntimeSpec = serde_json::from_value(spec.clone()).expect("deserializes");
        let oidc = &typed
            .shoot
            .kubernetes
            .as_ref()
            .and_then(|k| k.kube_api_server.as_ref())
            .expect("apiserver")
            .additional_oidc_config
            .as_ref()
            .expect("additional OIDC")[0];
        assert_eq!(oidc.jwks.as_ref().map(|j| j.0.as_slice()), Some(&b"{}"[..]));
        assert_eq!(oidc.oidc.client_id.as_deref(), Some("c"));
        pretty_assertions::assert_eq!(serde_json::to_value(&typed).expect("serializes"), spec);
    }

    #[test]
    fn image_registry_cache_reads_the_list_and_the_2025_object() {
        let read = |v: serde_json::Value| serde_json::from_value::<ImageRegistryCaches>(v);
        let list = json!([{"name": "n", "namespace": "ns", "uid": "u",
                           "config": {"upstream": "docker.io", "volume": {"size": "10Gi"}}}]);
        let caches = read(list.clone()).expect("list");
        assert_eq!(caches.caches()[0].config.upstream, "docker.io");
        assert_eq!(serde_json::to_value(&caches).expect("serializes"), list);

        // Stored in 2025, pruned by today's schema: any object is the 2025 shape.
        for legacy in [json!({"enabled": true}), json!({})] {
            let caches = read(legacy.clone()).expect("2025 shape");
            assert!(caches.caches().is_empty());
            assert!(matches!(caches, ImageRegistryCaches::Legacy(_)));
            assert_eq!(serde_json::to_value(&caches).expect("serializes"), legacy);
        }

        let err = read(json!("docker.io")).expect_err("a string");
        assert!(err.to_string().contains("spec.imageRegistryCache"), "{err}");
        // An error inside an entry keeps serde's own message.
        let err = read(json!([{"name": "n"}])).expect_err("an incomplete entry");
        assert!(err.to_string().contains("missing field"), "{err}");
    }
}
