//! Acting on a decision: the Deployments, the stored templates
//! (ControllerRevisions), the Services and routes, and the Jobs; only what
//! differs from the caches is written. Decides nothing.

use super::context::Context;
use super::error::{Error, is_not_found, namespace_terminating, of_refusal};
use super::keys::version_of;
use super::observe;
use super::observe::Seen;
use super::outcome::{Acted, FIELD_MANAGER, failed_write};
use crate::api::ReleasePlan;
use crate::api::cached::{CachedDeployment, CachedRevision};
use crate::plan::{Decision, Refusal, TemplateSource};
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use releaseplan_core::objects::controller_revision;
use releaseplan_core::objects::controller_revision::Write;
use releaseplan_core::objects::deployment;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// What acting on a decision came to.
pub(crate) struct Outcome {
    /// The first write of the plan's objects that failed (None: all went through).
    pub refusal: Option<Refusal>,
    /// The namespace is being deleted: nothing more to do.
    pub namespace_terminating: bool,
    /// Storing the revisions' templates.
    recorded: Result<(), Error>,
    /// Pruning the templates of deleted revisions.
    pruned: Result<(), Error>,
    /// Copying and pruning config.
    config: Result<(), Error>,
}

impl Outcome {
    /// The reconcile's error, if any: a failed write first, then the templates'.
    pub(crate) fn result(self) -> Result<(), Error> {
        if let Some(r) = &self.refusal {
            return Err(of_refusal(r));
        }
        self.config.and(self.recorded).and(self.pruned)
    }
}

/// Acts on the decision: the template of each revision the spec rolls out is
/// stored before its Deployment is written, then the Deployments, Services
/// and routes; the templates of deleted revisions are pruned with them. A
/// failed write stops the writes after it (they would most likely fail the
/// same way) but not the reconcile.
pub(crate) async fn run(
    ctx: &Context,
    plan: &ReleasePlan,
    seen: &Seen,
    decision: &Decision,
) -> Outcome {
    let ns = &seen.ns;
    // Config first: a revision's Deployment is created only once the copies
    // its pods read exist.
    let copied = match &seen.obs.target {
        Ok(t) => {
            let carried_by = super::config::carried_by(t);
            super::config::act(ctx, plan, ns, &decision.config, &carried_by).await
        }
        Err(_) => super::config::Copied {
            waiting: std::collections::BTreeSet::default(),
            refusal: None,
            pruned: Ok(()),
        },
    };
    let (waiting, config) = (copied.waiting, copied.pruned);
    // The revisions' templates are stored beside the Deployment writes, not
    // before them: neither reads the other's result (a failed store is
    // retried by the next reconcile), and a new revision's Deployment then
    // waits one round trip less.
    let recording = async {
        if seen.obs.deleting {
            Ok(())
        } else {
            store_templates(ctx, plan, ns, decision).await
        }
    };
    let (recorded, acted) = futures::join!(recording, objects(ctx, plan, seen, &waiting, decision));
    // A refused copy is reported once the other writes went through (they
    // do not depend on it: only its own revision's Deployment waits).
    let acted = match (acted, copied.refusal) {
        (Acted::Done, Some(r)) => Acted::Refused(r),
        (acted, _) => acted,
    };
    match acted {
        Acted::Done => Outcome {
            refusal: None,
            namespace_terminating: false,
            recorded,
            pruned: prune_templates(ctx, ns, &seen.owned, &seen.stored, decision).await,
            config,
        },
        Acted::Refused(r) => Outcome {
            refusal: Some(r),
            namespace_terminating: false,
            recorded,
            pruned: Ok(()),
            config,
        },
        Acted::NamespaceTerminating => Outcome {
            refusal: None,
            namespace_terminating: true,
            recorded: Ok(()),
            pruned: Ok(()),
            config: Ok(()),
        },
    }
}

