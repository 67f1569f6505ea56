//! Adoption of a Shoot written the way upstream KIM wrote it: with the deprecated
//! `spec.secretBindingName`. Applying our Shoot over it would leave both binding fields set,
//! which Gardener refuses; the controller migrates it with one full update (Gardener allows
//! removing `secretBindingName` only in the update that sets `credentialsBindingName` to a
//! binding of the same Secret) and the Runtime becomes Ready. Fields the controller does not
//! manage survive the full update. A Shoot whose DNS extension names the provider's credentials
//! by the deprecated `secretName` (upstream's before 2026-05) gets today's reference.

use std::time::Duration;

use anyhow::{Context as _, Result};
use kim_shared::api::RuntimeState;
use kim_shared::gardener::Shoot;
use kim_shared::names;
use kim_tests::controller::*;
use kim_tests::testenv::TestEnv;
use kube::Api;
use kube::api::PostParams;

/// A version Gardener v1.149 still allows `secretBindingName` for (forbidden from 1.34) and
/// that the test cloud profile offers.
const OLD_VERSION: &str = "1.33.9";

/// The sample Runtime at [`OLD_VERSION`].
fn runtime_at_old_version(ns: &str, id: &str) -> Result<kim_shared::api::Runtime> {
    let mut rt = sample_runtime(ns, id)?;
    if let Some(k) = rt.spec.shoot.kubernetes.as_mut() {
        k.version = Some(OLD_VERSION.into());
    }
    Ok(rt)
}

/// The structured-auth ConfigMap of `converted` in the Gardener project, as upstream KIM
/// created it before the Shoot.
async fn create_structured_auth(
    env: &TestEnv,
    converted: &kim_shared::convert::Converted,
) -> Result<()> {
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(
        env.garden_client().await?,
        kim_tests::fixtures::PROJECT_NAMESPACE,
    );
    if let Some(cm) = &converted.structured_auth {
        cms.create(&PostParams::default(), cm).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shoot_with_secret_binding_name_is_migrated_and_becomes_ready() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-migrate").await?;
    let id = format!("rt-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = runtime_at_old_version(&ns, &id)?;

    // The Shoot as upstream KIM created it before this controller took over.
    let ctl = start_controller(env, &ns, &[]).await?;
    let cfg = kim_shared::config::KimConfig::load(&kim_shared::config::ConfigPaths::new(
        ctl.dir.path().join("converter_config.json"),
    ))?;
    let converted = kim_shared::convert::to_shoot(&rt, &cfg, None)?;
    create_structured_auth(env, &converted).await?;
    let mut old = converted.shoot;
    old.spec.secret_binding_name = old.spec.credentials_binding_name.take();
    old.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("example.com/kept-by-full-update".into(), "yes".into());
    let shoots: Api<Shoot> = Api::namespaced(
        env.garden_client().await?,
        kim_tests::fixtures::PROJECT_NAMESPACE,
    );
    shoots
        .create(&PostParams::default(), &old)
        .await
        .map_err(|e| anyhow::anyhow!("create the upstream-style Shoot: {e:?}"))?;

    create(env, &rt).await?;
    let ready = wait_state(env, &ns, &id, RuntimeState::Ready, Duration::from_secs(120)).await?;
    let provisioned = ready
        .condition(names::condition::PROVISIONED)
        .context("Provisioned condition")?;
    assert_eq!(provisioned.status, "True", "{provisioned:?}");

    let shoot = shoots.get(&rt.spec.shoot.name).await?;
    assert_eq!(
        shoot.spec.secret_binding_name, None,
        "secretBindingName must be gone after the migration"
    );
    assert_eq!(
        shoot.spec.credentials_binding_name.as_deref(),
        Some(rt.spec.shoot.secret_binding_name.as_str()),
        "credentialsBindingName must name the Runtime's binding"
    );
    assert_eq!(
        shoot
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(names::SHOOT_ANNOTATION_RUNTIME_ID))
            .map(String::as_str),
        Some(id.as_str()),
        "the Shoot carries our annotations after the apply"
    );
    assert_eq!(shoot.spec.kubernetes.version.as_deref(), Some(OLD_VERSION));
    assert_eq!(
        shoot
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("example.com/kept-by-full-update"))
            .map(String::as_str),
        Some("yes"),
        "an annotation the controller does not manage survives"
    );
    ctl.stop().await;
    Ok(())
}

