//! Dedicated audit logging (upstream's `--dedicated-audit-logging-enabled`): which `AuditLog`
//! of KALM's pool a Runtime gets, how it is reserved, claimed and released, what the Shoot's
//! audit-log tenant becomes and which read credentials go into the runtime cluster. Pure
//! decisions; the controller lists, patches and copies.
//!
//! A Runtime is known to the pool by its runtime ID. Reservation (labels) happens before the
//! Shoot is created, the claim (`spec.assignedToRuntimeID`) once the runtime cluster is set up
//! or, for a Runtime that exists already, when it asks for dedicated logging; deletion marks
//! the claimed `AuditLog` orphaned and returns a reservation that was never claimed.

use crate::api::Runtime;
use crate::api::audit_log::{AuditLog, state};
use crate::config::AuditLogTenant;
use crate::names;
use serde_json::{Value, json};
use std::borrow::Borrow;

/// Label naming the runtime ID an `AuditLog` is reserved for (upstream's).
pub const LABEL_RESERVED_FOR_RUNTIME_ID: &str = "reserved-for-runtime-id";
/// Label with the Unix time of the reservation (upstream's).
pub const LABEL_RESERVED_AT: &str = "reserved-for-runtime-at";
/// The Secret with the read credentials in the runtime cluster (upstream's name).
pub const READ_CREDENTIALS_SECRET: &str = "auditlog-read-credentials";
/// Namespace of [`READ_CREDENTIALS_SECRET`] in the runtime cluster.
pub const READ_CREDENTIALS_NAMESPACE: &str = "kyma-system";

/// Why a Runtime cannot have (or use) its dedicated audit log. Messages name objects, never
/// the content of a Secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuditLogError {
    /// The runtime ID is not the Runtime's own: another Runtime's `AuditLog` could be taken.
    #[error(
        "the label {label} ({id:?}) must equal the Runtime's name ({name:?}) for dedicated audit logging"
    )]
    ForeignRuntimeId {
        /// The label.
        label: &'static str,
        /// Its value.
        id: String,
        /// The Runtime's name.
        name: String,
    },
    /// Nothing in the pool for the region (upstream's message).
    #[error("no available AuditLogCR in the pool for region {region}")]
    PoolEmpty {
        /// The Runtime's region.
        region: String,
    },
    /// The chosen `AuditLog` lacks a field KALM fills in.
    #[error("AuditLog {name} has no {field} yet")]
    Incomplete {
        /// The `AuditLog`.
        name: String,
        /// The missing field.
        field: &'static str,
    },
    /// The read-credentials Secret is one the Runtime must not get.
    #[error("AuditLog {name}: read credentials Secret {secret:?} refused: {why}")]
    SecretRefused {
        /// The `AuditLog`.
        name: String,
        /// The Secret named in `spec.config.readCredsSecretName`.
        secret: String,
        /// Why.
        why: &'static str,
    },
}

/// Whether a Runtime asks for dedicated audit logging (`spec.auditLogAccessEnabled`).
pub fn requested(runtime: &Runtime) -> bool {
    runtime.spec.audit_log_access_enabled == Some(true)
}

/// The runtime ID under which `runtime` is known to the pool: its own
/// ([`Runtime::own_runtime_id`], the rule the webhook and the other reconcilers apply). Names
/// are unique in the namespace, labels are not: a second Runtime carrying the label of another
/// would otherwise get that Runtime's `AuditLog` and read credentials.
pub fn runtime_id(runtime: &Runtime) -> Result<&str, AuditLogError> {
    runtime
        .own_runtime_id()
        .map_err(|foreign| AuditLogError::ForeignRuntimeId {
            label: names::LABEL_RUNTIME_ID,
            id: foreign.label,
            name: foreign.name,
        })
}

