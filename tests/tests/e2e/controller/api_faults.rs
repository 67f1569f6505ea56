//! API-level faults between the controller and Gardener: with a fault proxy answering 409s,
//! 5xx, 401s, 429s and Gardener's "not yet ready" 403s on Shoot create, get (list and live read),
//! patch, delete and `adminkubeconfig`, every Runtime shows the intermediate condition upstream
//! writes for that step (create, patch, kubeconfig, delete), still ends Ready and is deleted in
//! order, and the controller's JSON log holds no error-level line (in particular none for a
//! conflict).
//!
//! The fault classes run as tests in parallel; each has its own proxy, controller and
//! namespace. The controllers of this module's tests log into one buffer (each on a runtime of
//! its own whose threads write there, so other tests of the process do not); every fault here
//! is logged below error level (a retried one at info, a permanent one at warn: it is in the
//! status), so that buffer must not hold a single `ERROR` line.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::LogBuffer;
use anyhow::{Result, bail};
use kim_shared::api::{GardenerCluster, Runtime, RuntimeState};
use kim_shared::gardener::Shoot;
use kim_shared::names::{self, condition, reason};
use kim_tests::controller::*;
use kim_tests::faultproxy::{ApiFault, FaultProxy, ProxyResponse, Responder, Rule};
use kim_tests::fixtures::PROJECT_NAMESPACE;
use kim_tests::testenv::TestEnv;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(120);

impl LogBuffer {
    fn lines(&self) -> Vec<Value> {
        let text = self
            .0
            .lock()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// The log lines of this module's controllers.
fn logs() -> &'static LogBuffer {
    static LOGS: OnceLock<LogBuffer> = OnceLock::new();
    LOGS.get_or_init(LogBuffer::default)
}

/// The subscriber this module's controllers log to: into [`logs`], with the JSON layout of
/// `kim_controller::logging` with `--log-format=json`.
fn log_dispatch() -> tracing::Dispatch {
    static DISPATCH: OnceLock<tracing::Dispatch> = OnceLock::new();
    DISPATCH
        .get_or_init(|| {
            tracing::Dispatch::new(
                tracing_subscriber::fmt()
                    // The filter `kim-controller run` derives from its default `--log-level`.
                    .with_env_filter(tracing_subscriber::EnvFilter::new(
                        kim_controller::runner::log_filter("info"),
                    ))
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(logs().clone())
                    .finish(),
            )
        })
        .clone()
}

/// The runtime ID of a test's Runtime in `ns` and its Shoot's name.
fn runtime_in(ns: &str, label: &str) -> (String, String) {
    let id = format!("{label}-{}", &ns[ns.len().saturating_sub(5)..]);
    let shoot = shoot_name(&id);
    (id, shoot)
}

/// Starts a controller for `ns` reaching Gardener through `proxy`, logging into [`logs`];
/// returns it and its `/metrics` address.
async fn start_logged(
    env: &TestEnv,
    ns: &str,
    extra: &[&str],
    proxy: &FaultProxy,
) -> Result<(KillableController, std::net::SocketAddr)> {
    let wiring = Wiring {
        gardener: Some(proxy.access_via(env.kcp())),
        ..Default::default()
    };
    let (args, dir) = controller_args_wired(env, ns, extra, &wiring).await?;
    let (ctl, _, metrics) =
        KillableController::start_with_args(args, dir, Some(log_dispatch())).await?;
    Ok((ctl, metrics))
}

fn level(line: &Value) -> &str {
    line["level"].as_str().unwrap_or_default()
}

/// Fails with the offending lines if any line is at error level.
fn assert_no_error_lines(logs: &LogBuffer) {
    let errors: Vec<String> = logs
        .lines()
        .iter()
        .filter(|l| level(l) == "ERROR")
        .map(Value::to_string)
        .collect();
    assert!(
        errors.is_empty(),
        "error-level log lines under transient faults:\n{}",
        errors.join("\n")
    );
}

/// What the proxy answers in one test, per Gardener call.
struct Faults {
    /// Shoot create (POST .../shoots), until the condition shows.
    create: ApiFault,
    /// Shoot list (the watch cache's first lists) and live read during deletion.
    get: ApiFault,
    /// Shoot server-side apply (PATCH .../shoots/<name>), until the condition shows.
    patch: ApiFault,
    /// Shoot delete.
    delete: ApiFault,
    /// `shoots/<name>/adminkubeconfig` (the GardenerCluster reconciler).
    admin: ApiFault,
    /// HTTP codes the controller must have counted in `..._gardener_requests_total`.
    codes: &'static [&'static str],
    /// Message part of `Provisioned` while the patch fails (reason `Processing`, or
    /// `GardenerBusy` for `busy` answers).
    patch_message: &'static str,
    /// The answers are Gardener's "try later" ones (429, not yet ready): `Provisioned` says
    /// `GardenerBusy` while creates and patches fail, instead of upstream's reasons.
    busy: bool,
}

