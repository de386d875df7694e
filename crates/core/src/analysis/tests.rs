use super::*;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;
use statrs::distribution::{ContinuousCDF, Normal};

const REFERENCE: &str = include_str!("reference.json");

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn close(ours: f64, theirs: f64, what: &str) {
    let tol = 1e-9_f64.max(theirs.abs() * 1e-9);
    assert!(
        (ours - theirs).abs() <= tol,
        "{what}: ours {ours}, scipy {theirs}"
    );
}

fn alternatives() -> [(&'static str, Alternative); 3] {
    [
        ("greater", Alternative::Greater),
        ("less", Alternative::Less),
        ("two-sided", Alternative::TwoSided),
    ]
}

#[test]
fn mann_whitney_and_hodges_lehmann_equal_the_reference() {
    let r: Value = serde_json::from_str(REFERENCE).unwrap();
    let cases = r["values"].as_array().unwrap();
    assert!(cases.len() >= 9);
    for (i, c) in cases.iter().enumerate() {
        let (x, y) = (floats(&c["canary"]), floats(&c["baseline"]));
        for (name, alt) in alternatives() {
            let u = rank::mann_whitney(&x, &y, alt);
            close(
                u.u,
                c[name]["u"].as_f64().unwrap(),
                &format!("case {i} {name} U"),
            );
            close(
                u.p,
                c[name]["p"].as_f64().unwrap(),
                &format!("case {i} {name} p"),
            );
        }
        let hl = rank::hodges_lehmann(&x, &y, 0.95);
        let want = &c["hodges_lehmann_95"];
        close(
            hl.estimate,
            want["estimate"].as_f64().unwrap(),
            &format!("case {i} HL"),
        );
        close(
            hl.low,
            want["low"].as_f64().unwrap(),
            &format!("case {i} HL low"),
        );
        close(
            hl.high,
            want["high"].as_f64().unwrap(),
            &format!("case {i} HL high"),
        );
    }
}

#[test]
fn fisher_exact_equals_the_reference() {
    let r: Value = serde_json::from_str(REFERENCE).unwrap();
    let cases = r["counts"].as_array().unwrap();
    assert!(cases.len() >= 9);
    for (i, c) in cases.iter().enumerate() {
        let side = |k: &str| Counts {
            failed: c[k][0].as_u64().unwrap(),
            total: c[k][1].as_u64().unwrap(),
        };
        for (name, alt) in alternatives() {
            let p = fisher::fisher_exact(side("canary"), side("baseline"), alt);
            let want = c[name].as_f64().unwrap();
            // Sums of many small terms: a relative 1e-7, as scipy's own
            // tolerance for equally likely tables.
            assert!(
                (p - want).abs() <= 1e-7_f64.max(want * 1e-7),
                "case {i} {name}: ours {p}, scipy {want}"
            );
        }
    }
}

/// Lognormal samples around `median` (a latency's usual shape).
fn latencies(rng: &mut StdRng, n: usize, median: f64, sigma: f64) -> Vec<f64> {
    let normal = Normal::standard();
    (0..n)
        .map(|_| {
            let u: f64 = rng.random_range(1e-12..1.0);
            median * (sigma * normal.inverse_cdf(u)).exp()
        })
        .collect()
}

fn latency_metric(min_samples: u64) -> Metric {
    Metric {
        name: "latency".into(),
        direction: Direction::Increase,
        critical: false,
        min_samples,
        tolerance: 0.1,
        weight: 1.0,
    }
}

/// The share of `trials` seeded analyses where a canary `slower` (0.3:
/// 30 % slower) than its baseline fails, `n` samples a side.
fn failure_rate(n: usize, slower: f64, trials: u64) -> f64 {
    let m = latency_metric(8);
    let failed = (0..trials)
        .filter(|&seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            let canary = latencies(&mut rng, n, 100.0 * (1.0 + slower), 0.3);
            let baseline = latencies(&mut rng, n, 100.0, 0.3);
            judge_metric(&m, &Data::Values { canary, baseline }, 0.05).verdict == Verdict::Fail
        })
        .count();
    failed as f64 / trials as f64
}

#[test]
fn equal_versions_fail_rarely() {
    // The stated false-failure rate of one metric: alpha (5 %), within
    // the spread of 500 trials; fewer once the samples are enough to see
    // that the shift is under the 10 % tolerance. (One metric failing of
    // several pauses the release, it does not roll it back: the score.)
    for n in [10, 20, 50] {
        let rate = failure_rate(n, 0.0, 500);
        assert!(
            rate <= 0.07,
            "{n} samples a side: {rate} of equal versions failed"
        );
    }
    let rate = failure_rate(150, 0.0, 300);
    assert!(
        rate <= 0.02,
        "150 samples a side: {rate} of equal versions failed"
    );
}

