//! Prometheus metrics of the operator (OpenMetrics text on `/metrics`).

use crate::api::{Outcome, Phase};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

/// Label set of a failed reconcile: what failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    /// The error's kind (the controller's error kinds): `api`, `conflict`...
    pub error: String,
}

/// Label set of a wake: what woke the plan.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WakeLabel {
    /// What woke the plan (the controller's wake sources): `plan`, `deployment`, `pod`...
    pub source: &'static str,
}

/// Label set of a timed reconcile: why it came back with no change.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TimerLabel {
    /// A core requeue cause (`new_step`, `safety`, `step_ends`...) or one of
    /// the controller's (`stand_in`, `cache_sync`, `retry`, `unknown`).
    pub cause: &'static str,
}

/// Label set of a finished rollout.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `Promoted`, `RolledBack` or `Superseded`.
    pub outcome: String,
}

/// Label set of a rollback: the gate whose failure started it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailedGateLabel {
    /// Name of the failed gate (`podHealth`, or a gate of the spec).
    pub gate: String,
}

/// Label set of a write to the API server.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabel {
    /// What was written: `apply`, `delete`, `template`, `status`, `finalizer`, `event`.
    pub operation: String,
}

/// Label set of a notification delivery.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotificationLabel {
    /// Namespace of the plan (and of its receivers' config).
    pub namespace: String,
    /// Receiver name (`-` for a drop before any receiver was known).
    pub receiver: String,
    /// `sent`, `failed` (after retries) or `dropped` (a full queue).
    pub result: String,
}

/// Label set with one `phase`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    /// Lifecycle phase.
    pub phase: String,
}

/// Label set with the kind of a gate (`prometheus`, `webhook`...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GateKindLabel {
    /// The gate's kind, as `GateSpec::kind` names it.
    pub kind: String,
}

/// Label set with the namespace of a plan.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceLabel {
    /// Namespace of the plan.
    pub namespace: String,
}

/// Label set of a gate verdict.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GateLabel {
    /// Namespace of the plan.
    pub namespace: String,
    /// Plan name.
    pub plan: String,
    /// Gate name.
    pub gate: String,
}

/// Label set of a request to the API server.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    /// The API server's verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`...
    pub verb: String,
    /// The resource, with its subresource: `deployments`, `releaseplans/status`...
    pub resource: String,
    /// The HTTP status code of the answer, or `error` when none came.
    pub code: String,
}

/// Label set of the build: the operator's version and commit.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabel {
    /// The version the binary was built as (its package version).
    pub version: String,
    /// The git commit it was built from ([`crate::build_info::COMMIT`]).
    pub commit: String,
}

/// Label set with the resource of a cache (`deployments`, `pods`...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    /// The resource's plural.
    pub resource: String,
}

/// Label set with one `verb`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabel {
    /// The API server's verb.
    pub verb: String,
}

/// Seconds, from a cached read to a slow write: the buckets of request and
/// queue-wait durations.
const LATENCY_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Label set of one plan's state (`releaseplan_plan_info`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlanLabel {
    /// Namespace of the plan.
    pub namespace: String,
    /// Plan name.
    pub plan: String,
    /// Lifecycle phase.
    pub phase: String,
    /// `true` while a failure holds a rollout (automatic rollback off): the
    /// phase alone says `RollingOut` then.
    pub halted: String,
}

/// What the metrics keep of one plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanState {
    /// Lifecycle phase.
    pub phase: Phase,
    /// Held by a failure ([`crate::api::ReleasePlanStatus::is_halted`]).
    pub halted: bool,
}

