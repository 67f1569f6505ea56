//! The admitted types: `Runtime` (defaults, validation, deletion protection),
//! `GardenerCluster` and `RuntimeAccess` (validation). Each is one [`Admitted`] impl over the pure rules of
//! `kim_shared`.

use std::time::SystemTime;

use kim_shared::access::{validate_runtime_access, validate_runtime_access_update};
use kim_shared::api::runtime::{RuntimeKubernetes, RuntimeProvider, RuntimeShoot};
use kim_shared::api::runtime_access::RuntimeAccess;
use kim_shared::api::{GardenerCluster, Runtime, RuntimeSpec};
use kim_shared::validation::{self, DeletionPolicy, Findings};

use crate::admission::{AdmissionContext, Admitted, FastDecoder, FieldViolation, Verdict};
use crate::patch::ChangedPart;

impl From<Findings> for Verdict {
    fn from(f: Findings) -> Self {
        Verdict {
            violations: f
                .violations
                .into_iter()
                .map(|v| FieldViolation {
                    field: v.field,
                    message: v.message,
                })
                .collect(),
            warnings: f.warnings,
            denial: None,
        }
    }
}

fn no_config() -> Verdict {
    Verdict::deny(
        "",
        "the webhook has no valid KIM configuration loaded; see its logs",
    )
}

impl Admitted for Runtime {
    const FAST_DECODER: Option<FastDecoder<Self>> =
        Some(<Runtime as kim_shared::json::Decode>::decode);

    fn default(&mut self, old: Option<&Self>, ctx: &AdmissionContext) {
        if let Some(cfg) = &ctx.config {
            // On UPDATE only what the update adds is defaulted: a Runtime stored before these
            // defaults existed must not gain a new volume, networking type or HA on its next edit.
            match old {
                Some(old) => kim_shared::defaults::apply_update_defaults(old, self, cfg),
                None => kim_shared::defaults::apply_defaults(self, cfg),
            }
        }
    }

    /// The defaults touch only `spec.shoot` (kim_shared::defaults): the parts are the fields
    /// of `spec.shoot` that differ, or the whole Runtime when anything else differs.
    fn changed_parts(&self, defaulted: &Self) -> Result<Vec<ChangedPart>, serde_json::Error> {
        let d = defaulted;
        // Destructured so that a new field of the spec cannot be forgotten here.
        let RuntimeSpec {
            audit_log_access_enabled,
            image_registry_cache,
            security,
            shoot: _,
        } = &self.spec;
        let outside_shoot_unchanged = self.metadata == d.metadata
            && self.status == d.status
            && *audit_log_access_enabled == d.spec.audit_log_access_enabled
            && *image_registry_cache == d.spec.image_registry_cache
            && *security == d.spec.security;
        if !outside_shoot_unchanged {
            return Ok(vec![ChangedPart {
                pointer: "".into(),
                before: serde_json::to_value(self)?,
                after: serde_json::to_value(defaulted)?,
            }]);
        }
        let RuntimeShoot {
            control_plane,
            enable_nvidia_openshell,
            enforce_seed_location,
            kubernetes,
            licence_type,
            name,
            networking,
            platform_region,
            provider,
            purpose,
            region,
            secret_binding_name,
        } = &self.spec.shoot;
        let n = &d.spec.shoot;
        let mut parts = Vec::new();
        let p = SHOOT_FIELD_POINTERS;
        part(&mut parts, p[0], control_plane, &n.control_plane)?;
        part(
            &mut parts,
            p[1],
            enable_nvidia_openshell,
            &n.enable_nvidia_openshell,
        )?;
        part(
            &mut parts,
            p[2],
            enforce_seed_location,
            &n.enforce_seed_location,
        )?;
        match (kubernetes, &n.kubernetes) {
            // One level deeper: the version is the usual change, the kube-apiserver settings
            // (OIDC) are the larger part.
            (Some(k), Some(nk)) => {
                let RuntimeKubernetes {
                    kube_api_server,
                    version,
                } = k;
                part(
                    &mut parts,
                    KUBE_API_SERVER,
                    kube_api_server,
                    &nk.kube_api_server,
                )?;
                part(&mut parts, KUBERNETES_VERSION, version, &nk.version)?;
            }
            _ => part(&mut parts, p[3], kubernetes, &n.kubernetes)?,
        }
        part(&mut parts, p[4], licence_type, &n.licence_type)?;
        part(&mut parts, p[5], name, &n.name)?;
        part(&mut parts, p[6], networking, &n.networking)?;
        part(&mut parts, p[7], platform_region, &n.platform_region)?;
        provider_parts(&mut parts, provider, &n.provider)?;
        part(&mut parts, p[9], purpose, &n.purpose)?;
        part(&mut parts, p[10], region, &n.region)?;
        part(
            &mut parts,
            p[11],
            secret_binding_name,
            &n.secret_binding_name,
        )?;
        Ok(parts)
    }

