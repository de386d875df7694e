//! A dry run of a rollout through [`decide`]: what the operator will do with
//! a spec, step by step, before it is applied (the plugin's `preview`).
//!
//! The simulator never computes replicas, weights or step ends itself: it
//! plays the cluster. It hands `decide` an observation, applies the decision
//! as the controller would (Deployments created and scaled, Services and
//! routes written, Job gates' Jobs created), lets pods become ready after
//! `ready_after`, answers every gate with `Passed`, promotes a pause that
//! waits for a human, and moves its clock to the decision's next wake-up
//! (`requeue_after`). So whatever the machine does (new step kinds, ordering,
//! windows) shows in a preview without a change here, and a preview and a
//! real rollout cannot drift apart.

use super::autoscale::{AutoscalerIntent, ScaleObs, ScaleState};
use super::{
    Action, Decision, Observation, Request, RevisionObs, SpecError, Target, TemplateSource, config,
    decide, traffic,
};
use crate::api::{Phase, ReleasePlanSpec, ReleasePlanStatus, Verdict};
use crate::gates::job::{JobObs, JobState};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::time::Duration;

/// Most reconciles one simulation runs before it gives up (a spec that never
/// settles is reported as such, never looped on).
pub const MAX_RECONCILES: usize = 2_000;

/// What the simulation starts from.
#[derive(Debug, Clone)]
pub struct Start {
    /// Name of the plan.
    pub plan: String,
    /// The spec to preview.
    pub spec: ReleasePlanSpec,
    /// `metadata.generation` the spec will have.
    pub generation: i64,
    /// The live status; the default for a plan that does not exist yet.
    pub status: ReleasePlanStatus,
    /// The live revision Deployments (ready as observed).
    pub revisions: Vec<RevisionObs>,
    /// The live StatefulSets and their pods (ready as observed).
    pub workloads: super::stateful::WorkloadObs,
    /// The time the simulation starts at (its clock only moves from there).
    pub now: DateTime<Utc>,
    /// How long a new or scaled-up pod takes to become ready.
    pub ready_after: Duration,
    /// The ConfigMaps and Secrets the templates reference, as the operator
    /// observes them: config is versioned as the operator does it, so a
    /// revision's hash is the live one. `None`: read in place (offline).
    pub config: Option<config::ConfigObservation>,
}

/// One component at a step: replicas of its current and stable revisions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ComponentAt {
    /// Component name.
    pub name: String,
    /// Revision hash rolled out (`None` when the spec dropped the component).
    pub current_hash: Option<String>,
    /// Stable revision hash (`None` before a first release).
    pub stable_hash: Option<String>,
    /// Replicas of the current revision once the step settled.
    pub current_replicas: i32,
    /// Replicas of the stable revision once the step settled (0 when it is
    /// the current revision).
    pub stable_replicas: i32,
    /// Most pods of the component (every revision) at once during the step.
    pub peak_pods: i32,
}

/// One step of the simulated rollout, as it settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepAt {
    /// Phase once settled.
    pub phase: Phase,
    /// `status.currentStep` (the number of steps for the final step).
    pub step: i32,
    /// `status.weight`.
    pub weight: i32,
    /// `status.trafficWeight` (components with a router).
    pub traffic_weight: Option<i32>,
    /// Per component, in spec order.
    pub components: Vec<ComponentAt>,
    /// The gates that judge this step (none once Stable).
    pub gates: Vec<String>,
    /// Since the simulation started, when the step began.
    pub starts_after: Duration,
    /// How long the step took in the simulation.
    pub duration: Duration,
    /// The step held until promoted (a pause without duration, or a
    /// blue-green preview without auto promotion): the simulation promoted it.
    pub waits_for_promotion: bool,
}

/// How a simulation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The spec's revision is Stable.
    Stable,
    /// The spec cannot be acted on (the operator would report InvalidSpec).
    Invalid(SpecError),
    /// It stopped elsewhere (a phase, or the reconcile bound): the message.
    Stuck(String),
}

