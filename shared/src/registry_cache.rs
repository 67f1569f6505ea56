//! Registry cache (upstream ADRs 002 and 003): the decisions of the registry cache controller
//! (runtime cluster -> `spec.imageRegistryCache`) and of the garden Secret synchronisation
//! (runtime cluster credentials -> Secrets in the Gardener project), without I/O.
//!
//! A Runtime's cache list may have been written by anyone who may write Runtimes, so nothing
//! in it is trusted to choose what is copied: a Secret is only copied when its namespace is no
//! system namespace, its name is a plain object name, the runtime cluster holds a
//! `RegistryCacheConfig` of that name, namespace and UID that references it, and it holds
//! exactly the keys the `registry-cache` extension reads.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::api::runtime::{ImageRegistryCache, RegistryCacheConfigSpec};
use crate::validation::syntax::{is_dns_label, is_dns_subdomain};

/// Group of `RegistryCacheConfig` (the registry-cache Kyma module).
pub const CONFIG_GROUP: &str = "core.kyma-project.io";
/// Version of `RegistryCacheConfig`.
pub const CONFIG_VERSION: &str = "v1beta1";
/// Kind of the runtime cluster's cache configuration.
pub const CONFIG_KIND: &str = "RegistryCacheConfig";
/// Plural of [`CONFIG_KIND`].
pub const CONFIG_PLURAL: &str = "registrycacheconfigs";
/// The Kyma CRD whose presence says the runtime cluster has Kyma's lifecycle manager.
pub const KYMA_CRD: &str = "kymas.operator.kyma-project.io";
/// Group/version of the Kyma resource.
pub const KYMA_API_VERSION: &str = "operator.kyma-project.io/v1beta2";
/// Name and namespace of the runtime cluster's Kyma resource.
pub const KYMA_NAME: &str = "default";
/// Namespace of [`KYMA_NAME`].
pub const KYMA_NAMESPACE: &str = "kyma-system";
/// Kyma module whose presence in `spec.modules` enables the registry cache.
pub const MODULE_NAME: &str = "registry-cache";
/// Field manager of the cache list in the Runtime (upstream's registry cache controller).
pub const FIELD_MANAGER: &str = "registrycachecontroller";
/// Component name in the runtime watcher's listener path `/v2/<component>/event`.
pub const LISTENER_COMPONENT: &str = "infrastructure-manager-registry-cache";
/// Longest body the listener accepts (the runtime watcher's listener's limit).
pub const LISTENER_BODY_LIMIT: usize = 16 * 1024;
/// Longest `X-Forwarded-Client-Cert` value the listener reads.
pub const XFCC_LIMIT: usize = 32 * 1024;
/// Header in which the KCP gateway passes the runtime watcher's client certificate.
pub const XFCC_HEADER: &str = "x-forwarded-client-cert";

/// Label of garden Secrets: the Runtime they belong to.
pub const LABEL_RUNTIME_ID: &str = crate::names::LABEL_RUNTIME_ID;
/// Label of garden Secrets: the UID of the `RegistryCacheConfig` they serve.
pub const LABEL_CACHE_ID: &str = "kyma-project.io/registry-cache-id";
/// Label of garden Secrets: who wrote them.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY: &str = "infrastructure-manager";
/// Label of a garden Secret replaced by a newer one, deleted after the Shoot moved on.
pub const LABEL_DIRTY: &str = "kyma-project.io/dirty";
/// Annotation of garden Secrets: the `RegistryCacheConfig`'s name.
pub const ANNOTATION_CACHE_NAME: &str = "kyma-project.io/registry-cache-name";
/// Annotation of garden Secrets: the `RegistryCacheConfig`'s namespace.
pub const ANNOTATION_CACHE_NAMESPACE: &str = "kyma-project.io/registry-cache-namespace";
/// Prefix of garden Secret names (and of their `spec.resources` entries in the Shoot).
pub const SECRET_PREFIX: &str = "reg-cache-";
/// The data keys the `registry-cache` extension reads from a credentials Secret.
pub const CREDENTIAL_KEYS: [&str; 2] = ["password", "username"];

/// Label selector of every garden Secret of the registry cache.
pub fn all_secrets_selector() -> String {
    format!("{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_CACHE_ID}")
}

/// Label selector of the garden Secrets of one Runtime.
pub fn runtime_secrets_selector(runtime_id: &str) -> String {
    format!("{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_RUNTIME_ID}={runtime_id},{LABEL_CACHE_ID}")
}

