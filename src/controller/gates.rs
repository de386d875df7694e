//! The gate runner: Prometheus and webhook gates are evaluated beside the
//! controller, never inside a reconcile.
//!
//! A reconcile tells the runner which gates its plan needs now ([`GateWork`]:
//! the plan, its revision, rollout and step, the gate specs, and the verdicts
//! persisted in `status.gates`), and reads back the latest verdicts at once.
//! The runner keeps one task per gate of that (plan, revision, rollout, step):
//! each waits until its gate is due, calls it with its own timeouts, folds the
//! result in with the pure [`crate::gates::record`] and wakes the plan's
//! reconcile. A task ends when the work changes (new or restarted step,
//! revision, gate specs or trial settings), when the plan no longer needs
//! gates (settled, failed, deleted), or when its gate has failed or awaits a
//! human's decision (past its `inconclusiveLimit`).
//!
//! Each call first waits for a permit of the budget of gate calls (see
//! [`crate::gates::budget`]: calls in flight and per second, per namespace
//! and in all). A gate waiting there is not evaluated yet: nothing is
//! recorded against it, a gate never evaluated says in its message that it
//! waits for the budget, and `releaseplan_gate_calls_held_total` counts it.
//!
//! Each evaluation first reads the gate's credentials and CA bundle (see
//! [`crate::gates::access`]) in the task, so a reconcile never waits on that
//! either. The gate series of the metrics (`releaseplan_gate_value`,
//! `releaseplan_gate_failures`) live as long as the work: they are removed
//! when the work changes (new step, revision, rollout or gate list) or ends
//! (settled, failed, halted, deleted), so a series always speaks of a gate
//! being evaluated now.
//!
//! Verdicts survive a restart or a change of leader through `status.gates`:
//! new tasks start from the persisted counts and `lastEvaluated`, so an
//! evaluation is never counted twice and a gate is not called again before
//! its interval has passed.

use super::policy::PolicyCaches;
use crate::api::cached::CachedPlan;
use crate::api::{GateStatus, ReleasePlan, ReleasePlanStatus, Trial, Verdict};
use crate::gates::access::CredentialReader;
use crate::gates::budget::{GateBudget, Permit};
use crate::gates::outbound::GateHttp;
use crate::gates::prometheus::TemplateVars;
use crate::gates::{self as g, Evaluation, GateContext, GateResult, GateSpec, NotEvaluated};
use crate::ops::metrics::{GateKindLabel, GaugeGuard, Metrics, NamespaceLabel};
use crate::plan::Target;
use chrono::Utc;
use futures::channel::mpsc::UnboundedSender;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

/// Added to a gate's own timeouts before the runner gives up on a call.
const CALL_GRACE: Duration = Duration::from_secs(5);
/// Pause before a gate that could not be evaluated (the API server away)
/// is asked again (at most its interval).
const NOT_EVALUATED_RETRY: Duration = Duration::from_secs(5);
/// How long a gate may go unevaluated (the API server away) before that
/// counts as an error of the gate, so that it shows in the plan's status.
const NOT_EVALUATED_LIMIT: Duration = Duration::from_secs(300);
/// The message of a gate never evaluated while its call waits for the budget.
pub const HELD_BY_BUDGET: &str = "not evaluated yet: waiting for the operator's budget of gate calls (in flight and per second, of this namespace and of all)";

/// What a plan needs from the runner now.
#[derive(Debug, Clone, PartialEq)]
pub struct GateWork {
    uid: String,
    rollout: i64,
    /// When the step started: a `retry` restarts the step (the gates start
    /// afresh) without changing anything else here.
    step_started: Option<chrono::DateTime<Utc>>,
    /// The gates, as the core parsed them from the spec.
    gates: Vec<GateSpec>,
    /// Revision, step and query values the gates are told, one per gate (in
    /// the order of `gates`): a gate that names a component is told about it.
    ctxs: Vec<GateContext>,
    /// Each gate's trial settings (`dryRun`, `consecutiveSuccesses`,
    /// `consecutiveErrors`), in the order of `gates`.
    trials: Vec<Trial>,
    /// The verdicts persisted in `status.gates`, where new tasks start from.
    seed: Vec<GateStatus>,
}

