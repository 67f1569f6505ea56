//! Where the control-plane binaries are: `KIM_TESTENV_BIN_DIR`, else the cache directory that
//! `tests/bins/build.sh` fills (keyed by the versions in `tests/bins/versions.env`), with
//! `KUBEBUILDER_ASSETS` as a source of etcd and kube-apiserver.

use std::path::{Path, PathBuf};

const VERSIONS: &str = include_str!("../../bins/versions.env");

/// Paths of the binaries the environment runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// etcd.
    pub etcd: PathBuf,
    /// kube-apiserver.
    pub kube_apiserver: PathBuf,
    /// gardener-apiserver.
    pub gardener_apiserver: PathBuf,
    /// kubectl (same build as kube-apiserver), if present.
    pub kubectl: Option<PathBuf>,
}

/// The binaries are not there.
#[derive(Debug, thiserror::Error)]
#[error(
    "control-plane binaries missing: {missing} (looked in {searched}). Build them with \
     `make testenv-bins` (runs tests/bins/build.sh; the first build takes about 25 minutes on \
     2 cores, later runs are instant), or point KIM_TESTENV_BIN_DIR at a directory holding \
     etcd, kube-apiserver and gardener-apiserver"
)]
pub struct MissingBinaries {
    /// Comma-separated names.
    pub missing: String,
    /// Directories searched.
    pub searched: String,
}

/// Version of a component from `versions.env` (`K8S_VERSION`, `ETCD_VERSION`, `GARDENER_VERSION`).
pub fn version(key: &str) -> &'static str {
    VERSIONS
        .lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim())
        .unwrap_or("unknown")
}

/// The cache directory `build.sh` writes to.
pub fn cache_dir() -> PathBuf {
    let root = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    root.join("kim-testenv").join(format!(
        "k8s-{}-etcd-{}-gardener-{}",
        version("K8S_VERSION"),
        version("ETCD_VERSION"),
        version("GARDENER_VERSION")
    ))
}

/// The repository's `tests/bins/build.sh`.
pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bins/build.sh")
}

/// Finds all binaries, or says which are missing and how to build them.
pub fn find() -> Result<Binaries, MissingBinaries> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("KIM_TESTENV_BIN_DIR") {
        dirs.push(d.into());
    }
    dirs.push(cache_dir());
    if let Some(d) = std::env::var_os("KUBEBUILDER_ASSETS") {
        dirs.push(d.into());
    }
    let lookup = |name: &str| dirs.iter().map(|d| d.join(name)).find(|p| is_executable(p));
    let (etcd, kube_apiserver, gardener_apiserver) = (
        lookup("etcd"),
        lookup("kube-apiserver"),
        lookup("gardener-apiserver"),
    );
    let missing: Vec<&str> = [
        ("etcd", etcd.is_none()),
        ("kube-apiserver", kube_apiserver.is_none()),
        ("gardener-apiserver", gardener_apiserver.is_none()),
    ]
    .iter()
    .filter(|(_, m)| *m)
    .map(|(n, _)| *n)
    .collect();
    match (etcd, kube_apiserver, gardener_apiserver) {
        (Some(etcd), Some(kube_apiserver), Some(gardener_apiserver)) => Ok(Binaries {
            etcd,
            kube_apiserver,
            gardener_apiserver,
            kubectl: lookup("kubectl"),
        }),
        _ => Err(MissingBinaries {
            missing: missing.join(", "),
            searched: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_versions_env() {
        assert!(version("K8S_VERSION").starts_with("v1."));
        assert!(version("GARDENER_VERSION").starts_with("v1."));
        assert!(
            cache_dir()
                .to_string_lossy()
                .contains(version("ETCD_VERSION"))
        );
    }
}
