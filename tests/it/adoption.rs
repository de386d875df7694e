//! Adoption (`spec.components[].adopt`, issue #28): a plain Deployment that
//! serves real requests through Traefik's Gateway is put under a plan with
//! no failed request, and ends at 0 replicas, still there, unowned; a GitOps
//! tool that applies its old `replicas: 4` again is undone once the plan's
//! own pods are ready; a name that does not exist is reported and the plan
//! rolls out like a new one (docs/decisions.md, "Adoption: hand over, not
//! take over").
//!
//! Needs the local cluster of `make test` (ClusterIPs on loopback) and
//! Traefik and the Gateway API CRDs of `make tools`.

use crate::support;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ResourceQuota, Service};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use releaseplan::api::{ANNOTATION_ADOPTED_REPLICAS, LABEL_PLAN, Phase, ReleasePlan};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::traffic::DataPlane;
use support::{Harness, WAIT, fixtures, plans, wait_until};

/// The pod template of the user's Deployment `web`, and of the plan's component.
fn web_template() -> Value {
    json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "web:1"}]}
    })
}

/// The user's Deployment `web`, as its manifest in git says.
fn user_deployment(replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": web_template()
        }
    })
}

/// Component `web` of 4 replicas adopting `deployment`, with the same template.
fn adopting_web(deployment: &str) -> Value {
    json!({"name": "web", "replicas": 4, "adopt": {"deployment": deployment},
        "template": web_template()})
}

async fn deployment(client: &Client, ns: &str, name: &str) -> Option<Deployment> {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .expect("cannot read the Deployment")
}

/// (spec.replicas, status.replicas, status.readyReplicas) of a Deployment.
fn counts(d: &Deployment) -> (i32, i32, i32) {
    let s = d.status.clone().unwrap_or_default();
    (
        d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        s.replicas.unwrap_or(0),
        s.ready_replicas.unwrap_or(0),
    )
}

/// Waits until Deployment `web` runs no pod and the plan is Stable with its
/// own revision at 4 ready and the hand-over recorded as done.
async fn wait_handed_over(h: &Harness) -> ReleasePlan {
    wait_until(
        WAIT,
        "Deployment web at 0 with no pod, the plan Stable with 4 ready and adopted.done",
        || async {
            let d = deployment(&h.client, &h.ns, "web")
                .await
                .ok_or("Deployment web is gone")?;
            let p = plans::get(&h.client, &h.ns, "shop")
                .await
                .ok_or("no plan")?;
            let s = p.status.clone().unwrap_or_default();
            let c = s.components.first().cloned().unwrap_or_default();
            let done = c.adopted.as_ref().is_some_and(|a| a.done);
            let revs = plans::revisions(&h.client, &h.ns, "shop").await;
            let own = plans::by_image(&revs, "web:1");
            if counts(&d) == (0, 0, 0) && s.phase == Phase::Stable && done && own == Some((4, 4)) {
                Ok(p)
            } else {
                Err(format!(
                    "web (replicas, pods, ready) {:?}; phase {}; adopted {:?}; revisions {revs:?}",
                    counts(&d),
                    s.phase,
                    c.adopted
                ))
            }
        },
    )
    .await
}

/// Every `spec.replicas` Deployment `name` is written with, in order, from a
/// watch (so no write is missed), until the task is aborted.
fn record_replicas(
    client: &Client,
    ns: &str,
    name: &str,
) -> (Arc<Mutex<Vec<i32>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let api = Api::<Deployment>::namespaced(client.clone(), ns);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher(api, config).applied_objects().boxed();
        while let Some(Ok(d)) = stream.next().await {
            let r = counts(&d).0;
            let mut seen = out.lock().unwrap();
            if seen.last() != Some(&r) {
                seen.push(r);
            }
        }
    });
    (seen, task)
}

