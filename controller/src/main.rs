//! `kim-controller`: one subcommand per mode. Each subcommand's flags and code live in
//! `kim_controller::cli::<name>`; adding one is a variant here and one match arm.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use kim_controller::{cli, runner};
use std::process::ExitCode;

/// The infrastructure manager's reconcilers and tools.
#[derive(Parser)]
#[command(name = "kim-controller", version, about)]
struct Cli {
    /// Without a subcommand, `run` with its defaults.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the reconcilers (Runtime, GardenerCluster, RBAC kubeconfigs); the default.
    Run(Box<cli::run::RunArgs>),
    /// Print the Shoot (and its structured-auth ConfigMap) the controller would create for a
    /// Runtime, or apply over a live Shoot with --shoot; talks to no cluster.
    Convert(cli::convert::ConvertArgs),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        None => cli::run::default_args()
            .map_err(|e| e.to_string())
            .and_then(|args| runner::execute(args).map_err(|e| format!("kim-controller run: {e}"))),
        Some(Command::Run(args)) => {
            runner::execute(*args).map_err(|e| format!("kim-controller run: {e}"))
        }
        Some(Command::Convert(args)) => cli::convert::execute(
            &args,
            &mut std::io::stdout().lock(),
            &mut std::io::stderr().lock(),
        )
        .map_err(|e| format!("kim-controller convert: {e}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}
