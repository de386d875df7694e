//! One reconcile of one plan, top-down: the finalizer ([`super::finalizer`]:
//! add it, or take a deleted plan's exit); observe ([`super::observe`]: the
//! plan's objects from the caches, gate verdicts from the runner, the last
//! failed write from memory); decide (the pure [`crate::plan::decide`]); act
//! ([`super::act`]: write only what differs, and decide again only when a
//! write was newly refused); write ([`super::write`]: the status with
//! optimistic concurrency, then its Events). The core picks the requeue.

use super::context::{CACHE_SYNC_RETRY, Context};
use super::error::Error;
use super::finalizer::{self, Entered};
use super::keys::key_of;
use super::{act, adopt, observe, queue, template_copies, write};
use crate::api::ReleasePlan;
use crate::api::cached::CachedPlan;
use crate::ops::metrics::ErrorLabel;
use crate::plan::{self, Decision, EventReason, EventType};
use futures::FutureExt;
use kube::Resource;
use kube::runtime::controller::Action;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{Instrument, info, warn};

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
        let timer = Some(queue::TIMER_CACHE_SYNC);
        ctx.queue.timer(key.namespace.as_deref(), &key.name, timer);
        return Ok(Action::requeue(CACHE_SYNC_RETRY));
    }
    let _in_flight = ctx.liveness.reconcile_started();
    // Decoded as a ReleasePlan when it entered the cache: this cannot fail
    // but for a bug, which is then this plan's error, not the process's.
    let plan = Arc::new(ctx.freshest(&key, cached).decode()?);
    let span = tracing::info_span!("reconcile", plan = %key, generation = plan.metadata.generation.unwrap_or(0));
    // The deadline ends even a wait nobody foresaw in an error and a retry,
    // rather than a plan frozen until the process restarts (kube-runtime runs
    // no other reconcile of a plan while one is in flight).
    let deadline = ctx.reconcile_deadline;
    let inner = std::panic::AssertUnwindSafe(reconcile_inner(&plan, &ctx).instrument(span.clone()))
        .catch_unwind();
    let res = if let Ok(res) = tokio::time::timeout(deadline, inner).await {
        res.unwrap_or_else(|panic| Err(Error::Panic(panic_message(panic.as_ref()))))
    } else {
        span.in_scope(|| warn!(?deadline, "reconcile given up at its deadline"));
        Err(Error::Deadline(deadline))
    };
    let timer = match &res {
        Ok(next) => next.cause,
        // The error policy requeues.
        Err(_) => Some(queue::TIMER_RETRY),
    };
    ctx.queue.timer(key.namespace.as_deref(), &key.name, timer);
    let res = res.map(|next| next.action);
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
        );
    }
    Action::requeue(delay)
}

/// What a reconcile returns, and why it comes back by itself (the cause of
/// a timed requeue, for `releaseplan_timed_reconciles_total`).
#[derive(Debug)]
pub(super) struct Next {
    pub(super) action: Action,
    cause: Option<&'static str>,
}

impl Next {
    /// Only a change wakes the plan.
    fn await_change() -> Self {
        Next {
            action: Action::await_change(),
            cause: None,
        }
    }
}

impl From<Action> for Next {
    /// An action that waits for a change (the finalizer's).
    fn from(action: Action) -> Self {
        Next {
            action,
            cause: None,
        }
    }
}

/// finalizer -> observe -> decide -> act -> (decide again on a new refusal)
/// -> write; the core picks the requeue.
pub(super) async fn reconcile_inner(plan: &Arc<ReleasePlan>, ctx: &Context) -> Result<Next, Error> {
    let plan = match finalizer::enter(ctx, plan).await? {
        Entered::Reconcile(plan) => plan,
        Entered::Done(action) => return Ok(action.into()),
    };
    write::confirm_unanswered(ctx, &plan);
    let mut seen = observe::observe(ctx, &plan)?;
    seen.obs.adopted = adopt::observe(ctx, &plan, &seen.ns).await?;
    let mut decision = plan::decide(&seen.obs, &seen.templates);
    let acted = act::run(ctx, &plan, &seen, &decision).await;
    if acted.namespace_terminating {
        info!("the namespace is being deleted: waiting for the plan's own deletion");
        return Ok(Next::await_change());
    }
    // A write refused anew (or one that went through again): the core
    // decides knowing it, and status says so.
    if acted.refusal != seen.obs.refusal {
        ctx.remember_refusal(&seen.key, acted.refusal.as_ref());
        seen.obs.refusal.clone_from(&acted.refusal);
        decision = plan::decide(&seen.obs, &seen.templates);
    }
    let jobs = act::jobs(ctx, &plan, &seen.key, acted.refusal.is_some(), &decision).await;
    // Before status records their hash: a copy exists for each recorded one
    // (kept only with config versioning's access to Secrets).
    let copies = if ctx.config.may_copy(&seen.ns) {
        template_copies::act(ctx, &plan, &seen.ns, &decision.template_copies).await
    } else {
        Ok(())
    };
    let written = write::status(ctx, &plan, &seen, &decision).await?;
    if decision.finalize {
        return finalizer::release(ctx, &plan).await.map(Next::from);
    }
    acted.result().and(jobs).and(copies)?;
    // A requeue without a cause is still a requeue.
    let core = |d: &Decision| {
        let cause = d.requeue_cause.map_or(queue::TIMER_UNKNOWN, |c| c.as_str());
        d.requeue_after.map(|after| (after, cause))
    };
    // A Deployment applied but not cached yet: back when its answer expires.
    let stand_in = seen.stand_in.map(|after| (after, queue::TIMER_STAND_IN));
    let mut requeue = [core(&decision), stand_in]
        .into_iter()
        .flatten()
        .min_by_key(|r| r.0);
    if let Some(written) = written
        && written.spec.components.iter().all(|c| c.adopt.is_none())
    {
        let base = plan.metadata.resource_version.clone();
        if let Some(again) = quiet_landing(ctx, base, &written, &decision) {
            requeue = [core(&again), requeue]
                .into_iter()
                .flatten()
                .min_by_key(|r| r.0);
        }
    }
    Ok(match requeue {
        Some((after, cause)) => Next {
            action: Action::requeue(after),
            cause: Some(cause),
        },
        None => Next::await_change(),
    })
}

/// After a status write: the decision its watch event's reconcile would
/// make, when that reconcile would do nothing new (`Decision::repeats`),
/// and then the event is marked as needing none. Without this, most status
/// writes cost a second reconcile that finds nothing to do. Observed the
/// way that reconcile would, from the caches and the plan as written; plans
/// that adopt Deployments (read through the API) are left to their reconcile.
fn quiet_landing(
    ctx: &Context,
    base: Option<String>,
    written: &ReleasePlan,
    decision: &Decision,
) -> Option<Decision> {
    let seen = observe::observe(ctx, written).ok()?;
    let again = plan::decide(&seen.obs, &seen.templates);
    if !again.repeats(decision, &seen.obs.status) {
        return None;
    }
    let version = written.metadata.resource_version.clone()?;
    ctx.queue
        .quiet_write(seen.key.namespace.as_deref(), &seen.key.name, base, version);
    Some(again)
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
}
