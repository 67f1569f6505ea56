//! The dashboards (`deploy/dashboards/`) and alerts (`deploy/*/prometheusrule.yaml`) on a real
//! Prometheus: Debian's `prometheus` package, which `make prometheus-bins` unpacks into the
//! cache outside the repository (`KIM_PROMETHEUS_DIR`).
//!
//! - `promtool check rules` accepts both rule groups and `promtool test rules`
//!   (`tests/prometheus/*.test.yaml`) makes every alert fire on its runbook's condition and stay
//!   quiet otherwise;
//! - the dashboards' ConfigMaps are their JSON files, labelled for Grafana's sidecar;
//! - Prometheus scrapes a running controller and webhook (every second) while Runtimes (one
//!   provisioned to Ready and deleted, one Failed, one whose Shoot Gardener refuses with a
//!   message in quotes), GardenerClusters (one in Error), two
//!   RuntimeAccesses (one rotating its token, one failing), admissions and denials, Gardener
//!   503s and 429s, and waits in the controller's Gardener rate limiter happen; afterwards every
//!   dashboard query and every alert expression evaluates without error, every dashboard query
//!   returns series with a number (not only NaN) over the scenario, Prometheus evaluated every
//!   rule without error, and `promtool check metrics` accepts both `/metrics`. With
//!   `KIM_DASHBOARD_DATA=<file>` the dashboards' series are also written there as JSON, which
//!   `tests/prometheus/render.py` draws (`make dashboards-picture`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use kim_shared::api::{GardenerCluster, RuntimeState};
use kim_tests::controller::{
    Wiring, create, eventually, sample_runtime, set_simulator_fault, shoot_name, wait_state,
};
use kim_tests::faultproxy::{ApiFault, FaultProxy, Rule};
use kim_tests::testenv::process::{ManagedProcess, free_port, log_tail};
use kim_tests::testenv::{TestEnv, repo_root};
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The components with alerts: (folder under deploy/, runbook document).
const COMPONENTS: [&str; 2] = ["controller", "webhook"];

/// What the dashboards' `$__rate_interval` becomes: Grafana's is four scrape intervals at
/// least; the test scrapes every second.
const RATE_INTERVAL: &str = "15s";

/// Families with camelCase label names (`runtimeId`, ...): upstream's, kept for compatibility
/// with upstream's dashboards and alerts, and the RuntimeAccess state, named as they are so
/// that it joins them on `runtimeId`. `promtool check metrics` reports them, and only that
/// report is accepted for them.
const UPSTREAM_LABEL_NAMES: &[&str] = &[
    "infrastructure_manager_im_runtime_state",
    "infrastructure_manager_im_gardener_clusters_state",
    "infrastructure_manager_im_kubeconfig_expiration",
    "infrastructure_manager_im_runtime_access_state",
];

/// `prometheus` and `promtool`.
struct Tools {
    prometheus: PathBuf,
    promtool: PathBuf,
}

/// The binaries from `KIM_PROMETHEUS_DIR`, else the folder `make prometheus-bins` fills, else
/// `PATH`. Fails naming how to install them.
fn tools() -> Result<Tools> {
    let in_dir = |dir: &Path| {
        let t = Tools {
            prometheus: dir.join("prometheus"),
            promtool: dir.join("promtool"),
        };
        (t.prometheus.is_file() && t.promtool.is_file()).then_some(t)
    };
    if let Some(dir) = std::env::var_os("KIM_PROMETHEUS_DIR") {
        let dir = PathBuf::from(dir);
        return in_dir(&dir).with_context(|| {
            format!(
                "KIM_PROMETHEUS_DIR={} holds no prometheus and promtool: run `make prometheus-bins` (unpacks Debian's prometheus package) or point it at a folder with both",
                dir.display()
            )
        });
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_default()
        .join("kim-tools/prometheus/usr/bin");
    if let Some(t) = in_dir(&cache) {
        return Ok(t);
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        if let Some(t) = in_dir(&dir) {
            return Ok(t);
        }
    }
    bail!(
        "prometheus and promtool are not installed: run `make prometheus-bins` (unpacks Debian's prometheus package into {}; `make test` does it first), `apt-get install prometheus`, or set KIM_PROMETHEUS_DIR",
        cache.display()
    )
}

/// Runs promtool; fails with its output unless it succeeds.
fn promtool(tools: &Tools, dir: &Path, args: &[&str], stdin: Option<&str>) -> Result<String> {
    use std::io::Write as _;
    let mut child = Command::new(&tools.promtool)
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", tools.promtool.display()))?;
    if let Some(mut pipe) = child.stdin.take() {
        pipe.write_all(stdin.unwrap_or_default().as_bytes())?;
    }
    let out = child.wait_with_output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success(),
        "promtool {} failed ({}):\n{text}",
        args.join(" "),
        out.status
    );
    Ok(text)
}

