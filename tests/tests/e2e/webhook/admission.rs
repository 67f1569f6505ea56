//! kim-webhook end-to-end through the real kube-apiserver: the repository's samples admitted with only the
//! documented defaults, each rule's invalid example refused by `kubectl apply` and by
//! `--dry-run=server` with the field path, UPDATE and DELETE rules, GardenerClusters, warnings,
//! auditAnnotations in the apiserver's audit log, and the deploy manifests accepted.
#![allow(clippy::unwrap_used)]

// The benchmark's review builder, checked here against what the apiserver sends.
#[path = "../../../../webhook/benches/support/review_sample.rs"]
mod review_sample;

use kim_tests::webhook::{
    Options, Webhook, admissible, create_with_only_the_documented_defaults, env, kim_config,
    kubectl, runtime_resource, sample, valid_runtime,
};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

fn yaml(v: &Value) -> String {
    serde_yaml_ng::to_string(v).unwrap()
}

/// Every sample Runtime of the repository (`config/samples/runtime-*.yaml`), by file name.
fn sample_runtimes() -> Vec<(String, Value)> {
    let dir = kim_tests::testenv::repo_root().join("config/samples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("runtime-") && n.ends_with(".yaml"))
        .collect();
    names.sort();
    assert!(
        names.len() >= 7,
        "expected the sample Runtimes in {}",
        dir.display()
    );
    names.into_iter().map(|n| (n.clone(), sample(&n))).collect()
}

#[tokio::test]
async fn every_sample_is_admitted_with_only_the_documented_defaults() {
    let env = env().await;
    let wh = Webhook::start(env, Options::default()).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.kcp_client().await.unwrap(), &wh.ns, &runtime_resource());
    let cfg = kim_config();
    for (i, (what, sample)) in sample_runtimes().into_iter().enumerate() {
        let input = admissible(sample, &format!("sample-{i}"), &wh.ns);
        create_with_only_the_documented_defaults(&api, &cfg, &what, &input).await;
    }
    let gc = sample("gardenercluster.yaml");
    let (ok, out) = kubectl(
        env,
        &["apply", "-n", &wh.ns, "-f", "-"],
        Some(&yaml(&json!({
            "apiVersion": gc["apiVersion"], "kind": gc["kind"],
            "metadata": {"name": "gc-sample", "namespace": wh.ns, "labels": gc["metadata"]["labels"]},
            "spec": gc["spec"]
        }))),
    ).await;
    assert!(ok, "GardenerCluster sample admitted: {out}");
    wh.stop(env).await;
}

/// How an invalid example is made from the valid base.
type Change = Box<dyn Fn(&mut Value)>;

