//! The upgrade from today's upstream KIM and the rollback to it, step by step as
//! `docs/upgrade-from-upstream.md` describes them (the step numbers are the document's), with
//! the document's `kubectl` commands where it gives one.
//!
//! A control plane holding what upstream wrote: upstream's CRDs as its deployment applies them
//! (client-side `kubectl apply`), and the Runtimes of `controller::takeover` laid down as upstream
//! writes them (three Ready ones with their Shoots, GardenerClusters and kubeconfig Secrets), plus
//! one that upstream stored although our validation refuses it. Upstream's binary is never run:
//! "upstream is scaled to zero" is the starting point. Upstream's CRDs are
//! `kim_tests::fixtures::upstream_crds` (checked against upstream's files by the
//! upstream-compatibility suite).
//!
//! The test runs in an environment of its own: it replaces cluster-wide CRDs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kim_shared::api::runtime_access::RuntimeAccess;
use kim_shared::api::{GardenerCluster, Runtime, RuntimeState};
use kim_shared::names;
use kim_tests::controller::*;
use kim_tests::fixtures::upstream_crds::{
    self, GARDENER_CLUSTER_CRD, RUNTIME_ACCESS_CRD, RUNTIME_CRD,
};
use kim_tests::testenv::{TestEnv, TestEnvOptions, repo_root};
use kim_tests::webhook::{Options, Webhook, kubectl, runtime_resource};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::takeover::{
    Laid, TIMEOUT, UPSTREAM_MANAGER, conditions_of, last_sync, lay_down, shoots_api,
};

/// The field manager the document's `kubectl apply --server-side` of our CRDs uses (the CRDs'
/// managed fields then say who installed them).
const CRD_FIELD_MANAGER: &str = "kim-upgrade";

/// Metadata of one object: (labels, annotations, finalizers, owner UIDs).
type Meta = (
    BTreeMap<String, String>,
    BTreeMap<String, String>,
    Vec<String>,
    Vec<String>,
);

