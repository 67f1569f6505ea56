//! The RuntimeAccess reconciler: least-privilege, ServiceAccount-based kubeconfigs for a
//! runtime (upstream issue "RBAC kubeconfigs for Clusters"). For each request it creates the
//! ServiceAccount, (Cluster)Role and binding in the shoot cluster through the admin kubeconfig
//! Secret of the runtime's GardenerCluster, issues a token through the TokenRequest API, stores
//! a kubeconfig in a KCP Secret referenced from the status, rotates it before it expires and,
//! on deletion (finalizer), removes everything it created.

pub mod kubeconfig;
pub mod reconcile;
pub mod shoot;
pub mod token;

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kim_shared::access::AccessPolicy;
use kim_shared::api::runtime_access::RuntimeAccess;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::watcher;

use crate::{Context, Shutdown};

/// Name of this reconciler in metrics and logs.
pub const CONTROLLER: &str = "access";

/// Finalizer on a RuntimeAccess: the shoot objects and the Secret go before the object does.
pub const FINALIZER: &str =
    "runtimeaccess-controller.infrastructure-manager.kyma-project.io/cleanup";

/// Flags of the RuntimeAccess reconciler (to be flattened into `kim-controller run`).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct AccessArgs {
    /// Token lifetime when a RuntimeAccess does not set `spec.tokenExpirationSeconds`.
    #[arg(long = "access-token-expiration", default_value = "1h", value_parser = crate::cli::run::parse_duration)]
    pub token_expiration: std::time::Duration,
    /// Fraction of a token's lifetime after which it is replaced.
    #[arg(long = "access-rotation-ratio", default_value_t = 0.8)]
    pub rotation_ratio: f64,
    /// Admit `*`, `escalate`/`bind`/`impersonate` and `cluster-admin` in RuntimeAccess rules.
    #[arg(long = "access-allow-wildcards", default_value_t = false)]
    pub allow_wildcards: bool,
    /// Longest token lifetime a RuntimeAccess may request.
    #[arg(long = "access-max-token-expiration", default_value = "24h", value_parser = crate::cli::run::parse_duration)]
    pub max_token_expiration: std::time::Duration,
}

impl Default for AccessArgs {
    fn default() -> Self {
        Self {
            token_expiration: std::time::Duration::from_secs(3600),
            rotation_ratio: 0.8,
            allow_wildcards: false,
            max_token_expiration: std::time::Duration::from_secs(24 * 3600),
        }
    }
}

impl AccessArgs {
    /// The validation policy these flags describe.
    pub fn policy(&self) -> AccessPolicy {
        AccessPolicy {
            allow_wildcards: self.allow_wildcards,
            max_token_expiration_seconds: i64::try_from(self.max_token_expiration.as_secs())
                .unwrap_or(i64::MAX),
        }
    }
}

/// Runs the RuntimeAccess reconciler until `shutdown`.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
    let args = ctx.args.access.clone();
    let namespace = ctx.args.namespace.clone();
    let requests: Api<RuntimeAccess> = Api::namespaced(ctx.kcp.clone(), &namespace);
    let secrets: Api<PartialObjectMeta<Secret>> = Api::namespaced(ctx.kcp.clone(), &namespace);
    let managed = format!(
        "{}={}",
        kim_shared::names::LABEL_MANAGED_BY,
        kim_shared::names::MANAGED_BY_INFRASTRUCTURE_MANAGER
    );
    let reconciler = Arc::new(reconcile::Reconciler::new(ctx.clone(), args));
    Controller::new(requests, watcher::Config::default())
        .owns(secrets, watcher::Config::default().labels(&managed))
        .with_config(
            controller::Config::default()
                .concurrency(ctx.args.gardener_cluster_ctrl_workers_cnt.max(1)),
        )
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile::reconcile, reconcile::error_policy, reconciler)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(controller = CONTROLLER, error = %e, "controller event");
            }
        })
        .await;
}
