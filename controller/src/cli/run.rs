//! `kim-controller run`: flags of the reconciling process. Names follow upstream
//! `cmd/main.go` where a flag exists there, so upstream's Deployment arguments still work.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::goflags::{self, parse_duration, parse_positive_duration};
use kim_shared::access::AccessPolicy;

use crate::access::{MAX_ROTATION_RATIO, MIN_ROTATION_RATIO};
use crate::gardener_cluster::rotation::{RotationPolicy, RotationPolicyError};
use crate::leader::LeaderElection;
use crate::settings::{
    AccessSettings, GardenerClusterSettings, RegistryCacheSettings, RuntimeSettings, Settings,
};

/// Flags of `kim-controller run` (the default subcommand).
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Address of the Prometheus `/metrics` endpoint (`:8080` binds all interfaces).
    #[arg(long, default_value = ":8080", value_parser = parse_bind_address)]
    pub metrics_bind_address: SocketAddr,

    /// Address of `/healthz` and `/readyz`.
    #[arg(long, default_value = ":8081", value_parser = parse_bind_address)]
    pub health_probe_bind_address: SocketAddr,

    /// Run the reconcilers only while this replica holds the Lease.
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = goflags::parse_bool, action = clap::ArgAction::Set)]
    pub leader_elect: bool,

    /// Name of the leader-election Lease (upstream's ID).
    #[arg(long, default_value = "f1c68560.kyma-project.io")]
    pub leader_election_id: String,

    /// Namespace of the Lease; defaults to `--namespace`.
    #[arg(long, env = "POD_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// How long the Lease stays valid after it last changed (whole seconds, at least 2s): a
    /// follower takes it over once it has seen it unchanged this long by its own clock. The
    /// leader renews every 2/15 of it (2 s at 15 s) and steps down when no renewal got through
    /// for two thirds of it (10 s). controller-runtime's default duration and ratios.
    #[arg(long, default_value = "15s", value_parser = parse_lease_duration)]
    pub leader_elect_lease_duration: Duration,

    /// KCP namespace holding Runtimes, GardenerClusters and kubeconfig Secrets.
    #[arg(long, default_value = "kcp-system")]
    pub namespace: String,

    /// kubeconfig of the KCP cluster; when unset, `KUBECONFIG` or `~/.kube/config`, else
    /// in-cluster (kube's `Config::infer`). `--kubeconfig` is
    /// controller-runtime's name of it, which upstream's binary takes.
    #[arg(long, env = "KCP_KUBECONFIG", alias = "kubeconfig")]
    pub kcp_kubeconfig_path: Option<PathBuf>,

    /// kubeconfig of the Gardener project (service account of the project).
    #[arg(long, default_value = "/gardener/kubeconfig/kubeconfig")]
    pub gardener_kubeconfig_path: PathBuf,

    /// Gardener project; Shoots live in namespace `garden-<name>`.
    #[arg(long, default_value = "gardener-project")]
    pub gardener_project_name: String,

    /// Fraction of the kubeconfig validity after which it is rotated.
    #[arg(long, default_value_t = 0.6)]
    pub minimal_rotation_time: f64,

    /// Validity requested for admin kubeconfigs.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub kubeconfig_expiration_time: Duration,

    /// Per-reconcile timeout of the GardenerCluster reconciler (typo kept from upstream).
    #[arg(long = "gardener-ctrl-reconcilation-timeout", default_value = "60s", value_parser = parse_duration)]
    pub gardener_ctrl_reconciliation_timeout: Duration,

    /// Timeout of one read from Gardener (GET; until the response headers). The Shoot watch's
    /// requests (its list pages) wait as long as writes when `--gardener-write-timeout` is
    /// longer.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub gardener_request_timeout: Duration,

    /// Timeout of one write to Gardener (create, patch, update, delete, adminkubeconfig; until
    /// the response headers). Longer than reads: writes wait in Gardener's admission under
    /// load (docs/operations.md, "Gardener timeouts").
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub gardener_write_timeout: Duration,

    /// Sustained requests per second to Gardener.
    #[arg(long, default_value_t = 5)]
    pub gardener_ratelimiter_qps: u32,

    /// Requests to Gardener allowed at once above the sustained rate.
    #[arg(long, default_value_t = 5)]
    pub gardener_ratelimiter_burst: u32,

    /// Runtime reconciles running at once.
    #[arg(long, default_value_t = 25)]
    pub runtime_ctrl_workers_cnt: u16,

    /// GardenerCluster reconciles running at once.
    #[arg(long, default_value_t = 25)]
    pub gardener_cluster_ctrl_workers_cnt: u16,

    /// The upstream-compatible converter configuration (JSON).
    #[arg(long, default_value = "/converter-config/converter_config.json")]
    pub converter_config_filepath: PathBuf,

    /// Fail provisioning when no audit-log tenant exists for provider and region.
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = goflags::parse_bool, action = clap::ArgAction::Set)]
    pub audit_log_mandatory: bool,

    /// Upstream's switch between the legacy `oidcConfig` and structured authentication.
    /// Accepted for compatibility, without effect: Gardener removed `oidcConfig`, so every
    /// Shoot uses structured authentication, and its ConfigMap is deleted with the Runtime.
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = goflags::parse_bool, action = clap::ArgAction::Set)]
    pub structured_auth_enabled: bool,

    /// Manage the kube-apiserver ACL (Gardener's `acl` extension) of AWS and Azure Runtimes
    /// that set `spec.shoot.kubernetes.kubeAPIServer.acl.allowedCIDRs`, adding the operator
    /// CIDRs and the KCP's NAT address of the ConfigMap
    /// `converter.kubernetes.kubeApiServer.acl.configMapName` (in `--namespace`), which must
    /// then be configured.
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = goflags::parse_bool, action = clap::ArgAction::Set)]
    pub api_server_acl_enabled: bool,

    /// Manage the `shoot-networking-filter` extension from `spec.security.networking.filter`
    /// (upstream: network restriction on the project scope). Off: new Shoots get no filter
    /// extension and a live one is left as it is.
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = goflags::parse_bool, action = clap::ArgAction::Set)]
    pub network_restriction_enabled: bool,

    /// Safe deletion: hibernate a deleted Runtime's Shoot and delete it only after this period.
    #[arg(long, value_parser = parse_duration)]
    pub deletion_grace_period: Option<Duration>,

    /// Set `confirmation.gardener.cloud/force-deletion` on a deleting Shoot when Gardener
    /// reports an error code it accepts for force deletion.
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = goflags::parse_bool, action = clap::ArgAction::Set)]
    pub force_deletion: bool,

    /// At shutdown, how long to wait for in-flight reconciles before exiting anyway (as
    /// controller-runtime's `GracefulShutdownTimeout`); below the Pod's 30 s
    /// terminationGracePeriodSeconds, so the process exits on its own, not by SIGKILL.
    #[arg(long, default_value = "25s", value_parser = parse_duration)]
    pub graceful_shutdown_timeout: Duration,

    /// How often the Gardener health check runs.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub gardener_health_interval: Duration,

    /// Log filter (tracing `EnvFilter` syntax), e.g. `info` or `kim_controller=debug`.
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub log_level: String,

    /// `json` (default, for machines) or `text` (for people).
    #[arg(long, default_value = "json")]
    pub log_format: crate::logging::LogFormat,

    /// Flags of the RuntimeAccess (RBAC kubeconfig) reconciler.
    #[command(flatten)]
    pub access: AccessArgs,

    /// Upstream's delay before its state machine re-reads a Runtime it just wrote. Accepted
    /// without effect (our reconciler reads its own writes from the answer); refused at 0 as
    /// upstream refuses it.
    #[arg(long, default_value = "1s", value_parser = parse_positive_duration)]
    pub status_requeue_delay: Duration,

    /// Port of the listener the runtime watcher calls when a runtime cluster's registry cache
    /// configuration changes (`POST /v2/infrastructure-manager-registry-cache/event`, all
    /// interfaces), with `--registry-cache-config-controller-enabled`.
    #[arg(long, default_value = "8082", value_parser = parse_port)]
    pub registry_cache_listener_port: String,

    /// How often the registry cache controller reads each runtime cluster's configuration
    /// without an event; 0 reads it only on events (as upstream).
    #[arg(long, default_value = "60m", value_parser = parse_duration)]
    pub registry_cache_reconcile_period: Duration,

    /// The registry cache (upstream ADRs 002 and 003): the runtime clusters'
    /// `RegistryCacheConfig`s become `spec.imageRegistryCache` of their Runtimes, their
    /// credentials are copied into the Gardener project and the Shoots get the `registry-cache`
    /// extension. Off: what the registry cache wrote is removed (docs/configuration.md).
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = goflags::parse_bool, action = clap::ArgAction::Set)]
    pub registry_cache_config_controller_enabled: bool,

    /// Upstream's switch of dedicated BTP audit logging (AuditLog resources per Runtime).
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = goflags::parse_bool, action = clap::ArgAction::Set)]
    pub dedicated_audit_logging_enabled: bool,

    /// Upstream's runtime bootstrapper and its names.
    #[command(flatten)]
    pub bootstrapper: BootstrapperArgs,

    /// controller-runtime's logging flags (`-zap-*`), mapped to ours.
    #[command(flatten)]
    pub zap: ZapArgs,

    /// Upstream flags given on the command line that this process accepts but does not act
    /// on; each is logged once at start. Filled by [`crate::cli::parse`].
    #[arg(skip)]
    pub ignored_flags: Vec<String>,
}

