//! Fleets, the pure half (docs/fleets.md; proposed, not wired to a
//! controller yet): from what the hub saw of every member cluster to one
//! decision: which clusters to admit at which revision, which to take back,
//! each cluster's verdict, and when to look again. Like `plan::decide`, it
//! does no I/O and reads no clock.
//!
//! The rules, in order: clusters are put in waves (named ones, then shares,
//! then the rest); the fleet's target is the revision the members' specs
//! name; a wave starts when the waves before it are Stable at the target
//! and soaked; a member that cannot be reached, or that is not at the
//! target, holds its wave and is never counted as a success; failures past
//! a wave's budget stop the fleet, holding it or taking the admitted
//! clusters back to the previous revision.

use crate::api::Phase;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::time::Duration;

/// What a wave does when its failures pass its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFailure {
    /// No further wave starts; released clusters stay released.
    #[default]
    Hold,
    /// Every cluster admitted at the target is taken back to the previous revision.
    RollBack,
}

/// One wave as the spec gives it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WaveSpec {
    /// Its name, for status and notifications.
    pub name: String,
    /// Clusters named explicitly.
    pub clusters: Vec<String>,
    /// A share of the selected clusters, in percent (rounded up).
    pub percent: Option<u32>,
    /// How long its clusters stay Stable before the next wave starts.
    pub soak: Duration,
    /// How many of its clusters may fail before the fleet stops.
    pub failure_budget: u32,
    /// What happens past the budget.
    pub on_failure: OnFailure,
}

/// Clusters by wave, in wave order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Assignment {
    /// The clusters of each wave, sorted by name.
    pub waves: Vec<Vec<String>>,
    /// Selected clusters no wave takes (no wave takes "the rest").
    pub unassigned: Vec<String>,
    /// Clusters a wave names that are not selected: they hold their wave.
    pub missing: Vec<String>,
}

/// Puts the selected clusters in waves: each cluster a wave names, then each
/// wave's share of all selected clusters (rounded up, by name, among those
/// left), then a wave with neither names nor share takes the rest.
pub fn assign(waves: &[WaveSpec], selected: &[String]) -> Assignment {
    let mut left: Vec<String> = selected.to_vec();
    left.sort();
    left.dedup();
    let total = left.len();
    let mut out = Assignment {
        waves: vec![Vec::new(); waves.len()],
        ..Assignment::default()
    };
    for (i, w) in waves.iter().enumerate() {
        for c in &w.clusters {
            if let Some(pos) = left.iter().position(|l| l == c) {
                out.waves[i].push(left.remove(pos));
            } else if !out.waves.iter().flatten().any(|x| x == c) {
                out.missing.push(c.clone());
            }
        }
    }
    for (i, w) in waves.iter().enumerate() {
        if let Some(p) = w.percent {
            let want = (total * p as usize).div_ceil(100).min(left.len());
            out.waves[i].extend(left.drain(..want));
        }
    }
    match waves
        .iter()
        .position(|w| w.clusters.is_empty() && w.percent.is_none())
    {
        Some(i) => out.waves[i].append(&mut left),
        None => out.unassigned = left,
    }
    for w in &mut out.waves {
        w.sort();
    }
    out
}

/// A member's plan as the hub read it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MemberPlan {
    /// The plan revision its spec names (computed as the member computes it).
    pub revision: String,
    /// Its phase.
    pub phase: Phase,
    /// Its last Stable revision.
    pub stable_revision: Option<String>,
    /// The revision the fleet admitted (the annotation the hub writes).
    pub admitted: Option<String>,
    /// Its failure message, when it has one.
    pub failure: Option<String>,
}

/// What the hub saw of one member.
#[derive(Debug, Clone, PartialEq)]
pub enum MemberView {
    /// Its API server did not answer, or refused: why.
    Unreachable(String),
    /// It has no such plan.
    NoPlan,
    /// Its plan.
    Plan(MemberPlan),
}

