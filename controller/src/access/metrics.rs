//! `infrastructure_manager_im_runtime_access_tokens_total{result}`: ServiceAccount tokens the
//! RuntimeAccess reconciler delivered into kubeconfig Secrets, and the attempts that failed.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::token::{TokenCause, TokenDecision};

/// Labels of the token counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    /// `issued` (no usable kubeconfig before), `rotated` (the rotation was due), `revoked`
    /// (every earlier token was revoked) or `failed`.
    pub result: &'static str,
}

/// Metrics of the tokens.
#[derive(Default)]
pub struct TokenMetrics {
    tokens: Family<TokenLabels, Counter>,
}

impl TokenMetrics {
    /// Registers the counter in the `infrastructure_manager_im` sub-registry.
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
        let m = TokenMetrics::default();
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
}
