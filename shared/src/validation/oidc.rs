//! OIDC rules: `kubeAPIServer.oidcConfig` and every `additionalOidcConfig` entry.

use super::context::Ctx;
use super::{Item, ValidationOutcome, syntax};
use crate::config::SIGNING_ALGORITHMS;
use crate::gardener::OidcConfig;

const MAIN: &str = "spec.shoot.kubernetes.kubeAPIServer.oidcConfig";
const ADDITIONAL: &str = "spec.shoot.kubernetes.kubeAPIServer.additionalOidcConfig";

/// Where an OIDC entry sits, for field paths.
#[derive(Clone, Copy)]
enum At {
    Main,
    Additional(Item),
}

impl At {
    fn field(self, key: &str) -> String {
        match self {
            At::Main => format!("{MAIN}.{key}"),
            At::Additional(item) => item.field(key),
        }
    }

    /// A claim or key set the authenticator cannot use. In `oidcConfig` it goes into the
    /// Shoot's structured authentication, which the kube-apiserver must accept: refused. An
    /// `additionalOidcConfig` entry only becomes an `OpenIDConnect` in the cluster, which takes
    /// it as given (KEB passes the customer's values through): a warning, so that no KEB update
    /// is refused over it.
    fn unusable(self, f: &mut ValidationOutcome, key: &str, message: String) {
        match self {
            At::Main => f.violation(self.field(key), message),
            At::Additional(_) => f.warning(
                self.field(key),
                format_args!("{message} (the OpenIDConnect in the cluster gets it as given, and no token will match it)"),
            ),
        }
    }
}

pub(crate) fn check(ctx: &Ctx<'_>, f: &mut ValidationOutcome) {
    let Some(api) = ctx
        .rt
        .spec
        .shoot
        .kubernetes
        .as_ref()
        .and_then(|k| k.kube_api_server.as_ref())
    else {
        return;
    };
    if let Some(oidc) = &api.oidc_config {
        // Neither clientID nor issuerURL: the configured operator OIDC applies (upstream).
        let has_client = oidc.client_id.as_deref().is_some_and(|s| !s.is_empty());
        let has_issuer = oidc.issuer_url.as_deref().is_some_and(|s| !s.is_empty());
        if has_client != has_issuer {
            let missing = if has_client { "issuerURL" } else { "clientID" };
            f.violation(
                At::Main.field(missing),
                "must be set together with clientID and issuerURL; set both, or neither to use the configured operator OIDC provider",
            );
        }
        entry(At::Main, oidc, f);
    }
    for (index, extra) in api.additional_oidc_config.iter().flatten().enumerate() {
        let at = At::Additional(Item {
            list: ADDITIONAL,
            index,
        });
        let o = &extra.oidc;
        for (key, value, what) in [
            (
                "issuerURL",
                &o.issuer_url,
                "the issuer's https URL, e.g. https://kyma.accounts.ondemand.com",
            ),
            (
                "clientID",
                &o.client_id,
                "the client ID tokens are issued for (their audience)",
            ),
        ] {
            match value.as_deref() {
                // Upstream's rule, and the controller's: an entry without its client ID or
                // issuer stands for the configured default provider. KEB writes such an entry
                // when an update brings an empty `oidc` object to a Runtime without a list.
                None => f.warning(
                    at.field(key),
                    format_args!("is not set, so the cluster gets the configured default OIDC provider in place of every additionalOidcConfig entry; set it to {what} to use this entry"),
                ),
                Some("") => f.violation(
                    at.field(key),
                    format!("must not be empty (the OpenIDConnect in the cluster refuses it); set it to {what}, or leave it out for the configured default OIDC provider"),
                ),
                Some(_) => {}
            }
        }
        entry(at, o, f);
        if let Some(jwks) = &extra.jwks
            && let Err(why) = jwks_problem(&jwks.0)
        {
            at.unusable(f, "jwks", why);
        }
    }
}

