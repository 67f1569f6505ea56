//! The manifests of `deploy/` as an operator applies them (`make deploy`): kustomize renders
//! them, the real kube-apiserver accepts every object by server-side dry-run (schema, defaults,
//! webhook configuration validation), the containers' arguments are flags the binaries accept,
//! every file a flag names is mounted from the ConfigMap that holds it, and the Pods pass the
//! `restricted` Pod Security Standard the namespace enforces.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, Result, bail, ensure};
use clap::Parser;
use kim_tests::controller::{create, sample_runtime, start_controller, wait_state};
use kim_tests::testenv::TestEnv;
use serde_json::Value;

/// `kubectl kustomize deploy/`, as documents.
fn render(env: &TestEnv) -> Result<Vec<Value>> {
    render_dir(env, &kim_tests::testenv::repo_root().join("deploy"))
}

/// `kubectl kustomize <dir>`, as documents.
fn render_dir(env: &TestEnv, dir: &std::path::Path) -> Result<Vec<Value>> {
    let kubectl = env
        .binaries()
        .kubectl
        .clone()
        .context("kubectl next to kube-apiserver (make testenv-bins builds it)")?;
    let out = std::process::Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()?;
    ensure!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(kim_tests::fixtures::yaml_documents(&String::from_utf8(
        out.stdout,
    )?)?)
}

/// `to` relative to the directory `from` (kustomize refuses absolute resource paths).
fn relative(from: &std::path::Path, to: &std::path::Path) -> Result<std::path::PathBuf> {
    let (from, to) = (from.canonicalize()?, to.canonicalize()?);
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut rel = std::path::PathBuf::new();
    for _ in from.components().skip(common) {
        rel.push("..");
    }
    rel.extend(to.components().skip(common));
    Ok(rel)
}

/// Every webhook's selected namespace and Service namespace, and the namespace flag of the
/// controller, as rendered.
fn webhook_namespaces(docs: &[Value]) -> Result<(BTreeSet<String>, String)> {
    let mut seen = BTreeSet::new();
    let mut hooks = 0;
    for d in docs.iter().filter(|d| {
        matches!(
            d["kind"].as_str(),
            Some("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration")
        )
    }) {
        for w in d["webhooks"].as_array().into_iter().flatten() {
            hooks += 1;
            let selected = w["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                .as_str()
                .with_context(|| {
                    format!(
                        "{}: webhook {} selects no namespace by name",
                        kind_name(d),
                        w["name"]
                    )
                })?;
            seen.insert(format!("selector={selected}"));
            let service = w["clientConfig"]["service"]["namespace"]
                .as_str()
                .with_context(|| {
                    format!("{}: webhook {} calls no Service", kind_name(d), w["name"])
                })?;
            seen.insert(format!("service={service}"));
        }
    }
    ensure!(hooks >= 4, "only {hooks} webhooks rendered");
    let controller = deployment(docs, "infrastructure-manager-infrastructure-manager")?;
    let flag = args(controller)?
        .into_iter()
        .find_map(|a| a.strip_prefix("--namespace=").map(str::to_owned))
        .context("controller has no --namespace flag")?;
    // The kubelet expands `$(VAR)` from the container's env; the Pod's namespace is the
    // Deployment's.
    let resolved = match flag.strip_prefix("$(").and_then(|v| v.strip_suffix(')')) {
        Some(var) => {
            let env = controller["spec"]["template"]["spec"]["containers"][0]["env"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|e| e["name"] == var)
                .with_context(|| format!("controller env has no {var}"))?;
            ensure!(
                env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace",
                "{var} is not the Pod's namespace: {env}"
            );
            controller["metadata"]["namespace"]
                .as_str()
                .context("controller Deployment has no namespace")?
                .to_owned()
        }
        None => flag,
    };
    Ok((seen, resolved))
}

fn kind_name(v: &Value) -> String {
    format!(
        "{}/{}",
        v["kind"].as_str().unwrap_or("?"),
        v["metadata"]["name"].as_str().unwrap_or("?")
    )
}

fn deployment<'a>(docs: &'a [Value], name: &str) -> Result<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == name)
        .with_context(|| format!("Deployment {name} in deploy/"))
}

