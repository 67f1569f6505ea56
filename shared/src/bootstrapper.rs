//! Decisions of the runtime bootstrapper (behind `--runtime-bootstrapper-enabled`): which KCP
//! objects it reads and copies into the runtime cluster, how the manifests ConfigMap is split
//! into objects, and what the bootstrapper Deployment in the runtime cluster says about the
//! installation. The reads and writes are the controller's.

use serde::Deserialize;
use serde_json::Value;

use crate::names::{condition, reason};

/// Namespace of the KCP objects the bootstrapper reads.
pub const KCP_NAMESPACE: &str = "kcp-system";
/// Key of the manifests ConfigMap holding the multi-document YAML.
pub const MANIFESTS_KEY: &str = "manifests.yaml";
/// Field manager of every object the bootstrapper writes into a runtime cluster.
pub const FIELD_MANAGER: &str = "kim-bootstrapper";
/// Label whose value tells an installed bootstrapper version from the wanted one.
pub const VERSION_LABEL: &str = "app.kubernetes.io/version";
/// Namespace for namespaced manifests that name none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The `--runtime-bootstrapper-*` settings, with upstream's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `--runtime-bootstrapper-enabled` (default off).
    pub enabled: bool,
    /// `--runtime-bootstrapper-manifests-config-map-name`.
    pub manifests_config_map_name: String,
    /// `--runtime-bootstrapper-kcp-config-name`.
    pub kcp_config_name: String,
    /// `--runtime-bootstrapper-kcp-pull-secret-name` (empty: no pull secret is copied).
    pub kcp_pull_secret_name: String,
    /// `--runtime-bootstrapper-kcp-cluster-trust-bundle` (empty: none is copied).
    pub kcp_cluster_trust_bundle: String,
    /// `--runtime-bootstrapper-skr-config-name`.
    pub skr_config_name: String,
    /// `--runtime-bootstrapper-skr-pull-secret-name`.
    pub skr_pull_secret_name: String,
    /// `--runtime-bootstrapper-skr-cluster-trust-bundle`.
    pub skr_cluster_trust_bundle: String,
    /// `--runtime-bootstrapper-skr-namespace`.
    pub skr_namespace: String,
    /// `--runtime-bootstrapper-skr-deployment-name`.
    pub skr_deployment_name: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            enabled: false,
            manifests_config_map_name: "runtime-bootstrapper-manifests".into(),
            kcp_config_name: "rt-bootstrapper-config".into(),
            kcp_pull_secret_name: String::new(),
            kcp_cluster_trust_bundle: String::new(),
            skr_config_name: "rt-bootstrapper-config".into(),
            skr_pull_secret_name: "registry-credentials".into(),
            skr_cluster_trust_bundle: String::new(),
            skr_namespace: "kyma-system".into(),
            skr_deployment_name: "rt-bootstrapper-controller-manager".into(),
        }
    }
}

/// A KCP object whose change re-reconciles every Runtime (the config reload watcher).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Watched {
    /// A ConfigMap in [`KCP_NAMESPACE`].
    ConfigMap(String),
    /// A Secret in [`KCP_NAMESPACE`].
    Secret(String),
    /// A ClusterTrustBundle (cluster-scoped).
    ClusterTrustBundle(String),
}

impl Settings {
    /// The KCP objects the bootstrapper depends on: none when it is off; the optional pull
    /// Secret and ClusterTrustBundle only when named.
    pub fn watched(&self) -> Vec<Watched> {
        if !self.enabled {
            return Vec::new();
        }
        let mut out = vec![
            Watched::ConfigMap(self.kcp_config_name.clone()),
            Watched::ConfigMap(self.manifests_config_map_name.clone()),
        ];
        if !self.kcp_cluster_trust_bundle.is_empty() {
            out.push(Watched::ClusterTrustBundle(
                self.kcp_cluster_trust_bundle.clone(),
            ));
        }
        if !self.kcp_pull_secret_name.is_empty() {
            out.push(Watched::Secret(self.kcp_pull_secret_name.clone()));
        }
        out
    }
}

