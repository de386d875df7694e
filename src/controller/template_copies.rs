//! The controller's side of template copies: the Secrets of a plan's
//! namespace that keep the content its template gates read for a step, so
//! that status records only a hash and the plan's readers (`view`, who cannot
//! read Secrets) never see a template's URL or headers. Cached by a watch of
//! the Secrets that carry [`LABEL_TEMPLATE_COPY`] (no other Secret is
//! listed); created and deleted as the core decides
//! ([`crate::gates::template::copy_intents`]).

use super::config_cache::Access;
use super::context::Context;
use super::error::{Error, is_not_found, namespace_terminating};
use super::index::{PlanCache, plan_objects};
use super::outcome::FIELD_MANAGER;
use crate::api::template::{
    GateTemplateSpec, LABEL_TEMPLATE_COPY, TEMPLATE_COPY_KEY, content_hash,
};
use crate::api::{LABEL_PLAN, ReleasePlan};
use crate::gates::template::{CopyIntents, CopyObs};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use std::collections::BTreeMap;
use tracing::{info, warn};

/// The `type` of a template copy's Secret.
pub const SECRET_TYPE: &str = "releaseplan.io/gate-template";

/// The plan's copies as cached: their content by hash (what a running step
/// read), and each copy's name and hash. A copy whose content does not parse
/// is listed (so it is pruned) but holds no content.
pub(crate) fn observe(
    ctx: &Context,
    ns: &str,
    plan: &str,
    uid: &str,
) -> (BTreeMap<String, GateTemplateSpec>, Vec<CopyObs>) {
    match ctx.config.of(ns) {
        Access::Granted(c) => read(&c.template_copies, ns, plan, uid),
        Access::Off | Access::Denied => (BTreeMap::new(), Vec::new()),
    }
}

/// [`observe`] from `cache`.
fn read(
    cache: &PlanCache<Secret>,
    ns: &str,
    plan: &str,
    uid: &str,
) -> (BTreeMap<String, GateTemplateSpec>, Vec<CopyObs>) {
    let mut contents = BTreeMap::new();
    let mut copies = Vec::new();
    for s in plan_objects(cache, ns, plan, uid) {
        let Some(label) = s.labels().get(LABEL_TEMPLATE_COPY).cloned() else {
            continue;
        };
        // The label is not trusted: anyone who may create or edit Secrets
        // in the namespace could swap a copy's content (a ClusterGateTemplate
        // Job's pod, exempt from the pod-security check, among them). A copy
        // counts only when the plan is its controller and its content hashes
        // to its label.
        if !s
            .owner_references()
            .iter()
            .any(|r| r.uid == uid && r.controller == Some(true))
        {
            continue;
        }
        let content = s
            .data
            .as_ref()
            .and_then(|d| d.get(TEMPLATE_COPY_KEY))
            .and_then(|b| serde_json::from_slice::<GateTemplateSpec>(&b.0).ok());
        let hash = match content {
            Some(c) if content_hash(&c) == label => {
                contents.insert(label.clone(), c);
                label
            }
            // Listed under what it holds, so that it is pruned and a true
            // copy made again; its content is never read.
            Some(c) => {
                warn!(secret = %s.name_any(), "a template copy's content does not match its hash: not used, deleted");
                content_hash(&c)
            }
            None => label,
        };
        copies.push(CopyObs {
            name: s.name_any(),
            hash,
        });
    }
    (contents, copies)
}

/// The Secret of a copy: labelled with the plan and the hash, owned by the
/// plan (it goes with it), immutable.
fn secret(plan: &ReleasePlan, name: &str, hash: &str, content: &[u8]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: plan.namespace(),
            labels: Some(BTreeMap::from([
                (LABEL_PLAN.to_string(), plan.name_any()),
                (LABEL_TEMPLATE_COPY.to_string(), hash.to_string()),
                (
                    crate::objects::deployment::MANAGED_BY.to_string(),
                    "releaseplan".to_string(),
                ),
            ])),
            owner_references: plan.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            TEMPLATE_COPY_KEY.to_string(),
            ByteString(content.to_vec()),
        )])),
        type_: Some(SECRET_TYPE.to_string()),
        immutable: Some(true),
        string_data: None,
    }
}

