//! With `--registry-cache-config-controller-enabled` off: what the registry cache wrote is
//! removed. The cache lists the registry cache controller wrote into Runtimes are removed (the
//! Runtime reconciler then removes the Shoots' `registry-cache` extension and their Secret
//! references), and their garden Secrets are deleted once their Shoot no longer references
//! them. At most one
//! list of Runtimes and one of registry cache Secrets per start when there is nothing to do.

use std::sync::Arc;
use std::time::Duration;

use kim_shared::api::Runtime;
use kim_shared::gardener::Shoot;
use kim_shared::names;
use kim_shared::registry_cache as rc;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::runtime::registry_cache::GardenSecrets;
use crate::{Context, LIST_PAGE_SIZE, Shutdown};

/// Pause between two sweeps while Secrets are still referenced: 15 s, doubling up to 10
/// minutes while no Secret goes (a Runtime whose patches are suspended or refused keeps its
/// Shoot's references for as long, and each sweep reads every referencing Shoot).
const INTERVAL: Duration = Duration::from_secs(15);
const MAX_INTERVAL: Duration = Duration::from_secs(600);

/// The pause after a sweep that left `left` Secrets, when the one before left `before` and
/// was followed by `pause`.
fn next_pause(pause: Duration, before: Option<usize>, left: usize) -> Duration {
    match before {
        Some(before) if left >= before => (pause * 2).min(MAX_INTERVAL),
        _ => INTERVAL,
    }
}

/// Sweeps until nothing of the registry cache is left, or `shutdown`.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) {
    let mut runtimes_cleared = false;
    let mut pause = INTERVAL;
    let mut before: Option<usize> = None;
    loop {
        if !runtimes_cleared {
            match clear_runtimes(&ctx).await {
                Ok(n) => {
                    runtimes_cleared = true;
                    if n > 0 {
                        tracing::info!(
                            runtimes = n,
                            "registry cache off: removed the registry caches from Runtimes"
                        );
                    }
                }
                Err(e) => {
                    pause = INTERVAL;
                    tracing::warn!(error = %e, "registry cache off: cannot clear Runtimes; retrying")
                }
            }
        }
        match delete_unreferenced(&ctx).await {
            Ok(0) if runtimes_cleared => return,
            Ok(left) if runtimes_cleared => {
                pause = next_pause(pause, before, left);
                before = Some(left);
                tracing::debug!(
                    left,
                    next_in = ?pause,
                    "registry cache off: Secrets still referenced by Shoots"
                )
            }
            // The Runtimes are not cleared yet (retried at the first pause).
            Ok(_) => pause = INTERVAL,
            Err(e) => {
                pause = INTERVAL;
                before = None;
                tracing::warn!(error = %e, "registry cache off: cannot delete registry cache Secrets; retrying")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// The Runtimes of the namespace as JSON: the sweep reads two fields of their spec, so a
/// Runtime whose status (or another part) our types refuse neither stops it nor makes it list
/// every Runtime again each [`INTERVAL`].
fn runtimes(ctx: &Context) -> Api<DynamicObject> {
    Api::namespaced_with(
        ctx.kcp.clone(),
        &ctx.settings.namespace,
        &ApiResource::erase::<Runtime>(&()),
    )
}

/// Whether `spec.imageRegistryCache` lists a cache (the 2025 object shape names none).
fn lists_caches(runtime: &DynamicObject) -> bool {
    runtime.data["spec"]["imageRegistryCache"]
        .as_array()
        .is_some_and(|caches| !caches.is_empty())
}

/// Removes `spec.imageRegistryCache` from the Runtimes where the registry cache controller
/// wrote it, and the credentials version it wrote; returns how many.
async fn clear_runtimes(ctx: &Context) -> Result<usize, kube::Error> {
    let api = runtimes(ctx);
    let mut params = ListParams::default().limit(LIST_PAGE_SIZE);
    let mut cleared = 0;
    loop {
        let page = api.list(&params).await?;
        for runtime in &page.items {
            let caches = lists_caches(runtime)
                && rc::written_by_registry_cache(
                    runtime
                        .metadata
                        .managed_fields
                        .as_deref()
                        .unwrap_or_default(),
                );
            let key = names::ANNOTATION_REGISTRY_CACHE_CREDENTIALS;
            let version = runtime.annotations().contains_key(key);
            if !caches && !version {
                continue;
            }
            let mut body = json!({"metadata": {"annotations": {key: null}}});
            if caches {
                body["spec"] = json!({"imageRegistryCache": null});
            }
            api.patch(
                &runtime.name_any(),
                &PatchParams::default(),
                &Patch::Merge(body),
            )
            .await?;
            cleared += 1;
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(cleared),
        }
    }
}

/// Deletes the registry cache Secrets of this namespace's Runtimes that their Shoot no longer
/// references; returns how many are left. Secrets of Runtimes not found here are left alone:
/// they may be another KCP namespace's (the Gardener project can be shared), and a deleted
/// Runtime's Secrets go with its finalizer.
async fn delete_unreferenced(ctx: &Context) -> Result<usize, kube::Error> {
    let secrets = GardenSecrets::new(&ctx.gardener, &ctx.gardener_namespace);
    let all = secrets.all().await?;
    if all.is_empty() {
        return Ok(0);
    }
    let runtimes = runtimes(ctx);
    let shoots: Api<Shoot> = Api::namespaced(ctx.gardener.clone(), &ctx.gardener_namespace);
    let mut left = 0;
    // Several Secrets may belong to one Shoot: it is read once per sweep.
    let mut read: std::collections::HashMap<String, Option<Shoot>> = Default::default();
    for (info, secret) in all {
        let Some(runtime) = runtimes.get_opt(&info.runtime_id).await? else {
            continue;
        };
        // Without a Shoot name (a spec that does not read) the Secret is left alone.
        let Some(shoot) = runtime.data["spec"]["shoot"]["name"].as_str() else {
            continue;
        };
        if !read.contains_key(shoot) {
            read.insert(shoot.to_owned(), shoots.get_opt(shoot).await?);
        }
        let referenced = read
            .get(shoot)
            .and_then(|s| s.as_ref())
            .and_then(|s| s.spec.resources.as_ref())
            .is_some_and(|r| r.iter().any(|r| r.resource_ref.name == info.name));
        if referenced {
            left += 1;
        } else {
            secrets.delete(&info.name, secret.data.as_ref()).await?;
            tracing::info!(secret = %info.name, runtime_id = %info.runtime_id, "registry cache off: Secret deleted");
        }
    }
    Ok(left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_grows_while_no_secret_goes() {
        assert_eq!(next_pause(INTERVAL, None, 5), INTERVAL);
        assert_eq!(next_pause(INTERVAL, Some(5), 5), INTERVAL * 2);
        let mut pause = INTERVAL;
        for _ in 0..10 {
            pause = next_pause(pause, Some(5), 5);
        }
        assert_eq!(pause, MAX_INTERVAL);
        assert_eq!(
            next_pause(MAX_INTERVAL, Some(5), 4),
            INTERVAL,
            "progress resets it"
        );
    }
}
