//! DaemonSet components: one DaemonSet per revision, the nodes split between
//! them by node affinity; the canary is a share of the nodes.
//!
//! The new revision's DaemonSet runs only on the canary nodes
//! (`metadata.name In [...]`), the stable one everywhere else
//! (`metadata.name NotIn [...]`), so a node that joins mid-rollout gets the
//! stable revision until promotion. Kubernetes' DaemonSet controller does
//! the moves: a node leaving a DaemonSet's affinity loses its pod, a node
//! entering gains one. Both DaemonSets use `updateStrategy: OnDelete`, so
//! changing the node lists never restarts a pod on a node it stays on.
//!
//! Nodes move in batches the size of `maxUnavailable`, counting every
//! eligible node without a ready pod of its revision; a step's weight is
//! the share of eligible nodes on the new revision. Eligible nodes are those
//! the component's pods run on and those the DaemonSets' own controller
//! counts (`desiredNumberScheduled`): the operator never evaluates node
//! selectors, affinities or taints itself.

use super::{ComponentStatus, Observation, Target, TemplateSource, Templates};
use crate::api::revision::deployment_name;
use crate::api::workload::WorkloadKind;
use std::collections::{BTreeMap, BTreeSet};

/// Which nodes a revision's DaemonSet may run on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum NodeScope {
    /// Every node its template allows.
    #[default]
    All,
    /// Only these (the canary's).
    Only(Vec<String>),
    /// All but these (the stable one during a rollout).
    Except(Vec<String>),
}

/// A revision's DaemonSet as observed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DaemonSetObs {
    /// Its name.
    pub name: String,
    /// Its component (label).
    pub component: String,
    /// Its revision (label).
    pub hash: String,
    /// The nodes its affinity allows.
    pub nodes: NodeScope,
    /// `status.desiredNumberScheduled`: the nodes its controller runs it on.
    pub scheduled: i32,
    /// Its controller has seen its latest spec (`status.observedGeneration`),
    /// so `scheduled` counts for it.
    pub counted: bool,
}

/// Write one revision's DaemonSet (created when missing).
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonSetIntent {
    /// DaemonSet name.
    pub name: String,
    /// Component.
    pub component: String,
    /// Revision.
    pub hash: String,
    /// That revision's template.
    pub template: TemplateSource,
    /// The nodes it may run on.
    pub nodes: NodeScope,
}

/// Whether the component runs in DaemonSets: by the spec, or, once the spec
/// no longer has it, by what is observed.
pub fn is_daemon(obs: &Observation, target: &Target, component: &str) -> bool {
    super::stateful::kind_of(obs, target, component) == WorkloadKind::DaemonSet
}

/// The eligible nodes of a component, sorted: those its pods run on (not
/// terminating) and those its DaemonSets are limited to.
pub fn eligible(seen: &super::stateful::WorkloadObs, component: &str) -> Vec<String> {
    let mut nodes: BTreeSet<String> = seen
        .pods
        .iter()
        .filter(|p| p.component == component && !p.terminating)
        .filter_map(|p| p.node.clone())
        .collect();
    for d in seen.daemon_sets.iter().filter(|d| d.component == component) {
        if let NodeScope::Only(only) = &d.nodes {
            nodes.extend(only.iter().cloned());
        }
    }
    nodes.into_iter().collect()
}

/// How many nodes the component runs on: the eligible nodes seen, or what
/// its DaemonSets' controller counts, whichever is more (a node whose pod is
/// not created yet is counted all the same).
///
/// Before its DaemonSets' controller has counted them (none exists yet, or
/// one has a spec it has not seen), at least one: a first release then waits
/// for a ready pod instead of being promoted with none.
pub fn node_count(seen: &super::stateful::WorkloadObs, component: &str) -> i32 {
    let sets: Vec<&DaemonSetObs> = seen
        .daemon_sets
        .iter()
        .filter(|d| d.component == component)
        .collect();
    let scheduled: i32 = sets.iter().map(|d| d.scheduled.max(0)).sum();
    let counted = !sets.is_empty() && sets.iter().all(|d| d.counted);
    i32::try_from(eligible(seen, component).len())
        .unwrap_or(i32::MAX)
        .max(scheduled)
        .max(i32::from(!counted))
}

/// The node each ready pod of the component is on, by revision.
fn ready_nodes<'a>(
    obs: &'a Observation,
    component: &'a str,
) -> BTreeMap<&'a str, BTreeSet<&'a str>> {
    let mut out: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for p in obs
        .workloads
        .pods
        .iter()
        .filter(|p| p.component == component && p.ready && !p.terminating)
    {
        if let Some(node) = &p.node {
            out.entry(p.hash.as_str())
                .or_default()
                .insert(node.as_str());
        }
    }
    out
}

