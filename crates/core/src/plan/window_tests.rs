//! Release windows and freezes on the simulated cluster: a held start, a held
//! step, the override, and what is never held (rollback, abort, deletion).

use super::*;
use crate::api::window::{ReleaseWindow, Weekday};

/// Weekdays 09:00 to 17:00 UTC (the simulation starts on Sunday 2026-11-29 12:00).
fn office_hours() -> ReleaseWindow {
    ReleaseWindow {
        days: vec![
            Weekday::Mon,
            Weekday::Tue,
            Weekday::Wed,
            Weekday::Thu,
            Weekday::Fri,
        ],
        start: "09:00".into(),
        end: "17:00".into(),
        time_zone: None,
    }
}

/// Timed steps only, so that nothing but the window holds the rollout.
fn timed_spec() -> ReleasePlanSpec {
    spec(
        vec![component("web", "shop:1", 10)],
        vec![weight(20), pause(Some("30s")), weight(50)],
    )
}

fn windowed(mut s: ReleasePlanSpec) -> ReleasePlanSpec {
    s.strategy.windows = vec![office_hours()];
    s
}

fn reason_of(sim: &Sim, type_: &str) -> String {
    sim.status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

fn monday_nine() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap()
}

#[test]
fn a_new_revision_waits_for_the_window_with_the_stable_one_serving() {
    let mut sim = stable_sim(windowed(timed_spec()));
    let old = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    let new = sim.hash_of("web");
    let d = sim.reconcile();
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!((sim.at("web", &old), sim.at("web", &new)), (10, 0));
    assert_eq!(reason_of(&sim, "Progressing"), "OutsideReleaseWindow");
    assert_eq!(reason_of(&sim, "Ready"), "OutsideReleaseWindow");
    assert_eq!(sim.condition("Ready").as_deref(), Some("False"));
    assert_eq!(sim.condition("Stalled").as_deref(), Some("False"));
    assert_eq!(sim.condition("Reconciling").as_deref(), Some("True"));
    let msg = sim.status.message.clone().unwrap();
    assert!(
        msg.contains("waits to start") && msg.contains("2026-11-30T09:00:00+00:00"),
        "{msg}"
    );
    // Held once: one RolloutHeld Event, not one per reconcile.
    assert_eq!(
        d.events
            .iter()
            .filter(|e| e.reason == EventReason::RolloutHeld)
            .count(),
        1
    );
    sim.events.clear();
    sim.reconcile();
    assert!(!sim.has_event("RolloutHeld"));
    // It wakes when the window opens (21h away), not before.
    let left = sim.last.as_ref().unwrap().requeue_after.unwrap();
    assert_eq!(left, Duration::from_secs(3600), "bounded to an hour");
    // Monday 09:00: the rollout starts and runs to the end.
    sim.now = monday_nine();
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    for _ in 0..5 {
        sim.settle();
        sim.advance(31);
    }
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.at("web", &new), 10);
}

/// A rollout started by the override, held at its next step.
fn held_rollout() -> (Sim, String) {
    let mut sim = stable_sim(windowed(timed_spec()));
    sim.change_image("web", "shop:2");
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::Stable);
    sim.ask(Action::OverrideWindow);
    let d = sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    let overridden: Vec<_> = d
        .events
        .iter()
        .filter(|e| e.reason == EventReason::WindowOverridden)
        .collect();
    assert_eq!(overridden.len(), 1, "{:?}", d.events);
    assert_eq!(overridden[0].type_, EventType::Warning);
    assert!(
        overridden[0].message.contains("override-window/req-"),
        "{}",
        overridden[0].message
    );
    sim.settle();
    sim.advance(600);
    sim.settle();
    let new = sim.hash_of("web");
    (sim, new)
}

#[test]
fn outside_the_window_a_rollout_waits_at_its_next_step() {
    let (mut sim, new) = held_rollout();
    assert_eq!(
        (sim.status.phase, sim.status.current_step),
        (Phase::RollingOut, 0)
    );
    assert_eq!(sim.at("web", &new), 2);
    assert_eq!(reason_of(&sim, "Progressing"), "OutsideReleaseWindow");
    // The step is done and held: no hot loop, the next look is bounded.
    let d = sim.reconcile();
    assert!(d.requeue_after.unwrap() >= Duration::from_secs(60), "{d:?}");
    // A plain promote is held, and says so.
    sim.events.clear();
    sim.ask(Action::Promote { full: true });
    sim.reconcile();
    assert_eq!(sim.status.current_step, 0);
    assert!(sim.has_event("RequestIgnored"));
    assert!(sim.request.is_none(), "acknowledged, not retried forever");
    // The override takes exactly one step.
    sim.ask(Action::OverrideWindow);
    sim.reconcile();
    assert_eq!(sim.status.current_step, 1);
    sim.advance(120);
    sim.settle();
    assert_eq!(
        sim.status.current_step, 1,
        "the timed pause ended, still held"
    );
    sim.now = monday_nine();
    for _ in 0..5 {
        sim.settle();
        sim.advance(31);
    }
    assert_eq!(sim.status.phase, Phase::Stable);
}

#[test]
fn a_crash_loop_rolls_back_while_held() {
    let (mut sim, new) = held_rollout();
    sim.crashing.insert(new.clone());
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollbackInProgress);
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!(sim.at("web", &new), 0);
}

