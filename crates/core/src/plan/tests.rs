//! Tests of the pure core against a small simulated cluster: Deployments whose
//! pods become ready when told, a clock that only moves when told, and the
//! decision applied as the controller would apply it.

use super::autoscale::{AutoscalerIntent, ScaleState};
use super::*;
use crate::api::revision;
use crate::api::{Component, Pause, ReleasePlanSpec, Step, Strategy as ApiStrategy};
use crate::gates::job::JobObs;
use chrono::TimeZone;
use chrono::{DateTime, Utc};
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeSet;

fn template(image: &str) -> PodTemplateSpec {
    serde_json::from_value(json!({
        "metadata": {"labels": {"app": "shop"}},
        "spec": {"containers": [{"name": "app", "image": image}]}
    }))
    .unwrap()
}

fn component(name: &str, image: &str, replicas: i32) -> Component {
    Component {
        name: name.into(),
        replicas: Some(replicas),
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
    }
}

fn weight(w: i32) -> Step {
    Step {
        set_weight: Some(w),
        ..Step::default()
    }
}

fn pause(d: Option<&str>) -> Step {
    Step {
        pause: Some(Pause {
            duration: d.map(str::to_string),
        }),
        ..Step::default()
    }
}

fn spec(components: Vec<Component>, steps: Vec<Step>) -> ReleasePlanSpec {
    ReleasePlanSpec {
        components,
        strategy: ApiStrategy {
            steps,
            ..ApiStrategy::default()
        },
        ..Default::default()
    }
}

#[derive(Debug, Clone)]
struct SimDeployment {
    component: String,
    hash: String,
    replicas: i32,
    ready: i32,
    created: DateTime<Utc>,
}

/// A simulated cluster with one plan.
#[derive(Debug, Clone)]
struct Sim {
    generation: i64,
    spec: ReleasePlanSpec,
    status: ReleasePlanStatus,
    deployments: BTreeMap<String, SimDeployment>,
    now: DateTime<Utc>,
    /// Hashes whose pods crash.
    crashing: BTreeSet<String>,
    /// Hashes whose pods never become ready.
    never_ready: BTreeSet<String>,
    request: Option<Request>,
    next_request: u32,
    deleting: bool,
    finalized: bool,
    events: Vec<EventIntent>,
    last: Option<Decision>,
    /// Jobs of Job gates; created Running, finished by the test.
    jobs: Vec<JobObs>,
    /// Every Job ever created, by name.
    jobs_created: Vec<String>,
    /// Services and routes as the cluster shows them, by component.
    traffic: BTreeMap<String, traffic::TrafficObs>,
    /// Traffic writes not yet visible (only with `traffic_lag`).
    pending_traffic: Vec<traffic::TrafficIntent>,
    /// Traffic writes show only at `sync_traffic` (a lagging cache).
    traffic_lag: bool,
    /// ComponentScales' replicas (the autoscaler's), by component.
    scales: BTreeMap<String, i32>,
    /// Owned HPAs' specs, by component.
    hpas: BTreeMap<String, crate::api::Autoscaling>,
    /// ConfigMaps and Secrets of the namespace: the user's and the plan's copies.
    config: BTreeMap<config::ConfigRef, config::ConfigObs>,
    /// The config each revision Deployment's template reads, by hash.
    revision_config: BTreeMap<String, BTreeSet<config::ConfigRef>>,
    /// The Deployment component `web` adopts (`adopt`), as the cluster shows it.
    adopted: Option<adopt::AdoptedObs>,
    /// The ReleaseFreezes that select the plan.
    freezes: Vec<windows::Freeze>,
    /// The GatePolicy that governs the namespace, as the controller's caches
    /// hold it (`None`: the target is not judged against one).
    policy: Option<crate::gates::policy::NamespacePolicy>,
    /// Gates whose calls the runner found refused by the operator's own
    /// address rules (recorded as `Refused`, not passed).
    refused_calls: BTreeSet<String>,
    /// The operator may not read config in the plan's namespace: it sees
    /// none of `config` (`--config-namespaces` does not list it).
    config_denied: bool,
}

impl Sim {
    fn new(spec: ReleasePlanSpec) -> Sim {
        Sim {
            generation: 1,
            spec,
            status: ReleasePlanStatus::default(),
            deployments: BTreeMap::new(),
            now: Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap(),
            crashing: BTreeSet::new(),
            never_ready: BTreeSet::new(),
            request: None,
            next_request: 0,
            deleting: false,
            finalized: false,
            events: Vec::new(),
            last: None,
            jobs: Vec::new(),
            jobs_created: Vec::new(),
            traffic: BTreeMap::new(),
            pending_traffic: Vec::new(),
            traffic_lag: false,
            scales: BTreeMap::new(),
            hpas: BTreeMap::new(),
            config: BTreeMap::new(),
            revision_config: BTreeMap::new(),
            adopted: None,
            freezes: Vec::new(),
            policy: None,
            refused_calls: BTreeSet::new(),
            config_denied: false,
        }
    }

    /// The config as the controller observes it: every object, and the
    /// copies the kept Deployments read.
    fn config_obs(&self) -> config::ConfigObservation {
        if self.config_denied {
            return config::ConfigObservation {
                denied: true,
                ..config::ConfigObservation::default()
            };
        }
        config::ConfigObservation {
            objects: self.config.clone(),
            in_use: self
                .deployments
                .values()
                .filter_map(|d| self.revision_config.get(&d.hash))
                .flatten()
                .cloned()
                .collect(),
            disabled: false,
            denied: false,
        }
    }

    /// The target and templates as the controller builds them.
    fn target(&self) -> (Result<Target, SpecError>, crate::plan::Templates) {
        match Target::from_spec(&self.spec) {
            Ok(t) => {
                let t = match &self.policy {
                    Some(p) => t.with_policy(&self.spec.components, p),
                    None => t,
                };
                let (t, templates) = t
                    .with_freezes(self.freezes.clone())
                    .with_scales(&self.scale_obs())
                    .with_config("shop", &self.spec, &self.status, &self.config_obs());
                (Ok(t), templates)
            }
            Err(e) => (Err(e), BTreeMap::new()),
        }
    }

