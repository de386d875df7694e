//! The controller's side of gate templates: cached watches of GateTemplates
//! and ClusterGateTemplates, the templates a plan refers to as observed (read
//! from the caches, never from the API server during a reconcile), and which
//! plans a template's change wakes.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use super::watches::{ok_only, scoped, watch_backoff, watched};
use crate::api::ReleasePlan;
use crate::api::cached::CachedPlan;
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
                let (generation, spec, lists_namespace) = match r.template_ref.kind {
                    TemplateKind::GateTemplate => {
                        let t = self.namespaced.get(&ObjectRef::new(name).within(ns))?;
                        (t.metadata.generation, t.spec.clone(), false)
                    }
                    TemplateKind::ClusterGateTemplate => {
                        let t = self.cluster.get(&ObjectRef::new(name))?;
                        // One the namespace may not use reads as missing.
                        if !releaseplan_core::gates::access::cluster_template_admits(
                            t.metadata.annotations.as_ref(),
                            ns,
                        ) {
                            return None;
                        }
                        (
                            t.metadata.generation,
                            GateTemplateSpec::from(t.spec.clone()),
                            crate::gates::template::lists_namespace(
                                t.metadata.annotations.as_ref(),
                                ns,
                            ),
                        )
                    }
                };
                Some(ObservedTemplate {
                    kind: r.template_ref.kind,
                    name: name.clone(),
                    generation,
                    spec,
                    lists_namespace,
                })
            })
            .collect()
    }
}

/// The plans of `plans` that refer to the template `kind`/`name` (a
/// GateTemplate only from its own namespace `ns`; a ClusterGateTemplate from
/// any).
pub fn plans_referring(
    plans: &Store<CachedPlan>,
    kind: TemplateKind,
    ns: Option<&str>,
    name: &str,
) -> Vec<ObjectRef<ReleasePlan>> {
    let ns = if kind == TemplateKind::ClusterGateTemplate {
        None
    } else {
        Some(ns.unwrap_or_default())
    };
    super::watches::plans_naming(plans, ns, name, |p| {
        p.spec
            .health
            .template_refs()
            .iter()
            .any(|t| t.template_ref.kind == kind && t.template_ref.name == name)
    })
}

/// Watches both template kinds into their caches; the stream yields the plans
/// each change wakes.
pub fn watch(
    client: &Client,
    ns: Option<&str>,
    liveness: &Arc<Liveness>,
    plans: Store<CachedPlan>,
) -> (
    TemplateCaches,
    impl Stream<Item = ObjectRef<ReleasePlan>> + Send + 'static,
) {
    let (namespaced, ns_writer) = reflector::store();
    let (cluster, cluster_writer) = reflector::store();
    let ns_stream = template_watch(
        scoped::<GateTemplate>(client, ns),
        TemplateKind::GateTemplate,
        ns_writer,
        plans.clone(),
        liveness,
    );
    let cluster_stream = template_watch(
        Api::<ClusterGateTemplate>::all(client.clone()),
        TemplateKind::ClusterGateTemplate,
        cluster_writer,
        plans,
        liveness,
    );
    (
        TemplateCaches {
            namespaced,
            cluster,
        },
        futures::stream::select(ns_stream, cluster_stream),
    )
}

/// A cached watch of one template kind (managedFields dropped), and the
/// stream of the plans each change wakes. A cluster-scoped template has no
/// namespace, which [`plans_referring`] reads as "plans of any namespace".
fn template_watch<K>(
    api: Api<K>,
    kind: TemplateKind,
    writer: reflector::store::Writer<K>,
    plans: Store<CachedPlan>,
    liveness: &Arc<Liveness>,
) -> impl Stream<Item = ObjectRef<ReleasePlan>> + Send + 'static
where
    K: super::watches::Watched,
{
    watcher(api, watcher::Config::default().any_semantic())
        .backoff(watch_backoff())
        .inspect(watched::<K, _>(liveness))
        .modify(|t: &mut K| t.managed_fields_mut().clear())
        .reflect(writer)
        .touched_objects()
        .filter_map(ok_only)
        .flat_map(move |t| {
            let refs = t.map_or_else(
                |_| Vec::new(),
                |t| plans_referring(&plans, kind, t.namespace().as_deref(), &t.name_any()),
            );
            futures::stream::iter(refs)
        })
}
