//! Dedicated audit logging (`--dedicated-audit-logging-enabled`) end to end, with KALM's
//! `AuditLog` CRD installed in the KCP and the controller bound to exactly the Role of
//! `deploy/controller/rbac.yaml`:
//!
//! - flag off: a Runtime asking for dedicated logging becomes Ready and nothing of the pool,
//!   the runtime cluster or its status is touched;
//! - flag on: that existing Runtime claims an `AuditLog` directly (upstream ADR 006), its Shoot
//!   is patched to the stack's tenant (not while the Runtime suspends Shoot patching: then the
//!   Shoot is not written until the annotation goes), the read credentials land in
//!   `kyma-system/auditlog-read-credentials` of the shoot cluster, `status.auditLogCR` names the
//!   stack, the conditions and Events carry upstream's names;
//! - a new Runtime reserves before its Shoot exists and claims at the end (ADR 004); a Ready
//!   Runtime whose spec asks only now claims on its patch, and keeps the stack when it stops
//!   asking;
//! - attacks: a Runtime carrying another Runtime's runtime ID gets nothing and takes nothing
//!   when deleted; an `AuditLog` naming a Secret that holds a kubeconfig as read credentials
//!   gets it refused; an empty pool fails the Runtime until KALM adds a stack;
//! - deletion orphans the claimed stacks; switching the flag off again removes the copied
//!   credentials and the status fields;
//! - no Secret value appears in the controller's logs, the Events or any Runtime status.
//!
//! Its own environment: every Runtime gets the same shoot cluster, whose
//! `kyma-system/auditlog-read-credentials` would be written by other tests' Runtimes too.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use super::LogBuffer;
use anyhow::{Context as _, Result, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};
use kim_shared::api::audit_log::{AuditLog, AuditLogConfig, AuditLogSpec};
use kim_shared::api::{Runtime, RuntimeState};
use kim_shared::audit_log::{LABEL_RESERVED_AT, LABEL_RESERVED_FOR_RUNTIME_ID};
use kim_shared::names::{condition, reason};
use kim_tests::controller::{
    KillableController, controller_args, create, eventually, sample_runtime, wait_state,
};
use kim_tests::fixtures;
use kim_tests::testenv::{TestEnv, TestEnvOptions, repo_root};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const REGION: &str = "eu-central-1";
const WAIT: Duration = Duration::from_secs(180);

fn logs() -> &'static LogBuffer {
    static LOGS: OnceLock<LogBuffer> = OnceLock::new();
    LOGS.get_or_init(LogBuffer::default)
}

