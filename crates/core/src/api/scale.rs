//! Autoscaling: `spec.components[].autoscaling`, and the `ComponentScale`
//! the operator owns for each autoscaled component.
//!
//! A `ComponentScale` is the component's scale target: its `/scale`
//! subresource is what a HorizontalPodAutoscaler, KEDA or `kubectl scale`
//! reads and writes. Its `spec.replicas` is the component's wanted total
//! (the autoscaler's, not the plan's), its `status.selector` selects the pods
//! of every revision, so the autoscaler sees the whole component during a
//! canary, and the plan splits that total by the step's weight.
//! docs/decisions.md ("Autoscaling: one scale target per component") says
//! why this shape.

use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscalerBehavior, MetricSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use serde::{Deserialize, Serialize};

/// Most metrics of one autoscaler (the HPA itself sets no bound; this keeps
/// the CRD's validation cost bounded).
pub const MAX_METRICS: u32 = 16;

/// Autoscaling of one component. With `maxReplicas` the operator owns a
/// HorizontalPodAutoscaler (autoscaling/v2) named `<plan>-<component>` built from
/// these fields; without it no HPA is made and your own HPA, a KEDA ScaledObject or
/// `kubectl scale` sets the replicas through the ComponentScale `<plan>-<component>`.
/// Either way the autoscaler counts the pods of every revision, and a canary step
/// takes its share of the autoscaled total.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("has(self.maxReplicas) || (!has(self.minReplicas) && !has(self.metrics) && !has(self.behavior))").message("autoscaling: minReplicas, metrics and behavior need maxReplicas (without maxReplicas the operator makes no HPA: your own HPA or KEDA scales the ComponentScale)").field_path(".maxReplicas"),
    validation = Rule::new("!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas").message("autoscaling: minReplicas must not exceed maxReplicas").field_path(".minReplicas")
)]
#[serde(rename_all = "camelCase")]
pub struct Autoscaling {
    /// Lower bound of the HPA. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub min_replicas: Option<i32>,

    /// Upper bound of the HPA. Set: the operator owns the HPA. Unset: bring your own
    /// autoscaler, targeting the ComponentScale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_replicas: Option<i32>,

    /// The HPA's metrics (autoscaling/v2 MetricSpec: Resource, ContainerResource, Pods,
    /// Object, External). Default: 80% average CPU utilization, as the HPA's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_METRICS))]
    pub metrics: Option<Vec<MetricSpec>>,

    /// The HPA's scaling behavior (stabilization windows, policies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behavior: Option<HorizontalPodAutoscalerBehavior>,
}

impl Autoscaling {
    /// Whether the operator owns an HPA for the component.
    pub fn owns_hpa(&self) -> bool {
        self.max_replicas.is_some()
    }

    /// Replicas of a component that starts autoscaled, before its autoscaler
    /// first writes: `replicas` when the plan sets it, else `minReplicas`, else 1.
    pub fn initial(&self, replicas: Option<i32>) -> i32 {
        replicas.or(self.min_replicas).unwrap_or(1).max(0)
    }
}

/// The scale target of one autoscaled component: HPA, KEDA and `kubectl scale` set
/// `spec.replicas` through the `/scale` subresource; the plan splits it across the
/// component's revisions. Owned by its ReleasePlan, which creates and deletes it.
// Clippy reads the printer columns' `type_ = "integer"` as one attribute repeated.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "releaseplan.io",
    version = "v1alpha1",
    kind = "ComponentScale",
    namespaced,
    derive = "PartialEq",
    status = "ComponentScaleStatus",
    shortname = "cscale",
    doc = "The scale target of one autoscaled component of a ReleasePlan: point a HorizontalPodAutoscaler, a KEDA ScaledObject or `kubectl scale` at it. Its replicas are the component's total, split across revisions by the plan's steps.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Wanted",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "Replicas the autoscaler wants for the component"
    ),
    printcolumn(
        name = "Pods",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "Pods of every revision of the component"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "Ready pods of every revision"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ComponentScaleSpec {
    /// Replicas of the component: written by its autoscaler (or `kubectl scale`).
    #[schemars(range(min = 0, max = 10000))]
    pub replicas: i32,
}

/// What the operator observed of the component's pods.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ComponentScaleStatus {
    /// Pods of every revision of the component.
    #[serde(default)]
    pub replicas: i32,
    /// Ready pods of every revision of the component.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Label selector (as text) of the pods of every revision: what the autoscaler
    /// averages its metrics over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}

/// The ComponentScale CRD as installed.
pub fn component_scale_crd() -> CustomResourceDefinition {
    ComponentScale::crd()
}

/// Name of the ComponentScale (and of the owned HPA) of a component.
pub fn scale_name(plan: &str, component: &str) -> String {
    format!("{plan}-{component}")
}
