//! Certificates for the test control plane: ECDSA CAs and leaf certificates made with rcgen,
//! plus the RSA client CA that Gardener needs for `shoots/adminkubeconfig`.

use std::path::Path;
use std::process::Command;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// Errors while making certificates.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// rcgen refused the parameters (a bug in this module, or an invalid SAN).
    #[error("generating certificate {what}: {source}")]
    Rcgen {
        /// Which certificate.
        what: String,
        /// The rcgen error.
        #[source]
        source: rcgen::Error,
    },
    /// The `openssl` command is missing or failed (only the RSA client CA needs it).
    #[error(
        "generating the RSA shoot client CA with `openssl` failed: {0} \
         (install openssl: the Gardener adminkubeconfig code accepts only PKCS#1 RSA CA keys)"
    )]
    Openssl(String),
}

/// A PEM certificate with its PEM private key.
#[derive(Clone)]
pub struct CertPair {
    /// PEM certificate.
    pub cert_pem: String,
    /// PEM private key (PKCS#8 for rcgen keys, PKCS#1 for the RSA CA).
    pub key_pem: String,
}

impl std::fmt::Debug for CertPair {
    // Never print key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertPair").finish_non_exhaustive()
    }
}

/// A certificate authority that signs serving and client certificates.
pub struct Ca {
    /// The CA certificate and key.
    pub pair: CertPair,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

fn rcgen_err(what: &str) -> impl FnOnce(rcgen::Error) -> PkiError + '_ {
    move |source| PkiError::Rcgen {
        what: what.to_string(),
        source,
    }
}

fn name(cn: &str, orgs: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    if let Some(o) = orgs.first() {
        dn.push(DnType::OrganizationName, *o);
    }
    dn.push(DnType::CommonName, cn);
    dn
}

impl Ca {
    /// A new self-signed ECDSA P-256 CA named `cn`.
    pub fn new(cn: &str) -> Result<Self, PkiError> {
        let key = KeyPair::generate().map_err(rcgen_err(cn))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name(cn, &[]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).map_err(rcgen_err(cn))?;
        let pair = CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        Ok(Self {
            pair,
            issuer: Issuer::new(params, key),
        })
    }

    /// A serving certificate for the given host names and IP addresses.
    pub fn serving_cert(&self, cn: &str, hosts: &[&str]) -> Result<CertPair, PkiError> {
        let key = KeyPair::generate().map_err(rcgen_err(cn))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name(cn, &[]);
        params.subject_alt_names = hosts
            .iter()
            .map(|h| match h.parse() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => h.to_string().try_into().map(SanType::DnsName),
            })
            .collect::<Result<_, _>>()
            .map_err(rcgen_err(cn))?;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(rcgen_err(cn))?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A client certificate: CN = user name, O = group (how kube-apiserver reads them). rcgen
    /// keeps one value per attribute type, so only the first group is written; use
    /// impersonation for users in several groups.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> Result<CertPair, PkiError> {
        let key = KeyPair::generate().map_err(rcgen_err(user))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name(user, groups);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(rcgen_err(user))?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A fresh ECDSA P-256 key pair for token signing: (PKCS#8 private key PEM, public key PEM).
pub fn signing_key_pem() -> Result<(String, String), PkiError> {
    let key = KeyPair::generate().map_err(rcgen_err("service-account signing key"))?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

/// A self-signed RSA CA whose key is PKCS#1 PEM ("RSA PRIVATE KEY"), made with the `openssl`
/// command. Gardener's `adminkubeconfig` reads the shoot client CA key only in that form, and
/// rcgen (ring) cannot generate RSA keys, hence openssl.
pub fn rsa_ca(cn: &str, work_dir: &Path) -> Result<CertPair, PkiError> {
    let key = work_dir.join(format!("{cn}.pkcs8.key"));
    let cert = work_dir.join(format!("{cn}.crt"));
    run_openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "3650",
        "-subj",
        &format!("/CN={cn}"),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        "-keyout",
        &key.to_string_lossy(),
        "-out",
        &cert.to_string_lossy(),
    ])?;
    let pkcs1 = run_openssl(&["rsa", "-traditional", "-in", &key.to_string_lossy()])?;
    let cert_pem = std::fs::read_to_string(&cert).map_err(|e| PkiError::Openssl(e.to_string()))?;
    let _ = std::fs::remove_file(&key);
    Ok(CertPair {
        cert_pem,
        key_pem: pkcs1,
    })
}

fn run_openssl(args: &[&str]) -> Result<String, PkiError> {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .map_err(|e| PkiError::Openssl(format!("cannot run openssl: {e}")))?;
    if !out.status.success() {
        return Err(PkiError::Openssl(format!(
            "openssl {} exited with {}: {}",
            args.first().unwrap_or(&""),
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or_default()
        )));
    }
    String::from_utf8(out.stdout).map_err(|e| PkiError::Openssl(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_cert_carries_user_and_groups() {
        let ca = Ca::new("test-ca").unwrap();
        let pair = ca.client_cert("alice", &["g1"]).unwrap();
        let der = pem_der(&pair.cert_pem);
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let subject = cert.subject().to_string();
        assert!(subject.contains("CN=alice"), "{subject}");
        assert!(subject.contains("O=g1"), "{subject}");
    }

    #[test]
    fn rsa_ca_key_is_pkcs1() {
        let dir = tempfile::tempdir().unwrap();
        let pair = rsa_ca("shoot-client-ca", dir.path()).unwrap();
        assert!(pair.key_pem.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
        assert!(pair.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    }

    fn pem_der(pem: &str) -> Vec<u8> {
        use base64::Engine;
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap()
    }
}
