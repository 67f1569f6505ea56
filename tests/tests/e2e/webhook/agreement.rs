//! Agreement with Gardener, measured: Runtimes generated from the KEB corpus (one to three
//! changes each to the Kubernetes version, region and platform region, zones, machine type and
//! architecture, machine image version, volume type and size, Kubernetes version and update
//! strategy of the main or an additional pool, drawn from the test landscape and beyond it) are judged by our rules (the
//! configuration's and the CloudProfile's, as the webhook runs them) and, converted, by
//! gardener-apiserver's server-side dry run of the Shoot. Both rates are printed: admitted
//! Runtimes whose Shoot Gardener accepts, and Runtimes refused for a CloudProfile reason whose
//! Shoot Gardener refuses, naming only fields we name too. Any disagreement fails the test with
//! the changes, our verdict and Gardener's.
//!
//! `KIM_AGREEMENT_CASES` raises the number of cases (2,000 by default), `KIM_AGREEMENT_SEED`
//! replays another sequence (the seed is printed on failure).
#![allow(clippy::unwrap_used)]

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kim_shared::api::Runtime;
use kim_shared::config::{ConfigPaths, KimConfig, ProviderKind};
use kim_shared::gardener::Shoot;
use kim_shared::gardener::cloud_profile::CloudProfile;
use kim_shared::validation::{
    Profile, ValidationOptions, validate_against_cloud_profile, validate_create_with,
};
use kim_tests::fixtures::{self, data};
use kim_tests::keb::corpus;
use kim_tests::testenv::TestEnv;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// Generated Runtimes unless `KIM_AGREEMENT_CASES` says otherwise.
const CASES: usize = 2_000;
/// The generator's seed unless `KIM_AGREEMENT_SEED` says otherwise.
const SEED: u64 = 0x6b69_6d2d_6b65_6221;
/// Dry runs in flight at once.
const CONCURRENCY: usize = 12;

/// A small deterministic generator (xorshift64*), so that a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(n.max(1)).unwrap()).unwrap()
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const KUBERNETES: [&str; 16] = [
    "1.37.1", "1.37", "1.36", "1.36.3", "1.36.2", "1.35", "1.35.4", "1.35.2", "1.34.4", "1.34",
    "1.33.9", "1.33", "1.32.8", "1.31.0", "1.36.9", "1.32",
];
const UPDATE_STRATEGIES: [&str; 3] = [
    "AutoRollingUpdate",
    "AutoInPlaceUpdate",
    "ManualInPlaceUpdate",
];
const IMAGES: [&str; 9] = [
    "1877.9.0",
    "1877.8.0",
    "1877.7.0",
    "1592.14.0",
    "1443.9.0",
    "1312.3.0",
    "1312.2.0",
    "1.0.0",
    "1877.8.1",
];
const SIZES: [&str; 6] = ["10Gi", "19Gi", "20Gi", "80Gi", "1500Gi", "4096Gi"];
/// Platform regions KEB knows, EU-access ones among them.
const PLATFORM_REGIONS: [&str; 6] = [
    "cf-eu10", "cf-eu11", "cf-ch20", "cf-us10", "cf-eu01", "cf-jp10",
];

/// The pool a change applies to: the main pool, or (when the Runtime has any) an additional
/// one.
fn pool<'v>(rng: &mut Rng, rt: &'v mut Value) -> (String, &'v mut Value) {
    let extra = rt["spec"]["shoot"]["provider"]["additionalWorkers"]
        .as_array()
        .map_or(0, Vec::len);
    if extra > 0 && rng.below(3) == 0 {
        let i = rng.below(extra);
        (
            format!("additionalWorkers[{i}]"),
            &mut rt["spec"]["shoot"]["provider"]["additionalWorkers"][i],
        )
    } else {
        (
            "workers[0]".to_owned(),
            &mut rt["spec"]["shoot"]["provider"]["workers"][0],
        )
    }
}

