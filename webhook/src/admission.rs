//! One generic admission path for every admitted type: decode the `AdmissionReview`, dispatch
//! on the operation to the type's [`Admitted`] implementation, answer with an
//! `AdmissionReview` (allowed / denied with field causes / JSON patch / warnings / audit
//! annotations) and produce the audit record. Synchronous and pure apart from the clock, so it
//! is unit-tested and benchmarked without a server.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::authentication::v1::UserInfo;
use kim_shared::json::{DecodeError, Reader, once, set_once};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::{StatusCause, StatusDetails};
use kube::core::{DynamicObject, Resource, Status};
use kube::core::{GroupVersionKind, GroupVersionResource, TypeMeta};
use serde::Deserialize;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::audit::AuditRecord;
use crate::patch::{ChangedPart, mutation_patch_for_text, mutation_patch_of_parts};

/// The `apiVersion` of the only AdmissionReview version we speak.
pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

/// One violated rule: the field at fault and what would be valid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldViolation {
    /// Field path, e.g. `spec.shoot.provider.workers[0].name`.
    pub field: String,
    /// What is wrong and what would be valid.
    pub message: String,
}

/// The result of validating one object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Violations; any one denies.
    pub violations: Vec<FieldViolation>,
    /// Non-fatal findings, returned as admission warnings.
    pub warnings: Vec<String>,
    /// HTTP code and reason for a denial (default 422 Invalid; deletion protection uses 403).
    pub denial: Option<(u16, &'static str)>,
}

impl Verdict {
    /// A verdict with one violation.
    pub fn deny(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            violations: vec![FieldViolation {
                field: field.into(),
                message: message.into(),
            }],
            ..Self::default()
        }
    }
}

/// Settings the admitted types need besides the object.
#[derive(Debug, Clone)]
pub struct AdmissionContext {
    /// Deletion protection of Runtimes.
    pub deletion_protection: bool,
    /// How old a deletion confirmation may be.
    pub deletion_window: Duration,
    /// The KIM configuration (defaults and allowed values); `None` denies Runtimes.
    pub config: Option<std::sync::Arc<kim_shared::config::KimConfig>>,
    /// What RuntimeAccess objects may grant.
    pub access_policy: kim_shared::access::AccessPolicy,
    /// Settings of the Runtime validation that are flags (`--audit-log-mandatory`), the same
    /// as the controller's so that what is admitted is provisioned.
    pub validation: kim_shared::validation::ValidationOptions,
}

impl Default for AdmissionContext {
    fn default() -> Self {
        Self {
            deletion_protection: true,
            deletion_window: Duration::from_secs(120),
            config: None,
            access_policy: kim_shared::access::AccessPolicy::default(),
            validation: kim_shared::validation::ValidationOptions::default(),
        }
    }
}

/// What a resource type contributes to admission. Adding a type is one impl of this trait
/// and one route.
pub trait Admitted:
    Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Send + Sync + 'static
{
    /// The object's decoder on `kim_shared::json`'s reader, for a type on the hot path (then
    /// the whole review is read in one pass, with serde as the fallback); `None`: serde only.
    const FAST_DECODER: Option<FastDecoder<Self>> = None;
    /// Decodes the object from its JSON text: [`Admitted::FAST_DECODER`] when it can, else
    /// serde (whose result it always equals). `metadata.managedFields` is never kept: no rule
    /// reads it, and the fast path only checks it (`kim_shared::json`'s module documentation).
    fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        if let Some(decode) = Self::FAST_DECODER
            && let Ok(v) = kim_shared::json::decode_all(text, decode)
        {
            return Ok(v);
        }
        let mut v: Self = serde_json::from_str(text)?;
        v.meta_mut().managed_fields = None;
        Ok(v)
    }
    /// Fills in defaults in place (mutating webhook). Never overrides a user value. `old` is
    /// the stored object on UPDATE, so that an update only defaults what it adds.
    fn default(&mut self, _old: Option<&Self>, _ctx: &AdmissionContext) {}
    /// Where [`Admitted::default`] changed `self` into `defaulted`: every change lies below
    /// one of the returned parts, and the defaults patch is computed over them only
    /// (serializing and comparing the whole object twice was most of a mutating request).
    /// The default is the whole object, which is always right; a type whose defaults touch a
    /// known part of the object can narrow it.
    fn changed_parts(&self, defaulted: &Self) -> Result<Vec<ChangedPart>, serde_json::Error> {
        Ok(vec![ChangedPart {
            pointer: "".into(),
            before: serde_json::to_value(self)?,
            after: serde_json::to_value(defaulted)?,
        }])
    }
    /// Validates a new object.
    fn validate_create(&self, ctx: &AdmissionContext) -> Verdict;
    /// Validates a change.
    fn validate_update(&self, old: &Self, ctx: &AdmissionContext) -> Verdict;
    /// Validates a deletion of `self` (the stored object).
    fn validate_delete(&self, _ctx: &AdmissionContext, _now: SystemTime) -> Verdict {
        Verdict::default()
    }
}

