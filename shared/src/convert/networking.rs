//! Dual-stack networking (upstream's `networking` extender, create only).
//!
//! A Runtime asks for dual stack with `spec.shoot.networking.dualStack: true`; it is honoured
//! when the landscape supports it (`converter.networking.enableDualStackIP`) and the provider
//! is AWS or GCP. The Shoot then gets `networking.ipFamilies: [IPv4, IPv6]`; on AWS the
//! infrastructure config also gets `dualStack.enabled` and the control plane config the AWS
//! load balancer controller (both written by the provider step). On patch nothing is written:
//! server-side apply leaves the families set at creation, and the live provider configs keep
//! their dual-stack settings.

use super::Input;
use crate::api::ProviderType;
use crate::gardener::Shoot;

/// The IP families of a dual-stack Shoot, in Gardener's order (IPv4 primary).
pub const DUAL_STACK_IP_FAMILIES: [&str; 2] = ["IPv4", "IPv6"];

/// True when the Runtime asks for dual stack and the landscape supports it, whatever the
/// provider (upstream's provider step looks only at these two).
pub(super) fn dual_stack_requested(input: &Input<'_>) -> bool {
    input.shoot().networking.dual_stack == Some(true)
        && input.cfg.converter.networking.enable_dual_stack_ip
}

/// True when the Shoot of this Runtime is made dual stack: requested, supported by the
/// landscape, and on a provider that supports it.
pub fn dual_stack_applies(provider: ProviderType, dual_stack: Option<bool>, enabled: bool) -> bool {
    dual_stack == Some(true) && enabled && supports_dual_stack(provider)
}

/// Providers whose Shoots can be dual stack.
pub fn supports_dual_stack(provider: ProviderType) -> bool {
    matches!(provider, ProviderType::Aws | ProviderType::Gcp)
}

/// `networking.ipFamilies` of a new dual-stack Shoot.
pub(super) fn create(input: &Input<'_>, shoot: &mut Shoot) {
    if !dual_stack_applies(
        input.shoot().provider.type_,
        input.shoot().networking.dual_stack,
        input.cfg.converter.networking.enable_dual_stack_ip,
    ) {
        return;
    }
    shoot
        .spec
        .networking
        .get_or_insert_with(Default::default)
        .ip_families = Some(DUAL_STACK_IP_FAMILIES.map(str::to_owned).to_vec());
}