/// The first container's args of a Deployment.
fn args(d: &Value) -> Result<Vec<String>> {
    d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .context("containers[0].args")?
        .iter()
        .map(|a| {
            a.as_str()
                .map(str::to_owned)
                .context("an arg that is not a string")
        })
        .collect()
}

/// Checks that the file a `--flag=/path` names is mounted from a ConfigMap volume that holds
/// a key of that file name.
fn file_is_mounted(docs: &[Value], d: &Value, flag: &str) -> Result<()> {
    let args = args(d)?;
    let path = args
        .iter()
        .find_map(|a| a.strip_prefix(&format!("{flag}=")))
        .with_context(|| format!("{} has no {flag}", kind_name(d)))?;
    let (dir, file) = path.rsplit_once('/').context("an absolute path")?;
    let pod = &d["spec"]["template"]["spec"];
    let mount = pod["containers"][0]["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["mountPath"] == dir)
        .with_context(|| format!("{}: no volume mounted at {dir}", kind_name(d)))?;
    let volume = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == mount["name"])
        .with_context(|| format!("volume {}", mount["name"]))?;
    let cm_name = volume["configMap"]["name"]
        .as_str()
        .with_context(|| format!("volume {} is not a ConfigMap", mount["name"]))?;
    let cm = docs
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == cm_name)
        .with_context(|| format!("ConfigMap {cm_name} (kustomize renames generated ones)"))?;
    ensure!(
        cm["data"].get(file).is_some(),
        "ConfigMap {cm_name} has no key {file}, which {flag} names"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_renders_and_the_apiserver_accepts_every_object() -> Result<()> {
    let env = TestEnv::shared().await?;
    let docs = render(env)?;
    let mounts = check_mounted_files_readable(&docs)?;
    ensure!(
        mounts >= 3,
        "only {mounts} mounted files checked: is the check broken?"
    );
    let kinds: BTreeMap<String, usize> = docs.iter().fold(BTreeMap::new(), |mut m, d| {
        *m.entry(d["kind"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
        m
    });
    for want in [
        "Namespace",
        "ConfigMap",
        "Deployment",
        "Service",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "PodDisruptionBudget",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "NetworkPolicy",
    ] {
        ensure!(
            kinds.contains_key(want),
            "deploy/ renders no {want}: {kinds:?}"
        );
    }

    // Every container runs a release image: the registry name and the workspace version, the
    // same on every node (a moving tag would let replicas run different builds).
    for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
        for c in d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let image = c["image"].as_str().unwrap_or_default();
            ensure!(
                image
                    .starts_with("europe-docker.pkg.dev/kyma-project/prod/infrastructure-manager-")
                    && image.ends_with(&format!(":{}", env!("CARGO_PKG_VERSION"))),
                "{} runs image {image:?}, not a release image tagged {}",
                kind_name(d),
                env!("CARGO_PKG_VERSION")
            );
        }
    }

    // The binaries' own parsers take the containers' arguments.
    let controller = deployment(&docs, "infrastructure-manager-infrastructure-manager")?;
    let mut argv = vec!["kim-controller".to_owned()];
    argv.extend(args(controller)?);
    // Upstream's command line: no subcommand, and no flag the controller would only warn about.
    let parsed = match kim_controller::cli::parse(&argv)
        .map_err(|e| anyhow::anyhow!("controller Deployment args: {e}"))?
    {
        kim_controller::cli::Invocation::Run(run) => run,
        other => anyhow::bail!("the controller Deployment runs {other:?}"),
    };
    ensure!(
        argv.get(1).is_some_and(|a| a.starts_with('-')),
        "the controller Deployment passes upstream's flags without a subcommand: {argv:?}"
    );
    ensure!(
        parsed.ignored_flags.is_empty(),
        "the controller Deployment passes flags without effect: {:?}",
        parsed.ignored_flags
    );
    ensure!(
        parsed.leader_elect,
        "2 replicas or rollouts need --leader-elect"
    );
    file_is_mounted(&docs, controller, "--converter-config-filepath")?;
    file_is_mounted(&docs, controller, "--gardener-kubeconfig-path").or_else(|e| {
        // The Gardener kubeconfig comes from a Secret operations create, not from deploy/.
        if e.to_string().contains("is not a ConfigMap") {
            Ok(())
        } else {
            Err(e)
        }
    })?;

    let webhook = deployment(&docs, "infrastructure-manager-webhook")?;
    let mut argv = vec!["kim-webhook".to_owned()];
    argv.extend(args(webhook)?);
    kim_webhook::cli::Cli::try_parse_from(&argv)
        .map_err(|e| anyhow::anyhow!("webhook Deployment args: {e}"))?;
    file_is_mounted(&docs, webhook, "--converter-config-filepath")?;
    // Least privilege: the webhook's Gardener identity only reads CloudProfiles, so it mounts
    // none of the controller's Secrets (whose Gardener kubeconfig may create and delete Shoots).
    let secrets_of = |d: &Value| -> BTreeSet<String> {
        d["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["secret"]["secretName"].as_str().map(str::to_owned))
            .collect()
    };
    let shared: Vec<String> = secrets_of(webhook)
        .intersection(&secrets_of(controller))
        .cloned()
        .collect();
    ensure!(
        shared.is_empty(),
        "the webhook mounts the controller's Secrets {shared:?}"
    );
    ensure!(
        secrets_of(webhook).contains("infrastructure-manager-webhook-gardener"),
        "the webhook mounts no Gardener kubeconfig of its own: {:?}",
        secrets_of(webhook)
    );

    // NetworkPolicies select a Deployment's pods and name ports its container has.
    for np in docs.iter().filter(|d| d["kind"] == "NetworkPolicy") {
        let selector = &np["spec"]["podSelector"]["matchLabels"];
        let d = docs
            .iter()
            .find(|d| {
                d["kind"] == "Deployment"
                    && selector.as_object().is_some_and(|m| {
                        m.iter()
                            .all(|(k, v)| d["spec"]["template"]["metadata"]["labels"][k] == *v)
                    })
            })
            .with_context(|| format!("{} selects no Deployment's pods", kind_name(np)))?;
        let ports: BTreeSet<&str> = d["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["name"].as_str())
            .collect();
        for rule in np["spec"]["ingress"].as_array().into_iter().flatten() {
            for port in rule["ports"].as_array().into_iter().flatten() {
                if let Some(name) = port["port"].as_str() {
                    ensure!(
                        ports.contains(name),
                        "{} names port {name}, which {} does not have ({ports:?})",
                        kind_name(np),
                        kind_name(d)
                    );
                }
            }
        }
    }

    // Server-side dry run of everything the test apiserver has types for (the Prometheus
    // Operator's ServiceMonitor and PrometheusRule are not installed there).
    let (skipped, applied): (Vec<Value>, Vec<Value>) = docs.into_iter().partition(|d| {
        d["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("monitoring.coreos.com/"))
    });
    ensure!(
        skipped.len() == 4,
        "expected a ServiceMonitor and a PrometheusRule for each component, got {:?}",
        skipped.iter().map(kind_name).collect::<Vec<_>>()
    );
    let client = env.kcp_client().await?;
    // Dry-run objects need their namespace to exist for real.
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let mut ns = k8s_openapi::api::core::v1::Namespace::default();
    ns.metadata.name = Some("kcp-system".into());
    match namespaces
        .create(&kube::api::PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let discovery = kube::discovery::Discovery::new(client.clone())
        .run()
        .await?;
    let mut refused = Vec::new();
    for doc in &applied {
        let gvk = kube::api::GroupVersionKind::try_from(&serde_json::from_value::<
            kube::api::TypeMeta,
        >(doc.clone())?)?;
        let (ar, caps) = discovery
            .resolve_gvk(&gvk)
            .with_context(|| format!("the apiserver has no type for {}", kind_name(doc)))?;
        let api: kube::Api<kube::api::DynamicObject> =
            if caps.scope == kube::discovery::Scope::Namespaced {
                let ns = doc["metadata"]["namespace"]
                    .as_str()
                    .with_context(|| format!("{} has no namespace", kind_name(doc)))?;
                kube::Api::namespaced_with(client.clone(), ns, &ar)
            } else {
                kube::Api::all_with(client.clone(), &ar)
            };
        let name = doc["metadata"]["name"].as_str().context("metadata.name")?;
        let pp = kube::api::PatchParams::apply("deploy-manifests-e2e").dry_run();
        if let Err(e) = api.patch(name, &pp, &kube::api::Patch::Apply(doc)).await {
            refused.push(format!("{}: {e}", kind_name(doc)));
        }
    }
    if !refused.is_empty() {
        bail!(
            "the apiserver refuses deploy/ objects:\n{}",
            refused.join("\n")
        );
    }
    Ok(())
}

/// GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The metric names of a PromQL expression: its identifiers outside label matchers `{..}`,
/// ranges `[..]` and `by (..)`/`without (..)` label lists, other than functions (followed by
/// `(`), keywords, number exponents (`1e-9`) and Prometheus' own `up`.
fn metric_names(expr: &str) -> Vec<String> {
    const KEYWORDS: &[&str] = &[
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "up",
        "sum",
        "min",
        "max",
        "avg",
        "count",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
        "group",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut in_grouping = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            ')' if in_grouping => in_grouping = false,
            _ => {}
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
        let next = chars[j..].iter().find(|c| !c.is_whitespace());
        i = j;
        if depth > 0 || in_grouping {
            continue;
        }
        if word == "by" || word == "without" {
            in_grouping = true;
            continue;
        }
        if next == Some(&'(') || KEYWORDS.contains(&word.as_str()) {
            continue;
        }
        out.push(word);
    }
    out
}

/// Checks the alerts of `rule_file`: each links a runbook section of `doc_file` that exists,
/// and each metric its expression uses is in `metrics_text` (Prometheus text format). Returns
/// the number of alerts.
fn check_alerts(rule_file: &str, doc_file: &str, metrics_text: &str) -> Result<usize> {
    let root = kim_tests::testenv::repo_root();
    let rules: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(root.join(rule_file))?)?;
    let doc = std::fs::read_to_string(root.join(doc_file))?;
    let anchors: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect();
    let mut metrics = BTreeSet::new();
    let mut alerts = 0;
    for group in rules["spec"]["groups"].as_array().context("spec.groups")? {
        for rule in group["rules"].as_array().context("rules")? {
            alerts += 1;
            let name = rule["alert"].as_str().context("alert name")?;
            let runbook = rule["annotations"]["runbook"]
                .as_str()
                .with_context(|| format!("alert {name} has no runbook"))?;
            let (file, section) = runbook
                .split_once('#')
                .with_context(|| format!("alert {name}: runbook {runbook} has no #section"))?;
            ensure!(
                file == doc_file,
                "alert {name}: runbook in {file}, not {doc_file}"
            );
            ensure!(
                anchors.contains(section),
                "alert {name}: {doc_file} has no heading for #{section}; headings: {anchors:?}"
            );
            metrics.extend(metric_names(rule["expr"].as_str().context("expr")?));
        }
    }
    ensure!(
        alerts >= 5 && metrics.len() >= 3,
        "{rule_file}: {alerts} alerts, metrics {metrics:?}"
    );
    let exposed = |m: &str| {
        let family = ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| m.strip_suffix(suffix))
            .unwrap_or(m);
        metrics_text.lines().any(|l| {
            l.starts_with(&format!("{m}{{"))
                || l.starts_with(&format!("{m} "))
                || l.starts_with(&format!("# TYPE {m} "))
                || l.starts_with(&format!("# TYPE {family} "))
        })
    };
    let missing: Vec<&String> = metrics.iter().filter(|m| !exposed(m)).collect();
    ensure!(
        missing.is_empty(),
        "{rule_file}: alerts use metrics that are not exposed: {missing:?}"
    );
    Ok(alerts)
}

/// The controller's alerts link existing runbook sections of `docs/operations.md` and use only
/// metrics a running controller exposes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn controller_alerts_use_exposed_metrics_and_link_existing_runbooks() -> Result<()> {
    // A controller that has provisioned one Runtime and holds one RuntimeAccess (of a runtime
    // without an admin kubeconfig: it waits): every family is registered, and the state
    // gauges, which have no series without an object, have one.
    let env = TestEnv::shared().await?;
    let ns = env.namespace("alerts").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let id = format!("rt-{}", &ns[ns.len().saturating_sub(6)..]);
    create(env, &sample_runtime(&ns, &id)?).await?;
    wait_state(
        env,
        &ns,
        &id,
        kim_shared::api::RuntimeState::Ready,
        std::time::Duration::from_secs(120),
    )
    .await?;
    let access: kim_shared::api::runtime_access::RuntimeAccess = serde_json::from_value(
        serde_json::json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
            "kind": "RuntimeAccess",
            "metadata": {"name": "waiting", "namespace": ns},
            "spec": {
                "runtimeId": "no-such-runtime",
                "serviceAccount": {"name": "reader", "namespace": "apps"},
                "role": {"namespace": "apps", "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
            }
        }),
    )?;
    kube::Api::namespaced(env.kcp_client().await?, &ns)
        .create(&kube::api::PostParams::default(), &access)
        .await?;
    kim_tests::controller::eventually(
        "the RuntimeAccess state series",
        std::time::Duration::from_secs(60),
        || async {
            Ok(ctl
                .metrics_text()
                .await?
                .contains("infrastructure_manager_im_runtime_access_state{"))
        },
    )
    .await?;
    let text = ctl.metrics_text().await?;
    ctl.stop().await;
    check_alerts(
        "deploy/controller/prometheusrule.yaml",
        "docs/operations.md",
        &text,
    )?;
    Ok(())
}

/// A kustomize overlay that moves the deployment to another namespace moves the webhooks'
/// namespace selector with it: validation keeps applying where the controller reconciles.
#[tokio::test(flavor = "multi_thread")]
async fn a_namespace_override_moves_the_webhooks_with_the_controller() -> Result<()> {
    let env = TestEnv::shared().await?;
    let expect = |ns: &str| -> BTreeSet<String> {
        [format!("selector={ns}"), format!("service={ns}")].into()
    };
    let (seen, controller_ns) = webhook_namespaces(&render(env)?)?;
    ensure!(
        controller_ns == "kcp-system",
        "controller namespace {controller_ns}"
    );
    ensure!(seen == expect("kcp-system"), "deploy/: {seen:?}");

    let overlay = tempfile::tempdir()?;
    let base = relative(
        overlay.path(),
        &kim_tests::testenv::repo_root().join("deploy"),
    )?;
    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: other\nresources:\n  - {}\n",
            base.display()
        ),
    )?;
    let (seen, controller_ns) = webhook_namespaces(&render_dir(env, overlay.path())?)?;
    ensure!(
        controller_ns == "other",
        "overlay: controller namespace {controller_ns}"
    );
    ensure!(
        seen == expect("other"),
        "overlay with namespace: other: the webhooks still select or call {seen:?}"
    );
    Ok(())
}

