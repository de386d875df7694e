//! Notices of whole rollouts on the simulated cluster: each transition
//! announced once, in order, with the status fields of its step.

use super::*;
use crate::notify::{Notice, Trigger};

/// Reconciles with ready pods until nothing changes, collecting notices.
fn settle_noting(sim: &mut Sim, out: &mut Vec<Notice>) {
    for _ in 0..50 {
        let before = (sim.status.clone(), sim.replicas());
        out.extend(sim.reconcile().notices);
        sim.pods_ready();
        if (sim.status.clone(), sim.replicas()) == before {
            return;
        }
    }
}

fn triggers(ns: &[Notice]) -> Vec<Trigger> {
    ns.iter().map(|n| n.trigger).collect()
}

#[test]
fn a_promoted_canary_announces_each_transition_once() {
    let mut sim = stable_sim(canary_spec());
    sim.change_image("web", "shop:2");
    let mut seen = Vec::new();
    settle_noting(&mut sim, &mut seen);
    sim.advance(31);
    settle_noting(&mut sim, &mut seen);
    // Held at `pause: {}` (step 4 of 4).
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!(
        triggers(&seen),
        vec![
            Trigger::RolloutStarted,
            Trigger::StepAdvanced,
            Trigger::StepAdvanced,
            Trigger::StepAdvanced,
            Trigger::Paused,
        ]
    );
    let paused = seen.last().unwrap();
    assert_eq!((paused.step, paused.steps, paused.weight), (4, 4, 50));
    assert!(paused.message.contains("waiting for promote or abort"));
    // Nothing more while it waits, however long.
    for _ in 0..3 {
        sim.advance(600);
        settle_noting(&mut sim, &mut seen);
    }
    assert_eq!(seen.len(), 5);
    sim.ask(Action::Promote { full: false });
    settle_noting(&mut sim, &mut seen);
    assert_eq!(
        triggers(&seen[5..]),
        vec![Trigger::StepAdvanced, Trigger::Promoted]
    );
    let promoted = seen.last().unwrap();
    assert_eq!(promoted.phase, Phase::Stable);
    assert_eq!(promoted.revision, sim.status.current_revision);
    assert_eq!(promoted.revision, sim.status.stable_revision);
    assert!(promoted.duration_seconds.unwrap() >= 31 + 1800);
    // Every key differs: a receiver deduplicating on ids keeps them all.
    let keys: BTreeSet<String> = seen.iter().map(Notice::key).collect();
    assert_eq!(keys.len(), seen.len());
}

#[test]
fn a_crash_loop_announces_rollback_start_and_end_with_its_reason() {
    let mut sim = stable_sim(canary_spec());
    let stable = sim.status.stable_revision.clone().unwrap();
    sim.change_image("web", "shop:bad");
    sim.crashing.insert(sim.hash_of("web"));
    let mut seen = sim.reconcile().notices;
    let bad = sim.status.current_revision.clone().unwrap();
    settle_noting(&mut sim, &mut seen);
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!(
        triggers(&seen),
        vec![
            Trigger::RolloutStarted,
            Trigger::RollbackStarted,
            Trigger::RolledBack
        ]
    );
    for n in &seen[1..] {
        assert_eq!(n.gate.as_deref(), Some("podHealth"));
        assert_eq!(n.reason.as_deref(), Some("CrashLoopBackOff"));
        assert_eq!(n.revision.as_deref(), Some(bad.as_str()));
        assert_eq!(n.stable_revision.as_deref(), Some(stable.as_str()));
    }
}

#[test]
fn a_new_spec_mid_rollout_announces_the_superseded_revision() {
    let mut sim = stable_sim(canary_spec());
    sim.change_image("web", "shop:2");
    let mut seen = Vec::new();
    settle_noting(&mut sim, &mut seen);
    let first = sim.status.current_revision.clone().unwrap();
    sim.change_image("web", "shop:3");
    seen.clear();
    seen.extend(sim.reconcile().notices);
    assert_eq!(
        triggers(&seen),
        vec![Trigger::Superseded, Trigger::RolloutStarted]
    );
    assert_eq!(seen[0].revision.as_deref(), Some(first.as_str()));
    assert_eq!(seen[1].revision, sim.status.current_revision);
    assert_ne!(seen[1].revision.as_deref(), Some(first.as_str()));
}

#[test]
fn deleting_mid_rollout_announces_the_blocked_deletion() {
    let mut sim = stable_sim(canary_spec());
    sim.change_image("web", "shop:2");
    sim.reconcile();
    sim.deleting = true;
    let d = sim.reconcile();
    assert_eq!(triggers(&d.notices), vec![Trigger::DeletionBlocked]);
    assert_eq!(d.notices[0].gate.as_deref(), Some("deletion"));
}

#[test]
fn a_failed_gate_with_manual_rollback_announces_the_gate_and_the_halt() {
    let mut s = canary_spec();
    s.rollback.automatic = false;
    let mut sim = stable_sim(s);
    sim.change_image("web", "shop:2");
    sim.reconcile();
    sim.pods_ready();
    // A failure as the gate runner reports it, through the persisted status.
    let failure = crate::api::Failure {
        revision: sim.hash_of("web"),
        gate: "errors".into(),
        reason: "GateFailed".into(),
        message: "error rate 7% > 5%".into(),
    };
    let d = crate::notify::notices(
        sim.now,
        &sim.status,
        &sim.target().0.unwrap(),
        &machine::Cause::Halted(failure),
        &sim.status,
        &[],
    );
    assert_eq!(triggers(&d), vec![Trigger::GateFailed, Trigger::Halted]);
    assert_eq!(d[0].message, "error rate 7% > 5%");
}
