//! Dispatch: one entry per webhook ([`mutate`], [`validate`]) for every admitted type. Each
//! decodes the AdmissionReview ([`crate::decode`]), answers what is not the type's to judge
//! (another review version, another kind, a subresource), hands the request to the type's
//! [`Defaulter`] or [`Validator`], and produces the answer ([`crate::response`]) and the audit
//! record. Synchronous and pure apart from the clock, so it is unit-tested and benchmarked
//! without a server.

use std::time::{Instant, SystemTime};

use crate::audit::AuditRecord;
use crate::decode::{self, ObjectText, Typed};
use crate::defaulter::{self, Defaulter};
use crate::request::{Object, REVIEW_API_VERSION, Request};
use crate::response::Response;
use crate::validator::{self, Validator};

// The dispatch's inputs, where its callers look for them.
pub use crate::request::{AdmissionContext, Mode};

/// The serialized answer and its audit record.
pub struct AdmissionOutcome {
    /// JSON body of the `AdmissionReview` response.
    pub body: Vec<u8>,
    /// One record for the audit trail.
    pub audit: AuditRecord,
}

/// Answers one AdmissionReview body of the mutating webhook for type `T`. Never panics on
/// input: malformed JSON, a wrong review version or an unexpected kind yield an answer naming
/// the problem.
pub fn mutate<T>(body: &[u8], ctx: &AdmissionContext, now: SystemTime) -> AdmissionOutcome
where
    T: Object + PartialEq,
    AdmissionContext: Defaulter<T>,
{
    admit::<T>(Mode::Mutate, body, now, |req, object_text, audit| {
        defaulter::handle(ctx, req, object_text, audit)
    })
}

/// Answers one AdmissionReview body of the validating webhook for type `T`, as [`mutate`].
pub fn validate<T>(body: &[u8], ctx: &AdmissionContext, now: SystemTime) -> AdmissionOutcome
where
    T: Object,
    AdmissionContext: Validator<T>,
{
    admit::<T>(Mode::Validate, body, now, |req, _object_text, audit| {
        validator::handle(ctx, req, now, audit)
    })
}

