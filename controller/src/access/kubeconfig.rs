//! The token kubeconfig of a [`RuntimeAccess`](kim_shared::api::runtime_access::RuntimeAccess),
//! built from the admin kubeconfig's cluster entry (server and CA) and a ServiceAccount token.
//! Pure; errors never quote the kubeconfig.

use kube::config::Kubeconfig;
use serde_json::json;

/// Why no token kubeconfig could be built. Messages name what is missing, never values.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KubeconfigError {
    /// The admin kubeconfig is not a kubeconfig.
    #[error("the admin kubeconfig Secret does not hold a readable kubeconfig")]
    Unreadable,
    /// The admin kubeconfig has no usable cluster entry.
    #[error("the admin kubeconfig has no cluster with a server for its current context")]
    NoCluster,
    /// The YAML could not be written.
    #[error("cannot write the token kubeconfig")]
    Write,
}

/// Server and CA of the cluster the admin kubeconfig's current context points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterEndpoint {
    /// Name of the cluster entry (kept, so the context name says which shoot it is).
    pub name: String,
    /// API server URL.
    pub server: String,
    /// Base64 CA bundle, if the admin kubeconfig has one.
    pub ca_data: Option<String>,
}

/// Reads the current context's cluster from an admin kubeconfig.
pub fn cluster_endpoint(admin_kubeconfig: &str) -> Result<ClusterEndpoint, KubeconfigError> {
    let kc = Kubeconfig::from_yaml(admin_kubeconfig).map_err(|_| KubeconfigError::Unreadable)?;
    let context_cluster = kc
        .current_context
        .as_ref()
        .and_then(|cur| kc.contexts.iter().find(|c| &c.name == cur))
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone());
    let named = match context_cluster {
        Some(name) => kc.clusters.iter().find(|c| c.name == name),
        None => kc.clusters.first(),
    }
    .ok_or(KubeconfigError::NoCluster)?;
    let cluster = named.cluster.as_ref().ok_or(KubeconfigError::NoCluster)?;
    let server = cluster.server.clone().ok_or(KubeconfigError::NoCluster)?;
    Ok(ClusterEndpoint {
        name: named.name.clone(),
        server,
        ca_data: cluster.certificate_authority_data.clone(),
    })
}

/// A kubeconfig for `user` (`system:serviceaccount:<ns>:<name>`) with `token`, whose default
/// namespace is the ServiceAccount's.
pub fn token_kubeconfig(
    endpoint: &ClusterEndpoint,
    user: &str,
    namespace: &str,
    token: &str,
) -> Result<Vec<u8>, KubeconfigError> {
    let mut cluster = json!({ "server": endpoint.server });
    if let Some(ca) = &endpoint.ca_data {
        cluster["certificate-authority-data"] = json!(ca);
    }
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": endpoint.name, "cluster": cluster }],
        "users": [{ "name": user, "user": { "token": token } }],
        "contexts": [{
            "name": endpoint.name,
            "context": { "cluster": endpoint.name, "user": user, "namespace": namespace }
        }],
        "current-context": endpoint.name,
    });
    serde_yaml_ng::to_string(&doc)
        .map(String::into_bytes)
        .map_err(|_| KubeconfigError::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADMIN: &str = r#"
apiVersion: v1
kind: Config
current-context: garden-kyma--s1-external
clusters:
- name: garden-kyma--s1-internal
  cluster: {server: "https://internal", certificate-authority-data: SU5U}
- name: garden-kyma--s1-external
  cluster: {server: "https://external", certificate-authority-data: RVhU}
contexts:
- name: garden-kyma--s1-external
  context: {cluster: garden-kyma--s1-external, user: garden-kyma--s1-external}
users:
- name: garden-kyma--s1-external
  user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}
"#;

    #[test]
    fn takes_the_current_context_cluster() {
        let e = cluster_endpoint(ADMIN).unwrap();
        assert_eq!(e.server, "https://external");
        assert_eq!(e.ca_data.as_deref(), Some("RVhU"));
        assert_eq!(e.name, "garden-kyma--s1-external");
    }

    #[test]
    fn token_kubeconfig_has_only_the_token_and_no_admin_credentials() {
        let e = cluster_endpoint(ADMIN).unwrap();
        let yaml = String::from_utf8(
            token_kubeconfig(
                &e,
                "system:serviceaccount:kyma-system:klm",
                "kyma-system",
                "tok",
            )
            .unwrap(),
        )
        .unwrap();
        let kc = Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(
            kc.current_context.as_deref(),
            Some("garden-kyma--s1-external")
        );
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.client_key_data.is_none() && user.client_certificate_data.is_none());
        assert!(user.token.is_some());
        assert!(
            !yaml.contains("S0VZ"),
            "admin key leaked into the token kubeconfig"
        );
        assert_eq!(
            kc.contexts[0]
                .context
                .as_ref()
                .unwrap()
                .namespace
                .as_deref(),
            Some("kyma-system")
        );
    }

    #[test]
    fn errors_do_not_quote_the_input() {
        let err = cluster_endpoint("secret-token: abc\n: : :").unwrap_err();
        assert!(!err.to_string().contains("abc"));
        assert_eq!(
            cluster_endpoint("apiVersion: v1\nkind: Config\n"),
            Err(KubeconfigError::NoCluster)
        );
    }
}
