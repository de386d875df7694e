//! The reconcile queue as the metrics see it: which plans changed (a watch
//! event of the plan or of its objects, a gate result) and have not been
//! reconciled since, and how long each waited.
//!
//! kube-runtime's `Controller` keeps its queue to itself, so the triggers are
//! noted on their way in and cleared when the reconcile starts. Timed
//! requeues (a pause, a retry after an error) are not noted: they wait on
//! purpose, and counting them would hide a real backlog among planned waits.

use crate::ops::metrics::Metrics;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// A plan, by namespace and name.
type Key = (Option<String>, String);

/// Plans waiting for their reconcile, and since when.
pub struct Queue {
    pending: Mutex<HashMap<Key, Instant>>,
    metrics: Arc<Metrics>,
}

impl Queue {
    /// An empty queue recording into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Queue {
            pending: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// The plan changed: it waits from now, unless it already waited.
    pub fn changed(&self, namespace: Option<&str>, name: &str) {
        let mut map = self.lock();
        map.entry((namespace.map(str::to_string), name.to_string()))
            .or_insert_with(Instant::now);
        self.set_depth(map.len());
    }

    /// The plan's reconcile starts: its wait ends (none for a timed requeue).
    pub fn started(&self, namespace: Option<&str>, name: &str) {
        let mut map = self.lock();
        if let Some(since) = map.remove(&(namespace.map(str::to_string), name.to_string())) {
            self.metrics
                .queue_wait
                .observe(since.elapsed().as_secs_f64());
        }
        self.set_depth(map.len());
    }

    /// The plan is gone before its reconcile ran: it no longer waits.
    pub fn forget(&self, namespace: Option<&str>, name: &str) {
        let mut map = self.lock();
        map.remove(&(namespace.map(str::to_string), name.to_string()));
        self.set_depth(map.len());
    }

    /// The plans waiting.
    pub fn plans(&self) -> Vec<kube::runtime::reflector::ObjectRef<crate::api::ReleasePlan>> {
        self.lock()
            .keys()
            .map(|(ns, name)| {
                let r = kube::runtime::reflector::ObjectRef::new(name);
                match ns {
                    Some(ns) => r.within(ns),
                    None => r,
                }
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Instant>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set_depth(&self, n: usize) {
        self.metrics
            .queue_depth
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_waits_once_until_its_reconcile_and_a_requeue_is_no_wait() {
        let metrics = Arc::new(Metrics::new());
        let q = Queue::new(Arc::clone(&metrics));
        q.changed(Some("a"), "p");
        q.changed(Some("a"), "p");
        q.changed(Some("b"), "p");
        assert_eq!(metrics.queue_depth.get(), 2);
        q.started(Some("a"), "p");
        assert_eq!(metrics.queue_depth.get(), 1);
        // A timed requeue: no trigger was noted, nothing is observed.
        q.started(Some("a"), "p");
        q.forget(Some("b"), "p");
        assert_eq!(metrics.queue_depth.get(), 0);
        let text = metrics.render();
        assert!(
            text.contains("releaseplan_reconcile_queue_wait_seconds_count 1"),
            "{text}"
        );
    }
}