/// (rule, change, field path in the message)
fn invalid_examples() -> Vec<(&'static str, Change, &'static str)> {
    vec![
        (
            "worker pool name is a DNS label",
            Box::new(|v| {
                v["spec"]["shoot"]["provider"]["workers"][0]["name"] = json!("Not_A_DNS_Label")
            }),
            "spec.shoot.provider.workers[0].name",
        ),
        (
            "worker pool name at most 15 characters",
            Box::new(|v| {
                v["spec"]["shoot"]["provider"]["workers"][0]["name"] =
                    json!("a-very-long-worker-pool")
            }),
            "spec.shoot.provider.workers[0].name",
        ),
        (
            "minimum <= maximum",
            Box::new(|v| {
                v["spec"]["shoot"]["provider"]["workers"][0]["minimum"] = json!(5);
                v["spec"]["shoot"]["provider"]["workers"][0]["maximum"] = json!(3);
            }),
            "spec.shoot.provider.workers[0].maximum",
        ),
        (
            "zones belong to the region",
            Box::new(|v| {
                v["spec"]["shoot"]["provider"]["workers"][0]["zones"] = json!(["us-east-1a"])
            }),
            "spec.shoot.provider.workers[0].zones[0]",
        ),
        (
            "region allowed for the provider",
            Box::new(|v| v["spec"]["shoot"]["region"] = json!("mars-1")),
            "spec.shoot.region",
        ),
        (
            "required labels",
            Box::new(|v| {
                v["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove("kyma-project.io/runtime-id");
            }),
            "metadata.labels[kyma-project.io/runtime-id]",
        ),
        (
            "the runtime ID is the Runtime's own",
            Box::new(|v| {
                v["metadata"]["labels"]["kyma-project.io/runtime-id"] = json!("another-runtime")
            }),
            "metadata.labels[kyma-project.io/runtime-id]",
        ),
        (
            "OIDC issuer is https",
            Box::new(|v| {
                v["spec"]["shoot"]["kubernetes"]["kubeAPIServer"]["oidcConfig"]["issuerURL"] =
                    json!("http://insecure.example.com")
            }),
            "spec.shoot.kubernetes.kubeAPIServer.oidcConfig.issuerURL",
        ),
        (
            "networks do not overlap",
            Box::new(|v| {
                v["spec"]["shoot"]["networking"]["pods"] =
                    v["spec"]["shoot"]["networking"]["nodes"].clone()
            }),
            "spec.shoot.networking.pods",
        ),
        (
            "shoot name",
            Box::new(|v| v["spec"]["shoot"]["name"] = json!("shoot-name-far-too-long")),
            "spec.shoot.name",
        ),
    ]
}

#[tokio::test]
async fn each_rules_invalid_example_is_refused_by_apply_and_dry_run_with_the_field_path() {
    let env = env().await;
    let wh = Webhook::start(env, Options::default()).await;
    let cfg = kim_config();
    for (i, (rule, change, field)) in invalid_examples().into_iter().enumerate() {
        let mut rt = valid_runtime(&format!("invalid-{i}"), &wh.ns);
        change(&mut rt);
        let manifest = yaml(&rt);
        // Our rules' message for the field: the CRD schema would say "is invalid" too.
        let typed: kim_shared::api::Runtime = serde_json::from_value(rt.clone()).unwrap();
        let ours = kim_shared::validation::validate_create(&typed, &cfg)
            .violations
            .into_iter()
            .find(|v| v.field == field)
            .unwrap_or_else(|| panic!("{rule}: our rules name {field}"))
            .message;
        for args in [
            vec!["apply", "--dry-run=server", "-f", "-"],
            vec!["apply", "-f", "-"],
        ] {
            let (ok, out) = kubectl(env, &args, Some(&manifest)).await;
            assert!(
                !ok,
                "{rule}: `kubectl {}` must fail, got: {out}",
                args.join(" ")
            );
            assert!(
                out.contains(field),
                "{rule}: `kubectl {}` must name {field}: {out}",
                args.join(" ")
            );
            assert!(
                out.contains(&ours),
                "{rule}: our webhook answered ({ours}): {out}"
            );
            // kubectl prints our causes as it prints the schema's (docs/webhook.md), one
            // `* field: message` line each when there are several.
            assert!(
                out.contains(&format!("The Runtime \"invalid-{i}\" is invalid: "))
                    && out.contains(&format!("{field}: {ours}")),
                "{rule}: `kubectl {}`: {out}",
                args.join(" ")
            );
        }
        let (exists, _) = kubectl(
            env,
            &["get", "runtime", "-n", &wh.ns, &format!("invalid-{i}")],
            None,
        )
        .await;
        assert!(!exists, "{rule}: nothing stored");
    }
    // A value of the wrong type passes the mutating webhook on to the CRD schema check,
    // which names it in the API's words.
    let mut wrong_type = valid_runtime("wrong-type", &wh.ns);
    wrong_type["spec"]["shoot"]["provider"]["workers"][0]["minimum"] = json!("3");
    let (ok, out) = kubectl(
        env,
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&yaml(&wrong_type)),
    )
    .await;
    assert!(!ok, "{out}");
    assert!(
        out.contains("spec.shoot.provider.workers[0].minimum")
            && out.contains("must be of type integer"),
        "{out}"
    );
    assert!(!out.contains("schema: invalid type"), "{out}");
    // What a Runtime sends is quoted back without its control characters: a node label key
    // cannot clear or retitle the terminal that shows the refusal.
    let mut escaping = valid_runtime("escaping", &wh.ns);
    escaping["spec"]["shoot"]["provider"]["workers"][0]["labels"] =
        json!({"a\u{1b}[2J\u{1b}]0;owned\u{7}b": "x"});
    let (ok, out) = kubectl(
        env,
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&yaml(&escaping)),
    )
    .await;
    assert!(!ok, "{out}");
    assert!(
        out.contains("labels[a\\u{1b}[2J") && !out.contains('\u{1b}') && !out.contains('\u{7}'),
        "{out:?}"
    );
    // A valid Runtime with a warning (ingress filtering asked for, egress filtering off)
    // passes the same way, with our warning shown.
    let mut warned = valid_runtime("valid", &wh.ns);
    warned["spec"]["security"]["networking"]["filter"] =
        json!({"egress": {"enabled": false}, "ingress": {"enabled": true}});
    let (ok, out) = kubectl(
        env,
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&yaml(&warned)),
    )
    .await;
    assert!(ok, "{out}");
    assert!(out.contains("Warning:"), "warnings reach kubectl: {out}");
    // KEB's update of an old runtime without a user ID: no administrators, admitted with a
    // warning.
    let mut no_admins = valid_runtime("valid", &wh.ns);
    no_admins["spec"]["security"]["administrators"] = json!([]);
    let (ok, out) = kubectl(
        env,
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&yaml(&no_admins)),
    )
    .await;
    assert!(ok, "{out}");
    assert!(
        out.contains("Warning:") && out.contains("names no administrator"),
        "{out}"
    );
    wh.stop(env).await;
}

/// KEB deprovisions by deleting the Runtime without the confirmation annotation: its
/// ServiceAccount (the default of `--deletion-trusted-principals`) is let through, while an
/// operator's `kubectl delete` and any other ServiceAccount still need the annotation.
#[tokio::test]
async fn keb_deletes_without_confirmation_everyone_else_needs_it() {
    let env = env().await;
    let wh = Webhook::start(env, Options::default()).await;
    let rt = valid_runtime("deprovisioned", &wh.ns);
    let (ok, out) = kubectl(env, &["apply", "-f", "-"], Some(&yaml(&rt))).await;
    assert!(ok, "{out}");

    // The admin kubeconfig may impersonate; system:masters gives the impersonated user the
    // RBAC to delete, so only the webhook decides.
    let keb = "--as=system:serviceaccount:kcp-system:kcp-kyma-environment-broker";
    let other = "--as=system:serviceaccount:kcp-system:kcp-kyma-metrics-collector";
    for who in [&[][..], &[other, "--as-group=system:masters"][..]] {
        let mut args = vec![
            "delete",
            "runtime",
            "-n",
            &wh.ns,
            "deprovisioned",
            "--wait=false",
        ];
        args.extend_from_slice(who);
        let (ok, out) = kubectl(env, &args, None).await;
        assert!(!ok, "unconfirmed delete by {who:?} refused: {out}");
        assert!(
            out.contains("operator.kyma-project.io/deletion-confirmed")
                && out.contains("Forbidden"),
            "{out}"
        );
    }
    let (ok, out) = kubectl(
        env,
        &[
            "delete",
            "runtime",
            "-n",
            &wh.ns,
            "deprovisioned",
            "--wait=false",
            keb,
            "--as-group=system:masters",
        ],
        None,
    )
    .await;
    assert!(ok, "KEB's deprovisioning delete admitted: {out}");
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.kcp_client().await.unwrap(), &wh.ns, &runtime_resource());
    assert!(
        api.get_opt("deprovisioned").await.unwrap().is_none(),
        "the Runtime is gone"
    );
    wh.stop(env).await;
}

