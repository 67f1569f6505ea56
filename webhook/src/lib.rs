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
pub mod metrics;
pub mod patch;
pub mod run;
pub mod server;
