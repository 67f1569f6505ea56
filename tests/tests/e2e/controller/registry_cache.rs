//! The registry cache (`--registry-cache-config-controller-enabled`, upstream ADRs 002 and 003)
//! against the shoot apiserver of the environment, which plays the runtime cluster with the
//! registry-cache module's `RegistryCacheConfig` and Kyma's `Kyma` resource:
//!
//! - the runtime cluster's configuration becomes `spec.imageRegistryCache` (field manager
//!   `registrycachecontroller`), the credentials are copied into the Gardener project, the
//!   Shoot gets the `registry-cache` extension and the Secret reference, the Runtime
//!   `RegistryCacheConfigured=True` (with its Event), the runtime cluster's configs `Ready`;
//! - a Runtime cannot make us copy a Secret it should not reach: a system namespace, a name
//!   with path tricks, a Secret no `RegistryCacheConfig` of the cluster references, a Secret
//!   that does not hold registry credentials: each is refused with
//!   `RegistryCacheGardenClusterConfigurationFailed` and nothing is copied;
//! - the runtime watcher's event on the listener makes the controller read the cluster again;
//!   a removed config's Secret is deleted;
//! - a rotation of the credentials Secret in the runtime cluster: the Shoot is patched to a new
//!   garden Secret with the new credentials, the old one is deleted, `RegistryCacheConfigured`
//!   is stored Unknown before the patch and is True again after it; a pass cut off after the
//!   patch (the condition left Unknown on a Ready Runtime) is finished by the next;
//! - with the flag off, the cache list, the credentials version, the extension, the Secret
//!   reference, the garden Secrets and the condition are gone.
//!
//! Its own environment: every Runtime of an environment gets the same shoot cluster.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kim_shared::api::{Runtime, RuntimeState};
use kim_shared::names::{condition, reason};
use kim_shared::registry_cache as rc;
use kim_tests::controller::{create, eventually, sample_runtime, start_controller, wait_state};
use kim_tests::fixtures::{self, PROJECT_NAMESPACE};
use kim_tests::testenv::{TestEnv, TestEnvOptions};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TIMEOUT: Duration = Duration::from_secs(120);

fn crd(group: &str, version: &str, kind: &str, plural: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                      "listKind": format!("{kind}List")},
            "versions": [{"name": version, "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .unwrap()
}

fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap();
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn configs_resource() -> ApiResource {
    resource(
        &format!("{}/{}", rc::CONFIG_GROUP, rc::CONFIG_VERSION),
        rc::CONFIG_KIND,
        rc::CONFIG_PLURAL,
    )
}

fn object(api_version: &str, kind: &str, ns: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": api_version, "kind": kind,
        "metadata": {"name": name, "namespace": ns}, "spec": spec}))
    .unwrap()
}

fn secret(ns: &str, name: &str, data: &[(&str, &str)]) -> Secret {
    let data: BTreeMap<String, String> = data
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns},
        "stringData": data}))
    .unwrap()
}

