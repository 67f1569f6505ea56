//! The GardenerCluster reconciler: keeps Secret `kubeconfig-<runtime-id>` filled with an admin
//! kubeconfig from Gardener's `shoots/adminkubeconfig` and rotates it on time, as upstream's
//! kubeconfig controller does, with upstream's bugs fixed:
//!
//! - Gardener is asked only when a rotation is due (upstream: on every reconcile);
//! - a forced rotation replaces the kubeconfig in one update, so the key never disappears, and
//!   leaves `KubeconfigSecretRotated` (status by server-side apply: no conflicts);
//! - a finalizer and an owner reference delete the Secret with its GardenerCluster, even when
//!   the controller was down at that moment.

pub mod gardener;
pub mod metrics;
pub mod reconcile;
pub mod rotation;
pub mod secret;
pub mod status;

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kim_shared::api::GardenerCluster;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector;
use kube::{Api, Resource};

use crate::stored::StatusApart;
use crate::{Context, Shutdown};
use metrics::KubeconfigMetrics;
use reconcile::Reconciler;

/// Name of this reconciler in metrics and logs.
pub const CONTROLLER: &str = "gardener_cluster";

/// Name of the watch of the kubeconfig Secrets in metrics and logs.
pub const SECRETS_WATCH: &str = "gardener_cluster_secrets";

/// Finalizer on a GardenerCluster: its Secret is deleted before the object goes, even when the
/// controller was down at deletion time (upstream has none; see docs/upstream-differences.md).
pub const FINALIZER: &str =
    "gardenercluster-controller.infrastructure-manager.kyma-project.io/deletion-hook";

/// The GardenerClusters that own `secret` (by its owner references), whose reconcile a change
/// of the Secret asks for.
/// Names only: kept per Secret between lists ([`crate::watch::dependents`]), they take a third
/// of the memory of `ObjectRef`s.
fn owners(secret: &PartialObjectMeta<Secret>) -> Box<[Box<str>]> {
    secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|o| {
            o.kind == GardenerCluster::kind(&())
                && o.api_version
                    .split_once('/')
                    .is_some_and(|(group, _)| group == GardenerCluster::group(&()))
        })
        .map(|o| o.name.as_str().into())
        .collect()
}

/// Runs the GardenerCluster reconciler until `shutdown`.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: Shutdown,
    shoots: crate::runtime::shoot_cache::ShootCache,
    rotations: crate::runtime::shoot_cache::ClusterFacts,
    ca_rotated: futures::channel::mpsc::UnboundedReceiver<String>,
    writer: reflector::store::Writer<StatusApart<GardenerCluster>>,
    followers: crate::watch::Followers,
) {
    let settings = &ctx.settings.gardener_cluster;
    let policy = settings.rotation;
    let workers = settings.workers.max(1);
    let metrics = Arc::new(KubeconfigMetrics::default());
    ctx.register_metrics(|r| metrics.register(r));
    let namespace = ctx.settings.namespace.clone();
    let clusters: Api<StatusApart<GardenerCluster>> = Api::namespaced(ctx.kcp.clone(), &namespace);
    let reconciler = Arc::new(Reconciler::new(
        ctx.clone(),
        policy,
        metrics,
        shoots,
        rotations,
    ));
    let (failing, released) = (reconciler.clone(), reconciler.clone());
    // Gardener answering again and a CA rotation end a failure's hold: the pass they ask for
    // runs now.
    let recovered = crate::gardener::health::retry_on_recovery(
        ctx.gardener_recoveries.clone(),
        ctx.metrics.clone(),
        CONTROLLER,
        move || failing.failing(),
    )
    .inspect({
        let released = released.clone();
        move |r| released.release(r)
    });
    let store = writer.as_reader();
    let (stream, sweep) = crate::watch::own_kind(
        clusters,
        writer,
        reconciler.clone(),
        Some(followers),
        CONTROLLER,
        ctx.metrics.clone(),
        shutdown.clone(),
    );
    ctx.metrics
        .track_reconcile_result(CONTROLLER, crate::metrics::RESULT_UNREADABLE);
    let secrets = crate::watch::managed_secrets(
        ctx.kcp.clone(),
        &namespace,
        owners,
        SECRETS_WATCH,
        ctx.metrics.clone(),
    )
    .flat_map({
        let namespace = namespace.clone();
        move |owners| {
            let refs: Vec<reflector::ObjectRef<StatusApart<GardenerCluster>>> = owners
                .iter()
                .map(|name| reflector::ObjectRef::new(name).within(&namespace))
                .collect();
            futures::stream::iter(refs)
        }
    });
    let run = Controller::for_stream(stream, store.clone())
        .reconcile_on(secrets)
        .with_config(controller::Config::default().concurrency(workers))
        .reconcile_on(recovered)
        .reconcile_on(
            ca_rotated
                .map({
                    let namespace = namespace.clone();
                    move |name| reflector::ObjectRef::new(&name).within(&namespace)
                })
                .inspect(move |r| released.release(r)),
        )
        .graceful_shutdown_on(shutdown.clone().cancelled_owned())
        .run(reconcile::reconcile, reconcile::error_policy, reconciler)
        .for_each(|result| {
            crate::watch::report_run(CONTROLLER, &result, &ctx.metrics);
            futures::future::ready(())
        });
    crate::watch::run_until_stopped(run, store, &shutdown).await;
    // It ends on `shutdown` too; a panic in it is already logged.
    let _ = sweep.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change of a kubeconfig Secret asks for the reconcile of the GardenerCluster that owns
    /// it, of any version of the API group, and of no other owner.
    #[test]
    fn a_secret_triggers_the_gardener_clusters_that_own_it() {
        let secret: PartialObjectMeta<Secret> = serde_json::from_value(serde_json::json!({
            "apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadata",
            "metadata": {
                "name": "kubeconfig-rt-1",
                "namespace": "kcp-system",
                "ownerReferences": [
                    {"apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "GardenerCluster", "name": "rt-1", "uid": "u-1"},
                    {"apiVersion": "infrastructuremanager.kyma-project.io/v1alpha1", "kind": "GardenerCluster", "name": "rt-2", "uid": "u-2"},
                    {"apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "RuntimeAccess", "name": "klm", "uid": "u-3"},
                    {"apiVersion": "example.com/v1", "kind": "GardenerCluster", "name": "foreign", "uid": "u-4"},
                    {"apiVersion": "v1", "kind": "GardenerCluster", "name": "core", "uid": "u-5"},
                ],
            },
        }))
        .expect("metadata");
        assert_eq!(*owners(&secret), ["rt-1".into(), "rt-2".into()]);
    }
}
