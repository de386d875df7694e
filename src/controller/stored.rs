//! The template of a revision the spec no longer has and whose object no
//! longer carries it (a Deployment deleted, a StatefulSet moved on): read
//! whole from the ControllerRevision the operator stored it in. Used by
//! every workload's writer.

use super::context::Context;
use super::outcome::{Acted, failed};
use crate::api::cached::CachedRevision;
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::{Api, ResourceExt};
use releaseplan_core::objects::controller_revision;
use std::sync::Arc;
use tracing::{info, warn};

/// The template stored for a revision whose Deployment is gone and which the
/// spec no longer has, read whole (the cache keeps only its hash): `None`
/// when none is stored or it is unusable (logged), a refusal when the read
/// fails.
pub(crate) async fn template(
    ctx: &Context,
    ns: &str,
    stored: &[Arc<CachedRevision>],
    (component, hash, object): (&str, &str, &str),
    replicas: i32,
) -> Result<Option<k8s_openapi::api::core::v1::PodTemplateSpec>, Acted> {
    let found = controller_revision::find(stored.iter().map(AsRef::as_ref), component, hash);
    let whole = match found {
        Some(cr) => {
            let name = cr.name_any();
            let revisions: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
            match revisions.get_opt(&name).await {
                Ok(whole) => whole,
                Err(e) => return Err(failed("ControllerRevision", &name, &e)),
            }
        }
        None => None,
    };
    match whole.map(|cr| controller_revision::template(&cr, hash)) {
        Some(Ok(t)) => {
            info!(object = %object, revision = %hash, "writing the revision's object from its stored template");
            Ok(Some(t))
        }
        Some(Err(e)) => {
            warn!(object = %object, revision = %hash, error = %e, "the revision's template is not in the spec nor in its object, and its stored template is not usable: cannot write it");
            Ok(None)
        }
        None => {
            if replicas > 0 {
                warn!(object = %object, revision = %hash, "the revision's template is not in the spec nor in its object, and no ControllerRevision stores it: cannot write it");
            }
            Ok(None)
        }
    }
}
