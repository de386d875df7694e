//! The simulator against what the operator is documented to do: each step's
//! replicas (`ceil(replicas × weight / 100)` on the new revision, the rest on
//! the stable one), pauses that last their duration, pauses without one that
//! wait for a human, and Stable at the end.

use super::*;
use crate::api::{BlueGreen, Component, Pause, ReleasePlanSpec, Step, Strategy as ApiStrategy};
use crate::plan::replicas::canary_replicas;
use chrono::TimeZone;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use proptest::prelude::*;
use serde_json::json;

fn template(image: &str) -> PodTemplateSpec {
    serde_json::from_value(json!({
        "metadata": {"labels": {"app": "shop"}},
        "spec": {"containers": [{"name": "app", "image": image}]}
    }))
    .unwrap()
}

fn spec(replicas: &[i32], image: &str, steps: Vec<Step>) -> ReleasePlanSpec {
    ReleasePlanSpec {
        components: replicas
            .iter()
            .enumerate()
            .map(|(i, r)| Component {
                name: format!("c{i}"),
                replicas: Some(*r),
                template: template(image),
                traffic: None,
                autoscaling: None,
                config: None,
                adopt: None,
                depends_on: Vec::new(),
                kind: Default::default(),
                stateful_set: None,
                daemon_set: None,
                capacity: None,
                serving: None,
                baseline: false,
            })
            .collect(),
        strategy: ApiStrategy {
            steps,
            blue_green: None,
            windows: Vec::new(),
        },
        ..Default::default()
    }
}

fn weight(w: i32) -> Step {
    Step {
        set_weight: Some(w),
        ..Step::default()
    }
}

fn pause(secs: Option<u32>) -> Step {
    Step {
        pause: Some(Pause {
            duration: secs.map(|s| format!("{s}s")),
        }),
        ..Step::default()
    }
}

fn start(spec: ReleasePlanSpec) -> Start {
    Start {
        plan: "shop".into(),
        spec,
        generation: 1,
        status: ReleasePlanStatus::default(),
        revisions: Vec::new(),
        workloads: Default::default(),
        now: Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap(),
        ready_after: Duration::ZERO,
        config: None,
    }
}

/// The preview of `v2` from a plan whose `v1` is Stable (itself simulated).
fn change(replicas: &[i32], steps: Vec<Step>, ready_after: Duration) -> Simulation {
    let first = simulate(start(spec(replicas, "shop:1", steps.clone())));
    assert_eq!(first.end, End::Stable, "{first:?}");
    simulate(Start {
        generation: 2,
        status: first.status,
        revisions: first.revisions,
        ready_after,
        ..start(spec(replicas, "shop:2", steps))
    })
}

#[test]
fn first_release_goes_to_full_scale() {
    let sim = simulate(start(spec(&[3], "shop:1", vec![weight(50), pause(None)])));
    assert_eq!(sim.end, End::Stable);
    assert!(sim.rollout);
    let phases: Vec<(Phase, i32, i32)> = sim
        .steps
        .iter()
        .map(|s| (s.phase, s.step, s.weight))
        .collect();
    assert_eq!(
        phases,
        [(Phase::RollingOut, 2, 100), (Phase::Stable, 2, 100)]
    );
    assert_eq!(sim.steps[0].components[0].current_replicas, 3);
    assert_eq!(sim.created.len(), 1);
    assert_eq!(sim.created[0].replicas, 3);
}

