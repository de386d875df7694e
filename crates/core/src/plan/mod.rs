//! The pure core: from one observation of the cluster to one decision.
//!
//! `decide` takes everything the controller read (the plan's spec and
//! persisted status, the revision Deployments, pod failure signals, gate
//! verdicts, the time, a pending request) and returns the next phase, the
//! next status, and intents (Deployments to scale or create, Deployments to
//! delete, events, when to look again). It does no I/O and reads no clock, so
//! the same observation always gives the same decision.
//!
//! The phase transition itself is a statig state machine (see `machine`);
//! what follows from a transition (status fields, history, events) is
//! derived afterwards from the machine's cause, never from entry actions,
//! which would re-run on every reconcile.

pub mod adopt;
pub mod autoscale;
pub mod capacity;
pub mod conditions;
pub mod config;
pub mod daemon;
pub mod desired;
pub mod machine;
pub mod observation;
pub mod order;
pub mod policy;
pub mod reasons;
pub mod replicas;
pub mod request;
pub mod simulate;
pub mod spec;
pub mod spec_error;
pub mod stateful;
pub mod steps;
pub mod traffic;
pub mod windows;

pub use autoscale::ScaleObs;
pub use observation::{
    Observation, PodFailure, Refusal, RefusedKind, RevisionObs, Target, TargetComponent,
    revision_from, revision_of,
};
pub use reasons::EventReason;
pub use request::{Action, InvalidRequest, NotApplicable, Request};
pub use spec_error::SpecError;

use crate::gates::job::{self as jobs, JobIntents};
use crate::gates::template::{ProblemKind, TemplateProblem};
use steps::Step;

use crate::api::{
    ComponentStatus, GateStatus, HistoryEntry, Outcome, Phase, ReleasePlanStatus, Verdict,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use std::collections::BTreeMap;
use std::time::Duration;

/// Most history entries kept in status.
pub const MAX_HISTORY: usize = 20;

/// The template each component's revision runs, by component: shared, not
/// copied, by the decision's intents (a production-sized template is tens
/// of KB once decoded, and 32 reconciles run at once).
pub type Templates = BTreeMap<String, std::sync::Arc<PodTemplateSpec>>;

/// Where a Deployment's template comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum TemplateSource {
    /// The spec's template of this component (the revision is in the spec).
    Spec(std::sync::Arc<PodTemplateSpec>),
    /// Keep the template the revision already has (an older revision): its
    /// Deployment's, or, when that is gone, the one stored for it in a
    /// ControllerRevision (the controller resolves which).
    Existing,
    /// Another revision's template, as [`TemplateSource::Existing`] resolves
    /// it for that revision: a baseline runs its stable revision's.
    Of(String),
}

/// Scale (and create when missing) one revision Deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentIntent {
    /// Deployment name.
    pub name: String,
    /// Component.
    pub component: String,
    /// Revision hash.
    pub hash: String,
    /// Replicas it must have.
    pub replicas: i32,
    /// Template to apply.
    pub template: TemplateSource,
}

/// Severity of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something went wrong.
    Warning,
}

/// A Kubernetes Event to record on the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventIntent {
    /// Severity.
    pub type_: EventType,
    /// Why, e.g. `RollbackStarted`.
    pub reason: EventReason,
    /// What happened.
    pub message: String,
}

