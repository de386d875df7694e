//! `preview`: what applying a plan file will do, before it is applied.
//!
//! The timeline is the core's simulation ([`crate::plan::simulate`]), which
//! drives the operator's own `decide`: the plugin computes no replica, weight
//! or step end itself, so a preview cannot drift from the rollout. Around it
//! the plugin adds what needs the cluster or the files: why each component
//! changes (the template fields that differ from the live plan), the pods and
//! resource requests needed at the peak, and server-side dry runs of the plan
//! and of each Deployment the operator would create (built by the
//! controller's own function).

use super::connect::{Ctx, Global};
use super::error::{CliError, chain};
use super::lint::{LINT_INVALID, Verdict, check_document, read_documents};
use super::view::{API_VERSION, Format, to_text};
use crate::api::{Component, ReleasePlan, ReleasePlanStatus};
use crate::plan::config::{ConfigObs, ConfigObservation};
use crate::plan::simulate::{End, Simulation, Start, StepAt, simulate};
use crate::plan::steps::{Step, strategy_steps};
use crate::plan::{RevisionObs, revision_of};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use releaseplan_core::plan::stateful::WorkloadObs;
use serde::Serialize;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// The options of `preview`.
#[derive(clap::Args, Debug, Clone)]
pub struct PreviewArgs {
    /// The plan file (YAML or JSON; its first ReleasePlan; `-` for stdin).
    #[arg(short, long)]
    pub filename: std::path::PathBuf,
    /// Start from the live plan of the same name (its status and revision
    /// Deployments) and show what changes; without it the file is previewed as
    /// a new plan.
    #[arg(long)]
    pub live: bool,
    /// No cluster at all: no live plan, no dry runs.
    #[arg(long, conflicts_with = "live")]
    pub offline: bool,
    /// How long a new pod takes to become ready, for the expected duration
    /// (the minimum assumes at once), e.g. 30s, 2m.
    #[arg(long, default_value = "30s", value_parser = crate::api::time::parse_duration)]
    pub ready_after: Duration,
    /// Evaluate the plan's Prometheus and webhook gates once, now, from this
    /// machine, and show what they would say (nothing is written).
    #[arg(long, conflicts_with = "offline")]
    pub with_gates: bool,
    /// Print a document for scripts instead of the text (shape: docs/plugin.md).
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
}

/// The `preview` document (`kind: Preview`).
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PreviewView {
    /// `plugin.releaseplan.io/v1`.
    pub api_version: &'static str,
    /// `Preview`.
    pub kind: &'static str,
    /// Namespace of the plan.
    pub namespace: String,
    /// Name of the plan.
    pub name: String,
    /// Previewed from the live plan (`--live`) or as a new plan.
    pub from_live: bool,
    /// A rollout starts (or goes on).
    pub rollout: bool,
    /// How the simulation ended: `Stable`, `Invalid` or `Stuck`.
    pub result: String,
    /// Why, when not `Stable`.
    pub message: Option<String>,
    /// One per component of the file or of the live plan.
    pub changes: Vec<ChangeView>,
    /// The steps, as they settle.
    pub steps: Vec<StepView>,
    /// How long it takes.
    pub duration: DurationView,
    /// Pods and requests at the peak, per component.
    pub peak: Vec<PeakView>,
    /// Server-side dry runs (`null` with `--offline`).
    pub dry_run: Option<DryRunView>,
    /// The gates evaluated once now (`null` without `--with-gates`).
    pub gates_now: Option<Vec<GateNowView>>,
}

/// A gate evaluated once against live data (`--with-gates`).
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GateNowView {
    /// Gate name.
    pub name: String,
    /// `prometheus`, `webhook` or `analysis`.
    pub kind: String,
    /// `Passed`, `Failed`, `Inconclusive` or `Error` (the call itself failed).
    pub verdict: String,
    /// The measured value (a webhook's status code), when there is one.
    pub value: Option<f64>,
    /// Why, when not passed.
    pub message: Option<String>,
}

