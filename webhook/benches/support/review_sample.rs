//! AdmissionReviews of an object shaped as the kube-apiserver sends them, for the benchmark
//! (`make bench-webhook`). The apiserver adds to the object what its client never wrote:
//! `metadata.managedFields` (its field manager runs before admission), and for the validating
//! webhooks also `uid`, `creationTimestamp` and `generation` (set by the store before it
//! validates); the request carries `userInfo.extra` and `options`. A review of the bare object
//! is a third smaller than a real one and misses the part that is the costliest to decode
//! (docs/benchmarks.md). `tests/tests/e2e/webhook/admission.rs` includes this file and checks these
//! shapes, and [`fields_v1`], against reviews the real apiserver sent.

use serde_json::{Map, Value, json};

use kim_webhook::request::Mode;

/// The `fieldsV1` of the managedFields entry the apiserver records when a client creates
/// `object` with an update (not apply) operation: every field the client set, `.` for every
/// object below the top level, lists and scalars as leaves; from `metadata` only the labels,
/// annotations and finalizers (finalizers as set members, `v:"<finalizer>"`).
pub fn fields_v1(object: &Value) -> Value {
    let mut root = Map::new();
    let mut meta = Map::new();
    for key in ["labels", "annotations"] {
        if let Some(Value::Object(m)) = object.pointer(&format!("/metadata/{key}")) {
            let mut set = Map::new();
            set.insert(".".into(), json!({}));
            for k in m.keys() {
                set.insert(format!("f:{k}"), json!({}));
            }
            meta.insert(format!("f:{key}"), Value::Object(set));
        }
    }
    if let Some(Value::Array(finalizers)) = object.pointer("/metadata/finalizers") {
        let mut set = Map::new();
        set.insert(".".into(), json!({}));
        for f in finalizers {
            set.insert(format!("v:{f}"), json!({}));
        }
        meta.insert("f:finalizers".into(), Value::Object(set));
    }
    if !meta.is_empty() {
        root.insert("f:metadata".into(), Value::Object(meta));
    }
    if let Some(spec) = object.get("spec") {
        root.insert("f:spec".into(), fields_of(spec));
    }
    Value::Object(root)
}

fn fields_of(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            out.insert(".".into(), json!({}));
            for (k, child) in m {
                out.insert(format!("f:{k}"), fields_of(child));
            }
            Value::Object(out)
        }
        _ => json!({}),
    }
}

/// A CREATE review for the webhook `mode`, as the apiserver sends it when `user` (a service
/// account, as KEB is) creates `as_sent` with field manager `manager`; `object` is what the
/// webhook sees (for the validating webhook: after the mutating webhooks' defaults, which do
/// not change the managedFields).
pub fn create_review(
    object: &Value,
    as_sent: &Value,
    mode: Mode,
    manager: &str,
    user: &str,
) -> Value {
    const CREATED: &str = "2026-11-30T17:12:47Z";
    let group_version = object["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (group, version) = group_version
        .split_once('/')
        .unwrap_or(("", group_version.as_str()));
    let kind = object["kind"].as_str().unwrap_or_default();
    let resource = format!("{}s", kind.to_lowercase());
    let mut obj = object.clone();
    let meta = &mut obj["metadata"];
    meta["managedFields"] = json!([{
        "apiVersion": group_version, "fieldsType": "FieldsV1", "fieldsV1": fields_v1(as_sent),
        "manager": manager, "operation": "Update", "time": CREATED,
    }]);
    // The store sets these before the validating webhooks see a CREATE, after the mutating.
    if mode == Mode::Validate {
        meta["uid"] = json!("99b507ef-c497-4df5-a86d-3993f3c9e449");
        meta["creationTimestamp"] = json!(CREATED);
        meta["generation"] = json!(1);
    }
    let namespace = object.pointer("/metadata/namespace").cloned();
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "10ee0b9e-89fb-4a29-bc9a-769f0f275555",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": object.pointer("/metadata/name").cloned().unwrap_or(json!("")),
            "namespace": namespace.unwrap_or(Value::Null),
            "operation": "CREATE",
            "userInfo": {
                "username": user,
                "uid": "3f0c8a52-5d0e-4c1b-9d8e-1f2a3b4c5d6e",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kcp-system", "system:authenticated"],
                "extra": {
                    "authentication.kubernetes.io/credential-id": ["JTI=8d5e1c1f-2a4b-4c3d-9e8f-7a6b5c4d3e2f"],
                    "authentication.kubernetes.io/node-name": ["kcp-worker-1"],
                    "authentication.kubernetes.io/pod-name": ["kyma-environment-broker-7d9c8b6f5-x2x4z"],
                    "authentication.kubernetes.io/pod-uid": ["0b1c2d3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e"],
                },
            },
            "object": obj,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": manager},
        }
    })
}
