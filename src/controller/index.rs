//! Caches of the objects made for plans, indexed by plan.
//!
//! kube-runtime's reflector `Store` is a flat map: finding one plan's
//! Deployments, pods or ControllerRevisions means scanning (and cloning the
//! `Arc`s of) every cached object, so the cost of a reconcile grew with the
//! number of plans. kube-runtime (5.0) has no secondary index, so this cache
//! takes the reflector's place for the label-selected watches: it applies the
//! same watcher events (including the relist buffering of `Init` …
//! `InitDone`), and keeps the objects grouped by (namespace, plan label), so a
//! reconcile reads its own plan's objects only.

use crate::api::LABEL_PLAN;
use crate::api::cached::Labelled;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// (namespace, plan name): the key objects are grouped by.
type PlanKey = (String, String);
/// (namespace, object name): what identifies one cached object.
type ObjKey = (String, String);

/// The cached objects, grouped by the plan their label names.
struct Index<K> {
    /// Objects of each plan, sorted by name (so reads are deterministic). A
    /// plan has a handful: a sorted `Vec` of them costs a tenth of the first
    /// node of a `BTreeMap` keyed by name.
    by_plan: HashMap<PlanKey, Vec<Arc<K>>>,
    /// The plan each cached object is filed under (in the object's own
    /// namespace), to move or drop it when its label changes or it is deleted.
    plan_of: HashMap<ObjKey, Box<str>>,
}

impl<K> Default for Index<K> {
    fn default() -> Self {
        Index {
            by_plan: HashMap::new(),
            plan_of: HashMap::new(),
        }
    }
}

/// The name of a cached object (every object the API server sends has one).
fn name_of<K: Resource>(obj: &K) -> &str {
    obj.meta().name.as_deref().unwrap_or_default()
}

impl<K: Resource + Labelled> Index<K> {
    fn insert(&mut self, obj: Arc<K>) {
        let meta = obj.meta();
        let (Some(ns), Some(name)) = (meta.namespace.clone(), meta.name.clone()) else {
            return;
        };
        let Some(plan) = obj.label(LABEL_PLAN).map(str::to_string) else {
            // Not selected by the watch (no plan label): not ours to keep.
            self.remove(&ns, &name);
            return;
        };
        let obj_key = (ns.clone(), name);
        match self.plan_of.get(&obj_key) {
            Some(old) if **old == *plan => {}
            old => {
                if let Some(old) = old {
                    let old = (ns.clone(), old.to_string());
                    self.drop_from(&old, &obj_key.1);
                }
                self.plan_of
                    .insert(obj_key.clone(), plan.clone().into_boxed_str());
            }
        }
        let objs = self.by_plan.entry((ns, plan)).or_default();
        match objs.binary_search_by(|o| name_of(&**o).cmp(&obj_key.1)) {
            Ok(i) => objs[i] = obj,
            Err(i) => objs.insert(i, obj),
        }
    }

    fn get(&self, ns: &str, name: &str) -> Option<&Arc<K>> {
        let plan = self.plan_of.get(&(ns.to_string(), name.to_string()))?;
        self.by_plan
            .get(&(ns.to_string(), plan.to_string()))?
            .iter()
            .find(|o| name_of(&***o) == name)
    }

    fn remove(&mut self, ns: &str, name: &str) {
        if let Some(plan) = self.plan_of.remove(&(ns.to_string(), name.to_string())) {
            self.drop_from(&(ns.to_string(), plan.into_string()), name);
        }
    }

    fn drop_from(&mut self, key: &PlanKey, name: &str) {
        if let Some(objs) = self.by_plan.get_mut(key) {
            objs.retain(|o| name_of(&**o) != name);
            if objs.is_empty() {
                self.by_plan.remove(key);
            }
        }
    }
}

/// Which changes of a cached object can change what a reconcile of its plan
/// decides: only those wake the plan (the cache takes every change).
pub trait Wakes: Resource + Clone + PartialEq {
    /// Whether `new`, replacing `old` (`None`: a new object), can change a
    /// decision. By default any change but the resourceVersion can.
    fn wakes(old: Option<&Self>, new: &Self) -> bool {
        old.is_none_or(|old| !same_but_version(old, new))
    }

    /// Whether `gone` going away can change a decision.
    fn wakes_when_gone(_gone: &Self) -> bool {
        true
    }
}

