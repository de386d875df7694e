//! Housekeeping every few seconds, beside the reconciles: what the operator
//! holds in memory goes to metrics (`releaseplan_cached_objects`,
//! `releaseplan_cached_bytes`, `releaseplan_plan_memory_entries`), and everything kept about a plan that
//! is no longer in the plan cache is dropped.
//!
//! A plan normally takes its state with it in its last reconcile (the
//! finalizer's removal). One whose finalizer someone else removed, or that
//! went while this replica was not watching (a watch gap, another shard),
//! has no last reconcile: without the sweep its memory, gate tasks, queue
//! entry and phase series would stay for the life of the process.

use super::context::Context;
use super::keys::cached_key;
use crate::api::ReleasePlan;
use crate::api::cached::{CachedPlan, Footprint as _};
use crate::ops::metrics::ResourceLabel;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the sweep runs.
const EVERY: Duration = Duration::from_secs(5);

/// Sweeps until the task is dropped. It sweeps only once the plan cache has
/// its first list (`listed`; before it, every plan would look gone), and
/// never waits on the store's readiness itself: kube-runtime's store wakes
/// only the last task that waited on it, and that must stay the Controller.
pub(crate) async fn run(ctx: Arc<Context>, plans: Store<CachedPlan>, listed: Arc<AtomicBool>) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if listed.load(Ordering::Acquire) {
            sweep(&ctx, &plans);
        }
        sizes(&ctx, &plans);
    }
}

/// Drops what is kept about plans the cache no longer holds.
pub(crate) fn sweep(ctx: &Context, plans: &Store<CachedPlan>) {
    // A lookup per kept key: no copy of the whole plan cache every 5 s.
    let gone = |k: &ObjectRef<ReleasePlan>| plans.get(&cached_key(k)).is_none();
    for key in ctx.memory.keys().into_iter().filter(gone) {
        tracing::debug!(plan = %key, "dropping the memory of a plan that is gone");
        ctx.forget(&key);
    }
    for key in ctx.gates.plans().into_iter().filter(gone) {
        ctx.gates.observe(&key, None);
    }
    for key in ctx.queue.plans().into_iter().filter(gone) {
        ctx.queue.forget(key.namespace.as_deref(), &key.name);
    }
    for series in ctx.metrics.plan_keys() {
        let key = series
            .split_once('/')
            .map(|(ns, name)| ObjectRef::<ReleasePlan>::new(name).within(ns));
        if key.as_ref().is_none_or(gone) {
            ctx.metrics.set_phase(&series, None);
        }
    }
}

/// Sets the size gauges.
fn sizes(ctx: &Context, plans: &Store<CachedPlan>) {
    let set = |resource: std::borrow::Cow<'_, str>, n: usize| {
        ctx.metrics
            .cached_objects
            .get_or_create(&ResourceLabel {
                resource: resource.into_owned(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    };
    set(CachedPlan::plural(&()), plans.len());
    set(plural(&ctx.deployments), ctx.deployments.len());
    set(plural(&ctx.stateful_sets), ctx.stateful_sets.len());
    set(plural(&ctx.daemon_sets), ctx.daemon_sets.len());
    set(plural(&ctx.scales), ctx.scales.len());
    set(plural(&ctx.hpas), ctx.hpas.len());
    set(plural(&ctx.pods), ctx.pods.len());
    set(plural(&ctx.jobs), ctx.jobs.len());
    set(plural(&ctx.services), ctx.services.len());
    set(plural(&ctx.templates), ctx.templates.len());
    if ctx.config.enabled() {
        for (resource, kind) in CONFIG_KINDS {
            set(resource.into(), ctx.config.len(kind));
        }
    }
    for routes in ctx.routes.served() {
        set(routes.plural().into(), routes.len());
    }
    let t = &ctx.gate_templates;
    set(
        crate::api::template::GateTemplate::plural(&()),
        t.namespaced.len(),
    );
    set(
        crate::api::template::ClusterGateTemplate::plural(&()),
        t.cluster.len(),
    );
    let bytes = |resource: std::borrow::Cow<'_, str>, n: usize| {
        ctx.metrics
            .cached_bytes
            .get_or_create(&ResourceLabel {
                resource: resource.into_owned(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    };
    bytes(
        CachedPlan::plural(&()),
        plans.state().iter().map(|p| p.footprint()).sum(),
    );
    bytes(plural(&ctx.deployments), ctx.deployments.footprint());
    bytes(plural(&ctx.pods), ctx.pods.footprint());
    bytes(plural(&ctx.templates), ctx.templates.footprint());
    if ctx.config.enabled() {
        for (resource, kind) in CONFIG_KINDS {
            bytes(resource.into(), ctx.config.footprint(kind));
        }
    }
    ctx.metrics
        .plan_memory_entries
        .set(i64::try_from(ctx.memory.len()).unwrap_or(i64::MAX));
}

/// The config caches (`--config-versioning`), by resource: sources and copies.
const CONFIG_KINDS: [(&str, crate::api::config::ConfigKind); 2] = [
    ("configmaps", crate::api::config::ConfigKind::ConfigMap),
    ("secrets", crate::api::config::ConfigKind::Secret),
];

/// The resource a cache holds.
fn plural<K: Resource<DynamicType = ()>>(
    _: &super::index::PlanCache<K>,
) -> std::borrow::Cow<'static, str> {
    K::plural(&())
}
