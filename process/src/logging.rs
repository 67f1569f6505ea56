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
    let parsed = EnvFilter::try_new(filter)
        .map_err(|e| format!("{flag} {filter:?} is not a valid filter ({e})"))?;
    Ok(quiet_kube_client(parsed))
}

/// `filter` with [`QUIET_KUBE_CLIENT`] added (it overrides whatever the filter says of
/// `kube_client::client`).
pub fn quiet_kube_client(filter: EnvFilter) -> EnvFilter {
    match QUIET_KUBE_CLIENT.parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

/// Added to every filter: kube's client logs the whole response text as a warning when it does
/// not decode, and every refused request's whole answer at `debug`, which would put a list of
/// every Runtime into one log line at each retry of a watch, or a Secret's data (an admission
/// webhook echoing a write) into the log. Its errors are logged, and the failures are reported
/// by the callers without the text.
const QUIET_KUBE_CLIENT: &str = "kube_client::client=error";

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_filter_keeps_kube_clients_response_dumps_out() {
        for asked in [
            "info",
            "debug",
            "kube_client=trace",
            "kim_controller=debug,kube=warn",
        ] {
            let f = filter(asked, "--log-level").expect("valid").to_string();
            assert!(f.contains(QUIET_KUBE_CLIENT), "{asked}: {f}");
        }
        let err = filter("info,=x=y", "--log-level").expect_err("invalid");
        assert!(
            err.starts_with("--log-level \"info,=x=y\" is not a valid filter"),
            "{err}"
        );
    }
}