/// A cluster's verdict in the fleet's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Its wave has not started.
    Waiting,
    /// Admitted at the target; rolling out.
    Admitted,
    /// Stable at the target.
    Released,
    /// Rolled back at the target.
    Failed,
    /// Could not be read: holds its wave.
    Unreachable,
    /// Its spec names a revision other than the target and the previous
    /// one: changed outside the fleet, reported, never overwritten.
    Diverged,
    /// Its spec still names the previous revision (Git has not reached it).
    NotSynced,
    /// Named by a wave but not selected, or without the plan.
    Missing,
    /// Taken back to the previous revision after the fleet failed.
    TakenBack,
}

/// The fleet's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FleetPhase {
    /// No member plan to release.
    #[default]
    Idle,
    /// A wave is under way or soaking.
    Progressing,
    /// Every wave is Stable at the target and soaked.
    Succeeded,
    /// Failures passed a budget: no further wave starts.
    Held,
    /// Failures passed a budget: the admitted clusters are taken back.
    RolledBack,
}

/// What the fleet's status keeps between looks: the hub resumes from it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FleetState {
    /// The revision being released.
    pub target: Option<String>,
    /// The revision the members ran before it (what a take-back returns to).
    pub previous: Option<String>,
    /// When each wave's clusters were all first seen Stable at the target.
    pub stable_since: Vec<Option<DateTime<Utc>>>,
    /// Set once a budget was passed: sticky for this target.
    pub stopped: Option<FleetPhase>,
}

/// One look at the fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetObservation {
    /// Now.
    pub now: DateTime<Utc>,
    /// The waves of the spec.
    pub waves: Vec<WaveSpec>,
    /// Every selected member, by cluster name.
    pub members: BTreeMap<String, MemberView>,
    /// The state of the last look.
    pub state: FleetState,
}

/// One cluster's line in the status.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterReport {
    /// The cluster.
    pub name: String,
    /// Its wave's index, if any.
    pub wave: Option<usize>,
    /// Its verdict.
    pub verdict: Verdict,
    /// Why, for a human.
    pub message: String,
}

/// The decision of one look.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FleetDecision {
    /// The fleet's phase.
    pub phase: FleetPhase,
    /// The state to keep.
    pub state: FleetState,
    /// Clusters to admit, with the revision to write.
    pub admit: Vec<(String, String)>,
    /// Clusters to take back, with the revision to write.
    pub take_back: Vec<(String, String)>,
    /// Every cluster's verdict, by name.
    pub clusters: Vec<ClusterReport>,
    /// The index of the wave under way, if any.
    pub active_wave: Option<usize>,
    /// What holds the fleet, for a human (a cluster and why).
    pub held_by: Vec<String>,
    /// Look again after this long at the latest.
    pub requeue: Duration,
}

/// How often a fleet under way looks at its members.
pub const LOOK_EVERY: Duration = Duration::from_secs(5);
/// How often a settled fleet looks.
pub const LOOK_SETTLED: Duration = Duration::from_secs(60);

/// The most common value, ties to the one met first.
fn most_common(values: &[&str]) -> Option<String> {
    let mut best: Option<(&str, usize)> = None;
    for v in values {
        let n = values.iter().filter(|x| *x == v).count();
        if best.is_none_or(|(_, m)| n > m) {
            best = Some((v, n));
        }
    }
    best.map(|(v, _)| v.to_string())
}

