//! The real gardener-apiserver, aggregated into the KCP kube-apiserver the way Gardener's own
//! envtest does it (`test/envtest/{aggregator,apiserver}.go`): front-proxy CA and
//! `--requestheader-*`/`--proxy-client-*` flags on kube-apiserver (see `apiserver.rs`), an
//! ExternalName Service `kube-system/gardener-apiserver` -> `localhost` (the aggregator resolves
//! ExternalName services itself, so no cluster network is needed), and one APIService per
//! served group-version.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;

use super::access::Credentials;
use super::{
    Ca, ClusterAccess, GardenerInfo, Result, Starter, TestEnvError, bins::Binaries, kube_err, wait,
};

/// Group-versions gardener-apiserver v1.149 serves (`pkg/apiserver/apis.go`).
pub const GROUP_VERSIONS: [(&str, &str); 5] = [
    ("core.gardener.cloud", "v1"),
    ("core.gardener.cloud", "v1beta1"),
    ("seedmanagement.gardener.cloud", "v1alpha1"),
    ("operations.gardener.cloud", "v1alpha1"),
    ("security.gardener.cloud", "v1alpha1"),
];

/// Admission plugins switched off, with the reason:
/// - `ShootManagedSeed`, `ManagedSeed`, `ManagedSeedShoot`: ManagedSeeds are out of scope and
///   their informers watch seedmanagement resources nobody writes here; none of them touches
///   plain Shoots of a project.
///
/// Everything else stays at Gardener's defaults, notably ShootValidator, ShootMutator,
/// DeletionConfirmation, ResourceReferenceManager, ExtensionValidator (the fixtures create
/// ControllerRegistrations), ShootDNS (the fixtures create a default domain), and
/// ShootQuotaValidator (a no-op while no binding references a Quota).
pub const DISABLED_ADMISSION_PLUGINS: &str = "ShootManagedSeed,ManagedSeed,ManagedSeedShoot";

pub(crate) async fn start(
    starter: &Starter<'_>,
    binaries: &Binaries,
    kcp: &ClusterAccess,
    ca: &Ca,
    etcd_url: &str,
    port: u16,
    timeout: Duration,
) -> Result<GardenerInfo> {
    let files = starter.files;
    let serving = ca.serving_cert(
        "gardener-apiserver",
        &[
            "127.0.0.1",
            "localhost",
            "gardener-apiserver.kube-system.svc",
            "gardener-apiserver.kube-system",
        ],
    )?;
    let cert = files.write("gardener/tls.crt", &serving.cert_pem)?;
    let key = files.write("gardener/tls.key", &serving.key_pem)?;
    // It runs as a `system:masters` user, as in Gardener's envtest.
    let user = ca.client_cert("gardener-apiserver", &["system:masters"])?;
    let kubeconfig = files.write(
        "gardener/kubeconfig",
        &kcp.kubeconfig("gardener-apiserver", Credentials::Cert(&user)),
    )?;
    let wi_key = files.write(
        "gardener/workload-identity.key",
        &super::pki::signing_key_pem()?.0,
    )?;
    let kc = kubeconfig.display().to_string();
    let args = vec![
        "--bind-address=127.0.0.1".to_string(),
        format!("--secure-port={port}"),
        format!("--etcd-servers={etcd_url}"),
        format!("--tls-cert-file={}", cert.display()),
        format!("--tls-private-key-file={}", key.display()),
        "--cluster-identity=kim-testenv".into(),
        "--authorization-always-allow-paths=/healthz,/readyz,/livez".into(),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        format!("--kubeconfig={kc}"),
        format!("--disable-admission-plugins={DISABLED_ADMISSION_PLUGINS}"),
        format!("--workload-identity-token-issuer=https://127.0.0.1:{port}/workload-identity"),
        format!("--workload-identity-signing-key-file={}", wi_key.display()),
        "--log-level=info".into(),
        "--log-format=text".into(),
    ];
    starter.spawn("gardener-apiserver", &binaries.gardener_apiserver, &args)?;

    let client = kcp.admin_client().await?;
    register(&client, port, &ca.pair.cert_pem).await?;

    // Ready when every APIService is Available and Shoots can be listed through the KCP.
    let apiservices = ApiResource {
        group: "apiregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiregistration.k8s.io/v1".into(),
        kind: "APIService".into(),
        plural: "apiservices".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &apiservices);
    let shoots: Api<DynamicObject> = Api::all_with(client.clone(), &shoot_resource());
    wait::until(
        "gardener-apiserver APIServices Available",
        timeout,
        Duration::from_millis(100),
        || {
            let (api, shoots) = (api.clone(), shoots.clone());
            async move {
                starter.check("gardener-apiserver")?;
                for (group, version) in GROUP_VERSIONS {
                    let name = format!("{version}.{group}");
                    let svc = api.get(&name).await.map_err(|e| e.to_string())?;
                    let available = svc.data["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Available" && c["status"] == "True");
                    if !available {
                        return Err(format!(
                            "APIService {name} not Available: {}",
                            svc.data["status"]
                        )
                        .into());
                    }
                }
                shoots
                    .list(&ListParams::default().limit(1))
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(())
            }
        },
    )
    .await?;
    Ok(GardenerInfo {
        direct_url: format!("https://127.0.0.1:{port}"),
        project_namespace: String::new(),
    })
}

async fn register(client: &kube::Client, port: u16, ca_pem: &str) -> Result<()> {
    let pp = PatchParams::apply("kim-testenv").force();
    let svc: Service = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "gardener-apiserver", "namespace": "kube-system"},
        "spec": {"type": "ExternalName", "externalName": "localhost"}
    }))
    .map_err(|e| TestEnvError::Other(e.to_string()))?;
    Api::<Service>::namespaced(client.clone(), "kube-system")
        .patch("gardener-apiserver", &pp, &Patch::Apply(&svc))
        .await
        .map_err(kube_err("creating Service kube-system/gardener-apiserver"))?;
    let ar = ApiResource {
        group: "apiregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiregistration.k8s.io/v1".into(),
        kind: "APIService".into(),
        plural: "apiservices".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    for (group, version) in GROUP_VERSIONS {
        let name = format!("{version}.{group}");
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": name},
            "spec": {
                "group": group, "version": version,
                "service": {"name": "gardener-apiserver", "namespace": "kube-system", "port": port},
                "groupPriorityMinimum": 100, "versionPriority": 100,
                "caBundle": B64.encode(ca_pem),
            }
        }))
        .map_err(|e| TestEnvError::Other(e.to_string()))?;
        api.patch(&name, &pp, &Patch::Apply(&obj))
            .await
            .map_err(kube_err(format!("creating APIService {name}")))?;
    }
    Ok(())
}

/// `core.gardener.cloud/v1beta1` Shoots as a dynamic resource.
pub fn shoot_resource() -> ApiResource {
    ApiResource {
        group: "core.gardener.cloud".into(),
        version: "v1beta1".into(),
        api_version: "core.gardener.cloud/v1beta1".into(),
        kind: "Shoot".into(),
        plural: "shoots".into(),
    }
}
