//! How a kind is watched: into its cache, trimmed, filtered by shard, with
//! the watch backoff, each result reported to the liveness check, and the
//! plan an owned object wakes. `run` wires these together.

use super::error::{StartError, is_not_found, is_transient};
use super::index::{PlanCache, Wakes};
use crate::api::cached::{CachedPlan, Labelled};
use crate::api::{LABEL_PLAN, ReleasePlan};
use crate::ops::liveness::Liveness;
use crate::ops::shard::Shard;
use futures::{StreamExt, TryStreamExt};
use kube::api::ListParams;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;

/// Checks that the CRDs are installed and the API reachable. With a watched
/// namespace the lists are in that namespace, so a Role there is enough. A
/// missing CRD or a refusal (RBAC, credentials) is an error, which ends the
/// process with a clear message; an API server that is away for a moment
/// (no answer, 5xx, 429) is asked again, so that a restart during an API
/// outage waits for it instead of crash-looping into a long back-off.
pub async fn check_crd(client: &Client, namespace: Option<&str>) -> Result<(), StartError> {
    let one = ListParams::default().limit(1);
    let plans: Api<ReleasePlan> = scoped(client, namespace);
    until_answered("ReleasePlans", || plans.list_metadata(&one))
        .await
        .map_err(|e| missing(e, StartError::CrdMissing))?;
    // The template kinds are watched too: without their CRDs the watches
    // would fail until the liveness check restarts the process, unexplained.
    let templates: Api<crate::api::template::GateTemplate> = scoped(client, namespace);
    until_answered("GateTemplates", || templates.list_metadata(&one))
        .await
        .map_err(|e| missing(e, StartError::TemplateCrdMissing))?;
    let cluster: Api<crate::api::template::ClusterGateTemplate> = Api::all(client.clone());
    until_answered("ClusterGateTemplates", || cluster.list_metadata(&one))
        .await
        .map_err(|e| missing(e, StartError::TemplateCrdMissing))?;
    let scales: Api<crate::api::ComponentScale> = scoped(client, namespace);
    until_answered("ComponentScales", || scales.list_metadata(&one))
        .await
        .map_err(|e| missing(e, StartError::ScaleCrdMissing))?;
    Ok(())
}

/// `crd` when the error is a 404 (the CRD is not installed), else the error.
fn missing(e: kube::Error, crd: StartError) -> StartError {
    if is_not_found(&e) {
        crd
    } else {
        StartError::Kube(e)
    }
}

/// How long the start-up check waits for an API server that is away before
/// it ends the process: long enough for an API server restart, short enough
/// that a wrong address or CA still shows as CrashLoopBackOff.
const START_PATIENCE: Duration = Duration::from_secs(120);

/// Runs `ask` until it gets an answer, success or not, for at most
/// [`START_PATIENCE`]: a transient error is asked again (250ms doubling,
/// under 5s with jitter), logged at warn; past the patience the last error is returned.
async fn until_answered<T, F, Fut>(what: &str, mut ask: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    use backon::BackoffBuilder;
    let give_up = tokio::time::Instant::now() + START_PATIENCE;
    let mut waits = crate::ops::backoff::api_away().build();
    let mut delay = waits.next().unwrap_or(Duration::from_secs(1));
    loop {
        match ask().await {
            Err(e) if is_transient(&e) && tokio::time::Instant::now() + delay < give_up => {
                warn!(error = %e, retry_in = ?delay, "cannot list {what} yet; asking again");
                tokio::time::sleep(delay).await;
                delay = waits.next().unwrap_or(delay);
            }
            answer => return answer,
        }
    }
}

