//! `kim-webhook`.
#![forbid(unsafe_code)]
