//! Machine-readable output (`-o json|yaml`): the documents of `get`, `list`,
//! `history` and `wait`, which the dashboard shows too.
//!
//! Scripts get their own versioned shapes (`apiVersion:
//! plugin.releaseplan.io/v1`) instead of the raw ReleasePlan: the fields a
//! script needs (step as numbers, the failing gate, the revision Deployments
//! with their roles) are computed once here, and the shape can stay put while
//! the CRD's status evolves. Field names are camelCase; absent values are
//! `null`, never missing, so `jq .failure.gate` works on every plan.

use super::text::{step_count, step_text};
use crate::api::{HistoryEntry, ReleasePlan};
use crate::plan::revision_of;
use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use serde::Serialize;

pub use super::live::Live;

/// The `apiVersion` of every document the plugin prints with `-o`.
pub const API_VERSION: &str = "plugin.releaseplan.io/v1";

/// An output format of `-o`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON document (pretty-printed; `list -w`: one compact document per line).
    Json,
    /// One YAML document (`list -w`: documents separated by `---`).
    Yaml,
}

/// Serializes `doc` in `format`; `compact` puts a JSON document on one line.
pub fn to_text<T: Serialize>(doc: &T, format: Format, compact: bool) -> String {
    let text = match format {
        Format::Json if compact => serde_json::to_string(doc).map_err(|e| e.to_string()),
        Format::Json => serde_json::to_string_pretty(doc).map_err(|e| e.to_string()),
        Format::Yaml => yaml_serde::to_string(doc).map_err(|e| e.to_string()),
    };
    match text {
        Ok(t) if t.ends_with('\n') => t,
        Ok(t) => t + "\n",
        // Serializing plain structs of strings and numbers does not fail.
        Err(e) => format!("{{\"error\": {e:?}}}\n"),
    }
}

/// Where the rollout is among the steps.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StepView {
    /// `status.currentStep`: 0-based index of the step being run; equals `total`
    /// during the implicit final step to 100% and once settled.
    pub index: i32,
    /// Number of steps the operator runs: those of `spec.strategy.steps`, or
    /// one for `spec.strategy.blueGreen` (the preview); 0 when they cannot be
    /// run (`text` is then `invalid steps`).
    pub total: usize,
    /// The same for humans, counted from 1: `step 2/4` (index 1), `steps 4/4
    /// done`, `no steps`, `invalid steps`.
    pub text: String,
}

/// Why the current or last rollout failed (`status.failure`).
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailureView {
    /// The revision that failed.
    pub revision: String,
    /// The failing gate: `progressDeadline`, `podHealth`, `abort`, `deletion` or a gate's name.
    pub gate: String,
    /// Machine-readable reason.
    pub reason: String,
    /// For humans.
    pub message: String,
}

/// One revision of a component (only in `get`).
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RevisionView {
    /// Its Deployment; for a StatefulSet component, the StatefulSet all its
    /// revisions share.
    pub deployment: String,
    /// Template hash.
    pub hash: String,
    /// Desired replicas.
    pub replicas: i32,
    /// Ready replicas.
    pub ready: i32,
    /// `current`, `stable`, `current,stable` or `old`.
    pub role: String,
    /// The container images, in order.
    pub images: Vec<String>,
    /// The ConfigMaps and Secrets its pods read (`configmap/NAME`): for a
    /// versioned reference, the revision's own copy.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<String>,
    /// A StatefulSet component's: the ordinals of the pods on this revision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ordinals: Option<Vec<i32>>,
    /// A DaemonSet component's: the nodes of the pods on this revision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
}

/// One component of a plan.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentView {
    /// Component name.
    pub name: String,
    /// `StatefulSet` or `DaemonSet` (absent for a Deployment component).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// Replicas once released.
    pub replicas: i32,
    /// Template hash being rolled to (or live).
    pub current_hash: Option<String>,
    /// Template hash of the last stable revision.
    pub stable_hash: Option<String>,
    /// Replicas wanted on the current revision now.
    pub current_replicas: i32,
    /// Ready pods of the current revision.
    pub current_ready: i32,
    /// Replicas wanted on the stable revision now.
    pub stable_replicas: i32,
    /// Ready pods of the stable revision.
    pub stable_ready: i32,
    /// The revision Deployments (`get` only; `null` in `list`).
    pub revisions: Option<Vec<RevisionView>>,
    /// An autoscaled component's autoscaling, as in status (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<crate::api::ComponentAutoscaling>,
    /// The ConfigMaps and Secrets the spec's revision reads, as in status
    /// (names and content digests, never values).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<crate::api::config::CarriedConfig>,
    /// The components it waits for (`dependsOn`), as in status (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting_for: Vec<String>,
}

