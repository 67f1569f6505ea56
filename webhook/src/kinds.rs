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
    fn default(&mut self, ctx: &AdmissionContext) {
        if let Some(cfg) = &ctx.config {
            kim_shared::defaults::apply_defaults(self, cfg);
        }
    }

    fn validate_create(&self, ctx: &AdmissionContext) -> Verdict {
        match &ctx.config {
            Some(cfg) => validation::validate_create(self, cfg).into(),
            None => no_config(),
        }
    }

    fn validate_update(&self, old: &Self, ctx: &AdmissionContext) -> Verdict {
        match &ctx.config {
            Some(cfg) => validation::validate_update(old, self, cfg).into(),
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
