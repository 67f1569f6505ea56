//! The `registry-cache` extension and the `spec.resources` entries of its credentials, from
//! `spec.imageRegistryCache` (upstream writes both on patch only, never on create).

use super::{ConvertError, Input};
use crate::api::runtime::{ImageRegistryCache, ImageRegistryCaches};
use crate::gardener::shoot::{CrossVersionObjectReference, Extension, NamedResourceReference};
use crate::gardener::{RawExtension, Shoot};
use crate::names::ANNOTATION_REGISTRY_CACHE_CREDENTIALS;
use serde_json::{Map, Value, json};

/// Extension type of the registry cache.
pub(crate) const EXTENSION_TYPE: &str = "registry-cache";
/// Resources whose name contains this are the garden Secrets of registry caches; they are
/// written anew from the Runtime on every patch.
const SECRET_PREFIX: &str = "reg-cache-";

/// What the patch does with the `registry-cache` extension.
pub(super) enum Desired {
    /// Write this extension (replacing a live one).
    Write(Extension),
    /// Remove a live one: the Runtime lists no cache.
    Remove,
    /// Keep the live one as it is: the Runtime holds the 2025 shape, which names no cache.
    Keep,
}

/// The garden Secret of a cache with credentials; an error while it is not synchronised yet.
fn secret_name<'a>(
    input: &'a Input<'_>,
    index: usize,
    cache: &ImageRegistryCache,
) -> Result<Option<&'a str>, ConvertError> {
    if cache
        .config
        .secret_reference_name
        .as_deref()
        .is_none_or(str::is_empty)
    {
        return Ok(None);
    }
    match input.opts.registry_cache_secrets.get(&cache.uid) {
        Some(name) => Ok(Some(name.as_str())),
        None => Err(ConvertError::RegistryCacheSecret {
            index,
            uid: cache.uid.clone(),
        }),
    }
}

/// One `RegistryConfig.caches[]` entry (`registry.extensions.gardener.cloud/v1alpha3`).
fn cache_entry(cache: &ImageRegistryCache, secret: Option<&str>) -> Value {
    let c = &cache.config;
    let mut m = Map::new();
    m.insert("upstream".to_owned(), json!(c.upstream));
    if let Some(url) = &c.remote_url {
        m.insert("remoteURL".to_owned(), json!(url));
    }
    if let Some(v) = &c.volume {
        let mut volume = Map::new();
        if let Some(size) = &v.size {
            volume.insert("size".to_owned(), json!(size.as_text()));
        }
        if let Some(class) = &v.storage_class_name {
            volume.insert("storageClassName".to_owned(), json!(class));
        }
        m.insert("volume".to_owned(), Value::Object(volume));
    }
    if let Some(gc) = &c.garbage_collection {
        // As Go writes the extension's `metav1.Duration` (`168h` becomes `168h0m0s`), so that
        // a Shoot taken over from upstream is not changed by the spelling alone.
        let ttl = crate::duration::parse_go_duration(&gc.ttl)
            .map_or_else(|| gc.ttl.clone(), crate::duration::format_go_duration);
        m.insert("garbageCollection".to_owned(), json!({"ttl": ttl}));
    }
    if let Some(secret) = secret {
        m.insert("secretReferenceName".to_owned(), json!(secret));
    }
    if let Some(p) = &c.proxy {
        let mut proxy = Map::new();
        if let Some(http) = &p.http_proxy {
            proxy.insert("httpProxy".to_owned(), json!(http));
        }
        if let Some(https) = &p.https_proxy {
            proxy.insert("httpsProxy".to_owned(), json!(https));
        }
        m.insert("proxy".to_owned(), Value::Object(proxy));
    }
    Value::Object(m)
}

/// Whether `rt` asks for registry caches that `shoot` does not run: the conversion writes the
/// extension on patch only (as upstream does; a new Shoot has none), so such a Shoot needs one
/// patch once it exists. Upstream patches only when the Runtime's generation passes the one its
/// create recorded, so it adds the caches at the Runtime's next spec change; this asks for the
/// patch at once.
pub fn registry_cache_missing(rt: &crate::api::Runtime, shoot: &Shoot) -> bool {
    let asks = matches!(
        &rt.spec.image_registry_cache,
        Some(ImageRegistryCaches::List(caches)) if !caches.is_empty()
    );
    asks && !shoot.spec.extension_enabled(EXTENSION_TYPE)
}

/// Whether the registry cache controller read credentials Secrets in the runtime cluster that
/// differ from those the Shoot's garden Secrets were copied from (a rotation): the Runtime's
/// [`ANNOTATION_REGISTRY_CACHE_CREDENTIALS`] is set and the Shoot's is not the same. The patch
/// copies the new credentials and records the Runtime's value on the Shoot
/// ([`credentials_annotation`]).
pub fn registry_cache_credentials_changed(rt: &crate::api::Runtime, shoot: &Shoot) -> bool {
    rt.annotation(ANNOTATION_REGISTRY_CACHE_CREDENTIALS)
        .is_some_and(|v| {
            shoot
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_REGISTRY_CACHE_CREDENTIALS))
                .map(String::as_str)
                != Some(v)
        })
}

