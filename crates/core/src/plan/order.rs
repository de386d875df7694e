//! Components in dependency order (`components[].dependsOn`), rolled back in
//! reverse.
//!
//! One `status.currentStep` still drives the plan: it runs over a *timeline*
//! of global steps. Each changing component starts at an offset, the latest
//! point any of its dependencies must reach: a dependency's offset plus the
//! index of the named step plus one (that step done), or plus the number of
//! steps plus one (its final step to 100% done). At global step `g` a
//! component is at its local step `g - offset`: before 0 it has not started
//! (its stable revision keeps every pod), past its steps it stays at 100%.
//! The global step is done when every component's local step is done. A plan
//! without `dependsOn` has every offset 0, and the timeline is today's steps.
//!
//! A dependency whose template did not change is already promoted: it holds
//! nothing up. In a rollback a started component returns to stable only once
//! every component that started after it is back on stable and ready; that is
//! read from the observation alone, so a restart mid-rollback goes on in order.

use super::steps::{CurrentStep, Step, in_force};
use super::{Observation, SpecError, Target};
use crate::api::{ComponentStatus, Phase, ReleasePlanSpec, ReleasePlanStatus};
use std::collections::BTreeMap;
use std::time::Duration;

/// A dependency as the core reads it: the component, and the index of the
/// step it must have finished (`None`: fully promoted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dep {
    /// The component waited for.
    pub component: String,
    /// Index in `strategy.steps` of the named step; `None` for fully promoted.
    pub step: Option<usize>,
}

/// A cycle of `dependsOn` through `start`, as the names along it from
/// `start` back to it (`[a, c, b, a]`: a depends on c, c on b, b on a);
/// `None` when `start` is on none. The admission rule refuses every cycle
/// but cannot name one (CEL cannot walk a graph); this names it for the
/// operator's condition and for `lint`.
pub fn cycle_through(spec: &ReleasePlanSpec, start: &str) -> Option<Vec<String>> {
    let deps = |name: &str| -> Vec<&str> {
        spec.components
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.depends_on.iter().map(|d| d.component.as_str()).collect())
            .unwrap_or_default()
    };
    // Depth-first, each name once: at most 16 components, 8 edges each.
    let mut path: Vec<&str> = vec![start];
    let mut next: Vec<std::vec::IntoIter<&str>> = vec![deps(start).into_iter()];
    let mut seen = std::collections::BTreeSet::from([start]);
    while let Some(it) = next.last_mut() {
        match it.next() {
            Some(n) if n == start => {
                path.push(start);
                return Some(path.into_iter().map(str::to_string).collect());
            }
            Some(n) if seen.insert(n) => {
                path.push(n);
                next.push(deps(n).into_iter());
            }
            Some(_) => {}
            None => {
                next.pop();
                path.pop();
            }
        }
    }
    None
}

/// Checks `dependsOn` as the CRD's rules do (for objects stored before those
/// rules existed) and resolves named steps to their index, by component.
pub fn check(spec: &ReleasePlanSpec) -> Result<BTreeMap<String, Vec<Dep>>, SpecError> {
    let steps = &spec.strategy.steps;
    for (i, s) in steps.iter().enumerate() {
        if let Some(n) = &s.name
            && steps[..i].iter().any(|o| o.name.as_ref() == Some(n))
        {
            return Err(SpecError::new(
                format!("spec.strategy.steps[{i}].name"),
                format!("duplicate step name {n:?}"),
            ));
        }
    }
    let mut out = BTreeMap::new();
    for (i, c) in spec.components.iter().enumerate() {
        if !c.depends_on.is_empty() && spec.strategy.blue_green.is_some() {
            return Err(SpecError::new(
                format!("spec.components[{i}].dependsOn"),
                crate::api::order::BLUE_GREEN_MESSAGE,
            ));
        }
        let mut deps = Vec::new();
        for (j, d) in c.depends_on.iter().enumerate() {
            let field = format!("spec.components[{i}].dependsOn[{j}]");
            if d.component == c.name {
                return Err(SpecError::new(
                    format!("{field}.component"),
                    "a component cannot depend on itself (a cycle)",
                ));
            }
            if !spec.components[..i].iter().any(|o| o.name == d.component) {
                let why = if !spec.components.iter().any(|o| o.name == d.component) {
                    "is not one of spec.components".to_string()
                } else if let Some(path) = cycle_through(spec, &c.name) {
                    format!(
                        "must be listed before this one in spec.components, and dependsOn forms a cycle: {}",
                        path.join(" -> ")
                    )
                } else {
                    "must be listed before this one in spec.components (list components in dependency order): cycles are refused".to_string()
                };
                return Err(SpecError::new(
                    format!("{field}.component"),
                    format!("{:?} {why}", d.component),
                ));
            }
            let step = match &d.step {
                None => None,
                Some(name) => Some(
                    steps
                        .iter()
                        .position(|s| s.name.as_ref() == Some(name))
                        .ok_or_else(|| {
                            SpecError::new(
                                format!("{field}.step"),
                                format!(
                                    "{name:?} is not the name of a step in spec.strategy.steps"
                                ),
                            )
                        })?,
                ),
            };
            deps.push(Dep {
                component: d.component.clone(),
                step,
            });
        }
        out.insert(c.name.clone(), deps);
    }
    Ok(out)
}

