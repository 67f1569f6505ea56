//! The RuntimeAccess reconciler's metrics:
//! `infrastructure_manager_im_runtime_access_tokens_total{result}` (ServiceAccount tokens
//! delivered into kubeconfig Secrets, and the attempts that failed) and
//! `infrastructure_manager_im_runtime_access_state` (each request's state and reason, and the
//! identity it asks for in which runtime).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use kim_process::label::Text;

use crate::metrics::SeriesPerObject;

use super::token::{TokenCause, TokenDecision};

/// Labels of the token counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    /// `issued` (no usable kubeconfig before), `rotated` (the rotation was due), `revoked`
    /// (every earlier token was revoked) or `failed`.
    pub result: &'static str,
}

/// Labels of `runtime_access_state`, camelCase as upstream's GardenerCluster state gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
#[allow(non_snake_case)]
pub struct StateLabels {
    /// The RuntimeAccess's name (in the controller's namespace).
    pub name: String,
    /// `spec.runtimeId` (escaped: the spec is the requester's, and a quote would break the
    /// scrape).
    pub runtimeId: Text,
    /// `spec.serviceAccount` as `<namespace>/<name>`: the identity it asks for in the runtime
    /// (escaped).
    pub serviceAccount: Text,
    /// `status.state`.
    pub state: String,
    /// The `KubeconfigReady` condition's reason.
    pub reason: String,
}

/// Metrics of the tokens and of each request's state.
#[derive(Default)]
pub struct AccessMetrics {
    tokens: Family<TokenLabels, Counter>,
    /// One series per request, by `<namespace>/<name>`.
    state: SeriesPerObject<StateLabels>,
}

impl AccessMetrics {
    /// Registers the metrics in the `infrastructure_manager_im` sub-registry.
    pub fn register(&self, registry: &mut Registry) {
        // Every result from the start, so the first of each counts in `increase()`.
        for result in ["issued", "rotated", "revoked", "failed"] {
            let _ = self.tokens.get_or_create(&TokenLabels { result });
        }
        registry.register(
            "runtime_access_tokens",
            "ServiceAccount tokens of RuntimeAccesses written into their kubeconfig Secrets (issued, rotated, revoked: after every earlier token was revoked) and attempts that failed",
            self.tokens.clone(),
        );
        registry.register(
            "runtime_access_state",
            "State of each RuntimeAccess (always 1; the labels carry the state, the reason, the runtime and the ServiceAccount it asks for)",
            self.state.family(),
        );
    }

    /// Sets the state series of the request `key` (`<namespace>/<name>`).
    pub fn set_state(&self, key: &str, labels: StateLabels) {
        self.state.set(key, labels, 1);
    }

    /// The requests (by key) that have a state series.
    pub fn keys(&self) -> Vec<String> {
        self.state.keys()
    }

    /// Removes the state series of the request `key` (it is gone).
    pub fn remove(&self, key: &str) {
        self.state.remove(key);
    }

    /// Counts a token written into its Secret.
    pub fn delivered(&self, cause: TokenCause) {
        self.count(result(cause));
    }

    /// Counts a reconcile that had a token to deliver and stopped before writing it: the
    /// runtime unreachable, its objects, the TokenRequest or the Secret write failed. A
    /// reconcile that keeps a fresh token counts nothing.
    pub fn failed(&self, decision: TokenDecision) {
        if matches!(decision, TokenDecision::Issue(_)) {
            self.count("failed");
        }
    }

    fn count(&self, result: &'static str) {
        self.tokens.get_or_create(&TokenLabels { result }).inc();
    }
}

/// The result label of a delivered token, as the condition reason tells it.
fn result(cause: TokenCause) -> &'static str {
    match cause {
        TokenCause::Due | TokenCause::ClusterChanged | TokenCause::SigningKeyRotated => "rotated",
        TokenCause::Revoked => "revoked",
        TokenCause::Missing | TokenCause::Unknown => "issued",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn tokens_are_counted_by_result_and_kept_tokens_are_not_failures() {
        let mut registry = Registry::default();
        let m = AccessMetrics::default();
        m.register(registry.sub_registry_with_prefix("infrastructure_manager_im"));
        m.delivered(TokenCause::Missing);
        m.delivered(TokenCause::Unknown);
        m.delivered(TokenCause::Due);
        m.delivered(TokenCause::Revoked);
        m.failed(TokenDecision::Issue(TokenCause::Due));
        m.failed(TokenDecision::Keep {
            requeue_after: Duration::from_secs(1),
        });
        let text = crate::metrics::encode(&registry).unwrap();
        for line in [
            "infrastructure_manager_im_runtime_access_tokens_total{result=\"issued\"} 2",
            "infrastructure_manager_im_runtime_access_tokens_total{result=\"rotated\"} 1",
            "infrastructure_manager_im_runtime_access_tokens_total{result=\"revoked\"} 1",
            "infrastructure_manager_im_runtime_access_tokens_total{result=\"failed\"} 1",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[test]
    fn one_state_series_per_request() {
        let mut registry = Registry::default();
        let m = AccessMetrics::default();
        m.register(registry.sub_registry_with_prefix("infrastructure_manager_im"));
        let state = |name: &str, state: &str, reason: &str| StateLabels {
            name: name.into(),
            runtimeId: Text("rt".into()),
            serviceAccount: Text("apps/reader".into()),
            state: state.into(),
            reason: reason.into(),
        };
        m.set_state("kcp/a", state("a", "Pending", "RuntimeNotReady"));
        m.set_state("kcp/a", state("a", "Ready", "KubeconfigIssued"));
        m.set_state("kcp/b", state("b", "Error", "SecretNotOwned"));
        let text = crate::metrics::encode(&registry).unwrap();
        assert!(!text.contains("RuntimeNotReady"), "{text}");
        assert!(text.contains("infrastructure_manager_im_runtime_access_state{name=\"a\",runtimeId=\"rt\",serviceAccount=\"apps/reader\",state=\"Ready\",reason=\"KubeconfigIssued\"} 1"), "{text}");
        // The spec is the requester's: a quote in it must not break the scrape.
        let mut odd = state("c", "Error", "InvalidSpec");
        odd.runtimeId = Text("rt\"x".into());
        m.set_state("kcp/c", odd);
        let text = crate::metrics::encode(&registry).unwrap();
        assert!(text.contains("runtimeId=\"rt\\\"x\""), "{text}");
        m.remove("kcp/c");
        m.remove("kcp/b");
        let text = crate::metrics::encode(&registry).unwrap();
        assert!(!text.contains("name=\"b\""), "{text}");
        assert_eq!(m.keys(), ["kcp/a"]);
    }
}
