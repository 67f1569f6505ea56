//! The controller (`kim_tests::controller`) against the shared environment.

mod acl;
mod api_faults;
mod audit_log;
mod bootstrapper;
mod burst;
mod deletion;
mod failures;
mod faults;
mod kill;
mod kyma_system;
mod leader;
mod lifecycle;
mod oidc;
mod registry_cache;
mod samples;
mod seeds;
mod takeover;
mod updates;
mod upgrade;
mod upstream_args;
