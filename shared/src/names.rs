//! Every label, annotation, finalizer, condition type and reason, Secret name and field manager,
//! with upstream KIM's and Gardener's exact strings, so that objects written by upstream and by
//! us are the same to KEB, Gardener and on-call.

// --- Labels on a Runtime (set by KEB) and copied to the GardenerCluster ---

/// KEB instance ID.
pub const LABEL_INSTANCE_ID: &str = "kyma-project.io/instance-id";
/// Runtime ID; also the GardenerCluster's name and part of the kubeconfig Secret's name.
pub const LABEL_RUNTIME_ID: &str = "kyma-project.io/runtime-id";
/// Shoot name; the kubeconfig controller finds the Secret by this label.
pub const LABEL_SHOOT_NAME: &str = "kyma-project.io/shoot-name";
/// Provider region.
pub const LABEL_REGION: &str = "kyma-project.io/region";
/// Name of the Kyma resource.
pub const LABEL_KYMA_NAME: &str = "operator.kyma-project.io/kyma-name";
/// KEB plan ID.
pub const LABEL_BROKER_PLAN_ID: &str = "kyma-project.io/broker-plan-id";
/// KEB plan name.
pub const LABEL_BROKER_PLAN_NAME: &str = "kyma-project.io/broker-plan-name";
/// Global account ID; becomes the Shoot label `account`.
pub const LABEL_GLOBAL_ACCOUNT_ID: &str = "kyma-project.io/global-account-id";
/// Subaccount ID; becomes the Shoot label `subaccount`.
pub const LABEL_SUBACCOUNT_ID: &str = "kyma-project.io/subaccount-id";
/// Who manages an object; value [`MANAGED_BY_INFRASTRUCTURE_MANAGER`].
pub const LABEL_MANAGED_BY: &str = "operator.kyma-project.io/managed-by";
/// Marks internal objects; value `"true"`.
pub const LABEL_INTERNAL: &str = "operator.kyma-project.io/internal";
/// SAP platform region, for example `cf-eu11`.
pub const LABEL_PLATFORM_REGION: &str = "kyma-project.io/platform-region";
/// Provider type (set by KEB).
pub const LABEL_PROVIDER: &str = "kyma-project.io/provider";
/// Set by the old Provisioner; ADR examples carry it.
pub const LABEL_CONTROLLED_BY_PROVISIONER: &str = "kyma-project.io/controlled-by-provisioner";
/// Set by the migrator; value `"true"`.
pub const LABEL_CREATED_BY_MIGRATOR: &str = "operator.kyma-project.io/created-by-migrator";
/// On the kubeconfig Secret: the GardenerCluster's name.
pub const LABEL_CLUSTER_NAME: &str = "operator.kyma-project.io/cluster-name";

/// Labels KEB must set on every Runtime; upstream refuses conversion with
/// `missing required label <key>` otherwise.
pub const REQUIRED_RUNTIME_LABELS: [&str; 8] = [
    LABEL_INSTANCE_ID,
    LABEL_RUNTIME_ID,
    LABEL_REGION,
    LABEL_KYMA_NAME,
    LABEL_BROKER_PLAN_ID,
    LABEL_BROKER_PLAN_NAME,
    LABEL_GLOBAL_ACCOUNT_ID,
    LABEL_SUBACCOUNT_ID,
];

/// Runtime labels copied unchanged onto the GardenerCluster.
pub const LABELS_COPIED_TO_GARDENER_CLUSTER: [&str; 7] = [
    LABEL_INSTANCE_ID,
    LABEL_RUNTIME_ID,
    LABEL_BROKER_PLAN_ID,
    LABEL_BROKER_PLAN_NAME,
    LABEL_GLOBAL_ACCOUNT_ID,
    LABEL_SUBACCOUNT_ID,
    LABEL_KYMA_NAME,
];

/// Value of [`LABEL_MANAGED_BY`] on objects the infrastructure manager creates.
pub const MANAGED_BY_INFRASTRUCTURE_MANAGER: &str = "infrastructure-manager";

// --- Labels in the runtime cluster (SKR) ---

/// Label on the administrators' ClusterRoleBindings; value [`MANAGED_BY_INFRASTRUCTURE_MANAGER`]
/// (legacy value `reconciler`, never removed).
pub const LABEL_RECONCILER_MANAGED_BY: &str = "reconciler.kyma-project.io/managed-by";
/// Legacy value of [`LABEL_RECONCILER_MANAGED_BY`] on CRBs the reconciler created.
pub const MANAGED_BY_RECONCILER: &str = "reconciler";
/// Label the migrator puts on legacy CRBs; value `to-be-removed-soon`.
pub const LABEL_DEPRECATION: &str = "kyma-project.io/deprecation";

