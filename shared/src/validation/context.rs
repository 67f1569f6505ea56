//! What the rules of one Runtime need to know, shared by the rule modules (a leaf, so that the
//! Runtime rules and the field rules they call do not import each other).

use super::ValidationOptions;
use crate::api::Runtime;
use crate::config::{KimConfig, ProviderConfig};

/// What the rules of one Runtime need to know.
pub(crate) struct Ctx<'a> {
    /// The Runtime under validation.
    pub rt: &'a Runtime,
    /// The KIM configuration.
    pub cfg: &'a KimConfig,
    /// `kim.providers.<type>`, when the configuration restricts this provider.
    pub provider: Option<&'a ProviderConfig>,
    /// On UPDATE, the stored object (relaxes rules for what it already had).
    pub old: Option<&'a Runtime>,
    /// Settings from outside the KIM configuration.
    pub opts: &'a ValidationOptions,
}

impl<'a> Ctx<'a> {
    /// Whether the `kim.providers` allow-lists and bounds hold for a value: at admission only
    /// (not when the controller re-checks a stored Runtime before converting it), and on UPDATE
    /// only for a value the stored Runtime did not have already (`kept`). Tightening the
    /// configuration then holds new choices to it without making stored Runtimes fail or
    /// refusing KEB's updates of them (KEB rewrites whole sections, unchanged values included).
    pub fn policy_applies(&self, kept: bool) -> bool {
        self.opts.admission_policy && !kept
    }

    pub fn new(
        rt: &'a Runtime,
        cfg: &'a KimConfig,
        old: Option<&'a Runtime>,
        opts: &'a ValidationOptions,
    ) -> Self {
        let provider = cfg.provider(rt.spec.shoot.provider.type_.as_str());
        Self {
            rt,
            cfg,
            provider,
            old,
            opts,
        }
    }
}
