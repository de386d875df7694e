//! Every wait between two tries in the operator comes from here: backon's
//! exponential backoff with jitter. Jitter matters because failures come in
//! crowds: after an API server restart hundreds of plans fail in the same
//! second, and without it they would all be tried again in the same second,
//! again and again. backon's jitter adds up to as much again as each wait,
//! so a policy capped at `c` waits less than `2c`.

use backon::{BackoffBuilder, ExponentialBuilder};
use std::time::Duration;

/// The longest wait before a failed reconcile is tried again.
pub const RECONCILE_MAX: Duration = Duration::from_secs(300);

fn exponential(first: Duration, cap: Duration) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(first)
        .with_max_delay(cap)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
}

/// A plan's reconcile after failures in a row: from 1 s, doubling, under
/// [`RECONCILE_MAX`].
pub fn reconcile() -> ExponentialBuilder {
    exponential(Duration::from_secs(1), RECONCILE_MAX / 2)
}

/// The wait after the `failures`-th failure in a row of a plan (1: the first).
pub fn reconcile_delay(failures: u32) -> Duration {
    // Past 9 doublings the cap holds; no need to walk further.
    let n = usize::try_from(failures.clamp(1, 10)).unwrap_or(10);
    reconcile()
        .build()
        .nth(n - 1)
        .unwrap_or(RECONCILE_MAX)
        .min(RECONCILE_MAX)
}

/// A watch stream after an error (kube-runtime's watcher takes backon's
/// backoff): from 250 ms, under 2 s, so every cache is fresh again within
/// seconds of an API server restart.
pub fn watch() -> ExponentialBuilder {
    exponential(Duration::from_millis(250), Duration::from_secs(1))
}

/// Asking the API server again while it is away (start-up checks, a
/// ConfigMap read): from 250 ms, under 5 s.
pub fn api_away() -> ExponentialBuilder {
    exponential(Duration::from_millis(250), Duration::from_millis(2500))
}

/// Recording an Event again: from 250 ms, under 5 s, for `total` at most.
pub fn event(total: Duration) -> ExponentialBuilder {
    exponential(Duration::from_millis(250), Duration::from_millis(2500))
        .with_total_delay(Some(total))
}

/// A webhook gate's retries: from the core's first pause, each under its
/// `MAX_BACKOFF` with the jitter (the core's worst case counts twice the
/// plain pauses, a bound above these).
pub fn gate_call() -> ExponentialBuilder {
    use releaseplan_core::gates::webhook::{FIRST_BACKOFF, MAX_BACKOFF};
    exponential(FIRST_BACKOFF, MAX_BACKOFF / 2)
}

/// A notification's delivery tries: from 1 s, under 5 s.
pub fn notification() -> ExponentialBuilder {
    exponential(Duration::from_secs(1), Duration::from_millis(2500))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each wait lies between the plain exponential one and twice it,
    /// capped; and plans failing together do not all wait alike.
    #[test]
    fn reconcile_waits_grow_with_jitter_and_stay_under_the_cap() {
        let s = Duration::from_secs;
        for (failures, low) in [(1, s(1)), (2, s(2)), (5, s(16)), (9, s(150)), (50, s(150))] {
            for _ in 0..200 {
                let d = reconcile_delay(failures);
                assert!(d >= low && d < low * 2, "{failures}: {d:?}");
                assert!(d <= RECONCILE_MAX, "{failures}: {d:?}");
            }
        }
        let waits: std::collections::BTreeSet<Duration> =
            (0..50).map(|_| reconcile_delay(3)).collect();
        assert!(waits.len() > 10, "jitter spreads the retries: {waits:?}");
    }

    #[test]
    fn every_policy_stays_under_twice_its_cap() {
        let ms = Duration::from_millis;
        for (b, under) in [
            (watch(), ms(2000)),
            (api_away(), ms(5000)),
            (notification(), ms(5000)),
            (gate_call(), releaseplan_core::gates::webhook::MAX_BACKOFF),
        ] {
            let waits: Vec<Duration> = b.build().take(20).collect();
            assert_eq!(waits.len(), 20, "no limit of tries");
            assert!(waits.iter().all(|w| *w < under), "{waits:?}");
        }
        let total = Duration::from_secs(30);
        let sum: Duration = event(total).build().sum();
        assert!(sum <= total, "{sum:?}");
    }
}