/// `promtool check metrics` of a `/metrics` text: its complaints, less the accepted ones about
/// [`UPSTREAM_LABEL_NAMES`] (printed). Fails when promtool cannot parse the text.
fn lint_metrics(tools: &Tools, text: &str) -> Result<Vec<String>> {
    use std::io::Write as _;
    let mut child = Command::new(&tools.promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", tools.promtool.display()))?;
    if let Some(mut pipe) = child.stdin.take() {
        pipe.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // 0: clean; 3: lint complaints; anything else: the text could not be read.
    ensure!(
        matches!(out.status.code(), Some(0 | 3)),
        "promtool check metrics failed ({}):\n{report}",
        out.status
    );
    let mut problems = Vec::new();
    for line in report.lines().filter(|l| !l.trim().is_empty()) {
        let accepted = UPSTREAM_LABEL_NAMES.iter().any(|family| {
            line == format!(
                "{family} label names should be written in 'snake_case' not 'camelCase'"
            )
        });
        if accepted {
            println!("promtool check metrics: {line} (upstream's label names, kept)");
        } else {
            problems.push(line.to_owned());
        }
    }
    Ok(problems)
}

/// The PrometheusRule of `deploy/<component>/` as a plain Prometheus rule file (its `spec`).
fn rule_file(component: &str) -> Result<String> {
    let path = repo_root().join(format!("deploy/{component}/prometheusrule.yaml"));
    let rule: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path)?)?;
    ensure!(
        rule["kind"] == "PrometheusRule",
        "{}: not a PrometheusRule",
        path.display()
    );
    Ok(serde_yaml_ng::to_string(&rule["spec"])?)
}

/// (alert name, expression) of every alert of a component.
fn alerts(component: &str) -> Result<Vec<(String, String)>> {
    let spec: Value = serde_yaml_ng::from_str(&rule_file(component)?)?;
    let mut out = Vec::new();
    for group in spec["groups"].as_array().context("groups")? {
        for rule in group["rules"].as_array().context("rules")? {
            out.push((
                rule["alert"].as_str().context("alert")?.to_owned(),
                rule["expr"].as_str().context("expr")?.trim().to_owned(),
            ));
        }
    }
    Ok(out)
}

/// Writes both rule files into `dir` (`<component>-rules.yaml`, as the unit tests name them).
fn write_rule_files(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for c in COMPONENTS {
        let name = format!("{c}-rules.yaml");
        std::fs::write(dir.join(&name), rule_file(c)?)?;
        names.push(name);
    }
    Ok(names)
}

#[test]
fn alerts_pass_promtool_check_rules_and_fire_only_on_their_runbook_conditions() -> Result<()> {
    let tools = tools()?;
    let dir = tempfile::tempdir()?;
    let rules = write_rule_files(dir.path())?;
    let mut args = vec!["check", "rules"];
    args.extend(rules.iter().map(String::as_str));
    println!("{}", promtool(&tools, dir.path(), &args, None)?);
    for c in COMPONENTS {
        let name = format!("{c}-alerts.test.yaml");
        let text = std::fs::read_to_string(repo_root().join("tests/prometheus").join(&name))?;
        std::fs::write(dir.path().join(&name), &text)?;
        println!(
            "{}",
            promtool(&tools, dir.path(), &["test", "rules", &name], None)?
        );

        // Every alert is shown firing at least once and quiet at least once.
        let tests: Value = serde_yaml_ng::from_str(&text)?;
        let (mut fires, mut quiet) = (BTreeSet::new(), BTreeSet::new());
        for t in tests["tests"].as_array().context("tests")? {
            for a in t["alert_rule_test"].as_array().into_iter().flatten() {
                let alert = a["alertname"].as_str().context("alertname")?.to_owned();
                if a["exp_alerts"].as_array().is_some_and(|e| !e.is_empty()) {
                    fires.insert(alert);
                } else {
                    quiet.insert(alert);
                }
            }
        }
        for (alert, _) in alerts(c)? {
            ensure!(
                fires.contains(&alert),
                "tests/prometheus/{name}: no test makes {alert} fire"
            );
            ensure!(
                quiet.contains(&alert),
                "tests/prometheus/{name}: no test shows {alert} quiet"
            );
        }
    }
    Ok(())
}

/// One query of a dashboard.
#[derive(Debug)]
struct Query {
    dashboard: String,
    panel: String,
    expr: String,
}

/// `deploy/dashboards/*.json` by file name.
fn dashboard_files() -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(repo_root().join("deploy/dashboards"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json") {
            let name = path
                .file_name()
                .context("file name")?
                .to_string_lossy()
                .into_owned();
            out.insert(name, std::fs::read_to_string(&path)?);
        }
    }
    ensure!(!out.is_empty(), "no dashboards in deploy/dashboards");
    Ok(out)
}

/// Every query of every dashboard, checked for the shape Grafana needs.
fn dashboard_queries() -> Result<Vec<Query>> {
    let mut out = Vec::new();
    let mut uids = BTreeSet::new();
    for (file, text) in dashboard_files()? {
        let d: Value = serde_json::from_str(&text).with_context(|| format!("{file}: JSON"))?;
        let title = d["title"].as_str().context("title")?.to_owned();
        let uid = d["uid"].as_str().context("uid")?;
        ensure!(uids.insert(uid.to_owned()), "{file}: uid {uid} used twice");
        ensure!(
            d["templating"]["list"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v["name"] == "datasource" && v["type"] == "datasource"),
            "{file}: no datasource variable"
        );
        for panel in d["panels"].as_array().context("panels")? {
            if panel["type"] == "row" {
                continue;
            }
            let name = panel["title"].as_str().context("panel title")?.to_owned();
            let targets = panel["targets"].as_array().context("targets")?;
            ensure!(!targets.is_empty(), "{file}: panel {name} has no query");
            for t in targets {
                ensure!(
                    t["datasource"]["uid"] == "${datasource}"
                        && panel["datasource"]["uid"] == "${datasource}",
                    "{file}: panel {name} does not use the datasource variable"
                );
                out.push(Query {
                    dashboard: title.clone(),
                    panel: name.clone(),
                    expr: t["expr"].as_str().context("expr")?.to_owned(),
                });
            }
        }
    }
    Ok(out)
}