    /// The autoscaling objects as the cluster shows them.
    fn scale_obs(&self) -> Vec<ScaleObs> {
        let names: BTreeSet<&String> = self.scales.keys().chain(self.hpas.keys()).collect();
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

    /// The replicas the decision works with for a component: the spec's, or
    /// its autoscaler's.
    fn wanted(&self, component: &str) -> Option<i32> {
        Target::from_spec(&self.spec)
            .ok()?
            .with_scales(&self.scale_obs())
            .component(component)
            .map(|c| c.replicas)
    }

    /// The autoscaler sets a component's total.
    fn autoscale(&mut self, component: &str, replicas: i32) {
        if let Some(r) = self.scales.get_mut(component) {
            *r = replicas;
        }
    }

    /// The written Services and routes become visible. While the plan is
    /// deleted only existing ones change (the controller creates none).
    fn sync_traffic(&mut self) {
        for i in std::mem::take(&mut self.pending_traffic) {
            if self.deleting && !self.traffic.contains_key(&i.component) {
                continue;
            }
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
    }

    fn observe(&self) -> Observation {
        let revisions = self
            .deployments
            .iter()
            .map(|(name, d)| RevisionObs {
                name: name.clone(),
                component: d.component.clone(),
                hash: d.hash.clone(),
                replicas: d.replicas,
                ready: d.ready,
                current: d.replicas,
                created: Some(d.created),
            })
            .collect();
        let pod_failures = self
            .deployments
            .iter()
            .filter(|(_, d)| d.replicas > 0 && self.crashing.contains(&d.hash))
            .map(|(name, d)| PodFailure {
                component: d.component.clone(),
                hash: d.hash.clone(),
                pod: format!("{name}-x"),
                reason: "CrashLoopBackOff".into(),
                message: "back-off restarting failed container".into(),
            })
            .collect();
        // Gates pass as soon as they are asked, in the simulation.
        let gates = Target::from_spec(&self.spec)
            .map(|t| t.gates)
            .unwrap_or_default()
            .into_iter()
            .map(|g| {
                if self.refused_calls.contains(g.name()) {
                    let refused = crate::gates::GateResult::Refused {
                        reason: format!("webhook at {} not called: host is not in the operator's --gate-allow-hosts", g.name()),
                    };
                    return crate::gates::record(None, g.name(), &refused, 0, 0, self.now);
                }
                GateStatus {
                    name: g.name().to_string(),
                    verdict: Verdict::Passed,
                    ..Default::default()
                }
            })
            .collect();
        Observation {
            plan: "shop".into(),
            now: self.now,
            generation: self.generation,
            target: self.target().0,
            status: self.status.clone(),
            revisions,
            pod_failures,
            gates,
            jobs: self.jobs.clone(),
            traffic: self.traffic.values().cloned().collect(),
            scales: self.scale_obs(),
            config: self.config_obs(),
            adopted: self.adopted.clone().into_iter().collect(),
            request: self.request.clone(),
            invalid_request: None,
            refusal: None,
            template_copies: Vec::new(),
            workloads: Default::default(),
            deleting: self.deleting,
        }
    }

    fn templates(&self) -> crate::plan::Templates {
        self.target().1
    }

    /// One reconcile: decide, then apply as the controller does.
    fn reconcile(&mut self) -> Decision {
        let obs = self.observe();
        let d = decide(&obs, &self.templates());
        self.apply(&d);
        d
    }

    fn apply(&mut self, d: &Decision) {
        if self.request.is_some()
            && d.status.acknowledged_request.as_deref()
                == self.request.as_ref().map(Request::to_annotation)
        {
            self.request = None;
        }
        self.status = d.status.clone();
        for i in &d.deployments {
            match self.deployments.get_mut(&i.name) {
                Some(dep) => {
                    dep.replicas = i.replicas;
                    dep.ready = dep.ready.min(i.replicas);
                }
                None => {
                    // A baseline is made from its stable revision's Deployment.
                    let of = match &i.template {
                        TemplateSource::Of(h) => self.deployments.values().any(|d| &d.hash == h),
                        _ => false,
                    };
                    if let TemplateSource::Spec(t) = &i.template {
                        self.revision_config
                            .insert(i.hash.clone(), config::references(t));
                    }
                    if matches!(i.template, TemplateSource::Spec(_)) || of {
                        self.deployments.insert(
                            i.name.clone(),
                            SimDeployment {
                                component: i.component.clone(),
                                hash: i.hash.clone(),
                                replicas: i.replicas,
                                ready: 0,
                                created: self.now,
                            },
                        );
                    }
                }
            }
        }
        for name in &d.delete {
            self.deployments.remove(name);
        }
        for j in &d.jobs.create {
            if !self.jobs.iter().any(|o| o.name == j.name) {
                self.jobs_created.push(j.name.clone());
                self.jobs.push(JobObs {
                    name: j.name.clone(),
                    rollout: j.rollout,
                    created: Some(self.now),
                    state: jobs::JobState::Running,
                });
            }
        }
        self.jobs.retain(|j| !d.jobs.delete.contains(&j.name));
        if !d.traffic.is_empty() {
            self.pending_traffic = d.traffic.clone();
        }
        if !self.traffic_lag {
            self.sync_traffic();
        }
        for s in &d.scales {
            match s.scale {
                ScaleState::Keep { initial, .. } => {
                    if !self.deleting {
                        self.scales.entry(s.component.clone()).or_insert(initial);
                    }
                }
                ScaleState::Delete => {
                    self.scales.remove(&s.component);
                }
            }
            match &s.autoscaler {
                AutoscalerIntent::Apply(a) => {
                    self.hpas.insert(s.component.clone(), a.clone());
                }
                AutoscalerIntent::CreateOnly(a) => {
                    self.hpas
                        .entry(s.component.clone())
                        .or_insert_with(|| a.clone());
                }
                AutoscalerIntent::Keep => {}
                AutoscalerIntent::Delete => {
                    self.hpas.remove(&s.component);
                }
            }
        }
        for c in &d.config.create {
            let source = self.config.get(&(c.kind, c.source.clone())).cloned();
            // The controller copies only a source that still has the content.
            if source.is_some_and(|o| o.digest == c.digest) {
                self.config.insert(
                    (c.kind, c.name.clone()),
                    config::ConfigObs {
                        digest: c.digest.clone(),
                        copy_of: Some(c.source.clone()),
                        always_live: false,
                    },
                );
            }
        }
        for k in &d.config.delete {
            self.config.remove(k);
        }
        for i in &d.adopt {
            if let Some(adopt::AdoptedObs {
                state: adopt::AdoptedState::Found(f),
                ..
            }) = self.adopted.as_mut()
            {
                f.marked = true;
                f.original = Some(i.original);
                f.replicas = i.replicas;
                f.ready = f.ready.min(i.replicas);
                f.pods = f.pods.min(i.replicas);
            }
        }
        self.events.extend(d.events.iter().cloned());
        if d.finalize {
            self.finalized = true;
        }
        self.last = Some(d.clone());
    }

    /// Pods of healthy revisions become ready.
    fn pods_ready(&mut self) {
        for d in self.deployments.values_mut() {
            if !self.crashing.contains(&d.hash) && !self.never_ready.contains(&d.hash) {
                d.ready = d.replicas;
            }
        }
        if let Some(adopt::AdoptedObs {
            state: adopt::AdoptedState::Found(f),
            ..
        }) = self.adopted.as_mut()
        {
            f.ready = f.replicas;
            f.pods = f.replicas;
        }
    }

    /// Reconciles with ready pods until nothing changes (or a bound is hit).
    fn settle(&mut self) {
        for _ in 0..50 {
            let before = (self.status.clone(), self.replicas(), self.adopted.clone());
            self.reconcile();
            self.pods_ready();
            if (self.status.clone(), self.replicas(), self.adopted.clone()) == before {
                return;
            }
        }
    }

    fn advance(&mut self, secs: i64) {
        self.now += chrono::Duration::seconds(secs);
    }

    fn change_image(&mut self, component: &str, image: &str) {
        let c = self
            .spec
            .components
            .iter_mut()
            .find(|c| c.name == component)
            .unwrap();
        c.template = template(image);
        self.generation += 1;
    }

    fn ask(&mut self, action: Action) {
        self.next_request += 1;
        self.request = Some(Request::new(action, &format!("req-{}", self.next_request)));
    }

    fn hash_of(&self, component: &str) -> String {
        self.target()
            .0
            .unwrap()
            .component(component)
            .unwrap()
            .hash
            .clone()
    }

    fn replicas(&self) -> BTreeMap<String, (i32, i32)> {
        self.deployments
            .iter()
            .map(|(n, d)| (n.clone(), (d.replicas, d.ready)))
            .collect()
    }

    /// Replicas of a component's revision, by hash (0 when absent).
    fn at(&self, component: &str, hash: &str) -> i32 {
        self.deployments
            .values()
            .find(|d| d.component == component && d.hash == hash)
            .map_or(0, |d| d.replicas)
    }

    fn condition(&self, type_: &str) -> Option<String> {
        self.status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status.clone())
    }

    fn has_event(&self, reason: &str) -> bool {
        self.events.iter().any(|e| e.reason.as_str() == reason)
    }
}

fn canary_spec() -> ReleasePlanSpec {
    spec(
        vec![component("web", "shop:1", 10)],
        vec![weight(20), pause(Some("30s")), weight(50), pause(None)],
    )
}

/// A sim whose first release is Stable.
fn stable_sim(s: ReleasePlanSpec) -> Sim {
    let mut sim = Sim::new(s);
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    sim
}

#[test]
fn first_release_goes_to_full_scale_then_stable() {
    let mut sim = Sim::new(canary_spec());
    let d = sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!(sim.status.weight, 100);
    let h = sim.hash_of("web");
    assert_eq!(sim.at("web", &h), 10, "first release skips the steps");
    assert_eq!(d.deployments[0].name, format!("shop-web-{h}"));
    assert_eq!(sim.condition("Ready").as_deref(), Some("False"));
    assert_eq!(sim.condition("Reconciling").as_deref(), Some("True"));
    sim.pods_ready();
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.status.stable_revision, sim.status.current_revision);
    assert_eq!(sim.condition("Ready").as_deref(), Some("True"));
    assert_eq!(sim.condition("Reconciling").as_deref(), Some("False"));
    assert_eq!(sim.condition("Stalled").as_deref(), Some("False"));
    assert_eq!(sim.status.observed_generation, Some(1));
    assert_eq!(
        sim.status.history.last().unwrap().outcome,
        Outcome::Promoted
    );
    assert!(sim.has_event("RolloutStarted") && sim.has_event("Promoted"));
    assert_eq!(
        sim.last.as_ref().unwrap().requeue_after,
        None,
        "converged: await change"
    );
}

/// A rollout waiting on its pods looks again by itself every five minutes at
/// most (every change it waits on wakes it): at 5000 plans a one-minute
/// look cost 2.7 reconciles per plan while the cluster made their pods.
#[test]
fn a_rollout_waiting_on_its_pods_looks_again_every_five_minutes_at_most() {
    let mut sim = Sim::new(canary_spec());
    assert_eq!(sim.reconcile().requeue_after, Some(Duration::from_secs(1)));
    assert_eq!(
        sim.reconcile().requeue_after,
        Some(Duration::from_secs(300))
    );
    // Nearer the progress deadline (600 s), its own timer comes first.
    sim.advance(500);
    assert_eq!(
        sim.reconcile().requeue_after,
        Some(Duration::from_secs(101))
    );
}

/// Each timed requeue names its cause, so the metrics can count what each
/// timer costs.
#[test]
fn a_rollout_says_why_it_looks_again() {
    use super::machine::{Requeue, SAFETY};
    let mut sim = Sim::new(canary_spec());
    let d = sim.reconcile();
    assert_eq!(
        (d.requeue_after, d.requeue_cause),
        (Some(Duration::from_secs(1)), Some(Requeue::NewStep)),
        "a new step is acted on at once"
    );
    let d = sim.reconcile();
    assert_eq!(
        (d.requeue_after, d.requeue_cause),
        (Some(SAFETY), Some(Requeue::Safety)),
        "waiting on pods: only the safety look is timed"
    );
    sim.pods_ready();
    let d = sim.reconcile();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!((d.requeue_after, d.requeue_cause), (None, None));
}

/// `Decision::repeats` says a status write needs no reconcile when it lands
/// only when deciding again on it does nothing new: through a first release
/// and a canary walked step by step (pods ready, pauses timed out, a human
/// promotion), every reconcile that wrote status is checked against the one
/// its landing would run.
#[test]
fn a_status_write_is_quiet_only_when_deciding_on_it_does_nothing_new() {
    let mut sim = Sim::new(canary_spec());
    let (mut quiet, mut loud) = (0, 0);
    let mut check = |sim: &mut Sim| {
        let before = sim.status.clone();
        let d = sim.reconcile();
        if d.status == before {
            return;
        }
        // The landing's reconcile: the world as the write left it.
        let again = decide(&sim.observe(), &sim.templates());
        let repeats = again.repeats(&d, &sim.status);
        let next = sim.clone().reconcile();
        let nothing_new = next.status == sim.status
            && next.events.is_empty()
            && next.deployments == d.deployments
            && next.traffic == d.traffic;
        assert_eq!(
            repeats, nothing_new,
            "{:?} then {:?}",
            d.transition, next.transition
        );
        if repeats {
            quiet += 1;
        } else {
            loud += 1;
        }
    };
    for _ in 0..3 {
        check(&mut sim);
        sim.pods_ready();
    }
    assert_eq!(sim.status.phase, Phase::Stable);
    sim.change_image("web", "shop:2");
    for _ in 0..40 {
        check(&mut sim);
        sim.pods_ready();
        if sim.status.current_step == 1 {
            sim.advance(31);
        }
        if sim.status.current_step == 3 && sim.request.is_none() {
            sim.request = Some(Request::new(Action::Promote { full: false }, "r1"));
        }
        if sim.status.phase == Phase::Stable {
            break;
        }
    }
    assert_eq!(sim.status.phase, Phase::Stable, "{:?}", sim.status.message);
    // Both kinds happen (8 and 3 when this was written): neither answer is
    // given blindly.
    assert!(
        quiet >= 3 && loud >= 1,
        "quiet writes: {quiet}, others: {loud}"
    );
}

