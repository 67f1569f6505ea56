//! The golden-file check shared by the conversion goldens of the repository's samples
//! (`convert_golden`) and of upstream's samples (the upstream-compatibility suite, which includes
//! this file as a module of its own).
//!
//! `UPDATE_GOLDEN=1` rewrites the files instead of comparing; review the diff before committing.
#![allow(clippy::unwrap_used)]

use kim_shared::api::Runtime;
use kim_shared::config::{ConfigPaths, KimConfig};
use kim_shared::convert::{ConvertOptions, to_shoot, to_shoot_with};
use std::path::{Path, PathBuf};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The example configuration of `deploy/config`.
pub fn config() -> KimConfig {
    let path = root().join("deploy/config/converter_config.json");
    KimConfig::load(&ConfigPaths::new(&path))
        .unwrap_or_else(|e| panic!("example config {}: {e}", path.display()))
}

/// Converts each `(golden name, Runtime)` with the example configuration and compares the Shoot
/// and structured-auth ConfigMap with `<golden_dir>/<name>.json`.
pub fn check(samples: Vec<(String, Runtime)>, golden_dir: &Path) {
    check_with(samples, golden_dir, &config());
}

/// [`check`] with another configuration.
pub fn check_with(samples: Vec<(String, Runtime)>, golden_dir: &Path, cfg: &KimConfig) {
    check_with_options(samples, golden_dir, cfg, &ConvertOptions::default());
}

/// [`check_with`] with conversion options (flags and KCP inputs of the controller).
pub fn check_with_options(
    samples: Vec<(String, Runtime)>,
    golden_dir: &Path,
    cfg: &KimConfig,
    opts: &ConvertOptions,
) {
    assert!(!samples.is_empty(), "no sample to check");
    let mut mismatches = Vec::new();
    for (name, rt) in samples {
        let converted =
            to_shoot_with(&rt, cfg, None, opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!converted.workers_removed);
        if !matches_golden(&name, &converted, golden_dir) {
            mismatches.push(name);
        }
    }
    assert!(mismatches.is_empty(), "{mismatches:?}");
}

/// The update of a Shoot: `rt` is converted for create, that Shoot is taken as the live one,
/// and `rt` converted again over it with `opts` (upstream's patch converter); the result is
/// compared with `<golden_dir>/<name>.json`.
pub fn check_patch(
    name: &str,
    rt: &Runtime,
    cfg: &KimConfig,
    opts: &kim_shared::convert::ConvertOptions,
    golden_dir: &Path,
) {
    let created = to_shoot(rt, cfg, None).unwrap_or_else(|e| panic!("{name}: {e}"));
    let patched = kim_shared::convert::to_shoot_with(rt, cfg, Some(&created.shoot), opts)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(!patched.workers_removed);
    assert!(matches_golden(name, &patched, golden_dir), "{name}");
}

/// Writes (`UPDATE_GOLDEN`) or compares one golden; false when it differs.
fn matches_golden(
    name: &str,
    converted: &kim_shared::convert::Converted,
    golden_dir: &Path,
) -> bool {
    let actual = serde_json::json!({
        "shoot": converted.shoot,
        "structuredAuth": converted.structured_auth,
    });
    let text = serde_json::to_string_pretty(&actual).expect("serializable") + "\n";
    let golden = golden_dir.join(format!("{name}.json"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        assert!(
            std::env::var_os("CI").is_none(),
            "UPDATE_GOLDEN rewrites the golden files instead of comparing; not in CI"
        );
        eprintln!(
            "UPDATE_GOLDEN: {} rewritten, not compared",
            golden.display()
        );
        std::fs::create_dir_all(golden_dir).unwrap();
        std::fs::write(&golden, &text).unwrap_or_else(|e| panic!("{}: {e}", golden.display()));
        return true;
    }
    let expected = std::fs::read_to_string(&golden)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 creates it)", golden.display()));
    pretty_assertions::assert_eq!(
        expected,
        text,
        "{name}: conversion differs from {}",
        golden.display()
    );
    true
}
