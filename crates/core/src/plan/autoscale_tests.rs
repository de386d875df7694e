//! Autoscaled components in the simulation: the autoscaler's total is split
//! by the steps, capacity never drops below it, and the owned HPA's spec is
//! released with the revision.

use super::*;
use crate::api::Autoscaling;
use crate::plan::autoscale::{AutoscalerIntent, ScaleState};

fn hpa(min: i32, max: i32) -> Autoscaling {
    Autoscaling {
        min_replicas: Some(min),
        max_replicas: Some(max),
        ..Autoscaling::default()
    }
}

/// `web` autoscaled by an owned HPA (starting at its minimum), `api` by an
/// autoscaler of the user's (starting at 3).
fn autoscaled_spec() -> ReleasePlanSpec {
    let mut s = prop_spec();
    s.components[0].replicas = None;
    s.components[0].autoscaling = Some(hpa(2, 10));
    s.components[1].autoscaling = Some(Autoscaling::default());
    s
}

fn canary_autoscaled(min: i32, max: i32) -> ReleasePlanSpec {
    let mut s = canary_spec();
    s.components[0].replicas = None;
    s.components[0].autoscaling = Some(hpa(min, max));
    s
}

#[test]
fn a_new_autoscaled_component_starts_at_its_minimum_and_gets_its_objects() {
    let sim = stable_sim(canary_autoscaled(3, 9));
    assert_eq!(sim.scales.get("web"), Some(&3));
    assert_eq!(sim.hpas.get("web"), Some(&hpa(3, 9)));
    assert_eq!(sim.at("web", &sim.hash_of("web")), 3);
    let c = &sim.status.components[0];
    assert_eq!(c.replicas, 3);
    let a = c.autoscaling.as_ref().unwrap();
    assert_eq!(
        (a.scale.as_str(), a.hpa.as_deref(), a.owns_hpa),
        ("shop-web", Some("shop-web"), true)
    );
}

#[test]
fn the_autoscaler_scales_a_stable_component_without_a_rollout() {
    let mut sim = stable_sim(canary_autoscaled(2, 10));
    let h = sim.hash_of("web");
    sim.autoscale("web", 7);
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.status.rollout_count, 1);
    assert_eq!(sim.at("web", &h), 7);
    assert_eq!(sim.status.components[0].replicas, 7);
}

#[test]
fn scaling_up_in_a_paused_canary_grows_both_revisions_and_keeps_the_split() {
    let mut sim = stable_sim(canary_autoscaled(2, 10));
    sim.autoscale("web", 4);
    sim.settle();
    let old = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    let new = sim.hash_of("web");
    // 20%, then the timed pause, then 50% and the indefinite pause.
    sim.settle();
    sim.advance(31);
    sim.settle();
    assert_eq!(sim.status.current_step, 3, "{:?}", sim.status.message);
    assert_eq!((sim.at("web", &new), sim.at("web", &old)), (2, 2));
    // Load: the autoscaler asks for 8 in the middle of the paused canary.
    sim.autoscale("web", 8);
    let d = sim.reconcile();
    // The new revision gets its share at once; the stable one gives up only
    // what the new one has ready.
    assert_eq!(sim.at("web", &new), 4);
    assert_eq!(sim.at("web", &old), 6, "{:?}", d.deployments);
    sim.pods_ready();
    sim.reconcile();
    assert_eq!((sim.at("web", &new), sim.at("web", &old)), (4, 4));
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!(sim.status.current_step, 3);
}

#[test]
fn promotion_keeps_the_autoscaled_count() {
    let mut sim = stable_sim(canary_autoscaled(2, 10));
    sim.autoscale("web", 7);
    sim.settle();
    sim.change_image("web", "shop:2");
    let new = sim.hash_of("web");
    sim.settle();
    sim.advance(31);
    sim.settle();
    sim.ask(Action::Promote { full: false });
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.at("web", &new), 7, "no drop to minReplicas, no jump");
    assert_eq!(sim.scales.get("web"), Some(&7));
}

#[test]
fn scaling_down_during_a_rollback_brings_the_stable_revision_to_the_new_total() {
    let mut sim = stable_sim(canary_autoscaled(2, 10));
    sim.autoscale("web", 8);
    sim.settle();
    let old = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    sim.reconcile();
    let new = sim.hash_of("web");
    sim.crashing.insert(new.clone());
    sim.reconcile();
    assert!(matches!(
        sim.status.phase,
        Phase::RollbackInProgress | Phase::RolledBack
    ));
    sim.autoscale("web", 3);
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!((sim.at("web", &old), sim.at("web", &new)), (3, 0));
}

#[test]
fn the_hpa_spec_is_released_with_the_revision_and_rolled_back_with_it() {
    let mut sim = stable_sim(canary_autoscaled(2, 4));
    // A new image and a new maximum, together; the image crashes.
    sim.spec.components[0].autoscaling = Some(hpa(2, 8));
    sim.change_image("web", "shop:2");
    let d = sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert!(
        d.scales
            .iter()
            .all(|s| !matches!(s.autoscaler, AutoscalerIntent::Apply(_))),
        "the HPA is not rewritten while the release is in flight"
    );
    assert_eq!(sim.hpas.get("web"), Some(&hpa(2, 4)));
    sim.crashing.insert(sim.hash_of("web"));
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!(sim.hpas.get("web"), Some(&hpa(2, 4)), "rolled back with it");
    // A healthy image with the new maximum: released, the HPA follows.
    sim.crashing.clear();
    sim.change_image("web", "shop:3");
    sim.settle();
    sim.advance(31);
    sim.settle();
    sim.ask(Action::Promote { full: false });
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.hpas.get("web"), Some(&hpa(2, 8)));
}

