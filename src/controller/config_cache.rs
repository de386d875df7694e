//! The caches of config released with the code: cached watches of
//! ConfigMaps and Secrets (a digest of each, never a value), the plans'
//! copies by plan, and which plans a change wakes. [`super::config`] reads
//! them for a reconcile.

use super::index::PlanCache;
use super::watches::{ok_only, scoped, watch_backoff, watched};
use crate::api::ReleasePlan;
use crate::api::cached::{CachedPlan, Footprint};
use crate::api::config::{CachedConfig, CachedConfigMap, CachedSecret, ConfigKind};
use crate::ops::shard::Shard;
use crate::plan::config::{ConfigObs, references};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Where the operator may read and copy ConfigMaps and Secrets
/// (`--config-namespaces`): the access the chart's RBAC grants, told to the
/// operator, so it watches only where it may and tells plans elsewhere why
/// their config is not versioned (docs/decisions.md, "Config access by
/// namespace").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigNamespaces {
    /// Every namespace the operator watches (`*`: cluster-wide access).
    All,
    /// Only these; none: config is versioned nowhere.
    Only(BTreeSet<String>),
}

impl ConfigNamespaces {
    /// From the flag's list: `*` anywhere in it means every namespace.
    pub fn from_list(list: &[String]) -> Self {
        if list.iter().any(|n| n == "*") {
            ConfigNamespaces::All
        } else {
            ConfigNamespaces::Only(list.iter().filter(|n| !n.is_empty()).cloned().collect())
        }
    }

    /// One entry of `--config-namespaces`: `*` or a namespace name.
    pub fn parse_entry(s: &str) -> Result<String, String> {
        let s = s.trim();
        let label = !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-');
        if s == "*" || s.is_empty() || label {
            Ok(s.to_string())
        } else {
            Err(format!(
                "{s:?} is neither \"*\" nor a namespace name (lower-case letters, digits and '-', at most 63)"
            ))
        }
    }
}

/// What the operator may do with config in one namespace.
pub(crate) enum Access<'a> {
    /// Config versioning is off (`--config-versioning=false`).
    Off,
    /// Not granted here (`--config-namespaces` does not name the namespace),
    /// or granted but the API server refuses the watch (RBAC missing).
    Denied,
    /// Watched: its caches.
    Granted(&'a ConfigCaches),
}

/// The config caches of every namespace where the operator may read config.
#[derive(Clone)]
pub struct ConfigScope {
    versioning: bool,
    /// With `*`: one watch of every namespace the operator watches.
    all: Option<ConfigCaches>,
    /// Else one per granted namespace.
    by_namespace: BTreeMap<String, ConfigCaches>,
}

impl ConfigScope {
    /// Config versioning off: every reference is read live.
    pub fn off() -> Self {
        ConfigScope {
            versioning: false,
            all: None,
            by_namespace: BTreeMap::new(),
        }
    }

    /// What the operator may do with config in `ns`.
    pub(crate) fn of(&self, ns: &str) -> Access<'_> {
        if !self.versioning {
            return Access::Off;
        }
        match self.all.as_ref().or_else(|| self.by_namespace.get(ns)) {
            Some(c) if !c.forbidden.load(Ordering::Relaxed) => Access::Granted(c),
            _ => Access::Denied,
        }
    }

    /// Whether the operator may copy config in `ns`: config versioning is
    /// on and it is granted there.
    pub(crate) fn may_copy(&self, ns: &str) -> bool {
        matches!(self.of(ns), Access::Granted(_))
    }

    /// Whether config versioning is on.
    pub fn enabled(&self) -> bool {
        self.versioning
    }

    /// Whether every watch has its first list, or is refused (a namespace
    /// whose RBAC is missing must not hold every other plan).
    pub fn synced(&self) -> bool {
        self.caches()
            .all(|c| c.synced() || c.forbidden.load(Ordering::Relaxed))
    }

    /// Objects of `kind` cached, in every namespace.
    pub fn len(&self, kind: ConfigKind) -> usize {
        self.caches().map(|c| c.len(kind)).sum()
    }

    /// Every namespace's caches.
    fn caches(&self) -> impl Iterator<Item = &ConfigCaches> {
        self.all.iter().chain(self.by_namespace.values())
    }

    /// Estimated bytes of the cached objects of `kind`, in every namespace.
    pub fn footprint(&self, kind: ConfigKind) -> usize {
        self.caches().map(|c| c.footprint(kind)).sum()
    }
}

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
    /// The template gates' copies (Secrets too: the same access).
    pub template_copies: PlanCache<Secret>,
    /// The API server refuses the watch (403): the operator was told it may
    /// read config here, but RBAC does not grant it. Cleared when a watch
    /// answers again.
    forbidden: Arc<AtomicBool>,
}

