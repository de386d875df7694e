//! Prints the judge's measured error rates: how often an equal canary fails
//! (false failures) and how often a canary 10/30/50 % slower than its
//! baseline fails (detection), per number of samples a side, over seeded
//! trials of lognormal latencies (σ = 0.3 in log space, the spread of a
//! typical service's per-scrape p90). The judge's defaults: alpha 0.05,
//! tolerance 10 %.
//!
//! `cargo run --release -p releaseplan-core --example analysis_power`

// An example that prints a table: the pedantic lints of tests apply.
#![allow(clippy::pedantic)]

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use releaseplan_core::analysis::{Counts, Data, Direction, Metric, Verdict, judge_metric};
use statrs::distribution::{ContinuousCDF, Normal};

const TRIALS: u64 = 2000;

fn latencies(rng: &mut StdRng, n: usize, median: f64) -> Vec<f64> {
    let normal = Normal::standard();
    (0..n)
        .map(|_| {
            let u: f64 = rng.random_range(1e-12..1.0);
            median * (0.3 * normal.inverse_cdf(u)).exp()
        })
        .collect()
}

fn rate(n: usize, slower: f64) -> f64 {
    let m = Metric {
        name: "latency".into(),
        direction: Direction::Increase,
        critical: false,
        min_samples: 5,
        tolerance: 0.1,
        weight: 1.0,
    };
    let failed = (0..TRIALS)
        .filter(|&seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            let canary = latencies(&mut rng, n, 100.0 * (1.0 + slower));
            let baseline = latencies(&mut rng, n, 100.0);
            judge_metric(&m, &Data::Values { canary, baseline }, 0.05).verdict == Verdict::Fail
        })
        .count();
    failed as f64 / TRIALS as f64
}

/// Errors: the baseline fails 1 % of its requests, the canary `rate`.
fn error_rate(requests: u64, canary_rate: f64) -> f64 {
    let m = Metric {
        name: "errors".into(),
        direction: Direction::Increase,
        critical: false,
        min_samples: 50,
        tolerance: 0.001,
        weight: 1.0,
    };
    let failed = (0..TRIALS)
        .filter(|&seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut draw =
                |p: f64| (0..requests).filter(|_| rng.random::<f64>() < p).count() as u64;
            let canary = Counts {
                failed: draw(canary_rate),
                total: requests,
            };
            let baseline = Counts {
                failed: draw(0.01),
                total: requests,
            };
            judge_metric(&m, &Data::Counts { canary, baseline }, 0.05).verdict == Verdict::Fail
        })
        .count();
    failed as f64 / TRIALS as f64
}

fn main() {
    println!("latency (Mann-Whitney U + Hodges-Lehmann), {TRIALS} trials a cell");
    println!(
        "| samples a side | equal: false failures | 10 % slower | 30 % slower | 50 % slower |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for n in [5, 10, 20, 50, 100] {
        println!(
            "| {n} | {:.1} % | {:.1} % | {:.1} % | {:.1} % |",
            rate(n, 0.0) * 100.0,
            rate(n, 0.1) * 100.0,
            rate(n, 0.3) * 100.0,
            rate(n, 0.5) * 100.0
        );
    }
    println!();
    println!("errors (Fisher's exact), baseline failing 1 %, {TRIALS} trials a cell");
    println!("| requests a side | equal: false failures | 1.5 % | 2 % | 3 % |");
    println!("|---:|---:|---:|---:|---:|");
    for n in [100, 500, 1000, 5000] {
        println!(
            "| {n} | {:.1} % | {:.1} % | {:.1} % | {:.1} % |",
            error_rate(n, 0.01) * 100.0,
            error_rate(n, 0.015) * 100.0,
            error_rate(n, 0.02) * 100.0,
            error_rate(n, 0.03) * 100.0
        );
    }
}
