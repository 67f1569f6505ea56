//! Start-up of `kim-webhook serve`: certificates, servers, signals.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use axum::Router;
use kim_process::Shutdown;
use kim_process::logging::LogFormat;
use kim_process::task::supervised;

use kim_certs::{CertResolver, CertRotator, RotationConfig};
use tracing_appender::non_blocking::WorkerGuard;

use crate::audit::AuditSink;
use crate::cli::{CertArgs, ServeArgs};
use crate::request::AdmissionContext;
use crate::server::{AppState, admin_router, admission_router, drain_after, serve_tls_with};

/// Binds a TCP listener, naming the flag when it fails.
async fn bind(
    addr: std::net::SocketAddr,
    flag: &'static str,
) -> anyhow::Result<tokio::net::TcpListener> {
    Ok(kim_process::http::bind(addr, flag).await?)
}

/// Sets up JSON (or text) logs on stdout; `RUST_LOG` filters, default `info`. Audit records
/// (target `audit`) bypass the formatter and are written as their own JSON lines; keep the
/// returned guard until the program ends, so that the last records are written.
#[must_use = "dropping the guard stops the audit log writer"]
pub fn init_logging(format: LogFormat) -> WorkerGuard {
    // Buffered: the audit writer writes what it has queued in one system call and flushes
    // whenever its queue is empty, so a record is never held back.
    let audit = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout());
    init_logging_to(format, std::io::stdout, audit)
}

/// [`init_logging`] with other writers than stdout: `logs` for the log lines, `audit` for the
/// audit records (the benchmark's in-process profile uses sinks, to cost what the server does).
#[must_use = "dropping the guard stops the audit log writer"]
pub fn init_logging_to<W>(
    format: LogFormat,
    logs: W,
    audit: impl std::io::Write + Send + 'static,
) -> WorkerGuard
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::filter::filter_fn;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer};
    let filter = kim_process::logging::quiet_kube_client(
        EnvFilter::try_new(with_audit(
            &std::env::var(EnvFilter::DEFAULT_ENV).unwrap_or_default(),
        ))
        .unwrap_or_else(|_| EnvFilter::new(with_audit("info"))),
    );
    let not_audit = filter_fn(|m| m.target() != crate::audit::AUDIT_TARGET);
    let fmt = kim_process::logging::layer(format, logs);
    let (audit, guard) = crate::audit::AuditLogLayer::new(audit);
    audit.report_dropped();
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt.with_filter(not_audit))
        .with(audit)
        .try_init();
    guard
}

/// `RUST_LOG` (empty: `info`) with the audit trail on unless a directive names its target: a
/// lower level for the rest (`RUST_LOG=warn`) must not silence the trail; `audit=off` does.
fn with_audit(spec: &str) -> String {
    let spec = if spec.trim().is_empty() { "info" } else { spec };
    let names_audit = spec.split(',').any(|d| {
        let target = d.trim().split('=').next().unwrap_or_default();
        target == crate::audit::AUDIT_TARGET
    });
    if names_audit {
        spec.to_owned()
    } else {
        format!("{spec},{}=info", crate::audit::AUDIT_TARGET)
    }
}

/// Loads a certificate from files into the resolver and re-loads it when the files change.
async fn watch_files(
    state: Arc<AppState>,
    cert: PathBuf,
    key: PathBuf,
    every: Duration,
    stop: Shutdown,
) {
    let mut last: Option<(SystemTime, SystemTime)> = None;
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mtimes = (|| -> std::io::Result<(SystemTime, SystemTime)> {
            Ok((
                std::fs::metadata(&cert)?.modified()?,
                std::fs::metadata(&key)?.modified()?,
            ))
        })();
        let Ok(m) = mtimes else {
            tracing::warn!(cert = %cert.display(), key = %key.display(), "cannot stat the TLS files");
            continue;
        };
        if last == Some(m) {
            continue;
        }
        let (c, k) = (cert.clone(), key.clone());
        let loaded = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let cert_pem =
                std::fs::read_to_string(&c).with_context(|| format!("reading {}", c.display()))?;
            let key_pem =
                std::fs::read_to_string(&k).with_context(|| format!("reading {}", k.display()))?;
            Ok(CertResolver::certified_key(&cert_pem, &key_pem)?)
        })
        .await;
        match loaded {
            Ok(Ok(key)) => {
                // The expiry alert reads this gauge in both certificate modes.
                state.metrics.set_serving_not_after(key.not_after());
                state.resolver.set(key);
                last = Some(m);
                tracing::info!(cert = %cert.display(), "loaded serving certificate from file");
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "cannot load the TLS files; keeping the previous certificate")
            }
            // A bug: raised in this task, which the webhook supervises (it stops).
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => tracing::error!(error = %e, "certificate loading task failed"),
        }
    }
}

