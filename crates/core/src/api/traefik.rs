//! The part of Traefik's `IngressRoute` (traefik.io/v1alpha1) the operator
//! writes and reads for `traffic.traefik`: one weighted route to the stable
//! and canary Services, and the header route. As with the HTTPRoute, the
//! route is the operator's own object and server-side apply sends only these
//! fields.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// Spec of an IngressRoute, as far as the operator sets it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    derive = "PartialEq",
    group = "traefik.io",
    version = "v1alpha1",
    kind = "IngressRoute",
    plural = "ingressroutes",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct IngressRouteSpec {
    /// Traefik entry points the route listens on; empty: all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entry_points: Vec<String>,
    /// Routes: a rule and the Services it sends to.
    #[serde(default)]
    pub routes: Vec<IngressRouteRule>,
}

/// One route: a Traefik rule and its weighted Services.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct IngressRouteRule {
    /// The rule, e.g. ``PathPrefix(`/`) && Header(`x-canary`, `1`)``.
    #[serde(rename = "match")]
    pub match_: String,
    /// Always `Rule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Services the requests go to, by weight.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<IngressRouteService>,
}

/// A Service of a route and its weight.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct IngressRouteService {
    /// Service name.
    pub name: String,
    /// Service port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Relative weight; Traefik defaults it to 1 and ignores 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}