/// Whether the Kyma resource of a runtime cluster lists the registry-cache module.
pub fn module_enabled(kyma: &Value) -> bool {
    kyma["spec"]["modules"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["name"] == MODULE_NAME))
}

/// A `RegistryCacheConfig` of the runtime cluster whose spec does not read as one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("RegistryCacheConfig {namespace}/{name} cannot be read: {field}: {reason}")]
pub struct UnreadableConfig {
    /// The config's namespace.
    pub namespace: String,
    /// The config's name.
    pub name: String,
    /// Where in it (`spec.volume.size`).
    pub field: String,
    /// What is wrong there.
    pub reason: String,
}

/// The Runtime's cache list from the runtime cluster's `RegistryCacheConfig` objects, in the
/// order listed. An object without name, namespace or UID is left out (an API server returns
/// none such). A spec that does not read is an error, not a left-out cache: leaving it out
/// would remove a working cache from the Shoot (upstream's typed list fails as a whole too).
pub fn caches_from_configs(configs: &[Value]) -> Result<Vec<ImageRegistryCache>, UnreadableConfig> {
    let mut caches = Vec::with_capacity(configs.len());
    for c in configs {
        let meta = &c["metadata"];
        let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
        let (Some(name), Some(namespace), Some(uid)) = (
            text(&meta["name"]),
            text(&meta["namespace"]),
            text(&meta["uid"]),
        ) else {
            continue;
        };
        let config = crate::api::decode_field::<RegistryCacheConfigSpec>(&c["spec"], "spec")
            .map_err(|e| UnreadableConfig {
                namespace: namespace.clone(),
                name: name.clone(),
                field: e.field,
                reason: e.reason,
            })?;
        caches.push(ImageRegistryCache {
            name,
            namespace,
            uid,
            config,
        });
    }
    Ok(caches)
}

/// The caches that reference credentials.
pub fn with_credentials(
    caches: &[ImageRegistryCache],
) -> impl Iterator<Item = &ImageRegistryCache> {
    caches.iter().filter(|c| {
        c.config
            .secret_reference_name
            .as_deref()
            .is_some_and(|s| !s.is_empty())
    })
}

/// The value of `names::ANNOTATION_REGISTRY_CACHE_CREDENTIALS`: for each cache with
/// credentials, in list order, `<cache UID>=<resourceVersion of its credentials Secret>` (empty
/// when the Secret is missing), comma-separated; `None` when no cache has credentials. Any
/// change of a credentials Secret changes its resourceVersion, and the value names no data.
/// `resource_version` answers for a cache's `(namespace, secretReferenceName)`.
pub fn credentials_version<'a>(
    caches: &'a [ImageRegistryCache],
    mut resource_version: impl FnMut(&'a str, &'a str) -> Option<String>,
) -> Option<String> {
    let parts: Vec<String> = with_credentials(caches)
        .map(|c| {
            let secret = c
                .config
                .secret_reference_name
                .as_deref()
                .unwrap_or_default();
            let version = resource_version(&c.namespace, secret).unwrap_or_default();
            format!("{}={version}", c.uid)
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(","))
}

/// Why the credentials of a cache are not copied. Messages name objects, never Secret data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The namespace is not a namespace name, or one of the cluster's system namespaces.
    #[error("registry cache {name}: namespace {namespace:?} may not hold registry credentials")]
    Namespace {
        /// The `RegistryCacheConfig`'s name.
        name: String,
        /// The namespace given.
        namespace: String,
    },
    /// `secretReferenceName` is not an object name.
    #[error("registry cache {name}: secretReferenceName {secret:?} is not a Secret name")]
    SecretName {
        /// The `RegistryCacheConfig`'s name.
        name: String,
        /// The name given.
        secret: String,
    },
    /// The runtime cluster holds no `RegistryCacheConfig` of that name, namespace and UID
    /// that references this Secret.
    #[error(
        "registry cache {namespace}/{name}: the runtime cluster holds no RegistryCacheConfig \
         with UID {uid} that references Secret {secret:?}"
    )]
    NoConfig {
        /// The name given.
        name: String,
        /// The namespace given.
        namespace: String,
        /// The UID given.
        uid: String,
        /// The Secret given.
        secret: String,
    },
    /// The runtime cluster holds no such Secret.
    #[error("registry cache {namespace}/{name}: the runtime cluster holds no Secret {secret:?}")]
    NoSecret {
        /// The `RegistryCacheConfig`'s name.
        name: String,
        /// Its namespace.
        namespace: String,
        /// The Secret.
        secret: String,
    },
    /// The Secret does not hold exactly `username` and `password`.
    #[error(
        "registry cache {namespace}/{name}: Secret {secret:?} must hold exactly the keys \
         username and password"
    )]
    Keys {
        /// The `RegistryCacheConfig`'s name.
        name: String,
        /// Its namespace.
        namespace: String,
        /// The Secret.
        secret: String,
    },
    /// A value of the Secret is longer than [`MAX_CREDENTIAL_BYTES`].
    #[error(
        "registry cache {namespace}/{name}: the {key} of Secret {secret:?} is longer than \
         {MAX_CREDENTIAL_BYTES} bytes"
    )]
    TooLarge {
        /// The `RegistryCacheConfig`'s name.
        name: String,
        /// Its namespace.
        namespace: String,
        /// The Secret.
        secret: String,
        /// The key whose value is too long.
        key: String,
    },
}

