//! Registering admission webhook configurations that point at a webhook server running in the
//! test process (or started by `kim-dev`), and waiting until the API server enforces them.

use std::future::Future;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;

use super::{Result, TestEnv, TestEnvError, kube_err, pki::CertPair, wait};

impl TestEnv {
    /// A serving certificate for `127.0.0.1` and `localhost`, signed by the CA that
    /// [`TestEnv::webhook_ca_bundle`] returns.
    pub fn webhook_serving_cert(&self) -> Result<CertPair> {
        Ok(self
            .ca()
            .serving_cert("kim-webhook", &["127.0.0.1", "localhost"])?)
    }

    /// The PEM CA bundle for webhook `clientConfig.caBundle`.
    pub fn webhook_ca_bundle(&self) -> &str {
        &self.ca().pair.cert_pem
    }

    /// Creates or updates (Validating|Mutating)WebhookConfigurations given as JSON objects.
    /// Each webhook's `clientConfig` is rewritten to `url: <base_url><path>` (the path taken
    /// from `service.path`, or the existing URL's path) with our CA bundle. Then `probe` is
    /// polled until it returns `Ok` (e.g. a server-side dry-run of an object the webhook must
    /// reject): the API server picks configurations up asynchronously.
    pub async fn register_webhooks<P, Fut>(
        &self,
        configs: &[serde_json::Value],
        base_url: &str,
        probe: P,
    ) -> Result<()>
    where
        P: FnMut() -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        let client = self.kcp_client().await?;
        for cfg in configs {
            let cfg = rewrite_client_config(cfg, base_url, self.webhook_ca_bundle())?;
            let kind = cfg
                .get("kind")
                .and_then(|k| k.as_str())
                .unwrap_or_default()
                .to_string();
            let plural = match kind.as_str() {
                "ValidatingWebhookConfiguration" => "validatingwebhookconfigurations",
                "MutatingWebhookConfiguration" => "mutatingwebhookconfigurations",
                other => {
                    return Err(TestEnvError::Other(format!(
                        "not a webhook configuration kind: {other:?}"
                    )));
                }
            };
            let ar = ApiResource {
                group: "admissionregistration.k8s.io".into(),
                version: "v1".into(),
                api_version: "admissionregistration.k8s.io/v1".into(),
                kind: kind.clone(),
                plural: plural.into(),
            };
            let obj: DynamicObject =
                serde_json::from_value(cfg).map_err(|e| TestEnvError::Other(e.to_string()))?;
            let name = obj.metadata.name.clone().unwrap_or_default();
            Api::<DynamicObject>::all_with(client.clone(), &ar)
                .patch(
                    &name,
                    &PatchParams::apply("kim-testenv").force(),
                    &Patch::Apply(&obj),
                )
                .await
                .map_err(kube_err(format!("registering {kind} {name}")))?;
        }
        let mut probe = probe;
        wait::until(
            "webhook configuration enforced",
            Duration::from_secs(15),
            Duration::from_millis(100),
            || {
                let f = probe();
                async move { f.await.map_err(wait::NotYet::Retry) }
            },
        )
        .await?;
        Ok(())
    }
}

/// Points every webhook of a configuration at `base_url` with `ca_pem` as the CA bundle.
pub fn rewrite_client_config(
    cfg: &serde_json::Value,
    base_url: &str,
    ca_pem: &str,
) -> Result<serde_json::Value> {
    let mut cfg = cfg.clone();
    let webhooks = cfg
        .get_mut("webhooks")
        .and_then(|w| w.as_array_mut())
        .ok_or_else(|| TestEnvError::Other("webhook configuration without `webhooks`".into()))?;
    for wh in webhooks {
        let cc = &wh["clientConfig"];
        let path = cc["service"]["path"]
            .as_str()
            .map(str::to_string)
            .or_else(|| {
                cc["url"].as_str().map(|u| {
                    let after_scheme = u.split_once("://").map(|(_, r)| r).unwrap_or(u);
                    after_scheme
                        .find('/')
                        .map(|i| after_scheme[i..].to_string())
                        .unwrap_or_default()
                })
            })
            .unwrap_or_default();
        wh["clientConfig"] = serde_json::json!({
            "url": format!("{}{}", base_url.trim_end_matches('/'), path),
            "caBundle": B64.encode(ca_pem),
        });
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_reference_becomes_local_url_with_ca() {
        let cfg = serde_json::json!({
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "x"},
            "webhooks": [{"name": "a.b.c", "clientConfig": {"service": {"name": "s", "namespace": "n", "path": "/validate/runtime"}}}]
        });
        let out = rewrite_client_config(&cfg, "https://127.0.0.1:9443/", "PEM").unwrap();
        assert_eq!(
            out["webhooks"][0]["clientConfig"]["url"],
            "https://127.0.0.1:9443/validate/runtime"
        );
        assert_eq!(
            out["webhooks"][0]["clientConfig"]["caBundle"],
            B64.encode("PEM")
        );
        assert!(out["webhooks"][0]["clientConfig"].get("service").is_none());
    }
}
