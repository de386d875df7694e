//! What the caches keep of each object: only the fields a reconcile reads.
//!
//! Every cached object stays in memory for the life of the process, so at
//! thousands of plans the fields nobody reads (managedFields above all, which
//! is often larger than the rest of the object) make most of the footprint.
//! Each function here is applied to a watched object before it is cached.

use crate::api::ReleasePlan;
use crate::api::gateway::HTTPRoute;
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod, PodStatus, Service};
use kube::ResourceExt;

/// The annotation `kubectl apply` (client-side) keeps a whole copy of the
/// object in; never read by the operator.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A plan keeps everything but managedFields and kubectl's last-applied copy:
/// spec, status and the request annotation are all read, and the status write
/// sends status only (the API server ignores metadata on `/status`).
pub fn plan(p: &mut ReleasePlan) {
    p.managed_fields_mut().clear();
    p.annotations_mut().remove(LAST_APPLIED);
}

/// A Deployment keeps its metadata (labels, owner references) and spec (the
/// apply compares it with the desired one, and a revision whose template left
/// the spec is re-applied from it) and the replica counts of its status;
/// managedFields, annotations and status conditions are never read.
pub fn deployment(d: &mut Deployment) {
    d.managed_fields_mut().clear();
    d.annotations_mut().clear();
    if let Some(s) = d.status.as_mut() {
        s.conditions = None;
    }
}

/// A pod keeps its labels (plan, component, revision) and, of each
/// container's status, what the pod checks read: name, readiness, restart
/// count and the waiting state.
pub fn pod(p: &mut Pod) {
    p.managed_fields_mut().clear();
    p.annotations_mut().clear();
    p.owner_references_mut().clear();
    p.spec = None;
    p.status = p.status.take().map(|s| PodStatus {
        init_container_statuses: s.init_container_statuses.map(containers),
        container_statuses: s.container_statuses.map(containers),
        ..PodStatus::default()
    });
}

