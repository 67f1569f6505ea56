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
use serde_json::{Value, json};

const CLUSTER: &str = "spec.shoot.kubernetes.version";
const POOL: &str = "spec.shoot.provider.workers[0].kubernetes.version";
const REGION: &str = "spec.shoot.region";
const MACHINE: &str = "spec.shoot.provider.workers[0].machine.type";
const VOLUME_TYPE: &str = "spec.shoot.provider.workers[0].volume.type";
const VOLUME_SIZE: &str = "spec.shoot.provider.workers[0].volume.size";
const IMAGE_NAME: &str = "spec.shoot.provider.workers[0].machine.image.name";
const IMAGE_VERSION: &str = "spec.shoot.provider.workers[0].machine.image.version";
const CRI: &str = "spec.shoot.provider.workers[0].cri.name";

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
            {"name": "eu-west-1", "zones": [{"name": "eu-west-1a"}]},
            {"name": "ap-east-9"}
        ],
        "machineTypes": [
            {"name": "m6i.large", "cpu": "2", "gpu": "0", "memory": "8Gi", "architecture": "amd64", "usable": true},
            {"name": "m6i.xlarge", "cpu": "4", "gpu": "0", "memory": "16Gi", "architecture": "amd64", "usable": true},
            {"name": "m6g.large", "cpu": "2", "gpu": "0", "memory": "8Gi", "architecture": "arm64", "usable": true,
             "storage": {"type": "gp3", "minSize": "50Gi"}},
            {"name": "m5.large", "cpu": "2", "gpu": "0", "memory": "8Gi", "usable": false}
        ],
        "machineImages": [
            {"name": "gardenlinux", "versions": [
                {"version": "1950.0.0", "lifecycle": [{"classification": "preview", "startTime": "2099-01-01T00:00:00Z"}]},
                {"version": "1900.0.0", "classification": "preview", "architectures": ["amd64"]},
                {"version": "1877.8.0", "architectures": ["amd64", "arm64"],
                 "cri": [{"name": "containerd", "containerRuntimes": [{"type": "gvisor"}]}]},
                {"version": "1877.7.0"},
                {"version": "1592.14.0", "classification": "deprecated", "architectures": ["amd64", "arm64"]},
                {"version": "1500.0.0", "classification": "deprecated", "expirationDate": "2020-01-01T00:00:00Z", "architectures": ["amd64"]},
                {"version": "1443.9.0", "classification": "deprecated", "expirationDate": "2020-01-01T00:00:00Z"}
            ]},
            {"name": "suse-chost", "versions": [
                {"version": "15.7.0", "classification": "preview"},
                {"version": "15.6.0", "classification": "deprecated", "architectures": []}
            ]},
            {"name": "only-preview", "versions": [{"version": "1.0.0", "classification": "preview"}]},
            {"name": "only-expired", "versions": [
                {"version": "2.0.0", "classification": "preview"},
                {"version": "1.5.0", "classification": "deprecated"},
                {"version": "1.0.0", "expirationDate": "2020-01-01T00:00:00Z"}
            ]}
        ],
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

/// The one message `rt` (on update against `old`) gets on `field`.
fn message(rt: &Runtime, old: Option<&Runtime>, field: &str) -> String {
    let f = check(rt, old);
    let messages = on(&f, field);
    assert!(
        messages.len() == 1,
        "{field}: expected one message, got {messages:?}"
    );
    messages[0].clone()
}

/// All messages of `rt` (on update against `old`) on fields that start with `prefix`.
fn under(rt: &Runtime, old: Option<&Runtime>, prefix: &str) -> Vec<String> {
    check(rt, old)
        .violations
        .iter()
        .filter(|v| v.field.starts_with(prefix))
        .map(|v| format!("{}: {}", v.field, v.message))
        .collect()
}

