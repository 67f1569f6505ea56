//! The admitted types: `Runtime` (defaults, validation, deletion protection),
//! `GardenerCluster` (validation) and `RuntimeAccess` (its requester, validation). Each is a [`Defaulter`] and/or
//! [`Validator`] impl on the [`AdmissionContext`] over the pure rules of `kim_shared`.

use std::time::SystemTime;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kim_shared::access::{validate_runtime_access, validate_runtime_access_update};
use kim_shared::api::runtime_access::RuntimeAccess;
use kim_shared::api::{GardenerCluster, Runtime};
use kim_shared::config::{KimConfig, ProviderKind};
use kim_shared::validation::{self, DeletionPolicy, ValidationOutcome};

use crate::defaulter::Defaulter;
use crate::request::AdmissionContext;
use crate::validator::Validator;

/// The requesting user's name, as the apiserver authenticated it.
fn user_name(user: &UserInfo) -> &str {
    user.username.as_deref().unwrap_or_default()
}

impl Defaulter<Runtime> for AdmissionContext {
    fn apply_defaults(&self, obj: &mut Runtime, old: Option<&Runtime>, _user: &UserInfo) {
        if let Some(cfg) = &self.config {
            // A list over the CRD's bound: the API server's schema check refuses the object
            // after this webhook (a review posted here directly is answered unchanged), and
            // the update defaults compare the pools of both objects pairwise.
            let over_bound = |rt: &Runtime| !validation::runtime_lists_over_bound(rt).is_empty();
            if over_bound(obj) || old.is_some_and(over_bound) {
                return;
            }
            // On UPDATE only what the update adds is defaulted: a Runtime stored before these
            // defaults existed must not gain a new volume, networking type or HA on its next edit.
            match old {
                Some(old) => kim_shared::defaults::apply_update_defaults(old, obj, cfg),
                None => kim_shared::defaults::apply_defaults(obj, cfg),
            }
        }
    }
}

impl Validator<Runtime> for AdmissionContext {
    fn unavailable(&self, old: Option<&Runtime>, new: &Runtime) -> Option<String> {
        // A Runtime being deleted is held to the rules on changes that need neither (its
        // finalizer must go whatever this replica has loaded).
        if old.is_some() && new.metadata.deletion_timestamp.is_some() {
            return None;
        }
        if self.config.is_none() {
            return Some(
                "it has no valid KIM configuration loaded (its log names the file and key)".into(),
            );
        }
        if old.is_some_and(|old| !cloud_profile_rules_apply(old, new)) {
            return None;
        }
        // Fail closed: a Runtime is not admitted unchecked before the CloudProfiles are listed.
        self.cloud_profiles
            .as_ref()
            .and_then(|p| p.ready().err())
            .map(str::to_owned)
    }

    fn validate_create(&self, obj: &Runtime) -> ValidationOutcome {
        let Some(cfg) = &self.config else {
            return ValidationOutcome::default();
        };
        let mut f = validation::validate_create_with(obj, cfg, &self.validation);
        if validation::runtime_lists_over_bound(obj).is_empty() {
            f.extend(self.against_cloud_profile(obj, None, cfg));
        }
        f
    }

    fn validate_update(&self, old: &Runtime, new: &Runtime) -> ValidationOutcome {
        let Some(cfg) = &self.config else {
            return ValidationOutcome::default();
        };
        let mut f = validation::validate_update_with(old, new, cfg, &self.validation);
        let within_bounds = |rt: &Runtime| validation::runtime_lists_over_bound(rt).is_empty();
        if cloud_profile_rules_apply(old, new) && within_bounds(new) && within_bounds(old) {
            f.extend(self.against_cloud_profile(new, Some(old), cfg));
        }
        f
    }

