//! The desired replica count of every revision Deployment, from the phase,
//! the step's weight and what is ready now.
//!
//! Capacity never drops below a component's replicas: the stable revision
//! gives up only as many replicas as the new revision has ready, and a
//! revision that is neither current nor stable is scaled to zero only once
//! the revisions that stay cover the full count with ready pods.

use super::replicas::canary_replicas;
use super::stateful::StatefulSetIntent;
use super::traffic;
use super::{
    DeploymentIntent, Observation, RevisionObs, Target, TemplateSource, order, revisions_of,
};
use crate::api::revision::{baseline_of, deployment_name, is_baseline};
use crate::api::{BaselineStatus, ComponentStatus, Phase, ReleasePlanStatus};
use std::collections::{BTreeMap, BTreeSet};

fn ready(revs: &BTreeMap<&str, &RevisionObs>, hash: &str) -> i32 {
    revs.get(hash).map_or(0, |r| r.ready.max(0))
}

fn observed_replicas(revs: &BTreeMap<&str, &RevisionObs>, hash: &str) -> Option<i32> {
    revs.get(hash).map(|r| r.replicas)
}

/// Replicas of a component: from the spec, or as last recorded for a component
/// the spec no longer has.
fn replicas_of(target: &Target, c: &ComponentStatus) -> i32 {
    target.component(&c.name).map_or(c.replicas, |t| t.replicas)
}

/// The wanted replicas of the current and stable revisions of one component.
fn wanted(
    obs: &Observation,
    target: &Target,
    status: &ReleasePlanStatus,
    c: &ComponentStatus,
) -> BTreeMap<String, i32> {
    let revs = revisions_of(obs, &c.name);
    let r = replicas_of(target, c);
    let in_spec = target.component(&c.name).is_some();
    // StatefulSets and DaemonSets replace a pod (or a node's pod), never
    // add one beside it.
    let daemon = super::daemon::is_daemon(obs, target, &c.name);
    let stateful = daemon || super::stateful::is_stateful(obs, target, &c.name);
    let mut want = BTreeMap::new();
    match status.phase {
        Phase::Pending => {}
        Phase::Stable => {
            if in_spec && let Some(h) = &c.current_hash {
                want.insert(h.clone(), r);
            }
        }
        Phase::RollingOut => match (&c.current_hash, &c.stable_hash) {
            (Some(cur), Some(st)) if !in_spec => {
                // Removed from the spec: keeps serving until the rollout is promoted.
                let _ = cur;
                want.insert(st.clone(), r);
            }
            // A first DaemonSet runs on every node at once: no node has an
            // older pod to keep.
            (Some(cur), None) if daemon => {
                want.insert(cur.clone(), r);
            }
            (Some(cur), None) => {
                want.insert(
                    cur.clone(),
                    canary_replicas(r, order::weight(target, status, &c.name)),
                );
            }
            (Some(cur), Some(st)) if cur == st => {
                want.insert(cur.clone(), r);
            }
            (Some(cur), Some(st)) if target.blue_green.is_some() => {
                // Blue-green: the preview at full scale beside the active one.
                want.insert(cur.clone(), r);
                want.insert(st.clone(), r);
            }
            (Some(cur), Some(st)) if routed(target, &c.name) => {
                // A router splits requests, not pods: the stable revision keeps
                // every pod until the route sends it nothing.
                let canary = traffic::canary_pods(target, status, &c.name, r);
                want.insert(cur.clone(), canary);
                let stable = if traffic::stable_released(obs, &c.name)
                    && traffic::draining(obs, target, &c.name).is_none()
                {
                    r - ready(&revs, cur).min(canary)
                } else {
                    r
                };
                want.insert(st.clone(), stable);
            }
            (Some(cur), Some(st)) if stateful => {
                // One set: the ordinals the new revision takes, the stable
                // one gives up (the set replaces a pod, never adds one).
                let canary = canary_replicas(r, order::weight(target, status, &c.name));
                want.insert(cur.clone(), canary);
                want.insert(st.clone(), r - canary);
            }
            (Some(cur), Some(st)) => {
                let canary = canary_replicas(r, order::weight(target, status, &c.name));
                want.insert(cur.clone(), canary);
                let mut stable = r - ready(&revs, cur).min(canary);
                // Its last pods stay while the stable Service still selects it.
                if stable == 0
                    && (traffic::held(obs, target, &c.name, st)
                        || traffic::draining(obs, target, &c.name).is_some())
                {
                    stable = observed_replicas(&revs, st).unwrap_or(0).clamp(0, r);
                }
                want.insert(st.clone(), stable);
            }
            (None, Some(st)) => {
                want.insert(st.clone(), r);
            }
            (None, None) => {}
        },
        Phase::RollbackInProgress
            if !order::rollback_waits_on(obs, target, status, &c.name).is_empty() =>
        {
            // Components that started after it go back first: until they
            // are, its new revision keeps its pods (`dependsOn`); the stable
            // one makes up for new pods that are not ready.
            if let Some(cur) = &c.current_hash {
                want.insert(
                    cur.clone(),
                    observed_replicas(&revs, cur).unwrap_or(0).clamp(0, r),
                );
            }
            if let Some(st) = &c.stable_hash {
                let kept = if stateful {
                    let cur = c.current_hash.as_ref();
                    r - cur.and_then(|h| observed_replicas(&revs, h)).unwrap_or(0)
                } else {
                    let cur_ready = c.current_hash.as_ref().map_or(0, |h| ready(&revs, h));
                    observed_replicas(&revs, st).unwrap_or(0).max(r - cur_ready)
                };
                want.insert(st.clone(), kept.clamp(0, r));
            }
        }
        Phase::RollbackInProgress | Phase::RolledBack => {
            if let Some(st) = &c.stable_hash {
                want.insert(st.clone(), r);
            }
        }
    }
    if let Some((hash, pods)) = baseline(target, status, c) {
        want.insert(hash, pods);
    }
    want
}

