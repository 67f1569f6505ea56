//! CREATE rules on access: OIDC providers, administrators, the kube-apiserver ACL and the
//! network filter.
#![allow(clippy::unwrap_used)]

use crate::validation_fixtures::*;
use k8s_openapi::ByteString;
use kim_shared::api::Runtime;
use kim_shared::api::runtime::{Acl, AdditionalOidcConfig, RuntimeApiServer};
use kim_shared::gardener::OidcConfig;
use std::collections::BTreeMap;

const MAIN: &str = "spec.shoot.kubernetes.kubeAPIServer.oidcConfig";
const EXTRA: &str = "spec.shoot.kubernetes.kubeAPIServer.additionalOidcConfig[0]";

fn api(rt: &mut Runtime) -> &mut RuntimeApiServer {
    rt.spec
        .shoot
        .kubernetes
        .get_or_insert_with(Default::default)
        .kube_api_server
        .get_or_insert_with(Default::default)
}

/// The sample with a main OIDC provider (KEB writes only `additionalOidcConfig`; operators and
/// older Runtimes set `oidcConfig`), changed by `edit`.
fn main_oidc(edit: impl FnOnce(&mut OidcConfig)) -> Runtime {
    runtime(|rt| {
        let main = api(rt).oidc_config.get_or_insert_with(|| {
            serde_json::from_value(serde_json::json!({
                "clientID": "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
                "groupsClaim": "groups",
                "issuerURL": "https://my.cool.tokens.com",
                "signingAlgs": ["RS256"],
                "usernameClaim": "sub"
            }))
            .unwrap()
        });
        edit(main)
    })
}

fn extra_oidc(edit: impl FnOnce(&mut AdditionalOidcConfig)) -> Runtime {
    runtime(|rt| edit(&mut api(rt).additional_oidc_config.as_mut().unwrap()[0]))
}

#[test]
fn issuer_url_must_be_https() {
    for bad in [
        "http://my.cool.tokens.com",
        "my.cool.tokens.com",
        "https://",
        "https://a.b/?x=1",
        "https://a.b/#f",
        "https://u@a.b",
    ] {
        rejects(
            &main_oidc(|o| o.issuer_url = Some(bad.into())),
            &format!("{MAIN}.issuerURL"),
        );
        rejects(
            &extra_oidc(|o| o.oidc.issuer_url = Some(bad.into())),
            &format!("{EXTRA}.issuerURL"),
        );
    }
    accepts(&main_oidc(|o| {
        o.issuer_url = Some("https://kyma.accounts.ondemand.com/path".into())
    }));
}

#[test]
fn main_oidc_needs_client_and_issuer_together_or_neither() {
    rejects_with(
        &main_oidc(|o| o.client_id = None),
        &format!("{MAIN}.clientID"),
        "neither",
    );
    rejects(
        &main_oidc(|o| o.issuer_url = None),
        &format!("{MAIN}.issuerURL"),
    );
    accepts(&main_oidc(|o| {
        o.client_id = None;
        o.issuer_url = None;
    }));
}

/// An entry without its client ID or issuer stands for the configured default provider (the
/// controller's rule and upstream's): a warning. KEB writes `[{}]` when an update brings an
/// empty `oidc` object to a Runtime without a list. An empty one is refused: the OpenIDConnect
/// in the cluster would be.
#[test]
fn additional_oidc_needs_client_and_issuer() {
    rejects(
        &extra_oidc(|o| o.oidc.client_id = Some(String::new())),
        &format!("{EXTRA}.clientID"),
    );
    rejects(
        &extra_oidc(|o| o.oidc.issuer_url = Some(String::new())),
        &format!("{EXTRA}.issuerURL"),
    );
    warns(
        &extra_oidc(|o| o.oidc.issuer_url = None),
        &format!("{EXTRA}.issuerURL"),
        "default OIDC provider",
    );
    warns(
        &extra_oidc(|o| *o = Default::default()),
        &format!("{EXTRA}.clientID"),
        "default OIDC provider",
    );
    rejects(
        &extra_oidc(|o| o.oidc.client_id = Some("a b".into())),
        &format!("{EXTRA}.clientID"),
    );
}

#[test]
fn signing_algorithms_are_the_allowed_ones() {
    rejects_with(
        &main_oidc(|o| o.signing_algs = Some(vec!["RS256".into(), "HS256".into()])),
        &format!("{MAIN}.signingAlgs[1]"),
        "ES256",
    );
    accepts(&extra_oidc(|o| {
        o.oidc.signing_algs = Some(vec!["ES384".into(), "PS512".into()])
    }));
}

/// Asserts that `rt` is admitted with a warning on `field` that contains `text`.
fn warns(rt: &Runtime, field: &str, text: &str) {
    let f = accepts(rt);
    assert!(
        f.warnings
            .iter()
            .any(|w| w.starts_with(field) && w.contains(text)),
        "{field}: {:?}",
        f.warnings
    );
}

#[test]
fn required_claims_are_well_formed() {
    let claims = |k: &str, v: &str| Some(BTreeMap::from([(k.to_owned(), v.to_owned())]));
    accepts(&extra_oidc(|o| {
        o.oidc.required_claims = claims("aud", "kyma")
    }));
    warns(
        &extra_oidc(|o| o.oidc.required_claims = claims("a=b", "x")),
        &format!("{EXTRA}.requiredClaims[a=b]"),
        "not a claim name",
    );
    warns(
        &extra_oidc(|o| o.oidc.required_claims = claims("my claim", "x")),
        &format!("{EXTRA}.requiredClaims[my claim]"),
        "not a claim name",
    );
    rejects(
        &main_oidc(|o| o.required_claims = claims("aud", "")),
        &format!("{MAIN}.requiredClaims[aud]"),
    );
    rejects(
        &main_oidc(|o| o.required_claims = claims("a b", "x")),
        &format!("{MAIN}.requiredClaims[a b]"),
    );
}

