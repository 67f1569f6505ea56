//! The one duration syntax of both binaries' flags: Go's style as upstream's flags take it
//! (`3s`, `90m`, `24h`, and days such as `90d`); and Go's own duration strings as upstream's
//! `converter_config.json` holds them and Gardener stores them (`15m0s`, `720h0m0s`).

use std::time::Duration;

/// Parses a flag's duration; the error shows the accepted form.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration like 3s, 90m, 24h or 90d ({e})"))
}

/// Nanoseconds per unit of Go's `time.ParseDuration`.
const GO_UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),
    ("\u{3bc}s", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a non-negative duration the way Go's `time.ParseDuration` does (`15m`, `1h30m`,
/// `1.5h`, `0`); no days. `None` for anything Go refuses and for negative durations.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let rest = s.strip_prefix('+').unwrap_or(s);
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() || rest.starts_with('-') {
        return None;
    }
    let mut rest = rest;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int, after) = rest.split_at(int_len);
        let (frac, after) = match after.strip_prefix('.') {
            Some(a) => {
                let n = a.bytes().take_while(u8::is_ascii_digit).count();
                a.split_at(n)
            }
            None => ("", after),
        };
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        let unit_len = after
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(after.len(), |(i, _)| i);
        let (unit, after) = after.split_at(unit_len);
        let scale = GO_UNITS.iter().find(|(name, _)| *name == unit)?.1;
        let whole: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
        let mut value = whole.checked_mul(scale)?;
        // Go keeps the fraction's digits as far as they change the nanoseconds.
        let mut divisor: u128 = 1;
        for d in frac.bytes().take(30) {
            divisor *= 10;
            value += u128::from(d - b'0') * scale / divisor;
        }
        total = total.checked_add(value)?;
        rest = after;
    }
    // Go's durations are int64 nanoseconds.
    (total <= i64::MAX as u128).then(|| Duration::from_nanos(total as u64))
}

/// Writes a duration as Go's `time.Duration.String` does, which is how Gardener stores the
/// durations of a Shoot: `15m0s`, `720h0m0s`, `1.5s`, `250ms`, `0s`.
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000_000_000 {
        let (scale, unit) = match nanos {
            n if n < 1_000 => (1, "ns"),
            n if n < 1_000_000 => (1_000, "\u{b5}s"),
            _ => (1_000_000, "ms"),
        };
        return format!("{}{unit}", decimal(nanos, scale));
    }
    let hours = nanos / 3_600_000_000_000;
    let minutes = nanos / 60_000_000_000 % 60;
    let seconds = decimal(nanos % 60_000_000_000, 1_000_000_000);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// `value / scale` with the fraction's trailing zeros left out.
fn decimal(value: u128, scale: u128) -> String {
    let whole = value / scale;
    let frac = value % scale;
    if frac == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_as_go_parses_them() {
        let secs = Duration::from_secs;
        assert_eq!(parse_go_duration("15m"), Some(secs(900)));
        assert_eq!(parse_go_duration("720h"), Some(secs(720 * 3600)));
        assert_eq!(parse_go_duration("1h30m"), Some(secs(5400)));
        assert_eq!(parse_go_duration("1.5h"), Some(secs(5400)));
        assert_eq!(parse_go_duration(".5s"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_go_duration("+2s"), Some(secs(2)));
        assert_eq!(
            parse_go_duration("3\u{b5}s"),
            Some(Duration::from_micros(3))
        );
        for bad in [
            "", "30d", "15", "m", ".s", "-5m", "1h-2m", "1e3s", "3000000h",
        ] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn go_durations_are_written_as_go_writes_them() {
        let secs = Duration::from_secs;
        assert_eq!(format_go_duration(secs(900)), "15m0s");
        assert_eq!(format_go_duration(secs(720 * 3600)), "720h0m0s");
        assert_eq!(format_go_duration(secs(5430)), "1h30m30s");
        assert_eq!(format_go_duration(secs(42)), "42s");
        assert_eq!(format_go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_go_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_go_duration(Duration::from_nanos(1500)), "1.5\u{b5}s");
        assert_eq!(format_go_duration(Duration::from_nanos(7)), "7ns");
        assert_eq!(format_go_duration(Duration::ZERO), "0s");
        for s in ["15m0s", "720h0m0s", "2160h0m0s", "1m30s"] {
            assert_eq!(
                format_go_duration(parse_go_duration(s).unwrap_or_default()),
                s
            );
        }
    }

    #[test]
    fn go_style_durations_parse_and_errors_name_the_format() {
        assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("90d"), Ok(Duration::from_secs(90 * 86_400)));
        let err = parse_duration("soon").expect_err("not a duration");
        assert!(err.contains("like 3s"), "{err}");
    }
}