/// Everything a reconcile must do, decided purely.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    /// The next status (conditions included).
    pub status: ReleasePlanStatus,
    /// Deployments to scale or create.
    pub deployments: Vec<DeploymentIntent>,
    /// Deployments to delete (pruned history, removed components).
    pub delete: Vec<String>,
    /// The StatefulSets of StatefulSet components.
    pub stateful_sets: Vec<stateful::StatefulSetIntent>,
    /// StatefulSets to delete (removed components).
    pub delete_stateful_sets: Vec<String>,
    /// Pods a StatefulSet cannot move past ([`stateful::stuck_pods`]).
    pub delete_pods: Vec<String>,
    /// The DaemonSets of DaemonSet components, one per revision that runs.
    pub daemon_sets: Vec<daemon::DaemonSetIntent>,
    /// DaemonSets of revisions that run nowhere any more.
    pub delete_daemon_sets: Vec<String>,
    /// Jobs of Job gates to create and delete.
    pub jobs: JobIntents,
    /// Services and routes of components with traffic settings.
    pub traffic: Vec<traffic::TrafficIntent>,
    /// ComponentScales and owned HPAs of autoscaled components (empty when the
    /// spec cannot be acted on: nothing is deleted then).
    pub scales: Vec<autoscale::ScaleIntent>,
    /// Copies of ConfigMaps and Secrets to create (before the Deployments
    /// that read them) and to delete.
    pub config: config::ConfigIntents,
    /// Adopted Deployments to mark and scale (`adopt`).
    pub adopt: Vec<adopt::AdoptIntent>,
    /// Copies of template gates' content to create (before status records
    /// their hash) and to delete.
    pub template_copies: crate::gates::template::CopyIntents,
    /// Events to record.
    pub events: Vec<EventIntent>,
    /// Look again after this long even if nothing changes.
    pub requeue_after: Option<Duration>,
    /// Why it looks again then (with `requeue_after`).
    pub requeue_cause: Option<machine::Requeue>,
    /// Deletion may proceed: remove the finalizer.
    pub finalize: bool,
    /// What happened in this decision, for metrics (never re-derived from
    /// event reasons).
    pub transition: machine::Cause,
    /// Notifications of the transition, sent once its status is written.
    pub notices: Vec<crate::notify::Notice>,
}

impl Decision {
    /// Whether this decision, made on the status an `earlier` decision wrote
    /// (`status`, read back) and on the same world, has nothing of its own
    /// to do: no status to write, no transition, nothing to announce, and
    /// the writes `earlier` made already. The watch event of that status
    /// write then needs no reconcile: this is what it would decide.
    pub fn repeats(&self, earlier: &Decision, status: &ReleasePlanStatus) -> bool {
        self.status == *status
            && self.transition == machine::Cause::None
            && self.events.is_empty()
            && self.notices.is_empty()
            && !self.finalize
            && self.deployments == earlier.deployments
            && self.delete == earlier.delete
            && self.stateful_sets == earlier.stateful_sets
            && self.delete_stateful_sets == earlier.delete_stateful_sets
            && self.delete_pods.is_empty()
            && self.daemon_sets == earlier.daemon_sets
            && self.delete_daemon_sets == earlier.delete_daemon_sets
            && self.jobs == earlier.jobs
            && self.traffic == earlier.traffic
            && self.scales == earlier.scales
            && self.config.within(&earlier.config)
            && self.adopt == earlier.adopt
            && self.template_copies == earlier.template_copies
    }
}

/// Observed counts of one component, by revision hash.
pub(crate) type ByHash<'a> = BTreeMap<&'a str, &'a RevisionObs>;

/// Revisions of a component, by hash.
pub(crate) fn revisions_of<'a>(obs: &'a Observation, component: &str) -> ByHash<'a> {
    obs.revisions
        .iter()
        .filter(|r| r.component == component)
        .map(|r| (r.hash.as_str(), r))
        .collect()
}

