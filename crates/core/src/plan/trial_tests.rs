//! Trialled gates (`dryRun`) and gates past their `inconclusiveLimit`, in
//! the simulated cluster of `plan::tests`: the runner's verdicts are set by
//! the test, the machine decides.

use super::*;
use crate::api::{Gate, JobCheck, PrometheusCheck};
use crate::gates::job::JobState;

fn prom_gate(name: &str, dry_run: bool) -> Gate {
    Gate {
        name: name.into(),
        prometheus: Some(PrometheusCheck {
            address: "http://prometheus:9090".into(),
            query: "up".into(),
            threshold: "< 0.05".into(),
            ..Default::default()
        }),
        dry_run: dry_run.then_some(true),
        ..Default::default()
    }
}

/// The canary plan with two Prometheus gates: `latency` and `errors`, the
/// latter a dry run when asked.
fn gated_spec(errors_dry_run: bool) -> ReleasePlanSpec {
    let mut s = canary_spec();
    s.health.gates = vec![
        prom_gate("latency", false),
        prom_gate("errors", errors_dry_run),
    ];
    s
}

/// One reconcile with the runner's verdicts replaced by `over` (by name;
/// the other gates pass), then the pods made ready.
fn reconcile_with(sim: &mut Sim, over: &[GateStatus]) -> Decision {
    let mut obs = sim.observe();
    for o in over {
        if let Some(g) = obs.gates.iter_mut().find(|g| g.name == o.name) {
            *g = o.clone();
        }
    }
    let d = decide(&obs, &sim.templates());
    sim.apply(&d);
    sim.pods_ready();
    d
}

fn failed_errors() -> GateStatus {
    GateStatus {
        name: "errors".into(),
        verdict: Verdict::Failed,
        value: Some("0.5".into()),
        failures: 1,
        message: Some(
            "value 0.5 is not < 0.05: 1 failed evaluations, more than the 0 allowed".into(),
        ),
        ..Default::default()
    }
}

fn awaiting_errors() -> GateStatus {
    GateStatus {
        name: "errors".into(),
        verdict: Verdict::Inconclusive,
        inconclusive: 4,
        awaiting_decision: true,
        message: Some(
            "query returned no data: 4 inconclusive evaluations, more than the 3 allowed; the rollout waits for promote or abort".into(),
        ),
        ..Default::default()
    }
}

fn events_of<'a>(sim: &'a Sim, reason: &str) -> Vec<&'a EventIntent> {
    sim.events
        .iter()
        .filter(|e| e.reason.as_str() == reason)
        .collect()
}

fn condition_of<'a>(
    sim: &'a Sim,
    type_: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    sim.status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap()
}

#[test]
fn a_failed_dry_run_gate_is_recorded_and_never_stops_the_rollout() {
    for dry_run in [true, false] {
        let mut sim = stable_sim(gated_spec(dry_run));
        sim.change_image("web", "shop:2");
        for _ in 0..40 {
            reconcile_with(&mut sim, &[failed_errors()]);
            sim.advance(10);
            if sim.status.phase != Phase::RollingOut || sim.status.current_step >= 3 {
                break;
            }
        }
        if !dry_run {
            // The same verdict of a real gate rolls back: the control.
            assert_eq!(sim.status.phase, Phase::RollbackInProgress);
            assert_eq!(sim.status.failure.as_ref().unwrap().gate, "errors");
            continue;
        }
        // The runner's verdict of the new step, recorded.
        reconcile_with(&mut sim, &[failed_errors()]);
        assert_eq!(sim.status.phase, Phase::RollingOut);
        assert!(sim.status.failure.is_none(), "{:?}", sim.status.failure);
        // Past weight 20 and the 30s pause, at the pause that waits for promotion.
        assert_eq!(sim.status.current_step, 3);
        let g = sim
            .status
            .gates
            .iter()
            .find(|g| g.name == "errors")
            .unwrap();
        assert_eq!(g.verdict, Verdict::Failed);
        assert!(g.dry_run);
        let failed = events_of(&sim, "GateFailed");
        assert!(!failed.is_empty());
        assert!(
            failed
                .iter()
                .all(|e| e.message.starts_with("gate errors (dry run): value 0.5")),
            "{failed:?}"
        );
        assert!(!sim.has_event("RollbackStarted"));
        sim.ask(Action::Promote { full: false });
        reconcile_with(&mut sim, &[failed_errors()]);
        for _ in 0..10 {
            reconcile_with(&mut sim, &[failed_errors()]);
        }
        assert_eq!(sim.status.phase, Phase::Stable);
    }
}

