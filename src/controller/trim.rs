//! What the caches keep of each object: only the fields a reconcile reads.
//!
//! Every cached object stays in memory for the life of the process, so at
//! thousands of plans the fields nobody reads (managedFields above all, which
//! is often larger than the rest of the object) make most of the footprint.
//! Each function here is applied to a watched object before it is cached;
//! the types of [`crate::api::cached`] skip managedFields while decoding.

use crate::api::cached::{CachedDeployment, CachedPod};
use k8s_openapi::api::apps::v1::DeploymentStatus;
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::Service;
use kube::{Resource, ResourceExt};

/// The annotation `kubectl apply` (client-side) keeps a whole copy of the
/// object in; never read by the operator.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A plan keeps everything but managedFields and kubectl's last-applied copy:
/// spec, status and the request annotation are all read, and the status write
/// sends status only (the API server ignores metadata on `/status`).
pub fn plan<K: Resource>(p: &mut K) {
    p.managed_fields_mut().clear();
    p.annotations_mut().remove(LAST_APPLIED);
}

/// A Deployment is decoded as a [`CachedDeployment`]: its metadata (labels,
/// owner references), its spec as JSON text (the apply compares it with the
/// desired one, and a revision whose template left the spec is re-applied
/// from it) and of its status the three counts read (`replicas`,
/// `readyReplicas`, `updatedReplicas`), without managedFields; annotations
/// (but an adopted Deployment's original replicas), the other counts,
/// `observedGeneration` and conditions are never read. A status write that
/// changes only those (the controller manager writes `observedGeneration`
/// and `availableReplicas` apart from the counts) then leaves the cached
/// object equal, and wakes nothing.
pub fn deployment(d: &mut CachedDeployment) {
    // But for the replicas an adopted Deployment had (`adopt`): applied again
    // with every scale of it.
    d.annotations_mut()
        .retain(|k, _| k == crate::api::ANNOTATION_ADOPTED_REPLICAS);
    d.status = d.status.take().map(|s| DeploymentStatus {
        replicas: s.replicas,
        ready_replicas: s.ready_replicas,
        updated_replicas: s.updated_replicas,
        ..DeploymentStatus::default()
    });
}

/// A pod is decoded as a [`CachedPod`] (labels, and of each container's
/// status what the pod checks read: name, readiness, restart count and the
/// waiting state, without managedFields); of its metadata only the name and
/// namespace are read, and of its labels only `releaseplan.io/` ones (not the
/// template's own, nor pod-template-hash). The watch has taken the
/// resourceVersion before this.
pub fn pod(p: &mut CachedPod) {
    let meta = &mut p.metadata;
    meta.annotations = None;
    meta.owner_references = None;
    meta.generate_name = None;
    meta.uid = None;
    meta.resource_version = None;
    meta.creation_timestamp = None;
    // The node matters only for a DaemonSet component's pods.
    if p.labels
        .get(releaseplan_core::objects::stateful_set::LABEL_WORKLOAD)
        != Some("DaemonSet")
    {
        p.node = None;
    }
    p.labels.retain(|k, _| k.starts_with(OUR_LABELS));
}

/// The prefix of the labels the operator reads on pods.
const OUR_LABELS: &str = "releaseplan.io/";