#[test]
fn a_canary_with_pauses() {
    let sim = change(
        &[10],
        vec![weight(20), pause(Some(30)), weight(50), pause(None)],
        Duration::ZERO,
    );
    assert_eq!(sim.end, End::Stable);
    let rows: Vec<(i32, i32, i32, i32, bool)> = sim
        .steps
        .iter()
        .map(|s| {
            let c = &s.components[0];
            (
                s.step,
                s.weight,
                c.current_replicas,
                c.stable_replicas,
                s.waits_for_promotion,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (0, 20, 2, 8, false),
            (1, 20, 2, 8, false),
            (2, 50, 5, 5, false),
            (3, 50, 5, 5, true),
            (4, 100, 10, 0, false),
            (4, 100, 10, 0, false),
        ]
    );
    assert_eq!(sim.steps[5].phase, Phase::Stable);
    // The timed pause lasts its 30 s (and the wake-up's half second).
    let paused = sim.steps[1].duration;
    assert!(
        paused >= Duration::from_secs(30) && paused < Duration::from_secs(32),
        "{paused:?}"
    );
    // A surge: the new pods come before the stable ones go.
    assert_eq!(sim.steps[0].components[0].peak_pods, 12);
    // Only the new revision is created.
    assert_eq!(sim.created.len(), 1);
    assert_eq!(sim.created[0].replicas, 2);
}

#[test]
fn the_same_spec_changes_nothing() {
    let first = simulate(start(spec(&[2], "shop:1", vec![weight(50)])));
    let again = simulate(Start {
        status: first.status,
        revisions: first.revisions,
        ..start(spec(&[2], "shop:1", vec![weight(50)]))
    });
    assert_eq!(again.end, End::Stable);
    assert!(!again.rollout);
    assert!(again.created.is_empty());
    assert_eq!(again.total, Duration::ZERO);
}

#[test]
fn slow_pods_take_longer_but_reach_the_same_steps() {
    let steps = vec![weight(25), pause(Some(60)), weight(75)];
    let fast = change(&[4], steps.clone(), Duration::ZERO);
    let slow = change(&[4], steps, Duration::from_secs(20));
    let shape = |s: &Simulation| {
        s.steps
            .iter()
            .map(|s| {
                (
                    s.phase,
                    s.step,
                    s.weight,
                    s.components
                        .clone()
                        .into_iter()
                        .map(|c| (c.current_replicas, c.stable_replicas))
                        .collect::<Vec<_>>(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&fast), shape(&slow));
    assert!(
        slow.total >= fast.total + Duration::from_secs(3 * 20),
        "{:?} {:?}",
        slow.total,
        fast.total
    );
}

/// Component `c0` behind a Gateway API route (with the default drain time).
fn routed(s: &mut ReleasePlanSpec) {
    s.components[0].traffic = Some(crate::api::Traffic {
        port: 80,
        gateway_api: Some(crate::api::GatewayRoute {
            parent_refs: vec![crate::api::ParentRef {
                name: "gw".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    });
}

#[test]
fn a_routed_canary_splits_requests_not_pods() {
    let mut s = spec(&[4], "shop:1", vec![weight(10), pause(None), weight(50)]);
    routed(&mut s);
    let first = simulate(start(s.clone()));
    assert_eq!(first.end, End::Stable, "{first:?}");
    s.components[0].template = template("shop:2");
    let sim = simulate(Start {
        generation: 2,
        status: first.status,
        revisions: first.revisions,
        ..start(s)
    });
    assert_eq!(sim.end, End::Stable, "{sim:?}");
    let rows: Vec<(i32, Option<i32>, i32, i32)> = sim
        .steps
        .iter()
        .map(|s| {
            let c = &s.components[0];
            (
                s.step,
                s.traffic_weight,
                c.current_replicas,
                c.stable_replicas,
            )
        })
        .collect();
    // The stable revision keeps every pod until the route sends it nothing.
    assert_eq!(rows[0], (0, Some(10), 1, 4));
    assert_eq!(rows[2], (2, Some(50), 2, 4));
    assert_eq!(rows.last().map(|r| r.1), Some(Some(100)));
}

#[test]
fn blue_green_waits_for_promotion() {
    let mut s = spec(&[3], "shop:1", Vec::new());
    routed(&mut s);
    s.strategy.blue_green = Some(BlueGreen {
        auto_promotion_seconds: None,
        scale_down_delay_seconds: Some(0),
    });
    let first = simulate(start(s.clone()));
    s.components[0].template = template("shop:2");
    let sim = simulate(Start {
        generation: 2,
        status: first.status,
        revisions: first.revisions,
        ..start(s)
    });
    assert_eq!(sim.end, End::Stable);
    let preview = &sim.steps[0];
    assert!(preview.waits_for_promotion);
    assert_eq!(
        (
            preview.components[0].current_replicas,
            preview.components[0].stable_replicas
        ),
        (3, 3)
    );
}

#[test]
fn an_invalid_spec_is_reported() {
    let sim = simulate(start(spec(&[3], "shop:1", vec![weight(50), weight(20)])));
    assert!(matches!(sim.end, End::Invalid(_)), "{:?}", sim.end);
    assert!(sim.steps.is_empty());
}

#[test]
fn spec_paused_holds() {
    let first = simulate(start(spec(&[2], "shop:1", vec![weight(50)])));
    let mut s = spec(&[2], "shop:2", vec![weight(50)]);
    s.paused = true;
    let sim = simulate(Start {
        generation: 2,
        status: first.status,
        revisions: first.revisions,
        ..start(s)
    });
    assert!(
        matches!(sim.end, End::Stuck(ref m) if m.contains("paused")),
        "{:?}",
        sim.end
    );
}

fn step_strategy() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        (
            0i32..=100,
            proptest::option::of(proptest::option::of(1u32..600)),
        ),
        0..6,
    )
    .prop_map(|raw| {
        let mut ws: Vec<i32> = raw.iter().map(|(w, _)| *w).collect();
        ws.sort_unstable();
        let mut out = Vec::new();
        for (w, (_, p)) in ws.into_iter().zip(raw) {
            out.push(weight(w));
            if let Some(p) = p {
                out.push(pause(p));
            }
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Every step of the preview is the step the operator runs: in order, once
    /// each, at the weight of the last setWeight, with `ceil(r × w / 100)`
    /// replicas on the new revision and the rest on the stable one; timed
    /// pauses last their duration, the others wait for a promotion.
    #[test]
    fn preview_follows_the_documented_rollout(
        replicas in proptest::collection::vec(1i32..30, 1..3),
        steps in step_strategy(),
        ready_after in 0u64..40,
    ) {
        let sim = change(&replicas, steps.clone(), Duration::from_secs(ready_after));
        prop_assert_eq!(&sim.end, &End::Stable);
        let n = i32::try_from(steps.len()).unwrap();
        let rolling: Vec<&StepAt> = sim.steps.iter().filter(|s| s.phase == Phase::RollingOut).collect();
        let indexes: Vec<i32> = rolling.iter().map(|s| s.step).collect();
        prop_assert_eq!(indexes, (0..=n).collect::<Vec<_>>());
        prop_assert_eq!(sim.steps.last().map(|s| s.phase), Some(Phase::Stable));
        let mut min_total = Duration::ZERO;
        for s in rolling {
            let i = usize::try_from(s.step).unwrap();
            let w = if i >= steps.len() {
                100
            } else {
                steps[..=i].iter().rev().find_map(|s| s.set_weight).unwrap_or(0)
            };
            prop_assert_eq!(s.weight, w);
            for (c, r) in s.components.iter().zip(&replicas) {
                let cur = canary_replicas(*r, w);
                prop_assert_eq!((c.current_replicas, c.stable_replicas), (cur, r - cur), "step {}", i);
                prop_assert!(c.peak_pods >= *r && c.peak_pods <= 2 * r);
            }
            let p = steps.get(i).and_then(|s| s.pause.as_ref());
            prop_assert_eq!(s.waits_for_promotion, p.is_some_and(|p| p.duration.is_none()));
            if let Some(secs) = p.and_then(|p| p.duration.as_deref()).map(|d| d.trim_end_matches('s').parse::<u64>().unwrap()) {
                prop_assert!(s.duration >= Duration::from_secs(secs), "{:?} < {}s", s.duration, secs);
                min_total += Duration::from_secs(secs);
            }
        }
        prop_assert!(sim.total >= min_total);
    }
}