#[test]
fn image_change_walks_the_steps() {
    let mut sim = stable_sim(canary_spec());
    let old = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    let new = sim.hash_of("web");

    // Step 1: setWeight 20 -> 2 canary pods; stable stays at 10 until they are ready.
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!((sim.status.current_step, sim.status.weight), (0, 20));
    assert_eq!((sim.at("web", &new), sim.at("web", &old)), (2, 10));
    sim.reconcile();
    assert_eq!(
        sim.at("web", &old),
        10,
        "stable waits for ready canary pods"
    );
    sim.pods_ready();
    sim.reconcile();
    assert_eq!(
        sim.at("web", &old),
        8,
        "stable gives up what the canary has ready"
    );
    sim.reconcile();
    assert_eq!(sim.status.current_step, 1, "step done: on to the 30s pause");

    // Step 2: a timed pause holds until its time is up.
    sim.advance(10);
    sim.reconcile();
    assert_eq!(sim.status.current_step, 1);
    let wait = sim.last.as_ref().unwrap().requeue_after.unwrap();
    assert!(
        wait <= Duration::from_secs(21) && wait >= Duration::from_secs(19),
        "{wait:?}"
    );
    sim.advance(21);
    sim.reconcile();
    assert_eq!((sim.status.current_step, sim.status.weight), (2, 50));
    assert_eq!(sim.at("web", &new), 5);
    sim.pods_ready();
    sim.reconcile();
    assert_eq!(sim.at("web", &old), 5);
    sim.reconcile();
    assert_eq!(sim.status.current_step, 3);

    // Step 4: an indefinite pause holds until promoted.
    sim.advance(3600);
    for _ in 0..3 {
        sim.reconcile();
        sim.pods_ready();
    }
    assert_eq!(sim.status.current_step, 3);
    assert_eq!(sim.condition("Paused").as_deref(), Some("True"));
    sim.ask(Action::Promote { full: false });
    sim.reconcile();
    assert!(sim.request.is_none(), "request acknowledged");
    assert_eq!((sim.status.current_step, sim.status.weight), (4, 100));
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!((sim.at("web", &new), sim.at("web", &old)), (10, 0));
    assert_eq!(
        sim.status.components[0].stable_hash.as_deref(),
        Some(new.as_str())
    );
    assert_eq!(sim.status.history.len(), 2);
}

#[test]
fn capacity_never_drops_below_replicas() {
    let mut sim = stable_sim(canary_spec());
    let old = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    let new = sim.hash_of("web");
    sim.never_ready.insert(new.clone());
    for _ in 0..10 {
        sim.reconcile();
        sim.pods_ready();
        let ready: i32 = sim.deployments.values().map(|d| d.ready).sum();
        assert!(ready >= 10, "ready pods {ready} < 10");
        assert_eq!(sim.at("web", &old), 10);
    }
}

#[test]
fn new_generation_mid_rollout_restarts_toward_newest() {
    let mut sim = stable_sim(canary_spec());
    let v1 = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    let v2 = sim.hash_of("web");
    sim.reconcile();
    sim.pods_ready();
    sim.reconcile();
    assert_eq!(sim.at("web", &v2), 2);
    sim.change_image("web", "shop:3");
    let v3 = sim.hash_of("web");
    sim.change_image("web", "shop:4");
    let v4 = sim.hash_of("web");
    sim.reconcile();
    assert!(sim.has_event("RolloutSuperseded"));
    assert_eq!(sim.status.observed_generation, Some(sim.generation));
    assert_eq!(sim.status.current_step, 0);
    assert_eq!(
        sim.at("web", &v3),
        0,
        "an intermediate generation never runs"
    );
    assert_eq!(sim.at("web", &v4), 2);
    assert_eq!(
        sim.at("web", &v2),
        2,
        "the superseded canary stays until covered"
    );
    sim.pods_ready();
    sim.reconcile();
    sim.pods_ready();
    sim.reconcile();
    assert_eq!(
        sim.at("web", &v2),
        0,
        "and goes once stable and new cover the count"
    );
    assert_eq!(
        sim.status.history.last().unwrap().outcome,
        Outcome::Superseded
    );
    sim.ask(Action::Promote { full: true });
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!((sim.at("web", &v4), sim.at("web", &v1)), (10, 0));
}

#[test]
fn crash_loop_rolls_back_and_does_not_retry_on_its_own() {
    let mut sim = stable_sim(canary_spec());
    let old = sim.hash_of("web");
    sim.change_image("web", "shop:bad");
    let bad = sim.hash_of("web");
    sim.crashing.insert(bad.clone());
    sim.reconcile();
    assert_eq!(sim.at("web", &bad), 2);
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollbackInProgress);
    let f = sim.status.failure.clone().unwrap();
    assert_eq!(
        (f.gate.as_str(), f.reason.as_str()),
        ("podHealth", "CrashLoopBackOff")
    );
    assert!(sim.has_event("RollbackStarted"));
    assert_eq!(sim.condition("RollbackInProgress").as_deref(), Some("True"));
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!((sim.at("web", &old), sim.at("web", &bad)), (10, 0));
    assert_eq!(sim.condition("Stalled").as_deref(), Some("True"));
    assert_eq!(sim.condition("Ready").as_deref(), Some("False"));
    let h = sim.status.history.last().unwrap();
    assert_eq!(h.outcome, Outcome::RolledBack);
    assert!(h.reason.as_deref().unwrap().contains("podHealth"));
    // No flapping: time passes, nothing is retried.
    for _ in 0..5 {
        sim.advance(3600);
        sim.reconcile();
        sim.pods_ready();
    }
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!(sim.at("web", &bad), 0);
    // An explicit retry starts a new rollout of the same revision.
    sim.crashing.clear();
    sim.ask(Action::Retry);
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!(sim.at("web", &bad), 2);
}

#[test]
fn a_new_generation_after_rollback_rolls_out_again() {
    let mut sim = stable_sim(canary_spec());
    sim.change_image("web", "shop:bad");
    let bad = sim.hash_of("web");
    sim.crashing.insert(bad);
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    sim.change_image("web", "shop:fixed");
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!(sim.status.observed_generation, Some(sim.generation));
}

#[test]
fn reverting_the_spec_during_rollback_ends_stable() {
    let mut sim = stable_sim(canary_spec());
    sim.change_image("web", "shop:bad");
    sim.crashing.insert(sim.hash_of("web"));
    sim.reconcile();
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollbackInProgress);
    sim.change_image("web", "shop:1");
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.condition("Ready").as_deref(), Some("True"));
    assert_eq!(sim.status.observed_generation, Some(sim.generation));
}

#[test]
fn progress_deadline_fails_a_step_that_never_gets_ready() {
    let mut s = canary_spec();
    s.health.progress_deadline_seconds = Some(60);
    let mut sim = stable_sim(s);
    sim.change_image("web", "shop:slow");
    sim.never_ready.insert(sim.hash_of("web"));
    sim.reconcile();
    sim.advance(59);
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    let wait = sim.last.as_ref().unwrap().requeue_after.unwrap();
    assert!(
        wait <= Duration::from_secs(2),
        "requeue at the deadline, got {wait:?}"
    );
    sim.advance(2);
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollbackInProgress);
    assert_eq!(
        sim.status.failure.as_ref().unwrap().reason,
        "ProgressDeadlineExceeded"
    );
    // The rollback just began: it is not slow (its age counts from its own
    // start, not from the failed step's), so tools see no Stalled.
    assert_eq!(sim.condition("Stalled").as_deref(), Some("False"));
    // The stable pods lose readiness: the rollback cannot finish.
    let stable = sim.status.components[0].stable_hash.clone().unwrap();
    sim.never_ready.insert(stable.clone());
    for d in sim.deployments.values_mut().filter(|d| d.hash == stable) {
        d.ready = 0;
    }
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollbackInProgress);
    assert_eq!(sim.condition("Stalled").as_deref(), Some("False"));
    sim.advance(61);
    sim.reconcile();
    let stalled = sim
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled")
        .unwrap();
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "RollbackSlow"),
        "a rollback older than the deadline is slow"
    );
    assert_eq!(sim.condition("Reconciling").as_deref(), Some("False"));
}

#[test]
fn abort_rolls_back() {
    let mut sim = stable_sim(canary_spec());
    let old = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    sim.settle();
    assert_eq!(sim.status.current_step, 1);
    sim.ask(Action::Abort);
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollbackInProgress);
    let f = sim.status.failure.clone().unwrap();
    assert_eq!(f.gate, "abort");
    assert_eq!(
        Some(f.revision),
        sim.status.current_revision,
        "the aborted revision is named"
    );
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!(sim.at("web", &old), 10);
}

#[test]
fn manual_rollback_policy_halts_until_told() {
    let mut s = canary_spec();
    s.rollback.automatic = false;
    let mut sim = stable_sim(s);
    sim.change_image("web", "shop:bad");
    let bad = sim.hash_of("web");
    sim.crashing.insert(bad.clone());
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert!(sim.status.failure.is_some());
    assert_eq!(sim.condition("Stalled").as_deref(), Some("True"));
    assert!(sim.has_event("RolloutHalted"));
    // Promote does not apply to a halted rollout; retry does.
    sim.ask(Action::Promote { full: true });
    sim.reconcile();
    assert!(sim.has_event("RequestIgnored"));
    assert_eq!(sim.status.current_step, 0);
    sim.crashing.clear();
    sim.ask(Action::Retry);
    sim.reconcile();
    assert!(sim.status.failure.is_none());
    sim.ask(Action::Promote { full: true });
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.at("web", &bad), 10);
}

#[test]
fn spec_paused_and_pause_requests_hold_the_rollout() {
    let mut sim = stable_sim(canary_spec());
    sim.change_image("web", "shop:2");
    sim.ask(Action::Pause);
    sim.settle();
    assert_eq!(sim.status.current_step, 0);
    assert!(sim.status.pause_requested);
    assert_eq!(sim.condition("Paused").as_deref(), Some("True"));
    sim.ask(Action::Resume);
    sim.settle();
    assert_eq!(sim.status.current_step, 1);
    sim.spec.paused = true;
    sim.generation += 1;
    sim.advance(60);
    sim.settle();
    assert_eq!(sim.status.current_step, 1);
    sim.spec.paused = false;
    sim.generation += 1;
    sim.settle();
    assert_eq!(sim.status.current_step, 3);
    // A pause holds the final step too: no promotion to Stable while paused.
    sim.ask(Action::Promote { full: true });
    sim.reconcile();
    sim.spec.paused = true;
    sim.generation += 1;
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    sim.spec.paused = false;
    sim.generation += 1;
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
}