impl ConfigCaches {
    /// Caches with nothing watched, synced (for tests).
    #[cfg(test)]
    pub fn empty() -> Self {
        ConfigCaches {
            maps: reflector::store().0,
            secrets: reflector::store().0,
            map_copies: PlanCache::empty(),
            secret_copies: PlanCache::empty(),
            template_copies: PlanCache::empty(),
            forbidden: Arc::default(),
        }
    }

    /// Whether the first lists are in.
    pub fn synced(&self) -> bool {
        self.map_copies.synced() && self.secret_copies.synced() && self.template_copies.synced()
    }

    /// Objects of `kind` cached: sources and copies.
    pub fn len(&self, kind: ConfigKind) -> usize {
        match kind {
            ConfigKind::ConfigMap => self.maps.state().len() + self.map_copies.len(),
            ConfigKind::Secret => self.secrets.state().len() + self.secret_copies.len(),
        }
    }

    /// Estimated bytes of the cached objects of `kind` ([`Footprint`]).
    pub fn footprint(&self, kind: ConfigKind) -> usize {
        fn sources<K>(store: &Store<CachedConfig<K>>) -> usize
        where
            CachedConfig<K>: kube::Resource<DynamicType = ()> + Clone,
        {
            store.state().iter().map(|o| o.footprint()).sum()
        }
        match kind {
            ConfigKind::ConfigMap => sources(&self.maps) + self.map_copies.footprint(),
            ConfigKind::Secret => sources(&self.secrets) + self.secret_copies.footprint(),
        }
    }

