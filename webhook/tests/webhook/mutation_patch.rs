//! The defaults patch of `/mutate/runtime` over every sample Runtime of the repository: applied
//! to the object exactly as sent, it yields the defaulted object.

use std::sync::Arc;
use std::time::SystemTime;

use base64::Engine;
use kim_shared::api::Runtime;
use kim_webhook::admission::{AdmissionContext, mutate};
use serde_json::{Value, json};

use crate::support::{config, repo};

/// Every sample Runtime of the repository (`config/samples`), as JSON, plus variants without the fields the defaults
/// fill in (so that additions below missing parents are exercised too).
fn samples() -> Vec<(String, Value)> {
    let dir = repo().join("config/samples");
    let mut out = Vec::new();
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("samples missing at {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.starts_with("runtime-") && name.ends_with(".yaml")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let obj: Value = serde_yaml_ng::from_str(&text).unwrap();
        let mut bare = obj.clone();
        if let Some(shoot) = bare
            .pointer_mut("/spec/shoot")
            .and_then(Value::as_object_mut)
        {
            shoot.remove("kubernetes");
            shoot.remove("controlPlane");
        }
        if let Some(workers) = bare
            .pointer_mut("/spec/shoot/provider/workers")
            .and_then(Value::as_array_mut)
        {
            for w in workers.iter_mut().filter_map(Value::as_object_mut) {
                w.remove("volume");
                if let Some(m) = w.get_mut("machine").and_then(Value::as_object_mut) {
                    m.remove("image");
                }
            }
        }
        out.push((format!("{name} (bare)"), bare));
        out.push((name, obj));
    }
    assert!(
        out.len() >= 14,
        "expected the sample Runtimes in {}",
        dir.display()
    );
    out
}

fn review(obj: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u1",
            "kind": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"},
            "resource": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimes"},
            "name": obj.pointer("/metadata/name").cloned().unwrap_or(json!("")),
            "namespace": "kcp-system",
            "operation": "CREATE",
            "userInfo": {"username": "keb"},
            "object": obj,
            "dryRun": false
        }
    }))
    .unwrap()
}

#[test]
fn patch_applied_to_the_request_object_gives_the_defaulted_runtime() {
    let cfg = config();
    let ctx = AdmissionContext {
        config: Some(Arc::new(cfg.clone())),
        ..AdmissionContext::default()
    };
    let mut patched_samples = 0;
    for (name, obj) in samples() {
        let a = mutate::<Runtime>(&review(&obj), &ctx, SystemTime::now());
        let v: Value = serde_json::from_slice(&a.body).unwrap();
        let r = &v["response"];
        let original = serde_json::from_value::<Runtime>(obj.clone())
            .unwrap_or_else(|e| panic!("{name} is a Runtime: {e}"));
        assert_eq!(r["allowed"], true, "{name}: {r}");
        let mut expected = original.clone();
        kim_shared::defaults::apply_defaults(&mut expected, &cfg);

        let mut doc = obj.clone();
        if let Some(p) = r["patch"].as_str() {
            patched_samples += 1;
            let bytes = base64::engine::general_purpose::STANDARD.decode(p).unwrap();
            let ops: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
            json_patch::patch(&mut doc, &ops).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let got: Runtime = serde_json::from_value(doc).unwrap();
        assert_eq!(
            got, expected,
            "{name}: patched object differs from the defaulted one"
        );
    }
    // The complete samples (as KEB writes them) get no default from the shipped
    // configuration; each bare one does.
    assert_eq!(
        patched_samples,
        samples().len() / 2,
        "every bare sample and no complete one is patched"
    );
}
