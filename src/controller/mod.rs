//! The reconcile: all I/O around the pure core.
//!
//! Six stages, each quick and never blocking: the plan comes from the
//! controller's cache; its Deployments, pods and stored templates
//! (ControllerRevisions) come from reflector caches; the pure core decides; we
//! apply only what differs (server-side apply, one field manager, owner
//! references); we write status only when it changed,
//! with optimistic concurrency so a stale read never overwrites newer data;
//! and we pick the requeue (await a change, look again later, or back off).

pub mod controller_revision;
pub mod deployment;
pub mod events;
pub mod gates;
pub mod index;
pub mod jobs;
mod memory;
pub mod observe;
pub mod queue;
mod sweep;
pub mod templates;
pub mod traffic;
pub mod trim;

use crate::api::cached::{CachedDeployment, CachedPlan, CachedPod, CachedRevision, Labelled};
use crate::api::gateway::HTTPRoute;
use crate::api::{
    FINALIZER, LABEL_PLAN, LABEL_REVISION, Outcome, Phase, ReleasePlan, ReleasePlanStatus,
};
use crate::ops::liveness::Liveness;
use crate::ops::metrics::{ErrorLabel, FailedGateLabel, Metrics, OutcomeLabel, PlanState};
use crate::ops::shard::Shard;
use crate::plan::machine::Cause;
use crate::plan::{
    self, Decision, EventReason, EventType, Observation, PodFailure, Refusal, Target,
    TemplateSource,
};
use chrono::Utc;
use controller_revision::Write;
use events::Events;
use futures::{FutureExt, StreamExt, TryStreamExt};
use gates::{GateRunner, GateWork};
use index::PlanCache;
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Service;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use memory::{Memory, Settled, Unconfirmed};
use queue::Queue;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{Instrument, info, warn};

/// The field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "releaseplan";

/// Errors of one reconcile. None of them stops the process.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the API server failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Someone else wrote the plan first: read again.
    #[error("conflict writing {0}: the object changed, reading again")]
    Conflict(String),
    /// The object has no namespace (ReleasePlans are namespaced).
    #[error("object has no namespace")]
    NoNamespace,
    /// Serialization failed.
    #[error("serialization: {0}")]
    Json(#[from] serde_json::Error),
    /// The API server refused a write of a Deployment, Service or route
    /// (a 4xx answer); status and an Event say why.
    #[error("{0} could not be written (see the plan's status)")]
    Refused(String),
    /// A write of a Deployment, Service or route got no answer (connection
    /// reset, timeout; it may have landed) or a 5xx one: retried with
    /// backoff; status and an `ApiUnavailable` Event say so.
    #[error(
        "{object} could not be written: the API server did not take it (see the plan's status)"
    )]
    Unavailable {
        /// The object.
        object: String,
        /// Whether any answer came (a 5xx) or none (the transport failed).
        answered: bool,
    },
    /// A ControllerRevision (a revision's stored template) could not be
    /// written or deleted. It never holds the rollout: the Deployments were
    /// written, and the reconcile is retried with backoff.
    #[error(
        "ControllerRevision {name} (the stored template of a revision) could not be written: {source}"
    )]
    Template {
        /// The ControllerRevision.
        name: String,
        /// The API server's answer.
        source: kube::Error,
    },
    /// A Job of a Job gate could not be created or deleted. The gate waits
    /// (its verdict comes from the Job); the reconcile is retried with backoff.
    #[error("Job {name} (of a Job gate) could not be written: {source}")]
    Job {
        /// The Job.
        name: String,
        /// The API server's answer.
        source: kube::Error,
    },
    /// The reconcile panicked (a bug, ours or a dependency's). Caught so
    /// that one plan cannot take the process and every other plan down; it
    /// is retried with backoff and reported like any failure.
    #[error("internal error (a bug; please report it): {0}")]
    Panic(String),
}

impl Error {
    /// Every [`Error::kind`]: the failures metric exports each at 0 from the
    /// start, so `rate()` and `increase()` see the first failure of a kind.
    pub const KINDS: [&'static str; 11] = [
        "api",
        "transport",
        "unavailable",
        "client",
        "conflict",
        "invalid",
        "serialization",
        "refused",
        "template",
        "job",
        "panic",
    ];

    /// Short label for the failures metric.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code >= 500 => "unavailable",
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(e) if is_transport(e) => "transport",
            Error::Kube(_) => "client",
            Error::Conflict(_) => "conflict",
            Error::NoNamespace => "invalid",
            Error::Json(_) => "serialization",
            Error::Unavailable {
                answered: false, ..
            } => "transport",
            Error::Unavailable { answered: true, .. } => "unavailable",
            Error::Refused(_) => "refused",
            Error::Template { .. } => "template",
            Error::Job { .. } => "job",
            Error::Panic(_) => "panic",
        }
    }
}

/// Errors that stop the operator from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The CRD is not installed in the cluster.
    #[error(
        "the ReleasePlan CRD (releaseplans.releaseplan.io) is not installed: run `kubectl apply --server-side -f crds/releaseplan.yaml`"
    )]
    CrdMissing,
    /// The GateTemplate or ClusterGateTemplate CRD is not installed.
    #[error(
        "the GateTemplate and ClusterGateTemplate CRDs (gatetemplates.releaseplan.io, clustergatetemplates.releaseplan.io) are not installed: run `kubectl apply --server-side -f crds/gatetemplates.yaml`"
    )]
    TemplateCrdMissing,
    /// The API server could not be reached.
    #[error("cannot reach the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// Settings of the controller.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The cluster serves Gateway API HTTPRoutes (checked at start-up).
    pub gateway_api: bool,
    /// Watch only this namespace; all namespaces when None.
    pub namespace: Option<String>,
    /// Reconciles run at once.
    pub concurrency: u16,
    /// Identity for events.
    pub instance: Option<String>,
    /// The HTTP client of gates, with the operator's outbound policy.
    pub gate_http: crate::gates::outbound::GateHttp,
    /// The namespace whose Secrets and ConfigMaps gates may reference (the
    /// operator's own).
    pub gate_credentials_namespace: String,
    /// The shard this process serves; all plans when None.
    pub shard: Option<Shard>,
}