/// Hand-over under real traffic: 0 failed requests while a plan adopts the
/// Deployment behind the user's Service; then a GitOps tool's forced apply
/// of the old manifest (`replicas: 4`) is undone and the plan stays Stable.
///
/// A ResourceQuota of 5 pods makes the hand-over go one pod at a time, as on
/// a full cluster (kwok makes every pod ready at once otherwise): the first
/// revision gets its second pod only once the adopted Deployment gave one up
/// for its first ready one, so the adopted Deployment must pass 3, 2 and 1.
#[tokio::test]
async fn adoption_hands_over_without_a_failed_request() {
    let h = Harness::new("adopt-traffic").await;
    let dp = DataPlane::start(&h.client, &h.ns).await;
    let op = h.operator().start().await;
    let deployments = Api::<Deployment>::namespaced(h.client.clone(), &h.ns);
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(user_deployment(4)).unwrap(),
        )
        .await
        .unwrap();
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 8080, "targetPort": 8080}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(h.client.clone(), &h.ns)
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    dp.apply_route(
        "web",
        json!([{ "backendRefs": [{"name": "web", "port": 8080, "weight": 1}] }]),
    )
    .await;
    wait_until(WAIT, "Deployment web with 4 ready pods", || async {
        let d = deployment(&h.client, &h.ns, "web").await?;
        (counts(&d) == (4, 4, 4)).then_some(())
    })
    .await;
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "pods"},
        "spec": {"hard": {"pods": "5"}}
    }))
    .unwrap();
    Api::<ResourceQuota>::namespaced(h.client.clone(), &h.ns)
        .create(&PostParams::default(), &quota)
        .await
        .unwrap();
    let (trajectory, recorder) = record_replicas(&h.client, &h.ns, "web");
    dp.wait_for(
        "the user's Service to answer through the route",
        50,
        &[],
        |c| c.errors() == 0 && c.total() > 0 && c.ok.values().sum::<u64>() == c.total(),
    )
    .await;

    let sampler = dp.sampler(
        &[],
        Duration::from_millis(500),
        2,
        Duration::from_millis(10),
    );
    plans::create(
        &h.client,
        &h.ns,
        &fixtures::plan(
            "shop",
            json!({"components": [adopting_web("web")], "strategy": {"steps": [{"setWeight": 50}]}}),
        ),
    )
    .await;
    let p = wait_handed_over(&h).await;
    recorder.abort();
    let trajectory = trajectory.lock().unwrap().clone();
    println!("spec.replicas of the adopted Deployment, as written: {trajectory:?}");
    assert_eq!(
        trajectory,
        [4, 3, 2, 1, 0],
        "scaled down one pod at a time, as the first revision's pods became ready"
    );
    let adopted = p.status.as_ref().unwrap().components[0]
        .adopted
        .clone()
        .unwrap();
    assert_eq!(
        (adopted.deployment.as_str(), adopted.original_replicas),
        ("web", Some(4))
    );
    assert_eq!(
        plans::condition(&p, "Adopted").map(|(s, r, _)| (s, r)),
        Some(("True".into(), "HandedOver".into()))
    );
    // Requests keep going a moment on the plan's pods alone.
    let handed_over = sampler.snapshot().total().total();
    wait_until(WAIT, "100 more requests after the hand-over", || async {
        (sampler.snapshot().total().total() >= handed_over + 100).then_some(())
    })
    .await;
    let timeline = sampler.stop().await;
    let total = timeline.total();
    println!(
        "adoption under traffic: {} requests, {} failed ({total})",
        total.total(),
        total.errors()
    );
    println!("sampler (0.5 s windows):\n{}", timeline.render());
    assert!(total.total() > 100, "too few requests: {total}");
    assert_eq!(
        total.errors(),
        0,
        "requests failed during the adoption: {total}"
    );

    // Still there, the user's: unowned, its template and selector untouched,
    // marked with the plan's label and its original replicas.
    let d = deployment(&h.client, &h.ns, "web").await.unwrap();
    assert!(d.metadata.owner_references.unwrap_or_default().is_empty());
    let labels = d.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get(LABEL_PLAN).map(String::as_str), Some("shop"));
    let annotations = d.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations
            .get(ANNOTATION_ADOPTED_REPLICAS)
            .map(String::as_str),
        Some("4")
    );
    let spec = d.spec.unwrap();
    assert_eq!(
        serde_json::to_value(&spec.template.metadata.unwrap().labels).unwrap(),
        json!({"app": "web"})
    );
    assert_eq!(
        serde_json::to_value(&spec.selector).unwrap(),
        json!({"matchLabels": {"app": "web"}})
    );

    // GitOps: a careless sync applies the old manifest, replicas: 4, forced.
    let rollouts = p.status.as_ref().unwrap().rollout_count;
    let applied = deployments
        .patch(
            "web",
            &PatchParams::apply("argocd-controller").force(),
            &Patch::Apply(user_deployment(4)),
        )
        .await
        .unwrap();
    assert_eq!(counts(&applied).0, 4, "the forced apply scaled it up");
    let p = wait_handed_over(&h).await;
    let s = p.status.unwrap();
    assert_eq!(s.rollout_count, rollouts, "no new rollout");
    let scaled = op
        .log_text()
        .matches("scaling the adopted Deployment")
        .count();
    println!("the operator scaled the adopted Deployment {scaled} times");
    assert!(scaled < 30, "a hot loop? {scaled} writes");
    drop(op);
    drop(dp);
}

