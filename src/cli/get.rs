//! `kubectl releaseplan get`: a plan drawn as a tree (the plan line, its
//! components with their revision Deployments, the gates and the
//! conditions), or its `-o` document, once or on every change.

use super::connect::Ctx;
use super::error::CliError;
use super::text::{columns, step_text, traffic_text};
use super::view::{self, Format, Live, images};

/// A plan's objects: its Deployments, StatefulSets and their pods.
type Objects = (
    Vec<Deployment>,
    Vec<k8s_openapi::api::apps::v1::StatefulSet>,
    Vec<k8s_openapi::api::apps::v1::DaemonSet>,
    Vec<k8s_openapi::api::core::v1::Pod>,
);
use crate::api::{ReleasePlan, ReleasePlanStatus};
use crate::plan::{RevisionObs, revision_of};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// A node of a text tree.
struct Node {
    text: String,
    children: Vec<Node>,
}

impl Node {
    fn leaf(text: impl Into<String>) -> Node {
        Node {
            text: text.into(),
            children: Vec::new(),
        }
    }
}

fn draw(out: &mut String, nodes: &[Node], prefix: &str) {
    for (i, node) in nodes.iter().enumerate() {
        let last = i + 1 == nodes.len();
        let (branch, cont) = if last {
            ("└── ", "    ")
        } else {
            ("├── ", "│   ")
        };
        let _ = writeln!(out, "{prefix}{branch}{}", node.text.trim_end());
        draw(out, &node.children, &format!("{prefix}{cont}"));
    }
}

/// Facts of one revision Deployment, for the tree: what the operator observes
/// ([`revision_of`]) and the images.
struct Rev {
    obs: RevisionObs,
    image: String,
    /// The ConfigMaps and Secrets its pods read (its copies, when versioned).
    config: String,
}

fn rev_of(d: &Deployment) -> Option<Rev> {
    let obs = revision_of(d)?;
    let image = images(d).join(",");
    let config = super::view::config_read(d).join(",");
    Some(Rev { obs, image, config })
}

/// The line of a component: its kind, replicas and ready pods.
fn component_text(
    name: &str,
    kind: Option<&str>,
    cs: Option<&crate::api::ComponentStatus>,
    settled: bool,
) -> String {
    let kind = kind.map(|k| format!("  {k}")).unwrap_or_default();
    match cs {
        Some(c) if settled => format!(
            "{name}{kind}  replicas {}  ({}/{} ready)",
            c.replicas, c.current_ready, c.current_replicas
        ),
        Some(c) => format!(
            "{name}{kind}  replicas {}  (current {}/{} ready, stable {}/{} ready)",
            c.replicas, c.current_ready, c.current_replicas, c.stable_ready, c.stable_replicas
        ),
        None => format!("{name}  (not in status)"),
    }
}

/// A StatefulSet component's revision, as a row of the tree.
fn set_rev(r: &super::live::SetRevision) -> Rev {
    Rev {
        obs: RevisionObs {
            name: r.set.clone(),
            component: r.component.clone(),
            hash: r.hash.clone(),
            replicas: r.replicas,
            ready: r.ready,
            current: r.replicas,
            created: None,
        },
        image: r.images.join(","),
        config: if r.kind == "DaemonSet" {
            format!("nodes {}", r.nodes.join(","))
        } else {
            format!("ordinals {}", super::live::ordinals_text(&r.ordinals))
        },
    }
}

