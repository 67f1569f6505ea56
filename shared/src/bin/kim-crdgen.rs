//! `kim-crdgen <dir>`: writes the CustomResourceDefinitions generated from the kim-shared types
//! into `<dir>` (`make crds` passes `crds`), one `<group>_<plural>.yaml` per CRD, and removes
//! YAML files there that no type generates any more.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// `what path: error`.
fn at(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> String {
    let path = path.display().to_string();
    move |e| format!("cannot {what} {path}: {e}")
}

fn main() -> Result<()> {
    let mut args = std::env::args_os().skip(1);
    let dir = match (args.next(), args.next()) {
        (Some(dir), None) => PathBuf::from(dir),
        _ => {
            return Err(
                "usage: kim-crdgen <output directory>   (for example: kim-crdgen crds)".into(),
            );
        }
    };
    std::fs::create_dir_all(&dir).map_err(at("create", &dir))?;

    let files = kim_shared::crds::files()?;
    let wanted: BTreeSet<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
    for entry in std::fs::read_dir(&dir).map_err(at("read", &dir))? {
        let path = entry?.path();
        let stale = path.extension().is_some_and(|e| e == "yaml")
            && path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !wanted.contains(n));
        if stale {
            std::fs::remove_file(&path).map_err(at("remove", &path))?;
            println!("removed {}", path.display());
        }
    }
    for (name, yaml) in &files {
        let path = dir.join(name);
        std::fs::write(&path, yaml).map_err(at("write", &path))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
