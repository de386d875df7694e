//! Health gates against real servers: a real Prometheus (e2e/prometheus.sh,
//! Debian package `prometheus`) scraping a tiny exporter inside the test, and
//! local webhook servers.   cargo test --test it -- gates:: --skip job_gates::

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use chrono::Utc;

use releaseplan::api::{
    GateStatus, Phase, PrometheusCheck, PrometheusGate, Verdict, WebhookCheck, WebhookGate,
};
use releaseplan::gates::outbound::{GateHttp, OutboundPolicy, parse_cidr};
use releaseplan::gates::prometheus::{self, PrometheusSpec, TemplateVars};
use releaseplan::gates::webhook::{self, WebhookBody, WebhookSpec};
use releaseplan::gates::{GateResult, record};
use support::servers::{Prometheus, closed_port, gate_http, gate_http_with, serve};
use support::wait_until;

// ------------------------------------------------------------------ exporter

/// Counters per revision: requests and errors, and the errors added per 100
/// requests at every scrape (the error rate the test controls).
#[derive(Default)]
struct Traffic {
    revisions: BTreeMap<String, (u64, u64, u64)>,
}

/// Serves `/metrics`; each scrape adds 100 requests and `errors_per_100`
/// errors per revision, so `rate(errors) / rate(requests)` is
/// `errors_per_100 / 100`.
async fn exporter(rates: &[(&str, u64)]) -> std::net::SocketAddr {
    let mut traffic = Traffic::default();
    for (rev, per_100) in rates {
        traffic
            .revisions
            .insert((*rev).to_string(), (0, 0, *per_100));
    }
    let state = Arc::new(Mutex::new(traffic));
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(state);
    serve(app).await
}

async fn metrics(State(state): State<Arc<Mutex<Traffic>>>) -> String {
    let mut t = state.lock().unwrap();
    let mut requests = String::from("# TYPE app_requests_total counter\n");
    let mut errors = String::from("# TYPE app_errors_total counter\n");
    for (rev, (req, err, per_100)) in &mut t.revisions {
        *req += 100;
        *err += *per_100;
        requests.push_str(&format!("app_requests_total{{revision=\"{rev}\"}} {req}\n"));
        errors.push_str(&format!("app_errors_total{{revision=\"{rev}\"}} {err}\n"));
    }
    requests + &errors
}

const ERROR_RATIO: &str = r#"sum(rate(app_errors_total{revision="{{revision}}"}[5s])) / sum(rate(app_requests_total{revision="{{revision}}"}[5s]))"#;

