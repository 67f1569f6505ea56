//! Command-line flags and environment variables (clap).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Admission webhook of the Kyma Infrastructure Manager.
#[derive(Debug, Parser)]
#[command(name = "kim-webhook", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the admission webhook server.
    Serve(Box<ServeArgs>),
    /// Validate Runtime and GardenerCluster manifests offline with the webhook's rules
    /// (after defaulting). Exit code 1 when any object is invalid, 2 on unreadable input.
    Validate(ValidateArgs),
}

fn duration(s: &str) -> Result<Duration, String> {
    kim_shared::duration::parse_duration(s)
}

fn tls_min_version(s: &str) -> Result<kim_certs::TlsMinVersion, String> {
    s.parse()
}

/// Where the KIM configuration files are (the same files as the controller's).
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// `converter_config.json` (defaults and allowed values).
    #[arg(
        long = "converter-config-filepath",
        env = "KIM_CONVERTER_CONFIG",
        value_name = "FILE"
    )]
    pub converter_config: PathBuf,
    /// Audit-log tenant file; default: `converter.auditLogging.tenantConfigPath`.
    #[arg(
        long = "audit-log-tenant-config-filepath",
        env = "KIM_AUDIT_LOG_TENANT_CONFIG",
        value_name = "FILE"
    )]
    pub audit_log_tenants: Option<PathBuf>,
    /// Maintenance window file; default: `converter.maintenanceWindow.windowMapPath`.
    #[arg(
        long = "maintenance-window-config-filepath",
        env = "KIM_MAINTENANCE_WINDOW_CONFIG",
        value_name = "FILE"
    )]
    pub maintenance_windows: Option<PathBuf>,
}

