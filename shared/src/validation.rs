//! Semantic validation of `Runtime` and `GardenerCluster` objects: the one rule set used by the
//! admission webhook, the offline `validate` command and the controller before it converts.
//! RuntimeAccess has its own rules, in the `access` module.
//!
//! Every function is pure and reports *all* violations at once, each with the field path that is
//! at fault and a message saying what would be valid. Findings that do not block admission
//! (ignored fields, values Gardener will change) are returned as warnings. Field paths and
//! messages are built only for findings: a valid Runtime costs a few small allocations (version
//! parsing, the zone list and layout) and no clone.
//! The full list of rules is in `docs/validation.md`.

mod bounds;
mod cloud_profile;
mod context;
mod deletion;
mod gardener_cluster;
mod labels;
mod networking;
mod node_metadata;
mod oidc;
mod registry_cache;
mod runtime;
mod security;
pub mod syntax;
mod update;
mod workers;

use std::fmt;

pub use bounds::runtime_lists_over_bound;
pub use cloud_profile::{Profile, validate_against_cloud_profile};
pub use deletion::{validate_delete, validate_delete_by};
pub use gardener_cluster::{validate_gardener_cluster, validate_gardener_cluster_update};
pub use runtime::{PROJECT_AND_SHOOT_NAME_MAX, PURPOSES, validate_create, validate_create_with};
pub use update::{validate_update, validate_update_with};

/// One violated rule: the field at fault and what would be valid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Path of the field at fault, e.g. `spec.shoot.provider.workers[0].name` or
    /// `metadata.labels[kyma-project.io/runtime-id]`.
    pub field: String,
    /// What is wrong and what would be valid.
    pub message: String,
}