fn meta_of(m: &kube::api::ObjectMeta) -> Meta {
    (
        m.labels.clone().unwrap_or_default(),
        m.annotations.clone().unwrap_or_default(),
        m.finalizers.clone().unwrap_or_default(),
        m.owner_references
            .iter()
            .flatten()
            .map(|o| o.uid.clone())
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upgrading_from_upstream_and_rolling_back_loses_rewrites_and_blocks_nothing() -> Result<()>
{
    let env = TestEnv::start(TestEnvOptions {
        crds_dir: None,
        ..TestEnvOptions::default()
    })
    .await?;
    let env = &env;
    let files = tempfile::tempdir()?;
    let upstream_crd_file = files.path().join("upstream-crds.yaml");
    std::fs::write(&upstream_crd_file, upstream_crds::yaml()?)?;
    let upstream_crd_arg = upstream_crd_file.display().to_string();

    // Upstream's deployment: `kustomize build config/default | kubectl apply -f -`.
    kubectl_ok(env, &["apply", "-f", &upstream_crd_arg]).await?;
    crds_established(env, &[RUNTIME_CRD, GARDENER_CLUSTER_CRD]).await?;

    let ns = env.namespace("upgrade").await?;
    let suffix = ns[ns.len().saturating_sub(4)..].to_owned();
    let user = format!("kim-upgrade-{suffix}");
    let wiring = Wiring {
        user: Some(user.clone()),
        ..Wiring::default()
    };
    let (args, dir) = controller_args_wired(env, &ns, &[], &wiring).await?;
    let mut laid = Vec::new();
    for (i, provider) in ["aws", "azure", "gcp"].into_iter().enumerate() {
        let id = format!("up{i}-{suffix}");
        laid.push(
            lay_down(env, &ns, provider, &id)
                .await
                .with_context(|| format!("laying down the {provider} Runtime as upstream"))?,
        );
    }
    let invalid = format!("upbad-{suffix}");
    lay_down_invalid(env, &ns, &invalid).await?;

    let kcp = env.kcp_client().await?;
    let runtimes: Api<Runtime> = Api::namespaced(kcp.clone(), &ns);
    let gcs: Api<GardenerCluster> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let shoots = shoots_api(env).await?;
    let mut runtimes_before = BTreeMap::new();
    for rt in runtimes.list(&ListParams::default()).await? {
        runtimes_before.insert(rt.name_any(), rt);
    }
    let mut gcs_before = BTreeMap::new();
    for l in &laid {
        gcs_before.insert(l.id.clone(), gcs.get(&l.id).await?);
    }

    // Step 2: the stored Runtimes, checked offline as the webhook will check them.
    let (_, exported) = kubectl(env, &["get", "runtimes", "-n", &ns, "-o", "yaml"], None).await;
    let (code, report) = kim_webhook_validate(files.path(), &exported).await?;
    assert_eq!(code, Some(1), "kim-webhook validate: {report}");
    let failing: Vec<&str> = report.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        failing.len() == 1 && failing[0].contains(&invalid),
        "only {invalid} fails: {report}"
    );
    assert!(
        report.contains("workers[0].name") || report.contains("workers[].name"),
        "the report names the field: {report}"
    );

    // Step 3: our CRDs over upstream's. Upstream's client-side apply owns `spec.versions`, an
    // atomic list holding the schema, and ours differs: without `--force-conflicts` the apply
    // stops at that conflict.
    let crds_dir = repo_root().join("crds").display().to_string();
    let mut apply_ours = vec![
        "apply",
        "--server-side",
        "--field-manager",
        CRD_FIELD_MANAGER,
        "-f",
        &crds_dir,
    ];
    let (ok, out) = kubectl(env, &apply_ours, None).await;
    ensure!(
        !ok && out.contains("conflict") && out.contains(".spec.versions"),
        "our CRDs applied without --force-conflicts: {out}"
    );
    apply_ours.insert(1, "--force-conflicts");
    kubectl_ok(env, &apply_ours).await?;
    crds_established(
        env,
        &[RUNTIME_CRD, GARDENER_CLUSTER_CRD, RUNTIME_ACCESS_CRD],
    )
    .await?;
    stored_schema_is(env, &kim_shared::crds::all()).await?;
    // The apiserver now validates with our schema (a Runtime needs `spec`) ...
    let raw: Api<DynamicObject> = Api::namespaced_with(kcp.clone(), &ns, &runtime_resource());
    eventually("our Runtime schema served", TIMEOUT, || async {
        let no_spec: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "Runtime",
            "metadata": {"name": "no-spec"},
        }))?;
        let refused = raw
            .create(
                &PostParams {
                    dry_run: true,
                    ..PostParams::default()
                },
                &no_spec,
            )
            .await;
        // Only the schema's own refusal counts (not a 404 while the CRD is re-established).
        Ok(matches!(refused, Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("spec")))
    })
    .await?;
    // ... and rewrote no stored object.
    for rt in runtimes.list(&ListParams::default()).await? {
        let before = &runtimes_before[&rt.name_any()];
        assert_eq!(
            rt.resource_version(),
            before.resource_version(),
            "{}: the CRD update rewrote the Runtime",
            rt.name_any()
        );
    }

    // Step 4: the webhook and its registration ...
    let wh = Webhook::start(
        env,
        Options {
            namespace: Some(ns.clone()),
            ..Options::default()
        },
    )
    .await;
    let replace = PostParams::default();
    // Stored Runtimes stay updatable as they are: upstream's and KEB's writes of the object as
    // read (a metadata change, a PUT of the same spec) pass and default nothing.
    for name in runtimes_before.keys() {
        let mut rt = runtimes.get(name).await?;
        rt.annotations_mut()
            .insert("example.com/upgrade-check".into(), "1".into());
        let written = runtimes
            .replace(name, &replace, &rt)
            .await
            .with_context(|| format!("{name}: metadata update through the webhook"))?;
        assert_eq!(
            (written.metadata.generation, &written.spec),
            (
                runtimes_before[name].metadata.generation,
                &runtimes_before[name].spec
            ),
            "{name}: an update of metadata changed the spec"
        );
    }
    // The one our validation refuses: any change of its spec is refused, naming the field.
    let mut changed = runtimes.get(&invalid).await?;
    changed.spec.security.administrators = vec!["other.admin@example.com".into()];
    let refusal = runtimes
        .replace(&invalid, &replace, &changed)
        .await
        .err()
        .context("a spec change of the invalid Runtime was admitted")?;
    assert!(refusal.to_string().contains("workers"), "{refusal}");
    // Deletion protection: a DELETE without the confirmation annotation by someone other than
    // KEB is refused.
    let refusal = runtimes
        .delete(
            &laid[0].id,
            &DeleteParams {
                dry_run: true,
                ..DeleteParams::default()
            },
        )
        .await
        .err()
        .context("an unconfirmed DELETE was admitted")?;
    assert!(
        matches!(&refusal, kube::Error::Api(s) if s.code == 403),
        "{refusal}"
    );

    // ... and our controller.
    let ctl = start_with_args(args, dir).await?;
    for l in &laid {
        eventually(&format!("{} reconciled", l.provider), TIMEOUT, || async {
            let rt = runtimes.get(&l.id).await?;
            Ok(rt.status.as_ref().and_then(|s| s.observed_generation) == rt.metadata.generation)
        })
        .await?;
        let gc_uid = gcs.get(&l.id).await?.uid().context("uid")?;
        eventually(
            &format!("{} kubeconfig Secret adopted", l.provider),
            TIMEOUT,
            || async {
                let s = secrets.get(&names::kubeconfig_secret_name(&l.id)).await?;
                let adopted = s
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == gc_uid);
                Ok(adopted && (last_sync(&s) != last_sync(&l.secret_before)) == l.due)
            },
        )
        .await?;
    }
    let bad = wait_state(env, &ns, &invalid, RuntimeState::Failed, TIMEOUT).await?;
    let provisioned = bad
        .condition(names::condition::PROVISIONED)
        .context("Provisioned")?;
    assert!(
        provisioned.reason == "ConversionErr" && provisioned.message.contains("workers"),
        "{provisioned:?}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;

    // What to watch: the series the document names, as the alerts read them.
    let metrics = ctl.metrics_text().await?;
    for l in &laid {
        let series = format!("runtimeId=\"{}\"", l.id);
        assert_eq!(
            metric_sum(
                &metrics,
                "infrastructure_manager_im_runtime_state",
                &[&series, "state=\"Ready\""]
            ),
            1.0,
            "{}: {metrics}",
            l.provider
        );
        assert!(
            metric_sum(
                &metrics,
                "infrastructure_manager_im_kubeconfig_expiration",
                &[&series]
            ) > 0.0,
            "{}: kubeconfig expiration",
            l.provider
        );
    }
    assert_eq!(
        metric_sum(
            &metrics,
            "infrastructure_manager_im_runtime_state",
            &[&format!("runtimeId=\"{invalid}\""), "state=\"Failed\""]
        ),
        1.0,
        "the invalid Runtime shows as Failed (alert KimRuntimeFailed)"
    );
    // No Shoot or structured-auth ConfigMap written; one kubeconfig requested (the due one).
    assert_eq!(
        metric_sum(
            &metrics,
            "infrastructure_manager_im_gardener_requests_total",
            &["method=\"PATCH\""]
        ),
        0.0,
        "Gardener PATCHes"
    );
    assert_eq!(
        metric_sum(
            &metrics,
            "infrastructure_manager_im_gardener_requests_total",
            &["method=\"POST\""]
        ),
        laid.iter().filter(|l| l.due).count() as f64,
        "Gardener POSTs"
    );
    assert_eq!(
        metric_sum(
            &metrics,
            "infrastructure_manager_im_gardener_health",
            &["status=\"error\""]
        ),
        0.0,
        "Gardener health"
    );

    // Nothing lost or rewritten.
    for l in &laid {
        let what = l.provider;
        let shoot = shoots.get(&l.shoot).await?;
        assert_eq!(
            (shoot.metadata.generation, &shoot.data["spec"]),
            (
                l.shoot_before.metadata.generation,
                &l.shoot_before.data["spec"]
            ),
            "{what}: the Shoot changed"
        );
        let secret = secrets.get(&names::kubeconfig_secret_name(&l.id)).await?;
        if !l.due {
            assert_eq!(
                secret.data, l.secret_before.data,
                "{what}: kubeconfig not due rewritten"
            );
        }
        let gc = gcs.get(&l.id).await?;
        let gc_before = &gcs_before[&l.id];
        assert_eq!(gc.spec, gc_before.spec, "{what}: GardenerCluster spec");
        let (labels, annotations, finalizers, _) = meta_of(&gc.metadata);
        let (labels_before, annotations_before, _, _) = meta_of(&gc_before.metadata);
        assert_eq!(
            (labels, annotations),
            (labels_before, annotations_before),
            "{what}: GardenerCluster metadata"
        );
        assert_eq!(
            finalizers,
            [kim_controller::gardener_cluster::FINALIZER],
            "{what}: our finalizer on the GardenerCluster"
        );
        let rt = runtimes.get(&l.id).await?;
        let before = &runtimes_before[&l.id];
        assert_eq!(
            (&rt.spec, rt.metadata.generation, rt.finalizers()),
            (
                &before.spec,
                before.metadata.generation,
                before.finalizers()
            ),
            "{what}: Runtime"
        );
        assert_eq!(
            rt.status.as_ref().map(|s| &s.state),
            Some(&RuntimeState::Ready)
        );
        assert_eq!(conditions_of(&rt), l.conditions, "{what}: conditions");
    }
    assert!(
        shoot_writes_by(env, &user)?.is_empty(),
        "our controller wrote a Shoot"
    );

    // A RuntimeAccess: ours only, with its Secret in the KCP and objects in the runtime.
    let sa_ns = env.shoot_namespace("upgrade").await?;
    let accesses: Api<RuntimeAccess> = Api::namespaced(kcp.clone(), &ns);
    let access: RuntimeAccess = serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "RuntimeAccess",
        "metadata": {"name": "reader", "namespace": ns},
        "spec": {
            "runtimeId": laid[0].id,
            "serviceAccount": {"name": "reader", "namespace": sa_ns},
            "role": {"namespace": sa_ns, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
            "tokenExpirationSeconds": 600,
        },
    }))?;
    accesses.create(&PostParams::default(), &access).await?;
    eventually("RuntimeAccess Ready", TIMEOUT, || async {
        Ok(accesses
            .get("reader")
            .await?
            .status
            .is_some_and(|s| s.state.as_deref() == Some("Ready")))
    })
    .await?;

    ensure!(
        secrets_managed_by_access(&secrets).await? == 1,
        "the RuntimeAccess has no token Secret"
    );
    let shoot_accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(env.shoot_client().await?, &sa_ns);
    ensure!(
        shoot_accounts.get_opt("reader").await?.is_some(),
        "the RuntimeAccess has no ServiceAccount in the runtime"
    );

    // Rollback, step R1: RuntimeAccesses are deleted while our controller still runs (their
    // finalizer is ours; it removes the runtime's objects and the token Secret). kubectl waits
    // until they are gone.
    kubectl_ok(env, &["delete", "runtimeaccesses", "--all", "-n", &ns]).await?;
    let access_secrets = secrets_managed_by_access(&secrets).await?;
    ensure!(
        access_secrets == 0,
        "token Secrets of RuntimeAccesses left: {access_secrets}"
    );
    ensure!(
        shoot_accounts.get_opt("reader").await?.is_none(),
        "the RuntimeAccess's ServiceAccount is left in the runtime"
    );

    // R2: the webhook registration goes before the webhook, or every Runtime write fails.
    let webhook_secret = wh.secret.clone();
    let (mutating, validating) = (wh.mutating.clone(), wh.validating.clone());
    let deleted = kubectl_ok(
        env,
        &[
            "delete",
            "mutatingwebhookconfiguration,validatingwebhookconfiguration",
            "-l",
            "app.kubernetes.io/name=infrastructure-manager-webhook",
        ],
    )
    .await?;
    ensure!(
        deleted.contains(&mutating) && deleted.contains(&validating),
        "the label names the registration: {deleted}"
    );
    wh.stop(env).await;
    for (kind, name) in [
        ("mutatingwebhookconfiguration", &mutating),
        ("validatingwebhookconfiguration", &validating),
    ] {
        let (found, out) = kubectl(env, &["get", kind, name], None).await;
        ensure!(!found, "{kind} {name} left: {out}");
    }
    // R3: our controller stops.
    ctl.stop().await;
    // R4: our finalizer leaves the GardenerClusters (upstream sets none and would never remove
    // it: every deletion of a GardenerCluster would hang).
    for gc in gcs.list(&ListParams::default()).await? {
        kubectl_ok(
            env,
            &[
                "patch",
                "gardenercluster",
                &gc.name_any(),
                "-n",
                &ns,
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ],
        )
        .await?;
    }
    // R5: upstream's CRDs back (`spec.versions` is replaced whole); our RuntimeAccess CRD goes.
    let rollback_crds = [
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        &upstream_crd_arg,
    ];
    kubectl_ok(env, &rollback_crds).await?;
    kubectl_ok(env, &["delete", "crd", RUNTIME_ACCESS_CRD, "--timeout=60s"]).await?;
    stored_schema_is(env, &upstream_crds::crds()?).await?;
    // R7 applies upstream's manifests, CRDs included, client-side: they stay upstream's.
    kubectl_ok(env, &["apply", "-f", &upstream_crd_arg]).await?;
    stored_schema_is(env, &upstream_crds::crds()?).await?;
    // R6: the webhook's certificate Secret.
    kubectl_ok(env, &["delete", "secret", &webhook_secret, "-n", &ns]).await?;

    // What remains is what upstream accepts: every Runtime written back as upstream would
    // (its Update and its status Update) passes upstream's schema ...
    let dry = PostParams {
        dry_run: true,
        field_manager: Some(UPSTREAM_MANAGER.into()),
    };
    for name in runtimes_before.keys() {
        let rt = raw.get(name).await?;
        // Our status field is not in upstream's schema: the apiserver prunes it on read.
        assert!(
            rt.data["status"]["observedGeneration"].is_null()
                && !rt.data["status"]["state"].is_null(),
            "{name}: status under upstream's schema: {}",
            rt.data["status"]
        );
        raw.replace(name, &dry, &rt)
            .await
            .with_context(|| format!("{name}: upstream's Update after the rollback"))?;
        raw.replace_status(name, &dry, &rt)
            .await
            .with_context(|| format!("{name}: upstream's status Update after the rollback"))?;
        assert_eq!(
            rt.finalizers(),
            [names::RUNTIME_FINALIZER],
            "{name}: only upstream's finalizer"
        );
    }
    // ... and nothing of ours blocks upstream's deletion of a runtime: the Shoot, then the
    // GardenerCluster and its Secret, then the Runtime's finalizer (`sFnDelete*`).
    let rollback_laid: &Laid = &laid[1];
    let id = rollback_laid.id.as_str();
    runtimes.delete(id, &DeleteParams::default()).await?;
    shoots
        .patch(
            &rollback_laid.shoot,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {names::GARDENER_ANNOTATION_CONFIRM_DELETION: "true"}}})),
        )
        .await?;
    shoots
        .delete(&rollback_laid.shoot, &DeleteParams::default())
        .await?;
    gone(&shoots, &rollback_laid.shoot).await?;
    gcs.delete(id, &DeleteParams::default()).await?;
    gone(&gcs, id).await?;
    let secret_name = names::kubeconfig_secret_name(id);
    secrets
        .delete(&secret_name, &DeleteParams::default())
        .await?;
    gone(&secrets, &secret_name).await?;
    runtimes
        .patch(
            id,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    gone(&runtimes, id).await?;

    // The remaining kubeconfig Secrets keep upstream's labels and annotations; ours added an
    // owner reference to their GardenerCluster (the garbage collector deletes the Secret with
    // it, as upstream does itself).
    for l in laid.iter().filter(|l| l.id != id) {
        let secret = secrets.get(&names::kubeconfig_secret_name(&l.id)).await?;
        let (labels, annotations, finalizers, owners) = meta_of(&secret.metadata);
        let (labels_before, mut annotations_before, _, _) = meta_of(&l.secret_before.metadata);
        if l.due {
            annotations_before.insert(
                names::ANNOTATION_LAST_SYNC.into(),
                last_sync(&secret).unwrap_or_default(),
            );
            // Ours notes the validity Gardener issued with a kubeconfig it signs.
            annotations_before.insert(
                names::ANNOTATION_VALID_UNTIL.into(),
                secret
                    .annotations()
                    .get(names::ANNOTATION_VALID_UNTIL)
                    .cloned()
                    .context("a rotated Secret notes its validity")?,
            );
        }
        assert_eq!(labels, labels_before, "{}: Secret labels", l.provider);
        assert_eq!(
            annotations, annotations_before,
            "{}: Secret annotations",
            l.provider
        );
        assert!(finalizers.is_empty(), "{}: Secret finalizers", l.provider);
        assert_eq!(
            owners,
            [gcs.get(&l.id).await?.uid().context("uid")?],
            "{}: Secret owners",
            l.provider
        );
    }
    Ok(())
}

