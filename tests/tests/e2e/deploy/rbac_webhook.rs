//! The webhook's RBAC in `deploy/webhook/rbac.yaml` is enough, and it is all the webhook gets:
//! the webhook's own KCP calls (certificate Secret, caBundle of its two configurations) run as
//! a certificate user bound only to the Role and ClusterRole of that file; the webhook starts,
//! creates its Secret, writes the caBundle into both configurations, serves admissions through
//! the apiserver, rotates its serving certificate and its CA, and the KCP apiserver's audit log
//! shows no request of that identity refused with 403, and no permission granted that the
//! webhook never used.
//!
//! The test webhook runs per-test names (namespace, Secret, configurations), so the file is
//! rendered with one named substitution: every deployed name (read from the Deployment's
//! arguments through the webhook's own flag parser and from `deploy/webhook/webhooks.yaml`) is
//! replaced by the test's; a resourceName the substitution does not know fails the test.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use clap::Parser as _;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};
use kim_certs::{Reason, RotationPolicy};
use kim_tests::testenv::{Credentials, TestEnv};
use kim_tests::webhook::{Options, Webhook, env, names, runtime_resource, valid_runtime};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The names the deployed webhook uses, as its Deployment configures it.
struct Deployed {
    namespace: String,
    secret: String,
    mutating: Vec<String>,
    validating: Vec<String>,
}

fn read_docs(rel: &str) -> Result<Vec<Value>> {
    let path = kim_tests::testenv::repo_root().join(rel);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    Ok(kim_tests::fixtures::yaml_documents(&text)?)
}

/// The Deployment's arguments through the webhook's flag parser (defaults included), checked
/// against the configurations deploy/ registers.
fn deployed_names() -> Result<Deployed> {
    let kustomization = read_docs("deploy/webhook/kustomization.yaml")?;
    let namespace = kustomization[0]["namespace"]
        .as_str()
        .context("deploy/webhook/kustomization.yaml sets no namespace")?
        .to_owned();
    let deployment = read_docs("deploy/webhook/deployment.yaml")?
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .context("deploy/webhook/deployment.yaml has no Deployment")?;
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    // Names set through the environment would not be seen by the parser below.
    for env_var in container["env"].as_array().into_iter().flatten() {
        let name = env_var["name"].as_str().unwrap_or_default();
        ensure!(
            ![
                "KIM_WEBHOOK_CERT_SECRET",
                "KIM_WEBHOOK_MUTATING_CONFIGS",
                "KIM_WEBHOOK_VALIDATING_CONFIGS"
            ]
            .contains(&name),
            "the webhook Deployment sets {name} in its environment; read it here too"
        );
    }
    let mut argv = vec!["kim-webhook".to_owned()];
    argv.extend(
        container["args"]
            .as_array()
            .context("webhook container args")?
            .iter()
            .map(|a| a.as_str().unwrap_or_default().to_owned()),
    );
    let cli = kim_webhook::cli::Cli::try_parse_from(&argv)
        .map_err(|e| anyhow::anyhow!("webhook Deployment args: {e}"))?;
    let kim_webhook::cli::Command::Serve(serve) = cli.command else {
        bail!("the webhook Deployment does not run `serve`");
    };
    let deployed = Deployed {
        namespace,
        secret: serve.certs.cert_secret.clone(),
        mutating: serve.certs.mutating_configs.clone(),
        validating: serve.certs.validating_configs.clone(),
    };
    // The webhook maintains exactly the configurations deploy/ registers.
    let mut registered: Vec<(String, String)> = read_docs("deploy/webhook/webhooks.yaml")?
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default().to_owned(),
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    registered.sort();
    let mut maintained: Vec<(String, String)> = deployed
        .mutating
        .iter()
        .map(|n| ("MutatingWebhookConfiguration".to_owned(), n.clone()))
        .chain(
            deployed
                .validating
                .iter()
                .map(|n| ("ValidatingWebhookConfiguration".to_owned(), n.clone())),
        )
        .collect();
    maintained.sort();
    ensure!(
        registered == maintained,
        "deploy/webhook/webhooks.yaml registers {registered:?}, the webhook's flags maintain {maintained:?}"
    );
    Ok(deployed)
}

/// `deploy/webhook/rbac.yaml` rendered for the test.
struct Rendered {
    role: Role,
    role_binding: RoleBinding,
    cluster_role: ClusterRole,
    cluster_role_binding: ClusterRoleBinding,
}

