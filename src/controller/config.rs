//! The controller's side of config released with the code: cached watches of
//! ConfigMaps and Secrets (a digest of each, never a value), what a plan's
//! templates reference as observed, the copies to write, and which plans a
//! change wakes. Decides nothing: [`crate::plan::config`] does.

use super::context::Context;
use super::error::Error;
use super::index::{PlanCache, plan_objects};
use super::{FIELD_MANAGER, ok_only, scoped, watch_backoff, watched};
use crate::api::cached::{CachedDeployment, CachedPlan, CachedRevision};
use crate::api::config::{
    ANNOTATION_CONFIG_DIGEST, ANNOTATION_CONFIG_SOURCE, CachedConfig, CachedConfigMap,
    CachedSecret, ConfigKind, digest_of_map, digest_of_secret,
};
use crate::api::{LABEL_PLAN, ReleasePlan};
use crate::plan::config::{ConfigIntents, ConfigObs, ConfigObservation, CopyIntent, references};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplateSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tracing::info;

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

    fn get(&self, ns: &str, kind: ConfigKind, name: &str) -> Option<ConfigObs> {
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

fn obs<K>(o: &CachedConfig<K>, plan: Option<&str>) -> ConfigObs {
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
    super::context::plans_naming(plans, Some(ns.unwrap_or_default()), name, |p| {
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
    client: &Client,
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
    CachedConfig<K>: super::Watched + crate::api::cached::Labelled,
    K: crate::api::config::KindOf + Send + Sync + 'static,
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

/// What the plan's config looks like in the caches: each object its
/// templates (and recorded copies) name, every copy made for it, and the
/// copies its kept revisions read. Reads no network.
pub(crate) fn observe(
    ctx: &Context,
    plan: &ReleasePlan,
    ns: &str,
    owned: &[Arc<CachedDeployment>],
    stored: &[Arc<CachedRevision>],
) -> ConfigObservation {
    if !ctx.config.enabled {
        return ConfigObservation {
            disabled: true,
            ..ConfigObservation::default()
        };
    }
    let name = plan.name_any();
    let uid = plan.uid().unwrap_or_default();
    let mut objects = BTreeMap::new();
    for c in &plan.spec.components {
        for (kind, n) in references(&c.template) {
            if let Some(o) = ctx.config.get(ns, kind, &n) {
                objects.insert((kind, n), o);
            }
        }
    }
    for o in plan_objects(&ctx.config.map_copies, ns, &name, &uid) {
        objects.insert((ConfigKind::ConfigMap, o.name_any()), obs(&o, Some(&name)));
    }
    for o in plan_objects(&ctx.config.secret_copies, ns, &name, &uid) {
        objects.insert((ConfigKind::Secret, o.name_any()), obs(&o, Some(&name)));
    }
    // Which copies the kept revisions read matters only to a plan that has
    // copies: the others parse no template.
    let in_use = if objects.values().any(|o| o.copy_of.is_some()) {
        kept_references(owned, stored)
    } else {
        BTreeSet::new()
    };
    ConfigObservation {
        objects,
        in_use,
        disabled: false,
    }
}

/// Every ConfigMap and Secret the plan's revision Deployments and stored
/// templates name.
fn kept_references(
    owned: &[Arc<CachedDeployment>],
    stored: &[Arc<CachedRevision>],
) -> BTreeSet<(ConfigKind, String)> {
    let stored_templates = stored
        .iter()
        .filter_map(|cr| serde_json::from_str::<PodTemplateSpec>(cr.data.as_deref()?).ok());
    owned
        .iter()
        .map(|d| d.template())
        .chain(stored_templates)
        .flat_map(|t| references(&t))
        .collect()
}

/// The copy of a source read in full: its content checked against the
/// digest the decision named (a source changed since it was observed is
/// not copied: its watch event brings the next decision).
enum Read {
    Copy(Box<serde_json::Value>),
    Changed,
    Gone,
}

fn copy_meta(plan: &ReleasePlan, c: &CopyIntent) -> ObjectMeta {
    let plan_name = plan.name_any();
    ObjectMeta {
        name: Some(c.name.clone()),
        namespace: plan.namespace(),
        labels: Some(BTreeMap::from([
            (LABEL_PLAN.to_string(), plan_name),
            (
                crate::objects::deployment::MANAGED_BY.to_string(),
                "releaseplan".to_string(),
            ),
        ])),
        annotations: Some(BTreeMap::from([
            (ANNOTATION_CONFIG_SOURCE.to_string(), c.source.clone()),
            (ANNOTATION_CONFIG_DIGEST.to_string(), c.digest.clone()),
        ])),
        owner_references: plan.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

async fn read_source(
    client: &Client,
    plan: &ReleasePlan,
    ns: &str,
    c: &CopyIntent,
) -> Result<Read, kube::Error> {
    let meta = copy_meta(plan, c);
    let value = match c.kind {
        ConfigKind::ConfigMap => {
            let Some(src) = Api::<ConfigMap>::namespaced(client.clone(), ns)
                .get_opt(&c.source)
                .await?
            else {
                return Ok(Read::Gone);
            };
            if digest_of_map(&src) != c.digest {
                return Ok(Read::Changed);
            }
            serde_json::to_value(ConfigMap {
                metadata: meta,
                data: src.data,
                binary_data: src.binary_data,
                immutable: Some(true),
            })
        }
        ConfigKind::Secret => {
            let Some(src) = Api::<Secret>::namespaced(client.clone(), ns)
                .get_opt(&c.source)
                .await?
            else {
                return Ok(Read::Gone);
            };
            if digest_of_secret(&src) != c.digest {
                return Ok(Read::Changed);
            }
            // Same type and keys, nothing more (stringData is write-only and
            // never read back).
            serde_json::to_value(Secret {
                metadata: meta,
                data: src.data,
                type_: src.type_,
                immutable: Some(true),
                string_data: None,
            })
        }
    };
    Ok(value.map_or(Read::Gone, |v| Read::Copy(Box::new(v))))
}

/// What writing the config came to.
pub(crate) struct Copied {
    /// Components whose new revision must wait: a copy it reads is not in
    /// the cache yet (its pods would not start); the copy's own watch event
    /// wakes the plan.
    pub waiting: BTreeSet<String>,
    /// The first copy the API server refused or did not take (status and
    /// an Event say so, as for a Deployment).
    pub refusal: Option<crate::plan::Refusal>,
    /// Pruning unused copies (a failure holds nothing: retried).
    pub pruned: Result<(), Error>,
}

/// Creates the copies the decision names and deletes the unused ones.
pub(crate) async fn act(
    ctx: &Context,
    plan: &ReleasePlan,
    ns: &str,
    intents: &ConfigIntents,
    carried_by: &BTreeMap<String, String>,
) -> Copied {
    let mut waiting = BTreeSet::new();
    let mut refusal = None;
    let mut first_error = None;
    for c in &intents.create {
        if let Some(component) = carried_by.get(&c.name) {
            waiting.insert(component.clone());
        }
        let created = match read_source(&ctx.client, plan, ns, c).await {
            Ok(Read::Copy(v)) => create(&ctx.client, ns, c.kind, *v).await.map(|()| true),
            Ok(Read::Changed | Read::Gone) => Ok(false),
            Err(e) => Err(e),
        };
        match created {
            Ok(true) => {
                info!(plan = %plan.name_any(), kind = %c.kind, copy = %c.name, "config copied");
            }
            Ok(false) => {}
            Err(e) if super::namespace_terminating(&e) => {}
            Err(e) => {
                refusal.get_or_insert_with(|| super::act::refusal_of(c.kind.as_str(), &c.name, &e));
            }
        }
    }
    for (kind, name) in &intents.delete {
        let dp = DeleteParams::default();
        let res = match kind {
            ConfigKind::ConfigMap => Api::<ConfigMap>::namespaced(ctx.client.clone(), ns)
                .delete(name, &dp)
                .await
                .map(|_| ()),
            ConfigKind::Secret => Api::<Secret>::namespaced(ctx.client.clone(), ns)
                .delete(name, &dp)
                .await
                .map(|_| ()),
        };
        match res {
            Ok(()) => {
                info!(plan = %plan.name_any(), kind = %kind, copy = %name, "unused config copy deleted");
            }
            Err(e) if super::is_not_found(&e) => {}
            Err(e) => {
                first_error.get_or_insert(Error::Config {
                    name: format!("{kind} {name}"),
                    source: e,
                });
            }
        }
    }
    Copied {
        waiting,
        refusal,
        pruned: first_error.map_or(Ok(()), Err),
    }
}

async fn create(
    client: &Client,
    ns: &str,
    kind: ConfigKind,
    v: serde_json::Value,
) -> Result<(), kube::Error> {
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    let res = match kind {
        ConfigKind::ConfigMap => {
            let obj: ConfigMap = serde_json::from_value(v).map_err(kube::Error::SerdeError)?;
            Api::<ConfigMap>::namespaced(client.clone(), ns)
                .create(&pp, &obj)
                .await
                .map(|_| ())
        }
        ConfigKind::Secret => {
            let obj: Secret = serde_json::from_value(v).map_err(kube::Error::SerdeError)?;
            Api::<Secret>::namespaced(client.clone(), ns)
                .create(&pp, &obj)
                .await
                .map(|_| ())
        }
    };
    match res {
        // Named by its content: one that exists already has it.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        other => other,
    }
}

/// The component of each copy the target carries, by copy name.
pub(crate) fn carried_by(target: &crate::plan::Target) -> BTreeMap<String, String> {
    target
        .components
        .iter()
        .flat_map(|c| {
            c.config
                .iter()
                .filter_map(move |k| Some((k.copy.clone()?, c.name.clone())))
        })
        .collect()
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