/// A pod is read only by the pod checks ([`crate::gates::pods::detect`]):
/// its change wakes its plan only when it changes what they can find. The
/// pods of a rollout that start and run well (most of the pod watch's
/// events) wake nothing; their Deployment's status says they are ready.
impl Wakes for crate::api::cached::CachedPod {
    fn wakes(old: Option<&Self>, new: &Self) -> bool {
        use crate::gates::pods::failure_view;
        // A StatefulSet component's revisions are counted from its pods:
        // one that appears, goes, becomes ready or not, or terminates wakes.
        if new
            .label(releaseplan_core::objects::stateful_set::LABEL_WORKLOAD)
            .is_some()
        {
            return old.is_none_or(|old| {
                old.labels != new.labels
                    || old.status.as_ref().map(|s| s.ready) != new.status.as_ref().map(|s| s.ready)
                    || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
                    || failure_view(old) != failure_view(new)
            });
        }
        let view = failure_view(new);
        match old {
            None => !view.is_empty(),
            Some(old) => {
                let was = failure_view(old);
                !(was.is_empty() && view.is_empty()) && (was != view || old.labels != new.labels)
            }
        }
    }

    fn wakes_when_gone(gone: &Self) -> bool {
        gone.label(releaseplan_core::objects::stateful_set::LABEL_WORKLOAD)
            .is_some()
            || !crate::gates::pods::failure_view(gone).is_empty()
    }
}

// Any change of these but their resourceVersion may change a decision.
impl Wakes for crate::api::cached::CachedDeployment {}
impl Wakes for k8s_openapi::api::apps::v1::StatefulSet {}
impl Wakes for k8s_openapi::api::apps::v1::DaemonSet {}
impl Wakes for crate::api::cached::CachedRevision {}
impl Wakes for crate::api::ComponentScale {}
impl Wakes for k8s_openapi::api::batch::v1::Job {}
impl Wakes for k8s_openapi::api::core::v1::Service {}
impl Wakes for k8s_openapi::api::core::v1::Secret {}
impl Wakes for k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler {}
impl Wakes for crate::api::gateway::HTTPRoute {}
impl Wakes for crate::api::traefik::IngressRoute {}
impl<K: Clone + PartialEq> Wakes for crate::api::config::CachedConfig<K> where
    crate::api::config::CachedConfig<K>: Resource
{
}

/// Whether `old` and `new` are the same object but for their resourceVersion.
fn same_but_version<K: Resource + Clone + PartialEq>(old: &K, new: &K) -> bool {
    if old.meta().resource_version == new.meta().resource_version {
        return old == new;
    }
    let mut old = old.clone();
    old.meta_mut()
        .resource_version
        .clone_from(&new.meta().resource_version);
    old == *new
}

/// A shared, read-mostly cache of label-selected objects, indexed by plan.
/// Cloning gives another handle to the same cache.
pub struct PlanCache<K> {
    index: Arc<RwLock<Index<K>>>,
    /// Set once the first list is in: before that, an empty cache means
    /// "not read yet", not "there are none".
    synced: Arc<AtomicBool>,
    /// The highest resourceVersion among the events applied (0: none). One
    /// watch delivers its events in resourceVersion order, so the cache
    /// holds the effect of every change of its objects up to this version:
    /// a write answered with a version at or below it that the cache does
    /// not show was undone since (deleted, or moved out of the selection).
    seen: Arc<AtomicU64>,
}

impl<K> Clone for PlanCache<K> {
    fn clone(&self) -> Self {
        PlanCache {
            index: Arc::clone(&self.index),
            synced: Arc::clone(&self.synced),
            seen: Arc::clone(&self.seen),
        }
    }
}