    /// The object `kind`/`name` of namespace `ns`, as cached.
    pub(crate) fn get(&self, ns: &str, kind: ConfigKind, name: &str) -> Option<ConfigObs> {
        // A copy is cached only among the copies (`sources_apply`).
        match kind {
            ConfigKind::ConfigMap => self
                .maps
                .get(&ObjectRef::new(name).within(ns))
                .or_else(|| self.map_copies.get(ns, name))
                .map(|o| obs(&o, None)),
            ConfigKind::Secret => self
                .secrets
                .get(&ObjectRef::new(name).within(ns))
                .or_else(|| self.secret_copies.get(ns, name))
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

/// Keeps of a cached ConfigMap or Secret only what is read (its values,
/// labels and annotations were left out while decoding, but for the two
/// that make a copy).
pub fn trim<K>(o: &mut CachedConfig<K>) {
    let meta = &mut o.metadata;
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

/// The wakes of config changes, and the template copies' changes.
pub(crate) type ScopeStreams = (
    futures::stream::BoxStream<'static, ObjectRef<ReleasePlan>>,
    futures::stream::BoxStream<'static, Result<Secret, watcher::Error>>,
);

/// Watches config where the operator may read it: once over `watched` (the
/// operator's namespace, or all) with `*`, else in each granted namespace it
/// watches. Nothing with config versioning off.
pub(crate) fn watch_scope(
    owned: &super::watches::OwnedWatches<'_>,
    versioning: bool,
    granted: &ConfigNamespaces,
    plans: &Store<CachedPlan>,
) -> (ConfigScope, ScopeStreams) {
    let mut scope = ConfigScope {
        versioning,
        all: None,
        by_namespace: BTreeMap::new(),
    };
    let mut wakes = Vec::new();
    let mut copies = Vec::new();
    let namespaces: Vec<Option<&str>> = match (versioning, granted) {
        (false, _) => Vec::new(),
        (true, ConfigNamespaces::All) => vec![owned.namespace],
        (true, ConfigNamespaces::Only(list)) => list
            .iter()
            .map(String::as_str)
            .filter(|n| owned.namespace.is_none_or(|w| w == *n))
            .map(Some)
            .collect(),
    };
    for ns in namespaces {
        let here = super::watches::OwnedWatches {
            namespace: ns,
            ..*owned
        };
        let (caches, wake, copy) = watch(&here, plans.clone());
        match (granted, ns) {
            (ConfigNamespaces::Only(_), Some(ns)) => {
                scope.by_namespace.insert(ns.to_string(), caches);
            }
            _ => scope.all = Some(caches),
        }
        wakes.push(wake.boxed());
        copies.push(copy.boxed());
    }
    (
        scope,
        (
            futures::stream::select_all(wakes).boxed(),
            futures::stream::select_all(copies).boxed(),
        ),
    )
}

/// Watches ConfigMaps and Secrets of `owned`'s namespace (or all) into their
/// caches, and the template gates' copies; the first stream yields the plans
/// each change wakes (those reading the object, and the plan a copy belongs
/// to), the second the template copies' changes.
fn watch(
    owned: &super::watches::OwnedWatches<'_>,
    plans: Store<CachedPlan>,
) -> (
    ConfigCaches,
    impl Stream<Item = ObjectRef<ReleasePlan>> + Send + 'static,
    impl Stream<Item = Result<Secret, watcher::Error>> + Send + 'static,
) {
    let (client, ns, shard, liveness) =
        (owned.client, owned.namespace, owned.shard, owned.liveness);
    let (maps, map_writer) = reflector::store();
    let (secrets, secret_writer) = reflector::store();
    let map_copies = PlanCache::default();
    let secret_copies = PlanCache::default();
    let forbidden = Arc::new(AtomicBool::new(false));
    let map_stream = config_watch(
        scoped::<CachedConfigMap>(client, ns),
        map_writer,
        map_copies.writer(),
        shard,
        plans.clone(),
        liveness,
        (Arc::clone(&forbidden), ns.map(str::to_string)),
    );
    let secret_stream = config_watch(
        scoped::<CachedSecret>(client, ns),
        secret_writer,
        secret_copies.writer(),
        shard,
        plans,
        liveness,
        (Arc::clone(&forbidden), ns.map(str::to_string)),
    );
    // Only the template gates' copies: config copies carry the plan label
    // too, and their values are never cached.
    let (template_copies, copy_stream) =
        owned.watch_selected(&TEMPLATE_COPIES, super::trim::template_copy);
    (
        ConfigCaches {
            maps,
            secrets,
            map_copies,
            secret_copies,
            template_copies,
            forbidden,
        },
        futures::stream::select(map_stream, secret_stream),
        copy_stream,
    )
}

/// The selector of the template gates' copies.
static TEMPLATE_COPIES: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{},{}",
        crate::api::template::LABEL_TEMPLATE_COPY,
        crate::api::LABEL_PLAN
    )
});

/// Notes in `forbidden` whether the API server refuses the watch (403, RBAC
/// missing where the operator was told it may read) or answers it.
fn note_forbidden<T>(
    forbidden: Arc<AtomicBool>,
    ns: Option<String>,
) -> impl FnMut(&Result<T, watcher::Error>) + Send + 'static {
    move |r| match r {
        Err(
            watcher::Error::InitialListFailed(kube::Error::Api(s))
            | watcher::Error::WatchStartFailed(kube::Error::Api(s)),
        ) if s.code == 403 => {
            if !forbidden.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    namespace = ns.as_deref().unwrap_or("*"),
                    "the API server refuses to list ConfigMaps or Secrets where --config-namespaces grants it: config is read live there until RBAC allows it (the chart's config.namespaces renders that RBAC)"
                );
            }
        }
        Ok(_) => forbidden.store(false, Ordering::Relaxed),
        Err(_) => {}
    }
}

fn config_watch<K>(
    api: Api<CachedConfig<K>>,
    writer: reflector::store::Writer<CachedConfig<K>>,
    mut copy_writer: super::index::PlanCacheWriter<CachedConfig<K>>,
    shard: Option<Shard>,
    plans: Store<CachedPlan>,
    liveness: &Arc<crate::ops::liveness::Liveness>,
    (forbidden, ns): (Arc<AtomicBool>, Option<String>),
) -> impl Stream<Item = ObjectRef<ReleasePlan>> + Send + 'static
where
    CachedConfig<K>: super::watches::Watched + crate::api::cached::Labelled + super::index::Wakes,
    K: crate::api::config::KindOf + PartialEq + Send + Sync + 'static,
{
    // The most recent list, in pages: a list "of any version" comes from the
    // API server's cache, which ignores `limit`, and Secrets (Helm's release
    // Secrets above all) can be many megabytes in one response.
    watcher(api, super::watches::listed())
        .backoff(watch_backoff())
        .inspect(note_forbidden(forbidden, ns))
        .inspect(watched::<CachedConfig<K>, _>(liveness))
        .modify(trim::<K>)
        .inspect({
            let mut writer = writer;
            move |e| {
                if let Ok(e) = e {
                    copies_apply(&mut copy_writer, shard, e);
                    sources_apply(&mut writer, e);
                }
            }
        })
        .touched_objects()
        .filter_map(ok_only)
        .flat_map(move |o| {
            let wakes = o.map(|o| woken(&o, shard, &plans)).unwrap_or_default();
            futures::stream::iter(wakes)
        })
}