/// What happens to one component.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChangeView {
    /// Component name.
    pub component: String,
    /// `added`, `removed`, `changed` or `unchanged`.
    pub change: String,
    /// It gets a new revision (a new Deployment rolled out through the steps).
    pub new_revision: bool,
    /// The revision hash it will run (`null` when removed).
    pub hash: Option<String>,
    /// Paths of the fields of the component that differ (`template.spec.containers[app].image`).
    pub fields: Vec<String>,
    /// Containers whose image changes.
    pub images: Vec<ImageChange>,
    /// ConfigMaps and Secrets the component reads whose content differs from
    /// what its live revision carries (`ConfigMap shop-config`): with config
    /// versioning, a change of one alone is a new revision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<String>,
}

/// A container's image, before and after.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageChange {
    /// Container name.
    pub container: String,
    /// Image now (`null`: a new container).
    pub from: Option<String>,
    /// Image after (`null`: the container goes).
    pub to: Option<String>,
}

/// One step of the timeline.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StepView {
    /// `status.currentStep` (equals the number of steps for the final step).
    pub index: i32,
    /// The step in a few words: `20%`, `pause 30s`, `final: 100%`, `stable`.
    pub text: String,
    /// Phase: `RollingOut` or `Stable`.
    pub phase: String,
    /// `status.weight`.
    pub weight: i32,
    /// `status.trafficWeight`, with a router.
    pub traffic_weight: Option<i32>,
    /// Replicas per component once the step settled.
    pub components: Vec<StepComponentView>,
    /// Gates that judge the step.
    pub gates: Vec<String>,
    /// Minimum seconds from the start to this step.
    pub starts_after_seconds: f64,
    /// Minimum seconds in this step (pods ready at once).
    pub min_seconds: f64,
    /// Expected seconds in this step (pods ready after `--ready-after`).
    pub expected_seconds: Option<f64>,
    /// The step holds until `kubectl releaseplan promote`.
    pub waits_for_promotion: bool,
}

/// A component at a step.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StepComponentView {
    /// Component name.
    pub name: String,
    /// Replicas of the new revision.
    pub current_replicas: i32,
    /// Replicas of the stable revision (0 when it is the new one).
    pub stable_replicas: i32,
    /// Most pods of the component at once during the step.
    pub peak_pods: i32,
}

/// The duration of the whole release.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DurationView {
    /// With pods ready at once and gates passing at once, promotions at once.
    pub minimum_seconds: f64,
    /// With pods ready after `readyAfterSeconds`.
    pub expected_seconds: f64,
    /// The `--ready-after` assumed.
    pub ready_after_seconds: f64,
    /// Steps that wait for a promotion (their time is a human's).
    pub promotions: usize,
}

/// A component's peak.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PeakView {
    /// Component name.
    pub component: String,
    /// Most pods at once.
    pub pods: i32,
    /// Pods beyond those running now (the live Deployments; none for a new plan).
    pub extra_pods: i32,
    /// CPU requests of the extra pods, in millicores (the new template's).
    pub extra_cpu_millis: i64,
    /// Memory requests of the extra pods, in bytes (the new template's).
    pub extra_memory_bytes: i64,
}

/// The server-side dry runs.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DryRunView {
    /// The plan: a server-side apply dry run of the file.
    pub plan: DryRunResult,
    /// Each Deployment the operator would create, as it would create it.
    pub deployments: Vec<DryRunResult>,
}

/// One dry run.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DryRunResult {
    /// The object: `ReleasePlan/shop`, `Deployment/shop-web-7dn5sz8c2h`.
    pub object: String,
    /// `accepted`, `refused` (400/422: the object is invalid) or `error`.
    pub result: String,
    /// The API server's message when not accepted.
    pub message: Option<String>,
}

/// Field paths that differ between two JSON values: object keys joined with
/// `.`, list items named `[name]` when they have a name, else `[index]`.
/// Stops at `depth` levels (the path then names the whole subtree).
pub fn diff_paths(a: &Value, b: &Value, path: &str, depth: usize, out: &mut Vec<String>) {
    if a == b {
        return;
    }
    let at = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) if depth > 0 => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let (va, vb) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                diff_paths(va, vb, &at(k), depth - 1, out);
            }
        }
        (Value::Array(x), Value::Array(y)) if depth > 0 => {
            let all_named = |v: &Vec<Value>| v.iter().all(|i| i["name"].is_string());
            if all_named(x) && all_named(y) {
                let mut names: Vec<&str> = x
                    .iter()
                    .chain(y.iter())
                    .filter_map(|i| i["name"].as_str())
                    .collect();
                names.dedup();
                let mut seen = Vec::new();
                for n in names {
                    if seen.contains(&n) {
                        continue;
                    }
                    seen.push(n);
                    let find = |v: &'_ Vec<Value>| {
                        v.iter()
                            .find(|i| i["name"] == n)
                            .cloned()
                            .unwrap_or(Value::Null)
                    };
                    diff_paths(&find(x), &find(y), &format!("{path}[{n}]"), depth - 1, out);
                }
            } else if x.len() == y.len() {
                for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                    diff_paths(va, vb, &format!("{path}[{i}]"), depth - 1, out);
                }
            } else {
                out.push(path.to_string());
            }
        }
        _ => out.push(path.to_string()),
    }
}