/// The longest username or password copied into the Gardener project. Registry credentials
/// are short (a JSON service-account key, the longest in use, is about 2.5 KiB); the bound
/// keeps one runtime cluster from filling the project's etcd through its Secrets.
pub const MAX_CREDENTIAL_BYTES: usize = 16 * 1024;

/// Namespaces whose Secrets are never copied: the cluster's own and Gardener's (`kube-*`,
/// `garden*`), and `kyma-system`, where the infrastructure manager puts KCP credentials.
pub fn is_system_namespace(ns: &str) -> bool {
    ns.starts_with("kube-") || ns == "kube" || ns.starts_with("garden") || ns == "kyma-system"
}

/// The Secret a cache's credentials are read from, `(namespace, name)`, after the checks that
/// need only the Runtime's entry; `Ok(None)` for a cache without credentials.
pub fn credentials_source(cache: &ImageRegistryCache) -> Result<Option<(&str, &str)>, Refusal> {
    let Some(secret) = cache
        .config
        .secret_reference_name
        .as_deref()
        .filter(|s| !s.is_empty())
    else {
        return Ok(None);
    };
    if !is_dns_label(&cache.namespace) || is_system_namespace(&cache.namespace) {
        return Err(Refusal::Namespace {
            name: cache.name.clone(),
            namespace: cache.namespace.clone(),
        });
    }
    if !is_dns_subdomain(secret) {
        return Err(Refusal::SecretName {
            name: cache.name.clone(),
            secret: secret.to_owned(),
        });
    }
    Ok(Some((cache.namespace.as_str(), secret)))
}

/// Checks the runtime cluster's `RegistryCacheConfig` (`None`: not found) against the
/// Runtime's entry: same UID and the same `secretReferenceName`.
pub fn check_config(cache: &ImageRegistryCache, live: Option<&Value>) -> Result<(), Refusal> {
    let secret = cache
        .config
        .secret_reference_name
        .clone()
        .unwrap_or_default();
    let matches = live.is_some_and(|c| {
        c["metadata"]["uid"] == cache.uid.as_str()
            && c["metadata"]["name"] == cache.name.as_str()
            && c["metadata"]["namespace"] == cache.namespace.as_str()
            && c["spec"]["secretReferenceName"] == secret.as_str()
    });
    if matches {
        Ok(())
    } else {
        Err(Refusal::NoConfig {
            name: cache.name.clone(),
            namespace: cache.namespace.clone(),
            uid: cache.uid.clone(),
            secret,
        })
    }
}

/// Checks the credentials Secret, given as (key, value length) pairs: exactly `username` and
/// `password`, each at most [`MAX_CREDENTIAL_BYTES`] long.
pub fn check_keys<'a>(
    cache: &ImageRegistryCache,
    entries: impl IntoIterator<Item = (&'a str, usize)>,
) -> Result<(), Refusal> {
    let entries: Vec<(&str, usize)> = entries.into_iter().collect();
    let secret = || {
        cache
            .config
            .secret_reference_name
            .clone()
            .unwrap_or_default()
    };
    let keys: BTreeSet<&str> = entries.iter().map(|(k, _)| *k).collect();
    if keys != BTreeSet::from(CREDENTIAL_KEYS) {
        return Err(Refusal::Keys {
            name: cache.name.clone(),
            namespace: cache.namespace.clone(),
            secret: secret(),
        });
    }
    match entries.iter().find(|(_, len)| *len > MAX_CREDENTIAL_BYTES) {
        Some((key, _)) => Err(Refusal::TooLarge {
            name: cache.name.clone(),
            namespace: cache.namespace.clone(),
            secret: secret(),
            key: (*key).to_owned(),
        }),
        None => Ok(()),
    }
}

