//! `kim-controller`: upstream's flags with no subcommand run the reconcilers; the subcommands
//! are in `kim_controller::cli`.
#![forbid(unsafe_code)]

use kim_controller::cli::{self, Invocation};
use kim_controller::runner;
use std::process::ExitCode;

fn main() -> ExitCode {
    let invocation = match cli::parse(std::env::args_os()) {
        Ok(invocation) => invocation,
        Err(e) => e.exit(),
    };
    let result = match invocation {
        Invocation::Run(args) => {
            runner::execute(*args).map_err(|e| format!("kim-controller run: {e}"))
        }
        Invocation::Convert(args) => cli::convert::execute(
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
