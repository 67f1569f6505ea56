//! Leader election on a Lease (upstream ID `f1c68560.kyma-project.io`) with
//! `kube-lease-manager`. Reconcilers run only while this replica holds the Lease; a replica
//! that loses it stops reconciling at once and the process exits, like controller-runtime.
//!
//! The Lease manager only reports a change of holder it has read from the API server: a leader
//! cut off from the API server (a network partition) cannot renew, yet keeps reporting that it
//! leads while a follower takes the expired Lease. So this replica also times its own
//! renewals (every successful write to the Lease, seen on the client the manager uses) and
//! steps down when the Lease it last wrote is about to expire, as controller-runtime does
//! after its renew deadline.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

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

/// This replica's part in the election; [`Leadership::release`] steps down.
pub struct Leadership {
    rx: watch::Receiver<bool>,
    /// The Lease manager's task: it renews while `rx` lives and clears the Lease's holder once
    /// `rx` is dropped.
    manager: JoinHandle<Result<LeaseManager, LeaseManagerError>>,
    /// When the Lease this replica last wrote expires.
    expiry: watch::Receiver<Instant>,
    /// How long before that expiry this replica stops leading.
    margin: Duration,
}

/// `client` whose successful renewals of the Lease `namespace/name` move `expiry` to their
/// start plus `duration`: the manager writes the renew time before it sends, so the Lease is
/// valid until at most then. A renewal is a PATCH that sets `spec.renewTime`; the manager's
/// other writes (the count of transitions it sends right after taking the Lease, the release)
/// leave the renew time as it was, and counting them would put the expiry past the Lease's.
fn timing_renewals(
    client: kube::Client,
    namespace: &str,
    name: &str,
    duration: Duration,
    expiry: watch::Sender<Instant>,
) -> kube::Client {
    use http_body_util::BodyExt as _;
    let path = format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}");
    let default_namespace = client.default_namespace().to_owned();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (client, expiry) = (client.clone(), expiry.clone());
        let to_lease = req.method() == http::Method::PATCH && req.uri().path() == path;
        async move {
            let (req, renewal) = if to_lease {
                let (parts, body) = req.into_parts();
                let body = body
                    .collect()
                    .await
                    .map_err(|e| kube::Error::Service(e.into()))?
                    .to_bytes();
                let renewal = sets_renew_time(&body);
                let body = kube::client::Body::from(body.to_vec());
                (http::Request::from_parts(parts, body), renewal)
            } else {
                (req, false)
            };
            let sent = Instant::now();
            let resp = client.send(req).await?;
            if renewal && resp.status().is_success() {
                expiry.send_if_modified(|e| {
                    let until = sent + duration;
                    let later = until > *e;
                    if later {
                        *e = until;
                    }
                    later
                });
            }
            Ok::<_, kube::Error>(resp)
        }
    });
    kube::Client::new(service, default_namespace)
}

/// Whether a Lease patch sets the renew time (a release sets it to null).
fn sets_renew_time(patch: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(patch)
        .ok()
        .and_then(|p| p.pointer("/spec/renewTime").map(|t| !t.is_null()))
        .unwrap_or(false)
}