/// The plans a change of `o` wakes: those of this shard reading it, and the
/// plan whose copy it is if that plan is this shard's (a wake for another
/// shard's plan finds no plan here: each replica woke for every copy).
fn woken<K>(
    o: &CachedConfig<K>,
    shard: Option<Shard>,
    plans: &Store<CachedPlan>,
) -> Vec<ObjectRef<ReleasePlan>>
where
    K: crate::api::config::KindOf,
    CachedConfig<K>: kube::Resource<DynamicType = ()>,
{
    let mut wakes = Vec::new();
    let ns = o.namespace();
    if let Some(plan) = o.plan.as_deref()
        && let Some(ns) = &ns
        && shard.is_none_or(|s| s.owns(ns, plan))
    {
        wakes.push(ObjectRef::new(plan).within(ns));
    }
    wakes.extend(plans_reading(plans, K::KIND, ns.as_deref(), &o.name_any()));
    wakes
}

/// Applies `event` to the copy index: with a shard, only the copies of its
/// own plans, as the owned objects' watches do (`owned_in_shard`, here on a
/// borrowed event). Another shard's copies are neither cached nor wake a
/// plan (each replica held every plan's copies and woke for each); one whose
/// plan label moved it to another shard leaves the index, as if deleted.
/// (An object with no plan label is no copy: the index never holds it.)
fn copies_apply<K>(
    writer: &mut super::index::PlanCacheWriter<CachedConfig<K>>,
    shard: Option<Shard>,
    event: &watcher::Event<CachedConfig<K>>,
) where
    CachedConfig<K>: super::watches::Watched + crate::api::cached::Labelled + super::index::Wakes,
{
    let theirs = |o: &CachedConfig<K>| shard.is_some_and(|s| !super::watches::in_shard(s, o));
    match event {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) if theirs(o) => {
            writer.apply(&watcher::Event::Delete(o.clone()));
        }
        watcher::Event::InitApply(o) if theirs(o) => {}
        e => {
            writer.apply(e);
        }
    }
}

