//! The test environment itself.

mod checks;
mod smoke;
mod teardown;