/// The baseline of a component (`baseline: true`) and its pods: while a
/// canary step runs part of the replicas on the new revision, as many pods
/// of the stable template, started fresh. None at the final step, outside a
/// rollout, and while its canary has no pods.
pub(crate) fn baseline(
    target: &Target,
    status: &ReleasePlanStatus,
    c: &ComponentStatus,
) -> Option<(String, i32)> {
    let t = target.component(&c.name)?;
    if !t.baseline
        || t.kind != crate::api::workload::WorkloadKind::Deployment
        || status.phase != Phase::RollingOut
        || target.blue_green.is_some()
    {
        return None;
    }
    let (cur, st) = (c.current_hash.as_ref()?, c.stable_hash.as_ref()?);
    let weight = order::weight(target, status, &c.name);
    let routed = routed(target, &c.name);
    // With a router the baseline takes as large a share of requests as the
    // canary, from stable's: only while stable keeps some.
    if cur == st || weight >= 100 || (routed && 2 * weight >= 100) {
        return None;
    }
    // As many pods as the canary has at this step (see `wanted`); within a
    // capacity they come out of the stable revision's, which keeps one.
    let canary = if routed {
        traffic::canary_pods(target, status, &c.name, t.replicas)
    } else {
        canary_replicas(t.replicas, weight)
    };
    let pods = if super::capacity::limits(target, &c.name).is_some() {
        canary.min(t.replicas - canary - 1)
    } else {
        canary
    };
    (canary > 0 && canary < t.replicas && pods > 0).then(|| (baseline_of(st), pods))
}

/// A component's baseline as status shows it, while one is wanted or still
/// has pods.
fn baseline_status(
    revs: &BTreeMap<&str, &RevisionObs>,
    want: &BTreeMap<String, i32>,
    c: &ComponentStatus,
) -> Option<BaselineStatus> {
    let hash = baseline_of(c.stable_hash.as_ref()?);
    let wanted = want.get(&hash).copied();
    let seen = revs.get(hash.as_str()).filter(|r| r.replicas > 0);
    if wanted.is_none() && seen.is_none() {
        return None;
    }
    Some(BaselineStatus {
        replicas: wanted.unwrap_or(0),
        ready: ready(revs, &hash),
        revision: hash,
    })
}

/// How long after a blue-green switch the old revision still keeps its pods
/// (`None`: not blue-green, or not in that window).
pub fn blue_green_window(
    obs: &Observation,
    target: &Target,
    status: &ReleasePlanStatus,
) -> Option<std::time::Duration> {
    let delay = target.blue_green?;
    if status.phase != Phase::Stable {
        return None;
    }
    let switched = status
        .history
        .iter()
        .rev()
        .find(|h| h.outcome == crate::api::Outcome::Promoted)?
        .finished_at?;
    let elapsed = (obs.now - switched).to_std().unwrap_or_default();
    delay.checked_sub(elapsed).filter(|left| !left.is_zero())
}

fn blue_green_kept(obs: &Observation, target: &Target, status: &ReleasePlanStatus) -> bool {
    blue_green_window(obs, target, status).is_some()
}

