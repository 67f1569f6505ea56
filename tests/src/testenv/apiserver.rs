//! Flags for kube-apiserver and etcd, following controller-runtime's envtest plus what our
//! tests need (audit log, aggregation, ServiceAccount tokens).

use std::path::Path;

/// Files and ports of one kube-apiserver.
pub struct ApiServerParams<'a> {
    /// Secure port on 127.0.0.1.
    pub port: u16,
    /// `http://127.0.0.1:<port>` of etcd.
    pub etcd_url: &'a str,
    /// Key prefix in etcd, so two API servers can share one etcd.
    pub etcd_prefix: &'a str,
    /// Directory with `serving.crt`, `serving.key`, `client-ca.crt`, `sa.key`.
    pub cert_dir: &'a Path,
    /// Audit policy and log file, if auditing.
    pub audit: Option<(&'a Path, &'a Path)>,
    /// Front-proxy CA, proxy client cert and key, if aggregation is enabled.
    pub aggregator: Option<(&'a Path, &'a Path, &'a Path)>,
    /// `--enable-aggregator-routing`: webhooks and APIServices with a `service` reference are
    /// called at one of the Service's EndpointSlice addresses, not at its cluster IP (there is
    /// no cluster network here). ExternalName Services (the aggregated gardener-apiserver's) are
    /// then refused.
    pub aggregator_routing: bool,
    /// `--admission-control-config-file` (e.g. [`admission_config`]), if any.
    pub admission_config: Option<&'a Path>,
}

/// kube-apiserver arguments.
pub fn kube_apiserver_args(p: &ApiServerParams<'_>) -> Vec<String> {
    let f = |name: &str| p.cert_dir.join(name).display().to_string();
    let mut args = vec![
        format!("--etcd-servers={}", p.etcd_url),
        format!("--etcd-prefix={}", p.etcd_prefix),
        "--bind-address=127.0.0.1".into(),
        // Without a default route the apiserver cannot pick an address (controller-runtime#669).
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={}", p.port),
        format!("--cert-dir={}", p.cert_dir.display()),
        format!("--tls-cert-file={}", f("serving.crt")),
        format!("--tls-private-key-file={}", f("serving.key")),
        format!("--client-ca-file={}", f("client-ca.crt")),
        "--authorization-mode=RBAC".into(),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        "--allow-privileged=true".into(),
        // No controller-manager creates the `default` ServiceAccount.
        "--disable-admission-plugins=ServiceAccount".into(),
        format!("--service-account-issuer=https://127.0.0.1:{}", p.port),
        format!("--service-account-key-file={}", f("sa.pub")),
        format!("--service-account-signing-key-file={}", f("sa.key")),
        // Two API servers share one etcd; neither should manage the other's endpoints.
        "--endpoint-reconciler-type=none".into(),
        "--profiling=false".into(),
        "--v=1".into(),
        // ClusterTrustBundle is beta and off by default in Kubernetes 1.36; the runtime
        // bootstrapper copies one from the KCP into the runtime cluster.
        "--feature-gates=ClusterTrustBundle=true".into(),
        "--runtime-config=certificates.k8s.io/v1beta1/clustertrustbundles=true".into(),
    ];
    if let Some((policy, log)) = p.audit {
        args.push(format!("--audit-policy-file={}", policy.display()));
        args.push(format!("--audit-log-path={}", log.display()));
        // Flush each event at once so tests can read their own requests back.
        args.push("--audit-log-mode=blocking".into());
        // Never rotate (the default rotates at 100 MB, which a full run of the shared
        // environment passes): tests read their requests back from this one file.
        args.push("--audit-log-maxsize=1000000".into());
    }
    if let Some(config) = p.admission_config {
        args.push(format!(
            "--admission-control-config-file={}",
            config.display()
        ));
    }
    if let Some((ca, cert, key)) = p.aggregator {
        args.extend([
            format!("--requestheader-client-ca-file={}", ca.display()),
            "--requestheader-username-headers=X-Remote-User".into(),
            "--requestheader-group-headers=X-Remote-Group".into(),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
            "--requestheader-allowed-names=front-proxy-client".into(),
            format!("--proxy-client-cert-file={}", cert.display()),
            format!("--proxy-client-key-file={}", key.display()),
        ]);
    }
    if p.aggregator_routing {
        args.push("--enable-aggregator-routing=true".into());
    }
    args
}

/// etcd arguments (envtest's set; `--unsafe-no-fsync` because the data is thrown away).
pub fn etcd_args(data_dir: &Path, client_port: u16, peer_port: u16) -> Vec<String> {
    vec![
        format!("--data-dir={}", data_dir.display()),
        format!("--listen-client-urls=http://127.0.0.1:{client_port}"),
        format!("--advertise-client-urls=http://127.0.0.1:{client_port}"),
        format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
        format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
        format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
        "--unsafe-no-fsync=true".into(),
        "--log-level=warn".into(),
        "--quota-backend-bytes=4294967296".into(),
    ]
}

/// The audit policy: full bodies of the writes to our API group and to Shoots (reads, whose
/// answers are whole lists, only as metadata), metadata only for anything that carries
/// credentials (Secrets, InternalSecrets, kubeconfig and token requests), none for lease and
/// event noise.
pub const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  resources: [{group: "coordination.k8s.io"}, {group: "", resources: ["events"]}]
- level: Metadata
  resources:
  - {group: "", resources: ["secrets", "serviceaccounts/token"]}
  - {group: "core.gardener.cloud", resources: ["internalsecrets", "shoots/adminkubeconfig", "shoots/viewerkubeconfig"]}
- level: Metadata
  verbs: ["get", "list", "watch"]
  resources: [{group: "infrastructuremanager.kyma-project.io"}, {group: "core.gardener.cloud", resources: ["shoots", "shoots/status"]}]
- level: RequestResponse
  resources: [{group: "infrastructuremanager.kyma-project.io"}, {group: "core.gardener.cloud", resources: ["shoots", "shoots/status"]}]
- level: Metadata
"#;

/// An AdmissionConfiguration in which both webhook admission plugins read the credentials
/// they present to webhooks from `kubeconfig` ([`webhook_client_kubeconfig`]).
pub fn admission_config(kubeconfig: &Path) -> String {
    let plugin = |name: &str| {
        format!(
            "- name: {name}\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: {}\n",
            kubeconfig.display()
        )
    };
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n{}{}",
        plugin("ValidatingAdmissionWebhook"),
        plugin("MutatingAdmissionWebhook")
    )
}

/// The kubeconfig of the webhook admission plugins: the client certificate `cert`/`key` for
/// every webhook host (user `*`).
pub fn webhook_client_kubeconfig(cert: &Path, key: &Path) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nusers:\n- name: \"*\"\n  user:\n    client-certificate: {}\n    client-key: {}\n",
        cert.display(),
        key.display()
    )
}
