//! The traffic data plane itself (tests/support/traffic.rs), with
//! hand-written Services, kwok Deployments and HTTPRoutes, no operator:
//! real requests through Traefik's Gateway reach the revision a Service
//! selects, split by HTTPRoute weights, routed by header, and answered 503
//! when the Service has no ready pod. The operator's rollouts are tested on
//! the same data plane.
//!
//! Needs the local cluster of `make test` (ClusterIPs on loopback) and
//! Traefik and the Gateway API CRDs of `make tools`.

// Test code may unwrap, expect and panic (the lint policy of Cargo.toml).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic
)]

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::Harness;
use support::fixtures::{revision_deployment, revision_service};
use support::traffic::{DataPlane, assert_split, binomial_bounds};

const CANARY: (&str, &str) = ("x-canary", "true");

/// A namespace with a data plane, Deployments `web-a` and `web-b` (one pod
/// each) and the Services `services` (name, revision).
async fn setup(prefix: &str, services: &[(&str, &str)]) -> (Harness, DataPlane) {
    let h = Harness::new(prefix).await;
    let dp = DataPlane::start(&h.client, &h.ns).await;
    for rev in ["a", "b"] {
        create::<Deployment>(
            &h.client,
            &h.ns,
            revision_deployment(&format!("web-{rev}"), rev, 1),
        )
        .await;
    }
    for (name, rev) in services {
        create::<Service>(&h.client, &h.ns, revision_service(name, rev)).await;
    }
    (h, dp)
}

async fn create<K>(client: &Client, ns: &str, obj: Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj).unwrap();
    Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
}

fn backend(service: &str, weight: u32) -> Value {
    json!({"name": service, "port": 8080, "weight": weight})
}

/// The interval arithmetic, checked against values computed by hand.
#[test]
fn binomial_bounds_are_the_exact_tails() {
    // p = 0 or 1: a correct router is exact.
    assert_eq!(binomial_bounds(1000, 0.0, 1e-6), (0, 0));
    assert_eq!(binomial_bounds(1000, 1.0, 1e-6), (1000, 1000));
    // n = 2, p = 1/2: P(0) = P(2) = 1/4. With alpha = 0.4 (0.2 per tail)
    // neither end can go; with alpha = 0.6 (0.3 per tail) both ends go.
    assert_eq!(binomial_bounds(2, 0.5, 0.4), (0, 2));
    assert_eq!(binomial_bounds(2, 0.5, 0.6), (1, 1));
    // n = 3, p = 1/2: P(0) = P(3) = 1/8, P(1) = P(2) = 3/8.
    assert_eq!(binomial_bounds(3, 0.5, 0.2), (0, 3));
    assert_eq!(binomial_bounds(3, 0.5, 0.3), (1, 2));
    // n = 10, p = 0.1, alpha = 0.6 (0.3 per tail): P(0) = 0.349 > 0.3 keeps
    // 0; P(X >= 2) = 0.264 <= 0.3 < P(X >= 1) = 0.651 drops 2 and up.
    assert_eq!(binomial_bounds(10, 0.1, 0.6), (0, 1));
    // The 80/20 split of weights_split_within_binomial_tolerance.
    let (lo, hi) = binomial_bounds(2000, 0.2, 1e-6);
    assert!(lo < 400 && hi > 400 && hi - lo < 200, "{lo}..={hi}");
}

/// An HTTPRoute 80/20 between two Services splits real requests within the
/// binomial tolerance: N = 2000 requests, the canary's count must be in the
/// exact interval of Binomial(2000, 0.2) whose two tails together hold less
/// than 1e-6 (each < 5e-7). Mean 400, standard deviation sqrt(2000 * 0.2 *
/// 0.8) = 17.9; the interval is about 4.9 standard deviations either side,
/// 315..=490 (printed), i.e. 20% +/- about 4.4 points. Traefik's weighted
/// round robin is deterministic and lands on 400 give or take a few.
#[tokio::test]
async fn weights_split_within_binomial_tolerance() {
    let (_h, dp) = setup("traffic-split", &[("stable", "a"), ("canary", "b")]).await;
    dp.apply_route(
        "web",
        json!([{ "backendRefs": [backend("stable", 80), backend("canary", 20)] }]),
    )
    .await;
    dp.wait_for("both revisions to answer through the route", 50, &[], |c| {
        c.errors() == 0
            && c.ok_of("a") > 0
            && c.ok_of("b") > 0
            && c.ok_of("a") + c.ok_of("b") == c.total()
    })
    .await;
    let counts = dp.send(2000, &[]).await;
    println!("{}", assert_split(&counts, "b", 20, "route 80/20"));
    println!("{}", assert_split(&counts, "a", 80, "route 80/20"));
}

/// A header match sends every matching request to the canary, and the rest
/// to stable.
#[tokio::test]
async fn header_match_goes_to_canary() {
    let (_h, dp) = setup("traffic-header", &[("stable", "a"), ("canary", "b")]).await;
    dp.apply_route(
        "web",
        json!([
            { "backendRefs": [backend("stable", 1)] },
            {
                "matches": [{ "headers": [{ "name": CANARY.0, "value": CANARY.1 }] }],
                "backendRefs": [backend("canary", 1)]
            }
        ]),
    )
    .await;
    dp.wait_for("the header route to reach the canary", 20, &[CANARY], |c| {
        c.all_ok_from("b")
    })
    .await;
    dp.wait_for("other requests to reach stable", 20, &[], |c| {
        c.all_ok_from("a")
    })
    .await;
    let with = dp.send(500, &[CANARY]).await;
    let without = dp.send(500, &[]).await;
    println!("with {}: {with}; without: {without}", CANARY.0);
    assert!(with.all_ok_from("b"), "with the header: {with}");
    assert!(without.all_ok_from("a"), "without the header: {without}");
}

