//! The administrator's GatePolicy (issue #29): two tenant namespaces, and
//! loopback servers standing in for "another tenant's service", "the API
//! server" and the tenant's allowed endpoints. Each way around the policy is
//! attempted and refused with the policy and rule named, and the server it
//! aimed at receives nothing; an allowed call still works, with the pinned
//! header; a Secret bound to one host is refused for another; a route to a
//! Gateway the policy does not allow is not written.
//!
//! Every GatePolicy here selects only its test's namespaces (by the label
//! [`TENANT`]), so the tests of other modules, run at the same time, are not
//! governed by them.

use crate::support;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use releaseplan::api::Phase;
use releaseplan::api::policy::GatePolicy;
use releaseplan::gates::access::CredentialReader;
use releaseplan::gates::policy::Mode;
use releaseplan::gates::prometheus::TemplateVars;
use releaseplan::gates::{GateContext, GateResult, GateSpec};
use serde_json::{Value, json};
use support::fixtures::web;
use support::plans::{condition, create_stable, patch_spec, plan_events, wait_phase};
use support::servers::{gate_http, serve};
use support::{Harness, WAIT, cluster, wait_until};

/// The label that ties a test namespace to its test's policies.
const TENANT: &str = "releaseplan-test/tenant";

/// What a stand-in server received: one entry per request, the headers the
/// tests look at.
#[derive(Default)]
struct Seen {
    requests: Vec<(Option<String>, Option<String>)>,
}

type Recorded = Arc<Mutex<Seen>>;

/// A loopback server that answers 200 to any request and records its
/// `X-Scope-OrgID` and `Authorization` headers.
async fn stand_in() -> (std::net::SocketAddr, Recorded) {
    let seen: Recorded = Arc::default();
    let app = Router::new()
        .fallback(
            |State(seen): State<Recorded>, headers: HeaderMap| async move {
                let h = |n: &str| {
                    headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .map(String::from)
                };
                seen.lock()
                    .unwrap()
                    .requests
                    .push((h("x-scope-orgid"), h("authorization")));
                StatusCode::OK
            },
        )
        .with_state(seen.clone());
    (serve(app).await, seen)
}

fn count(seen: &Recorded) -> usize {
    seen.lock().unwrap().requests.len()
}

/// Labels `ns` as tenant `tenant`.
pub(crate) async fn label(client: &Client, ns: &str, tenant: &str) {
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {TENANT: tenant}}})),
        )
        .await
        .expect("label the namespace");
}

/// Creates (or replaces) the GatePolicy `name` for the namespaces labelled
/// tenant `tenant`, with `spec` (its selector set here).
pub(crate) async fn put_policy(client: &Client, name: &str, tenant: &str, mut spec: Value) {
    spec["namespaceSelector"] = json!({"matchLabels": {TENANT: tenant}});
    let obj = json!({"apiVersion": "releaseplan.io/v1alpha1", "kind": "GatePolicy",
        "metadata": {"name": name}, "spec": spec});
    Api::<GatePolicy>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply("gate-policy-test").force(),
            &Patch::Apply(obj),
        )
        .await
        .expect("apply the GatePolicy");
}

pub(crate) async fn delete_policy(client: &Client, name: &str) {
    let _ = Api::<GatePolicy>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// A Secret of `ns` shared with `shared`, annotated with the hosts it may go to.
async fn put_secret(client: &Client, ns: &str, name: &str, value: &str, shared: &str) {
    let obj = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "annotations": {"releaseplan.io/gate-namespaces": shared}},
        "stringData": {"token": value}});
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply("gate-policy-test").force(),
            &Patch::Apply(obj),
        )
        .await
        .expect("apply the Secret");
}

fn hook(url: &str) -> Value {
    json!({"name": "smoke", "url": url, "retries": 0, "timeoutSeconds": 5})
}

