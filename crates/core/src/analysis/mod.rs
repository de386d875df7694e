//! Canary analysis: the judge that compares a canary with its baseline,
//! metric by metric, and scores the release. Pure and synchronous: samples
//! in (already fetched by the controller), one judgement out.
//!
//! Per metric, a test that fits its data: the Mann-Whitney U test with a
//! Hodges-Lehmann shift for values (latency, CPU), Fisher's exact test for
//! counts (failed of all requests). A metric fails only when the difference
//! is both significant (p below `alpha`) and larger than its tolerance in
//! the direction that is bad, so a significant but tiny change does not
//! fail a release; with fewer samples than its minimum it is inconclusive,
//! never passed and never failed.
//!
//! The score: the weighted share of metrics that passed. It maps onto what
//! the machine already does, erring to the side of a human: the release
//! fails only when it would fail even if every inconclusive metric had
//! passed (a lack of data never rolls back), passes only when the metrics
//! that passed alone reach `pass` (a lack of data never promotes), and in
//! between it is marginal: paused for a human.

// The formulas' own names (n₁, U, p, x, y), as the textbooks write them.
#![allow(clippy::many_single_char_names)]

pub mod fisher;
pub mod rank;

pub use fisher::Counts;

/// Which difference a test looks for, as scipy's `alternative`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alternative {
    /// Any difference.
    TwoSided,
    /// The first sample (the canary) larger.
    Greater,
    /// The first sample (the canary) smaller.
    Less,
}

/// Which change of a metric is bad.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Direction {
    /// Higher is worse (latency, errors).
    #[default]
    Increase,
    /// Lower is worse (throughput, cache hits).
    Decrease,
    /// Any change is bad.
    Either,
}

impl Direction {
    fn alternative(self) -> Alternative {
        match self {
            Direction::Increase => Alternative::Greater,
            Direction::Decrease => Alternative::Less,
            Direction::Either => Alternative::TwoSided,
        }
    }

    /// Whether `effect` (canary minus baseline) is bad beyond `tolerance`.
    fn beyond(self, effect: f64, tolerance: f64) -> bool {
        match self {
            Direction::Increase => effect > tolerance,
            Direction::Decrease => -effect > tolerance,
            Direction::Either => effect.abs() > tolerance,
        }
    }
}

/// How one metric is judged.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    /// The metric's name, as the verdict reports it.
    pub name: String,
    /// Which change is bad.
    pub direction: Direction,
    /// A failure of this metric fails the release whatever the score.
    pub critical: bool,
    /// Fewer samples (values) or requests (counts) on either side than this
    /// and the metric is inconclusive.
    pub min_samples: u64,
    /// The smallest change that matters: for values a share of the
    /// baseline's median (0.1: 10 % slower), for counts a share of requests
    /// (0.001: 0.1 points more of them failing).
    pub tolerance: f64,
    /// The metric's weight in the score.
    pub weight: f64,
}

/// What was measured for one metric, canary and baseline.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// Samples of a continuous quantity (one value per scrape or window).
    Values {
        /// The canary's samples.
        canary: Vec<f64>,
        /// The baseline's samples.
        baseline: Vec<f64>,
    },
    /// Failed of all requests.
    Counts {
        /// The canary's requests.
        canary: Counts,
        /// The baseline's requests.
        baseline: Counts,
    },
}

/// The judge's settings for a whole analysis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// A difference is significant below this p-value.
    pub alpha: f64,
    /// The score (0–100) at or above which the release passes.
    pub pass: f64,
    /// The score below which (counting inconclusive metrics as passed) the
    /// release fails.
    pub marginal: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            alpha: 0.05,
            pass: 90.0,
            marginal: 75.0,
        }
    }
}

/// One metric's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No significant difference beyond the tolerance.
    Pass,
    /// Significantly worse, beyond the tolerance.
    Fail,
    /// Too few samples to tell.
    Inconclusive,
}