/// A decoder on `kim_shared::json`'s reader; `Err` leaves the input to serde.
pub type FastDecoder<T> = fn(&mut Reader<'_>) -> Result<T, DecodeError>;

/// Which webhook is answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Defaulting; answers with a JSON patch.
    Mutate,
    /// Validation; answers allowed or denied.
    Validate,
}

impl Mode {
    /// Name used in metrics and audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Mutate => "mutate",
            Mode::Validate => "validate",
        }
    }
}

/// The serialized response and its audit record.
pub struct Admission {
    /// JSON body of the `AdmissionReview` response.
    pub body: Vec<u8>,
    /// One record for the audit trail.
    pub audit: AuditRecord,
    /// Whether the review was read in one pass by `kim_shared::json`'s reader (else by serde).
    pub one_pass: bool,
}

/// The AdmissionReview envelope. kube's `AdmissionReview` flattens its `TypeMeta`, which makes
/// serde buffer the whole body into an intermediate tree before typing it; spelling the two
/// fields out decodes in one pass (measured: about half the decode time).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Envelope<R> {
    #[serde(default)]
    pub(crate) api_version: String,
    #[serde(default)]
    pub(crate) kind: String,
    pub(crate) request: Option<R>,
}

/// The request of an AdmissionReview as serde reads it for the webhook. `O` is the object
/// type: its raw JSON text (each object is then typed from its text), or `()` where the objects
/// are handed over separately ([`fast_request`]). Only what the webhook uses is decoded: `requestKind`, `requestResource`, `requestSubResource` and `options` are skipped
/// by the parser instead of being built (`options` alone went through an intermediate tree).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request<O> {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    user_info: UserInfo,
    object: Option<O>,
    old_object: Option<O>,
    #[serde(default)]
    dry_run: bool,
}

impl<O> Request<O> {
    /// kube's request, with `object` and `oldObject` given.
    fn into_kube<T: Resource>(
        self,
        object: Option<T>,
        old_object: Option<T>,
    ) -> AdmissionRequest<T> {
        AdmissionRequest {
            types: TypeMeta::default(),
            uid: self.uid,
            kind: self.kind,
            resource: self.resource,
            sub_resource: self.sub_resource,
            request_kind: None,
            request_resource: None,
            request_sub_resource: None,
            name: self.name,
            namespace: self.namespace,
            operation: self.operation,
            user_info: self.user_info,
            object,
            old_object,
            dry_run: self.dry_run,
            options: None,
        }
    }
}

impl<'a> Request<&'a RawValue> {
    /// The typed request plus the object's JSON text exactly as sent (the defaults patch must
    /// apply to it). Each object is typed straight from its text: one pass, no JSON tree.
    fn typed<T: Admitted>(
        mut self,
    ) -> Result<(AdmissionRequest<T>, Option<&'a str>), serde_json::Error> {
        let raw = self.object.take();
        let object = raw.map(|r| T::from_json(r.get())).transpose()?;
        let old_object = self
            .old_object
            .take()
            .map(|r| T::from_json(r.get()))
            .transpose()?;
        Ok((self.into_kube(object, old_object), raw.map(RawValue::get)))
    }
}

fn expected<T: Admitted>() -> String {
    format!("{}/{} {}", T::group(&()), T::version(&()), T::kind(&()))
}

/// Answers one AdmissionReview body for type `T`. Never panics on input: malformed JSON, a
/// wrong review version or an unexpected kind yield an error response naming the problem.
pub fn admit<T: Admitted>(
    mode: Mode,
    body: &[u8],
    ctx: &AdmissionContext,
    now: SystemTime,
) -> Admission {
    let started = Instant::now();
    let mut audit = AuditRecord::new(mode, now);
    audit.kind = T::kind(&()).to_string();
    // For a type with a fast decoder (the Runtime) the review is read in one pass by
    // `kim_shared::json`'s reader, the object typed as it is read. Otherwise, or when that
    // reader meets anything it does not read exactly as serde (then serde answers, with its
    // own messages), the envelope is decoded with the objects kept as JSON text and each
    // object is typed from its text. Defaulting keeps the object's text: the patch must apply
    // to the object exactly as sent.
    let fast = match (T::FAST_DECODER, std::str::from_utf8(body)) {
        (Some(decoder), Ok(text)) => fast_review(text, decoder).ok(),
        _ => None,
    };
    let one_pass = fast.is_some();
    let decoded = match fast {
        Some(d) => Ok(d),
        None => serde_review::<T>(body),
    };
    let response = match decoded {
        Ok((envelope, raw)) => decide(mode, envelope, ctx, now, raw, &mut audit),
        Err(e) => undecodable::<T>(body, &e, &mut audit),
    };
    finish(response, audit, started, one_pass)
}

