//! UPDATE rules (immutable fields, zones, version), DELETE rules (deletion protection) and the
//! GardenerCluster rules.
#![allow(clippy::unwrap_used)]

use crate::validation_fixtures::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kim_shared::api::ProviderType;
use kim_shared::names;
use kim_shared::validation::{DeletionPolicy, validate_delete, validate_gardener_cluster};

const CONFIRMED: &str = "metadata.annotations[operator.kyma-project.io/deletion-confirmed]";

#[test]
fn an_unchanged_or_harmless_update_is_allowed() {
    let old = sample();
    accepts_update(&old, &old);
    let new = runtime(|rt| {
        rt.spec
            .security
            .administrators
            .push("second@myorg.com".into());
        rt.spec.shoot.provider.workers[0].maximum = 30;
    });
    accepts_update(&old, &new);
}

#[test]
fn identity_of_the_cluster_is_immutable() {
    let old = sample();
    let cases: Vec<(&str, kim_shared::api::Runtime)> = vec![
        (
            "spec.shoot.name",
            runtime(|rt| rt.spec.shoot.name = "other".into()),
        ),
        (
            "spec.shoot.region",
            runtime(|rt| {
                rt.spec.shoot.region = "eu-west-1".into();
                let zones = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
                    .map(String::from)
                    .to_vec();
                // A new pool, so that only the region is at fault (not removed zones).
                rt.spec.shoot.provider.workers[0].zones = Some(zones);
                rt.spec.shoot.provider.workers[0].name = "new-pool".into();
            }),
        ),
        (
            "spec.shoot.platformRegion",
            runtime(|rt| rt.spec.shoot.platform_region = "cf-eu20".into()),
        ),
        (
            "spec.shoot.secretBindingName",
            runtime(|rt| rt.spec.shoot.secret_binding_name = "other".into()),
        ),
        (
            "spec.shoot.networking.nodes",
            runtime(|rt| rt.spec.shoot.networking.nodes = "10.251.0.0/16".into()),
        ),
        (
            "spec.shoot.networking.pods",
            runtime(|rt| rt.spec.shoot.networking.pods = "100.80.0.0/12".into()),
        ),
        (
            "spec.shoot.networking.services",
            runtime(|rt| rt.spec.shoot.networking.services = "100.112.0.0/13".into()),
        ),
    ];
    for (field, new) in cases {
        rejects_with(&old, &new, field, "immutable");
    }
}

/// [`rejects_update`] plus a message check (the update helpers have no `_with` variant).
fn rejects_with(
    old: &kim_shared::api::Runtime,
    new: &kim_shared::api::Runtime,
    field: &str,
    needle: &str,
) {
    let v = rejects_update(old, new, field);
    assert!(v.message.contains(needle), "{field}: {v}");
}

#[test]
fn provider_type_is_immutable() {
    let old = sample();
    let mut new = sample_runtime("runtime-azure.yaml");
    new.metadata.labels = old.metadata.labels.clone();
    new.spec.shoot.name = old.spec.shoot.name.clone();
    new.spec.shoot.region = old.spec.shoot.region.clone();
    new.spec.shoot.networking = old.spec.shoot.networking.clone();
    new.spec.shoot.platform_region = old.spec.shoot.platform_region.clone();
    assert_eq!(new.spec.shoot.provider.type_, ProviderType::Azure);
    let f = kim_shared::validation::validate_update(&old, &new, config());
    assert!(
        f.violations
            .iter()
            .any(|v| v.field == "spec.shoot.provider.type"),
        "{:?}",
        f.violations
    );
}

#[test]
fn networking_type_and_failure_tolerance_are_immutable_once_set() {
    let old = runtime(|rt| rt.spec.shoot.networking.type_ = Some("calico".into()));
    let new = runtime(|rt| rt.spec.shoot.networking.type_ = Some("cilium".into()));
    rejects_update(&old, &new, "spec.shoot.networking.type");
    // Unset -> set is allowed (the mutating webhook fills the default).
    accepts_update(&sample(), &old);

    let new = runtime(|rt| rt.spec.shoot.control_plane = None);
    rejects_update(
        &sample(),
        &new,
        "spec.shoot.controlPlane.highAvailability.failureTolerance.type",
    );
}

