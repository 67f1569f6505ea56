//! `spec.extensions`.
//!
//! Create writes, in upstream's order: networking filter (with network restrictions on), cert,
//! DNS, OIDC, audit log (with a tenant), ACL (when managed and requested), NVIDIA OpenShell
//! (when enabled); the registry cache never on create. Patch starts from the live list and only
//! replaces, appends or removes the extensions it manages (audit log, networking filter,
//! registry cache, ACL, NVIDIA, and DNS when its configuration differs from ours): the registry
//! cache is removed when no longer asked for (upstream's remove strategy), ACL and NVIDIA are
//! switched off (`disabled: true`), the others are kept; cert, OIDC and foreign extensions stay
//! as they are.

use super::{AclAddresses, ConvertError, Input};
use crate::api::{ProviderType, Runtime};
use crate::config::AuditLogTenant;
use crate::gardener::shoot::Extension;
use crate::gardener::{RawExtension, Shoot};
use serde_json::{Map, Value, json};

/// Extension types, as Gardener's ControllerRegistrations name them.
pub(crate) mod types {
    pub const NETWORKING_FILTER: &str = "shoot-networking-filter";
    pub const CERT: &str = "shoot-cert-service";
    pub const DNS: &str = "shoot-dns-service";
    pub const OIDC: &str = "shoot-oidc-service";
    pub const AUDITLOG: &str = "shoot-auditlog-service";
    pub const ACL: &str = "acl";
    pub const NVIDIA_OPENSHELL: &str = "shoot-nvidia-openshell";
}

/// Name of the `spec.resources` entry holding the audit-log credentials; the audit-log
/// extension's `secretReferenceName`.
pub(crate) const AUDITLOG_CREDENTIALS: &str = "auditlog-credentials";

fn extension(type_: &str, disabled: Option<bool>, config: Option<Value>) -> Extension {
    Extension {
        type_: type_.to_owned(),
        disabled,
        provider_config: config.map(RawExtension),
    }
}

/// `shoot-networking-filter`: disabled without egress filtering; ingress filtering is
/// blackholing in the egress filter (there is no ingress block in the extension).
fn networking_filter(input: &Input<'_>) -> Extension {
    let filter = &input.rt.spec.security.networking.filter;
    let enabled = filter.egress.enabled;
    let blackholing = enabled && filter.ingress.as_ref().is_some_and(|i| i.enabled);
    extension(
        types::NETWORKING_FILTER,
        Some(!enabled),
        blackholing.then(|| json!({"egressFilter": {"blackholingEnabled": true}})),
    )
}

/// `shoot-cert-service` with shoot issuers on.
fn cert() -> Extension {
    extension(
        types::CERT,
        None,
        Some(json!({
            "apiVersion": "service.cert.extensions.gardener.cloud/v1alpha1",
            "kind": "CertConfig",
            "shootIssuers": {"enabled": true},
        })),
    )
}

/// `shoot-dns-service`. External DNS: the Shoot's domain with the provider credentials as the
/// resource the DNS extension's admission creates from `spec.dns` (`shoot-dns-service-<secret>`,
/// later upstream). Gardener-internal DNS: no providers.
fn dns(input: &Input<'_>) -> Extension {
    let mut config = json!({
        "apiVersion": "service.dns.extensions.gardener.cloud/v1alpha1",
        "dnsProviderReplication": {"enabled": true},
        "kind": "DNSConfig",
        "syncProvidersFromShootSpecDNS": true,
    });
    if let Some(domain) = super::dns::domain(input) {
        let dns = &input.cfg.converter.dns;
        config["providers"] = json!([{
            "credentials": format!("{}-{}", types::DNS, dns.secret_name),
            "domains": {"include": [domain]},
            "type": dns.provider_type,
        }]);
    }
    extension(types::DNS, None, Some(config))
}

/// The `shoot-dns-service` extension a patch writes, `None` to keep the live one: written when
/// the live Shoot has none (or one without a config), or, over a Shoot with the configuration's
/// external domain, one whose providers differ from ours (a provider naming its credentials by
/// the deprecated `secretName`); kept when it has no providers (a Shoot from before custom
/// domains), and over any other domain (the providers must name the Shoot's domain). Compared
/// as upstream does, on the keys of the extension's `DNSConfig` only.
fn dns_for_patch(input: &Input<'_>, live_shoot: &Shoot, list: &[Extension]) -> Option<Extension> {
    let desired = dns(input);
    let Some(live) = find(list, types::DNS)
        .and_then(|e| e.provider_config.as_ref())
        .map(|c| dns_config_keys(&c.0))
    else {
        return Some(desired);
    };
    if !super::dns::live_domain_is_ours(input, live_shoot) {
        return None;
    }
    let providers = live.get("providers").and_then(Value::as_array);
    if providers.is_none_or(Vec::is_empty) {
        return None;
    }
    let want = desired
        .provider_config
        .as_ref()
        .map(|c| dns_config_keys(&c.0));
    (want.as_ref() != Some(&live)).then_some(desired)
}

