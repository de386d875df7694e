//! Trialled gates (`dryRun`) and inconclusive gates that ask a human, on the
//! real control plane with a real Prometheus scraping a test exporter whose
//! error rate per revision the test sets (the exporter of `gated_rollout`).

use crate::gated_rollout::{ERROR_RATIO, Traffic, hash_of, metrics};
use crate::support;

use axum::Router;
use axum::routing::{get, post};
use releaseplan::api::{Phase, ReleasePlan, Verdict, WebhookCheck, WebhookGate};
use releaseplan::gates::GateResult;
use releaseplan::gates::webhook::{self, WebhookBody, WebhookSpec};
use serde_json::{Value, json};
use support::fixtures::{plan, web};
use support::operator::Operator;
use support::plans::{by_image, create, revisions, set_components};
use support::servers::{Prometheus, gate_http, serve};
use support::{Harness, WAIT, plans, wait_until};

/// Starts the exporter (`traffic`) and a Prometheus scraping it every second.
async fn exporter_and_prometheus(traffic: &Traffic) -> Prometheus {
    let addr = serve(
        Router::new()
            .route("/metrics", get(metrics))
            .with_state(traffic.clone()),
    )
    .await;
    Prometheus::start(addr)
}

/// Waits until Prometheus has an error ratio for the revision `rev`, so a
/// gate never sees a half-scraped start.
async fn wait_for_data(prom: &Prometheus, rev: &str) {
    let http = support::servers::http_client();
    let url = format!("{}/api/v1/query", prom.url);
    let q = ERROR_RATIO.replace("{{revision}}", rev);
    wait_until(WAIT, "the error ratio of a revision", || {
        let (http, url, q) = (http.clone(), url.clone(), q.clone());
        async move {
            let body: Value = http
                .get(&url)
                .query(&[("query", q)])
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (!body["data"]["result"].as_array()?.is_empty()).then_some(())
        }
    })
    .await;
}

/// A gate of `health.gates` on the error ratio (< 5%, every second), with
/// the gate-level fields of `extra` and the Prometheus fields of `check`.
fn error_gate(prom: &Prometheus, extra: Value, check: Value) -> Value {
    let mut g = json!({
        "name": "error-rate",
        "prometheus": {"address": prom.url, "query": ERROR_RATIO, "threshold": "< 0.05", "interval": "1s"}
    });
    for (k, v) in extra.as_object().unwrap() {
        g[k] = v.clone();
    }
    for (k, v) in check.as_object().unwrap() {
        g["prometheus"][k] = v.clone();
    }
    g
}

/// Releases `shop:1` behind `gate` with `steps`, then rolls out `shop:2`.
async fn release_then_change(client: &kube::Client, ns: &str, steps: Value, gate: Value) {
    let spec = json!({
        "components": [web("shop:1", 2)],
        "strategy": {"steps": steps},
        "health": {"gates": [gate]}
    });
    create(client, ns, &plan("shop", spec)).await;
    let settled = wait_until(WAIT, "the first release to settle", || async {
        let s = plans::get(client, ns, "shop").await?.status?;
        matches!(s.phase, Phase::Stable | Phase::RolledBack).then_some(s.phase)
    })
    .await;
    assert_eq!(settled, Phase::Stable, "first release");
    set_components(client, ns, "shop", json!([web("shop:2", 2)])).await;
}

/// The plan once it settled on its latest generation.
async fn wait_settled(client: &kube::Client, ns: &str) -> ReleasePlan {
    wait_until(WAIT, "the rollout to settle", || async {
        let p = plans::get(client, ns, "shop").await?;
        let s = p.status.clone()?;
        (matches!(s.phase, Phase::Stable | Phase::RolledBack)
            && s.observed_generation == p.metadata.generation)
            .then_some(p)
    })
    .await
}

/// Panics at once when the rollout rolls back or halts: what a real gate's
/// verdict would do, and a trial's or an inconclusive one's must not.
fn never_failed(p: &ReleasePlan) {
    let s = p.status.as_ref().unwrap();
    assert!(
        s.failure.is_none() && matches!(s.phase, Phase::RollingOut | Phase::Stable),
        "the gate stopped the rollout: {:?} {:?}",
        s.phase,
        s.failure
    );
}

