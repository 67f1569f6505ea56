//! The RuntimeAccess reconciler: least-privilege, ServiceAccount-based kubeconfigs for a
//! runtime (upstream issue "RBAC kubeconfigs for Clusters"). For each request it creates the
//! ServiceAccount, (Cluster)Role and binding in the shoot cluster through the admin kubeconfig
//! Secret of the runtime's GardenerCluster, issues a token through the TokenRequest API, stores
//! a kubeconfig in a KCP Secret referenced from the status, rotates it before it expires and,
//! on deletion (finalizer), removes everything it created.

pub mod kubeconfig;
pub mod reconcile;
pub mod record;
pub mod shoot;
pub mod shoot_client;
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

/// Condition type of a RuntimeAccess.
pub const CONDITION_TYPE: &str = "KubeconfigReady";

/// Name of this reconciler in metrics and logs.
pub const CONTROLLER: &str = "access";

/// Finalizer on a RuntimeAccess: the shoot objects and the Secret go before the object does.
pub const FINALIZER: &str =
    "runtimeaccess-controller.infrastructure-manager.kyma-project.io/cleanup";

/// Flags of the RuntimeAccess reconciler, flattened into `kim-controller run`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct AccessArgs {
    /// Token lifetime when a RuntimeAccess does not set `spec.tokenExpirationSeconds`.
    #[arg(long = "access-token-expiration", default_value = "1h", value_parser = parse_token_lifetime)]
    pub token_expiration: std::time::Duration,
    /// Fraction of a token's lifetime after which it is replaced (0.01 to 0.95). Tokens live at
    /// least 10 minutes (TokenRequest's minimum), so a small ratio is how a short rotation
    /// period is configured: 0.01 of a 600 s token rotates every 6 s.
    #[arg(long = "access-rotation-ratio", default_value_t = 0.8, value_parser = parse_rotation_ratio)]
    pub rotation_ratio: f64,
    /// Namespaces of the runtime clusters a RuntimeAccess may not use, besides kube-*,
    /// garden* and kyma-system (comma-separated; set the webhook's flag alike).
    #[arg(long = "access-protected-namespaces", value_delimiter = ',')]
    pub protected_namespaces: Vec<String>,
    /// Existing roles a RuntimeAccess may bind with `spec.roleRef`, as ClusterRole/<name> or
    /// Role/<namespace>/<name> (comma-separated; set the webhook's flag alike). Empty: none,
    /// only rules.
    #[arg(long = "access-allowed-role-refs", value_delimiter = ',')]
    pub allowed_role_refs: Vec<kim_shared::access::AllowedRoleRef>,
    /// Time allowed for each request to a runtime's API server (connect included), so that an
    /// unreachable or hibernated runtime fails a reconcile quickly instead of holding it.
    #[arg(long = "access-shoot-request-timeout", default_value = "30s", value_parser = kim_shared::duration::parse_duration)]
    pub shoot_request_timeout: std::time::Duration,
    /// Longest token lifetime a RuntimeAccess may request.
    #[arg(long = "access-max-token-expiration", default_value = "24h", value_parser = parse_token_lifetime)]
    pub max_token_expiration: std::time::Duration,
    /// RuntimeAccess reconciles running at once (each may wait on a runtime's API server).
    #[arg(long = "access-ctrl-workers-cnt", default_value_t = 25)]
    pub workers: u16,
}

/// Smallest `--access-rotation-ratio`: below it a rotation would not leave the API server time
/// to answer before the next one is due.
pub const MIN_ROTATION_RATIO: f64 = 0.01;

/// Largest `--access-rotation-ratio`: consumers get at least 5 % of the lifetime to pick up the
/// new kubeconfig before the old token expires.
pub const MAX_ROTATION_RATIO: f64 = 0.95;

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
pub fn parse_token_lifetime(s: &str) -> Result<std::time::Duration, String> {
    let d = kim_shared::duration::parse_duration(s)?;
    let min = kim_shared::access::MIN_TOKEN_EXPIRATION_SECONDS.unsigned_abs();
    if d.as_secs() < min {
        return Err(format!(
            "{s} is shorter than {min} s, the least token lifetime the TokenRequest API issues"
        ));
    }
    Ok(d)
}

impl Default for AccessArgs {
    fn default() -> Self {
        Self {
            token_expiration: std::time::Duration::from_secs(3600),
            rotation_ratio: 0.8,
            protected_namespaces: Vec::new(),
            allowed_role_refs: Vec::new(),
            shoot_request_timeout: std::time::Duration::from_secs(30),
            max_token_expiration: std::time::Duration::from_secs(24 * 3600),
            workers: 25,
        }
    }
}

impl AccessArgs {
    /// The validation policy these flags describe.
    pub fn policy(&self) -> AccessPolicy {
        AccessPolicy {
            protected_namespaces: self.protected_namespaces.clone(),
            allowed_role_refs: self.allowed_role_refs.clone(),
            max_token_expiration_seconds: i64::try_from(self.max_token_expiration.as_secs())
                .unwrap_or(i64::MAX),
        }
    }
}

/// Runs the RuntimeAccess reconciler until `shutdown`.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
    let args = ctx.args.access.clone();
    let workers = args.workers.max(1);
    let namespace = ctx.args.namespace.clone();
    let requests: Api<RuntimeAccess> = Api::namespaced(ctx.kcp.clone(), &namespace);
    let secrets: Api<PartialObjectMeta<Secret>> = Api::namespaced(ctx.kcp.clone(), &namespace);
    let managed = format!(
        "{}={}",
        kim_shared::names::LABEL_MANAGED_BY,
        kim_shared::names::MANAGED_BY_INFRASTRUCTURE_MANAGER
    );
    let metrics = Arc::new(shoot_client::ShootMetrics::default());
    ctx.register_metrics(|r| metrics.register(r));
    let reconciler = Arc::new(reconcile::Reconciler::new(ctx.clone(), args, metrics));
    Controller::new(requests, watcher::Config::default())
        .owns(secrets, watcher::Config::default().labels(&managed))
        .with_config(controller::Config::default().concurrency(workers))
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile::reconcile, reconcile::error_policy, reconciler)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(controller = CONTROLLER, error = %e, "controller event");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_lifetimes_under_ten_minutes_are_refused_at_start() {
        assert_eq!(
            parse_token_lifetime("10m"),
            Ok(std::time::Duration::from_secs(600))
        );
        let err = parse_token_lifetime("5m").unwrap_err();
        assert!(err.contains("5m") && err.contains("600 s"), "{err}");
        assert!(parse_token_lifetime("soon").is_err());
    }

    #[test]
    fn policy_flags_take_comma_separated_lists() {
        use clap::Parser;
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
        assert_eq!(a.policy(), AccessPolicy::default());
        let a = parse(&[
            "--access-protected-namespaces=istio-system,monitoring",
            "--access-allowed-role-refs=ClusterRole/view,Role/apps/reader",
            "--access-shoot-request-timeout=5s",
        ])
        .unwrap();
        let p = a.policy();
        assert!(p.is_protected_namespace("monitoring"));
        assert_eq!(p.allowed_role_refs.len(), 2);
        assert_eq!(a.shoot_request_timeout, std::time::Duration::from_secs(5));
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
}