#[tokio::test]
async fn dashboard_configmaps_are_the_json_files_labelled_for_the_grafana_sidecar() -> Result<()> {
    let env = TestEnv::shared().await?;
    let kubectl = env
        .binaries()
        .kubectl
        .clone()
        .context("kubectl next to kube-apiserver (make testenv-bins builds it)")?;
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(repo_root().join("deploy"))
        .output()?;
    ensure!(
        out.status.success(),
        "kubectl kustomize deploy/: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = kim_tests::fixtures::yaml_documents(&String::from_utf8(out.stdout)?)?;
    let mut seen = BTreeMap::new();
    for d in docs.iter().filter(|d| {
        d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"].is_string()
    }) {
        let name = d["metadata"]["name"].as_str().context("name")?;
        ensure!(
            d["metadata"]["labels"]["grafana_dashboard"] == "1",
            "{name}: grafana_dashboard must be \"1\""
        );
        for (key, value) in d["data"].as_object().context("data")? {
            ensure!(
                seen.insert(key.clone(), value.as_str().unwrap_or_default().to_owned())
                    .is_none(),
                "{key} in two ConfigMaps"
            );
        }
    }
    let files = dashboard_files()?;
    ensure!(
        seen.keys().collect::<Vec<_>>() == files.keys().collect::<Vec<_>>(),
        "dashboard ConfigMaps hold {:?}, deploy/dashboards has {:?} (deploy/dashboards/kustomization.yaml)",
        seen.keys(),
        files.keys()
    );
    for (file, text) in &files {
        ensure!(
            seen[file] == *text,
            "the ConfigMap of {file} differs from the file"
        );
    }
    ensure!(dashboard_queries()?.len() >= 20);
    Ok(())
}

/// The vector selectors of a PromQL expression (`name` or `name{matchers}`), without
/// functions, aggregation labels, keywords, strings, numbers and durations.
fn selectors(expr: &str) -> Vec<String> {
    const KEYWORDS: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "inf",
        "nan",
        // Aggregations, also when `by (...)` comes before the parenthesis.
        "sum",
        "min",
        "max",
        "avg",
        "count",
        "group",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut skip_group = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        if c == '[' {
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            continue;
        }
        if skip_group && c == ')' {
            skip_group = false;
        }
        let starts_word = (c.is_ascii_alphabetic() || c == '_')
            && (i == 0 || !(chars[i - 1].is_ascii_alphanumeric() || chars[i - 1] == '.'));
        if !starts_word {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len()
            && (chars[j].is_ascii_alphanumeric() || chars[j] == '_' || chars[j] == ':')
        {
            j += 1;
        }
        let word: String = chars[i..j].iter().collect();
        let mut k = j;
        while k < chars.len() && chars[k].is_whitespace() {
            k += 1;
        }
        let next = chars.get(k).copied();
        i = j;
        if skip_group {
            continue;
        }
        if KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
            if [
                "by",
                "without",
                "on",
                "ignoring",
                "group_left",
                "group_right",
            ]
            .contains(&word.as_str())
                && next == Some('(')
            {
                skip_group = true;
            }
            continue;
        }
        if next == Some('(') {
            continue;
        }
        if next == Some('{') {
            let mut end = k;
            while end < chars.len() && chars[end] != '}' {
                end += 1;
            }
            let matchers: String = chars[k..=end.min(chars.len() - 1)].iter().collect();
            out.push(format!("{word}{matchers}"));
            i = end + 1;
        } else {
            out.push(word);
        }
    }
    out
}

#[test]
fn selectors_are_vector_selectors_with_their_matchers() {
    let expr = r#"histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="y",z=~"5..|t"}[10m]))) > 0.25
        and min(b_ready) == 0 or sum(rate(c_total{code=~"5.."}[5m])) / clamp_min(d, 1e-9) > 0.2
        unless absent(up{job=~".*c.*"} == 1) - on (inst) group_left(l) time() < 7 * 86400"#;
    assert_eq!(
        selectors(expr),
        [
            r#"a_bucket{x="y",z=~"5..|t"}"#,
            "b_ready",
            r#"c_total{code=~"5.."}"#,
            "d",
            r#"up{job=~".*c.*"}"#,
        ]
    );
}

/// Whether a series of a range query has a value that is a number (`histogram_quantile` of
/// zero rates is NaN).
fn has_number(series: &Value) -> bool {
    series["values"].as_array().into_iter().flatten().any(|v| {
        v[1].as_str()
            .is_some_and(|x| x.parse::<f64>().is_ok_and(f64::is_finite))
    })
}

