//! `kim-webhook`: the admission webhook of the infrastructure manager, laid out as
//! controller-runtime's admission package.
//!
//! A request flows: TLS accept ([`server::serve_tls`], certificate from
//! [`kim_certs::CertResolver`]) -> axum route -> body limit -> [`admission::mutate`] or
//! [`admission::validate`]: decode the `AdmissionReview` ([`decode`]), hand the request to the
//! type's [`defaulter::Defaulter`] or [`validator::Validator`] ([`kinds`]), answer
//! ([`response`]: allowed / denied with field causes / JSON patch / warnings / audit
//! annotations) -> one [`audit::AuditRecord`] -> metrics. [`request`] holds what they all
//! share.
#![forbid(unsafe_code)]

pub mod admission;
pub mod audit;
pub mod cli;
pub mod decode;
pub mod defaulter;
pub mod kinds;
pub mod metrics;
pub mod offline;
pub mod profiles;
pub mod request;
pub mod response;
pub mod run;
pub mod server;
pub mod validator;

use std::sync::Arc;

use axum::Router;
use kim_shared::api::runtime_access::RuntimeAccess;
use kim_shared::api::{GardenerCluster, Runtime};

use crate::server::{AppState, mutating_route, validating_route};

/// The `User-Agent` of this program's requests: API servers name the field manager of a
/// write that sets none after it, and their audit logs show it. kube sends none of its own.
pub const USER_AGENT: &str = concat!("kim-webhook/", env!("CARGO_PKG_VERSION"));

/// Adds [`USER_AGENT`] to the headers of `config`.
pub fn identify(config: &mut kube::Config) {
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
}

/// Every admission route of the webhook. Adding a type is a [`validator::Validator`] (and, for
/// defaults, a [`defaulter::Defaulter`]) impl in [`kinds`] and one line here.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/mutate/runtime", mutating_route::<Runtime>("Runtime"))
        .route("/validate/runtime", validating_route::<Runtime>("Runtime"))
        .route(
            "/validate/gardenercluster",
            validating_route::<GardenerCluster>("GardenerCluster"),
        )
        .route(
            "/mutate/runtimeaccess",
            mutating_route::<RuntimeAccess>("RuntimeAccess"),
        )
        .route(
            "/validate/runtimeaccess",
            validating_route::<RuntimeAccess>("RuntimeAccess"),
        )
}

#[cfg(test)]
mod tests {
    #[test]
    fn requests_name_the_webhook_as_their_user_agent() {
        let mut config = kube::Config::new("https://kcp.example".parse().expect("a URL"));
        super::identify(&mut config);
        let agents: Vec<_> = config
            .headers
            .iter()
            .filter(|(name, _)| name == http::header::USER_AGENT)
            .map(|(_, value)| value.to_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(
            agents,
            [format!("kim-webhook/{}", env!("CARGO_PKG_VERSION"))]
        );
    }
}
