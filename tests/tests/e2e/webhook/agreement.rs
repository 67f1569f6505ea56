//! Agreement with Gardener, measured: Runtimes generated from the KEB corpus (one to three
//! changes each to the Kubernetes version, region, zones, machine type and architecture,
//! machine image version, volume type and size, drawn from the test landscape and beyond it)
//! are judged by our rules (the configuration's and the CloudProfile's, as the webhook runs
//! them) and, converted, by gardener-apiserver's server-side dry run of the Shoot. Both rates
//! are printed: admitted Runtimes whose Shoot Gardener accepts, and Runtimes refused for a
//! CloudProfile reason whose Shoot Gardener refuses. The goal is 100% in both directions.
#![allow(clippy::unwrap_used)]

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

/// Generated Runtimes.
const CASES: usize = 2_000;

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

const KUBERNETES: [&str; 13] = [
    "1.37.1", "1.37", "1.36", "1.36.3", "1.36.2", "1.35", "1.35.4", "1.35.2", "1.34.4", "1.33.9",
    "1.32.8", "1.31.0", "1.36.9",
];
const IMAGES: [&str; 9] = [
    "1877.9.0", "1877.8.0", "1877.7.0", "1592.14.0", "1443.9.0", "1312.3.0", "1312.2.0",
    "1.0.0", "1877.8.1",
];
const SIZES: [&str; 5] = ["10Gi", "20Gi", "80Gi", "1500Gi", "4096Gi"];

fn mutate(rng: &mut Rng, rt: &mut Value, p: &data::ProviderData, all: &[data::ProviderData]) {
    match rng.below(8) {
        0 => rt["spec"]["shoot"]["kubernetes"]["version"] = json!(rng.pick(&KUBERNETES)),
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
        }
        3 => {
            // Any machine type of the landscape (other providers' too), or none that exists.
            let provider = if rng.below(5) == 0 { rng.pick(all) } else { p };
            let t = if rng.below(10) == 0 {
                "x9.enormous".to_owned()
            } else {
                rng.pick(&provider.machine_types).name.clone()
            };
            rt["spec"]["shoot"]["provider"]["workers"][0]["machine"]["type"] = json!(t);
        }
        4 => {
            rt["spec"]["shoot"]["provider"]["workers"][0]["machine"]["image"]["version"] =
                json!(rng.pick(&IMAGES));
        }
        5 => {
            let provider = if rng.below(4) == 0 { rng.pick(all) } else { p };
            if let Some(v) = provider.volume_types.get(rng.below(provider.volume_types.len())) {
                rt["spec"]["shoot"]["provider"]["workers"][0]["volume"]["type"] = json!(v.name);
            }
        }
        6 => {
            rt["spec"]["shoot"]["provider"]["workers"][0]["volume"]["size"] =
                json!(rng.pick(&SIZES));
        }
        _ => {
            let arm = p
                .machine_types
                .iter()
                .filter(|m| m.architecture == "arm64")
                .map(|m| m.name.clone())
                .collect::<Vec<_>>();
            let worker = &mut rt["spec"]["shoot"]["provider"]["workers"][0]["machine"];
            worker["architecture"] = json!(if rng.below(2) == 0 { "arm64" } else { "amd64" });
            if !arm.is_empty() && rng.below(2) == 0 {
                worker["type"] = json!(rng.pick(&arm));
            }
        }
    }
}

#[tokio::test]
async fn our_verdict_agrees_with_gardener_apiserver() {
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
    let shoots: Api<Shoot> = Api::namespaced(client.clone(), fixtures::PROJECT_NAMESPACE);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), fixtures::PROJECT_NAMESPACE);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let bases = corpus();
    let mut rng = Rng(0x6b69_6d2d_6b65_6221);
    let (mut admitted, mut admitted_accepted) = (0usize, 0usize);
    let (mut refused, mut refused_refused) = (0usize, 0usize);
    let mut other = 0usize;
    let mut disagreements: Vec<String> = Vec::new();
    for case in 0..CASES {
        let base = rng.pick(&bases);
        let provider = base.runtime["spec"]["shoot"]["provider"]["type"]
            .as_str()
            .unwrap()
            .to_owned();
        let p = landscape.iter().find(|p| p.provider == provider).unwrap();
        let mut value = base.runtime.clone();
        for _ in 0..=rng.below(3) {
            mutate(&mut rng, &mut value, p, &landscape);
        }
        let mut rt: Runtime = serde_json::from_value(value.clone()).unwrap();
        kim_shared::defaults::apply_defaults(&mut rt, &cfg);
        let kind: ProviderKind = provider.parse().unwrap();
        let (_, profile) = profiles.iter().find(|(n, _)| *n == provider).unwrap();
        let config_rules = validate_create_with(&rt, &cfg, &ValidationOptions::default());
        let profile_rules = validate_against_cloud_profile(
            &rt,
            None,
            &cfg,
            Profile {
                name: cfg.cloud_profile_name(kind),
                spec: &profile.spec,
            },
            jiff::Timestamp::now(),
        );
        if !config_rules.violations.is_empty() {
            // Refused for a reason of ours, not the CloudProfile's: Gardener has no say.
            other += 1;
            continue;
        }
        let Ok(converted) = kim_shared::convert::to_shoot(&rt, &cfg, None) else {
            other += 1;
            continue;
        };
        if let Some(cm) = &converted.structured_auth {
            let mut cm = cm.clone();
            cm.metadata.namespace = Some(fixtures::PROJECT_NAMESPACE.into());
            match cms.create(&PostParams::default(), &cm).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => panic!("structured-auth ConfigMap: {e}"),
            }
        }
        let gardener = shoots.create(&dry_run, &converted.shoot).await;
        let ours_admits = profile_rules.violations.is_empty();
        match (&gardener, ours_admits) {
            (Ok(_), true) => {
                admitted += 1;
                admitted_accepted += 1;
            }
            (Err(e), true) => {
                admitted += 1;
                disagreements.push(format!(
                    "case {case} ({}): we admit, Gardener refuses: {e}",
                    base.case
                ));
            }
            (Err(_), false) => {
                refused += 1;
                refused_refused += 1;
            }
            (Ok(_), false) => {
                refused += 1;
                disagreements.push(format!(
                    "case {case} ({}): we refuse ({:?}), Gardener accepts",
                    base.case, profile_rules.violations
                ));
            }
        }
    }
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
        "agreement over {CASES} generated Runtimes: admitted and accepted by Gardener {admitted_accepted}/{admitted} ({:.2}%), refused for a CloudProfile reason and refused by Gardener {refused_refused}/{refused} ({:.2}%), refused by the configuration's rules (not compared) {other}",
        rate(admitted_accepted, admitted),
        rate(refused_refused, refused)
    );
    for d in disagreements.iter().take(20) {
        println!("{d}");
    }
    assert!(admitted >= 500 && refused >= 500, "{admitted} admitted, {refused} refused: the generator must exercise both");
    assert!(
        disagreements.is_empty(),
        "{} disagreements with gardener-apiserver (first: {})",
        disagreements.len(),
        disagreements[0]
    );
}
