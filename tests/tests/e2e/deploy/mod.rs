//! The manifests of `deploy/` against the real apiserver and the binaries' flag parsers; the
//! dashboards and alerts on a real Prometheus.

mod manifests;
mod prometheus;
mod rbac;
mod rbac_webhook;
