//! `AuditLog` (`auditlogmanager.kyma-project.io/v1beta1`): one dedicated BTP audit-log stack
//! that the Kyma Audit Log Manager (KALM) provisions into a pool in the KCP. The infrastructure
//! manager never creates or deletes one; it reserves one for a Runtime (labels), claims it
//! (`spec.assignedToRuntimeID`) and marks it orphaned when the Runtime goes
//! (`spec.orphaned`). Only the fields it reads or writes are typed; it writes with merge
//! patches, so fields of KALM's it does not know are kept.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of KALM's resources.
pub const GROUP: &str = "auditlogmanager.kyma-project.io";
/// API version of `AuditLog`.
pub const VERSION: &str = "v1beta1";

/// The desired state of an `AuditLog`, as KALM defines it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "auditlogmanager.kyma-project.io",
    version = "v1beta1",
    kind = "AuditLog",
    namespaced,
    status = "AuditLogStatus",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct AuditLogSpec {
    /// BTP platform region of the stack.
    #[serde(default)]
    pub platform_region: String,
    /// Hyperscaler regions of Runtimes this stack may serve.
    #[serde(default)]
    pub regions: Vec<String>,
    /// The BTP subaccount: the tenant ID of the Shoot's audit-log extension.
    #[serde(
        rename = "subaccountID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub subaccount_id: Option<String>,
    /// The runtime ID this stack is assigned to (the claim).
    #[serde(
        rename = "assignedToRuntimeID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub assigned_to_runtime_id: Option<String>,
    /// Set when the Runtime is gone: KALM keeps the logs for the retention period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphaned: Option<bool>,
    /// Where the logs go and the Secrets holding the credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<AuditLogConfig>,
    /// Days the logs are kept after the stack is orphaned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_days: Option<i64>,
}

/// `spec.config` of an `AuditLog`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditLogConfig {
    /// URL of the audit-log service the Shoot writes to.
    #[serde(
        rename = "serviceURL",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub service_url: Option<String>,
    /// Secret in the Gardener project with the write credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gardener_secret_name: Option<String>,
    /// Secret in the AuditLog's namespace with the read credentials for the customer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_creds_secret_name: Option<String>,
}

/// The observed state of an `AuditLog`, written by KALM.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditLogStatus {
    /// `Pending`, `RegistrationReady`, `SiemApproved`, `Assigned`, `PendingDelete`,
    /// `Orphaned` or `UnrecoverableError`.
    #[serde(default)]
    pub state: String,
}

/// Values of `status.state` this crate reasons about.
pub mod state {
    /// BTP resources ready, SIEM registration pending: may be reserved.
    pub const REGISTRATION_READY: &str = "RegistrationReady";
    /// SIEM registration done: may be reserved.
    pub const SIEM_APPROVED: &str = "SiemApproved";
    /// Claimed by a Runtime and in use.
    pub const ASSIGNED: &str = "Assigned";
}