#[test]
fn zones_may_be_added_not_removed() {
    let two = runtime(|rt| {
        rt.spec.shoot.provider.workers[0].zones =
            Some(vec!["eu-central-1a".into(), "eu-central-1b".into()])
    });
    let three = sample();
    let fix = |rt: &mut kim_shared::api::Runtime| {
        let w = &mut rt.spec.shoot.provider.workers[0];
        w.max_surge = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1));
    };
    let mut two = two;
    fix(&mut two);
    let mut three = three;
    fix(&mut three);
    accepts_update(&two, &three);
    rejects_with(
        &three,
        &two,
        "spec.shoot.provider.workers[0].zones",
        "eu-central-1c",
    );
}

#[test]
fn zones_of_old_and_new_pools_together_stay_within_eight() {
    let mut cfg = config().clone();
    cfg.kim
        .providers
        .values_mut()
        .for_each(|p| p.regions = None);
    let zones = |letters: &str| {
        letters
            .chars()
            .map(|l| format!("eu-central-1{l}"))
            .collect::<Vec<_>>()
    };
    let pool = |name: &str, letters: &str| {
        let mut w = sample().spec.shoot.provider.workers[0].clone();
        w.name = name.into();
        w.zones = Some(zones(letters));
        w
    };
    let old = runtime(|rt| {
        rt.spec.shoot.provider.workers[0].zones = Some(zones("abc"));
        rt.spec.shoot.provider.additional_workers = Some(vec![pool("gone", "defgh")]);
    });
    assert!(kim_shared::validation::validate_create(&old, &cfg).is_allowed());
    // The pool with five zones goes, a pool with a ninth zone comes: the cluster keeps all nine.
    let new = runtime(|rt| {
        rt.spec.shoot.provider.workers[0].zones = Some(zones("abc"));
        rt.spec.shoot.provider.additional_workers = Some(vec![pool("new", "i")]);
    });
    assert!(kim_shared::validation::validate_create(&new, &cfg).is_allowed());
    let v = denied(
        kim_shared::validation::validate_update(&old, &new, &cfg),
        "spec.shoot.provider.workers",
    );
    assert_eq!(
        v.message,
        "the cluster keeps its 8 existing zones and may use at most 8 in all; the new zones would make 9"
    );
    // Eight in all, the old ones counted once, is the limit and allowed.
    let seven = runtime(|rt| {
        rt.spec.shoot.provider.workers[0].zones = Some(zones("abc"));
        rt.spec.shoot.provider.additional_workers = Some(vec![pool("gone", "cdefg")]);
    });
    allowed(kim_shared::validation::validate_update(&seven, &new, &cfg));
}

#[test]
fn kubernetes_version_never_goes_down() {
    let version = |v: Option<&str>| {
        runtime(|rt| rt.spec.shoot.kubernetes.as_mut().unwrap().version = v.map(Into::into))
    };
    accepts_update(&version(Some("1.34.4")), &version(Some("1.35.4")));
    accepts_update(&version(Some("1.35.4")), &version(Some("1.35")));
    rejects_with(
        &version(Some("1.35.4")),
        &version(Some("1.34.4")),
        "spec.shoot.kubernetes.version",
        "1.35.4",
    );
    // Leaving it out means the configured default (1.35), which is below 1.36.3.
    rejects_update(
        &version(Some("1.36.3")),
        &version(None),
        "spec.shoot.kubernetes.version",
    );
}

#[test]
fn metadata_only_updates_of_a_legacy_runtime_are_allowed() {
    // Stored before the webhook: invalid by today's rules.
    let legacy = runtime(|rt| {
        rt.spec.shoot.secret_binding_name = "hyperscaler secret".into();
        set_label(rt, names::LABEL_BROKER_PLAN_ID, None);
    });
    let mut finalized = legacy.clone();
    finalized.metadata.finalizers = Some(vec![names::RUNTIME_FINALIZER.into()]);
    set_annotation(
        &mut finalized,
        names::ANNOTATION_FORCE_PATCH_RECONCILIATION,
        "true",
    );
    accepts_update(&legacy, &finalized);
    // A spec change brings the spec rules back (the labels were not touched).
    let mut changed = finalized.clone();
    changed.spec.shoot.provider.workers[0].maximum = 25;
    rejects_update(&finalized, &changed, "spec.shoot.secretBindingName");
}

