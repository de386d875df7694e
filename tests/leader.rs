//! Leader election between two operator processes on one Lease.

// Test code may unwrap, expect and panic (the lint policy of Cargo.toml).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic
)]

mod support;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use releaseplan::api::Phase;
use serde_json::json;
use std::time::{Duration, Instant};
use support::fixtures::web;
use support::operator::Operator;
use support::plans::{by_image, create_stable, revisions, set_components, wait_phase};
use support::{Harness, wait_until};

const LEASE_SECONDS: u64 = 10;
const T: Duration = Duration::from_secs(90);

async fn holder(client: &Client, ns: &str) -> Option<String> {
    let lease = Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt("rp-leader")
        .await
        .ok()??;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

async fn start(ns: &str, id: &str) -> Operator {
    let secs = LEASE_SECONDS.to_string();
    Operator::launcher(ns)
        .leader_election(ns)
        .args([
            "--lease-name",
            "rp-leader",
            "--lease-seconds",
            &secs,
            "--identity",
            id,
        ])
        .start()
        .await
}

async fn wait_holder(client: &Client, ns: &str, want: &str) -> Duration {
    let started = Instant::now();
    wait_until(T, &format!("{want} to hold the lease"), || async {
        (holder(client, ns).await.as_deref() == Some(want)).then_some(())
    })
    .await;
    started.elapsed()
}

#[tokio::test]
async fn only_the_leader_writes_and_leadership_moves_on_kill_and_term() {
    let Harness { client, ns } = Harness::new("leader").await;
    let mut a = start(&ns, "op-a").await;
    wait_holder(&client, &ns, "op-a").await;
    let mut b = start(&ns, "op-b").await;

    let web = |image: &str| json!([web(image, 2)]);
    create_stable(&client, &ns, "shop", json!({"components": web("shop:1")})).await;
    assert!(
        a.counter("releaseplan_api_writes_total").await > 0.0,
        "the leader writes"
    );
    assert_eq!(
        b.counter("releaseplan_api_writes_total").await,
        0.0,
        "the follower never writes"
    );
    assert_eq!(b.counter("releaseplan_reconcile_runs_total").await, 0.0);
    assert_eq!(a.counter("releaseplan_leader").await, 1.0);
    assert_eq!(b.counter("releaseplan_leader").await, 0.0);
    // Both are ready (a rolling update of the operator must not wait on the
    // standby), and each says what it is.
    let readyz = |port: u16| async move {
        let r = reqwest::get(format!("http://127.0.0.1:{port}/readyz"))
            .await
            .expect("readyz");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    };
    let (code, body) = readyz(a.port).await;
    assert_eq!((code, body.as_str()), (200, "ok: leader"));
    let (code, body) = readyz(b.port).await;
    assert_eq!(code, 200);
    assert!(body.contains("follower"), "{body}");

    // SIGKILL: the lease is taken over once it expires.
    a.kill();
    let took = wait_holder(&client, &ns, "op-b").await;
    println!("takeover after SIGKILL of the leader: {took:?} (lease {LEASE_SECONDS}s)");
    assert!(
        took <= Duration::from_secs(LEASE_SECONDS + 5),
        "took {took:?}"
    );
    set_components(&client, &ns, "shop", web("shop:2")).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, T).await;
    assert_eq!(
        by_image(&revisions(&client, &ns, "shop").await, "shop:2"),
        Some((2, 2))
    );

    // SIGTERM: the leader releases the lease and the follower takes it at once.
    let _a2 = {
        let op = start(&ns, "op-a2").await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        op
    };
    assert_eq!(holder(&client, &ns).await.as_deref(), Some("op-b"));
    let started = Instant::now();
    let status = b.terminate().await;
    assert!(
        status.is_some_and(|s| s.success()),
        "clean exit on SIGTERM: {status:?}\n{}",
        b.log_text()
    );
    wait_holder(&client, &ns, "op-a2").await;
    let took = started.elapsed();
    println!("handover after SIGTERM of the leader: {took:?} (lease {LEASE_SECONDS}s)");
    assert!(
        took < Duration::from_secs(LEASE_SECONDS / 2),
        "SIGTERM handover took {took:?}"
    );
    set_components(&client, &ns, "shop", web("shop:3")).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, T).await;
}