/// The result of a simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct Simulation {
    /// Whether a rollout starts at all (the spec's revision differs from the
    /// live one).
    pub rollout: bool,
    /// Settled steps in order (the last is Stable when it ended well).
    pub steps: Vec<StepAt>,
    /// How it ended.
    pub end: End,
    /// Simulated time from start to end.
    pub total: Duration,
    /// The Deployment intents of the simulation's first decision that creates
    /// each revision Deployment (for a server-side dry run of each).
    pub created: Vec<super::DeploymentIntent>,
    /// The templates the new revisions run, by component.
    pub templates: crate::plan::Templates,
    /// The status at the end (to chain simulations).
    pub status: ReleasePlanStatus,
    /// The revision Deployments at the end.
    pub revisions: Vec<RevisionObs>,
    /// The config it versioned ([`Start::config`]), when it read any.
    pub config: Option<config::ConfigObservation>,
}

impl Simulation {
    /// The config the simulation was started with, when it read any.
    pub fn config_read(&self) -> Option<&config::ConfigObservation> {
        self.config.as_ref()
    }
}

#[derive(Debug, Clone)]
struct Rev {
    obs: RevisionObs,
    /// When the pods asked for last become ready.
    ready_at: DateTime<Utc>,
}

/// A StatefulSet as the simulation plays it: its pods by ordinal, each with
/// the time it becomes ready.
#[derive(Debug, Clone)]
struct Set {
    obs: super::stateful::StatefulSetObs,
    pods: BTreeMap<i32, (super::stateful::WorkloadPod, DateTime<Utc>)>,
}

/// The cluster as the simulation plays it.
struct World {
    start: Start,
    status: ReleasePlanStatus,
    revs: BTreeMap<String, Rev>,
    sets: BTreeMap<String, Set>,
    /// The DaemonSets, by name.
    daemons: BTreeMap<String, super::daemon::DaemonSetObs>,
    /// Each DaemonSet component's pod on each node, by (component, node).
    node_pods: BTreeMap<(String, String), (super::stateful::WorkloadPod, DateTime<Utc>)>,
    /// The nodes DaemonSets run on: the live pods', else three.
    nodes: Vec<String>,
    now: DateTime<Utc>,
    jobs: Vec<JobObs>,
    traffic: BTreeMap<String, traffic::TrafficObs>,
    scales: BTreeMap<String, i32>,
    hpas: BTreeMap<String, bool>,
    request: Option<Request>,
    promotions: u32,
    created: Vec<super::DeploymentIntent>,
}

impl World {
    fn scale_obs(&self) -> Vec<ScaleObs> {
        let mut names: Vec<&String> = self.scales.keys().chain(self.hpas.keys()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|c| ScaleObs {
                component: c.clone(),
                replicas: self.scales.get(c).copied(),
                hpa: self.hpas.contains_key(c),
                hpa_message: None,
            })
            .collect()
    }

    /// What the simulation observes of config: what [`Start::config`] says,
    /// else every reference read in place.
    fn config_seen(&self) -> config::ConfigObservation {
        self.start
            .config
            .clone()
            .unwrap_or_else(|| config::ConfigObservation {
                disabled: true,
                ..config::ConfigObservation::default()
            })
    }

    /// The target and templates as the controller builds them, config
    /// versioned as [`Start::config`] says.
    fn target(&self) -> (Result<Target, SpecError>, crate::plan::Templates) {
        let spec = &self.start.spec;
        match Target::from_spec(spec) {
            Ok(t) => {
                let seen = self.config_seen();
                let (t, templates) = t
                    .with_scales(&self.scale_obs())
                    .with_workloads(&self.workloads())
                    .with_config(&self.start.plan, spec, &self.status, &seen);
                (Ok(t), templates)
            }
            Err(e) => (Err(e), BTreeMap::new()),
        }
    }

    fn observe(&self, target: Result<Target, SpecError>) -> Observation {
        let gates = target
            .as_ref()
            .map(|t| {
                t.gates
                    .iter()
                    .map(|g| crate::api::GateStatus {
                        name: g.name().to_string(),
                        verdict: Verdict::Passed,
                        ..Default::default()
                    })
                    .collect()
            })
            .unwrap_or_default();
        Observation {
            plan: self.start.plan.clone(),
            now: self.now,
            generation: self.start.generation,
            target,
            status: self.status.clone(),
            revisions: self.revisions(),
            pod_failures: Vec::new(),
            gates,
            jobs: self.jobs.clone(),
            traffic: self.traffic.values().cloned().collect(),
            scales: self.scale_obs(),
            config: self.config_seen(),
            adopted: Vec::new(),
            request: self.request.clone(),
            invalid_request: None,
            refusal: None,
            template_copies: Vec::new(),
            workloads: self.workloads(),
            deleting: false,
        }
    }

