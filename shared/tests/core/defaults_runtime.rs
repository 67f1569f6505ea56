//! Defaulting: fills exactly the documented fields (`docs/defaults.md`), never overrides a value,
//! is idempotent, and on UPDATE touches only what the update adds.
#![allow(clippy::unwrap_used)]

use crate::validation_fixtures::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kim_shared::api::Runtime;
use kim_shared::config::KimConfig;
use kim_shared::defaults::{apply_defaults, apply_update_defaults};
use kim_shared::gardener::ShootMachineImage;
use serde_json::Value;

/// The sample with every field the built-in defaults fill left out.
fn bare() -> Runtime {
    runtime(|rt| {
        rt.spec.shoot.kubernetes.as_mut().unwrap().version = None;
        rt.spec.shoot.networking.type_ = None;
        let mut extra = rt.spec.shoot.provider.workers[0].clone();
        extra.name = "extra".into();
        extra.zones = Some(vec!["eu-central-1a".into()]);
        rt.spec.shoot.provider.additional_workers = Some(vec![extra]);
        for w in pools(rt) {
            w.machine.image = None;
        }
    })
}

/// [`bare`] without what an operator's provider defaults fill in as well.
fn bare_for_operator() -> Runtime {
    let mut rt = bare();
    rt.spec.shoot.networking.nodes = String::new();
    rt.spec.shoot.networking.pods = String::new();
    rt.spec.shoot.networking.services = String::new();
    rt.spec.shoot.control_plane = None;
    for w in pools(&mut rt) {
        w.volume = None;
        w.max_surge = None;
        w.max_unavailable = None;
    }
    rt
}

fn pools(rt: &mut Runtime) -> impl Iterator<Item = &mut kim_shared::gardener::Worker> {
    let provider = &mut rt.spec.shoot.provider;
    provider
        .workers
        .iter_mut()
        .chain(provider.additional_workers.iter_mut().flatten())
}

/// The shipped configuration plus every provider default an operator may add for aws.
fn operator_config() -> KimConfig {
    let mut cfg = shipped_config().clone();
    let aws = cfg
        .kim
        .providers
        .get_mut(&kim_shared::config::ProviderKind::Aws)
        .unwrap();
    aws.defaults = serde_json::from_value(serde_json::json!({
        "machineImage": {"name": "gardenlinux", "version": "1877.8.0"},
        "volume": {"type": "gp3", "size": "80Gi"},
        "networking": {
            "type": "calico",
            "pods": "10.96.0.0/13",
            "services": "10.104.0.0/13",
            "nodes": "10.250.0.0/16"
        },
        "controlPlane": {"highAvailability": {"failureTolerance": {"type": "zone"}}}
    }))
    .unwrap();
    cfg
}

fn defaulted(mut rt: Runtime) -> Runtime {
    apply_defaults(&mut rt, shipped_config());
    rt
}

/// Leaf paths (`a.b[*].c`) that differ between two JSON documents.
fn changed_leaves(before: &Value, after: &Value, path: &str, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                changed_leaves(a.get(k).unwrap_or(&Value::Null), v, &p, out);
            }
            for k in a.keys().filter(|k| !b.contains_key(*k)) {
                out.push(format!("{path}.{k} (removed)"));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (x, y) in a.iter().zip(b) {
                changed_leaves(x, y, &format!("{path}[*]"), out);
            }
        }
        (Value::Null, Value::Object(b)) => {
            for (k, v) in b {
                changed_leaves(&Value::Null, v, &format!("{path}.{k}"), out);
            }
        }
        (a, b) if a != b => out.push(path.to_owned()),
        _ => {}
    }
}

/// The fields of the table in the section of `docs/defaults.md` that starts with `from`
/// and ends at the next `## `.
fn documented_defaults(from: &str) -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/defaults.md"))
        .unwrap();
    let start = doc.find(from).expect("docs/defaults.md has the section");
    let rest = &doc[start + from.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    let mut fields = Vec::new();
    for line in rest[..end].lines().filter(|l| l.starts_with("| `")) {
        let field = line.split('`').nth(1).unwrap();
        match field.strip_prefix("workers[*].") {
            Some(rest) => {
                fields.push(format!("spec.shoot.provider.workers[*].{rest}"));
                fields.push(format!("spec.shoot.provider.additionalWorkers[*].{rest}"));
            }
            None => fields.push(field.to_owned()),
        }
    }
    assert!(fields.len() >= 4, "{fields:?}");
    fields
}

fn changes(before: &Runtime, after: &Runtime) -> Vec<String> {
    let mut out = Vec::new();
    changed_leaves(
        &serde_json::to_value(before).unwrap(),
        &serde_json::to_value(after).unwrap(),
        "",
        &mut out,
    );
    out
}

#[test]
fn a_bare_runtime_gets_exactly_the_documented_defaults() {
    let before = bare();
    let after = defaulted(before.clone());
    let mut changed = changes(&before, &after);
    let mut documented = documented_defaults("## On CREATE");
    changed.sort();
    documented.sort();
    assert_eq!(changed, documented);
    accepts(&after);
}

