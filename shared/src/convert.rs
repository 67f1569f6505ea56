//! Runtime -> Gardener Shoot conversion: pure, no I/O.
//!
//! [`to_shoot`] builds the Shoot that provisions a Runtime (`live == None`, upstream's
//! `ConverterCreate`) or the Shoot that updates an existing one (`live == Some`, upstream's
//! `ConverterPatch`), running upstream's extenders in upstream's order (listed in
//! `docs/conversion.md`). The Shoot is written the way the Gardener of our test environment
//! (v1.149) accepts it: `credentialsBindingName`, `cloudProfile{kind,name}`, structured
//! authentication, `dns.providers[].credentialsRef`. Every step and every deliberate difference
//! from upstream is listed in `docs/conversion.md`.
//!
//! Every error names the Runtime field at fault; the webhook's validation has a rule for each
//! one, so an admitted Runtime always converts.

mod dns;
mod error;
mod extensions;
mod gdch;
mod gvisor;
mod kubernetes;
mod metadata;
mod networking;
mod oidc;
mod placement;
mod provider;
mod registry_cache;
mod version;

pub use error::ConvertError;
pub use extensions::{acl_outdated, acl_requested, audit_log_in_place};
pub use networking::{DUAL_STACK_IP_FAMILIES, dual_stack_applies, supports_dual_stack};
pub use oidc::{STRUCTURED_AUTH_CONFIG_KEY, structured_auth_config_map_name};
pub use placement::access_restriction_names;
pub use provider::{pools, zones};
pub use registry_cache::{
    registry_cache_credentials_changed, registry_cache_missing, registry_cache_secrets_on,
};

use crate::api::Runtime;
use crate::config::{AuditLogTenant, KimConfig};
use crate::gardener::Shoot;
use k8s_openapi::api::core::v1::ConfigMap;
use std::collections::BTreeMap;

/// The result of a conversion.
#[derive(Clone, Debug, PartialEq)]
pub struct Converted {
    /// The Shoot to create (create conversion) or to apply with server-side apply (patch).
    pub shoot: Shoot,
    /// The `structured-auth-config-<shoot>` ConfigMap the Shoot's
    /// `kubeAPIServer.structuredAuthentication` points to; create or update it in the Gardener
    /// project namespace before the Shoot.
    pub structured_auth: Option<ConfigMap>,
    /// True when the live Shoot has worker pools the converted Shoot no longer lists. Server-side
    /// apply would keep them (upstream issue 640): the caller must replace the workers with a
    /// full update.
    pub workers_removed: bool,
}

/// Inputs the conversion cannot take from the Runtime or the KIM configuration because they
/// live elsewhere (flags, the KCP, the runtime's cluster). [`Default`] is what [`to_shoot`]
/// uses: audit logs mandatory and network restrictions on (upstream's `--audit-log-mandatory`
/// and `--network-restriction-enabled` defaults), ACL not managed, no registry-cache
/// credentials synchronised.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvertOptions {
    /// Upstream's `--audit-log-mandatory`: a Runtime whose provider and region have no
    /// audit-log tenant fails to convert ([`ConvertError::AuditLogTenant`]); when false it
    /// converts without audit logging.
    pub audit_log_mandatory: bool,
    /// Upstream's `--network-restriction-enabled`: the `shoot-networking-filter` extension is
    /// written from `spec.security.networking.filter`. When false it is not written on create
    /// and a live one is kept as it is on patch.
    pub network_restriction: bool,
    /// The operator CIDRs and the KCP NAT address upstream reads from the ConfigMap
    /// `converter.kubernetes.kubeApiServer.acl.configMapName` (upstream's
    /// `--api-server-acl-enabled`). `None`: the ACL is not managed (not written on create; on
    /// patch a live `acl` extension is switched off, as upstream does with the flag off). The addresses matter only for a Runtime that
    /// [`acl_requested`]; for any other, managed-but-empty addresses are enough.
    pub acl: Option<AclAddresses>,
    /// Per registry cache UID (`spec.imageRegistryCache[].uid`), the name of the Secret in the
    /// Gardener project that holds the cache's upstream credentials (upstream's garden secret
    /// manager). A cache with `secretReferenceName` whose Secret is not listed fails the patch
    /// conversion ([`ConvertError::RegistryCacheSecret`]).
    pub registry_cache_secrets: BTreeMap<String, String>,
    /// The tenant of the dedicated audit log (an `AuditLog` of KALM's pool claimed or reserved
    /// for this Runtime, upstream's `--dedicated-audit-logging-enabled`). When set it replaces
    /// the tenant of the audit-log tenant file for the Runtime's provider and region.
    pub dedicated_audit_log: Option<AuditLogTenant>,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        Self {
            audit_log_mandatory: true,
            network_restriction: true,
            acl: None,
            registry_cache_secrets: BTreeMap::new(),
            dedicated_audit_log: None,
        }
    }
}

