//! gVisor container runtimes get the `net-raw` flag (Istio's sidecars need raw sockets) unless
//! the Runtime sets it.

use crate::gardener::{RawExtension, Shoot};
use serde_json::{Map, Value, json};

/// The container runtime type of gVisor.
const GVISOR: &str = "gvisor";
/// API version and kind of the gVisor runtime extension's provider config.
const GVISOR_API_VERSION: &str = "gvisor.runtime.extensions.config.gardener.cloud/v1alpha1";
const GVISOR_KIND: &str = "GVisorConfiguration";
/// The runsc flag and the value it gets when the Runtime does not set it.
const NET_RAW: &str = "net-raw";
const NET_RAW_DEFAULT: &str = "true";

/// Every `gvisor` container runtime of every pool: without a provider config it gets a
/// `GVisorConfiguration` with `configFlags: {net-raw: "true"}`; with one, `net-raw: "true"` is
/// added to its `configFlags` unless the key is there (its value, even `"false"`, is kept).
/// A config without `configFlags` also gets upstream's apiVersion and kind.
pub(super) fn net_raw(shoot: &mut Shoot) {
    let runtimes = shoot
        .spec
        .provider
        .workers
        .iter_mut()
        .flatten()
        .filter_map(|w| w.cri.as_mut())
        .filter_map(|cri| cri.container_runtimes.as_mut())
        .flatten()
        .filter(|r| r.type_ == GVISOR);
    for runtime in runtimes {
        match runtime.provider_config.as_mut().map(|c| &mut c.0) {
            Some(Value::Object(config)) => add_net_raw(config),
            // No config, or one that is no object (the Runtime CRD refuses those): the default.
            _ => {
                runtime.provider_config = Some(RawExtension(json!({
                    "apiVersion": GVISOR_API_VERSION,
                    "kind": GVISOR_KIND,
                    "configFlags": {NET_RAW: NET_RAW_DEFAULT},
                })));
            }
        }
    }
}

fn add_net_raw(config: &mut Map<String, Value>) {
    match config.get_mut("configFlags") {
        Some(Value::Object(flags)) => {
            flags
                .entry(NET_RAW)
                .or_insert_with(|| Value::from(NET_RAW_DEFAULT));
        }
        _ => {
            config.insert("apiVersion".to_owned(), Value::from(GVISOR_API_VERSION));
            config.insert("kind".to_owned(), Value::from(GVISOR_KIND));
            config.insert("configFlags".to_owned(), json!({NET_RAW: NET_RAW_DEFAULT}));
        }
    }
}
