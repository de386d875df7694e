//! DaemonSet components against a DaemonSet controller played as Kubernetes
//! runs one: each node runs the pod of the DaemonSet whose node affinity
//! holds it (a node leaving a DaemonSet's affinity loses its pod at once),
//! a new pod is Ready a tick later unless its revision is broken, and nodes
//! may join at any time.

use super::*;
use crate::api::{Phase, ReleasePlanSpec};
use crate::plan::daemon::{DaemonSetObs, NodeScope};
use crate::plan::replicas::canary_replicas;
use crate::plan::stateful::{WorkloadObs, WorkloadPod};
use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

fn spec(image: &str, weights: &[i32], max_unavailable: Option<Value>) -> ReleasePlanSpec {
    let steps: Vec<_> = weights.iter().map(|w| json!({"setWeight": w})).collect();
    let mut agent = json!({
        "name": "agent", "kind": "DaemonSet",
        "template": {"metadata": {"labels": {"app": "agent"}},
                     "spec": {"containers": [{"name": "agent", "image": image}]}}
    });
    if let Some(m) = max_unavailable {
        agent["daemonSet"] = json!({"maxUnavailable": m});
    }
    serde_json::from_value(json!({
        "components": [agent],
        "strategy": {"steps": steps},
        "health": {"progressDeadlineSeconds": 60}
    }))
    .unwrap()
}

struct World {
    spec: ReleasePlanSpec,
    generation: i64,
    status: crate::api::ReleasePlanStatus,
    nodes: Vec<String>,
    daemons: BTreeMap<String, DaemonSetObs>,
    /// The pod on each node: (revision, ready).
    pods: BTreeMap<String, (String, bool)>,
    now: DateTime<Utc>,
    crashing: BTreeSet<String>,
    never_ready: BTreeSet<String>,
}

impl World {
    fn new(spec: ReleasePlanSpec, nodes: usize) -> World {
        World {
            spec,
            generation: 1,
            status: Default::default(),
            nodes: (0..nodes).map(|i| format!("node-{i:02}")).collect(),
            daemons: BTreeMap::new(),
            pods: BTreeMap::new(),
            now: Utc.with_ymd_and_hms(2026, 12, 7, 12, 0, 0).unwrap(),
            crashing: BTreeSet::new(),
            never_ready: BTreeSet::new(),
        }
    }

    fn workloads(&self) -> WorkloadObs {
        WorkloadObs {
            daemon_sets: self.daemons.values().cloned().collect(),
            pods: self
                .pods
                .iter()
                .map(|(node, (hash, ready))| WorkloadPod {
                    name: format!("agent-{node}"),
                    component: "agent".into(),
                    hash: hash.clone(),
                    ordinal: None,
                    ready: *ready,
                    terminating: false,
                    node: Some(node.clone()),
                })
                .collect(),
            ..WorkloadObs::default()
        }
    }

