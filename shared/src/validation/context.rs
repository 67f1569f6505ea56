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
