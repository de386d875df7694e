//! Adoption of a running Deployment (`spec.components[].adopt`): the user's
//! Deployment hands its capacity over to the component's first revision
//! (docs/decisions.md, "Adoption: hand over, not take over").

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Annotation the operator sets on an adopted Deployment's metadata: its
/// replicas when the plan adopted it, for an undo by hand.
pub const ANNOTATION_ADOPTED_REPLICAS: &str = "releaseplan.io/adopted-replicas";

/// A running Deployment whose capacity the component's first revision takes over.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Adopt {
    /// Name of a Deployment in the plan's namespace, not owned by a controller. While
    /// the component has no stable revision, the operator scales it to the component's
    /// replicas minus the ready pods of the first revision (never its template or
    /// selector), then holds it at 0; it never deletes it nor makes it owned, so
    /// delete it yourself (or from git) once `status.components[].adopted.done`.
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')").message("adopt.deployment must be a Deployment name: lowercase letters, digits, '-' and '.', starting and ending with an alphanumeric character"))]
    #[schemars(length(min = 1, max = 253))]
    pub deployment: String,
}

/// The hand-over of an adopted Deployment, as last decided.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AdoptedStatus {
    /// The adopted Deployment.
    pub deployment: String,
    /// Replicas the operator holds it at now (0 once handed over).
    #[serde(default)]
    pub replicas: i32,
    /// Its ready pods.
    #[serde(default)]
    pub ready: i32,
    /// Its replicas when the plan adopted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_replicas: Option<i32>,
    /// The hand-over is done: the component is Stable on its own revision and the
    /// adopted Deployment runs no pod. Delete it then.
    #[serde(default)]
    pub done: bool,
    /// Why it cannot be adopted (not found, owned by a controller...), when it cannot:
    /// the plan then rolls out like a new plan beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
