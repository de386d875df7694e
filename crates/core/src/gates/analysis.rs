//! Analysis gates, the pure half: the gate's settings parsed, the range and
//! instant query URLs, the answers read as samples, and the judge's
//! judgement turned into one evaluation of the gate. The operator crate
//! asks Prometheus (`releaseplan::gates::analysis`).

use std::time::Duration;

use serde_json::Value;

use super::access::Access;
use super::prometheus::{error_of, with_detail};
use super::text::redact;
use super::{GateResult, timeout_of};
use crate::analysis::{self, Data, Direction, Judgement, Outcome, Settings, Verdict};
use crate::api::analysis::{
    AnalysisDirection, AnalysisGate, AnalysisStatus, MetricVerdict, percent,
};
use crate::api::time::parse_duration;

/// `lookback` when unset.
pub const DEFAULT_LOOKBACK: Duration = Duration::from_secs(300);
/// `sampleInterval` when unset.
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_secs(15);
/// `interval` when unset.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// `inconclusiveLimit` when unset.
pub const DEFAULT_INCONCLUSIVE_LIMIT: i32 = 3;
/// Queries of one evaluation sent at once.
pub const PARALLEL_QUERIES: usize = 4;

/// What one metric asks Prometheus, per side.
#[derive(Clone, Debug, PartialEq)]
pub enum Queries {
    /// One range query giving samples over time.
    Values(String),
    /// Two instant queries giving failed and all requests.
    Counts {
        /// Failed requests over the window.
        failed: String,
        /// All requests over the window.
        total: String,
    },
}

/// One metric, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricSpec {
    /// How the judge judges it.
    pub metric: analysis::Metric,
    /// What is asked.
    pub queries: Queries,
}

/// An analysis gate, parsed, with its defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct AnalysisSpec {
    /// Name of the gate.
    pub name: String,
    /// Base URL of the Prometheus HTTP API.
    pub address: String,
    /// The metrics.
    pub metrics: Vec<MetricSpec>,
    /// How far back a range query looks, and `{{window}}`.
    pub lookback: Duration,
    /// One sample per this much time.
    pub sample_interval: Duration,
    /// Time between evaluations.
    pub interval: Duration,
    /// The judge's settings.
    pub settings: Settings,
    /// Failed analyses tolerated.
    pub failure_limit: i32,
    /// Inconclusive analyses tolerated.
    pub inconclusive_limit: i32,
    /// Timeout of one query.
    pub timeout: Duration,
    /// Credentials, headers and CA bundle.
    pub access: Access,
}

fn duration(
    text: Option<&str>,
    field: &'static str,
    default: Duration,
) -> Result<Duration, (&'static str, String)> {
    match text {
        Some(s) => parse_duration(s)
            .map(|d| d.max(Duration::from_secs(1)))
            .map_err(|m| (field, m)),
        None => Ok(default),
    }
}

