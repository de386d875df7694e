//! What the watches have seen ([`Store`]): the plans, their revision
//! Deployments, their Events and the gate values seen since the start, and
//! how each watch event changes it (`Store::apply`), with the note to
//! announce to the open pages.

use super::model::{Detail, EventRow, GatePoint, Row, event_row, row};
use crate::api::{LABEL_PLAN, ReleasePlan};
use crate::cli::error::chain;
use crate::cli::view::Live;
use crate::cli::view::history_view;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Event as KubeEvent;
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Resource, ResourceExt};
use std::collections::{BTreeMap, VecDeque};

/// Events kept per plan (newest).
const EVENTS_KEPT: usize = 50;
/// Gate values kept per gate (newest), for the chart.
const GATE_POINTS_KEPT: usize = 120;

/// A plan, or an object of a plan: (namespace, name).
pub(super) type Key = (String, String);

/// What the watches have seen: the page's whole model.
#[derive(Default, Debug)]
pub struct Store {
    plans: BTreeMap<Key, ReleasePlan>,
    /// Revision Deployments by (namespace, Deployment name).
    deployments: BTreeMap<Key, Deployment>,
    /// StatefulSets of StatefulSet components by (namespace, name).
    stateful_sets: BTreeMap<Key, StatefulSet>,
    /// DaemonSets of DaemonSet components by (namespace, name).
    daemon_sets: BTreeMap<Key, DaemonSet>,
    /// Events by plan, then by Event name.
    events: BTreeMap<Key, BTreeMap<String, EventRow>>,
    /// Gate values seen since the dashboard started, by plan and gate.
    gate_points: BTreeMap<Key, BTreeMap<String, VecDeque<GatePoint>>>,
    /// The last error of each watch (`releaseplans`, `deployments`, `events`).
    errors: BTreeMap<&'static str, String>,
}

/// A change announced to the open pages.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Note {
    /// This plan (or one of its Deployments or Events) changed.
    Changed(Key),
    /// Everything may have changed (a watch restarted, an error came or went).
    Resync,
}

/// How a watched kind goes into the [`Store`].
pub(super) trait Tracked:
    Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + 'static
{
    /// The watch's name in errors.
    const KIND: &'static str;
    /// Stores or replaces the object; the plan it belongs to.
    fn upsert(self, store: &mut Store) -> Option<Key>;
    /// Forgets the object; the plan it belonged to.
    fn remove(&self, store: &mut Store) -> Option<Key>;
    /// Forgets every object of this kind (before a relist).
    fn clear(store: &mut Store);
}

impl Tracked for ReleasePlan {
    const KIND: &'static str = "releaseplans";
    fn upsert(mut self, store: &mut Store) -> Option<Key> {
        self.metadata.managed_fields = None;
        let key = (self.namespace().unwrap_or_default(), self.name_any());
        record_gates(store.gate_points.entry(key.clone()).or_default(), &self);
        store.plans.insert(key.clone(), self);
        Some(key)
    }
    fn remove(&self, store: &mut Store) -> Option<Key> {
        let key = (self.namespace().unwrap_or_default(), self.name_any());
        store.plans.remove(&key);
        store.gate_points.remove(&key);
        Some(key)
    }
    fn clear(store: &mut Store) {
        store.plans.clear();
    }
}

impl Tracked for Deployment {
    const KIND: &'static str = "deployments";
    fn upsert(mut self, store: &mut Store) -> Option<Key> {
        self.metadata.managed_fields = None;
        let ns = self.namespace().unwrap_or_default();
        let plan = self.labels().get(LABEL_PLAN).cloned()?;
        store
            .deployments
            .insert((ns.clone(), self.name_any()), self);
        Some((ns, plan))
    }
    fn remove(&self, store: &mut Store) -> Option<Key> {
        let ns = self.namespace().unwrap_or_default();
        store.deployments.remove(&(ns.clone(), self.name_any()));
        Some((ns, self.labels().get(LABEL_PLAN).cloned()?))
    }
    fn clear(store: &mut Store) {
        store.deployments.clear();
    }
}