/// Every metric the operator exports.
pub struct Metrics {
    /// The registry rendered on `/metrics`.
    pub registry: Registry,
    /// The `process_*` families, unprefixed as every exporter has them.
    process: Registry,
    /// Reconciles run.
    pub reconciles: Counter,
    /// Reconciles failed, by error kind.
    pub failures: Family<ErrorLabel, Counter>,
    /// Reconcile duration.
    pub duration: Histogram,
    /// Plans per phase.
    pub plans: Family<PhaseLabel, Gauge>,
    /// Finished rollouts by outcome (Promoted, RolledBack, Superseded).
    pub rollouts: Family<OutcomeLabel, Counter>,
    /// Rollbacks started, by the gate that failed.
    pub rollbacks: Family<FailedGateLabel, Counter>,
    /// Duration of promoted rollouts.
    pub rollout_duration: Histogram,
    /// Writes to the API server, by kind (apply, delete, status, finalizer, event).
    pub api_writes: Family<WriteLabel, Counter>,
    /// Last numeric value of each gate.
    pub gate_value: Family<GateLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Failed evaluations of each gate in the current step.
    pub gate_failures: Family<GateLabel, Gauge>,
    /// 1 for each gate of `gate_value`/`gate_failures` that is a dry run
    /// (`dryRun`): its verdicts never fail, hold or pause the rollout.
    pub gate_dry_run: Family<GateLabel, Gauge>,
    /// Duration of gate evaluations (credentials read, calls and retries
    /// included), by gate kind.
    pub gate_duration: Family<GateKindLabel, Histogram, fn() -> Histogram>,
    /// Gate evaluations that ended in an error (no answer, refused, bad
    /// answer, unreadable credentials), by gate kind.
    pub gate_errors: Family<GateKindLabel, Counter>,
    /// Gate calls that had to wait for the budget of gate calls
    /// (`--gate-calls-*`), by the plan's namespace: while one waits, its
    /// gate is not evaluated yet.
    pub gate_calls_held: Family<NamespaceLabel, Counter>,
    /// Gate calls waiting for the budget now.
    pub gate_calls_waiting: Gauge,
    /// Gate calls in flight now (holding a place in the budget).
    pub gate_calls_in_flight: Gauge,
    /// The gates with `gate_value`/`gate_failures` series, per plan
    /// (`namespace/name`), so they can be removed with the rollout.
    gate_series: Mutex<HashMap<String, BTreeSet<String>>>,
    /// 1 while this process reconciles (leader, or leader election off), else 0.
    pub leader: Gauge,
    /// The shard this process reconciles (`--shards`), -1 while it holds none.
    pub shard: Gauge,
    /// Shards in all (`--shards`): as many replicas must lead.
    pub shards: Gauge,
    /// Requests to the API server, by verb, resource and answer.
    pub kube_requests: Family<RequestLabel, Counter>,
    /// Answer time of requests to the API server (watches excluded), by verb.
    pub kube_request_duration: Family<VerbLabel, Histogram, fn() -> Histogram>,
    /// Plans waiting for a reconcile: changed (or woken by a gate) and not
    /// yet reconciled since. Timed requeues are not counted: they wait on purpose.
    pub queue_depth: Gauge,
    /// Time from a plan's change to the start of its reconcile.
    pub queue_wait: Histogram,
    /// Changes that woke a plan, by what changed (its own watch event, one of
    /// its objects, a gate result...): where reconciles come from.
    pub wakes: Family<WakeLabel, Counter>,
    /// Reconciles that no change started (a timed requeue), by the cause the
    /// reconcile before gave: what timers cost.
    pub timed_reconciles: Family<TimerLabel, Counter>,
    /// One series per plan, value 1, labelled with its phase and whether it is
    /// halted, so an alert can name the plan; removed with the plan.
    pub plan_info: Family<PlanLabel, Gauge>,
    /// Objects held in the operator's caches, by resource.
    pub cached_objects: Family<ResourceLabel, Gauge>,
    /// Estimated bytes of the cached objects, by resource.
    pub cached_bytes: Family<ResourceLabel, Gauge>,
    /// Notifications by namespace, receiver and result (sent, failed, dropped).
    pub notifications: Family<NotificationLabel, Counter>,
    /// Plans the controller keeps in-memory state for between reconciles.
    pub plan_memory_entries: Gauge,
    /// The state of each plan, so a change moves one count from the old phase
    /// to the new one (no recount of all plans per reconcile) and replaces
    /// the plan's info series.
    phases: Mutex<HashMap<String, PlanState>>,
    /// The gauge of each phase, in the order of [`Phase::ALL`].
    phase_gauges: [Gauge; Phase::ALL.len()],
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Exports every wake source and every timer cause of the controller
    /// from zero, so a rate over them has a start: the controller owns those
    /// lists and names them here when it starts.
    pub fn prime(
        &self,
        wakes: impl IntoIterator<Item = &'static str>,
        timers: impl IntoIterator<Item = &'static str>,
    ) {
        for source in wakes {
            let _ = self.wakes.get_or_create(&WakeLabel { source });
        }
        for cause in timers {
            let _ = self.timed_reconciles.get_or_create(&TimerLabel { cause });
        }
    }

