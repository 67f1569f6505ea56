//! Logging: JSON lines by default, with span fields (`runtime_id`, `shoot`) on every line.

use tracing_subscriber::EnvFilter;

/// Output format of the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line (default; what log pipelines parse).
    Json,
    /// Human-readable lines for local runs.
    Text,
}

/// Installs the global subscriber. Errors when the filter does not parse or a subscriber is
/// already installed (tests that start the runner twice keep the first).
pub fn init(filter: &str, format: LogFormat) -> Result<(), String> {
    let filter = EnvFilter::try_new(filter)
        .map_err(|e| format!("--log-level {filter:?} is not a valid filter ({e})"))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let result = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
    result.map_err(|e| format!("logging already initialised ({e})"))
}
