//! Health gates, the pure half: each kind's settings parsed once
//! ([`GateSpec`]), and verdicts from observations (pod signals, query
//! results). The I/O that fetches results lives in the operator crate
//! (`releaseplan::gates`).
//!
//! One evaluation of a gate (by the operator) yields a [`GateResult`];
//! [`record`] folds it into the gate's previous
//! [`GateStatus`] (counting failures and inconclusive results against the
//! gate's limits) and is the only place that decides a verdict.
//! [`next_due`] says when a gate is evaluated again.

pub mod access;
pub mod analysis;
pub mod job;
pub mod pod_security;
pub mod pods;
pub mod policy;
pub mod prometheus;
pub mod template;
pub mod text;
pub mod threshold;
pub mod webhook;

use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::api::{GateAt, GateEntry, GateStatus, Trial, Verdict};

/// `timeoutSeconds` of Prometheus and webhook gates when unset.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// A gate's `timeoutSeconds` as a duration: default 10s, at least 1s.
pub fn timeout_of(seconds: Option<i32>) -> Duration {
    match seconds {
        Some(s) => Duration::from_secs(u64::try_from(s.max(1)).unwrap_or(1)),
        None => DEFAULT_TIMEOUT,
    }
}

/// One configured gate, parsed once from the spec (see `plan::spec`): each
/// kind's settings with their defaults applied. The one place that dispatches
/// to a kind's module, so a new gate kind is its API struct, its module
/// (settings, `parse`, evaluation) and one arm here.
#[derive(Debug, Clone, PartialEq)]
pub enum GateSpec {
    /// A PromQL query compared with a threshold.
    Prometheus(prometheus::PrometheusSpec),
    /// A URL that must answer 2xx.
    Webhook(webhook::WebhookSpec),
    /// Metrics of the new revision compared with the stable one's by the judge.
    Analysis(analysis::AnalysisSpec),
}

/// A gate setting that cannot be used, with the path of its field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateSpecError {
    /// JSON path of the field, e.g. `spec.health.prometheus[0].threshold`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

/// What a gate is told about the rollout it judges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateContext {
    /// Values for a query's placeholders: the gate's own component, else the
    /// first one that changes.
    pub vars: prometheus::TemplateVars,
    /// The plan revision being rolled out.
    pub revision: String,
    /// Index of the current step.
    pub step: i32,
}

impl GateSpec {
    /// Every gate kind, as [`GateSpec::kind`] names it.
    pub const KINDS: [&'static str; 3] = ["prometheus", "webhook", "analysis"];

    /// The gates of `entries` that the runner evaluates (Prometheus, webhook
    /// and analysis gates), in spec order, each parsed once; an error names the
    /// field where the user wrote it.
    pub fn all(entries: &[GateAt]) -> Result<Vec<GateSpec>, GateSpecError> {
        let mut out = Vec::with_capacity(entries.len());
        for at in entries {
            let error = |field: &str, message: String| GateSpecError {
                field: at.field(field),
                message,
            };
            let spec = match &at.entry {
                GateEntry::Prometheus(g) => GateSpec::Prometheus(
                    prometheus::PrometheusSpec::parse(g).map_err(|(f, m)| error(f, m))?,
                ),
                GateEntry::Webhook(g) => GateSpec::Webhook(webhook::WebhookSpec::parse(g)),
                GateEntry::Analysis(g) => GateSpec::Analysis(
                    analysis::AnalysisSpec::parse(g).map_err(|(f, m)| error(f, m))?,
                ),
                GateEntry::Job(_) | GateEntry::Template(_) => continue,
            };
            // auth, headers and tls: the same rules for every kind.
            spec.access().check().map_err(|(f, m)| error(&f, m))?;
            out.push(spec);
        }
        Ok(out)
    }

    /// The gate's name, unique in the plan.
    pub fn name(&self) -> &str {
        match self {
            GateSpec::Prometheus(p) => &p.name,
            GateSpec::Webhook(w) => &w.name,
            GateSpec::Analysis(a) => &a.name,
        }
    }

    /// Time between two evaluations.
    pub fn interval(&self) -> Duration {
        match self {
            GateSpec::Prometheus(p) => p.interval,
            GateSpec::Webhook(_) => webhook::INTERVAL,
            GateSpec::Analysis(a) => a.interval,
        }
    }

    /// Failed and inconclusive evaluations tolerated in a step (see [`record`]).
    pub fn limits(&self) -> Limits {
        match self {
            GateSpec::Prometheus(p) => Limits {
                failures: p.failure_limit,
                inconclusive: p.inconclusive_limit,
            },
            GateSpec::Webhook(w) => Limits {
                failures: webhook::FAILURE_LIMIT,
                inconclusive: w.inconclusive_limit,
            },
            GateSpec::Analysis(a) => Limits {
                failures: a.failure_limit,
                inconclusive: a.inconclusive_limit,
            },
        }
    }

    /// The longest one evaluation may take, its own timeouts and retries included.
    pub fn worst_case(&self) -> Duration {
        let call = match self {
            GateSpec::Prometheus(p) => p.timeout,
            GateSpec::Webhook(w) => w.worst_case(),
            GateSpec::Analysis(a) => a.worst_case(),
        };
        if self.access().reads_nothing() {
            call
        } else {
            call + access::READ_TIMEOUT
        }
    }

    /// The gate's kind, as metrics label it (`prometheus`, `webhook`).
    pub fn kind(&self) -> &'static str {
        match self {
            GateSpec::Prometheus(_) => "prometheus",
            GateSpec::Webhook(_) => "webhook",
            GateSpec::Analysis(_) => "analysis",
        }
    }

