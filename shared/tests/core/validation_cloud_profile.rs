//! The rules of `validate_against_cloud_profile`: the cluster's and each pool's Kubernetes
//! version offered and active, `X.Y` resolved as Gardener resolves it (the newest patch
//! classified supported), a pool's version not higher than the control plane's; the region
//! and its EU access restriction; machine types and volume types offered, usable, of the pool's
//! architecture and available in every zone of the pool. The profile has no machine images;
//! those findings are on fields not looked at here.
#![allow(clippy::unwrap_used)]

use crate::validation_fixtures::*;
use kim_shared::api::Runtime;
use kim_shared::gardener::cloud_profile::CloudProfileSpec;
use kim_shared::gardener::worker::WorkerKubernetes;
use kim_shared::validation::{Profile, ValidationOutcome, validate_against_cloud_profile};
use serde_json::json;

const CLUSTER: &str = "spec.shoot.kubernetes.version";
const POOL: &str = "spec.shoot.provider.workers[0].kubernetes.version";
const REGION: &str = "spec.shoot.region";
const MACHINE: &str = "spec.shoot.provider.workers[0].machine.type";
const VOLUME_TYPE: &str = "spec.shoot.provider.workers[0].volume.type";
const VOLUME_SIZE: &str = "spec.shoot.provider.workers[0].volume.size";

/// Kubernetes versions of every classification; one region with the EU access restriction and
/// one without; machine and volume types to refuse for each reason.
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
        "regions": [
            {"name": "eu-central-1",
             "accessRestrictions": [{"name": "eu-access-only"}],
             "zones": [
                {"name": "eu-central-1a"},
                {"name": "eu-central-1b"},
                {"name": "eu-central-1c", "unavailableMachineTypes": ["m6i.xlarge"], "unavailableVolumeTypes": ["sc1"]}
             ]},
            {"name": "eu-west-1", "zones": [{"name": "eu-west-1a"}]}
        ],
        "machineTypes": [
            {"name": "m6i.large", "cpu": "2", "gpu": "0", "memory": "8Gi", "architecture": "amd64", "usable": true},
            {"name": "m6i.xlarge", "cpu": "4", "gpu": "0", "memory": "16Gi", "architecture": "amd64", "usable": true},
            {"name": "m6g.large", "cpu": "2", "gpu": "0", "memory": "8Gi", "architecture": "arm64", "usable": true},
            {"name": "m5.large", "cpu": "2", "gpu": "0", "memory": "8Gi", "usable": false}
        ],
        "machineImages": [],
        "volumeTypes": [
            {"name": "gp3", "class": "standard", "minSize": "20Gi", "usable": true},
            {"name": "io1", "class": "premium", "usable": false},
            {"name": "sc1", "class": "standard", "usable": true}
        ]
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

/// A new `rt` gets exactly one message on `field`, and it contains `needle`.
fn refused(rt: &Runtime, field: &str, needle: &str) {
    let messages = on(&check(rt, None), field);
    assert!(
        messages.len() == 1 && messages[0].contains(needle),
        "{field}: expected one message with {needle:?}, got {messages:?}"
    );
}

/// A new `rt` gets no message on `field`.
fn admitted(rt: &Runtime, field: &str) {
    assert_eq!(on(&check(rt, None), field), Vec::<String>::new(), "{field}");
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
    refused(
        &versions("1.35.2", Some("1.35")),
        POOL,
        "1.35 resolves to 1.35.4 in CloudProfile aws, higher than the control plane's version 1.35.2",
    );
}

#[test]
fn a_pool_minor_version_at_or_below_the_control_plane_is_admitted() {
    for (cluster, pool) in [
        // Equal once resolved: both run 1.35.4.
        ("1.35.4", "1.35"),
        ("1.35", "1.35"),
        // Below: `1.34` is 1.34.5 (the newer 1.34.9 is only deprecated, so not chosen).
        ("1.35.2", "1.34"),
        ("1.34.5", "1.34"),
        // A full pool version under a minor control plane: 1.35.2 against 1.35.4.
        ("1.35", "1.35.2"),
    ] {
        admitted(&versions(cluster, Some(pool)), POOL);
    }
}

#[test]
fn full_versions_on_both_sides_are_left_to_the_pool_rule() {
    // 1.35.4 over 1.35.2 is refused by the worker rules of `validate_create`, without the
    // profile; reporting it here too would give the field two messages.
    admitted(&versions("1.35.2", Some("1.35.4")), POOL);
}

#[test]
fn a_pool_version_must_be_offered_and_active() {
    refused(
        &versions("1.35.4", Some("1.35.3")),
        POOL,
        "1.35.3 is not offered by CloudProfile aws",
    );
    refused(&versions("1.35.4", Some("1.33.1")), POOL, "1.33.1");
    refused(
        &versions("1.35.4", Some("1.33")),
        POOL,
        "1.33 has no supported patch version",
    );
}

