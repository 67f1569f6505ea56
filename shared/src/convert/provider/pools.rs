//! Per-pool settings every worker pool gets from the configuration and the pods network:
//! machine controller manager defaults and upstream's `maxPods` clamping.

use crate::config::WorkerDefaults;
use crate::convert::ConvertError;
use crate::duration::format_go_duration;
use crate::gardener::Worker;
use crate::gardener::worker::MachineControllerManagerSettings;
use ipnet::Ipv4Net;

/// The most pods a node may run: the usable addresses of the `/24` each node gets from the
/// pods network.
pub const PER_NODE_MAX_PODS: i32 = 254;

/// Usable pod addresses of an IPv4 pods network of prefix length `prefix`: `/32` one, `/31`
/// two (point to point), else all but network and broadcast, at most `i32::MAX`. `None` for
/// `/0` and `/1`, which upstream refuses as pod networks.
pub fn usable_pod_addresses(prefix: u8) -> Option<i64> {
    match prefix {
        0 | 1 => None,
        32 => Some(1),
        31 => Some(2),
        p => Some(((1_i64 << (32 - u32::from(p))) - 2).min(i64::from(i32::MAX))),
    }
}

/// Pools that set `kubernetes.kubelet.maxPods` keep at most [`PER_NODE_MAX_PODS`]; when their
/// sum exceeds the usable addresses of the pods network, the pools are lowered from the last one
/// backwards, none below 1. An empty pods network skips the sum (as upstream does).
pub fn clamp_max_pods(workers: &mut [Worker], pods: &str) -> Result<(), ConvertError> {
    for w in workers.iter_mut() {
        if let Some(m) = pool_max_pods(w) {
            *m = (*m).min(PER_NODE_MAX_PODS);
        }
    }
    if pods.is_empty() {
        return Ok(());
    }
    let total = pods
        .parse::<Ipv4Net>()
        .ok()
        .and_then(|net| usable_pod_addresses(net.prefix_len()))
        .ok_or_else(|| ConvertError::PodsNetwork {
            message: format!(
                "`{pods}` is not an IPv4 CIDR from /2 to /32 such as 10.96.0.0/13; the pods per \
                 node are derived from it"
            ),
        })?;
    let set: Vec<i64> = workers
        .iter()
        .filter_map(|w| max_pods_of(w).map(i64::from))
        .collect();
    let mut excess = set.iter().sum::<i64>() - total;
    let pools_with_max_pods = set.len();
    for w in workers.iter_mut().rev() {
        if excess <= 0 {
            break;
        }
        if let Some(m) = pool_max_pods(w)
            && *m > 1
        {
            let cut = excess.min(i64::from(*m) - 1);
            // `cut` is below `*m`, so it fits an i32.
            *m -= i32::try_from(cut).unwrap_or(0);
            excess -= cut;
        }
    }
    if excess > 0 {
        return Err(ConvertError::PodsNetwork {
            message: format!(
                "`{pods}` has {total} usable pod addresses, fewer than the {pools_with_max_pods} \
                 worker pools that set kubernetes.kubelet.maxPods need (at least one each); use \
                 a larger pods network"
            ),
        });
    }
    Ok(())
}

fn max_pods_of(w: &Worker) -> Option<i32> {
    w.kubernetes.as_ref()?.kubelet.as_ref()?.max_pods
}

fn pool_max_pods(w: &mut Worker) -> Option<&mut i32> {
    w.kubernetes
        .as_mut()
        .and_then(|k| k.kubelet.as_mut())
        .and_then(|k| k.max_pods.as_mut())
}

/// Every pool gets a machine controller manager block; the drain timeout and eviction retries
/// it does not set come from `converter.provider.worker`, the timeout written as Gardener
/// stores it (`15m0s`).
pub fn machine_controller_manager(workers: &mut [Worker], defaults: &WorkerDefaults) {
    for w in workers {
        let mcm = w
            .machine_controller_manager
            .get_or_insert_with(MachineControllerManagerSettings::default);
        if mcm.max_evict_retries.is_none() {
            mcm.max_evict_retries = Some(defaults.max_evict_retries());
        }
        if mcm.machine_drain_timeout.is_none() {
            mcm.machine_drain_timeout = Some(format_go_duration(defaults.machine_drain_timeout()));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pools(max_pods: &[Option<i32>]) -> Vec<Worker> {
        max_pods
            .iter()
            .map(|m| {
                let kubernetes = m.map(|m| json!({"kubelet": {"maxPods": m}}));
                serde_json::from_value(json!({
                    "name": "w", "minimum": 1, "maximum": 3, "machine": {"type": "m6i.large"},
                    "kubernetes": kubernetes,
                }))
                .unwrap()
            })
            .collect()
    }

    fn clamped(max_pods: &[Option<i32>], pods: &str) -> Vec<Option<i32>> {
        let mut workers = pools(max_pods);
        clamp_max_pods(&mut workers, pods).unwrap();
        workers.iter().map(max_pods_of).collect()
    }

    #[test]
    fn usable_addresses_as_upstream_counts_them() {
        // Upstream's TestMaxPodsFromPodsCIDR cases.
        for (prefix, usable) in [
            (24, 254),
            (26, 62),
            (16, 65_534),
            (28, 14),
            (31, 2),
            (32, 1),
            (2, 1_073_741_822),
        ] {
            assert_eq!(usable_pod_addresses(prefix), Some(usable), "/{prefix}");
        }
        assert_eq!(usable_pod_addresses(1), None);
        assert_eq!(usable_pod_addresses(0), None);
    }

    #[test]
    fn clamping_per_node_then_from_the_last_pool_backwards() {
        // Upstream's TestMaxPodsClamping: 2000 -> 254 within a /22; 100 + 1000 in a /24 -> 100 + 154.
        assert_eq!(clamped(&[Some(2000)], "100.64.0.0/22"), [Some(254)]);
        assert_eq!(clamped(&[Some(100)], "100.64.0.0/22"), [Some(100)]);
        assert_eq!(
            clamped(&[Some(100), Some(1000)], "100.64.0.0/24"),
            [Some(100), Some(154)]
        );
        // Empty pods network: only the per-node cap.
        assert_eq!(clamped(&[Some(300), None], ""), [Some(254), None]);
        // A pool at 1 stays; the one before it takes the cut (/26: 62 addresses).
        assert_eq!(
            clamped(&[Some(100), Some(1)], "100.64.0.0/26"),
            [Some(61), Some(1)]
        );
        // Pools without maxPods are skipped.
        assert_eq!(
            clamped(&[Some(200), None, Some(200)], "100.64.0.0/24"),
            [Some(200), None, Some(54)]
        );
    }

    #[test]
    fn unusable_pods_networks_are_errors() {
        for pods in ["not-a-cidr", "fd00::/64", "0.0.0.0/1"] {
            let err = clamp_max_pods(&mut pools(&[None]), pods).unwrap_err();
            assert!(err.to_string().contains("/2 to /32"), "{pods}: {err}");
        }
        let err = clamp_max_pods(&mut pools(&[Some(1), Some(1)]), "10.0.0.0/32").unwrap_err();
        assert!(
            err.to_string().contains("fewer than the 2 worker pools"),
            "{err}"
        );
    }
}