/// Starts a controller whose audit-log tenant file has no tenant for the sample's provider and
/// region (aws `eu-central-1`), with `extra` flags.
async fn controller_without_tenant(
    env: &TestEnv,
    ns: &str,
    extra: &[&str],
) -> Result<RunningController> {
    let (args, dir) = controller_args(env, ns, extra).await?;
    let path = dir.path().join("audit_log_tenants.json");
    let mut tenants: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    tenants["aws"]
        .as_object_mut()
        .context("aws tenants")?
        .remove("eu-central-1")
        .context("the example config has a tenant for aws eu-central-1")?;
    std::fs::write(&path, serde_json::to_string(&tenants)?)?;
    start_with_args(args, dir).await
}

/// `--audit-log-mandatory=false`: a Runtime whose region has no audit-log tenant is provisioned
/// without audit logging (the flag reaches the conversion, not only the pre-check).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn audit_log_optional_provisions_without_tenant() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-audit-opt").await?;
    let ctl = controller_without_tenant(env, &ns, &["--audit-log-mandatory=false"]).await?;
    let id = format!("rt-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id)?;
    create(env, &rt).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, Duration::from_secs(120)).await?;
    let shoots: Api<Shoot> = Api::namespaced(
        env.garden_client().await?,
        kim_tests::fixtures::PROJECT_NAMESPACE,
    );
    let shoot = shoots.get(&rt.spec.shoot.name).await?;
    let audit = shoot
        .spec
        .kubernetes
        .kube_api_server
        .as_ref()
        .and_then(|k| k.audit_config.as_ref());
    assert!(
        audit.is_none(),
        "no audit config without a tenant: {audit:?}"
    );
    ctl.stop().await;
    Ok(())
}

/// `--audit-log-mandatory` (the default): the same Runtime fails with upstream's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn audit_log_mandatory_fails_without_tenant() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-audit-req").await?;
    let ctl = controller_without_tenant(env, &ns, &[]).await?;
    let id = format!("rt-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id)?;
    create(env, &rt).await?;
    let failed = wait_state(env, &ns, &id, RuntimeState::Failed, Duration::from_secs(60)).await?;
    let c = failed
        .condition(names::condition::PROVISIONED)
        .context("Provisioned condition")?;
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", names::reason::AUDIT_LOG_ERR)
    );
    let shoots: Api<Shoot> = Api::namespaced(
        env.garden_client().await?,
        kim_tests::fixtures::PROJECT_NAMESPACE,
    );
    assert!(
        shoots.get_opt(&rt.spec.shoot.name).await?.is_none(),
        "no Shoot is created"
    );
    ctl.stop().await;
    Ok(())
}