impl AnalysisSpec {
    /// Parses a gate, applying the defaults; an error names the field under
    /// the gate (the CRD's rules normally refuse it first).
    pub fn parse(gate: &AnalysisGate) -> Result<AnalysisSpec, (&'static str, String)> {
        let c = &gate.check;
        let mut metrics = Vec::with_capacity(c.metrics.len());
        for m in &c.metrics {
            let queries = match (&m.query, &m.failed, &m.total) {
                (Some(q), None, None) => Queries::Values(q.clone()),
                (None, Some(f), Some(t)) => Queries::Counts {
                    failed: f.clone(),
                    total: t.clone(),
                },
                _ => {
                    return Err((
                        "metrics",
                        format!("metric {}: either a query or failed and total", m.name),
                    ));
                }
            };
            let counts = matches!(queries, Queries::Counts { .. });
            let tolerance = match m.tolerance.as_deref() {
                Some(t) => percent(t).ok_or((
                    "metrics",
                    format!("metric {}: tolerance {t} is not a percentage", m.name),
                ))?,
                None if counts => 0.001,
                None => 0.1,
            };
            metrics.push(MetricSpec {
                metric: analysis::Metric {
                    name: m.name.clone(),
                    direction: match m.direction {
                        AnalysisDirection::Increase => Direction::Increase,
                        AnalysisDirection::Decrease => Direction::Decrease,
                        AnalysisDirection::Either => Direction::Either,
                    },
                    critical: m.critical,
                    min_samples: u64::try_from(
                        m.min_samples
                            .unwrap_or(if counts { 100 } else { 10 })
                            .max(1),
                    )
                    .unwrap_or(1),
                    tolerance,
                    weight: f64::from(m.weight.unwrap_or(1).max(1)),
                },
                queries,
            });
        }
        let alpha = match c.significance.as_deref() {
            Some(s) => percent(s).filter(|a| *a > 0.0 && *a < 1.0).ok_or((
                "significance",
                format!("{s} is not a percentage between 0 and 100"),
            ))?,
            None => 0.05,
        };
        let defaults = Settings::default();
        let pass = c.pass.map_or(defaults.pass, f64::from);
        let marginal = c.marginal.map_or(defaults.marginal, f64::from).min(pass);
        Ok(AnalysisSpec {
            name: gate.name.clone(),
            address: c.address.clone(),
            metrics,
            lookback: duration(c.lookback.as_deref(), "lookback", DEFAULT_LOOKBACK)?,
            sample_interval: duration(
                c.sample_interval.as_deref(),
                "sampleInterval",
                DEFAULT_SAMPLE_INTERVAL,
            )?,
            interval: duration(c.interval.as_deref(), "interval", DEFAULT_INTERVAL)?,
            settings: Settings {
                alpha,
                pass,
                marginal,
            },
            failure_limit: c.failure_limit.unwrap_or(0).max(0),
            inconclusive_limit: c
                .inconclusive_limit
                .unwrap_or(DEFAULT_INCONCLUSIVE_LIMIT)
                .max(0),
            timeout: timeout_of(c.timeout_seconds),
            access: Access::of(gate.auth.as_ref(), &gate.headers, gate.tls.as_ref()),
        })
    }

    /// Queries of one evaluation: per metric, one or two for each side.
    pub fn query_count(&self) -> usize {
        self.metrics
            .iter()
            .map(|m| match m.queries {
                Queries::Values(_) => 2,
                Queries::Counts { .. } => 4,
            })
            .sum()
    }

    /// The longest one evaluation may take: its queries, [`PARALLEL_QUERIES`] at once.
    pub fn worst_case(&self) -> Duration {
        let rounds = self.query_count().div_ceil(PARALLEL_QUERIES).max(1);
        self.timeout * u32::try_from(rounds).unwrap_or(u32::MAX)
    }
}

/// Which side a query is rendered for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The new revision: `{{revision}}` is it, `{{role}}` is `canary`.
    Canary,
    /// The side compared with: `{{revision}}` is the baseline revision and
    /// `{{role}}` `baseline` when the component runs a baseline, else the
    /// stable revision and `stable`.
    Baseline,
}

/// A metric's query for one side: `{{window}}` (the lookback, `300s`),
/// `{{sampleInterval}}` (`15s`: a range query's rate window that makes each
/// sample its own requests, not its neighbours' too), `{{role}}` and
/// `{{revision}}` of that side, and the other placeholders of a Prometheus
/// gate (`{{plan}}`, `{{namespace}}`, `{{component}}`, `{{stableRevision}}`).
pub fn render(
    query: &str,
    vars: &super::prometheus::TemplateVars,
    side: Side,
    lookback: Duration,
    sample_interval: Duration,
) -> String {
    let window = format!("{}s", lookback.as_secs().max(1));
    let step = format!("{}s", sample_interval.as_secs().max(1));
    let mut side_vars = vars.clone();
    let role = match side {
        Side::Canary => "canary",
        Side::Baseline => {
            side_vars.revision.clone_from(compared_with(vars));
            if vars.baseline_revision.is_empty() {
                "stable"
            } else {
                "baseline"
            }
        }
    };
    super::prometheus::render_with(
        query,
        &side_vars,
        &[
            ("window", &window),
            ("sampleInterval", &step),
            ("role", role),
        ],
    )
}

/// The revision the new one is compared with: the component's baseline
/// when it runs one, else its stable revision (empty: none serves).
pub fn compared_with(vars: &super::prometheus::TemplateVars) -> &String {
    if vars.baseline_revision.is_empty() {
        &vars.stable_revision
    } else {
        &vars.baseline_revision
    }
}

