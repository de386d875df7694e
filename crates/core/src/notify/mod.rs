//! Notifications of release transitions, the pure half.
//!
//! A decision's notices ([`notices`]) follow from its `Cause` and the next
//! status only, like its Events: the machine names every transition, so a
//! notice is never re-derived from event reasons or from a diff of two
//! statuses. Which receivers get a notice ([`config::NotifyConfig::receivers_for`])
//! and what they are sent ([`payload`]) are pure too; the operator's
//! `notify` module reads the namespace's config and Secrets and delivers,
//! and only after the status write that made the transition landed.

pub mod alertmanager;
pub mod commit_status;
pub mod config;
pub mod payload;

use crate::api::{Phase, ReleasePlanStatus};
use crate::plan::machine::Cause;
use crate::plan::reasons::{EventReason, FailureReason};
use crate::plan::steps::CurrentStep;
use crate::plan::{EventIntent, Target};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::time::Duration;

/// A transition people subscribe to (the `<trigger>` of a subscription).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Trigger {
    /// A rollout of a new revision started.
    RolloutStarted,
    /// An unfinished rollout was replaced by a newer spec.
    Superseded,
    /// The rollout moved to another step.
    StepAdvanced,
    /// The rollout reached a `pause: {}` step: it waits for promote or abort.
    Paused,
    /// A gate's failure ended the step (halt or rollback follows).
    GateFailed,
    /// A failure holds the rollout (automatic rollback off).
    Halted,
    /// Every component starts returning to the stable revision.
    RollbackStarted,
    /// The rollback finished.
    RolledBack,
    /// The new revision is stable.
    Promoted,
    /// The plan was deleted mid-rollout: deletion waits for the rollback.
    DeletionBlocked,
}

impl Trigger {
    /// Every trigger.
    pub const ALL: &[Trigger] = &[
        Trigger::RolloutStarted,
        Trigger::Superseded,
        Trigger::StepAdvanced,
        Trigger::Paused,
        Trigger::GateFailed,
        Trigger::Halted,
        Trigger::RollbackStarted,
        Trigger::RolledBack,
        Trigger::Promoted,
        Trigger::DeletionBlocked,
    ];

