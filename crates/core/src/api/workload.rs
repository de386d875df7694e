//! What runs a component's pods: a Deployment per revision (the default), one
//! StatefulSet whose partition is the canary, or a DaemonSet.
//!
//! A StatefulSet keeps its pods' identities and volumes, so its revisions
//! cannot be two objects side by side: the canary is the highest ordinals of
//! the one StatefulSet, moved to the new template by lowering its
//! `updateStrategy.rollingUpdate.partition`, exactly as `kubectl rollout`
//! would do by hand.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The workload kind of a component.
#[derive(
    Serialize,
    Deserialize,
    JsonSchema,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
)]
pub enum WorkloadKind {
    /// One Deployment per revision, scaled against each other.
    #[default]
    Deployment,
    /// One StatefulSet; the canary is its highest ordinals (by partition).
    StatefulSet,
    /// One DaemonSet per revision, split by node: the canary is a share of
    /// the nodes.
    DaemonSet,
}

impl WorkloadKind {
    /// The kind's name, as written in a plan.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
        }
    }

    /// Whether it is the default (not written back when serializing, so a plan
    /// written before the field existed reads and hashes as it did).
    pub fn is_default(&self) -> bool {
        *self == WorkloadKind::Deployment
    }
}

/// The settings only a StatefulSet has; the template, replicas and labels
/// come from the component like any other.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetSettings {
    /// The headless Service that gives the pods their DNS names
    /// (`<pod>.<serviceName>`); you create it. Changing it later is refused by
    /// Kubernetes (the field is immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// The volumes each pod gets, one PersistentVolumeClaim per pod and
    /// template, kept across revisions and rollbacks. Immutable once created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub volume_claim_templates: Vec<PersistentVolumeClaim>,
    /// `OrderedReady` (default: pods start one at a time, in order) or
    /// `Parallel`. Immutable once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_management_policy: Option<PodManagementPolicy>,
    /// Whether the pods' claims are deleted when the StatefulSet is deleted or
    /// scaled down. Default: kept in both cases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_retention_policy: Option<ClaimRetention>,
}

/// The settings only a DaemonSet component has.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DaemonSetSettings {
    /// Most nodes at once without a ready pod of the component while nodes
    /// move between revisions: a count, or a percent of the eligible nodes
    /// (rounded down, at least 1). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_percent")]
    pub max_unavailable: Option<IntOrString>,
}

impl DaemonSetSettings {
    /// `maxUnavailable` as a count of `nodes` (at least 1).
    pub fn max_unavailable(&self, nodes: i32) -> i32 {
        let n = match &self.max_unavailable {
            None => 1,
            Some(IntOrString::Int(i)) => *i,
            Some(IntOrString::String(s)) => s
                .strip_suffix('%')
                .and_then(|p| p.trim().parse::<i64>().ok())
                .map_or(1, |p| {
                    i32::try_from(i64::from(nodes.max(0)) * p.clamp(0, 100) / 100).unwrap_or(1)
                }),
        };
        n.max(1)
    }
}

/// Schema of an int-or-percent (`2`, `"25%"`), as Kubernetes writes it.
fn int_or_percent(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "x-kubernetes-int-or-string": true,
        "anyOf": [
            {"type": "integer", "minimum": 1},
            {"type": "string", "pattern": "^([1-9][0-9]?|100)%$"}
        ]
    })
}

/// How a StatefulSet starts and stops its pods.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodManagementPolicy {
    /// One at a time, in ordinal order, each Ready before the next.
    OrderedReady,
    /// All at once.
    Parallel,
}

impl PodManagementPolicy {
    /// The value Kubernetes takes.
    pub fn as_str(self) -> &'static str {
        match self {
            PodManagementPolicy::OrderedReady => "OrderedReady",
            PodManagementPolicy::Parallel => "Parallel",
        }
    }
}

/// What happens to a pod's claims when its StatefulSet is deleted or scaled down.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRetention {
    /// When the StatefulSet is deleted (the plan or the component removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_deleted: Option<Retention>,
    /// When the StatefulSet is scaled down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_scaled: Option<Retention>,
}

/// Keep or delete.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retention {
    /// The claim stays (its data too).
    Retain,
    /// The claim is deleted with the pod.
    Delete,
}

