//! The upstream part of `converter_config.json`: the `converter` and `cluster` objects exactly
//! as upstream KIM reads them (keys and required fields in `docs/configuration.md`).

use super::error::Checker;
use super::values::{
    KubernetesVersion, is_dns_label, is_dns_subdomain, is_url, parse_image_version,
};
use crate::duration::parse_go_duration;
use crate::gardener::shoot::Toleration;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Upstream's shortest and longest service account token lifetime; a configured
/// `maxTokenExpiration` outside them is raised or lowered to them.
pub const TOKEN_EXPIRATION_BOUNDS: (Duration, Duration) = (
    Duration::from_secs(30 * 24 * 3600),
    Duration::from_secs(90 * 24 * 3600),
);
/// Upstream's machine drain timeout when `provider.worker.defaultMachineDrainTimeout` is empty.
pub const DEFAULT_MACHINE_DRAIN_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// Upstream's eviction retries when `provider.worker.defaultMaxEvictRetries` is empty.
pub const DEFAULT_MAX_EVICT_RETRIES: i32 = 2;

/// The signing algorithms Gardener and the kube-apiserver accept for OIDC tokens.
pub const SIGNING_ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512",
];

/// `converter`: the defaults the Runtime -> Shoot conversion uses.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConverterConfig {
    /// `converter.kubernetes` (required).
    pub kubernetes: KubernetesConfig,
    /// `converter.dns`: all three keys empty or absent means Gardener-internal DNS.
    #[serde(default)]
    pub dns: DnsConfig,
    /// `converter.provider`: provider switches of the conversion.
    #[serde(default)]
    pub provider: ConverterProviderConfig,
    /// `converter.machineImage` (required): the image for workers that name none.
    pub machine_image: MachineImageDefaults,
    /// `converter.gardener` (required).
    pub gardener: GardenerConfig,
    /// `converter.auditLogging` (required).
    #[serde(rename = "auditLogging")]
    pub audit_logging: AuditLoggingConfig,
    /// `converter.maintenanceWindow`.
    #[serde(default)]
    pub maintenance_window: MaintenanceWindowConfig,
    /// `converter.tolerations`: per region, the seed taints the region's Shoots tolerate.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tolerations: BTreeMap<String, Vec<Toleration>>,
    /// `converter.networking`: what the landscape's infrastructure supports.
    #[serde(default)]
    pub networking: NetworkingConfig,
}

/// `converter.networking`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkingConfig {
    /// `enableDualStackIP`: the landscape supports dual-stack (IPv4 + IPv6) Shoots, so a
    /// Runtime's `spec.shoot.networking.dualStack` is honoured on AWS and GCP. Off: every Shoot
    /// is IPv4 only.
    #[serde(default, rename = "enableDualStackIP")]
    pub enable_dual_stack_ip: bool,
}

/// `converter.kubernetes`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(from = "RawKubernetesConfig")]
pub struct KubernetesConfig {
    /// `defaultVersion` (required): the version for Runtimes that name none, e.g. `1.35`.
    pub default_version: KubernetesVersion,
    /// `enableKubernetesVersionAutoUpdate`: Shoot `maintenance.autoUpdate.kubernetesVersion`.
    pub enable_kubernetes_version_auto_update: bool,
    /// `enableMachineImageVersionAutoUpdate`: Shoot `maintenance.autoUpdate.machineImageVersion`.
    pub enable_machine_image_version_auto_update: bool,
    /// `defaultOperatorOidc` (required): the OIDC provider of the shoot's kube-apiserver when
    /// the Runtime names none (KEB never names one).
    pub default_operator_oidc: OidcProvider,
    /// `kubeApiServer` (later upstream): the ConfigMap with the operator ACL CIDRs, the
    /// service account token lifetime, feature gates and runtime config.
    pub kube_api_server: Option<KubeApiServerConfig>,
    /// `kubelet` (later upstream): the kubelet feature gates of every Shoot.
    pub kubelet: Option<KubeletDefaults>,
}

