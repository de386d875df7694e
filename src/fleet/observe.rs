//! The hub's look at its members: each member's plan read with a deadline,
//! at once for all, into the views the pure decision takes
//! (`releaseplan_core::fleet::decide`). A member that does not answer in
//! time is `Unreachable`: it holds its wave, it never blocks the others.

use super::member::{Deadlines, Member};
use crate::api::ReleasePlan;
use crate::plan::Target;
use kube::Api;
use releaseplan_core::fleet::{MemberPlan, MemberView};
use std::collections::BTreeMap;

/// The annotation the hub writes on a member's plan: the revision the
/// fleet admits there (docs/fleets.md).
pub const ANNOTATION_ADMITTED: &str = "releaseplan.io/fleet-admitted";

/// Reads the plan `namespace/name` in every member, concurrently, each
/// within `deadlines` (connect, then read; the whole look at one member is
/// bounded by their sum).
pub async fn observe(
    members: &[Member],
    namespace: &str,
    name: &str,
    deadlines: Deadlines,
) -> BTreeMap<String, MemberView> {
    let looks = members.iter().map(|m| async move {
        let view = tokio::time::timeout(
            deadlines.connect + deadlines.read,
            look(m, namespace, name, deadlines),
        )
        .await
        .unwrap_or_else(|_| {
            MemberView::Unreachable(format!(
                "no answer within {}s",
                (deadlines.connect + deadlines.read).as_secs()
            ))
        });
        (m.name.clone(), view)
    });
    futures::future::join_all(looks).await.into_iter().collect()
}

/// One member's plan, as the decision sees it.
async fn look(m: &Member, namespace: &str, name: &str, deadlines: Deadlines) -> MemberView {
    let config = match m.config(deadlines).await {
        Ok(c) => c,
        Err(e) => return MemberView::Unreachable(e.to_string()),
    };
    let client = match kube::Client::try_from(config) {
        Ok(c) => c,
        Err(e) => return MemberView::Unreachable(format!("{}: {e}", m.secret)),
    };
    let plans: Api<ReleasePlan> = Api::namespaced(client, namespace);
    let plan = match plans.get_opt(name).await {
        Ok(Some(p)) => p,
        Ok(None) => return MemberView::NoPlan,
        Err(e) => return MemberView::Unreachable(format!("{} ({}): {e}", m.name, m.server)),
    };
    // The revision the member computes from its spec: the same function.
    let revision = match Target::from_spec(&plan.spec) {
        Ok(t) => t.revision,
        Err(e) => {
            return MemberView::Unreachable(format!("{}: its plan cannot be judged: {e}", m.name));
        }
    };
    let status = plan.status.unwrap_or_default();
    MemberView::Plan(MemberPlan {
        revision,
        phase: status.phase,
        stable_revision: status.stable_revision,
        admitted: plan
            .metadata
            .annotations
            .and_then(|a| a.get(ANNOTATION_ADMITTED).cloned()),
        failure: status.failure.map(|f| f.message),
    })
}
