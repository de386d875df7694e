//! Whole rollouts guarded by gates: a real Prometheus scraping a test exporter
//! whose error rate per revision the test sets, and a local webhook server.

use crate::support;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use releaseplan::api::{Phase, revision::template_hash};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::fixtures::{plan, template, web};
use support::operator::Operator;
use support::plans::{by_image, create, create_stable, revisions, set_components};
use support::servers::{Prometheus, serve};
use support::{Harness, WAIT, plans, wait_until};

/// Counters per revision hash: (requests, errors, errors per 100 requests).
pub(crate) type Traffic = Arc<Mutex<BTreeMap<String, (u64, u64, u64)>>>;

pub(crate) async fn metrics(State(t): State<Traffic>) -> String {
    let mut t = t.lock().unwrap();
    let mut out =
        String::from("# TYPE app_requests_total counter\n# TYPE app_errors_total counter\n");
    for (rev, (req, err, per_100)) in t.iter_mut() {
        *req += 100;
        *err += *per_100;
        out.push_str(&format!("app_requests_total{{revision=\"{rev}\"}} {req}\n"));
        out.push_str(&format!("app_errors_total{{revision=\"{rev}\"}} {err}\n"));
    }
    out
}

pub(crate) const ERROR_RATIO: &str = r#"sum(rate(app_errors_total{revision="{{revision}}"}[5s])) / sum(rate(app_requests_total{revision="{{revision}}"}[5s]))"#;

pub(crate) fn hash_of(image: &str) -> String {
    let t: PodTemplateSpec = serde_json::from_value(template(image)).unwrap();
    template_hash(&t)
}

/// Runs one gated rollout of `shop:2` over a stable `shop:1`, with the
/// exporter reporting `per_100` errors for the new revision (None: no data).
async fn gated_rollout(
    prefix: &str,
    per_100: Option<u64>,
    gate: Value,
) -> (kube::Client, String, releaseplan::api::ReleasePlan) {
    let Harness { client, ns } = Harness::new(prefix).await;
    let traffic: Traffic = Arc::default();
    let new = hash_of("shop:2");
    if let Some(p) = per_100 {
        traffic.lock().unwrap().insert(new.clone(), (0, 0, p));
    }
    // The stable revision is healthy, so the first release passes the gate.
    traffic.lock().unwrap().insert(hash_of("shop:1"), (0, 0, 0));
    let addr = serve(
        Router::new()
            .route("/metrics", get(metrics))
            .with_state(traffic.clone()),
    )
    .await;
    let prom = Prometheus::start(addr);
    let watched: Vec<String> = [Some(hash_of("shop:1")), per_100.map(|_| new.clone())]
        .into_iter()
        .flatten()
        .collect();
    for rev in watched {
        // Wait until the rate has data, so a gate never sees a half-scraped start.
        let http = support::servers::http_client();
        let url = format!("{}/api/v1/query", prom.url);
        let q = ERROR_RATIO.replace("{{revision}}", &rev);
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
    let mut gate = gate;
    gate["address"] = json!(prom.url);
    let _op = Operator::start(&ns, &[]).await;
    let spec = json!({
        "components": [web("shop:1", 2)],
        "strategy": {"steps": [{"setWeight": 50}, {"pause": {"duration": "2s"}}]},
        "health": {"prometheus": [gate]}
    });
    create(&client, &ns, &plan("shop", spec)).await;
    let settled = wait_until(WAIT, "the first release to settle", || async {
        let p = plans::get(&client, &ns, "shop").await?;
        let s = p.status.clone()?;
        matches!(s.phase, Phase::Stable | Phase::RolledBack).then_some(s.phase)
    })
    .await;
    assert_eq!(settled, Phase::Stable, "first release");
    set_components(&client, &ns, "shop", json!([web("shop:2", 2)])).await;
    let p = wait_until(WAIT, "the gated rollout to settle", || async {
        let p = plans::get(&client, &ns, "shop").await?;
        let s = p.status.clone()?;
        (matches!(s.phase, Phase::Stable | Phase::RolledBack)
            && s.observed_generation == p.metadata.generation)
            .then_some(p)
    })
    .await;
    drop(prom);
    (client, ns, p)
}

fn prom_gate(threshold: &str) -> Value {
    json!({"name": "error-rate", "address": "", "query": ERROR_RATIO, "threshold": threshold,
           "interval": "1s", "failureLimit": 1, "inconclusiveLimit": 2})
}

#[tokio::test]
async fn a_healthy_revision_passes_its_prometheus_gate() {
    let (client, ns, p) = gated_rollout("prom-pass", Some(1), prom_gate("< 0.05")).await;
    let s = p.status.unwrap();
    assert_eq!(s.phase, Phase::Stable, "{:?}", s.message);
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(by_image(&revs, "shop:2"), Some((2, 2)));
}

#[tokio::test]
async fn a_failing_revision_is_rolled_back_by_its_prometheus_gate() {
    let (client, ns, p) = gated_rollout("prom-fail", Some(50), prom_gate("< 0.05")).await;
    let s = p.status.unwrap();
    assert_eq!(s.phase, Phase::RolledBack, "{:?}", s.message);
    let f = s.failure.unwrap();
    assert_eq!(
        (f.gate.as_str(), f.reason.as_str()),
        ("error-rate", "GateFailed")
    );
    assert!(
        f.message.contains("0.5"),
        "the value is named: {}",
        f.message
    );
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(by_image(&revs, "shop:1"), Some((2, 2)));
    assert_eq!(by_image(&revs, "shop:2").map(|x| x.0), Some(0));
}

// A gate without data past its inconclusiveLimit pauses the rollout for a
// human: `gate_trials::an_inconclusive_prometheus_gate_pauses_until_promoted`.

type Calls = Arc<Mutex<Vec<Value>>>;

async fn hook(State((code, calls)): State<(u16, Calls)>, body: String) -> StatusCode {
    calls
        .lock()
        .unwrap()
        .push(serde_json::from_str(&body).unwrap_or(Value::Null));
    StatusCode::from_u16(code).unwrap()
}

async fn webhook_rollout(prefix: &str, code: u16) -> (Phase, Calls) {
    let Harness { client, ns } = Harness::new(prefix).await;
    let calls: Calls = Arc::default();
    let addr = serve(
        Router::new()
            .route("/check", post(hook))
            .with_state((code, calls.clone())),
    )
    .await;
    let _op = Operator::start(&ns, &[]).await;
    let phase = hooked_rollout(&client, &ns, &format!("http://{addr}/check")).await;
    (phase, calls)
}

/// Releases `shop:1`, then rolls out `shop:2` behind a webhook gate calling
/// `url` (timeout 2s, one retry); returns the phase it settles in.
async fn hooked_rollout(client: &kube::Client, ns: &str, url: &str) -> Phase {
    let (client, ns) = (client.clone(), ns.to_string());
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 2)]}),
    )
    .await;
    let hooks = json!([{"name": "smoke", "url": url, "timeoutSeconds": 2, "retries": 1}]);
    plans::patch_spec(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:2", 2)], "strategy": {"steps": [{"setWeight": 50}]}, "health": {"webhooks": hooks}}),
    )
    .await;
    wait_until(WAIT, "the webhook-gated rollout to settle", || async {
        let p = plans::get(&client, &ns, "shop").await?;
        let s = p.status.clone()?;
        (matches!(s.phase, Phase::Stable | Phase::RolledBack)
            && s.observed_generation == p.metadata.generation)
            .then_some(s.phase)
    })
    .await
}

