//! `spec.kubernetes` of a Shoot: version and control plane component settings, including the
//! OIDC configuration that the Runtime embeds.

use super::common::Quantity;
use super::worker::KubeletConfig;
use k8s_openapi::api::core::v1::ObjectReference;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::common::RawExtension;

/// `spec.kubernetes`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Kubernetes {
    /// Cluster autoscaler settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_autoscaler: Option<ClusterAutoscaler>,
    /// kube-apiserver settings.
    #[serde(rename = "kubeAPIServer", skip_serializing_if = "Option::is_none")]
    pub kube_api_server: Option<KubeApiServerConfig>,
    /// kube-controller-manager settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_controller_manager: Option<KubeControllerManagerConfig>,
    /// kube-proxy settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_proxy: Option<KubeProxyConfig>,
    /// kube-scheduler settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_scheduler: Option<KubeSchedulerConfig>,
    /// Shoot-wide kubelet settings (a worker pool's own kubelet settings replace them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfig>,
    /// Kubernetes version `X.Y.Z`; Gardener expands `X` and `X.Y`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Vertical pod autoscaler settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vertical_pod_autoscaler: Option<VerticalPodAutoscaler>,
}

/// `spec.kubernetes.kubeAPIServer`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KubeApiServerConfig {
    /// Admission plugins and their configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission_plugins: Option<Vec<AdmissionPlugin>>,
    /// Audiences of the service account token issuer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_audiences: Option<Vec<String>>,
    /// Audit configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_config: Option<AuditConfig>,
    /// Autoscaling of the kube-apiserver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<ControlPlaneAutoscaling>,
    /// Toleration seconds for `node.kubernetes.io/not-ready`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_not_ready_toleration_seconds: Option<i64>,
    /// Toleration seconds for `node.kubernetes.io/unreachable`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_unreachable_toleration_seconds: Option<i64>,
    /// Whether anonymous requests are allowed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_anonymous_authentication: Option<bool>,
    /// Encryption of resources at rest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encryption_config: Option<EncryptionConfig>,
    /// How long events are kept (duration, default 1h).
    #[serde(rename = "eventTTL", skip_serializing_if = "Option::is_none")]
    pub event_ttl: Option<String>,
    /// kube-apiserver feature gates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<BTreeMap<String, bool>>,
    /// Log verbosity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logging: Option<ApiServerLogging>,
    /// Legacy OIDC settings; removed from Gardener's API in v1.142, replaced by
    /// `structuredAuthentication`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oidc_config: Option<OidcConfig>,
    /// In-flight request limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<ApiServerRequests>,
    /// API groups/versions switched on or off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_config: Option<BTreeMap<String, bool>>,
    /// Service account token settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_config: Option<ServiceAccountConfig>,
    /// Structured authentication: a ConfigMap in the project namespace with an
    /// `AuthenticationConfiguration` under key `config.yaml`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_authentication: Option<StructuredAuthentication>,
    /// Structured authorization configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_authorization: Option<StructuredAuthorization>,
    /// Watch cache sizes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watch_cache_sizes: Option<WatchCacheSizes>,
}

/// Gardener `OIDCConfig`: OIDC settings of a kube-apiserver, as the Runtime's `oidcConfig`
/// and `additionalOidcConfig` entries carry them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct OidcConfig {
    /// If set, the OpenID server's certificate is verified against this CA bundle (PEM).
    #[serde(rename = "caBundle", skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// Client configuration for kubeconfig generation. Deprecated by Gardener, never used.
    #[serde(
        rename = "clientAuthentication",
        skip_serializing_if = "Option::is_none"
    )]
    pub client_authentication: Option<OpenIdConnectClientAuthentication>,
    /// The client ID of the OpenID Connect client.
    #[serde(rename = "clientID", skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Name of the claim holding the user's groups.
    #[serde(rename = "groupsClaim", skip_serializing_if = "Option::is_none")]
    pub groups_claim: Option<String>,
    /// Prefix for every group.
    #[serde(rename = "groupsPrefix", skip_serializing_if = "Option::is_none")]
    pub groups_prefix: Option<String>,
    /// URL of the OpenID issuer (HTTPS only).
    #[serde(rename = "issuerURL", skip_serializing_if = "Option::is_none")]
    pub issuer_url: Option<String>,
    /// `key=value` pairs that must be present in the ID token.
    #[serde(rename = "requiredClaims", skip_serializing_if = "Option::is_none")]
    pub required_claims: Option<BTreeMap<String, String>>,
    /// Allowed JOSE asymmetric signing algorithms, for example `RS256`.
    #[serde(rename = "signingAlgs", skip_serializing_if = "Option::is_none")]
    pub signing_algs: Option<Vec<String>>,
    /// Claim used as the user name (default `sub`).
    #[serde(rename = "usernameClaim", skip_serializing_if = "Option::is_none")]
    pub username_claim: Option<String>,
    /// Prefix for every user name; `-` disables prefixing.
    #[serde(rename = "usernamePrefix", skip_serializing_if = "Option::is_none")]
    pub username_prefix: Option<String>,
}

/// `oidcConfig.clientAuthentication`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenIdConnectClientAuthentication {
    /// Extra configuration added to the kubeconfig's auth-provider.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_config: Option<BTreeMap<String, String>>,
    /// The client secret of the OpenID Connect client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// `kubeAPIServer.admissionPlugins[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionPlugin {
    /// Plugin configuration; free-form, defined by each plugin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<RawExtension>,
    /// Whether the plugin is switched off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    /// Secret with a kubeconfig the plugin uses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_name: Option<String>,
    /// Plugin name.
    pub name: String,
}

