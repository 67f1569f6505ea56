//! `kim-controller`.
#![forbid(unsafe_code)]
