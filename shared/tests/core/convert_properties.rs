//! Properties of the conversion over generated Runtimes:
//! - deterministic: the same input gives the same bytes (create and patch form);
//! - an admitted Runtime converts: after the mutating webhook's defaults, `validate_create`
//!   accepting implies `to_shoot` succeeding (`docs/conversion.md`, "Errors");
//! - the patch form over the Shoot just created succeeds and removes no pool.
//!
//! The generator mixes valid and invalid values of exactly the fields the conversion reads and
//! can fail on (labels, provider, zones, pools, nodes, region), so both sides of every rule are
//! drawn; `generator_reaches_both_sides` checks that it does.
#![allow(clippy::unwrap_used)]

use crate::convert_fixture::{config, region, runtime};
use kim_shared::api::Runtime;
use kim_shared::convert::to_shoot;
use kim_shared::defaults::apply_defaults;
use kim_shared::validation::validate_create;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};

const PROVIDERS: [&str; 5] = ["aws", "azure", "gcp", "openstack", "alicloud"];
const NODES: [&str; 7] = [
    "10.250.0.0/16",
    "10.250.0.0/22",
    "10.250.0.0/24",
    "10.180.0.0/17",
    "10.250.0.0/25",
    "10.0.0.0/15",
    "not-a-cidr",
];
const STRAY_ZONES: [&str; 3] = ["9", "01", "elsewhere-1a"];
const LABELS: [&str; 3] = [
    "kyma-project.io/runtime-id",
    "kyma-project.io/global-account-id",
    "kyma-project.io/subaccount-id",
];

/// One generated Runtime description, kept small enough to shrink well.
#[derive(Clone, Debug)]
struct Shape {
    provider: &'static str,
    /// Per pool: zone picks, `true` for a zone of the region (by index), `false` for a stray zone.
    pools: Vec<Vec<(bool, usize)>>,
    main_pools: usize,
    nodes: &'static str,
    purpose: &'static str,
    platform_region: &'static str,
    version: Option<&'static str>,
    enforce_seed: Option<bool>,
    egress: bool,
    ingress: Option<bool>,
    nvidia: Option<bool>,
    licence: Option<&'static str>,
    oidc: bool,
    drop_label: Option<usize>,
    unknown_region: bool,
}

fn shape() -> impl Strategy<Value = Shape> {
    // Distinct zones of the region, sometimes with a stray zone, sometimes none at all.
    let zones = (
        proptest::sample::subsequence(vec![0usize, 1, 2], 1..=3),
        proptest::option::weighted(0.05, 0..3usize),
    )
        .prop_map(|(valid, stray)| {
            valid
                .into_iter()
                .map(|k| (true, k))
                .chain(stray.map(|k| (false, k)))
                .collect()
        });
    let picks = prop_oneof![12 => zones, 1 => Just(Vec::new())];
    let nodes = prop_oneof![6 => select(NODES[..4].to_vec()), 1 => select(NODES[4..].to_vec())];
    (
        (
            select(PROVIDERS.to_vec()),
            proptest::collection::vec(picks, 1..4),
            prop_oneof![8 => Just(1usize), 1 => Just(0usize), 1 => Just(2usize)],
            nodes,
            select(vec!["evaluation", "production", "development"]),
            select(vec!["cf-eu11", "cf-us10", "cf-ch20"]),
            select(vec![None, Some("1.35"), Some("1.35.4"), Some("1.34.4")]),
        ),
        (
            proptest::option::of(any::<bool>()),
            any::<bool>(),
            proptest::option::of(any::<bool>()),
            proptest::option::of(any::<bool>()),
            select(vec![None, Some(""), Some("TestDevelopmentAndDemo")]),
            any::<bool>(),
            prop_oneof![9 => Just(None), 1 => (0..3usize).prop_map(Some)],
            proptest::bool::weighted(0.05),
        ),
    )
        .prop_map(
            |((provider, pools, main_pools, nodes, purpose, platform_region, version), rest)| {
                let (
                    enforce_seed,
                    egress,
                    ingress,
                    nvidia,
                    licence,
                    oidc,
                    drop_label,
                    unknown_region,
                ) = rest;
                Shape {
                    provider,
                    pools,
                    main_pools,
                    nodes,
                    purpose,
                    platform_region,
                    version,
                    enforce_seed,
                    egress,
                    ingress,
                    nvidia,
                    licence,
                    oidc,
                    drop_label,
                    unknown_region,
                }
            },
        )
}