async fn wait_runtime(
    env: &TestEnv,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&Runtime) -> bool,
) -> Result<Runtime> {
    let api: Api<Runtime> = Api::namespaced(env.kcp_client().await?, ns);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let rt = api.get(name).await?;
        if pred(&rt) {
            return Ok(rt);
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "{name}: {what} not within {TIMEOUT:?}; status: {}",
                serde_json::to_string_pretty(&rt.status)?
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn has_condition(rt: &Runtime, type_: &str, status: &str, why: &str, message: &str) -> bool {
    rt.condition(type_)
        .is_some_and(|c| c.status == status && c.reason == why && c.message.contains(message))
}

fn state(rt: &Runtime) -> Option<RuntimeState> {
    rt.status.as_ref().map(|s| s.state)
}

async fn ends_where_upstream_says(label: &str, faults: Faults) -> Result<()> {
    let logs = logs();
    let env = TestEnv::shared().await?;
    let ns = env.namespace(label).await?;
    let (id, shoot) = runtime_in(&ns, label);
    let shoots_path = format!("/namespaces/{PROJECT_NAMESPACE}/shoots");
    let shoot_path = format!("{shoots_path}/{shoot}");
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let rule = |method: &str, path: &str, fault: &ApiFault, times: Option<u32>| Rule {
        method: Some(method.to_owned()),
        path_contains: path.to_owned(),
        fault: fault.clone(),
        times,
    };

    // Get: the Shoot watch's first two lists fail; create: every create fails until cleared.
    proxy.inject(rule("GET", &shoots_path, &faults.get, Some(2)));
    proxy.inject(rule("POST", &shoots_path, &faults.create, None));
    let (ctl, metrics) = start_logged(env, &ns, &[], &proxy).await?;
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    create(env, &sample_runtime(&ns, &id)?).await?;

    // Create: reason GardenerErr "Gardener API create error: ...", retried; transient, so
    // Pending (upstream shows Failed until the next pass; docs/upstream-differences.md,
    // "Transient errors keep `Pending`").
    let (create_reason, create_message) = if faults.busy {
        (
            reason::GARDENER_BUSY,
            "Gardener is busy, retrying: Gardener API create error",
        )
    } else {
        (reason::GARDENER_ERR, "Gardener API create error")
    };
    wait_runtime(env, &ns, &id, "create fault in Provisioned", |rt| {
        has_condition(
            rt,
            condition::PROVISIONED,
            "Unknown",
            create_reason,
            create_message,
        ) && state(rt) == Some(RuntimeState::Pending)
    })
    .await?;
    assert_eq!(
        proxy.served_count("GET", &shoots_path, &faults.get),
        2,
        "the Shoot watch's first lists got the fault: {:?}",
        proxy.served()
    );
    assert!(proxy.served_count("POST", &shoots_path, &faults.create) >= 1);
    proxy.clear();

    // adminkubeconfig: the GardenerCluster reconciler's first request fails; meanwhile the
    // Runtime waits with KubeconfigReady Unknown/GardenerClusterCRCreated, as upstream's does.
    let admin_path = format!("{shoot_path}/adminkubeconfig");
    proxy.inject(rule("POST", &admin_path, &faults.admin, Some(1)));
    wait_runtime(
        env,
        &ns,
        &id,
        "GardenerCluster waiting after an adminkubeconfig fault",
        |rt| {
            has_condition(
                rt,
                condition::KUBECONFIG_READY,
                "Unknown",
                reason::GARDENER_CLUSTER_CR_CREATED,
                "waiting for readiness",
            ) && proxy.served_count("POST", &admin_path, &faults.admin) == 1
        },
    )
    .await?;
    let ready = wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    assert!(
        has_condition(
            &ready,
            condition::PROVISIONED,
            "True",
            reason::SHOOT_CREATION_COMPLETED,
            ""
        ),
        "{:?}",
        ready.status
    );

    // Patch: Processing while the server-side apply fails, Ready after.
    proxy.inject(rule("PATCH", &shoot_path, &faults.patch, None));
    // An administrator no other test names: the shoot cluster is shared (see `AdminBindings`).
    let second = format!("{id}-second@myorg.com");
    let bindings = AdminBindings::start(env).await?;
    let patch = json_admins(&second);
    runtimes
        .patch(&id, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    wait_runtime(env, &ns, &id, "patch fault in Provisioned", |rt| {
        has_condition(
            rt,
            condition::PROVISIONED,
            "Unknown",
            if faults.busy {
                reason::GARDENER_BUSY
            } else {
                reason::PROCESSING
            },
            faults.patch_message,
        ) && state(rt) == Some(RuntimeState::Pending)
    })
    .await?;
    assert!(proxy.served_count("PATCH", &shoot_path, &faults.patch) >= 1);
    proxy.clear();
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    bindings
        .wait_bound(&second, Duration::from_secs(10))
        .await?;

    // Delete: two failed deletes (Deprovisioned False/GardenerShootDeleted
    // "Gardener API shoot delete error"), then the live read confirming the Shoot is gone fails
    // twice; the finalizer still goes last.
    proxy.inject(rule("DELETE", &shoot_path, &faults.delete, Some(2)));
    proxy.inject(rule("GET", &shoot_path, &faults.get, Some(2)));
    runtimes.delete(&id, &DeleteParams::default()).await?;
    let api = runtimes.clone();
    let mut saw_delete_fault = false;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let Some(rt) = api.get_opt(&id).await? else {
            break;
        };
        saw_delete_fault |= has_condition(
            &rt,
            condition::DEPROVISIONED,
            "False",
            reason::GARDENER_SHOOT_DELETED,
            "Gardener API shoot delete error",
        );
        if tokio::time::Instant::now() > deadline {
            bail!(
                "{id} not deleted within {TIMEOUT:?}; status: {}",
                serde_json::to_string_pretty(&rt.status)?
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        saw_delete_fault,
        "Deprovisioned never showed the delete fault"
    );
    assert_eq!(
        proxy.served_count("DELETE", &shoot_path, &faults.delete),
        2,
        "{:?}",
        proxy.served()
    );
    assert_eq!(
        proxy.served_count("GET", &shoot_path, &faults.get),
        2,
        "the live read before the finalizer goes got the fault: {:?}",
        proxy.served()
    );
    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    assert!(
        shoots.get_opt(&shoot).await?.is_none(),
        "Shoot gone before the finalizer"
    );
    let gcs: Api<GardenerCluster> = Api::namespaced(env.kcp_client().await?, &ns);
    assert!(
        gcs.get_opt(&id).await?.is_none(),
        "GardenerCluster gone before the finalizer"
    );

    // The controller counted the faulty answers by code, and "try later" answers to the
    // deletion as such (they back off like creates and patches).
    let metrics = metrics_text(metrics).await?;
    if faults.busy {
        let busy_deletes = metric_sum(
            &metrics,
            "infrastructure_manager_im_gardener_busy_total",
            &["operation=\"delete\""],
        );
        assert!(
            busy_deletes >= 1.0,
            "no busy answer to a Shoot delete counted: {busy_deletes}"
        );
    }
    for code in faults.codes {
        let n = metric_sum(
            &metrics,
            "infrastructure_manager_im_gardener_requests_total",
            &[&format!("code=\"{code}\"")],
        );
        assert!(n >= 1.0, "no Gardener request counted with code {code}");
    }
    ctl.stop().await;

    // The log was captured (this Runtime's reconciles logged) and holds no error line.
    // JSON lines carry the reconcile span's controller, object, `runtime_id` and `shoot`.
    let ours = logs
        .lines()
        .into_iter()
        .filter(|l| {
            l["span"]["runtime_id"].as_str() == Some(id.as_str())
                && l["span"]["shoot"].as_str() == Some(shoot.as_str())
                && l["span"]["controller"].as_str() == Some("runtime")
                && l["span"]["object"].as_str() == Some(id.as_str())
        })
        .count();
    assert!(ours > 0, "no log line of runtime {id} was captured");
    // Status writes never conflict (server-side apply): "object has been modified" appears
    // only where the proxy injected it.
    if faults.patch != ApiFault::Conflict {
        let modified: Vec<String> = logs
            .lines()
            .into_iter()
            .filter(|l| l["span"]["runtime_id"].as_str() == Some(id.as_str()))
            .map(|l| l.to_string())
            .filter(|l| l.contains("has been modified"))
            .collect();
        assert!(modified.is_empty(), "{modified:?}");
    }
    assert_no_error_lines(logs);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conflicts_are_retried_and_never_logged_as_errors() -> Result<()> {
    ends_where_upstream_says(
        "api-409",
        Faults {
            create: ApiFault::Conflict,
            get: ApiFault::Conflict,
            patch: ApiFault::Conflict,
            delete: ApiFault::Conflict,
            admin: ApiFault::Conflict,
            codes: &["409"],
            patch_message: "Shoot is pending for update after conflict error",
            busy: false,
        },
    )
    .await?;
    // Conflicts are logged, below error level.
    let conflict_lines = logs()
        .lines()
        .into_iter()
        .filter(|l| {
            let text = l.to_string();
            text.contains("api-409") && (text.contains("409") || text.contains("onflict"))
        })
        .map(|l| level(&l).to_owned())
        .collect::<Vec<_>>();
    assert!(
        !conflict_lines.is_empty(),
        "no log line for the injected conflicts"
    );
    assert!(
        conflict_lines.iter().all(|l| l != "ERROR"),
        "{conflict_lines:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_errors_are_transient() -> Result<()> {
    ends_where_upstream_says(
        "api-5xx",
        Faults {
            create: ApiFault::ServerError(500),
            get: ApiFault::ServerError(503),
            patch: ApiFault::ServerError(502),
            delete: ApiFault::ServerError(504),
            admin: ApiFault::ServerError(500),
            codes: &["500", "502", "503", "504"],
            patch_message: "Gardener API shoot patch error",
            busy: false,
        },
    )
    .await
}

/// Gardener refusing the controller's own credentials (a rotated token) is no fault of the
/// Runtime: it stays `Pending`, never `Failed`, and proceeds once Gardener accepts them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_credentials_are_transient() -> Result<()> {
    let fault = ApiFault::Status {
        code: 401,
        reason: "Unauthorized".into(),
        message: "Unauthorized".into(),
    };
    ends_where_upstream_says(
        "api-401",
        Faults {
            create: fault.clone(),
            get: fault.clone(),
            patch: fault.clone(),
            delete: fault.clone(),
            admin: fault,
            codes: &["401"],
            patch_message: "Gardener API shoot patch error",
            busy: false,
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn too_many_requests_are_transient() -> Result<()> {
    let fault = ApiFault::TooManyRequests(1);
    ends_where_upstream_says(
        "api-429",
        Faults {
            create: fault.clone(),
            get: fault.clone(),
            patch: fault.clone(),
            delete: fault.clone(),
            admin: fault,
            codes: &["429"],
            patch_message: "Gardener API shoot patch error",
            busy: true,
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn not_yet_ready_forbidden_is_transient() -> Result<()> {
    ends_where_upstream_says(
        "api-403",
        Faults {
            create: ApiFault::NotYetReady,
            get: ApiFault::NotYetReady,
            patch: ApiFault::NotYetReady,
            delete: ApiFault::NotYetReady,
            admin: ApiFault::NotYetReady,
            codes: &["403"],
            patch_message: "not yet ready to handle request",
            busy: true,
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gardener_health_follows_an_outage() -> Result<()> {
    let logs = logs();
    let env = TestEnv::shared().await?;
    let ns = env.namespace("api-health").await?;
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let (ctl, metrics) = start_logged(env, &ns, &["--gardener-health-interval=1s"], &proxy).await?;
    let url = proxy.url().to_owned();
    let health = |status: &'static str| {
        let (addr, url) = (metrics, url.clone());
        async move {
            let text = metrics_text(addr).await?;
            let labels = [format!("status=\"{status}\""), format!("url=\"{url}")];
            let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
            Ok::<_, anyhow::Error>(
                metric_sum(&text, "infrastructure_manager_im_gardener_health", &labels) == 1.0,
            )
        }
    };
    eventually("healthy", Duration::from_secs(30), || health("healthy")).await?;
    // Gardener's API group answers 503 for a while.
    proxy.inject(Rule {
        method: None,
        path_contains: "/apis/core.gardener.cloud".into(),
        fault: ApiFault::ServerError(503),
        times: None,
    });
    eventually("error during the outage", Duration::from_secs(30), || {
        health("error")
    })
    .await?;
    assert!(
        proxy.served_count(
            "GET",
            "/apis/core.gardener.cloud/v1beta1",
            &ApiFault::ServerError(503)
        ) >= 1
    );
    proxy.clear();
    eventually("healthy after the outage", Duration::from_secs(30), || {
        health("healthy")
    })
    .await?;
    ctl.stop().await;
    // The failed probes are logged, below error level.
    assert!(
        logs.lines()
            .iter()
            .any(|l| l["message"] == "Gardener health probe failed" && level(l) == "WARN"),
        "no warning for the failed probes"
    );
    assert_no_error_lines(logs);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permanent_api_errors_fail_the_runtime_until_its_spec_changes() -> Result<()> {
    let logs = logs();
    let env = TestEnv::shared().await?;
    let ns = env.namespace("api-perm").await?;
    let (id, shoot) = runtime_in(&ns, "api-perm");
    let shoots_path = format!("/namespaces/{PROJECT_NAMESPACE}/shoots");
    let shoot_path = format!("{shoots_path}/{shoot}");
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    // An admission plugin refuses the Shoot: retrying the same spec cannot help.
    let refused = ApiFault::Status {
        code: 403,
        reason: "Forbidden".into(),
        message: format!(
            "shoots.core.gardener.cloud \"{shoot}\" is forbidden: quota limits exceeded"
        ),
    };
    proxy.inject(Rule {
        method: Some("POST".into()),
        path_contains: shoots_path.clone(),
        fault: refused.clone(),
        times: None,
    });
    let (ctl, _) = start_logged(env, &ns, &[], &proxy).await?;
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    create(env, &sample_runtime(&ns, &id)?).await?;

    // Create: False/GardenerErr "Gardener API create error: ...", Failed.
    wait_runtime(env, &ns, &id, "permanent create error", |rt| {
        has_condition(
            rt,
            condition::PROVISIONED,
            "False",
            reason::GARDENER_ERR,
            "quota limits exceeded",
        ) && state(rt) == Some(RuntimeState::Failed)
    })
    .await?;
    // No hammering: the same generation is not retried within the minute.
    let tried = proxy.served_count("POST", &shoots_path, &refused);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        proxy.served_count("POST", &shoots_path, &refused),
        tried,
        "the refused create was retried for the same generation"
    );
    // A spec change (new generation) is tried at once; with the refusal gone it succeeds.
    proxy.clear();
    runtimes
        .patch(
            &id,
            &PatchParams::default(),
            &Patch::Merge(json_admins("fixed@myorg.com")),
        )
        .await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;

    // Patch: an Invalid answer is ProcessingErr, Failed.
    let invalid = ApiFault::Status {
        code: 422,
        reason: "Invalid".into(),
        message: format!(
            "Shoot.core.gardener.cloud \"{shoot}\" is invalid: spec.provider.workers[0].machine.type: Unsupported value"
        ),
    };
    proxy.inject(Rule {
        method: Some("PATCH".into()),
        path_contains: shoot_path.clone(),
        fault: invalid.clone(),
        times: None,
    });
    let other = format!("{id}-other@myorg.com");
    let bindings = AdminBindings::start(env).await?;
    runtimes
        .patch(
            &id,
            &PatchParams::default(),
            &Patch::Merge(json_admins(&other)),
        )
        .await?;
    wait_runtime(env, &ns, &id, "permanent patch error", |rt| {
        has_condition(
            rt,
            condition::PROVISIONED,
            "False",
            reason::PROCESSING_ERR,
            "Gardener API shoot patch error",
        ) && state(rt) == Some(RuntimeState::Failed)
    })
    .await?;
    assert!(proxy.served_count("PATCH", &shoot_path, &invalid) >= 1);
    // While the refusal holds, an event of the Runtime (a label, same generation) makes no
    // Gardener request: neither the patch nor the reads that prepare it.
    let requests_for_shoot = |proxy: &FaultProxy| {
        let forwarded = proxy
            .forwarded()
            .iter()
            .filter(|f| !f.is_watch() && f.path.contains(&shoot_path))
            .count();
        forwarded + proxy.served_count("PATCH", &shoot_path, &invalid)
    };
    let before = requests_for_shoot(&proxy);
    runtimes
        .patch(
            &id,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"e2e-poke": "1"}}})),
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        requests_for_shoot(&proxy),
        before,
        "a Runtime event during the hold after a permanent refusal reached Gardener"
    );
    // Upstream's way out without a spec change: the force-patch annotation.
    proxy.clear();
    annotate_runtime(
        &runtimes,
        &id,
        names::ANNOTATION_FORCE_PATCH_RECONCILIATION,
        Some("true"),
    )
    .await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    bindings.wait_bound(&other, Duration::from_secs(10)).await?;

    runtimes.delete(&id, &DeleteParams::default()).await?;
    eventually("Runtime gone", TIMEOUT, || async {
        Ok(runtimes.get_opt(&id).await?.is_none())
    })
    .await?;
    ctl.stop().await;
    // Permanent errors are warnings (they are in the status); still no error line.
    assert_no_error_lines(logs);
    Ok(())
}

fn json_admins(admin: &str) -> Value {
    serde_json::json!({"spec": {"security": {"administrators": [admin]}}})
}

/// KEB reports an update done once the Runtime reads `Ready` a few seconds after its spec
/// change, and failed once it reads `Failed`. While Gardener refuses the writes the change
/// needs for now (here the structured-auth ConfigMap, written before the Shoot patch, then the
/// patch itself with a 403), the Runtime must not read `Ready` with the new generation (KEB
/// would report the update done with the Shoot unchanged), nor `Failed` for a 403 (upstream
/// retries it as pending, and Gardener answers 403 now and then to writes it allows).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_update_gardener_refuses_is_never_shown_ready_nor_failed_for_a_403() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("api-update").await?;
    let (id, shoot) = runtime_in(&ns, "api-update");
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let (ctl, _) = start_logged(env, &ns, &[], &proxy).await?;
    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    create(env, &sample_runtime(&ns, &id)?).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    let update = Update {
        proxy: &proxy,
        runtimes: &runtimes,
        id: &id,
    };

    // The structured-auth ConfigMap refused: Pending once the new generation is observed.
    let config_map_path =
        format!("/namespaces/{PROJECT_NAMESPACE}/configmaps/structured-auth-config-{shoot}");
    let unavailable = ApiFault::ServerError(503);
    let generation = update
        .with_fault(None, &config_map_path, &unavailable, "cm")
        .await?;
    update
        .never_ready_nor_failed(generation, 1, |rt| {
            state(rt) == Some(RuntimeState::Pending)
                && proxy
                    .served()
                    .iter()
                    .any(|s| s.path.contains(&config_map_path) && s.fault == unavailable)
        })
        .await?;
    update.ready_after_clearing(env, &ns, generation).await?;

    // A forbidden Shoot patch: retried as pending, saying so, for 30 polls (6 s).
    let shoot_path = format!("/namespaces/{PROJECT_NAMESPACE}/shoots/{shoot}");
    let forbidden = ApiFault::Status {
        code: 403,
        reason: "Forbidden".into(),
        message: format!("shoots.core.gardener.cloud \"{shoot}\" is forbidden: try again"),
    };
    let generation = update
        .with_fault(Some("PATCH"), &shoot_path, &forbidden, "forbidden")
        .await?;
    update
        .never_ready_nor_failed(generation, 30, |rt| {
            has_condition(
                rt,
                condition::PROVISIONED,
                "Unknown",
                reason::PROCESSING,
                "Shoot is pending for update after forbidden error",
            )
        })
        .await?;
    // Retried, not given up: more than one patch was refused.
    assert!(
        proxy.served_count("PATCH", &shoot_path, &forbidden) >= 2,
        "{:?}",
        proxy.served()
    );
    update.ready_after_clearing(env, &ns, generation).await?;

    // Gardener slow to answer the patch: KEB reads the Runtime 4 s after its change and must
    // find it `Pending`, not the `Ready` of before, however long Gardener takes: read while
    // the patch is on its way, so a status written only with the patch's answer fails it.
    update
        .pending_while_the_patch_is_unanswered(&shoot_path, "slow")
        .await?;
    update
        .ready_after_clearing(env, &ns, generation_of(&runtimes, &id).await?)
        .await?;

    // The same from `Failed` (Gardener failed the update before for good), which KEB reads as
    // "update failed". First a change that reaches the Shoot, so that Gardener runs (and
    // fails) an operation.
    set_simulator_fault(env, &shoot, Some("failed:ERR_INFRA_UNAUTHORIZED")).await?;
    set_first_pool_maximum(&runtimes, &id, 12).await?;
    wait_state(env, &ns, &id, RuntimeState::Failed, TIMEOUT).await?;
    set_simulator_fault(env, &shoot, None).await?;
    update
        .pending_while_the_patch_is_unanswered(&shoot_path, "slow-after-failed")
        .await?;
    update
        .ready_after_clearing(env, &ns, generation_of(&runtimes, &id).await?)
        .await?;
    ctl.stop().await;
    Ok(())
}

/// The Runtime's generation.
async fn generation_of(runtimes: &Api<Runtime>, id: &str) -> Result<Option<i64>> {
    Ok(runtimes.get(id).await?.metadata.generation)
}

/// One Runtime updated while the proxy answers one Gardener call with a fault.
struct Update<'a> {
    proxy: &'a FaultProxy,
    runtimes: &'a Api<Runtime>,
    id: &'a str,
}

impl Update<'_> {
    /// Injects `fault` for `path`, then changes the Runtime's administrators (a new
    /// generation); returns that generation.
    async fn with_fault(
        &self,
        method: Option<&str>,
        path: &str,
        fault: &ApiFault,
        admin: &str,
    ) -> Result<Option<i64>> {
        self.proxy.inject(Rule {
            method: method.map(str::to_owned),
            path_contains: path.to_owned(),
            fault: fault.clone(),
            times: None,
        });
        let admin = format!("{}-{admin}@myorg.com", self.id);
        let changed = self
            .runtimes
            .patch(
                self.id,
                &PatchParams::default(),
                &Patch::Merge(json_admins(&admin)),
            )
            .await?;
        Ok(changed.metadata.generation)
    }

    /// Polls every 200 ms: never `Failed`, never `Ready` for `generation`, until `shown` held
    /// `polls` times with `generation` observed.
    async fn never_ready_nor_failed(
        &self,
        generation: Option<i64>,
        polls: u32,
        shown: impl Fn(&Runtime) -> bool,
    ) -> Result<()> {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        let mut seen = 0;
        while seen < polls {
            let rt = self.runtimes.get(self.id).await?;
            let observed = rt.status.as_ref().and_then(|s| s.observed_generation) == generation;
            if state(&rt) == Some(RuntimeState::Failed)
                || (observed && state(&rt) == Some(RuntimeState::Ready))
            {
                bail!(
                    "an update Gardener refused for now shown {:?}: {}",
                    state(&rt),
                    serde_json::to_string_pretty(&rt.status)?
                );
            }
            if observed && shown(&rt) {
                seen += 1;
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "{}: the refused update not shown within {TIMEOUT:?}; status: {}",
                    self.id,
                    serde_json::to_string_pretty(&rt.status)?
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// Clears the faults and waits for `Ready` for `generation`.
    /// Changes the Runtime while Gardener holds its Shoot patch for 10 s, and checks, before
    /// the answer, that the Runtime reads `Pending` with the new generation observed.
    async fn pending_while_the_patch_is_unanswered(
        &self,
        shoot_path: &str,
        admin: &str,
    ) -> Result<()> {
        let answered = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let answering = answered.clone();
        let slow = ApiFault::Respond(Responder(Arc::new(move |_| {
            // Off the runtime's workers: a worker blocked for the whole delay holds back the
            // tasks queued on it, the test's own reads included.
            tokio::task::block_in_place(|| std::thread::sleep(Duration::from_secs(10)));
            answering.store(true, std::sync::atomic::Ordering::SeqCst);
            ProxyResponse {
                status: 504,
                body: serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "the request timed out", "reason": "Timeout", "code": 504})
                .to_string()
                .into_bytes(),
            }
        })));
        let generation = self
            .with_fault(Some("PATCH"), shoot_path, &slow, admin)
            .await?;
        eventually("the slow patch sent", TIMEOUT, || async {
            Ok(self.proxy.served_count("PATCH", shoot_path, &slow) >= 1)
        })
        .await?;
        let rt = self.runtimes.get(self.id).await?;
        anyhow::ensure!(
            !answered.load(std::sync::atomic::Ordering::SeqCst),
            "the patch was answered already: the check says nothing"
        );
        anyhow::ensure!(
            state(&rt) == Some(RuntimeState::Pending)
                && rt.status.as_ref().and_then(|s| s.observed_generation) == generation,
            "an update whose Shoot patch is not answered yet: {}",
            serde_json::to_string_pretty(&rt.status)?
        );
        Ok(())
    }

    async fn ready_after_clearing(
        &self,
        env: &TestEnv,
        ns: &str,
        generation: Option<i64>,
    ) -> Result<()> {
        self.proxy.clear();
        wait_runtime(env, ns, self.id, "Ready for the new generation", |rt| {
            state(rt) == Some(RuntimeState::Ready)
                && rt.status.as_ref().and_then(|s| s.observed_generation) == generation
        })
        .await?;
        Ok(())
    }
}

/// Someone changes the Shoot of a Ready Runtime, and Gardener refuses the correction for good
/// (422). The Runtime's spec and cluster are as before: it stays `Ready` (KEB would read
/// `Failed` as a failed update), a Warning Event `DriftNotCorrected` names Gardener's answer,
/// and the correction is not sent again (it would be refused again; the change is the new
/// baseline).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drift_correction_gardener_refuses_leaves_the_runtime_ready() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("api-drift").await?;
    let (id, shoot) = runtime_in(&ns, "api-drift");
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let (ctl, _) = start_logged(env, &ns, &[], &proxy).await?;
    let kcp = env.kcp_client().await?;
    let runtimes: Api<Runtime> = Api::namespaced(kcp.clone(), &ns);
    create(env, &sample_runtime(&ns, &id)?).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;

    let shoot_path = format!("/namespaces/{PROJECT_NAMESPACE}/shoots/{shoot}");
    let refused = ApiFault::Status {
        code: 422,
        reason: "Invalid".into(),
        message: format!(
            "Shoot.core.gardener.cloud \"{shoot}\" is invalid: spec.provider.workers[0].maximum: Forbidden: may not be lowered"
        ),
    };
    proxy.inject(Rule {
        method: Some("PATCH".into()),
        path_contains: shoot_path.clone(),
        fault: refused.clone(),
        times: None,
    });
    // The change, made past the proxy (as an operator's would be).
    let shoots: Api<Shoot> = Api::namespaced(env.garden_client().await?, PROJECT_NAMESPACE);
    let mut workers = serde_json::to_value(&shoots.get(&shoot).await?.spec.provider.workers)?;
    workers[0]["maximum"] = serde_json::json!(7);
    shoots
        .patch(
            &shoot,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"provider": {"workers": workers}}})),
        )
        .await?;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(kcp, &ns);
    eventually("the DriftNotCorrected Event", TIMEOUT, || async {
        Ok(events
            .list(&Default::default())
            .await?
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("DriftNotCorrected")
                    && e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(id.as_str())
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("may not be lowered"))
            }))
    })
    .await?;
    let sent = proxy.served_count("PATCH", &shoot_path, &refused);
    assert!(sent >= 1, "the correction was never sent");
    // Ready throughout, and nothing sent again: 25 reads over 5 s.
    for _ in 0..25 {
        let rt = runtimes.get(&id).await?;
        anyhow::ensure!(
            state(&rt) == Some(RuntimeState::Ready),
            "a refused drift correction changed the Runtime: {}",
            serde_json::to_string_pretty(&rt.status)?
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        proxy.served_count("PATCH", &shoot_path, &refused),
        sent,
        "the refused correction was sent again"
    );
    ctl.stop().await;
    Ok(())
}

