//! The KIM configuration: upstream's `converter_config.json` (with our `kim` extension), the
//! audit-log tenant file and the maintenance window file, loaded and checked once at start.
//!
//! A file that is wrong is refused with a [`ConfigError`] naming the file, the key path and
//! what would be valid, for example
//! `converter_config.json: converter.gardener.projectName: missing required key`.
//! Every key is documented in `docs/configuration.md`; `deploy/config/` holds a complete
//! example.
//!
//! [`KimConfig::from_parts`] is pure (strings in, configuration out); [`KimConfig::load`] is the
//! only function here that reads files.

mod audit_log;
mod converter;
mod error;
mod maintenance;
mod providers;
mod values;

pub use audit_log::{AuditLogLookupError, AuditLogTenant, AuditLogTenants};
pub use converter::{
    AclConfig, AuditLoggingConfig, AwsConverterConfig, ClusterConfig, ConverterConfig,
    ConverterProviderConfig, DEFAULT_MACHINE_DRAIN_TIMEOUT, DEFAULT_MAX_EVICT_RETRIES, DnsConfig,
    GardenerConfig, GdchConverterConfig, KubeApiServerConfig, KubeApiServerView, KubeletDefaults,
    KubernetesConfig, MachineImageDefaults, MaintenanceWindowConfig, NetworkingConfig,
    OidcProvider, SIGNING_ALGORITHMS, TOKEN_EXPIRATION_BOUNDS, WorkerDefaults,
};
pub use error::{ConfigError, ConfigWarning, Problem};
pub use maintenance::{MaintenanceWindow, MaintenanceWindows};
pub use providers::{
    Architecture, Classification, ControlPlaneDefaults, DEFAULT_SEED_NETWORKS,
    FailureToleranceDefaults, FailureToleranceType, HighAvailabilityDefaults, ImageVersion,
    KimExtension, KubernetesVersionEntry, KubernetesVersionRejection, KubernetesVersionsConfig,
    MachineImageConfig, MachineImageRef, MachineTypeConfig, NetworkingDefaults, ProviderConfig,
    ProviderDefaults, ProviderKind, RegionConfig, UnknownProvider, VolumeDefaults,
    VolumeTypeConfig, WorkerScalingBounds, WorkerScalingDefaults,
};
pub use values::{
    KubernetesVersion, MaintenanceTime, MemoryQuantity, VolumeSize, parse_cidr, parse_image_version,
};

use error::{Checker, parse_json};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// File names used in messages when [`KimConfig::from_parts`] has no paths.
pub const CONVERTER_FILE: &str = "converter_config.json";
/// See [`CONVERTER_FILE`].
pub const AUDIT_LOG_FILE: &str = "audit-log tenant file";
/// See [`CONVERTER_FILE`].
pub const MAINTENANCE_FILE: &str = "maintenance window file";

/// The complete, checked KIM configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KimConfig {
    /// `converter` of `converter_config.json` (upstream).
    pub converter: ConverterConfig,
    /// `cluster` of `converter_config.json` (upstream).
    pub cluster: ClusterConfig,
    /// `kim` of `converter_config.json` (our extension; empty when absent).
    pub kim: KimExtension,
    /// The audit-log tenant file (empty when there is none).
    pub audit_log_tenants: AuditLogTenants,
    /// The maintenance window file (empty when there is none).
    pub maintenance_windows: MaintenanceWindows,
    #[serde(skip)]
    warnings: Vec<ConfigWarning>,
}

/// Where the configuration files are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigPaths {
    /// `converter_config.json` (upstream flag `--converter-config-filepath`).
    pub converter_config: PathBuf,
    /// The audit-log tenant file; `None` uses `converter.auditLogging.tenantConfigPath`.
    pub audit_log_tenants: Option<PathBuf>,
    /// The maintenance window file; `None` uses `converter.maintenanceWindow.windowMapPath`
    /// (no windows when that is empty).
    pub maintenance_windows: Option<PathBuf>,
}

impl ConfigPaths {
    /// Paths that take the other two files from the converter config.
    pub fn new(converter_config: impl Into<PathBuf>) -> Self {
        Self {
            converter_config: converter_config.into(),
            audit_log_tenants: None,
            maintenance_windows: None,
        }
    }
}

/// The layout of `converter_config.json`.
#[derive(Deserialize)]
struct ConverterFile {
    converter: ConverterConfig,
    cluster: ClusterConfig,
    #[serde(default)]
    kim: KimExtension,
}

/// One file's name and content.
struct Source<'a> {
    name: String,
    text: &'a str,
}