/// One metric judged: what was compared and what came out.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricJudgement {
    /// The metric's name.
    pub name: String,
    /// The verdict.
    pub verdict: Verdict,
    /// The canary's samples (values) or requests (counts).
    pub canary_samples: u64,
    /// The baseline's samples (values) or requests (counts).
    pub baseline_samples: u64,
    /// The test statistic: U of the canary for values, the sample odds
    /// ratio for counts. `None` when inconclusive.
    pub statistic: Option<f64>,
    /// The p-value. `None` when inconclusive.
    pub p_value: Option<f64>,
    /// The change, canary against baseline: for values the Hodges-Lehmann
    /// shift as a share of the baseline's median, for counts the difference
    /// of the failed shares. `None` when inconclusive or not finite (a
    /// baseline median of zero).
    pub effect: Option<f64>,
    /// The shift's confidence interval at `1 − alpha`, in the metric's
    /// unit (values only).
    pub interval: Option<(f64, f64)>,
    /// One line a human reads.
    pub reason: String,
}

/// The judgement of a whole analysis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Continue the release.
    Pass,
    /// Pause for a human: not clearly good, not clearly bad, or not enough
    /// data.
    Marginal,
    /// Roll back.
    Fail,
}

/// Every metric's verdict, the score and the outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Judgement {
    /// Per metric, in the order given.
    pub metrics: Vec<MetricJudgement>,
    /// The weighted share (0–100) of metrics that passed.
    pub score: f64,
    /// What the release does next.
    pub outcome: Outcome,
    /// Why, in one line.
    pub reason: String,
}

/// The median of non-empty `v`, in any order.
fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    median_sorted(&s)
}

/// The median of non-empty, sorted `s`.
fn median_sorted(s: &[f64]) -> f64 {
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        f64::midpoint(s[n / 2 - 1], s[n / 2])
    }
}

/// Judges one metric (`alpha`: the significance level).
#[must_use]
pub fn judge_metric(metric: &Metric, data: &Data, alpha: f64) -> MetricJudgement {
    let (nc, nb) = match data {
        Data::Values { canary, baseline } => (canary.len() as u64, baseline.len() as u64),
        Data::Counts { canary, baseline } => (canary.total, baseline.total),
    };
    let mut j = MetricJudgement {
        name: metric.name.clone(),
        verdict: Verdict::Inconclusive,
        canary_samples: nc,
        baseline_samples: nb,
        statistic: None,
        p_value: None,
        effect: None,
        interval: None,
        reason: String::new(),
    };
    let need = metric.min_samples.max(1);
    if nc < need || nb < need {
        let unit = match data {
            Data::Values { .. } => "samples",
            Data::Counts { .. } => "requests",
        };
        j.reason = format!(
            "{}: {nc} canary and {nb} baseline {unit}, {need} needed on each side",
            metric.name
        );
        return j;
    }
    let alternative = metric.direction.alternative();
    let (p, effect) = match data {
        Data::Values { canary, baseline } => {
            let u = rank::mann_whitney(canary, baseline, alternative);
            let shift = rank::hodges_lehmann(canary, baseline, 1.0 - alpha);
            let base = median(baseline).abs();
            let effect = if shift.estimate == 0.0 {
                0.0
            } else if base > 0.0 {
                shift.estimate / base
            } else {
                f64::INFINITY.copysign(shift.estimate)
            };
            j.statistic = Some(u.u);
            j.interval = Some((shift.low, shift.high));
            (u.p, effect)
        }
        Data::Counts { canary, baseline } => {
            let p = fisher::fisher_exact(*canary, *baseline, alternative);
            #[allow(clippy::cast_precision_loss)]
            let rate = |c: &Counts| c.failed.min(c.total) as f64 / c.total as f64;
            let (rc, rb) = (rate(canary), rate(baseline));
            #[allow(clippy::cast_precision_loss)]
            let odds = {
                let a = canary.failed.min(canary.total) as f64;
                let b = canary.total as f64 - a;
                let c = baseline.failed.min(baseline.total) as f64;
                let d = baseline.total as f64 - c;
                (a * d) / (b * c)
            };
            j.statistic = odds.is_finite().then_some(odds);
            (p, rc - rb)
        }
    };
    j.p_value = Some(p);
    j.effect = effect.is_finite().then_some(effect);
    let worse = metric.direction.beyond(effect, metric.tolerance);
    j.verdict = if p < alpha && worse {
        Verdict::Fail
    } else {
        Verdict::Pass
    };
    // Values change by a share of the baseline's median; counts by points
    // of the share of requests that fail.
    let counts = matches!(data, Data::Counts { .. });
    let shown = if !effect.is_finite() {
        "a change from zero".to_string()
    } else if counts {
        format!("{:+.2} points of failing requests", effect * 100.0)
    } else {
        format!("{:+.1}%", effect * 100.0)
    };
    let tolerance = if counts {
        format!("{:.2}-point", metric.tolerance * 100.0)
    } else {
        format!("{:.1}%", metric.tolerance * 100.0)
    };
    j.reason = match j.verdict {
        Verdict::Fail => format!(
            "{}: canary {shown} against baseline, beyond the {tolerance} tolerance (p = {p:.2e} < {alpha})",
            metric.name,
        ),
        _ => format!(
            "{}: canary {shown} against baseline (p = {p:.2e}, tolerance {tolerance})",
            metric.name,
        ),
    };
    j
}