/// Creates the copies the decision names (one that exists already has the
/// content: it is named by its hash) and deletes the unused ones. Every
/// write is tried; the first failure is returned.
pub(crate) async fn act(
    ctx: &Context,
    plan: &ReleasePlan,
    ns: &str,
    intents: &CopyIntents,
) -> Result<(), Error> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    let mut failed = None;
    for c in &intents.create {
        let content = serde_json::to_vec(&c.content)?;
        match api
            .create(&pp, &secret(plan, &c.name, &c.hash, &content))
            .await
        {
            Ok(_) => {
                ctx.metrics.write("template");
                info!(copy = %c.name, "template gate: content kept for the step");
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) if namespace_terminating(&e) => return Ok(()),
            Err(e) => {
                warn!(copy = %c.name, error = %e, "template gate: creating the copy failed");
                failed.get_or_insert(Error::TemplateCopy {
                    name: c.name.clone(),
                    source: e,
                });
            }
        }
    }
    for name in &intents.delete {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                ctx.metrics.write("template");
                info!(copy = %name, "template gate: unused copy deleted");
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                warn!(copy = %name, error = %e, "template gate: deleting the copy failed");
                failed.get_or_insert(Error::TemplateCopy {
                    name: name.clone(),
                    source: e,
                });
            }
        }
    }
    failed.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher;

    fn plan() -> ReleasePlan {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
            "metadata": {"name": "shop", "namespace": "ns", "uid": "u1"},
            "spec": {"components": []}
        }))
        .unwrap()
    }

    fn content(url: &str) -> GateTemplateSpec {
        serde_json::from_value(serde_json::json!({
            "gate": {"webhook": {"url": url}}
        }))
        .unwrap()
    }

    #[test]
    fn a_copy_counts_only_when_the_plan_controls_it_and_its_content_is_its_hash() {
        let p = plan();
        let genuine = content("http://checks.example/a");
        let hash = content_hash(&genuine);
        let name = crate::api::template::copy_name("shop", &hash);
        let as_made = secret(&p, &name, &hash, &serde_json::to_vec(&genuine).unwrap());
        // The same label and owner, another content: swapped by hand.
        let swapped_content = content("http://attacker.example/b");
        let mut swapped = secret(
            &p,
            "shop-gate-template-other",
            &hash,
            &serde_json::to_vec(&swapped_content).unwrap(),
        );
        swapped.metadata.name = Some("shop-gate-template-other".into());
        // The right content and label, but no owner: not the operator's.
        let mut unowned = as_made.clone();
        unowned.metadata.name = Some("shop-gate-template-unowned".into());
        unowned.metadata.owner_references = None;

        let cache = PlanCache::<Secret>::empty();
        let mut writer = cache.writer();
        writer.apply(&watcher::Event::Init);
        for s in [as_made.clone(), swapped, unowned] {
            writer.apply(&watcher::Event::InitApply(s));
        }
        writer.apply(&watcher::Event::InitDone);

        let (contents, copies) = read(&cache, "ns", "shop", "u1");
        assert_eq!(contents.len(), 1);
        assert_eq!(
            contents.get(&hash),
            Some(&genuine),
            "the genuine copy is read"
        );
        let mut listed: Vec<(String, String)> =
            copies.into_iter().map(|c| (c.name, c.hash)).collect();
        listed.sort();
        assert_eq!(
            listed,
            vec![
                (name, hash),
                // Listed under what it holds: not wanted, so pruned.
                (
                    "shop-gate-template-other".to_string(),
                    content_hash(&swapped_content)
                ),
            ],
            "the unowned Secret is not listed (never deleted either)"
        );
    }
}
