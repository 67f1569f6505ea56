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

/// `schema` without descriptions: what decides which objects a CRD accepts and how it stores
/// them.
fn without_descriptions(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "description")
                .map(|(k, v)| (k.clone(), without_descriptions(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_descriptions).collect()),
        // controller-gen writes `minimum: 0`, our generator `0.0`: the same number.
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => {
            json!(n.as_f64().unwrap() as i64)
        }
        other => other.clone(),
    }
}

/// The upgrade test (`e2e controller::upgrade`) stands in today's upstream CRDs with
/// `kim_tests::fixtures::upstream_crds`, derived from ours; it must be exactly upstream's
/// schema, or the rollback it checks would be to a CRD upstream never shipped.
#[test]
fn the_upgrade_tests_upstream_crds_are_upstreams() {
    let dir = today().join("config/crd/bases");
    let derived = kim_tests::fixtures::upstream_crds::crds().unwrap();
    let mut compared = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let theirs = read_yaml(&path);
        let name = theirs["metadata"]["name"].as_str().unwrap();
        let ours = derived
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no derived CRD {name}"));
        let ours = serde_json::to_value(ours).unwrap();
        for key in ["group", "names", "scope"] {
            assert_eq!(ours["spec"][key], theirs["spec"][key], "{name}: spec.{key}");
        }
        let (our_versions, their_versions) = (
            ours["spec"]["versions"].as_array().unwrap(),
            theirs["spec"]["versions"].as_array().unwrap(),
        );
        assert_eq!(our_versions.len(), their_versions.len(), "{name}: versions");
        for (o, t) in our_versions.iter().zip(their_versions) {
            for key in ["name", "served", "storage", "subresources"] {
                assert_eq!(o[key], t[key], "{name}: version {key}");
            }
            assert_eq!(
                without_descriptions(&o["additionalPrinterColumns"]),
                without_descriptions(&t["additionalPrinterColumns"]),
                "{name}: printer columns"
            );
            assert_eq!(
                without_descriptions(&o["schema"]),
                without_descriptions(&t["schema"]),
                "{name}: schema"
            );
        }
        compared += 1;
    }
    assert_eq!(
        compared,
        derived.len(),
        "upstream's CRDs in {}",
        dir.display()
    );
}

/// The schemas of a CRD, typed (so `minimum: 0` and `0.0` compare equal).
fn schemas_of(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> Vec<Value> {
    crd.spec
        .versions
        .iter()
        .map(|v| serde_json::to_value(&v.schema).unwrap())
        .collect()
}

/// The CRD steps of docs/upgrade-from-upstream.md on upstream's own files: upstream's CRDs as
/// its deployment applies them (client-side), ours over them with server-side apply (which
/// stops at the conflict without `--force-conflicts`: upstream's client-side apply owns
/// `spec.versions`), then upstream's again server-side, which leaves exactly upstream's schemas.
#[tokio::test]
async fn the_documented_crd_steps_switch_to_ours_and_back_to_upstreams_exactly() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let env = kim_tests::testenv::TestEnv::start(kim_tests::testenv::TestEnvOptions {
        crds_dir: None,
        ..kim_tests::testenv::TestEnvOptions::kcp_only()
    })
    .await
    .unwrap();
    let upstream_dir = today().join("config/crd/bases");
    let upstream_arg = upstream_dir.display().to_string();
    let ours_arg = kim_tests::testenv::repo_root()
        .join("crds")
        .display()
        .to_string();
    let (ok, out) = kubectl(&env, &["apply", "-f", &upstream_arg], None).await;
    assert!(ok, "upstream's client-side apply: {out}");

    let server_side = |dir: &str, force: bool| -> Vec<String> {
        let mut args = vec![
            "apply".to_owned(),
            "--server-side".to_owned(),
            "--field-manager=kim-upgrade".to_owned(),
            "-f".to_owned(),
            dir.to_owned(),
        ];
        if force {
            args.insert(1, "--force-conflicts".to_owned());
        }
        args
    };
    let call = |args: Vec<String>| {
        let env = &env;
        async move {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            kubectl(env, &refs, None).await
        }
    };
    let (ok, out) = call(server_side(&ours_arg, false)).await;
    assert!(
        !ok && out.contains("conflict") && out.contains(".spec.versions"),
        "ours without --force-conflicts: {out}"
    );
    let (ok, out) = call(server_side(&ours_arg, true)).await;
    assert!(ok, "ours with --force-conflicts: {out}");
    let api: Api<CustomResourceDefinition> = Api::all(env.kcp_client().await.unwrap());
    for crd in kim_shared::crds::all() {
        let name = crd.metadata.name.clone().unwrap();
        assert_eq!(
            schemas_of(&api.get(&name).await.unwrap()),
            schemas_of(&crd),
            "{name}: ours after the upgrade"
        );
    }

    // The rollback: upstream's files server-side under kubectl's own field manager. A CRD's
    // `spec.versions` (holding the schemas) is an atomic list, so it is replaced whole.
    let (ok, out) = kubectl(
        &env,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &upstream_arg,
        ],
        None,
    )
    .await;
    assert!(ok, "upstream's CRDs again: {out}");
    let mut compared = 0;
    for entry in std::fs::read_dir(&upstream_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let theirs: CustomResourceDefinition = serde_json::from_value(read_yaml(&path)).unwrap();
        let name = theirs.metadata.name.clone().unwrap();
        assert_eq!(
            schemas_of(&api.get(&name).await.unwrap()),
            schemas_of(&theirs),
            "{name}: upstream's after the rollback"
        );
        compared += 1;
    }
    assert!(compared >= 2, "upstream's CRDs in {upstream_arg}");
}

