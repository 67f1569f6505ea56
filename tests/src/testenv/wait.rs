//! Waiting for conditions during start-up and in tests.

use std::future::Future;
use std::time::{Duration, Instant};

/// A condition did not hold in time, or cannot hold any more.
#[derive(Debug, thiserror::Error)]
#[error("waiting for {what} (up to {timeout:?}, load average {load}): {last}")]
pub struct Timeout {
    /// What was awaited.
    pub what: String,
    /// The limit.
    pub timeout: Duration,
    /// The machine's load averages (1, 5, 15 minutes) when it gave up: a start-up that timed
    /// out on a machine running many more processes than it has cores says so.
    pub load: String,
    /// The last reason it was not yet true.
    pub last: String,
}

/// The first three fields of `/proc/loadavg`, or `unknown`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// Why a condition is not true (yet).
#[derive(Debug)]
pub enum NotYet {
    /// Try again after the interval.
    Retry(String),
    /// Give up now (e.g. the process that should answer has exited).
    Fail(String),
}

impl From<String> for NotYet {
    fn from(s: String) -> Self {
        NotYet::Retry(s)
    }
}

/// Polls `check` every `interval` until it returns `Ok(())`, fails, or `timeout` passes.
/// For start-up probes and for waiting on other processes in tests; code under test should use
/// watches.
pub async fn until<F, Fut>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut check: F,
) -> Result<(), Timeout>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), NotYet>>,
{
    let start = Instant::now();
    loop {
        let last = match check().await {
            Ok(()) => return Ok(()),
            Err(NotYet::Fail(reason)) => {
                return Err(Timeout {
                    what: what.to_string(),
                    timeout,
                    last: reason,
                    load: load_average(),
                });
            }
            Err(NotYet::Retry(reason)) => reason,
        };
        if start.elapsed() >= timeout {
            return Err(Timeout {
                what: what.to_string(),
                timeout,
                last,
                load: load_average(),
            });
        }
        tokio::time::sleep(interval).await;
    }
}

/// One look at an API server's `/readyz`: why it is not ready yet names only the checks that
/// fail (`[-]` lines of the verbose answer), not the dozens that pass.
pub async fn readyz(client: &kube::Client) -> Result<(), NotYet> {
    let req = http::Request::get("/readyz?verbose")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match client.request_text(req).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) => {
            let failing: Vec<&str> = e.message.lines().filter(|l| l.starts_with("[-]")).collect();
            Err(if failing.is_empty() {
                format!("{} {}", e.code, e.message)
            } else {
                format!("{} {}", e.code, failing.join("; "))
            }
            .into())
        }
        Err(e) => Err(e.to_string().into()),
    }
}