/// Applies `event` to the store of sources, which holds no copy: a copy is
/// cached once, in the copy index (a plan may have many, each as large as a
/// source's metadata). An object that becomes a copy leaves the store.
fn sources_apply<K>(
    writer: &mut reflector::store::Writer<CachedConfig<K>>,
    event: &watcher::Event<CachedConfig<K>>,
) where
    CachedConfig<K>: kube::Resource<DynamicType = ()> + Clone,
{
    let is_copy = |o: &CachedConfig<K>| o.plan.is_some();
    match event {
        watcher::Event::Apply(o) if is_copy(o) => {
            if writer.as_reader().get(&ObjectRef::from_obj(o)).is_some() {
                writer.apply_watcher_event(&watcher::Event::Delete(o.clone()));
            }
        }
        watcher::Event::InitApply(o) if is_copy(o) => {}
        e => writer.apply_watcher_event(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::LABEL_PLAN;
    use crate::api::config::ANNOTATION_CONFIG_SOURCE;
    use serde_json::json;

    #[test]
    fn the_flag_lists_namespaces_or_star_and_refuses_other_names() {
        let list = |v: &[&str]| {
            ConfigNamespaces::from_list(&v.iter().map(|s| (*s).to_string()).collect::<Vec<_>>())
        };
        assert_eq!(list(&[]), ConfigNamespaces::Only(BTreeSet::new()));
        assert_eq!(list(&[""]), ConfigNamespaces::Only(BTreeSet::new()));
        assert_eq!(list(&["shop", "*"]), ConfigNamespaces::All);
        assert_eq!(
            list(&["shop", "pay"]),
            ConfigNamespaces::Only(["pay".to_string(), "shop".to_string()].into())
        );
        for ok in ["*", "shop", "a-1", ""] {
            assert!(ConfigNamespaces::parse_entry(ok).is_ok(), "{ok}");
        }
        for bad in ["Shop", "-a", "a-", "a.b", "**", &"a".repeat(64)] {
            let e = ConfigNamespaces::parse_entry(bad).unwrap_err();
            assert!(e.contains("namespace name"), "{e}");
        }
    }

    /// A scope granting `granted` (synced caches), as `watch_scope` builds it.
    fn scope(granted: &[&str]) -> ConfigScope {
        ConfigScope {
            versioning: true,
            all: None,
            by_namespace: granted
                .iter()
                .map(|n| ((*n).to_string(), ConfigCaches::empty()))
                .collect(),
        }
    }

    #[test]
    fn access_is_where_the_flag_grants_and_the_api_server_agrees() {
        let s = scope(&["shop"]);
        assert!(matches!(s.of("shop"), Access::Granted(_)));
        assert!(s.may_copy("shop"));
        assert!(matches!(s.of("pay"), Access::Denied));
        assert!(!s.may_copy("pay"));
        assert!(matches!(ConfigScope::off().of("shop"), Access::Off));
        assert!(!ConfigScope::off().may_copy("shop"));
        let all = ConfigScope {
            versioning: true,
            all: Some(ConfigCaches::empty()),
            by_namespace: BTreeMap::new(),
        };
        assert!(matches!(all.of("anything"), Access::Granted(_)));
        // Granted by the flag, refused by RBAC: denied, and not a cache that
        // holds every plan until it lists.
        let s = ConfigScope {
            versioning: true,
            all: None,
            by_namespace: [(
                "shop".to_string(),
                ConfigCaches {
                    map_copies: PlanCache::default(),
                    ..ConfigCaches::empty()
                },
            )]
            .into(),
        };
        assert!(!s.synced(), "not listed yet");
        let caches = &s.by_namespace["shop"];
        let mut note = note_forbidden::<()>(Arc::clone(&caches.forbidden), Some("shop".into()));
        let refused =
            kube::core::Status::failure("secrets is forbidden", "Forbidden").with_code(403);
        note(&Err(watcher::Error::InitialListFailed(kube::Error::Api(
            Box::new(refused),
        ))));
        assert!(matches!(s.of("shop"), Access::Denied));
        assert!(s.synced(), "a refused namespace does not hold the others");
        // Another error says nothing of access; an answer clears it.
        note(&Err(watcher::Error::NoResourceVersion));
        assert!(matches!(s.of("shop"), Access::Denied));
        note(&Ok(()));
        assert!(matches!(s.of("shop"), Access::Granted(_)));
        assert!(!s.synced());
    }

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
        assert_eq!(s.plan.as_deref(), Some("shop"));
        assert!(s.metadata.labels.is_none() && s.metadata.annotations.is_none());
        assert!(!text.contains("team") && !text.contains("note"), "{text}");
    }

    #[test]
    fn a_cached_copy_holds_no_label_or_annotation_map() {
        let copy: CachedConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "web-config-6c8fkd9wqz", "namespace": "shop",
                "uid": "6a1f3c1e-2b1c-4a8e-9a51-1c3f5e2b7d90", "resourceVersion": "123456",
                "creationTimestamp": "2026-12-03T10:00:00Z",
                "labels": {LABEL_PLAN: "web", "app.kubernetes.io/managed-by": "releaseplan"},
                "annotations": {ANNOTATION_CONFIG_SOURCE: "web-config",
                    "releaseplan.io/config-digest": "6c8fkd9wqz"},
                "ownerReferences": [{"apiVersion": "releaseplan.io/v1alpha1",
                    "kind": "ReleasePlan", "name": "web", "controller": true,
                    "uid": "0d7c5b1e-8f0e-4f55-a3c2-5b0b7e1f2a11"}]},
            "data": {"app.yaml": "x".repeat(4096)}
        }))
        .unwrap();
        assert_eq!(copy.copy_of("web"), Some("web-config"));
        assert_eq!(
            crate::api::cached::Labelled::label(&copy, LABEL_PLAN),
            Some("web")
        );
        assert!(copy.metadata.labels.is_none() && copy.metadata.annotations.is_none());
        // Two maps of one entry each were about 1.1 KB of the 1.8 KB a copy held.
        let bytes = copy.footprint();
        assert!(bytes < 1100, "{bytes} bytes");
    }

    fn map(name: &str, plan: Option<&str>) -> CachedConfigMap {
        let labels = plan.map(|p| json!({ LABEL_PLAN: p })).unwrap_or(json!({}));
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "n", "labels": labels},
            "data": {"k": name}
        }))
        .unwrap()
    }

    #[test]
    fn a_copy_is_cached_once_and_still_found_by_name() {
        let (maps, mut writer) = reflector::store::<CachedConfigMap>();
        let copies = PlanCache::<CachedConfigMap>::default();
        let mut copy_writer = copies.writer();
        let caches = ConfigCaches {
            maps,
            secrets: reflector::store().0,
            map_copies: copies,
            secret_copies: PlanCache::empty(),
            template_copies: PlanCache::empty(),
            forbidden: Arc::default(),
        };
        let mut apply = |e: watcher::Event<CachedConfigMap>| {
            copy_writer.apply(&e);
            sources_apply(&mut writer, &e);
        };
        apply(watcher::Event::Init);
        apply(watcher::Event::InitApply(map("app", None)));
        apply(watcher::Event::InitApply(map("app-1", Some("shop"))));
        apply(watcher::Event::InitDone);
        apply(watcher::Event::Apply(map("app-2", Some("shop"))));
        assert_eq!(caches.maps.state().len(), 1, "only the source");
        assert_eq!(caches.map_copies.len(), 2, "both copies");
        for name in ["app", "app-1", "app-2"] {
            assert!(
                caches.get("n", ConfigKind::ConfigMap, name).is_some(),
                "{name} is found by name"
            );
        }
        // A source that becomes a copy leaves the sources; one that stops
        // being a copy comes back.
        apply(watcher::Event::Apply(map("app", Some("shop"))));
        assert_eq!(caches.maps.state().len(), 0);
        assert_eq!(caches.map_copies.len(), 3);
        apply(watcher::Event::Apply(map("app-1", None)));
        assert_eq!(caches.maps.state().len(), 1);
        assert_eq!(caches.map_copies.len(), 2);
        apply(watcher::Event::Delete(map("app-1", None)));
        assert!(caches.get("n", ConfigKind::ConfigMap, "app-1").is_none());
    }

    /// Each replica of a sharded operator used to hold every plan's copies
    /// and wake for each: only its own shard's are cached now.
    #[test]
    fn a_shard_caches_only_its_own_plans_copies() {
        let shard = Shard { index: 0, count: 2 };
        let plan_of = |index: u32| {
            (0..)
                .map(|i| format!("app{i}"))
                .find(|p| crate::ops::shard::of("n", p, 2) == index)
                .unwrap()
        };
        let (ours, theirs) = (plan_of(0), plan_of(1));
        let copies = PlanCache::<CachedConfigMap>::default();
        let mut writer = copies.writer();
        let mut apply = |e: watcher::Event<CachedConfigMap>| {
            copies_apply(&mut writer, Some(shard), &e);
        };
        apply(watcher::Event::Init);
        apply(watcher::Event::InitApply(map("a-1", Some(&ours))));
        apply(watcher::Event::InitApply(map("b-1", Some(&theirs))));
        apply(watcher::Event::InitDone);
        apply(watcher::Event::Apply(map("b-2", Some(&theirs))));
        apply(watcher::Event::Apply(map("a-2", Some(&ours))));
        assert_eq!(copies.len(), 2, "only our plan's two copies");
        assert!(copies.get("n", "b-1").is_none() && copies.get("n", "b-2").is_none());
        // A copy relabelled to the other shard's plan leaves the index.
        apply(watcher::Event::Apply(map("a-1", Some(&theirs))));
        assert!(copies.get("n", "a-1").is_none());
        assert_eq!(copies.of_plan("n", &ours).len(), 1);
        // Unsharded, every copy is cached.
        let all = PlanCache::<CachedConfigMap>::default();
        let mut writer = all.writer();
        for e in [
            watcher::Event::Apply(map("a-1", Some(&ours))),
            watcher::Event::Apply(map("b-1", Some(&theirs))),
        ] {
            copies_apply(&mut writer, None, &e);
        }
        assert_eq!(all.len(), 2);
        // Nor does another shard's copy wake its plan.
        let plans = reflector::store::<CachedPlan>().0;
        let names =
            |w: Vec<ObjectRef<ReleasePlan>>| w.into_iter().map(|r| r.name).collect::<Vec<_>>();
        assert_eq!(
            names(woken(&map("a-1", Some(&ours)), Some(shard), &plans)),
            vec![ours.as_str()]
        );
        assert!(woken(&map("b-1", Some(&theirs)), Some(shard), &plans).is_empty());
        assert_eq!(
            names(woken(&map("b-1", Some(&theirs)), None, &plans)),
            vec![theirs.as_str()]
        );
    }
}
