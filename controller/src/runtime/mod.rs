//! The Runtime reconciler: Runtime -> Gardener Shoot, GardenerCluster, administrators and
//! OIDC in the new cluster, status; safe deletion.

use std::sync::Arc;

use crate::{Context, Shutdown};

/// Runs the Runtime reconciler until `shutdown`.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
    let _ = ctx;
    shutdown.cancelled().await;
}
