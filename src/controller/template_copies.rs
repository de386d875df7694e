//! The controller's side of template copies: the Secrets of a plan's
//! namespace that keep the content its template gates read for a step, so
//! that status records only a hash and the plan's readers (`view`, who cannot
//! read Secrets) never see a template's URL or headers. Cached by a watch of
//! the Secrets that carry [`LABEL_TEMPLATE_COPY`] (no other Secret is
//! listed); created and deleted as the core decides
//! ([`crate::gates::template::copy_intents`]).

use super::FIELD_MANAGER;
use super::context::Context;
use super::error::{Error, is_not_found, namespace_terminating};
use super::index::plan_objects;
use crate::api::template::{GateTemplateSpec, LABEL_TEMPLATE_COPY, TEMPLATE_COPY_KEY};
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
    let mut contents = BTreeMap::new();
    let mut copies = Vec::new();
    for s in plan_objects(&ctx.template_copies, ns, plan, uid) {
        let Some(hash) = s.labels().get(LABEL_TEMPLATE_COPY).cloned() else {
            continue;
        };
        let content = s
            .data
            .as_ref()
            .and_then(|d| d.get(TEMPLATE_COPY_KEY))
            .and_then(|b| serde_json::from_slice::<GateTemplateSpec>(&b.0).ok());
        if let Some(c) = content {
            contents.insert(hash.clone(), c);
        }
        copies.push(CopyObs {
            name: s.name_any(),
            hash,
        });
    }
    (contents, copies)
}

/// Keeps of a cached copy what is read: labels, owner, data.
pub fn trim(s: &mut Secret) {
    s.metadata.managed_fields = None;
    s.metadata.annotations = None;
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
