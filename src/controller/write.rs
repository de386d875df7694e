//! Writing a decision's status with optimistic concurrency; its Events and
//! metrics go out only for a status that was written (or, when the answer
//! was lost, once a read shows it landed).

use super::context::Context;
use super::error::{Error, is_conflict, is_not_found, may_have_landed};
use super::keys::metrics_key;
use super::memory::Unconfirmed;
use super::observe::Seen;
use crate::api::{Outcome, ReleasePlan, ReleasePlanStatus};
use crate::ops::metrics::{FailedGateLabel, OutcomeLabel, PlanState};
use crate::plan::Decision;
use crate::plan::machine::Cause;
use kube::api::PostParams;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

/// Settles a transition whose status write got no answer, now that the plan
/// is read again: its Events and metrics go out once the read shows the
/// written status (and never for a write that did not land).
pub(crate) fn confirm_unanswered(ctx: &Context, plan: &ReleasePlan) {
    let key = ObjectRef::from_obj(plan);
    let landed = ctx.memory.with(&key, |m| m.settle_unanswered(plan));
    if let Some(u) = landed {
        info!("a status write that got no answer had landed: publishing its transition");
        ctx.events
            .planned(&plan.object_ref(&()), &u.decision.events);
        ctx.notifier.planned(plan, &u.decision.notices);
        for e in &u.decision.events {
            info!(reason = %e.reason, "{}", e.message);
        }
        record_metrics(ctx, &metrics_key(plan), &u.before, &u.decision);
    }
}

/// Metrics of a written decision, from its transition.
pub(crate) fn record_metrics(
    ctx: &Context,
    key: &str,
    before: &ReleasePlanStatus,
    decision: &Decision,
) {
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
pub(crate) async fn write_status(
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

/// Writes the decision's status when it changed, then queues its Events and
/// records its metrics; the plan as written, if it was. A conflict drops
/// them (the plan is read again and decided anew); a write whose answer was
/// lost keeps them until a read says whether it landed
/// ([`confirm_unanswered`]).
pub(crate) async fn status(
    ctx: &Context,
    plan: &ReleasePlan,
    seen: &Seen,
    decision: &Decision,
) -> Result<Option<ReleasePlan>, Error> {
    let before = &seen.obs.status;
    let mut landed = None;
    if plan.status.as_ref() != Some(&decision.status) {
        let plans: Api<ReleasePlan> = Api::namespaced(ctx.client.clone(), &seen.ns);
        // Kept as unanswered unless an answer says whether it landed, also
        // when the write is cut off (the reconcile given up at its deadline,
        // the future dropped): the next read then confirms its transition,
        // and its Events are published once.
        let mut unanswered = Unanswered {
            ctx,
            key: &seen.key,
            plan,
            before,
            decision,
            answered: false,
        };
        let result = write_status(&plans, plan, &decision.status).await;
        unanswered.answered = match &result {
            Err(Error::Kube(e)) => !may_have_landed(e),
            _ => true,
        };
        drop(unanswered);
        match result {
            Ok(Some(written)) => {
                // Written on the version an unanswered write was made on: that
                // one did not land (it would have made this one conflict).
                ctx.memory.with(&seen.key, |m| m.unconfirmed.clear());
                ctx.remember(&written);
                landed = Some(written);
            }
            Ok(None) => {}
            Err(Error::Kube(e)) if may_have_landed(&e) => {
                // No answer: the transition may be written. Its Events and
                // metrics wait for a read that says so.
                warn!(error = %e, "status write got no answer: its transition is confirmed by the next read");
                return Err(Error::Kube(e));
            }
            Err(e @ Error::Conflict(_)) => {
                // Decided on a stale object: read it fresh, so the retry does not
                // conflict again (after an API server restart the cache may lag
                // for many seconds), and drop this decision's events.
                if let Ok(p) = plans.get(&plan.name_any()).await {
                    ctx.remember(&p);
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        }
        ctx.metrics.write("status");
    }
    ctx.events.planned(&plan.object_ref(&()), &decision.events);
    ctx.notifier.planned(plan, &decision.notices);
    for e in &decision.events {
        info!(reason = %e.reason, "{}", e.message);
    }
    record_metrics(ctx, &metrics_key(plan), before, decision);
    Ok(landed)
}

/// A status write in flight: unless it is marked answered, dropping it keeps
/// its transition as unanswered ([`confirm_unanswered`]). A drop guard, so
/// that a write cut off by the reconcile's deadline is kept too, and the
/// decision is copied only when no answer came.
struct Unanswered<'a> {
    ctx: &'a Context,
    key: &'a ObjectRef<ReleasePlan>,
    plan: &'a ReleasePlan,
    before: &'a ReleasePlanStatus,
    decision: &'a Decision,
    answered: bool,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        self.ctx.memory.with(self.key, |m| {
            m.unanswered(Unconfirmed {
                base_version: self.plan.resource_version(),
                before: self.before.clone(),
                decision: self.decision.clone(),
            });
        });
    }
}