impl<K> Default for PlanCache<K> {
    fn default() -> Self {
        PlanCache {
            index: Arc::new(RwLock::new(Index::default())),
            synced: Arc::new(AtomicBool::new(false)),
            seen: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl<K> PlanCache<K> {
    /// A cache with nothing to watch (a kind the cluster does not serve):
    /// synced from the start.
    pub fn empty() -> Self {
        let cache = PlanCache::default();
        cache.synced.store(true, Ordering::Release);
        cache
    }

    /// Whether the first list of the watch is in.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The highest resourceVersion among the events applied: the cache
    /// shows every change of its objects up to it. Read before the objects
    /// it is meant to vouch for.
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::Acquire)
    }
}

impl<K: Resource + Labelled> PlanCache<K> {
    /// The cached objects labelled with plan `plan` in namespace `ns`, by name.
    pub fn of_plan(&self, ns: &str, plan: &str) -> Vec<Arc<K>> {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        index
            .by_plan
            .get(&(ns.to_string(), plan.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    /// The cached object `name` in namespace `ns`, whichever plan it names.
    pub fn get(&self, ns: &str, name: &str) -> Option<Arc<K>> {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        index.get(ns, name).cloned()
    }

    /// Objects cached.
    pub fn len(&self) -> usize {
        self.index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .plan_of
            .len()
    }

    /// Estimated bytes of every cached object ([`Footprint`]).
    pub fn footprint(&self) -> usize
    where
        K: crate::api::cached::Footprint,
    {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        index
            .by_plan
            .values()
            .flatten()
            .map(|o| o.footprint())
            .sum()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The writer: the only one that changes this cache, fed by one watch.
    pub fn writer(&self) -> PlanCacheWriter<K> {
        PlanCacheWriter {
            cache: self.clone(),
            relist: None,
            relist_seen: 0,
        }
    }
}

/// Applies watcher events to a [`PlanCache`], like kube-runtime's reflector
/// `Writer`: a relist (`Init`, `InitApply`…, `InitDone`) is collected aside
/// and swapped in whole, so readers never see a half-filled cache.
pub struct PlanCacheWriter<K> {
    cache: PlanCache<K>,
    relist: Option<Index<K>>,
    /// The highest resourceVersion of the relist being collected.
    relist_seen: u64,
}

impl<K: Labelled + Wakes> PlanCacheWriter<K> {
    /// Applies one watcher event, and says whether it can change what a
    /// reconcile decides ([`Wakes`]). An update that only moved the
    /// resourceVersion (or changed only what the trim drops: a pod's
    /// conditions, IP, timestamps) changes nothing a reconcile reads, so it
    /// need not wake the plan: most of a Deployment's updates while it starts
    /// are such.
    pub fn apply(&mut self, event: &watcher::Event<K>) -> bool {
        let version = |o: &K| super::keys::version_of(o).unwrap_or(0);
        match event {
            watcher::Event::Apply(obj) => {
                let mut index = self.write();
                let meta = obj.meta();
                let wakes = match (meta.namespace.as_deref(), meta.name.as_deref()) {
                    (Some(ns), Some(name)) => K::wakes(index.get(ns, name).map(|o| &**o), obj),
                    _ => true,
                };
                index.insert(Arc::new(obj.clone()));
                drop(index);
                self.cache.seen.fetch_max(version(obj), Ordering::AcqRel);
                return wakes;
            }
            watcher::Event::Delete(obj) => {
                let meta = obj.meta();
                if let (Some(ns), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) {
                    self.write().remove(ns, name);
                }
                self.cache.seen.fetch_max(version(obj), Ordering::AcqRel);
                return K::wakes_when_gone(obj);
            }
            watcher::Event::Init => {
                self.relist = Some(Index::default());
                self.relist_seen = 0;
            }
            watcher::Event::InitApply(obj) => {
                self.relist_seen = self.relist_seen.max(version(obj));
                self.relist
                    .get_or_insert_with(Index::default)
                    .insert(Arc::new(obj.clone()));
            }
            watcher::Event::InitDone => {
                let fresh = self.relist.take().unwrap_or_default();
                // The old index is dropped after the lock is released.
                let _old = std::mem::replace(&mut *self.write(), fresh);
                // Only once swapped in: a relist's objects come by name,
                // not by version.
                self.cache
                    .seen
                    .fetch_max(self.relist_seen, Ordering::AcqRel);
                self.cache.synced.store(true, Ordering::Release);
            }
        }
        true
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Index<K>> {
        self.cache
            .index
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The cached objects of one plan: labelled with its name, and ours or
/// orphaned (no controller): a plan deleted with orphan propagation leaves its
/// objects without owner, and a plan of the same name adopts them.
pub(crate) fn plan_objects<K: Resource + Labelled>(
    cache: &PlanCache<K>,
    ns: &str,
    plan: &str,
    uid: &str,
) -> Vec<Arc<K>> {
    cache
        .of_plan(ns, plan)
        .into_iter()
        .filter(|o| {
            let refs = o.owner_references();
            refs.iter().any(|r| r.uid == uid) || !refs.iter().any(|r| r.controller == Some(true))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::json;

    impl Wakes for Deployment {}

    fn deployment(ns: &str, name: &str, plan: Option<&str>) -> Deployment {
        let mut v = json!({"metadata": {"name": name, "namespace": ns}});
        if let Some(p) = plan {
            v["metadata"]["labels"] = json!({LABEL_PLAN: p});
        }
        serde_json::from_value(v).unwrap()
    }

    fn names(objs: &[Arc<Deployment>]) -> Vec<String> {
        objs.iter()
            .map(|d| d.metadata.name.clone().unwrap())
            .collect()
    }

    #[test]
    fn returns_only_the_objects_of_one_plan() {
        let cache = PlanCache::default();
        let mut w = cache.writer();
        w.apply(&watcher::Event::Apply(deployment(
            "a",
            "shop-web-1",
            Some("shop"),
        )));
        w.apply(&watcher::Event::Apply(deployment(
            "a",
            "shop-web-2",
            Some("shop"),
        )));
        w.apply(&watcher::Event::Apply(deployment(
            "a",
            "cart-web-1",
            Some("cart"),
        )));
        // The same plan name in another namespace is another plan.
        w.apply(&watcher::Event::Apply(deployment(
            "b",
            "shop-web-1",
            Some("shop"),
        )));
        assert_eq!(
            names(&cache.of_plan("a", "shop")),
            ["shop-web-1", "shop-web-2"]
        );
        assert_eq!(names(&cache.of_plan("a", "cart")), ["cart-web-1"]);
        assert_eq!(names(&cache.of_plan("b", "shop")), ["shop-web-1"]);
        assert!(cache.of_plan("a", "none").is_empty());
        assert_eq!(cache.len(), 4);
        assert!(cache.get("b", "shop-web-1").is_some());
        assert!(cache.get("b", "shop-web-2").is_none());
    }

    #[test]
    fn a_pod_wakes_its_plan_only_when_the_pod_checks_can_find_something_new() {
        use crate::api::cached::CachedPod;
        let cache = PlanCache::<CachedPod>::default();
        let mut w = cache.writer();
        let pod = |name: &str, rv: &str, containers: serde_json::Value| -> CachedPod {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "a", "resourceVersion": rv,
                             "labels": {LABEL_PLAN: "shop"}},
                "status": {"containerStatuses": containers},
            }))
            .unwrap()
        };
        let app = |ready: bool, restarts: i32, waiting: Option<&str>| {
            let state = match waiting {
                Some(reason) => json!({"waiting": {"reason": reason}}),
                None => json!({"running": {}}),
            };
            json!([{"name": "app", "ready": ready, "restartCount": restarts, "state": state}])
        };
        let apply =
            |w: &mut PlanCacheWriter<CachedPod>, p: CachedPod| w.apply(&watcher::Event::Apply(p));
        // One pod's updates, in order: (resourceVersion, containers, wakes, what).
        let steps = [
            ("1", json!([]), false, "a pod appearing"),
            (
                "2",
                app(false, 0, Some("ContainerCreating")),
                false,
                "a container being created",
            ),
            ("3", app(true, 0, None), false, "ready"),
            ("4", app(true, 1, None), true, "a restart"),
            (
                "5",
                app(false, 1, Some("CrashLoopBackOff")),
                true,
                "a crash loop",
            ),
            (
                "6",
                app(false, 1, Some("CrashLoopBackOff")),
                false,
                "nothing new",
            ),
        ];
        for (rv, containers, wakes, what) in steps {
            assert_eq!(apply(&mut w, pod("web-1", rv, containers)), wakes, "{what}");
            // The cache has every version all the same.
            let cached = cache.get("a", "web-1").unwrap();
            assert_eq!(cached.metadata.resource_version.as_deref(), Some(rv));
        }
        let failing = pod("web-1", "6", app(false, 1, Some("CrashLoopBackOff")));
        assert!(
            w.apply(&watcher::Event::Delete(failing)),
            "a failing pod going"
        );
        let healthy = pod("web-2", "7", app(true, 0, None));
        assert!(!apply(&mut w, healthy.clone()));
        assert!(
            !w.apply(&watcher::Event::Delete(healthy)),
            "a healthy pod going"
        );
        assert_eq!(cache.len(), 0);
        // Born failing: it wakes.
        assert!(apply(
            &mut w,
            pod("web-3", "8", app(false, 0, Some("ErrImagePull")))
        ));
    }

    #[test]
    fn an_update_of_only_the_resource_version_changes_nothing_readers_see() {
        let cache = PlanCache::default();
        let mut w = cache.writer();
        let at = |rv: &str, replicas: i32| {
            let mut d = deployment("a", "shop-web-1", Some("shop"));
            d.metadata.resource_version = Some(rv.into());
            d.spec = Some(k8s_openapi::api::apps::v1::DeploymentSpec {
                replicas: Some(replicas),
                ..Default::default()
            });
            d
        };
        assert!(w.apply(&watcher::Event::Apply(at("1", 2))), "a new object");
        assert!(
            !w.apply(&watcher::Event::Apply(at("2", 2))),
            "only the version moved"
        );
        // The cache has the newer version all the same.
        let cached = cache.get("a", "shop-web-1").unwrap();
        assert_eq!(cached.metadata.resource_version.as_deref(), Some("2"));
        assert!(
            w.apply(&watcher::Event::Apply(at("3", 3))),
            "the spec changed"
        );
        let mut relabelled = at("4", 3);
        relabelled.metadata.labels = Some([(LABEL_PLAN.to_string(), "cart".to_string())].into());
        assert!(
            w.apply(&watcher::Event::Apply(relabelled)),
            "moved to another plan"
        );
        assert!(w.apply(&watcher::Event::Delete(at("5", 3))), "a delete");
    }

    #[test]
    fn keeps_a_plans_objects_sorted_by_name_and_one_per_name() {
        let cache = PlanCache::default();
        let mut w = cache.writer();
        for name in ["shop-web-c", "shop-web-a", "shop-web-b", "shop-web-a"] {
            w.apply(&watcher::Event::Apply(deployment("a", name, Some("shop"))));
        }
        assert_eq!(
            names(&cache.of_plan("a", "shop")),
            ["shop-web-a", "shop-web-b", "shop-web-c"]
        );
        assert_eq!(cache.len(), 3);
        w.apply(&watcher::Event::Delete(deployment(
            "a",
            "shop-web-b",
            Some("shop"),
        )));
        assert_eq!(
            names(&cache.of_plan("a", "shop")),
            ["shop-web-a", "shop-web-c"]
        );
        assert!(cache.get("a", "shop-web-c").is_some());
        assert!(cache.get("a", "shop-web-b").is_none());
    }

    #[test]
    fn follows_relabels_and_deletes() {
        let cache = PlanCache::default();
        let mut w = cache.writer();
        w.apply(&watcher::Event::Apply(deployment("a", "d", Some("shop"))));
        w.apply(&watcher::Event::Apply(deployment("a", "d", Some("cart"))));
        assert!(cache.of_plan("a", "shop").is_empty());
        assert_eq!(names(&cache.of_plan("a", "cart")), ["d"]);
        // The label removed: the object leaves the cache.
        w.apply(&watcher::Event::Apply(deployment("a", "d", None)));
        assert!(cache.is_empty());
        w.apply(&watcher::Event::Apply(deployment("a", "d", Some("cart"))));
        // A delete carries the last state; the filing is what counts.
        w.apply(&watcher::Event::Delete(deployment("a", "d", Some("shop"))));
        assert!(cache.of_plan("a", "cart").is_empty());
        assert!(cache.is_empty());
        assert!(cache.index.read().unwrap().by_plan.is_empty());
    }

    #[test]
    fn a_relist_replaces_the_cache_at_its_end() {
        let cache = PlanCache::default();
        let mut w = cache.writer();
        w.apply(&watcher::Event::Apply(deployment("a", "old", Some("shop"))));
        w.apply(&watcher::Event::Init);
        w.apply(&watcher::Event::InitApply(deployment(
            "a",
            "new",
            Some("shop"),
        )));
        // Until the relist ends, readers see the previous state.
        assert_eq!(names(&cache.of_plan("a", "shop")), ["old"]);
        assert!(!cache.synced(), "synced only once a first list is in");
        w.apply(&watcher::Event::InitDone);
        assert!(cache.synced());
        assert!(PlanCache::<Deployment>::empty().synced());
        assert_eq!(names(&cache.of_plan("a", "shop")), ["new"]);
        assert!(cache.get("a", "old").is_none());
    }
}