impl GateWork {
    /// The gates of `target` (the plan's spec, parsed) a plan needs evaluated,
    /// or `None` when it needs none now: not rolling out, halted or failed,
    /// being deleted, or without gates.
    pub fn of(plan: &ReleasePlan, target: &Target, status: &ReleasePlanStatus) -> Option<GateWork> {
        if status.phase != crate::api::Phase::RollingOut
            || status.failure.is_some()
            || plan.metadata.deletion_timestamp.is_some()
            || target.gates.is_empty()
        {
            return None;
        }
        // The first component that changes in this rollout is the one gates
        // speak of, unless a gate names its own.
        let changed = status
            .components
            .iter()
            .find(|c| c.is_changing())
            .or_else(|| status.components.first());
        let ctx_of = |gate: &GateSpec| {
            let component = match target.gate_components.get(gate.name()) {
                Some(name) => status.components.iter().find(|c| &c.name == name),
                None => changed,
            };
            GateContext {
                vars: TemplateVars {
                    plan: plan.name_any(),
                    namespace: plan.namespace().unwrap_or_default(),
                    component: component.map(|c| c.name.clone()).unwrap_or_default(),
                    revision: component
                        .and_then(|c| c.current_hash.clone())
                        .unwrap_or_default(),
                    // For a query that compares with it, a stable revision
                    // that serves no pod (a first release, or the last step
                    // once its pods are replaced) is none. Only such a gate's
                    // context changes when its pods go: the others' tasks
                    // keep running.
                    stable_revision: component
                        .filter(|c| c.stable_ready > 0 || !compares_with_stable(gate))
                        .and_then(|c| c.stable_hash.clone())
                        .unwrap_or_default(),
                    // Only a judge compares with a baseline: the other gates'
                    // contexts stay as they were when one comes and goes.
                    baseline_revision: baseline_of(gate, component),
                },
                revision: status.current_revision.clone().unwrap_or_default(),
                step: status.current_step,
            }
        };
        let trials: Vec<Trial> = target
            .gates
            .iter()
            .map(|g| target.trial(g.name()))
            .collect();
        // A verdict recorded under the other dryRun setting is not one to
        // continue from: the gate starts the step's count again.
        let seed = status
            .gates
            .iter()
            .filter(|s| {
                target
                    .gates
                    .iter()
                    .zip(&trials)
                    .any(|(g, t)| g.name() == s.name && t.dry_run == s.dry_run)
            })
            .cloned()
            .collect();
        Some(GateWork {
            uid: plan.uid().unwrap_or_default(),
            rollout: status.rollout_count,
            step_started: status.step_started_at,
            gates: target.gates.clone(),
            ctxs: target.gates.iter().map(ctx_of).collect(),
            trials,
            seed,
        })
    }

    /// Same plan, rollout, step and gates: the running tasks serve it.
    fn same_as(&self, other: &GateWork) -> bool {
        self.uid == other.uid
            && self.rollout == other.rollout
            && self.step_started == other.step_started
            && self.gates == other.gates
            && self.ctxs == other.ctxs
            && self.trials == other.trials
    }
}

/// Whether a gate's query names `{{stableRevision}}`.
/// The baseline an analysis gate compares with: the component's, as the
/// decided status records it, while one is wanted or still has pods.
fn baseline_of(
    gate: &GateSpec,
    component: Option<&releaseplan_core::api::ComponentStatus>,
) -> String {
    match gate {
        GateSpec::Analysis(_) => component
            .and_then(|c| c.baseline.as_ref())
            .map(|b| b.revision.clone())
            .unwrap_or_default(),
        GateSpec::Prometheus(_) | GateSpec::Webhook(_) => String::new(),
    }
}

fn compares_with_stable(gate: &GateSpec) -> bool {
    match gate {
        GateSpec::Prometheus(p) => crate::gates::prometheus::compares_with_stable(&p.query),
        GateSpec::Webhook(_) => false,
        // The judge compares with the stable revision's pods.
        GateSpec::Analysis(_) => true,
    }
}

