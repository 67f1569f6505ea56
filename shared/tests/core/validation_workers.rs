//! CREATE rules on worker pools: names, the main pool, machine, image, volumes, scaling,
//! rolling update, zones and the zone subnet layout.
#![allow(clippy::unwrap_used)]

use crate::validation_fixtures::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kim_shared::api::Runtime;
use kim_shared::gardener::Worker;
use kim_shared::gardener::worker::{DataVolume, WorkerKubernetes, WorkerSystemComponents};

const POOL: &str = "spec.shoot.provider.workers[0]";

fn field(key: &str) -> String {
    format!("{POOL}.{key}")
}

/// The sample with one additional pool, changed by `edit`.
fn with_extra_pool(edit: impl FnOnce(&mut Worker)) -> Runtime {
    runtime(|rt| {
        let mut extra = rt.spec.shoot.provider.workers[0].clone();
        extra.name = "extra".into();
        edit(&mut extra);
        rt.spec.shoot.provider.additional_workers = Some(vec![extra]);
    })
}

#[test]
fn pool_names_are_dns_labels_of_at_most_15_characters() {
    for bad in ["", "Worker", "worker_0", "-w", "w-", "a-very-long-pool"] {
        rejects(
            &runtime(|rt| main_pool(rt).name = bad.into()),
            &field("name"),
        );
    }
    accepts(&runtime(|rt| main_pool(rt).name = "a".repeat(15)));
}

#[test]
fn pool_names_are_unique_across_workers_and_additional_workers() {
    let rt = with_extra_pool(|w| w.name = "cpu-worker-0".into());
    rejects_with(
        &rt,
        "spec.shoot.provider.additionalWorkers[0].name",
        "spec.shoot.provider.workers[0]",
    );
    accepts(&with_extra_pool(|_| {}));
}

#[test]
fn exactly_one_main_pool() {
    rejects_with(
        &runtime(|rt| rt.spec.shoot.provider.workers.clear()),
        "spec.shoot.provider.workers",
        "found 0",
    );
    let two = runtime(|rt| {
        let mut second = rt.spec.shoot.provider.workers[0].clone();
        second.name = "second".into();
        rt.spec.shoot.provider.workers.push(second);
    });
    rejects_with(&two, "spec.shoot.provider.workers", "additionalWorkers");
}

#[test]
fn machine_type_must_be_configured_for_the_provider() {
    rejects_with(
        &runtime(|rt| main_pool(rt).machine.type_ = "n2-standard-4".into()),
        &field("machine.type"),
        "m6i.large",
    );
    rejects_with(
        &runtime(|rt| main_pool(rt).machine.type_ = String::new()),
        &field("machine.type"),
        "must name a machine type of aws, e.g. m6i.large",
    );
    accepts(&runtime(|rt| {
        main_pool(rt).machine.type_ = "g6.xlarge".into()
    }));
}

#[test]
fn machine_architecture_matches_the_machine_type() {
    rejects(
        &runtime(|rt| main_pool(rt).machine.architecture = Some("arm64".into())),
        &field("machine.architecture"),
    );
    rejects(
        &runtime(|rt| main_pool(rt).machine.architecture = Some("x86".into())),
        &field("machine.architecture"),
    );
    accepts(&runtime(|rt| {
        main_pool(rt).machine.architecture = Some("amd64".into())
    }));
}

#[test]
fn machine_image_must_be_configured_for_the_provider() {
    let image = |name: &str, version: Option<&str>| {
        runtime(|rt| {
            let i = main_pool(rt).machine.image.as_mut().unwrap();
            i.name = name.into();
            i.version = version.map(Into::into);
        })
    };
    accepts(&image("gardenlinux", Some("1877.8.0")));
    accepts(&image("gardenlinux", None));
    rejects_with(
        &image("ubuntu", Some("22.4.0")),
        &field("machine.image.name"),
        "gardenlinux",
    );
    rejects_with(
        &image("gardenlinux", Some("1877.9.0")),
        &field("machine.image.version"),
        "1877.8.0",
    );
    rejects_with(
        &image("gardenlinux", Some("latest")),
        &field("machine.image.version"),
        "not a machine image version",
    );
}