/// The webhook's alerts link existing runbook sections of `docs/webhook.md` and use only
/// metrics the webhook registers.
#[test]
fn webhook_alerts_use_registered_metrics_and_link_existing_runbooks() -> Result<()> {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = kim_webhook::metrics::Metrics::new(&mut registry);
    // One admission, as after the first request: label families print samples only then.
    metrics
        .latency
        .get_or_create(&kim_webhook::metrics::EndpointLabels {
            webhook: "validate",
            kind: "Runtime",
        })
        .observe(0.0001);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    check_alerts(
        "deploy/webhook/prometheusrule.yaml",
        "docs/webhook.md",
        &text,
    )?;
    Ok(())
}

#[test]
fn metric_names_finds_metrics_not_functions_labels_or_keywords() {
    let expr = r#"histogram_quantile(0.99, sum by (le) (rate(a_seconds_bucket{x="y"}[10m]))) > 0.25
        and min(b_ready) == 0 or sum(rate(c_total{code=~"5.."}[5m])) / clamp_min(d, 1e-9) > 0.2
        unless absent(up{job="j"} == 1)"#;
    assert_eq!(
        metric_names(expr),
        ["a_seconds_bucket", "b_ready", "c_total", "d"]
    );
}

/// Every Deployment's Pod passes the `restricted` Pod Security Standard that
/// `deploy/namespace.yaml` enforces: the real apiserver's PodSecurity admission judges a Pod
/// made from each template (server-side dry run in a namespace labelled as that one). A
/// Deployment is not judged itself, only its Pods, so the dry run of the Deployments above
/// would not notice a missing security context.
#[tokio::test]
async fn pod_templates_pass_the_restricted_pod_security_standard() -> Result<()> {
    let env = TestEnv::shared().await?;
    let docs = render(env)?;
    let namespace_doc = docs
        .iter()
        .find(|d| d["kind"] == "Namespace")
        .context("deploy/ renders a Namespace")?;
    let enforced = &namespace_doc["metadata"]["labels"]["pod-security.kubernetes.io/enforce"];
    ensure!(
        enforced == "restricted",
        "deploy/namespace.yaml enforces {enforced}, not restricted"
    );
    let client = env.kcp_client().await?;
    let ns = env.namespace("pod-security").await?;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let labels = serde_json::json!({"metadata": {"labels": namespace_doc["metadata"]["labels"]}});
    namespaces
        .patch(
            &ns,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&labels),
        )
        .await?;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, &ns);
    let deployments: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Deployment").collect();
    ensure!(
        deployments.len() == 2,
        "expected the controller's and the webhook's Deployment, got {}",
        deployments.len()
    );
    let mut refused = Vec::new();
    for d in deployments {
        let template = &d["spec"]["template"];
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": d["metadata"]["name"], "labels": template["metadata"]["labels"]},
            "spec": template["spec"],
        }))?;
        let pp = kube::api::PostParams {
            dry_run: true,
            ..Default::default()
        };
        if let Err(e) = pods.create(&pp, &pod).await {
            refused.push(format!("{}: {e}", kind_name(d)));
        }
    }
    ensure!(
        refused.is_empty(),
        "Pod Security (restricted) refuses:\n{}",
        refused.join("\n")
    );
    Ok(())
}