/// A Runtime upstream stored (it has no webhook) that our validation refuses: a worker pool
/// name that is not a DNS label (Gardener refuses the Shoot; upstream leaves the Runtime
/// `Pending` with its create error).
async fn lay_down_invalid(env: &TestEnv, ns: &str, id: &str) -> Result<()> {
    let path = repo_root().join("tests/fixtures/takeover/aws.yaml");
    let text = std::fs::read_to_string(&path)?
        .replace("RUNTIME_ID", id)
        .replace("SHOOT_NAME", &shoot_name(id))
        .replace("KCP_NAMESPACE", ns);
    let fixture: Value = serde_yaml_ng::from_str(&text)?;
    let mut rt = fixture["runtime"].clone();
    rt["spec"]["shoot"]["provider"]["workers"][0]["name"] = json!("Cpu_Worker");
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, ns);
    runtimes
        .create(&PostParams::default(), &serde_json::from_value(rt)?)
        .await?;
    let update = PatchParams {
        field_manager: Some(UPSTREAM_MANAGER.into()),
        ..PatchParams::default()
    };
    runtimes
        .patch(
            id,
            &update,
            &Patch::Merge(json!({"metadata": {"finalizers": [names::RUNTIME_FINALIZER]}})),
        )
        .await?;
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    runtimes
        .patch_status(
            id,
            &update,
            &Patch::Merge(json!({"status": {"state": "Pending", "conditions": [{
                "type": "Provisioned", "status": "False", "reason": "GardenerErr",
                "message": "Gardener API create error: Shoot.core.gardener.cloud is invalid",
                "lastTransitionTime": now,
            }]}})),
        )
        .await?;
    Ok(())
}

