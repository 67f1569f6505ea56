//! Upstream's zone subnet algorithms (`hyperscaler/{aws,azure,alicloud}/zones.go`): the worker
//! CIDR (`spec.shoot.networking.nodes`) is cut into per-zone subnets by the zone's position in
//! the zone list, so a zone keeps its subnets when zones are appended.

use ipnet::Ipv4Net;
use std::net::Ipv4Addr;

/// Most zones a provider infrastructure config may list.
pub const MAX_ZONES: usize = 8;
/// Shortest nodes prefix the subnet split supports (`/16`).
pub const MIN_NODES_PREFIX: u8 = 16;
/// Longest nodes prefix the subnet split supports (`/24`).
pub const MAX_NODES_PREFIX: u8 = 24;

/// Bits added to the nodes prefix for one zone's share (an eighth of the nodes CIDR).
const ZONE_BITS: u8 = 3;

/// Why the nodes CIDR cannot be split; the caller names the Runtime field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZoneSplitError {
    /// Fewer zones than the provider needs or more than it allows.
    ZoneCount {
        count: usize,
        min: usize,
        max: usize,
    },
    /// The nodes prefix is outside what the split supports, `/min`..`/max`.
    Prefix { prefix: u8, min: u8, max: u8 },
}

/// The three subnets of one AWS zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsZoneSubnets {
    /// Zone name, for example `eu-central-1a`.
    pub name: String,
    /// Subnet of the worker nodes.
    pub workers: Ipv4Net,
    /// Subnet of the public load balancers and NAT gateway.
    pub public: Ipv4Net,
    /// Subnet of the internal load balancers.
    pub internal: Ipv4Net,
}

fn check(nodes: Ipv4Net, count: usize, min: usize, max: usize) -> Result<(), ZoneSplitError> {
    if count < min || count > max {
        return Err(ZoneSplitError::ZoneCount { count, min, max });
    }
    let prefix = nodes.prefix_len();
    if !(MIN_NODES_PREFIX..=MAX_NODES_PREFIX).contains(&prefix) {
        return Err(ZoneSplitError::Prefix {
            prefix,
            min: MIN_NODES_PREFIX,
            max: MAX_NODES_PREFIX,
        });
    }
    Ok(())
}

fn net(base: u32, prefix: u8) -> Result<Ipv4Net, ZoneSplitError> {
    // The prefix is at most 32 here (24 + 3 + 3 after `check`, 32 for GDCH), so this never
    // fails.
    Ipv4Net::new(Ipv4Addr::from(base), prefix).map_err(|_| ZoneSplitError::Prefix {
        prefix,
        min: 0,
        max: 32,
    })
}

/// AWS: with `w = nodes prefix + 3`, each of the first three zones takes `workers /w`, then
/// `public /(w+1)` and `internal /(w+1)` (two `/w` blocks in all); zones four to eight take
/// three consecutive `/(w+3)` blocks from what is left. 1 to 8 zones, nodes prefix 16 to 24.
pub fn aws(nodes: Ipv4Net, zones: &[&str]) -> Result<Vec<AwsZoneSubnets>, ZoneSplitError> {
    check(nodes, zones.len(), 1, MAX_ZONES)?;
    let w = nodes.prefix_len() + ZONE_BITS;
    // Size of a /(w+1) block, and of a /(w+3) block for the small zones.
    let half = 1u32 << (31 - u32::from(w));
    let small = half >> 2;
    let mut base = u32::from(nodes.network());
    let mut out = Vec::with_capacity(zones.len());
    for (i, name) in zones.iter().enumerate() {
        let subnets = if i < 3 {
            let workers = net(base, w)?;
            base += 2 * half;
            let public = net(base, w + 1)?;
            base += half;
            let internal = net(base, w + 1)?;
            base += half;
            (workers, public, internal)
        } else {
            let workers = net(base, w + 3)?;
            let public = net(base + small, w + 3)?;
            let internal = net(base + 2 * small, w + 3)?;
            base += 3 * small;
            (workers, public, internal)
        };
        out.push(AwsZoneSubnets {
            name: (*name).to_owned(),
            workers: subnets.0,
            public: subnets.1,
            internal: subnets.2,
        });
    }
    Ok(out)
}

/// Azure and Alibaba Cloud: zone `k` (by position) gets the `k`-th `/(nodes prefix + 3)` block.
/// 0 to 8 zones (no zones is the legacy non-zoned "azure-lite" layout), nodes prefix 16 to 24.
pub fn eighths(nodes: Ipv4Net, count: usize) -> Result<Vec<Ipv4Net>, ZoneSplitError> {
    check(nodes, count, 0, MAX_ZONES)?;
    let w = nodes.prefix_len() + ZONE_BITS;
    let step = 1u32 << (32 - u32::from(w));
    let base = u32::from(nodes.network());
    // count <= 8, so the index fits in u32 and every block lies inside the nodes CIDR.
    (0..count as u32).map(|k| net(base + k * step, w)).collect()
}

