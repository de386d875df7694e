//! `kubectl releaseplan wait`: the pure decision (has the current generation
//! of a plan settled, and how?), its exit codes, and the wait itself, which
//! `set image --wait` and `restart --wait` run too.

use super::connect::Ctx;
use super::error::CliError;
use super::text::{progress_line, stamp};
use super::view::{self, Format};
use crate::api::time::parse_duration;
use crate::api::{ANNOTATION_REQUEST, Phase, ReleasePlan};
use crate::plan::conditions::STALLED;
use crate::plan::reasons::ConditionReason;
use clap::Args;
use futures::StreamExt;
use kube::ResourceExt;
use std::time::Duration;

/// Exit code: the current generation is `Stable`.
pub const EXIT_STABLE: i32 = 0;
/// Exit code: an error (plan not found, no cluster, CRD missing, bad arguments, ...).
pub const EXIT_ERROR: i32 = 1;
/// Exit code: the current generation was rolled back (`RolledBack`).
pub const EXIT_ROLLED_BACK: i32 = 2;
/// Exit code: `Stalled=True` for another reason (`InvalidSpec`, `RolloutHalted`,
/// `RollbackSlow`, `GatePolicyRefused`): nothing moves without a human.
pub const EXIT_STALLED: i32 = 3;
/// Exit code: the timeout passed first.
pub const EXIT_TIMEOUT: i32 = 4;

/// Where a plan stands for `wait`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not settled yet; the text says what is awaited.
    Waiting(String),
    /// Settled: the exit code and a sentence for the log.
    Done(i32, String),
}

/// Decides whether the current generation of `plan` has settled.
///
/// * `Done(0)`: phase `Stable` and `status.observedGeneration == metadata.generation`.
/// * `Done(2)`: phase `RolledBack` for the current generation.
/// * `Done(3)`: condition `Stalled=True` for the current generation with another
///   reason than `RolledBack` (`InvalidSpec`, `RolloutHalted`, `RollbackSlow`).
/// * `Waiting` otherwise, and while a plugin request (annotation
///   `releaseplan.io/request`) is not acknowledged yet: the status may predate it.
pub fn decide(plan: &ReleasePlan) -> Decision {
    let generation = plan.metadata.generation;
    let Some(status) = plan.status.as_ref() else {
        return Decision::Waiting("the operator has not written a status yet".into());
    };
    if let Some(request) = plan.annotations().get(ANNOTATION_REQUEST)
        && status.acknowledged_request.as_deref() != Some(request.as_str())
    {
        return Decision::Waiting(format!(
            "request {request} is not acknowledged by the operator yet"
        ));
    }
    let current = status.observed_generation.is_some() && status.observed_generation == generation;
    let message = status.message.clone().unwrap_or_default();
    if current && status.phase == Phase::Stable {
        let revision = status.current_revision.as_deref().unwrap_or("none");
        return Decision::Done(EXIT_STABLE, format!("revision {revision} is stable"));
    }
    if current && status.phase == Phase::RolledBack {
        return Decision::Done(EXIT_ROLLED_BACK, format!("rolled back: {message}"));
    }
    if let Some(stalled) = status.conditions.iter().find(|c| {
        c.type_ == STALLED && c.status == "True" && c.reason != ConditionReason::RolledBack.as_str()
    }) {
        let condition_generation = stalled.observed_generation.or(status.observed_generation);
        if condition_generation.is_some() && condition_generation == generation {
            return Decision::Done(
                EXIT_STALLED,
                format!("stalled ({}): {}", stalled.reason, stalled.message),
            );
        }
    }
    if !current {
        return Decision::Waiting(format!(
            "generation {} is not observed by the operator yet",
            generation.unwrap_or(0)
        ));
    }
    Decision::Waiting(format!("{}: {message}", status.phase))
}

/// The `result` word of an exit code of `wait`.
pub fn wait_result_word(code: i32) -> &'static str {
    match code {
        EXIT_STABLE => "Stable",
        EXIT_ROLLED_BACK => "RolledBack",
        EXIT_STALLED => "Stalled",
        EXIT_TIMEOUT => "TimedOut",
        _ => "Error",
    }
}

