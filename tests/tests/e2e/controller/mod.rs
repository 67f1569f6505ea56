//! The controller (`kim_tests::controller`) against the shared environment.

mod acl;
mod api_faults;
mod bootstrapper;
mod burst;
mod deletion;
mod faults;
mod kill;
mod kyma_system;
mod leader;
mod lifecycle;
mod oidc;
mod samples;
mod seeds;
mod takeover;
mod updates;
mod upstream_args;