/// Where a Runtime stands with the pool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pick<'a> {
    /// Assigned to the Runtime.
    Claimed(&'a AuditLog),
    /// Reserved for it (labels), not assigned yet.
    Reserved(&'a AuditLog),
    /// Free and serving its region: may be reserved or claimed.
    Available(&'a AuditLog),
    /// Free in the pool, but the Runtime's own Shoot writes to its tenant already: the claim
    /// was lost (a KCP restored from a backup taken before it). Claimed again.
    Lost(&'a AuditLog),
}

/// Which Shoot writes to an `AuditLog`'s tenant already: its `auditlog-credentials` resource
/// names the stack's `spec.config.gardenerSecretName`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TenantUse {
    /// No Shoot.
    Unused,
    /// The Shoot of the Runtime asking, and no other.
    ByThisRuntime,
    /// Another Runtime's Shoot (its name).
    ByOther(String),
}

impl<'a> Pick<'a> {
    /// The `AuditLog`.
    pub fn audit_log(self) -> &'a AuditLog {
        match self {
            Self::Claimed(a) | Self::Reserved(a) | Self::Available(a) | Self::Lost(a) => a,
        }
    }
}

fn name(a: &AuditLog) -> &str {
    a.metadata.name.as_deref().unwrap_or_default()
}

fn orphaned(a: &AuditLog) -> bool {
    a.spec.orphaned == Some(true)
}

fn assignee(a: &AuditLog) -> Option<&str> {
    a.spec
        .assigned_to_runtime_id
        .as_deref()
        .filter(|s| !s.is_empty())
}

fn reserved_for(a: &AuditLog) -> Option<&str> {
    a.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_RESERVED_FOR_RUNTIME_ID))
        .map(String::as_str)
}

/// The `AuditLog` of `runtime_id`: the one assigned to it, else the one reserved for it, else
/// a free one whose tenant the Runtime's Shoot writes to already ([`Pick::Lost`]), else (when
/// `take_new`) the first free one serving `region` by name whose tenant no Shoot writes to.
/// Orphaned ones belong to a Runtime that is gone and are never picked; neither is one
/// reserved for this runtime ID but assigned to another, nor a free one another Runtime's Shoot
/// writes to (the pool lost that claim, as in a KCP restored from a backup: handing it out
/// would let a second customer read the first one's audit logs). `tenant_use` is asked once
/// for each free `AuditLog`.
pub fn pick<'a>(
    pool: &'a [impl Borrow<AuditLog>],
    runtime_id: &str,
    region: &str,
    take_new: bool,
    tenant_use: impl Fn(&AuditLog) -> TenantUse,
) -> Option<Pick<'a>> {
    let mut live: Vec<&AuditLog> = pool
        .iter()
        .map(Borrow::borrow)
        .filter(|a| !orphaned(a))
        .collect();
    live.sort_by(|a, b| name(a).cmp(name(b)));
    if let Some(a) = live.iter().find(|a| assignee(a) == Some(runtime_id)) {
        return Some(Pick::Claimed(a));
    }
    if let Some(a) = live
        .iter()
        .find(|a| reserved_for(a) == Some(runtime_id) && assignee(a).is_none())
    {
        return Some(Pick::Reserved(a));
    }
    let mut available = None;
    for a in live
        .into_iter()
        .filter(|a| assignee(a).is_none() && reserved_for(a).is_none())
    {
        match tenant_use(a) {
            TenantUse::ByThisRuntime => return Some(Pick::Lost(a)),
            TenantUse::Unused if take_new && available.is_none() => {
                let st = a.status.as_ref().map(|s| s.state.as_str()).unwrap_or("");
                if (st == state::SIEM_APPROVED || st == state::REGISTRATION_READY)
                    && a.spec.regions.iter().any(|r| r == region)
                {
                    available = Some(a);
                }
            }
            _ => {}
        }
    }
    available.map(Pick::Available)
}

/// The Secret with the write credentials of `a`'s tenant, which a Shoot using it names.
pub fn write_secret(a: &AuditLog) -> Option<&str> {
    a.spec
        .config
        .as_ref()
        .and_then(|c| c.gardener_secret_name.as_deref())
        .filter(|s| !s.is_empty())
}

/// `metadata.resourceVersion` as a precondition: a concurrent change of the `AuditLog` makes
/// the patch fail with a conflict instead of two Runtimes taking the same one.
fn precondition(a: &AuditLog) -> Value {
    json!(a.metadata.resource_version)
}

/// Merge patch reserving `a` for `runtime_id` at `now_unix` (upstream's labels).
pub fn reserve_patch(a: &AuditLog, runtime_id: &str, now_unix: i64) -> Value {
    json!({"metadata": {
        "resourceVersion": precondition(a),
        "labels": {
            LABEL_RESERVED_FOR_RUNTIME_ID: runtime_id,
            LABEL_RESERVED_AT: now_unix.to_string(),
        },
    }})
}

