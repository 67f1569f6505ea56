//! The webhook (`kim_tests::webhook`) behind the real apiserver.

mod admission;
mod agreement;
mod failures;
mod hardening;
mod keb_corpus;
mod legacy_registry_cache;
mod rotation;
mod shutdown;
