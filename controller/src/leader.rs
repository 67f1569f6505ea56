//! Leader election on a Lease (upstream ID `f1c68560.kyma-project.io`) with
//! `kube-lease-manager`. Reconcilers run only while this replica holds the Lease; a replica
//! that loses it stops reconciling at once and the process exits, like controller-runtime.

use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;

/// Leader election failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The Lease could not be created or read.
    #[error("leader election on Lease {namespace}/{name}: {source}")]
    Lease {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// Why.
        source: LeaseManagerError,
    },
    /// The election task ended before this replica led.
    #[error("leader election on Lease {namespace}/{name} stopped")]
    Stopped {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
    },
}

/// Where and how this replica takes part in leader election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// Name of the Lease.
    pub lease: String,
    /// Namespace of the Lease.
    pub namespace: String,
    /// (Lease validity, renewal grace) in seconds with `0 < grace < validity`.
    pub timing: (u64, u64),
}

/// This replica's part in the election; dropping it releases the Lease.
pub struct Leadership {
    rx: watch::Receiver<bool>,
}

impl Leadership {
    /// Joins the election and waits until this replica leads.
    pub async fn acquire(
        client: kube::Client,
        election: &LeaderElection,
        identity: &str,
    ) -> Result<Self, LeaderError> {
        let (namespace, name, timing) = (
            election.namespace.as_str(),
            election.lease.as_str(),
            election.timing,
        );
        // The Lease manager panics on other values; keep them in range whatever the caller says.
        let duration = timing.0.max(2);
        let grace = timing.1.clamp(1, duration - 1);
        let manager = LeaseManagerBuilder::new(client, name)
            .with_namespace(namespace)
            .with_identity(identity)
            .with_duration(duration)
            .with_grace(grace)
            .build()
            .await
            .map_err(|source| LeaderError::Lease {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source,
            })?;
        let (mut rx, _task) = manager.watch().await;
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                return Err(LeaderError::Stopped {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                });
            }
        }
        tracing::info!(lease = name, namespace, identity, "became leader");
        Ok(Self { rx })
    }

    /// Resolves when this replica no longer leads.
    pub async fn lost(&mut self) {
        loop {
            if !*self.rx.borrow_and_update() {
                return;
            }
            if self.rx.changed().await.is_err() {
                return;
            }
        }
    }
}
