//! The committed `crds/*.yaml` are exactly what the kim-shared types generate.
//! After changing a type, run `make crds` and commit the result.

use std::collections::BTreeMap;
use std::path::PathBuf;

fn crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds")
}

fn committed() -> BTreeMap<String, String> {
    let dir = crds_dir();
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; run `make crds`", dir.display()));
    entries
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| {
            let name = path
                .file_name()
                .expect("file name")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            (name, text)
        })
        .collect()
}

#[test]
fn committed_crds_match_the_types() {
    let generated: BTreeMap<String, String> = kim_shared::crds::files()
        .expect("CRDs render")
        .into_iter()
        .collect();
    let committed = committed();

    let generated_names: Vec<&String> = generated.keys().collect();
    let committed_names: Vec<&String> = committed.keys().collect();
    assert_eq!(
        committed_names, generated_names,
        "crds/ holds other files than the types generate; run `make crds`"
    );
    for (name, text) in &generated {
        pretty_assertions::assert_eq!(
            &committed[name],
            text,
            "crds/{name} differs from the types; run `make crds` and commit the result"
        );
    }
}

#[test]
fn committed_crds_parse_as_crds() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    for (name, text) in committed() {
        let crd: CustomResourceDefinition = serde_yaml_ng::from_str(&text)
            .unwrap_or_else(|e| panic!("crds/{name} is not a CRD: {e}"));
        assert_eq!(
            kim_shared::crds::file_name(&crd),
            name,
            "file name of {name}"
        );
    }
}