/// Decides what to do about one observation. Pure: no I/O, no clock.
// One pass from observation to decision, each concern a call: splitting it
// would only pass the same dozen values around.
#[allow(clippy::too_many_lines)]
pub fn decide(obs: &Observation, templates: &Templates) -> Decision {
    let target = match &obs.target {
        Ok(t) => t,
        Err(e) => return invalid_spec(obs, e),
    };
    if !target.config_missing.is_empty() {
        return held_for_config(obs, target);
    }
    let facts = machine::Facts::gather(obs, target);
    let (phase, cause) = machine::run(obs.status.phase, &facts);
    let mut status = apply_cause(obs, target, &facts, phase, &cause);
    // A generation the policy holds was judged: observed, so that kstatus,
    // Argo CD and `wait` report its Stalled condition, not "not reconciled
    // yet". Only where no consumer reads the observed generation as done:
    // a Stable or RolledBack plan keeps its own (its conditions still carry
    // the generation they were judged on, see `conditions::compute`), and
    // there a new generation is what starts the next release.
    if matches!(phase, Phase::Pending | Phase::RollingOut) && facts.policy_hold(phase).is_some() {
        status.observed_generation = Some(obs.generation);
    }
    let desired::Workloads {
        deployments,
        delete,
        stateful_sets,
        delete_stateful_sets,
        delete_pods,
        daemon_sets,
        delete_daemon_sets,
    } = desired::intents(obs, target, &status, templates);
    status.components = desired::component_status(obs, target, &status, &deployments);
    let carried: Vec<&crate::api::config::CarriedConfig> =
        target.components.iter().flat_map(|c| &c.config).collect();
    let config = config::intents(&obs.config, &carried, status.phase, obs.deleting);
    let adopt = adopt::intents(obs, target, &status);
    adopt::record(obs, &mut status, &adopt);
    let template_copies = template_copy_intents(obs, target, &status);
    let traffic = traffic::intents(obs, target, &status);
    let scales = autoscale::intents(obs, target, &status);
    status.traffic_weight = traffic::weight(&traffic, &status);
    if let Some(at) = traffic::changed_at(obs, target, &status, &traffic) {
        status.traffic_changed_at = Some(at);
    }
    let jobs = jobs::intents(
        &obs.plan,
        &target.jobs,
        &obs.status,
        &status,
        &obs.jobs,
        facts.step_ready,
        obs.deleting,
    );
    let mut events = machine::events(obs, target, &facts, phase, &cause);
    events.extend(gate_events(&obs.status.gates, &status.gates));
    if obs.status.phase == Phase::RollingOut {
        // A Job gate's verdict usually ends its step at once (its Job starts
        // when the step's pods are ready), which clears status.gates: its
        // verdict is still news.
        let ended: Vec<GateStatus> = job_gates(obs, target)
            .filter(|g| !status.gates.iter().any(|s| s.name == g.name))
            .collect();
        events.extend(gate_events(&obs.status.gates, &ended));
    }
    events.extend(template_events(target, &obs.status, &status));
    if let Some(req) = &obs.request
        && facts.request_ignored
    {
        events.push(EventIntent {
            type_: EventType::Warning,
            reason: EventReason::RequestIgnored,
            message: format!(
                "request {:?} does not apply in phase {}",
                req.action, obs.status.phase
            ),
        });
    }
    events.extend(invalid_request(obs, &mut status));
    events.extend(refusal_event(obs));
    events.extend(adopt::events(obs, &status));
    status.message = Some(conditions::message(
        target,
        &status,
        &facts,
        obs.refusal.as_ref(),
    ));
    if let Some((_, text)) = windows::waiting(obs, &facts, &status) {
        let msg = status.message.take().unwrap_or_default();
        status.message = Some(format!("{msg}; {text}"));
    }
    if let Some(text) = facts.policy_hold(status.phase) {
        let msg = status.message.take().unwrap_or_default();
        status.message = Some(if status.phase == Phase::RollingOut {
            format!(
                "{text}; the rollout holds until the policy allows it (never rolled back for it); {msg}"
            )
        } else {
            format!("{text}; the release does not start until the policy allows it")
        });
    }
    status.conditions = conditions::compute(obs, &status, &facts);
    events.extend(policy_event(obs, &facts, &status));
    events.extend(windows::held_event(&obs.status, &status));
    let adopted = adopt::condition(obs, &status).map(|(ok, reason, message)| {
        conditions::one(
            obs,
            status.observed_generation,
            adopt::ADOPTED,
            ok,
            reason,
            message,
        )
    });
    status.conditions.extend(adopted);
    events.extend(config_access(obs, target, &mut status));
    let finalize = obs.deleting
        && (match phase {
            Phase::Pending | Phase::Stable | Phase::RolledBack => true,
            Phase::RollingOut | Phase::RollbackInProgress => false,
        } || nothing_to_protect(obs, &status));
    let requeue = if finalize {
        None
    } else {
        machine::requeue_after(obs, target, &facts, &status)
    };
    let (requeue_after, requeue_cause) = (requeue.map(|r| r.0), requeue.map(|r| r.1));
    let notices = crate::notify::notices(obs.now, &obs.status, target, &cause, &status, &events);
    Decision {
        status,
        deployments,
        delete,
        stateful_sets,
        delete_stateful_sets,
        delete_pods,
        daemon_sets,
        delete_daemon_sets,
        jobs,
        traffic,
        scales,
        config,
        adopt,
        template_copies,
        events,
        requeue_after,
        requeue_cause,
        finalize,
        transition: cause,
        notices,
    }
}

