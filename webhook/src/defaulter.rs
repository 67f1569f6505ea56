//! Defaulting, the mutating webhook: the [`Defaulter`] trait of the admitted types, and the
//! handler that answers a request with the JSON patch from the object as sent to the
//! defaulted object.

use json_patch::{Patch, PatchOperation};
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::core::admission::Operation;
use serde_json::Value;

use crate::audit::AuditRecord;
use crate::decode::{self, ObjectText};
use crate::request::{Object, Request};
use crate::response::{Response, patch_paths};

/// The defaults of an admitted type `T`.
pub trait Defaulter<T> {
    /// Fills in defaults in `obj`, never overriding a value the user set, except what only
    /// the webhook records (who created it). `old` is the stored object on UPDATE, so that an
    /// update only defaults what it adds; `user` is who asks.
    fn apply_defaults(&self, obj: &mut T, old: Option<&T>, user: &UserInfo);
}

/// Answers a CREATE or UPDATE with the patch that turns `object_text`, the object as sent,
/// into the defaulted object: `json_patch::diff` of the two documents, as controller-runtime's
/// `PatchResponseFromRaw` computes it (so the patch applies to exactly what the apiserver
/// holds). Other operations are allowed as they are.
pub fn handle<T: Object + PartialEq>(
    defaulter: &impl Defaulter<T>,
    req: &Request<T>,
    object_text: ObjectText<'_>,
    audit: &mut AuditRecord,
) -> Response {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Response::allowed(&req.uid);
    }
    let Some(obj) = req.object.as_ref() else {
        return Response::denied(&req.uid, "the request has no object to default");
    };
    // On UPDATE, defaults fill only what the update adds to the stored object; when that does
    // not read, what the update adds cannot be told, and nothing is filled in (defaulting it
    // as a new object could, say, add a volume to every pool of a running cluster).
    if req.old_object_unreadable.is_some() {
        return Response::allowed(&req.uid);
    }
    let mut defaulted = obj.clone();
    defaulter.apply_defaults(&mut defaulted, req.old_object.as_ref(), &req.user_info);
    // Nothing to default (most UPDATEs): no patch, and nothing serialized.
    if defaulted == *obj {
        return Response::allowed(&req.uid);
    }
    let patch = || -> Result<Patch, serde_json::Error> {
        let typed = serde_json::to_value(obj)?;
        let sent = match object_text.get() {
            // The typed object has no managedFields (never read): neither has this one, so
            // the patch leaves them alone.
            Some(text) => decode::object_value(text)?,
            None => typed.clone(),
        };
        Ok(without_unknown_removals(
            json_patch::diff(&sent, &serde_json::to_value(&defaulted)?),
            &typed,
        ))
    };
    match patch().and_then(|p| Ok((Response::patched(&req.uid, &p)?, p))) {
        Ok((response, patch)) => {
            audit.patch_paths = patch_paths(&patch);
            response
        }
        Err(e) => Response::denied(
            &req.uid,
            format!("internal error computing the defaults patch: {e}"),
        ),
    }
}

/// `patch` without its removals of what `typed` (the object as our types read it) does not
/// hold: a field of a newer CRD than this webhook's types (while a rollout runs the two side
/// by side) is absent from the typed object, so the plain diff would remove it from every
/// object that gets a default. Defaults only ever add, so no removal of ours is lost.
fn without_unknown_removals(patch: Patch, typed: &Value) -> Patch {
    Patch(
        patch
            .0
            .into_iter()
            .filter(|op| match op {
                PatchOperation::Remove(r) => typed.pointer(r.path.as_str()).is_some(),
                _ => true,
            })
            .collect(),
    )
}
