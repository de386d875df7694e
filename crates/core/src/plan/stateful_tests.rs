//! StatefulSet components against a StatefulSet controller played as
//! Kubernetes runs one with `OrderedReady` pods: missing ordinals created in
//! order, then the highest ordinal at or above the partition that runs
//! another revision replaced, one at a time, and nothing at all while any
//! pod is not Ready (kubernetes/kubernetes#67250: a reverted template alone
//! never moves past a broken pod).

use super::*;
use crate::api::workload::WorkloadKind;
use crate::api::{Phase, ReleasePlanSpec};
use crate::plan::replicas::canary_replicas;
use crate::plan::stateful::{StatefulSetObs, WorkloadObs, WorkloadPod};
use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

fn spec(replicas: i32, image: &str, weights: &[i32], extra_deployment: bool) -> ReleasePlanSpec {
    let steps: Vec<_> = weights.iter().map(|w| json!({"setWeight": w})).collect();
    let mut components = vec![json!({
        "name": "db", "kind": "StatefulSet", "replicas": replicas,
        "statefulSet": {"serviceName": "db"},
        "template": {"metadata": {"labels": {"app": "db"}},
                     "spec": {"containers": [{"name": "db", "image": image}]}}
    })];
    if extra_deployment {
        components.push(json!({
            "name": "web", "replicas": 2,
            "template": {"spec": {"containers": [{"name": "web", "image": image}]}}
        }));
    }
    serde_json::from_value(json!({
        "components": components,
        "strategy": {"steps": steps},
        "health": {"progressDeadlineSeconds": 60}
    }))
    .unwrap()
}

/// One plan, its StatefulSet and pods, and its Deployments played simply
/// (ready one tick after they are scaled).
struct World {
    spec: ReleasePlanSpec,
    generation: i64,
    status: crate::api::ReleasePlanStatus,
    set: Option<StatefulSetObs>,
    pods: BTreeMap<i32, WorkloadPod>,
    deployments: BTreeMap<String, RevisionObs>,
    now: DateTime<Utc>,
    /// Revisions whose pods crash-loop (never Ready, reported as failures).
    crashing: BTreeSet<String>,
    /// Revisions whose pods never become Ready (no failure reported).
    never_ready: BTreeSet<String>,
    /// Pods the operator deleted.
    deleted: Vec<String>,
}

impl World {
    fn new(spec: ReleasePlanSpec) -> World {
        World {
            spec,
            generation: 1,
            status: Default::default(),
            set: None,
            pods: BTreeMap::new(),
            deployments: BTreeMap::new(),
            now: Utc.with_ymd_and_hms(2026, 12, 7, 12, 0, 0).unwrap(),
            crashing: BTreeSet::new(),
            never_ready: BTreeSet::new(),
            deleted: Vec::new(),
        }
    }

    fn workloads(&self) -> WorkloadObs {
        WorkloadObs {
            stateful_sets: self.set.iter().cloned().collect(),
            pods: self.pods.values().cloned().collect(),
            ..WorkloadObs::default()
        }
    }

    fn observe(&self) -> (Observation, Templates) {
        let (target, templates) = match Target::from_spec(&self.spec) {
            Ok(t) => {
                let seen = config::ConfigObservation {
                    disabled: true,
                    ..Default::default()
                };
                let (t, tpl) = t.with_config("shop", &self.spec, &self.status, &seen);
                (Ok(t), tpl)
            }
            Err(e) => (Err(e), BTreeMap::new()),
        };
        let workloads = self.workloads();
        let mut revisions: Vec<RevisionObs> = self.deployments.values().cloned().collect();
        revisions.extend(stateful::revisions(&workloads));
        let pod_failures = self
            .pods
            .values()
            .filter(|p| self.crashing.contains(&p.hash))
            .map(|p| PodFailure {
                component: p.component.clone(),
                hash: p.hash.clone(),
                pod: p.name.clone(),
                reason: "CrashLoopBackOff".into(),
                message: "back-off restarting failed container".into(),
            })
            .collect();
        let obs = Observation {
            plan: "shop".into(),
            now: self.now,
            generation: self.generation,
            target,
            status: self.status.clone(),
            revisions,
            workloads,
            pod_failures,
            gates: Vec::new(),
            jobs: Vec::new(),
            traffic: Vec::new(),
            scales: Vec::new(),
            config: config::ConfigObservation {
                disabled: true,
                ..Default::default()
            },
            adopted: Vec::new(),
            request: None,
            invalid_request: None,
            refusal: None,
            template_copies: Vec::new(),
            deleting: false,
        };
        (obs, templates)
    }

