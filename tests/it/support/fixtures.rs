//! Fixtures: pod templates, components and ReleasePlan objects (data only;
//! `plans` reads and writes them on the cluster).

use releaseplan::api::ReleasePlan;
use serde_json::{Value, json};

/// A pod template running `image`.
pub fn template(image: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": "shop"}},
        "spec": {"containers": [{"name": "app", "image": image}]}
    })
}

/// A pod template running `image` with a kwok fault annotation.
pub fn faulty_template(image: &str, fault: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": "shop"}, "annotations": {"kwok.releaseplan.io/fault": fault}},
        "spec": {"containers": [{"name": "app", "image": image}]}
    })
}

/// A ReleasePlan object.
pub fn plan(name: &str, spec: Value) -> ReleasePlan {
    serde_json::from_value(json!({
        "apiVersion": "releaseplan.io/v1alpha1",
        "kind": "ReleasePlan",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("ReleasePlan object")
}

/// A component named `web` with `replicas` pods of [`template`]`(image)`.
pub fn web(image: &str, replicas: i32) -> Value {
    web_with(template(image), replicas)
}

/// A component named `web` with `replicas` pods of `template`.
pub fn web_with(template: Value, replicas: i32) -> Value {
    json!({"name": "web", "replicas": replicas, "template": template})
}

/// A pod template the CRD accepts but Deployment validation refuses: a CPU
/// request above its limit.
pub fn refused_template() -> Value {
    json!({
        "metadata": {"labels": {"app": "shop"}},
        "spec": {"containers": [{"name": "app", "image": "shop:bad",
            "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}
    })
}

/// A Deployment `name` of `replicas` kwok pods labelled `app: web` and
/// `releaseplan.io/revision: <revision>`: the pods a hand-written Service of
/// the traffic tests selects (their IPs are never contacted).
pub fn revision_deployment(name: &str, revision: &str, replicas: i32) -> Value {
    let labels = json!({"app": "web", "releaseplan.io/revision": revision});
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": format!("web:{revision}")}]}
            }
        }
    })
}

/// A Service `name` on port 8080 selecting the pods of `revision`
/// ([`revision_deployment`]).
pub fn revision_service(name: &str, revision: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": {"app": "web", "releaseplan.io/revision": revision},
            "ports": [{"port": 8080, "targetPort": 8080}]
        }
    })
}
