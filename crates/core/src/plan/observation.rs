//! What `decide` is given: the target (the spec, parsed once) and one
//! observation of the cluster (revision Deployments, pod failures, gate
//! verdicts, the time, a pending request), as the controller read them.

use super::autoscale::ScaleObs;
use super::config;
use super::steps::{CurrentStep, Step};
use super::{InvalidRequest, Request, SpecError, spec, traffic};
use crate::api::config::CarriedConfig;
use crate::api::template::{GateTemplateSpec, ResolvedGate};
use crate::api::{Autoscaling, DEFAULT_SCALE_DOWN_DELAY_SECONDS, GateStatus};
use crate::api::{LABEL_COMPONENT, LABEL_REVISION, ReleasePlanSpec, ReleasePlanStatus, revision};
use crate::gates::GateSpec;
use crate::gates::job::{JobGateSpec, JobObs};
use crate::gates::template::TemplateProblem;
use crate::gates::template::{Resolution, TemplateGate};
use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// One component as the spec wants it.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetComponent {
    /// Component name.
    pub name: String,
    /// Template hash of the spec's template.
    pub hash: String,
    /// Replicas wanted: the spec's, or for an autoscaled component its
    /// ComponentScale's once observed ([`Target::with_scales`]).
    pub replicas: i32,
    /// Replicas the spec asks for (for an autoscaled component, what it
    /// starts at).
    pub spec_replicas: i32,
    /// Traffic routing (`traffic`), when set.
    pub traffic: Option<traffic::TrafficTarget>,
    /// Autoscaling (`autoscaling`), when set.
    pub autoscaling: Option<Autoscaling>,
    /// The ConfigMaps and Secrets the revision reads ([`Target::with_config`]).
    pub config: Vec<CarriedConfig>,
    /// The Deployment it adopts (`adopt.deployment`), when set.
    pub adopt: Option<String>,
    /// The components it waits for (`dependsOn`), listed before it.
    pub depends_on: Vec<super::order::Dep>,
    /// What runs its pods (`kind`).
    pub kind: crate::api::workload::WorkloadKind,
    /// Its StatefulSet settings (`statefulSet`), when set.
    pub stateful_set: Option<crate::api::workload::StatefulSetSettings>,
    /// Its DaemonSet settings (`daemonSet`), when set.
    pub daemon_set: Option<crate::api::workload::DaemonSetSettings>,
    /// Its release capacity (`capacity`), when set.
    pub capacity: Option<crate::api::capacity::Capacity>,
    /// Its model-ready check (`serving`), when set.
    pub serving: Option<crate::api::serving::Serving>,
    /// A baseline runs beside its canary (`baseline`).
    pub baseline: bool,
}

/// The spec, validated and digested into what the machine needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Components in spec order.
    pub components: Vec<TargetComponent>,
    /// Plan revision: a hash over the components' template hashes.
    pub revision: String,
    /// Canary steps, parsed.
    pub steps: Vec<Step>,
    /// How long a step may wait for ready pods: `progressDeadlineSeconds`
    /// plus the longest `serving.warmup`.
    pub progress_deadline: Duration,
    /// Roll back without a human when a gate fails.
    pub automatic_rollback: bool,
    /// `spec.paused`.
    pub paused: bool,
    /// Old revision Deployments kept at zero replicas.
    pub revision_history_limit: usize,
    /// Blue-green (`strategy.blueGreen`): how long the old revision keeps its
    /// pods after the switch.
    pub blue_green: Option<Duration>,
    /// The configured health gates, parsed (the gate runner evaluates them):
    /// the plan's own, then the template gates that could be resolved.
    pub gates: Vec<GateSpec>,
    /// The Job gates, parsed (the core judges their Jobs): the plan's own, then
    /// the template gates that hold a Job.
    pub jobs: Vec<JobGateSpec>,
    /// The component each gate that names one judges, by gate name; the
    /// others judge the first component that changes.
    pub gate_components: BTreeMap<String, String>,
    /// The trial settings of each gate that changes a default, by gate name
    /// (see [`Target::trial`]).
    pub gate_trials: BTreeMap<String, crate::api::Trial>,
    /// The template gates as read for this step (recorded in status).
    pub template_gates: Vec<ResolvedGate>,
    /// The content of each template gate as read, by content hash (kept in
    /// the plan's template copies, never in status).
    pub template_contents: BTreeMap<String, GateTemplateSpec>,
    /// Template gates that cannot run: they hold the step, and the plan is Stalled.
    pub template_problems: Vec<TemplateProblem>,
    /// Referenced ConfigMaps and Secrets that do not exist, by component: the
    /// plan holds until they do.
    pub config_missing: Vec<(String, config::ConfigRef)>,
    /// References read live only because the operator may not read config in
    /// the plan's namespace, by component ([`config::CONFIG_VERSIONED`]).
    pub config_unversioned: Vec<(String, config::ConfigRef)>,
    /// `spec.strategy.windows`, parsed: when a rollout may start or advance.
    pub windows: Vec<super::windows::Window>,
    /// The ReleaseFreezes that select the plan ([`Target::with_freezes`]).
    pub freezes: Vec<super::windows::Freeze>,
    /// Gates and routes the administrator's GatePolicy refuses
    /// ([`Target::with_policy`]): the release does not start, or holds.
    pub policy_blocks: Vec<super::policy::PolicyBlock>,
}