/// A URL query value, percent-encoded.
fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A plain-HTTP GET of `path` from `addr`, with an `Accept` header if given; returns status
/// and body.
async fn http(addr: &str, path: &str, accept: Option<&str>) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{accept}\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no HTTP status")?;
    Ok((status, body.to_owned()))
}

/// A Prometheus started for this test, stopped when dropped.
struct Prometheus {
    addr: String,
    /// Stopped when dropped.
    _process: ManagedProcess,
    start: f64,
}

impl Prometheus {
    /// Scrapes `controller` and `webhook` (host:port) every second under the jobs their
    /// ServiceMonitors give (the Service names), and evaluates both rule files every second.
    async fn start(tools: &Tools, dir: &Path, controller: &str, webhook: &str) -> Result<Self> {
        let rules = write_rule_files(dir)?;
        let config = json!({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": rules,
            "scrape_configs": [
                {"job_name": "infrastructure-manager-controller-metrics",
                 "static_configs": [{"targets": [controller]}]},
                {"job_name": "infrastructure-manager-webhook-metrics",
                 "static_configs": [{"targets": [webhook]}]},
            ],
        });
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, serde_yaml_ng::to_string(&config)?)?;
        let checked = promtool(
            tools,
            dir,
            &["check", "config", &config_path.to_string_lossy()],
            None,
        )?;
        ensure!(checked.contains("SUCCESS"), "{checked}");
        let addr = format!("127.0.0.1:{}", free_port()?);
        let log = dir.join("prometheus.log");
        let mut process = ManagedProcess::spawn(
            "prometheus",
            &tools.prometheus,
            &[
                format!("--config.file={}", config_path.display()),
                format!("--storage.tsdb.path={}", dir.join("data").display()),
                format!("--web.listen-address={addr}"),
                "--log.level=warn".into(),
            ],
            &[],
            &log,
        )?;
        let mut ready = false;
        for _ in 0..300 {
            if let Err(e) = process.check_running() {
                bail!("prometheus exited: {e}; log:\n{}", log_tail(&log, 30));
            }
            if matches!(http(&addr, "/-/ready", None).await, Ok((200, _))) {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ensure!(
            ready,
            "prometheus not ready within 30 s; log:\n{}",
            log_tail(&log, 30)
        );
        let start = now();
        Ok(Self {
            addr,
            _process: process,
            start,
        })
    }

    /// `GET /api/v1/<path>?<query>`; the `data` of a successful answer.
    async fn api(&self, path: &str, query: &[(&str, String)]) -> Result<Value> {
        let query: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{k}={}", form_encode(v)))
            .collect();
        let (status, text) = http(
            &self.addr,
            &format!("/api/v1/{path}?{}", query.join("&")),
            None,
        )
        .await?;
        let v: Value = serde_json::from_str(&text)
            .with_context(|| format!("HTTP {status} from /api/v1/{path}: {text}"))?;
        ensure!(
            status == 200 && v["status"] == "success",
            "{} {}",
            v["errorType"],
            v["error"]
        );
        Ok(v["data"].clone())
    }

    /// The series `expr` returns at one-second steps since Prometheus started.
    async fn range(&self, expr: &str) -> Result<Vec<Value>> {
        let data = self
            .api(
                "query_range",
                &[
                    ("query", expr.to_owned()),
                    ("start", format!("{:.3}", self.start)),
                    ("end", format!("{:.3}", now())),
                    ("step", "1".to_owned()),
                ],
            )
            .await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// Whether the last scrape of every target succeeded.
    async fn targets_up(&self) -> Result<bool> {
        let up = self.api("query", &[("query", "up".to_owned())]).await?;
        let results = up["result"].as_array().cloned().unwrap_or_default();
        Ok(results.len() == 2 && results.iter().all(|r| r["value"][1] == "1"))
    }
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// The kim-webhook binary: `KIM_WEBHOOK_BIN`, or the one built next to this test.
fn webhook_bin() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("KIM_WEBHOOK_BIN") {
        return Ok(PathBuf::from(p));
    }
    // This test runs from target/<profile>/deps/.
    let bin = std::env::current_exe()?
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("kim-webhook"))
        .unwrap_or_default();
    ensure!(
        bin.exists(),
        "{} is missing: build it first (`cargo build -p kim-webhook`, part of `make test`) or set KIM_WEBHOOK_BIN",
        bin.display()
    );
    Ok(bin)
}

/// The kim-webhook binary serving namespace `ns` as deployed: its own CA in a Secret, the
/// caBundle written into the webhook configurations of `deploy/webhook/webhooks.yaml` (renamed
/// and scoped to `ns`). Returns the process and its admin address, once the apiserver
/// enforces both configurations.
async fn start_webhook(env: &TestEnv, ns: &str, dir: &Path) -> Result<(ManagedProcess, String)> {
    let client = env.kcp_client().await?;
    let (port, admin) = (free_port()?, free_port()?);
    let url = format!("https://127.0.0.1:{port}");
    let configs = kim_tests::webhook::configurations(ns, &url, &url);
    let names = kim_tests::webhook::names(ns);
    for cfg in &configs {
        let kind = cfg["kind"].as_str().context("kind")?;
        let ar = kube::discovery::ApiResource {
            group: "admissionregistration.k8s.io".into(),
            version: "v1".into(),
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        };
        let obj: DynamicObject = serde_json::from_value(cfg.clone())?;
        Api::<DynamicObject>::all_with(client.clone(), &ar)
            .patch(
                obj.metadata.name.as_deref().context("name")?,
                &PatchParams::apply("kim-e2e").force(),
                &Patch::Apply(&obj),
            )
            .await?;
    }
    let kubeconfig = env.write_kubeconfigs(dir)?[0].clone();
    let config = kim_tests::fixtures::write_converter_config(
        &dir.join("config"),
        kim_tests::fixtures::PROJECT_NAME,
    )?;
    let log = dir.join("kim-webhook.log");
    let process = ManagedProcess::spawn(
        "kim-webhook",
        &webhook_bin()?,
        &[
            "serve".into(),
            format!("--converter-config-filepath={}", config.display()),
            format!("--listen-addr=127.0.0.1:{port}"),
            format!("--admin-addr=127.0.0.1:{admin}"),
            format!("--namespace={ns}"),
            format!("--cert-secret={}", names.secret),
            "--cert-ip-addresses=127.0.0.1".into(),
            format!("--mutating-configs={}", names.mutating),
            format!("--validating-configs={}", names.validating),
            "--bundle-propagation=1s".into(),
            "--cert-check-interval=1s".into(),
            format!("--audit-log-path={}", dir.join("audit.log").display()),
            "--log-format=text".into(),
        ],
        &[("KUBECONFIG", &kubeconfig.to_string_lossy())],
        &log,
    )?;
    // Enforced once an invalid Runtime is denied by our webhook and a valid one admitted
    // (both dry runs).
    let runtimes: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &kim_tests::webhook::runtime_resource());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut bad = kim_tests::webhook::valid_runtime("probe", ns);
    bad["spec"]["shoot"]["provider"]["workers"][0]["name"] = json!("Bad_Name");
    let bad: DynamicObject = serde_json::from_value(bad)?;
    let good: DynamicObject =
        serde_json::from_value(kim_tests::webhook::valid_runtime("probe", ns))?;
    let mut last = String::new();
    for _ in 0..600 {
        match runtimes.create(&dry, &bad).await {
            Err(kube::Error::Api(s))
                if s.message
                    .contains("vruntime.infrastructuremanager.kyma-project.io") =>
            {
                match runtimes.create(&dry, &good).await {
                    Ok(_) => return Ok((process, format!("127.0.0.1:{admin}"))),
                    Err(e) => last = format!("valid probe: {e}"),
                }
            }
            Err(e) => last = e.to_string(),
            Ok(_) => last = "invalid probe admitted".into(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!(
        "kim-webhook not enforced within 60 s; last: {last}; log:\n{}",
        log_tail(&log, 30)
    )
}

/// Removes the webhook configurations of `ns` (with `failurePolicy: Fail` and no server
/// they would block the namespace).
async fn remove_webhook_configurations(env: &TestEnv, ns: &str) -> Result<()> {
    let client = env.kcp_client().await?;
    let names = kim_tests::webhook::names(ns);
    for (kind, name) in [
        ("MutatingWebhookConfiguration", names.mutating),
        ("ValidatingWebhookConfiguration", names.validating),
    ] {
        let ar = kube::discovery::ApiResource {
            group: "admissionregistration.k8s.io".into(),
            version: "v1".into(),
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        };
        let _ = Api::<DynamicObject>::all_with(client.clone(), &ar)
            .delete(&name, &DeleteParams::default())
            .await;
    }
    Ok(())
}

/// Waits until the controller's `/metrics` has a line starting with `prefix` and containing
/// every one of `parts`.
async fn wait_metric(addr: std::net::SocketAddr, prefix: &str, parts: &[&str]) -> Result<()> {
    eventually(
        &format!("{prefix} {parts:?} in the controller's /metrics"),
        Duration::from_secs(90),
        || async move {
            let text = kim_tests::controller::metrics_text(addr).await?;
            Ok(text
                .lines()
                .any(|l| l.starts_with(prefix) && parts.iter().all(|p| l.contains(p))))
        },
    )
    .await
}

/// Waits until the controller's counter `metric` (full sample name) with `label` is at least 1
/// (its series exist at 0 from the start).
async fn wait_count(addr: std::net::SocketAddr, metric: &str, label: &str) -> Result<()> {
    eventually(
        &format!("{metric}{{{label}}} >= 1 in the controller's /metrics"),
        Duration::from_secs(90),
        || async move {
            let text = kim_tests::controller::metrics_text(addr).await?;
            Ok(kim_tests::controller::metric_sum(&text, metric, &[label]) >= 1.0)
        },
    )
    .await
}

/// What happens while Prometheus watches: Runtimes provisioned (one Failed, one refused by
/// Gardener with a message that quotes, one deleted),
/// admissions allowed and denied, a GardenerCluster in Error, a RuntimeAccess, Gardener faults.
async fn scenario(
    env: &TestEnv,
    ns: &str,
    metrics: std::net::SocketAddr,
    proxy: &FaultProxy,
) -> Result<String> {
    let kcp = env.kcp_client().await?;
    let suffix = &ns[ns.len().saturating_sub(5)..];
    let (ready_id, failed_id) = (format!("rt-ok-{suffix}"), format!("rt-failed-{suffix}"));

    // A Runtime that stops on a fatal Gardener error, and one that becomes Ready. Its Shoot's
    // operations take a few seconds, so that Pending and Terminating last several scrapes.
    set_simulator_fault(
        env,
        &shoot_name(&failed_id),
        Some("failed:ERR_INFRA_UNAUTHORIZED"),
    )
    .await?;
    set_simulator_fault(env, &shoot_name(&ready_id), Some("slow:2s")).await?;
    create(env, &sample_runtime(ns, &failed_id)?).await?;
    create(env, &sample_runtime(ns, &ready_id)?).await?;

    // A denied admission: an invalid Runtime.
    let mut invalid = serde_json::to_value(sample_runtime(ns, &format!("rt-bad-{suffix}"))?)?;
    invalid["spec"]["shoot"]["provider"]["workers"][0]["name"] = json!("Bad_Name");
    let runtimes: Api<DynamicObject> =
        Api::namespaced_with(kcp.clone(), ns, &kim_tests::webhook::runtime_resource());
    let refused = runtimes
        .create(&PostParams::default(), &serde_json::from_value(invalid)?)
        .await;
    ensure!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.message.contains("vruntime")),
        "an invalid Runtime was not denied by the webhook: {refused:?}"
    );

    // A GardenerCluster whose Shoot does not exist: Error.
    let missing = format!("rt-missing-{suffix}");
    let gc: GardenerCluster = serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "GardenerCluster",
        "metadata": {"name": missing, "namespace": ns, "labels": {
            "kyma-project.io/runtime-id": missing,
            "kyma-project.io/shoot-name": format!("no-shoot-{suffix}"),
        }},
        "spec": {
            "shoot": {"name": format!("no-shoot-{suffix}")},
            "kubeconfig": {"secret": {"name": format!("kubeconfig-{missing}"), "namespace": ns, "key": "config"}}
        }
    }))?;
    Api::<GardenerCluster>::namespaced(kcp.clone(), ns)
        .create(&PostParams::default(), &gc)
        .await?;

    wait_state(
        env,
        ns,
        &failed_id,
        RuntimeState::Failed,
        Duration::from_secs(120),
    )
    .await?;
    wait_state(
        env,
        ns,
        &ready_id,
        RuntimeState::Ready,
        Duration::from_secs(120),
    )
    .await?;
    wait_metric(
        metrics,
        "infrastructure_manager_im_gardener_clusters_state{",
        &[&missing, "state=\"Error\""],
    )
    .await?;

    // A RuntimeAccess for the Ready Runtime: a token kubeconfig issued through its cluster.
    let apps = env.shoot_namespace("prom").await?;
    let access: kim_shared::api::runtime_access::RuntimeAccess = serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "RuntimeAccess",
        "metadata": {"name": "pod-reader", "namespace": ns},
        "spec": {
            "runtimeId": ready_id,
            "serviceAccount": {"name": "pod-reader", "namespace": apps},
            "role": {"namespace": apps, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
            "tokenExpirationSeconds": 600
        }
    }))?;
    let accesses: Api<kim_shared::api::runtime_access::RuntimeAccess> =
        Api::namespaced(kcp.clone(), ns);
    accesses.create(&PostParams::default(), &access).await?;
    eventually("RuntimeAccess Ready", Duration::from_secs(90), || async {
        Ok(accesses
            .get("pod-reader")
            .await?
            .status
            .is_some_and(|s| s.state.as_deref() == Some("Ready")))
    })
    .await?;
    // With --access-rotation-ratio=0.01 its 600 s token is rotated after 6 s.
    wait_count(
        metrics,
        "infrastructure_manager_im_runtime_access_tokens_total",
        "result=\"rotated\"",
    )
    .await?;
    // One whose ServiceAccount namespace does not exist in the runtime: no token, retried.
    let mut broken = serde_json::to_value(&access)?;
    broken["metadata"]["name"] = json!("no-namespace");
    broken["spec"]["serviceAccount"] =
        json!({"name": "reader", "namespace": format!("missing-{suffix}")});
    broken["spec"]["role"]["namespace"] = json!(format!("missing-{suffix}"));
    accesses
        .create(&PostParams::default(), &serde_json::from_value(broken)?)
        .await?;
    wait_count(
        metrics,
        "infrastructure_manager_im_runtime_access_tokens_total",
        "result=\"failed\"",
    )
    .await?;
    // One whose revocation is refused: its account in the runtime lost the request's marks,
    // and its Secret does not record the account's UID (written before that record).
    let mut leaky = serde_json::to_value(&access)?;
    leaky["metadata"]["name"] = json!("leaky");
    leaky["spec"]["serviceAccount"]["name"] = json!("leaky");
    accesses
        .create(&PostParams::default(), &serde_json::from_value(leaky)?)
        .await?;
    eventually(
        "RuntimeAccess leaky Ready",
        Duration::from_secs(90),
        || async {
            Ok(accesses
                .get("leaky")
                .await?
                .status
                .is_some_and(|s| s.state.as_deref() == Some("Ready")))
        },
    )
    .await?;
    Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(env.shoot_client().await?, &apps)
        .patch(
            "leaky",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                kim_controller::access::shoot::LABEL_RUNTIME_ACCESS_UID: null,
                kim_shared::names::LABEL_MANAGED_BY: null}}})),
        )
        .await?;
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(kcp.clone(), ns)
        .patch(
            "leaky-kubeconfig",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                kim_controller::access::token::ANNOTATION_SERVICE_ACCOUNT_UID: null}}})),
        )
        .await?;
    accesses
        .patch(
            "leaky",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                kim_controller::access::reconcile::ANNOTATION_REVOKE_TOKENS: "true"}}})),
        )
        .await?;
    wait_metric(
        metrics,
        "infrastructure_manager_im_runtime_access_state{",
        &["name=\"leaky\"", "reason=\"RevocationRefused\""],
    )
    .await?;

    // Gardener answers 503 until the health probe reports it, then 429 twice.
    proxy.inject(Rule {
        method: Some("GET".into()),
        path_contains: "/apis/core.gardener.cloud".into(),
        fault: ApiFault::ServerError(503),
        times: None,
    });
    let unhealthy = wait_metric(
        metrics,
        "infrastructure_manager_im_gardener_health{",
        &["status=\"error\"} 1"],
    )
    .await;
    proxy.clear();
    unhealthy?;
    proxy.inject(Rule {
        method: Some("GET".into()),
        path_contains: "/apis/core.gardener.cloud".into(),
        fault: ApiFault::TooManyRequests(1),
        times: Some(2),
    });
    wait_metric(
        metrics,
        "infrastructure_manager_im_gardener_requests_total{",
        &["code=\"429\""],
    )
    .await?;
    wait_metric(
        metrics,
        "infrastructure_manager_im_gardener_health{",
        &["status=\"healthy\"} 1"],
    )
    .await?;

    // A Runtime whose Shoot Gardener refuses: its state series carries Gardener's message,
    // which quotes the Shoot's name, in a label value.
    let refused_id = format!("rt-refused-{suffix}");
    proxy.inject(Rule {
        method: Some("POST".into()),
        // The create alone (the collection), not `shoots/<name>/adminkubeconfig`.
        path_contains: "/shoots?".into(),
        fault: ApiFault::Status {
            code: 422,
            reason: "Invalid".into(),
            message: format!(
                "Shoot.core.gardener.cloud \"{}\" is invalid: spec.provider.workers[0].machine.type: Unsupported value: \"m0\"",
                shoot_name(&refused_id)
            ),
        },
        times: None,
    });
    create(env, &sample_runtime(ns, &refused_id)?).await?;
    wait_metric(
        metrics,
        "infrastructure_manager_im_runtime_state{",
        &[&refused_id, "is invalid", "state=\"Failed\""],
    )
    .await?;

    // Every family has samples now (the deletion below removes some): the text to lint.
    wait_metric(
        metrics,
        "infrastructure_manager_im_kubeconfig_expiration{",
        &[&ready_id],
    )
    .await?;
    let (_, snapshot) = http(&metrics.to_string(), "/metrics", None).await?;

    // Deletion: denied without confirmation, then Terminating until the Shoot is gone.
    let refused = runtimes.delete(&ready_id, &DeleteParams::default()).await;
    ensure!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.message.contains("vruntime")),
        "an unconfirmed deletion was not denied by the webhook: {refused:?}"
    );
    let confirmed = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    runtimes
        .patch(
            &ready_id,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                kim_shared::names::ANNOTATION_DELETION_CONFIRMED: confirmed}}})),
        )
        .await?;
    runtimes.delete(&ready_id, &DeleteParams::default()).await?;
    eventually(
        "the deleted Runtime is gone",
        Duration::from_secs(120),
        || async {
            Ok(matches!(
                runtimes.get(&ready_id).await,
                Err(kube::Error::Api(s)) if s.code == 404
            ))
        },
    )
    .await?;
    Ok(snapshot)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dashboards_and_alerts_return_series_on_a_prometheus_scraping_the_running_components()
