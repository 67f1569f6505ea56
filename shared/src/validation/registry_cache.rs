//! `spec.imageRegistryCache`: the caches the `registry-cache` extension is configured with.
//! Each rule matches what the extension's admission refuses, so an admitted Runtime yields a
//! Shoot Gardener accepts.

use super::context::Ctx;
use super::syntax;
use super::{Item, ValidationOutcome};
use crate::api::runtime::ImageRegistryCaches;
use crate::gardener::Quantity;
use std::collections::HashMap;

const LIST: &str = "spec.imageRegistryCache";

pub(crate) fn check(ctx: &Ctx<'_>, f: &mut ValidationOutcome) {
    let caches = match &ctx.rt.spec.image_registry_cache {
        None => return,
        Some(ImageRegistryCaches::Legacy(_)) => {
            f.warning(
                LIST,
                "holds the 2025 object shape ({enabled: ...}), which names no cache; the Shoot's registry-cache extension is left as it is until the field holds a list of caches",
            );
            return;
        }
        Some(ImageRegistryCaches::List(caches)) => caches,
    };
    let mut uids: HashMap<&str, usize> = HashMap::new();
    let mut upstreams: HashMap<&str, usize> = HashMap::new();
    for (index, cache) in caches.iter().enumerate() {
        let at = Item { list: LIST, index };
        for (key, value, what) in [
            ("name", &cache.name, "the name"),
            ("namespace", &cache.namespace, "the namespace"),
            ("uid", &cache.uid, "the uid"),
        ] {
            if value.is_empty() {
                f.violation(
                    at.field(key),
                    format!(
                        "must not be empty; set it to {what} of the runtime's RegistryCacheConfig"
                    ),
                );
            }
        }
        if !cache.uid.is_empty()
            && let Some(first) = uids.insert(&cache.uid, index)
        {
            f.violation(
                at.field("uid"),
                format!(
                    "{:?} is already the uid of {LIST}[{first}]; each cache has its own",
                    cache.uid
                ),
            );
        }
        let c = &cache.config;
        if !syntax::is_registry_host(&c.upstream) {
            f.violation(
                at.field("config.upstream"),
                format!("{:?} is not a registry host; use a host with an optional port and no scheme, such as docker.io or my-registry.io:5000", c.upstream),
            );
        } else if let Some(first) = upstreams.insert(&c.upstream, index) {
            f.violation(
                at.field("config.upstream"),
                format!(
                    "{:?} is already cached by {LIST}[{first}]; a registry can have one cache",
                    c.upstream
                ),
            );
        }
        if let Some(url) = &c.remote_url
            && let Some(problem) = syntax::http_url_problem(url)
        {
            f.violation(at.field("config.remoteURL"), format!("{url:?} {problem}"));
        }
        if let Some(gc) = &c.garbage_collection
            && !syntax::is_go_duration(&gc.ttl)
        {
            f.violation(
                at.field("config.garbageCollection.ttl"),
                format!("{:?} is not a duration; use for example 168h, or 0s to switch garbage collection off", gc.ttl),
            );
        }
        if let Some(size) = c.volume.as_ref().and_then(|v| v.size.as_ref()) {
            let positive = match size {
                Quantity::Number(n) => *n > 0,
                Quantity::Text(s) => {
                    !s.starts_with('-') && s.bytes().any(|b| (b'1'..=b'9').contains(&b))
                }
            };
            if !positive {
                f.violation(
                    at.field("config.volume.size"),
                    "must be a positive quantity such as 10Gi",
                );
            }
        }
        if let Some(name) = &c.secret_reference_name
            && !name.is_empty()
            && !syntax::is_dns_subdomain(name)
        {
            f.violation(
                at.field("config.secretReferenceName"),
                format!("{name:?} is not a valid reference name; use lower-case letters, digits, '-' and '.'"),
            );
        }
        if let Some(proxy) = &c.proxy {
            for (key, value) in [
                ("config.proxy.httpProxy", &proxy.http_proxy),
                ("config.proxy.httpsProxy", &proxy.https_proxy),
            ] {
                if let Some(url) = value
                    && let Some(problem) = syntax::http_url_problem(url)
                {
                    f.violation(at.field(key), format!("{url:?} {problem}"));
                }
            }
        }
    }
}