/// The rules every OIDC entry shares.
fn entry(at: At, o: &OidcConfig, f: &mut ValidationOutcome) {
    if let Some(url) = o.issuer_url.as_deref().filter(|u| !u.is_empty())
        && let Some(why) = syntax::issuer_url_problem(url)
    {
        f.violation(at.field("issuerURL"), format!("{url:?} {why}"));
    }
    if let Some(id) = o.client_id.as_deref().filter(|c| !c.is_empty())
        && id.chars().any(char::is_whitespace)
    {
        f.violation(
            at.field("clientID"),
            format!("{id:?} contains whitespace; use the client ID exactly as the issuer knows it"),
        );
    }
    for (i, alg) in o.signing_algs.iter().flatten().enumerate() {
        if !SIGNING_ALGORITHMS.contains(&alg.as_str()) {
            f.violation(
                at.field(&format!("signingAlgs[{i}]")),
                format!(
                    "{alg:?} is not an allowed signing algorithm; use one of {}",
                    SIGNING_ALGORITHMS.join(", ")
                ),
            );
        }
    }
    for (key, value) in o.required_claims.iter().flatten() {
        if key.is_empty() || key.contains(|c: char| c.is_whitespace() || c == '=') {
            at.unusable(
                f,
                &format!("requiredClaims[{key}]"),
                "is not a claim name; use a name without whitespace or '=', e.g. aud".to_owned(),
            );
        } else if value.is_empty() {
            at.unusable(
                f,
                &format!("requiredClaims[{key}]"),
                "must hold the value the claim must have".to_owned(),
            );
        }
    }
    for (key, claim) in [
        ("usernameClaim", &o.username_claim),
        ("groupsClaim", &o.groups_claim),
    ] {
        if let Some(c) = claim
            && (c.is_empty() || c.contains(char::is_whitespace))
        {
            at.unusable(
                f,
                key,
                format!(
                    "{c:?} is not a claim name; use e.g. sub, email or groups, or leave it out"
                ),
            );
        }
    }
    if let Some(ca) = &o.ca_bundle
        && !ca.contains("-----BEGIN CERTIFICATE-----")
    {
        f.violation(
            at.field("caBundle"),
            "must hold PEM certificates (-----BEGIN CERTIFICATE-----), or be left out",
        );
    }
    if o.client_authentication.is_some() {
        f.warning(
            at.field("clientAuthentication"),
            "is ignored: it configures kubeconfig generation, which Gardener no longer offers",
        );
    }
}

/// What is wrong with a JSON Web Key Set, if anything: it must be a JSON object with a non-empty
/// `keys` array whose entries each name a key type (`kty`).
fn jwks_problem(bytes: &[u8]) -> Result<(), String> {
    #[derive(serde::Deserialize)]
    struct Jwks {
        keys: Vec<Jwk>,
    }
    #[derive(serde::Deserialize)]
    struct Jwk {
        kty: String,
    }
    let set: Jwks = serde_json::from_slice(bytes).map_err(|e| {
        format!("is not a JSON Web Key Set ({e}); give the base64 of JSON such as {{\"keys\":[{{\"kty\":\"RSA\",...}}]}}")
    })?;
    if set.keys.is_empty() {
        return Err("holds no keys; list the issuer's signing keys under \"keys\"".to_owned());
    }
    if let Some(i) = set.keys.iter().position(|k| k.kty.is_empty()) {
        return Err(format!(
            "key {i} has an empty \"kty\"; give the key type, e.g. RSA or EC"
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::jwks_problem;

    #[test]
    fn jwks_shapes() {
        assert!(jwks_problem(br#"{"keys":[{"kty":"RSA","n":"x","e":"AQAB"}]}"#).is_ok());
        assert!(
            jwks_problem(br#"{"keys":[]}"#)
                .unwrap_err()
                .contains("no keys")
        );
        assert!(jwks_problem(br#"{"keys":[{"kty":""}]}"#).is_err());
        assert!(
            jwks_problem(b"not json")
                .unwrap_err()
                .contains("not a JSON Web Key Set")
        );
        assert!(jwks_problem(br#"{"kty":"RSA"}"#).is_err());
    }
}
