//! Leader election on a Lease (upstream ID `f1c68560.kyma-project.io`), by the rules of
//! client-go's `leaderelection`, which controller-runtime (upstream's) uses:
//!
//! - every write of the Lease is conditional on the `resourceVersion` read just before, so of
//!   two replicas that found it free or expired at the same moment one writes and the other
//!   gets a conflict;
//! - a Lease another replica holds counts as expired once this replica has seen it unchanged
//!   for its whole duration, measured on this replica's clock: clocks that disagree between
//!   nodes do not shorten it;
//! - the leader renews every [`LeaderElection::retry_period`] and stops leading when no renewal
//!   got through for [`LeaderElection::renew_deadline`] (a leader cut off from the API server,
//!   a network partition), a third of the duration before a follower may take the Lease.
//!
//! Reconcilers run only while this replica leads; a replica that loses the Lease stops
//! reconciling at once and the process exits, like controller-runtime.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Leader election failed.
#[derive(Debug, thiserror::Error)]
#[error("leader election on Lease {namespace}/{name}: {source}")]
pub struct LeaderError {
    /// Lease namespace.
    namespace: String,
    /// Lease name.
    name: String,
    /// Why.
    source: kube::Error,
}

/// Where and how this replica takes part in leader election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// Name of the Lease.
    pub lease: String,
    /// Namespace of the Lease.
    pub namespace: String,
    /// How long a Lease stays valid after it last changed (at least 2 s).
    pub duration: Duration,
}

impl LeaderElection {
    /// How long the leader goes on without a renewal getting through: two thirds of the
    /// duration (controller-runtime: 10 s of 15 s).
    pub fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }

    /// How often the leader renews and a follower looks at the Lease (controller-runtime: 2 s
    /// at 15 s).
    pub fn retry_period(&self) -> Duration {
        self.duration * 2 / 15
    }
}

/// How long after a failed renewal the leader tries again.
const RENEW_RETRY: Duration = Duration::from_millis(500);

/// The longest a follower waits after failed requests before it looks at the Lease again.
const FOLLOWER_RETRY_MAX: Duration = Duration::from_secs(16);

/// What a candidate does with the Lease it read.
#[derive(Debug, PartialEq)]
enum Step {
    /// Write this spec (conditional on the version read): take or renew the Lease.
    Write(LeaseSpec),
    /// Another replica holds the Lease.
    Follow,
}

/// The step for Lease spec `spec` (the default one: no Lease yet), read at `now` and seen
/// unchanged since `unchanged_since`. `at` is the wall-clock time written as renew (and
/// acquire) time.
fn step(
    spec: &LeaseSpec,
    identity: &str,
    duration: Duration,
    unchanged_since: Instant,
    now: Instant,
    at: jiff::Timestamp,
) -> Step {
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
    let ours = holder == Some(identity);
    let valid_for = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(duration, Duration::from_secs);
    if holder.is_some() && !ours && now < unchanged_since + valid_for {
        return Step::Follow;
    }
    let transitions = spec.lease_transitions.unwrap_or(0);
    let new_lease = *spec == LeaseSpec::default();
    Step::Write(LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)),
        renew_time: Some(MicroTime(at)),
        acquire_time: if ours {
            spec.acquire_time.clone()
        } else {
            Some(MicroTime(at))
        },
        lease_transitions: Some(if ours || new_lease {
            transitions
        } else {
            transitions.saturating_add(1)
        }),
        ..LeaseSpec::default()
    })
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// The Lease and this replica's name in it.
#[derive(Clone)]
struct LeaseRef {
    api: Api<Lease>,
    name: String,
    identity: String,
}