/// Flags of `kim-webhook serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// KIM configuration.
    #[command(flatten)]
    pub config: ConfigArgs,

    /// HTTPS address of the admission endpoints.
    #[arg(long, env = "KIM_WEBHOOK_LISTEN_ADDR", default_value = "0.0.0.0:9443")]
    pub listen_addr: SocketAddr,
    /// Plain-HTTP address of /healthz, /readyz and /metrics.
    #[arg(long, env = "KIM_WEBHOOK_ADMIN_ADDR", default_value = "0.0.0.0:8081")]
    pub admin_addr: SocketAddr,
    /// Largest accepted request body; larger ones get 413. The default fits the largest
    /// review the apiserver sends (two objects of etcd's 1.5 MiB and the envelope).
    #[arg(long, env = "KIM_WEBHOOK_MAX_REQUEST_BYTES", default_value_t = crate::server::DEFAULT_MAX_REQUEST_BYTES)]
    pub max_request_bytes: usize,
    /// Request body bytes that bodies larger than 64 KiB may hold in memory together; such a
    /// body reserves its size first and waits (its connection not read) until it fits. At
    /// least one largest body.
    #[arg(long, env = "KIM_WEBHOOK_MAX_BUFFERED_REQUEST_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_buffered_request_bytes: usize,
    /// Admission requests in flight; beyond, requests get 503 at once (load shedding).
    #[arg(
        long,
        env = "KIM_WEBHOOK_MAX_REQUESTS_IN_FLIGHT",
        default_value_t = 1024
    )]
    pub max_requests_in_flight: usize,
    /// Open connections on the admission port; beyond, new ones wait in the listen backlog.
    #[arg(long, env = "KIM_WEBHOOK_MAX_CONNECTIONS", default_value_t = 256)]
    pub max_connections: usize,
    /// Concurrent streams per HTTP/2 connection.
    #[arg(
        long = "http2-max-concurrent-streams",
        env = "KIM_WEBHOOK_HTTP2_MAX_CONCURRENT_STREAMS",
        default_value_t = 32
    )]
    pub http2_max_concurrent_streams: u32,
    /// Reviews larger than 64 KiB decoded and checked at the same time; the others wait, their
    /// bodies read. Typing a review takes several times its size in memory.
    #[arg(
        long,
        env = "KIM_WEBHOOK_MAX_CONCURRENT_LARGE_REVIEWS",
        default_value_t = 2
    )]
    pub max_concurrent_large_reviews: usize,
    /// Time a client has for the TLS handshake.
    #[arg(long, env = "KIM_WEBHOOK_TLS_HANDSHAKE_TIMEOUT", default_value = "5s", value_parser = duration)]
    pub tls_handshake_timeout: Duration,
    /// Time a client has to send the headers of an HTTP/1.1 request, and the first request
    /// of a connection after its handshake.
    #[arg(long, env = "KIM_WEBHOOK_HEADER_READ_TIMEOUT", default_value = "5s", value_parser = duration)]
    pub header_read_timeout: Duration,
    /// Time an HTTP/2 connection may stay without a request in flight before it is closed
    /// (GOAWAY); the apiserver opens a new one when it needs one.
    #[arg(long, env = "KIM_WEBHOOK_IDLE_TIMEOUT", default_value = "60s", value_parser = duration)]
    pub idle_timeout: Duration,
    /// Time for a whole admission request after its headers (body and answer); at least the
    /// largest `timeoutSeconds` of the webhook configurations.
    #[arg(long, env = "KIM_WEBHOOK_REQUEST_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub request_timeout: Duration,
    /// CA bundle (PEM): when set, the admission port requires a client certificate that chains
    /// to it (the kube-apiserver's, configured in its AdmissionConfiguration); the admin port
    /// stays open. Read at start.
    #[arg(long, env = "KIM_WEBHOOK_CLIENT_CA_FILE", value_name = "FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// After SIGTERM, how long the webhook reports not ready while it keeps serving, so that the
    /// Service's endpoints drop it before it stops accepting connections.
    #[arg(long, env = "KIM_WEBHOOK_SHUTDOWN_DELAY", default_value = "5s", value_parser = duration)]
    pub shutdown_delay: Duration,
    /// How long open connections may finish after the shutdown delay.
    #[arg(long, env = "KIM_WEBHOOK_SHUTDOWN_GRACE", default_value = "10s", value_parser = duration)]
    pub shutdown_grace: Duration,

    /// Kubeconfig of the Gardener API (the controller's `--gardener-kubeconfig-path`): the
    /// webhook watches the CloudProfiles through it (read-only) and checks Runtimes against
    /// them. Without it only the configuration's rules apply.
    #[arg(
        long,
        env = "KIM_WEBHOOK_GARDENER_KUBECONFIG_PATH",
        value_name = "FILE"
    )]
    pub gardener_kubeconfig_path: Option<PathBuf>,

    /// Deny DELETE of a Runtime without a recent `operator.kyma-project.io/deletion-confirmed`
    /// annotation (`--deletion-protection=false` switches it off).
    #[arg(long, env = "KIM_WEBHOOK_DELETION_PROTECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub deletion_protection: bool,
    /// How old a deletion confirmation may be.
    #[arg(long, env = "KIM_WEBHOOK_DELETION_WINDOW", default_value = "2m", value_parser = duration)]
    pub deletion_window: Duration,
    /// Users, as the apiserver authenticates them, whose Runtime deletes need no confirmation
    /// (comma-separated; `""` for none): KEB's ServiceAccount deprovisions without the
    /// annotation.
    #[arg(
        long,
        env = "KIM_WEBHOOK_DELETION_TRUSTED_PRINCIPALS",
        value_delimiter = ',',
        default_value = kim_shared::validation::DeletionPolicy::KEB_SERVICE_ACCOUNT
    )]
    pub deletion_trusted_principals: Vec<String>,

    /// Refuse a Runtime whose provider and region have no audit-log tenant (upstream's
    /// `--audit-log-mandatory`; set it as the controller's, `=false` turns the refusal into a
    /// warning).
    #[arg(long, env = "KIM_WEBHOOK_AUDIT_LOG_MANDATORY", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub audit_log_mandatory: bool,

    /// Namespaces of the runtime clusters a RuntimeAccess may not use, besides kube-*,
    /// garden*, kyma-system and istio-system (comma-separated; the same as the controller's).
    #[arg(
        long = "access-protected-namespaces",
        env = "KIM_WEBHOOK_ACCESS_PROTECTED_NAMESPACES",
        value_delimiter = ','
    )]
    pub runtime_access_protected_namespaces: Vec<String>,
    /// Existing roles a RuntimeAccess may bind with `spec.roleRef`, as ClusterRole/<name> or
    /// Role/<namespace>/<name>, each optionally =<user> for the RuntimeAccesses that user
    /// created only (comma-separated; the same as the controller's). Empty: none, only rules.
    #[arg(
        long = "access-allowed-role-refs",
        env = "KIM_WEBHOOK_ACCESS_ALLOWED_ROLE_REFS",
        value_delimiter = ','
    )]
    pub runtime_access_allowed_role_refs: Vec<kim_shared::access::AllowedRoleRef>,
    /// Longest token lifetime a RuntimeAccess may ask for.
    #[arg(long = "access-max-token-expiration", env = "KIM_WEBHOOK_ACCESS_MAX_TOKEN_EXPIRATION", default_value = "24h", value_parser = duration)]
    pub runtime_access_max_token_expiration: Duration,

    /// Also append audit records (JSON lines) to this file.
    #[arg(long, env = "KIM_WEBHOOK_AUDIT_LOG_PATH", value_name = "FILE")]
    pub audit_log_path: Option<PathBuf>,
    /// Rotate the audit file when it would exceed this many MiB.
    #[arg(long, env = "KIM_WEBHOOK_AUDIT_LOG_MAX_SIZE_MB", default_value_t = 100)]
    pub audit_log_max_size_mb: u64,
    /// Rotated audit files to keep.
    #[arg(long, env = "KIM_WEBHOOK_AUDIT_LOG_MAX_FILES", default_value_t = 5)]
    pub audit_log_max_files: usize,

    /// Oldest TLS version accepted on the admission port: `1.2` or `1.3` (recommended where
    /// every apiserver speaks it).
    #[arg(long, env = "KIM_WEBHOOK_TLS_MIN_VERSION", default_value = "1.2", value_parser = clap::builder::ValueParser::new(tls_min_version))]
    pub tls_min_version: kim_certs::TlsMinVersion,

    /// Certificates.
    #[command(flatten)]
    pub certs: CertArgs,

    /// Log format.
    #[arg(long, env = "KIM_WEBHOOK_LOG_FORMAT", default_value = "json")]
    pub log_format: kim_process::logging::LogFormat,
}