impl Tracked for StatefulSet {
    const KIND: &'static str = "statefulsets";
    fn upsert(mut self, store: &mut Store) -> Option<Key> {
        self.metadata.managed_fields = None;
        let ns = self.namespace().unwrap_or_default();
        let plan = self.labels().get(LABEL_PLAN).cloned()?;
        store
            .stateful_sets
            .insert((ns.clone(), self.name_any()), self);
        Some((ns, plan))
    }
    fn remove(&self, store: &mut Store) -> Option<Key> {
        let ns = self.namespace().unwrap_or_default();
        store.stateful_sets.remove(&(ns.clone(), self.name_any()));
        Some((ns, self.labels().get(LABEL_PLAN).cloned()?))
    }
    fn clear(store: &mut Store) {
        store.stateful_sets.clear();
    }
}

impl Tracked for DaemonSet {
    const KIND: &'static str = "daemonsets";
    fn upsert(mut self, store: &mut Store) -> Option<Key> {
        self.metadata.managed_fields = None;
        let ns = self.namespace().unwrap_or_default();
        let plan = self.labels().get(LABEL_PLAN).cloned()?;
        store
            .daemon_sets
            .insert((ns.clone(), self.name_any()), self);
        Some((ns, plan))
    }
    fn remove(&self, store: &mut Store) -> Option<Key> {
        let ns = self.namespace().unwrap_or_default();
        store.daemon_sets.remove(&(ns.clone(), self.name_any()));
        Some((ns, self.labels().get(LABEL_PLAN).cloned()?))
    }
    fn clear(store: &mut Store) {
        store.daemon_sets.clear();
    }
}

impl Tracked for KubeEvent {
    const KIND: &'static str = "events";
    fn upsert(self, store: &mut Store) -> Option<Key> {
        let key = event_plan(&self)?;
        let row = event_row(&self);
        let rows = store.events.entry(key.clone()).or_default();
        rows.insert(self.name_any(), row);
        if rows.len() > EVENTS_KEPT {
            // Drop the oldest: the map is small, a scan is fine.
            if let Some(oldest) = rows
                .iter()
                .min_by_key(|(_, r)| r.last)
                .map(|(n, _)| n.clone())
            {
                rows.remove(&oldest);
            }
        }
        Some(key)
    }
    fn remove(&self, store: &mut Store) -> Option<Key> {
        let key = event_plan(self)?;
        if let Some(rows) = store.events.get_mut(&key) {
            rows.remove(&self.name_any());
        }
        Some(key)
    }
    fn clear(store: &mut Store) {
        store.events.clear();
    }
}

/// The plan an Event is about, when it is about a ReleasePlan.
fn event_plan(e: &KubeEvent) -> Option<Key> {
    let o = &e.involved_object;
    (o.kind.as_deref() == Some("ReleasePlan")).then(|| {
        (
            o.namespace
                .clone()
                .unwrap_or_else(|| e.namespace().unwrap_or_default()),
            o.name.clone().unwrap_or_default(),
        )
    })
}

/// Appends each gate's latest evaluation, when it is new, to its series.
fn record_gates(series: &mut BTreeMap<String, VecDeque<GatePoint>>, plan: &ReleasePlan) {
    let Some(status) = &plan.status else { return };
    for g in &status.gates {
        let (Some(at), Some(value)) = (g.last_evaluated, g.value.clone()) else {
            continue;
        };
        let points = series.entry(g.name.clone()).or_default();
        if points.back().is_some_and(|p| p.at >= at) {
            continue;
        }
        points.push_back(GatePoint {
            at,
            value,
            verdict: g.verdict.to_string(),
        });
        if points.len() > GATE_POINTS_KEPT {
            points.pop_front();
        }
    }
}

impl Store {
    pub(super) fn overview(&self) -> Vec<Row> {
        self.plans.values().map(|p| row(p, None)).collect()
    }