    /// Applies a decision as the controller does.
    fn apply(&mut self, d: &Decision) {
        if let Some(r) = &self.request
            && d.status.acknowledged_request.as_deref() == Some(r.to_annotation())
        {
            self.request = None;
        }
        self.status = d.status.clone();
        let ready_at =
            self.now + chrono::Duration::from_std(self.start.ready_after).unwrap_or_default();
        for i in &d.deployments {
            if let Some(r) = self.revs.get_mut(&i.name) {
                if i.replicas > r.obs.replicas {
                    r.ready_at = ready_at;
                }
                r.obs.replicas = i.replicas;
                r.obs.ready = r.obs.ready.min(i.replicas);
                r.obs.current = i.replicas;
            } else {
                {
                    if let TemplateSource::Spec(_) = &i.template {
                        self.created.push(i.clone());
                    }
                    self.revs.insert(
                        i.name.clone(),
                        Rev {
                            obs: RevisionObs {
                                name: i.name.clone(),
                                component: i.component.clone(),
                                hash: i.hash.clone(),
                                replicas: i.replicas,
                                ready: 0,
                                current: i.replicas,
                                created: Some(self.now),
                            },
                            ready_at,
                        },
                    );
                }
            }
        }
        for name in &d.delete {
            self.revs.remove(name);
        }
        self.sets
            .retain(|_, s| !d.delete_stateful_sets.contains(&s.obs.name));
        for set in self.sets.values_mut() {
            set.pods
                .retain(|_, (p, _)| !d.delete_pods.contains(&p.name));
        }
        // The StatefulSet controller recreates what was deleted.
        for i in &d.stateful_sets {
            self.apply_set(i, ready_at);
        }
        self.apply_daemons(d, ready_at);
        for j in &d.jobs.create {
            if !self.jobs.iter().any(|o| o.name == j.name) {
                // A Job gate's Job succeeds (gates pass in a preview).
                self.jobs.push(JobObs {
                    name: j.name.clone(),
                    rollout: j.rollout,
                    created: Some(self.now),
                    state: JobState::Complete,
                });
            }
        }
        self.jobs.retain(|j| !d.jobs.delete.contains(&j.name));
        for i in &d.traffic {
            self.traffic.insert(
                i.component.clone(),
                traffic::TrafficObs {
                    component: i.component.clone(),
                    stable: Some(i.stable.clone()),
                    canary: Some(i.canary.clone()),
                    route: i.route.clone(),
                    baseline: i.baseline.clone(),
                },
            );
        }
        for s in &d.scales {
            match s.scale {
                ScaleState::Keep { initial, .. } => {
                    self.scales.entry(s.component.clone()).or_insert(initial);
                }
                ScaleState::Delete => {
                    self.scales.remove(&s.component);
                }
            }
            match &s.autoscaler {
                AutoscalerIntent::Apply(_) | AutoscalerIntent::CreateOnly(_) => {
                    self.hpas.insert(s.component.clone(), true);
                }
                AutoscalerIntent::Keep => {}
                AutoscalerIntent::Delete => {
                    self.hpas.remove(&s.component);
                }
            }
        }
    }

    /// One StatefulSet written, and its controller's work done at once:
    /// missing ordinals created, those at or above the partition moved to
    /// the template it runs (the older template below it).
    fn apply_set(&mut self, i: &super::stateful::StatefulSetIntent, ready_at: DateTime<Utc>) {
        let set = self.sets.entry(i.component.clone()).or_insert_with(|| Set {
            obs: super::stateful::StatefulSetObs {
                name: i.name.clone(),
                component: i.component.clone(),
                hash: Some(i.hash.clone()),
                replicas: 0,
                partition: 0,
            },
            pods: BTreeMap::new(),
        });
        let older = set.obs.hash.clone().unwrap_or_else(|| i.hash.clone());
        set.obs.hash = Some(i.hash.clone());
        set.obs.replicas = i.replicas;
        set.obs.partition = i.partition;
        set.pods.retain(|o, _| *o < i.replicas);
        for o in 0..i.replicas {
            let hash = if o >= i.partition {
                i.hash.clone()
            } else {
                set.pods
                    .get(&o)
                    .map_or_else(|| older.clone(), |(p, _)| p.hash.clone())
            };
            if set.pods.get(&o).is_some_and(|(p, _)| p.hash == hash) {
                continue;
            }
            let pod = super::stateful::WorkloadPod {
                name: format!("{}-{o}", set.obs.name),
                component: i.component.clone(),
                hash,
                ordinal: Some(o),
                ready: false,
                terminating: false,
                node: None,
            };
            set.pods.insert(o, (pod, ready_at));
        }
    }

