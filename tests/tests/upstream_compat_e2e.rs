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
use kim_tests::controller::{provision_and_delete_samples, read_samples};
use kim_tests::webhook::{
    Options, Webhook, admissible, create_with_only_the_documented_defaults, env, kim_config,
    kubectl, runtime_resource,
};
use kube::api::{Api, DynamicObject};
use serde::Deserialize as _;
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

/// The manager container of upstream's `config/default` as kustomize renders it, for what
/// upstream's files use: the base Deployment of `config/manager`, then each strategic-merge
/// patch in order, containers merged by name; `command` and `args` are replaced (no merge key),
/// `volumeMounts` merged by `mountPath`.
fn upstream_manager_container() -> Value {
    let root = today().join("config");
    let base = std::fs::read_to_string(root.join("manager/manager.yaml")).unwrap();
    let deployment = serde_yaml_ng::Deserializer::from_str(&base)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|d| d["kind"] == "Deployment")
        .expect("config/manager/manager.yaml has a Deployment");
    let manager = |d: &Value| -> Value {
        d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == "manager"))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let mut container = manager(&deployment);
    let kustomization = read_yaml(&root.join("default/kustomization.yaml"));
    let patches = kustomization["patchesStrategicMerge"]
        .as_array()
        .expect("config/default patches the manager");
    for patch in patches.iter().filter_map(Value::as_str) {
        let patch = manager(&read_yaml(&root.join("default").join(patch)));
        for key in ["command", "args"] {
            if !patch[key].is_null() {
                container[key] = patch[key].clone();
            }
        }
        if let Some(mounts) = patch["volumeMounts"].as_array() {
            let list = container["volumeMounts"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut list: Vec<Value> = list
                .into_iter()
                .filter(|m| !mounts.iter().any(|n| n["mountPath"] == m["mountPath"]))
                .collect();
            list.extend(mounts.iter().cloned());
            container["volumeMounts"] = Value::Array(list);
        }
    }
    container
}

#[test]
fn the_upstream_argument_fixture_is_what_upstreams_deployment_renders() {
    let container = upstream_manager_container();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        strings(&container["command"]),
        kim_tests::fixtures::UPSTREAM_MANAGER_COMMAND
    );
    assert_eq!(
        strings(&container["args"]),
        kim_tests::fixtures::UPSTREAM_MANAGER_ARGS
    );
}

/// `kubectl kustomize deploy/`: our rendered objects.
fn our_rendered_objects() -> Vec<Value> {
    let kubectl = kim_tests::testenv::bins::find()
        .ok()
        .and_then(|b| b.kubectl)
        .unwrap_or_else(|| PathBuf::from("kubectl"));
    let dir = kim_tests::testenv::repo_root().join("deploy");
    let out = std::process::Command::new(&kubectl)
        .arg("kustomize")
        .arg(&dir)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", kubectl.display()));
    assert!(
        out.status.success(),
        "kubectl kustomize deploy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    kim_tests::fixtures::yaml_documents(&String::from_utf8(out.stdout).unwrap()).unwrap()
}

/// The port number a probe names, by number or by the container's port name.
fn probe_port(container: &Value, probe: &str) -> (String, i64) {
    let get = &container[probe]["httpGet"];
    let port = match &get["port"] {
        Value::String(name) => container["ports"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == *name))
            .and_then(|p| p["containerPort"].as_i64())
            .unwrap_or(-1),
        v => v.as_i64().unwrap_or(-1),
    };
    (get["path"].as_str().unwrap_or_default().to_owned(), port)
}

/// What an overlay of upstream's Deployment addresses is the same in ours: the Deployment's
/// name and namespace, its selector and pod labels, the ServiceAccount, the container's name,
/// ports and probes, and the mount paths of the Gardener kubeconfig and the converter
/// configuration (with the flags naming files in them). The rest differs on purpose
/// (docs/upstream-differences.md, "Deployment").
#[test]
fn deploy_renders_upstreams_deployment_names_ports_and_mounts() {
    let root = today().join("config");
    let kustomization = read_yaml(&root.join("default/kustomization.yaml"));
    let prefix = kustomization["namePrefix"].as_str().unwrap();
    let namespace = kustomization["namespace"].as_str().unwrap();
    let base = std::fs::read_to_string(root.join("manager/manager.yaml")).unwrap();
    let theirs = serde_yaml_ng::Deserializer::from_str(&base)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|d| d["kind"] == "Deployment")
        .unwrap();
    let their_container = upstream_manager_container();
    let name = format!("{prefix}{}", theirs["metadata"]["name"].as_str().unwrap());
    let account = format!(
        "{prefix}{}",
        theirs["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .unwrap()
    );

    let docs = our_rendered_objects();
    let ours = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == *name.as_str())
        .unwrap_or_else(|| panic!("deploy/ renders no Deployment {name}"));
    assert_eq!(ours["metadata"]["namespace"], *namespace);
    assert_eq!(
        ours["spec"]["selector"]["matchLabels"],
        theirs["spec"]["selector"]["matchLabels"]
    );
    let our_labels = ours["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap();
    for (k, v) in theirs["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(our_labels.get(k), Some(v), "pod label {k}");
    }
    let pod = &ours["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], *account.as_str());
    assert!(
        docs.iter().any(|d| d["kind"] == "ServiceAccount"
            && d["metadata"]["name"] == *account.as_str()
            && d["metadata"]["namespace"] == *namespace),
        "deploy/ renders the ServiceAccount {account}"
    );
    let our_container = pod["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == their_container["name"]))
        .unwrap_or_else(|| panic!("no container {}", their_container["name"]));
    for port in their_container["ports"].as_array().unwrap() {
        assert!(
            our_container["ports"].as_array().unwrap().iter().any(|p| {
                p["name"] == port["name"] && p["containerPort"] == port["containerPort"]
            }),
            "container port {port}"
        );
    }
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(
            probe_port(our_container, probe),
            probe_port(&their_container, probe),
            "{probe}"
        );
    }
    // The Gardener kubeconfig and the converter configuration: same volume names and paths.
    let mounts = |c: &Value| -> Vec<(String, String)> {
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().unwrap().to_owned(),
                    m["mountPath"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let our_mounts = mounts(our_container);
    for volume in ["gardener-kubeconfig", "converter-config"] {
        let theirs = mounts(&their_container)
            .into_iter()
            .find(|(n, _)| n == volume)
            .unwrap_or_else(|| panic!("upstream mounts no {volume}"));
        assert!(
            our_mounts.contains(&theirs),
            "mount {theirs:?}: {our_mounts:?}"
        );
    }
    let our_args: Vec<&str> = our_container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for arg in kim_tests::fixtures::UPSTREAM_MANAGER_ARGS
        .iter()
        .filter(|a| a.starts_with("--gardener-kubeconfig-path="))
        .copied()
        .chain(["--converter-config-filepath=/converter-config/converter_config.json"])
    {
        assert!(our_args.contains(&arg), "{arg} in {our_args:?}");
    }
}