// --- Labels on a Shoot ---

/// Shoot label carrying the global account ID.
pub const SHOOT_LABEL_ACCOUNT: &str = "account";
/// Shoot label carrying the subaccount ID.
pub const SHOOT_LABEL_SUBACCOUNT: &str = "subaccount";
/// Gardener's health summary label on a Shoot (`healthy|progressing|unhealthy|unknown`).
pub const SHOOT_LABEL_STATUS: &str = "shoot.gardener.cloud/status";
/// Seed selector label for the seed's region (`enforceSeedLocation`).
pub const SEED_LABEL_REGION: &str = "seed.gardener.cloud/region";

// --- Annotations on a Runtime ---

/// On a Runtime (ours, not upstream's): the digest of the runtime bootstrapper configuration its
/// cluster was last configured with, so that a replica that takes over (or starts after a change
/// made while none led) configures again the clusters configured with another one.
pub const ANNOTATION_RUNTIME_BOOTSTRAPPER_CONFIG: &str =
    "infrastructuremanager.kyma-project.io/runtime-bootstrapper-config";
/// `"true"` (any case): the Shoot's kube-apiserver audit policy is the ConfigMap
/// [`EXPERIMENTAL_AUDIT_POLICY_CONFIG_MAP`] instead of the configured one (upstream's).
pub const ANNOTATION_EXPERIMENTAL_AUDIT_POLICY: &str =
    "operator.kyma-project.io/experimental-audit-policy";
/// The audit policy ConfigMap of a Runtime with [`ANNOTATION_EXPERIMENTAL_AUDIT_POLICY`].
pub const EXPERIMENTAL_AUDIT_POLICY_CONFIG_MAP: &str = "experimental-audit-policy";
/// `"true"`: patch the Shoot regardless of generation; removed after a successful patch.
pub const ANNOTATION_FORCE_PATCH_RECONCILIATION: &str =
    "operator.kyma-project.io/force-patch-reconciliation";
/// `"true"`: never patch the Shoot; wins over force.
pub const ANNOTATION_SUSPEND_PATCH_RECONCILIATION: &str =
    "operator.kyma-project.io/suspend-patch-reconciliation";
/// On a Runtime: the versions of its registry caches' credentials Secrets in the runtime
/// cluster, as the registry cache controller last read them; on its Shoot: the versions the
/// Shoot's garden Secrets were copied from. They differ after a credentials rotation, which
/// makes the Runtime reconciler patch the Shoot (`kim_shared::registry_cache::credentials_version`).
pub const ANNOTATION_REGISTRY_CACHE_CREDENTIALS: &str =
    "infrastructuremanager.kyma-project.io/registry-cache-credentials";
/// RFC 3339 UTC time a DELETE of the Runtime was confirmed (upstream ADR, proposed 2026).
pub const ANNOTATION_DELETION_CONFIRMED: &str = "operator.kyma-project.io/deletion-confirmed";

// --- Annotations on a GardenerCluster and the kubeconfig Secret ---

/// Presence triggers a kubeconfig rotation; the value is ignored; removed by the controller.
pub const ANNOTATION_FORCE_KUBECONFIG_ROTATION: &str =
    "operator.kyma-project.io/force-kubeconfig-rotation";
/// The Shoot's DNS domain, written on the GardenerCluster.
pub const ANNOTATION_SKR_DOMAIN: &str = "skr-domain";
/// On the kubeconfig Secret: RFC 3339 UTC time of the last kubeconfig write.
pub const ANNOTATION_LAST_SYNC: &str = "operator.kyma-project.io/last-sync";
/// On the admin kubeconfig Secret (ours, not upstream's): when the kubeconfig expires as
/// Gardener issued it (RFC 3339); rotation and the expiration metric follow it when it is
/// earlier than `--kubeconfig-expiration-time` says.
pub const ANNOTATION_VALID_UNTIL: &str =
    "infrastructuremanager.kyma-project.io/kubeconfig-valid-until";
/// On the admin kubeconfig Secret (ours): the GardenerCluster `resourceVersion` whose
/// force-rotation annotation it served, so that a replica taking over before the annotation's
/// removal went through does not sign a second one.
pub const ANNOTATION_FORCE_SERVED: &str =
    "infrastructuremanager.kyma-project.io/forced-rotation-served";