/// Merge patch assigning `a` to `runtime_id`; the reservation labels are set too, so a claim
/// without an earlier reservation (an existing Runtime) looks like one that had it.
pub fn claim_patch(a: &AuditLog, runtime_id: &str, now_unix: i64) -> Value {
    let mut labels = serde_json::Map::new();
    if reserved_for(a) != Some(runtime_id) {
        labels.insert(LABEL_RESERVED_FOR_RUNTIME_ID.into(), json!(runtime_id));
        labels.insert(LABEL_RESERVED_AT.into(), json!(now_unix.to_string()));
    }
    json!({
        "metadata": {"resourceVersion": precondition(a), "labels": labels},
        "spec": {"assignedToRuntimeID": runtime_id},
    })
}

/// What deleting a Runtime does to one `AuditLog`.
#[derive(Clone, Debug, PartialEq)]
pub struct Release {
    /// The `AuditLog`.
    pub name: String,
    /// The merge patch.
    pub patch: Value,
}

/// The `AuditLog`s to release when `runtime_id`'s Runtime is deleted: the assigned one is
/// marked orphaned (KALM keeps its logs for the retention period), a reservation never
/// claimed loses its labels and returns to the pool.
pub fn releases(pool: &[impl Borrow<AuditLog>], runtime_id: &str) -> Vec<Release> {
    pool.iter()
        .map(Borrow::borrow)
        .filter(|a| !orphaned(a))
        .filter_map(|a| {
            let patch = if assignee(a) == Some(runtime_id) {
                json!({"metadata": {"resourceVersion": precondition(a)},
                       "spec": {"orphaned": true}})
            } else if assignee(a).is_none() && reserved_for(a) == Some(runtime_id) {
                json!({"metadata": {"resourceVersion": precondition(a), "labels": {
                    LABEL_RESERVED_FOR_RUNTIME_ID: null,
                    LABEL_RESERVED_AT: null,
                }}})
            } else {
                return None;
            };
            Some(Release {
                name: name(a).to_owned(),
                patch,
            })
        })
        .collect()
}

/// The Shoot's audit-log tenant from an `AuditLog`: the subaccount as tenant, the service URL
/// and the Gardener Secret with the write credentials.
pub fn tenant(a: &AuditLog) -> Result<AuditLogTenant, AuditLogError> {
    let missing = |field| AuditLogError::Incomplete {
        name: name(a).to_owned(),
        field,
    };
    let config = a.spec.config.as_ref();
    let filled = |v: Option<&String>| v.filter(|s| !s.is_empty()).cloned();
    Ok(AuditLogTenant {
        tenant_id: filled(a.spec.subaccount_id.as_ref())
            .ok_or_else(|| missing("spec.subaccountID"))?,
        service_url: filled(config.and_then(|c| c.service_url.as_ref()))
            .ok_or_else(|| missing("spec.config.serviceURL"))?,
        secret_name: filled(config.and_then(|c| c.gardener_secret_name.as_ref()))
            .ok_or_else(|| missing("spec.config.gardenerSecretName"))?,
    })
}

/// The Secret (in the `AuditLog`'s namespace) whose data go into the runtime cluster as the
/// read credentials of `chosen`, the `AuditLog` of `runtime_id`. Refused: a Secret another
/// `AuditLog` of the pool names (the credentials of another stack), and the Secrets the
/// infrastructure manager keeps there itself (admin kubeconfigs of runtime clusters).
pub fn read_credentials_source<'a>(
    pool: &[impl Borrow<AuditLog>],
    chosen: &'a AuditLog,
) -> Result<&'a str, AuditLogError> {
    let secret = chosen
        .spec
        .config
        .as_ref()
        .and_then(|c| c.read_creds_secret_name.as_deref())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| AuditLogError::Incomplete {
            name: name(chosen).to_owned(),
            field: "spec.config.readCredsSecretName",
        })?;
    let refuse = |why| AuditLogError::SecretRefused {
        name: name(chosen).to_owned(),
        secret: secret.to_owned(),
        why,
    };
    let shared = pool.iter().map(Borrow::borrow).any(|other: &AuditLog| {
        name(other) != name(chosen)
            && other.spec.config.as_ref().is_some_and(|c| {
                c.read_creds_secret_name.as_deref() == Some(secret)
                    || c.gardener_secret_name.as_deref() == Some(secret)
            })
    });
    if shared {
        return Err(refuse("another AuditLog names it"));
    }
    if secret.starts_with(&names::kubeconfig_secret_name("")) {
        return Err(refuse("it is a runtime cluster's kubeconfig Secret"));
    }
    Ok(secret)
}

