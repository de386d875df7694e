//! `kubectl releaseplan history`: the finished rollouts of a plan and the one
//! in progress, as a table or as the `-o` document.

use super::connect::Ctx;
use super::error::CliError;
use super::text::{columns, human_duration};
use super::view::{self, Format};
use crate::api::ReleasePlan;
use chrono::{DateTime, Utc};
use kube::ResourceExt;
use std::fmt::Write as _;

fn time_text(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(|| "-".into(), |t| t.format("%Y-%m-%d %H:%M:%S").to_string())
}

/// The CONFIG cell: what a rollout released, or `-`.
fn config_text(config: &[String]) -> String {
    if config.is_empty() {
        "-".into()
    } else {
        config.join(", ")
    }
}

/// The `history` table: finished rollouts oldest first, then the rollout in
/// progress (if any) as of `now`.
pub fn render_history(plan: &ReleasePlan, now: DateTime<Utc>) -> String {
    let status = plan.status.clone().unwrap_or_default();
    let mut rows = vec![vec![
        "NUMBER".to_string(),
        "REVISION".into(),
        "OUTCOME".into(),
        "STARTED (UTC)".into(),
        "FINISHED (UTC)".into(),
        "DURATION".into(),
        "REASON".into(),
        "CONFIG".into(),
    ]];
    for h in &status.history {
        let duration = match (h.started_at, h.finished_at) {
            (Some(a), Some(b)) => human_duration(b - a),
            _ => "-".into(),
        };
        rows.push(vec![
            h.number.to_string(),
            h.revision.clone(),
            h.outcome.to_string(),
            time_text(h.started_at),
            time_text(h.finished_at),
            duration,
            h.reason.clone().unwrap_or_default(),
            config_text(&h.config),
        ]);
    }
    if status.phase.is_active()
        && let Some(rev) = &status.current_revision
    {
        rows.push(vec![
            status.rollout_count.to_string(),
            rev.clone(),
            format!("({})", status.phase),
            time_text(status.rollout_started_at),
            "-".into(),
            status
                .rollout_started_at
                .map_or_else(|| "-".into(), |t| human_duration(now - t)),
            "in progress".into(),
            config_text(&crate::api::config::summary(&status.components)),
        ]);
    }
    if rows.len() == 1 {
        return format!(
            "releaseplan {} has no finished rollouts yet ({})\n",
            plan.name_any(),
            status.phase
        );
    }
    let mut out = String::new();
    for line in columns(&rows) {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// `history`: the table, or the `-o` document.
pub(super) async fn run(ctx: &Ctx, name: &str, output: Option<Format>) -> Result<i32, CliError> {
    let plan = ctx.plan(name).await?;
    match output {
        Some(f) => print!("{}", view::to_text(&view::history_view(&plan), f, false)),
        None => print!("{}", render_history(&plan, chrono::Utc::now())),
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Phase;
    use crate::cli::fixtures::plan;

    #[test]
    fn history_table() {
        let now: DateTime<Utc> = "2025-01-02T09:01:30Z".parse().unwrap();
        let text = render_history(&plan(), now);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("NUMBER  REVISION    OUTCOME"),
            "{text}"
        );
        assert!(lines[1].contains("x8r2kq7b4m  Promoted"), "{text}");
        assert!(
            lines[1].contains("2025-01-01 10:00:00  2025-01-01 10:02:13  2m13s"),
            "{text}"
        );
        assert!(lines[1].ends_with("all steps passed  -"), "{text}");
        assert!(
            lines[2].starts_with("2       tn5wd9cz2h  (RollingOut)"),
            "{text}"
        );
        assert!(lines[2].contains("1m30s"), "{text}");
        assert!(lines[2].ends_with("in progress       -"), "{text}");

        // The config each rollout released, by name and digest.
        let mut with_config = plan();
        let s = with_config.status.as_mut().unwrap();
        s.history[0].config = vec!["web: configmap/web-config@k2x8f9q4zd".into()];
        let text = render_history(&with_config, now);
        assert!(
            text.lines()
                .nth(1)
                .unwrap()
                .ends_with("all steps passed  web: configmap/web-config@k2x8f9q4zd"),
            "{text}"
        );

        let mut empty = plan();
        let s = empty.status.as_mut().unwrap();
        s.history.clear();
        s.phase = Phase::Pending;
        assert_eq!(
            render_history(&empty, now),
            "releaseplan shop has no finished rollouts yet (Pending)\n"
        );
    }
}
