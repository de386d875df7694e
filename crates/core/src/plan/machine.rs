//! The phase state machine (statig, blocking mode, used as a pure decision step).
//!
//! The machine is rebuilt on every reconcile in the persisted phase, handed one
//! event (the `Facts` of the observation) and read back: its new state is the
//! next phase, and the `Cause` it recorded says why. `RollingOut` and
//! `RollbackInProgress` share the `Active` superstate, which turns deletion and
//! abort into a rollback.

use super::reasons::{EventReason, FailureReason};
use super::steps::CurrentStep;
use super::windows::Hold;
use super::{Action, EventIntent, EventType, Observation, Target, desired};
use crate::api::{Failure, Phase, ReleasePlanStatus, Verdict};
use statig::Outcome::{self, Handled, Super, Transition};
use statig::blocking::{IntoStateMachine, IntoStateMachineExt, State, Superstate};
use std::time::Duration;

/// Why the machine did what it did; status, history and events follow from it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Cause {
    /// Nothing changed.
    #[default]
    None,
    /// A new generation with the same revision: take its settings.
    AcceptGeneration,
    /// A rollout of the desired revision starts.
    Start {
        /// It replaces an unfinished rollout.
        superseded: bool,
    },
    /// The rollout moves to another step.
    Advance {
        /// The new step index.
        to_step: i32,
    },
    /// A halted rollout is retried from its current step.
    Retry,
    /// The rollout finished: the desired revision is now stable.
    Promoted,
    /// A gate failed and rollback is not automatic: hold.
    Halted(Failure),
    /// Every component starts returning to the stable revision.
    RollbackStarted(Failure),
    /// The rollback finished.
    RollbackDone {
        /// The spec now asks for the stable revision itself.
        to_desired: bool,
    },
}

/// What the machine decides on: derived from one observation.
// A flat record of yes/no observations is what a state machine reads best.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    /// `metadata.generation` differs from `status.observedGeneration`.
    pub new_generation: bool,
    /// The spec's revision differs from `status.currentRevision`.
    pub revision_changed: bool,
    /// The spec's revision is the stable revision.
    pub desired_is_stable: bool,
    /// No revision of the plan has ever been stable.
    pub first_release: bool,
    /// Held by `spec.paused` or a pause request.
    pub paused: bool,
    /// The current step's replica targets are met and ready.
    pub step_ready: bool,
    /// Every configured gate passed in this step (dry runs left out).
    pub gates_passed: bool,
    /// A gate (not a dry run) over its `inconclusiveLimit` in this step: the
    /// rollout waits for promote, retry or abort. Its name and message.
    pub awaiting: Option<(String, String)>,
    /// The step the rollout is at, with what it waits for.
    pub current: CurrentStep,
    /// A failure seen in this observation.
    pub failure: Option<Failure>,
    /// The rollout is already halted on a failure (non-automatic rollback).
    pub halted: bool,
    /// Every component is back on its stable revision, ready, and nothing else runs.
    pub rollback_complete: bool,
    /// The plan is being deleted.
    pub deleting: bool,
    /// A request to apply, when it applies in the current phase.
    pub request: Option<Action>,
    /// A request arrived that does not apply in the current phase.
    pub request_ignored: bool,
    /// How long the current step has run.
    pub step_age: Duration,
    /// Automatic rollback is on.
    pub automatic_rollback: bool,
    /// The current step index.
    pub step: i32,
    /// Number of global steps: the spec's, spread over the components' order.
    pub steps: i32,
    /// A release window or freeze holds what would come next (a rollout's
    /// start or its next step); never set for what is never held.
    pub held: Option<Hold>,
    /// The administrator's policy refuses a gate or route of the plan (see
    /// `plan::policy`), or refused a gate of the step when it was called:
    /// what, and what would allow it. A release does not start and a
    /// rollout does not advance; neither is ever rolled back for it.
    pub refused: Option<String>,
}

