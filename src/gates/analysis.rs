//! Analysis gates, the I/O half: each metric's queries asked of Prometheus
//! for both sides, a few at a time, and the answers handed to the core's
//! judge ([`evaluate`]).

pub use releaseplan_core::gates::analysis::*;

use futures::StreamExt as _;
use releaseplan_core::analysis::{Counts, Data};
use releaseplan_core::api::analysis::AnalysisStatus;
use releaseplan_core::gates::prometheus::TemplateVars;

use super::GateResult;
use super::access::Resolved;
use super::outbound::GateHttp;
use super::prometheus::ask;

/// One query of an evaluation.
enum Ask {
    Range(String),
    Count(String),
}

/// One answer: samples or a count.
enum Answer {
    Samples(Vec<f64>),
    Count(u64),
}

/// Evaluates an analysis once: every metric's queries for the new revision
/// and the stable one, [`PARALLEL_QUERIES`] at a time, then the judge. Any
/// query that goes wrong makes the evaluation that query's error (never a
/// verdict on part of the metrics). With no stable revision serving, there
/// is nothing to compare with: not applicable, which passes.
pub async fn evaluate_with(
    http: &GateHttp,
    access: &Resolved,
    gate: &AnalysisSpec,
    vars: &TemplateVars,
) -> (GateResult, Option<AnalysisStatus>) {
    if compared_with(vars).is_empty() {
        return (
            GateResult::NotApplicable {
                reason: "nothing to compare with: the stable revision serves no pod (a first release, or all its pods are replaced)".into(),
            },
            None,
        );
    }
    let mut asks = Vec::with_capacity(gate.query_count());
    for m in &gate.metrics {
        for side in [Side::Canary, Side::Baseline] {
            match &m.queries {
                Queries::Values(q) => asks.push(Ask::Range(render(
                    q,
                    vars,
                    side,
                    gate.lookback,
                    gate.sample_interval,
                ))),
                Queries::Counts { failed, total } => {
                    asks.push(Ask::Count(render(
                        failed,
                        vars,
                        side,
                        gate.lookback,
                        gate.sample_interval,
                    )));
                    asks.push(Ask::Count(render(
                        total,
                        vars,
                        side,
                        gate.lookback,
                        gate.sample_interval,
                    )));
                }
            }
        }
    }
    let end = chrono::Utc::now().timestamp();
    let answers: Vec<Result<Answer, GateResult>> = futures::stream::iter(asks)
        .map(|a| one(http, access, gate, a, end))
        .buffered(PARALLEL_QUERIES)
        .collect()
        .await;
    let mut answers = answers.into_iter();
    let mut fetched = Vec::with_capacity(gate.metrics.len());
    for m in &gate.metrics {
        let mut next = || match answers.next() {
            Some(Ok(a)) => Ok(a),
            Some(Err(e)) => Err(e),
            None => Err(GateResult::Error {
                reason: "an answer is missing (a bug)".into(),
            }),
        };
        let f = match &m.queries {
            Queries::Values(_) => match (next(), next()) {
                (Ok(Answer::Samples(canary)), Ok(Answer::Samples(baseline))) => {
                    Data::Values { canary, baseline }
                }
                (Err(e), _) | (_, Err(e)) => return (named(&m.metric.name, e), None),
                _ => return (named(&m.metric.name, mixed()), None),
            },
            Queries::Counts { .. } => match (next(), next(), next(), next()) {
                (
                    Ok(Answer::Count(cf)),
                    Ok(Answer::Count(ct)),
                    Ok(Answer::Count(bf)),
                    Ok(Answer::Count(bt)),
                ) => Data::Counts {
                    canary: Counts {
                        failed: cf,
                        total: ct,
                    },
                    baseline: Counts {
                        failed: bf,
                        total: bt,
                    },
                },
                (Err(e), _, _, _) | (_, Err(e), _, _) | (_, _, Err(e), _) | (_, _, _, Err(e)) => {
                    return (named(&m.metric.name, e), None);
                }
                _ => return (named(&m.metric.name, mixed()), None),
            },
        };
        fetched.push(f);
    }
    let (result, mut status) = evaluate(gate, fetched);
    status.compared_with = Some(compared_with(vars).clone());
    (result, Some(status))
}

fn mixed() -> GateResult {
    GateResult::Error {
        reason: "answers out of order (a bug)".into(),
    }
}

/// The result of a query that went wrong, naming the metric.
fn named(metric: &str, result: GateResult) -> GateResult {
    match result {
        GateResult::Error { reason } => GateResult::Error {
            reason: format!("metric {metric}: {reason}"),
        },
        GateResult::Refused { reason } => GateResult::Refused {
            reason: format!("metric {metric}: {reason}"),
        },
        other => other,
    }
}

async fn one(
    http: &GateHttp,
    access: &Resolved,
    gate: &AnalysisSpec,
    a: Ask,
    end: i64,
) -> Result<Answer, GateResult> {
    let (query, range) = match &a {
        Ask::Range(q) => (q, true),
        Ask::Count(q) => (q, false),
    };
    let url = if range {
        range_url(
            &gate.address,
            query,
            end,
            gate.lookback,
            gate.sample_interval,
            gate.timeout,
        )
    } else {
        releaseplan_core::gates::prometheus::query_url(&gate.address, query, gate.timeout)
    }
    .map_err(|reason| GateResult::Error { reason })?;
    let (json, detail) = ask(http, access, &gate.address, url, gate.timeout).await?;
    let read = if range {
        range_samples(&json, detail).map(Answer::Samples)
    } else {
        instant_count(&json, detail).map(Answer::Count)
    };
    read.map_err(|reason| GateResult::Error { reason })
}
