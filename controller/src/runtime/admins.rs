//! Administrators in the runtime cluster (upstream `sFnApplyClusterRoleBindings`): one
//! `cluster-admin` ClusterRoleBinding per administrator, labelled
//! `reconciler.kyma-project.io/managed-by=infrastructure-manager`. Legacy (`=reconciler`) and
//! ServiceAccount bindings are never removed.

use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kim_shared::names::{
    ADMIN_CRB_GENERATE_NAME, LABEL_RECONCILER_MANAGED_BY, MANAGED_BY_INFRASTRUCTURE_MANAGER,
};
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};

/// What to change so that exactly the administrators have a binding.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AdminPlan {
    /// Names of bindings to delete.
    pub remove: Vec<String>,
    /// Administrators to create a binding for.
    pub create: Vec<String>,
}

fn managed(crb: &ClusterRoleBinding) -> bool {
    crb.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_RECONCILER_MANAGED_BY))
        .is_some_and(|v| v == MANAGED_BY_INFRASTRUCTURE_MANAGER)
}

fn is_cluster_admin(crb: &ClusterRoleBinding) -> bool {
    // Both must hold for us to touch a binding; upstream's check skips a binding only when
    // both differ (docs/upstream-differences.md, "Administrator bindings").
    crb.role_ref.kind == "ClusterRole" && crb.role_ref.name == "cluster-admin"
}

/// Pure: compares the wanted administrators with the bindings in the cluster.
pub fn plan(admins: &[String], bindings: &[ClusterRoleBinding]) -> AdminPlan {
    let ours: Vec<&ClusterRoleBinding> = bindings.iter().filter(|b| managed(b)).collect();
    let remove = ours
        .iter()
        .filter(|b| is_cluster_admin(b))
        .filter(|b| {
            let subjects = b.subjects.as_deref().unwrap_or_default();
            subjects.iter().any(|s| s.kind == "User")
                && !subjects.iter().any(|s| admins.contains(&s.name))
        })
        .filter_map(|b| b.metadata.name.clone())
        .collect();
    let mut seen = std::collections::HashSet::new();
    let create: Vec<String> = admins
        .iter()
        // A blank name cannot be a binding's subject (the apiserver refuses it), and the
        // webhook admits it with a warning: skipped, so the other administrators still get
        // theirs.
        .filter(|a| !a.trim().is_empty())
        .filter(|a| {
            !ours.iter().any(|b| {
                b.subjects
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|s| &s.name == *a)
            })
        })
        .filter(|a| seen.insert(*a))
        .cloned()
        .collect();
    AdminPlan { remove, create }
}

/// The binding created for one administrator.
pub fn binding_for(admin: &str) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: ObjectMeta {
            generate_name: Some(ADMIN_CRB_GENERATE_NAME.to_owned()),
            labels: Some(
                [(
                    LABEL_RECONCILER_MANAGED_BY.to_owned(),
                    MANAGED_BY_INFRASTRUCTURE_MANAGER.to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "ClusterRole".to_owned(),
            name: "cluster-admin".to_owned(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "User".to_owned(),
            name: admin.to_owned(),
            namespace: None,
        }]),
    }
}

/// Applies the plan in the runtime cluster.
pub async fn apply(runtime_client: &Client, admins: &[String]) -> Result<(), kube::Error> {
    let api: Api<ClusterRoleBinding> = Api::all(runtime_client.clone());
    let selector = format!("{LABEL_RECONCILER_MANAGED_BY}={MANAGED_BY_INFRASTRUCTURE_MANAGER}");
    let existing = api.list(&ListParams::default().labels(&selector)).await?;
    let plan = plan(admins, &existing.items);
    for name in &plan.remove {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    for admin in &plan.create {
        api.create(&PostParams::default(), &binding_for(admin))
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crb(
        name: &str,
        label: Option<&str>,
        role: &str,
        subjects: &[(&str, &str)],
    ) -> ClusterRoleBinding {
        ClusterRoleBinding {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: label
                    .map(|v| [(LABEL_RECONCILER_MANAGED_BY.to_owned(), v.to_owned())].into()),
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "ClusterRole".into(),
                name: role.into(),
            },
            subjects: Some(
                subjects
                    .iter()
                    .map(|(k, n)| Subject {
                        kind: (*k).into(),
                        name: (*n).into(),
                        ..Default::default()
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn adds_missing_and_removes_former_admins_only() {
        let admins = vec!["a@x".to_string(), "b@x".to_string()];
        let existing = vec![
            crb(
                "admin-1",
                Some("infrastructure-manager"),
                "cluster-admin",
                &[("User", "a@x")],
            ),
            crb(
                "admin-2",
                Some("infrastructure-manager"),
                "cluster-admin",
                &[("User", "old@x")],
            ),
            crb(
                "legacy",
                Some("reconciler"),
                "cluster-admin",
                &[("User", "old@x")],
            ),
            crb(
                "sa",
                Some("infrastructure-manager"),
                "cluster-admin",
                &[("ServiceAccount", "robot")],
            ),
            crb(
                "view",
                Some("infrastructure-manager"),
                "view",
                &[("User", "old@x")],
            ),
        ];
        let p = plan(&admins, &existing);
        assert_eq!(p.remove, vec!["admin-2".to_string()]);
        assert_eq!(p.create, vec!["b@x".to_string()]);
    }

    #[test]
    fn blank_and_repeated_administrators_get_no_extra_binding() {
        let admins: Vec<String> = ["a@x", "", "  ", "b@x", "a@x"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(plan(&admins, &[]).create, ["a@x", "b@x"]);
        // No administrators at all: every cluster-admin binding of ours goes.
        let existing = vec![crb(
            "admin-1",
            Some(MANAGED_BY_INFRASTRUCTURE_MANAGER),
            "cluster-admin",
            &[("User", "a@x")],
        )];
        let none = plan(&[], &existing);
        assert_eq!(none.remove, ["admin-1"]);
        assert!(none.create.is_empty());
    }

    #[test]
    fn nothing_to_do_when_in_sync() {
        let admins = vec!["a@x".to_string()];
        let existing = vec![crb(
            "admin-1",
            Some("infrastructure-manager"),
            "cluster-admin",
            &[("User", "a@x")],
        )];
        assert_eq!(plan(&admins, &existing), AdminPlan::default());
    }

    #[test]
    fn binding_shape() {
        let b = binding_for("a@x");
        assert_eq!(b.metadata.generate_name.as_deref(), Some("admin-"));
        assert_eq!(b.role_ref.name, "cluster-admin");
        assert_eq!(b.subjects.unwrap()[0].kind, "User");
    }
}