/// Whether a process with `uid` and the groups `gids` can read a file owned by `owner:group`
/// with `mode`, by the classic Unix rule (owner bits, else group bits, else other bits).
fn readable(uid: i64, gids: &BTreeSet<i64>, (owner, group, mode): (i64, i64, i64)) -> bool {
    if uid == owner {
        mode & 0o400 != 0
    } else if gids.contains(&group) {
        mode & 0o040 != 0
    } else {
        mode & 0o004 != 0
    }
}

/// How a kubelet lays out a file of a Secret, ConfigMap or projected volume: owned by root; with
/// the Pod's `fsGroup`, group-owned by it and made group-readable (the volume is read-only, so
/// the kubelet ORs 0440 into the mode); the mode is the item's, else the volume's `defaultMode`,
/// else 0644.
fn kubelet_file(volume: &Value, item_mode: Option<i64>, fs_group: Option<i64>) -> (i64, i64, i64) {
    let source = ["secret", "configMap", "projected"]
        .iter()
        .find_map(|k| volume.get(*k))
        .unwrap_or(&Value::Null);
    let mut mode = item_mode
        .or_else(|| source["defaultMode"].as_i64())
        .unwrap_or(0o644);
    let group = match fs_group {
        Some(g) => {
            mode |= 0o440;
            g
        }
        None => 0,
    };
    (0, group, mode)
}

