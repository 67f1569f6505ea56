//! Syntax checks of single values (names, sizes, versions, URLs), written by hand so that a
//! check costs a pass over the bytes and never a regex compilation or an allocation.

/// Longest DNS label (RFC 1123).
pub const DNS_LABEL_MAX: usize = 63;
/// Longest DNS subdomain (RFC 1123).
pub const DNS_SUBDOMAIN_MAX: usize = 253;

/// Whether `s` is an RFC 1123 DNS label: 1-63 characters of `a-z`, `0-9` and `-`, starting and
/// ending with a letter or digit.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= DNS_LABEL_MAX
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Whether `s` is an RFC 1123 DNS subdomain: at most 253 characters, dot-separated DNS labels.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= DNS_SUBDOMAIN_MAX && s.split('.').all(is_dns_label)
}

/// Whether `s` is a valid key of a Secret or ConfigMap: 1-253 characters of `a-z`, `A-Z`,
/// `0-9`, `-`, `_` and `.`, and neither `.` nor `..`.
pub fn is_config_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= DNS_SUBDOMAIN_MAX
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Longest name part of a qualified name and longest label value (Kubernetes).
pub const QUALIFIED_NAME_MAX: usize = 63;

/// Whether `s` is 1-63 characters of `A-Z`, `a-z`, `0-9`, `-`, `_` and `.`, starting and
/// ending with a letter or digit: the name part of a qualified name and a non-empty label
/// value (Kubernetes' `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`).
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= QUALIFIED_NAME_MAX
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Whether `s` is a Kubernetes qualified name, the form of label keys, annotation keys and
/// taint keys: an optional DNS subdomain prefix and `/`, then a name part (1-63 characters of
/// letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit).
pub fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_name_part(name),
        None => is_name_part(s),
    }
}

/// Whether `s` is a Kubernetes label value: empty, or a name part (see [`is_qualified_name`]).
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_name_part(s)
}

/// A volume size in the only form Gardener accepts (`^(\d)+Gi$`), as gibibytes.
/// `None` when the form is wrong or the number does not fit.
pub fn parse_gi(s: &str) -> Option<u64> {
    let digits = s.strip_suffix("Gi")?;
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A `maxSurge`/`maxUnavailable` value: an absolute count or a percentage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scaled {
    /// An absolute number of machines.
    Count(i64),
    /// A percentage of the pool (`"25%"`).
    Percent(i64),
}

impl Scaled {
    /// Whether the value is zero, in either form.
    pub fn is_zero(self) -> bool {
        matches!(self, Scaled::Count(0) | Scaled::Percent(0))
    }
}

/// Parses the string form of an int-or-string rolling-update value: `"N%"` or a plain integer
/// (Kubernetes accepts an integer in a string for these fields).
pub fn parse_scaled(s: &str) -> Option<Scaled> {
    let (digits, percent) = match s.strip_suffix('%') {
        Some(d) => (d, true),
        None => (s, false),
    };
    let unsigned = digits.strip_prefix('-').unwrap_or(digits);
    if unsigned.is_empty() || !unsigned.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let n: i64 = digits.parse().ok()?;
    Some(if percent {
        Scaled::Percent(n)
    } else {
        Scaled::Count(n)
    })
}

/// What is wrong with an OIDC issuer URL, if anything. Kubernetes requires `https`, a host, and
/// no user info, query or fragment (the issuer is compared byte for byte with the token's `iss`).
pub fn issuer_url_problem(s: &str) -> Option<&'static str> {
    if s.bytes()
        .any(|c| c.is_ascii_whitespace() || c.is_ascii_control())
    {
        return Some("must not contain whitespace");
    }
    let Some(rest) = s.strip_prefix("https://") else {
        return Some("must be an https URL such as https://issuer.example.com");
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() {
        return Some("must name a host, such as https://issuer.example.com");
    }
    if authority.contains('@') {
        return Some("must not contain user info (user@host)");
    }
    if rest.contains('?') {
        return Some("must not contain a query (?...)");
    }
    if rest.contains('#') {
        return Some("must not contain a fragment (#...)");
    }
    None
}

/// What is wrong with a URL given for a remote registry or proxy, if anything: it must be an
/// `http` or `https` URL with a host.
pub fn http_url_problem(s: &str) -> Option<&'static str> {
    if s.bytes()
        .any(|c| c.is_ascii_whitespace() || c.is_ascii_control())
    {
        return Some("must not contain whitespace");
    }
    let rest = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"));
    let Some(rest) = rest else {
        return Some("must be an http:// or https:// URL");
    };
    if rest
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default()
        .is_empty()
    {
        return Some("must name a host after the scheme");
    }
    None
}

