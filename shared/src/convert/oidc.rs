//! OIDC as structured authentication: the Shoot's kube-apiserver reads its JWT authenticator
//! from a ConfigMap in the Gardener project.
//!
//! Gardener removed `kubeAPIServer.oidcConfig` in v1.142 (forbidden from Kubernetes 1.32 before
//! that), so the legacy form is never written: every Shoot points its kube-apiserver at the
//! ConfigMap `structured-auth-config-<shoot>` holding one JWT authenticator.

use super::Input;
use crate::gardener::Shoot;
use crate::gardener::kubernetes::{KubeApiServerConfig, StructuredAuthentication};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;
use std::collections::BTreeMap;

pub use crate::names::{STRUCTURED_AUTH_CONFIG_KEY, structured_auth_config_map_name};

/// The claim upstream's kube-apiserver flags default the username to.
const DEFAULT_USERNAME_CLAIM: &str = "sub";

/// Replaces `kubeAPIServer` with a reference to the structured-authentication ConfigMap. Later
/// extenders (audit log) add to it.
pub(super) fn structured_authentication(input: &Input<'_>, shoot: &mut Shoot) {
    shoot.spec.kubernetes.kube_api_server = Some(KubeApiServerConfig {
        structured_authentication: Some(StructuredAuthentication {
            config_map_name: structured_auth_config_map_name(&input.shoot().name),
        }),
        ..Default::default()
    });
}

/// The OIDC provider of the kube-apiserver, with the values the authenticator needs.
struct Provider<'a> {
    issuer_url: &'a str,
    client_id: &'a str,
    username_claim: &'a str,
    username_prefix: Option<&'a str>,
    groups_claim: Option<&'a str>,
    groups_prefix: Option<&'a str>,
}

/// The Runtime's `oidcConfig` when it names an issuer and a client, else the configuration's
/// `defaultOperatorOidc` (KEB never sets `oidcConfig`).
fn provider<'a>(input: &Input<'a>) -> Provider<'a> {
    let set = |v: &'a Option<String>| v.as_deref().filter(|s| !s.is_empty());
    let runtime = input
        .shoot()
        .kubernetes
        .as_ref()
        .and_then(|k| k.kube_api_server.as_ref())
        .and_then(|a| a.oidc_config.as_ref());
    if let Some(o) = runtime
        && let (Some(issuer_url), Some(client_id)) = (set(&o.issuer_url), set(&o.client_id))
    {
        return Provider {
            issuer_url,
            client_id,
            username_claim: set(&o.username_claim).unwrap_or(DEFAULT_USERNAME_CLAIM),
            username_prefix: o.username_prefix.as_deref(),
            groups_claim: set(&o.groups_claim),
            groups_prefix: o.groups_prefix.as_deref(),
        };
    }
    let d = &input.cfg.converter.kubernetes.default_operator_oidc;
    Provider {
        issuer_url: &d.issuer_url,
        client_id: &d.client_id,
        username_claim: &d.username_claim,
        username_prefix: Some(&d.username_prefix),
        groups_claim: Some(d.groups_claim.as_str()).filter(|c| !c.is_empty()),
        groups_prefix: None,
    }
}

/// The `AuthenticationConfiguration` (`apiserver.config.k8s.io/v1beta1`) with one JWT
/// authenticator; additional OIDC providers are configured in the cluster, not here.
pub(super) fn authentication_configuration(input: &Input<'_>) -> serde_json::Value {
    let p = provider(input);
    // The kube-apiserver requires a prefix whenever a claim is mapped. A missing username
    // prefix means what it meant for the legacy `oidcConfig`: none for `email`, else the
    // issuer URL and `#`. A missing groups prefix is "" (upstream).
    let username_prefix = match p.username_prefix {
        Some(prefix) => prefix.to_owned(),
        None if p.username_claim == "email" => String::new(),
        None => format!("{}#", p.issuer_url),
    };
    let mut claim_mappings = serde_json::Map::new();
    if let Some(claim) = p.groups_claim {
        claim_mappings.insert(
            "groups".to_owned(),
            json!({"claim": claim, "prefix": p.groups_prefix.unwrap_or("")}),
        );
    }
    claim_mappings.insert(
        "username".to_owned(),
        json!({"claim": p.username_claim, "prefix": username_prefix}),
    );
    json!({
        "apiVersion": "apiserver.config.k8s.io/v1beta1",
        "jwt": [{
            "claimMappings": claim_mappings,
            "issuer": {"audiences": [p.client_id], "url": p.issuer_url},
        }],
        "kind": "AuthenticationConfiguration",
    })
}

/// The ConfigMap `structured-auth-config-<shoot>` in the Gardener project namespace.
pub(super) fn config_map(input: &Input<'_>) -> ConfigMap {
    let config = authentication_configuration(input);
    // Serializing a JSON value to YAML cannot fail; should it ever, JSON is valid YAML too.
    let yaml = serde_yaml_ng::to_string(&config).unwrap_or_else(|_| config.to_string());
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(structured_auth_config_map_name(&input.shoot().name)),
            namespace: Some(input.cfg.converter.gardener.namespace()),
            // So the garden's operators can tell ours and whose it is (a Runtime whose
            // finalizer was removed by hand leaves it behind).
            labels: Some(BTreeMap::from([
                (
                    crate::names::LABEL_MANAGED_BY.to_owned(),
                    crate::names::MANAGED_BY_INFRASTRUCTURE_MANAGER.to_owned(),
                ),
                (
                    crate::names::LABEL_RUNTIME_ID.to_owned(),
                    input.runtime_id.to_owned(),
                ),
            ])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            STRUCTURED_AUTH_CONFIG_KEY.to_owned(),
            yaml,
        )])),
        ..Default::default()
    }
}
