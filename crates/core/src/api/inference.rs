//! The Gateway API Inference Extension's `InferencePool`
//! (inference.networking.k8s.io/v1): the backend a growing share of
//! clusters route model servers through. With
//! `traffic.gatewayAPI.inferencePool` the operator owns a stable and a
//! canary pool beside its Services (same names, same revision selectors) and
//! its HTTPRoute weights them instead of the Services, as the extension
//! documents for a model or server upgrade, done by the steps.
//!
//! No published crate matches our kube version: the fields the operator
//! sets, nothing more (server-side apply sends only these).

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The group of the InferencePool.
pub const GROUP: &str = "inference.networking.k8s.io";
/// Its kind, as an HTTPRoute backend names it.
pub const KIND: &str = "InferencePool";

/// Spec of an InferencePool, as far as the operator sets it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    derive = "PartialEq",
    group = "inference.networking.k8s.io",
    version = "v1",
    kind = "InferencePool",
    plural = "inferencepools",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolSpec {
    /// The pods of the pool: those with these labels.
    pub selector: PoolSelector,
    /// The ports the model servers listen on.
    pub target_ports: Vec<PoolPort>,
    /// The endpoint picker that chooses a pod for each request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_picker_ref: Option<EndpointPickerRef>,
}

/// The pool's label selector (matchLabels only, as the extension allows).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PoolSelector {
    /// Labels every pod of the pool has.
    pub match_labels: BTreeMap<String, String>,
}

/// A port number.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Default)]
pub struct PoolPort {
    /// The number.
    #[schemars(range(min = 1, max = 65535))]
    pub number: i32,
}

/// The endpoint picker (EPP) Service of the pools, as the plan names it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPickerRef {
    /// Name of the endpoint picker's Service, in the plan's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Its Service port (the picker's gRPC port, 9002 by default in the extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PoolPort>,
    /// `FailOpen` (the gateway picks a pod itself when the picker fails) or
    /// `FailClose` (the request fails). The extension's default: `FailClose`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("self == 'FailOpen' || self == 'FailClose'").message("failureMode must be FailOpen or FailClose"))]
    pub failure_mode: Option<String>,
}

/// `traffic.gatewayAPI.inferencePool`: route through InferencePools instead
/// of Services.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolBackend {
    /// The endpoint picker both pools name (`endpointPickerRef`); without it
    /// the pools name none, which some implementations refuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_picker_ref: Option<EndpointPickerRef>,
}
