//! The budget of gate calls on the real operator: a namespace with more
//! gates than its share is held to its calls in flight, its held gates are
//! "not evaluated yet" (never a failure), and every release still goes
//! through. Fairness between two namespaces is shown in-process
//! (`controller::gates`, `a_flooding_namespace_does_not_hold_another_namespaces_gate`):
//! an operator of these tests watches one namespace only.
//!   cargo test --test it -- gate_budget::

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use releaseplan::api::Phase;
use releaseplan::controller::gates::HELD_BY_BUDGET;
use serde_json::json;
use support::fixtures::{template, web_with};
use support::plans::{self, create_stable, wait_phase};
use support::servers::serve;
use support::{Harness, WAIT, wait_until};

/// Calls in flight now and the most at once, of a webhook that answers 200
/// after half a second.
#[derive(Default)]
struct Load {
    now: AtomicUsize,
    peak: AtomicUsize,
    calls: AtomicUsize,
}

async fn slow_hook(load: Arc<Load>) -> &'static str {
    let n = load.now.fetch_add(1, Ordering::SeqCst) + 1;
    load.peak.fetch_max(n, Ordering::SeqCst);
    load.calls.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    load.now.fetch_sub(1, Ordering::SeqCst);
    "ok"
}

/// 4 plans of 6 webhook gates each (24 gates asking at once) against a slow
/// server, with a budget of 2 calls in flight and 4 a second: the server
/// never sees more than 2 calls at once, calls were held back (the metric
/// says so, and a waiting gate's status says "not evaluated yet"), no gate
/// counts a failure, and every release is promoted, none rolled back.
#[tokio::test]
async fn a_namespace_flooding_gate_calls_is_held_to_its_budget_and_nothing_rolls_back() {
    let h = Harness::new("gate-budget").await;
    let op = h
        .operator()
        .args([
            "--gate-calls-in-flight=2",
            "--gate-calls-in-flight-per-namespace=2",
            "--gate-calls-per-second=4",
            "--gate-calls-per-second-per-namespace=4",
        ])
        .start()
        .await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let load = Arc::new(Load::default());
    let seen = Arc::clone(&load);
    let addr =
        serve(Router::new().route("/hook", post(move || slow_hook(Arc::clone(&seen))))).await;
    let hooks: Vec<_> = (0..6)
        .map(|i| json!({"name": format!("smoke-{i}"), "url": format!("http://{addr}/hook"), "retries": 0}))
        .collect();
    let steps = json!([{"setWeight": 50}]);
    let names: Vec<String> = (0..4).map(|i| format!("p{i}")).collect();
    for name in &names {
        create_stable(
            &client,
            &ns,
            name,
            json!({"components": [web_with(template("shop:1"), 1)], "strategy": {"steps": steps}}),
        )
        .await;
    }
    let before = load.calls.load(Ordering::SeqCst);
    for name in &names {
        plans::patch_spec(
            &client,
            &ns,
            name,
            json!({"components": [web_with(template("shop:2"), 1)], "health": {"webhooks": hooks}}),
        )
        .await;
    }
    // 24 gates ask at once, 2 are let through: the others wait for the
    // budget, seconds at 4 calls a second, and a plan's status says so.
    wait_until(WAIT, "a held gate to say why in status", || async {
        for name in &names {
            let p = plans::get(&client, &ns, name).await?;
            let held = p.status.iter().flat_map(|s| &s.gates).any(|g| {
                g.last_evaluated.is_none() && g.message.as_deref() == Some(HELD_BY_BUDGET)
            });
            if held {
                return Some(());
            }
        }
        None
    })
    .await;
    // Each gate is called at least once before its plan is promoted.
    wait_until(WAIT, "every gate called once", || async {
        let n = load.calls.load(Ordering::SeqCst) - before;
        (n >= 24).then_some(()).ok_or(format!("{n} calls"))
    })
    .await;
    for name in &names {
        let p = wait_phase(&client, &ns, name, Phase::Stable, WAIT).await;
        let s = p.status.expect("status");
        assert!(s.failure.is_none(), "{name}: {:?}", s.failure);
    }
    let metrics = op.metrics().await;
    let held = support::operator::sum_metric(&metrics, "releaseplan_gate_calls_held_total");
    assert!(held > 0.0, "no gate call was held back:\n{metrics}");
    assert_eq!(
        support::operator::sum_metric(&metrics, "releaseplan_rollbacks_total"),
        0.0,
        "a held gate rolled a release back"
    );
    assert_eq!(
        support::operator::sum_metric(&metrics, "releaseplan_gate_errors_total"),
        0.0,
        "a held gate counted an error"
    );
    let peak = load.peak.load(Ordering::SeqCst);
    assert!(peak <= 2, "{peak} gate calls at once, the budget is 2");
}