/// Whether the cluster serves an optional kind (GatePolicies,
/// ReleaseFreezes, routes), asked once at start: not found (no CRD) or
/// forbidden (no RBAC) means no, and the kind stays off until a restart.
/// Any other error, an API blip, is asked again (250ms doubling, under 5s): a
/// blip at start must not switch a policy or a freeze off for the life of
/// the process.
pub(crate) async fn optional_kind_served<K>(api: &Api<K>, kind: &str) -> bool
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    use backon::BackoffBuilder;
    let one = ListParams::default().limit(1);
    let mut waits = crate::ops::backoff::api_away().build();
    loop {
        let delay = waits.next().unwrap_or(Duration::from_secs(1));
        match api.list_metadata(&one).await {
            Ok(_) => return true,
            Err(e) if is_not_found(&e) || matches!(&e, kube::Error::Api(s) if s.code == 403) => {
                tracing::info!(error = %e, "{kind} cannot be listed (CRD not installed, or RBAC): not watched, none apply; restart the operator after installing the CRD");
                return false;
            }
            // Anything else is asked again: switching a kind off (a
            // GatePolicy that no longer applies) needs a clear answer.
            Err(e) => {
                warn!(error = %e, retry_in = ?delay, "cannot list {kind} yet; asking again");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// The plan an object belongs to, by its `releaseplan.io/plan` label.
pub(crate) fn plan_of<K: Resource + Labelled>(obj: &K) -> Option<ObjectRef<ReleasePlan>> {
    let plan = obj.label(LABEL_PLAN)?;
    let ns = obj.meta().namespace.as_ref()?;
    Some(ObjectRef::new(plan).within(ns))
}

/// Backoff of each watch stream after an error: 250ms doubling, under 2s with jitter, reset
/// on success (backon's exponential backoff, as kube-runtime wraps it). The
/// default (up to 30s) leaves every cache stale for that long after an API
/// server restart (and a restarted API server answers the first watch with
/// 410 Expired, which costs one more round); a watch re-established within
/// seconds keeps rollouts moving.
pub fn watch_backoff() -> watcher::ExponentialBackoff {
    crate::ops::backoff::watch().into()
}

/// Objects per page of a watch's list (kube-runtime's default is 500). A
/// page is decoded whole before the trim shrinks its objects, and a replica
/// that starts or takes over a shard lists every kind at once: with
/// production-sized pods a page of 500 is megabytes of text and as much
/// again decoded, per kind. A page of 100 costs a few more requests at a
/// start (50 for 5000 plans' pods, not 10) for a fifth of that peak.
pub(crate) const LIST_PAGE: u32 = 100;

/// A watch's settings: the most recent version of its objects, listed
/// in pages of [`LIST_PAGE`]: a list "of any version" is served from the API
/// server's cache, which ignores `limit`, and may be older than what the
/// previous leader wrote.
pub(crate) fn listed() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE)
}

/// An Api in the watched namespace, or across all of them.
pub(crate) fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// What a kind must be to be watched into a cache.
pub trait Watched:
    Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// What every watch of the objects made for plans shares.
#[derive(Clone, Copy)]
pub(crate) struct OwnedWatches<'a> {
    /// The operator's client.
    pub(crate) client: &'a Client,
    /// The watched namespace, `None` for all.
    pub(crate) namespace: Option<&'a str>,
    /// This replica's shard, if sharded.
    pub(crate) shard: Option<Shard>,
    /// Where each watch reports its results.
    pub(crate) liveness: &'a Arc<Liveness>,
}

impl OwnedWatches<'_> {
    /// A cached watch of the objects of kind `K` made for plans (selected by
    /// the plan label, and of this shard's plans), trimmed by `trim` before
    /// caching: its store, and the stream that maps their changes to plans.
    pub(crate) fn watch<K>(
        &self,
        trim: impl FnMut(&mut K) + Send + 'static,
    ) -> (
        PlanCache<K>,
        impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    )
    where
        K: Watched + Labelled + Wakes + Resource<Scope = kube::core::NamespaceResourceScope>,
    {
        self.watch_selected(LABEL_PLAN, trim)
    }

    /// [`OwnedWatches::watch`] of the objects selected by `selector` (which
    /// must select only objects that carry the plan label too): for a kind of
    /// which the plan label also marks objects this watch must not cache.
    pub(crate) fn watch_selected<K>(
        &self,
        selector: &str,
        trim: impl FnMut(&mut K) + Send + 'static,
    ) -> (
        PlanCache<K>,
        impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    )
    where
        K: Watched + Labelled + Wakes + Resource<Scope = kube::core::NamespaceResourceScope>,
    {
        let (shard, liveness) = (self.shard, self.liveness);
        let api: Api<K> = scoped(self.client, self.namespace);
        let cache = PlanCache::default();
        let mut writer = cache.writer();
        let stream = shard_decoded(shard, watcher(api, listed().labels(selector)))
            .backoff(watch_backoff())
            .inspect(watched::<K, _>(liveness))
            .modify(trim)
            .try_filter_map(move |event| {
                let (event, wakes) = match shard {
                    Some(s) => owned_in_shard(s, event),
                    None => (Some(event), true),
                };
                let changed = event.as_ref().is_some_and(|e| writer.apply(e));
                std::future::ready(Ok(event.filter(|_| wakes && changed)))
            })
            .touched_objects()
            .filter_map(ok_only);
        (cache, stream)
    }
}

