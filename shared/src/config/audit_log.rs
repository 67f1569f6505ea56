//! The audit-log tenant file (`converter.auditLogging.tenantConfigPath`), in upstream's layout:
//! `{"<provider>": {"<region>": {"tenantID", "serviceURL", "secretName"}}}`.

use super::error::{Checker, ConfigWarning};
use super::providers::ProviderKind;
use super::values::{is_dns_subdomain, is_url};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The audit-log tenants per provider type and region.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct AuditLogTenants(pub BTreeMap<String, BTreeMap<String, AuditLogTenant>>);

/// One tenant: where the Shoot's audit logs go.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct AuditLogTenant {
    /// `tenantID`.
    #[serde(rename = "tenantID")]
    pub tenant_id: String,
    /// `serviceURL`: an `http(s)://` URL.
    #[serde(rename = "serviceURL")]
    pub service_url: String,
    /// `secretName`: Secret with the credentials in the Gardener project, referenced from the
    /// Shoot as resource `auditlog-credentials`.
    #[serde(rename = "secretName")]
    pub secret_name: String,
}

/// No tenant for a provider type or region; the messages are upstream's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuditLogLookupError {
    /// No entry for the provider type.
    #[error("audit logs configuration not found: missing providerType: '{provider}'")]
    MissingProvider {
        /// The provider type looked up.
        provider: String,
    },
    /// No entry for the region.
    #[error(
        "audit logs configuration not found: missing region: '{region}' for providerType: '{provider}'"
    )]
    MissingRegion {
        /// The provider type looked up.
        provider: String,
        /// The region looked up.
        region: String,
    },
}

impl AuditLogTenants {
    /// The tenant for `provider` (`aws`) and `region`.
    pub fn tenant(
        &self,
        provider: &str,
        region: &str,
    ) -> Result<&AuditLogTenant, AuditLogLookupError> {
        let regions = self
            .0
            .get(provider)
            .ok_or_else(|| AuditLogLookupError::MissingProvider {
                provider: provider.to_owned(),
            })?;
        regions
            .get(region)
            .ok_or_else(|| AuditLogLookupError::MissingRegion {
                provider: provider.to_owned(),
                region: region.to_owned(),
            })
    }

    /// The regions of `provider` that have a tenant, in order.
    pub fn regions(&self, provider: &str) -> impl Iterator<Item = &str> {
        self.0
            .get(provider)
            .into_iter()
            .flat_map(|r| r.keys().map(String::as_str))
    }

    /// True when the file has no tenant at all.
    pub fn is_empty(&self) -> bool {
        self.0.values().all(BTreeMap::is_empty)
    }
}

/// Checks every entry as upstream does (`tenantID`, `serviceURL` as a URL, `secretName`), plus
/// that `secretName` is a Secret name. Provider types we do not know only warn: upstream
/// accepts any key, and such an entry is simply never used.
pub(crate) fn check(
    tenants: &AuditLogTenants,
    file: &str,
    c: &mut Checker,
    warnings: &mut Vec<ConfigWarning>,
) {
    for (provider, regions) in &tenants.0 {
        if provider.parse::<ProviderKind>().is_err() {
            warnings.push(ConfigWarning {
                file: file.to_owned(),
                path: provider.clone(),
                message: "not a provider type (aws, azure, gcp, openstack, alicloud); these tenants are never used".to_owned(),
            });
        }
        for (region, t) in regions {
            let path = format!("{provider}.{region}");
            c.non_empty(format!("{path}.tenantID"), &t.tenant_id);
            if c.non_empty(format!("{path}.serviceURL"), &t.service_url)
                && !is_url(&t.service_url, false)
            {
                c.problem(
                    format!("{path}.serviceURL"),
                    format!(
                        "expected a URL such as `https://auditlog.example.com:3001`, found `{}`",
                        t.service_url
                    ),
                );
            }
            if c.non_empty(format!("{path}.secretName"), &t.secret_name)
                && !is_dns_subdomain(&t.secret_name)
            {
                c.problem(
                    format!("{path}.secretName"),
                    format!(
                        "`{}` is not a valid Secret name (lower-case DNS subdomain)",
                        t.secret_name
                    ),
                );
            }
        }
    }
}