/// The components of the plan with their revision Deployments, in status order,
/// then any component only the Deployments know of.
fn component_nodes(status: &ReleasePlanStatus, live: Live<'_>) -> Vec<Node> {
    let mut by_component: BTreeMap<String, Vec<Rev>> = BTreeMap::new();
    let sets = super::live::set_revisions(live, status);
    let set_revs = sets.iter().map(set_rev);
    for rev in live.deployments.iter().filter_map(rev_of).chain(set_revs) {
        by_component
            .entry(rev.obs.component.clone())
            .or_default()
            .push(rev);
    }
    let mut order: Vec<String> = status.components.iter().map(|c| c.name.clone()).collect();
    for name in by_component.keys() {
        if !order.contains(name) {
            order.push(name.clone());
        }
    }
    order
        .into_iter()
        .map(|name| {
            let cs = status.components.iter().find(|c| c.name == name);
            let current = cs.and_then(|c| c.current_hash.clone());
            let stable = cs.and_then(|c| c.stable_hash.clone());
            let role = |hash: &str| -> &'static str {
                match (
                    current.as_deref() == Some(hash),
                    stable.as_deref() == Some(hash),
                ) {
                    (true, true) => "current, stable",
                    (true, false) => "current",
                    (false, true) => "stable",
                    (false, false) if crate::api::revision::is_baseline(hash) => "baseline",
                    (false, false) => "old",
                }
            };
            let rank = |hash: &str| match role(hash) {
                "current, stable" | "current" => 0,
                "stable" => 1,
                "baseline" => 2,
                _ => 3,
            };
            let mut revs = by_component.remove(&name).unwrap_or_default();
            revs.sort_by(|a, b| {
                rank(&a.obs.hash)
                    .cmp(&rank(&b.obs.hash))
                    .then_with(|| a.obs.name.cmp(&b.obs.name))
            });
            let rows: Vec<Vec<String>> = revs
                .iter()
                .map(|r| {
                    vec![
                        r.obs.name.clone(),
                        r.obs.hash.clone(),
                        format!("{}/{} ready", r.obs.ready, r.obs.replicas),
                        role(&r.obs.hash).to_string(),
                        r.image.clone(),
                        r.config.clone(),
                    ]
                })
                .collect();
            let mut children: Vec<Node> = columns(&rows).into_iter().map(Node::leaf).collect();
            // A revision the status names but no Deployment carries (not created yet, or pruned).
            for (hash, what) in [
                (current.as_deref(), "current"),
                (stable.as_deref(), "stable"),
            ] {
                if let Some(hash) = hash
                    && !revs.iter().any(|r| r.obs.hash == hash)
                    && !(what == "stable" && current.as_deref() == Some(hash))
                {
                    let object = if sets.iter().any(|r| r.component == name) {
                        "no pod"
                    } else {
                        "no Deployment"
                    };
                    children.push(Node::leaf(format!("{hash}  {object} ({what} revision)")));
                }
            }
            let kind = sets.iter().find(|r| r.component == name).map(|r| r.kind);
            let mut text = component_text(&name, kind, cs, current.is_some() && current == stable);
            if let Some(a) = cs.and_then(|c| c.autoscaling.as_ref()) {
                text.push_str(&autoscaling_text(a));
            }
            if let Some(c) = cs.filter(|c| !c.waiting_for.is_empty()) {
                text.push_str(&waiting_text(status.phase, &c.waiting_for));
            }
            if let Some(c) = cs.filter(|c| !c.config.is_empty()) {
                let list: Vec<String> = c.config.iter().map(ToString::to_string).collect();
                children.push(Node::leaf(format!("config: {}", list.join(", "))));
            }
            if let Some(a) = cs.and_then(|c| c.adopted.as_ref()) {
                children.push(Node::leaf(adopted_text(a)));
            }
            Node { text, children }
        })
        .collect()
}

