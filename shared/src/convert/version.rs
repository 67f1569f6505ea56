//! Version comparison for "never go down" (Kubernetes and machine image versions), lenient the
//! way upstream's Masterminds semver is: `1.35` is `1.35.0`. Unparsable versions keep the
//! desired value (upstream), validation rejects them before they get here.

use crate::config::parse_image_version;

/// `desired`, or `live` when `live` is the higher version.
pub(crate) fn not_below(desired: String, live: Option<&str>) -> String {
    match live {
        Some(live) if live != desired && is_lower(&desired, live) => live.to_owned(),
        _ => desired,
    }
}

/// True when both parse and `a < b`.
pub(crate) fn is_lower(a: &str, b: &str) -> bool {
    let parse = |s: &str| parse_image_version(s.strip_prefix('v').unwrap_or(s));
    matches!((parse(a), parse(b)), (Some(a), Some(b)) if a < b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_higher_live_version() {
        assert_eq!(not_below("1.35".into(), Some("1.35.4")), "1.35.4");
        assert_eq!(not_below("1.34.2".into(), Some("1.35.1")), "1.35.1");
        assert_eq!(not_below("1.36".into(), Some("1.35.4")), "1.36");
        assert_eq!(not_below("1.35.4".into(), Some("1.35.4")), "1.35.4");
        assert_eq!(not_below("1877.8.0".into(), Some("1877.10.0")), "1877.10.0");
        assert_eq!(not_below("1.35".into(), None), "1.35");
        // Unparsable: the desired value stays.
        assert_eq!(not_below("latest".into(), Some("1.35.4")), "latest");
        assert_eq!(not_below("1.35.4".into(), Some("garbage")), "1.35.4");
    }
}
