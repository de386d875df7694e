//! The I/O of adoption (`spec.components[].adopt`): reading the adopted
//! Deployments, and applying the core's intents to them. Decides nothing:
//! see `crate::plan::adopt`.
//!
//! An adopted Deployment enters the plan's Deployment cache once it carries
//! the plan's label, which the first apply here sets; until then it is read
//! by name. The apply names only the label, the original-replicas annotation
//! and `spec.replicas` (server-side apply, so the user's other fields, the
//! template and the selector above all, stay theirs), and never an owner:
//! deleting the plan leaves the Deployment.

use super::context::Context;
use super::error::{Error, is_not_found};
use super::outcome::FIELD_MANAGER;
use super::outcome::{Acted, failed};
use crate::api::{ANNOTATION_ADOPTED_REPLICAS, LABEL_COMPONENT, LABEL_PLAN, LABEL_REVISION};
use crate::api::{ReleasePlan, cached::CachedDeployment};
use crate::plan::adopt::{AdoptIntent, AdoptedObs, AdoptedState, Found};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use tracing::info;

/// The Deployments the plan's components adopt: from the cache once marked,
/// else read by name. One already handed over and gone since (the user
/// deleted it, as told) is not read again.
pub(crate) async fn observe(
    ctx: &Context,
    plan: &ReleasePlan,
    ns: &str,
) -> Result<Vec<AdoptedObs>, Error> {
    let name = plan.name_any();
    let status = plan.status.as_ref();
    let mut out = Vec::new();
    for c in &plan.spec.components {
        let Some(adopt) = &c.adopt else {
            continue;
        };
        let deployment = adopt.deployment.clone();
        let state = if let Some(d) = ctx.deployments.get(ns, &deployment) {
            of_cached(&name, &d)
        } else {
            let handed_over = status
                .and_then(|s| s.components.iter().find(|s| s.name == c.name))
                .and_then(|s| s.adopted.as_ref())
                .is_some_and(|a| a.done && a.deployment == deployment);
            if handed_over {
                AdoptedState::Missing
            } else {
                let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
                match api.get(&deployment).await {
                    Ok(d) => {
                        let labels = d.metadata.labels.as_ref();
                        classify(
                            &name,
                            &d.metadata,
                            |k| labels?.get(k).map(String::as_str),
                            d.spec.as_ref().and_then(|s| s.replicas),
                            d.status.as_ref(),
                        )
                    }
                    Err(e) if is_not_found(&e) => AdoptedState::Missing,
                    // RBAC of an older chart: said in status, not a reconcile
                    // that fails (and holds the plan) forever.
                    Err(kube::Error::Api(s)) if s.code == 403 => AdoptedState::Refused(format!(
                        "the operator may not read it ({}); grant it get on deployments, as the chart does",
                        s.message
                    )),
                    Err(e) => return Err(Error::Kube(e)),
                }
            }
        };
        out.push(AdoptedObs {
            component: c.name.clone(),
            deployment,
            state,
        });
    }
    Ok(out)
}

/// [`classify`] for a Deployment as the cache holds it.
fn of_cached(plan: &str, d: &CachedDeployment) -> AdoptedState {
    classify(
        plan,
        &d.metadata,
        |k| d.labels.get(k),
        d.replicas(),
        d.status.as_ref(),
    )
}

/// Whether a Deployment can be adopted by plan `plan`, and its counts.
fn classify<'a>(
    plan: &str,
    meta: &ObjectMeta,
    label: impl Fn(&str) -> Option<&'a str>,
    replicas: Option<i32>,
    status: Option<&DeploymentStatus>,
) -> AdoptedState {
    if let Some(owner) = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    {
        return AdoptedState::Refused(format!(
            "it is owned by {} {}; adopt only a Deployment no controller owns",
            owner.kind, owner.name
        ));
    }
    if label(LABEL_COMPONENT).is_some() || label(LABEL_REVISION).is_some() {
        return AdoptedState::Refused(
            "it is a revision Deployment of a ReleasePlan, not a Deployment of yours".into(),
        );
    }
    match label(LABEL_PLAN) {
        Some(other) if other != plan => {
            return AdoptedState::Refused(format!("plan {other} adopted it"));
        }
        _ => {}
    }
    let status = status.cloned().unwrap_or_default();
    AdoptedState::Found(Found {
        replicas: replicas.unwrap_or(1),
        ready: status.ready_replicas.unwrap_or(0),
        pods: status.replicas.unwrap_or(0),
        marked: label(LABEL_PLAN) == Some(plan),
        original: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_ADOPTED_REPLICAS))
            .and_then(|v| v.parse().ok()),
    })
}

