//! `kim-webhook validate -f FILE...`: the webhook's rules offline, for KEB developers and CI.
//! Each Runtime is defaulted and then validated as on CREATE; each GardenerCluster validated.

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::Path;

use kim_shared::api::{GardenerCluster, Runtime};
use kim_shared::config::KimConfig;
use serde_yaml_ng::Value;

use crate::defaulter::Defaulter;
use crate::request::{AdmissionContext, Object};
use crate::validator::Validator;

/// Outcome of checking a set of files.
#[derive(Debug, Default)]
pub struct Report {
    /// Human-readable lines.
    pub text: String,
    /// Objects checked.
    pub checked: usize,
    /// Objects with violations (or not decodable).
    pub invalid: usize,
    /// Files that could not be read or parsed as YAML.
    pub unreadable: usize,
}

impl Report {
    /// 0 all valid, 1 some invalid, 2 some input unreadable.
    pub fn exit_code(&self) -> u8 {
        if self.unreadable > 0 {
            2
        } else if self.invalid > 0 {
            1
        } else {
            0
        }
    }
}

fn read(path: &Path) -> std::io::Result<String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        Ok(s)
    } else {
        std::fs::read_to_string(path)
    }
}

/// Checks every document of every file.
pub fn validate_files(
    files: &[impl AsRef<Path>],
    config: &KimConfig,
    show_defaulted: bool,
) -> Report {
    let ctx = AdmissionContext {
        config: Some(std::sync::Arc::new(config.clone())),
        ..AdmissionContext::default()
    };
    let mut report = Report::default();
    for file in files {
        let file = file.as_ref();
        let name = file.display().to_string();
        let text = match read(file) {
            Ok(t) => t,
            Err(e) => {
                report.unreadable += 1;
                let _ = writeln!(report.text, "ERROR {name}: cannot read: {e}");
                continue;
            }
        };
        validate_text(&name, &text, &ctx, show_defaulted, &mut report);
    }
    let _ = writeln!(
        report.text,
        "{} object(s) checked, {} invalid",
        report.checked, report.invalid
    );
    report
}

/// Checks a YAML stream.
pub fn validate_text(
    name: &str,
    text: &str,
    ctx: &AdmissionContext,
    show_defaulted: bool,
    report: &mut Report,
) {
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value = match <Value as serde::Deserialize>::deserialize(doc) {
            Ok(v) => v,
            Err(e) => {
                report.unreadable += 1;
                let _ = writeln!(report.text, "ERROR {name}#{i}: not valid YAML: {e}");
                return;
            }
        };
        check_value(&format!("{name}#{i}"), value, ctx, show_defaulted, report);
    }
}

fn check_value(at: &str, value: Value, ctx: &AdmissionContext, show: bool, report: &mut Report) {
    if value.is_null() {
        return;
    }
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if kind == "List" {
        if let Some(items) = value.get("items").and_then(Value::as_sequence) {
            for (j, item) in items.iter().enumerate() {
                check_value(&format!("{at}.items[{j}]"), item.clone(), ctx, show, report);
            }
        }
        return;
    }
    let group_ok =
        api_version == format!("{}/{}", kim_shared::api::GROUP, kim_shared::api::VERSION);
    match (group_ok, kind.as_str()) {
        (true, "Runtime") => {
            let default: fn(&AdmissionContext, &mut Runtime) =
                |ctx, runtime| ctx.apply_defaults(runtime, None, &Default::default());
            check::<Runtime>(at, value, ctx, Some(default), show, report)
        }
        (true, "GardenerCluster") => check::<GardenerCluster>(at, value, ctx, None, show, report),
        _ => {
            report.checked += 1;
            report.invalid += 1;
            let _ = writeln!(
                report.text,
                "FAIL {at}: {api_version} {kind}: not an object this command checks (expected {}/{} Runtime or GardenerCluster)",
                kim_shared::api::GROUP,
                kim_shared::api::VERSION
            );
        }
    }
}

