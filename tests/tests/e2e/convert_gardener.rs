//! Every golden Shoot of `tests/golden/convert` (the conversion of each upstream sample Runtime,
//! see `shared/tests/upstream_compat/golden.rs`) and of `tests/golden/samples` (the repository's
//! samples, see `shared/tests/core/convert_golden.rs`) is accepted by the real gardener-apiserver v1.149 of the
//! test environment: a server-side dry-run create passes Gardener's validation and its
//! admission plugins (ShootValidator, ShootMutator, ResourceReferenceManager, ExtensionValidator,
//! ShootExposureClass, ...). The structured-auth ConfigMap of each golden is created for real
//! first, as the controller does, because Gardener checks that it exists.
//!
//! What the goldens name that only exists in upstream's landscape is mapped onto the test
//! landscape, and what the upstream samples ask for that Gardener v1.149 no longer supports is
//! replaced the way admission would; every substitution is listed in `EXPECTED_SUBSTITUTIONS`
//! so that a changed golden shows up here:
//! - always: the project namespace (`garden-kyma-dev` -> `garden-kyma`) and the credentials
//!   binding (`hyperscaler secret`, not even a valid name, -> the fixture binding of the provider);
//! - `version`: Kubernetes 1.28.7 (samples from 2024) -> the configuration's default `1.35`:
//!   Gardener v1.149 supports 1.32 and newer, and our validation rejects versions below 1.33;
//! - `networking`: no networking type (one sample) -> `calico`, what the mutating webhook's
//!   defaults set.
//!
//! The test landscape gets what the goldens reference and a real landscape has: the audit policy
//! ConfigMap, the audit-log credential Secrets, the `converged-cloud-internet` ExposureClass and
//! the `eu-access-only` access restriction on the regions the EU samples use.
//!
//! Controls show the acceptance means something: Gardener rejects, on the same dry-run path, a
//! too long pool name, a missing structured-auth ConfigMap, an access restriction the region does
//! not offer, and every golden without each of its substitutions (for that very reason).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kim_shared::gardener::Shoot;
use kim_tests::fixtures;
use kim_tests::testenv::{TestEnv, repo_root};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// Substitutions each golden needs (besides namespace and credentials binding); the
/// repository's samples (`runtime-*`) need none.
const EXPECTED_SUBSTITUTIONS: [(&str, &[&str]); 22] = [
    ("aws-freemium", &[]),
    ("aws-minimal", &[]),
    ("aws-trial", &[]),
    ("aws", &["version"]),
    ("azure-fremium", &[]),
    ("azure-lite", &[]),
    ("azure", &["version"]),
    ("gcp", &["version"]),
    (
        "infrastructuremanager_v1_runtime",
        &["version", "networking"],
    ),
    ("runtime-alicloud", &[]),
    ("runtime-aws", &[]),
    ("runtime-aws-acl", &[]),
    ("runtime-aws-dual-stack", &[]),
    ("runtime-aws-registry-cache", &[]),
    ("runtime-aws-pools-oidc", &[]),
    ("runtime-azure", &[]),
    ("runtime-gcp", &[]),
    ("runtime-gcp-extenders", &[]),
    ("runtime-gdch", &[]),
    ("runtime-openstack", &[]),
    ("runtime-trial", &[]),
    ("sap-converged-cloud", &["version"]),
];

/// The goldens of upstream's samples (`tests/golden/convert`) and of ours
/// (`tests/golden/samples`, named `runtime-*`).
fn goldens() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = ["tests/golden/convert", "tests/golden/samples"]
        .iter()
        .flat_map(|d| {
            let dir = repo_root().join(d);
            std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .map(|e| e.unwrap().path())
        })
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            (name, value)
        })
        .collect()
}

/// Maps a golden Shoot onto the test landscape; returns the substitutions beyond the namespace
/// and credentials binding.
fn adapt(shoot: &mut Value) -> Vec<&'static str> {
    let provider = shoot["spec"]["provider"]["type"]
        .as_str()
        .unwrap()
        .to_owned();
    shoot["metadata"]["namespace"] = json!(fixtures::PROJECT_NAMESPACE);
    shoot["spec"]["credentialsBindingName"] = json!(fixtures::credentials_name(&provider));
    let mut done = Vec::new();
    if shoot["spec"]["kubernetes"]["version"] == "1.28.7" {
        shoot["spec"]["kubernetes"]["version"] = json!("1.35");
        done.push("version");
    }
    if shoot["spec"]["networking"].get("type").is_none() {
        shoot["spec"]["networking"]["type"] = json!("calico");
        done.push("networking");
    }
    done
}