/// Shared state of all reconciles.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Cache of the revision Deployments, by plan.
    pub deployments: PlanCache<CachedDeployment>,
    /// Cache of the ControllerRevisions that store the revisions' templates, by plan.
    pub templates: PlanCache<CachedRevision>,
    /// Cache of the pods of revision Deployments (labels and container states), by plan.
    pub pods: PlanCache<CachedPod>,
    /// Cache of the Jobs of Job gates (labels and conditions), by plan.
    pub jobs: PlanCache<Job>,
    /// Cache of the stable and canary Services, by plan.
    pub services: PlanCache<Service>,
    /// Cache of the HTTPRoutes, by plan (empty when the cluster serves no
    /// Gateway API: a route write then fails and status says so).
    pub routes: PlanCache<HTTPRoute>,
    /// HTTPRoutes are watched (they could be listed at start-up).
    pub gateway_api: bool,
    /// Publishes Kubernetes Events beside the reconciles.
    pub events: Events,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Evaluates Prometheus and webhook gates beside the reconciles.
    pub gates: Arc<GateRunner>,
    /// Caches of the GateTemplates and ClusterGateTemplates plans refer to.
    pub gate_templates: templates::TemplateCaches,
    /// What `/healthz` reads.
    pub liveness: Arc<Liveness>,
    /// Plans waiting for their reconcile (metrics only).
    pub queue: Arc<Queue>,
    /// What is kept about each plan between its reconciles.
    memory: Memory,
}

impl Context {
    /// The retry delay after a failure. The exponent grows with time, not
    /// with the number of failed reconciles: a failure that comes before the
    /// scheduled retry (a watch event woke the plan early) keeps the schedule,
    /// so a burst of events cannot push the next retry to minutes away.
    /// Returns whether this failure moved the schedule, the failure count and
    /// the delay.
    fn backoff(&self, key: &ObjectRef<ReleasePlan>) -> (bool, u32, Duration) {
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
            let delay = backoff_delay(b.failures);
            b.retry_at = now + delay;
            (true, b.failures, delay)
        })
    }

    fn reset_backoff(&self, key: &ObjectRef<ReleasePlan>) {
        self.memory.with(key, |m| m.backoff = None);
    }

    /// The cached plan, or the newer copy this process last wrote or read.
    fn freshest(&self, key: &ObjectRef<ReleasePlan>, cached: Arc<CachedPlan>) -> Arc<CachedPlan> {
        self.memory.with(key, |m| match &m.fresh {
            Some(f) if f.uid() == cached.uid() && newer(f, &cached) => Arc::clone(f),
            Some(_) => {
                m.fresh = None;
                cached
            }
            None => cached,
        })
    }

    /// Kept in the cache's form, as small as the cache's own copy.
    fn remember(&self, plan: &ReleasePlan) {
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

    /// Whether every cache of objects made for plans has its first list.
    fn caches_synced(&self) -> bool {
        self.deployments.synced()
            && self.templates.synced()
            && self.pods.synced()
            && self.jobs.synced()
            && self.services.synced()
            && self.routes.synced()
    }

    /// Drops everything kept about a plan whose deletion proceeds.
    fn forget(&self, key: &ObjectRef<ReleasePlan>) {
        self.memory.forget(key);
        self.gates.observe(key, None);
    }
}

/// How soon a plan is tried again while the caches fill.
const CACHE_SYNC_RETRY: Duration = Duration::from_millis(250);

/// Whether `a` has a later resourceVersion than `b`. Versions are opaque to
/// clients, but the API server's are etcd revisions; anything that does not
/// parse is taken as not newer, so the cache wins.
fn newer(a: &CachedPlan, b: &CachedPlan) -> bool {
    let rv = |p: &CachedPlan| {
        p.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    matches!((rv(a), rv(b)), (Some(x), Some(y)) if x > y)
}

/// Exponential backoff: 1s, 2s, 4s ... capped at 5 minutes.
pub fn backoff_delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(9);
    Duration::from_secs((1u64 << exp).min(300))
}

/// The key of a cached plan in the maps of the context.
pub(crate) fn key_of(cached: &CachedPlan) -> ObjectRef<ReleasePlan> {
    ObjectRef::new(&cached.name_any()).within(&cached.namespace().unwrap_or_default())
}

/// The key of a plan in the plan cache (and the controller's queue).
pub(crate) fn cached_key(key: &ObjectRef<ReleasePlan>) -> ObjectRef<CachedPlan> {
    ObjectRef::new(&key.name).within(key.namespace.as_deref().unwrap_or_default())
}

