//! The plain-HTTP server of probes and metrics.

use std::future::Future;
use std::net::SocketAddr;

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
pub fn metrics_response(registry: &Registry, accept: Option<&HeaderValue>) -> Response {
    let mut body = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut body, registry) {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics: {e}\n"),
        )
            .into_response();
    }
    let openmetrics = accept
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    let (body, content_type) = if openmetrics {
        (body, OPENMETRICS)
    } else {
        (prometheus_text(&body), PROMETHEUS_TEXT)
    };
    let mut response = Response::new(body.into());
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The OpenMetrics text of `prometheus_client` in the Prometheus text format 0.0.4: a counter's
/// `HELP` and `TYPE` name its `_total` samples, `unknown` is `untyped`, and the `UNIT` and
/// `EOF` lines, which 0.0.4 lacks, are left out. The samples are the same.
pub fn prometheus_text(openmetrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in openmetrics.lines() {
        if let Some(name) = line
            .strip_prefix("# TYPE ")
            .and_then(|rest| rest.strip_suffix(" counter"))
        {
            counters.insert(name.to_owned());
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let name = if counters.contains(name) {
                    format!("{name}_total")
                } else {
                    name.to_owned()
                };
                let tail = match (prefix, tail) {
                    ("# TYPE ", "unknown") => "untyped".to_owned(),
                    // OpenMetrics escapes `"` in help texts, 0.0.4 does not.
                    ("# HELP ", t) => t.replace("\\\"", "\""),
                    (_, t) => t.to_owned(),
                };
                out.push_str(&format!("{prefix}{name} {tail}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
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
}
