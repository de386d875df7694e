//! A refusal by the administrator's policy on the simulated cluster: it is
//! configuration, not a health verdict. A release the policy refuses does
//! not start (no pod), a rollout under way holds, nothing is ever rolled
//! back or scaled to zero for it, and the plan goes on once it is allowed.

use super::*;
use crate::api::policy::{Destinations, GatePolicySpec};
use crate::api::{Gate, WebhookCheck};
use crate::gates::policy::{Mode, Named, NamespacePolicy};

const HOOK: &str = "http://hooks.shop.example:8080/smoke";

fn webhook_gate(name: &str) -> Gate {
    Gate {
        name: name.into(),
        webhook: Some(WebhookCheck {
            url: HOOK.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The canary plan with one webhook gate, `smoke`.
fn gated() -> ReleasePlanSpec {
    let mut s = canary_spec();
    s.health.gates = vec![webhook_gate("smoke")];
    s
}

/// The chart's defaults: `--gate-policy required` and its GatePolicy
/// (`releaseplan-default`) listing `hosts` (none by default).
fn chart_policy(hosts: &[&str]) -> NamespacePolicy {
    let policy = Named {
        name: "releaseplan-default".into(),
        spec: GatePolicySpec {
            destinations: Destinations {
                hosts: hosts.iter().map(|h| (*h).to_string()).collect(),
                ..Destinations::default()
            },
            ..GatePolicySpec::default()
        },
    };
    NamespacePolicy::select("shop", &BTreeMap::new(), &[policy], Mode::Required)
}

fn stalled(sim: &Sim) -> (String, String, String) {
    let c = sim
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled")
        .unwrap();
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn count(sim: &Sim, reason: &str) -> usize {
    sim.events
        .iter()
        .filter(|e| e.reason.as_str() == reason)
        .count()
}

fn never_rolled_back(sim: &Sim) {
    assert_eq!(count(sim, "RollbackStarted"), 0, "{:?}", sim.events);
    assert_eq!(count(sim, "RolledBack"), 0, "{:?}", sim.events);
    assert!(
        !matches!(
            sim.status.phase,
            Phase::RollbackInProgress | Phase::RolledBack
        ),
        "{:?}",
        sim.status.phase
    );
}

/// The first-install bug: with the chart's defaults a new plan's gate is
/// refused. The release does not start (no Deployment, so nothing to scale
/// to zero), the plan is Stalled with a message that names the gate, the
/// destination and the chart value, one Warning says so (not one per
/// reconcile), and once the policy lists the host it is released.
#[test]
fn a_first_release_the_policy_refuses_does_not_start_and_starts_when_allowed() {
    let mut sim = Sim::new(gated());
    sim.policy = Some(chart_policy(&[]));
    for _ in 0..5 {
        sim.settle();
        sim.advance(700);
    }
    assert_eq!(sim.status.phase, Phase::Pending);
    assert!(sim.deployments.is_empty(), "{:?}", sim.deployments);
    never_rolled_back(&sim);
    let (status, reason, message) = stalled(&sim);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "GatePolicyRefused")
    );
    for part in [
        "gate smoke",
        "hooks.shop.example:8080",
        "GatePolicy releaseplan-default",
        "spec.destinations.hosts",
        "gatePolicy.hosts={hooks.shop.example:8080}",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    assert_eq!(sim.condition("Reconciling").as_deref(), Some("False"));
    assert_eq!(sim.condition("Ready").as_deref(), Some("False"));
    // Judged: GitOps tools and `wait` see the Stalled condition of this
    // generation, not "not reconciled yet".
    assert_eq!(sim.status.observed_generation, Some(sim.generation));
    assert!(
        sim.status
            .conditions
            .iter()
            .all(|c| c.observed_generation == Some(sim.generation))
    );
    assert!(
        sim.status
            .message
            .as_deref()
            .unwrap()
            .contains("does not start"),
        "{:?}",
        sim.status.message
    );
    assert_eq!(count(&sim, "GatePolicyRefused"), 1, "{:?}", sim.events);
    assert_eq!(
        sim.last.as_ref().unwrap().requeue_after,
        None,
        "a policy change wakes it, no timer"
    );

    sim.policy = Some(chart_policy(&["hooks.shop.example:8080"]));
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    let h = sim.hash_of("web");
    assert_eq!(sim.at("web", &h), 10);
    assert_eq!(sim.condition("Stalled").as_deref(), Some("False"));
    never_rolled_back(&sim);
}

/// A new revision the policy refuses does not start: the stable revision
/// keeps serving at full scale and no canary pod is created; allowed, it
/// rolls out.
#[test]
fn a_new_revision_the_policy_refuses_does_not_start() {
    let mut sim = stable_sim(gated());
    let stable = sim.hash_of("web");
    sim.policy = Some(chart_policy(&[]));
    sim.change_image("web", "shop:2");
    let canary = sim.hash_of("web");
    for _ in 0..3 {
        sim.settle();
        sim.advance(700);
    }
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.at("web", &stable), 10);
    assert_eq!(sim.at("web", &canary), 0);
    assert!(
        !sim.deployments.values().any(|d| d.hash == canary),
        "no canary Deployment"
    );
    assert_eq!(stalled(&sim).1, "GatePolicyRefused");
    never_rolled_back(&sim);
    // Stable keeps the generation it is stable for (nothing may read the
    // held one as done); the conditions carry the one they judged.
    assert_eq!(sim.status.observed_generation, Some(1));
    assert_eq!(sim.condition("Ready").as_deref(), Some("False"));
    let held = sim
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled")
        .unwrap();
    assert_eq!(held.observed_generation, Some(sim.generation));

    sim.policy = Some(chart_policy(&["*.shop.example"]));
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!(
        sim.status.current_revision,
        sim.target().0.unwrap().revision.into()
    );
    assert!(sim.has_event("RolloutStarted"));
}

/// A policy that stops allowing a gate in the middle of a rollout holds it
/// at its step, past the progress deadline and however long: never a
/// rollback. Allowed again, it goes on.
#[test]
fn a_rollout_whose_gate_becomes_refused_holds_and_is_not_rolled_back() {
    let mut sim = stable_sim(gated());
    sim.policy = Some(chart_policy(&["hooks.shop.example:8080"]));
    sim.change_image("web", "shop:2");
    sim.reconcile();
    sim.pods_ready();
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    let step = sim.status.current_step;
    sim.policy = Some(chart_policy(&[]));
    for _ in 0..10 {
        sim.settle();
        sim.advance(300);
    }
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!(sim.status.current_step, step, "held at its step");
    never_rolled_back(&sim);
    let (status, reason, message) = stalled(&sim);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "GatePolicyRefused")
    );
    assert!(message.contains("gate smoke"), "{message}");
    let progressing = sim
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap();
    assert_eq!(progressing.reason, "GatePolicyRefused");
    let paused = sim
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Paused")
        .unwrap();
    assert_eq!(
        (paused.status.as_str(), paused.reason.as_str()),
        ("True", "GatePolicyRefused")
    );

    sim.policy = Some(chart_policy(&["hooks.shop.example:8080"]));
    sim.settle();
    assert!(sim.status.current_step > step, "goes on once allowed");
}

/// A first release whose gate the operator's own address rules refuse when
/// it is called (only known then): it is at full scale and stays there,
/// Stalled, never rolled back to "no revision" (scaled to zero).
#[test]
fn a_first_release_refused_when_called_is_not_scaled_to_zero() {
    let mut sim = Sim::new(gated());
    sim.refused_calls.insert("smoke".into());
    for _ in 0..10 {
        sim.settle();
        sim.advance(300);
    }
    let h = sim.hash_of("web");
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!(sim.at("web", &h), 10, "not scaled to zero");
    never_rolled_back(&sim);
    let (status, reason, message) = stalled(&sim);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "GatePolicyRefused")
    );
    assert!(message.contains("--gate-allow-hosts"), "{message}");
    assert_eq!(count(&sim, "GatePolicyRefused"), 1, "{:?}", sim.events);

    sim.refused_calls.clear();
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
}

