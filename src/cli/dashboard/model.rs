//! What the pages show, computed here so that the page only draws it: a
//! plan's row (its `get -o json` view, how urgently it needs a look, its
//! steps as segments, its buttons), a plan page's [`Detail`], an Event's row.
//! Pure functions of the plan, unit-tested.

use crate::api::{Phase, ReleasePlan};
use crate::cli::view::{HistoryView, Live, PlanView, plan_view};
use crate::plan::Action;
use crate::plan::steps::strategy_steps;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Serialize;
use std::collections::BTreeMap;

/// One Event of a plan, as shown.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EventRow {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The reason (see docs/api.md).
    pub reason: String,
    /// The message.
    pub message: String,
    /// How many times it happened.
    pub count: i32,
    /// When it last happened.
    pub last: Option<DateTime<Utc>>,
}

/// One evaluation of a gate, for its chart.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct GatePoint {
    /// When it was evaluated.
    pub at: DateTime<Utc>,
    /// The value as written in status (a number, mostly).
    pub value: String,
    /// The verdict then.
    pub verdict: String,
}

/// An Event as shown: the newest of its times.
pub(super) fn event_row(e: &KubeEvent) -> EventRow {
    let last = e
        .last_timestamp
        .as_ref()
        .map(crate::api::time::from_k8s)
        .or_else(|| {
            e.event_time
                .as_ref()
                .and_then(|t| DateTime::from_timestamp_micros(t.0.as_microsecond()))
        })
        .or_else(|| {
            e.metadata
                .creation_timestamp
                .as_ref()
                .map(crate::api::time::from_k8s)
        });
    EventRow {
        type_: e.type_.clone().unwrap_or_default(),
        reason: e.reason.clone().unwrap_or_default(),
        message: e.message.clone().unwrap_or_default(),
        count: e
            .series
            .as_ref()
            .and_then(|s| s.count)
            .or(e.count)
            .unwrap_or(1),
        last,
    }
}

/// How urgently a plan needs a look: 0 first.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub enum Attention {
    /// Halted (Stalled=True), rolling back or rolled back: someone must act.
    Failing,
    /// A rollout is moving, waiting or has not started.
    Moving,
    /// Settled and healthy.
    Settled,
}

/// The attention a plan needs, and a word for it (shown next to the colour).
pub fn attention(plan: &ReleasePlan) -> (Attention, &'static str) {
    let s = plan.status.clone().unwrap_or_default();
    let stalled = s
        .conditions
        .iter()
        .any(|c| c.type_ == "Stalled" && c.status == "True");
    match s.phase {
        Phase::RollbackInProgress => (Attention::Failing, "rolling back"),
        Phase::RolledBack => (Attention::Failing, "rolled back"),
        _ if stalled => (Attention::Failing, "halted"),
        Phase::RollingOut if s.pause_requested || plan.spec.paused => (Attention::Moving, "paused"),
        Phase::RollingOut | Phase::Pending => (Attention::Moving, "in progress"),
        Phase::Stable => (Attention::Settled, "healthy"),
    }
}

/// A step of the strategy as a segment of the progress bar.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StepMark {
    /// `weight`, `pause`, `scale` or `header` ([`Step::kind`](crate::plan::steps::Step::kind)).
    pub kind: &'static str,
    /// `25%`, `pause`, `pause 30s`, `scale 2 pods`... (the core's text of
    /// the [`Step`](crate::plan::steps::Step)).
    pub label: String,
}

/// The steps the operator runs for the plan, as segments: the core's parsed
/// steps (a blue-green plan has one); none when they cannot be run (the step
/// text says so).
pub fn step_marks(plan: &ReleasePlan) -> Vec<StepMark> {
    strategy_steps(&plan.spec.strategy)
        .unwrap_or_default()
        .iter()
        .map(|s| StepMark {
            kind: s.kind(),
            label: s.to_string(),
        })
        .collect()
}

/// A button of the plan page: one per request of the core
/// ([`Action::ALL`]), in its order.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ActionButton {
    /// The request's word ([`Action::word`]): the button's id and the last
    /// segment of the URL it posts to.
    pub word: &'static str,
    /// What it does: the tooltip and the confirmation's question.
    pub title: &'static str,
    /// Why the operator would ignore it now (the button is disabled then).
    pub why_not: Option<String>,
}