/// Applies one change to `rt` and says which.
fn mutate(
    rng: &mut Rng,
    rt: &mut Value,
    p: &data::ProviderData,
    all: &[data::ProviderData],
) -> String {
    match rng.below(11) {
        0 => {
            let v = rng.pick(&KUBERNETES);
            rt["spec"]["shoot"]["kubernetes"]["version"] = json!(v);
            format!("kubernetes.version={v}")
        }
        1 => {
            // Another region of the provider, with its zones or keeping the old ones.
            let (region, zones) = rng.pick(&p.regions).clone();
            let keep_zones = rng.below(4) == 0;
            rt["spec"]["shoot"]["region"] = json!(region);
            rt["metadata"]["labels"]["kyma-project.io/region"] = json!(region);
            if !keep_zones {
                let n = rt["spec"]["shoot"]["provider"]["workers"][0]["zones"]
                    .as_array()
                    .map_or(1, Vec::len);
                let names: Vec<&str> = zones.iter().take(n).map(|z| z.name.as_str()).collect();
                rt["spec"]["shoot"]["provider"]["workers"][0]["zones"] = json!(names);
                for pool in rt["spec"]["shoot"]["provider"]["additionalWorkers"]
                    .as_array_mut()
                    .into_iter()
                    .flatten()
                {
                    pool["zones"] = json!([names[0]]);
                }
            }
            format!("region={region} (zones kept: {keep_zones})")
        }
        2 => {
            let region = rt["spec"]["shoot"]["region"].as_str().unwrap().to_owned();
            let zones: Vec<String> = p
                .regions
                .iter()
                .find(|(r, _)| *r == region)
                .map(|(_, zs)| zs.iter().map(|z| z.name.clone()).collect())
                .unwrap_or_default();
            let zone = if rng.below(3) == 0 || zones.is_empty() {
                "zz-nowhere-9z".to_owned()
            } else {
                rng.pick(&zones).clone()
            };
            let list = &mut rt["spec"]["shoot"]["provider"]["workers"][0]["zones"];
            if !list.as_array().unwrap().contains(&json!(zone)) {
                list[0] = json!(zone);
            }
            format!("workers[0].zones[0]={zone}")
        }
        3 => {
            // Any machine type of the landscape (other providers' too), or none that exists.
            let provider = if rng.below(5) == 0 { rng.pick(all) } else { p };
            let t = if rng.below(10) == 0 {
                "x9.enormous".to_owned()
            } else {
                rng.pick(&provider.machine_types).name.clone()
            };
            let (at, w) = pool(rng, rt);
            w["machine"]["type"] = json!(t);
            format!("{at}.machine.type={t}")
        }
        4 => {
            let v = rng.pick(&IMAGES);
            let (at, w) = pool(rng, rt);
            w["machine"]["image"]["version"] = json!(v);
            format!("{at}.machine.image.version={v}")
        }
        5 => {
            let provider = if rng.below(4) == 0 { rng.pick(all) } else { p };
            let Some(v) = provider
                .volume_types
                .get(rng.below(provider.volume_types.len()))
            else {
                return "nothing (the provider has no volume types)".to_owned();
            };
            let (at, w) = pool(rng, rt);
            w["volume"]["type"] = json!(v.name);
            format!("{at}.volume.type={}", v.name)
        }
        6 => {
            let size = rng.pick(&SIZES);
            let (at, w) = pool(rng, rt);
            w["volume"]["size"] = json!(size);
            format!("{at}.volume.size={size}")
        }
        9 => {
            let v = rng.pick(&KUBERNETES);
            let (at, w) = pool(rng, rt);
            w["kubernetes"]["version"] = json!(v);
            format!("{at}.kubernetes.version={v}")
        }
        10 => {
            let strategy = rng.pick(&UPDATE_STRATEGIES);
            let (at, w) = pool(rng, rt);
            w["updateStrategy"] = json!(strategy);
            format!("{at}.updateStrategy={strategy}")
        }
        7 => {
            let region = rng.pick(&PLATFORM_REGIONS);
            rt["spec"]["shoot"]["platformRegion"] = json!(region);
            rt["metadata"]["labels"]["kyma-project.io/platform-region"] = json!(region);
            format!("platformRegion={region}")
        }
        _ => {
            let arm = p
                .machine_types
                .iter()
                .filter(|m| m.architecture == "arm64")
                .map(|m| m.name.clone())
                .collect::<Vec<_>>();
            let arch = if rng.below(2) == 0 { "arm64" } else { "amd64" };
            let arm_type = (!arm.is_empty() && rng.below(2) == 0).then(|| rng.pick(&arm).clone());
            let (at, w) = pool(rng, rt);
            w["machine"]["architecture"] = json!(arch);
            match arm_type {
                Some(t) => {
                    w["machine"]["type"] = json!(t);
                    format!("{at}.machine.architecture={arch}, machine.type={t}")
                }
                None => format!("{at}.machine.architecture={arch}"),
            }
        }
    }
}