/// One decision for the fleet (see the module docs).
pub fn decide(obs: &FleetObservation) -> FleetDecision {
    let names: Vec<String> = obs.members.keys().cloned().collect();
    let assignment = assign(&obs.waves, &names);
    // Clusters in wave order, so the first wave's revision wins a tie.
    let plans: Vec<&MemberPlan> = assignment
        .waves
        .iter()
        .flatten()
        .filter_map(|n| match obs.members.get(n) {
            Some(MemberView::Plan(p)) => Some(p),
            _ => None,
        })
        .collect();
    let revisions: Vec<&str> = plans.iter().map(|p| p.revision.as_str()).collect();
    let Some(target) = most_common(&revisions) else {
        return FleetDecision {
            requeue: LOOK_SETTLED,
            state: obs.state.clone(),
            clusters: names
                .iter()
                .map(|n| report(n, &assignment, obs.members.get(n), None, None))
                .collect(),
            ..FleetDecision::default()
        };
    };
    let mut state = obs.state.clone();
    if state.target.as_deref() != Some(target.as_str()) {
        // A new release: what the members ran before is what they go back to.
        let stables: Vec<&str> = plans
            .iter()
            .filter_map(|p| p.stable_revision.as_deref())
            .collect();
        state = FleetState {
            previous: most_common(&stables).filter(|s| *s != target),
            target: Some(target.clone()),
            ..FleetState::default()
        };
    }
    state.stable_since.resize(obs.waves.len(), None);
    let mut out = FleetDecision {
        requeue: LOOK_SETTLED,
        ..FleetDecision::default()
    };
    out.active_wave = active_wave(obs, &assignment, &target, &mut state, &mut out.requeue);
    if state.stopped.is_none() {
        state.stopped = stop(obs, &assignment, &target, out.active_wave);
    }
    act(obs, &assignment, &target, &state, &mut out);
    let previous = state.previous.clone();
    out.clusters = names
        .iter()
        .map(|n| {
            let taken_back_before = out.phase == FleetPhase::RolledBack
                && matches!(obs.members.get(n), Some(MemberView::Plan(p))
                    if p.revision == target && p.admitted.is_some() && p.admitted == previous);
            let taken = taken_back_before || out.take_back.iter().any(|(c, _)| c == n);
            let mut r = report(
                n,
                &assignment,
                obs.members.get(n),
                Some(&target),
                previous.as_deref(),
            );
            if taken {
                r.verdict = Verdict::TakenBack;
                r.message = format!("taken back to {}", previous.as_deref().unwrap_or("?"));
            } else if r.verdict == Verdict::Waiting && out.admit.iter().any(|(c, _)| c == n) {
                r.verdict = Verdict::Admitted;
                r.message = format!("admitted at {target}");
            }
            r
        })
        .collect();
    out.state = state;
    out
}

/// The first wave not yet done (every cluster released, or failed within
/// its budget) and soaked; `None` when every wave is. Records when each
/// wave became done, and shortens `requeue` to the end of a soak.
fn active_wave(
    obs: &FleetObservation,
    assignment: &Assignment,
    target: &str,
    state: &mut FleetState,
    requeue: &mut Duration,
) -> Option<usize> {
    for (i, (wave, clusters)) in obs.waves.iter().zip(&assignment.waves).enumerate() {
        let views: Vec<Option<&MemberView>> = clusters.iter().map(|c| obs.members.get(c)).collect();
        let missing_here = wave.clusters.iter().any(|c| assignment.missing.contains(c));
        let failures = views.iter().filter(|v| failed_at(**v, target)).count();
        let within = failures <= wave.failure_budget as usize;
        let done = |v: Option<&MemberView>| released(v, target) || (within && failed_at(v, target));
        if missing_here || !views.iter().all(|v| done(*v)) {
            state.stable_since[i] = None;
            return Some(i);
        }
        let since = *state.stable_since[i].get_or_insert(obs.now);
        let soaked = (obs.now - since).to_std().unwrap_or(Duration::ZERO);
        if soaked < wave.soak {
            *requeue =
                (*requeue).min(wave.soak.saturating_sub(soaked) + Duration::from_millis(500));
            return Some(i);
        }
    }
    None
}

/// Whether failures past a budget stop the fleet, counted per wave up to
/// the active one: how.
fn stop(
    obs: &FleetObservation,
    assignment: &Assignment,
    target: &str,
    active: Option<usize>,
) -> Option<FleetPhase> {
    let upto = active.map_or(obs.waves.len(), |a| a + 1);
    obs.waves
        .iter()
        .zip(&assignment.waves)
        .take(upto)
        .find(|(wave, clusters)| {
            let failures = clusters
                .iter()
                .filter(|c| failed_at(obs.members.get(*c), target))
                .count();
            failures > wave.failure_budget as usize
        })
        .map(|(wave, _)| match wave.on_failure {
            OnFailure::Hold => FleetPhase::Held,
            OnFailure::RollBack => FleetPhase::RolledBack,
        })
}

