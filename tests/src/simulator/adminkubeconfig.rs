//! A fast stand-in for Gardener's `shoots/<name>/adminkubeconfig` subresource, served by the
//! [`FaultProxy`](crate::faultproxy::FaultProxy) in front of the real apiserver (everything else
//! still reaches the real gardener-apiserver).
//!
//! Why: the real gardener-apiserver makes a fresh RSA-2048 key for every call (about 370 ms of
//! CPU on the 2-core test machine), so a wave of 10,000 kubeconfigs would measure Gardener's key
//! generation, not the controller. The stand-in answers as Gardener does: the same `AdminKubeconfigRequest` JSON with the (capped) `spec.expirationSeconds`,
//! `status.kubeconfig` (base64 YAML, one cluster/context/user named
//! `<namespace>--<shoot>-external`) and `status.expirationTimestamp` (the certificate's
//! NotAfter); a fresh client key per call (ECDSA P-256 instead of RSA: the cheap part of the
//! difference) signed by the shoot's client CA (Gardener's own CA key, RSA PKCS#1), CN
//! `gardener.cloud:admin:<user>`, O `gardener.cloud:system:admins` for a `system:masters` caller
//! (else `gardener.cloud:project:admins`), NotAfter = now + `expirationSeconds` (NotBefore a
//! minute back, as Gardener). So the kubeconfigs really authenticate against the shoot API
//! server. 422 below 600 s; capped at the maximum
//! (Gardener's default 24 h). Not simulated: the Shoot lookup (404, 422 without advertised
//! addresses), which the callers of this stand-in do not exercise.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::json;

use crate::faultproxy::{ApiFault, ProxyRequest, ProxyResponse, Responder, Rule};
use crate::testenv::ShootClusterInfo;

/// Gardener's default `--shoot-admin-kubeconfig-max-expiration` (24 h), in seconds.
pub const DEFAULT_MAX_EXPIRATION_SECS: u64 = 86_400;
/// Gardener's default `spec.expirationSeconds` when the request has none.
pub const DEFAULT_EXPIRATION_SECS: u64 = 3_600;
/// Gardener's minimum `spec.expirationSeconds`.
pub const MIN_EXPIRATION_SECS: u64 = 600;

/// The signer could not be set up from the shoot's client CA.
#[derive(Debug, thiserror::Error)]
pub enum SignerError {
    /// The client CA key is not PEM RSA PKCS#1 ("RSA PRIVATE KEY"), what Gardener requires.
    #[error(
        "shoot client CA key: expected a PEM RSA PKCS#1 key (\"RSA PRIVATE KEY\", as Gardener's \
         <shoot>.ca-client ca.key): {0}"
    )]
    CaKey(String),
    /// rcgen refused the CA certificate or key.
    #[error("shoot client CA: {0}")]
    Rcgen(#[from] rcgen::Error),
}

/// Signs admin kubeconfigs for shoots whose API server is `ShootClusterInfo::url` (all shoots of
/// the test environment share that one).
pub struct AdminKubeconfigSigner {
    issuer: Issuer<'static, KeyPair>,
    server: String,
    cluster_ca_b64: String,
    max_expiration_secs: u64,
    served: AtomicU64,
}

impl std::fmt::Debug for AdminKubeconfigSigner {
    // Never print key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminKubeconfigSigner")
            .field("server", &self.server)
            .field("served", &self.served())
            .finish_non_exhaustive()
    }
}

/// DER tag-length-value.
fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let be = n.to_be_bytes();
        let skip = be.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (be.len() - skip) as u8);
        out.extend_from_slice(&be[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// Wraps an RSA PKCS#1 key into PKCS#8 (rcgen's ring backend reads only PKCS#8).
fn pkcs1_to_pkcs8(pkcs1: &[u8]) -> Vec<u8> {
    // AlgorithmIdentifier { rsaEncryption (1.2.840.113549.1.1.1), NULL }
    let alg = [
        0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
    ];
    let body = [tlv(0x02, &[0]), tlv(0x30, &alg), tlv(0x04, pkcs1)].concat();
    tlv(0x30, &body)
}

fn status(code: u16, reason: &str, message: String) -> ProxyResponse {
    ProxyResponse {
        status: code,
        body: json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code})
        .to_string()
        .into_bytes(),
    }
}

