//! The verb allow-list of the Gardener client (upstream issue "Restrict the used HTTP methods
//! with the Gardener client"): the controller may only do what it needs, only in its project
//! namespace. Pure: decides on method and path.

use http::Method;

/// A request the allow-list refuses; it never reaches Gardener.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "the Gardener client may not {method} {path}: only Shoots (and shoots/adminkubeconfig), \
     ConfigMaps and registry cache Secrets in namespace {namespace}, Seeds (read) and discovery \
     are allowed"
)]
pub struct Denied {
    /// The refused method.
    pub method: String,
    /// The refused path (no query).
    pub path: String,
    /// The only namespace the client may touch.
    pub namespace: String,
}

/// What may be called on Gardener.
#[derive(Debug, Clone)]
pub struct AllowList {
    namespace: String,
}

const READ: &[Method] = &[Method::GET];
const SHOOT_VERBS: &[Method] = &[
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
];
const CONFIGMAP_VERBS: &[Method] = SHOOT_VERBS;

impl AllowList {
    /// Allows the project namespace `namespace` (`garden-<project>`).
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
        }
    }

    /// Checks one request; `path` may carry a query string, which is ignored.
    pub fn check(&self, method: &Method, path: &str) -> Result<(), Denied> {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        if self.allowed(method, path, query) {
            Ok(())
        } else {
            Err(Denied {
                method: method.to_string(),
                path: path.to_owned(),
                namespace: self.namespace.clone(),
            })
        }
    }

    fn allowed(&self, method: &Method, path: &str, query: &str) -> bool {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        match segs.as_slice() {
            // discovery and health
            ["version"] | ["healthz"] | ["readyz"] | ["livez"] => method == Method::GET,
            ["apis", "core.gardener.cloud", "v1beta1"] => method == Method::GET,
            // Seeds: read only (seed availability check of enforceSeedLocation)
            ["apis", "core.gardener.cloud", "v1beta1", "seeds"]
            | ["apis", "core.gardener.cloud", "v1beta1", "seeds", _] => READ.contains(method),
            [
                "apis",
                "core.gardener.cloud",
                "v1beta1",
                "namespaces",
                ns,
                rest @ ..,
            ] if *ns == self.namespace => {
                match rest {
                    // list/watch/create
                    ["shoots"] => [Method::GET, Method::POST].contains(method),
                    ["shoots", _] => SHOOT_VERBS.contains(method),
                    ["shoots", _, "adminkubeconfig"] => method == Method::POST,
                    ["shoots", _, "status"] => false,
                    _ => false,
                }
            }
            ["api", "v1", "namespaces", ns, "configmaps"] if *ns == self.namespace => {
                [Method::GET, Method::POST].contains(method)
            }
            ["api", "v1", "namespaces", ns, "configmaps", _] if *ns == self.namespace => {
                CONFIGMAP_VERBS.contains(method)
            }
            // Registry cache credentials: lists only of the Secrets labelled as the registry
            // cache's (a list would otherwise read every credential of the project), and only
            // Secrets named as the registry cache names them.
            ["api", "v1", "namespaces", ns, "secrets"] if *ns == self.namespace => {
                method == Method::POST
                    || (method == Method::GET && selects_registry_cache_secrets(query))
            }
            ["api", "v1", "namespaces", ns, "secrets", name] if *ns == self.namespace => {
                name.starts_with(kim_shared::registry_cache::SECRET_PREFIX)
                    && [Method::GET, Method::PATCH, Method::DELETE].contains(method)
            }
            _ => false,
        }
    }
}