    /// The DaemonSets written and deleted, and their controller's work done
    /// at once: each node runs the pod of the revision whose nodes hold it.
    fn apply_daemons(&mut self, d: &Decision, ready_at: DateTime<Utc>) {
        use super::daemon::NodeScope;
        for i in &d.daemon_sets {
            let o = self.daemons.entry(i.name.clone()).or_default();
            o.name.clone_from(&i.name);
            o.component.clone_from(&i.component);
            o.hash.clone_from(&i.hash);
            o.nodes = i.nodes.clone();
        }
        self.daemons
            .retain(|n, _| !d.delete_daemon_sets.contains(n));
        let components: std::collections::BTreeSet<String> =
            self.daemons.values().map(|o| o.component.clone()).collect();
        self.node_pods.retain(|(c, _), _| components.contains(c));
        for o in self.daemons.values_mut() {
            o.scheduled = 0;
            o.counted = true;
        }
        for c in &components {
            for node in &self.nodes {
                let runs = self.daemons.values_mut().find(|o| {
                    &o.component == c
                        && match &o.nodes {
                            NodeScope::All => true,
                            NodeScope::Only(n) => n.contains(node),
                            NodeScope::Except(n) => !n.contains(node),
                        }
                });
                let key = (c.clone(), node.clone());
                let Some(o) = runs else {
                    self.node_pods.remove(&key);
                    continue;
                };
                o.scheduled += 1;
                if self
                    .node_pods
                    .get(&key)
                    .is_some_and(|(p, _)| p.hash == o.hash)
                {
                    continue;
                }
                let pod = super::stateful::WorkloadPod {
                    name: format!("{}-{node}", o.name),
                    component: c.clone(),
                    hash: o.hash.clone(),
                    ordinal: None,
                    ready: false,
                    terminating: false,
                    node: Some(node.clone()),
                };
                self.node_pods.insert(key, (pod, ready_at));
            }
        }
    }

    fn workloads(&self) -> super::stateful::WorkloadObs {
        super::stateful::WorkloadObs {
            stateful_sets: self.sets.values().map(|s| s.obs.clone()).collect(),
            daemon_sets: self.daemons.values().cloned().collect(),
            pods: self
                .sets
                .values()
                .flat_map(|s| s.pods.values().map(|(p, _)| p.clone()))
                .chain(self.node_pods.values().map(|(p, _)| p.clone()))
                .collect(),
        }
    }

    /// The revision Deployments, and the revisions of the StatefulSets as
    /// their pods count them.
    fn revisions(&self) -> Vec<RevisionObs> {
        let mut out: Vec<RevisionObs> = self.revs.values().map(|r| r.obs.clone()).collect();
        out.extend(super::stateful::revisions(&self.workloads()));
        out
    }

    /// Pods whose time has come are ready.
    fn pods_ready(&mut self) {
        for r in self.revs.values_mut() {
            if r.ready_at <= self.now {
                r.obs.ready = r.obs.replicas;
            }
        }
        for set in self.sets.values_mut() {
            for (p, at) in set.pods.values_mut() {
                if *at <= self.now {
                    p.ready = true;
                }
            }
        }
        for (p, at) in self.node_pods.values_mut() {
            if *at <= self.now {
                p.ready = true;
            }
        }
    }

    /// The next time a pod becomes ready, if any is still starting.
    fn next_ready(&self) -> Option<DateTime<Utc>> {
        self.revs
            .values()
            .filter(|r| r.obs.ready < r.obs.replicas)
            .map(|r| r.ready_at)
            .chain(
                self.sets
                    .values()
                    .flat_map(|s| s.pods.values())
                    .chain(self.node_pods.values())
                    .filter(|(p, _)| !p.ready)
                    .map(|(_, at)| *at),
            )
            .min()
    }

