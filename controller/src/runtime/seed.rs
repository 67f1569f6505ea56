//! Whether a region has a Seed a new Shoot can be scheduled on, checked before a Shoot with
//! `enforceSeedLocation` is created: such a Shoot may only land on a Seed of its own region,
//! and Gardener would accept it and leave it unscheduled.
//!
//! A Seed counts when it has the Runtime's provider type, is not being deleted, is visible for
//! scheduling, has a last operation, its gardenlet is ready and, when it has a backup, its
//! backup buckets are ready: upstream KIM's rule, so that the same Runtimes are refused.

use kube::api::{DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::{Api, Client};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The provider type and region of each usable Seed.
type Usable = Arc<Vec<(String, String)>>;

/// What [`UsableRegions::get`] answers.
#[derive(Debug)]
pub enum Regions {
    /// The regions of the provider's usable Seeds, sorted and without repeats.
    Listed(Vec<String>),
    /// This call listed the Seeds, and the list failed.
    Failed(kube::Error),
    /// Another call's list failed a moment ago (and that call reported it): look again after
    /// this long.
    FailedRecently(Duration),
}

/// The usable Seeds, listed at most every [`UsableRegions::TTL`]: Runtimes created in a burst
/// (each looking again every 2 s while it waits for a create slot) share one cluster-wide list
/// of Seeds, whatever their provider. One list at a time: Runtimes that find it expired together
/// wait for the same list, and a failed list makes the others wait out
/// [`UsableRegions::FAILURE_TTL`] without asking Gardener, which is in trouble, again each.
#[derive(Default)]
pub struct UsableRegions {
    /// The last list: when, and the usable Seeds (`None`: it failed).
    last: std::sync::Mutex<Option<(Instant, Option<Usable>)>>,
    listing: tokio::sync::Mutex<()>,
}

impl UsableRegions {
    /// How long a list serves.
    pub const TTL: Duration = Duration::from_secs(30);

    /// How long a failed list holds the next one back.
    pub const FAILURE_TTL: Duration = Duration::from_secs(5);

    /// The regions of `provider`'s usable Seeds, from a list at most [`Self::TTL`] old.
    pub async fn get(&self, client: &Client, provider: &str) -> Regions {
        if let Some(answer) = self.fresh(provider) {
            return answer;
        }
        let _one_list = self.listing.lock().await;
        if let Some(answer) = self.fresh(provider) {
            return answer;
        }
        let listed = usable_seeds(client).await;
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match listed {
            Ok(seeds) => {
                let regions = regions_in(&seeds, provider);
                *last = Some((Instant::now(), Some(Arc::new(seeds))));
                Regions::Listed(regions)
            }
            Err(e) => {
                *last = Some((Instant::now(), None));
                Regions::Failed(e)
            }
        }
    }

    fn fresh(&self, provider: &str) -> Option<Regions> {
        let last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (at, seeds) = last.as_ref()?;
        match seeds {
            Some(seeds) => {
                (at.elapsed() < Self::TTL).then(|| Regions::Listed(regions_in(seeds, provider)))
            }
            None => Self::FAILURE_TTL
                .checked_sub(at.elapsed())
                .filter(|left| !left.is_zero())
                .map(Regions::FailedRecently),
        }
    }
}

/// The usable Seeds of the landscape (see the module's documentation).
async fn usable_seeds(client: &Client) -> Result<Vec<(String, String)>, kube::Error> {
    let resource = ApiResource {
        group: "core.gardener.cloud".into(),
        version: "v1beta1".into(),
        api_version: "core.gardener.cloud/v1beta1".into(),
        kind: "Seed".into(),
        plural: "seeds".into(),
    };
    let seeds = Api::<DynamicObject>::all_with(client.clone(), &resource)
        .list(&ListParams::default())
        .await?;
    let values: Vec<Value> = seeds
        .items
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .map(|s| s.data.clone())
        .collect();
    Ok(usable_of(&values))
}

/// The provider type and region of each usable Seed (their `spec` and `status`, without
/// metadata).
fn usable_of(seeds: &[Value]) -> Vec<(String, String)> {
    seeds
        .iter()
        .filter(|s| usable(s))
        .filter_map(|s| {
            let at = |pointer| {
                s.pointer(pointer)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            Some((at("/spec/provider/type")?, at("/spec/provider/region")?))
        })
        .collect()
}

/// The regions of the usable Seeds of `provider`, sorted and without repeats.
fn regions_in(seeds: &[(String, String)], provider: &str) -> Vec<String> {
    let mut regions: Vec<String> = seeds
        .iter()
        .filter(|(type_, _)| type_ == provider)
        .map(|(_, region)| region.clone())
        .collect();
    regions.sort();
    regions.dedup();
    regions
}

fn usable(seed: &Value) -> bool {
    let visible = seed
        .pointer("/spec/settings/scheduling/visible")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let operated = seed
        .pointer("/status/lastOperation")
        .is_some_and(|o| !o.is_null());
    let backup = seed.pointer("/spec/backup").is_some_and(|b| !b.is_null());
    visible
        && operated
        && condition_true(seed, "GardenletReady")
        && (!backup || condition_true(seed, "BackupBucketsReady"))
}

fn condition_true(seed: &Value, type_: &str) -> bool {
    seed.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(type_)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn seed(provider: &str, region: &str) -> Value {
        json!({
            "spec": {"provider": {"type": provider, "region": region},
                     "settings": {"scheduling": {"visible": true}}},
            "status": {"lastOperation": {"type": "Reconcile", "state": "Succeeded"},
                       "conditions": [{"type": "GardenletReady", "status": "True"}]}
        })
    }

    #[test]
    fn ready_visible_seeds_of_the_provider_give_their_regions_once() {
        let seeds = [
            seed("aws", "eu-central-1"),
            seed("aws", "eu-central-1"),
            seed("aws", "us-east-1"),
            seed("gcp", "europe-west3"),
        ];
        assert_eq!(
            regions_in(&usable_of(&seeds), "aws"),
            ["eu-central-1", "us-east-1"]
        );
        assert_eq!(
            regions_in(&usable_of(&seeds), "azure"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn unusable_seeds_do_not_count() {
        let mut hidden = seed("aws", "r1");
        hidden["spec"]["settings"]["scheduling"]["visible"] = json!(false);
        let mut no_settings = seed("aws", "r2");
        no_settings["spec"] = json!({"provider": {"type": "aws", "region": "r2"}});
        let mut never_operated = seed("aws", "r3");
        never_operated["status"]["lastOperation"] = Value::Null;
        let mut gardenlet_down = seed("aws", "r4");
        gardenlet_down["status"]["conditions"][0]["status"] = json!("False");
        let mut backup_not_ready = seed("aws", "r5");
        backup_not_ready["spec"]["backup"] = json!({"provider": "aws"});
        let mut backup_ready = seed("aws", "r6");
        backup_ready["spec"]["backup"] = json!({"provider": "aws"});
        backup_ready["status"]["conditions"] = json!([
            {"type": "GardenletReady", "status": "True"},
            {"type": "BackupBucketsReady", "status": "True"}
        ]);
        let seeds = [
            hidden,
            no_settings,
            never_operated,
            gardenlet_down,
            backup_not_ready,
            backup_ready,
        ];
        assert_eq!(regions_in(&usable_of(&seeds), "aws"), ["r6"]);
    }

    /// A client whose every request is counted and answered with `status` and `body`.
    fn counted(status: u16, body: Value) -> (Client, Arc<std::sync::atomic::AtomicUsize>) {
        let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = requests.clone();
        let service = tower::service_fn(move |_req: http::Request<kube::client::Body>| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let body = body.to_string();
            async move {
                // Long enough for every caller to find the list under way.
                tokio::time::sleep(Duration::from_millis(50)).await;
                http::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(body.into_bytes()))
            }
        });
        (Client::new(service, "default"), requests)
    }

    /// Runtimes that find the list expired together wait for one list, whatever their
    /// provider, and a failed list is reported by the call that sent it, the others told to
    /// look again shortly: one request each time, not one per Runtime.
    #[tokio::test]
    async fn callers_together_share_one_list_and_its_failure() {
        let list = json!({"apiVersion": "core.gardener.cloud/v1beta1", "kind": "SeedList",
            "metadata": {}, "items": [seed("aws", "eu-central-1"), seed("gcp", "europe-west3")]});
        let busy = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
            "reason": "ServiceUnavailable", "code": 503, "message": "busy"});
        for (status, body) in [(200, list), (503, busy)] {
            let (client, requests) = counted(status, body);
            let regions = Arc::new(UsableRegions::default());
            let callers: Vec<_> = (0..10)
                .map(|i| {
                    let (regions, client) = (regions.clone(), client.clone());
                    let provider = if i % 2 == 0 { "aws" } else { "gcp" };
                    tokio::spawn(async move { (provider, regions.get(&client, provider).await) })
                })
                .collect();
            let mut answers = Vec::new();
            for caller in callers {
                answers.push(match caller.await.expect("caller") {
                    ("aws", Regions::Listed(r)) => {
                        assert_eq!(r, ["eu-central-1"]);
                        "listed"
                    }
                    ("gcp", Regions::Listed(r)) => {
                        assert_eq!(r, ["europe-west3"]);
                        "listed"
                    }
                    (_, Regions::Failed(e)) => {
                        assert!(e.to_string().contains("busy"), "{e}");
                        "failed"
                    }
                    (_, Regions::FailedRecently(wait)) => {
                        assert!(wait <= UsableRegions::FAILURE_TTL, "{wait:?}");
                        "failed recently"
                    }
                    other => panic!("{other:?}"),
                });
            }
            answers.sort_unstable();
            let expected: Vec<&str> = if status == 200 {
                vec!["listed"; 10]
            } else {
                std::iter::once("failed")
                    .chain(["failed recently"; 9])
                    .collect()
            };
            assert_eq!(answers, expected, "status {status}");
            assert_eq!(
                requests.load(std::sync::atomic::Ordering::SeqCst),
                1,
                "status {status}"
            );
        }
    }
}
