//! Acting on the StatefulSets of StatefulSet components: each written as
//! the core decided (template, replicas, partition), the pods it cannot move
//! past deleted, and the sets of removed components deleted. Decides
//! nothing.

use super::context::Context;
use super::error::is_not_found;
use super::observe::Seen;
use super::outcome::{Acted, failed};
use super::owned;

/// The kind, in refusals and logs.
const KIND: &str = "StatefulSet";
use crate::api::ReleasePlan;
use crate::plan::{Decision, TemplateSource};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use releaseplan_core::objects::{deployment, stateful_set};
use std::borrow::Cow;
use tracing::info;

/// Writes the decision's StatefulSets, then deletes the pods they cannot
/// move past and the sets of removed components. A new set of a component
/// in `waiting` (its config copies are not there yet) is not created.
pub(crate) async fn act(
    ctx: &Context,
    plan: &ReleasePlan,
    seen: &Seen,
    waiting: &std::collections::BTreeSet<String>,
    decision: &Decision,
) -> Acted {
    if decision.stateful_sets.is_empty()
        && decision.delete_pods.is_empty()
        && decision.delete_stateful_sets.is_empty()
    {
        return Acted::Done;
    }
    let ns = &seen.ns;
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), ns);
    let deleting = plan.metadata.deletion_timestamp.is_some();
    let uid = plan.uid().unwrap_or_default();
    for intent in &decision.stateful_sets {
        let observed = seen
            .stateful_sets
            .iter()
            .find(|s| s.name_any() == intent.name);
        if observed.is_none() && (deleting || waiting.contains(&intent.component)) {
            continue;
        }
        let template = match (&intent.template, observed) {
            (TemplateSource::Spec(t), _) => Cow::Borrowed(&**t),
            (TemplateSource::Existing | TemplateSource::Of(_), Some(o))
                if stateful_set::observe(o).and_then(|s| s.hash).as_deref()
                    == Some(intent.hash.as_str()) =>
            {
                match o.spec.as_ref() {
                    Some(s) => Cow::Owned(s.template.clone()),
                    None => continue,
                }
            }
            // Another revision's template (a rollback): the one stored for it.
            (TemplateSource::Existing | TemplateSource::Of(_), _) => match super::stored::template(
                ctx,
                ns,
                &seen.stored,
                (&intent.component, &intent.hash, &intent.name),
                intent.replicas,
            )
            .await
            {
                Ok(Some(t)) => Cow::Owned(t),
                Ok(None) => continue,
                Err(acted) => return acted,
            },
        };
        let owned = deployment::should_own(plan, observed.map(|o| &o.metadata));
        let desired = stateful_set::build(plan, intent, &template, owned);
        let fresh = observed.map(|o| stateful_set::up_to_date(&desired, o));
        if fresh == Some(true) {
            continue;
        }
        let written = if deleting {
            let Some(spec) = &desired.spec else { continue };
            let spec = serde_json::json!({
                "replicas": intent.replicas,
                "template": spec.template,
                "updateStrategy": spec.update_strategy,
            });
            owned::patch_spec_while_deleted(&api, KIND, &intent.name, spec, decision.finalize).await
        } else {
            info!(stateful_set = %intent.name, replicas = intent.replicas, partition = intent.partition, revision = %intent.hash, "writing");
            owned::write_judged(&api, KIND, &desired, fresh, &uid).await
        };
        match written {
            Ok(true) => ctx.metrics.write("apply"),
            Ok(false) => {}
            Err(acted) => return acted,
        }
    }
    delete(ctx, plan, seen, decision).await
}

/// Deletes the pods the sets cannot move past, and the sets of removed
/// components.
async fn delete(ctx: &Context, plan: &ReleasePlan, seen: &Seen, decision: &Decision) -> Acted {
    let ns = &seen.ns;
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), ns);
    let deleting = plan.metadata.deletion_timestamp.is_some();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    for name in &decision.delete_pods {
        info!(pod = %name, "deleting a pod its StatefulSet cannot move past (not Ready, on a revision it leaves)");
        match pods.delete(name, &DeleteParams::default()).await {
            Ok(_) => ctx.metrics.write("delete"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return failed("Pod", name, &e),
        }
    }
    for name in &decision.delete_stateful_sets {
        let Some(o) = seen.stateful_sets.iter().find(|s| &s.name_any() == name) else {
            continue;
        };
        info!(stateful_set = %name, "deleting the StatefulSet of a removed component");
        match owned::delete(&api, KIND, o.as_ref(), deleting && decision.finalize).await {
            Ok(true) => ctx.metrics.write("delete"),
            Ok(false) => {}
            Err(acted) => return acted,
        }
    }
    Acted::Done
}
