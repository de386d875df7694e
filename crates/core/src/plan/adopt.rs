//! Adoption (`spec.components[].adopt`): a running Deployment of the user's
//! is the stable capacity of the component's first rollout, and hands it
//! over to the first revision as that revision's pods become ready
//! (docs/decisions.md, "Adoption: hand over, not take over").
//!
//! The adopted Deployment is never a revision: it has no component or
//! revision label, so [`super::revision_of`] skips it and nothing prunes it.
//! The core decides only its replicas (and that it be marked with the plan's
//! label, so the plan's Deployment cache holds it); its template, selector
//! and owners are never touched.
//!
//! - While the component has no stable revision and rolls out, it runs
//!   `max(0, R - ready(first revision))`: the rule the stable revision obeys
//!   in [`super::desired`].
//! - Rolled back (or not started), it is the stable capacity: `R`, and the
//!   first revision keeps its pods until the adopted Deployment has `R` ready
//!   ([`covers`], [`restored`]).
//! - Once the component has a stable revision of its own it is held at 0,
//!   scaled down only while the plan's own revisions have `R` ready pods (a
//!   GitOps tool that scales it up again is undone, never at a loss).

use super::reasons::{ConditionReason, EventReason};
use super::{EventIntent, EventType, Observation, Target, revisions_of};
use crate::api::{AdoptedStatus, ComponentStatus, Phase, ReleasePlanStatus};

/// Condition type: the hand-over of adopted Deployments (set only on plans
/// whose components adopt one).
pub const ADOPTED: &str = "Adopted";

/// The adopted Deployment of one component, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdoptedObs {
    /// The component that adopts it.
    pub component: String,
    /// The Deployment's name (`adopt.deployment`).
    pub deployment: String,
    /// What was found under that name.
    pub state: AdoptedState,
}

/// What was found under an adopted Deployment's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdoptedState {
    /// No Deployment of that name in the plan's namespace.
    Missing,
    /// A Deployment that cannot be adopted, and why (owned by a controller,
    /// one of a plan's revisions, marked by another plan).
    Refused(String),
    /// A Deployment that can be adopted.
    Found(Found),
}

/// An adoptable Deployment's counts and marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Found {
    /// `spec.replicas` (1 when unset, as the API server defaults it).
    pub replicas: i32,
    /// Ready pods (`status.readyReplicas`).
    pub ready: i32,
    /// Pods of any kind (`status.replicas`).
    pub pods: i32,
    /// It carries the plan's label (the plan's cache holds it).
    pub marked: bool,
    /// The replicas its annotation recorded when the plan adopted it.
    pub original: Option<i32>,
}

/// Mark the adopted Deployment as the plan's and scale it: server-side
/// applied with the plan label, the original-replicas annotation and
/// `spec.replicas` only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdoptIntent {
    /// The component that adopts it.
    pub component: String,
    /// The Deployment's name.
    pub deployment: String,
    /// Replicas it must have.
    pub replicas: i32,
    /// Its replicas when adopted (the annotation's value).
    pub original: i32,
}

impl AdoptIntent {
    /// Whether the observed Deployment already is as intended (no write).
    pub fn satisfied_by(&self, found: &Found) -> bool {
        found.marked && found.replicas == self.replicas && found.original == Some(self.original)
    }
}

/// The adoptable Deployment of a component, when it adopts one and it was found.
fn found<'a>(obs: &'a Observation, target: &Target, component: &str) -> Option<&'a Found> {
    target.component(component)?.adopt.as_ref()?;
    obs.adopted
        .iter()
        .find(|a| a.component == component)
        .and_then(|a| match &a.state {
            AdoptedState::Found(f) => Some(f),
            AdoptedState::Missing | AdoptedState::Refused(_) => None,
        })
}

/// The replicas of the component (the spec's, or its autoscaler's).
fn replicas(target: &Target, component: &str) -> i32 {
    target.component(component).map_or(0, |t| t.replicas.max(0))
}

