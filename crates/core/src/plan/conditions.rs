//! Conditions and the one-line message, computed from the next status.
//!
//! `Ready`, `Reconciling` and `Stalled` follow kstatus' conventions
//! (`kubectl wait --for=condition=Ready` works as is; Argo CD needs the health
//! check in the README). `Progressing`, `RollbackInProgress` and `Paused` say more for humans.
//! A condition keeps its `lastTransitionTime` while its status stays the same.

use super::SpecError;
use super::machine::Facts;
use super::reasons::ConditionReason as R;
use super::{Refusal, RefusedKind, Target};
use crate::api::{DEFAULT_PROGRESS_DEADLINE_SECONDS, Phase, ReleasePlanStatus, time};
use crate::gates::template::ProblemKind;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use std::time::Duration;

use super::Observation;

/// Condition type: the desired revision is fully live and healthy.
pub const READY: &str = "Ready";
/// Condition type: the operator is moving pods.
pub const RECONCILING: &str = "Reconciling";
/// Condition type: no progress without a human (rolled back, invalid spec, halted).
pub const STALLED: &str = "Stalled";
/// Condition type: a rollout advances.
pub const PROGRESSING: &str = "Progressing";
/// Condition type: components return to the stable revision.
pub const ROLLBACK_IN_PROGRESS: &str = "RollbackInProgress";
/// Condition type: the rollout is held.
pub const PAUSED: &str = "Paused";

struct Cond {
    type_: &'static str,
    status: bool,
    reason: R,
    message: String,
}

fn cond(type_: &'static str, status: bool, reason: R, message: impl Into<String>) -> Cond {
    Cond {
        type_,
        status,
        reason,
        message: message.into(),
    }
}

/// Turns conditions into metav1 Conditions, keeping lastTransitionTime of those
/// whose status did not change.
fn finish(obs: &Observation, generation: Option<i64>, conds: Vec<Cond>) -> Vec<Condition> {
    conds
        .into_iter()
        .map(|c| {
            let status = if c.status { "True" } else { "False" }.to_string();
            let last = obs
                .status
                .conditions
                .iter()
                .find(|old| old.type_ == c.type_ && old.status == status)
                .map_or_else(
                    || time::to_k8s(obs.now),
                    |old| old.last_transition_time.clone(),
                );
            Condition {
                type_: c.type_.to_string(),
                status,
                reason: c.reason.to_string(),
                message: c.message,
                observed_generation: generation,
                last_transition_time: last,
            }
        })
        .collect()
}

/// One condition, outside [`compute`]'s set (the `Adopted` condition of
/// [`super::adopt`]), with the same lastTransitionTime rule.
pub(super) fn one(
    obs: &Observation,
    generation: Option<i64>,
    type_: &'static str,
    status: bool,
    reason: R,
    message: String,
) -> Condition {
    let mut out = finish(obs, generation, vec![cond(type_, status, reason, message)]);
    out.swap_remove(0)
}

/// Conditions of a plan whose spec cannot be acted on.
pub fn invalid_spec(obs: &Observation, e: &SpecError) -> Vec<Condition> {
    let msg = format!("spec cannot be acted on: {e}");
    finish(
        obs,
        Some(obs.generation),
        vec![
            cond(READY, false, R::InvalidSpec, msg.clone()),
            cond(RECONCILING, false, R::InvalidSpec, msg.clone()),
            cond(STALLED, true, R::InvalidSpec, msg.clone()),
            cond(PROGRESSING, false, R::InvalidSpec, msg),
            cond(ROLLBACK_IN_PROGRESS, false, R::InvalidSpec, "no rollback"),
            cond(PAUSED, false, R::InvalidSpec, "not paused"),
        ],
    )
}

/// Conditions of a plan held because config it references is missing: not
/// ready and not stalled (it goes on by itself when the object appears, as
/// when a GitOps tool applies the plan before its ConfigMap).
pub fn config_missing(obs: &Observation, msg: &str) -> Vec<Condition> {
    let was = |t: &str| {
        obs.status
            .conditions
            .iter()
            .any(|c| c.type_ == t && c.status == "True")
    };
    let rolling_back = was(ROLLBACK_IN_PROGRESS);
    finish(
        obs,
        Some(obs.generation),
        vec![
            cond(READY, false, R::ConfigMissing, msg.to_string()),
            cond(RECONCILING, true, R::ConfigMissing, msg.to_string()),
            cond(STALLED, false, R::ConfigMissing, "waiting for config"),
            cond(PROGRESSING, true, R::ConfigMissing, msg.to_string()),
            cond(
                ROLLBACK_IN_PROGRESS,
                rolling_back,
                R::ConfigMissing,
                if rolling_back {
                    "rollback held until the config exists"
                } else {
                    "no rollback"
                },
            ),
            cond(PAUSED, false, R::ConfigMissing, "not paused"),
        ],
    )
}

