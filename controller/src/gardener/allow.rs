//! The verb allow-list of the Gardener client (upstream issue "Restrict the used HTTP methods
//! with the Gardener client"): the controller may only do what it needs, only in its project
//! namespace. Pure: decides on method and path.

use http::Method;

/// A request the allow-list refuses; it never reaches Gardener.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "the Gardener client may not {method} {path}: only Shoots (and shoots/adminkubeconfig) and \
     ConfigMaps in namespace {namespace}, Seeds (read) and discovery are allowed"
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
        let path = path.split('?').next().unwrap_or_default();
        if self.allowed(method, path) {
            Ok(())
        } else {
            Err(Denied {
                method: method.to_string(),
                path: path.to_owned(),
                namespace: self.namespace.clone(),
            })
        }
    }

    fn allowed(&self, method: &Method, path: &str) -> bool {
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
            _ => false,
        }
    }
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
    fn denial_names_what_is_allowed() {
        let e = list().check(&Method::GET, "/api/v1/secrets").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("GET /api/v1/secrets") && msg.contains("garden-kyma"),
            "{msg}"
        );
    }
}
