//! A rustls certificate resolver whose certificate can be swapped while the server runs.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::pair::PairError;

/// The serving certificate could not be loaded into rustls.
#[derive(Debug, thiserror::Error)]
pub enum ResolverError {
    /// The certificate PEM holds no certificate or is malformed.
    #[error("serving certificate PEM is invalid: {0}")]
    Certificate(String),
    /// The private key PEM is missing, malformed or of an unsupported type.
    #[error(
        "serving private key is invalid or of an unsupported type (expected ECDSA, Ed25519 or RSA in PEM)"
    )]
    Key,
    /// The private key is not the one the certificate was issued for: every handshake with
    /// it would fail.
    #[error("serving private key does not belong to the serving certificate")]
    KeyMismatch,
}

/// A serving certificate with its key, ready for rustls, and when its leaf expires.
#[derive(Debug, Clone)]
pub struct ServingKey {
    key: Arc<CertifiedKey>,
    not_after: SystemTime,
}

impl ServingKey {
    /// When the leaf certificate expires.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }
}

/// Hands rustls the current serving certificate. A handshake does one atomic load: no lock,
/// no disk, no allocation beyond an `Arc` clone. [`CertResolver::set`] swaps the certificate
/// for every following handshake; established connections keep theirs.
#[derive(Debug, Default)]
pub struct CertResolver {
    current: ArcSwapOption<ServingKey>,
}

impl CertResolver {
    /// A resolver with no certificate yet (handshakes fail until [`CertResolver::set`]).
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Builds a serving key from PEM: the chain, the private key (which must belong to the
    /// leaf) and the leaf's expiry. Parsing and key loading are CPU work: call it off the
    /// async executor when it sits on a hot path (rotation runs it in `spawn_blocking`).
    pub fn certified_key(cert_pem: &str, key_pem: &str) -> Result<ServingKey, ResolverError> {
        let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ResolverError::Certificate(e.to_string()))?;
        let leaf = chain
            .first()
            .ok_or_else(|| ResolverError::Certificate("no CERTIFICATE block".into()))?;
        let not_after = x509_parser::parse_x509_certificate(leaf.as_ref())
            .map_err(|e| ResolverError::Certificate(e.to_string()))?
            .1
            .validity()
            .not_after
            .timestamp();
        let not_after = SystemTime::UNIX_EPOCH
            + Duration::from_secs(u64::try_from(not_after).unwrap_or_default());
        let key = crate::pair::certified_key(chain, key_pem).map_err(|e| match e {
            PairError::Key => ResolverError::Key,
            PairError::Mismatch => ResolverError::KeyMismatch,
        })?;
        Ok(ServingKey {
            key: Arc::new(key),
            not_after,
        })
    }

    /// Replaces the certificate presented from the next handshake on.
    pub fn set(&self, key: ServingKey) {
        self.current.store(Some(Arc::new(key)));
    }

    /// True once a certificate is loaded (readiness).
    pub fn is_loaded(&self) -> bool {
        self.current.load().is_some()
    }

    /// When the certificate presented now expires; `None` before one is loaded.
    pub fn not_after(&self) -> Option<SystemTime> {
        self.current.load().as_ref().map(|k| k.not_after)
    }

    /// The leaf certificate currently presented, DER (for tests and diagnostics).
    pub fn current_leaf(&self) -> Option<CertificateDer<'static>> {
        self.current
            .load()
            .as_ref()
            .and_then(|k| k.key.cert.first().cloned())
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.load().as_ref().map(|k| k.key.clone())
    }
}

/// The oldest TLS version the webhook accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TlsMinVersion {
    /// TLS 1.2 and 1.3 (the default: some apiservers still negotiate 1.2).
    #[default]
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

impl std::str::FromStr for TlsMinVersion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "1.2" => Ok(Self::Tls12),
            "1.3" => Ok(Self::Tls13),
            other => Err(format!(
                "unsupported TLS version {other:?} (expected 1.2 or 1.3)"
            )),
        }
    }
}