/// Pod failures are health verdicts: a crash-looping canary is rolled back
/// even while the policy holds the rollout.
#[test]
fn a_crash_loop_still_rolls_back_while_the_policy_holds() {
    let mut sim = stable_sim(gated());
    sim.change_image("web", "shop:2");
    sim.reconcile();
    sim.refused_calls.insert("smoke".into());
    sim.crashing.insert(sim.hash_of("web"));
    sim.settle();
    assert!(sim.has_event("RollbackStarted"), "{:?}", sim.events);
}

/// A retry of a rolled-back release the policy refuses does not start it;
/// the Warning says why (the request is acknowledged: asked again once
/// the policy allows it, it starts).
#[test]
fn a_retry_the_policy_refuses_is_said_and_starts_nothing() {
    let mut sim = stable_sim(gated());
    sim.change_image("web", "shop:2");
    sim.crashing.insert(sim.hash_of("web"));
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    sim.crashing.clear();
    sim.policy = Some(chart_policy(&[]));
    sim.ask(Action::Retry);
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!(count(&sim, "GatePolicyRefused"), 1, "{:?}", sim.events);
    sim.policy = Some(chart_policy(&["hooks.shop.example:8080"]));
    sim.ask(Action::Retry);
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
}

#[derive(Debug, Clone)]
enum PolicyOp {
    Refuse,
    Allow,
    RefuseCalls(bool),
    NewImage(u8),
    Advance(i64),
}

