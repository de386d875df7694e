//! Components in dependency order (`dependsOn`) on the local control plane:
//! a three-component chain whose middle component fails once the last one has
//! started is rolled back last one first; bad dependencies are refused by the
//! API server.

use crate::support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use releaseplan::api::{LABEL_COMPONENT, LABEL_PLAN, Phase, ReleasePlan};
use serde_json::{Value, json};
use std::cell::RefCell;
use std::collections::BTreeMap;
use support::fixtures::{plan, template};
use support::plans::{create_stable, get, request, set_components, wait_phase};
use support::{Harness, WAIT, wait_until};

const CHAIN: [&str; 3] = ["api", "svc", "web"];

/// `api`; `svc` once `api` is fully promoted; `web` once `svc` finished its
/// step `half`. Two replicas each, of `<name>:<version>`.
fn chain(version: u8) -> Value {
    json!([
        {"name": "api", "replicas": 2, "template": template(&format!("api:{version}"))},
        {"name": "svc", "replicas": 2, "template": template(&format!("svc:{version}")),
         "dependsOn": [{"component": "api"}]},
        {"name": "web", "replicas": 2, "template": template(&format!("web:{version}")),
         "dependsOn": [{"component": "svc", "step": "half"}]},
    ])
}

/// Each component's revisions by image: (spec replicas, ready), from one list
/// (one consistent view of the cluster).
async fn by_component(client: &Client, ns: &str) -> BTreeMap<String, (i32, i32)> {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{LABEL_PLAN}=shop")))
        .await
        .expect("cannot list Deployments")
        .items
        .into_iter()
        .filter_map(|d| {
            let spec = d.spec.as_ref()?;
            let image = spec
                .template
                .spec
                .as_ref()?
                .containers
                .first()?
                .image
                .clone()?;
            let ready = d
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            Some((image, (spec.replicas.unwrap_or(1), ready)))
        })
        .collect()
}

