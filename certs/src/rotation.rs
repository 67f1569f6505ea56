//! The I/O shell around [`crate::plan`]: read the Secret, carry out the plan, write it back
//! (create-if-absent, optimistic concurrency), load the resolver, read the live caBundles into
//! the [`crate::plan::PropagationClock`] and inject the bundle.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde_json::json;

use crate::material::{CertMaterial, MaterialError, ServingNames, bundle_ders};
use crate::plan::{Plan, PropagationClock, Reason, plan};
use crate::policy::{PolicyError, RotationPolicy};
use crate::resolver::{CertResolver, ResolverError};

/// Where the certificates live and what they are for.
#[derive(Debug, Clone)]
pub struct RotationConfig {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret holding CAs and the serving certificate.
    pub secret_name: String,
    /// Names the serving certificate must carry.
    pub names: ServingNames,
    /// Lifetimes and margins.
    pub policy: RotationPolicy,
    /// MutatingWebhookConfigurations whose caBundle we own.
    pub mutating_configs: Vec<String>,
    /// ValidatingWebhookConfigurations whose caBundle we own.
    pub validating_configs: Vec<String>,
    /// Field manager for server-side apply of the caBundle.
    pub field_manager: String,
}

/// A failed synchronisation; the next tick retries. No key material in messages.
#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    /// The policy cannot rotate safely.
    #[error("invalid certificate policy: {0}")]
    Policy(#[from] PolicyError),
    /// The Secret holds something we cannot read.
    #[error(
        "Secret {namespace}/{name}: {source}; fix or delete the Secret (a new CA is then generated)"
    )]
    Material {
        /// Secret namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// What is wrong.
        source: MaterialError,
    },
    /// Generating certificates failed.
    #[error("generating certificates: {0}")]
    Generate(MaterialError),
    /// The serving certificate could not be loaded into rustls.
    #[error(transparent)]
    Resolver(#[from] ResolverError),
    /// The Kubernetes API refused or failed.
    #[error("{action}: {source}")]
    Kube {
        /// What we tried.
        action: String,
        /// The client error.
        source: kube::Error,
    },
    /// Other replicas kept changing the Secret.
    #[error("Secret {0} changed under us {1} times in a row; retrying on the next tick")]
    Contended(String, usize),
    /// A blocking task panicked or was cancelled.
    #[error("certificate task did not complete: {0}")]
    Task(String),
}

/// What one synchronisation did (for logs and metrics).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncOutcome {
    /// Why a CA was added, if one was.
    pub added_ca: Option<Reason>,
    /// How many expired CAs left the bundle.
    pub dropped_cas: usize,
    /// Why the serving certificate was re-issued, if it was (by this replica).
    pub issued_serving: Option<Reason>,
    /// Whether the resolver now presents a different certificate than before.
    pub loaded_new_serving: bool,
    /// Webhook configurations whose caBundle was updated.
    pub injected: Vec<String>,
    /// Expiry of the presented serving certificate.
    pub serving_not_after: Option<SystemTime>,
    /// Number of CAs in the bundle.
    pub bundle_size: usize,
    /// CAs of the bundle not (yet) in the live caBundle of every webhook.
    pub unpropagated_cas: usize,
}

/// Keeps the Secret, the resolver and the webhook configurations in step.
pub struct CertRotator {
    client: Client,
    cfg: RotationConfig,
    resolver: Arc<CertResolver>,
    loaded_cert: Mutex<Option<String>>,
    clock: Mutex<PropagationClock>,
    unpropagated: AtomicUsize,
}

const MAX_ATTEMPTS: usize = 5;

fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> RotationError {
    let action = action.into();
    move |source| RotationError::Kube { action, source }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

fn to_secret_data(m: &CertMaterial) -> BTreeMap<String, ByteString> {
    m.to_secret_data()
        .into_iter()
        .map(|(k, v)| (k, ByteString(v)))
        .collect()
}

impl CertRotator {
    /// A rotator writing into `resolver`. Fails when the policy is unsafe.
    pub fn new(
        client: Client,
        cfg: RotationConfig,
        resolver: Arc<CertResolver>,
    ) -> Result<Self, RotationError> {
        cfg.policy.validate()?;
        Ok(Self {
            client,
            cfg,
            resolver,
            loaded_cert: Mutex::new(None),
            clock: Mutex::new(PropagationClock::default()),
            unpropagated: AtomicUsize::new(0),
        })
    }

    /// The resolver this rotator loads.
    pub fn resolver(&self) -> &Arc<CertResolver> {
        &self.resolver
    }

    /// The configuration.
    pub fn config(&self) -> &RotationConfig {
        &self.cfg
    }

    /// CAs of the Secret that the last read-back did not find in every webhook's live
    /// caBundle (kept up to date also when injecting fails, e.g. without permission).
    pub fn unpropagated_cas(&self) -> usize {
        self.unpropagated.load(Ordering::Relaxed)
    }

    /// One synchronisation at wall-clock `now`.
    pub async fn sync_once(&self) -> Result<SyncOutcome, RotationError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.cfg.namespace);
        let name = &self.cfg.secret_name;
        let where_ = format!("{}/{}", self.cfg.namespace, name);
        let mut outcome = SyncOutcome::default();
        let mut material = None;
        for _ in 0..MAX_ATTEMPTS {
            let now = SystemTime::now();
            let existing = api
                .get_opt(name)
                .await
                .map_err(kube_err(format!("reading Secret {where_}")))?;
            let current = match &existing {
                None => CertMaterial::default(),
                Some(s) => {
                    let data: BTreeMap<String, Vec<u8>> = s
                        .data
                        .clone()
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0))
                        .collect();
                    CertMaterial::from_secret_data(&data).map_err(|source| {
                        RotationError::Material {
                            namespace: self.cfg.namespace.clone(),
                            name: name.clone(),
                            source,
                        }
                    })?
                }
            };
            let mut state = current.state(&self.cfg.names);
            state.trusted_since = self
                .clock
                .lock()
                .map(|c| c.trusted_since(&current.ca_ders()))
                .unwrap_or_default();
            let p = plan(&state, now, &self.cfg.policy);
            if p.is_empty() {
                material = Some(current);
                break;
            }
            let next = self.generate(current, p.clone(), now).await?;
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    resource_version: existing
                        .as_ref()
                        .and_then(|s| s.metadata.resource_version.clone()),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/managed-by".to_string(),
                        self.cfg.field_manager.clone(),
                    )])),
                    ..existing
                        .as_ref()
                        .map(|s| s.metadata.clone())
                        .unwrap_or_default()
                },
                type_: Some("Opaque".into()),
                data: Some(to_secret_data(&next)),
                ..Default::default()
            };
            let written = match existing {
                // Create-if-absent: when another replica was faster we lose, re-read, use its CA.
                None => api.create(&PostParams::default(), &secret).await,
                // Optimistic concurrency: the resourceVersion makes a concurrent change a 409.
                Some(_) => api.replace(name, &PostParams::default(), &secret).await,
            };
            match written {
                Ok(_) => {
                    tracing::info!(
                        secret = %where_,
                        added_ca = ?p.add_ca,
                        dropped_cas = p.drop_cas.len(),
                        issued_serving = ?p.issue_serving.map(|(_, r)| r),
                        "rotated webhook certificates"
                    );
                    outcome.added_ca = p.add_ca;
                    outcome.dropped_cas = p.drop_cas.len();
                    outcome.issued_serving = p.issue_serving.map(|(_, r)| r);
                    material = Some(next);
                    break;
                }
                Err(e) if is_status(&e, 409) => {
                    tracing::debug!(secret = %where_, "Secret changed concurrently; re-reading");
                    continue;
                }
                Err(kube::Error::Api(mut status)) => {
                    // A refusal may quote the keys the write carried (a policy engine on
                    // Secrets); the error is logged.
                    let carried: Vec<&[u8]> =
                        kim_shared::redact::data_values(secret.data.as_ref()).collect();
                    kim_shared::redact::status_in(&mut status, &carried);
                    let e = kube::Error::Api(status);
                    return Err(kube_err(format!("writing Secret {where_}"))(e));
                }
                Err(e) => return Err(kube_err(format!("writing Secret {where_}"))(e)),
            }
        }
        let material =
            material.ok_or_else(|| RotationError::Contended(where_.clone(), MAX_ATTEMPTS))?;

        outcome.bundle_size = material.cas.len();
        if let Some(serving) = &material.serving {
            outcome.serving_not_after =
                material.state(&self.cfg.names).serving.map(|s| s.not_after);
            let changed = self
                .loaded_cert
                .lock()
                .map(|g| g.as_deref() != Some(serving.cert_pem.as_str()))
                .unwrap_or(true);
            if changed {
                let (cert, key) = (serving.cert_pem.clone(), serving.key_pem.clone());
                let ck = joined(
                    tokio::task::spawn_blocking(move || CertResolver::certified_key(&cert, &key))
                        .await,
                )??;
                self.resolver.set(ck);
                if let Ok(mut g) = self.loaded_cert.lock() {
                    *g = Some(serving.cert_pem.clone());
                }
                outcome.loaded_new_serving = true;
            }
        }
        // What the apiserver holds before this replica injects: the propagation clock of a new
        // CA runs only while every webhook's caBundle contains it, and a read after the
        // injection would nearly always find it there, whoever took it out between two ticks.
        let live = self.live_bundles().await;
        let injected = self.inject(&material.ca_bundle_pem()).await;
        let cas = material.ca_ders();
        if let Ok(live) = &live
            && let Ok(mut clock) = self.clock.lock()
        {
            clock.observe(&cas, live, SystemTime::now());
        }
        outcome.unpropagated_cas = self
            .clock
            .lock()
            .map(|c| c.unpropagated(&cas))
            .unwrap_or(cas.len());
        self.unpropagated
            .store(outcome.unpropagated_cas, Ordering::Relaxed);
        outcome.injected = injected?;
        live?;
        Ok(outcome)
    }

    /// The caBundle of every webhook of the configured configurations, as DER certificates
    /// (a configuration that does not exist contributes nothing).
    pub async fn live_bundles(&self) -> Result<Vec<Vec<Vec<u8>>>, RotationError> {
        let mut out = Vec::new();
        for name in &self.cfg.mutating_configs {
            let api: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
            if let Some(live) = api.get_opt(name).await.map_err(kube_err(format!(
                "reading back MutatingWebhookConfiguration {name}"
            )))? {
                out.extend(live.webhooks.unwrap_or_default().into_iter().map(|w| {
                    bundle_ders(&w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default())
                }));
            }
        }
        for name in &self.cfg.validating_configs {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
            if let Some(live) = api.get_opt(name).await.map_err(kube_err(format!(
                "reading back ValidatingWebhookConfiguration {name}"
            )))? {
                out.extend(live.webhooks.unwrap_or_default().into_iter().map(|w| {
                    bundle_ders(&w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default())
                }));
            }
        }
        Ok(out)
    }

    async fn generate(
        &self,
        current: CertMaterial,
        p: Plan,
        now: SystemTime,
    ) -> Result<CertMaterial, RotationError> {
        let names = self.cfg.names.clone();
        let (ca_life, serving_life) = (
            self.cfg.policy.ca_lifetime,
            self.cfg.policy.serving_lifetime,
        );
        // Key generation and signing are CPU work; keep them off the async executor.
        joined(
            tokio::task::spawn_blocking(move || {
                current.apply(&p, now, &names, ca_life, serving_life)
            })
            .await,
        )?
        .map_err(RotationError::Generate)
    }

    /// Writes the caBundle into every configured webhook configuration whose webhooks do not
    /// carry it yet, by server-side apply with our field manager. Returns the names updated.
    pub async fn inject(&self, bundle_pem: &str) -> Result<Vec<String>, RotationError> {
        let want = bundle_pem.as_bytes();
        let mut updated = Vec::new();
        for name in &self.cfg.mutating_configs {
            let api: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
            let Some(live) = api.get_opt(name).await.map_err(kube_err(format!(
                "reading MutatingWebhookConfiguration {name}"
            )))?
            else {
                tracing::warn!(config = %name, "MutatingWebhookConfiguration not found; caBundle not injected");
                continue;
            };
            let hooks: Vec<(String, Option<Vec<u8>>)> = live
                .webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| (w.name, w.client_config.ca_bundle.map(|b| b.0)))
                .collect();
            if self
                .apply_bundle::<MutatingWebhookConfiguration>(name, &hooks, want)
                .await?
            {
                updated.push(name.clone());
            }
        }
        for name in &self.cfg.validating_configs {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
            let Some(live) = api.get_opt(name).await.map_err(kube_err(format!(
                "reading ValidatingWebhookConfiguration {name}"
            )))?
            else {
                tracing::warn!(config = %name, "ValidatingWebhookConfiguration not found; caBundle not injected");
                continue;
            };
            let hooks: Vec<(String, Option<Vec<u8>>)> = live
                .webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| (w.name, w.client_config.ca_bundle.map(|b| b.0)))
                .collect();
            if self
                .apply_bundle::<ValidatingWebhookConfiguration>(name, &hooks, want)
                .await?
            {
                updated.push(name.clone());
            }
        }
        Ok(updated)
    }

    async fn apply_bundle<K>(
        &self,
        name: &str,
        hooks: &[(String, Option<Vec<u8>>)],
        want: &[u8],
    ) -> Result<bool, RotationError>
    where
        K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        if hooks.is_empty() || hooks.iter().all(|(_, b)| b.as_deref() == Some(want)) {
            return Ok(false);
        }
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(want);
        let webhooks: Vec<_> = hooks
            .iter()
            .map(|(n, _)| json!({"name": n, "clientConfig": {"caBundle": b64}}))
            .collect();
        let body = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": {"name": name},
            "webhooks": webhooks,
        });
        let api: Api<K> = Api::all(self.client.clone());
        api.patch(
            name,
            &PatchParams::apply(&self.cfg.field_manager).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(kube_err(format!(
            "applying caBundle to {} {name}",
            K::kind(&())
        )))?;
        tracing::info!(config = %name, kind = %K::kind(&()), "injected caBundle");
        Ok(true)
    }

    /// Synchronises on every `check_interval` tick (wall clock, so a suspended process catches
    /// up at once) until `shutdown` resolves. `observe` sees every result, e.g. for metrics.
    pub async fn run<F>(
        self: Arc<Self>,
        shutdown: impl std::future::Future<Output = ()>,
        mut observe: F,
    ) where
        F: FnMut(&Result<SyncOutcome, RotationError>) + Send,
    {
        let mut tick = tokio::time::interval(self.cfg.policy.check_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tick.tick() => {}
            }
            let result = self.sync_once().await;
            if let Err(e) = &result {
                tracing::warn!(error = %e, "certificate synchronisation failed; retrying on the next tick");
            }
            observe(&result);
        }
    }
}
/// The result of a blocking task of the rotation. A panic there is raised again here, in the
/// rotation's own task, so that whoever supervises the rotation sees it (the webhook stops)
/// instead of a failure retried on every tick.
fn joined<T>(result: Result<T, tokio::task::JoinError>) -> Result<T, RotationError> {
    match result {
        Ok(value) => Ok(value),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(RotationError::Task(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    /// A panic in a blocking step comes out of the rotation's task as a panic, not as an error
    /// it would log and retry.
    #[tokio::test]
    async fn a_panic_in_a_blocking_step_is_raised_in_the_rotation_task() {
        let outer = tokio::spawn(async {
            super::joined(tokio::task::spawn_blocking(|| -> u8 { panic!("a bug") }).await)
        });
        assert!(outer.await.is_err_and(|e| e.is_panic()));
        assert!(matches!(super::joined(Ok::<u8, _>(1)), Ok(1)));
    }
}