impl Target {
    /// The trial settings of the gate named `gate` (the defaults when it
    /// changes none).
    pub fn trial(&self, gate: &str) -> crate::api::Trial {
        self.gate_trials.get(gate).copied().unwrap_or_default()
    }

    /// The gate named `gate` is a dry run: it never fails, holds or pauses the rollout.
    pub fn dry_run(&self, gate: &str) -> bool {
        self.trial(gate).dry_run
    }

    /// Validates a spec and computes its revisions (Job gates at the default
    /// Pod Security Standard level).
    pub fn from_spec(spec: &ReleasePlanSpec) -> Result<Self, SpecError> {
        Self::from_spec_at(spec, crate::gates::pod_security::Level::default())
    }

    /// [`Target::from_spec`] with the plan's Job gates held to `pod_security`.
    pub fn from_spec_at(
        spec: &ReleasePlanSpec,
        pod_security: crate::gates::pod_security::Level,
    ) -> Result<Self, SpecError> {
        Self::from_spec_hashed(spec, pod_security, &revision::Direct)
    }

    /// [`Target::from_spec_at`], the templates hashed by `hasher`.
    pub fn from_spec_hashed(
        spec: &ReleasePlanSpec,
        pod_security: crate::gates::pod_security::Level,
        hasher: &dyn revision::TemplateHasher,
    ) -> Result<Self, SpecError> {
        let spec::Checked {
            steps,
            gates,
            jobs,
            gate_components,
            gate_trials,
            mut depends_on,
        } = spec::check_spec_at(spec, pod_security)?;
        let components: Vec<TargetComponent> = spec
            .components
            .iter()
            .map(|c| TargetComponent {
                name: c.name.clone(),
                hash: hasher.hash(&c.name, None, &c.template),
                replicas: c.spec_replicas(),
                spec_replicas: c.spec_replicas(),
                traffic: c
                    .traffic
                    .as_ref()
                    .map(|t| traffic::TrafficTarget::of(t).with_baseline(c.baseline)),
                autoscaling: c.autoscaling.clone(),
                config: Vec::new(),
                adopt: c.adopt.as_ref().map(|a| a.deployment.clone()),
                depends_on: depends_on.remove(&c.name).unwrap_or_default(),
                kind: c.kind,
                stateful_set: c.stateful_set.clone(),
                daemon_set: c.daemon_set.clone(),
                capacity: c.capacity.clone(),
                baseline: c.baseline,
                serving: c.serving.clone(),
            })
            .collect();
        let revision = revision::plan_revision(
            components
                .iter()
                .map(|c| (c.name.as_str(), c.hash.as_str())),
        );
        Ok(Target {
            components,
            revision,
            steps,
            // A model server's pods may load for minutes: the longest
            // warm-up of a component is added to every step's deadline.
            progress_deadline: seconds(spec.progress_deadline_seconds())
                + spec
                    .components
                    .iter()
                    .filter_map(|c| c.serving.as_ref().map(crate::api::serving::Serving::warmup))
                    .max()
                    .unwrap_or_default(),
            automatic_rollback: spec.rollback.automatic,
            paused: spec.paused,
            revision_history_limit: spec.revision_history_limit(),
            blue_green: spec.strategy.blue_green.as_ref().map(|b| {
                seconds(
                    b.scale_down_delay_seconds
                        .unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS)
                        .into(),
                )
            }),
            gates,
            jobs,
            gate_components,
            gate_trials,
            template_gates: Vec::new(),
            template_contents: BTreeMap::new(),
            template_problems: Vec::new(),
            config_missing: Vec::new(),
            config_unversioned: Vec::new(),
            windows: super::windows::parse(&spec.strategy.windows)?,
            freezes: Vec::new(),
            policy_blocks: Vec::new(),
        })
    }

    /// Versions each component's config ([`config::version`]): a component
    /// whose template references ConfigMaps or Secrets gets the hash of the
    /// template pointed at their copies, so the content is part of the
    /// revision. Returns the template each component's revision runs.
    #[must_use]
    pub fn with_config(
        self,
        plan: &str,
        spec: &ReleasePlanSpec,
        status: &ReleasePlanStatus,
        seen: &config::ConfigObservation,
    ) -> (Target, super::Templates) {
        self.with_config_hashed(plan, spec, status, seen, &revision::Direct)
    }

    /// [`Target::with_config`], the rewritten templates hashed by `hasher`.
    #[must_use]
    pub fn with_config_hashed(
        mut self,
        plan: &str,
        spec: &ReleasePlanSpec,
        status: &ReleasePlanStatus,
        seen: &config::ConfigObservation,
        hasher: &dyn revision::TemplateHasher,
    ) -> (Target, super::Templates) {
        let mut templates = BTreeMap::new();
        for (c, t) in spec.components.iter().zip(self.components.iter_mut()) {
            let recorded = status.components.iter().find(|s| s.name == c.name);
            let v = config::version(
                plan,
                c,
                seen,
                recorded.map_or(&[][..], |s| s.config.as_slice()),
            );
            self.config_missing
                .extend(v.missing.iter().map(|m| (c.name.clone(), m.clone())));
            self.config_unversioned
                .extend(v.unversioned.iter().map(|m| (c.name.clone(), m.clone())));
            let keeps = config::keeps_unversioned(recorded, &t.hash, &v);
            match v.template {
                Some(rewritten) if !keeps => {
                    t.hash = hasher.hash(&c.name, Some(&v.renamed), &rewritten);
                    templates.insert(c.name.clone(), Arc::new(rewritten));
                    t.config = v.carried;
                }
                unused => {
                    templates.insert(c.name.clone(), Arc::new(c.template.clone()));
                    // Read in place: nothing is copied for this revision.
                    let versioned = unused.is_some();
                    t.config = v
                        .carried
                        .into_iter()
                        .map(|mut k| {
                            if versioned {
                                k.copy = None;
                            }
                            k
                        })
                        .collect();
                }
            }
        }
        self.revision = revision::plan_revision(
            self.components
                .iter()
                .map(|c| (c.name.as_str(), c.hash.as_str())),
        );
        (self, templates)
    }

    /// Adds the plan's template gates, resolved by
    /// [`crate::gates::template::resolve`]: those that resolved run like the
    /// plan's own gates (a Job template joins the Job gates), the others hold
    /// the step.
    #[must_use]
    pub fn with_templates(mut self, resolution: Resolution) -> Target {
        for g in resolution.gates {
            match g.gate {
                TemplateGate::Runner(gate) => self.gates.push(gate),
                TemplateGate::Job(job) => self.jobs.push(job),
            }
            if let Some(hash) = &g.record.content_hash {
                self.template_contents.insert(hash.clone(), g.content);
            }
            self.template_gates.push(g.record);
        }
        self.template_problems = resolution.problems;
        self
    }

    /// Takes the replicas of each autoscaled component from its ComponentScale,
    /// as observed: the autoscaler's count replaces the spec's (a component
    /// whose ComponentScale is not there yet keeps the count it starts at).
    #[must_use]
    pub fn with_scales(mut self, scales: &[ScaleObs]) -> Target {
        for c in &mut self.components {
            if c.autoscaling.is_none() {
                continue;
            }
            if let Some(r) = scales
                .iter()
                .find(|s| s.component == c.name)
                .and_then(|s| s.replicas)
            {
                c.replicas = r.clamp(0, MAX_REPLICAS);
            }
        }
        self
    }

    /// Takes the replicas of each DaemonSet component from the nodes it runs
    /// on, as observed ([`super::daemon::node_count`]): one pod per node.
    #[must_use]
    pub fn with_workloads(mut self, seen: &super::stateful::WorkloadObs) -> Target {
        for c in &mut self.components {
            if c.kind == crate::api::workload::WorkloadKind::DaemonSet {
                c.replicas = super::daemon::node_count(seen, &c.name);
            }
        }
        self
    }

    /// Adds the ReleaseFreezes that select the plan (the controller matched
    /// their selectors; whether one is in force is decided at `obs.now`).
    #[must_use]
    pub fn with_freezes(mut self, freezes: Vec<super::windows::Freeze>) -> Target {
        self.freezes = freezes;
        self
    }

    /// Judges the plan's gates (template gates included: call it after
    /// [`Target::with_templates`]) and the routes of its `components` (as
    /// written in the spec) against the GatePolicy that governs its
    /// namespace, as the controller's caches hold it ([`super::policy`]).
    #[must_use]
    pub fn with_policy(
        mut self,
        components: &[crate::api::Component],
        policy: &crate::gates::policy::NamespacePolicy,
    ) -> Target {
        self.policy_blocks = super::policy::blocks(&self, components, policy);
        self
    }

    /// The step at `index` after `age` in it.
    pub fn current_step(&self, index: usize, age: Duration) -> CurrentStep {
        CurrentStep::at(&self.steps, index, age)
    }

    /// The target component of that name.
    pub fn component(&self, name: &str) -> Option<&TargetComponent> {
        self.components.iter().find(|c| c.name == name)
    }
}

