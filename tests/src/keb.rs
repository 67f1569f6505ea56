//! A corpus of Runtimes shaped exactly as the Kyma Environment Broker (KEB) writes them today:
//! its provisioning step that creates the Runtime (labels, `purpose`, `platformRegion`,
//! `kubernetes.version` as KEB's bare default `1.36`, the main pool `cpu-worker-0` with the
//! machine type KEB resolves from its abstract names, image, volume of the plan, `maxSurge` =
//! zone count, `maxUnavailable: 0`, `additionalWorkers`, networking `calico` with KEB's
//! defaults, control-plane HA only where the plan has a failure tolerance, the default OIDC
//! provider, administrators, filters), its plans (aws, azure, azure_lite, gcp,
//! sap-converged-cloud, alicloud, trial, free, preview, build-runtime-*) and the regions,
//! zones and machine families its provider configuration offers, and the provisioning
//! parameters it accepts (additional worker pools, OIDC lists, ACL, gVisor, dual stack,
//! larger volumes, `maxPods` for allow-listed accounts).
//!
//! One Runtime per plan and shape; [`invalid_variants`] breaks one field of a Runtime in a way
//! Gardener refuses and names the field a refusal must name; [`updates`] are the changes KEB's
//! update step makes to a stored Runtime.

use serde_json::{Value, json};

/// One Runtime of the corpus.
#[derive(Debug, Clone)]
pub struct KebRuntime {
    /// Short name of the case, e.g. `aws-r8i-us-east-1`.
    pub case: &'static str,
    /// KEB's plan name.
    pub plan: &'static str,
    /// The Runtime as KEB sends it (namespace `kcp-system`).
    pub runtime: Value,
}

/// KEB's default OIDC provider (its chart's `oidc` values as the samples carry them).
fn default_oidc() -> Value {
    json!({
        "clientID": "9bd05ed7-a930-44e6-8c79-e6defeb7dec9",
        "issuerURL": "https://kymatest.accounts400.ondemand.com",
        "groupsClaim": "groups",
        "groupsPrefix": "-",
        "signingAlgs": ["RS256"],
        "usernameClaim": "sub",
        "usernamePrefix": "-"
    })
}

/// The Kubernetes version KEB's configuration gives every Runtime.
pub const KEB_KUBERNETES_VERSION: &str = "1.36";
/// The machine image KEB's configuration gives every Runtime.
pub const KEB_IMAGE: (&str, &str) = ("gardenlinux", "1877.8.0");

fn plan_id(plan: &str) -> &'static str {
    match plan {
        "gcp" => "ca6e5357-707f-4565-bbbd-b3ab732597c6",
        "aws" => "361c511f-f939-4621-b228-d0fb79a1fe15",
        "azure" => "4deee563-e5ec-4731-b9b1-53b42d855f0c",
        "azure_lite" => "8cb22518-aa26-44c5-91a0-e669ec9bf443",
        "trial" => "7d55d31d-35ae-4438-bf13-6ffdfa107d9f",
        "sap-converged-cloud" => "03b812ac-c991-4528-b5bd-08b303523a63",
        "free" => "b1a5764e-2ea1-4f95-94c0-2b4538b37b55",
        "preview" => "5cb3d976-b85c-42ea-a636-79cadda109a9",
        "build-runtime-aws" => "6aae0ff3-89f7-4f12-86de-51466145422e",
        "build-runtime-gcp" => "a310cd6b-6452-45a0-935d-d24ab53f9eba",
        "build-runtime-azure" => "499244b4-1bef-48c9-be68-495269899f8e",
        "alicloud" => "9f2c3b4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d",
        "build-runtime-alicloud" => "72efa867-7b54-4d59-8df7-68f4759ff271",
        _ => "00000000-0000-0000-0000-000000000000",
    }
}

/// KEB's `kyma-project.io/provider` label value for a provider type.
fn provider_label(provider: &str) -> &'static str {
    match provider {
        "aws" => "AWS",
        "azure" => "Azure",
        "gcp" => "GCP",
        "openstack" => "SapConvergedCloud",
        "alicloud" => "Alicloud",
        _ => "unknown",
    }
}

/// What one plan and shape decides; everything else KEB writes the same way.
#[derive(Clone)]
struct Shape {
    case: &'static str,
    plan: &'static str,
    provider: &'static str,
    region: &'static str,
    platform_region: &'static str,
    purpose: &'static str,
    machine: &'static str,
    zones: Vec<String>,
    min: i32,
    max: i32,
    volume_type: Option<&'static str>,
    volume_gi: u32,
    /// `Some("zone")` where the plan has a failure tolerance; KEB leaves `controlPlane` out
    /// otherwise.
    failure_tolerance: Option<&'static str>,
}