/// The review read by serde: the envelope with the objects kept as text, then each object
/// typed from its text.
pub(crate) fn serde_review<T: Admitted>(
    body: &[u8],
) -> Result<DecodedReview<'_, T>, serde_json::Error> {
    decode::<Envelope<Request<&RawValue>>>(body).and_then(|e| {
        let (req, raw) = e.request.map(Request::typed::<T>).transpose()?.unzip();
        Ok((
            Envelope {
                api_version: e.api_version,
                kind: e.kind,
                request: req,
            },
            raw.flatten(),
        ))
    })
}

/// A decoded review and the text of its object, exactly as sent (for the defaults patch).
pub(crate) type DecodedReview<'a, T> = (Envelope<AdmissionRequest<T>>, Option<&'a str>);

/// The review read in one pass by `kim_shared::json`'s reader: the object typed as it is read,
/// its text kept. `Err` when anything is not exactly as [`serde_review`] reads it (a duplicate
/// key, a `null` where serde wants a value, an unknown operation, ...).
pub(crate) fn fast_review<T: Admitted>(
    text: &str,
    decoder: FastDecoder<T>,
) -> Result<DecodedReview<'_, T>, DecodeError> {
    let mut r = Reader::new(text);
    let (mut api_version, mut kind, mut request) = (None, None, None);
    r.object(&mut |r, key| match key {
        "apiVersion" => once(&mut api_version, r),
        "kind" => once(&mut kind, r),
        "request" => {
            let v = if r.null()? {
                Ok(None)
            } else {
                fast_request(r, decoder).map(Some)
            };
            set_once(&mut request, v)
        }
        _ => r.skip(),
    })?;
    r.end()?;
    let (request, raw) = request.flatten().unzip();
    Ok((
        Envelope {
            api_version: api_version.unwrap_or_default(),
            kind: kind.unwrap_or_default(),
            request,
        },
        raw.flatten(),
    ))
}

/// `request` of the review, as [`Request`]'s serde attributes read it.
fn fast_request<'a, T: Admitted>(
    r: &mut Reader<'a>,
    decoder: FastDecoder<T>,
) -> Result<(AdmissionRequest<T>, Option<&'a str>), DecodeError> {
    let mut uid = None;
    let mut kind = None;
    let mut resource = None;
    let mut sub_resource = None;
    let mut name = None;
    let mut namespace = None;
    let mut operation = None;
    let mut user_info = None;
    let mut object = None;
    let mut old_object = None;
    let mut dry_run = None;
    r.object(&mut |r, key| match key {
        "uid" => once(&mut uid, r),
        "kind" => set_once(&mut kind, fast_gvk(r)),
        "resource" => set_once(&mut resource, fast_gvr(r)),
        "subResource" => once(&mut sub_resource, r),
        "name" => once(&mut name, r),
        "namespace" => once(&mut namespace, r),
        "operation" => set_once(
            &mut operation,
            match &*r.string()? {
                "CREATE" => Ok(Operation::Create),
                "UPDATE" => Ok(Operation::Update),
                "DELETE" => Ok(Operation::Delete),
                "CONNECT" => Ok(Operation::Connect),
                _ => Err(DecodeError),
            },
        ),
        "userInfo" => set_once(&mut user_info, fast_user_info(r)),
        "object" => {
            let v = if r.null()? {
                Ok(None)
            } else {
                r.with_text(decoder).map(Some)
            };
            set_once(&mut object, v)
        }
        "oldObject" => {
            let v = if r.null()? {
                Ok(None)
            } else {
                decoder(r).map(Some)
            };
            set_once(&mut old_object, v)
        }
        "dryRun" => once(&mut dry_run, r),
        _ => r.skip(),
    })?;
    let (object, raw) = object.flatten().unzip();
    let request = Request::<()> {
        uid: uid.ok_or(DecodeError)?,
        kind: kind.ok_or(DecodeError)?,
        resource: resource.ok_or(DecodeError)?,
        sub_resource: sub_resource.flatten(),
        name: name.unwrap_or_default(),
        namespace: namespace.flatten(),
        operation: operation.ok_or(DecodeError)?,
        user_info: user_info.ok_or(DecodeError)?,
        object: None,
        old_object: None,
        dry_run: dry_run.unwrap_or(false),
    };
    Ok((request.into_kube(object, old_object.flatten()), raw))
}

/// The string values of `keys` in an object (other keys skipped), each at most once.
fn string_fields<const N: usize>(
    r: &mut Reader<'_>,
    keys: [&str; N],
) -> Result<[Option<String>; N], DecodeError> {
    let mut values = [const { None }; N];
    r.object(&mut |r, key| match keys.iter().position(|k| *k == key) {
        Some(i) => once(&mut values[i], r),
        None => r.skip(),
    })?;
    Ok(values)
}