/// Every file a container mounts from a Secret, ConfigMap or projected volume is readable by the
/// container's user and groups, as a real kubelet lays the files out (the test apiserver runs
/// no kubelet, so the layout rules are applied here).
fn check_mounted_files_readable(docs: &[Value]) -> Result<usize> {
    let mut checked = 0;
    for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
        let pod = &d["spec"]["template"]["spec"];
        let pod_sc = &pod["securityContext"];
        let fs_group = pod_sc["fsGroup"].as_i64();
        let volumes = pod["volumes"].as_array().cloned().unwrap_or_default();
        for c in pod["containers"].as_array().into_iter().flatten() {
            let sc = &c["securityContext"];
            let uid = sc["runAsUser"]
                .as_i64()
                .or_else(|| pod_sc["runAsUser"].as_i64())
                .context("runAsUser is set (the images' user is not known here)")?;
            let mut gids: BTreeSet<i64> = sc["runAsGroup"]
                .as_i64()
                .or_else(|| pod_sc["runAsGroup"].as_i64())
                .into_iter()
                .collect();
            gids.extend(fs_group);
            gids.extend(
                pod_sc["supplementalGroups"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_i64),
            );
            for m in c["volumeMounts"].as_array().into_iter().flatten() {
                let Some(volume) = volumes.iter().find(|v| v["name"] == m["name"]) else {
                    bail!("{}: mount {} has no volume", kind_name(d), m["name"]);
                };
                if !["secret", "configMap", "projected"]
                    .iter()
                    .any(|k| volume.get(*k).is_some())
                {
                    continue;
                }
                let items: Vec<Option<i64>> = volume
                    .get("secret")
                    .or_else(|| volume.get("configMap"))
                    .and_then(|s| s["items"].as_array())
                    .map(|items| items.iter().map(|i| i["mode"].as_i64()).collect())
                    .unwrap_or_else(|| vec![None]);
                for item_mode in items {
                    let file = kubelet_file(volume, item_mode, fs_group);
                    ensure!(
                        readable(uid, &gids, file),
                        "{} container {}: files of volume {} at {} are {:o} owned by {}:{} and \
                         not readable by uid {uid} groups {gids:?} (set the Pod's fsGroup or a \
                         group-readable defaultMode)",
                        kind_name(d),
                        c["name"],
                        m["name"],
                        m["mountPath"],
                        file.2,
                        file.0,
                        file.1,
                    );
                    checked += 1;
                }
            }
        }
    }
    Ok(checked)
}

