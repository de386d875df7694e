//! The traffic objects on a real API server (with the Gateway API CRDs of
//! `make tools`): the operator creates and owns a stable and a canary Service
//! and an HTTPRoute; GitOps re-applying the plan mid-rollout (server-side
//! apply with another field manager, as Argo CD and Flux do, and client-side
//! `kubectl apply`) does not move the weights; fields another manager adds
//! to the route stay, weights someone edits come back; an object of the same
//! name made by someone else is refused, not taken over; on rollback the
//! route leaves the canary before its pods go. Requests through a real
//! router: tests/traffic.rs.

use crate::support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use releaseplan::api::gateway::HTTPRoute;
use releaseplan::api::{Phase, ReleasePlan};
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::{plan, template};
use support::plans::{create_stable, get, set_components, wait_phase};
use support::tools::{kubectl_bin, run};
use support::{Harness, WAIT, crd, wait_until};

/// A routed component `web` running `template`.
fn routed(template: Value, replicas: i32) -> Value {
    json!({"name": "web", "replicas": replicas, "template": template,
        "traffic": {"port": 8080, "gatewayAPI": {"parentRefs": [{"name": "gw"}], "hostnames": ["shop.example"]}}})
}

fn spec(template: Value) -> Value {
    json!({"components": [routed(template, 4)],
        "strategy": {"steps": [{"setWeight": 25}, {"setHeaderRoute": {"headers": [{"name": "x-canary", "value": "true"}]}}, {"pause": {}}]}})
}

/// (stable weight, canary weight, header route present) of the route.
async fn weights(client: &Client, ns: &str) -> Option<(i64, i64, bool)> {
    let route = Api::<HTTPRoute>::namespaced(client.clone(), ns)
        .get_opt("shop-web")
        .await
        .ok()??;
    let mut out = (0, 0, false);
    for rule in &route.spec.rules {
        if rule.matches.iter().any(|m| !m.headers.is_empty()) {
            out.2 = true;
            continue;
        }
        for b in &rule.backend_refs {
            let w = i64::from(b.weight.unwrap_or(1));
            match b.name.as_str() {
                "shop-web-stable" => out.0 += w,
                "shop-web-canary" => out.1 += w,
                other => panic!("unexpected backend {other}"),
            }
        }
    }
    Some(out)
}

/// The revision a Service selects.
async fn selects(client: &Client, ns: &str, name: &str) -> Option<String> {
    let s = Api::<Service>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    s.spec?.selector?.get("releaseplan.io/revision").cloned()
}

/// Waits until the plan rests at the header route's pause with 25% of requests.
async fn at_pause(client: &Client, ns: &str) -> ReleasePlan {
    wait_until(
        WAIT,
        "the rollout to hold at its pause with 25%",
        || async {
            let p = get(client, ns, "shop").await?;
            let s = p.status.as_ref()?;
            (s.phase == Phase::RollingOut && s.current_step == 2 && s.traffic_weight == Some(25))
                .then_some(p.clone())
        },
    )
    .await
}

async fn setup(prefix: &str) -> (Harness, support::operator::Operator) {
    let h = Harness::new(prefix).await;
    crd::install_gateway_api(&h.client).await;
    // Started after the Gateway API CRDs: the operator watches HTTPRoutes
    // only when it can list them at start-up.
    let op = h.operator().start().await;
    (h, op)
}

