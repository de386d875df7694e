//! Automatic rollback on the local control plane: kwok's fault stages make
//! new-revision pods crash-loop, never become ready, or fail to pull their
//! image; the operator must return every component to the stable revision.

use crate::support;

use kube::Client;
use releaseplan::api::{Phase, ReleasePlan};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::fixtures::{faulty_template, plan, template, web_with};
use support::operator::Operator;
use support::plans::{by_image, create, create_stable, revisions, set_components, wait_phase};
use support::{Harness, WAIT, plans, wait_until};

/// Rolls a bad version out over a stable one and returns the rolled-back plan
/// and how long the rollback took from the rollout's start.
async fn roll_out_bad(
    prefix: &str,
    bad: Value,
    health: Value,
) -> (Client, String, ReleasePlan, Duration) {
    let Harness { client, ns } = Harness::new(prefix).await;
    let op = Operator::start(&ns, &[]).await;
    let steps = json!([{"setWeight": 34}, {"pause": {"duration": "2s"}}, {"setWeight": 67}]);
    create_stable(&client, &ns, "shop", json!({"components": [web_with(template("shop:1"), 3)], "strategy": {"steps": steps}, "health": health})).await;
    let started = Instant::now();
    set_components(&client, &ns, "shop", json!([web_with(bad, 3)])).await;
    let p = wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
    let took = started.elapsed();
    // Afterwards the good version serves at full replicas and no failed pod is left.
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(
        by_image(&revs, "shop:1"),
        Some((3, 3)),
        "stable back at full: {revs:?}"
    );
    assert_eq!(
        by_image(&revs, "shop:2").map(|x| x.0),
        Some(0),
        "failed revision at zero: {revs:?}"
    );
    wait_until(WAIT, "the failed revision's pods to be gone", || async {
        let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &ns)
            .list(&kube::api::ListParams::default().labels("releaseplan.io/plan=shop"))
            .await
            .ok()?;
        let images: Vec<String> = pods
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.spec.as_ref()?.containers.first()?.image.clone())
            .collect();
        (images.iter().all(|i| i == "shop:1") && images.len() == 3).then_some(())
    })
    .await;
    // Conditions and history say what happened.
    let s = p.status.clone().unwrap();
    let stalled = s.conditions.iter().find(|c| c.type_ == "Stalled").unwrap();
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "RolledBack")
    );
    assert_eq!(
        s.history.last().unwrap().outcome,
        releaseplan::api::Outcome::RolledBack
    );
    // No flapping: it stays rolled back.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = plans::get(&client, &ns, "shop").await.unwrap();
    assert_eq!(again.status.unwrap().phase, Phase::RolledBack);
    assert!(op.counter("releaseplan_rollbacks_total").await >= 1.0);
    (client, ns, p, took)
}

#[tokio::test]
async fn crash_loop_rolls_back_before_the_deadline() {
    let health = json!({"progressDeadlineSeconds": 600});
    let (_c, _ns, p, took) =
        roll_out_bad("crash", faulty_template("shop:2", "crash-loop"), health).await;
    let f = p.status.unwrap().failure.unwrap();
    assert_eq!(f.gate, "podHealth");
    assert!(
        f.reason == "CrashLoopBackOff" || f.reason == "TooManyRestarts",
        "reason {}",
        f.reason
    );
    println!("crash-loop rollback complete after {took:?} (progress deadline 600s)");
    assert!(
        took < Duration::from_secs(120),
        "did not wait for the deadline"
    );
}

#[tokio::test]
async fn image_pull_failure_rolls_back() {
    let health = json!({"progressDeadlineSeconds": 600});
    let (_c, _ns, p, took) =
        roll_out_bad("pull", faulty_template("shop:2", "image-pull"), health).await;
    let f = p.status.unwrap().failure.unwrap();
    assert_eq!(f.gate, "podHealth");
    assert!(
        f.reason == "ErrImagePull" || f.reason == "ImagePullBackOff",
        "reason {}",
        f.reason
    );
    println!("image-pull rollback complete after {took:?} (progress deadline 600s)");
}

#[tokio::test]
async fn never_ready_pods_fail_at_the_progress_deadline() {
    let health = json!({"progressDeadlineSeconds": 8});
    let (_c, _ns, p, took) =
        roll_out_bad("never", faulty_template("shop:2", "never-ready"), health).await;
    let f = p.status.unwrap().failure.unwrap();
    assert_eq!(
        (f.gate.as_str(), f.reason.as_str()),
        ("progressDeadline", "ProgressDeadlineExceeded")
    );
    println!("never-ready rollback complete after {took:?} (progress deadline 8s)");
    assert!(
        took >= Duration::from_secs(8),
        "failed before the deadline: {took:?}"
    );
}

#[tokio::test]
async fn a_retry_request_rolls_the_failed_revision_out_again() {
    let health = json!({"progressDeadlineSeconds": 600});
    let (client, ns, _p, _) =
        roll_out_bad("retry", faulty_template("shop:2", "crash-loop"), health).await;
    let _op = Operator::start(&ns, &[]).await;
    let before = plans::get(&client, &ns, "shop")
        .await
        .unwrap()
        .status
        .unwrap()
        .rollout_count;
    plans::request(&client, &ns, "shop", "retry").await;
    wait_until(WAIT, "a new rollout to start", || async {
        let s = plans::get(&client, &ns, "shop").await?.status?;
        (s.rollout_count > before).then_some(())
    })
    .await;
    // It fails again the same way and rolls back again.
    wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
}

#[tokio::test]
async fn a_failed_first_release_leaves_nothing_running() {
    let Harness { client, ns } = Harness::new("first-fail").await;
    let _op = Operator::start(&ns, &[]).await;
    create(
        &client,
        &ns,
        &plan(
            "shop",
            json!({"components": [web_with(faulty_template("shop:1", "crash-loop"), 3)]}),
        ),
    )
    .await;
    let p = wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
    let s = p.status.unwrap();
    assert_eq!(s.stable_revision, None);
    let revs = revisions(&client, &ns, "shop").await;
    assert!(revs.values().all(|(r, _, _)| *r == 0), "{revs:?}");
    let stalled = s.conditions.iter().find(|c| c.type_ == "Stalled").unwrap();
    assert!(
        stalled.message.contains("first release failed"),
        "{}",
        stalled.message
    );
}