impl KimConfig {
    /// What upstream adds to the configuration when the runtime bootstrapper copies a
    /// ClusterTrustBundle (`--runtime-bootstrapper-kcp-cluster-trust-bundle`): the beta API and
    /// the feature gates its Pods need to mount the bundle, in every Shoot's kube-apiserver
    /// (`ClusterTrustBundle`, `ClusterTrustBundleProjection`, runtime config
    /// `certificates.k8s.io/v1beta1/clustertrustbundles`) and kubelets
    /// (`ClusterTrustBundleProjection`).
    pub fn enable_cluster_trust_bundles(&mut self) {
        let k = &mut self.converter.kubernetes;
        let api = k.kube_api_server.get_or_insert_with(Default::default);
        for gate in ["ClusterTrustBundle", "ClusterTrustBundleProjection"] {
            api.feature_gates.insert(gate.to_owned(), true);
        }
        api.runtime_config.insert(
            "certificates.k8s.io/v1beta1/clustertrustbundles".to_owned(),
            true,
        );
        k.kubelet
            .get_or_insert_with(Default::default)
            .feature_gates
            .insert("ClusterTrustBundleProjection".to_owned(), true);
    }

    /// Reads and checks the three files. The audit-log tenant file is required (upstream
    /// fails to start without it); the maintenance window file only when a path is given.
    /// Relative paths inside `converter_config.json` are relative to its directory.
    pub fn load(paths: &ConfigPaths) -> Result<KimConfig, ConfigError> {
        let converter_name = paths.converter_config.display().to_string();
        let converter_text = read(
            &paths.converter_config,
            "the converter config (--converter-config-filepath)",
        )?;
        // Parse the converter file first: it says where the other two are.
        let mut warnings = Vec::new();
        let file: ConverterFile = parse_json(&converter_name, &converter_text, &mut warnings)?;
        let base = paths.converter_config.parent().unwrap_or(Path::new(""));

        let audit_path = match &paths.audit_log_tenants {
            Some(p) => p.clone(),
            None => base.join(&file.converter.audit_logging.tenant_config_path),
        };
        let audit_text = read(
            &audit_path,
            "the audit-log tenant file (converter.auditLogging.tenantConfigPath)",
        )?;

        let window_path = match &paths.maintenance_windows {
            Some(p) => Some(p.clone()),
            None => Some(&file.converter.maintenance_window.window_map_path)
                .filter(|p| !p.trim().is_empty())
                .map(|p| base.join(p)),
        };
        let window_text = match &window_path {
            Some(p) => Some(read(
                p,
                "the maintenance window file (converter.maintenanceWindow.windowMapPath)",
            )?),
            None => None,
        };

        Self::from_sources(
            Source {
                name: converter_name,
                text: &converter_text,
            },
            Some(Source {
                name: audit_path.display().to_string(),
                text: &audit_text,
            }),
            window_path
                .as_ref()
                .zip(window_text.as_deref())
                .map(|(p, text)| Source {
                    name: p.display().to_string(),
                    text,
                }),
        )
    }

    /// Checks a configuration given as text: `converter_json` is `converter_config.json`,
    /// `audit_json` the audit-log tenant file (`None`: no tenants), `maintenance_yaml` the
    /// maintenance window file (`None`: no windows). Messages name the files
    /// [`CONVERTER_FILE`], [`AUDIT_LOG_FILE`] and [`MAINTENANCE_FILE`].
    pub fn from_parts(
        converter_json: &str,
        audit_json: Option<&str>,
        maintenance_yaml: Option<&str>,
    ) -> Result<KimConfig, ConfigError> {
        Self::from_sources(
            Source {
                name: CONVERTER_FILE.to_owned(),
                text: converter_json,
            },
            audit_json.map(|text| Source {
                name: AUDIT_LOG_FILE.to_owned(),
                text,
            }),
            maintenance_yaml.map(|text| Source {
                name: MAINTENANCE_FILE.to_owned(),
                text,
            }),
        )
    }

    fn from_sources(
        converter: Source<'_>,
        audit: Option<Source<'_>>,
        maintenance: Option<Source<'_>>,
    ) -> Result<KimConfig, ConfigError> {
        let mut warnings = Vec::new();
        let file: ConverterFile = parse_json(&converter.name, converter.text, &mut warnings)?;
        for w in &mut warnings {
            if w.path == "converter.kubernetes.enableMachineImageVersionVersionAutoUpdate" {
                w.message = "ignored, as upstream has ignored it since 2025-10: the key is \
                             enableMachineImageVersionAutoUpdate"
                    .to_owned();
            }
        }
        let mut c = Checker::new();
        converter::check(&file.converter, &file.cluster, &mut c);
        let global = providers::GlobalDefaults {
            kubernetes_version: &file.converter.kubernetes.default_version,
            machine_image_name: &file.converter.machine_image.default_name,
            machine_image_version: &file.converter.machine_image.default_version,
            seed_networks: file.kim.seed_networks(),
        };
        for (kind, p) in &file.kim.providers {
            providers::check_provider(*kind, p, &global, &mut c);
        }
        c.finish(&converter.name)?;

        let audit_name = audit.as_ref().map(|src| src.name.clone());
        let audit_log_tenants = match audit {
            Some(src) => {
                let tenants: AuditLogTenants = parse_json(&src.name, src.text, &mut warnings)?;
                let mut c = Checker::new();
                audit_log::check(&tenants, &src.name, &mut c, &mut warnings);
                c.finish(&src.name)?;
                tenants
            }
            None => AuditLogTenants::default(),
        };

        let maintenance_windows = match maintenance {
            Some(src) => {
                let (windows, prefix) = maintenance::parse(&src.name, src.text, &mut warnings)?;
                let mut c = Checker::new();
                maintenance::check(&windows, &prefix, &mut c);
                c.finish(&src.name)?;
                windows
            }
            None => MaintenanceWindows::default(),
        };

        let mut config = KimConfig {
            converter: file.converter,
            cluster: file.cluster,
            kim: file.kim,
            audit_log_tenants,
            maintenance_windows,
            warnings,
        };
        config
            .warnings
            .extend(config.cross_file_warnings(audit_name.as_deref()));
        if config.converter.gardener.enable_credential_binding == Some(false) {
            config.warnings.push(ConfigWarning {
                file: converter.name.clone(),
                path: "converter.gardener.enableCredentialBinding".to_owned(),
                message: "false is not honoured: every Shoot gets credentialsBindingName (the \
                          deprecated secretBindingName is never written)"
                    .to_owned(),
            });
        }
        Ok(config)
    }