#[tokio::test]
async fn a_webhook_gate_passes_on_2xx_and_rolls_back_otherwise() {
    let (phase, calls) = webhook_rollout("hook-pass", 200).await;
    assert_eq!(phase, Phase::Stable);
    let first = calls.lock().unwrap()[0].clone();
    assert_eq!(first["plan"], "shop");
    assert_eq!(first["phase"], "RollingOut");
    let (phase, calls) = webhook_rollout("hook-fail", 503).await;
    assert_eq!(phase, Phase::RolledBack);
    assert_eq!(calls.lock().unwrap().len(), 2, "one call and one retry");
}

/// Times of the calls a webhook received.
type Stamps = Arc<Mutex<Vec<std::time::Instant>>>;

async fn stamp(State(stamps): State<Stamps>) -> StatusCode {
    stamps.lock().unwrap().push(std::time::Instant::now());
    StatusCode::OK
}

#[tokio::test]
async fn a_restarted_operator_neither_repeats_nor_forgets_a_gate_call() {
    let Harness { client, ns } = Harness::new("hook-restart").await;
    let stamps: Stamps = Arc::default();
    let addr = serve(
        Router::new()
            .route("/check", post(stamp))
            .with_state(stamps.clone()),
    )
    .await;
    let mut op = Operator::start(&ns, &[]).await;
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 2)]}),
    )
    .await;
    let hooks = json!([{"name": "smoke", "url": format!("http://{addr}/check"), "timeoutSeconds": 2, "retries": 0}]);
    // A `pause: {}` step holds the rollout, so the gate keeps being asked every 10s.
    plans::patch_spec(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:2", 2)], "strategy": {"steps": [{"setWeight": 50}, {"pause": {}}]}, "health": {"webhooks": hooks}}),
    )
    .await;
    // The first call of the pause step, and its verdict in status.
    wait_until(WAIT, "the gate's verdict at the pause step", || async {
        let s = plans::get(&client, &ns, "shop").await?.status?;
        (s.current_step == 1
            && s.gates
                .first()
                .is_some_and(|g| g.verdict == releaseplan::api::Verdict::Passed))
        .then_some(())
    })
    .await;
    let calls_before = stamps.lock().unwrap().len();
    let last = *stamps.lock().unwrap().last().unwrap();
    // The operator dies and another one starts: it reads the verdict and the
    // time of the last call from status.gates, so it does not call again
    // before the 10s interval is over...
    op.kill();
    let _op2 = Operator::start(&ns, &[]).await;
    tokio::time::sleep_until(tokio::time::Instant::from_std(
        last + Duration::from_secs(8),
    ))
    .await;
    assert_eq!(
        stamps.lock().unwrap().len(),
        calls_before,
        "no call before the interval is over"
    );
    // ...and calls again once it is.
    wait_until(
        Duration::from_secs(30),
        "the next call after the interval",
        || async { (stamps.lock().unwrap().len() > calls_before).then_some(()) },
    )
    .await;
    let next = stamps.lock().unwrap()[calls_before];
    let gap = next - last;
    assert!(
        gap >= Duration::from_millis(9500) && gap < Duration::from_secs(20),
        "next call {gap:?} after the last one (interval 10s)"
    );
    let p = plans::get(&client, &ns, "shop").await.unwrap();
    assert_eq!(p.status.unwrap().phase, Phase::RollingOut);
}

