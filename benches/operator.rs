//! Benchmarks of the operator against the local control plane (`make bench`).
//! Prints figures; asserts nothing about speed (a shared machine makes timed
//! assertions flaky).
//!
//! 1. Latency from a spec patch to the new revision Deployment existing, next
//!    to the round trip of a no-op patch on the same API server.
//! 2. Reconciles and API writes of one full canary rollout.
//! 3. Operator memory (RSS) and CPU time with 100 plans.
//! 4. Heap bytes per cached object, by kind, as the API server sends it and
//!    as the operator keeps it (trimmed: `src/controller/trim.rs`), measured
//!    on the real objects of those 100 plans with a counting allocator.
//!
//! The operator binary is `$RP_OPERATOR_BIN` (a release build in `make bench`).

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
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use releaseplan::api::{Phase, ReleasePlan, revision};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::fixtures::{self, faulty_template, template, web};
use support::operator::Operator;
use support::{cluster, crd, wait_until};

fn plan(name: &str, image: &str, replicas: i32, steps: Value) -> ReleasePlan {
    fixtures::plan(
        name,
        json!({"components": [web(image, replicas)], "strategy": {"steps": steps}}),
    )
}

fn hash(image: &str) -> String {
    let t: PodTemplateSpec = serde_json::from_value(template(image)).expect("template");
    revision::template_hash(&t)
}

/// The operator of `$RP_OPERATOR_BIN` (else the debug build), logging warnings only.
async fn start_operator(ns: &str) -> Operator {
    let mut launcher = Operator::launcher(ns).rust_log("warn");
    if let Ok(bin) = std::env::var("RP_OPERATOR_BIN") {
        launcher = launcher.binary(bin);
    }
    launcher.start().await
}

/// Resident memory in KiB and CPU seconds (user + system) of the operator.
fn usage(op: &Operator) -> (u64, f64) {
    let pid = op.pid().expect("the operator runs");
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:").map(|v| {
                v.trim()
                    .trim_end_matches(" kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0)
            })
        })
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = fields
        .get(11)
        .and_then(|u| u.parse::<f64>().ok())
        .unwrap_or(0.0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0);
    (rss, ticks / 100.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{what}: n={} median={:.1}ms p99={:.1}ms max={:.1}ms",
        samples.len(),
        percentile(&samples, 0.5).as_secs_f64() * 1000.0,
        percentile(&samples, 0.99).as_secs_f64() * 1000.0,
        samples.last().copied().unwrap_or_default().as_secs_f64() * 1000.0
    );
}

async fn wait_stable(api: &Api<ReleasePlan>, name: &str) {
    wait_until(
        Duration::from_secs(120),
        &format!("{name} Stable"),
        || async {
            let p = api.get(name).await.ok()?;
            let s = p.status?;
            (s.phase == Phase::Stable && s.observed_generation == p.metadata.generation)
                .then_some(())
        },
    )
    .await;
}