/// `stream` (a watch), with the objects of other shards' plans decoded as
/// their metadata only ([`crate::api::foreign`]); unchanged without shards.
pub(crate) fn shard_decoded<S: futures::Stream>(
    shard: Option<Shard>,
    stream: S,
) -> ShardDecoded<S> {
    ShardDecoded {
        inner: Box::pin(stream),
        shard,
    }
}

/// See [`shard_decoded`]: each poll of the watch (where kube decodes its
/// list pages and events) runs in the shard's decoding scope.
pub(crate) struct ShardDecoded<S> {
    inner: std::pin::Pin<Box<S>>,
    shard: Option<Shard>,
}

impl<S: futures::Stream> futures::Stream for ShardDecoded<S> {
    type Item = S::Item;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        let this = self.get_mut();
        match this.shard {
            Some(shard) => {
                crate::api::foreign::decoding_for(shard, || this.inner.as_mut().poll_next(cx))
            }
            None => this.inner.as_mut().poll_next(cx),
        }
    }
}

/// Whether a plan's watch event is for this shard (start and end of a list
/// are for every shard).
pub(crate) fn plan_in_shard(shard: Shard, event: &watcher::Event<CachedPlan>) -> bool {
    match event {
        watcher::Event::Apply(p) | watcher::Event::InitApply(p) | watcher::Event::Delete(p) => {
            shard.owns_plan(p)
        }
        watcher::Event::Init | watcher::Event::InitDone => true,
    }
}

/// What an owned object's watch event does in this shard: the event for the
/// cache (None: nothing to cache), and whether it wakes the object's plan. An
/// object of another shard's plan is never cached; one whose plan label moved
/// it to another shard is dropped from the cache, as if deleted.
pub(crate) fn owned_in_shard<K: Resource + Labelled>(
    shard: Shard,
    event: watcher::Event<K>,
) -> (Option<watcher::Event<K>>, bool) {
    let ours = |o: &K| in_shard(shard, o);
    match event {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) if !ours(&o) => {
            (Some(watcher::Event::Delete(o)), false)
        }
        watcher::Event::InitApply(o) if !ours(&o) => (None, false),
        event => (Some(event), true),
    }
}

/// Whether `o` is labelled with a plan of `shard` (an object with no plan
/// label is no shard's).
pub(crate) fn in_shard<K: Resource + Labelled>(shard: Shard, o: &K) -> bool {
    let ns = o.meta().namespace.as_deref().unwrap_or_default();
    o.label(LABEL_PLAN).is_some_and(|p| shard.owns(ns, p))
}

/// Drops the errors of a watch stream once its own backoff and the liveness
/// check have seen them: the controller applies one backoff to all its
/// trigger streams together, so an error of one would delay them all.
pub(crate) async fn ok_only<K>(r: Result<K, watcher::Error>) -> Option<Result<K, watcher::Error>> {
    r.ok().map(Ok)
}

