//! The finalizer: added on a plan's first reconcile, and the exits a
//! deleted plan takes (gone already, foreground deletion, settled).

use super::context::Context;
use super::error::{Error, is_conflict, is_not_found};
use super::keys::metrics_key;
use crate::api::{FINALIZER, ReleasePlan};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use std::sync::Arc;
use tracing::info;

/// Adds or removes our finalizer with a merge patch guarded by
/// resourceVersion. Returns the patched object (`None`: the plan is gone).
pub(crate) async fn set_finalizers(
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

/// Where a reconcile goes after the finalizer step.
pub(crate) enum Entered {
    /// On with this plan (the finalizer was just added: the patched object).
    Reconcile(Arc<ReleasePlan>),
    /// Nothing more to do.
    Done(Action),
}

/// Adds the finalizer to a new plan, or takes a deleted plan's exit: one
/// whose finalizer is gone already, or one deleted in the foreground.
pub(crate) async fn enter(ctx: &Context, plan: &Arc<ReleasePlan>) -> Result<Entered, Error> {
    let ns = plan.namespace().ok_or(Error::NoNamespace)?;
    let plans: Api<ReleasePlan> = Api::namespaced(ctx.client.clone(), &ns);
    let deleting = plan.metadata.deletion_timestamp.is_some();
    let has_finalizer = plan.finalizers().iter().any(|f| f == FINALIZER);
    if deleting && !has_finalizer {
        gone(ctx, plan);
        return Ok(Entered::Done(Action::await_change()));
    }
    if deleting && plan.finalizers().iter().any(|f| f == "foregroundDeletion") {
        // Foreground deletion removes every Deployment first: there is nothing to
        // roll back to, and holding the plan would only fight the garbage collector.
        set_finalizers(&plans, plan, false).await?;
        ctx.metrics.write("finalizer");
        gone(ctx, plan);
        return Ok(Entered::Done(Action::await_change()));
    }
    if has_finalizer {
        return Ok(Entered::Reconcile(Arc::clone(plan)));
    }
    // Go on with the patched object: the first status is written in this
    // same reconcile, so a new plan never sits without one.
    let Some(p) = set_finalizers(&plans, plan, true).await? else {
        return Ok(Entered::Done(Action::await_change()));
    };
    ctx.metrics.write("finalizer");
    ctx.remember(&p);
    Ok(Entered::Reconcile(Arc::new(p)))
}

/// The rollout of a deleted plan settled: the finalizer goes, and with it
/// everything kept about the plan.
pub(crate) async fn release(ctx: &Context, plan: &ReleasePlan) -> Result<Action, Error> {
    let ns = plan.namespace().ok_or(Error::NoNamespace)?;
    let plans: Api<ReleasePlan> = Api::namespaced(ctx.client.clone(), &ns);
    set_finalizers(&plans, plan, false).await?;
    ctx.metrics.write("finalizer");
    gone(ctx, plan);
    info!("rollout settled: finalizer removed, deletion proceeds");
    Ok(Action::await_change())
}

/// Drops the plan's metrics series and memory.
fn gone(ctx: &Context, plan: &ReleasePlan) {
    ctx.metrics.set_phase(&metrics_key(plan), None);
    ctx.forget(&ObjectRef::from_obj(plan));
}