fn fast_gvk(r: &mut Reader<'_>) -> Result<GroupVersionKind, DecodeError> {
    let [group, version, kind] = string_fields(r, ["group", "version", "kind"])?;
    Ok(GroupVersionKind {
        group: group.ok_or(DecodeError)?,
        version: version.ok_or(DecodeError)?,
        kind: kind.ok_or(DecodeError)?,
    })
}

/// `request.resource`. kube-core's type has a private `api_version` that serde fills only from
/// a key of that name (empty otherwise); such a key goes to serde, so the result stays serde's.
fn fast_gvr(r: &mut Reader<'_>) -> Result<GroupVersionResource, DecodeError> {
    let [group, version, resource, api_version] =
        string_fields(r, ["group", "version", "resource", "api_version"])?;
    if api_version.is_some() {
        return Err(DecodeError);
    }
    // `gvr` of empty strings leaves `api_version` empty, as serde does without the key.
    let mut gvr = GroupVersionResource::gvr("", "", "");
    gvr.group = group.ok_or(DecodeError)?;
    gvr.version = version.ok_or(DecodeError)?;
    gvr.resource = resource.ok_or(DecodeError)?;
    Ok(gvr)
}

fn fast_user_info(r: &mut Reader<'_>) -> Result<UserInfo, DecodeError> {
    let mut u = (None, None, None, None);
    r.object(&mut |r, key| match key {
        "extra" => once(&mut u.0, r),
        "groups" => once(&mut u.1, r),
        "uid" => once(&mut u.2, r),
        "username" => once(&mut u.3, r),
        _ => r.skip(),
    })?;
    Ok(UserInfo {
        extra: u.0.flatten(),
        groups: u.1.flatten(),
        uid: u.2.flatten(),
        username: u.3.flatten(),
    })
}

/// Decodes a body: UTF-8 is checked once for the whole body instead of once per string
/// (serde_json's slice reader does the latter). A body that is not UTF-8 takes the slice
/// reader, for the same error message as before.
fn decode<'de, D: Deserialize<'de>>(body: &'de [u8]) -> Result<D, serde_json::Error> {
    match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(body),
    }
}

fn finish(
    response: AdmissionResponse,
    mut audit: AuditRecord,
    started: Instant,
    one_pass: bool,
) -> Admission {
    audit.allowed = response.allowed;
    if !response.allowed && audit.violations.is_empty() && !response.result.message.is_empty() {
        audit.error = Some(response.result.message.clone());
    }
    audit.warnings = response.warnings.clone().unwrap_or_default();
    let body = encode(&response);
    audit.latency_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    Admission {
        body,
        audit,
        one_pass,
    }
}

/// The wire form of a response. kube's `AdmissionResponse` is used to build the answer, but
/// it serializes the patch as an array of numbers; the apiserver's `[]byte` is base64, which
/// is also a third of the size.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireReview<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: WireResponse<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireResponse<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    audit_annotations: &'a HashMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a Vec<String>>,
}

/// Serializes `r` as an `admission.k8s.io/v1` AdmissionReview.
pub fn encode(r: &AdmissionResponse) -> Vec<u8> {
    use base64::Engine;
    let status = (!r.allowed || !r.result.message.is_empty()).then_some(&r.result);
    let patch = r
        .patch
        .as_ref()
        .map(|p| base64::engine::general_purpose::STANDARD.encode(p));
    match status {
        None => encode_without_status(r, patch.as_deref()),
        Some(status) => encode_with_serde(r, Some(status), patch),
    }
}

/// [`encode`] by serde: responses with a status (denials), and the reference in tests.
fn encode_with_serde(
    r: &AdmissionResponse,
    status: Option<&Status>,
    patch: Option<String>,
) -> Vec<u8> {
    let wire = WireReview {
        api_version: REVIEW_API_VERSION,
        kind: "AdmissionReview",
        response: WireResponse {
            uid: &r.uid,
            allowed: r.allowed,
            status,
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
            audit_annotations: &r.audit_annotations,
            warnings: r.warnings.as_ref(),
        },
    };
    serde_json::to_vec(&wire).unwrap_or_else(|e| {
        // Serializing our own types cannot fail in practice; still answer something valid.
        format!(
            r#"{{"apiVersion":"{REVIEW_API_VERSION}","kind":"AdmissionReview","response":{{"uid":"","allowed":false,"status":{{"message":"internal error serializing the response: {e}"}}}}}}"#
        )
        .into_bytes()
    })
}