    fn validate_delete(
        &self,
        metadata: &ObjectMeta,
        user: &UserInfo,
        now: SystemTime,
    ) -> ValidationOutcome {
        let policy = DeletionPolicy {
            enabled: self.deletion_protection,
            window: self.deletion_window,
            trusted_principals: self.deletion_trusted_principals.clone(),
        };
        let now = jiff::Timestamp::try_from(now).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let user = user_name(user);
        validation::validate_delete_by(metadata, &policy, user, now)
    }
}

/// Whether an UPDATE is judged against the CloudProfile: only a spec that changes, on a
/// Runtime not being deleted. Everything else (KEB's label changes, the force and suspend
/// annotations, the controller's finalizer removal) passes whatever the CloudProfile became:
/// Gardener can remove or rename it, or raise a minimum, under Runtimes it already serves, and
/// their deletion must not hang on it.
fn cloud_profile_rules_apply(old: &Runtime, new: &Runtime) -> bool {
    new.metadata.deletion_timestamp.is_none() && old.spec != new.spec
}

impl AdmissionContext {
    /// The rules of the Runtime's Gardener CloudProfile, when the webhook watches them.
    fn against_cloud_profile(
        &self,
        rt: &Runtime,
        old: Option<&Runtime>,
        cfg: &KimConfig,
    ) -> ValidationOutcome {
        let Some(profiles) = &self.cloud_profiles else {
            return ValidationOutcome::default();
        };
        let mut f = ValidationOutcome::default();
        // An unknown provider type is the configuration rules' finding.
        let Ok(kind) = rt
            .spec
            .shoot
            .provider
            .type_
            .as_str()
            .parse::<ProviderKind>()
        else {
            return f;
        };
        let name = cfg.cloud_profile_name(kind);
        let Some(profile) = profiles.get(name) else {
            f.violation(
                "spec.shoot.provider.type",
                format!("Gardener has no CloudProfile {name} for provider {kind}; ask the operator to configure kim.providers.{kind}.cloudProfileName"),
            );
            return f;
        };
        let spec = match &profile.spec {
            Ok(spec) => spec,
            Err(why) => {
                f.warning(
                    "spec.shoot.provider.type",
                    format!("the CloudProfile {name} does not read here ({why}), so its rules (versions, machine types and images, regions, zones, volumes) were not checked; Gardener checks them when the Shoot is written"),
                );
                return f;
            }
        };
        let now = jiff::Timestamp::now();
        validation::validate_against_cloud_profile(
            rt,
            old,
            cfg,
            validation::Profile { name, spec },
            now,
        )
    }
}

impl Validator<GardenerCluster> for AdmissionContext {
    fn validate_create(&self, obj: &GardenerCluster) -> ValidationOutcome {
        validation::validate_gardener_cluster(obj)
    }

    fn validate_update(&self, old: &GardenerCluster, new: &GardenerCluster) -> ValidationOutcome {
        validation::validate_gardener_cluster_update(old, new)
    }
}

/// A RuntimeAccess records who created it ([`kim_shared::access::ANNOTATION_REQUESTED_BY`]).
impl Defaulter<RuntimeAccess> for AdmissionContext {
    fn apply_defaults(
        &self,
        obj: &mut RuntimeAccess,
        old: Option<&RuntimeAccess>,
        user: &UserInfo,
    ) {
        kim_shared::access::stamp_requester(obj, old, user_name(user));
    }
}

impl Validator<RuntimeAccess> for AdmissionContext {
    fn validate_create(&self, obj: &RuntimeAccess) -> ValidationOutcome {
        validate_runtime_access(obj, &self.access_policy)
    }

    fn validate_create_by(&self, obj: &RuntimeAccess, user: &UserInfo) -> ValidationOutcome {
        let mut f = self.validate_create(obj);
        f.extend(kim_shared::access::validate_requester_on_create(
            obj,
            user_name(user),
        ));
        f
    }

    fn validate_update(&self, old: &RuntimeAccess, new: &RuntimeAccess) -> ValidationOutcome {
        validate_runtime_access_update(old, new, &self.access_policy)
    }

