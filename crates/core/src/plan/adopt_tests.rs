//! Adoption in the simulation: the adopted Deployment gives up only what the
//! first revision has ready, gets its capacity back when the first rollout
//! is rolled back, and is held at 0 once the plan is Stable.

use super::*;
use crate::api::Adopt;
use crate::plan::adopt::{AdoptedObs, AdoptedState, Found};

/// `web` (4 replicas, no steps) adopting Deployment `web-old`.
fn adopting_spec() -> ReleasePlanSpec {
    let mut c = component("web", "shop:1", 4);
    c.adopt = Some(Adopt {
        deployment: "web-old".into(),
    });
    spec(vec![c], vec![weight(50), pause(None)])
}

/// A sim whose cluster runs `web-old` with 4 ready pods, not yet marked.
fn adopting_sim() -> Sim {
    let mut sim = Sim::new(adopting_spec());
    sim.adopted = Some(AdoptedObs {
        component: "web".into(),
        deployment: "web-old".into(),
        state: AdoptedState::Found(Found {
            replicas: 4,
            ready: 4,
            pods: 4,
            marked: false,
            original: None,
        }),
    });
    sim
}

fn adopted(sim: &Sim) -> Found {
    match sim.adopted.as_ref().map(|a| &a.state) {
        Some(AdoptedState::Found(f)) => *f,
        other => panic!("no adopted Deployment: {other:?}"),
    }
}

fn adopted_mut(sim: &mut Sim) -> &mut Found {
    match sim.adopted.as_mut().map(|a| &mut a.state) {
        Some(AdoptedState::Found(f)) => f,
        _ => panic!("no adopted Deployment"),
    }
}

/// Ready pods of the first revision of `web`.
fn set_ready(sim: &mut Sim, hash: &str, ready: i32) {
    let d = sim
        .deployments
        .values_mut()
        .find(|d| d.component == "web" && d.hash == hash)
        .unwrap();
    d.ready = ready.min(d.replicas);
}

fn ready_of(sim: &Sim, hash: &str) -> i32 {
    sim.deployments
        .values()
        .find(|d| d.component == "web" && d.hash == hash)
        .map_or(0, |d| d.ready)
}

fn condition_reason(sim: &Sim, type_: &str) -> Option<(String, String)> {
    sim.status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[test]
fn the_adopted_deployment_gives_up_only_what_the_first_revision_has_ready() {
    let mut sim = adopting_sim();
    let h = sim.hash_of("web");
    let d = sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!(sim.at("web", &h), 4, "a first rollout goes to full scale");
    assert_eq!(
        d.adopt[0].replicas, 4,
        "nothing ready yet: it keeps everything"
    );
    let f = adopted(&sim);
    assert!(f.marked);
    assert_eq!(f.original, Some(4));
    assert!(sim.has_event("AdoptionStarted"));
    assert_eq!(
        condition_reason(&sim, "Adopted"),
        Some(("False".into(), "HandingOver".into()))
    );
    for ready in 1..=4 {
        set_ready(&mut sim, &h, ready);
        sim.reconcile();
        let f = adopted(&sim);
        assert_eq!(f.replicas, 4 - ready, "with {ready} ready");
        assert!(
            ready_of(&sim, &h) + f.ready >= 4,
            "capacity never drops below replicas"
        );
        // Its pods go once scaled down.
        adopted_mut(&mut sim).pods = f.replicas;
    }
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    let f = adopted(&sim);
    assert_eq!((f.replicas, f.pods), (0, 0));
    let rec = sim.status.components[0].adopted.clone().unwrap();
    assert!(rec.done, "{rec:?}");
    assert_eq!(
        (rec.deployment.as_str(), rec.original_replicas),
        ("web-old", Some(4))
    );
    assert_eq!(
        condition_reason(&sim, "Adopted"),
        Some(("True".into(), "HandedOver".into()))
    );
    assert_eq!(
        sim.events
            .iter()
            .filter(|e| e.reason == EventReason::HandedOver)
            .count(),
        1
    );
    assert_eq!(
        sim.events
            .iter()
            .filter(|e| e.reason == EventReason::AdoptionStarted)
            .count(),
        1
    );
    assert!(
        sim.last.as_ref().unwrap().delete.is_empty(),
        "never deleted"
    );
}

#[test]
fn a_rolled_back_first_rollout_gives_the_adopted_deployment_its_capacity_back() {
    let mut sim = adopting_sim();
    let h = sim.hash_of("web");
    sim.reconcile();
    set_ready(&mut sim, &h, 2);
    sim.reconcile();
    assert_eq!(adopted(&sim).replicas, 2);
    // The adopted Deployment's pods go; the first revision's start crashing.
    adopted_mut(&mut sim).pods = 2;
    sim.crashing.insert(h.clone());
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollbackInProgress);
    assert_eq!(
        adopted(&sim).replicas,
        4,
        "back to the component's replicas"
    );
    assert!(
        sim.at("web", &h) > 0,
        "the first revision keeps its pods until the adopted Deployment has 4 ready"
    );
    adopted_mut(&mut sim).ready = 3;
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollbackInProgress);
    assert!(sim.at("web", &h) > 0);
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!(sim.at("web", &h), 0);
    let f = adopted(&sim);
    assert_eq!((f.replicas, f.ready), (4, 4));
    assert!(!sim.status.components[0].adopted.as_ref().unwrap().done);
    let stalled = sim
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled")
        .unwrap();
    assert!(
        stalled
            .message
            .contains("the adopted Deployment serves again"),
        "{}",
        stalled.message
    );
}