/// One revision Deployment as observed in the cluster.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RevisionObs {
    /// Deployment name.
    pub name: String,
    /// Component label.
    pub component: String,
    /// Revision (template hash) label.
    pub hash: String,
    /// `spec.replicas`.
    pub replicas: i32,
    /// Ready pods running this revision's template.
    pub ready: i32,
    /// Pods of any kind (`status.replicas`).
    pub current: i32,
    /// Creation time, to prune the oldest revisions first.
    pub created: Option<DateTime<Utc>>,
}

/// A revision Deployment as the core sees it; `None` when it lacks our labels.
/// The one reader of a revision Deployment: the controller observes through
/// it and the plugin draws its tree with it, so both count the same pods.
///
/// `ready` counts only ready pods of the Deployment's current template
/// (`min(readyReplicas, updatedReplicas)`), so a pod left from an older template
/// is never taken for one of this revision; a missing `spec.replicas` is 1,
/// as the API server defaults it.
pub fn revision_of(d: &Deployment) -> Option<RevisionObs> {
    let labels = d.metadata.labels.as_ref();
    revision_from(
        &d.metadata,
        |k| labels?.get(k).map(String::as_str),
        d.spec.as_ref().and_then(|s| s.replicas),
        d.status.as_ref(),
    )
}

/// [`revision_of`] from the parts of a Deployment it reads: metadata (name
/// and creation time), its labels (by key: the cache keeps them packed),
/// `spec.replicas` and status.
pub fn revision_from<'a>(
    meta: &ObjectMeta,
    label: impl Fn(&str) -> Option<&'a str>,
    replicas: Option<i32>,
    status: Option<&DeploymentStatus>,
) -> Option<RevisionObs> {
    let component = label(LABEL_COMPONENT)?.to_string();
    let hash = label(LABEL_REVISION)?.to_string();
    let status = status.cloned().unwrap_or_default();
    let ready = status
        .ready_replicas
        .unwrap_or(0)
        .min(status.updated_replicas.unwrap_or(0));
    Some(RevisionObs {
        name: meta.name.clone().unwrap_or_default(),
        component,
        hash,
        replicas: replicas.unwrap_or(1),
        ready,
        current: status.replicas.unwrap_or(0),
        created: meta
            .creation_timestamp
            .as_ref()
            .map(crate::api::time::from_k8s),
    })
}

