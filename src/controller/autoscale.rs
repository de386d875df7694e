//! ComponentScales and owned HPAs of autoscaled components: read from the
//! caches for the core, written as the core's intents say.
//!
//! A ComponentScale's `spec.replicas` belongs to its autoscaler: the operator
//! sets it once, when it creates the object, and afterwards writes only its
//! status (the pods of every revision and their selector), through the
//! status subresource. An object of the same name made by someone else is
//! refused, never taken over.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use tracing::{info, warn};

use super::context::Context;
use super::error::is_not_found;
use super::index::PlanCache;
use super::outcome::{Acted, failed};
use super::owned::{labels, meta, write};
use crate::api::cached::Labelled as _;
use crate::api::scale::ComponentScale;
use crate::api::{LABEL_COMPONENT, ReleasePlan};
use crate::objects::autoscaling;
use crate::plan::autoscale::{AutoscalerIntent, ScaleIntent, ScaleObs, ScaleState, hpa_message};

/// The autoscaling objects of a plan, as cached, by component.
pub(crate) fn observe(
    scales: &[Arc<ComponentScale>],
    hpas: &[Arc<HorizontalPodAutoscaler>],
) -> Vec<ScaleObs> {
    let mut seen: BTreeMap<&str, ScaleObs> = BTreeMap::new();
    let entry = |component: &str| ScaleObs {
        component: component.to_string(),
        ..ScaleObs::default()
    };
    for s in scales {
        if let Some(c) = s.label(LABEL_COMPONENT) {
            seen.entry(c).or_insert_with(|| entry(c)).replicas = Some(s.spec.replicas);
        }
    }
    for h in hpas {
        if let Some(c) = h.label(LABEL_COMPONENT) {
            let e = seen.entry(c).or_insert_with(|| entry(c));
            e.hpa = true;
            e.hpa_message = h
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_deref())
                .and_then(hpa_message);
        }
    }
    seen.into_values().collect()
}

/// Writes the ComponentScales and HPAs that differ from the intents; the
/// first failure ends the pass.
pub(super) async fn act(
    ctx: &Context,
    plan: &ReleasePlan,
    ns: &str,
    (scales, hpas): (&[Arc<ComponentScale>], &[Arc<HorizontalPodAutoscaler>]),
    intents: &[ScaleIntent],
) -> Acted {
    // While the plan is deleted nothing is created (the namespace may be
    // terminating); the garbage collector removes what it owns.
    let deleting = plan.metadata.deletion_timestamp.is_some();
    let uid = plan.uid().unwrap_or_default();
    let plan_name = plan.name_any();
    let scale_api: Api<ComponentScale> = Api::namespaced(ctx.client.clone(), ns);
    let hpa_api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), ns);
    for intent in intents {
        let cached_scale = scales.iter().find(|s| s.name_any() == intent.name);
        match &intent.scale {
            ScaleState::Keep {
                initial,
                pods,
                ready,
            } => {
                let status =
                    autoscaling::scale_status(&plan_name, &intent.component, *pods, *ready);
                match cached_scale {
                    None if deleting => {}
                    None => {
                        let desired = autoscaling::scale(
                            meta(plan, &intent.name, labels(&plan_name, &intent.component)),
                            *initial,
                        );
                        match write(&scale_api, "ComponentScale", &desired, None, &uid).await {
                            Ok(true) => ctx.metrics.write("apply"),
                            Ok(false) => {}
                            Err(a) => return a,
                        }
                    }
                    Some(s) if s.status.as_ref() != Some(&status) => {
                        let patch = serde_json::json!({ "status": status });
                        match scale_api
                            .patch_status(
                                &intent.name,
                                &PatchParams::default(),
                                &Patch::Merge(&patch),
                            )
                            .await
                        {
                            Ok(_) => ctx.metrics.write("apply"),
                            Err(e) if is_not_found(&e) => {}
                            Err(e) => {
                                warn!(scale = %intent.name, error = %e, "ComponentScale status write failed");
                                return failed("ComponentScale", &intent.name, &e);
                            }
                        }
                    }
                    Some(_) => {}
                }
            }
            ScaleState::Delete => {
                if cached_scale.is_some()
                    && let Err(a) = delete(ctx, &scale_api, "ComponentScale", &intent.name).await
                {
                    return a;
                }
            }
        }
        let cached_hpa = hpas.iter().find(|h| h.name_any() == intent.name);
        let spec = match &intent.autoscaler {
            AutoscalerIntent::Apply(spec) => Some(spec),
            AutoscalerIntent::CreateOnly(spec) if cached_hpa.is_none() => Some(spec),
            AutoscalerIntent::CreateOnly(_) | AutoscalerIntent::Keep => None,
            AutoscalerIntent::Delete => {
                if cached_hpa.is_some()
                    && let Err(a) =
                        delete(ctx, &hpa_api, "HorizontalPodAutoscaler", &intent.name).await
                {
                    return a;
                }
                None
            }
        };
        let Some(spec) = spec else { continue };
        if deleting && cached_hpa.is_none() {
            continue;
        }
        let desired = autoscaling::hpa(
            meta(plan, &intent.name, labels(&plan_name, &intent.component)),
            spec,
        );
        match write(
            &hpa_api,
            "HorizontalPodAutoscaler",
            &desired,
            cached_hpa,
            &uid,
        )
        .await
        {
            Ok(true) => ctx.metrics.write("apply"),
            Ok(false) => {}
            Err(a) => return a,
        }
    }
    Acted::Done
}