impl Facts {
    /// Derives the facts from an observation.
    pub fn gather(obs: &Observation, target: &Target) -> Facts {
        let s = &obs.status;
        // Global steps: the spec's, spread over the components' order (`dependsOn`).
        let steps = super::order::total(target, &s.components);
        let step = s.current_step.clamp(0, steps);
        let step_age = s.step_started_at.map_or(Duration::ZERO, |t| {
            (obs.now - t).to_std().unwrap_or(Duration::ZERO)
        });
        let request = obs.request.as_ref().map(|r| r.action);
        let halted = s.is_halted();
        let applies = |a: Action| a.applies_in(s).is_ok();
        let pause_requested = match request {
            Some(Action::Pause) => true,
            Some(Action::Resume) => false,
            _ => s.pause_requested,
        };
        let current = super::order::current_at(target, &s.components, step, step_age);
        // A template gate that cannot be resolved holds the step like a gate
        // that has not passed.
        // Dry-run gates are recorded, never waited for (but see Job gates).
        let gates_passed = target.template_problems.is_empty()
            && target
                .gates
                .iter()
                .filter(|g| !target.dry_run(g.name()))
                .all(|g| {
                    obs.gates
                        .iter()
                        .any(|st| st.name == g.name() && st.verdict == Verdict::Passed)
                })
            // A dry-run Job gate's Job runs once the step's pods are ready:
            // the step waits for it to finish (at most its timeout), passed
            // or failed, or the Job would never run.
            && super::job_gates(obs, target).all(|g| {
                if g.dry_run {
                    g.verdict != Verdict::Pending
                } else {
                    g.verdict == Verdict::Passed
                }
            });
        let mut facts = Facts {
            new_generation: s.observed_generation != Some(obs.generation),
            revision_changed: s.current_revision.as_deref() != Some(target.revision.as_str()),
            desired_is_stable: s.stable_revision.as_deref() == Some(target.revision.as_str()),
            first_release: s.stable_revision.is_none(),
            paused: target.paused || pause_requested,
            step_ready: false,
            gates_passed,
            awaiting: None,
            current,
            failure: None,
            halted,
            rollback_complete: false,
            deleting: obs.deleting,
            request: request.filter(|a| applies(*a)),
            request_ignored: request.is_some_and(|a| !applies(a)),
            step_age,
            automatic_rollback: target.automatic_rollback,
            step,
            steps,
            held: None,
            refused: target
                .policy_blocks
                .first()
                .map(super::policy::PolicyBlock::message),
        };
        match s.phase {
            Phase::RollingOut => {
                facts.step_ready = desired::step_ready(obs, target, s);
                facts.failure = detect_failure(obs, target, &facts);
                facts.awaiting = super::step_gates(obs, target)
                    .into_iter()
                    .find(|g| g.awaiting_decision && !g.dry_run)
                    .map(|g| {
                        let why = g.message.unwrap_or_else(|| "inconclusive".into());
                        (g.name, why)
                    });
                // The operator's own address rules are only known when the
                // call is made: the runner records that refusal in the gate.
                if facts.refused.is_none() {
                    facts.refused = super::step_gates(obs, target)
                        .into_iter()
                        .find(|g| !g.dry_run && crate::gates::is_refused(g))
                        .map(|g| {
                            format!(
                                "gate {}: {}",
                                g.name,
                                g.message.as_deref().unwrap_or_default()
                            )
                        });
                }
            }
            Phase::RollbackInProgress => {
                facts.rollback_complete = desired::rollback_complete(obs, target, s);
            }
            _ => {}
        }
        facts.held = super::windows::hold(&target.windows, &target.freezes, obs.now)
            .filter(|_| facts.waits_on_window(s.phase));
        facts
    }

    /// Whether the next move of a plan in `phase` is one a window or freeze
    /// holds: the start of a new revision (not a first release: nothing runs
    /// to protect), or the next step of a rollout under way. A halted
    /// rollout, a rollback and a superseding revision are never held, nor
    /// any move of a first release.
    fn waits_on_window(&self, phase: Phase) -> bool {
        match phase {
            Phase::RollingOut => !self.halted && !self.revision_changed && !self.first_release,
            Phase::Stable => self.revision_changed && !self.first_release,
            Phase::RolledBack => {
                (self.new_generation || self.request == Some(Action::Retry)) && !self.first_release
            }
            Phase::Pending | Phase::RollbackInProgress => false,
        }
    }

    /// What the policy's refusal holds in a plan at `phase` (the phase the
    /// machine left it in), for conditions, the message and the Event: a
    /// release that would start (a first release, a new revision, a new
    /// generation after a rollback) or a rollout under way (not halted: its
    /// failure says more). `None` when it holds nothing.
    pub fn policy_hold(&self, phase: Phase) -> Option<&str> {
        let holds = match phase {
            Phase::Pending => true,
            Phase::RollingOut => !self.halted,
            Phase::Stable => self.revision_changed,
            Phase::RolledBack => self.new_generation || self.request == Some(Action::Retry),
            Phase::RollbackInProgress => false,
        };
        self.refused.as_deref().filter(|_| holds && !self.deleting)
    }

