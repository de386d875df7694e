//! The dashboard with many plans, in headless Chromium (`make bench-dashboard`).
//! Prints figures; asserts nothing about speed (a shared machine makes timed
//! assertions flaky), only that every plan and every change shows up.
//!
//! N plans (`RP_DASH_PLANS`, default 1000) are created in a fresh namespace
//! with a status written directly (no operator: this measures the page, not
//! rollouts), a third of them failing. Then:
//!
//! 1. the page weight (bytes of HTML, JS and CSS as served);
//! 2. time from navigation to the overview drawn with all N rows, and the
//!    longest frame of updates;
//! 3. latency from a status write (one plan) to the row's new text in the
//!    DOM, measured in the page by a MutationObserver (same machine clock);
//! 4. a burst: 100 plans changed at once, until every row shows its change.

// Bench code, like test code, may unwrap, expect and panic (the lint policy of Cargo.toml).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic
)]

#[path = "../tests/it/support/mod.rs"]
mod support;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use releaseplan::api::ReleasePlan;
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::browser::{Browser, Dashboard};
use support::fixtures::{plan, web};
use support::{Harness, wait_until};

const T: Duration = Duration::from_secs(300);

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// A status like the operator's: plan `i` rolls out, is stable, or rolled back;
/// `message` also goes into the gate's value, which every row shows (a failed
/// row shows its failure instead of the message).
fn status(i: usize, message: &str) -> Value {
    let t = "2025-01-01T00:00:00Z";
    let cond = |type_: &str, status: &str, reason: &str| json!({"type": type_, "status": status, "reason": reason, "message": "", "lastTransitionTime": t});
    let (phase, step, weight, failure, stalled) = match i % 3 {
        0 => ("RollingOut", 1, 25, Value::Null, "False"),
        1 => ("Stable", 4, 100, Value::Null, "False"),
        _ => (
            "RolledBack",
            0,
            0,
            json!({"revision": "bbbbbbbbbb", "gate": "podHealth", "reason": "CrashLoopBackOff",
                   "message": "container app is waiting in CrashLoopBackOff"}),
            "True",
        ),
    };
    json!({"status": {
        "phase": phase, "observedGeneration": 1, "currentStep": step, "weight": weight,
        "currentRevision": "bbbbbbbbbb", "stableRevision": "aaaaaaaaaa",
        "stepStartedAt": t, "message": message, "failure": failure,
        "components": [{"name": "web", "currentHash": "hashbbbbbb", "stableHash": "hashaaaaaa",
            "replicas": 4, "currentReplicas": 1, "currentReady": 1, "stableReplicas": 3, "stableReady": 3}],
        "gates": [{"name": "error-rate", "verdict": "Passed", "value": format!("0.0{} {message}", i % 10),
            "failures": 0, "inconclusive": 0}],
        "conditions": [cond("Ready", "False", phase), cond("Stalled", stalled, phase)],
    }})
}

async fn write_status(client: &Client, ns: &str, i: usize, message: &str) {
    Api::<ReleasePlan>::namespaced(client.clone(), ns)
        .patch_status(
            &format!("p{i:04}"),
            &PatchParams::default(),
            &Patch::Merge(status(i, message)),
        )
        .await
        .unwrap_or_else(|e| panic!("status of p{i:04}: {e}"));
}

/// Arms a MutationObserver for `marker` in `key`'s row; the page records
/// `Date.now()` when the row shows it.
async fn arm(b: &Browser, keys: &[String], marker: &str) {
    b.js(
        "const [keys, marker] = arguments; window.rpSeen = {}; const want = new Set(keys);
         const check = () => { for (const k of want) { const r = document.querySelector(`tr[data-key=\"${k}\"]`);
             if (r && r.textContent.includes(marker)) { window.rpSeen[k] = Date.now(); want.delete(k); } }
           if (!want.size) window.rpObs.disconnect(); };
         if (window.rpObs) window.rpObs.disconnect();
         window.rpObs = new MutationObserver(check);
         window.rpObs.observe(document.getElementById('rows'), {subtree: true, childList: true, characterData: true});",
        vec![json!(keys), json!(marker)],
    )
    .await;
}