#[test]
fn volume_type_and_size_must_be_configured() {
    accepts(&with_volume("gp3", "1024Gi"));
    accepts(&with_volume("gp3", "20Gi"));
    rejects_with(
        &with_volume("gp3", "19Gi"),
        &field("volume.size"),
        "19Gi is outside the sizes of volume type gp3; use 20Gi to 1024Gi",
    );
    rejects_with(
        &with_volume("io2", "50Gi"),
        &field("volume.type"),
        "gp2, gp3",
    );
    rejects_with(
        &with_volume("gp3", "10Gi"),
        &field("volume.size"),
        "20Gi to 1024Gi",
    );
    rejects_with(
        &with_volume("gp3", "2000Gi"),
        &field("volume.size"),
        "20Gi to 1024Gi",
    );
    for bad in ["50", "50GB", "0Gi", "", "1.5Gi"] {
        rejects_with(&with_volume("gp3", bad), &field("volume.size"), "80Gi");
    }
}

#[test]
fn data_volumes_are_named_uniquely_and_referenced_correctly() {
    let data = |name: &str| DataVolume {
        encrypted: None,
        name: name.into(),
        size: "50Gi".into(),
        type_: Some("gp3".into()),
    };
    let rt = runtime(|w| {
        let w = main_pool(w);
        w.data_volumes = Some(vec![data("data"), data("data")]);
    });
    rejects_with(&rt, &field("dataVolumes[1].name"), "twice");
    // Volume names are DNS labels of at most 15 characters.
    for name in ["data-0", "abcdefghijklmno"] {
        accepts(&runtime(|w| {
            main_pool(w).data_volumes = Some(vec![data(name)])
        }));
    }
    for name in ["Data_0", "abcdefghijklmnop"] {
        rejects_with(
            &runtime(|w| main_pool(w).data_volumes = Some(vec![data(name)])),
            &field("dataVolumes[0].name"),
            "is not a valid volume name; use at most 15 lower-case letters, digits and '-'",
        );
    }
    let rt = runtime(|w| main_pool(w).data_volumes = Some(vec![data("")]));
    rejects_with(
        &rt,
        &field("dataVolumes[0].name"),
        "must name the data volume, e.g. data-0",
    );
    let rt = runtime(|w| {
        let w = main_pool(w);
        w.data_volumes = Some(vec![data("data")]);
        w.kubelet_data_volume_name = Some("kubelet".into());
    });
    rejects(&rt, &field("kubeletDataVolumeName"));
    let rt = runtime(|w| {
        let w = main_pool(w);
        w.data_volumes = Some(vec![data("data")]);
        w.kubelet_data_volume_name = Some("data".into());
    });
    accepts(&rt);
}

#[test]
fn minimum_is_at_most_maximum() {
    let rt = runtime(|rt| {
        main_pool(rt).minimum = 5;
        main_pool(rt).maximum = 4;
    });
    rejects_with(&rt, &field("maximum"), "below minimum 5");
    rejects(&runtime(|rt| main_pool(rt).minimum = -1), &field("minimum"));
}

#[test]
fn scaling_stays_within_the_configured_bounds() {
    rejects_with(
        &runtime(|rt| main_pool(rt).maximum = 301),
        &field("maximum"),
        "at most 300",
    );
    accepts(&runtime(|rt| main_pool(rt).maximum = 300));
    // A minimum above the bound is the one fault: raising maximum to it would break the bound.
    let v = rejects(
        &runtime(|rt| {
            main_pool(rt).minimum = 400;
            main_pool(rt).maximum = 300;
        }),
        &field("minimum"),
    );
    assert_eq!(
        v.message,
        "400 is above the upper bound kim.providers.aws.workerScaling.maximum; use at most 300"
    );
}