/// Reconciles one plan. Errors are returned to the error policy, never raised.
pub async fn reconcile(cached: Arc<CachedPlan>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let key = key_of(&cached);
    ctx.queue.started(key.namespace.as_deref(), &key.name);
    if !ctx.caches_synced() {
        // A cache not listed yet reads as "no Deployments, no pods": a
        // decision on it would re-create and re-announce what exists (a new
        // leader's first reconciles would write). Its list comes in seconds.
        return Ok(Action::requeue(CACHE_SYNC_RETRY));
    }
    let _in_flight = ctx.liveness.reconcile_started();
    // Decoded as a ReleasePlan when it entered the cache: this cannot fail
    // but for a bug, which is then this plan's error, not the process's.
    let plan = Arc::new(ctx.freshest(&key, cached).decode()?);
    let span = tracing::info_span!("reconcile", plan = %key, generation = plan.metadata.generation.unwrap_or(0));
    let res = std::panic::AssertUnwindSafe(reconcile_inner(&plan, &ctx).instrument(span))
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| Err(Error::Panic(panic_message(panic.as_ref()))));
    ctx.metrics
        .duration
        .observe(started.elapsed().as_secs_f64());
    if res.is_ok() {
        ctx.reset_backoff(&key);
    }
    res
}

/// The text of a caught panic.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic without a message".to_string())
}

/// Requeues after an error: soon for a conflict (the fresh object is already
/// read), with per-object exponential backoff otherwise, and a Warning Event
/// on the plan at the 1st, 2nd, 4th, 8th ... failure in a row.
// kube-runtime's Controller::run hands the Arcs over by value.
#[allow(clippy::needless_pass_by_value)]
pub fn error_policy(plan: Arc<CachedPlan>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics
        .failures
        .get_or_create(&ErrorLabel {
            error: err.kind().into(),
        })
        .inc();
    let key = key_of(&plan);
    if matches!(err, Error::Conflict(_)) {
        info!(plan = %key, "{err}");
        return Action::requeue(Duration::from_millis(300));
    }
    let (moved, n, delay) = ctx.backoff(&key);
    warn!(plan = %key, error = %err, retry_in = ?delay, "reconcile failed");
    // A failed Deployment write already has its own Event from the decision.
    if moved && n.is_power_of_two() && !matches!(err, Error::Refused(_) | Error::Unavailable { .. })
    {
        ctx.events.send(
            &plan.object_ref(&()),
            EventType::Warning,
            EventReason::ReconcileError,
            &format!("{err} (failure {n} in a row; retrying in {delay:?})"),
            &err.to_string(),
        );
    }
    Action::requeue(delay)
}

/// Whether a request failed on the way (connection refused or reset, TLS,
/// timeout, a body cut short): no answer came, and the write may have landed.
pub(crate) fn is_transport(e: &kube::Error) -> bool {
    matches!(
        e,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_)
    )
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