/// Whether the Secret read as the source of the read credentials may be copied into the
/// runtime cluster, whose customer is its admin. KALM's read credentials are an `Opaque`
/// Secret of OAuth client data. Whoever may write an `AuditLog` names the Secret, so the
/// control plane's own credentials are refused: a Secret the infrastructure manager wrote
/// (label `operator.kyma-project.io/managed-by`: kubeconfigs, copies), a Secret of another type
/// (ServiceAccount tokens, TLS keys, image pull credentials), one holding a kubeconfig (the
/// Gardener credentials) and the webhook's certificate Secret.
pub fn check_source_secret(
    audit_log: &AuditLog,
    secret: &k8s_openapi::api::core::v1::Secret,
) -> Result<(), AuditLogError> {
    let refuse = |why| {
        Err(AuditLogError::SecretRefused {
            name: name(audit_log).to_owned(),
            secret: secret.metadata.name.clone().unwrap_or_default(),
            why,
        })
    };
    let ours = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(names::LABEL_MANAGED_BY))
        .is_some_and(|v| v == names::MANAGED_BY_INFRASTRUCTURE_MANAGER);
    if ours {
        return refuse("the infrastructure manager wrote it");
    }
    if secret.type_.as_deref().is_some_and(|t| t != "Opaque") {
        return refuse("it is not an Opaque Secret");
    }
    // The webhook keeps its CA and serving key in an Opaque Secret of its own. A private key
    // as such is not refused: read credentials may be X.509 client credentials.
    let webhook_certificate = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/managed-by"))
        .is_some_and(|v| v == WEBHOOK_FIELD_MANAGER);
    if webhook_certificate {
        return refuse("it is the admission webhook's certificate");
    }
    for value in secret.data.iter().flat_map(|d| d.values()) {
        let value = value.0.as_slice();
        if contains(value, b"clusters")
            && (contains(value, b"kind: Config") || contains(value, b"\"Config\""))
        {
            return refuse("it holds a kubeconfig");
        }
    }
    Ok(())
}