#[test]
fn a_thirty_percent_regression_is_caught() {
    // The stated power (docs/gates.md, measured over 2000 trials by the
    // `analysis_power` example): 30 % slower fails 83 % of the time from 20
    // samples a side, 99 % from 50; here within the spread of 500 trials.
    let at20 = failure_rate(20, 0.3, 500);
    assert!(at20 >= 0.75, "20 samples: caught {at20}");
    let at50 = failure_rate(50, 0.3, 500);
    assert!(at50 >= 0.97, "50 samples: caught {at50}");
}

#[test]
fn a_significant_but_tiny_change_passes() {
    // 5 % slower, 2000 samples a side: significant, under the tolerance.
    let mut rng = StdRng::seed_from_u64(7);
    let canary = latencies(&mut rng, 2000, 105.0, 0.3);
    let baseline = latencies(&mut rng, 2000, 100.0, 0.3);
    let j = judge_metric(&latency_metric(8), &Data::Values { canary, baseline }, 0.05);
    assert!(j.p_value.unwrap() < 0.05, "{j:?}");
    assert_eq!(j.verdict, Verdict::Pass, "{}", j.reason);
    // The same change with no tolerance fails.
    let mut strict = latency_metric(8);
    strict.tolerance = 0.0;
    let mut rng = StdRng::seed_from_u64(7);
    let canary = latencies(&mut rng, 2000, 105.0, 0.3);
    let baseline = latencies(&mut rng, 2000, 100.0, 0.3);
    let j = judge_metric(&strict, &Data::Values { canary, baseline }, 0.05);
    assert_eq!(j.verdict, Verdict::Fail, "{}", j.reason);
}

#[test]
fn the_direction_decides_which_change_is_bad() {
    let mut rng = StdRng::seed_from_u64(3);
    let canary = latencies(&mut rng, 50, 60.0, 0.3);
    let baseline = latencies(&mut rng, 50, 100.0, 0.3);
    let data = Data::Values { canary, baseline };
    let mut m = latency_metric(8);
    assert_eq!(judge_metric(&m, &data, 0.05).verdict, Verdict::Pass);
    m.direction = Direction::Decrease;
    assert_eq!(judge_metric(&m, &data, 0.05).verdict, Verdict::Fail);
    m.direction = Direction::Either;
    assert_eq!(judge_metric(&m, &data, 0.05).verdict, Verdict::Fail);
}

fn errors(min_samples: u64) -> Metric {
    Metric {
        name: "errors".into(),
        direction: Direction::Increase,
        critical: false,
        min_samples,
        tolerance: 0.001,
        weight: 1.0,
    }
}

fn counts(cf: u64, ct: u64, bf: u64, bt: u64) -> Data {
    Data::Counts {
        canary: Counts {
            failed: cf,
            total: ct,
        },
        baseline: Counts {
            failed: bf,
            total: bt,
        },
    }
}

#[test]
fn errors_against_a_baseline_with_none() {
    // No errors on either side: a pass, not a division by zero.
    let j = judge_metric(&errors(100), &counts(0, 1000, 0, 1000), 0.05);
    assert_eq!(
        (j.verdict, j.p_value),
        (Verdict::Pass, Some(1.0)),
        "{}",
        j.reason
    );
    // 2 % of the canary's requests fail, none of the baseline's.
    let j = judge_metric(&errors(100), &counts(20, 1000, 0, 1000), 0.05);
    assert_eq!(j.verdict, Verdict::Fail, "{}", j.reason);
    assert!(
        j.reason
            .contains("errors: canary +2.00 points of failing requests against baseline, beyond the 0.10-point tolerance"),
        "{}",
        j.reason
    );
    // One failed request is noise.
    let j = judge_metric(&errors(100), &counts(1, 1000, 0, 1000), 0.05);
    assert_eq!(j.verdict, Verdict::Pass, "{}", j.reason);
    // A handful of requests is too few to tell, whatever failed.
    let j = judge_metric(&errors(100), &counts(5, 5, 0, 400), 0.05);
    assert_eq!(j.verdict, Verdict::Inconclusive, "{}", j.reason);
    assert!(
        j.reason
            .contains("5 canary and 400 baseline requests, 100 needed"),
        "{}",
        j.reason
    );
}

fn verdict_of(v: Verdict) -> (Metric, Data) {
    // Data that make `m` come out `v`.
    let data = match v {
        Verdict::Pass => counts(0, 1000, 0, 1000),
        Verdict::Fail => counts(100, 1000, 0, 1000),
        Verdict::Inconclusive => counts(0, 1, 0, 1),
    };
    let mut m = errors(100);
    m.name = format!("m-{v:?}");
    (m, data)
}