/// The message of the `Stalled` condition once the policy holds the plan
/// after its spec changed (reason `GatePolicyRefused`, the message holding
/// `expect`): a refusal is configuration, so the new revision does not
/// start, or its rollout holds; it is never rolled back.
async fn held_after(client: &Client, ns: &str, image: &str, health: Value, expect: &str) -> String {
    patch_spec(
        client,
        ns,
        "shop",
        json!({"components": [web(image, 1)], "health": health}),
    )
    .await;
    let (_, _, m) = wait_until(WAIT, &format!("the policy to hold {image}"), || async {
        let p = support::plans::get(client, ns, "shop").await?;
        condition(&p, "Stalled")
            .filter(|(s, r, m)| s == "True" && r == "GatePolicyRefused" && m.contains(expect))
    })
    .await;
    let p = support::plans::get(client, ns, "shop").await.unwrap();
    let phase = p.status.map(|s| s.phase);
    assert!(
        matches!(phase, Some(Phase::Stable | Phase::RollingOut)),
        "held, not rolled back: {phase:?}"
    );
    m
}

#[tokio::test]
async fn gate_policies_are_checked_at_admission() {
    let Harness { client, ns } = Harness::new("gate-policy-admission").await;
    let api: Api<GatePolicy> = Api::all(client.clone());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let attempt = |spec: Value| {
        let api = api.clone();
        let dry = dry.clone();
        let name = format!("{ns}-bad");
        async move {
            let p: GatePolicy = serde_json::from_value(json!({
                "apiVersion": "releaseplan.io/v1alpha1", "kind": "GatePolicy",
                "metadata": {"name": name}, "spec": spec}))
            .unwrap();
            match api.create(&dry, &p).await {
                Err(kube::Error::Api(s)) => s.message,
                other => panic!("accepted: {other:?}"),
            }
        }
    };
    let m = attempt(json!({"destinations": {"hosts": ["ok.example", "a.*.b"]}})).await;
    assert!(m.contains("spec.destinations.hosts[1]"), "{m}");
    let m = attempt(json!({"credentials": [{"secretName": "t", "hosts": ["http://x"]}]})).await;
    assert!(m.contains("spec.credentials[0].hosts[0]"), "{m}");
    let m = attempt(
        json!({"pinnedHeaders": [{"name": "X-Scope-OrgID", "value": "a"},
        {"name": "x-scope-orgid", "value": "b"}]}),
    )
    .await;
    assert!(
        m.contains("pinnedHeaders: header names must be unique"),
        "{m}"
    );
    let m = attempt(json!({"pinnedHeaders": [{"name": "Host", "value": "a"}]})).await;
    assert!(
        m.contains("spec.pinnedHeaders[0].name") && m.contains("set by the operator"),
        "{m}"
    );
    // A good one is accepted.
    let ok: GatePolicy = serde_json::from_value(json!({
        "apiVersion": "releaseplan.io/v1alpha1", "kind": "GatePolicy",
        "metadata": {"name": format!("{ns}-ok")},
        "spec": {"destinations": {"hosts": ["prometheus.monitoring.svc:9090", "*.hooks.example.com", "10.0.0.0/8", "[fd00::/8]:443"]}}}))
    .unwrap();
    api.create(&dry, &ok).await.expect("a valid GatePolicy");
}