/// Checks one object of type `T`, defaulted first by `default` when given.
fn check<T>(
    at: &str,
    value: Value,
    ctx: &AdmissionContext,
    default: Option<fn(&AdmissionContext, &mut T)>,
    show: bool,
    report: &mut Report,
) where
    T: Object,
    AdmissionContext: Validator<T>,
{
    report.checked += 1;
    let kind = T::kind(&()).to_string();
    // As the webhook: the status is not judged (`kubectl get -o yaml` output carries one).
    let mut value = value;
    if let Value::Mapping(fields) = &mut value {
        fields.remove("status");
    }
    let mut obj: T = match serde_path_to_error::deserialize(value) {
        Ok(o) => o,
        Err(e) => {
            report.invalid += 1;
            let _ = writeln!(
                report.text,
                "FAIL {at} {kind}\n  - {}: does not match the {kind} schema: {}",
                e.path(),
                e.inner()
            );
            return;
        }
    };
    let meta = obj.meta();
    let id = format!(
        "{}/{}",
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default()
    );
    if let Some(default) = default {
        default(ctx, &mut obj);
    }
    let findings = ctx.validate_create(&obj).presentable();
    if findings.violations.is_empty() {
        let _ = writeln!(report.text, "OK   {at} {kind} {id}");
    } else {
        report.invalid += 1;
        let _ = writeln!(report.text, "FAIL {at} {kind} {id}");
        for v in &findings.violations {
            let _ = writeln!(report.text, "  - {}: {}", v.field, v.message);
        }
    }
    for w in &findings.warnings {
        let _ = writeln!(report.text, "  warning: {w}");
    }
    if show && let Ok(y) = serde_yaml_ng::to_string(&obj) {
        let _ = writeln!(report.text, "---\n{y}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn repo() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map(PathBuf::from)
            .unwrap_or_default()
    }

    fn ctx() -> AdmissionContext {
        let cfg = KimConfig::load(&kim_shared::config::ConfigPaths::new(
            repo().join("deploy/config/converter_config.json"),
        ))
        .expect("example config");
        AdmissionContext {
            config: Some(std::sync::Arc::new(cfg)),
            ..AdmissionContext::default()
        }
    }

    fn sample() -> Value {
        let text = std::fs::read_to_string(repo().join("config/samples/runtime-aws.yaml"))
            .expect("sample readable");
        serde_yaml_ng::from_str(&text).expect("yaml")
    }

    #[test]
    fn stream_with_valid_invalid_and_foreign_documents() {
        let good = serde_yaml_ng::to_string(&sample()).expect("yaml");
        let mut bad = sample();
        bad["spec"]["shoot"]["provider"]["workers"][0]["name"] = "Bad_Name".into();
        let bad = serde_yaml_ng::to_string(&bad).expect("yaml");
        let text = format!(
            "{good}---\n{bad}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\n---\n"
        );
        let mut report = Report::default();
        validate_text("s.yaml", &text, &ctx(), false, &mut report);
        assert_eq!(report.checked, 3, "{}", report.text);
        assert_eq!(report.invalid, 2, "{}", report.text);
        assert_eq!(report.exit_code(), 1);
        assert!(
            report
                .text
                .contains("OK   s.yaml#0 Runtime kcp-system/dbfd7ad6-b625-4bf2-9718-c1dbf22a7b94"),
            "{}",
            report.text
        );
        assert!(
            report.text.contains("FAIL s.yaml#1 Runtime"),
            "{}",
            report.text
        );
        assert!(
            report
                .text
                .contains("  - spec.shoot.provider.workers[0].name: "),
            "{}",
            report.text
        );
        assert!(
            report.text.contains("FAIL s.yaml#2: v1 ConfigMap"),
            "{}",
            report.text
        );
    }

    #[test]
    fn list_items_and_schema_errors_name_the_field() {
        let mut wrong = sample();
        wrong["spec"]["shoot"]["enforceSeedLocation"] = "true".into();
        let list = serde_yaml_ng::to_string(
            &serde_yaml_ng::from_str::<Value>(&format!(
                "apiVersion: v1\nkind: List\nitems:\n- {}\n",
                serde_json::to_string(&wrong).expect("json")
            ))
            .expect("yaml"),
        )
        .expect("yaml");
        let mut report = Report::default();
        validate_text("l.yaml", &list, &ctx(), false, &mut report);
        assert_eq!(report.invalid, 1, "{}", report.text);
        assert!(report.text.contains("l.yaml#0.items[0]"), "{}", report.text);
        assert!(
            report
                .text
                .contains("spec.shoot.enforceSeedLocation: does not match the Runtime schema"),
            "{}",
            report.text
        );
    }

    #[test]
    fn the_status_is_not_judged_as_by_the_webhook() {
        let mut stored = sample();
        stored["status"] = serde_yaml_ng::from_str(
            "{state: Ready, conditions: [{type: Provisioned, status: 'True', reason: Edited, message: '', lastTransitionTime: '2024-01-01T00:00:00.1234567891Z'}]}",
        )
        .expect("yaml");
        let mut report = Report::default();
        let text = serde_yaml_ng::to_string(&stored).expect("yaml");
        validate_text("s.yaml", &text, &ctx(), false, &mut report);
        assert_eq!(report.invalid, 0, "{}", report.text);
        assert_eq!(report.checked, 1, "{}", report.text);
    }

    #[test]
    fn unreadable_input_is_exit_code_2() {
        let mut report = Report::default();
        validate_text("x.yaml", "a: [unclosed", &ctx(), false, &mut report);
        assert_eq!(report.exit_code(), 2, "{}", report.text);
        let cfg = ctx().config.map(|c| (*c).clone()).expect("config");
        let report = validate_files(&[PathBuf::from("/nonexistent/file.yaml")], &cfg, false);
        assert_eq!(report.exit_code(), 2);
        assert!(report.text.contains("cannot read"), "{}", report.text);
    }
}