    /// The URL it calls: a Prometheus address or a webhook URL.
    pub fn url(&self) -> &str {
        match self {
            GateSpec::Prometheus(p) => &p.address,
            GateSpec::Webhook(w) => &w.url,
            GateSpec::Analysis(a) => &a.address,
        }
    }

    /// Its credentials, headers and CA bundle, as written in the spec.
    pub fn access(&self) -> &access::Access {
        match self {
            GateSpec::Prometheus(p) => &p.access,
            GateSpec::Webhook(w) => &w.access,
            GateSpec::Analysis(a) => &a.access,
        }
    }
}

/// How a gate status refused by policy begins its message
/// ([`GateResult::Refused`], [`is_refused`]).
pub const REFUSED_PREFIX: &str = "refused by policy: ";

/// Whether the gate's last evaluation was refused by policy (its status is
/// what [`record_with`] wrote for a [`GateResult::Refused`]): the step
/// holds on it, and the plan says which rule would allow the call.
pub fn is_refused(st: &GateStatus) -> bool {
    st.verdict == Verdict::Pending
        && st
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with(REFUSED_PREFIX))
}

/// Evaluations a gate tolerates in a step before it fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Failed evaluations (and errors) tolerated.
    pub failures: i32,
    /// Inconclusive evaluations tolerated.
    pub inconclusive: i32,
}

/// The outcome of one evaluation of a gate.
#[derive(Debug, Clone, PartialEq)]
pub enum GateResult {
    /// The measured value meets the threshold (for a webhook: the 2xx status
    /// code).
    Pass {
        /// The measured value.
        value: f64,
    },
    /// The value is outside the threshold, or a webhook answered non-2xx.
    Fail {
        /// The measured value (a webhook's status code), when there is one.
        value: Option<f64>,
        /// Why, for `GateStatus.message`.
        reason: String,
    },
    /// The query gave no usable number: no data, NaN, more than one series, or
    /// a result type other than a scalar or instant vector.
    Inconclusive {
        /// Why, for `GateStatus.message`.
        reason: String,
    },
    /// Nothing to evaluate, which counts as a pass: a query comparing the
    /// new revision with the stable one (`{{stableRevision}}`) on a first
    /// release, which has no stable revision.
    NotApplicable {
        /// Why, for `GateStatus.message`.
        reason: String,
    },
    /// The evaluation itself went wrong: timeout, connection refused, bad
    /// JSON, a Prometheus error answer. Never a pass; counted as a failure.
    Error {
        /// Why, for `GateStatus.message`.
        reason: String,
    },
    /// The gate was not called because a rule of the administrator refuses
    /// it: the GatePolicy (destination, header, credential binding) or the
    /// operator's own flags (`--gate-allow-hosts`, `--gate-deny-cidrs`,
    /// metadata and link-local addresses). Configuration, not a health
    /// verdict: it neither passes nor fails the gate (see [`record_with`]).
    Refused {
        /// Which rule refused what, for `GateStatus.message`.
        reason: String,
    },
}

impl GateResult {
    /// The numeric value measured, if any.
    pub fn value(&self) -> Option<f64> {
        match self {
            GateResult::Pass { value } => Some(*value),
            GateResult::Fail { value, .. } => *value,
            GateResult::Inconclusive { .. }
            | GateResult::NotApplicable { .. }
            | GateResult::Error { .. }
            | GateResult::Refused { .. } => None,
        }
    }

    /// Whether this evaluation passed.
    pub fn is_pass(&self) -> bool {
        matches!(
            self,
            GateResult::Pass { .. } | GateResult::NotApplicable { .. }
        )
    }
}

/// Formats a measured value for `GateStatus.value`: twelve significant
/// digits at most, plain decimals for ordinary magnitudes, exponent notation for very small or large ones, and
/// `NaN`, `+Inf`, `-Inf` as Prometheus writes them.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        // Twelve significant digits hide float noise (0.009999999999999998
        // is shown as 0.01) but keep every digit a threshold would use.
        let v: f64 = format!("{v:.11e}").parse().unwrap_or(v);
        if v == 0.0 || (1e-4..1e15).contains(&v.abs()) {
            format!("{v}")
        } else {
            format!("{v:e}")
        }
    }
}

