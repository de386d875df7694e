//! Components in dependency order (`dependsOn`) in the simulation: a
//! component starts only once what it depends on has reached its point, a
//! failure rolls back the later components first, and a plan without
//! `dependsOn` walks the spec's steps as before.

use super::*;
use crate::api::order::Dependency;
use crate::plan::order::{Local, Timeline};
use crate::plan::replicas::canary_replicas;
use crate::plan::steps::CurrentStep;

fn named(mut s: Step, name: &str) -> Step {
    s.name = Some(name.into());
    s
}

fn after(mut c: Component, dep: &str, step: Option<&str>) -> Component {
    c.depends_on.push(Dependency {
        component: dep.into(),
        step: step.map(str::to_string),
    });
    c
}

/// `api`, then `svc` once `api` is fully promoted, then `web` once `svc` has
/// finished its step `half`; 4 replicas each, steps 50% then a 30s pause.
/// Timeline when all three change: api at 0, svc at 3, web at 4, 6 steps.
fn chain_spec() -> ReleasePlanSpec {
    let mut s = spec(
        vec![
            component("api", "api:1", 4),
            after(component("svc", "svc:1", 4), "api", None),
            after(component("web", "web:1", 4), "svc", Some("half")),
        ],
        vec![named(weight(50), "half"), pause(Some("30s"))],
    );
    s.health.progress_deadline_seconds = Some(300);
    s
}

const CHAIN: [&str; 3] = ["api", "svc", "web"];

impl Sim {
    /// Replicas of a component's new (current) and stable revision.
    fn pair(&self, component: &str) -> (i32, i32) {
        let c = self
            .status
            .components
            .iter()
            .find(|c| c.name == component)
            .unwrap();
        let at = |h: &Option<String>| h.as_ref().map_or(0, |h| self.at(component, h));
        (at(&c.current_hash), at(&c.stable_hash))
    }

    fn waiting_for(&self, component: &str) -> Vec<String> {
        self.status
            .components
            .iter()
            .find(|c| c.name == component)
            .unwrap()
            .waiting_for
            .clone()
    }

    /// Reconciles, makes pods ready and lets pauses pass until `done` holds.
    fn run_until(&mut self, what: &str, done: impl Fn(&Sim) -> bool) {
        for _ in 0..200 {
            if done(self) {
                return;
            }
            self.reconcile();
            if done(self) {
                return;
            }
            self.pods_ready();
            self.advance(11);
        }
        panic!("never reached: {what}; status {:?}", self.status.message);
    }

    fn change_all(&mut self, version: u8) {
        for c in CHAIN {
            self.change_image(c, &format!("{c}:{version}"));
        }
    }
}

#[test]
fn a_component_starts_only_once_its_dependencies_reached_their_point() {
    let mut sim = stable_sim(chain_spec());
    sim.change_all(2);
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!(sim.pair("api"), (2, 4), "api starts at 50%");
    assert_eq!(sim.pair("svc"), (0, 4), "svc waits");
    assert_eq!(sim.pair("web"), (0, 4), "web waits");
    assert_eq!(sim.waiting_for("svc"), ["api"]);
    assert_eq!(sim.waiting_for("web"), ["svc"]);
    assert_eq!(sim.waiting_for("api"), Vec::<String>::new());
    assert_eq!(sim.status.weight, 0, "the plan's weight is its lowest");
    assert!(
        sim.status.message.as_deref().unwrap().contains("step 1/6"),
        "{:?}",
        sim.status.message
    );

    // api goes all the way to 100% (its old revision at 0) before svc starts.
    sim.run_until("svc starts", |s| s.pair("svc").0 > 0);
    assert_eq!(sim.status.current_step, 3);
    assert_eq!(sim.pair("api"), (4, 0), "api fully promoted first");
    assert_eq!(sim.pair("svc").0, 2);
    assert_eq!(sim.pair("web"), (0, 4), "web waits for svc's step half");
    assert_eq!(sim.waiting_for("web"), ["svc"]);
    assert_eq!(sim.waiting_for("svc"), Vec::<String>::new());

    // web starts once svc's 50% step is done, while svc pauses.
    sim.run_until("web starts", |s| s.pair("web").0 > 0);
    assert_eq!(sim.status.current_step, 4);
    assert_eq!(sim.pair("svc"), (2, 2));
    assert_eq!(sim.waiting_for("web"), Vec::<String>::new());

    sim.run_until("stable", |s| s.status.phase == Phase::Stable);
    for c in CHAIN {
        assert_eq!(sim.pair(c).0, 4, "{c} at full");
        let st = &sim.status.components.iter().find(|x| x.name == c).unwrap();
        assert_eq!(st.stable_hash, Some(sim.hash_of(c)));
    }
}

