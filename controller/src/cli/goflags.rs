//! Go's `flag` package syntax on top of clap, so that upstream's Deployment arguments (and an
//! operator's overlays of them) work unchanged: `-name` means `--name`, booleans take Go's
//! spellings, durations take Go's forms.

use std::ffi::OsString;
use std::time::Duration;

/// Rewrites Go's single-dash long flags (`-zap-log-level=info`, `-leader-elect`) to clap's
/// double dash. A single letter after the dash stays a short flag (`-h`, `-f`), and a dash
/// followed by a digit stays a value (`-1`); after `--` nothing is rewritten.
pub fn normalize<I, T>(args: I) -> Vec<OsString>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut out = Vec::new();
    let mut rest_verbatim = false;
    for arg in args {
        let arg: OsString = arg.into();
        if rest_verbatim {
            out.push(arg);
            continue;
        }
        let rewritten = arg.to_str().and_then(|s| {
            if s == "--" {
                rest_verbatim = true;
                return None;
            }
            let name = s.strip_prefix('-').filter(|n| !n.starts_with('-'))?;
            let name_len = name.find('=').unwrap_or(name.len());
            let long = name_len > 1 && name.starts_with(|c: char| c.is_ascii_alphabetic());
            long.then(|| OsString::from(format!("-{s}")))
        });
        out.push(rewritten.unwrap_or(arg));
    }
    out
}

/// Parses a boolean as Go's `strconv.ParseBool` does: `1 t T TRUE true True` and
/// `0 f F FALSE false False`.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("{s:?} is not a boolean (true, false, 1, 0, t, f)")),
    }
}

/// Parses a duration flag: ours (`3s`, `24h`, `90d`) and every form of Go's
/// `time.ParseDuration` (`1h30m`, `1.5h`, `0`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    kim_shared::duration::parse_duration(s)
        .or_else(|ours| kim_shared::duration::parse_go_duration(s).ok_or(ours))
}

/// A positive duration (upstream refuses a zero `--status-requeue-delay` at start).
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?} must be greater than zero"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(args: &[&str]) -> Vec<String> {
        normalize(args.iter().copied())
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn single_dash_long_flags_become_double_dash() {
        assert_eq!(
            norm(&[
                "kim-controller",
                "-zap-log-level=debug",
                "-leader-elect",
                "-gardener-project-name",
                "kyma-dev",
                "--leader-elect=false",
                "-h",
                "-f",
                "-1",
                "-0.5",
                "--",
                "-kept",
            ]),
            [
                "kim-controller",
                "--zap-log-level=debug",
                "--leader-elect",
                "--gardener-project-name",
                "kyma-dev",
                "--leader-elect=false",
                "-h",
                "-f",
                "-1",
                "-0.5",
                "--",
                "-kept",
            ]
        );
    }

    #[test]
    fn booleans_take_go_spellings() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(t), Ok(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(f), Ok(false), "{f}");
        }
        assert!(parse_bool("yes").is_err());
    }

    #[test]
    fn durations_take_go_forms() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("90d"), Ok(Duration::from_secs(90 * 86400)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("soon").is_err());
        assert!(parse_positive_duration("0").is_err());
        assert_eq!(parse_positive_duration("1s"), Ok(Duration::from_secs(1)));
    }
}