/// The DaemonSets of one component, from the nodes each revision wants
/// (`want`), and the DaemonSets to delete (revisions that want none).
pub fn intents(
    obs: &Observation,
    target: &Target,
    c: &ComponentStatus,
    want: &BTreeMap<String, i32>,
    templates: &Templates,
) -> (Vec<DaemonSetIntent>, Vec<String>) {
    let observed: Vec<&DaemonSetObs> = obs
        .workloads
        .daemon_sets
        .iter()
        .filter(|d| d.component == c.name)
        .collect();
    let mut scopes: Vec<(String, NodeScope)> = Vec::new();
    match (&c.current_hash, &c.stable_hash) {
        // Both revisions wanted (the stable one perhaps on no node at the
        // last step): the nodes move in batches, to the last one.
        (Some(cur), Some(st))
            if cur != st && want.get(cur).is_some_and(|w| *w > 0) && want.contains_key(st) =>
        {
            let canary = canary_nodes(obs, target, c, cur, st, want[cur], &observed);
            if !canary.is_empty() {
                scopes.push((cur.clone(), NodeScope::Only(canary.clone())));
            }
            scopes.push((
                st.clone(),
                if canary.is_empty() {
                    NodeScope::All
                } else {
                    NodeScope::Except(canary)
                },
            ));
        }
        _ => {
            // One revision runs everywhere: the newest one wanted.
            let newest = [&c.current_hash, &c.stable_hash]
                .into_iter()
                .flatten()
                .find(|h| want.contains_key(*h));
            if let Some(h) = newest {
                scopes.push((h.clone(), NodeScope::All));
            }
        }
    }
    let in_spec = target.component(&c.name);
    let sets = scopes
        .into_iter()
        .map(|(hash, nodes)| {
            let template = match (in_spec, templates.get(&c.name)) {
                (Some(t), Some(tpl)) if t.hash == hash => {
                    TemplateSource::Spec(std::sync::Arc::clone(tpl))
                }
                _ => TemplateSource::Existing,
            };
            let name = observed.iter().find(|d| d.hash == hash).map_or_else(
                || deployment_name(&obs.plan, &c.name, &hash),
                |d| d.name.clone(),
            );
            DaemonSetIntent {
                name,
                component: c.name.clone(),
                hash,
                template,
                nodes,
            }
        })
        .collect::<Vec<_>>();
    let delete = observed
        .iter()
        .filter(|d| !sets.iter().any(|s| s.name == d.name))
        .map(|d| d.name.clone())
        .collect();
    (sets, delete)
}

/// The canary's nodes: those it has, plus the next eligible ones (by name)
/// up to the step's share, no more at once than `maxUnavailable` allows
/// (every eligible node without a ready pod of its revision counts).
fn canary_nodes(
    obs: &Observation,
    target: &Target,
    c: &ComponentStatus,
    cur: &str,
    st: &str,
    share: i32,
    observed: &[&DaemonSetObs],
) -> Vec<String> {
    let had: BTreeSet<String> = observed
        .iter()
        .filter(|d| d.hash == cur)
        .filter_map(|d| match &d.nodes {
            NodeScope::Only(n) => Some(n.iter().cloned()),
            _ => None,
        })
        .flatten()
        .collect();
    let nodes = eligible(&obs.workloads, &c.name);
    let ready = ready_nodes(obs, &c.name);
    let ready_on = |hash: &str, node: &str| ready.get(hash).is_some_and(|n| n.contains(node));
    let unavailable = nodes
        .iter()
        .filter(|n| {
            let on = if had.contains(*n) { cur } else { st };
            !ready_on(on, n)
        })
        .count();
    let max = target
        .component(&c.name)
        .and_then(|t| t.daemon_set.clone())
        .unwrap_or_default()
        .max_unavailable(i32::try_from(nodes.len()).unwrap_or(i32::MAX));
    let budget = usize::try_from(max)
        .unwrap_or(1)
        .saturating_sub(unavailable);
    let more = usize::try_from(share)
        .unwrap_or(0)
        .saturating_sub(had.len())
        .min(budget);
    let mut canary: Vec<String> = had.into_iter().collect();
    canary.extend(
        nodes
            .into_iter()
            .filter(|n| !canary.contains(n))
            .take(more)
            .collect::<Vec<_>>(),
    );
    canary.sort();
    canary
}
