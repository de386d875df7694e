use super::*;
use crate::plan::simulate::Start;
use chrono::TimeZone;
use serde_json::json;
use std::collections::BTreeSet;

fn plan(image: &str, replicas: i32, cpu: &str) -> ReleasePlan {
    serde_json::from_value(json!({
        "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
        "metadata": {"name": "shop", "namespace": "prod"},
        "spec": {
            "components": [{"name": "web", "replicas": replicas, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": image,
                    "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}]}}}],
            "strategy": {"steps": [{"setWeight": 25}, {"pause": {}}, {"setWeight": 50}, {"pause": {"duration": "1m"}}]},
            "health": {"gates": [{"name": "errors", "webhook": {"url": "http://127.0.0.1:9/check"}}]}
        }
    }))
    .unwrap()
}

fn start(
    p: &ReleasePlan,
    status: ReleasePlanStatus,
    revisions: Vec<RevisionObs>,
    ready_after: u64,
) -> Start {
    Start {
        plan: "shop".into(),
        spec: p.spec.clone(),
        generation: 2,
        status,
        revisions,
        workloads: Default::default(),
        now: chrono::Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap(),
        ready_after: Duration::from_secs(ready_after),
        config: None,
    }
}

/// The live plan `v1` (Stable, simulated) and the preview of `v2` from it.
fn preview_of_change() -> PreviewView {
    let v1 = plan("shop:1", 4, "250m");
    let first = simulate(Start {
        generation: 1,
        ..start(&v1, ReleasePlanStatus::default(), Vec::new(), 0)
    });
    let mut live = v1.clone();
    live.status = Some(first.status.clone());
    let v2 = plan("shop:2", 4, "500m");
    let min = simulate(start(&v2, first.status.clone(), first.revisions.clone(), 0));
    let exp = simulate(start(
        &v2,
        first.status.clone(),
        first.revisions.clone(),
        20,
    ));
    let dry = DryRunView {
        plan: DryRunResult {
            object: "ReleasePlan/shop".into(),
            result: "accepted".into(),
            message: None,
        },
        deployments: vec![DryRunResult {
            object: "Deployment/x".into(),
            result: "refused".into(),
            message: Some("no".into()),
        }],
    };
    let mut v = document(
        &v2,
        Some(&live),
        &first.revisions,
        &min,
        &exp,
        Duration::from_secs(20),
        Some(dry),
    );
    v.gates_now = Some(vec![GateNowView {
        name: "errors".into(),
        kind: "webhook".into(),
        verdict: "Failed".into(),
        value: Some(500.0),
        message: Some("HTTP 500".into()),
    }]);
    v
}

#[test]
fn previews_a_change_from_the_live_plan() {
    let v = preview_of_change();
    assert!(v.rollout && v.from_live);
    assert_eq!(v.result, "Stable");
    let c = &v.changes[0];
    assert_eq!((c.change.as_str(), c.new_revision), ("changed", true));
    assert_eq!(
        c.fields,
        [
            "template.spec.containers[app].image",
            "template.spec.containers[app].resources.requests.cpu"
        ]
    );
    assert_eq!(c.images[0].from.as_deref(), Some("shop:1"));
    assert_eq!(c.images[0].to.as_deref(), Some("shop:2"));
    let rows: Vec<(i32, &str, i32, i32, i32, bool)> = v
        .steps
        .iter()
        .map(|s| {
            (
                s.index,
                s.text.as_str(),
                s.weight,
                s.components[0].current_replicas,
                s.components[0].stable_replicas,
                s.waits_for_promotion,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (0, "25%", 25, 1, 3, false),
            (1, "pause", 25, 1, 3, true),
            (2, "50%", 50, 2, 2, false),
            (3, "pause 1m", 50, 2, 2, false),
            (4, "final: 100%", 100, 4, 0, false),
            (4, "stable", 100, 4, 0, false),
        ]
    );
    assert_eq!(v.steps[0].gates, ["errors"]);
    assert!(v.steps[5].gates.is_empty());
    assert!(v.duration.minimum_seconds >= 60.0);
    assert!(v.duration.expected_seconds >= v.duration.minimum_seconds + 59.0);
    assert_eq!(v.duration.promotions, 1);
    // 4 run now; the new pods come before the stable ones go: at the final
    // step 4 new beside 2 stable.
    assert_eq!((v.peak[0].pods, v.peak[0].extra_pods), (6, 2));
    assert_eq!(
        (v.peak[0].extra_cpu_millis, v.peak[0].extra_memory_bytes),
        (1000, 256 << 20)
    );
    let t = text(&v);
    for line in [
        "web              changed   new revision",
        "image app: shop:1 -> shop:2",
        "waits for promote",
        "Deployment/x: refused: no",
        "2 more than now: cpu 1, memory 256Mi",
        "errors (webhook): Failed value 500: HTTP 500",
    ] {
        assert!(t.contains(line), "{line:?} not in\n{t}");
    }
}

#[test]
fn an_unchanged_plan_has_no_rollout() {
    let v1 = plan("shop:1", 2, "1");
    let first = simulate(Start {
        generation: 1,
        ..start(&v1, ReleasePlanStatus::default(), Vec::new(), 0)
    });
    let mut live = v1.clone();
    live.status = Some(first.status.clone());
    let again = simulate(Start {
        generation: 1,
        ..start(&v1, first.status.clone(), first.revisions.clone(), 0)
    });
    let v = document(
        &v1,
        Some(&live),
        &first.revisions,
        &again,
        &again,
        Duration::ZERO,
        None,
    );
    assert!(!v.rollout);
    assert_eq!(v.changes[0].change, "unchanged");
    assert!(!v.changes[0].new_revision);
    assert_eq!(v.peak[0].extra_pods, 0);
    assert!(text(&v).contains("No rollout"));
}

#[test]
fn diff_paths_names_list_items_by_name() {
    let mut out = Vec::new();
    diff_paths(
        &json!({"a": 1, "l": [{"name": "x", "v": 1}, {"name": "y", "v": 1}], "p": [1, 2]}),
        &json!({"a": 1, "l": [{"name": "y", "v": 2}], "p": [1, 3], "n": true}),
        "",
        6,
        &mut out,
    );
    assert_eq!(out, ["l[x]", "l[y].v", "n", "p[1]"]);
}

#[test]
fn quantities() {
    assert_eq!(quantity("250m", 1000.0), Some(250));
    assert_eq!(quantity("1.5", 1000.0), Some(1500));
    assert_eq!(quantity("2", 1000.0), Some(2000));
    assert_eq!(quantity("128Mi", 1.0), Some(128 << 20));
    assert_eq!(quantity("1G", 1.0), Some(1_000_000_000));
    assert_eq!(quantity("1e3", 1.0), Some(1000));
    assert_eq!(quantity("lots", 1.0), None);
    assert_eq!(quantity("-1", 1.0), None);
}

/// Every field path of a JSON document: `a`, `b[].c`.
fn paths(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                // A list is named with `[]`; its items' fields under that.
                out.insert(if child.is_array() {
                    format!("{p}[]")
                } else {
                    p.clone()
                });
                paths(child, &p, out);
            }
        }
        Value::Array(items) => {
            for i in items {
                paths(i, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_documented_fields_are_the_documents() {
    let v = preview_of_change();
    let mut have = BTreeSet::new();
    paths(&serde_json::to_value(&v).unwrap(), "", &mut have);
    // The paths of objects inside lists are named by their fields.
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/plugin.md")).unwrap();
    let start = doc
        .find("\n## preview")
        .expect("docs/plugin.md has a preview section");
    let section = &doc[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut documented = BTreeSet::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let first = line.split('|').nth(1).unwrap_or_default();
        for (i, part) in first.split('`').enumerate() {
            if i % 2 == 1 {
                documented.insert(part.to_string());
            }
        }
    }
    assert_eq!(
        documented, have,
        "docs/plugin.md's preview document table against the document"
    );
}
