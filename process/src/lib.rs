//! The skeleton of both long-running binaries (`kim-controller run`, `kim-webhook serve`):
//! logging set-up, shutdown on SIGTERM or Ctrl-C, the plain-HTTP server for probes and
//! metrics, and the supervision of the tasks a process cannot do without. A crate of its own, not a module of kim-shared, so that kim-shared stays free of
//! an async runtime and HTTP, and a change here rebuilds only this small crate and the two
//! binaries.
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod http;
pub mod label;
pub mod logging;
pub mod signal;
pub mod task;

pub use signal::Shutdown;
