//! Rules on a GardenerCluster: the shoot it names and where its kubeconfig Secret goes.

use super::{ValidationOutcome, syntax};
use crate::api::GardenerCluster;

/// Validates a GardenerCluster (CREATE and UPDATE): the shoot name is a DNS label, the Secret
/// name a DNS subdomain, its namespace a DNS label and its key a valid data key.
pub fn validate_gardener_cluster(gc: &GardenerCluster) -> ValidationOutcome {
    let mut f = ValidationOutcome::default();
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

/// Validates an UPDATE: [`validate_gardener_cluster`] on a changed spec; the runtime-id label
/// may not change (the Runtime reconciler finds and deletes its GardenerCluster by it), nor the
/// Shoot (pointed elsewhere, the Secret of this runtime would get another cluster's kubeconfig).
/// A spec left as it is passes whatever today's rules say of it: the controller's finalizer
/// removal, a label or an annotation must never be refused for a spec stored before them (a
/// GardenerCluster whose finalizer cannot go holds its Runtime's deletion).
pub fn validate_gardener_cluster_update(
    old: &GardenerCluster,
    new: &GardenerCluster,
) -> ValidationOutcome {
    let mut f = if old.spec == new.spec {
        ValidationOutcome::default()
    } else {
        validate_gardener_cluster(new)
    };
    // Pointed elsewhere, the Secret would receive the runtime's admin kubeconfig wherever its
    // writer can read it; back to upstream's location is how a wrong one is repaired.
    let secret = &new.spec.kubeconfig.secret;
    let name = new.metadata.name.as_deref().unwrap_or_default();
    let namespace = new.metadata.namespace.as_deref().unwrap_or_default();
    let own = secret.name == crate::names::kubeconfig_secret_name(name)
        && secret.namespace == namespace
        && secret.key == "config";
    if old.spec.kubeconfig.secret != *secret && !own {
        f.violation(
            "spec.kubeconfig.secret",
            format!(
                "may change only to the runtime's own kubeconfig Secret: name {:?}, namespace {namespace:?}, key \"config\"; or keep name {:?}, namespace {:?} and key {:?}",
                crate::names::kubeconfig_secret_name(name),
                old.spec.kubeconfig.secret.name,
                old.spec.kubeconfig.secret.namespace,
                old.spec.kubeconfig.secret.key
            ),
        );
    }
    if old.spec.shoot.name != new.spec.shoot.name {
        f.violation(
            "spec.shoot.name",
            format!(
                "is immutable (the Shoot of a runtime never changes); keep {:?}",
                old.spec.shoot.name
            ),
        );
    }
    super::update::runtime_id_unchanged(
        crate::api::gardener_cluster::label(&old.metadata, crate::names::LABEL_RUNTIME_ID),
        crate::api::gardener_cluster::label(&new.metadata, crate::names::LABEL_RUNTIME_ID),
        &mut f,
    );
    f
}