/// Where one component is at a global step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    /// Waiting for its dependencies: its stable revision serves.
    NotStarted,
    /// At this index of `strategy.steps`.
    At(usize),
    /// Past its steps: the new revision at 100%.
    Final,
}

/// The start offset of every component of a rollout, and the number of
/// global steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    offsets: BTreeMap<String, i32>,
    changing: Vec<String>,
    steps: i32,
    total: i32,
}

impl Timeline {
    /// The timeline of a rollout whose component records are `components`
    /// (only components that change wait or are waited for).
    pub fn of(target: &Target, components: &[ComponentStatus]) -> Timeline {
        Timeline::build(
            target.steps.len(),
            target
                .components
                .iter()
                .map(|t| (t.name.as_str(), t.depends_on.as_slice())),
            components,
        )
    }

    /// The timeline of `steps` steps for components (in spec order, with what
    /// each depends on) whose rollout is recorded in `components`.
    fn build<'a>(
        steps: usize,
        spec: impl Iterator<Item = (&'a str, &'a [Dep])> + Clone,
        components: &[ComponentStatus],
    ) -> Timeline {
        let steps = i32::try_from(steps).unwrap_or(i32::MAX);
        let changing: Vec<String> = spec
            .clone()
            .filter(|(name, _)| {
                components
                    .iter()
                    .any(|c| c.name == *name && c.is_changing())
            })
            .map(|(name, _)| name.to_string())
            .collect();
        let mut offsets: BTreeMap<String, i32> = BTreeMap::new();
        // Spec order: a dependency is always listed (and so placed) first.
        for (name, deps) in spec {
            let offset = if changing.iter().any(|c| c == name) {
                deps.iter()
                    .filter(|d| changing.contains(&d.component))
                    .filter_map(|d| {
                        let point = d.step.and_then(|i| i32::try_from(i).ok()).unwrap_or(steps);
                        Some(offsets.get(&d.component)?.saturating_add(point + 1))
                    })
                    .max()
                    .unwrap_or(0)
            } else {
                0
            };
            offsets.insert(name.to_string(), offset);
        }
        let last = changing
            .iter()
            .filter_map(|c| offsets.get(c))
            .copied()
            .max()
            .unwrap_or(0);
        Timeline {
            offsets,
            changing,
            steps,
            total: last.saturating_add(steps),
        }
    }

    /// The number of global steps: `status.currentStep` equals it during the
    /// final step, where every component is at 100%.
    pub fn total(&self) -> i32 {
        self.total
    }

    /// No component waits: the timeline is the spec's steps.
    pub fn flat(&self) -> bool {
        self.offsets.values().all(|o| *o == 0)
    }

    /// The global step a component starts at.
    pub fn offset(&self, component: &str) -> i32 {
        self.offsets.get(component).copied().unwrap_or(0)
    }

    /// Where `component` is at global step `g`.
    pub fn local(&self, component: &str, g: i32) -> Local {
        let l = g.saturating_sub(self.offset(component));
        if l < 0 {
            Local::NotStarted
        } else if l >= self.steps {
            Local::Final
        } else {
            usize::try_from(l).map_or(Local::Final, Local::At)
        }
    }

    /// The components this rollout changes, in spec order.
    pub fn changing(&self) -> &[String] {
        &self.changing
    }
}

/// The number of global steps of the rollout recorded in `components`.
pub fn total(target: &Target, components: &[ComponentStatus]) -> i32 {
    Timeline::of(target, components).total()
}

/// The timeline of a plan from its spec alone and its status's component
/// records (what the plugin shows); `None` when its steps or `dependsOn`
/// cannot be run.
pub fn timeline_of(spec: &ReleasePlanSpec, components: &[ComponentStatus]) -> Option<Timeline> {
    let steps = super::steps::strategy_steps(&spec.strategy).ok()?;
    let deps = check(spec).ok()?;
    Some(Timeline::build(
        steps.len(),
        spec.components.iter().map(|c| {
            (
                c.name.as_str(),
                deps.get(&c.name).map_or(&[][..], Vec::as_slice),
            )
        }),
        components,
    ))
}

/// Where `component` is at the status's step (today's step when rolling out
/// without `dependsOn`).
pub fn local(target: &Target, s: &ReleasePlanStatus, component: &str) -> Local {
    Timeline::of(target, &s.components).local(component, s.current_step)
}

/// The index into `strategy.steps` whose settings apply to `component`
/// (`usize::MAX` when none does: not started, or past its steps).
pub fn step_index(target: &Target, s: &ReleasePlanStatus, component: &str) -> usize {
    match local(target, s, component) {
        Local::At(i) => i,
        Local::NotStarted | Local::Final => usize::MAX,
    }
}