#[tokio::test]
async fn a_dry_run_prometheus_gate_fails_without_blocking() {
    let Harness { client, ns } = Harness::new("trial-dry").await;
    let traffic: Traffic = Default::default();
    // The new revision answers half its requests with errors.
    traffic.lock().unwrap().insert(hash_of("shop:1"), (0, 0, 0));
    traffic
        .lock()
        .unwrap()
        .insert(hash_of("shop:2"), (0, 0, 50));
    let prom = exporter_and_prometheus(&traffic).await;
    wait_for_data(&prom, &hash_of("shop:1")).await;
    wait_for_data(&prom, &hash_of("shop:2")).await;
    let op = Operator::start(&ns, &[]).await;
    // A pause that waits for promotion, so the trial is seen at work.
    let steps = json!([{"setWeight": 50}, {"pause": {}}]);
    release_then_change(
        &client,
        &ns,
        steps,
        error_gate(&prom, json!({"dryRun": true}), json!({})),
    )
    .await;
    // Step 0 does not wait for the trial; at the pause step its Failed
    // verdict is recorded, and nothing rolls back.
    let p = wait_until(
        WAIT,
        "the trial's Failed verdict at the pause step",
        || async {
            let p = plans::get(&client, &ns, "shop").await?;
            never_failed(&p);
            let s = p.status.clone()?;
            let g = s.gates.iter().find(|g| g.name == "error-rate")?;
            (s.current_step == 1 && g.verdict == Verdict::Failed).then_some(p)
        },
    )
    .await;
    let g = p.status.as_ref().unwrap().gates[0].clone();
    assert!(g.dry_run, "{g:?}");
    assert_eq!(g.value.as_deref(), Some("0.5"), "{g:?}");
    // Its Event says it is a trial; its metrics are marked as one.
    let events = wait_until(WAIT, "the trial's GateFailed Event", || async {
        let events = plans::plan_events(&client, &ns, "shop").await;
        events.iter().any(|e| e.0 == "GateFailed").then_some(events)
    })
    .await;
    let failed: Vec<_> = events.iter().filter(|e| e.0 == "GateFailed").collect();
    assert!(
        failed
            .iter()
            .all(|e| e.2.starts_with("gate error-rate (dry run): ")),
        "{failed:?}"
    );
    let text = op.metrics().await;
    let marked = format!(
        "releaseplan_gate_dry_run{{namespace=\"{ns}\",plan=\"shop\",gate=\"error-rate\"}} 1"
    );
    assert!(text.contains(&marked), "{marked} missing:\n{text}");
    assert!(
        text.contains(&format!(
            "releaseplan_gate_value{{namespace=\"{ns}\",plan=\"shop\",gate=\"error-rate\"}} 0.5"
        )),
        "{text}"
    );
    // Promoted past the pause, the final step does not wait for it either.
    plans::request(&client, &ns, "shop", "promote").await;
    let p = wait_settled(&client, &ns).await;
    let s = p.status.unwrap();
    assert_eq!(s.phase, Phase::Stable, "{:?}", s.message);
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(by_image(&revs, "shop:2"), Some((2, 2)));
    drop(prom);
}

#[tokio::test]
async fn an_inconclusive_prometheus_gate_pauses_until_promoted() {
    let Harness { client, ns } = Harness::new("trial-inconclusive").await;
    let traffic: Traffic = Default::default();
    // The new revision has no data yet: every evaluation is inconclusive.
    traffic.lock().unwrap().insert(hash_of("shop:1"), (0, 0, 0));
    let prom = exporter_and_prometheus(&traffic).await;
    wait_for_data(&prom, &hash_of("shop:1")).await;
    let _op = Operator::start(&ns, &[]).await;
    let steps = json!([{"setWeight": 50}, {"pause": {"duration": "2s"}}]);
    release_then_change(
        &client,
        &ns,
        steps,
        error_gate(&prom, json!({}), json!({"inconclusiveLimit": 1})),
    )
    .await;
    let p = wait_until(WAIT, "the pause on the inconclusive gate", || async {
        let p = plans::get(&client, &ns, "shop").await?;
        never_failed(&p);
        let (status, reason, _) = plans::condition(&p, "Paused")?;
        (status == "True" && reason == "GateInconclusive").then_some(p)
    })
    .await;
    let (_, _, message) = plans::condition(&p, "Paused").unwrap();
    assert!(
        message.starts_with("gate error-rate is inconclusive: query returned no data"),
        "{message}"
    );
    let s = p.status.clone().unwrap();
    assert_eq!((s.phase, s.current_step), (Phase::RollingOut, 0));
    let g = &s.gates[0];
    assert_eq!(
        (g.verdict, g.inconclusive, g.awaiting_decision),
        (Verdict::Inconclusive, 2, true),
        "{g:?}"
    );
    // One Event names the gate and why.
    let events = wait_until(WAIT, "the RolloutAwaitingDecision Event", || async {
        let events = plans::plan_events(&client, &ns, "shop").await;
        events
            .iter()
            .any(|e| e.0 == "RolloutAwaitingDecision")
            .then_some(events)
    })
    .await;
    let asked: Vec<_> = events
        .iter()
        .filter(|e| e.0 == "RolloutAwaitingDecision")
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].1, "Warning");
    assert!(
        asked[0]
            .2
            .starts_with("gate error-rate is inconclusive: query returned no data"),
        "{asked:?}"
    );
    // The data arrives, and a human promotes: the next steps ask the gate
    // afresh, it passes, and the revision is released.
    traffic.lock().unwrap().insert(hash_of("shop:2"), (0, 0, 1));
    wait_for_data(&prom, &hash_of("shop:2")).await;
    plans::request(&client, &ns, "shop", "promote").await;
    let p = wait_settled(&client, &ns).await;
    let s = p.status.unwrap();
    assert_eq!(s.phase, Phase::Stable, "{:?}", s.message);
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(by_image(&revs, "shop:2"), Some((2, 2)));
    let events = plans::plan_events(&client, &ns, "shop").await;
    assert!(
        events.iter().any(|e| e.0 == "StepAdvanced"
            && e.2
                .ends_with("(promoted by request over inconclusive gate error-rate)")),
        "{events:?}"
    );
    drop(prom);
}

