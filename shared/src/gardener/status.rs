//! `status` of a Shoot: the last operation and its errors, conditions, addresses.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `status` of a Shoot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ShootStatus {
    /// Addresses of the kube-apiserver; merged by `name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertised_addresses: Option<Vec<ShootAdvertisedAddress>>,
    /// Identity of the cluster, immutable once set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_identity: Option<String>,
    /// Health conditions (`APIServerAvailable`, `ControlPlaneHealthy`, `EveryNodeReady`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<GardenerCondition>>,
    /// The rotations of the credentials Gardener generated for the cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials: Option<ShootCredentials>,
    /// Constraints (`HibernationPossible`, `MaintenancePreconditionsSatisfied`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraints: Option<Vec<GardenerCondition>>,
    /// The Gardener version that last acted on the shoot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gardener: Option<GardenerInfo>,
    /// Whether the shoot is hibernated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hibernated: Option<bool>,
    /// Errors of the last operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_errors: Option<Vec<LastError>>,
    /// Time of the last hibernation trigger.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_hibernation_trigger_time: Option<Time>,
    /// The last maintenance operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_maintenance: Option<LastMaintenance>,
    /// Type, state and progress of the last operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    /// Start of a control plane migration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration_start_time: Option<Time>,
    /// Networks actually used by the shoot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub networking: Option<NetworkingStatus>,
    /// The generation gardenlet last acted on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Start of the current retry cycle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_cycle_start_time: Option<Time>,
    /// The seed the shoot runs on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed_name: Option<String>,
    /// `shoot--<project>--<shoot>`: seed namespace and infrastructure prefix.
    #[serde(rename = "technicalID", skip_serializing_if = "Option::is_none")]
    pub technical_id: Option<String>,
    /// Unique ID of the shoot, immutable once set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// `status.advertisedAddresses[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct ShootAdvertisedAddress {
    /// Application the address belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub application: Option<String>,
    /// `external`, `internal`, `unmanaged`, `wildcard-tls-seed-bound` or `service-account-issuer`.
    pub name: String,
    /// The URL, for example `https://api.<domain>`.
    pub url: String,
}

/// A Gardener condition (shoot `conditions` and `constraints`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GardenerCondition {
    /// Error codes of the condition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codes: Option<Vec<String>>,
    /// Last status change.
    pub last_transition_time: Time,
    /// Last update.
    pub last_update_time: Time,
    /// Human-readable message.
    pub message: String,
    /// Machine-readable reason.
    pub reason: String,
    /// `True`, `False`, `Unknown` or `Progressing`.
    pub status: String,
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
}

/// `status.gardener`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct GardenerInfo {
    /// Identity of the gardenlet.
    pub id: String,
    /// Name of the gardenlet.
    pub name: String,
    /// Gardener version.
    pub version: String,
}

/// Gardener `LastOperation`; also reported as `status.shootLastOperation` of a Runtime.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastOperation {
    /// Human-readable description of the operation's progress.
    pub description: String,
    /// Time of the last update.
    pub last_update_time: Time,
    /// Progress in percent (0-100).
    pub progress: i32,
    /// `Processing`, `Succeeded`, `Error`, `Failed`, `Pending` or `Aborted`
    /// (see [`last_operation`](crate::gardener::last_operation)).
    pub state: String,
    /// `Create`, `Reconcile`, `Delete`, `Migrate`, `Restore` or `LiveMigrate`.
    #[serde(rename = "type")]
    pub type_: String,
}

/// Gardener `LastError`; also reported as `status.shootLastErrors` of a Runtime.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastError {
    /// Error codes such as `ERR_INFRA_QUOTA_EXCEEDED`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codes: Option<Vec<String>>,
    /// Human-readable description.
    pub description: String,
    /// Time of the last update.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    /// ID of the failed task.
    #[serde(rename = "taskID", skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

/// `status.credentials`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ShootCredentials {
    /// The state of the rotations (of the certificate authorities and of the ServiceAccount
    /// token signing key; the others are not read here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rotation: Option<ShootCredentialsRotation>,
}

/// `status.credentials.rotation`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ShootCredentialsRotation {
    /// The rotation of the cluster's certificate authorities (`rotate-ca-start`, then
    /// `rotate-ca-complete`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_authorities: Option<TwoStepRotation>,
    /// The rotation of the key that signs ServiceAccount tokens
    /// (`rotate-serviceaccount-key-start`, then `rotate-serviceaccount-key-complete`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_key: Option<TwoStepRotation>,
}

/// A rotation in two steps: the start adds new credentials next to the old ones (phase
/// `Preparing`, then `Prepared`, when `lastInitiationFinishedTime` is set); the completion
/// removes the old ones (`Completing`, then `Completed` at `lastCompletionTime`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TwoStepRotation {
    /// `Preparing`, `Prepared`, `Completing` or `Completed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// When the last rotation was started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_initiation_time: Option<Time>,
    /// When the last rotation's new credentials were in place (phase `Prepared`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_initiation_finished_time: Option<Time>,
    /// When the completion of the last rotation was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_completion_triggered_time: Option<Time>,
    /// When the last rotation was completed (the old credentials removed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_completion_time: Option<Time>,
}

impl TwoStepRotation {
    /// Since when what the old credentials signed is on its way out: when the last rotation's
    /// new credentials were in place, or, from a Gardener that does not report that, when it was
    /// completed. What was signed (or a CA bundle read) before then stops working when the
    /// rotation completes.
    pub fn new_since(&self) -> Option<jiff::Timestamp> {
        self.last_initiation_finished_time
            .as_ref()
            .or(self.last_completion_time.as_ref())
            .map(|t| t.0)
    }
}

impl ShootCredentials {
    fn rotation(&self) -> Option<&ShootCredentialsRotation> {
        self.rotation.as_ref()
    }

    /// [`TwoStepRotation::new_since`] of the certificate authorities, if they were rotated.
    pub fn new_cas_since(&self) -> Option<jiff::Timestamp> {
        self.rotation()?
            .certificate_authorities
            .as_ref()?
            .new_since()
    }

    /// [`TwoStepRotation::new_since`] of the ServiceAccount token signing key, if it was
    /// rotated.
    pub fn new_service_account_key_since(&self) -> Option<jiff::Timestamp> {
        self.rotation()?.service_account_key.as_ref()?.new_since()
    }
}

impl ShootStatus {
    /// [`ShootCredentials::new_cas_since`] of the Shoot, if any.
    pub fn new_cas_since(&self) -> Option<jiff::Timestamp> {
        self.credentials.as_ref()?.new_cas_since()
    }
}

/// `status.lastMaintenance`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LastMaintenance {
    /// What the maintenance did.
    pub description: String,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Result of the maintenance.
    pub state: String,
    /// When it was triggered.
    pub triggered_time: Time,
}

/// `status.networking`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NetworkingStatus {
    /// Egress CIDRs of the shoot.
    #[serde(rename = "egressCIDRs", skip_serializing_if = "Option::is_none")]
    pub egress_cidrs: Option<Vec<String>>,
    /// Node networks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    /// Pod networks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods: Option<Vec<String>>,
    /// Service networks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub services: Option<Vec<String>>,
}