/// Renders the file with `substitution` (deployed name -> test name) for resourceNames and
/// object names, the Role's namespace set to `ns` and the subjects replaced by `user`.
fn render(ns: &str, user: &str, substitution: &BTreeMap<String, String>) -> Result<Rendered> {
    let rename = |name: &str, what: &str| -> Result<String> {
        substitution.get(name).cloned().with_context(|| {
            format!(
                "deploy/webhook/rbac.yaml: {what} {name:?} is none of the deployed names the \
                 test renames ({:?})",
                substitution.keys().collect::<Vec<_>>()
            )
        })
    };
    let subjects = Some(vec![Subject {
        kind: "User".into(),
        name: user.to_owned(),
        api_group: Some(RBAC_GROUP.into()),
        namespace: None,
    }]);
    let (mut role, mut role_binding, mut cluster_role, mut cluster_role_binding) =
        (None, None, None, None);
    for doc in read_docs("deploy/webhook/rbac.yaml")? {
        match doc["kind"].as_str() {
            Some("Role") => {
                let mut r: Role = serde_json::from_value(doc)?;
                r.metadata.namespace = Some(ns.to_owned());
                for rule in r.rules.iter_mut().flatten() {
                    if let Some(names) = rule.resource_names.as_mut() {
                        for n in names.iter_mut() {
                            *n = rename(n, "Role resourceName")?;
                        }
                    }
                }
                role = Some(r);
            }
            Some("RoleBinding") => {
                let mut b: RoleBinding = serde_json::from_value(doc)?;
                b.metadata.namespace = Some(ns.to_owned());
                b.subjects = subjects.clone();
                role_binding = Some(b);
            }
            Some("ClusterRole") => {
                let mut r: ClusterRole = serde_json::from_value(doc)?;
                let name = r.metadata.name.clone().unwrap_or_default();
                r.metadata.name = Some(rename(&name, "ClusterRole name")?);
                for rule in r.rules.iter_mut().flatten() {
                    if let Some(names) = rule.resource_names.as_mut() {
                        for n in names.iter_mut() {
                            *n = rename(n, "ClusterRole resourceName")?;
                        }
                    }
                }
                cluster_role = Some(r);
            }
            Some("ClusterRoleBinding") => {
                let mut b: ClusterRoleBinding = serde_json::from_value(doc)?;
                let name = b.metadata.name.clone().unwrap_or_default();
                b.metadata.name = Some(rename(&name, "ClusterRoleBinding name")?);
                b.role_ref.name = rename(&b.role_ref.name, "ClusterRoleBinding roleRef")?;
                b.subjects = subjects.clone();
                cluster_role_binding = Some(b);
            }
            other => bail!("unexpected kind {other:?} in deploy/webhook/rbac.yaml"),
        }
    }
    let (Some(role), Some(role_binding), Some(cluster_role), Some(cluster_role_binding)) =
        (role, role_binding, cluster_role, cluster_role_binding)
    else {
        bail!(
            "deploy/webhook/rbac.yaml must hold a Role, a RoleBinding, a ClusterRole and a ClusterRoleBinding"
        );
    };
    ensure!(
        role_binding.role_ref.name == role.metadata.name.clone().unwrap_or_default(),
        "the RoleBinding binds another Role"
    );
    Ok(Rendered {
        role,
        role_binding,
        cluster_role,
        cluster_role_binding,
    })
}

/// One permission: (namespace or "", resource, verb, resourceName or "").
type Permission = (String, String, String, String);

/// Every permission the rendered roles grant.
fn granted(r: &Rendered, ns: &str) -> Vec<Permission> {
    let mut out = Vec::new();
    let rules = r
        .role
        .rules
        .iter()
        .flatten()
        .map(|rule| (ns, rule))
        .chain(r.cluster_role.rules.iter().flatten().map(|rule| ("", rule)));
    for (namespace, rule) in rules {
        let names = rule.resource_names.clone().unwrap_or_default();
        let names = if names.is_empty() {
            vec![String::new()]
        } else {
            names
        };
        for resource in rule.resources.iter().flatten() {
            for verb in &rule.verbs {
                for name in &names {
                    out.push((
                        namespace.to_owned(),
                        resource.clone(),
                        verb.clone(),
                        name.clone(),
                    ));
                }
            }
        }
    }
    out
}