/// The keys of a `DNSConfig` (`service.dns.extensions.gardener.cloud/v1alpha1`) the extension
/// reads, as upstream's typed copy of it keeps them; `null` values are left out.
fn dns_config_keys(config: &Value) -> Map<String, Value> {
    fn pick(value: &Value, keys: &[&str]) -> Map<String, Value> {
        keys.iter()
            .filter_map(|k| {
                Some((
                    (*k).to_owned(),
                    value.get(*k).filter(|v| !v.is_null())?.clone(),
                ))
            })
            .collect()
    }
    let include_exclude = |v: &Value| Value::Object(pick(v, &["include", "exclude"]));
    let mut out = pick(
        config,
        &["apiVersion", "kind", "syncProvidersFromShootSpecDNS"],
    );
    if let Some(r) = config
        .get("dnsProviderReplication")
        .filter(|v| !v.is_null())
    {
        out.insert(
            "dnsProviderReplication".into(),
            Value::Object(pick(r, &["enabled"])),
        );
    }
    if let Some(providers) = config.get("providers").and_then(Value::as_array) {
        let providers = providers
            .iter()
            .map(|p| {
                let mut m = pick(p, &["credentials", "type"]);
                for key in ["domains", "zones"] {
                    if let Some(v) = p.get(key).filter(|v| !v.is_null()) {
                        m.insert(key.into(), include_exclude(v));
                    }
                }
                Value::Object(m)
            })
            .collect();
        out.insert("providers".into(), Value::Array(providers));
    }
    out
}

/// `shoot-oidc-service`, enabled; its providers are created in the cluster, not configured here.
fn oidc() -> Extension {
    extension(types::OIDC, Some(false), None)
}

/// The provider config of `shoot-auditlog-service` for a tenant.
fn auditlog_config(tenant: &AuditLogTenant) -> Value {
    json!({
        "apiVersion": "service.auditlog.extensions.gardener.cloud/v1alpha1",
        "kind": "AuditlogConfig",
        "secretReferenceName": AUDITLOG_CREDENTIALS,
        "serviceURL": tenant.service_url,
        "tenantID": tenant.tenant_id,
        "type": "standard",
    })
}

/// Whether `shoot` already sends its audit logs to `tenant` as a conversion writes it: the
/// `shoot-auditlog-service` extension carries the tenant's keys and the `auditlog-credentials`
/// resource names the tenant's Secret. A patch with this tenant changes neither when true.
pub fn audit_log_in_place(shoot: &Shoot, tenant: &AuditLogTenant) -> bool {
    let desired = auditlog_config(tenant);
    let extension = shoot
        .spec
        .extensions
        .as_deref()
        .and_then(|list| find(list, types::AUDITLOG))
        .and_then(|e| e.provider_config.as_ref())
        .and_then(|c| c.0.as_object())
        .is_some_and(|live| {
            desired
                .as_object()
                .is_some_and(|d| d.iter().all(|(k, v)| live.get(k) == Some(v)))
        });
    let credentials = shoot.spec.resources.as_deref().is_some_and(|list| {
        list.iter().any(|r| {
            r.name == AUDITLOG_CREDENTIALS
                && r.resource_ref.kind == "Secret"
                && r.resource_ref.name == tenant.secret_name
        })
    });
    extension && credentials
}

/// `spec.shoot.kubernetes.kubeAPIServer.acl.allowedCIDRs`, empty when unset.
fn allowed_cidrs(rt: &Runtime) -> &[String] {
    rt.spec
        .shoot
        .kubernetes
        .as_ref()
        .and_then(|k| k.kube_api_server.as_ref())
        .and_then(|a| a.acl.as_ref())
        .and_then(|a| a.allowed_cidrs.as_deref())
        .unwrap_or_default()
}

/// Whether the Runtime asks for a kube-apiserver ACL that the `acl` extension can enforce:
/// allowed CIDRs on AWS or Azure (upstream's `AclNeedsToBeEnabled` without its flag). Only
/// for such a Runtime are the [`super::AclAddresses`] needed.
pub fn acl_requested(rt: &Runtime) -> bool {
    matches!(
        rt.spec.shoot.provider.type_,
        ProviderType::Aws | ProviderType::Azure
    ) && !allowed_cidrs(rt).is_empty()
}

/// The CIDRs the `acl` extension allows: the Runtime's, the operators' and the KCP's NAT
/// address, in upstream's order.
fn acl_cidrs<'a>(rt: &'a Runtime, addresses: &'a AclAddresses) -> Vec<&'a str> {
    allowed_cidrs(rt)
        .iter()
        .chain(&addresses.operator_cidrs)
        .map(String::as_str)
        .chain(std::iter::once(addresses.kcp_nat_ip.as_str()))
        .collect()
}