#[test]
fn the_shipped_configuration_adds_nothing_kim_leaves_out() {
    // KEB leaves control-plane HA, and anything else it does not write, out on purpose (trial,
    // free, azure_lite): the shipped defaults must not add them.
    let before = bare_for_operator();
    let after = defaulted(before.clone());
    assert!(after.spec.shoot.control_plane.is_none());
    assert_eq!(after.spec.shoot.networking.nodes, "");
    assert!(after.spec.shoot.provider.workers[0].volume.is_none());
    assert!(after.spec.shoot.provider.workers[0].max_surge.is_none());
    assert!(
        after.spec.shoot.provider.workers[0]
            .max_unavailable
            .is_none()
    );
    for name in [
        "runtime-trial.yaml",
        "runtime-aws.yaml",
        "runtime-openstack.yaml",
    ] {
        let rt = sample_runtime(name);
        assert_eq!(
            changes(&rt, &defaulted(rt.clone())),
            Vec::<String>::new(),
            "{name}"
        );
    }
}

#[test]
fn operator_defaults_fill_exactly_their_documented_fields() {
    let cfg = operator_config();
    let before = bare_for_operator();
    let mut after = before.clone();
    apply_defaults(&mut after, &cfg);
    let mut changed = changes(&before, &after);
    let mut documented = documented_defaults("## On CREATE");
    documented.extend(documented_defaults("## Defaults an operator may add"));
    changed.sort();
    documented.sort();
    assert_eq!(changed, documented);
    accepts(&after);
}

#[test]
fn default_values_come_from_the_configuration() {
    let rt = defaulted(bare());
    let shoot = &rt.spec.shoot;
    assert_eq!(
        shoot.kubernetes.as_ref().unwrap().version.as_deref(),
        Some("1.35")
    );
    assert_eq!(shoot.networking.type_.as_deref(), Some("calico"));
    let main = &shoot.provider.workers[0];
    let image = main.machine.image.as_ref().unwrap();
    assert_eq!(
        (image.name.as_str(), image.version.as_deref()),
        ("gardenlinux", Some("1877.8.0"))
    );

    let mut rt = bare_for_operator();
    apply_defaults(&mut rt, &operator_config());
    let shoot = &rt.spec.shoot;
    assert_eq!(
        [
            &shoot.networking.nodes,
            &shoot.networking.pods,
            &shoot.networking.services
        ],
        ["10.250.0.0/16", "10.96.0.0/13", "10.104.0.0/13"]
    );
    let cp = shoot
        .control_plane
        .as_ref()
        .unwrap()
        .high_availability
        .as_ref()
        .unwrap();
    assert_eq!(cp.failure_tolerance.type_, "zone");
    let volume = shoot.provider.workers[0].volume.as_ref().unwrap();
    assert_eq!(
        (volume.type_.as_deref(), volume.size.as_str()),
        (Some("gp3"), "80Gi")
    );
}

#[test]
fn a_complete_runtime_only_gets_the_networking_type() {
    // The sample sets everything (KEB writes the networking type too); without the type, that
    // is all the defaults add.
    let mut before = sample();
    assert_eq!(
        changes(&before, &defaulted(before.clone())),
        Vec::<String>::new()
    );
    before.spec.shoot.networking.type_ = None;
    assert_eq!(
        changes(&before, &defaulted(before.clone())),
        ["spec.shoot.networking.type"]
    );
}

#[test]
fn user_values_are_never_overridden() {
    let mut rt = sample();
    rt.spec.shoot.networking.type_ = Some("cilium".into());
    let w = main_pool(&mut rt);
    w.max_surge = Some(IntOrString::String("50%".into()));
    w.max_unavailable = Some(IntOrString::Int(1));
    w.volume.as_mut().unwrap().type_ = Some("gp2".into());
    assert_eq!(defaulted(rt.clone()), rt);
}

#[test]
fn defaulting_is_idempotent() {
    let once = defaulted(bare());
    assert_eq!(defaulted(once.clone()), once);
    let sample_once = defaulted(sample());
    assert_eq!(defaulted(sample_once.clone()), sample_once);
}

#[test]
fn partial_images_and_volumes_are_completed() {
    let mut rt = sample();
    let size = main_pool(&mut rt).volume.as_ref().unwrap().size.clone();
    let w = main_pool(&mut rt);
    w.machine.image = Some(ShootMachineImage {
        name: String::new(),
        provider_config: None,
        version: None,
    });
    w.volume.as_mut().unwrap().type_ = None;
    apply_defaults(&mut rt, &operator_config());
    let w = &rt.spec.shoot.provider.workers[0];
    let image = w.machine.image.as_ref().unwrap();
    assert_eq!(
        (image.name.as_str(), image.version.as_deref()),
        ("gardenlinux", Some("1877.8.0"))
    );
    assert_eq!(w.volume.as_ref().unwrap().type_.as_deref(), Some("gp3"));
    assert_eq!(
        w.volume.as_ref().unwrap().size,
        size,
        "the sample's size stays"
    );
}

