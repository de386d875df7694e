//! From cluster objects to the pure core's observation: small pure helpers.

use crate::api::{ANNOTATION_REQUEST, ReleasePlan};
use crate::plan::{Action, InvalidRequest, Request};
use kube::ResourceExt;

use crate::api::cached::CachedDeployment;
use crate::plan::RevisionObs;

/// The core's reader of a revision Deployment, shared with the plugin.
pub use crate::plan::revision_of;

/// [`revision_of`] for a Deployment as the cache holds it.
pub fn revision_of_cached(d: &CachedDeployment) -> Option<RevisionObs> {
    crate::plan::revision_from(
        &d.metadata,
        |k| d.labels.get(k),
        d.replicas(),
        d.status.as_ref(),
    )
}

/// The request in the plan's annotation, `<action>/<id>` (for example
/// `promote/1732870000-ab12`), unless already acknowledged. An unknown action
/// is reported as an error string so the controller can say so in an event.
pub fn pending_request(plan: &ReleasePlan) -> Result<Option<Request>, InvalidRequest> {
    let Some(raw) = plan.annotations().get(ANNOTATION_REQUEST) else {
        return Ok(None);
    };
    let (action, id) = raw.split_once('/').unwrap_or((raw.as_str(), raw.as_str()));
    let acknowledged = plan
        .status
        .as_ref()
        .and_then(|s| s.acknowledged_request.as_deref());
    if acknowledged == Some(raw.as_str()) {
        return Ok(None);
    }
    let _ = id;
    match Action::parse(action) {
        Some(action) => Ok(Some(Request {
            id: raw.clone(),
            action,
        })),
        None => Err(InvalidRequest {
            raw: raw.clone(),
            message: format!(
                "unknown request {raw:?} in annotation {ANNOTATION_REQUEST}: expected promote, promote-full, abort, retry, pause or resume"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{LABEL_COMPONENT, LABEL_REVISION};
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::json;

    fn plan(annotation: Option<&str>, acked: Option<&str>) -> ReleasePlan {
        let mut v = json!({
            "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
            "metadata": {"name": "shop", "namespace": "prod"},
            "spec": {"components": []},
            "status": {}
        });
        if let Some(a) = annotation {
            v["metadata"]["annotations"] = json!({ANNOTATION_REQUEST: a});
        }
        if let Some(a) = acked {
            v["status"]["acknowledgedRequest"] = json!(a);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn reads_requests_once() {
        assert_eq!(pending_request(&plan(None, None)), Ok(None));
        let r = pending_request(&plan(Some("promote/7"), None))
            .unwrap()
            .unwrap();
        assert_eq!(r.action, Action::Promote { full: false });
        assert_eq!(r.id, "promote/7");
        assert_eq!(
            pending_request(&plan(Some("promote/7"), Some("promote/7"))),
            Ok(None)
        );
        assert!(pending_request(&plan(Some("explode/1"), None)).is_err());
    }

    #[test]
    fn ready_counts_only_updated_pods() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "shop-web-x", "labels": {LABEL_COMPONENT: "web", LABEL_REVISION: "x"}},
            "spec": {"replicas": 3, "selector": {}, "template": {}},
            "status": {"replicas": 4, "readyReplicas": 3, "updatedReplicas": 1}
        }))
        .unwrap();
        let r = revision_of(&d).unwrap();
        assert_eq!((r.replicas, r.ready, r.current), (3, 1, 4));
        let cached: CachedDeployment =
            serde_json::from_value(serde_json::to_value(&d).unwrap()).unwrap();
        assert_eq!(revision_of_cached(&cached), Some(r));
    }
}