/// A rustls server configuration over `resolver`: TLS 1.2 and 1.3 (ring), ALPN `h2` and
/// `http/1.1`.
pub fn server_config(resolver: Arc<CertResolver>) -> Result<rustls::ServerConfig, rustls::Error> {
    server_config_with(resolver, TlsMinVersion::default())
}

/// A rustls server configuration over `resolver` accepting TLS from `min` on (ring), ALPN
/// `h2` and `http/1.1`.
pub fn server_config_with(
    resolver: Arc<CertResolver>,
    min: TlsMinVersion,
) -> Result<rustls::ServerConfig, rustls::Error> {
    server_config_for(resolver, min, None).map_err(|e| match e {
        ClientCaError::Tls(e) => e,
        other => rustls::Error::General(other.to_string()),
    })
}

/// The client CA bundle could not be used, or the TLS configuration not built.
#[derive(Debug, thiserror::Error)]
pub enum ClientCaError {
    /// The PEM holds no certificate or is malformed.
    #[error("client CA bundle is invalid: {0}")]
    Bundle(String),
    /// rustls refused the configuration.
    #[error(transparent)]
    Tls(#[from] rustls::Error),
}

/// As [`server_config_with`]; with `client_ca_pem`, every client must present a certificate
/// that chains to one of its CAs (the handshake fails otherwise).
pub fn server_config_for(
    resolver: Arc<CertResolver>,
    min: TlsMinVersion,
    client_ca_pem: Option<&str>,
) -> Result<rustls::ServerConfig, ClientCaError> {
    let versions: &[&'static rustls::SupportedProtocolVersion] = match min {
        TlsMinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsMinVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let cert = cert.map_err(|e| ClientCaError::Bundle(e.to_string()))?;
                roots
                    .add(cert)
                    .map_err(|e| ClientCaError::Bundle(e.to_string()))?;
            }
            if roots.is_empty() {
                return Err(ClientCaError::Bundle("no CERTIFICATE block".into()));
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| ClientCaError::Bundle(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut cfg = builder.with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::material::{ServingNames, generate_ca, issue_serving};
    use std::time::{Duration, SystemTime};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn material() -> (String, String, String) {
        let now = SystemTime::now();
        let ca = generate_ca(now, Duration::from_secs(600)).expect("ca");
        let names = ServingNames {
            dns: vec!["localhost".into()],
            ips: vec!["127.0.0.1".parse().expect("ip")],
        };
        let s = issue_serving(&ca, &names, now, Duration::from_secs(60)).expect("serving");
        (ca.cert_pem, s.cert_pem, s.key_pem)
    }

    fn client(ca_pem: &str) -> tokio_rustls::TlsConnector {
        client_with(ca_pem, &[&rustls::version::TLS13, &rustls::version::TLS12])
    }

    fn client_with(
        ca_pem: &str,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(c.expect("ca pem")).expect("root");
        }
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(versions)
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        tokio_rustls::TlsConnector::from(Arc::new(cfg))
    }

    #[test]
    fn not_loaded_until_set() {
        let r = CertResolver::new();
        assert!(!r.is_loaded());
        let (_, cert, key) = material();
        r.set(CertResolver::certified_key(&cert, &key).expect("key"));
        assert!(r.is_loaded());
    }

    #[test]
    fn a_key_of_another_certificate_is_refused_and_the_expiry_is_the_leafs() {
        let (_, cert, key) = material();
        let (_, _, other_key) = material();
        let err = CertResolver::certified_key(&cert, &other_key)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("does not belong"), "{err}");
        let loaded = CertResolver::certified_key(&cert, &key).expect("the matching key");
        let leaf = CertificateDer::pem_slice_iter(cert.as_bytes())
            .next()
            .expect("a block")
            .expect("a certificate");
        let (_, x) = x509_parser::parse_x509_certificate(leaf.as_ref()).expect("parse");
        assert_eq!(
            loaded
                .not_after()
                .duration_since(SystemTime::UNIX_EPOCH)
                .expect("after the epoch")
                .as_secs(),
            x.validity().not_after.timestamp().unsigned_abs()
        );
        let r = CertResolver::new();
        assert_eq!(r.not_after(), None);
        r.set(loaded.clone());
        assert_eq!(r.not_after(), Some(loaded.not_after()));
    }

    #[test]
    fn bad_key_error_carries_no_key_material() {
        let (_, cert, _) = material();
        let err = CertResolver::certified_key(
            &cert,
            "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(!err.contains("c2VjcmV0"), "{err}");
        assert!(err.contains("private key"), "{err}");
    }

    /// A connection opened before a swap keeps working; the next handshake sees the new leaf.
    #[tokio::test]
    async fn swap_applies_to_new_handshakes_without_dropping_open_connections() {
        let (ca1, cert1, key1) = material();
        let (ca2, cert2, key2) = material();
        let resolver = CertResolver::new();
        resolver.set(CertResolver::certified_key(&cert1, &key1).expect("k1"));
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(
            server_config(resolver.clone()).expect("cfg"),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buf = [0u8; 1];
                    while tls.read_exact(&mut buf).await.is_ok() {
                        if tls.write_all(&buf).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut old = client(&ca1)
            .connect(name.clone(), tcp)
            .await
            .expect("handshake with first cert");
        old.write_all(b"a").await.expect("write");
        let mut b = [0u8; 1];
        old.read_exact(&mut b).await.expect("echo");

        resolver.set(CertResolver::certified_key(&cert2, &key2).expect("k2"));

        // The open connection still works.
        old.write_all(b"b").await.expect("write after swap");
        old.read_exact(&mut b).await.expect("echo after swap");
        assert_eq!(&b, b"b");
        // A new handshake trusting only the first CA fails; trusting the second succeeds.
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        assert!(
            client(&ca1).connect(name.clone(), tcp).await.is_err(),
            "new handshake must present the new cert"
        );
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        client(&ca2)
            .connect(name, tcp)
            .await
            .expect("handshake with second cert");
    }

    /// Serves handshakes with `min` until the test ends; returns the address.
    async fn serve(min: TlsMinVersion) -> (std::net::SocketAddr, String) {
        let (ca, cert, key) = material();
        let resolver = CertResolver::new();
        resolver.set(CertResolver::certified_key(&cert, &key).expect("key"));
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(
            server_config_with(resolver, min).expect("cfg"),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(mut tls) = acceptor.accept(tcp).await {
                        let _ = tls.write_all(b"x").await;
                    }
                });
            }
        });
        (addr, ca)
    }