fn gate(address: &str, query: &str, threshold: &str) -> PrometheusGate {
    PrometheusGate {
        name: "error-rate".into(),
        check: PrometheusCheck {
            address: address.into(),
            query: query.into(),
            threshold: threshold.into(),
            timeout_seconds: Some(5),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Evaluates a gate as the runner does: parsed once, as the core parses the spec.
async fn evaluate(http: &GateHttp, gate: &PrometheusGate, vars: &TemplateVars) -> GateResult {
    let spec = PrometheusSpec::parse(gate).expect("a valid gate");
    prometheus::evaluate(http, &spec, vars).await
}

/// Calls a webhook gate as the runner does: parsed once.
async fn call(http: &GateHttp, gate: &WebhookGate, body: &WebhookBody) -> GateResult {
    webhook::call(http, &WebhookSpec::parse(gate), body).await
}

fn vars(revision: &str) -> TemplateVars {
    TemplateVars {
        plan: "shop".into(),
        namespace: "default".into(),
        component: "web".into(),
        revision: revision.into(),
        stable_revision: String::new(),
        baseline_revision: String::new(),
    }
}

/// Evaluates `gate` `n` times, folding each result with `record` like the
/// controller does; returns every status.
async fn evaluate_n(
    http: &GateHttp,
    gate: &PrometheusGate,
    vars: &TemplateVars,
    n: usize,
) -> Vec<(GateResult, GateStatus)> {
    let s = PrometheusSpec::parse(gate).unwrap();
    let mut out: Vec<(GateResult, GateStatus)> = Vec::new();
    for _ in 0..n {
        let result = evaluate(http, gate, vars).await;
        let prev = out.last().map(|(_, s)| s);
        let status = record(
            prev,
            &gate.name,
            &result,
            s.failure_limit,
            s.inconclusive_limit,
            Utc::now(),
        );
        out.push((result, status));
    }
    out
}

#[tokio::test]
async fn prometheus_gates_against_a_real_prometheus() {
    let target = exporter(&[("good", 1), ("bad", 50)]).await;
    let prom = Prometheus::start(target);
    let http = gate_http();

    // Wait until Prometheus has scraped enough for rate() over both revisions.
    let ready = gate(
        &prom.url,
        r"count(rate(app_requests_total[5s]) > 0)",
        "== 2",
    );
    wait_until(Duration::from_secs(60), "two scraped revisions", || async {
        match evaluate(&http, &ready, &vars("")).await {
            GateResult::Pass { .. } => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // Low error rate: passes.
    let good = gate(&prom.url, ERROR_RATIO, "< 0.05");
    let runs = evaluate_n(&http, &good, &vars("good"), 1).await;
    match &runs[0].0 {
        GateResult::Pass { value } => assert!((value - 0.01).abs() < 1e-9, "{value}"),
        other => panic!("good revision should pass: {other:?}"),
    }
    assert_eq!(runs[0].1.verdict, Verdict::Passed);
    assert_eq!(runs[0].1.value.as_deref(), Some("0.01"));

    // High error rate: fails, at the third failure with failureLimit 2.
    let mut bad = gate(&prom.url, ERROR_RATIO, "< 0.05");
    bad.check.failure_limit = Some(2);
    let runs = evaluate_n(&http, &bad, &vars("bad"), 3).await;
    for (result, _) in &runs {
        match result {
            GateResult::Fail {
                value: Some(v),
                reason,
            } => {
                assert!((v - 0.5).abs() < 1e-9, "{v}");
                assert!(reason.contains("is not < 0.05"), "{reason}");
            }
            other => panic!("bad revision should fail: {other:?}"),
        }
    }
    let verdicts: Vec<_> = runs.iter().map(|(_, s)| s.verdict).collect();
    assert_eq!(
        verdicts,
        [Verdict::Pending, Verdict::Pending, Verdict::Failed]
    );
    assert_eq!(runs[2].1.failures, 3);
    assert_eq!(runs[2].1.value.as_deref(), Some("0.5"));

    // With the default failureLimit 0 the first failure fails the gate.
    let runs = evaluate_n(&http, &good, &vars("bad"), 1).await;
    assert_eq!(runs[0].1.verdict, Verdict::Failed);

    // No data for a revision that does not exist: inconclusive, then, once
    // over inconclusiveLimit, still inconclusive and awaiting a human's
    // decision (never failed on missing data alone).
    let mut nodata = good.clone();
    nodata.check.inconclusive_limit = Some(1);
    let runs = evaluate_n(&http, &nodata, &vars("nope"), 2).await;
    for (result, _) in &runs {
        match result {
            GateResult::Inconclusive { reason } => assert!(reason.contains("no data"), "{reason}"),
            other => panic!("unknown revision should be inconclusive: {other:?}"),
        }
    }
    let verdicts: Vec<_> = runs.iter().map(|(_, s)| s.verdict).collect();
    assert_eq!(verdicts, [Verdict::Inconclusive, Verdict::Inconclusive]);
    let awaiting: Vec<bool> = runs.iter().map(|(_, s)| s.awaiting_decision).collect();
    assert_eq!(awaiting, [false, true]);

    // Several series: inconclusive.
    let many = gate(
        &prom.url,
        "sum by (revision) (rate(app_requests_total[5s]))",
        "> 0",
    );
    match evaluate(&http, &many, &vars("")).await {
        GateResult::Inconclusive { reason } => assert!(reason.contains("2 series"), "{reason}"),
        other => panic!("two series should be inconclusive: {other:?}"),
    }

    // A scalar answer is compared too.
    let scalar = gate(
        &prom.url,
        r#"scalar(sum(rate(app_errors_total{revision="{{revision}}"}[5s])))"#,
        ">= 1",
    );
    match evaluate(&http, &scalar, &vars("bad")).await {
        // About 50 errors a second; rate() extrapolates, so not exactly.
        GateResult::Pass { value } => assert!(value > 1.0, "{value}"),
        other => panic!("scalar should pass: {other:?}"),
    }

    // A query Prometheus refuses (HTTP 400, bad_data): an error, never a pass.
    let broken = gate(&prom.url, "sum(rate(app_requests_total[5s]", "< 0.05");
    match evaluate(&http, &broken, &vars("good")).await {
        GateResult::Error { reason } => {
            assert!(reason.contains("HTTP 400"), "{reason}");
            assert!(reason.contains("bad_data"), "{reason}");
        }
        other => panic!("a bad query should be an error: {other:?}"),
    }
    drop(prom);
}

#[tokio::test]
async fn unreachable_prometheus_is_an_error_never_a_pass() {
    let addr = closed_port().await;
    let g = gate(&format!("http://{addr}"), ERROR_RATIO, "< 0.05");
    let result = evaluate(&gate_http(), &g, &vars("good")).await;
    match &result {
        GateResult::Error { reason } => {
            assert_eq!(
                *reason,
                format!("cannot reach prometheus at http://{addr}/: connection refused")
            );
        }
        other => panic!("unreachable prometheus should be an error: {other:?}"),
    }
    let status = record(None, &g.name, &result, 0, 3, Utc::now());
    assert_eq!(status.verdict, Verdict::Failed);
    assert_eq!(status.failures, 1);
}

#[tokio::test]
async fn prometheus_errors_and_timeouts_are_errors() {
    let app = Router::new()
        .route(
            "/unavailable/api/v1/query",
            get(|| async {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    r#"{"status":"error","errorType":"unavailable","error":"too many queries"}"#,
                )
            }),
        )
        .route(
            "/html/api/v1/query",
            get(|| async { (StatusCode::OK, "<html>a login page</html>") }),
        )
        .route(
            "/slow/api/v1/query",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                r#"{"status":"success","data":{"resultType":"scalar","result":[0,"0"]}}"#
            }),
        );
    let addr = serve(app).await;
    let http = gate_http();

    // Prometheus's own errorType is named; its text only when the operator allows bodies.
    let g = gate(&format!("http://{addr}/unavailable"), "up", "< 1");
    match evaluate(&http, &g, &vars("")).await {
        GateResult::Error { reason } => {
            assert_eq!(reason, "prometheus answered HTTP 503: unavailable");
        }
        other => panic!("HTTP 503 should be an error: {other:?}"),
    }
    let verbose = gate_http_with(OutboundPolicy {
        error_body_chars: 100,
        ..Default::default()
    });
    match evaluate(&verbose, &g, &vars("")).await {
        GateResult::Error { reason } => {
            assert_eq!(
                reason,
                "prometheus answered HTTP 503: unavailable: too many queries"
            );
        }
        other => panic!("HTTP 503 should be an error: {other:?}"),
    }

    let g = gate(&format!("http://{addr}/html"), "up", "< 1");
    match evaluate(&http, &g, &vars("")).await {
        GateResult::Error { reason } => {
            assert!(reason.contains("not JSON"), "{reason}");
            assert!(!reason.contains("login"), "no body by default: {reason}");
        }
        other => panic!("a body that is not JSON should be an error: {other:?}"),
    }

    let mut g = gate(&format!("http://{addr}/slow"), "up", "< 1");
    g.check.timeout_seconds = Some(1);
    let started = Instant::now();
    match evaluate(&http, &g, &vars("")).await {
        GateResult::Error { reason } => {
            assert!(reason.contains("did not answer within 1s"), "{reason}");
        }
        other => panic!("a slow prometheus should be an error: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(4));
}

// ------------------------------------------------------------------ webhooks

#[derive(Default)]
struct Hooks {
    calls: AtomicU32,
    bodies: Mutex<Vec<serde_json::Value>>,
}

async fn hook_server() -> (std::net::SocketAddr, Arc<Hooks>) {
    let hooks = Arc::new(Hooks::default());
    let app = Router::new()
        .route(
            "/ok",
            post(
                |State(h): State<Arc<Hooks>>, headers: HeaderMap, body: Bytes| async move {
                    h.calls.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(headers["content-type"], "application/json");
                    let body = serde_json::from_slice(&body).expect("body is not JSON");
                    h.bodies.lock().unwrap().push(body);
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .route(
            "/fail",
            post(|State(h): State<Arc<Hooks>>| async move {
                h.calls.fetch_add(1, Ordering::SeqCst);
                (StatusCode::INTERNAL_SERVER_ERROR, "database is on fire")
            }),
        )
        .route(
            "/flaky",
            post(|State(h): State<Arc<Hooks>>| async move {
                if h.calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::OK
                }
            }),
        )
        .route(
            "/slow",
            post(|State(h): State<Arc<Hooks>>| async move {
                h.calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(5)).await;
                StatusCode::OK
            }),
        )
        .with_state(hooks.clone());
    (serve(app).await, hooks)
}

fn hook(url: String, retries: i32, timeout_seconds: i32) -> WebhookGate {
    WebhookGate {
        name: "smoke-test".into(),
        check: WebhookCheck {
            url,
            timeout_seconds: Some(timeout_seconds),
            retries: Some(retries),
            inconclusive_limit: None,
        },
        ..WebhookGate::default()
    }
}

fn body() -> WebhookBody {
    WebhookBody {
        plan: "shop".into(),
        namespace: "default".into(),
        revision: "7f3c9a".into(),
        step: 1,
        phase: Phase::RollingOut,
        component: "web".into(),
        component_revision: "5d8f".into(),
    }
}

#[tokio::test]
async fn webhook_2xx_passes_and_receives_the_rollout_state() {
    let (addr, hooks) = hook_server().await;
    let g = hook(format!("http://{addr}/ok"), 2, 5);
    let result = call(&gate_http(), &g, &body()).await;
    assert_eq!(result, GateResult::Pass { value: 204.0 });
    assert_eq!(hooks.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        hooks.bodies.lock().unwrap().as_slice(),
        [serde_json::json!({
            "plan": "shop", "namespace": "default", "revision": "7f3c9a",
            "step": 1, "phase": "RollingOut",
            "component": "web", "componentRevision": "5d8f"
        })]
    );
    let status = record(None, &g.name, &result, 0, 0, Utc::now());
    assert_eq!(status.verdict, Verdict::Passed);
    assert_eq!(status.value.as_deref(), Some("204"));
}

#[tokio::test]
async fn webhook_500_fails_after_the_retries() {
    let (addr, hooks) = hook_server().await;
    let g = hook(format!("http://{addr}/fail"), 2, 5);
    let started = Instant::now();
    let result = call(&gate_http(), &g, &body()).await;
    assert_eq!(hooks.calls.load(Ordering::SeqCst), 3, "retries + 1 calls");
    // Backoff 200ms then 400ms.
    assert!(started.elapsed() >= Duration::from_millis(600));
    match &result {
        GateResult::Fail {
            value: Some(v),
            reason,
        } => {
            assert_eq!(*v, 500.0);
            assert_eq!(reason, "webhook answered HTTP 500 (after 3 attempts)");
        }
        other => panic!("a 500 should fail: {other:?}"),
    }
    let status = record(None, &g.name, &result, 0, 0, Utc::now());
    assert_eq!(status.verdict, Verdict::Failed);
}

#[tokio::test]
async fn webhook_without_retries_is_called_once() {
    let (addr, hooks) = hook_server().await;
    let g = hook(format!("http://{addr}/fail"), 0, 5);
    let result = call(&gate_http(), &g, &body()).await;
    assert!(matches!(result, GateResult::Fail { .. }), "{result:?}");
    assert_eq!(hooks.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn webhook_retry_can_pass() {
    let (addr, hooks) = hook_server().await;
    let g = hook(format!("http://{addr}/flaky"), 2, 5);
    let result = call(&gate_http(), &g, &body()).await;
    assert_eq!(result, GateResult::Pass { value: 200.0 });
    assert_eq!(hooks.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn webhook_slower_than_its_timeout_fails() {
    let (addr, hooks) = hook_server().await;
    let g = hook(format!("http://{addr}/slow"), 1, 1);
    let started = Instant::now();
    let result = call(&gate_http(), &g, &body()).await;
    let elapsed = started.elapsed();
    match &result {
        GateResult::Error { reason } => {
            assert!(reason.contains("did not answer within 1s"), "{reason}");
            assert!(reason.contains("after 2 attempts"), "{reason}");
        }
        other => panic!("a slow webhook should be an error: {other:?}"),
    }
    assert_eq!(hooks.calls.load(Ordering::SeqCst), 2);
    assert!(
        elapsed >= Duration::from_millis(2200) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    assert_eq!(
        record(None, &g.name, &result, 0, 0, Utc::now()).verdict,
        Verdict::Failed
    );
}

#[tokio::test]
async fn unreachable_webhook_is_an_error() {
    let addr = closed_port().await;
    let g = hook(format!("http://{addr}/ok"), 1, 2);
    match call(&gate_http(), &g, &body()).await {
        GateResult::Error { reason } => {
            assert_eq!(
                reason,
                format!(
                    "cannot reach webhook at http://{addr}/ok: connection refused (after 2 attempts)"
                )
            );
        }
        other => panic!("an unreachable webhook should be an error: {other:?}"),
    }
}

#[tokio::test]
async fn webhook_body_is_kept_out_unless_allowed() {
    let (addr, _hooks) = hook_server().await;
    let g = hook(format!("http://{addr}/fail"), 0, 5);
    let verbose = gate_http_with(OutboundPolicy {
        error_body_chars: 8,
        ..Default::default()
    });
    match call(&verbose, &g, &body()).await {
        GateResult::Fail { reason, .. } => {
            assert_eq!(reason, "webhook answered HTTP 500: database…");
        }
        other => panic!("a 500 should fail: {other:?}"),
    }
}

// ------------------------------------------------------------------ outbound policy

/// Requests a local server received: method, path and query.
type Seen = Arc<Mutex<Vec<String>>>;

/// A server that records every request and answers with `answer`.
async fn recorder(
    bind: &str,
    answer: fn(&axum::http::Uri) -> axum::response::Response,
) -> (std::net::SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let app =
        Router::new()
            .fallback(
                move |State(seen): State<Seen>,
                      method: axum::http::Method,
                      uri: axum::http::Uri| async move {
                    seen.lock().unwrap().push(format!("{method} {uri}"));
                    answer(&uri)
                },
            )
            .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

fn scalar_zero(_: &axum::http::Uri) -> axum::response::Response {
    use axum::response::IntoResponse;
    r#"{"status":"success","data":{"resultType":"scalar","result":[0,"0"]}}"#.into_response()
}

#[tokio::test]
async fn redirects_are_not_followed() {
    use axum::response::IntoResponse;
    let (second, second_seen) = recorder("127.0.0.1:0", scalar_zero).await;
    let app = Router::new().fallback(move || async move {
        (
            StatusCode::TEMPORARY_REDIRECT,
            [(
                "location",
                format!("http://user:pw@{second}/api/v1/query?token=sekrit"),
            )],
        )
            .into_response()
    });
    let first = serve(app).await;
    // Redacted: no userinfo or query, and the path cut after its first segment.
    let expected = format!("redirect to http://{second}/api/… not followed");

    let g = hook(format!("http://{first}/hook"), 0, 5);
    match call(&gate_http(), &g, &body()).await {
        GateResult::Fail { value, reason } => {
            assert_eq!(value, Some(307.0));
            assert!(reason.contains(&expected), "{reason}");
            assert!(
                !reason.contains("sekrit") && !reason.contains("pw"),
                "{reason}"
            );
        }
        other => panic!("a redirect should fail the webhook: {other:?}"),
    }
    let g = gate(&format!("http://{first}"), "up", "< 1");
    match evaluate(&gate_http(), &g, &vars("")).await {
        GateResult::Error { reason } => assert!(reason.contains(&expected), "{reason}"),
        other => panic!("a redirect should be a prometheus error: {other:?}"),
    }
    assert!(
        second_seen.lock().unwrap().is_empty(),
        "the second server was called"
    );
}

#[tokio::test]
async fn a_denied_address_is_never_called() {
    // 127.0.0.2 is loopback too (127.0.0.0/8): the flag's deny list refuses it.
    let (addr, seen) = recorder("127.0.0.2:0", scalar_zero).await;
    let http = gate_http_with(OutboundPolicy {
        deny: vec![parse_cidr("127.0.0.2/32").unwrap()],
        ..Default::default()
    });
    let g = hook(format!("http://{addr}/hook?token=sekrit"), 1, 5);
    match call(&http, &g, &body()).await {
        GateResult::Refused { reason } => {
            assert!(
                reason.contains(&format!(
                    "webhook at http://{addr}/hook not called: address 127.0.0.2 of 127.0.0.2 is refused by the operator (--gate-deny-cidrs 127.0.0.2/32)"
                )),
                "{reason}"
            );
            assert!(
                !reason.contains("attempts"),
                "a refusal is not retried: {reason}"
            );
            assert!(!reason.contains("sekrit"), "{reason}");
        }
        other => panic!("a denied address should be refused: {other:?}"),
    }
    let g = gate(&format!("http://{addr}"), "up", "< 1");
    match evaluate(&http, &g, &vars("")).await {
        GateResult::Refused { reason } => {
            assert!(reason.contains("refused by the operator"), "{reason}")
        }
        other => panic!("a denied address should be refused: {other:?}"),
    }
    // The same server is called without the deny list.
    let g = gate(&format!("http://{addr}"), "up", "< 1");
    assert_eq!(
        evaluate(&gate_http(), &g, &vars("")).await,
        GateResult::Pass { value: 0.0 }
    );
    assert_eq!(seen.lock().unwrap().len(), 1, "{:?}", seen.lock().unwrap());
}

#[tokio::test]
async fn resolved_addresses_are_checked() {
    // A name is checked on the addresses it resolves to, in the client's
    // resolver: `localhost` denied by address, never connected to.
    let (addr, seen) = recorder("127.0.0.1:0", scalar_zero).await;
    let port = addr.port();
    let http = gate_http_with(OutboundPolicy {
        deny: vec![parse_cidr("127.0.0.1").unwrap(), parse_cidr("::1").unwrap()],
        ..Default::default()
    });
    let g = gate(&format!("http://localhost:{port}"), "up", "< 1");
    match evaluate(&http, &g, &vars("")).await {
        GateResult::Refused { reason } => {
            assert!(
                reason.starts_with(&format!(
                    "prometheus at http://localhost:{port}/ not called: address "
                )),
                "{reason}"
            );
            assert!(
                reason.contains("of localhost is refused by the operator"),
                "{reason}"
            );
        }
        other => panic!("a denied address should be refused: {other:?}"),
    }
    assert!(seen.lock().unwrap().is_empty());

    // An allow-list of names: the name passes, the bare address does not.
    let http = gate_http_with(OutboundPolicy {
        allow: vec!["localhost".parse().unwrap()],
        ..Default::default()
    });
    let g = gate(&format!("http://127.0.0.1:{port}"), "up", "< 1");
    match evaluate(&http, &g, &vars("")).await {
        GateResult::Refused { reason } => assert!(
            reason
                .contains("host 127.0.0.1 (127.0.0.1) is not in the operator's --gate-allow-hosts"),
            "{reason}"
        ),
        other => panic!("an address not allowed should be refused: {other:?}"),
    }
    assert!(seen.lock().unwrap().is_empty());
    let g = gate(&format!("http://localhost:{port}"), "up", "< 1");
    assert_eq!(
        evaluate(&http, &g, &vars("")).await,
        GateResult::Pass { value: 0.0 }
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn query_and_fragment_tricks_land_on_the_query_path() {
    let (addr, seen) = recorder("127.0.0.1:0", scalar_zero).await;
    let want = "GET /prom/api/v1/query?query=vector%281%29&timeout=5s";
    for address in [
        format!("http://{addr}/prom?x=1#"),
        format!("http://{addr}/prom#/evil"),
        format!("http://{addr}/prom/?query=vector(0)&"),
        format!("http://{addr}/prom?query=vector(0)#"),
        format!("http://{addr}/prom?"),
        format!("http://{addr}/prom/"),
    ] {
        let g = gate(&address, "vector(1)", "< 1");
        let r = evaluate(&gate_http(), &g, &vars("")).await;
        assert_eq!(r, GateResult::Pass { value: 0.0 }, "{address}");
        let last = seen.lock().unwrap().pop();
        assert_eq!(last.as_deref(), Some(want), "{address}");
    }
}

#[tokio::test]
async fn failing_answers_keep_their_bodies_out() {
    use axum::response::IntoResponse;
    let secret = "AKIAFAKESECRET0123456789";
    let app = Router::new().fallback(move || async move {
        (
            StatusCode::FORBIDDEN,
            format!(r#"{{"status":"error","errorType":"{secret}","error":"token {secret}"}}"#),
        )
            .into_response()
    });
    let addr = serve(app).await;
    let r = call(
        &gate_http(),
        &hook(format!("http://{addr}/"), 0, 5),
        &body(),
    )
    .await;
    assert_eq!(
        r,
        GateResult::Fail {
            value: Some(403.0),
            reason: "webhook answered HTTP 403".into()
        }
    );
    let r = evaluate(
        &gate_http(),
        &gate(&format!("http://{addr}"), "up", "< 1"),
        &vars(""),
    )
    .await;
    assert_eq!(
        r,
        GateResult::Error {
            reason: "prometheus answered HTTP 403".into()
        }
    );
}

#[tokio::test]
async fn transport_errors_are_named_by_kind_only() {
    // https to a plain-HTTP server: the handshake fails.
    let (addr, _hooks) = hook_server().await;
    let g = hook(format!("https://{addr}/ok?token=sekrit"), 0, 5);
    match call(&gate_http(), &g, &body()).await {
        GateResult::Error { reason } => {
            assert_eq!(
                reason,
                format!("cannot reach webhook at https://{addr}/ok: TLS error")
            );
        }
        other => panic!("a TLS failure should be an error: {other:?}"),
    }
}

/// A Prometheus answer larger than `--gate-max-answer-bytes` (256 KiB by
/// default) is an error of the gate that names the limit, never read
/// whole; the same answer within a larger limit is read and interpreted.
#[tokio::test]
async fn an_answer_over_the_answer_limit_is_an_error() {
    use axum::response::IntoResponse;
    // One series, padded with a label 300 KiB long: valid JSON, one number.
    let padding = "x".repeat(300 * 1024);
    let answer = format!(
        r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{"pad":"{padding}"}},"value":[0,"0"]}}]}}}}"#
    );
    let addr = serve(Router::new().fallback(move || {
        let answer = answer.clone();
        async move { answer.into_response() }
    }))
    .await;
    let g = gate(&format!("http://{addr}"), "up", "< 1");
    match evaluate(&gate_http(), &g, &vars("")).await {
        GateResult::Error { reason } => {
            assert!(
                reason.contains("larger than 262144 bytes")
                    && reason.contains("--gate-max-answer-bytes"),
                "{reason}"
            );
        }
        other => panic!("an answer over the limit should be an error: {other:?}"),
    }
    let roomy = gate_http().with_max_answer_bytes(1024 * 1024);
    assert_eq!(
        evaluate(&roomy, &g, &vars("")).await,
        GateResult::Pass { value: 0.0 }
    );
}