#[test]
fn the_score_maps_onto_continue_pause_and_roll_back() {
    let s = Settings::default();
    let all = |vs: &[Verdict]| {
        let metrics: Vec<_> = vs.iter().map(|&v| verdict_of(v)).collect();
        judge(&metrics, &s)
    };
    use Verdict::*;
    assert_eq!(all(&[Pass, Pass, Pass]).outcome, Outcome::Pass);
    assert_eq!(all(&[Inconclusive; 3]).outcome, Outcome::Marginal);
    assert_eq!(all(&[Pass, Pass, Inconclusive]).outcome, Outcome::Marginal);
    // One failure in ten, 90 %: passes at the default pass mark.
    let mut nine = vec![Pass; 9];
    nine.push(Fail);
    let j = all(&nine);
    assert_eq!((j.outcome, j.score), (Outcome::Pass, 90.0), "{}", j.reason);
    assert_eq!(all(&[Pass, Pass, Pass, Fail]).outcome, Outcome::Marginal);
    let j = all(&[Pass, Fail]);
    assert_eq!(j.outcome, Outcome::Fail, "{}", j.reason);
    assert!(
        j.reason.contains("score 50 below the marginal 75"),
        "{}",
        j.reason
    );
    // Nothing passed: 0, never "-0" (an empty f64 sum).
    let j = all(&[Fail]);
    assert!(j.reason.starts_with("score 0 below"), "{}", j.reason);
    assert_eq!(j.score.to_string(), "0");
    // A critical metric fails the release alone.
    let mut metrics: Vec<_> = vec![Pass; 9].into_iter().map(verdict_of).collect();
    let (mut crit, data) = verdict_of(Fail);
    crit.critical = true;
    metrics.push((crit, data));
    let j = judge(&metrics, &s);
    assert_eq!(j.outcome, Outcome::Fail);
    assert!(
        j.reason.starts_with("critical metric failed"),
        "{}",
        j.reason
    );
}

fn verdicts() -> impl Strategy<Value = Vec<(Verdict, bool, u8)>> {
    prop::collection::vec(
        (
            prop_oneof![
                Just(Verdict::Pass),
                Just(Verdict::Fail),
                Just(Verdict::Inconclusive)
            ],
            any::<bool>(),
            1u8..5,
        ),
        1..8,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Fewer samples than the minimum is inconclusive, whatever they say.
    #[test]
    fn too_few_samples_is_always_inconclusive(
        canary in prop::collection::vec(0.0f64..1e6, 0..20),
        baseline in prop::collection::vec(0.0f64..1e6, 0..20),
        failed in 0u64..50,
        total in 0u64..50,
    ) {
        let m = latency_metric(20);
        let j = judge_metric(&m, &Data::Values { canary, baseline }, 0.05);
        prop_assert_eq!(j.verdict, Verdict::Inconclusive);
        prop_assert!(j.p_value.is_none());
        let j = judge_metric(&errors(50), &counts(failed, total, 0, 1000), 0.05);
        prop_assert_eq!(j.verdict, Verdict::Inconclusive);
    }

    /// A lack of data never rolls back and never promotes: turning an
    /// inconclusive metric into a pass never makes the outcome worse, and
    /// an outcome with inconclusive metrics is never Pass unless the passed
    /// ones alone reach the mark.
    #[test]
    fn a_lack_of_data_neither_rolls_back_nor_promotes(vs in verdicts()) {
        let s = Settings::default();
        let build = |vs: &[(Verdict, bool, u8)]| -> Vec<(Metric, Data)> {
            vs.iter().map(|&(v, critical, w)| {
                let (mut metric, data) = verdict_of(v);
                metric.critical = critical;
                metric.weight = f64::from(w);
                (metric, data)
            }).collect()
        };
        let j = judge(&build(&vs), &s);
        let resolved: Vec<_> = vs.iter().map(|&(v, c, w)| {
            (if v == Verdict::Inconclusive { Verdict::Pass } else { v }, c, w)
        }).collect();
        let best = judge(&build(&resolved), &s);
        let rank = |o: Outcome| match o { Outcome::Fail => 0, Outcome::Marginal => 1, Outcome::Pass => 2 };
        prop_assert!(rank(j.outcome) <= rank(best.outcome));
        if j.outcome == Outcome::Fail {
            prop_assert_eq!(best.outcome, Outcome::Fail, "failed for a lack of data: {}", j.reason);
        }
        if j.outcome == Outcome::Pass {
            prop_assert!(j.score >= s.pass);
        }
    }

    /// The p-values are probabilities and U stays within its range.
    #[test]
    fn statistics_stay_in_range(
        canary in prop::collection::vec(-1e3f64..1e3, 1..30),
        baseline in prop::collection::vec(-1e3f64..1e3, 1..30),
    ) {
        for (_, alt) in alternatives() {
            let u = rank::mann_whitney(&canary, &baseline, alt);
            prop_assert!((0.0..=1.0).contains(&u.p));
            prop_assert!(u.u >= 0.0 && u.u <= (canary.len() * baseline.len()) as f64);
        }
        let hl = rank::hodges_lehmann(&canary, &baseline, 0.95);
        prop_assert!(hl.low <= hl.estimate && hl.estimate <= hl.high);
    }
}