    fn pods_of(&self, component: &str) -> i32 {
        self.revisions()
            .iter()
            .filter(|r| r.component == component)
            .map(|r| r.replicas.max(0))
            .sum()
    }

    fn replicas_of(&self, component: &str, hash: Option<&str>) -> i32 {
        let Some(hash) = hash else { return 0 };
        self.revisions()
            .iter()
            .find(|r| r.component == component && r.hash == hash)
            .map_or(0, |r| r.replicas)
    }

    fn fingerprint(&self) -> (ReleasePlanStatus, Vec<(String, i32, i32)>) {
        let mut status = self.status.clone();
        // The time a status records is not a change of state.
        status.conditions = Vec::new();
        status.message = None;
        (
            status,
            self.revisions()
                .iter()
                .map(|r| (format!("{}/{}", r.name, r.hash), r.replicas, r.ready))
                .collect(),
        )
    }

    /// The settled step, as recorded.
    fn step_at(&self, target: &Target, peaks: &BTreeMap<String, i32>) -> StepAt {
        let s = &self.status;
        let components = s
            .components
            .iter()
            .map(|c| {
                let current = self.replicas_of(&c.name, c.current_hash.as_deref());
                let stable = if c.stable_hash == c.current_hash {
                    0
                } else {
                    self.replicas_of(&c.name, c.stable_hash.as_deref())
                };
                ComponentAt {
                    name: c.name.clone(),
                    current_hash: c.current_hash.clone(),
                    stable_hash: c.stable_hash.clone(),
                    current_replicas: current,
                    stable_replicas: stable,
                    peak_pods: peaks.get(&c.name).copied().unwrap_or(0),
                }
            })
            .collect();
        let gates = if s.phase == Phase::RollingOut {
            target
                .gates
                .iter()
                .map(|g| g.name().to_string())
                .chain(target.jobs.iter().map(|j| j.name.clone()))
                .collect()
        } else {
            Vec::new()
        };
        StepAt {
            phase: s.phase,
            step: s.current_step,
            weight: s.weight,
            traffic_weight: s.traffic_weight,
            components,
            gates,
            starts_after: Duration::ZERO,
            duration: Duration::ZERO,
            waits_for_promotion: false,
        }
    }
}

fn elapsed(from: DateTime<Utc>, to: DateTime<Utc>) -> Duration {
    (to - from).to_std().unwrap_or_default()
}

