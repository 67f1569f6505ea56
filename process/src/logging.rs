//! Logging: JSON lines by default, with the fields of the current span (`runtime_id`, `shoot`,
//! `uid`) on every line, or text for people.

use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Output format of the logs (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line (default; what log pipelines parse).
    Json,
    /// Human-readable lines for local runs.
    Text,
}

/// The formatting layer writing to `writer`, for a binary that adds layers of its own.
pub fn layer<S, W>(format: LogFormat, writer: W) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(writer)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer().with_writer(writer).boxed(),
    }
}

/// Parses a filter in `EnvFilter` syntax (`info`, `kim_controller=debug`), naming `flag` when
/// it does not parse.
pub fn filter(filter: &str, flag: &str) -> Result<EnvFilter, String> {
    EnvFilter::try_new(filter).map_err(|e| format!("{flag} {filter:?} is not a valid filter ({e})"))
}

/// Installs the global subscriber: `filter`, then lines in `format` on stdout. Errors when the
/// filter does not parse or a subscriber is already installed (tests that start a process
/// twice keep the first).
pub fn init(filter_text: &str, format: LogFormat) -> Result<(), String> {
    let filter = filter(filter_text, "--log-level")?;
    tracing_subscriber::registry()
        .with(filter)
        .with(layer(format, std::io::stdout))
        .try_init()
        .map_err(|e| format!("logging already initialised ({e})"))
}