// --- Annotations on a Shoot written by the infrastructure manager ---

/// The runtime ID (maps a Shoot back to its Runtime).
pub const SHOOT_ANNOTATION_RUNTIME_ID: &str = "infrastructuremanager.kyma-project.io/runtime-id";
/// The Runtime generation last applied (decimal).
pub const SHOOT_ANNOTATION_RUNTIME_GENERATION: &str =
    "infrastructuremanager.kyma-project.io/runtime-generation";
/// The Runtime's `licenceType`, only when non-empty.
pub const SHOOT_ANNOTATION_LICENCE_TYPE: &str =
    "infrastructuremanager.kyma-project.io/licence-type";
/// Gardener's grace periods, in seconds, for the finalizers of extended APIs, Kubernetes
/// resources and webhooks when a Shoot is deleted, with the values upstream writes on every
/// Shoot: a stuck finalizer no longer holds up the deletion for Gardener's default of hours.
pub const SHOOT_CLEANUP_GRACE_PERIODS: [(&str, &str); 3] = [
    (
        "shoot.gardener.cloud/cleanup-extended-apis-finalize-grace-period-seconds",
        "120",
    ),
    (
        "shoot.gardener.cloud/cleanup-kubernetes-resources-finalize-grace-period-seconds",
        "120",
    ),
    (
        "shoot.gardener.cloud/cleanup-webhooks-finalize-grace-period-seconds",
        "60",
    ),
];
/// The Provisioner's licence-type annotation, read by the migrator.
pub const SHOOT_ANNOTATION_PROVISIONER_LICENCE_TYPE: &str =
    "kcp.provisioner.kyma-project.io/licence-type";

// --- Gardener annotations ---

/// Gardener refuses to delete a Shoot without this annotation set to `"true"`.
pub const GARDENER_ANNOTATION_CONFIRM_DELETION: &str = "confirmation.gardener.cloud/deletion";
/// Force deletion (after deletion started with certain error codes); cannot be removed.
pub const GARDENER_ANNOTATION_CONFIRM_FORCE_DELETION: &str =
    "confirmation.gardener.cloud/force-deletion";
/// Operations (`reconcile`, `retry`, `maintain`, `rotate-*`, ...), separated by `;`.
pub const GARDENER_ANNOTATION_OPERATION: &str = "gardener.cloud/operation";
/// Operations to run in the next maintenance window.
pub const GARDENER_ANNOTATION_MAINTENANCE_OPERATION: &str = "maintenance.gardener.cloud/operation";
/// Any value; forces an update event.
pub const GARDENER_ANNOTATION_TIMESTAMP: &str = "gardener.cloud/timestamp";
/// Who created the Shoot (set by Gardener).
pub const GARDENER_ANNOTATION_CREATED_BY: &str = "gardener.cloud/created-by";
/// Per-shoot reconcile period (`0m` switches periodic reconciles off).
pub const GARDENER_ANNOTATION_SYNC_PERIOD: &str = "shoot.gardener.cloud/sync-period";
/// gardenlet skips the shoot entirely.
pub const GARDENER_ANNOTATION_IGNORE: &str = "shoot.gardener.cloud/ignore";
/// Who confirmed a deletion (dual approval).
pub const GARDENER_ANNOTATION_CONFIRMED_BY: &str = "deletion.gardener.cloud/confirmed-by";
/// Value of [`GARDENER_ANNOTATION_OPERATION`]: reconcile now.
pub const GARDENER_OPERATION_RECONCILE: &str = "reconcile";
/// Value of [`GARDENER_ANNOTATION_OPERATION`]: retry a failed shoot.
pub const GARDENER_OPERATION_RETRY: &str = "retry";
/// Value of [`GARDENER_ANNOTATION_OPERATION`]: run maintenance now.
pub const GARDENER_OPERATION_MAINTAIN: &str = "maintain";

// --- Finalizers ---

/// Finalizer on a Runtime.
pub const RUNTIME_FINALIZER: &str =
    "runtime-controller.infrastructure-manager.kyma-project.io/deletion-hook";
/// Finalizer gardenlet puts on a Shoot.
pub const GARDENER_FINALIZER: &str = "gardener";

// --- Runtime states (status.state) ---

/// Provisioning, updating or waiting.
pub const STATE_PENDING: &str = "Pending";
/// The cluster exists and is configured.
pub const STATE_READY: &str = "Ready";
/// Deletion is in progress.
pub const STATE_TERMINATING: &str = "Terminating";
/// A step failed.
pub const STATE_FAILED: &str = "Failed";