/// Most zones of a GDCH cluster.
pub const GDCH_MAX_ZONES: usize = 3;

/// GDCH (upstream's `hyperscaler/gdch/zones.go`): the nodes CIDR is cut into 1, 2 or 4 equal
/// blocks for 1, 2 or 3 zones; zone `k` (by position) takes the `k`-th block. Any nodes prefix
/// whose blocks still fit an IPv4 network, as upstream (KEB offers GDCH networks up to /23 and
/// sets no lower bound).
pub fn gdch(nodes: Ipv4Net, count: usize) -> Result<Vec<Ipv4Net>, ZoneSplitError> {
    if !(1..=GDCH_MAX_ZONES).contains(&count) {
        return Err(ZoneSplitError::ZoneCount {
            count,
            min: 1,
            max: GDCH_MAX_ZONES,
        });
    }
    let shift: u8 = match count {
        1 => 0,
        2 => 1,
        _ => 2,
    };
    if nodes.prefix_len() + shift > 32 {
        return Err(ZoneSplitError::Prefix {
            prefix: nodes.prefix_len(),
            min: 0,
            max: 32 - shift,
        });
    }
    let w = nodes.prefix_len() + shift;
    // In u64: a /0 network with one zone is a single block of 2^32 addresses.
    let step = 1u64 << (32 - u32::from(w));
    let base = u64::from(u32::from(nodes.network()));
    // count <= 3 blocks inside the nodes CIDR: each start fits in u32.
    (0..count as u64)
        .map(|k| {
            let start = u32::try_from(base + k * step).map_err(|_| ZoneSplitError::Prefix {
                prefix: nodes.prefix_len(),
                min: 0,
                max: 32 - shift,
            })?;
            net(start, w)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Ipv4Net {
        s.parse().expect("test CIDR")
    }

    fn strs(zones: &[AwsZoneSubnets]) -> Vec<[String; 3]> {
        zones
            .iter()
            .map(|z| {
                [
                    z.workers.to_string(),
                    z.public.to_string(),
                    z.internal.to_string(),
                ]
            })
            .collect()
    }

    /// Upstream's example for `10.250.0.0/16`, zones 1a..1d, and the upstream test table.
    #[test]
    fn aws_reference_example() {
        let zones = aws(
            n("10.250.0.0/16"),
            &[
                "eu-central-1a",
                "eu-central-1b",
                "eu-central-1c",
                "eu-central-1d",
            ],
        )
        .expect("valid");
        assert_eq!(
            strs(&zones),
            vec![
                ["10.250.0.0/19", "10.250.32.0/20", "10.250.48.0/20"].map(String::from),
                ["10.250.64.0/19", "10.250.96.0/20", "10.250.112.0/20"].map(String::from),
                ["10.250.128.0/19", "10.250.160.0/20", "10.250.176.0/20"].map(String::from),
                ["10.250.192.0/22", "10.250.196.0/22", "10.250.200.0/22"].map(String::from),
            ]
        );
        assert_eq!(zones[3].name, "eu-central-1d");
    }

    #[test]
    fn aws_eight_zones_stay_inside_and_disjoint() {
        for prefix in MIN_NODES_PREFIX..=MAX_NODES_PREFIX {
            let nodes = Ipv4Net::new(Ipv4Addr::new(10, 250, 0, 0), prefix)
                .expect("prefix")
                .trunc();
            let names = ["a", "b", "c", "d", "e", "f", "g", "h"];
            let zones = aws(nodes, &names).expect("valid");
            let all: Vec<Ipv4Net> = zones
                .iter()
                .flat_map(|z| [z.workers, z.public, z.internal])
                .collect();
            for (i, a) in all.iter().enumerate() {
                assert!(nodes.contains(a), "{a} outside {nodes}");
                for b in &all[i + 1..] {
                    assert!(!a.contains(b) && !b.contains(a), "{a} overlaps {b}");
                }
            }
        }
        // The last of the eight zones for /16 (upstream: 10.250.240.0/22, .244.0/22, .248.0/22).
        let zones = aws(
            n("10.250.0.0/16"),
            &["a", "b", "c", "d", "e", "f", "g", "h"],
        )
        .expect("valid");
        assert_eq!(
            strs(&zones[7..]),
            vec![["10.250.240.0/22", "10.250.244.0/22", "10.250.248.0/22"].map(String::from)]
        );
    }

    #[test]
    fn aws_small_nodes_range() {
        // aws-trial sample: nodes 10.250.0.0/22, one zone.
        let zones = aws(n("10.250.0.0/22"), &["eu-central-1b"]).expect("valid");
        assert_eq!(
            strs(&zones),
            vec![["10.250.0.0/25", "10.250.0.128/26", "10.250.0.192/26"].map(String::from)]
        );
    }

    #[test]
    fn aws_limits() {
        assert_eq!(
            aws(n("10.250.0.0/16"), &[]),
            Err(ZoneSplitError::ZoneCount {
                count: 0,
                min: 1,
                max: 8
            })
        );
        let nine = ["1", "2", "3", "4", "5", "6", "7", "8", "9"];
        assert_eq!(
            aws(n("10.250.0.0/16"), &nine),
            Err(ZoneSplitError::ZoneCount {
                count: 9,
                min: 1,
                max: 8
            })
        );
        assert_eq!(
            aws(n("10.0.0.0/15"), &["a"]),
            Err(ZoneSplitError::Prefix {
                prefix: 15,
                min: 16,
                max: 24
            })
        );
        assert_eq!(
            aws(n("10.250.0.0/25"), &["a"]),
            Err(ZoneSplitError::Prefix {
                prefix: 25,
                min: 16,
                max: 24
            })
        );
    }

    /// Upstream's Azure example (`10.250.0.0/16`: .0.0/19, .32.0/19, ...) and the upstream
    /// table for `/22` and `/17`.
    #[test]
    fn azure_reference_example() {
        let s = |v: Vec<Ipv4Net>| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(
            s(eighths(n("10.250.0.0/16"), 8).expect("valid")),
            [
                "10.250.0.0/19",
                "10.250.32.0/19",
                "10.250.64.0/19",
                "10.250.96.0/19",
                "10.250.128.0/19",
                "10.250.160.0/19",
                "10.250.192.0/19",
                "10.250.224.0/19"
            ]
        );
        assert_eq!(
            s(eighths(n("10.250.0.0/22"), 3).expect("valid")),
            ["10.250.0.0/25", "10.250.0.128/25", "10.250.1.0/25"]
        );
        assert_eq!(
            s(eighths(n("10.180.0.0/17"), 3).expect("valid")),
            ["10.180.0.0/20", "10.180.16.0/20", "10.180.32.0/20"]
        );
        assert_eq!(
            s(eighths(n("10.250.0.0/24"), 8).expect("valid"))[7],
            "10.250.0.224/27"
        );
        assert_eq!(eighths(n("10.250.0.0/16"), 0), Ok(vec![]));
        assert_eq!(
            eighths(n("10.250.0.0/16"), 9),
            Err(ZoneSplitError::ZoneCount {
                count: 9,
                min: 0,
                max: 8
            })
        );
        assert_eq!(
            eighths(n("10.250.0.0/25"), 1),
            Err(ZoneSplitError::Prefix {
                prefix: 25,
                min: 16,
                max: 24
            })
        );
    }

    /// Upstream's `TestProviderExtenderForCreateGDCH` table: /24 -> three /26, /16 -> three
    /// /18, /19 -> one /19, /19 -> two /20.
    #[test]
    fn gdch_reference_examples() {
        let s = |v: Vec<Ipv4Net>| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(
            s(gdch(n("10.72.0.0/24"), 3).expect("valid")),
            ["10.72.0.0/26", "10.72.0.64/26", "10.72.0.128/26"]
        );
        assert_eq!(
            s(gdch(n("10.180.0.0/16"), 3).expect("valid")),
            ["10.180.0.0/18", "10.180.64.0/18", "10.180.128.0/18"]
        );
        assert_eq!(
            s(gdch(n("10.72.0.0/19"), 1).expect("valid")),
            ["10.72.0.0/19"]
        );
        assert_eq!(
            s(gdch(n("10.72.0.0/19"), 2).expect("valid")),
            ["10.72.0.0/20", "10.72.16.0/20"]
        );
        assert_eq!(
            gdch(n("10.250.0.0/16"), 4),
            Err(ZoneSplitError::ZoneCount {
                count: 4,
                min: 1,
                max: 3
            })
        );
        assert_eq!(
            gdch(n("10.250.0.0/16"), 0),
            Err(ZoneSplitError::ZoneCount {
                count: 0,
                min: 1,
                max: 3
            })
        );
        // Upstream (and KEB) set no range but the zones' fit: a /12 and a /30 split too.
        assert_eq!(
            s(gdch(n("172.16.0.0/12"), 3).expect("valid")),
            ["172.16.0.0/14", "172.20.0.0/14", "172.24.0.0/14"]
        );
        assert_eq!(
            s(gdch(n("10.0.0.0/30"), 3).expect("valid")),
            ["10.0.0.0/32", "10.0.0.1/32", "10.0.0.2/32"]
        );
        assert_eq!(s(gdch(n("0.0.0.0/0"), 1).expect("valid")), ["0.0.0.0/0"]);
        assert_eq!(
            gdch(n("10.0.0.0/31"), 3),
            Err(ZoneSplitError::Prefix {
                prefix: 31,
                min: 0,
                max: 30
            })
        );
    }
}