#[test]
fn deletion_while_active_rolls_back_before_finalizing() {
    let mut sim = stable_sim(canary_spec());
    let old = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    sim.reconcile();
    sim.pods_ready();
    sim.reconcile();
    sim.deleting = true;
    let d = sim.reconcile();
    assert!(!d.finalize);
    assert_eq!(sim.status.phase, Phase::RollbackInProgress);
    sim.settle();
    assert!(sim.finalized);
    assert_eq!(sim.at("web", &old), 10);
    assert_eq!(sim.at("web", &sim.hash_of("web")), 0);
}

#[test]
fn deleting_a_settled_plan_finalizes_at_once() {
    let mut sim = stable_sim(canary_spec());
    sim.deleting = true;
    let d = sim.reconcile();
    assert!(d.finalize);
}

#[test]
fn first_release_failure_scales_everything_to_zero() {
    let mut sim = Sim::new(canary_spec());
    let h = sim.hash_of("web");
    sim.crashing.insert(h.clone());
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!(sim.at("web", &h), 0);
    assert_eq!(sim.status.stable_revision, None);
    let stalled = sim
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled")
        .unwrap();
    assert!(
        stalled.message.contains("first release failed"),
        "{}",
        stalled.message
    );
}

#[test]
fn components_move_together_and_unchanged_ones_stay() {
    let s = spec(
        vec![
            component("web", "web:1", 4),
            component("api", "api:1", 2),
            component("db", "db:1", 1),
        ],
        vec![weight(50)],
    );
    let mut sim = stable_sim(s);
    let (web1, api1, db1) = (sim.hash_of("web"), sim.hash_of("api"), sim.hash_of("db"));
    sim.change_image("web", "web:2");
    {
        let api = sim
            .spec
            .components
            .iter_mut()
            .find(|c| c.name == "api")
            .unwrap();
        api.template = template("api:2");
    }
    let (web2, api2) = (sim.hash_of("web"), sim.hash_of("api"));
    sim.reconcile();
    assert_eq!((sim.at("web", &web2), sim.at("api", &api2)), (2, 1));
    assert_eq!(
        sim.at("db", &db1),
        1,
        "unchanged component keeps its revision"
    );
    assert_eq!(
        sim.deployments
            .values()
            .filter(|d| d.component == "db")
            .count(),
        1
    );
    // One component's canary not ready holds the whole step.
    sim.never_ready.insert(api2.clone());
    sim.pods_ready();
    sim.reconcile();
    sim.reconcile();
    assert_eq!(sim.status.current_step, 0);
    sim.never_ready.clear();
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(
        (
            sim.at("web", &web2),
            sim.at("api", &api2),
            sim.at("db", &db1)
        ),
        (4, 2, 1)
    );
    assert_eq!((sim.at("web", &web1), sim.at("api", &api1)), (0, 0));

    // A failure of one component rolls both back.
    sim.change_image("web", "web:3");
    {
        let api = sim
            .spec
            .components
            .iter_mut()
            .find(|c| c.name == "api")
            .unwrap();
        api.template = template("api:3");
    }
    let api3 = sim.hash_of("api");
    sim.crashing.insert(api3.clone());
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!((sim.at("web", &web2), sim.at("api", &api2)), (4, 2));
    assert_eq!(
        (sim.at("web", &sim.hash_of("web")), sim.at("api", &api3)),
        (0, 0)
    );
}

#[test]
fn invalid_spec_stalls_without_touching_deployments() {
    let mut sim = stable_sim(canary_spec());
    let before = sim.replicas();
    sim.spec.strategy.steps = vec![weight(50), weight(10)];
    sim.generation += 1;
    let d = sim.reconcile();
    assert!(d.deployments.is_empty() && d.delete.is_empty());
    assert_eq!(sim.replicas(), before);
    assert_eq!(sim.condition("Stalled").as_deref(), Some("True"));
    assert_eq!(sim.condition("Ready").as_deref(), Some("False"));
    assert_eq!(
        sim.status.observed_generation,
        Some(sim.generation),
        "the judged generation is observed, or tools wait forever"
    );
    assert!(
        sim.status
            .message
            .as_deref()
            .unwrap()
            .contains("steps[1].setWeight")
    );
}

#[test]
fn deleting_with_the_stable_deployment_gone_finalizes() {
    // A terminating namespace: the namespace controller deleted the Deployments,
    // and creating them again is refused. Nothing is left to roll back to.
    let mut sim = stable_sim(canary_spec());
    sim.change_image("web", "shop:2");
    sim.reconcile();
    sim.pods_ready();
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    let stable = sim.status.components[0].stable_hash.clone().unwrap();
    sim.deployments.retain(|_, d| d.hash != stable);
    sim.deleting = true;
    let d = sim.reconcile();
    assert!(d.finalize, "finalize at once: {:?}", sim.status.message);
}

#[test]
fn a_refused_deployment_write_shows_in_conditions_and_events() {
    let mut sim = stable_sim(canary_spec());
    sim.change_image("web", "shop:2");
    let mut obs = sim.observe();
    obs.refusal = Some(Refusal {
        kind: "Deployment",
        name: "shop-web-x".into(),
        code: 422,
        message: "spec.template.spec.containers[0].ports[0].containerPort: Invalid value: 70000"
            .into(),
    });
    let d = decide(&obs, &sim.templates());
    let cond = |d: &Decision, t: &str| {
        d.status
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
            .unwrap()
    };
    let (st, reason, msg) = cond(&d, "Stalled");
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("True", "DeploymentRefused")
    );
    // kstatus reads Reconciling first: a stalled plan is not reconciling.
    let (st, reason, _) = cond(&d, "Reconciling");
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "DeploymentRefused")
    );
    assert!(
        msg.contains("shop-web-x") && msg.contains("containerPort"),
        "{msg}"
    );
    assert_eq!(cond(&d, "Ready").0, "False");
    assert_eq!(d.status.observed_generation, Some(sim.generation));
    assert!(
        d.events
            .iter()
            .any(|e| e.reason == EventReason::DeploymentRefused && e.type_ == EventType::Warning)
    );
    assert!(
        d.status
            .message
            .as_deref()
            .unwrap()
            .contains("refused Deployment shop-web-x")
    );

    // A refusal that may clear by itself (quota, RBAC) is retried: Reconciling.
    obs.refusal = Some(Refusal {
        kind: "Deployment",
        name: "shop-web-x".into(),
        code: 403,
        message: "exceeded quota".into(),
    });
    let d = decide(&obs, &sim.templates());
    let (st, reason, _) = cond(&d, "Reconciling");
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("True", "DeploymentWriteFailed")
    );
    assert_eq!(cond(&d, "Stalled").0, "False");

    // No answer at all (a connection reset on the way), or a 5xx: not a
    // refusal. Its own reason, never DeploymentRefused, never Stalled.
    for (code, message, says) in [
        (
            0,
            "client error (SendRequest)",
            "no answer from the API server",
        ),
        (503, "etcdserver: request timed out", "could not take"),
    ] {
        obs.refusal = Some(Refusal {
            kind: "Deployment",
            name: "shop-web-x".into(),
            code,
            message: message.into(),
        });
        let d = decide(&obs, &sim.templates());
        let (st, reason, msg) = cond(&d, "Reconciling");
        assert_eq!((st.as_str(), reason.as_str()), ("True", "ApiUnavailable"));
        assert!(msg.contains(says) && msg.contains("shop-web-x"), "{msg}");
        assert!(!msg.contains("refused"), "{msg}");
        assert_eq!(cond(&d, "Stalled").0, "False");
        let reasons: Vec<EventReason> = d.events.iter().map(|e| e.reason).collect();
        assert!(
            reasons.contains(&EventReason::ApiUnavailable),
            "{reasons:?}"
        );
        assert!(
            !reasons.contains(&EventReason::DeploymentRefused),
            "{reasons:?}"
        );
    }
}

#[test]
fn gate_verdict_changes_are_events() {
    let g = |name: &str, verdict: Verdict| GateStatus {
        name: name.into(),
        verdict,
        ..Default::default()
    };
    let before = vec![g("a", Verdict::Passed), g("b", Verdict::Pending)];
    let after = vec![
        g("a", Verdict::Passed),
        g("b", Verdict::Failed),
        g("c", Verdict::Passed),
        g("d", Verdict::Pending),
    ];
    let ev = gate_events(&before, &after);
    let reasons: Vec<&str> = ev.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons, ["GateFailed", "GatePassed"]);
    assert_eq!(ev[0].type_, EventType::Warning);
}

#[test]
fn an_invalid_request_is_acknowledged_with_a_warning() {
    let mut sim = stable_sim(canary_spec());
    let mut obs = sim.observe();
    obs.invalid_request = Some(InvalidRequest {
        raw: "explode/1".into(),
        message: "unknown request".into(),
    });
    let d = decide(&obs, &sim.templates());
    assert_eq!(d.status.acknowledged_request.as_deref(), Some("explode/1"));
    assert!(
        d.events
            .iter()
            .any(|e| e.reason == EventReason::InvalidRequest)
    );
    sim.apply(&d);
}

#[test]
fn transition_time_is_kept_while_a_condition_holds() {
    let mut sim = stable_sim(canary_spec());
    let t0 = sim
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .last_transition_time
        .clone();
    sim.advance(100);
    sim.reconcile();
    let t1 = sim
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .last_transition_time
        .clone();
    assert_eq!(t0, t1);
}

#[test]
fn a_request_is_applied_exactly_once() {
    let mut sim = stable_sim(canary_spec());
    sim.change_image("web", "shop:2");
    sim.settle();
    sim.advance(31);
    sim.settle();
    assert_eq!(sim.status.current_step, 3);
    let req = Request::new(Action::Promote { full: false }, "once");
    sim.request = Some(req.clone());
    sim.reconcile();
    assert_eq!(sim.status.current_step, 4);
    assert_eq!(
        sim.status.acknowledged_request.as_deref(),
        Some("promote/once")
    );
    // The controller filters acknowledged requests out, so a repeat never arrives;
    // the status keeps the id to make that possible.
}

#[test]
fn old_revisions_are_pruned_to_the_history_limit() {
    let mut s = spec(vec![component("web", "v0", 1)], vec![]);
    s.revision_history_limit = Some(2);
    let mut sim = stable_sim(s);
    for i in 1..=5 {
        sim.advance(10);
        sim.change_image("web", &format!("v{i}"));
        sim.settle();
        assert_eq!(sim.status.phase, Phase::Stable);
    }
    assert_eq!(
        sim.deployments.len(),
        3,
        "current + 2 kept: {:?}",
        sim.deployments.keys()
    );
}

