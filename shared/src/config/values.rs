//! Value types of the configuration files that carry a format of their own: Kubernetes versions,
//! volume sizes, memory quantities, CIDRs and maintenance times. Each parses from the string an
//! operator writes and refuses anything else with a message saying what would be valid.

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error as _};
use std::fmt;
use std::str::FromStr;

/// A Kubernetes version as the Runtime and the converter config write it: `1.34` (the newest
/// patch Gardener offers) or `1.34.2` (exactly this patch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KubernetesVersion {
    major: u64,
    minor: u64,
    patch: Option<u64>,
}

impl KubernetesVersion {
    /// Builds a full `major.minor.patch` version.
    pub fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self {
            major,
            minor,
            patch: Some(patch),
        }
    }

    /// The major version (`1`).
    pub fn major(&self) -> u64 {
        self.major
    }

    /// The minor version (`34` in `1.34.2`).
    pub fn minor(&self) -> u64 {
        self.minor
    }

    /// The patch version, `None` for a `major.minor` version.
    pub fn patch(&self) -> Option<u64> {
        self.patch
    }

    /// True for `major.minor.patch`, the only form a CloudProfile lists.
    pub fn is_full(&self) -> bool {
        self.patch.is_some()
    }

    /// True when the full version `offered` satisfies this one: same major and minor, and the
    /// same patch when this version names one.
    pub fn is_satisfied_by(&self, offered: &KubernetesVersion) -> bool {
        self.major == offered.major
            && self.minor == offered.minor
            && self.patch.is_none_or(|p| offered.patch == Some(p))
    }

    /// True when this version is not older than `minimum`. A `major.minor` version counts as
    /// its newest patch, so `1.34` meets the minimum `1.34.5`.
    pub fn is_at_least(&self, minimum: &KubernetesVersion) -> bool {
        match (self.major, self.minor).cmp(&(minimum.major, minimum.minor)) {
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Equal => match (self.patch, minimum.patch) {
                (Some(p), Some(min)) => p >= min,
                _ => true,
            },
        }
    }

    /// Orders full versions (a missing patch counts as 0).
    pub fn sort_key(&self) -> (u64, u64, u64) {
        (self.major, self.minor, self.patch.unwrap_or(0))
    }
}

impl FromStr for KubernetesVersion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid =
            || format!("expected a Kubernetes version such as `1.34` or `1.34.2`, found `{s}`");
        let parts: Vec<&str> = s.split('.').collect();
        let number = |p: &str| -> Result<u64, String> {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid());
            }
            p.parse::<u64>().map_err(|_| invalid())
        };
        match parts.as_slice() {
            [major, minor] => Ok(Self {
                major: number(major)?,
                minor: number(minor)?,
                patch: None,
            }),
            [major, minor, patch] => Ok(Self {
                major: number(major)?,
                minor: number(minor)?,
                patch: Some(number(patch)?),
            }),
            _ => Err(invalid()),
        }
    }
}

impl fmt::Display for KubernetesVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.patch {
            Some(p) => write!(f, "{}.{}.{}", self.major, self.minor, p),
            None => write!(f, "{}.{}", self.major, self.minor),
        }
    }
}

impl<'de> Deserialize<'de> for KubernetesVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(D::Error::custom)
    }
}

impl Serialize for KubernetesVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Parses a machine image version the way Gardener does: semantic versioning, where a missing
/// minor or patch counts as 0 (`1877.8` is `1877.8.0`).
pub fn parse_image_version(s: &str) -> Option<semver::Version> {
    let core_end = s.find(['-', '+']).unwrap_or(s.len());
    let dots = s[..core_end].matches('.').count();
    let padded = match dots {
        0 => format!("{}.0.0{}", &s[..core_end], &s[core_end..]),
        1 => format!("{}.0{}", &s[..core_end], &s[core_end..]),
        _ => return semver::Version::parse(s).ok(),
    };
    semver::Version::parse(&padded).ok()
}

/// A volume size in whole gibibytes, written `80Gi` (the only form Gardener accepts for worker
/// volumes: `^(\d)+Gi$`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VolumeSize(u32);

