//! Installing CustomResourceDefinitions from a directory of YAML files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};

use super::{Result, TestEnvError, io_err, kube_err, wait};

/// Reads every CRD from the `*.yaml`/`*.yml` files of `dir` (multi-document files allowed;
/// other kinds are ignored). A missing directory yields no CRDs.
pub fn read_dir(dir: &Path) -> Result<Vec<CustomResourceDefinition>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io_err("reading", dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(io_err("reading", &f))?;
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let value = <serde_json::Value as serde::Deserialize>::deserialize(doc)
                .map_err(|e| TestEnvError::Other(format!("{}: invalid YAML: {e}", f.display())))?;
            if value.get("kind").and_then(|k| k.as_str()) != Some("CustomResourceDefinition") {
                continue;
            }
            let crd = serde_json::from_value(value).map_err(|e| {
                TestEnvError::Other(format!("{}: not a valid CRD: {e}", f.display()))
            })?;
            out.push(crd);
        }
    }
    Ok(out)
}

/// Applies all CRDs of `dir` and waits until each is Established.
pub async fn install_dir(client: &kube::Client, dir: &Path, timeout: Duration) -> Result<()> {
    install(client, &read_dir(dir)?, timeout).await
}

/// Applies the CRDs (server-side apply, so re-installing updates them) and waits until each is
/// Established and served.
pub async fn install(
    client: &kube::Client,
    crds: &[CustomResourceDefinition],
    timeout: Duration,
) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let mut crd = crd.clone();
        crd.metadata.managed_fields = None;
        crd.metadata.resource_version = None;
        api.patch(
            &name,
            &PatchParams::apply("kim-testenv").force(),
            &Patch::Apply(&crd),
        )
        .await
        .map_err(kube_err(format!("installing CRD {name}")))?;
    }
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let api = api.clone();
        wait::until(
            &format!("CRD {name} Established"),
            timeout,
            Duration::from_millis(50),
            || {
                let (api, name) = (api.clone(), name.clone());
                async move {
                    let c = api.get(&name).await.map_err(|e| e.to_string())?;
                    let established = c
                        .status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True");
                    if established {
                        Ok(())
                    } else {
                        Err(format!("{name} not Established yet").into())
                    }
                }
            },
        )
        .await?;
    }
    Ok(())
}
