//! One call to Gardener: `POST shoots/<name>/adminkubeconfig` (an `AdminKubeconfigRequest`;
//! nothing is stored, every call issues a fresh client certificate).
//! The kubeconfig authenticates as Gardener's admin identity for the requesting user
//! (`gardener.cloud:admin:<user>`), which is what the shoot's audit log shows.

use jiff::Timestamp;
use kim_shared::gardener::{AdminKubeconfigRequest, Shoot};
use kube::Api;
use kube::api::PostParams;

/// A freshly issued admin kubeconfig. Deliberately not `Debug`: it holds a private key.
pub struct IssuedKubeconfig {
    /// The kubeconfig YAML.
    pub kubeconfig: Vec<u8>,
    /// The certificate's NotAfter as Gardener reports it (it may cap the requested validity).
    pub expires: Option<Timestamp>,
}

/// Why no kubeconfig was issued. Messages never contain the response body.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// Gardener answered with an error (404 when the Shoot is gone).
    #[error("Gardener refused shoots/{shoot}/adminkubeconfig: {source}")]
    Refused {
        /// The shoot.
        shoot: String,
        /// The API error.
        source: kube::Error,
    },
    /// Gardener answered 201 without a kubeconfig.
    #[error("Gardener answered shoots/{shoot}/adminkubeconfig without status.kubeconfig")]
    Empty {
        /// The shoot.
        shoot: String,
    },
}

impl IssueError {
    /// True when the Shoot does not exist (nothing to retry until the spec changes).
    pub fn is_not_found(&self) -> bool {
        matches!(self, IssueError::Refused { source: kube::Error::Api(s), .. } if s.code == 404)
    }
}

/// Asks Gardener for an admin kubeconfig of `shoot` valid for `expiration_seconds`.
pub async fn issue_admin_kubeconfig(
    gardener: &kube::Client,
    namespace: &str,
    shoot: &str,
    expiration_seconds: i64,
) -> Result<IssuedKubeconfig, IssueError> {
    let shoots: Api<Shoot> = Api::namespaced(gardener.clone(), namespace);
    let request = AdminKubeconfigRequest::with_expiration(expiration_seconds);
    let answer: AdminKubeconfigRequest = shoots
        .create_subresource("adminkubeconfig", shoot, &PostParams::default(), &request)
        .await
        .map_err(|source| IssueError::Refused {
            shoot: shoot.to_owned(),
            source,
        })?;
    let status = answer.status.ok_or_else(|| IssueError::Empty {
        shoot: shoot.to_owned(),
    })?;
    let kubeconfig = status.kubeconfig.0;
    if kubeconfig.is_empty() {
        return Err(IssueError::Empty {
            shoot: shoot.to_owned(),
        });
    }
    Ok(IssuedKubeconfig {
        kubeconfig,
        expires: Some(status.expiration_timestamp.0),
    })
}