async fn seen(b: &Browser, n: usize) -> Vec<f64> {
    wait_until(T, "the rows to show the change", || async {
        let v = b.js("return Object.values(window.rpSeen);", vec![]).await;
        let times: Vec<f64> = serde_json::from_value(v).unwrap();
        (times.len() == n).then_some(times)
    })
    .await
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() {
    // `cargo test --all-targets` also builds and runs benches without `--bench`.
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "dashboard benchmark: run with `make bench-dashboard` (cargo bench --bench dashboard)"
        );
        return;
    }
    let n: usize = std::env::var("RP_DASH_PLANS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let Harness { client, ns } = Harness::new("dash-bench").await;

    let start = std::time::Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let (client, ns) = (client.clone(), ns.clone());
            async move {
                Api::<ReleasePlan>::namespaced(client.clone(), &ns)
                    .create(
                        &PostParams::default(),
                        &plan(
                            &format!("p{i:04}"),
                            json!({"components": [web("shop:1", 4)], "strategy": {"steps": [
                                {"setWeight": 25}, {"pause": {}}, {"setWeight": 50}, {"pause": {"duration": "1m"}}]}}),
                        ),
                    )
                    .await
                    .unwrap();
                write_status(&client, &ns, i, "initial").await;
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    println!("{n} plans created with status in {:.1?}", start.elapsed());

    let dash = Dashboard::start(&["-n", &ns]).await;
    let b = Browser::start().await;
    // The renderer's own accounting (Chrome DevTools Protocol): where the
    // time to the first paint went (script, style, layout).
    b.cdp("Performance.enable", json!({})).await;
    let t0 = now_ms();
    b.client.goto(&dash.url).await.unwrap();
    wait_until(T, "the overview to show every plan", || async {
        let v = b
            .js(
                "return document.querySelectorAll('#rows tr').length === arguments[0] ? window.rpStats : null;",
                vec![json!(n)],
            )
            .await;
        (!v.is_null()).then_some(v)
    })
    .await;
    let weight = b
        .js(
            "const n = performance.getEntriesByType('navigation')[0];
             return [n.decodedBodySize, ...performance.getEntriesByType('resource')
               .filter(r => /app\\.(js|css)$/.test(r.name)).map(r => [r.name.split('/').pop(), r.decodedBodySize])];",
            vec![],
        )
        .await;
    println!(
        "page weight (bytes, decoded): index.html {}, then {}",
        weight[0], weight
    );
    let stats = wait_until(T, "the first paint", || async {
        let v = b.js("return window.rpStats;", vec![]).await;
        v["firstPaint"].as_f64().map(|_| v)
    })
    .await;
    let ms = |k: &str| stats[k].as_f64().unwrap();
    println!(
        "overview with {n} plans (ms after navigation start): snapshot received {:.0}, rows built {:.0} (that frame's script {:.0}), laid out and painted {:.0}; render = paint - snapshot {:.0} ms (goto returned after {:.0} ms)",
        ms("firstMessage"),
        ms("firstRender"),
        ms("firstDrawMs"),
        ms("firstPaint"),
        ms("firstPaint") - ms("firstMessage"),
        now_ms() - t0,
    );
    let metrics = b.cdp("Performance.getMetrics", json!({})).await;
    let metric = |name: &str| {
        metrics["metrics"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["name"] == name))
            .and_then(|m| m["value"].as_f64())
            .unwrap_or(f64::NAN)
    };
    println!(
        "renderer time up to the first paint (CDP Performance.getMetrics, ms): script {:.0}, style {:.0} ({} recalcs), layout {:.0} ({} layouts), all tasks {:.0}; {} DOM nodes",
        metric("ScriptDuration") * 1000.0,
        metric("RecalcStyleDuration") * 1000.0,
        metric("RecalcStyleCount"),
        metric("LayoutDuration") * 1000.0,
        metric("LayoutCount"),
        metric("TaskDuration") * 1000.0,
        metric("Nodes"),
    );
    // The server's share: the same snapshot as JSON (GET /api/plans), timed
    // from the page (built from the store and serialized, then sent).
    let snap = b
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1]; const t = performance.now();
             fetch('/api/plans').then(r => r.text()).then(body => done([performance.now() - t, body.length]));",
            vec![],
        )
        .await
        .unwrap();
    println!(
        "snapshot of {n} rows from the plugin (GET /api/plans): {:.0} ms, {} bytes of JSON",
        snap[0].as_f64().unwrap(),
        snap[1]
    );
    b.screenshot(&format!("overview-{n}")).await;

    // One change at a time: status write to DOM.
    let mut single = Vec::new();
    for round in 0..20 {
        let i = (round * 37) % n;
        let key = format!("{ns}/p{i:04}");
        let marker = format!("single-{round}");
        arm(&b, std::slice::from_ref(&key), &marker).await;
        let sent = now_ms();
        write_status(&client, &ns, i, &marker).await;
        let at = seen(&b, 1).await[0];
        single.push(at - sent);
    }
    single.sort_by(f64::total_cmp);
    println!(
        "one status change -> row updated: median {:.0} ms, p90 {:.0} ms, max {:.0} ms (20 changes)",
        pct(&single, 0.5),
        pct(&single, 0.9),
        single[single.len() - 1]
    );

    // A burst: 100 plans at once (16 writes in flight).
    let burst: Vec<usize> = (0..100.min(n)).map(|k| (k * 7 + 3) % n).collect();
    let keys: Vec<String> = burst.iter().map(|i| format!("{ns}/p{i:04}")).collect();
    arm(&b, &keys, "burst").await;
    let sent = now_ms();
    futures::stream::iter(burst.clone())
        .map(|i| {
            let (client, ns) = (client.clone(), ns.clone());
            async move { write_status(&client, &ns, i, "burst").await }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let written = now_ms() - sent;
    let mut times: Vec<f64> = seen(&b, burst.len())
        .await
        .iter()
        .map(|t| t - sent)
        .collect();
    times.sort_by(f64::total_cmp);
    let stats = b.js("return window.rpStats;", vec![]).await;
    println!(
        "burst of {} status changes (written in {written:.0} ms): every row updated {:.0} ms after the first write (median row {:.0} ms); longest frame {:.1} ms",
        burst.len(),
        times[times.len() - 1],
        pct(&times, 0.5),
        stats["maxFlushMs"].as_f64().unwrap()
    );

    // Rows off screen are not rendered (content-visibility) but still found
    // by the browser's find in page, which scrolls to them.
    let last = format!("p{:04}", n - 1);
    let found = b
        .js(
            "const ok = window.find(arguments[0]); const a = window.getSelection().anchorNode;
             const tr = a && a.parentElement.closest('tr'); return [ok, tr ? tr.dataset.key : null];",
            vec![json!(last)],
        )
        .await;
    assert_eq!(found, json!([true, format!("{ns}/{last}")]));
    println!("find in page: {last} found in its row (off screen before)");
    b.close().await;
    drop(dash);
}
