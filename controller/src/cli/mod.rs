//! Command-line subcommands of `kim-controller`.

pub mod run;
