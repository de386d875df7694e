//! Soak benchmark (`make bench-soak`, outside `make test` and CI): the
//! operator kept busy for an hour (`RP_SOAK_MINUTES`, 60), to see whether
//! anything it holds grows without bound.
//!
//! `RP_SOAK_PLANS` (10) slots run side by side, each in a loop: create a plan
//! (one component of 2 replicas, steps setWeight 50 / pause 2s), wait Stable;
//! roll it out to a new image, wait Stable; roll out a version whose pods
//! crash-loop (kwok's fault annotation), wait RolledBack; delete the plan and
//! wait until it is gone; then again under a new name. The slots start a few
//! seconds apart, so they are in different phases at any moment. A slow plan
//! never fails the run: each wait gives up after 5 minutes, counts a timeout
//! and moves on to the deletion.
//!
//! Every minute one line: the operator's RSS (VmRSS) and open file
//! descriptors (/proc), its gauges `releaseplan_cached_objects` (summed, and
//! per resource) and `releaseplan_plan_memory_entries` ("absent" when the
//! operator does not export them), the plans on the cluster, and the plans
//! created and deleted, rollouts and rollbacks so far.
//!
//! The verdict (non-zero exit when it fails):
//! - trend, with at least 6 samples: the first third of the samples is
//!   warm-up; RSS and fds fail when the last third's minimum is above the
//!   middle third's maximum by more than a tolerance (RSS: 10% or 3 MiB,
//!   whichever is larger; fds: 5);
//! - end state: every plan deleted, the objects they owned gone, then 30
//!   seconds: `releaseplan_cached_objects` and
//!   `releaseplan_plan_memory_entries` must both be exactly 0 (and a family
//!   absent from every sample fails);
//! - the operator ran to the end, and at least one plan went the whole cycle.
//!
//! It ends with the samples as a markdown table, for docs/benchmarks/.
//! The operator binary is `$RP_OPERATOR_BIN` (a release build in `make bench-soak`).

// Bench code, like test code, may unwrap, expect and panic (the lint policy of Cargo.toml).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic
)]

#[path = "../tests/it/support/mod.rs"]
mod support;

use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use releaseplan::api::{LABEL_PLAN, Phase, ReleasePlan};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::fixtures::{faulty_template, plan, web, web_with};
use support::operator::{Operator, sum_metric};
use support::{cluster, crd};

/// How long one step of a plan (a phase, a deletion) may take before it
/// counts as a timeout.
const STEP_TIMEOUT: Duration = Duration::from_secs(300);
/// How often a slot reads its plan while waiting.
const POLL: Duration = Duration::from_millis(500);
/// Seconds between the starts of two slots.
const STAGGER: Duration = Duration::from_secs(3);
/// After every plan and its objects are gone, the wait before the end state is read.
const SETTLE: Duration = Duration::from_secs(30);
/// Replicas of every plan's one component.
const REPLICAS: i32 = 2;
/// The fewest samples for the trend check (a third each of warm-up, middle, last).
const TREND_MIN_SAMPLES: usize = 6;
/// Tolerances of the trend check.
const RSS_TOLERANCE_SHARE: f64 = 0.10;
const RSS_TOLERANCE_MIN_KIB: f64 = 3.0 * 1024.0;
const FDS_TOLERANCE: f64 = 5.0;

const CACHED: &str = "releaseplan_cached_objects";
const MEMORY: &str = "releaseplan_plan_memory_entries";

/// The environment variable `key` parsed, or `default` when unset; panics
/// when it is set but does not parse.
fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    match std::env::var(key) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{key}={v}: not a number")),
        _ => default,
    }
}

/// What the slots did so far; read by the minute lines and the summary.
#[derive(Default)]
struct Counters {
    created: AtomicU64,
    deleted: AtomicU64,
    rollouts: AtomicU64,
    rollbacks: AtomicU64,
    /// Plans that went the whole cycle, deletion included.
    cycles: AtomicU64,
    /// Waits that gave up, by what they waited for.
    timeouts: Mutex<BTreeMap<&'static str, u64>>,
    /// Waits that ended in another phase than the one waited for, by what.
    unexpected: Mutex<BTreeMap<&'static str, u64>>,
    /// API calls that failed, by call.
    errors: Mutex<BTreeMap<&'static str, u64>>,
}

