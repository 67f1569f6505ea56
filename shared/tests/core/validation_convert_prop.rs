//! Property: every Runtime the validation admits is converted without error ("every error the
//! conversion can return has a matching validation rule"), on create and on update.
//!
//! Runtimes are generated from the valid sample by random edits of exactly the fields the
//! conversion reads and can fail on (labels, provider, region, pools, zones, networks, version),
//! drawing from valid and invalid values, so that both sides of every rule are exercised.
#![allow(clippy::unwrap_used)]

use crate::validation_fixtures::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kim_shared::api::{ProviderType, Runtime};
use kim_shared::convert::to_shoot;
use kim_shared::defaults::{apply_defaults, apply_update_defaults};
use kim_shared::names;
use kim_shared::validation::{validate_create, validate_update};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::ValueTree;

/// `(provider, region, machine type, zones of the region)`: consistent with the example
/// configuration, so that many generated Runtimes are admitted.
const PROFILES: [(ProviderType, &str, &str, &[&str]); 5] = [
    (
        ProviderType::Aws,
        "eu-central-1",
        "m6i.large",
        &["eu-central-1a", "eu-central-1b", "eu-central-1c"],
    ),
    (
        ProviderType::Azure,
        "westeurope",
        "Standard_D4s_v5",
        &["1", "2", "3"],
    ),
    (
        ProviderType::Gcp,
        "us-central1",
        "n2-standard-4",
        &["us-central1-a", "us-central1-b", "us-central1-c"],
    ),
    (
        ProviderType::Openstack,
        "eu-de-1",
        "g_c4_m16",
        &["eu-de-1a", "eu-de-1b", "eu-de-1d"],
    ),
    (
        ProviderType::Alicloud,
        "ap-southeast-1",
        "ecs.g8i.xlarge",
        &["ap-southeast-1a", "ap-southeast-1b", "ap-southeast-1c"],
    ),
];
/// Zones valid nowhere or in another region.
const STRAY_ZONES: [&str; 4] = ["9", "x", "eu-central-1a", "0"];
const REGIONS: [&str; 3] = ["nowhere", "", "eu-west-1"];
const NODES: [&str; 8] = [
    "10.250.0.0/16",
    "10.250.0.0/22",
    "10.250.0.0/24",
    "10.250.0.0/25",
    "10.0.0.0/12",
    "10.250.1.0/16",
    "240.0.0.0/16",
    "x",
];
/// `(pods, services)`, mostly disjoint from each other and from the nodes above.
const POD_SERVICE: [(&str, &str); 6] = [
    ("10.96.0.0/13", "10.104.0.0/13"),
    ("100.64.0.0/12", "100.104.0.0/13"),
    ("100.64.0.0/12", "100.104.0.0/13"),
    ("10.96.0.0/13", "10.96.0.0/13"),
    ("10.0.0.0/8", "100.104.0.0/13"),
    ("fd00::/48", "10.104.0.0/13"),
];
const VERSIONS: [Option<&str>; 6] = [
    None,
    Some("1.35"),
    Some("1.34.4"),
    Some("1.36.3"),
    Some("1.30.1"),
    Some("x"),
];
const POOL_NAMES: [&str; 7] = [
    "cpu-worker-0",
    "extra",
    "gpu",
    "pool-a",
    "pool-b",
    "Bad_Name",
    "a-very-long-pool-name",
];

/// Mostly one of the first `valid` values (which the rules admit), sometimes any value.
fn mostly<T: Clone + std::fmt::Debug + 'static>(
    all: &[T],
    valid: usize,
) -> impl Strategy<Value = T> + use<T> {
    prop_oneof![3 => select(all[..valid].to_vec()), 1 => select(all.to_vec())]
}