fn build(s: &Shape) -> Runtime {
    let mut rt = runtime(s.provider);
    let (_, zones) = region(s.provider);
    let template = rt.spec.shoot.provider.workers[0].clone();
    let pools: Vec<_> = s
        .pools
        .iter()
        .enumerate()
        .map(|(i, picks)| {
            let mut w = template.clone();
            w.name = if i == 0 {
                "cpu-worker-0".to_owned()
            } else {
                format!("pool-{i}")
            };
            w.zones = Some(
                picks
                    .iter()
                    .map(|&(valid, k)| {
                        if valid {
                            zones[k % 3]
                        } else {
                            STRAY_ZONES[k % 3]
                        }
                        .to_owned()
                    })
                    .collect(),
            );
            w
        })
        .collect();
    let main = s.main_pools.min(pools.len());
    let (main_pools, extra) = pools.split_at(main);
    rt.spec.shoot.provider.workers = main_pools.to_vec();
    rt.spec.shoot.provider.additional_workers = (!extra.is_empty()).then(|| extra.to_vec());
    let shoot = &mut rt.spec.shoot;
    shoot.networking.nodes = s.nodes.to_owned();
    shoot.purpose = s.purpose.to_owned();
    shoot.platform_region = s.platform_region.to_owned();
    shoot.kubernetes.as_mut().unwrap().version = s.version.map(str::to_owned);
    shoot.enforce_seed_location = s.enforce_seed;
    shoot.enable_nvidia_openshell = s.nvidia;
    shoot.licence_type = s.licence.map(str::to_owned);
    if s.oidc {
        shoot.kubernetes.as_mut().unwrap().kube_api_server = serde_json::from_value(serde_json::json!({
            "oidcConfig": {"issuerURL": "https://issuer.example.com", "clientID": "client", "usernameClaim": "email"}
        }))
        .unwrap();
    }
    if s.unknown_region {
        shoot.region = "nowhere-1".to_owned();
    }
    let filter = &mut rt.spec.security.networking.filter;
    filter.egress.enabled = s.egress;
    filter.ingress = s
        .ingress
        .map(|enabled| kim_shared::api::runtime::Ingress { enabled });
    if let Some(i) = s.drop_label {
        rt.metadata.labels.as_mut().unwrap().remove(LABELS[i]);
    }
    rt
}

/// The webhook's view: defaults first, then validation.
fn admitted(rt: &Runtime) -> Option<Runtime> {
    let cfg = config();
    let mut rt = rt.clone();
    apply_defaults(&mut rt, &cfg);
    validate_create(&rt, &cfg).is_allowed().then_some(rt)
}

proptest! {
    #![proptest_config(Config { cases: 256, ..Config::default() })]

    #[test]
    fn conversion_is_deterministic(s in shape()) {
        let cfg = config();
        let rt = build(&s);
        let bytes = |live| to_shoot(&rt, &cfg, live).map(|c| serde_json::to_vec(&(c.shoot, c.structured_auth)).unwrap());
        let first = bytes(None);
        prop_assert_eq!(&first, &bytes(None));
        if let Ok(created) = to_shoot(&rt, &cfg, None) {
            let patch = |_: ()| to_shoot(&rt, &cfg, Some(&created.shoot)).map(|c| serde_json::to_vec(&c.shoot).unwrap());
            prop_assert_eq!(patch(()), patch(()));
        }
    }

    #[test]
    fn admitted_runtimes_convert(s in shape()) {
        if let Some(rt) = admitted(&build(&s)) {
            let cfg = config();
            let created = to_shoot(&rt, &cfg, None);
            prop_assert!(created.is_ok(), "admitted Runtime failed to convert: {}", created.unwrap_err());
            let created = created.unwrap();
            let patched = to_shoot(&rt, &cfg, Some(&created.shoot));
            prop_assert!(patched.is_ok(), "patch over the created Shoot failed: {}", patched.unwrap_err());
            prop_assert!(!patched.unwrap().workers_removed);
        }
    }
}

/// The generator must produce Runtimes on both sides: admitted ones (or the property above is
/// vacuous) and ones the conversion rejects (or the invalid values never reach it).
#[test]
fn generator_reaches_both_sides() {
    let mut runner = TestRunner::deterministic();
    let strategy = shape();
    let (mut admitted_count, mut conversion_errors) = (0, 0);
    for _ in 0..400 {
        let rt = build(&strategy.new_tree(&mut runner).unwrap().current());
        admitted_count += usize::from(admitted(&rt).is_some());
        conversion_errors += usize::from(to_shoot(&rt, &config(), None).is_err());
    }
    eprintln!("admitted {admitted_count}, conversion errors {conversion_errors} of 400");
    assert!(
        admitted_count >= 100,
        "only {admitted_count} of 400 generated Runtimes were admitted"
    );
    assert!(
        conversion_errors >= 100,
        "only {conversion_errors} of 400 generated Runtimes failed to convert"
    );
}