impl Shape {
    fn new(
        case: &'static str,
        plan: &'static str,
        provider: &'static str,
        region: &'static str,
        machine: &'static str,
        zones: &[&str],
    ) -> Self {
        let trial = matches!(plan, "trial" | "free");
        Shape {
            case,
            plan,
            provider,
            region,
            platform_region: "cf-eu10",
            purpose: if trial { "evaluation" } else { "production" },
            machine,
            zones: zones.iter().map(|z| (*z).to_owned()).collect(),
            min: if trial { 1 } else { 3 },
            max: if trial { 1 } else { 20 },
            volume_type: match provider {
                "aws" => Some("gp3"),
                "azure" => Some("StandardSSD_LRS"),
                "gcp" => Some("pd-balanced"),
                "alicloud" => Some("cloud_essd"),
                _ => None,
            },
            volume_gi: 80,
            failure_tolerance: (!trial && plan != "azure_lite").then_some("zone"),
        }
    }

    fn runtime(&self, index: usize) -> Value {
        let id = format!("{:08x}-0000-4000-8000-{:012x}", 0x6b65_6200 + index, index);
        let shoot = format!("c-{:07x}", 0x6b_0000 + index);
        let zones = self.zones.len();
        let mut volume = json!({"size": format!("{}Gi", self.volume_gi)});
        if let Some(t) = self.volume_type {
            volume["type"] = json!(t);
        }
        let mut spec_shoot = json!({
            "name": shoot,
            "purpose": self.purpose,
            "region": self.region,
            "platformRegion": self.platform_region,
            "secretBindingName": format!("kyma-{}", self.provider),
            "enableNvidiaOpenshell": false,
            "kubernetes": {
                "version": KEB_KUBERNETES_VERSION,
                "kubeAPIServer": {"additionalOidcConfig": [default_oidc()]}
            },
            "networking": {
                "type": "calico",
                "nodes": "10.250.0.0/16",
                "pods": "10.96.0.0/13",
                "services": "10.104.0.0/13"
            },
            "provider": {
                "type": self.provider,
                "workers": [{
                    "name": "cpu-worker-0",
                    "machine": {"type": self.machine, "image": {"name": KEB_IMAGE.0, "version": KEB_IMAGE.1}},
                    "volume": volume,
                    "minimum": self.min,
                    "maximum": self.max,
                    "maxSurge": zones,
                    "maxUnavailable": 0,
                    "zones": self.zones
                }],
                "additionalWorkers": []
            }
        });
        if let Some(t) = self.failure_tolerance {
            spec_shoot["controlPlane"] =
                json!({"highAvailability": {"failureTolerance": {"type": t}}});
        }
        json!({
            "apiVersion": "infrastructuremanager.kyma-project.io/v1",
            "kind": "Runtime",
            "metadata": {
                "name": id,
                "namespace": "kcp-system",
                "labels": {
                    "kyma-project.io/instance-id": format!("{:08x}-1111-4000-8000-{:012x}", 0x6b65_6200 + index, index),
                    "kyma-project.io/runtime-id": id,
                    "kyma-project.io/broker-plan-id": plan_id(self.plan),
                    "kyma-project.io/broker-plan-name": self.plan,
                    "kyma-project.io/global-account-id": "ad8bc56a-593e-4212-b219-922d950b1af3",
                    "kyma-project.io/subaccount-id": "e757f23f-0b03-43bd-a843-b92e681780be",
                    "kyma-project.io/shoot-name": shoot,
                    "kyma-project.io/platform-region": self.platform_region,
                    "kyma-project.io/region": self.region,
                    "kyma-project.io/provider": provider_label(self.provider),
                    "operator.kyma-project.io/kyma-name": id
                }
            },
            "spec": {
                "shoot": spec_shoot,
                "security": {
                    "administrators": ["jane.doe@example.com"],
                    "networking": {"filter": {"egress": {"enabled": true}, "ingress": {"enabled": false}}}
                }
            }
        })
    }
}

fn z(region: &str, sep: &str, suffixes: &[&str]) -> Vec<String> {
    suffixes
        .iter()
        .map(|s| format!("{region}{sep}{s}"))
        .collect()
}

/// An additional worker pool as KEB's `CreateAdditionalWorkers` writes it: with `ha` the main
/// pool's zones, else the first one only.
fn pool(name: &str, machine: &str, volume: Value, zones: &[String], ha: bool) -> Value {
    let zones: Vec<&String> = if ha {
        zones.iter().collect()
    } else {
        zones.iter().take(1).collect()
    };
    json!({
        "name": name,
        "machine": {"type": machine, "image": {"name": KEB_IMAGE.0, "version": KEB_IMAGE.1}},
        "volume": volume,
        "minimum": if ha { 3 } else { 0 },
        "maximum": if ha { 6 } else { 1 },
        "maxSurge": zones.len(),
        "maxUnavailable": 0,
        "zones": zones
    })
}

/// A change KEB's provisioning parameters make to the Runtime of a shape.
type Edit = Box<dyn Fn(&mut Value)>;