fn containers(t: &PodTemplateSpec) -> Vec<(String, String)> {
    t.spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect()
}

fn image_changes(old: Option<&PodTemplateSpec>, new: Option<&PodTemplateSpec>) -> Vec<ImageChange> {
    let before = old.map(containers).unwrap_or_default();
    let after = new.map(containers).unwrap_or_default();
    let find = |list: &[(String, String)], n: &str| {
        list.iter().find(|(c, _)| c == n).map(|(_, i)| i.clone())
    };
    let mut names: Vec<&String> = before.iter().chain(after.iter()).map(|(n, _)| n).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|n| {
            let (from, to) = (find(&before, n), find(&after, n));
            (from != to).then(|| ImageChange {
                container: n.clone(),
                from,
                to,
            })
        })
        .collect()
}

/// What happens to each component: the file's against the live plan's spec
/// (`None`: a new plan); whether a new revision is rolled out is the
/// simulation's (the revision hash it runs differs from the live one).
pub fn changes(
    live: Option<&ReleasePlan>,
    file: &ReleasePlan,
    sim: &Simulation,
) -> Vec<ChangeView> {
    let live_components: &[Component] = live.map_or(&[], |p| &p.spec.components);
    let live_status = live.and_then(|p| p.status.as_ref());
    let live_hash = |name: &str| {
        live_status
            .and_then(|s| s.components.iter().find(|c| c.name == name))
            .and_then(|c| c.current_hash.clone())
    };
    let hash_after = |name: &str| {
        sim.steps
            .last()
            .and_then(|s| s.components.iter().find(|c| c.name == name))
            .and_then(|c| c.current_hash.clone())
    };
    let mut out = Vec::new();
    for c in &file.spec.components {
        let old = live_components.iter().find(|o| o.name == c.name);
        // The config the live revision carries against what is read now.
        let carried = live_status
            .and_then(|s| s.components.iter().find(|x| x.name == c.name))
            .map_or(&[][..], |x| x.config.as_slice());
        let config_changed: Vec<String> = sim
            .config_read()
            .map(|seen| {
                carried
                    .iter()
                    .filter(|k| !k.live)
                    .filter(|k| {
                        seen.objects
                            .get(&(k.kind, k.name.clone()))
                            .is_some_and(|o| Some(&o.digest) != k.digest.as_ref())
                    })
                    .map(|k| format!("{} {}", k.kind.as_str(), k.name))
                    .collect()
            })
            .unwrap_or_default();
        let mut fields = Vec::new();
        if let Some(o) = old {
            let (a, b) = (
                serde_json::to_value(o).unwrap_or_default(),
                serde_json::to_value(c).unwrap_or_default(),
            );
            diff_paths(&a, &b, "", 8, &mut fields);
        }
        let hash = hash_after(&c.name);
        let new_revision = hash.is_some() && hash != live_hash(&c.name);
        out.push(ChangeView {
            component: c.name.clone(),
            change: match (old, fields.is_empty()) {
                (None, _) => "added",
                (Some(_), true) => "unchanged",
                (Some(_), false) => "changed",
            }
            .into(),
            new_revision,
            hash,
            fields,
            images: image_changes(old.map(|o| &o.template), Some(&c.template)),
            config: config_changed,
        });
    }
    for o in live_components {
        if !file.spec.components.iter().any(|c| c.name == o.name) {
            out.push(ChangeView {
                component: o.name.clone(),
                change: "removed".into(),
                new_revision: false,
                hash: None,
                fields: Vec::new(),
                images: image_changes(Some(&o.template), None),
                config: Vec::new(),
            });
        }
    }
    out
}

