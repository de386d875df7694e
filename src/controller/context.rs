//! What every reconcile shares: the caches, the clients, the gate runner,
//! and what is kept about each plan between its reconciles.

use super::events::Events;
use super::gates::GateRunner;
use super::index::PlanCache;
use super::memory::Memory;
use super::queue::Queue;
use super::{memory, templates, trim};
use crate::api::ComponentScale;
use crate::api::ReleasePlan;
use crate::api::cached::{CachedDeployment, CachedPlan, CachedPod, CachedRevision};
use crate::ops::liveness::Liveness;
use crate::ops::metrics::Metrics;
use crate::ops::shard::Shard;
use crate::plan::Refusal;
use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::warn;

/// Settings of the controller.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The routers the cluster serves (checked at start-up): only these are
    /// watched.
    pub routers: Vec<crate::api::RouterKind>,
    /// Watch only this namespace; all namespaces when None.
    pub namespace: Option<String>,
    /// Reconciles run at once.
    pub concurrency: u16,
    /// Identity for events.
    pub instance: Option<String>,
    /// The HTTP client of gates, with the operator's outbound policy.
    pub gate_http: crate::gates::outbound::GateHttp,
    /// The budget of gate calls: in flight and per second, per namespace
    /// and in all (`--gate-calls-*`).
    pub gate_budget: crate::gates::budget::Limits,
    /// The namespace whose Secrets and ConfigMaps gates may reference (the
    /// operator's own).
    pub gate_credentials_namespace: String,
    /// Whether a namespace no GatePolicy selects is refused every gate call
    /// and route (`--gate-policy=required`) or keeps the operator-wide rules.
    pub gate_policy: crate::gates::policy::Mode,
    /// The shard this process serves; all plans when None.
    pub shard: Option<Shard>,
    /// Version referenced ConfigMaps and Secrets with each revision.
    pub config_versioning: bool,
    /// Where the operator may read and copy them (`--config-namespaces`).
    pub config_namespaces: super::config_cache::ConfigNamespaces,
    /// The Pod Security Standard level of tenants' Job gates.
    pub job_pod_security: crate::gates::pod_security::Level,
    /// Notifications' settings (`--dashboard-url`).
    pub notify: super::notify::NotifySettings,
    /// How long one reconcile may run before it is given up as an error
    /// and retried (`--reconcile-timeout-seconds`).
    pub reconcile_deadline: Duration,
}

/// Shared state of all reconciles.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Cache of the revision Deployments, by plan.
    pub deployments: PlanCache<CachedDeployment>,
    /// Cache of the StatefulSets of StatefulSet components, by plan.
    pub stateful_sets: PlanCache<StatefulSet>,
    /// Cache of the DaemonSets of DaemonSet components (one per revision), by plan.
    pub daemon_sets: PlanCache<DaemonSet>,
    /// Cache of the ControllerRevisions that store the revisions' templates, by plan.
    pub templates: PlanCache<CachedRevision>,
    /// Cache of the pods of revision Deployments (labels and container states), by plan.
    pub pods: PlanCache<CachedPod>,
    /// Cache of the Jobs of Job gates (labels and conditions), by plan.
    pub jobs: PlanCache<Job>,
    /// Cache of the stable and canary Services, by plan.
    pub services: PlanCache<Service>,
    /// Cache of the ComponentScales of autoscaled components, by plan.
    pub scales: PlanCache<ComponentScale>,
    /// Cache of the HPAs the plans own, by plan.
    pub hpas: PlanCache<HorizontalPodAutoscaler>,
    /// Caches of the routes of every router, by plan (empty for a router the
    /// cluster does not serve: a route write then fails and status says so).
    pub routes: super::router::Routes,
    /// Publishes Kubernetes Events beside the reconciles.
    pub events: Events,
    /// The queue of notifications, sent after their transition is written.
    pub notifier: super::notify::Notifier,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Evaluates Prometheus and webhook gates beside the reconciles.
    pub gates: Arc<GateRunner>,
    /// Asks the pods of components with `serving` whether they serve.
    pub(crate) serving: Arc<super::serving::ServingProbes>,
    /// The GatePolicies and namespaces' labels, as cached.
    pub policy: super::policy::PolicyCaches,
    /// The ReleaseFreezes and namespaces' labels, as cached.
    pub freezes: super::freeze::FreezeCaches,
    /// Caches of the GateTemplates and ClusterGateTemplates plans refer to.
    pub gate_templates: templates::TemplateCaches,
    /// Caches of ConfigMaps and Secrets (digests only), the plans' copies and
    /// the template gates' copies, in each namespace the operator may read
    /// config in.
    pub config: super::config_cache::ConfigScope,
    /// The Pod Security Standard level of tenants' Job gates (`--gate-job-pod-security`).
    pub job_pod_security: crate::gates::pod_security::Level,
    /// What `/healthz` reads.
    pub liveness: Arc<Liveness>,
    /// How long one reconcile may run ([`Settings::reconcile_deadline`]).
    pub reconcile_deadline: Duration,
    /// Plans waiting for their reconcile (metrics only).
    pub queue: Arc<Queue>,
    /// What is kept about each plan between its reconciles.
    /// Shared with the plan stream, which drops a kept write once the
    /// cache holds it.
    pub(crate) memory: Arc<Memory>,
    /// The plan cache, read for its newest copy when a reconcile starts.
    pub(crate) plans: kube::runtime::reflector::Store<CachedPlan>,
    /// The plans' template hashes, by generation.
    pub(crate) hashes: super::hashes::HashMemo,
}