#[test]
fn a_failure_rolls_back_the_later_components_first() {
    let mut sim = stable_sim(chain_spec());
    sim.change_all(2);
    sim.reconcile();
    sim.run_until("web starts", |s| s.pair("web").0 > 0);
    // The middle component fails while web, which depends on it, runs.
    let svc = sim.hash_of("svc");
    sim.crashing.insert(svc);
    sim.reconcile();
    assert_eq!(
        sim.status.phase,
        Phase::RollbackInProgress,
        "{:?} {:?}",
        sim.status.message,
        sim.replicas()
    );
    assert_eq!(sim.waiting_for("api"), ["svc", "web"]);
    assert_eq!(sim.waiting_for("svc"), ["web"]);
    assert!(sim.pair("api").0 == 4 && sim.pair("svc").0 == 2, "held");

    let mut order = Vec::new();
    for _ in 0..40 {
        sim.reconcile();
        sim.pods_ready();
        for c in CHAIN {
            if sim.pair(c).0 == 0 && !order.contains(&c) {
                order.push(c);
            }
        }
        // An earlier component's new revision leaves only once the later
        // ones are back.
        if sim.pair("api").0 < 4 {
            assert_eq!(sim.pair("svc"), (0, 4), "api before svc was back");
        }
        if sim.pair("svc").0 < 2 {
            assert_eq!(sim.pair("web"), (0, 4), "svc before web was back");
        }
        if sim.status.phase == Phase::RolledBack {
            break;
        }
    }
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!(order, ["web", "svc", "api"]);
    for c in CHAIN {
        assert_eq!(sim.pair(c), (0, 4), "{c} back on stable");
        assert!(sim.waiting_for(c).is_empty());
    }
}

#[test]
fn a_restart_mid_rollback_goes_on_in_order() {
    // The decision is read from the observation alone: a fresh sim with the
    // same cluster and status (a restarted operator) decides the same.
    let mut sim = stable_sim(chain_spec());
    sim.change_all(2);
    sim.reconcile();
    sim.run_until("web starts", |s| s.pair("web").0 > 0);
    sim.crashing.insert(sim.hash_of("svc"));
    sim.reconcile();
    sim.pods_ready();
    let restarted = sim.clone();
    let (a, b) = (sim.reconcile(), restarted.clone().reconcile());
    assert_eq!(a, b);
    assert_eq!(
        restarted.observe().status.components[0].waiting_for,
        ["svc", "web"]
    );
}

#[test]
fn an_unchanged_dependency_holds_nothing_up() {
    let mut sim = stable_sim(chain_spec());
    sim.change_image("web", "web:2");
    sim.reconcile();
    assert_eq!(sim.pair("web").0, 2, "web starts at once");
    assert!(sim.waiting_for("web").is_empty());
    assert_eq!(sim.status.weight, 50);
    sim.run_until("stable", |s| s.status.phase == Phase::Stable);
    assert_eq!(sim.status.history.len(), 2);
}

#[test]
fn a_first_release_goes_to_full_scale_at_once() {
    let mut sim = Sim::new(chain_spec());
    sim.reconcile();
    for c in CHAIN {
        assert_eq!(sim.pair(c).0, 4, "{c}");
    }
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
}

