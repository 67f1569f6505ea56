//! Validation, the validating webhook: the [`Validator`] trait of the admitted types, and the
//! handler that answers a request with their outcome.

use std::time::SystemTime;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kim_shared::validation::ValidationOutcome;
use kube::core::admission::Operation;

use crate::audit::AuditRecord;
use crate::request::{Object, Request};
use crate::response::Response;

/// The rules of an admitted type `T`: violations deny, warnings go back to the client.
pub trait Validator<T> {
    /// Why the webhook cannot judge this CREATE (`old` is `None`) or UPDATE of `T` yet (its
    /// configuration or a cache the rules for it need is missing): answered 503
    /// ServiceUnavailable, which tells the client to retry rather than to change the object.
    fn unavailable(&self, _old: Option<&T>, _new: &T) -> Option<String> {
        None
    }
    /// Validates a new object.
    fn validate_create(&self, obj: &T) -> ValidationOutcome;
    /// Validates a new object created by `user`: [`Validator::validate_create`] unless a type
    /// also judges who creates it.
    fn validate_create_by(&self, obj: &T, _user: &UserInfo) -> ValidationOutcome {
        self.validate_create(obj)
    }
    /// Validates a change from `old` to `new`.
    fn validate_update(&self, old: &T, new: &T) -> ValidationOutcome;
    /// Validates a change from `old` to `new` by `user`: [`Validator::validate_update`] unless
    /// a type also judges who changes it.
    fn validate_update_by(&self, old: &T, new: &T, _user: &UserInfo) -> ValidationOutcome {
        self.validate_update(old, new)
    }
    /// The rules for an update by `user` whose stored object does not read as `T` but whose
    /// metadata `old` does (a repair): those on metadata, and on who may repair. None unless a
    /// type has such rules.
    fn validate_repair_by(
        &self,
        _old: &ObjectMeta,
        _new: &T,
        _user: &UserInfo,
    ) -> ValidationOutcome {
        ValidationOutcome::default()
    }
    /// Validates the deletion of the stored object with `metadata` by `user`: on metadata
    /// alone, so that an object whose spec no longer reads can still be deleted. Its violations
    /// are answered with 403 Forbidden: a refusal to delete is not an invalid object. Allowed
    /// unless a type says otherwise.
    fn validate_delete(
        &self,
        _metadata: &ObjectMeta,
        _user: &UserInfo,
        _now: SystemTime,
    ) -> ValidationOutcome {
        ValidationOutcome::default()
    }
}

/// HTTP code and reason of a denial of CREATE and UPDATE.
const INVALID: (u16, &str) = (422, "Invalid");
/// HTTP code and reason of a denial of DELETE.
const FORBIDDEN: (u16, &str) = (403, "Forbidden");

/// Answers a request with what `validator` finds: allowed, or denied with one cause per
/// violated field; warnings either way.
pub fn handle<T: Object>(
    validator: &impl Validator<T>,
    req: &Request<T>,
    now: SystemTime,
    audit: &mut AuditRecord,
) -> Response {
    let uid = req.uid.as_str();
    let judged = match req.operation {
        Operation::Create | Operation::Update => req.object.as_ref(),
        Operation::Delete | Operation::Connect => None,
    };
    if let Some(new) = judged
        && let Some(why) = validator.unavailable(req.old_object.as_ref(), new)
    {
        return Response::unavailable(uid, &why);
    }
    let (outcome, denial) = match req.operation {
        Operation::Create => match &req.object {
            Some(obj) => (validator.validate_create_by(obj, &req.user_info), INVALID),
            None => return Response::denied(uid, "the CREATE request has no object"),
        },
        Operation::Update => match (&req.object, &req.old_object, &req.old_object_unreadable) {
            (Some(new), Some(old), _) => (
                validator.validate_update_by(old, new, &req.user_info),
                INVALID,
            ),
            // The stored object does not read, so the rules on changes cannot be applied; the
            // update is how it is repaired, so the new object is held to every rule a new one
            // is (the rules on an update judge only what changes, which cannot be told here).
            (Some(new), None, Some(stored)) => {
                let mut outcome = validator.validate_create(new);
                outcome.extend(validator.validate_repair_by(&stored.metadata, new, &req.user_info));
                outcome.warnings.push(format!(
                    "the stored {kind} does not read ({}: {}); this update was checked as a new {kind}, without the rules on changes",
                    stored.field,
                    stored.reason,
                    kind = T::kind(&()),
                ));
                (outcome, INVALID)
            }
            _ => return Response::denied(uid, "the UPDATE request lacks object or oldObject"),
        },
        Operation::Delete => {
            let metadata = match (&req.old_object, &req.old_object_unreadable) {
                (Some(old), _) => old.meta(),
                (None, Some(stored)) => &stored.metadata,
                // Without the stored object there is nothing to protect (e.g. a collection
                // delete of objects we cannot see); the apiserver sends oldObject for single
                // deletes.
                (None, None) => return Response::allowed(uid),
            };
            (
                validator.validate_delete(metadata, &req.user_info, now),
                FORBIDDEN,
            )
        }
        Operation::Connect => return Response::allowed(uid),
    };
    let ValidationOutcome {
        violations,
        warnings,
    } = outcome.presentable();
    if violations.is_empty() {
        let mut response = Response::allowed(uid).with_warnings(warnings);
        response
            .audit_annotations
            .insert("decision", "allowed".into());
        return response;
    }
    let response = Response::rejected(uid, denial, &violations, (&audit.kind, &req.name))
        .with_warnings(warnings);
    audit.violations = violations;
    response
}
