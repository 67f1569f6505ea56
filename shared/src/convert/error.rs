//! Why a Runtime cannot be converted. Each variant names the Runtime field at fault (or, for a
//! broken live Shoot, the Shoot field) and says what would be valid; `docs/conversion.md` lists
//! them with the validation rule that rejects the same Runtime at admission.

/// A Runtime the conversion cannot turn into a Shoot.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// A label the Shoot's annotations or labels are built from is missing or empty.
    #[error(
        "metadata.labels[{label}]: required label is missing or empty; the Shoot is annotated and labelled with it"
    )]
    MissingLabel {
        /// The label key.
        label: &'static str,
    },

    /// `spec.shoot.provider.workers` does not hold exactly one pool.
    #[error(
        "spec.shoot.provider.workers: exactly one main worker pool is required, found {found}; \
         list further pools in spec.shoot.provider.additionalWorkers"
    )]
    MainWorkerCount {
        /// Pools found.
        found: usize,
    },

    /// `spec.shoot.networking.nodes` is not an IPv4 CIDR.
    #[error("spec.shoot.networking.nodes: `{value}` is not an IPv4 CIDR such as 10.250.0.0/16")]
    NodesCidr {
        /// The value found.
        value: String,
    },

    /// The nodes CIDR is too large or too small to be cut into zone subnets.
    #[error(
        "spec.shoot.networking.nodes: the prefix /{prefix} cannot be split into {provider} zone \
         subnets; use a prefix from /{min} to /{max}"
    )]
    NodesPrefix {
        /// Provider type.
        provider: &'static str,
        /// The prefix length found.
        prefix: u8,
        /// Shortest prefix the split supports.
        min: u8,
        /// Longest prefix the split supports.
        max: u8,
    },

    /// `spec.shoot.networking.pods` is no IPv4 CIDR from /2 to /32, or has fewer usable
    /// addresses than worker pools that set `maxPods`.
    #[error("spec.shoot.networking.pods: {message}")]
    PodsNetwork {
        /// What is wrong and what would be valid.
        message: String,
    },

    /// Too few or too many distinct zones over all worker pools.
    #[error(
        "spec.shoot.provider.workers[0].zones: the worker pools (workers and additionalWorkers) \
         use {count} distinct zones; {provider} needs {min} to {max}"
    )]
    ZoneCount {
        /// Provider type.
        provider: &'static str,
        /// Distinct zones found (on patch: live zones plus added ones).
        count: usize,
        /// Fewest zones the provider needs.
        min: usize,
        /// Most zones the provider allows.
        max: usize,
    },

    /// An Azure zone that is not a number from 1 to 8.
    #[error("{field}: Azure zone `{zone}` is not valid; Azure zones are the numbers 1 to 8")]
    AzureZone {
        /// Path of the zone, e.g. `spec.shoot.provider.workers[0].zones[1]`.
        field: String,
        /// The zone found.
        zone: String,
    },

    /// No audit-log tenant for the provider and region while audit logs are mandatory.
    #[error(
        "spec.shoot.region: no audit-log tenant is configured for provider `{provider}` in region \
         `{region}` and audit logs are mandatory; use a region of the audit-log tenant file"
    )]
    AuditLogTenant {
        /// Provider type.
        provider: &'static str,
        /// The region found.
        region: String,
    },

    /// A registry cache with credentials whose garden Secret is not synchronised yet; nothing in
    /// the Runtime is at fault, the conversion succeeds once the Secret is there.
    #[error(
        "spec.imageRegistryCache[{index}].config.secretReferenceName: the garden Secret with the \
         credentials of registry cache {uid} is not there yet; the Shoot is updated once it is"
    )]
    RegistryCacheSecret {
        /// Position of the cache in `spec.imageRegistryCache`.
        index: usize,
        /// The cache's UID.
        uid: String,
    },

    /// The live Shoot lacks what a patch needs; nothing in the Runtime is at fault.
    #[error("live Shoot {field}: {message}")]
    LiveShoot {
        /// Path in the Shoot, e.g. `spec.provider.infrastructureConfig`.
        field: &'static str,
        /// What is missing.
        message: &'static str,
    },
}

impl ConvertError {
    /// The Runtime field at fault, as a validation `Violation` names it; `None` for
    /// [`ConvertError::LiveShoot`], where the live Shoot is at fault, and for
    /// [`ConvertError::RegistryCacheSecret`], where a Secret is not synchronised yet.
    pub fn runtime_field(&self) -> Option<String> {
        Some(match self {
            Self::MissingLabel { label } => format!("metadata.labels[{label}]"),
            Self::MainWorkerCount { .. } => "spec.shoot.provider.workers".to_owned(),
            Self::NodesCidr { .. } | Self::NodesPrefix { .. } => {
                "spec.shoot.networking.nodes".to_owned()
            }
            Self::PodsNetwork { .. } => "spec.shoot.networking.pods".to_owned(),
            Self::ZoneCount { .. } => "spec.shoot.provider.workers[0].zones".to_owned(),
            Self::AzureZone { field, .. } => field.clone(),
            Self::AuditLogTenant { .. } => "spec.shoot.region".to_owned(),
            Self::LiveShoot { .. } | Self::RegistryCacheSecret { .. } => return None,
        })
    }
}