/// Renders a plan and its revision Deployments as a tree: the plan line, the
/// components with their revisions, the gates and the conditions.
// One section after another (plan, components, gates, conditions), read top to bottom as it prints.
#[allow(clippy::too_many_lines)]
pub fn render_tree(plan: &ReleasePlan, live: Live<'_>) -> String {
    let status = plan.status.clone().unwrap_or_default();
    let name = plan.name_any();
    let ns = plan.namespace().unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "ReleasePlan {ns}/{name}  {}  {}  weight {}%{}",
        status.phase,
        step_text(plan),
        status.weight,
        traffic_text(&status)
    );
    let mut top: Vec<Node> = Vec::new();
    let mut info = vec![
        vec![
            "stable".to_string(),
            status
                .stable_revision
                .clone()
                .unwrap_or_else(|| "none".into()),
        ],
        vec![
            "current".to_string(),
            status
                .current_revision
                .clone()
                .unwrap_or_else(|| "none".into()),
        ],
    ];
    let generation = plan.metadata.generation.unwrap_or(0);
    let observed = status
        .observed_generation
        .map_or_else(|| "none".into(), |g| g.to_string());
    info.push(vec![
        "generation".into(),
        format!("{generation} (observed {observed})"),
    ]);
    if let Some(m) = status.message.as_deref().filter(|m| !m.is_empty()) {
        info.push(vec!["message".into(), m.to_string()]);
    }
    if let Some(f) = &status.failure {
        info.push(vec![
            "failure".into(),
            format!("{} ({}): {}", f.gate, f.reason, f.message),
        ]);
    }
    if plan.spec.paused {
        info.push(vec!["paused".into(), "spec.paused is true".into()]);
    }
    if status.pause_requested {
        info.push(vec![
            "paused".into(),
            "a pause request holds the rollout (resume to continue)".into(),
        ]);
    }
    for line in columns(&info) {
        let _ = writeln!(out, "│ {line}");
    }

    let components = component_nodes(&status, live);
    top.push(Node {
        text: if components.is_empty() {
            "components: none yet".into()
        } else {
            "components".into()
        },
        children: components,
    });

    let gate_rows: Vec<Vec<String>> = status
        .gates
        .iter()
        .map(|g| {
            // A dry run's verdict never decides: say so beside it.
            let verdict = if g.dry_run {
                format!("{} (dry run)", g.verdict)
            } else {
                g.verdict.to_string()
            };
            let mut row = vec![
                g.name.clone(),
                verdict,
                format!("value {}", g.value.as_deref().unwrap_or("-")),
                format!("failures {}", g.failures),
            ];
            if g.inconclusive > 0 {
                row.push(format!("inconclusive {}", g.inconclusive));
            }
            if g.awaiting_decision && !g.dry_run {
                row.push("awaiting promote, retry or abort".into());
            }
            if let Some(m) = g.message.as_deref().filter(|m| !m.is_empty()) {
                row.push(m.to_string());
            }
            row
        })
        .collect();
    top.push(Node {
        text: if gate_rows.is_empty() {
            "gates: none in this step".into()
        } else {
            "gates".into()
        },
        children: columns(&gate_rows).into_iter().map(Node::leaf).collect(),
    });
    for g in &status.gates {
        if let Some(a) = &g.analysis {
            top.push(analysis_node(&g.name, a));
        }
    }

    let cond_rows: Vec<Vec<String>> = status
        .conditions
        .iter()
        .map(|c| vec![c.type_.clone(), c.status.clone(), c.reason.clone()])
        .collect();
    top.push(Node {
        text: if cond_rows.is_empty() {
            "conditions: none".into()
        } else {
            "conditions".into()
        },
        children: columns(&cond_rows).into_iter().map(Node::leaf).collect(),
    });
    draw(&mut out, &top, "");
    out
}

/// Reads a plan's objects.
async fn read(ctx: &Ctx, plan: &ReleasePlan) -> Result<Objects, CliError> {
    let deployments = ctx.deployments(&plan.name_any()).await?;
    let (sets, daemons, pods) = ctx.workload_objects(plan).await?;
    Ok((deployments, sets, daemons, pods))
}