#[test]
fn claim_names_and_ca_bundle_are_well_formed() {
    rejects(
        &main_oidc(|o| o.username_claim = Some(String::new())),
        &format!("{MAIN}.usernameClaim"),
    );
    warns(
        &extra_oidc(|o| o.oidc.groups_claim = Some("my groups".into())),
        &format!("{EXTRA}.groupsClaim"),
        "no token will match it",
    );
    rejects(
        &main_oidc(|o| o.ca_bundle = Some("not a certificate".into())),
        &format!("{MAIN}.caBundle"),
    );
}

#[test]
fn jwks_must_be_a_key_set() {
    let jwks = |json: &str| extra_oidc(|o| o.jwks = Some(ByteString(json.as_bytes().to_vec())));
    let f = accepts(&jwks(
        r#"{"keys":[{"kty":"RSA","kid":"1","n":"sXch","e":"AQAB"}]}"#,
    ));
    assert!(f.warnings.is_empty(), "{:?}", f.warnings);
    warns(
        &jwks("{not json"),
        &format!("{EXTRA}.jwks"),
        "JSON Web Key Set",
    );
    warns(&jwks(r#"{"keys":[]}"#), &format!("{EXTRA}.jwks"), "no keys");
}

#[test]
fn jwks_arrives_base64_encoded() {
    // In the JSON of a Runtime `jwks` is base64, as KEB writes it; the decoded bytes are checked.
    let mut json = serde_json::to_value(sample()).unwrap();
    let set = r#"{"keys":[{"kty":"EC","crv":"P-256","x":"f83O","y":"x_FE"}]}"#;
    json["spec"]["shoot"]["kubernetes"]["kubeAPIServer"]["additionalOidcConfig"][0]["jwks"] =
        base64_encode(set).into();
    let rt: Runtime = serde_json::from_value(json).unwrap();
    accepts(&rt);
}

/// Standard base64 (the test has no base64 dependency of its own).
fn base64_encode(s: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in s.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn client_authentication_is_ignored_with_a_warning() {
    let rt = main_oidc(|o| o.client_authentication = Some(Default::default()));
    let f = accepts(&rt);
    assert!(
        f.warnings
            .iter()
            .any(|w| w.starts_with(&format!("{MAIN}.clientAuthentication"))),
        "{:?}",
        f.warnings
    );
}

/// Administrators are not part of the Shoot, and KEB writes `[]` for old runtimes without a
/// user ID and entries as typed: each oddity is a warning, never a refusal.
#[test]
fn odd_administrators_are_warnings() {
    warns(
        &runtime(|rt| rt.spec.security.administrators.clear()),
        "spec.security.administrators",
        "names no administrator",
    );
    warns(
        &runtime(|rt| rt.spec.security.administrators.push(" ".into())),
        "spec.security.administrators[1]",
        "skipped",
    );
    warns(
        &runtime(|rt| rt.spec.security.administrators[0] = " admin@example.com".into()),
        "spec.security.administrators[0]",
        "whitespace",
    );
    let twice = runtime(|rt| {
        let first = rt.spec.security.administrators[0].clone();
        rt.spec.security.administrators.push(first)
    });
    assert!(accepts(&twice).warnings.iter().any(|w| w.contains("twice")));
}

#[test]
fn acl_cidrs_parse() {
    let acl = |cidrs: &[&str]| {
        runtime(|rt| {
            api(rt).acl = Some(Acl {
                allowed_cidrs: Some(cidrs.iter().map(|c| (*c).to_owned()).collect()),
            })
        })
    };
    accepts(&acl(&["203.0.113.0/24", "2001:db8::/32"]));
    rejects(
        &acl(&["203.0.113.0/24", "203.0.113.7"]),
        "spec.shoot.kubernetes.kubeAPIServer.acl.allowedCIDRs[1]",
    );
    let f = accepts(&acl(&["203.0.113.7/24"]));
    assert!(
        f.warnings.iter().any(|w| w.contains("203.0.113.0/24")),
        "{:?}",
        f.warnings
    );
}

#[test]
fn ingress_filtering_without_egress_filtering_is_a_warning() {
    let rt = runtime(|rt| rt.spec.security.networking.filter.egress.enabled = true);
    let f = accepts(&rt);
    assert!(
        !f.warnings.iter().any(|w| w.contains("ingress")),
        "{:?}",
        f.warnings
    );
}

/// Duplicates among as many administrators as the CRD allows (5,000) are each reported once.
#[test]
fn duplicate_administrators_among_many_are_each_reported_once() {
    let rt = runtime(|rt| {
        let admins = &mut rt.spec.security.administrators;
        admins.clear();
        admins.extend((0..4_998).map(|i| format!("user-{i}@example.com")));
        admins.push("user-7@example.com".into());
        admins.push("user-4997@example.com".into());
    });
    let findings = accepts(&rt);
    let twice: Vec<&String> = findings
        .warnings
        .iter()
        .filter(|w| w.contains("twice"))
        .collect();
    assert_eq!(twice.len(), 2, "{twice:?}");
    assert!(
        twice[0].starts_with("spec.security.administrators[4998]"),
        "{twice:?}"
    );
}