    fn validate_update_by(
        &self,
        old: &RuntimeAccess,
        new: &RuntimeAccess,
        user: &UserInfo,
    ) -> ValidationOutcome {
        let mut f = self.validate_update(old, new);
        f.extend(kim_shared::access::validate_spec_change_by(
            old,
            new,
            user_name(user),
        ));
        f
    }

    fn validate_repair_by(
        &self,
        old: &ObjectMeta,
        new: &RuntimeAccess,
        user: &UserInfo,
    ) -> ValidationOutcome {
        kim_shared::access::validate_repair_by(old, new, user_name(user))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

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
        let mut runtime: Runtime = serde_yaml_ng::from_str(&text).expect("sample is a Runtime");
        for w in &mut runtime.spec.shoot.provider.workers {
            w.volume = None;
        }
        runtime
    }

    #[test]
    fn create_defaults_the_volume_but_an_update_leaves_stored_pools_alone() {
        let mut ctx = ctx();
        // The shipped configuration has no volume default (it would change what KEB asked
        // for); an operator may add one.
        let mut cfg = ctx.config.as_deref().cloned().expect("config");
        if let Some(aws) = cfg
            .kim
            .providers
            .get_mut(&kim_shared::config::ProviderKind::Aws)
        {
            aws.defaults.volume = Some(
                serde_json::from_value(serde_json::json!({"type": "gp3", "size": "80Gi"}))
                    .expect("volume default"),
            );
        }
        ctx.config = Some(std::sync::Arc::new(cfg));
        let mut created = stored_without_volume();
        ctx.apply_defaults(&mut created, None, &UserInfo::default());
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
        ctx.apply_defaults(&mut updated, Some(&old), &UserInfo::default());
        assert!(
            updated.spec.shoot.provider.workers[0].volume.is_none(),
            "UPDATE must not add create-time defaults to a pool that was stored without them"
        );
    }

    /// A review posted straight to the webhook (the API server would refuse these lists) with
    /// 200,000 zones and pools: refused naming the list and its bound, the defaults not
    /// applied, in time linear in the lists (the rules that compare zones and pools pairwise
    /// would need some 10^10 comparisons, which this test would not survive).
    #[test]
    fn forged_reviews_with_lists_over_their_bound_are_answered_without_the_pairwise_rules() {
        let ctx = ctx();
        let mut old = stored_without_volume();
        let mut new = old.clone();
        let zones: Vec<String> = (0..200_000).map(|i| format!("zone-{i}")).collect();
        new.spec
            .shoot
            .control_plane
            .get_or_insert_with(Default::default)
            .zones = Some(zones.clone());
        let f = Validator::<Runtime>::validate_create(&ctx, &new);
        assert_eq!(f.violations.len(), 1, "{:?}", f.violations);
        assert_eq!(f.violations[0].field, "spec.shoot.controlPlane.zones");
        assert_eq!(
            f.violations[0].message,
            "has 200000 items; it may have at most 32"
        );

        let pool = old.spec.shoot.provider.workers[0].clone();
        let pools: Vec<_> = (0..200_000)
            .map(|i| {
                let mut p = pool.clone();
                p.name = format!("p{i}");
                p
            })
            .collect();
        old.spec.shoot.provider.additional_workers = Some(pools.clone());
        let mut new = old.clone();
        new.spec.shoot.provider.additional_workers = Some(pools.into_iter().rev().collect());
        let f = Validator::<Runtime>::validate_update(&ctx, &old, &new);
        assert!(
            f.violations
                .iter()
                .any(|v| v.field == "spec.shoot.provider.additionalWorkers"
                    && v.message == "has 200000 items; it may have at most 100"),
            "{:?}",
            f.violations
        );
        let before = new.clone();
        ctx.apply_defaults(&mut new, Some(&old), &UserInfo::default());
        assert!(new == before, "defaults applied to a forged object");
    }

