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
        if let Some(m) = pool_max_pods(w)
            && *m > PER_NODE_MAX_PODS
        {
            *m = PER_NODE_MAX_PODS;
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