#[tokio::test]
async fn update_rules_and_deletion_protection() {
    let env = env().await;
    let wh = Webhook::start(env, Options::default()).await;
    let rt = valid_runtime("lifecycle", &wh.ns);
    let (ok, out) = kubectl(env, &["apply", "-f", "-"], Some(&yaml(&rt))).await;
    assert!(ok, "{out}");

    // Immutable field.
    let mut moved = rt.clone();
    moved["spec"]["shoot"]["region"] = json!("eu-west-1");
    moved["spec"]["shoot"]["provider"]["workers"][0]["zones"] =
        json!(["eu-west-1a", "eu-west-1b", "eu-west-1c"]);
    let (ok, out) = kubectl(env, &["apply", "-f", "-"], Some(&yaml(&moved))).await;
    assert!(
        !ok && out.contains("spec.shoot.region"),
        "region is immutable: {out}"
    );

    // A valid change passes (more nodes).
    let mut bigger = rt.clone();
    bigger["spec"]["shoot"]["provider"]["workers"][0]["maximum"] = json!(25);
    let (ok, out) = kubectl(env, &["apply", "-f", "-"], Some(&yaml(&bigger))).await;
    assert!(ok, "{out}");

    // DELETE without confirmation is refused, also as a dry run.
    for extra in [&["--dry-run=server"][..], &[]] {
        let mut args = vec!["delete", "runtime", "-n", &wh.ns, "lifecycle"];
        args.extend_from_slice(extra);
        let (ok, out) = kubectl(env, &args, None).await;
        assert!(!ok, "unconfirmed delete refused: {out}");
        assert!(
            out.contains("operator.kyma-project.io/deletion-confirmed"),
            "{out}"
        );
    }
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let (ok, out) = kubectl(
        env,
        &[
            "annotate",
            "runtime",
            "-n",
            &wh.ns,
            "lifecycle",
            &format!("operator.kyma-project.io/deletion-confirmed={now}"),
        ],
        None,
    )
    .await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(
        env,
        &[
            "delete",
            "runtime",
            "-n",
            &wh.ns,
            "lifecycle",
            "--wait=false",
        ],
        None,
    )
    .await;
    assert!(ok, "confirmed delete allowed: {out}");
    wh.stop(env).await;

    // With --deletion-protection=false the same delete needs no confirmation.
    let wh = Webhook::start(
        env,
        Options {
            deletion_protection: false,
            ..Options::default()
        },
    )
    .await;
    let (ok, out) = kubectl(
        env,
        &["apply", "-f", "-"],
        Some(&yaml(&valid_runtime("unprotected", &wh.ns))),
    )
    .await;
    assert!(ok, "{out}");
    // The controller's finalizer, then a label: from then on every review of the object has
    // managedFields naming the finalizer as `v:"<finalizer>"`, a key with escapes.
    let finalizer = r#"{"metadata":{"finalizers":["runtime-controller.infrastructure-manager.kyma-project.io/deletion-hook"]}}"#;
    for args in [
        &[
            "patch",
            "runtime",
            "unprotected",
            "--type=merge",
            "-p",
            finalizer,
        ][..],
        &["label", "runtime", "unprotected", "kim-e2e/step=labelled"][..],
    ] {
        let (ok, out) = kubectl(env, &[args, &["-n", &wh.ns]].concat(), None).await;
        assert!(ok, "{args:?}: {out}");
    }
    let (ok, out) = kubectl(
        env,
        &[
            "delete",
            "runtime",
            "-n",
            &wh.ns,
            "unprotected",
            "--wait=false",
        ],
        None,
    )
    .await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(
        env,
        &[
            "patch",
            "runtime",
            "unprotected",
            "-n",
            &wh.ns,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
        None,
    )
    .await;
    assert!(ok, "finalizer removed: {out}");
    wh.stop(env).await;
}

/// A stored status our types cannot read (the controller's to write; here a condition time
/// with ten fractional digits, which the apiserver stores) blocks neither changes to the
/// Runtime nor its deletion: the webhooks do not read the status.
#[tokio::test]
async fn a_runtime_whose_stored_status_does_not_read_can_still_be_changed_and_deleted() {
    let env = env().await;
    let wh = Webhook::start(env, Options::default()).await;
    let name = "unreadable-status";
    let rt = valid_runtime(name, &wh.ns);
    let (ok, out) = kubectl(env, &["apply", "-f", "-"], Some(&yaml(&rt))).await;
    assert!(ok, "{out}");
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.kcp_client().await.unwrap(), &wh.ns, &runtime_resource());
    let status = json!({"status": {"state": "Pending", "conditions": [{
        "type": "Provisioned", "status": "False", "reason": "EditedByHand", "message": "",
        "lastTransitionTime": "2024-01-01T00:00:00.1234567891Z"}]}});
    api.patch_status(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(status),
    )
    .await
    .expect("the apiserver stores the status");
    let stored = api.get(name).await.unwrap();
    assert!(
        serde_json::from_value::<kim_shared::api::Runtime>(serde_json::to_value(&stored).unwrap())
            .is_err(),
        "the stored Runtime does not read as a Runtime"
    );

    let (ok, out) = kubectl(
        env,
        &[
            "label",
            "runtime",
            "-n",
            &wh.ns,
            name,
            "kim-e2e/step=labelled",
        ],
        None,
    )
    .await;
    assert!(ok, "a label is added: {out}");
    let mut bigger = rt.clone();
    bigger["spec"]["shoot"]["provider"]["workers"][0]["maximum"] = json!(25);
    let (ok, out) = kubectl(env, &["apply", "-f", "-"], Some(&yaml(&bigger))).await;
    assert!(ok, "a valid change passes: {out}");
    let mut moved = bigger.clone();
    moved["spec"]["shoot"]["region"] = json!("eu-west-1");
    moved["spec"]["shoot"]["provider"]["workers"][0]["zones"] =
        json!(["eu-west-1a", "eu-west-1b", "eu-west-1c"]);
    let (ok, out) = kubectl(env, &["apply", "-f", "-"], Some(&yaml(&moved))).await;
    assert!(
        !ok && out.contains("spec.shoot.region"),
        "the rules on changes still apply: {out}"
    );

    let (ok, out) = kubectl(env, &["delete", "runtime", "-n", &wh.ns, name], None).await;
    assert!(
        !ok && out.contains("operator.kyma-project.io/deletion-confirmed"),
        "deletion protection still applies: {out}"
    );
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let confirm = format!("operator.kyma-project.io/deletion-confirmed={now}");
    let (ok, out) = kubectl(
        env,
        &["annotate", "runtime", "-n", &wh.ns, name, &confirm],
        None,
    )
    .await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(
        env,
        &["delete", "runtime", "-n", &wh.ns, name, "--wait=false"],
        None,
    )
    .await;
    assert!(ok, "confirmed delete allowed: {out}");
    wh.stop(env).await;
}

