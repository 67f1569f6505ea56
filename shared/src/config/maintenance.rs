//! The maintenance window file (`converter.maintenanceWindow.windowMapPath`), in upstream's
//! layout: `{"<region>": {"begin": "200000+0000", "end": "000000+0000"}}`, JSON or YAML. The file
//! may also be the ConfigMap manifest that carries it under `data.config`, as upstream's test
//! data does.

use super::error::{Checker, ConfigError, ConfigWarning, parse_yaml};
use super::values::MaintenanceTime;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Gardener refuses maintenance windows shorter than 30 minutes or longer than 6 hours.
const MIN_WINDOW_SECONDS: u32 = 30 * 60;
const MAX_WINDOW_SECONDS: u32 = 6 * 3600;

/// Maintenance windows of production Shoots, per region.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct MaintenanceWindows(pub BTreeMap<String, MaintenanceWindow>);

impl MaintenanceWindows {
    /// The window for `region`, if one is configured.
    pub fn for_region(&self, region: &str) -> Option<&MaintenanceWindow> {
        self.0.get(region)
    }
}

/// One window, written into the Shoot's `spec.maintenance.timeWindow`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct MaintenanceWindow {
    /// `begin`, e.g. `200000+0000`.
    pub begin: MaintenanceTime,
    /// `end`, e.g. `000000+0000`.
    pub end: MaintenanceTime,
}

impl MaintenanceWindow {
    /// The window's length in seconds; a window that passes midnight wraps around.
    pub fn duration_seconds(&self) -> u32 {
        let (b, e) = (
            self.begin.utc_seconds_of_day(),
            self.end.utc_seconds_of_day(),
        );
        (e + 86_400 - b) % 86_400
    }
}

/// The parts of a ConfigMap manifest we need to find the embedded window map.
#[derive(Deserialize)]
struct ConfigMapManifest {
    data: BTreeMap<String, String>,
}

/// The ConfigMap key that holds the window map (upstream `maintenanceWindow.key`).
const CONFIG_MAP_KEY: &str = "config";

/// Parses the file, unwrapping a ConfigMap manifest when the file is one. Returns the windows
/// and the key path they sit under (`data.config` in a ConfigMap, empty otherwise).
pub(crate) fn parse(
    file: &str,
    text: &str,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<(MaintenanceWindows, String), ConfigError> {
    let is_config_map = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text)
        .ok()
        .and_then(|v| {
            v.get("kind")
                .and_then(|k| k.as_str().map(|k| k == "ConfigMap"))
        })
        .unwrap_or(false);
    if !is_config_map {
        return Ok((parse_yaml(file, "", text, warnings)?, String::new()));
    }
    // apiVersion, metadata and the like are the manifest's business, not ours: no warnings.
    let manifest: ConfigMapManifest = parse_yaml(file, "", text, &mut Vec::new())?;
    let prefix = format!("data.{CONFIG_MAP_KEY}");
    let Some(embedded) = manifest.data.get(CONFIG_MAP_KEY) else {
        return Err(ConfigError::Key {
            file: file.to_owned(),
            path: prefix,
            message:
                "missing required key: the maintenance window ConfigMap keeps the window map here"
                    .to_owned(),
            line: 0,
            column: 0,
        });
    };
    Ok((parse_yaml(file, &prefix, embedded, warnings)?, prefix))
}

/// Checks that every window is one Gardener accepts.
pub(crate) fn check(windows: &MaintenanceWindows, prefix: &str, c: &mut Checker) {
    for (region, w) in &windows.0 {
        let path = super::error::join_path(prefix, region);
        c.non_empty(&path, region);
        let d = w.duration_seconds();
        if !(MIN_WINDOW_SECONDS..=MAX_WINDOW_SECONDS).contains(&d) {
            c.problem(
                path,
                format!(
                    "the window {}-{} lasts {}h{:02}m; Gardener needs 30 minutes to 6 hours",
                    w.begin,
                    w.end,
                    d / 3600,
                    (d % 3600) / 60
                ),
            );
        }
    }
}