/// Creates an object, or leaves the existing one alone.
async fn ensure<K>(api: &Api<K>, obj: &K)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating {:?}: {e}", obj.meta().name),
    }
}

/// What the goldens reference, in the test landscape.
async fn prepare(client: &kube::Client) {
    let ns = fixtures::PROJECT_NAMESPACE;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let policy: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "audit-policy"},
        "data": {"policy": "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"}
    }))
    .unwrap();
    ensure(&cms, &policy).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    for provider in ["aws", "azure", "gcp", "openstack", "alicloud", "gdch"] {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("auditlog-credentials-{provider}")},
            "stringData": {"clientID": "fake", "clientSecret": "fake"}
        }))
        .unwrap();
        ensure(&secrets, &secret).await;
    }
    // The garden Secret of the registry cache with credentials in `runtime-aws-registry-cache`,
    // as upstream's garden secret manager would have synchronised it.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": REGISTRY_CACHE_SECRET},
        "stringData": {"username": "fake", "password": "fake"}
    }))
    .unwrap();
    ensure(&secrets, &secret).await;
    // The ExposureClass and the `eu-access-only` regions the goldens name are fixtures of the
    // test landscape (kim_tests::fixtures).
}

/// The project's Shoots and ConfigMaps in the prepared test landscape, and the dry-run create
/// the goldens go through.
async fn project() -> (Api<Shoot>, Api<ConfigMap>, PostParams) {
    let env = TestEnv::shared().await.unwrap();
    let client = env.garden_client().await.unwrap();
    prepare(&client).await;
    let dry_run = PostParams {
        dry_run: true,
        field_manager: Some("kim".into()),
    };
    (
        Api::namespaced(client.clone(), fixtures::PROJECT_NAMESPACE),
        Api::namespaced(client, fixtures::PROJECT_NAMESPACE),
        dry_run,
    )
}

/// The garden Secret `runtime-aws-registry-cache` references.
const REGISTRY_CACHE_SECRET: &str = "reg-cache-9c6f3a52";

