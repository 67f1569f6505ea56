//! Rules from the Gardener CloudProfile of the Runtime's provider: what gardener-apiserver's
//! ShootValidator admission checks against the profile, applied to the Runtime before it is
//! stored. Region, zones, machine type (usable, offered in every zone of the pool, matching
//! architecture), machine image and version (offered, active, architecture, container
//! runtime), volume type (usable, offered in every zone) and size, the Kubernetes
//! versions of the cluster and of its pools (offered, active; `1.36` resolves as Gardener
//! resolves it), and the access restrictions of the region.
//!
//! As in Gardener, on UPDATE only what changed is checked against the profile: a cluster whose
//! version or machine type the profile has since dropped may still change other fields.

use super::workers::pools;
use super::{Item, ValidationOutcome};
use crate::api::Runtime;
use crate::config::{KimConfig, ProviderKind, parse_image_version};
use crate::convert::access_restriction_names;
use crate::gardener::Worker;
use crate::gardener::cloud_profile::{
    AvailabilityZone, CloudProfileSpec, ExpirableVersion, LifecycleStage, MachineImage,
    MachineImageVersion, Region,
};

/// The architecture Gardener assumes when a pool or machine type names none.
const DEFAULT_ARCH: &str = "amd64";

/// The CloudProfile a Runtime is checked against.
#[derive(Clone, Copy, Debug)]
pub struct Profile<'a> {
    /// Its name (for messages).
    pub name: &'a str,
    /// Its spec.
    pub spec: &'a CloudProfileSpec,
}

/// Checks `rt` (on UPDATE `old` is the stored Runtime) against `profile` at time `now`.
/// Values the Runtime leaves out are taken as the defaults of `cfg` would fill them in.
pub fn validate_against_cloud_profile(
    rt: &Runtime,
    old: Option<&Runtime>,
    cfg: &KimConfig,
    profile: Profile<'_>,
    now: jiff::Timestamp,
) -> ValidationOutcome {
    let mut f = ValidationOutcome::default();
    let shoot = &rt.spec.shoot;
    let spec = profile.spec;
    let provider_type = shoot.provider.type_.as_str();
    if spec.type_ != provider_type {
        f.violation(
            "spec.shoot.provider.type",
            format!(
                "{provider_type:?} does not match CloudProfile {} of type {:?}",
                profile.name, spec.type_
            ),
        );
        return f;
    }
    let c = Check {
        rt,
        old,
        cfg,
        profile,
        now,
    };
    let region = c.region(&mut f);
    if let Some(region) = region {
        c.access_restrictions(region, &mut f);
    }
    c.kubernetes_version(&mut f);
    for (at, w) in pools(rt) {
        let before = old.and_then(|o| pools(o).map(|(_, w)| w).find(|o| o.name == w.name));
        if let Some(region) = region {
            c.zones(at, w, before, region, &mut f);
        }
        c.pool_kubernetes_version(at, w, before, &mut f);
        c.machine_type(at, w, before, region, &mut f);
        c.machine_image(at, w, before, &mut f);
        c.volume(at, w, before, region, &mut f);
    }
    f
}

struct Check<'a> {
    rt: &'a Runtime,
    old: Option<&'a Runtime>,
    cfg: &'a KimConfig,
    profile: Profile<'a>,
    now: jiff::Timestamp,
}

