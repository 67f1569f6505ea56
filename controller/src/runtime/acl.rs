//! The kube-apiserver ACL (`--api-server-acl-enabled`): the operator CIDRs and the KCP's NAT
//! address come from the ConfigMap `converter.kubernetes.kubeApiServer.acl.configMapName` in
//! the KCP namespace, read for each conversion of a Runtime that asks for an ACL. A change of
//! the ConfigMap marks every such Runtime with the force-patch annotation (as upstream's
//! config reload watcher does), so that the new addresses reach its Shoot.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kim_shared::api::Runtime;
use kim_shared::convert::{AclAddresses, acl_requested};
use kim_shared::names;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::Reconciler;
use super::runtime_cache::CachedRuntime;
use crate::Shutdown;
use crate::context::Context;

/// Why the ACL addresses could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AclError {
    /// Reading the ConfigMap failed.
    #[error("cannot read the API server ACL ConfigMap {namespace}/{name}: {source}")]
    Api {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Why.
        source: kube::Error,
    },
    /// The ConfigMap does not exist.
    #[error("the API server ACL ConfigMap {namespace}/{name} does not exist")]
    Missing {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The ConfigMap's data is not upstream's format.
    #[error("the API server ACL ConfigMap {namespace}/{name} is invalid: {message}")]
    Invalid {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What is wrong, naming the key.
        message: String,
    },
}

/// The ACL addresses to convert `runtime` with: `None` when the ACL is not managed, empty
/// addresses for a Runtime that asks for no ACL (a live `acl` extension is then switched off
/// without the ConfigMap being read), else the ConfigMap's.
pub async fn addresses(
    reconciler: &Reconciler,
    runtime: &Runtime,
) -> Result<Option<AclAddresses>, AclError> {
    if !reconciler.ctx.settings.runtime.api_server_acl {
        return Ok(None);
    }
    if !acl_requested(runtime) {
        return Ok(Some(AclAddresses::default()));
    }
    // Checked at start: the flag is refused without the name.
    let name = reconciler.config.acl_config_map_name().unwrap_or_default();
    let namespace = &reconciler.ctx.settings.namespace;
    let api: Api<ConfigMap> = Api::namespaced(reconciler.ctx.kcp.clone(), namespace);
    let cm = api
        .get_opt(name)
        .await
        .map_err(|source| AclError::Api {
            namespace: namespace.clone(),
            name: name.to_owned(),
            source,
        })?
        .ok_or_else(|| AclError::Missing {
            namespace: namespace.clone(),
            name: name.to_owned(),
        })?;
    AclAddresses::from_config_map_data(&cm.data.unwrap_or_default())
        .map(Some)
        .map_err(|message| AclError::Invalid {
            namespace: namespace.clone(),
            name: name.to_owned(),
            message,
        })
}

/// Watches the ACL ConfigMap until `shutdown`; when its data changes after it was first seen,
/// every Runtime of `runtimes` that asks for an ACL gets the force-patch annotation. The first
/// sight only records the data: a (re)start must not patch every Shoot.
pub async fn watch_config_map(
    ctx: Arc<Context>,
    runtimes: Store<CachedRuntime>,
    shutdown: Shutdown,
) {
    let Some(name) = ctx.config.acl_config_map_name().map(str::to_owned) else {
        return;
    };
    let api: Api<ConfigMap> = Api::namespaced(ctx.kcp.clone(), &ctx.settings.namespace);
    let events = watcher(
        api,
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
    .applied_objects();
    let mut events = std::pin::pin!(events);
    let mut seen: Option<BTreeMap<String, String>> = None;
    loop {
        let cm = tokio::select! {
            _ = shutdown.cancelled() => return,
            next = events.next() => match next {
                Some(Ok(cm)) => cm,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, configmap = %name, "watching the API server ACL ConfigMap");
                    continue;
                }
                None => return,
            },
        };
        let data = cm.data.unwrap_or_default();
        let changed = seen.as_ref().is_some_and(|before| *before != data);
        seen = Some(data);
        if changed {
            tracing::info!(configmap = %name, "API server ACL ConfigMap changed; patching the Shoots with an ACL");
            force_patch(&ctx, &runtimes).await;
        }
    }
}

/// Sets the force-patch annotation on every Runtime that asks for an ACL and has not got it.
async fn force_patch(ctx: &Context, runtimes: &Store<CachedRuntime>) {
    let key = names::ANNOTATION_FORCE_PATCH_RECONCILIATION;
    for rt in runtimes.state() {
        // A spec that does not decode fails its own reconcile; it asks for nothing here.
        if !rt.to_runtime().is_ok_and(|full| acl_requested(&full))
            || rt.metadata.deletion_timestamp.is_some()
            || rt.annotations().get(key).is_some_and(|v| v == "true")
        {
            continue;
        }
        let api: Api<Runtime> = Api::namespaced(ctx.kcp.clone(), &ctx.settings.namespace);
        let patch = json!({"metadata": {"annotations": {key: "true"}}});
        if let Err(e) = api
            .patch(
                &rt.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
        {
            tracing::warn!(runtime = %rt.name_any(), error = %e, "cannot set the force-patch annotation after the ACL ConfigMap changed");
        }
    }
}
