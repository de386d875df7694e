//! The controller's side of gate templates: cached watches of GateTemplates
//! and ClusterGateTemplates, the templates a plan refers to as observed (read
//! from the caches, never from the API server during a reconcile), and which
//! plans a template's change wakes.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use super::{WatchBackoff, ok_only, scoped, watched};
use crate::api::ReleasePlan;
use crate::api::template::{
    ClusterGateTemplate, GateTemplate, GateTemplateRef, GateTemplateSpec, TemplateKind,
};
use crate::gates::template::ObservedTemplate;
use crate::ops::liveness::Liveness;

/// The caches of both template kinds.
#[derive(Clone)]
pub struct TemplateCaches {
    /// GateTemplates of the watched namespace (or of all).
    pub namespaced: Store<GateTemplate>,
    /// ClusterGateTemplates.
    pub cluster: Store<ClusterGateTemplate>,
}

impl TemplateCaches {
    /// The templates `refs` name, as cached now; a missing one is simply
    /// absent (the core says what that means).
    pub fn observe(&self, ns: &str, refs: &[GateTemplateRef]) -> Vec<ObservedTemplate> {
        refs.iter()
            .filter_map(|r| {
                let name = &r.template_ref.name;
                let (generation, spec) = match r.template_ref.kind {
                    TemplateKind::GateTemplate => {
                        let t = self.namespaced.get(&ObjectRef::new(name).within(ns))?;
                        (t.metadata.generation, t.spec.clone())
                    }
                    TemplateKind::ClusterGateTemplate => {
                        let t = self.cluster.get(&ObjectRef::new(name))?;
                        (
                            t.metadata.generation,
                            GateTemplateSpec::from(t.spec.clone()),
                        )
                    }
                };
                Some(ObservedTemplate {
                    kind: r.template_ref.kind,
                    name: name.clone(),
                    generation,
                    spec,
                })
            })
            .collect()
    }
}

/// The plans of `plans` that refer to the template `kind`/`name` (a
/// GateTemplate only from its own namespace `ns`). A scan of the plan cache:
/// template changes are rare, and it never misses a plan not reconciled yet.
pub fn plans_referring(
    plans: &Store<ReleasePlan>,
    kind: TemplateKind,
    ns: Option<&str>,
    name: &str,
) -> Vec<ObjectRef<ReleasePlan>> {
    plans
        .state()
        .iter()
        .filter(|p| {
            (kind == TemplateKind::ClusterGateTemplate || p.namespace().as_deref() == ns)
                && p.spec
                    .health
                    .templates
                    .iter()
                    .any(|t| t.template_ref.kind == kind && t.template_ref.name == name)
        })
        .map(|p| ObjectRef::from_obj(&**p))
        .collect()
}

/// Watches both template kinds into their caches; the stream yields the plans
/// each change wakes.
pub fn watch(
    client: &Client,
    ns: Option<&str>,
    liveness: &Arc<Liveness>,
    plans: Store<ReleasePlan>,
) -> (
    TemplateCaches,
    impl Stream<Item = ObjectRef<ReleasePlan>> + Send + 'static,
) {
    let (namespaced, ns_writer) = reflector::store();
    let (cluster, cluster_writer) = reflector::store();
    let ns_plans = plans.clone();
    let ns_stream = watcher(
        scoped::<GateTemplate>(client, ns),
        watcher::Config::default().any_semantic(),
    )
    .backoff(WatchBackoff::default())
    .inspect(watched(liveness, "GateTemplate"))
    .modify(|t: &mut GateTemplate| t.managed_fields_mut().clear())
    .reflect(ns_writer)
    .touched_objects()
    .filter_map(ok_only)
    .flat_map(move |t| {
        let refs = t.map_or_else(
            |_| Vec::new(),
            |t| {
                plans_referring(
                    &ns_plans,
                    TemplateKind::GateTemplate,
                    t.namespace().as_deref(),
                    &t.name_any(),
                )
            },
        );
        futures::stream::iter(refs)
    });
    let cluster_stream = watcher(
        Api::<ClusterGateTemplate>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    )
    .backoff(WatchBackoff::default())
    .inspect(watched(liveness, "ClusterGateTemplate"))
    .modify(|t: &mut ClusterGateTemplate| t.managed_fields_mut().clear())
    .reflect(cluster_writer)
    .touched_objects()
    .filter_map(ok_only)
    .flat_map(move |t| {
        let refs = t.map_or_else(
            |_| Vec::new(),
            |t| {
                plans_referring(
                    &plans,
                    TemplateKind::ClusterGateTemplate,
                    None,
                    &t.name_any(),
                )
            },
        );
        futures::stream::iter(refs)
    });
    (
        TemplateCaches {
            namespaced,
            cluster,
        },
        futures::stream::select(ns_stream, cluster_stream),
    )
}
