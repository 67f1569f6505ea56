//! `kim-tests`: the real control plane for tests and the local environment.
#![forbid(unsafe_code)]