impl<'a> Check<'a> {
    fn spec(&self) -> &'a CloudProfileSpec {
        self.profile.spec
    }

    /// The profile's region of the Runtime, or a violation naming what it offers.
    fn region(&self, f: &mut ValidationOutcome) -> Option<&'a Region> {
        let name = self.rt.spec.shoot.region.as_str();
        let found = self.spec().regions.iter().find(|r| r.name == name);
        let unchanged = self.old.is_some_and(|o| o.spec.shoot.region == name);
        if found.is_none() && !unchanged {
            let offered = self.spec().regions.iter().map(|r| r.name.as_str());
            f.violation(
                "spec.shoot.region",
                format!(
                    "{name:?} is not a region of CloudProfile {}; use one of {}",
                    self.profile.name,
                    super::shortened(offered)
                ),
            );
        }
        found
    }

    /// The access restrictions the Shoot gets from the platform region (`eu-access-only` for
    /// the EU ones) must be offered by its region; as in Gardener, checked when they change.
    fn access_restrictions(&self, region: &Region, f: &mut ValidationOutcome) {
        let platform_region = self.rt.spec.shoot.platform_region.as_str();
        let wanted = access_restriction_names(platform_region);
        if self
            .old
            .is_some_and(|o| access_restriction_names(&o.spec.shoot.platform_region) == wanted)
        {
            return;
        }
        let offers = |r: &Region, name: &str| {
            r.access_restrictions
                .iter()
                .flatten()
                .any(|a| a.name == name)
        };
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|name| !offers(region, name))
            .collect();
        if missing.is_empty() {
            return;
        }
        let fitting = self
            .spec()
            .regions
            .iter()
            .filter(|r| wanted.iter().all(|name| offers(r, name)))
            .map(|r| r.name.as_str());
        f.violation(
            "spec.shoot.region",
            format!(
                "region {} of CloudProfile {} does not offer the access restriction {}, which platform region {platform_region} requires; use one of {}",
                region.name,
                self.profile.name,
                missing.join(", "),
                super::shortened(fitting)
            ),
        );
    }

    fn kubernetes_version(&self, f: &mut ValidationOutcome) {
        let wanted = effective_kubernetes_version(self.rt, self.cfg);
        if self
            .old
            .is_some_and(|o| effective_kubernetes_version(o, self.cfg) == wanted)
        {
            return;
        }
        self.check_kubernetes(
            "spec.shoot.kubernetes.version",
            &wanted,
            self.old.is_none(),
            f,
        );
    }

    /// A pool's own Kubernetes version, checked as Gardener checks it: when it differs from
    /// the pool's old one (or, for a pool without one, the cluster's old version); expired
    /// versions only for pools that exist already.
    fn pool_kubernetes_version(
        &self,
        at: Item,
        w: &Worker,
        before: Option<&Worker>,
        f: &mut ValidationOutcome,
    ) {
        let version_of = |w: &Worker| w.kubernetes.as_ref().and_then(|k| k.version.clone());
        let Some(wanted) = version_of(w).filter(|v| !v.is_empty()) else {
            return;
        };
        let old = before
            .and_then(version_of)
            .or_else(|| self.old.map(|o| effective_kubernetes_version(o, self.cfg)));
        if old.as_deref() == Some(wanted.as_str()) {
            return;
        }
        let strict = self.old.is_none() || before.is_none();
        let field = at.field("kubernetes.version");
        self.check_kubernetes(&field, &wanted, strict, f);
        self.pool_version_skew(&field, &wanted, f);
    }

    /// Gardener's rule that a pool's version is not higher than the control plane's, on the
    /// versions it resolves: with `X.Y` on either side (resolved to the newest supported patch)
    /// only the profile can tell; with both `X.Y.Z` the pool rule of `workers` decides alone.
    fn pool_version_skew(&self, field: &str, wanted: &str, f: &mut ValidationOutcome) {
        let control_plane = effective_kubernetes_version(self.rt, self.cfg);
        let full = |v: &str| version_parts(v).is_some_and(|p| p.len() == 3);
        if full(wanted) && full(&control_plane) {
            return;
        }
        let (Some(pool), Some(cp)) = (
            self.resolve_kubernetes(wanted),
            self.resolve_kubernetes(&control_plane),
        ) else {
            return; // Unknown versions are reported by the version rules.
        };
        if pool > cp {
            f.violation(
                field,
                format!(
                    "{wanted} resolves to {pool} in CloudProfile {}, higher than the control plane's version {cp} (spec.shoot.kubernetes.version {control_plane}); use {cp} or lower",
                    self.profile.name
                ),
            );
        }
    }

    /// The version Gardener runs for `wanted`: `X.Y.Z` itself, `X.Y` the newest patch
    /// classified supported now; `None` when there is none or it does not parse.
    fn resolve_kubernetes(&self, wanted: &str) -> Option<semver::Version> {
        let parts = version_parts(wanted)?;
        if parts.len() == 3 {
            return semver::Version::parse(wanted).ok();
        }
        self.spec()
            .kubernetes
            .versions
            .iter()
            .filter(|v| self.kubernetes_class(v) == SUPPORTED)
            .filter_map(|v| semver::Version::parse(&v.version).ok())
            .filter(|v| v.major == parts[0] && parts.get(1).is_none_or(|m| v.minor == *m))
            .max()
    }

    /// `wanted` (`X.Y` or `X.Y.Z`) against the profile's versions; `strict` (a new cluster or
    /// pool) refuses versions that are not active (expired or not yet available).
    fn check_kubernetes(&self, field: &str, wanted: &str, strict: bool, f: &mut ValidationOutcome) {
        let versions = &self.spec().kubernetes.versions;
        let Some(parts) = version_parts(wanted) else {
            return; // The syntax rule reports it.
        };
        if parts.len() < 3 {
            // Gardener resolves `1.36` to the newest patch classified `supported` now.
            if self.resolve_kubernetes(wanted).is_none() {
                f.violation(
                    field,
                    format!(
                        "{wanted} has no supported patch version in CloudProfile {} (only versions classified supported are chosen for a minor version, not preview, deprecated or expired ones); use one of {}",
                        self.profile.name,
                        self.offered_kubernetes(strict)
                    ),
                );
            }
            return;
        }
        let listed = versions.iter().find(|v| v.version == wanted);
        match listed.map(|v| self.kubernetes_class(v)) {
            Some(class) if !strict || active(class) => {}
            Some(class) => f.violation(
                field,
                format!(
                    "{wanted} {} in CloudProfile {}; use one of {}",
                    inactive_reason(class),
                    self.profile.name,
                    self.offered_kubernetes(strict)
                ),
            ),
            None => f.violation(
                field,
                format!(
                    "{wanted} is not offered by CloudProfile {}; use one of {}",
                    self.profile.name,
                    self.offered_kubernetes(strict)
                ),
            ),
        }
    }

    fn offered_kubernetes(&self, creating: bool) -> String {
        let mut versions: Vec<&ExpirableVersion> = self
            .spec()
            .kubernetes
            .versions
            .iter()
            .filter(|v| !creating || active(self.kubernetes_class(v)))
            .collect();
        versions.sort_by_key(|v| std::cmp::Reverse(semver::Version::parse(&v.version).ok()));
        super::shortened(versions.iter().map(|v| {
            if self.kubernetes_class(v) == PREVIEW {
                format!("{} (preview)", v.version)
            } else {
                v.version.clone()
            }
        }))
    }

    fn zones(
        &self,
        at: Item,
        w: &Worker,
        before: Option<&Worker>,
        region: &Region,
        f: &mut ValidationOutcome,
    ) {
        let unchanged = self
            .old
            .is_some_and(|o| o.spec.shoot.region == self.rt.spec.shoot.region)
            && before.is_some_and(|b| b.zones == w.zones);
        if unchanged {
            return;
        }
        let offered = region.zones.as_deref().unwrap_or_default();
        for (j, zone) in w.zones.iter().flatten().enumerate() {
            if offered.iter().any(|z| &z.name == zone) {
                continue;
            }
            let why = if offered.is_empty() {
                format!(
                    "region {} of CloudProfile {} has no zones; leave them out",
                    region.name, self.profile.name
                )
            } else {
                format!(
                    "{zone:?} is not a zone of region {} in CloudProfile {}; use one of {}",
                    region.name,
                    self.profile.name,
                    super::shortened(offered.iter().map(|z| z.name.as_str()))
                )
            };
            f.violation(at.field(&format!("zones[{j}]")), why);
        }
    }

    fn machine_type(
        &self,
        at: Item,
        w: &Worker,
        before: Option<&Worker>,
        region: Option<&Region>,
        f: &mut ValidationOutcome,
    ) {
        let m = &w.machine;
        if m.type_.is_empty()
            || before.is_some_and(|b| {
                b.machine.type_ == m.type_ && b.machine.architecture == m.architecture
            })
        {
            return;
        }
        let arch = arch_of(w, self.spec());
        let zones = pool_zones(w, region);
        let types = &self.spec().machine_types;
        let fits = |t: &crate::gardener::cloud_profile::MachineType| {
            t.usable != Some(false)
                && t.architecture.as_deref().unwrap_or(DEFAULT_ARCH) == arch
                && zones
                    .iter()
                    .all(|z| !listed(z.unavailable_machine_types.as_deref(), &t.name))
        };
        let offered =
            || super::shortened(types.iter().filter(|t| fits(t)).map(|t| t.name.as_str()));
        let Some(t) = types.iter().find(|t| t.name == m.type_) else {
            f.violation(
                at.field("machine.type"),
                format!(
                    "{:?} is not a machine type of CloudProfile {}; use one of {}",
                    m.type_,
                    self.profile.name,
                    offered()
                ),
            );
            return;
        };
        let mut why = Vec::new();
        if t.usable == Some(false) {
            why.push("is not usable".to_owned());
        }
        let t_arch = t.architecture.as_deref().unwrap_or(DEFAULT_ARCH);
        if t_arch != arch {
            // Only a pool that names its architecture can differ from its machine type's.
            why.push(format!("is {t_arch}, but machine.architecture is {arch}"));
        }
        let missing: Vec<&str> = zones
            .iter()
            .filter(|z| listed(z.unavailable_machine_types.as_deref(), &t.name))
            .map(|z| z.name.as_str())
            .collect();
        if !missing.is_empty() {
            why.push(format!("is unavailable in zone {}", missing.join(", ")));
        }
        if !why.is_empty() {
            f.violation(
                at.field("machine.type"),
                format!(
                    "{} {} in CloudProfile {}; use one of {}",
                    m.type_,
                    why.join(" and "),
                    self.profile.name,
                    offered()
                ),
            );
        }
    }

    fn machine_image(
        &self,
        at: Item,
        w: &Worker,
        before: Option<&Worker>,
        f: &mut ValidationOutcome,
    ) {
        let (name, version) = self.effective_image(w);
        if let Some(b) = before {
            let (old_name, old_version) = self.effective_image(b);
            if (old_name.as_str(), old_version.as_deref()) == (name.as_str(), version.as_deref())
                && b.machine.architecture == w.machine.architecture
            {
                // Only the container runtime changed (KEB's gVisor switch): the image is the
                // pool's, which may have left the CloudProfile since Gardener moved the live
                // pool to a newer version (the patch keeps that one). Its CRI support is
                // checked while the profile still lists it; Gardener checks the live one.
                let listed = self
                    .spec()
                    .machine_images
                    .iter()
                    .find(|i| i.name == name)
                    .and_then(|i| {
                        i.versions
                            .iter()
                            .find(|v| Some(v.version.as_str()) == version.as_deref())
                    });
                if b.cri != w.cri
                    && let Some(v) = listed
                {
                    self.container_runtime(at, w, &name, v, f);
                }
                return;
            }
        }
        let arch = arch_of(w, self.spec());
        let images = &self.spec().machine_images;
        let Some(image) = images.iter().find(|i| i.name == name) else {
            f.violation(
                at.field("machine.image.name"),
                format!(
                    "{name:?} is not a machine image of CloudProfile {}; use one of {}",
                    self.profile.name,
                    super::shortened(images.iter().map(|i| i.name.as_str()))
                ),
            );
            return;
        };
        let old_version = before.and_then(|b| self.effective_image(b).1);
        if version.is_none() && before.is_some_and(|b| self.effective_image(b).0 == name) {
            return; // Gardener keeps the pool's image.
        }
        let old_version = old_version.as_deref();
        let usable = |v: &MachineImageVersion| {
            supports_arch(v, arch) && !self.image_inactive(v, old_version)
        };
        let offered = || {
            let vs = self.usable_versions(image, arch, old_version);
            super::shortened(vs.iter().map(|v| v.version.as_str()))
        };
        let Some(version) = version else {
            // Gardener picks the newest version for the architecture that is not preview,
            // preferring ones that are not deprecated, and then checks it like a named one.
            let candidates: Vec<&MachineImageVersion> = image
                .versions
                .iter()
                .filter(|v| supports_arch(v, arch) && self.image_class(v) != PREVIEW)
                .collect();
            let newest_of = |deprecated_too: bool| {
                candidates
                    .iter()
                    .copied()
                    .filter(|v| deprecated_too || self.image_class(v) != DEPRECATED)
                    .max_by_key(|v| parse_image_version(&v.version))
            };
            let chosen = newest_of(false).or_else(|| newest_of(true));
            match chosen {
                None => f.violation(
                    at.field("machine.image.version"),
                    format!(
                        "CloudProfile {} has no version of {name} for {arch} to choose; name one of {}",
                        self.profile.name,
                        offered()
                    ),
                ),
                Some(v) if !usable(v) => f.violation(
                    at.field("machine.image.version"),
                    format!(
                        "Gardener would choose {name} {}, which {} in CloudProfile {}; name one of {}",
                        v.version,
                        inactive_reason(self.image_class(v)),
                        self.profile.name,
                        offered()
                    ),
                ),
                Some(v) => self.kubelet_supported(at, w, image, v, old_version, f),
            }
            return;
        };
        let Some(v) = image.versions.iter().find(|v| v.version == version) else {
            f.violation(
                at.field("machine.image.version"),
                format!(
                    "{name} {version} is not offered by CloudProfile {}; use one of {}",
                    self.profile.name,
                    offered()
                ),
            );
            return;
        };
        let mut why = Vec::new();
        if self.image_inactive(v, old_version) {
            why.push(inactive_reason(self.image_class(v)).to_owned());
        }
        if !supports_arch(v, arch) {
            let from = match &w.machine.architecture {
                Some(_) => "machine.architecture".to_owned(),
                None => format!("the architecture of {}", w.machine.type_),
            };
            why.push(format!("does not run on {arch} ({from})"));
        }
        if !why.is_empty() {
            f.violation(
                at.field("machine.image.version"),
                format!(
                    "{name} {version} {} in CloudProfile {}; use one of {}",
                    why.join(" and "),
                    self.profile.name,
                    offered()
                ),
            );
            return;
        }
        self.kubelet_supported(at, w, image, v, old_version, f);
        self.container_runtime(at, w, &name, v, f);
    }

    /// The versions of `image` a pool of `arch` may use (see [`Self::image_inactive`]), newest
    /// first.
    fn usable_versions<'v>(
        &self,
        image: &'v MachineImage,
        arch: &str,
        old_version: Option<&str>,
    ) -> Vec<&'v MachineImageVersion> {
        let mut vs: Vec<&MachineImageVersion> = image
            .versions
            .iter()
            .filter(|v| supports_arch(v, arch) && !self.image_inactive(v, old_version))
            .collect();
        vs.sort_by_key(|v| std::cmp::Reverse(parse_image_version(&v.version)));
        vs
    }

    /// Gardener's `kubeletVersionConstraint` of an image version, against the pool's kubelet:
    /// its own Kubernetes version, else the control plane's, as Gardener resolves them. A
    /// version or constraint that does not resolve here is left to Gardener.
    fn kubelet_supported(
        &self,
        at: Item,
        w: &Worker,
        image: &MachineImage,
        v: &MachineImageVersion,
        old_version: Option<&str>,
        f: &mut ValidationOutcome,
    ) {
        let Some(constraint) = v.kubelet_version_constraint.as_deref() else {
            return;
        };
        let own = w
            .kubernetes
            .as_ref()
            .and_then(|k| k.version.clone())
            .filter(|v| !v.is_empty());
        let source = match (&own, super::runtime::explicit_version(self.rt)) {
            (Some(_), _) => "the pool's kubernetes.version",
            (None, Some(_)) => "spec.shoot.kubernetes.version",
            (None, None) => "the default Kubernetes version",
        };
        let wanted = own.unwrap_or_else(|| effective_kubernetes_version(self.rt, self.cfg));
        let Some(kubelet) = self.resolve_kubernetes(&wanted) else {
            return;
        };
        if kubelet_constraint::admits(constraint, &kubelet) != Some(false) {
            return;
        }
        let name = &image.name;
        let fitting: Vec<&str> = self
            .usable_versions(image, arch_of(w, self.spec()), old_version)
            .into_iter()
            .filter(|c| {
                c.kubelet_version_constraint
                    .as_deref()
                    .is_none_or(|k| kubelet_constraint::admits(k, &kubelet) == Some(true))
            })
            .map(|c| c.version.as_str())
            .collect();
        let advice = if fitting.is_empty() {
            format!("no {name} version runs it: use a Kubernetes version {constraint:?} admits")
        } else {
            format!("use one of {}", super::shortened(fitting.iter()))
        };
        f.violation(
            at.field("machine.image.version"),
            format!(
                "{name} {} supports kubelet versions {constraint:?} in CloudProfile {}, not {kubelet} ({source} {wanted}); {advice}",
                v.version,
                self.profile.name,
            ),
        );
    }

    fn container_runtime(
        &self,
        at: Item,
        w: &Worker,
        image: &str,
        v: &MachineImageVersion,
        f: &mut ValidationOutcome,
    ) {
        let Some(cri) = &w.cri else { return };
        // Gardener's CloudProfile defaulting gives a version without a CRI list containerd.
        let offered = v.cri.clone().unwrap_or_else(|| {
            vec![crate::gardener::cloud_profile::CloudProfileCri {
                name: "containerd".into(),
                container_runtimes: None,
            }]
        });
        let Some(found) = offered.iter().find(|c| c.name == cri.name) else {
            f.violation(
                at.field("cri.name"),
                format!(
                    "{image} {} does not support CRI {:?} in CloudProfile {}; use one of {}",
                    v.version,
                    cri.name,
                    self.profile.name,
                    super::shortened(offered.iter().map(|c| c.name.as_str()))
                ),
            );
            return;
        };
        let runtimes = found.container_runtimes.as_deref().unwrap_or_default();
        for (j, r) in cri.container_runtimes.iter().flatten().enumerate() {
            if !runtimes.iter().any(|o| o.type_ == r.type_) {
                f.violation(
                    at.field(&format!("cri.containerRuntimes[{j}].type")),
                    format!(
                        "{image} {} offers no container runtime {:?} in CloudProfile {}; offered: {}",
                        v.version,
                        r.type_,
                        self.profile.name,
                        if runtimes.is_empty() {
                            "none".to_owned()
                        } else {
                            super::shortened(runtimes.iter().map(|o| o.type_.as_str()))
                        }
                    ),
                );
            }
        }
    }

    fn volume(
        &self,
        at: Item,
        w: &Worker,
        before: Option<&Worker>,
        region: Option<&Region>,
        f: &mut ValidationOutcome,
    ) {
        let Some(volume) = &w.volume else { return };
        let Some(type_) = volume.type_.as_deref().filter(|t| !t.is_empty()) else {
            return;
        };
        let types = self.spec().volume_types.as_deref().unwrap_or_default();
        let zones = pool_zones(w, region);
        let unchanged = before
            .and_then(|b| b.volume.as_ref())
            .is_some_and(|b| b.type_.as_deref() == Some(type_));
        if !unchanged {
            let fits = |t: &crate::gardener::cloud_profile::VolumeType| {
                t.usable != Some(false)
                    && zones
                        .iter()
                        .all(|z| !listed(z.unavailable_volume_types.as_deref(), &t.name))
            };
            let offered =
                || super::shortened(types.iter().filter(|t| fits(t)).map(|t| t.name.as_str()));
            match types.iter().find(|t| t.name == type_) {
                None => {
                    f.violation(
                        at.field("volume.type"),
                        format!(
                            "{type_:?} is not a volume type of CloudProfile {}; use one of {}",
                            self.profile.name,
                            offered()
                        ),
                    );
                    return;
                }
                Some(t) if !fits(t) => {
                    let why = if t.usable == Some(false) {
                        "is not usable".to_owned()
                    } else {
                        "is unavailable in a zone of the pool".to_owned()
                    };
                    f.violation(
                        at.field("volume.type"),
                        format!(
                            "{type_} {why} in CloudProfile {}; use one of {}",
                            self.profile.name,
                            offered()
                        ),
                    );
                    return;
                }
                Some(_) => {}
            }
        }
        // A stored pool keeps its size when Gardener raises a minimum: the rule holds what an
        // update chooses. Gardener refuses any change of such a Shoot, but not every Runtime
        // change changes the Shoot, so that is left to it (docs/validation.md).
        if before.is_some_and(|b| {
            b.machine.type_ == w.machine.type_ && b.volume.as_ref() == Some(volume)
        }) {
            return;
        }
        let Some(size) = bytes(&volume.size) else {
            return; // The syntax rule reports it.
        };
        // A machine type's own storage minimum overrides the volume type's.
        let machine_min = self
            .spec()
            .machine_types
            .iter()
            .filter(|t| t.name == w.machine.type_)
            .filter_map(|t| t.storage.as_ref())
            .filter(|s| s.type_.as_deref() == Some(type_))
            .find_map(|s| s.min_size.as_ref());
        let type_min = types
            .iter()
            .find(|t| t.name == type_)
            .and_then(|t| t.min_size.as_ref());
        for min in [machine_min, type_min].into_iter().flatten() {
            let text = min.as_text();
            if bytes(&text).is_some_and(|m| size < m) {
                f.violation(
                    at.field("volume.size"),
                    format!(
                        "{} is below the minimum of {type_} in CloudProfile {}; use at least {text}",
                        volume.size, self.profile.name
                    ),
                );
                return;
            }
        }
    }

    /// The image a pool gets: its own, or the configured default (whose version only goes
    /// with the default image).
    fn effective_image(&self, w: &Worker) -> (String, Option<String>) {
        let kind = self
            .rt
            .spec
            .shoot
            .provider
            .type_
            .as_str()
            .parse::<ProviderKind>()
            .ok();
        let default = kind.map(|k| self.cfg.default_machine_image(k));
        let default_name = default.as_ref().map_or(
            self.cfg.converter.machine_image.default_name.as_str(),
            |d| d.name.as_str(),
        );
        let default_version = default.as_ref().map_or(
            self.cfg.converter.machine_image.default_version.as_str(),
            |d| d.version.as_str(),
        );
        let image = w.machine.image.as_ref();
        let name = image
            .map(|i| i.name.as_str())
            .filter(|n| !n.is_empty())
            .unwrap_or(default_name)
            .to_owned();
        let version = image
            .and_then(|i| i.version.as_deref())
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .or_else(|| (name == default_name).then(|| default_version.to_owned()));
        (name, version)
    }

    fn kubernetes_class(&self, v: &'a ExpirableVersion) -> &'a str {
        classification_at(
            v.classification.as_deref(),
            v.expiration_date.as_deref(),
            v.lifecycle.as_deref(),
            self.now,
        )
    }

    fn image_class<'v>(&self, v: &'v MachineImageVersion) -> &'v str {
        classification_at(
            v.classification.as_deref(),
            v.expiration_date.as_deref(),
            v.lifecycle.as_deref(),
            self.now,
        )
    }

    /// Whether an image version may not be used: it is not active, except that an existing
    /// pool may move up from its `old` version to an expired one (Gardener's maintenance
    /// force-updates). A new pool or a new cluster has no old version, so it never may.
    fn image_inactive(&self, v: &MachineImageVersion, old: Option<&str>) -> bool {
        let class = self.image_class(v);
        if active(class) {
            return false;
        }
        if class != EXPIRED {
            return true;
        }
        match (
            parse_image_version(&v.version),
            old.and_then(parse_image_version),
        ) {
            (Some(v), Some(old)) => v < old,
            _ => true,
        }
    }
}