    fn validate_create(&self, ctx: &AdmissionContext) -> Verdict {
        match &ctx.config {
            Some(cfg) => validation::validate_create_with(self, cfg, &ctx.validation).into(),
            None => no_config(),
        }
    }

    fn validate_update(&self, old: &Self, ctx: &AdmissionContext) -> Verdict {
        match &ctx.config {
            Some(cfg) => validation::validate_update_with(old, self, cfg, &ctx.validation).into(),
            None => no_config(),
        }
    }

    fn validate_delete(&self, ctx: &AdmissionContext, now: SystemTime) -> Verdict {
        let policy = DeletionPolicy {
            enabled: ctx.deletion_protection,
            window: ctx.deletion_window,
        };
        let now = jiff::Timestamp::try_from(now).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let mut v: Verdict = validation::validate_delete(self, &policy, now).into();
        // Deletion protection is an authorization-like refusal, as in upstream's proposal.
        v.denial = Some((403, "Forbidden"));
        v
    }
}

/// The JSON pointers of the fields of `spec.shoot`, in the order of [`RuntimeShoot`]'s fields
/// (the order their keys are serialized in).
const SHOOT_FIELD_POINTERS: [&str; 12] = [
    "/spec/shoot/controlPlane",
    "/spec/shoot/enableNvidiaOpenshell",
    "/spec/shoot/enforceSeedLocation",
    "/spec/shoot/kubernetes",
    "/spec/shoot/licenceType",
    "/spec/shoot/name",
    "/spec/shoot/networking",
    "/spec/shoot/platformRegion",
    "/spec/shoot/provider",
    "/spec/shoot/purpose",
    "/spec/shoot/region",
    "/spec/shoot/secretBindingName",
];

const KUBE_API_SERVER: &str = "/spec/shoot/kubernetes/kubeAPIServer";
const KUBERNETES_VERSION: &str = "/spec/shoot/kubernetes/version";

/// The parts of `spec.shoot.provider`: the worker pools that changed, one by one, when nothing
/// else of the provider changed and the pools are the same in number (defaulting never adds or
/// removes one); otherwise the whole provider.
fn provider_parts(
    parts: &mut Vec<ChangedPart>,
    before: &RuntimeProvider,
    after: &RuntimeProvider,
) -> Result<(), serde_json::Error> {
    let RuntimeProvider {
        additional_workers,
        control_plane_config,
        infrastructure_config,
        type_,
        workers,
    } = before;
    let additional_same_shape = match (additional_workers, &after.additional_workers) {
        (Some(b), Some(a)) => b.len() == a.len(),
        (None, None) => true,
        _ => false,
    };
    if *control_plane_config != after.control_plane_config
        || *infrastructure_config != after.infrastructure_config
        || *type_ != after.type_
        || workers.len() != after.workers.len()
        || !additional_same_shape
    {
        return part(parts, SHOOT_FIELD_POINTERS[8], before, after);
    }
    let pools = [
        (
            "/spec/shoot/provider/additionalWorkers",
            additional_workers.as_deref(),
            after.additional_workers.as_deref(),
        ),
        (
            "/spec/shoot/provider/workers",
            Some(workers.as_slice()),
            Some(after.workers.as_slice()),
        ),
    ];
    for (at, b, a) in pools {
        for (i, (bw, aw)) in b
            .unwrap_or_default()
            .iter()
            .zip(a.unwrap_or_default())
            .enumerate()
        {
            part(parts, format!("{at}/{i}"), bw, aw)?;
        }
    }
    Ok(())
}

/// Adds the part at `pointer` when `before` and `after` differ.
fn part<V: serde::Serialize + PartialEq>(
    parts: &mut Vec<ChangedPart>,
    pointer: impl Into<std::borrow::Cow<'static, str>>,
    before: &V,
    after: &V,
) -> Result<(), serde_json::Error> {
    if before != after {
        parts.push(ChangedPart {
            pointer: pointer.into(),
            before: serde_json::to_value(before)?,
            after: serde_json::to_value(after)?,
        });
    }
    Ok(())
}

impl Admitted for GardenerCluster {
    fn validate_create(&self, _ctx: &AdmissionContext) -> Verdict {
        validation::validate_gardener_cluster(self).into()
    }