/// The template copies to create and delete for the next status
/// ([`crate::gates::template::copy_intents`]).
fn template_copy_intents(
    obs: &Observation,
    target: &Target,
    status: &ReleasePlanStatus,
) -> crate::gates::template::CopyIntents {
    crate::gates::template::copy_intents(
        &obs.plan,
        &target.template_contents,
        &status.resolved_gates,
        status.phase == Phase::RollingOut,
        &obs.template_copies,
        obs.deleting,
    )
}

/// A referenced ConfigMap or Secret does not exist: nothing is created or
/// scaled (a revision whose pods cannot start is never rolled out), status
/// names what is missing, and the watch of ConfigMaps and Secrets brings the
/// plan back when it appears.
fn held_for_config(obs: &Observation, target: &Target) -> Decision {
    let missing: Vec<String> = target
        .config_missing
        .iter()
        .map(|(component, (kind, name))| {
            format!("{kind} {name:?} (referenced by component {component:?})")
        })
        .collect();
    let msg = format!(
        "waiting for {} to exist: the plan holds until then",
        missing.join(", ")
    );
    let mut status = obs.status.clone();
    status.observed_generation = Some(obs.generation);
    status.message = Some(msg.clone());
    status.conditions = conditions::config_missing(obs, &msg);
    let mut events = Vec::new();
    if obs.status.message.as_deref() != Some(msg.as_str()) {
        events.push(EventIntent {
            type_: EventType::Warning,
            reason: EventReason::ConfigMissing,
            message: msg,
        });
    }
    events.extend(invalid_request(obs, &mut status));
    Decision {
        status,
        events,
        // Nothing the plan runs depends on an object that never existed.
        finalize: obs.deleting,
        ..Decision::default()
    }
}

/// While the plan is deleted the operator never creates Deployments (the
/// namespace may be terminating, and a create there is refused forever). So
/// when a component's stable Deployment is already gone there is nothing to
/// roll back to, and holding the finalizer would only hang the deletion.
fn nothing_to_protect(obs: &Observation, status: &ReleasePlanStatus) -> bool {
    obs.revisions.is_empty()
        || status.components.iter().any(|c| {
            c.stable_hash
                .as_deref()
                .is_some_and(|h| !revisions_of(obs, &c.name).contains_key(h))
        })
}