/// Certificate flags.
#[derive(Debug, Clone, Args)]
pub struct CertArgs {
    /// Serve this certificate (PEM) instead of managing certificates in a Secret; re-read
    /// when the file changes (e.g. from cert-manager). Needs --tls-key-file.
    #[arg(
        long,
        env = "KIM_WEBHOOK_TLS_CERT_FILE",
        requires = "tls_key_file",
        value_name = "FILE"
    )]
    pub tls_cert_file: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert-file.
    #[arg(
        long,
        env = "KIM_WEBHOOK_TLS_KEY_FILE",
        requires = "tls_cert_file",
        value_name = "FILE"
    )]
    pub tls_key_file: Option<PathBuf>,

    /// Namespace of the certificate Secret (and of the Service).
    #[arg(long, env = "POD_NAMESPACE", default_value = "kcp-system")]
    pub namespace: String,
    /// Secret holding the CAs and the serving certificate.
    #[arg(
        long,
        env = "KIM_WEBHOOK_CERT_SECRET",
        default_value = "infrastructure-manager-webhook-cert"
    )]
    pub cert_secret: String,
    /// Service name; the serving certificate names `<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc`, ...
    #[arg(
        long,
        env = "KIM_WEBHOOK_SERVICE_NAME",
        default_value = "infrastructure-manager-webhook-service"
    )]
    pub service_name: String,
    /// Extra DNS names for the serving certificate (comma separated).
    #[arg(long, env = "KIM_WEBHOOK_CERT_DNS_NAMES", value_delimiter = ',')]
    pub cert_dns_names: Vec<String>,
    /// IP addresses for the serving certificate (comma separated), e.g. 127.0.0.1 in tests.
    #[arg(long, env = "KIM_WEBHOOK_CERT_IP_ADDRESSES", value_delimiter = ',')]
    pub cert_ip_addresses: Vec<IpAddr>,
    /// MutatingWebhookConfigurations whose caBundle this webhook maintains.
    #[arg(
        long,
        env = "KIM_WEBHOOK_MUTATING_CONFIGS",
        value_delimiter = ',',
        default_value = "infrastructure-manager-mutating-webhook"
    )]
    pub mutating_configs: Vec<String>,
    /// ValidatingWebhookConfigurations whose caBundle this webhook maintains.
    #[arg(
        long,
        env = "KIM_WEBHOOK_VALIDATING_CONFIGS",
        value_delimiter = ',',
        default_value = "infrastructure-manager-validating-webhook"
    )]
    pub validating_configs: Vec<String>,
    /// Field manager of the caBundle (server-side apply) and of the Secret.
    #[arg(long, env = "KIM_WEBHOOK_FIELD_MANAGER", default_value = "kim-webhook")]
    pub field_manager: String,
    /// Lifetime of a generated CA.
    #[arg(long, env = "KIM_WEBHOOK_CA_LIFETIME", default_value = "5y", value_parser = duration)]
    pub ca_lifetime: Duration,
    /// Lifetime of a serving certificate.
    #[arg(long, env = "KIM_WEBHOOK_SERVING_LIFETIME", default_value = "90d", value_parser = duration)]
    pub serving_lifetime: Duration,
    /// Renew the CA when less than this is left (default: a third of its lifetime, widened
    /// when needed so the next CA is trusted before a serving certificate needs it).
    #[arg(long, env = "KIM_WEBHOOK_CA_RENEW_BEFORE", value_parser = duration)]
    pub ca_renew_before: Option<Duration>,
    /// Renew the serving certificate when less than this is left (default: a third of its
    /// lifetime).
    #[arg(long, env = "KIM_WEBHOOK_SERVING_RENEW_BEFORE", value_parser = duration)]
    pub serving_renew_before: Option<Duration>,
    /// How long a new CA sits in the caBundle before it signs serving certificates.
    #[arg(long, env = "KIM_WEBHOOK_BUNDLE_PROPAGATION", default_value = "10m", value_parser = duration)]
    pub bundle_propagation: Duration,
    /// How often the wall clock and the Secret are checked.
    #[arg(long, env = "KIM_WEBHOOK_CERT_CHECK_INTERVAL", default_value = "30s", value_parser = duration)]
    pub cert_check_interval: Duration,
}

