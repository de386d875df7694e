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
//! A request to the API server that has waited longer than the bound for
//! its answer (watches aside) fails it too: a black-holed connection holds
//! a write with no error at all. The process sends one cheap request (the
//! API server's version) every half bound, so even an idle operator
//! notices ([`heartbeat`]): `/healthz` fails when none has ended (answered,
//! or failed at once) for longer than the bound. Each heartbeat gives up
//! after half the bound, so one whose answer was lost (the connection
//! stays open, nothing will ever come) does not hold the next one back.
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
    in_flight: Mutex<HashMap<u64, (Instant, Work)>>,
    failing_since: Mutex<HashMap<String, Instant>>,
    /// When a heartbeat last ended with an answer or an error (not a
    /// wait given up); `None` until [`heartbeat`] starts.
    heard: Mutex<Option<Instant>>,
}

/// What is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    Reconcile,
    Request,
}

/// A reconcile or a request in flight; it is over when this is dropped.
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
            heard: Mutex::new(None),
        })
    }

    /// Marks a reconcile as started; keep the guard until it ends.
    pub fn reconcile_started(self: &Arc<Self>) -> InFlight {
        self.started(Work::Reconcile)
    }

    /// Marks a request to the API server (not a watch) as sent; keep the
    /// guard until its answer comes.
    pub fn request_started(self: &Arc<Self>) -> InFlight {
        self.started(Work::Request)
    }

    fn started(self: &Arc<Self>, work: Work) -> InFlight {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, (Instant::now(), work));
        InFlight {
            liveness: Arc::clone(self),
            id,
        }
    }

    /// A heartbeat ended: answered, or failed without a wait (refused,
    /// reset). Either way the network is not holding requests.
    pub fn heard(&self) {
        self.heard_at(Instant::now());
    }

    fn heard_at(&self, at: Instant) {
        *self.heard.lock().unwrap_or_else(PoisonError::into_inner) = Some(at);
    }

    /// How often [`heartbeat`] asks the API server: twice within the bound.
    pub fn heartbeat_every(&self) -> Duration {
        (self.bound / 2).clamp(Duration::from_millis(500), Duration::from_secs(30))
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
            .min_by_key(|(t, _)| *t)
            .copied();
        if let Some((start, work)) = oldest
            && now.saturating_duration_since(start) > self.bound
        {
            let waited = now.saturating_duration_since(start).as_secs();
            let bound = self.bound.as_secs();
            return Err(match work {
                Work::Reconcile => format!("a reconcile has run for {waited}s (bound {bound}s)"),
                Work::Request => format!(
                    "a request to the API server has waited {waited}s for its answer (bound {bound}s)"
                ),
            });
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
        let heard = *self.heard.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(heard) = heard
            && now.saturating_duration_since(heard) > self.bound
        {
            return Err(format!(
                "the heartbeat to the API server has had no answer for {}s (bound {}s)",
                now.saturating_duration_since(heard).as_secs(),
                self.bound.as_secs()
            ));
        }
        Ok(())
    }
}

/// Asks the API server for its version every [`Liveness::heartbeat_every`],
/// one request at a time, forever, each given up after the same time: one
/// that ends (an answer or an error) is [`Liveness::heard`]; `/healthz`
/// fails when none has for longer than the bound, even when nothing else is
/// sent. Its answer is not needed.
pub async fn heartbeat(client: kube::Client, liveness: Arc<Liveness>) {
    let every = liveness.heartbeat_every();
    liveness.heard();
    loop {
        match tokio::time::timeout(every, client.apiserver_version()).await {
            Ok(Ok(_)) => liveness.heard(),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "heartbeat to the API server failed");
                liveness.heard();
            }
            Err(_) => {
                tracing::debug!(after = ?every, "heartbeat to the API server got no answer");
            }
        }
        tokio::time::sleep(every).await;
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
    fn a_request_without_answer_is_stuck_until_it_is_answered() {
        let l = Liveness::new(Duration::from_secs(10));
        let now = Instant::now();
        let guard = l.request_started();
        assert!(l.check(now + Duration::from_secs(5)).is_ok());
        let err = l.check(now + Duration::from_secs(11)).unwrap_err();
        assert!(err.contains("request to the API server"), "{err}");
        drop(guard);
        assert!(l.check(now + Duration::from_secs(11)).is_ok());
        assert_eq!(l.heartbeat_every(), Duration::from_secs(5));
    }

    #[test]
    fn a_heartbeat_without_answer_for_the_bound_is_stuck_until_one_ends() {
        let l = Liveness::new(Duration::from_secs(10));
        let now = Instant::now();
        assert!(
            l.check(now + Duration::from_secs(60)).is_ok(),
            "no heartbeat yet"
        );
        l.heard_at(now);
        assert!(l.check(now + Duration::from_secs(9)).is_ok());
        let err = l.check(now + Duration::from_secs(11)).unwrap_err();
        assert!(err.contains("heartbeat"), "{err}");
        l.heard_at(now + Duration::from_secs(11));
        assert!(l.check(now + Duration::from_secs(12)).is_ok());
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