/// Upstream's `--runtime-bootstrapper-*` flags, same names and defaults.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct BootstrapperArgs {
    /// Upstream's switch of the runtime bootstrapper.
    #[arg(id = "runtime-bootstrapper-enabled", long = "runtime-bootstrapper-enabled", default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = goflags::parse_bool, action = clap::ArgAction::Set)]
    pub enabled: bool,
    /// ConfigMap (KCP) with the bootstrapper's manifests.
    #[arg(
        id = "runtime-bootstrapper-manifests-config-map-name",
        long = "runtime-bootstrapper-manifests-config-map-name",
        default_value = "runtime-bootstrapper-manifests"
    )]
    pub manifests_config_map_name: String,
    /// ConfigMap (KCP) copied to the runtime cluster.
    #[arg(
        id = "runtime-bootstrapper-kcp-config-name",
        long = "runtime-bootstrapper-kcp-config-name",
        default_value = "rt-bootstrapper-config"
    )]
    pub kcp_config_name: String,
    /// Pull Secret (KCP) copied to the runtime cluster.
    #[arg(
        id = "runtime-bootstrapper-kcp-pull-secret-name",
        long = "runtime-bootstrapper-kcp-pull-secret-name",
        default_value = ""
    )]
    pub kcp_pull_secret_name: String,
    /// ClusterTrustBundle (KCP) copied to the runtime cluster.
    #[arg(
        id = "runtime-bootstrapper-kcp-cluster-trust-bundle",
        long = "runtime-bootstrapper-kcp-cluster-trust-bundle",
        default_value = ""
    )]
    pub kcp_cluster_trust_bundle: String,
    /// Name of the copied ConfigMap in the runtime cluster.
    #[arg(
        id = "runtime-bootstrapper-skr-config-name",
        long = "runtime-bootstrapper-skr-config-name",
        default_value = "rt-bootstrapper-config"
    )]
    pub skr_config_name: String,
    /// Name of the copied pull Secret in the runtime cluster.
    #[arg(
        id = "runtime-bootstrapper-skr-pull-secret-name",
        long = "runtime-bootstrapper-skr-pull-secret-name",
        default_value = "registry-credentials"
    )]
    pub skr_pull_secret_name: String,
    /// Name of the copied ClusterTrustBundle in the runtime cluster.
    #[arg(
        id = "runtime-bootstrapper-skr-cluster-trust-bundle",
        long = "runtime-bootstrapper-skr-cluster-trust-bundle",
        default_value = ""
    )]
    pub skr_cluster_trust_bundle: String,
    /// Namespace of the bootstrapper in the runtime cluster.
    #[arg(
        id = "runtime-bootstrapper-skr-namespace",
        long = "runtime-bootstrapper-skr-namespace",
        default_value = "kyma-system"
    )]
    pub skr_namespace: String,
    /// Deployment in the runtime cluster whose rollout means the bootstrapper is installed.
    #[arg(
        id = "runtime-bootstrapper-skr-deployment-name",
        long = "runtime-bootstrapper-skr-deployment-name",
        default_value = "rt-bootstrapper-controller-manager"
    )]
    pub skr_deployment_name: String,
}

