//! The kubeconfig Secret of a GardenerCluster, as the reconciler applies it. Pure.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kim_shared::api::GardenerCluster;
use kim_shared::names;
use kube::Resource;

use super::rotation::{SecretState, format_last_sync};

/// What the written kubeconfig carries besides itself.
#[derive(Debug, Default, Clone, Copy)]
pub struct Issued<'a> {
    /// When Gardener said it expires.
    pub valid_until: Option<Timestamp>,
    /// The GardenerCluster `resourceVersion` of the forced rotation it serves.
    pub force_served: Option<&'a str>,
}

/// The annotation `key` of `secret`.
pub fn annotation<'a>(secret: Option<&'a Secret>, key: &str) -> Option<&'a str> {
    secret?
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// [`names::ANNOTATION_VALID_UNTIL`] of `secret`, when it reads.
pub fn valid_until(secret: Option<&Secret>) -> Option<Timestamp> {
    annotation(secret, names::ANNOTATION_VALID_UNTIL)?
        .parse()
        .ok()
}

/// Name, namespace and data key of the Secret, from `spec.kubeconfig.secret`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretLocation {
    /// Secret name (`kubeconfig-<runtime-id>` for clusters KIM creates).
    pub name: String,
    /// Secret namespace.
    pub namespace: String,
    /// Data key (`config`).
    pub key: String,
}

impl SecretLocation {
    /// Reads the location from the GardenerCluster spec.
    pub fn of(gc: &GardenerCluster) -> Self {
        let s = &gc.spec.kubeconfig.secret;
        Self {
            name: s.name.clone(),
            namespace: s.namespace.clone(),
            key: s.key.clone(),
        }
    }
}

/// What the reconciler knows about an existing Secret (`None`: there is none).
pub fn state<'a>(secret: Option<&'a Secret>, key: &str) -> SecretState<'a> {
    let Some(secret) = secret else {
        return SecretState::Missing;
    };
    let has_key = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .is_some_and(|v| !v.0.is_empty());
    if !has_key {
        return SecretState::KeyMissing;
    }
    SecretState::Present {
        last_sync: secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(names::ANNOTATION_LAST_SYNC))
            .map(String::as_str),
    }
}

/// The Secret to apply: upstream's labels (every GardenerCluster label plus managed-by and
/// cluster-name), the last-sync annotation, the kubeconfig under the spec's key, and an owner
/// reference to the GardenerCluster when both live in one namespace (Kubernetes would treat a
/// cross-namespace owner as missing and collect the Secret at once).
pub fn desired(
    gc: &GardenerCluster,
    kubeconfig: Vec<u8>,
    now: Timestamp,
    issued: Issued<'_>,
) -> Secret {
    let loc = SecretLocation::of(gc);
    let mut labels: BTreeMap<String, String> = gc.metadata.labels.clone().unwrap_or_default();
    labels.insert(
        names::LABEL_MANAGED_BY.to_owned(),
        names::MANAGED_BY_INFRASTRUCTURE_MANAGER.to_owned(),
    );
    labels.insert(
        names::LABEL_CLUSTER_NAME.to_owned(),
        gc.metadata.name.clone().unwrap_or_default(),
    );
    let mut annotations = BTreeMap::from([(
        names::ANNOTATION_LAST_SYNC.to_owned(),
        format_last_sync(now),
    )]);
    if let Some(until) = issued.valid_until {
        annotations.insert(
            names::ANNOTATION_VALID_UNTIL.to_owned(),
            format_last_sync(until),
        );
    }
    if let Some(rv) = issued.force_served {
        annotations.insert(names::ANNOTATION_FORCE_SERVED.to_owned(), rv.to_owned());
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(loc.name),
            namespace: Some(loc.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: owner_reference(gc, &loc.namespace).map(|o| vec![o]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(loc.key, ByteString(kubeconfig))])),
        type_: Some("Opaque".to_owned()),
        ..Default::default()
    }
}