/// The addresses every kube-apiserver ACL must allow besides the Runtime's own CIDRs.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct AclAddresses {
    /// Operator CIDRs (upstream ConfigMap key `acl-list.json`).
    pub operator_cidrs: Vec<String>,
    /// The KCP's external NAT address (upstream ConfigMap key `kcp-external-nat-ip.json`).
    pub kcp_nat_ip: String,
}

/// Key of the ACL ConfigMap holding the operator CIDRs, a JSON list of strings.
pub const ACL_OPERATOR_CIDRS_KEY: &str = "acl-list.json";
/// Key of the ACL ConfigMap holding the KCP's external NAT address, a JSON string.
pub const ACL_KCP_NAT_IP_KEY: &str = "kcp-external-nat-ip.json";

impl AclAddresses {
    /// Reads the ACL ConfigMap's `data` (upstream's format:
    /// `acl-list.json: ["2.2.2.2/29", ...]`, `kcp-external-nat-ip.json: "1.1.1.1/32"`). Every
    /// entry must be a CIDR (a bare address is taken as a single-address network): a wrong one
    /// would make Gardener refuse every Shoot with an ACL. The error names the key.
    pub fn from_config_map_data(
        data: &std::collections::BTreeMap<String, String>,
    ) -> Result<Self, String> {
        let get = |key: &str| {
            data.get(key)
                .ok_or_else(|| format!("data key {key} is missing"))
        };
        let operator_cidrs: Vec<String> = serde_json::from_str(get(ACL_OPERATOR_CIDRS_KEY)?)
            .map_err(|e| {
                format!(
                    "{ACL_OPERATOR_CIDRS_KEY}: expected a JSON list of CIDRs such as \
                     [\"203.0.113.0/29\"]: {e}"
                )
            })?;
        let kcp_nat_ip: String = serde_json::from_str(get(ACL_KCP_NAT_IP_KEY)?).map_err(|e| {
            format!("{ACL_KCP_NAT_IP_KEY}: expected a JSON string such as \"203.0.113.7/32\": {e}")
        })?;
        for (i, cidr) in operator_cidrs.iter().enumerate() {
            check_acl_cidr(cidr).map_err(|why| format!("{ACL_OPERATOR_CIDRS_KEY}[{i}]: {why}"))?;
        }
        check_acl_cidr(&kcp_nat_ip).map_err(|why| format!("{ACL_KCP_NAT_IP_KEY}: {why}"))?;
        Ok(Self {
            operator_cidrs,
            kcp_nat_ip,
        })
    }
}

fn check_acl_cidr(value: &str) -> Result<(), String> {
    let is_cidr = value.parse::<ipnet::IpNet>().is_ok();
    let is_address = value.parse::<std::net::IpAddr>().is_ok();
    if is_cidr || is_address {
        Ok(())
    } else {
        Err(format!(
            "{value:?} is not a CIDR; use the form 203.0.113.0/24 or 2001:db8::/32"
        ))
    }
}

/// Converts `rt` into the Shoot to create (`live == None`) or to apply over the live Shoot,
/// with [`ConvertOptions::default`].
pub fn to_shoot(
    rt: &Runtime,
    cfg: &KimConfig,
    live: Option<&Shoot>,
) -> Result<Converted, ConvertError> {
    to_shoot_with(rt, cfg, live, &ConvertOptions::default())
}

