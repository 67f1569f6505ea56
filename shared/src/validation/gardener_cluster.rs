//! Rules on a GardenerCluster: the shoot it names and where its kubeconfig Secret goes.

use super::{Findings, syntax};
use crate::api::GardenerCluster;

/// Validates a GardenerCluster (CREATE and UPDATE): the shoot name is a DNS label, the Secret
/// name a DNS subdomain, its namespace a DNS label and its key a valid data key.
pub fn validate_gardener_cluster(gc: &GardenerCluster) -> Findings {
    let mut f = Findings::default();
    let shoot = gc.spec.shoot.name.as_str();
    if !syntax::is_dns_label(shoot) {
        f.violation(
            "spec.shoot.name",
            format!("{shoot:?} is not a shoot name; use lower-case letters, digits and '-', starting and ending with a letter or digit"),
        );
    }
    let secret = &gc.spec.kubeconfig.secret;
    if !syntax::is_dns_subdomain(&secret.name) {
        f.violation(
            "spec.kubeconfig.secret.name",
            format!("{:?} is not a Secret name; use lower-case letters, digits, '-' and '.', e.g. kubeconfig-<runtime-id>", secret.name),
        );
    }
    if !syntax::is_dns_label(&secret.namespace) {
        f.violation(
            "spec.kubeconfig.secret.namespace",
            format!("{:?} is not a namespace name; use lower-case letters, digits and '-', e.g. kcp-system", secret.namespace),
        );
    }
    if !syntax::is_config_key(&secret.key) {
        f.violation(
            "spec.kubeconfig.secret.key",
            format!(
                "{:?} is not a Secret data key; use letters, digits, '-', '_' and '.', e.g. config",
                secret.key
            ),
        );
    }
    f
}
