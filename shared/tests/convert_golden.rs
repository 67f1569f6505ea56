//! Golden tests: every sample Runtime of the repository (`config/samples/runtime-*.yaml`, shaped
//! as KEB writes them) converts, with the example configuration of `deploy/config`, to the
//! reviewed Shoot and structured-auth ConfigMap kept in `tests/golden/samples/<sample>.json`.
//!
//! `UPDATE_GOLDEN=1 cargo test -p kim-shared --test convert_golden` rewrites the files; review the
//! diff before committing it. The same check over upstream's samples is part of the
//! upstream-compatibility suite (`tests/upstream_compat/golden.rs`).

#[path = "golden_fixture/mod.rs"]
mod fixture;

use kim_shared::api::Runtime;

#[test]
fn sample_runtimes_convert_to_the_reviewed_shoots() {
    let dir = fixture::root().join("config/samples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "yaml")
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("runtime-"))
        })
        .collect();
    files.sort();
    assert!(
        files.len() >= 7,
        "expected the sample Runtimes in {}",
        dir.display()
    );
    let samples = files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let mut rt: Runtime = serde_yaml_ng::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            // As the controller sees it once stored.
            rt.metadata.generation = Some(1);
            let name = path
                .file_stem()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            (name, rt)
        })
        .collect();
    fixture::check(samples, &fixture::root().join("tests/golden/samples"));
}