    /// A hold is in force and no `promote --override-window` lifts it for
    /// this decision.
    pub fn held_back(&self) -> bool {
        self.held.is_some() && self.request != Some(Action::OverrideWindow)
    }
}

/// The first failure in this observation: a pod failure signal of a new
/// revision, a failed gate, or the progress deadline passed while waiting on pods.
fn detect_failure(obs: &Observation, target: &Target, facts: &Facts) -> Option<Failure> {
    let revision = obs
        .status
        .current_revision
        .clone()
        .unwrap_or_else(|| target.revision.clone());
    let rolling: Vec<(&str, &str)> = obs
        .status
        .components
        .iter()
        .filter(|c| c.is_changing())
        .filter_map(|c| Some((c.name.as_str(), c.current_hash.as_deref()?)))
        .collect();
    if let Some(p) = obs
        .pod_failures
        .iter()
        .find(|p| rolling.contains(&(p.component.as_str(), p.hash.as_str())))
    {
        return Some(Failure {
            revision,
            gate: "podHealth".into(),
            reason: p.reason.clone(),
            message: format!("component {} pod {}: {}", p.component, p.pod, p.message),
        });
    }
    if let Some(g) = super::step_gates(obs, target)
        .into_iter()
        .find(|g| g.verdict == Verdict::Failed && !g.dry_run)
    {
        return Some(Failure {
            revision,
            gate: g.name.clone(),
            reason: FailureReason::GateFailed.to_string(),
            message: g
                .message
                .clone()
                .unwrap_or_else(|| format!("gate {} failed", g.name)),
        });
    }
    if !facts.step_ready && facts.step_age > target.progress_deadline {
        return Some(Failure {
            revision,
            gate: "progressDeadline".into(),
            reason: FailureReason::ProgressDeadlineExceeded.to_string(),
            message: format!(
                "step {} did not become ready within {}s",
                facts.step,
                target.progress_deadline.as_secs()
            ),
        });
    }
    None
}

/// Shared storage of the machine: what it decided, and why.
#[derive(Debug, Default)]
pub struct Planner {
    cause: Cause,
}

/// The one superstate.
#[derive(Debug)]
pub enum Group {
    /// A rollout or a rollback moves pods.
    Active,
}

impl IntoStateMachine for Planner {
    type Event<'evt> = Facts;
    type Context<'ctx> = ();
    type State = Phase;
    type Superstate<'sub> = Group;

    fn initial() -> Phase {
        Phase::Pending
    }
}

impl State<Planner> for Phase {
    fn call_handler(&mut self, p: &mut Planner, f: &Facts, (): &mut ()) -> Outcome<Phase> {
        match self {
            Phase::Pending => p.pending(f),
            Phase::RollingOut => p.rolling_out(f),
            Phase::RollbackInProgress => p.rollback_in_progress(f),
            Phase::RolledBack => p.rolled_back(f),
            Phase::Stable => p.stable(f),
        }
    }

    fn superstate(&mut self) -> Option<Group> {
        match self {
            Phase::RollingOut | Phase::RollbackInProgress => Some(Group::Active),
            _ => None,
        }
    }
}

impl Superstate<Planner> for Group {
    fn call_handler(&mut self, p: &mut Planner, f: &Facts, (): &mut ()) -> Outcome<Phase> {
        match self {
            Group::Active => p.active(f),
        }
    }
}

impl Planner {
    fn set(&mut self, cause: Cause) -> Outcome<Phase> {
        self.cause = cause;
        Handled
    }

    fn go(&mut self, phase: Phase, cause: Cause) -> Outcome<Phase> {
        self.cause = cause;
        Transition(phase)
    }

    fn pending(&mut self, f: &Facts) -> Outcome<Phase> {
        if f.deleting || f.refused.is_some() {
            // A release whose gates or routes the policy refuses does not
            // start: nothing is created until the policy allows them.
            return Handled;
        }
        self.go(Phase::RollingOut, Cause::Start { superseded: false })
    }

