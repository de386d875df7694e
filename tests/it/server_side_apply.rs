//! Server-side apply of ReleasePlans by several field managers: the lists
//! with a unique key (`spec.components`, `spec.health.gates`, a template's
//! containers and env) are map lists in the CRD, so each manager owns its
//! own entries and an apply by one keeps the other's. Against a real API
//! server with the checked-in CRD; no operator runs. Alone:
//! `e2e/cluster-up.sh ssa && . .e2e-run/ssa/env && cargo test --test it -- server_side_apply::`.

use crate::support;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Client, Resource};
use releaseplan::api::ReleasePlan;
use serde_json::{Value, json};
use support::{cluster, crd};

/// A component named `name` running `image`, with `env` as its container's env.
fn component(name: &str, image: &str, env: Value) -> Value {
    json!({
        "name": name,
        "replicas": 2,
        "template": {
            "metadata": { "labels": { "app": name } },
            "spec": { "containers": [{ "name": name, "image": image, "env": env }] }
        }
    })
}

/// The object a manager applies: a plan with only the given spec fields.
fn applied(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": ReleasePlan::api_version(&()),
        "kind": ReleasePlan::kind(&()),
        "metadata": { "name": name },
        "spec": spec,
    })
}

async fn apply(
    api: &Api<DynamicObject>,
    manager: &str,
    name: &str,
    spec: Value,
) -> Result<DynamicObject, kube::Error> {
    // force: false, as a GitOps tool or a second team applies by default.
    let params = PatchParams::apply(manager);
    api.patch(name, &params, &Patch::Apply(applied(name, spec)))
        .await
}

/// `(name, image of its first container)` of each component, in order.
fn components(obj: &DynamicObject) -> Vec<(String, String)> {
    obj.data["spec"]["components"]
        .as_array()
        .expect("components")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["template"]["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| ((*a).to_string(), (*b).to_string()))
        .collect()
}

/// The fields a manager owns, as the API server's managedFields say (JSON text).
fn owned_by(obj: &DynamicObject, manager: &str) -> String {
    obj.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.manager.as_deref() == Some(manager) && m.operation.as_deref() == Some("Apply")
        })
        .map(|m| serde_json::to_string(&m.fields_v1).unwrap())
        .collect()
}

async fn plans(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<ReleasePlan>(&()))
}