/// `<address>/api/v1/query_range?query=…&start=…&end=…&step=…&timeout=…`,
/// built as [`super::prometheus::query_url`] builds its URL (the address's
/// own query and fragment dropped). `end` in Unix seconds.
pub fn range_url(
    address: &str,
    query: &str,
    end: i64,
    lookback: Duration,
    step: Duration,
    timeout: Duration,
) -> Result<url::Url, String> {
    let mut url = super::prometheus::query_url(address, query, timeout)?;
    url.path_segments_mut()
        .map_err(|()| format!("invalid prometheus address {}", redact(address)))?
        .pop()
        .push("query_range");
    let start = end - i64::try_from(lookback.as_secs()).unwrap_or(i64::MAX / 2);
    url.query_pairs_mut()
        .append_pair("start", &start.to_string())
        .append_pair("end", &end.to_string())
        .append_pair("step", &format!("{}s", step.as_secs().max(1)));
    Ok(url)
}

fn success(body: &Value, detail: usize) -> Result<&Value, String> {
    match body.get("status").and_then(Value::as_str) {
        Some("success") => body
            .get("data")
            .ok_or_else(|| "unexpected prometheus answer: no data field".to_string()),
        Some(_) => Err(with_detail(
            "prometheus query failed".to_string(),
            &error_of(body, detail),
        )),
        None => Err("unexpected prometheus answer: no status field".to_string()),
    }
}

fn number(sample: &Value) -> Result<f64, String> {
    let text = sample.get(1).and_then(Value::as_str).ok_or_else(|| {
        "unexpected prometheus answer: sample is not [time, \"value\"]".to_string()
    })?;
    super::prometheus::parse_sample(text)
        .ok_or_else(|| "unexpected prometheus answer: sample value is not a number".to_string())
}

/// The samples of a range query's answer: the finite values of its one
/// series (none when it has no series). Several series is an error that
/// says to aggregate them.
pub fn range_samples(body: &Value, detail: usize) -> Result<Vec<f64>, String> {
    let data = success(body, detail)?;
    if data.get("resultType").and_then(Value::as_str) != Some("matrix") {
        return Err("a metric's query must give a range vector (one series over time)".into());
    }
    let series = data
        .get("result")
        .and_then(Value::as_array)
        .ok_or("unexpected prometheus answer: matrix result is not a list")?;
    match series.as_slice() {
        [] => Ok(Vec::new()),
        [one] => {
            let values = one
                .get("values")
                .and_then(Value::as_array)
                .ok_or("unexpected prometheus answer: series without values")?;
            let mut out = Vec::with_capacity(values.len());
            for v in values {
                let n = number(v)?;
                if n.is_finite() {
                    out.push(n);
                }
            }
            Ok(out)
        }
        many => Err(format!(
            "the query gave {} series, want one (aggregate it, e.g. with sum() or histogram_quantile over sum by (le))",
            many.len()
        )),
    }
}

/// The number of an instant query's answer (a count): 0 when there is no
/// data or it is NaN (no requests), an error on several series.
pub fn instant_count(body: &Value, detail: usize) -> Result<u64, String> {
    let data = success(body, detail)?;
    let result = data.get("result");
    let sample = match data.get("resultType").and_then(Value::as_str) {
        Some("scalar") => result.ok_or("unexpected prometheus answer: scalar without result")?,
        Some("vector") => {
            let series = result
                .and_then(Value::as_array)
                .ok_or("unexpected prometheus answer: vector result is not a list")?;
            match series.as_slice() {
                [] => return Ok(0),
                [one] => one
                    .get("value")
                    .ok_or("unexpected prometheus answer: series without value")?,
                many => {
                    return Err(format!(
                        "the query gave {} series, want one (aggregate it with sum())",
                        many.len()
                    ));
                }
            }
        }
        _ => {
            return Err(
                "a count's query must give one number (an instant vector of one series)".into(),
            );
        }
    };
    let n = number(sample)?;
    // Counters' increase() extrapolates: 99.7 requests are 100.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(if n.is_finite() && n > 0.0 {
        n.round() as u64
    } else {
        0
    })
}