#[test]
fn pruning_keeps_the_most_recently_used_revisions_even_within_one_second() {
    // Creation times have whole-second precision: rollouts within one second
    // tie, and the last one used must still be kept.
    let mut s = spec(vec![component("web", "v0", 1)], vec![]);
    s.revision_history_limit = Some(1);
    let mut sim = stable_sim(s);
    let mut hashes = vec![sim.hash_of("web")];
    for i in 1..=3 {
        sim.change_image("web", &format!("v{i}"));
        sim.settle();
        hashes.push(sim.hash_of("web"));
    }
    let left: BTreeSet<String> = sim.deployments.values().map(|d| d.hash.clone()).collect();
    assert_eq!(
        left,
        BTreeSet::from([hashes[2].clone(), hashes[3].clone()]),
        "current + the previous one (v0={}, v1={})",
        hashes[0],
        hashes[1]
    );
}

#[test]
fn replicas_change_alone_does_not_start_a_rollout() {
    let mut sim = stable_sim(canary_spec());
    let h = sim.hash_of("web");
    sim.spec.components[0].replicas = Some(4);
    sim.generation += 1;
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.at("web", &h), 4);
    assert_eq!(sim.status.rollout_count, 1);
    assert_eq!(sim.status.observed_generation, Some(sim.generation));
}

// ---- property tests over random observation sequences ----

#[derive(Debug, Clone)]
enum Op {
    Reconcile,
    PodsReady,
    Advance(i64),
    ChangeImage(usize, u8),
    Crash(usize),
    NeverReady(usize),
    Heal,
    Ask(u8),
    Delete,
    Replicas(usize, i32),
    /// The autoscaler writes a component's ComponentScale.
    Autoscale(usize, i32),
    SyncTraffic,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Reconcile),
        3 => Just(Op::PodsReady),
        1 => (1i64..400).prop_map(Op::Advance),
        1 => (0usize..2, 0u8..4).prop_map(|(c, v)| Op::ChangeImage(c, v)),
        1 => (0usize..2).prop_map(Op::Crash),
        1 => (0usize..2).prop_map(Op::NeverReady),
        1 => Just(Op::Heal),
        1 => (0u8..6).prop_map(Op::Ask),
        1 => (0usize..2, 0i32..7).prop_map(|(c, r)| Op::Replicas(c, r)),
        1 => Just(Op::Delete),
        3 => Just(Op::SyncTraffic),
        2 => (0usize..2, 0i32..12).prop_map(|(c, r)| Op::Autoscale(c, r)),
    ]
}

fn prop_spec() -> ReleasePlanSpec {
    let mut s = spec(
        vec![component("web", "web:0", 5), component("api", "api:0", 3)],
        vec![weight(20), pause(Some("60s")), weight(60), pause(None)],
    );
    s.health.progress_deadline_seconds = Some(300);
    s
}

/// [`prop_spec`] with a router on `web` (and steps that use it) and Services
/// without a router on `api`.
fn prop_spec_routed() -> ReleasePlanSpec {
    let mut s = spec(
        vec![
            routed_draining(component("web", "web:0", 5)),
            services_only(component("api", "api:0", 3)),
        ],
        vec![
            canary_scale(Some(1), None),
            weight(5),
            header_route(&[("x-canary", "1")]),
            pause(Some("60s")),
            canary_scale(None, Some(100)),
            weight(60),
            pause(None),
        ],
    );
    s.health.progress_deadline_seconds = Some(300);
    s
}

/// The traffic invariants of one decision: weights sum to 100; requests go
/// to a revision other than the stable one only when it has ready pods; and
/// a revision that observed requests still reach keeps its pods.
fn check_traffic(obs: &Observation, target: &Target, d: &Decision) -> Result<(), TestCaseError> {
    for t in &d.traffic {
        let revs = revisions_of(obs, &t.component);
        let ready = |h: &str| revs.get(h).map_or(0, |r| r.ready);
        let stable_of_record = obs
            .status
            .components
            .iter()
            .find(|c| c.name == t.component)
            .and_then(|c| c.stable_hash.clone());
        if let Some(r) = &t.route {
            prop_assert_eq!(r.stable_weight + r.canary_weight, 100);
            prop_assert!(r.stable_weight >= 0 && r.canary_weight >= 0);
            if (r.canary_weight > 0 || !r.headers.is_empty())
                && stable_of_record.as_deref() != Some(t.canary.as_str())
            {
                prop_assert!(
                    ready(&t.canary) > 0,
                    "requests to {} of {} without a ready pod",
                    t.canary,
                    t.component
                );
            }
        }
        // (Unless the spec asks for zero replicas, or there is no stable
        // revision for requests to go to: a first release rolled back.)
        let wanted = target.component(&t.component).map_or(0, |c| c.replicas);
        let wanted = if stable_of_record.is_some() {
            wanted
        } else {
            0
        };
        // The new revision's own count follows the step (a canary Service
        // without a router has no pods at weight 0, as before it had any).
        let current = d
            .status
            .components
            .iter()
            .find(|c| c.name == t.component)
            .and_then(|c| c.current_hash.clone());
        for i in d.deployments.iter().filter(|i| i.component == t.component) {
            let before = revs.get(i.hash.as_str()).map_or(0, |r| r.replicas);
            if i.replicas == 0 && before > 0 && wanted > 0 && current.as_ref() != Some(&i.hash) {
                prop_assert!(
                    !traffic::held(obs, target, &t.component, &i.hash),
                    "{} of {} scaled to zero while requests still reach it",
                    i.hash,
                    t.component
                );
            }
        }
    }
    Ok(())
}

/// Checks the invariants of one decision against the observation it came from.
fn check_invariants(obs: &Observation, d: &Decision) -> Result<(), TestCaseError> {
    let Ok(target) = &obs.target else {
        return Ok(());
    };
    for c in &d.status.components {
        let r = target.component(&c.name).map_or(c.replicas, |t| t.replicas);
        let revs = revisions_of(obs, &c.name);
        let want = |h: &str| {
            d.deployments
                .iter()
                .find(|i| i.component == c.name && i.hash == h)
                .map(|i| i.replicas)
        };
        // Only the current and the stable revision ever grow.
        for i in d.deployments.iter().filter(|i| i.component == c.name) {
            let before = revs.get(i.hash.as_str()).map_or(0, |r| r.replicas);
            if i.replicas > before {
                prop_assert!(
                    Some(&i.hash) == c.current_hash.as_ref()
                        || Some(&i.hash) == c.stable_hash.as_ref(),
                    "revision {} of {} grows but is neither current nor stable",
                    i.hash,
                    c.name
                );
            }
        }
        // The stable revision never goes below what the rest has ready.
        if let Some(st) = &c.stable_hash
            && matches!(
                d.status.phase,
                Phase::RollingOut | Phase::RollbackInProgress | Phase::RolledBack
            )
            && let Some(w) = want(st)
        {
            let others_ready: i32 = revs
                .iter()
                .filter(|(h, _)| *h != st)
                .map(|(_, rv)| rv.ready)
                .sum();
            prop_assert!(
                w >= r - others_ready,
                "stable of {} scaled to {w} with only {others_ready} ready elsewhere (replicas {r})",
                c.name
            );
        }
        // A current revision that is new never grows beyond the component's replicas.
        if let Some(cur) = &c.current_hash
            && let Some(w) = want(cur)
        {
            prop_assert!(w <= r.max(0));
        }
    }
    check_traffic(obs, target, d)
}