impl KubernetesConfig {
    /// `kubeApiServer`, empty when absent.
    pub fn api_server(&self) -> KubeApiServerView<'_> {
        KubeApiServerView(self.kube_api_server.as_ref())
    }

    /// `kubelet.featureGates`, empty when absent.
    pub fn kubelet_feature_gates(&self) -> &BTreeMap<String, bool> {
        static EMPTY: BTreeMap<String, bool> = BTreeMap::new();
        self.kubelet.as_ref().map_or(&EMPTY, |k| &k.feature_gates)
    }
}

/// `converter.kubernetes.kubeApiServer` with upstream's defaults for what is absent.
#[derive(Clone, Copy, Debug)]
pub struct KubeApiServerView<'a>(Option<&'a KubeApiServerConfig>);

impl KubeApiServerView<'_> {
    /// `maxTokenExpiration` raised or lowered into [`TOKEN_EXPIRATION_BOUNDS`]; empty (or
    /// unparsable, which loading refuses) is the lower bound, `720h`.
    pub fn max_token_expiration(&self) -> Duration {
        let (low, high) = TOKEN_EXPIRATION_BOUNDS;
        self.0
            .and_then(|k| parse_go_duration(&k.max_token_expiration))
            .map_or(low, |d| d.clamp(low, high))
    }

    /// `featureGates`, empty when absent.
    pub fn feature_gates(&self) -> Option<&BTreeMap<String, bool>> {
        self.0.map(|k| &k.feature_gates).filter(|m| !m.is_empty())
    }

    /// `runtimeConfig`, empty when absent.
    pub fn runtime_config(&self) -> Option<&BTreeMap<String, bool>> {
        self.0.map(|k| &k.runtime_config).filter(|m| !m.is_empty())
    }
}

/// `converter.kubernetes.kubelet` (later upstream).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletDefaults {
    /// `featureGates`: Shoot `spec.kubernetes.kubelet.featureGates`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub feature_gates: BTreeMap<String, bool>,
}

/// The JSON layout of `converter.kubernetes`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawKubernetesConfig {
    default_version: KubernetesVersion,
    #[serde(default)]
    enable_kubernetes_version_auto_update: bool,
    #[serde(default)]
    enable_machine_image_version_auto_update: bool,
    default_operator_oidc: OidcProvider,
    kube_api_server: Option<KubeApiServerConfig>,
    kubelet: Option<KubeletDefaults>,
}

impl From<RawKubernetesConfig> for KubernetesConfig {
    fn from(raw: RawKubernetesConfig) -> Self {
        Self {
            default_version: raw.default_version,
            enable_kubernetes_version_auto_update: raw.enable_kubernetes_version_auto_update,
            enable_machine_image_version_auto_update: raw.enable_machine_image_version_auto_update,
            default_operator_oidc: raw.default_operator_oidc,
            kube_api_server: raw.kube_api_server,
            kubelet: raw.kubelet,
        }
    }
}

impl Serialize for KubernetesConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("KubernetesConfig", 6)?;
        st.serialize_field("defaultVersion", &self.default_version)?;
        st.serialize_field(
            "enableKubernetesVersionAutoUpdate",
            &self.enable_kubernetes_version_auto_update,
        )?;
        st.serialize_field(
            "enableMachineImageVersionAutoUpdate",
            &self.enable_machine_image_version_auto_update,
        )?;
        st.serialize_field("defaultOperatorOidc", &self.default_operator_oidc)?;
        if let Some(k) = &self.kube_api_server {
            st.serialize_field("kubeApiServer", k)?;
        }
        if let Some(k) = &self.kubelet {
            st.serialize_field("kubelet", k)?;
        }
        st.end()
    }
}

/// `converter.kubernetes.kubeApiServer` (later upstream).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeApiServerConfig {
    /// `acl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acl: Option<AclConfig>,
    /// `maxTokenExpiration`: a Go duration such as `720h` (Shoot
    /// `kubeAPIServer.serviceAccountConfig.maxTokenExpiration`, kept within 30 to 90 days).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub max_token_expiration: String,
    /// `featureGates`: Shoot `spec.kubernetes.kubeAPIServer.featureGates`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub feature_gates: BTreeMap<String, bool>,
    /// `runtimeConfig`: Shoot `spec.kubernetes.kubeAPIServer.runtimeConfig`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub runtime_config: BTreeMap<String, bool>,
}

