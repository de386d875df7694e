//! From cluster objects to the pure core's observation: small pure helpers.

use super::context::Context;
use super::error::Error;
use super::gates::GateWork;
use super::index::plan_objects;
use crate::api::ANNOTATION_REQUEST;
use crate::api::cached::{CachedDeployment, CachedRevision};
use crate::api::{ComponentScale, LABEL_REVISION, Phase, ReleasePlan, ReleasePlanStatus};
use crate::plan::{InvalidRequest, Request};
use crate::plan::{Observation, PodFailure, Target};
use chrono::Utc;
use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::plan::RevisionObs;

/// The core's reader of a revision Deployment, shared with the plugin.
pub use crate::plan::revision_of;

/// [`revision_of`] for a Deployment as the cache holds it.
pub fn revision_of_cached(d: &CachedDeployment) -> Option<RevisionObs> {
    crate::plan::revision_from(
        &d.metadata,
        |k| d.labels.get(k),
        d.replicas(),
        d.status.as_ref(),
    )
}

/// The request in the plan's annotation, `<action>/<id>` (for example
/// `promote/1732870000-ab12`), unless already acknowledged; read by the core
/// ([`Request::from_annotation`]), as the plugin writes it. A value that is
/// not a request is returned as such so the controller can say so in an event.
pub fn pending_request(plan: &ReleasePlan) -> Result<Option<Request>, InvalidRequest> {
    let Some(raw) = plan.annotations().get(ANNOTATION_REQUEST) else {
        return Ok(None);
    };
    let acknowledged = plan
        .status
        .as_ref()
        .and_then(|s| s.acknowledged_request.as_deref());
    if acknowledged == Some(raw.as_str()) {
        return Ok(None);
    }
    Request::from_annotation(raw).map(Some)
}

/// What one reconcile saw: the core's observation and the spec's templates,
/// and the cached objects acting on the decision compares against.
pub(crate) struct Seen {
    /// The plan's key.
    pub key: ObjectRef<ReleasePlan>,
    /// Its namespace.
    pub ns: String,
    /// The core's input.
    pub obs: Observation,
    /// The spec's pod template of each component.
    pub templates: crate::plan::Templates,
    /// The revision Deployments.
    pub owned: Vec<Arc<CachedDeployment>>,
    /// The StatefulSets of StatefulSet components.
    pub stateful_sets: Vec<Arc<StatefulSet>>,
    /// The DaemonSets of DaemonSet components.
    pub daemon_sets: Vec<Arc<DaemonSet>>,
    /// The stored templates (ControllerRevisions).
    pub stored: Vec<Arc<CachedRevision>>,
    /// The stable and canary Services.
    pub services: Vec<Arc<Service>>,
    /// The ComponentScales of autoscaled components.
    pub scales: Vec<Arc<ComponentScale>>,
    /// The HPAs the plan owns.
    pub hpas: Vec<Arc<HorizontalPodAutoscaler>>,
    /// When a Deployment this process applied is not in the cache yet, how
    /// long its answer stands in for it (the reconcile comes back by then).
    pub stand_in: Option<std::time::Duration>,
}

