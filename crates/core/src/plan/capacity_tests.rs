//! Releases within a fixed capacity, against Deployments played on nodes with
//! a fixed number of GPUs: a pod is scheduled only while a GPU is free (a
//! deleted pod holds its GPU one more tick while it terminates), becomes
//! Ready a tick after it is scheduled (unless its revision is broken), and a
//! scale-down deletes Pending and not-ready pods first, as a ReplicaSet does.

use super::*;
use crate::api::{Phase, ReleasePlanSpec};
use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

fn spec(replicas: i32, image: &str, weights: &[i32], capacity: Option<Value>) -> ReleasePlanSpec {
    let steps: Vec<_> = weights.iter().map(|w| json!({"setWeight": w})).collect();
    let mut c = json!({
        "name": "llama", "replicas": replicas,
        "template": {"metadata": {"labels": {"app": "llama"}},
                     "spec": {"containers": [{"name": "vllm", "image": image}]}}
    });
    if let Some(cap) = capacity {
        c["capacity"] = cap;
    }
    serde_json::from_value(json!({
        "components": [c],
        "strategy": {"steps": steps},
        "health": {"progressDeadlineSeconds": 300}
    }))
    .unwrap()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pod {
    Pending,
    /// Scheduled at this tick; Ready a tick later when healthy.
    Running(u32),
    /// Deleted: holds its GPU until the next tick.
    Terminating,
}

#[derive(Debug, Clone)]
struct Dep {
    hash: String,
    replicas: i32,
    pods: Vec<Pod>,
    created: DateTime<Utc>,
    /// The tick its count was lowered: its ReplicaSet deletes the extra pods
    /// a tick later (the worst order of two ReplicaSet controllers: the new
    /// one creating before the old one deletes).
    lowered: Option<u32>,
}

struct World {
    spec: ReleasePlanSpec,
    generation: i64,
    status: crate::api::ReleasePlanStatus,
    deps: BTreeMap<String, Dep>,
    gpus: usize,
    tick: u32,
    now: DateTime<Utc>,
    broken: BTreeSet<String>,
    /// Pods that were ever left Pending (no GPU free).
    pending_seen: usize,
}

impl World {
    fn new(spec: ReleasePlanSpec, gpus: usize) -> World {
        World {
            spec,
            generation: 1,
            status: Default::default(),
            deps: BTreeMap::new(),
            gpus,
            tick: 0,
            now: Utc.with_ymd_and_hms(2026, 12, 7, 12, 0, 0).unwrap(),
            broken: BTreeSet::new(),
            pending_seen: 0,
        }
    }

    fn ready(&self, d: &Dep) -> i32 {
        let n = d
            .pods
            .iter()
            .filter(|p| matches!(p, Pod::Running(t) if *t < self.tick))
            .count();
        if self.broken.contains(&d.hash) {
            0
        } else {
            i32::try_from(n).unwrap()
        }
    }

    fn observe(&self) -> (Observation, Templates) {
        let seen = config::ConfigObservation {
            disabled: true,
            ..Default::default()
        };
        let (target, templates) = match Target::from_spec(&self.spec) {
            Ok(t) => {
                let (t, tpl) = t.with_config("shop", &self.spec, &self.status, &seen);
                (Ok(t), tpl)
            }
            Err(e) => (Err(e), BTreeMap::new()),
        };
        let revisions = self
            .deps
            .iter()
            .map(|(name, d)| RevisionObs {
                name: name.clone(),
                component: "llama".into(),
                hash: d.hash.clone(),
                replicas: d.replicas,
                ready: self.ready(d),
                current: i32::try_from(d.pods.iter().filter(|p| **p != Pod::Terminating).count())
                    .unwrap(),
                created: Some(d.created),
            })
            .collect();
        let obs = Observation {
            plan: "shop".into(),
            now: self.now,
            generation: self.generation,
            target,
            status: self.status.clone(),
            revisions,
            workloads: Default::default(),
            pod_failures: Vec::new(),
            gates: Vec::new(),
            jobs: Vec::new(),
            traffic: Vec::new(),
            scales: Vec::new(),
            config: seen,
            adopted: Vec::new(),
            request: None,
            invalid_request: None,
            refusal: None,
            template_copies: Vec::new(),
            deleting: false,
        };
        (obs, templates)
    }

    /// One reconcile, then one tick of the cluster.
    fn step(&mut self) -> Decision {
        let (obs, templates) = self.observe();
        let d = decide(&obs, &templates);
        self.status = d.status.clone();
        for i in &d.deployments {
            let now = self.now;
            let tick = self.tick;
            let dep = self.deps.entry(i.name.clone()).or_insert_with(|| Dep {
                hash: i.hash.clone(),
                replicas: 0,
                pods: Vec::new(),
                created: now,
                lowered: None,
            });
            if i.replicas < dep.replicas {
                dep.lowered = Some(tick);
            }
            dep.replicas = i.replicas;
        }
        for name in &d.delete {
            self.deps.remove(name);
        }
        self.replica_sets();
        self.tick();
        d
    }

    /// Every ReplicaSet to its count: extra pods deleted (Pending, then not
    /// ready, then the youngest), missing ones created Pending.
    fn replica_sets(&mut self) {
        let tick = self.tick;
        for d in self.deps.values_mut() {
            let live: Vec<usize> = (0..d.pods.len())
                .filter(|i| d.pods[*i] != Pod::Terminating)
                .collect();
            let want = usize::try_from(d.replicas.max(0)).unwrap();
            if live.len() > want && d.lowered.is_none_or(|t| t < tick) {
                let mut order = live.clone();
                // Pending first, then not ready (scheduled this tick), then youngest.
                order.sort_by_key(|i| match d.pods[*i] {
                    Pod::Pending => (0, 0),
                    Pod::Running(t) if t >= tick => (1, u32::MAX - t),
                    Pod::Running(t) => (2, u32::MAX - t),
                    Pod::Terminating => (3, 0),
                });
                for i in order.into_iter().take(live.len() - want) {
                    d.pods[i] = Pod::Terminating;
                }
            }
            for _ in live.len()..want {
                d.pods.push(Pod::Pending);
            }
        }
    }

    fn used(&self) -> usize {
        self.deps
            .values()
            .flat_map(|d| &d.pods)
            .filter(|p| **p != Pod::Pending)
            .count()
    }

    /// Time passes: terminated pods free their GPU, the scheduler binds
    /// Pending pods to free GPUs.
    fn tick(&mut self) {
        self.now += chrono::Duration::seconds(5);
        self.tick += 1;
        for d in self.deps.values_mut() {
            d.pods.retain(|p| *p != Pod::Terminating);
        }
        let mut free = self.gpus.saturating_sub(self.used());
        let tick = self.tick;
        for d in self.deps.values_mut() {
            for p in &mut d.pods {
                if *p == Pod::Pending {
                    if free > 0 {
                        *p = Pod::Running(tick);
                        free -= 1;
                    } else {
                        self.pending_seen += 1;
                    }
                }
            }
        }
    }

    fn pods_of(&self, hash: &str) -> (i32, i32) {
        let mut live = 0;
        let mut ready = 0;
        for d in self.deps.values().filter(|d| d.hash == hash) {
            live +=
                i32::try_from(d.pods.iter().filter(|p| **p != Pod::Terminating).count()).unwrap();
            ready += self.ready(d);
        }
        (live, ready)
    }

    fn total(&self) -> (i32, i32) {
        let hashes: BTreeSet<String> = self.deps.values().map(|d| d.hash.clone()).collect();
        hashes.iter().fold((0, 0), |(l, r), h| {
            let (a, b) = self.pods_of(h);
            (l + a, r + b)
        })
    }

    fn settle(&mut self, n: usize, mut check: impl FnMut(&World, &Decision)) -> bool {
        for _ in 0..n {
            let d = self.step();
            check(self, &d);
            if matches!(self.status.phase, Phase::Stable | Phase::RolledBack)
                && self.deps.values().all(|d| {
                    d.pods.iter().all(|p| matches!(p, Pod::Running(_)))
                        && i32::try_from(d.pods.len()).unwrap() == d.replicas
                })
                && self.deps.values().all(|d| self.ready(d) == d.replicas)
            {
                return true;
            }
        }
        false
    }

    fn release(&mut self, image: &str) {
        let c = &mut self.spec.components[0];
        c.template.spec.as_mut().unwrap().containers[0].image = Some(image.into());
        self.generation += 1;
    }

    fn hash(&self) -> String {
        self.status.components[0].current_hash.clone().unwrap()
    }
}

fn released(replicas: i32, weights: &[i32], capacity: Option<Value>, gpus: usize) -> World {
    let mut w = World::new(spec(replicas, "vllm:0.6.3", weights, capacity), gpus);
    assert!(w.settle(400, |_, _| {}), "the first release settles");
    assert_eq!(w.status.phase, Phase::Stable);
    w
}

#[test]
fn without_capacity_a_canary_on_full_gpus_stays_pending_and_the_release_fails() {
    // Today's rule (no `capacity`): the canary comes up beside the stable
    // pods, which keep every GPU, so it never schedules.
    let mut w = released(4, &[25, 50], None, 4);
    w.pending_seen = 0;
    w.release("vllm:0.7.0");
    let new = {
        w.step();
        w.hash()
    };
    w.settle(200, |_, _| {});
    assert!(w.pending_seen > 0, "the canary was left Pending");
    assert_ne!(w.status.phase, Phase::Stable, "the release cannot complete");
    assert_eq!(w.pods_of(&new).1, 0, "no canary pod ever got a GPU");
}

#[test]
fn with_no_surge_a_release_on_full_gpus_completes_within_the_limits() {
    let cap = json!({"maxSurge": 0, "maxUnavailable": 1});
    let mut w = released(4, &[25, 50], Some(cap), 4);
    w.release("vllm:0.7.0");
    let mut max_written = 0;
    let done = w.settle(400, |w, d| {
        let (live, ready) = w.total();
        assert!(
            live <= 4,
            "never more pods than replicas + maxSurge: {live}"
        );
        assert!(
            ready >= 3,
            "never fewer ready than replicas - maxUnavailable: {ready}"
        );
        let written: i32 = d.deployments.iter().map(|i| i.replicas).sum();
        max_written = max_written.max(written);
    });
    assert!(done, "the release completes: {:?}", w.status.phase);
    assert_eq!(w.status.phase, Phase::Stable);
    let new = w.hash();
    assert_eq!(w.pods_of(&new), (4, 4));
    assert!(max_written <= 4, "never asks for more: {max_written}");
}

#[test]
fn a_rollback_within_capacity_brings_stable_back_without_getting_stuck() {
    let cap = json!({"maxSurge": 0, "maxUnavailable": 1});
    let mut w = released(4, &[50], Some(cap), 4);
    let old = w.hash();
    w.release("vllm:0.7.0");
    w.step();
    let new = w.hash();
    w.broken.insert(new.clone());
    let mut rolled_back = false;
    let done = w.settle(400, |w, _| {
        let (live, ready) = w.total();
        assert!(live <= 4, "never more pods than the GPUs: {live}");
        assert!(
            ready >= 3,
            "never fewer ready than replicas - maxUnavailable: {ready}"
        );
        rolled_back |= w.status.phase == Phase::RollbackInProgress;
    });
    assert!(rolled_back);
    assert!(done, "the rollback completes: {:?}", w.status.phase);
    assert_eq!(w.status.phase, Phase::RolledBack);
    assert_eq!(w.pods_of(&old), (4, 4));
    assert_eq!(w.pods_of(&new).0, 0);
}

#[test]
fn a_plan_without_capacity_decides_as_before() {
    // The same release on free nodes, with and without an explicit
    // capacity that allows what today's rule does: the default path is the
    // one every existing plan takes, untouched.
    let mut w = released(4, &[50], None, 100);
    w.release("vllm:0.7.0");
    w.step();
    let (obs, tpl) = w.observe();
    let d = decide(&obs, &tpl);
    let new = w.hash();
    let canary = d.deployments.iter().find(|i| i.hash == new).unwrap();
    let stable = d.deployments.iter().find(|i| i.hash != new).unwrap();
    assert_eq!((canary.replicas, stable.replicas), (2, 4));
}

/// A world whose component runs a baseline (`baseline: true`).
fn with_baseline(replicas: i32, weights: &[i32], capacity: Option<Value>, gpus: usize) -> World {
    let mut spec = spec(replicas, "vllm:0.6.3", weights, capacity);
    spec.components[0].baseline = true;
    let mut w = World::new(spec, gpus);
    assert!(w.settle(400, |_, _| {}), "the first release settles");
    w
}

/// The baseline's Deployment in the world: (replicas, live pods, ready pods).
fn baseline_of(w: &World, stable: &str) -> Option<(i32, i32, i32)> {
    let hash = crate::api::revision::baseline_of(stable);
    w.deps
        .values()
        .find(|d| d.hash == hash)
        .map(|d| (d.replicas, w.pods_of(&hash).0, w.pods_of(&hash).1))
}

#[test]
fn a_baseline_runs_beside_the_canary_only_while_a_step_runs() {
    let mut w = with_baseline(4, &[25, 50], None, 100);
    let old = w.hash();
    assert!(baseline_of(&w, &old).is_none(), "no baseline at rest");
    w.release("vllm:0.7.0");
    let mut seen = BTreeSet::new();
    let done = w.settle(400, |w, d| {
        let new = w.hash();
        let canary = d.deployments.iter().find(|i| i.hash == new);
        let base = d
            .deployments
            .iter()
            .find(|i| crate::api::revision::is_baseline(&i.hash));
        let step = w.status.current_step;
        match (w.status.phase, canary, base) {
            (Phase::RollingOut, Some(c), Some(b)) if b.replicas > 0 => {
                // Sized as the canary, from the stable revision's template,
                // named and labelled apart.
                assert_eq!(b.replicas, c.replicas, "step {step}");
                assert_eq!(b.template, TemplateSource::Of(old.clone()));
                assert_eq!(b.name, format!("shop-llama-{old}-baseline"));
                let status = w.status.components[0].baseline.clone().unwrap();
                assert_eq!(status.revision, format!("{old}-baseline"));
                assert_eq!(status.replicas, c.replicas);
                seen.insert(c.replicas);
            }
            (Phase::Stable, _, Some(b)) => assert_eq!(b.replicas, 0, "none once promoted"),
            _ => {}
        }
    });
    assert!(done, "{:?}", w.status.phase);
    assert_eq!(w.status.phase, Phase::Stable);
    assert_eq!(
        seen,
        BTreeSet::from([1, 2]),
        "a baseline at each canary step, as large as the canary"
    );
    assert!(
        baseline_of(&w, &old).is_none(),
        "the baseline's Deployment is deleted once promoted"
    );
    assert!(w.status.components[0].baseline.is_none());
}

#[test]
fn a_rollback_removes_the_baseline() {
    let mut w = with_baseline(4, &[50, 60], None, 100);
    let old = w.hash();
    w.release("vllm:0.7.0");
    w.step();
    let new = w.hash();
    // The canary's pods come up but never get ready: the progress deadline
    // rolls the release back while the baseline stands beside it.
    w.broken.insert(new.clone());
    let mut during = false;
    let done = w.settle(600, |w, _| {
        during |= w.status.phase == Phase::RollingOut && baseline_of(w, &old).is_some();
    });
    assert!(during, "the baseline stood beside the canary");
    assert!(done, "{:?}", w.status.phase);
    assert_eq!(w.status.phase, Phase::RolledBack);
    assert!(baseline_of(&w, &old).is_none(), "gone after the rollback");
    assert_eq!(w.pods_of(&old), (4, 4));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the replicas, limits, steps and health of the new revision, on
    /// nodes exactly full: pods never above `replicas + maxSurge`, ready pods
    /// never below `replicas - maxUnavailable`, and the plan always settles,
    /// on the new revision when it is healthy and back on the old one when not.
    #[test]
    fn capacity_is_kept_and_the_release_always_settles(
        replicas in 1i32..7,
        surge in 0i32..3,
        unavailable in 0i32..3,
        weights in prop::collection::btree_set(1i32..100, 0..3),
        healthy in any::<bool>(),
        baseline in any::<bool>(),
    ) {
        let cap = json!({"maxSurge": surge, "maxUnavailable": unavailable});
        let limits = crate::api::capacity::Capacity {
            max_surge: Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(surge)),
            max_unavailable: Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(unavailable)),
        }.limits(replicas);
        let gpus = usize::try_from(replicas + limits.surge).unwrap();
        let weights: Vec<i32> = weights.into_iter().collect();
        // A baseline is counted in the capacity: it takes the stable revision's room.
        let mut w = if baseline {
            with_baseline(replicas, &weights, Some(cap), gpus)
        } else {
            released(replicas, &weights, Some(cap), gpus)
        };
        let old = w.hash();
        w.release("vllm:0.7.0");
        w.step();
        let new = w.hash();
        if !healthy {
            w.broken.insert(new.clone());
        }
        let mut ok = true;
        let done = w.settle(600, |w, _| {
            let (live, ready) = w.total();
            ok &= live <= replicas + limits.surge;
            // Broken new pods are never ready: only the stable ones count.
            ok &= ready >= replicas - limits.unavailable;
        });
        prop_assert!(ok, "limits kept");
        prop_assert!(done, "settles: {:?}", w.status.phase);
        prop_assert!(baseline_of(&w, &old).is_none(), "no baseline once settled");
        if healthy {
            prop_assert_eq!(w.status.phase, Phase::Stable);
            prop_assert_eq!(w.pods_of(&new), (replicas, replicas));
        } else {
            prop_assert_eq!(w.status.phase, Phase::RolledBack);
            prop_assert_eq!(w.pods_of(&old), (replicas, replicas));
        }
    }
}

#[test]
fn a_baseline_given_fewer_pods_at_the_next_step_goes_down_within_the_limits() {
    // Found by the proptest: at 41% of 5 the baseline gets 1 pod where it had
    // 2; dropping its ready pod outside the budget left 4 ready of 5.
    let cap = json!({"maxSurge": 1, "maxUnavailable": 0});
    let mut w = with_baseline(5, &[21, 41], Some(cap), 6);
    w.release("vllm:0.7.0");
    let done = w.settle(400, |w, _| {
        let (live, ready) = w.total();
        assert!(
            live <= 6,
            "never more pods than replicas + maxSurge: {live}"
        );
        assert!(
            ready >= 5,
            "never fewer ready than replicas - maxUnavailable: {ready}"
        );
    });
    assert!(done, "{:?}", w.status.phase);
    assert_eq!(w.status.phase, Phase::Stable);
}
