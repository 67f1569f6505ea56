//! Waiting for conditions during start-up and in tests.

use std::future::Future;
use std::time::{Duration, Instant};

/// A condition did not hold in time, or cannot hold any more.
#[derive(Debug, thiserror::Error)]
#[error("waiting for {what} (up to {timeout:?}): {last}")]
pub struct Timeout {
    /// What was awaited.
    pub what: String,
    /// The limit.
    pub timeout: Duration,
    /// The last reason it was not yet true.
    pub last: String,
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
                });
            }
            Err(NotYet::Retry(reason)) => reason,
        };
        if start.elapsed() >= timeout {
            return Err(Timeout {
                what: what.to_string(),
                timeout,
                last,
            });
        }
        tokio::time::sleep(interval).await;
    }
}