/// controller-runtime's `zap.Options` flags, as upstream's binary registers them. Where given,
/// they win over `--log-level` and `--log-format`.
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct ZapArgs {
    /// Development mode: text lines and `debug` unless `--zap-encoder` or `--zap-log-level`
    /// say otherwise.
    #[arg(id = "zap-devel", long = "zap-devel", default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = goflags::parse_bool, action = clap::ArgAction::Set)]
    pub devel: bool,
    /// `json` (our `--log-format=json`) or `console` (`--log-format=text`).
    #[arg(id = "zap-encoder", long = "zap-encoder", value_parser = parse_zap_encoder)]
    pub encoder: Option<crate::logging::LogFormat>,
    /// `debug`, `info`, `error`, `panic` (logged as `error`), or a verbosity above 0 (1 is
    /// `debug`, 2 and more `trace`).
    #[arg(id = "zap-log-level", long = "zap-log-level", value_parser = parse_zap_level)]
    pub log_level: Option<String>,
    /// Accepted without effect: our lines carry no stack traces.
    #[arg(id = "zap-stacktrace-level", long = "zap-stacktrace-level", value_parser = ["info", "error", "panic"])]
    pub stacktrace_level: Option<String>,
    /// Accepted without effect: our timestamps are RFC 3339 (upstream's default is epoch).
    #[arg(id = "zap-time-encoding", long = "zap-time-encoding", value_parser = ["epoch", "millis", "nano", "iso8601", "rfc3339", "rfc3339nano"])]
    pub time_encoding: Option<String>,
}