#[test]
fn bad_dependencies_are_refused_naming_the_field() {
    let check = |s: &ReleasePlanSpec| Target::from_spec(s).err().map(|e| e.field);
    let base = || {
        spec(
            vec![component("a", "a:1", 1), component("b", "b:1", 1)],
            vec![named(weight(50), "half"), weight(60)],
        )
    };
    let with = |edit: fn(&mut ReleasePlanSpec)| {
        let mut s = base();
        edit(&mut s);
        check(&s)
    };
    assert_eq!(with(|_| {}), None);
    assert_eq!(
        with(|s| s.components[1] = after(s.components[1].clone(), "a", Some("half"))),
        None
    );
    assert_eq!(
        with(|s| s.components[1] = after(s.components[1].clone(), "x", None)).as_deref(),
        Some("spec.components[1].dependsOn[0].component")
    );
    assert_eq!(
        with(|s| s.components[1] = after(s.components[1].clone(), "b", None)).as_deref(),
        Some("spec.components[1].dependsOn[0].component")
    );
    // Listed later: would allow a cycle.
    assert_eq!(
        with(|s| s.components[0] = after(s.components[0].clone(), "b", None)).as_deref(),
        Some("spec.components[0].dependsOn[0].component")
    );
    assert_eq!(
        with(|s| s.components[1] = after(s.components[1].clone(), "a", Some("nope"))).as_deref(),
        Some("spec.components[1].dependsOn[0].step")
    );
    assert_eq!(
        with(|s| s.strategy.steps[1].name = Some("half".into())).as_deref(),
        Some("spec.strategy.steps[1].name")
    );
    let mut bg = base();
    bg.components[1] = after(bg.components[1].clone(), "a", None);
    bg.strategy.steps.clear();
    blue_green(&mut bg, None, None);
    for c in &mut bg.components {
        *c = routed(c.clone());
    }
    assert_eq!(check(&bg).as_deref(), Some("spec.components[1].dependsOn"));
}

/// The weight a step index sets, as the core computed it before `dependsOn`.
fn weight_before(all: &[steps::Step], g: usize) -> i32 {
    if g >= all.len() {
        100
    } else {
        all[..=g]
            .iter()
            .rev()
            .find_map(steps::Step::weight)
            .unwrap_or(0)
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => Just(Op::Reconcile),
        6 => Just(Op::PodsReady),
        1 => (1i64..60).prop_map(Op::Advance),
        1 => (0usize..3, 2u8..5).prop_map(|(c, v)| Op::ChangeImage(c, v)),
        1 => (0usize..3).prop_map(Op::Crash),
        1 => (0usize..3).prop_map(Op::NeverReady),
        1 => Just(Op::Heal),
        // Abort, retry, pause, resume (promotion skips the order by request).
        1 => (2u8..6).prop_map(Op::Ask),
        1 => Just(Op::Delete),
    ]
}

/// The components `c` waits for in this rollout: those it depends on that
/// change, directly or through others that change (one that does not change
/// is already promoted: it holds nothing up, nor passes on a wait).
fn upstream(target: &Target, c: &str, changing: &dyn Fn(&str) -> bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo = vec![c.to_string()];
    while let Some(x) = todo.pop() {
        for d in target
            .component(&x)
            .map(|t| t.depends_on.clone())
            .unwrap_or_default()
        {
            if changing(&d.component) && out.insert(d.component.clone()) {
                todo.push(d.component);
            }
        }
    }
    out
}