/// Runs random operations on a sim of `spec`, checking the invariants at
/// every decision, then lets it settle and checks where it came to rest.
fn run_history(spec: ReleasePlanSpec, ops: Vec<Op>, lag: bool) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(spec);
    sim.traffic_lag = lag;
    let names = ["web", "api"];
    for op in ops {
        match op {
            Op::Reconcile => {
                let obs = sim.observe();
                let templates = sim.templates();
                let d = decide(&obs, &templates);
                // Same observation, same decision.
                prop_assert_eq!(&d, &decide(&obs, &templates));
                check_invariants(&obs, &d)?;
                sim.apply(&d);
                if sim.finalized {
                    return Ok(());
                }
            }
            Op::PodsReady => sim.pods_ready(),
            Op::Advance(s) => sim.advance(s),
            Op::ChangeImage(c, v) => sim.change_image(names[c], &format!("{}:{v}", names[c])),
            Op::Crash(c) => {
                let h = sim.hash_of(names[c]);
                sim.crashing.insert(h);
            }
            Op::NeverReady(c) => {
                let h = sim.hash_of(names[c]);
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
            Op::Replicas(c, r) => {
                sim.spec.components[c].replicas = Some(r);
                sim.generation += 1;
            }
            Op::Autoscale(c, r) => sim.autoscale(names[c], r),
            Op::Delete => sim.deleting = true,
            Op::SyncTraffic => sim.sync_traffic(),
        }
    }
    // Let the system settle with the clock running: it must come to rest.
    sim.request = None;
    for _ in 0..40 {
        sim.advance(30);
        sim.reconcile();
        sim.sync_traffic();
        sim.pods_ready();
        if sim.finalized {
            return Ok(());
        }
    }
    let obs = sim.observe();
    let d = decide(&obs, &sim.templates());
    check_invariants(&obs, &d)?;
    match sim.status.phase {
        Phase::RolledBack => {
            // Every failed rollout ends with all components on stable at full replicas.
            for c in &sim.status.components {
                let r = sim.wanted(&c.name).unwrap_or(c.replicas);
                for dep in sim.deployments.values().filter(|x| x.component == c.name) {
                    if Some(&dep.hash) == c.stable_hash.as_ref() {
                        prop_assert_eq!(dep.replicas, r, "stable of {} not at full", c.name);
                    } else {
                        prop_assert_eq!(
                            dep.replicas,
                            0,
                            "failed revision of {} still runs",
                            c.name
                        );
                    }
                }
            }
        }
        Phase::Stable => {
            for c in &sim.spec.components {
                prop_assert_eq!(
                    Some(sim.at(&c.name, &sim.hash_of(&c.name))),
                    sim.wanted(&c.name)
                );
            }
        }
        _ => {}
    }
    // Settled, every Service selects the revision that runs, and every
    // route sends it all requests.
    if matches!(sim.status.phase, Phase::Stable | Phase::RolledBack) {
        for c in &sim.status.components {
            let Some(t) = sim.traffic.get(&c.name) else {
                continue;
            };
            let Some(st) = c.stable_hash.clone() else {
                continue;
            };
            prop_assert_eq!(t.stable.as_ref(), Some(&st), "stable Service of {}", c.name);
            prop_assert_eq!(t.canary.as_ref(), Some(&st), "canary Service of {}", c.name);
            if let Some(r) = &t.route {
                prop_assert_eq!(
                    r,
                    &traffic::RouteObs {
                        stable_weight: 100,
                        canary_weight: 0,
                        headers: Vec::new(),
                        baseline_weight: 0,
                    }
                );
            }
        }
    }
    match sim.status.phase {
        Phase::Stable | Phase::RolledBack => {}
        // A rollout held by an indefinite pause, a pause request or spec.paused, or a
        // halted one, may rest in RollingOut; anything else must have settled.
        Phase::RollingOut => prop_assert!(
            usize::try_from(sim.status.current_step).unwrap() < sim.spec.strategy.steps.len()
                || sim.status.pause_requested
                || sim.status.failure.is_some()
                || !sim.crashing.is_empty()
                || !sim.never_ready.is_empty(),
            "rollout at the final step did not settle: {:?}",
            sim.status.message
        ),
        Phase::RollbackInProgress => prop_assert!(
            !sim.never_ready.is_empty() || !sim.crashing.is_empty(),
            "rollback did not finish: {:?}",
            sim.status.message
        ),
        Phase::Pending => prop_assert!(false, "still pending"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_over_random_histories(ops in proptest::collection::vec(op(), 1..80)) {
        run_history(prop_spec(), ops, false)?;
    }

    #[test]
    fn traffic_invariants_hold_over_random_histories(ops in proptest::collection::vec(op(), 1..80)) {
        run_history(prop_spec_routed(), ops, true)?;
    }

    #[test]
    fn blue_green_invariants_hold_over_random_histories(ops in proptest::collection::vec(op(), 1..80)) {
        let mut s = prop_spec_routed();
        blue_green(&mut s, Some(60), Some(30));
        run_history(s, ops, true)?;
    }

    #[test]
    fn no_panic_on_arbitrary_observations(
        phase in prop_oneof![Just(Phase::Pending), Just(Phase::RollingOut), Just(Phase::RollbackInProgress), Just(Phase::RolledBack), Just(Phase::Stable)],
        step in -3i32..10,
        generation in 0i64..4,
        observed in proptest::option::of(0i64..4),
        replicas in proptest::collection::vec((0usize..3, 0usize..3, -2i32..12, -2i32..12), 0..6),
        stable in proptest::option::of(0usize..3),
        current in proptest::option::of(0usize..3),
        deleting in any::<bool>(),
        secs in -1000i64..100000,
    ) {
        let hashes = ["aaaa", "bbbb", "cccc"];
        let comps = ["web", "api", "gone"];
        let mut status = ReleasePlanStatus {
            phase,
            current_step: step,
            observed_generation: observed,
            stable_revision: stable.map(|i| hashes[i].to_string()),
            current_revision: current.map(|i| hashes[i].to_string()),
            step_started_at: Some(Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()),
            ..Default::default()
        };
        for name in comps {
            status.components.push(ComponentStatus {
                name: name.into(),
                current_hash: current.map(|i| hashes[i].to_string()),
                stable_hash: stable.map(|i| hashes[i].to_string()),
                replicas: 3,
                ..Default::default()
            });
        }
        let obs = Observation {
            plan: "p".into(),
            now: Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::seconds(secs),
            generation,
            target: Target::from_spec(&prop_spec()),
            status,
            revisions: replicas.iter().map(|(c, h, r, ready)| RevisionObs {
                name: format!("p-{}-{}", comps[*c], hashes[*h]),
                component: comps[*c].into(),
                hash: hashes[*h].into(),
                replicas: *r,
                ready: *ready,
                current: *r,
                created: None,
            }).collect(),
            pod_failures: vec![],
            gates: vec![],
            jobs: vec![],
            traffic: Vec::new(),
            adopted: Vec::new(),
            scales: Vec::new(),
            config: Default::default(),
            request: None,
            invalid_request: None,
            refusal: None,
            template_copies: Vec::new(),
            workloads: Default::default(),
            deleting,
        };
        let d = decide(&obs, &BTreeMap::new());
        prop_assert!(d.deployments.iter().all(|i| i.replicas >= 0));
    }
}

#[test]
fn only_the_current_steps_gates_of_the_spec_count() {
    let mut sim = stable_sim(canary_spec());
    sim.change_image("web", "shop:2");
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    // A verdict of a gate the spec no longer has (removed mid-step).
    let mut obs = sim.observe();
    obs.gates.push(GateStatus {
        name: "gone".into(),
        verdict: crate::api::Verdict::Failed,
        ..Default::default()
    });
    let d = decide(&obs, &sim.templates());
    assert_eq!(d.status.phase, Phase::RollingOut, "{:?}", d.status.failure);
    assert!(d.status.gates.iter().all(|g| g.name != "gone"));
    // Settled: no gate verdicts are kept, whatever was read.
    let mut sim = stable_sim(canary_spec());
    let mut obs = sim.observe();
    obs.gates.push(GateStatus {
        name: "gone".into(),
        verdict: crate::api::Verdict::Passed,
        ..Default::default()
    });
    let d = decide(&obs, &sim.templates());
    assert!(d.status.gates.is_empty());
    sim.apply(&d);
}

mod job_gates {
    use super::*;
    use crate::api::{JobCheck, JobGate};
    use crate::gates::job::JobState;

    fn job_spec(timeout: i32) -> ReleasePlanSpec {
        let mut s = spec(vec![component("web", "v1", 4)], vec![weight(50)]);
        s.health.jobs = vec![JobGate {
            name: "smoke".into(),
            check: JobCheck {
                template: json!({"spec": {"template": {"spec": {"containers": [{"name": "t", "image": "curl"}]}}}}),
                timeout_seconds: Some(timeout),
            },
            component: None,
        }];
        s
    }

    #[test]
    fn a_job_gate_pod_past_the_pod_security_level_is_an_invalid_spec() {
        let mut s = job_spec(60);
        s.health.jobs[0].check.template["spec"]["template"]["spec"]["containers"][0]["securityContext"] =
            json!({"privileged": true});
        let e = Target::from_spec(&s).unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.health.jobs[0].template.spec.template.spec.containers[0].securityContext.privileged: a privileged container is not allowed in a Job gate's pod: plans' and GateTemplates' Job gates run at the restricted Pod Security Standard (the operator's --gate-job-pod-security, or the namespace's GatePolicy spec.jobs.podSecurity); a ClusterGateTemplate, which cluster administrators write, may run such a pod"
        );
        // Past the restricted level only: refused by default, run at baseline.
        let mut s = job_spec(60);
        s.health.jobs[0].check.template["spec"]["template"]["spec"]["containers"][0]["securityContext"] =
            json!({"allowPrivilegeEscalation": true});
        let e = Target::from_spec(&s).unwrap_err();
        assert_eq!(
            e.field,
            "spec.health.jobs[0].template.spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation"
        );
        let t = Target::from_spec_at(&s, crate::gates::pod_security::Level::Baseline).unwrap();
        let pod = t.jobs[0]
            .template
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap();
        assert!(pod.security_context.is_none(), "nothing filled at baseline");
        // Left unset: the restricted values are filled in the Job.
        let t = Target::from_spec(&job_spec(60)).unwrap();
        let pod = t.jobs[0]
            .template
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap();
        assert_eq!(
            pod.security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
    }

    /// Finishes every running Job with `state`.
    fn finish(sim: &mut Sim, state: &JobState) {
        for j in &mut sim.jobs {
            if j.state == JobState::Running {
                j.state = state.clone();
            }
        }
    }

    /// Reconciles (pods ready, Jobs finishing with `state`) until settled.
    fn settle_with(sim: &mut Sim, state: &JobState) {
        for _ in 0..50 {
            let before = (sim.status.clone(), sim.replicas(), sim.jobs.clone());
            sim.reconcile();
            sim.pods_ready();
            finish(sim, state);
            sim.advance(1);
            if (sim.status.clone(), sim.replicas(), sim.jobs.clone()) == before {
                return;
            }
        }
    }

    #[test]
    fn one_job_per_step_and_the_step_waits_for_it() {
        let mut sim = Sim::new(job_spec(60));
        settle_with(&mut sim, &JobState::Complete);
        assert_eq!(sim.status.phase, Phase::Stable);
        // The first release runs the final step only: one Job.
        assert_eq!(sim.jobs_created.len(), 1);
        sim.change_image("web", "v2");
        // Pods ready, the Job runs: the step holds.
        for _ in 0..5 {
            sim.reconcile();
            sim.pods_ready();
            sim.advance(1);
        }
        assert_eq!(sim.status.phase, Phase::RollingOut);
        assert_eq!(sim.status.current_step, 0);
        assert_eq!(sim.jobs_created.len(), 2, "{:?}", sim.jobs_created);
        settle_with(&mut sim, &JobState::Complete);
        assert_eq!(sim.status.phase, Phase::Stable);
        // Steps 0 and 1 of the second rollout: one Job each, none twice.
        assert_eq!(sim.jobs_created.len(), 3, "{:?}", sim.jobs_created);
        let set: BTreeSet<_> = sim.jobs_created.iter().collect();
        assert_eq!(set.len(), 3);
        // The first rollout's Job was deleted, the second's are kept.
        assert_eq!(sim.jobs.len(), 2);
        assert!(sim.jobs.iter().all(|j| j.rollout == 2));
        // Each pass is news, though it ends its step at once.
        let passed = sim
            .events
            .iter()
            .filter(|e| e.reason == EventReason::GatePassed && e.message.starts_with("gate smoke:"))
            .count();
        assert_eq!(passed, 3);
    }

    #[test]
    fn a_failed_job_rolls_back() {
        let mut sim = Sim::new(job_spec(60));
        settle_with(&mut sim, &JobState::Complete);
        sim.change_image("web", "v2");
        let failed = JobState::Failed {
            reason: "BackoffLimitExceeded".into(),
            message: "Job has reached the specified backoff limit".into(),
        };
        settle_with(&mut sim, &failed);
        assert_eq!(sim.status.phase, Phase::RolledBack);
        let f = sim.status.failure.clone().unwrap();
        assert_eq!(f.gate, "smoke");
        assert!(f.message.contains("BackoffLimitExceeded"), "{}", f.message);
        assert!(
            sim.events
                .iter()
                .any(|e| e.reason == EventReason::RollbackStarted)
        );
    }

    #[test]
    fn a_job_that_runs_too_long_rolls_back() {
        let mut sim = Sim::new(job_spec(30));
        settle_with(&mut sim, &JobState::Complete);
        sim.change_image("web", "v2");
        let mut timeout_seen = None;
        for _ in 0..80 {
            let d = sim.reconcile();
            sim.pods_ready();
            if sim.status.phase != Phase::RollingOut {
                break;
            }
            // The core asks to be woken at the timeout.
            if let Some(r) = d.requeue_after {
                timeout_seen = Some(r);
            }
            sim.advance(1);
        }
        assert!(timeout_seen.is_some());
        assert_ne!(sim.status.phase, Phase::RollingOut);
        let f = sim.status.failure.clone().unwrap();
        assert!(
            f.message.contains("did not finish within 30s"),
            "{}",
            f.message
        );
        // The running Job was deleted.
        assert!(sim.jobs.iter().all(|j| j.state != JobState::Running));
    }
}

// ---- the traffic layer ----

/// A component with a router, and no drain time (the unit tests step the
/// clock themselves; `traffic_changes_drain_before_pods_go` covers it).
fn routed(c: Component) -> Component {
    let mut c = routed_draining(c);
    if let Some(t) = c.traffic.as_mut() {
        t.drain_seconds = Some(0);
    }
    c
}

/// A component with a router and the default drain time.
fn routed_draining(mut c: Component) -> Component {
    c.traffic = Some(crate::api::Traffic {
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
    c
}

fn services_only(mut c: Component) -> Component {
    c.traffic = Some(crate::api::Traffic {
        port: 80,
        drain_seconds: Some(0),
        ..Default::default()
    });
    c
}

fn canary_scale(replicas: Option<i32>, weight: Option<i32>) -> Step {
    Step {
        set_canary_scale: Some(crate::api::CanaryScale {
            replicas,
            weight,
            match_traffic_weight: None,
        }),
        ..Step::default()
    }
}

fn header_route(headers: &[(&str, &str)]) -> Step {
    Step {
        set_header_route: Some(crate::api::HeaderRoute {
            headers: headers
                .iter()
                .map(|(n, v)| crate::api::HeaderMatch {
                    name: (*n).into(),
                    value: (*v).into(),
                })
                .collect(),
        }),
        ..Step::default()
    }
}

impl Sim {
    fn route(&self, component: &str) -> traffic::RouteObs {
        self.traffic[component].route.clone().expect("a route")
    }

    fn selects(&self, component: &str) -> (String, String) {
        let t = &self.traffic[component];
        (t.stable.clone().unwrap(), t.canary.clone().unwrap())
    }
}

fn split(stable: i32, canary: i32) -> traffic::RouteObs {
    traffic::RouteObs {
        stable_weight: stable,
        canary_weight: canary,
        headers: Vec::new(),
        baseline_weight: 0,
    }
}

#[test]
fn routed_rollout_splits_requests_by_weight_and_keeps_stable_pods() {
    let mut sim = stable_sim(spec(
        vec![routed(component("web", "shop:1", 10))],
        vec![weight(10), pause(None)],
    ));
    let v1 = sim.hash_of("web");
    assert_eq!(sim.route("web"), split(100, 0));
    assert_eq!(sim.selects("web"), (v1.clone(), v1.clone()));
    assert_eq!(sim.status.traffic_weight, Some(100));
    let names = &sim.last.as_ref().unwrap().traffic[0].names;
    assert_eq!(
        (
            names.stable.as_str(),
            names.canary.as_str(),
            names.route.as_deref()
        ),
        ("shop-web-stable", "shop-web-canary", Some("shop-web"))
    );

    sim.change_image("web", "shop:2");
    let v2 = sim.hash_of("web");
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!((sim.at("web", &v2), sim.at("web", &v1)), (1, 10));
    assert_eq!(
        sim.route("web"),
        split(100, 0),
        "no request before a pod is ready"
    );
    assert_eq!(sim.status.traffic_weight, Some(0));
    assert_eq!(sim.status.weight, 10);
    assert_eq!(sim.selects("web"), (v1.clone(), v2.clone()));
    sim.settle();
    assert_eq!(sim.status.current_step, 1, "at the pause");
    assert_eq!(sim.route("web"), split(90, 10));
    assert_eq!(sim.status.traffic_weight, Some(10));
    assert_eq!(
        (sim.at("web", &v2), sim.at("web", &v1)),
        (1, 10),
        "one pod for 10% of requests; stable keeps every pod"
    );

    sim.ask(Action::Promote { full: false });
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!((sim.at("web", &v2), sim.at("web", &v1)), (10, 0));
    assert_eq!(sim.route("web"), split(100, 0));
    assert_eq!(sim.selects("web"), (v2.clone(), v2));
    assert_eq!(sim.status.traffic_weight, Some(100));
}

#[test]
fn set_canary_scale_decouples_pods_from_the_weight() {
    let mut sim = stable_sim(spec(
        vec![routed(component("web", "shop:1", 10))],
        vec![
            canary_scale(Some(1), None),
            weight(5),
            pause(None),
            canary_scale(None, Some(50)),
            weight(20),
            pause(None),
        ],
    ));
    let v1 = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    let v2 = sim.hash_of("web");
    sim.settle();
    assert_eq!(sim.status.current_step, 2);
    assert_eq!((sim.at("web", &v2), sim.at("web", &v1)), (1, 10));
    assert_eq!(sim.route("web"), split(95, 5));
    sim.ask(Action::Promote { full: false });
    sim.settle();
    assert_eq!(sim.status.current_step, 5);
    assert_eq!((sim.at("web", &v2), sim.at("web", &v1)), (5, 10));
    assert_eq!(sim.route("web"), split(80, 20));
}

#[test]
fn header_route_reaches_the_canary_until_promotion() {
    let mut sim = stable_sim(spec(
        vec![routed(component("web", "shop:1", 4))],
        vec![header_route(&[("x-canary", "true")]), pause(None)],
    ));
    sim.change_image("web", "shop:2");
    sim.settle();
    assert_eq!(sim.status.current_step, 1);
    let r = sim.route("web");
    assert_eq!(
        (r.canary_weight, r.headers),
        (0, vec![("x-canary".to_string(), "true".to_string())])
    );
    sim.ask(Action::Promote { full: false });
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert!(sim.route("web").headers.is_empty());
}

#[test]
fn a_step_waits_for_its_route_to_show() {
    let mut sim = stable_sim(spec(
        vec![routed(component("web", "shop:1", 4))],
        vec![weight(25), pause(None)],
    ));
    sim.traffic_lag = true;
    sim.change_image("web", "shop:2");
    for _ in 0..5 {
        sim.reconcile();
        sim.pods_ready();
    }
    assert_eq!(
        sim.status.current_step, 0,
        "the route does not show 25% yet"
    );
    sim.sync_traffic();
    sim.reconcile();
    sim.sync_traffic();
    sim.reconcile();
    assert_eq!(sim.status.current_step, 1);
}

#[test]
fn rollback_moves_requests_before_pods() {
    let mut sim = stable_sim(spec(
        vec![routed(component("web", "shop:1", 4))],
        vec![weight(50), header_route(&[("x-canary", "1")]), pause(None)],
    ));
    let v1 = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    let v2 = sim.hash_of("web");
    sim.settle();
    assert_eq!(sim.status.current_step, 2);
    assert_eq!(sim.route("web").canary_weight, 50);
    sim.traffic_lag = true;
    sim.crashing.insert(v2.clone());
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollbackInProgress);
    let d = sim.last.clone().unwrap();
    assert_eq!(
        d.traffic[0].route,
        Some(split(100, 0)),
        "requests leave first"
    );
    assert_eq!(sim.at("web", &v2), 2, "pods stay while the route shows 50%");
    sim.reconcile();
    assert_eq!(sim.at("web", &v2), 2, "still: the route is not seen yet");
    sim.sync_traffic();
    sim.reconcile();
    assert_eq!(sim.at("web", &v2), 0, "the route shows 0%: pods go");
    sim.traffic_lag = false;
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!(sim.selects("web"), (v1.clone(), v1));
    assert_eq!(sim.status.traffic_weight, Some(0));
}

#[test]
fn a_routed_baseline_gets_the_canary_share_once_ready_and_loses_it_before_its_pods() {
    let mut web = routed(component("web", "shop:1", 10));
    web.baseline = true;
    let mut sim = stable_sim(spec(vec![web], vec![weight(20), pause(None)]));
    let v1 = sim.hash_of("web");
    let b = crate::api::revision::baseline_of(&v1);
    let names = &sim.last.as_ref().unwrap().traffic[0].names;
    assert_eq!(names.baseline.as_deref(), Some("shop-web-baseline"));
    sim.change_image("web", "shop:2");
    let v2 = sim.hash_of("web");
    sim.reconcile();
    assert_eq!(
        (sim.at("web", &v2), sim.at("web", &b), sim.at("web", &v1)),
        (2, 2, 10),
        "a baseline as large as the canary, stable untouched"
    );
    assert_eq!(
        sim.route("web").baseline_weight,
        0,
        "no request before its pods are ready"
    );
    sim.settle();
    assert_eq!(sim.status.current_step, 1, "at the pause");
    let r = sim.route("web");
    assert_eq!(
        (r.stable_weight, r.canary_weight, r.baseline_weight),
        (60, 20, 20),
        "the baseline takes the canary's share from stable's"
    );
    assert_eq!(
        sim.traffic["web"].baseline.as_deref(),
        Some(b.as_str()),
        "the baseline Service selects the baseline"
    );
    let status = sim.status.components[0].baseline.clone().unwrap();
    assert_eq!((status.replicas, status.ready), (2, 2));
    // A rollback: requests leave the baseline before its pods go.
    sim.traffic_lag = true;
    sim.crashing.insert(v2.clone());
    sim.reconcile();
    assert_eq!(sim.status.phase, Phase::RollbackInProgress);
    let d = sim.last.clone().unwrap();
    assert_eq!(
        d.traffic[0].route,
        Some(split(100, 0)),
        "requests leave first"
    );
    assert_eq!(
        sim.at("web", &b),
        2,
        "baseline pods stay while the route shows them requests"
    );
    sim.sync_traffic();
    sim.reconcile();
    assert_eq!(sim.at("web", &b), 0, "the route shows none: its pods go");
    sim.traffic_lag = false;
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert!(
        !sim.deployments.values().any(|d| d.hash == b),
        "the baseline's Deployment is deleted"
    );
    assert!(sim.status.components[0].baseline.is_none());
}

#[test]
fn a_routed_baseline_sits_out_steps_of_half_or_more() {
    let mut web = routed(component("web", "shop:1", 4));
    web.baseline = true;
    let mut sim = stable_sim(spec(vec![web], vec![weight(50), pause(None)]));
    let v1 = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    sim.settle();
    assert_eq!(sim.status.current_step, 1);
    assert_eq!(sim.route("web"), split(50, 50), "stable keeps its share");
    assert_eq!(sim.at("web", &crate::api::revision::baseline_of(&v1)), 0);
}

#[test]
fn promotion_moves_the_stable_service_before_the_route() {
    let mut sim = stable_sim(spec(
        vec![routed(component("web", "shop:1", 2))],
        vec![weight(50)],
    ));
    let v1 = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    let v2 = sim.hash_of("web");
    sim.traffic_lag = true;
    for _ in 0..30 {
        sim.reconcile();
        sim.pods_ready();
        sim.sync_traffic();
        if sim.status.phase == Phase::Stable {
            break;
        }
    }
    assert_eq!(sim.status.phase, Phase::Stable);
    // Just promoted: the route still sends everything to the canary Service
    // (the new revision) until the stable Service shows the new revision.
    assert_eq!(sim.at("web", &v1), 0);
    sim.reconcile();
    let d = sim.last.clone().unwrap();
    assert_eq!(d.traffic[0].stable, v2);
    assert_eq!(sim.selects("web").0, v2, "synced in the loop above");
    sim.sync_traffic();
    sim.reconcile();
    sim.sync_traffic();
    assert_eq!(sim.route("web"), split(100, 0));
    assert_eq!(sim.selects("web"), (v2.clone(), v2));
}

#[test]
fn services_without_a_router_keep_replica_share_weights() {
    let mut sim = stable_sim(spec(
        vec![services_only(component("web", "shop:1", 4))],
        vec![weight(50), pause(None)],
    ));
    let v1 = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    let v2 = sim.hash_of("web");
    sim.settle();
    assert_eq!((sim.at("web", &v2), sim.at("web", &v1)), (2, 2));
    assert_eq!(sim.selects("web"), (v1.clone(), v2.clone()));
    assert!(sim.traffic["web"].route.is_none());
    assert_eq!(
        sim.status.traffic_weight, None,
        "no router, no traffic weight"
    );
    sim.ask(Action::Abort);
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!(sim.selects("web"), (v1.clone(), v1));
}

#[test]
fn canary_scale_and_header_route_steps_parse_and_are_checked() {
    let s = spec(
        vec![routed(component("web", "shop:1", 4))],
        vec![canary_scale(Some(1), Some(2))],
    );
    let e = Target::from_spec(&s).unwrap_err();
    assert_eq!(e.field, "spec.strategy.steps[0].setCanaryScale");
}

// ---- blue-green ----

fn blue_green(spec: &mut ReleasePlanSpec, auto: Option<i32>, delay: Option<i32>) {
    spec.strategy.steps.clear();
    spec.strategy.blue_green = Some(crate::api::BlueGreen {
        auto_promotion_seconds: auto,
        scale_down_delay_seconds: delay,
    });
}

#[test]
fn blue_green_previews_at_full_scale_then_switches_at_once() {
    let mut s = spec(vec![routed(component("web", "shop:1", 3))], vec![]);
    blue_green(&mut s, None, Some(30));
    let mut sim = stable_sim(s);
    let v1 = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    let v2 = sim.hash_of("web");
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    assert_eq!(
        (sim.at("web", &v2), sim.at("web", &v1)),
        (3, 3),
        "preview at full scale beside the active revision"
    );
    assert_eq!(
        sim.selects("web"),
        (v1.clone(), v2.clone()),
        "active, preview"
    );
    assert_eq!(
        sim.route("web"),
        split(100, 0),
        "no request moves before the switch"
    );
    assert_eq!(sim.status.traffic_weight, Some(0));

    sim.ask(Action::Promote { full: false });
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.selects("web"), (v2.clone(), v2.clone()), "switched");
    assert_eq!(sim.route("web"), split(100, 0));
    assert_eq!(sim.status.traffic_weight, Some(100));
    assert_eq!(
        sim.at("web", &v1),
        3,
        "the old revision waits out the delay"
    );
    let d = sim.last.clone().unwrap();
    assert!(
        d.requeue_after
            .is_some_and(|r| r <= Duration::from_secs(31)),
        "{:?}",
        d.requeue_after
    );
    sim.advance(31);
    sim.settle();
    assert_eq!((sim.at("web", &v2), sim.at("web", &v1)), (3, 0));
}

#[test]
fn blue_green_promotes_itself_after_the_preview_time() {
    let mut s = spec(vec![services_only(component("web", "shop:1", 2))], vec![]);
    blue_green(&mut s, Some(20), Some(0));
    let mut sim = stable_sim(s);
    let v1 = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    let v2 = sim.hash_of("web");
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RollingOut);
    sim.advance(21);
    sim.settle();
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.selects("web"), (v2.clone(), v2.clone()));
    assert_eq!((sim.at("web", &v2), sim.at("web", &v1)), (2, 0));
}