/// A Kubernetes quantity (`250m`, `1.5`, `128Mi`, `1G`, `2e3`) scaled by
/// `scale` (1000 for millicores, 1 for bytes), rounded up; `None` when it
/// cannot be read.
pub fn quantity(q: &str, scale: f64) -> Option<i64> {
    let q = q.trim();
    let suffixes: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    let (num, mult) = suffixes
        .iter()
        .find_map(|(s, m)| q.strip_suffix(s).map(|n| (n, *m)))
        .unwrap_or((q, 1.0));
    let v: f64 = num.parse().ok()?;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    // Whole units and bytes: far below f64's exact range.
    #[allow(clippy::cast_possible_truncation)]
    Some((v * mult * scale).ceil() as i64)
}

/// CPU (millicores) and memory (bytes) a pod of the template requests: its
/// containers' requests summed (init containers run before, not beside them).
pub fn pod_requests(t: &PodTemplateSpec) -> (i64, i64) {
    let mut cpu = 0;
    let mut mem = 0;
    for c in t.spec.iter().flat_map(|s| &s.containers) {
        let req = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        if let Some(r) = req {
            cpu += r
                .get("cpu")
                .and_then(|q| quantity(&q.0, 1000.0))
                .unwrap_or(0);
            mem += r
                .get("memory")
                .and_then(|q| quantity(&q.0, 1.0))
                .unwrap_or(0);
        }
    }
    (cpu, mem)
}

fn step_text(steps: &[Step], s: &StepAt) -> String {
    if s.phase == crate::api::Phase::Stable {
        return "stable".into();
    }
    usize::try_from(s.step)
        .ok()
        .and_then(|i| steps.get(i))
        .map_or_else(|| "final: 100%".into(), ToString::to_string)
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

/// The document, from the two simulations (pods ready at once, and after
/// `ready_after`), the live pods and the dry runs.
pub fn document(
    file: &ReleasePlan,
    live: Option<&ReleasePlan>,
    live_revisions: &[RevisionObs],
    min: &Simulation,
    expected: &Simulation,
    ready_after: Duration,
    dry_run: Option<DryRunView>,
) -> PreviewView {
    let steps_spec = strategy_steps(&file.spec.strategy).unwrap_or_default();
    let steps: Vec<StepView> = min
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| StepView {
            index: s.step,
            text: step_text(&steps_spec, s),
            phase: s.phase.to_string(),
            weight: s.weight,
            traffic_weight: s.traffic_weight,
            components: s
                .components
                .iter()
                .map(|c| StepComponentView {
                    name: c.name.clone(),
                    current_replicas: c.current_replicas,
                    stable_replicas: c.stable_replicas,
                    peak_pods: c.peak_pods,
                })
                .collect(),
            gates: s.gates.clone(),
            starts_after_seconds: secs(s.starts_after),
            min_seconds: secs(s.duration),
            expected_seconds: expected
                .steps
                .get(i)
                .filter(|e| (e.phase, e.step) == (s.phase, s.step))
                .map(|e| secs(e.duration)),
            waits_for_promotion: s.waits_for_promotion,
        })
        .collect();
    let peak = file
        .spec
        .components
        .iter()
        .map(|c| {
            let pods = min
                .steps
                .iter()
                .flat_map(|s| s.components.iter().filter(|x| x.name == c.name))
                .map(|x| x.peak_pods)
                .max()
                .unwrap_or(0);
            let now: i32 = live_revisions
                .iter()
                .filter(|r| r.component == c.name)
                .map(|r| r.replicas.max(0))
                .sum();
            let extra = (pods - now).max(0);
            let (cpu, mem) = pod_requests(&c.template);
            PeakView {
                component: c.name.clone(),
                pods,
                extra_pods: extra,
                extra_cpu_millis: cpu * i64::from(extra),
                extra_memory_bytes: mem * i64::from(extra),
            }
        })
        .collect();
    let (result, message) = match &min.end {
        End::Stable => ("Stable", None),
        End::Invalid(e) => ("Invalid", Some(e.to_string())),
        End::Stuck(m) => ("Stuck", Some(m.clone())),
    };
    PreviewView {
        api_version: API_VERSION,
        kind: "Preview",
        namespace: file.namespace().unwrap_or_default(),
        name: file.name_any(),
        from_live: live.is_some(),
        rollout: min.rollout,
        result: result.into(),
        message,
        changes: changes(live, file, min),
        steps,
        duration: DurationView {
            minimum_seconds: secs(min.total),
            expected_seconds: secs(expected.total),
            ready_after_seconds: secs(ready_after),
            promotions: min.steps.iter().filter(|s| s.waits_for_promotion).count(),
        },
        peak,
        dry_run,
        gates_now: None,
    }
}