#[test]
fn a_required_label_is_checked_when_an_update_changes_it() {
    let legacy = runtime(|rt| set_label(rt, names::LABEL_BROKER_PLAN_ID, None));
    let relabelled = runtime(|rt| {
        set_label(rt, names::LABEL_BROKER_PLAN_ID, None);
        set_label(rt, names::LABEL_BROKER_PLAN_NAME, Some("build-runtime-aws"));
    });
    accepts_update(&legacy, &relabelled);
    let emptied = runtime(|rt| set_label(rt, names::LABEL_SUBACCOUNT_ID, Some("")));
    rejects_update(
        &sample(),
        &emptied,
        "metadata.labels[kyma-project.io/subaccount-id]",
    );
}

#[test]
fn legacy_azure_lite_pools_may_keep_no_zones() {
    let mut old = sample_runtime("runtime-azure.yaml");
    old.spec.shoot.provider.workers[0].zones = Some(vec![]);
    let mut new = old.clone();
    new.spec.shoot.provider.workers[0].maximum = 12;
    accepts_update(&old, &new);
    denied(
        kim_shared::validation::validate_create(&new, config()),
        "spec.shoot.provider.workers[0].zones",
    );
}

#[test]
fn a_runtime_being_deleted_only_keeps_its_immutable_fields() {
    let legacy = runtime(|rt| rt.spec.shoot.secret_binding_name = "hyperscaler secret".into());
    let mut deleting = legacy.clone();
    deleting.metadata.deletion_timestamp = Some(Time("2026-04-22T10:00:00Z".parse().unwrap()));
    let mut released = deleting.clone();
    released.metadata.finalizers = None;
    released.spec.shoot.provider.workers[0].maximum = 21;
    accepts_update(&deleting, &released);
    // Nor are its labels checked again: a required label may go while it is deleted.
    let mut unlabelled = deleting.clone();
    set_label(&mut unlabelled, names::LABEL_SUBACCOUNT_ID, None);
    accepts_update(&deleting, &unlabelled);
}

#[test]
fn deletion_needs_a_fresh_confirmation() {
    let confirmed =
        |at: &str| runtime(|rt| set_annotation(rt, names::ANNOTATION_DELETION_CONFIRMED, at));
    let now = "2026-04-22T10:00:00Z";
    allowed(delete_at(&confirmed("2026-04-22T09:59:00Z"), now));
    allowed(delete_at(&confirmed("2026-04-22T10:00:00Z"), now));
    let cases = [
        (sample(), "not confirmed"),
        (confirmed("tomorrow"), "RFC3339"),
        (confirmed("2026-04-22T11:59:00+02:00"), "RFC3339 UTC"),
        (confirmed("2026-04-22T10:00:30Z"), "future"),
        (confirmed("2026-04-22T09:57:59Z"), "older than 2m"),
    ];
    for (rt, needle) in cases {
        let v = denied(delete_at(&rt, now), CONFIRMED);
        assert!(v.message.contains(needle), "{v}");
    }
}

#[test]
fn deletion_protection_can_be_switched_off_and_its_window_set() {
    let off = DeletionPolicy {
        enabled: false,
        ..DeletionPolicy::default()
    };
    allowed(validate_delete(
        &sample().metadata,
        &off,
        "2026-04-22T10:00:00Z".parse().unwrap(),
    ));
    let hour = DeletionPolicy {
        window: std::time::Duration::from_secs(3600),
        ..DeletionPolicy::default()
    };
    let rt = runtime(|rt| {
        set_annotation(
            rt,
            names::ANNOTATION_DELETION_CONFIRMED,
            "2026-04-22T09:10:00Z",
        )
    });
    allowed(validate_delete(
        &rt.metadata,
        &hour,
        "2026-04-22T10:00:00Z".parse().unwrap(),
    ));
    assert_eq!(
        DeletionPolicy::default().window,
        std::time::Duration::from_secs(120)
    );
}

#[test]
fn gardener_cluster_sample_is_valid() {
    allowed(validate_gardener_cluster(&gardener_cluster()));
}