#[tokio::test]
async fn routed_rollout_owns_services_and_route_and_gitops_reapply_does_not_move_weights() {
    let (h, _op) = setup("traffic-gitops").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let p = create_stable(&client, &ns, "shop", spec(template("shop:1"))).await;
    let s = p.status.unwrap();
    assert_eq!(s.traffic_weight, Some(100));
    let v1 = s.components[0].current_hash.clone().unwrap();
    wait_until(
        WAIT,
        "both Services on v1 and the route at 100/0",
        || async {
            let ok = selects(&client, &ns, "shop-web-stable").await.as_ref() == Some(&v1)
                && selects(&client, &ns, "shop-web-canary").await.as_ref() == Some(&v1)
                && weights(&client, &ns).await == Some((100, 0, false));
            ok.then_some(())
        },
    )
    .await;
    // Owned by the plan, with its port.
    let svc = Api::<Service>::namespaced(client.clone(), &ns)
        .get("shop-web-stable")
        .await
        .unwrap();
    let owner = &svc.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("ReleasePlan", "shop")
    );
    assert_eq!(svc.spec.unwrap().ports.unwrap()[0].port, 8080);

    // Roll out v2: 25% of requests at the first step, plus the header route.
    let manifest = |image: &str| {
        let mut p = serde_json::to_value(plan("shop", spec(template(image)))).unwrap();
        p["metadata"]["namespace"] = json!(ns);
        p
    };
    let plans: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource::erase::<ReleasePlan>(&()),
    );
    // As Argo CD / Flux: server-side apply with their own field manager.
    let gitops = PatchParams::apply("argocd-controller").force();
    plans
        .patch("shop", &gitops, &Patch::Apply(manifest("shop:2")))
        .await
        .unwrap();
    let p = at_pause(&client, &ns).await;
    let v2 = p.status.unwrap().components[0]
        .current_hash
        .clone()
        .unwrap();
    assert_eq!(weights(&client, &ns).await, Some((75, 25, true)));
    assert_eq!(
        selects(&client, &ns, "shop-web-canary").await,
        Some(v2.clone())
    );
    assert_eq!(
        selects(&client, &ns, "shop-web-stable").await,
        Some(v1.clone())
    );

    // GitOps re-applies the same manifests mid-rollout, both ways.
    plans
        .patch("shop", &gitops, &Patch::Apply(manifest("shop:2")))
        .await
        .unwrap();
    let yaml = yaml_serde::to_string(&manifest("shop:2")).unwrap();
    run(&kubectl_bin(), &["apply", "-f", "-"], Some(&yaml));
    // A route label of another manager, and a weight edited by hand.
    let routes = Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource::erase::<HTTPRoute>(&()),
    );
    routes
        .patch(
            "shop-web",
            &PatchParams::apply("team-tool"),
            &Patch::Apply(
                json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "shop-web", "labels": {"team": "checkout"}}}),
            ),
        )
        .await
        .unwrap();
    let mut route = Api::<HTTPRoute>::namespaced(client.clone(), &ns)
        .get("shop-web")
        .await
        .unwrap();
    for rule in &mut route.spec.rules {
        for b in &mut rule.backend_refs {
            b.weight = Some(50);
        }
    }
    Api::<HTTPRoute>::namespaced(client.clone(), &ns)
        .replace("shop-web", &PostParams::default(), &route)
        .await
        .unwrap();
    wait_until(WAIT, "the edited weights to come back", || async {
        (weights(&client, &ns).await == Some((75, 25, true))).then_some(())
    })
    .await;
    // Nothing moved the rollout or the weights; the other manager's label stays.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let p = at_pause(&client, &ns).await;
    assert_eq!(p.status.unwrap().weight, 25);
    assert_eq!(weights(&client, &ns).await, Some((75, 25, true)));
    let route = Api::<HTTPRoute>::namespaced(client.clone(), &ns)
        .get("shop-web")
        .await
        .unwrap();
    assert_eq!(
        route.labels().get("team").map(String::as_str),
        Some("checkout")
    );

    // Promote: everything on v2, the header route gone.
    support::plans::request(&client, &ns, "shop", "promote").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_until(
        WAIT,
        "both Services on v2 and the route at 100/0",
        || async {
            let ok = selects(&client, &ns, "shop-web-stable").await.as_ref() == Some(&v2)
                && selects(&client, &ns, "shop-web-canary").await.as_ref() == Some(&v2)
                && weights(&client, &ns).await == Some((100, 0, false));
            ok.then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn rollback_moves_requests_off_the_canary_before_its_pods_go() {
    let (h, _op) = setup("traffic-rollback").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    create_stable(&client, &ns, "shop", spec(template("shop:1"))).await;
    set_components(&client, &ns, "shop", json!([routed(template("shop:2"), 4)])).await;
    let p = at_pause(&client, &ns).await;
    let v2 = p.status.unwrap().components[0]
        .current_hash
        .clone()
        .unwrap();
    let canary = format!("shop-web-{v2}");
    // Watch the route and the canary's Deployment from now on. Each write's
    // resourceVersion is the etcd revision it was made at (one etcd in the
    // test cluster), so of two writes the earlier has the smaller number.
    let routes = Api::<HTTPRoute>::namespaced(client.clone(), &ns);
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let from = routes
        .get("shop-web")
        .await
        .unwrap()
        .resource_version()
        .unwrap();
    let params = kube::api::WatchParams::default().timeout(60);
    let route_events = routes.watch(&params, &from).await.unwrap();
    let deploy_events = deployments.watch(&params, &from).await.unwrap();
    support::plans::request(&client, &ns, "shop", "abort").await;
    let first_route_off = async {
        use futures::StreamExt;
        let mut events = Box::pin(route_events);
        while let Some(e) = events.next().await {
            if let Ok(kube::api::WatchEvent::Modified(r)) = e {
                let canary_weight: i32 = r
                    .spec
                    .rules
                    .iter()
                    .flat_map(|x| &x.backend_refs)
                    .filter(|b| b.name == "shop-web-canary")
                    .map(|b| b.weight.unwrap_or(1))
                    .sum();
                let headers = r
                    .spec
                    .rules
                    .iter()
                    .any(|x| x.matches.iter().any(|m| !m.headers.is_empty()));
                if canary_weight == 0 && !headers {
                    return r.resource_version().unwrap().parse::<u64>().unwrap();
                }
            }
        }
        panic!("the route never left the canary");
    };
    let first_pods_off = async {
        use futures::StreamExt;
        let mut events = Box::pin(deploy_events);
        while let Some(e) = events.next().await {
            if let Ok(kube::api::WatchEvent::Modified(d)) = e
                && d.name_any() == canary
                && d.spec.as_ref().and_then(|s| s.replicas) == Some(0)
            {
                return d.resource_version().unwrap().parse::<u64>().unwrap();
            }
        }
        panic!("the canary was never scaled down");
    };
    let (route_off, pods_off) = tokio::join!(first_route_off, first_pods_off);
    assert!(
        route_off < pods_off,
        "the route left the canary (etcd revision {route_off}) before its pods went ({pods_off})"
    );
    wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
    assert_eq!(weights(&client, &ns).await, Some((100, 0, false)));
    let v1 = selects(&client, &ns, "shop-web-stable").await.unwrap();
    assert_eq!(selects(&client, &ns, "shop-web-canary").await, Some(v1));
}

#[tokio::test]
async fn a_service_of_the_same_name_is_refused_not_taken_over() {
    let (h, _op) = setup("traffic-taken").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let theirs: Service = serde_json::from_value(json!({
        "metadata": {"name": "shop-web-canary", "labels": {"owner": "someone-else"}},
        "spec": {"selector": {"app": "theirs"}, "ports": [{"port": 9999}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    support::plans::create(&client, &ns, &plan("shop", spec(template("shop:1")))).await;
    let p = wait_until(WAIT, "status to name the refused Service", || async {
        let p = get(&client, &ns, "shop").await?;
        let msg = p.status.as_ref()?.message.clone()?;
        msg.contains("Service shop-web-canary").then_some(p)
    })
    .await;
    let msg = p.status.unwrap().message.unwrap();
    assert!(msg.contains("not owned by this ReleasePlan"), "{msg}");
    // Theirs is untouched.
    let svc = Api::<Service>::namespaced(client.clone(), &ns)
        .get("shop-web-canary")
        .await
        .unwrap();
    assert_eq!(
        svc.labels().get("owner").map(String::as_str),
        Some("someone-else")
    );
    assert_eq!(
        svc.spec
            .unwrap()
            .selector
            .unwrap()
            .get("app")
            .map(String::as_str),
        Some("theirs")
    );
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        !deployments.items.is_empty(),
        "the Deployments were written first"
    );
}

#[tokio::test]
async fn blue_green_switches_the_active_service_in_one_write_then_scales_the_old_down() {
    let (h, _op) = setup("traffic-bluegreen").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let bg = |image: &str| {
        json!({"components": [routed(template(image), 3)],
            "strategy": {"blueGreen": {"scaleDownDelaySeconds": 3}}})
    };
    let p = create_stable(&client, &ns, "shop", bg("shop:1")).await;
    let v1 = p.status.unwrap().components[0]
        .current_hash
        .clone()
        .unwrap();
    support::plans::patch_spec(&client, &ns, "shop", bg("shop:2")).await;
    // The preview at full scale beside the active revision, no request moved.
    let p = wait_until(WAIT, "the preview to be ready at full scale", || async {
        let p = get(&client, &ns, "shop").await?;
        let s = p.status.as_ref()?;
        let c = &s.components[0];
        (s.phase == Phase::RollingOut && c.current_ready == 3 && c.stable_ready == 3)
            .then_some(p.clone())
    })
    .await;
    let v2 = p.status.unwrap().components[0]
        .current_hash
        .clone()
        .unwrap();
    assert_eq!(
        selects(&client, &ns, "shop-web-stable").await,
        Some(v1.clone())
    );
    assert_eq!(
        selects(&client, &ns, "shop-web-canary").await,
        Some(v2.clone())
    );
    assert_eq!(weights(&client, &ns).await, Some((100, 0, false)));
    let services = Api::<Service>::namespaced(client.clone(), &ns);
    let before = services
        .get("shop-web-stable")
        .await
        .unwrap()
        .resource_version()
        .unwrap();

    support::plans::request(&client, &ns, "shop", "promote").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_until(WAIT, "the active Service on v2", || async {
        (selects(&client, &ns, "shop-web-stable").await.as_ref() == Some(&v2)).then_some(())
    })
    .await;
    // The active Service was switched, and the route never moved.
    let list = services
        .list(&ListParams::default().labels("releaseplan.io/role=stable"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    let after = list.items[0].resource_version().unwrap();
    assert_ne!(before, after);
    assert_eq!(weights(&client, &ns).await, Some((100, 0, false)));
    let revs = support::plans::revisions(&client, &ns, "shop").await;
    assert_eq!(
        support::plans::by_image(&revs, "shop:1").map(|r| r.0),
        Some(3),
        "the old revision waits out scaleDownDelaySeconds: {revs:?}"
    );
    wait_until(
        WAIT,
        "the old revision to scale down after the delay",
        || async {
            let revs = support::plans::revisions(&client, &ns, "shop").await;
            (support::plans::by_image(&revs, "shop:1").map(|r| r.0) == Some(0)).then_some(())
        },
    )
    .await;
}
