//! Evaluates the health gates that are due, and folds their results into the
//! gate statuses the pure core reads. Gates are I/O; their counting is pure
//! (`crate::gates::record`).

use super::Context;
use crate::api::{GateStatus, ReleasePlan, ReleasePlanStatus};
use crate::gates::prometheus::{self, TemplateVars};
use crate::gates::webhook::{self, WebhookBody};
use crate::gates::{self as g, GateResult};
use crate::ops::metrics::GateLabel;
use crate::plan::{EventIntent, EventType};
use chrono::{DateTime, Utc};
use kube::ResourceExt;
use std::time::Duration;

/// Webhook gates have no interval of their own: they are asked this often.
pub const WEBHOOK_INTERVAL: Duration = Duration::from_secs(10);
/// Webhook gates fail the rollout on the first failed call (after its retries).
const WEBHOOK_FAILURE_LIMIT: i32 = 0;

fn vars(plan: &ReleasePlan, status: &ReleasePlanStatus) -> TemplateVars {
    // The first component that changes in this rollout is the one gates speak of.
    let changed = status
        .components
        .iter()
        .find(|c| c.current_hash.is_some() && c.current_hash != c.stable_hash)
        .or_else(|| status.components.first());
    TemplateVars {
        plan: plan.name_any(),
        namespace: plan.namespace().unwrap_or_default(),
        component: changed.map(|c| c.name.clone()).unwrap_or_default(),
        revision: changed
            .and_then(|c| c.current_hash.clone())
            .unwrap_or_default(),
    }
}

fn prev<'a>(status: &'a ReleasePlanStatus, name: &str) -> Option<&'a GateStatus> {
    status.gates.iter().find(|s| s.name == name)
}

/// Evaluates the gates that are due and returns every gate's status.
pub async fn evaluate(
    ctx: &Context,
    plan: &ReleasePlan,
    status: &ReleasePlanStatus,
    now: DateTime<Utc>,
) -> Vec<GateStatus> {
    if status.failure.is_some() {
        return status.gates.clone();
    }
    let v = vars(plan, status);
    let mut out = Vec::new();
    for gate in &plan.spec.health.prometheus {
        let before = prev(status, &gate.name);
        let st = match prometheus::settings(gate) {
            Ok(s) => {
                if g::is_due(before, s.interval, now) {
                    let result = prometheus::evaluate(&ctx.http, gate, &v).await;
                    g::record(
                        before,
                        &gate.name,
                        &result,
                        s.failure_limit,
                        s.inconclusive_limit,
                        now,
                    )
                } else {
                    before.cloned().unwrap_or_default()
                }
            }
            Err(e) => g::record(
                before,
                &gate.name,
                &GateResult::Error { reason: e },
                0,
                0,
                now,
            ),
        };
        out.push(st);
    }
    for gate in &plan.spec.health.webhooks {
        let before = prev(status, &gate.name);
        let st = if g::is_due(before, WEBHOOK_INTERVAL, now) {
            let body = WebhookBody {
                plan: v.plan.clone(),
                namespace: v.namespace.clone(),
                revision: status.current_revision.clone().unwrap_or_default(),
                step: status.current_step,
                phase: status.phase,
            };
            let result = webhook::call(&ctx.http, gate, &body).await;
            g::record(before, &gate.name, &result, WEBHOOK_FAILURE_LIMIT, 0, now)
        } else {
            before.cloned().unwrap_or_default()
        };
        out.push(st);
    }
    for st in &out {
        let label = GateLabel {
            namespace: v.namespace.clone(),
            plan: v.plan.clone(),
            gate: st.name.clone(),
        };
        if let Some(value) = st.value.as_deref().and_then(|s| s.parse::<f64>().ok()) {
            ctx.metrics.gate_value.get_or_create(&label).set(value);
        }
        ctx.metrics
            .gate_failures
            .get_or_create(&label)
            .set(i64::from(st.failures));
    }
    out
}

/// One event per gate whose verdict changed in this evaluation.
pub fn verdict_events(before: &[GateStatus], after: &[GateStatus]) -> Vec<EventIntent> {
    after
        .iter()
        .filter(|a| {
            a.verdict != g::PENDING
                && before
                    .iter()
                    .find(|b| b.name == a.name)
                    .is_none_or(|b| b.verdict != a.verdict)
        })
        .map(|a| {
            let (type_, reason) = match a.verdict.as_str() {
                g::PASSED => (EventType::Normal, "GatePassed"),
                g::FAILED => (EventType::Warning, "GateFailed"),
                _ => (EventType::Warning, "GateInconclusive"),
            };
            EventIntent {
                type_,
                reason: reason.into(),
                message: format!(
                    "gate {}: {}",
                    a.name,
                    a.message.as_deref().unwrap_or(a.verdict.as_str())
                ),
            }
        })
        .collect()
}

/// How long until the next gate is due, for the requeue.
pub fn next_due(
    plan: &ReleasePlan,
    status: &ReleasePlanStatus,
    now: DateTime<Utc>,
) -> Option<Duration> {
    let prom = plan.spec.health.prometheus.iter().filter_map(|gate| {
        let interval = prometheus::settings(gate).ok()?.interval;
        g::next_due(prev(status, &gate.name), interval, now)
    });
    let hooks = plan
        .spec
        .health
        .webhooks
        .iter()
        .filter_map(|gate| g::next_due(prev(status, &gate.name), WEBHOOK_INTERVAL, now));
    prom.chain(hooks)
        .min()
        .map(|d| d.max(Duration::from_millis(500)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(name: &str, verdict: &str) -> GateStatus {
        GateStatus {
            name: name.into(),
            verdict: verdict.into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_event_per_changed_verdict() {
        let before = vec![gate("a", "Passed"), gate("b", "Pending")];
        let after = vec![
            gate("a", "Passed"),
            gate("b", "Failed"),
            gate("c", "Passed"),
            gate("d", "Pending"),
        ];
        let ev = verdict_events(&before, &after);
        let reasons: Vec<&str> = ev.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(reasons, ["GateFailed", "GatePassed"]);
        assert_eq!(ev[0].type_, EventType::Warning);
    }
}