impl Violation {
    /// The violation with its control characters escaped and its texts bounded (see
    /// [`ValidationOutcome::presentable`]).
    pub fn presentable(self) -> Self {
        Self {
            field: printable(&self.field, MAX_FIELD_PATH),
            message: printable(&self.message, MAX_MESSAGE),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The outcome of a validation: violations deny admission, warnings do not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidationOutcome {
    /// Violated rules; any one of them denies admission.
    pub violations: Vec<Violation>,
    /// Non-fatal findings, returned as admission warnings.
    pub warnings: Vec<String>,
}

impl ValidationOutcome {
    /// Whether the object may be admitted (no violations).
    pub fn is_allowed(&self) -> bool {
        self.violations.is_empty()
    }

    /// Records a violation of `field`.
    pub fn violation(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.violations.push(Violation {
            field: field.into(),
            message: message.into(),
        });
    }

    /// Records a warning about `field`, written as `<field>: <message>`.
    pub fn warning(&mut self, field: impl fmt::Display, message: impl fmt::Display) {
        self.warnings.push(format!("{field}: {message}"));
    }

    /// Appends all findings of `other`.
    pub fn extend(&mut self, other: ValidationOutcome) {
        self.violations.extend(other.violations);
        self.warnings.extend(other.warnings);
    }

    /// The findings as they are shown to a client.
    ///
    /// One violation per field, the first found: the configuration's rules run before the
    /// CloudProfile's, so a value both refuse is explained by the more specific message.
    /// Violations of fields judged against a violated field are dropped too: a pool's zones are
    /// zones of `spec.shoot.region`, so a wrong region would have every zone refused with
    /// advice built from the wrong region.
    ///
    /// Messages and paths quote what the client sent (values, map keys): control characters
    /// are escaped, so that a value cannot rewrite the terminal that shows it, and each text is
    /// cut to a length a reader can take in.
    pub fn presentable(mut self) -> Self {
        // A region without an audit-log tenant is a region all the same: its zones stand.
        let region_violated = self
            .violations
            .iter()
            .any(|v| v.field == REGION_FIELD && !v.message.starts_with(NO_AUDIT_LOG_TENANT));
        let mut seen = std::collections::HashSet::new();
        self.violations.retain(|v| {
            let consequence = region_violated
                && (is_zone_field(&v.field)
                    // Whether a wrong region has a tenant is moot.
                    || (v.field == REGION_FIELD && v.message.starts_with(NO_AUDIT_LOG_TENANT)));
            !consequence && seen.insert(v.field.clone())
        });
        self.violations = self
            .violations
            .into_iter()
            .map(Violation::presentable)
            .collect();
        for w in &mut self.warnings {
            *w = printable(w, MAX_MESSAGE);
        }
        self
    }
}

/// Bytes of a field path and of a message shown (before escaping).
const MAX_FIELD_PATH: usize = 256;
const MAX_MESSAGE: usize = 1024;

/// Format characters that reorder or hide text when shown: bidirectional overrides and
/// isolates, zero-width characters, the soft hyphen and the byte-order mark.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// `text` with control characters escaped (`\n`, `\u{1b}`) and cut to `max` bytes, saying
/// how long it was.
fn printable(text: &str, max: usize) -> String {
    let (kept, cut) = match text.char_indices().find(|(i, c)| i + c.len_utf8() > max) {
        Some((end, _)) => (&text[..end], true),
        None => (text, false),
    };
    let mut out = String::with_capacity(kept.len());
    for c in kept.chars() {
        if c.is_control() || is_invisible_format(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if cut {
        out.push_str(&format!("... ({} bytes)", text.len()));
    }
    out
}

const REGION_FIELD: &str = "spec.shoot.region";

/// How the refusal of a region without an audit-log tenant begins.
pub(crate) const NO_AUDIT_LOG_TENANT: &str = "no audit-log tenant is configured";

/// The `zones` of a pool (`workers[i]` or `additionalWorkers[i]`) or one of its elements.
fn is_zone_field(field: &str) -> bool {
    [
        "spec.shoot.provider.workers[",
        "spec.shoot.provider.additionalWorkers[",
    ]
    .iter()
    .filter_map(|pools| field.strip_prefix(pools))
    .filter_map(|rest| rest.split_once(']'))
    .any(|(_, rest)| rest == ".zones" || rest.starts_with(".zones["))
}

/// Settings of the validation that live outside the KIM configuration (controller flags).
/// [`Default`] matches the defaults of `convert::ConvertOptions`, so that what validation
/// admits, the conversion accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationOptions {
    /// Upstream's `--audit-log-mandatory` (default true): a Runtime whose provider and region
    /// have no audit-log tenant is rejected; when false it gets a warning instead.
    pub audit_log_mandatory: bool,
    /// The rules that hold new Runtimes to more than Gardener and the conversion need (networks
    /// clear of `kim.seedNetworks`, `dualStack` only where the provider supports it); default
    /// true. The controller, which validates stored Runtimes before converting them, turns
    /// them off, so that a Runtime stored before such a rule existed keeps being reconciled.
    pub admission_policy: bool,
}

impl Default for ValidationOptions {
    fn default() -> Self {
        Self {
            audit_log_mandatory: true,
            admission_policy: true,
        }
    }
}

/// Deletion protection of Runtimes (upstream's proposed deletion-protection ADR): a DELETE
/// is denied unless the Runtime carries a recent confirmation annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeletionPolicy {
    /// Whether deletion protection is on (on by default).
    pub enabled: bool,
    /// How old the confirmation may be (default 2 minutes).
    pub window: std::time::Duration,
    /// Users (as the apiserver authenticates them, e.g.
    /// `system:serviceaccount:<namespace>:<name>`) whose deletes need no confirmation: the
    /// broker that deprovisions Runtimes and does not set the annotation.
    pub trusted_principals: Vec<String>,
}

impl DeletionPolicy {
    /// The default acceptance window of a deletion confirmation.
    pub const DEFAULT_WINDOW: std::time::Duration = std::time::Duration::from_secs(120);
    /// KEB's ServiceAccount as KEB's chart deploys it in a Kyma control plane.
    pub const KEB_SERVICE_ACCOUNT: &str =
        "system:serviceaccount:kcp-system:kcp-kyma-environment-broker";
}

impl Default for DeletionPolicy {
    fn default() -> Self {
        Self {
            enabled: true,
            window: Self::DEFAULT_WINDOW,
            trusted_principals: vec![Self::KEB_SERVICE_ACCOUNT.to_owned()],
        }
    }
}

/// How many values of a long list a message shows.
const SHOWN: usize = 8;

/// At most [`SHOWN`] values, then how many more.
pub(crate) fn shortened<S: AsRef<str>>(values: impl Iterator<Item = S>) -> String {
    let all: Vec<S> = values.collect();
    if all.is_empty() {
        return "none (the CloudProfile offers nothing that fits)".to_owned();
    }
    let shown: Vec<&str> = all.iter().take(SHOWN).map(AsRef::as_ref).collect();
    let mut text = shown.join(", ");
    if all.len() > SHOWN {
        text.push_str(&format!(" and {} more", all.len() - SHOWN));
    }
    text
}

/// Field path of one element of a list, built only when a finding needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item {
    /// Path of the list, e.g. `spec.shoot.provider.workers`.
    pub list: &'static str,
    /// Index in the list.
    pub index: usize,
}

impl Item {
    /// `<list>[<index>]`.
    pub fn path(self) -> String {
        format!("{}[{}]", self.list, self.index)
    }

    /// `<list>[<index>].<suffix>`.
    pub fn field(self, suffix: &str) -> String {
        format!("{}[{}].{}", self.list, self.index, suffix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_violation_reads_as_its_field_then_its_message() {
        let v = Violation {
            field: "spec.shoot.region".into(),
            message: "use one of eu-central-1".into(),
        };
        assert_eq!(v.to_string(), "spec.shoot.region: use one of eu-central-1");
    }

    #[test]
    fn presentable_keeps_the_first_message_of_a_field_and_drops_zones_of_a_wrong_region() {
        let mut f = ValidationOutcome::default();
        f.violation("spec.shoot.provider.workers[0].zones[0]", "not a zone of x");
        f.violation("spec.shoot.provider.workers[0].zones", "must list a zone");
        f.violation("spec.shoot.provider.workers[0].name", "first");
        f.violation("spec.shoot.provider.workers[0].name", "second");
        f.violation(
            "spec.shoot.provider.workers[1].zonesExtra",
            "not a zone field",
        );
        f.violation(
            "spec.shoot.provider.additionalWorkers[0].zones[1]",
            "not a zone of x",
        );
        let kept = |f: &ValidationOutcome| -> Vec<String> {
            f.violations.iter().map(|v| v.to_string()).collect()
        };
        assert_eq!(
            kept(&f.clone().presentable()),
            [
                "spec.shoot.provider.workers[0].zones[0]: not a zone of x",
                "spec.shoot.provider.workers[0].zones: must list a zone",
                "spec.shoot.provider.workers[0].name: first",
                "spec.shoot.provider.workers[1].zonesExtra: not a zone field",
                "spec.shoot.provider.additionalWorkers[0].zones[1]: not a zone of x",
            ]
        );
        let mut tenantless = f.clone();
        tenantless.violation(
            "spec.shoot.region",
            format!("{NO_AUDIT_LOG_TENANT} for aws region \"x\""),
        );
        assert_eq!(tenantless.presentable().violations.len(), 6, "zones stand");
        f.violation(
            "spec.shoot.region",
            format!("{NO_AUDIT_LOG_TENANT} for aws region \"x\""),
        );
        f.violation("spec.shoot.region", "not a region");
        assert_eq!(
            kept(&f.presentable()),
            [
                "spec.shoot.provider.workers[0].name: first",
                "spec.shoot.provider.workers[1].zonesExtra: not a zone field",
                "spec.shoot.region: not a region",
            ]
        );
    }

    #[test]
    fn presentable_text_has_no_control_characters_and_a_bounded_length() {
        let mut f = ValidationOutcome::default();
        f.violation(
            "spec.x.labels[a\u{1b}[2Jb]",
            "\"ev\u{1b}]0;il\u{7}\" is not valid;\nuse x",
        );
        f.violation("spec.long", "é".repeat(2000));
        f.warning("spec.w", "line\rbreak \u{202e}desrever");
        let f = f.presentable();
        assert_eq!(f.violations[0].field, "spec.x.labels[a\\u{1b}[2Jb]");
        assert_eq!(
            f.violations[0].message,
            "\"ev\\u{1b}]0;il\\u{7}\" is not valid;\\nuse x"
        );
        let long = &f.violations[1].message;
        assert!(long.ends_with("... (4000 bytes)"), "{long}");
        assert!(long.len() <= MAX_MESSAGE + 20, "{}", long.len());
        assert_eq!(f.warnings, ["spec.w: line\\rbreak \\u{202e}desrever"]);
    }

    #[test]
    fn extending_an_outcome_appends_the_others_findings_after_its_own() {
        let mut a = ValidationOutcome::default();
        a.violation("a", "first");
        a.warning("w", "one");
        let mut b = ValidationOutcome::default();
        b.violation("b", "second");
        b.warning("x", "two");
        a.extend(b);
        let fields: Vec<&str> = a.violations.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(fields, ["a", "b"]);
        assert_eq!(a.warnings, ["w: one", "x: two"]);
        assert!(!a.is_allowed());
    }
}
