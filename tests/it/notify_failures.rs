//! Notification failure paths with the real operator, receivers on
//! 127.0.0.1: a receiver the namespace's GatePolicy does not admit is sent
//! nothing and the plan gets a Warning Event at once (the admitted receiver
//! beside it gets everything); an edit of the `releaseplan-notifications`
//! ConfigMap while the operator runs applies to the next transition, with
//! no restart. (A receiver failing three times in a row is
//! `notify_commit_status`'s; full queues are `controller::notify`'s unit
//! tests: filling a queue of 64 through a cluster proves no more.)

use crate::gate_policy::{delete_policy, label, put_policy};
use crate::support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use releaseplan::api::Phase;
use serde_json::json;
use support::fixtures::{plan, web};
use support::plans::{create, plan_events, set_components, wait_phase};
use support::recorder::{self, Log};
use support::{Harness, WAIT, wait_until};

async fn put_secret(client: &Client, ns: &str, data: serde_json::Value) {
    recorder::put_receivers_secret(client, ns, "hooks", data).await;
}

/// Applies the ConfigMap with `receivers` (names of webhook receivers,
/// each reading Secret key `<name>`), all subscribed to `subscribed` for
/// every trigger.
async fn put_config(client: &Client, ns: &str, receivers: &[&str], subscribed: &[&str]) {
    let receivers: String = receivers
        .iter()
        .map(|r| format!("- name: {r}\n  type: webhook\n  urlFrom: {{secretKeyRef: {{name: hooks, key: {r}}}}}\n"))
        .collect();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": "releaseplan-notifications"},
    "data": {
        "receivers": receivers,
        "subscriptions": format!("- triggers: [any]\n  receivers: [{}]\n", subscribed.join(", ")),
    }});
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            "releaseplan-notifications",
            &PatchParams::apply("notify-test").force(),
            &Patch::Apply(cm),
        )
        .await
        .expect("apply the ConfigMap");
}

fn triggers(log: &Log, path: &str) -> Vec<String> {
    log.at(path)
        .iter()
        .map(|r| {
            format!(
                "{}:{}",
                r.body["rollout"],
                r.body["trigger"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

async fn wait_triggers(log: &Log, path: &str, want: &[&str]) {
    wait_until(WAIT, &format!("{path}: {want:?}"), || {
        let got = triggers(log, path);
        async move {
            (got == want)
                .then_some(())
                .ok_or_else(|| format!("{got:?}"))
        }
    })
    .await;
}

#[tokio::test]
async fn a_receiver_its_gate_policy_refuses_gets_nothing_and_the_plan_is_warned_at_once() {
    let h = Harness::new("notify-policy").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    label(&client, &ns, &ns).await;
    let (allowed, log) = recorder::start().await;
    let (elsewhere, elsewhere_log) = recorder::start().await;
    let policy = format!("{ns}-notify");
    put_policy(
        &client,
        &policy,
        &ns,
        json!({"destinations": {"hosts": [format!("127.0.0.1:{}", allowed.port())]}}),
    )
    .await;
    put_secret(
        &client,
        &ns,
        json!({"team": format!("http://127.0.0.1:{}/team", allowed.port()),
               "elsewhere": format!("http://127.0.0.1:{}/elsewhere", elsewhere.port())}),
    )
    .await;
    put_config(&client, &ns, &["team", "elsewhere"], &["team", "elsewhere"]).await;
    let op = h
        .operator()
        .args([
            "--gate-policy=required",
            "--gate-credentials-namespace",
            &ns,
        ])
        .start()
        .await;

    create(
        &client,
        &ns,
        &plan("shop", json!({"components": [web("shop:1", 1)]})),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_triggers(&log, "team", &["1:rolloutStarted", "1:promoted"]).await;
    let want = format!(
        "notification receiver elsewhere: not sent: host 127.0.0.1:{} is not allowed for namespace {ns}: no spec.destinations of GatePolicy {policy} admits it",
        elsewhere.port()
    );
    wait_until(WAIT, "a Warning naming the refused receiver", || async {
        let events = plan_events(&client, &ns, "shop").await;
        events
            .iter()
            .any(|(reason, type_, note, _)| {
                reason == "NotificationFailed" && type_ == "Warning" && note.starts_with(&want)
            })
            .then_some(())
            .ok_or_else(|| format!("{events:?}"))
    })
    .await;
    let failed = format!(
        "releaseplan_notifications_total{{namespace=\"{ns}\",receiver=\"elsewhere\",result=\"failed\"}}"
    );
    wait_until(
        WAIT,
        "both of elsewhere's notices counted failed",
        || async {
            let m = op.metrics().await;
            (support::operator::sum_metric(&m, &failed) == 2.0)
                .then_some(())
                .ok_or(m)
        },
    )
    .await;
    assert!(
        elsewhere_log.at("elsewhere").is_empty(),
        "a refused receiver was called"
    );
    delete_policy(&client, &policy).await;
}

#[tokio::test]
async fn an_edit_of_the_config_map_applies_to_the_next_transition_without_a_restart() {
    let h = Harness::new("notify-edit").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let (addr, log) = recorder::start().await;
    put_secret(
        &client,
        &ns,
        json!({"first": format!("http://127.0.0.1:{}/first", addr.port()),
               "second": format!("http://127.0.0.1:{}/second", addr.port())}),
    )
    .await;
    put_config(&client, &ns, &["first"], &["first"]).await;
    let mut op = h
        .operator()
        .args(["--gate-credentials-namespace", &ns])
        .start()
        .await;

    create(
        &client,
        &ns,
        &plan(
            "shop",
            json!({"components": [web("shop:1", 1)],
                   "strategy": {"steps": [{"setWeight": 50}, {"pause": {}}]}}),
        ),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_triggers(&log, "first", &["1:rolloutStarted", "1:promoted"]).await;

    // The namespace's owners move the subscription to a new receiver.
    put_config(&client, &ns, &["first", "second"], &["second"]).await;
    set_components(&client, &ns, "shop", json!([web("shop:2", 1)])).await;
    wait_triggers(
        &log,
        "second",
        &["2:rolloutStarted", "2:stepAdvanced", "2:paused"],
    )
    .await;
    assert_eq!(
        triggers(&log, "first"),
        ["1:rolloutStarted", "1:promoted"],
        "the receiver no longer subscribed got nothing more"
    );
    // The same process all along.
    assert!(op.exit_status().is_none(), "the operator still runs");
}