/// Upstream's controller Deployment as its `config/default` renders it, for what the switch
/// touches: the base Deployment with the name prefix and namespace, the manager container of
/// [`upstream_manager_container`] and the volumes of the patches, in order.
fn upstream_deployment() -> Value {
    let root = today().join("config");
    let kustomization = read_yaml(&root.join("default/kustomization.yaml"));
    let prefix = kustomization["namePrefix"].as_str().unwrap();
    let namespace = kustomization["namespace"].as_str().unwrap();
    let base = std::fs::read_to_string(root.join("manager/manager.yaml")).unwrap();
    let mut deployment = serde_yaml_ng::Deserializer::from_str(&base)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|d| d["kind"] == "Deployment")
        .unwrap();
    let name = format!(
        "{prefix}{}",
        deployment["metadata"]["name"].as_str().unwrap()
    );
    deployment["metadata"]["name"] = json!(name);
    deployment["metadata"]["namespace"] = json!(namespace);
    let pod = &mut deployment["spec"]["template"]["spec"];
    pod["serviceAccountName"] = json!(format!(
        "{prefix}{}",
        pod["serviceAccountName"].as_str().unwrap()
    ));
    pod["containers"] = json!([upstream_manager_container()]);
    let mut volumes = Vec::new();
    for patch in kustomization["patchesStrategicMerge"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
    {
        let patch = read_yaml(&root.join("default").join(patch));
        volumes.extend(
            patch["spec"]["template"]["spec"]["volumes"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        );
    }
    pod["volumes"] = Value::Array(volumes);
    deployment
}

/// What of a Deployment's pod template the switch must carry over exactly: volumes and their
/// mounts, the containers' command, arguments, environment (by name) and resources, the pod's
/// security context and replicas. (The apiserver adds defaults elsewhere.)
fn switched_fields(deployment: &Value) -> Value {
    let pod = &deployment["spec"]["template"]["spec"];
    let names = |list: &Value, key: &str| -> Vec<Value> {
        list.as_array()
            .into_iter()
            .flatten()
            .map(|v| v[key].clone())
            .collect()
    };
    let containers: Vec<Value> = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            json!({
                "name": c["name"], "command": c["command"], "args": c["args"],
                "env": names(&c["env"], "name"), "resources": c["resources"],
                "mounts": c["volumeMounts"].as_array().into_iter().flatten()
                    .map(|m| json!([m["name"], m["mountPath"]])).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "replicas": deployment["spec"]["replicas"],
        "selector": deployment["spec"]["selector"],
        "volumes": names(&pod["volumes"], "name"),
        "containers": containers,
        "securityContext": pod["securityContext"],
        "serviceAccountName": pod["serviceAccountName"],
    })
}

/// Steps 1 and 5 of docs/upgrade-from-upstream.md and R3/R7 for the controller Deployment,
/// which has upstream's name: upstream's applied client-side (as `kubectl apply` of its
/// kustomization does) and scaled to zero, ours applied client-side over it, then upstream's
/// again. Each time the Deployment is exactly the one applied last: no volume, mount,
/// argument or setting of the other is left behind.
#[tokio::test]
async fn the_documented_deployment_steps_replace_upstreams_deployment_and_back() {
    let env = kim_tests::testenv::TestEnv::start(kim_tests::testenv::TestEnvOptions {
        crds_dir: None,
        ..kim_tests::testenv::TestEnvOptions::kcp_only()
    })
    .await
    .unwrap();
    let theirs = upstream_deployment();
    let name = theirs["metadata"]["name"].as_str().unwrap().to_owned();
    let namespace = theirs["metadata"]["namespace"].as_str().unwrap().to_owned();
    let ours = our_rendered_objects()
        .into_iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == *name.as_str())
        .unwrap();
    assert_ne!(switched_fields(&ours), switched_fields(&theirs));
    kubectl_ok(&env, &["create", "namespace", &namespace]).await;
    let env = &env;
    apply_manifest(env, &theirs).await;
    assert_eq!(
        switched_fields(&stored_deployment(env, &name, &namespace).await),
        switched_fields(&theirs)
    );
    kubectl_ok(
        env,
        &[
            "scale",
            "deployment",
            &name,
            "-n",
            &namespace,
            "--replicas=0",
        ],
    )
    .await;
    apply_manifest(env, &ours).await;
    assert_eq!(
        switched_fields(&stored_deployment(env, &name, &namespace).await),
        switched_fields(&ours),
        "ours over upstream's"
    );
    kubectl_ok(
        env,
        &[
            "scale",
            "deployment",
            &name,
            "-n",
            &namespace,
            "--replicas=0",
        ],
    )
    .await;
    apply_manifest(env, &theirs).await;
    assert_eq!(
        switched_fields(&stored_deployment(env, &name, &namespace).await),
        switched_fields(&theirs),
        "upstream's again"
    );
}

async fn kubectl_ok(env: &kim_tests::testenv::TestEnv, args: &[&str]) -> String {
    let (ok, out) = kubectl(env, args, None).await;
    assert!(ok, "kubectl {}: {out}", args.join(" "));
    out
}

async fn apply_manifest(env: &kim_tests::testenv::TestEnv, manifest: &Value) {
    let (ok, out) = kubectl(env, &["apply", "-f", "-"], Some(&yaml(manifest))).await;
    assert!(ok, "{out}");
}

async fn stored_deployment(env: &kim_tests::testenv::TestEnv, name: &str, ns: &str) -> Value {
    let out = kubectl_ok(env, &["get", "deployment", name, "-n", ns, "-o", "json"]).await;
    serde_json::from_str(&out).unwrap()
}
