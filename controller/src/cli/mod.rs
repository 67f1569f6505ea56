//! Command-line subcommands of `kim-controller`.

pub mod convert;
pub mod run;