/// One generated Runtime, judged by us, ready for Gardener's dry run.
struct Case {
    index: usize,
    base: &'static str,
    changes: Vec<String>,
    /// The CloudProfile rules' violations (field, message); empty when we admit.
    ours: Vec<(String, String)>,
    shoot: Shoot,
    structured_auth: Option<ConfigMap>,
}

/// The Shoot field a Runtime field becomes: `spec.shoot.X` is the Shoot's `spec.X`, and the
/// additional pools follow the main pool in the Shoot's `workers`.
fn shoot_field(runtime_field: &str) -> String {
    let f = runtime_field.replacen("spec.shoot.", "spec.", 1);
    let prefix = "spec.provider.additionalWorkers[";
    let Some(rest) = f.strip_prefix(prefix) else {
        return f;
    };
    let (index, tail) = rest.split_once(']').unwrap();
    let index: usize = index.parse().unwrap();
    format!("spec.provider.workers[{}]{tail}", index + 1)
}

/// The fields a gardener-apiserver refusal names (`spec.provider.workers[0].machine.type: ...`),
/// as the Runtime's rules would name them in Shoot terms. Gardener refuses the access
/// restriction a platform region brings at `spec.accessRestrictions[i]`; our rule names the
/// region, which is what a Runtime can change.
fn gardener_fields(message: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = message;
    while let Some(at) = rest.find("spec.") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || "._[]".contains(c)))
            .unwrap_or(tail.len());
        let field = tail[..end].trim_end_matches('.');
        if tail[end..].starts_with(':') {
            out.push(if field.starts_with("spec.accessRestrictions") {
                "spec.region".to_owned()
            } else {
                field.to_owned()
            });
        }
        rest = &tail[end..];
    }
    out
}

/// One field names the other or a part of it (`...machine.image` and `...machine.image.version`).
fn same_field(a: &str, b: &str) -> bool {
    let within = |long: &str, short: &str| {
        long.strip_prefix(short)
            .is_some_and(|t| t.is_empty() || t.starts_with('.') || t.starts_with('['))
    };
    within(a, b) || within(b, a)
}

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("{name}={v:?}: {e}"))
        }
        Err(_) => default,
    }
}

