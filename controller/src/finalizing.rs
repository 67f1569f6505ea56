//! What the reconcilers built on kube's `finalizer` helper share: turning its result into the
//! reconcile result.

use kube::runtime::controller::Action;
use kube::runtime::finalizer;

/// The reconcile result from the finalizer helper's result. A finalizer patch that finds the
/// object gone (404) is success: a reconcile queued from a stale cache entry ran the cleanup a
/// second time after the object had already left, and there is nothing left to do. Other
/// finalizer errors become `finalizer_error(<message>)`.
pub fn finalizer_result<E: std::error::Error + 'static>(
    outcome: Result<Action, finalizer::Error<E>>,
    controller: &'static str,
    finalizer_error: impl FnOnce(String) -> E,
) -> Result<Action, E> {
    match outcome {
        Ok(action) => Ok(action),
        Err(finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e)) => Err(e),
        Err(
            finalizer::Error::RemoveFinalizer(kube::Error::Api(s))
            | finalizer::Error::AddFinalizer(kube::Error::Api(s)),
        ) if s.is_not_found() => {
            tracing::debug!(
                controller,
                "object already gone when patching its finalizer"
            );
            Ok(Action::await_change())
        }
        Err(other) => Err(finalizer_error(other.to_string())),
    }
}
