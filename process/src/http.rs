//! The plain-HTTP server of probes and metrics.

use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// A port could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} ({flag}): {source}")]
pub struct BindError {
    /// The flag naming the address.
    pub flag: &'static str,
    /// The address.
    pub addr: SocketAddr,
    /// Why.
    pub source: std::io::Error,
}

/// Binds a TCP listener, naming the flag when it fails.
pub async fn bind(addr: SocketAddr, flag: &'static str) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { flag, addr, source })
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets open requests finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Content type of the OpenMetrics text format.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the Prometheus text format 0.0.4.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The registry as `/metrics` answers: OpenMetrics when the client's `Accept` names it (as
/// Prometheus's scrapes do), else the Prometheus text format 0.0.4, which `promtool check
/// metrics` and clients without OpenMetrics read (and which upstream's controller-runtime
/// serves).
///
/// At 10,000 Runtimes the text is several MiB, so a scrape holds one copy of it: the 0.0.4
/// text is rewritten line by line as the encoder writes it, and the buffer starts at the size
/// of the previous answer instead of growing by doubling.
pub fn metrics_response(registry: &Registry, accept: Option<&HeaderValue>) -> Response {
    let openmetrics = accept
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    let mut body = String::with_capacity(LAST_SIZE.load(Ordering::Relaxed));
    let (encoded, content_type) = if openmetrics {
        (
            prometheus_client::encoding::text::encode(&mut body, registry),
            OPENMETRICS,
        )
    } else {
        let mut text = PrometheusText::new(&mut body);
        (
            prometheus_client::encoding::text::encode(&mut text, registry).map(|()| text.finish()),
            PROMETHEUS_TEXT,
        )
    };
    if let Err(e) = encoded {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics: {e}\n"),
        )
            .into_response();
    }
    LAST_SIZE.store(body.len() + body.len() / 16, Ordering::Relaxed);
    let mut response = Response::new(body.into());
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The length of the last `/metrics` answer plus a little: the next one's starting capacity.
static LAST_SIZE: AtomicUsize = AtomicUsize::new(0);

/// The OpenMetrics text of `prometheus_client` in the Prometheus text format 0.0.4: a counter's
/// `HELP` and `TYPE` name its `_total` samples, `unknown` is `untyped`, and the `UNIT` and
/// `EOF` lines, which 0.0.4 lacks, are left out. The samples are the same.
pub fn prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut text = PrometheusText::new(&mut out);
    // Writing into a String does not fail.
    let _ = text.write_str(openmetrics);
    text.finish();
    out
}

/// Writes OpenMetrics text, as it comes, into `out` in the Prometheus text format 0.0.4 (see
/// [`prometheus_text`]). A `HELP` line waits for the `TYPE` line after it, which tells whether
/// the family is a counter.
struct PrometheusText<'a> {
    out: &'a mut String,
    /// The line being written, up to its newline.
    line: String,
    /// A `HELP` line waiting for its `TYPE` line: (name, help text).
    help: Option<(String, String)>,
}

impl<'a> PrometheusText<'a> {
    fn new(out: &'a mut String) -> Self {
        PrometheusText {
            out,
            line: String::new(),
            help: None,
        }
    }

    /// Writes what is still held: a last line without a newline, a `HELP` without `TYPE`.
    fn finish(&mut self) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.end_line(&line);
        }
        self.write_help(None);
    }

    /// Writes a held `HELP` line, named `name` if given (the counter's samples' name).
    fn write_help(&mut self, name: Option<&str>) {
        if let Some((family, help)) = self.help.take() {
            let name = name.unwrap_or(&family);
            // OpenMetrics escapes `"` in help texts, 0.0.4 does not.
            let help = help.replace("\\\"", "\"");
            self.out.push_str(&format!("# HELP {name} {help}\n"));
        }
    }

    fn end_line(&mut self, line: &str) {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            return;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            self.write_help(None);
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            self.help = Some((name.to_owned(), help.to_owned()));
            return;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (family, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = if kind == "counter" {
                format!("{family}_total")
            } else {
                family.to_owned()
            };
            let held = self.help.as_ref().is_some_and(|(f, _)| f == family);
            self.write_help(held.then_some(name.as_str()));
            let kind = if kind == "unknown" { "untyped" } else { kind };
            self.out.push_str(&format!("# TYPE {name} {kind}\n"));
            return;
        }
        self.write_help(None);
        self.out.push_str(line);
        self.out.push('\n');
    }
}