/// A Runtime whose passes fail from a controller's start without changing its state (here:
/// the KCP refuses to add its finalizer) still has its state series, with the stored state:
/// the alerts and dashboards that count Runtimes by state must not lose it during an outage
/// that follows a restart or a leader change.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runtime_whose_passes_fail_after_a_restart_keeps_its_state_series() -> Result<()> {
    let env = TestEnv::shared().await?;
    let ns = env.namespace("api-series").await?;
    let (id, _) = runtime_in(&ns, "api-series");
    let ctl = start_controller(env, &ns, &[]).await?;
    create(env, &sample_runtime(&ns, &id)?).await?;
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT).await?;
    ctl.stop().await;

    let runtimes: Api<Runtime> = Api::namespaced(env.kcp_client().await?, &ns);
    runtimes
        .patch(
            &id,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    let proxy = FaultProxy::start(env.kcp(), env.ca()).await?;
    let path = format!("/runtimes/{id}");
    let refused = ApiFault::ServerError(500);
    proxy.inject(Rule {
        method: Some("PATCH".into()),
        path_contains: path.clone(),
        fault: refused.clone(),
        times: None,
    });
    let wiring = Wiring {
        kcp: Some(proxy.access_via(env.kcp())),
        ..Default::default()
    };
    let (args, dir) = controller_args_wired(env, &ns, &[], &wiring).await?;
    let (ctl, _, metrics) =
        KillableController::start_with_args(args, dir, Some(log_dispatch())).await?;
    eventually("the finalizer patch refused", TIMEOUT, || async {
        Ok(proxy.served_count("PATCH", &path, &refused) >= 1)
    })
    .await?;
    let series = eventually(
        "the state series of the failing Runtime",
        Duration::from_secs(10),
        || async {
            Ok(metrics_text(metrics).await?.lines().any(|l| {
                l.starts_with("infrastructure_manager_im_runtime_state{")
                    && l.contains(&format!("runtimeId=\"{id}\""))
                    && l.contains("state=\"Ready\"")
            }))
        },
    )
    .await;
    ctl.stop().await;
    series
}
