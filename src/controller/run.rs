//! The controller's wiring: every watch, the plan's own and its owned
//! objects', the routers', the templates', merged into kube-runtime's
//! `Controller`, with the gate runner, the sweep and the Event publisher
//! beside it. The top floor of the controller: it imports the rest, nothing
//! imports it but `main`.

use super::context::{Context, Settings};
use super::error::Error;
use super::events::Events;
use super::gates::GateRunner;
use super::keys::cached_key;
use super::memory::Memory;
use super::queue::{Queue, WakeSource};
use super::reconcile::error_policy;
use super::reconcile::reconcile;
use super::watches::{
    OwnedWatches, ok_only, plan_in_shard, plan_of, scoped, shard_decoded, watch_backoff, watched,
};
use super::{sweep, templates, trim};
use crate::api::cached::{CachedDeployment, CachedPlan, CachedPod, CachedRevision};
use crate::api::{ComponentScale, ReleasePlan};
use crate::ops::liveness::Liveness;
use crate::ops::metrics::{ErrorLabel, Metrics};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::sync::Arc;
use tracing::info;

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
    super::queue::prime(&metrics);
    let ns = settings.namespace.as_deref();
    let (plan_store, plan_writer) = reflector::store::<CachedPlan>();
    let plans_listed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The most recent list, in pages (`listed`): a list "of any version" is
    // served from the API server's cache, which ignores `limit`, so a start
    // read every plan in one response (managedFields included) and decoded
    // it whole before the trim; and it may be older than what the previous
    // leader wrote.
    let plan_stream = shard_decoded(
        settings.shard,
        watcher(scoped(&client, ns), super::watches::listed()),
    )
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
    let memory = Arc::new(Memory::default());
    // Cached all the same (the reflector is before), the landing of a status
    // write that needs no reconcile wakes nothing (`Queue::quiet_write`).
    // The written copy a reconcile kept is dropped once the cache holds it.
    let plan_stream = {
        let queue = Arc::clone(&queue);
        let memory = Arc::clone(&memory);
        plan_stream.filter(move |p: &Result<CachedPlan, _>| {
            let wakes = match p {
                Ok(p) => {
                    let (ns, name) = (p.metadata.namespace.as_deref(), p.name_any());
                    let version = p.metadata.resource_version.as_deref();
                    memory.cache_caught_up(&super::keys::key_of(p), version);
                    let quiet = queue.quiet_landing(ns, &name, version);
                    if !quiet {
                        queue.changed(ns, &name, WakeSource::Plan);
                    }
                    !quiet
                }
                Err(_) => true,
            };
            std::future::ready(wakes)
        })
    };
    // The plan an owned object's change wakes, noted as waiting.
    let wakes = |queue: &Arc<Queue>, source: WakeSource| {
        let queue = Arc::clone(queue);
        move |plan: Option<ObjectRef<ReleasePlan>>| {
            let r = plan?;
            queue.changed(r.namespace.as_deref(), &r.name, source);
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
    let (stateful_sets, set_stream) = owned.watch(trim::stateful_set);
    let (daemon_sets, daemon_stream) = owned.watch(trim::daemon_set);
    let (pods, pod_stream) = owned.watch(trim::pod);
    let (jobs, job_stream) = owned.watch(trim::job);
    let (services, service_stream) = owned.watch(trim::service);
    let (scales, scale_stream) = owned.watch(trim::scale);
    let (hpas, hpa_stream) = owned.watch(trim::hpa);
    // Config, and the template gates' copies (Secrets too), only where the
    // operator may read them.
    let (config, (config_wake, copy_stream)) = super::config_cache::watch_scope(
        &owned,
        settings.config_versioning,
        &settings.config_namespaces,
        &plan_store,
    );
    // The HPA controller writes status at every sync: only what the plan
    // reads wakes it.
    let hpa_stream = hpa_stream.filter({
        let mut changed = super::autoscale::hpa_changed(hpas.clone());
        move |r| std::future::ready(r.as_ref().map_or(true, &mut changed))
    });
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
    // Boxed: its start-up list would otherwise sit in this future's state.
    let (policy, policy_wake) = Box::pin(super::policy::watch(
        &client,
        ns,
        settings.gate_policy,
        &liveness,
        plan_store.clone(),
    ))
    .await;
    let (freezes, freeze_wake) = Box::pin(super::freeze::watch(
        &client,
        ns,
        &liveness,
        plan_store.clone(),
    ))
    .await;
    let serving =
        super::serving::ServingProbes::new(settings.gate_http.client().clone(), wake_tx.clone());
    let gates = GateRunner::new(
        settings.gate_http.clone(),
        crate::gates::access::CredentialReader::new(
            client.clone(),
            settings.gate_credentials_namespace.clone(),
        ),
        policy.clone(),
        crate::gates::budget::GateBudget::new(settings.gate_budget),
        Arc::clone(&metrics),
        wake_tx,
        plan_store.clone(),
    );
    let (gate_templates, template_wake) =
        templates::watch(&client, ns, &liveness, plan_store.clone());
    let (events, publisher) = Events::start(client.clone(), reporter, Arc::clone(&metrics));
    let notifier = super::notify::Notifier::start(
        client.clone(),
        settings.gate_http.clone(),
        crate::gates::access::CredentialReader::new(
            client.clone(),
            settings.gate_credentials_namespace.clone(),
        ),
        policy.clone(),
        events.clone(),
        Arc::clone(&metrics),
        settings.notify.clone(),
    );
    let ctx = Arc::new(Context {
        client: client.clone(),
        deployments,
        stateful_sets,
        daemon_sets,
        templates,
        pods,
        jobs,
        services,
        scales,
        hpas,
        routes,
        events,
        notifier,
        metrics,
        gates,
        serving,
        policy,
        freezes,
        gate_templates,
        config,
        job_pod_security: settings.job_pod_security,
        liveness,
        reconcile_deadline: settings.reconcile_deadline,
        queue: Arc::clone(&queue),
        memory,
        plans: plan_store.clone(),
        hashes: super::hashes::HashMemo::default(),
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
            let wake = wakes(&queue, WakeSource::Deployment);
            move |d: CachedDeployment| wake(plan_of(&d))
        })
        .watches_stream(set_stream, {
            let wake = wakes(&queue, WakeSource::StatefulSet);
            move |s: StatefulSet| wake(plan_of(&s))
        })
        .watches_stream(daemon_stream, {
            let wake = wakes(&queue, WakeSource::DaemonSet);
            move |d: DaemonSet| wake(plan_of(&d))
        })
        .watches_stream(pod_stream, {
            let wake = wakes(&queue, WakeSource::Pod);
            move |pod: CachedPod| wake(plan_of(&pod))
        })
        // A Job gate's Job that finishes (or appears, or goes) wakes its plan.
        .watches_stream(job_stream, {
            let wake = wakes(&queue, WakeSource::Job);
            move |j: Job| wake(plan_of(&j))
        })
        // A Service or route that changes (drift, or our own write landing) wakes its plan.
        .watches_stream(service_stream, {
            let wake = wakes(&queue, WakeSource::Service);
            move |svc: Service| wake(plan_of(&svc))
        })
        // A ComponentScale the autoscaler writes (or our own write landing),
        // and an HPA that changes, wake the plan.
        .watches_stream(scale_stream, {
            let wake = wakes(&queue, WakeSource::Scale);
            move |s: ComponentScale| wake(plan_of(&s))
        })
        .watches_stream(hpa_stream, {
            let wake = wakes(&queue, WakeSource::Hpa);
            move |h: HorizontalPodAutoscaler| wake(plan_of(&h))
        })
        .reconcile_on({
            let wake = wakes(&queue, WakeSource::Route);
            route_wakes.filter_map(move |r| futures::future::ready(wake(Some(r))))
        })
        // A template copy that appears (our create landing) or goes wakes its plan.
        .watches_stream(copy_stream, {
            let wake = wakes(&queue, WakeSource::TemplateCopy);
            move |s: k8s_openapi::api::core::v1::Secret| wake(plan_of(&s))
        })
        // A stored template that appears (the cache filling) or goes wakes its plan.
        .watches_stream(template_stream, {
            let wake = wakes(&queue, WakeSource::Revision);
            move |cr: CachedRevision| wake(plan_of(&cr))
        })
        // A gate result wakes its plan; reconciles never wait for one.
        .reconcile_on({
            let wake = wakes(&queue, WakeSource::Gate);
            wake_rx.filter_map(move |r| futures::future::ready(wake(Some(r))))
        })
        // A template that appears, changes or goes wakes the plans that use it.
        .reconcile_on({
            let wake = wakes(&queue, WakeSource::GateTemplate);
            template_wake.filter_map(move |r| futures::future::ready(wake(Some(r))))
        })
        // A GatePolicy that changes wakes every plan; a namespace's labels, its plans.
        .reconcile_on({
            let wake = wakes(&queue, WakeSource::Policy);
            policy_wake.filter_map(move |r| futures::future::ready(wake(Some(r))))
        })
        // A ReleaseFreeze that changes wakes every plan; a namespace's labels, its plans.
        .reconcile_on({
            let wake = wakes(&queue, WakeSource::Freeze);
            freeze_wake.filter_map(move |r| futures::future::ready(wake(Some(r))))
        })
        // A ConfigMap or Secret that changes wakes the plans that read it (a
        // new revision), and a copy that appears or goes wakes its plan.
        .reconcile_on({
            let wake = wakes(&queue, WakeSource::Config);
            config_wake.filter_map(move |r| futures::future::ready(wake(Some(r))))
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