/// Flags of `kim-webhook validate`.
#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    /// Manifests to check (YAML, several documents per file allowed; `-` reads stdin).
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// KIM configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Check as an UPDATE is not possible offline; this checks CREATE after defaulting.
    /// Print the defaulted objects too.
    #[arg(long)]
    pub show_defaulted: bool,
}

impl ServeArgs {
    /// The listener limits these flags describe.
    pub fn limits(&self) -> crate::server::Limits {
        crate::server::Limits {
            tls_handshake_timeout: self.tls_handshake_timeout,
            header_read_timeout: self.header_read_timeout,
            request_timeout: self.request_timeout,
            max_connections: self.max_connections,
            max_requests_in_flight: self.max_requests_in_flight,
            max_buffered_request_bytes: self.max_buffered_request_bytes,
            http2_max_concurrent_streams: self.http2_max_concurrent_streams,
            max_concurrent_large_reviews: self.max_concurrent_large_reviews,
            idle_timeout: self.idle_timeout,
        }
    }
}

impl CertArgs {
    /// The rotation policy these flags describe.
    pub fn policy(&self) -> kim_certs::RotationPolicy {
        let mut p = kim_certs::RotationPolicy::from_lifetimes(
            self.ca_lifetime,
            self.serving_lifetime,
            self.bundle_propagation,
            self.cert_check_interval,
        );
        if let Some(d) = self.ca_renew_before {
            p.ca_renew_before = d;
        }
        if let Some(d) = self.serving_renew_before {
            p.serving_renew_before = d;
        }
        p
    }