impl VolumeSize {
    /// A size of `gib` gibibytes.
    pub fn from_gib(gib: u32) -> Self {
        Self(gib)
    }

    /// The size in gibibytes.
    pub fn gib(&self) -> u32 {
        self.0
    }
}

impl FromStr for VolumeSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || format!("expected a size in whole gibibytes such as `80Gi`, found `{s}`");
        let digits = s.strip_suffix("Gi").ok_or_else(invalid)?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        digits.parse::<u32>().map(Self).map_err(|_| invalid())
    }
}

impl fmt::Display for VolumeSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}Gi", self.0)
    }
}

impl<'de> Deserialize<'de> for VolumeSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(D::Error::custom)
    }
}

impl Serialize for VolumeSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A memory quantity in Kubernetes notation (`8Gi`, `512Mi`, `16G`), kept as written for the
/// CloudProfile and as bytes for comparisons.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MemoryQuantity {
    text: String,
    bytes: u64,
}

impl MemoryQuantity {
    /// The quantity in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl FromStr for MemoryQuantity {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const UNITS: [(&str, u64); 10] = [
            ("Ki", 1 << 10),
            ("Mi", 1 << 20),
            ("Gi", 1 << 30),
            ("Ti", 1 << 40),
            ("Pi", 1 << 50),
            ("k", 1_000),
            ("M", 1_000_000),
            ("G", 1_000_000_000),
            ("T", 1_000_000_000_000),
            ("P", 1_000_000_000_000_000),
        ];
        let invalid =
            || format!("expected a memory quantity such as `8Gi` or `512Mi`, found `{s}`");
        let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (digits, unit) = s.split_at(digits_end);
        if digits.is_empty() {
            return Err(invalid());
        }
        let number: u64 = digits.parse().map_err(|_| invalid())?;
        let factor = if unit.is_empty() {
            1
        } else {
            UNITS
                .iter()
                .find(|(u, _)| *u == unit)
                .map(|(_, f)| *f)
                .ok_or_else(invalid)?
        };
        let bytes = number.checked_mul(factor).ok_or_else(invalid)?;
        if bytes == 0 {
            return Err(format!(
                "expected a memory quantity above zero, found `{s}`"
            ));
        }
        Ok(Self {
            text: s.to_owned(),
            bytes,
        })
    }
}

impl<'de> Deserialize<'de> for MemoryQuantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(D::Error::custom)
    }
}

impl Serialize for MemoryQuantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// Parses a CIDR in canonical form (`10.250.0.0/16`; Gardener refuses `10.250.1.0/16`).
pub fn parse_cidr(s: &str) -> Result<IpNet, String> {
    let net: IpNet = s
        .parse()
        .map_err(|_| format!("expected a CIDR such as `10.250.0.0/16`, found `{s}`"))?;
    if net.trunc() != net {
        return Err(format!(
            "`{s}` is not in canonical form: write `{}`",
            net.trunc()
        ));
    }
    Ok(net)
}

/// `deserialize_with` for an optional canonical CIDR.
pub(crate) fn optional_cidr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpNet>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) => parse_cidr(&s).map(Some).map_err(D::Error::custom),
    }
}

/// A time of day with UTC offset in Gardener's maintenance format `HHMMSS+HHMM`
/// (`220000+0100`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MaintenanceTime {
    text: String,
    utc_seconds: u32,
}

impl MaintenanceTime {
    /// The time as written, ready for `spec.maintenance.timeWindow`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Seconds after midnight UTC.
    pub fn utc_seconds_of_day(&self) -> u32 {
        self.utc_seconds
    }
}