/// The phase, the admissions or take-backs, and what holds the fleet.
fn act(
    obs: &FleetObservation,
    assignment: &Assignment,
    target: &str,
    state: &FleetState,
    out: &mut FleetDecision,
) {
    match (state.stopped, out.active_wave) {
        (Some(FleetPhase::RolledBack), _) => {
            out.phase = FleetPhase::RolledBack;
            let Some(prev) = &state.previous else { return };
            for c in assignment.waves.iter().flatten() {
                if let Some(MemberView::Plan(p)) = obs.members.get(c)
                    && p.admitted.as_deref() == Some(target)
                {
                    out.take_back.push((c.clone(), prev.clone()));
                }
            }
        }
        (Some(stopped), _) => out.phase = stopped,
        (None, None) => out.phase = FleetPhase::Succeeded,
        (None, Some(i)) => {
            out.phase = FleetPhase::Progressing;
            out.requeue = out.requeue.min(LOOK_EVERY);
            for c in &assignment.waves[i] {
                match obs.members.get(c) {
                    Some(MemberView::Plan(p)) if p.revision == target => {
                        if p.admitted.as_deref() != Some(target) {
                            out.admit.push((c.clone(), target.to_string()));
                        }
                    }
                    Some(MemberView::Unreachable(e)) => {
                        out.held_by
                            .push(format!("cluster {c} cannot be reached: {e}"));
                    }
                    Some(MemberView::Plan(p)) => out.held_by.push(format!(
                        "cluster {c} names revision {} in its spec, not the fleet's {target}",
                        p.revision
                    )),
                    Some(MemberView::NoPlan) | None => {
                        out.held_by.push(format!("cluster {c} has no such plan"));
                    }
                }
            }
            for c in &assignment.missing {
                out.held_by
                    .push(format!("cluster {c} is named by a wave but not selected"));
            }
        }
    }
}

/// Stable at the target.
fn released(v: Option<&MemberView>, target: &str) -> bool {
    matches!(v, Some(MemberView::Plan(p))
        if p.phase == Phase::Stable && p.stable_revision.as_deref() == Some(target))
}

/// A member admitted at the target that rolled back (or is rolling back).
fn failed_at(v: Option<&MemberView>, target: &str) -> bool {
    matches!(v, Some(MemberView::Plan(p))
        if p.revision == target
            && p.admitted.as_deref() == Some(target)
            && matches!(p.phase, Phase::RolledBack | Phase::RollbackInProgress))
}

/// A cluster's verdict from what was read of it.
fn report(
    name: &str,
    assignment: &Assignment,
    view: Option<&MemberView>,
    target: Option<&str>,
    previous: Option<&str>,
) -> ClusterReport {
    let wave = assignment
        .waves
        .iter()
        .position(|w| w.iter().any(|c| c == name));
    let (verdict, message) = match view {
        None | Some(MemberView::NoPlan) => (Verdict::Missing, "no such plan".to_string()),
        Some(MemberView::Unreachable(e)) => (Verdict::Unreachable, e.clone()),
        Some(MemberView::Plan(p)) => {
            let target = target.unwrap_or_default();
            let at_target = p.revision == target;
            let admitted = p.admitted.as_deref() == Some(target);
            if !at_target && Some(p.revision.as_str()) == previous {
                (
                    Verdict::NotSynced,
                    format!("its spec still names {}", p.revision),
                )
            } else if !at_target {
                (
                    Verdict::Diverged,
                    format!("its spec names {}, not the fleet's {target}", p.revision),
                )
            } else if p.phase == Phase::Stable && p.stable_revision.as_deref() == Some(target) {
                (Verdict::Released, format!("Stable at {target}"))
            } else if admitted && matches!(p.phase, Phase::RolledBack | Phase::RollbackInProgress) {
                (
                    Verdict::Failed,
                    p.failure.clone().unwrap_or_else(|| "rolled back".into()),
                )
            } else if admitted {
                (Verdict::Admitted, format!("{:?} at {target}", p.phase))
            } else {
                (Verdict::Waiting, "its wave has not started".into())
            }
        }
    };
    let (verdict, message) = if wave.is_none() && verdict == Verdict::Waiting {
        (Verdict::Missing, "no wave takes it".into())
    } else {
        (verdict, message)
    };
    ClusterReport {
        name: name.to_string(),
        wave,
        verdict,
        message,
    }
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod tests;