async fn reconcile_inner(plan: &Arc<ReleasePlan>, ctx: &Context) -> Result<Action, Error> {
    let ns = plan.namespace().ok_or(Error::NoNamespace)?;
    let name = plan.name_any();
    let plans: Api<ReleasePlan> = Api::namespaced(ctx.client.clone(), &ns);
    let deleting = plan.metadata.deletion_timestamp.is_some();
    let has_finalizer = plan.finalizers().iter().any(|f| f == FINALIZER);
    let key = ObjectRef::from_obj(&**plan);
    let metrics_key = format!("{ns}/{name}");
    if deleting && !has_finalizer {
        ctx.metrics.set_phase(&metrics_key, None);
        ctx.forget(&key);
        return Ok(Action::await_change());
    }
    if deleting && plan.finalizers().iter().any(|f| f == "foregroundDeletion") {
        // Foreground deletion removes every Deployment first: there is nothing to
        // roll back to, and holding the plan would only fight the garbage collector.
        set_finalizers(&plans, plan, false).await?;
        ctx.metrics.write("finalizer");
        ctx.metrics.set_phase(&metrics_key, None);
        ctx.forget(&key);
        return Ok(Action::await_change());
    }
    let plan: Arc<ReleasePlan> = if has_finalizer {
        Arc::clone(plan)
    } else {
        // Go on with the patched object: the first status is written in this
        // same reconcile, so a new plan never sits without one.
        let Some(p) = set_finalizers(&plans, plan, true).await? else {
            return Ok(Action::await_change());
        };
        ctx.metrics.write("finalizer");
        ctx.remember(&p);
        Arc::new(p)
    };

    confirm_unanswered(ctx, &key, &plan, &metrics_key);

    // Stage 3: observe: the owned Deployments and pods from the caches, gate
    // verdicts from the runner, the last refused write from memory.
    let uid = plan.uid().unwrap_or_default();
    let owned = plan_objects(&ctx.deployments, &ns, &name, &uid);
    let stored = plan_objects(&ctx.templates, &ns, &name, &uid);
    let status = plan.status.clone().unwrap_or_default();
    // Template gates: resolved purely from the cached templates and what
    // status recorded for the step.
    let refs = &plan.spec.health.templates;
    let resolution =
        crate::gates::template::resolve(refs, &status, &ctx.gate_templates.observe(&ns, refs));
    let target = Target::from_spec(&plan.spec).map(|t| t.with_templates(resolution));
    let pod_failures = pod_failures(ctx, &plan, &ns, &name, &status);
    let (request, invalid_request) = match observe::pending_request(&plan) {
        Ok(r) => (r, None),
        Err(bad) => (None, Some(bad)),
    };
    let work = target
        .as_ref()
        .ok()
        .and_then(|t| GateWork::of(&plan, t, &status));
    // The runner's verdicts while it serves the plan, else the persisted ones;
    // the core decides which of them count.
    let gates = if work.is_some() {
        ctx.gates.observe(&key, work)
    } else {
        ctx.gates.observe(&key, None);
        status.gates.clone()
    };
    let services = plan_objects(&ctx.services, &ns, &name, &uid);
    let routes = plan_objects(&ctx.routes, &ns, &name, &uid);
    let traffic_obs = target
        .as_ref()
        .map(|t| traffic::observe(&name, t, &services, &routes))
        .unwrap_or_default();
    let mut obs = Observation {
        plan: name.clone(),
        now: Utc::now(),
        generation: plan.metadata.generation.unwrap_or(0),
        target,
        status: status.clone(),
        revisions: owned
            .iter()
            .filter_map(|d| observe::revision_of_cached(d))
            .collect(),
        pod_failures,
        gates,
        jobs: observe_jobs(ctx, &key, &ns, &name, &uid),
        traffic: traffic_obs,
        request,
        invalid_request,
        refusal: ctx.memory.read(&key, |m| m.refusal.clone()).flatten(),
        deleting,
    };
    let templates: BTreeMap<String, k8s_openapi::api::core::v1::PodTemplateSpec> = plan
        .spec
        .components
        .iter()
        .map(|c| (c.name.clone(), c.template.clone()))
        .collect();

    // Stage 4: decide, purely.
    let mut decision = plan::decide(&obs, &templates);

    // Stage 5: act on the difference. The template of each revision the spec
    // rolls out is stored before its Deployment is written, and pruned with
    // it. A refused Deployment write does not end the reconcile: the core
    // decides again knowing it, and status says so.
    let recorded = if deleting {
        Ok(())
    } else {
        store_templates(ctx, &plan, &ns, &decision).await
    };
    let acted = match act(ctx, &plan, &ns, &owned, &stored, &decision).await {
        Acted::Done => traffic::act(ctx, &plan, &ns, &services, &routes, &decision.traffic).await,
        other => other,
    };
    let (refusal, pruned) = match acted {
        Acted::Done => (
            None,
            prune_templates(ctx, &ns, &owned, &stored, &decision).await,
        ),
        Acted::Refused(r) => (Some(r), Ok(())),
        Acted::NamespaceTerminating => {
            info!("the namespace is being deleted: waiting for the plan's own deletion");
            return Ok(Action::await_change());
        }
    };
    if refusal != obs.refusal {
        ctx.memory.with(&key, |m| m.refusal.clone_from(&refusal));
        obs.refusal = refusal.clone();
        decision = plan::decide(&obs, &templates);
    }

    // The Jobs of Job gates: never before the Deployments were written, and
    // a failure holds nothing else (the gate waits for its Job).
    let jobs_done = if refusal.is_some() {
        Ok(())
    } else {
        let mut refused = Vec::new();
        let done = jobs::act(ctx, &plan, &ns, &decision.jobs, &mut refused).await;
        ctx.memory.with(&key, |m| m.job_refusals = refused);
        done
    };

    // Stage 6: write status; events and metrics only for what was written.
    if plan.status.as_ref() != Some(&decision.status) {
        match write_status(&plans, &plan, &decision.status).await {
            Ok(Some(written)) => {
                // Written on the version an unanswered write was made on: that
                // one did not land (it would have made this one conflict).
                ctx.memory.with(&key, |m| m.unconfirmed = None);
                ctx.remember(&written);
            }
            Ok(None) => {}
            Err(Error::Kube(e)) if may_have_landed(&e) => {
                // No answer: the transition may be written. Its Events and
                // metrics wait for a read that says so.
                warn!(error = %e, "status write got no answer: its transition is confirmed by the next read");
                ctx.memory.with(&key, |m| {
                    m.unconfirmed = Some(Unconfirmed {
                        base_version: plan.resource_version(),
                        before: status.clone(),
                        decision: decision.clone(),
                    });
                });
                return Err(Error::Kube(e));
            }
            Err(e @ Error::Conflict(_)) => {
                // Decided on a stale object: read it fresh, so the retry does not
                // conflict again (after an API server restart the cache may lag
                // for many seconds), and drop this decision's events.
                if let Ok(p) = plans.get(&name).await {
                    ctx.remember(&p);
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        }
        ctx.metrics.write("status");
    }
    ctx.events.planned(&plan.object_ref(&()), &decision.events);
    for e in &decision.events {
        info!(reason = %e.reason, "{}", e.message);
    }
    record_metrics(ctx, &metrics_key, &status, &decision);
    if decision.finalize {
        set_finalizers(&plans, &plan, false).await?;
        ctx.metrics.write("finalizer");
        ctx.metrics.set_phase(&metrics_key, None);
        ctx.forget(&key);
        info!("rollout settled: finalizer removed, deletion proceeds");
        return Ok(Action::await_change());
    }
    if let Some(r) = refusal {
        let object = format!("{} {}", r.kind, r.name);
        return Err(if r.is_unavailable() {
            Error::Unavailable {
                object,
                answered: r.code != 0,
            }
        } else {
            Error::Refused(object)
        });
    }
    recorded.and(pruned).and(jobs_done)?;

    // Stage 7: one requeue, decided by the core; gate results wake the plan.
    Ok(decision
        .requeue_after
        .map_or_else(Action::await_change, Action::requeue))
}

/// Settles a transition whose status write got no answer, now that the plan
/// is read again: its Events and metrics go out once the read shows the
/// written status (and never for a write that did not land).
fn confirm_unanswered(
    ctx: &Context,
    key: &ObjectRef<ReleasePlan>,
    plan: &ReleasePlan,
    metrics_key: &str,
) {
    let landed = ctx.memory.with(key, |m| {
        let settled = m.unconfirmed.as_ref()?.settle(plan);
        match settled {
            Settled::NotYet => None,
            Settled::Lost => {
                m.unconfirmed = None;
                None
            }
            Settled::Landed => m.unconfirmed.take(),
        }
    });
    if let Some(u) = landed {
        info!("a status write that got no answer had landed: publishing its transition");
        ctx.events
            .planned(&plan.object_ref(&()), &u.decision.events);
        for e in &u.decision.events {
            info!(reason = %e.reason, "{}", e.message);
        }
        record_metrics(ctx, metrics_key, &u.before, &u.decision);
    }
}

/// Whether a failed write may still have been applied: it got no answer, or
/// a 5xx one (a timeout of the API server's own may come after etcd wrote).
fn may_have_landed(e: &kube::Error) -> bool {
    is_transport(e) || matches!(e, kube::Error::Api(s) if s.code >= 500)
}

/// The plan's Jobs from the cache, and the creates refused in its last
/// reconcile for names the cache does not hold.
fn observe_jobs(
    ctx: &Context,
    key: &ObjectRef<ReleasePlan>,
    ns: &str,
    name: &str,
    uid: &str,
) -> Vec<crate::gates::job::JobObs> {
    let mut out: Vec<_> = plan_objects(&ctx.jobs, ns, name, uid)
        .iter()
        .map(|j| crate::gates::job::JobObs::of(j))
        .collect();
    let refused = ctx
        .memory
        .read(key, |m| m.job_refusals.clone())
        .unwrap_or_default();
    for r in refused {
        if !out.iter().any(|j| j.name == r.name) {
            out.push(r);
        }
    }
    out
}

/// Failure signals of pods of revisions being rolled out.
fn pod_failures(
    ctx: &Context,
    plan: &ReleasePlan,
    ns: &str,
    name: &str,
    status: &ReleasePlanStatus,
) -> Vec<PodFailure> {
    if status.phase != Phase::RollingOut {
        return Vec::new();
    }
    let rolling: Vec<(&str, &str)> = status
        .components
        .iter()
        .filter(|c| c.is_changing())
        .filter_map(|c| Some((c.name.as_str(), c.current_hash.as_deref()?)))
        .collect();
    if rolling.is_empty() {
        return Vec::new();
    }
    let max_restarts = plan
        .spec
        .health
        .max_restarts
        .unwrap_or(crate::api::DEFAULT_MAX_RESTARTS);
    let detect = plan.spec.health.detect_pod_failures.unwrap_or(true);
    let pods = ctx.pods.of_plan(ns, name);
    let mut out = Vec::new();
    for (component, hash) in rolling {
        let mine = pods.iter().filter(|p| {
            p.labels.get(crate::api::LABEL_COMPONENT) == Some(component)
                && p.labels.get(LABEL_REVISION) == Some(hash)
        });
        for s in crate::gates::pods::detect(mine.map(|p| &**p), max_restarts, detect) {
            out.push(PodFailure {
                component: component.to_string(),
                hash: hash.to_string(),
                pod: s.pod,
                reason: s.reason,
                message: s.message,
            });
        }
    }
    out
}

/// Whether the API server refused a write because the namespace is being
/// deleted: nothing to report then, the plan's own deletion follows.
fn namespace_terminating(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403
        && s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")))
}

/// What a failed Deployment write comes to: nothing to report in a
/// terminating namespace, else a refusal for status.
fn failed_write(deployment: &str, e: &kube::Error) -> Acted {
    failed("Deployment", deployment, e)
}

/// What a failed write of an object of `kind` comes to.
fn failed(kind: &'static str, name: &str, e: &kube::Error) -> Acted {
    if namespace_terminating(e) {
        Acted::NamespaceTerminating
    } else {
        Acted::Refused(refusal_of(kind, name, e))
    }
}

/// The refusal a failed Deployment write becomes.
fn refusal_of(kind: &'static str, name: &str, e: &kube::Error) -> Refusal {
    match e {
        kube::Error::Api(s) => Refusal {
            kind,
            name: name.to_string(),
            code: s.code,
            message: s.message.clone(),
        },
        other => Refusal {
            kind,
            name: name.to_string(),
            code: 0,
            message: other.to_string(),
        },
    }
}

/// What acting on a decision came to.
#[derive(Debug, Clone, PartialEq)]
enum Acted {
    /// Every write went through (or none was needed).
    Done,
    /// The first write that failed; the rest were not tried (they would most
    /// likely fail the same way).
    Refused(Refusal),
    /// The namespace is being deleted: the plan's deletion follows.
    NamespaceTerminating,
}

/// Applies the Deployment intents and deletions that differ from the cluster.
async fn act(
    ctx: &Context,
    plan: &ReleasePlan,
    ns: &str,
    owned: &[Arc<CachedDeployment>],
    stored: &[Arc<CachedRevision>],
    decision: &Decision,
) -> Acted {
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    let deleting = plan.metadata.deletion_timestamp.is_some();
    for intent in &decision.deployments {
        let observed = owned.iter().find(|d| d.name_any() == intent.name);
        if deleting {
            // While the plan is deleted, only scale what exists: never create (the
            // namespace may be terminating, where every create is refused), and
            // never apply the whole object (the garbage collector may be stripping
            // owner references for orphan propagation; an apply would put them back).
            let Some(o) = observed else {
                continue;
            };
            if o.replicas() != Some(intent.replicas) {
                info!(deployment = %intent.name, replicas = intent.replicas, "scaling");
                let patch = serde_json::json!({"spec": {"replicas": intent.replicas}});
                match api
                    .patch(&intent.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => ctx.metrics.write("apply"),
                    Err(e) if is_not_found(&e) => {}
                    // The deletion proceeds anyway once nothing is left to protect.
                    Err(e) if decision.finalize => {
                        warn!(deployment = %intent.name, error = %e, "scaling during deletion failed");
                    }
                    Err(e) => return failed_write(&intent.name, &e),
                }
            }
            continue;
        }
        let template = match (&intent.template, observed) {
            (TemplateSource::Spec(t), _) => (**t).clone(),
            (TemplateSource::Existing, Some(d)) => d.template(),
            // Gone, and the spec has moved on: the template stored for the revision.
            (TemplateSource::Existing, None) => {
                let found = controller_revision::find(
                    stored.iter().map(AsRef::as_ref),
                    &intent.component,
                    &intent.hash,
                );
                match found.map(|cr| controller_revision::template(cr, &intent.hash)) {
                    Some(Ok(t)) => {
                        info!(deployment = %intent.name, "recreating the revision Deployment from its stored template");
                        t
                    }
                    Some(Err(e)) => {
                        warn!(deployment = %intent.name, error = %e, "revision Deployment is gone and its stored template is not usable: cannot recreate it");
                        continue;
                    }
                    None => {
                        if intent.replicas > 0 {
                            warn!(deployment = %intent.name, "revision Deployment is gone, its template is not in the spec and no ControllerRevision stores it: cannot recreate it");
                        }
                        continue;
                    }
                }
            }
        };
        let owned = deployment::should_own(plan, observed.map(|d| &d.metadata));
        let desired = deployment::build(plan, intent, &template, owned);
        if observed.is_some_and(|o| deployment::up_to_date(&desired, o)) {
            continue;
        }
        info!(deployment = %intent.name, replicas = intent.replicas, "applying");
        match api
            .patch(
                &intent.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&desired),
            )
            .await
        {
            Ok(_) => ctx.metrics.write("apply"),
            Err(e) => {
                if !namespace_terminating(&e) {
                    warn!(deployment = %intent.name, error = %e, "Deployment write failed");
                }
                return failed_write(&intent.name, &e);
            }
        }
    }
    for name in &decision.delete {
        info!(deployment = %name, "deleting old revision");
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => ctx.metrics.write("delete"),
            Err(e) if is_not_found(&e) => {}
            Err(e) if deleting && decision.finalize => {
                warn!(deployment = %name, error = %e, "delete during deletion failed");
            }
            Err(e) => return failed_write(name, &e),
        }
    }
    Acted::Done
}

