//! SIGTERM ends the operator in bounded time, also when the API server stops
//! answering (etcd hung, a network partition): in-flight calls would
//! otherwise hold the process past the kubelet's grace period, and the
//! SIGKILL that follows skips the lease release, so the next leader waits a
//! whole lease duration. The operator's own grace is 20 s (`SHUTDOWN_GRACE`
//! in src/main.rs); a second signal ends it at once.
//!
//! The hung API server is a TCP proxy in front of the real one that stops
//! passing bytes ([`FreezableProxy`]): only this test's operator sees it.

use crate::support;

use releaseplan::api::Phase;
use serde_json::json;
use std::time::Duration;
use support::Harness;
use support::fixtures::web;
use support::operator::Operator;
use support::plans::create_stable;
use support::servers::{FreezableProxy, api_server_addr};

/// The operator's grace after SIGTERM (src/main.rs).
const GRACE: Duration = Duration::from_secs(20);
/// Slack for a loaded machine on top of it.
const SLACK: Duration = Duration::from_secs(15);

/// A leader-elected operator for `ns` through a fresh proxy, with one
/// Stable plan: it holds the Lease and has work in its caches.
async fn leader_behind_proxy(prefix: &str) -> (Operator, FreezableProxy, tempfile::TempDir) {
    let h = Harness::new(prefix).await;
    let proxy = FreezableProxy::start(api_server_addr()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = proxy.kubeconfig(dir.path());
    let op = h
        .operator()
        .leader_election(&h.ns)
        .env("KUBECONFIG", kubeconfig.to_str().unwrap())
        .start()
        .await;
    let p = create_stable(
        &h.client,
        &h.ns,
        "shop",
        json!({"components": [web("shop:1", 2)]}),
    )
    .await;
    assert_eq!(p.status.unwrap().phase, Phase::Stable);
    (op, proxy, dir)
}

#[tokio::test]
async fn sigterm_releases_the_lease_and_exits_cleanly_when_the_api_answers() {
    let (mut op, _proxy, _dir) = leader_behind_proxy("term-ok").await;
    op.send("TERM");
    let (status, took) = op
        .wait_exit(GRACE + SLACK)
        .await
        .unwrap_or_else(|| panic!("still running after SIGTERM:\n{}", op.log_text()));
    assert!(status.success(), "{status}:\n{}", op.log_text());
    assert!(
        took < GRACE,
        "took {took:?}: the grace is for a hung API server"
    );
    assert!(
        op.log_text().contains("lease released"),
        "{}",
        op.log_text()
    );
}

#[tokio::test]
async fn sigterm_exits_within_the_grace_when_the_api_server_hangs() {
    let (mut op, proxy, _dir) = leader_behind_proxy("term-hung").await;
    proxy.freeze();
    op.send("TERM");
    let (status, took) = op.wait_exit(GRACE + SLACK).await.unwrap_or_else(|| {
        panic!(
            "still running {:?} after SIGTERM with a hung API server:\n{}",
            GRACE + SLACK,
            op.log_text()
        )
    });
    // Nothing answers: the lease release gives up at the lease deadline
    // (a third of the lease duration less half a second, 4.5 s), or, when a reconcile
    // was in flight, the grace ends it first. Either way with a failure
    // status, within the grace, and a log line that says why.
    assert!(!status.success(), "{status}");
    let log = op.log_text();
    let deadline = log.contains("no answer about the lease within");
    let grace = log.contains("did not finish within");
    assert!(deadline || grace, "{log}");
    if grace {
        assert!(took >= GRACE - Duration::from_secs(1), "took {took:?}");
    }
}

#[tokio::test]
async fn a_second_signal_exits_at_once() {
    let (mut op, proxy, _dir) = leader_behind_proxy("term-twice").await;
    proxy.freeze();
    op.send("TERM");
    tokio::time::sleep(Duration::from_secs(1)).await;
    op.send("TERM");
    let (status, took) = op
        .wait_exit(GRACE)
        .await
        .unwrap_or_else(|| panic!("still running after two SIGTERMs:\n{}", op.log_text()));
    assert!(!status.success(), "{status}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(op.log_text().contains("second signal"), "{}", op.log_text());
}