    /// Deletion and abort, common to RollingOut and RollbackInProgress.
    fn active(&mut self, f: &Facts) -> Outcome<Phase> {
        let (gate, reason, message) = if f.deleting {
            (
                "deletion",
                FailureReason::DeletionRequested,
                "the plan is being deleted",
            )
        } else if f.request == Some(Action::Abort) {
            (
                "abort",
                FailureReason::Aborted,
                "rollout aborted by request",
            )
        } else {
            return Handled;
        };
        let failure = Failure {
            revision: String::new(),
            gate: gate.into(),
            reason: reason.to_string(),
            message: message.into(),
        };
        self.go(Phase::RollbackInProgress, Cause::RollbackStarted(failure))
    }

    fn rolling_out(&mut self, f: &Facts) -> Outcome<Phase> {
        if f.deleting || f.request == Some(Action::Abort) {
            return Super;
        }
        // A newer revision the policy refuses does not replace this
        // rollout: this one holds (below) until the policy allows it.
        if f.revision_changed && f.refused.is_none() {
            return self.go(Phase::RollingOut, Cause::Start { superseded: true });
        }
        if f.new_generation && !f.revision_changed {
            return self.set(Cause::AcceptGeneration);
        }
        if f.halted {
            if f.request == Some(Action::Retry) {
                return self.set(Cause::Retry);
            }
            return Handled;
        }
        if let Some(failure) = &f.failure {
            if f.automatic_rollback {
                return self.go(
                    Phase::RollbackInProgress,
                    Cause::RollbackStarted(failure.clone()),
                );
            }
            return self.set(Cause::Halted(failure.clone()));
        }
        if f.refused.is_some() {
            // Configuration, not a verdict: hold, never roll back. Pod
            // failures above still roll back; abort and deletion still work.
            return Handled;
        }
        let at_final = f.current == CurrentStep::Final;
        if f.awaiting.is_some() {
            // A gate could not decide: a human does. Never a rollback, never
            // a promotion on its own.
            match f.request {
                Some(Action::Retry) => return self.set(Cause::Retry),
                Some(Action::Promote { .. }) if at_final => {
                    return self.go(Phase::Stable, Cause::Promoted);
                }
                Some(Action::Promote { .. }) => {}
                _ => return Handled,
            }
        }
        match f.request {
            // Held: a plain promote does not pass a closed window (an Event says so).
            Some(Action::Promote { .. }) if f.held_back() => return Handled,
            Some(Action::Promote { full: true }) if !at_final => {
                return self.set(Cause::Advance { to_step: f.steps });
            }
            Some(Action::Promote { .. } | Action::OverrideWindow) if !at_final => {
                return self.set(Cause::Advance {
                    to_step: f.step + 1,
                });
            }
            _ => {}
        }
        if f.paused {
            // Held: not even promotion to Stable happens until resumed.
            return Handled;
        }
        if !f.current.done(f.step_ready && f.gates_passed) {
            return Handled;
        }
        if f.held_back() {
            // Outside a window or in a freeze: wait at the next step.
            return Handled;
        }
        if at_final {
            return self.go(Phase::Stable, Cause::Promoted);
        }
        self.set(Cause::Advance {
            to_step: f.step + 1,
        })
    }

    fn rollback_in_progress(&mut self, f: &Facts) -> Outcome<Phase> {
        if !f.rollback_complete {
            // Deletion or abort while rolling back: keep rolling back.
            return Handled;
        }
        if f.desired_is_stable && !f.deleting {
            return self.go(Phase::Stable, Cause::RollbackDone { to_desired: true });
        }
        self.go(Phase::RolledBack, Cause::RollbackDone { to_desired: false })
    }

    fn rolled_back(&mut self, f: &Facts) -> Outcome<Phase> {
        if f.deleting {
            return Handled;
        }
        if f.new_generation || f.request == Some(Action::Retry) {
            if f.held_back() || f.refused.is_some() {
                return Handled;
            }
            return self.go(Phase::RollingOut, Cause::Start { superseded: false });
        }
        Handled
    }

    fn stable(&mut self, f: &Facts) -> Outcome<Phase> {
        if f.deleting {
            return Handled;
        }
        if f.revision_changed {
            if f.held_back() || f.refused.is_some() {
                // The new revision waits for a window or for the policy;
                // the stable one serves.
                return Handled;
            }
            return self.go(Phase::RollingOut, Cause::Start { superseded: false });
        }
        if f.new_generation {
            return self.set(Cause::AcceptGeneration);
        }
        Handled
    }
}