const PREVIEW: &str = "preview";
const SUPPORTED: &str = "supported";
const DEPRECATED: &str = "deprecated";
const EXPIRED: &str = "expired";
const UNAVAILABLE: &str = "unavailable";

/// A version's classification at `now`, as Gardener derives it: with a `lifecycle`, the last
/// stage that has started (none: unavailable); else `classification` (default supported) until
/// `expirationDate`, expired from then on.
fn classification_at<'v>(
    classification: Option<&'v str>,
    expiration: Option<&'v str>,
    lifecycle: Option<&'v [LifecycleStage]>,
    now: jiff::Timestamp,
) -> &'v str {
    let started = |start: Option<&str>| {
        start.is_none_or(|t| t.parse::<jiff::Timestamp>().is_ok_and(|t| t < now))
    };
    match lifecycle.filter(|l| !l.is_empty()) {
        Some(stages) => stages
            .iter()
            .rfind(|s| started(s.start_time.as_deref()))
            .map_or(UNAVAILABLE, |s| s.classification.as_str()),
        None if expiration.is_some_and(|d| started(Some(d))) => EXPIRED,
        None => classification.unwrap_or(SUPPORTED),
    }
}

/// Gardener lets new clusters and pools use only active versions.
fn active(class: &str) -> bool {
    class != EXPIRED && class != UNAVAILABLE
}

