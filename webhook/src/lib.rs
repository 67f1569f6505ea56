//! `kim-webhook`: the admission webhook of the infrastructure manager.
//!
//! A request flows: TLS accept ([`server::serve_tls`], certificate from
//! [`kim_certs::CertResolver`]) -> axum route -> body limit -> [`admission::admit`] (decode the
//! `AdmissionReview`, default or validate through the type's [`admission::Admitted`]) ->
//! response (allowed / denied with field causes / JSON patch / warnings / audit annotations)
//! -> one [`audit::AuditRecord`] -> metrics.
#![forbid(unsafe_code)]

pub mod admission;
pub mod audit;
pub mod cli;
pub mod kinds;
pub mod metrics;
pub mod offline;
pub mod patch;
pub mod review_sample;
pub mod run;
pub mod server;

use std::sync::Arc;

use axum::Router;
use kim_shared::api::runtime_access::RuntimeAccess;
use kim_shared::api::{GardenerCluster, Runtime};

use crate::admission::Mode;
use crate::server::{AppState, admission_route, noop_decode_route, noop_route, noop_spin_route};

/// Every admission route of the webhook. Adding a type is one [`admission::Admitted`] impl and
/// one line here.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route(
            "/mutate/runtime",
            admission_route::<Runtime>(Mode::Mutate, "Runtime"),
        )
        .route(
            "/validate/runtime",
            admission_route::<Runtime>(Mode::Validate, "Runtime"),
        )
        .route(
            "/validate/gardenercluster",
            admission_route::<GardenerCluster>(Mode::Validate, "GardenerCluster"),
        )
        .route(
            "/validate/runtimeaccess",
            admission_route::<RuntimeAccess>(Mode::Validate, "RuntimeAccess"),
        )
}

/// The benchmark's baseline, reference and calibration routes (`/noop`, `/noop/decode`,
/// `/noop/spin`): served only with `--benchmark-routes`, so a production webhook answers
/// nothing but admissions on its port.
pub fn benchmark_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/noop", noop_route())
        .route("/noop/decode", noop_decode_route())
        .route("/noop/spin", noop_spin_route())
}