async fn latency(client: &Client, patches: usize) {
    let ns = cluster::test_namespace(client, "bench-latency").await;
    let _op = start_operator(&ns).await;
    let plans: Api<ReleasePlan> = Api::namespaced(client.clone(), &ns);
    plans
        .create(&PostParams::default(), &plan("shop", "img:0", 1, json!([])))
        .await
        .expect("create");
    wait_stable(&plans, "shop").await;

    // Creation times of Deployments, seen by a client-side watch.
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen2 = seen.clone();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let watch = tokio::spawn(async move {
        let mut s = watcher(deployments, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Some(Ok(d)) = s.next().await {
            seen2
                .lock()
                .expect("lock")
                .entry(d.name_any())
                .or_insert_with(Instant::now);
        }
    });
    let mut samples = Vec::new();
    for i in 1..=patches {
        let image = format!("img:{i}");
        let name = format!("shop-web-{}", hash(&image));
        let patch = json!({"spec": {"components": [{"name": "web", "replicas": 1, "template": template(&image)}]}});
        let start = Instant::now();
        plans
            .patch("shop", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch");
        let created = wait_until(
            Duration::from_secs(60),
            "the new revision Deployment",
            || async { seen.lock().ok()?.get(&name).copied() },
        )
        .await;
        samples.push(created.saturating_duration_since(start));
        wait_stable(&plans, "shop").await;
    }
    watch.abort();
    report("spec patch -> new revision Deployment created", samples);

    // The same API server's round trip for a patch that changes nothing.
    let noop = json!({"metadata": {"labels": {"bench": "noop"}}});
    let mut samples = Vec::new();
    for _ in 0..patches {
        let start = Instant::now();
        plans
            .patch("shop", &PatchParams::default(), &Patch::Merge(&noop))
            .await
            .expect("patch");
        samples.push(start.elapsed());
    }
    report("no-op patch round trip (for comparison)", samples);
}

async fn rollout_cost(client: &Client) {
    let ns = cluster::test_namespace(client, "bench-rollout").await;
    let op = start_operator(&ns).await;
    let plans: Api<ReleasePlan> = Api::namespaced(client.clone(), &ns);
    let steps = json!([{"setWeight": 25}, {"setWeight": 50}, {"setWeight": 75}]);
    plans
        .create(&PostParams::default(), &plan("shop", "img:1", 4, steps))
        .await
        .expect("create");
    wait_stable(&plans, "shop").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let runs0 = op.counter("releaseplan_reconcile_runs_total").await;
    let writes0 = op.counter("releaseplan_api_writes_total").await;
    let status0 = op
        .counter("releaseplan_api_writes_total{operation=\"status\"}")
        .await;
    let apply0 = op
        .counter("releaseplan_api_writes_total{operation=\"apply\"}")
        .await;
    let start = Instant::now();
    let patch = json!({"spec": {"components": [{"name": "web", "replicas": 4, "template": template("img:2")}]}});
    plans
        .patch("shop", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    wait_stable(&plans, "shop").await;
    let took = start.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!(
        "one rollout (4 replicas, 3 steps + final): {:.1}s, {} reconciles, {} API writes ({} Deployment applies, {} status writes, rest events/finalizer)",
        took.as_secs_f64(),
        op.counter("releaseplan_reconcile_runs_total").await - runs0,
        op.counter("releaseplan_api_writes_total").await - writes0,
        op.counter("releaseplan_api_writes_total{operation=\"apply\"}")
            .await
            - apply0,
        op.counter("releaseplan_api_writes_total{operation=\"status\"}")
            .await
            - status0,
    );
}

#[global_allocator]
static ALLOC: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Heap bytes that `make` leaves allocated (what it built and keeps).
fn retained<T>(make: impl FnOnce() -> T) -> (T, usize) {
    let region = stats_alloc::Region::new(ALLOC);
    let value = make();
    let c = region.change();
    (value, c.bytes_allocated.saturating_sub(c.bytes_deallocated))
}

/// Bytes per object of kind `K` in `ns` (matching `selector`), as decoded
/// from the API server's JSON into k8s-openapi's type `K`, and as the
/// operator caches it: decoded into its cache type `C`, then `trim`med.
/// (objects, decoded, cached, the cache type's own size: a cache keeps each
/// object whole in an `Arc`, so that part stays whatever the trim drops).
async fn bytes_per_object<K, C>(
    client: &Client,
    ns: &str,
    selector: &str,
    trim: fn(&mut C),
) -> (usize, f64, f64, usize)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Clone
        + std::fmt::Debug,
    C: serde::de::DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let lp = kube::api::ListParams::default().labels(selector);
    let raw: Vec<serde_json::Value> = api
        .list(&lp)
        .await
        .expect("list")
        .items
        .iter()
        .map(|o| serde_json::to_value(o).expect("json"))
        .collect();
    let n = raw.len().max(1);
    let (decoded, raw_bytes) = retained(|| {
        raw.iter()
            .map(|v| serde_json::from_value::<K>(v.clone()).expect("decode"))
            .collect::<Vec<K>>()
    });
    drop(decoded);
    let (trimmed, trimmed_bytes) = retained(|| {
        raw.iter()
            .map(|v| {
                let mut o = serde_json::from_value::<C>(v.clone()).expect("decode");
                trim(&mut o);
                o
            })
            .collect::<Vec<C>>()
    });
    drop(trimmed);
    #[allow(clippy::cast_precision_loss)]
    let per = |b: usize| b as f64 / n as f64;
    (
        raw.len(),
        per(raw_bytes),
        per(trimmed_bytes),
        std::mem::size_of::<C>(),
    )
}

/// Prints the cache bytes per object of the plans in `ns`, by kind.
async fn cache_bytes(client: &Client, ns: &str) {
    use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
    use k8s_openapi::api::core::v1::Pod;
    use releaseplan::api::cached::{CachedDeployment, CachedPod, CachedRevision};
    use releaseplan::controller::trim;
    // The operator's own objects carry the plan label.
    const PLAN: &str = releaseplan::api::LABEL_PLAN;
    let rows = [
        (
            "ReleasePlan",
            bytes_per_object::<ReleasePlan, releaseplan::api::cached::CachedPlan>(
                client,
                ns,
                "",
                trim::plan,
            )
            .await,
        ),
        (
            "Deployment",
            bytes_per_object::<Deployment, CachedDeployment>(client, ns, PLAN, trim::deployment)
                .await,
        ),
        (
            "Pod",
            bytes_per_object::<Pod, CachedPod>(client, ns, PLAN, trim::pod).await,
        ),
        (
            "ControllerRevision",
            bytes_per_object::<ControllerRevision, CachedRevision>(
                client,
                ns,
                PLAN,
                |_: &mut CachedRevision| {},
            )
            .await,
        ),
    ];
    for (kind, (n, raw, trimmed, inline)) in rows {
        println!(
            "cache bytes per {kind}: {raw:.0} as decoded, {trimmed:.0} as cached ({:.0}%; {inline} of it the struct itself), over {n} objects",
            100.0 * trimmed / raw.max(1.0)
        );
    }
}

async fn many_plans(client: &Client, n: usize) {
    let ns = cluster::test_namespace(client, "bench-many").await;
    let op = start_operator(&ns).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (idle_rss, _) = usage(&op);
    let plans: Api<ReleasePlan> = Api::namespaced(client.clone(), &ns);
    let start = Instant::now();
    for i in 0..n {
        plans
            .create(
                &PostParams::default(),
                &plan(&format!("app-{i}"), "img:1", 1, json!([])),
            )
            .await
            .expect("create");
    }
    wait_until(Duration::from_secs(600), "every plan Stable", || async {
        let list = plans.list(&Default::default()).await.ok()?;
        let stable = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().is_some_and(|s| s.phase == Phase::Stable))
            .count();
        (stable == n).then_some(())
    })
    .await;
    let took = start.elapsed();
    let (rss, cpu) = usage(&op);
    println!(
        "{n} plans (first release each): all Stable in {:.1}s; operator RSS {} KiB idle, {} KiB with {n} plans; CPU {:.2}s in all",
        took.as_secs_f64(),
        idle_rss,
        rss,
        cpu
    );
    // Steady state: no work while nothing changes.
    let (_, cpu0) = usage(&op);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (rss2, cpu1) = usage(&op);
    println!(
        "steady state with {n} plans: {:.3}s CPU over 10s, RSS {} KiB",
        cpu1 - cpu0,
        rss2
    );
    cache_bytes(client, &ns).await;
}

/// Time from the first crash-looping pod of a new revision to the rollback
/// being complete (phase RolledBack), next to the progress deadline.
async fn rollback_latency(client: &Client, runs: usize) {
    use k8s_openapi::api::core::v1::Pod;
    let ns = cluster::test_namespace(client, "bench-rollback").await;
    let _op = start_operator(&ns).await;
    let plans: Api<ReleasePlan> = Api::namespaced(client.clone(), &ns);
    let steps = json!([{"setWeight": 34}, {"pause": {"duration": "60s"}}]);
    let mut p = plan("shop", "good:0", 3, steps);
    p.spec.health.progress_deadline_seconds = Some(600);
    plans
        .create(&PostParams::default(), &p)
        .await
        .expect("create");
    wait_stable(&plans, "shop").await;

    // First time a pod of each revision was seen waiting in CrashLoopBackOff.
    let crashing: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen = crashing.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let watch = tokio::spawn(async move {
        let mut s = watcher(pods, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Some(Ok(pod)) = s.next().await {
            let waiting = pod
                .status
                .as_ref()
                .and_then(|st| st.container_statuses.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.state
                            .as_ref()
                            .and_then(|s| s.waiting.as_ref())
                            .and_then(|w| w.reason.as_deref())
                            == Some("CrashLoopBackOff")
                    })
                });
            if waiting && let Some(rev) = pod.labels().get("releaseplan.io/revision") {
                seen.lock()
                    .expect("lock")
                    .entry(rev.clone())
                    .or_insert_with(Instant::now);
            }
        }
    });
    let mut samples = Vec::new();
    for i in 1..=runs {
        let bad = faulty_template(&format!("bad:{i}"), "crash-loop");
        let bad_hash = {
            let t: PodTemplateSpec = serde_json::from_value(bad.clone()).expect("template");
            revision::template_hash(&t)
        };
        let patch =
            json!({"spec": {"components": [{"name": "web", "replicas": 3, "template": bad}]}});
        plans
            .patch("shop", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch");
        let rolled_back = wait_until(Duration::from_secs(120), "RolledBack", || async {
            let p = plans.get("shop").await.ok()?;
            let s = p.status?;
            (s.phase == Phase::RolledBack && s.observed_generation == p.metadata.generation)
                .then(Instant::now)
        })
        .await;
        let first_crash = crashing.lock().expect("lock").get(&bad_hash).copied();
        match first_crash {
            Some(t) => samples.push(rolled_back.saturating_duration_since(t)),
            None => println!("run {i}: rolled back before any pod was seen crash-looping"),
        }
        // Back to a good revision for the next run.
        let patch = json!({"spec": {"components": [{"name": "web", "replicas": 3, "template": template(&format!("good:{i}"))}]}});
        plans
            .patch("shop", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch");
        wait_stable(&plans, "shop").await;
    }
    watch.abort();
    report(
        "first crash-looping pod -> rollback complete (progress deadline 600s)",
        samples,
    );
}

#[tokio::main]
async fn main() {
    // `cargo test --all-targets` also builds and runs benches without `--bench`.
    if !std::env::args().any(|a| a == "--bench") {
        println!("operator benchmark: run with `make bench` (cargo bench --bench operator)");
        return;
    }
    let client = cluster::client().await;
    crd::install(&client).await;
    let patches: usize = std::env::var("RP_BENCH_PATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let plans: usize = std::env::var("RP_BENCH_PLANS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let runs: usize = std::env::var("RP_BENCH_ROLLBACKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    rollback_latency(&client, runs).await;
    latency(&client, patches).await;
    rollout_cost(&client).await;
    many_plans(&client, plans).await;
}