/// Latest verdict of each gate of one work, in spec order.
type Verdicts = Arc<Mutex<Vec<GateStatus>>>;

struct Running {
    work: GateWork,
    verdicts: Verdicts,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// How long one gate has gone unevaluated for want of the API server, and
/// what that means for it: nothing recorded at first (asked again after
/// [`NOT_EVALUATED_RETRY`], or the gate's interval if shorter), an error of the gate past
/// [`NOT_EVALUATED_LIMIT`], so that the plan's status says why it waits.
#[derive(Debug, Default)]
struct Unevaluated {
    since: Option<Instant>,
}

impl Unevaluated {
    /// The result to record for this evaluation; `Err` when there is
    /// nothing to record yet. An evaluation resets the count.
    fn result(
        &mut self,
        evaluated: Result<GateResult, NotEvaluated>,
        now: Instant,
    ) -> Result<GateResult, NotEvaluated> {
        match evaluated {
            Ok(r) => {
                self.since = None;
                Ok(r)
            }
            Err(n) => {
                let since = *self.since.get_or_insert(now);
                if now.saturating_duration_since(since) < NOT_EVALUATED_LIMIT {
                    return Err(n);
                }
                self.since = None;
                Ok(GateResult::Error {
                    reason: format!(
                        "{} (not evaluated for {} min)",
                        n.reason,
                        NOT_EVALUATED_LIMIT.as_secs() / 60
                    ),
                })
            }
        }
    }
}

/// Evaluates gates off the reconcile path (see the module docs).
pub struct GateRunner {
    http: GateHttp,
    secrets: CredentialReader,
    policy: PolicyCaches,
    budget: GateBudget,
    metrics: Arc<Metrics>,
    wake: UnboundedSender<ObjectRef<ReleasePlan>>,
    plans: Store<CachedPlan>,
    running: Mutex<HashMap<ObjectRef<ReleasePlan>, Running>>,
}

impl GateRunner {
    /// A runner whose results wake plans through `wake`; `plans` is the
    /// controller's cache, so a task of a plan that is gone stops by itself.
    /// Every call takes a permit of `budget` first.
    pub fn new(
        http: GateHttp,
        secrets: CredentialReader,
        policy: PolicyCaches,
        budget: GateBudget,
        metrics: Arc<Metrics>,
        wake: UnboundedSender<ObjectRef<ReleasePlan>>,
        plans: Store<CachedPlan>,
    ) -> Arc<GateRunner> {
        metrics.gate_kinds(&GateSpec::KINDS);
        Arc::new(GateRunner {
            http,
            secrets,
            policy,
            budget,
            metrics,
            wake,
            plans,
            running: Mutex::new(HashMap::new()),
        })
    }

    /// Makes the runner serve `work` for the plan (starting or stopping tasks
    /// as needed) and returns the latest verdicts. Never waits on a gate.
    pub fn observe(
        self: &Arc<Self>,
        key: &ObjectRef<ReleasePlan>,
        work: Option<GateWork>,
    ) -> Vec<GateStatus> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(work) = work else {
            if running.remove(key).is_some() {
                self.metrics.remove_gates(&series_key(key));
            }
            return Vec::new();
        };
        if let Some(r) = running.get(key)
            && r.work.same_as(&work)
        {
            return snapshot(&r.verdicts);
        }
        // New work: the old work's series go (under the lock, so no task of
        // the old work sets one again, see `store`).
        self.metrics.remove_gates(&series_key(key));
        let verdicts: Verdicts = Arc::new(Mutex::new(
            work.gates
                .iter()
                .map(|gate| {
                    work.seed
                        .iter()
                        .find(|s| s.name == gate.name())
                        .cloned()
                        .unwrap_or_else(|| GateStatus {
                            name: gate.name().to_string(),
                            verdict: Verdict::Pending,
                            message: Some("not evaluated yet".into()),
                            dry_run: target_dry_run(&work, gate.name()),
                            ..GateStatus::default()
                        })
                })
                .collect(),
        ));
        let tasks = (0..work.gates.len())
            .map(|i| {
                let this = Arc::clone(self);
                let key = key.clone();
                let work = work.clone();
                let verdicts = Arc::clone(&verdicts);
                tokio::spawn(async move { this.run_gate(key, work, i, verdicts).await })
            })
            .collect();
        let out = snapshot(&verdicts);
        running.insert(
            key.clone(),
            Running {
                work,
                verdicts,
                tasks,
            },
        );
        out
    }

