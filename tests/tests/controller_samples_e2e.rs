//! Every upstream sample Runtime (`../shared/upstream/docs/adr/assets/runtime-examples/*.yaml`
//! and `config/samples/infrastructuremanager_v1_runtime.yaml`) is provisioned by the
//! controller: Shoot accepted by the real gardener-apiserver, finished by the simulator,
//! GardenerCluster created, the sample's administrators bound in the cluster, Runtime `Ready`
//! with upstream's conditions; then deleted, finalizer last.
//!
//! Replacements, each for a reason a real Gardener or apiserver would refuse the sample too:
//! - `metadata.namespace`, `metadata.name`, the runtime-id and shoot-name labels and
//!   `spec.shoot.name`: unique per test run (the samples share IDs and names);
//! - `spec.shoot.secretBindingName` (`hyperscaler secret`, not a valid name) -> the test
//!   landscape's binding of the provider;
//! - `spec.shoot.kubernetes.version` 1.28.7 (out of Gardener v1.149's support) -> removed, so
//!   the defaults (what the mutating webhook does) set the configured version;
//! - `spec.shoot.enforceSeedLocation: "true"` (a string in `sap-converged-cloud.yaml`, which the
//!   CRD schema refuses) -> `true`.

#[path = "controller_common.rs"]
mod common;

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use common::*;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kim_shared::api::{Runtime, RuntimeState};
use kim_shared::names;
use kim_tests::testenv::TestEnv;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// The upstream sample Runtimes, by file stem.
fn samples() -> Result<Vec<(String, Value)>> {
    let root = kim_tests::testenv::repo_root().join("../shared/upstream");
    let mut files = vec![root.join("config/samples/infrastructuremanager_v1_runtime.yaml")];
    let dir = root.join("docs/adr/assets/runtime-examples");
    let mut examples: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("upstream samples in {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    examples.sort();
    files.extend(examples);
    files
        .into_iter()
        .map(|p| {
            let stem = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let text = std::fs::read_to_string(&p).with_context(|| p.display().to_string())?;
            Ok((stem, serde_yaml_ng::from_str(&text)?))
        })
        .collect()
}

/// The sample made provisionable in the test landscape (see the module docs), defaulted.
fn provisionable(mut rt: Value, ns: &str, id: &str) -> Result<Runtime> {
    rt["metadata"]["namespace"] = json!(ns);
    rt["metadata"]["name"] = json!(id);
    let shoot = shoot_name(id);
    let labels = rt["metadata"]["labels"]
        .as_object_mut()
        .context("the sample has labels")?;
    labels.insert(names::LABEL_RUNTIME_ID.into(), json!(id));
    labels.insert("kyma-project.io/shoot-name".into(), json!(shoot));
    rt["spec"]["shoot"]["name"] = json!(shoot);
    let provider = rt["spec"]["shoot"]["provider"]["type"]
        .as_str()
        .context("spec.shoot.provider.type")?
        .to_owned();
    rt["spec"]["shoot"]["secretBindingName"] =
        json!(kim_tests::fixtures::credentials_name(&provider));
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
    let mut rt: Runtime = serde_json::from_value(rt)?;
    let cfg = kim_shared::config::KimConfig::load(&kim_shared::config::ConfigPaths::new(
        kim_tests::testenv::repo_root().join("deploy/config/converter_config.json"),
    ))?;
    kim_shared::defaults::apply_defaults(&mut rt, &cfg);
    Ok(rt)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_upstream_sample_is_provisioned_and_deleted() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-samples").await?;
    let ctl = start_controller(env, &ns, &[]).await?;
    let suffix = &ns[ns.len().saturating_sub(4)..];
    let samples = samples()?;
    ensure!(
        samples.len() >= 10,
        "expected the 10 upstream samples, found {}",
        samples.len()
    );

    let mut runtimes = Vec::new();
    for (i, (stem, sample)) in samples.into_iter().enumerate() {
        let id = format!("rt{i}-{suffix}");
        let rt = provisionable(sample, &ns, &id).with_context(|| stem.clone())?;
        create(env, &rt)
            .await
            .with_context(|| format!("create {stem}"))?;
        runtimes.push((stem, rt));
    }

    let ns_ref = ns.as_str();
    let ready = futures::future::join_all(runtimes.iter().map(|(stem, rt)| async move {
        wait_state(
            env,
            ns_ref,
            &rt.name_any(),
            RuntimeState::Ready,
            Duration::from_secs(180),
        )
        .await
        .with_context(|| format!("sample {stem}"))
    }))
    .await;
    let crbs: Api<ClusterRoleBinding> = Api::all(env.shoot_client().await?);
    let selector = format!(
        "{}={}",
        names::LABEL_RECONCILER_MANAGED_BY,
        names::MANAGED_BY_INFRASTRUCTURE_MANAGER
    );
    let bindings = crbs.list(&ListParams::default().labels(&selector)).await?;
    for ((stem, rt), ready) in runtimes.iter().zip(ready) {
        let ready = ready?;
        check_ready_conditions(&ready).with_context(|| format!("sample {stem}"))?;
        let admins = &rt.spec.security.administrators;
        ensure!(!admins.is_empty(), "{stem} names administrators");
        for admin in admins {
            ensure!(
                bindings
                    .items
                    .iter()
                    .any(|b| b.role_ref.name == "cluster-admin"
                        && b.subjects.iter().flatten().any(|s| &s.name == admin)),
                "{stem}: administrator {admin} is not bound to cluster-admin"
            );
        }
    }

    let api: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    for (_, rt) in &runtimes {
        api.delete(&rt.name_any(), &DeleteParams::default()).await?;
    }
    eventually(
        "every sample Runtime gone",
        Duration::from_secs(180),
        || {
            let api = api.clone();
            async move { Ok(api.list(&ListParams::default()).await?.items.is_empty()) }
        },
    )
    .await?;
    let shoots: Api<kim_shared::gardener::Shoot> = Api::namespaced(
        env.garden_client().await?,
        kim_tests::fixtures::PROJECT_NAMESPACE,
    );
    for (stem, rt) in &runtimes {
        ensure!(
            shoots.get_opt(&rt.spec.shoot.name).await?.is_none(),
            "{stem}: the Shoot outlived its Runtime"
        );
    }
    ctl.stop().await;
    Ok(())
}