impl std::fmt::Write for PrometheusText<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let mut rest = s;
        while let Some(end) = rest.find('\n') {
            self.line.push_str(&rest[..end]);
            let line = std::mem::take(&mut self.line);
            self.end_line(&line);
            self.line = line;
            self.line.clear();
            rest = &rest[end + 1..];
        }
        self.line.push_str(rest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::metrics::histogram::Histogram;

    fn registry() -> Registry {
        let mut r = Registry::default();
        let c: Counter = Counter::default();
        c.inc();
        r.register("requests", "Requests \"answered\"", c);
        let g: Gauge = Gauge::default();
        g.set(3);
        r.register("ready", "Ready", g);
        let h = Histogram::new([0.5]);
        h.observe(0.1);
        r.register_with_unit(
            "duration",
            "Duration",
            prometheus_client::registry::Unit::Seconds,
            h,
        );
        r
    }

    #[test]
    fn prometheus_gets_openmetrics_and_other_clients_the_text_format() {
        let r = registry();
        let om = metrics_response(
            &r,
            Some(&HeaderValue::from_static(
                "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
            )),
        );
        assert_eq!(om.headers()[header::CONTENT_TYPE], OPENMETRICS);
        for accept in [None, Some(HeaderValue::from_static("text/plain"))] {
            let plain = metrics_response(&r, accept.as_ref());
            assert_eq!(plain.headers()[header::CONTENT_TYPE], PROMETHEUS_TEXT);
        }
    }

    #[test]
    fn the_text_format_names_counters_by_their_samples_and_drops_openmetrics_lines() {
        let mut om = String::new();
        prometheus_client::encoding::text::encode(&mut om, &registry()).expect("encodes");
        let text = prometheus_text(&om);
        assert_eq!(
            text,
            "# HELP requests_total Requests \"answered\".\n\
             # TYPE requests_total counter\n\
             requests_total 1\n\
             # HELP ready Ready.\n\
             # TYPE ready gauge\n\
             ready 3\n\
             # HELP duration_seconds Duration.\n\
             # TYPE duration_seconds histogram\n\
             duration_seconds_sum 0.1\n\
             duration_seconds_count 1\n\
             duration_seconds_bucket{le=\"0.5\"} 1\n\
             duration_seconds_bucket{le=\"+Inf\"} 1\n",
            "from:\n{om}"
        );
    }

    #[test]
    fn the_text_format_is_the_same_whatever_pieces_the_encoder_writes() {
        let mut om = String::new();
        prometheus_client::encoding::text::encode(&mut om, &registry()).expect("encodes");
        let whole = prometheus_text(&om);
        for piece in [1, 3, 7, 64] {
            let mut out = String::new();
            let mut text = PrometheusText::new(&mut out);
            let chars: Vec<char> = om.chars().collect();
            for chunk in chars.chunks(piece) {
                text.write_str(&chunk.iter().collect::<String>())
                    .expect("writes");
            }
            text.finish();
            assert_eq!(out, whole, "pieces of {piece} characters");
        }
        let mut encoded = String::new();
        let mut text = PrometheusText::new(&mut encoded);
        prometheus_client::encoding::text::encode(&mut text, &registry()).expect("encodes");
        text.finish();
        assert_eq!(encoded, whole, "written by the encoder itself");
    }
}
