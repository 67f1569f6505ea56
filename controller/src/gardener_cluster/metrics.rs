//! Upstream's GardenerCluster metrics:
//! `infrastructure_manager_im_gardener_clusters_state` and
//! `infrastructure_manager_im_kubeconfig_expiration`, with upstream's camelCase labels.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::registry::Registry;

use crate::metrics::SeriesPerObject;

/// Labels of `gardener_clusters_state`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
#[allow(non_snake_case)]
pub struct ClusterStateLabels {
    /// The `kyma-project.io/runtime-id` label.
    pub runtimeId: String,
    /// The `kyma-project.io/shoot-name` label.
    pub shoot: String,
    /// `status.state`.
    pub state: String,
    /// The first condition's reason.
    pub reason: String,
}

/// Labels of `kubeconfig_expiration`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
#[allow(non_snake_case)]
pub struct ExpirationLabels {
    /// The Secret's `kyma-project.io/runtime-id` label.
    pub runtimeId: String,
    /// The Secret's `kyma-project.io/shoot-name` label.
    pub shoot: String,
    /// Expiry in epoch seconds, as a string.
    pub expires: String,
    /// Rotation period in seconds (Go `%G` style).
    pub rotationDuration: String,
    /// Requested validity in seconds (Go `%G` style).
    pub expirationDuration: String,
}

/// The two gauges, one series per GardenerCluster each (old series are removed on change).
#[derive(Default)]
pub struct KubeconfigMetrics {
    state: SeriesPerObject<ClusterStateLabels>,
    expiration: SeriesPerObject<ExpirationLabels>,
}

impl KubeconfigMetrics {
    /// Registers both gauges in the `infrastructure_manager_im` sub-registry.
    pub fn register(&self, sub: &mut Registry) {
        sub.register(
            "gardener_clusters_state",
            "State of each GardenerCluster (always 1; the labels carry state and reason)",
            self.state.family(),
        );
        sub.register(
            "kubeconfig_expiration",
            "Expiry of each kubeconfig Secret in epoch seconds",
            self.expiration.family(),
        );
    }

    /// Sets the state series of the GardenerCluster `key` (its namespace/name).
    pub fn set_state(&self, key: &str, labels: ClusterStateLabels) {
        self.state.set(key, labels, 1);
    }

    /// Sets the expiration series of the GardenerCluster `key`.
    pub fn set_expiration(&self, key: &str, labels: ExpirationLabels, expires_epoch: i64) {
        self.expiration.set(key, labels, expires_epoch);
    }

    /// The GardenerClusters (by key) that have a series.
    pub fn keys(&self) -> Vec<String> {
        let mut keys = self.state.keys();
        keys.extend(self.expiration.keys());
        keys
    }

    /// Removes both series of the GardenerCluster `key` (it is gone).
    pub fn remove(&self, key: &str) {
        self.state.remove(key);
        self.expiration.remove(key);
    }
}

/// Go's `%G` for a whole number of seconds: plain up to six digits, `1.2E+06` beyond.
pub fn go_float(seconds: u64) -> String {
    let digits = seconds.to_string();
    if digits.len() <= 6 {
        return digits;
    }
    let exponent = digits.len() - 1;
    let mantissa = digits.trim_end_matches('0');
    let (first, rest) = mantissa.split_at(1);
    if rest.is_empty() {
        format!("{first}E+{exponent:02}")
    } else {
        format!("{first}.{rest}E+{exponent:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_g_matches_go_formatting() {
        assert_eq!(go_float(51_840), "51840");
        assert_eq!(go_float(86_400), "86400");
        assert_eq!(go_float(600), "600");
        assert_eq!(go_float(1_000_000), "1E+06");
        assert_eq!(go_float(1_296_000), "1.296E+06");
    }

    #[test]
    fn one_series_per_cluster_with_upstream_names() {
        let mut registry = Registry::default();
        let m = KubeconfigMetrics::default();
        m.register(registry.sub_registry_with_prefix("infrastructure_manager_im"));
        let state = |s: &str| ClusterStateLabels {
            runtimeId: "rt".into(),
            shoot: "s".into(),
            state: s.into(),
            reason: "KubeconfigSecretCreated".into(),
        };
        m.set_state("ns/rt", state("Error"));
        m.set_state("ns/rt", state("Ready"));
        m.set_expiration(
            "ns/rt",
            ExpirationLabels {
                runtimeId: "rt".into(),
                shoot: "s".into(),
                expires: "100".into(),
                rotationDuration: "51840".into(),
                expirationDuration: "86400".into(),
            },
            100,
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("infrastructure_manager_im_gardener_clusters_state{runtimeId=\"rt\",shoot=\"s\",state=\"Ready\""), "{text}");
        assert!(!text.contains("state=\"Error\""), "{text}");
        assert!(
            text.contains("infrastructure_manager_im_kubeconfig_expiration{runtimeId=\"rt\""),
            "{text}"
        );
        m.remove("ns/rt");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains("runtimeId=\"rt\""), "{text}");
    }
}