/// Starts certificate management: from files, or in the Secret with rotation. A panic there
/// cancels `crashed`.
async fn start_certs(
    certs: &CertArgs,
    state: Arc<AppState>,
    stop: Shutdown,
    crashed: Shutdown,
) -> anyhow::Result<()> {
    let resolver = state.resolver.clone();
    if let (Some(cert), Some(key)) = (&certs.tls_cert_file, &certs.tls_key_file) {
        tokio::spawn(supervised(
            "certificate_files",
            watch_files(
                state.clone(),
                cert.clone(),
                key.clone(),
                certs.cert_check_interval,
                stop,
            ),
            crashed,
        ));
        return Ok(());
    }
    let mut config = kube::Config::infer()
        .await
        .context("no Kubernetes client configuration (in-cluster or KUBECONFIG) for the certificate Secret; or pass --tls-cert-file/--tls-key-file")?;
    crate::identify(&mut config);
    let client =
        kube::Client::try_from(config).context("a Kubernetes client for the certificate Secret")?;
    let cfg = RotationConfig {
        namespace: certs.namespace.clone(),
        secret_name: certs.cert_secret.clone(),
        names: certs.names(),
        policy: certs.policy(),
        mutating_configs: certs
            .mutating_configs
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect(),
        validating_configs: certs
            .validating_configs
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect(),
        field_manager: certs.field_manager.clone(),
    };
    let rotator = Arc::new(CertRotator::new(client, cfg, resolver).context("certificate flags")?);
    let counted = rotator.clone();
    let rotation = rotator.run(stop.cancelled_owned(), move |r| {
        state
            .metrics
            .observe_cert_sync(r, counted.unpropagated_cas())
    });
    tokio::spawn(supervised("certificate_rotation", rotation, crashed));
    Ok(())
}