fn inactive_reason(class: &str) -> &'static str {
    if class == EXPIRED {
        "has expired"
    } else {
        "is not available yet"
    }
}

/// The Kubernetes version the cluster asks for: the Runtime's, else the configured default.
fn effective_kubernetes_version(rt: &Runtime, cfg: &KimConfig) -> String {
    super::runtime::explicit_version(rt)
        .map(str::to_owned)
        .unwrap_or_else(|| cfg.default_kubernetes_version().to_string())
}

/// `1.36.3` -> [1, 36, 3], `1.36` -> [1, 36]; `None` when it is not such a version.
fn version_parts(v: &str) -> Option<Vec<u64>> {
    let parts: Option<Vec<u64>> = v.split('.').map(|p| p.parse().ok()).collect();
    parts.filter(|p| (1..=3).contains(&p.len()))
}

/// The pool's architecture: its own, else (as Gardener defaults it) its machine type's, else
/// amd64.
fn arch_of<'w>(w: &'w Worker, spec: &'w CloudProfileSpec) -> &'w str {
    w.machine.architecture.as_deref().unwrap_or_else(|| {
        spec.machine_types
            .iter()
            .find(|t| t.name == w.machine.type_)
            .and_then(|t| t.architecture.as_deref())
            .unwrap_or(DEFAULT_ARCH)
    })
}

