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
use releaseplan_core::objects::deployment::{MANAGED_BY, is_subset};

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

/// Whether an observed object already has every field of the desired one.
fn up_to_date<K: serde::Serialize>(desired: &K, observed: &K) -> bool {
    match (
        serde_json::to_value(desired),
        serde_json::to_value(observed),
    ) {
        (Ok(d), Ok(o)) => is_subset(&d, &o),
        _ => false,
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
    let name = desired.meta().name.clone().unwrap_or_default();
    if let Some(o) = cached {
        if up_to_date(desired, o.as_ref()) {
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