/// `converter.kubernetes.kubeApiServer.acl` (later upstream).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AclConfig {
    /// `configMapName`: ConfigMap with the keys `acl-list.json` and `kcp-external-nat-ip.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,
}

/// An OIDC provider (`defaultOperatorOidc`, `defaultSharedIASTenant`); every key is required.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct OidcProvider {
    /// `clientID`.
    #[serde(rename = "clientID", alias = "ClientID")]
    pub client_id: String,
    /// `groupsClaim`.
    #[serde(rename = "groupsClaim", alias = "GroupsClaim")]
    pub groups_claim: String,
    /// `issuerURL`: an `https://` URL.
    #[serde(rename = "issuerURL", alias = "IssuerURL")]
    pub issuer_url: String,
    /// `signingAlgs`: e.g. `["RS256"]`.
    #[serde(rename = "signingAlgs", alias = "SigningAlgs")]
    pub signing_algs: Vec<String>,
    /// `usernameClaim`.
    #[serde(rename = "usernameClaim", alias = "UsernameClaim")]
    pub username_claim: String,
    /// `usernamePrefix`, e.g. `-` for none.
    #[serde(rename = "usernamePrefix", alias = "UsernamePrefix")]
    pub username_prefix: String,
}

/// `converter.dns`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsConfig {
    /// `secretName`: Secret with the DNS provider credentials in the Gardener project.
    #[serde(default)]
    pub secret_name: String,
    /// `domainPrefix`: Shoot domains are `<shoot name>.<domainPrefix>`.
    #[serde(default)]
    pub domain_prefix: String,
    /// `providerType`: e.g. `aws-route53`.
    #[serde(default)]
    pub provider_type: String,
}

impl DnsConfig {
    /// True when all three keys are empty: Gardener's own DNS is used and `spec.dns` stays
    /// unset (upstream PR #715).
    pub fn is_gardener_internal(&self) -> bool {
        self.secret_name.is_empty()
            && self.domain_prefix.is_empty()
            && self.provider_type.is_empty()
    }
}

/// `converter.provider`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConverterProviderConfig {
    /// `aws`.
    #[serde(default)]
    pub aws: AwsConverterConfig,
    /// `worker`: machine controller manager defaults of every worker pool.
    #[serde(default)]
    pub worker: WorkerDefaults,
    /// `gdch`: the cloud profile and parent network of GDCH Shoots.
    #[serde(default)]
    pub gdch: GdchConverterConfig,
}

/// `converter.provider.worker`; upstream keeps both values as strings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerDefaults {
    /// `defaultMaxEvictRetries`: a whole number such as `"2"`; empty means 2.
    #[serde(default)]
    pub default_max_evict_retries: String,
    /// `defaultMachineDrainTimeout`: a Go duration such as `"15m"`; empty means 15 minutes.
    #[serde(default)]
    pub default_machine_drain_timeout: String,
}

impl WorkerDefaults {
    /// The drain timeout of pools that set none (the default also for a value loading refuses).
    pub fn machine_drain_timeout(&self) -> Duration {
        parse_go_duration(&self.default_machine_drain_timeout)
            .unwrap_or(DEFAULT_MACHINE_DRAIN_TIMEOUT)
    }

    /// The eviction retries of pools that set none (the default also for a value loading
    /// refuses).
    pub fn max_evict_retries(&self) -> i32 {
        parse_evict_retries(&self.default_max_evict_retries).unwrap_or(DEFAULT_MAX_EVICT_RETRIES)
    }
}

/// A non-negative 32-bit count as Go's `strconv.ParseInt(s, 10, 32)` reads it.
fn parse_evict_retries(s: &str) -> Option<i32> {
    s.strip_prefix('+')
        .unwrap_or(s)
        .parse::<i32>()
        .ok()
        .filter(|n| *n >= 0)
}