    #[test]
    fn a_cloud_profile_that_does_not_read_admits_with_a_warning_naming_it() {
        let mut ctx = ctx();
        let cfg = ctx.config.clone().expect("config");
        let name = cfg.cloud_profile_name(kim_shared::config::ProviderKind::Aws);
        let unreadable: crate::profiles::WatchedProfile = serde_json::from_value(
            serde_json::json!({"metadata": {"name": name}, "spec": {"type": "aws", "regions": 5}}),
        )
        .expect("a watched profile always reads");
        ctx.cloud_profiles = Some(crate::profiles::CloudProfiles::holding(vec![unreadable]));
        let f = ctx.against_cloud_profile(&stored_without_volume(), None, &cfg);
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        assert!(
            f.warnings.iter().any(|w| w.contains(&format!(
                "the CloudProfile {name} does not read here (spec.regions: invalid type"
            )) && w.contains("were not checked")),
            "{:?}",
            f.warnings
        );
        // A profile that is missing is still a violation.
        ctx.cloud_profiles = Some(crate::profiles::CloudProfiles::holding(Vec::new()));
        let f = ctx.against_cloud_profile(&stored_without_volume(), None, &cfg);
        assert!(
            f.violations
                .iter()
                .any(|v| v.message.contains("Gardener has no CloudProfile")),
            "{:?}",
            f.violations
        );
    }

    /// Fail closed: before the CloudProfiles are listed, a Runtime is refused as "retry", not
    /// admitted unchecked and not called invalid; an update that leaves the spec as it is
    /// (the controller's finalizer removal among them) does not need them.
    #[test]
    fn before_the_cloud_profiles_are_listed_runtimes_are_refused_with_a_retry_hint() {
        let mut ctx = ctx();
        let new = stored_without_volume();
        assert_eq!(Validator::<Runtime>::unavailable(&ctx, None, &new), None);
        let profiles = crate::profiles::CloudProfiles::unlisted();
        assert!(profiles.ready().is_err(), "not ready before the first list");
        ctx.cloud_profiles = Some(profiles);
        assert_eq!(
            Validator::<Runtime>::unavailable(&ctx, None, &new).as_deref(),
            Some("the Gardener CloudProfiles are not cached yet")
        );
        let mut resized = new.clone();
        resized.spec.shoot.provider.workers[0].maximum += 1;
        assert_eq!(
            Validator::<Runtime>::unavailable(&ctx, Some(&new), &resized).as_deref(),
            Some("the Gardener CloudProfiles are not cached yet")
        );
        let mut relabelled = new.clone();
        relabelled
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("edited".into(), "true".into());
        assert_eq!(
            Validator::<Runtime>::unavailable(&ctx, Some(&new), &relabelled),
            None
        );
        ctx.config = None;
        assert!(
            Validator::<Runtime>::unavailable(&ctx, None, &new)
                .is_some_and(|why| why.contains("no valid KIM configuration")),
        );
        // Without a configuration too, a Runtime being deleted gets its finalizer removed.
        let mut going = new.clone();
        going.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        let mut unfinalized = going.clone();
        unfinalized.metadata.finalizers = None;
        assert_eq!(
            Validator::<Runtime>::unavailable(&ctx, Some(&going), &unfinalized),
            None
        );
        // Other kinds do not need them.
        let gc = GardenerCluster::new("gc", Default::default());
        assert_eq!(
            Validator::<GardenerCluster>::unavailable(&ctx, None, &gc),
            None
        );
    }