    /// The plans with gate tasks.
    pub fn plans(&self) -> Vec<ObjectRef<ReleasePlan>> {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    fn plan_exists(&self, key: &ObjectRef<ReleasePlan>, uid: &str) -> bool {
        self.plans
            .get(&super::keys::cached_key(key))
            .is_some_and(|p| p.uid().as_deref() == Some(uid))
    }

    /// One gate's loop: wait until due, evaluate, record, wake the plan.
    async fn run_gate(
        self: Arc<Self>,
        key: ObjectRef<ReleasePlan>,
        work: GateWork,
        index: usize,
        verdicts: Verdicts,
    ) {
        let Some(gate) = work.gates.get(index) else {
            return;
        };
        let mut unevaluated = Unevaluated::default();
        loop {
            let prev = verdicts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(index)
                .cloned();
            let prev = prev.filter(|p| p.last_evaluated.is_some());
            let Some(wait) = g::next_due(prev.as_ref(), gate.interval(), Utc::now()) else {
                return; // Failed or awaiting a decision: final for this step.
            };
            tokio::time::sleep(wait).await;
            let permit = self.permit(&key, index, &verdicts).await;
            if !self.plan_exists(&key, &work.uid) {
                self.forget(&key, &work);
                return;
            }
            let in_flight = GaugeGuard::new(&self.metrics.gate_calls_in_flight);
            let evaluated = self.evaluate(gate, work.ctxs.get(index)).await;
            drop((in_flight, permit));
            let (evaluated, analysis) = match evaluated {
                Ok(e) => (Ok(e.result), e.analysis),
                Err(n) => (Err(n), None),
            };
            let result = match unevaluated.result(evaluated, Instant::now()) {
                Ok(r) => r,
                Err(n) => {
                    // Nothing is recorded: the gate is asked again shortly.
                    warn!(plan = %key.name, gate = gate.name(), reason = %n.reason, retry_in = ?NOT_EVALUATED_RETRY, "gate not evaluated");
                    tokio::time::sleep(NOT_EVALUATED_RETRY.min(gate.interval())).await;
                    continue;
                }
            };
            let trial = work.trials.get(index).copied().unwrap_or_default();
            let st = g::record_with(
                prev.as_ref(),
                gate.name(),
                &result,
                gate.limits(),
                trial,
                Utc::now(),
            );
            // An analysis shows its last judgement (kept through an
            // evaluation that went wrong).
            let st = GateStatus {
                analysis: analysis.or_else(|| prev.as_ref().and_then(|p| p.analysis.clone())),
                ..st
            };
            let last = st.verdict == Verdict::Failed || st.awaiting_decision;
            self.store(&key, &work, index, &verdicts, st);
            if last {
                return;
            }
        }
    }

    /// Waits for the budget's permit to call the gate at `index`. A call
    /// held back is not evaluated yet: counted by namespace, and a gate never
    /// evaluated says so in its message (the plan is woken to show it);
    /// nothing is recorded against the gate.
    async fn permit(
        &self,
        key: &ObjectRef<ReleasePlan>,
        index: usize,
        verdicts: &Verdicts,
    ) -> Permit {
        let namespace = key.namespace.as_deref().unwrap_or_default();
        let mut acquire = std::pin::pin!(self.budget.acquire(namespace));
        if let Poll::Ready(permit) = futures::poll!(acquire.as_mut()) {
            return permit;
        }
        self.metrics
            .gate_calls_held
            .get_or_create(&NamespaceLabel {
                namespace: namespace.to_string(),
            })
            .inc();
        let noted = {
            let mut v = verdicts.lock().unwrap_or_else(PoisonError::into_inner);
            match v.get_mut(index) {
                Some(st)
                    if st.last_evaluated.is_none()
                        && st.verdict == Verdict::Pending
                        && st.message.as_deref() != Some(HELD_BY_BUDGET) =>
                {
                    st.message = Some(HELD_BY_BUDGET.to_string());
                    true
                }
                _ => false,
            }
        };
        if noted {
            // The reconcile shows why the gate waits; a closed channel means shutdown.
            let _ = self.wake.unbounded_send(key.clone());
        }
        debug!(plan = %key, index, "gate call held back by the budget");
        let _waiting = GaugeGuard::new(&self.metrics.gate_calls_waiting);
        acquire.await
    }

    /// One evaluation; `Err` when the operator could not evaluate it for
    /// want of the API server (its policies not listed yet, its credentials
    /// not readable while the API server is away): not the gate's fault.
    async fn evaluate(
        &self,
        gate: &GateSpec,
        ctx: Option<&GateContext>,
    ) -> Result<Evaluation, NotEvaluated> {
        let bound = gate.worst_case() + CALL_GRACE;
        let Some(ctx) = ctx else {
            return Ok(Evaluation::from(GateResult::Error {
                reason: "no context for this gate (a bug)".into(),
            }));
        };
        // The policies as cached: read before any call, never fetched here.
        let Some(policy) = self.policy.for_namespace(&ctx.vars.namespace) else {
            return Err(NotEvaluated {
                reason: "gate policies not read yet: not called".into(),
            });
        };
        let started = Instant::now();
        let evaluation =
            crate::gates::evaluate_checked(gate, &self.http, &self.secrets, &policy, ctx);
        let evaluated = match tokio::time::timeout(bound, evaluation).await {
            Ok(r) => r?,
            Err(_) => Evaluation::from(GateResult::Error {
                reason: format!("no answer within {}s", bound.as_secs()),
            }),
        };
        let kind = GateKindLabel {
            kind: gate.kind().to_string(),
        };
        self.metrics
            .gate_duration
            .get_or_create(&kind)
            .observe(started.elapsed().as_secs_f64());
        if matches!(evaluated.result, GateResult::Error { .. }) {
            self.metrics.gate_errors.get_or_create(&kind).inc();
        }
        Ok(evaluated)
    }

    fn store(
        &self,
        key: &ObjectRef<ReleasePlan>,
        work: &GateWork,
        index: usize,
        verdicts: &Verdicts,
        st: GateStatus,
    ) {
        {
            // Only while this work is still served: a task of work that was
            // just replaced or ended must not bring its series back.
            let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            if running.get(key).is_some_and(|r| r.work.same_as(work)) {
                let value = st.value.as_deref().and_then(|s| s.parse::<f64>().ok());
                self.metrics
                    .set_gate(&series_key(key), &st.name, value, i64::from(st.failures));
                if st.dry_run {
                    self.metrics.mark_dry_run(&series_key(key), &st.name);
                }
            }
        }
        debug!(plan = %key, gate = %st.name, verdict = %st.verdict, "gate evaluated");
        if let Some(slot) = verdicts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(index)
        {
            *slot = st;
        }
        // The reconcile reads the verdict; a closed channel means shutdown.
        let _ = self.wake.unbounded_send(key.clone());
    }

    /// Drops the work of a plan that is gone, if it is still this work.
    fn forget(&self, key: &ObjectRef<ReleasePlan>, work: &GateWork) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if running.get(key).is_some_and(|r| r.work.same_as(work)) {
            // Dropping aborts the tasks, this one among them: it returns right after.
            running.remove(key);
            self.metrics.remove_gates(&series_key(key));
        }
    }
}

