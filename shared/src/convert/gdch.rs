//! The GDCH part of upstream's `networking` extender: GDCH Shoots get calico with VXLAN and
//! overlay networking, the only calico mode GDCH networks carry.

use super::Input;
use crate::api::ProviderType;
use crate::gardener::{RawExtension, Shoot};
use serde_json::json;

/// On create, a GDCH Shoot's `networking.providerConfig` is calico's `NetworkConfig` with
/// `vxlan` and `overlay` on (replacing anything there, as upstream does). Not written on patch:
/// upstream's patch has no networking extender, so server-side apply keeps the value.
pub(super) fn overlay_networking(input: &Input<'_>, shoot: &mut Shoot) {
    if input.shoot().provider.type_ != ProviderType::Gdch {
        return;
    }
    let networking = shoot.spec.networking.get_or_insert_with(Default::default);
    networking.provider_config = Some(RawExtension(json!({
        "apiVersion": "calico.networking.extensions.gardener.cloud/v1alpha1",
        "kind": "NetworkConfig",
        "overlay": {"enabled": true},
        "vxlan": {"enabled": true},
    })));
}
