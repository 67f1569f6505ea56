//! A minimal HTTPS client for tests and the load generator: one TLS connection, HTTP/1.1
//! keep-alive or HTTP/2 by ALPN, hyper's low-level connection API.

use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

/// Client TLS configuration trusting `ca_pem` and offering `alpn`.
pub fn tls_config(ca_pem: &str, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()).flatten() {
        let _ = roots.add(c);
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

/// A response: status, body and the negotiated protocol.
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Body bytes.
    pub body: Bytes,
}

/// One keep-alive connection.
pub enum Conn {
    /// HTTP/1.1.
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    /// HTTP/2.
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Conn {
    /// Connects to `addr`, verifying the certificate for `host`.
    pub async fn connect(
        addr: std::net::SocketAddr,
        host: &str,
        tls: Arc<rustls::ClientConfig>,
    ) -> std::io::Result<Self> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from(host.to_string()).map_err(std::io::Error::other)?;
        let stream = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await?;
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        let io = hyper_util::rt::TokioIo::new(stream);
        if h2 {
            let (send, conn) =
                hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                    .await
                    .map_err(std::io::Error::other)?;
            tokio::spawn(conn);
            Ok(Conn::H2(send))
        } else {
            let (send, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(std::io::Error::other)?;
            tokio::spawn(conn);
            Ok(Conn::H1(send))
        }
    }

    /// Whether HTTP/2 was negotiated.
    pub fn is_h2(&self) -> bool {
        matches!(self, Conn::H2(_))
    }

    /// POSTs `body` as JSON to `path`.
    pub async fn post(&mut self, path: &str, body: Bytes) -> Result<Reply, hyper::Error> {
        let req = http::Request::post(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::HOST, "localhost")
            .body(Full::new(body))
            .expect("request");
        let resp = match self {
            Conn::H1(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
            Conn::H2(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
        };
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok(Reply { status, body })
    }
}
