//! The controller's side of config released with the code: what a plan's
//! templates reference as observed (from [`super::config_cache`]), and the
//! copies to write and prune. Decides nothing: [`crate::plan::config`] does.

use super::config_cache::{Access, obs};
use super::context::Context;
use super::error::{Error, refusal_of};
use super::index::plan_objects;
use super::outcome::FIELD_MANAGER;
use crate::api::cached::{CachedDeployment, CachedRevision};
use crate::api::config::{
    ANNOTATION_CONFIG_DIGEST, ANNOTATION_CONFIG_SOURCE, ConfigKind, digest_of_map, digest_of_secret,
};
use crate::api::{LABEL_PLAN, ReleasePlan};
use crate::plan::config::{ConfigIntents, ConfigObs, ConfigObservation, CopyIntent, references};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tracing::info;

/// How long a config copy just created stands in for the cache: a watch
/// delivers it in well under a second; past this the cache is the truth
/// again (a copy created again is refused as existing, which changes nothing).
pub(crate) const COPY_STAND_IN_TTL: std::time::Duration = std::time::Duration::from_secs(10);

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
    let config = match ctx.config.of(ns) {
        Access::Granted(c) => c,
        Access::Off => {
            return ConfigObservation {
                disabled: true,
                ..ConfigObservation::default()
            };
        }
        Access::Denied => {
            return ConfigObservation {
                denied: true,
                ..ConfigObservation::default()
            };
        }
    };
    let name = plan.name_any();
    let uid = plan.uid().unwrap_or_default();
    let mut objects = BTreeMap::new();
    for c in &plan.spec.components {
        for (kind, n) in references(&c.template) {
            if let Some(o) = config.get(ns, kind, &n) {
                objects.insert((kind, n), o);
            }
        }
    }
    for o in plan_objects(&config.map_copies, ns, &name, &uid) {
        objects.insert((ConfigKind::ConfigMap, o.name_any()), obs(&o, Some(&name)));
    }
    for o in plan_objects(&config.secret_copies, ns, &name, &uid) {
        objects.insert((ConfigKind::Secret, o.name_any()), obs(&o, Some(&name)));
    }
    // Copies created but not cached yet: as they were created.
    ctx.memory.with(&ObjectRef::from_obj(plan), |m| {
        m.written_copies.retain(|key, (at, written)| {
            if objects.contains_key(key) || at.elapsed() > COPY_STAND_IN_TTL {
                return false;
            }
            objects.insert(key.clone(), written.clone());
            true
        });
    });
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
        denied: false,
    }
}

/// Every ConfigMap and Secret the plan's revision Deployments and stored
/// templates name.
fn kept_references(
    owned: &[Arc<CachedDeployment>],
    stored: &[Arc<CachedRevision>],
) -> BTreeSet<(ConfigKind, String)> {
    let stored_refs = stored
        .iter()
        .flat_map(|cr| cr.stored.refs().iter().cloned());
    owned
        .iter()
        .flat_map(|d| d.refs().iter().cloned())
        .chain(stored_refs)
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
    /// Components whose new revision must wait: a copy it reads could not be
    /// created (its pods would not start); the copy's own watch event, or
    /// the retry, wakes the plan.
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
    // Each copy is a read of its source and a create, independent of the
    // other copies': made at once, a first release of a plan with two
    // copies waits two round trips here instead of four. The results are
    // taken in the decision's order.
    let results = futures::future::join_all(intents.create.iter().map(|c| async move {
        match read_source(&ctx.client, plan, ns, c).await {
            Ok(Read::Copy(v)) => create(&ctx.client, ns, c.kind, *v).await.map(|()| true),
            Ok(Read::Changed | Read::Gone) => Ok(false),
            Err(e) => Err(e),
        }
    }))
    .await;
    for (c, created) in intents.create.iter().zip(results) {
        // A copy created now (or found) exists: its revision's Deployment
        // need not wait for the copy's watch event.
        if !matches!(created, Ok(true))
            && let Some(component) = carried_by.get(&c.name)
        {
            waiting.insert(component.clone());
        }
        match created {
            Ok(true) => {
                info!(plan = %plan.name_any(), kind = %c.kind, copy = %c.name, "config copied");
                ctx.memory.with(&ObjectRef::from_obj(plan), |m| {
                    m.written_copies.insert(
                        (c.kind, c.name.clone()),
                        (
                            std::time::Instant::now(),
                            ConfigObs {
                                digest: c.digest.clone(),
                                copy_of: Some(c.source.clone()),
                                always_live: false,
                            },
                        ),
                    );
                });
            }
            Ok(false) => {}
            Err(e) if super::error::namespace_terminating(&e) => {}
            Err(e) => {
                refusal.get_or_insert_with(|| refusal_of(c.kind.as_str(), &c.name, &e));
            }
        }
    }
    for (kind, name) in &intents.delete {
        let res = api(&ctx.client, ns, *kind)
            .delete(name, &DeleteParams::default())
            .await
            .map(|_| ());
        match res {
            Ok(()) => {
                info!(plan = %plan.name_any(), kind = %kind, copy = %name, "unused config copy deleted");
            }
            Err(e) if super::error::is_not_found(&e) => {}
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

/// ConfigMaps or Secrets of `ns`, untyped: a copy is created and deleted
/// alike whatever its kind.
fn api(client: &Client, ns: &str, kind: ConfigKind) -> Api<DynamicObject> {
    let resource = match kind {
        ConfigKind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
        ConfigKind::Secret => ApiResource::erase::<Secret>(&()),
    };
    Api::namespaced_with(client.clone(), ns, &resource)
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
    let obj: DynamicObject = serde_json::from_value(v).map_err(kube::Error::SerdeError)?;
    match api(client, ns, kind).create(&pp, &obj).await {
        // Named by its content: one that exists already has it.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        other => other.map(|_| ()),
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
