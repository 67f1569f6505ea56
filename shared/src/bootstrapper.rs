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

/// The manifests of the runtime bootstrapper, in the order they are applied, and the version
/// its Deployment is to have.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifests {
    /// The objects as written, but the bootstrapper Deployment last: an apply that fails part
    /// way leaves the Deployment missing or at its former version, so the next pass applies
    /// everything again instead of judging an installation that is not complete.
    pub objects: Vec<Value>,
    /// Its [`VERSION_LABEL`] (empty without one).
    pub version: String,
}

impl Manifests {
    /// `text` split into objects ([`parse_manifests`]); the Deployment the installation is
    /// judged by is `name` in `namespace` (a namespaced object without a namespace is applied
    /// into [`DEFAULT_NAMESPACE`]).
    pub fn parse(text: &str, namespace: &str, name: &str) -> Result<Self, ManifestError> {
        let mut objects = parse_manifests(text)?;
        let is_it = |o: &Value| {
            o["kind"] == "Deployment"
                && o.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
                && o.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .unwrap_or(DEFAULT_NAMESPACE)
                    == namespace
        };
        let Some(at) = objects.iter().position(is_it) else {
            return Err(ManifestError::NoDeployment {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            });
        };
        let deployment = objects.remove(at);
        let version = version_of(&deployment).to_owned();
        objects.push(deployment);
        Ok(Self { objects, version })
    }
}

/// An object's [`VERSION_LABEL`] (empty without one).
fn version_of(obj: &Value) -> &str {
    obj.pointer("/metadata/labels")
        .and_then(|l| l.get(VERSION_LABEL))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The manifests cannot be used. Messages carry no object content (a manifest may hold
/// credentials).
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
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
    /// No Deployment of the name and namespace the installation is judged by.
    #[error(
        "no Deployment {namespace}/{name} (--runtime-bootstrapper-skr-namespace and --runtime-bootstrapper-skr-deployment-name name the Deployment whose readiness and version the installation is judged by)"
    )]
    NoDeployment {
        /// `--runtime-bootstrapper-skr-namespace`.
        namespace: String,
        /// `--runtime-bootstrapper-skr-deployment-name`.
        name: String,
    },
}

/// Where the installation stands, read from the bootstrapper Deployment in the runtime cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// No Deployment: the manifests are to be applied.
    NotStarted,
    /// Of the wanted version, and its rollout is under way (or not yet looked at by the
    /// deployment controller).
    InProgress,
    /// Of the wanted version, rolled out and available.
    Ready,
    /// Of the wanted version, not rolled out, and the deployment controller reports
    /// `Progressing=False` (its progress deadline passed).
    Failed,
    /// Of another version than the manifests', whatever its state: the manifests are to be
    /// applied (also over a failed installation: new manifests are how it is repaired).
    UpgradeNeeded,
}

/// The status for the Deployment found (`None`: not there) and the version the manifests give
/// it ([`Manifests::version`]).
pub fn status(deployment: Option<&Value>, wanted_version: &str) -> Status {
    let Some(dep) = deployment else {
        return Status::NotStarted;
    };
    if version_of(dep) != wanted_version {
        return Status::UpgradeNeeded;
    }
    if rolled_out(dep) {
        return Status::Ready;
    }
    // Failed only once the deployment controller says so (its progress deadline passed) of
    // the current spec: a Deployment it has not looked at yet has no conditions and is still
    // starting, and one just applied over a failed one still carries the old verdict.
    if has_condition(dep, "Progressing", "False") && spec_observed(dep) {
        Status::Failed
    } else {
        Status::InProgress
    }
}

/// The Deployment's integer at `path`.
fn int(dep: &Value, path: &str) -> Option<i64> {
    dep.pointer(path).and_then(Value::as_i64)
}

/// Whether the Deployment's condition `type_` has status `status`.
fn has_condition(dep: &Value, type_: &str, status: &str) -> bool {
    dep.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == type_ && c["status"] == status)
}

/// The deployment controller has seen the Deployment's current spec.
fn spec_observed(dep: &Value) -> bool {
    int(dep, "/status/observedGeneration").unwrap_or(0)
        >= int(dep, "/metadata/generation").unwrap_or(0)
}

