//! The certificate material kept in the Secret, its parsing, and issuing with rcgen.
//!
//! Secret layout (all PEM): `ca.crt` every trusted CA, oldest first (this is the caBundle);
//! `ca.key` the private keys of those CAs, same order; `tls.crt` / `tls.key` the serving
//! certificate and its key.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509Certificate};

use crate::plan::{CaValidity, CertState, Plan, ServingValidity, Signer};

/// Secret key of the CA bundle.
pub const CA_CERT_KEY: &str = "ca.crt";
/// Secret key of the CA private keys.
pub const CA_KEY_KEY: &str = "ca.key";
/// Secret key of the serving certificate.
pub const TLS_CERT_KEY: &str = "tls.crt";
/// Secret key of the serving private key.
pub const TLS_KEY_KEY: &str = "tls.key";

/// Errors reading or issuing certificate material. Never contains key material.
#[derive(Debug, thiserror::Error)]
pub enum MaterialError {
    /// A Secret key is missing or empty.
    #[error("Secret key {0:?} is missing or empty")]
    Missing(&'static str),
    /// A Secret key does not hold valid PEM of the expected kind.
    #[error("Secret key {key:?} does not hold valid PEM ({detail})")]
    BadPem {
        /// The Secret key.
        key: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// A certificate could not be parsed as X.509.
    #[error("Secret key {key:?}: certificate {index} is not valid X.509 ({detail})")]
    BadCertificate {
        /// The Secret key.
        key: &'static str,
        /// Position of the certificate in the PEM list.
        index: usize,
        /// Parser message.
        detail: String,
    },
    /// `ca.crt` and `ca.key` list a different number of entries.
    #[error(
        "Secret keys ca.crt ({certs} certificates) and ca.key ({keys} keys) must list the same number of entries"
    )]
    CaKeyCount {
        /// Certificates in `ca.crt`.
        certs: usize,
        /// Keys in `ca.key`.
        keys: usize,
    },
    /// rcgen failed.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    /// The plan refers to a CA that does not exist (a bug).
    #[error("plan refers to CA {0}, which is not in the bundle")]
    NoSuchCa(usize),
}

/// One CA: certificate and key in PEM, plus its validity.
#[derive(Clone)]
pub struct CaEntry {
    /// Certificate PEM.
    pub cert_pem: String,
    /// Private key PEM (PKCS#8).
    pub key_pem: String,
    /// Validity.
    pub validity: CaValidity,
    subject_der: Vec<u8>,
}

/// The serving certificate and key in PEM.
#[derive(Clone)]
pub struct ServingEntry {
    /// Certificate PEM (leaf only).
    pub cert_pem: String,
    /// Private key PEM (PKCS#8).
    pub key_pem: String,
    not_after: SystemTime,
    issuer_der: Vec<u8>,
    names: Vec<String>,
    key_matches: bool,
}

impl std::fmt::Debug for CaEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaEntry")
            .field("validity", &self.validity)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ServingEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingEntry")
            .field("not_after", &self.not_after)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

/// Hosts the serving certificate must name: DNS names and IP addresses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServingNames {
    /// DNS names, e.g. `kim-webhook.kcp-system.svc`.
    pub dns: Vec<String>,
    /// IP addresses, e.g. `127.0.0.1` in tests.
    pub ips: Vec<IpAddr>,
}

impl ServingNames {
    fn canonical(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .dns
            .iter()
            .map(|d| format!("dns:{}", d.to_ascii_lowercase()))
            .collect();
        v.extend(self.ips.iter().map(|ip| format!("ip:{ip}")));
        v.sort();
        v.dedup();
        v
    }

    /// The usual names of a Service: `<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc`,
    /// `<svc>.<ns>.svc.cluster.local`.
    pub fn for_service(service: &str, namespace: &str) -> Self {
        Self {
            dns: vec![
                service.to_string(),
                format!("{service}.{namespace}"),
                format!("{service}.{namespace}.svc"),
                format!("{service}.{namespace}.svc.cluster.local"),
            ],
            ips: Vec::new(),
        }
    }
}

/// Everything stored in the Secret.
#[derive(Debug, Clone, Default)]
pub struct CertMaterial {
    /// Trusted CAs, oldest first.
    pub cas: Vec<CaEntry>,
    /// The serving certificate.
    pub serving: Option<ServingEntry>,
}

fn system_time(t: x509_parser::time::ASN1Time) -> SystemTime {
    let secs = t.timestamp();
    if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs.unsigned_abs())
    } else {
        SystemTime::UNIX_EPOCH
    }
}

