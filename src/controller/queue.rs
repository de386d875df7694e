//! The reconcile queue as the metrics see it: which plans changed (a watch
//! event of the plan or of its objects, a gate result) and have not been
//! reconciled since, and how long each waited.
//!
//! kube-runtime's `Controller` keeps its queue to itself, so the triggers are
//! noted on their way in and cleared when the reconcile starts. Timed
//! requeues (a pause, a retry after an error) are not noted: they wait on
//! purpose, and counting them would hide a real backlog among planned waits.
//! They are counted apart instead, by the cause the reconcile before gave
//! (`releaseplan_timed_reconciles_total`).

use crate::ops::metrics::Metrics;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// A plan, by namespace and name.
type Key = (Option<String>, String);

/// What woke a plan (`releaseplan_wakes_total{source}`): the reconciles a
/// plan costs, by their cause, so a bench or an operator can see which
/// watch makes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakeSource {
    /// The plan's own watch event (a user's change, or a status write landing).
    Plan,
    /// One of its Deployments.
    Deployment,
    /// One of its pods.
    Pod,
    /// A Job gate's Job.
    Job,
    /// One of its Services.
    Service,
    /// Its ComponentScale.
    Scale,
    /// Its HorizontalPodAutoscaler.
    Hpa,
    /// One of its routes.
    Route,
    /// A gate template's copy.
    TemplateCopy,
    /// A stored template (ControllerRevision).
    Revision,
    /// A gate result.
    Gate,
    /// A gate template it uses.
    GateTemplate,
    /// A GatePolicy or its namespace's labels.
    Policy,
    /// A ReleaseFreeze or its namespace's labels.
    Freeze,
    /// A ConfigMap or Secret it reads, or one of their copies.
    Config,
    /// One of its StatefulSets.
    StatefulSet,
    /// One of its DaemonSets.
    DaemonSet,
}

/// A set of [`WakeSource`]s, one bit each: room for 32 (a compile-time
/// check below keeps [`WakeSource::ALL`] within it).
type Sources = u32;

const _: () = assert!(WakeSource::ALL.len() <= Sources::BITS as usize);

impl WakeSource {
    /// Every source, each a series from the start.
    pub const ALL: [WakeSource; 17] = [
        WakeSource::Plan,
        WakeSource::Deployment,
        WakeSource::Pod,
        WakeSource::Job,
        WakeSource::Service,
        WakeSource::Scale,
        WakeSource::Hpa,
        WakeSource::Route,
        WakeSource::TemplateCopy,
        WakeSource::Revision,
        WakeSource::Gate,
        WakeSource::GateTemplate,
        WakeSource::Policy,
        WakeSource::Freeze,
        WakeSource::Config,
        WakeSource::StatefulSet,
        WakeSource::DaemonSet,
    ];

    /// Its bit in a set of sources.
    fn bit(self) -> Sources {
        1 << (self as Sources)
    }

    /// The metric's label value.
    pub fn as_str(self) -> &'static str {
        match self {
            WakeSource::Plan => "plan",
            WakeSource::Deployment => "deployment",
            WakeSource::Pod => "pod",
            WakeSource::Job => "job",
            WakeSource::Service => "service",
            WakeSource::Scale => "scale",
            WakeSource::Hpa => "hpa",
            WakeSource::Route => "route",
            WakeSource::TemplateCopy => "template_copy",
            WakeSource::Revision => "revision",
            WakeSource::Gate => "gate",
            WakeSource::GateTemplate => "gate_template",
            WakeSource::Policy => "policy",
            WakeSource::Freeze => "freeze",
            WakeSource::Config => "config",
            WakeSource::StatefulSet => "stateful_set",
            WakeSource::DaemonSet => "daemon_set",
        }
    }
}

/// Causes of timed requeues the controller adds to the core's
/// ([`crate::plan::machine::Requeue`]), each a series of
/// `releaseplan_timed_reconciles_total` from the start.
pub const TIMERS: [&str; 4] = [TIMER_STAND_IN, TIMER_CACHE_SYNC, TIMER_RETRY, TIMER_UNKNOWN];
/// A Deployment written but not cached yet: its answer expires.
pub const TIMER_STAND_IN: &str = "stand_in";
/// The caches were not listed yet when the reconcile started.
pub const TIMER_CACHE_SYNC: &str = "cache_sync";
/// The reconcile failed: a retry after backoff (or a conflict).
pub const TIMER_RETRY: &str = "retry";
/// A reconcile with no change noted and no timer remembered (the first of a
/// plan the sweep found, say).
pub const TIMER_UNKNOWN: &str = "unknown";