#[test]
fn another_image_without_version_is_left_to_gardener() {
    let mut rt = sample();
    main_pool(&mut rt).machine.image = Some(ShootMachineImage {
        name: "ubuntu".into(),
        provider_config: None,
        version: None,
    });
    let rt = defaulted(rt);
    assert_eq!(
        rt.spec.shoot.provider.workers[0]
            .machine
            .image
            .as_ref()
            .unwrap()
            .version,
        None
    );
}

/// The main pool's image after [`defaulted`], with `image` set on it before.
fn defaulted_image(image: ShootMachineImage) -> (String, Option<String>) {
    let mut rt = sample();
    main_pool(&mut rt).machine.image = Some(image);
    let rt = defaulted(rt);
    let image = rt.spec.shoot.provider.workers[0]
        .machine
        .image
        .clone()
        .unwrap();
    (image.name, image.version)
}

#[test]
fn an_image_with_only_a_name_or_only_a_version_is_completed() {
    let named = defaulted_image(ShootMachineImage {
        name: "gardenlinux".into(),
        provider_config: None,
        version: None,
    });
    assert_eq!(
        named,
        ("gardenlinux".into(), Some("1877.8.0".into())),
        "the default image without a version gets the default version"
    );
    let versioned = defaulted_image(ShootMachineImage {
        name: String::new(),
        provider_config: None,
        version: Some("1592.2.0".into()),
    });
    assert_eq!(
        versioned,
        ("gardenlinux".into(), Some("1592.2.0".into())),
        "a version without a name gets the default name and keeps its version"
    );
}

#[test]
fn the_provider_machine_image_wins_over_the_converter_one() {
    // The shipped provider default names the same image as `converter.machineImage`: give it
    // another version so that the two can be told apart.
    let mut cfg = operator_config();
    let aws = cfg
        .kim
        .providers
        .get_mut(&kim_shared::config::ProviderKind::Aws)
        .unwrap();
    aws.defaults.machine_image = Some(kim_shared::config::MachineImageRef {
        name: "gardenlinux".into(),
        version: "1592.2.0".into(),
    });
    let mut rt = bare_for_operator();
    apply_defaults(&mut rt, &cfg);
    for w in pools(&mut rt) {
        let image = w.machine.image.as_ref().unwrap();
        assert_eq!(
            (image.name.as_str(), image.version.as_deref()),
            ("gardenlinux", Some("1592.2.0")),
            "{}",
            w.name
        );
    }
    assert_eq!(
        cfg.converter.machine_image.default_version, "1877.8.0",
        "the converter default differs"
    );
}

#[test]
fn a_provider_without_defaults_gets_only_the_global_ones() {
    let mut cfg = shipped_config().clone();
    cfg.kim.providers.clear();
    let mut rt = bare_for_operator();
    apply_defaults(&mut rt, &cfg);
    assert_eq!(rt.spec.shoot.networking.type_.as_deref(), Some("calico"));
    assert_eq!(rt.spec.shoot.networking.nodes, "", "no provider default");
    assert!(rt.spec.shoot.control_plane.is_none());
    let w = &rt.spec.shoot.provider.workers[0];
    assert!(w.volume.is_none());
    assert_eq!(
        w.machine.image.as_ref().unwrap().version.as_deref(),
        Some("1877.8.0"),
        "converter.machineImage"
    );
}

#[test]
fn on_update_only_new_pools_get_defaults_and_the_version_is_kept() {
    let cfg = operator_config();
    let old = runtime(|rt| {
        let w = main_pool(rt);
        w.volume = None;
        w.max_surge = None;
    });
    let mut new = old.clone();
    new.spec.shoot.kubernetes.as_mut().unwrap().version = None;
    new.spec.shoot.networking.type_ = None;
    let mut pool = new.spec.shoot.provider.workers[0].clone();
    pool.name = "new-pool".into();
    pool.machine.image = None;
    new.spec.shoot.provider.additional_workers = Some(vec![pool]);

    apply_update_defaults(&old, &mut new, &cfg);
    assert_eq!(
        new.spec
            .shoot
            .kubernetes
            .as_ref()
            .unwrap()
            .version
            .as_deref(),
        old.spec
            .shoot
            .kubernetes
            .as_ref()
            .unwrap()
            .version
            .as_deref(),
        "the stored version"
    );
    assert_eq!(
        new.spec.shoot.networking.type_, None,
        "a legacy cluster keeps what it has"
    );
    let main = &new.spec.shoot.provider.workers[0];
    assert!(
        main.volume.is_none() && main.max_surge.is_none(),
        "an existing pool is left as it is"
    );
    let added = &new.spec.shoot.provider.additional_workers.as_ref().unwrap()[0];
    assert_eq!(added.volume.as_ref().unwrap().size, "80Gi");
    assert!(
        added.max_surge.is_none(),
        "the rolling update is Gardener's"
    );
    assert_eq!(added.machine.image.as_ref().unwrap().name, "gardenlinux");

    let again = new.clone();
    apply_update_defaults(&old, &mut new, &cfg);
    assert_eq!(new, again, "idempotent");
}