impl AdminKubeconfigSigner {
    /// A signer with the shoot's client CA (RSA PKCS#1 key, as Gardener's `<shoot>.ca-client`)
    /// and Gardener's default maximum validity of 24 h.
    pub fn new(info: &ShootClusterInfo) -> Result<Self, SignerError> {
        let key = PrivateKeyDer::from_pem_slice(info.client_ca.key_pem.as_bytes())
            .map_err(|e| SignerError::CaKey(format!("no PEM private key found: {e}")))?;
        let PrivateKeyDer::Pkcs1(pkcs1) = key else {
            return Err(SignerError::CaKey("the key is not PKCS#1".into()));
        };
        let pkcs8 = PrivatePkcs8KeyDer::from(pkcs1_to_pkcs8(pkcs1.secret_pkcs1_der()));
        let key = KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, &rcgen::PKCS_RSA_SHA256)?;
        let issuer = Issuer::from_ca_cert_pem(&info.client_ca.cert_pem, key)?;
        Ok(Self {
            issuer,
            server: info.url.clone(),
            cluster_ca_b64: B64.encode(&info.cluster_ca_pem),
            max_expiration_secs: DEFAULT_MAX_EXPIRATION_SECS,
            served: AtomicU64::new(0),
        })
    }

    /// Kubeconfigs issued so far.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// A fault-proxy rule answering every `POST .../shoots/<name>/adminkubeconfig` with this
    /// signer, for good.
    pub fn rule(self: &Arc<Self>) -> Rule {
        let me = self.clone();
        Rule {
            method: Some("POST".into()),
            path_contains: "/adminkubeconfig".into(),
            fault: ApiFault::Respond(Responder(Arc::new(move |req| me.answer(req)))),
            times: None,
        }
    }

    /// Gardener's answer to one request.
    pub fn answer(&self, req: &ProxyRequest) -> ProxyResponse {
        // /apis/core.gardener.cloud/v1beta1/namespaces/<ns>/shoots/<name>/adminkubeconfig
        let parts: Vec<&str> = req.path.split('/').collect();
        let after = |seg: &str| {
            parts
                .iter()
                .position(|p| *p == seg)
                .and_then(|i| parts.get(i + 1))
                .copied()
        };
        let (Some(ns), Some(shoot)) = (after("namespaces"), after("shoots")) else {
            return status(404, "NotFound", format!("{} not found", req.path));
        };
        if !req.method.eq_ignore_ascii_case("POST") || !req.path.ends_with("/adminkubeconfig") {
            return status(
                405,
                "MethodNotAllowed",
                format!("{} {} is not supported", req.method, req.path),
            );
        }
        let body: serde_json::Value = match serde_json::from_slice(&req.body) {
            Ok(v) => v,
            Err(e) => {
                return status(
                    400,
                    "BadRequest",
                    format!("decoding AdminKubeconfigRequest: {e}"),
                );
            }
        };
        let requested = body
            .pointer("/spec/expirationSeconds")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(DEFAULT_EXPIRATION_SECS);
        if requested < MIN_EXPIRATION_SECS {
            return status(
                422,
                "Invalid",
                format!(
                    "AdminKubeconfigRequest.authentication.gardener.cloud \"{shoot}\" is invalid: \
                     spec.expirationSeconds: Invalid value: {requested}: may not specify a \
                     duration less than 10 minutes"
                ),
            );
        }
        let secs = requested.min(self.max_expiration_secs);
        let (user, masters) = match &req.identity {
            Some((user, groups)) => (user.as_str(), groups.iter().any(|g| g == "system:masters")),
            None => ("system:anonymous", false),
        };
        let group = if masters {
            "gardener.cloud:system:admins"
        } else {
            "gardener.cloud:project:admins"
        };
        // Whole seconds, as in Gardener's certificates and expirationTimestamp.
        let Ok(now) = time::OffsetDateTime::from_unix_timestamp(jiff::Timestamp::now().as_second())
        else {
            return status(500, "InternalError", "clock out of range".into());
        };
        let not_after = now + time::Duration::seconds(secs as i64);
        // Gardener backdates NotBefore by a minute (clock skew); NotAfter = now + validity.
        let (cert_pem, key_pem) = match self.sign(
            &format!("gardener.cloud:admin:{user}"),
            group,
            now - time::Duration::seconds(60),
            not_after,
        ) {
            Ok(p) => p,
            Err(e) => {
                return status(
                    500,
                    "InternalError",
                    format!("signing the client certificate: {e}"),
                );
            }
        };
        let name = format!("{ns}--{shoot}-external");
        // The layout of Go's clientcmd serialization, as Gardener returns it.
        let kubeconfig = format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: {server}\n  name: {name}\ncontexts:\n- context:\n    cluster: {name}\n    user: {name}\n  name: {name}\ncurrent-context: {name}\nkind: Config\nusers:\n- name: {name}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\n",
            ca = self.cluster_ca_b64,
            server = self.server,
            cert = B64.encode(cert_pem),
            key = B64.encode(key_pem),
        );
        let now_str = jiff::Timestamp::from_second(now.unix_timestamp())
            .map(|t| t.to_string())
            .unwrap_or_default();
        let expiration = jiff::Timestamp::from_second(not_after.unix_timestamp())
            .map(|t| t.to_string())
            .unwrap_or_default();
        // As gardener-apiserver: the request's metadata (name only when given) plus the managed
        // fields of this "update" (the manager is the client's user agent, unknown here).
        let mut metadata = json!({"namespace": ns, "managedFields": [{
            "manager": "unknown", "operation": "Update",
            "apiVersion": "authentication.gardener.cloud/v1alpha1", "time": now_str,
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:expirationSeconds": {}}},
            "subresource": "adminkubeconfig"}]});
        if let Some(name) = body
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .filter(|n| !n.is_empty())
        {
            metadata["name"] = name.into();
        }
        self.served.fetch_add(1, Ordering::Relaxed);
        ProxyResponse {
            status: 201,
            body: json!({
                "kind": "AdminKubeconfigRequest",
                "apiVersion": "authentication.gardener.cloud/v1alpha1",
                "metadata": metadata,
                "spec": {"expirationSeconds": secs},
                "status": {"kubeconfig": B64.encode(kubeconfig), "expirationTimestamp": expiration}
            })
            .to_string()
            .into_bytes(),
        }
    }

    /// A fresh client key and certificate: (certificate PEM, private key PEM).
    fn sign(
        &self,
        cn: &str,
        group: &str,
        not_before: time::OffsetDateTime,
        not_after: time::OffsetDateTime,
    ) -> Result<(String, String), rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, group);
        dn.push(DnType::CommonName, cn);
        params.distinguished_name = dn;
        params.not_before = not_before;
        params.not_after = not_after;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::testenv::pki;
    use hyper::body::Bytes;

    fn signer() -> (AdminKubeconfigSigner, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let client_ca = pki::rsa_ca("shoot-client-ca", dir.path()).unwrap();
        let cluster = pki::Ca::new("shoot-cluster-ca").unwrap();
        let info = ShootClusterInfo {
            url: "https://127.0.0.1:6443".into(),
            client_ca,
            cluster_ca_pem: cluster.pair.cert_pem.clone(),
        };
        (AdminKubeconfigSigner::new(&info).unwrap(), dir)
    }

    fn request(body: serde_json::Value) -> ProxyRequest {
        ProxyRequest {
            method: "POST".into(),
            path:
                "/apis/core.gardener.cloud/v1beta1/namespaces/garden-kyma/shoots/s1/adminkubeconfig"
                    .into(),
            identity: Some(("admin".into(), vec!["system:masters".into()])),
            body: Bytes::from(body.to_string()),
        }
    }

    fn pem_der(pem: &str) -> Vec<u8> {
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        B64.decode(body).unwrap()
    }

    #[test]
    fn answers_like_gardener_with_a_cert_of_the_requested_validity() {
        let (signer, _dir) = signer();
        let resp = signer.answer(&request(json!({
            "apiVersion": "authentication.gardener.cloud/v1alpha1", "kind": "AdminKubeconfigRequest",
            "spec": {"expirationSeconds": 7200}})));
        assert_eq!(resp.status, 201);
        let v: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
        assert_eq!(v["kind"], "AdminKubeconfigRequest");
        assert_eq!(v["spec"]["expirationSeconds"], 7200);
        let kubeconfig = B64
            .decode(v["status"]["kubeconfig"].as_str().unwrap())
            .unwrap();
        let kc: serde_yaml_ng::Value = serde_yaml_ng::from_slice(&kubeconfig).unwrap();
        assert_eq!(
            kc["current-context"].as_str(),
            Some("garden-kyma--s1-external")
        );
        assert_eq!(
            kc["clusters"][0]["cluster"]["server"].as_str(),
            Some("https://127.0.0.1:6443")
        );
        let cert_pem = B64
            .decode(
                kc["users"][0]["user"]["client-certificate-data"]
                    .as_str()
                    .unwrap(),
            )
            .unwrap();
        let der = pem_der(std::str::from_utf8(&cert_pem).unwrap());
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let validity = cert.validity();
        assert_eq!(
            validity.not_after.timestamp() - validity.not_before.timestamp(),
            7200 + 60
        );
        let subject = cert.subject().to_string();
        assert!(
            subject.contains("CN=gardener.cloud:admin:admin"),
            "{subject}"
        );
        assert!(
            subject.contains("O=gardener.cloud:system:admins"),
            "{subject}"
        );
        assert_eq!(cert.issuer().to_string(), "CN=shoot-client-ca");
        let expires: jiff::Timestamp = v["status"]["expirationTimestamp"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(expires.as_second(), validity.not_after.timestamp());
        // A fresh key per call.
        let again = signer.answer(&request(json!({"spec": {"expirationSeconds": 7200}})));
        let v2: serde_json::Value = serde_json::from_slice(&again.body).unwrap();
        assert_ne!(v["status"]["kubeconfig"], v2["status"]["kubeconfig"]);
        assert_eq!(signer.served(), 2);
    }

    #[test]
    fn caps_defaults_and_rejects_like_gardener() {
        let (signer, _dir) = signer();
        let capped = signer.answer(&request(json!({"spec": {"expirationSeconds": 999_999}})));
        let v: serde_json::Value = serde_json::from_slice(&capped.body).unwrap();
        assert_eq!(v["spec"]["expirationSeconds"], 86_400);
        let default = signer.answer(&request(json!({"spec": {}})));
        let v: serde_json::Value = serde_json::from_slice(&default.body).unwrap();
        assert_eq!(v["spec"]["expirationSeconds"], 3_600);
        let short = signer.answer(&request(json!({"spec": {"expirationSeconds": 300}})));
        assert_eq!(short.status, 422);
        assert!(String::from_utf8_lossy(&short.body).contains("less than 10 minutes"));
    }
}