/// Replicas the adopted Deployment of component `c` must have (see the module).
fn wanted(
    obs: &Observation,
    target: &Target,
    status: &ReleasePlanStatus,
    c: &ComponentStatus,
    f: &Found,
) -> i32 {
    let r = replicas(target, &c.name);
    let revs = revisions_of(obs, &c.name);
    let ready = |h: &str| revs.get(h).map_or(0, |rev| rev.ready.max(0));
    match (&c.stable_hash, status.phase) {
        (None, Phase::RollingOut) => {
            let new = c.current_hash.as_deref().map_or(0, ready);
            (r - new.min(r)).max(0)
        }
        // Not started, rolled back, or rolling back: it is the stable capacity.
        (None, _) => r,
        (Some(_), _) => {
            let own: i32 = revs
                .iter()
                .filter(|(h, _)| !crate::api::revision::is_baseline(h))
                .map(|(_, rev)| rev.ready.max(0))
                .sum();
            if own >= r { 0 } else { f.replicas.clamp(0, r) }
        }
    }
}

/// The adopted Deployments to mark and scale.
pub fn intents(obs: &Observation, target: &Target, status: &ReleasePlanStatus) -> Vec<AdoptIntent> {
    status
        .components
        .iter()
        .filter_map(|c| {
            let f = found(obs, target, &c.name)?;
            let a = obs.adopted.iter().find(|a| a.component == c.name)?;
            Some(AdoptIntent {
                component: c.name.clone(),
                deployment: a.deployment.clone(),
                replicas: wanted(obs, target, status, c, f),
                original: f.original.unwrap_or(f.replicas),
            })
        })
        .collect()
}

/// Records the hand-over of each adopting component in its status.
pub fn record(obs: &Observation, status: &mut ReleasePlanStatus, intents: &[AdoptIntent]) {
    let stable = status.phase == Phase::Stable;
    for c in &mut status.components {
        let Some(a) = obs.adopted.iter().find(|a| a.component == c.name) else {
            continue;
        };
        let mut s = AdoptedStatus {
            deployment: a.deployment.clone(),
            ..AdoptedStatus::default()
        };
        let prev = recorded(obs, &c.name);
        match &a.state {
            // Handed over, then deleted by its owner, as told: done it stays.
            AdoptedState::Missing
                if prev.is_some_and(|p| p.done && p.deployment == a.deployment) =>
            {
                s = prev.cloned().unwrap_or(s);
            }
            AdoptedState::Missing => {
                s.message = Some(format!(
                    "Deployment {} not found: the component rolls out like a new one",
                    a.deployment
                ));
            }
            AdoptedState::Refused(why) => {
                s.message = Some(format!(
                    "Deployment {} cannot be adopted: {why}; the component rolls out like a new one",
                    a.deployment
                ));
            }
            AdoptedState::Found(f) => {
                let want = intents
                    .iter()
                    .find(|i| i.component == c.name)
                    .map_or(f.replicas, |i| i.replicas);
                s.replicas = want;
                s.ready = f.ready;
                s.original_replicas = Some(f.original.unwrap_or(f.replicas));
                s.done = stable
                    && c.stable_hash.is_some()
                    && want == 0
                    && f.replicas == 0
                    && f.pods == 0;
            }
        }
        c.adopted = Some(s);
    }
}

/// The hand-over of `component` as the persisted status records it.
fn recorded<'a>(obs: &'a Observation, component: &str) -> Option<&'a AdoptedStatus> {
    obs.status
        .components
        .iter()
        .find(|p| p.name == component)
        .and_then(|p| p.adopted.as_ref())
}

