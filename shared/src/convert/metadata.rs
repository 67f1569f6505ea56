//! The base object (the Shoot fields taken straight from the Runtime) and the annotation and
//! label extenders.

use super::Input;
use crate::gardener::Shoot;
use crate::gardener::shoot::{Networking, ShootSpec};
use crate::names::{
    SHOOT_ANNOTATION_LICENCE_TYPE, SHOOT_ANNOTATION_RUNTIME_GENERATION,
    SHOOT_ANNOTATION_RUNTIME_ID, SHOOT_CLEANUP_GRACE_PERIODS, SHOOT_LABEL_ACCOUNT,
    SHOOT_LABEL_SUBACCOUNT,
};
use std::collections::BTreeMap;

/// The Shoot fields taken straight from the Runtime. `credentialsBindingName` replaces
/// upstream's `secretBindingName`: Gardener forbids the latter from Kubernetes 1.34.
pub(super) fn base(input: &Input<'_>) -> Shoot {
    let s = input.shoot();
    let mut shoot = Shoot::new(
        &s.name,
        ShootSpec {
            purpose: Some(s.purpose.clone()),
            region: s.region.clone(),
            credentials_binding_name: Some(s.secret_binding_name.clone()),
            networking: Some(Networking {
                type_: s.networking.type_.clone(),
                nodes: Some(s.networking.nodes.clone()),
                pods: Some(s.networking.pods.clone()),
                services: Some(s.networking.services.clone()),
                ..Default::default()
            }),
            control_plane: s.control_plane.clone(),
            ..Default::default()
        },
    );
    shoot.metadata.namespace = Some(input.cfg.converter.gardener.namespace());
    shoot
}

/// Replaces all annotations: runtime id, the Runtime generation the Shoot reflects, the three
/// cleanup grace periods, and the licence type when the Runtime has one.
pub(super) fn annotations(input: &Input<'_>, shoot: &mut Shoot) {
    let mut annotations = BTreeMap::from([
        (
            SHOOT_ANNOTATION_RUNTIME_ID.to_owned(),
            input.runtime_id.to_owned(),
        ),
        (
            SHOOT_ANNOTATION_RUNTIME_GENERATION.to_owned(),
            input.rt.metadata.generation.unwrap_or(0).to_string(),
        ),
    ]);
    for (key, seconds) in SHOOT_CLEANUP_GRACE_PERIODS {
        annotations.insert(key.to_owned(), seconds.to_owned());
    }
    if let Some(licence) = input
        .shoot()
        .licence_type
        .as_deref()
        .filter(|l| !l.is_empty())
    {
        annotations.insert(SHOOT_ANNOTATION_LICENCE_TYPE.to_owned(), licence.to_owned());
    }
    shoot.metadata.annotations = Some(annotations);
}

/// Replaces all labels: `account` and `subaccount` from the Runtime's account labels.
pub(super) fn labels(input: &Input<'_>, shoot: &mut Shoot) {
    shoot.metadata.labels = Some(BTreeMap::from([
        (
            SHOOT_LABEL_ACCOUNT.to_owned(),
            input.global_account_id.to_owned(),
        ),
        (
            SHOOT_LABEL_SUBACCOUNT.to_owned(),
            input.subaccount_id.to_owned(),
        ),
    ]));
}
