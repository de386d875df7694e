//! kube-apiserver restarts in the middle of a rollout: the operator must not
//! storm (no conflict loop, no repeated Events), `/healthz` must say the
//! watches are failing while it is gone, and the rollout must finish within
//! seconds of its return.
//!
//! A test binary of its own on purpose, outside the one of `tests/it/`: it
//! stops the API server that every other test uses, so nothing may run beside
//! it. The test harness runs the tests of a binary in parallel threads, while
//! cargo runs test binaries one after another; this one holds one test.

// Test code may unwrap, expect and panic (the lint policy of Cargo.toml).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic
)]

// The support layer of tests/it, shared (as the benches share it).
#[path = "it/support/mod.rs"]
mod support;

use kube::Client;
use releaseplan::api::Phase;
use serde_json::json;
use std::time::{Duration, Instant};
use support::fixtures::web;
use support::operator::{Operator, healthz, sum_metric};
use support::plans::{create_stable, get, plan_events, set_components, wait_phase};
use support::{Harness, WAIT, cluster, wait_until};

/// Events on the plan with `reason`, counting repeats of a series.
async fn events(client: &Client, ns: &str, reason: &str) -> i32 {
    plan_events(client, ns, "shop")
        .await
        .iter()
        .filter(|e| e.0 == reason)
        .map(|e| e.3.max(1))
        .sum()
}

#[tokio::test]
async fn an_api_server_restart_mid_rollout_causes_no_storm() {
    let cluster = std::env::var("RP_CLUSTER_NAME")
        .expect("RP_CLUSTER_NAME (set by the cluster's env file; run through make test)");
    let Harness { client, ns } = Harness::new("apirestart").await;
    let op = Operator::start(&ns, &["--stuck-after-seconds", "2"]).await;
    let steps = json!([
        {"setWeight": 25}, {"pause": {"duration": "2s"}},
        {"setWeight": 50}, {"pause": {"duration": "2s"}},
        {"setWeight": 75}, {"pause": {"duration": "2s"}},
    ]);
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 4)], "strategy": {"steps": steps}}),
    )
    .await;
    set_components(&client, &ns, "shop", json!([web("shop:2", 4)])).await;
    wait_until(WAIT, "the rollout to pass its first step", || async {
        let s = get(&client, &ns, "shop").await?.status?;
        (s.phase == Phase::RollingOut && s.current_step >= 1).then_some(())
    })
    .await;

    // Restart the API server (down for 3s, plus its own stop and start) while
    // polling /healthz.
    let root = cluster::repo_root();
    let restart = std::thread::spawn(move || {
        std::process::Command::new(root.join("e2e/restart-apiserver.sh"))
            .arg(&cluster)
            .arg("3")
            .status()
    });
    let mut unhealthy_seen = false;
    while !restart.is_finished() {
        if healthz(op.port).await == Some(503) {
            unhealthy_seen = true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = restart.join().expect("restart thread");
    assert!(
        status.as_ref().is_ok_and(std::process::ExitStatus::success),
        "restart-apiserver.sh: {status:?}"
    );
    let back = Instant::now();
    assert!(
        unhealthy_seen,
        "/healthz failed while every watch was failing for more than 2s"
    );

    wait_phase(
        &client,
        &ns,
        "shop",
        Phase::Stable,
        Duration::from_secs(180),
    )
    .await;
    let took = back.elapsed();
    println!("rollout finished {took:?} after the API server's return");
    // The bound is loose on purpose: after a restart the controller-manager's
    // own informers take 10-60s to catch up (its ReplicaSet controller logs
    // "read version ... is not as new as written version"), and no Deployment
    // gets ready pods before that. What the operator controls is asserted
    // below: no conflict loop, no repeated Event.
    assert!(
        took < Duration::from_secs(150),
        "the rollout finished {took:?} after the API server came back"
    );
    wait_until(Duration::from_secs(30), "/healthz to recover", || async {
        (healthz(op.port).await == Some(200)).then_some(())
    })
    .await;

    // 6 steps and the final one: 6 StepAdvanced Events, each once.
    let advanced = events(&client, &ns, "StepAdvanced").await;
    assert!(
        advanced <= 6,
        "{advanced} StepAdvanced Events for 6 step changes"
    );
    // The first release and this rollout: one each.
    assert_eq!(events(&client, &ns, "Promoted").await, 2);
    let text = op.metrics().await;
    let conflicts: f64 = text
        .lines()
        .filter(|l| l.starts_with("releaseplan_reconcile_failures_total{error=\"conflict\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    println!(
        "conflicts: {conflicts}, failures: {}, StepAdvanced events: {advanced}",
        sum_metric(&text, "releaseplan_reconcile_failures_total")
    );
    assert!(
        conflicts <= 2.0,
        "{conflicts} conflicts:\n{}",
        op.log_text()
    );
}
