//! The webhook (`kim_tests::webhook`) behind the real apiserver.

mod admission;
mod hardening;
mod keb_corpus;
mod rotation;
mod shutdown;
