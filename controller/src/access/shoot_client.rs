//! Clients for the shoot clusters, built from the runtimes' admin kubeconfig Secrets and kept
//! while a Secret is unchanged (same `resourceVersion`), so reconciles of several
//! RuntimeAccesses of one runtime, and later reconciles of the same one, reuse one client and
//! its connections. A client unused for [`IDLE`] goes at the next build or the next sweep
//! (every minute): most runtimes need theirs once per token rotation (48 minutes by default),
//! and a client with its TLS configuration and connection pool is tens of KiB, so keeping one
//! per runtime would grow with the fleet (10,000 runtimes: hundreds of MiB); what is kept is
//! the reconciles of the last two minutes (several requests of one runtime, a retry). Every request through such a client is counted in
//! `infrastructure_manager_im_runtime_access_shoot_requests_total{method,code}`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::kubeconfig::{ClusterEndpoint, cluster_endpoint};
use crate::metrics::RequestLabels;

/// How long a cached client may go unused before it is dropped.
pub const IDLE: Duration = Duration::from_secs(120);

/// Metrics of the shoot clients.
#[derive(Default)]
pub struct ShootMetrics {
    /// Requests sent to shoot API servers by method and response code.
    pub requests: Family<RequestLabels, Counter>,
    /// Shoot clients built (a new runtime, or a changed admin kubeconfig Secret).
    pub clients_built: Counter,
}

impl ShootMetrics {
    /// Registers the metrics in the `infrastructure_manager_im` sub-registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "runtime_access_shoot_requests",
            "Requests the RuntimeAccess reconciler sent to shoot API servers, by method and code",
            self.requests.clone(),
        );
        registry.register(
            "runtime_access_shoot_clients_built",
            "Shoot clients the RuntimeAccess reconciler built from admin kubeconfigs",
            self.clients_built.clone(),
        );
    }
}

/// Why no shoot client could be built. Messages never quote the kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum ShootClientError {
    /// The Secret value is not text.
    #[error("not UTF-8")]
    NotUtf8,
    /// No cluster entry to take the server and CA from.
    #[error(transparent)]
    Endpoint(#[from] super::kubeconfig::KubeconfigError),
    /// Unusable or not strict enough (exec plugins, files, no certificate checks).
    #[error(transparent)]
    Refused(#[from] crate::gardener::client::SecretKubeconfigError),
    /// kube cannot build the client.
    #[error("cannot build a client: {0}")]
    Build(String),
}

/// A client for one shoot and the endpoint token kubeconfigs point at.
#[derive(Clone)]
pub struct ShootAccess {
    /// Client authenticated with the admin kubeconfig.
    pub client: kube::Client,
    /// Server and CA of the shoot.
    pub endpoint: ClusterEndpoint,
}

/// The admin kubeconfig Secret a client is built from.
pub struct AdminSecret<'a> {
    /// Secret namespace.
    pub namespace: &'a str,
    /// Secret name.
    pub name: &'a str,
    /// Its `resourceVersion`; without one the client is not cached.
    pub resource_version: Option<&'a str>,
    /// The kubeconfig bytes.
    pub kubeconfig: &'a [u8],
}

struct Cached {
    resource_version: String,
    access: ShootAccess,
    /// The RuntimeAccesses that used this client; the client goes when the last of them is
    /// released (a runtime deleted after its RuntimeAccesses never has its Secret looked up
    /// again, so nothing else would drop its client).
    users: BTreeSet<String>,
    last_used: Instant,
}

/// Shoot clients by admin kubeconfig Secret.
pub struct ShootClients {
    cache: Mutex<HashMap<(String, String), Cached>>,
    metrics: Arc<ShootMetrics>,
    timeout: std::time::Duration,
    idle: Duration,
}