/// Folds one evaluation into the gate's previous status and decides the
/// verdict, one error counting as a failed evaluation and one pass passing
/// (`consecutiveErrors: 1`, `consecutiveSuccesses: 1`); see [`record_with`].
pub fn record(
    prev: Option<&GateStatus>,
    name: &str,
    result: &GateResult,
    failure_limit: i32,
    inconclusive_limit: i32,
    now: DateTime<Utc>,
) -> GateStatus {
    let limits = Limits {
        failures: failure_limit,
        inconclusive: inconclusive_limit,
    };
    let trial = Trial {
        consecutive_errors: 1,
        ..Trial::default()
    };
    record_with(prev, name, result, limits, trial, now)
}

/// Folds one evaluation into the gate's previous status and decides the
/// verdict, with the gate's kind's `limits` and its `trial` settings.
///
/// - `Pass`: one more pass in a row; `Passed` once `consecutive_successes`
///   passes in a row are counted, else `Pending`. The failure and
///   inconclusive counts are kept.
/// - `Fail`: one more failure; `Failed` once failures exceed
///   `limits.failures`, else `Pending` ("n of m failures allowed").
/// - `Error`: one more error in a row; the `consecutive_errors`-th counts as
///   a `Fail`. Before that the previous verdict stays (`Pending` when there
///   is none): a lone flaky scrape neither passes nor fails a gate.
/// - `Inconclusive`: one more inconclusive; within `limits.inconclusive` the
///   verdict is `Inconclusive`; past it the verdict stays `Inconclusive` and
///   `awaiting_decision` is set: the rollout pauses for a human (the machine
///   reads it; never a failure).
/// - `Refused`: the administrator's rules refused the call; nothing was
///   sent and nothing is counted: the verdict is `Pending` (the step holds,
///   a rollout is never failed or rolled back by its own configuration) and
///   the message says which rule would allow it. The passes in a row start
///   again (the gate was not judged).
///
/// `Failed` and `awaiting_decision` are final for the step: later results
/// keep them (the controller resets gate statuses at every step change), a
/// failure overriding a pending decision. Anything but a pass starts the
/// passes in a row again; anything but an error ends the errors in a row.
/// `value` holds the last numeric value measured (kept when this evaluation
/// measured none); `message` always says why. A `prev` of another gate
/// (different name) is ignored. Negative limits count as 0, trial counts
/// below 1 as 1.
// One arm per kind of result, then the step's final verdicts: the whole
// fold read in one place.
#[allow(clippy::too_many_lines)]
pub fn record_with(
    prev: Option<&GateStatus>,
    name: &str,
    result: &GateResult,
    limits: Limits,
    trial: Trial,
    now: DateTime<Utc>,
) -> GateStatus {
    let prev = prev.filter(|p| p.name == name);
    let failure_limit = limits.failures.max(0);
    let inconclusive_limit = limits.inconclusive.max(0);
    let need_passes = trial.consecutive_successes.max(1);
    let need_errors = trial.consecutive_errors.max(1);
    let mut failures = prev.map_or(0, |p| p.failures.max(0));
    let mut inconclusive = prev.map_or(0, |p| p.inconclusive.max(0));
    let mut passes = prev.map_or(0, |p| p.consecutive_successes.max(0));
    let mut errors = prev.map_or(0, |p| p.consecutive_errors.max(0));
    let already_failed =
        prev.is_some_and(|p| p.verdict == Verdict::Failed) || failures > failure_limit;
    let already_awaiting =
        prev.is_some_and(|p| p.awaiting_decision) || inconclusive > inconclusive_limit;
    let mut awaiting = false;

    let count_failure = |failures: &mut i32, reason: &str| {
        *failures = failures.saturating_add(1);
        if *failures > failure_limit {
            (
                Verdict::Failed,
                format!(
                    "{reason}: {failures} failed evaluations, more than the {failure_limit} allowed"
                ),
            )
        } else {
            (
                Verdict::Pending,
                format!("{reason} ({failures} of {failure_limit} failures allowed)"),
            )
        }
    };

    let (verdict, message) = match result {
        GateResult::NotApplicable { reason } => {
            errors = 0;
            passes = need_passes;
            (Verdict::Passed, format!("passed without a query: {reason}"))
        }
        GateResult::Pass { value } => {
            errors = 0;
            passes = passes.saturating_add(1);
            let mut msg = format!("value {} passed", format_value(*value));
            if passes < need_passes {
                let _ = write!(msg, " ({passes} of {need_passes} passes in a row needed)");
            } else if failures > 0 || inconclusive > 0 {
                let _ = write!(
                    msg,
                    " ({failures} failed and {inconclusive} inconclusive evaluations in this step)"
                );
            }
            let verdict = if passes >= need_passes {
                Verdict::Passed
            } else {
                Verdict::Pending
            };
            (verdict, msg)
        }
        GateResult::Fail { reason, .. } => {
            errors = 0;
            passes = 0;
            count_failure(&mut failures, reason)
        }
        GateResult::Error { reason } => {
            errors = errors.saturating_add(1);
            if errors >= need_errors {
                let reason = if need_errors > 1 {
                    format!("{reason} ({errors} errors in a row)")
                } else {
                    reason.clone()
                };
                errors = 0;
                passes = 0;
                count_failure(&mut failures, &reason)
            } else {
                let kept = prev.map_or(Verdict::Pending, |p| p.verdict);
                (
                    kept,
                    format!(
                        "{reason} ({errors} of {need_errors} errors in a row before one counts as a failure)"
                    ),
                )
            }
        }
        GateResult::Refused { reason } => {
            errors = 0;
            passes = 0;
            (
                Verdict::Pending,
                format!("{REFUSED_PREFIX}{reason}; the step holds until the policy allows it"),
            )
        }
        GateResult::Inconclusive { reason } => {
            errors = 0;
            passes = 0;
            inconclusive = inconclusive.saturating_add(1);
            if inconclusive > inconclusive_limit {
                awaiting = true;
                (
                    Verdict::Inconclusive,
                    format!(
                        "{reason}: {inconclusive} inconclusive evaluations, more than the {inconclusive_limit} allowed; the rollout waits for promote or abort"
                    ),
                )
            } else {
                (
                    Verdict::Inconclusive,
                    format!(
                        "{reason} ({inconclusive} of {inconclusive_limit} inconclusive evaluations allowed)"
                    ),
                )
            }
        }
    };

    let earlier = || {
        prev.and_then(|p| p.message.as_deref())
            .unwrap_or("a limit was exceeded")
    };
    let (verdict, message) = if already_failed && verdict != Verdict::Failed {
        (
            Verdict::Failed,
            format!(
                "failed earlier in this step ({}); last evaluation: {message}",
                earlier()
            ),
        )
    } else if already_awaiting && verdict != Verdict::Failed {
        awaiting = true;
        (
            Verdict::Inconclusive,
            format!(
                "inconclusive earlier in this step ({}); last evaluation: {message}",
                earlier()
            ),
        )
    } else {
        (verdict, message)
    };

    GateStatus {
        name: name.to_string(),
        verdict,
        value: result
            .value()
            .map(format_value)
            .or_else(|| prev.and_then(|p| p.value.clone())),
        failures,
        inconclusive,
        last_evaluated: Some(now),
        message: Some(message),
        analysis: None,
        dry_run: trial.dry_run,
        consecutive_successes: passes,
        consecutive_errors: errors,
        awaiting_decision: awaiting && verdict != Verdict::Failed,
    }
}