/// Stores the template of every revision the spec rolls out in its
/// ControllerRevision, looking before it writes. A failed write is reported
/// (the first one) but holds nothing: the Deployments are written anyway.
async fn store_templates(
    ctx: &Context,
    plan: &ReleasePlan,
    ns: &str,
    decision: &Decision,
) -> Result<(), Error> {
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
    let plan_name = plan.name_any();
    let key = ObjectRef::from_obj(plan);
    let mut failed = None;
    for intent in &decision.deployments {
        let TemplateSource::Spec(template) = &intent.template else {
            continue;
        };
        let name = controller_revision::name(&plan_name, &intent.component, &intent.hash);
        let existing = latest_template(ctx, &key, ns, &name);
        let write = controller_revision::to_write(
            plan,
            &intent.component,
            &intent.hash,
            template,
            decision.status.rollout_count,
            existing.as_deref(),
        );
        let res = match write {
            Write::Nothing => continue,
            Write::Foreign => {
                warn!(controller_revision = %name, "held by another controller: the template is stored once it is gone");
                continue;
            }
            Write::Apply(cr) => {
                info!(controller_revision = %name, "storing the revision's template");
                apply_template(ctx, &key, &api, &name, &cr).await
            }
            Write::Replace { uid, with } => {
                warn!(controller_revision = %name, "it stores another template: replacing it");
                match delete_template(ctx, &api, &name, uid).await {
                    Ok(()) => apply_template(ctx, &key, &api, &name, &with).await,
                    Err(e) => Err(e),
                }
            }
        };
        match res {
            Ok(()) => {}
            // The plan's own deletion follows.
            Err(e) if namespace_terminating(&e) => return Ok(()),
            Err(e) => {
                warn!(controller_revision = %name, error = %e, "storing the template failed");
                failed.get_or_insert(Error::Template { name, source: e });
            }
        }
    }
    failed.map_or(Ok(()), Err)
}

