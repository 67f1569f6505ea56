//! The runtime bootstrapper (`--runtime-bootstrapper-enabled`, `kim_controller::bootstrapper`)
//! against the shoot apiserver of the environment. Flag off: the Runtime becomes `Ready` and
//! the runtime cluster holds none of the bootstrapper's objects, its status no
//! `RuntimeBootstrapperReady`. Flag on: the KCP ConfigMap and pull Secret are copied, the
//! manifests applied (namespaced and cluster-scoped objects, field manager
//! `kim-bootstrapper`), the Runtime stays `Pending` until the Deployment is ready (the test
//! plays the deployment controller, which the test apiserver lacks) and then is `Ready` with
//! `RuntimeBootstrapperReady=True/RuntimeBootstrapperConfigured`; a change of the KCP
//! ConfigMap reaches the runtime cluster through the config reload watcher, without a write to
//! the Runtime. The KCP
//! ClusterTrustBundle is copied only when `--runtime-bootstrapper-kcp-cluster-trust-bundle`
//! names it, by a controller whose KCP identity has exactly the RBAC of
//! `deploy/controller/rbac.yaml` (no request refused), and a change of it is copied again;
//! not into the cluster of a Runtime held behind its Shoot (a restored KCP) until an operator
//! releases it.
//!
//! Its own environment: every Runtime of an environment gets the same shoot cluster.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kim_shared::api::{Runtime, RuntimeState};
use kim_shared::names::{self, condition, reason};
use kim_tests::controller::{
    annotate_runtime, controller_args, create, eventually, sample_runtime, start_controller,
    start_with_args, wait_state,
};
use kim_tests::testenv::{Ca, TestEnv, TestEnvOptions};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

const MANIFESTS: &str = "\
apiVersion: v1
kind: ServiceAccount
metadata: {name: rtb-sa, namespace: kyma-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: rtb-role}
rules: []
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: rt-bootstrapper-controller-manager
  namespace: kyma-system
  labels: {app.kubernetes.io/version: '1.0.0'}
spec:
  replicas: 1
  selector: {matchLabels: {app: rtb}}
  template:
    metadata: {labels: {app: rtb}}
    spec:
      containers: [{name: manager, image: example.invalid/rtb:1.0.0}]
";

/// The bootstrapper Deployment the installation is judged by (the default of
/// `--runtime-bootstrapper-skr-deployment-name`).
const DEPLOYMENT: &str = "rt-bootstrapper-controller-manager";

fn bootstrapper_condition(rt: &Runtime) -> Option<(String, String)> {
    rt.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == condition::RUNTIME_BOOTSTRAPPER_READY)
        })
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// The Runtime's state and its `RuntimeBootstrapperReady` (status, reason).
async fn state_and_condition(
    runtimes: &Api<Runtime>,
    id: &str,
) -> anyhow::Result<(Option<RuntimeState>, Option<(String, String)>)> {
    let rt = runtimes.get(id).await?;
    Ok((
        rt.status.as_ref().map(|s| s.state),
        bootstrapper_condition(&rt),
    ))
}

/// Waits until the Runtime is in `state` with `RuntimeBootstrapperReady` at `(status, reason)`.
async fn wait_for(
    runtimes: &Api<Runtime>,
    id: &str,
    what: &str,
    within: Duration,
    state: RuntimeState,
    status: &str,
    reason: &str,
) {
    let wanted = (Some(state), Some((status.to_string(), reason.to_string())));
    eventually(what, within, || async {
        Ok(state_and_condition(runtimes, id).await? == wanted)
    })
    .await
    .unwrap();
}

/// A controller with the bootstrapper and the bundle flag, reaching the KCP as `user`.
async fn start_copying_bundle(
    env: &TestEnv,
    ns: &str,
    ctb_flag: &str,
    user: &str,
) -> kim_tests::controller::RunningController {
    let (mut args, dir) = controller_args(
        env,
        ns,
        &[
            "--runtime-bootstrapper-enabled",
            "--runtime-bootstrapper-kcp-pull-secret-name=rtb-pull",
            ctb_flag,
            "--runtime-bootstrapper-skr-cluster-trust-bundle=kyma-trust",
        ],
    )
    .await
    .unwrap();
    kim_tests::controller::reach_kcp_as(env, &mut args, &dir, user).unwrap();
    start_with_args(args, dir).await.unwrap()
}

