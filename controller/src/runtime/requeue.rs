//! How long the Runtime reconciler waits before it looks again, shared by its steps.

use std::time::Duration;

use crate::records::Backoff;

/// Requeue while something progresses without an event we watch (safety net only: Shoot and
/// GardenerCluster changes arrive as events).
pub const SAFETY_REQUEUE: Duration = Duration::from_secs(300);
/// Requeue while a deletion step waits for its GardenerCluster or Shoot to be gone. The event
/// that ends the wait can be lost: a watch that relists after a gap (an apiserver restart, an
/// etcd compaction) shows what exists, not what vanished meanwhile. Deletions are few, so
/// looking again this often costs little.
pub const DELETION_POLL: Duration = Duration::from_secs(30);
/// Requeue after a transient API error (the per-object backoff grows from here).
pub const RETRY: Duration = Duration::from_secs(5);
/// Requeue after an error that needs a change of input (a spec change triggers earlier).
pub const PERMANENT_RETRY: Duration = Duration::from_secs(60);
/// Per-Runtime hold of Gardener writes after a permanent refusal of the same generation
/// (a quota, a missing credentials binding, a spec Gardener refuses): 1 minute, doubling to
/// 30 minutes, each between half and all of that at random; a new generation, the
/// force-patch annotation or a write that goes through ends it.
pub const PERMANENT_BACKOFF: Backoff = Backoff {
    first: Duration::from_secs(60),
    cap: Duration::from_secs(30 * 60),
};
/// Per-Runtime hold after Gardener said "try later" (or a transient error) to one of its
/// writes: 2 s, 4 s ... capped at 60 s, with jitter so Runtimes refused together do not return
/// together.
pub const BUSY_BACKOFF: Backoff = Backoff {
    first: Duration::from_secs(2),
    cap: Duration::from_secs(60),
};
/// Retry of a step in the runtime cluster (the cluster not reachable yet, or not any more):
/// 5 s doubling to 5 minutes, jittered, until the Runtime is Ready. A cluster that does not
/// answer holds a worker for the step's timeout at each attempt, so a few of them must not
/// keep every worker busy.
pub const RUNTIME_CLUSTER_BACKOFF: Backoff = Backoff {
    first: Duration::from_secs(5),
    cap: Duration::from_secs(300),
};
/// How long a Runtime waits for a free Shoot-create slot before it looks again (jittered
/// between half and all of it).
pub const SLOT_WAIT: Backoff = Backoff {
    first: Duration::from_secs(2),
    cap: Duration::from_secs(2),
};
/// How long the objects a Shoot references (the structured-authentication ConfigMap) exist
/// before the Shoot is created, so gardener-apiserver's informer has seen them.
pub const REFERENCES_LEAD: Duration = Duration::from_secs(1);
/// How long a Runtime whose Shoot we created waits for the Shoot's watch event before it looks
/// the Shoot up (instead of creating it again).
pub const CREATED_WATCH_WAIT: Duration = Duration::from_secs(30);
/// How long after it was sent a Shoot create that got no answer may still be admitted: the
/// client stops waiting, but the apiserver handles the request until its own request timeout
/// (kube-apiserver's `--request-timeout`, 60 s by default), plus a margin. A deleted Runtime
/// keeps its finalizer until then, so such a Shoot cannot land orphaned.
pub const UNANSWERED_CREATE_LANDS_WITHIN: Duration = Duration::from_secs(90);