    pub(super) fn detail(&self, key: &Key) -> Option<Detail> {
        let plan = self.plans.get(key)?;
        let deployments: Vec<Deployment> = self
            .deployments
            .range((key.0.clone(), String::new())..)
            .take_while(|((ns, _), _)| *ns == key.0)
            .filter(|(_, d)| d.labels().get(LABEL_PLAN) == Some(&key.1))
            .map(|(_, d)| d.clone())
            .collect();
        let sets: Vec<StatefulSet> = self
            .stateful_sets
            .range((key.0.clone(), String::new())..)
            .take_while(|((ns, _), _)| *ns == key.0)
            .filter(|(_, s)| s.labels().get(LABEL_PLAN) == Some(&key.1))
            .map(|(_, s)| s.clone())
            .collect();
        let daemons: Vec<DaemonSet> = self
            .daemon_sets
            .range((key.0.clone(), String::new())..)
            .take_while(|((ns, _), _)| *ns == key.0)
            .filter(|(_, d)| d.labels().get(LABEL_PLAN) == Some(&key.1))
            .map(|(_, d)| d.clone())
            .collect();
        let live = Live {
            deployments: &deployments,
            stateful_sets: &sets,
            daemon_sets: &daemons,
            pods: &[],
        };
        let mut events: Vec<EventRow> = self
            .events
            .get(key)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        events.sort_by_key(|e| std::cmp::Reverse(e.last));
        Some(Detail {
            plan: row(plan, Some(live)),
            conditions: plan
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default(),
            history: history_view(plan),
            events,
            gate_series: self
                .gate_points
                .get(key)
                .map(|g| {
                    g.iter()
                        .map(|(n, p)| (n.clone(), p.iter().cloned().collect()))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    pub(super) fn errors(&self) -> Vec<String> {
        self.errors
            .iter()
            .map(|(kind, e)| format!("watch of {kind}: {e}"))
            .collect()
    }

    /// The row of the plan `key` in the overview; `None` once it is gone.
    pub(super) fn overview_row(&self, key: &Key) -> Option<Row> {
        self.plans.get(key).map(|p| row(p, None))
    }

    /// Takes one event of the watch of `K` (the objects of a relist wait in
    /// `buffer` until it is complete, then replace those of their kind); the
    /// note to announce, if any. An error is kept for the pages until the
    /// watch's next event.
    pub(super) fn apply<K: Tracked>(
        &mut self,
        event: Result<WatchEvent<K>, watcher::Error>,
        buffer: &mut Vec<K>,
    ) -> Option<Note> {
        let had_error = self.errors.remove(K::KIND).is_some();
        match event {
            Ok(WatchEvent::Init) => {
                buffer.clear();
                had_error.then_some(Note::Resync)
            }
            Ok(WatchEvent::InitApply(k)) => {
                buffer.push(k);
                had_error.then_some(Note::Resync)
            }
            Ok(WatchEvent::InitDone) => {
                K::clear(self);
                for k in buffer.drain(..) {
                    k.upsert(self);
                }
                Some(Note::Resync)
            }
            Ok(WatchEvent::Apply(k)) => k.upsert(self).map(Note::Changed),
            Ok(WatchEvent::Delete(k)) => k.remove(self).map(Note::Changed),
            Err(e) => {
                self.errors.insert(K::KIND, chain(&e));
                Some(Note::Resync)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::fixtures::plan;
    use chrono::{DateTime, Utc};

    #[test]
    fn gate_points_are_appended_once_per_evaluation() {
        let mut p = plan();
        let at: DateTime<Utc> = "2025-01-02T09:00:00Z".parse().unwrap();
        p.status.as_mut().unwrap().gates = vec![crate::api::GateStatus {
            name: "errors".into(),
            value: Some("0.5".into()),
            last_evaluated: Some(at),
            ..crate::api::GateStatus::default()
        }];
        let mut series = BTreeMap::new();
        record_gates(&mut series, &p);
        record_gates(&mut series, &p);
        assert_eq!(series["errors"].len(), 1);
        p.status.as_mut().unwrap().gates[0].last_evaluated =
            Some(at + chrono::Duration::seconds(10));
        record_gates(&mut series, &p);
        assert_eq!(series["errors"].len(), 2);
    }
}