#[tokio::test]
async fn two_managers_each_own_their_component_and_gate() {
    let client = cluster::client().await;
    crd::install(&client).await;
    let ns = cluster::test_namespace(&client, "ssa-two").await;
    let api = plans(&client, &ns).await;
    let webhook = |name: &str, component: &str| {
        json!({ "name": name, "component": component,
                "webhook": { "url": format!("http://checks.example.com/{name}") } })
    };

    // Team A applies the plan with its component and gate, team B adds its own.
    apply(
        &api,
        "team-a",
        "shop",
        json!({
            "components": [component("web", "web:1", json!([{ "name": "MODE", "value": "a" }]))],
            "health": { "gates": [webhook("web-smoke", "web")] },
        }),
    )
    .await
    .expect("team A's apply");
    let obj = apply(
        &api,
        "team-b",
        "shop",
        json!({
            "components": [component("api", "api:1", json!([]))],
            "health": { "gates": [webhook("api-smoke", "api")] },
        }),
    )
    .await
    .expect("team B's apply: it owns only its own entries, so no conflict");
    assert_eq!(
        components(&obj),
        pairs(&[("web", "web:1"), ("api", "api:1")])
    );
    let gates: Vec<&str> = obj.data["spec"]["health"]["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(gates, ["web-smoke", "api-smoke"]);
    let a = owned_by(&obj, "team-a");
    assert!(
        a.contains(r#"k:{\"name\":\"web\"}"#),
        "team A owns web: {a}"
    );
    assert!(
        !a.contains(r#"k:{\"name\":\"api\"}"#),
        "team A does not own api: {a}"
    );

    // Each later change of a team's own component keeps the other's.
    let obj = apply(
        &api,
        "team-a",
        "shop",
        json!({
            "components": [component("web", "web:2", json!([{ "name": "MODE", "value": "a" }]))],
            "health": { "gates": [webhook("web-smoke", "web")] },
        }),
    )
    .await
    .expect("team A's second apply");
    assert_eq!(
        components(&obj),
        pairs(&[("web", "web:2"), ("api", "api:1")])
    );
    let obj = apply(
        &api,
        "team-b",
        "shop",
        json!({
            "components": [component("api", "api:2", json!([]))],
            "health": { "gates": [webhook("api-smoke", "api")] },
        }),
    )
    .await
    .expect("team B's second apply");
    assert_eq!(
        components(&obj),
        pairs(&[("web", "web:2"), ("api", "api:2")])
    );
    assert_eq!(
        obj.data["spec"]["health"]["gates"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // A third manager adds an env entry to web's container: a map list too.
    let obj = apply(
        &api,
        "platform",
        "shop",
        json!({
            "components": [{ "name": "web", "template": { "spec": { "containers": [{
                "name": "web", "env": [{ "name": "OTEL_ENDPOINT", "value": "http://otel:4317" }]
            }] } } }],
        }),
    )
    .await
    .expect("the platform team's env entry");
    let env: Vec<&str> =
        obj.data["spec"]["components"][0]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
    assert_eq!(env, ["MODE", "OTEL_ENDPOINT"]);
    assert_eq!(
        components(&obj),
        pairs(&[("web", "web:2"), ("api", "api:2")])
    );

    // A manager that sets another's field is told so (409), not silently obeyed.
    let err = apply(
        &api,
        "team-b",
        "shop",
        json!({
            "components": [
                component("api", "api:2", json!([])),
                component("web", "web:3", json!([{ "name": "MODE", "value": "a" }])),
            ],
            "health": { "gates": [webhook("api-smoke", "api")] },
        }),
    )
    .await
    .expect_err("team B may not take web's image from team A without force");
    match err {
        kube::Error::Api(s) => assert_eq!(s.code, 409, "{s:?}"),
        other => panic!("want a conflict, got {other}"),
    }

    // Team B drops its component: only its own entry goes.
    let obj = apply(&api, "team-b", "shop", json!({ "health": { "gates": [] } }))
        .await
        .expect("team B's apply without its component");
    assert_eq!(components(&obj), pairs(&[("web", "web:2")]));
    let gates = obj.data["spec"]["health"]["gates"].as_array().unwrap();
    assert_eq!(gates.len(), 1, "{gates:?}");
}

#[tokio::test]
async fn a_plan_applied_whole_by_one_manager_still_applies() {
    let client = cluster::client().await;
    crd::install(&client).await;
    let ns = cluster::test_namespace(&client, "ssa-one").await;
    let api = plans(&client, &ns).await;
    let both = json!({
        "components": [
            component("web", "web:1", json!([{ "name": "MODE", "value": "x" }])),
            component("api", "api:1", json!([])),
        ],
        "strategy": { "steps": [{ "setWeight": 50 }, { "pause": {} }] },
    });

    let obj = apply(&api, "gitops", "shop", both.clone())
        .await
        .expect("the first apply");
    assert_eq!(
        components(&obj),
        pairs(&[("web", "web:1"), ("api", "api:1")])
    );
    // The same apply again changes nothing. (The first repeat after the
    // create writes once, with atomic lists as with map lists: the API
    // server settles what the create defaulted; from then on it is a no-op.)
    let first = apply(&api, "gitops", "shop", both.clone())
        .await
        .expect("a repeat");
    let again = apply(&api, "gitops", "shop", both).await.expect("a repeat");
    assert_eq!(
        again.metadata.resource_version, first.metadata.resource_version,
        "a repeated apply is a no-op"
    );
    assert_eq!(components(&again), components(&obj));
    // The one owner reorders, changes and removes entries as before.
    let obj = apply(
        &api,
        "gitops",
        "shop",
        json!({
            "components": [component("api", "api:2", json!([]))],
            "strategy": { "steps": [{ "setWeight": 20 }] },
        }),
    )
    .await
    .expect("the owner's apply without web");
    assert_eq!(components(&obj), pairs(&[("api", "api:2")]));
    assert_eq!(
        obj.data["spec"]["strategy"]["steps"],
        json!([{ "setWeight": 20 }])
    );

    // Duplicate keys are refused by the API server (a map list), naming the field.
    let err = apply(
        &api,
        "gitops",
        "shop",
        json!({
            "components": [component("api", "api:2", json!([
                { "name": "MODE", "value": "1" }, { "name": "MODE", "value": "2" },
            ]))],
        }),
    )
    .await
    .expect_err("two env entries with one name");
    match err {
        kube::Error::Api(s) => {
            assert!(s.code == 422 || s.code == 500 || s.code == 400, "{s:?}");
            assert!(s.message.contains("MODE"), "{}", s.message);
        }
        other => panic!("want a refusal, got {other}"),
    }
}
