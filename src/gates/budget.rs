//! The budget of gate calls: how many Prometheus and webhook gate calls may
//! be in flight, and start each second, for the whole operator and for each
//! namespace.
//!
//! Every gate is its own task and may be called once a second: without a
//! budget, a tenant with many plans of many gates turns the operator into an
//! amplifier against a shared Prometheus, and the answers it holds at once
//! fill the operator's memory. So each call first takes a [`Permit`]:
//!
//! 1. a slot of its namespace's calls in flight (`--gate-calls-in-flight-per-namespace`);
//! 2. a token of its namespace's calls per second (`--gate-calls-per-second-per-namespace`);
//! 3. a slot of all calls in flight (`--gate-calls-in-flight`);
//! 4. a token of all calls per second (`--gate-calls-per-second`).
//!
//! The namespace's own budget comes first: a namespace over its share waits
//! on its own queue, and only the calls its own budget lets through queue
//! for the global one, so no namespace has more than its per-namespace
//! number of calls ahead of another's in the global queues. Those queues are
//! first come, first served (tokio's semaphore and mutex are fair), so a
//! call waits for at most one round of the namespaces that are calling, not
//! for the backlog of the busiest one.
//!
//! A call that waits here has not been made: the gate is "not evaluated
//! yet", nothing is recorded against it (see `controller::gates`). A limit
//! of 0 turns that limit off.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};

use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The limits of the budget (the `--gate-calls-*` flags); 0 is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Gate calls in flight, all namespaces together.
    pub in_flight: u32,
    /// Gate calls in flight of one namespace.
    pub in_flight_per_namespace: u32,
    /// Gate calls started per second, all namespaces together.
    pub per_second: u32,
    /// Gate calls started per second in one namespace.
    pub per_second_per_namespace: u32,
}

impl Limits {
    /// No limit at all (tests and tools that call one gate at a time).
    pub const NONE: Limits = Limits {
        in_flight: 0,
        in_flight_per_namespace: 0,
        per_second: 0,
        per_second_per_namespace: 0,
    };
}

/// One namespace's share: its slots and its turn at its rate limit.
#[derive(Debug)]
struct Share {
    in_flight: Option<Arc<Semaphore>>,
    /// One waiter at a time on the namespace's rate, in arrival order.
    rate_turn: tokio::sync::Mutex<()>,
}

/// The budget shared by every gate task (see the module docs).
pub struct GateBudget {
    limits: Limits,
    in_flight: Option<Arc<Semaphore>>,
    rate: Option<DefaultDirectRateLimiter>,
    /// One waiter at a time on the global rate, in arrival order: governor's
    /// own waiters race, which would let the busiest namespace win most.
    rate_turn: tokio::sync::Mutex<()>,
    namespace_rate: Option<DefaultKeyedRateLimiter<String>>,
    /// The shares of the namespaces with a call waiting or in flight; a
    /// share nobody holds is dropped at the next acquisition.
    shares: Mutex<HashMap<String, Arc<Share>>>,
}

impl std::fmt::Debug for GateBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateBudget")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The right to make one gate call: held for the call, released when dropped.
#[derive(Debug)]
pub struct Permit {
    _namespace: Option<OwnedSemaphorePermit>,
    _global: Option<OwnedSemaphorePermit>,
    /// Keeps the namespace's share in the map while the call runs: a new
    /// share made meanwhile would let the namespace pass its limit.
    _share: Arc<Share>,
}

/// A rate of `n` per second with a burst of `n`; `None` for 0.
fn quota(n: u32) -> Option<Quota> {
    NonZeroU32::new(n).map(Quota::per_second)
}

/// A semaphore of `n` slots; `None` for 0.
fn slots(n: u32) -> Option<Arc<Semaphore>> {
    (n > 0).then(|| Arc::new(Semaphore::new(n as usize)))
}