/// Events of the hand-over: a Deployment adopted, handed over, or not
/// adoptable; each once, when the status record changes.
pub fn events(obs: &Observation, status: &ReleasePlanStatus) -> Vec<EventIntent> {
    let mut out = Vec::new();
    for c in &status.components {
        let (Some(next), Some(a)) = (
            c.adopted.as_ref(),
            obs.adopted.iter().find(|a| a.component == c.name),
        ) else {
            continue;
        };
        let prev = recorded(obs, &c.name);
        let news = |e: &dyn Fn(&AdoptedStatus) -> bool| prev.is_none_or(|p| !e(p));
        match &a.state {
            AdoptedState::Missing | AdoptedState::Refused(_) => {
                if prev.and_then(|p| p.message.as_ref()) != next.message.as_ref() {
                    out.push(EventIntent {
                        type_: EventType::Warning,
                        reason: if matches!(a.state, AdoptedState::Missing) {
                            EventReason::AdoptionTargetNotFound
                        } else {
                            EventReason::AdoptionRefused
                        },
                        message: next.message.clone().unwrap_or_default(),
                    });
                }
            }
            AdoptedState::Found(_) => {
                if news(&|p| p.message.is_none() && p.deployment == next.deployment) {
                    out.push(EventIntent {
                        type_: EventType::Normal,
                        reason: EventReason::AdoptionStarted,
                        message: format!(
                            "adopted Deployment {} ({} replicas): it is scaled down as component {}'s first revision has pods ready",
                            next.deployment,
                            next.original_replicas.unwrap_or(0),
                            c.name
                        ),
                    });
                }
                if next.done && news(&|p| p.done) {
                    out.push(EventIntent {
                        type_: EventType::Normal,
                        reason: EventReason::HandedOver,
                        message: format!(
                            "Deployment {} handed over to component {}: it runs no pod; delete it (or remove it from git)",
                            next.deployment, c.name
                        ),
                    });
                }
            }
        }
    }
    out
}

/// What the `Adopted` condition says (status, reason, message), on plans whose components adopt a Deployment:
/// the first problem, else whether every hand-over is done.
pub fn condition(
    obs: &Observation,
    status: &ReleasePlanStatus,
) -> Option<(bool, ConditionReason, String)> {
    let records: Vec<(&str, &AdoptedStatus, &AdoptedState)> = status
        .components
        .iter()
        .filter_map(|c| {
            let a = obs.adopted.iter().find(|a| a.component == c.name)?;
            Some((c.name.as_str(), c.adopted.as_ref()?, &a.state))
        })
        .collect();
    if records.is_empty() {
        return None;
    }
    let problem = |missing: bool| {
        records.iter().find(|(_, s, st)| match st {
            AdoptedState::Missing => missing && !s.done,
            AdoptedState::Refused(_) => !missing,
            AdoptedState::Found(_) => false,
        })
    };
    let (ok, reason, message) = if let Some((_, s, _)) = problem(true) {
        (
            false,
            ConditionReason::AdoptionTargetNotFound,
            s.message.clone().unwrap_or_default(),
        )
    } else if let Some((_, s, _)) = problem(false) {
        (
            false,
            ConditionReason::AdoptionRefused,
            s.message.clone().unwrap_or_default(),
        )
    } else if records.iter().all(|(_, s, _)| s.done) {
        let names: Vec<&str> = records
            .iter()
            .map(|(_, s, _)| s.deployment.as_str())
            .collect();
        (
            true,
            ConditionReason::HandedOver,
            format!("handed over: {} runs no pod; delete it", names.join(", ")),
        )
    } else {
        let parts: Vec<String> = records
            .iter()
            .map(|(c, s, _)| {
                format!(
                    "{} at {} replicas ({} ready) for component {c}",
                    s.deployment, s.replicas, s.ready
                )
            })
            .collect();
        (
            false,
            ConditionReason::HandingOver,
            format!("handing over: {}", parts.join("; ")),
        )
    };
    Some((ok, reason, message))
}

/// Whether a component's adopted Deployment lets the first revision go (in
/// a rollback of the first rollout, where nothing else is stable): it has
/// the component's replicas ready. True when the component has a stable
/// revision, adopts nothing, or its Deployment was not found.
pub(crate) fn covers(obs: &Observation, target: &Target, c: &ComponentStatus) -> bool {
    if c.stable_hash.is_some() {
        return true;
    }
    found(obs, target, &c.name).is_none_or(|f| f.ready >= replicas(target, &c.name))
}

/// Whether a rollback of the first rollout has given the adopted Deployment
/// its capacity back: [`covers`], and it is scaled to the component's replicas.
pub(crate) fn restored(obs: &Observation, target: &Target, c: &ComponentStatus) -> bool {
    if c.stable_hash.is_some() {
        return true;
    }
    found(obs, target, &c.name).is_none_or(|f| {
        let r = replicas(target, &c.name);
        f.ready >= r && f.replicas == r
    })
}