/// What a button does, in a few words.
fn action_title(action: Action) -> &'static str {
    match action {
        Action::Promote { full: false } => "Promote: skip the current step or pause",
        Action::Promote { full: true } => "Promote fully: go to 100% at once",
        Action::Abort => "Abort: roll back to the stable revision now",
        Action::Retry => "Retry the rolled-back or halted revision",
        Action::Pause => "Pause: hold the rollout at its current step",
        Action::Resume => "Resume: lift the pause request",
        Action::OverrideWindow => "Promote through a closed release window or a freeze",
    }
}

/// A plan as the overview shows it (and the head of the plan page).
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// `namespace/name`: the page's key.
    pub key: String,
    /// What the plugin's `get -o json` prints.
    #[serde(flatten)]
    pub view: PlanView,
    /// How urgently it needs a look.
    pub attention: Attention,
    /// The same in a word.
    pub attention_text: &'static str,
    /// `status.trafficWeight`: the share of requests on the current revision
    /// when a router is configured (absent otherwise), next to the replica
    /// split `weight`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traffic_weight: Option<i64>,
    /// The steps as segments.
    pub steps: Vec<StepMark>,
    /// When the current step started (time in step).
    pub step_started_at: Option<DateTime<Utc>>,
    /// The buttons, each with why it does not apply now, if it does not; on
    /// the plan page only (empty, and left out, in the overview).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<ActionButton>,
}

/// The row of `plan`. With `deployments` (the plan page), components list
/// their revisions and `actions` says which buttons apply; without (the
/// overview, which has no buttons) neither is there: the reasons would be a
/// third of a 1,000-plan snapshot.
pub fn row(plan: &ReleasePlan, live: Option<Live<'_>>) -> Row {
    let view = plan_view(plan, live);
    let (attention, attention_text) = attention(plan);
    let status = plan.status.clone().unwrap_or_default();
    let actions = match live {
        None => Vec::new(),
        Some(_) => Action::ALL
            .into_iter()
            .map(|action| ActionButton {
                word: action.word(),
                title: action_title(action),
                why_not: action.applies_in(&status).err().map(|e| e.to_string()),
            })
            .collect(),
    };
    Row {
        key: format!("{}/{}", view.namespace, view.name),
        view,
        attention,
        attention_text,
        traffic_weight: status.traffic_weight.map(i64::from),
        steps: step_marks(plan),
        step_started_at: status.step_started_at,
        actions,
    }
}

