//! Leader election between two operator processes on one Lease.

use crate::support;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::{Api, Client};
use releaseplan::api::Phase;
use serde_json::json;
use std::time::{Duration, Instant};
use support::fixtures::web;
use support::operator::Operator;
use support::plans::{by_image, create_stable, revisions, set_components, wait_phase};
use support::{Harness, WAIT, wait_until};

const LEASE_SECONDS: u64 = 10;

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
    wait_until(WAIT, &format!("{want} to hold the lease"), || async {
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
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
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
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
}

/// The identities that published the Events of plan `name`.
async fn reporters(client: &Client, ns: &str, name: &str) -> std::collections::BTreeSet<String> {
    use k8s_openapi::api::core::v1::Event;
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&kube::api::ListParams::default().fields(&format!(
            "involvedObject.kind=ReleasePlan,involvedObject.name={name}"
        )))
        .await
        .expect("cannot list events")
        .items
        .into_iter()
        .filter_map(|e| e.reporting_instance)
        .collect()
}

async fn start_sharded(ns: &str, id: &str, shards: u32) -> Operator {
    let secs = LEASE_SECONDS.to_string();
    let shards = shards.to_string();
    Operator::launcher(ns)
        .leader_election(ns)
        .args([
            "--lease-name",
            "rp-shard",
            "--lease-seconds",
            &secs,
            "--identity",
            id,
            "--shards",
            &shards,
        ])
        .start()
        .await
}

/// Waits until `op` serves a shard and returns it.
async fn serving(op: &Operator) -> u32 {
    wait_until(WAIT, "the replica to serve a shard", || async {
        let shard = op.counter("releaseplan_shard").await;
        (op.counter("releaseplan_leader").await == 1.0 && shard >= 0.0).then_some(shard as u32)
    })
    .await
}

#[tokio::test]
async fn shards_split_the_plans_and_a_standby_takes_over_a_shard() {
    use releaseplan::ops::shard;
    let Harness { client, ns } = Harness::new("shards").await;
    let mut a = start_sharded(&ns, "op-a", 2).await;
    let b = start_sharded(&ns, "op-b", 2).await;
    let (sa, sb) = (serving(&a).await, serving(&b).await);
    assert_ne!(sa, sb, "two replicas, two shards: one each");
    let holder_of = |s: u32| if s == sa { "op-a" } else { "op-b" };

    // Plans of both shards, each reconciled by its shard's replica only;
    // each reads a ConfigMap, so each has a copy of it.
    let maps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let source = serde_json::from_value(json!({"metadata": {"name": "web-config"},
        "data": {"greeting": "hello"}}))
    .expect("a ConfigMap");
    maps.create(&Default::default(), &source)
        .await
        .expect("create the ConfigMap");
    let web = |image: &str| {
        let mut t = support::fixtures::template(image);
        t["spec"]["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "web-config"}}]);
        json!([support::fixtures::web_with(t, 1)])
    };
    let names: Vec<String> = (0..6).map(|i| format!("app-{i}")).collect();
    for name in &names {
        create_stable(
            &client,
            &ns,
            name,
            json!({"components": web(&format!("{name}:1"))}),
        )
        .await;
    }
    let mut per_shard = [0; 2];
    for name in &names {
        let s = shard::of(&ns, name, 2);
        per_shard[s as usize] += 1;
        let want = std::collections::BTreeSet::from([holder_of(s).to_string()]);
        assert_eq!(
            reporters(&client, &ns, name).await,
            want,
            "{name} (shard {s})"
        );
    }
    assert!(
        per_shard.iter().all(|&n| n > 0),
        "both shards have plans: {per_shard:?}"
    );
    assert_eq!(
        a.counter("releaseplan_plans").await,
        f64::from(per_shard[sa as usize])
    );
    assert_eq!(
        b.counter("releaseplan_plans").await,
        f64::from(per_shard[sb as usize])
    );
    // Each replica caches its own plans' config copies only (each held
    // every plan's, and woke for each).
    let sources = maps
        .list(&ListParams::default().labels(&format!("!{}", releaseplan::api::LABEL_PLAN)))
        .await
        .expect("list the ConfigMaps")
        .items
        .len();
    for (op, s) in [(&a, sa), (&b, sb)] {
        let want = sources as f64 + f64::from(per_shard[s as usize]);
        let cached = wait_until(WAIT, "the cache sample", || async {
            let n = op
                .counter("releaseplan_cached_objects{resource=\"configmaps\"}")
                .await;
            (n >= want).then_some(n)
        })
        .await;
        assert_eq!(cached, want, "shard {s}: {sources} sources and its copies");
    }

    // A replica of another shard count waits for these to stop.
    let d = start_sharded(&ns, "op-d", 3).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        d.counter("releaseplan_leader").await,
        0.0,
        "op-d waits:\n{}",
        d.log_text()
    );
    assert_eq!(d.counter("releaseplan_reconcile_runs_total").await, 0.0);
    drop(d);

    // A standby takes over the shard of a killed replica, and only that one.
    let c = start_sharded(&ns, "op-c", 2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(c.counter("releaseplan_leader").await, 0.0, "op-c stands by");
    a.kill();
    assert_eq!(
        serving(&c).await,
        sa,
        "the standby serves the killed replica's shard"
    );
    let moved = names
        .iter()
        .find(|n| shard::of(&ns, n, 2) == sa)
        .expect("a plan of the killed replica's shard");
    set_components(&client, &ns, moved, web("moved:2")).await;
    wait_phase(&client, &ns, moved, Phase::Stable, WAIT).await;
    let want = std::collections::BTreeSet::from(["op-a".to_string(), "op-c".to_string()]);
    assert_eq!(reporters(&client, &ns, moved).await, want, "{moved}");
    assert_eq!(b.counter("releaseplan_shard").await, f64::from(sb));
}

/// A new leader decides on full caches only: with every plan Stable it has
/// nothing to write. (Reconciles that ran before the Deployment and pod
/// caches had their first list re-applied Deployments and flipped statuses.)
#[tokio::test]
async fn a_new_leader_with_every_plan_stable_writes_nothing() {
    use support::plans::{create, wait_phase};
    let Harness { client, ns } = Harness::new("takeover").await;
    let mut a = start(&ns, "op-a").await;
    wait_holder(&client, &ns, "op-a").await;
    let names: Vec<String> = (0..40).map(|i| format!("app-{i}")).collect();
    for name in &names {
        create(
            &client,
            &ns,
            &support::fixtures::plan(name, json!({"components": [web(&format!("{name}:1"), 1)]})),
        )
        .await;
    }
    for name in &names {
        wait_phase(&client, &ns, name, Phase::Stable, WAIT).await;
    }
    let b = start(&ns, "op-b").await;
    a.terminate().await;
    wait_holder(&client, &ns, "op-b").await;
    wait_until(WAIT, "the new leader to reconcile every plan", || async {
        (b.counter("releaseplan_plans").await == names.len() as f64).then_some(())
    })
    .await;
    // Retries after a refused or conflicting write would come within seconds.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let metrics = b.metrics().await;
    let writes: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("releaseplan_api_writes_total") && !l.ends_with(" 0"))
        .collect();
    assert!(
        writes.is_empty(),
        "the new leader wrote: {writes:?}\n{}",
        b.log_text()
    );
}