/// The sample with its main pool edited as JSON (`workers[0]`).
fn pool(edit: impl FnOnce(&mut Value)) -> Runtime {
    let mut v = serde_json::to_value(sample()).unwrap();
    edit(&mut v["spec"]["shoot"]["provider"]["workers"][0]);
    serde_json::from_value(v).unwrap()
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

/// The sample with the main pool's machine type `t` and architecture `arch`.
fn typed(t: &str, arch: Option<&str>) -> Runtime {
    runtime(|rt| {
        let m = &mut main_pool(rt).machine;
        m.type_ = t.into();
        m.architecture = arch.map(Into::into);
    })
}

#[test]
fn a_machine_type_must_be_offered_usable_of_the_pool_architecture_and_in_every_zone() {
    refused(
        &typed("m7.huge", None),
        MACHINE,
        "\"m7.huge\" is not a machine type",
    );
    refused(&typed("m5.large", None), MACHINE, "m5.large is not usable");
    refused(
        &typed("m6g.large", Some("amd64")),
        MACHINE,
        "m6g.large is arm64, but machine.architecture is amd64",
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

const K8S_ACTIVE: &str = "1.36.0 (preview), 1.35.4, 1.35.2, 1.34.9, 1.34.5";

#[test]
fn a_version_message_lists_the_offered_versions_newest_first_and_expired_ones_only_on_update() {
    assert_eq!(
        message(&versions("1.99.0", None), None, CLUSTER),
        format!("1.99.0 is not offered by CloudProfile aws; use one of {K8S_ACTIVE}")
    );
    assert_eq!(
        message(
            &versions("1.99.0", None),
            Some(&versions("1.35.2", None)),
            CLUSTER
        ),
        format!("1.99.0 is not offered by CloudProfile aws; use one of {K8S_ACTIVE}, 1.33.1")
    );
    assert_eq!(
        message(&versions("1.33.1", None), None, CLUSTER),
        format!("1.33.1 has expired in CloudProfile aws; use one of {K8S_ACTIVE}")
    );
    // An update may move the cluster to an expired version (Gardener's maintenance does).
    assert_eq!(
        on(
            &check(&versions("1.33.1", None), Some(&versions("1.35.2", None))),
            CLUSTER
        ),
        Vec::<String>::new()
    );
}

#[test]
fn a_machine_type_message_offers_what_fits_the_pool() {
    for (t, arch, text) in [
        (
            "m7.huge",
            None,
            "\"m7.huge\" is not a machine type of CloudProfile aws; use one of m6i.large",
        ),
        (
            "m7.huge",
            Some("arm64"),
            "\"m7.huge\" is not a machine type of CloudProfile aws; use one of m6g.large",
        ),
        (
            "m5.large",
            None,
            "m5.large is not usable in CloudProfile aws; use one of m6i.large",
        ),
        (
            "m6g.large",
            Some("amd64"),
            "m6g.large is arm64, but machine.architecture is amd64 in CloudProfile aws; use one of m6i.large",
        ),
        (
            "m6i.xlarge",
            None,
            "m6i.xlarge is unavailable in zone eu-central-1c in CloudProfile aws; use one of m6i.large",
        ),
    ] {
        assert_eq!(
            message(&typed(t, arch), None, MACHINE),
            text,
            "{t} {arch:?}"
        );
    }
    // In two zones the type unavailable in the third fits too.
    let two_zones = runtime(|rt| {
        let w = main_pool(rt);
        w.machine.type_ = "m7.huge".into();
        w.zones = Some(vec!["eu-central-1a".into(), "eu-central-1b".into()]);
    });
    assert_eq!(
        message(&two_zones, None, MACHINE),
        "\"m7.huge\" is not a machine type of CloudProfile aws; use one of m6i.large, m6i.xlarge"
    );
    // No type is the syntax rule's to report, not the profile's.
    admitted(&typed("", None), MACHINE);
    // On update only a changed type or architecture is checked.
    let stored = typed("m5.large", None);
    assert_eq!(
        on(&check(&stored, Some(&stored)), MACHINE),
        Vec::<String>::new()
    );
    assert_eq!(
        on(&check(&stored, Some(&typed("m6i.large", None))), MACHINE).len(),
        1
    );
    let stored = typed("m6g.large", None);
    assert_eq!(
        message(&typed("m6g.large", Some("amd64")), Some(&stored), MACHINE),
        "m6g.large is arm64, but machine.architecture is amd64 in CloudProfile aws; use one of m6i.large"
    );
}

#[test]
fn zones_must_be_of_the_region_and_are_checked_on_update_only_when_they_or_the_region_change() {
    let zoned = |region: &str, zones: &[&str]| {
        runtime(|rt| {
            rt.spec.shoot.region = region.into();
            main_pool(rt).zones = Some(zones.iter().map(|z| (*z).to_owned()).collect());
        })
    };
    let bad = zoned("eu-central-1", &["eu-central-1a", "eu-central-1z"]);
    assert_eq!(
        under(&bad, None, "spec.shoot.provider.workers[0].zones"),
        [
            "spec.shoot.provider.workers[0].zones[1]: \"eu-central-1z\" is not a zone of region eu-central-1 in CloudProfile aws; use one of eu-central-1a, eu-central-1b, eu-central-1c"
        ]
    );
    assert_eq!(
        under(
            &zoned("ap-east-9", &["ap-east-9a"]),
            None,
            "spec.shoot.provider.workers[0].zones"
        ),
        [
            "spec.shoot.provider.workers[0].zones[0]: region ap-east-9 of CloudProfile aws has no zones; leave them out"
        ]
    );
    assert_eq!(
        under(&sample(), None, "spec.shoot.provider.workers[0].zones"),
        Vec::<String>::new()
    );
    // The stored zones stay as they are; a new region or new zones are checked.
    assert_eq!(
        under(&bad, Some(&bad), "spec.shoot.provider.workers[0].zones"),
        Vec::<String>::new()
    );
    let elsewhere = zoned("eu-west-1", &["eu-central-1a", "eu-central-1z"]);
    assert_eq!(
        under(
            &bad,
            Some(&elsewhere),
            "spec.shoot.provider.workers[0].zones"
        )
        .len(),
        1
    );
    let fewer = zoned(
        "eu-central-1",
        &["eu-central-1a", "eu-central-1b", "eu-central-1z"],
    );
    assert_eq!(
        under(&bad, Some(&fewer), "spec.shoot.provider.workers[0].zones").len(),
        1
    );
}

const GL_AMD64: &str = "1900.0.0, 1877.8.0, 1877.7.0, 1592.14.0";
const GL_ARM64: &str = "1877.8.0, 1592.14.0";

fn image(name: &str, version: Option<&str>) -> Runtime {
    pool(|w| w["machine"]["image"] = json!({"name": name, "version": version}))
}

fn arm_image(version: &str) -> Runtime {
    pool(|w| {
        w["machine"]["type"] = json!("m6g.large");
        w["machine"]["image"] = json!({"name": "gardenlinux", "version": version});
    })
}

#[test]
fn a_machine_image_must_be_offered_active_and_run_on_the_pool_architecture() {
    assert_eq!(
        under(
            &sample(),
            None,
            "spec.shoot.provider.workers[0].machine.image"
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        message(&image("ubuntu", Some("22.04")), None, IMAGE_NAME),
        "\"ubuntu\" is not a machine image of CloudProfile aws; use one of gardenlinux, suse-chost, only-preview, only-expired"
    );
    for (version, text) in [
        (
            "1.0.0",
            format!("gardenlinux 1.0.0 is not offered by CloudProfile aws; use one of {GL_AMD64}"),
        ),
        (
            "1443.9.0",
            format!("gardenlinux 1443.9.0 has expired in CloudProfile aws; use one of {GL_AMD64}"),
        ),
        (
            "1950.0.0",
            format!(
                "gardenlinux 1950.0.0 is not available yet in CloudProfile aws; use one of {GL_AMD64}"
            ),
        ),
    ] {
        assert_eq!(
            message(&image("gardenlinux", Some(version)), None, IMAGE_VERSION),
            text
        );
    }
    // A preview version may be named; Gardener only does not choose it.
    admitted(&image("gardenlinux", Some("1900.0.0")), IMAGE_VERSION);
    assert_eq!(
        message(&arm_image("1877.7.0"), None, IMAGE_VERSION),
        format!(
            "gardenlinux 1877.7.0 does not run on arm64 (the architecture of m6g.large) in CloudProfile aws; use one of {GL_ARM64}"
        )
    );
    assert_eq!(
        message(&arm_image("1500.0.0"), None, IMAGE_VERSION),
        format!(
            "gardenlinux 1500.0.0 has expired and does not run on arm64 (the architecture of m6g.large) in CloudProfile aws; use one of {GL_ARM64}"
        )
    );
    admitted(&arm_image("1877.8.0"), IMAGE_VERSION);
}

#[test]
fn without_a_version_the_image_gardener_would_choose_is_checked() {
    // The newest version that is not preview, not deprecated when there is such a version
    // (only-expired: 1.0.0, expired but not deprecated, before 1.5.0). An empty list of
    // architectures is amd64, as none is (suse-chost 15.6.0).
    admitted(&image("suse-chost", None), IMAGE_VERSION);
    assert_eq!(
        message(&image("only-preview", None), None, IMAGE_VERSION),
        "CloudProfile aws has no version of only-preview for amd64 to choose; name one of 1.0.0"
    );
    assert_eq!(
        message(&image("only-expired", None), None, IMAGE_VERSION),
        "Gardener would choose only-expired 1.0.0, which has expired in CloudProfile aws; name one of 2.0.0, 1.5.0"
    );
    // On update a pool that keeps its image name keeps the version Gardener gave it.
    let stored = image("only-preview", Some("1.0.0"));
    admitted_on_update(&image("only-preview", None), &stored, IMAGE_VERSION);
}

fn admitted_on_update(rt: &Runtime, old: &Runtime, field: &str) {
    assert_eq!(
        on(&check(rt, Some(old)), field),
        Vec::<String>::new(),
        "{field}"
    );
}

#[test]
fn an_existing_pool_keeps_its_image_and_may_move_up_to_an_expired_version_but_not_down() {
    let stored = image("gardenlinux", Some("1443.9.0"));
    admitted_on_update(&stored, &stored, IMAGE_VERSION);
    admitted_on_update(
        &image("gardenlinux", Some("1500.0.0")),
        &stored,
        IMAGE_VERSION,
    );
    let newer = image("gardenlinux", Some("1592.14.0"));
    assert_eq!(
        message(
            &image("gardenlinux", Some("1500.0.0")),
            Some(&newer),
            IMAGE_VERSION
        ),
        format!("gardenlinux 1500.0.0 has expired in CloudProfile aws; use one of {GL_AMD64}")
    );
    // A pool the update adds gets no such leeway.
    let mut added = stored.clone();
    let mut extra = added.spec.shoot.provider.workers[0].clone();
    extra.name = "extra".into();
    added.spec.shoot.provider.additional_workers = Some(vec![extra]);
    assert_eq!(
        under(
            &added,
            Some(&stored),
            "spec.shoot.provider.additionalWorkers[0].machine.image"
        ),
        [format!(
            "spec.shoot.provider.additionalWorkers[0].machine.image.version: gardenlinux 1443.9.0 has expired in CloudProfile aws; use one of {GL_AMD64}"
        )]
    );
    // Moving up is for expired versions only, not for ones not available yet.
    let current = image("gardenlinux", Some("1877.8.0"));
    assert_eq!(
        message(
            &image("gardenlinux", Some("1950.0.0")),
            Some(&current),
            IMAGE_VERSION
        ),
        format!(
            "gardenlinux 1950.0.0 is not available yet in CloudProfile aws; use one of {GL_AMD64}"
        )
    );
    // A pool that stays on its expired version may change its CRI.
    let on_expired_with_cri = pool(|w| {
        w["machine"]["image"] = json!({"name": "gardenlinux", "version": "1443.9.0"});
        w["cri"] = json!({"name": "containerd"});
    });
    admitted_on_update(&on_expired_with_cri, &stored, IMAGE_VERSION);
    // The same image is checked again when the architecture or the CRI changes.
    let amd = image("gardenlinux", Some("1877.7.0"));
    let arm = pool(|w| {
        w["machine"]["image"] = json!({"name": "gardenlinux", "version": "1877.7.0"});
        w["machine"]["architecture"] = json!("arm64");
    });
    assert_eq!(on(&check(&arm, Some(&amd)), IMAGE_VERSION).len(), 1);
    let gvisor = pool(|w| {
        w["machine"]["image"] = json!({"name": "gardenlinux", "version": "1877.7.0"});
        w["cri"] = json!({"name": "containerd", "containerRuntimes": [{"type": "gvisor"}]});
    });
    assert_eq!(
        under(&gvisor, Some(&amd), "spec.shoot.provider.workers[0].cri"),
        [
            "spec.shoot.provider.workers[0].cri.containerRuntimes[0].type: gardenlinux 1877.7.0 offers no container runtime \"gvisor\" in CloudProfile aws; offered: none"
        ]
    );
    // KEB switches gVisor on for a pool whose version (pinned at creation) has left the
    // CloudProfile since: the live pool runs a newer one, which Gardener checks. Admitted.
    let gone = image("gardenlinux", Some("1312.3.0"));
    let gone_gvisor = pool(|w| {
        w["machine"]["image"] = json!({"name": "gardenlinux", "version": "1312.3.0"});
        w["cri"] = json!({"name": "containerd", "containerRuntimes": [{"type": "gvisor"}]});
    });
    assert_eq!(
        under(&gone_gvisor, Some(&gone), "spec.shoot.provider.workers[0]"),
        Vec::<String>::new()
    );
}

#[test]
fn the_cri_and_its_container_runtimes_must_be_offered_by_the_image_version() {
    let cri = |version: &str, cri: Value| {
        pool(|w| {
            w["machine"]["image"] = json!({"name": "gardenlinux", "version": version});
            w["cri"] = cri;
        })
    };
    let runtimes = |types: &[&str]| json!({"name": "containerd", "containerRuntimes": types.iter().map(|t| json!({"type": t})).collect::<Vec<_>>()});
    let prefix = "spec.shoot.provider.workers[0].cri";
    assert_eq!(
        under(&cri("1877.8.0", runtimes(&["gvisor"])), None, prefix),
        Vec::<String>::new()
    );
    assert_eq!(
        under(
            &cri("1877.8.0", runtimes(&["gvisor", "kata"])),
            None,
            prefix
        ),
        [
            "spec.shoot.provider.workers[0].cri.containerRuntimes[1].type: gardenlinux 1877.8.0 offers no container runtime \"kata\" in CloudProfile aws; offered: gvisor"
        ]
    );
    assert_eq!(
        message(&cri("1877.8.0", json!({"name": "docker"})), None, CRI),
        "gardenlinux 1877.8.0 does not support CRI \"docker\" in CloudProfile aws; use one of containerd"
    );
    // A version without a CRI list offers containerd (Gardener's defaulting), without runtimes.
    assert_eq!(
        message(&cri("1877.7.0", json!({"name": "docker"})), None, CRI),
        "gardenlinux 1877.7.0 does not support CRI \"docker\" in CloudProfile aws; use one of containerd"
    );
    assert_eq!(
        under(
            &cri("1877.7.0", json!({"name": "containerd"})),
            None,
            prefix
        ),
        Vec::<String>::new()
    );
}

#[test]
fn a_volume_message_offers_the_types_that_fit_and_a_machine_types_minimum_comes_first() {
    assert_eq!(
        message(&with_volume("st1", "80Gi"), None, VOLUME_TYPE),
        "\"st1\" is not a volume type of CloudProfile aws; use one of gp3"
    );
    assert_eq!(
        message(&with_volume("io1", "80Gi"), None, VOLUME_TYPE),
        "io1 is not usable in CloudProfile aws; use one of gp3"
    );
    assert_eq!(
        message(&with_volume("sc1", "80Gi"), None, VOLUME_TYPE),
        "sc1 is unavailable in a zone of the pool in CloudProfile aws; use one of gp3"
    );
    let in_two_zones = |type_: &str, size: &str, machine: &str| {
        pool(|w| {
            w["zones"] = json!(["eu-central-1a", "eu-central-1b"]);
            w["volume"] = json!({"type": type_, "size": size});
            w["machine"]["type"] = json!(machine);
            w["machine"]["image"] = json!({"name": "gardenlinux", "version": "1877.8.0"});
        })
    };
    assert_eq!(
        message(&in_two_zones("st1", "80Gi", "m6i.large"), None, VOLUME_TYPE),
        "\"st1\" is not a volume type of CloudProfile aws; use one of gp3, sc1"
    );
    // m6g.large asks for 50Gi of gp3, more than gp3's own 20Gi; other types keep their own.
    assert_eq!(
        message(&in_two_zones("gp3", "40Gi", "m6g.large"), None, VOLUME_SIZE),
        "40Gi is below the minimum of gp3 in CloudProfile aws; use at least 50Gi"
    );
    assert_eq!(
        message(&in_two_zones("gp3", "10Gi", "m6g.large"), None, VOLUME_SIZE),
        "10Gi is below the minimum of gp3 in CloudProfile aws; use at least 50Gi"
    );
    admitted(&in_two_zones("gp3", "50Gi", "m6g.large"), VOLUME_SIZE);
    admitted(&in_two_zones("gp3", "40Gi", "m6i.large"), VOLUME_SIZE);
    admitted(&in_two_zones("sc1", "30Gi", "m6g.large"), VOLUME_SIZE);
    // On update a kept type is not checked again, a new one is; the size is checked when the
    // volume or the machine type changes.
    let stored = with_volume("sc1", "80Gi");
    admitted_on_update(&stored, &stored, VOLUME_TYPE);
    assert_eq!(
        on(
            &check(&stored, Some(&with_volume("gp3", "80Gi"))),
            VOLUME_TYPE
        )
        .len(),
        1
    );
    assert_eq!(
        on(
            &check(
                &with_volume("gp3", "10Gi"),
                Some(&with_volume("gp3", "80Gi"))
            ),
            VOLUME_SIZE
        )
        .len(),
        1
    );
    // Gardener raised a minimum under a stored pool: the pool as it is stays admitted (the
    // controller's finalizer removal and KEB's rewrites of the section carry it unchanged),
    // a new machine type is held to it.
    let small = in_two_zones("gp3", "40Gi", "m6g.large");
    admitted_on_update(&small, &small, VOLUME_SIZE);
    assert_eq!(
        on(
            &check(&small, Some(&in_two_zones("gp3", "40Gi", "m6i.large"))),
            VOLUME_SIZE
        )
        .len(),
        1
    );
}

/// Gardener's `kubeletVersionConstraint` of an image version, against the pool's kubelet (its
/// own version, else the control plane's, resolved as Gardener resolves them).
#[test]
fn an_image_version_must_support_the_pools_kubelet() {
    let mut spec = profile();
    for v in &mut spec.machine_images[0].versions {
        match v.version.as_str() {
            "1592.14.0" => v.kubelet_version_constraint = Some("< 1.35".into()),
            "1877.7.0" => v.kubelet_version_constraint = Some(">= 1.35, < 1.36".into()),
            _ => {}
        }
    }
    let check = |rt: &Runtime| {
        let profile = Profile {
            name: "aws",
            spec: &spec,
        };
        let f = validate_against_cloud_profile(rt, None, config(), profile, jiff::Timestamp::now());
        on(&f, IMAGE_VERSION)
    };
    let rt = versions("1.35", None);
    let old_image = |rt: &Runtime| {
        let mut rt = rt.clone();
        main_pool(&mut rt).machine.image = Some(
            serde_json::from_value(json!({"name": "gardenlinux", "version": "1592.14.0"})).unwrap(),
        );
        rt
    };
    assert_eq!(
        check(&old_image(&rt)),
        [
            "gardenlinux 1592.14.0 supports kubelet versions \"< 1.35\" in CloudProfile aws, not 1.35.4 (spec.shoot.kubernetes.version 1.35); use one of 1900.0.0, 1877.8.0, 1877.7.0"
        ]
    );
    // A pool of its own at 1.34 runs it; the control plane alone decides otherwise.
    assert_eq!(
        check(&old_image(&versions("1.35", Some("1.34.5")))),
        Vec::<String>::new()
    );
    assert_eq!(
        check(&old_image(&versions("1.34.5", None))),
        Vec::<String>::new()
    );
    // An upper bound refuses the next minor version.
    let mut newer = versions("1.36.0", None);
    main_pool(&mut newer).machine.image = Some(
        serde_json::from_value(json!({"name": "gardenlinux", "version": "1877.7.0"})).unwrap(),
    );
    assert_eq!(check(&newer).len(), 1, "1.36.0 is outside >= 1.35, < 1.36");

    // No version runs the kubelet: the Kubernetes version is what can change.
    let mut old_only = profile();
    for v in &mut old_only.machine_images[0].versions {
        v.kubelet_version_constraint = Some("< 1.35".into());
    }
    let profile = Profile {
        name: "aws",
        spec: &old_only,
    };
    let f = validate_against_cloud_profile(
        &old_image(&rt),
        None,
        config(),
        profile,
        jiff::Timestamp::now(),
    );
    assert_eq!(
        on(&f, IMAGE_VERSION),
        [
            "gardenlinux 1592.14.0 supports kubelet versions \"< 1.35\" in CloudProfile aws, not 1.35.4 (spec.shoot.kubernetes.version 1.35); no gardenlinux version runs it: use a Kubernetes version \"< 1.35\" admits"
        ]
    );
}