/// Whether `s` is a registry host as registry-cache accepts it in `upstream`: a DNS subdomain
/// with an optional `:port` and no scheme.
pub fn is_registry_host(s: &str) -> bool {
    let (host, port) = match s.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (s, None),
    };
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0));
    port_ok && is_dns_subdomain(host)
}

/// Whether `s` is a Go duration as Gardener writes them (`168h`, `30m`, `1h30m`, `0s`):
/// one or more `<number><unit>` with units `h`, `m`, `s`, `ms`, `us`, `ns`.
pub fn is_go_duration(s: &str) -> bool {
    let mut rest = s.as_bytes();
    if rest.is_empty() {
        return false;
    }
    if rest == b"0" {
        return true;
    }
    while !rest.is_empty() {
        let digits = rest
            .iter()
            .take_while(|c| c.is_ascii_digit() || **c == b'.')
            .count();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let unit = rest
            .iter()
            .take_while(|c| c.is_ascii_alphabetic() || **c == 0xb5)
            .count();
        if !matches!(&rest[..unit], b"h" | b"m" | b"s" | b"ms" | b"us" | b"ns") {
            return false;
        }
        rest = &rest[unit..];
    }
    true
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        for ok in ["a", "cpu-worker-0", "0a", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }

    #[test]
    fn dns_subdomains() {
        assert!(is_dns_subdomain("kubeconfig-abc.def"));
        assert!(!is_dns_subdomain("hyperscaler secret"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain(""));
    }

    #[test]
    fn qualified_names_and_label_values() {
        for ok in [
            "a",
            "Pool_1.x",
            "example.com/pool",
            "node.kubernetes.io/role",
            &"a".repeat(63),
        ] {
            assert!(is_qualified_name(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a b",
            "/a",
            "example.com/",
            "Example.com/a",
            "a/b/c",
            "example.com/-a",
            &"a".repeat(64),
        ] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
        assert!(is_label_value("") && is_label_value("v1.2_x-y"));
        assert!(!is_label_value("a b") && !is_label_value("-a") && !is_label_value("a/b"));
        assert!(!is_label_value(&"a".repeat(64)));
    }

    #[test]
    fn sizes_and_scaled_values() {
        assert_eq!(parse_gi("50Gi"), Some(50));
        assert_eq!(parse_gi("50G"), None);
        assert_eq!(parse_gi("Gi"), None);
        assert_eq!(parse_gi("-5Gi"), None);
        assert_eq!(parse_scaled("25%"), Some(Scaled::Percent(25)));
        assert_eq!(parse_scaled("3"), Some(Scaled::Count(3)));
        assert_eq!(parse_scaled("-1"), Some(Scaled::Count(-1)));
        assert_eq!(parse_scaled("x%"), None);
        assert_eq!(parse_scaled("%"), None);
        // Rust's integer parsing takes a leading `+`; Kubernetes' forms do not.
        assert_eq!(parse_gi("+5Gi"), None);
        assert_eq!(parse_scaled("+5"), None);
        assert_eq!(parse_scaled("+5%"), None);
    }

    #[test]
    fn urls() {
        assert_eq!(
            issuer_url_problem("https://kyma.accounts.ondemand.com"),
            None
        );
        assert!(issuer_url_problem("http://x").is_some());
        assert!(issuer_url_problem("https://").is_some());
        assert!(issuer_url_problem("https://a/b?c").is_some());
        assert!(issuer_url_problem("https://u@a").is_some());
        assert_eq!(http_url_problem("https://registry-1.docker.io"), None);
        assert!(http_url_problem("docker.io").is_some());
        assert!(is_registry_host("docker.io"));
        assert!(is_registry_host("my.registry:5000"));
        assert!(!is_registry_host("https://docker.io"));
        assert!(!is_registry_host("my.registry:0") && is_registry_host("my.registry:1"));
        // Control characters are refused like whitespace.
        for url in [
            "https://issuer.example.com/\u{1}",
            "https://issuer.example.com/ x",
        ] {
            assert_eq!(
                issuer_url_problem(url),
                Some("must not contain whitespace"),
                "{url:?}"
            );
            assert_eq!(
                http_url_problem(url),
                Some("must not contain whitespace"),
                "{url:?}"
            );
        }
        assert!(is_go_duration("168h") && is_go_duration("1h30m") && is_go_duration("0s"));
        assert!(!is_go_duration("7d") && !is_go_duration("h"));
    }
}