fn cpu_text(m: i64) -> String {
    if m % 1000 == 0 {
        format!("{}", m / 1000)
    } else {
        format!("{m}m")
    }
}

fn mem_text(b: i64) -> String {
    const MI: i64 = 1024 * 1024;
    if b % (1024 * MI) == 0 && b > 0 {
        format!("{}Gi", b / (1024 * MI))
    } else if b % MI == 0 {
        format!("{}Mi", b / MI)
    } else {
        format!("{b}")
    }
}

/// The document for humans.
// One section after the other, in the order they print.
#[allow(clippy::too_many_lines)]
pub fn text(v: &PreviewView) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let from = if v.from_live {
        "the live plan"
    } else {
        "a new plan"
    };
    let _ = writeln!(o, "Preview of {}/{} (from {from})", v.namespace, v.name);
    if !v.rollout {
        let _ = writeln!(o, "No rollout: every component keeps its revision.");
    }
    let _ = writeln!(o, "\nComponents:");
    for c in &v.changes {
        let rev = match (&c.hash, c.new_revision) {
            (Some(h), true) => format!("new revision {h}"),
            (Some(h), false) => format!("keeps revision {h}"),
            (None, _) => "removed at promotion".into(),
        };
        let _ = writeln!(o, "  {:<16} {:<9} {rev}", c.component, c.change);
        for i in &c.images {
            let _ = writeln!(
                o,
                "    image {}: {} -> {}",
                i.container,
                i.from.as_deref().unwrap_or("(none)"),
                i.to.as_deref().unwrap_or("(none)")
            );
        }
        // Image changes are listed above, with their before and after.
        for f in c
            .fields
            .iter()
            .filter(|f| f.rsplit('.').next() != Some("image"))
        {
            let _ = writeln!(o, "    changed: {f}");
        }
        for k in &c.config {
            let _ = writeln!(o, "    config changed: {k}");
        }
    }
    let _ = writeln!(o, "\nSteps (replicas new/stable per component):");
    for s in &v.steps {
        let comps: Vec<String> = s
            .components
            .iter()
            .map(|c| format!("{} {}/{}", c.name, c.current_replicas, c.stable_replicas))
            .collect();
        let traffic = s
            .traffic_weight
            .map(|t| format!(" traffic {t}%"))
            .unwrap_or_default();
        let wait = if s.waits_for_promotion {
            "  waits for promote"
        } else {
            ""
        };
        let time = match s.expected_seconds {
            Some(e) if (e - s.min_seconds).abs() > 0.05 => {
                format!("{}s (expected {e}s)", s.min_seconds)
            }
            _ => format!("{}s", s.min_seconds),
        };
        let gates = if s.gates.is_empty() {
            String::new()
        } else {
            format!("  gates: {}", s.gates.join(", "))
        };
        let _ = writeln!(
            o,
            "  {:>2} {:<14} weight {:>3}%{traffic}  {}  {time}{wait}{gates}",
            s.index,
            s.text,
            s.weight,
            comps.join(", ")
        );
    }
    let d = &v.duration;
    let _ = writeln!(
        o,
        "\nDuration: at least {}s; about {}s with pods ready after {}s{}",
        d.minimum_seconds,
        d.expected_seconds,
        d.ready_after_seconds,
        if d.promotions > 0 {
            format!(", plus {} promotion(s) by hand", d.promotions)
        } else {
            String::new()
        }
    );
    let _ = writeln!(o, "Peak:");
    for p in &v.peak {
        let _ = writeln!(
            o,
            "  {:<16} {} pods ({} more than now: cpu {}, memory {})",
            p.component,
            p.pods,
            p.extra_pods,
            cpu_text(p.extra_cpu_millis),
            mem_text(p.extra_memory_bytes)
        );
    }
    if v.result != "Stable" {
        let _ = writeln!(
            o,
            "Result: {}: {}",
            v.result,
            v.message.as_deref().unwrap_or("")
        );
    }
    if let Some(gates) = &v.gates_now {
        let _ = writeln!(o, "Gates now (evaluated once from this machine):");
        for g in gates {
            let value = g.value.map(|x| format!(" value {x}")).unwrap_or_default();
            let msg = g
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            let _ = writeln!(o, "  {} ({}): {}{value}{msg}", g.name, g.kind, g.verdict);
        }
    }
    match &v.dry_run {
        None => {
            let _ = writeln!(o, "Dry run: skipped (--offline)");
        }
        Some(dr) => {
            let _ = writeln!(o, "Dry run (server side, nothing stored):");
            for r in std::iter::once(&dr.plan).chain(&dr.deployments) {
                let msg = r
                    .message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default();
                let _ = writeln!(o, "  {}: {}{msg}", r.object, r.result);
            }
        }
    }
    o
}