/// Deletes the ControllerRevision of every revision Deployment the decision
/// deleted (history beyond the limit, components gone).
async fn prune_templates(
    ctx: &Context,
    ns: &str,
    owned: &[Arc<CachedDeployment>],
    stored: &[Arc<CachedRevision>],
    decision: &Decision,
) -> Result<(), Error> {
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
    let mut failed = None;
    for deleted in &decision.delete {
        let Some(rev) = owned
            .iter()
            .find(|d| &d.name_any() == deleted)
            .and_then(|d| observe::revision_of_cached(d))
        else {
            continue;
        };
        let Some(cr) =
            controller_revision::find(stored.iter().map(AsRef::as_ref), &rev.component, &rev.hash)
        else {
            continue;
        };
        let name = cr.name_any();
        info!(controller_revision = %name, "deleting the stored template of an old revision");
        let uid = cr.uid().unwrap_or_default();
        if let Err(e) = delete_template(ctx, &api, &name, uid).await {
            warn!(controller_revision = %name, error = %e, "deleting the stored template failed");
            failed.get_or_insert(Error::Template { name, source: e });
        }
    }
    failed.map_or(Ok(()), Err)
}

/// How long the answer to a ControllerRevision apply stands in for the cache.
const WRITTEN_TEMPLATE_TTL: Duration = Duration::from_secs(30);

