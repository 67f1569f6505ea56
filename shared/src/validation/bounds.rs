//! The CRD's list bounds ([`crate::crds::LIST_BOUNDS`]) checked on a typed Runtime. The API
//! server checks them before the validating webhooks, but a review posted straight to the
//! webhook is not checked by anyone else, and some rules compare each item of a list with the
//! others: over its bound, a list could cost that square for nothing. The webhook judges no
//! rule of a Runtime with such a list.

use crate::api::Runtime;
use crate::gardener::Worker;

use super::Violation;

/// `(bound template, field)` of every list of `rt`'s spec with its length: the template as in
/// [`crate::crds::LIST_BOUNDS`] (`[]` for each list item), the field with the item's index.
fn spec_lists(rt: &Runtime, mut seen: impl FnMut(&'static str, String, usize)) {
    let spec = &rt.spec;
    seen(
        ".spec.security.administrators",
        "spec.security.administrators".into(),
        spec.security.administrators.len(),
    );
    if let Some(crate::api::runtime::ImageRegistryCaches::List(caches)) = &spec.image_registry_cache
    {
        seen(
            ".spec.imageRegistryCache",
            "spec.imageRegistryCache".into(),
            caches.len(),
        );
    }
    let shoot = &spec.shoot;
    if let Some(zones) = shoot.control_plane.as_ref().and_then(|c| c.zones.as_ref()) {
        seen(
            ".spec.shoot.controlPlane.zones",
            "spec.shoot.controlPlane.zones".into(),
            zones.len(),
        );
    }
    let provider = &shoot.provider;
    pools(
        ".spec.shoot.provider.workers",
        "spec.shoot.provider.workers",
        &provider.workers,
        &mut seen,
    );
    if let Some(additional) = &provider.additional_workers {
        pools(
            ".spec.shoot.provider.additionalWorkers",
            "spec.shoot.provider.additionalWorkers",
            additional,
            &mut seen,
        );
    }
    let Some(server) = shoot
        .kubernetes
        .as_ref()
        .and_then(|k| k.kube_api_server.as_ref())
    else {
        return;
    };
    if let Some(cidrs) = server.acl.as_ref().and_then(|a| a.allowed_cidrs.as_ref()) {
        seen(
            ".spec.shoot.kubernetes.kubeAPIServer.acl.allowedCIDRs",
            "spec.shoot.kubernetes.kubeAPIServer.acl.allowedCIDRs".into(),
            cidrs.len(),
        );
    }
    if let Some(algs) = server
        .oidc_config
        .as_ref()
        .and_then(|o| o.signing_algs.as_ref())
    {
        seen(
            ".spec.shoot.kubernetes.kubeAPIServer.oidcConfig.signingAlgs",
            "spec.shoot.kubernetes.kubeAPIServer.oidcConfig.signingAlgs".into(),
            algs.len(),
        );
    }
    if let Some(configs) = &server.additional_oidc_config {
        seen(
            ".spec.shoot.kubernetes.kubeAPIServer.additionalOidcConfig",
            "spec.shoot.kubernetes.kubeAPIServer.additionalOidcConfig".into(),
            configs.len(),
        );
        for (i, c) in configs.iter().enumerate() {
            if let Some(algs) = &c.oidc.signing_algs {
                seen(
                    ".spec.shoot.kubernetes.kubeAPIServer.additionalOidcConfig[].signingAlgs",
                    format!(
                        "spec.shoot.kubernetes.kubeAPIServer.additionalOidcConfig[{i}].signingAlgs"
                    ),
                    algs.len(),
                );
            }
        }
    }
}

fn pools(
    template: &'static str,
    field: &str,
    workers: &[Worker],
    seen: &mut impl FnMut(&'static str, String, usize),
) {
    seen(template, field.to_owned(), workers.len());
    // The item templates of both pool lists, by the list's template.
    let item = |list: &'static str| -> &'static str {
        match (template, list) {
            (".spec.shoot.provider.workers", "zones") => ".spec.shoot.provider.workers[].zones",
            (".spec.shoot.provider.workers", "taints") => ".spec.shoot.provider.workers[].taints",
            (".spec.shoot.provider.workers", "dataVolumes") => {
                ".spec.shoot.provider.workers[].dataVolumes"
            }
            (".spec.shoot.provider.workers", "cri") => {
                ".spec.shoot.provider.workers[].cri.containerRuntimes"
            }
            (".spec.shoot.provider.workers", _) => {
                ".spec.shoot.provider.workers[].machineControllerManager.nodeConditions"
            }
            (_, "zones") => ".spec.shoot.provider.additionalWorkers[].zones",
            (_, "taints") => ".spec.shoot.provider.additionalWorkers[].taints",
            (_, "dataVolumes") => ".spec.shoot.provider.additionalWorkers[].dataVolumes",
            (_, "cri") => ".spec.shoot.provider.additionalWorkers[].cri.containerRuntimes",
            (_, _) => {
                ".spec.shoot.provider.additionalWorkers[].machineControllerManager.nodeConditions"
            }
        }
    };
    for (i, w) in workers.iter().enumerate() {
        let at = |sub: &str| format!("{field}[{i}].{sub}");
        if let Some(zones) = &w.zones {
            seen(item("zones"), at("zones"), zones.len());
        }
        if let Some(taints) = &w.taints {
            seen(item("taints"), at("taints"), taints.len());
        }
        if let Some(volumes) = &w.data_volumes {
            seen(item("dataVolumes"), at("dataVolumes"), volumes.len());
        }
        if let Some(runtimes) = w.cri.as_ref().and_then(|c| c.container_runtimes.as_ref()) {
            seen(item("cri"), at("cri.containerRuntimes"), runtimes.len());
        }
        if let Some(conditions) = w
            .machine_controller_manager
            .as_ref()
            .and_then(|m| m.node_conditions.as_ref())
        {
            seen(
                item("nodeConditions"),
                at("machineControllerManager.nodeConditions"),
                conditions.len(),
            );
        }
    }
}

fn bound(template: &str) -> Option<usize> {
    crate::crds::LIST_BOUNDS
        .iter()
        .find(|(kind, path, _)| *kind == "Runtime" && *path == template)
        .and_then(|(_, _, max)| usize::try_from(*max).ok())
}

/// The lists of `rt`'s spec longer than the CRD allows, one violation each.
pub fn runtime_lists_over_bound(rt: &Runtime) -> Vec<Violation> {
    let mut out = Vec::new();
    spec_lists(rt, |template, field, len| {
        if let Some(max) = bound(template)
            && len > max
        {
            out.push(Violation {
                field,
                message: format!("has {len} items; it may have at most {max}"),
            });
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A Runtime with one item in every list of its spec, and two pools of each kind.
    fn every_list_filled() -> Runtime {
        let pool = serde_json::json!({
            "name": "p", "minimum": 1, "maximum": 2,
            "machine": {"type": "m5.large"},
            "zones": ["z"],
            "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}],
            "dataVolumes": [{"name": "d", "size": "10Gi"}],
            "cri": {"name": "containerd", "containerRuntimes": [{"type": "gvisor"}]},
            "machineControllerManager": {"nodeConditions": ["ReadonlyFilesystem"]},
        });
        let oidc = serde_json::json!({"clientID": "c", "issuerURL": "https://i.example.com",
            "signingAlgs": ["RS256"]});
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
            "kind": "Runtime",
            "metadata": {"name": "r"},
            "spec": {
                "imageRegistryCache": [{"name": "c", "namespace": "n", "uid": "u",
                    "config": {"upstream": "docker.io"}}],
                "security": {"administrators": ["a@example.com"],
                    "networking": {"filter": {"egress": {"enabled": false}}}},
                "shoot": {
                    "name": "s", "purpose": "production", "region": "eu-central-1",
                    "platformRegion": "cf-eu10", "secretBindingName": "b",
                    "controlPlane": {"zones": ["z"]},
                    "kubernetes": {"kubeAPIServer": {
                        "acl": {"allowedCIDRs": ["10.0.0.0/8"]},
                        "oidcConfig": oidc.clone(),
                        "additionalOidcConfig": [oidc],
                    }},
                    "networking": {"type": "calico", "nodes": "10.250.0.0/16",
                        "pods": "10.96.0.0/13", "services": "10.104.0.0/13"},
                    "provider": {"type": "aws", "workers": [pool.clone(), pool.clone()],
                        "additionalWorkers": [pool.clone(), pool]},
                },
            },
        }))
        .expect("a Runtime")
    }

    /// Every bound the CRD puts on a list of the spec is checked here, and nothing else.
    #[test]
    fn every_bound_of_the_spec_is_checked() {
        let mut checked = BTreeSet::new();
        spec_lists(&every_list_filled(), |template, _, len| {
            assert_eq!(len, if template.ends_with("orkers") { 2 } else { 1 });
            checked.insert(template);
        });
        let crd: BTreeSet<&str> = crate::crds::LIST_BOUNDS
            .iter()
            .filter(|(kind, path, _)| *kind == "Runtime" && path.starts_with(".spec."))
            .map(|(_, path, _)| *path)
            .collect();
        assert_eq!(checked, crd);
    }

    #[test]
    fn a_list_over_its_bound_is_named_with_its_index() {
        let mut rt = every_list_filled();
        assert_eq!(runtime_lists_over_bound(&rt), Vec::new());
        rt.spec
            .shoot
            .provider
            .additional_workers
            .as_mut()
            .expect("pools")[1]
            .zones = Some((0..33).map(|i| format!("z{i}")).collect());
        rt.spec.security.administrators = vec!["a@example.com".into(); 5000];
        assert_eq!(
            runtime_lists_over_bound(&rt),
            vec![Violation {
                field: "spec.shoot.provider.additionalWorkers[1].zones".into(),
                message: "has 33 items; it may have at most 32".into(),
            }]
        );
    }
}
