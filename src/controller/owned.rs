//! Objects a plan owns beside its Deployments (Services, routes): their
//! metadata, and the one write they all go through, which applies what is
//! ours and creates what is missing, so an object of the same name made by
//! someone else is refused, never taken over.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use tracing::info;

use super::outcome::FIELD_MANAGER;
use super::outcome::{Acted, failed};
use crate::api::{LABEL_COMPONENT, LABEL_PLAN, ReleasePlan};
use releaseplan_core::objects::deployment::MANAGED_BY;
use releaseplan_core::objects::has_desired;

/// The labels of an owned object of `component`.
pub(super) fn labels(plan: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_PLAN.to_string(), plan.to_string()),
        (LABEL_COMPONENT.to_string(), component.to_string()),
        (MANAGED_BY.to_string(), "releaseplan".to_string()),
    ])
}

/// The metadata of an owned object: named, labelled and owned by the plan.
pub(super) fn meta(plan: &ReleasePlan, name: &str, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: plan.metadata.namespace.clone(),
        labels: Some(labels),
        owner_references: plan.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// Writes one object: applied when cached (ours), created when not, so an
/// object of the same name made by someone else is refused, never taken over.
pub(super) async fn write<K>(
    api: &Api<K>,
    kind: &'static str,
    desired: &K,
    cached: Option<&Arc<K>>,
    uid: &str,
) -> Result<bool, Acted>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let fresh = cached.is_some_and(|o| has_desired(desired, o.as_ref()));
    write_judged(api, kind, desired, cached.is_some().then_some(fresh), uid).await
}

/// [`write`], whether the cached object already matches judged by the
/// caller (`None`: not cached). A workload compares more than a subset: a
/// node list that went away.
pub(super) async fn write_judged<K>(
    api: &Api<K>,
    kind: &'static str,
    desired: &K,
    cached_fresh: Option<bool>,
    uid: &str,
) -> Result<bool, Acted>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let name = desired.meta().name.clone().unwrap_or_default();
    if let Some(fresh) = cached_fresh {
        if fresh {
            return Ok(false);
        }
        info!(kind, name = %name, "applying");
        return api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(desired),
            )
            .await
            .map(|_| true)
            .map_err(|e| failed(kind, &name, &e));
    }
    info!(kind, name = %name, "creating");
    match api.create(&PostParams::default(), desired).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // Ours but not cached yet, or someone else's.
            let existing = api.get(&name).await.map_err(|e| failed(kind, &name, &e))?;
            if existing.owner_references().iter().any(|r| r.uid == uid) {
                Ok(false)
            } else {
                Err(Acted::Refused(crate::plan::Refusal {
                    kind,
                    name: name.clone(),
                    code: 409,
                    message: if kind == "Service" {
                        format!(
                            "a {kind} of that name exists and is not owned by this ReleasePlan; rename or delete it, or name another in spec.components[].traffic"
                        )
                    } else {
                        format!(
                            "a {kind} of that name exists and is not owned by this ReleasePlan; rename or delete it"
                        )
                    },
                }))
            }
        }
        Err(e) => Err(failed(kind, &name, &e)),
    }
}

/// Deletes an object of the plan's it has cached (only that one: a uid
/// precondition), in the background; gone already is done. While the plan
/// is deleted and may be finalized (`tolerate`), a failure is only logged.
pub(super) async fn delete<K>(
    api: &Api<K>,
    kind: &'static str,
    cached: &K,
    tolerate: bool,
) -> Result<bool, Acted>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = cached.name_any();
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: cached.uid(),
            resource_version: None,
        }),
        ..kube::api::DeleteParams::background()
    };
    match api.delete(&name, &params).await {
        Ok(_) => Ok(true),
        Err(e) if super::error::is_not_found(&e) => Ok(false),
        Err(e) if tolerate => {
            tracing::warn!(kind, name = %name, error = %e, "delete during deletion failed");
            Ok(false)
        }
        Err(e) => Err(failed(kind, &name, &e)),
    }
}

/// While a plan is deleted, only a merge patch of the spec of what exists
/// (never an apply: the garbage collector may be stripping owner
/// references, see the Deployments' writer); gone already, or a failure
/// when the deletion may proceed anyway (`tolerate`), is no error.
pub(super) async fn patch_spec_while_deleted<K>(
    api: &Api<K>,
    kind: &'static str,
    name: &str,
    spec: serde_json::Value,
    tolerate: bool,
) -> Result<bool, Acted>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({ "spec": spec });
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if super::error::is_not_found(&e) || tolerate => Ok(false),
        Err(e) => Err(failed(kind, name, &e)),
    }
}
