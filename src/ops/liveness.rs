//! What `/healthz` means: the controller makes progress, not merely that HTTP
//! answers. It fails when a reconcile has run longer than a bound (reconciles
//! never wait on the network, so one that long is stuck), or when a watch
//! stream has failed for longer than the bound without one success (the
//! caches, and so every decision, are going stale).
//!
//! A success is an event of the stream, or the API server accepting the
//! watch again (its answer's headers, seen by the request layer): a watch of
//! a kind that never changes yields no event after it reconnects, and judged
//! by events alone it would stay failed forever after one blip.
//!
//! Watches are named by their resource (`deployments`, `releaseplans`), the
//! word of the request path, so the request layer and the streams agree.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Progress of the controller, shared with the health server.
#[derive(Debug)]
pub struct Liveness {
    bound: Duration,
    next: AtomicU64,
    in_flight: Mutex<HashMap<u64, Instant>>,
    failing_since: Mutex<HashMap<String, Instant>>,
}

/// A reconcile in flight; it is over when this is dropped.
#[derive(Debug)]
pub struct InFlight {
    liveness: Arc<Liveness>,
    id: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.liveness
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

impl Liveness {
    /// Unhealthy after `bound` without progress.
    pub fn new(bound: Duration) -> Arc<Liveness> {
        Arc::new(Liveness {
            bound,
            next: AtomicU64::new(0),
            in_flight: Mutex::new(HashMap::new()),
            failing_since: Mutex::new(HashMap::new()),
        })
    }

    /// Marks a reconcile as started; keep the guard until it ends.
    pub fn reconcile_started(self: &Arc<Self>) -> InFlight {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Instant::now());
        InFlight {
            liveness: Arc::clone(self),
            id,
        }
    }

    /// Records one item of the watch stream of `resource`: a success clears
    /// its failure, the first error of a run starts the clock.
    pub fn watch_result(&self, resource: &str, ok: bool) {
        let mut f = self
            .failing_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if ok {
            f.remove(resource);
        } else if !f.contains_key(resource) {
            f.insert(resource.to_string(), Instant::now());
        }
    }

    /// The API server accepted a watch of `resource`: the stream is connected
    /// again, whether or not an event ever follows.
    pub fn watch_connected(&self, resource: &str) {
        self.watch_result(resource, true);
    }

    /// `Err` with the reason when the controller is stuck at `now`.
    pub fn check(&self, now: Instant) -> Result<(), String> {
        let oldest = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .min()
            .copied();
        if let Some(start) = oldest
            && now.saturating_duration_since(start) > self.bound
        {
            return Err(format!(
                "a reconcile has run for {}s (bound {}s)",
                now.saturating_duration_since(start).as_secs(),
                self.bound.as_secs()
            ));
        }
        let failing = self
            .failing_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(n, t)| (n.clone(), *t))
            .min_by_key(|(_, t)| *t);
        if let Some((name, since)) = failing
            && now.saturating_duration_since(since) > self.bound
        {
            return Err(format!(
                "the {name} watch has failed for {}s (bound {}s)",
                now.saturating_duration_since(since).as_secs(),
                self.bound.as_secs()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reconcile_is_stuck_and_its_end_heals() {
        let l = Liveness::new(Duration::from_secs(10));
        let now = Instant::now();
        assert!(l.check(now).is_ok());
        let guard = l.reconcile_started();
        assert!(l.check(now + Duration::from_secs(5)).is_ok());
        let err = l.check(now + Duration::from_secs(11)).unwrap_err();
        assert!(err.contains("reconcile"), "{err}");
        drop(guard);
        assert!(l.check(now + Duration::from_secs(11)).is_ok());
    }

    #[test]
    fn a_failing_watch_is_stuck_until_it_succeeds() {
        let l = Liveness::new(Duration::from_secs(10));
        let now = Instant::now();
        l.watch_result("plans", false);
        l.watch_result("plans", false);
        assert!(l.check(now + Duration::from_secs(5)).is_ok());
        let err = l.check(now + Duration::from_secs(11)).unwrap_err();
        assert!(err.contains("plans watch"), "{err}");
        l.watch_result("plans", true);
        assert!(l.check(now + Duration::from_secs(11)).is_ok());
    }

    #[test]
    fn a_watch_accepted_again_heals_without_any_event() {
        let l = Liveness::new(Duration::from_secs(10));
        let now = Instant::now();
        l.watch_result("clustergatetemplates", false);
        l.watch_result("deployments", false);
        l.watch_connected("clustergatetemplates");
        // The other watch still fails: its own clock still runs.
        let err = l.check(now + Duration::from_secs(11)).unwrap_err();
        assert!(err.contains("deployments watch"), "{err}");
        l.watch_connected("deployments");
        assert!(l.check(now + Duration::from_secs(11)).is_ok());
        // A new failure starts a new clock.
        l.watch_result("deployments", false);
        assert!(l.check(Instant::now() + Duration::from_secs(5)).is_ok());
    }
}