#[test]
fn stable_holds_the_adopted_deployment_at_zero_once_its_own_pods_are_ready() {
    let mut sim = adopting_sim();
    let h = sim.hash_of("web");
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(adopted(&sim).replicas, 0);
    // A GitOps tool applies the old manifest again: 4 replicas.
    *adopted_mut(&mut sim) = Found {
        replicas: 4,
        ready: 4,
        pods: 4,
        marked: true,
        original: Some(4),
    };
    let d = sim.reconcile();
    assert_eq!(d.adopt[0].replicas, 0, "the plan's own 4 are ready");
    assert_eq!(sim.status.phase, Phase::Stable);
    // Scaled up again while the plan's own revision lost 2 ready pods: kept.
    *adopted_mut(&mut sim) = Found {
        replicas: 4,
        ready: 4,
        pods: 4,
        marked: true,
        original: Some(4),
    };
    set_ready(&mut sim, &h, 2);
    let d = sim.reconcile();
    assert_eq!(d.adopt[0].replicas, 4, "scaled down only once 4 are ready");
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(adopted(&sim).replicas, 0);
    assert!(sim.status.components[0].adopted.as_ref().unwrap().done);
    // A later rollout never touches it again.
    sim.change_image("web", "shop:2");
    sim.reconcile();
    assert_eq!(sim.last.as_ref().unwrap().adopt[0].replicas, 0);
}

#[test]
fn a_missing_deployment_is_said_once_and_the_plan_rolls_out_like_a_new_one() {
    let mut sim = Sim::new(adopting_spec());
    sim.adopted = Some(AdoptedObs {
        component: "web".into(),
        deployment: "web-old".into(),
        state: AdoptedState::Missing,
    });
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.at("web", &sim.hash_of("web")), 4);
    assert_eq!(
        condition_reason(&sim, "Adopted"),
        Some(("False".into(), "AdoptionTargetNotFound".into()))
    );
    assert_eq!(
        sim.events
            .iter()
            .filter(|e| e.reason == EventReason::AdoptionTargetNotFound)
            .count(),
        1,
        "one Warning, not one per reconcile"
    );
    assert!(sim.last.as_ref().unwrap().adopt.is_empty());
    let rec = sim.status.components[0].adopted.clone().unwrap();
    assert!(rec.message.unwrap().contains("not found"));
}

#[test]
fn a_plan_without_adoption_has_no_adopted_condition() {
    let sim = stable_sim(canary_spec());
    assert!(condition_reason(&sim, "Adopted").is_none());
    assert!(sim.status.components[0].adopted.is_none());
}

#[test]
fn a_handed_over_deployment_deleted_by_its_owner_stays_done() {
    let mut sim = adopting_sim();
    sim.settle();
    assert!(sim.status.components[0].adopted.as_ref().unwrap().done);
    let before = sim.events.len();
    // The user deletes it, as told.
    sim.adopted.as_mut().unwrap().state = AdoptedState::Missing;
    sim.settle();
    assert!(sim.status.components[0].adopted.as_ref().unwrap().done);
    assert_eq!(
        condition_reason(&sim, "Adopted"),
        Some(("True".into(), "HandedOver".into()))
    );
    assert_eq!(
        sim.events.len(),
        before,
        "no Warning for a deletion we asked for"
    );
}
