//! The desired Deployment of one component revision, and the check that an
//! observed Deployment already matches it (look before you write).

use crate::api::cached::CachedDeployment;
use crate::api::{LABEL_COMPONENT, LABEL_PLAN, LABEL_REVISION, ReleasePlan};
use crate::plan::DeploymentIntent;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;
use std::collections::BTreeMap;

/// Label telling tools who manages the Deployment.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// Labels that identify one component revision; they select its pods.
pub fn revision_labels(plan: &str, component: &str, hash: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_PLAN.to_string(), plan.to_string()),
        (LABEL_COMPONENT.to_string(), component.to_string()),
        (LABEL_REVISION.to_string(), hash.to_string()),
    ])
}

/// Builds the Deployment for an intent from a template (the spec's, the one
/// the Deployment already runs, or the one stored for its revision).
pub fn build(
    plan: &ReleasePlan,
    intent: &DeploymentIntent,
    template: &PodTemplateSpec,
    owned: bool,
) -> Deployment {
    let name = plan.metadata.name.clone().unwrap_or_default();
    let selector = revision_labels(&name, &intent.component, &intent.hash);
    let mut template = template.clone();
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    meta.labels
        .get_or_insert_with(BTreeMap::new)
        .extend(selector.clone());
    let mut labels = selector.clone();
    labels.insert(MANAGED_BY.into(), "releaseplan".into());
    // A baseline's pods and object say so: queries and people tell them
    // from the canary's and the stable ones'.
    if crate::api::revision::is_baseline(&intent.hash) {
        let role = (crate::api::LABEL_ROLE.to_string(), "baseline".to_string());
        meta.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(role.0.clone(), role.1.clone());
        labels.insert(role.0, role.1);
    }
    Deployment {
        metadata: super::plan_meta(plan, &intent.name, labels, owned),
        spec: Some(DeploymentSpec {
            replicas: Some(intent.replicas),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..LabelSelector::default()
            },
            template,
            // The plan keeps revisions as Deployments; one ReplicaSet each is enough.
            revision_history_limit: Some(1),
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

/// Whether a Deployment written now should carry the plan as its owner.
///
/// Always, except while the plan is being deleted: then a Deployment keeps the
/// ownership it has (the garbage collector strips it when the plan is deleted
/// with orphan propagation, and re-adding it would get the Deployment deleted
/// with the plan), and a new one is owned unless the deletion orphans.
pub fn should_own(plan: &ReleasePlan, observed: Option<&ObjectMeta>) -> bool {
    if plan.metadata.deletion_timestamp.is_none() {
        return true;
    }
    let uid = plan.metadata.uid.as_deref().unwrap_or_default();
    match observed {
        Some(meta) => meta.owner_references.iter().flatten().any(|o| o.uid == uid),
        None => !plan
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "orphan"),
    }
}

/// True when every field set in `desired` has the same value in `observed`.
/// The API server adds defaults, so equality would never hold; a value we set
/// that someone changed (drift) breaks the subset and triggers an apply.
pub fn is_subset(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Object(d), Value::Object(o)) => d
            .iter()
            .all(|(k, v)| v.is_null() || o.get(k).is_some_and(|ov| is_subset(v, ov))),
        (Value::Array(d), Value::Array(o)) => {
            d.len() == o.len() && d.iter().zip(o).all(|(dv, ov)| is_subset(dv, ov))
        }
        (d, o) => d == o,
    }
}

/// Whether an observed Deployment already matches the desired one.
pub fn up_to_date(desired: &Deployment, observed: &CachedDeployment) -> bool {
    let Ok(mut d) = serde_json::to_value(desired) else {
        return false;
    };
    if let Some(obj) = d.as_object_mut() {
        obj.remove("status");
    }
    is_subset(&d, &observed.to_json())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::TemplateSource;
    use serde_json::json;

    fn plan() -> ReleasePlan {
        serde_json::from_value(json!({
            "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
            "metadata": {"name": "shop", "namespace": "prod", "uid": "u-1"},
            "spec": {"components": [{"name": "web", "replicas": 2,
                "template": {"spec": {"containers": [{"name": "app", "image": "shop:1"}]}}}]}
        }))
        .unwrap()
    }

    fn intent(replicas: i32) -> DeploymentIntent {
        DeploymentIntent {
            name: "shop-web-abc".into(),
            component: "web".into(),
            hash: "abc".into(),
            replicas,
            template: TemplateSource::Existing,
        }
    }

    #[test]
    fn builds_an_owned_labelled_deployment() {
        let p = plan();
        let tpl = p.spec.components[0].template.clone();
        let d = build(&p, &intent(3), &tpl, true);
        assert_eq!(d.metadata.name.as_deref(), Some("shop-web-abc"));
        assert_eq!(d.metadata.namespace.as_deref(), Some("prod"));
        let owner = &d.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("ReleasePlan", "u-1", Some(true))
        );
        let spec = d.spec.unwrap();
        assert_eq!(spec.replicas, Some(3));
        let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
        assert_eq!(
            pod_labels.get(LABEL_REVISION).map(String::as_str),
            Some("abc")
        );
        assert_eq!(spec.selector.match_labels.unwrap().len(), 3);
    }

    #[test]
    fn ownership_is_kept_as_found_while_deleting() {
        let mut p = plan();
        let tpl = p.spec.components[0].template.clone();
        let owned = build(&p, &intent(1), &tpl, true);
        let mut orphaned = owned.clone();
        orphaned.metadata.owner_references = None;
        assert!(
            should_own(&p, Some(&orphaned.metadata)),
            "not deleting: adopt"
        );
        p.metadata.deletion_timestamp = Some(crate::api::time::to_k8s(chrono::Utc::now()));
        p.metadata.finalizers = Some(vec![crate::api::FINALIZER.into()]);
        assert!(should_own(&p, Some(&owned.metadata)));
        assert!(
            !should_own(&p, Some(&orphaned.metadata)),
            "orphaned by the GC: leave it so"
        );
        assert!(
            should_own(&p, None),
            "background deletion: new ones are collected with the plan"
        );
        p.metadata.finalizers = Some(vec!["orphan".into(), crate::api::FINALIZER.into()]);
        assert!(!should_own(&p, None));
        assert!(
            build(&p, &intent(1), &tpl, false)
                .metadata
                .owner_references
                .is_none()
        );
    }

    #[test]
    fn subset_ignores_server_defaults_but_sees_drift() {
        let p = plan();
        let tpl = p.spec.components[0].template.clone();
        let desired = build(&p, &intent(2), &tpl, true);
        let mut observed = serde_json::to_value(&desired).unwrap();
        observed["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] =
            json!("IfNotPresent");
        observed["spec"]["progressDeadlineSeconds"] = json!(600);
        observed["metadata"]["resourceVersion"] = json!("12");
        let obs: CachedDeployment = serde_json::from_value(observed.clone()).unwrap();
        assert!(up_to_date(&desired, &obs));
        observed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("shop:hacked");
        assert!(!up_to_date(
            &desired,
            &serde_json::from_value(observed.clone()).unwrap()
        ));
        observed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("shop:1");
        observed["spec"]["replicas"] = json!(5);
        assert!(!up_to_date(
            &desired,
            &serde_json::from_value(observed).unwrap()
        ));
    }
}