fn log_text() -> String {
    logs()
        .0
        .lock()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Everything the controller logs with `--log-level=debug`, as JSON.
fn log_dispatch() -> tracing::Dispatch {
    tracing::Dispatch::new(
        tracing_subscriber::fmt()
            .with_env_filter(
                kim_controller::logging::filter(
                    &kim_controller::runner::log_filter("debug"),
                    "--log-level",
                )
                .expect("the filter of --log-level=debug"),
            )
            .json()
            .with_current_span(true)
            .with_writer(logs().clone())
            .finish(),
    )
}

/// The Role and RoleBinding of `deploy/controller/rbac.yaml` in `ns`, and its ClusterRole and
/// ClusterRoleBinding (named after `ns`, so environments shared by tests keep them apart),
/// bound to `user`.
pub(super) async fn bind_deployed_role(kcp: &kube::Client, ns: &str, user: &str) -> Result<()> {
    bind_deployed_role_without(kcp, ns, user, None).await
}

/// [`bind_deployed_role`] with the Role's rules on `left_out` (a resource) removed.
pub(super) async fn bind_deployed_role_without(
    kcp: &kube::Client,
    ns: &str,
    user: &str,
    left_out: Option<&str>,
) -> Result<()> {
    let text = std::fs::read_to_string(repo_root().join("deploy/controller/rbac.yaml"))?;
    let subjects = Some(vec![Subject {
        kind: "User".into(),
        name: user.to_owned(),
        api_group: Some("rbac.authorization.k8s.io".into()),
        namespace: None,
    }]);
    let cluster_name = |name: Option<&str>| format!("{}-{ns}", name.unwrap_or_default());
    for value in fixtures::yaml_documents(&text)? {
        match value["kind"].as_str() {
            Some("Role") => {
                let mut role: Role = serde_json::from_value(value)?;
                role.metadata.namespace = Some(ns.to_owned());
                if let (Some(resource), Some(rules)) = (left_out, role.rules.as_mut()) {
                    rules.retain(|r| !r.resources.iter().flatten().any(|x| x == resource));
                }
                Api::<Role>::namespaced(kcp.clone(), ns)
                    .create(&PostParams::default(), &role)
                    .await?;
            }
            Some("RoleBinding") => {
                let mut binding: RoleBinding = serde_json::from_value(value)?;
                binding.metadata.namespace = Some(ns.to_owned());
                binding.subjects = subjects.clone();
                Api::<RoleBinding>::namespaced(kcp.clone(), ns)
                    .create(&PostParams::default(), &binding)
                    .await?;
            }
            Some("ClusterRole") => {
                let mut role: ClusterRole = serde_json::from_value(value)?;
                role.metadata.name = Some(cluster_name(role.metadata.name.as_deref()));
                Api::<ClusterRole>::all(kcp.clone())
                    .create(&PostParams::default(), &role)
                    .await?;
            }
            Some("ClusterRoleBinding") => {
                let mut binding: ClusterRoleBinding = serde_json::from_value(value)?;
                binding.metadata.name = Some(cluster_name(binding.metadata.name.as_deref()));
                binding.role_ref.name = cluster_name(Some(&binding.role_ref.name));
                binding.subjects = subjects.clone();
                Api::<ClusterRoleBinding>::all(kcp.clone())
                    .create(&PostParams::default(), &binding)
                    .await?;
            }
            other => bail!("unexpected kind {other:?} in deploy/controller/rbac.yaml"),
        }
    }
    Ok(())
}

/// A controller for `ns` whose KCP identity is `user` (bound to the deployed Role), logging
/// into [`logs`].
async fn start(env: &TestEnv, ns: &str, user: &str, dedicated: bool) -> Result<KillableController> {
    let flag = format!("--dedicated-audit-logging-enabled={dedicated}");
    let (mut args, dir) = controller_args(env, ns, &[flag.as_str()]).await?;
    kim_tests::controller::reach_kcp_as(env, &mut args, &dir, user)?;
    Ok(
        KillableController::start_with_args(args, dir, Some(log_dispatch()))
            .await?
            .0,
    )
}

/// A stack of KALM's pool: `SiemApproved` (unless `state` says otherwise) for `regions`, its
/// read credentials Secret named `read_secret`.
async fn add_audit_log(
    api: &Api<AuditLog>,
    name: &str,
    regions: &[&str],
    state: &str,
    read_secret: &str,
) -> Result<()> {
    let a = AuditLog::new(
        name,
        AuditLogSpec {
            platform_region: "cf-eu10".into(),
            regions: regions.iter().map(|r| (*r).to_owned()).collect(),
            subaccount_id: Some(format!("sa-{name}")),
            config: Some(AuditLogConfig {
                service_url: Some(format!("https://auditlog.{name}.example.com")),
                gardener_secret_name: Some(format!("write-{name}")),
                read_creds_secret_name: Some(read_secret.to_owned()),
            }),
            ..Default::default()
        },
    );
    api.create(&PostParams::default(), &a).await?;
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"state": state}})),
    )
    .await?;
    Ok(())
}

/// A read-credentials Secret as KALM stores it, with a value unique to the run.
async fn add_read_secret(api: &Api<Secret>, name: &str, value: &str) -> Result<()> {
    let mut s = Secret::default();
    s.metadata.name = Some(name.to_owned());
    s.type_ = Some("Opaque".into());
    s.data = Some(BTreeMap::from([
        (
            "clientid".to_owned(),
            ByteString(format!("id-{name}").into_bytes()),
        ),
        (
            "clientsecret".to_owned(),
            ByteString(value.as_bytes().to_vec()),
        ),
    ]));
    api.create(&PostParams::default(), &s).await?;
    Ok(())
}

