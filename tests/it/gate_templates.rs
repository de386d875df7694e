//! Template gates and per-component gates with the real operator on the local
//! cluster: the gates are webhooks served by the test on 127.0.0.1, which
//! records every request (path and body) it receives.

use crate::support;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::api::core::v1::{Event, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use releaseplan::api::revision::template_hash;
use releaseplan::api::template::{ClusterGateTemplate, GateTemplate};
use releaseplan::api::{Phase, ReleasePlan};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::fixtures::{plan, template, web};
use support::plans::{self, condition, create, plan_events, request, set_components, wait_phase};
use support::servers::serve;
use support::{Harness, WAIT, wait_until};

/// One request a gate made: when, its path and its JSON body.
#[derive(Clone, Debug)]
struct Call {
    at: Instant,
    path: String,
    body: Value,
}

type Calls = Arc<Mutex<Vec<Call>>>;

async fn record(State(calls): State<Calls>, Path(path): Path<String>, body: String) -> StatusCode {
    calls.lock().unwrap().push(Call {
        at: Instant::now(),
        path: format!("/{path}"),
        body: serde_json::from_str(&body).unwrap_or(Value::Null),
    });
    StatusCode::OK
}

/// A webhook server on 127.0.0.1 that answers 200 to every POST and records it.
async fn hooks() -> (SocketAddr, Calls) {
    let calls: Calls = Arc::default();
    let addr = serve(
        Router::new()
            .route("/{*path}", post(record))
            .with_state(calls.clone()),
    )
    .await;
    (addr, calls)
}

fn paths(calls: &Calls) -> Vec<String> {
    calls
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.path.clone())
        .collect()
}

fn hook_template(kind: &str, name: &str, url: &str) -> Value {
    json!({
        "apiVersion": "releaseplan.io/v1alpha1",
        "kind": kind,
        "metadata": { "name": name },
        "spec": {
            "parameters": [{ "name": "suite" }, { "name": "region", "default": "eu" }],
            "webhook": { "name": "smoke", "url": url, "timeoutSeconds": 5, "retries": 0 }
        }
    })
}

fn hash_of(t: &Value) -> String {
    let t: PodTemplateSpec = serde_json::from_value(t.clone()).unwrap();
    template_hash(&t)
}

/// A template gate is called with its arguments in the URL; edited while its
/// step runs, the gate keeps the content read at the step's start (recorded
/// in status by generation and hash, kept in a copy), and the next step reads
/// the template anew.
#[tokio::test]
async fn a_template_gate_runs_with_its_args_and_keeps_its_content_for_the_step() {
    let (h, _op) = Harness::with_operator("tmpl-args").await;
    let (addr, calls) = hooks().await;
    let templates: Api<GateTemplate> = Api::namespaced(h.client.clone(), &h.ns);
    let t = hook_template(
        "GateTemplate",
        "smoke",
        &format!("http://{addr}/v1/{{{{args.suite}}}}/{{{{args.region}}}}"),
    );
    templates
        .create(&PostParams::default(), &serde_json::from_value(t).unwrap())
        .await
        .unwrap();
    let spec = json!({
        "components": [web("shop:1", 1)],
        "strategy": {"steps": [{"setWeight": 50}, {"pause": {}}]},
        "health": {"templates": [{
            "name": "smoke-checkout",
            "templateRef": {"name": "smoke"},
            "args": {"suite": "checkout"}
        }]}
    });
    plans::create_stable(&h.client, &h.ns, "shop", spec).await;
    // The first release passed the gate, called with the arguments in.
    assert!(
        paths(&calls).iter().all(|p| p == "/v1/checkout/eu") && !paths(&calls).is_empty(),
        "{:?}",
        paths(&calls)
    );
    let p = plans::get(&h.client, &h.ns, "shop").await.unwrap();
    assert!(
        p.status.unwrap().resolved_gates.is_empty(),
        "nothing recorded once settled"
    );

    // A rollout held at its pause step (step 1) until promoted.
    set_components(&h.client, &h.ns, "shop", json!([web("shop:2", 1)])).await;
    let held = wait_until(WAIT, "the rollout to hold at its pause step", || async {
        let p = plans::get(&h.client, &h.ns, "shop").await?;
        let s = p.status?;
        (s.phase == Phase::RollingOut
            && s.current_step == 1
            && s.gates.iter().any(|g| g.verdict.as_str() == "Passed"))
        .then_some(s)
    })
    .await;
    let recorded = &held.resolved_gates;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].name, "smoke-checkout");
    assert_eq!(recorded[0].step, 1);
    assert_eq!(recorded[0].template_generation, Some(1));
    assert!(recorded[0].template.is_none(), "no content in status");
    assert!(recorded[0].content_hash.is_some());

    // Edit the template mid-step: the running gate is unchanged.
    let edited = Instant::now();
    templates
        .patch(
            "smoke",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"webhook": {"url": format!("http://{addr}/v2/{{{{args.suite}}}}")}}})),
        )
        .await
        .unwrap();
    let after_edit = wait_until(WAIT, "two gate calls after the template edit", || async {
        let c: Vec<Call> = calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.at > edited)
            .cloned()
            .collect();
        (c.len() >= 2).then_some(c)
    })
    .await;
    assert!(
        after_edit.iter().all(|c| c.path == "/v1/checkout/eu"),
        "the edit reached the running step: {:?}",
        after_edit.iter().map(|c| &c.path).collect::<Vec<_>>()
    );
    let s = plans::get(&h.client, &h.ns, "shop")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(s.current_step, 1);
    assert_eq!(s.resolved_gates, held.resolved_gates, "the record is kept");

    // The next step reads the template anew.
    let promoted = Instant::now();
    request(&h.client, &h.ns, "shop", "promote").await;
    wait_phase(&h.client, &h.ns, "shop", Phase::Stable, WAIT).await;
    let later: Vec<String> = calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.at > promoted)
        .map(|c| c.path.clone())
        .collect();
    assert!(
        later.iter().any(|p| p == "/v2/checkout"),
        "the final step did not read the edited template: {later:?}"
    );
    assert_eq!(later.last().map(String::as_str), Some("/v2/checkout"));
}