/// Runs the server until SIGTERM, or until `crashed` is cancelled: a task the webhook cannot
/// serve without panicked (the certificates, the CloudProfile watch). Then it drains as on
/// SIGTERM and returns an error, so that the container restarts instead of serving on with a
/// certificate nobody renews. `routes` are the admission routes.
pub async fn serve(
    args: ServeArgs,
    ctx: AdmissionContext,
    routes: Router<Arc<AppState>>,
    crashed: Shutdown,
) -> anyhow::Result<()> {
    let audit = match &args.audit_log_path {
        Some(p) => AuditSink::with_file(
            p.clone(),
            args.audit_log_max_size_mb.saturating_mul(1024 * 1024),
            args.audit_log_max_files,
        )
        .with_context(|| format!("opening the audit log {} (--audit-log-path)", p.display()))?,
        None => AuditSink::log_only(),
    };
    let limits = args.limits();
    let state = Arc::new(
        AppState::new(ctx, audit, CertResolver::new(), args.max_request_bytes)
            .with_limits(limits.clone()),
    );
    let client_ca = match &args.client_ca_file {
        Some(p) => Some(std::fs::read_to_string(p).with_context(|| {
            format!(
                "reading the client CA bundle {} (--client-ca-file)",
                p.display()
            )
        })?),
        None => None,
    };
    let tls = Arc::new(
        kim_certs::server_config_for(
            state.resolver.clone(),
            args.tls_min_version,
            client_ca.as_deref(),
        )
        .context("TLS configuration (--client-ca-file)")?,
    );

    let https = bind(args.listen_addr, "--listen-addr").await?;
    let admin = bind(args.admin_addr, "--admin-addr").await?;
    let stop = Shutdown::new();
    kim_process::signal::cancel_on_signal(stop.clone());
    tokio::spawn({
        let (stop, crashed) = (stop.clone(), crashed.clone());
        async move {
            tokio::select! {
                () = crashed.cancelled() => stop.cancel(),
                () = stop.cancelled() => {}
            }
        }
    });
    start_certs(&args.certs, state.clone(), stop.clone(), crashed.clone()).await?;

    tracing::info!(listen = %args.listen_addr, admin = %args.admin_addr, "kim-webhook serving");
    // Both servers stop once the shutdown delay after the signal has passed.
    let serving_stop = Shutdown::new();
    tokio::spawn({
        let state = state.clone();
        let delay = args.shutdown_delay;
        let stopped = serving_stop.clone();
        async move {
            drain_after(state, stop.cancelled_owned(), delay).await;
            stopped.cancel();
        }
    });
    let admin_task = tokio::spawn(kim_process::http::serve(
        admin,
        admin_router(state.clone()),
        serving_stop.clone().cancelled_owned(),
    ));
    serve_tls_with(
        https,
        tls,
        admission_router(state, routes),
        serving_stop.cancelled_owned(),
        args.shutdown_grace,
        limits,
    )
    .await;
    match admin_task.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => anyhow::bail!("admin server failed: {e}"),
        Err(e) => anyhow::bail!("admin server task failed: {e}"),
    }
    if crashed.is_cancelled() {
        anyhow::bail!("stopped because a task it serves from panicked (see the log line before)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lower level for the rest keeps the audit trail on; only a directive naming it turns it
    /// off or changes it.
    #[test]
    fn the_audit_trail_is_on_unless_rust_log_names_it() {
        assert_eq!(with_audit(""), "info,audit=info");
        assert_eq!(with_audit("warn"), "warn,audit=info");
        assert_eq!(with_audit("warn,kube=debug"), "warn,kube=debug,audit=info");
        assert_eq!(with_audit("info,audit=off"), "info,audit=off");
        assert_eq!(with_audit("debug, audit=off"), "debug, audit=off");
        // A target that only starts like it is another target.
        assert_eq!(with_audit("auditor=debug"), "auditor=debug,audit=info");
        let filter = kim_process::logging::quiet_kube_client(tracing_subscriber::EnvFilter::new(
            with_audit("error"),
        ));
        assert!(filter.to_string().contains("audit=info"), "{filter}");
        assert!(
            filter.to_string().contains("kube_client::client=error"),
            "{filter}"
        );
    }

    /// A task the webhook serves from that panics (here a stand-in; the certificate rotation
    /// and the CloudProfile watch run the same way) stops the server with an error, after the
    /// drain, instead of leaving it serving without it.
    #[tokio::test]
    async fn a_panic_in_a_task_it_serves_from_stops_the_server_with_an_error() {
        use clap::Parser as _;
        let now = SystemTime::now();
        let ca = kim_certs::material::generate_ca(now, Duration::from_secs(600)).expect("a CA");
        let names = kim_certs::ServingNames {
            dns: vec!["localhost".into()],
            ips: vec![],
        };
        let serving =
            kim_certs::material::issue_serving(&ca, &names, now, Duration::from_secs(300))
                .expect("a certificate");
        let dir = tempfile::tempdir().expect("a directory");
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert, serving.cert_pem).expect("cert written");
        std::fs::write(&key, serving.key_pem).expect("key written");
        let cli = crate::cli::Cli::try_parse_from([
            "kim-webhook".as_ref(),
            "serve".as_ref(),
            "--converter-config-filepath".as_ref(),
            "unused.json".as_ref(),
            "--tls-cert-file".as_ref(),
            cert.as_os_str(),
            "--tls-key-file".as_ref(),
            key.as_os_str(),
            "--listen-addr=127.0.0.1:0".as_ref(),
            "--admin-addr=127.0.0.1:0".as_ref(),
            "--shutdown-delay=0s".as_ref(),
            "--shutdown-grace=1s".as_ref(),
        ] as [&std::ffi::OsStr; 12])
        .expect("flags");
        let crate::cli::Command::Serve(args) = cli.command else {
            panic!("not serve");
        };
        let crashed = Shutdown::new();
        tokio::spawn(supervised(
            "stand-in",
            async { panic!("a bug in a task") },
            crashed.clone(),
        ));
        let served = tokio::time::timeout(
            Duration::from_secs(30),
            serve(*args, AdmissionContext::default(), Router::new(), crashed),
        )
        .await
        .expect("the server stops");
        let error = served.expect_err("a crash is an error").to_string();
        assert!(error.contains("panicked"), "{error}");
    }
}