/// The Deployments, then the adopted ones, the traffic and the scales, each
/// once the one before went through.
async fn objects(
    ctx: &Context,
    plan: &ReleasePlan,
    seen: &Seen,
    waiting: &std::collections::BTreeSet<String>,
    decision: &Decision,
) -> Acted {
    let ns = &seen.ns;
    let written = (&seen.owned[..], &seen.stored[..]);
    let acted = match deployments(ctx, plan, ns, written, waiting, decision).await {
        Acted::Done => super::stateful::act(ctx, plan, seen, waiting, decision).await,
        other => other,
    };
    let acted = match acted {
        Acted::Done => super::daemon::act(ctx, plan, seen, waiting, decision).await,
        other => other,
    };
    let acted = match acted {
        Acted::Done => super::adopt::act(ctx, plan, ns, &seen.obs.adopted, &decision.adopt).await,
        other => other,
    };
    let acted = match acted {
        Acted::Done => super::traffic::act(ctx, plan, ns, &seen.services, &decision.traffic).await,
        other => other,
    };
    match acted {
        Acted::Done => {
            super::autoscale::act(ctx, plan, ns, (&seen.scales, &seen.hpas), &decision.scales).await
        }
        other => other,
    }
}

/// The Jobs of Job gates: never while a write of the plan's objects is
/// refused (`held`), and a failure holds nothing else (the gate waits for
/// its Job). The refused creates are remembered for the next observation.
pub(crate) async fn jobs(
    ctx: &Context,
    plan: &ReleasePlan,
    key: &ObjectRef<ReleasePlan>,
    held: bool,
    decision: &Decision,
) -> Result<(), Error> {
    if held {
        return Ok(());
    }
    let ns = plan.namespace().ok_or(Error::NoNamespace)?;
    let mut refused = Vec::new();
    let done = super::jobs::act(ctx, plan, &ns, &decision.jobs, &mut refused).await;
    ctx.memory.with(key, |m| m.job_refusals = refused);
    done
}

/// Applies the Deployment intents and deletions that differ from the cluster;
/// a new Deployment of a component in `waiting` (its config copies are not
/// there yet) is not created.
pub(crate) async fn deployments(
    ctx: &Context,
    plan: &ReleasePlan,
    ns: &str,
    (seen_deployments, stored): (&[Arc<CachedDeployment>], &[Arc<CachedRevision>]),
    waiting: &std::collections::BTreeSet<String>,
    decision: &Decision,
) -> Acted {
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    let deleting = plan.metadata.deletion_timestamp.is_some();
    let plan_key = ObjectRef::from_obj(plan);
    ctx.memory.with(&plan_key, |m| {
        m.keep_checked(|name| decision.deployments.iter().any(|i| i.name == name));
    });
    for intent in &decision.deployments {
        let observed = seen_deployments
            .iter()
            .find(|d| d.name_any() == intent.name);
        if deleting {
            // While the plan is deleted, only scale what exists: never create (the
            // namespace may be terminating, where every create is refused), and
            // never apply the whole object (the garbage collector may be stripping
            // owner references for orphan propagation; an apply would put them back).
            let Some(o) = observed else {
                continue;
            };
            if o.replicas() != Some(intent.replicas) {
                info!(deployment = %intent.name, replicas = intent.replicas, "scaling");
                let patch = serde_json::json!({"spec": {"replicas": intent.replicas}});
                match api
                    .patch(&intent.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => ctx.metrics.write("apply"),
                    Err(e) if is_not_found(&e) => {}
                    // The deletion proceeds anyway once nothing is left to protect.
                    Err(e) if decision.finalize => {
                        warn!(deployment = %intent.name, error = %e, "scaling during deletion failed");
                    }
                    Err(e) => return failed_write(&intent.name, &e),
                }
            }
            continue;
        }
        if observed.is_none() && waiting.contains(&intent.component) {
            continue;
        }
        let owned = deployment::should_own(plan, observed.map(|d| &d.metadata));
        // Found up to date before, and neither the intent nor the object has
        // changed since: no template to parse, no comparison.
        let checked = observed.map(|o| checked_key(plan, intent, owned, o));
        if let Some(k) = checked
            && ctx
                .memory
                .read(&plan_key, |m| m.checked(&intent.name) == Some(k))
                .unwrap_or(false)
        {
            continue;
        }
        let template =
            match template_of(ctx, ns, (seen_deployments, stored), intent, observed).await {
                Ok(Some(t)) => t,
                Ok(None) => continue,
                Err(acted) => return acted,
            };
        let desired = deployment::build(plan, intent, &template, owned);
        if observed.is_some_and(|o| deployment::up_to_date(&desired, o)) {
            if let Some(k) = checked {
                ctx.memory
                    .with(&plan_key, |m| m.set_checked(&intent.name, k));
            }
            continue;
        }
        info!(deployment = %intent.name, replicas = intent.replicas, "applying");
        match api
            .patch(
                &intent.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&desired),
            )
            .await
        {
            Ok(written) => {
                ctx.metrics.write("apply");
                remember_deployment(ctx, &plan_key, &written);
            }
            Err(e) => {
                if !namespace_terminating(&e) {
                    warn!(deployment = %intent.name, error = %e, "Deployment write failed");
                }
                return failed_write(&intent.name, &e);
            }
        }
    }
    for name in &decision.delete {
        info!(deployment = %name, "deleting old revision");
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => ctx.metrics.write("delete"),
            Err(e) if is_not_found(&e) => {}
            Err(e) if deleting && decision.finalize => {
                warn!(deployment = %name, error = %e, "delete during deletion failed");
            }
            Err(e) => return failed_write(name, &e),
        }
    }
    Acted::Done
}

