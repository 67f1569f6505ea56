//! `kim-shared`: the API types of the infrastructure manager, the KIM configuration and the
//! pure core shared by the webhook and the controller. No I/O, no async, no clients.
#![forbid(unsafe_code)]

pub mod access;
pub mod api;
pub mod audit_log;
pub mod bootstrapper;
pub mod config;
pub mod convert;
pub mod crds;
pub mod defaults;
pub mod duration;
pub mod gardener;
pub mod names;
pub mod provisioning_info;
pub mod redact;
pub mod registry_cache;
pub mod validation;
