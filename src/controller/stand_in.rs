//! The answers to this process's own Deployment applies, standing in for
//! the cache until its watch delivers them: what observe reads and act
//! keeps, below both.

use super::context::Context;
use super::keys::version_of;
use crate::api::ReleasePlan;
use crate::api::cached::CachedDeployment;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the answer to a Deployment apply stands in for the cache at
/// most. It goes sooner, as soon as the watch has delivered its version
/// ([`latest_deployments`]): well under a second, or many seconds in a
/// burst of thousands of writes. This bound matters only when that watch
/// stops delivering, and then at worst the write is made once more, which
/// changes nothing.
pub(crate) const STAND_IN_TTL: Duration = Duration::from_secs(60);

/// The plan's Deployments as last seen: the cache's, each replaced by the
/// answer to this process's own apply while the cache has not caught up with
/// it, and those applied but not cached yet added. Without this, a reconcile
/// woken right after an apply (by the status write that followed it) finds
/// the old or no Deployment and applies it again.
///
/// An answer goes when the Deployment watch has delivered its version: then
/// the cache is the truth, and one that the cache lacks was deleted (before
/// or after its first watch event), to be created again. A lagging watch
/// (a burst at a cold start) keeps it standing in for as long as it lags,
/// up to [`STAND_IN_TTL`]. Also returns, when an answer stands in for a
/// Deployment the cache does not hold, how long until it expires (the
/// reconcile comes back then, should no watch event wake it first).
/// `seen` is the Deployment cache's [`PlanCache::seen`], read before
/// `cached` was.
pub(crate) fn latest_deployments(
    ctx: &Context,
    key: &ObjectRef<ReleasePlan>,
    seen: u64,
    cached: Vec<Arc<CachedDeployment>>,
) -> (Vec<Arc<CachedDeployment>>, Option<Duration>) {
    ctx.memory.with(key, |m| {
        stand_in_deployments(seen, &mut m.written_deployments, cached)
    })
}

/// [`latest_deployments`] on the written answers kept for one plan.
pub(crate) fn stand_in_deployments(
    seen: u64,
    written: &mut BTreeMap<String, (Instant, Arc<CachedDeployment>)>,
    mut cached: Vec<Arc<CachedDeployment>>,
) -> (Vec<Arc<CachedDeployment>>, Option<Duration>) {
    let mut stand_in: Option<Duration> = None;
    written.retain(|name, (at, written)| {
        let Some(left) = STAND_IN_TTL.checked_sub(at.elapsed()) else {
            return false;
        };
        let written_version = version_of(&**written);
        // The watch has delivered the write (and whatever came after it).
        if written_version.is_some_and(|v| v <= seen) {
            return false;
        }
        match cached.iter_mut().find(|d| d.name_any() == *name) {
            // The cache has it (or newer): the answer is no longer needed.
            Some(c) if version_of(&**c) >= written_version => false,
            Some(c) => {
                *c = Arc::clone(written);
                true
            }
            None => {
                cached.push(Arc::clone(written));
                stand_in = Some(stand_in.map_or(left, |s| s.min(left)));
                true
            }
        }
    });
    (cached, stand_in)
}

#[cfg(test)]
mod tests {
    use super::super::index::PlanCache;
    use super::*;
    use kube::runtime::watcher;

    fn deployment(name: &str, version: u64) -> Arc<CachedDeployment> {
        let d: CachedDeployment = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": version.to_string(),
                         "labels": {"releaseplan.io/plan": "shop"}},
        }))
        .unwrap();
        Arc::new(d)
    }

    fn versions(ds: &[Arc<CachedDeployment>]) -> Vec<(String, String)> {
        ds.iter()
            .map(|d| (d.name_any(), d.resource_version().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn an_applied_deployment_stands_in_until_its_watch_has_delivered_its_version() {
        let cache = PlanCache::<CachedDeployment>::default();
        let mut writer = cache.writer();
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply((*deployment("old", 5)).clone()));
        writer.apply(&watcher::Event::InitDone);
        let mut written = BTreeMap::new();
        // Applied long enough ago that a fixed 10 s would have dropped them.
        let at = Instant::now() - Duration::from_secs(15);
        written.insert("old".to_string(), (at, deployment("old", 7)));
        written.insert("new".to_string(), (at, deployment("new", 8)));

        // The watch lags: both answers stand in, the new one for a while.
        let (seen, stand_in) =
            stand_in_deployments(cache.seen(), &mut written, vec![deployment("old", 5)]);
        assert_eq!(
            versions(&seen),
            [("old".into(), "7".into()), ("new".into(), "8".into())]
        );
        let left = stand_in.unwrap();
        assert!(left > Duration::from_secs(40) && left <= STAND_IN_TTL - Duration::from_secs(15));

        // The watch delivers "old" at 7: its answer goes, "new" still stands in.
        writer.apply(&watcher::Event::Apply((*deployment("old", 7)).clone()));
        let (seen, _) =
            stand_in_deployments(cache.seen(), &mut written, vec![deployment("old", 7)]);
        assert_eq!(
            versions(&seen),
            [("old".into(), "7".into()), ("new".into(), "8".into())]
        );
        assert_eq!(written.len(), 1);

        // Then a later event (of another object): "new" was deleted before
        // the cache ever held it, so the cache is the truth again.
        writer.apply(&watcher::Event::Apply((*deployment("other", 9)).clone()));
        let (seen, stand_in) =
            stand_in_deployments(cache.seen(), &mut written, vec![deployment("old", 7)]);
        assert_eq!(versions(&seen), [("old".into(), "7".into())]);
        assert!(stand_in.is_none() && written.is_empty());

        // Past the bound an answer goes, lagging watch or not.
        let long_ago = Instant::now() - STAND_IN_TTL - Duration::from_secs(1);
        written.insert("late".to_string(), (long_ago, deployment("late", 20)));
        let (seen, _) = stand_in_deployments(cache.seen(), &mut written, Vec::new());
        assert!(seen.is_empty() && written.is_empty());
    }
}