/// The plan's key in the metrics' gate series: `namespace/name`.
fn series_key(key: &ObjectRef<ReleasePlan>) -> String {
    format!(
        "{}/{}",
        key.namespace.as_deref().unwrap_or_default(),
        key.name
    )
}

/// Whether the gate named `name` of `work` is a dry run.
fn target_dry_run(work: &GateWork, name: &str) -> bool {
    work.gates
        .iter()
        .zip(&work.trials)
        .any(|(g, t)| g.name() == name && t.dry_run)
}

fn snapshot(v: &Verdicts) -> Vec<GateStatus> {
    v.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gate unevaluated for want of the API server records nothing for
    /// up to five minutes (a blip does not count against a healthy
    /// rollout), then an error of the gate that says why; an evaluation in
    /// between starts the count again.
    #[test]
    fn an_unevaluated_gate_records_nothing_until_the_limit_then_an_error() {
        let away = || {
            Err(NotEvaluated {
                reason: "webhook gate credentials: HTTP 503".into(),
            })
        };
        let pass = || Ok(GateResult::Pass { value: 1.0 });
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);

        let mut u = Unevaluated::default();
        assert!(u.result(away(), at(0)).is_err());
        assert!(u.result(away(), at(299)).is_err(), "within the limit");
        let Ok(GateResult::Error { reason }) = u.result(away(), at(300)) else {
            panic!("past the limit: an error of the gate")
        };
        assert!(reason.contains("HTTP 503"), "{reason}");
        assert!(reason.contains("not evaluated for 5 min"), "{reason}");
        // The count starts again after the error is recorded.
        assert!(u.result(away(), at(301)).is_err());

        let mut u = Unevaluated::default();
        assert!(u.result(away(), at(0)).is_err());
        assert_eq!(
            u.result(pass(), at(200)),
            pass(),
            "an evaluation is recorded"
        );
        assert!(
            u.result(away(), at(350)).is_err(),
            "an evaluation resets the count"
        );
        assert!(u.result(away(), at(649)).is_err());
        assert!(u.result(away(), at(650)).is_ok());
    }

    /// A runner over real HTTP gates on 127.0.0.1, with `limits`, whose
    /// plans are those of `plans` (namespace, name, uid).
    fn runner(
        limits: crate::gates::budget::Limits,
        plans: &[(&str, &str, &str)],
    ) -> Arc<GateRunner> {
        use kube::runtime::{reflector, watcher};
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (store, mut writer) = reflector::store::<CachedPlan>();
        for (ns, name, uid) in plans {
            let p: ReleasePlan = serde_json::from_value(serde_json::json!({
                "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
                "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": "1"},
                "spec": {"components": []}
            }))
            .unwrap();
            writer.apply_watcher_event(&watcher::Event::Apply(CachedPlan::new(&p).unwrap()));
        }
        let (wake, rx) = futures::channel::mpsc::unbounded();
        // The wakes are not read here; the channel stays open.
        std::mem::forget(rx);
        let http = GateHttp::new(crate::gates::outbound::OutboundPolicy::default()).unwrap();
        GateRunner::new(
            http,
            CredentialReader::new(crate::canned_api::answering(Vec::new()).0, "ops".into()),
            PolicyCaches::none(crate::gates::policy::Mode::Optional),
            GateBudget::new(limits),
            Arc::new(Metrics::new()),
            wake,
            store,
        )
    }

    /// The work of `gates` webhook gates calling `url`, for the plan `uid`.
    fn webhook_work(ns: &str, plan: &str, uid: &str, url: &str, gates: usize) -> GateWork {
        let hooks: Vec<_> = (0..gates)
            .map(|i| serde_json::json!({"name": format!("g{i}"), "url": url, "retries": 0}))
            .collect();
        let health: crate::api::Health =
            serde_json::from_value(serde_json::json!({ "webhooks": hooks })).unwrap();
        let gates = GateSpec::all(&health.entries().unwrap()).unwrap();
        let ctx = GateContext {
            vars: TemplateVars {
                plan: plan.into(),
                namespace: ns.into(),
                ..TemplateVars::default()
            },
            revision: "r1".into(),
            step: 0,
        };
        GateWork {
            uid: uid.into(),
            rollout: 1,
            step_started: None,
            ctxs: vec![ctx; gates.len()],
            trials: vec![Trial::default(); gates.len()],
            seed: Vec::new(),
            gates,
        }
    }

    /// A server that answers 200 after `delay`, counting the calls in flight
    /// and the most at once.
    async fn hook_server(delay: Duration) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let now = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let (n, p) = (Arc::clone(&now), Arc::clone(&peak));
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move || {
                let (n, p) = (Arc::clone(&n), Arc::clone(&p));
                async move {
                    p.fetch_max(n.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    tokio::time::sleep(delay).await;
                    n.fetch_sub(1, Ordering::SeqCst);
                    "ok"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}/hook"), peak)
    }

    /// Namespace `flood` has 10 plans of 16 webhook gates against a server
    /// that takes 2 s to answer, and the budget lets 2 calls be in flight,
    /// 2 per namespace. Namespace `quiet`'s one gate is still evaluated
    /// within seconds: it waits for one of `flood`'s calls, not for its
    /// backlog of 160 calls (about 160 s at 2 at a time). `flood`'s gates
    /// that wait are not evaluated yet: no failure, the message says why;
    /// never more than 2 calls reach its server at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flooding_namespace_does_not_hold_another_namespaces_gate() {
        use crate::gates::budget::Limits;
        use std::sync::atomic::Ordering;
        let (slow, slow_peak) = hook_server(Duration::from_secs(2)).await;
        let (fast, _) = hook_server(Duration::ZERO).await;
        let mut plans: Vec<(String, String, String)> = (0..10)
            .map(|i| {
                (
                    "flood".to_string(),
                    format!("p{i}"),
                    format!("uid-flood-{i}"),
                )
            })
            .collect();
        plans.push(("quiet".into(), "q".into(), "uid-quiet".into()));
        let refs: Vec<(&str, &str, &str)> = plans
            .iter()
            .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
            .collect();
        let limits = Limits {
            in_flight: 2,
            in_flight_per_namespace: 2,
            per_second: 0,
            per_second_per_namespace: 0,
        };
        let runner = runner(limits, &refs);
        let key = |ns: &str, name: &str| ObjectRef::<ReleasePlan>::new(name).within(ns);
        let flood: Vec<(ObjectRef<ReleasePlan>, GateWork)> = plans[..10]
            .iter()
            .map(|(ns, name, uid)| (key(ns, name), webhook_work(ns, name, uid, &slow, 16)))
            .collect();
        for (k, w) in &flood {
            runner.observe(k, Some(w.clone()));
        }
        // The flood fills the global budget before the quiet gate asks.
        let start = Instant::now();
        while runner.metrics.gate_calls_in_flight.get() < 2 {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the flood never started"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let quiet_key = key("quiet", "q");
        let quiet = webhook_work("quiet", "q", "uid-quiet", &fast, 1);
        let asked = Instant::now();
        let verdict = loop {
            let v = runner.observe(&quiet_key, Some(quiet.clone()));
            if v[0].last_evaluated.is_some() {
                break v[0].clone();
            }
            assert!(
                asked.elapsed() < Duration::from_secs(30),
                "the quiet namespace's gate waited behind the flood: {v:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(verdict.verdict, Verdict::Passed, "{verdict:?}");

        let held = runner
            .metrics
            .gate_calls_held
            .get_or_create(&NamespaceLabel {
                namespace: "flood".into(),
            })
            .get();
        assert!(held > 0, "the flood was never held back");
        let statuses: Vec<GateStatus> = flood
            .iter()
            .flat_map(|(k, w)| runner.observe(k, Some(w.clone())))
            .collect();
        assert!(
            statuses
                .iter()
                .all(|s| s.failures == 0 && s.verdict != Verdict::Failed),
            "a held gate was counted against: {statuses:?}"
        );
        assert!(
            statuses
                .iter()
                .any(|s| s.last_evaluated.is_none() && s.message.as_deref() == Some(HELD_BY_BUDGET)),
            "no waiting gate says why"
        );
        assert!(
            slow_peak.load(Ordering::SeqCst) <= 2,
            "the flood passed its budget"
        );
        for (k, _) in &flood {
            runner.observe(k, None);
        }
        runner.observe(&quiet_key, None);
    }
}
