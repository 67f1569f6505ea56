//! What the tests of this binary share: the repository's example configuration, a CA and
//! serving certificate, and a server started as `kim-webhook serve` starts it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use hyper::body::Bytes;
use kim_certs::{CertResolver, ServingNames};
use kim_shared::config::{ConfigPaths, KimConfig};
use kim_webhook::audit::AuditSink;
use kim_webhook::request::AdmissionContext;
use kim_webhook::server::{
    AppState, Limits, admin_router, admission_router, serve_plain, serve_tls_with,
};
use tokio::net::TcpListener;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The repository's example KIM configuration.
pub fn config() -> KimConfig {
    KimConfig::load(&ConfigPaths::new(
        repo().join("deploy/config/converter_config.json"),
    ))
    .expect("example config loads")
}

/// A CA and a serving certificate it signed for `localhost` and `127.0.0.1`.
pub struct Pki {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

pub fn pki() -> Pki {
    pki_issued(SystemTime::now())
}

/// As [`pki`], issued at `now`: a serving certificate valid for 300 s from then.
pub fn pki_issued(now: SystemTime) -> Pki {
    let ca = kim_certs::material::generate_ca(now, Duration::from_secs(600)).unwrap();
    let names = ServingNames {
        dns: vec!["localhost".into()],
        ips: vec!["127.0.0.1".parse().unwrap()],
    };
    let s = kim_certs::material::issue_serving(&ca, &names, now, Duration::from_secs(300)).unwrap();
    Pki {
        ca_pem: ca.cert_pem,
        cert_pem: s.cert_pem,
        key_pem: s.key_pem,
    }
}

/// The webhook's routes plus `/noop` (reads the body, answers a constant), for the tests of
/// the transport.
pub fn routes_with_noop() -> Router<Arc<AppState>> {
    let noop = axum::routing::post(|_body: Bytes| async { "{}" });
    kim_webhook::routes().route("/noop", noop)
}

/// How to start the server.
pub struct Options {
    pub limits: Limits,
    pub max_body: usize,
    /// PEM bundle of the CAs whose client certificates are accepted (`--client-ca-file`).
    pub client_ca: Option<String>,
    pub routes: Router<Arc<AppState>>,
    /// `Some((signal, delay))`: shut down as `kim-webhook serve` does on SIGTERM, not ready at
    /// once and serving until `delay` has passed.
    pub drain: Option<(tokio::sync::oneshot::Receiver<()>, Duration)>,
    /// Load [`Running::ca_pem`]'s serving certificate at start; `false` starts without one,
    /// as a replica does before it has read its Secret.
    pub certificate: bool,
    /// Also write the audit records to this file (`--audit-log-path`).
    pub audit_file: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            max_body: 1 << 20,
            client_ca: None,
            routes: routes_with_noop(),
            drain: None,
            certificate: true,
            audit_file: None,
        }
    }
}

pub struct Running {
    pub https: SocketAddr,
    pub admin: SocketAddr,
    pub state: Arc<AppState>,
    /// The CA of the certificate loaded at start (with [`Options::certificate`]).
    pub ca_pem: String,
}

pub async fn start(opts: Options) -> Running {
    let ctx = AdmissionContext {
        config: Some(Arc::new(config())),
        ..AdmissionContext::default()
    };
    let state = Arc::new(
        AppState::new(
            ctx,
            match &opts.audit_file {
                Some(path) => AuditSink::with_file(path.clone(), 1 << 20, 1).unwrap(),
                None => AuditSink::log_only(),
            },
            CertResolver::new(),
            opts.max_body,
        )
        .with_limits(opts.limits.clone()),
    );
    let p = pki();
    if opts.certificate {
        state
            .resolver
            .set(CertResolver::certified_key(&p.cert_pem, &p.key_pem).unwrap());
    }
    let tls = Arc::new(
        kim_certs::server_config_for(
            state.resolver.clone(),
            kim_certs::TlsMinVersion::default(),
            opts.client_ca.as_deref(),
        )
        .unwrap(),
    );
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (https, admin) = (l.local_addr().unwrap(), a.local_addr().unwrap());
    let app = admission_router(state.clone(), opts.routes);
    let stop: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> = match opts.drain {
        Some((signal, delay)) => Box::pin(kim_webhook::server::drain_after(
            state.clone(),
            async {
                let _ = signal.await;
            },
            delay,
        )),
        None => Box::pin(std::future::pending()),
    };
    tokio::spawn(serve_tls_with(
        l,
        tls,
        app,
        stop,
        Duration::from_secs(1),
        opts.limits,
    ));
    tokio::spawn(serve_plain(
        a,
        admin_router(state.clone()),
        std::future::pending(),
    ));
    Running {
        https,
        admin,
        state,
        ca_pem: p.ca_pem,
    }
}