/// The owner reference to `gc`, if a Secret in `secret_namespace` may carry it.
pub fn owner_reference(gc: &GardenerCluster, secret_namespace: &str) -> Option<OwnerReference> {
    if gc.metadata.namespace.as_deref() != Some(secret_namespace) {
        return None;
    }
    let mut owner = gc.controller_owner_ref(&())?;
    // Blocking the owner's deletion would need extra RBAC and buys nothing: our finalizer
    // already deletes the Secret first.
    owner.block_owner_deletion = None;
    Some(owner)
}

/// True when the Secret was written for this GardenerCluster, by this controller or by
/// upstream KIM, so writing, adopting and deleting it is ours to do: it carries the managed-by
/// label, neither another GardenerCluster nor any other controller (a RuntimeAccess, whose
/// kubeconfig Secrets carry the same labels) owns it, and it names this GardenerCluster by owner
/// reference, by `cluster-name` label or (as upstream wrote them) by the runtime-id label of
/// this GardenerCluster. Any other Secret a GardenerCluster names (credentials, certificates,
/// another runtime's kubeconfig) is left alone. Pure.
pub fn belongs_to(secret: &Secret, gc: &GardenerCluster) -> bool {
    let labels = secret.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k));
    let managed = label(names::LABEL_MANAGED_BY).map(String::as_str)
        == Some(names::MANAGED_BY_INFRASTRUCTURE_MANAGER);
    let mut owners = secret.metadata.owner_references.iter().flatten();
    let other_cluster = owners.clone().any(|o| {
        (o.kind == "GardenerCluster" || o.controller == Some(true))
            && Some(&o.uid) != gc.metadata.uid.as_ref()
    });
    let by_owner = owners.any(|o| Some(&o.uid) == gc.metadata.uid.as_ref());
    let by_name = label(names::LABEL_CLUSTER_NAME).is_some()
        && label(names::LABEL_CLUSTER_NAME) == gc.metadata.name.as_ref();
    let gc_runtime = gc
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(names::LABEL_RUNTIME_ID));
    let by_runtime = gc_runtime.is_some() && label(names::LABEL_RUNTIME_ID) == gc_runtime;
    managed && !other_cluster && (by_owner || by_name || by_runtime)
}

