//! The `kyma-system` namespace and the `kyma-provisioning-info` ConfigMap in the runtime
//! cluster (upstream `sFnCreateKymaNamespace` and the ConfigMap half of `sFnConfigureSKR`).
//! What the ConfigMap holds is decided in `kim_shared::provisioning_info`; here are the reads
//! it needs (the whole Shoot, the Seed's region) and the writes, both by server-side apply
//! with the field manager of every object we write into the runtime cluster.

use kim_shared::gardener::Shoot;
use kim_shared::provisioning_info;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

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

/// Applies the `kyma-provisioning-info` ConfigMap for `runtime` and its Shoot.
///
/// `shoot` may be the watch cache's slim copy: the ConfigMap needs the Shoot's
/// `infrastructureConfig` and IP families, so the whole Shoot is read then.
pub async fn apply_provisioning_info(
    reconciler: &Reconciler,
    runtime_client: &Client,
    runtime: &Runtime,
    shoot: &Shoot,
) -> Result<(), String> {
    let live;
    let shoot = if shoot.spec.provider.infrastructure_config.is_some() {
        shoot
    } else {
        live = reconciler
            .get_shoot_live(&shoot.name_any())
            .await
            .map_err(|e| format!("reading Shoot {}: {}", shoot.name_any(), message(&e)))?
            .ok_or_else(|| format!("Shoot {} not found", shoot.name_any()))?;
        &live
    };
    let seed_region = match shoot.spec.seed_name.as_deref().filter(|s| !s.is_empty()) {
        Some(seed) => Some(seed_region(&reconciler.ctx.gardener, seed).await?),
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

/// `spec.provider.region` of the Seed `name`.
async fn seed_region(gardener: &Client, name: &str) -> Result<String, String> {
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
