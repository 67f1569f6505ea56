//! Gardener simulator (placeholder while the harness lands).

use std::time::Duration;

use crate::testenv::ShootClusterInfo;

/// Simulator settings.
#[derive(Debug, Clone)]
pub struct SimulatorConfig {
    /// Delay between steps.
    pub step_delay: Duration,
}

impl SimulatorConfig {
    /// No delays.
    pub fn instant() -> Self {
        Self {
            step_delay: Duration::ZERO,
        }
    }
}

/// The simulator.
pub struct Simulator {
    _client: kube::Client,
    _config: SimulatorConfig,
    _shoot: ShootClusterInfo,
}

impl Simulator {
    /// New simulator.
    pub fn new(client: kube::Client, config: SimulatorConfig, shoot: ShootClusterInfo) -> Self {
        Self {
            _client: client,
            _config: config,
            _shoot: shoot,
        }
    }
    /// Runs it in the background.
    pub fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let _ = self;
        })
    }
}