#[tokio::test]
async fn a_webhook_answers_inconclusive_with_a_json_body() {
    let app = Router::new()
        .route(
            "/unsure",
            post(|| async {
                axum::Json(
                    json!({"verdict": "Inconclusive", "reason": "no traffic\non the canary yet"}),
                )
            }),
        )
        .route(
            "/other",
            post(|| async { axum::Json(json!({"verdict": "Passed", "reason": "fine"})) }),
        );
    let addr = serve(app).await;
    let gate = |path: &str| {
        WebhookSpec::parse(&WebhookGate {
            name: "smoke".into(),
            check: WebhookCheck {
                url: format!("http://{addr}{path}"),
                timeout_seconds: Some(5),
                retries: Some(2),
                inconclusive_limit: None,
            },
            ..WebhookGate::default()
        })
    };
    let body = WebhookBody {
        plan: "shop".into(),
        namespace: "default".into(),
        revision: "7f3c9a".into(),
        step: 0,
        phase: Phase::RollingOut,
        component: "web".into(),
        component_revision: "5d8f".into(),
    };
    let result = webhook::call(&gate_http(), &gate("/unsure"), &body).await;
    assert_eq!(
        result,
        GateResult::Inconclusive {
            reason: "webhook answered Inconclusive: no traffic on the canary yet".into()
        }
    );
    // Any other 2xx body passes, as it always did.
    let result = webhook::call(&gate_http(), &gate("/other"), &body).await;
    assert_eq!(result, GateResult::Pass { value: 200.0 });
    assert_eq!(gate("/unsure").inconclusive_limit, 0);
}

#[tokio::test]
async fn the_api_server_checks_the_trial_fields() {
    let Harness { client, ns } = Harness::new("trial-admission").await;
    let api = kube::Api::<ReleasePlan>::namespaced(client.clone(), &ns);
    let job = json!({"template": {"spec": {"template": {"spec": {"containers": [{"name": "t", "image": "curl"}]}}}}});
    let prom = json!({"address": "http://prometheus:9090", "query": "up", "threshold": "== 1"});
    let with_gate = |gate: Value| {
        plan(
            "shop",
            json!({"components": [web("shop:1", 1)], "health": {"gates": [gate]}}),
        )
    };
    let refused = [
        (
            json!({"name": "smoke", "job": job, "consecutiveSuccesses": 2}),
            "consecutiveSuccesses and consecutiveErrors apply to prometheus, webhook and template gates",
        ),
        (
            json!({"name": "smoke", "job": job, "consecutiveErrors": 3}),
            "consecutiveSuccesses and consecutiveErrors apply to prometheus, webhook and template gates",
        ),
        (
            json!({"name": "errors", "prometheus": prom, "consecutiveErrors": 0}),
            "spec.health.gates[0].consecutiveErrors",
        ),
        (
            json!({"name": "errors", "prometheus": prom, "consecutiveSuccesses": 101}),
            "spec.health.gates[0].consecutiveSuccesses",
        ),
        (
            json!({"name": "hook", "webhook": {"url": "http://hook", "inconclusiveLimit": -1}}),
            "spec.health.gates[0].webhook.inconclusiveLimit",
        ),
    ];
    for (gate, expect) in refused {
        match api
            .create(&Default::default(), &with_gate(gate.clone()))
            .await
        {
            Ok(_) => panic!("accepted: {gate}"),
            Err(kube::Error::Api(s)) => {
                assert!(s.message.contains(expect), "{gate}: {}", s.message)
            }
            Err(e) => panic!("{gate}: {e}"),
        }
    }
    // Each field where it applies, and a dry-run Job gate, are accepted.
    let accepted = json!({"components": [web("shop:1", 1)], "health": {"gates": [
        {"name": "errors", "prometheus": prom, "dryRun": true, "consecutiveSuccesses": 3, "consecutiveErrors": 1},
        {"name": "hook", "webhook": {"url": "http://hook", "inconclusiveLimit": 2}, "consecutiveErrors": 100},
        {"name": "smoke", "job": job, "dryRun": true}
    ]}});
    api.create(&Default::default(), &plan("shop", accepted))
        .await
        .expect("a plan using the trial fields where they apply");
}