/// Parses `--zap-encoder`.
pub fn parse_zap_encoder(s: &str) -> Result<crate::logging::LogFormat, String> {
    match s {
        "json" => Ok(crate::logging::LogFormat::Json),
        "console" => Ok(crate::logging::LogFormat::Text),
        _ => Err(format!("{s:?} is not an encoder (json or console)")),
    }
}

/// Parses `--zap-log-level` into our log filter's level.
pub fn parse_zap_level(s: &str) -> Result<String, String> {
    let level = match s {
        "debug" => "debug",
        "info" => "info",
        "warn" => "warn",
        "error" | "panic" => "error",
        _ => match s.parse::<u8>() {
            Ok(1) => "debug",
            Ok(v) if v > 1 => "trace",
            _ => {
                return Err(format!(
                    "{s:?} is not a level (debug, info, error, panic, or an integer above 0)"
                ));
            }
        },
    };
    Ok(level.to_owned())
}

/// Upstream flags this process accepts but does not act on (by clap id), each logged once at
/// start when given.
pub const IGNORED_FLAGS: [(&str, &str); 2] = [
    ("structured_auth_enabled", "--structured-auth-enabled"),
    ("status_requeue_delay", "--status-requeue-delay"),
];

/// Flags logged once at start when given, besides [`IGNORED_FLAGS`].
pub const IGNORED_ZAP_FLAGS: [(&str, &str); 2] = [
    ("zap-stacktrace-level", "--zap-stacktrace-level"),
    ("zap-time-encoding", "--zap-time-encoding"),
];

