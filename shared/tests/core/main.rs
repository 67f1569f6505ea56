//! The tests of kim-shared, one module per area, in one test binary: each binary costs a link,
//! and the mutation runs (`make mutants`) rebuild every one of them for each mutant. The
//! upstream-compatibility suite (`tests/upstream_compat/`) stays a target of its own, since a
//! plain `cargo test` does not run it.

mod config_errors;
mod config_load;
mod convert_extenders;
mod convert_fixture;
mod convert_golden;
mod convert_patch;
mod convert_properties;
mod crds_drift;
mod defaults_runtime;
mod golden_fixture;
mod validation_auth;
mod validation_cloud_profile;
mod validation_convert_prop;
mod validation_fixtures;
mod validation_lifecycle;
mod validation_runtime;
mod validation_workers;