// --- GardenerCluster states (status.state) ---

/// The kubeconfig Secret is current.
pub const GARDENER_CLUSTER_STATE_READY: &str = "Ready";
/// Writing the kubeconfig Secret failed.
pub const GARDENER_CLUSTER_STATE_ERROR: &str = "Error";

/// Runtime condition types (`status.conditions[].type`).
pub mod condition {
    /// The Shoot exists and is reconciled.
    pub const PROVISIONED: &str = "Provisioned";
    /// The GardenerCluster (and so the kubeconfig Secret) is ready.
    pub const KUBECONFIG_READY: &str = "KubeconfigReady";
    /// OIDC (and upstream's `kyma-provisioning-info` ConfigMap) is configured in the cluster.
    pub const OIDC_AND_CONFIG_MAP_CONFIGURED: &str = "OidcAndConfigMapConfigured";
    /// What earlier versions of this controller wrote for OIDC instead of
    /// [`OIDC_AND_CONFIG_MAP_CONFIGURED`]; removed from a Runtime's status when found.
    pub const LEGACY_OIDC_CONFIGURED: &str = "OidcConfigured";
    /// The administrators are configured.
    pub const CONFIGURED: &str = "Configured";
    /// Deletion progress.
    pub const DEPROVISIONED: &str = "Deprovisioned";
    /// The `kyma-system` namespace exists in the cluster.
    pub const KYMA_SYSTEM_NS_CREATED: &str = "KymaSystemNSCreated";
    /// The registry cache is configured.
    pub const REGISTRY_CACHE_CONFIGURED: &str = "RegistryCacheConfigured";
    /// The runtime bootstrapper is ready.
    pub const RUNTIME_BOOTSTRAPPER_READY: &str = "RuntimeBootstrapperReady";
    /// A dedicated audit log is configured (audit-log ADR).
    pub const CUSTOM_AUDIT_LOG_CONFIGURED: &str = "CustomAuditLogConfigured";
    /// Audit log read credentials are copied into the cluster (audit-log ADR).
    pub const AUDIT_LOG_CREDENTIALS_COPIED: &str = "AuditLogCredentialsCopied";
    /// GardenerCluster condition type.
    pub const KUBECONFIG_MANAGEMENT: &str = "KubeconfigManagement";
}

