//! The Kubernetes version rules against a CloudProfile (`validate_against_cloud_profile`): the
//! cluster's and each pool's version offered and active, `X.Y` resolved as Gardener resolves
//! it (the newest patch classified supported), and a pool's version not higher than the
//! control plane's. The profile offers only Kubernetes versions; the other rules' findings
//! (region, machines) are on other fields and not looked at here.
#![allow(clippy::unwrap_used)]

use crate::validation_fixtures::*;
use kim_shared::api::Runtime;
use kim_shared::gardener::cloud_profile::CloudProfileSpec;
use kim_shared::gardener::worker::WorkerKubernetes;
use kim_shared::validation::{Profile, ValidationOutcome, validate_against_cloud_profile};
use serde_json::json;

const CLUSTER: &str = "spec.shoot.kubernetes.version";
const POOL: &str = "spec.shoot.provider.workers[0].kubernetes.version";

fn profile() -> CloudProfileSpec {
    serde_json::from_value(json!({
        "type": "aws",
        "kubernetes": {"versions": [
            {"version": "1.36.0", "classification": "preview"},
            {"version": "1.35.4", "classification": "supported"},
            {"version": "1.35.2", "classification": "supported"},
            {"version": "1.34.9", "classification": "deprecated"},
            {"version": "1.34.5", "classification": "supported"},
            {"version": "1.33.1", "classification": "deprecated", "expirationDate": "2020-01-01T00:00:00Z"}
        ]},
        "machineImages": [],
        "machineTypes": [],
        "regions": []
    }))
    .unwrap()
}

fn check(rt: &Runtime, old: Option<&Runtime>) -> ValidationOutcome {
    let spec = profile();
    let profile = Profile {
        name: "aws",
        spec: &spec,
    };
    validate_against_cloud_profile(rt, old, config(), profile, jiff::Timestamp::now())
}

/// The messages on `field`.
fn on(f: &ValidationOutcome, field: &str) -> Vec<String> {
    f.violations
        .iter()
        .filter(|v| v.field == field)
        .map(|v| v.message.clone())
        .collect()
}

/// The messages on any pool's `kubernetes.version`.
fn on_pools(f: &ValidationOutcome) -> Vec<String> {
    f.violations
        .iter()
        .filter(|v| {
            v.field.starts_with("spec.shoot.provider.") && v.field.ends_with("kubernetes.version")
        })
        .map(|v| format!("{}: {}", v.field, v.message))
        .collect()
}

fn pool_version(v: &str) -> Option<Box<WorkerKubernetes>> {
    Some(Box::new(WorkerKubernetes {
        version: Some(v.into()),
        ..Default::default()
    }))
}

/// The sample with the cluster at `cluster` and the main pool at `pool` (none: the cluster's).
fn versions(cluster: &str, pool: Option<&str>) -> Runtime {
    runtime(|rt| {
        rt.spec
            .shoot
            .kubernetes
            .get_or_insert_with(Default::default)
            .version = Some(cluster.into());
        main_pool(rt).kubernetes = pool.and_then(pool_version);
    })
}

#[test]
fn a_pool_minor_version_is_refused_when_it_resolves_above_the_control_plane() {
    // Gardener runs `1.35` as 1.35.4, the newest supported patch: above a 1.35.2 control plane.
    let f = check(&versions("1.35.2", Some("1.35")), None);
    let pool = on(&f, POOL);
    assert_eq!(pool.len(), 1, "{pool:?}");
    assert!(
        pool[0].contains("1.35 resolves to 1.35.4")
            && pool[0].contains("higher than the control plane's version 1.35.2"),
        "{pool:?}"
    );
}

#[test]
fn a_pool_minor_version_at_or_below_the_control_plane_is_admitted() {
    // Equal once resolved: both run 1.35.4.
    assert_eq!(
        on(&check(&versions("1.35.4", Some("1.35")), None), POOL),
        Vec::<String>::new()
    );
    assert_eq!(
        on(&check(&versions("1.35", Some("1.35")), None), POOL),
        Vec::<String>::new()
    );
    // Below: `1.34` is 1.34.5 (the newer 1.34.9 is only deprecated, so not chosen).
    assert_eq!(
        on(&check(&versions("1.35.2", Some("1.34")), None), POOL),
        Vec::<String>::new()
    );
    assert_eq!(
        on(&check(&versions("1.34.5", Some("1.34")), None), POOL),
        Vec::<String>::new()
    );
    // A full pool version under a minor control plane: 1.35.2 against 1.35.4.
    assert_eq!(
        on(&check(&versions("1.35", Some("1.35.2")), None), POOL),
        Vec::<String>::new()
    );
}

#[test]
fn full_versions_on_both_sides_are_left_to_the_pool_rule() {
    // 1.35.4 over 1.35.2 is refused by the worker rules of `validate_create`, without the
    // profile; reporting it here too would give the field two messages.
    assert_eq!(
        on(&check(&versions("1.35.2", Some("1.35.4")), None), POOL),
        Vec::<String>::new()
    );
}

#[test]
fn a_pool_version_must_be_offered_and_active() {
    let f = check(&versions("1.35.4", Some("1.35.3")), None);
    let pool = on(&f, POOL);
    assert!(
        pool.len() == 1 && pool[0].contains("1.35.3 is not offered by CloudProfile aws"),
        "{pool:?}"
    );
    let f = check(&versions("1.35.4", Some("1.33.1")), None);
    let pool = on(&f, POOL);
    assert!(pool.len() == 1 && pool[0].contains("1.33.1"), "{pool:?}");
    let f = check(&versions("1.35.4", Some("1.33")), None);
    let pool = on(&f, POOL);
    assert!(
        pool.len() == 1 && pool[0].contains("1.33 has no supported patch version"),
        "{pool:?}"
    );
}

#[test]
fn an_expired_pool_version_is_refused_for_a_new_pool_only() {
    let old = versions("1.35.2", Some("1.34.5"));
    // The existing pool may move to an expired version (Gardener's maintenance does).
    let moved = versions("1.35.2", Some("1.33.1"));
    assert_eq!(on_pools(&check(&moved, Some(&old))), Vec::<String>::new());
    // A pool added by the update may not.
    let added = runtime(|rt| {
        *rt = old.clone();
        let mut extra = rt.spec.shoot.provider.workers[0].clone();
        extra.name = "extra".into();
        extra.kubernetes = pool_version("1.33.1");
        rt.spec.shoot.provider.additional_workers = Some(vec![extra]);
    });
    let pools = on_pools(&check(&added, Some(&old)));
    assert!(
        pools.len() == 1 && pools[0].contains("additionalWorkers") && pools[0].contains("1.33.1"),
        "{pools:?}"
    );
}

#[test]
fn the_cluster_version_must_be_offered() {
    let f = check(&versions("1.99.0", None), None);
    let cluster = on(&f, CLUSTER);
    assert!(
        cluster.len() == 1 && cluster[0].contains("1.99.0 is not offered by CloudProfile aws"),
        "{cluster:?}"
    );
    assert_eq!(
        on(&check(&versions("1.35.2", None), None), CLUSTER),
        Vec::<String>::new()
    );
}