/// The ControllerRevision `name` as last seen: the cache's copy, or the
/// answer to this process's own apply while the cache has not caught up (a
/// reconcile right after the write would otherwise write it again).
fn latest_template(
    ctx: &Context,
    key: &ObjectRef<ReleasePlan>,
    ns: &str,
    name: &str,
) -> Option<Arc<CachedRevision>> {
    let cached = ctx.templates.get(ns, name);
    ctx.memory
        .with(key, |m| {
            let (at, written) = m.written_templates.get(name).cloned()?;
            // Long enough for any watch to deliver it: a copy older than that
            // may have been deleted since, and the cache is the truth again.
            if at.elapsed() > WRITTEN_TEMPLATE_TTL {
                m.written_templates.remove(name);
                return None;
            }
            let rv = |c: &CachedRevision| {
                c.metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse::<u64>().ok())
            };
            match &cached {
                // The cache has it (or newer): the written copy is no longer needed.
                Some(c) if rv(c) >= rv(&written) => {
                    m.written_templates.remove(name);
                    None
                }
                _ => Some(written),
            }
        })
        .or(cached)
}

async fn apply_template(
    ctx: &Context,
    key: &ObjectRef<ReleasePlan>,
    api: &Api<ControllerRevision>,
    name: &str,
    cr: &ControllerRevision,
) -> Result<(), kube::Error> {
    let written = api
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(cr),
        )
        .await?;
    ctx.metrics.write("template");
    // In the cache's form; one that does not convert is simply not kept.
    if let Ok(c) = serde_json::to_value(&written).and_then(serde_json::from_value::<CachedRevision>)
    {
        ctx.memory.with(key, |m| {
            m.written_templates
                .insert(name.to_string(), (Instant::now(), Arc::new(c)));
        });
    }
    Ok(())
}

/// Deletes the ControllerRevision of that uid (never a newer one of the same
/// name); one already gone is fine.
async fn delete_template(
    ctx: &Context,
    api: &Api<ControllerRevision>,
    name: &str,
    uid: String,
) -> Result<(), kube::Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(name, &params).await {
        Ok(_) => {
            ctx.metrics.write("template");
            Ok(())
        }
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Metrics of a written decision, from its transition.
fn record_metrics(ctx: &Context, key: &str, before: &ReleasePlanStatus, decision: &Decision) {
    let m = &ctx.metrics;
    m.set_plan(
        key,
        Some(PlanState {
            phase: decision.status.phase,
            halted: decision.status.is_halted(),
        }),
    );
    let outcome = |kind: Outcome| {
        m.rollouts
            .get_or_create(&OutcomeLabel {
                outcome: kind.to_string(),
            })
            .inc();
    };
    match &decision.transition {
        Cause::Promoted => {
            outcome(Outcome::Promoted);
            if let Some(start) = before.rollout_started_at {
                let end = decision
                    .status
                    .history
                    .last()
                    .and_then(|h| h.finished_at)
                    .unwrap_or(start);
                // Milliseconds of a rollout fit f64's mantissa many times over.
                #[allow(clippy::cast_precision_loss)]
                let secs = (end - start).num_milliseconds() as f64 / 1000.0;
                m.rollout_duration.observe(secs.max(0.0));
            }
        }
        Cause::RollbackDone { .. } => outcome(Outcome::RolledBack),
        Cause::Start { superseded: true } => outcome(Outcome::Superseded),
        Cause::RollbackStarted(f) => {
            m.rollbacks
                .get_or_create(&FailedGateLabel {
                    gate: f.gate.clone(),
                })
                .inc();
        }
        _ => {}
    }
}

/// Writes the whole status with the plan's resourceVersion: a 409 means we
/// decided on stale data. Returns the written object (`None`: the plan is gone).
async fn write_status(
    api: &Api<ReleasePlan>,
    plan: &ReleasePlan,
    status: &ReleasePlanStatus,
) -> Result<Option<ReleasePlan>, Error> {
    let mut obj = plan.clone();
    obj.metadata.managed_fields = None;
    obj.status = Some(status.clone());
    match api
        .replace_status(&plan.name_any(), &PostParams::default(), &obj)
        .await
    {
        Ok(written) => Ok(Some(written)),
        Err(e) if is_conflict(&e) => Err(Error::Conflict(plan.name_any())),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Adds or removes our finalizer with a merge patch guarded by
/// resourceVersion. Returns the patched object (`None`: the plan is gone).
async fn set_finalizers(
    api: &Api<ReleasePlan>,
    plan: &ReleasePlan,
    add: bool,
) -> Result<Option<ReleasePlan>, Error> {
    let mut finalizers: Vec<String> = plan
        .finalizers()
        .iter()
        .filter(|f| f.as_str() != FINALIZER)
        .cloned()
        .collect();
    if add {
        finalizers.push(FINALIZER.to_string());
    }
    let patch = serde_json::json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": plan.resource_version(),
        }
    });
    match api
        .patch(
            &plan.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(p) => Ok(Some(p)),
        Err(e) if is_conflict(&e) => Err(Error::Conflict(plan.name_any())),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

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

/// The cached objects of one plan: labelled with its name, and ours or
/// orphaned (no controller): a plan deleted with orphan propagation leaves its
/// objects without owner, and a plan of the same name adopts them.
fn plan_objects<K: Resource + Labelled>(
    cache: &PlanCache<K>,
    ns: &str,
    plan: &str,
    uid: &str,
) -> Vec<Arc<K>> {
    cache
        .of_plan(ns, plan)
        .into_iter()
        .filter(|o| {
            let refs = o.owner_references();
            refs.iter().any(|r| r.uid == uid) || !refs.iter().any(|r| r.controller == Some(true))
        })
        .collect()
}

/// The plan an object belongs to, by its `releaseplan.io/plan` label.
fn plan_of<K: Resource + Labelled>(obj: &K) -> Option<ObjectRef<ReleasePlan>> {
    let plan = obj.label(LABEL_PLAN)?;
    let ns = obj.meta().namespace.as_ref()?;
    Some(ObjectRef::new(plan).within(ns))
}

/// Backoff of each watch stream after an error: 250ms doubling to 2s, reset
/// on success. The default (up to 30s) leaves every cache stale for that long
/// after an API server restart (and a restarted API server answers the first
/// watch with 410 Expired, which costs one more round); a watch re-established
/// within seconds keeps rollouts moving.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
}

impl WatchBackoff {
    const MIN: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(2);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff { next: Self::MIN }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let d = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        Some(d)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::MIN;
    }
}