/// A new-revision pod in a state that fails the rollout at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFailure {
    /// Component of the pod.
    pub component: String,
    /// Revision hash of the pod.
    pub hash: String,
    /// Pod name.
    pub pod: String,
    /// `CrashLoopBackOff`, `ImagePullBackOff`, `TooManyRestarts`, ...
    pub reason: String,
    /// Details for humans.
    pub message: String,
}

/// The API server refused (or could not take) a write of the plan's
/// Deployments, Services or routes. The controller remembers the last one per
/// plan, so status keeps saying so until a write succeeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Kind of the object that could not be written: `Deployment`, `Service`, `HTTPRoute`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// HTTP status code of the answer; 0 when there was no answer;
    /// [`Refusal::BY_POLICY`] when the operator's GatePolicy refused the
    /// object and no request was sent.
    pub code: u16,
    /// The API server's message (or the transport error).
    pub message: String,
}

/// What a refused write was of, as status and Events name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedKind {
    /// A revision Deployment.
    Deployment,
    /// A Service or a route.
    Traffic,
    /// A ComponentScale or an owned HPA.
    Autoscaler,
    /// A copy of a ConfigMap or Secret (config released with the code).
    Config,
}

impl Refusal {
    /// The `code` of an object the administrator's GatePolicy refuses (a
    /// route to a Gateway the policy does not allow): never sent, permanent
    /// until the spec or the policy changes (a policy change wakes the plan).
    pub const BY_POLICY: u16 = 1;