/// A status write whose landing needs no reconcile ([`Queue::quiet_write`]).
struct Quiet {
    /// The plan's version the write was made on.
    base: Option<String>,
    /// The version it wrote.
    version: String,
}

/// Plans waiting for their reconcile, since when, and what woke them (a bit
/// per [`WakeSource`], logged at debug level when the reconcile starts).
pub struct Queue {
    pending: Mutex<HashMap<Key, (Instant, Sources)>>,
    /// Of each plan with a timed requeue ahead, why (a cause of
    /// `releaseplan_timed_reconciles_total`): kept only while one is ahead.
    timers: Mutex<HashMap<Key, &'static str>>,
    /// Of each plan, the resourceVersion of this process's last status write
    /// whose watch event needs no reconcile ([`Queue::quiet_write`]).
    quiet: Mutex<HashMap<Key, Quiet>>,
    metrics: Arc<Metrics>,
}

impl Queue {
    /// An empty queue recording into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Queue {
            pending: Mutex::new(HashMap::new()),
            timers: Mutex::new(HashMap::new()),
            quiet: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// The plan changed: it waits from now, unless it already waited.
    pub fn changed(&self, namespace: Option<&str>, name: &str, source: WakeSource) {
        self.metrics
            .wakes
            .get_or_create(&crate::ops::metrics::WakeLabel {
                source: source.as_str(),
            })
            .inc();
        let mut map = self.lock();
        map.entry((namespace.map(str::to_string), name.to_string()))
            .or_insert_with(|| (Instant::now(), 0))
            .1 |= source.bit();
        self.set_depth(map.len());
    }

    /// The plan's reconcile starts: its wait ends. With no change noted it is
    /// a timed requeue, counted by the cause its last reconcile gave.
    pub fn started(&self, namespace: Option<&str>, name: &str) {
        let key = (namespace.map(str::to_string), name.to_string());
        let timer = self.timers_lock().remove(&key);
        let mut map = self.lock();
        if let Some((since, bits)) = map.remove(&key) {
            self.metrics
                .queue_wait
                .observe(since.elapsed().as_secs_f64());
            tracing::debug!(
                namespace = namespace.unwrap_or_default(),
                plan = name,
                woken_by = ?WakeSource::ALL
                    .iter()
                    .filter(|s| bits & s.bit() != 0)
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>(),
                "reconcile starts"
            );
        } else {
            let cause = timer.unwrap_or(TIMER_UNKNOWN);
            self.metrics
                .timed_reconciles
                .get_or_create(&crate::ops::metrics::TimerLabel { cause })
                .inc();
            tracing::debug!(
                namespace = namespace.unwrap_or_default(),
                plan = name,
                timer = cause,
                "reconcile starts"
            );
        }
        self.set_depth(map.len());
    }

    /// The plan's reconcile ended: it comes back by itself for `cause`
    /// (`None`: only a change wakes it).
    pub fn timer(&self, namespace: Option<&str>, name: &str, cause: Option<&'static str>) {
        let key = (namespace.map(str::to_string), name.to_string());
        let mut timers = self.timers_lock();
        match cause {
            Some(c) => {
                timers.insert(key, c);
            }
            None => {
                timers.remove(&key);
            }
        }
    }

    /// The plan is gone before its reconcile ran: it no longer waits.
    pub fn forget(&self, namespace: Option<&str>, name: &str) {
        let key = (namespace.map(str::to_string), name.to_string());
        self.quiet_lock().remove(&key);
        self.timers_lock().remove(&key);
        let mut map = self.lock();
        map.remove(&key);
        self.set_depth(map.len());
    }

