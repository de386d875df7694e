//! Fisher's exact test for counts: is the canary's share of failed requests
//! higher than the baseline's? Exact, so zero errors on one side or both is
//! an answer, not a division by zero (where a chi-square or a ratio of
//! rates fails, kayenta#426).
//!
//! The same p-values as `scipy.stats.fisher_exact` (`reference.json`).

#![allow(clippy::many_single_char_names)]

use super::Alternative;
use statrs::distribution::{Discrete, Hypergeometric};

/// Failed and total requests of one side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Requests that failed.
    pub failed: u64,
    /// All requests (failed ones included).
    pub total: u64,
}

/// The p-value of Fisher's exact test on the 2×2 table
/// `[[x.failed, x.total − x.failed], [y.failed, y.total − y.failed]]`;
/// [`Alternative::Greater`] asks whether `x` fails more often. 1 when a
/// row or a column of the table is empty (nothing to compare). Counts
/// where `failed > total` read as `failed = total`.
#[must_use]
pub fn fisher_exact(x: Counts, y: Counts, alternative: Alternative) -> f64 {
    let (a, n1) = (x.failed.min(x.total), x.total);
    let (c, n2) = (y.failed.min(y.total), y.total);
    let failed = a + c;
    let population = n1 + n2;
    if n1 == 0 || n2 == 0 || failed == 0 || failed == population {
        return 1.0;
    }
    // The canary's failures given the margins: hypergeometric over all
    // requests, the canary's as the "successes", the failures as draws.
    let Ok(h) = Hypergeometric::new(population, n1, failed) else {
        return 1.0;
    };
    let low = failed.saturating_sub(n2);
    let high = failed.min(n1);
    let pmf = |k: u64| h.ln_pmf(k).exp();
    let sum = |from: u64, to: u64| (from..=to).map(pmf).sum::<f64>();
    let p = match alternative {
        Alternative::Greater => sum(a, high),
        Alternative::Less => sum(low, a),
        Alternative::TwoSided => {
            // Every table at most as likely as the one seen (scipy's
            // relative tolerance of 1e-7 for ties in floating point).
            let seen = pmf(a) * (1.0 + 1e-7);
            (low..=high).map(pmf).filter(|&q| q <= seen).sum()
        }
    };
    p.clamp(0.0, 1.0)
}