/// What the synchronisation knows of a garden Secret of the registry cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GardenSecret {
    /// Its name.
    pub name: String,
    /// Its [`LABEL_CACHE_ID`].
    pub cache_uid: String,
    /// Its [`LABEL_RUNTIME_ID`].
    pub runtime_id: String,
    /// Labelled [`LABEL_DIRTY`]: replaced by a newer one.
    pub dirty: bool,
    /// Labelled as ours ([`LABEL_MANAGED_BY`]).
    pub ours: bool,
    /// Its `creationTimestamp`.
    pub created: Option<jiff::Timestamp>,
}

impl GardenSecret {
    /// Reads the labels of a Secret; `None` when it is not a registry cache Secret of ours.
    pub fn from_labels(name: &str, labels: &BTreeMap<String, String>) -> Option<Self> {
        let ours = labels
            .get(LABEL_MANAGED_BY)
            .is_some_and(|v| v == MANAGED_BY);
        let cache_uid = labels.get(LABEL_CACHE_ID).filter(|v| !v.is_empty())?;
        let runtime_id = labels.get(LABEL_RUNTIME_ID).filter(|v| !v.is_empty())?;
        (ours && name.starts_with(SECRET_PREFIX)).then(|| Self {
            name: name.to_owned(),
            cache_uid: cache_uid.clone(),
            runtime_id: runtime_id.clone(),
            dirty: labels.get(LABEL_DIRTY).is_some_and(|v| v == "true"),
            ours,
            created: None,
        })
    }
}

/// Per cache UID, the name of its current garden Secret (for the conversion and the sync): Secrets
/// of this Runtime only, never a dirty one, and of two the older (then the first by name). A
/// second one is a duplicate (a create whose answer was lost lands after it was made again);
/// it stays until the sync replaces the current one or the Runtime goes, because a Shoot
/// patched between the two creates may reference either.
pub fn secret_names(secrets: &[GardenSecret], runtime_id: &str) -> BTreeMap<String, String> {
    current_candidates(secrets, runtime_id)
        .filter_map(|s| current(secrets, runtime_id, &s.cache_uid))
        .map(|s| (s.cache_uid.clone(), s.name.clone()))
        .collect()
}

/// Older first, then by name.
fn age_order(s: &GardenSecret) -> (Option<jiff::Timestamp>, &str) {
    (s.created, s.name.as_str())
}

/// The current garden Secret of one cache (the one [`secret_names`] names for it).
pub fn current<'a>(
    secrets: &'a [GardenSecret],
    runtime_id: &'a str,
    cache_uid: &str,
) -> Option<&'a GardenSecret> {
    current_candidates(secrets, runtime_id)
        .filter(|s| s.cache_uid == cache_uid)
        .min_by(|a, b| age_order(a).cmp(&age_order(b)))
}

fn current_candidates<'a>(
    secrets: &'a [GardenSecret],
    runtime_id: &'a str,
) -> impl Iterator<Item = &'a GardenSecret> {
    secrets
        .iter()
        .filter(move |s| s.ours && !s.dirty && s.runtime_id == runtime_id)
}

/// The garden Secrets of this Runtime to delete: replaced ones and those of caches that no
/// longer reference credentials (upstream's `DeleteUnused`).
pub fn unused<'a>(
    secrets: &'a [GardenSecret],
    runtime_id: &str,
    caches: &[ImageRegistryCache],
) -> Vec<&'a str> {
    let wanted: BTreeSet<&str> = with_credentials(caches).map(|c| c.uid.as_str()).collect();
    secrets
        .iter()
        .filter(|s| s.ours && s.runtime_id == runtime_id)
        .filter(|s| s.dirty || !wanted.contains(s.cache_uid.as_str()))
        .map(|s| s.name.as_str())
        .collect()
}

/// What to do for one cache with credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncStep {
    /// No garden Secret yet: create one.
    Create,
    /// The garden Secret holds the same data.
    Keep,
    /// The data changed: label the old one dirty (Secrets are immutable) and create a new one.
    Replace {
        /// The Secret to label dirty.
        old: String,
    },
}

/// Decides the step for a cache from its current garden Secret (`None`: none) and whether that
/// Secret's data equals the runtime cluster's.
pub fn sync_step(current: Option<&GardenSecret>, same_data: bool) -> SyncStep {
    match current {
        None => SyncStep::Create,
        Some(_) if same_data => SyncStep::Keep,
        Some(s) => SyncStep::Replace {
            old: s.name.clone(),
        },
    }
}

