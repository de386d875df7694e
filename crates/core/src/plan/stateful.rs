//! StatefulSet components: one StatefulSet per component, its canary the
//! highest ordinals, moved to the new template by its partition.
//!
//! The rest of the core reasons in replicas per revision, as for
//! Deployments; here those counts become one object: the template to run
//! (the newest revision that wants pods), the replicas (their sum) and the
//! partition (the ordinals below it keep the older template). The counts
//! per revision are read from the pods (their revision label), never from
//! the StatefulSet's own revision names, so a rollback, a supersede and a
//! pod recreated by hand are all counted the same way.
//!
//! A StatefulSet whose pods start one at a time (`OrderedReady`) never moves
//! past a pod that is not Ready, even after its template is reverted
//! (kubernetes/kubernetes#67250, "forced rollback"). Such a pod, on a
//! revision the set is moving away from, is deleted here: it serves nothing
//! (not Ready), its claims stay, and the StatefulSet controller recreates it
//! at once with the same name and volumes on the template it now runs.

use super::{Observation, RevisionObs, Target, TemplateSource, Templates};
use crate::api::ComponentStatus;
use crate::api::workload::{StatefulSetSettings, WorkloadKind};
use std::collections::BTreeMap;

/// A component's StatefulSet as observed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatefulSetObs {
    /// Its name.
    pub name: String,
    /// Its component (label).
    pub component: String,
    /// The revision its template runs (the template's revision label).
    pub hash: Option<String>,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `spec.updateStrategy.rollingUpdate.partition`.
    pub partition: i32,
}

/// One pod of a StatefulSet component.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkloadPod {
    /// Pod name (`<statefulset>-<ordinal>`).
    pub name: String,
    /// Its component (label).
    pub component: String,
    /// Its revision (label).
    pub hash: String,
    /// Its ordinal, from its name.
    pub ordinal: Option<i32>,
    /// Its `Ready` condition is True.
    pub ready: bool,
    /// It is being deleted.
    pub terminating: bool,
    /// The node it runs on (`spec.nodeName`), once scheduled.
    pub node: Option<String>,
}

/// What the controller saw of the StatefulSet and DaemonSet components:
/// the objects and their pods.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkloadObs {
    /// The plan's StatefulSets.
    pub stateful_sets: Vec<StatefulSetObs>,
    /// The plan's DaemonSets.
    pub daemon_sets: Vec<super::daemon::DaemonSetObs>,
    /// The pods of its StatefulSet and DaemonSet components.
    pub pods: Vec<WorkloadPod>,
}

/// Write one component's StatefulSet (created when missing).
#[derive(Debug, Clone, PartialEq)]
pub struct StatefulSetIntent {
    /// StatefulSet name.
    pub name: String,
    /// Component.
    pub component: String,
    /// The revision its template runs.
    pub hash: String,
    /// That revision's template.
    pub template: TemplateSource,
    /// Pods in all.
    pub replicas: i32,
    /// Ordinals below it keep the older revision.
    pub partition: i32,
    /// The spec's StatefulSet settings (immutable parts included).
    pub settings: StatefulSetSettings,
    /// The pods it wants of each revision (for status).
    pub revisions: BTreeMap<String, i32>,
}

/// The pod count and ready pods of each revision of each StatefulSet and
/// DaemonSet component, from its pods: what the rest of the core reads as
/// revisions.
pub fn revisions(seen: &WorkloadObs) -> Vec<RevisionObs> {
    let mut by: BTreeMap<(&str, &str), RevisionObs> = BTreeMap::new();
    for p in &seen.pods {
        // Named after the component's StatefulSet, or the revision's
        // DaemonSet (none while it goes).
        let set = seen
            .stateful_sets
            .iter()
            .find(|s| s.component == p.component);
        let daemons = seen
            .daemon_sets
            .iter()
            .filter(|d| d.component == p.component);
        let name = match set {
            Some(s) => s.name.clone(),
            None if daemons.clone().next().is_some() => daemons
                .clone()
                .find(|d| d.hash == p.hash)
                .map(|d| d.name.clone())
                .unwrap_or_default(),
            None => continue,
        };
        let r = by
            .entry((p.component.as_str(), p.hash.as_str()))
            .or_insert_with(|| RevisionObs {
                name,
                component: p.component.clone(),
                hash: p.hash.clone(),
                replicas: 0,
                ready: 0,
                current: 0,
                created: None,
            });
        r.replicas += 1;
        r.current += 1;
        if p.ready && !p.terminating {
            r.ready += 1;
        }
    }
    by.into_values().collect()
}