/// One pool: name, zone picks (index into the profile's zones, or a stray zone), maximum.
type Pool = (&'static str, Vec<(bool, usize)>, i32);

fn pool() -> impl Strategy<Value = Pool> {
    let picks = proptest::collection::vec((proptest::bool::weighted(0.95), 0..3usize), 1..4);
    (
        mostly(&POOL_NAMES, 5),
        prop_oneof![9 => picks, 1 => Just(Vec::new())],
        prop_oneof![9 => 1..25i32, 1 => -1..1i32],
    )
}

fn pools() -> impl Strategy<Value = (Vec<Pool>, Vec<Pool>)> {
    (
        // Mostly exactly one main pool, as the rule wants.
        prop_oneof![8 => proptest::collection::vec(pool(), 1..2), 1 => proptest::collection::vec(pool(), 0..3)],
        proptest::collection::vec(pool(), 0..3),
    )
}

/// Sets the pools of `rt` from the generated description.
fn set_pools(rt: &mut Runtime, (main, extra): (Vec<Pool>, Vec<Pool>), profile: usize) {
    let (_, _, machine, zones) = PROFILES[profile];
    let template = sample().spec.shoot.provider.workers[0].clone();
    let build = |(name, picks, maximum): Pool| {
        let mut w = template.clone();
        w.name = name.to_owned();
        let mut chosen: Vec<String> = Vec::new();
        for &(valid, i) in &picks {
            let zone = if valid {
                zones[i % zones.len()]
            } else {
                STRAY_ZONES[i % STRAY_ZONES.len()]
            };
            // Repeated valid zones are dropped, so that most pools are valid; stray ones may repeat.
            if !valid || !chosen.iter().any(|z| z == zone) {
                chosen.push(zone.to_owned());
            }
        }
        w.zones = Some(chosen);
        w.maximum = maximum;
        w.minimum = maximum.clamp(0, 1);
        w.machine.type_ = machine.to_owned();
        w.volume = None;
        w.max_surge = Some(IntOrString::Int(1));
        w
    };
    let provider = &mut rt.spec.shoot.provider;
    provider.workers = main.into_iter().map(build).collect();
    let extra: Vec<_> = extra.into_iter().map(build).collect();
    provider.additional_workers = (!extra.is_empty()).then_some(extra);
}

prop_compose! {
    fn edited_runtime()(
        profile in 0..PROFILES.len(),
        stray_region in proptest::option::weighted(0.1, select(REGIONS.to_vec())),
        pools in pools(),
        nodes in mostly(&NODES, 3),
        pod_service in mostly(&POD_SERVICE, 3),
        version in mostly(&VERSIONS, 4),
        drop_label in proptest::option::weighted(0.1, select(names::REQUIRED_RUNTIME_LABELS.to_vec())),
    ) -> Runtime {
        let mut rt = sample();
        let (provider, region, _, _) = PROFILES[profile];
        set_pools(&mut rt, pools, profile);
        let shoot = &mut rt.spec.shoot;
        shoot.provider.type_ = provider;
        shoot.region = stray_region.unwrap_or(region).to_owned();
        shoot.networking.nodes = nodes.to_owned();
        (shoot.networking.pods, shoot.networking.services) = (pod_service.0.to_owned(), pod_service.1.to_owned());
        shoot.kubernetes.as_mut().unwrap().version = version.map(str::to_owned);
        if let Some(key) = drop_label {
            set_label(&mut rt, key, None);
        }
        rt
    }
}

/// A change of a stored Runtime's pools or version (or none).
type Change = (Option<(Vec<Pool>, Vec<Pool>)>, Option<Option<&'static str>>);

prop_compose! {
    /// An edited Runtime and a change of it.
    fn update()(
        old in edited_runtime(),
        new_pools in proptest::option::of(pools()),
        new_version in proptest::option::of(select(VERSIONS.to_vec())),
    ) -> (Runtime, Change) {
        (old, (new_pools, new_version))
    }
}

/// `old` after defaulting and `old` with `change` after the update's defaulting, if
/// validation admits both (CREATE for `old`, UPDATE for the changed one).
fn admitted_update(old: Runtime, (new_pools, new_version): Change) -> Option<(Runtime, Runtime)> {
    let old = admitted(old)?;
    let mut new = old.clone();
    if let Some(pools) = new_pools {
        let profile = PROFILES
            .iter()
            .position(|p| p.0 == old.spec.shoot.provider.type_)?;
        set_pools(&mut new, pools, profile);
    }
    if let Some(v) = new_version {
        new.spec.shoot.kubernetes.as_mut()?.version = v.map(str::to_owned);
    }
    apply_update_defaults(&old, &mut new, config());
    validate_update(&old, &new, config())
        .is_allowed()
        .then_some((old, new))
}

/// `rt` after defaulting, if validation on CREATE admits it (the webhook's order).
fn admitted(mut rt: Runtime) -> Option<Runtime> {
    apply_defaults(&mut rt, config());
    validate_create(&rt, config()).is_allowed().then_some(rt)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn admitted_on_create_converts(rt in edited_runtime()) {
        if let Some(rt) = admitted(rt) {
            let converted = to_shoot(&rt, config(), None);
            prop_assert!(converted.is_ok(), "admitted but not converted: {:?}\n{}", converted.err(), serde_json::to_string(&rt.spec).unwrap());
        }
    }

}

proptest! {
    // About 2 in 100 generated updates change something and are admitted (the generator's
    // guard below): enough cases for a few dozen of them.
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn admitted_on_update_converts((old, change) in update()) {
        let Some((old, new)) = admitted_update(old, change) else { return Ok(()) };
        let live = to_shoot(&old, config(), None).unwrap().shoot;
        {
            let converted = to_shoot(&new, config(), Some(&live));
            prop_assert!(converted.is_ok(), "admitted but not converted: {:?}\nold {}\nnew {}", converted.err(),
                serde_json::to_string(&old.spec).unwrap(), serde_json::to_string(&new.spec).unwrap());
        }
    }
}

#[test]
fn the_generator_produces_admitted_runtimes() {
    // Without admitted cases the properties above would hold vacuously.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = edited_runtime();
    let admitted_count = (0..1000)
        .filter(|_| admitted(strategy.new_tree(&mut runner).unwrap().current()).is_some())
        .count();
    assert!(
        admitted_count >= 100,
        "only {admitted_count} of 1000 generated Runtimes were admitted"
    );
    // Nor without admitted updates that change something.
    let strategy = update();
    let changed = (0..1000)
        .filter_map(|_| {
            let (old, change) = strategy.new_tree(&mut runner).unwrap().current();
            admitted_update(old, change)
        })
        .filter(|(old, new)| old.spec != new.spec)
        .count();
    assert!(
        changed >= 15,
        "only {changed} of 1000 generated updates changed something and were admitted"
    );
}