/// One condition.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// Ready, Reconciling, Stalled, Progressing, RollbackInProgress, Paused.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
}

/// A plan as `get -o` and each item of `list -o` print it.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlanView {
    /// Always [`API_VERSION`].
    pub api_version: &'static str,
    /// Always `Plan`.
    pub kind: &'static str,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration` (`null` before the operator's first write).
    pub observed_generation: Option<i64>,
    /// `metadata.creationTimestamp`.
    pub created: Option<DateTime<Utc>>,
    /// Phase (`status.phase`): `Pending`, `RollingOut`, `RollbackInProgress`,
    /// `RolledBack` or `Stable`.
    pub phase: String,
    /// The step.
    pub step: StepView,
    /// `status.weight`: the step's target percent (not the served share).
    pub weight: i32,
    /// Last stable revision.
    pub stable_revision: Option<String>,
    /// Revision being rolled out (or live).
    pub current_revision: Option<String>,
    /// Number of rollouts started.
    pub rollout_count: i64,
    /// `spec.paused`.
    pub paused: bool,
    /// A plugin `pause` holds the rollout.
    pub pause_requested: bool,
    /// The operator's one-line message.
    pub message: Option<String>,
    /// Why the current or last rollout failed; `null` when none did.
    pub failure: Option<FailureView>,
    /// Components in status order.
    pub components: Vec<ComponentView>,
    /// Gate verdicts of the current step, as in `status.gates`.
    pub gates: Vec<crate::api::GateStatus>,
    /// Conditions.
    pub conditions: Vec<ConditionView>,
}

/// The container images of a revision Deployment's pod template.
/// The ConfigMaps and Secrets a Deployment's pods read, `kind/name`.
pub(crate) fn config_read(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .map(|s| crate::plan::config::references(&s.template))
        .unwrap_or_default()
        .into_iter()
        .map(|(kind, name)| format!("{}/{name}", kind.short()))
        .collect()
}

