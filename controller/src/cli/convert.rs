//! `kim-controller convert`: prints the Shoot the controller would create for a Runtime, or
//! apply over a live Shoot, without touching any cluster (upstream's
//! `hack/patch-converter-runner`). Same conversion as the reconciler: `kim_shared::convert`.

use k8s_openapi::api::core::v1::ConfigMap;
use kim_shared::api::Runtime;
use kim_shared::config::{ConfigError, ConfigPaths, KimConfig};
use kim_shared::convert::{AclAddresses, ConvertError, ConvertOptions, to_shoot_with};
use kim_shared::gardener::Shoot;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The example configuration of `deploy/config`, built in: used when `--config` is not given.
const EXAMPLE_CONVERTER_CONFIG: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/config/converter_config.json"
));
const EXAMPLE_AUDIT_LOG_TENANTS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/config/audit_log_tenants.json"
));
const EXAMPLE_MAINTENANCE_WINDOWS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/config/maintenance_windows.json"
));

/// Flags of `kim-controller convert`.
#[derive(clap::Args, Debug, Clone)]
pub struct ConvertArgs {
    /// The Runtime (YAML or JSON, e.g. `kubectl get runtime -o yaml`); `-` reads stdin.
    #[arg(short = 'f', long = "filename", value_name = "RUNTIME.yaml")]
    pub runtime: PathBuf,

    /// The live Shoot (YAML or JSON, e.g. `kubectl get shoot -o yaml`): prints the Shoot the
    /// controller would apply over it instead of the one it would create.
    #[arg(long, value_name = "LIVE.yaml")]
    pub shoot: Option<PathBuf>,

    /// `converter_config.json`, or the directory holding it (the audit-log tenant and
    /// maintenance window files are named in it). Default: the example configuration of
    /// `deploy/config`, built into this program.
    #[arg(long, value_name = "DIR")]
    pub config: Option<PathBuf>,

    /// Fail when the Runtime's provider and region have no audit-log tenant (upstream's
    /// `--audit-log-mandatory`).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub audit_log_mandatory: bool,

    /// The API server ACL ConfigMap (YAML or JSON, e.g. `kubectl get configmap acl-ip-list
    /// -o yaml`): manages the `acl` extension with its operator CIDRs and KCP NAT address, as
    /// the controller does with `--api-server-acl-enabled`.
    #[arg(long, value_name = "CONFIGMAP.yaml")]
    pub acl_config_map: Option<PathBuf>,

    /// Manage the `shoot-networking-filter` extension (upstream's
    /// `--network-restriction-enabled`).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub network_restriction_enabled: bool,

    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Yaml)]
    pub output: Format,
}

/// How the objects are printed.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// YAML documents separated by `---`.
    Yaml,
    /// Pretty-printed JSON objects, one after the other.
    Json,
}

/// Why `convert` failed. Messages name the file and, for conversion errors, the Runtime field.
#[derive(Debug, thiserror::Error)]
pub enum ConvertCommandError {
    /// A file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is not a valid object of the expected kind.
    #[error("{path} is not a valid {kind}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// `Runtime` or `Shoot`.
        kind: &'static str,
        /// The parser's message, with the position.
        message: String,
    },
    /// The configuration is refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The Runtime cannot be converted.
    #[error("the Runtime cannot be converted: {0}")]
    Convert(#[from] ConvertError),
    /// Writing the output failed.
    #[error("cannot write the output: {0}")]
    Write(String),
}