#[test]
fn a_pool_running_system_components_has_a_node_per_zone() {
    let rt = runtime(|rt| {
        main_pool(rt).minimum = 1;
        main_pool(rt).maximum = 2;
    });
    rejects_with(&rt, &field("maximum"), "number of zones (3)");
}

#[test]
fn some_pool_must_allow_system_components() {
    let rt = runtime(|rt| {
        main_pool(rt).system_components = Some(WorkerSystemComponents { allow: false })
    });
    rejects_with(&rt, &field("maximum"), "system components");
    // A pool that may run them but has no nodes does not count.
    let empty = runtime(|rt| {
        main_pool(rt).minimum = 0;
        main_pool(rt).maximum = 0;
    });
    let v = rejects(&empty, &field("maximum"));
    assert_eq!(
        v.message,
        "at least one pool must allow system components (systemComponents.allow, default true) and have a maximum above 0"
    );
}

#[test]
fn max_surge_and_max_unavailable_are_non_negative_and_not_both_zero() {
    let rolling = |surge: Option<IntOrString>, unavailable: Option<IntOrString>| {
        runtime(|rt| {
            main_pool(rt).max_surge = surge;
            main_pool(rt).max_unavailable = unavailable;
        })
    };
    use IntOrString::{Int, String as Str};
    rejects_with(
        &rolling(Some(Int(0)), Some(Int(0))),
        &field("maxSurge"),
        "number of zones (3)",
    );
    rejects(&rolling(Some(Str("0%".into())), None), &field("maxSurge"));
    // Gardener takes text only as a percentage.
    rejects_with(
        &rolling(Some(Str("3".into())), None),
        &field("maxSurge"),
        "write it as a number (3)",
    );
    rejects(&rolling(Some(Int(-1)), Some(Int(0))), &field("maxSurge"));
    rejects(
        &rolling(Some(Int(1)), Some(Str("one".into()))),
        &field("maxUnavailable"),
    );
    rejects(
        &rolling(Some(Int(1)), Some(Str("150%".into()))),
        &field("maxUnavailable"),
    );
    accepts(&rolling(Some(Int(0)), Some(Str("25%".into()))));
    accepts(&rolling(Some(Int(1)), Some(Str("100%".into()))));
    rejects_with(
        &rolling(Some(Int(1)), Some(Str("101%".into()))),
        &field("maxUnavailable"),
        "101% is above 100%; use at most 100%",
    );
    accepts(&rolling(None, None));
}

#[test]
fn pool_kubernetes_version_is_at_most_the_cluster_version_and_three_minors_behind() {
    let pool_version = |v: &str| {
        runtime(|rt| {
            main_pool(rt).kubernetes = Some(Box::new(WorkerKubernetes {
                kubelet: None,
                version: Some(v.into()),
            }))
        })
    };
    accepts(&pool_version("1.34.4"));
    // Three minors older than the cluster's 1.35 is the oldest admitted.
    accepts(&pool_version("1.32.0"));
    rejects_with(
        &pool_version("1.36.3"),
        &field("kubernetes.version"),
        "newer",
    );
    rejects_with(
        &pool_version("1.31.0"),
        &field("kubernetes.version"),
        "three minor",
    );
    rejects(&pool_version("one"), &field("kubernetes.version"));
}

#[test]
fn cri_and_update_strategy_are_gardeners_values() {
    let rt = runtime(|rt| {
        main_pool(rt).cri = Some(kim_shared::gardener::worker::Cri {
            container_runtimes: None,
            name: "docker".into(),
        })
    });
    rejects(&rt, &field("cri.name"));
    rejects(
        &runtime(|rt| main_pool(rt).update_strategy = Some("Recreate".into())),
        &field("updateStrategy"),
    );
    accepts(&runtime(|rt| {
        main_pool(rt).update_strategy = Some("AutoRollingUpdate".into())
    }));
    for in_place in ["AutoInPlaceUpdate", "ManualInPlaceUpdate"] {
        rejects(
            &runtime(|rt| main_pool(rt).update_strategy = Some(in_place.into())),
            &field("updateStrategy"),
        );
    }
}