    fn healthy(&self, hash: &str) -> bool {
        !self.crashing.contains(hash) && !self.never_ready.contains(hash)
    }

    /// One reconcile, then one tick of the cluster.
    fn step(&mut self) -> Decision {
        let (obs, templates) = self.observe();
        let d = decide(&obs, &templates);
        self.status = d.status.clone();
        for i in &d.deployments {
            let r = self
                .deployments
                .entry(i.name.clone())
                .or_insert_with(|| RevisionObs {
                    name: i.name.clone(),
                    component: i.component.clone(),
                    hash: i.hash.clone(),
                    replicas: 0,
                    ready: 0,
                    current: 0,
                    created: Some(self.now),
                });
            r.replicas = i.replicas;
            r.current = i.replicas;
            r.ready = r.ready.min(i.replicas);
        }
        for name in &d.delete {
            self.deployments.remove(name);
        }
        for name in &d.delete_pods {
            self.deleted.push(name.clone());
            self.pods.retain(|_, p| &p.name != name);
        }
        if let Some(i) = d.stateful_sets.first() {
            let set = self.set.get_or_insert_with(|| StatefulSetObs {
                name: i.name.clone(),
                component: i.component.clone(),
                ..Default::default()
            });
            set.hash = Some(i.hash.clone());
            set.replicas = i.replicas;
            set.partition = i.partition;
        }
        self.tick();
        d
    }

    /// Time passes: started pods become Ready (unless their revision is
    /// broken), Deployments' pods too, and the StatefulSet controller makes
    /// one move.
    fn tick(&mut self) {
        self.now += chrono::Duration::seconds(5);
        let healthy: Vec<bool> = self.pods.values().map(|p| self.healthy(&p.hash)).collect();
        for (p, ok) in self.pods.values_mut().zip(healthy) {
            p.ready = ok;
        }
        for d in self.deployments.values_mut() {
            if !self.crashing.contains(&d.hash) && !self.never_ready.contains(&d.hash) {
                d.ready = d.replicas;
            }
        }
        self.controller();
    }

    /// The StatefulSet controller, OrderedReady.
    fn controller(&mut self) {
        let Some(set) = self.set.clone() else { return };
        let Some(update) = set.hash.clone() else {
            return;
        };
        self.pods.retain(|o, _| *o < set.replicas);
        // The revision of ordinals below the partition: what they run now
        // (the stable one), else the update revision.
        let current = self
            .pods
            .values()
            .find(|p| p.ordinal.is_some_and(|o| o < set.partition))
            .map_or_else(|| update.clone(), |p| p.hash.clone());
        for o in 0..set.replicas {
            match self.pods.get(&o) {
                None => {
                    let hash = if o >= set.partition {
                        update.clone()
                    } else {
                        current.clone()
                    };
                    self.pods.insert(
                        o,
                        WorkloadPod {
                            name: format!("{}-{o}", set.name),
                            component: set.component.clone(),
                            hash,
                            ordinal: Some(o),
                            ready: false,
                            terminating: false,
                            node: None,
                        },
                    );
                    return;
                }
                // Monotonic: nothing moves past a pod that is not Ready.
                Some(p) if !p.ready => return,
                Some(_) => {}
            }
        }
        let target = (set.partition..set.replicas)
            .rev()
            .find(|o| self.pods.get(o).is_some_and(|p| p.hash != update));
        if let Some(o) = target {
            self.pods.remove(&o);
        }
    }

    fn on(&self, hash: &str) -> usize {
        self.pods.values().filter(|p| p.hash == hash).count()
    }

    /// Runs until the plan settles (nothing more changes), at most `n` reconciles.
    fn settle(&mut self, n: usize, mut check: impl FnMut(&World, &Decision)) {
        for _ in 0..n {
            let d = self.step();
            check(self, &d);
            if matches!(self.status.phase, Phase::Stable | Phase::RolledBack)
                && self.pods.values().all(|p| p.ready)
                && i32::try_from(self.pods.len()).ok() == self.set.as_ref().map(|s| s.replicas)
            {
                let before = self.pods.clone();
                let d = self.step();
                check(self, &d);
                if before == self.pods {
                    return;
                }
            }
        }
    }

