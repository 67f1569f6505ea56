//! The admitted types: `Runtime` (defaults, validation, deletion protection),
//! `GardenerCluster` and `RuntimeAccess` (validation). Each is one [`Admitted`] impl over the pure rules of
//! `kim_shared`.

use std::time::SystemTime;

use kim_shared::access::{validate_runtime_access, validate_runtime_access_update};
use kim_shared::api::runtime_access::RuntimeAccess;
use kim_shared::api::{GardenerCluster, Runtime};
use kim_shared::validation::{self, DeletionPolicy, Findings};

use crate::admission::{AdmissionContext, Admitted, FieldViolation, Verdict};

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

impl Admitted for GardenerCluster {
    fn validate_create(&self, _ctx: &AdmissionContext) -> Verdict {
        validation::validate_gardener_cluster(self).into()
    }

    fn validate_update(&self, _old: &Self, _ctx: &AdmissionContext) -> Verdict {
        validation::validate_gardener_cluster(self).into()
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
        let text = std::fs::read_to_string(
            repo.join("../../shared/upstream/docs/adr/assets/runtime-examples/aws.yaml"),
        )
        .expect("upstream example readable");
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
}
