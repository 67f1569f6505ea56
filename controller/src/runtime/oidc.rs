//! OIDC in the runtime cluster (upstream `sFnConfigureOidc`): one
//! `OpenIDConnect` (`authentication.gardener.cloud/v1alpha1`) per `additionalOidcConfig`
//! entry, named `kyma-oidc-<i>`, the configured default shared IAS tenant when the list is unset,
//! or none for an empty list ([`wanted`]). Unlike upstream
//! (delete all, then create), we apply each by server-side apply and delete only the
//! managed ones no longer wanted, so a reconcile does not open a window without OIDC.
//!
//! Two more differences: an entry without `usernameClaim` gets `sub` (the OpenIDConnect CRD
//! requires the field, so upstream's object is refused and the Runtime stays unconfigured;
//! `sub` is Kubernetes' own default and what the Shoot's kube-apiserver gets for its
//! provider), and every object is applied even when one fails, the error naming each
//! failure (upstream reports only the last). An object upstream created is taken over at its
//! first apply ([`apply_one`]).

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
use super::co_owned::{Part, co_owned, take_over};
use serde_json::{Value, json};

/// The claim an entry without `usernameClaim` maps to the user name.
pub const DEFAULT_USERNAME_CLAIM: &str = "sub";

/// Field manager for objects in the runtime cluster.
pub const RUNTIME_CLUSTER_FIELD_MANAGER: &str = "kim";

/// Whether the Shoot has the `shoot-oidc-service` extension enabled (nil `disabled` = on).
pub fn extension_enabled(shoot: &Shoot) -> bool {
    shoot.spec.extension_enabled(extension::OIDC_SERVICE)
}

/// The `OpenIDConnect` specs wanted for a Runtime (upstream's rule): `default` when
/// `additionalOidcConfig` is unset or an entry lacks its client ID or issuer; none for an empty
/// list (KEB writes `[]` for a customer's `oidc: {list: []}`: no OIDC provider in the cluster);
/// else one per entry.
pub fn wanted(runtime: &Runtime, default: Value) -> Vec<Value> {
    let configs = runtime
        .spec
        .shoot
        .kubernetes
        .as_ref()
        .and_then(|k| k.kube_api_server.as_ref())
        .and_then(|a| a.additional_oidc_config.as_ref());
    let Some(configs) = configs else {
        return vec![default];
    };
    if configs
        .iter()
        .any(|c| c.oidc.client_id.is_none() || c.oidc.issuer_url.is_none())
    {
        return vec![default];
    }
    configs
        .iter()
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
        .collect()
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
        if let Err(e) = apply_one(&api, &name, &pp, &obj).await {
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

/// Applies one OpenIDConnect. One that upstream KIM created (a plain create, whose `Update`
/// entry owns every field it wrote) is taken over after the apply, and applied again: a field
/// the Runtime no longer sets (required claims, JWKS keys, signing algorithms KEB removed) would
/// otherwise stay, co-owned by that entry.
async fn apply_one(
    api: &Api<DynamicObject>,
    name: &str,
    pp: &PatchParams,
    obj: &Value,
) -> Result<(), kube::Error> {
    let applied = api.patch(name, pp, &Patch::Apply(obj)).await?;
    let entries = applied
        .metadata
        .managed_fields
        .as_deref()
        .unwrap_or_default();
    let part = Part::Spec;
    if !co_owned(entries, RUNTIME_CLUSTER_FIELD_MANAGER, part) {
        return Ok(());
    }
    // The object is applied either way: a take-over that fails is tried again next pass.
    match take_over(api, &applied, RUNTIME_CLUSTER_FIELD_MANAGER, part).await {
        Ok(true) => {
            tracing::info!(name, "OpenIDConnect fields of another writer taken over");
            api.patch(name, pp, &Patch::Apply(obj)).await?;
        }
        Ok(false) => {}
        Err(e) => {
            tracing::info!(name, error = %message(&e), "OpenIDConnect fields of another writer not taken over; the next pass tries again");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kim_shared::api::runtime::{AdditionalOidcConfig, RuntimeApiServer, RuntimeKubernetes};
    use kim_shared::gardener::OidcConfig;

    fn with_entries(entries: Option<Vec<AdditionalOidcConfig>>) -> Runtime {
        let mut runtime = Runtime::new("rt", Default::default());
        runtime.spec.shoot.kubernetes = Some(RuntimeKubernetes {
            kube_api_server: Some(RuntimeApiServer {
                additional_oidc_config: entries,
                ..Default::default()
            }),
            ..Default::default()
        });
        runtime
    }

    fn entry(client_id: Option<&str>, issuer_url: Option<&str>) -> AdditionalOidcConfig {
        AdditionalOidcConfig {
            oidc: OidcConfig {
                client_id: client_id.map(Into::into),
                issuer_url: issuer_url.map(Into::into),
                signing_algs: Some(vec!["RS256".into()]),
                ..Default::default()
            },
            jwks: None,
        }
    }

    #[test]
    fn default_when_unset_or_incomplete_none_for_an_empty_list() {
        let default = json!({"clientID": "d"});
        let complete = entry(Some("c"), Some("https://i"));
        assert_eq!(
            wanted(&with_entries(None), default.clone()),
            vec![default.clone()]
        );
        assert_eq!(
            wanted(&with_entries(Some(vec![complete.clone()])), default.clone()),
            vec![
                json!({"clientID": "c", "issuerURL": "https://i", "supportedSigningAlgs": ["RS256"],
                       "usernameClaim": "sub"})
            ]
        );
        // One entry without an issuer: the default alone, as upstream.
        let partial = with_entries(Some(vec![complete, entry(Some("x"), None)]));
        assert_eq!(wanted(&partial, default.clone()), vec![default.clone()]);
        // An empty list: no provider at all (the customer turned OIDC off).
        assert_eq!(
            wanted(&with_entries(Some(Vec::new())), default),
            Vec::<Value>::new()
        );
    }
}
