//! `kubectl releaseplan list`: the table of the plans (a row each, `FAILED`
//! naming the failing gate), or their `-o` documents, once or with one more
//! row (or document) per change.

use super::connect::Ctx;
use super::error::{CliError, chain};
use super::text::{columns, human_duration, step_text};
use super::view::{self, Format};
use crate::api::ReleasePlan;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::WatchStreamExt;
use std::io::Write;

/// The header of the `list` table (with `NAMESPACE` first for `-A`).
pub fn list_header(all: bool) -> Vec<String> {
    let mut h = vec![
        "NAME", "PHASE", "STEP", "WEIGHT", "STABLE", "CURRENT", "READY", "AGE", "FAILED",
    ];
    if all {
        h.insert(0, "NAMESPACE");
    }
    h.into_iter().map(str::to_string).collect()
}

/// Ready pods over wanted replicas of each component (both revisions while
/// it changes), `*` marking an autoscaled one (its replicas are its
/// autoscaler's): `web 6/6*, api 2/2`.
pub fn ready_text(components: &[crate::api::ComponentStatus]) -> String {
    if components.is_empty() {
        return "-".to_string();
    }
    components
        .iter()
        .map(|c| {
            let ready = if c.is_changing() {
                c.current_ready + c.stable_ready
            } else {
                c.current_ready
            };
            let auto = if c.autoscaling.is_some() { "*" } else { "" };
            format!("{} {ready}/{}{auto}", c.name, c.replicas)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One row of the `list` table. `FAILED` names the failing gate and reason of a
/// plan that is not `Stable` (`-` otherwise): a rolled-back or halted plan
/// says why at a glance.
pub fn list_row(plan: &ReleasePlan, all: bool, now: DateTime<Utc>) -> Vec<String> {
    let s = plan.status.clone().unwrap_or_default();
    let dash = || "-".to_string();
    let failed = match &s.failure {
        Some(f) if s.phase != crate::api::Phase::Stable => format!("{} ({})", f.gate, f.reason),
        _ => dash(),
    };
    let age = plan
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or_else(dash, |t| {
            human_duration(now - crate::api::time::from_k8s(t))
        });
    let mut row = vec![
        plan.name_any(),
        s.phase.to_string(),
        step_text(plan),
        format!("{}%", s.weight),
        s.stable_revision.clone().unwrap_or_else(dash),
        s.current_revision.clone().unwrap_or_else(dash),
        ready_text(&s.components),
        age,
        failed,
    ];
    if all {
        row.insert(0, plan.namespace().unwrap_or_default());
    }
    row
}

/// `list`: the table (or documents) of the plans in the namespace, or in all
/// namespaces; with `watch`, then one row (or document) per change.
pub(super) async fn run(
    ctx: &Ctx,
    all: bool,
    watch: bool,
    output: Option<Format>,
) -> Result<i32, CliError> {
    let api: Api<ReleasePlan> = if all {
        Api::all(ctx.client.clone())
    } else {
        ctx.plans()
    };
    let mut plans = match api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => {
            return Err(CliError::CrdMissing(ctx.url.clone()));
        }
        Err(e) => return Err(ctx.error("list releaseplans", e)),
    };
    plans.sort_by_key(|p| (p.namespace(), p.name_any()));
    let now = chrono::Utc::now();
    let mut rows = vec![list_header(all)];
    rows.extend(plans.iter().map(|p| list_row(p, all, now)));
    let mut out = std::io::stdout();
    match output {
        Some(f) if !watch => {
            let doc = view::PlanList {
                api_version: view::API_VERSION,
                kind: "PlanList",
                items: plans.iter().map(|p| view::plan_view(p, None)).collect(),
            };
            out.write_all(view::to_text(&doc, f, false).as_bytes())?;
        }
        Some(f) => {
            for p in &plans {
                write_doc(&mut out, &view::plan_view(p, None), f)?;
            }
        }
        None if plans.is_empty() && !watch => {
            let scope = if all {
                "any namespace".to_string()
            } else {
                format!("namespace {}", ctx.namespace)
            };
            eprintln!("no releaseplans in {scope}");
        }
        None => {
            for line in columns(&rows) {
                writeln!(out, "{line}")?;
            }
        }
    }
    if !watch {
        return Ok(0);
    }
    out.flush()?;
    // Rows seen so far, by namespace/name, to print only real changes.
    let mut seen: std::collections::BTreeMap<(Option<String>, String), Vec<String>> = plans
        .iter()
        .map(|p| ((p.namespace(), p.name_any()), list_row(p, all, now)))
        .collect();
    let events =
        kube::runtime::watcher(api, kube::runtime::watcher::Config::default()).default_backoff();
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        let (plan, deleted) = match event {
            Ok(
                kube::runtime::watcher::Event::Apply(p)
                | kube::runtime::watcher::Event::InitApply(p),
            ) => (p, false),
            Ok(kube::runtime::watcher::Event::Delete(p)) => (p, true),
            Ok(_) => continue,
            Err(e) => {
                eprintln!("warning: watch failed, retrying: {}", chain(&e));
                continue;
            }
        };
        let key = (plan.namespace(), plan.name_any());
        let mut row = list_row(&plan, all, chrono::Utc::now());
        if deleted {
            row[usize::from(all) + 1] = "(deleted)".into();
            seen.remove(&key);
        } else if seen.get(&key).is_some_and(|r| same_row(r, &row)) {
            continue;
        } else {
            seen.insert(key, row.clone());
        }
        if let Some(f) = output {
            write_doc(&mut out, &view::plan_view(&plan, None), f)?;
        } else {
            rows.push(row);
            if let Some(line) = columns(&rows).last() {
                writeln!(out, "{line}")?;
            }
        }
        out.flush()?;
    }
    Ok(0)
}

/// Rows equal but for the age column (the age alone is no change).
fn same_row(a: &[String], b: &[String]) -> bool {
    let age = a.len().saturating_sub(2);
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .enumerate()
            .all(|(i, (x, y))| i == age || x == y)
}

/// One document of a stream: JSON on one line, YAML after `---`.
fn write_doc<T: serde::Serialize>(
    out: &mut std::io::Stdout,
    doc: &T,
    f: Format,
) -> std::io::Result<()> {
    if f == Format::Yaml {
        out.write_all(b"---\n")?;
    }
    out.write_all(view::to_text(doc, f, true).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::fixtures::{plan, plan_json};
    use serde_json::json;

    #[test]
    fn list_rows_name_the_failing_gate() {
        let mut j = plan_json();
        j["metadata"]["creationTimestamp"] = json!("2025-01-02T08:00:00Z");
        j["status"]["phase"] = json!("RolledBack");
        j["status"]["failure"] = json!({"revision": "tn5wd9cz2h", "gate": "error-rate",
            "reason": "ThresholdExceeded", "message": "0.2 > 0.05"});
        let p: ReleasePlan = serde_json::from_value(j).unwrap();
        let now = "2025-01-02T09:30:00Z".parse().unwrap();
        assert_eq!(
            list_row(&p, true, now),
            [
                "prod",
                "shop",
                "RolledBack",
                "step 2/4",
                "25%",
                "x8r2kq7b4m",
                "tn5wd9cz2h",
                "web 4/4, worker 2/2",
                "1h30m0s",
                "error-rate (ThresholdExceeded)"
            ]
        );
        assert_eq!(list_row(&plan(), false, now)[8], "-");
        assert_eq!(list_header(true)[0], "NAMESPACE");
    }

    #[test]
    fn ready_counts_both_revisions_of_a_changing_component_and_marks_autoscaled_ones() {
        let mut j = plan_json();
        j["status"]["components"][0]["currentReady"] = json!(0);
        j["status"]["components"][1]["autoscaling"] = json!({"scale": "shop-worker"});
        j["status"]["components"][1]["replicas"] = json!(7);
        j["status"]["components"][1]["currentReady"] = json!(5);
        let p: ReleasePlan = serde_json::from_value(j).unwrap();
        assert_eq!(
            ready_text(&p.status.unwrap().components),
            "web 3/4, worker 5/7*"
        );
        assert_eq!(ready_text(&[]), "-");
    }
}