#[test]
fn the_kubelet_file_layout_rules_decide_as_a_kubelet_would() {
    let gids = BTreeSet::from([65532]);
    let secret_0400 = serde_json::json!({"secret": {"defaultMode": 0o400}});
    // Root-owned 0400 without fsGroup: unreadable for a non-root user.
    assert!(!readable(
        65532,
        &gids,
        kubelet_file(&secret_0400, None, None)
    ));
    // The same with fsGroup: group-owned and group-readable.
    assert!(readable(
        65532,
        &gids,
        kubelet_file(&secret_0400, None, Some(65532))
    ));
    // A ConfigMap without a mode: 0644, readable by others.
    let cm = serde_json::json!({"configMap": {"name": "x"}});
    assert!(readable(
        65532,
        &BTreeSet::new(),
        kubelet_file(&cm, None, None)
    ));
    // An item mode of 0600 without fsGroup: unreadable.
    assert!(!readable(
        65532,
        &gids,
        kubelet_file(&cm, Some(0o600), None)
    ));
}

/// The admission port's rule of the webhook's NetworkPolicy as rendered.
fn admission_port_rule(docs: &[Value]) -> Result<(Value, Value)> {
    let np = docs
        .iter()
        .find(|d| {
            d["kind"] == "NetworkPolicy"
                && d["metadata"]["name"] == "infrastructure-manager-webhook"
        })
        .context("the webhook's NetworkPolicy")?;
    let rule = np["spec"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| {
            r["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["port"] == "https")
        })
        .cloned()
        .context("an ingress rule for the https port")?;
    Ok((np.clone(), rule))
}

/// Server-side dry run of `doc` (namespaced, in its namespace, which is created if missing).
async fn dry_run_apply(env: &TestEnv, doc: &Value) -> Result<()> {
    let client = env.kcp_client().await?;
    let ns_name = doc["metadata"]["namespace"].as_str().context("namespace")?;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let mut ns = k8s_openapi::api::core::v1::Namespace::default();
    ns.metadata.name = Some(ns_name.into());
    match namespaces
        .create(&kube::api::PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let np: kube::Api<k8s_openapi::api::networking::v1::NetworkPolicy> =
        kube::Api::namespaced(client, ns_name);
    let name = doc["metadata"]["name"].as_str().context("metadata.name")?;
    np.patch(
        name,
        &kube::api::PatchParams::apply("deploy-manifests-e2e").dry_run(),
        &kube::api::Patch::Apply(doc),
    )
    .await?;
    Ok(())
}

/// `deploy/` leaves the admission port open (the apiserver cannot be named in general); the
/// optional component admits only the CIDR an overlay sets, and without one the apiserver
/// refuses the NetworkPolicy instead of silently opening or closing the port.
#[tokio::test(flavor = "multi_thread")]
async fn the_apiserver_only_component_admits_only_the_given_cidr() -> Result<()> {
    let env = TestEnv::shared().await?;
    let (_, open) = admission_port_rule(&render(env)?)?;
    ensure!(
        open.get("from").is_none(),
        "deploy/ alone restricts the admission port: {open}"
    );

    let root = kim_tests::testenv::repo_root();
    let overlay = tempfile::tempdir()?;
    let base = relative(overlay.path(), &root.join("deploy"))?;
    let component = relative(
        overlay.path(),
        &root.join("deploy/components/webhook-ingress-from-apiserver"),
    )?;
    let kustomization = |patches: &str| {
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\ncomponents:\n  - {}\n{patches}",
            base.display(),
            component.display()
        )
    };
    std::fs::write(overlay.path().join("kustomization.yaml"), kustomization(""))?;
    let (np, _) = admission_port_rule(&render_dir(env, overlay.path())?)?;
    let refused = dry_run_apply(env, &np).await;
    ensure!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("cidr")),
        "without a CIDR the NetworkPolicy must be refused: {refused:?}"
    );

    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        kustomization(
            "patches:\n  - target: {kind: NetworkPolicy, name: infrastructure-manager-webhook}\n    patch: |-\n      - op: replace\n        path: /spec/ingress/0/from/0/ipBlock/cidr\n        value: 10.250.0.10/32\n",
        ),
    )?;
    let docs = render_dir(env, overlay.path())?;
    let (np, rule) = admission_port_rule(&docs)?;
    ensure!(
        rule["from"] == serde_json::json!([{"ipBlock": {"cidr": "10.250.0.10/32"}}]),
        "only the apiserver's CIDR reaches the admission port: {rule}"
    );
    let admin_rules: Vec<&Value> = np["spec"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["ports"][0]["port"] == "admin")
        .collect();
    ensure!(
        admin_rules.len() == 1 && admin_rules[0]["from"][0]["namespaceSelector"].is_object(),
        "the admin port's rule is unchanged: {admin_rules:?}"
    );
    dry_run_apply(env, &np).await?;
    Ok(())
}
