//! The part of Gateway API's `HTTPRoute` (gateway.networking.k8s.io/v1) the
//! operator writes and reads. No published crate matches our kube version,
//! and the route is the operator's own object: it sets every field it
//! needs and reads back only weights and header matches. Fields it does not
//! know are left to the API server (server-side apply only sends these).

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::ParentRef;

/// Spec of an HTTPRoute, as far as the operator sets it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    derive = "PartialEq",
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "HTTPRoute",
    plural = "httproutes",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteSpec {
    /// The Gateways the route attaches to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parent_refs: Vec<ParentRef>,
    /// Host names it answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hostnames: Vec<String>,
    /// Rules: matches and the backends they send to.
    #[serde(default)]
    pub rules: Vec<RouteRule>,
}

/// One rule of a route.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RouteRule {
    /// Requests this rule takes (any of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<RouteMatch>,
    /// Services the requests go to, by weight.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backend_refs: Vec<BackendRef>,
}

/// One match of a rule: a path and headers that must all match.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RouteMatch {
    /// The path match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathMatch>,
    /// Header matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderMatch>,
}

/// A path match.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PathMatch {
    /// `PathPrefix`, `Exact` or `RegularExpression`.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub type_: Option<String>,
    /// The path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A header match.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HeaderMatch {
    /// `Exact` or `RegularExpression`.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub type_: Option<String>,
    /// Header name.
    pub name: String,
    /// Value.
    pub value: String,
}

/// A backend of a rule: a Service port (or an InferencePool) and its weight.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BackendRef {
    /// API group of the backend; unset: the core group (a Service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind of the backend; unset: `Service`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Service (or pool) name.
    pub name: String,
    /// Service port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Relative weight; Gateway API defaults it to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}
