//! Acting on the DaemonSets of DaemonSet components: one per revision that
//! runs, each limited to the nodes the core gave it; those of revisions that
//! run nowhere any more deleted. Decides nothing.

use super::context::Context;
use super::error::is_not_found;
use super::observe::Seen;
use super::outcome::{Acted, FIELD_MANAGER, failed};
use crate::api::ReleasePlan;
use crate::plan::{Decision, TemplateSource};
use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, ResourceExt};
use releaseplan_core::objects::{daemon_set, deployment};
use std::borrow::Cow;
use tracing::{info, warn};

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
            (TemplateSource::Existing, Some(o)) => match o.spec.as_ref() {
                Some(s) => Cow::Owned(s.template.clone()),
                None => continue,
            },
            (TemplateSource::Existing, None) => {
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
        if observed.is_some_and(|o| daemon_set::up_to_date(&desired, o)) {
            continue;
        }
        if deleting {
            // Only the template of what exists: the garbage collector may be
            // stripping owner references (see the Deployments' writer).
            let Some(_) = observed else { continue };
            let patch = serde_json::json!({"spec": {
                "template": desired.spec.as_ref().map(|s| &s.template),
            }});
            match api
                .patch(&intent.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => ctx.metrics.write("apply"),
                Err(e) if is_not_found(&e) || decision.finalize => {}
                Err(e) => return failed("DaemonSet", &intent.name, &e),
            }
            continue;
        }
        info!(daemon_set = %intent.name, revision = %intent.hash, nodes = ?intent.nodes, "writing");
        if observed.is_some() {
            // Applied whole, even when only a node list went away (a subset
            // check alone would find nothing to write).
            match api
                .patch(
                    &intent.name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&desired),
                )
                .await
            {
                Ok(_) => ctx.metrics.write("apply"),
                Err(e) => return failed("DaemonSet", &intent.name, &e),
            }
            continue;
        }
        match super::owned::write(&api, "DaemonSet", &desired, None, &uid).await {
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
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: o.uid(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(name, &params).await {
            Ok(_) => ctx.metrics.write("delete"),
            Err(e) if is_not_found(&e) => {}
            Err(e) if deleting && decision.finalize => {
                warn!(daemon_set = %name, error = %e, "delete during deletion failed");
            }
            Err(e) => return failed("DaemonSet", name, &e),
        }
    }
    Acted::Done
}