/// The flags of [`IGNORED_FLAGS`] and [`IGNORED_ZAP_FLAGS`] that `matches` has from the command
/// line, each once, in that order.
pub fn ignored_flags(matches: &clap::ArgMatches) -> Vec<String> {
    IGNORED_FLAGS
        .iter()
        .chain(IGNORED_ZAP_FLAGS.iter())
        .filter(|(id, _)| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine))
        .map(|(_, flag)| (*flag).to_owned())
        .collect()
}

/// Flags of the RuntimeAccess reconciler, flattened into `kim-controller run`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct AccessArgs {
    /// Token lifetime when a RuntimeAccess does not set `spec.tokenExpirationSeconds`.
    #[arg(long = "access-token-expiration", default_value = "1h", value_parser = parse_token_lifetime)]
    pub token_expiration: Duration,
    /// Fraction of a token's lifetime after which it is replaced (0.01 to 0.95). Tokens live at
    /// least 10 minutes (TokenRequest's minimum), so a small ratio is how a short rotation
    /// period is configured: 0.01 of a 600 s token rotates every 6 s.
    #[arg(long = "access-rotation-ratio", default_value_t = 0.8, value_parser = parse_rotation_ratio)]
    pub rotation_ratio: f64,
    /// Namespaces of the runtime clusters a RuntimeAccess may not use, besides kube-*,
    /// garden*, kyma-system and istio-system (comma-separated; set the webhook's flag alike).
    #[arg(long = "access-protected-namespaces", value_delimiter = ',')]
    pub protected_namespaces: Vec<String>,
    /// Existing roles a RuntimeAccess may bind with `spec.roleRef`, as ClusterRole/<name> or
    /// Role/<namespace>/<name>, each optionally =<user> for the RuntimeAccesses that user
    /// created only (comma-separated; set the webhook's flag alike). Empty: none, only rules.
    #[arg(long = "access-allowed-role-refs", value_delimiter = ',')]
    pub allowed_role_refs: Vec<kim_shared::access::AllowedRoleRef>,
    /// Time allowed for each request to a runtime's API server (connect included), so that an
    /// unreachable or hibernated runtime fails a reconcile quickly instead of holding it.
    #[arg(long = "access-shoot-request-timeout", default_value = "30s", value_parser = parse_duration)]
    pub shoot_request_timeout: Duration,
    /// Longest token lifetime a RuntimeAccess may request.
    #[arg(long = "access-max-token-expiration", default_value = "24h", value_parser = parse_token_lifetime)]
    pub max_token_expiration: Duration,
    /// RuntimeAccess reconciles running at once (each may wait on a runtime's API server).
    #[arg(long = "access-ctrl-workers-cnt", default_value_t = 25)]
    pub workers: u16,
}

impl Default for AccessArgs {
    fn default() -> Self {
        Self {
            token_expiration: Duration::from_secs(3600),
            rotation_ratio: 0.8,
            protected_namespaces: Vec::new(),
            allowed_role_refs: Vec::new(),
            shoot_request_timeout: Duration::from_secs(30),
            max_token_expiration: Duration::from_secs(24 * 3600),
            workers: 25,
        }
    }
}

impl AccessArgs {
    /// The RuntimeAccess reconciler's settings these flags describe.
    pub fn settings(&self) -> AccessSettings {
        AccessSettings {
            workers: self.workers,
            token_expiration: self.token_expiration,
            rotation_ratio: self.rotation_ratio,
            shoot_request_timeout: self.shoot_request_timeout,
            policy: AccessPolicy {
                protected_namespaces: self.protected_namespaces.clone(),
                allowed_role_refs: self.allowed_role_refs.clone(),
                max_token_expiration_seconds: i64::try_from(self.max_token_expiration.as_secs())
                    .unwrap_or(i64::MAX),
            },
        }
    }
}

/// Parses `--access-rotation-ratio`; refuses values outside
/// [`MIN_ROTATION_RATIO`]..=[`MAX_ROTATION_RATIO`] instead of silently changing them.
pub fn parse_rotation_ratio(s: &str) -> Result<f64, String> {
    let ratio: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number like 0.8"))?;
    if (MIN_ROTATION_RATIO..=MAX_ROTATION_RATIO).contains(&ratio) {
        Ok(ratio)
    } else {
        Err(format!(
            "{s} is outside {MIN_ROTATION_RATIO}..={MAX_ROTATION_RATIO} (the fraction of a token's lifetime after which it is replaced)"
        ))
    }
}

