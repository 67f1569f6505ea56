//! The end-to-end half of the upstream-compatibility suite: upstream's own sample Runtimes and
//! GardenerCluster, through the real kube-apiserver with our webhook, and through our controller
//! against the real gardener-apiserver.
//!
//! Upstream's files come from `$KIM_UPSTREAM_DIR` (a folder holding `upstream/` and
//! `upstream-2026-07/`; a relative value is taken from the repository root). The target has
//! `test = false`: `make test` runs it when the variable is set and says so when it is not.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use anyhow::{Context as _, Result, ensure};
use kim_shared::api::Runtime;
use kim_tests::controller::{provision_and_delete_samples, read_samples};
use kim_tests::webhook::{
    Options, Webhook, admissible, create_with_only_the_documented_defaults, env, kim_config,
    kubectl, runtime_resource,
};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

/// `$KIM_UPSTREAM_DIR/upstream` (the 2025 baseline). Panics naming the variable when it is unset
/// and the path when the folder is missing: this suite never passes without upstream's files.
fn baseline() -> PathBuf {
    upstream_folder("upstream")
}

/// `$KIM_UPSTREAM_DIR/upstream-2026-07` (upstream today).
fn today() -> PathBuf {
    upstream_folder("upstream-2026-07")
}

fn upstream_folder(folder: &str) -> PathBuf {
    let Some(root) = std::env::var_os("KIM_UPSTREAM_DIR") else {
        panic!(
            "KIM_UPSTREAM_DIR is not set: point it at the folder holding upstream/ and \
             upstream-2026-07/ (.ci/run sets it to the shared folder beside the checkout)"
        )
    };
    let dir = kim_tests::testenv::repo_root().join(root).join(folder);
    assert!(
        dir.is_dir(),
        "KIM_UPSTREAM_DIR: the folder {} is missing",
        dir.display()
    );
    dir
}

/// Upstream's sample Runtime and its nine ADR examples from the baseline, then every one of
/// today's that differs from its baseline copy (the others are the same input).
fn upstream_runtime_files() -> Result<Vec<PathBuf>> {
    let mut files = runtime_files_of(&baseline())?;
    let mut changed = 0;
    for path in runtime_files_of(&today())? {
        let rel = path.strip_prefix(today())?;
        let old = std::fs::read(baseline().join(rel)).ok();
        if old.as_deref() != Some(std::fs::read(&path)?.as_slice()) {
            files.push(path);
            changed += 1;
        }
    }
    // Today's sample Runtime has the ACL and a gVisor pool the baseline's lacks.
    ensure!(
        changed >= 1,
        "no sample of today's upstream differs from the baseline"
    );
    Ok(files)
}

/// The sample Runtime and the ADR examples of one upstream folder.
fn runtime_files_of(root: &std::path::Path) -> Result<Vec<PathBuf>> {
    let mut files = vec![root.join("config/samples/infrastructuremanager_v1_runtime.yaml")];
    let dir = root.join("docs/adr/assets/runtime-examples");
    let mut examples: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("upstream samples in {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    examples.sort();
    files.extend(examples);
    ensure!(
        files.len() >= 10,
        "expected the 10 upstream samples, found {}",
        files.len()
    );
    Ok(files)
}

fn read_yaml(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("upstream file {} missing: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap()
}

/// An upstream sample with the placeholders a real Gardener or apiserver refuses too replaced:
/// - `secretBindingName: "hyperscaler secret"`: a name with a space (not a DNS subdomain) ->
///   `hyperscaler-secret`;
/// - `kubernetes.version: 1.28.7`: below the minimum the example configuration allows and out
///   of Gardener's support -> removed, so the mutating webhook sets the configured default;
/// - `enforceSeedLocation: "true"` (a string, in `sap-converged-cloud.yaml`): the CRD schema
///   says boolean, so the apiserver itself refuses it -> `true`.
fn upstream_admissible(mut rt: Value, name: &str, ns: &str) -> Value {
    if rt.pointer("/spec/shoot/secretBindingName").is_some() {
        rt["spec"]["shoot"]["secretBindingName"] = json!("hyperscaler-secret");
    }
    if let Some(k) = rt
        .pointer_mut("/spec/shoot/kubernetes")
        .and_then(Value::as_object_mut)
    {
        k.remove("version");
    }
    if rt
        .pointer("/spec/shoot/enforceSeedLocation")
        .is_some_and(Value::is_string)
    {
        rt["spec"]["shoot"]["enforceSeedLocation"] = json!(true);
    }
    admissible(rt, name, ns)
}

fn yaml(v: &Value) -> String {
    serde_yaml_ng::to_string(v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_upstream_sample_is_provisioned_and_deleted() -> Result<()> {
    let files = upstream_runtime_files()?;
    let env = kim_tests::testenv::TestEnv::shared().await?;
    provision_and_delete_samples(env, "ctl-upstream", read_samples(&files)?).await
}

#[tokio::test]
async fn every_upstream_sample_is_admitted_with_only_the_documented_defaults() {
    let env = env().await;
    let wh = Webhook::start(env, Options::default()).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.kcp_client().await.unwrap(), &wh.ns, &runtime_resource());
    let cfg = kim_config();
    for (i, path) in upstream_runtime_files().unwrap().iter().enumerate() {
        let what = path.display().to_string();
        let input = upstream_admissible(read_yaml(path), &format!("upstream-{i}"), &wh.ns);
        let expected = create_with_only_the_documented_defaults(&api, &cfg, &what, &input).await;
        assert_ne!(
            input["spec"], expected["spec"],
            "{what}: the defaults must have had something to do"
        );
    }
    let gc =
        read_yaml(&baseline().join("config/samples/infrastructuremanager_v1_gardenercluster.yaml"));
    let (ok, out) = kubectl(
        env,
        &["apply", "-n", &wh.ns, "-f", "-"],
        Some(&yaml(&json!({
            "apiVersion": gc["apiVersion"], "kind": gc["kind"],
            "metadata": {"name": "gc-upstream", "namespace": wh.ns, "labels": gc["metadata"]["labels"]},
            "spec": gc["spec"]
        }))),
    )
    .await;
    assert!(ok, "upstream's GardenerCluster sample admitted: {out}");
    wh.stop(env).await;
}