/// Condition reasons (`status.conditions[].reason`), upstream's exact strings.
pub mod reason {
    /// Work in progress.
    pub const PROCESSING: &str = "Processing";
    /// Processing failed.
    pub const PROCESSING_ERR: &str = "ProcessingErr";
    /// The Runtime was seen for the first time (British spelling, as upstream).
    pub const INITIALISED: &str = "Initialised";
    /// Shoot creation is pending (the same string as the state `Pending`).
    pub const SHOOT_CREATION_PENDING: &str = "Pending";
    /// Shoot creation completed.
    pub const SHOOT_CREATION_COMPLETED: &str = "ShootCreationCompleted";
    /// The GardenerCluster was created.
    pub const GARDENER_CLUSTER_CR_CREATED: &str = "GardenerClusterCRCreated";
    /// The GardenerCluster is ready.
    pub const GARDENER_CLUSTER_CR_READY: &str = "GardenerClusterCRReady";
    /// The Shoot reconcile completed.
    pub const CONFIGURATION_COMPLETED: &str = "ConfigurationCompleted";
    /// Configuring the cluster failed.
    pub const CONFIGURATION_ERROR: &str = "ConfigurationError";
    /// The GardenerCluster was deleted.
    pub const GARDENER_CLUSTER_CR_DELETED: &str = "GardenerClusterCRDeleted";
    /// The Shoot deletion started or failed.
    pub const GARDENER_SHOOT_DELETED: &str = "GardenerShootDeleted";
    /// Deleting the structured authentication ConfigMap failed.
    pub const STRUCTURED_CONFIG_DELETED: &str = "StructuredConfigDeleted";
    /// Runtime -> Shoot conversion failed.
    pub const CONVERSION_ERR: &str = "ConversionErr";
    /// Shoot creation failed.
    pub const CREATION_ERR: &str = "CreationErr";
    /// A Gardener API call failed.
    pub const GARDENER_ERR: &str = "GardenerErr";
    /// Gardener answered "try later" (429, 503, 504, an admission plugin's rate-limit or
    /// not-ready 403, no answer in time): the Runtime stays `Pending` and retries with backoff.
    /// Ours; upstream reports these as `GardenerErr`.
    pub const GARDENER_BUSY: &str = "GardenerBusy";
    /// The Shoot reflects a later generation of the Runtime than the Runtime has (restored from
    /// a backup or created anew): nothing is applied until the force-patch annotation. Ours.
    pub const RUNTIME_BEHIND_SHOOT: &str = "RuntimeBehindShoot";
    /// A Kubernetes API call failed.
    pub const KUBERNETES_ERR: &str = "KubernetesErr";
    /// No audit log tenant for the provider and region.
    pub const AUDIT_LOG_ERR: &str = "AuditLogErr";
    /// Administrators are configured.
    pub const ADMINISTRATORS_CONFIGURED: &str = "AdministratorsConfigured";
    /// OIDC and ConfigMaps are configured.
    pub const OIDC_AND_CONFIG_MAPS_CONFIGURED: &str = "OidcAndConfigMapsConfigured";
    /// Configuring OIDC failed.
    pub const OIDC_CONFIGURATION_ERR: &str = "OidcConfigurationErr";
    /// Writing a ConfigMap failed.
    pub const CONFIG_MAP_ERR: &str = "ConfigMapErr";
    /// Creating the `kyma-system` namespace failed.
    pub const KYMA_SYSTEM_NS_ERROR: &str = "KymaSystemNSError";
    /// The `kyma-system` namespace exists.
    pub const KYMA_SYSTEM_NS_READY: &str = "KymaSystemNSReady";
    /// `enforceSeedLocation` and no usable Seed of the provider in the region: no Shoot is
    /// created.
    pub const SEED_NOT_FOUND: &str = "SeedNotFound";
    /// The registry cache is configured.
    pub const REGISTRY_CACHE_CONFIGURED: &str = "RegistryCacheConfigured";
    /// Configuring the registry cache failed.
    pub const REGISTRY_CACHE_ERROR: &str = "RegistryCacheError";
    /// Configuring registry cache secrets in the garden cluster failed.
    pub const REGISTRY_CACHE_GARDEN_CLUSTER_CONFIGURATION_FAILED: &str =
        "RegistryCacheGardenClusterConfigurationFailed";
    /// Cleaning registry cache secrets in the garden cluster failed.
    pub const REGISTRY_CACHE_GARDEN_CLUSTER_CLEANUP_FAILED: &str =
        "RegistryCacheGardenClusterCleanupFailed";
    /// Runtime bootstrapper status unknown.
    pub const RUNTIME_BOOTSTRAPPER_STATUS_UNKNOWN: &str = "RuntimeBootstrapperStatusUnknown";
    /// Runtime bootstrapper installation failed.
    pub const RUNTIME_BOOTSTRAPPER_INSTALLATION_FAILED: &str =
        "RuntimeBootstrapperInstallationFailed";
    /// Runtime bootstrapper installation in progress.
    pub const RUNTIME_BOOTSTRAPPER_INSTALLATION_IN_PROGRESS: &str =
        "RuntimeBootstrapperInstallationInProgress";
    /// Runtime bootstrapper configured.
    pub const RUNTIME_BOOTSTRAPPER_CONFIGURED: &str = "RuntimeBootstrapperConfigured";
    /// Runtime bootstrapper upgrade failed.
    pub const RUNTIME_BOOTSTRAPPER_UPGRADE_FAILED: &str = "RuntimeBootstrapperUpgradeFailed";
    /// Runtime bootstrapper upgrade in progress.
    pub const RUNTIME_BOOTSTRAPPER_UPGRADE_IN_PROGRESS: &str =
        "RuntimeBootstrapperUpgradeInProgress";
    /// Runtime bootstrapper configuration failed.
    pub const RUNTIME_BOOTSTRAPPER_CONFIGURATION_FAILED: &str =
        "RuntimeBootstrapperConfigurationFailed";
    /// Dedicated audit log configuration failed (audit-log ADR).
    pub const CUSTOM_AUDIT_LOG_ERR: &str = "CustomAuditLogErr";
    /// Dedicated audit log configured (audit-log ADR).
    pub const CUSTOM_AUDIT_LOG_CONFIGURED: &str = "CustomAuditLogConfigured";
    /// Copying the audit log read credentials into the cluster failed.
    pub const CREDENTIALS_COPY_ERR: &str = "CredentialsCopyErr";
    /// The audit log read credentials are copied into the cluster.
    pub const CREDENTIALS_COPIED: &str = "CredentialsCopied";

    // GardenerCluster (condition type `KubeconfigManagement`).