    /// What the refused object is: the one place its kind is read.
    pub fn refused_kind(&self) -> RefusedKind {
        match self.kind {
            // The workloads: a revision's Deployment, a component's
            // StatefulSet, or the pod it cannot move past.
            "Deployment" | "StatefulSet" | "DaemonSet" | "Pod" => RefusedKind::Deployment,
            "ComponentScale" | "HorizontalPodAutoscaler" => RefusedKind::Autoscaler,
            "ConfigMap" | "Secret" => RefusedKind::Config,
            _ => RefusedKind::Traffic,
        }
    }

    /// Whether the object is a Service or route.
    pub fn is_traffic(&self) -> bool {
        self.refused_kind() == RefusedKind::Traffic
    }

    /// Whether the object is a ComponentScale or an owned HPA.
    pub fn is_autoscaling(&self) -> bool {
        self.refused_kind() == RefusedKind::Autoscaler
    }

    /// A refusal that no retry can fix: the object itself is invalid
    /// (400 Bad Request, 422 Unprocessable Entity). Quota, RBAC, webhooks and
    /// outages may clear by themselves, so they are retried.
    pub fn is_permanent(&self) -> bool {
        matches!(self.code, 400 | 422 | Refusal::BY_POLICY)
    }

    /// Not a refusal at all: the write got no answer (connection reset,
    /// timeout: it may even have landed) or the API server could not take it
    /// (5xx). Nothing is wrong with the object; on-call must not read it as
    /// "your template is invalid".
    pub fn is_unavailable(&self) -> bool {
        self.code == 0 || self.code >= 500
    }
}

/// Everything one reconcile observed.
#[derive(Debug, Clone)]
pub struct Observation {
    /// Name of the plan.
    pub plan: String,
    /// The time of the observation.
    pub now: DateTime<Utc>,
    /// `metadata.generation`.
    pub generation: i64,
    /// The validated spec, or why it cannot be acted on.
    pub target: Result<Target, SpecError>,
    /// The persisted status.
    pub status: ReleasePlanStatus,
    /// Every revision Deployment the plan owns, and the revisions of its
    /// StatefulSet components as their pods count them
    /// ([`super::stateful::revisions`]).
    pub revisions: Vec<RevisionObs>,
    /// The StatefulSets of StatefulSet components, and their pods.
    pub workloads: super::stateful::WorkloadObs,
    /// Failure signals of pods of revisions being rolled out.
    pub pod_failures: Vec<PodFailure>,
    /// Gate results as read: the runner's latest verdicts while it evaluates
    /// the plan's gates, else the persisted `status.gates`. Which of them
    /// count is the core's call ([`step_gates`]).
    pub gates: Vec<GateStatus>,
    /// The plan's Jobs (of Job gates).
    pub jobs: Vec<JobObs>,
    /// The Services and routes of components with traffic settings.
    pub traffic: Vec<traffic::TrafficObs>,
    /// The ComponentScales and owned HPAs of autoscaled components (their
    /// replicas are already in the target: [`Target::with_scales`]).
    pub scales: Vec<ScaleObs>,
    /// The referenced ConfigMaps and Secrets and the plan's copies (already
    /// in the target: [`Target::with_config`]).
    pub config: config::ConfigObservation,
    /// The Deployments components adopt (`adopt`), one per adopting component.
    pub adopted: Vec<super::adopt::AdoptedObs>,
    /// A request not yet acknowledged.
    pub request: Option<Request>,
    /// A request annotation not yet acknowledged that is not a valid request.
    pub invalid_request: Option<InvalidRequest>,
    /// The last Deployment write of this plan that failed, until one succeeds.
    pub refusal: Option<Refusal>,
    /// The plan's template copies (the content its template gates read).
    pub template_copies: Vec<crate::gates::template::CopyObs>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

/// Most replicas of a component, as the CRD bounds `replicas`: a scale
/// written past it (the `/scale` subresource is not validated) counts as this.
pub const MAX_REPLICAS: i32 = 10_000;

/// A count of seconds from the spec as a duration (the CRD keeps it at or
/// above 0; anything below reads as 0).
fn seconds(n: i64) -> Duration {
    Duration::from_secs(u64::try_from(n).unwrap_or(0))
}
