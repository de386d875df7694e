//! The wiring: one watch per kind into its cache, the plan stream, the
//! shard filters and the watch backoff, and the kube-runtime `Controller`
//! that runs the reconciles.

use super::context::{Context, Settings, cached_key};
use super::error::{Error, StartError, is_not_found};
use super::events::Events;
use super::gates::GateRunner;
use super::index::PlanCache;
use super::memory::Memory;
use super::queue::Queue;
use super::{error_policy, reconcile};
use super::{sweep, templates, trim};
use crate::api::cached::{CachedDeployment, CachedPlan, CachedPod, CachedRevision, Labelled};
use crate::api::{LABEL_PLAN, ReleasePlan};
use crate::ops::liveness::Liveness;
use crate::ops::metrics::{ErrorLabel, Metrics};
use crate::ops::shard::Shard;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Service;
use kube::api::ListParams;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// Checks that the CRD is installed and the API reachable. With a watched
/// namespace the list is in that namespace, so a Role there is enough.
pub async fn check_crd(client: &Client, namespace: Option<&str>) -> Result<(), StartError> {
    let api: Api<ReleasePlan> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => return Err(StartError::CrdMissing),
        Err(e) => return Err(StartError::Kube(e)),
    }
    // The template kinds are watched too: without their CRDs the watches
    // would fail until the liveness check restarts the process, unexplained.
    let templates: Api<crate::api::template::GateTemplate> = scoped(client, namespace);
    let cluster: Api<crate::api::template::ClusterGateTemplate> = Api::all(client.clone());
    let one = ListParams::default().limit(1);
    let (t, c) = futures::join!(templates.list(&one), cluster.list(&one));
    match t.map(drop).and(c.map(drop)) {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Err(StartError::TemplateCrdMissing),
        Err(e) => Err(StartError::Kube(e)),
    }
}

/// The plan an object belongs to, by its `releaseplan.io/plan` label.
pub(crate) fn plan_of<K: Resource + Labelled>(obj: &K) -> Option<ObjectRef<ReleasePlan>> {
    let plan = obj.label(LABEL_PLAN)?;
    let ns = obj.meta().namespace.as_ref()?;
    Some(ObjectRef::new(plan).within(ns))
}

/// Backoff of each watch stream after an error: 250ms doubling to 2s, reset
/// on success (backon's exponential backoff, as kube-runtime wraps it). The
/// default (up to 30s) leaves every cache stale for that long after an API
/// server restart (and a restarted API server answers the first watch with
/// 410 Expired, which costs one more round); a watch re-established within
/// seconds keeps rollouts moving.
pub fn watch_backoff() -> watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(2))
        .with_factor(2.0)
        .without_max_times()
        .into()
}