/// Whether a list's query requires the registry cache's label
/// (`kyma-project.io/registry-cache-id` present or equal to a value): only Secrets carrying it
/// are listed.
fn selects_registry_cache_secrets(query: &str) -> bool {
    let label = kim_shared::registry_cache::LABEL_CACHE_ID;
    query.split('&').any(|pair| {
        pair.split_once('=').is_some_and(|(key, value)| {
            key == "labelSelector"
                && percent_encoding::percent_decode_str(value)
                    .decode_utf8_lossy()
                    .split(',')
                    .map(str::trim)
                    .any(|req| {
                        req == label
                            || req
                                .strip_prefix(label)
                                .is_some_and(|rest| rest.starts_with('='))
                    })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> AllowList {
        AllowList::new("garden-kyma")
    }

    fn allows(m: Method, p: &str) {
        assert_eq!(list().check(&m, p), Ok(()), "{m} {p} should be allowed");
    }

    fn denies(m: Method, p: &str) {
        assert!(list().check(&m, p).is_err(), "{m} {p} should be denied");
    }

    #[test]
    fn shoots_in_the_project_namespace() {
        let base = "/apis/core.gardener.cloud/v1beta1/namespaces/garden-kyma/shoots";
        allows(Method::GET, &format!("{base}?watch=true&resourceVersion=1"));
        allows(Method::POST, base);
        allows(Method::GET, &format!("{base}/s1"));
        allows(
            Method::PATCH,
            &format!("{base}/s1?fieldManager=kim&force=true"),
        );
        allows(Method::PUT, &format!("{base}/s1"));
        allows(Method::DELETE, &format!("{base}/s1"));
        allows(Method::POST, &format!("{base}/s1/adminkubeconfig"));
    }

    #[test]
    fn nothing_outside_the_project_namespace_or_the_allowed_kinds() {
        denies(
            Method::GET,
            "/apis/core.gardener.cloud/v1beta1/namespaces/garden-other/shoots",
        );
        denies(
            Method::DELETE,
            "/apis/core.gardener.cloud/v1beta1/namespaces/garden-kyma/shoots",
        );
        denies(
            Method::PUT,
            "/apis/core.gardener.cloud/v1beta1/namespaces/garden-kyma/shoots/s1/status",
        );
        denies(
            Method::POST,
            "/apis/core.gardener.cloud/v1beta1/namespaces/garden-kyma/shoots/s1/viewerkubeconfig",
        );
        denies(Method::GET, "/api/v1/namespaces/garden-kyma/secrets/x");
        denies(Method::DELETE, "/apis/core.gardener.cloud/v1beta1/seeds/s");
        denies(Method::GET, "/apis/core.gardener.cloud/v1beta1/projects");
        denies(Method::POST, "/version");
    }

    #[test]
    fn seeds_and_configmaps() {
        allows(Method::GET, "/apis/core.gardener.cloud/v1beta1/seeds");
        allows(
            Method::GET,
            "/api/v1/namespaces/garden-kyma/configmaps/structured-auth-config-s1",
        );
        allows(
            Method::PUT,
            "/api/v1/namespaces/garden-kyma/configmaps/structured-auth-config-s1",
        );
        allows(Method::POST, "/api/v1/namespaces/garden-kyma/configmaps");
        allows(Method::GET, "/apis/core.gardener.cloud/v1beta1");
    }

    #[test]
    fn registry_cache_secrets_only() {
        let base = "/api/v1/namespaces/garden-kyma/secrets";
        allows(Method::POST, base);
        allows(
            Method::GET,
            &format!(
                "{base}?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dinfrastructure-manager%2Ckyma-project.io%2Fregistry-cache-id"
            ),
        );
        allows(
            Method::GET,
            &format!("{base}?labelSelector=kyma-project.io/registry-cache-id"),
        );
        allows(Method::DELETE, &format!("{base}/reg-cache-1"));
        allows(Method::PATCH, &format!("{base}/reg-cache-1"));
        denies(Method::GET, base);
        denies(Method::GET, &format!("{base}?labelSelector=app%3Dx"));
        denies(
            Method::GET,
            &format!("{base}?labelSelector=kyma-project.io%2Fregistry-cache-id%21%3Dx"),
        );
        denies(
            Method::GET,
            &format!("{base}?labelSelector=%21kyma-project.io%2Fregistry-cache-id"),
        );
        denies(Method::GET, &format!("{base}/audit-log-credentials"));
        denies(Method::DELETE, &format!("{base}/other"));
        denies(Method::PUT, &format!("{base}/reg-cache-1"));
        denies(Method::POST, "/api/v1/namespaces/garden-other/secrets");
    }

    #[test]
    fn denial_names_what_is_allowed() {
        let e = list().check(&Method::GET, "/api/v1/secrets").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("GET /api/v1/secrets") && msg.contains("garden-kyma"),
            "{msg}"
        );
    }
}
