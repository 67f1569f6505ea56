//! `kim-certs`: certificates of the admission webhook.
//!
//! One Secret holds the trusted CAs and the serving certificate; every replica reads it on a
//! short wall-clock tick ([`rotation::CertRotator`]), decides with the pure [`plan::plan`]
//! what is due, writes the result back with optimistic concurrency, loads the serving
//! certificate into a lock-free [`resolver::CertResolver`], and writes the caBundle into the
//! webhook configurations by server-side apply. A new CA joins the bundle and only signs once
//! it has been read back from every webhook's caBundle for the propagation time; an old CA
//! leaves the bundle only when it has expired.
#![forbid(unsafe_code)]

pub mod material;
mod pair;
pub mod plan;
pub mod policy;
pub mod resolver;
pub mod rotation;

pub use material::{CertMaterial, ServingNames};
pub use plan::{CertState, Plan, PropagationClock, Reason};
pub use policy::RotationPolicy;
pub use resolver::{
    CertResolver, ClientCaError, ServingKey, TlsMinVersion, server_config, server_config_for,
    server_config_with,
};
pub use rotation::{CertRotator, RotationConfig, RotationError, SyncOutcome};