/// A gate whose ClusterGateTemplate does not exist holds the rollout with
/// `Stalled` (reason GateTemplateNotFound) and one Warning, without a hot
/// loop; creating the template lets the rollout finish.
#[tokio::test]
async fn a_missing_template_stalls_until_it_is_created() {
    let (h, op) = Harness::with_operator("tmpl-missing").await;
    let (addr, calls) = hooks().await;
    let name = format!("smoke-{}", h.ns);
    let spec = json!({
        "components": [web("shop:1", 1)],
        // in `health.gates`: a template created later wakes the plan through it
        "health": {"gates": [{
            "name": "smoke",
            "template": {"kind": "ClusterGateTemplate", "name": name,
                         "args": {"suite": "cart", "region": "us"}}
        }]}
    });
    create(&h.client, &h.ns, &plan("shop", spec)).await;
    // Stalled from the decision that starts the rollout; the gate's entry
    // (and the Warning) from the next reconcile, the first of the step. Wait
    // for the pod too: only the missing template holds the release then,
    // and no pod event wakes the plan any more.
    let stalled = wait_until(WAIT, "the plan to be Stalled for its template", || async {
        let p = plans::get(&h.client, &h.ns, "shop").await?;
        let (status, reason, message) = condition(&p, "Stalled")?;
        let s = p.status.as_ref()?;
        let entry = s.gates.iter().any(|g| g.name == "smoke");
        let ready = s.components.first()?.current_ready == 1;
        (status == "True" && reason == "GateTemplateNotFound" && entry && ready)
            .then_some((p, message))
    })
    .await;
    let (p, message) = stalled;
    assert!(
        message.contains(&format!("gate smoke: ClusterGateTemplate {name} not found")),
        "{message}"
    );
    let s = p.status.clone().unwrap();
    assert_eq!(s.phase, Phase::RollingOut);
    let gate = s
        .gates
        .iter()
        .find(|g| g.name == "smoke")
        .expect("a gate entry");
    assert_eq!(gate.verdict.as_str(), "Pending");
    assert!(gate.message.as_deref().unwrap().contains("not found"));
    assert_eq!(condition(&p, "Ready").unwrap().0, "False");
    assert_eq!(condition(&p, "Reconciling").unwrap().0, "False");

    // No hot loop: a few reconciles at most while nothing changes.
    let before = op.counter("releaseplan_reconcile_runs_total").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let runs = op.counter("releaseplan_reconcile_runs_total").await - before;
    assert!(runs <= 5.0, "{runs} reconciles in 5s while stalled");
    let warnings: Vec<_> = plan_events(&h.client, &h.ns, "shop")
        .await
        .into_iter()
        .filter(|(reason, ..)| reason == "GateTemplateNotFound")
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].1, "Warning");
    // Published once: a repeat would have made the Event a series.
    let events = Api::<Event>::namespaced(h.client.clone(), &h.ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let series: Vec<_> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("GateTemplateNotFound"))
        .map(|e| e.series.clone())
        .collect();
    assert_eq!(series, vec![None], "published more than once");
    assert!(calls.lock().unwrap().is_empty());

    // The template appears: the plan is woken and the rollout finishes.
    let cluster: Api<ClusterGateTemplate> = Api::all(h.client.clone());
    let t = hook_template(
        "ClusterGateTemplate",
        &name,
        &format!("http://{addr}/{{{{args.suite}}}}/{{{{args.region}}}}"),
    );
    cluster
        .create(&PostParams::default(), &serde_json::from_value(t).unwrap())
        .await
        .unwrap();
    let p = wait_phase(&h.client, &h.ns, "shop", Phase::Stable, WAIT).await;
    assert_eq!(condition(&p, "Stalled").unwrap().0, "False");
    assert_eq!(condition(&p, "Ready").unwrap().0, "True");
    assert!(
        paths(&calls).iter().any(|p| p == "/cart/us"),
        "{:?}",
        paths(&calls)
    );
    cluster
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

