//! The keys the controller files plans under (the plan cache's, the
//! queue's, the metrics') and resourceVersions read as numbers: small pure
//! helpers at the bottom of the controller, so the caches, the queue and
//! the gate runner need not import the context that holds them.

use crate::api::ReleasePlan;
use crate::api::cached::CachedPlan;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

/// A resourceVersion as a number. Versions are opaque to clients, but the
/// API server's are etcd revisions; `None` for one that does not parse, which
/// every comparison takes as "the cache wins" (or "wakes").
pub(crate) fn version_number(version: Option<&str>) -> Option<u64> {
    version.and_then(|v| v.parse::<u64>().ok())
}

/// An object's resourceVersion as a number ([`version_number`]).
pub(crate) fn version_of<K: kube::Resource>(o: &K) -> Option<u64> {
    version_number(o.meta().resource_version.as_deref())
}

/// Whether `a` has a later resourceVersion than `b`; anything that does not
/// parse is taken as not newer, so the cache wins.
pub(crate) fn newer(a: &CachedPlan, b: &CachedPlan) -> bool {
    matches!((version_of(a), version_of(b)), (Some(x), Some(y)) if x > y)
}

/// The key of a cached plan in the maps of the context.
pub(crate) fn key_of(cached: &CachedPlan) -> ObjectRef<ReleasePlan> {
    ObjectRef::new(&cached.name_any()).within(&cached.namespace().unwrap_or_default())
}

/// The key of a plan in the plan cache (and the controller's queue).
pub(crate) fn cached_key(key: &ObjectRef<ReleasePlan>) -> ObjectRef<CachedPlan> {
    ObjectRef::new(&key.name).within(key.namespace.as_deref().unwrap_or_default())
}

/// A plan's key in the metrics: `namespace/name`.
pub(crate) fn metrics_key(plan: &ReleasePlan) -> String {
    format!(
        "{}/{}",
        plan.namespace().unwrap_or_default(),
        plan.name_any()
    )
}