fn supports_arch(v: &MachineImageVersion, arch: &str) -> bool {
    match &v.architectures {
        Some(archs) if !archs.is_empty() => archs.iter().any(|a| a == arch),
        // Gardener's defaulting gives a version without architectures amd64.
        _ => arch == DEFAULT_ARCH,
    }
}

/// The profile's zones the pool uses (those it names that exist).
fn pool_zones<'r>(w: &Worker, region: Option<&'r Region>) -> Vec<&'r AvailabilityZone> {
    let Some(region) = region else {
        return Vec::new();
    };
    let names = w.zones.as_deref().unwrap_or_default();
    region
        .zones
        .iter()
        .flatten()
        .filter(|z| names.contains(&z.name))
        .collect()
}

fn listed(list: Option<&[String]>, name: &str) -> bool {
    list.is_some_and(|l| l.iter().any(|n| n == name))
}

/// A Kubernetes quantity in bytes (the binary and decimal suffixes volume sizes use).
fn bytes(q: &str) -> Option<u128> {
    let split = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (digits, suffix) = q.split_at(split);
    let n: u128 = digits.parse().ok()?;
    let factor: u128 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        _ => return None,
    };
    n.checked_mul(factor)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_lists() {
        assert_eq!(bytes("20Gi"), Some(20 << 30));
        assert_eq!(bytes("1Ti"), Some(1 << 40));
        assert_eq!(bytes("50G"), Some(50_000_000_000));
        assert_eq!(bytes("x"), None);
        for (q, n) in [
            ("7", 7),
            ("7Ki", 7 << 10),
            ("7Mi", 7 << 20),
            ("7Ti", 7 << 40),
            ("7Pi", 7 << 50),
            ("7k", 7_000),
            ("7M", 7_000_000),
            ("7T", 7_000_000_000_000),
            ("7P", 7_000_000_000_000_000),
        ] {
            assert_eq!(bytes(q), Some(n), "{q}");
        }
        assert_eq!(crate::validation::shortened(["a", "b"].into_iter()), "a, b");
        let eight: Vec<String> = (0..8).map(|i| i.to_string()).collect();
        assert_eq!(
            crate::validation::shortened(eight.iter()),
            "0, 1, 2, 3, 4, 5, 6, 7"
        );
        let many: Vec<String> = (0..11).map(|i| i.to_string()).collect();
        assert_eq!(
            crate::validation::shortened(many.iter()),
            "0, 1, 2, 3, 4, 5, 6, 7 and 3 more"
        );
        assert_eq!(version_parts("1.36"), Some(vec![1, 36]));
        assert_eq!(version_parts("1.36.x"), None);
    }

    #[test]
    fn classifications_follow_gardener() {
        let now: jiff::Timestamp = "2027-01-01T00:00:00Z".parse().unwrap();
        let past = Some("2026-01-01T00:00:00Z");
        let future = Some("2028-01-01T00:00:00Z");
        assert_eq!(classification_at(None, None, None, now), SUPPORTED);
        assert_eq!(
            classification_at(Some(DEPRECATED), future, None, now),
            DEPRECATED
        );
        assert_eq!(
            classification_at(Some(DEPRECATED), past, None, now),
            EXPIRED
        );
        assert_eq!(classification_at(Some(PREVIEW), None, None, now), PREVIEW);
        let stage = |c: &str, t: Option<&str>| LifecycleStage {
            classification: c.to_owned(),
            start_time: t.map(str::to_owned),
        };
        // The lifecycle replaces the legacy fields.
        let lifecycle = [stage(SUPPORTED, past), stage(DEPRECATED, future)];
        assert_eq!(
            classification_at(Some(PREVIEW), past, Some(&lifecycle), now),
            SUPPORTED
        );
        // As Gardener's `Before(now)`: a stage or an expiration at `now` has not begun.
        let at_now = [stage(PREVIEW, Some("2027-01-01T00:00:00Z"))];
        assert_eq!(
            classification_at(None, None, Some(&at_now), now),
            UNAVAILABLE
        );
        assert_eq!(
            classification_at(None, Some("2027-01-01T00:00:00Z"), None, now),
            SUPPORTED
        );
        let later = [stage(PREVIEW, future)];
        assert_eq!(
            classification_at(None, None, Some(&later), now),
            UNAVAILABLE
        );
        assert!(!active(UNAVAILABLE) && !active(EXPIRED) && active(DEPRECATED));
    }
}