#[test]
fn worker_provider_config_is_replaced_with_imdsv2_on_aws() {
    let rt = runtime(|rt| {
        main_pool(rt).provider_config = Some(serde_json::json!({"kind": "WorkerConfig"}).into())
    });
    let f = accepts(&rt);
    assert!(
        f.warnings
            .iter()
            .any(|w| w.starts_with(&field("providerConfig"))),
        "{:?}",
        f.warnings
    );
}

fn zones(list: &[&str]) -> Runtime {
    runtime(|rt| {
        let w = main_pool(rt);
        w.zones = Some(list.iter().map(|z| (*z).to_owned()).collect());
        w.max_surge = Some(IntOrString::Int(1));
        w.minimum = 1;
    })
}

#[test]
fn zones_are_not_empty() {
    rejects_with(&zones(&[]), &field("zones"), "eu-central-1a");
    rejects(&runtime(|rt| main_pool(rt).zones = None), &field("zones"));
}

#[test]
fn only_a_stored_azure_lite_pool_may_stay_without_zones() {
    let mut old = sample();
    old.spec.shoot.provider.workers[0].zones = Some(vec![]);
    let mut new = old.clone();
    new.spec.shoot.provider.workers[0].maximum = 12;
    rejects_update(&old, &new, &field("zones"));
    let mut azure = sample_runtime("runtime-azure.yaml");
    let zoned = azure.clone();
    azure.spec.shoot.provider.workers[0].zones = Some(vec![]);
    rejects(&azure, &field("zones"));
    // An Azure pool that had zones cannot drop them all.
    let f = kim_shared::validation::validate_update(&zoned, &azure, config());
    assert!(
        f.violations
            .iter()
            .any(|v| v.field == field("zones")
                && v.message.starts_with("must list at least one zone")),
        "{:?}",
        f.violations
    );
}

#[test]
fn the_zones_must_fit_the_providers_zone_layout() {
    let gdch = |zones: &[&str]| {
        runtime(|rt| {
            rt.spec.shoot.provider.type_ = kim_shared::api::ProviderType::Gdch;
            main_pool(rt).zones = Some(zones.iter().map(|z| (*z).to_owned()).collect());
        })
    };
    let on = |field: &'static str| {
        move |rt: &Runtime| {
            kim_shared::validation::validate_create(rt, shipped_config())
                .violations
                .into_iter()
                .filter(|v| v.field == field)
                .map(|v| v.message)
                .collect::<Vec<_>>()
        }
    };
    let nodes = on("spec.shoot.networking.nodes");
    // Too many zones: the pools are at fault, not the network.
    let four = gdch(&[
        "eu-central-1a",
        "eu-central-1b",
        "eu-central-1c",
        "eu-central-1d",
    ]);
    assert_eq!(nodes(&four), Vec::<String>::new());
    assert_eq!(
        on("spec.shoot.provider.workers")(&four),
        ["the pools use 4 distinct zones; a gdch cluster uses 1 to 3"]
    );
    assert_eq!(
        nodes(&gdch(&["eu-central-1a", "eu-central-1b", "eu-central-1c"])),
        Vec::<String>::new()
    );
    // A GDCH nodes network larger than /16 (KEB sets no lower bound, upstream splits any that
    // fits the zones).
    let mut wide = gdch(&["eu-central-1a", "eu-central-1b", "eu-central-1c"]);
    wide.spec.shoot.networking.nodes = "172.16.0.0/12".into();
    assert_eq!(nodes(&wide), Vec::<String>::new());
}

#[test]
fn zones_are_unique_in_a_pool() {
    rejects_with(
        &zones(&["eu-central-1a", "eu-central-1a"]),
        &field("zones[1]"),
        "twice",
    );
}

#[test]
fn zones_belong_to_the_region() {
    rejects_with(
        &zones(&["eu-central-1a", "eu-west-1b"]),
        &field("zones[1]"),
        "eu-central-1c",
    );
    accepts(&zones(&["eu-central-1c"]));
}