/// Parses a token lifetime flag: a duration of at least 10 minutes, the least TokenRequest
/// issues (a shorter default would fail every token request at run time instead of at start).
pub fn parse_token_lifetime(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    let min = kim_shared::access::MIN_TOKEN_EXPIRATION_SECONDS.unsigned_abs();
    if d.as_secs() < min {
        return Err(format!(
            "{s} is shorter than {min} s, the least token lifetime the TokenRequest API issues"
        ));
    }
    Ok(d)
}

impl RunArgs {
    /// The reconcilers' settings these flags describe; fails on flags that contradict each
    /// other or are out of range.
    pub fn settings(&self) -> Result<Settings, RotationPolicyError> {
        Ok(Settings {
            namespace: self.namespace.clone(),
            gardener_namespace: self.gardener_namespace(),
            runtime: RuntimeSettings {
                workers: self.runtime_ctrl_workers_cnt,
                audit_log_mandatory: self.audit_log_mandatory,
                deletion_grace_period: self.deletion_grace_period,
                force_deletion: self.force_deletion,
                api_server_acl: self.api_server_acl_enabled,
                network_restriction: self.network_restriction_enabled,
                bootstrapper: kim_shared::bootstrapper::Settings {
                    enabled: self.bootstrapper.enabled,
                    manifests_config_map_name: self.bootstrapper.manifests_config_map_name.clone(),
                    kcp_config_name: self.bootstrapper.kcp_config_name.clone(),
                    kcp_pull_secret_name: self.bootstrapper.kcp_pull_secret_name.clone(),
                    kcp_cluster_trust_bundle: self.bootstrapper.kcp_cluster_trust_bundle.clone(),
                    skr_config_name: self.bootstrapper.skr_config_name.clone(),
                    skr_pull_secret_name: self.bootstrapper.skr_pull_secret_name.clone(),
                    skr_cluster_trust_bundle: self.bootstrapper.skr_cluster_trust_bundle.clone(),
                    skr_namespace: self.bootstrapper.skr_namespace.clone(),
                    skr_deployment_name: self.bootstrapper.skr_deployment_name.clone(),
                },
                dedicated_audit_logging: self.dedicated_audit_logging_enabled,
            },
            gardener_cluster: GardenerClusterSettings {
                workers: self.gardener_cluster_ctrl_workers_cnt,
                reconcile_timeout: self.gardener_ctrl_reconciliation_timeout,
                rotation: RotationPolicy::new(
                    self.kubeconfig_expiration_time,
                    self.minimal_rotation_time,
                )?,
            },
            access: self.access.settings(),
            registry_cache: RegistryCacheSettings {
                enabled: self.registry_cache_config_controller_enabled,
                listener_port: self.registry_cache_listener_port.parse().unwrap_or(8082),
                reconcile_period: self.registry_cache_reconcile_period,
            },
        })
    }

    /// The log filter: `--zap-log-level`, else `debug` with `--zap-devel`, else `--log-level`.
    pub fn log_level(&self) -> String {
        match (&self.zap.log_level, self.zap.devel) {
            (Some(level), _) => level.clone(),
            (None, true) => "debug".to_owned(),
            (None, false) => self.log_level.clone(),
        }
    }

    /// The log format: `--zap-encoder`, else text with `--zap-devel`, else `--log-format`.
    pub fn log_format(&self) -> crate::logging::LogFormat {
        match (self.zap.encoder, self.zap.devel) {
            (Some(format), _) => format,
            (None, true) => crate::logging::LogFormat::Text,
            (None, false) => self.log_format,
        }
    }