/// Writes (patch, update) of `user` to Shoots, in the KCP audit log (Gardener's API is
/// aggregated into the KCP's).
fn shoot_writes(env: &TestEnv, user: &str) -> usize {
    env.audit_events_of(user)
        .unwrap()
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "shoots"
                && matches!(e["verb"].as_str(), Some("patch" | "update"))
        })
        .count()
}

/// Reads (get) of `user` of the Runtime `name`, in the KCP audit log.
fn runtime_reads(env: &TestEnv, user: &str, name: &str) -> usize {
    env.audit_events_of(user)
        .unwrap()
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "runtimes"
                && e["objectRef"]["name"] == name
                && e["verb"] == "get"
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn flag_off_leaves_nothing_flag_on_installs_and_follows_the_configuration() {
    let env = &TestEnv::start(TestEnvOptions::default())
        .await
        .unwrap_or_else(|e| panic!("the bootstrapper test's own environment: {e}"));
    let ns = env.namespace("ctl-rtb").await.unwrap();
    let kcp = env.kcp_client().await.unwrap();
    let pp = PostParams::default();
    let kcp_cms: Api<ConfigMap> = Api::namespaced(kcp.clone(), &ns);
    let config: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "rt-bootstrapper-config"},
            "data": {"config.yaml": "level: 1\n"}}))
        .unwrap();
    kcp_cms.create(&pp, &config).await.unwrap();
    let manifests: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "runtime-bootstrapper-manifests"},
            "data": {"manifests.yaml": MANIFESTS}}),
    )
    .unwrap();
    kcp_cms.create(&pp, &manifests).await.unwrap();
    let pull: Secret = serde_json::from_value(json!({"metadata": {"name": "rtb-pull"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": "{\"auths\":{}}"}}))
    .unwrap();
    Api::<Secret>::namespaced(kcp.clone(), &ns)
        .create(&pp, &pull)
        .await
        .unwrap();

    // Flag off.
    let ctl = start_controller(env, &ns, &[]).await.unwrap();
    let id = format!("rtb-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id).unwrap();
    create(env, &rt).await.unwrap();
    let ready = wait_state(env, &ns, &id, RuntimeState::Ready, Duration::from_secs(180))
        .await
        .unwrap();
    assert_eq!(bootstrapper_condition(&ready), None);
    let skr = env.shoot_client().await.unwrap();
    let skr_cms: Api<ConfigMap> = Api::namespaced(skr.clone(), "kyma-system");
    let skr_deps: Api<Deployment> = Api::namespaced(skr.clone(), "kyma-system");
    let skr_secrets: Api<Secret> = Api::namespaced(skr.clone(), "kyma-system");
    assert!(
        skr_cms
            .get_opt("rt-bootstrapper-config")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        skr_deps
            .get_opt("rt-bootstrapper-controller-manager")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        skr_secrets
            .get_opt("registry-credentials")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<ClusterRole>::all(skr.clone())
            .get_opt("rtb-role")
            .await
            .unwrap()
            .is_none()
    );
    ctl.stop().await;

    // Flag on: the next configuration pass installs.
    let ctl = start_controller(
        env,
        &ns,
        &[
            "--runtime-bootstrapper-enabled",
            "--runtime-bootstrapper-kcp-pull-secret-name=rtb-pull",
        ],
    )
    .await
    .unwrap();
    let runtimes: Api<Runtime> = Api::namespaced(kcp.clone(), &ns);
    annotate_runtime(
        &runtimes,
        &id,
        names::ANNOTATION_FORCE_PATCH_RECONCILIATION,
        Some("true"),
    )
    .await
    .unwrap();
    eventually(
        "the Deployment is applied",
        Duration::from_secs(120),
        || {
            let skr_deps = skr_deps.clone();
            async move { Ok(skr_deps.get_opt(DEPLOYMENT).await?.is_some()) }
        },
    )
    .await
    .unwrap();
    // The installation runs: Pending with upstream's reason, while the deployment
    // controller (played here) reports progress of the generation it has seen.
    let status_patch = |available: &str, ready: i32, observed: i64| {
        json!({"status": {"observedGeneration": observed, "replicas": 1,
            "updatedReplicas": ready, "readyReplicas": ready, "conditions": [
            {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated", "message": "m"},
            {"type": "Available", "status": available, "reason": "R", "message": "m"}]}})
    };
    let deployment_generation = || {
        let skr_deps = skr_deps.clone();
        async move {
            skr_deps
                .get(DEPLOYMENT)
                .await
                .unwrap()
                .metadata
                .generation
                .unwrap()
        }
    };
    skr_deps
        .patch_status(
            DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(status_patch("False", 0, deployment_generation().await)),
        )
        .await
        .unwrap();
    wait_for(
        &runtimes,
        &id,
        "RuntimeBootstrapperReady=False/InstallationInProgress",
        Duration::from_secs(120),
        RuntimeState::Pending,
        "False",
        reason::RUNTIME_BOOTSTRAPPER_INSTALLATION_IN_PROGRESS,
    )
    .await;
    skr_deps
        .patch_status(
            DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(status_patch("True", 1, deployment_generation().await)),
        )
        .await
        .unwrap();
    wait_for(
        &runtimes,
        &id,
        "the Runtime is Ready again",
        Duration::from_secs(120),
        RuntimeState::Ready,
        "True",
        reason::RUNTIME_BOOTSTRAPPER_CONFIGURED,
    )
    .await;

    // What upstream's would hold, written by the bootstrapper's field manager.
    let copied = skr_cms.get("rt-bootstrapper-config").await.unwrap();
    assert_eq!(copied.data, config.data);
    let secret = skr_secrets.get("registry-credentials").await.unwrap();
    assert_eq!(
        secret.type_.as_deref(),
        Some("kubernetes.io/dockerconfigjson")
    );
    assert_eq!(
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(".dockerconfigjson"))
            .map(|b| b.0.clone()),
        Some(b"{\"auths\":{}}".to_vec())
    );
    Api::<ServiceAccount>::namespaced(skr.clone(), "kyma-system")
        .get("rtb-sa")
        .await
        .unwrap();
    let role = Api::<ClusterRole>::all(skr.clone())
        .get("rtb-role")
        .await
        .unwrap();
    assert!(
        role.metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some("kim-bootstrapper")),
        "{:?}",
        role.metadata.managed_fields
    );

    // A change of the KCP ConfigMap reaches the runtime cluster.
    kcp_cms
        .patch(
            "rt-bootstrapper-config",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"config.yaml": "level: 2\n"}})),
        )
        .await
        .unwrap();
    eventually(
        "the copied ConfigMap follows",
        Duration::from_secs(120),
        || {
            let skr_cms = skr_cms.clone();
            async move {
                let cm = skr_cms.get("rt-bootstrapper-config").await?;
                Ok(cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get("config.yaml"))
                    .is_some_and(|v| v == "level: 2\n"))
            }
        },
    )
    .await
    .unwrap();

    // A pull Secret of another type is not copied (upstream refuses to start with one); the
    // Runtime says the configuration failed, and proceeds once the Secret is right again.
    let kcp_secrets = Api::<Secret>::namespaced(kcp.clone(), &ns);
    let replace_pull = |type_: &'static str| {
        let kcp_secrets = kcp_secrets.clone();
        async move {
            kcp_secrets
                .delete("rtb-pull", &Default::default())
                .await
                .unwrap();
            let pull: Secret = serde_json::from_value(json!({"metadata": {"name": "rtb-pull"},
                "type": type_, "stringData": {".dockerconfigjson": "{\"auths\":{}}"}}))
            .unwrap();
            kcp_secrets
                .create(&PostParams::default(), &pull)
                .await
                .unwrap();
        }
    };
    // The copy goes first, so that only our check (not the runtime cluster's refusal to change
    // a Secret's type) can keep an Opaque one out.
    skr_secrets
        .delete("registry-credentials", &Default::default())
        .await
        .unwrap();
    replace_pull("Opaque").await;
    let has_bootstrapper_condition = |want: (&'static str, &'static str)| {
        let runtimes = runtimes.clone();
        let id = id.clone();
        move || {
            let runtimes = runtimes.clone();
            let id = id.clone();
            async move {
                let rt = runtimes.get(&id).await?;
                Ok(bootstrapper_condition(&rt) == Some((want.0.into(), want.1.into())))
            }
        }
    };
    eventually(
        "an Opaque pull Secret is refused",
        Duration::from_secs(120),
        has_bootstrapper_condition(("False", reason::RUNTIME_BOOTSTRAPPER_CONFIGURATION_FAILED)),
    )
    .await
    .unwrap();
    assert!(
        skr_secrets
            .get_opt("registry-credentials")
            .await
            .unwrap()
            .is_none(),
        "the Opaque pull Secret reached the runtime cluster"
    );
    replace_pull("kubernetes.io/dockerconfigjson").await;
    eventually(
        "the right pull Secret is copied again",
        Duration::from_secs(120),
        has_bootstrapper_condition(("True", reason::RUNTIME_BOOTSTRAPPER_CONFIGURED)),
    )
    .await
    .unwrap();

    // The deployment controller gives up on the installation (its progress deadline passes):
    // the next pass fails the Runtime. New manifests repair it: they are applied over the
    // failed Deployment, and the Runtime is Ready only once the new version is rolled out, not
    // while replicas of the old one still serve.
    skr_deps
        .patch_status(
            DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyReplicas": 0, "conditions": [
                {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "m"},
                {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable", "message": "m"}]}})),
        )
        .await
        .unwrap();
    annotate_runtime(
        &runtimes,
        &id,
        names::ANNOTATION_FORCE_PATCH_RECONCILIATION,
        Some("true"),
    )
    .await
    .unwrap();
    wait_for(
        &runtimes,
        &id,
        "a failed installation fails the Runtime",
        Duration::from_secs(120),
        RuntimeState::Failed,
        "False",
        reason::RUNTIME_BOOTSTRAPPER_INSTALLATION_FAILED,
    )
    .await;
    let upgraded = MANIFESTS.replace("1.0.0", "1.1.0");
    let publish = |text: String| {
        let kcp_cms = kcp_cms.clone();
        async move {
            kcp_cms
                .patch(
                    "runtime-bootstrapper-manifests",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"manifests.yaml": text}})),
                )
                .await
                .unwrap();
        }
    };
    publish(upgraded.clone()).await;
    eventually(
        "the new manifests are applied over the failed installation",
        Duration::from_secs(120),
        || {
            let skr_deps = skr_deps.clone();
            async move {
                let dep = skr_deps.get(DEPLOYMENT).await?;
                Ok(dep
                    .labels()
                    .get("app.kubernetes.io/version")
                    .map(String::as_str)
                    == Some("1.1.0"))
            }
        },
    )
    .await
    .unwrap();
    skr_deps
        .patch_status(
            DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(status_patch("True", 1, deployment_generation().await)),
        )
        .await
        .unwrap();
    wait_for(
        &runtimes,
        &id,
        "the rolled-out upgrade makes the Runtime Ready",
        Duration::from_secs(120),
        RuntimeState::Ready,
        "True",
        reason::RUNTIME_BOOTSTRAPPER_CONFIGURED,
    )
    .await;
    // A change of the manifests without a new version reaches the cluster too. It changes the
    // Deployment's template: the Runtime is Pending while the old replicas still serve (the
    // deployment controller has not seen the new spec), and Ready once it is rolled out.
    let before = deployment_generation().await;
    publish(
        upgraded
            .replace(
                "rules: []",
                "rules: [{apiGroups: [''], resources: [configmaps], verbs: [get]}]",
            )
            .replace("rtb:1.1.0", "rtb:1.1.0-fix"),
    )
    .await;
    eventually(
        "a manifests change of the same version is applied and rolled out",
        Duration::from_secs(120),
        || {
            let (skr, runtimes, id) = (skr.clone(), runtimes.clone(), id.clone());
            async move {
                let role = Api::<ClusterRole>::all(skr).get("rtb-role").await?;
                let rt = runtimes.get(&id).await?;
                Ok(role.rules.is_some_and(|r| r.len() == 1)
                    && rt.status.as_ref().map(|s| s.state) == Some(RuntimeState::Pending)
                    && bootstrapper_condition(&rt)
                        == Some((
                            "False".into(),
                            reason::RUNTIME_BOOTSTRAPPER_INSTALLATION_IN_PROGRESS.into(),
                        )))
            }
        },
    )
    .await
    .unwrap();
    let changed = deployment_generation().await;
    assert!(
        changed > before,
        "the template change reached the Deployment"
    );
    skr_deps
        .patch_status(
            DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(status_patch("True", 1, changed)),
        )
        .await
        .unwrap();
    wait_for(
        &runtimes,
        &id,
        "the rolled-out change makes the Runtime Ready",
        Duration::from_secs(60),
        RuntimeState::Ready,
        "True",
        reason::RUNTIME_BOOTSTRAPPER_CONFIGURED,
    )
    .await;

    // Without --runtime-bootstrapper-kcp-cluster-trust-bundle no ClusterTrustBundle is copied,
    // although the KCP holds one.
    let ctb_res = ApiResource {
        group: "certificates.k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "certificates.k8s.io/v1beta1".into(),
        kind: "ClusterTrustBundle".into(),
        plural: "clustertrustbundles".into(),
    };
    let kcp_ctbs: Api<DynamicObject> = Api::all_with(kcp.clone(), &ctb_res);
    let skr_ctbs: Api<DynamicObject> = Api::all_with(skr.clone(), &ctb_res);
    let first_ca = env.ca().pair.cert_pem.clone();
    let second_ca = Ca::new("kim-rtb-second-ca").unwrap().pair.cert_pem;
    let kcp_bundle = format!("kcp-trust-{}", &ns[ns.len().saturating_sub(6)..]);
    let bundle: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "certificates.k8s.io/v1beta1", "kind": "ClusterTrustBundle",
        "metadata": {"name": kcp_bundle}, "spec": {"trustBundle": first_ca}}))
    .unwrap();
    kcp_ctbs
        .create(&pp, &bundle)
        .await
        .unwrap_or_else(|e| panic!("the KCP apiserver serves ClusterTrustBundles: {e}"));
    annotate_runtime(
        &runtimes,
        &id,
        names::ANNOTATION_FORCE_PATCH_RECONCILIATION,
        Some("true"),
    )
    .await
    .unwrap();
    eventually("the forced pass is done", Duration::from_secs(120), || {
        let runtimes = runtimes.clone();
        let id = id.clone();
        async move {
            let rt = runtimes.get(&id).await?;
            Ok(rt
                .annotation(names::ANNOTATION_FORCE_PATCH_RECONCILIATION)
                .is_none()
                && rt.status.as_ref().map(|s| s.state) == Some(RuntimeState::Ready))
        }
    })
    .await
    .unwrap();
    assert!(
        skr_ctbs
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no ClusterTrustBundle is copied without the flag"
    );
    ctl.stop().await;

    // With the flag, and with the controller's KCP identity bound to exactly the RBAC of
    // deploy/controller/rbac.yaml: the bundle is copied, and a change of it is copied again
    // (the config reload watcher).
    let user = format!("kim-controller-{ns}");
    super::audit_log::bind_deployed_role(&kcp, &ns, &user)
        .await
        .unwrap();
    let ctb_flag = format!("--runtime-bootstrapper-kcp-cluster-trust-bundle={kcp_bundle}");
    let ctl = start_copying_bundle(env, &ns, &ctb_flag, &user).await;
    annotate_runtime(
        &runtimes,
        &id,
        names::ANNOTATION_FORCE_PATCH_RECONCILIATION,
        Some("true"),
    )
    .await
    .unwrap();
    let copied_bundle = |want: String| {
        let skr_ctbs = skr_ctbs.clone();
        move || {
            let skr_ctbs = skr_ctbs.clone();
            let want = want.clone();
            async move {
                let Some(ctb) = skr_ctbs.get_opt("kyma-trust").await? else {
                    return Ok(false);
                };
                Ok(ctb.data["spec"]["trustBundle"] == want.as_str())
            }
        }
    };
    let result = eventually(
        "the ClusterTrustBundle is copied",
        Duration::from_secs(120),
        copied_bundle(first_ca.clone()),
    )
    .await;
    let copied = skr_ctbs.get_opt("kyma-trust").await.unwrap();
    let refused = |env: &TestEnv| {
        env.audit_events_of(&user)
            .unwrap()
            .into_iter()
            .filter(|e| e["responseStatus"]["code"] == 403)
            .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        refused(env),
        Vec::<String>::new(),
        "refused by the deployed RBAC"
    );
    result.unwrap();
    let copied = copied.unwrap();
    assert!(
        copied
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some("kim-bootstrapper")),
        "{:?}",
        copied.metadata.managed_fields
    );
    eventually(
        "the force-patch annotation is removed",
        Duration::from_secs(120),
        || {
            let runtimes = runtimes.clone();
            let id = id.clone();
            async move {
                Ok(runtimes
                    .get(&id)
                    .await?
                    .annotation(names::ANNOTATION_FORCE_PATCH_RECONCILIATION)
                    .is_none())
            }
        },
    )
    .await
    .unwrap();
    let writes_before = shoot_writes(env, &user);
    let both = format!("{first_ca}{second_ca}");
    kcp_ctbs
        .patch(
            &kcp_bundle,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"trustBundle": both}})),
        )
        .await
        .unwrap();
    eventually(
        "the changed ClusterTrustBundle is copied again",
        Duration::from_secs(120),
        copied_bundle(both.clone()),
    )
    .await
    .unwrap();
    // The Shoot got what the bundle needs, as upstream adds it with the flag (gardener-apiserver
    // accepted the patch).
    let shoots: kube::Api<kim_shared::gardener::Shoot> = kube::Api::namespaced(
        env.garden_client().await.unwrap(),
        kim_tests::fixtures::PROJECT_NAMESPACE,
    );
    let shoot = serde_json::to_value(shoots.get(&rt.spec.shoot.name).await.unwrap()).unwrap();
    let k = &shoot["spec"]["kubernetes"];
    for gate in ["ClusterTrustBundle", "ClusterTrustBundleProjection"] {
        assert_eq!(k["kubeAPIServer"]["featureGates"][gate], true, "{k}");
    }
    assert_eq!(
        k["kubeAPIServer"]["runtimeConfig"]["certificates.k8s.io/v1beta1/clustertrustbundles"],
        true,
        "{k}"
    );
    assert_eq!(
        k["kubelet"]["featureGates"]["ClusterTrustBundleProjection"], true,
        "{k}"
    );
    // Without a Shoot patch: upstream sets the force-patch annotation on every Runtime, which
    // also patches every Shoot. The Runtime notes the configuration its cluster has.
    assert_eq!(
        shoot_writes(env, &user),
        writes_before,
        "the configuration change patched the Shoot"
    );
    let noted = |rt: &Runtime| {
        rt.annotation(names::ANNOTATION_RUNTIME_BOOTSTRAPPER_CONFIG)
            .map(str::to_owned)
    };
    let configured = noted(&runtimes.get(&id).await.unwrap());
    assert!(
        configured.is_some(),
        "the Runtime does not note its configuration"
    );
    ctl.stop().await;

    // A KCP restored from a backup: the Shoot reflects a later generation of the Runtime than
    // the Runtime has, and a controller that starts holds the Runtime. A configuration change
    // then does not reach its cluster (it would apply the older spec, as the force-patch
    // annotation does) until an operator releases it.
    let generation = runtimes
        .get(&id)
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap();
    shoots
        .patch(
            &rt.spec.shoot.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                names::SHOOT_ANNOTATION_RUNTIME_GENERATION: (generation + 5).to_string()}}})),
        )
        .await
        .unwrap();
    let ctl = start_copying_bundle(env, &ns, &ctb_flag, &user).await;
    let held = |rt: &Runtime| {
        rt.condition(condition::PROVISIONED)
            .is_some_and(|c| c.reason == reason::RUNTIME_BEHIND_SHOOT)
    };
    eventually(
        "the restored Runtime is held behind its Shoot",
        Duration::from_secs(120),
        || {
            let runtimes = runtimes.clone();
            let id = id.clone();
            async move { Ok(held(&runtimes.get(&id).await?)) }
        },
    )
    .await
    .unwrap();
    let looked_before = runtime_reads(env, &user, &id);
    let third_ca = Ca::new("kim-rtb-third-ca").unwrap().pair.cert_pem;
    let all = format!("{both}{third_ca}");
    kcp_ctbs
        .patch(
            &kcp_bundle,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"trustBundle": all}})),
        )
        .await
        .unwrap();
    // The change had the held Runtime reconciled (a held pass reads the Runtime live).
    eventually(
        "the held Runtime is looked at after the change",
        Duration::from_secs(120),
        || async { Ok(runtime_reads(env, &user, &id) > looked_before) },
    )
    .await
    .unwrap();
    let copied = skr_ctbs.get("kyma-trust").await.unwrap();
    assert_eq!(
        copied.data["spec"]["trustBundle"],
        both.as_str(),
        "a held Runtime's cluster got the configuration change"
    );
    assert!(held(&runtimes.get(&id).await.unwrap()));
    annotate_runtime(
        &runtimes,
        &id,
        names::ANNOTATION_FORCE_PATCH_RECONCILIATION,
        Some("true"),
    )
    .await
    .unwrap();
    eventually(
        "the released Runtime's cluster gets the change",
        Duration::from_secs(120),
        copied_bundle(all.clone()),
    )
    .await
    .unwrap();
    eventually(
        "the Runtime notes the configuration of its cluster",
        Duration::from_secs(60),
        || {
            let runtimes = runtimes.clone();
            let (id, configured) = (id.clone(), configured.clone());
            async move {
                let now = noted(&runtimes.get(&id).await?);
                Ok(now.is_some() && now != configured)
            }
        },
    )
    .await
    .unwrap();
    ctl.stop().await;

    // A change while no replica leads reaches the cluster once one does: its Runtime notes
    // another configuration than the one the new leader first sees.
    let fourth_ca = Ca::new("kim-rtb-fourth-ca").unwrap().pair.cert_pem;
    let latest = format!("{all}{fourth_ca}");
    kcp_ctbs
        .patch(
            &kcp_bundle,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"trustBundle": latest}})),
        )
        .await
        .unwrap();
    let ctl = start_copying_bundle(env, &ns, &ctb_flag, &user).await;
    eventually(
        "a change made while no replica led reaches the cluster",
        Duration::from_secs(120),
        copied_bundle(latest.clone()),
    )
    .await
    .unwrap();
    ctl.stop().await;
    let used: Vec<String> = env
        .audit_events_of(&user)
        .unwrap()
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "clustertrustbundles")
        .map(|e| e["verb"].as_str().unwrap_or_default().to_owned())
        .collect();
    for verb in ["list", "watch"] {
        assert!(
            used.iter().any(|v| v == verb),
            "the controller uses {verb} on clustertrustbundles: {used:?}"
        );
    }
    // The passes take the configuration from the config reload watcher, not from the KCP.
    let watched = [
        "rt-bootstrapper-config",
        "runtime-bootstrapper-manifests",
        "rtb-pull",
        kcp_bundle.as_str(),
    ];
    let reads: Vec<String> = env
        .audit_events_of(&user)
        .unwrap()
        .iter()
        .filter(|e| {
            e["verb"] == "get"
                && e["objectRef"]["name"]
                    .as_str()
                    .is_some_and(|n| watched.contains(&n))
        })
        .map(|e| e["requestURI"].to_string())
        .collect();
    assert_eq!(reads, Vec::<String>::new(), "reads of watched objects");
    assert_eq!(
        refused(env),
        Vec::<String>::new(),
        "refused by the deployed RBAC"
    );
}