#[test]
fn a_change_of_the_hpa_alone_applies_at_once() {
    let mut sim = stable_sim(canary_autoscaled(2, 4));
    sim.spec.components[0].autoscaling = Some(hpa(3, 6));
    sim.generation += 1;
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.status.rollout_count, 1, "the pods did not change");
    assert_eq!(sim.hpas.get("web"), Some(&hpa(3, 6)));
}

#[test]
fn removing_autoscaling_deletes_the_scale_and_the_hpa_and_goes_back_to_replicas() {
    let mut sim = stable_sim(canary_autoscaled(2, 10));
    sim.autoscale("web", 6);
    sim.settle();
    sim.spec.components[0].autoscaling = None;
    sim.spec.components[0].replicas = Some(5);
    sim.generation += 1;
    sim.settle();
    assert!(sim.scales.is_empty() && sim.hpas.is_empty());
    assert_eq!(sim.at("web", &sim.hash_of("web")), 5);
    assert!(sim.status.components[0].autoscaling.is_none());
}

#[test]
fn a_spec_that_cannot_be_acted_on_deletes_nothing() {
    let mut sim = stable_sim(canary_autoscaled(2, 10));
    // Neither replicas nor autoscaling: refused by the CRD, and by the core.
    sim.spec.components[0].autoscaling = None;
    sim.generation += 1;
    let d = sim.reconcile();
    assert!(d.scales.is_empty());
    assert_eq!(sim.scales.get("web"), Some(&2));
}

#[test]
fn an_owned_hpa_dropped_from_the_spec_goes_once_settled() {
    let mut sim = stable_sim(canary_autoscaled(2, 10));
    sim.spec.components[0].autoscaling = Some(Autoscaling::default());
    sim.generation += 1;
    let d = sim.reconcile();
    assert!(
        d.scales
            .iter()
            .any(|s| s.autoscaler == AutoscalerIntent::Delete
                && matches!(s.scale, ScaleState::Keep { .. }))
    );
    assert!(sim.hpas.is_empty());
    assert_eq!(sim.scales.get("web"), Some(&2), "the scale target stays");
}

/// Autoscaled-specific invariants of one decision: no revision above the
/// autoscaled total, and the HPA rewritten only once settled.
fn check_autoscaled(obs: &Observation, d: &Decision) -> Result<(), TestCaseError> {
    let Ok(target) = &obs.target else {
        return Ok(());
    };
    for c in &d.status.components {
        let Some(t) = target.component(&c.name) else {
            continue;
        };
        for i in d.deployments.iter().filter(|i| i.component == c.name) {
            prop_assert!(
                i.replicas <= t.replicas.max(0),
                "{} of {} wanted at {} above the autoscaled total {}",
                i.hash,
                c.name,
                i.replicas,
                t.replicas
            );
        }
        // The current and the stable revision (any other one only shrinks:
        // `check_invariants`).
        let total: i32 = d
            .deployments
            .iter()
            .filter(|i| {
                i.component == c.name
                    && (Some(&i.hash) == c.current_hash.as_ref()
                        || Some(&i.hash) == c.stable_hash.as_ref())
            })
            .map(|i| i.replicas)
            .sum();
        let surge = c
            .current_hash
            .as_ref()
            .filter(|_| c.is_changing())
            .map_or(0, |_| t.replicas);
        prop_assert!(
            total <= t.replicas.max(0) + surge,
            "{} wants {total} pods, above its total {} and the surge {surge}",
            c.name,
            t.replicas
        );
    }
    for s in &d.scales {
        if matches!(s.autoscaler, AutoscalerIntent::Apply(_)) {
            prop_assert_eq!(d.status.phase, Phase::Stable);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn autoscaled_invariants_hold_over_random_histories(ops in proptest::collection::vec(op(), 1..80)) {
        let mut sim = Sim::new(autoscaled_spec());
        let names = ["web", "api"];
        for op in ops {
            match op {
                Op::Autoscale(c, r) => sim.autoscale(names[c], r),
                Op::PodsReady => sim.pods_ready(),
                Op::Advance(s) => sim.advance(s),
                Op::ChangeImage(c, v) => sim.change_image(names[c], &format!("{}:{v}", names[c])),
                Op::Crash(c) => {
                    let h = sim.hash_of(names[c]);
                    sim.crashing.insert(h);
                }
                Op::Heal => sim.crashing.clear(),
                Op::Ask(a) => sim.ask([Action::Promote { full: false }, Action::Abort][usize::from(a % 2)]),
                _ => {
                    let obs = sim.observe();
                    let d = decide(&obs, &sim.templates());
                    check_invariants(&obs, &d)?;
                    check_autoscaled(&obs, &d)?;
                    sim.apply(&d);
                }
            }
        }
        // Settled, each component runs its autoscaled total on one revision.
        sim.crashing.clear();
        sim.request = None;
        for _ in 0..40 {
            sim.advance(30);
            sim.reconcile();
            sim.pods_ready();
        }
        if sim.status.phase == Phase::Stable {
            for c in ["web", "api"] {
                prop_assert_eq!(Some(sim.at(c, &sim.hash_of(c))), sim.wanted(c));
            }
            prop_assert_eq!(sim.hpas.get("web"), Some(&hpa(2, 10)));
        }
    }
}