    /// The leader election these flags ask for, if any.
    pub fn leader_election(&self) -> Option<LeaderElection> {
        self.leader_elect.then(|| LeaderElection {
            lease: self.leader_election_id.clone(),
            namespace: self.lease_namespace().to_owned(),
            duration: self.leader_elect_lease_duration,
        })
    }

    /// The Gardener project namespace, `garden-<project>`.
    pub fn gardener_namespace(&self) -> String {
        format!("garden-{}", self.gardener_project_name)
    }

    /// The namespace of the leader-election Lease.
    pub fn lease_namespace(&self) -> &str {
        self.leader_election_namespace
            .as_deref()
            .unwrap_or(&self.namespace)
    }
}

/// Parses Go-style bind addresses: `:8080` means every interface.
pub fn parse_bind_address(s: &str) -> Result<SocketAddr, String> {
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_owned()
    };
    full.parse()
        .map_err(|e| format!("bind address {s:?} is not host:port or :port ({e})"))
}

/// Parses a port number given as text (upstream's flag is a string); 0 is refused.
pub fn parse_port(s: &str) -> Result<String, String> {
    match s.parse::<u16>() {
        Ok(p) if p > 0 => Ok(s.to_owned()),
        _ => Err(format!("{s:?} is not a port (1-65535)")),
    }
}