impl LeaseRef {
    /// Empties the holder when this replica still holds the Lease (conditional, as every
    /// write), so that a follower takes it at its next look instead of after the duration.
    /// `Ok(false)`: the Lease is not this replica's (any more).
    /// A conflict is read again: a renewal of this replica's that was on its way when the
    /// renewals stopped may have landed in between.
    async fn release(&self) -> Result<bool, kube::Error> {
        loop {
            let Some(mut lease) = self.api.get_opt(&self.name).await? else {
                return Ok(false);
            };
            let Some(spec) = lease.spec.as_mut() else {
                return Ok(false);
            };
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok(false);
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
            match self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => return Ok(true),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// What a look at the Lease ended in.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// This replica holds the Lease as of the write's start.
    Holding,
    /// Another replica holds it.
    Following,
    /// Someone wrote the Lease between the read and the write: look again.
    Conflict,
}

/// One replica's view of the Lease.
struct Candidate {
    lease: LeaseRef,
    duration: Duration,
    /// The Lease spec last read or written, and since when (this replica's clock) it is so.
    seen: Option<(LeaseSpec, Instant)>,
}

/// Notes `spec` as read or written at `now`; returns since when it is as it is.
fn see(seen: &mut Option<(LeaseSpec, Instant)>, spec: LeaseSpec, now: Instant) -> Instant {
    match seen {
        Some((known, since)) if *known == spec => *since,
        _ => {
            *seen = Some((spec, now));
            now
        }
    }
}

impl Candidate {
    /// Reads the Lease and takes or renews it when it is this replica's, free, or expired.
    async fn try_acquire_or_renew(&mut self) -> Result<Outcome, kube::Error> {
        let Self {
            lease:
                LeaseRef {
                    api,
                    name,
                    identity,
                },
            duration,
            seen,
        } = self;
        let read = api.get_opt(name).await?;
        let now = Instant::now();
        let (mut lease, since) = match read {
            Some(mut lease) => {
                let spec = lease.spec.take().unwrap_or_default();
                let since = see(seen, spec.clone(), now);
                lease.spec = Some(spec);
                (lease, since)
            }
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec::default()),
                };
                (lease, now)
            }
        };
        let current = lease.spec.clone().unwrap_or_default();
        let at = jiff::Timestamp::now();
        let Step::Write(next) = step(&current, identity, *duration, since, now, at) else {
            return Ok(Outcome::Following);
        };
        lease.spec = Some(next);
        // The create fails with 409 when another replica created the Lease first; the
        // replace carries the resourceVersion read, and fails with 409 after anyone's write.
        let written = if lease.metadata.resource_version.is_none() {
            api.create(&PostParams::default(), &lease).await
        } else {
            api.replace(name, &PostParams::default(), &lease).await
        };
        match written {
            Ok(written) => {
                see(seen, written.spec.unwrap_or_default(), Instant::now());
                Ok(Outcome::Holding)
            }
            Err(e) if is_conflict(&e) => Ok(Outcome::Conflict),
            Err(e) => Err(e),
        }
    }
}

/// The leader's renewals as [`Leadership::lost`] reads them.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Hold {
    /// Leading until this deadline, unless a renewal moves it.
    Until(Instant),
    /// The Lease names another replica.
    Lost,
}

/// Renews the Lease every retry period, moving the deadline in `hold` with each renewal that
/// gets through, until the Lease names another replica.
async fn renew(mut candidate: Candidate, election: LeaderElection, hold: watch::Sender<Hold>) {
    let mut wait = election.retry_period();
    loop {
        tokio::time::sleep(wait).await;
        let sent = Instant::now();
        wait = match candidate.try_acquire_or_renew().await {
            Ok(Outcome::Holding) => {
                hold.send_replace(Hold::Until(sent + election.renew_deadline()));
                election.retry_period()
            }
            Ok(Outcome::Following) => {
                tracing::warn!("the Lease names another replica");
                hold.send_replace(Hold::Lost);
                return;
            }
            Ok(Outcome::Conflict) => RENEW_RETRY,
            Err(error) => {
                tracing::warn!(%error, "could not renew the Lease; trying again");
                RENEW_RETRY
            }
        };
    }
}

/// This replica's leadership; [`Leadership::release`] steps down.
pub struct Leadership {
    hold: watch::Receiver<Hold>,
    renewing: JoinHandle<()>,
    lease: LeaseRef,
}

impl Leadership {
    /// Joins the election and waits until this replica leads. A failed first look at the
    /// Lease (RBAC, a missing namespace, no API server) is an error; later failures are
    /// retried.
    pub async fn acquire(
        client: kube::Client,
        election: &LeaderElection,
        identity: &str,
    ) -> Result<Self, LeaderError> {
        let election = LeaderElection {
            duration: election.duration.max(Duration::from_secs(2)),
            ..election.clone()
        };
        let lease = LeaseRef {
            api: Api::namespaced(client, &election.namespace),
            name: election.lease.clone(),
            identity: identity.to_owned(),
        };
        let mut candidate = Candidate {
            lease: lease.clone(),
            duration: election.duration,
            seen: None,
        };
        let retry = election.retry_period();
        let mut failures = 0u32;
        let mut first = true;
        loop {
            let sent = Instant::now();
            let outcome = candidate.try_acquire_or_renew().await;
            let wait = match outcome {
                Ok(Outcome::Holding) => {
                    tracing::info!(
                        lease = %election.lease,
                        namespace = %election.namespace,
                        identity,
                        "became leader"
                    );
                    let (tx, hold) = watch::channel(Hold::Until(sent + election.renew_deadline()));
                    let renewing = tokio::spawn(renew(candidate, election, tx));
                    return Ok(Self {
                        hold,
                        renewing,
                        lease,
                    });
                }
                Ok(Outcome::Following | Outcome::Conflict) => {
                    failures = 0;
                    retry
                }
                Err(source) if first => {
                    return Err(LeaderError {
                        namespace: election.namespace.clone(),
                        name: election.lease.clone(),
                        source,
                    });
                }
                Err(error) => {
                    // A refusal that lasts is a warning now and then, not a flood.
                    failures = failures.saturating_add(1);
                    let wait = retry
                        .saturating_mul(1 << failures.min(5))
                        .min(FOLLOWER_RETRY_MAX);
                    tracing::warn!(%error, failures, retry_in = ?wait, "leader election request failed");
                    wait
                }
            };
            first = false;
            tokio::time::sleep(wait).await;
        }
    }