/// The template an intent's Deployment is written with: the spec's, the one
/// it runs, or, when it is gone, the one stored for its revision; a
/// baseline not yet there takes its stable revision's, from that revision's
/// Deployment or as stored. `None`: none to be had (logged).
async fn template_of<'a>(
    ctx: &Context,
    ns: &str,
    (seen, stored): (&[Arc<CachedDeployment>], &[Arc<CachedRevision>]),
    intent: &'a crate::plan::DeploymentIntent,
    observed: Option<&Arc<CachedDeployment>>,
) -> Result<Option<std::borrow::Cow<'a, PodTemplateSpec>>, Acted> {
    use std::borrow::Cow;
    let of = match (&intent.template, observed) {
        (TemplateSource::Spec(t), _) => return Ok(Some(Cow::Borrowed(&**t))),
        (TemplateSource::Existing | TemplateSource::Of(_), Some(d)) => {
            return Ok(Some(Cow::Owned(d.template())));
        }
        (TemplateSource::Of(of), None) => {
            let source = seen.iter().find(|d| {
                d.labels.get(crate::api::LABEL_COMPONENT) == Some(intent.component.as_str())
                    && d.labels.get(crate::api::LABEL_REVISION) == Some(of.as_str())
            });
            if let Some(d) = source {
                return Ok(Some(Cow::Owned(d.template())));
            }
            of.as_str()
        }
        // Gone, and the spec has moved on: the template stored for the revision.
        (TemplateSource::Existing, None) => intent.hash.as_str(),
    };
    let revision = (&*intent.component, of, &*intent.name);
    Ok(
        super::stored::template(ctx, ns, stored, revision, intent.replicas)
            .await?
            .map(Cow::Owned),
    )
}

