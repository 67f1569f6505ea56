//! The end-to-end tests: one test binary, one module per area, all against real control planes
//! (`kim_tests::testenv`).
//!
//! Tests run in parallel within this process, and most share one environment,
//! [`kim_tests::testenv::TestEnv::shared`]: one KCP with the real gardener-apiserver and the
//! simulator, and one shoot cluster that every Shoot points at. A test that shares it works in
//! namespaces and under names of its own (`env.namespace(...)`, unique runtime IDs and Shoot
//! names, a controller per namespace with its Lease there). What cannot be kept apart that way
//! has an environment or a log of its own:
//! - `controller::oidc` writes the cluster-scoped OpenIDConnect objects that every provisioned
//!   Runtime writes too: its own environment (and its two tests one at a time);
//! - `controller::burst` loads gardener-apiserver's admission to its limit on purpose (a burst
//!   of Runtimes at once, `KIM_BURST_RUNTIMES`, 60 by default): its own environment, so the
//!   other tests' Shoot creates are not refused meanwhile;
//! - `controller::kill` provisions and deletes 200 Runtimes under nine controller starts: its own
//!   environment, so that the others' servers are not loaded with them;
//! - `controller::samples` checks each sample's administrator bindings in the one shoot cluster,
//!   where every other Runtime removes the bindings of administrators it does not list: its own
//!   environment;
//! - the webhook tests (`webhook`, `deploy::rbac_webhook`) register admission webhooks: a
//!   KCP-only environment of their own ([`kim_tests::webhook::env`]), each configuration
//!   scoped to the test's namespace; `webhook::hardening` and `webhook::shutdown` need an
//!   apiserver started with other flags (a client certificate for webhooks; aggregator
//!   routing) and start their own;
//! - `controller::failures`' KCP apiserver restart and etcd compaction tests stop the KCP
//!   apiserver: an environment of their own each;
//! - `webhook::failures` kills a webhook replica behind a Service, as `webhook::shutdown`
//!   stops one: its own KCP-only environment with aggregator routing;
//! - `testenv::teardown` starts and kills environments in child processes;
//! - `controller::api_faults` and `kubeconfig` read their controllers' log lines: those
//!   controllers run on runtimes of their own that log into the test's buffer
//!   ([`kim_tests::controller::KillableController::start_with_args`]), not into the process's
//!   log, which every other test writes to.

mod controller;
mod convert_gardener;
mod deploy;
mod kim_dev;
mod kubeconfig;
mod shoot_migration;
mod testenv;
mod webhook;