    /// Steps down: stops renewing and empties the Lease's holder when this replica still holds
    /// it, so that a follower takes it at its next look. Waits for that at most `timeout`: the
    /// process exits after this, and an unfinished write would be cancelled with it. A renewal
    /// still on its way cannot take the Lease back: it carries an older resourceVersion.
    pub async fn release(self, timeout: Duration) {
        self.renewing.abort();
        match tokio::time::timeout(timeout, self.lease.release()).await {
            Ok(Ok(true)) => tracing::info!("released the Lease"),
            Ok(Ok(false)) => tracing::info!("the Lease is no longer this replica's"),
            Ok(Err(error)) => {
                tracing::warn!(%error, "could not release the Lease; it expires on its own")
            }
            Err(_) => tracing::warn!(
                ?timeout,
                "releasing the Lease took too long; it expires on its own"
            ),
        }
    }

    /// Stops renewing and leaves the Lease to expire (after a lost hold, or when reconciles
    /// were cut off and their last requests may still land).
    pub fn abandon(self) {
        self.renewing.abort();
    }

    /// Resolves when this replica no longer leads: the Lease names another replica, or no
    /// renewal got through before the renew deadline.
    pub async fn lost(&mut self) {
        loop {
            let Hold::Until(deadline) = *self.hold.borrow_and_update() else {
                return;
            };
            if Instant::now() >= deadline {
                tracing::warn!(
                    "could not renew the Lease in time (API server unreachable?); stepping down before it expires"
                );
                return;
            }
            tokio::select! {
                changed = self.hold.changed() => if changed.is_err() {
                    // The renewals ended (on a lost hold, said in the value).
                    return;
                },
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(15);

    fn held_by(holder: &str, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(transitions),
            acquire_time: Some(MicroTime(jiff::Timestamp::UNIX_EPOCH)),
            renew_time: Some(MicroTime(jiff::Timestamp::UNIX_EPOCH)),
            ..LeaseSpec::default()
        }
    }

    fn written(step: Step) -> LeaseSpec {
        match step {
            Step::Write(spec) => spec,
            Step::Follow => panic!("followed"),
        }
    }

    /// Another replica's Lease is valid for its duration from when this replica saw it change,
    /// whatever its renew time says (an hour ago by this clock here): clocks may disagree.
    #[test]
    fn another_replicas_lease_expires_by_this_replicas_clock() {
        let at = jiff::Timestamp::now();
        let seen = Instant::now();
        let theirs = held_by("other", 4);
        assert_eq!(
            step(
                &theirs,
                "me",
                D,
                seen,
                seen + D - Duration::from_millis(1),
                at
            ),
            Step::Follow
        );
        let taken = written(step(&theirs, "me", D, seen, seen + D, at));
        assert_eq!(taken.holder_identity.as_deref(), Some("me"));
        assert_eq!(taken.lease_transitions, Some(5));
        assert_eq!(taken.acquire_time, Some(MicroTime(at)));
        assert_eq!(taken.renew_time, Some(MicroTime(at)));
        assert_eq!(taken.lease_duration_seconds, Some(15));
    }

    /// A renewal keeps the acquire time and the count of transitions; a free Lease (released:
    /// no holder) is taken at once and counts a transition; a new one counts none.
    #[test]
    fn renewals_takes_and_new_leases() {
        let at = jiff::Timestamp::now();
        let now = Instant::now();
        let renewed = written(step(&held_by("me", 4), "me", D, now, now, at));
        assert_eq!(renewed.lease_transitions, Some(4));
        assert_eq!(
            renewed.acquire_time,
            Some(MicroTime(jiff::Timestamp::UNIX_EPOCH))
        );
        assert_eq!(renewed.renew_time, Some(MicroTime(at)));

        let mut released = held_by("", 4);
        released.lease_duration_seconds = Some(1);
        let taken = written(step(&released, "me", D, now, now, at));
        assert_eq!(taken.lease_transitions, Some(5));
        assert_eq!(taken.holder_identity.as_deref(), Some("me"));

        let created = written(step(&LeaseSpec::default(), "me", D, now, now, at));
        assert_eq!(created.lease_transitions, Some(0));
    }

    /// The Lease's own duration counts, not this replica's setting.
    #[test]
    fn the_lease_says_how_long_it_is_valid() {
        let at = jiff::Timestamp::now();
        let seen = Instant::now();
        let mut short = held_by("other", 0);
        short.lease_duration_seconds = Some(2);
        assert!(matches!(
            step(&short, "me", D, seen, seen + Duration::from_secs(2), at),
            Step::Write(_)
        ));
    }
}