fn condition_of(rt: &Runtime, type_: &str) -> Option<(String, String, String)> {
    rt.condition(type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The registry cache Secrets of the Gardener project labelled for `runtime_id`.
async fn garden_secrets(garden: &kube::Client, runtime_id: &str) -> Vec<Secret> {
    Api::<Secret>::namespaced(garden.clone(), PROJECT_NAMESPACE)
        .list(&ListParams::default().labels(&format!("{}={runtime_id}", rc::LABEL_RUNTIME_ID)))
        .await
        .unwrap()
        .items
}

async fn shoot(garden: &kube::Client, name: &str) -> Value {
    let res = fixtures::api_resource("core.gardener.cloud/v1beta1", "Shoot").unwrap();
    let s: DynamicObject = Api::namespaced_with(garden.clone(), PROJECT_NAMESPACE, &res)
        .get(name)
        .await
        .unwrap();
    serde_json::to_value(s).unwrap()
}

fn registry_extension(shoot: &Value) -> Option<Value> {
    shoot["spec"]["extensions"]
        .as_array()?
        .iter()
        .find(|e| e["type"] == "registry-cache")
        .cloned()
}

fn cache_secret_references(shoot: &Value) -> Vec<String> {
    shoot["spec"]["resources"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|r| r["name"].as_str())
                .filter(|n| n.starts_with(rc::SECRET_PREFIX))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// What the runtime watcher sends for a changed `RegistryCacheConfig`, through the KCP
/// gateway (which forwards its client certificate in `X-Forwarded-Client-Cert`); the HTTP
/// status.
async fn watcher_event(port: u16, cert_pem: &str) -> u16 {
    let encoded: String = cert_pem
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let body = json!({"watched": {"name": "docker", "namespace": "team"},
        "watchedGvk": {"group": rc::CONFIG_GROUP, "version": rc::CONFIG_VERSION,
                       "kind": rc::CONFIG_KIND}})
    .to_string();
    let request = format!(
        "POST /v2/{}/event HTTP/1.1\r\nHost: kim\r\nContent-Type: application/json\r\n\
         X-Forwarded-Client-Cert: Hash=00;Cert=\"{encoded}\";Subject=\"\"\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        rc::LISTENER_COMPONENT,
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until the Runtime's `RegistryCacheConfigured` condition is `status` with a message
/// containing `message`.
async fn wait_condition(runtimes: &Api<Runtime>, id: &str, status: &str, message: &str) {
    wait_for(
        runtimes,
        id,
        condition::REGISTRY_CACHE_CONFIGURED,
        status,
        message,
    )
    .await;
}

/// Waits until the Runtime's caches are configured (`RegistryCacheConfigured` True).
async fn wait_configured(runtimes: &Api<Runtime>, id: &str) {
    wait_condition(
        runtimes,
        id,
        "True",
        "Registry cache configured successfully",
    )
    .await;
}

/// The position of `RegistryCacheConfigured` among the Runtime's conditions.
fn condition_index(rt: &Runtime) -> usize {
    rt.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| {
            c.iter()
                .position(|c| c.type_ == condition::REGISTRY_CACHE_CONFIGURED)
        })
        .expect("RegistryCacheConfigured")
}

/// Waits until the Runtime's condition `type_` is `status` with a message containing
/// `message`.
async fn wait_for(runtimes: &Api<Runtime>, id: &str, type_: &str, status: &str, message: &str) {
    eventually(
        &format!("{type_} {status} with {message:?}"),
        TIMEOUT,
        || async {
            let rt = runtimes.get(id).await?;
            Ok(
                condition_of(&rt, type_)
                    .is_some_and(|(s, _, m)| s == status && m.contains(message)),
            )
        },
    )
    .await
    .unwrap_or_else(|e| {
        panic!("{e}");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn registry_cache_end_to_end_refuses_foreign_secrets_and_flag_off_leaves_nothing() {
    let env = &TestEnv::start(TestEnvOptions::default())
        .await
        .unwrap_or_else(|e| panic!("the registry cache test's own environment: {e}"));
    let ns = env.namespace("ctl-regcache").await.unwrap();
    let kcp = env.kcp_client().await.unwrap();
    let garden = env.garden_client().await.unwrap();
    let skr = env.shoot_client().await.unwrap();
    let pp = PostParams::default();

    // The runtime cluster as Kyma and the registry-cache module leave it.
    kim_tests::testenv::crds::install(
        &skr,
        &[
            crd("operator.kyma-project.io", "v1beta2", "Kyma", "kymas"),
            crd(
                rc::CONFIG_GROUP,
                rc::CONFIG_VERSION,
                rc::CONFIG_KIND,
                rc::CONFIG_PLURAL,
            ),
        ],
        TIMEOUT,
    )
    .await
    .unwrap();
    let namespaces: Api<Namespace> = Api::all(skr.clone());
    for name in ["kyma-system", "team"] {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        let _ = namespaces.create(&pp, &n).await;
    }
    let kymas: Api<DynamicObject> = Api::namespaced_with(
        skr.clone(),
        "kyma-system",
        &resource(rc::KYMA_API_VERSION, "Kyma", "kymas"),
    );
    kymas
        .create(
            &pp,
            &object(
                rc::KYMA_API_VERSION,
                "Kyma",
                "kyma-system",
                "default",
                json!({"channel": "regular", "modules": [{"name": "registry-cache"}]}),
            ),
        )
        .await
        .unwrap();
    let team_secrets: Api<Secret> = Api::namespaced(skr.clone(), "team");
    team_secrets
        .create(
            &pp,
            &secret("team", "creds", &[("username", "u1"), ("password", "p1")]),
        )
        .await
        .unwrap();
    // Secrets a Runtime must not make us copy.
    team_secrets
        .create(
            &pp,
            &secret(
                "team",
                "unreferenced",
                &[("username", "u2"), ("password", "p2")],
            ),
        )
        .await
        .unwrap();
    team_secrets
        .create(
            &pp,
            &secret("team", "sa-token", &[("token", "t"), ("ca.crt", "c")]),
        )
        .await
        .unwrap();
    Api::<Secret>::namespaced(skr.clone(), "kube-system")
        .create(
            &pp,
            &secret(
                "kube-system",
                "system-creds",
                &[("username", "sys"), ("password", "sys")],
            ),
        )
        .await
        .unwrap();
    let configs: Api<DynamicObject> =
        Api::namespaced_with(skr.clone(), "team", &configs_resource());
    let api_version = format!("{}/{}", rc::CONFIG_GROUP, rc::CONFIG_VERSION);
    let docker_spec = json!({"upstream": "docker.io", "secretReferenceName": "creds",
                             "volume": {"size": "20Gi"}});
    let docker = configs
        .create(
            &pp,
            &object(
                &api_version,
                rc::CONFIG_KIND,
                "team",
                "docker",
                docker_spec.clone(),
            ),
        )
        .await
        .unwrap();
    let quay = configs
        .create(
            &pp,
            &object(
                &api_version,
                rc::CONFIG_KIND,
                "team",
                "quay",
                // 10 GiB written as a number: above 2^31, a quantity Kubernetes takes.
                json!({"upstream": "quay.io", "volume": {"size": 10_737_418_240_i64}}),
            ),
        )
        .await
        .unwrap();
    let docker_uid = docker.metadata.uid.clone().unwrap();
    let quay_uid = quay.metadata.uid.clone().unwrap();

    let port = free_port();
    let port_flag = format!("--registry-cache-listener-port={port}");
    let cache_on = [
        "--registry-cache-config-controller-enabled",
        &port_flag,
        "--registry-cache-reconcile-period=60m",
    ];
    let ctl = start_controller(env, &ns, &cache_on).await.unwrap();
    let id = format!("regcache-{}", &ns[ns.len().saturating_sub(6)..]);
    let rt = sample_runtime(&ns, &id).unwrap();
    create(env, &rt).await.unwrap();
    let runtimes: Api<Runtime> = Api::namespaced(kcp.clone(), &ns);

    // 1. The configuration reaches the Runtime, the Gardener project and the Shoot.
    wait_configured(&runtimes, &id).await;
    let ready = wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT)
        .await
        .unwrap();
    let caches = ready.spec.image_registry_caches();
    assert_eq!(
        caches
            .iter()
            .map(|c| (c.name.as_str(), c.namespace.as_str(), c.uid.as_str()))
            .collect::<Vec<_>>(),
        [
            ("docker", "team", docker_uid.as_str()),
            ("quay", "team", quay_uid.as_str())
        ]
    );
    assert_eq!(
        caches[0].config.secret_reference_name.as_deref(),
        Some("creds")
    );
    assert!(
        ready
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some(rc::FIELD_MANAGER)
                && m.operation.as_deref() == Some("Apply")),
        "the cache list is applied by {}",
        rc::FIELD_MANAGER
    );
    assert_eq!(
        condition_of(&ready, condition::REGISTRY_CACHE_CONFIGURED),
        Some((
            "True".into(),
            reason::REGISTRY_CACHE_CONFIGURED.into(),
            "Registry cache configured successfully".into()
        ))
    );
    let copied = garden_secrets(&garden, &id).await;
    assert_eq!(copied.len(), 1, "one cache has credentials: {copied:?}");
    let copy = &copied[0];
    let copy_name = copy.metadata.name.clone().unwrap();
    assert!(copy_name.starts_with(rc::SECRET_PREFIX), "{copy_name}");
    let labels = copy.metadata.labels.clone().unwrap();
    assert_eq!(labels[rc::LABEL_CACHE_ID], docker_uid);
    assert_eq!(labels[rc::LABEL_MANAGED_BY], rc::MANAGED_BY);
    let annotations = copy.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[rc::ANNOTATION_CACHE_NAME], "docker");
    assert_eq!(annotations[rc::ANNOTATION_CACHE_NAMESPACE], "team");
    assert_eq!(copy.immutable, Some(true));
    let source = team_secrets.get("creds").await.unwrap();
    assert_eq!(
        copy.data, source.data,
        "the credentials are copied as they are"
    );

    let s = shoot(&garden, &rt.spec.shoot.name).await;
    let ext = registry_extension(&s).expect("the Shoot has the registry-cache extension");
    assert_eq!(ext["disabled"], false);
    assert_eq!(
        ext["providerConfig"],
        json!({"apiVersion": "registry.extensions.gardener.cloud/v1alpha3",
               "kind": "RegistryConfig",
               "caches": [
                   {"upstream": "docker.io", "volume": {"size": "20Gi"},
                    "secretReferenceName": copy_name},
                   {"upstream": "quay.io", "volume": {"size": "10737418240"}}]})
    );
    assert_eq!(
        cache_secret_references(&s),
        std::slice::from_ref(&copy_name)
    );
    let docker_now = configs.get("docker").await.unwrap();
    assert_eq!(
        docker_now.data["status"]["state"], "Ready",
        "{:?}",
        docker_now.data
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(kcp.clone(), &ns);
    assert!(
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(id.as_str())
                    && e.reason.as_deref() == Some(reason::REGISTRY_CACHE_CONFIGURED)
            }),
        "an Event with reason {}",
        reason::REGISTRY_CACHE_CONFIGURED
    );

    // 2. Attacks: Runtime entries written by whoever may write Runtimes.
    let tokens = configs
        .create(
            &pp,
            &object(
                &api_version,
                rc::CONFIG_KIND,
                "team",
                "tokens",
                json!({"upstream": "ghcr.io", "secretReferenceName": "sa-token"}),
            ),
        )
        .await
        .unwrap();
    let benign: Vec<Value> = caches
        .iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    let entry = |name: &str, namespace: &str, uid: &str, secret: &str| {
        json!({"name": name, "namespace": namespace, "uid": uid,
               "config": {"upstream": "evil.io", "secretReferenceName": secret}})
    };
    // (entry, condition that refuses it, its reason, text of the refusal). A name with path
    // tricks is refused by validation already (the Runtime is `Failed` with `ConversionErr`,
    // as the webhook refuses it at admission); the others get past validation and are refused
    // when the credentials would be copied.
    let cache_refused = (
        condition::REGISTRY_CACHE_CONFIGURED,
        reason::REGISTRY_CACHE_GARDEN_CLUSTER_CONFIGURATION_FAILED,
    );
    let tokens_uid = tokens.metadata.uid.clone().unwrap();
    let attacks = [
        (
            entry("docker", "kube-system", &docker_uid, "system-creds"),
            cache_refused,
            "may not hold registry credentials".to_owned(),
        ),
        (
            entry(
                "docker",
                "team",
                &docker_uid,
                concat!("..", "/kube-system/secrets/system-creds"),
            ),
            (condition::PROVISIONED, reason::CONVERSION_ERR),
            "is not a valid reference name".to_owned(),
        ),
        (
            entry("docker", "team", &docker_uid, "unreferenced"),
            cache_refused,
            format!(
                "holds no RegistryCacheConfig with UID {docker_uid} that references Secret \"unreferenced\""
            ),
        ),
        (
            entry("forged", "team", "00000000-forged", "unreferenced"),
            cache_refused,
            "holds no RegistryCacheConfig with UID 00000000-forged".to_owned(),
        ),
        (
            entry("tokens", "team", &tokens_uid, "sa-token"),
            cache_refused,
            "must hold exactly the keys username and password".to_owned(),
        ),
    ];
    let foreign_data: Vec<_> = [
        ("team", "unreferenced"),
        ("team", "sa-token"),
        ("kube-system", "system-creds"),
    ]
    .into_iter()
    .map(|(n, s)| async {
        Api::<Secret>::namespaced(skr.clone(), n)
            .get(s)
            .await
            .unwrap()
            .data
    })
    .collect();
    let foreign_data = futures::future::join_all(foreign_data).await;
    for (attack, (type_, why), refusal) in attacks {
        let mut list = vec![benign[1].clone()];
        list.push(attack.clone());
        runtimes
            .patch(
                &id,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"imageRegistryCache": list}})),
            )
            .await
            .unwrap();
        wait_for(&runtimes, &id, type_, "False", &refusal).await;
        let rt = runtimes.get(&id).await.unwrap();
        assert_eq!(condition_of(&rt, type_).unwrap().1, why, "{attack}");
        // The runtime cluster's users see the failure on the benign config too, with the
        // reason of the step that failed.
        let (config_reason, config_message) = if why == reason::CONVERSION_ERR {
            (
                rc::REASON_EXTENSION_CONFIGURATION_FAILED,
                rc::MESSAGE_EXTENSION_CONFIGURATION_FAILED,
            )
        } else {
            (rc::REASON_GARDEN_CONFIGURATION_FAILED, refusal.as_str())
        };
        // Each retry sets the configs `Pending` before it fails again: read until `Error` with
        // the step's reason.
        let mut quay_now = Value::Null;
        for _ in 0..100 {
            quay_now = configs.get("quay").await.unwrap().data["status"].clone();
            if quay_now["state"] == "Error" && quay_now["conditions"][0]["reason"] == config_reason
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(quay_now["state"], "Error", "{attack}: {quay_now}");
        let quay_condition = &quay_now["conditions"][0];
        assert_eq!(quay_condition["type"], condition::REGISTRY_CACHE_CONFIGURED);
        assert_eq!(quay_condition["reason"], config_reason, "{attack}");
        assert!(
            quay_condition["message"]
                .as_str()
                .unwrap()
                .contains(config_message),
            "{attack}: {quay_condition}"
        );
        let all: Vec<Secret> = Api::<Secret>::namespaced(garden.clone(), PROJECT_NAMESPACE)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        for s in &all {
            assert!(
                !foreign_data.contains(&s.data),
                "{attack}: Secret {:?} holds a foreign Secret's data",
                s.metadata.name
            );
        }
        let ours = garden_secrets(&garden, &id).await;
        assert!(
            ours.iter()
                .all(|s| s.metadata.labels.as_ref().unwrap()[rc::LABEL_CACHE_ID] == docker_uid),
            "{attack}: only the docker cache's Secret exists"
        );
    }
    configs
        .delete("tokens", &DeleteParams::default())
        .await
        .unwrap();

    // 3. The runtime watcher's event: the controller reads the cluster again. A caller
    // without a client certificate is turned away.
    let client_cert = env.ca().client_cert(&id, &[]).unwrap();
    assert_eq!(watcher_event(port, &client_cert.cert_pem).await, 200);
    wait_configured(&runtimes, &id).await;
    let rt = wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(rt.spec.image_registry_caches(), caches);

    // A hibernated cluster is not read (it would not answer; each attempt a failed reconcile
    // until it is woken up): a config added while it sleeps does not reach the Runtime, and
    // the pass is not a failure. Read again once it is woken up.
    let shoot_name = rt.spec.shoot.name.clone();
    let shoots: Api<DynamicObject> = Api::namespaced_with(
        garden.clone(),
        PROJECT_NAMESPACE,
        &fixtures::api_resource("core.gardener.cloud/v1beta1", "Shoot").unwrap(),
    );
    // Woken up by removing the setting, as the Shoot was made (a later step sets it).
    let hibernate = |enabled: bool| {
        let shoots = shoots.clone();
        let shoot_name = shoot_name.clone();
        let hibernation = enabled.then(|| json!({"enabled": true}));
        async move {
            shoots
                .patch(
                    &shoot_name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"hibernation": hibernation}})),
                )
                .await
                .unwrap();
            eventually(&format!("Shoot hibernated: {enabled}"), TIMEOUT, || async {
                let s = shoots.get(&shoot_name).await?;
                Ok(s.data["status"]["hibernated"] == enabled
                    && s.data["status"]["observedGeneration"] == json!(s.metadata.generation)
                    && s.data["status"]["lastOperation"]["state"] == "Succeeded")
            })
            .await
            .unwrap();
        }
    };
    hibernate(true).await;
    let count = |result: &'static str| {
        let ctl = &ctl;
        async move {
            kim_tests::controller::metric_sum(
                &ctl.metrics_text().await.unwrap(),
                "infrastructure_manager_im_reconciles_total",
                &[
                    "controller=\"registry_cache\"",
                    &format!("result=\"{result}\""),
                ],
            )
        }
    };
    let (passes, failures) = (count("success").await, count("error").await);
    configs
        .create(
            &pp,
            &object(
                &api_version,
                rc::CONFIG_KIND,
                "team",
                "ghcr",
                json!({"upstream": "ghcr.io", "volume": {"size": "10Gi"}}),
            ),
        )
        .await
        .unwrap();
    // The event is served at most 5 s after the last read (the burst guard below).
    assert_eq!(watcher_event(port, &client_cert.cert_pem).await, 200);
    eventually("a pass after the event", TIMEOUT, || async {
        Ok(count("success").await > passes || count("error").await > failures)
    })
    .await
    .unwrap();
    assert_eq!(
        count("error").await,
        failures,
        "the hibernated cluster failed a pass"
    );
    assert_eq!(
        runtimes
            .get(&id)
            .await
            .unwrap()
            .spec
            .image_registry_caches(),
        caches,
        "the hibernated cluster was read"
    );
    configs
        .delete("ghcr", &DeleteParams::default())
        .await
        .unwrap();
    hibernate(false).await;

    // A removed config while the Runtime's patches are suspended: the Shoot keeps referencing
    // its Secret, so the Secret stays (Gardener's next reconcile of the Shoot needs it).
    let suspend = kim_shared::names::ANNOTATION_SUSPEND_PATCH_RECONCILIATION;
    runtimes
        .patch(
            &id,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {suspend: "true"}}})),
        )
        .await
        .unwrap();
    configs
        .delete("docker", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(watcher_event(port, &client_cert.cert_pem).await, 200);
    eventually(
        "the suspended Runtime without the docker cache reconciled",
        TIMEOUT,
        || async {
            let rt = runtimes.get(&id).await?;
            Ok(rt.spec.image_registry_caches().len() == 1
                && rt.status.as_ref().and_then(|s| s.observed_generation) == rt.metadata.generation)
        },
    )
    .await
    .unwrap();
    // The pass that took up the new generation went on to the deletion of unused Secrets (the
    // Shoot's last operation succeeded; without the Shoot's references that pass deletes it).
    let kept = garden_secrets(&garden, &id).await;
    let s = shoot(&garden, &rt.spec.shoot.name).await;
    assert_eq!(kept.len(), 1, "the Secret the Shoot references was deleted");
    assert_eq!(
        cache_secret_references(&s),
        [kept[0].metadata.name.clone().unwrap()],
        "the suspended Shoot still references it"
    );
    // Resumed: its Secret and the Shoot's reference go.
    runtimes
        .patch(
            &id,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {suspend: null}}})),
        )
        .await
        .unwrap();
    eventually("the docker cache's Secret is deleted", TIMEOUT, || async {
        Ok(garden_secrets(&garden, &id).await.is_empty())
    })
    .await
    .unwrap();
    let s = shoot(&garden, &rt.spec.shoot.name).await;
    assert_eq!(
        registry_extension(&s).unwrap()["providerConfig"]["caches"],
        json!([{"upstream": "quay.io", "volume": {"size": "10737418240"}}])
    );
    assert!(cache_secret_references(&s).is_empty(), "{s}");
    // And back: a new config's credentials are copied again.
    configs
        .create(
            &pp,
            &object(&api_version, rc::CONFIG_KIND, "team", "docker", docker_spec),
        )
        .await
        .unwrap();
    assert_eq!(watcher_event(port, &client_cert.cert_pem).await, 200);
    eventually(
        "the new docker cache's Secret is copied",
        TIMEOUT,
        || async { Ok(garden_secrets(&garden, &id).await.len() == 1) },
    )
    .await
    .unwrap();
    wait_configured(&runtimes, &id).await;

    // A credentials rotation in the runtime cluster: the next read of the cluster (here the
    // runtime watcher's event) makes the Shoot reference a new garden Secret with the new
    // credentials, and the old one goes.
    let before = garden_secrets(&garden, &id).await;
    assert_eq!(before.len(), 1, "{before:?}");
    let old_name = before[0].metadata.name.clone().unwrap();
    let rt = runtimes.get(&id).await.unwrap();
    eventually(
        "the Shoot references the current garden Secret",
        TIMEOUT,
        || async {
            let s = shoot(&garden, &rt.spec.shoot.name).await;
            Ok(cache_secret_references(&s) == std::slice::from_ref(&old_name))
        },
    )
    .await
    .unwrap();
    let key = kim_shared::names::ANNOTATION_REGISTRY_CACHE_CREDENTIALS;
    let version_before = rt.metadata.annotations.as_ref().unwrap()[key].clone();
    assert!(
        version_before.starts_with(&format!(
            "{}=",
            before[0].metadata.labels.as_ref().unwrap()[rc::LABEL_CACHE_ID]
        )),
        "{version_before}"
    );
    team_secrets
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "p1-rotated"}})),
        )
        .await
        .unwrap();
    let rotated = team_secrets.get("creds").await.unwrap();
    // The patch for the new credentials leaves the generation as it is: that the caches are
    // being configured is stored before it (RegistryCacheConfigured Unknown), so a pass cut
    // off after the patch leaves the next pass something to finish.
    // Watched, not polled: every stored version of the Runtime is seen, however briefly it
    // lasts.
    let seen_unknown = {
        use futures::StreamExt as _;
        let versions = kube::runtime::watcher(
            runtimes.clone(),
            kube::runtime::watcher::Config::default().fields(&format!("metadata.name={id}")),
        );
        tokio::spawn(async move {
            let mut versions = std::pin::pin!(versions);
            let unknown = async {
                while let Some(event) = versions.next().await {
                    if let Ok(
                        kube::runtime::watcher::Event::Apply(rt)
                        | kube::runtime::watcher::Event::InitApply(rt),
                    ) = event
                        && condition_of(&rt, condition::REGISTRY_CACHE_CONFIGURED)
                            .is_some_and(|c| c.0 == "Unknown")
                    {
                        return true;
                    }
                }
                false
            };
            tokio::time::timeout(TIMEOUT, unknown)
                .await
                .unwrap_or(false)
        })
    };
    // The watch has started before the rotation is triggered.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(watcher_event(port, &client_cert.cert_pem).await, 200);
    eventually(
        "the Shoot references a new garden Secret with the new credentials, the old is gone",
        TIMEOUT,
        || async {
            let rt = runtimes.get(&id).await?;
            let ours = garden_secrets(&garden, &id).await;
            let s = shoot(&garden, &rt.spec.shoot.name).await;
            let [current] = ours.as_slice() else {
                return Ok(false);
            };
            let new_name = current.metadata.name.clone().unwrap_or_default();
            let referenced = registry_extension(&s).is_some_and(|e| {
                e["providerConfig"]["caches"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["secretReferenceName"] == new_name.as_str())
            });
            Ok(new_name != old_name
                && current.data == rotated.data
                && referenced
                && cache_secret_references(&s) == [new_name]
                && condition_of(&rt, condition::REGISTRY_CACHE_CONFIGURED)
                    .is_some_and(|c| c.0 == "True")
                && rt.status.as_ref().map(|st| st.state) == Some(RuntimeState::Ready))
        },
    )
    .await
    .unwrap();

    assert!(
        seen_unknown.await.unwrap(),
        "RegistryCacheConfigured was never stored Unknown before the patch"
    );
    // A pass cut off after such a patch (the Runtime still Ready, the caches' condition
    // Unknown): the next pass finishes the caches rather than leaving the Runtime alone.
    runtimes
        .patch_status(
            &id,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{"op": "replace",
                    "path": format!("/status/conditions/{}/status", condition_index(&runtimes.get(&id).await.unwrap())),
                    "value": "Unknown"}]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    wait_configured(&runtimes, &id).await;

    // A burst of events (anyone who reaches the listener can send them): the cluster is read
    // at most once per 5 s, and the burst is served, not dropped.
    let reads = |text: &str| {
        kim_tests::controller::metric_sum(
            text,
            "infrastructure_manager_im_reconciles_total",
            &["controller=\"registry_cache\""],
        )
    };
    let before = reads(&ctl.metrics_text().await.unwrap());
    for _ in 0..20 {
        assert_eq!(watcher_event(port, &client_cert.cert_pem).await, 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = reads(&ctl.metrics_text().await.unwrap()) - before;
    assert!(
        during <= 2.0,
        "{during} reads of the runtime cluster for 20 events in 3 s"
    );
    eventually("the burst served", TIMEOUT, || async {
        Ok(reads(&ctl.metrics_text().await?) - before >= 1.0)
    })
    .await
    .unwrap();
    let rt = runtimes.get(&id).await.unwrap();
    let version_after = rt.metadata.annotations.as_ref().unwrap()[key].clone();
    assert_ne!(version_after, version_before);
    let s = shoot(&garden, &rt.spec.shoot.name).await;
    assert_eq!(
        s["metadata"]["annotations"][key],
        version_after.as_str(),
        "the Shoot records the credentials it was patched with"
    );
    assert!(
        !version_after.contains("p1"),
        "the version names no credentials: {version_after}"
    );

    // Gardener moves the generation of a Shoot it wakes or hibernates, while the runtime
    // cluster does not answer (here: `spec.hibernation` set, with the cluster stopped). The
    // drift re-apply writes the garden Secret the Shoot references again without the cluster
    // and changes nothing: the Runtime stays Ready, its caches configured.
    let shoot_name = rt.spec.shoot.name.clone();
    let referenced = cache_secret_references(&shoot(&garden, &shoot_name).await);
    let patches = || async {
        Ok::<_, anyhow::Error>(kim_tests::controller::metric_sum(
            &ctl.metrics_text().await?,
            "infrastructure_manager_im_gardener_requests_total",
            &["method=\"PATCH\""],
        ))
    };
    let patched_before = patches().await.unwrap();
    env.stop_apiserver("shoot-apiserver").unwrap();
    let shoots: Api<DynamicObject> = Api::namespaced_with(
        garden.clone(),
        PROJECT_NAMESPACE,
        &resource("core.gardener.cloud/v1beta1", "Shoot", "shoots"),
    );
    let generation = |s: &DynamicObject| s.metadata.generation.unwrap_or_default();
    let generation_before = generation(&shoots.get(&shoot_name).await.unwrap());
    shoots
        .patch(
            &shoot_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hibernation": {"enabled": false}}})),
        )
        .await
        .unwrap();
    assert!(
        generation(&shoots.get(&shoot_name).await.unwrap()) > generation_before,
        "the hibernation setting moves the Shoot's generation"
    );
    eventually(
        "the drift re-apply while the runtime cluster is down",
        TIMEOUT,
        || async { Ok(patches().await? > patched_before) },
    )
    .await
    .unwrap();
    // Long enough for the failure the re-apply used to end in (the cluster read timing out).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rt = runtimes.get(&id).await.unwrap();
    assert_eq!(
        rt.status.as_ref().map(|s| s.state),
        Some(RuntimeState::Ready),
        "{:?}",
        rt.status
    );
    assert_eq!(
        condition_of(&rt, condition::REGISTRY_CACHE_CONFIGURED).map(|c| c.0),
        Some("True".to_owned())
    );
    assert_eq!(
        cache_secret_references(&shoot(&garden, &shoot_name).await),
        referenced
    );
    env.start_apiserver("shoot-apiserver").await.unwrap();
    ctl.stop().await;

    // 4. Flag off: nothing of the registry cache is left.
    let ctl = start_controller(env, &ns, &[]).await.unwrap();
    eventually("the registry cache is gone", TIMEOUT, || async {
        let rt = runtimes.get(&id).await?;
        let s = shoot(&garden, &rt.spec.shoot.name).await;
        Ok(rt.spec.image_registry_cache.is_none()
            && rt
                .annotation(kim_shared::names::ANNOTATION_REGISTRY_CACHE_CREDENTIALS)
                .is_none()
            && condition_of(&rt, condition::REGISTRY_CACHE_CONFIGURED).is_none()
            && registry_extension(&s).is_none()
            && cache_secret_references(&s).is_empty()
            && garden_secrets(&garden, &id).await.is_empty())
    })
    .await
    .unwrap();
    wait_state(env, &ns, &id, RuntimeState::Ready, TIMEOUT)
        .await
        .unwrap();
    ctl.stop().await;

    // 5. A runtime cluster's configs are read in pages, all of them up to the 100 a Runtime
    // can hold, and more are refused instead of held in memory.
    let many: Api<DynamicObject> = Api::namespaced_with(skr.clone(), "many", &configs_resource());
    let n: Namespace = serde_json::from_value(json!({"metadata": {"name": "many"}})).unwrap();
    namespaces.create(&pp, &n).await.unwrap();
    let all_configs: Api<DynamicObject> = Api::all_with(skr.clone(), &configs_resource());
    let fill_to = |total: usize| {
        let many = many.clone();
        let all_configs = all_configs.clone();
        let api_version = api_version.clone();
        async move {
            let have = all_configs
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len();
            for i in have..total {
                let spec = json!({"upstream": format!("registry-{i}.example.com")});
                let config = object(
                    &api_version,
                    rc::CONFIG_KIND,
                    "many",
                    &format!("c{i}"),
                    spec,
                );
                many.create(&PostParams::default(), &config).await.unwrap();
            }
            let listed = all_configs
                .list(&ListParams::default())
                .await
                .unwrap()
                .items;
            assert_eq!(listed.len(), total);
            let values: Vec<Value> = listed
                .into_iter()
                .map(|o| serde_json::to_value(o).unwrap())
                .collect();
            rc::caches_from_configs(&values).unwrap()
        }
    };
    for total in [60, 100] {
        let expected = fill_to(total).await;
        assert!(
            expected.len() > 50,
            "more than two pages: {}",
            expected.len()
        );
        let read = kim_controller::registry_cache::read_caches(&skr)
            .await
            .unwrap_or_else(|e| panic!("{total} configs: {e}"));
        assert_eq!(read, expected, "{total} configs, read in pages of 25");
    }
    // A config that does not read is an error naming it and the field; the caches read
    // before are not replaced by a list without it.
    many.delete("c99", &DeleteParams::default()).await.unwrap();
    let unreadable = object(
        &api_version,
        rc::CONFIG_KIND,
        "many",
        "unreadable",
        json!({"upstream": "ghcr.io", "volume": {"size": true}}),
    );
    many.create(&pp, &unreadable).await.unwrap();
    match kim_controller::registry_cache::read_caches(&skr).await {
        Err(kim_controller::registry_cache::Error::UnreadableConfig(e)) => {
            assert_eq!(
                (e.namespace.as_str(), e.name.as_str(), e.field.as_str()),
                ("many", "unreadable", "spec.volume.size"),
                "{e}"
            );
        }
        other => panic!("an unreadable config: {other:?}"),
    }
    many.delete("unreadable", &DeleteParams::default())
        .await
        .unwrap();
    fill_to(101).await;
    let refused = kim_controller::registry_cache::read_caches(&skr).await;
    assert!(
        matches!(
            refused,
            Err(kim_controller::registry_cache::Error::TooManyConfigs)
        ),
        "101 configs: {refused:?}"
    );
    // The controller refuses them too, visibly: a failed reconcile, nothing written.
    let errors = |text: &str| {
        kim_tests::controller::metric_sum(
            text,
            "infrastructure_manager_im_reconciles_total",
            &["controller=\"registry_cache\"", "result=\"error\""],
        )
    };
    let ctl = start_controller(env, &ns, &cache_on).await.unwrap();
    eventually("a failed registry cache reconcile", TIMEOUT, || async {
        Ok(errors(&ctl.metrics_text().await?) >= 1.0)
    })
    .await
    .unwrap();
    let rt = runtimes.get(&id).await.unwrap();
    assert!(
        rt.spec.image_registry_cache.is_none(),
        "{:?}",
        rt.spec.image_registry_cache
    );
    ctl.stop().await;
}