/// Takes a slot; `None` without a limit. The semaphores are never closed,
/// so a closed one (impossible) is taken as no limit rather than a panic.
async fn slot(s: Option<&Arc<Semaphore>>) -> Option<OwnedSemaphorePermit> {
    Arc::clone(s?).acquire_owned().await.ok()
}

impl GateBudget {
    /// A budget with these limits.
    pub fn new(limits: Limits) -> GateBudget {
        GateBudget {
            limits,
            in_flight: slots(limits.in_flight),
            rate: quota(limits.per_second).map(RateLimiter::direct),
            rate_turn: tokio::sync::Mutex::new(()),
            namespace_rate: quota(limits.per_second_per_namespace).map(RateLimiter::keyed),
            shares: Mutex::new(HashMap::new()),
        }
    }

    /// The share of `namespace`, made when it has none; drops the shares
    /// nobody holds (only this map holds them: the clones are all made here,
    /// under the lock) and the rate state of idle namespaces.
    fn share(&self, namespace: &str) -> Arc<Share> {
        let mut shares = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
        shares.retain(|ns, s| ns == namespace || Arc::strong_count(s) > 1);
        if let Some(rate) = &self.namespace_rate {
            rate.retain_recent();
        }
        Arc::clone(shares.entry(namespace.to_string()).or_insert_with(|| {
            Arc::new(Share {
                in_flight: slots(self.limits.in_flight_per_namespace),
                rate_turn: tokio::sync::Mutex::new(()),
            })
        }))
    }

    /// Waits until a call of `namespace` fits the budget (see the module
    /// docs for the order). Dropping the future gives its place up.
    pub async fn acquire(&self, namespace: &str) -> Permit {
        let share = self.share(namespace);
        let own = slot(share.in_flight.as_ref()).await;
        if let Some(rate) = &self.namespace_rate {
            let _turn = share.rate_turn.lock().await;
            rate.until_key_ready(&namespace.to_string()).await;
        }
        let global = slot(self.in_flight.as_ref()).await;
        if let Some(rate) = &self.rate {
            let _turn = self.rate_turn.lock().await;
            rate.until_ready().await;
        }
        Permit {
            _namespace: own,
            _global: global,
            _share: share,
        }
    }