/// Deletes one object the plan owns; gone already is done.
async fn delete<K>(ctx: &Context, api: &Api<K>, kind: &'static str, name: &str) -> Result<(), Acted>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    info!(kind, name, "deleting");
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {
            ctx.metrics.write("delete");
            Ok(())
        }
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(failed(kind, name, &e)),
    }
}

/// What of an HPA its plan reads: its spec (compared before a write) and why
/// it cannot scale. Its status changes at each sync of the HPA controller
/// (metric values, times); those changes need no reconcile.
fn read_of(h: &HorizontalPodAutoscaler) -> (String, Option<String>) {
    (
        serde_json::to_string(&h.spec).unwrap_or_default(),
        h.status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .and_then(hpa_message),
    )
}

/// Whether an HPA's watch event should wake its plan: when what the plan
/// reads of it changed, or it is gone from the cache (deleted: the plan may
/// recreate it). `cache` is the cache the watch fills before this runs.
pub(crate) fn hpa_changed(
    cache: PlanCache<HorizontalPodAutoscaler>,
) -> impl FnMut(&HorizontalPodAutoscaler) -> bool + Send + 'static {
    let mut seen: HashMap<(String, String), (String, Option<String>)> = HashMap::new();
    move |h| {
        let key = (h.namespace().unwrap_or_default(), h.name_any());
        if cache.get(&key.0, &key.1).is_none() {
            seen.remove(&key);
            return true;
        }
        let read = read_of(h);
        seen.insert(key, read.clone()).as_ref() != Some(&read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::autoscaling::v2::{
        HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerStatus,
    };
    use kube::runtime::watcher;

    fn hpa(max: i32, current: i32, limited: bool) -> HorizontalPodAutoscaler {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "shop-web", "namespace": "ns",
                "labels": {"releaseplan.io/plan": "shop", "releaseplan.io/component": "web"}},
            "spec": {"maxReplicas": max,
                "scaleTargetRef": {"kind": "ComponentScale", "name": "shop-web"}},
            "status": {"currentReplicas": current, "desiredReplicas": current}
        }))
        .map(|mut h: HorizontalPodAutoscaler| {
            if limited {
                h.status = Some(HorizontalPodAutoscalerStatus {
                    conditions: Some(vec![HorizontalPodAutoscalerCondition {
                        type_: "ScalingLimited".into(),
                        status: "True".into(),
                        reason: Some("TooManyReplicas".into()),
                        ..Default::default()
                    }]),
                    ..h.status.unwrap_or_default()
                });
            }
            h
        })
        .unwrap()
    }

    #[test]
    fn an_hpa_wakes_its_plan_only_when_what_the_plan_reads_changes() {
        let cache = PlanCache::default();
        let mut writer = cache.writer();
        let mut changed = hpa_changed(cache.clone());
        let mut see = |h: HorizontalPodAutoscaler| {
            writer.apply(&watcher::Event::Apply(h.clone()));
            changed(&h)
        };
        assert!(see(hpa(5, 2, false)), "first seen");
        assert!(!see(hpa(5, 3, false)), "a status sync alone");
        assert!(see(hpa(5, 3, true)), "now limited");
        assert!(see(hpa(6, 3, true)), "its spec changed");
        assert!(!see(hpa(6, 4, true)));
        // Deleted: gone from the cache, the plan is woken.
        let h = hpa(6, 4, true);
        writer.apply(&watcher::Event::Delete(h.clone()));
        assert!(changed(&h));
    }
}