/// Reports each item of the watch stream of `K` to the liveness check, by
/// the resource's plural (the word the request layer reads off the path
/// when the API server accepts the watch again).
pub(crate) fn watched<K: Resource<DynamicType = ()>, T>(
    liveness: &Arc<Liveness>,
) -> impl Fn(&Result<T, watcher::Error>) + Send + Sync + 'static {
    let liveness = Arc::clone(liveness);
    let resource = K::plural(&()).into_owned();
    move |r| {
        if let Err(e) = r {
            warn!(watch = %resource, error = %e, "watch failed: retrying");
        }
        liveness.watch_result(&resource, r.is_ok());
    }
}

/// The plans of `plans` whose spec reads an object named `name` and for
/// which `uses` holds, in namespace `ns` (any namespace when `ns` is None):
/// what an object's change wakes. A scan of the plan cache, which never
/// misses a plan not reconciled yet; each cached plan keeps the names its
/// spec reads, so only the plans that read `name` are decoded. (It used to
/// search every plan's spec text: each config copy a rollout creates is an
/// event, and the scan made the cold start of N plans quadratic.)
pub(crate) fn plans_naming(
    plans: &kube::runtime::reflector::Store<CachedPlan>,
    ns: Option<&str>,
    name: &str,
    uses: impl Fn(&ReleasePlan) -> bool,
) -> Vec<ObjectRef<ReleasePlan>> {
    plans
        .state()
        .iter()
        .filter(|p| {
            ns.is_none_or(|ns| p.namespace().as_deref() == Some(ns))
                && p.reads(name)
                && p.decode().is_ok_and(|p| uses(&p))
        })
        .map(|p| ObjectRef::new(&p.name_any()).within(&p.namespace().unwrap_or_default()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::cached::CachedDeployment;
    use std::sync::Mutex;

    /// A client whose every request is logged (its path and query) and
    /// answered with an empty list.
    fn listing() -> (Client, Arc<Mutex<Vec<String>>>) {
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = Arc::clone(&log);
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            seen.lock().unwrap().push(req.uri().to_string());
            let list = serde_json::json!({"kind": "DeploymentList", "apiVersion": "apps/v1",
                "metadata": {"resourceVersion": "1"}, "items": []});
            async move {
                http::Response::builder()
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&list).unwrap()))
            }
        });
        (Client::new(svc, "ns"), log)
    }

    /// An API blip when the operator first asks for GatePolicies or
    /// ReleaseFreezes is asked again, not taken for a missing CRD (which
    /// would switch policies or freezes off until a restart); a missing CRD
    /// or RBAC is an answer.
    #[tokio::test(start_paused = true)]
    async fn a_blip_does_not_switch_an_optional_kind_off() {
        use crate::api::window::ReleaseFreeze;
        use crate::canned_api::{answering, empty_list, status};
        let (client, asked) = answering(vec![status(503), status(500), empty_list()]);
        let api: Api<ReleaseFreeze> = Api::all(client);
        assert!(optional_kind_served(&api, "ReleaseFreezes").await);
        assert_eq!(*asked.lock().unwrap(), 3, "asked until it was answered");

        for code in [404, 403] {
            let (client, asked) = answering(vec![status(code)]);
            let api: Api<ReleaseFreeze> = Api::all(client);
            assert!(
                !optional_kind_served(&api, "ReleaseFreezes").await,
                "{code}"
            );
            assert_eq!(*asked.lock().unwrap(), 1, "{code} is an answer");
        }
        // Nothing but a 404 or a 403 switches the kind off, however long.
        let (client, asked) = answering(vec![status(401)]);
        let api: Api<ReleaseFreeze> = Api::all(client);
        let waited =
            tokio::time::timeout(Duration::from_secs(600), optional_kind_served(&api, "x")).await;
        assert!(waited.is_err(), "switched off by a 401");
        assert!(*asked.lock().unwrap() > 100);
    }

    /// The start-up check waits out an API server that is away (5xx, 429)
    /// instead of ending the process, whose restart would meet the same
    /// outage and crash-loop; a missing CRD or a refusal ends it.
    #[tokio::test(start_paused = true)]
    async fn the_start_check_waits_for_the_api_server_but_not_for_a_missing_crd() {
        use crate::canned_api::{answering, empty_list, status};
        let (client, asked) = answering(vec![status(503), status(429), empty_list()]);
        check_crd(&client, Some("ns")).await.unwrap();
        assert_eq!(
            *asked.lock().unwrap(),
            2 + 4,
            "two blips, then the four kinds"
        );

        let (client, asked) = answering(vec![status(404)]);
        let err = check_crd(&client, None).await.unwrap_err();
        assert!(matches!(err, StartError::CrdMissing), "{err}");
        assert_eq!(*asked.lock().unwrap(), 1);

        let (client, _) = answering(vec![status(403)]);
        let err = check_crd(&client, None).await.unwrap_err();
        assert!(matches!(err, StartError::Kube(_)), "{err}");

        // An API server away for good (a wrong address, say) ends the start
        // after the patience, so it still shows as CrashLoopBackOff.
        let (client, _) = answering(vec![status(503)]);
        let started = tokio::time::Instant::now();
        let err = check_crd(&client, None).await.unwrap_err();
        assert!(matches!(err, StartError::Kube(_)), "{err}");
        assert!(
            started.elapsed() <= START_PATIENCE,
            "{:?}",
            started.elapsed()
        );
        assert!(started.elapsed() >= START_PATIENCE - Duration::from_secs(5));
    }

    /// A sharded watch decodes the other shards' objects as their metadata
    /// only: kube decodes a list page inside the stream's poll, which runs
    /// in the shard's decoding scope. Plan `default/web` is shard 1 of 2,
    /// `default/a` shard 0 (the hash's pinned values).
    #[tokio::test]
    async fn a_sharded_watch_decodes_other_shards_objects_as_metadata() {
        use crate::api::cached::CachedPod;
        let pod = |name: &str, plan: &str| {
            serde_json::json!({"kind": "Pod", "apiVersion": "v1",
                "metadata": {"name": name, "namespace": "default", "resourceVersion": "5",
                    "labels": {"releaseplan.io/plan": plan}},
                "status": {"containerStatuses": [{"name": "app", "ready": true, "restartCount": 2}]}})
        };
        let list = serde_json::json!({"kind": "PodList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "5"}, "items": [pod("w", "web"), pod("x", "a")]});
        let svc = tower::service_fn(move |_req: http::Request<kube::client::Body>| {
            let body = serde_json::to_vec(&list).unwrap();
            async move {
                http::Response::builder()
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(body))
            }
        });
        let client = Client::new(svc, "default");
        let shard = Shard { index: 1, count: 2 };
        let events = shard_decoded(
            Some(shard),
            watcher(Api::<CachedPod>::namespaced(client, "default"), listed()),
        );
        let got: Vec<_> = events.take(4).collect().await;
        let status = |name: &str| {
            got.iter().find_map(|e| match e {
                Ok(watcher::Event::InitApply(p)) if p.metadata.name.as_deref() == Some(name) => {
                    Some(p.status.is_some())
                }
                _ => None,
            })
        };
        assert_eq!(status("w"), Some(true), "this shard's pod, whole: {got:?}");
        assert_eq!(status("x"), Some(false), "the other shard's pod: metadata");
    }

    /// A replica that starts, or takes over a shard, lists each kind of the
    /// objects it caches in pages of 100, not kube-runtime's 500: a page is
    /// decoded whole before its objects are trimmed.
    #[tokio::test]
    async fn owned_objects_are_listed_in_pages_of_a_hundred() {
        let (client, log) = listing();
        let liveness = Liveness::new(Duration::from_secs(60));
        let owned = OwnedWatches {
            client: &client,
            namespace: Some("ns"),
            shard: None,
            liveness: &liveness,
        };
        let (_cache, stream) = owned.watch::<CachedDeployment>(|_| {});
        let mut stream = Box::pin(stream);
        let _ = tokio::time::timeout(Duration::from_millis(300), stream.next()).await;
        let log = log.lock().unwrap();
        let list = log.first().expect("the watch lists first");
        assert!(list.contains("limit=100"), "{list}");
        assert!(
            !list.contains("resourceVersion=0"),
            "the most recent list: {list}"
        );
    }
}