    fn release(&mut self, image: &str) {
        let c = &mut self.spec.components[0];
        c.template.spec.as_mut().unwrap().containers[0].image = Some(image.into());
        if let Some(w) = self.spec.components.get_mut(1) {
            w.template.spec.as_mut().unwrap().containers[0].image = Some(image.into());
        }
        self.generation += 1;
    }

    fn hash(&self) -> String {
        self.status.components[0].current_hash.clone().unwrap()
    }
}

fn released(replicas: i32, weights: &[i32]) -> (World, String) {
    let mut w = World::new(spec(replicas, "db:1", weights, false));
    w.settle(400, |_, _| {});
    assert_eq!(w.status.phase, Phase::Stable);
    let v1 = w.hash();
    assert_eq!(w.on(&v1), usize::try_from(replicas).unwrap());
    (w, v1)
}

#[test]
fn a_stateful_set_is_written_once_per_component_with_the_spec_settings() {
    let (w, v1) = released(3, &[50]);
    let set = w.set.as_ref().unwrap();
    assert_eq!(set.name, "shop-db");
    assert_eq!((set.replicas, set.partition), (3, 0));
    assert_eq!(set.hash.as_deref(), Some(v1.as_str()));
    let (obs, tpl) = w.observe();
    let d = decide(&obs, &tpl);
    assert!(
        d.deployments.is_empty(),
        "no Deployment for a StatefulSet component"
    );
    let i = &d.stateful_sets[0];
    assert_eq!(i.settings.service_name.as_deref(), Some("db"));
    assert_eq!(
        obs.target.as_ref().unwrap().components[0].kind,
        WorkloadKind::StatefulSet
    );
}

#[test]
fn the_canary_is_the_highest_ordinals_and_the_stable_pods_are_never_more_than_replaced() {
    let (mut w, v1) = released(4, &[25, 50]);
    w.release("db:2");
    let mut seen_partitions = BTreeSet::new();
    w.settle(400, |w, d| {
        if let Some(i) = d.stateful_sets.first() {
            seen_partitions.insert(i.partition);
        }
        // Never more pods than the replicas: a pod is replaced, not added.
        assert!(w.pods.len() <= 4);
        if w.status.phase == Phase::RollingOut {
            let new = w.status.components[0].current_hash.clone().unwrap();
            let canary = canary_replicas(4, w.status.weight);
            for p in w.pods.values() {
                if p.hash == new {
                    assert!(
                        p.ordinal.unwrap() >= 4 - canary,
                        "{p:?} below the canary's ordinals"
                    );
                }
            }
        }
    });
    assert_eq!(w.status.phase, Phase::Stable);
    let v2 = w.hash();
    assert_ne!(v1, v2);
    assert_eq!(w.on(&v2), 4);
    // 25% then 50% of 4: ordinal 3, then 2 and 3, then all.
    assert!(seen_partitions.contains(&3), "{seen_partitions:?}");
    assert!(seen_partitions.contains(&2), "{seen_partitions:?}");
    assert!(w.deleted.is_empty(), "a healthy rollout deletes no pod");
}

#[test]
fn a_crash_looping_canary_is_rolled_back_and_the_stuck_pod_is_replaced() {
    let (mut w, v1) = released(3, &[34, 67]);
    w.release("db:bad");
    // Find the new revision's hash: one reconcile starts the rollout.
    w.step();
    let bad = w.hash();
    w.crashing.insert(bad.clone());
    w.settle(400, |_, _| {});
    assert_eq!(w.status.phase, Phase::RolledBack);
    assert_eq!(
        w.on(&v1),
        3,
        "every pod back on the stable revision: {:?}",
        w.pods
    );
    assert!(w.pods.values().all(|p| p.ready));
    // The StatefulSet controller alone never moves past the crashing pod.
    assert_eq!(w.deleted, vec!["shop-db-2".to_string()]);
}

#[test]
fn without_the_operator_deleting_it_a_reverted_stateful_set_stays_stuck() {
    // The controller as played here really does hang on a broken pod (so the
    // test above shows the operator's deletion, not the model's leniency).
    let (mut w, v1) = released(3, &[34]);
    w.release("db:bad");
    w.step();
    let bad = w.hash();
    w.never_ready.insert(bad.clone());
    for _ in 0..5 {
        w.step();
    }
    assert_eq!(w.on(&bad), 1);
    let set = w.set.as_mut().unwrap();
    set.hash = Some(v1.clone());
    set.partition = 0;
    for _ in 0..20 {
        w.tick();
    }
    assert_eq!(
        w.on(&bad),
        1,
        "reverted alone, the set never replaces the broken pod"
    );
}