/// One event per gate whose verdict changed between the persisted status and
/// the next one; `Pending` is not news. A gate that goes past its
/// `inconclusiveLimit` gets one `RolloutAwaitingDecision` Warning (a dry-run
/// gate a `GateInconclusive` one: it pauses nothing). A dry-run gate's
/// messages say so.
pub fn gate_events(before: &[GateStatus], after: &[GateStatus]) -> Vec<EventIntent> {
    after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.name == a.name);
            let changed = b.is_none_or(|b| b.verdict != a.verdict);
            let now_awaiting = a.awaiting_decision && !b.is_some_and(|b| b.awaiting_decision);
            let trial = if a.dry_run { " (dry run)" } else { "" };
            let what = a.message.as_deref().unwrap_or(a.verdict.as_str());
            if now_awaiting {
                return Some(if a.dry_run {
                    EventIntent {
                        type_: EventType::Warning,
                        reason: EventReason::GateInconclusive,
                        message: format!(
                            "gate {}{trial}: {what}; a dry run pauses nothing",
                            a.name
                        ),
                    }
                } else {
                    EventIntent {
                        type_: EventType::Warning,
                        reason: EventReason::RolloutAwaitingDecision,
                        message: format!(
                            "gate {} is inconclusive: {what}; the rollout is paused: promote to continue, retry to evaluate the step's gates again, or abort to roll back",
                            a.name
                        ),
                    }
                });
            }
            if a.verdict == Verdict::Pending || !changed {
                return None;
            }
            let (type_, reason) = match a.verdict {
                Verdict::Passed => (EventType::Normal, EventReason::GatePassed),
                Verdict::Failed => (EventType::Warning, EventReason::GateFailed),
                Verdict::Inconclusive | Verdict::Pending => {
                    (EventType::Warning, EventReason::GateInconclusive)
                }
            };
            Some(EventIntent {
                type_,
                reason,
                message: format!("gate {}{trial}: {what}", a.name),
            })
        })
        .collect()
}

/// Template gates that hold a rollout (only while rolling out and not
/// halted: a settled plan needs no gate).
pub fn template_problems<'a>(
    target: &'a Target,
    status: &ReleasePlanStatus,
) -> &'a [TemplateProblem] {
    if status.phase == Phase::RollingOut && status.failure.is_none() {
        &target.template_problems
    } else {
        &[]
    }
}

/// A Warning for each template gate whose problem is new: its entry in the
/// persisted `status.gates` does not say it yet. Only once the step's entry
/// is written (see [`record_template_gates`]): a decision that starts the
/// rollout or another step writes none, and the next one would warn again.
fn template_events(
    target: &Target,
    before: &ReleasePlanStatus,
    after: &ReleasePlanStatus,
) -> Vec<EventIntent> {
    if !same_step(before, after) {
        return Vec::new();
    }
    template_problems(target, after)
        .iter()
        .filter(|p| {
            !before
                .gates
                .iter()
                .any(|g| g.name == p.gate && g.message.as_deref() == Some(p.message.as_str()))
        })
        .map(|p| EventIntent {
            type_: EventType::Warning,
            reason: match p.kind {
                ProblemKind::NotFound => EventReason::GateTemplateNotFound,
                ProblemKind::Invalid => EventReason::GateTemplateInvalid,
            },
            message: p.message.clone(),
        })
        .collect()
}

/// A malformed request is acknowledged (so it is reported once) with a Warning.
fn invalid_request(obs: &Observation, status: &mut ReleasePlanStatus) -> Option<EventIntent> {
    let bad = obs.invalid_request.as_ref()?;
    status.acknowledged_request = Some(bad.raw.clone());
    Some(EventIntent {
        type_: EventType::Warning,
        reason: EventReason::InvalidRequest,
        message: bad.message.clone(),
    })
}

/// A Warning when the policy's refusal starts holding the plan, or says
/// something new: once, not at every reconcile (the persisted `Stalled`
/// condition already says it).
fn policy_event(
    obs: &Observation,
    facts: &machine::Facts,
    status: &ReleasePlanStatus,
) -> Option<EventIntent> {
    let text = facts.policy_hold(status.phase)?;
    let said = obs.status.conditions.iter().any(|c| {
        c.type_ == conditions::STALLED
            && c.reason == reasons::ConditionReason::GatePolicyRefused.as_str()
            && c.message == text
    });
    (!said).then(|| EventIntent {
        type_: EventType::Warning,
        reason: EventReason::GatePolicyRefused,
        message: if status.phase == Phase::RollingOut {
            format!("{text}; the rollout holds (it is not rolled back for this)")
        } else {
            format!("{text}; the release does not start until the policy allows it")
        },
    })
}