#[test]
fn an_expired_pool_version_is_refused_for_a_new_pool_only() {
    let old = versions("1.35.2", Some("1.34.5"));
    // The existing pool may move to an expired version (Gardener's maintenance does).
    let moved = versions("1.35.2", Some("1.33.1"));
    assert_eq!(on_pools(&check(&moved, Some(&old))), Vec::<String>::new());
    // A pool added by the update may not.
    let mut added = old.clone();
    let mut extra = added.spec.shoot.provider.workers[0].clone();
    extra.name = "extra".into();
    extra.kubernetes = pool_version("1.33.1");
    added.spec.shoot.provider.additional_workers = Some(vec![extra]);
    let pools = on_pools(&check(&added, Some(&old)));
    assert!(
        pools.len() == 1 && pools[0].contains("additionalWorkers") && pools[0].contains("1.33.1"),
        "{pools:?}"
    );
}

#[test]
fn the_cluster_version_must_be_offered() {
    refused(
        &versions("1.99.0", None),
        CLUSTER,
        "1.99.0 is not offered by CloudProfile aws",
    );
    admitted(&versions("1.35.2", None), CLUSTER);
    // On update only a changed version is checked: a stored one the profile dropped stays.
    let dropped = versions("1.99.0", None);
    assert_eq!(
        on(&check(&dropped, Some(&dropped)), CLUSTER),
        Vec::<String>::new()
    );
    let offered = versions("1.35.2", None);
    assert_eq!(on(&check(&dropped, Some(&offered)), CLUSTER).len(), 1);
}

#[test]
fn the_sample_fits_the_profile() {
    let f = check(&sample(), None);
    for field in [REGION, MACHINE, VOLUME_TYPE, VOLUME_SIZE] {
        assert_eq!(on(&f, field), Vec::<String>::new(), "{field}");
    }
}

#[test]
fn the_region_must_be_offered() {
    refused(
        &runtime(|rt| rt.spec.shoot.region = "mars-1".into()),
        REGION,
        "\"mars-1\" is not a region of CloudProfile aws",
    );
}

#[test]
fn an_update_keeps_a_region_the_profile_no_longer_offers_but_cannot_move_to_one() {
    let mars = runtime(|rt| rt.spec.shoot.region = "mars-1".into());
    let offered = runtime(|_| {});
    assert_eq!(on(&check(&mars, Some(&mars)), REGION), Vec::<String>::new());
    assert_eq!(on(&check(&mars, Some(&offered)), REGION).len(), 1);
}

#[test]
fn an_eu_access_platform_region_needs_a_region_with_the_restriction() {
    let eu_access = |region: &str| {
        runtime(|rt| {
            rt.spec.shoot.platform_region = "cf-eu11".into();
            rt.spec.shoot.region = region.into();
            for w in &mut rt.spec.shoot.provider.workers {
                w.zones = Some(vec![format!("{region}a")]);
            }
        })
    };
    refused(&eu_access("eu-west-1"), REGION, "eu-access-only");
    admitted(&eu_access("eu-central-1"), REGION);
    // As in Gardener, only a change of the restrictions is checked on update.
    let stored = eu_access("eu-west-1");
    assert_eq!(
        on(&check(&stored, Some(&stored)), REGION),
        Vec::<String>::new()
    );
    let mut was_global = stored.clone();
    was_global.spec.shoot.platform_region = "cf-us10".into();
    assert_eq!(on(&check(&stored, Some(&was_global)), REGION).len(), 1);
}

#[test]
fn a_machine_type_must_be_offered_usable_of_the_pool_architecture_and_in_every_zone() {
    let typed = |t: &str, arch: Option<&str>| {
        runtime(|rt| {
            let m = &mut main_pool(rt).machine;
            m.type_ = t.into();
            m.architecture = arch.map(Into::into);
        })
    };
    refused(
        &typed("m7.huge", None),
        MACHINE,
        "\"m7.huge\" is not a machine type",
    );
    refused(&typed("m5.large", None), MACHINE, "m5.large is not usable");
    refused(
        &typed("m6g.large", Some("amd64")),
        MACHINE,
        "m6g.large is arm64, not amd64",
    );
    refused(
        &typed("m6i.xlarge", None),
        MACHINE,
        "is unavailable in zone eu-central-1c",
    );
    admitted(&typed("m6g.large", None), MACHINE);
}

#[test]
fn a_volume_type_must_be_offered_usable_in_every_zone_and_the_size_at_least_its_minimum() {
    refused(
        &with_volume("st1", "80Gi"),
        VOLUME_TYPE,
        "\"st1\" is not a volume type",
    );
    refused(
        &with_volume("io1", "80Gi"),
        VOLUME_TYPE,
        "io1 is not usable",
    );
    refused(
        &with_volume("sc1", "80Gi"),
        VOLUME_TYPE,
        "sc1 is unavailable in a zone of the pool",
    );
    refused(
        &with_volume("gp3", "10Gi"),
        VOLUME_SIZE,
        "10Gi is below the minimum of gp3",
    );
    admitted(&with_volume("gp3", "20Gi"), VOLUME_SIZE);
}
