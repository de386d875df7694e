//! Canary analysis end to end: stand-in vLLM servers (`e2e/model-server.py`)
//! on loopback pod IPs, a real Prometheus scraping them every second, and an
//! `analysis` gate whose judge compares the new revision's samples with the
//! stable revision's.
//!
//! - A version 30 % slower (65 ms to the first token against 50 ms), well
//!   under the fixed threshold a user would write (`< 0.1` s, which a
//!   dry-run Prometheus gate beside it passes), is rolled back, the reason
//!   naming the metric, its change and the tolerance.
//! - An equal version is promoted.
//! - A version whose pods get less than a request a minute is never
//!   judged: the analysis stays inconclusive and, past its limit, the
//!   rollout pauses for a human; it is never rolled back for lack of data.

use crate::support;

use releaseplan::api::{Phase, ReleasePlan};
use serde_json::{Value, json};
use support::fixtures::plan;
use support::gpu::{GpuNodes, ModelServers, model_server_template};
use support::operator::Operator;
use support::plans::{create, get, set_components, wait_phase};
use support::servers::Prometheus;
use support::{Harness, wait_until};

/// The mean time to first token of `{{revision}}` over `window`: for the
/// judge, each sample's own interval (`{{sampleInterval}}`), so a sample
/// never repeats a neighbour's requests.
fn mean_ttft(ns: &str, window: &str) -> String {
    format!(
        "sum(rate(vllm:time_to_first_token_seconds_sum{{namespace=\"{ns}\",revision=\"{{{{revision}}}}\"}}[{window}])) / sum(rate(vllm:time_to_first_token_seconds_count{{namespace=\"{ns}\",revision=\"{{{{revision}}}}\"}}[{window}]))"
    )
}

fn requests(ns: &str, extra: &str) -> String {
    format!(
        "sum(increase(vllm:request_success_total{{namespace=\"{ns}\",revision=\"{{{{revision}}}}\"{extra}}}[{{{{window}}}}]))"
    )
}

fn llama(ns: &str, image: &str, env: &[(&str, &str)]) -> Value {
    json!({"name": "llama", "replicas": 2, "template": model_server_template(ns, image, env)})
}

/// The judge's gate, and a dry-run fixed-threshold gate on the same
/// latency.
fn gates(ns: &str, prometheus: &str) -> Value {
    json!([
        {
            "name": "judge", "component": "llama",
            "analysis": {
                "address": prometheus,
                // A sample per 5 s (five scrapes in its rate window, so a
                // slow scrape on a busy machine still leaves a value), 60 s
                // looked back: 12 samples a side once the canary has run
                // that long; room for 12 inconclusive evaluations meanwhile.
                "lookback": "60s", "sampleInterval": "5s", "interval": "8s",
                "inconclusiveLimit": 12,
                "metrics": [
                    {"name": "ttft", "query": mean_ttft(ns, "{{sampleInterval}}"), "minSamples": 8},
                    {"name": "errors", "failed": requests(ns, ",finished_reason=\"abort\""),
                     "total": requests(ns, ""), "minSamples": 100}
                ]
            }
        },
        {
            "name": "fixed", "component": "llama", "dryRun": true,
            "prometheus": {"address": prometheus, "query": mean_ttft(ns, "10s"), "threshold": "< 0.1", "interval": "4s"}
        }
    ])
}

fn gate<'a>(p: &'a ReleasePlan, name: &str) -> Option<&'a releaseplan::api::GateStatus> {
    p.status.as_ref()?.gates.iter().find(|g| g.name == name)
}