/// The order invariants of one decision, independent of how the core
/// computes its timeline.
fn check_order(obs: &Observation, d: &Decision) -> Result<(), TestCaseError> {
    let Ok(target) = &obs.target else {
        return Ok(());
    };
    let rec = |name: &str| d.status.components.iter().find(|c| c.name == name);
    let observed = |name: &str, hash: &Option<String>| {
        hash.as_ref().map_or((0, 0), |h| {
            revisions_of(obs, name)
                .get(h.as_str())
                .map_or((0, 0), |r| (r.replicas, r.ready))
        })
    };
    let wanted = |name: &str, hash: &Option<String>| {
        hash.as_ref().and_then(|h| {
            d.deployments
                .iter()
                .find(|i| i.component == name && &i.hash == h)
                .map(|i| i.replicas)
        })
    };
    let changing =
        |name: &str| rec(name).is_some_and(|c| c.is_changing() && c.stable_hash.is_some());
    for t in &target.components {
        let Some(x) = rec(&t.name) else { continue };
        if !changing(&t.name) {
            continue;
        }
        // Never early: a component's new revision gets pods only once each
        // changing dependency has reached its point.
        if d.status.phase == Phase::RollingOut && wanted(&t.name, &x.current_hash) > Some(0) {
            for dep in &t.depends_on {
                let Some(dr) = rec(&dep.component) else {
                    continue;
                };
                if !changing(&dep.component) {
                    continue;
                }
                let r = target.component(&dep.component).map_or(0, |c| c.replicas);
                let (_, ready) = observed(&dep.component, &dr.current_hash);
                let (stable, _) = observed(&dep.component, &dr.stable_hash);
                match dep.step {
                    None => prop_assert!(
                        ready >= r && stable == 0,
                        "{} started before {} was fully promoted ({ready} ready, stable {stable})",
                        t.name,
                        dep.component
                    ),
                    Some(i) => {
                        let w = steps::in_force(&target.steps, i, steps::Step::weight).unwrap_or(0);
                        prop_assert!(
                            ready >= canary_replicas(r, w),
                            "{} started before {} finished step {i}",
                            t.name,
                            dep.component
                        );
                    }
                }
            }
        }
        // Reverse: a component moves back to stable only once every started
        // component after it is back.
        if d.status.phase == Phase::RollbackInProgress {
            let (cur, _) = observed(&t.name, &x.current_hash);
            // Its new revision leaves (the stable one may grow to keep
            // capacity while it waits).
            let moves = wanted(&t.name, &x.current_hash).is_some_and(|w| w < cur);
            if !moves {
                continue;
            }
            for later in &target.components {
                if !upstream(target, &later.name, &changing).contains(&t.name)
                    || !changing(&later.name)
                {
                    continue;
                }
                let Some(l) = rec(&later.name) else { continue };
                let (lcur, _) = observed(&later.name, &l.current_hash);
                let (lst, _) = observed(&later.name, &l.stable_hash);
                prop_assert!(
                    lcur == 0 && lst == later.replicas,
                    "{} moves back while {} (after it) is not back: current {lcur}, stable {lst}",
                    t.name,
                    later.name
                );
            }
        }
    }
    Ok(())
}

/// [`chain_spec`] with one step (50%, named `half`), so that random
/// histories often reach the later components.
fn short_chain_spec() -> ReleasePlanSpec {
    let mut s = chain_spec();
    s.strategy.steps.truncate(1);
    s
}

