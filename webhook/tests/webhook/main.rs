//! The admission server in-process: one test binary for the transport (`server`), the
//! listener's limits under attack (`limits`) and the defaults patch over every sample
//! (`mutation_patch`). `support` starts a server as `kim-webhook serve` does.

#![allow(clippy::unwrap_used)]

#[path = "../../benches/support/client.rs"]
#[allow(dead_code)]
mod client;

mod limits;
mod mutation_patch;
mod server;
mod support;