#[test]
fn blue_green_abort_keeps_the_active_revision_whole() {
    let mut s = spec(vec![routed(component("web", "shop:1", 3))], vec![]);
    blue_green(&mut s, None, None);
    let mut sim = stable_sim(s);
    let v1 = sim.hash_of("web");
    sim.change_image("web", "shop:2");
    let v2 = sim.hash_of("web");
    sim.settle();
    sim.ask(Action::Abort);
    sim.settle();
    assert_eq!(sim.status.phase, Phase::RolledBack);
    assert_eq!((sim.at("web", &v2), sim.at("web", &v1)), (0, 3));
    assert_eq!(sim.selects("web"), (v1.clone(), v1));
}

#[test]
fn blue_green_needs_services_and_no_steps() {
    let mut s = spec(vec![component("web", "shop:1", 3)], vec![]);
    blue_green(&mut s, None, None);
    assert_eq!(
        Target::from_spec(&s).unwrap_err().field,
        "spec.components[0].traffic"
    );
    let mut s = spec(
        vec![routed(component("web", "shop:1", 3))],
        vec![weight(10)],
    );
    blue_green(&mut s, None, None);
    s.strategy.steps = vec![weight(10)];
    assert_eq!(
        Target::from_spec(&s).unwrap_err().field,
        "spec.strategy.blueGreen"
    );
}