impl FromStr for MaintenanceTime {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || {
            format!(
                "expected a time in Gardener's format HHMMSS+HHMM such as `220000+0100` \
                 (offset -1200 to +1400, minutes of the offset 00), found `{s}`"
            )
        };
        let b = s.as_bytes();
        if b.len() != 11 || !(b[6] == b'+' || b[6] == b'-') {
            return Err(invalid());
        }
        let digits = |range: std::ops::Range<usize>| -> Result<u32, String> {
            let part = &s[range];
            if part.bytes().all(|c| c.is_ascii_digit()) {
                part.parse().map_err(|_| invalid())
            } else {
                Err(invalid())
            }
        };
        let (h, m, sec) = (digits(0..2)?, digits(2..4)?, digits(4..6)?);
        let (oh, om) = (digits(7..9)?, digits(9..11)?);
        let positive = b[6] == b'+';
        let offset_ok = om == 0 && if positive { oh <= 14 } else { oh <= 12 };
        if h > 23 || m > 59 || sec > 59 || !offset_ok {
            return Err(invalid());
        }
        let local = (h * 3600 + m * 60 + sec) as i64;
        let offset = (oh * 3600) as i64 * if positive { 1 } else { -1 };
        let utc = (local - offset).rem_euclid(86_400);
        Ok(Self {
            text: s.to_owned(),
            utc_seconds: utc as u32,
        })
    }
}

impl fmt::Display for MaintenanceTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for MaintenanceTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(D::Error::custom)
    }
}

impl Serialize for MaintenanceTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// True for a DNS-1123 label of at most `max` characters (lower-case alphanumerics and `-`,
/// starting and ending alphanumeric).
pub(crate) fn is_dns_label(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// True for a DNS-1123 subdomain (the rule for ConfigMap and Secret names).
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(|label| is_dns_label(label, 63))
}