    /// Gardener removed the CloudProfile (or the configuration names one it does not have):
    /// a new spec is refused, but an update that keeps the spec, or one of a Runtime being
    /// deleted, passes, or the Runtime's finalizer could never be removed.
    #[test]
    fn a_missing_cloud_profile_refuses_new_specs_only() {
        let mut ctx = ctx();
        ctx.cloud_profiles = Some(crate::profiles::CloudProfiles::holding(Vec::new()));
        let old = stored_without_volume();
        let refused = |f: &ValidationOutcome| {
            f.violations
                .iter()
                .any(|v| v.message.contains("Gardener has no CloudProfile"))
        };
        let mut resized = old.clone();
        resized.spec.shoot.provider.workers[0].maximum += 1;
        let f = Validator::<Runtime>::validate_update(&ctx, &old, &resized);
        assert!(refused(&f), "{:?}", f.violations);
        let mut unfinalized = old.clone();
        unfinalized.metadata.finalizers = Some(vec![
            "runtime-controller.infrastructure-manager.kyma-project.io/deletion-hook".into(),
        ]);
        let mut going = unfinalized.clone();
        going.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        unfinalized.metadata.deletion_timestamp = going.metadata.deletion_timestamp.clone();
        unfinalized.metadata.finalizers = None;
        let f = Validator::<Runtime>::validate_update(&ctx, &going, &unfinalized);
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        let mut relabelled = old.clone();
        relabelled
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("edited".into(), "true".into());
        let f = Validator::<Runtime>::validate_update(&ctx, &old, &relabelled);
        assert!(f.violations.is_empty(), "{:?}", f.violations);
    }