#[test]
fn a_dry_run_gate_past_its_inconclusive_limit_pauses_nothing() {
    let mut sim = stable_sim(gated_spec(true));
    sim.change_image("web", "shop:2");
    for _ in 0..40 {
        reconcile_with(&mut sim, &[awaiting_errors()]);
        sim.advance(10);
        if sim.status.current_step >= 3 {
            break;
        }
    }
    assert_eq!(sim.status.current_step, 3);
    assert!(!sim.has_event("RolloutAwaitingDecision"));
    let ev = events_of(&sim, "GateInconclusive");
    assert!(
        ev.iter()
            .any(|e| e.message.contains("(dry run)")
                && e.message.contains("a dry run pauses nothing")),
        "{ev:?}"
    );
    assert_ne!(condition_of(&sim, "Paused").reason, "GateInconclusive");
}

#[test]
fn an_inconclusive_gate_pauses_until_promoted_and_never_fails_or_promotes() {
    let mut sim = stable_sim(gated_spec(false));
    sim.change_image("web", "shop:2");
    let started = sim.status.rollout_count;
    for _ in 0..30 {
        reconcile_with(&mut sim, &[awaiting_errors()]);
        sim.advance(60);
    }
    // Thirty minutes on, far past the progress deadline and every pause:
    // still at step 0, neither failed nor advanced.
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!(
        sim.status.rollout_count,
        started + 1,
        "one rollout, not restarted"
    );
    assert_eq!(sim.status.current_step, 0);
    assert!(sim.status.failure.is_none());
    assert!(sim.status.awaits_decision());
    let paused = condition_of(&sim, "Paused");
    assert_eq!(
        (paused.status.as_str(), paused.reason.as_str()),
        ("True", "GateInconclusive")
    );
    assert!(
        paused
            .message
            .starts_with("gate errors is inconclusive: query returned no data"),
        "{}",
        paused.message
    );
    assert_eq!(condition_of(&sim, "Progressing").reason, "GateInconclusive");
    assert_eq!(condition_of(&sim, "Stalled").status, "False");
    assert!(
        sim.status
            .message
            .as_deref()
            .unwrap()
            .contains("paused: gate errors is inconclusive"),
        "{:?}",
        sim.status.message
    );
    // One Event says so, naming the gate and why.
    let ev = events_of(&sim, "RolloutAwaitingDecision");
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].type_, EventType::Warning);
    assert!(
        ev[0]
            .message
            .starts_with("gate errors is inconclusive: query returned no data"),
        "{}",
        ev[0].message
    );

    // abort rolls back.
    let mut aborted = sim.clone();
    aborted.ask(Action::Abort);
    reconcile_with(&mut aborted, &[awaiting_errors()]);
    assert_eq!(aborted.status.phase, Phase::RollbackInProgress);
    assert_eq!(aborted.status.failure.as_ref().unwrap().gate, "abort");

    // retry evaluates the step's gates again.
    let mut retried = sim.clone();
    retried.ask(Action::Retry);
    reconcile_with(&mut retried, &[awaiting_errors()]);
    assert!(!retried.has_event("RequestIgnored"));
    assert_eq!(events_of(&retried, "RetryRequested").len(), 1);
    assert_eq!(retried.status.current_step, 0);
    assert!(retried.status.gates.is_empty());
    assert_eq!(retried.status.step_started_at, Some(retried.now));
    assert!(!retried.status.awaits_decision());

    // promote goes on to the next step, where every gate is asked afresh.
    sim.ask(Action::Promote { full: false });
    reconcile_with(&mut sim, &[awaiting_errors()]);
    assert_eq!(sim.status.current_step, 1);
    assert!(sim.status.gates.is_empty());
    let advanced = events_of(&sim, "StepAdvanced");
    assert!(
        advanced
            .last()
            .unwrap()
            .message
            .ends_with("(promoted by request over inconclusive gate errors)"),
        "{advanced:?}"
    );
    assert_eq!(condition_of(&sim, "Paused").status, "False");
}

