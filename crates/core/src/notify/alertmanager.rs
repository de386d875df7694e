//! The body of an `alertmanager` receiver: alerts for Alertmanager's API
//! (`POST <url>/api/v2/alerts`), so paging goes through the routes, silences
//! and inhibitions people already have.
//!
//! Each notice fires one alert named after its trigger
//! (`ReleasePlanRolledBack`...), without `endsAt`: the operator sends a
//! transition once and never re-posts it, so Alertmanager resolves it after
//! its own `resolve_timeout` (5 minutes by default). A trigger that ends a
//! rollout (`promoted`, `rolledBack`) also resolves at once (`endsAt` = its
//! time) the alerts of that rollout's open problems: same labels, so
//! Alertmanager matches them, whether they fired or not.

use super::Trigger;
use super::payload::Message;
use chrono::SecondsFormat;
use serde_json::{Value, json};
use std::fmt::Write as _;

/// The API path appended to the receiver's URL.
pub const ALERTS_PATH: &str = "/api/v2/alerts";

/// Where alerts are posted: the receiver's URL (Alertmanager's base URL,
/// with its route prefix if any) followed by [`ALERTS_PATH`].
pub fn alerts_url(base: &str) -> String {
    format!("{}{ALERTS_PATH}", base.trim_end_matches('/'))
}

/// The `alertname` of a trigger's alert: `ReleasePlan` and the trigger in
/// UpperCamelCase.
pub fn alertname(trigger: Trigger) -> String {
    let name = trigger.as_str();
    let mut chars = name.chars();
    let first = chars.next().map(|c| c.to_ascii_uppercase());
    format!(
        "ReleasePlan{}{}",
        first.map(String::from).unwrap_or_default(),
        chars.as_str()
    )
}

/// The `severity` label of a trigger's alert: `critical` when a rollout is
/// held at a partial weight until someone acts, `warning` for the other
/// problems and for a pause waiting for a human, `info` for progress.
pub fn severity(trigger: Trigger) -> &'static str {
    match trigger {
        Trigger::Halted => "critical",
        Trigger::GateFailed
        | Trigger::RollbackStarted
        | Trigger::RolledBack
        | Trigger::DeletionBlocked
        | Trigger::Paused => "warning",
        Trigger::RolloutStarted
        | Trigger::Superseded
        | Trigger::StepAdvanced
        | Trigger::Promoted => "info",
    }
}

/// The alerts a trigger resolves: the problems of the rollout it ends.
pub fn resolves(trigger: Trigger) -> &'static [Trigger] {
    match trigger {
        Trigger::Promoted | Trigger::RolledBack => &[
            Trigger::Paused,
            Trigger::GateFailed,
            Trigger::Halted,
            Trigger::RollbackStarted,
        ],
        _ => &[],
    }
}

impl Message {
    /// The labels of this plan's alert for `trigger` (the same for the
    /// alert that fires and for its resolution).
    /// A revision not known is left out (an empty label is no label).
    fn alert_labels(&self, trigger: Trigger) -> Value {
        let mut labels = json!({
            "alertname": alertname(trigger),
            "namespace": self.plan.namespace,
            "releaseplan": self.plan.name,
            "severity": severity(trigger),
        });
        if let Some(r) = self.notice.revision.as_deref().filter(|r| !r.is_empty()) {
            labels["revision"] = json!(r);
        }
        labels
    }

    /// The Alertmanager body: the alert of this notice, firing, then the
    /// resolutions of the alerts it ends ([`resolves`]).
    pub fn alertmanager(&self) -> Value {
        let n = &self.notice;
        let at = n.at.to_rfc3339_opts(SecondsFormat::Millis, true);
        let mut description = format!(
            "{}/{} {}: step {}/{} (weight {}%), phase {}",
            self.plan.namespace,
            self.plan.name,
            n.trigger,
            n.step.min(n.steps + 1),
            n.steps,
            n.weight,
            n.phase.as_str()
        );
        if let Some(s) = &n.stable_revision {
            let _ = write!(description, ", stable revision {s}");
        }
        if let Some(g) = &n.gate {
            let _ = write!(description, ", {g}: {}", n.reason.as_deref().unwrap_or("-"));
        }
        if !n.message.is_empty() {
            let _ = write!(description, ". {}", n.message);
        }
        let mut alert = json!({
            "labels": self.alert_labels(n.trigger),
            "annotations": {
                "summary": self.text,
                "description": description,
                "id": self.id,
            },
            "startsAt": at,
        });
        if let Some(link) = &self.link {
            alert["generatorURL"] = json!(link);
        }
        let mut alerts = vec![alert];
        for t in resolves(n.trigger) {
            let mut resolved = json!({
                "labels": self.alert_labels(*t),
                "startsAt": at,
                "endsAt": at,
            });
            if let Some(link) = &self.link {
                resolved["generatorURL"] = json!(link);
            }
            alerts.push(resolved);
        }
        Value::Array(alerts)
    }
}