fn offset(t: SystemTime) -> time::OffsetDateTime {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    time::OffsetDateTime::from_unix_timestamp(i64::try_from(secs).unwrap_or(i64::MAX))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

fn parse_certs(
    key: &'static str,
    pem: &str,
) -> Result<Vec<CertificateDer<'static>>, MaterialError> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| MaterialError::BadPem {
            key,
            detail: e.to_string(),
        })
}

/// The certificates of a caBundle as DER; what does not parse is left out (a bundle that
/// does not parse contains no CA of ours).
pub fn bundle_ders(pem: &[u8]) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .map(|c| c.as_ref().to_vec())
        .collect()
}

fn parse_keys(key: &'static str, pem: &str) -> Result<Vec<PrivateKeyDer<'static>>, MaterialError> {
    PrivateKeyDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        // The parser's message never echoes key bytes, but keep it generic anyway.
        .map_err(|_| MaterialError::BadPem {
            key,
            detail: "not a PEM private key".into(),
        })
}

fn x509<'a>(
    key: &'static str,
    index: usize,
    der: &'a [u8],
) -> Result<X509Certificate<'a>, MaterialError> {
    X509Certificate::from_der(der)
        .map(|(_, c)| c)
        .map_err(|e| MaterialError::BadCertificate {
            key,
            index,
            detail: e.to_string(),
        })
}

/// Whether the private key `key_pem` belongs to the certificate `leaf`; a key rustls cannot
/// load counts as belonging (the load reports it, naming the key).
fn key_matches(leaf: &CertificateDer<'static>, key_pem: &str) -> bool {
    !matches!(
        crate::pair::certified_key(vec![leaf.clone()], key_pem),
        Err(crate::pair::PairError::Mismatch)
    )
}