/// One evaluation of the gate from what its queries gave (in the order of
/// `spec.metrics`): the judge's judgement as a gate result, and as status.
/// Pass passes; Fail fails; Marginal is inconclusive (past the limit, a
/// human decides).
pub fn evaluate(spec: &AnalysisSpec, fetched: Vec<Data>) -> (GateResult, AnalysisStatus) {
    let metrics: Vec<(analysis::Metric, Data)> = spec
        .metrics
        .iter()
        .zip(fetched)
        .map(|(m, data)| (m.metric.clone(), data))
        .collect();
    let j = analysis::judge(&metrics, &spec.settings);
    let status = status_of(&j);
    let result = match j.outcome {
        Outcome::Pass => GateResult::Pass { value: j.score },
        Outcome::Fail => GateResult::Fail {
            value: Some(j.score),
            reason: j.reason,
        },
        Outcome::Marginal => GateResult::Inconclusive { reason: j.reason },
    };
    (result, status)
}

/// The judgement as status shows it.
pub fn status_of(j: &Judgement) -> AnalysisStatus {
    AnalysisStatus {
        compared_with: None,
        score: j.score,
        outcome: format!("{:?}", j.outcome),
        metrics: j
            .metrics
            .iter()
            .map(|m| MetricVerdict {
                name: m.name.clone(),
                verdict: match m.verdict {
                    Verdict::Pass => "Passed",
                    Verdict::Fail => "Failed",
                    Verdict::Inconclusive => "Inconclusive",
                }
                .to_string(),
                canary_samples: i64::try_from(m.canary_samples).unwrap_or(i64::MAX),
                baseline_samples: i64::try_from(m.baseline_samples).unwrap_or(i64::MAX),
                statistic: m.statistic,
                p_value: m.p_value,
                effect: m.effect,
                interval: m.interval.map(|(lo, hi)| vec![lo, hi]).unwrap_or_default(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Counts;
    use crate::gates::prometheus::TemplateVars;
    use serde_json::json;

    fn gate(check: serde_json::Value) -> AnalysisGate {
        AnalysisGate {
            name: "judge".into(),
            check: serde_json::from_value(check).unwrap(),
            ..AnalysisGate::default()
        }
    }

    #[test]
    fn defaults_apply_per_kind_of_metric() {
        let spec = AnalysisSpec::parse(&gate(json!({
            "address": "http://127.0.0.1:9090",
            "metrics": [
                {"name": "latency", "query": "q"},
                {"name": "errors", "failed": "f", "total": "t", "tolerance": "0.5%", "critical": true},
            ]
        })))
        .unwrap();
        assert_eq!(
            (spec.lookback, spec.sample_interval, spec.interval),
            (DEFAULT_LOOKBACK, DEFAULT_SAMPLE_INTERVAL, DEFAULT_INTERVAL)
        );
        assert_eq!(spec.settings, Settings::default());
        let (l, e) = (&spec.metrics[0].metric, &spec.metrics[1].metric);
        assert_eq!((l.min_samples, l.tolerance, l.critical), (10, 0.1, false));
        assert_eq!((e.min_samples, e.tolerance, e.critical), (100, 0.005, true));
        assert_eq!(spec.query_count(), 6);
        // Six queries, four at a time: two rounds of the 10 s timeout.
        assert_eq!(spec.worst_case(), Duration::from_secs(20));
        let bad = AnalysisSpec::parse(&gate(json!({
            "address": "http://127.0.0.1:9090", "significance": "0%",
            "metrics": [{"name": "latency", "query": "q"}]
        })));
        assert_eq!(bad.unwrap_err().0, "significance");
    }

    #[test]
    fn each_side_reads_its_own_revision_and_role() {
        let vars = TemplateVars {
            plan: "shop".into(),
            namespace: "prod".into(),
            component: "web".into(),
            revision: "new".into(),
            stable_revision: "old".into(),
            baseline_revision: String::new(),
        };
        let q = r#"rate(x{revision="{{revision}}",role="{{ role }}"}[{{window}}]) / rate(y[{{sampleInterval}}]) {{other}}"#;
        let (lookback, step) = (Duration::from_secs(120), Duration::from_secs(15));
        assert_eq!(
            render(q, &vars, Side::Canary, lookback, step),
            r#"rate(x{revision="new",role="canary"}[120s]) / rate(y[15s]) {{other}}"#
        );
        assert_eq!(
            render(q, &vars, Side::Baseline, lookback, step),
            r#"rate(x{revision="old",role="stable"}[120s]) / rate(y[15s]) {{other}}"#
        );
        // With a baseline beside the canary, the other side is the baseline.
        let vars = TemplateVars {
            baseline_revision: "old-baseline".into(),
            ..vars
        };
        assert_eq!(
            render(q, &vars, Side::Baseline, lookback, step),
            r#"rate(x{revision="old-baseline",role="baseline"}[120s]) / rate(y[15s]) {{other}}"#
        );
        assert_eq!(compared_with(&vars), "old-baseline");
    }

    #[test]
    fn a_range_url_asks_the_lookback_at_the_sample_interval() {
        let url = range_url(
            "http://127.0.0.1:9090/prom?x=1#f",
            "up",
            1000,
            Duration::from_secs(300),
            Duration::from_secs(15),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(url.path(), "/prom/api/v1/query_range");
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        for want in [
            ("query", "up"),
            ("start", "700"),
            ("end", "1000"),
            ("step", "15s"),
            ("timeout", "10s"),
        ] {
            assert!(pairs.contains(&(want.0.into(), want.1.into())), "{pairs:?}");
        }
    }

    #[test]
    fn answers_read_as_samples_and_counts() {
        let matrix = json!({"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {}, "values": [[1, "0.1"], [2, "NaN"], [3, "0.3"], [4, "+Inf"]]}]}});
        assert_eq!(range_samples(&matrix, 0).unwrap(), vec![0.1, 0.3]);
        let empty = json!({"status": "success", "data": {"resultType": "matrix", "result": []}});
        assert_eq!(range_samples(&empty, 0).unwrap(), Vec::<f64>::new());
        let two = json!({"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"a": "1"}, "values": []}, {"metric": {"a": "2"}, "values": []}]}});
        assert!(range_samples(&two, 0).unwrap_err().contains("2 series"));
        let vector = json!({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {}, "value": [1, "99.7"]}]}});
        assert_eq!(instant_count(&vector, 0).unwrap(), 100);
        let none = json!({"status": "success", "data": {"resultType": "vector", "result": []}});
        assert_eq!(instant_count(&none, 0).unwrap(), 0);
        let failed = json!({"status": "error", "errorType": "bad_data", "error": "parse error"});
        assert!(instant_count(&failed, 0).unwrap_err().contains("bad_data"));
    }

    #[test]
    fn the_judgement_maps_onto_gate_results() {
        let spec = AnalysisSpec::parse(&gate(json!({
            "address": "http://127.0.0.1:9090",
            "metrics": [{"name": "errors", "failed": "f", "total": "t"}]
        })))
        .unwrap();
        let counts = |cf, bf| Data::Counts {
            canary: Counts {
                failed: cf,
                total: 1000,
            },
            baseline: Counts {
                failed: bf,
                total: 1000,
            },
        };
        let (r, st) = evaluate(&spec, vec![counts(0, 0)]);
        assert_eq!(r, GateResult::Pass { value: 100.0 });
        assert_eq!(
            (st.outcome.as_str(), st.metrics[0].verdict.as_str()),
            ("Pass", "Passed")
        );
        let (r, st) = evaluate(&spec, vec![counts(50, 0)]);
        assert!(
            matches!(&r, GateResult::Fail { value: Some(v), reason } if *v == 0.0 && reason.contains("errors")),
            "{r:?}"
        );
        assert_eq!(st.metrics[0].canary_samples, 1000);
        assert!(st.metrics[0].p_value.unwrap() < 0.05);
        let few = Data::Counts {
            canary: Counts {
                failed: 3,
                total: 4,
            },
            baseline: Counts {
                failed: 0,
                total: 1000,
            },
        };
        let (r, st) = evaluate(&spec, vec![few]);
        assert!(
            matches!(&r, GateResult::Inconclusive { reason } if reason.contains("4 canary and 1000 baseline requests")),
            "{r:?}"
        );
        assert_eq!(st.outcome, "Marginal");
    }
}
