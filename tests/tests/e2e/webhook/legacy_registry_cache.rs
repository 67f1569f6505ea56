//! A Runtime stored while the CRD declared the 2025 shape of `spec.imageRegistryCache`
//! (`{enabled: bool}`), read after today's CRD (a list of caches) is installed over it, through
//! the real kube-apiserver: the apiserver returns it pruned to `imageRegistryCache: {}`, our
//! typed client decodes that, the webhook admits updates that leave the field alone (a spec
//! update with a warning naming it), status updates pass, the apiserver refuses the old shape on
//! new writes, and replacing it with a list ends the legacy handling
//! (`docs/upstream-differences.md`, "Objects stored in the 2025 shape").
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kim_shared::api::Runtime;
use kim_shared::api::runtime::{ImageRegistryCaches, LegacyImageRegistryCache};
use kim_tests::testenv::{TestEnv, TestEnvOptions, crds};
use kim_tests::webhook::{Options, Webhook, kubectl, runtime_resource, valid_runtime};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NAME: &str = "legacy-registry-cache";

/// Today's Runtime CRD with `spec.imageRegistryCache` as the 2025 baseline declared it.
fn crd_of_2025() -> CustomResourceDefinition {
    let runtime = kim_shared::crds::all()
        .into_iter()
        .find(|c| c.spec.names.kind == "Runtime")
        .unwrap();
    let mut value = serde_json::to_value(runtime).unwrap();
    let spec = &mut value["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"];
    assert!(spec["imageRegistryCache"]["type"] == "array", "{spec:#}");
    spec["imageRegistryCache"] = json!({
        "type": "object",
        "properties": {"enabled": {"type": "boolean"}},
        "required": ["enabled"],
    });
    serde_json::from_value(value).unwrap()
}

/// A valid Runtime with its Kubernetes version (no mutating webhook runs before the switch).
fn runtime(name: &str, ns: &str, cache: Value) -> DynamicObject {
    let mut rt = valid_runtime(name, ns);
    rt["spec"]["shoot"]["kubernetes"]["version"] = json!("1.35");
    rt["spec"]["imageRegistryCache"] = cache;
    serde_json::from_value(rt).unwrap()
}

#[tokio::test]
async fn a_runtime_stored_in_the_2025_shape_is_read_and_updated_after_the_crd_update() {
    let env = TestEnv::start(TestEnvOptions {
        crds_dir: None,
        ..TestEnvOptions::kcp_only()
    })
    .await
    .unwrap();
    let client = env.kcp_client().await.unwrap();
    let timeout = Duration::from_secs(30);

    // Before the update: the 2025 CRD, and a Runtime written in its shape.
    crds::install(&client, &[crd_of_2025()], timeout)
        .await
        .unwrap();
    let ns = env.namespace("legacy").await.unwrap();
    let dynamic: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &runtime_resource());
    dynamic
        .create(
            &PostParams::default(),
            &runtime(NAME, &ns, json!({"enabled": true})),
        )
        .await
        .unwrap();

    // The update: today's CRDs; wait until the apiserver validates with the list schema.
    crds::install(&client, &kim_shared::crds::all(), timeout)
        .await
        .unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = std::time::Instant::now() + timeout;
    let refusal = loop {
        match dynamic
            .create(
                &dry_run,
                &runtime("new-object", &ns, json!({"enabled": true})),
            )
            .await
        {
            Err(e) => break e.to_string(),
            Ok(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(_) => panic!("the apiserver still accepts the 2025 shape after the CRD update"),
        }
    };
    // A new object in the 2025 shape is refused by the schema, naming the field.
    assert!(
        refusal.contains("spec.imageRegistryCache") && refusal.contains("array"),
        "{refusal}"
    );

    // The apiserver returns the stored object with the old type, pruned by the new schema: the
    // object stays, its `enabled` (unknown to a list) is gone.
    let raw = dynamic.get(NAME).await.unwrap();
    assert_eq!(
        raw.data["spec"]["imageRegistryCache"],
        json!({}),
        "{:#}",
        raw.data["spec"]
    );

    // Our typed client reads it (get and list), keeping the shape it read.
    let typed: Api<Runtime> = Api::namespaced(client.clone(), &ns);
    let stored = typed.get(NAME).await.unwrap();
    assert_eq!(
        stored.spec.image_registry_cache,
        Some(ImageRegistryCaches::Legacy(LegacyImageRegistryCache {
            enabled: None
        }))
    );
    assert!(stored.spec.image_registry_caches().is_empty());
    let listed = typed.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);

    // The controller's status writes pass (the status subresource keeps the stored spec).
    let status = json!({"status": {"state": "Pending", "auditLogCR": "auditlog-default"}});
    let written = typed
        .patch_status(NAME, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(
        written.status.and_then(|s| s.audit_log_cr).as_deref(),
        Some("auditlog-default")
    );

    // With our webhook: an update that leaves the field alone is admitted, with the warning.
    let webhook = Webhook::start(
        &env,
        Options {
            namespace: Some(ns.clone()),
            ..Options::default()
        },
    )
    .await;
    let (ok, out) = kubectl(
        &env,
        &[
            "label",
            "runtimes.infrastructuremanager.kyma-project.io",
            NAME,
            "-n",
            &ns,
            "example.com/touched=yes",
        ],
        None,
    )
    .await;
    assert!(ok, "{out}");
    // A spec update that leaves the field alone is admitted too, with the warning naming it.
    let (ok, out) = kubectl(
        &env,
        &[
            "patch",
            "runtimes.infrastructuremanager.kyma-project.io",
            NAME,
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"security":{"administrators":["erika.musterfrau@example.com","max.mustermann@example.com"]}}}"#,
        ],
        None,
    )
    .await;
    assert!(ok, "{out}");
    assert!(
        out.contains("spec.imageRegistryCache: holds the 2025 object shape"),
        "{out}"
    );
    let relabelled = typed.get(NAME).await.unwrap();
    assert_eq!(relabelled.spec.security.administrators.len(), 2);
    assert_eq!(
        relabelled.label("example.com/touched"),
        Some("yes"),
        "the update was stored"
    );
    assert!(matches!(
        relabelled.spec.image_registry_cache,
        Some(ImageRegistryCaches::Legacy(_))
    ));

    // Writing the old shape again changes nothing: `enabled` is pruned, the value stays `{}`.
    let rewritten = dynamic
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"imageRegistryCache": {"enabled": false}}})),
        )
        .await
        .unwrap();
    assert_eq!(rewritten.data["spec"]["imageRegistryCache"], json!({}));
    // Any other value that is not a list is refused by the apiserver, naming the field.
    let err = dynamic
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"imageRegistryCache": "docker.io"}})),
        )
        .await
        .expect_err("a string where the list belongs");
    assert!(err.to_string().contains("spec.imageRegistryCache"), "{err}");

    // Replacing it with a list ends the legacy handling.
    let caches = json!([{"name": "docker", "namespace": "default", "uid": "u-1",
                         "config": {"upstream": "docker.io"}}]);
    dynamic
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"imageRegistryCache": caches}})),
        )
        .await
        .unwrap();
    let replaced = typed.get(NAME).await.unwrap();
    assert_eq!(replaced.spec.image_registry_caches().len(), 1);
    assert_eq!(
        replaced.spec.image_registry_caches()[0].config.upstream,
        "docker.io"
    );
    // The CRD defaults what upstream's CRD defaults: none here, the cache sets no volume.
    assert!(
        replaced.spec.image_registry_caches()[0]
            .config
            .volume
            .is_none()
    );

    webhook.stop(&env).await;
}
