//! OIDC in the runtime cluster (upstream `sFnConfigureOidc`): one
//! `OpenIDConnect` (`authentication.gardener.cloud/v1alpha1`) per `additionalOidcConfig`
//! entry, named `kyma-oidc-<i>`, or the configured default shared IAS tenant. Unlike upstream
//! (delete all, then create), we apply each by server-side apply and delete only the
//! managed ones no longer wanted, so a reconcile does not open a window without OIDC.
//!
//! Two more differences: an entry without `usernameClaim` gets `sub` (the OpenIDConnect CRD
//! requires the field, so upstream's object is refused and the Runtime stays unconfigured;
//! `sub` is Kubernetes' own default and what the Shoot's kube-apiserver gets for its
//! provider), and every object is applied even when one fails, the error naming each
//! failure (upstream reports only the last).

use kim_shared::api::Runtime;
use kim_shared::gardener::Shoot;
use kim_shared::names::{
    LABEL_MANAGED_BY, MANAGED_BY_INFRASTRUCTURE_MANAGER, extension, oidc_resource_name,
};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Api, Client};

use super::classify::message;
use serde_json::{Value, json};

/// The claim an entry without `usernameClaim` maps to the user name.
pub const DEFAULT_USERNAME_CLAIM: &str = "sub";

/// Field manager for objects in the runtime cluster.
pub const RUNTIME_CLUSTER_FIELD_MANAGER: &str = "kim";

/// Whether the Shoot has the `shoot-oidc-service` extension enabled (nil `disabled` = on).
pub fn extension_enabled(shoot: &Shoot) -> bool {
    shoot
        .spec
        .extensions
        .iter()
        .flatten()
        .any(|e| e.type_ == extension::OIDC_SERVICE && e.disabled != Some(true))
}

/// The `OpenIDConnect` specs wanted for a Runtime, `default` when it names none usable.
pub fn wanted(runtime: &Runtime, default: Value) -> Vec<Value> {
    let configs = runtime
        .spec
        .shoot
        .kubernetes
        .as_ref()
        .and_then(|k| k.kube_api_server.as_ref())
        .and_then(|a| a.additional_oidc_config.as_ref());
    let usable: Vec<Value> = configs
        .into_iter()
        .flatten()
        .filter(|c| c.oidc.client_id.is_some() && c.oidc.issuer_url.is_some())
        .map(|c| {
            let o = &c.oidc;
            let mut spec = json!({
                "issuerURL": o.issuer_url,
                "clientID": o.client_id,
                "usernameClaim": o
                    .username_claim
                    .as_deref()
                    .filter(|c| !c.is_empty())
                    .unwrap_or(DEFAULT_USERNAME_CLAIM),
                "usernamePrefix": o.username_prefix,
                "groupsClaim": o.groups_claim,
                "groupsPrefix": o.groups_prefix,
                "requiredClaims": o.required_claims,
                "supportedSigningAlgs": o.signing_algs,
            });
            if let Some(jwks) = &c.jwks {
                spec["jwks"] = json!({ "keys": serde_json::to_value(jwks).unwrap_or(Value::Null) });
            }
            strip_nulls(spec)
        })
        .collect();
    if usable.is_empty() {
        vec![default]
    } else {
        usable
    }
}

fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        other => other,
    }
}

fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("authentication.gardener.cloud", "v1alpha1", "OpenIDConnect"),
        "openidconnects",
    )
}

/// Applies the wanted `OpenIDConnect` objects and removes stale managed ones. Each object
/// is tried; the error names every one that failed.
pub async fn apply(runtime_client: &Client, specs: &[Value]) -> Result<(), String> {
    let ar = resource();
    let api: Api<DynamicObject> = Api::all_with(runtime_client.clone(), &ar);
    let pp = PatchParams::apply(RUNTIME_CLUSTER_FIELD_MANAGER).force();
    let mut names = Vec::new();
    let mut failed = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let name = oidc_resource_name(i);
        let obj = json!({
            "apiVersion": "authentication.gardener.cloud/v1alpha1",
            "kind": "OpenIDConnect",
            "metadata": {
                "name": name,
                "labels": { LABEL_MANAGED_BY: MANAGED_BY_INFRASTRUCTURE_MANAGER },
            },
            "spec": spec,
        });
        if let Err(e) = api.patch(&name, &pp, &Patch::Apply(obj)).await {
            failed.push(format!("OpenIDConnect {name}: {}", message(&e)));
        }
        names.push(name);
    }
    let selector = format!("{LABEL_MANAGED_BY}={MANAGED_BY_INFRASTRUCTURE_MANAGER}");
    match api.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => {
            for n in list
                .items
                .iter()
                .filter_map(|o| o.metadata.name.as_ref())
                .filter(|n| !names.contains(n))
            {
                match api.delete(n, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => failed.push(format!("deleting OpenIDConnect {n}: {}", message(&e))),
                }
            }
        }
        Err(e) => failed.push(format!("listing OpenIDConnects: {}", message(&e))),
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kim_shared::api::runtime::{AdditionalOidcConfig, RuntimeApiServer, RuntimeKubernetes};
    use kim_shared::gardener::OidcConfig;

    #[test]
    fn default_when_none_usable() {
        let mut runtime = Runtime::new("rt", Default::default());
        assert_eq!(
            wanted(&runtime, json!({"clientID": "d"})),
            vec![json!({"clientID": "d"})]
        );
        runtime.spec.shoot.kubernetes = Some(RuntimeKubernetes {
            kube_api_server: Some(RuntimeApiServer {
                additional_oidc_config: Some(vec![AdditionalOidcConfig {
                    oidc: OidcConfig {
                        client_id: Some("c".into()),
                        issuer_url: Some("https://i".into()),
                        signing_algs: Some(vec!["RS256".into()]),
                        ..Default::default()
                    },
                    jwks: None,
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
        let w = wanted(&runtime, json!({"clientID": "d"}));
        assert_eq!(
            w,
            vec![
                json!({"clientID": "c", "issuerURL": "https://i", "supportedSigningAlgs": ["RS256"],
                       "usernameClaim": "sub"})
            ]
        );
    }
}
