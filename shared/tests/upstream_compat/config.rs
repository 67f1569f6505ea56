//! Upstream's own configuration test files (the audit-log tenants and maintenance windows of its
//! controller tests) load unchanged next to a converter configuration with only upstream's keys.

use kim_shared::config::{AuditLogLookupError, ConfigPaths, KimConfig, ProviderKind};

/// A converter configuration with only upstream's keys, as upstream's docs describe it.
const UPSTREAM_CONVERTER: &str = include_str!("../core/data/upstream_converter_config.json");

fn upstream(path: &str) -> std::path::PathBuf {
    let p = crate::baseline().join(path);
    assert!(p.exists(), "upstream fixture {} is missing", p.display());
    p
}

#[test]
fn upstreams_test_files_load_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let converter = dir.path().join("converter_config.json");
    std::fs::write(&converter, UPSTREAM_CONVERTER).unwrap();
    let paths = ConfigPaths {
        converter_config: converter,
        audit_log_tenants: Some(upstream(
            "internal/controller/runtime/testdata/auditConfig.json",
        )),
        maintenance_windows: Some(upstream(
            "internal/controller/runtime/testdata/maintenanceWindow.yaml",
        )),
    };
    let config = KimConfig::load(&paths).unwrap_or_else(|e| panic!("{e}"));

    // Without `kim`, nothing is restricted.
    assert!(config.kim.providers.is_empty());
    assert!(config.provider(ProviderKind::Aws).is_none());
    assert_eq!(config.cloud_profile_name(ProviderKind::Gcp), "gcp");
    assert_eq!(
        config.default_machine_image(ProviderKind::Aws).version,
        "1592.1.0"
    );
    assert_eq!(config.default_kubernetes_version().to_string(), "1.29");
    assert!(config.converter.provider.aws.enable_imds_v2);
    assert!(!config.converter.dns.is_gardener_internal());

    let tenant = config.audit_log_tenant("aws", "eu-central-1").unwrap();
    assert_eq!(tenant.tenant_id, "79c64792-9c1e-4c1b-9941-ef7560dd3eae");
    assert_eq!(tenant.service_url, "https://auditlog.example.com:3001");
    assert_eq!(tenant.secret_name, "auditlog-secret");
    assert_eq!(
        config.audit_log_tenant("gcp", "europe-west3").unwrap_err(),
        AuditLogLookupError::MissingProvider {
            provider: "gcp".into()
        }
    );
    assert_eq!(
        config
            .audit_log_tenant("aws", "us-east-1")
            .unwrap_err()
            .to_string(),
        "audit logs configuration not found: missing region: 'us-east-1' for providerType: 'aws'"
    );

    // The maintenance file is upstream's ConfigMap manifest; the windows are under data.config.
    let window = config.maintenance_window("eu-central-1").unwrap();
    assert_eq!(
        (window.begin.as_str(), window.end.as_str()),
        ("200000+0000", "000000+0000")
    );
    assert!(config.maintenance_window("us-east-1").is_none());
    assert!(config.warnings().is_empty(), "{:?}", config.warnings());
}
