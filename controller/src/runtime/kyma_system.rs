//! The `kyma-system` namespace and the `kyma-provisioning-info` ConfigMap in the runtime
//! cluster (upstream `sFnCreateKymaNamespace` and the ConfigMap half of `sFnConfigureSKR`).
//! What the ConfigMap holds is decided in `kim_shared::provisioning_info`; here are its one
//! Gardener read (the Seed's region, once per Seed and process) and the writes, both by
//! server-side apply with the field manager of every object we write into the runtime cluster.
//! The Shoot fields it needs are in the watch cache's copy (see `super::shoot_cache`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kim_shared::gardener::Shoot;
use kim_shared::provisioning_info;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};

use super::Reconciler;
use super::classify::message;
use super::oidc::RUNTIME_CLUSTER_FIELD_MANAGER;
use kim_shared::api::Runtime;

/// Applies the `kyma-system` namespace (no labels: upstream creates it bare).
pub async fn apply_namespace(runtime_client: &Client) -> Result<(), String> {
    let api: Api<DynamicObject> = Api::all_with(runtime_client.clone(), &namespace_resource());
    let pp = PatchParams::apply(RUNTIME_CLUSTER_FIELD_MANAGER).force();
    api.patch(
        provisioning_info::KYMA_SYSTEM_NAMESPACE,
        &pp,
        &Patch::Apply(provisioning_info::kyma_system_namespace()),
    )
    .await
    .map(|_| ())
    .map_err(|e| {
        format!(
            "Namespace {}: {}",
            provisioning_info::KYMA_SYSTEM_NAMESPACE,
            message(&e)
        )
    })
}

/// Applies the `kyma-provisioning-info` ConfigMap for `runtime` and its Shoot (the cached copy
/// is enough).
pub async fn apply_provisioning_info(
    reconciler: &Reconciler,
    runtime_client: &Client,
    runtime: &Runtime,
    shoot: &Shoot,
) -> Result<(), String> {
    let seed_region = match shoot.spec.seed_name.as_deref().filter(|s| !s.is_empty()) {
        Some(seed) => Some(
            reconciler
                .seed_regions
                .get_or_read(seed, || read_seed_region(&reconciler.ctx.gardener, seed))
                .await?,
        ),
        None => None,
    };
    let body = provisioning_info::config_map(runtime, shoot, seed_region.as_deref())
        .map_err(|e| format!("serialising {}: {e}", provisioning_info::CONFIG_MAP_NAME))?;
    let api: Api<DynamicObject> = Api::namespaced_with(
        runtime_client.clone(),
        provisioning_info::KYMA_SYSTEM_NAMESPACE,
        &config_map_resource(),
    );
    let pp = PatchParams::apply(RUNTIME_CLUSTER_FIELD_MANAGER).force();
    api.patch(provisioning_info::CONFIG_MAP_NAME, &pp, &Patch::Apply(body))
        .await
        .map(|_| ())
        .map_err(|e| {
            format!(
                "ConfigMap {}: {}",
                provisioning_info::CONFIG_MAP_NAME,
                message(&e)
            )
        })
}

/// Seed name -> `spec.provider.region`. A Seed's region never changes, so each Seed is read
/// from Gardener once per process, however many Runtimes run on it; concurrent first lookups
/// of one Seed share one read, and a failed read is not remembered.
#[derive(Default)]
pub struct SeedRegions(Mutex<HashMap<String, Arc<tokio::sync::OnceCell<String>>>>);

impl SeedRegions {
    /// The region of Seed `name`, from `read` the first time.
    pub async fn get_or_read<F, Fut>(&self, name: &str, read: F) -> Result<String, String>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<String, String>>,
    {
        let cell = crate::records::lock(&self.0)
            .entry(name.to_owned())
            .or_default()
            .clone();
        cell.get_or_try_init(read).await.cloned()
    }
}

/// `spec.provider.region` of the Seed `name`, read from Gardener.
async fn read_seed_region(gardener: &Client, name: &str) -> Result<String, String> {
    let seeds: Api<DynamicObject> = Api::all_with(
        gardener.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("core.gardener.cloud", "v1beta1", "Seed"),
            "seeds",
        ),
    );
    let seed = seeds
        .get(name)
        .await
        .map_err(|e| format!("reading Seed {name}: {}", message(&e)))?;
    Ok(seed
        .data
        .pointer("/spec/provider/region")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned())
}

fn namespace_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Namespace"), "namespaces")
}

fn config_map_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "ConfigMap"), "configmaps")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// One read per Seed, shared by concurrent lookups; a failed read is tried again.
    #[tokio::test]
    async fn each_seed_is_read_once() {
        let regions = SeedRegions::default();
        let reads = AtomicUsize::new(0);
        let read = |region: &'static str| {
            let reads = &reads;
            move || async move {
                reads.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
                Ok(region.to_owned())
            }
        };
        let (a, b) = tokio::join!(
            regions.get_or_read("aws-eu", read("eu-central-1")),
            regions.get_or_read("aws-eu", read("other")),
        );
        assert_eq!(
            (a.unwrap(), b.unwrap()),
            ("eu-central-1".into(), "eu-central-1".into())
        );
        assert_eq!(
            regions.get_or_read("aws-eu", read("other")).await.unwrap(),
            "eu-central-1"
        );
        assert_eq!(reads.load(Ordering::Relaxed), 1);

        let failed = regions
            .get_or_read("gcp-eu", || async {
                Err("reading Seed gcp-eu: 503".to_owned())
            })
            .await;
        assert!(failed.is_err());
        assert_eq!(
            regions
                .get_or_read("gcp-eu", read("europe-west1"))
                .await
                .unwrap(),
            "europe-west1"
        );
        assert_eq!(reads.load(Ordering::Relaxed), 2);
    }
}
