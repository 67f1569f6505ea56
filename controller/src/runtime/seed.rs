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

/// The regions of a provider's usable Seeds, or why they could not be listed.
pub type Listed = Result<Vec<String>, Arc<kube::Error>>;

/// [`usable_regions`] per provider, read at most every [`UsableRegions::TTL`]: Runtimes of one
/// provider created in a burst (each looking again every 2 s while it waits for a create slot)
/// share one cluster-wide list of Seeds. One list at a time: Runtimes that find it expired
/// together wait for the same list, and a failed list answers them all (for
/// [`UsableRegions::FAILURE_TTL`]), so that Gardener in trouble is not asked again by each.
#[derive(Default)]
pub struct UsableRegions {
    cached: std::sync::Mutex<std::collections::HashMap<String, (Instant, Listed)>>,
    listing: tokio::sync::Mutex<()>,
}

impl UsableRegions {
    /// How long a list serves.
    pub const TTL: Duration = Duration::from_secs(30);

    /// How long a failed list serves.
    pub const FAILURE_TTL: Duration = Duration::from_secs(5);

    /// The regions of `provider`'s usable Seeds, from a list at most [`Self::TTL`] old (or
    /// the failure of one at most [`Self::FAILURE_TTL`] old).
    pub async fn get(&self, client: &Client, provider: &str) -> Listed {
        if let Some(listed) = self.fresh(provider) {
            return listed;
        }
        let _one_list = self.listing.lock().await;
        if let Some(listed) = self.fresh(provider) {
            return listed;
        }
        let listed = usable_regions(client, provider).await.map_err(Arc::new);
        self.cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(provider.to_owned(), (Instant::now(), listed.clone()));
        listed
    }

    fn fresh(&self, provider: &str) -> Option<Listed> {
        let cached = self
            .cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cached
            .get(provider)
            .filter(|(at, listed)| {
                let ttl = if listed.is_ok() {
                    Self::TTL
                } else {
                    Self::FAILURE_TTL
                };
                at.elapsed() < ttl
            })
            .map(|(_, listed)| listed.clone())
    }
}

/// The regions that have a usable Seed of `provider`, sorted and without repeats.
async fn usable_regions(client: &Client, provider: &str) -> Result<Vec<String>, kube::Error> {
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
    Ok(regions_of(&values, provider))
}

/// The regions of the usable Seeds (their `spec` and `status`, without metadata) of `provider`.
fn regions_of(seeds: &[Value], provider: &str) -> Vec<String> {
    let mut regions: Vec<String> = seeds
        .iter()
        .filter(|s| s.pointer("/spec/provider/type").and_then(Value::as_str) == Some(provider))
        .filter(|s| usable(s))
        .filter_map(|s| s.pointer("/spec/provider/region").and_then(Value::as_str))
        .map(str::to_owned)
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
        assert_eq!(regions_of(&seeds, "aws"), ["eu-central-1", "us-east-1"]);
        assert_eq!(regions_of(&seeds, "azure"), Vec::<String>::new());
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
        assert_eq!(regions_of(&seeds, "aws"), ["r6"]);
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

    /// Runtimes that find the list expired together wait for one list, and a failed list
    /// answers them all: one request each time, not one per Runtime.
    #[tokio::test]
    async fn callers_together_share_one_list_and_its_failure() {
        let list = json!({"apiVersion": "core.gardener.cloud/v1beta1", "kind": "SeedList",
            "metadata": {}, "items": [seed("aws", "eu-central-1")]});
        let busy = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
            "reason": "ServiceUnavailable", "code": 503, "message": "busy"});
        for (status, body, ok) in [(200, list, true), (503, busy, false)] {
            let (client, requests) = counted(status, body);
            let regions = Arc::new(UsableRegions::default());
            let callers: Vec<_> = (0..10)
                .map(|_| {
                    let (regions, client) = (regions.clone(), client.clone());
                    tokio::spawn(async move { regions.get(&client, "aws").await })
                })
                .collect();
            for caller in callers {
                let listed = caller.await.expect("caller");
                assert_eq!(listed.is_ok(), ok, "{listed:?}");
                if let Ok(regions) = listed {
                    assert_eq!(regions, ["eu-central-1"]);
                }
            }
            assert_eq!(
                requests.load(std::sync::atomic::Ordering::SeqCst),
                1,
                "status {status}"
            );
        }
    }
}
