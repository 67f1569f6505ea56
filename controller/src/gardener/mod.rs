//! Talking to Gardener: a guarded client (allow-list, rate limit, timeout, strict TLS,
//! request metrics) and the background health check.

pub mod allow;
pub mod client;
pub mod health;
pub mod limit;