    /// What an operator should see at start but that does not stop the program: unknown keys
    /// in upstream files, tenants for unknown providers, allowed regions without an audit-log
    /// tenant.
    pub fn warnings(&self) -> &[ConfigWarning] {
        &self.warnings
    }

    /// The settings of `kind` (`ProviderKind::Aws` or `"aws"`), if `kim.providers` has them.
    pub fn provider<K: TryInto<ProviderKind>>(&self, kind: K) -> Option<&ProviderConfig> {
        self.kim.providers.get(&kind.try_into().ok()?)
    }

    /// The CloudProfile Shoots of `kind` reference (and the webhook checks them against):
    /// `kim.providers.<kind>.cloudProfileName`, for gdch else upstream's
    /// `converter.provider.gdch.cloudProfileName`, else upstream's fixed name.
    pub fn cloud_profile_name(&self, kind: ProviderKind) -> &str {
        let gdch = self.converter.provider.gdch.cloud_profile_name.as_str();
        self.provider(kind)
            .and_then(|p| p.cloud_profile_name.as_deref())
            .or_else(|| (kind == ProviderKind::Gdch && !gdch.is_empty()).then_some(gdch))
            .unwrap_or_else(|| kind.default_cloud_profile_name())
    }

    /// The machine image for workers of `kind` that name none: the provider default, else
    /// `converter.machineImage`.
    pub fn default_machine_image(&self, kind: ProviderKind) -> MachineImageRef {
        self.provider(kind)
            .and_then(|p| p.defaults.machine_image.clone())
            .unwrap_or_else(|| MachineImageRef {
                name: self.converter.machine_image.default_name.clone(),
                version: self.converter.machine_image.default_version.clone(),
            })
    }

    /// `converter.kubernetes.kubeApiServer.acl.configMapName`, when set and not empty.
    pub fn acl_config_map_name(&self) -> Option<&str> {
        self.converter
            .kubernetes
            .kube_api_server
            .as_ref()
            .and_then(|k| k.acl.as_ref())
            .and_then(|a| a.config_map_name.as_deref())
            .filter(|n| !n.is_empty())
    }

    /// `converter.kubernetes.defaultVersion`.
    pub fn default_kubernetes_version(&self) -> &KubernetesVersion {
        &self.converter.kubernetes.default_version
    }

    /// The audit-log tenant for `provider` and `region`, with upstream's lookup messages.
    pub fn audit_log_tenant(
        &self,
        provider: &str,
        region: &str,
    ) -> Result<&AuditLogTenant, AuditLogLookupError> {
        self.audit_log_tenants.tenant(provider, region)
    }

    /// The regions of `provider` that have an audit-log tenant.
    pub fn audit_log_regions(&self, provider: &str) -> impl Iterator<Item = &str> {
        self.audit_log_tenants.regions(provider)
    }

    /// The maintenance window of production Shoots in `region`.
    pub fn maintenance_window(&self, region: &str) -> Option<&MaintenanceWindow> {
        self.maintenance_windows.for_region(region)
    }

    fn cross_file_warnings(&self, audit_file: Option<&str>) -> Vec<ConfigWarning> {
        let mut out = Vec::new();
        if let Some(audit_file) = audit_file {
            for (kind, p) in &self.kim.providers {
                for region in p.regions.iter().flatten() {
                    if self.audit_log_tenant(kind.as_str(), &region.name).is_err() {
                        out.push(ConfigWarning {
                            file: audit_file.to_owned(),
                            path: format!("{kind}.{}", region.name),
                            message: format!(
                                "no tenant for allowed region kim.providers.{kind} {}: with \
                                 --audit-log-mandatory, Runtimes there cannot be provisioned",
                                region.name
                            ),
                        });
                    }
                }
            }
        }
        out
    }
}

fn read(path: &Path, what: &str) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        file: path.display().to_string(),
        what: what.to_owned(),
        source,
    })
}