/// Whether the component runs in a StatefulSet: by the spec, or, once the
/// spec no longer has it, by what is observed.
pub fn is_stateful(obs: &Observation, target: &Target, component: &str) -> bool {
    kind_of(obs, target, component) == WorkloadKind::StatefulSet
}

/// What runs a component's pods: the spec's `kind`, or, once the spec no
/// longer has the component, what is observed of it.
pub fn kind_of(obs: &Observation, target: &Target, component: &str) -> WorkloadKind {
    if let Some(c) = target.component(component) {
        return c.kind;
    }
    let seen = &obs.workloads;
    if seen.stateful_sets.iter().any(|s| s.component == component) {
        WorkloadKind::StatefulSet
    } else if seen.daemon_sets.iter().any(|d| d.component == component) {
        WorkloadKind::DaemonSet
    } else {
        WorkloadKind::Deployment
    }
}

/// The StatefulSet of one component, from the pods each revision wants
/// (`want`, as for Deployments: the stable revision gives up exactly the
/// ordinals the new one takes, never more).
pub fn intent(
    obs: &Observation,
    target: &Target,
    c: &ComponentStatus,
    want: &BTreeMap<String, i32>,
    templates: &Templates,
) -> Option<StatefulSetIntent> {
    let observed = obs
        .workloads
        .stateful_sets
        .iter()
        .find(|s| s.component == c.name);
    let name = observed.map_or_else(
        || crate::api::workload::stateful_set_name(&obs.plan, &c.name),
        |s| s.name.clone(),
    );
    let wanted = |h: &Option<String>| {
        h.clone()
            .filter(|h| want.get(h.as_str()).is_some_and(|w| *w > 0))
    };
    // The newest revision that wants pods runs the template.
    let (hash, replicas) = match (wanted(&c.current_hash), wanted(&c.stable_hash)) {
        (Some(h), _) | (None, Some(h)) => (h, want.values().sum::<i32>()),
        // Nothing wanted: what exists goes to zero, on the template it has.
        (None, None) => {
            let o = observed?;
            let h = o.hash.clone().or_else(|| c.stable_hash.clone())?;
            (h, 0)
        }
    };
    let on_new = want.get(&hash).copied().unwrap_or(0);
    let mut partition = (replicas - on_new).max(0);
    // Pods of a revision neither running nor kept (a superseded rollout)
    // go to the new template, not back: the partition moves below them.
    let kept = c.stable_hash.as_deref().filter(|st| *st != hash);
    for p in pods_of(obs, &c.name) {
        if p.hash != hash
            && Some(p.hash.as_str()) != kept
            && let Some(o) = p.ordinal
        {
            partition = partition.min(o.max(0));
        }
    }
    let in_spec = target.component(&c.name);
    let template = match (in_spec, templates.get(&c.name)) {
        (Some(t), Some(tpl)) if t.hash == hash => TemplateSource::Spec(std::sync::Arc::clone(tpl)),
        _ => TemplateSource::Existing,
    };
    let settings = in_spec
        .and_then(|t| t.stateful_set.clone())
        .unwrap_or_default();
    Some(StatefulSetIntent {
        name,
        component: c.name.clone(),
        hash,
        template,
        replicas,
        partition,
        settings,
        revisions: want.clone(),
    })
}

/// The pods to delete so the StatefulSet can move: not Ready, not already
/// going, at or above the partition and on a revision the set is moving
/// away from (see the module's comment). A new revision's own pod that is
/// not Ready is never deleted: the crash-loop checks judge it.
pub fn stuck_pods(obs: &Observation, intent: &StatefulSetIntent) -> Vec<String> {
    pods_of(obs, &intent.component)
        .filter(|p| {
            p.hash != intent.hash
                && !p.ready
                && !p.terminating
                && p.ordinal.is_some_and(|o| o >= intent.partition)
        })
        .map(|p| p.name.clone())
        .collect()
}

fn pods_of<'a>(obs: &'a Observation, component: &'a str) -> impl Iterator<Item = &'a WorkloadPod> {
    obs.workloads
        .pods
        .iter()
        .filter(move |p| p.component == component)
}

/// The ordinal of a pod of StatefulSet `set`: the number after `<set>-`.
pub fn ordinal(set: &str, pod: &str) -> Option<i32> {
    pod.strip_prefix(set)?.strip_prefix('-')?.parse().ok()
}
