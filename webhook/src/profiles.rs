//! The Gardener CloudProfiles the validation checks Runtimes against: watched through a
//! read-only Gardener client and cached in memory, so that an admission never waits for
//! Gardener. The webhook is not ready until the first complete list is in the cache; when
//! Gardener is unreachable later, the last known profiles keep being served and
//! `kim_webhook_cloud_profiles_age_seconds` says for how long they have not been confirmed.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::future::BoxFuture;
use http::{Method, Request, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kim_shared::gardener::cloud_profile::{CloudProfile, CloudProfileSpec};
use kube::Resource;
use kube::api::Api;
use kube::client::{Body, ClientBuilder};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde::{Deserialize, Deserializer};
use std::borrow::Cow;
use tower::{BoxError, Layer, Service};

/// The API path prefixes the Gardener client may read; every other request, and every
/// request that is not a GET, is refused before it leaves the process.
pub const ALLOWED_PATHS: [&str; 1] = ["/apis/core.gardener.cloud/v1beta1/cloudprofiles"];

/// How long a request may wait for Gardener's response headers (a watch then streams).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A CloudProfile as the watch keeps it: its spec, or why the spec does not read. Gardener owns
/// the type and adds fields with its releases; a profile our types cannot read must not fail
/// the list of all of them (the webhook would never become ready, and with `failurePolicy:
/// Fail` no Runtime could be written), only the rules of that profile.
#[derive(Clone, Debug)]
pub struct WatchedProfile {
    /// The profile's metadata.
    pub metadata: ObjectMeta,
    /// The spec, or where and why it does not read (`spec.regions[0].name: ...`).
    pub spec: Result<CloudProfileSpec, String>,
}

impl<'de> Deserialize<'de> for WatchedProfile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: ObjectMeta,
            #[serde(default)]
            spec: serde_json::Value,
        }
        let wire = Wire::deserialize(d)?;
        let spec = kim_shared::api::decode_field::<CloudProfileSpec>(&wire.spec, "spec")
            .map_err(|e| e.to_string());
        Ok(Self {
            metadata: wire.metadata,
            spec,
        })
    }
}

impl Resource for WatchedProfile {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        CloudProfile::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        CloudProfile::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        CloudProfile::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        CloudProfile::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The cached CloudProfiles and whether Gardener still confirms them.
pub struct CloudProfiles {
    store: Store<WatchedProfile>,
    health: Mutex<Health>,
    answers: Answers,
}

/// When Gardener last answered a request of the client with success. A watch that starts
/// again after a failure sends no event until a profile changes (kube-runtime's watcher
/// resumes at its resourceVersion), so its answer, once the watch has stayed up
/// [`STABLE_ANSWER`], is what says the profiles are confirmed again.
#[derive(Clone, Debug, Default)]
pub struct Answers(Arc<Mutex<Option<Instant>>>);

/// How long a restarted watch must stay up after Gardener's answer to count as confirming the
/// profiles: longer than kube-runtime's longest backoff (30 s), so that a watch that breaks
/// each time right after its answer keeps counting as failing.
const STABLE_ANSWER: Duration = Duration::from_secs(60);

impl Answers {
    fn record(&self) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
    }

    fn last(&self) -> Option<Instant> {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The read-only Gardener client ([`gardener_client`]) and its successful answers.
#[derive(Clone)]
pub struct GardenerClient {
    /// The client.
    pub client: kube::Client,
    /// Its successful answers.
    pub answers: Answers,
}

impl std::fmt::Debug for CloudProfiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudProfiles")
            .field("profiles", &self.store.state().len())
            .finish()
    }
}

#[derive(Debug, Default)]
struct Health {
    /// A complete list has been cached.
    synced: bool,
    /// When the watch started failing, unless it has been confirmed since.
    failing_since: Option<Instant>,
    /// When the watch last failed.
    last_error: Option<Instant>,
}