/// The answer follows the Service's selector at request time: changing the
/// selector from revision a to b changes what the same route answers.
#[tokio::test]
async fn selector_change_changes_answers() {
    let (h, dp) = setup("traffic-selector", &[("web", "a")]).await;
    dp.apply_route("web", json!([{ "backendRefs": [backend("web", 1)] }]))
        .await;
    dp.wait_for("revision a to answer", 20, &[], |c| c.all_ok_from("a"))
        .await;
    Api::<Service>::namespaced(h.client.clone(), &h.ns)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"selector": {"releaseplan.io/revision": "b"}}})),
        )
        .await
        .unwrap();
    dp.wait_for(
        "revision b to answer after the selector change",
        20,
        &[],
        |c| c.all_ok_from("b"),
    )
    .await;
    let after = dp.send(200, &[]).await;
    println!("after the selector change: {after}");
    assert!(after.all_ok_from("b"), "{after}");

    // Dropped, the data plane leaves nothing listening: neither Traefik's
    // entry point nor the emulator's ClusterIP:port.
    let service = Api::<Service>::namespaced(h.client.clone(), &h.ns)
        .get("web")
        .await
        .unwrap();
    let cluster_ip = service.spec.unwrap().cluster_ip.unwrap();
    let backend_addr: std::net::SocketAddr = format!("{cluster_ip}:8080").parse().unwrap();
    let gateway_addr = dp.addr;
    drop(dp);
    for addr in [gateway_addr, backend_addr] {
        support::wait_until(
            Duration::from_secs(30),
            &format!("{addr} to be closed"),
            || async move {
                tokio::net::TcpStream::connect(addr)
                    .await
                    .is_err()
                    .then_some(())
            },
        )
        .await;
    }
}

/// A Service whose Deployment is scaled to 0 has no ready endpoint, and the
/// emulator answers 503 for its revision, as kube-proxy would refuse it;
/// scaled back, it answers again.
#[tokio::test]
async fn scaled_to_zero_answers_503() {
    let (h, dp) = setup("traffic-scale", &[("stable", "a")]).await;
    dp.apply_route("web", json!([{ "backendRefs": [backend("stable", 1)] }]))
        .await;
    dp.wait_for("revision a to answer", 20, &[], |c| c.all_ok_from("a"))
        .await;
    let deployments = Api::<Deployment>::namespaced(h.client.clone(), &h.ns);
    let scale = |replicas: i32| {
        let deployments = deployments.clone();
        async move {
            deployments
                .patch(
                    "web-a",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                )
                .await
                .unwrap();
        }
    };
    scale(0).await;
    let down = dp
        .wait_for("503 for revision a without pods", 20, &[], |c| {
            c.unready.get("a").copied() == Some(c.total())
        })
        .await;
    println!("scaled to 0: {down}");
    scale(1).await;
    let up = dp
        .wait_for("revision a to answer again", 20, &[], |c| {
            c.all_ok_from("a")
        })
        .await;
    println!("scaled to 1: {up}");
    let changes: Vec<bool> = dp
        .readiness_changes()
        .iter()
        .filter(|c| c.service == "stable")
        .map(|c| c.ready)
        .collect();
    assert!(
        changes.ends_with(&[true, false, true]),
        "readiness of Service stable as the emulator saw it: {changes:?}"
    );
}

/// The sampler sees traffic leave a revision: a route switched from stable
/// (a) to canary (b) while requests flow. Two ready Services, so no request
/// may fail across Traefik's reload; how long the switch took to reach the
/// data plane is printed, not asserted.
#[tokio::test]
async fn sampler_sees_a_route_switch() {
    let (_h, dp) = setup("traffic-sampler", &[("stable", "a"), ("canary", "b")]).await;
    dp.apply_route(
        "web",
        json!([{ "backendRefs": [backend("stable", 100), backend("canary", 0)] }]),
    )
    .await;
    dp.wait_for("revision a to answer", 20, &[], |c| c.all_ok_from("a"))
        .await;
    dp.wait_service_ready("canary").await;
    let sampler = dp.sampler(
        &[],
        Duration::from_millis(250),
        2,
        Duration::from_millis(10),
    );
    support::wait_until(
        Duration::from_secs(30),
        "the sampler's first answers",
        || {
            let seen = sampler.snapshot().total().ok_of("a");
            async move { (seen > 0).then_some(()) }
        },
    )
    .await;
    let switched = Instant::now();
    dp.apply_route(
        "web",
        json!([{ "backendRefs": [backend("stable", 0), backend("canary", 100)] }]),
    )
    .await;
    support::wait_until(
        Duration::from_secs(60),
        "only revision b in the sampler's answers",
        || {
            let recent = sampler
                .snapshot()
                .since(Instant::now() - Duration::from_secs(1));
            async move { (recent.all_ok_from("b")).then_some(()) }
        },
    )
    .await;
    let timeline = sampler.stop().await;
    println!(
        "route switched a -> b at +{:.2}s:\n{}",
        (switched - timeline.started).as_secs_f64(),
        timeline.render()
    );
    let (last_a, first_b) = (timeline.last_ok["a"], timeline.first_ok["b"]);
    println!(
        "route applied -> first answer from b: {:.2}s; -> last answer from a: {:.2}s",
        first_b.saturating_duration_since(switched).as_secs_f64(),
        last_a.saturating_duration_since(switched).as_secs_f64()
    );
    let total = timeline.total();
    assert_eq!(
        total.errors(),
        0,
        "requests failed across the switch: {total}"
    );
    assert!(
        last_a < timeline.last_ok["b"],
        "a answered after b took over"
    );
}