#[tokio::test]
async fn the_judge_rolls_back_a_slower_canary_promotes_an_equal_one_and_waits_on_too_little_data() {
    let Harness { client, ns } = Harness::new("analysis").await;
    let _nodes = GpuNodes::add(&client, &ns, 2, 4, Some(103)).await;
    let dir = tempfile::tempdir().unwrap();
    let targets = dir.path().join("targets.json");
    let _servers = ModelServers::start(&client, &ns, Some(targets.clone()));
    let prometheus = Prometheus::start_file_sd(&targets);
    let _op = Operator::start(&ns, &[]).await;
    let env = |ttft: &'static str, rps: &'static str| {
        [("TTFT_MS", ttft), ("LOAD_SECONDS", "1"), ("RPS", rps)]
    };
    let spec = json!({
        "components": [llama(&ns, "vllm:0.6.3", &env("50", "20"))],
        "strategy": {"steps": [{"setWeight": 50}, {"pause": {"duration": "10s"}}]},
        "health": {"gates": gates(&ns, &prometheus.url), "progressDeadlineSeconds": 300}
    });
    create(&client, &ns, &plan("llama", spec)).await;
    wait_phase(&client, &ns, "llama", Phase::Stable, support::WAIT).await;

    // 30 % slower: under the fixed threshold, which passes it; the judge
    // fails it and the release rolls back.
    set_components(
        &client,
        &ns,
        "llama",
        json!([llama(&ns, "vllm:0.7.0", &env("65", "20"))]),
    )
    .await;
    let fixed_passed = std::sync::atomic::AtomicBool::new(false);
    let seen = std::sync::Mutex::new(String::new());
    let p = wait_until(
        support::WAIT * 3,
        "the slower version rolled back",
        || async {
            let p = get(&client, &ns, "llama").await?;
            if gate(&p, "fixed").is_some_and(|g| g.verdict == releaseplan::api::Verdict::Passed) {
                fixed_passed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            // What the gates saw, each time it changes: a failure explains itself.
            let now = format!(
                "{:?} fixed {:?} judge {:?}",
                p.status.as_ref().map(|s| (s.phase, s.current_step)),
                gate(&p, "fixed").map(|g| (g.verdict, g.value.clone())),
                gate(&p, "judge").map(|g| (g.verdict, g.message.clone()))
            );
            let mut last = seen.lock().unwrap();
            if *last != now {
                eprintln!("{now}");
                *last = now;
            }
            drop(last);
            (p.status.as_ref()?.phase == Phase::RolledBack).then_some(p)
        },
    )
    .await;
    let failure = p.status.unwrap().failure.unwrap();
    eprintln!("the slower version: {}", failure.message);
    assert_eq!(failure.gate, "judge", "{failure:?}");
    assert!(
        failure.message.contains("ttft: canary +")
            && failure.message.contains("beyond the 10.0% tolerance"),
        "{failure:?}"
    );
    assert!(
        fixed_passed.load(std::sync::atomic::Ordering::Relaxed),
        "the fixed threshold < 0.1 s never passed the slower version"
    );

    // Equal: promoted, the judgement in status while it runs.
    set_components(
        &client,
        &ns,
        "llama",
        json!([llama(&ns, "vllm:0.7.1", &env("50", "20"))]),
    )
    .await;
    let judged = wait_until(
        support::WAIT * 3,
        "a judgement of the equal version",
        || async {
            let p = get(&client, &ns, "llama").await?;
            let a = gate(&p, "judge")?.analysis.clone()?;
            (a.outcome == "Pass").then_some(a)
        },
    )
    .await;
    eprintln!(
        "the equal version: {}",
        serde_json::to_string(&judged).unwrap()
    );
    let ttft = judged.metrics.iter().find(|m| m.name == "ttft").unwrap();
    assert_eq!(ttft.verdict, "Passed", "{judged:?}");
    assert!(
        ttft.canary_samples >= 8 && ttft.baseline_samples >= 8,
        "{judged:?}"
    );
    assert!(
        ttft.p_value.is_some() && ttft.interval.len() == 2,
        "{judged:?}"
    );
    let errors = judged.metrics.iter().find(|m| m.name == "errors").unwrap();
    assert!(errors.canary_samples >= 100, "{judged:?}");
    let p = wait_phase(&client, &ns, "llama", Phase::Stable, support::WAIT * 3).await;
    assert!(p.status.unwrap().failure.is_none());

    // Less than a request a minute (0.01 a second): inconclusive, then paused for a
    // human; never rolled back.
    set_components(
        &client,
        &ns,
        "llama",
        json!([llama(&ns, "vllm:0.7.2", &env("200", "0.01"))]),
    )
    .await;
    let p = wait_until(
        support::WAIT * 4,
        "paused on the inconclusive analysis",
        || async {
            let p = get(&client, &ns, "llama").await?;
            let s = p.status.as_ref()?;
            assert_ne!(
                s.phase,
                Phase::RolledBack,
                "rolled back for a lack of data: {:?}",
                s.failure
            );
            let paused = s.conditions.iter().any(|c| {
                c.type_ == "Paused" && c.status == "True" && c.reason == "GateInconclusive"
            });
            paused.then_some(p)
        },
    )
    .await;
    let s = p.status.unwrap();
    assert_eq!(s.phase, Phase::RollingOut);
    let judge = s.gates.iter().find(|g| g.name == "judge").unwrap();
    assert!(judge.awaiting_decision, "{judge:?}");
    let a = judge.analysis.as_ref().unwrap();
    assert_eq!(a.outcome, "Marginal", "{a:?}");
    assert!(
        a.metrics.iter().all(|m| m.verdict == "Inconclusive"),
        "{a:?}"
    );
}

/// The Deployment of the plan's baseline, when it exists: (replicas, the
/// labels of its pod template).
async fn baseline_deployment(
    client: &kube::Client,
    ns: &str,
    stable: &str,
) -> Option<(i32, std::collections::BTreeMap<String, String>)> {
    let api: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client.clone(), ns);
    let d = api
        .get_opt(&format!("llama-llama-{stable}-baseline"))
        .await
        .unwrap()?;
    let spec = d.spec?;
    Some((
        spec.replicas.unwrap_or(1),
        spec.template.metadata?.labels.unwrap_or_default(),
    ))
}