impl Health {
    /// Whether Gardener's answer `answered` confirms the watch since its last failure: it came
    /// after the failure and no failure followed for [`STABLE_ANSWER`].
    fn answer_confirms(&self, answered: Option<Instant>, now: Instant) -> bool {
        match (answered, self.last_error) {
            (Some(a), Some(e)) => a > e && now.saturating_duration_since(a) >= STABLE_ANSWER,
            _ => false,
        }
    }

    /// An event: the watch is live.
    fn event(&mut self, init_done: bool) {
        self.synced |= init_done;
        self.failing_since = None;
    }

    /// A failure: the watch is failing from now, unless it already was (and was not confirmed
    /// by an answer since).
    fn error(&mut self, answered: Option<Instant>, now: Instant) {
        if self.failing_since.is_none() || self.answer_confirms(answered, now) {
            self.failing_since = Some(now);
        }
        self.last_error = Some(now);
    }

    /// Seconds since the watch started failing while nothing has confirmed the profiles since;
    /// 0 while the watch is healthy, -1 before the first list.
    fn age(&self, answered: Option<Instant>, now: Instant) -> i64 {
        match (self.synced, self.failing_since) {
            (false, _) => -1,
            (true, None) => 0,
            (true, Some(_)) if self.answer_confirms(answered, now) => 0,
            (true, Some(since)) => {
                i64::try_from(now.saturating_duration_since(since).as_secs()).unwrap_or(i64::MAX)
            }
        }
    }
}

impl CloudProfiles {
    /// Starts watching the CloudProfiles with `client` until `stop` resolves. A panic of the
    /// watch cancels `crashed` (the process stops rather than serve a cache nobody fills).
    pub fn start(
        gardener: GardenerClient,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
        crashed: kim_process::Shutdown,
    ) -> Arc<Self> {
        let GardenerClient { client, answers } = gardener;
        let (store, writer) = reflector::store();
        let me = Arc::new(Self {
            store,
            health: Mutex::new(Health::default()),
            answers,
        });
        let api: Api<WatchedProfile> = Api::all(client);
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff();
        let watching = me.clone();
        let watch = async move {
            let mut stream = std::pin::pin!(stream);
            let mut stop = std::pin::pin!(stop);
            loop {
                let next = tokio::select! {
                    () = &mut stop => return,
                    next = stream.next() => next,
                };
                match next {
                    Some(Ok(event)) => {
                        if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) = &event
                            && let Err(why) = &p.spec
                        {
                            tracing::warn!(
                                cloud_profile = p.metadata.name.as_deref().unwrap_or_default(),
                                reason = %why,
                                "a CloudProfile does not read; Runtimes of it are admitted without its rules, with a warning"
                            );
                        }
                        watching.observe_ok(matches!(event, watcher::Event::InitDone))
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "watching CloudProfiles failed; serving the last known profiles");
                        watching.observe_error();
                    }
                    None => return,
                }
            }
        };
        tokio::spawn(kim_process::task::supervised(
            "cloud_profiles",
            watch,
            crashed,
        ));
        me
    }

    /// A cache that has not listed yet, without a watch (for tests of the rules).
    #[cfg(test)]
    pub(crate) fn unlisted() -> Arc<Self> {
        let (store, _writer) = reflector::store();
        Arc::new(Self {
            store,
            health: Mutex::new(Health::default()),
            answers: Answers::default(),
        })
    }

    /// A cache that holds `profiles`, synced, without a watch (for tests of the rules).
    #[cfg(test)]
    pub(crate) fn holding(profiles: Vec<WatchedProfile>) -> Arc<Self> {
        let (store, mut writer) = reflector::store();
        for p in profiles {
            writer.apply_watcher_event(&watcher::Event::Apply(p));
        }
        let me = Arc::new(Self {
            store,
            health: Mutex::new(Health::default()),
            answers: Answers::default(),
        });
        me.observe_ok(true);
        me
    }

    fn observe_ok(&self, init_done: bool) {
        let mut h = self
            .health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if init_done && !h.synced {
            tracing::info!(profiles = self.store.state().len(), "CloudProfiles cached");
        }
        h.event(init_done);
    }

    fn observe_error(&self) {
        let mut h = self
            .health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        h.error(self.answers.last(), Instant::now());
    }

    /// Ready once a complete list of CloudProfiles is cached.
    pub fn ready(&self) -> Result<(), &'static str> {
        let h = self
            .health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if h.synced {
            Ok(())
        } else {
            Err("the Gardener CloudProfiles are not cached yet")
        }
    }

    /// The cached profile `name`; `None` when Gardener has none of that name or nothing is
    /// cached yet.
    pub fn get(&self, name: &str) -> Option<Arc<WatchedProfile>> {
        self.store.get(&ObjectRef::new(name))
    }

    /// Seconds the cached profiles have not been confirmed by Gardener: 0 while the watch is
    /// healthy, the time since it started failing while it fails (until an event, or an answer
    /// to a restarted watch that stays up), -1 before the first list.
    pub fn age_seconds(&self) -> i64 {
        let h = self
            .health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        h.age(self.answers.last(), Instant::now())
    }
}