/// The weight the status's step sets on `component`'s new revision: 0 until
/// it starts, 100 past its steps and once stable.
pub fn weight(target: &Target, s: &ReleasePlanStatus, component: &str) -> i32 {
    match s.phase {
        Phase::Stable => 100,
        Phase::Pending | Phase::RollbackInProgress | Phase::RolledBack => 0,
        Phase::RollingOut => match local(target, s, component) {
            Local::NotStarted => 0,
            Local::Final => 100,
            Local::At(i) => in_force(&target.steps, i, Step::weight).unwrap_or(0),
        },
    }
}

/// The plan's weight with `dependsOn`: the lowest weight of the changing
/// components (0 while one has not started). `None` for a flat timeline, whose
/// weight is the step's.
pub fn plan_weight(target: &Target, s: &ReleasePlanStatus) -> Option<i32> {
    let tl = Timeline::of(target, &s.components);
    if tl.flat() || s.phase != Phase::RollingOut {
        return None;
    }
    tl.changing().iter().map(|c| weight(target, s, c)).min()
}

/// The step the rollout is at, with what it waits for: with `dependsOn`, the
/// steps of every started component at once (a promotion-held step holds
/// it, the longest pause times it).
pub fn current(target: &Target, s: &ReleasePlanStatus, age: Duration) -> CurrentStep {
    current_at(target, &s.components, s.current_step, age)
}

/// [`current`] at global step `g` of the rollout recorded in `components`.
pub fn current_at(
    target: &Target,
    components: &[ComponentStatus],
    g: i32,
    age: Duration,
) -> CurrentStep {
    let tl = Timeline::of(target, components);
    if g >= tl.total() {
        return CurrentStep::Final;
    }
    if tl.flat() {
        return target.current_step(usize::try_from(g).unwrap_or(usize::MAX), age);
    }
    let steps: Vec<CurrentStep> = tl
        .changing()
        .iter()
        .filter_map(|c| match tl.local(c, g) {
            Local::NotStarted => None,
            Local::Final => Some(CurrentStep::Setting),
            Local::At(i) => Some(target.current_step(i, age)),
        })
        .collect();
    if steps.iter().any(CurrentStep::holds_until_promoted) {
        return CurrentStep::UntilPromoted;
    }
    if let Some(remaining) = steps.iter().filter_map(CurrentStep::ends_in).max() {
        return CurrentStep::Pause { remaining };
    }
    steps
        .iter()
        .find(|c| matches!(c, CurrentStep::SetWeight(_)))
        .or_else(|| steps.first())
        .copied()
        .unwrap_or(CurrentStep::Setting)
}

/// The components `component` waits for, as `status.components[].waitingFor`
/// shows them: while rolling out, the dependencies that have not reached its
/// start; while rolling back, the components that started after it and are
/// not back on stable yet.
pub fn waiting_for(
    obs: &Observation,
    target: &Target,
    s: &ReleasePlanStatus,
    component: &str,
) -> Vec<String> {
    match s.phase {
        Phase::RollingOut => {
            let tl = Timeline::of(target, &s.components);
            if tl.local(component, s.current_step) != Local::NotStarted {
                return Vec::new();
            }
            let Some(t) = target.component(component) else {
                return Vec::new();
            };
            t.depends_on
                .iter()
                .filter(|d| tl.changing().contains(&d.component))
                .filter(|d| {
                    let point = d.step.and_then(|i| i32::try_from(i).ok());
                    match tl.local(&d.component, s.current_step) {
                        Local::NotStarted => true,
                        Local::At(i) => point.is_none_or(|p| i32::try_from(i).unwrap_or(0) <= p),
                        // Past its steps: its final step must be done too.
                        Local::Final => {
                            point.is_none() && s.current_step - tl.offset(&d.component) <= tl.steps
                        }
                    }
                })
                .map(|d| d.component.clone())
                .collect()
        }
        Phase::RollbackInProgress => rollback_waits_on(obs, target, s, component),
        Phase::Pending | Phase::Stable | Phase::RolledBack => Vec::new(),
    }
}

/// The started components that started after `component` and are not back on
/// their stable revision yet: `component` holds its pods (and routes) until
/// they are. Empty for a flat timeline, and for a component that had not
/// started when the rollback began.
pub fn rollback_waits_on(
    obs: &Observation,
    target: &Target,
    s: &ReleasePlanStatus,
    component: &str,
) -> Vec<String> {
    if s.phase != Phase::RollbackInProgress {
        return Vec::new();
    }
    let tl = Timeline::of(target, &s.components);
    if tl.flat() || !tl.changing().iter().any(|c| c == component) {
        return Vec::new();
    }
    let started = |c: &str| tl.local(c, s.current_step) != Local::NotStarted;
    if !started(component) {
        return Vec::new();
    }
    let mine = tl.offset(component);
    tl.changing()
        .iter()
        .filter(|c| tl.offset(c) > mine && started(c))
        .filter(|c| {
            s.components
                .iter()
                .find(|r| &r.name == *c)
                .is_some_and(|r| !super::desired::component_rolled_back(obs, target, r))
        })
        .cloned()
        .collect()
}