/// The manifests as objects, in their order; documents without a `kind` are skipped.
pub fn parse_manifests(text: &str) -> Result<Vec<Value>, ManifestError> {
    let mut out = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let v = Value::deserialize(doc).map_err(|e| ManifestError::Yaml {
            document: i,
            message: e.to_string(),
        })?;
        if v.get("kind")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            continue;
        }
        if v.pointer("/metadata/name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(ManifestError::NoName {
                document: i,
                kind: v["kind"].as_str().unwrap_or_default().to_owned(),
            });
        }
        out.push(v);
    }
    Ok(out)
}

/// The manifests cannot be used. Messages carry no object content (a manifest may hold
/// credentials).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ManifestError {
    /// A document is not YAML.
    #[error("manifest document {document}: {message}")]
    Yaml {
        /// Index of the document.
        document: usize,
        /// The parser's message.
        message: String,
    },
    /// An object without `metadata.name`.
    #[error("manifest document {document}: {kind} without metadata.name")]
    NoName {
        /// Index of the document.
        document: usize,
        /// Its kind.
        kind: String,
    },
}

/// Where the installation stands, read from the bootstrapper Deployment in the runtime cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// No Deployment: the manifests are to be applied.
    NotStarted,
    /// The Deployment is starting (progressing, or not yet looked at by the deployment
    /// controller).
    InProgress,
    /// Ready, of the wanted version.
    Ready,
    /// Not ready, and the deployment controller reports `Progressing=False` (its progress
    /// deadline passed).
    Failed,
    /// Ready, of another version than the manifests': the manifests are to be applied.
    UpgradeNeeded,
}

/// The status for the Deployment found (`None`: not there) and the wanted manifests.
pub fn status(deployment: Option<&Value>, manifests: &[Value]) -> Status {
    let Some(dep) = deployment else {
        return Status::NotStarted;
    };
    let cond_true = |t: &str| {
        dep.pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == t && c["status"] == "True")
    };
    let wanted_replicas = dep
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let ready_replicas = dep
        .pointer("/status/readyReplicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if ready_replicas >= wanted_replicas && cond_true("Available") {
        let version = |d: &Value| {
            d.pointer("/metadata/labels")
                .and_then(|l| l.get(VERSION_LABEL))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let wanted = manifests
            .iter()
            .find(|m| m["kind"] == "Deployment")
            .map(version)
            .unwrap_or_default();
        return if wanted == version(dep) {
            Status::Ready
        } else {
            Status::UpgradeNeeded
        };
    }
    // Failed only once the deployment controller says so (its progress deadline passed): a
    // Deployment it has not looked at yet has no conditions and is still starting.
    let progress_stopped = dep
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Progressing" && c["status"] == "False");
    if progress_stopped {
        Status::Failed
    } else {
        Status::InProgress
    }
}