#[tokio::test]
async fn a_tenant_gate_reaches_only_what_its_policy_allows() {
    let h = Harness::new("gate-policy-tenant").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    label(&client, &ns, &ns).await;
    let (allowed, allowed_seen) = stand_in().await;
    let (second, second_seen) = stand_in().await;
    let (other_tenant, other_seen) = stand_in().await;
    let (api_server, api_seen) = stand_in().await;
    let policy = format!("{ns}-tenant");
    put_policy(
        &client,
        &policy,
        &ns,
        json!({
            "destinations": {"hosts": [format!("127.0.0.1:{}", allowed.port()), format!("127.0.0.1:{}", second.port())]},
            "credentials": [{"secretName": "mimir-token", "hosts": [format!("127.0.0.1:{}", allowed.port())]}],
            "pinnedHeaders": [{"name": "X-Scope-OrgID", "value": "team-a"}]
        }),
    )
    .await;
    put_secret(&client, &ns, "mimir-token", "tok-5e1f", &ns).await;
    let op = h
        .operator()
        .args([
            "--gate-policy=required",
            "--gate-credentials-namespace",
            &ns,
        ])
        .start()
        .await;

    // Allowed: the listed host, the bound Secret, the pinned header.
    let bearer = json!({"bearer": {"secretKeyRef": {"name": "mimir-token", "key": "token"}}});
    let mut ok = hook(&format!("http://127.0.0.1:{}/hook", allowed.port()));
    ok["auth"] = bearer.clone();
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 1)], "strategy": {"steps": [{"setWeight": 50}]},
               "health": {"webhooks": [ok]}}),
    )
    .await;
    {
        let seen = allowed_seen.lock().unwrap();
        assert!(!seen.requests.is_empty(), "the allowed gate was called");
        for (org, auth) in &seen.requests {
            assert_eq!(org.as_deref(), Some("team-a"), "the pinned header");
            assert_eq!(auth.as_deref(), Some("Bearer tok-5e1f"));
        }
    }

    // Another tenant's service, by address: not listed.
    let expect = format!(
        "host 127.0.0.1:{} is not allowed for namespace {ns}: no spec.destinations of GatePolicy {policy} admits it",
        other_tenant.port()
    );
    let m = held_after(
        &client,
        &ns,
        "shop:2",
        json!({"webhooks": [hook(&format!("http://127.0.0.1:{}/hook", other_tenant.port()))]}),
        &expect,
    )
    .await;
    assert!(m.contains("gate smoke"), "{m}");

    // The API server, by its in-cluster name (never resolved) and by a
    // name that resolves to the stand-in.
    for (i, url) in [
        format!("https://kubernetes.default.svc:{}/api", api_server.port()),
        format!("http://localhost:{}/api", api_server.port()),
    ]
    .iter()
    .enumerate()
    {
        let host = url.split('/').nth(2).unwrap();
        held_after(
            &client,
            &ns,
            &format!("shop:api{i}"),
            json!({"webhooks": [hook(url)]}),
            &format!(
                "host {host} is not allowed for namespace {ns}: no spec.destinations of GatePolicy {policy}"
            ),
        )
        .await;
    }

    // The pinned header, set by the plan: refused, whatever its case.
    let mut override_pin = hook(&format!("http://127.0.0.1:{}/hook", allowed.port()));
    override_pin["headers"] = json!([{"name": "x-scope-orgid", "value": "team-b"}]);
    let before = count(&allowed_seen);
    held_after(
        &client,
        &ns,
        "shop:3",
        json!({"webhooks": [override_pin]}),
        &format!(
            "header x-scope-orgid is pinned by GatePolicy {policy} (spec.pinnedHeaders) for namespace {ns}: a plan may not set it"
        ),
    )
    .await;
    assert_eq!(
        count(&allowed_seen),
        before,
        "no request with the tenant's header"
    );

    // The Secret bound to `allowed`, sent to `second` (a host the policy
    // allows, without credentials).
    let mut stolen = hook(&format!("http://127.0.0.1:{}/hook", second.port()));
    stolen["auth"] = bearer;
    // Only known when the call is made (the Secret's annotations are read
    // then): the rollout starts and holds on the refused gate.
    held_after(
        &client,
        &ns,
        "shop:4",
        json!({"webhooks": [stolen]}),
        &format!(
            "Secret mimir-token may not be sent to 127.0.0.1:{}: it has no annotation releaseplan.io/gate-hosts and no spec.credentials of GatePolicy {policy} binds it to that host",
            second.port()
        ),
    )
    .await;

    // None of the refused calls reached anyone.
    assert_eq!(count(&other_seen), 0, "another tenant's service was called");
    assert_eq!(count(&api_seen), 0, "the API server stand-in was called");
    assert_eq!(count(&second_seen), 0, "the Secret went to the wrong host");
    // The refusals are Warning Events of the plan, naming the rule; none
    // of them rolled anything back.
    let events = plan_events(&client, &ns, "shop").await;
    assert!(
        events.iter().any(|(r, t, note, _)| r == "GatePolicyRefused"
            && t == "Warning"
            && note.contains("spec.pinnedHeaders")),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|(r, ..)| r == "RollbackStarted"),
        "{events:?}"
    );
    drop(op);
    delete_policy(&client, &policy).await;
}