#[test]
fn a_canary_that_never_becomes_ready_is_rolled_back_at_the_progress_deadline() {
    let (mut w, v1) = released(2, &[50]);
    w.release("db:slow");
    w.step();
    let slow = w.hash();
    w.never_ready.insert(slow);
    w.settle(400, |_, _| {});
    assert_eq!(w.status.phase, Phase::RolledBack);
    assert_eq!(w.on(&v1), 2);
}

#[test]
fn a_stateful_set_and_a_deployment_roll_back_as_one() {
    let mut w = World::new(spec(2, "db:1", &[50], true));
    w.settle(400, |_, _| {});
    assert_eq!(w.status.phase, Phase::Stable);
    let v1 = w.hash();
    let web_v1 = w.status.components[1].current_hash.clone().unwrap();
    w.release("db:2");
    w.step();
    // The web Deployment's new revision crashes: the StatefulSet goes back too.
    let web_v2 = w.status.components[1].current_hash.clone().unwrap();
    assert_ne!(web_v1, web_v2);
    w.crashing.insert(web_v2.clone());
    for d in w.deployments.values_mut() {
        if d.hash == web_v2 {
            d.ready = 0;
        }
    }
    w.settle(400, |_, _| {});
    assert_eq!(w.status.phase, Phase::RolledBack);
    assert_eq!(w.on(&v1), 2, "{:?}", w.pods);
    let web = w.deployments.values().find(|d| d.hash == web_v1).unwrap();
    assert_eq!((web.replicas, web.ready), (2, 2));
}

#[test]
fn a_superseded_rollout_moves_its_pods_to_the_newest_revision_not_back() {
    let (mut w, v1) = released(4, &[50, 75]);
    w.release("db:2");
    // Up to the 50% step with v2 ready.
    for _ in 0..30 {
        w.step();
        if w.status.weight == 50 && w.on(&w.hash()) == 2 {
            break;
        }
    }
    let v2 = w.hash();
    assert_eq!(w.on(&v2), 2);
    w.release("db:3");
    w.settle(400, |w, _| {
        assert!(w.pods.len() <= 4);
    });
    assert_eq!(w.status.phase, Phase::Stable);
    let v3 = w.hash();
    assert_eq!(w.on(&v3), 4);
    assert_eq!(w.on(&v1) + w.on(&v2), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the replicas, steps and failure: at most one pod away from
    /// Ready at a time (the set replaces one by one), the new revision never
    /// holds more ordinals than the step's canary while rolling out, and the
    /// plan ends Stable on the new revision or RolledBack with every pod on
    /// the stable one.
    #[test]
    fn stateful_rollouts_keep_their_invariants(
        replicas in 1..7i32,
        weights in proptest::collection::vec(1..100i32, 1..4),
        failure in 0..3u8,
    ) {
        let mut weights = weights;
        weights.sort_unstable();
        weights.dedup();
        let (mut w, v1) = released(replicas, &weights);
        w.release("db:2");
        w.step();
        let v2 = w.hash();
        match failure {
            1 => { w.crashing.insert(v2.clone()); }
            2 => { w.never_ready.insert(v2.clone()); }
            _ => {}
        }
        w.settle(1000, |w, _| {
            let away = w.pods.values().filter(|p| !p.ready).count()
                + usize::try_from(w.set.as_ref().map_or(0, |s| s.replicas)).unwrap()
                - w.pods.len();
            assert!(away <= 1, "{away} pods away from Ready: {:?}", w.pods);
            if w.status.phase == Phase::RollingOut {
                let canary = canary_replicas(replicas, w.status.weight);
                assert!(i32::try_from(w.on(&v2)).unwrap() <= canary.max(1));
            }
        });
        if failure == 0 {
            prop_assert_eq!(w.status.phase, Phase::Stable);
            prop_assert_eq!(w.on(&v2), usize::try_from(replicas).unwrap());
        } else {
            prop_assert_eq!(w.status.phase, Phase::RolledBack);
            prop_assert_eq!(w.on(&v1), usize::try_from(replicas).unwrap());
            prop_assert!(w.pods.values().all(|p| p.ready));
        }
    }
}
