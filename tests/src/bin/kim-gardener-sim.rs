//! `kim-gardener-sim`: the Gardener simulator as a program, for a control plane started
//! elsewhere (e.g. by `kim-dev`, whose state directory holds the files named below).
//!
//! ```text
//! kim-gardener-sim --kubeconfig target/kim-dev/garden.kubeconfig \
//!   --simulator-dir target/kim-dev/state/simulator --step-delay 2s
//! ```

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kim_tests::simulator::{Fault, Simulator, SimulatorConfig};
use kim_tests::testenv::{CertPair, ShootClusterInfo, access};

/// Plays gardener-scheduler and gardenlet for Shoots in a real gardener-apiserver.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Kubeconfig for the Gardener API (admin).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Directory with `shoot-url`, `client-ca.crt`, `client-ca.key` (PKCS#1 RSA) and
    /// `cluster-ca.crt` of the shoot cluster (the test environment writes it).
    #[arg(long)]
    simulator_dir: PathBuf,
    /// Time each step of a Shoot operation takes.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    step_delay: Duration,
    /// Fault for Shoots that name none: none, stuck, error:CODES, failed:CODES, slow:DURATION.
    #[arg(long, default_value = "none")]
    fault: Fault,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    let args = Args::parse();
    let read = |name: &str| {
        let p = args.simulator_dir.join(name);
        std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))
    };
    let shoot = ShootClusterInfo {
        url: read("shoot-url")?.trim().to_string(),
        client_ca: CertPair {
            cert_pem: read("client-ca.crt")?,
            key_pem: read("client-ca.key")?,
        },
        cluster_ca_pem: read("cluster-ca.crt")?,
    };
    let yaml = std::fs::read_to_string(&args.kubeconfig)
        .with_context(|| format!("reading kubeconfig {}", args.kubeconfig.display()))?;
    let client = access::client_from_yaml("garden", &yaml).await?;
    let config = SimulatorConfig {
        step_delay: args.step_delay,
        default_fault: args.fault,
    };
    tracing::info!(step_delay = ?config.step_delay, shoot_url = %shoot.url, "kim-gardener-sim running");
    tokio::select! {
        () = Simulator::new(client, config, shoot).run() => {}
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted"),
    }
    Ok(())
}
