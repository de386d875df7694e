//! The controller's side of `GatePolicy`: cached watches of the policies
//! and of the namespaces' labels (metadata only), read by the gate runner
//! before each call and by the traffic writer before each route write,
//! never with a request to the API server on the way (see
//! `releaseplan_core::gates::policy` for the rules).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use super::watches::{watch_backoff, watched};
use crate::api::ReleasePlan;
use crate::api::cached::CachedPlan;
use crate::api::policy::GatePolicy;
use crate::gates::policy::{Mode, Named, NamespacePolicy};
use crate::ops::liveness::Liveness;

/// The cached policies and namespaces, and the operator's `--gate-policy` mode.
#[derive(Clone)]
pub struct PolicyCaches {
    mode: Mode,
    /// None when the cluster does not serve GatePolicies (nothing is watched).
    watched: Option<Watched>,
}

#[derive(Clone)]
struct Watched {
    policies: Store<GatePolicy>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    policies_listed: Arc<AtomicBool>,
    namespaces_listed: Arc<AtomicBool>,
}

impl PolicyCaches {
    /// No policies at all (the CRD is not installed, or tests without a cluster).
    pub fn none(mode: Mode) -> PolicyCaches {
        PolicyCaches {
            mode,
            watched: None,
        }
    }

    /// Whether the first lists are in (an empty cache before that would
    /// read as "no policy": open, in the optional mode).
    pub fn synced(&self) -> bool {
        self.watched.as_ref().is_none_or(|w| {
            w.policies_listed.load(Ordering::Acquire) && w.namespaces_listed.load(Ordering::Acquire)
        })
    }

    /// The policies that govern `namespace`, as cached now; `None` until
    /// the caches are listed.
    pub fn for_namespace(&self, namespace: &str) -> Option<NamespacePolicy> {
        if !self.synced() {
            return None;
        }
        let Some(w) = &self.watched else {
            return Some(NamespacePolicy::select(
                namespace,
                &BTreeMap::new(),
                &[],
                self.mode,
            ));
        };
        let all: Vec<Named> = w
            .policies
            .state()
            .iter()
            .map(|p| Named {
                name: p.name_any(),
                spec: p.spec.clone(),
            })
            .collect();
        let labels = w
            .namespaces
            .get(&ObjectRef::new(namespace))
            .map(|n| n.labels().clone())
            .unwrap_or_default();
        Some(NamespacePolicy::select(namespace, &labels, &all, self.mode))
    }
}

/// Watches GatePolicies and namespaces (labels only) when the cluster
/// serves GatePolicies; with `--namespace`, only that namespace. Without the
/// CRD nothing is watched: in the optional mode every namespace is then
/// open, in the required mode every one is refused everything.
pub async fn watch(
    client: &Client,
    ns: Option<&str>,
    mode: Mode,
    liveness: &Arc<Liveness>,
    plans: Store<CachedPlan>,
) -> (PolicyCaches, BoxStream<'static, ObjectRef<ReleasePlan>>) {
    let api: Api<GatePolicy> = Api::all(client.clone());
    if !super::watches::optional_kind_served(&api, "GatePolicies").await {
        return (PolicyCaches::none(mode), futures::stream::empty().boxed());
    }
    let (policies, policy_writer) = reflector::store();
    let (namespaces, namespace_writer) = reflector::store();
    let policies_listed = Arc::new(AtomicBool::new(false));
    let namespaces_listed = Arc::new(AtomicBool::new(false));
    let policy_stream = watcher(api, watcher::Config::default().any_semantic())
        .backoff(watch_backoff())
        .inspect(watched::<GatePolicy, _>(liveness))
        .modify(|p: &mut GatePolicy| p.managed_fields_mut().clear())
        .reflect(policy_writer)
        .inspect({
            let flag = Arc::clone(&policies_listed);
            move |e| {
                if matches!(e, Ok(watcher::Event::InitDone)) {
                    flag.store(true, Ordering::Release);
                }
            }
        });
    let config = match ns {
        Some(ns) => watcher::Config::default().fields(&format!("metadata.name={ns}")),
        None => watcher::Config::default(),
    };
    let namespace_stream = watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        config.any_semantic(),
    )
    .backoff(watch_backoff())
    .inspect(watched::<Namespace, _>(liveness))
    .modify(|n: &mut PartialObjectMeta<Namespace>| {
        // Only the labels are read.
        n.metadata.managed_fields = None;
        n.metadata.annotations = None;
    })
    .reflect(namespace_writer)
    .inspect({
        let flag = Arc::clone(&namespaces_listed);
        move |e| {
            if matches!(e, Ok(watcher::Event::InitDone)) {
                flag.store(true, Ordering::Release);
            }
        }
    });
    // A policy that changes may allow or refuse any plan's calls and
    // routes: every plan is woken (policies are few and change rarely). A
    // namespace's labels: the plans of that namespace.
    let policy_wakes = policy_stream
        .touched_objects()
        .filter_map(super::watches::ok_only)
        .flat_map({
            let plans = plans.clone();
            move |_| futures::stream::iter(plans_in(&plans, None))
        });
    let namespace_wakes = namespace_stream
        .touched_objects()
        .filter_map(super::watches::ok_only)
        .flat_map(move |n| {
            let refs = n.map_or_else(|_| Vec::new(), |n| plans_in(&plans, Some(&n.name_any())));
            futures::stream::iter(refs)
        });
    let caches = PolicyCaches {
        mode,
        watched: Some(Watched {
            policies,
            namespaces,
            policies_listed,
            namespaces_listed,
        }),
    };
    (
        caches,
        futures::stream::select(policy_wakes, namespace_wakes).boxed(),
    )
}

/// The cached plans, of one namespace or of all.
fn plans_in(plans: &Store<CachedPlan>, ns: Option<&str>) -> Vec<ObjectRef<ReleasePlan>> {
    plans
        .state()
        .iter()
        .filter(|p| ns.is_none_or(|ns| p.namespace().as_deref() == Some(ns)))
        .map(|p| ObjectRef::new(&p.name_any()).within(&p.namespace().unwrap_or_default()))
        .collect()
}
