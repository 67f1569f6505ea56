//! The one duration syntax of both binaries' flags: Go's style as upstream's flags take it
//! (`3s`, `90m`, `24h`, and days such as `90d`).

use std::time::Duration;

/// Parses a flag's duration; the error shows the accepted form.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration like 3s, 90m, 24h or 90d ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_durations_parse_and_errors_name_the_format() {
        assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("90d"), Ok(Duration::from_secs(90 * 86_400)));
        let err = parse_duration("soon").expect_err("not a duration");
        assert!(err.contains("like 3s"), "{err}");
    }
}