/// [`to_shoot`] with explicit [`ConvertOptions`].
pub fn to_shoot_with(
    rt: &Runtime,
    cfg: &KimConfig,
    live: Option<&Shoot>,
    opts: &ConvertOptions,
) -> Result<Converted, ConvertError> {
    let input = Input::new(rt, cfg, opts)?;
    let mut shoot = metadata::base(&input);

    // Upstream's extender order; steps 1-9 are shared by create and patch.
    metadata::annotations(&input, &mut shoot);
    metadata::labels(&input, &mut shoot);
    placement::seed_selector(&input, &mut shoot);
    oidc::structured_authentication(&input, &mut shoot);
    placement::cloud_profile(&input, &mut shoot);
    placement::exposure_class(&input, &mut shoot);
    placement::access_restrictions(&input, &mut shoot);
    kubernetes::feature_gates(&input, &mut shoot);
    kubernetes::runtime_config(&input, &mut shoot);
    let workers_removed = match live {
        None => {
            provider::create(&input, &mut shoot)?;
            gvisor::net_raw(&mut shoot);
            placement::tolerations(&input, &mut shoot);
            dns::create(&input, &mut shoot);
            extensions::create(&input, &mut shoot);
            kubernetes::version(&input, None, &mut shoot);
            kubernetes::maintenance(&input, &mut shoot);
            kubernetes::audit_log(&input, &mut shoot);
            kubernetes::service_account(&input, &mut shoot);
            networking::create(&input, &mut shoot);
            gdch::overlay_networking(&input, &mut shoot);
            false
        }
        Some(live) => {
            // Tolerations, the service account settings and the IP families are left out on
            // purpose: server-side apply then leaves the values set at creation alone (upstream's
            // patch has no tolerations, token or networking extender either).
            placement::keep_cloud_profile(live, &mut shoot);
            let removed = provider::patch(&input, live, &mut shoot)?;
            gvisor::net_raw(&mut shoot);
            kubernetes::resources(live, &mut shoot);
            registry_cache::resources(&input, &mut shoot)?;
            registry_cache::credentials_annotation(&input, &mut shoot);
            extensions::patch(&input, live, &mut shoot)?;
            dns::patch(&input, live, &mut shoot);
            kubernetes::version(&input, Some(live), &mut shoot);
            kubernetes::maintenance(&input, &mut shoot);
            kubernetes::audit_log(&input, &mut shoot);
            removed
        }
    };

    Ok(Converted {
        structured_auth: Some(oidc::config_map(&input)),
        shoot,
        workers_removed,
    })
}

/// The Runtime with the values every step needs, looked up once.
pub(crate) struct Input<'a> {
    pub rt: &'a Runtime,
    pub cfg: &'a KimConfig,
    pub opts: &'a ConvertOptions,
    /// `kyma-project.io/runtime-id`.
    pub runtime_id: &'a str,
    /// `kyma-project.io/global-account-id`.
    pub global_account_id: &'a str,
    /// `kyma-project.io/subaccount-id`.
    pub subaccount_id: &'a str,
    /// The audit-log tenant of the Runtime's provider and region, if there is one.
    pub audit: Option<&'a AuditLogTenant>,
}

impl<'a> Input<'a> {
    fn new(
        rt: &'a Runtime,
        cfg: &'a KimConfig,
        opts: &'a ConvertOptions,
    ) -> Result<Self, ConvertError> {
        use crate::names::{LABEL_GLOBAL_ACCOUNT_ID, LABEL_RUNTIME_ID, LABEL_SUBACCOUNT_ID};
        let label = |key: &'static str| match rt.label(key) {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(ConvertError::MissingLabel { label: key }),
        };
        let runtime_id = label(LABEL_RUNTIME_ID)?;
        let global_account_id = label(LABEL_GLOBAL_ACCOUNT_ID)?;
        let subaccount_id = label(LABEL_SUBACCOUNT_ID)?;
        let shoot = &rt.spec.shoot;
        let tenant = match opts.dedicated_audit_log.as_ref() {
            Some(dedicated) => Ok(dedicated),
            None => cfg.audit_log_tenant(shoot.provider.type_.as_str(), &shoot.region),
        };
        let audit = match tenant {
            Ok(tenant) => Some(tenant),
            Err(_) if opts.audit_log_mandatory => {
                return Err(ConvertError::AuditLogTenant {
                    provider: shoot.provider.type_.as_str(),
                    region: shoot.region.clone(),
                });
            }
            Err(_) => None,
        };
        Ok(Self {
            rt,
            cfg,
            opts,
            runtime_id,
            global_account_id,
            subaccount_id,
            audit,
        })
    }

    /// `spec.shoot` of the Runtime.
    pub fn shoot(&self) -> &'a crate::api::runtime::RuntimeShoot {
        &self.rt.spec.shoot
    }
}