/// The component has a router (`traffic.gatewayAPI`).
fn routed(target: &Target, component: &str) -> bool {
    target
        .component(component)
        .and_then(|c| c.traffic.as_ref())
        .is_some_and(traffic::TrafficTarget::routed)
}

/// Whether the wanted revisions of a component cover its replicas with ready
/// pods (a baseline is never part of them: it only stands beside the canary).
fn covered(revs: &BTreeMap<&str, &RevisionObs>, want: &BTreeMap<String, i32>, r: i32) -> bool {
    let have: i32 = want
        .iter()
        .filter(|(h, _)| !is_baseline(h))
        .map(|(h, w)| ready(revs, h).min(*w))
        .sum();
    have >= r
}

/// The workload objects to write and delete.
#[derive(Debug, Default)]
pub struct Workloads {
    /// Deployments to scale or create.
    pub deployments: Vec<DeploymentIntent>,
    /// Deployments to delete.
    pub delete: Vec<String>,
    /// StatefulSets to write.
    pub stateful_sets: Vec<StatefulSetIntent>,
    /// StatefulSets to delete (components gone).
    pub delete_stateful_sets: Vec<String>,
    /// Pods a StatefulSet cannot move past.
    pub delete_pods: Vec<String>,
    /// DaemonSets to write.
    pub daemon_sets: Vec<super::daemon::DaemonSetIntent>,
    /// DaemonSets to delete.
    pub delete_daemon_sets: Vec<String>,
}

/// The Deployments and StatefulSets to write, and those to delete.
pub fn intents(
    obs: &Observation,
    target: &Target,
    status: &ReleasePlanStatus,
    templates: &super::Templates,
) -> Workloads {
    let plan = plan_name(obs);
    let mut out = Vec::new();
    let mut delete = Vec::new();
    let mut kept = Workloads::default();
    let settled = matches!(status.phase, Phase::Stable | Phase::RolledBack);
    for c in &status.components {
        let revs = revisions_of(obs, &c.name);
        let r = replicas_of(target, c);
        let want = wanted(obs, target, status, c);
        if workload_intents(obs, target, c, &want, templates, &mut kept) {
            continue;
        }
        let (want, limited) = super::capacity::within(obs, target, status, c, want);
        // With nothing to keep (no stable revision to return to), nothing is protected.
        // An adopted Deployment is the stable capacity of a first rollout.
        let is_covered =
            (want.is_empty() && super::adopt::covers(obs, target, c)) || covered(&revs, &want, r);
        let in_spec = target.component(&c.name);
        for (hash, replicas) in &want {
            let template = template_of(in_spec, templates, c, hash);
            let name = revs
                .get(hash.as_str())
                .map_or_else(|| deployment_name(&plan, &c.name, hash), |r| r.name.clone());
            out.push(DeploymentIntent {
                name,
                component: c.name.clone(),
                hash: hash.clone(),
                replicas: (*replicas).max(0),
                template,
            });
        }
        // Revisions neither current nor stable: down to zero once covered,
        // oldest beyond the history limit deleted once settled.
        let mut idle: Vec<&RevisionObs> = Vec::new();
        for (hash, rev) in &revs {
            if want.contains_key(*hash) {
                continue;
            }
            // Requests still reaching it hold it, while there is somewhere
            // else for them to go. Kept, it never runs more than the
            // component's replicas.
            let held = !want.is_empty()
                && (traffic::held(obs, target, &c.name, hash)
                    || traffic::draining(obs, target, &c.name).is_some());
            let replicas = if let Some(w) = limited.as_ref().and_then(|l| l.get(*hash)) {
                *w
            } else if is_covered && !held && !blue_green_kept(obs, target, status) {
                0
            } else {
                rev.replicas.clamp(0, r.max(0))
            };
            if replicas == 0 && rev.replicas == 0 {
                // A baseline is no revision to return to: gone once it has no pods.
                if is_baseline(hash) {
                    delete.push(rev.name.clone());
                    continue;
                }
                idle.push(rev);
            }
            out.push(DeploymentIntent {
                name: rev.name.clone(),
                component: c.name.clone(),
                hash: (*hash).to_string(),
                replicas,
                template: TemplateSource::Existing,
            });
        }
        if settled {
            // Newest first: by the last rollout that used the revision, then by
            // creation (whole seconds only, so rollouts within one second tie).
            let last_use = |hash: &str| {
                let entry = format!("{}={hash}", c.name);
                status
                    .history
                    .iter()
                    .filter(|h| h.components.contains(&entry))
                    .map(|h| h.number)
                    .max()
            };
            idle.sort_by(|a, b| {
                last_use(&b.hash)
                    .cmp(&last_use(&a.hash))
                    .then_with(|| b.created.cmp(&a.created))
                    .then_with(|| a.name.cmp(&b.name))
            });
            for old in idle.iter().skip(target.revision_history_limit) {
                delete.push(old.name.clone());
            }
        }
    }
    // Components gone from the spec and from the record: their objects go
    // once the plan is settled on a revision without them.
    let (gone, delete_sets) = gone(obs, status);
    delete.extend(gone);
    // Never delete what we also scale.
    let scaled: BTreeSet<&str> = out
        .iter()
        .filter(|i| i.replicas > 0)
        .map(|i| i.name.as_str())
        .collect();
    delete.retain(|d| !scaled.contains(d.as_str()));
    out.retain(|i| !delete.contains(&i.name));
    Workloads {
        deployments: out,
        delete,
        delete_stateful_sets: delete_sets,
        ..kept
    }
}