/// Every plan and shape of the corpus.
pub fn corpus() -> Vec<KebRuntime> {
    let aws_fra = z("eu-central-1", "", &["a", "b", "c"]);
    let mut shapes: Vec<(Shape, Edit)> = Vec::new();
    let plain = || -> Edit { Box::new(|_| {}) };

    // aws: KEB's default machine mi.large resolves to m7i.large.
    shapes.push((
        Shape::new(
            "aws-default",
            "aws",
            "aws",
            "eu-central-1",
            "m7i.large",
            &["eu-central-1b", "eu-central-1a", "eu-central-1c"],
        ),
        plain(),
    ));
    shapes.push((
        Shape::new(
            "aws-custom-networks",
            "aws",
            "aws",
            "eu-central-1",
            "m7i.large",
            &["eu-central-1a", "eu-central-1b", "eu-central-1c"],
        ),
        Box::new(|rt: &mut Value| {
            let net = &mut rt["spec"]["shoot"]["networking"];
            net["nodes"] = json!("10.180.0.0/20");
            net["pods"] = json!("172.16.0.0/13");
            net["services"] = json!("172.24.0.0/14");
        }),
    ));
    shapes.push((
        Shape::new(
            "aws-r8i-us-east-1",
            "aws",
            "aws",
            "us-east-1",
            "r8i.4xlarge",
            &["us-east-1a", "us-east-1d", "us-east-1f"],
        ),
        plain(),
    ));
    shapes.push((
        Shape::new(
            "aws-m6i-16xlarge-tokyo",
            "aws",
            "aws",
            "ap-northeast-1",
            "m6i.16xlarge",
            &["ap-northeast-1a", "ap-northeast-1b", "ap-northeast-1c"],
        ),
        plain(),
    ));
    shapes.push((
        Shape::new(
            "aws-single-zone",
            "aws",
            "aws",
            "ca-central-1",
            "m5.2xlarge",
            &["ca-central-1d"],
        ),
        plain(),
    ));
    {
        let zones = aws_fra.clone();
        shapes.push((
            Shape::new(
                "aws-pools-gpu-storage",
                "aws",
                "aws",
                "eu-central-1",
                "m7i.xlarge",
                &["eu-central-1a", "eu-central-1b", "eu-central-1c"],
            ),
            Box::new(move |rt: &mut Value| {
                rt["spec"]["shoot"]["provider"]["additionalWorkers"] = json!([
                    pool(
                        "gpu",
                        "g6.xlarge",
                        json!({"type": "gp3", "size": "80Gi"}),
                        &zones,
                        false
                    ),
                    pool(
                        "storage",
                        "i7i.large",
                        json!({"type": "gp3", "size": "1500Gi"}),
                        &zones,
                        true
                    ),
                    pool(
                        "compute",
                        "c7i.16xlarge",
                        json!({"type": "gp3", "size": "80Gi"}),
                        &zones,
                        true
                    ),
                    pool(
                        "legacy-gpu",
                        "g4dn.xlarge",
                        json!({"type": "gp3", "size": "80Gi"}),
                        &zones,
                        false
                    ),
                ]);
            }),
        ));
    }
    shapes.push((
        Shape::new(
            "aws-params",
            "aws",
            "aws",
            "eu-central-1",
            "m7i.2xlarge",
            &["eu-central-1a", "eu-central-1b", "eu-central-1c"],
        ),
        Box::new(|rt: &mut Value| {
            let shoot = &mut rt["spec"]["shoot"];
            shoot["kubernetes"]["kubeAPIServer"]["acl"] =
                json!({"allowedCIDRs": ["203.0.113.0/24"]});
            shoot["kubernetes"]["kubeAPIServer"]["additionalOidcConfig"] = json!([default_oidc(), {
                "clientID": "0c9a4f3e-7d21-4b8e-a5f6-2e1d9c8b7a60",
                "issuerURL": "https://idp.customer.example.com/oauth2",
                "groupsClaim": "roles", "groupsPrefix": "acme:",
                "signingAlgs": ["RS256", "ES256"],
                "usernameClaim": "email", "usernamePrefix": "acme:",
                "requiredClaims": {"tenant": "acme"}
            }]);
            shoot["networking"]["dualStack"] = json!(true);
            let main = &mut shoot["provider"]["workers"][0];
            main["cri"] = json!({"name": "containerd", "containerRuntimes": [{"type": "gvisor"}]});
            main["kubernetes"] = json!({"kubelet": {"maxPods": 200}});
            main["volume"]["size"] = json!("2048Gi");
        }),
    ));
    {
        let mut s = Shape::new(
            "aws-eu-access",
            "aws",
            "aws",
            "eu-central-1",
            "m6i.large",
            &["eu-central-1a", "eu-central-1b", "eu-central-1c"],
        );
        s.platform_region = "cf-eu11";
        shapes.push((
            s,
            Box::new(|rt: &mut Value| {
                rt["spec"]["shoot"]["enforceSeedLocation"] = json!(true);
            }),
        ));
    }
    shapes.push((
        Shape::new(
            "preview",
            "preview",
            "aws",
            "eu-central-1",
            "m7i.large",
            &["eu-central-1a", "eu-central-1b", "eu-central-1c"],
        ),
        plain(),
    ));
    shapes.push((
        Shape::new(
            "build-runtime-aws",
            "build-runtime-aws",
            "aws",
            "eu-west-2",
            "m7i.4xlarge",
            &["eu-west-2a", "eu-west-2b", "eu-west-2c"],
        ),
        plain(),
    ));

    // azure
    shapes.push((
        Shape::new(
            "azure-default",
            "azure",
            "azure",
            "westeurope",
            "Standard_D2s_v5",
            &["1", "2", "3"],
        ),
        plain(),
    ));
    shapes.push((
        Shape::new(
            "azure-e-v6",
            "azure",
            "azure",
            "switzerlandnorth",
            "Standard_E8s_v6",
            &["2", "3", "1"],
        ),
        plain(),
    ));
    shapes.push((
        Shape::new(
            "azure-d-v3",
            "azure",
            "azure",
            "eastus",
            "Standard_D8_v3",
            &["1", "2", "3"],
        ),
        plain(),
    ));
    shapes.push((
        Shape::new(
            "azure-d64",
            "azure",
            "azure",
            "japaneast",
            "Standard_D64s_v5",
            &["1", "2", "3"],
        ),
        plain(),
    ));
    shapes.push((
        Shape::new(
            "azure-pools",
            "azure",
            "azure",
            "northeurope",
            "Standard_D4s_v5",
            &["1", "2", "3"],
        ),
        Box::new(|rt: &mut Value| {
            let zones = vec!["1".to_owned(), "2".to_owned(), "3".to_owned()];
            rt["spec"]["shoot"]["provider"]["additionalWorkers"] = json!([
                pool(
                    "gpu",
                    "Standard_NC4as_T4_v3",
                    json!({"type": "StandardSSD_LRS", "size": "80Gi"}),
                    &zones,
                    false
                ),
                pool(
                    "fast",
                    "Standard_F8s_v2",
                    json!({"type": "StandardSSD_LRS", "size": "80Gi"}),
                    &zones,
                    true
                ),
            ]);
        }),
    ));
    shapes.push((
        Shape::new(
            "build-runtime-azure",
            "build-runtime-azure",
            "azure",
            "uksouth",
            "Standard_D48s_v5",
            &["1", "2", "3"],
        ),
        plain(),
    ));
    {
        let mut s = Shape::new(
            "azure-lite",
            "azure_lite",
            "azure",
            "eastus",
            "Standard_D4s_v5",
            &["2"],
        );
        s.min = 2;
        s.max = 10;
        shapes.push((s, plain()));
    }

    // gcp
    shapes.push((
        Shape::new(
            "gcp-default",
            "gcp",
            "gcp",
            "europe-west3",
            "n2-standard-2",
            &["europe-west3-a", "europe-west3-b", "europe-west3-c"],
        ),
        plain(),
    ));
    // KEB's provisioning parameters: custom networks (clear of KEB's seed ranges, which KEB
    // checks), dualStack where KEB's provider configuration offers it, and the audit-log
    // access flag when KEB's auditLogAccess feature is on.
    shapes.push((
        Shape::new(
            "gcp-params",
            "gcp",
            "gcp",
            "europe-west3",
            "n2-standard-4",
            &["europe-west3-a", "europe-west3-b", "europe-west3-c"],
        ),
        Box::new(|rt: &mut Value| {
            rt["spec"]["auditLogAccessEnabled"] = json!(true);
            rt["spec"]["shoot"]["networking"] = json!({
                "type": "calico",
                "nodes": "10.180.0.0/20",
                "pods": "100.64.0.0/12",
                "services": "100.104.0.0/13",
                "dualStack": true
            });
        }),
    ));
    shapes.push((
        Shape::new(
            "gcp-osaka",
            "gcp",
            "gcp",
            "asia-northeast2",
            "n2-standard-64",
            &[
                "asia-northeast2-b",
                "asia-northeast2-a",
                "asia-northeast2-c",
            ],
        ),
        plain(),
    ));
    shapes.push((
        Shape::new(
            "gcp-tel-aviv",
            "gcp",
            "gcp",
            "me-west1",
            "c2d-highcpu-8",
            &["me-west1-a", "me-west1-b", "me-west1-c"],
        ),
        plain(),
    ));
    {
        let mut s = Shape::new(
            "gcp-ksa",
            "gcp",
            "gcp",
            "me-central2",
            "n2-standard-48",
            &["me-central2-a", "me-central2-b", "me-central2-c"],
        );
        s.platform_region = "cf-sa30";
        shapes.push((s, plain()));
    }
    shapes.push((
        Shape::new(
            "gcp-gpu-pool",
            "gcp",
            "gcp",
            "us-central1",
            "n2-standard-8",
            &["us-central1-a", "us-central1-b", "us-central1-c"],
        ),
        Box::new(|rt: &mut Value| {
            let zones = z("us-central1", "-", &["a", "b", "c"]);
            rt["spec"]["shoot"]["provider"]["additionalWorkers"] = json!([
                pool(
                    "gpu",
                    "g2-standard-8",
                    json!({"type": "pd-balanced", "size": "80Gi"}),
                    &zones,
                    false
                ),
                pool(
                    "gpu-big",
                    "g2-standard-48",
                    json!({"type": "pd-ssd", "size": "200Gi"}),
                    &zones,
                    false
                ),
            ]);
        }),
    ));
    shapes.push((
        Shape::new(
            "build-runtime-gcp",
            "build-runtime-gcp",
            "gcp",
            "europe-west4",
            "n2-standard-16",
            &["europe-west4-a", "europe-west4-b", "europe-west4-c"],
        ),
        plain(),
    ));

    // sap-converged-cloud: no volume type, KEB's zones per region.
    shapes.push((
        Shape::new(
            "sap-cc-default",
            "sap-converged-cloud",
            "openstack",
            "eu-de-1",
            "g_c2_m8",
            &["eu-de-1a", "eu-de-1b", "eu-de-1d"],
        ),
        plain(),
    ));
    shapes.push((
        Shape::new(
            "sap-cc-na-us-2",
            "sap-converged-cloud",
            "openstack",
            "na-us-2",
            "g_c12_m48",
            &["na-us-2a", "na-us-2b"],
        ),
        plain(),
    ));
    shapes.push((
        Shape::new(
            "sap-cc-ap-ae-1",
            "sap-converged-cloud",
            "openstack",
            "ap-ae-1",
            "g_c64_m256",
            &["ap-ae-1a"],
        ),
        plain(),
    ));
    shapes.push((
        Shape::new(
            "sap-cc-g-c6",
            "sap-converged-cloud",
            "openstack",
            "ap-au-1",
            "g_c6_m24",
            &["ap-au-1a", "ap-au-1b"],
        ),
        plain(),
    ));

    // alicloud
    shapes.push((
        Shape::new(
            "alicloud-default",
            "alicloud",
            "alicloud",
            "eu-central-1",
            "ecs.g9i.large",
            &["eu-central-1a", "eu-central-1b", "eu-central-1c"],
        ),
        plain(),
    ));
    shapes.push((
        Shape::new(
            "alicloud-eu-west-1",
            "alicloud",
            "alicloud",
            "eu-west-1",
            "ecs.g9i.16xlarge",
            &["eu-west-1a", "eu-west-1b"],
        ),
        plain(),
    ));
    shapes.push((
        Shape::new(
            "build-runtime-alicloud",
            "build-runtime-alicloud",
            "alicloud",
            "ap-southeast-1",
            "ecs.g9i.4xlarge",
            &["ap-southeast-1a", "ap-southeast-1b", "ap-southeast-1c"],
        ),
        plain(),
    ));

    // trial (Azure by default, AWS and GCP by configuration) and free: one zone, 1..1 node,
    // evaluation, no control-plane HA.
    {
        let mut s = Shape::new(
            "trial-azure",
            "trial",
            "azure",
            "westeurope",
            "Standard_D4s_v5",
            &["3"],
        );
        s.volume_type = Some("Standard_LRS");
        shapes.push((s, plain()));
    }
    shapes.push((
        Shape::new(
            "trial-aws",
            "trial",
            "aws",
            "eu-west-1",
            "m7i.xlarge",
            &["eu-west-1b"],
        ),
        plain(),
    ));
    {
        let mut s = Shape::new(
            "trial-gcp",
            "trial",
            "gcp",
            "europe-west3",
            "n2-standard-4",
            &["europe-west3-c"],
        );
        s.volume_type = Some("pd-standard");
        shapes.push((s, plain()));
    }
    shapes.push((
        Shape::new(
            "free-aws",
            "free",
            "aws",
            "eu-central-1",
            "m7i.xlarge",
            &["eu-central-1a"],
        ),
        plain(),
    ));
    {
        let mut s = Shape::new(
            "free-azure",
            "free",
            "azure",
            "eastus",
            "Standard_D4s_v5",
            &["1"],
        );
        s.volume_type = Some("Standard_LRS");
        shapes.push((s, plain()));
    }

    shapes
        .into_iter()
        .enumerate()
        .map(|(i, (shape, edit))| {
            let mut runtime = shape.runtime(i);
            edit(&mut runtime);
            KebRuntime {
                case: shape.case,
                plan: shape.plan,
                runtime,
            }
        })
        .collect()
}

