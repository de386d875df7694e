//! Canary analysis in the API: a gate kind, `analysis`, whose metrics the
//! judge (`crate::analysis`) compares between the new revision and the one
//! it is compared with (the stable revision's pods), instead of checking one
//! number against a threshold someone guessed.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// CEL on a tolerance: a percentage.
/// A component's baseline (`baseline: true`) copies a stable Deployment revision.
pub const BASELINE_DEPLOYMENT_ONLY_RULE: &str =
    "!has(self.baseline) || !self.baseline || !has(self.kind) || self.kind == 'Deployment'";
/// Message of [`BASELINE_DEPLOYMENT_ONLY_RULE`].
pub const BASELINE_DEPLOYMENT_ONLY_MESSAGE: &str = "baseline is for Deployment components only: it runs a copy of the stable revision beside the canary, and a StatefulSet or DaemonSet replaces its pods in place";
/// Blue-green runs the whole new revision beside the whole old one: no canary
/// step for a baseline to stand beside.
pub const BASELINE_NOT_BLUE_GREEN_RULE: &str =
    "!has(self.strategy.blueGreen) || self.components.all(c, !has(c.baseline) || !c.baseline)";
/// Message of [`BASELINE_NOT_BLUE_GREEN_RULE`].
pub const BASELINE_NOT_BLUE_GREEN_MESSAGE: &str =
    "strategy.blueGreen runs both revisions at full scale: a baseline stands beside canary steps";

const PERCENT_RULE: &str = "self.matches('^[0-9]{1,3}(\\\\.[0-9]{1,4})?%$')";

/// An analysis gate: each metric queried for the new revision and for the
/// one it is compared with, and judged by the statistical judge.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("!has(self.marginal) || !has(self.pass) || self.marginal <= self.pass").message("analysis.marginal must not be above analysis.pass"),
    validation = Rule::new("self.metrics.all(m, self.metrics.exists_one(n, n.name == m.name))").message("analysis.metrics: metric names must be unique")
)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisCheck {
    /// Base URL of the Prometheus HTTP API, e.g. `http://prometheus.monitoring:9090`.
    #[x_kube(validation = Rule::new("self.matches('^https?://[^ ]+$')").message("analysis address must be an http:// or https:// URL"))]
    #[schemars(length(max = 512))]
    pub address: String,

    /// The metrics judged, each for both sides.
    #[schemars(length(min = 1, max = 20))]
    pub metrics: Vec<AnalysisMetric>,

    /// How far back each evaluation looks: the range of a metric's range
    /// query, `{{window}}` in a count's queries. Default `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(super::DURATION_RULE).message("analysis.lookback must be a duration such as 5m or 1h"))]
    #[schemars(length(max = 32))]
    pub lookback: Option<String>,

    /// One sample per this much time in a metric's range query. Default `15s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(super::DURATION_RULE).message("analysis.sampleInterval must be a duration such as 15s or 1m"))]
    #[schemars(length(max = 32))]
    pub sample_interval: Option<String>,

    /// How often the analysis is evaluated. Default `1m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(super::DURATION_RULE).message("analysis.interval must be a duration such as 30s or 1m"))]
    #[schemars(length(max = 32))]
    pub interval: Option<String>,

    /// The score (0–100: the weighted share of metrics that passed) at or
    /// above which the analysis passes. Default 90.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub pass: Option<i32>,

    /// The score below which the analysis fails, counting every
    /// inconclusive metric as passed (so a lack of data never fails it);
    /// between the two it is inconclusive. Default 75.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub marginal: Option<i32>,

    /// Significance level of each test, in percent: a difference counts
    /// when its p-value is below it. Default `5%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(PERCENT_RULE).message("analysis.significance must be a percentage such as 5% or 1%"))]
    #[schemars(length(max = 16))]
    pub significance: Option<String>,

    /// Failed analyses tolerated before the rollout fails. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub failure_limit: Option<i32>,

    /// Inconclusive analyses (too few samples, a score between `marginal`
    /// and `pass`) tolerated in a step; one more pauses the rollout until a
    /// human promotes or aborts it. Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub inconclusive_limit: Option<i32>,

    /// Timeout of one query, in seconds. Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 300))]
    pub timeout_seconds: Option<i32>,
}

/// One metric of an analysis: a `query` giving one series of samples over
/// time (latency, CPU), or `failed` and `total` giving two counts (errors
/// of requests). Each query names the side it reads with `{{revision}}`
/// (and `{{role}}`: `canary`, or `stable` for the side compared with).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("has(self.query) != (has(self.failed) && has(self.total))").message("a metric is either a query or failed and total"),
    validation = Rule::new("has(self.failed) == has(self.total)").message("failed and total go together")
)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisMetric {
    /// Name of the metric, shown in the verdict.
    #[x_kube(validation = Rule::new(super::GATE_NAME_RULE).message("metric name must be a DNS label"))]
    #[schemars(length(min = 1, max = 40))]
    pub name: String,

    /// PromQL giving one series: asked as a range query over `lookback`,
    /// one sample per `sampleInterval`, once for each side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub query: Option<String>,

    /// PromQL giving one number: the side's failed requests over
    /// `{{window}}` (the lookback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub failed: Option<String>,

    /// PromQL giving one number: the side's requests over `{{window}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub total: Option<String>,

    /// Which change is bad: `Increase` (the default: latency, errors),
    /// `Decrease` (throughput) or `Either`.
    #[serde(default)]
    pub direction: AnalysisDirection,

    /// The smallest change that matters. For a query, a share of the
    /// compared side's median (`10%`: 10 % slower); for counts, of requests
    /// (`0.1%`: 0.1 points more failing). Default `10%` for a query, `0.1%`
    /// for counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(PERCENT_RULE).message("tolerance must be a percentage such as 10% or 0.5%"))]
    #[schemars(length(max = 16))]
    pub tolerance: Option<String>,

    /// Fewer samples (a query) or requests (counts) than this on either side
    /// and the metric is inconclusive, never passed nor failed. Default 10
    /// for a query, 100 for counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub min_samples: Option<i32>,

    /// A failure of this metric fails the analysis whatever the score.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub critical: bool,

    /// The metric's weight in the score. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
}