fn run_chain(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(short_chain_spec());
    sim.settle();
    // Every component changes: an ordered rollout, then random events.
    sim.change_all(2);
    for op in ops {
        match op {
            Op::Reconcile => {
                let obs = sim.observe();
                let d = decide(&obs, &sim.templates());
                check_order(&obs, &d)?;
                check_invariants(&obs, &d)?;
                sim.apply(&d);
                if sim.finalized {
                    return Ok(());
                }
            }
            Op::PodsReady => sim.pods_ready(),
            Op::Advance(s) => sim.advance(s),
            Op::ChangeImage(c, v) => sim.change_image(CHAIN[c], &format!("{}:{v}", CHAIN[c])),
            Op::Crash(c) => {
                let h = sim.hash_of(CHAIN[c]);
                sim.crashing.insert(h);
            }
            Op::NeverReady(c) => {
                let h = sim.hash_of(CHAIN[c]);
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
            Op::Delete => sim.deleting = true,
            _ => {}
        }
    }
    // Healed and resumed, it comes to rest: every rollout and rollback ends.
    sim.crashing.clear();
    sim.never_ready.clear();
    sim.ask(Action::Resume);
    for _ in 0..80 {
        let obs = sim.observe();
        let d = decide(&obs, &sim.templates());
        check_order(&obs, &d)?;
        sim.apply(&d);
        if sim.finalized {
            return Ok(());
        }
        sim.pods_ready();
        sim.advance(11);
    }
    prop_assert!(
        matches!(sim.status.phase, Phase::Stable | Phase::RolledBack),
        "did not come to rest: {:?} {:?}",
        sim.status.phase,
        sim.status.message
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn depends_on_never_starts_early_and_rolls_back_in_reverse(
        ops in proptest::collection::vec(op(), 1..120)
    ) {
        run_chain(ops)?;
    }

    /// Without `dependsOn` the timeline is the spec's steps: the same step,
    /// weight and count of steps as the core had before it.
    #[test]
    fn without_depends_on_the_timeline_is_the_steps(
        weights in proptest::collection::vec(prop_oneof![
            (0i32..=100).prop_map(Some),
            Just(None),
        ], 0..6),
        g in 0i32..8,
        age in 0u64..100,
        changing in proptest::collection::vec(any::<bool>(), 2),
    ) {
        let mut sorted: Vec<i32> = weights.iter().flatten().copied().collect();
        sorted.sort_unstable();
        let mut it = sorted.into_iter();
        let api_steps: Vec<Step> = weights
            .iter()
            .map(|w| match w {
                Some(_) => weight(it.next().unwrap_or(0)),
                None => pause(Some("30s")),
            })
            .collect();
        let s = spec(
            vec![component("web", "web:1", 5), component("api", "api:1", 3)],
            api_steps,
        );
        let target = Target::from_spec(&s).unwrap();
        let n = i32::try_from(target.steps.len()).unwrap();
        let g = g.min(n);
        let status = ReleasePlanStatus {
            phase: Phase::RollingOut,
            current_step: g,
            components: ["web", "api"]
                .iter()
                .zip(&changing)
                .map(|(name, ch)| ComponentStatus {
                    name: (*name).into(),
                    current_hash: Some(if *ch { "new" } else { "old" }.into()),
                    stable_hash: Some("old".into()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let tl = Timeline::of(&target, &status.components);
        prop_assert!(tl.flat());
        prop_assert_eq!(tl.total(), n);
        let age = Duration::from_secs(age);
        let gi = usize::try_from(g).unwrap();
        prop_assert_eq!(
            order::current(&target, &status, age),
            CurrentStep::at(&target.steps, gi, age)
        );
        prop_assert_eq!(weight_at(&target, &status), weight_before(&target.steps, gi));
        for c in ["web", "api"] {
            prop_assert_eq!(order::weight(&target, &status, c), weight_before(&target.steps, gi));
            let local = if gi >= target.steps.len() { Local::Final } else { Local::At(gi) };
            prop_assert_eq!(tl.local(c, g), local);
        }
    }
}

#[test]
fn each_pause_for_a_human_is_announced_on_the_global_timeline() {
    use crate::notify::Trigger;
    let mut s = chain_spec();
    s.strategy.steps[1] = pause(None);
    let mut sim = stable_sim(s);
    sim.change_all(2);
    let started = sim.status.rollout_count;
    let mut paused = Vec::new();
    for _ in 0..60 {
        if sim.status.phase == Phase::Stable && sim.status.rollout_count > started {
            break;
        }
        let fresh: Vec<_> = sim
            .reconcile()
            .notices
            .into_iter()
            .filter(|n| n.trigger == Trigger::Paused)
            .collect();
        if !fresh.is_empty() {
            sim.ask(Action::Promote { full: false });
        }
        paused.extend(fresh);
        sim.pods_ready();
        sim.advance(11);
    }
    assert_eq!(sim.status.phase, Phase::Stable);
    // api pauses at global step 1, svc at 4 (it starts at 3), web at 5 (it
    // starts at 4): one notice each, counted over the six global steps.
    let at: Vec<(i32, i32)> = paused.iter().map(|n| (n.step, n.steps)).collect();
    assert_eq!(at, [(2, 6), (5, 6), (6, 6)], "{paused:?}");
}

/// A cycle of any length is named along its path, from the component whose
/// dependency is listed after it; a dependency listed later that closes no
/// cycle is refused without one.
#[test]
fn a_cycle_of_any_length_is_named_along_its_path() {
    let message = |s: &ReleasePlanSpec| Target::from_spec(s).err().map(|e| e.message);
    let three = spec(
        vec![
            after(component("a", "a:1", 1), "c", None),
            after(component("b", "b:1", 1), "a", None),
            after(component("c", "c:1", 1), "b", None),
        ],
        vec![weight(50)],
    );
    let m = message(&three).unwrap();
    assert!(
        m.contains("dependsOn forms a cycle: a -> c -> b -> a"),
        "{m}"
    );
    assert_eq!(
        crate::plan::order::cycle_through(&three, "b").unwrap(),
        ["b", "a", "c", "b"]
    );
    // Listed later, no cycle: a depends on b, b on nothing.
    let later = spec(
        vec![
            after(component("a", "a:1", 1), "b", None),
            component("b", "b:1", 1),
        ],
        vec![weight(50)],
    );
    let m = message(&later).unwrap();
    assert!(
        m.contains("must be listed before this one") && !m.contains("cycle:"),
        "{m}"
    );
    assert_eq!(crate::plan::order::cycle_through(&later, "a"), None);
}