/// Upstream's Shoots before 2026-05 name the DNS provider's credentials by `secretName`, in
/// `spec.dns` and in the `shoot-dns-service` extension (Gardener forbids it from Kubernetes
/// 1.35). The first patch writes both with today's references, as upstream's patch does, and
/// the Runtime becomes Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dns_credentials_by_secret_name_are_migrated() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-dns-migrate").await?;
    let id = format!("rt-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = runtime_at_old_version(&ns, &id)?;
    let (args, dir) = controller_args(env, &ns, &[]).await?;
    let path = dir.path().join("converter_config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    cfg["converter"]["dns"] = serde_json::json!({
        "secretName": "dns-provider", "domainPrefix": "runtimes.example.org", "providerType": "aws-route53"
    });
    std::fs::write(&path, serde_json::to_string(&cfg)?)?;
    let cfg = kim_shared::config::KimConfig::load(&kim_shared::config::ConfigPaths::new(path))?;

    // The Shoot as upstream KIM created it (its create's field manager is `manager`).
    let converted = kim_shared::convert::to_shoot(&rt, &cfg, None)?;
    let garden = env.garden_client().await?;
    create_structured_auth(env, &converted).await?;
    // The DNS provider's credentials, which Gardener resolves.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(garden.clone(), kim_tests::fixtures::PROJECT_NAMESPACE);
    let secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "dns-provider"}, "stringData": {"fake": "fake"}
    }))?;
    match secrets.create(&PostParams::default(), &secret).await {
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        other => {
            other?;
        }
    }
    let mut old = serde_json::to_value(&converted.shoot)?;
    let domain = format!("{}.runtimes.example.org", rt.spec.shoot.name);
    old["spec"]["dns"]["providers"] = serde_json::json!([{
        "domains": {"include": [domain]}, "primary": true, "secretName": "dns-provider",
        "type": "aws-route53"
    }]);
    let extensions = old["spec"]["extensions"]
        .as_array_mut()
        .context("extensions")?;
    let dns = extensions
        .iter_mut()
        .find(|e| e["type"] == "shoot-dns-service")
        .context("the DNS extension")?;
    dns["providerConfig"]["providers"] = serde_json::json!([{
        "domains": {"include": [domain]}, "secretName": "dns-provider", "type": "aws-route53"
    }]);
    let old: Shoot = serde_json::from_value(old)?;
    let shoots: Api<Shoot> = Api::namespaced(garden, kim_tests::fixtures::PROJECT_NAMESPACE);
    let pp = PostParams {
        field_manager: Some("manager".into()),
        ..Default::default()
    };
    shoots
        .create(&pp, &old)
        .await
        .map_err(|e| anyhow::anyhow!("create the upstream-style Shoot: {e:?}"))?;

    let ctl = start_with_args(args, dir).await?;
    create(env, &rt).await?;
    let ready = wait_state(env, &ns, &id, RuntimeState::Ready, Duration::from_secs(120)).await?;
    let provisioned = ready
        .condition(names::condition::PROVISIONED)
        .context("Provisioned condition")?;
    assert_eq!(provisioned.status, "True", "{provisioned:?}");

    let shoot = serde_json::to_value(shoots.get(&rt.spec.shoot.name).await?)?;
    // Below Kubernetes 1.35 Gardener keeps `secretName` and `credentialsRef` of a Secret in
    // step itself; only the extension's config is left to the patch.
    assert_eq!(
        shoot["spec"]["dns"]["providers"][0]["credentialsRef"],
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "name": "dns-provider"}),
    );
    let dns = shoot["spec"]["extensions"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["type"] == "shoot-dns-service"))
        .context("the DNS extension")?;
    assert_eq!(
        dns["providerConfig"]["providers"],
        serde_json::json!([{
            "credentials": "shoot-dns-service-dns-provider",
            "domains": {"include": [domain]}, "type": "aws-route53"
        }]),
        "the DNS extension names the credentials as a resource"
    );
    // Upstream's create entry hands what the apply writes of a worker pool over to it, and
    // keeps the rest.
    let create_entry = shoot["metadata"]["managedFields"]
        .as_array()
        .and_then(|m| {
            m.iter()
                .find(|e| e["manager"] == "manager" && e["operation"] == "Update")
        })
        .context("upstream's create entry")?;
    let owned = &create_entry["fieldsV1"];
    assert!(
        owned["f:metadata"]["f:annotations"]
            .get(format!("f:{}", names::SHOOT_ANNOTATION_RUNTIME_ID))
            .is_some(),
        "{create_entry}"
    );
    let pool = &owned["f:spec"]["f:provider"]["f:workers"]["k:{\"name\":\"cpu-worker-0\"}"];
    assert!(
        pool.get("f:maximum").is_none() && pool.get("f:machine").is_some(),
        "the apply owns the pool's size alone: {create_entry}"
    );
    ctl.stop().await;
    Ok(())
}