fn dry_result(object: String, r: Result<(), kube::Error>) -> DryRunResult {
    let (result, message) = match r {
        Ok(()) => ("accepted", None),
        Err(kube::Error::Api(s)) if matches!(s.code, 400 | 422) => (
            "refused",
            Some(format!("{} ({} {})", s.message, s.code, s.reason)),
        ),
        Err(e) => ("error", Some(chain(&e))),
    };
    DryRunResult {
        object,
        result: result.into(),
        message,
    }
}

/// Dry runs of the plan (server-side apply of the document as written) and
/// of each Deployment the simulation created.
async fn dry_runs(ctx: &Ctx, plan: &ReleasePlan, doc: &Value, sim: &Simulation) -> DryRunView {
    let api: Api<ReleasePlan> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let mut params = PatchParams::apply("kubectl-releaseplan-preview")
        .dry_run()
        .force();
    params.field_validation = Some(kube::api::ValidationDirective::Strict);
    let name = plan.name_any();
    let r = api
        .patch(&name, &params, &Patch::Apply(doc))
        .await
        .map(|_| ());
    let plan_result = dry_result(format!("ReleasePlan/{name}"), r);
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let mut out = Vec::new();
    let mut owner = plan.clone();
    owner.metadata.namespace = Some(ctx.namespace.clone());
    for intent in &sim.created {
        let Some(template) = sim.templates.get(&intent.component) else {
            continue;
        };
        let d = crate::objects::deployment::build(&owner, intent, template, false);
        let post = PostParams {
            dry_run: true,
            field_manager: Some("kubectl-releaseplan-preview".into()),
        };
        let r = deployments.create(&post, &d).await.map(|_| ());
        out.push(dry_result(format!("Deployment/{}", intent.name), r));
    }
    DryRunView {
        plan: plan_result,
        deployments: out,
    }
}

/// Evaluates the plan's Prometheus and webhook gates once with the
/// operator's evaluation code, told about the revision the preview would
/// roll out; Job gates are not run (that would create a Job).
async fn gates_now(
    ctx: &Ctx,
    plan: &ReleasePlan,
    sim: &Simulation,
) -> Result<Vec<GateNowView>, CliError> {
    use crate::gates::{
        GateContext, GateResult, policy::NamespacePolicy, prometheus::TemplateVars,
    };
    let Ok(target) = crate::plan::Target::from_spec(&plan.spec) else {
        return Ok(Vec::new());
    };
    let http = crate::gates::outbound::GateHttp::new(crate::gates::outbound::OutboundPolicy {
        error_body_chars: 200,
        ..Default::default()
    })
    .map_err(|e| CliError::Config(format!("gate HTTP client: {e}")))?;
    let secrets =
        crate::gates::access::CredentialReader::new(ctx.client.clone(), ctx.namespace.clone());
    let policy = NamespacePolicy::open(&ctx.namespace);
    let first = sim.steps.first();
    let changed = first.and_then(|s| {
        s.components
            .iter()
            .find(|c| c.current_hash != c.stable_hash)
            .or_else(|| s.components.first())
    });
    let mut out = Vec::new();
    for gate in &target.gates {
        let component = match target.gate_components.get(gate.name()) {
            Some(n) => first.and_then(|s| s.components.iter().find(|c| &c.name == n)),
            None => changed,
        };
        let gctx = GateContext {
            vars: TemplateVars {
                plan: plan.name_any(),
                namespace: ctx.namespace.clone(),
                component: component.map(|c| c.name.clone()).unwrap_or_default(),
                revision: component
                    .and_then(|c| c.current_hash.clone())
                    .unwrap_or_default(),
                // The gates are tried at the first step, where the stable
                // revision still has its pods.
                stable_revision: component
                    .filter(|c| c.stable_replicas > 0)
                    .and_then(|c| c.stable_hash.clone())
                    .unwrap_or_default(),
                // What the operator's judge would compare with at that step.
                baseline_revision: match gate {
                    crate::gates::GateSpec::Analysis(_) => component
                        .filter(|c| target.component(&c.name).is_some_and(|t| t.baseline))
                        .and_then(|c| c.stable_hash.as_deref())
                        .map(crate::api::revision::baseline_of)
                        .unwrap_or_default(),
                    _ => String::new(),
                },
            },
            revision: target.revision.clone(),
            step: first.map_or(0, |s| s.step),
        };
        let r = crate::gates::evaluate(gate, &http, &secrets, &policy, &gctx).await;
        let (verdict, message) = match &r {
            GateResult::Pass { .. } => ("Passed", None),
            GateResult::NotApplicable { reason } => ("Passed", Some(reason.clone())),
            GateResult::Fail { reason, .. } => ("Failed", Some(reason.clone())),
            GateResult::Inconclusive { reason } => ("Inconclusive", Some(reason.clone())),
            GateResult::Error { reason } => ("Error", Some(reason.clone())),
            GateResult::Refused { reason } => ("Refused", Some(reason.clone())),
        };
        out.push(GateNowView {
            name: gate.name().to_string(),
            kind: gate.kind().to_string(),
            verdict: verdict.into(),
            value: r.value(),
            message,
        });
    }
    Ok(out)
}