/// Judges every metric and scores the analysis (see the module's doc).
#[must_use]
pub fn judge(metrics: &[(Metric, Data)], settings: &Settings) -> Judgement {
    let judged: Vec<MetricJudgement> = metrics
        .iter()
        .map(|(m, d)| judge_metric(m, d, settings.alpha))
        .collect();
    let weight = |v: Verdict| -> f64 {
        metrics
            .iter()
            .zip(&judged)
            .filter(|(_, j)| j.verdict == v)
            .map(|((m, _), _)| m.weight.max(0.0))
            .sum()
    };
    // An empty f64 sum is -0.0: `+ 0.0` makes it the 0 a reader expects.
    let (passed, failed, unknown) = (
        weight(Verdict::Pass) + 0.0,
        weight(Verdict::Fail) + 0.0,
        weight(Verdict::Inconclusive) + 0.0,
    );
    let total = passed + failed + unknown;
    let score = if total > 0.0 {
        100.0 * passed / total
    } else {
        0.0
    };
    let hopeful = if total > 0.0 {
        100.0 * (total - failed) / total
    } else {
        100.0
    };
    let critical = metrics
        .iter()
        .zip(&judged)
        .find(|((m, _), j)| m.critical && j.verdict == Verdict::Fail);
    let (outcome, reason) = if let Some((_, j)) = critical {
        (
            Outcome::Fail,
            format!("critical metric failed: {}", j.reason),
        )
    } else if total > 0.0 && hopeful < settings.marginal {
        let first = judged
            .iter()
            .find(|j| j.verdict == Verdict::Fail)
            .map_or(String::new(), |j| format!("; {}", j.reason));
        (
            Outcome::Fail,
            format!(
                "score {score:.0} below the marginal {:.0}{first}",
                settings.marginal
            ),
        )
    } else if total > 0.0 && score >= settings.pass {
        (
            Outcome::Pass,
            format!("score {score:.0}, pass at {:.0}", settings.pass),
        )
    } else if let Some(j) = judged.iter().find(|j| j.verdict == Verdict::Inconclusive) {
        (
            Outcome::Marginal,
            format!("score {score:.0}, inconclusive: {}", j.reason),
        )
    } else {
        (
            Outcome::Marginal,
            format!(
                "score {score:.0}, between the marginal {:.0} and pass {:.0}",
                settings.marginal, settings.pass
            ),
        )
    };
    Judgement {
        metrics: judged,
        score,
        outcome,
        reason,
    }
}

#[cfg(test)]
mod tests;