/// Runs the controller until `shutdown` resolves; in-flight reconciles finish first.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    liveness: Arc<Liveness>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.as_deref();
    let (plan_store, plan_writer) = reflector::store::<CachedPlan>();
    // The most recent list, in pages of 500: a list "of any version" is
    // served from the API server's cache, which ignores `limit`, so a start
    // read every plan in one response (managedFields included) and decoded
    // it whole before the trim; and it may be older than what the previous
    // leader wrote.
    let plan_stream = watcher(scoped(&client, ns), watcher::Config::default())
        .backoff(WatchBackoff::default())
        .inspect(watched::<CachedPlan, _>(&liveness))
        // Plans of other shards are neither cached nor reconciled.
        .try_filter({
            let shard = settings.shard;
            move |event| std::future::ready(shard.is_none_or(|s| plan_in_shard(s, event)))
        })
        .modify(trim::plan)
        .reflect(plan_writer)
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
    // HTTPRoutes only when the cluster serves them: a watch of a missing
    // resource would fail forever (and fail the liveness check).
    let (routes, route_stream) = if settings.gateway_api {
        let (c, s) = owned.watch(trim::route);
        (c, s.boxed())
    } else {
        (PlanCache::empty(), futures::stream::empty().boxed())
    };
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
        gateway_api: settings.gateway_api,
        events,
        metrics,
        gates,
        gate_templates,
        liveness,
        queue: Arc::clone(&queue),
        memory: Memory::default(),
    });
    let sweeper = tokio::spawn(sweep::run(Arc::clone(&ctx), plan_store.clone()));
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
        .watches_stream(route_stream, {
            let wake = wakes(&queue);
            move |r: HTTPRoute| wake(plan_of(&r))
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
        .trigger_backoff(WatchBackoff::default())
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
pub(crate) trait Watched:
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
struct OwnedWatches<'a> {
    client: &'a Client,
    namespace: Option<&'a str>,
    shard: Option<Shard>,
    liveness: &'a Arc<Liveness>,
}

impl OwnedWatches<'_> {
    /// A cached watch of the objects of kind `K` made for plans (selected by
    /// the plan label, and of this shard's plans), trimmed by `trim` before
    /// caching: its store, and the stream that maps their changes to plans.
    fn watch<K>(
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
            .backoff(WatchBackoff::default())
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
fn plan_in_shard(shard: Shard, event: &watcher::Event<CachedPlan>) -> bool {
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
fn owned_in_shard<K: Resource + Labelled>(
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
async fn ok_only<K>(r: Result<K, watcher::Error>) -> Option<Result<K, watcher::Error>> {
    r.ok().map(Ok)
}

/// Reports each item of the watch stream of `K` to the liveness check, by
/// the resource's plural (the word the request layer reads off the path
/// when the API server accepts the watch again).
fn watched<K: Resource<DynamicType = ()>, T>(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_message_is_kept() {
        let caught = std::panic::catch_unwind(|| std::panic::panic_any("boom")).unwrap_err();
        assert_eq!(panic_message(caught.as_ref()), "boom");
        let caught =
            std::panic::catch_unwind(|| std::panic::panic_any(format!("n={}", 3))).unwrap_err();
        assert_eq!(panic_message(caught.as_ref()), "n=3");
    }

    #[test]
    fn every_error_kind_is_exported_from_the_start() {
        let api = kube::Error::Api(Box::new(kube::core::Status::failure("no", "Forbidden")));
        let errors = [
            Error::Kube(kube::Error::Api(Box::new(kube::core::Status::failure(
                "no", "x",
            )))),
            Error::Kube(kube::Error::Service("connection reset".into())),
            Error::Kube(kube::Error::Api(Box::new(
                kube::core::Status::failure("etcd", "x").with_code(503),
            ))),
            Error::Kube(kube::Error::LinesCodecMaxLineLengthExceeded),
            Error::Conflict("p".into()),
            Error::NoNamespace,
            Error::Json(serde_json::from_str::<u8>("x").unwrap_err()),
            Error::Refused("d".into()),
            Error::Template {
                name: "t".into(),
                source: api,
            },
            Error::Job {
                name: "j".into(),
                source: kube::Error::LinesCodecMaxLineLengthExceeded,
            },
            Error::Panic("boom".into()),
        ];
        let kinds: Vec<&str> = errors.iter().map(Error::kind).collect();
        assert_eq!(kinds, Error::KINDS);
    }

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff_delay(1), Duration::from_secs(1));
        assert_eq!(backoff_delay(2), Duration::from_secs(2));
        assert_eq!(backoff_delay(5), Duration::from_secs(16));
        assert_eq!(backoff_delay(50), Duration::from_secs(300));
    }
}