#[test]
fn gardener_cluster_names_must_be_valid() {
    type Edit = fn(&mut kim_shared::api::GardenerCluster);
    let cases: [(&str, Edit); 5] = [
        ("spec.kubeconfig.secret.name", |gc| {
            gc.spec.kubeconfig.secret.name = "Kubeconfig runtime".into()
        }),
        ("spec.kubeconfig.secret.name", |gc| {
            gc.spec.kubeconfig.secret.name = String::new()
        }),
        ("spec.kubeconfig.secret.namespace", |gc| {
            gc.spec.kubeconfig.secret.namespace = "kcp.system".into()
        }),
        ("spec.kubeconfig.secret.key", |gc| {
            gc.spec.kubeconfig.secret.key = String::new()
        }),
        ("spec.shoot.name", |gc| gc.spec.shoot.name = "Shoot".into()),
    ];
    for (field, edit) in cases {
        let mut gc = gardener_cluster();
        edit(&mut gc);
        denied(validate_gardener_cluster(&gc), field);
    }
}

/// The runtime-id label names the GardenerCluster a Runtime uses and deletes: no UPDATE may
/// point it elsewhere, on the Runtime (also while it is being deleted) or on the
/// GardenerCluster.
#[test]
fn the_runtime_id_label_is_immutable() {
    const FIELD: &str = "metadata.labels[kyma-project.io/runtime-id]";
    let old = sample();
    let moved = runtime(|rt| set_label(rt, names::LABEL_RUNTIME_ID, Some("another-runtime")));
    rejects_with(&old, &moved, FIELD, "immutable");
    let mut deleting = old.clone();
    deleting.metadata.deletion_timestamp = Some(Time("2026-04-22T10:00:00Z".parse().unwrap()));
    let mut moved_while_deleting = moved.clone();
    moved_while_deleting.metadata.deletion_timestamp = deleting.metadata.deletion_timestamp.clone();
    rejects_with(&deleting, &moved_while_deleting, FIELD, "immutable");
    let other_label = runtime(|rt| set_label(rt, names::LABEL_KYMA_NAME, Some("renamed")));
    accepts_update(&old, &other_label);

    use kim_shared::validation::{validate_gardener_cluster, validate_gardener_cluster_update};
    let gc = gardener_cluster();
    allowed(validate_gardener_cluster_update(&gc, &gc));
    let mut relabelled = gc.clone();
    relabelled
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(names::LABEL_RUNTIME_ID.into(), "another-runtime".into());
    denied(validate_gardener_cluster_update(&gc, &relabelled), FIELD);
    let mut unlabelled = gc.clone();
    if let Some(l) = unlabelled.metadata.labels.as_mut() {
        l.remove(names::LABEL_RUNTIME_ID);
    }
    denied(validate_gardener_cluster_update(&gc, &unlabelled), FIELD);
    let mut pointed_elsewhere = gc.clone();
    pointed_elsewhere.spec.shoot.name = "other-shoot".into();
    let v = denied(
        validate_gardener_cluster_update(&gc, &pointed_elsewhere),
        "spec.shoot.name",
    );
    assert!(v.message.contains("immutable"), "{}", v.message);
    let mut redirected = gc.clone();
    redirected.spec.kubeconfig.secret.name = "readable-by-me".into();
    let v = denied(
        validate_gardener_cluster_update(&gc, &redirected),
        "spec.kubeconfig.secret",
    );
    assert!(v.message.contains("may change only to"), "{}", v.message);
    // Back to upstream's location: the repair of a wrong one.
    let canonical = redirected.clone();
    let mut repaired = redirected;
    repaired.spec.kubeconfig.secret = gc.spec.kubeconfig.secret.clone();
    assert_eq!(
        repaired.spec.kubeconfig.secret.name,
        kim_shared::names::kubeconfig_secret_name(gc.metadata.name.as_deref().unwrap_or_default())
    );
    allowed(validate_gardener_cluster_update(&canonical, &repaired));

    // A spec stored before today's rules: metadata changes (the finalizer's removal) pass, a
    // spec change is held to the rules.
    let mut stored = gc.clone();
    stored.spec.kubeconfig.secret.key = "not a key".into();
    assert!(!validate_gardener_cluster(&stored).is_allowed());
    let mut finalized = stored.clone();
    finalized.metadata.finalizers = None;
    finalized
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("note".into(), "x".into());
    allowed(validate_gardener_cluster_update(&stored, &finalized));
    let mut still_bad = stored.clone();
    still_bad.spec.kubeconfig.secret.name = "kubeconfig-other".into();
    let fields: Vec<String> = validate_gardener_cluster_update(&stored, &still_bad)
        .violations
        .into_iter()
        .map(|v| v.field)
        .collect();
    assert_eq!(
        fields,
        ["spec.kubeconfig.secret.key", "spec.kubeconfig.secret"]
    );
}