    /// The name written in subscriptions and payloads.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::RolloutStarted => "rolloutStarted",
            Trigger::Superseded => "superseded",
            Trigger::StepAdvanced => "stepAdvanced",
            Trigger::Paused => "paused",
            Trigger::GateFailed => "gateFailed",
            Trigger::Halted => "halted",
            Trigger::RollbackStarted => "rollbackStarted",
            Trigger::RolledBack => "rolledBack",
            Trigger::Promoted => "promoted",
            Trigger::DeletionBlocked => "deletionBlocked",
        }
    }

    /// The trigger of a name (as written in subscriptions).
    pub fn parse(s: &str) -> Option<Trigger> {
        Trigger::ALL.iter().copied().find(|t| t.as_str() == s)
    }

    /// Whether it reports something gone wrong (Slack colour, Teams style).
    pub fn is_bad(self) -> bool {
        matches!(
            self,
            Trigger::GateFailed
                | Trigger::Halted
                | Trigger::RollbackStarted
                | Trigger::RolledBack
                | Trigger::DeletionBlocked
        )
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Trigger {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One transition to announce, with the status fields messages use.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Notice {
    /// What happened.
    pub trigger: Trigger,
    /// `status.rolloutCount` after the transition: which rollout it belongs to.
    pub rollout: i64,
    /// Phase after the transition.
    pub phase: Phase,
    /// The revision rolled out (or rolled back from).
    pub revision: Option<String>,
    /// The stable revision (where a rollback returns).
    pub stable_revision: Option<String>,
    /// The step, 1-based (`steps + 1` is the implicit final step to 100%).
    pub step: i32,
    /// Steps in the spec.
    pub steps: i32,
    /// Percent of each changed component's replicas on the new revision.
    pub weight: i32,
    /// The gate that failed (`podHealth`, `progressDeadline`, a gate's name).
    pub gate: Option<String>,
    /// Short machine-readable reason, e.g. `CrashLoopBackOff`.
    pub reason: Option<String>,
    /// What happened, for humans (the text of the matching Event).
    pub message: String,
    /// When the rollout (or rollback) started.
    pub started_at: Option<DateTime<Utc>>,
    /// When the transition was decided (the observation's time).
    pub at: DateTime<Utc>,
    /// Seconds from the rollout's start to a promotion or a finished rollback.
    pub duration_seconds: Option<i64>,
    /// The judgement of the analysis gate the notice is about (a failure or
    /// a pause for a human): per metric, samples, change, p-value, verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub analysis: Option<crate::api::analysis::AnalysisStatus>,
}

impl Notice {
    /// A key of this transition, stable for it wherever it is delivered from
    /// (the operator prefixes the plan's uid): equal for the same written
    /// transition, different for any other, because `at` is the decision's
    /// time, written with it.
    pub fn key(&self) -> String {
        format!(
            "{}-{}-{}-{}",
            self.rollout,
            self.trigger,
            self.step,
            self.at.timestamp_millis()
        )
    }
}

/// The notices of a decision: one or more per transition its `cause`
/// names, with the fields of the next `status`. `events` are the decision's
/// Events, whose text becomes the notices' message. Pure.
pub fn notices(
    now: DateTime<Utc>,
    before: &ReleasePlanStatus,
    target: &Target,
    cause: &Cause,
    status: &ReleasePlanStatus,
    events: &[EventIntent],
) -> Vec<Notice> {
    // Global steps: with `dependsOn` the rollout runs more than the spec's.
    let steps = crate::plan::order::total(target, &status.components);
    let text = |reason: EventReason| event_text(events, reason);
    let started_at = status.rollout_started_at.or(before.rollout_started_at);
    let base = |trigger: Trigger, message: String| Notice {
        trigger,
        rollout: status.rollout_count,
        phase: status.phase,
        revision: status
            .current_revision
            .clone()
            .or_else(|| Some(target.revision.clone())),
        stable_revision: status.stable_revision.clone(),
        step: status.current_step.saturating_add(1),
        steps,
        weight: status.weight,
        gate: None,
        reason: None,
        message,
        started_at,
        at: now,
        duration_seconds: None,
        analysis: None,
    };
    let judgement = |gate: &str| judgement(before, status, gate);
    let took = || {
        before
            .rollout_started_at
            .map(|s| (now - s).num_seconds().max(0))
    };
    let failed = |trigger: Trigger, f: &crate::api::Failure, message: String| Notice {
        analysis: judgement(&f.gate),
        gate: Some(f.gate.clone()),
        reason: Some(f.reason.clone()),
        revision: Some(f.revision.clone())
            .filter(|r| !r.is_empty())
            .or_else(|| before.current_revision.clone()),
        ..base(trigger, message)
    };
    let mut out = Vec::new();
    match cause {
        Cause::None | Cause::AcceptGeneration | Cause::Retry => {}
        Cause::Start { superseded } => {
            if *superseded {
                out.push(Notice {
                    revision: before.current_revision.clone(),
                    ..base(Trigger::Superseded, text(EventReason::RolloutSuperseded))
                });
            }
            out.push(base(
                Trigger::RolloutStarted,
                text(EventReason::RolloutStarted),
            ));
        }
        Cause::Advance { .. } => {
            out.push(base(Trigger::StepAdvanced, text(EventReason::StepAdvanced)));
        }
        Cause::Promoted => out.push(Notice {
            duration_seconds: took(),
            ..base(Trigger::Promoted, text(EventReason::Promoted))
        }),
        Cause::Halted(f) => {
            if f.reason == FailureReason::GateFailed.as_str() {
                out.push(failed(Trigger::GateFailed, f, f.message.clone()));
            }
            out.push(failed(Trigger::Halted, f, text(EventReason::RolloutHalted)));
        }
        Cause::RollbackStarted(f) => {
            if f.reason == FailureReason::GateFailed.as_str() {
                out.push(failed(Trigger::GateFailed, f, f.message.clone()));
            }
            let trigger = if f.reason == FailureReason::DeletionRequested.as_str() {
                Trigger::DeletionBlocked
            } else {
                Trigger::RollbackStarted
            };
            out.push(failed(trigger, f, text(EventReason::RollbackStarted)));
        }
        Cause::RollbackDone { .. } => {
            let f = status.failure.as_ref().or(before.failure.as_ref());
            out.push(Notice {
                duration_seconds: took(),
                analysis: f.and_then(|f| judgement(&f.gate)),
                gate: f.map(|f| f.gate.clone()),
                reason: f.map(|f| f.reason.clone()),
                revision: before.current_revision.clone(),
                ..base(Trigger::RolledBack, text(EventReason::RolledBack))
            });
        }
    }
    out.extend(awaiting(status, events, |m| base(Trigger::Paused, m)));
    out.extend(paused(cause, target, status, || {
        let step = status.current_step.saturating_add(1);
        base(
            Trigger::Paused,
            format!("paused at step {step}/{steps}, waiting for promote or abort"),
        )
    }));
    out
}

/// The text of the decision's Event of `reason` (empty without one).
fn event_text(events: &[EventIntent], reason: EventReason) -> String {
    events
        .iter()
        .find(|e| e.reason == reason)
        .map(|e| e.message.clone())
        .unwrap_or_default()
}

/// The last judgement of the analysis gate named `gate`, if it is one.
fn judgement(
    before: &ReleasePlanStatus,
    status: &ReleasePlanStatus,
    gate: &str,
) -> Option<crate::api::analysis::AnalysisStatus> {
    status
        .gates
        .iter()
        .chain(&before.gates)
        .find(|g| g.name == gate)
        .and_then(|g| g.analysis.clone())
}

/// The `paused` notice when a gate went past its `inconclusiveLimit`: the
/// rollout waits for a human as at a `pause: {}` step (`make` builds the
/// notice from the Event's message).
fn awaiting(
    status: &ReleasePlanStatus,
    events: &[EventIntent],
    make: impl FnOnce(String) -> Notice,
) -> Option<Notice> {
    let e = events
        .iter()
        .find(|e| e.reason == EventReason::RolloutAwaitingDecision)?;
    let gate = status
        .gates
        .iter()
        .find(|g| g.awaiting_decision && !g.dry_run);
    Some(Notice {
        analysis: gate.and_then(|g| g.analysis.clone()),
        gate: gate.map(|g| g.name.clone()),
        reason: Some("GateInconclusive".into()),
        ..make(e.message.clone())
    })
}

/// The `paused` notice (made by `make`) when a start or an advance lands on
/// a `pause: {}` step: someone has to promote or abort.
fn paused(
    cause: &Cause,
    target: &Target,
    status: &ReleasePlanStatus,
    make: impl FnOnce() -> Notice,
) -> Option<Notice> {
    let lands = matches!(cause, Cause::Start { .. } | Cause::Advance { .. })
        && status.phase == Phase::RollingOut
        && status.current_step >= 0
        && crate::plan::order::current(target, status, Duration::ZERO)
            == CurrentStep::UntilPromoted;
    lands.then(make)
}

#[cfg(test)]
mod tests;
