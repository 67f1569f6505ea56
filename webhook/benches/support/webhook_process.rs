//! The release `kim-webhook serve` as a child process with static TLS files, and the small
//! process and HTTP helpers the webhook benches share.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Plain-HTTP GET on the admin port (no client library needed for three endpoints): status
/// code and body.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// A line of /proc/<pid>/status in KiB (`VmRSS:`, `VmHWM:`); 0 when unreadable.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

pub struct Server {
    pub child: Child,
    pub https: SocketAddr,
    pub admin: SocketAddr,
    pub ca_pem: String,
    /// Holds `tls.crt` and `tls.key`.
    pub dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The release binary (`KIM_WEBHOOK_BIN` or `target/release/kim-webhook`) with every limit at
/// its default and the repository's example configuration, once `/readyz` answers 200.
/// `rust_log` sets its log filter; its stderr goes to `stderr`, its stdout (the audit
/// records, as in production) to /dev/null.
pub fn start_server(rust_log: &str, stderr: Stdio) -> Result<Server> {
    let bin = std::env::var_os("KIM_WEBHOOK_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/release/kim-webhook"));
    if !bin.exists() {
        bail!(
            "{} is missing: run `cargo build --release -p kim-webhook` first (the make bench targets do)",
            bin.display()
        );
    }
    let dir = tempfile::tempdir()?;
    let now = SystemTime::now();
    let ca = kim_certs::material::generate_ca(now, Duration::from_secs(3600))?;
    let names = kim_certs::ServingNames {
        dns: vec!["localhost".into()],
        ips: vec!["127.0.0.1".parse()?],
    };
    let serving = kim_certs::material::issue_serving(&ca, &names, now, Duration::from_secs(3600))?;
    std::fs::write(dir.path().join("tls.crt"), &serving.cert_pem)?;
    std::fs::write(dir.path().join("tls.key"), &serving.key_pem)?;
    let https: SocketAddr = format!("127.0.0.1:{}", free_port()).parse()?;
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse()?;
    let child = Command::new(&bin)
        .arg("serve")
        .arg("--converter-config-filepath")
        .arg(repo_root().join("deploy/config/converter_config.json"))
        .arg("--tls-cert-file")
        .arg(dir.path().join("tls.crt"))
        .arg("--tls-key-file")
        .arg(dir.path().join("tls.key"))
        .arg("--listen-addr")
        .arg(https.to_string())
        .arg("--admin-addr")
        .arg(admin.to_string())
        .env("RUST_LOG", rust_log)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let server = Server {
        child,
        https,
        admin,
        ca_pem: ca.cert_pem,
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok((200, _)) = http_get(admin, "/readyz") {
            return Ok(server);
        }
        if Instant::now() > deadline {
            bail!("the webhook did not become ready within 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
