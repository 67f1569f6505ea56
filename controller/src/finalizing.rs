//! Finalizers of the three reconcilers. The GardenerCluster and RuntimeAccess reconcilers clean
//! up in one pass and use kube's `finalizer` helper, whose result [`finalizer_result`] turns into
//! the reconcile result. The Runtime reconciler deletes in several passes (it writes the status
//! while the Shoot goes, and the finalizer may only go once the Shoot is gone), which kube's
//! helper cannot express: it removes the finalizer as soon as cleanup returns. It uses [`add`]
//! and [`remove`], the same patches the helper sends.

use std::fmt::Debug;

use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::finalizer;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

/// Adds `name` to the finalizers of `obj` unless it is there. `api` may read the answer as
/// another type of the same kind (the Runtime reconciler reads it with the status apart).
pub async fn add<K, O>(api: &Api<K>, obj: &O, name: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    O: Resource,
{
    if obj.finalizers().iter().any(|f| f == name) {
        return Ok(());
    }
    let mut finalizers = obj.finalizers().to_vec();
    finalizers.push(name.to_owned());
    patch_finalizers(api, obj, finalizers).await
}

/// Removes `name` from the finalizers of `obj` (`api` as for [`add`]).
pub async fn remove<K, O>(api: &Api<K>, obj: &O, name: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    O: Resource,
{
    let finalizers = obj
        .finalizers()
        .iter()
        .filter(|f| *f != name)
        .cloned()
        .collect();
    patch_finalizers(api, obj, finalizers).await
}

async fn patch_finalizers<K, O>(
    api: &Api<K>,
    obj: &O,
    finalizers: Vec<String>,
) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    O: Resource,
{
    // resourceVersion makes this a compare-and-swap: a concurrent finalizer change wins and
    // we retry (Conflict), instead of overwriting it.
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .map(|_| ())
}

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

/// A delete of the object with this UID only: one made anew under the name since it was
/// looked at (and checked) is left alone (409).
pub fn only_uid(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}