fn containers(all: Vec<ContainerStatus>) -> Vec<ContainerStatus> {
    all.into_iter()
        .map(|c| ContainerStatus {
            name: c.name,
            ready: c.ready,
            restart_count: c.restart_count,
            state: c.state.map(|s| ContainerState {
                waiting: s.waiting,
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        })
        .collect()
}

/// A Job keeps its labels, owner references, creation time and status
/// conditions: what a Job gate reads. Its spec (a whole pod template) is not.
pub fn job(j: &mut Job) {
    j.managed_fields_mut().clear();
    j.annotations_mut().clear();
    j.spec = None;
    j.status = j.status.take().map(|s| JobStatus {
        conditions: s.conditions,
        ..JobStatus::default()
    });
}

/// A Service keeps its metadata and spec (the selector is read, the spec
/// compared); managedFields, annotations and status are never read.
pub fn service(s: &mut Service) {
    s.managed_fields_mut().clear();
    s.annotations_mut().clear();
    s.status = None;
}

/// An HTTPRoute keeps its metadata and the spec fields the operator knows.
pub fn route(r: &mut HTTPRoute) {
    r.managed_fields_mut().clear();
    r.annotations_mut().clear();
}

/// A ControllerRevision keeps everything but managedFields: its data is the
/// stored template.
pub fn controller_revision(cr: &mut ControllerRevision) {
    cr.managed_fields_mut().clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates::pods::detect;
    use serde_json::json;

    fn managed() -> serde_json::Value {
        json!([{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {}}}])
    }

    #[test]
    fn plans_drop_managed_fields_and_keep_what_is_read() {
        let mut p: ReleasePlan = serde_json::from_value(json!({
            "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
            "metadata": {"name": "shop", "namespace": "prod", "uid": "u",
                "managedFields": managed(),
                "annotations": {LAST_APPLIED: "{...}", crate::api::ANNOTATION_REQUEST: "promote/1"}},
            "spec": {"components": []},
            "status": {"phase": "Stable"}
        }))
        .unwrap();
        let spec = p.spec.clone();
        let status = p.status.clone();
        plan(&mut p);
        assert!(p.metadata.managed_fields.as_ref().is_none_or(Vec::is_empty));
        assert_eq!(
            p.annotations().keys().collect::<Vec<_>>(),
            [crate::api::ANNOTATION_REQUEST]
        );
        assert_eq!(p.spec, spec);
        assert_eq!(p.status, status);
    }

    #[test]
    fn deployments_keep_spec_labels_owners_and_replica_counts() {
        let mut d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "shop-web-x", "namespace": "prod",
                "labels": {"releaseplan.io/plan": "shop"},
                "annotations": {"deployment.kubernetes.io/revision": "1"},
                "ownerReferences": [{"apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
                    "name": "shop", "uid": "u", "controller": true}],
                "managedFields": managed()},
            "spec": {"replicas": 2, "selector": {}, "template": {"spec": {"containers": [{"name": "app", "image": "a:1"}]}}},
            "status": {"replicas": 2, "readyReplicas": 1, "updatedReplicas": 2,
                "conditions": [{"type": "Available", "status": "True", "message": "long text"}]}
        }))
        .unwrap();
        let spec = d.spec.clone();
        deployment(&mut d);
        assert!(d.metadata.managed_fields.unwrap_or_default().is_empty());
        assert!(d.metadata.annotations.unwrap_or_default().is_empty());
        assert_eq!(d.metadata.labels.unwrap().len(), 1);
        assert_eq!(d.metadata.owner_references.unwrap().len(), 1);
        assert_eq!(d.spec, spec);
        let s = d.status.unwrap();
        assert_eq!(
            (s.replicas, s.ready_replicas, s.updated_replicas),
            (Some(2), Some(1), Some(2))
        );
        assert!(s.conditions.is_none());
    }

    fn failing_pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "prod", "labels": {"releaseplan.io/plan": "shop"},
                "annotations": {"a": "b"}, "managedFields": managed(),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r"}]},
            "spec": {"containers": [{"name": "app", "image": "a:1"}]},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "False"}],
                "podIP": "10.0.0.1",
                "initContainerStatuses": [{"name": "init", "image": "i:1", "imageID": "sha", "ready": true,
                    "restartCount": 0, "state": {"terminated": {"exitCode": 0}}}],
                "containerStatuses": [{"name": "app", "image": "a:1", "imageID": "sha256:abc",
                    "containerID": "containerd://x", "ready": false, "restartCount": 9,
                    "lastState": {"terminated": {"exitCode": 1, "message": "boom"}},
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn pods_keep_only_labels_and_container_states() {
        let mut p = failing_pod();
        let before = detect([&p], 3, true);
        pod(&mut p);
        // What the pod checks find is unchanged.
        assert_eq!(detect([&p], 3, true), before);
        assert_eq!(before.len(), 2);
        assert!(p.spec.is_none());
        assert!(p.metadata.managed_fields.as_ref().is_none_or(Vec::is_empty));
        assert!(p.metadata.annotations.unwrap_or_default().is_empty());
        assert!(p.metadata.owner_references.unwrap_or_default().is_empty());
        assert_eq!(p.metadata.labels.unwrap().len(), 1);
        let s = p.status.unwrap();
        assert!(s.phase.is_none() && s.conditions.is_none() && s.pod_ip.is_none());
        let c = &s.container_statuses.unwrap()[0];
        assert_eq!(
            (c.name.as_str(), c.restart_count, c.ready),
            ("app", 9, false)
        );
        assert!(c.image.is_empty() && c.image_id.is_empty() && c.container_id.is_none());
        assert!(c.last_state.is_none());
        let state = c.state.as_ref().unwrap();
        assert!(state.waiting.is_some() && state.running.is_none());
        let init = &s.init_container_statuses.unwrap()[0];
        assert!(init.state.as_ref().unwrap().terminated.is_none());
    }

    #[test]
    fn trimmed_pods_are_smaller_than_with_metadata_and_spec_trimmed_only() {
        let full = failing_pod();
        let mut trimmed = full.clone();
        pod(&mut trimmed);
        // The trim before: managedFields, annotations and spec dropped.
        let mut before = full.clone();
        before.managed_fields_mut().clear();
        before.annotations_mut().clear();
        before.spec = None;
        let size = |p: &Pod| serde_json::to_vec(p).unwrap().len();
        assert!(
            size(&trimmed) * 3 < size(&before) * 2,
            "{} vs {} (untrimmed {})",
            size(&trimmed),
            size(&before),
            size(&full)
        );
    }
}
