//! How long the Runtime reconciler waits before it looks again, shared by its steps.

use std::time::Duration;

/// Requeue while something progresses without an event we watch (safety net only: Shoot and
/// GardenerCluster changes arrive as events).
pub const SAFETY_REQUEUE: Duration = Duration::from_secs(300);
/// Requeue after a transient API error (the per-object backoff grows from here).
pub const RETRY: Duration = Duration::from_secs(5);
/// Requeue after an error that needs a change of input (a spec change triggers earlier).
pub const PERMANENT_RETRY: Duration = Duration::from_secs(60);