-> Result<()> {
    let tools = tools()?;
    let env = TestEnv::shared().await?;
    let ns = env.namespace("prom").await?;
    let dir = tempfile::tempdir()?;

    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let wiring = Wiring {
        gardener: Some(proxy.access_via(env.kcp())),
        ..Wiring::default()
    };
    // Token rotations within the run (0.01 of 600 s), and a Gardener rate limit the probe and
    // the reconciles meet (the harness's default of 200 per second never makes them wait).
    let (mut args, ctl_dir) = kim_tests::controller::controller_args_wired(
        env,
        &ns,
        &[
            "--gardener-health-interval=1s",
            "--access-rotation-ratio=0.01",
        ],
        &wiring,
    )
    .await?;
    args.gardener_ratelimiter_qps = 5;
    args.gardener_ratelimiter_burst = 2;
    // The registry cache on, so that the series its alert reads exist.
    args.registry_cache_config_controller_enabled = true;
    args.registry_cache_listener_port = kim_tests::testenv::process::free_port()?.to_string();
    let ctl = kim_tests::controller::start_with_args(args, ctl_dir).await?;
    let started = start_webhook(env, &ns, dir.path()).await;
    let (webhook, webhook_admin) = match started {
        Ok(w) => w,
        Err(e) => {
            remove_webhook_configurations(env, &ns).await?;
            return Err(e);
        }
    };
    let prometheus =
        Prometheus::start(&tools, dir.path(), &ctl.metrics.to_string(), &webhook_admin).await?;
    eventually(
        "Prometheus scrapes both targets",
        Duration::from_secs(30),
        || async { prometheus.targets_up().await },
    )
    .await?;

    let outcome = scenario(env, &ns, ctl.metrics, &proxy).await;
    // The last states are scraped and the rules evaluated.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let webhook_text = http(&webhook_admin, "/metrics", None).await?.1;
    // Nothing probes /readyz here: the gauge must still say the replica is ready.
    let ready_gauge = webhook_text
        .lines()
        .any(|l| l.trim() == "kim_webhook_ready 1");
    let verdict = match outcome {
        Ok(_) if !ready_gauge => Err(anyhow::anyhow!(
            "kim_webhook_ready is not 1 on a scrape of a ready webhook"
        )),
        Ok(controller_text) => check(&tools, &prometheus, &controller_text, &webhook_text).await,
        Err(e) => Err(e),
    };
    remove_webhook_configurations(env, &ns).await?;
    drop(webhook);
    ctl.stop().await;
    drop(prometheus);
    verdict
}

