//! Where the Shoot may run and which cloud profile it uses: seed selector, cloud profile,
//! exposure class, access restrictions and tolerations.

use super::Input;
use crate::api::ProviderType;
use crate::config::ProviderKind;
use crate::gardener::Shoot;
use crate::gardener::shoot::{AccessRestrictionWithOptions, CloudProfileReference, SeedSelector};
use crate::names::SEED_LABEL_REGION;
use std::collections::BTreeMap;

/// Platform regions whose clusters must stay in the EU: upstream PR 758 (`cf-eu11`,
/// `cf-ch20`) plus the regions later upstream added.
const EU_ACCESS_PLATFORM_REGIONS: [&str; 5] =
    ["cf-eu11", "cf-ch20", "cf-eu01", "cf-eu02", "cf-eu31"];
/// Name of Gardener's EU access restriction.
const EU_ACCESS_RESTRICTION: &str = "eu-access-only";
/// Exposure class of every SAP Converged Cloud (openstack) Shoot.
const OPENSTACK_EXPOSURE_CLASS: &str = "converged-cloud-internet";

/// The provider kind of the KIM configuration for a Runtime provider type.
pub(super) fn kind(t: ProviderType) -> ProviderKind {
    match t {
        ProviderType::Aws => ProviderKind::Aws,
        ProviderType::Azure => ProviderKind::Azure,
        ProviderType::Gcp => ProviderKind::Gcp,
        ProviderType::Openstack => ProviderKind::Openstack,
        ProviderType::Alicloud => ProviderKind::Alicloud,
        ProviderType::Gdch => ProviderKind::Gdch,
    }
}

/// With `enforceSeedLocation`, only seeds of the Shoot's own region may host its control plane.
pub(super) fn seed_selector(input: &Input<'_>, shoot: &mut Shoot) {
    let s = input.shoot();
    if s.enforce_seed_location == Some(true) && !s.region.is_empty() {
        shoot.spec.seed_selector = Some(SeedSelector {
            match_labels: Some(BTreeMap::from([(
                SEED_LABEL_REGION.to_owned(),
                s.region.clone(),
            )])),
            ..Default::default()
        });
    }
}

/// `cloudProfile{kind: CloudProfile, name}`; upstream's `cloudProfileName` is forbidden from
/// Kubernetes 1.34. The name is upstream's per provider unless the configuration names another
/// (`KimConfig::cloud_profile_name`, which the webhook's CloudProfile rules use too).
pub(super) fn cloud_profile(input: &Input<'_>, shoot: &mut Shoot) {
    let kind = kind(input.shoot().provider.type_);
    shoot.spec.cloud_profile = Some(CloudProfileReference {
        kind: Some("CloudProfile".to_owned()),
        name: input.cfg.cloud_profile_name(kind).to_owned(),
    });
}

/// On a patch, the CloudProfile the Shoot was created with: Gardener does not move a Shoot to
/// another CloudProfile, so a configuration that names another one
/// (`kim.providers.<p>.cloudProfileName`) applies to new Shoots only, and a patch carrying it
/// would be refused for every Shoot of the provider.
pub(super) fn keep_cloud_profile(live: &Shoot, shoot: &mut Shoot) {
    let kept = live.spec.cloud_profile.clone().or_else(|| {
        live.spec
            .cloud_profile_name
            .clone()
            .map(|name| CloudProfileReference {
                kind: Some("CloudProfile".to_owned()),
                name,
            })
    });
    if kept.is_some() {
        shoot.spec.cloud_profile = kept;
    }
}

/// SAP Converged Cloud Shoots are exposed through the internet exposure class.
pub(super) fn exposure_class(input: &Input<'_>, shoot: &mut Shoot) {
    if input.shoot().provider.type_ == ProviderType::Openstack {
        shoot.spec.exposure_class_name = Some(OPENSTACK_EXPOSURE_CLASS.to_owned());
    }
}

/// The access restrictions a Shoot of `platform_region` carries: Gardener's `eu-access-only`
/// for the EU platform regions, none for the others. Gardener admits the Shoot only in a region
/// whose CloudProfile entry lists each of them.
pub fn access_restriction_names(platform_region: &str) -> &'static [&'static str] {
    if EU_ACCESS_PLATFORM_REGIONS.contains(&platform_region) {
        &[EU_ACCESS_RESTRICTION]
    } else {
        &[]
    }
}

/// EU platform regions get Gardener's `eu-access-only` restriction for nodes and add-ons.
pub(super) fn access_restrictions(input: &Input<'_>, shoot: &mut Shoot) {
    for name in access_restriction_names(&input.shoot().platform_region) {
        let options = BTreeMap::from([
            (
                "support.gardener.cloud/eu-access-for-cluster-addons".to_owned(),
                "true".to_owned(),
            ),
            (
                "support.gardener.cloud/eu-access-for-cluster-nodes".to_owned(),
                "true".to_owned(),
            ),
        ]);
        shoot
            .spec
            .access_restrictions
            .get_or_insert_with(Vec::new)
            .push(AccessRestrictionWithOptions {
                name: (*name).to_owned(),
                options: Some(options),
            });
    }
}

/// The tolerations `converter.tolerations` lists for the Runtime's region (create only), for
/// example `ksa-assured-workload` for the tainted seeds of `me-central2`.
pub(super) fn tolerations(input: &Input<'_>, shoot: &mut Shoot) {
    if let Some(tolerations) = input
        .cfg
        .converter
        .tolerations
        .get(&input.shoot().region)
        .filter(|t| !t.is_empty())
    {
        shoot.spec.tolerations = Some(tolerations.clone());
    }
}