#[test]
fn traffic_changes_drain_before_pods_go() {
    let mut sim = stable_sim(spec(
        vec![routed_draining(component("web", "shop:1", 4))],
        vec![weight(50), pause(None)],
    ));
    sim.change_image("web", "shop:2");
    let v2 = sim.hash_of("web");
    sim.settle();
    assert_eq!(sim.route("web").canary_weight, 50);
    sim.ask(Action::Abort);
    sim.settle();
    assert_eq!(sim.route("web"), split(100, 0), "requests left at once");
    assert_eq!(sim.status.phase, Phase::RollbackInProgress);
    assert_eq!(sim.at("web", &v2), 2, "pods stay while the change drains");
    let d = sim.last.clone().unwrap();
    assert!(
        d.requeue_after
            .is_some_and(|r| r <= Duration::from_secs(11)),
        "{:?}",
        d.requeue_after
    );
    sim.advance(9);
    sim.settle();
    assert_eq!(sim.at("web", &v2), 2, "9 s of 10");
    sim.advance(2);
    sim.settle();
    assert_eq!(sim.at("web", &v2), 0);
    assert_eq!(sim.status.phase, Phase::RolledBack);
}

#[test]
fn after_promotion_the_route_waits_for_the_stable_service_change_to_drain() {
    let mut sim = stable_sim(spec(
        vec![routed_draining(component("web", "shop:1", 2))],
        vec![weight(50)],
    ));
    sim.change_image("web", "shop:2");
    let v2 = sim.hash_of("web");
    for _ in 0..20 {
        sim.settle();
        if sim.status.phase == Phase::Stable {
            break;
        }
        sim.advance(11);
    }
    assert_eq!(sim.status.phase, Phase::Stable);
    assert_eq!(sim.selects("web").0, v2, "the stable Service moved");
    assert_eq!(
        sim.route("web"),
        split(0, 100),
        "requests stay on the canary Service while the selector change drains"
    );
    sim.advance(11);
    sim.settle();
    assert_eq!(sim.route("web"), split(100, 0));
}

#[test]
fn a_traffic_write_that_does_not_show_is_not_stamped_at_every_reconcile() {
    let mut sim = stable_sim(spec(
        vec![routed_draining(component("web", "shop:1", 4))],
        vec![weight(50), pause(None)],
    ));
    sim.traffic_lag = true;
    sim.change_image("web", "shop:2");
    sim.reconcile();
    let stamped = sim.status.traffic_changed_at;
    assert!(stamped.is_some());
    // The route write never shows (refused, or the cache lags): the same
    // change, so status stays as written and nothing wakes the plan again.
    for _ in 0..3 {
        sim.advance(1);
        let before = sim.status.clone();
        let d = sim.reconcile();
        assert_eq!(d.status, before, "no status write for the same change");
    }
    assert_eq!(sim.status.traffic_changed_at, stamped);
}

#[path = "autoscale_tests.rs"]
mod autoscale;

#[path = "adopt_tests.rs"]
mod adopt_tests;
#[path = "config_tests.rs"]
mod config_tests;

#[path = "trial_tests.rs"]
mod gate_trials;
#[path = "notify_tests.rs"]
mod notify_tests;
#[path = "order_tests.rs"]
mod order_tests;
#[path = "policy_tests.rs"]
mod policy_sim;
#[path = "window_tests.rs"]
mod window_sim;

/// A decision's intents share the templates they were given: a reconcile
/// holds one decoded copy of a component's template, not one per intent.
#[test]
fn intents_share_the_templates_they_were_given() {
    let sim = Sim::new(canary_spec());
    let templates = sim.templates();
    let d = decide(&sim.observe(), &templates);
    let TemplateSource::Spec(t) = &d.deployments[0].template else {
        panic!("{:?}", d.deployments)
    };
    assert!(std::sync::Arc::ptr_eq(t, &templates["web"]));
}