/// Reads the kubeconfig at `path` (`--gardener-kubeconfig-path`) and builds the read-only
/// Gardener client: https with certificate verification only (as the controller's client),
/// GET requests on [`ALLOWED_PATHS`] only, a timeout for the response headers.
pub async fn gardener_client(path: &Path) -> anyhow::Result<GardenerClient> {
    let shown = path.display();
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
        anyhow::anyhow!("--gardener-kubeconfig-path {shown}: cannot read a kubeconfig ({e})")
    })?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| anyhow::anyhow!("--gardener-kubeconfig-path {shown}: {e}"))?;
    if config.cluster_url.scheme_str() != Some("https") {
        anyhow::bail!(
            "--gardener-kubeconfig-path {shown}: the server URL is not https; the Gardener connection must be https with certificate verification"
        );
    }
    if config.accept_invalid_certs {
        anyhow::bail!(
            "--gardener-kubeconfig-path {shown}: insecure-skip-tls-verify is set; the Gardener connection must be https with certificate verification"
        );
    }
    config.connect_timeout = Some(REQUEST_TIMEOUT);
    crate::identify(&mut config);
    let builder = ClientBuilder::try_from(config)
        .map_err(|e| anyhow::anyhow!("--gardener-kubeconfig-path {shown}: {e}"))?;
    let answers = Answers::default();
    let layer = ReadOnlyLayer {
        answers: answers.clone(),
    };
    Ok(GardenerClient {
        client: builder.with_layer(&layer).build(),
        answers,
    })
}

/// Refuses every request but a GET of [`ALLOWED_PATHS`]; records successful answers.
#[derive(Clone, Debug, Default)]
pub struct ReadOnlyLayer {
    answers: Answers,
}

impl<S> Layer<S> for ReadOnlyLayer {
    type Service = ReadOnly<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ReadOnly {
            inner,
            answers: self.answers.clone(),
        }
    }
}

/// The service of [`ReadOnlyLayer`].
#[derive(Clone, Debug)]
pub struct ReadOnly<S> {
    inner: S,
    answers: Answers,
}

/// Whether the Gardener client may send `method` to `path`.
pub fn allowed(method: &Method, path: &str) -> bool {
    method == Method::GET
        && ALLOWED_PATHS.iter().any(|p| {
            path.strip_prefix(p).is_some_and(|rest| {
                rest.is_empty() || rest.starts_with('/') || rest.starts_with('?')
            })
        })
}