#[tokio::test]
async fn our_verdict_agrees_with_gardener_apiserver() {
    let cases = usize::try_from(env_number("KIM_AGREEMENT_CASES", CASES as u64)).unwrap();
    let seed = env_number("KIM_AGREEMENT_SEED", SEED);
    assert!(
        cases >= CASES,
        "KIM_AGREEMENT_CASES may raise the number of cases, not lower it"
    );
    let env = TestEnv::shared().await.unwrap();
    let client = env.garden_client().await.unwrap();
    let dir = env.state_dir().join("agreement");
    let cfg = KimConfig::load(&ConfigPaths::new(
        fixtures::write_converter_config(&dir, fixtures::PROJECT_NAME).unwrap(),
    ))
    .unwrap();
    let landscape = data::providers().unwrap();
    let profiles: Vec<(String, CloudProfile)> = landscape
        .iter()
        .map(|p| {
            let profile: CloudProfile =
                serde_json::from_value(fixtures::cloud_profile_of(&p.provider).unwrap()).unwrap();
            (p.provider.clone(), profile)
        })
        .collect();
    let bases = corpus();
    let mut rng = Rng(seed);
    let mut generated: Vec<Case> = Vec::with_capacity(cases);
    let mut other = 0usize;
    for index in 0..cases {
        let base = rng.pick(&bases);
        let provider = base.runtime["spec"]["shoot"]["provider"]["type"]
            .as_str()
            .unwrap()
            .to_owned();
        let p = landscape.iter().find(|p| p.provider == provider).unwrap();
        let mut value = base.runtime.clone();
        let changes: Vec<String> = (0..=rng.below(3))
            .map(|_| mutate(&mut rng, &mut value, p, &landscape))
            .collect();
        let mut rt: Runtime = serde_json::from_value(value).unwrap();
        kim_shared::defaults::apply_defaults(&mut rt, &cfg);
        let kind: ProviderKind = provider.parse().unwrap();
        let (_, profile) = profiles.iter().find(|(n, _)| *n == provider).unwrap();
        if !validate_create_with(&rt, &cfg, &ValidationOptions::default())
            .violations
            .is_empty()
        {
            // Refused for a reason of ours, not the CloudProfile's: Gardener has no say.
            other += 1;
            continue;
        }
        let ours = validate_against_cloud_profile(
            &rt,
            None,
            &cfg,
            Profile {
                name: cfg.cloud_profile_name(kind),
                spec: &profile.spec,
            },
            jiff::Timestamp::now(),
        )
        .violations
        .iter()
        .map(|v| (v.field.clone(), v.message.clone()))
        .collect();
        // The configuration's rules admit it, so it converts (`docs/validation.md`).
        let converted = kim_shared::convert::to_shoot(&rt, &cfg, None).unwrap_or_else(|e| {
            panic!("case {index} ({}, {changes:?}, seed {seed:#x}): admitted by the configuration's rules but does not convert: {e}", base.case)
        });
        generated.push(Case {
            index,
            base: base.case,
            changes,
            ours,
            shoot: converted.shoot,
            structured_auth: converted.structured_auth,
        });
    }

    let shoots: Api<Shoot> = Api::namespaced(client.clone(), fixtures::PROJECT_NAMESPACE);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), fixtures::PROJECT_NAMESPACE);
    // The structured-authentication ConfigMaps the Shoots reference, once each, before the
    // dry runs that look them up.
    let mut auth: Vec<&ConfigMap> = generated
        .iter()
        .filter_map(|c| c.structured_auth.as_ref())
        .collect();
    auth.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    auth.dedup_by(|a, b| a.metadata.name == b.metadata.name);
    for cm in auth {
        let mut cm = cm.clone();
        cm.metadata.namespace = Some(fixtures::PROJECT_NAMESPACE.into());
        match cms.create(&PostParams::default(), &cm).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("structured-auth ConfigMap: {e}"),
        }
    }
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let verdicts: Vec<(Case, Result<(), String>)> = futures::stream::iter(generated)
        .map(|case| {
            let (shoots, dry_run) = (&shoots, &dry_run);
            async move {
                let gardener = match shoots.create(dry_run, &case.shoot).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) => Err(e.message),
                    Err(e) => panic!("dry run of case {}: {e}", case.index),
                };
                (case, gardener)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;

    let (mut admitted, mut admitted_accepted) = (0usize, 0usize);
    let (mut refused, mut refused_refused) = (0usize, 0usize);
    let mut disagreements: Vec<(usize, String)> = Vec::new();
    for (case, gardener) in &verdicts {
        let ours_admits = case.ours.is_empty();
        if ours_admits {
            admitted += 1;
        } else {
            refused += 1;
        }
        let ours_text = || {
            case.ours
                .iter()
                .map(|(f, m)| format!("{f}: {m}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        match (gardener, ours_admits) {
            (Ok(()), true) => admitted_accepted += 1,
            (Err(e), false) => {
                // Gardener must refuse for our reasons: each field it names is one we name
                // (it stops at the first fault of a pool's machine, we report them all).
                let ours: Vec<String> = case.ours.iter().map(|(f, _)| shoot_field(f)).collect();
                let theirs = gardener_fields(e);
                let unmatched: Vec<&String> = theirs
                    .iter()
                    .filter(|g| !ours.iter().any(|o| same_field(o, g)))
                    .collect();
                if theirs.is_empty() || !unmatched.is_empty() {
                    disagreements.push((
                        case.index,
                        format!(
                            "case {} ({}, changes {:?}): we refuse ({}), Gardener refuses for other fields {unmatched:?}: {e}",
                            case.index,
                            case.base,
                            case.changes,
                            ours_text()
                        ),
                    ));
                } else {
                    refused_refused += 1;
                }
            }
            (Err(e), true) => disagreements.push((
                case.index,
                format!(
                    "case {} ({}, changes {:?}): we admit, Gardener refuses: {e}",
                    case.index, case.base, case.changes
                ),
            )),
            (Ok(()), false) => disagreements.push((
                case.index,
                format!(
                    "case {} ({}, changes {:?}): we refuse ({}), Gardener accepts",
                    case.index,
                    case.base,
                    case.changes,
                    ours_text()
                ),
            )),
        }
    }
    disagreements.sort_by_key(|(i, _)| *i);
    let rate = |a: usize, b: usize| {
        if b == 0 {
            100.0
        } else {
            #[allow(clippy::cast_precision_loss)]
            let r = 100.0 * a as f64 / b as f64;
            r
        }
    };
    println!(
        "agreement over {cases} generated Runtimes (seed {seed:#x}): admitted and accepted by Gardener {admitted_accepted}/{admitted} ({:.2}%), refused for a CloudProfile reason and refused by Gardener for the same fields {refused_refused}/{refused} ({:.2}%), refused by the configuration's rules (not compared) {other}",
        rate(admitted_accepted, admitted),
        rate(refused_refused, refused)
    );
    for (_, d) in &disagreements {
        println!("{d}");
    }
    assert!(
        admitted >= 500 && refused >= 500,
        "{admitted} admitted, {refused} refused: the generator must exercise both (seed {seed:#x})"
    );
    assert!(
        disagreements.is_empty(),
        "{} disagreements with gardener-apiserver (seed {seed:#x}; all printed above), first: {}",
        disagreements.len(),
        disagreements[0].1
    );
}

#[test]
fn fields_of_both_sides_compare() {
    assert_eq!(
        shoot_field("spec.shoot.provider.additionalWorkers[1].machine.type"),
        "spec.provider.workers[2].machine.type"
    );
    assert_eq!(shoot_field("spec.shoot.region"), "spec.region");
    let message = "shoots.core.gardener.cloud \"c-1\" is forbidden: [spec.provider.workers[0].machine.image: Invalid value: \"x\": expired, spec.accessRestrictions[0]: Unsupported value: \"eu-access-only\"]";
    assert_eq!(
        gardener_fields(message),
        ["spec.provider.workers[0].machine.image", "spec.region"]
    );
    assert!(same_field(
        "spec.provider.workers[0].machine.image.version",
        "spec.provider.workers[0].machine.image"
    ));
    assert!(!same_field(
        "spec.provider.workers[1].machine.type",
        "spec.provider.workers[10].machine.type"
    ));
}