/// Gardener's `kubeletVersionConstraint`s, in the syntax of the Masterminds semver library
/// Gardener reads them with: alternatives joined by `||`, each a list of comparisons joined
/// by commas or spaces (`>= 1.30, < 1.36`); `=`, `!=`, `<`, `<=`, `>`, `>=` (also `=<`, `=>`),
/// `~`, `~>` and `^`, with partial versions and wildcards. Each comparison is evaluated by the
/// `semver` crate, whose operators mean the same for release versions (a bare version is
/// Masterminds' `=`, not the crate's `^`).
mod kubelet_constraint {
    use semver::{Version, VersionReq};

    /// Whether `version` meets `constraint`; `None` when the constraint does not read here
    /// (a hyphen range, say), so that Gardener decides.
    pub(super) fn admits(constraint: &str, version: &Version) -> Option<bool> {
        let mut any = false;
        for alternative in constraint.split("||") {
            let comparisons = comparisons(alternative)?;
            if comparisons.is_empty() {
                return None;
            }
            let mut all = true;
            for (op, v) in comparisons {
                let matches = match op {
                    "!=" => !VersionReq::parse(&format!("={v}")).ok()?.matches(version),
                    _ => VersionReq::parse(&format!("{op}{v}"))
                        .ok()?
                        .matches(version),
                };
                all &= matches;
            }
            any |= all;
        }
        Some(any)
    }