fn cond(rt: &Runtime, type_: &str) -> Option<(String, String, String)> {
    rt.condition(type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until both audit-log conditions of `name` are True and it is Ready.
async fn wait_dedicated(
    env: &TestEnv,
    runtimes: &Api<Runtime>,
    ns: &str,
    name: &str,
) -> Result<Runtime> {
    eventually(
        &format!("{name}: dedicated audit log configured"),
        WAIT,
        || {
            let runtimes = runtimes.clone();
            let name = name.to_owned();
            async move {
                let rt = runtimes.get(&name).await?;
                let is_true = |t| cond(&rt, t).is_some_and(|c| c.0 == "True");
                Ok(is_true(condition::CUSTOM_AUDIT_LOG_CONFIGURED)
                    && is_true(condition::AUDIT_LOG_CREDENTIALS_COPIED))
            }
        },
    )
    .await
    .with_context(|| format!("{name} never got its dedicated audit log"))?;
    wait_state(env, ns, name, RuntimeState::Ready, WAIT).await
}

/// (tenantID, serviceURL, Secret of the extension's credentials resource) of a Shoot.
async fn shoot_tenant(garden: &kube::Client, shoot: &str) -> Result<(String, String, String)> {
    let shoots = fixtures::api_resource("core.gardener.cloud/v1beta1", "Shoot")?;
    let s: DynamicObject =
        Api::namespaced_with(garden.clone(), fixtures::PROJECT_NAMESPACE, &shoots)
            .get(shoot)
            .await?;
    let spec = &s.data["spec"];
    let ext = spec["extensions"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["type"] == "shoot-auditlog-service"))
        .context("no shoot-auditlog-service extension")?;
    let cfg = &ext["providerConfig"];
    let reference = cfg["secretReferenceName"].as_str().unwrap_or_default();
    let secret = spec["resources"]
        .as_array()
        .and_then(|l| l.iter().find(|r| r["name"] == reference))
        .and_then(|r| r["resourceRef"]["name"].as_str())
        .unwrap_or_default();
    Ok((
        cfg["tenantID"].as_str().unwrap_or_default().to_owned(),
        cfg["serviceURL"].as_str().unwrap_or_default().to_owned(),
        secret.to_owned(),
    ))
}

fn assigned(a: &AuditLog) -> Option<&str> {
    a.spec.assigned_to_runtime_id.as_deref()
}

fn reserved_for(a: &AuditLog) -> Option<&str> {
    a.labels()
        .get(LABEL_RESERVED_FOR_RUNTIME_ID)
        .map(String::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn audit_logs_are_reserved_claimed_copied_and_orphaned() -> Result<()> {
    let env = &TestEnv::start(TestEnvOptions::default())
        .await
        .unwrap_or_else(|e| panic!("the audit-log test's own environment: {e}"));
    let kcp = env.kcp_client().await?;
    let garden = env.garden_client().await?;
    kim_tests::testenv::crds::install_dir(
        &kcp,
        &repo_root().join("tests/fixtures/kalm-crds"),
        Duration::from_secs(60),
    )
    .await?;
    let ns = env.namespace("ctl-auditlog").await?;
    let suffix = ns[ns.len().saturating_sub(6)..].to_owned();
    let user = format!("kim-controller-{ns}");
    bind_deployed_role(&kcp, &ns, &user).await?;

    let pool: Api<AuditLog> = Api::namespaced(kcp.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(kcp.clone(), &ns);
    let runtimes: Api<Runtime> = Api::namespaced(kcp.clone(), &ns);
    let skr_secrets: Api<Secret> = Api::namespaced(env.shoot_client().await?, "kyma-system");
    let garden_secrets: Api<Secret> = Api::namespaced(garden.clone(), fixtures::PROJECT_NAMESPACE);
    let secret_values: Vec<String> = (1..=3).map(|i| format!("s3cr3t-{i}-{suffix}")).collect();

    // KALM's pool: two stacks for the region, one of another region, one still provisioning.
    for (name, value) in [("al-1", &secret_values[0]), ("al-2", &secret_values[1])] {
        add_read_secret(&secrets, &format!("read-{name}"), value).await?;
    }
    add_audit_log(
        &pool,
        "al-0-other",
        &["us-east-1"],
        "SiemApproved",
        "read-al-0",
    )
    .await?;
    add_audit_log(
        &pool,
        "al-1",
        &[REGION, "eu-west-1"],
        "SiemApproved",
        "read-al-1",
    )
    .await?;
    add_audit_log(&pool, "al-2", &[REGION], "RegistrationReady", "read-al-2").await?;
    add_audit_log(&pool, "al-pending", &[REGION], "Pending", "read-al-pending").await?;
    // The write credentials the Shoots reference must exist in the Gardener project.
    for name in ["al-1", "al-2", "al-3", "al-4"] {
        let mut s = Secret::default();
        s.metadata.name = Some(format!("write-{name}"));
        s.string_data = Some(BTreeMap::from([(
            "auditlog-credentials".into(),
            "test".into(),
        )]));
        garden_secrets.create(&PostParams::default(), &s).await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 1. Flag off: a Runtime asking for dedicated logging gets the shared tenant, nothing else.
    let id_a = format!("ala-{suffix}");
    let mut rt_a = sample_runtime(&ns, &id_a)?;
    rt_a.spec.audit_log_access_enabled = Some(true);
    let ctl = start(env, &ns, &user, false).await?;
    create(env, &rt_a).await?;
    let ready = wait_state(env, &ns, &id_a, RuntimeState::Ready, WAIT).await?;
    assert_eq!(
        ready.status.as_ref().and_then(|s| s.audit_log_cr.clone()),
        None
    );
    assert_eq!(cond(&ready, condition::CUSTOM_AUDIT_LOG_CONFIGURED), None);
    assert_eq!(cond(&ready, condition::AUDIT_LOG_CREDENTIALS_COPIED), None);
    for a in pool.list(&Default::default()).await? {
        assert_eq!(
            (assigned(&a), reserved_for(&a)),
            (None, None),
            "{}",
            a.name_any()
        );
    }
    assert!(
        skr_secrets
            .get_opt("auditlog-read-credentials")
            .await?
            .is_none()
    );
    let shared = shoot_tenant(&garden, &rt_a.spec.shoot.name).await?;
    assert!(
        !shared.0.starts_with("sa-al-"),
        "shared tenant expected: {shared:?}"
    );
    ctl.stop().await;

    // 2. Flag on: the existing Runtime claims a stack directly and is migrated; not while it
    // carries the annotation that suspends Shoot patching: the patch to the dedicated tenant
    // waits for its removal like every other patch.
    let suspend = |on: bool| {
        json!({"metadata": {"annotations": {
            kim_shared::names::ANNOTATION_SUSPEND_PATCH_RECONCILIATION: on.then_some("true")}}})
    };
    runtimes
        .patch(&id_a, &PatchParams::default(), &Patch::Merge(suspend(true)))
        .await?;
    let shoots = fixtures::api_resource("core.gardener.cloud/v1beta1", "Shoot")?;
    let shoot_api: Api<DynamicObject> =
        Api::namespaced_with(garden.clone(), fixtures::PROJECT_NAMESPACE, &shoots);
    let before = shoot_api.get(&rt_a.spec.shoot.name).await?;
    let log_start = log_text().len();
    let ctl = start(env, &ns, &user, true).await?;
    const HELD: &str = "not patched while Shoot patching is suspended";
    eventually(
        "the patch to the dedicated tenant is held on two passes",
        WAIT,
        || async {
            let rt = runtimes.get(&id_a).await?;
            let held = cond(&rt, condition::CUSTOM_AUDIT_LOG_CONFIGURED)
                .is_some_and(|c| c.0 == "Unknown" && c.2.contains("Shoot patching is suspended"));
            Ok(held && log_text()[log_start..].matches(HELD).count() >= 2)
        },
    )
    .await?;
    let held = shoot_api.get(&rt_a.spec.shoot.name).await?;
    assert_eq!(
        (held.metadata.generation, held.metadata.resource_version),
        (before.metadata.generation, before.metadata.resource_version),
        "the suspended Runtime's Shoot is not written"
    );
    assert_eq!(shoot_tenant(&garden, &rt_a.spec.shoot.name).await?, shared);
    assert!(
        !log_text()[log_start..].contains("patching Shoot"),
        "no Shoot patch while suspended"
    );
    // The runtime cluster's admission refuses the copy and quotes the read credentials back
    // (a customer's webhook can): they reach neither the condition nor the log.
    let shoot_admin = env.shoot_client().await?;
    let refusal = kim_tests::refusal::Refusal::create_with_message_expression(
        &shoot_admin,
        &format!("echo-read-credentials-{suffix}"),
        json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
               "resources": ["secrets"]}),
        "object.metadata.name != 'auditlog-read-credentials'",
        "'denied, you sent ' + string(object.data.clientsecret)",
    )
    .await?;
    let probe_ns = env.shoot_namespace("echo-probe").await?;
    let probes: Api<Secret> = Api::namespaced(shoot_admin.clone(), &probe_ns);
    eventually("the echoing policy refuses", WAIT, || async {
        let mut probe = Secret::default();
        probe.metadata.name = Some("auditlog-read-credentials".into());
        probe.data = Some(BTreeMap::from([(
            "clientsecret".to_owned(),
            ByteString(b"probe-value".to_vec()),
        )]));
        let refused = match probes.create(&PostParams::default(), &probe).await {
            Ok(_) => {
                probes
                    .delete("auditlog-read-credentials", &DeleteParams::default())
                    .await?;
                false
            }
            // Secret data reach CEL as their base64.
            Err(e) => e.to_string().contains("denied, you sent cHJvYmUtdmFsdWU="),
        };
        Ok(refused)
    })
    .await?;
    let log_start = log_text().len();
    runtimes
        .patch(
            &id_a,
            &PatchParams::default(),
            &Patch::Merge(suspend(false)),
        )
        .await?;
    let refused_copy = || async {
        let rt = runtimes.get(&id_a).await?;
        anyhow::Ok(
            cond(&rt, condition::AUDIT_LOG_CREDENTIALS_COPIED).filter(|c| {
                c.1 == reason::CREDENTIALS_COPY_ERR && c.2.contains("denied, you sent")
            }),
        )
    };
    eventually("the refused copy in the status", WAIT, || async {
        Ok(refused_copy().await?.is_some())
    })
    .await?;
    let message = refused_copy().await?.map(|c| c.2).unwrap_or_default();
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(&secret_values[0]);
    assert!(
        !message.contains(&secret_values[0]) && !message.contains(&encoded),
        "the read credentials in the condition: {message}"
    );
    refusal.delete().await?;
    let a = wait_dedicated(env, &runtimes, &ns, &id_a).await?;
    assert!(
        log_text()[log_start..].contains("denied, you sent")
            && !log_text()[log_start..].contains(&secret_values[0])
            && !log_text()[log_start..].contains(&encoded),
        "the refused copy is logged without the read credentials, even at debug level"
    );
    assert_eq!(
        a.status.as_ref().and_then(|s| s.audit_log_cr.as_deref()),
        Some("al-1")
    );
    assert_eq!(
        cond(&a, condition::CUSTOM_AUDIT_LOG_CONFIGURED),
        Some((
            "True".into(),
            reason::CUSTOM_AUDIT_LOG_CONFIGURED.into(),
            "Custom AuditLog shoot configuration completed".into()
        ))
    );
    assert_eq!(
        cond(&a, condition::AUDIT_LOG_CREDENTIALS_COPIED),
        Some((
            "True".into(),
            reason::CREDENTIALS_COPIED.into(),
            "Audit log read credentials copied to runtime".into()
        ))
    );
    let al1 = pool.get("al-1").await?;
    assert_eq!(assigned(&al1), Some(id_a.as_str()));
    assert_eq!(reserved_for(&al1), Some(id_a.as_str()));
    assert!(
        al1.labels()
            .get(LABEL_RESERVED_AT)
            .is_some_and(|t| t.parse::<i64>().is_ok())
    );
    assert_eq!(
        shoot_tenant(&garden, &rt_a.spec.shoot.name).await?,
        (
            "sa-al-1".into(),
            "https://auditlog.al-1.example.com".into(),
            "write-al-1".into()
        )
    );
    let copied = skr_secrets.get("auditlog-read-credentials").await?;
    let source = secrets.get("read-al-1").await?;
    assert_eq!(copied.data, source.data);
    assert_eq!(copied.type_.as_deref(), Some("Opaque"));
    assert_eq!(
        copied
            .labels()
            .get("operator.kyma-project.io/managed-by")
            .map(String::as_str),
        Some("infrastructure-manager")
    );

    // 3. A new Runtime: reserved before its Shoot exists, claimed at the end.
    let id_b = format!("alb-{suffix}");
    let mut rt_b = sample_runtime(&ns, &id_b)?;
    rt_b.spec.audit_log_access_enabled = Some(true);
    create(env, &rt_b).await?;
    let b = wait_dedicated(env, &runtimes, &ns, &id_b).await?;
    assert_eq!(
        b.status.as_ref().and_then(|s| s.audit_log_cr.as_deref()),
        Some("al-2")
    );
    let al2 = pool.get("al-2").await?;
    assert_eq!(assigned(&al2), Some(id_b.as_str()));
    let reserved_at: i64 = al2.labels()[LABEL_RESERVED_AT].parse()?;
    let shoots = fixtures::api_resource("core.gardener.cloud/v1beta1", "Shoot")?;
    let shoot_b: DynamicObject =
        Api::namespaced_with(garden.clone(), fixtures::PROJECT_NAMESPACE, &shoots)
            .get(&rt_b.spec.shoot.name)
            .await?;
    let created = shoot_b
        .metadata
        .creation_timestamp
        .clone()
        .context("Shoot created")?;
    assert!(
        reserved_at <= created.0.as_second(),
        "reserved at {reserved_at}, Shoot created at {created:?}"
    );
    assert_eq!(
        shoot_tenant(&garden, &rt_b.spec.shoot.name).await?.0,
        "sa-al-2"
    );
    let copied = skr_secrets.get("auditlog-read-credentials").await?;
    assert_eq!(copied.data, secrets.get("read-al-2").await?.data);

    // 4. A Runtime carrying A's runtime ID under another name: refused before any Shoot (by
    // the validation every Runtime passes first, ahead of the audit-log step's own check); its
    // deletion orphans nothing.
    let evil = format!("evil-{suffix}");
    let mut rt_evil = sample_runtime(&ns, &evil)?;
    rt_evil.spec.audit_log_access_enabled = Some(true);
    rt_evil
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("kyma-project.io/runtime-id".into(), id_a.clone());
    create(env, &rt_evil).await?;
    let failed = wait_state(env, &ns, &evil, RuntimeState::Failed, WAIT).await?;
    let (st, why, msg) = cond(&failed, condition::PROVISIONED).unwrap();
    assert_eq!(
        (st.as_str(), why.as_str()),
        ("False", reason::CONVERSION_ERR)
    );
    assert!(msg.contains("must equal the Runtime's name"), "{msg}");
    assert_eq!(
        failed.status.as_ref().and_then(|s| s.audit_log_cr.clone()),
        None
    );
    assert!(
        Api::<DynamicObject>::namespaced_with(garden.clone(), fixtures::PROJECT_NAMESPACE, &shoots)
            .get_opt(&rt_evil.spec.shoot.name)
            .await?
            .is_none(),
        "no Shoot for the impostor"
    );
    runtimes.delete(&evil, &DeleteParams::default()).await?;
    eventually("the impostor is gone", WAIT, || {
        let runtimes = runtimes.clone();
        let evil = evil.clone();
        async move { Ok(runtimes.get_opt(&evil).await?.is_none()) }
    })
    .await?;
    let al1 = pool.get("al-1").await?;
    assert_eq!(
        (assigned(&al1), al1.spec.orphaned),
        (Some(id_a.as_str()), None)
    );

    // 5. Pool exhausted: a new Runtime fails before its Shoot; a stack whose read credentials
    // are a kubeconfig (as the Gardener credentials Secret holds one) is added: the Runtime
    // gets its logs but not that Secret. (KALM's CRD makes the name immutable: it is chosen
    // when the stack is made.)
    let id_c = format!("alc-{suffix}");
    let mut rt_c = sample_runtime(&ns, &id_c)?;
    rt_c.spec.audit_log_access_enabled = Some(true);
    create(env, &rt_c).await?;
    let failed = wait_state(env, &ns, &id_c, RuntimeState::Failed, WAIT).await?;
    assert_eq!(
        cond(&failed, condition::PROVISIONED),
        Some((
            "False".into(),
            reason::CUSTOM_AUDIT_LOG_ERR.into(),
            format!(
                "Dedicated audit logging requested but no available configuration found: no available AuditLogCR in the pool for region {REGION}"
            )
        ))
    );
    let garden_creds = format!("garden-creds-{suffix}");
    let mut creds = Secret::default();
    creds.metadata.name = Some(garden_creds.clone());
    creds.string_data = Some(BTreeMap::from([(
        "kubeconfig".to_owned(),
        format!("apiVersion: v1\nkind: Config\nclusters:\n- name: garden-{suffix}\n"),
    )]));
    secrets.create(&PostParams::default(), &creds).await?;
    add_audit_log(&pool, "al-3", &[REGION], "SiemApproved", &garden_creds).await?;
    eventually("C's read credentials are refused", WAIT + WAIT, || {
        let runtimes = runtimes.clone();
        let id_c = id_c.clone();
        async move {
            let rt = runtimes.get(&id_c).await?;
            Ok(cond(&rt, condition::AUDIT_LOG_CREDENTIALS_COPIED)
                .is_some_and(|c| c.0 == "False" && c.1 == reason::CREDENTIALS_COPY_ERR))
        }
    })
    .await?;
    let c = runtimes.get(&id_c).await?;
    let (_, _, msg) = cond(&c, condition::AUDIT_LOG_CREDENTIALS_COPIED).unwrap();
    assert!(msg.contains("refused: it holds a kubeconfig"), "{msg}");
    assert_eq!(
        c.status.as_ref().map(|s| s.state),
        Some(RuntimeState::Failed)
    );
    assert_eq!(assigned(&pool.get("al-3").await?), Some(id_c.as_str()));
    let copied = skr_secrets.get("auditlog-read-credentials").await?;
    assert_eq!(
        copied.data,
        secrets.get("read-al-2").await?.data,
        "the runtime cluster keeps B's credentials, never the Gardener credentials"
    );

    // 6. An existing Runtime that asks only now (a spec change) claims directly on its patch;
    // turning the request off again keeps the dedicated tenant (irreversible).
    add_read_secret(&secrets, "read-al-4", &secret_values[2]).await?;
    add_audit_log(&pool, "al-4", &[REGION], "SiemApproved", "read-al-4").await?;
    let id_e = format!("ale-{suffix}");
    create(env, &sample_runtime(&ns, &id_e)?).await?;
    let e = wait_state(env, &ns, &id_e, RuntimeState::Ready, WAIT).await?;
    assert_eq!(e.status.as_ref().and_then(|s| s.audit_log_cr.clone()), None);
    assert_eq!(assigned(&pool.get("al-4").await?), None);
    let set_access = |on: bool| {
        let runtimes = runtimes.clone();
        let id_e = id_e.clone();
        async move {
            runtimes
                .patch(
                    &id_e,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"auditLogAccessEnabled": on}})),
                )
                .await
        }
    };
    set_access(true).await?;
    let e = wait_dedicated(env, &runtimes, &ns, &id_e).await?;
    assert_eq!(
        e.status.as_ref().and_then(|s| s.audit_log_cr.as_deref()),
        Some("al-4")
    );
    assert_eq!(assigned(&pool.get("al-4").await?), Some(id_e.as_str()));
    assert_eq!(
        shoot_tenant(&garden, &e.spec.shoot.name).await?.0,
        "sa-al-4"
    );
    assert_eq!(
        skr_secrets.get("auditlog-read-credentials").await?.data,
        secrets.get("read-al-4").await?.data
    );
    let patched = set_access(false).await?;
    let generation = patched.metadata.generation;
    eventually("E is Ready at its new generation", WAIT, || {
        let runtimes = runtimes.clone();
        let id_e = id_e.clone();
        async move {
            let rt = runtimes.get(&id_e).await?;
            Ok(rt.status.as_ref().is_some_and(|s| {
                s.state == RuntimeState::Ready && s.observed_generation == generation
            }))
        }
    })
    .await?;
    assert_eq!(
        shoot_tenant(&garden, &e.spec.shoot.name).await?.0,
        "sa-al-4"
    );

    // 6b. A KCP restored from a backup taken before E's claim: al-4 is free in the pool again
    // while E's Shoot writes to its tenant. A new Runtime asking for dedicated logging does not
    // get it (it would read E's audit logs) and fails as with an empty pool; E's next pass
    // claims al-4 back and keeps its Shoot on that tenant.
    pool.patch(
        "al-4",
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"labels": {LABEL_RESERVED_FOR_RUNTIME_ID: null, LABEL_RESERVED_AT: null}},
            "spec": {"assignedToRuntimeID": null},
        })),
    )
    .await?;
    let id_f = format!("alf-{suffix}");
    let mut rt_f = sample_runtime(&ns, &id_f)?;
    rt_f.spec.audit_log_access_enabled = Some(true);
    create(env, &rt_f).await?;
    let failed = wait_state(env, &ns, &id_f, RuntimeState::Failed, WAIT).await?;
    assert_eq!(
        cond(&failed, condition::PROVISIONED).map(|c| c.1),
        Some(reason::CUSTOM_AUDIT_LOG_ERR.to_owned())
    );
    // F got nothing. E may have claimed al-4 back already: any pass of E through the runtime
    // cluster's configuration does, not only a patch.
    let al4 = pool.get("al-4").await?;
    for taken in [assigned(&al4), reserved_for(&al4)] {
        assert!(
            taken.is_none_or(|owner| owner == id_e),
            "al-4 went to {taken:?}, not left free or to E"
        );
    }
    kim_tests::controller::annotate_runtime(
        &runtimes,
        &id_e,
        kim_shared::names::ANNOTATION_FORCE_PATCH_RECONCILIATION,
        Some("true"),
    )
    .await?;
    eventually("E claims al-4 back", WAIT, || {
        let pool = pool.clone();
        let id_e = id_e.clone();
        async move { Ok(assigned(&pool.get("al-4").await?) == Some(id_e.as_str())) }
    })
    .await?;
    wait_state(env, &ns, &id_e, RuntimeState::Ready, WAIT).await?;
    assert_eq!(
        shoot_tenant(&garden, &e.spec.shoot.name).await?.0,
        "sa-al-4"
    );
    assert!(
        log_text().contains("not handed out"),
        "the lost claim is logged"
    );

    // 7. Deletion orphans the claimed stacks; the others stay as they are.
    for id in [&id_b, &id_c, &id_e, &id_f] {
        runtimes.delete(id, &DeleteParams::default()).await?;
    }
    for id in [&id_b, &id_c, &id_e, &id_f] {
        eventually(&format!("{id} gone"), WAIT, || {
            let runtimes = runtimes.clone();
            let id = id.clone();
            async move { Ok(runtimes.get_opt(&id).await?.is_none()) }
        })
        .await?;
    }
    for (name, owner, orphaned) in [
        ("al-1", Some(id_a.as_str()), None),
        ("al-2", Some(id_b.as_str()), Some(true)),
        ("al-3", Some(id_c.as_str()), Some(true)),
        ("al-4", Some(id_e.as_str()), Some(true)),
        ("al-0-other", None, None),
        ("al-pending", None, None),
    ] {
        let a = pool.get(name).await?;
        assert_eq!((assigned(&a), a.spec.orphaned), (owner, orphaned), "{name}");
    }
    ctl.stop().await;

    // 8. Flag off again: the copied credentials and the status fields go; the claim stays.
    let ctl = start(env, &ns, &user, false).await?;
    eventually("A's audit-log status is removed", WAIT, || {
        let runtimes = runtimes.clone();
        let id_a = id_a.clone();
        async move {
            let rt = runtimes.get(&id_a).await?;
            Ok(rt.status.as_ref().is_some_and(|s| s.audit_log_cr.is_none())
                && cond(&rt, condition::CUSTOM_AUDIT_LOG_CONFIGURED).is_none()
                && cond(&rt, condition::AUDIT_LOG_CREDENTIALS_COPIED).is_none())
        }
    })
    .await?;
    wait_state(env, &ns, &id_a, RuntimeState::Ready, WAIT).await?;
    assert!(
        skr_secrets
            .get_opt("auditlog-read-credentials")
            .await?
            .is_none()
    );
    assert_eq!(assigned(&pool.get("al-1").await?), Some(id_a.as_str()));
    ctl.stop().await;

    // Events with upstream's reasons.
    let events: Vec<Event> = Api::<Event>::namespaced(kcp.clone(), &ns)
        .list(&Default::default())
        .await?
        .items;
    let reasons_of = |name: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .filter_map(|e| e.reason.clone())
            .collect()
    };
    for want in [
        reason::CUSTOM_AUDIT_LOG_CONFIGURED,
        reason::CREDENTIALS_COPIED,
    ] {
        assert!(
            reasons_of(&id_a).iter().any(|r| r == want),
            "{want}: {:?}",
            reasons_of(&id_a)
        );
    }
    assert!(
        reasons_of(&evil)
            .iter()
            .any(|r| r == reason::CONVERSION_ERR),
        "{:?}",
        reasons_of(&evil)
    );

    // No Secret value in logs, Events or statuses: the read credentials and A's kubeconfig.
    let mut needles: Vec<String> = secret_values.clone();
    needles.extend(secret_values.iter().map(|v| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(v)
    }));
    let kubeconfig = secrets.get(&format!("kubeconfig-{id_a}")).await?;
    let text = kubeconfig
        .data
        .as_ref()
        .and_then(|d| d.get("config"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default();
    for value in text.split_whitespace().filter(|w| w.len() > 40) {
        needles.push(value[value.len() - 32..].to_owned());
    }
    assert!(
        needles.len() > secret_values.len() * 2,
        "the kubeconfig holds long values"
    );
    let logs = log_text();
    assert!(
        logs.contains("Successfully copied read credentials"),
        "the logs were captured"
    );
    let haystacks = [
        ("logs", logs),
        ("events", serde_json::to_string(&events)?),
        (
            "statuses",
            serde_json::to_string(
                &runtimes
                    .list(&Default::default())
                    .await?
                    .items
                    .iter()
                    .map(|r| r.status.clone())
                    .collect::<Vec<_>>(),
            )?,
        ),
    ];
    for (what, hay) in &haystacks {
        for needle in &needles {
            assert!(
                !hay.contains(needle.as_str()),
                "a Secret value in the {what}"
            );
        }
    }
    Ok(())
}
