//! The manifests of `deploy/` against the real apiserver and the binaries' flag parsers.

mod manifests;
mod rbac;
mod rbac_webhook;
