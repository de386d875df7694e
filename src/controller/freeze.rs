//! The controller's side of `ReleaseFreeze`: a cached watch of the freezes
//! and of the namespaces' labels (metadata only), read by `observe` to hand
//! the core the freezes that select a plan, never with a request to the API
//! server on the way. Whether a freeze is in force is the core's call, at
//! `obs.now` (`releaseplan_core::plan::windows`).

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
use crate::api::window::ReleaseFreeze;
use crate::gates::policy::selects;
use crate::ops::liveness::Liveness;
use crate::plan::windows::Freeze;

/// The cached freezes and namespaces; `None` when the cluster does not serve
/// ReleaseFreezes (no freeze applies then).
#[derive(Clone, Default)]
pub struct FreezeCaches {
    watched: Option<Watched>,
}

#[derive(Clone)]
struct Watched {
    freezes: Store<ReleaseFreeze>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    freezes_listed: Arc<AtomicBool>,
    namespaces_listed: Arc<AtomicBool>,
}

impl FreezeCaches {
    /// No freezes (the CRD is not installed, or tests without a cluster).
    pub fn none() -> FreezeCaches {
        FreezeCaches::default()
    }

    /// Whether the first lists are in (an empty cache before that would let
    /// a frozen plan start its rollout).
    pub fn synced(&self) -> bool {
        self.watched.as_ref().is_none_or(|w| {
            w.freezes_listed.load(Ordering::Acquire) && w.namespaces_listed.load(Ordering::Acquire)
        })
    }

    /// The freezes whose selectors select a plan of `namespace` with
    /// `labels`, as cached now. A selector that cannot be evaluated (an
    /// unknown operator) selects: a freeze fails closed.
    pub fn for_plan(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<Freeze> {
        let Some(w) = &self.watched else {
            return Vec::new();
        };
        let ns_labels = w
            .namespaces
            .get(&ObjectRef::new(namespace))
            .map(|n| n.labels().clone())
            .unwrap_or_default();
        w.freezes
            .state()
            .iter()
            .filter(|f| {
                selects(f.spec.namespace_selector.as_ref(), &ns_labels).unwrap_or(true)
                    && selects(f.spec.selector.as_ref(), labels).unwrap_or(true)
            })
            .map(|f| Freeze {
                name: f.name_any(),
                start: f.spec.start,
                end: f.spec.end,
                reason: f.spec.reason.clone(),
            })
            .collect()
    }
}

/// Watches ReleaseFreezes and namespaces (labels only) when the cluster
/// serves ReleaseFreezes; with `--namespace`, only that namespace. Without
/// the CRD nothing is watched and no freeze applies (logged once; restart the
/// operator after installing the CRD). A freeze that appears, changes or goes
/// wakes every plan (freezes are few and change rarely); a namespace's
/// labels, the plans of that namespace.
pub async fn watch(
    client: &Client,
    ns: Option<&str>,
    liveness: &Arc<Liveness>,
    plans: Store<CachedPlan>,
) -> (FreezeCaches, BoxStream<'static, ObjectRef<ReleasePlan>>) {
    let api: Api<ReleaseFreeze> = Api::all(client.clone());
    if !super::watches::optional_kind_served(&api, "ReleaseFreezes").await {
        return (FreezeCaches::none(), futures::stream::empty().boxed());
    }
    let (freezes, freeze_writer) = reflector::store();
    let (namespaces, namespace_writer) = reflector::store();
    let freezes_listed = Arc::new(AtomicBool::new(false));
    let namespaces_listed = Arc::new(AtomicBool::new(false));
    let freeze_stream = watcher(api, watcher::Config::default().any_semantic())
        .backoff(watch_backoff())
        .inspect(watched::<ReleaseFreeze, _>(liveness))
        .modify(|f: &mut ReleaseFreeze| f.managed_fields_mut().clear())
        .reflect(freeze_writer)
        .inspect(listed(&freezes_listed));
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
    .inspect(listed(&namespaces_listed));
    let freeze_wakes = freeze_stream
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
    let caches = FreezeCaches {
        watched: Some(Watched {
            freezes,
            namespaces,
            freezes_listed,
            namespaces_listed,
        }),
    };
    (
        caches,
        futures::stream::select(freeze_wakes, namespace_wakes).boxed(),
    )
}

/// Sets `flag` once the watch's first list is in.
fn listed<K>(
    flag: &Arc<AtomicBool>,
) -> impl Fn(&Result<watcher::Event<K>, watcher::Error>) + use<K> {
    let flag = Arc::clone(flag);
    move |e| {
        if matches!(e, Ok(watcher::Event::InitDone)) {
            flag.store(true, Ordering::Release);
        }
    }
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