/// Runs `convert`: the converted objects go to `out`, notes for the operator to `notes`.
pub fn execute(
    args: &ConvertArgs,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<(), ConvertCommandError> {
    let cfg = config(args.config.as_deref())?;
    let runtime: Runtime = read_object(&args.runtime, "Runtime")?;
    let live: Option<Shoot> = args
        .shoot
        .as_deref()
        .map(|p| read_object(p, "Shoot"))
        .transpose()?;
    let acl = match args.acl_config_map.as_deref() {
        Some(path) => {
            let cm: ConfigMap = read_object(path, "ConfigMap")?;
            let addresses = AclAddresses::from_config_map_data(&cm.data.unwrap_or_default())
                .map_err(|message| ConvertCommandError::Parse {
                    path: path.display().to_string(),
                    kind: "API server ACL ConfigMap",
                    message,
                })?;
            Some(addresses)
        }
        None => None,
    };
    let opts = ConvertOptions {
        audit_log_mandatory: args.audit_log_mandatory,
        network_restriction: args.network_restriction_enabled,
        acl,
        ..ConvertOptions::default()
    };
    let converted = to_shoot_with(&runtime, &cfg, live.as_ref(), &opts)?;

    let write = |e: std::io::Error| ConvertCommandError::Write(e.to_string());
    // The ConfigMap first: Gardener refuses a Shoot whose ConfigMap does not exist yet, so the
    // output can go to `kubectl apply -f -` as it is.
    let mut documents: Vec<String> = Vec::new();
    if let Some(cm) = &converted.structured_auth {
        documents.push(render(cm, args.output)?);
    }
    documents.push(render(&converted.shoot, args.output)?);
    let separator = match args.output {
        Format::Yaml => "---\n",
        Format::Json => "",
    };
    for doc in documents {
        out.write_all(separator.as_bytes()).map_err(write)?;
        out.write_all(doc.as_bytes()).map_err(write)?;
    }
    for w in cfg.warnings() {
        writeln!(notes, "config warning: {w}").map_err(write)?;
    }
    if converted.workers_removed {
        writeln!(
            notes,
            "note: worker pools of the live Shoot are missing from the Runtime; the controller replaces \
             spec.provider.workers with a full update before applying this Shoot"
        )
        .map_err(write)?;
    }
    Ok(())
}

fn render<T: Serialize>(object: &T, format: Format) -> Result<String, ConvertCommandError> {
    let text = match format {
        Format::Yaml => serde_yaml_ng::to_string(object)
            .map_err(|e| ConvertCommandError::Write(e.to_string()))?,
        Format::Json => {
            serde_json::to_string_pretty(object)
                .map_err(|e| ConvertCommandError::Write(e.to_string()))?
                + "\n"
        }
    };
    Ok(text)
}

/// `--config`: a directory with `converter_config.json` or the file itself; the built-in
/// example configuration without it.
fn config(path: Option<&Path>) -> Result<KimConfig, ConvertCommandError> {
    let Some(path) = path else {
        return Ok(KimConfig::from_parts(
            EXAMPLE_CONVERTER_CONFIG,
            Some(EXAMPLE_AUDIT_LOG_TENANTS),
            Some(EXAMPLE_MAINTENANCE_WINDOWS),
        )?);
    };
    let file = if path.is_dir() {
        path.join("converter_config.json")
    } else {
        path.to_path_buf()
    };
    Ok(KimConfig::load(&ConfigPaths::new(file))?)
}

/// Reads a YAML (or JSON, which is YAML) object from a file or stdin (`-`).
fn read_object<T: DeserializeOwned>(
    path: &Path,
    kind: &'static str,
) -> Result<T, ConvertCommandError> {
    let name = path.display().to_string();
    let read_err = |source| ConvertCommandError::Read {
        path: name.clone(),
        source,
    };
    let text = if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(read_err)?;
        s
    } else {
        std::fs::read_to_string(path).map_err(read_err)?
    };
    serde_yaml_ng::from_str(&text).map_err(|e| ConvertCommandError::Parse {
        path: name,
        kind,
        message: e.to_string(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ConvertArgs,
    }

    fn sample(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../config/samples")
            .join(name)
    }

    fn run(argv: &[&str]) -> (Result<(), ConvertCommandError>, String, String) {
        let cli =
            Cli::try_parse_from(std::iter::once("convert").chain(argv.iter().copied())).unwrap();
        let (mut out, mut notes) = (Vec::new(), Vec::new());
        let result = execute(&cli.args, &mut out, &mut notes);
        (
            result,
            String::from_utf8(out).unwrap(),
            String::from_utf8(notes).unwrap(),
        )
    }

    fn documents(yaml: &str) -> Vec<serde_json::Value> {
        serde_yaml_ng::Deserializer::from_str(yaml)
            .map(|d| serde_json::Value::deserialize(d).unwrap())
            .collect()
    }

    use serde::Deserialize;

    #[test]
    fn prints_the_config_map_and_the_shoot_with_the_example_config() {
        let path = sample("runtime-aws.yaml");
        let runtime: serde_json::Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let (result, out, _) = run(&["-f", path.to_str().unwrap()]);
        result.unwrap();
        let docs = documents(&out);
        assert_eq!(docs.len(), 2, "{out}");
        assert_eq!(docs[0]["kind"], "ConfigMap");
        assert_eq!(
            docs[0]["metadata"]["name"],
            format!(
                "structured-auth-config-{}",
                runtime["spec"]["shoot"]["name"].as_str().unwrap()
            )
        );
        assert_eq!(docs[1]["kind"], "Shoot");
        assert_eq!(docs[1]["metadata"]["namespace"], "garden-kyma-dev");
        assert_eq!(
            docs[1]["spec"]["credentialsBindingName"],
            runtime["spec"]["shoot"]["secretBindingName"]
        );
        // The same conversion as the golden file of the sample (generation 0 here: not stored).
        let golden: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../tests/golden/samples/runtime-aws.json"),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(docs[1]["spec"], golden["shoot"]["spec"]);
    }

    #[test]
    fn acl_config_map_manages_the_acl_extension() {
        let mut runtime: serde_json::Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(sample("runtime-aws.yaml")).unwrap())
                .unwrap();
        runtime["spec"]["shoot"]["kubernetes"]["kubeAPIServer"]["acl"] =
            serde_json::json!({"allowedCIDRs": ["203.0.113.0/24"]});
        let dir = std::env::temp_dir().join(format!("kim-convert-acl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rt_path = dir.join("runtime.json");
        std::fs::write(&rt_path, runtime.to_string()).unwrap();
        let cm_path = dir.join("acl.yaml");
        std::fs::write(
            &cm_path,
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: acl-ip-list\ndata:\n  \
             acl-list.json: '[\"2.2.2.2/29\"]'\n  kcp-external-nat-ip.json: '\"1.1.1.1/32\"'\n",
        )
        .unwrap();
        let bad_path = dir.join("bad.yaml");
        std::fs::write(
            &bad_path,
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: acl-ip-list\ndata: {}\n",
        )
        .unwrap();
        let rt = rt_path.to_str().unwrap();
        let acl = |out: &str| {
            documents(out)[1]["spec"]["extensions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["type"] == "acl")
                .cloned()
        };
        let (result, without, _) = run(&["-f", rt]);
        result.unwrap();
        assert_eq!(acl(&without), None, "not managed without the ConfigMap");
        let (result, with, _) = run(&["-f", rt, "--acl-config-map", cm_path.to_str().unwrap()]);
        result.unwrap();
        assert_eq!(
            acl(&with).unwrap()["providerConfig"]["rule"]["cidrs"],
            serde_json::json!(["203.0.113.0/24", "2.2.2.2/29", "1.1.1.1/32"])
        );
        let (result, _, _) = run(&["-f", rt, "--acl-config-map", bad_path.to_str().unwrap()]);
        std::fs::remove_dir_all(&dir).unwrap();
        let err = result.unwrap_err().to_string();
        assert!(
            err.contains("bad.yaml is not a valid API server ACL ConfigMap")
                && err.contains("acl-list.json is missing"),
            "{err}"
        );
    }

    #[test]
    fn patch_form_over_a_live_shoot_reports_removed_pools() {
        let path = sample("runtime-azure.yaml");
        let (result, live_json, _) = run(&["-f", path.to_str().unwrap(), "-o", "json"]);
        result.unwrap();
        // The second JSON document is the Shoot; add a pool the Runtime does not have.
        let shoot_start = live_json
            .find("{\n  \"apiVersion\": \"core.gardener.cloud/v1beta1\"")
            .unwrap();
        let mut live: serde_json::Value = serde_json::from_str(&live_json[shoot_start..]).unwrap();
        let mut extra = live["spec"]["provider"]["workers"][0].clone();
        extra["name"] = "old-pool".into();
        live["spec"]["provider"]["workers"]
            .as_array_mut()
            .unwrap()
            .push(extra);
        let dir = std::env::temp_dir().join(format!("kim-convert-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let live_path = dir.join("live.json");
        std::fs::write(&live_path, live.to_string()).unwrap();

        let (result, out, notes) = run(&[
            "-f",
            path.to_str().unwrap(),
            "--shoot",
            live_path.to_str().unwrap(),
        ]);
        std::fs::remove_dir_all(&dir).unwrap();
        result.unwrap();
        assert!(notes.contains("full update"), "{notes}");
        let shoot = &documents(&out)[1];
        assert!(shoot["spec"].get("dns").is_none());
        assert_eq!(
            shoot["spec"]["provider"]["workers"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn errors_name_the_file_or_the_runtime_field() {
        let (result, _, _) = run(&["-f", "/nonexistent/runtime.yaml"]);
        assert!(
            result
                .unwrap_err()
                .to_string()
                .starts_with("cannot read /nonexistent/runtime.yaml")
        );

        let dir = std::env::temp_dir().join(format!("kim-convert-err-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut runtime: serde_json::Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(sample("runtime-gcp.yaml")).unwrap())
                .unwrap();
        runtime["spec"]["shoot"]["networking"]["nodes"] = "10.250.0.0".into();
        let bad = dir.join("bad.yaml");
        std::fs::write(&bad, serde_yaml_ng::to_string(&runtime).unwrap()).unwrap();
        let (result, _, _) = run(&["-f", bad.to_str().unwrap()]);
        let message = result.unwrap_err().to_string();
        assert!(message.contains("spec.shoot.networking.nodes"), "{message}");

        std::fs::write(&bad, "kind: Runtime\nspec: 3\n").unwrap();
        let (result, _, _) = run(&["-f", bad.to_str().unwrap()]);
        let message = result.unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(message.contains("is not a valid Runtime"), "{message}");
    }

    #[test]
    fn config_directory_is_loaded() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config");
        let path = sample("runtime-trial.yaml");
        let (result, out, _) = run(&[
            "-f",
            path.to_str().unwrap(),
            "--config",
            dir.to_str().unwrap(),
        ]);
        result.unwrap();
        assert_eq!(documents(&out)[1]["spec"]["kubernetes"]["version"], "1.35");
    }
}