#[tokio::test]
async fn every_golden_shoot_is_accepted_by_gardener() {
    let (shoots, cms, dry_run) = project().await;

    let mut goldens = goldens();
    goldens.sort_by(|a, b| a.0.cmp(&b.0));
    let expected: BTreeMap<&str, &[&str]> = EXPECTED_SUBSTITUTIONS.into_iter().collect();
    assert_eq!(
        goldens.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        expected.keys().copied().collect::<Vec<_>>(),
        "the goldens and EXPECTED_SUBSTITUTIONS disagree"
    );
    let mut rejected = Vec::new();
    let mut adapted_goldens = Vec::new();
    for (name, golden) in goldens {
        let mut shoot_json = golden["shoot"].clone();
        let substitutions = adapt(&mut shoot_json);
        assert_eq!(
            substitutions,
            expected[name.as_str()],
            "{name}: substitutions"
        );

        let mut cm: ConfigMap = serde_json::from_value(golden["structuredAuth"].clone()).unwrap();
        cm.metadata.namespace = Some(fixtures::PROJECT_NAMESPACE.into());
        ensure(&cms, &cm).await;

        let shoot: Shoot = serde_json::from_value(shoot_json).unwrap();
        match shoots.create(&dry_run, &shoot).await {
            Ok(accepted) => {
                // Gardener's mutator ran (it expands the version), so this went through admission.
                let version = accepted.spec.kubernetes.version.unwrap_or_default();
                assert_eq!(
                    version.matches('.').count(),
                    2,
                    "{name}: version {version} not expanded by Gardener"
                );
            }
            Err(e) => rejected.push(format!("{name}: {e}")),
        }
        adapted_goldens.push((name, shoot));
    }
    assert!(
        rejected.is_empty(),
        "Gardener rejected golden Shoots:\n{}",
        rejected.join("\n")
    );
    // Nothing was stored: it was a dry run.
    for (name, shoot) in &adapted_goldens {
        let stored = shoots
            .get_opt(shoot.metadata.name.as_deref().unwrap())
            .await
            .unwrap();
        assert!(stored.is_none(), "{name}: the dry run stored the Shoot");
    }

    // Controls: the same path rejects what Gardener forbids, so the acceptance above means
    // something. A pool name longer than 15 characters:
    let (_, mut bad) = adapted_goldens.into_iter().next().unwrap();
    bad.spec.provider.workers.as_mut().unwrap()[0].name = "a-pool-name-too-long".into();
    let err = shoots
        .create(&dry_run, &bad)
        .await
        .expect_err("Gardener must reject a 20-character pool name");
    assert!(err.to_string().contains("workers[0].name"), "{err}");
    // The structured-auth ConfigMap must exist (which is why the ConfigMaps were created):
    bad.spec.provider.workers.as_mut().unwrap()[0].name = "cpu-worker-0".into();
    if let Some(auth) = bad
        .spec
        .kubernetes
        .kube_api_server
        .as_mut()
        .and_then(|a| a.structured_authentication.as_mut())
    {
        auth.config_map_name = "structured-auth-config-missing".into();
    }
    let err = shoots
        .create(&dry_run, &bad)
        .await
        .expect_err("Gardener must reject a missing structured-auth ConfigMap");
    assert!(
        err.to_string().contains("structured-auth-config-missing"),
        "{err}"
    );

    // Each substitution is needed: without it Gardener refuses the golden, for that reason.
    for (name, golden) in self::goldens() {
        let mut raw = golden["shoot"].clone();
        let provider = raw["spec"]["provider"]["type"].as_str().unwrap().to_owned();
        raw["metadata"]["namespace"] = json!(fixtures::PROJECT_NAMESPACE);
        // Upstream's samples name a binding no landscape has; ours name the test landscape's.
        if golden["shoot"]["spec"]["credentialsBindingName"]
            != fixtures::credentials_name(&provider)
        {
            let mut unbound = raw.clone();
            adapt(&mut unbound);
            unbound["spec"]["credentialsBindingName"] =
                golden["shoot"]["spec"]["credentialsBindingName"].clone();
            let unbound = serde_json::from_value::<Shoot>(unbound).unwrap();
            let err = shoots
                .create(&dry_run, &unbound)
                .await
                .expect_err("unknown credentials binding");
            assert!(
                err.to_string().contains("\"hyperscaler secret\" not found"),
                "{name}: {err}"
            );
        } else {
            assert!(
                name.starts_with("runtime-"),
                "{name}: only our samples use the landscape's binding"
            );
        }

        raw["spec"]["credentialsBindingName"] = json!(fixtures::credentials_name(&provider));
        let expected = expected[name.as_str()];
        let message = match serde_json::from_value::<Shoot>(raw.clone()) {
            Ok(s) => shoots
                .create(&dry_run, &s)
                .await
                .err()
                .map(|e| e.to_string()),
            Err(e) => panic!("{name}: {e}"),
        };
        match expected.first() {
            None => assert_eq!(message, None, "{name}"),
            // Gardener reports the first failing stage only: networking before the version.
            Some(_) if expected.contains(&"networking") => {
                let m = message.unwrap_or_default();
                assert!(
                    m.contains("spec.networking.type: Required value"),
                    "{name}: {m}"
                );
            }
            Some(_) => {
                let m = message.unwrap_or_default();
                assert!(
                    m.contains("spec.kubernetes.version: Unsupported value: \"1.28.7\""),
                    "{name}: {m}"
                );
            }
        }
    }

    // The registry cache's Secret is checked (ResourceReferenceManager): a golden naming one
    // that does not exist is refused, so the acceptance above saw the reference resolve.
    let (_, mut golden) = self::goldens()
        .into_iter()
        .find(|(n, _)| n == "runtime-aws-registry-cache")
        .unwrap();
    let shoot_json = &mut golden["shoot"];
    adapt(shoot_json);
    let resources = shoot_json["spec"]["resources"].as_array_mut().unwrap();
    let entry = resources
        .iter_mut()
        .find(|r| r["name"] == REGISTRY_CACHE_SECRET)
        .expect("the registry cache's resource");
    entry["resourceRef"]["name"] = json!("reg-cache-missing");
    let shoot: Shoot = serde_json::from_value(shoot_json.clone()).unwrap();
    let err = shoots
        .create(&dry_run, &shoot)
        .await
        .expect_err("a missing registry cache Secret");
    assert!(err.to_string().contains("reg-cache-missing"), "{err}");

    // A worker pool with `controlPlane` (today's upstream CRD has the field) makes the Shoot
    // self-hosted, which Gardener refuses outside the `garden` namespace: what the webhook's
    // rule for `workers[i].controlPlane` refuses at admission.
    let (_, mut golden) = self::goldens()
        .into_iter()
        .find(|(n, _)| n == "runtime-aws")
        .unwrap();
    let shoot_json = &mut golden["shoot"];
    adapt(shoot_json);
    shoot_json["spec"]["provider"]["workers"][0]["controlPlane"] = json!({});
    let shoot: Shoot = serde_json::from_value(shoot_json.clone()).unwrap();
    let err = shoots
        .create(&dry_run, &shoot)
        .await
        .expect_err("a self-hosted Shoot in a project namespace");
    assert!(
        err.to_string()
            .contains("self-hosted shoots must be in the \"garden\" namespace"),
        "{err}"
    );

    // The GDCH golden is checked against its CloudProfile: the provider type must match.
    let (_, mut golden) = self::goldens()
        .into_iter()
        .find(|(n, _)| n == "runtime-gdch")
        .unwrap();
    let shoot_json = &mut golden["shoot"];
    adapt(shoot_json);
    shoot_json["spec"]["cloudProfile"]["name"] = json!("gcp");
    let shoot: Shoot = serde_json::from_value(shoot_json.clone()).unwrap();
    let err = shoots
        .create(&dry_run, &shoot)
        .await
        .expect_err("a gdch Shoot on the gcp CloudProfile");
    assert!(err.to_string().contains("provider"), "{err}");

    // Access restrictions are checked against the region: the CloudProfile addition above is
    // what a real landscape has, not a way around a check.
    let (_, mut golden) = self::goldens()
        .into_iter()
        .find(|(n, _)| n == "aws-minimal")
        .unwrap();
    let shoot_json = &mut golden["shoot"];
    adapt(shoot_json);
    shoot_json["spec"]["accessRestrictions"][0]["name"] = json!("us-access-only");
    let shoot: Shoot = serde_json::from_value(shoot_json.clone()).unwrap();
    let err = shoots
        .create(&dry_run, &shoot)
        .await
        .expect_err("unsupported access restriction");
    assert!(err.to_string().contains("accessRestrictions"), "{err}");
}