/// Whether the operator reads this plan's config live (its `ConfigVersioned`
/// condition is False: versioning off, or no access to the namespace).
fn reads_config_live(status: &ReleasePlanStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == releaseplan_core::plan::config::CONFIG_VERSIONED && c.status == "False")
}

/// The ConfigMaps and Secrets the plan's templates reference, read for their
/// digests as the operator's caches hold them, so the simulation versions
/// config as the operator does. `None` (and a note) when one cannot be read:
/// config is then read in place and a revision's hash may differ from the
/// operator's.
async fn config_seen(ctx: &Ctx, plan: &ReleasePlan) -> Option<ConfigObservation> {
    use crate::api::config::{ConfigKind, LIVE_SECRET_TYPES, digest_of_map, digest_of_secret};
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let mut objects = std::collections::BTreeMap::new();
    for c in &plan.spec.components {
        for (kind, name) in releaseplan_core::plan::config::references(&c.template) {
            let read = match kind {
                ConfigKind::ConfigMap => {
                    read_config(ctx, &name, |m: &ConfigMap| (digest_of_map(m), false)).await
                }
                ConfigKind::Secret => {
                    read_config(ctx, &name, |s: &Secret| {
                        let live = s
                            .type_
                            .as_deref()
                            .is_some_and(|t| LIVE_SECRET_TYPES.contains(&t));
                        (digest_of_secret(s), live)
                    })
                    .await
                }
            };
            match read {
                Ok(Some(o)) => {
                    objects.insert((kind, name), o);
                }
                Ok(None) => {}
                Err(e) => {
                    eprintln!(
                        "note: cannot read {} {name} ({}): config is read in place, so a revision's hash may differ from the operator's",
                        kind.as_str(),
                        chain(&e)
                    );
                    return None;
                }
            }
        }
    }
    Some(ConfigObservation {
        objects,
        ..ConfigObservation::default()
    })
}

/// One referenced ConfigMap or Secret, read as the operator observes it:
/// its digest and whether it is always read live (`None`: it does not exist).
async fn read_config<K>(
    ctx: &Ctx,
    name: &str,
    observe: impl Fn(&K) -> (String, bool),
) -> Result<Option<ConfigObs>, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let found = kube::Api::<K>::namespaced(ctx.client.clone(), &ctx.namespace)
        .get_opt(name)
        .await?;
    Ok(found.map(|o| {
        let (digest, always_live) = observe(&o);
        ConfigObs {
            digest,
            copy_of: None,
            always_live,
        }
    }))
}