/// What decides whether an observed Deployment matches its intent, hashed:
/// the intent (its template by revision: a spec template hashes to its
/// revision, an existing one is the object's own), the plan it is owned by,
/// and of the object its spec's generation (any change of the spec by anyone
/// bumps it) and the metadata the desired object sets. Equal keys, equal
/// verdicts: a Deployment found up to date is not parsed again until one of
/// these moves.
fn checked_key(
    plan: &ReleasePlan,
    intent: &crate::plan::DeploymentIntent,
    owned: bool,
    o: &CachedDeployment,
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    (
        &plan.metadata.name,
        &plan.metadata.namespace,
        &plan.metadata.uid,
    )
        .hash(&mut h);
    (
        &intent.name,
        &intent.component,
        &intent.hash,
        intent.replicas,
    )
        .hash(&mut h);
    matches!(
        intent.template,
        TemplateSource::Existing | TemplateSource::Of(_)
    )
    .hash(&mut h);
    owned.hash(&mut h);
    let m = &o.metadata;
    (&m.uid, m.generation, &m.annotations).hash(&mut h);
    o.labels.iter().for_each(|l| l.hash(&mut h));
    for r in m.owner_references.iter().flatten() {
        (
            &r.api_version,
            &r.kind,
            &r.name,
            &r.uid,
            r.controller,
            r.block_owner_deletion,
        )
            .hash(&mut h);
    }
    h.finish()
}