    fn observe(&self) -> (Observation, Templates) {
        let workloads = self.workloads();
        let (target, templates) = match Target::from_spec(&self.spec) {
            Ok(t) => {
                let seen = config::ConfigObservation {
                    disabled: true,
                    ..Default::default()
                };
                let (t, tpl) = t.with_workloads(&workloads).with_config(
                    "shop",
                    &self.spec,
                    &self.status,
                    &seen,
                );
                (Ok(t), tpl)
            }
            Err(e) => (Err(e), BTreeMap::new()),
        };
        let pod_failures = workloads
            .pods
            .iter()
            .filter(|p| self.crashing.contains(&p.hash))
            .map(|p| PodFailure {
                component: p.component.clone(),
                hash: p.hash.clone(),
                pod: p.name.clone(),
                reason: "CrashLoopBackOff".into(),
                message: "back-off".into(),
            })
            .collect();
        let obs = Observation {
            plan: "shop".into(),
            now: self.now,
            generation: self.generation,
            target,
            status: self.status.clone(),
            revisions: stateful::revisions(&workloads),
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

    fn step(&mut self) -> Decision {
        let (obs, templates) = self.observe();
        let d = decide(&obs, &templates);
        self.status = d.status.clone();
        for i in &d.daemon_sets {
            let o = self.daemons.entry(i.name.clone()).or_default();
            o.name.clone_from(&i.name);
            o.component.clone_from(&i.component);
            o.hash.clone_from(&i.hash);
            o.nodes = i.nodes.clone();
        }
        self.daemons
            .retain(|n, _| !d.delete_daemon_sets.contains(n));
        self.controller();
        self.tick();
        d
    }

    /// Each node runs the pod of the DaemonSet that holds it.
    fn controller(&mut self) {
        for o in self.daemons.values_mut() {
            o.scheduled = 0;
            o.counted = true;
        }
        for node in &self.nodes {
            let runs = self.daemons.values_mut().find(|o| match &o.nodes {
                NodeScope::All => true,
                NodeScope::Only(n) => n.contains(node),
                NodeScope::Except(n) => !n.contains(node),
            });
            match runs {
                None => {
                    self.pods.remove(node);
                }
                Some(o) => {
                    o.scheduled += 1;
                    if self.pods.get(node).is_none_or(|(h, _)| *h != o.hash) {
                        self.pods.insert(node.clone(), (o.hash.clone(), false));
                    }
                }
            }
        }
    }

    fn tick(&mut self) {
        self.now += chrono::Duration::seconds(5);
        let bad: BTreeSet<String> = self.crashing.union(&self.never_ready).cloned().collect();
        for (hash, ready) in self.pods.values_mut() {
            *ready = !bad.contains(hash);
        }
    }

    fn settle(&mut self, n: usize, mut check: impl FnMut(&World)) {
        for _ in 0..n {
            let before = (self.status.clone(), self.pods.clone(), self.daemons.clone());
            self.step();
            check(self);
            if matches!(self.status.phase, Phase::Stable | Phase::RolledBack)
                && before == (self.status.clone(), self.pods.clone(), self.daemons.clone())
            {
                return;
            }
        }
    }

    fn release(&mut self, image: &str) {
        self.spec.components[0]
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some(image.into());
        self.generation += 1;
    }

    fn hash(&self) -> String {
        self.status.components[0].current_hash.clone().unwrap()
    }

    fn on(&self, hash: &str) -> usize {
        self.pods.values().filter(|(h, _)| h == hash).count()
    }

    fn without_ready_pod(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| !self.pods.get(*n).is_some_and(|(_, r)| *r))
            .count()
    }
}

fn released(nodes: usize, weights: &[i32], max: Option<Value>) -> (World, String) {
    let mut w = World::new(spec("agent:1", weights, max), nodes);
    w.settle(200, |_| {});
    assert_eq!(w.status.phase, Phase::Stable, "{:?}", w.status.message);
    let v1 = w.hash();
    assert_eq!(w.on(&v1), nodes);
    assert_eq!(w.daemons.len(), 1);
    (w, v1)
}

#[test]
fn the_canary_is_a_share_of_the_nodes_and_a_node_that_joins_gets_the_stable_revision() {
    let (mut w, v1) = released(10, &[30, 60], Some(json!(2)));
    w.release("agent:2");
    let mut at_30 = None;
    let mut joined = false;
    w.settle(300, |w| {
        if w.status.phase != Phase::RollingOut {
            return;
        }
        let v2 = w.status.components[0].current_hash.clone().unwrap();
        if w.status.weight == 30 && w.on(&v2) == 3 && at_30.is_none() {
            at_30 = Some(w.pods.clone());
        }
        assert!(
            w.on(&v2)
                <= usize::try_from(canary_replicas(
                    i32::try_from(w.nodes.len()).unwrap(),
                    w.status.weight
                ))
                .unwrap()
        );
    });
    let _ = &mut joined;
    let at_30 = at_30.expect("the 30% step with 3 of 10 nodes on the new revision");
    let v2 = w.hash();
    assert_eq!(
        at_30
            .iter()
            .filter(|(_, (h, _))| *h == v2)
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["node-00", "node-01", "node-02"],
        "the first nodes by name"
    );
    assert_eq!(w.status.phase, Phase::Stable);
    assert_eq!(w.on(&v2), 10);
    assert_eq!(
        w.daemons.len(),
        1,
        "the stable revision's DaemonSet is gone"
    );
    assert_eq!(w.daemons.values().next().unwrap().nodes, NodeScope::All);
    let _ = v1;
}

#[test]
fn a_node_joining_mid_rollout_runs_the_stable_revision_until_promotion() {
    let (mut w, v1) = released(3, &[34, 67], None);
    w.release("agent:2");
    w.step();
    let v2 = w.hash();
    for _ in 0..10 {
        if w.on(&v2) == 1 {
            break;
        }
        w.step();
    }
    assert_eq!(
        (w.status.phase, w.status.weight, w.on(&v2)),
        (Phase::RollingOut, 34, 1)
    );
    w.nodes.push("node-99".into());
    w.step();
    assert_eq!(
        w.pods["node-99"].0, v1,
        "a new node gets the stable revision"
    );
    w.settle(300, |_| {});
    assert_eq!(w.status.phase, Phase::Stable);
    assert_eq!(w.on(&v2), 4, "promotion takes the new node too");
}

#[test]
fn a_crash_looping_canary_goes_back_to_the_stable_revision_on_every_node() {
    let (mut w, v1) = released(6, &[50], Some(json!("50%")));
    w.release("agent:bad");
    w.step();
    let bad = w.hash();
    w.crashing.insert(bad.clone());
    w.settle(300, |_| {});
    assert_eq!(w.status.phase, Phase::RolledBack);
    assert_eq!(w.on(&v1), 6);
    assert!(w.pods.values().all(|(_, r)| *r));
    assert!(
        w.daemons
            .values()
            .all(|d| d.hash == v1 && d.nodes == NodeScope::All)
    );
}

#[test]
fn no_node_list_goes_into_a_first_release() {
    let w = World::new(spec("agent:1", &[10, 50], None), 4);
    let (obs, tpl) = w.observe();
    let d = decide(&obs, &tpl);
    assert_eq!(d.daemon_sets.len(), 1);
    assert_eq!(d.daemon_sets[0].nodes, NodeScope::All);
    assert!(d.deployments.is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the nodes, steps, budget and failure: never more nodes
    /// without a ready pod than `maxUnavailable` allows while rolling out
    /// (plus one per node that had none before), the new revision never on
    /// more nodes than the step's share, and the plan ends Stable on every
    /// node or RolledBack with every node on the stable revision.
    #[test]
    fn daemon_rollouts_keep_their_invariants(
        nodes in 1..12usize,
        weights in proptest::collection::vec(1..100i32, 1..4),
        max in 1..4i32,
        failure in 0..3u8,
    ) {
        let mut weights = weights;
        weights.sort_unstable();
        weights.dedup();
        let (mut w, v1) = released(nodes, &weights, Some(json!(max)));
        w.release("agent:2");
        // Broken from its first pod on (a pod that turns bad later is not
        // the rollout's doing).
        let v2 = Target::from_spec(&w.spec).unwrap().components[0].hash.clone();
        match failure {
            1 => { w.crashing.insert(v2.clone()); }
            2 => { w.never_ready.insert(v2.clone()); }
            _ => {}
        }
        let max = usize::try_from(max).unwrap();
        w.settle(1000, |w| {
            if w.status.phase == Phase::RollingOut {
                assert!(w.without_ready_pod() <= max, "{} nodes without a ready pod (max {max}): {:?}", w.without_ready_pod(), w.pods);
                let share = canary_replicas(i32::try_from(w.nodes.len()).unwrap(), w.status.weight);
                assert!(i32::try_from(w.on(&v2)).unwrap() <= share.max(1));
            }
        });
        if failure == 0 {
            prop_assert_eq!(w.status.phase, Phase::Stable);
            prop_assert_eq!(w.on(&v2), nodes);
        } else {
            prop_assert_eq!(w.status.phase, Phase::RolledBack);
            prop_assert_eq!(w.on(&v1), nodes);
            prop_assert!(w.pods.values().all(|(_, r)| *r));
        }
    }
}