/// Observes the plan: its Deployments, pods, Jobs, Services and routes and
/// the templates of its gates from the caches, gate verdicts from the
/// runner, the last failed write from memory. Reads no network.
pub(crate) fn observe(ctx: &Context, plan: &ReleasePlan) -> Result<Seen, Error> {
    let ns = plan.namespace().ok_or(Error::NoNamespace)?;
    let name = plan.name_any();
    let key = ObjectRef::from_obj(plan);
    let uid = plan.uid().unwrap_or_default();
    // What the watch had delivered is read before the cache: a later event
    // may not be in what was read.
    let seen = ctx.deployments.seen();
    let (owned, stand_in) = super::stand_in::latest_deployments(
        ctx,
        &key,
        seen,
        plan_objects(&ctx.deployments, &ns, &name, &uid),
    );
    let stored = plan_objects(&ctx.templates, &ns, &name, &uid);
    let (stateful_sets, daemon_sets, workloads) = observe_workloads(ctx, &ns, &name, &uid);
    let status = plan.status.clone().unwrap_or_default();
    // Template gates: resolved purely from the cached templates and what
    // status recorded for the step.
    let refs = plan.spec.health.template_refs();
    let (copies, template_copies) = super::template_copies::observe(ctx, &ns, &name, &uid);
    // The namespace's GatePolicies (from the watch cache): the Pod Security
    // level of its Job gates (else the operator's), and what its gates may
    // call and its routes attach to, judged by the core before a release.
    let (policy, pod_security) = policy_of(ctx, &ns);
    let resolution = crate::gates::template::resolve_with(
        &refs,
        &status,
        &crate::gates::template::Inputs {
            observed: &ctx.gate_templates.observe(&ns, &refs),
            copies: &copies,
            pod_security,
        },
    );
    let freezes = ctx.freezes.for_plan(&ns, plan.labels());
    let hasher = ctx.hashes.of(plan);
    let target = Target::from_spec_hashed(&plan.spec, pod_security, &hasher)
        .map(|t| t.with_templates(resolution).with_freezes(freezes))
        .map(|t| match &policy {
            Some(p) => t.with_policy(&plan.spec.components, p),
            None => t,
        });
    let (request, invalid_request) =
        pending_request(plan).map_or_else(|bad| (None, Some(bad)), |r| (r, None));
    let gates = gate_verdicts(ctx, plan, &key, target.as_ref().ok(), &status);
    let services = plan_objects(&ctx.services, &ns, &name, &uid);
    let traffic = target
        .as_ref()
        .map(|t| super::traffic::observe((&ns, &name, &uid), t, &services, &ctx.routes))
        .unwrap_or_default();
    let scales = plan_objects(&ctx.scales, &ns, &name, &uid);
    let hpas = plan_objects(&ctx.hpas, &ns, &name, &uid);
    let scale_obs = super::autoscale::observe(&scales, &hpas);
    let config = super::config::observe(ctx, plan, &ns, &owned, &stored);
    // The template each component's revision runs: the spec's, its config
    // references pointed at their copies.
    let (target, templates) = match target {
        Ok(t) => {
            let (t, templates) = t
                .with_scales(&scale_obs)
                .with_workloads(&workloads)
                .with_config_hashed(&name, &plan.spec, &status, &config, &hasher);
            (Ok(t), templates)
        }
        Err(e) => (Err(e), BTreeMap::new()),
    };
    let revisions = revisions(
        ctx,
        &key,
        (&ns, &name),
        target.as_ref().ok(),
        &owned,
        &workloads,
    );
    let obs = Observation {
        plan: name.clone(),
        now: Utc::now(),
        generation: plan.metadata.generation.unwrap_or(0),
        target,
        pod_failures: pod_failures(ctx, plan, &ns, &name, &status),
        status,
        revisions,
        workloads,
        gates,
        jobs: observe_jobs(ctx, &key, &ns, &name, &uid),
        traffic,
        scales: scale_obs,
        config,
        // Read by `adopt::observe` (an adopted Deployment may not be cached yet).
        adopted: Vec::new(),
        request,
        invalid_request,
        refusal: ctx.memory.read(&key, |m| m.refusal.clone()).flatten(),
        template_copies,
        deleting: plan.metadata.deletion_timestamp.is_some(),
    };
    Ok(Seen {
        key,
        ns,
        obs,
        templates,
        owned,
        stateful_sets,
        daemon_sets,
        stored,
        services,
        scales,
        hpas,
        stand_in,
    })
}

/// The runner's verdicts while it serves the plan, else the persisted ones;
/// the core decides which of them count.
fn gate_verdicts(
    ctx: &Context,
    plan: &ReleasePlan,
    key: &ObjectRef<ReleasePlan>,
    target: Option<&Target>,
    status: &ReleasePlanStatus,
) -> Vec<crate::api::GateStatus> {
    let work = target.and_then(|t| GateWork::of(plan, t, status));
    if work.is_some() {
        ctx.gates.observe(key, work)
    } else {
        ctx.gates.observe(key, None);
        status.gates.clone()
    }
}

/// The revisions: of each Deployment, and of the StatefulSets' pods; of a
/// component with `serving`, only pods that answer count as ready.
fn revisions(
    ctx: &Context,
    key: &ObjectRef<ReleasePlan>,
    plan: (&str, &str),
    target: Option<&Target>,
    owned: &[Arc<CachedDeployment>],
    workloads: &releaseplan_core::plan::stateful::WorkloadObs,
) -> Vec<crate::plan::RevisionObs> {
    let mut revisions: Vec<_> = owned
        .iter()
        .filter_map(|d| revision_of_cached(d))
        .chain(releaseplan_core::plan::stateful::revisions(workloads))
        .collect();
    serving_ready(ctx, key, plan, target, &mut revisions);
    revisions
}