/// Which change of a metric is bad.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
pub enum AnalysisDirection {
    /// Higher is worse.
    #[default]
    Increase,
    /// Lower is worse.
    Decrease,
    /// Any change is bad.
    Either,
}

/// The `analysis` of a gate template: the analysis and how its queries
/// reach Prometheus (the plan's reference names the gate and its component).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(validation = Rule::new(super::access::AUTH_HEADER_RULE).message(super::access::AUTH_HEADER_MESSAGE))]
#[serde(rename_all = "camelCase")]
pub struct TemplateAnalysis {
    /// The analysis.
    #[serde(flatten)]
    pub check: AnalysisCheck,

    /// Credentials sent with every query (bearer token or basic auth), read
    /// from Secrets in the operator's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<super::access::GateAuth>,

    /// Extra request headers, each a plain value or read from a Secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = Rule::new("self.all(h, self.exists_one(g, g.name.lowerAscii() == h.name.lowerAscii()))").message("headers: header names must be unique (case-insensitive)"))]
    #[schemars(length(max = 16))]
    pub headers: Vec<super::access::GateHeader>,

    /// TLS settings: a CA bundle to trust for this gate's server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<super::access::GateTls>,
}

/// An analysis gate as written: the check with the gate's name, component
/// and access (the shape [`super::GateEntry::Analysis`] holds).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct AnalysisGate {
    /// Name of the gate.
    pub name: String,
    /// The analysis.
    pub check: AnalysisCheck,
    /// Credentials sent with every query.
    pub auth: Option<super::access::GateAuth>,
    /// Extra request headers.
    pub headers: Vec<super::access::GateHeader>,
    /// A CA bundle to trust.
    pub tls: Option<super::access::GateTls>,
    /// The component judged.
    pub component: Option<String>,
}

/// Parses a tolerance or significance, `"10%"`, as a share (0.1).
pub fn percent(text: &str) -> Option<f64> {
    let n: f64 = text.strip_suffix('%')?.parse().ok()?;
    (n.is_finite() && n >= 0.0).then_some(n / 100.0)
}

impl AnalysisStatus {
    /// One line for a notification: the score and outcome, what was compared
    /// with, then per metric its verdict, samples on each side, change and
    /// p-value.
    pub fn summary(&self) -> String {
        use std::fmt::Write as _;
        let against = self
            .compared_with
            .as_ref()
            .map(|r| format!(" against {r}"))
            .unwrap_or_default();
        let metrics: Vec<String> = self
            .metrics
            .iter()
            .map(|m| {
                let mut s = format!(
                    "{} {} ({}/{} samples",
                    m.name, m.verdict, m.canary_samples, m.baseline_samples
                );
                // Writing into a String cannot fail.
                if let Some(e) = m.effect {
                    let _ = write!(s, ", change {:+.1}%", e * 100.0);
                }
                if let Some(p) = m.p_value {
                    let _ = write!(s, ", p {p:.2e}");
                }
                s.push(')');
                s
            })
            .collect();
        format!(
            "score {:.0} {}{against}: {}",
            self.score,
            self.outcome,
            metrics.join("; ")
        )
    }
}

/// A metric's judgement in status.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MetricVerdict {
    /// The metric.
    pub name: String,
    /// `Passed`, `Failed` or `Inconclusive`.
    pub verdict: String,
    /// The new revision's samples (a query) or requests (counts).
    pub canary_samples: i64,
    /// The compared side's samples or requests.
    pub baseline_samples: i64,
    /// Mann-Whitney U of the new revision (a query), or the odds ratio of
    /// failing (counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statistic: Option<f64>,
    /// The p-value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
    /// The change: a share of the compared side's median (a query), or the
    /// difference of the failing shares (counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<f64>,
    /// The shift's confidence interval, in the metric's unit (a query).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interval: Vec<f64>,
}

/// The last judgement of an analysis gate, in its status.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisStatus {
    /// The weighted share (0–100) of metrics that passed.
    pub score: f64,
    /// `Pass`, `Marginal` or `Fail`.
    pub outcome: String,
    /// Per metric.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<MetricVerdict>,
    /// The revision the canary was compared with: the component's baseline
    /// (`<stable>-baseline`) while it runs, else the stable revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compared_with: Option<String>,
}