/// Conditions for the next status.
// One condition after another, each a match over the same facts: split, they would each repeat the facts.
#[allow(clippy::too_many_lines)]
pub fn compute(obs: &Observation, s: &ReleasePlanStatus, facts: &Facts) -> Vec<Condition> {
    let caught_up = s.observed_generation == Some(obs.generation);
    let msg = s.message.clone().unwrap_or_default();
    let failure = s
        .failure
        .as_ref()
        .map(|f| format!("{} failed ({}): {}", f.gate, f.reason, f.message));
    let paused = facts.paused && s.phase == Phase::RollingOut;
    let halted = s.is_halted();
    let inconclusive = awaiting_text(s);
    // Measured from the rollback's own start (the next status's step start),
    // not from the failed step's: a rollback that just began is not slow.
    let rollback_age = s
        .step_started_at
        .map(|t| (obs.now - t).to_std().unwrap_or_default())
        .unwrap_or_default();
    let rollback_slow = s.phase == Phase::RollbackInProgress && rollback_age > facts_deadline(obs);

    let mut ready = match s.phase {
        Phase::Stable if caught_up => cond(READY, true, R::Stable, msg.clone()),
        Phase::Stable => cond(
            READY,
            false,
            R::NewGeneration,
            "a new spec generation is not acted on yet",
        ),
        Phase::RolledBack => cond(
            READY,
            false,
            R::RolledBack,
            failure.clone().unwrap_or(msg.clone()),
        ),
        phase => cond(READY, false, R::from(phase), msg.clone()),
    };
    let reconciling = match s.phase {
        _ if obs.refusal.as_ref().is_some_and(|r| !r.is_permanent()) => cond(
            RECONCILING,
            true,
            match obs.refusal.as_ref() {
                Some(r) if r.is_unavailable() => R::ApiUnavailable,
                Some(r) if r.is_traffic() => R::TrafficWriteFailed,
                Some(r) if r.refused_kind() == RefusedKind::Config => R::ConfigWriteFailed,
                _ => R::DeploymentWriteFailed,
            },
            obs.refusal.as_ref().map(refusal_text).unwrap_or_default(),
        ),
        Phase::RollingOut if !halted => cond(RECONCILING, true, R::RollingOut, msg.clone()),
        Phase::RollbackInProgress => cond(RECONCILING, true, R::RollingBack, msg.clone()),
        Phase::Pending => cond(
            RECONCILING,
            true,
            R::Pending,
            "waiting for the first reconcile",
        ),
        _ if !caught_up => cond(
            RECONCILING,
            true,
            R::NewGeneration,
            "a new spec generation is not acted on yet",
        ),
        phase => cond(RECONCILING, false, R::from(phase), msg.clone()),
    };
    let policy_hold = facts.policy_hold(s.phase);
    let stalled = if halted {
        cond(
            STALLED,
            true,
            R::RolloutHalted,
            failure.clone().unwrap_or_default(),
        )
    } else if let Some(text) = policy_hold {
        // Waits for an administrator, not for a pod: Stalled, and it goes
        // on by itself once the policy allows it (the watch wakes the plan).
        cond(STALLED, true, R::GatePolicyRefused, text)
    } else if s.phase == Phase::RolledBack {
        let text = match (&failure, &s.stable_revision) {
            (Some(f), Some(_)) => {
                format!("{f}; run `kubectl releaseplan retry` or change the spec")
            }
            (Some(f), None)
                if s.components
                    .iter()
                    .any(|c| c.adopted.as_ref().is_some_and(|a| a.message.is_none())) =>
            {
                format!(
                    "{f}; first release failed and was scaled to zero, the adopted Deployment serves again; fix the spec or retry"
                )
            }
            (Some(f), None) => {
                format!("{f}; first release failed and was scaled to zero; fix the spec or retry")
            }
            (None, _) => msg.clone(),
        };
        cond(STALLED, true, R::RolledBack, text)
    } else if rollback_slow {
        cond(
            STALLED,
            true,
            R::RollbackSlow,
            "the stable revision is not ready after progressDeadlineSeconds; check its pods",
        )
    } else if let Some(r) = obs.refusal.as_ref().filter(|r| r.is_permanent()) {
        cond(
            STALLED,
            true,
            match r.refused_kind() {
                RefusedKind::Traffic => R::TrafficRefused,
                RefusedKind::Autoscaler => R::AutoscalerRefused,
                RefusedKind::Config => R::ConfigRefused,
                RefusedKind::Deployment => R::DeploymentRefused,
            },
            format!("{}; change the spec", refusal_text(r)),
        )
    } else if let Some(p) = obs
        .target
        .as_ref()
        .ok()
        .and_then(|t| super::template_problems(t, s).first())
    {
        let reason = match p.kind {
            ProblemKind::NotFound => R::GateTemplateNotFound,
            ProblemKind::Invalid => R::GateTemplateInvalid,
        };
        cond(
            STALLED,
            true,
            reason,
            format!(
                "{}; the step waits until the template gate can run",
                p.message
            ),
        )
    } else {
        cond(STALLED, false, R::from(s.phase), msg.clone())
    };
    let mut stalled = stalled;
    // kstatus reads Reconciling before Stalled: a plan that needs a human must
    // not also say it is reconciling, or Flux waits for its timeout instead of
    // reporting the failure.
    let mut reconciling = if stalled.status {
        Cond {
            type_: RECONCILING,
            status: false,
            reason: stalled.reason,
            message: stalled.message.clone(),
        }
    } else {
        reconciling
    };
    let mut progressing = match s.phase {
        Phase::RollingOut if halted => cond(
            PROGRESSING,
            false,
            R::RolloutHalted,
            failure.clone().unwrap_or_default(),
        ),
        Phase::RollingOut if inconclusive.is_some() => {
            cond(PROGRESSING, true, R::GateInconclusive, msg.clone())
        }
        Phase::RollingOut if policy_hold.is_some() => {
            cond(PROGRESSING, true, R::GatePolicyRefused, msg.clone())
        }
        Phase::RollingOut if paused => cond(PROGRESSING, true, R::Paused, msg.clone()),
        Phase::RollingOut => cond(PROGRESSING, true, R::RollingOut, msg.clone()),
        Phase::Stable => cond(PROGRESSING, false, R::Stable, msg.clone()),
        phase => cond(PROGRESSING, false, R::from(phase), msg.clone()),
    };
    let rollback = if s.phase == Phase::RollbackInProgress {
        cond(
            ROLLBACK_IN_PROGRESS,
            true,
            R::RollingBack,
            failure.clone().unwrap_or(msg.clone()),
        )
    } else {
        cond(
            ROLLBACK_IN_PROGRESS,
            false,
            R::from(s.phase),
            "no rollback in progress",
        )
    };
    let paused_cond = if let Some(text) = inconclusive {
        cond(PAUSED, true, R::GateInconclusive, text)
    } else if let Some(text) = policy_hold.filter(|_| s.phase == Phase::RollingOut) {
        // Held by the administrator's policy until it allows the gate.
        cond(PAUSED, true, R::GatePolicyRefused, text)
    } else if paused {
        let why = if s.pause_requested {
            R::PauseRequested
        } else {
            R::SpecPaused
        };
        cond(
            PAUSED,
            true,
            why,
            "the rollout holds at its current step; resume to continue",
        )
    } else if s.phase == Phase::RollingOut && indefinite_pause(obs, s) {
        cond(
            PAUSED,
            true,
            R::PauseStep,
            "holding at a pause step until promoted",
        )
    } else {
        cond(PAUSED, false, R::NotPaused, "not paused")
    };
    // A release window or freeze: the plan goes on by itself when it opens.
    if let Some((reason, text)) = super::windows::waiting(obs, facts, s) {
        if s.phase != Phase::RollingOut {
            ready = cond(READY, false, reason, text.clone());
            reconciling = cond(RECONCILING, true, reason, text.clone());
            stalled = cond(STALLED, false, reason, "held by a release window or freeze");
        }
        progressing = cond(PROGRESSING, true, reason, text);
    }
    // Conditions of a plan held by the policy were judged on this
    // generation, even where status keeps its observed generation (a Stable
    // plan whose new revision does not start): `wait` reads them so.
    let generation = if policy_hold.is_some() {
        Some(obs.generation)
    } else {
        s.observed_generation
    };
    finish(
        obs,
        generation,
        vec![
            ready,
            reconciling,
            stalled,
            progressing,
            rollback,
            paused_cond,
        ],
    )
}