/// A name that does not exist: condition `Adopted` says so, one Warning
/// Event, and the component rolls out like a new one (decided: the plan is
/// not held).
#[tokio::test]
async fn adoption_of_a_missing_deployment_is_reported_and_the_plan_rolls_out() {
    let (h, _op) = Harness::with_operator("adopt-missing").await;
    plans::create(
        &h.client,
        &h.ns,
        &fixtures::plan("shop", json!({"components": [adopting_web("nope")]})),
    )
    .await;
    let p = plans::wait_phase(&h.client, &h.ns, "shop", Phase::Stable, WAIT).await;
    let (status, reason, message) = plans::condition(&p, "Adopted").unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "AdoptionTargetNotFound")
    );
    assert!(message.contains("nope"), "{message}");
    let revs = plans::revisions(&h.client, &h.ns, "shop").await;
    assert_eq!(plans::by_image(&revs, "web:1"), Some((4, 4)), "{revs:?}");
    let events = wait_until(WAIT, "an AdoptionTargetNotFound Event", || async {
        let events = plans::plan_events(&h.client, &h.ns, "shop").await;
        events
            .iter()
            .any(|e| e.0 == "AdoptionTargetNotFound")
            .then_some(events)
    })
    .await;
    let warning = events
        .iter()
        .find(|e| e.0 == "AdoptionTargetNotFound")
        .unwrap();
    assert_eq!(
        (warning.1.as_str(), warning.3),
        ("Warning", 1),
        "{events:?}"
    );
    assert!(deployment(&h.client, &h.ns, "nope").await.is_none());
}

/// The first rollout's pods never become ready: the adopted Deployment
/// keeps all 4 replicas while it waits, and when the progress deadline rolls
/// the rollout back the plan is RolledBack with Deployment web still at 4
/// ready and the revision at 0.
#[tokio::test]
async fn a_rolled_back_first_rollout_leaves_the_adopted_deployment_whole() {
    let (h, op) = Harness::with_operator("adopt-rollback").await;
    Api::<Deployment>::namespaced(h.client.clone(), &h.ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(user_deployment(4)).unwrap(),
        )
        .await
        .unwrap();
    wait_until(WAIT, "Deployment web with 4 ready pods", || async {
        let d = deployment(&h.client, &h.ns, "web").await?;
        (counts(&d) == (4, 4, 4)).then_some(())
    })
    .await;
    let mut web = adopting_web("web");
    web["template"]["metadata"]["annotations"] =
        json!({"kwok.releaseplan.io/fault": "never-ready"});
    plans::create(
        &h.client,
        &h.ns,
        &fixtures::plan(
            "shop",
            json!({"components": [web], "health": {"progressDeadlineSeconds": 5}}),
        ),
    )
    .await;
    wait_until(
        WAIT,
        "the first revision at 4 unready pods, Deployment web marked and still at 4",
        || async {
            let revs = plans::revisions(&h.client, &h.ns, "shop").await;
            let d = deployment(&h.client, &h.ns, "web").await.ok_or("no web")?;
            let marked = d
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_PLAN))
                .is_some_and(|p| p == "shop");
            let own = plans::by_image(&revs, "web:1");
            if own == Some((4, 0)) && marked && counts(&d) == (4, 4, 4) {
                Ok(())
            } else {
                Err(format!(
                    "revisions {revs:?}; web {:?}, marked {marked}",
                    counts(&d)
                ))
            }
        },
    )
    .await;
    let p = plans::wait_phase(&h.client, &h.ns, "shop", Phase::RolledBack, WAIT).await;
    let d = deployment(&h.client, &h.ns, "web").await.unwrap();
    assert_eq!(counts(&d).0, 4, "{}", op.log_text());
    wait_until(
        WAIT,
        "the first revision at 0 and web at 4 ready",
        || async {
            let revs = plans::revisions(&h.client, &h.ns, "shop").await;
            let d = deployment(&h.client, &h.ns, "web").await.ok_or("no web")?;
            if plans::by_image(&revs, "web:1").is_some_and(|(r, _)| r == 0)
                && counts(&d) == (4, 4, 4)
            {
                Ok(())
            } else {
                Err(format!("revisions {revs:?}; web {:?}", counts(&d)))
            }
        },
    )
    .await;
    let adopted = p.status.unwrap().components[0].adopted.clone().unwrap();
    assert!(!adopted.done && adopted.replicas == 4, "{adopted:?}");
}