/// Stores the template of every revision the spec rolls out in its
/// ControllerRevision, looking before it writes. A failed write is reported
/// (the first one) but holds nothing: the Deployments are written anyway.
pub(crate) async fn store_templates(
    ctx: &Context,
    plan: &ReleasePlan,
    ns: &str,
    decision: &Decision,
) -> Result<(), Error> {
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
    let plan_name = plan.name_any();
    let key = ObjectRef::from_obj(plan);
    let mut failed = None;
    let spec_templates = decision
        .deployments
        .iter()
        .map(|i| (&i.component, &i.hash, &i.template))
        .chain(
            decision
                .stateful_sets
                .iter()
                .map(|i| (&i.component, &i.hash, &i.template)),
        )
        .chain(
            decision
                .daemon_sets
                .iter()
                .map(|i| (&i.component, &i.hash, &i.template)),
        );
    for (component, hash, template) in spec_templates {
        let TemplateSource::Spec(template) = template else {
            continue;
        };
        let name = controller_revision::name(&plan_name, component, hash);
        let existing = latest_template(ctx, &key, ns, &name);
        let write = controller_revision::to_write(
            plan,
            component,
            hash,
            template,
            decision.status.rollout_count,
            existing.as_deref(),
        );
        let res = match write {
            Write::Nothing => continue,
            Write::Foreign => {
                warn!(controller_revision = %name, "held by another controller: the template is stored once it is gone");
                continue;
            }
            Write::Apply(cr) => {
                info!(controller_revision = %name, "storing the revision's template");
                apply_template(ctx, &key, &api, &name, &cr).await
            }
            Write::Relabel(meta) => {
                info!(controller_revision = %name, "putting back the stored template's labels and owner");
                let patch = controller_revision::relabel_patch(&meta);
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(written) => {
                        ctx.metrics.write("template");
                        remember_template(ctx, &key, &name, &written);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Write::Replace { uid, with } => {
                warn!(controller_revision = %name, "it stores another template: replacing it");
                match delete_template(ctx, &api, &name, uid).await {
                    Ok(()) => apply_template(ctx, &key, &api, &name, &with).await,
                    Err(e) => Err(e),
                }
            }
        };
        match res {
            Ok(()) => {}
            // The plan's own deletion follows.
            Err(e) if namespace_terminating(&e) => return Ok(()),
            Err(e) => {
                warn!(controller_revision = %name, error = %e, "storing the template failed");
                failed.get_or_insert(Error::Template { name, source: e });
            }
        }
    }
    failed.map_or(Ok(()), Err)
}

/// Deletes the ControllerRevision of every revision Deployment the decision
/// deleted (history beyond the limit, components gone).
pub(crate) async fn prune_templates(
    ctx: &Context,
    ns: &str,
    owned: &[Arc<CachedDeployment>],
    stored: &[Arc<CachedRevision>],
    decision: &Decision,
) -> Result<(), Error> {
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
    let mut failed = None;
    for deleted in &decision.delete {
        let Some(rev) = owned
            .iter()
            .find(|d| &d.name_any() == deleted)
            .and_then(|d| observe::revision_of_cached(d))
        else {
            continue;
        };
        let Some(cr) =
            controller_revision::find(stored.iter().map(AsRef::as_ref), &rev.component, &rev.hash)
        else {
            continue;
        };
        let name = cr.name_any();
        info!(controller_revision = %name, "deleting the stored template of an old revision");
        let uid = cr.uid().unwrap_or_default();
        if let Err(e) = delete_template(ctx, &api, &name, uid).await {
            warn!(controller_revision = %name, error = %e, "deleting the stored template failed");
            failed.get_or_insert(Error::Template { name, source: e });
        }
    }
    failed.map_or(Ok(()), Err)
}

/// How long the answer to a ControllerRevision apply stands in for the cache.
pub(crate) const WRITTEN_TEMPLATE_TTL: Duration = Duration::from_secs(30);

/// The ControllerRevision `name` as last seen: the cache's copy, or the
/// answer to this process's own apply while the cache has not caught up (a
/// reconcile right after the write would otherwise write it again).
pub(crate) fn latest_template(
    ctx: &Context,
    key: &ObjectRef<ReleasePlan>,
    ns: &str,
    name: &str,
) -> Option<Arc<CachedRevision>> {
    let cached = ctx.templates.get(ns, name);
    ctx.memory
        .with(key, |m| {
            let (at, written) = m.written_templates.get(name).cloned()?;
            // Long enough for any watch to deliver it: a copy older than that
            // may have been deleted since, and the cache is the truth again.
            if at.elapsed() > WRITTEN_TEMPLATE_TTL {
                m.written_templates.remove(name);
                return None;
            }
            match &cached {
                // The cache has it (or newer): the written copy is no longer needed.
                Some(c) if version_of(&**c) >= version_of(&*written) => {
                    m.written_templates.remove(name);
                    None
                }
                _ => Some(written),
            }
        })
        .or(cached)
}

/// Keeps the answer to a Deployment apply, in the cache's form.
fn remember_deployment(ctx: &Context, key: &ObjectRef<ReleasePlan>, written: &Deployment) {
    let Some(name) = written.metadata.name.clone() else {
        return;
    };
    if let Ok(mut d) =
        serde_json::to_value(written).and_then(serde_json::from_value::<CachedDeployment>)
    {
        super::trim::deployment(&mut d);
        ctx.memory.with(key, |m| {
            m.written_deployments
                .insert(name, (Instant::now(), Arc::new(d)));
        });
    }
}

pub(crate) async fn apply_template(
    ctx: &Context,
    key: &ObjectRef<ReleasePlan>,
    api: &Api<ControllerRevision>,
    name: &str,
    cr: &ControllerRevision,
) -> Result<(), kube::Error> {
    let written = api
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(cr),
        )
        .await?;
    ctx.metrics.write("template");
    remember_template(ctx, key, name, &written);
    Ok(())
}

/// Keeps the answer to a ControllerRevision write until the cache has it,
/// in the cache's form (one that does not convert is simply not kept).
fn remember_template(
    ctx: &Context,
    key: &ObjectRef<ReleasePlan>,
    name: &str,
    written: &ControllerRevision,
) {
    if let Ok(c) = serde_json::to_value(written).and_then(serde_json::from_value::<CachedRevision>)
    {
        ctx.memory.with(key, |m| {
            m.written_templates
                .insert(name.to_string(), (Instant::now(), Arc::new(c)));
        });
    }
}

/// Deletes the ControllerRevision of that uid (never a newer one of the same
/// name); one already gone is fine.
pub(crate) async fn delete_template(
    ctx: &Context,
    api: &Api<ControllerRevision>,
    name: &str,
    uid: String,
) -> Result<(), kube::Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(name, &params).await {
        Ok(_) => {
            ctx.metrics.write("template");
            Ok(())
        }
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}