/// Applies each intent whose Deployment differs: the plan label, the
/// original-replicas annotation and `spec.replicas`, nothing else.
pub(crate) async fn act(
    ctx: &Context,
    plan: &ReleasePlan,
    ns: &str,
    observed: &[AdoptedObs],
    intents: &[AdoptIntent],
) -> Acted {
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    let plan_name = plan.name_any();
    for intent in intents {
        let found = observed
            .iter()
            .find(|o| o.component == intent.component && o.deployment == intent.deployment)
            .and_then(|o| match &o.state {
                AdoptedState::Found(f) => Some(f),
                AdoptedState::Missing | AdoptedState::Refused(_) => None,
            });
        // Only a Deployment that exists is applied: an apply of a missing one
        // would try to create it.
        let Some(found) = found else {
            continue;
        };
        if intent.satisfied_by(found) {
            continue;
        }
        let patch = serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": intent.deployment,
                "namespace": ns,
                "labels": {LABEL_PLAN: plan_name},
                "annotations": {ANNOTATION_ADOPTED_REPLICAS: intent.original.to_string()},
            },
            "spec": {"replicas": intent.replicas},
        });
        info!(deployment = %intent.deployment, replicas = intent.replicas, "scaling the adopted Deployment");
        match api
            .patch(
                &intent.deployment,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            Ok(_) => ctx.metrics.write("apply"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return failed("Deployment", &intent.deployment, &e),
        }
    }
    Acted::Done
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state(v: serde_json::Value) -> AdoptedState {
        let d: Deployment = serde_json::from_value(v).unwrap();
        let labels = d.metadata.labels.as_ref();
        classify(
            "shop",
            &d.metadata,
            |k| labels?.get(k).map(String::as_str),
            d.spec.as_ref().and_then(|s| s.replicas),
            d.status.as_ref(),
        )
    }

    #[test]
    fn classifies_what_can_be_adopted() {
        let found = state(json!({
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": 4, "selector": {}, "template": {}},
            "status": {"replicas": 4, "readyReplicas": 3}
        }));
        assert_eq!(
            found,
            AdoptedState::Found(Found {
                replicas: 4,
                ready: 3,
                pods: 4,
                marked: false,
                original: None
            })
        );
        let marked = state(json!({
            "metadata": {"name": "web", "labels": {LABEL_PLAN: "shop"},
                "annotations": {ANNOTATION_ADOPTED_REPLICAS: "4"}},
            "spec": {"replicas": 0, "selector": {}, "template": {}}
        }));
        assert!(
            matches!(marked, AdoptedState::Found(f) if f.marked && f.original == Some(4) && f.replicas == 0)
        );
        let owned = state(json!({
            "metadata": {"name": "web", "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1",
                "kind": "Rollout", "name": "web", "uid": "u", "controller": true}]},
            "spec": {"selector": {}, "template": {}}
        }));
        assert!(matches!(owned, AdoptedState::Refused(m) if m.contains("Rollout web")));
        let revision = state(json!({
            "metadata": {"name": "shop-web-x", "labels": {LABEL_PLAN: "shop", LABEL_COMPONENT: "web", LABEL_REVISION: "x"}},
            "spec": {"selector": {}, "template": {}}
        }));
        assert!(matches!(revision, AdoptedState::Refused(_)));
        let other = state(json!({
            "metadata": {"name": "web", "labels": {LABEL_PLAN: "cart"}},
            "spec": {"selector": {}, "template": {}}
        }));
        assert!(matches!(other, AdoptedState::Refused(m) if m.contains("plan cart")));
    }
}
