//! Defaulting of Runtimes from the KIM configuration: what the mutating webhook fills in.
//!
//! Pure and idempotent (running it twice changes nothing), and it never overrides a value the
//! Runtime sets: a default only fills a field that is missing (or, for the required string
//! fields, empty). Every default is listed in `docs/defaults.md`.
//!
//! Built in are only what upstream's converter fills in (Kubernetes version, machine image) and
//! the networking type Gardener cannot do without; everything else comes from
//! `kim.providers.<type>.defaults`, which the shipped configuration leaves empty because each
//! such default changes what KEB asked for (KEB leaves control-plane HA out of trial, free and
//! azure_lite on purpose).

use crate::api::{ProviderType, Runtime};
use crate::config::{KimConfig, ProviderConfig, ProviderDefaults, ProviderKind};
use crate::gardener::shoot::{FailureTolerance, HighAvailability};
use crate::gardener::{ControlPlane, ShootMachineImage, Volume, Worker};

/// The networking type when neither the Runtime nor `kim.providers.<type>.defaults.networking`
/// names one: what KEB always sets; Gardener requires a type for clusters with workers.
pub const DEFAULT_NETWORKING_TYPE: &str = "calico";

/// Fills the defaults of a new Runtime (admission CREATE).
///
/// On UPDATE use [`apply_update_defaults`]: defaults that did not exist when a Runtime was
/// created must not change its cluster later (a new volume rolls the nodes, a networking type
/// is immutable).
pub fn apply_defaults(rt: &mut Runtime, cfg: &KimConfig) {
    let provider = provider_of(rt, cfg);
    let defaults = provider.map(|p| &p.defaults);
    let shoot = &mut rt.spec.shoot;

    let kubernetes = shoot.kubernetes.get_or_insert_with(Default::default);
    if kubernetes.version.as_deref().is_none_or(str::is_empty) {
        kubernetes.version = Some(cfg.default_kubernetes_version().to_string());
    }

    let net = &mut shoot.networking;
    let net_defaults = defaults.and_then(|d| d.networking.as_ref());
    if net.type_.as_deref().is_none_or(str::is_empty) {
        let t = net_defaults
            .and_then(|n| n.type_.as_deref())
            .unwrap_or(DEFAULT_NETWORKING_TYPE);
        net.type_ = Some(t.to_owned());
    }
    if let Some(n) = net_defaults {
        for (value, default) in [
            (&mut net.nodes, n.nodes),
            (&mut net.pods, n.pods),
            (&mut net.services, n.services),
        ] {
            if let Some(default) = default
                && value.is_empty()
            {
                *value = default.to_string();
            }
        }
    }

    if let Some(cp) = defaults.and_then(|d| d.control_plane.as_ref()) {
        let control_plane = shoot
            .control_plane
            .get_or_insert_with(ControlPlane::default);
        if control_plane.high_availability.is_none() {
            control_plane.high_availability = Some(HighAvailability {
                failure_tolerance: FailureTolerance {
                    type_: cp
                        .high_availability
                        .failure_tolerance
                        .type_
                        .as_str()
                        .to_owned(),
                },
            });
        }
    }

    let kind = kind_of(shoot.provider.type_);
    let provider = &mut shoot.provider;
    let pools = provider
        .workers
        .iter_mut()
        .chain(provider.additional_workers.iter_mut().flatten());
    for w in pools {
        pool(w, cfg, kind, defaults);
    }
}

/// Fills the defaults of an updated Runtime (admission UPDATE), given the stored `old` one.
///
/// Defaults apply only to what the update adds: worker pools whose name `old` does not have get
/// the pool defaults of [`apply_defaults`]. A Kubernetes version the update drops is taken from
/// `old`, so that leaving it out never means a downgrade. Nothing else is filled in, so a
/// Runtime stored before a default existed keeps its cluster as it is.
pub fn apply_update_defaults(old: &Runtime, new: &mut Runtime, cfg: &KimConfig) {
    let provider = provider_of(new, cfg);
    let defaults = provider.map(|p| &p.defaults);
    let shoot = &mut new.spec.shoot;

    let old_version = old
        .spec
        .shoot
        .kubernetes
        .as_ref()
        .and_then(|k| k.version.as_deref())
        .filter(|v| !v.is_empty());
    if let Some(before) = old_version {
        let kubernetes = shoot.kubernetes.get_or_insert_with(Default::default);
        if kubernetes.version.as_deref().is_none_or(str::is_empty) {
            kubernetes.version = Some(before.to_owned());
        }
    }

    let old_provider = &old.spec.shoot.provider;
    let existed = |name: &str| {
        old_provider
            .workers
            .iter()
            .chain(old_provider.additional_workers.iter().flatten())
            .any(|w| w.name == name)
    };
    let kind = kind_of(shoot.provider.type_);
    let provider = &mut shoot.provider;
    let pools = provider
        .workers
        .iter_mut()
        .chain(provider.additional_workers.iter_mut().flatten());
    for w in pools.filter(|w| !existed(&w.name)) {
        pool(w, cfg, kind, defaults);
    }
}

fn provider_of<'c>(rt: &Runtime, cfg: &'c KimConfig) -> Option<&'c ProviderConfig> {
    cfg.provider(rt.spec.shoot.provider.type_.as_str())
}

fn kind_of(t: ProviderType) -> Option<ProviderKind> {
    t.as_str().parse().ok()
}

/// The defaults of one worker pool: machine image and (when configured) volume. The rolling
/// update (`maxSurge`, `maxUnavailable`) is left to Gardener, which defaults it to 1 and 0.
fn pool(
    w: &mut Worker,
    cfg: &KimConfig,
    kind: Option<ProviderKind>,
    defaults: Option<&ProviderDefaults>,
) {
    let default_image = || match kind {
        Some(k) => cfg.default_machine_image(k),
        None => crate::config::MachineImageRef {
            name: cfg.converter.machine_image.default_name.clone(),
            version: cfg.converter.machine_image.default_version.clone(),
        },
    };
    match &mut w.machine.image {
        None => {
            let d = default_image();
            w.machine.image = Some(ShootMachineImage {
                name: d.name,
                provider_config: None,
                version: Some(d.version),
            });
        }
        Some(image) => {
            let no_version = image.version.as_deref().is_none_or(str::is_empty);
            if image.name.is_empty() || no_version {
                let d = default_image();
                // The default version belongs to the default image: another image without a
                // version is left for Gardener, which picks that image's newest version.
                if no_version && (image.name.is_empty() || image.name == d.name) {
                    image.version = Some(d.version);
                }
                if image.name.is_empty() {
                    image.name = d.name;
                }
            }
        }
    }

    if let Some(v) = defaults.and_then(|d| d.volume.as_ref()) {
        match &mut w.volume {
            None => {
                w.volume = Some(Volume {
                    encrypted: None,
                    name: None,
                    size: v.size.to_string(),
                    type_: Some(v.type_.clone()),
                });
            }
            Some(volume) => {
                if volume.size.is_empty() {
                    volume.size = v.size.to_string();
                }
                if volume.type_.as_deref().is_none_or(str::is_empty) {
                    volume.type_ = Some(v.type_.clone());
                }
            }
        }
    }
}