#[tokio::test]
async fn gardener_cluster_is_validated() {
    let env = env().await;
    let wh = Webhook::start(env, Options::default()).await;
    let gc = sample("gardenercluster.yaml");
    let mut bad = json!({
        "apiVersion": gc["apiVersion"], "kind": gc["kind"],
        "metadata": {"name": "gc-bad", "namespace": wh.ns, "labels": gc["metadata"]["labels"]},
        "spec": gc["spec"]
    });
    bad["spec"]["kubeconfig"]["secret"]["name"] = json!("Not A Secret Name");
    let (ok, out) = kubectl(
        env,
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&yaml(&bad)),
    )
    .await;
    assert!(!ok && out.contains("spec.kubeconfig.secret.name"), "{out}");
    wh.stop(env).await;
}

/// Our own audit trail (`--audit-log-path`) names who did what, as the apiserver
/// authenticated it: a ServiceAccount token's user, uid, groups and token ID, the dry-run flag,
/// the decision and its violations, a record from each webhook. The token appears nowhere.
#[tokio::test]
async fn the_audit_trail_names_the_service_account_its_token_and_the_decision() {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use kim_tests::testenv::Credentials;

    let env = env().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let wh = Webhook::start(
        env,
        Options {
            audit_file: Some(path.clone()),
            ..Options::default()
        },
    )
    .await;
    let ns = wh.ns.clone();
    let admin = env.kcp_client().await.unwrap();
    let pp = PostParams::default();
    let sa: ServiceAccount = Api::namespaced(admin.clone(), &ns)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "keb"}})).unwrap(),
        )
        .await
        .unwrap();
    let role: Role = serde_json::from_value(json!({"metadata": {"name": "runtime-writer"},
        "rules": [{"apiGroups": ["infrastructuremanager.kyma-project.io"],
                   "resources": ["runtimes"], "verbs": ["create", "get"]}]}))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(&pp, &role)
        .await
        .unwrap();
    let rb: RoleBinding = serde_json::from_value(json!({"metadata": {"name": "runtime-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "runtime-writer"},
        "subjects": [{"kind": "ServiceAccount", "name": "keb", "namespace": ns}]}))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(&pp, &rb)
        .await
        .unwrap();
    let tr: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 600}})).unwrap();
    let token = Api::<ServiceAccount>::namespaced(admin, &ns)
        .create_token_request("keb", &pp, &tr)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .unwrap();
    let keb = env
        .kcp()
        .client("keb", Credentials::Token(&token))
        .await
        .unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(keb, &ns, &runtime_resource());

    // Allowed (the RBAC cache may take a moment to see the binding).
    let good: DynamicObject = serde_json::from_value(valid_runtime("by-keb", &ns)).unwrap();
    let mut created = Err(String::new());
    for _ in 0..50 {
        created = api
            .create(&pp, &good)
            .await
            .map(drop)
            .map_err(|e| e.to_string());
        if created.as_ref().is_err_and(|e| e.contains("forbidden")) {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        }
        break;
    }
    created.unwrap();
    // Denied, in a dry run.
    let mut bad = valid_runtime("by-keb-bad", &ns);
    bad["spec"]["shoot"]["provider"]["workers"][0]["name"] = json!("Bad_Name");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let err = api
        .create(&dry, &serde_json::from_value(bad).unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("spec.shoot.provider.workers[0].name"), "{err}");

    // The records are written by the sink's own thread, in batches.
    let of = |records: &[Value], webhook: &str, name: &str| {
        records
            .iter()
            .find(|r| r["webhook"] == webhook && r["name"] == name && r["namespace"] == json!(ns))
            .cloned()
    };
    let mut records = Vec::new();
    for _ in 0..100 {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(!text.contains(&token), "the token is in the audit file");
        records = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect();
        if of(&records, "validate", "by-keb").is_some()
            && of(&records, "validate", "by-keb-bad").is_some()
            && of(&records, "mutate", "by-keb").is_some()
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let allowed = of(&records, "validate", "by-keb").expect("validate record of by-keb");
    let denied = of(&records, "validate", "by-keb-bad").expect("validate record of by-keb-bad");
    let mutated = of(&records, "mutate", "by-keb").expect("mutate record of by-keb");
    let sa_uid = sa.metadata.uid.unwrap();
    for r in [&allowed, &denied, &mutated] {
        assert_eq!(r["user"], format!("system:serviceaccount:{ns}:keb"), "{r}");
        assert_eq!(r["user_uid"], json!(sa_uid), "{r}");
        let groups: Vec<&str> = r["groups"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            groups.contains(&"system:serviceaccounts")
                && groups.contains(&format!("system:serviceaccounts:{ns}").as_str()),
            "{r}"
        );
        let token_id = r["user_extra"]["authentication.kubernetes.io/credential-id"][0]
            .as_str()
            .unwrap_or_default();
        assert!(token_id.starts_with("JTI="), "{r}");
        assert_eq!(r["operation"], "CREATE", "{r}");
        assert_eq!(r["kind"], "Runtime", "{r}");
        // The apiserver of the tests runs on this machine and presents no client certificate.
        let peer = r["peer"].as_str().unwrap_or_default();
        assert!(
            peer.parse::<std::net::SocketAddr>()
                .is_ok_and(|a| a.ip().is_loopback()),
            "{r}"
        );
        assert_eq!(r["client_certificate"], false, "{r}");
    }
    assert_eq!(allowed["allowed"], true, "{allowed}");
    assert_eq!(allowed["dry_run"], false, "{allowed}");
    assert!(
        !mutated["patch_paths"].as_array().unwrap().is_empty(),
        "{mutated}"
    );
    assert_eq!(denied["allowed"], false, "{denied}");
    assert_eq!(denied["dry_run"], true, "{denied}");
    assert_eq!(
        denied["violations"][0]["field"], "spec.shoot.provider.workers[0].name",
        "{denied}"
    );
    wh.stop(env).await;
}