fn bump(map: &Mutex<BTreeMap<&'static str, u64>>, what: &'static str) {
    *map.lock().expect("lock").entry(what).or_default() += 1;
}

fn total(map: &Mutex<BTreeMap<&'static str, u64>>) -> u64 {
    map.lock().expect("lock").values().sum()
}

/// `none`, or `what n, what n`.
fn listed(map: &Mutex<BTreeMap<&'static str, u64>>) -> String {
    let map = map.lock().expect("lock");
    if map.is_empty() {
        return "none".to_string();
    }
    map.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Counters {
    fn line(&self) -> String {
        format!(
            "plans created {}, deleted {}, rollouts {}, rollbacks {}, full cycles {}, timeouts {}",
            self.created.load(Ordering::Relaxed),
            self.deleted.load(Ordering::Relaxed),
            self.rollouts.load(Ordering::Relaxed),
            self.rollbacks.load(Ordering::Relaxed),
            self.cycles.load(Ordering::Relaxed),
            total(&self.timeouts),
        )
    }
}

/// How a wait for a phase ended, when not in that phase.
enum Missed {
    /// Still not there after [`STEP_TIMEOUT`]: what was seen last.
    Timeout(String),
    /// Settled in another phase (or the plan is gone): no use waiting.
    Other(String),
}

/// Waits until plan `name` is in `want` at its current generation.
async fn wait_phase(api: &Api<ReleasePlan>, name: &str, want: Phase) -> Result<(), Missed> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let last = match api.get_opt(name).await {
            Ok(Some(p)) => {
                let generation = p.metadata.generation;
                match p.status {
                    Some(s) if s.observed_generation == generation => {
                        if s.phase == want {
                            return Ok(());
                        }
                        let seen = format!("phase {} at generation {generation:?}", s.phase);
                        if matches!(s.phase, Phase::Stable | Phase::RolledBack) {
                            return Err(Missed::Other(seen));
                        }
                        seen
                    }
                    Some(s) => format!(
                        "phase {}, generation {generation:?} not observed yet (observed {:?})",
                        s.phase, s.observed_generation
                    ),
                    None => "no status yet".to_string(),
                }
            }
            Ok(None) => return Err(Missed::Other("the plan is gone".to_string())),
            Err(e) => format!("cannot read it: {e}"),
        };
        if Instant::now() >= deadline {
            return Err(Missed::Timeout(last));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One slot's plan through one cycle: the stages after the creation, each
/// counted, up to the first that does not end as expected.
struct Cycle<'a> {
    api: &'a Api<ReleasePlan>,
    name: &'a str,
    slot: usize,
    counters: &'a Counters,
}

impl Cycle<'_> {
    /// Waits for `want`; counts and prints a miss.
    async fn reach(&self, want: Phase, what: &'static str) -> bool {
        match wait_phase(self.api, self.name, want).await {
            Ok(()) => true,
            Err(Missed::Timeout(last)) => {
                bump(&self.counters.timeouts, what);
                println!(
                    "slot {}: {}: timed out after {}s waiting for {what}; last: {last}",
                    self.slot,
                    self.name,
                    STEP_TIMEOUT.as_secs()
                );
                false
            }
            Err(Missed::Other(last)) => {
                bump(&self.counters.unexpected, what);
                println!(
                    "slot {}: {}: waiting for {what}, got {last}",
                    self.slot, self.name
                );
                false
            }
        }
    }

    /// Replaces the plan's component list; counts and prints a failure.
    async fn set_components(&self, components: Value) -> bool {
        let patch = json!({"spec": {"components": components}});
        match self
            .api
            .patch(self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => true,
            Err(e) => {
                bump(&self.counters.errors, "patch");
                println!("slot {}: {}: cannot patch: {e}", self.slot, self.name);
                false
            }
        }
    }

    /// Stable, then a new image rolled out, then a crash-looping one rolled back.
    async fn releases(&self) -> bool {
        let image = |tag: &str| format!("registry.example/soak:{tag}");
        if !self.reach(Phase::Stable, "first release Stable").await {
            return false;
        }
        if !self
            .set_components(json!([web(&image("2"), REPLICAS)]))
            .await
            || !self.reach(Phase::Stable, "rollout Stable").await
        {
            return false;
        }
        self.counters.rollouts.fetch_add(1, Ordering::Relaxed);
        let bad = faulty_template(&image("3-crash"), "crash-loop");
        if !self.set_components(json!([web_with(bad, REPLICAS)])).await
            || !self.reach(Phase::RolledBack, "RolledBack").await
        {
            return false;
        }
        self.counters.rollbacks.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Deletes the plan and waits until it is gone.
    async fn delete(&self) -> bool {
        match self.api.delete(self.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                bump(&self.counters.errors, "delete");
                println!("slot {}: {}: cannot delete: {e}", self.slot, self.name);
                return false;
            }
        }
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            if let Ok(None) = self.api.get_opt(self.name).await {
                self.counters.deleted.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            if Instant::now() >= deadline {
                bump(&self.counters.timeouts, "deleted");
                println!(
                    "slot {}: {}: still there {}s after its deletion; going on without it",
                    self.slot,
                    self.name,
                    STEP_TIMEOUT.as_secs()
                );
                return false;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// A slot: plan after plan, `soak-<slot>-<n>`, until aborted.
async fn slot(api: Api<ReleasePlan>, slot: usize, counters: Arc<Counters>) {
    tokio::time::sleep(STAGGER * u32::try_from(slot).unwrap_or(0)).await;
    for n in 0u64.. {
        let name = format!("soak-{slot}-{n}");
        let spec = json!({
            "components": [web("registry.example/soak:1", REPLICAS)],
            "strategy": {"steps": [{"setWeight": 50}, {"pause": {"duration": "2s"}}]},
        });
        if let Err(e) = api.create(&PostParams::default(), &plan(&name, spec)).await {
            bump(&counters.errors, "create");
            println!("slot {slot}: {name}: cannot create: {e}");
            tokio::time::sleep(Duration::from_secs(5)).await;
            continue;
        }
        counters.created.fetch_add(1, Ordering::Relaxed);
        let cycle = Cycle {
            api: &api,
            name: &name,
            slot,
            counters: &counters,
        };
        let released = cycle.releases().await;
        if cycle.delete().await && released {
            counters.cycles.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The operator's resident memory in KiB, while it runs (a process that
/// exited, a zombie, has no VmRSS).
fn rss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// The operator's open file descriptors.
fn fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// Whether a metric family is in the metrics text: its `# TYPE` line or a sample.
fn family_present(text: &str, name: &str) -> bool {
    text.lines().any(|l| {
        let l = l.strip_prefix("# TYPE ").unwrap_or(l);
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
    })
}

/// A family's samples summed by the value of the first of `labels` they
/// carry (the whole label set when none; `""` when they have no labels).
fn by_label(text: &str, name: &str, labels: &[&str]) -> BTreeMap<String, f64> {
    let keys: Vec<String> = labels.iter().map(|l| format!("{l}=\"")).collect();
    let mut out = BTreeMap::new();
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = l.strip_prefix(name) else {
            continue;
        };
        let (set, value) = if let Some(labelled) = rest.strip_prefix('{') {
            match labelled.split_once("} ") {
                Some(pair) => pair,
                None => continue,
            }
        } else if let Some(value) = rest.strip_prefix(' ') {
            ("", value)
        } else {
            continue;
        };
        let Some(value) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        let which = keys
            .iter()
            .find_map(|key| {
                set.split(',')
                    .find_map(|kv| kv.strip_prefix(key.as_str())?.strip_suffix('"'))
            })
            .unwrap_or(set);
        *out.entry(which.to_string()).or_default() += value;
    }
    out
}

/// One reading of the operator.
struct Sample {
    /// `1`, `2`... (minutes since the start), or `end`.
    label: String,
    rss_kib: Option<u64>,
    fds: Option<usize>,
    /// Sum and per resource; None when the family is absent.
    cached: Option<(f64, BTreeMap<String, f64>)>,
    /// None when the gauge is absent.
    memory: Option<f64>,
    /// ReleasePlans on the cluster (None: the list failed).
    plans: Option<usize>,
    /// The metrics could not be read at all.
    scrape_failed: bool,
}

impl Sample {
    async fn take(label: String, op: &Operator, plans: &Api<ReleasePlan>) -> Sample {
        let pid = op.pid().expect("the operator was started");
        let text = op.metrics().await;
        let cached = family_present(&text, CACHED).then(|| {
            (
                sum_metric(&text, CACHED),
                by_label(&text, CACHED, &["resource", "kind"]),
            )
        });
        let memory = family_present(&text, MEMORY).then(|| sum_metric(&text, MEMORY));
        Sample {
            label,
            rss_kib: rss_kib(pid),
            fds: fds(pid),
            cached,
            memory,
            plans: plans
                .list_metadata(&ListParams::default())
                .await
                .ok()
                .map(|l| l.items.len()),
            scrape_failed: text.is_empty(),
        }
    }

    fn rss(&self) -> String {
        self.rss_kib
            .map_or("n/a".to_string(), |k| format!("{:.1}", k as f64 / 1024.0))
    }

    fn fds(&self) -> String {
        self.fds.map_or("n/a".to_string(), |n| n.to_string())
    }

    fn cached_total(&self) -> String {
        self.cached
            .as_ref()
            .map_or("absent".to_string(), |(sum, _)| format!("{sum}"))
    }

    fn memory(&self) -> String {
        self.memory.map_or("absent".to_string(), |m| format!("{m}"))
    }

    fn plans(&self) -> String {
        self.plans.map_or("n/a".to_string(), |n| n.to_string())
    }

    /// The minute line (without the counters).
    fn line(&self) -> String {
        let cached = match &self.cached {
            Some((sum, resources)) if !resources.is_empty() => format!(
                "{sum} ({})",
                resources
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            _ => self.cached_total(),
        };
        format!(
            "RSS {} MiB, fds {}, cached objects {cached}, memory entries {}, plans on the cluster {}{}",
            self.rss(),
            self.fds(),
            self.memory(),
            self.plans(),
            if self.scrape_failed {
                " (/metrics did not answer)"
            } else {
                ""
            }
        )
    }

    fn row(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {} |",
            self.label,
            self.rss(),
            self.fds(),
            self.cached_total(),
            self.memory(),
            self.plans()
        )
    }
}

/// The trend check of one series: `Ok` (what was compared) or `Err` (why it
/// grows); `None` when there are too few samples.
fn trend(
    series: &str,
    values: &[f64],
    tolerance: impl Fn(f64) -> f64,
    show: impl Fn(f64) -> String,
) -> Option<Result<String, String>> {
    let n = values.len();
    if n < TREND_MIN_SAMPLES {
        return None;
    }
    let third = n / 3;
    let middle = &values[n - 2 * third..n - third];
    let last = &values[n - third..];
    let middle_max = middle.iter().copied().fold(f64::MIN, f64::max);
    let last_min = last.iter().copied().fold(f64::MAX, f64::min);
    let tol = tolerance(middle_max);
    let figures = format!(
        "last third's minimum {} vs middle third's maximum {} (tolerance {}; {} samples, the first {} warm-up)",
        show(last_min),
        show(middle_max),
        show(tol),
        n,
        n - 2 * third
    );
    Some(if last_min > middle_max + tol {
        Err(format!(
            "{series} grows without bound: {figures}: above it by {}",
            show(last_min - middle_max)
        ))
    } else {
        Ok(format!("{series} bounded: {figures}"))
    })
}

/// Objects of kind `K` in `ns` that carry the plan label (what the operator caches).
async fn labelled<K>(client: &Client, ns: &str) -> usize
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), ns)
        .list_metadata(&ListParams::default().labels(LABEL_PLAN))
        .await
        .map_or(usize::MAX, |l| l.items.len())
}

/// Objects left that the operator watches: `kind n` for each kind with some.
async fn leftovers(client: &Client, ns: &str) -> Vec<String> {
    let counts = [
        ("Deployment", labelled::<Deployment>(client, ns).await),
        ("Pod", labelled::<Pod>(client, ns).await),
        (
            "ControllerRevision",
            labelled::<ControllerRevision>(client, ns).await,
        ),
        ("Service", labelled::<Service>(client, ns).await),
        ("Job", labelled::<Job>(client, ns).await),
    ];
    counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| {
            if *n == usize::MAX {
                format!("{k} (cannot list)")
            } else {
                format!("{k} {n}")
            }
        })
        .collect()
}

/// Deletes every plan in the namespace and waits until they, and the objects
/// they owned, are gone. Returns what is still there (empty: nothing).
async fn delete_everything(client: &Client, ns: &str, plans: &Api<ReleasePlan>) -> Vec<String> {
    if let Ok(list) = plans.list_metadata(&ListParams::default()).await {
        for p in list.items {
            let _ = plans.delete(&p.name_any(), &DeleteParams::default()).await;
        }
    }
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let mut left = Vec::new();
        match plans.list_metadata(&ListParams::default()).await {
            Ok(l) if l.items.is_empty() => {}
            Ok(l) => left.push(format!(
                "ReleasePlan {} ({})",
                l.items.len(),
                l.items
                    .iter()
                    .map(ResourceExt::name_any)
                    .collect::<Vec<_>>()
                    .join(" ")
            )),
            Err(e) => left.push(format!("ReleasePlan (cannot list: {e})")),
        }
        left.extend(leftovers(client, ns).await);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::main]
async fn main() {
    // `cargo test --all-targets` also builds and runs benches without `--bench`.
    if !std::env::args().any(|a| a == "--bench") {
        println!("soak benchmark: run with `make bench-soak` (cargo bench --bench soak)");
        return;
    }
    let minutes: f64 = env_or("RP_SOAK_MINUTES", 60.0);
    let slots: usize = env_or("RP_SOAK_PLANS", 10);
    assert!(
        minutes > 0.0 && slots > 0,
        "RP_SOAK_MINUTES and RP_SOAK_PLANS must be above 0"
    );
    let duration = Duration::from_secs_f64(minutes * 60.0);

    let client = cluster::client().await;
    crd::install(&client).await;
    let ns = cluster::test_namespace(&client, "soak").await;
    let mut launcher = Operator::launcher(&ns).rust_log("warn");
    if let Ok(bin) = std::env::var("RP_OPERATOR_BIN") {
        launcher = launcher.binary(bin);
    }
    let op = launcher.start().await;
    let pid = op.pid().expect("the operator runs");
    let plans: Api<ReleasePlan> = Api::namespaced(client.clone(), &ns);
    println!(
        "soak: {minutes} minutes, {slots} plans at a time in namespace {ns}; operator pid {pid}, log {}",
        op.log.display()
    );

    let counters = Arc::new(Counters::default());
    let start = Instant::now();
    let tasks: Vec<_> = (0..slots)
        .map(|i| tokio::spawn(slot(plans.clone(), i, counters.clone())))
        .collect();

    let mut failures: Vec<String> = Vec::new();
    let mut samples: Vec<Sample> = Vec::new();
    for minute in 1u64.. {
        let at = start + Duration::from_secs(60 * minute);
        if at > start + duration {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        let s = Sample::take(minute.to_string(), &op, &plans).await;
        println!("minute {minute}: {}; {}", s.line(), counters.line());
        let gone = s.rss_kib.is_none();
        samples.push(s);
        if gone {
            failures.push(format!(
                "the operator stopped running before minute {minute}; the end of its log:\n{}",
                tail(&op.log_text(), 40)
            ));
            break;
        }
    }
    if failures.is_empty() {
        tokio::time::sleep_until((start + duration).into()).await;
    }

    // The end: the slots stop where they are, every plan is deleted.
    for t in &tasks {
        t.abort();
    }
    for t in tasks {
        if let Err(e) = t.await
            && !e.is_cancelled()
        {
            failures.push(format!("a slot failed: {e}"));
        }
    }
    println!(
        "{:.1} minutes: stopping the slots; deleting every plan",
        start.elapsed().as_secs_f64() / 60.0
    );
    let left = delete_everything(&client, &ns, &plans).await;
    if !left.is_empty() {
        println!(
            "still on the cluster {}s after the deletions: {}",
            STEP_TIMEOUT.as_secs(),
            left.join(", ")
        );
        failures.push(format!(
            "not everything was gone {}s after deleting every plan: {}",
            STEP_TIMEOUT.as_secs(),
            left.join(", ")
        ));
    }
    println!(
        "every plan deleted; waiting {}s before the end state",
        SETTLE.as_secs()
    );
    tokio::time::sleep(SETTLE).await;
    let end = Sample::take("end".to_string(), &op, &plans).await;
    println!(
        "end (every plan deleted, +{}s): {}",
        SETTLE.as_secs(),
        end.line()
    );

    // The verdict.
    let mut passed: Vec<String> = Vec::new();
    if end.rss_kib.is_none() && !failures.iter().any(|f| f.contains("stopped running")) {
        failures.push(format!(
            "the operator stopped running before the end; the end of its log:\n{}",
            tail(&op.log_text(), 40)
        ));
    }
    let rss: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.rss_kib.map(|k| k as f64))
        .collect();
    let fd: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.fds.map(|n| n as f64))
        .collect();
    let checks = [
        trend(
            "RSS",
            &rss,
            |max| (max * RSS_TOLERANCE_SHARE).max(RSS_TOLERANCE_MIN_KIB),
            |k| format!("{:.1} MiB", k / 1024.0),
        ),
        trend("fds", &fd, |_| FDS_TOLERANCE, |n| format!("{n}")),
    ];
    if checks.iter().any(Option::is_none) {
        println!(
            "trend check skipped: it needs at least {TREND_MIN_SAMPLES} samples (one a minute), this run took {}; only the end state is checked",
            samples.len()
        );
    }
    for check in checks.into_iter().flatten() {
        match check {
            Ok(m) => passed.push(m),
            Err(m) => failures.push(m),
        }
    }
    let all = samples.iter().chain(std::iter::once(&end));
    for (name, present, at_end) in [
        (
            CACHED,
            all.clone().any(|s| s.cached.is_some()),
            end.cached.as_ref().map(|(sum, _)| *sum),
        ),
        (MEMORY, all.clone().any(|s| s.memory.is_some()), end.memory),
    ] {
        match (present, at_end) {
            (false, _) => failures.push(format!(
                "{name} was absent from the operator's /metrics all run long: is the operator built with it?"
            )),
            (true, None) => failures.push(format!(
                "{name} was absent from /metrics at the end: the end state cannot be checked"
            )),
            (true, Some(v)) if v != 0.0 => failures.push(format!(
                "{name} is {v}, not 0, {}s after every plan was deleted{}",
                SETTLE.as_secs(),
                match &end.cached {
                    Some((_, resources)) if name == CACHED => format!(
                        " ({})",
                        resources
                            .iter()
                            .filter(|(_, v)| **v != 0.0)
                            .map(|(k, v)| format!("{k} {v}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    _ => String::new(),
                }
            )),
            (true, Some(_)) => passed.push(format!(
                "{name} is 0 once every plan is deleted (+{}s)",
                SETTLE.as_secs()
            )),
        }
    }
    if counters.cycles.load(Ordering::Relaxed) == 0 {
        failures.push(
            "no plan went the whole cycle (Stable, rollout, rollback, deleted): the soak exercised nothing"
                .to_string(),
        );
    }

    // The summary.
    println!();
    println!(
        "## Soak: {minutes} minutes, {slots} plans at a time ({:.1} minutes in all)",
        start.elapsed().as_secs_f64() / 60.0
    );
    println!();
    println!("| minute | RSS MiB | fds | cached objects | memory entries | plans in flight |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for s in samples.iter().chain(std::iter::once(&end)) {
        println!("{}", s.row());
    }
    println!();
    println!("{}", counters.line());
    println!("timeouts: {}", listed(&counters.timeouts));
    println!("unexpected phases: {}", listed(&counters.unexpected));
    println!("API errors: {}", listed(&counters.errors));
    println!();
    for p in &passed {
        println!("ok: {p}");
    }
    for f in &failures {
        println!("FAIL: {f}");
    }
    drop(op);
    if failures.is_empty() {
        println!("soak passed");
    } else {
        println!("soak FAILED ({} checks)", failures.len());
        std::process::exit(1);
    }
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
