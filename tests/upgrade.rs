//! The upgrade to `health.gates` keeps every gate of a plan written before
//! it: a plan whose four kinds of gates sit in the deprecated lists is
//! stored under the CRD of the release before `gates`
//! (tests/fixtures/releaseplan-crd-before-gates.yaml, the CRD of 6ffd4ff),
//! the CRD is upgraded to the current one, and each gate is still stored
//! and still runs under the current operator; and a plan one field manager
//! applied whole, when its lists were atomic, merges by key after the
//! upgrade (a second manager adds a component). This file holds one test on
//! purpose: it installs an older CRD on the cluster every other test uses,
//! and cargo runs test binaries one at a time; the current CRD is put back
//! whatever the test's outcome. (Its own binary, as tests/apiserver_restart.rs:
//! only separate binaries never run beside each other.)

// Test code may unwrap, expect and panic (the lint policy of Cargo.toml).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic
)]

#[path = "it/support/mod.rs"]
mod support;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use futures::FutureExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use releaseplan::api::template::GateTemplate;
use releaseplan::api::{Phase, ReleasePlan, Verdict};
use serde_json::{Value, json};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use support::fixtures::web;
use support::operator::Operator;
use support::servers::{Prometheus, serve};
use support::{Harness, JOB_WAIT, crd, plans, wait_until};

/// The CRD of the release before `health.gates`.
fn crd_before_gates() -> CustomResourceDefinition {
    let path =
        support::cluster::repo_root().join("tests/fixtures/releaseplan-crd-before-gates.yaml");
    let text = std::fs::read_to_string(&path).expect("the fixture CRD");
    yaml_serde::from_str(&text).expect("a CRD")
}

type Calls = Arc<Mutex<Vec<String>>>;

async fn record(State(calls): State<Calls>, uri: axum::http::Uri) -> StatusCode {
    calls.lock().unwrap().push(uri.path().to_string());
    StatusCode::OK
}