fn webhook_spec(url: &str, headers: Value) -> GateSpec {
    let mut g = hook(url);
    g["headers"] = headers;
    let health: releaseplan::api::Health =
        serde_json::from_value(json!({"webhooks": [g]})).unwrap();
    GateSpec::all(&health.entries().unwrap()).unwrap().remove(0)
}

fn ctx(ns: &str) -> GateContext {
    GateContext {
        vars: TemplateVars {
            plan: "shop".into(),
            namespace: ns.into(),
            ..TemplateVars::default()
        },
        revision: "r1".into(),
        step: 0,
    }
}

#[tokio::test]
async fn two_tenants_get_their_own_destinations_and_pins() {
    let h = Harness::new("gate-policy-a").await;
    let client = h.client.clone();
    let (a, b) = (
        h.ns.clone(),
        cluster::test_namespace(&client, "gate-policy-b").await,
    );
    let c = cluster::test_namespace(&client, "gate-policy-c").await;
    label(&client, &a, &a).await;
    label(&client, &b, &b).await;
    let (svc_a, seen_a) = stand_in().await;
    let (svc_b, seen_b) = stand_in().await;
    for (tenant, svc, org) in [(&a, svc_a, "team-a"), (&b, svc_b, "team-b")] {
        put_policy(
            &client,
            &format!("{tenant}-own"),
            tenant,
            json!({"destinations": {"hosts": [format!("127.0.0.1:{}", svc.port())]},
                   "pinnedHeaders": [{"name": "X-Scope-OrgID", "value": org}]}),
        )
        .await;
    }
    // The operator's own caches, on the real API server (required mode).
    let liveness = releaseplan::ops::liveness::Liveness::new(std::time::Duration::from_secs(60));
    let (plans, _writer) = kube::runtime::reflector::store();
    let (caches, wakes) =
        releaseplan::controller::policy::watch(&client, None, Mode::Required, &liveness, plans)
            .await;
    tokio::spawn(futures::StreamExt::for_each(wakes, |_| async {}));
    // The policies of `ns` once the cache holds `n` of them for it.
    let policy_of = |ns: String, n: usize| {
        let caches = caches.clone();
        async move {
            wait_until(WAIT, "the policies in the cache", || {
                let caches = caches.clone();
                let ns = ns.clone();
                async move { caches.for_namespace(&ns).filter(|p| p.policies.len() == n) }
            })
            .await
        }
    };
    let reader = CredentialReader::none();
    let call = |policy: releaseplan::gates::policy::NamespacePolicy, ns: String, port: u16| {
        let reader = reader.clone();
        async move {
            let gate = webhook_spec(&format!("http://127.0.0.1:{port}/hook"), json!([]));
            releaseplan::gates::evaluate(&gate, &gate_http(), &reader, &policy, &ctx(&ns)).await
        }
    };
    let pa = policy_of(a.clone(), 1).await;
    let pb = policy_of(b.clone(), 1).await;
    // Each tenant reaches its own service, with its own pinned tenant id.
    assert_eq!(
        call(pa.clone(), a.clone(), svc_a.port()).await,
        GateResult::Pass { value: 200.0 }
    );
    assert_eq!(
        call(pb.clone(), b.clone(), svc_b.port()).await,
        GateResult::Pass { value: 200.0 }
    );
    assert_eq!(
        seen_a.lock().unwrap().requests[0].0.as_deref(),
        Some("team-a")
    );
    assert_eq!(
        seen_b.lock().unwrap().requests[0].0.as_deref(),
        Some("team-b")
    );
    // Not the other's.
    match call(pa, a.clone(), svc_b.port()).await {
        GateResult::Refused { reason } => assert!(
            reason.contains(&format!(
                "no spec.destinations of GatePolicy {a}-own admits it"
            )),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(seen_b.lock().unwrap().requests.len(), 1);
    // A namespace no policy selects gets nothing in the required mode.
    let pc = policy_of(c.clone(), 0).await;
    match call(pc, c.clone(), svc_a.port()).await {
        GateResult::Refused { reason } => assert!(
            reason.contains(&format!("namespace {c} is selected by no GatePolicy and the operator requires one (--gate-policy=required)")),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(seen_a.lock().unwrap().requests.len(), 1);
    for tenant in [&a, &b] {
        delete_policy(&client, &format!("{tenant}-own")).await;
    }
}

#[tokio::test]
async fn a_route_to_a_gateway_the_policy_does_not_allow_is_not_written() {
    let h = Harness::new("gate-policy-route").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    support::crd::install_gateway_api(&client).await;
    label(&client, &ns, &ns).await;
    let policy = format!("{ns}-routes");
    put_policy(
        &client,
        &policy,
        &ns,
        json!({"routes": {"parentRefs": [{"namespace": "infra", "name": "public"}]}}),
    )
    .await;
    let op = h.operator().args(["--gate-policy=required"]).start().await;
    let mut c = web("shop:1", 1);
    c["traffic"] = json!({"port": 8080, "gatewayAPI": {"parentRefs": [{"namespace": "infra", "name": "internal"}]}});
    support::plans::create(
        &client,
        &ns,
        &support::fixtures::plan("shop", json!({"components": [c]})),
    )
    .await;
    // Judged before the release starts: the plan does not start (no
    // Deployment), and says what would allow the route.
    let stalled = wait_until(WAIT, "the plan to report the refused route", || {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            let p = support::plans::get(&client, &ns, "shop").await?;
            condition(&p, "Stalled").filter(|(s, r, _)| s == "True" && r == "GatePolicyRefused")
        }
    })
    .await;
    assert!(
        stalled.2.contains(&format!(
            "the HTTPRoute of component web is refused by policy: Gateway infra/internal is not allowed for routes of namespace {ns}: no spec.routes of GatePolicy {policy} admits it"
        )) && stalled.2.contains("gatePolicy.parentRefs"),
        "{stalled:?}"
    );
    assert!(
        support::plans::revisions(&client, &ns, "shop")
            .await
            .is_empty(),
        "the release did not start"
    );
    let routes: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource::erase::<releaseplan::api::gateway::HTTPRoute>(&()),
    );
    assert!(
        routes
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no HTTPRoute was written"
    );

    // The administrator allows that Gateway: the change wakes the plan.
    put_policy(
        &client,
        &policy,
        &ns,
        json!({"routes": {"parentRefs": [{"namespace": "infra"}]}}),
    )
    .await;
    let route = wait_until(WAIT, "the HTTPRoute once allowed", || {
        let routes = routes.clone();
        async move { routes.get_opt("shop-web").await.ok().flatten() }
    })
    .await;
    assert_eq!(route.name_any(), "shop-web");
    drop(op);
    delete_policy(&client, &policy).await;
}

/// The first-install bug (issue #50, part 4). The operator runs as the
/// chart runs it by default: `--gate-policy=required` (the binary's own
/// default since issue #50, part 5, so left unset here) and the chart's
/// GatePolicy with `gatePolicy.hosts: []` (here selecting only this test's
/// namespace). A new plan of three replicas with one webhook gate used to
/// come up, have its gate refused, and be "rolled back to stable revision
/// none": scaled to zero. Now the release does not start (no Deployment, so
/// nothing to scale to zero, and no call), the plan is Stalled with a
/// message naming the gate, the destination and `gatePolicy.hosts`; once
/// the GatePolicy lists the host, it is released by itself.
#[tokio::test]
async fn the_charts_default_policy_holds_a_gated_first_release_until_the_host_is_listed() {
    let h = Harness::new("gate-policy-first").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    label(&client, &ns, &ns).await;
    let (hook_addr, hook_seen) = stand_in().await;
    let host = format!("127.0.0.1:{}", hook_addr.port());
    // What charts/releaseplan/templates/gatepolicy.yaml renders with the
    // default values.
    let chart_spec = |hosts: Vec<String>| {
        json!({
            "destinations": {"hosts": hosts, "ownNamespaceServices": false},
            "routes": {"parentRefs": [], "entryPoints": []}
        })
    };
    let policy = format!("{ns}-default");
    put_policy(&client, &policy, &ns, chart_spec(Vec::new())).await;
    let op = h.operator().policy_default().start().await;
    support::plans::create(
        &client,
        &ns,
        &support::fixtures::plan(
            "shop",
            json!({"components": [web("shop:1", 3)],
                   "strategy": {"steps": [{"setWeight": 50}]},
                   "health": {"webhooks": [hook(&format!("http://{host}/hook"))]}}),
        ),
    )
    .await;
    let (_, _, message) = wait_until(WAIT, "the plan held by the policy", || {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            let p = support::plans::get(&client, &ns, "shop").await?;
            condition(&p, "Stalled").filter(|(s, r, _)| s == "True" && r == "GatePolicyRefused")
        }
    })
    .await;
    for part in [
        "gate smoke".to_string(),
        format!("host {host} is not allowed for namespace {ns}"),
        format!("GatePolicy {policy}"),
        "spec.destinations.hosts".to_string(),
        format!("--set 'gatePolicy.hosts={{{host}}}'"),
    ] {
        assert!(message.contains(&part), "{part:?} not in {message}");
    }
    // The issue saw the rollback 10 s after the plan came up: give it longer.
    tokio::time::sleep(std::time::Duration::from_secs(15)).await;
    let p = support::plans::get(&client, &ns, "shop").await.unwrap();
    assert_eq!(p.status.as_ref().map(|s| s.phase), Some(Phase::Pending));
    assert!(
        support::plans::revisions(&client, &ns, "shop")
            .await
            .is_empty(),
        "no Deployment: the release did not start"
    );
    assert_eq!(count(&hook_seen), 0, "the refused gate was not called");
    let events = plan_events(&client, &ns, "shop").await;
    assert!(
        !events
            .iter()
            .any(|(r, ..)| r == "RollbackStarted" || r == "RolledBack" || r == "GateFailed"),
        "{events:?}"
    );
    let warnings: Vec<_> = events
        .iter()
        .filter(|(r, ..)| r == "GatePolicyRefused")
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one Warning, not one per reconcile: {events:?}"
    );
    assert!(warnings[0].2.contains("gatePolicy.hosts"), "{warnings:?}");

    // The administrator sets the one value: the change wakes the plan, and
    // the release goes through with its gate called.
    put_policy(&client, &policy, &ns, chart_spec(vec![host.clone()])).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let revs = support::plans::revisions(&client, &ns, "shop").await;
    assert_eq!(
        support::plans::by_image(&revs, "shop:1").map(|(r, _)| r),
        Some(3),
        "{revs:?}"
    );
    assert!(count(&hook_seen) > 0, "the gate was called once allowed");
    let p = support::plans::get(&client, &ns, "shop").await.unwrap();
    assert_eq!(
        condition(&p, "Stalled").map(|(s, ..)| s).as_deref(),
        Some("False")
    );
    drop(op);
    delete_policy(&client, &policy).await;
}