/// What the conversion relies on for a pool of another image than the configuration's default
/// without a version (it writes none: the default version is Garden Linux's; the unit tests
/// `convert_extenders` and `convert_patch` show that): Gardener gives such a pool that image's
/// newest supported version. With the default image's version, as upstream's converter writes
/// it, Gardener refuses the Shoot.
#[tokio::test]
async fn another_image_without_a_version_gets_its_newest_from_gardener() {
    let (shoots, cms, dry_run) = project().await;
    let (_, golden) = goldens()
        .into_iter()
        .find(|(n, _)| n == "runtime-aws")
        .unwrap();
    let mut cm: ConfigMap = serde_json::from_value(golden["structuredAuth"].clone()).unwrap();
    cm.metadata.namespace = Some(fixtures::PROJECT_NAMESPACE.into());
    ensure(&cms, &cm).await;
    let mut shoot_json = golden["shoot"].clone();
    adapt(&mut shoot_json);
    let (newest, default_version) = {
        let aws = fixtures::data::providers()
            .unwrap()
            .into_iter()
            .find(|p| p.provider == "aws")
            .unwrap();
        let (_, versions) = aws
            .machine_images
            .iter()
            .find(|(n, _)| n == "suse-chost")
            .expect("the AWS fixture offers suse-chost");
        let newest = versions
            .iter()
            .find(|v| v.classification == "supported")
            .unwrap()
            .version
            .clone();
        let config = fixtures::data::example_config().unwrap();
        (
            newest,
            config.converter.machine_image.default_version.clone(),
        )
    };

    shoot_json["spec"]["provider"]["workers"][0]["machine"]["image"] =
        json!({"name": "suse-chost"});
    let shoot: Shoot = serde_json::from_value(shoot_json.clone()).unwrap();
    let accepted = shoots.create(&dry_run, &shoot).await.unwrap();
    let image = accepted.spec.provider.workers.unwrap()[0]
        .machine
        .image
        .clone()
        .unwrap();
    assert_eq!(
        (image.name.as_str(), image.version.as_deref()),
        ("suse-chost", Some(newest.as_str()))
    );

    shoot_json["spec"]["provider"]["workers"][0]["machine"]["image"] =
        json!({"name": "suse-chost", "version": default_version});
    let shoot: Shoot = serde_json::from_value(shoot_json).unwrap();
    let err = shoots
        .create(&dry_run, &shoot)
        .await
        .expect_err("Gardener refuses Garden Linux's version on another image");
    assert!(err.to_string().contains("machine.image"), "{err}");
}