    #[test]
    fn audit_log_mandatory_is_the_flag_of_the_context() {
        let mut ctx = ctx();
        let mut cfg = ctx.config.as_deref().cloned().expect("config");
        let mut runtime = stored_without_volume();
        runtime.spec.shoot.secret_binding_name = "hyperscaler-secret".into();
        if let Some(k) = runtime.spec.shoot.kubernetes.as_mut() {
            k.version = None;
        }
        ctx.apply_defaults(&mut runtime, None, &UserInfo::default());
        let region = runtime.spec.shoot.region.clone();
        assert!(
            ctx.validate_create(&runtime).violations.is_empty(),
            "the sample is admissible as it is"
        );
        cfg.audit_log_tenants
            .0
            .get_mut("aws")
            .and_then(|regions| regions.remove(&region))
            .expect("the example config has a tenant for the sample's region");
        ctx.config = Some(std::sync::Arc::new(cfg));

        let refused = ctx.validate_create(&runtime);
        assert!(
            !refused.violations.is_empty(),
            "mandatory by default: refused"
        );
        ctx.validation.audit_log_mandatory = false;
        let warned = ctx.validate_create(&runtime);
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

    /// How the review reader reads Runtime reviews as the apiserver sends them, and what it
    /// refuses: serde's rules, pinned here (a review that is refused is denied).
    #[test]
    fn runtime_reviews_are_read_and_refused_as_serde_reads_them() {
        use crate::decode::review;
        use serde_json::{Value, json};
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(repo.join("../config/samples/runtime-aws.yaml"))
            .expect("sample readable");
        let runtime: Value = serde_yaml_ng::from_str(&text).expect("yaml");
        let make = |op: &str, object: Value, old: Value, extra: Value| {
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
        let expected: Runtime = serde_json::from_value(runtime.clone()).expect("the example");
        // As the apiserver sends objects: with managedFields (read as JSON, not typed).
        let mut managed = runtime.clone();
        managed["metadata"]["managedFields"] = json!([{"apiVersion": "infrastructuremanager.kyma-project.io/v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {".": {}, "f:shoot": {}}}, "manager": "kyma-environment-broker", "operation": "Update", "time": "2026-11-30T17:12:47Z"}]);
        let read = [
            make("CREATE", runtime.clone(), Value::Null, json!({})),
            make("UPDATE", managed.clone(), managed.clone(), json!({})),
            make(
                "UPDATE",
                runtime.clone(),
                runtime.clone(),
                json!({"dryRun": true}),
            ),
            make(
                "DELETE",
                Value::Null,
                runtime.clone(),
                json!({"subResource": null}),
            ),
            make(
                "CREATE",
                runtime.clone(),
                Value::Null,
                json!({"subResource": "status", "namespace": null}),
            ),
            make(
                "CONNECT",
                runtime.clone(),
                Value::Null,
                json!({"userInfo": {}}),
            ),
        ];
        for (i, body) in read.iter().enumerate() {
            let typed = review::<Runtime>(body.as_bytes())
                .unwrap_or_else(|e| panic!("review {i} is read: {e}"));
            let req = typed.review.request.expect("a request");
            for obj in req.object.iter().chain(&req.old_object) {
                assert_eq!(obj.spec, expected.spec, "review {i}");
                assert_eq!(obj.metadata.managed_fields, None, "review {i}: not kept");
            }
            assert_eq!(
                typed.object_text.get().is_some(),
                req.object.is_some(),
                "review {i}: the object's text is kept as sent"
            );
        }
        // The status is neither typed nor kept: one our types cannot read (a condition time
        // with ten fractional digits, as the apiserver stores it) does not refuse the review.
        let mut unreadable_status = runtime.clone();
        unreadable_status["status"] = json!({"state": "Ready", "conditions": [{
            "type": "Provisioned", "status": "True", "reason": "Edited", "message": "",
            "lastTransitionTime": "2024-01-01T00:00:00.1234567891Z"}]});
        assert!(serde_json::from_value::<Runtime>(unreadable_status.clone()).is_err());
        let body = make(
            "UPDATE",
            unreadable_status.clone(),
            unreadable_status,
            json!({}),
        );
        let req = review::<Runtime>(body.as_bytes())
            .expect("read")
            .review
            .request
            .expect("a request");
        for obj in [&req.object, &req.old_object] {
            let obj = obj.as_ref().expect("both read");
            assert_eq!(obj.spec, expected.spec);
            assert!(obj.status.is_none());
        }
        let create = make("CREATE", runtime.clone(), Value::Null, json!({}));
        // Refused: what serde refuses (an unknown operation, nulls and values of the wrong
        // type, duplicate fields, an object that is not a Runtime, trailing data).
        let refused = [
            make("PATCH", runtime.clone(), Value::Null, json!({})),
            make(
                "CREATE",
                runtime.clone(),
                Value::Null,
                json!({"dryRun": null}),
            ),
            make(
                "CREATE",
                runtime.clone(),
                Value::Null,
                json!({"name": null}),
            ),
            make("CREATE", runtime.clone(), Value::Null, json!({"uid": 7})),
            make("CREATE", json!({"spec": 1}), Value::Null, json!({})),
            create.replacen("\"uid\":", "\"uid\":\"dup\",\"uid\":", 1),
            create.replacen("\"request\":{", "\"request\":null,\"request\":{", 1),
            create.replacen("\"kind\":\"AdmissionReview\"", "\"kind\":null", 1),
            create.replacen(
                "\"spec\":{",
                "\"spec\":{\"security\":{\"administrators\":[]},",
                1,
            ),
            create.replacen("\"minimum\":", "\"minimum\":-0,\"x\":", 1),
            format!("{create} trailing"),
        ];
        for (i, body) in refused.iter().enumerate() {
            assert!(
                review::<Runtime>(body.as_bytes()).is_err(),
                "refused {i}: {body}"
            );
        }
        // An integer spelled -0 is refused, as serde refuses it (it reads it as a float).
        let minus_zero = &refused[9];
        assert!(minus_zero.contains("\"minimum\":-0,"), "{minus_zero}");
        let err = review::<Runtime>(minus_zero.as_bytes())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("floating point `-0.0`"), "{err}");
        // Reviews without a request are read (and answered as such by the dispatch).
        for body in [
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}"#,
        ] {
            let typed = review::<Runtime>(body.as_bytes()).expect("read");
            assert!(typed.review.request.is_none());
        }
        // request.resource: other keys are skipped; the key is required.
        let runtimes = "\"resource\":\"runtimes\"";
        assert!(create.contains(runtimes));
        let extra_key = create.replacen(runtimes, &format!("{runtimes},\"scope\":1"), 1);
        assert!(review::<Runtime>(extra_key.as_bytes()).is_ok());
        let no_resource = create.replacen(runtimes, "\"x\":\"runtimes\"", 1);
        assert!(review::<Runtime>(no_resource.as_bytes()).is_err());
    }

    /// `requested-by` never changes, also on an update whose stored object does not read (here
    /// a spec an older CRD let through), and only the requester repairs such an object.
    #[test]
    fn the_requester_holds_when_the_stored_runtime_access_does_not_read() {
        use serde_json::json;
        let by = kim_shared::access::ANNOTATION_REQUESTED_BY;
        let object = |annotations: serde_json::Value, status: serde_json::Value| {
            json!({
                "apiVersion": "infrastructuremanager.kyma-project.io/v1",
                "kind": "RuntimeAccess",
                "metadata": {"name": "reader", "namespace": "kcp-system", "annotations": annotations},
                "spec": {
                    "runtimeId": "runtime-id",
                    "serviceAccount": {"name": "pod-reader", "namespace": "apps"},
                    "role": {"namespace": "apps", "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
                },
                "status": status,
            })
        };
        let unreadable = json!({"state": "Ready", "conditions": [{
            "type": "KubeconfigReady", "status": "True", "reason": "KubeconfigIssued", "message": "",
            "lastTransitionTime": "2024-01-01T00:00:00.1234567891Z"}]});
        let stored = |requester: serde_json::Value| {
            let mut old = object(requester, unreadable.clone());
            old["spec"]["tokenExpirationSeconds"] = json!("soon");
            old
        };
        let review = |old: &serde_json::Value, new: serde_json::Value| {
            serde_json::to_vec(&json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "u-1",
                    "kind": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "RuntimeAccess"},
                    "resource": {"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimeaccesses"},
                    "name": "reader", "namespace": "kcp-system",
                    "operation": "UPDATE",
                    "userInfo": {"username": "mallory"},
                    "object": new,
                    "oldObject": old,
                    "dryRun": false,
                }
            }))
            .expect("json")
        };
        let answer = |old: &serde_json::Value, new| {
            let out = crate::admission::validate::<RuntimeAccess>(
                &review(old, new),
                &AdmissionContext::default(),
                SystemTime::now(),
            );
            serde_json::from_slice::<serde_json::Value>(&out.body).expect("a review")
        };
        let old = stored(json!({by: "alice"}));
        for new in [
            object(json!({by: "mallory"}), unreadable.clone()),
            object(json!({}), unreadable.clone()),
        ] {
            let got = answer(&old, new);
            assert_eq!(got["response"]["allowed"], false, "{got}");
            assert!(
                got["response"]["status"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(by) && m.contains("cannot be changed")),
                "{got}"
            );
            assert!(
                got["response"]["warnings"]
                    .to_string()
                    .contains("does not read"),
                "the path of an unreadable stored object: {got}"
            );
        }
        // What a repair changes cannot be told, so only the requester repairs.
        let repaired_by_other = answer(&old, object(json!({by: "alice"}), unreadable.clone()));
        assert_eq!(
            repaired_by_other["response"]["allowed"], false,
            "{repaired_by_other}"
        );
        assert!(
            repaired_by_other["response"]["status"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("spec: ") && m.contains("\"alice\"")),
            "{repaired_by_other}"
        );
        let repaired = answer(
            &stored(json!({by: "mallory"})),
            object(json!({by: "mallory"}), unreadable.clone()),
        );
        assert_eq!(repaired["response"]["allowed"], true, "{repaired}");
        let legacy = answer(&stored(json!({})), object(json!({}), unreadable.clone()));
        assert_eq!(
            legacy["response"]["allowed"], true,
            "no requester recorded: {legacy}"
        );
    }
}