/// Waits until the authorizer allows `user` every permission (RBAC caches take a moment), so
/// that the first request of the webhook is not refused by a role that is merely not seen yet.
async fn wait_authorized(admin: &kube::Client, user: &str, perms: &[Permission]) -> Result<()> {
    let reviews: Api<SubjectAccessReview> = Api::all(admin.clone());
    for (namespace, resource, verb, name) in perms {
        let group = if resource.ends_with("webhookconfigurations") {
            "admissionregistration.k8s.io"
        } else {
            ""
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.to_owned()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: (!namespace.is_empty()).then(|| namespace.clone()),
                    resource: Some(resource.clone()),
                    verb: Some(verb.clone()),
                    name: (!name.is_empty()).then(|| name.clone()),
                    group: Some(group.to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let answer = reviews.create(&PostParams::default(), &review).await?;
            if answer.status.is_some_and(|s| s.allowed) {
                break;
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "{user} is still not allowed to {verb} {resource} {name:?} in {namespace:?} after 15 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// `(resource, verb)` pairs.
type Used = BTreeSet<(String, String)>;

/// The requests of `user` in the KCP audit log: (count, `resource verb` pairs answered below
/// 400, requests refused with 403).
fn audit_of(env: &TestEnv, user: &str) -> Result<(usize, Used, Vec<String>)> {
    let mine = env.audit_events_of(user)?;
    let pair = |e: &Value| {
        (
            e["objectRef"]["resource"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            e["verb"].as_str().unwrap_or_default().to_owned(),
        )
    };
    let used = mine
        .iter()
        .filter(|e| {
            e["responseStatus"]["code"]
                .as_u64()
                .is_some_and(|c| c < 400)
        })
        .map(pair)
        .collect();
    let refused = mine
        .iter()
        .filter(|e| e["responseStatus"]["code"] == 403)
        .map(|e| {
            let (r, v) = pair(e);
            format!("{r} {v} {}", e["requestURI"])
        })
        .collect();
    Ok((mine.len(), used, refused))
}

fn pem_count(bundle: &str) -> usize {
    bundle.matches("-----BEGIN CERTIFICATE-----").count()
}

/// The decoded caBundles of every webhook of a configuration.
async fn bundles(admin: &kube::Client, kind: &str, name: &str) -> Result<Vec<String>> {
    use base64::Engine as _;
    let ar = kube::discovery::ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
    };
    let obj = Api::<DynamicObject>::all_with(admin.clone(), &ar)
        .get(name)
        .await?;
    let mut out = Vec::new();
    for wh in obj.data["webhooks"].as_array().into_iter().flatten() {
        let b64 = wh["clientConfig"]["caBundle"].as_str().unwrap_or_default();
        let pem = base64::engine::general_purpose::STANDARD.decode(b64)?;
        out.push(String::from_utf8(pem)?);
    }
    Ok(out)
}

/// A valid Runtime is admitted and an invalid one denied by our webhook, both through the
/// apiserver (server-side dry run): the apiserver trusts the current caBundle.
async fn admissions_served(admin: &kube::Client, ns: &str, what: &str) -> Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &runtime_resource());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let good: DynamicObject = serde_json::from_value(valid_runtime("rbac-probe", ns))?;
    api.create(&dry, &good)
        .await
        .with_context(|| format!("{what}: a valid Runtime was not admitted"))?;
    let mut bad = valid_runtime("rbac-probe", ns);
    bad["spec"]["shoot"]["provider"]["workers"][0]["name"] = json!("Bad_Name");
    let bad: DynamicObject = serde_json::from_value(bad)?;
    match api.create(&dry, &bad).await {
        Err(kube::Error::Api(s))
            if s.message
                .contains("vruntime.infrastructuremanager.kyma-project.io") => {}
        other => bail!("{what}: an invalid Runtime was not denied by our webhook: {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_works_with_exactly_the_deployed_rbac() -> Result<()> {
    let env = env().await;
    let admin = env.kcp_client().await?;
    let ns = env.namespace("wh-rbac").await?;
    let user = format!("kim-webhook-{ns}");
    let test_names = names(&ns);
    let deployed = deployed_names()?;
    ensure!(
        deployed.mutating.len() == 1 && deployed.validating.len() == 1,
        "the test maps one mutating and one validating configuration; deploy/ has {:?} and {:?}",
        deployed.mutating,
        deployed.validating
    );

    // The substitution: deployed name -> this test's name.
    let cluster_scoped = format!("infrastructure-manager-webhook-{ns}");
    let substitution: BTreeMap<String, String> = BTreeMap::from([
        (deployed.secret.clone(), test_names.secret.clone()),
        (deployed.mutating[0].clone(), test_names.mutating.clone()),
        (
            deployed.validating[0].clone(),
            test_names.validating.clone(),
        ),
        // Cluster-scoped ClusterRole and binding: unique per test.
        (
            "infrastructure-manager-webhook".to_owned(),
            cluster_scoped.clone(),
        ),
    ]);
    let rendered = render(&ns, &user, &substitution)?;
    // What the test replaces by its user: the webhook's ServiceAccount in its namespace.
    ensure!(
        read_docs("deploy/webhook/rbac.yaml")?
            .iter()
            .filter(|d| d["kind"].as_str().is_some_and(|k| k.ends_with("Binding")))
            .all(|d| d["subjects"][0]["kind"] == "ServiceAccount"
                && d["subjects"][0]["namespace"] == deployed.namespace.as_str()),
        "the bindings of deploy/webhook/rbac.yaml must name the webhook's ServiceAccount in {}",
        deployed.namespace
    );
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &rendered.role)
        .await?;
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &rendered.role_binding)
        .await?;
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &rendered.cluster_role)
        .await?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &rendered.cluster_role_binding)
        .await?;
    let grants = granted(&rendered, &ns);
    wait_authorized(&admin, &user, &grants).await?;

    // The webhook's KCP identity: that user, in no group.
    let pair = env.ca().client_cert(&user, &[])?;
    let yaml = env.kcp().kubeconfig(&user, Credentials::Cert(&pair));
    let restricted = kim_tests::testenv::access::client_from_yaml("kcp", &yaml).await?;

    // Seconds-long lifetimes: serving 9 s (renewed after 6 s), CA 30 s (renewed with 16 s
    // left, a new CA trusted 4 s before it signs), checks every second.
    let policy = RotationPolicy::from_lifetimes(
        Duration::from_secs(30),
        Duration::from_secs(9),
        Duration::from_secs(4),
        Duration::from_secs(1),
    );
    policy.validate()?;
    // Start waits until the apiserver enforces both configurations, which needs the Secret
    // and the caBundle in both, all written by the restricted identity.
    let wh = Webhook::start(
        env,
        Options {
            policy,
            namespace: Some(ns.clone()),
            kcp_client: Some(restricted),
            ..Options::default()
        },
    )
    .await;

    let flow = async {
        let mutating = bundles(&admin, "MutatingWebhookConfiguration", &wh.mutating).await?;
        let validating = bundles(&admin, "ValidatingWebhookConfiguration", &wh.validating).await?;
        ensure!(
            !mutating.is_empty()
                && mutating
                    .iter()
                    .chain(&validating)
                    .all(|b| pem_count(b) == 1),
            "one CA in every webhook's caBundle after start"
        );
        let first_bundle = validating[0].clone();
        admissions_served(&admin, &ns, "after start").await?;

        // A serving rotation, then a CA rotation (new caBundle in both configurations).
        let replica = &wh.replicas[0];
        let started = tokio::time::Instant::now();
        loop {
            let outcomes = replica.outcomes.lock().unwrap().clone();
            let serving = outcomes.iter().any(|o| {
                o.issued_serving.is_some_and(|r| r != Reason::Missing) && o.loaded_new_serving
            });
            let ca = outcomes
                .iter()
                .any(|o| o.added_ca == Some(Reason::RenewalDue));
            if serving && ca {
                break;
            }
            let errors = replica.sync_errors.lock().unwrap().clone();
            ensure!(
                errors.is_empty(),
                "certificate synchronisation failed: {errors:?}"
            );
            ensure!(
                started.elapsed() < Duration::from_secs(40),
                "no serving and CA rotation within 40 s (serving {serving}, CA {ca})"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let started = tokio::time::Instant::now();
        loop {
            let mutating = bundles(&admin, "MutatingWebhookConfiguration", &wh.mutating).await?;
            let validating =
                bundles(&admin, "ValidatingWebhookConfiguration", &wh.validating).await?;
            if mutating
                .iter()
                .chain(&validating)
                .all(|b| *b != first_bundle && pem_count(b) >= 2)
            {
                break;
            }
            ensure!(
                started.elapsed() < Duration::from_secs(10),
                "the new CA is not in every caBundle 10 s after the CA rotation"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        admissions_served(&admin, &ns, "after the rotations").await?;
        let errors = replica.sync_errors.lock().unwrap().clone();
        ensure!(
            errors.is_empty(),
            "certificate synchronisation failed: {errors:?}"
        );
        anyhow::Ok(())
    }
    .await;
    wh.stop(env).await;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(&cluster_scoped, &DeleteParams::default())
        .await?;
    Api::<ClusterRole>::all(admin.clone())
        .delete(&cluster_scoped, &DeleteParams::default())
        .await?;

    // The audit log, checked whatever the flow's outcome, so a missing permission is named.
    let (count, used, refused) = audit_of(env, &user)?;
    eprintln!("requests of the webhook identity: {count}, used: {used:?}");
    ensure!(
        refused.is_empty(),
        "deploy/webhook/rbac.yaml lacks permissions; refused: {refused:#?}"
    );
    flow?;
    // Too wide: every granted verb on every resource was used.
    let granted_pairs: BTreeSet<(String, String)> = grants
        .iter()
        .map(|(_, resource, verb, _)| (resource.clone(), verb.clone()))
        .collect();
    let unused: Vec<_> = granted_pairs.difference(&used).collect();
    ensure!(
        unused.is_empty(),
        "deploy/webhook/rbac.yaml grants what the webhook never used: {unused:?}"
    );
    ensure!(
        count >= granted_pairs.len(),
        "only {count} requests of {user} in the audit log; is it logged?"
    );
    Ok(())
}