    /// This process wrote the plan's status at `version`, on the plan at
    /// `base`, and deciding again on it does nothing new
    /// (`Decision::repeats`): the watch event of that write is not a change
    /// to reconcile, nor is one of a version up to `base` (the reconcile
    /// decided on `base`; a finalizer patch's landing is one).
    pub fn quiet_write(
        &self,
        namespace: Option<&str>,
        name: &str,
        base: Option<String>,
        version: String,
    ) {
        self.quiet_lock().insert(
            (namespace.map(str::to_string), name.to_string()),
            Quiet { base, version },
        );
    }

    /// Whether the plan's watch event at `version` is a quiet write landing,
    /// or a version the reconcile that wrote had already decided on. Any
    /// other event ends the wait for it: a later version is someone else's
    /// change (or ours, not quiet), and wakes the plan. Versions are etcd
    /// revisions, compared as numbers; one that does not parse wakes.
    pub fn quiet_landing(
        &self,
        namespace: Option<&str>,
        name: &str,
        version: Option<&str>,
    ) -> bool {
        let key = (namespace.map(str::to_string), name.to_string());
        let mut quiet = self.quiet_lock();
        let Some(q) = quiet.get(&key) else {
            return false;
        };
        if Some(q.version.as_str()) == version {
            quiet.remove(&key);
            return true;
        }
        let number = super::keys::version_number;
        if let (Some(v), Some(base)) = (number(version), number(q.base.as_deref()))
            && v <= base
        {
            return true;
        }
        quiet.remove(&key);
        false
    }

    /// The plans waiting, whose quiet write has not landed, or with a timer
    /// ahead.
    pub fn plans(&self) -> Vec<kube::runtime::reflector::ObjectRef<crate::api::ReleasePlan>> {
        let mut keys: Vec<Key> = self.lock().keys().cloned().collect();
        keys.extend(self.quiet_lock().keys().cloned());
        keys.extend(self.timers_lock().keys().cloned());
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .map(|(ns, name)| {
                let r = kube::runtime::reflector::ObjectRef::new(&name);
                match ns {
                    Some(ns) => r.within(&ns),
                    None => r,
                }
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (Instant, Sources)>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn timers_lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, &'static str>> {
        self.timers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn quiet_lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Quiet>> {
        self.quiet.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set_depth(&self, n: usize) {
        self.metrics
            .queue_depth
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// Exports every wake source and timer cause from zero ([`Metrics::prime`]).
pub(crate) fn prime(metrics: &Metrics) {
    metrics.prime(
        WakeSource::ALL.iter().map(|s| s.as_str()),
        TIMERS.iter().copied(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_waits_once_until_its_reconcile_and_a_requeue_is_no_wait() {
        let metrics = Arc::new(Metrics::new());
        prime(&metrics);
        let q = Queue::new(Arc::clone(&metrics));
        q.changed(Some("a"), "p", WakeSource::Plan);
        q.changed(Some("a"), "p", WakeSource::Pod);
        q.changed(Some("b"), "p", WakeSource::Pod);
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
        assert!(
            text.contains("releaseplan_wakes_total{source=\"pod\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("releaseplan_wakes_total{source=\"freeze\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("releaseplan_timed_reconciles_total{cause=\"unknown\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn a_timed_reconcile_is_counted_by_the_cause_its_last_reconcile_gave() {
        let metrics = Arc::new(Metrics::new());
        prime(&metrics);
        let q = Queue::new(Arc::clone(&metrics));
        q.timer(Some("a"), "p", Some("safety"));
        q.started(Some("a"), "p");
        // A change noted before the timer fires: the reconcile is the
        // change's, and the timer it replaced is not counted.
        q.timer(Some("a"), "p", Some("safety"));
        q.changed(Some("a"), "p", WakeSource::Pod);
        q.started(Some("a"), "p");
        // Waiting on changes only, then started by none: unknown.
        q.timer(Some("a"), "p", None);
        q.started(Some("a"), "p");
        let text = metrics.render();
        for (cause, n) in [
            ("safety", 1),
            ("unknown", 1),
            ("new_step", 0),
            ("stand_in", 0),
        ] {
            let line = format!("releaseplan_timed_reconciles_total{{cause=\"{cause}\"}} {n}");
            assert!(text.contains(&line), "{line} in {text}");
        }
        assert!(
            q.timers_lock().is_empty(),
            "a timer is forgotten once it ran"
        );
    }
}