#[test]
fn zones_follow_the_provider_naming_rule_without_a_configured_region_list() {
    let mut cfg = config().clone();
    for p in cfg.kim.providers.values_mut() {
        p.regions = None;
    }
    let check = |list: &[&str]| kim_shared::validation::validate_create(&zones(list), &cfg);
    allowed(check(&["eu-central-1a", "eu-central-1d"]));
    denied(check(&["eu-central-1-a"]), &field("zones[0]"));
    denied(check(&["eu-central-1ab"]), &field("zones[0]"));
    denied(check(&["us-east-1a"]), &field("zones[0]"));

    let mut gcp = sample_runtime("runtime-gcp.yaml");
    allowed(kim_shared::validation::validate_create(&gcp, &cfg));
    gcp.spec.shoot.provider.workers[0].zones = Some(vec!["us-central1a".into()]);
    denied(
        kim_shared::validation::validate_create(&gcp, &cfg),
        "spec.shoot.provider.workers[0].zones[0]",
    );

    let mut azure = sample_runtime("runtime-azure.yaml");
    allowed(kim_shared::validation::validate_create(&azure, &cfg));
    azure.spec.shoot.provider.workers[0].zones = Some(vec!["1".into(), "2".into(), "9".into()]);
    denied(
        kim_shared::validation::validate_create(&azure, &cfg),
        "spec.shoot.provider.workers[0].zones[2]",
    );
    // Only the plain digits the conversion's Azure layout understands.
    for zone in ["+1", "01", " 1"] {
        azure.spec.shoot.provider.workers[0].zones = Some(vec!["1".into(), zone.into()]);
        denied(
            kim_shared::validation::validate_create(&azure, &cfg),
            "spec.shoot.provider.workers[0].zones[1]",
        );
    }
}

#[test]
fn at_most_eight_zones_over_all_pools() {
    let mut cfg = config().clone();
    cfg.kim
        .providers
        .values_mut()
        .for_each(|p| p.regions = None);
    let rt = runtime(|rt| {
        let letters = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        let all: Vec<String> = letters.iter().map(|l| format!("eu-central-1{l}")).collect();
        let w = main_pool(rt);
        w.zones = Some(all[..5].to_vec());
        w.maximum = 20;
        let mut extra = w.clone();
        extra.name = "extra".into();
        extra.zones = Some(all[4..].to_vec());
        rt.spec.shoot.provider.additional_workers = Some(vec![extra]);
    });
    let v = denied(
        kim_shared::validation::validate_create(&rt, &cfg),
        "spec.shoot.provider.workers",
    );
    assert!(v.message.contains("9 distinct zones"), "{v}");
}

#[test]
fn zone_subnets_fit_the_nodes_network() {
    // Upstream's AWS layout fits up to 8 zones into any nodes prefix from /16 to /24, so only
    // the prefix can make it fail; the layout itself is exercised by the conversion's tests.
    let mut cfg = config().clone();
    cfg.kim
        .providers
        .values_mut()
        .for_each(|p| p.regions = None);
    let rt = runtime(|rt| {
        rt.spec.shoot.networking.nodes = "10.250.0.0/24".into();
        let w = main_pool(rt);
        w.zones = Some(
            ["a", "b", "c", "d", "e", "f", "g", "h"]
                .iter()
                .map(|l| format!("eu-central-1{l}"))
                .collect(),
        );
        w.maximum = 20;
    });
    allowed(kim_shared::validation::validate_create(&rt, &cfg));
}