/// Everything of a plan an operator writes where users read it: its status
/// and its Events, as text. Waits for the RollbackStarted and RolledBack
/// Events first (Events are written after status).
async fn status_and_events(client: &kube::Client, ns: &str) -> String {
    let events = wait_until(WAIT, "the rollback events", || async {
        let events = plans::plan_events(client, ns, "shop").await;
        let has = |r: &str| events.iter().any(|e| e.0 == r);
        (has("RollbackStarted") && has("RolledBack")).then_some(events)
    })
    .await;
    let p = plans::get(client, ns, "shop").await.unwrap();
    format!("{}\n{events:?}", serde_json::to_string(&p.status).unwrap())
}

const FAKE_SECRET: &str = "AKIAFAKESECRET0123456789";

#[tokio::test]
async fn a_failing_webhook_body_stays_out_of_status_and_events() {
    let Harness { client, ns } = Harness::new("hook-body").await;
    let addr = serve(Router::new().route(
        "/check",
        post(|| async {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("db password={FAKE_SECRET} at 10.1.2.3:5432"),
            )
        }),
    ))
    .await;
    let op = Operator::start(&ns, &[]).await;
    let url = format!("http://hook:query-pass@{addr}/check?token=QUERYSECRET");
    let phase = hooked_rollout(&client, &ns, &url).await;
    assert_eq!(phase, Phase::RolledBack);
    // Status, Events and the operator's log (at debug level).
    let seen = format!(
        "{}\n{}",
        status_and_events(&client, &ns).await,
        op.log_text()
    );
    assert!(
        seen.contains("webhook answered HTTP 500"),
        "the status code is named: {seen}"
    );
    for secret in [
        FAKE_SECRET,
        "password",
        "10.1.2.3",
        "QUERYSECRET",
        "query-pass",
    ] {
        assert!(!seen.contains(secret), "{secret} leaked: {seen}");
    }
}

#[tokio::test]
async fn an_address_denied_by_the_flag_is_never_called() {
    let Harness { client, ns } = Harness::new("hook-denied").await;
    let calls: Calls = Arc::default();
    // Loopback, but not 127.0.0.1: the flag below refuses exactly this address.
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route("/check", post(hook))
        .with_state((200, calls.clone()));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let _op = Operator::start(&ns, &["--gate-deny-cidrs", "10.0.0.0/8,127.0.0.2/32"]).await;
    // A refusal by the operator's own rules is configuration, not a health
    // verdict: the rollout holds (Stalled, GatePolicyRefused), never rolls back.
    let (client, ns) = (client.clone(), ns.clone());
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 2)]}),
    )
    .await;
    let hooks = json!([{"name": "smoke", "url": format!("http://{addr}/check"), "timeoutSeconds": 2, "retries": 1}]);
    plans::patch_spec(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:2", 2)], "strategy": {"steps": [{"setWeight": 50}]}, "health": {"webhooks": hooks}}),
    )
    .await;
    let (_, _, seen) = wait_until(WAIT, "the rollout held by the refusal", || async {
        let p = plans::get(&client, &ns, "shop").await?;
        plans::condition(&p, "Stalled").filter(|(s, r, _)| s == "True" && r == "GatePolicyRefused")
    })
    .await;
    assert!(
        seen.contains("address 127.0.0.2 of 127.0.0.2 is refused by the operator (--gate-deny-cidrs 127.0.0.2/32)"),
        "the condition says why: {seen}"
    );
    let p = plans::get(&client, &ns, "shop").await.unwrap();
    assert_eq!(p.status.map(|s| s.phase), Some(Phase::RollingOut), "held");
    let events = plans::plan_events(&client, &ns, "shop").await;
    assert!(
        !events
            .iter()
            .any(|e| e.0 == "RollbackStarted" || e.0 == "GateFailed"),
        "{events:?}"
    );
    assert!(
        calls.lock().unwrap().is_empty(),
        "the denied server was called"
    );
}