/// `kubeAPIServer.auditConfig`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AuditConfig {
    /// Audit policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_policy: Option<AuditPolicy>,
}

/// `kubeAPIServer.auditConfig.auditPolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AuditPolicy {
    /// ConfigMap (in the project namespace) whose key `policy` holds the audit policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<ObjectReference>,
}

/// `kubeAPIServer.autoscaling`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneAutoscaling {
    /// Minimum resources per resource name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_allowed: Option<BTreeMap<String, Quantity>>,
}

/// `kubeAPIServer.encryptionConfig`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct EncryptionConfig {
    /// Encryption provider.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<EncryptionProvider>,
    /// Resources encrypted in addition to Secrets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
}

/// `kubeAPIServer.encryptionConfig.provider`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct EncryptionProvider {
    /// `aescbc` (default), `aesgcm` or `secretbox`.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// `kubeAPIServer.logging`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ApiServerLogging {
    /// Verbosity of HTTP access logs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_access_verbosity: Option<i32>,
    /// Log verbosity (default 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<i32>,
}

/// `kubeAPIServer.requests`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ApiServerRequests {
    /// Maximum mutating requests in flight (default 200).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_mutating_inflight: Option<i32>,
    /// Maximum non-mutating requests in flight (default 400).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_non_mutating_inflight: Option<i32>,
}

/// `kubeAPIServer.serviceAccountConfig`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountConfig {
    /// Additional accepted token issuers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_issuers: Option<Vec<String>>,
    /// Whether projected token lifetimes are extended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extend_token_expiration: Option<bool>,
    /// Token issuer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// Maximum token lifetime (duration, 30d..90d).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_token_expiration: Option<String>,
}

/// `kubeAPIServer.structuredAuthentication`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StructuredAuthentication {
    /// Name of the ConfigMap in the project namespace.
    pub config_map_name: String,
}

/// `kubeAPIServer.structuredAuthorization`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StructuredAuthorization {
    /// Name of the ConfigMap with the `AuthorizationConfiguration`.
    pub config_map_name: String,
    /// Kubeconfigs of the webhook authorizers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubeconfigs: Option<Vec<AuthorizerKubeconfigReference>>,
}

/// `structuredAuthorization.kubeconfigs[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizerKubeconfigReference {
    /// Name of the authorizer.
    pub authorizer_name: String,
    /// Secret holding its kubeconfig.
    pub secret_name: String,
}

/// `kubeAPIServer.watchCacheSizes`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct WatchCacheSizes {
    /// Default watch cache size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<i32>,
    /// Per-resource watch cache sizes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<ResourceWatchCacheSize>>,
}

/// `watchCacheSizes.resources[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResourceWatchCacheSize {
    /// API group (empty for the core group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// Resource name.
    pub resource: String,
    /// Cache size.
    pub size: i32,
}

/// `spec.kubernetes.kubeControllerManager`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KubeControllerManagerConfig {
    /// Feature gates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<BTreeMap<String, bool>>,
    /// Horizontal pod autoscaler settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub horizontal_pod_autoscaler: Option<HorizontalPodAutoscalerConfig>,
    /// Mask size of the per-node pod CIDR.
    #[serde(rename = "nodeCIDRMaskSize", skip_serializing_if = "Option::is_none")]
    pub node_cidr_mask_size: Option<i32>,
    /// Grace period before an unresponsive node is marked unhealthy (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_monitor_grace_period: Option<String>,
}

/// `kubeControllerManager.horizontalPodAutoscaler`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HorizontalPodAutoscalerConfig {
    /// Period after pod start in which CPU samples may be skipped (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_initialization_period: Option<String>,
    /// Look-back window for downscale recommendations (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downscale_stabilization: Option<String>,
    /// Period after pod start in which readiness changes count as the first (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_readiness_delay: Option<String>,
    /// Minimum change of the metric ratio that triggers scaling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
}

/// `spec.kubernetes.kubeProxy`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KubeProxyConfig {
    /// Whether kube-proxy is deployed (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Feature gates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<BTreeMap<String, bool>>,
    /// `IPTables` (default), `NFTables` or `IPVS`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// `spec.kubernetes.kubeScheduler`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KubeSchedulerConfig {
    /// Feature gates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<BTreeMap<String, bool>>,
    /// `balanced` (default) or `bin-packing`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

/// `spec.kubernetes.clusterAutoscaler`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAutoscaler {
    /// `least-waste` (default), `most-pods`, `priority`, `random` or `least-nodes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expander: Option<String>,
    /// Taints ignored when scaling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignore_taints: Option<Vec<String>>,
    /// How long the autoscaler waits for a node to be provisioned (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_node_provision_time: Option<String>,
    /// Delay of scale-down after a scale-up (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_down_delay_after_add: Option<String>,
    /// How long a node must be unneeded before scale-down (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_down_unneeded_time: Option<String>,
    /// Utilisation below which a node may be removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_down_utilization_threshold: Option<f64>,
    /// How often the cluster is re-evaluated (duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scan_interval: Option<String>,
}

/// `spec.kubernetes.verticalPodAutoscaler`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct VerticalPodAutoscaler {
    /// Whether the VPA is deployed into the shoot.
    pub enabled: bool,
}