impl<S, B> Service<Request<Body>> for ReadOnly<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<B>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        if !allowed(req.method(), req.uri().path()) {
            let what = format!(
                "the webhook's Gardener client only reads CloudProfiles; refused {} {}",
                req.method(),
                req.uri().path()
            );
            return Box::pin(async move { Err(what.into()) });
        }
        let call = self.inner.call(req);
        let answers = self.answers.clone();
        Box::pin(async move {
            let response = call.await.map_err(Into::into)?;
            if response.status().is_success() {
                answers.record();
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watch that failed and started again is confirmed by Gardener's answer once it has
    /// stayed up, though no event follows; one that breaks right after each answer keeps
    /// counting from its first failure.
    #[test]
    fn the_age_counts_from_the_first_failure_until_the_watch_is_confirmed() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut h = Health::default();
        assert_eq!(h.age(None, at(0)), -1, "nothing listed");
        h.event(true);
        assert_eq!(h.age(Some(at(0)), at(100)), 0, "healthy, no event since");

        h.error(Some(at(0)), at(100));
        assert_eq!(h.age(Some(at(0)), at(130)), 30, "failing since 100");
        assert_eq!(
            h.age(Some(at(105)), at(130)),
            30,
            "answered, not yet stable"
        );
        assert_eq!(
            h.age(Some(at(105)), at(165)),
            0,
            "the restarted watch stayed up"
        );

        // Broken right after each answer: the failure goes on from its start.
        let mut h = Health::default();
        h.event(true);
        for s in [200, 210, 240, 270] {
            h.error(Some(at(s - 5)), at(s));
        }
        assert_eq!(h.age(Some(at(265)), at(900)), 700);

        // A new failure after a confirmed restart counts from itself.
        let mut h = Health::default();
        h.event(true);
        h.error(None, at(100));
        h.error(Some(at(105)), at(400));
        assert_eq!(h.age(Some(at(105)), at(430)), 30);
        h.event(false);
        assert_eq!(
            h.age(Some(at(105)), at(431)),
            0,
            "an event confirms at once"
        );
    }

    #[test]
    fn a_profile_that_does_not_read_is_kept_with_the_reason() {
        let read = |spec: serde_json::Value| {
            serde_json::from_value::<WatchedProfile>(serde_json::json!({
                "apiVersion": "core.gardener.cloud/v1beta1", "kind": "CloudProfile",
                "metadata": {"name": "aws"}, "spec": spec,
            }))
            .expect("a watched profile always reads")
        };
        let good = serde_json::json!({
            "type": "aws", "kubernetes": {"versions": [{"version": "1.33.1"}]},
            "machineImages": [], "machineTypes": [], "regions": [{"name": "eu-central-1"}],
            // A newer Gardener writes `allowZonePinning: false` as an empty object.
            "controlPlane": {},
        });
        let p = read(good.clone());
        assert_eq!(p.metadata.name.as_deref(), Some("aws"));
        let spec = p.spec.expect("reads");
        assert_eq!(spec.regions[0].name, "eu-central-1");
        assert_eq!(
            spec.control_plane.map(|c| c.allow_zone_pinning),
            Some(false)
        );

        let mut bad = good;
        bad["regions"][0]["name"] = serde_json::json!(5);
        let p = read(bad);
        assert_eq!(p.metadata.name.as_deref(), Some("aws"));
        let why = p.spec.expect_err("does not read");
        assert!(
            why.starts_with("spec.regions[0].name: invalid type: integer `5`"),
            "{why}"
        );
        let why = read(serde_json::json!({})).spec.expect_err("no type");
        assert!(why.starts_with("spec: missing field"), "{why}");
    }

    #[test]
    fn only_reads_of_cloud_profiles_are_allowed() {
        let get = Method::GET;
        assert!(allowed(
            &get,
            "/apis/core.gardener.cloud/v1beta1/cloudprofiles"
        ));
        assert!(allowed(
            &get,
            "/apis/core.gardener.cloud/v1beta1/cloudprofiles/aws"
        ));
        assert!(!allowed(
            &Method::POST,
            "/apis/core.gardener.cloud/v1beta1/cloudprofiles"
        ));
        assert!(!allowed(
            &Method::DELETE,
            "/apis/core.gardener.cloud/v1beta1/cloudprofiles/aws"
        ));
        assert!(!allowed(
            &get,
            "/apis/core.gardener.cloud/v1beta1/cloudprofilesx"
        ));
        assert!(!allowed(
            &get,
            "/apis/core.gardener.cloud/v1beta1/namespaces/garden-kyma/shoots"
        ));
        assert!(!allowed(&get, "/api/v1/secrets"));
    }
}