/// True for an `http(s)://host[...]` URL without spaces; `https_only` refuses `http`.
pub(crate) fn is_url(s: &str, https_only: bool) -> bool {
    let rest = match (s.strip_prefix("https://"), s.strip_prefix("http://")) {
        (Some(rest), _) => rest,
        (None, Some(rest)) if !https_only => rest,
        _ => return false,
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    !host.is_empty() && !host.starts_with(':') && !s.chars().any(char::is_whitespace)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_versions_parse_in_both_forms_and_refuse_others() {
        let v: KubernetesVersion = "1.34".parse().unwrap();
        assert_eq!((v.major(), v.minor(), v.patch()), (1, 34, None));
        let v: KubernetesVersion = "1.34.2".parse().unwrap();
        assert_eq!(v.to_string(), "1.34.2");
        let v: KubernetesVersion = "2.0.1".parse().unwrap();
        assert_eq!((v.major(), v.minor(), v.patch()), (2, 0, Some(1)));
        // `+34` is a number to Rust's `parse`, not to Gardener.
        for bad in [
            "1", "v1.34", "1.34.x", "1..2", "1.34.2.1", "", "1.34-rc1", "1.+34",
        ] {
            let err = bad.parse::<KubernetesVersion>().unwrap_err();
            assert!(err.contains("1.34.2") && err.contains(bad), "{bad}: {err}");
        }
    }

    #[test]
    fn minor_versions_match_any_patch_and_meet_minimums_by_their_newest_patch() {
        let minor: KubernetesVersion = "1.34".parse().unwrap();
        assert!(minor.is_satisfied_by(&KubernetesVersion::new(1, 34, 9)));
        assert!(!minor.is_satisfied_by(&KubernetesVersion::new(1, 35, 0)));
        assert!(minor.is_at_least(&KubernetesVersion::new(1, 34, 5)));
        assert!(!minor.is_at_least(&KubernetesVersion::new(1, 35, 0)));
        let full = KubernetesVersion::new(1, 34, 2);
        assert!(!full.is_at_least(&KubernetesVersion::new(1, 34, 5)));
        assert!(full.is_at_least(&"1.33".parse().unwrap()));
    }

    #[test]
    fn image_versions_accept_gardener_short_forms() {
        assert_eq!(
            parse_image_version("1877.8.0"),
            Some(semver::Version::new(1877, 8, 0))
        );
        assert_eq!(
            parse_image_version("1877.8"),
            Some(semver::Version::new(1877, 8, 0))
        );
        assert_eq!(
            parse_image_version("1877"),
            Some(semver::Version::new(1877, 0, 0))
        );
        assert!(parse_image_version("latest").is_none());
        assert!(parse_image_version("").is_none());
    }

    #[test]
    fn volume_sizes_are_whole_gibibytes() {
        assert_eq!("80Gi".parse::<VolumeSize>().unwrap().gib(), 80);
        for bad in ["80", "80G", "80Mi", "Gi", "-1Gi", "+80Gi", "1.5Gi"] {
            assert!(
                bad.parse::<VolumeSize>().unwrap_err().contains("80Gi"),
                "{bad}"
            );
        }
    }

    #[test]
    fn memory_quantities_understand_binary_and_decimal_units() {
        for (text, bytes) in [
            ("8Gi", 8 << 30),
            ("512Mi", 512 << 20),
            ("16G", 16_000_000_000),
            ("3", 3),
            ("3Ki", 3 << 10),
            ("3Mi", 3 << 20),
            ("3Gi", 3 << 30),
            ("3Ti", 3 << 40),
            ("3Pi", 3 << 50),
            ("3k", 3_000),
            ("3M", 3_000_000),
            ("3G", 3_000_000_000),
            ("3T", 3_000_000_000_000),
            ("3P", 3_000_000_000_000_000),
        ] {
            assert_eq!(
                text.parse::<MemoryQuantity>().unwrap().bytes(),
                bytes,
                "{text}"
            );
        }
        for bad in ["8GB", "Gi", "0Gi", "8 Gi"] {
            assert!(bad.parse::<MemoryQuantity>().is_err(), "{bad}");
        }
    }

    #[test]
    fn cidrs_must_parse_and_be_canonical() {
        assert_eq!(
            parse_cidr("10.250.0.0/16").unwrap().to_string(),
            "10.250.0.0/16"
        );
        assert!(
            parse_cidr("10.250.1.0/16")
                .unwrap_err()
                .contains("write `10.250.0.0/16`")
        );
        assert!(
            parse_cidr("10.250.0.0")
                .unwrap_err()
                .contains("expected a CIDR")
        );
    }

    #[test]
    fn maintenance_times_follow_gardeners_pattern() {
        let t: MaintenanceTime = "220000+0100".parse().unwrap();
        assert_eq!(t.utc_seconds_of_day(), 21 * 3600);
        let t: MaintenanceTime = "010000-0200".parse().unwrap();
        assert_eq!(t.utc_seconds_of_day(), 3 * 3600);
        let t: MaintenanceTime = "003000+0100".parse().unwrap();
        assert_eq!(t.utc_seconds_of_day(), 23 * 3600 + 1800);
        // The last second of the day and the widest offsets are times too.
        let t: MaintenanceTime = "235959+0000".parse().unwrap();
        assert_eq!(t.utc_seconds_of_day(), 86_399);
        let t: MaintenanceTime = "120000+1400".parse().unwrap();
        assert_eq!(t.utc_seconds_of_day(), 22 * 3600);
        let t: MaintenanceTime = "120000-1200".parse().unwrap();
        assert_eq!(t.utc_seconds_of_day(), 0);
        for bad in [
            "240000+0000",
            "006000+0000",
            "000060+0000",
            "220000+1500",
            "220000-1300",
            "220000+0130",
            "2200+0000",
            "220000Z",
        ] {
            assert!(bad.parse::<MaintenanceTime>().is_err(), "{bad}");
        }
    }

    #[test]
    fn names_and_urls() {
        assert!(is_dns_label("kyma-dev", 10));
        assert!(!is_dns_label("kyma-dev-project", 10));
        assert!(!is_dns_label("Kyma", 10));
        assert!(is_dns_subdomain("audit-policy.v1"));
        assert!(!is_dns_subdomain("audit_policy"));
        assert!(is_url("https://auditlog.example.com:3001", false));
        assert!(is_url("http://auditlog.example.com", false));
        assert!(!is_url("http://auditlog.example.com", true));
        assert!(!is_url("auditlog.example.com", false));
        assert!(!is_url("https://", false));
    }
}