async fn kubectl_ok(env: &TestEnv, args: &[&str]) -> Result<String> {
    let (ok, out) = kubectl(env, args, None).await;
    ensure!(ok, "kubectl {}: {out}", args.join(" "));
    Ok(out)
}

async fn crds_established(env: &TestEnv, names: &[&str]) -> Result<()> {
    let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    let qualified: Vec<String> = names.iter().map(|n| format!("crd/{n}")).collect();
    args.extend(qualified.iter().map(String::as_str));
    kubectl_ok(env, &args).await.map(|_| ())
}

/// The stored CRDs of `expected` have exactly its schemas.
async fn stored_schema_is(env: &TestEnv, expected: &[CustomResourceDefinition]) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(env.kcp_client().await?);
    for crd in expected {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let stored = api.get(&name).await?;
        let schemas = |c: &CustomResourceDefinition| -> Result<Vec<Value>> {
            c.spec
                .versions
                .iter()
                .map(|v| Ok(serde_json::to_value(&v.schema)?))
                .collect()
        };
        assert_eq!(
            schemas(&stored)?,
            schemas(crd)?,
            "{name}: the stored schema is not the applied one"
        );
    }
    Ok(())
}

/// `kim-webhook validate -f - --converter-config-filepath <the test configuration>` on `yaml`:
/// (exit code, output).
async fn kim_webhook_validate(dir: &Path, yaml: &str) -> Result<(Option<i32>, String)> {
    let config =
        kim_tests::fixtures::write_converter_config(dir, kim_tests::fixtures::PROJECT_NAME)?;
    let bin = sibling_binary("kim-webhook");
    let yaml = yaml.to_owned();
    tokio::task::spawn_blocking(move || -> Result<(Option<i32>, String)> {
        use std::io::Write as _;
        let mut child = std::process::Command::new(&bin)
            .arg("validate")
            .args(["-f", "-"])
            .arg(format!("--converter-config-filepath={}", config.display()))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .with_context(|| bin.display().to_string())?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(yaml.as_bytes())?;
        let out = child.wait_with_output()?;
        Ok((
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ))
    })
    .await?
}

/// A binary of this workspace, next to the test binary's folder (`target/<profile>/`).
fn sibling_binary(name: &str) -> PathBuf {
    let bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent()?.parent().map(|d| d.join(name)))
        .unwrap_or_default();
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p {name}`",
        bin.display()
    );
    bin
}

/// Token Secrets that RuntimeAccesses own in the KCP namespace.
async fn secrets_managed_by_access(secrets: &Api<Secret>) -> Result<usize> {
    Ok(secrets
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|s| {
            s.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "RuntimeAccess")
        })
        .count())
}

async fn gone<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(&format!("{name} gone"), TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none())
    })
    .await
}

/// Writes of Shoots (no subresource) by `user`, as (verb, name, code).
fn shoot_writes_by(env: &TestEnv, user: &str) -> Result<Vec<(String, String, i64)>> {
    Ok(env
        .audit_events_of(user)?
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "shoots"
                && e["objectRef"]["subresource"].is_null()
                && !matches!(e["verb"].as_str(), Some("get" | "list" | "watch"))
        })
        .map(|e| {
            (
                e["verb"].as_str().unwrap_or_default().to_owned(),
                e["objectRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                e["responseStatus"]["code"].as_i64().unwrap_or_default(),
            )
        })
        .collect())
}