/// `converter.provider.gdch`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GdchConverterConfig {
    /// `cloudProfileName`: the cloud profile of GDCH Shoots (upstream's default `cat`).
    #[serde(default)]
    pub cloud_profile_name: String,
    /// `parentReferenceName` of the GDCH infrastructure config.
    #[serde(default)]
    pub parent_reference_name: String,
    /// `parentReferenceNamespace` of the GDCH infrastructure config.
    #[serde(default)]
    pub parent_reference_namespace: String,
    /// `parentReferenceType` of the GDCH infrastructure config.
    #[serde(default)]
    pub parent_reference_type: String,
}

/// `converter.provider.aws`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AwsConverterConfig {
    /// `enableIMDSv2`: every AWS worker gets a WorkerConfig that requires IMDSv2 tokens.
    #[serde(default, rename = "enableIMDSv2")]
    pub enable_imds_v2: bool,
}

/// `converter.machineImage`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineImageDefaults {
    /// `defaultName`, e.g. `gardenlinux`.
    pub default_name: String,
    /// `defaultVersion`, e.g. `1877.8.0`.
    pub default_version: String,
}

/// `converter.gardener`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GardenerConfig {
    /// `projectName`: Shoots live in namespace `garden-<projectName>`.
    pub project_name: String,
    /// `enableCredentialBinding`: upstream writes `credentialsBindingName` when true and the
    /// deprecated `secretBindingName` when false. Read for compatibility only: every Shoot
    /// gets `credentialsBindingName` (the Gardener we target has removed `secretBindingName`),
    /// and loading warns when it is set to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_credential_binding: Option<bool>,
}

impl GardenerConfig {
    /// The Gardener project namespace, `garden-<projectName>`.
    pub fn namespace(&self) -> String {
        format!("garden-{}", self.project_name)
    }
}

/// `converter.auditLogging`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditLoggingConfig {
    /// `policyConfigMapName`: ConfigMap with the audit policy, in the Gardener project.
    pub policy_config_map_name: String,
    /// `tenantConfigPath`: the audit-log tenant file; a relative path is relative to the
    /// directory of `converter_config.json`.
    pub tenant_config_path: String,
}

/// `converter.maintenanceWindow`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindowConfig {
    /// `windowMapPath`: the maintenance window file; empty means no windows. A relative path
    /// is relative to the directory of `converter_config.json`.
    #[serde(default)]
    pub window_map_path: String,
}

/// `cluster`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConfig {
    /// `defaultSharedIASTenant` (required): the OIDC provider put into the Runtime's cluster
    /// as `OpenIDConnect` `kyma-oidc-0` when the Runtime names none.
    #[serde(rename = "defaultSharedIASTenant")]
    pub default_shared_ias_tenant: OidcProvider,
}