#[test]
fn max_parallel_image_pulls_is_positive_and_not_serialized() {
    let with = |n: i32, serialize: Option<bool>| {
        runtime(|rt| {
            let kubelet = main_pool(rt)
                .kubernetes
                .get_or_insert_with(Default::default)
                .kubelet
                .get_or_insert_with(Default::default);
            kubelet.max_parallel_image_pulls = Some(n);
            kubelet.serialize_image_pulls = serialize;
        })
    };
    accepts(&with(5, None));
    accepts(&with(1, None));
    accepts(&with(5, Some(false)));
    rejects_with(
        &with(0, None),
        "spec.shoot.provider.workers[0].kubernetes.kubelet.maxParallelImagePulls",
        "not a positive number",
    );
    rejects_with(
        &with(3, Some(true)),
        "spec.shoot.provider.workers[0].kubernetes.kubelet.maxParallelImagePulls",
        "serializeImagePulls",
    );
    // One pull at a time is what serialized pulls mean: Gardener and the kubelet take it.
    accepts(&with(1, Some(true)));
}

#[test]
fn preserved_failed_machines_leave_one_machine_for_system_components() {
    let preserving = |pool: &mut kim_shared::gardener::Worker, maximum: i32, preserved: i32| {
        pool.maximum = maximum;
        pool.machine_controller_manager = Some(
            serde_json::from_value(serde_json::json!({"autoPreserveFailedMachineMax": preserved}))
                .unwrap(),
        );
    };
    let with =
        |maximum: i32, preserved: i32| runtime(|rt| preserving(main_pool(rt), maximum, preserved));
    let field =
        "spec.shoot.provider.workers[0].machineControllerManager.autoPreserveFailedMachineMax";
    accepts(&with(5, 4));
    accepts(&with(5, 0));
    rejects_with(&with(5, 5), field, "use at most 4");
    rejects_with(&with(5, -1), field, "negative");
    // A pool without system components may preserve all of its machines, no more.
    let without_system_components = |preserved: i32| {
        runtime(|rt| {
            let mut extra = main_pool(rt).clone();
            extra.name = "extra".into();
            extra.system_components =
                Some(serde_json::from_value(serde_json::json!({"allow": false})).unwrap());
            preserving(&mut extra, 5, preserved);
            rt.spec.shoot.provider.additional_workers = Some(vec![extra]);
        })
    };
    accepts(&without_system_components(5));
    rejects_with(
        &without_system_components(6),
        "spec.shoot.provider.additionalWorkers[0].machineControllerManager.autoPreserveFailedMachineMax",
        "use at most 5",
    );
}

#[test]
fn a_worker_control_plane_is_refused_as_gardener_refuses_it_for_project_shoots() {
    let with = |cp: serde_json::Value| {
        runtime(|rt| {
            main_pool(rt).control_plane = Some(serde_json::from_value(cp).unwrap());
        })
    };
    for cp in [
        serde_json::json!({}),
        serde_json::json!({"backup": {"provider": "aws", "region": "eu-central-1"}}),
        serde_json::json!({"exposure": {"extension": {"type": "aws"}}}),
    ] {
        rejects_with(
            &with(cp),
            "spec.shoot.provider.workers[0].controlPlane",
            "self-hosted",
        );
    }
}

#[test]
fn node_labels_and_taints_follow_kubernetes_rules() {
    let taint = |key: &str, effect: &str| k8s_openapi::api::core::v1::Taint {
        key: key.into(),
        effect: effect.into(),
        ..Default::default()
    };
    accepts(&runtime(|rt| {
        let w = main_pool(rt);
        w.labels = Some([("example.com/gpu".to_owned(), "true".to_owned())].into());
        w.taints = Some(vec![taint("nvidia.com/gpu", "NoSchedule")]);
    }));
    let rt = with_extra_pool(|w| {
        w.labels = Some([("bad key".to_owned(), "v".to_owned())].into());
        w.taints = Some(vec![taint("dedicated", "NoWhere")]);
    });
    let f = kim_shared::validation::validate_create(&rt, config());
    let fields: Vec<&str> = f.violations.iter().map(|v| v.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.shoot.provider.additionalWorkers[0].labels[bad key]",
            "spec.shoot.provider.additionalWorkers[0].taints[0].effect",
        ],
        "{:?}",
        f.violations
    );
    assert!(
        f.violations[1]
            .message
            .contains("use one of NoSchedule, PreferNoSchedule, NoExecute"),
        "{:?}",
        f.violations
    );
}