/// `runtimeId` and `shoot` for the metrics, from the Secret's (copied) labels.
pub fn metric_ids(labels: Option<&BTreeMap<String, String>>) -> Option<(String, String)> {
    let labels = labels?;
    let runtime_id = labels.get(names::LABEL_RUNTIME_ID)?;
    let shoot = labels
        .get(names::LABEL_SHOOT_NAME)
        .cloned()
        .unwrap_or_default();
    Some((runtime_id.clone(), shoot))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kim_shared::api::GardenerClusterSpec;
    use kim_shared::api::gardener_cluster::{Kubeconfig, SecretKeyRef, ShootReference};

    fn cluster(secret_namespace: &str) -> GardenerCluster {
        let mut gc = GardenerCluster::new(
            "rt-1",
            GardenerClusterSpec {
                kubeconfig: Kubeconfig {
                    secret: SecretKeyRef {
                        key: "config".into(),
                        name: "kubeconfig-rt-1".into(),
                        namespace: secret_namespace.into(),
                    },
                },
                shoot: ShootReference { name: "s1".into() },
            },
        );
        gc.metadata.namespace = Some("kcp-system".into());
        gc.metadata.uid = Some("uid-1".into());
        gc.metadata.labels = Some(BTreeMap::from([
            (names::LABEL_RUNTIME_ID.to_owned(), "rt-1".to_owned()),
            (names::LABEL_SHOOT_NAME.to_owned(), "s1".to_owned()),
        ]));
        gc
    }

    fn now() -> Timestamp {
        "2026-01-01T00:00:00.5Z".parse().unwrap()
    }

    #[test]
    fn secret_carries_upstream_labels_annotation_key_and_owner() {
        let s = desired(
            &cluster("kcp-system"),
            b"kubeconfig".to_vec(),
            now(),
            Issued::default(),
        );
        let labels = s.metadata.labels.clone().unwrap();
        assert_eq!(labels[names::LABEL_MANAGED_BY], "infrastructure-manager");
        assert_eq!(labels[names::LABEL_CLUSTER_NAME], "rt-1");
        assert_eq!(labels[names::LABEL_SHOOT_NAME], "s1");
        assert_eq!(
            s.metadata.annotations.as_ref().unwrap()[names::ANNOTATION_LAST_SYNC],
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(s.data.as_ref().unwrap()["config"].0, b"kubeconfig");
        let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("GardenerCluster", "uid-1")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(
            metric_ids(s.metadata.labels.as_ref()),
            Some(("rt-1".into(), "s1".into()))
        );
    }

    #[test]
    fn no_owner_reference_across_namespaces() {
        let s = desired(&cluster("other"), b"k".to_vec(), now(), Issued::default());
        assert_eq!(s.metadata.owner_references, None);
    }

    #[test]
    fn state_reads_key_and_last_sync() {
        let gc = cluster("kcp-system");
        let mut s = desired(&gc, b"k".to_vec(), now(), Issued::default());
        assert!(matches!(
            state(Some(&s), "config"),
            SecretState::Present { last_sync: Some(_) }
        ));
        assert_eq!(state(Some(&s), "other"), SecretState::KeyMissing);
        assert_eq!(state(None, "config"), SecretState::Missing);
        assert!(belongs_to(&s, &gc));
        s.metadata.labels = None;
        s.metadata.owner_references = None;
        assert!(!belongs_to(&s, &gc));
    }

    fn labelled(labels: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn only_kubeconfig_secrets_of_this_cluster_belong_to_it() {
        let gc = cluster("kcp-system");
        let managed = (
            names::LABEL_MANAGED_BY,
            names::MANAGED_BY_INFRASTRUCTURE_MANAGER,
        );
        // Upstream's Secret: managed-by and the runtime-id, no owner.
        assert!(belongs_to(
            &labelled(&[managed, (names::LABEL_RUNTIME_ID, "rt-1")]),
            &gc
        ));
        assert!(belongs_to(
            &labelled(&[managed, (names::LABEL_CLUSTER_NAME, "rt-1")]),
            &gc
        ));
        // Anything else of the namespace: credentials, certificates, another runtime's.
        assert!(!belongs_to(&labelled(&[]), &gc));
        assert!(
            !belongs_to(&labelled(&[(names::LABEL_RUNTIME_ID, "rt-1")]), &gc),
            "no managed-by"
        );
        assert!(!belongs_to(
            &labelled(&[managed, (names::LABEL_RUNTIME_ID, "rt-2")]),
            &gc
        ));
        assert!(!belongs_to(&labelled(&[managed]), &gc));
        // Owned by another GardenerCluster: never, whatever the labels say.
        let mut theirs = labelled(&[managed, (names::LABEL_RUNTIME_ID, "rt-1")]);
        theirs.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "infrastructuremanager.kyma-project.io/v1".into(),
            kind: "GardenerCluster".into(),
            name: "rt-2".into(),
            uid: "uid-2".into(),
            ..Default::default()
        }]);
        assert!(!belongs_to(&theirs, &gc));
        // A RuntimeAccess's kubeconfig Secret of the same runtime: its controller is not ours.
        let mut access = labelled(&[managed, (names::LABEL_RUNTIME_ID, "rt-1")]);
        access.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "infrastructuremanager.kyma-project.io/v1".into(),
            kind: "RuntimeAccess".into(),
            name: "klm".into(),
            uid: "uid-ra".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        assert!(!belongs_to(&access, &gc));
        // Ours by owner reference, next to another kind of owner.
        let mut ours = labelled(&[managed]);
        ours.metadata.owner_references = Some(vec![
            OwnerReference {
                kind: "ConfigMap".into(),
                uid: "cm".into(),
                ..Default::default()
            },
            owner_reference(&gc, "kcp-system").unwrap(),
        ]);
        assert!(belongs_to(&ours, &gc));
    }
}