#[tokio::test]
async fn gates_of_the_deprecated_lists_survive_the_crd_upgrade_and_still_run() {
    let h = Harness::new("upgrade-gates").await;
    crd::apply(&h.client, &[crd_before_gates()]).await;
    let outcome = AssertUnwindSafe(upgrade(&h)).catch_unwind().await;
    // The current CRD back for the binaries that run after this one.
    crd::install(&h.client).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn upgrade(h: &Harness) {
    let (client, ns) = (&h.client, h.ns.as_str());
    let calls: Calls = Arc::default();
    let addr = serve(
        Router::new()
            .route("/hook", post(record))
            .route("/template", post(record))
            .with_state(calls.clone()),
    )
    .await;
    let prometheus = Prometheus::start(addr);
    let templates: Api<GateTemplate> = Api::namespaced(client.clone(), ns);
    let template = json!({
        "apiVersion": "releaseplan.io/v1alpha1", "kind": "GateTemplate",
        "metadata": {"name": "smoke"},
        "spec": {"webhook": {"name": "unused", "url": format!("http://{addr}/template")}}
    });
    templates
        .create(
            &PostParams::default(),
            &serde_json::from_value(template).unwrap(),
        )
        .await
        .unwrap();
    let health = json!({
        "prometheus": [{"name": "errors", "address": prometheus.url, "query": "vector(0)",
                        "threshold": "< 1", "interval": "1s"}],
        "webhooks": [{"name": "hook", "url": format!("http://{addr}/hook"),
                      "timeoutSeconds": 2, "retries": 0}],
        "jobs": [{"name": "smoke-job", "timeoutSeconds": 120, "template": {"spec": {"template": {
            "metadata": {"annotations": {"kwok.releaseplan.io/job-succeed-after": "1s"}},
            "spec": {"containers": [{"name": "smoke", "image": "smoke:1"}]}}}}}],
        // with the defaults the API server fills in, so what is stored is what
        // was written
        "templates": [{"name": "shared", "templateRef": {"kind": "GateTemplate", "name": "smoke"},
                       "args": {}}]
    });
    // Written, and stored, under the old CRD (no operator yet: as it was
    // before the upgrade).
    let raw: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<ReleasePlan>(&()));
    let plan = json!({
        "apiVersion": ReleasePlan::api_version(&()), "kind": ReleasePlan::kind(&()),
        "metadata": {"name": "shop"},
        "spec": {"components": [web("shop:1", 2)],
                 "strategy": {"steps": [{"setWeight": 50}, {"pause": {}}]},
                 "health": health}
    });
    raw.create(
        &PostParams::default(),
        &serde_json::from_value(plan).unwrap(),
    )
    .await
    .expect("the plan, under the old CRD");
    let stored_before = raw.get("shop").await.unwrap().data["spec"]["health"].clone();
    assert_gates_intact(&stored_before, &health);

    // A plan applied whole by one field manager (server-side) while its
    // lists were atomic.
    let owned = |components: Value| {
        json!({
            "apiVersion": ReleasePlan::api_version(&()), "kind": ReleasePlan::kind(&()),
            "metadata": {"name": "owned"}, "spec": {"components": components}
        })
    };
    let named = |name: &str, image: &str| {
        json!({"name": name, "replicas": 1,
               "template": {"spec": {"containers": [{"name": name, "image": image}]}}})
    };
    let apply = |manager: &'static str, obj: Value| {
        let raw = raw.clone();
        async move {
            raw.patch("owned", &PatchParams::apply(manager), &Patch::Apply(obj))
                .await
                .unwrap_or_else(|e| panic!("{manager}'s apply: {e}"))
        }
    };
    apply(
        "gitops",
        owned(json!([named("web", "web:1"), named("api", "api:1")])),
    )
    .await;

    // The upgrade: the current CRD, then the current operator.
    crd::install(client).await;

    // Lists are map lists now (server-side apply merges components by name),
    // and the entries the manager applied before are still its own: a second
    // manager adds a component beside them, and the first one's later applies
    // change and drop its own entries only.
    let names = |obj: &DynamicObject| -> Vec<String> {
        obj.data["spec"]["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    let obj = apply("team", owned(json!([named("worker", "worker:1")]))).await;
    assert_eq!(names(&obj), ["web", "api", "worker"]);
    let obj = apply(
        "gitops",
        owned(json!([named("web", "web:2"), named("api", "api:1")])),
    )
    .await;
    assert_eq!(names(&obj), ["web", "api", "worker"]);
    let obj = apply("gitops", owned(json!([named("web", "web:2")]))).await;
    assert_eq!(names(&obj), ["web", "worker"]);
    assert_eq!(
        obj.data["spec"]["components"][0]["template"]["spec"]["containers"][0]["image"],
        "web:2"
    );
    raw.delete("owned", &DeleteParams::default()).await.unwrap();
    let stored_after = raw.get("shop").await.unwrap().data["spec"]["health"].clone();
    assert_eq!(
        stored_after, stored_before,
        "the upgrade changed spec.health"
    );
    let _op = Operator::start(ns, &[]).await;
    let p = plans::wait_phase(client, ns, "shop", Phase::Stable, JOB_WAIT).await;
    assert!(p.status.unwrap().stable_revision.is_some());

    // A rollout after the upgrade runs each gate; a write of the plan by a
    // client of the new API keeps them.
    plans::set_components(client, ns, "shop", json!([web("shop:2", 2)])).await;
    wait_four_passed(client, ns, "the rollout of shop:2").await;
    let paths = calls.lock().unwrap().clone();
    for path in ["/hook", "/template"] {
        assert!(
            paths.iter().any(|p| p == path),
            "{path} not called: {paths:?}"
        );
    }
    let stored = raw.get("shop").await.unwrap().data["spec"]["health"].clone();
    assert_gates_intact(&stored, &health);
}

/// Each of the four lists holds what was written (the API server adds no
/// field to them and prunes none).
fn assert_gates_intact(stored: &Value, written: &Value) {
    for list in ["prometheus", "webhooks", "jobs", "templates"] {
        assert_eq!(stored[list], written[list], "spec.health.{list}");
    }
}

/// Waits until the four gates read Passed in status at the plan's pause
/// step (the rollout holds there).
async fn wait_four_passed(client: &Client, ns: &str, what: &str) {
    wait_until(
        JOB_WAIT,
        &format!("four gates Passed in {what}"),
        || async {
            let p = plans::get(client, ns, "shop").await?;
            let s = p.status?;
            let mut passed: Vec<&str> = s
                .gates
                .iter()
                .filter(|g| g.verdict == Verdict::Passed)
                .map(|g| g.name.as_str())
                .collect();
            passed.sort_unstable();
            (s.current_step == 1 && passed == ["errors", "hook", "shared", "smoke-job"])
                .then_some(())
        },
    )
    .await;
}