/// Aborts the task when dropped, unless emptied first.
struct AbortOnDrop(Option<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// How long after taking the Lease this replica looks whether it still holds it: longer than
/// the Lease manager's wait (at most 1 s) between clearing an expired Lease and taking it.
const CONFIRM_AFTER: Duration = Duration::from_millis(1500);

/// Whether this replica still holds the Lease [`CONFIRM_AFTER`] taking it. The manager clears
/// an expired Lease and takes it in two writes, neither conditional on what it read: two
/// replicas that found the Lease expired at about the same time (a follower and the dead
/// leader's replacement) can both take it, the second clearing the first's hold, and the first
/// learns of it only at its next renewal, seconds later. By then both would have reconciled.
/// This narrows that window, it does not close it: a clearing write that reaches the apiserver
/// more than this long after the take still overlaps two leaders until the next renewal.
/// A read that fails counts as held: the renewal deadline still applies.
async fn still_holder(leases: &kube::Api<Lease>, name: &str, identity: &str) -> bool {
    tokio::time::sleep(CONFIRM_AFTER).await;
    match leases.get(name).await {
        Ok(lease) => lease.spec.and_then(|s| s.holder_identity).as_deref() == Some(identity),
        Err(error) => {
            tracing::warn!(%error, "cannot read the Lease to confirm the hold; going on");
            true
        }
    }
}

/// How long after a failed request the leader tries to renew again.
const RETRY: Duration = Duration::from_millis(500);

/// The longest a follower waits after failed requests before it looks at the Lease again.
const FOLLOWER_RETRY_MAX: Duration = Duration::from_secs(16);

/// The Lease manager's election loop, sending whether this replica leads to `tx` whenever that
/// changes, until every receiver is gone; then it clears the Lease's holder if it is this
/// replica. The manager's own `watch` loop waits longer after each failed request of a term
/// (1 s doubling up to 30 s, reset only when the leadership changes), so a few API errors spread
/// over days made a renewal come after this replica had to stop leading; here the leader
/// retries every failure after [`RETRY`], and a follower backs off up to
/// [`FOLLOWER_RETRY_MAX`] while failures follow each other.
async fn take_part(
    manager: LeaseManager,
    tx: watch::Sender<bool>,
) -> Result<LeaseManager, LeaseManagerError> {
    let (mut failures, mut last_failure): (u32, Option<Instant>) = (0, None);
    loop {
        tokio::select! {
            biased;
            () = tx.closed() => {
                manager.release().await?;
                return Ok(manager);
            }
            changed = manager.changed() => match changed {
                Ok(leading) => {
                    failures = 0;
                    if tx.send(leading).is_err() {
                        manager.release().await?;
                        return Ok(manager);
                    }
                }
                Err(error) => {
                    // The leader retries at once (its renewal has a deadline); a follower has
                    // none and waits longer after each failure, so a refusal that lasts (RBAC,
                    // the Lease's namespace) is a warning now and then, not a flood.
                    // Failures far apart are each a first one.
                    if last_failure.is_some_and(|at| at.elapsed() > 2 * FOLLOWER_RETRY_MAX) {
                        failures = 0;
                    }
                    last_failure = Some(Instant::now());
                    failures = failures.saturating_add(1);
                    let wait = if *tx.borrow() {
                        RETRY
                    } else {
                        RETRY.saturating_mul(1 << failures.min(5)).min(FOLLOWER_RETRY_MAX)
                    };
                    tracing::warn!(%error, failures, retry_in = ?wait, "leader election request failed");
                    tokio::time::sleep(wait).await;
                }
            },
        }
    }
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
        // Nothing written yet: not valid until the manager's first write.
        let (expiry_tx, expiry) = watch::channel(Instant::now());
        let client = timing_renewals(
            client,
            namespace,
            name,
            Duration::from_secs(duration),
            expiry_tx,
        );
        let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), namespace);
        let stopped = || LeaderError::Stopped {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        let (rx, manager) = loop {
            let manager = LeaseManagerBuilder::new(client.clone(), name)
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
            let (tx, mut rx) = watch::channel(false);
            let manager = tokio::spawn(take_part(manager, tx));
            // Until the hold is confirmed the manager may believe it holds a Lease another
            // replica holds, and its release (on a stop, or when this replica follows) would
            // clear that replica's hold: it is aborted instead, whatever ends the wait.
            let mut unconfirmed = AbortOnDrop(Some(manager.abort_handle()));
            while !*rx.borrow_and_update() {
                rx.changed().await.map_err(|_| stopped())?;
            }
            if still_holder(&leases, name, identity).await {
                unconfirmed.0 = None;
                break (rx, manager);
            }
            tracing::warn!(
                lease = name,
                namespace,
                identity,
                "another replica took the Lease right after this one; following"
            );
        };
        tracing::info!(lease = name, namespace, identity, "became leader");
        Ok(Self {
            rx,
            manager,
            expiry,
            // The manager renews `grace` before the expiry; half of that is left for the
            // renewal's round trip, the other half keeps this replica's last writes clear of a
            // follower that takes the Lease at the expiry by its own clock.
            margin: Duration::from_secs(grace) / 2,
        })
    }

    /// Steps down: clears the Lease's holder (when this replica still holds it), so that a
    /// follower takes it as soon as it looks again instead of after the expiry plus its
    /// collision wait. Waits for that write at most `timeout`: the process exits after this, and
    /// an unfinished write would be cancelled with it.
    pub async fn release(self, timeout: Duration) {
        let Self { rx, manager, .. } = self;
        drop(rx);
        match tokio::time::timeout(timeout, manager).await {
            Ok(Ok(Ok(_))) => tracing::info!("released the Lease"),
            Ok(Ok(Err(error))) => {
                tracing::warn!(%error, "could not release the Lease; it expires on its own")
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "the Lease manager failed; the Lease expires on its own")
            }
            Err(_) => tracing::warn!(
                ?timeout,
                "releasing the Lease took too long; it expires on its own"
            ),
        }
    }

    /// Leaves the Lease as it is: after a lost leadership another replica may hold it, and the
    /// manager's release (on dropping the receiver) would clear its holder. The manager is
    /// stopped before the receiver goes.
    pub fn abandon(self) {
        let Self { rx, manager, .. } = self;
        manager.abort();
        drop(rx);
    }

    /// Resolves when this replica no longer leads: the Lease manager says so, or the Lease
    /// this replica last wrote is about to expire without a renewal.
    pub async fn lost(&mut self) {
        let mut timing = true;
        loop {
            if !*self.rx.borrow_and_update() {
                return;
            }
            let expiry = *self.expiry.borrow_and_update();
            let deadline = expiry.checked_sub(self.margin).unwrap_or(expiry);
            if Instant::now() >= deadline {
                tracing::warn!(
                    margin = ?self.margin,
                    "could not renew the Lease in time (API server unreachable?); stepping down before it expires"
                );
                return;
            }
            tokio::select! {
                changed = self.rx.changed() => if changed.is_err() {
                    return;
                },
                changed = self.expiry.changed(), if timing => if changed.is_err() {
                    // The manager is gone; the deadline still holds.
                    timing = false;
                },
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{Api, Patch, PatchParams};

    /// Only a write that sets the renew time moves the expiry: not the count of transitions
    /// the manager sends after taking the Lease, nor a release.
    #[tokio::test]
    async fn only_a_renewal_moves_the_expiry() {
        let answer = tower::service_fn(|_req: http::Request<kube::client::Body>| async {
            let lease = serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "l", "namespace": "ns"}, "spec": {}});
            Ok::<_, std::convert::Infallible>(http::Response::new(kube::client::Body::from(
                serde_json::to_vec(&lease).unwrap_or_default(),
            )))
        });
        let start = Instant::now();
        let (tx, mut expiry) = watch::channel(start);
        let duration = Duration::from_secs(15);
        let client = timing_renewals(kube::Client::new(answer, "ns"), "ns", "l", duration, tx);
        let leases: Api<Lease> = Api::namespaced(client, "ns");
        let patch = |spec: serde_json::Value| {
            let leases = leases.clone();
            async move {
                leases
                    .patch(
                        "l",
                        &PatchParams::default(),
                        &Patch::Strategic(serde_json::json!({"spec": spec})),
                    )
                    .await
                    .expect("answered");
            }
        };
        patch(
            serde_json::json!({"renewTime": "2026-12-06T10:00:00.000000Z",
            "holderIdentity": "me"}),
        )
        .await;
        assert!(expiry.has_changed().unwrap_or(false));
        let taken = *expiry.borrow_and_update();
        assert!(taken >= start + duration, "{taken:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        patch(serde_json::json!({"leaseTransitions": 3})).await;
        patch(serde_json::json!({"renewTime": null, "holderIdentity": null})).await;
        assert_eq!(
            *expiry.borrow(),
            taken,
            "moved by a write that renews nothing"
        );
        patch(serde_json::json!({"renewTime": "2026-12-06T10:00:05.000000Z"})).await;
        assert!(*expiry.borrow() > taken);
    }

    /// The hold is confirmed by the Lease's holder: another replica's name is no hold, a read
    /// that fails is (the renewal deadline still applies).
    #[tokio::test]
    async fn the_hold_is_confirmed_by_the_leases_holder() {
        let answer = tower::service_fn(|req: http::Request<kube::client::Body>| async move {
            let holder = req
                .uri()
                .path()
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            if holder == "broken" {
                let mut resp = http::Response::new(kube::client::Body::from(b"{}".to_vec()));
                *resp.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                return Ok::<_, std::convert::Infallible>(resp);
            }
            let lease = serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": holder, "namespace": "ns"},
                "spec": {"holderIdentity": holder}});
            Ok(http::Response::new(kube::client::Body::from(
                serde_json::to_vec(&lease).unwrap_or_default(),
            )))
        });
        // The fake names each Lease's holder after the Lease.
        let leases: kube::Api<Lease> = kube::Api::namespaced(kube::Client::new(answer, "ns"), "ns");
        let (mine, theirs, unread) = tokio::join!(
            still_holder(&leases, "me", "me"),
            still_holder(&leases, "other", "me"),
            still_holder(&leases, "broken", "me"),
        );
        assert!(mine);
        assert!(!theirs);
        assert!(unread);
    }
}