/// The pods of the namespace labelled as a baseline's.
async fn baseline_pods(client: &kube::Client, ns: &str) -> usize {
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client.clone(), ns);
    api.list(&kube::api::ListParams::default().labels("releaseplan.io/role=baseline"))
        .await
        .unwrap()
        .items
        .len()
}

#[tokio::test]
async fn with_a_baseline_the_judge_compares_with_fresh_stable_pods_that_exist_only_while_it_judges()
{
    let Harness { client, ns } = Harness::new("analysis-baseline").await;
    let _nodes = GpuNodes::add(&client, &ns, 2, 4, Some(104)).await;
    let dir = tempfile::tempdir().unwrap();
    let targets = dir.path().join("targets.json");
    let _servers = ModelServers::start(&client, &ns, Some(targets.clone()));
    let prometheus = Prometheus::start_file_sd(&targets);
    let _op = Operator::start(&ns, &[]).await;
    let env = |ttft: &'static str| [("TTFT_MS", ttft), ("LOAD_SECONDS", "1"), ("RPS", "20")];
    let with_baseline = |image: &str, ttft: &'static str| {
        let mut c = llama(&ns, image, &env(ttft));
        c["baseline"] = json!(true);
        c
    };
    let spec = json!({
        "components": [with_baseline("vllm:0.6.3", "50")],
        "strategy": {"steps": [{"setWeight": 50}, {"pause": {"duration": "10s"}}]},
        "health": {"gates": gates(&ns, &prometheus.url), "progressDeadlineSeconds": 300}
    });
    create(&client, &ns, &plan("llama", spec)).await;
    let p = wait_phase(&client, &ns, "llama", Phase::Stable, support::WAIT).await;
    let stable_hash = p.status.unwrap().components[0].stable_hash.clone().unwrap();
    assert!(
        baseline_deployment(&client, &ns, &stable_hash)
            .await
            .is_none(),
        "no baseline at rest"
    );

    // 30 % slower: the judge compares it with the baseline, which stands
    // beside it at its size, and fails it.
    set_components(
        &client,
        &ns,
        "llama",
        json!([with_baseline("vllm:0.7.0", "65")]),
    )
    .await;
    let seen = wait_until(
        support::WAIT * 3,
        "a judgement against the baseline",
        || async {
            // While the step runs: once the judge fails the canary, the
            // baseline is already going (to 0 pods) in the same moment.
            let p = get(&client, &ns, "llama").await?;
            let s = p.status.as_ref()?;
            let a = gate(&p, "judge")?.analysis.clone()?;
            let b = s.components[0].baseline.clone()?;
            let d = baseline_deployment(&client, &ns, &stable_hash).await?;
            (s.phase == Phase::RollingOut
                && b.replicas == 1
                && b.ready == 1
                && d.0 == 1
                && a.compared_with.as_deref() == Some(b.revision.as_str()))
            .then_some((a, b, d))
        },
    )
    .await;
    let (analysis, status, (replicas, labels)) = seen;
    eprintln!("judged against the baseline: {analysis:?} {status:?}");
    assert_eq!(status.revision, format!("{stable_hash}-baseline"));
    assert_eq!(replicas, 1, "as large as the canary at 50% of 2");
    assert_eq!(
        labels.get("releaseplan.io/revision"),
        Some(&format!("{stable_hash}-baseline"))
    );
    assert_eq!(
        labels.get("releaseplan.io/role").map(String::as_str),
        Some("baseline")
    );
    let p = wait_phase(&client, &ns, "llama", Phase::RolledBack, support::WAIT * 3).await;
    let failure = p.status.unwrap().failure.unwrap();
    eprintln!(
        "the slower version against the baseline: {}",
        failure.message
    );
    assert_eq!(failure.gate, "judge", "{failure:?}");
    // The Events say what the operator did, as the API server stores them
    // (published off the reconcile path: looked for until they are there).
    let want = [
        ("RolloutStarted", "StartRollout"),
        ("RollbackStarted", "StartRollback"),
    ];
    wait_until(
        support::WAIT,
        "the rollout's Events with their actions",
        || async {
            let actions: std::collections::BTreeSet<(String, String)> =
                kube::Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), &ns)
                    .list(
                        &kube::api::ListParams::default()
                            .fields("involvedObject.kind=ReleasePlan,involvedObject.name=llama"),
                    )
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .filter_map(|e| Some((e.reason?, e.action?)))
                    .collect();
            want.iter()
                .all(|(r, a)| actions.contains(&(r.to_string(), a.to_string())))
                .then_some(())
        },
    )
    .await;
    wait_until(
        support::WAIT,
        "the baseline gone after the rollback",
        || async {
            (baseline_deployment(&client, &ns, &stable_hash)
                .await
                .is_none()
                && baseline_pods(&client, &ns).await == 0)
                .then_some(())
        },
    )
    .await;

    // Equal: promoted; its baseline ran while it was judged, and is gone.
    set_components(
        &client,
        &ns,
        "llama",
        json!([with_baseline("vllm:0.7.1", "50")]),
    )
    .await;
    let ran = std::sync::atomic::AtomicBool::new(false);
    wait_until(support::WAIT * 3, "the equal version promoted", || async {
        let p = get(&client, &ns, "llama").await?;
        if baseline_pods(&client, &ns).await > 0 {
            ran.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        (p.status.as_ref()?.phase == Phase::Stable).then_some(())
    })
    .await;
    assert!(
        ran.load(std::sync::atomic::Ordering::Relaxed),
        "the baseline ran while the equal version was judged"
    );
    wait_until(
        support::WAIT,
        "the baseline gone after the promotion",
        || async {
            let p = get(&client, &ns, "llama").await?;
            (baseline_deployment(&client, &ns, &stable_hash)
                .await
                .is_none()
                && baseline_pods(&client, &ns).await == 0
                && p.status.as_ref()?.components[0].baseline.is_none())
            .then_some(())
        },
    )
    .await;
}