#[test]
fn abort_and_deletion_are_never_held() {
    let (mut sim, _) = held_rollout();
    sim.ask(Action::Abort);
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollbackInProgress);
    let (mut sim, _) = held_rollout();
    sim.deleting = true;
    sim.settle();
    assert!(sim.finalized);
}

#[test]
fn a_freeze_holds_until_its_end_and_the_window_does_not_matter() {
    let mut sim = stable_sim(timed_spec());
    let start = sim.now - chrono::Duration::hours(1);
    let end = sim.now + chrono::Duration::minutes(30);
    sim.freezes = vec![windows::Freeze {
        name: "xmas".into(),
        start,
        end: Some(end),
        reason: Some("holidays".into()),
    }];
    sim.change_image("web", "shop:2");
    let d = sim.reconcile();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(reason_of(&sim, "Progressing"), "ReleaseFrozen");
    assert!(
        sim.status
            .message
            .as_deref()
            .unwrap()
            .contains("xmas (holidays)"),
        "{:?}",
        sim.status.message
    );
    assert_eq!(
        d.requeue_after,
        Some(Duration::from_secs(1800) + Duration::from_millis(500))
    );
    sim.now = end;
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    // A first release is never held: nothing runs to protect.
    let mut first = Sim::new(timed_spec());
    first.freezes = sim.freezes.clone();
    first.now = start;
    first.settle();
    assert_eq!(first.status.phase, Phase::Stable);
}

#[test]
fn a_retry_after_a_rollback_is_held_too() {
    let (mut sim, new) = held_rollout();
    sim.crashing.insert(new);
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    sim.crashing.clear();
    sim.ask(Action::Retry);
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert!(sim.has_event("RequestIgnored"));
    assert_eq!(reason_of(&sim, "Stalled"), "RolledBack");
    sim.change_image("web", "shop:3");
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!(reason_of(&sim, "Progressing"), "OutsideReleaseWindow");
    assert_eq!(sim.condition("Stalled").as_deref(), Some("False"));
}

/// The same observation with a freeze in force.
fn frozen(obs: &Observation) -> Observation {
    let mut o = obs.clone();
    if let Ok(t) = &mut o.target {
        t.freezes = vec![windows::Freeze {
            name: "always".into(),
            start: DateTime::UNIX_EPOCH,
            end: None,
            reason: None,
        }];
    }
    o
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Over random histories: wherever the free plan would roll back (a
    /// failure, an abort, a deletion) or is rolling back, the frozen plan
    /// decides exactly the same; and a freeze never starts or advances a
    /// rollout by itself.
    #[test]
    fn windows_never_hold_a_rollback(ops in proptest::collection::vec(op(), 1..80)) {
        let mut sim = Sim::new(prop_spec());
        let names = ["web", "api"];
        for op in ops {
            match op {
                Op::Reconcile => {
                    let obs = sim.observe();
                    let templates = sim.templates();
                    let free = decide(&obs, &templates);
                    let held = decide(&frozen(&obs), &templates);
                    let rollback = obs.status.phase == Phase::RollbackInProgress
                        || matches!(
                            free.transition,
                            machine::Cause::RollbackStarted(_)
                                | machine::Cause::RollbackDone { .. }
                                | machine::Cause::Halted(_)
                        );
                    if rollback {
                        prop_assert_eq!(&held.transition, &free.transition);
                        prop_assert_eq!(&held.deployments, &free.deployments);
                        prop_assert_eq!(held.status.phase, free.status.phase);
                        prop_assert_eq!(held.finalize, free.finalize);
                    }
                    let first = obs.status.stable_revision.is_none();
                    let moved = matches!(
                        held.transition,
                        machine::Cause::Advance { .. } | machine::Cause::Promoted
                    ) || held.transition == machine::Cause::Start { superseded: false };
                    prop_assert!(!moved || first, "a freeze let {:?} through", held.transition);
                    sim.apply(&free);
                    if sim.finalized {
                        return Ok(());
                    }
                }
                Op::PodsReady => sim.pods_ready(),
                Op::Advance(s) => sim.advance(s),
                Op::ChangeImage(c, v) => sim.change_image(names[c], &format!("{}:{v}", names[c])),
                Op::Crash(c) => {
                    let h = sim.hash_of(names[c]);
                    sim.crashing.insert(h);
                }
                Op::NeverReady(c) => {
                    let h = sim.hash_of(names[c]);
                    sim.never_ready.insert(h);
                }
                Op::Heal => {
                    sim.crashing.clear();
                    sim.never_ready.clear();
                }
                Op::Ask(a) => sim.ask(
                    [
                        Action::Promote { full: false },
                        Action::Promote { full: true },
                        Action::Abort,
                        Action::Retry,
                        Action::Pause,
                        Action::Resume,
                    ][usize::from(a)],
                ),
                Op::Replicas(c, r) => {
                    sim.spec.components[c].replicas = Some(r);
                    sim.generation += 1;
                }
                Op::Autoscale(c, r) => sim.autoscale(names[c], r),
                Op::Delete => sim.deleting = true,
                Op::SyncTraffic => sim.sync_traffic(),
            }
        }
    }
}