    /// The names the serving certificate must carry.
    pub fn names(&self) -> kim_certs::ServingNames {
        let mut n = kim_certs::ServingNames::for_service(&self.service_name, &self.namespace);
        n.dns.extend(
            self.cert_dns_names
                .iter()
                .filter(|d| !d.is_empty())
                .cloned(),
        );
        n.ips.extend(self.cert_ip_addresses.iter().copied());
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_with_defaults() {
        let cli = Cli::try_parse_from([
            "kim-webhook",
            "serve",
            "--converter-config-filepath",
            "/c.json",
        ])
        .expect("parse");
        let Command::Serve(a) = cli.command else {
            panic!("serve expected")
        };
        assert!(a.deletion_protection);
        assert_eq!(a.deletion_window, Duration::from_secs(120));
        assert_eq!(a.certs.policy().validate(), Ok(()));
        assert_eq!(a.tls_min_version, kim_certs::TlsMinVersion::Tls12);
        assert_eq!(a.max_request_bytes, 3584 * 1024);
        assert!(a.client_ca_file.is_none());
        let limits = a.limits();
        let defaults = crate::server::Limits::default();
        assert_eq!(limits.request_timeout, defaults.request_timeout);
        assert_eq!(limits.header_read_timeout, defaults.header_read_timeout);
        assert_eq!(limits.idle_timeout, defaults.idle_timeout);
        assert_eq!(limits.tls_handshake_timeout, defaults.tls_handshake_timeout);
        assert_eq!(limits.max_connections, defaults.max_connections);
        assert_eq!(
            limits.max_requests_in_flight,
            defaults.max_requests_in_flight
        );
        assert_eq!(
            limits.max_buffered_request_bytes,
            defaults.max_buffered_request_bytes
        );
        assert_eq!(
            limits.http2_max_concurrent_streams,
            defaults.http2_max_concurrent_streams
        );
        assert_eq!(
            limits.max_concurrent_large_reviews,
            defaults.max_concurrent_large_reviews
        );
        assert!(
            a.certs
                .names()
                .dns
                .contains(&"infrastructure-manager-webhook-service.kcp-system.svc".to_string())
        );
    }

    #[test]
    fn tls_min_version_is_a_flag() {
        let parse = |v: &str| {
            Cli::try_parse_from([
                "kim-webhook",
                "serve",
                "--converter-config-filepath",
                "/c.json",
                "--tls-min-version",
                v,
            ])
        };
        let Ok(Cli {
            command: Command::Serve(a),
        }) = parse("1.3")
        else {
            panic!("1.3 must parse")
        };
        assert_eq!(a.tls_min_version, kim_certs::TlsMinVersion::Tls13);
        assert!(parse("1.0").is_err());
    }

    #[test]
    fn deletion_protection_can_be_switched_off() {
        let cli = Cli::try_parse_from([
            "kim-webhook",
            "serve",
            "--converter-config-filepath",
            "/c.json",
            "--deletion-protection=false",
            "--deletion-window",
            "5m",
        ])
        .expect("parse");
        let Command::Serve(a) = cli.command else {
            panic!("serve expected")
        };
        assert!(!a.deletion_protection);
        assert_eq!(a.deletion_window, Duration::from_secs(300));
        assert_eq!(
            a.deletion_trusted_principals,
            ["system:serviceaccount:kcp-system:kcp-kyma-environment-broker"]
        );
        let cli = Cli::try_parse_from([
            "kim-webhook",
            "serve",
            "--converter-config-filepath",
            "/c.json",
            "--deletion-trusted-principals=",
        ])
        .expect("parse");
        let Command::Serve(a) = cli.command else {
            panic!("serve expected")
        };
        assert!(
            a.deletion_trusted_principals.iter().all(String::is_empty),
            "none trusted"
        );
    }

    #[test]
    fn access_flags_match_the_controllers_names() {
        let cli = Cli::try_parse_from([
            "kim-webhook",
            "serve",
            "--converter-config-filepath",
            "/c.json",
            "--access-protected-namespaces=istio-system,monitoring",
            "--access-allowed-role-refs=ClusterRole/view,Role/apps/reader",
            "--access-max-token-expiration",
            "2h",
        ])
        .expect("parse");
        let Command::Serve(a) = cli.command else {
            panic!("serve expected")
        };
        assert_eq!(
            a.runtime_access_protected_namespaces,
            vec!["istio-system".to_owned(), "monitoring".to_owned()]
        );
        assert_eq!(
            a.runtime_access_allowed_role_refs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec!["ClusterRole/view", "Role/apps/reader"]
        );
        let bad = Cli::try_parse_from([
            "kim-webhook",
            "serve",
            "--converter-config-filepath",
            "/c.json",
            "--access-allowed-role-refs=view",
        ]);
        assert!(bad.is_err(), "a role reference without its kind is refused");
        assert_eq!(
            a.runtime_access_max_token_expiration,
            Duration::from_secs(7200)
        );
    }

    #[test]
    fn bad_duration_names_examples() {
        let err = Cli::try_parse_from([
            "kim-webhook",
            "serve",
            "--converter-config-filepath",
            "/c.json",
            "--serving-lifetime",
            "soon",
        ])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            err.contains("--serving-lifetime") && err.contains("like 3s, 90m, 24h or 90d"),
            "{err}"
        );
    }

    #[test]
    fn validate_takes_several_files() {
        let cli = Cli::try_parse_from([
            "kim-webhook",
            "validate",
            "-f",
            "a.yaml",
            "b.yaml",
            "--converter-config-filepath",
            "c.json",
        ])
        .expect("parse");
        let Command::Validate(v) = cli.command else {
            panic!("validate expected")
        };
        assert_eq!(v.files.len(), 2);
    }
}