/// [`encode`] of a response without a status (every allowed one without a message), byte for
/// byte what serde writes for [`WireReview`] (tested), without serde's per-type code.
fn encode_without_status(r: &AdmissionResponse, patch: Option<&str>) -> Vec<u8> {
    use kim_shared::json::{write_bool, write_object, write_str, write_str_array};
    let mut out = Vec::with_capacity(256 + patch.map_or(0, str::len));
    out.extend_from_slice(b"{\"apiVersion\":");
    write_str(&mut out, REVIEW_API_VERSION);
    out.extend_from_slice(b",\"kind\":\"AdmissionReview\",\"response\":{\"uid\":");
    write_str(&mut out, &r.uid);
    out.extend_from_slice(b",\"allowed\":");
    write_bool(&mut out, r.allowed);
    if let Some(p) = patch {
        out.extend_from_slice(b",\"patch\":");
        write_str(&mut out, p);
        out.extend_from_slice(b",\"patchType\":\"JSONPatch\"");
    }
    if !r.audit_annotations.is_empty() {
        out.extend_from_slice(b",\"auditAnnotations\":");
        write_object(&mut out, &r.audit_annotations, |out, v| write_str(out, v));
    }
    if let Some(w) = &r.warnings {
        out.extend_from_slice(b",\"warnings\":");
        write_str_array(&mut out, w);
    }
    out.extend_from_slice(b"}}");
    out
}

fn invalid(uid: &str, message: String) -> AdmissionResponse {
    let mut r = AdmissionResponse::invalid(message);
    r.uid = uid.to_string();
    r.result.code = 400;
    r
}

fn decide<T: Admitted>(
    mode: Mode,
    review: Envelope<AdmissionRequest<T>>,
    ctx: &AdmissionContext,
    now: SystemTime,
    raw_object: Option<&str>,
    audit: &mut AuditRecord,
) -> AdmissionResponse {
    if review.api_version != REVIEW_API_VERSION || review.kind != "AdmissionReview" {
        let uid = review
            .request
            .as_ref()
            .map(|r| r.uid.as_str())
            .unwrap_or_default();
        return invalid(
            uid,
            format!(
                "expected an AdmissionReview of apiVersion {REVIEW_API_VERSION}, got kind {:?} apiVersion {:?}; register the webhook with admissionReviewVersions [v1]",
                review.kind, review.api_version
            ),
        );
    }
    let Some(req) = review.request else {
        return invalid("", "the AdmissionReview has no request".into());
    };
    let response = judge(mode, &req, ctx, now, raw_object, audit);
    audit.take_from(req);
    response
}

/// The answer to a well-formed request. The response's `types` stay empty: [`encode`] writes
/// the review's apiVersion and kind.
fn judge<T: Admitted>(
    mode: Mode,
    req: &AdmissionRequest<T>,
    ctx: &AdmissionContext,
    now: SystemTime,
    raw_object: Option<&str>,
    audit: &mut AuditRecord,
) -> AdmissionResponse {
    let base = AdmissionResponse::from(req);
    if req.kind.group != T::group(&())
        || req.kind.kind != T::kind(&())
        || req.kind.version != T::version(&())
    {
        return base.deny(format!(
            "this endpoint admits {}, got {}/{} {}; check the rules of the webhook configuration",
            expected::<T>(),
            req.kind.group,
            req.kind.version,
            req.kind.kind
        ));
    }
    // Subresources (status) are not ours to judge.
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
        return base;
    }
    match (mode, &req.operation) {
        (Mode::Mutate, Operation::Create | Operation::Update) => {
            let Some(obj) = req.object.as_ref() else {
                return base.deny("the request has no object to default");
            };
            let mut defaulted = obj.clone();
            defaulted.default(req.old_object.as_ref(), ctx);
            match defaults_patch(obj, &defaulted, raw_object) {
                Ok(patch) if patch.0.is_empty() => base,
                Ok(patch) => {
                    audit.patch_paths = patch
                        .0
                        .iter()
                        .map(|op| op.path().as_str().to_string())
                        .collect();
                    let mut r = match base.with_patch(patch) {
                        Ok(r) => r,
                        Err(e) => {
                            return AdmissionResponse::from(req)
                                .deny(format!("internal error: {e}"));
                        }
                    };
                    r.audit_annotations
                        .insert("patched-paths".into(), audit.patch_paths.join(","));
                    r
                }
                Err(e) => base.deny(format!("internal error computing the defaults patch: {e}")),
            }
        }
        (Mode::Validate, Operation::Create) => match req.object.as_ref() {
            Some(obj) => respond(base, obj.validate_create(ctx), &req.name, audit),
            None => base.deny("the CREATE request has no object"),
        },
        (Mode::Validate, Operation::Update) => match (req.object.as_ref(), req.old_object.as_ref())
        {
            (Some(new), Some(old)) => {
                respond(base, new.validate_update(old, ctx), &req.name, audit)
            }
            _ => base.deny("the UPDATE request lacks object or oldObject"),
        },
        (Mode::Validate, Operation::Delete) => match req.old_object.as_ref() {
            Some(old) => respond(base, old.validate_delete(ctx, now), &req.name, audit),
            // Without the stored object there is nothing to protect (e.g. a collection delete
            // of objects we cannot see); the apiserver sends oldObject for single deletes.
            None => base,
        },
        _ => base,
    }
}