/// The label value the webhook's certificate Secret carries (`app.kubernetes.io/managed-by`,
/// the webhook's default `--field-manager`).
const WEBHOOK_FIELD_MANAGER: &str = "kim-webhook";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The read-credentials Secret for the runtime cluster, for server-side apply: the source's
/// `data` and `type`, upstream's name, namespace and label.
pub fn read_credentials_secret(
    data: Option<&std::collections::BTreeMap<String, k8s_openapi::ByteString>>,
    type_: Option<&str>,
) -> Value {
    let mut secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": READ_CREDENTIALS_SECRET,
            "namespace": READ_CREDENTIALS_NAMESPACE,
            "labels": {names::LABEL_MANAGED_BY: names::MANAGED_BY_INFRASTRUCTURE_MANAGER},
        },
        "data": data.cloned().unwrap_or_default(),
    });
    if let Some(t) = type_ {
        secret["type"] = json!(t);
    }
    secret
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::api::audit_log::{AuditLogConfig, AuditLogSpec, AuditLogStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn audit_log(name: &str, st: &str, regions: &[&str]) -> AuditLog {
        AuditLog {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            spec: AuditLogSpec {
                platform_region: "cf-eu10".into(),
                regions: regions.iter().map(|r| (*r).to_owned()).collect(),
                subaccount_id: Some(format!("sa-{name}")),
                config: Some(AuditLogConfig {
                    service_url: Some("https://auditlog.example".into()),
                    gardener_secret_name: Some(format!("write-{name}")),
                    read_creds_secret_name: Some(format!("read-{name}")),
                }),
                ..Default::default()
            },
            status: Some(AuditLogStatus { state: st.into() }),
        }
    }

    fn reserved(mut a: AuditLog, id: &str) -> AuditLog {
        a.metadata.labels =
            Some([(LABEL_RESERVED_FOR_RUNTIME_ID.to_owned(), id.to_owned())].into());
        a
    }

    fn assigned(mut a: AuditLog, id: &str) -> AuditLog {
        a.spec.assigned_to_runtime_id = Some(id.into());
        a
    }

    fn picked(p: Option<Pick<'_>>) -> Option<(&'static str, String)> {
        p.map(|p| {
            let kind = match p {
                Pick::Claimed(_) => "claimed",
                Pick::Reserved(_) => "reserved",
                Pick::Available(_) => "available",
                Pick::Lost(_) => "lost",
            };
            (kind, name(p.audit_log()).to_owned())
        })
    }

    #[test]
    fn a_free_audit_log_of_the_region_in_a_ready_state_is_available() {
        let pool = vec![
            audit_log("a", "Pending", &["eu-central-1"]),
            audit_log("b", "SiemApproved", &["us-east-1"]),
            audit_log("d", "RegistrationReady", &["eu-central-1"]),
            audit_log("c", "SiemApproved", &["eu-west-1", "eu-central-1"]),
            assigned(audit_log("0", "Assigned", &["eu-central-1"]), "other"),
            reserved(audit_log("1", "SiemApproved", &["eu-central-1"]), "other"),
        ];
        assert_eq!(
            picked(pick(&pool, "rt", "eu-central-1", true, unused)),
            Some(("available", "c".into()))
        );
        assert_eq!(pick(&pool, "rt", "eu-central-1", false, unused), None);
        assert_eq!(pick(&pool, "rt", "ap-south-1", true, unused), None);
    }

    #[test]
    fn the_runtimes_own_claim_comes_before_its_reservation_and_the_pool() {
        let pool = vec![
            audit_log("a", "SiemApproved", &["r"]),
            reserved(audit_log("b", "SiemApproved", &["r"]), "rt"),
            assigned(audit_log("c", "Assigned", &["x"]), "rt"),
        ];
        assert_eq!(
            picked(pick(&pool, "rt", "r", true, unused)),
            Some(("claimed", "c".into()))
        );
        assert_eq!(
            picked(pick(&pool[..2], "rt", "r", false, unused)),
            Some(("reserved", "b".into()))
        );
    }

    fn unused(_: &AuditLog) -> TenantUse {
        TenantUse::Unused
    }

    /// Shoots as the controller's cache holds them: (shoot's audit-log Secret, whose).
    fn used_by<'s>(shoots: &'s [(&'s str, TenantUse)]) -> impl Fn(&AuditLog) -> TenantUse + 's {
        move |a| {
            shoots
                .iter()
                .find(|(secret, _)| write_secret(a) == Some(*secret))
                .map_or(TenantUse::Unused, |(_, u)| u.clone())
        }
    }

    /// A stack that looks free while another Runtime's Shoot writes to its tenant (its claim
    /// lost in a KCP restored from a backup) is never handed out; the Runtime whose Shoot
    /// writes to it gets it back, asked for or not.
    #[test]
    fn a_free_stack_a_shoot_writes_to_goes_only_to_that_shoots_runtime() {
        let pool = vec![
            audit_log("a", "SiemApproved", &["r"]),
            audit_log("b", "SiemApproved", &["r"]),
        ];
        let others = [("write-a", TenantUse::ByOther("shoot-x".into()))];
        assert_eq!(
            picked(pick(&pool, "rt", "r", true, used_by(&others))),
            Some(("available", "b".into()))
        );
        assert_eq!(pick(&pool[..1], "rt", "r", true, used_by(&others)), None);
        let mine = [
            ("write-a", TenantUse::ByOther("shoot-x".into())),
            ("write-b", TenantUse::ByThisRuntime),
        ];
        for take_new in [true, false] {
            assert_eq!(
                picked(pick(&pool, "rt", "r", take_new, used_by(&mine))),
                Some(("lost", "b".into()))
            );
        }
        // A claim or reservation of its own still comes first.
        let pool = vec![
            audit_log("b", "SiemApproved", &["r"]),
            reserved(audit_log("c", "SiemApproved", &["r"]), "rt"),
        ];
        assert_eq!(
            picked(pick(&pool, "rt", "r", true, used_by(&mine))),
            Some(("reserved", "c".into()))
        );
    }

    #[test]
    fn orphaned_and_foreign_claims_are_never_picked() {
        let mut gone = assigned(audit_log("a", "Orphaned", &["r"]), "rt");
        gone.spec.orphaned = Some(true);
        // Reserved for us by label, but assigned to another Runtime.
        let taken = assigned(reserved(audit_log("b", "Assigned", &["r"]), "rt"), "other");
        let pool = vec![gone, taken];
        assert_eq!(pick(&pool, "rt", "r", true, unused), None);
    }

    #[test]
    fn patches_carry_the_resource_version_as_precondition() {
        let a = audit_log("a", "SiemApproved", &["r"]);
        let p = reserve_patch(&a, "rt", 1700);
        assert_eq!(p["metadata"]["resourceVersion"], "7");
        assert_eq!(p["metadata"]["labels"][LABEL_RESERVED_FOR_RUNTIME_ID], "rt");
        assert_eq!(p["metadata"]["labels"][LABEL_RESERVED_AT], "1700");
        let c = claim_patch(&a, "rt", 1800);
        assert_eq!(c["spec"]["assignedToRuntimeID"], "rt");
        assert_eq!(c["metadata"]["resourceVersion"], "7");
        assert_eq!(c["metadata"]["labels"][LABEL_RESERVED_AT], "1800");
        // A reservation keeps its time.
        let c = claim_patch(&reserved(a, "rt"), "rt", 1800);
        assert_eq!(c["metadata"]["labels"], json!({}));
    }

    #[test]
    fn deletion_orphans_the_claim_and_returns_an_unclaimed_reservation() {
        let pool = vec![
            assigned(audit_log("a", "Assigned", &["r"]), "rt"),
            reserved(audit_log("b", "SiemApproved", &["r"]), "rt"),
            assigned(audit_log("c", "Assigned", &["r"]), "other"),
            audit_log("d", "SiemApproved", &["r"]),
        ];
        let r = releases(&pool, "rt");
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(r[0].name, "a");
        assert_eq!(r[0].patch["spec"]["orphaned"], true);
        assert_eq!(r[1].name, "b");
        assert_eq!(
            r[1].patch["metadata"]["labels"][LABEL_RESERVED_FOR_RUNTIME_ID],
            Value::Null
        );
        let mut done = pool[0].clone();
        done.spec.orphaned = Some(true);
        assert!(releases(&[done], "rt").is_empty());
    }

    #[test]
    fn the_tenant_is_the_subaccount_url_and_write_secret() {
        let a = audit_log("a", "Assigned", &["r"]);
        assert_eq!(
            tenant(&a),
            Ok(AuditLogTenant {
                tenant_id: "sa-a".into(),
                service_url: "https://auditlog.example".into(),
                secret_name: "write-a".into(),
            })
        );
        let mut b = a.clone();
        b.spec.subaccount_id = None;
        assert_eq!(
            tenant(&b).map_err(|e| e.to_string()),
            Err("AuditLog a has no spec.subaccountID yet".into())
        );
    }

    #[test]
    fn read_credentials_of_another_stack_or_a_kubeconfig_are_refused() {
        let a = audit_log("a", "Assigned", &["r"]);
        assert_eq!(
            read_credentials_source(std::slice::from_ref(&a), &a),
            Ok("read-a")
        );
        let mut b = audit_log("b", "Assigned", &["r"]);
        b.spec.config.as_mut().unwrap().read_creds_secret_name = Some("read-a".into());
        assert!(matches!(
            read_credentials_source(&[a.clone(), b.clone()], &b),
            Err(AuditLogError::SecretRefused { .. })
        ));
        b.spec.config.as_mut().unwrap().read_creds_secret_name = Some("write-a".into());
        assert!(read_credentials_source(&[a.clone(), b.clone()], &b).is_err());
        b.spec.config.as_mut().unwrap().read_creds_secret_name = Some("kubeconfig-rt".into());
        assert!(read_credentials_source(&[b.clone()], &b).is_err());
        b.spec.config.as_mut().unwrap().read_creds_secret_name = None;
        assert!(matches!(
            read_credentials_source(&[b.clone()], &b),
            Err(AuditLogError::Incomplete { .. })
        ));
    }

    #[test]
    fn only_read_credentials_are_copied_never_the_control_planes_own() {
        use k8s_openapi::ByteString;
        use k8s_openapi::api::core::v1::Secret;
        let a = audit_log("a", "Assigned", &["r"]);
        let secret = |type_: Option<&str>, key: &str, value: &str| Secret {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("read-a".into()),
                ..Default::default()
            },
            type_: type_.map(str::to_owned),
            data: Some([(key.to_owned(), ByteString(value.as_bytes().to_vec()))].into()),
            ..Default::default()
        };
        let oauth = secret(Some("Opaque"), "clientsecret", "s3cr3t");
        assert_eq!(check_source_secret(&a, &oauth), Ok(()));
        assert_eq!(
            check_source_secret(&a, &secret(None, "clientid", "id")),
            Ok(())
        );
        let why = |s: &Secret| match check_source_secret(&a, s) {
            Err(AuditLogError::SecretRefused { why, secret, .. }) => {
                assert_eq!(secret, "read-a");
                why
            }
            other => panic!("{other:?}"),
        };
        let mut ours = oauth.clone();
        ours.metadata.labels = Some(
            [(
                names::LABEL_MANAGED_BY.to_owned(),
                names::MANAGED_BY_INFRASTRUCTURE_MANAGER.to_owned(),
            )]
            .into(),
        );
        assert_eq!(why(&ours), "the infrastructure manager wrote it");
        for type_ in [
            "kubernetes.io/service-account-token",
            "kubernetes.io/tls",
            "kubernetes.io/dockerconfigjson",
        ] {
            assert_eq!(
                why(&secret(Some(type_), "x", "y")),
                "it is not an Opaque Secret"
            );
        }
        let kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: garden\n";
        assert_eq!(
            why(&secret(Some("Opaque"), "kubeconfig", kubeconfig)),
            "it holds a kubeconfig"
        );
        let json_kubeconfig = r#"{"apiVersion":"v1","kind":"Config","clusters":[]}"#;
        assert_eq!(
            why(&secret(None, "config", json_kubeconfig)),
            "it holds a kubeconfig"
        );
        // X.509 read credentials hold a key; the webhook's certificate Secret is refused by
        // its label.
        let key = "-----BEGIN EC PRIVATE KEY-----\nMHc...\n-----END EC PRIVATE KEY-----\n";
        assert_eq!(
            check_source_secret(&a, &secret(Some("Opaque"), "key", key)),
            Ok(())
        );
        let mut webhook = secret(Some("Opaque"), "ca.key", key);
        webhook.metadata.labels = Some(
            [(
                "app.kubernetes.io/managed-by".to_owned(),
                "kim-webhook".to_owned(),
            )]
            .into(),
        );
        assert_eq!(why(&webhook), "it is the admission webhook's certificate");
    }

    #[test]
    fn the_runtime_id_must_be_the_runtimes_name() {
        let mut rt = Runtime::default();
        rt.metadata.name = Some("rt-1".into());
        rt.metadata.labels = Some([(names::LABEL_RUNTIME_ID.to_owned(), "rt-1".to_owned())].into());
        assert_eq!(runtime_id(&rt), Ok("rt-1"));
        rt.metadata.labels =
            Some([(names::LABEL_RUNTIME_ID.to_owned(), "victim".to_owned())].into());
        assert!(matches!(
            runtime_id(&rt),
            Err(AuditLogError::ForeignRuntimeId { .. })
        ));
        // As the webhook admits it: KEB names a Runtime after its lower-cased runtime ID.
        rt.metadata.labels = Some([(names::LABEL_RUNTIME_ID.to_owned(), "RT-1".to_owned())].into());
        assert_eq!(runtime_id(&rt), Ok("RT-1"));
        rt.metadata.labels = None;
        assert_eq!(runtime_id(&rt), Ok("rt-1"), "no label: the name");
        rt.metadata.name = None;
        assert!(runtime_id(&rt).is_err());
    }

    #[test]
    fn the_copied_secret_has_upstreams_name_label_and_the_source_data() {
        let data = std::collections::BTreeMap::from([(
            "clientid".to_owned(),
            k8s_openapi::ByteString(b"id".to_vec()),
        )]);
        let s = read_credentials_secret(Some(&data), Some("Opaque"));
        assert_eq!(s["metadata"]["name"], "auditlog-read-credentials");
        assert_eq!(s["metadata"]["namespace"], "kyma-system");
        assert_eq!(
            s["metadata"]["labels"]["operator.kyma-project.io/managed-by"],
            "infrastructure-manager"
        );
        assert_eq!(s["data"]["clientid"], "aWQ=");
        assert_eq!(s["type"], "Opaque");
    }
}