#[tokio::test]
async fn decisions_reach_the_apiserver_audit_log_and_nothing_is_written_per_request() {
    let env = env().await;
    let trail = tempfile::tempdir().unwrap();
    let wh = Webhook::start(
        env,
        Options {
            audit_file: Some(trail.path().join("audit.log")),
            ..Options::default()
        },
    )
    .await;
    let mut bad = valid_runtime("audited", &wh.ns);
    bad["spec"]["shoot"]["provider"]["workers"][0]["name"] = json!("Bad_Name");
    let (ok, _) = kubectl(env, &["apply", "-f", "-"], Some(&yaml(&bad))).await;
    assert!(!ok);
    let (ok, out) = kubectl(
        env,
        &["apply", "-f", "-"],
        Some(&yaml(&valid_runtime("audited-ok", &wh.ns))),
    )
    .await;
    assert!(ok, "{out}");
    let mut found_denied = None;
    let mut found_patch = false;
    for _ in 0..50 {
        let events = env.audit_events_mentioning(&wh.ns).unwrap();
        for e in events
            .iter()
            .filter(|e| e["objectRef"]["namespace"] == json!(wh.ns))
        {
            let ann = &e["annotations"];
            if ann["vruntime.infrastructuremanager.kyma-project.io/decision"] == "denied"
                && ann["vruntime.infrastructuremanager.kyma-project.io/violations"]
                    .as_str()
                    .is_some_and(|v| v.contains("spec.shoot.provider.workers[0].name"))
                && let Some(uid) =
                    ann["vruntime.infrastructuremanager.kyma-project.io/review-uid"].as_str()
            {
                found_denied = Some(uid.to_owned());
            }
            if ann["mruntime.infrastructuremanager.kyma-project.io/patched-paths"]
                .as_str()
                .is_some_and(|p| p.contains("/spec"))
            {
                found_patch = true;
            }
        }
        if found_denied.is_some() && found_patch {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let review_uid =
        found_denied.expect("denial with violations and its review UID in the apiserver audit log");
    // The apiserver's event and our record of the same decision share the review UID.
    let mut record = None;
    for _ in 0..100 {
        let text = std::fs::read_to_string(trail.path().join("audit.log")).unwrap_or_default();
        record = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|r| r["uid"] == json!(review_uid));
        if record.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let record = record.expect("our audit record of the denial the apiserver logged");
    assert_eq!(
        (&record["webhook"], &record["allowed"], &record["name"]),
        (&json!("validate"), &json!(false), &json!("audited"))
    );
    assert!(
        found_patch,
        "mutation with patched paths in the apiserver audit log"
    );
    // sideEffects None: the only objects the webhook writes are its Secret and the two
    // configurations' caBundle; no per-request writes from the webhook's user.
    let writes = env
        .audit_events_mentioning(&wh.ns)
        .unwrap()
        .into_iter()
        .filter(|e| e["objectRef"]["namespace"] == json!(wh.ns) && e["stage"] == "ResponseComplete")
        .filter(|e| ["create", "update", "patch"].contains(&e["verb"].as_str().unwrap_or("")))
        .filter(|e| {
            e["objectRef"]["resource"] != "runtimes" && e["objectRef"]["resource"] != "namespaces"
        })
        .filter(|e| {
            !(e["objectRef"]["resource"] == "secrets" && e["objectRef"]["name"] == json!(wh.secret))
        })
        .count();
    assert_eq!(writes, 0, "no per-request objects written");
    wh.stop(env).await;
}

#[tokio::test]
async fn deploy_manifests_are_accepted_by_the_apiserver() {
    let env = env().await;
    let ns = env.namespace("deploy").await.unwrap();
    let dir = kim_tests::testenv::repo_root().join("deploy/webhook");
    for f in [
        "serviceaccount.yaml",
        "rbac.yaml",
        "deployment.yaml",
        "service.yaml",
        "pdb.yaml",
        "webhooks.yaml",
    ] {
        let path = dir.join(f);
        let (ok, out) = kubectl(
            env,
            &[
                "apply",
                "--dry-run=server",
                "-n",
                &ns,
                "-f",
                path.to_str().unwrap(),
            ],
            None,
        )
        .await;
        assert!(ok, "{f} rejected by the apiserver: {out}");
    }
    // The webhook configurations carry the settings the issue asks for.
    let text = std::fs::read_to_string(dir.join("webhooks.yaml")).unwrap();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc).unwrap();
        let mutating = v["kind"] == "MutatingWebhookConfiguration";
        for wh in v["webhooks"].as_array().unwrap() {
            assert_eq!(wh["failurePolicy"], "Fail");
            assert_eq!(wh["sideEffects"], "None");
            assert_eq!(wh["matchPolicy"], "Equivalent");
            assert_eq!(wh["admissionReviewVersions"], json!(["v1"]));
            assert_eq!(wh["timeoutSeconds"], json!(if mutating { 1 } else { 2 }));
            assert!(wh["namespaceSelector"].is_object());
        }
    }
}