fn waiting_for(p: &ReleasePlan, component: &str) -> Vec<String> {
    p.status
        .as_ref()
        .and_then(|s| s.components.iter().find(|c| c.name == component))
        .map(|c| c.waiting_for.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_chain_whose_middle_fails_rolls_back_the_later_components_first() {
    let (Harness { client, ns }, _op) = Harness::with_operator("order").await;
    let steps = json!([{"name": "half", "setWeight": 50}, {"pause": {}}]);
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": chain(1), "strategy": {"steps": steps}}),
    )
    .await;
    set_components(&client, &ns, "shop", chain(2)).await;

    // api pauses after 50% (global step 2 of 6); svc and web wait, no new pod.
    let p = wait_until(WAIT, "api to pause at 50%", || async {
        let p = get(&client, &ns, "shop").await?;
        let s = p.status.as_ref()?;
        (s.phase == Phase::RollingOut && s.current_step == 1).then_some(p)
    })
    .await;
    assert_eq!(waiting_for(&p, "svc"), ["api"]);
    assert_eq!(waiting_for(&p, "web"), ["svc"]);
    let revs = by_component(&client, &ns).await;
    for c in ["svc", "web"] {
        assert_eq!(
            revs.get(&format!("{c}:2")).map_or(0, |r| r.0),
            0,
            "{c}: {revs:?}"
        );
    }
    request(&client, &ns, "shop", "promote").await;

    // api goes to 100%, then svc's step half, then web starts while svc pauses.
    wait_until(WAIT, "web's new pod ready with svc paused", || async {
        let p = get(&client, &ns, "shop").await?;
        let revs = by_component(&client, &ns).await;
        let ok = p.status.as_ref()?.current_step == 4
            && revs.get("web:2") == Some(&(1, 1))
            && revs.get("svc:2") == Some(&(1, 1));
        if ok { Some(()) } else { None }
    })
    .await;
    let revs = by_component(&client, &ns).await;
    assert_eq!(
        revs.get("api:2"),
        Some(&(2, 2)),
        "api fully promoted first: {revs:?}"
    );
    assert_eq!(revs.get("api:1").map(|r| r.0), Some(0), "{revs:?}");

    // Every status the plan goes through, from a watch started before the
    // failure: a poll can miss a short RollbackInProgress on a busy machine.
    let saw_api_wait = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = tokio::spawn({
        let api = Api::<ReleasePlan>::namespaced(client.clone(), &ns);
        let saw = std::sync::Arc::clone(&saw_api_wait);
        async move {
            use futures::StreamExt;
            use kube::runtime::WatchStreamExt;
            let cfg = kube::runtime::watcher::Config::default().fields("metadata.name=shop");
            let mut plans = std::pin::pin!(kube::runtime::watcher(api, cfg).applied_objects());
            while let Some(Ok(p)) = plans.next().await {
                let rolling_back = p
                    .status
                    .as_ref()
                    .is_some_and(|s| s.phase == Phase::RollbackInProgress);
                if rolling_back && !waiting_for(&p, "api").is_empty() {
                    saw.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
    });

    // The middle component fails: its new pods crash-loop (kwok's fault stage).
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let svc_pods = pods
        .list(&ListParams::default().labels(&format!("{LABEL_PLAN}=shop,{LABEL_COMPONENT}=svc")))
        .await
        .unwrap();
    let mut crashed = 0;
    for pod in svc_pods.items {
        let image = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.first()?.image.clone());
        if image.as_deref() != Some("svc:2") {
            continue;
        }
        let patch =
            json!({"metadata": {"annotations": {"kwok.releaseplan.io/fault": "crash-loop"}}});
        pods.patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .unwrap();
        crashed += 1;
    }
    assert_eq!(crashed, 1);

    // Every view of the cluster during the rollback: an earlier component's
    // new revision loses pods only once the later ones are back on stable.
    let back: RefCell<Vec<&str>> = RefCell::new(Vec::new());
    let (c, n, back_of) = (&client, ns.as_str(), &back);
    wait_until(WAIT, "the chain rolled back", move || async move {
        let p = get(c, n, "shop").await?;
        let revs = by_component(c, n).await;
        let at = |img: &str| revs.get(img).copied().unwrap_or((0, 0));
        if at("api:2").0 < 2 {
            assert_eq!(
                (at("svc:2").0, at("svc:1")),
                (0, (2, 2)),
                "api before svc: {revs:?}"
            );
        }
        if at("svc:2").0 < 1 {
            assert_eq!(
                (at("web:2").0, at("web:1")),
                (0, (2, 2)),
                "svc before web: {revs:?}"
            );
        }
        // Later components first: on a busy machine two can be back between
        // two polls, and the checks above already proved (at this poll) that
        // a component is back only when every later one is back and ready.
        for comp in CHAIN.iter().rev() {
            let mut b = back_of.borrow_mut();
            if at(&format!("{comp}:2")).0 == 0 && !b.contains(comp) {
                b.push(*comp);
            }
        }
        let s = p.status.as_ref()?;
        if s.phase == Phase::RollbackInProgress {
            let w = waiting_for(&p, "api");
            assert!(w.iter().all(|x| x == "svc" || x == "web"), "{w:?}");
        }
        (s.phase == Phase::RolledBack).then_some(())
    })
    .await;
    let back = back.into_inner();
    watch.abort();
    let saw_api_wait = saw_api_wait.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(back, ["web", "svc", "api"], "rolled back in reverse order");
    assert!(
        saw_api_wait,
        "status showed api waiting for the later components"
    );
    let p = wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
    let f = p.status.as_ref().unwrap().failure.clone().unwrap();
    assert!(f.message.contains("svc"), "the failure names svc: {f:?}");
    let revs = by_component(&client, &ns).await;
    for c in CHAIN {
        assert_eq!(revs.get(&format!("{c}:1")), Some(&(2, 2)), "{c}: {revs:?}");
        assert_eq!(
            revs.get(&format!("{c}:2")).map(|r| r.0),
            Some(0),
            "{c}: {revs:?}"
        );
    }
}

#[tokio::test]
async fn bad_dependencies_are_refused_at_admission() {
    let Harness { client, ns } = Harness::new("order-admit").await;
    let api = Api::<ReleasePlan>::namespaced(client.clone(), &ns);
    let steps = json!([{"name": "half", "setWeight": 50}]);
    let cases: [(&str, Value, Value, &str); 5] = [
        (
            "unknown",
            json!([{"component": "nope"}]),
            json!({"steps": steps}),
            "spec.components[].dependsOn[].component must name one of spec.components",
        ),
        (
            "self",
            json!([{"component": "b"}]),
            json!({"steps": steps}),
            "a component cannot depend on itself",
        ),
        (
            "step",
            json!([{"component": "a", "step": "missing"}]),
            json!({"steps": steps}),
            "dependsOn[].step must be the name of a step",
        ),
        (
            "bluegreen",
            json!([{"component": "a"}]),
            json!({"blueGreen": {}}),
            "not supported with strategy.blueGreen",
        ),
        (
            "cycle",
            json!([{"component": "a"}]),
            json!({"steps": steps}),
            "two components depend on each other",
        ),
    ];
    for (i, (name, deps, strategy, message)) in cases.into_iter().enumerate() {
        let traffic = json!({"port": 80});
        let mut a =
            json!({"name": "a", "replicas": 1, "template": template("a:1"), "traffic": traffic});
        let mut b = json!({"name": "b", "replicas": 1, "template": template("b:1"), "traffic": traffic,
                           "dependsOn": deps});
        if name == "cycle" {
            // a after b and b after a.
            a["dependsOn"] = json!([{"component": "b"}]);
            b["dependsOn"] = json!([{"component": "a"}]);
        }
        let spec = json!({"components": [a, b], "strategy": strategy});
        match api
            .create(&PostParams::default(), &plan(&format!("bad-{i}"), spec))
            .await
        {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{name}: {}", status.message);
                assert!(
                    status.message.contains("spec.components") && status.message.contains(message),
                    "{name}: {}",
                    status.message
                );
            }
            other => panic!("{name}: accepted or another error: {other:?}"),
        }
    }
    // A cycle of three, and a dependency on a component listed later that
    // closes no cycle: both refused by the rule that compares positions,
    // naming the first component whose dependency comes after it.
    let c3 = |n: &str, d: &str| json!({"name": n, "replicas": 1, "template": template(&format!("{n}:1")), "dependsOn": [{"component": d}]});
    for (name, components, first) in [
        (
            "three",
            json!([c3("a", "c"), c3("b", "a"), c3("c", "b")]),
            "a",
        ),
        (
            "later",
            json!([c3("a", "b"), {"name": "b", "replicas": 1, "template": template("b:1")}]),
            "a",
        ),
    ] {
        let e = api
            .create(
                &PostParams::default(),
                &plan(&format!("cycle-{name}"), json!({"components": components})),
            )
            .await
            .expect_err(name);
        let want = format!(
            "spec.components[].dependsOn: {first} depends on a component that is not listed before it"
        );
        assert!(e.to_string().contains(&want), "{name}: {e}");
    }
    // A step name twice is refused too; a valid order is accepted.
    let twice = json!({"components": [{"name": "a", "replicas": 1, "template": template("a:1")}],
                       "strategy": {"steps": [{"name": "x", "setWeight": 10}, {"name": "x", "setWeight": 20}]}});
    let e = api
        .create(&PostParams::default(), &plan("twice", twice))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("step names must be unique"), "{e}");
    let good = json!({"components": [
        {"name": "a", "replicas": 1, "template": template("a:1")},
        {"name": "b", "replicas": 1, "template": template("b:1"), "dependsOn": [{"component": "a", "step": "half"}]}],
        "strategy": {"steps": steps}});
    api.create(&PostParams::default(), &plan("good", good))
        .await
        .unwrap();
}