impl ShootClients {
    /// An empty cache whose clients count their requests in `metrics` and give up on a
    /// connect, read or write after `timeout`.
    pub fn new(metrics: Arc<ShootMetrics>, timeout: std::time::Duration) -> Self {
        Self {
            cache: Mutex::default(),
            metrics,
            timeout,
            idle: IDLE,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Cached>> {
        crate::records::lock(&self.cache)
    }

    /// The client for this Secret, for the RuntimeAccess `user` (until [`Self::release`]):
    /// the cached one while its `resourceVersion` is unchanged, else a new one (which replaces
    /// the cached one).
    pub async fn get(
        &self,
        secret: &AdminSecret<'_>,
        user: &str,
    ) -> Result<ShootAccess, ShootClientError> {
        let key = (secret.namespace.to_owned(), secret.name.to_owned());
        if let Some(rv) = secret.resource_version
            && let Some(hit) = self.lock().get_mut(&key)
            && hit.resource_version == rv
        {
            hit.users.insert(user.to_owned());
            hit.last_used = Instant::now();
            return Ok(hit.access.clone());
        }
        let access = self.build(secret.kubeconfig).await?;
        self.metrics.clients_built.inc();
        tracing::debug!(
            secret = %format!("{}/{}", secret.namespace, secret.name),
            "shoot client built"
        );
        if let Some(rv) = secret.resource_version {
            let mut cache = self.lock();
            let now = Instant::now();
            cache.retain(|_, c| now.duration_since(c.last_used) < self.idle);
            let mut users = cache.remove(&key).map(|c| c.users).unwrap_or_default();
            users.insert(user.to_owned());
            cache.insert(
                key,
                Cached {
                    resource_version: rv.to_owned(),
                    access: access.clone(),
                    users,
                    last_used: now,
                },
            );
        }
        Ok(access)
    }

    /// Drops the clients unused for [`IDLE`], so the cache shrinks when no client is built.
    pub fn drop_idle(&self) {
        let now = Instant::now();
        self.lock()
            .retain(|_, c| now.duration_since(c.last_used) < self.idle);
    }

    /// The RuntimeAccesses that hold a client.
    pub fn users(&self) -> Vec<String> {
        let mut users: Vec<String> = self
            .lock()
            .values()
            .flat_map(|c| c.users.iter().cloned())
            .collect();
        users.sort();
        users.dedup();
        users
    }

    /// The RuntimeAccess `user` is gone: drops the clients no other RuntimeAccess uses.
    pub fn release(&self, user: &str) {
        self.lock().retain(|_, c| {
            c.users.remove(user);
            !c.users.is_empty()
        });
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    /// Drops the client of a Secret that no longer exists.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.lock().remove(&(namespace.to_owned(), name.to_owned()));
    }

    async fn build(&self, kubeconfig: &[u8]) -> Result<ShootAccess, ShootClientError> {
        let yaml = std::str::from_utf8(kubeconfig).map_err(|_| ShootClientError::NotUtf8)?;
        let endpoint = cluster_endpoint(yaml)?;
        let config = crate::gardener::client::config_from_secret(kubeconfig, self.timeout).await?;
        let client = crate::gardener::client::runtime_client(config, self.metrics.requests.clone())
            .map_err(|e| ShootClientError::Build(e.to_string()))?;
        Ok(ShootAccess { client, endpoint })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADMIN: &str = r#"
apiVersion: v1
kind: Config
current-context: s1
clusters:
- name: s1
  cluster: {server: "https://127.0.0.1:1", certificate-authority-data: ""}
contexts:
- name: s1
  context: {cluster: s1, user: s1}
users:
- name: s1
  user: {token: abc}
"#;

    fn secret<'a>(rv: Option<&'a str>, kc: &'a str) -> AdminSecret<'a> {
        AdminSecret {
            namespace: "kcp-system",
            name: "kubeconfig-rt-1",
            resource_version: rv,
            kubeconfig: kc.as_bytes(),
        }
    }

    #[tokio::test]
    async fn a_client_is_reused_until_the_secret_changes() {
        let metrics = Arc::new(ShootMetrics::default());
        let clients = ShootClients::new(metrics.clone(), std::time::Duration::from_secs(5));
        clients
            .get(&secret(Some("1"), ADMIN), "ra-1")
            .await
            .unwrap();
        clients
            .get(&secret(Some("1"), ADMIN), "ra-1")
            .await
            .unwrap();
        assert_eq!(metrics.clients_built.get(), 1, "same resourceVersion");
        clients
            .get(&secret(Some("2"), ADMIN), "ra-1")
            .await
            .unwrap();
        clients
            .get(&secret(Some("2"), ADMIN), "ra-1")
            .await
            .unwrap();
        assert_eq!(metrics.clients_built.get(), 2, "a new resourceVersion");
        clients.forget("kcp-system", "kubeconfig-rt-1");
        clients
            .get(&secret(Some("2"), ADMIN), "ra-1")
            .await
            .unwrap();
        assert_eq!(metrics.clients_built.get(), 3, "forgotten");
        clients.get(&secret(None, ADMIN), "ra-1").await.unwrap();
        clients.get(&secret(None, ADMIN), "ra-1").await.unwrap();
        assert_eq!(
            metrics.clients_built.get(),
            5,
            "no resourceVersion: never cached"
        );
    }

    #[tokio::test]
    async fn a_client_goes_when_the_last_runtime_access_using_it_is_released() {
        let metrics = Arc::new(ShootMetrics::default());
        let clients = ShootClients::new(metrics.clone(), std::time::Duration::from_secs(5));
        clients
            .get(&secret(Some("1"), ADMIN), "ra-1")
            .await
            .unwrap();
        // A rotated admin kubeconfig replaces the client and keeps its users.
        clients
            .get(&secret(Some("2"), ADMIN), "ra-2")
            .await
            .unwrap();
        clients.release("ra-1");
        assert_eq!(clients.len(), 1, "ra-2 still uses it");
        clients
            .get(&secret(Some("2"), ADMIN), "ra-2")
            .await
            .unwrap();
        assert_eq!(metrics.clients_built.get(), 2, "kept for ra-2");
        clients.release("ra-2");
        assert_eq!(clients.len(), 0, "no RuntimeAccess uses it any more");
    }

    #[tokio::test]
    async fn an_idle_client_goes_at_the_next_build() {
        let metrics = Arc::new(ShootMetrics::default());
        let mut clients = ShootClients::new(metrics.clone(), std::time::Duration::from_secs(5));
        clients.idle = Duration::from_millis(50);
        clients
            .get(&secret(Some("1"), ADMIN), "ra-1")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let other = AdminSecret {
            name: "kubeconfig-rt-2",
            ..secret(Some("1"), ADMIN)
        };
        clients.get(&other, "ra-2").await.unwrap();
        assert_eq!(clients.len(), 1, "the idle client of rt-1 is gone");
        assert_eq!(clients.users(), ["ra-2"]);
        // Used within the idle time: kept.
        clients.idle = Duration::from_secs(600);
        clients
            .get(&secret(Some("1"), ADMIN), "ra-1")
            .await
            .unwrap();
        assert_eq!(clients.len(), 2);
        assert_eq!(metrics.clients_built.get(), 3);
        // Unused, and none built: the sweep drops them.
        clients.idle = Duration::from_millis(50);
        tokio::time::sleep(Duration::from_millis(100)).await;
        clients.drop_idle();
        assert_eq!(clients.len(), 0, "idle clients left without a build");
    }

    #[tokio::test]
    async fn an_admin_kubeconfig_with_an_exec_plugin_is_refused() {
        let clients = ShootClients::new(Arc::default(), std::time::Duration::from_secs(5));
        let exec = ADMIN.replace(
            "user: {token: abc}",
            "user: {exec: {command: /bin/touch, args: [/tmp/pwned], apiVersion: client.authentication.k8s.io/v1}}",
        );
        let Err(err) = clients.get(&secret(Some("1"), &exec), "ra-1").await else {
            panic!("an exec plugin must be refused");
        };
        assert!(err.to_string().contains("exec"), "{err}");
    }

    #[tokio::test]
    async fn a_broken_kubeconfig_is_an_error_that_does_not_quote_it() {
        let clients = ShootClients::new(Arc::default(), std::time::Duration::from_secs(5));
        let Err(err) = clients
            .get(&secret(Some("1"), "token: supersecret\n: :"), "ra-1")
            .await
        else {
            panic!("a broken kubeconfig must fail");
        };
        assert!(!err.to_string().contains("supersecret"), "{err}");
    }
}