/// The admission half of least privilege (the controller holds stored objects to the same
/// rules): protected namespaces, rules that hand out other identities, wildcards, roles not on
/// the allow-list and the admin kubeconfig Secrets' names are refused with the field path;
/// a harmless request and an allow-listed role are admitted.
#[tokio::test]
async fn runtime_access_is_held_to_least_privilege() {
    let env = env().await;
    let wh = Webhook::start(
        env,
        Options {
            access_policy: kim_shared::access::AccessPolicy {
                allowed_role_refs: vec![
                    "ClusterRole/view".parse().unwrap(),
                    "ClusterRole/edit=alice@example.com".parse().unwrap(),
                ],
                ..Default::default()
            },
            ..Options::default()
        },
    )
    .await;
    let ra = |name: &str, spec: Value| {
        let mut full = json!({
            "runtimeId": "runtime-id",
            "serviceAccount": {"name": "pod-reader", "namespace": "apps"},
        });
        for (k, v) in spec.as_object().unwrap() {
            full[k] = v.clone();
        }
        json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
            "kind": "RuntimeAccess",
            "metadata": {"name": name, "namespace": wh.ns},
            "spec": full,
        })
    };
    let role = |rules: Value| json!({"role": {"namespace": "apps", "rules": rules}});
    let cluster_role = |rules: Value| json!({"clusterRole": {"rules": rules}});
    let dry_run = |obj: Value| async move {
        kubectl(
            env,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&yaml(&obj)),
        )
        .await
    };
    for (name, spec) in [
        (
            "reader",
            role(json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])),
        ),
        (
            "viewer",
            json!({"roleRef": {"kind": "ClusterRole", "name": "view"}}),
        ),
        (
            // Whether the runtime refuses external IPs is the controller's question.
            "exposer",
            role(json!([{"apiGroups": [""], "resources": ["services"], "verbs": ["create"]}])),
        ),
    ] {
        let (ok, out) = dry_run(ra(name, spec)).await;
        assert!(ok, "{name} admitted: {out}");
    }
    let mut system = ra(
        "system",
        role(json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])),
    );
    system["spec"]["serviceAccount"]["namespace"] = json!("kube-system");
    let mut admin_secret = ra(
        "admin-secret",
        role(json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])),
    );
    admin_secret["spec"]["secret"] = json!({"name": "kubeconfig-runtime-id"});
    let refused = [
        ("system", system, "spec.serviceAccount.namespace"),
        (
            "wildcard",
            ra(
                "wildcard",
                role(json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}])),
            ),
            "spec.role.rules[0].verbs",
        ),
        (
            "token-minter",
            ra(
                "token-minter",
                role(
                    json!([{"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]}]),
                ),
            ),
            "spec.role.rules[0].resources",
        ),
        (
            "exec",
            ra(
                "exec",
                role(
                    json!([{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]}]),
                ),
            ),
            "spec.role.rules[0].resources",
        ),
        (
            "all-secrets",
            ra(
                "all-secrets",
                cluster_role(
                    json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
                ),
            ),
            "spec.clusterRole.rules[0].resources",
        ),
        (
            "csr-approver",
            ra(
                "csr-approver",
                cluster_role(
                    json!([{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "verbs": ["approve"]}]),
                ),
            ),
            "spec.clusterRole.rules[0].verbs",
        ),
        (
            "escalator",
            ra(
                "escalator",
                cluster_role(
                    json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["escalate"]}]),
                ),
            ),
            "spec.clusterRole.rules[0].verbs",
        ),
        (
            "admin",
            ra(
                "admin",
                json!({"roleRef": {"kind": "ClusterRole", "name": "cluster-admin"}}),
            ),
            "spec.roleRef",
        ),
        ("admin-secret", admin_secret, "spec.secret.name"),
        (
            "endpoints",
            ra(
                "endpoints",
                role(
                    json!([{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["create"]}]),
                ),
            ),
            "spec.role.rules[0].resources",
        ),
        (
            "mesh-hosts",
            ra(
                "mesh-hosts",
                role(
                    json!([{"apiGroups": ["networking.istio.io"], "resources": ["serviceentries"], "verbs": ["create"]}]),
                ),
            ),
            "spec.role.rules[0].resources",
        ),
    ];
    for (name, obj, field) in refused {
        let (ok, out) = dry_run(obj).await;
        assert!(
            !ok && out.contains(field),
            "{name} refused with the field path {field}: {out}"
        );
    }

    // A role listed for one requester: that user's request is admitted, another's refused.
    let editor = ra(
        "editor",
        json!({"roleRef": {"kind": "ClusterRole", "name": "edit"}}),
    );
    let (ok, out) = dry_run(editor.clone()).await;
    assert!(
        !ok && out.contains("spec.roleRef") && out.contains("alice@example.com"),
        "another requester is refused, naming who may: {out}"
    );
    let alice = env
        .kcp_user_client("alice@example.com", &["system:masters"])
        .await
        .unwrap();
    let as_alice: Api<DynamicObject> = Api::namespaced_with(
        alice,
        &wh.ns,
        &kube::api::ApiResource::erase::<kim_shared::api::runtime_access::RuntimeAccess>(&()),
    );
    as_alice
        .create(
            &PostParams {
                dry_run: true,
                field_manager: None,
            },
            &serde_json::from_value(editor).unwrap(),
        )
        .await
        .expect("the listed requester is admitted");
    wh.stop(env).await;
}