pub(crate) fn images(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|s| {
            s.containers
                .iter()
                .filter_map(|c| c.image.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// The view of `plan`; with `live`, each component lists its revisions
/// (`get`), without (`None`, `list`) `revisions` is `null`.
pub fn plan_view(plan: &ReleasePlan, live: Option<Live<'_>>) -> PlanView {
    let s = plan.status.clone().unwrap_or_default();
    let sets = live
        .map(|l| super::live::set_revisions(l, &s))
        .unwrap_or_default();
    let components = s
        .components
        .iter()
        .map(|c| {
            let revisions = live.map(|l| revisions_view(c, l, &sets));
            let kind = sets
                .iter()
                .find(|r| r.component == c.name)
                .map(|r| r.kind)
                .or_else(|| {
                    plan_kind(plan, &c.name)
                        .filter(|k| !k.is_default())
                        .map(crate::api::workload::WorkloadKind::as_str)
                });
            ComponentView {
                name: c.name.clone(),
                kind,
                replicas: c.replicas,
                current_hash: c.current_hash.clone(),
                stable_hash: c.stable_hash.clone(),
                current_replicas: c.current_replicas,
                current_ready: c.current_ready,
                stable_replicas: c.stable_replicas,
                stable_ready: c.stable_ready,
                revisions,
                autoscaling: c.autoscaling.clone(),
                config: c.config.clone(),
                waiting_for: c.waiting_for.clone(),
            }
        })
        .collect();
    PlanView {
        api_version: API_VERSION,
        kind: "Plan",
        namespace: plan.namespace().unwrap_or_default(),
        name: plan.name_any(),
        generation: plan.metadata.generation.unwrap_or(0),
        observed_generation: s.observed_generation,
        created: plan
            .metadata
            .creation_timestamp
            .as_ref()
            .map(crate::api::time::from_k8s),
        phase: s.phase.to_string(),
        step: StepView {
            index: s.current_step,
            total: step_count(plan).unwrap_or(0),
            text: step_text(plan),
        },
        weight: s.weight,
        stable_revision: s.stable_revision.clone(),
        current_revision: s.current_revision.clone(),
        rollout_count: s.rollout_count,
        paused: plan.spec.paused,
        pause_requested: s.pause_requested,
        message: s.message.clone().filter(|m| !m.is_empty()),
        failure: s.failure.as_ref().map(|f| FailureView {
            revision: f.revision.clone(),
            gate: f.gate.clone(),
            reason: f.reason.clone(),
            message: f.message.clone(),
        }),
        components,
        gates: s.gates.clone(),
        conditions: s
            .conditions
            .iter()
            .map(|c| ConditionView {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
            })
            .collect(),
    }
}

/// A component's revisions: its Deployments, then its StatefulSet's.
fn revisions_view(
    c: &crate::api::ComponentStatus,
    l: Live<'_>,
    sets: &[super::live::SetRevision],
) -> Vec<RevisionView> {
    let mut revs: Vec<RevisionView> = l
        .deployments
        .iter()
        .filter_map(|d| revision_of(d).map(|r| (r, images(d), config_read(d))))
        .filter(|(r, _, _)| r.component == c.name)
        .map(|(r, images, config)| {
            let role = role_of(c, &r.hash);
            RevisionView {
                deployment: r.name,
                hash: r.hash,
                replicas: r.replicas,
                ready: r.ready,
                role: role.into(),
                images,
                config,
                ordinals: None,
                nodes: None,
            }
        })
        .collect();
    revs.sort_by(|a, b| a.deployment.cmp(&b.deployment));
    revs.extend(
        sets.iter()
            .filter(|r| r.component == c.name)
            .map(|r| RevisionView {
                deployment: r.set.clone(),
                hash: r.hash.clone(),
                replicas: r.replicas,
                ready: r.ready,
                role: role_of(c, &r.hash).into(),
                images: r.images.clone(),
                config: Vec::new(),
                ordinals: (r.kind == "StatefulSet").then(|| r.ordinals.clone()),
                nodes: (r.kind == "DaemonSet").then(|| r.nodes.clone()),
            }),
    );
    revs
}

/// The role of revision `hash` of component `c`.
fn role_of(c: &crate::api::ComponentStatus, hash: &str) -> &'static str {
    match (
        c.current_hash.as_deref() == Some(hash),
        c.stable_hash.as_deref() == Some(hash),
    ) {
        (true, true) => "current,stable",
        (true, false) => "current",
        (false, true) => "stable",
        (false, false) => "old",
    }
}

/// The kind the spec gives component `name`.
fn plan_kind(plan: &ReleasePlan, name: &str) -> Option<crate::api::workload::WorkloadKind> {
    plan.spec
        .components
        .iter()
        .find(|c| c.name == name)
        .map(|c| c.kind)
}

/// `list -o`: the plans, sorted by namespace and name.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlanList {
    /// Always [`API_VERSION`].
    pub api_version: &'static str,
    /// Always `PlanList`.
    pub kind: &'static str,
    /// The plans (`components[].revisions` is `null`).
    pub items: Vec<PlanView>,
}

/// The rollout in progress, in `history -o`.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InProgress {
    /// Its history number once finished.
    pub number: i64,
    /// The revision being rolled out.
    pub revision: String,
    /// The phase.
    pub phase: String,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
}

/// `history -o`: the finished rollouts (as in `status.history`, oldest first)
/// and the one in progress.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryView {
    /// Always [`API_VERSION`].
    pub api_version: &'static str,
    /// Always `History`.
    pub kind: &'static str,
    /// Namespace.
    pub namespace: String,
    /// Plan name.
    pub name: String,
    /// `status.history` entries: number, revision, outcome, startedAt, finishedAt, reason, components, config.
    pub items: Vec<HistoryEntry>,
    /// The rollout in progress, `null` when none is.
    pub in_progress: Option<InProgress>,
}

