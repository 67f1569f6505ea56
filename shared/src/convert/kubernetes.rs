//! Kubernetes version, feature gates, runtime config, maintenance, audit log, service account
//! tokens and (on patch) the live `spec.resources`.

use super::extensions::AUDITLOG_CREDENTIALS;
use super::{Input, version};
use crate::duration::format_go_duration;
use crate::gardener::Shoot;
use crate::gardener::kubernetes::{AuditConfig, AuditPolicy, ServiceAccountConfig};
use crate::gardener::shoot::{
    CrossVersionObjectReference, Maintenance, MaintenanceAutoUpdate, MaintenanceTimeWindow,
    NamedResourceReference,
};
use crate::gardener::worker::KubeletConfig;
use crate::names;
use k8s_openapi::api::core::v1::ObjectReference;

/// The purpose whose Shoots get the region's maintenance window.
const PRODUCTION: &str = "production";

/// The Runtime's version, else `converter.kubernetes.defaultVersion`; on patch never lower than
/// the live version (Gardener's maintenance raises it, and downgrades are rejected).
pub(super) fn version(input: &Input<'_>, live: Option<&Shoot>, shoot: &mut Shoot) {
    let desired = input
        .shoot()
        .kubernetes
        .as_ref()
        .and_then(|k| k.version.clone())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| input.cfg.default_kubernetes_version().to_string());
    let live_version = live.and_then(|l| l.spec.kubernetes.version.as_deref());
    shoot.spec.kubernetes.version = Some(version::not_below(desired, live_version));
}

/// Auto-update switches from the configuration; production Shoots also get their region's
/// maintenance window.
pub(super) fn maintenance(input: &Input<'_>, shoot: &mut Shoot) {
    let k = &input.cfg.converter.kubernetes;
    let s = input.shoot();
    let time_window = (s.purpose == PRODUCTION)
        .then(|| input.cfg.maintenance_window(&s.region))
        .flatten()
        .map(|w| MaintenanceTimeWindow {
            begin: w.begin.as_str().to_owned(),
            end: w.end.as_str().to_owned(),
        });
    shoot.spec.maintenance = Some(Maintenance {
        auto_update: Some(MaintenanceAutoUpdate {
            kubernetes_version: k.enable_kubernetes_version_auto_update,
            machine_image_version: Some(k.enable_machine_image_version_auto_update),
        }),
        time_window,
        ..Default::default()
    });
}

/// On patch the live `spec.resources` are kept: the list is atomic and other parties (the DNS
/// extension's admission, registry caches) add to it.
pub(super) fn resources(live: &Shoot, shoot: &mut Shoot) {
    if let Some(resources) = &live.spec.resources {
        shoot.spec.resources = Some(resources.clone());
    }
}

/// With an audit-log tenant: the policy ConfigMap of the kube-apiserver (the configured one,
/// or `experimental-audit-policy` for a Runtime annotated
/// `operator.kyma-project.io/experimental-audit-policy: "true"`) and the
/// `auditlog-credentials` resource pointing to the tenant's Secret, on create and on patch.
pub(super) fn audit_log(input: &Input<'_>, shoot: &mut Shoot) {
    let Some(tenant) = input.audit else { return };
    let credentials = NamedResourceReference {
        name: AUDITLOG_CREDENTIALS.to_owned(),
        resource_ref: CrossVersionObjectReference {
            api_version: Some("v1".to_owned()),
            kind: "Secret".to_owned(),
            name: tenant.secret_name.clone(),
        },
    };
    let resources = shoot.spec.resources.get_or_insert_with(Vec::new);
    match resources
        .iter_mut()
        .find(|r| r.name == AUDITLOG_CREDENTIALS)
    {
        Some(slot) => *slot = credentials,
        None => resources.push(credentials),
    }

    let api_server = shoot
        .spec
        .kubernetes
        .kube_api_server
        .get_or_insert_with(Default::default);
    let experimental = input
        .rt
        .annotation(names::ANNOTATION_EXPERIMENTAL_AUDIT_POLICY)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let policy = if experimental {
        names::EXPERIMENTAL_AUDIT_POLICY_CONFIG_MAP
    } else {
        input
            .cfg
            .converter
            .audit_logging
            .policy_config_map_name
            .as_str()
    };
    api_server.audit_config = Some(AuditConfig {
        audit_policy: Some(AuditPolicy {
            config_map_ref: Some(ObjectReference {
                name: Some(policy.to_owned()),
                ..Default::default()
            }),
        }),
    });
}

/// The kube-apiserver and kubelet feature gates of the configuration. Like upstream, the
/// Shoot-wide `kubelet` is always written, empty when no kubelet gate is configured.
pub(super) fn feature_gates(input: &Input<'_>, shoot: &mut Shoot) {
    let k = &input.cfg.converter.kubernetes;
    let kubernetes = &mut shoot.spec.kubernetes;
    kubernetes
        .kube_api_server
        .get_or_insert_with(Default::default)
        .feature_gates = k.api_server().feature_gates().cloned();
    let gates = k.kubelet_feature_gates();
    kubernetes
        .kubelet
        .get_or_insert_with(KubeletConfig::default)
        .feature_gates = (!gates.is_empty()).then(|| gates.clone());
}

/// The kube-apiserver `runtimeConfig` of the configuration.
pub(super) fn runtime_config(input: &Input<'_>, shoot: &mut Shoot) {
    let api = input.cfg.converter.kubernetes.api_server();
    shoot
        .spec
        .kubernetes
        .kube_api_server
        .get_or_insert_with(Default::default)
        .runtime_config = api.runtime_config().cloned();
}

/// Service account tokens (create only): lifetimes are not extended, and the longest is
/// `maxTokenExpiration` kept within 30 to 90 days (30 days when unset), written as Gardener
/// stores it (`720h0m0s`).
pub(super) fn service_account(input: &Input<'_>, shoot: &mut Shoot) {
    let max = input
        .cfg
        .converter
        .kubernetes
        .api_server()
        .max_token_expiration();
    let config = shoot
        .spec
        .kubernetes
        .kube_api_server
        .get_or_insert_with(Default::default)
        .service_account_config
        .get_or_insert_with(ServiceAccountConfig::default);
    config.extend_token_expiration = Some(false);
    config.max_token_expiration = Some(format_go_duration(max));
}