    /// Creates and registers every metric under the `releaseplan` prefix.
    // One registration per metric family, each with its help text.
    #[allow(clippy::too_many_lines)]
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("releaseplan");
        let reconciles = Counter::default();
        let failures = Family::<ErrorLabel, Counter>::default();
        // Reconciles never wait on the network: one that only reads caches
        // and decides takes well under a millisecond (a third of them in a
        // debug build's rollout, tests/it/controller.rs), one that writes takes
        // a few API round trips (~10-50 ms), and the 1s bucket is the line a
        // healthy one never crosses.
        let duration = Histogram::new([
            0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            5.0, 10.0,
        ]);
        let plans = Family::<PhaseLabel, Gauge>::default();
        let rollouts = Family::<OutcomeLabel, Counter>::default();
        // Every outcome's series exists from the start, at 0: a counter born
        // at 1 is invisible to increase(), and the first rollback would not
        // alert (integrations/prometheus/alerts.yaml, tests/it/alerts.rs).
        for outcome in Outcome::ALL {
            let _ = rollouts.get_or_create(&OutcomeLabel {
                outcome: outcome.as_str().into(),
            });
        }
        let rollbacks = Family::<FailedGateLabel, Counter>::default();
        let rollout_duration = Histogram::new(exponential_buckets(1.0, 2.0, 14));
        let api_writes = Family::<WriteLabel, Counter>::default();
        let gate_value = Family::<GateLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        let gate_failures = Family::<GateLabel, Gauge>::default();
        let gate_dry_run = Family::<GateLabel, Gauge>::default();
        let gate_duration: Family<GateKindLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(gate_histogram);
        let gate_errors = Family::<GateKindLabel, Counter>::default();
        let gate_calls_held = Family::<NamespaceLabel, Counter>::default();
        let gate_calls_waiting = Gauge::default();
        let gate_calls_in_flight = Gauge::default();
        let leader = Gauge::default();
        let shard = Gauge::default();
        shard.set(-1);
        let shards = Gauge::default();
        shards.set(1);
        let kube_requests = Family::<RequestLabel, Counter>::default();
        let kube_request_duration =
            Family::<VerbLabel, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        let queue_depth = Gauge::default();
        let queue_wait = latency_histogram();
        let plan_info = Family::<PlanLabel, Gauge>::default();
        registry.register(
            "plan_info",
            "One series per ReleasePlan, value 1: its phase and whether it is halted",
            plan_info.clone(),
        );
        registry.register("reconcile_runs", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_failures",
            "Reconciles failed, by error kind",
            failures.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile duration",
            duration.clone(),
        );
        registry.register("plans", "ReleasePlans per phase", plans.clone());
        registry.register("rollouts", "Finished rollouts by outcome", rollouts.clone());
        registry.register(
            "rollbacks",
            "Rollbacks started, by failed gate",
            rollbacks.clone(),
        );
        registry.register(
            "rollout_duration_seconds",
            "Duration of promoted rollouts",
            rollout_duration.clone(),
        );
        registry.register(
            "api_writes",
            "Writes to the Kubernetes API, by kind",
            api_writes.clone(),
        );
        registry.register(
            "gate_value",
            "Last value measured by a health gate",
            gate_value.clone(),
        );
        registry.register(
            "gate_failures",
            "Failed evaluations of a gate in the current step",
            gate_failures.clone(),
        );
        registry.register(
            "gate_dry_run",
            "1 for a gate evaluated as a dry run: its verdicts never fail, hold or pause the rollout",
            gate_dry_run.clone(),
        );
        registry.register(
            "gate_evaluation_duration_seconds",
            "Duration of gate evaluations (credentials read, calls and retries included), by gate kind",
            gate_duration.clone(),
        );
        registry.register(
            "gate_errors",
            "Gate evaluations that ended in an error (no answer, refused call, bad answer, unreadable credentials), by gate kind",
            gate_errors.clone(),
        );
        registry.register(
            "gate_calls_held",
            "Gate calls that waited for the budget of gate calls (in flight and per second, per namespace and in all), by namespace: not evaluated yet while they wait",
            gate_calls_held.clone(),
        );
        registry.register(
            "gate_calls_waiting",
            "Gate calls waiting for the budget of gate calls now",
            gate_calls_waiting.clone(),
        );
        registry.register(
            "gate_calls_in_flight",
            "Gate calls in flight now, within the budget of gate calls",
            gate_calls_in_flight.clone(),
        );
        registry.register(
            "leader",
            "1 while this process reconciles (holds the lease)",
            leader.clone(),
        );
        registry.register(
            "shard",
            "The shard whose plans this process reconciles (0 without sharding), -1 while it holds none",
            shard.clone(),
        );
        registry.register(
            "shards",
            "Shards the plans are split into (--shards): as many replicas must lead",
            shards.clone(),
        );
        registry.register(
            "kube_requests",
            "Requests to the Kubernetes API server, by verb, resource and status code",
            kube_requests.clone(),
        );
        registry.register(
            "kube_request_duration_seconds",
            "Answer time of requests to the Kubernetes API server (watches excluded), by verb",
            kube_request_duration.clone(),
        );
        // Every source and cause is exported from zero once the controller
        // names them ([`Metrics::prime`]): it owns those lists.
        let wakes = Family::<WakeLabel, Counter>::default();
        registry.register(
            "wakes",
            "Changes that woke a ReleasePlan for a reconcile, by source",
            wakes.clone(),
        );
        let timed_reconciles = Family::<TimerLabel, Counter>::default();
        for r in crate::plan::machine::Requeue::ALL {
            let _ = timed_reconciles.get_or_create(&TimerLabel { cause: r.as_str() });
        }
        registry.register(
            "timed_reconciles",
            "Reconciles of a ReleasePlan that no change started (a timed requeue), by cause",
            timed_reconciles.clone(),
        );
        registry.register(
            "reconcile_queue_depth",
            "ReleasePlans changed and waiting for their reconcile",
            queue_depth.clone(),
        );
        registry.register(
            "reconcile_queue_wait_seconds",
            "Time from a ReleasePlan's change (or a gate result) to the start of its reconcile",
            queue_wait.clone(),
        );
        let cached_objects = Family::<ResourceLabel, Gauge>::default();
        registry.register(
            "cached_objects",
            "Objects in the operator's caches, by resource (sampled every few seconds)",
            cached_objects.clone(),
        );
        let cached_bytes = Family::<ResourceLabel, Gauge>::default();
        registry.register(
            "cached_bytes",
            "Estimated bytes the cached objects hold (their contents, without allocator overhead), by resource, for the resources whose objects are cached in the operator's own types (sampled every few seconds)",
            cached_bytes.clone(),
        );
        let notifications = Family::<NotificationLabel, Counter>::default();
        registry.register(
            "notifications",
            "Notifications by namespace, receiver and result: sent, failed (after retries), dropped (a full queue)",
            notifications.clone(),
        );
        let plan_memory_entries = Gauge::default();
        registry.register(
            "plan_memory_entries",
            "ReleasePlans the controller keeps in-memory state for between reconciles (sampled every few seconds)",
            plan_memory_entries.clone(),
        );
        // 1, labelled with the version and commit: which build runs where,
        // and a join key for dashboards (`* on() group_left(version)`).
        let build_info = Family::<BuildLabel, Gauge>::default();
        build_info
            .get_or_create(&BuildLabel {
                version: crate::build_info::VERSION.to_string(),
                commit: crate::build_info::COMMIT.to_string(),
            })
            .set(1);
        registry.register(
            "build_info",
            "1, labelled with the version and git commit of the running operator",
            build_info,
        );
        let phase_gauges = Phase::ALL.map(|p| {
            plans
                .get_or_create(&PhaseLabel {
                    phase: p.to_string(),
                })
                .clone()
        });
        let mut process = Registry::default();
        process.register_collector(Box::new(super::process::ProcessCollector));
        Metrics {
            registry,
            process,
            reconciles,
            failures,
            duration,
            plans,
            rollouts,
            rollbacks,
            rollout_duration,
            api_writes,
            gate_value,
            gate_failures,
            gate_dry_run,
            gate_duration,
            gate_errors,
            gate_calls_held,
            gate_calls_waiting,
            gate_calls_in_flight,
            gate_series: Mutex::new(HashMap::new()),
            leader,
            shard,
            shards,
            kube_requests,
            kube_request_duration,
            queue_depth,
            queue_wait,
            wakes,
            timed_reconciles,
            plan_info,
            cached_objects,
            cached_bytes,
            notifications,
            plan_memory_entries,
            phases: Mutex::new(HashMap::new()),
            phase_gauges,
        }
    }

    /// Records the phase of a plan (None when it is gone), not halted.
    pub fn set_phase(&self, key: &str, phase: Option<Phase>) {
        self.set_plan(
            key,
            phase.map(|phase| PlanState {
                phase,
                halted: false,
            }),
        );
    }

    /// Records the state of the plan `key` (`namespace/name`; None when it
    /// is gone): its count moves from its previous phase to the new one, in
    /// constant time, and its info series is replaced (or removed).
    pub fn set_plan(&self, key: &str, state: Option<PlanState>) {
        let mut map = self.phases.lock().unwrap_or_else(PoisonError::into_inner);
        let old = match state {
            Some(s) => map.insert(key.to_string(), s),
            None => map.remove(key),
        };
        if old == state {
            return;
        }
        // Under the lock, so the gauges always sum to the plans in the map.
        if old.map(|s| s.phase) != state.map(|s| s.phase) {
            if let Some(g) = old.and_then(|s| self.phase_gauge(s.phase)) {
                g.dec();
            }
            if let Some(g) = state.and_then(|s| self.phase_gauge(s.phase)) {
                g.inc();
            }
        }
        if let Some(s) = old {
            self.plan_info.remove(&plan_label(key, s));
        }
        if let Some(s) = state {
            self.plan_info.get_or_create(&plan_label(key, s)).set(1);
        }
    }

    /// The plans (`namespace/name`) with a recorded state.
    pub fn plan_keys(&self) -> Vec<String> {
        self.phases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    fn phase_gauge(&self, phase: Phase) -> Option<&Gauge> {
        let i = Phase::ALL.iter().position(|p| *p == phase)?;
        self.phase_gauges.get(i)
    }

    /// Exports the gate kinds' duration and error series from the start, at
    /// 0, so the first error is seen by `increase()`.
    pub fn gate_kinds(&self, kinds: &[&str]) {
        for kind in kinds {
            let label = GateKindLabel {
                kind: (*kind).to_string(),
            };
            let _ = self.gate_errors.get_or_create(&label);
            let _ = self.gate_duration.get_or_create(&label);
        }
    }

    /// Records one evaluated gate of the plan `key` (`namespace/name`): its
    /// last value (when it has one) and its failures in this step.
    pub fn set_gate(&self, key: &str, gate: &str, value: Option<f64>, failures: i64) {
        let mut series = self
            .gate_series
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let label = gate_label(key, gate);
        if let Some(v) = value {
            self.gate_value.get_or_create(&label).set(v);
        }
        self.gate_failures.get_or_create(&label).set(failures);
        series
            .entry(key.to_string())
            .or_default()
            .insert(gate.to_string());
    }

    /// Marks a gate of the plan `key` evaluated by [`Metrics::set_gate`] as a
    /// dry run (removed with its other series).
    pub fn mark_dry_run(&self, key: &str, gate: &str) {
        let series = self
            .gate_series
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if series.get(key).is_some_and(|g| g.contains(gate)) {
            self.gate_dry_run
                .get_or_create(&gate_label(key, gate))
                .set(1);
        }
    }

    /// Removes every gate series of the plan `key`: its rollout (or step, or
    /// gate list) ended, or it is gone.
    pub fn remove_gates(&self, key: &str) {
        let mut series = self
            .gate_series
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for gate in series.remove(key).unwrap_or_default() {
            let label = gate_label(key, &gate);
            self.gate_value.remove(&label);
            self.gate_failures.remove(&label);
            self.gate_dry_run.remove(&label);
        }
    }

    /// Counts one write to the API server.
    pub fn write(&self, operation: &str) {
        self.api_writes
            .get_or_create(&WriteLabel {
                operation: operation.into(),
            })
            .inc();
    }

    /// Records one request to the API server; `seconds` is its answer time
    /// (`None` for a watch).
    pub fn kube_request(&self, verb: &str, resource: &str, code: &str, seconds: Option<f64>) {
        self.kube_requests
            .get_or_create(&RequestLabel {
                verb: verb.into(),
                resource: resource.into(),
                code: code.into(),
            })
            .inc();
        if let Some(s) = seconds {
            self.kube_request_duration
                .get_or_create(&VerbLabel { verb: verb.into() })
                .observe(s);
        }
    }

    /// Renders the registry as OpenMetrics text.
    pub fn render(&self) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut out = String::new();
        let written = encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, &self.process))
            .and_then(|()| encode_eof(&mut out));
        if written.is_err() {
            return String::new();
        }
        out
    }
}