/// Runs the machine once from `phase` on `facts`: the next phase and its cause.
pub fn run(phase: Phase, facts: &Facts) -> (Phase, Cause) {
    let mut sm = Planner::default().uninitialized_state_machine();
    *sm.state_mut() = phase;
    // No entry actions are defined, so initialising runs nothing.
    let mut sm = sm.init();
    sm.handle(facts);
    let next = *sm.state();
    (next, sm.inner().cause.clone())
}

/// Events that follow from a transition.
// One arm per cause: the Events of every transition side by side.
#[allow(clippy::too_many_lines)]
pub fn events(
    obs: &Observation,
    target: &Target,
    facts: &Facts,
    phase: Phase,
    cause: &Cause,
) -> Vec<EventIntent> {
    let normal = |reason: EventReason, message: String| EventIntent {
        type_: EventType::Normal,
        reason,
        message,
    };
    let warning = |reason: EventReason, message: String| EventIntent {
        type_: EventType::Warning,
        reason,
        message,
    };
    let stable = obs
        .status
        .stable_revision
        .clone()
        .unwrap_or_else(|| "none".into());
    let mut out = Vec::new();
    match cause {
        Cause::None | Cause::AcceptGeneration => {}
        Cause::Start { superseded } => {
            if *superseded {
                out.push(normal(
                    EventReason::RolloutSuperseded,
                    format!(
                        "revision {} superseded by a newer spec",
                        obs.status.current_revision.as_deref().unwrap_or("?")
                    ),
                ));
            }
            let how = if facts.first_release {
                "first release, straight to full scale".to_string()
            } else {
                format!("{} steps, stable revision {stable}", target.steps.len())
            };
            out.push(normal(
                EventReason::RolloutStarted,
                format!("rolling out revision {} ({how})", target.revision),
            ));
        }
        Cause::Advance { to_step } => {
            let mut next = obs.status.clone();
            next.current_step = *to_step;
            next.phase = Phase::RollingOut;
            let w = super::weight_at(target, &next);
            let what = if *to_step >= facts.steps {
                "final step".to_string()
            } else {
                format!("step {}/{}", to_step + 1, facts.steps)
            };
            let by = match (&facts.awaiting, facts.request) {
                (Some((gate, _)), Some(_)) => {
                    format!(" (promoted by request over inconclusive gate {gate})")
                }
                (None, Some(_)) => " (promoted by request)".to_string(),
                _ => String::new(),
            };
            out.push(normal(
                EventReason::StepAdvanced,
                format!("{what}: weight {w}%{by}"),
            ));
        }
        Cause::Retry => out.push(normal(
            EventReason::RetryRequested,
            if facts.awaiting.is_some() && !facts.halted {
                "evaluating the step's gates again".into()
            } else {
                "retrying the halted step".into()
            },
        )),
        Cause::Promoted => out.push(normal(
            EventReason::Promoted,
            format!("revision {} is stable", target.revision),
        )),
        Cause::Halted(f) => out.push(warning(
            EventReason::RolloutHalted,
            format!(
                "{} failed ({}): {}; automatic rollback is off, waiting for abort or retry",
                f.gate, f.reason, f.message
            ),
        )),
        Cause::RollbackStarted(f) => out.push(warning(
            EventReason::RollbackStarted,
            format!(
                "{} ({}): {}; rolling back to stable revision {stable}",
                f.gate, f.reason, f.message
            ),
        )),
        Cause::RollbackDone { to_desired } => {
            let msg = if *to_desired {
                format!(
                    "rolled back; the spec asks for the stable revision {stable}, which is live"
                )
            } else {
                format!("rolled back to stable revision {stable}")
            };
            out.push(if phase == Phase::Stable {
                normal(EventReason::RolledBack, msg)
            } else {
                warning(EventReason::RolledBack, msg)
            });
        }
    }
    out.extend(super::windows::events(obs, facts, cause));
    if let Some(a) = facts.request
        && matches!(a, Action::Pause | Action::Resume)
    {
        out.push(normal(
            EventReason::RequestApplied,
            format!("{a:?} applied"),
        ));
    }
    out
}

/// Why a decision looks again after a while (`Decision::requeue_cause`):
/// the metrics count the reconciles that no watch event started by this
/// cause, so a bench can see which timer costs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// A new step starts: act on it at once.
    NewStep,
    /// The safety look while rolling out: nothing else is due sooner.
    Safety,
    /// The current step's pause or bake time ends.
    StepEnds,
    /// The step's progress deadline passes.
    ProgressDeadline,
    /// A running Job gate times out.
    JobTimeout,
    /// A rollback in progress looks again.
    Rollback,
    /// A blue-green switch's old revision scales down.
    BlueGreenWindow,
    /// Pods held while a traffic change drains go.
    TrafficDrain,
    /// A window opens or a freeze ends.
    Window,
}