/// The `RuntimeBootstrapperReady` condition for a status and whether the apply (when one was
/// due) failed: (condition type, status, reason, message), upstream's strings.
pub fn condition_for(
    status: Status,
    apply_failed: bool,
) -> (&'static str, &'static str, &'static str, &'static str) {
    let c = condition::RUNTIME_BOOTSTRAPPER_READY;
    match (status, apply_failed) {
        (Status::NotStarted, true) => (
            c,
            "False",
            reason::RUNTIME_BOOTSTRAPPER_INSTALLATION_FAILED,
            "Runtime bootstrapper installation failed",
        ),
        (Status::NotStarted | Status::InProgress, _) => (
            c,
            "False",
            reason::RUNTIME_BOOTSTRAPPER_INSTALLATION_IN_PROGRESS,
            "Runtime bootstrapper installation in progress",
        ),
        (Status::UpgradeNeeded, true) => (
            c,
            "False",
            reason::RUNTIME_BOOTSTRAPPER_UPGRADE_FAILED,
            "Runtime bootstrapper upgrade failed",
        ),
        (Status::UpgradeNeeded, false) => (
            c,
            "False",
            reason::RUNTIME_BOOTSTRAPPER_UPGRADE_IN_PROGRESS,
            "Runtime bootstrapper upgrade in progress",
        ),
        (Status::Failed, _) => (
            c,
            "False",
            reason::RUNTIME_BOOTSTRAPPER_INSTALLATION_FAILED,
            "Runtime bootstrapper installation failed",
        ),
        (Status::Ready, _) => (
            c,
            "True",
            reason::RUNTIME_BOOTSTRAPPER_CONFIGURED,
            "Runtime bootstrapper installation completed",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MANIFESTS: &str = "\
apiVersion: v1
kind: ServiceAccount
metadata: {name: rtb, namespace: kyma-system}
---
# a comment only
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: rt-bootstrapper-controller-manager
  namespace: kyma-system
  labels: {app.kubernetes.io/version: '1.2.0'}
";

    fn deployment(version: &str, ready: i64, available: &str, progressing: &str) -> Value {
        json!({"metadata": {"labels": {VERSION_LABEL: version}},
               "spec": {"replicas": 1},
               "status": {"readyReplicas": ready, "conditions": [
                   {"type": "Available", "status": available},
                   {"type": "Progressing", "status": progressing}]}})
    }

    #[test]
    fn manifests_are_split_into_objects_skipping_empty_documents() {
        let m = parse_manifests(MANIFESTS).expect("parses");
        let kinds: Vec<&str> = m.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(kinds, ["ServiceAccount", "Deployment"]);
        assert_eq!(
            parse_manifests("kind: ConfigMap\nmetadata: {}\n"),
            Err(ManifestError::NoName {
                document: 0,
                kind: "ConfigMap".into()
            })
        );
        assert!(matches!(
            parse_manifests("kind: [\n"),
            Err(ManifestError::Yaml { .. })
        ));
    }

    #[test]
    fn status_follows_the_deployment_and_the_wanted_version() {
        let m = parse_manifests(MANIFESTS).expect("parses");
        assert_eq!(status(None, &m), Status::NotStarted);
        assert_eq!(
            status(Some(&deployment("1.2.0", 1, "True", "True")), &m),
            Status::Ready
        );
        assert_eq!(
            status(Some(&deployment("1.1.0", 1, "True", "True")), &m),
            Status::UpgradeNeeded
        );
        assert_eq!(
            status(Some(&deployment("1.2.0", 0, "False", "True")), &m),
            Status::InProgress
        );
        assert_eq!(
            status(Some(&deployment("1.2.0", 0, "False", "False")), &m),
            Status::Failed
        );
        assert_eq!(
            status(Some(&json!({"metadata": {}})), &m),
            Status::InProgress
        );
    }

    #[test]
    fn watched_objects_follow_the_flags() {
        let mut s = Settings::default();
        assert!(s.watched().is_empty());
        s.enabled = true;
        assert_eq!(
            s.watched(),
            [
                Watched::ConfigMap("rt-bootstrapper-config".into()),
                Watched::ConfigMap("runtime-bootstrapper-manifests".into())
            ]
        );
        s.kcp_pull_secret_name = "pull".into();
        s.kcp_cluster_trust_bundle = "ctb".into();
        assert_eq!(s.watched().len(), 4);
    }

    #[test]
    fn conditions_carry_upstream_reasons() {
        assert_eq!(
            condition_for(Status::Ready, false),
            (
                "RuntimeBootstrapperReady",
                "True",
                "RuntimeBootstrapperConfigured",
                "Runtime bootstrapper installation completed"
            )
        );
        assert_eq!(
            condition_for(Status::UpgradeNeeded, true).2,
            "RuntimeBootstrapperUpgradeFailed"
        );
        assert_eq!(
            condition_for(Status::NotStarted, false).2,
            "RuntimeBootstrapperInstallationInProgress"
        );
    }
}