    fn comparisons(alternative: &str) -> Option<Vec<(&'static str, &str)>> {
        let separator = |c: char| c == ',' || c.is_whitespace();
        let mut out = Vec::new();
        let mut rest = alternative.trim_start_matches(separator);
        while !rest.is_empty() {
            let op_end = rest
                .find(|c: char| !"=!<>~^".contains(c))
                .unwrap_or(rest.len());
            let op = match &rest[..op_end] {
                "" | "=" => "=",
                "!=" => "!=",
                ">" => ">",
                "<" => "<",
                ">=" | "=>" => ">=",
                "<=" | "=<" => "<=",
                "~" | "~>" => "~",
                "^" => "^",
                _ => return None,
            };
            rest = rest[op_end..].trim_start();
            let end = rest.find(separator).unwrap_or(rest.len());
            let version = rest[..end].trim_start_matches('v');
            if version.is_empty()
                || !version.starts_with(|c: char| c.is_ascii_digit() || "xX*".contains(c))
            {
                return None;
            }
            out.push((op, version));
            rest = rest[end..].trim_start_matches(separator);
        }
        Some(out)
    }

    #[cfg(test)]
    #[allow(clippy::unwrap_used)]
    mod tests {
        use super::*;

        #[test]
        fn gardeners_constraint_syntax_is_read_as_masterminds_reads_it() {
            let v = |s: &str| Version::parse(s).unwrap();
            for (constraint, version, expected) in [
                (">= 1.30", "1.35.4", Some(true)),
                ("< 1.35", "1.35.0", Some(false)),
                ("< 1.35", "1.34.9", Some(true)),
                (">= 1.30, < 1.35", "1.35.4", Some(false)),
                (">= 1.30 < 1.36", "1.35.4", Some(true)),
                (">=1.30,<1.33 || >= 1.35", "1.34.1", Some(false)),
                (">=1.30,<1.33 || >= 1.35", "1.36.3", Some(true)),
                ("> 1.34", "1.34.9", Some(false)),
                ("> 1.34", "1.35.0", Some(true)),
                ("<= 1.34", "1.34.9", Some(true)),
                ("=< 1.34", "1.35.0", Some(false)),
                ("1.34", "1.34.2", Some(true)),
                ("1.34", "1.35.0", Some(false)),
                ("1.34.x", "1.34.2", Some(true)),
                ("!= 1.34.2", "1.34.2", Some(false)),
                ("~1.34", "1.34.7", Some(true)),
                ("^1.30", "1.36.3", Some(true)),
                ("1.30 - 1.36", "1.35.4", None),
                ("", "1.35.4", None),
                (">= banana", "1.35.4", None),
            ] {
                assert_eq!(
                    admits(constraint, &v(version)),
                    expected,
                    "{constraint:?} for {version}"
                );
            }
        }
    }
}
