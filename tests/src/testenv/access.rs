//! Access to one API server: URL, CA, credentials, kubeconfig files and `kube::Client`s.
//!
//! Clients are made fresh on every call: a `kube::Client` is tied to the tokio runtime that
//! created it, and tests sharing one environment each run their own runtime.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::pki::CertPair;

/// Errors building clients or kubeconfigs.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The kubeconfig text did not parse or load (the text itself is never printed).
    #[error("kubeconfig for {cluster} is invalid: {source}")]
    Kubeconfig {
        /// Cluster name.
        cluster: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The client could not be built.
    #[error("building a client for {cluster}: {source}")]
    Client {
        /// Cluster name.
        cluster: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// Writing a kubeconfig file failed.
    #[error("writing kubeconfig {path}: {source}")]
    Write {
        /// Path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// How to reach one API server.
#[derive(Debug, Clone)]
pub struct ClusterAccess {
    /// Short name used for contexts and files (`kcp`, `shoot`, ...).
    pub name: String,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// The CA that signed the server's serving certificate.
    pub ca_pem: String,
    /// Client certificate of the admin user (in `system:masters`).
    pub admin: CertPair,
    /// Default namespace written into kubeconfigs.
    pub namespace: Option<String>,
}

/// Credentials of a kubeconfig user.
pub enum Credentials<'a> {
    /// Client certificate and key.
    Cert(&'a CertPair),
    /// Bearer token.
    Token(&'a str),
    /// The admin certificate, impersonating a user with groups (for users in several groups:
    /// rcgen writes one `O` attribute per certificate, Kubernetes reads groups from all).
    Impersonate(&'a str, &'a [&'a str]),
}

impl ClusterAccess {
    /// The admin kubeconfig as YAML.
    pub fn admin_kubeconfig(&self) -> String {
        self.kubeconfig("admin", Credentials::Cert(&self.admin))
    }

    /// A kubeconfig for `user` with the given credentials.
    pub fn kubeconfig(&self, user: &str, creds: Credentials<'_>) -> String {
        let cred_lines = match creds {
            Credentials::Cert(pair) => format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                B64.encode(&pair.cert_pem),
                B64.encode(&pair.key_pem)
            ),
            Credentials::Token(t) => format!("    token: {t}\n"),
            Credentials::Impersonate(as_user, groups) => {
                let mut lines = format!(
                    "    client-certificate-data: {}\n    client-key-data: {}\n    as: {as_user:?}\n",
                    B64.encode(&self.admin.cert_pem),
                    B64.encode(&self.admin.key_pem)
                );
                if !groups.is_empty() {
                    lines.push_str("    as-groups:\n");
                    for g in groups.iter() {
                        lines.push_str(&format!("    - {g:?}\n"));
                    }
                }
                lines
            }
        };
        let ns = self
            .namespace
            .as_deref()
            .map(|n| format!("    namespace: {n}\n"))
            .unwrap_or_default();
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n{cred_lines}contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {user}\n{ns}current-context: {name}\n",
            name = self.name,
            server = self.server,
            ca = B64.encode(&self.ca_pem),
        )
    }

    /// Writes the admin kubeconfig to `path` (mode 0600: it holds a private key).
    pub fn write_admin_kubeconfig(&self, path: &Path) -> Result<PathBuf, AccessError> {
        write_private(path, &self.admin_kubeconfig())?;
        Ok(path.to_path_buf())
    }

    /// A client for the admin user.
    pub async fn admin_client(&self) -> Result<kube::Client, AccessError> {
        client_from_yaml(&self.name, &self.admin_kubeconfig()).await
    }

    /// A client from kubeconfig YAML for this cluster.
    pub async fn client_from_yaml(&self, yaml: &str) -> Result<kube::Client, AccessError> {
        client_from_yaml(&self.name, yaml).await
    }

    /// A client for `user` with the given credentials.
    pub async fn client(
        &self,
        user: &str,
        creds: Credentials<'_>,
    ) -> Result<kube::Client, AccessError> {
        client_from_yaml(&self.name, &self.kubeconfig(user, creds)).await
    }
}

/// Builds a client from kubeconfig YAML (current context).
pub async fn client_from_yaml(cluster: &str, yaml: &str) -> Result<kube::Client, AccessError> {
    let kc = Kubeconfig::from_yaml(yaml).map_err(|source| AccessError::Kubeconfig {
        cluster: cluster.to_string(),
        source,
    })?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|source| AccessError::Kubeconfig {
            cluster: cluster.to_string(),
            source,
        })?;
    kube::Client::try_from(config).map_err(|source| AccessError::Client {
        cluster: cluster.to_string(),
        source,
    })
}

/// Writes a file readable only by the owner.
pub fn write_private(path: &Path, contents: &str) -> Result<(), AccessError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| AccessError::Write {
        path: path.display().to_string(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    f.write_all(contents.as_bytes()).map_err(err)
}