// One loop: reconcile, record the step, then what wakes the operator next,
// read top to bottom as the controller would live it.
#[allow(clippy::too_many_lines)]
/// Simulates the rollout of `start.spec` from `start.status` to the end
/// (Stable, or where it stops), through [`decide`].
pub fn simulate(start: Start) -> Simulation {
    let t0 = start.now;
    let mut w = World {
        status: start.status.clone(),
        revs: start
            .revisions
            .iter()
            .map(|r| {
                (
                    r.name.clone(),
                    Rev {
                        obs: r.clone(),
                        ready_at: t0,
                    },
                )
            })
            .collect(),
        sets: start
            .workloads
            .stateful_sets
            .iter()
            .map(|s| {
                let pods = start
                    .workloads
                    .pods
                    .iter()
                    .filter(|p| p.component == s.component)
                    .filter_map(|p| Some((p.ordinal?, (p.clone(), t0))))
                    .collect();
                (
                    s.component.clone(),
                    Set {
                        obs: s.clone(),
                        pods,
                    },
                )
            })
            .collect(),
        daemons: start
            .workloads
            .daemon_sets
            .iter()
            .map(|d| (d.name.clone(), d.clone()))
            .collect(),
        node_pods: start
            .workloads
            .pods
            .iter()
            .filter(|p| {
                start
                    .workloads
                    .daemon_sets
                    .iter()
                    .any(|d| d.component == p.component)
            })
            .filter_map(|p| Some(((p.component.clone(), p.node.clone()?), (p.clone(), t0))))
            .collect(),
        nodes: {
            let mut nodes: Vec<String> = start
                .workloads
                .pods
                .iter()
                .filter_map(|p| p.node.clone())
                .collect();
            nodes.sort();
            nodes.dedup();
            if nodes.is_empty() {
                nodes = (1..=3).map(|i| format!("node-{i}")).collect();
            }
            nodes
        },
        now: t0,
        jobs: Vec::new(),
        traffic: BTreeMap::new(),
        scales: BTreeMap::new(),
        hpas: BTreeMap::new(),
        request: None,
        promotions: 0,
        created: Vec::new(),
        start,
    };
    let mut steps: Vec<StepAt> = Vec::new();
    // The step being recorded: its key (rollout, phase, step) and start.
    let mut current: Option<((i64, Phase, i32), DateTime<Utc>)> = None;
    let mut peaks: BTreeMap<String, i32> = BTreeMap::new();
    let mut templates = BTreeMap::new();
    let mut end = End::Stuck(format!("did not settle within {MAX_RECONCILES} reconciles"));
    for _ in 0..MAX_RECONCILES {
        let (target, tpl) = w.target();
        let target = match target {
            Ok(t) => t,
            Err(e) => {
                end = End::Invalid(e);
                break;
            }
        };
        if templates.is_empty() {
            templates.clone_from(&tpl);
        }
        let before = w.fingerprint();
        let decision = decide(&w.observe(Ok(target.clone())), &tpl);
        w.apply(&decision);
        let key = (
            w.status.rollout_count,
            w.status.phase,
            w.status.current_step,
        );
        if current.as_ref().is_none_or(|(k, _)| *k != key) {
            // The step before ends now.
            if let (Some(last), Some((_, since))) = (steps.last_mut(), current.as_ref()) {
                last.duration = elapsed(*since, w.now);
            }
            current = Some((key, w.now));
            peaks.clear();
            steps.push(w.step_at(&target, &peaks));
        }
        let since = current.as_ref().map_or(w.now, |(_, s)| *s);
        for c in &w.status.components {
            let pods = w.pods_of(&c.name);
            let peak = peaks.entry(c.name.clone()).or_insert(0);
            *peak = (*peak).max(pods);
        }
        w.pods_ready();
        // The step as it stands now (its last state is how it settled).
        if let Some(last) = steps.last_mut() {
            let waits = last.waits_for_promotion;
            *last = StepAt {
                starts_after: elapsed(t0, since),
                duration: elapsed(since, w.now),
                waits_for_promotion: waits,
                ..w.step_at(&target, &peaks)
            };
        }
        if w.fingerprint() != before {
            // A write: its watch event wakes the operator at once.
            continue;
        }
        match w.status.phase {
            Phase::Stable if w.status.current_revision.as_deref() == Some(&target.revision) => {
                end = End::Stable;
                break;
            }
            Phase::RollingOut => {}
            other => {
                end = End::Stuck(format!(
                    "phase {other}: {}",
                    w.status.message.clone().unwrap_or_default()
                ));
                break;
            }
        }
        if w.status.failure.is_some() {
            end = End::Stuck(w.status.message.clone().unwrap_or_default());
            break;
        }
        if target.paused || w.status.pause_requested {
            end = End::Stuck(
                "paused (spec.paused or a pause request): the plan holds until resumed".into(),
            );
            break;
        }
        let step = usize::try_from(w.status.current_step).unwrap_or(usize::MAX);
        let held = target
            .current_step(step, elapsed(since, w.now))
            .holds_until_promoted();
        if held && w.request.is_none() && w.next_ready().is_none() {
            // A human promotes it; the preview says that it waits.
            w.promotions += 1;
            w.request = Some(Request::new(
                Action::Promote { full: false },
                &format!("preview-{}", w.promotions),
            ));
            if let Some(last) = steps.last_mut() {
                last.waits_for_promotion = true;
            }
            continue;
        }
        let wake = decision
            .requeue_after
            .map(|r| w.now + chrono::Duration::from_std(r).unwrap_or_default());
        let ready = w.next_ready();
        let Some(next) = wake.into_iter().chain(ready).min() else {
            end = End::Stuck(format!(
                "the operator would wait for nothing at step {}: {}",
                w.status.current_step,
                w.status.message.clone().unwrap_or_default()
            ));
            break;
        };
        w.now = next.max(w.now + chrono::Duration::milliseconds(1));
    }
    Simulation {
        rollout: steps.iter().any(|s| s.phase == Phase::RollingOut),
        total: elapsed(t0, w.now),
        steps,
        end,
        status: w.status.clone(),
        revisions: w.revisions(),
        created: w.created,
        templates,
        config: w.start.config.clone(),
    }
}

#[cfg(test)]
#[path = "simulate_tests.rs"]
mod tests;