/// `--wait` and its options, for the commands that change the spec.
#[derive(Args, Debug, Clone)]
pub struct WaitArgs {
    /// Then wait for the new generation to settle, as `wait` does, with its exit codes.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this long (exit 4).
    #[arg(long, default_value = "10m", value_parser = parse_duration, requires = "wait")]
    pub timeout: Duration,
    /// With --wait: print one result document at the end, as `wait -o` does.
    #[arg(short, long, value_enum, requires = "wait")]
    pub output: Option<Format>,
}

/// Waits for the current generation of `name` to settle. Without `output` the
/// log lines go to stdout (for CI logs); with it they go to stderr and stdout
/// gets one [`WaitResult`](view::WaitResult) document.
pub(super) async fn wait_for(
    ctx: &Ctx,
    name: &str,
    timeout: Duration,
    output: Option<Format>,
) -> Result<i32, CliError> {
    let log = |line: String| {
        if output.is_some() {
            eprintln!("{}  {line}", stamp());
        } else {
            println!("{}  {line}", stamp());
        }
    };
    let plan = ctx.plan(name).await?;
    let ns = ctx.namespace.clone();
    log(format!(
        "waiting up to {}s for releaseplan {ns}/{name} generation {} to settle",
        timeout.as_secs(),
        plan.metadata.generation.unwrap_or(0)
    ));
    let mut last_line = String::new();
    let mut last_plan = plan.clone();
    let mut report = |plan: &ReleasePlan| -> Option<(i32, String)> {
        let line = progress_line(plan);
        if line != last_line {
            log(line.clone());
            last_line = line;
        }
        last_plan = plan.clone();
        match decide(plan) {
            Decision::Done(code, why) => {
                log(format!("done (exit {code}): {why}"));
                Some((code, why))
            }
            Decision::Waiting(_) => None,
        }
    };
    let settled = if let Some(done) = report(&plan) {
        Some(done)
    } else {
        let watching = async {
            let changes = ctx.plan_changes(name);
            futures::pin_mut!(changes);
            while let Some(change) = changes.next().await {
                match change {
                    Some(plan) => {
                        if let Some(done) = report(&plan) {
                            return Ok(done);
                        }
                    }
                    None => return Err(CliError::Deleted(name.to_string())),
                }
            }
            Err(CliError::Deleted(name.to_string()))
        };
        match tokio::time::timeout(timeout, watching).await {
            Ok(r) => Some(r?),
            Err(_) => None,
        }
    };
    let (code, reason) = settled.unwrap_or_else(|| {
        log(format!(
            "timed out after {}s (exit {EXIT_TIMEOUT}): {last_line}",
            timeout.as_secs()
        ));
        (EXIT_TIMEOUT, format!("timed out: {last_line}"))
    });
    if let Some(f) = output {
        let doc = view::WaitResult {
            api_version: view::API_VERSION,
            kind: "WaitResult",
            exit_code: code,
            result: wait_result_word(code),
            reason,
            plan: view::plan_view(&last_plan, None),
        };
        print!("{}", view::to_text(&doc, f, false));
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::fixtures::plan_json;
    use serde_json::{Value, json};

    fn with(f: impl FnOnce(&mut Value)) -> ReleasePlan {
        let mut v = plan_json();
        f(&mut v);
        serde_json::from_value(v).unwrap()
    }

    fn code(d: &Decision) -> Option<i32> {
        match d {
            Decision::Done(c, _) => Some(*c),
            Decision::Waiting(_) => None,
        }
    }

    fn stalled(reason: &str, generation: i64) -> Value {
        json!({"type": "Stalled", "status": "True", "reason": reason, "message": "why",
               "observedGeneration": generation, "lastTransitionTime": "2025-01-01T00:00:00Z"})
    }

    #[test]
    fn rolling_out_waits() {
        let d = decide(&with(|_| {}));
        assert_eq!(code(&d), None, "{d:?}");
        assert!(matches!(&d, Decision::Waiting(w) if w.starts_with("RollingOut: rolling out")));
    }

    #[test]
    fn no_status_waits() {
        let d = decide(&with(|v| {
            v.as_object_mut().unwrap().remove("status");
        }));
        assert_eq!(
            d,
            Decision::Waiting("the operator has not written a status yet".into())
        );
    }

    #[test]
    fn stable_current_generation_is_0() {
        let d = decide(&with(|v| v["status"]["phase"] = json!("Stable")));
        assert_eq!(d, Decision::Done(0, "revision tn5wd9cz2h is stable".into()));
    }

    /// A new revision the GatePolicy holds: the plan stays Stable on its
    /// old generation, and its Stalled condition, judged on the new one,
    /// ends `wait` with 3 rather than a wait until the timeout.
    #[test]
    fn a_new_generation_held_by_the_policy_is_3() {
        let d = decide(&with(|v| {
            v["status"]["phase"] = json!("Stable");
            v["metadata"]["generation"] = json!(4);
            v["status"]["conditions"] = json!([stalled("GatePolicyRefused", 4)]);
        }));
        assert_eq!(code(&d), Some(3), "{d:?}");
        assert!(
            matches!(&d, Decision::Done(_, m) if m.starts_with("stalled (GatePolicyRefused)")),
            "{d:?}"
        );
    }

    #[test]
    fn stable_old_generation_waits() {
        let d = decide(&with(|v| {
            v["status"]["phase"] = json!("Stable");
            v["metadata"]["generation"] = json!(4);
        }));
        assert_eq!(
            d,
            Decision::Waiting("generation 4 is not observed by the operator yet".into())
        );
    }

    #[test]
    fn rolled_back_current_generation_is_2() {
        let d = decide(&with(|v| {
            v["status"]["phase"] = json!("RolledBack");
            v["status"]["conditions"] = json!([stalled("RolledBack", 3)]);
        }));
        assert_eq!(code(&d), Some(2), "{d:?}");
    }

    #[test]
    fn rolled_back_old_generation_waits() {
        // The spec changed after a rollback: the new generation will roll out.
        let d = decide(&with(|v| {
            v["status"]["phase"] = json!("RolledBack");
            v["status"]["conditions"] = json!([stalled("RolledBack", 3)]);
            v["metadata"]["generation"] = json!(4);
        }));
        assert_eq!(code(&d), None, "{d:?}");
    }

    #[test]
    fn stalled_other_reasons_are_3() {
        for reason in ["InvalidSpec", "RolloutHalted", "RollbackSlow"] {
            let d = decide(&with(|v| {
                v["status"]["conditions"] = json!([stalled(reason, 3)]);
            }));
            assert_eq!(code(&d), Some(3), "{reason}: {d:?}");
            assert!(matches!(&d, Decision::Done(_, m) if m.contains(reason)));
        }
    }

    #[test]
    fn invalid_spec_counts_with_the_condition_generation() {
        // With an invalid spec the operator leaves status.observedGeneration behind
        // but stamps the condition with the generation it looked at.
        let d = decide(&with(|v| {
            v["metadata"]["generation"] = json!(5);
            v["status"]["conditions"] = json!([stalled("InvalidSpec", 5)]);
        }));
        assert_eq!(code(&d), Some(3), "{d:?}");
    }

    #[test]
    fn stalled_of_an_old_generation_waits() {
        let d = decide(&with(|v| {
            v["metadata"]["generation"] = json!(5);
            v["status"]["conditions"] = json!([stalled("RolloutHalted", 3)]);
        }));
        assert_eq!(code(&d), None, "{d:?}");
    }

    #[test]
    fn stalled_false_waits() {
        let d = decide(&with(|v| {
            v["status"]["conditions"] = json!([{"type": "Stalled", "status": "False", "reason": "RollingOut",
                "message": "", "observedGeneration": 3, "lastTransitionTime": "2025-01-01T00:00:00Z"}]);
        }));
        assert_eq!(code(&d), None, "{d:?}");
    }

    #[test]
    fn unacknowledged_request_waits() {
        let p = with(|v| {
            v["status"]["phase"] = json!("RolledBack");
            v["metadata"]["annotations"] = json!({"releaseplan.io/request": "retry/1"});
        });
        assert!(matches!(decide(&p), Decision::Waiting(w) if w.contains("retry/1")));
        let p = with(|v| {
            v["status"]["phase"] = json!("RolledBack");
            v["metadata"]["annotations"] = json!({"releaseplan.io/request": "retry/1"});
            v["status"]["acknowledgedRequest"] = json!("retry/1");
        });
        assert_eq!(code(&decide(&p)), Some(2));
    }

    #[test]
    fn pending_and_rollback_in_progress_wait() {
        for phase in ["Pending", "RollbackInProgress"] {
            let d = decide(&with(|v| v["status"]["phase"] = json!(phase)));
            assert_eq!(code(&d), None, "{phase}: {d:?}");
        }
    }
}
