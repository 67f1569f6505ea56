//! `Project` (`core.gardener.cloud/v1beta1`, cluster-scoped): owns the namespace
//! `garden-<name>` the shoots live in.

use k8s_openapi::api::rbac::v1::Subject;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// `spec` of a Project.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "core.gardener.cloud",
    version = "v1beta1",
    kind = "Project",
    status = "ProjectStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ProjectSpec {
    /// Human-readable description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Members and their roles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<ProjectMember>>,
    /// The project namespace, `garden-<name>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Owner of the project.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<Subject>,
    /// Purpose of the project.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
}

/// `spec.members[]`: an RBAC subject with project roles.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ProjectMember {
    /// API group of the subject.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// `User`, `Group` or `ServiceAccount`.
    pub kind: String,
    /// Name of the subject.
    pub name: String,
    /// Namespace of a ServiceAccount subject.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Primary role, for example `admin`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Further roles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<String>>,
}

/// `status` of a Project.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ProjectStatus {
    /// The generation the controller last acted on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Pending`, `Ready`, `Failed` or `Terminating`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}