#[test]
fn an_inconclusive_gate_at_the_final_step_is_promoted_to_stable() {
    let mut sim = Sim::new(gated_spec(false));
    for _ in 0..10 {
        reconcile_with(&mut sim, &[awaiting_errors()]);
        sim.advance(60);
    }
    // The first release goes straight to the final step; it waits there.
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert!(sim.status.awaits_decision());
    sim.ask(Action::Promote { full: true });
    reconcile_with(&mut sim, &[awaiting_errors()]);
    assert_eq!(sim.status.phase, Phase::Stable);
}

#[test]
fn a_dry_run_job_gate_runs_its_job_and_its_failure_stops_nothing() {
    let mut s = spec(vec![component("web", "v1", 4)], vec![weight(50)]);
    s.health.gates = vec![Gate {
        name: "smoke".into(),
        job: Some(JobCheck {
            template: serde_json::json!({"spec": {"template": {"spec": {"containers": [{"name": "t", "image": "curl"}]}}}}),
            timeout_seconds: Some(60),
        }),
        dry_run: Some(true),
        ..Default::default()
    }];
    let mut sim = Sim::new(s);
    let fail_jobs = |sim: &mut Sim| {
        for _ in 0..10 {
            sim.reconcile();
            sim.pods_ready();
            for j in &mut sim.jobs {
                if j.state == JobState::Running {
                    j.state = JobState::Failed {
                        reason: "BackoffLimitExceeded".into(),
                        message: "Job has reached the specified backoff limit".into(),
                    };
                }
            }
            sim.advance(1);
        }
    };
    fail_jobs(&mut sim);
    assert_eq!(sim.status.phase, Phase::Stable);
    let created = sim.jobs_created.len();
    assert_eq!(created, 1);
    sim.change_image("web", "v2");
    fail_jobs(&mut sim);
    // One Job in the step and one in the final step: each step waited for it.
    assert_eq!(
        sim.jobs_created.len(),
        created + 2,
        "{:?}",
        sim.jobs_created
    );
    let failed = events_of(&sim, "GateFailed");
    assert!(
        failed
            .iter()
            .all(|e| e.message.starts_with("gate smoke (dry run): Job ")),
        "{failed:?}"
    );
    assert!(!failed.is_empty());
    assert_eq!(sim.status.phase, Phase::Stable, "{:?}", sim.status.failure);
    assert!(sim.status.failure.is_none());
    assert!(!sim.has_event("RollbackStarted"));
}

#[test]
fn trial_settings_are_read_from_the_gates_list_with_defaults() {
    let mut s = gated_spec(true);
    s.health.gates[0].consecutive_successes = Some(3);
    s.health.gates[0].consecutive_errors = Some(0);
    let t = Target::from_spec(&s).unwrap();
    assert_eq!(
        t.trial("latency"),
        crate::api::Trial {
            dry_run: false,
            consecutive_successes: 3,
            consecutive_errors: 1,
        }
    );
    assert!(t.dry_run("errors"));
    assert_eq!(t.trial("errors").consecutive_errors, 2);
    assert_eq!(t.trial("nope"), crate::api::Trial::default());
}

#[test]
fn an_inconclusive_pause_is_announced_once_as_paused_naming_the_gate() {
    use crate::notify::Trigger;
    let mut sim = stable_sim(gated_spec(false));
    sim.change_image("web", "shop:2");
    let mut paused = Vec::new();
    for _ in 0..10 {
        let d = reconcile_with(&mut sim, &[awaiting_errors()]);
        paused.extend(
            d.notices
                .into_iter()
                .filter(|n| n.trigger == Trigger::Paused),
        );
        sim.advance(60);
    }
    assert!(sim.status.awaits_decision());
    assert_eq!(paused.len(), 1, "{paused:?}");
    assert_eq!(paused[0].gate.as_deref(), Some("errors"));
    assert_eq!(paused[0].reason.as_deref(), Some("GateInconclusive"));
    assert!(
        paused[0].message.contains("gate errors is inconclusive"),
        "{}",
        paused[0].message
    );
}