/// Decode, dispatch to `handle`, answer, audit.
fn admit<T: Object>(
    mode: Mode,
    body: &[u8],
    now: SystemTime,
    handle: impl FnOnce(&Request<T>, ObjectText<'_>, &mut AuditRecord) -> Response,
) -> AdmissionOutcome {
    let started = Instant::now();
    let mut audit = AuditRecord::new(mode, now);
    audit.kind = T::kind(&()).to_string();
    let mut response = match decode::review::<T>(body) {
        Ok(typed) => decide(typed, handle, &mut audit),
        Err(e) => undecodable::<T>(mode, body, &e, &mut audit),
    };
    // The apiserver makes a new UID for every webhook call and logs none: this annotation in
    // its audit log is what ties its event to our record.
    if !response.uid.is_empty() {
        response
            .audit_annotations
            .insert("review-uid", response.uid.clone());
    }
    audit.allowed = response.allowed;
    if !response.allowed && audit.violations.is_empty() && !response.message().is_empty() {
        audit.error = Some(response.message().to_string());
    }
    audit.warnings = response.warnings.clone();
    let body = response.to_review_json();
    audit.latency_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    AdmissionOutcome { body, audit }
}

fn decide<T: Object>(
    typed: Typed<'_, T>,
    handle: impl FnOnce(&Request<T>, ObjectText<'_>, &mut AuditRecord) -> Response,
    audit: &mut AuditRecord,
) -> Response {
    let Typed {
        review,
        object_text,
    } = typed;
    if review.api_version != REVIEW_API_VERSION || review.kind != "AdmissionReview" {
        let uid = review
            .request
            .as_ref()
            .map_or("", |request| request.uid.as_str());
        return Response::bad_request(
            uid,
            &format!(
                "expected an AdmissionReview of apiVersion {REVIEW_API_VERSION}, got kind {:?} apiVersion {:?}; register the webhook with admissionReviewVersions [v1]",
                review.kind, review.api_version
            ),
        );
    }
    let Some(req) = review.request else {
        return Response::bad_request("", "the AdmissionReview has no request");
    };
    let response = if !is_kind::<T>(&req.kind.group, &req.kind.version, &req.kind.kind) {
        wrong_kind::<T>(&req.uid, &req.kind)
    } else if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
        // Subresources (status) are not ours to judge.
        Response::allowed(&req.uid)
    } else {
        handle(&req, object_text, audit)
    };
    audit.take_from(req);
    response
}

fn is_kind<T: Object>(group: &str, version: &str, kind: &str) -> bool {
    group == T::group(&()) && version == T::version(&()) && kind == T::kind(&())
}

fn wrong_kind<T: Object>(uid: &str, got: &kube::core::GroupVersionKind) -> Response {
    Response::denied(
        uid,
        format!(
            "this endpoint admits {}/{} {}, got {}/{} {}; check the rules of the webhook configuration",
            T::group(&()),
            T::version(&()),
            T::kind(&()),
            got.group,
            got.version,
            got.kind
        ),
    )
}

/// The answer to a body that does not decode as an AdmissionReview of `T`: find out why and
/// say so, copying the uid when it can be read. An object that does not match `T` passes the
/// mutating webhook unchanged: the apiserver checks it against the CRD's schema next and names
/// every field at fault in its own words, and the validating webhook refuses whatever that
/// check lets through.
fn undecodable<T: Object>(
    mode: Mode,
    body: &[u8],
    err: &serde_json::Error,
    audit: &mut AuditRecord,
) -> Response {
    let Ok(review) = decode::raw_review(body) else {
        return Response::bad_request("", &format!("malformed AdmissionReview: {err}"));
    };
    let Some(mut req) = review.request else {
        return Response::bad_request("", "the AdmissionReview has no request");
    };
    let objects = [
        ("object", req.object.take()),
        ("oldObject", req.old_object.take()),
    ];
    let uid = req.uid.clone();
    let kind = req.kind.clone();
    audit.take_from(req);
    if kind.group != T::group(&()) || kind.kind != T::kind(&()) {
        return wrong_kind::<T>(&uid, &kind);
    }
    // Name the field that does not match the type (located in the text, no JSON tree).
    for (label, obj) in objects {
        if let Some((field, e)) = obj.and_then(|o| decode::object_mismatch::<T>(o.get())) {
            if mode == Mode::Mutate && label == "object" {
                return Response::allowed(uid);
            }
            let violation =
                decode::mismatch_violation(&field, &e.to_string(), label, T::kind(&()).as_ref());
            // The path names the map keys as sent.
            let violation = violation.presentable();
            let response = Response::denied(uid, violation.to_string());
            audit.violations = vec![violation];
            return response;
        }
    }
    Response::denied(uid, format!("the AdmissionReview does not decode: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kim_shared::validation::ValidationOutcome;
    use serde_json::Value;
    use serde_json::json;
    use std::collections::BTreeMap;

    /// A stand-in admitted type: data key "bad" is a violation; defaults add data "defaulted".
    impl Defaulter<ConfigMap> for AdmissionContext {
        fn apply_defaults(
            &self,
            obj: &mut ConfigMap,
            _old: Option<&ConfigMap>,
            _user: &k8s_openapi::api::authentication::v1::UserInfo,
        ) {
            obj.data
                .get_or_insert_with(Default::default)
                .entry("defaulted".into())
                .or_insert_with(|| "yes".into());
        }
    }

    impl Validator<ConfigMap> for AdmissionContext {
        fn unavailable(&self, _old: Option<&ConfigMap>, _new: &ConfigMap) -> Option<String> {
            self.cloud_profiles
                .as_ref()
                .and_then(|p| p.ready().err())
                .map(str::to_owned)
        }
        fn validate_create(&self, obj: &ConfigMap) -> ValidationOutcome {
            let mut f = ValidationOutcome::default();
            if obj.data.as_ref().is_some_and(|d| d.contains_key("bad")) {
                f.violation("data.bad", "must not be set");
            }
            if obj.data.as_ref().is_some_and(|d| d.contains_key("old")) {
                f.warnings.push("data.old: deprecated, ignored".into());
            }
            f
        }
        fn validate_update(&self, old: &ConfigMap, new: &ConfigMap) -> ValidationOutcome {
            let mut f = self.validate_create(new);
            if old.data != new.data && old.data.as_ref().is_some_and(|d| d.contains_key("frozen")) {
                f.violation("data", "is immutable once frozen");
            }
            f
        }
        fn validate_delete(
            &self,
            metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            _user: &k8s_openapi::api::authentication::v1::UserInfo,
            _now: SystemTime,
        ) -> ValidationOutcome {
            let mut f = ValidationOutcome::default();
            let confirmed = metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("confirm"));
            if self.deletion_protection && !confirmed {
                f.violation("metadata.annotations[confirm]", "missing");
            }
            f
        }
    }

    fn review(op: &str, object: Value, old: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "uid-1",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "name": "cm", "namespace": "ns",
                "operation": op,
                "userInfo": {"username": "alice", "groups": ["devs"]},
                "object": object,
                "oldObject": old,
                "dryRun": true
            }
        }))
        .expect("json")
    }

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}, "data": data})
    }

    fn response(a: &AdmissionOutcome) -> Value {
        let v: Value = serde_json::from_slice(&a.body).expect("response is JSON");
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(v["kind"], "AdmissionReview");
        v["response"].clone()
    }

    fn admit_with(mode: Mode, body: &[u8], ctx: &AdmissionContext) -> AdmissionOutcome {
        match mode {
            Mode::Mutate => mutate::<ConfigMap>(body, ctx, SystemTime::now()),
            Mode::Validate => validate::<ConfigMap>(body, ctx, SystemTime::now()),
        }
    }

    fn run(mode: Mode, body: &[u8]) -> (Value, AuditRecord) {
        let a = admit_with(mode, body, &AdmissionContext::default());
        (response(&a), a.audit)
    }

    /// A field the webhook's types do not know (a newer CRD during a rollout) stays as sent:
    /// the defaults patch adds the default and removes nothing.
    #[test]
    fn the_defaults_patch_leaves_fields_unknown_to_our_types_alone() {
        let mut obj = cm(json!({"a": "1"}));
        obj["futureField"] = json!({"x": 1});
        obj["metadata"]["futureMeta"] = json!("kept");
        let (answer, audit) = run(Mode::Mutate, &review("CREATE", obj, Value::Null));
        assert_eq!(answer["allowed"], true, "{answer}");
        assert_eq!(audit.patch_paths, vec!["/data/defaulted".to_string()]);
    }

    /// A request the webhook cannot judge yet is answered "retry" (503), not "invalid"; a
    /// deletion does not wait for it.
    #[test]
    fn a_webhook_that_cannot_judge_yet_answers_service_unavailable() {
        let ctx = AdmissionContext {
            cloud_profiles: Some(crate::profiles::CloudProfiles::unlisted()),
            ..AdmissionContext::default()
        };
        let a = admit_with(
            Mode::Validate,
            &review("CREATE", cm(json!({"a": "1"})), Value::Null),
            &ctx,
        );
        let answer = response(&a);
        assert_eq!(answer["allowed"], false);
        assert_eq!(answer["status"]["code"], 503, "{answer}");
        assert_eq!(answer["status"]["reason"], "ServiceUnavailable");
        assert_eq!(
            answer["status"]["message"],
            "the webhook cannot judge this request yet: the Gardener CloudProfiles are not cached yet; retry shortly"
        );
        assert!(a.audit.error.is_some_and(|e| e.contains("not cached yet")));
        let mut stored = cm(json!({"a": "1"}));
        stored["metadata"]["annotations"] = json!({"confirm": "yes"});
        let a = admit_with(Mode::Validate, &review("DELETE", Value::Null, stored), &ctx);
        assert_eq!(response(&a)["allowed"], true);
    }

    #[test]
    fn allows_valid_create_and_copies_uid() {
        let (answer, audit) = run(
            Mode::Validate,
            &review("CREATE", cm(json!({"a": "1"})), Value::Null),
        );
        assert_eq!(answer["uid"], "uid-1");
        assert_eq!(answer["allowed"], true);
        assert_eq!(answer["auditAnnotations"]["decision"], "allowed");
        assert_eq!(answer["auditAnnotations"]["review-uid"], "uid-1");
        assert!(audit.allowed && audit.dry_run);
        assert_eq!(audit.user, "alice");
        assert_eq!(audit.groups, vec!["devs".to_string()]);
        assert_eq!(audit.operation, "CREATE");
        assert_eq!(audit.name, "cm");
    }

    #[test]
    fn the_audit_record_keeps_the_token_identity_and_no_other_extra() {
        let mut v: Value =
            serde_json::from_slice(&review("CREATE", cm(json!({"a": "1"})), Value::Null))
                .expect("json");
        v["request"]["userInfo"] = json!({
            "username": "system:serviceaccount:kcp-system:kcp-kyma-environment-broker",
            "uid": "5e0c2a9b-sa",
            "groups": ["system:serviceaccounts"],
            "extra": {
                "authentication.kubernetes.io/credential-id": ["JTI=6f1d"],
                "authentication.kubernetes.io/pod-name": ["keb-7d9f"],
                "iam.gke.io/user-assertion": ["an-assertion-that-is-a-credential"]
            }
        });
        let (_, audit) = run(Mode::Validate, &serde_json::to_vec(&v).expect("json"));
        assert_eq!(audit.user_uid, "5e0c2a9b-sa");
        assert_eq!(
            audit.user_extra,
            BTreeMap::from([
                (
                    "authentication.kubernetes.io/credential-id".to_string(),
                    vec!["JTI=6f1d".to_string()]
                ),
                (
                    "authentication.kubernetes.io/pod-name".to_string(),
                    vec!["keb-7d9f".to_string()]
                ),
            ])
        );
        let line = audit.to_json();
        assert!(
            line.contains(
                "\"user_extra\":{\"authentication.kubernetes.io/credential-id\":[\"JTI=6f1d\"]"
            ),
            "{line}"
        );
        assert!(!line.contains("assertion"), "{line}");
    }

    #[test]
    fn denies_with_field_path_code_and_causes() {
        let (answer, audit) = run(
            Mode::Validate,
            &review("CREATE", cm(json!({"bad": "1", "old": "x"})), Value::Null),
        );
        assert_eq!(answer["allowed"], false);
        assert_eq!(answer["status"]["code"], 422);
        assert_eq!(answer["status"]["reason"], "Invalid");
        assert_eq!(answer["status"]["message"], "data.bad: must not be set");
        assert_eq!(
            answer["status"]["details"]["causes"][0]["field"],
            "data.bad"
        );
        assert_eq!(answer["warnings"][0], "data.old: deprecated, ignored");
        assert_eq!(answer["auditAnnotations"]["violations"], "data.bad");
        assert_eq!(audit.violations.len(), 1);
        assert_eq!(audit.warnings.len(), 1);
        assert!(!audit.allowed);
    }

    #[test]
    fn update_is_validated_against_old_object() {
        let (answer, _) = run(
            Mode::Validate,
            &review("UPDATE", cm(json!({"a": "2"})), cm(json!({"frozen": "1"}))),
        );
        assert_eq!(answer["allowed"], false);
        assert_eq!(answer["status"]["details"]["causes"][0]["field"], "data");
    }

    #[test]
    fn delete_protection_uses_old_object_and_403() {
        let (answer, audit) = run(
            Mode::Validate,
            &review("DELETE", Value::Null, cm(json!({}))),
        );
        assert_eq!(answer["allowed"], false);
        assert_eq!(answer["status"]["code"], 403);
        assert_eq!(audit.operation, "DELETE");
        let ctx = AdmissionContext {
            deletion_protection: false,
            ..AdmissionContext::default()
        };
        let a = admit_with(
            Mode::Validate,
            &review("DELETE", Value::Null, cm(json!({}))),
            &ctx,
        );
        assert_eq!(response(&a)["allowed"], true);
    }

    /// A stored object whose spec does not read (`data.a` a number) is still repaired by an
    /// update, held to the rules of a new object, not defaulted, and deleted on its metadata.
    #[test]
    fn a_stored_object_that_does_not_read_can_be_repaired_and_deleted() {
        let unreadable = cm(json!({"a": 5, "frozen": "1"}));
        let (answer, audit) = run(
            Mode::Validate,
            &review("UPDATE", cm(json!({"a": "5"})), unreadable.clone()),
        );
        assert_eq!(answer["allowed"], true, "{answer}");
        let warning = answer["warnings"][0].as_str().unwrap_or_default();
        assert!(
            warning.starts_with("the stored ConfigMap does not read (data.a: invalid type"),
            "{warning}"
        );
        assert!(
            warning.ends_with(
                "this update was checked as a new ConfigMap, without the rules on changes"
            ),
            "{warning}"
        );
        assert_eq!(audit.warnings, vec![warning.to_string()]);
        // The new object's own rules still hold.
        let (answer, _) = run(
            Mode::Validate,
            &review("UPDATE", cm(json!({"bad": "1"})), unreadable.clone()),
        );
        assert_eq!(answer["allowed"], false);
        assert_eq!(
            answer["status"]["details"]["causes"][0]["field"],
            "data.bad"
        );
        // The mutating webhook fills in nothing (what the update adds cannot be told).
        let (answer, audit) = run(
            Mode::Mutate,
            &review("UPDATE", cm(json!({"a": "5"})), unreadable.clone()),
        );
        assert_eq!(answer["allowed"], true, "{answer}");
        assert!(answer.get("patch").is_none(), "{answer}");
        assert!(audit.patch_paths.is_empty());
        // Deletion is judged on the metadata.
        let (answer, _) = run(
            Mode::Validate,
            &review("DELETE", Value::Null, unreadable.clone()),
        );
        assert_eq!(answer["allowed"], false);
        assert_eq!(answer["status"]["code"], 403);
        let mut confirmed = unreadable;
        confirmed["metadata"]["annotations"] = json!({"confirm": "yes"});
        let (answer, _) = run(Mode::Validate, &review("DELETE", Value::Null, confirmed));
        assert_eq!(answer["allowed"], true, "{answer}");
        // A stored object whose metadata does not read is refused, naming the field.
        let mut no_meta = cm(json!({}));
        no_meta["metadata"]["labels"] = json!(5);
        for (op, object) in [("UPDATE", cm(json!({}))), ("DELETE", Value::Null)] {
            let (answer, _) = run(Mode::Validate, &review(op, object, no_meta.clone()));
            assert_eq!(answer["allowed"], false, "{op}");
            let msg = answer["status"]["message"].as_str().unwrap_or_default();
            assert!(
                msg.starts_with("metadata.labels: oldObject does not match the ConfigMap schema"),
                "{op}: {msg}"
            );
        }
    }

    /// `status` is neither typed nor judged (nor touched by the patch): a stored status the
    /// types cannot read does not block changes to its object.
    #[test]
    fn status_is_not_read() {
        let mut obj = cm(json!({"a": "1"}));
        obj["status"] = json!({"conditions": [{"lastTransitionTime": 5}]});
        let (answer, audit) = run(Mode::Validate, &review("UPDATE", obj.clone(), obj.clone()));
        assert_eq!(answer["allowed"], true, "{answer}");
        assert!(audit.warnings.is_empty(), "{:?}", audit.warnings);
        let (answer, _) = run(Mode::Mutate, &review("CREATE", obj.clone(), Value::Null));
        let ops: json_patch::Patch =
            serde_json::from_slice(&b64(answer["patch"].as_str().expect("patch"))).expect("json");
        let mut doc = obj.clone();
        json_patch::patch(&mut doc, &ops).expect("patch applies");
        assert_eq!(doc["status"], obj["status"], "status kept as sent");
        // It must still be JSON.
        let body = String::from_utf8(review("CREATE", obj, Value::Null)).expect("utf-8");
        let broken = body.replacen("\"lastTransitionTime\":5", "\"lastTransitionTime\":5,", 1);
        assert_ne!(broken, body);
        let (answer, _) = run(Mode::Validate, broken.as_bytes());
        assert_eq!(answer["allowed"], false);
    }

    #[test]
    fn mutate_returns_patch_that_applies_to_the_request_object() {
        let obj = cm(json!({"a": "1"}));
        let (answer, audit) = run(Mode::Mutate, &review("CREATE", obj.clone(), Value::Null));
        assert_eq!(answer["allowed"], true);
        assert_eq!(answer["patchType"], "JSONPatch");
        let patch = answer["patch"].as_str().expect("patch is base64");
        let ops: json_patch::Patch = serde_json::from_slice(&b64(patch)).expect("patch json");
        let mut doc = obj;
        json_patch::patch(&mut doc, &ops).expect("patch applies");
        assert_eq!(doc["data"]["defaulted"], "yes");
        assert_eq!(audit.patch_paths, vec!["/data/defaulted".to_string()]);
        assert_eq!(
            answer["auditAnnotations"]["patched-paths"],
            "/data/defaulted"
        );
    }

    #[test]
    fn mutate_adds_missing_parent_objects() {
        // No "data" at all in the request: the patch must add the whole map.
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
        let (answer, _) = run(Mode::Mutate, &review("CREATE", obj.clone(), Value::Null));
        let ops: json_patch::Patch =
            serde_json::from_slice(&b64(answer["patch"].as_str().expect("patch"))).expect("json");
        let mut doc = obj;
        json_patch::patch(&mut doc, &ops).expect("patch applies to the raw object");
        assert_eq!(doc["data"], json!({"defaulted": "yes"}));
    }

    #[test]
    fn mutate_without_changes_has_no_patch() {
        let (answer, audit) = run(
            Mode::Mutate,
            &review("CREATE", cm(json!({"defaulted": "no"})), Value::Null),
        );
        assert_eq!(answer["allowed"], true);
        assert!(answer.get("patch").is_none());
        assert!(audit.patch_paths.is_empty());
    }

    #[test]
    fn malformed_json_is_an_error_response_not_a_panic() {
        for body in [
            &b"{not json"[..],
            b"",
            b"[]",
            b"null",
            b"{\"apiVersion\":1}",
        ] {
            let (answer, audit) = run(Mode::Validate, body);
            assert_eq!(
                answer["allowed"],
                false,
                "{}",
                String::from_utf8_lossy(body)
            );
            let msg = answer["status"]["message"].as_str().unwrap_or_default();
            assert!(msg.contains("AdmissionReview"), "{msg}");
            assert!(audit.error.is_some());
        }
    }

    #[test]
    fn wrong_review_version_is_named() {
        let mut v: Value =
            serde_json::from_slice(&review("CREATE", cm(json!({})), Value::Null)).expect("json");
        v["apiVersion"] = json!("admission.k8s.io/v1beta1");
        let (answer, _) = run(Mode::Validate, &serde_json::to_vec(&v).expect("json"));
        assert_eq!(answer["allowed"], false);
        assert!(
            answer["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("admission.k8s.io/v1beta1")
        );
        assert_eq!(answer["uid"], "uid-1");
    }

    #[test]
    fn unexpected_kind_is_named() {
        let mut v: Value =
            serde_json::from_slice(&review("CREATE", cm(json!({})), Value::Null)).expect("json");
        v["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
        let (answer, _) = run(Mode::Validate, &serde_json::to_vec(&v).expect("json"));
        assert_eq!(answer["allowed"], false);
        let msg = answer["status"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("admits /v1 ConfigMap, got apps/v1 Deployment"),
            "{msg}"
        );
        assert_eq!(answer["uid"], "uid-1");
    }

    #[test]
    fn object_not_matching_schema_names_the_field() {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": 5}});
        let (answer, audit) = run(Mode::Validate, &review("CREATE", obj, Value::Null));
        assert_eq!(answer["allowed"], false);
        assert_eq!(answer["uid"], "uid-1");
        let msg = answer["status"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.starts_with("data.a: object does not match the ConfigMap schema"),
            "{msg}"
        );
        assert_eq!(audit.violations[0].field, "data.a");
        // The mutating webhook lets it on, unchanged, to the apiserver's schema check.
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": 5}});
        let (answer, audit) = run(Mode::Mutate, &review("CREATE", obj, Value::Null));
        assert_eq!(answer["allowed"], true, "{answer}");
        assert!(answer.get("patch").is_none(), "{answer}");
        assert!(audit.violations.is_empty() && audit.patch_paths.is_empty());
    }

    #[test]
    fn status_subresource_is_allowed() {
        let mut v: Value =
            serde_json::from_slice(&review("UPDATE", cm(json!({"bad": "1"})), cm(json!({}))))
                .expect("json");
        v["request"]["subResource"] = json!("status");
        let (answer, _) = run(Mode::Validate, &serde_json::to_vec(&v).expect("json"));
        assert_eq!(answer["allowed"], true);
    }

    #[test]
    fn the_patch_leaves_managed_fields_alone() {
        let mut obj = cm(json!({"a": "1"}));
        obj["metadata"]["managedFields"] = json!([{"manager": "keb", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {".": {}, "f:a": {}}}}]);
        let (answer, audit) = run(Mode::Mutate, &review("CREATE", obj.clone(), Value::Null));
        let ops: json_patch::Patch =
            serde_json::from_slice(&b64(answer["patch"].as_str().expect("patch"))).expect("json");
        assert_eq!(audit.patch_paths, vec!["/data/defaulted".to_string()]);
        let mut doc = obj.clone();
        json_patch::patch(&mut doc, &ops).expect("patch applies");
        assert_eq!(
            doc["metadata"], obj["metadata"],
            "managedFields kept as sent"
        );
    }

    #[test]
    fn reviews_serde_refuses_are_denied_with_its_reason() {
        // An integer spelled -0: serde reads it as a float, and refuses it for an integer.
        let mut obj = cm(json!({"a": "1"}));
        obj["metadata"]["generation"] = json!(7);
        let body = String::from_utf8(review("CREATE", obj, Value::Null)).expect("utf-8");
        let minus_zero = body.replacen("\"generation\":7", "\"generation\":-0", 1);
        assert_ne!(minus_zero, body);
        let (answer, audit) = run(Mode::Validate, minus_zero.as_bytes());
        assert_eq!(answer["allowed"], false);
        assert_eq!(answer["uid"], "uid-1");
        let msg = answer["status"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.starts_with("metadata.generation: object does not match the ConfigMap schema"),
            "{msg}"
        );
        assert_eq!(audit.violations[0].field, "metadata.generation");
        // A duplicate field of the request, and a null where a value is required.
        for bad in [
            body.replacen("\"uid\":", "\"uid\":\"dup\",\"uid\":", 1),
            body.replacen("\"dryRun\":true", "\"dryRun\":null", 1),
        ] {
            assert_ne!(bad, body);
            let (answer, audit) = run(Mode::Validate, bad.as_bytes());
            assert_eq!(answer["allowed"], false, "{bad}");
            assert_eq!(answer["status"]["code"], 400, "{bad}");
            let msg = answer["status"]["message"].as_str().unwrap_or_default();
            assert!(msg.starts_with("malformed AdmissionReview"), "{msg}");
            assert!(audit.error.is_some());
        }
        // A null where the value is optional is read as absent.
        let null_namespace = body.replacen("\"namespace\":\"ns\"", "\"namespace\":null", 1);
        assert_ne!(null_namespace, body);
        let (answer, audit) = run(Mode::Validate, null_namespace.as_bytes());
        assert_eq!(answer["allowed"], true, "{answer}");
        assert_eq!(audit.namespace, "");
    }

    fn b64(s: &str) -> Vec<u8> {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .expect("base64")
    }
}