    /// The kubeconfig Secret was created (message "Secret created successfully.").
    pub const KUBECONFIG_SECRET_CREATED: &str = "KubeconfigSecretCreated";
    /// The kubeconfig Secret was rotated (message "Secret rotated successfully.").
    pub const KUBECONFIG_SECRET_ROTATED: &str = "KubeconfigSecretRotated";
    /// Reading the Secret failed (message "Failed to get secret.").
    pub const FAILED_TO_CHECK_SECRET: &str = "FailedToCheckSecret";
    /// Creating the Secret failed (message "Failed to create secret."); upstream's value
    /// carries the `ConditionReason` prefix literally.
    pub const FAILED_TO_CREATE_SECRET: &str = "ConditionReasonFailedToCreateSecret";
    /// Clearing the Secret for a forced rotation failed; prefix literal as upstream.
    pub const FAILED_TO_DELETE_SECRET: &str = "ConditionReasonFailedToDeleteSecret";
    /// Updating the Secret failed (message "Failed to rotate secret.").
    pub const FAILED_TO_UPDATE_SECRET: &str = "FailedToUpdateSecret";
    /// Getting a kubeconfig from Gardener failed (message "Failed to get kubeconfig.").
    pub const FAILED_TO_GET_KUBECONFIG: &str = "FailedToGetKubeconfig";
}

// --- Secrets and ConfigMaps ---

/// Data key of the kubeconfig in the kubeconfig Secret.
pub const KUBECONFIG_SECRET_KEY: &str = "config";

/// Name of the kubeconfig Secret of a runtime: `kubeconfig-<runtime-id>`.
pub fn kubeconfig_secret_name(runtime_id: &str) -> String {
    format!("kubeconfig-{runtime_id}")
}

/// Name of the structured authentication ConfigMap of a shoot: `structured-auth-config-<shoot>`.
pub fn structured_auth_config_map_name(shoot_name: &str) -> String {
    format!("structured-auth-config-{shoot_name}")
}

/// Data key of the `AuthenticationConfiguration` in the structured authentication ConfigMap.
pub const STRUCTURED_AUTH_CONFIG_KEY: &str = "config.yaml";

/// Name of the `OpenIDConnect` resource for `additionalOidcConfig[index]`: `kyma-oidc-<index>`.
pub fn oidc_resource_name(index: usize) -> String {
    format!("kyma-oidc-{index}")
}

/// Gardener project namespace: `garden-<project>`.
pub fn gardener_project_namespace(project: &str) -> String {
    format!("garden-{project}")
}

/// Name of the audit log credentials entry in a Shoot's `spec.resources`.
pub const AUDITLOG_CREDENTIALS_RESOURCE: &str = "auditlog-credentials";

/// `generateName` of administrator ClusterRoleBindings in the cluster.
pub const ADMIN_CRB_GENERATE_NAME: &str = "admin-";

// --- Field managers and controller names ---

/// Field manager for Shoot writes (server-side apply and updates), as upstream.
pub const FIELD_MANAGER: &str = "kim";
/// Field manager of upstream's registry cache controller when it applies a Runtime.
pub const FIELD_MANAGER_CUSTOM_CONFIG: &str = "customconfigcontroller";
/// Event recorder name of the Runtime controller.
pub const RUNTIME_CONTROLLER_NAME: &str = "runtime-controller";
/// Upstream's leader election ID.
pub const LEADER_ELECTION_ID: &str = "f1c68560.kyma-project.io";
/// The namespace upstream restricts itself to.
pub const KCP_NAMESPACE: &str = "kcp-system";

/// Gardener extension types the infrastructure manager writes.
pub mod extension {
    /// Egress/ingress filtering.
    pub const NETWORKING_FILTER: &str = "shoot-networking-filter";
    /// Certificates.
    pub const CERT_SERVICE: &str = "shoot-cert-service";
    /// DNS.
    pub const DNS_SERVICE: &str = "shoot-dns-service";
    /// OIDC authentication.
    pub const OIDC_SERVICE: &str = "shoot-oidc-service";
    /// Audit log forwarding.
    pub const AUDITLOG_SERVICE: &str = "shoot-auditlog-service";
    /// Image registry cache.
    pub const REGISTRY_CACHE: &str = "registry-cache";
    /// kube-apiserver ACL.
    pub const ACL: &str = "acl";
    /// NVIDIA OpenShell.
    pub const NVIDIA_OPENSHELL: &str = "shoot-nvidia-openshell";
}