/// Who asked for an access is read from the RuntimeAccess itself: the webhook records the
/// creating user in `requested-by` (a value the request sends is replaced), a replace without
/// it gets it back, a change is refused naming the field, and `kubectl get -o wide` shows it.
#[tokio::test]
async fn a_runtime_access_records_who_created_it() {
    use kim_shared::access::ANNOTATION_REQUESTED_BY as REQUESTED_BY;
    use kim_shared::api::runtime_access::RuntimeAccess;
    let env = env().await;
    let wh = Webhook::start(env, Options::default()).await;
    let alice = env
        .kcp_user_client("alice@example.com", &["system:masters"])
        .await
        .unwrap();
    let by_alice: Api<RuntimeAccess> = Api::namespaced(alice, &wh.ns);
    use kube::api::{Patch, PatchParams};
    let by_admin: Api<RuntimeAccess> = Api::namespaced(env.kcp_client().await.unwrap(), &wh.ns);
    let forged: RuntimeAccess = serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "RuntimeAccess",
        "metadata": {"name": "reader", "annotations": {REQUESTED_BY: "bob@example.com"}},
        "spec": {
            "runtimeId": "runtime-id",
            "serviceAccount": {"name": "pod-reader", "namespace": "apps"},
            "role": {"namespace": "apps", "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
        },
    }))
    .unwrap();
    let requester = |ra: &RuntimeAccess| kim_shared::access::requested_by(ra).map(str::to_owned);
    let stored = by_alice
        .create(&PostParams::default(), &forged)
        .await
        .unwrap();
    assert_eq!(requester(&stored).as_deref(), Some("alice@example.com"));

    // A replace from a manifest that lacks it: kept.
    let mut replaced = stored.clone();
    replaced.metadata.annotations = None;
    replaced.spec.token_expiration_seconds = Some(1200);
    let after = by_alice
        .replace("reader", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(after.spec.token_expiration_seconds, Some(1200));
    assert_eq!(requester(&after).as_deref(), Some("alice@example.com"));

    // A change: refused, naming the field.
    let (ok, out) = kubectl(
        env,
        &[
            "annotate",
            "runtimeaccess",
            "reader",
            "-n",
            &wh.ns,
            "--overwrite",
            &format!("{REQUESTED_BY}=mallory"),
        ],
        None,
    )
    .await;
    assert!(
        !ok && out.contains(&format!("metadata.annotations[{REQUESTED_BY}]"))
            && out.contains("cannot be changed"),
        "{out}"
    );
    let (ok, out) = kubectl(
        env,
        &["get", "runtimeaccess", "reader", "-n", &wh.ns, "-o", "wide"],
        None,
    )
    .await;
    assert!(
        ok && out.contains("REQUESTED-BY") && out.contains("alice@example.com"),
        "{out}"
    );

    // Only alice changes what it grants: another requester may not redirect the kubeconfig
    // into a Secret it reads, but may annotate the object (revoke its tokens).
    let redirect = json!({"spec": {"secret": {"name": "mine-kubeconfig"}}});
    let refused = by_admin
        .patch("reader", &PatchParams::default(), &Patch::Merge(&redirect))
        .await
        .expect_err("another user's spec change is refused");
    assert!(
        refused
            .to_string()
            .contains("only the user who created this RuntimeAccess"),
        "{refused}"
    );
    by_admin
        .patch(
            "reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "infrastructuremanager.kyma-project.io/revoke-tokens": "true"}}})),
        )
        .await
        .expect("another user may annotate");
    by_alice
        .patch("reader", &PatchParams::default(), &Patch::Merge(&redirect))
        .await
        .expect("the requester changes its spec");
    wh.stop(env).await;
}

/// A RuntimeAccess's runtime and ServiceAccount cannot change: refused by the webhook and, in
/// a namespace no webhook covers (or while none answers), by the CRD's own rule, with the
/// field and what to do instead; a change of its permissions passes.
#[tokio::test]
async fn runtime_access_runtime_and_account_are_immutable_with_or_without_the_webhook() {
    let env = env().await;
    let wh = Webhook::start(env, Options::default()).await;
    let bare = env.namespace("ra-immutable").await.unwrap();
    for ns in [wh.ns.as_str(), bare.as_str()] {
        let mut ra = json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
            "kind": "RuntimeAccess",
            "metadata": {"name": "reader", "namespace": ns},
            "spec": {
                "runtimeId": "runtime-id",
                "serviceAccount": {"name": "pod-reader", "namespace": "apps"},
                "role": {"namespace": "apps", "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
            },
        });
        let (ok, out) = kubectl(env, &["apply", "-f", "-"], Some(&yaml(&ra))).await;
        assert!(ok, "{ns}: {out}");
        ra["spec"]["role"]["rules"][0]["verbs"] = json!(["get", "list"]);
        let (ok, out) = kubectl(env, &["apply", "-f", "-"], Some(&yaml(&ra))).await;
        assert!(ok, "{ns}: a change of the rules passes: {out}");
        for (field, value, message) in [
            (
                "runtimeId",
                json!("another-runtime"),
                "create a new RuntimeAccess for another runtime",
            ),
            (
                "serviceAccount",
                json!({"name": "other", "namespace": "apps"}),
                "create a new RuntimeAccess for another ServiceAccount",
            ),
        ] {
            let mut changed = ra.clone();
            changed["spec"][field] = value;
            let (ok, out) = kubectl(env, &["apply", "-f", "-"], Some(&yaml(&changed))).await;
            assert!(
                !ok && out.contains(&format!("spec.{field}")) && out.contains(message),
                "{ns}: a change of spec.{field} is refused naming it: {out}"
            );
        }
    }
    wh.stop(env).await;
}