/// The `ConfigVersioned` condition, False while config the plan references
/// is read live for want of access to its namespace, and a Warning when it
/// says something new. Absent otherwise: nothing to say.
fn config_access(
    obs: &Observation,
    target: &Target,
    status: &mut ReleasePlanStatus,
) -> Option<EventIntent> {
    if target.config_unversioned.is_empty() {
        return None;
    }
    let text = config::unversioned_text(&target.config_unversioned);
    let said = obs
        .status
        .conditions
        .iter()
        .any(|c| c.type_ == config::CONFIG_VERSIONED && c.message == text);
    status.conditions.push(conditions::one(
        obs,
        status.observed_generation,
        config::CONFIG_VERSIONED,
        false,
        reasons::ConditionReason::ConfigAccessDenied,
        text.clone(),
    ));
    (!said).then_some(EventIntent {
        type_: EventType::Warning,
        reason: EventReason::ConfigNotVersioned,
        message: text,
    })
}

/// A Warning for every reconcile whose Deployment write failed; the
/// controller's backoff spaces them out.
fn refusal_event(obs: &Observation) -> Option<EventIntent> {
    let r = obs.refusal.as_ref()?;
    Some(EventIntent {
        type_: EventType::Warning,
        reason: if r.is_unavailable() {
            EventReason::ApiUnavailable
        } else {
            match r.refused_kind() {
                RefusedKind::Traffic => EventReason::TrafficRefused,
                RefusedKind::Autoscaler => EventReason::AutoscalerRefused,
                RefusedKind::Config => EventReason::ConfigRefused,
                RefusedKind::Deployment => EventReason::DeploymentRefused,
            }
        },
        message: conditions::refusal_text(r),
    })
}

/// A spec that cannot be acted on: keep every Deployment as it is and say why.
/// The generation is marked observed: it was judged, and tools that wait on
/// `observedGeneration` must see the verdict, not "in progress" forever.
fn invalid_spec(obs: &Observation, e: &SpecError) -> Decision {
    let mut status = obs.status.clone();
    status.observed_generation = Some(obs.generation);
    status.message = Some(format!("spec cannot be acted on: {e}"));
    status.conditions = conditions::invalid_spec(obs, e);
    let mut events = vec![EventIntent {
        type_: EventType::Warning,
        reason: EventReason::InvalidSpec,
        message: e.to_string(),
    }];
    events.extend(invalid_request(obs, &mut status));
    Decision {
        status,
        deployments: Vec::new(),
        delete: Vec::new(),
        stateful_sets: Vec::new(),
        delete_stateful_sets: Vec::new(),
        delete_pods: Vec::new(),
        daemon_sets: Vec::new(),
        delete_daemon_sets: Vec::new(),
        jobs: JobIntents::default(),
        // Services and routes stay as they are.
        traffic: Vec::new(),
        scales: Vec::new(),
        config: config::ConfigIntents::default(),
        adopt: Vec::new(),
        template_copies: crate::gates::template::CopyIntents::default(),
        events,
        requeue_after: None,
        requeue_cause: None,
        // A plan whose spec is broken holds no rollout worth protecting.
        finalize: obs.deleting,
        transition: machine::Cause::None,
        notices: Vec::new(),
    }
}

/// The gate verdicts that belong to the current step: only while rolling out,
/// and only of gates the spec still has (a gate removed mid-step neither
/// blocks nor fails the rollout).
pub(crate) fn step_gates(obs: &Observation, target: &Target) -> Vec<GateStatus> {
    if obs.status.phase != Phase::RollingOut {
        return Vec::new();
    }
    obs.gates
        .iter()
        .filter(|g| target.gates.iter().any(|t| t.name() == g.name))
        .cloned()
        .map(|mut g| {
            g.dry_run = target.dry_run(&g.name);
            g
        })
        .chain(job_gates(obs, target))
        .collect()
}