/// The checks on what Prometheus collected.
async fn check(
    tools: &Tools,
    prometheus: &Prometheus,
    controller_text: &str,
    webhook_text: &str,
) -> Result<()> {
    let mut failures = Vec::new();

    // Every dashboard query.
    let queries = dashboard_queries()?;
    let mut data = serde_json::Map::new();
    for q in &queries {
        let expr = q.expr.replace("$__rate_interval", RATE_INTERVAL);
        match prometheus.range(&expr).await {
            Ok(series) if series.is_empty() => failures.push(format!(
                "dashboard {} / {}: no series for {expr}",
                q.dashboard, q.panel
            )),
            Ok(series) if !series.iter().any(has_number) => failures.push(format!(
                "dashboard {} / {}: only NaN for {expr}",
                q.dashboard, q.panel
            )),
            Ok(series) => {
                data.insert(q.expr.clone(), Value::Array(series));
            }
            Err(e) => failures.push(format!(
                "dashboard {} / {}: {expr}: {e}",
                q.dashboard, q.panel
            )),
        }
    }
    if let Some(path) = std::env::var_os("KIM_DASHBOARD_DATA") {
        let out = json!({"start": prometheus.start, "end": now(), "series": data});
        std::fs::write(&path, serde_json::to_vec(&out)?)
            .with_context(|| format!("writing KIM_DASHBOARD_DATA={}", path.to_string_lossy()))?;
    }

    // Every alert expression, and each of its selectors.
    let mut alert_count = 0;
    for c in COMPONENTS {
        for (alert, expr) in alerts(c)? {
            alert_count += 1;
            if let Err(e) = prometheus.range(&expr).await {
                failures.push(format!("alert {alert}: {expr}: {e}"));
            }
            // Every series an alert reads exists before its first event (created at 0), so
            // its first event shows in `increase()`.
            for sel in selectors(&expr) {
                match prometheus.range(&sel).await {
                    Ok(series) if series.is_empty() => {
                        failures.push(format!("alert {alert}: no series for {sel}"))
                    }
                    Ok(_) => {}
                    Err(e) => failures.push(format!("alert {alert}: {sel}: {e}")),
                }
            }
        }
    }

    // Prometheus evaluated every rule, without error.
    let rules = prometheus.api("rules", &[]).await?;
    let mut evaluated = 0;
    for group in rules["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            evaluated += 1;
            if rule["health"] != "ok" {
                failures.push(format!(
                    "Prometheus evaluates {} with health {}: {}",
                    rule["name"], rule["health"], rule["lastError"]
                ));
            }
        }
    }
    if evaluated != alert_count {
        failures.push(format!(
            "Prometheus loaded {evaluated} rules, the PrometheusRules have {alert_count}"
        ));
    }

    // Every target's last scrape succeeded: one line Prometheus cannot parse (a label value
    // with an unescaped quote) fails the whole scrape.
    let targets = prometheus.api("targets", &[]).await?;
    let active = targets["activeTargets"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if active.len() != COMPONENTS.len() {
        failures.push(format!(
            "Prometheus has {} active targets, expected {}",
            active.len(),
            COMPONENTS.len()
        ));
    }
    for t in active {
        if t["health"] != "up" {
            failures.push(format!(
                "Prometheus's last scrape of {} failed: {}",
                t["scrapeUrl"], t["lastError"]
            ));
        }
    }

    // promtool's lint of both /metrics as a client without OpenMetrics gets them.
    for (component, text) in [("controller", controller_text), ("webhook", webhook_text)] {
        match lint_metrics(tools, text) {
            Ok(problems) => failures.extend(
                problems
                    .into_iter()
                    .map(|p| format!("promtool check metrics, {component}: {p}")),
            ),
            Err(e) => failures.push(format!("/metrics of the {component}: {e}")),
        }
    }

    println!(
        "{} dashboard queries and {alert_count} alert expressions evaluated on Prometheus; {} failures",
        queries.len(),
        failures.len()
    );
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