/// The name of a new garden Secret, `reg-cache-<uuid>` with a version 4 UUID from `random`.
pub fn new_secret_name(random: u128) -> String {
    let v = (random & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    let h = format!("{v:032x}");
    format!(
        "{SECRET_PREFIX}{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The garden Secret (JSON) holding a cache's credentials: immutable, labelled with the
/// Runtime and the cache, annotated with the cache's name and namespace. `data` holds base64
/// values as the API returns them.
pub fn garden_secret(
    name: &str,
    namespace: &str,
    runtime_id: &str,
    cache: &ImageRegistryCache,
    data: &BTreeMap<String, Value>,
) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                LABEL_RUNTIME_ID: runtime_id,
                LABEL_CACHE_ID: cache.uid,
                LABEL_MANAGED_BY: MANAGED_BY,
            },
            "annotations": {
                ANNOTATION_CACHE_NAME: cache.name,
                ANNOTATION_CACHE_NAMESPACE: cache.namespace,
            },
        },
        "immutable": true,
        "type": "Opaque",
        "data": data,
    })
}

/// State of a `RegistryCacheConfig` in the runtime cluster (the module's status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigState {
    /// Being configured: `Pending`, condition Unknown.
    Pending,
    /// Configured: `Ready`, condition True.
    Ready,
    /// Failed: `Error`, condition False with the message.
    Failed,
}

/// Reason of the runtime cluster's condition when the garden Secrets could not be written.
pub const REASON_GARDEN_CONFIGURATION_FAILED: &str =
    "RegistryCacheGardenClusterConfigurationFailed";

/// Reason of the runtime cluster's condition when the Runtime cannot become a Shoot patch.
pub const REASON_EXTENSION_CONFIGURATION_FAILED: &str = "RegistryCacheExtensionConfigurationFailed";

/// Message of the runtime cluster's condition with [`REASON_EXTENSION_CONFIGURATION_FAILED`].
pub const MESSAGE_EXTENSION_CONFIGURATION_FAILED: &str =
    "failed to apply registry cache configuration";