    fn validate_update(&self, old: &Self, _ctx: &AdmissionContext) -> Verdict {
        validation::validate_gardener_cluster_update(old, self).into()
    }
}

impl Admitted for RuntimeAccess {
    fn validate_create(&self, ctx: &AdmissionContext) -> Verdict {
        validate_runtime_access(self, &ctx.access_policy).into()
    }

    fn validate_update(&self, old: &Self, ctx: &AdmissionContext) -> Verdict {
        validate_runtime_access_update(old, self, &ctx.access_policy).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn shoot_field_pointers_are_the_serialized_keys_in_order() {
        let shoot = RuntimeShoot {
            control_plane: Some(Default::default()),
            enable_nvidia_openshell: Some(true),
            enforce_seed_location: Some(true),
            kubernetes: Some(Default::default()),
            licence_type: Some("x".into()),
            ..Default::default()
        };
        let v = serde_json::to_value(&shoot).expect("json");
        let keys: Vec<String> = v
            .as_object()
            .expect("object")
            .keys()
            .map(|k| format!("/spec/shoot/{k}"))
            .collect();
        assert_eq!(keys, SHOOT_FIELD_POINTERS.to_vec());
    }

    #[test]
    fn changed_parts_are_the_changed_shoot_fields_or_the_whole_runtime() {
        let mut rt = Runtime::new("rt", RuntimeSpec::default());
        rt.spec.shoot.name = "a".into();
        let mut d = rt.clone();
        d.spec.shoot.region = "eu".into();
        let parts = rt.changed_parts(&d).expect("parts");
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].pointer, "/spec/shoot/region");
        assert_eq!(parts[0].after, serde_json::json!("eu"));
        let mut k = rt.clone();
        k.spec.shoot.kubernetes = Some(Default::default());
        let mut kd = k.clone();
        if let Some(kk) = kd.spec.shoot.kubernetes.as_mut() {
            kk.version = Some("1.33".into());
        }
        let parts = k.changed_parts(&kd).expect("parts");
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].pointer, "/spec/shoot/kubernetes/version");
        let mut w = rt.clone();
        w.spec.shoot.provider.workers = vec![Default::default(), Default::default()];
        let mut wd = w.clone();
        wd.spec.shoot.provider.workers[1].minimum = 3;
        let parts = w.changed_parts(&wd).expect("parts");
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].pointer, "/spec/shoot/provider/workers/1");
        wd.spec.shoot.provider.workers.pop();
        let parts = w.changed_parts(&wd).expect("parts");
        assert_eq!(parts[0].pointer, "/spec/shoot/provider");
        d.spec.security.administrators.push("x".into());
        let parts = rt.changed_parts(&d).expect("parts");
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].pointer, "");
        assert_eq!(parts[0].after, serde_json::to_value(&d).expect("json"));
    }

    fn ctx() -> AdmissionContext {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map(PathBuf::from)
            .unwrap_or_default();
        let cfg = kim_shared::config::KimConfig::load(&kim_shared::config::ConfigPaths::new(
            repo.join("deploy/config/converter_config.json"),
        ))
        .expect("example config");
        AdmissionContext {
            config: Some(std::sync::Arc::new(cfg)),
            ..AdmissionContext::default()
        }
    }

    fn stored_without_volume() -> Runtime {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(repo.join("../config/samples/runtime-aws.yaml"))
            .expect("sample readable");
        let mut rt: Runtime = serde_yaml_ng::from_str(&text).expect("sample is a Runtime");
        for w in &mut rt.spec.shoot.provider.workers {
            w.volume = None;
        }
        rt
    }

    #[test]
    fn create_defaults_the_volume_but_an_update_leaves_stored_pools_alone() {
        let ctx = ctx();
        let mut created = stored_without_volume();
        Admitted::default(&mut created, None, &ctx);
        assert!(
            created.spec.shoot.provider.workers[0].volume.is_some(),
            "CREATE fills in the configured volume"
        );

        let old = stored_without_volume();
        let mut updated = old.clone();
        updated
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("edited".into(), "true".into());
        Admitted::default(&mut updated, Some(&old), &ctx);
        assert!(
            updated.spec.shoot.provider.workers[0].volume.is_none(),
            "UPDATE must not add create-time defaults to a pool that was stored without them"
        );
    }

    #[test]
    fn audit_log_mandatory_is_the_flag_of_the_context() {
        let mut ctx = ctx();
        let mut cfg = ctx.config.as_deref().cloned().expect("config");
        let mut rt = stored_without_volume();
        rt.spec.shoot.secret_binding_name = "hyperscaler-secret".into();
        if let Some(k) = rt.spec.shoot.kubernetes.as_mut() {
            k.version = None;
        }
        Admitted::default(&mut rt, None, &ctx);
        let region = rt.spec.shoot.region.clone();
        assert!(
            Admitted::validate_create(&rt, &ctx).violations.is_empty(),
            "the sample is admissible as it is"
        );
        cfg.audit_log_tenants
            .0
            .get_mut("aws")
            .and_then(|regions| regions.remove(&region))
            .expect("the example config has a tenant for the sample's region");
        ctx.config = Some(std::sync::Arc::new(cfg));

        let refused = Admitted::validate_create(&rt, &ctx);
        assert!(
            !refused.violations.is_empty(),
            "mandatory by default: refused"
        );
        ctx.validation.audit_log_mandatory = false;
        let warned = Admitted::validate_create(&rt, &ctx);
        assert!(
            warned.violations.is_empty(),
            "--audit-log-mandatory=false: admitted: {:?}",
            warned.violations
        );
        assert!(
            warned.warnings.iter().any(|w| w.contains("audit")),
            "with a warning: {:?}",
            warned.warnings
        );
    }

    /// The one-pass review reader (`kim_shared::json`) reads every review exactly as the serde
    /// path does, or declines (then the serde path answers): checked on CREATE, UPDATE, DELETE
    /// and dry-run reviews of the upstream example, and on reviews with duplicate keys, nulls
    /// and unexpected values.
    #[test]
    fn the_one_pass_review_reader_agrees_with_the_serde_path() {
        use crate::admission::{DecodedReview, fast_review, serde_review};
        let decoder = Runtime::FAST_DECODER.expect("Runtimes have a fast decoder");
        use serde_json::{Value, json};
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(repo.join("../config/samples/runtime-aws.yaml"))
            .expect("sample readable");
        let rt: Value = serde_yaml_ng::from_str(&text).expect("yaml");
        let review = |op: &str, object: Value, old: Value, extra: Value| {
            let mut r = json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                    "kind": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"},
                    "resource": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimes"},
                    "requestKind": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"},
                    "name": "runtime-1", "namespace": "kcp-system",
                    "operation": op,
                    "userInfo": {"username": "system:serviceaccount:kcp-system:keb", "uid": "u", "groups": ["system:serviceaccounts"], "extra": {"scopes": ["a", "b"]}},
                    "object": object,
                    "oldObject": old,
                    "dryRun": false,
                    "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "keb"}
                }
            });
            if let (Value::Object(req), Value::Object(extra)) = (&mut r["request"], extra) {
                req.extend(extra);
            }
            serde_json::to_string(&r).expect("json")
        };
        let shown = |r: &DecodedReview<'_, Runtime>| {
            json!({
                "apiVersion": r.0.api_version,
                "kind": r.0.kind,
                "request": serde_json::to_value(&r.0.request).expect("json"),
                "raw": r.1,
            })
        };
        // As the apiserver sends objects: with managedFields (checked, not kept).
        let mut managed = rt.clone();
        managed["metadata"]["managedFields"] = json!([{"apiVersion": "infrastructuremanager.kyma-project.io/v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {".": {}, "f:shoot": {}}}, "manager": "kyma-environment-broker", "operation": "Update", "time": "2026-11-30T17:12:47Z"}]);
        let mut bodies = vec![
            review("CREATE", rt.clone(), Value::Null, json!({})),
            review("UPDATE", managed.clone(), managed.clone(), json!({})),
            review("UPDATE", rt.clone(), rt.clone(), json!({"dryRun": true})),
            review(
                "DELETE",
                Value::Null,
                rt.clone(),
                json!({"subResource": null}),
            ),
            review(
                "CREATE",
                rt.clone(),
                Value::Null,
                json!({"subResource": "status", "namespace": null}),
            ),
            review("CONNECT", rt.clone(), Value::Null, json!({"userInfo": {}})),
            // Values the serde path refuses or reads its own way: the reader must decline.
            review("PATCH", rt.clone(), Value::Null, json!({})),
            review("CREATE", rt.clone(), Value::Null, json!({"dryRun": null})),
            review("CREATE", rt.clone(), Value::Null, json!({"name": null})),
            review("CREATE", rt.clone(), Value::Null, json!({"uid": 7})),
            review("CREATE", json!({"spec": 1}), Value::Null, json!({})),
        ];
        let create = review("CREATE", rt.clone(), Value::Null, json!({}));
        bodies.push(create.replacen("\"uid\":", "\"uid\":\"dup\",\"uid\":", 1));
        bodies.push(create.replacen("\"request\":{", "\"request\":null,\"request\":{", 1));
        bodies.push(create.replacen("\"kind\":\"AdmissionReview\"", "\"kind\":null", 1));
        bodies.push(format!("{create} trailing"));
        bodies.push(r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.into());
        bodies.push(
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}"#
                .into(),
        );
        let mut read_fast = 0;
        for (i, body) in bodies.iter().enumerate() {
            let serde = serde_review::<Runtime>(body.as_bytes()).map(|r| shown(&r));
            match fast_review::<Runtime>(body, decoder) {
                Ok(fast) => {
                    read_fast += 1;
                    let serde = serde.unwrap_or_else(|e| {
                        panic!("body {i}: the reader accepted what serde refuses: {e}")
                    });
                    assert_eq!(shown(&fast), serde, "body {i}");
                }
                Err(_) => assert!(
                    i >= 6,
                    "body {i}: a well-formed review must be read in one pass"
                ),
            }
        }
        assert_eq!(
            read_fast, 8,
            "the six well-formed reviews and the two without a request"
        );
        // managedFields are not kept on the serde path either (here serde types the object:
        // the reader declines nesting deeper than 100).
        let mut deep = managed.clone();
        deep["spec"]["ignored"] = (0..110).fold(json!(1), |v, _| json!([v]));
        let too_deep = deep.to_string();
        assert!(
            Runtime::FAST_DECODER
                .is_some_and(|d| kim_shared::json::decode_all(&too_deep, d).is_err())
        );
        let typed = Runtime::from_json(&too_deep).expect("serde reads it");
        assert_eq!(typed.metadata.managed_fields, None);
        assert_eq!(
            typed.spec,
            serde_json::from_value::<Runtime>(rt.clone())
                .expect("rt")
                .spec
        );

        // request.resource: other keys are skipped like serde does; kube-core's private
        // `api_version` is filled by serde from a key of that name, so the reader declines it.
        let runtimes = "\"resource\":\"runtimes\"";
        assert!(create.contains(runtimes));
        let extra_key = create.replacen(runtimes, &format!("{runtimes},\"scope\":1"), 1);
        let fast = fast_review::<Runtime>(&extra_key, decoder).expect("read in one pass");
        let serde = serde_review::<Runtime>(extra_key.as_bytes()).expect("serde reads it");
        assert_eq!(shown(&fast), shown(&serde));
        let api_version =
            create.replacen(runtimes, &format!("{runtimes},\"api_version\":\"x/v1\""), 1);
        assert!(fast_review::<Runtime>(&api_version, decoder).is_err());
        let serde = serde_review::<Runtime>(api_version.as_bytes()).expect("serde reads it");
        assert_eq!(shown(&serde)["request"]["resource"]["api_version"], "x/v1");
        let no_resource = create.replacen(runtimes, "\"x\":\"runtimes\"", 1);
        assert!(fast_review::<Runtime>(&no_resource, decoder).is_err());
        assert!(serde_review::<Runtime>(no_resource.as_bytes()).is_err());

        // Random byte-level edits of a review: whatever the reader accepts, serde reads alike.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        const ALPHABET: &[u8] = b"{}[],:\"\\ 0123456789.-eEtrufalsnuaZ";
        let (mut accepted, mut refused) = (0, 0);
        for case in 0..3000 {
            let mut t = create.clone().into_bytes();
            for _ in 0..1 + next(3) {
                let at = next(t.len());
                match next(3) {
                    0 => {
                        t.remove(at);
                    }
                    1 => t.insert(at, ALPHABET[next(ALPHABET.len())]),
                    _ => t[at] = ALPHABET[next(ALPHABET.len())],
                }
            }
            let Ok(body) = String::from_utf8(t) else {
                continue;
            };
            let serde = serde_review::<Runtime>(body.as_bytes()).map(|r| shown(&r));
            match fast_review::<Runtime>(&body, decoder) {
                Ok(fast) => {
                    accepted += 1;
                    let serde = serde.unwrap_or_else(|e| {
                        panic!("edit {case}: the reader accepted what serde refuses: {e}\n{body}")
                    });
                    assert_eq!(shown(&fast), serde, "edit {case}\n{body}");
                }
                Err(_) => refused += 1,
            }
        }
        assert!(
            accepted > 100 && refused > 500,
            "accepted {accepted}, refused {refused}"
        );
    }
}