/// `kyma-project.io/runtime-id` names a Runtime's GardenerCluster, which the Runtime's
/// deletion deletes: an edit pointing it at another runtime is refused, on the Runtime and on
/// the GardenerCluster; other label edits pass.
#[tokio::test]
async fn the_runtime_id_label_is_immutable() {
    let env = env().await;
    let wh = Webhook::start(env, Options::default()).await;
    let rt = valid_runtime("rt-id", &wh.ns);
    let (ok, out) = kubectl(env, &["apply", "-f", "-"], Some(&yaml(&rt))).await;
    assert!(ok, "{out}");
    let gc = sample("gardenercluster.yaml");
    let mut gc = json!({
        "apiVersion": gc["apiVersion"], "kind": gc["kind"],
        "metadata": {"name": "gc-id", "namespace": wh.ns,
                     "labels": {"kyma-project.io/runtime-id": "gc-id"}},
        "spec": gc["spec"]
    });
    gc["spec"]["kubeconfig"]["secret"]["namespace"] = json!(wh.ns);
    let (ok, out) = kubectl(env, &["apply", "-f", "-"], Some(&yaml(&gc))).await;
    assert!(ok, "{out}");
    for (kind, name) in [("runtime", "rt-id"), ("gardenercluster", "gc-id")] {
        let (ok, out) = kubectl(
            env,
            &[
                "label",
                kind,
                name,
                "-n",
                &wh.ns,
                "--overwrite",
                "kyma-project.io/runtime-id=another-runtime",
            ],
            None,
        )
        .await;
        assert!(
            !ok && out.contains("metadata.labels[kyma-project.io/runtime-id]")
                && out.contains("immutable"),
            "{kind}: changing the runtime ID refused: {out}"
        );
        let (ok, out) = kubectl(
            env,
            &["label", kind, name, "-n", &wh.ns, "kim-e2e/other=yes"],
            None,
        )
        .await;
        assert!(ok, "{kind}: another label may change: {out}");
    }
    wh.stop(env).await;
}

/// The benchmark's reviews (`review_sample`, `make bench-webhook`) have the shape
/// of what the apiserver sends: the same keys in the request, in the object's metadata and in
/// its managedFields entry, and the same `fieldsV1` for the same object. A review without the
/// managedFields is a third smaller and cheaper to decode than a real one.
#[tokio::test]
async fn benchmark_reviews_are_shaped_as_the_apiservers() {
    use kim_webhook::request::Mode;
    use review_sample::{create_review, fields_v1};
    use std::collections::BTreeSet;
    let env = env().await;
    let captured = kim_tests::webhook::Captured::default();
    let wh = Webhook::start(
        env,
        Options {
            capture: Some(captured.clone()),
            ..Options::default()
        },
    )
    .await;
    let client = env.kcp_client().await.unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client, &wh.ns, &runtime_resource());
    let sent = valid_runtime("shaped", &wh.ns);
    let manager = "kyma-environment-broker";
    api.create(
        &PostParams {
            field_manager: Some(manager.into()),
            ..PostParams::default()
        },
        &serde_json::from_value(sent.clone()).unwrap(),
    )
    .await
    .unwrap();
    let keys = |v: &Value| -> BTreeSet<String> {
        v.as_object()
            .unwrap_or_else(|| panic!("an object: {v}"))
            .keys()
            .cloned()
            .collect()
    };
    let reviews = captured.lock().unwrap().clone();
    for (path, mode) in [
        ("/mutate/runtime", Mode::Mutate),
        ("/validate/runtime", Mode::Validate),
    ] {
        let (_, real) = reviews
            .iter()
            .find(|(p, r)| p == path && r["request"]["name"] == "shaped")
            .unwrap_or_else(|| panic!("the apiserver called {path} for the create"));
        let sample = create_review(&sent, &sent, mode, manager, "system:serviceaccount:x:y");
        let (real, sample) = (&real["request"], &sample["request"]);
        assert_eq!(keys(real), keys(sample), "{path}: request");
        assert_eq!(keys(&real["options"]), keys(&sample["options"]), "{path}");
        let meta = "/object/metadata";
        assert_eq!(
            keys(real.pointer(meta).unwrap()),
            keys(sample.pointer(meta).unwrap()),
            "{path}: object.metadata"
        );
        let entry = "/object/metadata/managedFields/0";
        let (real_entry, sample_entry) =
            (real.pointer(entry).unwrap(), sample.pointer(entry).unwrap());
        assert_eq!(
            keys(real_entry),
            keys(sample_entry),
            "{path}: managedFields[0]"
        );
        assert_eq!(real_entry["manager"], manager);
        assert_eq!(real_entry["operation"], "Update");
        assert_eq!(
            real_entry["fieldsV1"],
            fields_v1(&sent),
            "{path}: the fieldsV1 the apiserver recorded for the object as sent"
        );
        assert_eq!(
            real.pointer("/object/metadata/managedFields")
                .and_then(Value::as_array)
                .map(Vec::len),
            Some(1)
        );
    }
    wh.stop(env).await;
}