    async fn handshake(
        addr: std::net::SocketAddr,
        ca: &str,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Option<rustls::ProtocolVersion> {
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut tls = client_with(ca, versions).connect(name, tcp).await.ok()?;
        let mut b = [0u8; 1];
        tls.read_exact(&mut b).await.ok()?;
        tls.get_ref().1.protocol_version()
    }

    #[tokio::test]
    async fn minimum_tls_13_refuses_a_tls_12_only_client() {
        let (addr, ca) = serve(TlsMinVersion::Tls13).await;
        assert_eq!(
            handshake(addr, &ca, &[&rustls::version::TLS12]).await,
            None,
            "a TLS 1.2-only client must be refused"
        );
        assert_eq!(
            handshake(addr, &ca, &[&rustls::version::TLS13]).await,
            Some(rustls::ProtocolVersion::TLSv1_3)
        );
    }

    #[tokio::test]
    async fn default_minimum_accepts_tls_12() {
        let (addr, ca) = serve(TlsMinVersion::default()).await;
        assert_eq!(
            handshake(addr, &ca, &[&rustls::version::TLS12]).await,
            Some(rustls::ProtocolVersion::TLSv1_2)
        );
    }

    #[test]
    fn min_version_parses_only_known_versions() {
        assert_eq!("1.2".parse(), Ok(TlsMinVersion::Tls12));
        assert_eq!("1.3".parse(), Ok(TlsMinVersion::Tls13));
        assert!("1.1".parse::<TlsMinVersion>().is_err());
    }
}
