#![forbid(unsafe_code)]
//! `kim-webhook serve | validate`.

use clap::Parser;

use kim_webhook::admission::AdmissionContext;
use kim_webhook::cli::{Cli, Command};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            kim_webhook::run::init_logging(&args.log_format);
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("cannot start the async runtime: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            let ctx = AdmissionContext {
                deletion_protection: args.deletion_protection,
                deletion_window: args.deletion_window,
            };
            let routes = axum::Router::new().route("/noop", kim_webhook::server::noop_route());
            match runtime.block_on(kim_webhook::run::serve(*args, ctx, routes)) {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "kim-webhook failed");
                    eprintln!("kim-webhook: {e:#}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
        Command::Validate(_) => {
            eprintln!("kim-webhook validate: not available yet");
            std::process::ExitCode::from(2)
        }
    }
}