impl Requeue {
    /// Every cause, each a series from the start.
    pub const ALL: [Requeue; 9] = [
        Requeue::NewStep,
        Requeue::Safety,
        Requeue::StepEnds,
        Requeue::ProgressDeadline,
        Requeue::JobTimeout,
        Requeue::Rollback,
        Requeue::BlueGreenWindow,
        Requeue::TrafficDrain,
        Requeue::Window,
    ];

    /// The metric's label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Requeue::NewStep => "new_step",
            Requeue::Safety => "safety",
            Requeue::StepEnds => "step_ends",
            Requeue::ProgressDeadline => "progress_deadline",
            Requeue::JobTimeout => "job_timeout",
            Requeue::Rollback => "rollback",
            Requeue::BlueGreenWindow => "blue_green_window",
            Requeue::TrafficDrain => "traffic_drain",
            Requeue::Window => "window",
        }
    }
}

/// When to look again even without a watch event, and why.
pub fn requeue_after(
    obs: &Observation,
    target: &Target,
    facts: &Facts,
    status: &ReleasePlanStatus,
) -> Option<(Duration, Requeue)> {
    // Pods held while a traffic change drains go when it has.
    let drained = super::traffic::drain_left(obs, target)
        .map(|l| (l + Duration::from_millis(500), Requeue::TrafficDrain));
    let next = requeue_for_phase(obs, target, facts, status);
    // A held plan looks again when its window opens or its freeze ends.
    let opens = super::windows::wake_after(facts, obs.now).map(|d| (d, Requeue::Window));
    [next, drained, opens]
        .into_iter()
        .flatten()
        .min_by_key(|(d, _)| *d)
}

/// While a rollout waits on its pods (or on nothing due sooner), it looks
/// again this often: a belt for a watch event missed. Every change it waits
/// on wakes it, and every timer it waits on is its own requeue, so this look
/// finds nothing new unless a watch event was lost. It was 60 s; where the
/// cluster makes pods slowly (5000 plans rolling out at once) every plan
/// then looked every minute for nothing, 2.7 reconciles a plan. Still well
/// under Argo Rollouts' 15 minutes.
pub const SAFETY: Duration = Duration::from_secs(300);

fn requeue_for_phase(
    obs: &Observation,
    target: &Target,
    facts: &Facts,
    status: &ReleasePlanStatus,
) -> Option<(Duration, Requeue)> {
    match status.phase {
        // A blue-green switch's old revision scales down when its window ends.
        Phase::Stable => desired::blue_green_window(obs, target, status)
            .map(|left| (left + Duration::from_millis(500), Requeue::BlueGreenWindow)),
        Phase::Pending | Phase::RolledBack => None,
        Phase::RollbackInProgress => Some((Duration::from_secs(30), Requeue::Rollback)),
        Phase::RollingOut => {
            if status.phase != obs.status.phase
                || status.current_step != obs.status.current_step
                || status.observed_generation != obs.status.observed_generation
            {
                // The new step starts now: look again soon to act on it.
                return Some((Duration::from_secs(1), Requeue::NewStep));
            }
            let mut next = (SAFETY, Requeue::Safety);
            let mut sooner = |d: Duration, why: Requeue| {
                if d < next.0 {
                    next = (d, why);
                }
            };
            if let Some(remaining) = facts.current.ends_in()
                && !facts.paused
                && facts.held.is_none()
            {
                sooner(remaining + Duration::from_millis(500), Requeue::StepEnds);
            }
            if !facts.step_ready {
                let left = target.progress_deadline.saturating_sub(facts.step_age);
                sooner(left + Duration::from_secs(1), Requeue::ProgressDeadline);
            }
            // A running Job gate times out then (finished Jobs wake the plan).
            if let Some(left) = crate::gates::job::next_timeout(
                &obs.plan,
                &target.jobs,
                &obs.status,
                &obs.jobs,
                obs.now,
            ) {
                sooner(left + Duration::from_millis(500), Requeue::JobTimeout);
            }
            Some((next.0.max(Duration::from_millis(500)), next.1))
        }
    }
}