/// The deployment controller has rolled out the Deployment's current spec: it has seen the
/// spec (`observedGeneration`), every replica runs the current template and is ready, no
/// replica of an older template is left, and the Deployment is `Available`. These are the
/// checks of `kubectl rollout status`; readiness alone would count the old replicas of a
/// Deployment just changed.
fn rolled_out(dep: &Value) -> bool {
    let wanted = int(dep, "/spec/replicas").unwrap_or(1);
    let updated = int(dep, "/status/updatedReplicas").unwrap_or(0);
    spec_observed(dep)
        && updated >= wanted
        && int(dep, "/status/readyReplicas").unwrap_or(0) >= wanted
        && int(dep, "/status/replicas").unwrap_or(0) <= updated
        && has_condition(dep, "Available", "True")
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

    /// A Deployment of `version` at generation 2 with `ready` replicas of the one wanted, as
    /// the deployment controller reports it once it has seen generation `observed`.
    fn deployment(
        version: &str,
        ready: i64,
        observed: i64,
        available: &str,
        progressing: &str,
    ) -> Value {
        json!({"metadata": {"generation": 2, "labels": {VERSION_LABEL: version}},
               "spec": {"replicas": 1},
               "status": {"observedGeneration": observed, "replicas": 1, "updatedReplicas": ready,
                   "readyReplicas": ready, "conditions": [
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

    /// The bootstrapper Deployment is the one named, applied last; its version is the wanted
    /// one.
    #[test]
    fn the_named_deployment_is_applied_last() {
        let text = format!(
            "{MANIFESTS}---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: helper, namespace: kyma-system, labels: {{app.kubernetes.io/version: '9'}}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: rtb-role}}
"
        );
        let name = "rt-bootstrapper-controller-manager";
        let m = Manifests::parse(&text, "kyma-system", name).expect("holds it");
        let names: Vec<&str> = m
            .objects
            .iter()
            .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
            .collect();
        assert_eq!(names, ["rtb", "helper", "rtb-role", name]);
        assert_eq!(m.version, "1.2.0");
        // Another namespace, or none (applied into `default`), is another Deployment.
        let missing = ManifestError::NoDeployment {
            namespace: "kyma-system".into(),
            name: name.into(),
        };
        assert_eq!(
            Manifests::parse(
                &MANIFESTS.replace("  namespace: kyma-system\n", ""),
                "kyma-system",
                name
            ),
            Err(missing.clone())
        );
        assert_eq!(
            Manifests::parse(MANIFESTS, "kyma-system", "other"),
            Err(ManifestError::NoDeployment {
                namespace: "kyma-system".into(),
                name: "other".into(),
            })
        );
        assert_eq!(Manifests::parse("", "kyma-system", name), Err(missing));
        let default_ns = MANIFESTS.replace("  namespace: kyma-system\n", "");
        assert!(Manifests::parse(&default_ns, "default", name).is_ok());
    }

    #[test]
    fn status_follows_the_deployment_and_the_wanted_version() {
        assert_eq!(status(None, "1.2.0"), Status::NotStarted);
        assert_eq!(
            status(Some(&deployment("1.2.0", 1, 2, "True", "True")), "1.2.0"),
            Status::Ready
        );
        assert_eq!(
            status(Some(&deployment("1.1.0", 1, 2, "True", "True")), "1.2.0"),
            Status::UpgradeNeeded
        );
        assert_eq!(
            status(Some(&deployment("1.2.0", 0, 2, "False", "True")), "1.2.0"),
            Status::InProgress
        );
        assert_eq!(
            status(Some(&deployment("1.2.0", 0, 2, "False", "False")), "1.2.0"),
            Status::Failed
        );
        assert_eq!(
            status(Some(&json!({"metadata": {}})), ""),
            Status::InProgress
        );
        // A failed installation of another version is repaired by applying the new manifests.
        assert_eq!(
            status(Some(&deployment("1.1.0", 0, 2, "False", "False")), "1.2.0"),
            Status::UpgradeNeeded
        );
        // Applied over a failed one: the verdict is of the spec before.
        assert_eq!(
            status(Some(&deployment("1.2.0", 0, 1, "False", "False")), "1.2.0"),
            Status::InProgress
        );
        // Just applied: the old replicas are ready, but the deployment controller has not seen
        // the new spec, or not yet replaced them.
        assert_eq!(
            status(Some(&deployment("1.2.0", 1, 1, "True", "True")), "1.2.0"),
            Status::InProgress
        );
        let mut old_left = deployment("1.2.0", 1, 2, "True", "True");
        old_left["status"]["replicas"] = json!(2);
        assert_eq!(status(Some(&old_left), "1.2.0"), Status::InProgress);
        let mut not_updated = deployment("1.2.0", 1, 2, "True", "True");
        not_updated["status"]["updatedReplicas"] = json!(0);
        assert_eq!(status(Some(&not_updated), "1.2.0"), Status::InProgress);
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