/// A gate that names a component is told that component and its new
/// template hash; a gate that names none is told the first changed one.
#[tokio::test]
async fn a_per_component_gate_is_told_its_component_and_revision() {
    let (h, _op) = Harness::with_operator("tmpl-component").await;
    let (addr, calls) = hooks().await;
    let templates: Api<GateTemplate> = Api::namespaced(h.client.clone(), &h.ns);
    let t = hook_template(
        "GateTemplate",
        "smoke",
        &format!("http://{addr}/tmpl/{{{{args.suite}}}}"),
    );
    templates
        .create(&PostParams::default(), &serde_json::from_value(t).unwrap())
        .await
        .unwrap();
    let worker =
        |image: &str| json!({"name": "worker", "replicas": 1, "template": template(image)});
    let spec = json!({
        "components": [web("shop:1", 1), worker("worker:1")],
        "health": {
            "webhooks": [
                {"name": "first", "url": format!("http://{addr}/first")},
                {"name": "own-worker", "url": format!("http://{addr}/own"), "component": "worker"}
            ],
            "templates": [{
                "name": "tmpl-worker",
                "templateRef": {"name": "smoke"},
                "args": {"suite": "w"},
                "component": "worker"
            }]
        }
    });
    plans::create_stable(&h.client, &h.ns, "shop", spec).await;
    // Both components change: a gate without component is told the first, web.
    let start = Instant::now();
    set_components(
        &h.client,
        &h.ns,
        "shop",
        json!([web("shop:2", 1), worker("worker:2")]),
    )
    .await;
    wait_phase(&h.client, &h.ns, "shop", Phase::Stable, WAIT).await;
    let calls: Vec<Call> = calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.at > start)
        .cloned()
        .collect();
    let told = |path: &str| {
        let c = calls
            .iter()
            .find(|c| c.path == path)
            .unwrap_or_else(|| panic!("no call to {path}: {calls:?}"));
        (
            c.body["component"].as_str().unwrap_or_default().to_string(),
            c.body["componentRevision"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };
    let web_hash = hash_of(&template("shop:2"));
    let worker_hash = hash_of(&template("worker:2"));
    assert_ne!(web_hash, worker_hash);
    assert_eq!(told("/first"), ("web".to_string(), web_hash));
    assert_eq!(told("/own"), ("worker".to_string(), worker_hash.clone()));
    assert_eq!(told("/tmpl/w"), ("worker".to_string(), worker_hash));
}

/// A ClusterGateTemplate annotated `releaseplan.io/gate-namespaces` is for
/// those namespaces only: to any other it reads as missing (the same
/// message, no content in its status, no call), and listing the namespace
/// lets the rollout finish.
#[tokio::test]
async fn a_cluster_template_listing_other_namespaces_reads_as_missing() {
    let (h, _op) = Harness::with_operator("tmpl-tenant").await;
    let (addr, calls) = hooks().await;
    let name = format!("admin-{}", h.ns);
    let cluster: Api<ClusterGateTemplate> = Api::all(h.client.clone());
    let mut t = hook_template(
        "ClusterGateTemplate",
        &name,
        &format!("http://{addr}/{{{{args.suite}}}}/{{{{args.region}}}}"),
    );
    t["metadata"]["annotations"] =
        json!({"releaseplan.io/gate-namespaces": "team-payments, team-search"});
    cluster
        .create(&PostParams::default(), &serde_json::from_value(t).unwrap())
        .await
        .unwrap();
    let spec = json!({
        "components": [web("shop:1", 1)],
        "health": {"gates": [{
            "name": "smoke",
            "template": {"kind": "ClusterGateTemplate", "name": name,
                         "args": {"suite": "cart", "region": "us"}}
        }]}
    });
    create(&h.client, &h.ns, &plan("shop", spec)).await;
    let message = wait_until(WAIT, "the template to read as missing", || async {
        let p = plans::get(&h.client, &h.ns, "shop").await?;
        let (status, reason, message) = condition(&p, "Stalled")?;
        (status == "True" && reason == "GateTemplateNotFound").then_some(message)
    })
    .await;
    assert!(
        message.contains(&format!("gate smoke: ClusterGateTemplate {name} not found")),
        "{message}"
    );
    let p = plans::get(&h.client, &h.ns, "shop").await.unwrap();
    let status = serde_json::to_string(&p.status).unwrap();
    assert!(
        !status.contains(&addr.to_string()),
        "the template's URL is in the tenant's status: {status}"
    );
    assert!(calls.lock().unwrap().is_empty());

    // The administrator lists this namespace: the plan is woken and goes on.
    cluster
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "releaseplan.io/gate-namespaces": format!("team-payments, {}", h.ns)}}})),
        )
        .await
        .unwrap();
    let p = wait_phase(&h.client, &h.ns, "shop", Phase::Stable, WAIT).await;
    assert_eq!(condition(&p, "Ready").unwrap().0, "True");
    assert!(paths(&calls).iter().any(|p| p == "/cart/us"));
    cluster
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

