//! The upstream-compatibility suite: our CRDs, types, defaults, validation and conversion held
//! against upstream KIM's own files (CRDs, samples, ADR examples, configuration test data).
//!
//! It reads them from `$KIM_UPSTREAM_DIR`, a folder holding `upstream/` (the 2025 baseline) and
//! `upstream-2026-07/` (upstream today); a relative value is taken from the repository root.
//! The target has `test = false`: a plain `cargo test` does not build it, `make test` runs it when
//! the variable is set and says in its last lines that it did not run when it is not.
#![allow(clippy::unwrap_used)]

// The fixtures of the kim-shared tests (`tests/core`); this suite uses a part of them.
#[allow(dead_code)]
#[path = "../core/validation_fixtures.rs"]
mod fixtures;

mod config;
mod crds;
mod golden;
mod samples;
mod validation;

use std::path::PathBuf;

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `$KIM_UPSTREAM_DIR/<folder>`. Panics naming the variable when it is unset and the path when
/// the folder is missing: this suite never passes without reading upstream's files.
pub fn upstream_folder(folder: &str) -> PathBuf {
    let Some(root) = std::env::var_os("KIM_UPSTREAM_DIR") else {
        panic!(
            "KIM_UPSTREAM_DIR is not set: point it at the folder holding upstream/ and \
             upstream-2026-07/ (make test does this when it is set; .ci/run sets it to the shared folder beside the checkout)"
        )
    };
    let dir = repo_root().join(root).join(folder);
    assert!(
        dir.is_dir(),
        "KIM_UPSTREAM_DIR: the folder {} is missing",
        dir.display()
    );
    dir
}

/// Upstream's 2025 baseline (`$KIM_UPSTREAM_DIR/upstream`).
pub fn baseline() -> PathBuf {
    upstream_folder("upstream")
}

/// The two upstream folders the samples are read from: the 2025 baseline and today.
pub const FOLDERS: [&str; 2] = ["upstream", "upstream-2026-07"];

/// Upstream today (`$KIM_UPSTREAM_DIR/upstream-2026-07`).
pub fn today() -> PathBuf {
    upstream_folder("upstream-2026-07")
}
