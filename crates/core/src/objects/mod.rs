//! The objects the operator writes for a plan, built purely from it: revision
//! Deployments, the ControllerRevisions that store each revision's template
//! (so `undo` is a lookup, for the operator and the plugin alike), and the
//! scale targets and HPAs of autoscaled components.

pub mod autoscaling;
pub mod controller_revision;
pub mod daemon_set;
pub mod deployment;
pub mod stateful_set;

/// Whether an observed object already has every field of the desired one
/// (its status aside): the API server adds defaults, so equality would never
/// hold, and a value someone changed breaks the subset (drift).
pub fn has_desired<K: serde::Serialize>(desired: &K, observed: &K) -> bool {
    let (Ok(mut d), Ok(o)) = (
        serde_json::to_value(desired),
        serde_json::to_value(observed),
    ) else {
        return false;
    };
    if let Some(obj) = d.as_object_mut() {
        obj.remove("status");
    }
    deployment::is_subset(&d, &o)
}

/// The metadata of an object of a plan's: named, in the plan's namespace,
/// labelled, and owned by the plan when `owned`
/// ([`deployment::should_own`]).
pub fn plan_meta(
    plan: &crate::api::ReleasePlan,
    name: &str,
    labels: std::collections::BTreeMap<String, String>,
    owned: bool,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    use kube::Resource;
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: Some(name.to_string()),
        namespace: plan.metadata.namespace.clone(),
        labels: Some(labels),
        owner_references: if owned {
            plan.controller_owner_ref(&()).map(|o| vec![o])
        } else {
            None
        },
        ..Default::default()
    }
}