/// `acl` for the Runtime's allowed CIDRs, when managed and requested. `None` when the Runtime
/// asks for no ACL.
fn acl(input: &Input<'_>) -> Option<Extension> {
    let addresses = input.opts.acl.as_ref()?;
    if !acl_requested(input.rt) {
        return None;
    }
    let cidrs = acl_cidrs(input.rt, addresses);
    Some(extension(
        types::ACL,
        Some(false),
        Some(json!({"rule": {"action": "ALLOW", "cidrs": cidrs, "type": "remote_ip"}})),
    ))
}

/// Whether the live Shoot of a Runtime that asks for an ACL does not allow exactly the
/// addresses it should with `addresses` (the ACL ConfigMap changed since the Shoot was
/// written, or the `acl` extension is missing or off): the Shoot needs a patch although the
/// Runtime did not change. `false` for a Runtime that asks for no ACL.
pub fn acl_outdated(rt: &Runtime, addresses: &AclAddresses, live: &Shoot) -> bool {
    if !acl_requested(rt) {
        return false;
    }
    let Some(ext) = live
        .spec
        .extensions
        .as_deref()
        .and_then(|list| find(list, types::ACL))
    else {
        return true;
    };
    let live_cidrs = ext
        .provider_config
        .as_ref()
        .and_then(|c| c.0.pointer("/rule/cidrs"))
        .and_then(Value::as_array);
    let desired = acl_cidrs(rt, addresses);
    ext.disabled == Some(true)
        || !live_cidrs.is_some_and(|live| {
            live.iter()
                .map(Value::as_str)
                .eq(desired.iter().map(|d| Some(*d)))
        })
}

fn nvidia_enabled(input: &Input<'_>) -> bool {
    input.shoot().enable_nvidia_openshell == Some(true)
}

/// The extensions of a new Shoot.
pub(super) fn create(input: &Input<'_>, shoot: &mut Shoot) {
    let mut list = Vec::new();
    if input.opts.network_restriction {
        list.push(networking_filter(input));
    }
    list.extend([cert(), dns(input), oidc()]);
    if let Some(tenant) = input.audit {
        list.push(extension(
            types::AUDITLOG,
            None,
            Some(auditlog_config(tenant)),
        ));
    }
    list.extend(acl(input));
    if nvidia_enabled(input) {
        list.push(extension(types::NVIDIA_OPENSHELL, Some(false), None));
    }
    shoot.spec.extensions = Some(list);
}

/// Replaces the extension of the same type, or appends it.
fn upsert(list: &mut Vec<Extension>, ext: Extension) {
    match list.iter_mut().find(|e| e.type_ == ext.type_) {
        Some(slot) => *slot = ext,
        None => list.push(ext),
    }
}

/// The live extension of a type, if any.
fn find<'a>(list: &'a [Extension], type_: &str) -> Option<&'a Extension> {
    list.iter().find(|e| e.type_ == type_)
}

/// The extensions of an update: the live list with the managed extensions replaced or added.
pub(super) fn patch(
    input: &Input<'_>,
    live: &Shoot,
    shoot: &mut Shoot,
) -> Result<(), ConvertError> {
    let mut list = live.spec.extensions.clone().unwrap_or_default();

    if let Some(tenant) = input.audit {
        let desired = auditlog_config(tenant);
        // Replaced only when the tenant changed (upstream PR 489): other keys of the live
        // config are not ours to reset.
        let unchanged = find(&list, types::AUDITLOG)
            .and_then(|e| e.provider_config.as_ref())
            .and_then(|c| c.0.as_object())
            .is_some_and(|live| {
                desired
                    .as_object()
                    .is_some_and(|d| d.iter().all(|(k, v)| live.get(k) == Some(v)))
            });
        if !unchanged {
            upsert(&mut list, extension(types::AUDITLOG, None, Some(desired)));
        }
    }

    if input.opts.network_restriction {
        upsert(&mut list, networking_filter(input));
    }

    if let Some(ext) = dns_for_patch(input, live, &list) {
        upsert(&mut list, ext);
    }

    super::registry_cache::apply(super::registry_cache::desired(input)?, &mut list);

    // Not managed (upstream's `--api-server-acl-enabled` off) or not asked for: a live one is
    // switched off, as upstream's `AclNeedsToBeEnabled` decides.
    match acl(input) {
        Some(ext) => upsert(&mut list, ext),
        None => {
            if find(&list, types::ACL).is_some() {
                upsert(&mut list, extension(types::ACL, Some(true), None));
            }
        }
    }

    if nvidia_enabled(input) {
        upsert(
            &mut list,
            extension(types::NVIDIA_OPENSHELL, Some(false), None),
        );
    } else if find(&list, types::NVIDIA_OPENSHELL).is_some() {
        upsert(
            &mut list,
            extension(types::NVIDIA_OPENSHELL, Some(true), None),
        );
    }

    shoot.spec.extensions = Some(list);
    Ok(())
}