impl Context {
    /// The retry delay after a failure. The exponent grows with time, not
    /// with the number of failed reconciles: a failure that comes before the
    /// scheduled retry (a watch event woke the plan early) keeps the schedule,
    /// so a burst of events cannot push the next retry to minutes away.
    /// Returns whether this failure moved the schedule, the failure count and
    /// the delay.
    pub(crate) fn backoff(&self, key: &ObjectRef<ReleasePlan>) -> (bool, u32, Duration) {
        let now = Instant::now();
        self.memory.with(key, |m| {
            let b = m.backoff.get_or_insert(memory::Backoff {
                failures: 0,
                retry_at: now,
            });
            if now < b.retry_at {
                return (false, b.failures, b.retry_at - now);
            }
            b.failures = b.failures.saturating_add(1);
            let delay = crate::ops::backoff::reconcile_delay(b.failures);
            b.retry_at = now + delay;
            (true, b.failures, delay)
        })
    }

    pub(crate) fn reset_backoff(&self, key: &ObjectRef<ReleasePlan>) {
        self.memory.with(key, |m| m.backoff = None);
    }

    /// The newest copy of the plan: as dispatched, as cached now, or as
    /// this process last wrote or read it ([`Memory::freshest`]).
    pub(crate) fn freshest(
        &self,
        key: &ObjectRef<ReleasePlan>,
        cached: Arc<CachedPlan>,
    ) -> Arc<CachedPlan> {
        let stored = self.plans.get(&super::keys::cached_key(key));
        self.memory.freshest(key, cached, stored)
    }

    /// Kept in the cache's form, as small as the cache's own copy.
    pub(crate) fn remember(&self, plan: &ReleasePlan) {
        match CachedPlan::new(plan) {
            Ok(mut cached) => {
                trim::plan(&mut cached);
                self.memory.with(&ObjectRef::from_obj(plan), |m| {
                    m.fresh = Some(Arc::new(cached));
                });
            }
            // Then the cache's copy is used, and a conflict reads it again.
            Err(e) => {
                warn!(plan = %ObjectRef::from_obj(plan), error = %e, "cannot keep the written plan");
            }
        }
    }

    /// The last failed write of the plan's objects (None: the last went through).
    pub(crate) fn remember_refusal(&self, key: &ObjectRef<ReleasePlan>, refusal: Option<&Refusal>) {
        self.memory.with(key, |m| m.refusal = refusal.cloned());
    }

    /// Whether every cache of objects made for plans has its first list.
    pub(crate) fn caches_synced(&self) -> bool {
        self.deployments.synced()
            && self.stateful_sets.synced()
            && self.daemon_sets.synced()
            && self.templates.synced()
            && self.pods.synced()
            && self.jobs.synced()
            && self.services.synced()
            && self.scales.synced()
            && self.hpas.synced()
            && self.routes.synced()
            && self.config.synced()
            && self.policy.synced()
            && self.freezes.synced()
    }

    /// Drops everything kept about a plan whose deletion proceeds.
    pub(crate) fn forget(&self, key: &ObjectRef<ReleasePlan>) {
        self.memory.forget(key);
        self.hashes
            .forget((key.namespace.as_deref().unwrap_or_default(), &key.name));
        self.gates.observe(key, None);
        self.serving.forget(key);
    }
}

/// How soon a plan is tried again while the caches fill.
pub(crate) const CACHE_SYNC_RETRY: Duration = Duration::from_millis(250);