/// `get`: the tree (or the `-o` document) of a plan; with `watch`, redrawn on
/// every change.
pub(super) async fn run(
    ctx: &Ctx,
    name: &str,
    watch: bool,
    output: Option<Format>,
) -> Result<i32, CliError> {
    let render = |plan: &ReleasePlan, (deployments, sets, daemons, pods): &Objects| {
        let live = Live {
            deployments,
            stateful_sets: sets,
            daemon_sets: daemons,
            pods,
        };
        match output {
            Some(f) => view::to_text(&view::plan_view(plan, Some(live)), f, watch),
            None => render_tree(plan, live),
        }
    };
    let plan = ctx.plan(name).await?;
    let objects = read(ctx, &plan).await?;
    let mut last = render(&plan, &objects);
    let mut out = std::io::stdout();
    if !watch {
        out.write_all(last.as_bytes())?;
        return Ok(0);
    }
    let tty = out.is_terminal() && output.is_none();
    let yaml = output == Some(Format::Yaml);
    let draw = |out: &mut std::io::Stdout, text: &str| -> std::io::Result<()> {
        if tty {
            // Home the cursor and clear the screen, then draw.
            write!(out, "\x1b[H\x1b[2J{text}")?;
        } else if yaml {
            write!(out, "---\n{text}")?;
        } else if output.is_some() {
            write!(out, "{text}")?;
        } else {
            writeln!(out, "{text}")?;
        }
        out.flush()
    };
    draw(&mut out, &last)?;
    let changes = ctx.plan_changes(name);
    futures::pin_mut!(changes);
    // Deployments change without a plan status write now and then: refresh too.
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        let plan = tokio::select! {
            change = changes.next() => match change {
                Some(Some(p)) => p,
                Some(None) => return Err(CliError::Deleted(name.to_string())),
                None => return Ok(0),
            },
            _ = tick.tick() => match ctx.plan(name).await {
                Ok(p) => p,
                Err(CliError::NotFound { .. }) => return Err(CliError::Deleted(name.to_string())),
                Err(_) => continue,
            },
        };
        let Ok(objects) = read(ctx, &plan).await else {
            continue;
        };
        let text = render(&plan, &objects);
        if text != last {
            draw(&mut out, &text)?;
            last = text;
        }
    }
}

/// What a component waits for (`dependsOn`), after its replicas: the
/// components it starts after, or in a rollback those that go back first.
fn waiting_text(phase: crate::api::Phase, on: &[String]) -> String {
    let what = if phase == crate::api::Phase::RollbackInProgress {
        "rolls back after"
    } else {
        "waits for"
    };
    format!("  {what} {}", on.join(", "))
}

/// The hand-over of a component's adopted Deployment, under its revisions.
fn adopted_text(a: &crate::api::AdoptedStatus) -> String {
    let name = &a.deployment;
    match (&a.message, a.done) {
        (Some(m), _) => format!("adopts deployment/{name}: {m}"),
        (None, true) => format!("adopted deployment/{name}  handed over: runs no pod; delete it"),
        (None, false) => format!(
            "adopted deployment/{name}  {}/{} ready  handing over (had {})",
            a.ready,
            a.replicas,
            a.original_replicas.unwrap_or(a.replicas)
        ),
    }
}

/// How a component is autoscaled, after its replicas: by whom, and why its
/// HPA cannot scale as asked when it cannot.
fn autoscaling_text(a: &crate::api::ComponentAutoscaling) -> String {
    let by = match (&a.hpa, a.owns_hpa) {
        (Some(hpa), _) => format!("hpa/{hpa}"),
        (None, true) => "hpa (not created yet)".to_string(),
        (None, false) => format!("componentscale/{}", a.scale),
    };
    match &a.message {
        Some(m) => format!("  autoscaled by {by}: {m}"),
        None => format!("  autoscaled by {by}"),
    }
}