fn pem_of(der: &CertificateDer<'_>) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

fn pem_of_key(der: &PrivateKeyDer<'_>) -> Result<String, MaterialError> {
    let kp = KeyPair::try_from(der)?;
    Ok(kp.serialize_pem())
}

impl CertMaterial {
    /// Reads the material from Secret data. Missing keys give an empty material (nothing
    /// stored yet); present but broken keys are an error.
    pub fn from_secret_data(data: &BTreeMap<String, Vec<u8>>) -> Result<Self, MaterialError> {
        let text = |k: &'static str| -> Option<String> {
            data.get(k)
                .filter(|v| !v.is_empty())
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        let mut out = CertMaterial::default();
        if let Some(ca_pem) = text(CA_CERT_KEY) {
            let key_pem = text(CA_KEY_KEY).ok_or(MaterialError::Missing(CA_KEY_KEY))?;
            let certs = parse_certs(CA_CERT_KEY, &ca_pem)?;
            let keys = parse_keys(CA_KEY_KEY, &key_pem)?;
            if certs.len() != keys.len() {
                return Err(MaterialError::CaKeyCount {
                    certs: certs.len(),
                    keys: keys.len(),
                });
            }
            for (i, (c, k)) in certs.iter().zip(keys.iter()).enumerate() {
                let x = x509(CA_CERT_KEY, i, c)?;
                out.cas.push(CaEntry {
                    cert_pem: pem_of(c),
                    key_pem: pem_of_key(k)?,
                    validity: CaValidity {
                        not_before: system_time(x.validity().not_before),
                        not_after: system_time(x.validity().not_after),
                    },
                    subject_der: x.subject().as_raw().to_vec(),
                });
            }
        }
        if let Some(tls_pem) = text(TLS_CERT_KEY) {
            let key_pem = text(TLS_KEY_KEY).ok_or(MaterialError::Missing(TLS_KEY_KEY))?;
            let certs = parse_certs(TLS_CERT_KEY, &tls_pem)?;
            let leaf = certs.first().ok_or(MaterialError::Missing(TLS_CERT_KEY))?;
            parse_keys(TLS_KEY_KEY, &key_pem)?
                .first()
                .ok_or(MaterialError::Missing(TLS_KEY_KEY))?;
            let x = x509(TLS_CERT_KEY, 0, leaf)?;
            let mut names = Vec::new();
            for ext in x.extensions() {
                if let ParsedExtension::SubjectAlternativeName(san) = ext.parsed_extension() {
                    for n in &san.general_names {
                        match n {
                            GeneralName::DNSName(d) => {
                                names.push(format!("dns:{}", d.to_ascii_lowercase()))
                            }
                            GeneralName::IPAddress(b) => {
                                let ip = match b.len() {
                                    4 => <[u8; 4]>::try_from(*b).ok().map(IpAddr::from),
                                    16 => <[u8; 16]>::try_from(*b).ok().map(IpAddr::from),
                                    _ => None,
                                };
                                if let Some(ip) = ip {
                                    names.push(format!("ip:{ip}"));
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
            names.sort();
            names.dedup();
            let cert_pem = pem_of(leaf);
            let key_matches = key_matches(leaf, &key_pem);
            out.serving = Some(ServingEntry {
                cert_pem,
                key_pem,
                not_after: system_time(x.validity().not_after),
                issuer_der: x.issuer().as_raw().to_vec(),
                names,
                key_matches,
            });
        }
        Ok(out)
    }

    /// Writes the material as Secret data.
    pub fn to_secret_data(&self) -> BTreeMap<String, Vec<u8>> {
        let mut data = BTreeMap::new();
        if !self.cas.is_empty() {
            data.insert(CA_CERT_KEY.to_string(), self.ca_bundle_pem().into_bytes());
            let keys: String = self.cas.iter().map(|c| c.key_pem.as_str()).collect();
            data.insert(CA_KEY_KEY.to_string(), keys.into_bytes());
        }
        if let Some(s) = &self.serving {
            data.insert(TLS_CERT_KEY.to_string(), s.cert_pem.clone().into_bytes());
            data.insert(TLS_KEY_KEY.to_string(), s.key_pem.clone().into_bytes());
        }
        data
    }

    /// The caBundle: every trusted CA, PEM, oldest first.
    pub fn ca_bundle_pem(&self) -> String {
        self.cas.iter().map(|c| c.cert_pem.as_str()).collect()
    }

    /// The state the planner decides on.
    pub fn state(&self, names: &ServingNames) -> CertState {
        CertState {
            cas: self.cas.iter().map(|c| c.validity).collect(),
            serving: self.serving.as_ref().map(|s| ServingValidity {
                not_after: s.not_after,
                // Subjects are unique per CA (they carry the creation time), so the issuer
                // name identifies the signing CA.
                issuer: self.cas.iter().rposition(|c| c.subject_der == s.issuer_der),
                names_cover: names.canonical().iter().all(|n| s.names.contains(n)),
                key_matches: s.key_matches,
            }),
            trusted_since: Vec::new(),
        }
    }

    /// The bundle's CAs as DER, oldest first (what [`crate::plan::PropagationClock`] matches
    /// against the live caBundles).
    pub fn ca_ders(&self) -> Vec<Vec<u8>> {
        self.cas
            .iter()
            .map(|c| {
                bundle_ders(c.cert_pem.as_bytes())
                    .into_iter()
                    .next()
                    .unwrap_or_default()
            })
            .collect()
    }

    /// Carries out a plan: generates what it asks for (CPU work: call off the async executor).
    pub fn apply(
        &self,
        plan: &Plan,
        now: SystemTime,
        names: &ServingNames,
        ca_lifetime: Duration,
        serving_lifetime: Duration,
    ) -> Result<CertMaterial, MaterialError> {
        let mut cas = self.cas.clone();
        let new_ca_index = if plan.add_ca.is_some() {
            cas.push(generate_ca(now, ca_lifetime)?);
            Some(cas.len() - 1)
        } else {
            None
        };
        let mut serving = self.serving.clone();
        if let Some((signer, _)) = plan.issue_serving {
            let idx = match signer {
                Signer::Existing(i) if i < self.cas.len() => i,
                Signer::Existing(i) => return Err(MaterialError::NoSuchCa(i)),
                Signer::New => new_ca_index.ok_or(MaterialError::NoSuchCa(usize::MAX))?,
            };
            serving = Some(issue_serving(&cas[idx], names, now, serving_lifetime)?);
        }
        let cas = cas
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !plan.drop_cas.contains(i))
            .map(|(_, c)| c)
            .collect();
        Ok(CertMaterial { cas, serving })
    }
}

/// How far a CA's `notBefore` lies before its creation: an apiserver whose clock is behind
/// the webhook's by up to this much still accepts certificates from a CA created just now.
pub const CA_BACKDATE: Duration = Duration::from_secs(5 * 60);

/// Generates a self-signed ECDSA P-256 CA valid from [`CA_BACKDATE`] before `now` until
/// `now + lifetime`.
pub fn generate_ca(now: SystemTime, lifetime: Duration) -> Result<CaEntry, MaterialError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    // The creation time in the name keeps subjects unique, so a certificate's issuer
    // identifies exactly one CA of the bundle.
    let stamp = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    dn.push(DnType::CommonName, format!("kim-webhook-ca-{stamp}"));
    dn.push(DnType::OrganizationName, "kyma-project.io");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = offset(now.checked_sub(CA_BACKDATE).unwrap_or(now));
    params.not_after = offset(now + lifetime);
    let cert = params.self_signed(&key)?;
    let x = x509(CA_CERT_KEY, 0, cert.der())?;
    Ok(CaEntry {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        validity: CaValidity {
            not_before: offset_to_system(params.not_before),
            not_after: offset_to_system(params.not_after),
        },
        subject_der: x.subject().as_raw().to_vec(),
    })
}

fn offset_to_system(t: time::OffsetDateTime) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(t.unix_timestamp()).unwrap_or(0))
}

/// Issues a serving certificate for `names`, signed by `ca`, valid from `now` for `lifetime`
/// but never beyond the CA's own expiry.
pub fn issue_serving(
    ca: &CaEntry,
    names: &ServingNames,
    now: SystemTime,
    lifetime: Duration,
) -> Result<ServingEntry, MaterialError> {
    let ca_key = KeyPair::from_pem(&ca.key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, &ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        names
            .dns
            .first()
            .cloned()
            .unwrap_or_else(|| "kim-webhook".to_string()),
    );
    params.distinguished_name = dn;
    let mut sans = Vec::new();
    for d in &names.dns {
        sans.push(SanType::DnsName(d.clone().try_into()?));
    }
    sans.extend(names.ips.iter().copied().map(SanType::IpAddress));
    params.subject_alt_names = sans;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    // Backdated by a minute against clock skew between replicas and apiservers, but never
    // before the CA itself.
    let backdated = now
        .checked_sub(Duration::from_secs(60))
        .unwrap_or(now)
        .max(ca.validity.not_before);
    params.not_before = offset(backdated);
    params.not_after = offset((now + lifetime).min(ca.validity.not_after));
    let cert = params.signed_by(&key, &issuer)?;
    let x = x509(TLS_CERT_KEY, 0, cert.der())?;
    Ok(ServingEntry {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_after: offset_to_system(params.not_after),
        issuer_der: x.issuer().as_raw().to_vec(),
        names: names.canonical(),
        key_matches: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::plan;
    use crate::policy::RotationPolicy;

    fn names() -> ServingNames {
        ServingNames {
            dns: vec!["kim-webhook.kcp-system.svc".into()],
            ips: vec!["127.0.0.1".parse().expect("ip")],
        }
    }

    fn policy() -> RotationPolicy {
        RotationPolicy::from_lifetimes(
            Duration::from_secs(60),
            Duration::from_secs(9),
            Duration::from_secs(2),
            Duration::from_secs(1),
        )
    }

    fn bootstrap(now: SystemTime) -> CertMaterial {
        let empty = CertMaterial::default();
        let p = plan(&empty.state(&names()), now, &policy());
        empty
            .apply(
                &p,
                now,
                &names(),
                policy().ca_lifetime,
                policy().serving_lifetime,
            )
            .expect("bootstrap")
    }

    #[test]
    fn bootstrap_round_trips_through_secret_data() {
        let now = SystemTime::now();
        let m = bootstrap(now);
        assert_eq!(m.cas.len(), 1);
        let back = CertMaterial::from_secret_data(&m.to_secret_data()).expect("parse");
        let st = back.state(&names());
        assert_eq!(st.cas.len(), 1);
        let s = st.serving.expect("serving");
        assert_eq!(s.issuer, Some(0));
        assert!(s.names_cover);
        assert!(
            plan(&st, now, &policy()).is_empty(),
            "a fresh bootstrap needs nothing"
        );
        assert_eq!(back.ca_bundle_pem(), m.ca_bundle_pem());
    }

    /// A serving key replaced by hand (another key) is noticed, and the plan issues a new
    /// pair from the same CA.
    #[test]
    fn a_serving_key_of_another_certificate_is_noticed() {
        let now = SystemTime::now();
        let m = bootstrap(now);
        let other = bootstrap(now);
        let mut data = m.to_secret_data();
        data.insert(
            TLS_KEY_KEY.to_string(),
            other
                .serving
                .as_ref()
                .expect("serving")
                .key_pem
                .clone()
                .into_bytes(),
        );
        let edited = CertMaterial::from_secret_data(&data).expect("still reads");
        let st = edited.state(&names());
        assert!(!st.serving.expect("serving").key_matches);
        assert_eq!(
            plan(&st, now, &policy()).issue_serving,
            Some((
                crate::plan::Signer::Existing(0),
                crate::plan::Reason::KeyMismatch
            ))
        );
        assert!(m.state(&names()).serving.expect("serving").key_matches);
    }

    #[test]
    fn changed_names_are_noticed() {
        let m = bootstrap(SystemTime::now());
        let other = ServingNames {
            dns: vec!["other.svc".into()],
            ips: vec![],
        };
        assert!(!m.state(&other).serving.expect("serving").names_cover);
        // Fewer names than the certificate has are covered (another version of the webhook
        // during a rollout may want one name less).
        let mut fewer = names();
        fewer.ips.clear();
        assert!(m.state(&fewer).serving.expect("serving").names_cover);
        let mut more = names();
        more.dns.push("new.kcp-system.svc".into());
        assert!(!m.state(&more).serving.expect("serving").names_cover);
    }

    #[test]
    fn serving_certificate_verifies_against_bundle_with_two_cas() {
        let now = SystemTime::now();
        let mut m = bootstrap(now);
        m.cas
            .push(generate_ca(now - Duration::from_secs(1), Duration::from_secs(60)).expect("ca"));
        m.serving =
            Some(issue_serving(&m.cas[1], &names(), now, Duration::from_secs(9)).expect("issue"));
        let back = CertMaterial::from_secret_data(&m.to_secret_data()).expect("parse");
        assert_eq!(back.state(&names()).serving.and_then(|s| s.issuer), Some(1));

        // Verify with webpki through rustls' verifier: the bundle must trust the leaf.
        let mut roots = rustls::RootCertStore::empty();
        for c in parse_certs(CA_CERT_KEY, &back.ca_bundle_pem()).expect("bundle") {
            roots.add(c).expect("root");
        }
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .expect("verifier");
        let leaf =
            parse_certs(TLS_CERT_KEY, &back.serving.as_ref().expect("s").cert_pem).expect("leaf");
        let name =
            rustls::pki_types::ServerName::try_from("kim-webhook.kcp-system.svc").expect("name");
        use rustls::client::danger::ServerCertVerifier;
        verifier
            .verify_server_cert(
                &leaf[0],
                &[],
                &name,
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .expect("leaf verifies against the bundle");
    }

    #[test]
    fn ca_is_backdated_against_clock_skew() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let ca = generate_ca(now, Duration::from_secs(3600)).expect("ca");
        assert_eq!(ca.validity.not_before, now - CA_BACKDATE);
        assert!(CA_BACKDATE >= Duration::from_secs(120), "a few minutes");
        // The certificate itself says so (what the apiserver checks), and the expiry is not
        // moved.
        let der = bundle_ders(ca.cert_pem.as_bytes());
        let (_, x) = X509Certificate::from_der(&der[0]).expect("parse");
        assert_eq!(system_time(x.validity().not_before), now - CA_BACKDATE);
        assert_eq!(
            system_time(x.validity().not_after),
            now + Duration::from_secs(3600)
        );
        // The serving certificate, backdated by a minute, still starts within its CA.
        let s = issue_serving(&ca, &names(), now, Duration::from_secs(60)).expect("issue");
        let der = bundle_ders(s.cert_pem.as_bytes());
        let (_, x) = X509Certificate::from_der(&der[0]).expect("parse");
        assert_eq!(
            system_time(x.validity().not_before),
            now - Duration::from_secs(60)
        );
    }

    #[test]
    fn serving_never_outlives_its_ca() {
        let now = SystemTime::now();
        let ca = generate_ca(now, Duration::from_secs(5)).expect("ca");
        let s = issue_serving(&ca, &names(), now, Duration::from_secs(3600)).expect("issue");
        assert!(s.not_after <= ca.validity.not_after);
    }

    #[test]
    fn mismatched_ca_keys_are_an_error_naming_both_keys() {
        let m = bootstrap(SystemTime::now());
        let mut data = m.to_secret_data();
        data.insert(CA_KEY_KEY.into(), Vec::new());
        let err = CertMaterial::from_secret_data(&data)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("ca.key"), "{err}");
    }

    #[test]
    fn errors_never_carry_key_material() {
        let mut data = BTreeMap::new();
        data.insert(
            CA_CERT_KEY.to_string(),
            b"-----BEGIN CERTIFICATE-----\nnot base64 !!\n-----END CERTIFICATE-----\n".to_vec(),
        );
        data.insert(CA_KEY_KEY.to_string(), b"secret-key-bytes".to_vec());
        let err = CertMaterial::from_secret_data(&data)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(!err.contains("secret-key-bytes"), "{err}");
        assert!(err.contains("ca.crt"), "{err}");
    }
}