    /// Namespaces with a call waiting or in flight (for tests of the cleanup).
    #[cfg(test)]
    fn namespaces(&self) -> usize {
        let mut shares = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
        shares.retain(|_, s| Arc::strong_count(s) > 1);
        shares.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    fn limits(
        in_flight: u32,
        in_flight_per_namespace: u32,
        per_second: u32,
        per_second_per_namespace: u32,
    ) -> Limits {
        Limits {
            in_flight,
            in_flight_per_namespace,
            per_second,
            per_second_per_namespace,
        }
    }

    /// Namespace `a` floods: 50 calls at once, each holding its permit until
    /// the test lets it go. With `a` over its own share, `b`'s one call gets
    /// a permit as soon as one of `a`'s calls ends, not after `a`'s backlog
    /// (which would never end here: `a`'s calls are only let go after `b`
    /// got through).
    #[tokio::test]
    async fn a_flooding_namespace_waits_on_its_own_share_and_another_gets_the_next_slot() {
        let budget = Arc::new(GateBudget::new(limits(2, 2, 0, 0)));
        let started = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(tokio::sync::Notify::new());
        let mut flood = Vec::new();
        for _ in 0..50 {
            let (budget, started, release) = (
                Arc::clone(&budget),
                Arc::clone(&started),
                Arc::clone(&release),
            );
            flood.push(tokio::spawn(async move {
                let _p = budget.acquire("a").await;
                started.fetch_add(1, Ordering::SeqCst);
                release.notified().await;
            }));
        }
        // `a` fills the global slots.
        while started.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let b = {
            let budget = Arc::clone(&budget);
            tokio::spawn(async move { budget.acquire("b").await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!b.is_finished(), "the global slots are all taken");
        // One of `a`'s calls ends: the freed slot goes to `b`, first in the
        // global queue, not to `a`'s next call.
        release.notify_one();
        let permit = tokio::time::timeout(Duration::from_secs(30), b)
            .await
            .expect("b got no permit: a's backlog came first")
            .expect("b's task");
        assert_eq!(
            started.load(Ordering::SeqCst),
            2,
            "a started a third call before b's"
        );
        drop(permit);
        for t in &flood {
            t.abort();
        }
    }

    /// Without the namespace's share first (global slots only), the same
    /// flood keeps `b` behind all of `a`'s queued calls: the global queue
    /// alone is first come, first served, which is why the share comes
    /// first. Each call is polled once by hand to take its place in order.
    #[tokio::test]
    async fn the_global_queue_alone_is_first_come_first_served() {
        use std::task::Poll;
        let budget = GateBudget::new(limits(1, 0, 0, 0));
        let first = budget.acquire("a").await;
        let mut queued: Vec<_> = (0..3).map(|_| Box::pin(budget.acquire("a"))).collect();
        for q in &mut queued {
            assert!(futures::poll!(q.as_mut()).is_pending());
        }
        let mut b = std::pin::pin!(budget.acquire("b"));
        assert!(futures::poll!(b.as_mut()).is_pending());
        drop(first);
        assert!(
            futures::poll!(b.as_mut()).is_pending(),
            "b is behind a's three queued calls"
        );
        let Poll::Ready(next) = futures::poll!(queued[0].as_mut()) else {
            panic!("a's first queued call did not get the freed slot")
        };
        drop(next);
    }

    /// A namespace's calls per second are bounded by its own rate; another
    /// namespace's call is not held by it.
    #[tokio::test]
    async fn the_rate_of_a_namespace_holds_its_own_calls_only() {
        let budget = GateBudget::new(limits(0, 0, 100, 4));
        let start = Instant::now();
        // A burst of 4, then 4 a second: the 12th call about 2 s in.
        for _ in 0..12 {
            drop(budget.acquire("a").await);
        }
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(1500),
            "12 calls at 4/s took {took:?}"
        );
        // At 1 a second, `a`'s second call waits; `b`'s first does not.
        let budget = GateBudget::new(limits(0, 0, 100, 1));
        drop(budget.acquire("a").await);
        let mut a = std::pin::pin!(budget.acquire("a"));
        assert!(futures::poll!(a.as_mut()).is_pending(), "a's second call");
        let mut b = std::pin::pin!(budget.acquire("b"));
        assert!(
            futures::poll!(b.as_mut()).is_ready(),
            "b waited on a's rate"
        );
    }

    /// The global rate bounds every namespace together.
    #[tokio::test]
    async fn the_global_rate_bounds_all_namespaces() {
        let budget = Arc::new(GateBudget::new(limits(0, 0, 5, 0)));
        let start = Instant::now();
        for i in 0..15 {
            drop(budget.acquire(&format!("ns{i}")).await);
        }
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(1500),
            "15 calls at 5/s took {took:?}"
        );
    }

    /// A namespace's calls in flight never pass its share, however many wait.
    #[tokio::test]
    async fn calls_in_flight_never_pass_the_namespace_share() {
        let budget = Arc::new(GateBudget::new(limits(10, 3, 0, 0)));
        let now = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..30)
            .map(|_| {
                let (budget, now, peak) =
                    (Arc::clone(&budget), Arc::clone(&now), Arc::clone(&peak));
                tokio::spawn(async move {
                    let _p = budget.acquire("a").await;
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(peak.load(Ordering::SeqCst), 3);
    }

    /// No limit: every call goes at once; the shares of finished namespaces go.
    #[tokio::test]
    async fn no_limits_hold_nothing_and_idle_namespaces_are_forgotten() {
        let budget = GateBudget::new(Limits::NONE);
        let held: Vec<Permit> = futures::future::join_all(
            (0..100).map(|i| budget.acquire(if i % 2 == 0 { "a" } else { "b" })),
        )
        .await;
        assert_eq!(budget.namespaces(), 2);
        drop(held);
        assert_eq!(budget.namespaces(), 0);
    }
}