/// The user `viewer-<ns>`, bound in `ns` to the built-in `view` role, which
/// the chart extends to plans and templates
/// (charts/releaseplan/templates/aggregate-roles.yaml, created here as the
/// chart renders it); a client acting as that user, once the aggregation
/// lets it read plans.
async fn view_user(h: &Harness) -> Client {
    let pp = PostParams::default();
    let aggregated: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "releaseplan-it-view",
            "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": ["releaseplan.io"],
            "resources": ["releaseplans", "releaseplans/status", "gatetemplates", "clustergatetemplates", "componentscales", "componentscales/scale"],
            "verbs": ["get", "list", "watch"]}]
    }))
    .unwrap();
    match Api::<ClusterRole>::all(h.client.clone())
        .create(&pp, &aggregated)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("cannot create the aggregated ClusterRole: {e}"),
    }
    let user = format!("viewer-{}", h.ns);
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "viewer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(h.client.clone(), &h.ns)
        .create(&pp, &binding)
        .await
        .unwrap();
    let viewer = support::cluster::client_as(&user).await;
    wait_until(
        WAIT,
        "the view role to let the viewer read plans",
        || async {
            Api::<ReleasePlan>::namespaced(viewer.clone(), &h.ns)
                .list(&ListParams::default())
                .await
                .ok()
        },
    )
    .await;
    viewer
}