/// Gate evaluations take from milliseconds (a local Prometheus) to minutes
/// (a webhook timing out through its retries: up to 11 x 60s).
fn gate_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    ])
}

fn gate_label(key: &str, gate: &str) -> GateLabel {
    let (namespace, plan) = key.split_once('/').unwrap_or(("", key));
    GateLabel {
        namespace: namespace.to_string(),
        plan: plan.to_string(),
        gate: gate.to_string(),
    }
}

fn plan_label(key: &str, s: PlanState) -> PlanLabel {
    let (namespace, plan) = key.split_once('/').unwrap_or(("", key));
    PlanLabel {
        namespace: namespace.to_string(),
        plan: plan.to_string(),
        phase: s.phase.to_string(),
        halted: s.halted.to_string(),
    }
}

/// One more on a gauge while this lives (a call waiting, a call in flight):
/// the count comes down however the work ends, a cancelled task included.
#[derive(Debug)]
pub struct GaugeGuard(Gauge);

impl GaugeGuard {
    /// Adds one to `gauge` until the guard is dropped.
    pub fn new(gauge: &Gauge) -> GaugeGuard {
        gauge.inc();
        GaugeGuard(gauge.clone())
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_info_series_per_plan_follows_it_and_goes_with_it() {
        let m = Metrics::new();
        let rolling = PlanState {
            phase: Phase::RollingOut,
            halted: false,
        };
        m.set_plan("shop/web", Some(rolling));
        m.set_plan(
            "shop/web",
            Some(PlanState {
                halted: true,
                ..rolling
            }),
        );
        m.set_plan("shop/api", Some(rolling));
        let text = m.render();
        assert!(text.contains("releaseplan_plan_info{namespace=\"shop\",plan=\"web\",phase=\"RollingOut\",halted=\"true\"} 1"), "{text}");
        assert!(
            !text.contains("plan=\"web\",phase=\"RollingOut\",halted=\"false\""),
            "{text}"
        );
        assert!(
            text.contains("releaseplan_plans{phase=\"RollingOut\"} 2"),
            "{text}"
        );
        m.set_plan("shop/web", None);
        let text = m.render();
        assert!(!text.contains("plan=\"web\""), "{text}");
        assert!(text.contains("plan=\"api\""), "{text}");
        assert!(
            text.contains("releaseplan_plans{phase=\"RollingOut\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn gate_series_go_with_their_plan() {
        let m = Metrics::new();
        m.gate_kinds(&["prometheus", "webhook"]);
        m.set_gate("shop/web", "errors", Some(0.5), 1);
        m.set_gate("shop/web", "smoke", None, 0);
        m.set_gate("shop/api", "errors", Some(0.1), 0);
        m.mark_dry_run("shop/web", "smoke");
        m.mark_dry_run("shop/web", "never-evaluated");
        m.gate_duration
            .get_or_create(&GateKindLabel {
                kind: "webhook".into(),
            })
            .observe(0.2);
        let text = m.render();
        assert!(
            text.contains(
                "releaseplan_gate_value{namespace=\"shop\",plan=\"web\",gate=\"errors\"} 0.5"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "releaseplan_gate_failures{namespace=\"shop\",plan=\"web\",gate=\"smoke\"} 0"
            ),
            "{text}"
        );
        assert!(
            text.contains("releaseplan_gate_errors_total{kind=\"prometheus\"} 0"),
            "{text}"
        );
        assert!(
            text.contains(
                "releaseplan_gate_dry_run{namespace=\"shop\",plan=\"web\",gate=\"smoke\"} 1"
            ),
            "{text}"
        );
        assert!(!text.contains("never-evaluated"), "{text}");
        assert!(
            !text.contains("gate_dry_run{namespace=\"shop\",plan=\"api\""),
            "{text}"
        );
        assert!(text.contains("releaseplan_gate_evaluation_duration_seconds_bucket{le=\"0.25\",kind=\"webhook\"} 1"), "{text}");
        m.remove_gates("shop/web");
        let text = m.render();
        assert!(!text.contains("plan=\"web\""), "{text}");
        assert!(
            text.contains(
                "releaseplan_gate_value{namespace=\"shop\",plan=\"api\",gate=\"errors\"} 0.1"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_build_is_exported_with_its_version_and_commit() {
        let text = Metrics::new().render();
        let line = format!(
            "releaseplan_build_info{{version=\"{}\",commit=\"{}\"}} 1",
            crate::build_info::VERSION,
            crate::build_info::COMMIT
        );
        assert!(text.contains(&line), "{line} missing:\n{text}");
    }

    #[test]
    fn every_rollout_outcome_is_exported_from_zero() {
        let text = Metrics::new().render();
        for o in Outcome::ALL {
            let line = format!("releaseplan_rollouts_total{{outcome=\"{o}\"}} 0");
            assert!(text.contains(&line), "{line} missing:\n{text}");
        }
    }

    #[test]
    fn renders_phases_and_counts() {
        let m = Metrics::new();
        m.set_phase("a/x", Some(Phase::Stable));
        m.set_phase("a/y", Some(Phase::Stable));
        m.set_phase("a/z", Some(Phase::RollingOut));
        m.set_phase("a/y", None);
        m.reconciles.inc();
        m.write("apply");
        let text = m.render();
        assert!(
            text.contains("releaseplan_plans{phase=\"Stable\"} 1"),
            "{text}"
        );
        assert!(text.contains("releaseplan_plans{phase=\"RollingOut\"} 1"));
        assert!(text.contains("releaseplan_reconcile_runs_total 1"));
        assert!(text.contains("releaseplan_api_writes_total{operation=\"apply\"} 1"));
        assert!(text.contains("releaseplan_leader 0"));
        assert!(text.ends_with("# EOF\n"));
    }

    fn count(m: &Metrics, p: Phase) -> i64 {
        m.phase_gauge(p).unwrap().get()
    }

    #[test]
    fn phase_counts_follow_transitions_repeats_and_deletes() {
        let m = Metrics::new();
        m.set_phase("a/x", Some(Phase::Pending));
        m.set_phase("a/x", Some(Phase::RollingOut));
        m.set_phase("a/x", Some(Phase::RollingOut));
        m.set_phase("a/y", Some(Phase::RollingOut));
        m.set_phase("a/y", Some(Phase::Stable));
        m.set_phase("a/y", Some(Phase::Stable));
        // Forgetting a plan twice, or one never seen, changes nothing.
        m.set_phase("a/z", None);
        assert_eq!(count(&m, Phase::Pending), 0);
        assert_eq!(count(&m, Phase::RollingOut), 1);
        assert_eq!(count(&m, Phase::Stable), 1);
        m.set_phase("a/x", None);
        m.set_phase("a/x", None);
        assert_eq!(count(&m, Phase::RollingOut), 0);
        assert_eq!(count(&m, Phase::Stable), 1);
        for p in Phase::ALL {
            assert!(count(&m, p) >= 0, "{p}");
        }
    }

    #[test]
    fn phase_counts_match_a_recount_under_random_updates() {
        let m = Metrics::new();
        let mut truth: HashMap<String, Phase> = HashMap::new();
        let mut seed = 7u64;
        for _ in 0..2000 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let key = format!("ns/p{}", (seed >> 33) % 13);
            let pick = usize::try_from((seed >> 20) % 6).unwrap();
            let phase = Phase::ALL.get(pick).copied();
            match phase {
                Some(p) => truth.insert(key.clone(), p),
                None => truth.remove(&key),
            };
            m.set_phase(&key, phase);
        }
        for p in Phase::ALL {
            let n = truth.values().filter(|v| **v == p).count();
            assert_eq!(count(&m, p), i64::try_from(n).unwrap(), "{p}");
        }
    }
}