/// The `history -o` document of `plan`.
pub fn history_view(plan: &ReleasePlan) -> HistoryView {
    let s = plan.status.clone().unwrap_or_default();
    let in_progress = if s.phase.is_active() {
        s.current_revision.as_ref().map(|r| InProgress {
            number: s.rollout_count,
            revision: r.clone(),
            phase: s.phase.to_string(),
            started_at: s.rollout_started_at,
        })
    } else {
        None
    };
    HistoryView {
        api_version: API_VERSION,
        kind: "History",
        namespace: plan.namespace().unwrap_or_default(),
        name: plan.name_any(),
        items: s.history,
        in_progress,
    }
}

/// `wait -o`: how the wait ended, and the plan as it was then.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WaitResult {
    /// Always [`API_VERSION`].
    pub api_version: &'static str,
    /// Always `WaitResult`.
    pub kind: &'static str,
    /// The process exit code (0, 2, 3 or 4; errors print no document).
    pub exit_code: i32,
    /// `Stable`, `RolledBack`, `Stalled` or `TimedOut`, by exit code.
    pub result: &'static str,
    /// The sentence of the last log line.
    pub reason: String,
    /// The plan when the wait ended.
    pub plan: PlanView,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::fixtures::{deployment, plan};
    use crate::cli::text::summary;
    use serde_json::json;

    #[test]
    fn plan_view_shape() {
        let ds = [
            deployment("shop-web-web2hash22", "web", "web2hash22", 1, 1, "web:2"),
            deployment("shop-web-web1hash11", "web", "web1hash11", 3, 3, "web:1"),
        ];
        let v = serde_json::to_value(plan_view(
            &plan(),
            Some(Live {
                deployments: &ds,
                ..Live::default()
            }),
        ))
        .unwrap();
        assert_eq!(v["apiVersion"], "plugin.releaseplan.io/v1");
        assert_eq!(v["kind"], "Plan");
        assert_eq!(
            v["step"],
            json!({"index": 1, "total": 4, "text": "step 2/4"})
        );
        assert_eq!(v["failure"], json!(null));
        assert_eq!(v["components"][0]["revisions"][0]["role"], "stable");
        assert_eq!(v["components"][0]["revisions"][1]["role"], "current");
        assert_eq!(
            v["components"][0]["revisions"][1]["images"],
            json!(["web:2"])
        );
        assert_eq!(v["components"][1]["revisions"], json!([]));
        assert_eq!(
            v["conditions"][1],
            json!({"type": "Paused", "status": "True", "reason": "PauseStep"})
        );
        let v = serde_json::to_value(plan_view(&plan(), None)).unwrap();
        assert_eq!(v["components"][0]["revisions"], json!(null));
    }

    #[test]
    fn a_blue_green_plan_counts_the_one_step_the_core_runs() {
        // The core runs blue-green as one step (the preview, held until
        // promoted); `spec.strategy.steps` is empty.
        let mut v = crate::cli::fixtures::plan_json();
        v["spec"]["strategy"] = serde_json::json!({"blueGreen": {}});
        v["status"]["currentStep"] = serde_json::json!(0);
        let mut p: ReleasePlan = serde_json::from_value(v).unwrap();
        assert_eq!(step_text(&p), "step 1/1");
        assert!(summary(&p).contains("step 1/1"), "{}", summary(&p));
        let view = plan_view(&p, None);
        assert_eq!((view.step.index, view.step.total), (0, 1));
        p.status.as_mut().unwrap().current_step = 1;
        assert_eq!(step_text(&p), "steps 1/1 done");
    }

    #[test]
    fn history_view_has_the_entries_and_the_rollout_in_progress() {
        let v = serde_json::to_value(history_view(&plan())).unwrap();
        assert_eq!(v["items"][0]["number"], 1);
        assert_eq!(v["items"][0]["outcome"], "Promoted");
        assert_eq!(
            v["inProgress"],
            json!({"number": 2, "revision": "tn5wd9cz2h", "phase": "RollingOut", "startedAt": "2025-01-02T09:00:00Z"})
        );
    }

    #[test]
    fn yaml_and_json_text() {
        let v = plan_view(&plan(), None);
        assert!(
            to_text(&v, Format::Yaml, false).starts_with("apiVersion: plugin.releaseplan.io/v1\n")
        );
        let line = to_text(&v, Format::Json, true);
        assert_eq!(line.lines().count(), 1);
    }
}