/// Where the Deployment of revision `hash` of a component gets its template.
fn template_of(
    in_spec: Option<&super::TargetComponent>,
    templates: &super::Templates,
    c: &ComponentStatus,
    hash: &str,
) -> TemplateSource {
    match (in_spec, templates.get(&c.name), &c.stable_hash) {
        (Some(t), Some(tpl), _) if t.hash == hash => {
            TemplateSource::Spec(std::sync::Arc::clone(tpl))
        }
        (_, _, Some(st)) if is_baseline(hash) => TemplateSource::Of(st.clone()),
        _ => TemplateSource::Existing,
    }
}

/// The StatefulSet or DaemonSets of a component that runs in one (into
/// `out`); false for a Deployment component.
fn workload_intents(
    obs: &Observation,
    target: &Target,
    c: &ComponentStatus,
    want: &BTreeMap<String, i32>,
    templates: &super::Templates,
    out: &mut Workloads,
) -> bool {
    if super::daemon::is_daemon(obs, target, &c.name) {
        let (sets, gone) = super::daemon::intents(obs, target, c, want, templates);
        out.daemon_sets.extend(sets);
        out.delete_daemon_sets.extend(gone);
        return true;
    }
    if super::stateful::is_stateful(obs, target, &c.name) {
        let set = super::stateful::intent(obs, target, c, want, templates);
        if let Some(i) = set.as_ref().filter(|_| !obs.deleting) {
            out.delete_pods.extend(super::stateful::stuck_pods(obs, i));
        }
        out.stateful_sets.extend(set);
        return true;
    }
    false
}

/// The Deployments and StatefulSets of components gone from the spec and
/// from the record, once the plan is Stable on a revision without them.
fn gone(obs: &Observation, status: &ReleasePlanStatus) -> (Vec<String>, Vec<String>) {
    let mut delete = Vec::new();
    let mut delete_sets = Vec::new();
    if status.phase == Phase::Stable {
        let known: BTreeSet<&str> = status.components.iter().map(|c| c.name.as_str()).collect();
        let sets_seen = &obs.workloads.stateful_sets;
        for rev in &obs.revisions {
            if !known.contains(rev.component.as_str())
                && !sets_seen.iter().any(|s| s.name == rev.name)
            {
                delete.push(rev.name.clone());
            }
        }
        for set in sets_seen {
            if !known.contains(set.component.as_str()) {
                delete_sets.push(set.name.clone());
            }
        }
    }
    (delete, delete_sets)
}

fn plan_name(obs: &Observation) -> String {
    obs.plan.clone()
}

/// Whether the current step's replica targets are met with ready pods.
pub fn step_ready(obs: &Observation, target: &Target, status: &ReleasePlanStatus) -> bool {
    traffic::step_in_place(obs, target, status) && pods_ready(obs, target, status)
}