/// The status of a `RegistryCacheConfig` after setting its `RegistryCacheConfigured`
/// condition: the other conditions are kept, the transition time moves only with the status.
pub fn config_status(
    live_status: &Value,
    state: ConfigState,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: &str,
) -> Value {
    let (state, status) = match state {
        ConfigState::Pending => ("Pending", "Unknown"),
        ConfigState::Ready => ("Ready", "True"),
        ConfigState::Failed => ("Error", "False"),
    };
    let mut conditions: Vec<Value> = live_status["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let at = conditions
        .iter()
        .position(|c| c["type"] == crate::names::condition::REGISTRY_CACHE_CONFIGURED);
    let transition = match at.map(|i| &conditions[i]) {
        Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    let mut condition = json!({
        "type": crate::names::condition::REGISTRY_CACHE_CONFIGURED,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
    });
    if let Some(g) = observed_generation {
        condition["observedGeneration"] = json!(g);
    }
    match at {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
    json!({"state": state, "conditions": conditions})
}

/// Whether the registry cache controller ([`FIELD_MANAGER`]) owns a Runtime's
/// `spec.imageRegistryCache`, by its managed fields.
pub fn written_by_registry_cache(
    managed_fields: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry],
) -> bool {
    managed_fields.iter().any(|m| {
        m.manager.as_deref() == Some(FIELD_MANAGER)
            && m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0["f:spec"].get("f:imageRegistryCache").is_some())
    })
}

/// Extracts the PEM certificate of the `X-Forwarded-Client-Cert` header (the `Cert="..."`
/// element, URL-encoded by the gateway), still URL-encoded; `None` when there is none.
pub fn xfcc_certificate(header: &str) -> Option<&str> {
    let start = header.find("Cert=")? + "Cert=".len();
    let rest = &header[start..];
    let end = rest.find([';', ',']).unwrap_or(rest.len());
    let cert = rest[..end].trim_matches('"');
    (!cert.is_empty()).then_some(cert)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cache(ns: &str, secret: Option<&str>) -> ImageRegistryCache {
        ImageRegistryCache {
            name: "c1".into(),
            namespace: ns.into(),
            uid: "u1".into(),
            config: RegistryCacheConfigSpec {
                upstream: "docker.io".into(),
                secret_reference_name: secret.map(str::to_owned),
                ..Default::default()
            },
        }
    }

    #[test]
    fn the_credentials_version_names_each_cache_with_credentials_and_no_data() {
        let mut other = cache("team", Some("other"));
        other.uid = "u2".into();
        let caches = [
            cache("team", Some("creds")),
            cache("team", None),
            other,
            cache("team", Some("")),
        ];
        let version = |_: &str, name: &str| (name == "creds").then(|| "17".to_owned());
        assert_eq!(
            credentials_version(&caches, version).as_deref(),
            Some("u1=17,u2="),
            "a missing Secret is an empty version"
        );
        assert_eq!(credentials_version(&caches[1..2], version), None);
        assert_eq!(credentials_version(&[], version), None);
    }

    #[test]
    fn module_is_enabled_by_the_kyma_resource() {
        assert!(module_enabled(
            &json!({"spec": {"modules": [{"name": "istio"}, {"name": "registry-cache"}]}})
        ));
        assert!(!module_enabled(
            &json!({"spec": {"modules": [{"name": "istio"}]}})
        ));
        assert!(!module_enabled(&json!({"spec": {}})));
    }

    #[test]
    fn configs_become_runtime_entries() {
        let configs = vec![
            json!({"metadata": {"name": "a", "namespace": "n", "uid": "u-a"},
                   "spec": {"upstream": "docker.io", "secretReferenceName": "creds"},
                   "status": {"state": "Ready"}}),
            json!({"metadata": {"name": "b", "namespace": "n"}, "spec": {"upstream": "x"}}),
            json!({"metadata": {"name": "c", "namespace": "n", "uid": "u-c"},
                   "spec": {"upstream": "quay.io", "volume": {"size": 10_737_418_240_i64}}}),
        ];
        let caches = caches_from_configs(&configs).expect("readable");
        assert_eq!(caches.len(), 2, "no UID: left out");
        assert_eq!(caches[0].uid, "u-a");
        assert_eq!(
            caches[0].config.secret_reference_name.as_deref(),
            Some("creds")
        );
        assert_eq!(
            caches[1]
                .config
                .volume
                .as_ref()
                .and_then(|v| v.size.as_ref()),
            Some(&crate::gardener::Quantity::Number(10_737_418_240))
        );
    }

    #[test]
    fn an_unreadable_config_is_an_error_naming_it_and_the_field() {
        let good = json!({"metadata": {"name": "a", "namespace": "n", "uid": "u-a"},
                          "spec": {"upstream": "docker.io"}});
        for (spec, field, words) in [
            (json!({}), "spec", "missing field `upstream`"),
            (
                json!({"upstream": "quay.io", "volume": {"size": true}}),
                "spec.volume.size",
                "a quantity",
            ),
            (
                json!({"upstream": "quay.io", "http": {"tls": "yes"}}),
                "spec.http.tls",
                "expected a boolean",
            ),
        ] {
            let bad =
                json!({"metadata": {"name": "c", "namespace": "n", "uid": "u-c"}, "spec": spec});
            let err = caches_from_configs(&[good.clone(), bad]).expect_err(field);
            assert_eq!((err.namespace.as_str(), err.name.as_str()), ("n", "c"));
            assert_eq!(err.field, field);
            assert!(err.reason.contains(words), "{field}: {err}");
            assert!(
                err.to_string()
                    .starts_with("RegistryCacheConfig n/c cannot be read: "),
                "{err}"
            );
        }
    }

    #[test]
    fn credentials_are_only_read_from_plain_names_outside_system_namespaces() {
        assert_eq!(credentials_source(&cache("team", None)), Ok(None));
        assert_eq!(credentials_source(&cache("team", Some(""))), Ok(None));
        assert_eq!(
            credentials_source(&cache("team", Some("creds"))),
            Ok(Some(("team", "creds")))
        );
        for ns in [
            "kube-system",
            "garden",
            "garden-kyma",
            "kyma-system",
            concat!("..", "/x"),
            "A",
            "",
        ] {
            assert!(
                matches!(
                    credentials_source(&cache(ns, Some("creds"))),
                    Err(Refusal::Namespace { .. })
                ),
                "{ns}"
            );
        }
        for name in [
            concat!("..", "/kube-system/x"),
            "a/b",
            "x?y",
            "%2e%2e",
            "UPPER",
            "..",
        ] {
            assert!(
                matches!(
                    credentials_source(&cache("team", Some(name))),
                    Err(Refusal::SecretName { .. })
                ),
                "{name}"
            );
        }
    }

    #[test]
    fn the_runtime_cluster_must_hold_the_referencing_config() {
        let c = cache("team", Some("creds"));
        let live = json!({"metadata": {"name": "c1", "namespace": "team", "uid": "u1"},
                          "spec": {"secretReferenceName": "creds"}});
        assert_eq!(check_config(&c, Some(&live)), Ok(()));
        assert!(check_config(&c, None).is_err());
        let mut other_uid = live.clone();
        other_uid["metadata"]["uid"] = json!("u2");
        assert!(check_config(&c, Some(&other_uid)).is_err());
        let mut other_secret = live;
        other_secret["spec"]["secretReferenceName"] = json!("other");
        assert!(check_config(&c, Some(&other_secret)).is_err());
    }

    #[test]
    fn only_username_and_password_are_copied() {
        let c = cache("team", Some("creds"));
        let keys = |keys: &[&'static str]| keys.iter().map(|k| (*k, 8)).collect::<Vec<_>>();
        assert_eq!(check_keys(&c, keys(&["username", "password"])), Ok(()));
        assert!(check_keys(&c, keys(&["token", "ca.crt", "namespace"])).is_err());
        assert!(check_keys(&c, keys(&["username", "password", "extra"])).is_err());
        assert!(check_keys(&c, keys(&[".dockerconfigjson"])).is_err());
        let msg = check_keys(&c, keys(&["x"])).expect_err("keys").to_string();
        assert!(msg.contains("creds") && msg.contains("username"), "{msg}");
    }

    #[test]
    fn credentials_longer_than_the_bound_are_not_copied() {
        let c = cache("team", Some("creds"));
        let at_bound = [("username", 5), ("password", MAX_CREDENTIAL_BYTES)];
        assert_eq!(check_keys(&c, at_bound), Ok(()));
        let over = [("username", 5), ("password", MAX_CREDENTIAL_BYTES + 1)];
        let refusal = check_keys(&c, over).expect_err("too large");
        assert!(matches!(&refusal, Refusal::TooLarge { key, .. } if key == "password"));
        let msg = refusal.to_string();
        assert!(msg.contains("creds") && msg.contains("password"), "{msg}");
    }

    fn garden(name: &str, uid: &str, rt: &str, dirty: bool) -> GardenSecret {
        GardenSecret {
            name: name.into(),
            cache_uid: uid.into(),
            runtime_id: rt.into(),
            dirty,
            ours: true,
            created: None,
        }
    }

    #[test]
    fn garden_secrets_are_recognised_by_their_labels() {
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>()
        };
        let full = labels(&[
            (LABEL_MANAGED_BY, MANAGED_BY),
            (LABEL_CACHE_ID, "u1"),
            (LABEL_RUNTIME_ID, "rt"),
        ]);
        assert!(GardenSecret::from_labels("reg-cache-1", &full).is_some());
        assert!(GardenSecret::from_labels("other", &full).is_none());
        let foreign = labels(&[(LABEL_CACHE_ID, "u1"), (LABEL_RUNTIME_ID, "rt")]);
        assert!(GardenSecret::from_labels("reg-cache-1", &foreign).is_none());
    }

    #[test]
    fn names_and_unused_secrets_are_per_runtime() {
        let secrets = vec![
            garden("reg-cache-a", "u1", "rt", false),
            garden("reg-cache-old", "u1", "rt", true),
            garden("reg-cache-b", "u2", "rt", false),
            garden("reg-cache-x", "u1", "other", false),
        ];
        let names = secret_names(&secrets, "rt");
        assert_eq!(names.len(), 2);
        assert_eq!(names["u1"], "reg-cache-a");
        let caches = vec![cache("team", Some("creds"))];
        assert_eq!(
            unused(&secrets, "rt", &caches),
            vec!["reg-cache-old", "reg-cache-b"]
        );
        assert_eq!(unused(&secrets, "rt", &[]).len(), 3);
    }

    #[test]
    fn of_two_current_secrets_of_a_cache_the_older_is_current_and_neither_deleted() {
        let at = |name: &str, time: &str| GardenSecret {
            created: Some(time.parse().expect("time")),
            ..garden(name, "u1", "rt", false)
        };
        // The late one sorts first by name: age decides.
        let secrets = vec![
            at("reg-cache-b", "2026-12-04T10:00:00Z"),
            at("reg-cache-a", "2026-12-04T10:00:05Z"),
        ];
        assert_eq!(secret_names(&secrets, "rt")["u1"], "reg-cache-b");
        assert_eq!(
            current(&secrets, "rt", "u1").map(|s| s.name.as_str()),
            Some("reg-cache-b")
        );
        let caches = vec![cache("team", Some("creds"))];
        assert!(unused(&secrets, "rt", &caches).is_empty());
    }

    #[test]
    fn of_two_current_secrets_of_the_same_age_the_first_by_name_is_kept() {
        // In either order: the conversion and the sync name the same one.
        for secrets in [
            vec![
                garden("reg-cache-b", "u1", "rt", false),
                garden("reg-cache-a", "u1", "rt", false),
            ],
            vec![
                garden("reg-cache-a", "u1", "rt", false),
                garden("reg-cache-b", "u1", "rt", false),
            ],
        ] {
            assert_eq!(secret_names(&secrets, "rt")["u1"], "reg-cache-a");
            assert_eq!(
                current(&secrets, "rt", "u1").map(|s| s.name.as_str()),
                Some("reg-cache-a")
            );
        }
        assert!(current(&[], "rt", "u1").is_none());
    }

    #[test]
    fn sync_creates_keeps_or_replaces() {
        let s = garden("reg-cache-a", "u1", "rt", false);
        assert_eq!(sync_step(None, false), SyncStep::Create);
        assert_eq!(sync_step(Some(&s), true), SyncStep::Keep);
        assert_eq!(
            sync_step(Some(&s), false),
            SyncStep::Replace {
                old: "reg-cache-a".into()
            }
        );
    }

    #[test]
    fn secret_names_are_uuids_under_the_prefix() {
        let name = new_secret_name(u128::MAX);
        assert_eq!(name.len(), SECRET_PREFIX.len() + 36);
        assert!(is_dns_subdomain(&name), "{name}");
        assert_eq!(
            &name[SECRET_PREFIX.len() + 14..SECRET_PREFIX.len() + 15],
            "4"
        );
        assert_ne!(new_secret_name(1), new_secret_name(2));
    }

    #[test]
    fn status_keeps_other_conditions_and_transition_times() {
        let live = json!({"conditions": [
            {"type": "RegistryCacheValidated", "status": "True", "reason": "x", "message": "",
             "lastTransitionTime": "t0"},
            {"type": "RegistryCacheConfigured", "status": "Unknown", "reason": "RegistryCacheConfigured",
             "message": "", "lastTransitionTime": "t1"}]});
        let s = config_status(
            &live,
            ConfigState::Pending,
            "RegistryCacheConfigured",
            "",
            None,
            "t2",
        );
        assert_eq!(s["state"], "Pending");
        assert_eq!(s["conditions"][1]["lastTransitionTime"], "t1");
        let s = config_status(
            &live,
            ConfigState::Ready,
            "RegistryCacheConfigured",
            "",
            Some(3),
            "t2",
        );
        assert_eq!(s["state"], "Ready");
        assert_eq!(s["conditions"][0]["type"], "RegistryCacheValidated");
        assert_eq!(s["conditions"][1]["status"], "True");
        assert_eq!(s["conditions"][1]["lastTransitionTime"], "t2");
        assert_eq!(s["conditions"][1]["observedGeneration"], 3);
        let s = config_status(&json!({}), ConfigState::Failed, "R", "m", None, "t3");
        assert_eq!(s["state"], "Error");
        assert_eq!(s["conditions"][0]["message"], "m");
    }

    #[test]
    fn ownership_of_the_cache_list_is_read_from_managed_fields() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
        let entry = |manager: &str, fields: Value| ManagedFieldsEntry {
            manager: Some(manager.into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        };
        let ours = entry(
            FIELD_MANAGER,
            json!({"f:spec": {"f:imageRegistryCache": {}}}),
        );
        let keb = entry("keb", json!({"f:spec": {"f:shoot": {}}}));
        let other = entry(FIELD_MANAGER, json!({"f:metadata": {}}));
        assert!(written_by_registry_cache(&[keb.clone(), ours]));
        assert!(!written_by_registry_cache(&[keb, other]));
        assert!(!written_by_registry_cache(&[]));
    }

    #[test]
    fn xfcc_certificate_is_the_cert_element() {
        assert_eq!(
            xfcc_certificate("Hash=ab;Cert=\"-----BEGIN%20X\";Subject=\"CN=x\""),
            Some("-----BEGIN%20X")
        );
        assert_eq!(xfcc_certificate("By=a,Cert=abc"), Some("abc"));
        assert_eq!(xfcc_certificate("Hash=ab"), None);
        assert_eq!(xfcc_certificate("Cert=;"), None);
    }
}