/// How long until the gate is due: `Some(ZERO)` when due now, `None` when it
/// will not be evaluated again in this step (verdict `Failed`, or a decision
/// awaited from a human). For the
/// controller's requeue. A last evaluation in the future (clock skew) waits at
/// most one `interval`.
pub fn next_due(
    prev: Option<&GateStatus>,
    interval: Duration,
    now: DateTime<Utc>,
) -> Option<Duration> {
    let Some(prev) = prev else {
        return Some(Duration::ZERO);
    };
    if prev.verdict == Verdict::Failed || prev.awaiting_decision {
        return None;
    }
    let Some(last) = prev.last_evaluated else {
        return Some(Duration::ZERO);
    };
    // A negative elapsed time (clock skew) counts as zero.
    let elapsed = (now - last).to_std().unwrap_or(Duration::ZERO);
    Some(interval.saturating_sub(elapsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts() {
        assert_eq!(timeout_of(None), Duration::from_secs(10));
        assert_eq!(timeout_of(Some(0)), Duration::from_secs(1));
        assert_eq!(timeout_of(Some(3)), Duration::from_secs(3));
    }

    /// Due now: never evaluated in this step, or `interval` has passed.
    fn is_due(prev: Option<&GateStatus>, interval: Duration, now: DateTime<Utc>) -> bool {
        next_due(prev, interval, now) == Some(Duration::ZERO)
    }
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    fn pass(v: f64) -> GateResult {
        GateResult::Pass { value: v }
    }
    fn fail(v: f64) -> GateResult {
        GateResult::Fail {
            value: Some(v),
            reason: format!("value {v} is not < 0.05"),
        }
    }
    fn error() -> GateResult {
        GateResult::Error {
            reason: "connection refused".into(),
        }
    }
    fn inconclusive() -> GateResult {
        GateResult::Inconclusive {
            reason: "no data".into(),
        }
    }

    /// Records results one after another, returning every status.
    fn run(results: &[GateResult], failure_limit: i32, inconclusive_limit: i32) -> Vec<GateStatus> {
        let mut out: Vec<GateStatus> = Vec::new();
        for (i, r) in results.iter().enumerate() {
            let s = record(
                out.last(),
                "errors",
                r,
                failure_limit,
                inconclusive_limit,
                t(i as i64 * 30),
            );
            out.push(s);
        }
        out
    }

    fn verdicts(statuses: &[GateStatus]) -> Vec<Verdict> {
        statuses.iter().map(|s| s.verdict).collect()
    }

    #[test]
    fn first_pass() {
        let s = record(None, "errors", &pass(0.01), 0, 3, t(0));
        assert_eq!(s.name, "errors");
        assert_eq!(s.verdict, Verdict::Passed);
        assert_eq!(s.value.as_deref(), Some("0.01"));
        assert_eq!((s.failures, s.inconclusive), (0, 0));
        assert_eq!(s.last_evaluated, Some(t(0)));
        assert_eq!(s.message.as_deref(), Some("value 0.01 passed"));
    }

    #[test]
    fn failure_limit_zero_fails_at_first_failure() {
        let s = run(&[fail(0.2)], 0, 3);
        assert_eq!(verdicts(&s), [Verdict::Failed]);
        assert_eq!(s[0].failures, 1);
        assert_eq!(s[0].value.as_deref(), Some("0.2"));
        let msg = s[0].message.as_deref().unwrap();
        assert!(msg.contains("value 0.2 is not < 0.05"), "{msg}");
        assert!(msg.contains("more than the 0 allowed"), "{msg}");
    }

    #[test]
    fn error_is_never_a_pass_and_counts_as_failure() {
        let s = run(&[error()], 0, 3);
        assert_eq!(verdicts(&s), [Verdict::Failed]);
        assert_eq!(s[0].failures, 1);
        assert_eq!(s[0].value, None);
        assert!(
            s[0].message
                .as_deref()
                .unwrap()
                .contains("connection refused")
        );
    }

    #[test]
    fn failure_limit_two_fails_at_third_failure() {
        let s = run(&[fail(0.2), error(), fail(0.3)], 2, 3);
        assert_eq!(
            verdicts(&s),
            [Verdict::Pending, Verdict::Pending, Verdict::Failed]
        );
        assert_eq!(s.iter().map(|s| s.failures).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(
            s[0].message.as_deref(),
            Some("value 0.2 is not < 0.05 (1 of 2 failures allowed)")
        );
        assert_eq!(
            s[1].message.as_deref(),
            Some("connection refused (2 of 2 failures allowed)")
        );
        // The error measured nothing: the last numeric value stays.
        assert_eq!(s[1].value.as_deref(), Some("0.2"));
        assert_eq!(s[2].value.as_deref(), Some("0.3"));
    }

    #[test]
    fn pass_after_failures_passes_and_keeps_counts() {
        let s = run(&[fail(0.2), fail(0.2), pass(0.01)], 2, 3);
        assert_eq!(
            verdicts(&s),
            [Verdict::Pending, Verdict::Pending, Verdict::Passed]
        );
        assert_eq!(s[2].failures, 2);
        assert_eq!(s[2].value.as_deref(), Some("0.01"));
        assert!(
            s[2].message
                .as_deref()
                .unwrap()
                .contains("2 failed and 0 inconclusive")
        );
        // Counts are per step, not consecutive: one more failure fails the gate.
        let next = record(Some(&s[2]), "errors", &fail(0.2), 2, 3, t(100));
        assert_eq!(next.verdict, Verdict::Failed);
        assert_eq!(next.failures, 3);
    }

    #[test]
    fn inconclusive_counts_against_its_own_limit() {
        let s = run(
            &[
                inconclusive(),
                inconclusive(),
                inconclusive(),
                inconclusive(),
            ],
            0,
            3,
        );
        assert_eq!(
            verdicts(&s),
            [
                Verdict::Inconclusive,
                Verdict::Inconclusive,
                Verdict::Inconclusive,
                Verdict::Inconclusive
            ]
        );
        // Past the limit: a human decides, never a failure.
        assert_eq!(
            s.iter().map(|s| s.awaiting_decision).collect::<Vec<_>>(),
            [false, false, false, true]
        );
        assert_eq!(s[3].inconclusive, 4);
        assert_eq!(s[3].failures, 0);
        assert_eq!(
            s[0].message.as_deref(),
            Some("no data (1 of 3 inconclusive evaluations allowed)")
        );
        assert!(
            s[3].message
                .as_deref()
                .unwrap()
                .contains("4 inconclusive evaluations, more than the 3 allowed")
        );
    }

    #[test]
    fn inconclusive_limit_zero_asks_a_human_at_first() {
        let s = run(&[inconclusive()], 5, 0);
        assert_eq!(verdicts(&s), [Verdict::Inconclusive]);
        assert!(s[0].awaiting_decision);
        assert_eq!(s[0].failures, 0);
    }

    #[test]
    fn mixed_inconclusive_and_failures_are_counted_apart() {
        let s = run(
            &[
                inconclusive(),
                fail(0.2),
                inconclusive(),
                pass(0.0),
                error(),
                inconclusive(),
            ],
            1,
            2,
        );
        assert_eq!(
            verdicts(&s),
            [
                Verdict::Inconclusive,
                Verdict::Pending,
                Verdict::Inconclusive,
                Verdict::Passed,
                Verdict::Failed,
                Verdict::Failed
            ]
        );
        let counts: Vec<_> = s.iter().map(|s| (s.failures, s.inconclusive)).collect();
        assert_eq!(counts, [(0, 1), (1, 1), (1, 2), (1, 2), (2, 2), (2, 3)]);
    }

    #[test]
    fn failed_is_final_for_the_step() {
        let s = run(&[fail(0.2), pass(0.01), inconclusive()], 0, 3);
        assert_eq!(
            verdicts(&s),
            [Verdict::Failed, Verdict::Failed, Verdict::Failed]
        );
        let msg = s[1].message.as_deref().unwrap();
        assert!(msg.starts_with("failed earlier in this step"), "{msg}");
        assert!(msg.contains("value 0.01 passed"), "{msg}");
        assert_eq!(s[1].value.as_deref(), Some("0.01"));
    }

    #[test]
    fn status_of_another_gate_is_ignored() {
        let other = record(None, "latency", &fail(1.0), 0, 3, t(0));
        let s = record(Some(&other), "errors", &pass(0.0), 0, 3, t(1));
        assert_eq!(s.verdict, Verdict::Passed);
        assert_eq!(s.failures, 0);
    }

    #[test]
    fn negative_limits_count_as_zero() {
        assert_eq!(run(&[fail(1.0)], -3, -3)[0].verdict, Verdict::Failed);
        assert!(run(&[inconclusive()], -3, -3)[0].awaiting_decision);
    }

    #[test]
    fn formats_values() {
        assert_eq!(format_value(0.05), "0.05");
        assert_eq!(format_value(1.0), "1");
        assert_eq!(format_value(0.0), "0");
        assert_eq!(format_value(-2.5), "-2.5");
        assert_eq!(format_value(200.0), "200");
        assert_eq!(format_value(1e-7), "1e-7");
        assert_eq!(format_value(0.009999999999999998), "0.01");
        assert_eq!(format_value(0.04999999), "0.04999999");
        assert_eq!(format_value(123456.789), "123456.789");
        assert_eq!(format_value(1.0 / 3.0), "0.333333333333");
        assert_eq!(format_value(3.2e20), "3.2e20");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
    }

    #[test]
    fn due_when_never_evaluated() {
        let i = Duration::from_secs(30);
        assert!(is_due(None, i, t(0)));
        assert_eq!(next_due(None, i, t(0)), Some(Duration::ZERO));
        let never = GateStatus {
            name: "errors".into(),
            verdict: Verdict::Pending,
            ..Default::default()
        };
        assert!(is_due(Some(&never), i, t(0)));
    }

    #[test]
    fn due_after_interval() {
        let i = Duration::from_secs(30);
        let s = record(None, "errors", &pass(0.0), 0, 3, t(0));
        assert!(!is_due(Some(&s), i, t(0)));
        assert_eq!(next_due(Some(&s), i, t(0)), Some(i));
        assert!(!is_due(Some(&s), i, t(29)));
        assert_eq!(next_due(Some(&s), i, t(29)), Some(Duration::from_secs(1)));
        assert!(is_due(Some(&s), i, t(30)));
        assert!(is_due(Some(&s), i, t(300)));
        assert_eq!(next_due(Some(&s), i, t(300)), Some(Duration::ZERO));
    }

    #[test]
    fn clock_skew_waits_at_most_one_interval() {
        let i = Duration::from_secs(30);
        let s = record(None, "errors", &pass(0.0), 0, 3, t(1000));
        assert_eq!(next_due(Some(&s), i, t(0)), Some(i));
        assert!(!is_due(Some(&s), i, t(0)));
    }

    #[test]
    fn failed_gate_is_never_due() {
        let i = Duration::from_secs(30);
        let s = record(None, "errors", &error(), 0, 3, t(0));
        assert_eq!(s.verdict, Verdict::Failed);
        assert!(!is_due(Some(&s), i, t(1000)));
        assert_eq!(next_due(Some(&s), i, t(1000)), None);
    }

    fn trial(successes: i32, errors: i32) -> Trial {
        Trial {
            dry_run: false,
            consecutive_successes: successes,
            consecutive_errors: errors,
        }
    }

    /// Records results with `trial`, returning every status.
    fn run_trial(results: &[GateResult], limits: Limits, trial: Trial) -> Vec<GateStatus> {
        let mut out: Vec<GateStatus> = Vec::new();
        for (i, r) in results.iter().enumerate() {
            let s = record_with(out.last(), "errors", r, limits, trial, t(i as i64 * 30));
            out.push(s);
        }
        out
    }

    const STRICT: Limits = Limits {
        failures: 0,
        inconclusive: 0,
    };

    #[test]
    fn passes_in_a_row_are_needed_before_passed() {
        let s = run_trial(
            &[
                pass(0.0),
                pass(0.0),
                fail(0.2),
                pass(0.0),
                pass(0.0),
                pass(0.0),
            ],
            Limits {
                failures: 1,
                inconclusive: 0,
            },
            trial(3, 2),
        );
        assert_eq!(
            verdicts(&s),
            [
                Verdict::Pending,
                Verdict::Pending,
                Verdict::Pending,
                Verdict::Pending,
                Verdict::Pending,
                Verdict::Passed
            ]
        );
        let counts: Vec<_> = s.iter().map(|s| s.consecutive_successes).collect();
        assert_eq!(counts, [1, 2, 0, 1, 2, 3]);
        assert_eq!(
            s[1].message.as_deref(),
            Some("value 0 passed (2 of 3 passes in a row needed)")
        );
    }

    #[test]
    fn one_pass_passes_by_default() {
        let s = run_trial(&[pass(0.01)], STRICT, Trial::default());
        assert_eq!(verdicts(&s), [Verdict::Passed]);
        assert_eq!(s[0].message.as_deref(), Some("value 0.01 passed"));
    }

    #[test]
    fn a_lone_error_keeps_the_verdict_by_default() {
        let s = run_trial(
            &[pass(0.0), error(), pass(0.0), error(), error()],
            STRICT,
            Trial::default(),
        );
        assert_eq!(
            verdicts(&s),
            [
                Verdict::Passed,
                Verdict::Passed,
                Verdict::Passed,
                Verdict::Passed,
                Verdict::Failed
            ]
        );
        let errors: Vec<_> = s.iter().map(|s| s.consecutive_errors).collect();
        assert_eq!(errors, [0, 1, 0, 1, 0]);
        assert_eq!(s[4].failures, 1);
        assert_eq!(
            s[1].message.as_deref(),
            Some("connection refused (1 of 2 errors in a row before one counts as a failure)")
        );
        assert!(
            s[4].message
                .as_deref()
                .unwrap()
                .starts_with("connection refused (2 errors in a row): 1 failed evaluations"),
            "{:?}",
            s[4].message
        );
        // A lone error before any verdict leaves the gate pending.
        let first = run_trial(&[error()], STRICT, Trial::default());
        assert_eq!(verdicts(&first), [Verdict::Pending]);
    }

    #[test]
    fn counted_errors_are_failures_against_the_limit() {
        let s = run_trial(
            &[error(), error(), error(), error()],
            Limits {
                failures: 1,
                inconclusive: 0,
            },
            trial(1, 2),
        );
        assert_eq!(
            verdicts(&s),
            [
                Verdict::Pending,
                Verdict::Pending,
                Verdict::Pending,
                Verdict::Failed
            ]
        );
        assert_eq!(
            s.iter().map(|s| s.failures).collect::<Vec<_>>(),
            [0, 1, 1, 2]
        );
    }

    #[test]
    fn awaiting_a_decision_is_final_for_the_step_but_a_failure_is_not_hidden() {
        let limits = Limits {
            failures: 0,
            inconclusive: 1,
        };
        let s = run_trial(
            &[inconclusive(), inconclusive(), pass(0.0)],
            limits,
            Trial::default(),
        );
        assert_eq!(
            verdicts(&s),
            [
                Verdict::Inconclusive,
                Verdict::Inconclusive,
                Verdict::Inconclusive
            ]
        );
        assert!(s[1].awaiting_decision && s[2].awaiting_decision);
        assert!(
            s[2].message
                .as_deref()
                .unwrap()
                .starts_with("inconclusive earlier in this step"),
            "{:?}",
            s[2].message
        );
        let i = Duration::from_secs(30);
        assert_eq!(next_due(Some(&s[1]), i, t(1000)), None);
        let failed = record_with(
            Some(&s[1]),
            "errors",
            &fail(0.9),
            limits,
            Trial::default(),
            t(99),
        );
        assert_eq!(failed.verdict, Verdict::Failed);
        assert!(!failed.awaiting_decision);
    }

    #[test]
    fn a_dry_run_is_recorded_like_any_gate() {
        let dry = Trial {
            dry_run: true,
            ..Trial::default()
        };
        let s = run_trial(&[fail(0.2)], STRICT, dry);
        assert_eq!(verdicts(&s), [Verdict::Failed]);
        assert!(s[0].dry_run);
        let real = run_trial(&[fail(0.2)], STRICT, Trial::default());
        assert_eq!(
            GateStatus {
                dry_run: false,
                ..s[0].clone()
            },
            real[0]
        );
    }

    fn any_result() -> impl proptest::strategy::Strategy<Value = GateResult> {
        use proptest::prelude::*;
        prop_oneof![
            (0.0f64..1.0).prop_map(|v| GateResult::Pass { value: v }),
            (0.0f64..1.0).prop_map(|v| GateResult::Fail {
                value: Some(v),
                reason: "bad".into()
            }),
            Just(GateResult::Inconclusive {
                reason: "no data".into()
            }),
            Just(GateResult::Error {
                reason: "refused".into()
            }),
            Just(GateResult::Refused {
                reason: "host h:80 is not allowed".into()
            }),
        ]
    }

    /// A call the policy refuses is configuration, not a health verdict:
    /// however often it is refused, the gate is neither failed nor passed
    /// nor awaiting a decision, nothing is counted against it, and its
    /// status says so ([`is_refused`]). Once allowed, it is judged as usual.
    #[test]
    fn a_refusal_by_policy_holds_the_gate_and_counts_nothing() {
        let refused = GateResult::Refused {
            reason: "host prometheus.monitoring.svc:9090 is not allowed".into(),
        };
        let s = run_trial(
            &[refused.clone(), refused.clone(), refused.clone()],
            STRICT,
            Trial::default(),
        );
        assert_eq!(
            verdicts(&s),
            [Verdict::Pending, Verdict::Pending, Verdict::Pending]
        );
        for st in &s {
            assert_eq!(
                (st.failures, st.inconclusive, st.consecutive_errors),
                (0, 0, 0)
            );
            assert!(!st.awaiting_decision);
            assert!(is_refused(st), "{st:?}");
            assert!(
                st.message
                    .as_deref()
                    .unwrap()
                    .contains("prometheus.monitoring.svc:9090"),
                "{st:?}"
            );
        }
        // Still due: asked again at its interval, so it goes on once allowed.
        let i = Duration::from_secs(30);
        assert_eq!(next_due(s.last(), i, t(1000)), Some(Duration::ZERO));
        let allowed = record(s.last(), "errors", &pass(0.0), 0, 3, t(1000));
        assert_eq!(allowed.verdict, Verdict::Passed);
        assert!(!is_refused(&allowed));
        // An error is not a refusal, even with the word in it.
        let e = record(None, "errors", &error(), 0, 3, t(0));
        assert!(!is_refused(&e));
    }

    proptest::proptest! {
        /// Whatever the results: inconclusive results alone never fail a
        /// gate nor pass it; once Failed or awaiting a decision it stays so;
        /// Passed only right after `consecutive_successes` passes in a row;
        /// errors alone never pass.
        #[test]
        fn record_with_invariants(
            results in proptest::collection::vec(any_result(), 1..30),
            failures in 0i32..4,
            inconclusive in 0i32..4,
            successes in 1i32..4,
            errors in 1i32..4,
        ) {
            let limits = Limits { failures, inconclusive };
            let s = run_trial(&results, limits, trial(successes, errors));
            let mut passes_in_a_row = 0;
            for (i, (r, st)) in results.iter().zip(&s).enumerate() {
                passes_in_a_row = match r {
                    GateResult::Pass { .. } => passes_in_a_row + 1,
                    GateResult::Error { .. } => passes_in_a_row,
                    _ => 0,
                };
                if st.verdict == Verdict::Passed {
                    proptest::prop_assert!(passes_in_a_row >= successes || i > 0 && s[i - 1].verdict == Verdict::Passed);
                }
                if i > 0 && s[i - 1].verdict == Verdict::Failed {
                    proptest::prop_assert_eq!(st.verdict, Verdict::Failed);
                }
                if i > 0 && s[i - 1].awaiting_decision {
                    proptest::prop_assert!(st.awaiting_decision || st.verdict == Verdict::Failed);
                }
                proptest::prop_assert!(!(st.awaiting_decision && st.verdict != Verdict::Inconclusive));
            }
            let only_inconclusive = results.iter().all(|r| matches!(r, GateResult::Inconclusive { .. }));
            if only_inconclusive {
                proptest::prop_assert!(s.iter().all(|st| st.verdict == Verdict::Inconclusive));
                proptest::prop_assert_eq!(s.last().map(|st| st.awaiting_decision), Some(results.len() as i32 > inconclusive));
            }
            if results.iter().all(|r| matches!(r, GateResult::Error { .. })) {
                proptest::prop_assert!(s.iter().all(|st| st.verdict != Verdict::Passed));
            }
            // A refusal by policy never fails a gate, passes it or asks a
            // human: it leaves every count as it was.
            for (i, (r, st)) in results.iter().zip(&s).enumerate() {
                if matches!(r, GateResult::Refused { .. }) {
                    let before = if i > 0 { Some(&s[i - 1]) } else { None };
                    let was_failed = before.is_some_and(|b| b.verdict == Verdict::Failed);
                    let was_awaiting = before.is_some_and(|b| b.awaiting_decision);
                    if !was_failed && !was_awaiting {
                        proptest::prop_assert_eq!(st.verdict, Verdict::Pending);
                        proptest::prop_assert!(!st.awaiting_decision);
                    }
                    proptest::prop_assert_eq!(st.failures, before.map_or(0, |b| b.failures));
                    proptest::prop_assert_eq!(st.inconclusive, before.map_or(0, |b| b.inconclusive));
                }
            }
        }
    }
}