/// What a rollout paused on an inconclusive gate waits for, naming the gate
/// and why; `None` when it is not.
fn awaiting_text(s: &ReleasePlanStatus) -> Option<String> {
    if !s.awaits_decision() {
        return None;
    }
    let g = s.gates.iter().find(|g| g.awaiting_decision && !g.dry_run)?;
    Some(format!(
        "gate {} is inconclusive: {}; promote to continue, retry to evaluate again, or abort to roll back",
        g.name,
        g.message.as_deref().unwrap_or("inconclusive")
    ))
}

fn indefinite_pause(obs: &Observation, s: &ReleasePlanStatus) -> bool {
    if s.current_step < 0 {
        return false;
    }
    obs.target
        .as_ref()
        .is_ok_and(|t| super::order::current(t, s, Duration::ZERO).holds_until_promoted())
}

fn facts_deadline(obs: &Observation) -> Duration {
    obs.target.as_ref().map_or(
        Duration::from_secs(DEFAULT_PROGRESS_DEADLINE_SECONDS.unsigned_abs().into()),
        |t| t.progress_deadline,
    )
}

/// What a refused Deployment write says in conditions, messages and events.
pub fn refusal_text(r: &Refusal) -> String {
    if r.code == Refusal::BY_POLICY {
        format!("{} {} not written: {}", r.kind, r.name, r.message)
    } else if r.code == 0 {
        format!(
            "no answer from the API server to the write of {} {} (retried): {}",
            r.kind, r.name, r.message
        )
    } else if r.is_unavailable() {
        format!(
            "the API server could not take {} {} ({}, retried): {}",
            r.kind, r.name, r.code, r.message
        )
    } else {
        format!(
            "the API server refused {} {} ({}): {}",
            r.kind, r.name, r.code, r.message
        )
    }
}