impl Retention {
    /// The value Kubernetes takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Retention::Retain => "Retain",
            Retention::Delete => "Delete",
        }
    }
}

/// Longest StatefulSet name: Kubernetes labels each pod with
/// `controller-revision-hash: <name>-<hash>`, a label value of at most 63
/// characters, and its hash takes up to 11.
pub const MAX_STATEFUL_SET_NAME: usize = 52;

/// Name of a component's StatefulSet: `<plan>-<component>`, shortened with a
/// hash of the full name when longer than [`MAX_STATEFUL_SET_NAME`], so two
/// long names never collide. It does not change across revisions: the pods
/// keep `<name>-<ordinal>` and their volumes.
pub fn stateful_set_name(plan: &str, component: &str) -> String {
    let full = format!("{plan}-{component}");
    if full.len() <= MAX_STATEFUL_SET_NAME {
        return full;
    }
    let digest = Sha256::digest(full.as_bytes());
    let tag = super::revision::encode_digest(&digest, 6);
    let keep = MAX_STATEFUL_SET_NAME - 1 - tag.len();
    let truncated: String = full.chars().take(keep).collect();
    let truncated = truncated.trim_end_matches(['-', '.']);
    format!("{truncated}-{tag}")
}

/// CEL: settings of a kind only with that kind.
pub const STATEFUL_SET_ONLY_RULE: &str =
    "!has(self.statefulSet) || (has(self.kind) && self.kind == 'StatefulSet')";
/// Message of [`STATEFUL_SET_ONLY_RULE`].
pub const STATEFUL_SET_ONLY_MESSAGE: &str = "statefulSet is set only with kind: StatefulSet";
/// CEL: DaemonSet settings only with that kind.
pub const DAEMON_SET_ONLY_RULE: &str =
    "!has(self.daemonSet) || (has(self.kind) && self.kind == 'DaemonSet')";
/// Message of [`DAEMON_SET_ONLY_RULE`].
pub const DAEMON_SET_ONLY_MESSAGE: &str = "daemonSet is set only with kind: DaemonSet";
/// CEL: a DaemonSet runs one pod per eligible node, it has no replica count.
pub const NO_DAEMON_REPLICAS_RULE: &str =
    "!has(self.kind) || self.kind != 'DaemonSet' || !has(self.replicas)";
/// Message of [`NO_DAEMON_REPLICAS_RULE`].
pub const NO_DAEMON_REPLICAS_MESSAGE: &str =
    "replicas is not set with kind: DaemonSet: it runs one pod on each node its template allows";

/// CEL (a transition rule: components are a list keyed by name): a
/// component keeps its kind; its pods, volumes and history belong to it.
pub const KIND_KEPT_RULE: &str = "(has(self.kind) ? self.kind : 'Deployment') == (has(oldSelf.kind) ? oldSelf.kind : 'Deployment')";
/// Message of [`KIND_KEPT_RULE`].
pub const KIND_KEPT_MESSAGE: &str =
    "kind cannot change: release the workload under a new component name, then remove the old one";
/// CEL: what only a Deployment component has.
pub const DEPLOYMENT_ONLY_RULE: &str = "!has(self.kind) || self.kind == 'Deployment' || (!has(self.traffic) && !has(self.autoscaling) && !has(self.adopt))";
/// Message of [`DEPLOYMENT_ONLY_RULE`].
pub const DEPLOYMENT_ONLY_MESSAGE: &str = "traffic, autoscaling and adopt are for Deployment components only: a StatefulSet's canary is its highest ordinals, by partition, and a DaemonSet's a share of its nodes";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_revision_label() {
        assert_eq!(stateful_set_name("shop", "cache"), "shop-cache");
        let long = stateful_set_name(&"p".repeat(63), &"c".repeat(40));
        assert_eq!(long.len(), MAX_STATEFUL_SET_NAME);
        assert_ne!(long, stateful_set_name(&"p".repeat(63), &"c".repeat(39)));
        // The pod's revision label `<name>-<10 chars>` stays a label value.
        assert!(long.len() + 11 <= 63);
    }

    #[test]
    fn an_old_plan_reads_as_deployment_and_writes_no_kind() {
        let k: WorkloadKind = serde_json::from_str("\"StatefulSet\"").unwrap();
        assert_eq!(k, WorkloadKind::StatefulSet);
        assert!(WorkloadKind::default().is_default());
    }
}
