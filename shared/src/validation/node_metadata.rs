//! What a worker pool puts on its Nodes: labels, annotations and taints, well-formed by
//! Kubernetes' rules, as Gardener's Shoot validation requires.

use super::syntax::{is_label_value, is_qualified_name};
use super::{Item, ValidationOutcome};
use crate::gardener::Worker;

/// The taint effects Kubernetes knows.
pub const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// The taint key Gardener puts on Nodes until their critical components are ready; a pool may
/// not set it.
pub const RESERVED_TAINT_KEY: &str = "node.gardener.cloud/critical-components-not-ready";

/// Total size of a pool's annotations Kubernetes allows (keys and values).
const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

const KEY_FORM: &str = "an optional DNS subdomain prefix and '/', then a name of at most 63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit, e.g. example.com/pool or pool";
const VALUE_FORM: &str = "empty, or at most 63 letters, digits, '-', '_' or '.' starting and ending with a letter or digit";

/// Checks `labels`, `annotations` and `taints` of the pool at `at`.
pub(crate) fn check(at: Item, w: &Worker, f: &mut ValidationOutcome) {
    for (key, value) in w.labels.iter().flatten() {
        if !is_qualified_name(key) {
            f.violation(
                at.field(&format!("labels[{key}]")),
                format!("{key:?} is not a valid label key; use {KEY_FORM}"),
            );
        }
        if !is_label_value(value) {
            f.violation(
                at.field(&format!("labels[{key}]")),
                format!("{value:?} is not a valid label value; use {VALUE_FORM}"),
            );
        }
    }
    let mut bytes = 0usize;
    for (key, value) in w.annotations.iter().flatten() {
        bytes = bytes.saturating_add(key.len()).saturating_add(value.len());
        // Kubernetes compares annotation keys in lower case.
        if !is_qualified_name(&key.to_ascii_lowercase()) {
            f.violation(
                at.field(&format!("annotations[{key}]")),
                format!("{key:?} is not a valid annotation key; use {KEY_FORM}"),
            );
        }
    }
    if bytes > ANNOTATIONS_MAX_BYTES {
        f.violation(
            at.field("annotations"),
            format!("keys and values take {bytes} bytes; Kubernetes allows at most {ANNOTATIONS_MAX_BYTES}"),
        );
    }
    taints(at, w, f);
}

fn taints(at: Item, w: &Worker, f: &mut ValidationOutcome) {
    let Some(taints) = &w.taints else { return };
    for (i, t) in taints.iter().enumerate() {
        let field = |suffix: &str| at.field(&format!("taints[{i}]{suffix}"));
        if !is_qualified_name(&t.key) {
            f.violation(
                field(".key"),
                format!("{:?} is not a valid taint key; use {KEY_FORM}", t.key),
            );
        } else if t.key == RESERVED_TAINT_KEY {
            f.violation(
                field(".key"),
                format!("{RESERVED_TAINT_KEY} is reserved: Gardener sets it on Nodes until their critical components are ready; use another key"),
            );
        }
        if let Some(value) = &t.value
            && !is_label_value(value)
        {
            f.violation(
                field(".value"),
                format!("{value:?} is not a valid taint value; use {VALUE_FORM}"),
            );
        }
        if !TAINT_EFFECTS.contains(&t.effect.as_str()) {
            f.violation(
                field(".effect"),
                format!(
                    "{:?} is not a taint effect; use one of {}",
                    t.effect,
                    TAINT_EFFECTS.join(", ")
                ),
            );
        }
        if let Some(j) = taints[..i]
            .iter()
            .position(|o| o.key == t.key && o.effect == t.effect)
        {
            f.violation(
                field(""),
                format!(
                    "repeats key {:?} with effect {:?} of taints[{j}]; taints must be unique by key and effect",
                    t.key, t.effect
                ),
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(extra: serde_json::Value) -> Worker {
        let mut w =
            json!({"name": "p", "machine": {"type": "m6i.large"}, "minimum": 1, "maximum": 1});
        for (k, v) in extra.as_object().unwrap() {
            w[k] = v.clone();
        }
        serde_json::from_value(w).unwrap()
    }

    fn findings(w: &Worker) -> ValidationOutcome {
        let mut f = ValidationOutcome::default();
        check(
            Item {
                list: "spec.shoot.provider.workers",
                index: 0,
            },
            w,
            &mut f,
        );
        f
    }

    #[test]
    fn well_formed_labels_annotations_and_taints_pass() {
        let w = pool(json!({
            "labels": {"example.com/pool": "gpu", "tier": "", "Team_A": "x.y"},
            "annotations": {"Example.com/Note": "anything goes: here"},
            "taints": [
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                {"key": "nvidia.com/gpu", "effect": "NoExecute"},
                {"key": "dedicated", "value": "", "effect": "PreferNoSchedule"}
            ]
        }));
        let f = findings(&w);
        assert!(f.is_allowed(), "{:?}", f.violations);
    }

    #[test]
    fn malformed_ones_are_refused_naming_the_field() {
        let w = pool(json!({
            "labels": {"bad key": "ok", "good": "bad value", "-x": "a/b"},
            "annotations": {"a/b/c": ""},
            "taints": [
                {"key": "a b", "value": "x y", "effect": "NoWhere"},
                {"key": RESERVED_TAINT_KEY, "effect": "NoSchedule"},
                {"key": RESERVED_TAINT_KEY, "effect": "NoSchedule"},
                {"key": "k", "effect": ""}
            ]
        }));
        let f = findings(&w);
        let at = |field: &str| {
            f.violations
                .iter()
                .filter(|v| v.field == format!("spec.shoot.provider.workers[0].{field}"))
                .count()
        };
        assert_eq!(at("labels[bad key]"), 1, "{:?}", f.violations);
        assert_eq!(at("labels[good]"), 1);
        assert_eq!(at("labels[-x]"), 2);
        assert_eq!(at("annotations[a/b/c]"), 1);
        assert_eq!(at("taints[0].key"), 1);
        assert_eq!(at("taints[0].value"), 1);
        assert_eq!(at("taints[0].effect"), 1);
        assert_eq!(at("taints[1].key"), 1);
        assert_eq!(at("taints[2].key"), 1);
        assert_eq!(at("taints[2]"), 1);
        assert_eq!(at("taints[3].effect"), 1);
        assert_eq!(f.violations.len(), 12);
        let effect = f
            .violations
            .iter()
            .find(|v| v.field.ends_with("taints[0].effect"))
            .unwrap();
        assert!(
            effect
                .message
                .contains("use one of NoSchedule, PreferNoSchedule, NoExecute"),
            "{effect}"
        );
        let key = f
            .violations
            .iter()
            .find(|v| v.field.ends_with("labels[bad key]"))
            .unwrap();
        assert!(key.message.contains("e.g. example.com/pool"), "{key}");
    }

    #[test]
    fn annotations_are_bounded_in_size() {
        // Kubernetes' limit, 256 KiB of keys and values: "a" and 262,143 bytes fit exactly.
        let at_limit = pool(json!({"annotations": {"a": "x".repeat(262_143)}}));
        assert!(findings(&at_limit).is_allowed());
        let w = pool(json!({"annotations": {"a": "x".repeat(262_144)}}));
        let f = findings(&w);
        assert_eq!(f.violations.len(), 1, "{:?}", f.violations);
        assert_eq!(
            f.violations[0].to_string(),
            "spec.shoot.provider.workers[0].annotations: keys and values take 262145 bytes; Kubernetes allows at most 262144"
        );
    }
}