/// Checks the rules serde cannot: non-empty strings, names Gardener accepts, URLs, versions.
pub(crate) fn check(converter: &ConverterConfig, cluster: &ClusterConfig, c: &mut Checker) {
    let k = &converter.kubernetes;
    check_oidc(
        &k.default_operator_oidc,
        "converter.kubernetes.defaultOperatorOidc",
        c,
    );
    if let Some(name) = k
        .kube_api_server
        .as_ref()
        .and_then(|s| s.acl.as_ref())
        .and_then(|a| a.config_map_name.as_deref())
        && !is_dns_subdomain(name)
    {
        c.problem(
            "converter.kubernetes.kubeApiServer.acl.configMapName",
            format!("`{name}` is not a valid ConfigMap name (lower-case DNS subdomain)"),
        );
    }

    if let Some(api) = &k.kube_api_server {
        let max = &api.max_token_expiration;
        if !max.is_empty() && parse_go_duration(max).is_none() {
            c.problem(
                "converter.kubernetes.kubeApiServer.maxTokenExpiration",
                format!("expected a Go duration such as `720h` (no days), found `{max}`"),
            );
        }
    }
    let worker = &converter.provider.worker;
    let drain = &worker.default_machine_drain_timeout;
    if !drain.is_empty() && parse_go_duration(drain).is_none() {
        c.problem(
            "converter.provider.worker.defaultMachineDrainTimeout",
            format!("expected a Go duration such as `15m`, found `{drain}`"),
        );
    }
    let retries = &worker.default_max_evict_retries;
    if !retries.is_empty() && parse_evict_retries(retries).is_none() {
        c.problem(
            "converter.provider.worker.defaultMaxEvictRetries",
            format!("expected a whole number from 0 to 2147483647 such as `2`, found `{retries}`"),
        );
    }
    for (region, tolerations) in &converter.tolerations {
        for (i, t) in tolerations.iter().enumerate() {
            c.non_empty(format!("converter.tolerations.{region}[{i}].key"), &t.key);
        }
    }

    let dns = &converter.dns;
    if !dns.is_gardener_internal() {
        for (key, value) in [
            ("secretName", &dns.secret_name),
            ("domainPrefix", &dns.domain_prefix),
            ("providerType", &dns.provider_type),
        ] {
            if value.is_empty() {
                c.problem(
                    format!("converter.dns.{key}"),
                    "must be set when any of secretName, domainPrefix, providerType is set \
                     (leave all three empty for Gardener-internal DNS)",
                );
            }
        }
    }

    let image = &converter.machine_image;
    c.non_empty("converter.machineImage.defaultName", &image.default_name);
    if parse_image_version(&image.default_version).is_none() {
        c.problem(
            "converter.machineImage.defaultVersion",
            format!(
                "expected a machine image version such as `1877.8.0`, found `{}`",
                image.default_version
            ),
        );
    }

    let project = &converter.gardener.project_name;
    if !is_dns_label(project, 10) || project.contains("--") {
        c.problem(
            "converter.gardener.projectName",
            format!(
                "`{project}` is not a Gardener project name: expected at most 10 lower-case \
                 letters, digits and single dashes, e.g. `kyma-dev`"
            ),
        );
    }

    let audit = &converter.audit_logging;
    if c.non_empty(
        "converter.auditLogging.policyConfigMapName",
        &audit.policy_config_map_name,
    ) && !is_dns_subdomain(&audit.policy_config_map_name)
    {
        c.problem(
            "converter.auditLogging.policyConfigMapName",
            format!(
                "`{}` is not a valid ConfigMap name (lower-case DNS subdomain)",
                audit.policy_config_map_name
            ),
        );
    }
    c.non_empty(
        "converter.auditLogging.tenantConfigPath",
        &audit.tenant_config_path,
    );

    check_oidc(
        &cluster.default_shared_ias_tenant,
        "cluster.defaultSharedIASTenant",
        c,
    );
}

fn check_oidc(oidc: &OidcProvider, path: &str, c: &mut Checker) {
    c.non_empty(format!("{path}.clientID"), &oidc.client_id);
    c.non_empty(format!("{path}.groupsClaim"), &oidc.groups_claim);
    if c.non_empty(format!("{path}.issuerURL"), &oidc.issuer_url) && !is_url(&oidc.issuer_url, true)
    {
        c.problem(
            format!("{path}.issuerURL"),
            format!(
                "expected an https:// URL such as `https://kyma.accounts.ondemand.com`, found `{}`",
                oidc.issuer_url
            ),
        );
    }
    for (i, alg) in oidc.signing_algs.iter().enumerate() {
        if !SIGNING_ALGORITHMS.contains(&alg.as_str()) {
            c.problem(
                format!("{path}.signingAlgs[{i}]"),
                format!(
                    "`{alg}` is not a supported signing algorithm; expected one of {}",
                    SIGNING_ALGORITHMS.join(", ")
                ),
            );
        }
    }
    c.non_empty(format!("{path}.usernameClaim"), &oidc.username_claim);
    c.non_empty(format!("{path}.usernamePrefix"), &oidc.username_prefix);
}