/// The verdicts of the Job gates in the current step, from the observed Jobs.
pub(crate) fn job_gates<'a>(
    obs: &'a Observation,
    target: &'a Target,
) -> impl Iterator<Item = GateStatus> + 'a {
    target.jobs.iter().map(|g| GateStatus {
        dry_run: target.dry_run(&g.name),
        ..jobs::verdict(&obs.plan, g, &obs.status, &obs.jobs, obs.now)
    })
}

/// Folds the machine's cause into the next status.
// One arm per cause: how each transition changes the status, side by side.
#[allow(clippy::too_many_lines)]
fn apply_cause(
    obs: &Observation,
    target: &Target,
    facts: &machine::Facts,
    phase: Phase,
    cause: &machine::Cause,
) -> ReleasePlanStatus {
    use machine::Cause;
    let mut s = obs.status.clone();
    s.phase = phase;
    s.gates = step_gates(obs, target);
    if let Some(req) = &obs.request {
        s.acknowledged_request = Some(req.to_annotation().to_string());
        match req.action {
            Action::Pause => s.pause_requested = true,
            Action::Resume => s.pause_requested = false,
            _ => {}
        }
    }
    let now = obs.now;
    match cause {
        Cause::None => {}
        Cause::AcceptGeneration => {
            s.observed_generation = Some(obs.generation);
            s.current_step = s.current_step.min(order::total(target, &s.components));
        }
        Cause::Start { superseded } => {
            if *superseded && let Some(rev) = &obs.status.current_revision {
                push_history(
                    &mut s,
                    obs,
                    rev,
                    Outcome::Superseded,
                    "a newer spec generation replaced it",
                );
            }
            s.observed_generation = Some(obs.generation);
            s.current_revision = Some(target.revision.clone());
            s.rollout_count += 1;
            s.rollout_started_at = Some(now);
            s.step_started_at = Some(now);
            s.current_step = 0;
            s.failure = None;
            s.gates = Vec::new();
            s.components = start_components(target, &obs.status);
            if facts.first_release {
                // Nothing stable to protect: go to full scale at once.
                s.current_step = order::total(target, &s.components);
            }
        }
        Cause::Advance { to_step } => {
            s.current_step = *to_step;
            s.step_started_at = Some(now);
            s.gates = Vec::new();
        }
        Cause::Retry => {
            s.failure = None;
            s.step_started_at = Some(now);
            s.gates = Vec::new();
        }
        Cause::Promoted => {
            s.stable_revision = Some(target.revision.clone());
            s.current_step = order::total(target, &s.components);
            s.components.retain(|c| target.component(&c.name).is_some());
            for c in &mut s.components {
                c.stable_hash = c.current_hash.clone();
            }
            s.failure = None;
            let rev = target.revision.clone();
            push_history(&mut s, obs, &rev, Outcome::Promoted, "all steps passed");
        }
        Cause::Halted(f) => {
            s.failure = Some(f.clone());
        }
        Cause::RollbackStarted(f) => {
            let mut f = f.clone();
            if f.revision.is_empty() {
                f.revision = obs
                    .status
                    .current_revision
                    .clone()
                    .unwrap_or_else(|| target.revision.clone());
            }
            s.failure = Some(f);
            s.step_started_at = Some(now);
            s.gates = Vec::new();
        }
        Cause::RollbackDone { to_desired } => {
            let rev = obs
                .status
                .current_revision
                .clone()
                .unwrap_or_else(|| target.revision.clone());
            let reason = s.failure.as_ref().map_or_else(
                || "rolled back".into(),
                |f| format!("{}: {}", f.gate, f.message),
            );
            push_history(&mut s, obs, &rev, Outcome::RolledBack, &reason);
            if *to_desired {
                // The spec was reverted to the stable revision meanwhile.
                s.current_revision = s.stable_revision.clone();
                s.observed_generation = Some(obs.generation);
                for c in &mut s.components {
                    c.current_hash = c.stable_hash.clone();
                }
            }
        }
    }
    s.weight = weight_at(target, &s);
    record_template_gates(obs, target, &mut s);
    s
}