/// Of components with `serving`, a revision's ready pods are only those
/// Ready pods that have answered the check ([`super::serving`]): a model
/// server is ready when it serves, not when its probe passes.
fn serving_ready(
    ctx: &Context,
    key: &ObjectRef<ReleasePlan>,
    (ns, name): (&str, &str),
    target: Option<&Target>,
    revisions: &mut [RevisionObs],
) {
    let checks: BTreeMap<&str, &releaseplan_core::api::serving::Serving> = target
        .iter()
        .flat_map(|t| &t.components)
        .filter_map(|c| c.serving.as_ref().map(|s| (c.name.as_str(), s)))
        .collect();
    if checks.is_empty() {
        ctx.serving.answered(key, Vec::new());
        return;
    }
    let pods = ctx.pods.of_plan(ns, name);
    let mut asks = Vec::new();
    let mut of_revision: Vec<(&str, &str, String)> = Vec::new();
    for p in &pods {
        let (Some(component), Some(hash)) = (
            p.labels.get(crate::api::LABEL_COMPONENT),
            p.labels.get(LABEL_REVISION),
        ) else {
            continue;
        };
        let Some(serving) = checks.get(component) else {
            continue;
        };
        let status = p.status.as_ref();
        let (Some(ip), true, None) = (
            status.and_then(|s| s.pod_ip),
            status.is_some_and(|s| s.ready),
            p.metadata.deletion_timestamp.as_ref(),
        ) else {
            continue;
        };
        let pod = p.metadata.name.clone().unwrap_or_default();
        of_revision.push((component, hash, pod.clone()));
        asks.push(super::serving::Ask {
            pod,
            ip,
            serving: (*serving).clone(),
        });
    }
    let answered = ctx.serving.answered(key, asks);
    for rev in revisions
        .iter_mut()
        .filter(|r| checks.contains_key(r.component.as_str()))
    {
        let serving = of_revision
            .iter()
            .filter(|(c, h, pod)| *c == rev.component && *h == rev.hash && answered.contains(pod))
            .count();
        rev.ready = rev.ready.min(i32::try_from(serving).unwrap_or(i32::MAX));
    }
}

/// The namespace's GatePolicy, and the Pod Security level of the plan's Job
/// gates it sets (else the operator's).
fn policy_of(
    ctx: &Context,
    ns: &str,
) -> (
    Option<crate::gates::policy::NamespacePolicy>,
    crate::gates::pod_security::Level,
) {
    let policy = ctx.policy.for_namespace(ns);
    let level = policy.as_ref().map_or(ctx.job_pod_security, |p| {
        p.job_pod_security(ctx.job_pod_security)
    });
    (policy, level)
}

/// The plan's StatefulSets and DaemonSets, and as the core reads them with
/// their pods.
fn observe_workloads(
    ctx: &Context,
    ns: &str,
    name: &str,
    uid: &str,
) -> (
    Vec<Arc<StatefulSet>>,
    Vec<Arc<DaemonSet>>,
    releaseplan_core::plan::stateful::WorkloadObs,
) {
    use releaseplan_core::objects::{daemon_set, stateful_set};
    let sets = plan_objects(&ctx.stateful_sets, ns, name, uid);
    let daemons = plan_objects(&ctx.daemon_sets, ns, name, uid);
    let mut seen = releaseplan_core::plan::stateful::WorkloadObs {
        stateful_sets: sets
            .iter()
            .filter_map(|s| stateful_set::observe(s))
            .collect(),
        daemon_sets: daemons
            .iter()
            .filter_map(|d| daemon_set::observe(d))
            .collect(),
        pods: Vec::new(),
    };
    if !seen.stateful_sets.is_empty() || !seen.daemon_sets.is_empty() {
        seen.pods = ctx
            .pods
            .of_plan(ns, name)
            .iter()
            .filter_map(|p| stateful_set::pod(p, &seen))
            .collect();
    }
    (sets, daemons, seen)
}

/// The plan's Jobs from the cache, and the creates refused in its last
/// reconcile for names the cache does not hold.
pub(crate) fn observe_jobs(
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
pub(crate) fn pod_failures(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{LABEL_COMPONENT, LABEL_REVISION};
    use crate::plan::Action;
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::json;

    fn plan(annotation: Option<&str>, acked: Option<&str>) -> ReleasePlan {
        let mut v = json!({
            "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
            "metadata": {"name": "shop", "namespace": "prod"},
            "spec": {"components": []},
            "status": {}
        });
        if let Some(a) = annotation {
            v["metadata"]["annotations"] = json!({ANNOTATION_REQUEST: a});
        }
        if let Some(a) = acked {
            v["status"]["acknowledgedRequest"] = json!(a);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn reads_requests_once() {
        assert_eq!(pending_request(&plan(None, None)), Ok(None));
        let r = pending_request(&plan(Some("promote/7"), None))
            .unwrap()
            .unwrap();
        assert_eq!(r.action, Action::Promote { full: false });
        assert_eq!(r.id, "promote/7");
        assert_eq!(
            pending_request(&plan(Some("promote/7"), Some("promote/7"))),
            Ok(None)
        );
        assert!(pending_request(&plan(Some("explode/1"), None)).is_err());
    }

    #[test]
    fn ready_counts_only_updated_pods() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "shop-web-x", "labels": {LABEL_COMPONENT: "web", LABEL_REVISION: "x"}},
            "spec": {"replicas": 3, "selector": {}, "template": {}},
            "status": {"replicas": 4, "readyReplicas": 3, "updatedReplicas": 1}
        }))
        .unwrap();
        let r = revision_of(&d).unwrap();
        assert_eq!((r.replicas, r.ready, r.current), (3, 1, 4));
        let cached: CachedDeployment =
            serde_json::from_value(serde_json::to_value(&d).unwrap()).unwrap();
        assert_eq!(revision_of_cached(&cached), Some(r));
    }
}