/// Everything a tenant's `view` user reads of the plan: the plan (get and
/// list), and the namespace's Events (core and events.k8s.io), as JSON.
async fn what_a_viewer_reads(viewer: &Client, ns: &str) -> String {
    let plans = Api::<ReleasePlan>::namespaced(viewer.clone(), ns);
    let one = plans.get("shop").await.expect("view reads the plan");
    let all = plans.list(&ListParams::default()).await.unwrap();
    let core = Api::<Event>::namespaced(viewer.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("view reads Events");
    // The same Event objects through events.k8s.io, where `view` may read
    // them: Kubernetes 1.36's `view` role grants it, 1.33's does not (a 403
    // shows nothing; core/v1 above already lists every Event).
    let events = match Api::<k8s_openapi::api::events::v1::Event>::namespaced(viewer.clone(), ns)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(kube::Error::Api(s)) if s.code == 403 => Vec::new(),
        Err(e) => panic!("view lists events.k8s.io Events: {e}"),
    };
    assert!(
        core.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("GatePassed")),
        "the gate's verdict is among the Events read"
    );
    serde_json::to_string(&json!([one, all.items, core.items, events])).unwrap()
}

/// A ClusterGateTemplate's URL is the administrator's: a tenant's `view`
/// user reads the plan, its status and its Events while the template's gate
/// runs and finds it nowhere. Status records the template by name,
/// generation and content hash; the content read for the step is in a
/// Secret the plan owns, which `view` cannot read, deleted once settled.
#[tokio::test]
async fn a_view_user_cannot_read_a_cluster_templates_url_through_the_plan() {
    let (h, _op) = Harness::with_operator("tmpl-view").await;
    let (addr, calls) = hooks().await;
    let viewer = view_user(&h).await;
    let name = format!("admin-{}", h.ns);
    let token = "T0001/B0002/s3cr3tXYZ";
    let cluster: Api<ClusterGateTemplate> = Api::all(h.client.clone());
    let t = hook_template(
        "ClusterGateTemplate",
        &name,
        &format!("http://{addr}/services/{token}/{{{{args.suite}}}}"),
    );
    cluster
        .create(&PostParams::default(), &serde_json::from_value(t).unwrap())
        .await
        .unwrap();
    let spec = json!({
        "components": [web("shop:1", 1)],
        "strategy": {"steps": [{"setWeight": 50}, {"pause": {}}]},
        "health": {"gates": [{
            "name": "smoke",
            "template": {"kind": "ClusterGateTemplate", "name": name, "args": {"suite": "cart"}}
        }]}
    });
    plans::create_stable(&h.client, &h.ns, "shop", spec).await;
    set_components(&h.client, &h.ns, "shop", json!([web("shop:2", 1)])).await;
    let held = wait_until(WAIT, "the rollout to hold at its pause step", || async {
        let p = plans::get(&h.client, &h.ns, "shop").await?;
        let s = p.status?;
        (s.phase == Phase::RollingOut
            && s.current_step == 1
            && !s.resolved_gates.is_empty()
            && s.gates.iter().any(|g| g.verdict.as_str() == "Passed"))
        .then_some(s)
    })
    .await;
    // The gate ran, with the administrator's URL.
    let wanted = format!("/services/{token}/cart");
    assert!(paths(&calls).contains(&wanted), "{:?}", paths(&calls));
    let record = &held.resolved_gates[0];
    assert_eq!(record.template_ref.name, name);
    assert_eq!(record.template_generation, Some(1));
    assert!(record.template.is_none(), "content in status: {record:?}");
    let hash = record.content_hash.clone().expect("a content hash");

    // The copy: a Secret of the plan's namespace, owned by the plan.
    let secrets = Api::<Secret>::namespaced(h.client.clone(), &h.ns);
    let copy_name = releaseplan::api::template::copy_name("shop", &hash);
    let copy = wait_until(WAIT, "the copy to exist", || async {
        secrets.get_opt(&copy_name).await.ok().flatten()
    })
    .await;
    assert_eq!(copy.owner_references()[0].name, "shop");
    let content = String::from_utf8(copy.data.unwrap()["template.json"].0.clone()).unwrap();
    assert!(content.contains(token), "{content}");

    // What the viewer reads holds neither the address nor the path.
    let seen = what_a_viewer_reads(&viewer, &h.ns).await;
    for secret in [addr.to_string(), token.to_string()] {
        assert!(!seen.contains(&secret), "{secret} readable by view: {seen}");
    }
    let got = Api::<Secret>::namespaced(viewer.clone(), &h.ns)
        .get(&copy_name)
        .await;
    assert!(
        matches!(&got, Err(kube::Error::Api(s)) if s.code == 403),
        "view reads the copy: {got:?}"
    );

    // Settled: no copy is kept, and still nothing to read.
    request(&h.client, &h.ns, "shop", "promote").await;
    wait_phase(&h.client, &h.ns, "shop", Phase::Stable, WAIT).await;
    wait_until(WAIT, "the copy to be deleted", || async {
        let left = secrets
            .list(&ListParams::default().labels("releaseplan.io/gate-template-copy"))
            .await
            .ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
    let seen = what_a_viewer_reads(&viewer, &h.ns).await;
    assert!(!seen.contains(token), "{seen}");
    cluster
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

/// A plan whose status an operator before 0.2.0 wrote holds the template's
/// content in `status.resolvedGates`: its step keeps running that content
/// (not the template as edited since), and status is rewritten in the new
/// shape, the content moved into a copy.
#[tokio::test]
async fn a_status_with_the_content_in_the_old_shape_keeps_its_step() {
    let (h, mut op) = Harness::with_operator("tmpl-upgrade").await;
    let (addr, calls) = hooks().await;
    let templates: Api<GateTemplate> = Api::namespaced(h.client.clone(), &h.ns);
    let t = hook_template(
        "GateTemplate",
        "smoke",
        &format!("http://{addr}/v1/{{{{args.suite}}}}"),
    );
    templates
        .create(&PostParams::default(), &serde_json::from_value(t).unwrap())
        .await
        .unwrap();
    let spec = json!({
        "components": [web("shop:1", 1)],
        "strategy": {"steps": [{"setWeight": 50}, {"pause": {}}]},
        "health": {"templates": [{"name": "smoke", "templateRef": {"name": "smoke"},
                                  "args": {"suite": "cart"}}]}
    });
    plans::create_stable(&h.client, &h.ns, "shop", spec).await;
    set_components(&h.client, &h.ns, "shop", json!([web("shop:2", 1)])).await;
    let held = wait_until(WAIT, "the rollout to hold at its pause step", || async {
        let p = plans::get(&h.client, &h.ns, "shop").await?;
        let s = p.status?;
        (s.phase == Phase::RollingOut && s.current_step == 1 && !s.resolved_gates.is_empty())
            .then_some(s)
    })
    .await;
    let new_shape = held.resolved_gates[0].clone();
    let content = templates.get("smoke").await.unwrap().spec;

    // The old operator's status: the content in the record, no copy.
    op.terminate().await;
    let secrets = Api::<Secret>::namespaced(h.client.clone(), &h.ns);
    let by_label = ListParams::default().labels("releaseplan.io/gate-template-copy");
    for s in secrets.list(&by_label).await.unwrap().items {
        secrets
            .delete(&s.name_any(), &DeleteParams::default())
            .await
            .unwrap();
    }
    let mut old = serde_json::to_value(&new_shape).unwrap();
    old.as_object_mut().unwrap().remove("contentHash");
    old["template"] = serde_json::to_value(&content).unwrap();
    Api::<ReleasePlan>::namespaced(h.client.clone(), &h.ns)
        .patch_status(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"resolvedGates": [old]}})),
        )
        .await
        .unwrap();
    // Meanwhile the template changed.
    templates
        .patch(
            "smoke",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"webhook": {"url": format!("http://{addr}/v2/{{{{args.suite}}}}")}}})),
        )
        .await
        .unwrap();

    let restarted = Instant::now();
    let _op = h.operator().start().await;
    let converted = wait_until(WAIT, "status in the new shape", || async {
        let s = plans::get(&h.client, &h.ns, "shop").await?.status?;
        let g = s.resolved_gates.first()?;
        (g.template.is_none() && g.content_hash.is_some()).then_some(s)
    })
    .await;
    assert_eq!(converted.current_step, 1, "the same step");
    assert_eq!(converted.resolved_gates, vec![new_shape], "the same record");
    wait_until(WAIT, "the copy to be made", || async {
        let l = secrets.list(&by_label).await.ok()?;
        (l.items.len() == 1).then_some(())
    })
    .await;
    let after: Vec<String> = wait_until(WAIT, "a gate call after the restart", || async {
        let c: Vec<String> = calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.at > restarted)
            .map(|c| c.path.clone())
            .collect();
        (!c.is_empty()).then_some(c)
    })
    .await;
    assert!(
        after.iter().all(|p| p == "/v1/cart"),
        "the step ran the edited template: {after:?}"
    );
}