/// An analysis gate's last judgement: its score and outcome, then one row
/// per metric (samples each side, the change, p-value, interval).
fn analysis_node(gate: &str, a: &crate::api::analysis::AnalysisStatus) -> Node {
    // The side compared with: the baseline, or the stable pods.
    let other = match &a.compared_with {
        Some(r) if crate::api::revision::is_baseline(r) => "baseline",
        _ => "stable",
    };
    let rows: Vec<Vec<String>> = a
        .metrics
        .iter()
        .map(|m| {
            let mut row = vec![
                m.name.clone(),
                m.verdict.clone(),
                format!(
                    "canary {} / {other} {}",
                    m.canary_samples, m.baseline_samples
                ),
            ];
            if let Some(e) = m.effect {
                row.push(format!("change {:+.1}%", e * 100.0));
            }
            if let Some(p) = m.p_value {
                row.push(format!("p {p:.2e}"));
            }
            if let [lo, hi] = m.interval.as_slice() {
                row.push(format!("shift [{lo:.4}, {hi:.4}]"));
            }
            row
        })
        .collect();
    let against = a
        .compared_with
        .as_ref()
        .map(|r| format!("  against {r}"))
        .unwrap_or_default();
    Node {
        text: format!(
            "analysis {gate}  score {:.0}  {}{against}",
            a.score, a.outcome
        ),
        children: columns(&rows).into_iter().map(Node::leaf).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::fixtures::{deployment, plan, plan_json};
    use serde_json::json;

    #[test]
    fn autoscaled_components_say_by_whom_and_why_they_cannot_scale() {
        let mut a = crate::api::ComponentAutoscaling {
            scale: "shop-web".into(),
            ..Default::default()
        };
        assert_eq!(
            autoscaling_text(&a),
            "  autoscaled by componentscale/shop-web"
        );
        a.owns_hpa = true;
        assert_eq!(
            autoscaling_text(&a),
            "  autoscaled by hpa (not created yet)"
        );
        a.hpa = Some("shop-web".into());
        a.message = Some(
            "TooManyReplicas: the desired replica count is more than the maximum replica count"
                .into(),
        );
        assert_eq!(
            autoscaling_text(&a),
            "  autoscaled by hpa/shop-web: TooManyReplicas: the desired replica count is more than the maximum replica count"
        );
    }

    #[test]
    fn adopted_deployments_say_how_far_the_hand_over_is() {
        let mut a = crate::api::AdoptedStatus {
            deployment: "web".into(),
            replicas: 3,
            ready: 3,
            original_replicas: Some(4),
            ..Default::default()
        };
        assert_eq!(
            adopted_text(&a),
            "adopted deployment/web  3/3 ready  handing over (had 4)"
        );
        a.done = true;
        assert_eq!(
            adopted_text(&a),
            "adopted deployment/web  handed over: runs no pod; delete it"
        );
        a.message = Some("Deployment web not found".into());
        assert_eq!(
            adopted_text(&a),
            "adopts deployment/web: Deployment web not found"
        );
    }

    #[test]
    fn tree_shows_plan_components_gates_conditions() {
        let deployments = vec![
            deployment("shop-web-web1hash11", "web", "web1hash11", 3, 3, "web:1"),
            deployment("shop-web-web2hash22", "web", "web2hash22", 1, 1, "web:2"),
            deployment("shop-web-old0hash00", "web", "old0hash00", 0, 0, "web:0"),
            deployment(
                "shop-worker-wrk1hash11",
                "worker",
                "wrk1hash11",
                2,
                2,
                "worker:1",
            ),
        ];
        let text = render_tree(
            &plan(),
            Live {
                deployments: &deployments,
                ..Live::default()
            },
        );
        let expected = "\
ReleasePlan prod/shop  RollingOut  step 2/4  weight 25%
│ stable      x8r2kq7b4m
│ current     tn5wd9cz2h
│ generation  3 (observed 3)
│ message     rolling out tn5wd9cz2h (step 2/4, weight 25%): waiting for promotion
├── components
│   ├── web  replicas 4  (current 1/1 ready, stable 3/3 ready)
│   │   ├── shop-web-web2hash22  web2hash22  1/1 ready  current  web:2
│   │   ├── shop-web-web1hash11  web1hash11  3/3 ready  stable   web:1
│   │   └── shop-web-old0hash00  old0hash00  0/0 ready  old      web:0
│   └── worker  replicas 2  (2/2 ready)
│       └── shop-worker-wrk1hash11  wrk1hash11  2/2 ready  current, stable  worker:1
├── gates
│   └── error-rate  Passed  value 0.01  failures 0
└── conditions
    ├── Ready   False  RollingOut
    └── Paused  True   PauseStep
";
        assert_eq!(text, expected, "\n{text}");
    }

    #[test]
    fn an_analysis_shows_each_metric_judged() {
        use crate::api::analysis::{AnalysisStatus, MetricVerdict};
        let a = AnalysisStatus {
            compared_with: Some("abc-baseline".into()),
            score: 50.0,
            outcome: "Fail".into(),
            metrics: vec![
                MetricVerdict {
                    name: "ttft".into(),
                    verdict: "Failed".into(),
                    canary_samples: 16,
                    baseline_samples: 16,
                    statistic: Some(256.0),
                    p_value: Some(1.2e-6),
                    effect: Some(0.3),
                    interval: vec![0.014, 0.016],
                },
                MetricVerdict {
                    name: "errors".into(),
                    verdict: "Inconclusive".into(),
                    canary_samples: 4,
                    baseline_samples: 1200,
                    ..MetricVerdict::default()
                },
            ],
        };
        let mut out = String::new();
        draw(&mut out, &[analysis_node("judge", &a)], "");
        assert_eq!(
            out,
            "\
└── analysis judge  score 50  Fail  against abc-baseline
    ├── ttft    Failed        canary 16 / baseline 16   change +30.0%  p 1.20e-6  shift [0.0140, 0.0160]
    └── errors  Inconclusive  canary 4 / baseline 1200
",
            "\n{out}"
        );
    }

    #[test]
    fn tree_counts_pods_as_the_operator_does() {
        // Ready pods of an older template are not this revision's; a missing
        // spec.replicas is 1 (the API server's default), as the controller reads it.
        let mut d = deployment("shop-web-web2hash22", "web", "web2hash22", 3, 3, "web:2");
        if let Some(s) = d.status.as_mut() {
            s.updated_replicas = Some(1);
        }
        let mut unset = deployment("shop-web-web1hash11", "web", "web1hash11", 1, 1, "web:1");
        if let Some(s) = unset.spec.as_mut() {
            s.replicas = None;
        }
        let text = render_tree(
            &plan(),
            Live {
                deployments: &[d.clone(), unset.clone()],
                ..Live::default()
            },
        );
        assert!(text.contains("web2hash22  1/3 ready"), "{text}");
        assert!(text.contains("web1hash11  1/1 ready"), "{text}");
        let seen = |d: &Deployment| revision_of(d).map(|r| (r.ready, r.replicas));
        assert_eq!(seen(&d), Some((1, 3)));
        assert_eq!(seen(&unset), Some((1, 1)));
    }

    #[test]
    fn tree_of_a_plan_without_status() {
        let mut v = plan_json();
        v.as_object_mut().unwrap().remove("status");
        let p: ReleasePlan = serde_json::from_value(v).unwrap();
        let text = render_tree(&p, Live::default());
        assert!(
            text.starts_with("ReleasePlan prod/shop  Pending  step 1/4  weight 0%\n"),
            "{text}"
        );
        assert!(text.contains("generation  3 (observed none)"), "{text}");
        assert!(text.contains("components: none yet"), "{text}");
        assert!(text.contains("gates: none in this step"), "{text}");
        assert!(text.contains("conditions: none"), "{text}");
    }

    #[test]
    fn tree_names_missing_deployments_and_failures() {
        let mut v = plan_json();
        v["status"]["failure"] = json!({"revision": "tn5wd9cz2h", "gate": "podHealth", "reason": "CrashLoopBackOff", "message": "pod x crashed"});
        v["status"]["pauseRequested"] = json!(true);
        let p: ReleasePlan = serde_json::from_value(v).unwrap();
        let text = render_tree(&p, Live::default());
        assert!(
            text.contains("│ failure     podHealth (CrashLoopBackOff): pod x crashed"),
            "{text}"
        );
        assert!(text.contains("a pause request holds the rollout"), "{text}");
        assert!(
            text.contains("web2hash22  no Deployment (current revision)"),
            "{text}"
        );
        assert!(
            text.contains("web1hash11  no Deployment (stable revision)"),
            "{text}"
        );
        // current == stable: named once.
        assert_eq!(
            text.matches("wrk1hash11  no Deployment").count(),
            1,
            "{text}"
        );
    }
}