/// The garden Secret of each of `rt`'s caches with credentials, by cache UID, as `shoot`
/// references them: the `registry-cache` extension's entry for the cache's upstream names a
/// resource the Shoot lists, which refers to the Secret of that name. What a re-apply that
/// restores the spec (not the credentials, whose change asks for a patch of its own) may write
/// again without reading the runtime cluster, once the caller has checked that they are the
/// Runtime's current garden Secrets. `None` when a cache with credentials has no such entry:
/// the extension or resources are not the ones written for this spec (changed by hand, or
/// never written).
pub fn registry_cache_secrets_on(
    rt: &crate::api::Runtime,
    shoot: &Shoot,
) -> Option<std::collections::BTreeMap<String, String>> {
    let entries = shoot
        .spec
        .extensions
        .iter()
        .flatten()
        .find(|e| e.type_ == EXTENSION_TYPE && e.disabled != Some(true))
        .and_then(|e| e.provider_config.as_ref())
        .and_then(|c| c.0["caches"].as_array());
    let resources = shoot.spec.resources.as_deref().unwrap_or_default();
    let mut secrets = std::collections::BTreeMap::new();
    for cache in rt.spec.image_registry_caches() {
        if cache
            .config
            .secret_reference_name
            .as_deref()
            .is_none_or(str::is_empty)
        {
            continue;
        }
        let named = entries?
            .iter()
            .find(|e| e["upstream"] == cache.config.upstream.as_str())
            .and_then(|e| e["secretReferenceName"].as_str())?;
        // As the conversion writes it: the resource and the Secret it refers to share the name.
        resources.iter().find(|r| {
            r.name == named
                && r.resource_ref.name == named
                && r.resource_ref.kind == "Secret"
                && named.contains(SECRET_PREFIX)
        })?;
        secrets.insert(cache.uid.clone(), named.to_owned());
    }
    Some(secrets)
}

/// On patch, the Runtime's [`ANNOTATION_REGISTRY_CACHE_CREDENTIALS`] goes onto the Shoot: the
/// garden Secrets the patch references were copied after the registry cache controller read
/// those versions, so they hold those credentials or newer ones.
pub(super) fn credentials_annotation(input: &Input<'_>, shoot: &mut Shoot) {
    if let Some(v) = input.rt.annotation(ANNOTATION_REGISTRY_CACHE_CREDENTIALS) {
        shoot
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                ANNOTATION_REGISTRY_CACHE_CREDENTIALS.to_owned(),
                v.to_owned(),
            );
    }
}

/// The extension the Runtime asks for. `http.tls` is not part of the extension's cache
/// (upstream does not pass it on either).
pub(super) fn desired(input: &Input<'_>) -> Result<Desired, ConvertError> {
    let caches = match &input.rt.spec.image_registry_cache {
        Some(ImageRegistryCaches::Legacy(_)) => return Ok(Desired::Keep),
        Some(ImageRegistryCaches::List(caches)) if !caches.is_empty() => caches,
        _ => return Ok(Desired::Remove),
    };
    let entries = caches
        .iter()
        .enumerate()
        .map(|(i, cache)| Ok(cache_entry(cache, secret_name(input, i, cache)?)))
        .collect::<Result<Vec<_>, ConvertError>>()?;
    Ok(Desired::Write(Extension {
        type_: EXTENSION_TYPE.to_owned(),
        disabled: Some(false),
        provider_config: Some(RawExtension(json!({
            "apiVersion": "registry.extensions.gardener.cloud/v1alpha3",
            "kind": "RegistryConfig",
            "caches": entries,
        }))),
    }))
}

/// Applies [`desired`] to the extension list of a patch: replaced in place, appended, or
/// removed (upstream's remove strategy for this extension).
pub(super) fn apply(desired: Desired, list: &mut Vec<Extension>) {
    let at = list.iter().position(|e| e.type_ == EXTENSION_TYPE);
    match (desired, at) {
        (Desired::Write(ext), Some(i)) => list[i] = ext,
        (Desired::Write(ext), None) => list.push(ext),
        (Desired::Remove, Some(i)) => {
            list.remove(i);
        }
        (Desired::Remove | Desired::Keep, _) => {}
    }
}

/// On patch, after the live resources were copied: the registry-cache Secrets of the live
/// Shoot are dropped and one resource per cache with credentials is written (name = the garden
/// Secret's name). The 2025 shape names no cache and leaves the live entries alone.
pub(super) fn resources(input: &Input<'_>, shoot: &mut Shoot) -> Result<(), ConvertError> {
    if matches!(
        input.rt.spec.image_registry_cache,
        Some(ImageRegistryCaches::Legacy(_))
    ) {
        return Ok(());
    }
    let mut wanted = Vec::new();
    for (i, cache) in input.rt.spec.image_registry_caches().iter().enumerate() {
        if let Some(secret) = secret_name(input, i, cache)? {
            wanted.push(NamedResourceReference {
                name: secret.to_owned(),
                resource_ref: CrossVersionObjectReference {
                    api_version: Some("v1".to_owned()),
                    kind: "Secret".to_owned(),
                    name: secret.to_owned(),
                },
            });
        }
    }
    let had = shoot.spec.resources.is_some();
    let resources = shoot.spec.resources.get_or_insert_with(Vec::new);
    resources.retain(|r| !r.name.contains(SECRET_PREFIX));
    resources.extend(wanted);
    if !had && resources.is_empty() {
        shoot.spec.resources = None;
    }
    Ok(())
}