/// One line that says what is happening; a refused Deployment write comes first.
pub fn message(
    target: &Target,
    s: &ReleasePlanStatus,
    facts: &Facts,
    refusal: Option<&Refusal>,
) -> String {
    match refusal {
        Some(r) => format!("{}; {}", refusal_text(r), phase_message(target, s, facts)),
        None => phase_message(target, s, facts),
    }
}

fn phase_message(target: &Target, s: &ReleasePlanStatus, facts: &Facts) -> String {
    let stable = s.stable_revision.as_deref().unwrap_or("none");
    let current = s.current_revision.as_deref().unwrap_or("none");
    match s.phase {
        Phase::Pending => "waiting for the first reconcile".into(),
        Phase::Stable => format!("revision {current} is stable"),
        Phase::RolledBack => match &s.failure {
            Some(f) => format!(
                "revision {current} rolled back to {stable}: {} failed ({}): {}",
                f.gate, f.reason, f.message
            ),
            None => format!("rolled back to {stable}"),
        },
        Phase::RollbackInProgress => format!("rolling back from {current} to {stable}"),
        Phase::RollingOut => {
            if let Some(f) = &s.failure {
                return format!(
                    "halted: {} failed ({}): {}; abort or retry",
                    f.gate, f.reason, f.message
                );
            }
            let steps = usize::try_from(super::order::total(target, &s.components)).unwrap_or(0);
            let step = usize::try_from(s.current_step).unwrap_or(0);
            let where_ = if step >= steps {
                "final step".to_string()
            } else {
                format!("step {}/{steps}", step + 1)
            };
            let awaiting = s.gates.iter().find(|g| g.awaiting_decision && !g.dry_run);
            let waiting = if let Some(g) = awaiting {
                format!(
                    "paused: gate {} is inconclusive; promote, retry or abort",
                    g.name
                )
            } else if facts.paused {
                "paused".to_string()
            } else {
                super::order::current(target, s, Duration::ZERO)
                    .waiting_for()
                    .to_string()
            };
            format!(
                "rolling out {current} ({where_}, weight {}%): {waiting}",
                s.weight
            )
        }
    }
}
