//! Command line of `kim-controller`: upstream's flags with no subcommand (as upstream's
//! Deployment passes them, in Go's syntax too), or one subcommand per mode. Each subcommand's
//! flags and code live in `cli::<name>`; adding one is a variant of [`Command`].

pub mod convert;
pub mod goflags;
pub mod run;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// The infrastructure manager's reconcilers and tools.
#[derive(Parser, Debug)]
// Go's flag package lets a later occurrence of a flag win; so does this.
#[command(name = "kim-controller", version, about, args_override_self = true)]
pub struct Cli {
    /// Without a subcommand, the flags of `run`.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The flags of `run`, when no subcommand is given.
    #[command(flatten)]
    pub run: Box<run::RunArgs>,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the reconcilers (Runtime, GardenerCluster, RBAC kubeconfigs); the default.
    Run(Box<run::RunArgs>),
    /// Print the Shoot (and its structured-auth ConfigMap) the controller would create for a
    /// Runtime, or apply over a live Shoot with --shoot; talks to no cluster.
    Convert(convert::ConvertArgs),
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Invocation {
    /// Reconcile, with these flags.
    Run(Box<run::RunArgs>),
    /// Convert, with these flags.
    Convert(convert::ConvertArgs),
}

/// Parses `args` (the program name first) in clap's and Go's syntax; the `run` flags learn
/// which accepted-but-ignored upstream flags were given.
pub fn parse<I, T>(args: I) -> Result<Invocation, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString>,
{
    let matches = Cli::command().try_get_matches_from(goflags::normalize(args))?;
    let cli = Cli::from_arg_matches(&matches)?;
    Ok(match cli.command {
        None => {
            let mut run = cli.run;
            run.ignored_flags = run::ignored_flags(&matches);
            Invocation::Run(run)
        }
        Some(Command::Run(mut run)) => {
            if let Some(("run", sub)) = matches.subcommand() {
                run.ignored_flags = run::ignored_flags(sub);
            }
            Invocation::Run(run)
        }
        Some(Command::Convert(args)) => Invocation::Convert(args),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::LogFormat;
    use std::time::Duration;

    fn run(args: &[&str]) -> run::RunArgs {
        match parse(std::iter::once("kim-controller").chain(args.iter().copied())) {
            Ok(Invocation::Run(args)) => *args,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn every_go_form_of_a_value_flag() {
        for form in [
            &["-gardener-project-name=kyma-dev"][..],
            &["--gardener-project-name=kyma-dev"],
            &["-gardener-project-name", "kyma-dev"],
            &["--gardener-project-name", "kyma-dev"],
        ] {
            assert_eq!(run(form).gardener_project_name, "kyma-dev", "{form:?}");
        }
        assert_eq!(
            run(&["-gardener-request-timeout", "1h30m"]).gardener_request_timeout,
            Duration::from_secs(5400)
        );
        assert_eq!(
            run(&["-kubeconfig-expiration-time=1.5h"]).kubeconfig_expiration_time,
            Duration::from_secs(5400)
        );
    }

    #[test]
    fn every_go_form_of_a_boolean_flag() {
        assert!(!run(&[]).leader_elect);
        for on in [
            &["-leader-elect"][..],
            &["--leader-elect"],
            &["-leader-elect=true"],
            &["--leader-elect=1"],
            &["-leader-elect=T"],
        ] {
            assert!(run(on).leader_elect, "{on:?}");
        }
        for off in [
            &["-audit-log-mandatory=false"][..],
            &["--audit-log-mandatory=false"],
            &["-audit-log-mandatory=0"],
            &["--audit-log-mandatory=F"],
        ] {
            assert!(!run(off).audit_log_mandatory, "{off:?}");
        }
        // As in Go, a boolean takes its value only after `=`: the word after it is no value.
        assert!(parse(["kim-controller", "-leader-elect", "false"]).is_err());
    }

    #[test]
    fn a_later_occurrence_wins_as_in_go() {
        let a = run(&["--gardener-project-name=a", "-gardener-project-name=b"]);
        assert_eq!(a.gardener_project_name, "b");
    }

    #[test]
    fn upstream_defaults_of_the_flags_we_only_accept() {
        let a = run(&[]);
        assert_eq!(a.status_requeue_delay, Duration::from_secs(1));
        assert_eq!(a.registry_cache_listener_port, "8082");
        assert_eq!(a.registry_cache_reconcile_period, Duration::from_secs(3600));
        assert!(!a.registry_cache_config_controller_enabled);
        assert!(!a.dedicated_audit_logging_enabled);
        assert!(!a.bootstrapper.enabled);
        assert_eq!(
            a.bootstrapper.manifests_config_map_name,
            "runtime-bootstrapper-manifests"
        );
        assert_eq!(a.bootstrapper.kcp_config_name, "rt-bootstrapper-config");
        assert_eq!(a.bootstrapper.skr_pull_secret_name, "registry-credentials");
        assert_eq!(a.bootstrapper.skr_namespace, "kyma-system");
        assert_eq!(
            a.bootstrapper.skr_deployment_name,
            "rt-bootstrapper-controller-manager"
        );
        assert_eq!(a.zap, run::ZapArgs::default());
        assert!(a.ignored_flags.is_empty());
        assert!(parse(["kim-controller", "--status-requeue-delay=0"]).is_err());
    }

    #[test]
    fn ignored_flags_are_named_once_each() {
        let a = run(&[
            "-status-requeue-delay=2s",
            "--registry-cache-listener-port",
            "9000",
            "-runtime-bootstrapper-enabled",
            "-dedicated-audit-logging-enabled",
            "-zap-time-encoding=epoch",
            "--zap-time-encoding=iso8601",
            "-zap-log-level=debug",
            "--leader-elect",
        ]);
        assert_eq!(
            a.ignored_flags,
            [
                "--status-requeue-delay",
                "--registry-cache-listener-port",
                "--dedicated-audit-logging-enabled",
                "--zap-time-encoding",
            ]
        );
        let Ok(Invocation::Run(sub)) =
            parse(["kim-controller", "run", "-zap-stacktrace-level=panic"])
        else {
            panic!("run subcommand")
        };
        assert_eq!(sub.ignored_flags, ["--zap-stacktrace-level"]);
    }

    #[test]
    fn zap_flags_map_to_our_logging() {
        // Without zap flags, ours (`--log-level` may come from RUST_LOG).
        let a = run(&["--log-format=json"]);
        assert_eq!(
            (a.log_level(), a.log_format()),
            (a.log_level.clone(), LogFormat::Json)
        );
        let a = run(&["-zap-devel"]);
        assert_eq!(
            (a.log_level().as_str(), a.log_format()),
            ("debug", LogFormat::Text)
        );
        let a = run(&["-zap-devel", "-zap-encoder=json", "-zap-log-level=error"]);
        assert_eq!(
            (a.log_level().as_str(), a.log_format()),
            ("error", LogFormat::Json)
        );
        let a = run(&["-zap-encoder", "console", "--log-level=warn"]);
        assert_eq!(
            (a.log_level().as_str(), a.log_format()),
            ("warn", LogFormat::Text)
        );
        for (zap, ours) in [
            ("info", "info"),
            ("panic", "error"),
            ("1", "debug"),
            ("3", "trace"),
        ] {
            let flag = format!("-zap-log-level={zap}");
            assert_eq!(run(&[flag.as_str()]).log_level(), ours, "{zap}");
        }
        for bad in [
            "-zap-log-level=0",
            "-zap-log-level=loud",
            "-zap-encoder=xml",
        ] {
            assert!(parse(["kim-controller", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn kubeconfig_is_the_kcp_kubeconfig() {
        for form in [
            &["-kubeconfig=/k"][..],
            &["--kubeconfig", "/k"],
            &["--kcp-kubeconfig-path=/k"],
        ] {
            assert_eq!(
                run(form).kcp_kubeconfig_path.as_deref(),
                Some(std::path::Path::new("/k")),
                "{form:?}"
            );
        }
    }

    #[test]
    fn subcommands_stay() {
        assert!(matches!(
            parse(["kim-controller", "convert", "-f", "rt.yaml"]),
            Ok(Invocation::Convert(_))
        ));
        assert!(matches!(
            parse(["kim-controller", "run", "-leader-elect"]),
            Ok(Invocation::Run(a)) if a.leader_elect
        ));
    }
}