/// Parses `--leader-elect-lease-duration`: a duration of whole seconds, at least 2s (the
/// Lease records whole seconds, and the leader renews every 2/15 of it).
pub fn parse_lease_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.subsec_nanos() != 0 || d < Duration::from_secs(2) {
        return Err(format!(
            "--leader-elect-lease-duration {s:?} must be whole seconds and at least 2s, e.g. 15s"
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    #[test]
    fn upstream_defaults() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        let a = cli.run;
        assert_eq!(a.metrics_bind_address.port(), 8080);
        assert_eq!(a.health_probe_bind_address.port(), 8081);
        assert!(!a.leader_elect);
        assert!(a.audit_log_mandatory);
        assert_eq!(a.gardener_request_timeout, Duration::from_secs(3));
        assert_eq!(a.gardener_write_timeout, Duration::from_secs(30));
        assert_eq!(a.kubeconfig_expiration_time, Duration::from_secs(86400));
        assert_eq!(a.gardener_namespace(), "garden-gardener-project");
        assert_eq!(a.deletion_grace_period, None);
        assert!(!a.api_server_acl_enabled);
        assert!(a.network_restriction_enabled);
        assert_eq!(
            a.settings().unwrap().runtime.bootstrapper,
            kim_shared::bootstrapper::Settings::default()
        );
    }

    #[test]
    fn runtime_bootstrapper_flags() {
        let cli = Cli::try_parse_from([
            "x",
            "--runtime-bootstrapper-enabled",
            "--runtime-bootstrapper-kcp-pull-secret-name=pull",
            "--runtime-bootstrapper-skr-namespace",
            "rtb",
        ])
        .unwrap();
        let b = cli.run.settings().unwrap().runtime.bootstrapper;
        assert!(b.enabled);
        assert_eq!(b.kcp_pull_secret_name, "pull");
        assert_eq!(b.skr_namespace, "rtb");
        assert_eq!(b.skr_deployment_name, "rt-bootstrapper-controller-manager");
    }

    #[test]
    fn go_style_flags() {
        let cli = Cli::try_parse_from([
            "x",
            "--leader-elect",
            "--audit-log-mandatory=false",
            "--gardener-ctrl-reconcilation-timeout=2m",
            "--gardener-project-name=kyma-dev",
            "--metrics-bind-address=127.0.0.1:9090",
            "--api-server-acl-enabled",
            "--network-restriction-enabled=false",
        ])
        .unwrap();
        let a = cli.run;
        assert!(a.leader_elect);
        assert!(!a.audit_log_mandatory);
        assert_eq!(
            a.gardener_ctrl_reconciliation_timeout,
            Duration::from_secs(120)
        );
        assert_eq!(a.gardener_namespace(), "garden-kyma-dev");
        assert_eq!(a.metrics_bind_address.to_string(), "127.0.0.1:9090");
        let runtime = a.settings().unwrap().runtime;
        assert!(runtime.api_server_acl);
        assert!(!runtime.network_restriction);
    }

    #[test]
    fn runtime_access_flags_reach_the_run_arguments() {
        let a = Cli::try_parse_from(["x"]).unwrap().run;
        assert_eq!(a.access, AccessArgs::default());
        let a = Cli::try_parse_from([
            "x",
            "--access-token-expiration=2h",
            "--access-protected-namespaces=monitoring",
        ])
        .unwrap()
        .run;
        assert_eq!(a.access.token_expiration, Duration::from_secs(7200));
        assert!(
            a.access
                .settings()
                .policy
                .is_protected_namespace("monitoring")
        );
    }

    #[test]
    fn lease_duration_flag() {
        let election = |args: &[&str]| {
            let a = Cli::try_parse_from(["x", "--leader-elect"].iter().chain(args))
                .unwrap()
                .run;
            a.leader_election().unwrap()
        };
        let default = election(&[]);
        assert_eq!(default.duration, Duration::from_secs(15));
        assert_eq!(default.renew_deadline(), Duration::from_secs(10));
        assert_eq!(default.retry_period(), Duration::from_secs(2));
        let short = election(&["--leader-elect-lease-duration=3s"]);
        assert_eq!(short.duration, Duration::from_secs(3));
        assert_eq!(short.renew_deadline(), Duration::from_secs(2));
        for bad in ["1s", "2500ms", "soon"] {
            let arg = format!("--leader-elect-lease-duration={bad}");
            assert!(Cli::try_parse_from(["x", arg.as_str()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn token_lifetimes_under_ten_minutes_are_refused_at_start() {
        assert_eq!(parse_token_lifetime("10m"), Ok(Duration::from_secs(600)));
        let err = parse_token_lifetime("5m").unwrap_err();
        assert!(err.contains("5m") && err.contains("600 s"), "{err}");
        assert!(parse_token_lifetime("soon").is_err());
    }

    #[test]
    fn policy_flags_take_comma_separated_lists() {
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            access: AccessArgs,
        }
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("kim-controller").chain(args.iter().copied()))
                .map(|c| c.access)
        };
        let a = parse(&[]).unwrap();
        assert_eq!(a.settings().policy, AccessPolicy::default());
        let a = parse(&[
            "--access-protected-namespaces=monitoring,observability",
            "--access-allowed-role-refs=ClusterRole/view,Role/apps/reader",
            "--access-shoot-request-timeout=5s",
        ])
        .unwrap();
        let p = a.settings().policy;
        assert!(p.is_protected_namespace("monitoring"));
        assert_eq!(p.allowed_role_refs.len(), 2);
        assert_eq!(a.shoot_request_timeout, Duration::from_secs(5));
        assert!(parse(&["--access-allowed-role-refs=view"]).is_err());
        assert!(
            parse(&["--access-allow-wildcards"]).is_err(),
            "the wildcard switch is gone"
        );
    }

    #[test]
    fn rotation_ratio_is_refused_outside_its_range() {
        assert_eq!(parse_rotation_ratio("0.01"), Ok(0.01));
        assert_eq!(parse_rotation_ratio("0.95"), Ok(0.95));
        for bad in ["0", "0.009", "0.96", "1", "-0.5", "NaN", "eighty"] {
            let err = parse_rotation_ratio(bad).unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }

    #[test]
    fn the_access_worker_count_has_its_own_flag() {
        let a = Cli::try_parse_from(["x", "--access-ctrl-workers-cnt=3"])
            .unwrap()
            .run;
        let s = a.settings().unwrap();
        assert_eq!(s.access.workers, 3);
        assert_eq!(s.gardener_cluster.workers, 25);
    }

    #[test]
    fn kubeconfig_rotation_flags_out_of_range_fail_the_start() {
        let a = Cli::try_parse_from(["x", "--minimal-rotation-time=1.5"])
            .unwrap()
            .run;
        assert!(a.settings().is_err());
    }
}
