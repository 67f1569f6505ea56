//! The kube-apiserver ACL end to end (`--api-server-acl-enabled`): the controller reads the
//! operator CIDRs and the KCP's NAT address from the ConfigMap
//! `converter.kubernetes.kubeApiServer.acl.configMapName` in its namespace (upstream's format
//! and test data), writes the `acl` extension of a Runtime's Shoot from them, and a change of
//! the ConfigMap reaches the Shoot, also one made while no controller ran; without the
//! ConfigMap name the flag refuses to start.

use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use kim_shared::api::RuntimeState;
use kim_shared::gardener::Shoot;
use kim_tests::controller::*;
use kim_tests::fixtures::PROJECT_NAMESPACE;
use kim_tests::testenv::TestEnv;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);
const CONFIG_MAP: &str = "acl-ip-list";

/// The ACL ConfigMap of upstream's tests (`config-map-ips.yaml`).
fn upstream_config_map() -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP},
        "data": {
            "acl-list.json": "[\"2.2.2.2/29\",\"3.3.3.3/29\",\"4.4.4.4/29\"]",
            "kcp-external-nat-ip.json": "\"1.1.1.1/32\"",
        },
    }))
    .expect("ConfigMap")
}

/// Writes the controller's configuration again with `acl.configMapName` set (or removed).
fn set_acl_config_map(path: &std::path::Path, name: Option<&str>) -> Result<()> {
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let kubernetes = &mut config["converter"]["kubernetes"];
    match name {
        Some(name) => kubernetes["kubeApiServer"]["acl"] = json!({"configMapName": name}),
        None => {
            if let Some(api) = kubernetes
                .get_mut("kubeApiServer")
                .and_then(Value::as_object_mut)
            {
                api.remove("acl");
            }
        }
    }
    std::fs::write(path, serde_json::to_string_pretty(&config)?)?;
    Ok(())
}

/// Asks for an ACL allowing 203.0.113.0/24.
fn with_acl(rt: &mut kim_shared::api::Runtime) -> Result<()> {
    rt.spec
        .shoot
        .kubernetes
        .get_or_insert_with(Default::default)
        .kube_api_server
        .get_or_insert_with(Default::default)
        .acl = Some(serde_json::from_value(
        json!({"allowedCIDRs": ["203.0.113.0/24"]}),
    )?);
    Ok(())
}

fn acl_cidrs(shoot: &Shoot) -> Option<Value> {
    let ext = shoot
        .spec
        .extensions
        .as_ref()?
        .iter()
        .find(|e| e.type_ == "acl")?;
    let value = serde_json::to_value(ext).ok()?;
    (value["disabled"] == false).then(|| value["providerConfig"]["rule"]["cidrs"].clone())
}