/// Whether the current step's replica targets are met with ready pods.
fn pods_ready(obs: &Observation, target: &Target, status: &ReleasePlanStatus) -> bool {
    let timeline = order::Timeline::of(target, &status.components);
    status.components.iter().all(|c| {
        // Past its own steps (all of them, without `dependsOn`).
        let at_final = status.current_step >= timeline.total()
            || timeline.local(&c.name, status.current_step) == order::Local::Final;
        let revs = revisions_of(obs, &c.name);
        let r = replicas_of(target, c);
        let want = wanted(obs, target, status, c);
        let Some(cur) = &c.current_hash else {
            return true;
        };
        let changed = c.stable_hash.as_ref() != Some(cur);
        let cur_want = want.get(cur).copied().unwrap_or(0);
        if changed && ready(&revs, cur) < cur_want {
            return false;
        }
        // The baseline stands beside the canary before the step counts as
        // reached: a judge compares the two only once both serve.
        if let Some((h, w)) = want.iter().find(|(h, _)| is_baseline(h))
            && ready(&revs, h) < *w
        {
            return false;
        }
        // The scale-down the step asks of the stable revision has been applied.
        let stable_applied = match &c.stable_hash {
            Some(st) if changed => want
                .get(st)
                .is_none_or(|w| observed_replicas(&revs, st).unwrap_or(0) <= *w),
            _ => true,
        };
        if !stable_applied {
            return false;
        }
        if at_final {
            // Promotion needs every component whole, and nothing else running.
            let whole = want.keys().map(|h| ready(&revs, h)).sum::<i32>() >= r;
            // Blue-green keeps the old revision until after the switch.
            let others_gone = target.blue_green.is_some()
                || revs
                    .iter()
                    .filter(|(h, _)| **h != cur.as_str())
                    .all(|(_, rev)| rev.replicas == 0);
            return whole && others_gone && target.component(&c.name).is_some();
        }
        true
    })
}

/// Whether every component is back on its stable revision at full, ready
/// replicas, with every other revision at zero.
pub fn rollback_complete(obs: &Observation, target: &Target, status: &ReleasePlanStatus) -> bool {
    status
        .components
        .iter()
        .all(|c| component_rolled_back(obs, target, c))
}

/// Whether one component is back on its stable revision at full, ready
/// replicas, with every other revision at zero.
pub fn component_rolled_back(obs: &Observation, target: &Target, c: &ComponentStatus) -> bool {
    let revs = revisions_of(obs, &c.name);
    let r = replicas_of(target, c);
    revs.iter().all(|(h, rev)| match &c.stable_hash {
        Some(st) if st == h => rev.replicas == r && rev.ready >= r,
        _ => rev.replicas == 0,
    }) && c
        .stable_hash
        .as_ref()
        .is_none_or(|st| revs.contains_key(st.as_str()) || r == 0)
        && super::adopt::restored(obs, target, c)
}

/// Per-component status after the decision: hashes and replica counts.
pub fn component_status(
    obs: &Observation,
    target: &Target,
    status: &ReleasePlanStatus,
    intents: &[DeploymentIntent],
) -> Vec<ComponentStatus> {
    status
        .components
        .iter()
        .map(|c| {
            let revs = revisions_of(obs, &c.name);
            // A StatefulSet's or DaemonSets' pods per revision are what the
            // core wants of each (one object runs them all).
            let in_place = (super::stateful::is_stateful(obs, target, &c.name)
                || super::daemon::is_daemon(obs, target, &c.name))
            .then(|| wanted(obs, target, status, c));
            let want_of = |h: &Option<String>| {
                h.as_ref().map_or(0, |h| match &in_place {
                    Some(want) => want.get(h).copied().unwrap_or(0),
                    None => intents
                        .iter()
                        .find(|i| i.component == c.name && &i.hash == h)
                        .map_or(0, |i| i.replicas),
                })
            };
            let ready_of = |h: &Option<String>| h.as_ref().map_or(0, |h| ready(&revs, h));
            // Only a component that runs a baseline, or still has one, has
            // any to show (most have none: nothing is built for them).
            let has_baseline = target.component(&c.name).is_some_and(|t| t.baseline)
                || revs.keys().any(|h| is_baseline(h));
            let baseline = (in_place.is_none() && has_baseline).then(|| {
                let want: BTreeMap<String, i32> = intents
                    .iter()
                    .filter(|i| i.component == c.name && is_baseline(&i.hash) && i.replicas > 0)
                    .map(|i| (i.hash.clone(), i.replicas))
                    .collect();
                baseline_status(&revs, &want, c)
            });
            ComponentStatus {
                name: c.name.clone(),
                current_hash: c.current_hash.clone(),
                stable_hash: c.stable_hash.clone(),
                replicas: replicas_of(target, c),
                current_replicas: want_of(&c.current_hash),
                current_ready: ready_of(&c.current_hash),
                stable_replicas: want_of(&c.stable_hash),
                stable_ready: ready_of(&c.stable_hash),
                autoscaling: super::autoscale::component_autoscaling(obs, target, &c.name),
                // What the spec's revision reads; a component the spec no
                // longer has keeps what it recorded.
                config: target
                    .component(&c.name)
                    .map_or_else(|| c.config.clone(), |t| t.config.clone()),
                adopted: None,
                waiting_for: order::waiting_for(obs, target, status, &c.name),
                baseline: baseline.flatten(),
            }
        })
        .collect()
}