/// One broken Runtime and the field its refusal must name.
#[derive(Debug, Clone)]
pub struct InvalidVariant {
    /// What was broken.
    pub what: &'static str,
    /// The Runtime.
    pub runtime: Value,
    /// The field path the refusal names.
    pub field: &'static str,
}

/// Variants of a corpus Runtime, each with one field Gardener refuses: a region, zone, machine
/// type, volume type, image version or Kubernetes version the landscape does not offer, an
/// expired version, an arm64 machine type on an amd64 pool, an unusable machine type, a
/// malformed node taint or label, an EU platform region in a region without Gardener's
/// `eu-access-only`; and each with one the webhook's policy refuses: a network on a seed
/// network, dualStack on a provider that cannot be dual stack.
pub fn invalid_variants(base: &KebRuntime) -> Vec<InvalidVariant> {
    let provider = base.runtime["spec"]["shoot"]["provider"]["type"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let edit = |what: &'static str, field: &'static str, f: &dyn Fn(&mut Value)| {
        let mut runtime = base.runtime.clone();
        f(&mut runtime);
        InvalidVariant {
            what,
            runtime,
            field,
        }
    };
    let mut out = vec![
        edit("region", "spec.shoot.region", &|rt| {
            rt["spec"]["shoot"]["region"] = json!("mars-central-1");
            rt["metadata"]["labels"]["kyma-project.io/region"] = json!("mars-central-1");
        }),
        edit(
            "machine type",
            "spec.shoot.provider.workers[0].machine.type",
            &|rt| {
                rt["spec"]["shoot"]["provider"]["workers"][0]["machine"]["type"] =
                    json!("x9.enormous");
            },
        ),
        edit(
            "image version",
            "spec.shoot.provider.workers[0].machine.image.version",
            &|rt| {
                rt["spec"]["shoot"]["provider"]["workers"][0]["machine"]["image"]["version"] =
                    json!("1.0.0");
            },
        ),
        edit(
            "expired image version",
            "spec.shoot.provider.workers[0].machine.image.version",
            &|rt| {
                rt["spec"]["shoot"]["provider"]["workers"][0]["machine"]["image"]["version"] =
                    json!("1312.2.0");
            },
        ),
        edit(
            "kubernetes version",
            "spec.shoot.kubernetes.version",
            &|rt| {
                rt["spec"]["shoot"]["kubernetes"]["version"] = json!("1.31");
            },
        ),
        edit(
            "expired kubernetes version",
            "spec.shoot.kubernetes.version",
            &|rt| {
                rt["spec"]["shoot"]["kubernetes"]["version"] = json!("1.32.8");
            },
        ),
        edit(
            "foreign zone",
            "spec.shoot.provider.workers[0].zones[0]",
            &|rt| {
                let zones = &mut rt["spec"]["shoot"]["provider"]["workers"][0]["zones"];
                let zone = zones[0].as_str().unwrap_or_default();
                let foreign = if zone.chars().all(|c| c.is_ascii_digit()) {
                    // Azure zones are numbers; the landscape offers 1 to 3.
                    "7".to_owned()
                } else {
                    format!("{}q", &zone[..zone.len() - 1])
                };
                zones[0] = json!(foreign);
            },
        ),
    ];
    out.push(edit(
        "nodes network on a seed network",
        "spec.shoot.networking.nodes",
        &|rt| {
            rt["spec"]["shoot"]["networking"]["nodes"] = json!("10.242.0.0/16");
        },
    ));
    out.push(edit(
        "node taint effect",
        "spec.shoot.provider.workers[0].taints[0].effect",
        &|rt| {
            rt["spec"]["shoot"]["provider"]["workers"][0]["taints"] =
                json!([{"key": "dedicated", "value": "kyma", "effect": "NoWhere"}]);
        },
    ));
    out.push(edit(
        "node label key",
        "spec.shoot.provider.workers[0].labels[pool type]",
        &|rt| {
            rt["spec"]["shoot"]["provider"]["workers"][0]["labels"] = json!({"pool type": "gpu"});
        },
    ));
    if !matches!(provider.as_str(), "aws" | "gcp") {
        out.push(edit(
            "dualStack on a provider without it",
            "spec.shoot.networking.dualStack",
            &|rt| {
                rt["spec"]["shoot"]["networking"]["dualStack"] = json!(true);
            },
        ));
    }
    if base.runtime["spec"]["shoot"]["provider"]["workers"][0]["volume"]["type"].is_string() {
        out.push(edit(
            "volume type",
            "spec.shoot.provider.workers[0].volume.type",
            &|rt| {
                rt["spec"]["shoot"]["provider"]["workers"][0]["volume"]["type"] = json!("floppy");
            },
        ));
    }
    let arm = match provider.as_str() {
        "aws" => Some("m7g.large"),
        "azure" => Some("Standard_D2ps_v5"),
        "gcp" => Some("t2a-standard-2"),
        "alicloud" => Some("ecs.g8y.large"),
        _ => None,
    };
    if let Some(arm) = arm {
        let mut v = edit(
            "arm64 machine type on an amd64 pool",
            "spec.shoot.provider.workers[0].machine.type",
            &|_| {},
        );
        v.runtime["spec"]["shoot"]["provider"]["workers"][0]["machine"]["type"] = json!(arm);
        // Without an architecture Gardener takes the machine type's; KEB's pools say amd64.
        v.runtime["spec"]["shoot"]["provider"]["workers"][0]["machine"]["architecture"] =
            json!("amd64");
        out.push(v);
    }
    let region = base.runtime["spec"]["shoot"]["region"]
        .as_str()
        .unwrap_or_default();
    if !crate::fixtures::EU_ACCESS_REGIONS.contains(&(provider.as_str(), region)) {
        // The Shoot of an EU platform region carries `eu-access-only`, which this region does
        // not offer.
        out.push(edit(
            "EU platform region outside the EU-access regions",
            "spec.shoot.region",
            &|rt| {
                rt["spec"]["shoot"]["platformRegion"] = json!("cf-eu11");
                rt["metadata"]["labels"]["kyma-project.io/platform-region"] = json!("cf-eu11");
            },
        ));
    }
    // Gardener resolves the pool's `1.35` to the newest supported 1.35 patch (1.35.4 in the
    // landscape), which is higher than the control plane's 1.35.2.
    out.push(edit(
        "pool version resolving above the control plane's",
        "spec.shoot.provider.workers[0].kubernetes.version",
        &|rt| {
            rt["spec"]["shoot"]["kubernetes"]["version"] = json!("1.35.2");
            rt["spec"]["shoot"]["provider"]["workers"][0]["kubernetes"] =
                json!({"version": "1.35"});
        },
    ));
    if provider == "aws" {
        out.push(edit(
            "unusable machine type",
            "spec.shoot.provider.workers[0].machine.type",
            &|rt| {
                rt["spec"]["shoot"]["provider"]["workers"][0]["machine"]["type"] =
                    json!("m4.large");
            },
        ));
    }
    out
}

/// One update KEB's `UpdateRuntimeStep` makes to a stored Runtime (a Get, changes in memory,
/// one full Update), on the corpus' `aws-default` shape.
pub struct KebUpdate {
    /// What the customer or KEB changed.
    pub what: &'static str,
    /// The change, applied to the stored Runtime.
    pub edit: Box<dyn Fn(&mut Value)>,
}

/// KEB's updates of an `aws-default` Runtime, in an order that can be applied one after the
/// other: each is what `update_runtime_step.go` writes for a parameter change the broker
/// accepts.
pub fn updates() -> Vec<KebUpdate> {
    let zones = z("eu-central-1", "", &["a", "b", "c"]);
    let gp3 = json!({"type": "gp3", "size": "80Gi"});
    let update = |what, edit: Box<dyn Fn(&mut Value)>| KebUpdate { what, edit };
    let pools = move |pools: Vec<Value>| -> Box<dyn Fn(&mut Value)> {
        Box::new(move |rt: &mut Value| {
            rt["spec"]["shoot"]["provider"]["additionalWorkers"] = json!(pools);
        })
    };
    vec![
        // `updateKymaWorker`: the resolved type, and the volume KEB computes for it.
        update(
            "machine type of the Kyma worker",
            Box::new(|rt: &mut Value| {
                let w = &mut rt["spec"]["shoot"]["provider"]["workers"][0];
                w["machine"]["type"] = json!("m7i.2xlarge");
                w["volume"]["size"] = json!("112Gi");
            }),
        ),
        update(
            "autoscaler and surge of the Kyma worker",
            Box::new(|rt: &mut Value| {
                let w = &mut rt["spec"]["shoot"]["provider"]["workers"][0];
                w["minimum"] = json!(4);
                w["maximum"] = json!(40);
                w["maxSurge"] = json!(4);
                w["maxUnavailable"] = json!(1);
            }),
        ),
        update(
            "gVisor on the Kyma worker",
            Box::new(|rt: &mut Value| {
                rt["spec"]["shoot"]["provider"]["workers"][0]["cri"] =
                    json!({"name": "containerd", "containerRuntimes": [{"type": "gvisor"}]});
            }),
        ),
        update(
            "maxPods for an allow-listed account",
            Box::new(|rt: &mut Value| {
                rt["spec"]["shoot"]["provider"]["workers"][0]["kubernetes"] =
                    json!({"kubelet": {"maxPods": 200}});
            }),
        ),
        update(
            "additional worker pools added",
            pools(vec![
                pool("worker-ha", "m7i.large", gp3.clone(), &zones, true),
                pool("worker-single", "m7i.xlarge", gp3.clone(), &zones, false),
            ]),
        ),
        update(
            "an additional worker pool changed and one removed",
            pools(vec![{
                let mut p = pool("worker-ha", "m7i.2xlarge", gp3.clone(), &zones, true);
                p["minimum"] = json!(3);
                p["maximum"] = json!(9);
                p
            }]),
        ),
        update("every additional worker pool removed", pools(vec![])),
        // `updateOIDCConfig` with a list: replaced as a whole.
        update(
            "OIDC list replaced",
            Box::new(|rt: &mut Value| {
                rt["spec"]["shoot"]["kubernetes"]["kubeAPIServer"]["additionalOidcConfig"] = json!([
                    default_oidc(),
                    {"clientID": "c1", "issuerURL": "https://idp.customer.example.com",
                     "groupsClaim": "groups", "usernameClaim": "email", "usernamePrefix": "-",
                     "signingAlgs": ["RS256"], "requiredClaims": {"tenant": "acme"}}
                ]);
            }),
        ),
        // `updateOIDCConfig` with an object: KEB changes the first entry in place; `-` removes
        // its JWKS and required claims, and `signingAlgs` is taken as given (none here).
        update(
            "OIDC object with claims removed",
            Box::new(|rt: &mut Value| {
                let first = &mut rt["spec"]["shoot"]["kubernetes"]["kubeAPIServer"]["additionalOidcConfig"]
                    [0];
                if let Some(o) = first.as_object_mut() {
                    o.remove("signingAlgs");
                    o.remove("requiredClaims");
                    o.remove("jwks");
                }
            }),
        ),
        update(
            "OIDC list emptied",
            Box::new(|rt: &mut Value| {
                rt["spec"]["shoot"]["kubernetes"]["kubeAPIServer"]["additionalOidcConfig"] =
                    json!([]);
            }),
        ),
        // An empty `oidc` object on a Runtime created without a list (before KEB wrote one):
        // KEB makes the list `[{}]`, an entry that stands for the default provider.
        update(
            "empty OIDC object on a Runtime without a list",
            Box::new(|rt: &mut Value| {
                rt["spec"]["shoot"]["kubernetes"]["kubeAPIServer"]["additionalOidcConfig"] =
                    json!([{}]);
            }),
        ),
        update(
            "ACL set",
            Box::new(|rt: &mut Value| {
                rt["spec"]["shoot"]["kubernetes"]["kubeAPIServer"]["acl"] =
                    json!({"allowedCIDRs": ["203.0.113.0/24", "198.51.100.7/32"]});
            }),
        ),
        update(
            "ACL removed (an empty list)",
            Box::new(|rt: &mut Value| {
                if let Some(api) =
                    rt["spec"]["shoot"]["kubernetes"]["kubeAPIServer"].as_object_mut()
                {
                    api.remove("acl");
                }
            }),
        ),
        update(
            "administrators replaced",
            Box::new(|rt: &mut Value| {
                rt["spec"]["security"]["administrators"] =
                    json!(["john.doe@example.com", "ops@example.com"]);
            }),
        ),
        update(
            "ingress filtering on",
            Box::new(|rt: &mut Value| {
                rt["spec"]["security"]["networking"]["filter"]["ingress"] =
                    json!({"enabled": true});
            }),
        ),
        update(
            "audit log access on",
            Box::new(|rt: &mut Value| {
                rt["spec"]["auditLogAccessEnabled"] = json!(true);
            }),
        ),
        // `UpdatePlanLabels` of a plan upgrade, and the labeler's global account change.
        update(
            "plan and global account labels",
            Box::new(|rt: &mut Value| {
                let labels = &mut rt["metadata"]["labels"];
                labels["kyma-project.io/broker-plan-id"] = json!(plan_id("build-runtime-aws"));
                labels["kyma-project.io/broker-plan-name"] = json!("build-runtime-aws");
                labels["kyma-project.io/global-account-id"] =
                    json!("0f9a7c7e-8a3a-4a8e-9c55-7d1b1f0c2e44");
            }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use kim_shared::api::Runtime;
    use kim_shared::config::{KimConfig, ProviderKind};
    use kim_shared::gardener::cloud_profile::CloudProfile;
    use kim_shared::validation::{
        Profile, ValidationOptions, ValidationOutcome, validate_against_cloud_profile,
        validate_create_with,
    };

    fn config() -> KimConfig {
        crate::fixtures::data::example_config().unwrap()
    }

    fn profile(provider: &str) -> CloudProfile {
        serde_json::from_value(crate::fixtures::cloud_profile_of(provider).unwrap()).unwrap()
    }

    /// What the webhook answers for `rt` (already defaulted): the configuration's rules and
    /// the landscape's CloudProfile.
    fn validate(rt: &Runtime, cfg: &KimConfig) -> ValidationOutcome {
        let mut f = validate_create_with(rt, cfg, &ValidationOptions::default());
        let kind: ProviderKind = rt.spec.shoot.provider.type_.as_str().parse().unwrap();
        let p = profile(kind.as_str());
        let name = cfg.cloud_profile_name(kind).to_owned();
        f.extend(validate_against_cloud_profile(
            rt,
            None,
            cfg,
            Profile {
                name: &name,
                spec: &p.spec,
            },
            jiff::Timestamp::now(),
        ));
        f
    }

    #[test]
    fn every_keb_runtime_is_admitted_unchanged() {
        let cfg = config();
        let all = corpus();
        assert!(all.len() >= 30, "{}", all.len());
        for plan in [
            "aws",
            "azure",
            "azure_lite",
            "gcp",
            "sap-converged-cloud",
            "alicloud",
            "trial",
            "free",
            "preview",
            "build-runtime-aws",
            "build-runtime-gcp",
            "build-runtime-azure",
            "build-runtime-alicloud",
        ] {
            assert!(all.iter().any(|k| k.plan == plan), "no {plan} Runtime");
        }
        for k in &all {
            let sent: Runtime = serde_json::from_value(k.runtime.clone()).unwrap();
            let mut defaulted = sent.clone();
            kim_shared::defaults::apply_defaults(&mut defaulted, &cfg);
            assert_eq!(
                defaulted, sent,
                "{}: the defaults changed what KEB sent",
                k.case
            );
            let f = validate(&defaulted, &cfg);
            assert!(
                f.violations.is_empty(),
                "{}: refused: {:?}",
                k.case,
                f.violations
            );
        }
    }

    #[test]
    fn every_invalid_variant_is_refused_naming_its_field() {
        let cfg = config();
        let mut checked = 0;
        for k in corpus() {
            for v in invalid_variants(&k) {
                let mut rt: Runtime = serde_json::from_value(v.runtime.clone()).unwrap();
                kim_shared::defaults::apply_defaults(&mut rt, &cfg);
                let f = validate(&rt, &cfg);
                assert!(
                    f.violations.iter().any(|x| x.field == v.field),
                    "{} with a bad {}: expected a refusal at {}, got {:?}",
                    k.case,
                    v.what,
                    v.field,
                    f.violations
                );
                checked += 1;
            }
        }
        assert!(checked > 200, "{checked}");
    }
}