/// Records the template gates read for the current step, so the rest of the
/// step runs them as read; a gate that could not be resolved gets a `Pending`
/// entry in `status.gates` that says why. The record is kept only for the
/// rollout and step it was read in: when this decision moves to another, the
/// next reconcile reads the templates anew.
fn record_template_gates(obs: &Observation, target: &Target, s: &mut ReleasePlanStatus) {
    let same_step = same_step(&obs.status, s);
    s.resolved_gates = if same_step {
        target.template_gates.clone()
    } else {
        Vec::new()
    };
    if !same_step {
        return;
    }
    for p in template_problems(target, s) {
        s.gates.retain(|g| g.name != p.gate);
        s.gates.push(GateStatus {
            name: p.gate.clone(),
            verdict: Verdict::Pending,
            message: Some(p.message.clone()),
            ..GateStatus::default()
        });
    }
}

/// The next status rolls out the same rollout and step as the persisted one:
/// what was read for that step still holds.
fn same_step(before: &ReleasePlanStatus, after: &ReleasePlanStatus) -> bool {
    after.phase == Phase::RollingOut
        && after.rollout_count == before.rollout_count
        && after.current_step == before.current_step
}

/// Component records for a new rollout: the spec's hashes as current, stable
/// hashes kept; components the spec dropped keep serving their stable revision.
fn start_components(target: &Target, prev: &ReleasePlanStatus) -> Vec<ComponentStatus> {
    let stable_of = |name: &str| {
        prev.components
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.stable_hash.clone())
    };
    let mut out: Vec<ComponentStatus> = target
        .components
        .iter()
        .map(|t| ComponentStatus {
            name: t.name.clone(),
            current_hash: Some(t.hash.clone()),
            stable_hash: stable_of(&t.name),
            replicas: t.replicas,
            ..ComponentStatus::default()
        })
        .collect();
    for c in &prev.components {
        if target.component(&c.name).is_none() && c.stable_hash.is_some() {
            out.push(ComponentStatus {
                current_hash: None,
                ..c.clone()
            });
        }
    }
    out
}

/// The weight in effect at the status's step: the last setWeight at or before it;
/// 100 past the last step, and on the stable revision when settled.
pub fn weight_at(target: &Target, s: &ReleasePlanStatus) -> i32 {
    match s.phase {
        Phase::Stable => 100,
        Phase::Pending | Phase::RollbackInProgress | Phase::RolledBack => 0,
        Phase::RollingOut => {
            if let Some(w) = order::plan_weight(target, s) {
                return w;
            }
            let step = usize::try_from(s.current_step).unwrap_or(0);
            if step >= target.steps.len() {
                return 100;
            }
            target.steps[..=step]
                .iter()
                .rev()
                .find_map(Step::weight)
                .unwrap_or(0)
        }
    }
}

fn push_history(
    s: &mut ReleasePlanStatus,
    obs: &Observation,
    rev: &str,
    outcome: Outcome,
    reason: &str,
) {
    let components = obs
        .status
        .components
        .iter()
        .filter_map(|c| c.current_hash.as_ref().map(|h| format!("{}={h}", c.name)))
        .collect();
    let config = crate::api::config::summary(&obs.status.components);
    s.history.push(HistoryEntry {
        number: obs.status.rollout_count,
        revision: rev.to_string(),
        outcome,
        started_at: obs.status.rollout_started_at,
        finished_at: Some(obs.now),
        reason: Some(reason.to_string()),
        components,
        config,
    });
    if s.history.len() > MAX_HISTORY {
        let extra = s.history.len() - MAX_HISTORY;
        s.history.drain(..extra);
    }
}

#[cfg(test)]
mod template_tests;
#[cfg(test)]
mod tests;

#[cfg(test)]
#[path = "stateful_tests.rs"]
mod stateful_tests;

#[cfg(test)]
#[path = "capacity_tests.rs"]
mod capacity_tests;
#[cfg(test)]
#[path = "daemon_tests.rs"]
mod daemon_tests;