/// A plan page's document.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Detail {
    /// The plan, with revision Deployments.
    pub plan: Row,
    /// The conditions with their messages.
    pub conditions: Vec<Condition>,
    /// Finished rollouts and the one in progress.
    pub history: HistoryView,
    /// The plan's Events, newest first.
    pub events: Vec<EventRow>,
    /// Each gate's values seen since the dashboard started, oldest first.
    pub gate_series: BTreeMap<String, Vec<GatePoint>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::fixtures::plan;

    #[test]
    fn failing_plans_need_attention_first() {
        let mut p = plan();
        assert_eq!(attention(&p), (Attention::Moving, "in progress"));
        let s = p.status.as_mut().unwrap();
        s.phase = Phase::RolledBack;
        assert_eq!(attention(&p).0, Attention::Failing);
        let s = p.status.as_mut().unwrap();
        s.phase = Phase::RollingOut;
        s.conditions.push(
            serde_json::from_value::<Condition>(serde_json::json!({
                "type": "Stalled", "status": "True", "reason": "RolloutHalted",
                "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}))
            .unwrap(),
        );
        assert_eq!(attention(&p), (Attention::Failing, "halted"));
        assert!(Attention::Failing < Attention::Moving);
        assert!(Attention::Moving < Attention::Settled);
    }

    #[test]
    fn steps_become_segments_with_pauses_marked() {
        let p = plan();
        let marks = step_marks(&p);
        assert_eq!(marks.len(), p.spec.strategy.steps.len());
        assert!(marks.iter().any(|m| m.kind == "pause"), "{marks:?}");
        assert!(marks.iter().any(|m| m.label.ends_with('%')), "{marks:?}");
    }

    /// A plan of the fixture with these `spec.strategy` settings.
    fn with_strategy(strategy: serde_json::Value) -> ReleasePlan {
        let mut v = crate::cli::fixtures::plan_json();
        v["spec"]["strategy"] = strategy;
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn step_marks_are_the_cores_parsed_steps() {
        // Every kind of step the core runs, labelled from its parsed value:
        // none drawn as an unknown weight "?".
        let p = with_strategy(serde_json::json!({"steps": [
            {"setCanaryScale": {"replicas": 2}},
            {"setHeaderRoute": {"headers": [{"name": "x-canary", "value": "yes"}]}},
            {"setWeight": 10},
            {"pause": {"duration": "90s"}},
            {"setCanaryScale": {"weight": 50}},
            {"setCanaryScale": {"matchTrafficWeight": true}},
            {"setHeaderRoute": {"headers": []}},
            {"pause": {}},
        ]}));
        let marks: Vec<(&str, String)> = step_marks(&p)
            .into_iter()
            .map(|m| (m.kind, m.label))
            .collect();
        let want = [
            ("scale", "scale 2 pods"),
            ("header", "header x-canary: yes"),
            ("weight", "10%"),
            ("pause", "pause 1m30s"),
            ("scale", "scale 50%"),
            ("scale", "scale with traffic"),
            ("header", "no header route"),
            ("pause", "pause"),
        ];
        let want: Vec<(&str, String)> = want.iter().map(|(k, l)| (*k, l.to_string())).collect();
        assert_eq!(marks, want);
    }

    #[test]
    fn a_blue_green_plan_draws_the_one_step_the_core_runs() {
        let mut p = with_strategy(serde_json::json!({"blueGreen": {"autoPromotionSeconds": 300}}));
        p.status.as_mut().unwrap().current_step = 0;
        let r = row(&p, None);
        let marks: Vec<(&str, &str)> = r.steps.iter().map(|m| (m.kind, m.label.as_str())).collect();
        assert_eq!(marks, [("pause", "pause 5m")]);
        assert_eq!(
            (r.view.step.total, r.view.step.text.as_str()),
            (1, "step 1/1")
        );
        let p = with_strategy(serde_json::json!({"blueGreen": {}}));
        assert_eq!(step_marks(&p).len(), 1);
    }

    #[test]
    fn the_buttons_are_the_cores_actions_in_its_order() {
        // The page draws one button per entry, in this order, with no table
        // of its own: the core's `Action::ALL`, each by its word.
        let r = serde_json::to_value(row(&plan(), Some(Live::default()))).unwrap();
        let words: Vec<&str> = r["actions"]
            .as_array()
            .unwrap_or_else(|| panic!("actions is not a list: {}", r["actions"]))
            .iter()
            .map(|a| a["word"].as_str().unwrap())
            .collect();
        let core: Vec<&str> = Action::ALL.iter().map(|a| a.word()).collect();
        assert_eq!(words, core);
        for a in &r["actions"].as_array().unwrap()[..] {
            assert!(!a["title"].as_str().unwrap().is_empty(), "{a}");
        }
    }

    #[test]
    fn a_row_says_which_buttons_apply() {
        let mut p = plan();
        let r = row(&p, Some(Live::default()));
        assert_eq!(r.key, format!("{}/{}", r.view.namespace, r.view.name));
        assert_eq!(r.actions.len(), Action::ALL.len());
        // The overview has no buttons, and its rows no reasons.
        assert!(row(&p, None).actions.is_empty());
        let overview = serde_json::to_value(row(&p, None)).unwrap();
        assert!(overview.get("actions").is_none(), "{overview}");
        p.status.as_mut().unwrap().phase = Phase::Stable;
        let r = row(&p, Some(Live::default()));
        let why_not = |word: &str| {
            r.actions
                .iter()
                .find(|a| a.word == word)
                .map(|a| a.why_not.clone())
        };
        assert!(
            matches!(why_not("promote"), Some(Some(_))),
            "{:?}",
            r.actions
        );
        assert_eq!(why_not("pause"), Some(None), "{:?}", r.actions);
    }

    #[test]
    fn the_traffic_weight_is_shown_only_when_status_has_it() {
        // Without a router the row carries no trafficWeight at all.
        let r = serde_json::to_value(row(&plan(), None)).unwrap();
        assert!(
            r.get("weight").is_some() && r.get("trafficWeight").is_none(),
            "{r}"
        );
        let mut p = plan();
        p.status.as_mut().unwrap().traffic_weight = Some(10);
        let r = serde_json::to_value(row(&p, None)).unwrap();
        assert_eq!(r["trafficWeight"], 10, "{r}");
    }
}