/// Keeps of a cached template copy (a Secret) what is read: labels, owner,
/// data.
pub fn template_copy(s: &mut k8s_openapi::api::core::v1::Secret) {
    s.metadata.managed_fields = None;
    s.metadata.annotations = None;
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

/// A ComponentScale as cached: its spec (the autoscaler's replicas) and
/// status (what the operator last wrote), without managed fields.
pub fn scale(s: &mut crate::api::ComponentScale) {
    s.managed_fields_mut().clear();
    s.annotations_mut().clear();
}

/// An HPA as cached: its spec (compared before a write) and its conditions
/// (status says why it cannot scale), without managed fields.
pub fn hpa(h: &mut k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler) {
    h.managed_fields_mut().clear();
    h.annotations_mut().clear();
    if let Some(s) = h.status.as_mut() {
        s.current_metrics = None;
    }
}

/// A StatefulSet keeps its spec (compared with the desired one before an
/// apply, and its template re-applied in a rollback's first step); its pods
/// say what is ready, so its status is not kept.
pub fn stateful_set(s: &mut k8s_openapi::api::apps::v1::StatefulSet) {
    s.managed_fields_mut().clear();
    s.annotations_mut().clear();
    s.status = None;
}

/// A DaemonSet keeps its spec (compared before an apply; its template taken
/// back while its revision runs) and of its status what the core reads: the
/// nodes its controller counts and whether it has seen the latest spec. Its
/// pods say the rest; its other counts change with every pod and would wake
/// the plan for nothing.
pub fn daemon_set(d: &mut k8s_openapi::api::apps::v1::DaemonSet) {
    d.managed_fields_mut().clear();
    d.annotations_mut().clear();
    d.status = d
        .status
        .take()
        .map(|s| k8s_openapi::api::apps::v1::DaemonSetStatus {
            desired_number_scheduled: s.desired_number_scheduled,
            observed_generation: s.observed_generation,
            ..Default::default()
        });
}

/// A Service keeps its metadata and spec (the selector is read, the spec
/// compared); managedFields, annotations and status are never read.
pub fn service(s: &mut Service) {
    s.managed_fields_mut().clear();
    // Of the annotations, only the record of its InferencePool, which the
    // desired Service carries (else it would differ at every look).
    s.annotations_mut()
        .retain(|k, _| k == super::traffic::ANNOTATION_POOL);
    s.status = None;
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
        let mut p: crate::api::ReleasePlan = serde_json::from_value(json!({
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
        let mut d: CachedDeployment = serde_json::from_value(json!({
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
        assert_eq!(d.replicas(), Some(2));
        assert_eq!(
            d.template().spec.unwrap().containers[0].image.as_deref(),
            Some("a:1")
        );
        assert!(d.metadata.managed_fields.unwrap_or_default().is_empty());
        assert!(d.metadata.annotations.unwrap_or_default().is_empty());
        assert_eq!(d.labels.get("releaseplan.io/plan"), Some("shop"));
        assert_eq!(d.metadata.owner_references.unwrap().len(), 1);
        assert_eq!(d.spec, spec);
        let s = d.status.unwrap();
        assert_eq!(
            (s.replicas, s.ready_replicas, s.updated_replicas),
            (Some(2), Some(1), Some(2))
        );
        assert!(s.conditions.is_none());
    }

    /// A revision Deployment as the controller manager writes it while its
    /// pods come up, trimmed.
    fn deployment_with(status: serde_json::Value) -> CachedDeployment {
        let mut d: CachedDeployment = serde_json::from_value(json!({
            "metadata": {"name": "shop-web-x", "namespace": "prod", "generation": 2,
                "labels": {"releaseplan.io/plan": "shop"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "app", "image": "a:1"}]}}},
            "status": status
        }))
        .unwrap();
        deployment(&mut d);
        d
    }

    #[test]
    fn a_deployment_status_write_of_counts_nobody_reads_wakes_nothing() {
        use crate::controller::index::Wakes;
        let before = deployment_with(json!({"observedGeneration": 1, "replicas": 2,
            "updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1, "unavailableReplicas": 1}));
        // The controller manager's next writes: the generation observed,
        // then a pod available after minReadySeconds, then one terminating.
        for later in [
            json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                "readyReplicas": 1, "availableReplicas": 1, "unavailableReplicas": 1}),
            json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                "readyReplicas": 1, "availableReplicas": 2, "unavailableReplicas": 0}),
            json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1,
                "availableReplicas": 2, "terminatingReplicas": 1, "collisionCount": 1}),
        ] {
            let after = deployment_with(later.clone());
            assert!(!CachedDeployment::wakes(Some(&before), &after), "{later}");
        }
        // What the core reads wakes: a pod ready, pods created or updated.
        for later in [
            json!({"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}),
            json!({"replicas": 3, "updatedReplicas": 2, "readyReplicas": 1}),
            json!({"replicas": 2, "updatedReplicas": 1, "readyReplicas": 1}),
        ] {
            let after = deployment_with(later.clone());
            assert!(CachedDeployment::wakes(Some(&before), &after), "{later}");
        }
    }

    fn failing_pod() -> CachedPod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "prod", "uid": "u1", "resourceVersion": "9", "labels": {"releaseplan.io/plan": "shop", "app": "shop", "pod-template-hash": "5d8f"},
                "generateName": "shop-web-5d8f-", "annotations": {"a": "b"}, "managedFields": managed(),
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
        assert!(p.metadata.managed_fields.as_ref().is_none_or(Vec::is_empty));
        assert!(p.metadata.annotations.unwrap_or_default().is_empty());
        assert!(p.metadata.owner_references.unwrap_or_default().is_empty());
        assert_eq!(
            p.labels.iter().collect::<Vec<_>>(),
            [("releaseplan.io/plan", "shop")]
        );
        assert_eq!(p.metadata.uid, None);
        let s = p.status.unwrap();
        let c = &s.container_statuses[0];
        assert_eq!(
            (c.name.as_str(), c.restart_count, c.ready),
            ("app", 9, false)
        );
        assert!(c.state.as_ref().unwrap().waiting.is_some());
        let init = &s.init_container_statuses[0];
        assert!(init.state.as_ref().unwrap().waiting.is_none());
    }
}