/// The JSON patch from `obj` (sent as `raw`) to `defaulted`: over the parts the type says
/// changed, or over the whole objects when that cannot be done.
fn defaults_patch<T: Admitted>(
    obj: &T,
    defaulted: &T,
    raw: Option<&str>,
) -> Result<json_patch::Patch, serde_json::Error> {
    if let Some(raw) = raw
        && let Some(patch) = mutation_patch_of_parts(&obj.changed_parts(defaulted)?, raw)?
    {
        return Ok(patch);
    }
    mutation_patch_for_text(obj, defaulted, raw)
}

fn respond(
    base: AdmissionResponse,
    verdict: Verdict,
    name: &str,
    audit: &mut AuditRecord,
) -> AdmissionResponse {
    let mut r = base;
    if !verdict.warnings.is_empty() {
        r.warnings = Some(verdict.warnings);
    }
    if verdict.violations.is_empty() {
        r.audit_annotations = HashMap::from([("decision".to_string(), "allowed".to_string())]);
        return r;
    }
    let (code, reason) = verdict.denial.unwrap_or((422, "Invalid"));
    let message = verdict
        .violations
        .iter()
        .map(|v| format!("{}: {}", v.field, v.message))
        .collect::<Vec<_>>()
        .join("; ");
    let fields = verdict
        .violations
        .iter()
        .map(|v| v.field.as_str())
        .collect::<Vec<_>>()
        .join(",");
    r.audit_annotations = HashMap::from([
        ("decision".to_string(), "denied".to_string()),
        ("violations".to_string(), truncate(&fields, 1000)),
    ]);
    let causes = verdict
        .violations
        .iter()
        .map(|v| StatusCause {
            reason: "FieldValueInvalid".into(),
            message: v.message.clone(),
            field: v.field.clone(),
        })
        .collect();
    let mut r = r.deny(message);
    r.result = Status {
        code,
        reason: reason.to_string(),
        ..r.result
    }
    .with_details(StatusDetails {
        name: name.to_string(),
        group: String::new(),
        kind: audit.kind.clone(),
        uid: String::new(),
        causes,
        retry_after_seconds: 0,
    });
    audit.violations = verdict.violations;
    r
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// The slow path for a body that does not decode as an AdmissionReview of `T`: find out why
/// and say so, copying the uid when it can be read.
fn undecodable<T: Admitted>(
    body: &[u8],
    err: &serde_json::Error,
    audit: &mut AuditRecord,
) -> AdmissionResponse {
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(_) => return invalid("", format!("malformed AdmissionReview: {err}")),
    };
    let Some(mut req) = review.request else {
        return invalid("", "the AdmissionReview has no request".into());
    };
    let objects = [
        ("object", req.object.take()),
        ("oldObject", req.old_object.take()),
    ];
    let base = AdmissionResponse::from(&req);
    let kind = req.kind.clone();
    audit.take_from(req);
    if kind.group != T::group(&()) || kind.kind != T::kind(&()) {
        return base.deny(format!(
            "this endpoint admits {}, got {}/{} {}; check the rules of the webhook configuration",
            expected::<T>(),
            kind.group,
            kind.version,
            kind.kind
        ));
    }
    // Name the field that does not match the type.
    for (label, obj) in objects {
        let Some(obj) = obj else { continue };
        let Ok(value) = serde_json::to_value(&obj) else {
            continue;
        };
        if let Err(e) = serde_path_to_error::deserialize::<_, T>(value) {
            let field = e.path().to_string();
            let message = format!(
                "{} does not match the {} schema: {}",
                label,
                T::kind(&()),
                e.inner()
            );
            audit.violations = vec![FieldViolation {
                field: field.clone(),
                message: message.clone(),
            }];
            return base.deny(format!("{field}: {message}"));
        }
    }
    base.deny(format!("the AdmissionReview does not decode: {err}"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::{Value, json};
    use std::collections::BTreeMap;

    /// A stand-in admitted type: data key "bad" is a violation; defaults add data "defaulted".
    impl Admitted for ConfigMap {
        fn default(&mut self, _old: Option<&Self>, _ctx: &AdmissionContext) {
            self.data
                .get_or_insert_with(Default::default)
                .entry("defaulted".into())
                .or_insert_with(|| "yes".into());
        }
        fn validate_create(&self, _ctx: &AdmissionContext) -> Verdict {
            let mut v = Verdict::default();
            if self.data.as_ref().is_some_and(|d| d.contains_key("bad")) {
                v.violations.push(FieldViolation {
                    field: "data.bad".into(),
                    message: "must not be set".into(),
                });
            }
            if self.data.as_ref().is_some_and(|d| d.contains_key("old")) {
                v.warnings.push("data.old: deprecated, ignored".into());
            }
            v
        }
        fn validate_update(&self, old: &Self, ctx: &AdmissionContext) -> Verdict {
            let mut v = self.validate_create(ctx);
            if old.data != self.data && old.data.as_ref().is_some_and(|d| d.contains_key("frozen"))
            {
                v.violations.push(FieldViolation {
                    field: "data".into(),
                    message: "is immutable once frozen".into(),
                });
            }
            v
        }
        fn validate_delete(&self, ctx: &AdmissionContext, _now: SystemTime) -> Verdict {
            if ctx.deletion_protection {
                let mut v = Verdict::deny("metadata.annotations[confirm]", "missing");
                v.denial = Some((403, "Forbidden"));
                v
            } else {
                Verdict::default()
            }
        }
    }

    pub(crate) fn review(op: &str, object: Value, old: Value) -> Vec<u8> {
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

    fn response(a: &Admission) -> Value {
        let v: Value = serde_json::from_slice(&a.body).expect("response is JSON");
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(v["kind"], "AdmissionReview");
        v["response"].clone()
    }

    fn run(mode: Mode, body: &[u8]) -> (Value, AuditRecord) {
        let a = admit::<ConfigMap>(mode, body, &AdmissionContext::default(), SystemTime::now());
        (response(&a), a.audit)
    }

    #[test]
    fn responses_without_a_status_are_written_as_serde_writes_them() {
        let texts = ["", "u-1", "quote \" back \\ nl \n ctl \u{1} é"];
        let mut cases = 0;
        for (i, uid) in texts.iter().enumerate() {
            for annotations in 0..3 {
                for warnings in [None, Some(vec![]), Some(texts.map(String::from).to_vec())] {
                    for patch in [
                        None,
                        Some(String::new()),
                        Some("W3sib3AiOiJhZGQifV0=".to_string()),
                    ] {
                        let mut r = AdmissionResponse::invalid("");
                        r.allowed = true;
                        r.result.message.clear();
                        r.uid = uid.to_string();
                        r.audit_annotations = (0..annotations)
                            .map(|k| {
                                (
                                    format!("key-{k}{}", texts[(i + k) % 3]),
                                    texts[k % 3].to_string(),
                                )
                            })
                            .collect();
                        r.warnings = warnings.clone();
                        let fast = encode_without_status(&r, patch.as_deref());
                        let serde = encode_with_serde(&r, None, patch);
                        assert_eq!(
                            String::from_utf8_lossy(&fast),
                            String::from_utf8_lossy(&serde)
                        );
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 81);
        // encode takes that path exactly for allowed responses without a message.
        let mut r = AdmissionResponse::invalid("");
        r.allowed = true;
        r.result.message.clear();
        assert!(!String::from_utf8_lossy(&encode(&r)).contains("status"));
        r.result.message = "note".into();
        assert!(String::from_utf8_lossy(&encode(&r)).contains("\"status\":{"));
    }

    #[test]
    fn allows_valid_create_and_copies_uid() {
        let (r, audit) = run(
            Mode::Validate,
            &review("CREATE", cm(json!({"a": "1"})), Value::Null),
        );
        assert_eq!(r["uid"], "uid-1");
        assert_eq!(r["allowed"], true);
        assert_eq!(r["auditAnnotations"]["decision"], "allowed");
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
        let (r, audit) = run(
            Mode::Validate,
            &review("CREATE", cm(json!({"bad": "1", "old": "x"})), Value::Null),
        );
        assert_eq!(r["allowed"], false);
        assert_eq!(r["status"]["code"], 422);
        assert_eq!(r["status"]["reason"], "Invalid");
        assert_eq!(r["status"]["message"], "data.bad: must not be set");
        assert_eq!(r["status"]["details"]["causes"][0]["field"], "data.bad");
        assert_eq!(r["warnings"][0], "data.old: deprecated, ignored");
        assert_eq!(r["auditAnnotations"]["violations"], "data.bad");
        assert_eq!(audit.violations.len(), 1);
        assert_eq!(audit.warnings.len(), 1);
        assert!(!audit.allowed);
    }

    #[test]
    fn update_is_validated_against_old_object() {
        let (r, _) = run(
            Mode::Validate,
            &review("UPDATE", cm(json!({"a": "2"})), cm(json!({"frozen": "1"}))),
        );
        assert_eq!(r["allowed"], false);
        assert_eq!(r["status"]["details"]["causes"][0]["field"], "data");
    }

    #[test]
    fn delete_protection_uses_old_object_and_403() {
        let (r, audit) = run(
            Mode::Validate,
            &review("DELETE", Value::Null, cm(json!({}))),
        );
        assert_eq!(r["allowed"], false);
        assert_eq!(r["status"]["code"], 403);
        assert_eq!(audit.operation, "DELETE");
        let ctx = AdmissionContext {
            deletion_protection: false,
            ..AdmissionContext::default()
        };
        let a = admit::<ConfigMap>(
            Mode::Validate,
            &review("DELETE", Value::Null, cm(json!({}))),
            &ctx,
            SystemTime::now(),
        );
        assert_eq!(response(&a)["allowed"], true);
    }

    #[test]
    fn mutate_returns_patch_that_applies_to_the_request_object() {
        let obj = cm(json!({"a": "1"}));
        let (r, audit) = run(Mode::Mutate, &review("CREATE", obj.clone(), Value::Null));
        assert_eq!(r["allowed"], true);
        assert_eq!(r["patchType"], "JSONPatch");
        let patch = r["patch"].as_str().expect("patch is base64");
        let ops: json_patch::Patch = serde_json::from_slice(&b64(patch)).expect("patch json");
        let mut doc = obj;
        json_patch::patch(&mut doc, &ops).expect("patch applies");
        assert_eq!(doc["data"]["defaulted"], "yes");
        assert_eq!(audit.patch_paths, vec!["/data/defaulted".to_string()]);
        assert_eq!(r["auditAnnotations"]["patched-paths"], "/data/defaulted");
    }

    #[test]
    fn mutate_adds_missing_parent_objects() {
        // No "data" at all in the request: the patch must add the whole map.
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
        let (r, _) = run(Mode::Mutate, &review("CREATE", obj.clone(), Value::Null));
        let ops: json_patch::Patch =
            serde_json::from_slice(&b64(r["patch"].as_str().expect("patch"))).expect("json");
        let mut doc = obj;
        json_patch::patch(&mut doc, &ops).expect("patch applies to the raw object");
        assert_eq!(doc["data"], json!({"defaulted": "yes"}));
    }

    #[test]
    fn mutate_without_changes_has_no_patch() {
        let (r, audit) = run(
            Mode::Mutate,
            &review("CREATE", cm(json!({"defaulted": "no"})), Value::Null),
        );
        assert_eq!(r["allowed"], true);
        assert!(r.get("patch").is_none());
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
            let (r, audit) = run(Mode::Validate, body);
            assert_eq!(r["allowed"], false, "{}", String::from_utf8_lossy(body));
            let msg = r["status"]["message"].as_str().unwrap_or_default();
            assert!(msg.contains("AdmissionReview"), "{msg}");
            assert!(audit.error.is_some());
        }
    }

    #[test]
    fn wrong_review_version_is_named() {
        let mut v: Value =
            serde_json::from_slice(&review("CREATE", cm(json!({})), Value::Null)).expect("json");
        v["apiVersion"] = json!("admission.k8s.io/v1beta1");
        let (r, _) = run(Mode::Validate, &serde_json::to_vec(&v).expect("json"));
        assert_eq!(r["allowed"], false);
        assert!(
            r["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("admission.k8s.io/v1beta1")
        );
        assert_eq!(r["uid"], "uid-1");
    }

    #[test]
    fn unexpected_kind_is_named() {
        let mut v: Value =
            serde_json::from_slice(&review("CREATE", cm(json!({})), Value::Null)).expect("json");
        v["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
        let (r, _) = run(Mode::Validate, &serde_json::to_vec(&v).expect("json"));
        assert_eq!(r["allowed"], false);
        let msg = r["status"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("admits /v1 ConfigMap, got apps/v1 Deployment"),
            "{msg}"
        );
        assert_eq!(r["uid"], "uid-1");
    }

    #[test]
    fn object_not_matching_schema_names_the_field() {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": 5}});
        let (r, audit) = run(Mode::Validate, &review("CREATE", obj, Value::Null));
        assert_eq!(r["allowed"], false);
        assert_eq!(r["uid"], "uid-1");
        let msg = r["status"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.starts_with("data.a: object does not match the ConfigMap schema"),
            "{msg}"
        );
        assert_eq!(audit.violations[0].field, "data.a");
    }

    #[test]
    fn status_subresource_is_allowed() {
        let mut v: Value =
            serde_json::from_slice(&review("UPDATE", cm(json!({"bad": "1"})), cm(json!({}))))
                .expect("json");
        v["request"]["subResource"] = json!("status");
        let (r, _) = run(Mode::Validate, &serde_json::to_vec(&v).expect("json"));
        assert_eq!(r["allowed"], true);
    }

    fn b64(s: &str) -> Vec<u8> {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .expect("base64")
    }
}
