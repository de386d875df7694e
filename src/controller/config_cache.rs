//! The caches of config released with the code: cached watches of
//! ConfigMaps and Secrets (a digest of each, never a value), the plans'
//! copies by plan, and which plans a change wakes. [`super::config`] reads
//! them for a reconcile.

use super::index::PlanCache;
use super::{ok_only, scoped, watch_backoff, watched};
use crate::api::cached::CachedPlan;
use crate::api::config::{
    ANNOTATION_CONFIG_SOURCE, CachedConfig, CachedConfigMap, CachedSecret, ConfigKind,
};
use crate::api::{LABEL_PLAN, ReleasePlan};
use crate::plan::config::{ConfigObs, references};
use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use std::sync::Arc;

/// The caches of ConfigMaps and Secrets: every object by name (the sources a
/// template names), and the plans' copies by plan.
#[derive(Clone)]
pub struct ConfigCaches {
    /// Every ConfigMap of the watched namespace (or of all).
    pub maps: Store<CachedConfigMap>,
    /// Every Secret of the watched namespace (or of all).
    pub secrets: Store<CachedSecret>,
    /// The copies made for plans, by plan.
    pub map_copies: PlanCache<CachedConfigMap>,
    /// The copies made for plans, by plan.
    pub secret_copies: PlanCache<CachedSecret>,
    /// Config versioning is on (`--config-versioning`).
    pub enabled: bool,
}

impl ConfigCaches {
    /// Caches with nothing watched: config versioning is off, and every
    /// reference is read live.
    pub fn empty() -> Self {
        ConfigCaches {
            maps: reflector::store().0,
            secrets: reflector::store().0,
            map_copies: PlanCache::empty(),
            secret_copies: PlanCache::empty(),
            enabled: false,
        }
    }

    /// Whether both first lists are in.
    pub fn synced(&self) -> bool {
        self.map_copies.synced() && self.secret_copies.synced()
    }

    /// The object `kind`/`name` of namespace `ns`, as cached.
    pub(crate) fn get(&self, ns: &str, kind: ConfigKind, name: &str) -> Option<ConfigObs> {
        match kind {
            ConfigKind::ConfigMap => self
                .maps
                .get(&ObjectRef::new(name).within(ns))
                .map(|o| obs(&o, None)),
            ConfigKind::Secret => self
                .secrets
                .get(&ObjectRef::new(name).within(ns))
                .map(|o| obs(&o, None)),
        }
    }
}

/// One cached object as the core sees it; `plan` names the plan whose copy
/// it may be.
pub(crate) fn obs<K>(o: &CachedConfig<K>, plan: Option<&str>) -> ConfigObs {
    ConfigObs {
        digest: o.digest.clone(),
        copy_of: plan.and_then(|p| o.copy_of(p)).map(str::to_string),
        always_live: o.always_live(),
    }
}

/// Keeps of a cached ConfigMap or Secret only what is read: the plan label
/// and the annotations that make it a copy (its values were never kept).
pub fn trim<K>(o: &mut CachedConfig<K>) {
    let meta = &mut o.metadata;
    if let Some(labels) = meta.labels.as_mut() {
        labels.retain(|k, _| k == LABEL_PLAN);
    }
    if let Some(a) = meta.annotations.as_mut() {
        a.retain(|k, _| k == ANNOTATION_CONFIG_SOURCE);
    }
    meta.managed_fields = None;
    meta.finalizers = None;
    meta.generate_name = None;
}

/// The plans of `plans` whose templates read `kind`/`name` in `ns`.
pub fn plans_reading(
    plans: &Store<CachedPlan>,
    kind: ConfigKind,
    ns: Option<&str>,
    name: &str,
) -> Vec<ObjectRef<ReleasePlan>> {
    let key = (kind, name.to_string());
    super::watches::plans_naming(plans, Some(ns.unwrap_or_default()), name, |p| {
        p.spec
            .components
            .iter()
            .any(|c| references(&c.template).contains(&key))
    })
}

/// Watches ConfigMaps and Secrets into their caches; the stream yields the
/// plans each change wakes (those reading the object, and the plan a copy
/// belongs to).
pub fn watch(
    client: &kube::Client,
    ns: Option<&str>,
    liveness: &Arc<crate::ops::liveness::Liveness>,
    plans: Store<CachedPlan>,
) -> (
    ConfigCaches,
    impl Stream<Item = ObjectRef<ReleasePlan>> + Send + 'static,
) {
    let (maps, map_writer) = reflector::store();
    let (secrets, secret_writer) = reflector::store();
    let map_copies = PlanCache::default();
    let secret_copies = PlanCache::default();
    let map_stream = config_watch(
        scoped::<CachedConfigMap>(client, ns),
        map_writer,
        map_copies.writer(),
        plans.clone(),
        liveness,
    );
    let secret_stream = config_watch(
        scoped::<CachedSecret>(client, ns),
        secret_writer,
        secret_copies.writer(),
        plans,
        liveness,
    );
    (
        ConfigCaches {
            maps,
            secrets,
            map_copies,
            secret_copies,
            enabled: true,
        },
        futures::stream::select(map_stream, secret_stream),
    )
}

fn config_watch<K>(
    api: Api<CachedConfig<K>>,
    writer: reflector::store::Writer<CachedConfig<K>>,
    mut copy_writer: super::index::PlanCacheWriter<CachedConfig<K>>,
    plans: Store<CachedPlan>,
    liveness: &Arc<crate::ops::liveness::Liveness>,
) -> impl Stream<Item = ObjectRef<ReleasePlan>> + Send + 'static
where
    CachedConfig<K>: super::Watched + crate::api::cached::Labelled + super::index::Wakes,
    K: crate::api::config::KindOf + PartialEq + Send + Sync + 'static,
{
    // The most recent list, in pages: a list "of any version" comes from the
    // API server's cache, which ignores `limit`, and Secrets (Helm's release
    // Secrets above all) can be many megabytes in one response.
    watcher(api, watcher::Config::default())
        .backoff(watch_backoff())
        .inspect(watched::<CachedConfig<K>, _>(liveness))
        .modify(trim::<K>)
        .reflect(writer)
        .inspect(move |e| {
            if let Ok(e) = e {
                copy_writer.apply(e);
            }
        })
        .touched_objects()
        .filter_map(ok_only)
        .flat_map(move |o| {
            let mut wakes = Vec::new();
            if let Ok(o) = o {
                let ns = o.namespace();
                if let Some(plan) = o.metadata.labels.as_ref().and_then(|l| l.get(LABEL_PLAN))
                    && let Some(ns) = &ns
                {
                    wakes.push(ObjectRef::new(plan).within(ns));
                }
                wakes.extend(plans_reading(&plans, K::KIND, ns.as_deref(), &o.name_any()));
            }
            futures::stream::iter(wakes)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_trim_keeps_what_makes_a_copy_and_no_value() {
        let mut s: CachedSecret = serde_json::from_value(json!({
            "metadata": {"name": "db-x", "namespace": "n",
                "labels": {LABEL_PLAN: "shop", "team": "a"},
                "annotations": {ANNOTATION_CONFIG_SOURCE: "db", "note": "x"}},
            "type": "Opaque", "data": {"password": "aHVudGVyMg=="}
        }))
        .unwrap();
        trim(&mut s);
        assert_eq!(s.copy_of("shop"), Some("db"));
        assert_eq!(s.copy_of("cart"), None);
        let text = format!("{s:?}");
        assert!(
            !text.contains("aHVudGVyMg") && !text.contains("hunter2"),
            "{text}"
        );
        assert_eq!(s.metadata.labels.unwrap().len(), 1);
    }
}
