//! The short texts of where a plan stands, shared by the verbs, the `-o`
//! views and the dashboard: the step (`step 2/4`), the traffic share, the
//! one-line summary and progress line, durations, and table columns.

use crate::api::{ReleasePlan, ReleasePlanStatus};
use crate::plan::steps::strategy_steps;
use std::fmt::Write as _;

/// How many steps the operator runs for the plan: the core's parsed steps
/// (a blue-green plan runs one), spread over the components' order when
/// they have `dependsOn`; `None` when they cannot be run.
pub fn step_count(plan: &ReleasePlan) -> Option<usize> {
    let n = strategy_steps(&plan.spec.strategy).ok()?.len();
    let components = plan
        .status
        .as_ref()
        .map_or(&[][..], |s| s.components.as_slice());
    let total = crate::plan::order::timeline_of(&plan.spec, components)?.total();
    Some(usize::try_from(total).unwrap_or(n))
}

/// Where the rollout stands among the steps the operator runs
/// ([`step_count`]): `step 2/4`, `steps 4/4 done` (the implicit final step to
/// 100%, or settled), `no steps`, or `invalid steps` when the spec's steps
/// cannot be run (the Stalled condition says why). `currentStep` is the index
/// of the step being run, and equals the number of steps during the implicit
/// final step to 100%.
pub fn step_text(plan: &ReleasePlan) -> String {
    let Some(n) = step_count(plan) else {
        return "invalid steps".into();
    };
    let step = plan
        .status
        .as_ref()
        .map_or(0, |s| usize::try_from(s.current_step).unwrap_or(0));
    if n == 0 {
        "no steps".into()
    } else if step < n {
        format!("step {}/{n}", step + 1)
    } else {
        format!("steps {n}/{n} done")
    }
}

/// `, traffic 10%` when a router splits the plan's requests, else nothing:
/// the request share is shown beside the step's weight, never instead of it.
pub fn traffic_text(s: &ReleasePlanStatus) -> String {
    s.traffic_weight
        .map(|t| format!(", traffic {t}%"))
        .unwrap_or_default()
}

/// `RollingOut, step 2/4, weight 50%`: where a plan stands, for before/after lines.
pub fn summary(plan: &ReleasePlan) -> String {
    let s = plan.status.clone().unwrap_or_default();
    let mut out = format!(
        "{}, {}, weight {}%{}",
        s.phase,
        step_text(plan),
        s.weight,
        traffic_text(&s)
    );
    if s.pause_requested {
        out.push_str(", pause requested");
    }
    out
}

/// One progress line of `wait` (without the timestamp): phase, step, weight and
/// the operator's message.
pub fn progress_line(plan: &ReleasePlan) -> String {
    let s = plan.status.clone().unwrap_or_default();
    let mut line = format!(
        "{:<18} {:<15} weight {:>3}%{}",
        s.phase.as_str(),
        step_text(plan),
        s.weight,
        traffic_text(&s)
    );
    let generation = plan.metadata.generation;
    if s.observed_generation != generation {
        let _ = write!(
            line,
            "  (generation {} not observed yet)",
            generation.unwrap_or(0)
        );
    }
    if let Some(m) = s.message.as_deref().filter(|m| !m.is_empty()) {
        let _ = write!(line, "  {m}");
    }
    line
}

/// Pads the cells of each column to the widest cell, two spaces apart.
pub(crate) fn columns(rows: &[Vec<String>]) -> Vec<String> {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..width)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|r| {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                let pad = widths[c].saturating_sub(cell.chars().count());
                line.push_str(cell);
                if c + 1 < r.len() {
                    line.push_str(&" ".repeat(pad));
                }
            }
            line
        })
        .collect()
}

/// `1h2m3s`, `4m0s`, `12s`.
pub fn human_duration(d: chrono::Duration) -> String {
    let secs = d.num_seconds().max(0);
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// Now, as `2025-01-02T09:00:00Z`: the time of `wait`'s log lines and the
/// value of `restart`'s annotation.
pub fn stamp() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::fixtures::plan;
    use serde_json::json;

    #[test]
    fn step_text_cases() {
        let mut p = plan();
        assert_eq!(step_text(&p), "step 2/4");
        p.status.as_mut().unwrap().current_step = 4;
        assert_eq!(step_text(&p), "steps 4/4 done");
        p.spec.strategy.steps.clear();
        assert_eq!(step_text(&p), "no steps");
        // Steps the operator refuses to run are not counted as none.
        p.spec.strategy.steps =
            serde_json::from_value(json!([{"setWeight": 50}, {"setWeight": 20}])).unwrap();
        assert_eq!(step_text(&p), "invalid steps");
        assert_eq!(step_count(&p), None);
    }

    #[test]
    fn traffic_share_shows_beside_the_weight() {
        let mut p = plan();
        let s = p.status.as_mut().unwrap();
        s.traffic_weight = Some(10);
        assert!(
            summary(&p).contains("weight 25%, traffic 10%"),
            "{}",
            summary(&p)
        );
        assert!(progress_line(&p).contains("weight  25%, traffic 10%"));
    }

    #[test]
    fn progress_line_has_phase_step_weight_message() {
        let mut p = plan();
        let line = progress_line(&p);
        assert!(
            line.starts_with("RollingOut         step 2/4        weight  25%"),
            "{line}"
        );
        assert!(line.ends_with("waiting for promotion"), "{line}");
        p.metadata.generation = Some(4);
        assert!(progress_line(&p).contains("(generation 4 not observed yet)"));
        assert_eq!(summary(&p), "RollingOut, step 2/4, weight 25%");
    }

    #[test]
    fn durations() {
        assert_eq!(human_duration(chrono::Duration::seconds(12)), "12s");
        assert_eq!(human_duration(chrono::Duration::seconds(240)), "4m0s");
        assert_eq!(human_duration(chrono::Duration::seconds(3723)), "1h2m3s");
        assert_eq!(human_duration(chrono::Duration::seconds(-5)), "0s");
    }
}
