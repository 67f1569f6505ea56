//! `kim-crdgen <dir>`: writes the CustomResourceDefinitions generated from the kim-shared types
//! into `<dir>` (`make crds` passes `crds`), one `<group>_<plural>.yaml` per CRD, and removes
//! YAML files there that no type generates any more.
#![forbid(unsafe_code)]

use anyhow::{Context, bail};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let dir = match (args.next(), args.next()) {
        (Some(dir), None) => PathBuf::from(dir),
        _ => bail!("usage: kim-crdgen <output directory>   (for example: kim-crdgen crds)"),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;

    let files = kim_shared::crds::files()?;
    let wanted: BTreeSet<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
    for entry in
        std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))?
    {
        let path = entry?.path();
        let stale = path.extension().is_some_and(|e| e == "yaml")
            && path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !wanted.contains(n));
        if stale {
            std::fs::remove_file(&path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
            println!("removed {}", path.display());
        }
    }
    for (name, yaml) in &files {
        let path = dir.join(name);
        std::fs::write(&path, yaml).with_context(|| format!("cannot write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