/// Waits until the Shoot's ACL allows `cidr`.
async fn allows_eventually(shoots: &Api<Shoot>, name: &str, cidr: &str) -> Result<()> {
    eventually(
        &format!("the Shoot's ACL allows {cidr}"),
        TIMEOUT,
        || async {
            let shoot = shoots.get(name).await?;
            Ok(acl_cidrs(&shoot)
                .is_some_and(|c| c.as_array().is_some_and(|a| a.contains(&json!(cidr)))))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acl_comes_from_the_config_map_and_follows_its_changes() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-acl").await?;
    let kcp = env.kcp_client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(kcp.clone(), &ns);
    cms.create(&PostParams::default(), &upstream_config_map())
        .await?;

    let (args, dir) = controller_args(env, &ns, &["--api-server-acl-enabled"]).await?;
    set_acl_config_map(&args.converter_config_filepath, Some(CONFIG_MAP))?;
    let ctl = start_with_args(args, dir).await?;

    let id = format!("acl-{}", &ns[ns.len().saturating_sub(6)..]);
    let mut rt = sample_runtime(&ns, &id)?;
    with_acl(&mut rt)?;
    let shoot_name = rt.spec.shoot.name.clone();
    create(env, &rt).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;

    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    let shoot = shoots.get(&shoot_name).await?;
    assert_eq!(
        acl_cidrs(&shoot),
        Some(json!([
            "203.0.113.0/24",
            "2.2.2.2/29",
            "3.3.3.3/29",
            "4.4.4.4/29",
            "1.1.1.1/32"
        ])),
        "{:?}",
        shoot.spec.extensions
    );

    // The KCP's NAT address changes: the Shoot's ACL follows, without a change of the Runtime.
    let patch = json!({"data": {"kcp-external-nat-ip.json": "\"5.5.5.5/32\""}});
    cms.patch(CONFIG_MAP, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    allows_eventually(&shoots, &shoot_name, "5.5.5.5/32")
        .await
        .context("ACL ConfigMap change")?;
    let rt = wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    assert_eq!(
        rt.metadata.generation,
        Some(1),
        "the Runtime itself is unchanged"
    );

    // A change made while no controller runs reaches the Shoot after the next start: the
    // controller compares the Shoot with the ConfigMap, it does not need to see the change.
    ctl.stop().await;
    let patch = json!({"data": {"kcp-external-nat-ip.json": "\"6.6.6.6/32\""}});
    cms.patch(CONFIG_MAP, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    let (args, dir) = controller_args(env, &ns, &["--api-server-acl-enabled"]).await?;
    set_acl_config_map(&args.converter_config_filepath, Some(CONFIG_MAP))?;
    let _ctl = start_with_args(args, dir).await?;
    allows_eventually(&shoots, &shoot_name, "6.6.6.6/32")
        .await
        .context("ACL ConfigMap changed while no controller ran")?;

    // Without the ConfigMap a Runtime with an ACL cannot be converted: `ConversionErr` naming
    // it; once it is back, the Runtime proceeds on its own.
    cms.delete(CONFIG_MAP, &Default::default()).await?;
    let runtimes: Api<kim_shared::api::Runtime> = Api::namespaced(kcp.clone(), &ns);
    let patch = json!({"spec": {"shoot": {"kubernetes": {"kubeAPIServer": {"acl": {"allowedCIDRs": ["203.0.113.0/24", "198.51.100.0/24"]}}}}}});
    runtimes
        .patch(&id, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    let failed = wait_state(env, &ns, &id, RuntimeState::Failed, TIMEOUT).await?;
    let cond = failed
        .condition(kim_shared::names::condition::PROVISIONED)
        .context("Provisioned condition")?;
    assert_eq!(cond.reason, kim_shared::names::reason::CONVERSION_ERR);
    assert!(
        cond.message.contains(&format!(
            "the API server ACL ConfigMap {ns}/{CONFIG_MAP} does not exist"
        )),
        "{}",
        cond.message
    );
    cms.create(&PostParams::default(), &upstream_config_map())
        .await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    let shoot = shoots.get(&shoot_name).await?;
    assert_eq!(
        acl_cidrs(&shoot),
        Some(json!([
            "203.0.113.0/24",
            "198.51.100.0/24",
            "2.2.2.2/29",
            "3.3.3.3/29",
            "4.4.4.4/29",
            "1.1.1.1/32"
        ]))
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acl_flag_without_the_config_map_name_refuses_to_start() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-acl-cfg").await?;
    let (args, dir) = controller_args(env, &ns, &["--api-server-acl-enabled"]).await?;
    set_acl_config_map(&args.converter_config_filepath, None)?;
    let err = match start_with_args(args, dir).await {
        Ok(ctl) => {
            ctl.stop().await;
            anyhow::bail!("the controller started without the ACL ConfigMap name");
        }
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(
            "--api-server-acl-enabled needs converter.kubernetes.kubeApiServer.acl.configMapName"
        ),
        "{err}"
    );
    Ok(())
}

/// The controller's Role lacks ConfigMaps, so the ACL ConfigMap's watch never lists: a Runtime
/// with an ACL waits, saying so in `Provisioned`, and gets no Shoot (one without the operators'
/// and the KCP's addresses would lock them out).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runtime_with_an_acl_waits_while_the_config_map_cannot_be_read() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("ctl-acl-unread").await?;
    let kcp = env.kcp_client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(kcp.clone(), &ns);
    cms.create(&PostParams::default(), &upstream_config_map())
        .await?;
    let suffix = &ns[ns.len().saturating_sub(6)..];
    let user = format!("kim-acl-unread-{suffix}");
    super::audit_log::bind_deployed_role_without(&kcp, &ns, &user, Some("configmaps")).await?;
    let (mut args, dir) = controller_args(env, &ns, &["--api-server-acl-enabled"]).await?;
    set_acl_config_map(&args.converter_config_filepath, Some(CONFIG_MAP))?;
    reach_kcp_as(env, &mut args, &dir, &user)?;
    let ctl = start_with_args(args, dir).await?;

    let id = format!("aclu-{suffix}");
    let mut rt = sample_runtime(&ns, &id)?;
    with_acl(&mut rt)?;
    let shoot_name = rt.spec.shoot.name.clone();
    create(env, &rt).await?;
    // The Runtime says it waits for the ACL ConfigMap.
    let waiting = format!("the API server ACL ConfigMap {ns}/{CONFIG_MAP} has not been read yet");
    wait_condition(
        env,
        &ns,
        &id,
        RuntimeState::Pending,
        kim_shared::names::condition::PROVISIONED,
        |c| c.status == "Unknown" && c.message.contains(&waiting),
        TIMEOUT,
    )
    .await?;
    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    assert!(
        shoots.get_opt(&shoot_name).await?.is_none(),
        "a Shoot was created without the ACL ConfigMap's addresses"
    );
    ctl.stop().await;
    Ok(())
}
