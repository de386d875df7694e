//! Shared test data of the plugin's unit tests.

use k8s_openapi::api::apps::v1::Deployment;
use serde_json::json;

pub fn plan_json() -> serde_json::Value {
    json!({
        "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
        "metadata": {"name": "shop", "namespace": "prod", "generation": 3},
        "spec": {
            "components": [
                {"name": "web", "replicas": 4, "template": {"spec": {"containers": [{"name": "web", "image": "web:2"}]}}},
                {"name": "worker", "replicas": 2, "template": {"spec": {"containers": [{"name": "w", "image": "worker:1"}]}}}
            ],
            "strategy": {"steps": [{"setWeight": 25}, {"pause": {}}, {"setWeight": 50}, {"pause": {"duration": "5m"}}]}
        },
        "status": {
            "phase": "RollingOut", "observedGeneration": 3,
            "currentRevision": "tn5wd9cz2h", "stableRevision": "x8r2kq7b4m",
            "currentStep": 1, "weight": 25,
            "message": "rolling out tn5wd9cz2h (step 2/4, weight 25%): waiting for promotion",
            "components": [
                {"name": "web", "currentHash": "web2hash22", "stableHash": "web1hash11", "replicas": 4,
                 "currentReplicas": 1, "currentReady": 1, "stableReplicas": 3, "stableReady": 3},
                {"name": "worker", "currentHash": "wrk1hash11", "stableHash": "wrk1hash11", "replicas": 2,
                 "currentReplicas": 2, "currentReady": 2, "stableReplicas": 2, "stableReady": 2}
            ],
            "gates": [{"name": "error-rate", "verdict": "Passed", "value": "0.01", "failures": 0}],
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "RollingOut", "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"},
                {"type": "Paused", "status": "True", "reason": "PauseStep", "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}
            ],
            "history": [
                {"number": 1, "revision": "x8r2kq7b4m", "outcome": "Promoted",
                 "startedAt": "2025-01-01T10:00:00Z", "finishedAt": "2025-01-01T10:02:13Z",
                 "reason": "all steps passed", "components": ["web=web1hash11", "worker=wrk1hash11"]}
            ],
            "rolloutCount": 2, "rolloutStartedAt": "2025-01-02T09:00:00Z"
        }
    })
}

pub fn deployment(
    name: &str,
    component: &str,
    hash: &str,
    replicas: i32,
    ready: i32,
    image: &str,
) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "releaseplan.io/plan": "shop", "releaseplan.io/component": component, "releaseplan.io/revision": hash}},
        "spec": {"replicas": replicas, "selector": {}, "template": {
            "metadata": {"labels": {"app": "shop", "releaseplan.io/plan": "shop", "releaseplan.io/component": component, "releaseplan.io/revision": hash}},
            "spec": {"containers": [{"name": "c", "image": image}]}}},
        "status": {"replicas": replicas, "readyReplicas": ready, "updatedReplicas": replicas}
    }))
    .unwrap()
}

/// The fixture plan as a typed object.
pub fn plan() -> crate::api::ReleasePlan {
    serde_json::from_value(plan_json()).unwrap()
}
