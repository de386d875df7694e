//! Acting on the DaemonSets of DaemonSet components: one per revision that
//! runs, each limited to the nodes the core gave it; those of revisions that
//! run nowhere any more deleted. Decides nothing.

use super::context::Context;
use super::observe::Seen;
use super::outcome::Acted;
use super::owned;

/// The kind, in refusals and logs.
const KIND: &str = "DaemonSet";
use crate::api::ReleasePlan;
use crate::plan::{Decision, TemplateSource};
use k8s_openapi::api::apps::v1::DaemonSet;

use kube::{Api, ResourceExt};
use releaseplan_core::objects::{daemon_set, deployment};
use std::borrow::Cow;
use tracing::info;

/// Writes the decision's DaemonSets, then deletes those of revisions that
/// run nowhere. A new one of a component in `waiting` (its config copies
/// are not there yet) is not created.
pub(crate) async fn act(
    ctx: &Context,
    plan: &ReleasePlan,
    seen: &Seen,
    waiting: &std::collections::BTreeSet<String>,
    decision: &Decision,
) -> Acted {
    if decision.daemon_sets.is_empty() && decision.delete_daemon_sets.is_empty() {
        return Acted::Done;
    }
    let ns = &seen.ns;
    let api: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), ns);
    let deleting = plan.metadata.deletion_timestamp.is_some();
    let uid = plan.uid().unwrap_or_default();
    for intent in &decision.daemon_sets {
        let observed = seen
            .daemon_sets
            .iter()
            .find(|d| d.name_any() == intent.name);
        if observed.is_none() && (deleting || waiting.contains(&intent.component)) {
            continue;
        }
        let template = match (&intent.template, observed) {
            (TemplateSource::Spec(t), _) => Cow::Borrowed(&**t),
            (TemplateSource::Existing | TemplateSource::Of(_), Some(o)) => match o.spec.as_ref() {
                Some(s) => Cow::Owned(s.template.clone()),
                None => continue,
            },
            (TemplateSource::Existing | TemplateSource::Of(_), None) => {
                let revision = (&*intent.component, &*intent.hash, &*intent.name);
                match super::stored::template(ctx, ns, &seen.stored, revision, 1).await {
                    Ok(Some(t)) => Cow::Owned(t),
                    Ok(None) => continue,
                    Err(acted) => return acted,
                }
            }
        };
        let owned = deployment::should_own(plan, observed.map(|o| &o.metadata));
        let desired = daemon_set::build(plan, intent, &template, owned);
        let fresh = observed.map(|o| daemon_set::up_to_date(&desired, o));
        if fresh == Some(true) {
            continue;
        }
        let written = if deleting {
            // Only the template (its node list) of what exists.
            let Some(spec) = &desired.spec else { continue };
            let spec = serde_json::json!({ "template": spec.template });
            owned::patch_spec_while_deleted(&api, KIND, &intent.name, spec, decision.finalize).await
        } else {
            info!(daemon_set = %intent.name, revision = %intent.hash, nodes = ?intent.nodes, "writing");
            owned::write_judged(&api, KIND, &desired, fresh, &uid).await
        };
        match written {
            Ok(true) => ctx.metrics.write("apply"),
            Ok(false) => {}
            Err(acted) => return acted,
        }
    }
    for name in &decision.delete_daemon_sets {
        let Some(o) = seen.daemon_sets.iter().find(|d| &d.name_any() == name) else {
            continue;
        };
        info!(daemon_set = %name, "deleting the DaemonSet of a revision that runs nowhere now");
        match owned::delete(&api, KIND, o.as_ref(), deleting && decision.finalize).await {
            Ok(true) => ctx.metrics.write("delete"),
            Ok(false) => {}
            Err(acted) => return acted,
        }
    }
    Acted::Done
}