/// The operator tightened `kim.providers` after Runtimes were created (a higher minimum
/// Kubernetes version, fewer machine and volume types, a lower node bound): updates that keep
/// those values are admitted (KEB rewrites whole sections), the controller keeps converting
/// such stored Runtimes, and a value an update changes is held to the configuration.
#[test]
fn a_tightened_configuration_holds_new_choices_only() {
    use kim_shared::validation::{
        ValidationOptions, validate_create, validate_create_with, validate_update,
    };
    let stored = runtime(|rt| {
        rt.spec.shoot.kubernetes.as_mut().unwrap().version = Some("1.32.1".into());
        let pool = main_pool(rt);
        pool.machine.type_ = "m7g.medium".into();
        pool.maximum = 400;
        if let Some(v) = pool.volume.as_mut() {
            v.type_ = Some("io2".into());
        }
    });
    let fields = |f: &kim_shared::validation::ValidationOutcome| -> Vec<String> {
        let mut v: Vec<String> = f.violations.iter().map(|v| v.field.clone()).collect();
        v.sort();
        v
    };
    // What the configuration refuses today.
    let policy = [
        "spec.shoot.kubernetes.version",
        "spec.shoot.provider.workers[0].machine.type",
        "spec.shoot.provider.workers[0].maximum",
        "spec.shoot.provider.workers[0].volume.type",
    ];
    assert_eq!(fields(&validate_create(&stored, config())), policy);
    // KEB's update that changes the administrators only.
    let mut update = stored.clone();
    update.spec.security.administrators = vec!["second.admin@example.com".into()];
    accepts_update(&stored, &update);
    // A resize keeps the volume type the configuration no longer lists.
    let mut resized = update.clone();
    if let Some(v) = main_pool(&mut resized).volume.as_mut() {
        v.size = "120Gi".into();
    }
    accepts_update(&stored, &resized);
    // The controller's check of the stored Runtime before converting it.
    let controller = ValidationOptions {
        audit_log_mandatory: false,
        admission_policy: false,
    };
    allowed(validate_create_with(&stored, config(), &controller));
    // Changed values are held to the configuration.
    let mut changed = update.clone();
    changed.spec.shoot.kubernetes.as_mut().unwrap().version = Some("1.32.2".into());
    let pool = main_pool(&mut changed);
    pool.machine.type_ = "m7g.large".into();
    pool.maximum = 500;
    if let Some(v) = pool.volume.as_mut() {
        v.type_ = Some("io1".into());
    }
    assert_eq!(
        fields(&validate_update(&stored, &changed, config())),
        policy
    );
}

/// The configuration's machine-type list says which architecture a type is (amd64 unless it
/// says otherwise): a stored pool whose architecture it contradicts (an arm64 type listed
/// without `architecture`) keeps converting and its updates pass; a pool that picks that type
/// or architecture anew is held to the list.
#[test]
fn the_configured_architecture_holds_new_choices_only() {
    use kim_shared::validation::{
        ValidationOptions, validate_create, validate_create_with, validate_update,
    };
    const ARCH: &str = "spec.shoot.provider.workers[0].machine.architecture";
    let stored = runtime(|rt| {
        let pool = main_pool(rt);
        pool.machine.type_ = "m6i.large".into();
        pool.machine.architecture = Some("arm64".into());
    });
    let on_arch = |f: &kim_shared::validation::ValidationOutcome| {
        f.violations.iter().filter(|v| v.field == ARCH).count()
    };
    assert_eq!(on_arch(&validate_create(&stored, config())), 1);
    let controller = ValidationOptions {
        audit_log_mandatory: false,
        admission_policy: false,
    };
    allowed(validate_create_with(&stored, config(), &controller));
    let mut update = stored.clone();
    update.spec.security.administrators = vec!["second.admin@example.com".into()];
    accepts_update(&stored, &update);
    let mut retyped = update.clone();
    main_pool(&mut retyped).machine.type_ = "m6i.xlarge".into();
    assert_eq!(on_arch(&validate_update(&stored, &retyped, config())), 1);
}