/// The binary's own default is the chart's (issue #50, part 5): run with no
/// `--gate-policy`, a namespace that no GatePolicy selects gets no gate
/// call; its gated plan does not start and says which flag decides. With
/// the old default (`optional`) the gate was called and the plan released.
#[tokio::test]
async fn the_binarys_default_policy_refuses_a_namespace_no_policy_selects() {
    let h = Harness::new("gate-policy-binary").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let (hook_addr, hook_seen) = stand_in().await;
    let op = h.operator().policy_default().start().await;
    support::plans::create(
        &client,
        &ns,
        &support::fixtures::plan(
            "shop",
            json!({"components": [web("shop:1", 1)],
                   "strategy": {"steps": [{"setWeight": 50}]},
                   "health": {"webhooks": [hook(&format!("http://{hook_addr}/hook"))]}}),
        ),
    )
    .await;
    let (_, _, message) = wait_until(WAIT, "the plan held by the default policy", || {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            let p = support::plans::get(&client, &ns, "shop").await?;
            condition(&p, "Stalled").filter(|(s, r, _)| s == "True" && r == "GatePolicyRefused")
        }
    })
    .await;
    assert!(
        message.contains(&format!(
            "namespace {ns} is selected by no GatePolicy and the operator requires one (--gate-policy=required)"
        )),
        "{message}"
    );
    assert_eq!(count(&hook_seen), 0, "the refused gate was not called");
    assert!(
        support::plans::revisions(&client, &ns, "shop")
            .await
            .is_empty(),
        "no Deployment: the release did not start"
    );
    drop(op);
}