fn policy_op() -> impl Strategy<Value = PolicyOp> {
    prop_oneof![
        Just(PolicyOp::Refuse),
        Just(PolicyOp::Allow),
        any::<bool>().prop_map(PolicyOp::RefuseCalls),
        (1u8..4).prop_map(PolicyOp::NewImage),
        (1i64..900).prop_map(PolicyOp::Advance),
    ]
}

proptest! {
    /// Whatever the policy does, and whenever, with healthy pods: no
    /// rollback, the stable revision at full scale, a first release never
    /// scaled to zero, and a plan the policy refuses before its first
    /// release creates no Deployment.
    #[test]
    fn a_refusal_never_rolls_back(ops in proptest::collection::vec(policy_op(), 1..40), refused_first in any::<bool>()) {
        let mut sim = Sim::new(gated());
        sim.policy = Some(chart_policy(if refused_first { &[] } else { &["hooks.shop.example:8080"] }));
        sim.settle();
        if refused_first {
            prop_assert!(sim.deployments.is_empty());
            prop_assert_eq!(sim.status.phase, Phase::Pending);
        }
        for op in ops {
            match op {
                PolicyOp::Refuse => sim.policy = Some(chart_policy(&[])),
                PolicyOp::Allow => sim.policy = Some(chart_policy(&["hooks.shop.example:8080"])),
                PolicyOp::RefuseCalls(on) => {
                    if on { sim.refused_calls.insert("smoke".into()); } else { sim.refused_calls.clear(); }
                }
                PolicyOp::NewImage(n) => sim.change_image("web", &format!("shop:{}", n + 1)),
                PolicyOp::Advance(s) => sim.advance(s),
            }
            // Healthy pods: nothing but the policy could hold the release.
            sim.settle();
            prop_assert!(!sim.has_event("RollbackStarted"), "{:?}", sim.events);
            prop_assert!(!matches!(sim.status.phase, Phase::RollbackInProgress | Phase::RolledBack));
            let web = sim.status.components.first().cloned().unwrap_or_default();
            if sim.status.phase == Phase::Stable && let Some(h) = &web.stable_hash {
                // The stable revision serves at full scale.
                prop_assert_eq!(sim.at("web", h), 10);
            }
            if sim.status.stable_revision.is_none() && let Some(h) = &web.current_hash {
                // A first release under way is never scaled to zero.
                prop_assert_eq!(sim.at("web", h), 10);
            }
        }
    }
}
