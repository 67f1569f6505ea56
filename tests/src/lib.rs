//! `kim-tests`: the real control plane for tests and the local environment (etcd,
//! kube-apiserver, the real gardener-apiserver, a shoot cluster), Gardener fixtures, the
//! Gardener simulator and helpers for end-to-end tests: the controller ([`controller`]) and the
//! webhook ([`webhook`]) run in the test process against that control plane.
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod bench;
pub mod controller;
pub mod faultproxy;
pub mod fixtures;
pub mod keb;
pub mod programs;
pub mod refusal;
pub mod simulator;
pub mod testenv;
pub mod watchdog;
pub mod webhook;
