//! The `alertmanager` receiver against a real Alertmanager (0.25, Debian's
//! `prometheus-alertmanager`): a paused rollout fires `ReleasePlanPaused`,
//! its promotion resolves it, a crash-looping rollout that rolls back fires
//! `ReleasePlanRolledBack` with the plan's labels, the rendered summary and
//! the dashboard link, and resolves the rollout's `ReleasePlanRollbackStarted`.
//! Read back with `GET /api/v2/alerts`, which lists active alerts only.

use crate::support;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};
use releaseplan::api::Phase;
use serde_json::{Value, json};
use support::alertmanager::Alertmanager;
use support::fixtures::{faulty_template, plan, web, web_with};
use support::plans::{create, request, set_components, wait_phase};
use support::{Harness, WAIT, wait_until};

/// The plan's active alerts named `alertname`.
fn named<'a>(alerts: &'a [Value], ns: &str, alertname: &str) -> Vec<&'a Value> {
    alerts
        .iter()
        .filter(|a| {
            a["labels"]["alertname"] == alertname
                && a["labels"]["namespace"] == ns
                && a["labels"]["releaseplan"] == "shop"
        })
        .collect()
}

fn names(alerts: &[Value]) -> Vec<String> {
    alerts
        .iter()
        .map(|a| a["labels"]["alertname"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Waits until `check` holds of Alertmanager's active alerts.
async fn wait_alerts<T>(am: &Alertmanager, what: &str, check: impl Fn(&[Value]) -> Option<T>) -> T {
    wait_until(WAIT, what, || {
        let got = am.alerts();
        let check = &check;
        async move {
            let alerts = got.await?;
            check(&alerts).ok_or_else(|| format!("active: {:?}", names(&alerts)))
        }
    })
    .await
}

#[tokio::test]
async fn a_rolled_back_release_fires_an_alert_and_a_promotion_resolves_the_pause() {
    let h = Harness::new("notify-am").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let am = Alertmanager::start().await;

    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "pager", "annotations": {"releaseplan.io/gate-namespaces": ns}},
        "stringData": {"url": am.url()},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the Secret");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "releaseplan-notifications"},
        "data": {
            "receivers": "- name: pager\n  type: alertmanager\n  urlFrom: {secretKeyRef: {name: pager, key: url}}\n",
            "subscriptions": "- triggers: [any]\n  receivers: [pager]\n",
        },
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create the ConfigMap");
    let _op = h
        .operator()
        .args([
            "--gate-credentials-namespace",
            ns.as_str(),
            "--dashboard-url",
            "https://dash.example/plans/{{ namespace }}/{{ name }}",
        ])
        .start()
        .await;

    create(
        &client,
        &ns,
        &plan(
            "shop",
            json!({"components": [web("shop:1", 2)],
                   "strategy": {"steps": [{"setWeight": 50}, {"pause": {}}]}}),
        ),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;

    // Rollout 2 waits at `pause: {}`: a warning alert for a human.
    set_components(&client, &ns, "shop", json!([web("shop:2", 2)])).await;
    let paused = wait_alerts(&am, "ReleasePlanPaused firing", |a| {
        named(a, &ns, "ReleasePlanPaused")
            .first()
            .map(|x| (*x).clone())
    })
    .await;
    assert_eq!(paused["labels"]["severity"], "warning");
    let paused_revision = paused["labels"]["revision"].clone();
    assert!(paused_revision.as_str().is_some_and(|r| !r.is_empty()));

    // Its promotion fires ReleasePlanPromoted and resolves the pause at once
    // (without the resolution it would stay active for resolve_timeout, 5 min).
    request(&client, &ns, "shop", "promote").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_alerts(
        &am,
        "ReleasePlanPromoted firing, ReleasePlanPaused resolved",
        |a| {
            let promoted = named(a, &ns, "ReleasePlanPromoted");
            (promoted.iter().any(|p| {
                p["labels"]["revision"] == paused_revision && p["labels"]["severity"] == "info"
            }) && named(a, &ns, "ReleasePlanPaused").is_empty())
            .then_some(())
        },
    )
    .await;

    // Rollout 3 crash-loops and rolls back.
    set_components(
        &client,
        &ns,
        "shop",
        json!([web_with(faulty_template("shop:3", "crash-loop"), 2)]),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
    let rolled_back = wait_alerts(&am, "ReleasePlanRolledBack firing", |a| {
        let found = named(a, &ns, "ReleasePlanRolledBack");
        (found.len() == 1).then(|| found[0].clone())
    })
    .await;
    let labels = &rolled_back["labels"];
    assert_eq!(labels["severity"], "warning");
    let revision = labels["revision"].as_str().expect("a revision label");
    assert!(!revision.is_empty() && labels["revision"] != paused_revision);
    assert_eq!(
        labels.as_object().unwrap().len(),
        5,
        "alertname, namespace, releaseplan, revision, severity: {labels}"
    );
    let summary = rolled_back["annotations"]["summary"].as_str().unwrap();
    assert!(
        summary.contains("rolled back (podHealth: CrashLoopBackOff)"),
        "{summary}"
    );
    assert!(
        rolled_back["annotations"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("podHealth: CrashLoopBackOff")),
        "{rolled_back}"
    );
    assert_eq!(
        rolled_back["generatorURL"],
        format!("https://dash.example/plans/{ns}/shop")
    );
    assert!(rolled_back["startsAt"].as_str().is_some());
    // The rollback's start (sent before, by the same worker) is resolved by
    // its end; the gate's failure too.
    let alerts = am.alerts().await.expect("GET /api/v2/alerts");
    for gone in ["ReleasePlanRollbackStarted", "ReleasePlanGateFailed"] {
        assert!(
            named(&alerts, &ns, gone)
                .iter()
                .all(|a| a["labels"]["revision"] != revision),
            "{gone} of {revision} still active: {:?}",
            names(&alerts)
        );
    }
    // The rollout's start is progress, not a problem: it stays until
    // Alertmanager's resolve_timeout.
    assert!(
        named(&alerts, &ns, "ReleasePlanRolloutStarted")
            .iter()
            .any(|a| a["labels"]["revision"] == revision && a["labels"]["severity"] == "info"),
        "{:?}",
        names(&alerts)
    );
}