/// `preview`: read the file, simulate (from the live plan with `--live`),
/// dry-run, print. Exits 2 (as `lint`) when the file is invalid.
// Read, connect, observe, simulate, dry-run, print: in that order, once.
#[allow(clippy::too_many_lines)]
pub(super) async fn run(global: &Global, args: &PreviewArgs) -> Result<i32, CliError> {
    let docs = read_documents(Path::new(&args.filename))?;
    let file = args.filename.display().to_string();
    let mut found = None;
    for d in &docs {
        match check_document(d) {
            Verdict::Other(_) => {}
            Verdict::Valid(p) => {
                found = Some((*p, d.clone()));
                break;
            }
            Verdict::Invalid(problems) => {
                println!("{file}: invalid");
                for p in problems {
                    println!("  {p}");
                }
                return Ok(LINT_INVALID);
            }
        }
    }
    let Some((mut plan, doc)) = found else {
        return Err(CliError::File {
            path: file,
            reason: "no ReleasePlan in the file".into(),
        });
    };
    let ctx = if args.offline {
        None
    } else {
        let mut g = global.clone();
        if g.namespace.is_none() {
            g.namespace = plan.namespace();
        }
        Some(Ctx::connect(&g).await?)
    };
    if let Some(ctx) = &ctx {
        plan.metadata.namespace = Some(ctx.namespace.clone());
    }
    let name = plan.name_any();
    let (live, revisions, workloads) = match (&ctx, args.live) {
        (Some(ctx), true) => match ctx.plans().get_opt(&name).await {
            Ok(Some(p)) => {
                let revs = ctx
                    .deployments(&name)
                    .await?
                    .iter()
                    .filter_map(revision_of)
                    .collect();
                let (sets, daemons, pods) = ctx.workload_objects(&p).await?;
                (
                    Some(p),
                    revs,
                    super::live::workloads(&sets, &daemons, &pods),
                )
            }
            Ok(None) => {
                eprintln!(
                    "note: no live plan {}/{name}: previewed as a new plan",
                    ctx.namespace
                );
                (None, Vec::new(), WorkloadObs::default())
            }
            Err(e) => return Err(ctx.error(&format!("read releaseplan {name}"), e)),
        },
        _ => (None, Vec::new(), WorkloadObs::default()),
    };
    let status: ReleasePlanStatus = live
        .as_ref()
        .and_then(|p| p.status.clone())
        .unwrap_or_default();
    let generation = match &live {
        Some(p) if p.spec == plan.spec => p.metadata.generation.unwrap_or(1),
        Some(p) => p.metadata.generation.unwrap_or(0) + 1,
        None => 1,
    };
    // Config versioned as the operator does it, unless it reads config live
    // for this plan (its ConfigVersioned condition says so) or none can be read.
    let config = match &ctx {
        Some(ctx) if !reads_config_live(&status) => config_seen(ctx, &plan).await,
        _ => None,
    };
    let start = Start {
        plan: name.clone(),
        spec: plan.spec.clone(),
        generation,
        status,
        revisions: revisions.clone(),
        workloads: workloads.clone(),
        now: chrono::Utc::now(),
        ready_after: Duration::ZERO,
        config,
    };
    let min = simulate(start.clone());
    let expected = simulate(Start {
        ready_after: args.ready_after,
        ..start
    });
    let dry = match &ctx {
        Some(ctx) => Some(dry_runs(ctx, &plan, &doc, &min).await),
        None => None,
    };
    // What runs now: the Deployments, and the StatefulSets' pods by revision.
    let running: Vec<_> = revisions
        .iter()
        .cloned()
        .chain(releaseplan_core::plan::stateful::revisions(&workloads))
        .collect();
    let mut view = document(
        &plan,
        live.as_ref(),
        &running,
        &min,
        &expected,
        args.ready_after,
        dry,
    );
    if let (Some(ctx), true) = (&ctx, args.with_gates) {
        view.gates_now = Some(gates_now(ctx, &plan, &min).await?);
    }
    match args.output {
        Some(f) => print!("{}", to_text(&view, f, false)),
        None => print!("{}", text(&view)),
    }
    let refused = view.dry_run.as_ref().is_some_and(|d| {
        std::iter::once(&d.plan)
            .chain(&d.deployments)
            .any(|r| r.result == "refused")
    });
    Ok(if view.result == "Invalid" || refused {
        LINT_INVALID
    } else {
        0
    })
}

#[cfg(test)]
#[path = "preview_tests.rs"]
mod tests;