/// Runs the controller until `shutdown` resolves; in-flight reconciles finish first.
// The whole wiring in one place: each watch, its cache and the plan it wakes, in the order they start.
#[allow(clippy::too_many_lines)]
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    liveness: Arc<Liveness>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.as_deref();
    let (plan_store, plan_writer) = reflector::store::<CachedPlan>();
    let plans_listed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The most recent list, in pages of 500: a list "of any version" is
    // served from the API server's cache, which ignores `limit`, so a start
    // read every plan in one response (managedFields included) and decoded
    // it whole before the trim; and it may be older than what the previous
    // leader wrote.
    let plan_stream = watcher(scoped(&client, ns), watcher::Config::default())
        .backoff(watch_backoff())
        .inspect(watched::<CachedPlan, _>(&liveness))
        // Plans of other shards are neither cached nor reconciled.
        .try_filter({
            let shard = settings.shard;
            move |event| std::future::ready(shard.is_none_or(|s| plan_in_shard(s, event)))
        })
        .modify(trim::plan)
        .reflect(plan_writer)
        // The plan cache holds its first list (the sweep waits for it: the
        // store's own `wait_until_ready` wakes only its last waiter, the
        // Controller's).
        .inspect({
            let listed = Arc::clone(&plans_listed);
            move |e| {
                if matches!(e, Ok(watcher::Event::InitDone)) {
                    listed.store(true, std::sync::atomic::Ordering::Release);
                }
            }
        })
        .applied_objects()
        .filter_map(ok_only);
    for kind in Error::KINDS {
        let _ = metrics
            .failures
            .get_or_create(&ErrorLabel { error: kind.into() });
    }
    let queue = Arc::new(Queue::new(Arc::clone(&metrics)));
    let plan_stream = {
        let queue = Arc::clone(&queue);
        plan_stream.inspect(move |p: &Result<CachedPlan, _>| {
            if let Ok(p) = p {
                queue.changed(p.metadata.namespace.as_deref(), &p.name_any());
            }
        })
    };
    // The plan an owned object's change wakes, noted as waiting.
    let wakes = |queue: &Arc<Queue>| {
        let queue = Arc::clone(queue);
        move |plan: Option<ObjectRef<ReleasePlan>>| {
            let r = plan?;
            queue.changed(r.namespace.as_deref(), &r.name);
            Some(cached_key(&r))
        }
    };
    let owned = OwnedWatches {
        client: &client,
        namespace: ns,
        shard: settings.shard,
        liveness: &liveness,
    };
    let (deployments, deploy_stream) = owned.watch(trim::deployment);
    let (pods, pod_stream) = owned.watch(trim::pod);
    let (jobs, job_stream) = owned.watch(trim::job);
    let (services, service_stream) = owned.watch(trim::service);
    // Routes only of the routers the cluster serves.
    let (routes, route_wakes) = super::router::watch(&owned, &settings.routers);
    // Only ours (StatefulSets and DaemonSets keep theirs too): by the plan label.
    // A `CachedRevision` decodes only what is kept: nothing to trim.
    let (templates, template_stream) = owned.watch(|_: &mut CachedRevision| {});
    let reporter = Reporter {
        controller: "releaseplan".into(),
        instance: settings.instance.clone(),
    };
    let (wake_tx, wake_rx) = futures::channel::mpsc::unbounded();
    let gates = GateRunner::new(
        settings.gate_http.clone(),
        crate::gates::access::CredentialReader::new(
            client.clone(),
            settings.gate_credentials_namespace.clone(),
        ),
        Arc::clone(&metrics),
        wake_tx,
        plan_store.clone(),
    );
    let (gate_templates, template_wake) =
        templates::watch(&client, ns, &liveness, plan_store.clone());
    let (events, publisher) = Events::start(client.clone(), reporter, Arc::clone(&metrics));
    let ctx = Arc::new(Context {
        client: client.clone(),
        deployments,
        templates,
        pods,
        jobs,
        services,
        routes,
        events,
        metrics,
        gates,
        gate_templates,
        liveness,
        queue: Arc::clone(&queue),
        memory: Memory::default(),
    });
    let sweeper = tokio::spawn(sweep::run(
        Arc::clone(&ctx),
        plan_store.clone(),
        plans_listed,
    ));
    Controller::for_stream(plan_stream, plan_store)
        // Deployments and pods reach their plan through the plan label rather than
        // owner references, so a Deployment orphaned during deletion still does.
        .watches_stream(deploy_stream, {
            let wake = wakes(&queue);
            move |d: CachedDeployment| wake(plan_of(&d))
        })
        .watches_stream(pod_stream, {
            let wake = wakes(&queue);
            move |pod: CachedPod| wake(plan_of(&pod))
        })
        // A Job gate's Job that finishes (or appears, or goes) wakes its plan.
        .watches_stream(job_stream, {
            let wake = wakes(&queue);
            move |j: Job| wake(plan_of(&j))
        })
        // A Service or route that changes (drift, or our own write landing) wakes its plan.
        .watches_stream(service_stream, {
            let wake = wakes(&queue);
            move |svc: Service| wake(plan_of(&svc))
        })
        .reconcile_on({
            let wake = wakes(&queue);
            route_wakes.filter_map(move |r| futures::future::ready(wake(Some(r))))
        })
        // A stored template that appears (the cache filling) or goes wakes its plan.
        .watches_stream(template_stream, {
            let wake = wakes(&queue);
            move |cr: CachedRevision| wake(plan_of(&cr))
        })
        // A gate result wakes its plan; reconciles never wait for one.
        .reconcile_on({
            let wake = wakes(&queue);
            wake_rx.filter_map(move |r| futures::future::ready(wake(Some(r))))
        })
        // A template that appears, changes or goes wakes the plans that use it.
        .reconcile_on({
            let wake = wakes(&queue);
            template_wake.filter_map(move |r| futures::future::ready(wake(Some(r))))
        })
        .trigger_backoff(watch_backoff())
        .with_config(ControllerConfig::default().concurrency(settings.concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| {
            if let Err(kube::runtime::controller::Error::ObjectNotFound(r)) = &res {
                // Woken after its deletion: no reconcile will end its wait.
                queue.forget(r.namespace.as_deref(), &r.name);
            }
            async move {
                if let Err(e) = res {
                    tracing::debug!(error = %e, "controller event");
                }
            }
        })
        .await;
    sweeper.abort();
    let _ = sweeper.await;
    // The controller and its context are gone: the Event queue is closed.
    publisher.flush().await;
    info!("controller stopped");
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
pub(crate) struct OwnedWatches<'a> {
    client: &'a Client,
    namespace: Option<&'a str>,
    shard: Option<Shard>,
    liveness: &'a Arc<Liveness>,
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
        K: Watched + Labelled + Resource<Scope = kube::core::NamespaceResourceScope>,
    {
        let (shard, liveness) = (self.shard, self.liveness);
        let api: Api<K> = scoped(self.client, self.namespace);
        let cache = PlanCache::default();
        let mut writer = cache.writer();
        let stream = watcher(api, watcher::Config::default().labels(LABEL_PLAN))
            .backoff(watch_backoff())
            .inspect(watched::<K, _>(liveness))
            .modify(trim)
            .try_filter_map(move |event| {
                let (event, wakes) = match shard {
                    Some(s) => owned_in_shard(s, event),
                    None => (Some(event), true),
                };
                if let Some(event) = &event {
                    writer.apply(event);
                }
                std::future::ready(Ok(event.filter(|_| wakes)))
            })
            .touched_objects()
            .filter_map(ok_only);
        (cache, stream)
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
    let ours = |o: &K| {
        let ns = o.meta().namespace.as_deref().unwrap_or_default();
        o.label(LABEL_PLAN).is_some_and(|p| shard.owns(ns, p))
    };
    match event {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) if !ours(&o) => {
            (Some(watcher::Event::Delete(o)), false)
        }
        watcher::Event::InitApply(o) if !ours(&o) => (None, false),
        event => (Some(event), true),
    }
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
