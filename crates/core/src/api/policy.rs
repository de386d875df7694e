//! `GatePolicy`: an administrator's cluster-scoped policy of what plans of
//! the namespaces it selects may reach through the operator: which hosts
//! their gates may call, to which hosts a shared credential may be sent,
//! which headers the administrator pins, and which Gateways (or Traefik
//! entry points) their routes may attach to.
//!
//! A namespace that some GatePolicy selects is *governed*: what no policy
//! selecting it allows is refused, before any byte is sent (several
//! policies add up, like RBAC roles). A namespace that none selects is
//! governed only when the operator runs with `--gate-policy=required` (then
//! nothing is allowed), else it keeps the operator-wide rules of earlier
//! versions. The pure evaluation is `gates::policy`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Annotation of a shared gate Secret (beside `releaseplan.io/gate-namespaces`):
/// the hosts its values may be sent to, comma-separated host patterns
/// (`host`, `*.domain`, an address or CIDR, each with an optional `:port`).
pub const ANNOTATION_GATE_HOSTS: &str = "releaseplan.io/gate-hosts";

/// Most entries of a list of a GatePolicy.
pub const MAX_POLICY_ENTRIES: u32 = 64;

/// A host pattern: a DNS name, `*.` and a domain, an IPv4 address or CIDR, an
/// IPv6 address or CIDR in brackets; then an optional `:port`. A `pattern`,
/// not a CEL rule, since a regex over a list costs a CRD's whole CEL budget;
/// the API server's message names the entry (`spec.destinations.hosts[2]`).
pub const HOST_PATTERN_REGEX: &str = r"^(([*][.])?[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*|[0-9]{1,3}([.][0-9]{1,3}){3}(/[0-9]{1,2})?|\[[0-9a-f:.]+(/[0-9]{1,3})?\])(:[0-9]{1,5})?$";

fn host_patterns_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": MAX_POLICY_ENTRIES,
        "items": {
            "type": "string",
            "minLength": 1,
            "maxLength": 261,
            "pattern": HOST_PATTERN_REGEX
        }
    })
}

/// An administrator's policy for the plans of the namespaces it selects (see
/// the module docs).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "releaseplan.io",
    version = "v1alpha1",
    kind = "GatePolicy",
    shortname = "gp",
    doc = "A GatePolicy says which hosts gates of the namespaces it selects may call, to which hosts shared gate credentials may be sent, which headers are pinned, and which Gateways or entry points routes may use. A namespace selected by any GatePolicy gets only what its policies allow.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GatePolicySpec {
    /// The namespaces this policy governs; empty or absent: every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// Where gates (Prometheus and webhook) may send requests.
    #[serde(default)]
    pub destinations: Destinations,

    /// Shared gate Secrets and the hosts their values may be sent to (besides
    /// what the Secret's annotation `releaseplan.io/gate-hosts` allows).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = Rule::new("self.all(c, self.exists_one(d, d.secretName == c.secretName))").message("credentials: secretName must be unique"))]
    #[schemars(length(max = MAX_POLICY_ENTRIES))]
    pub credentials: Vec<CredentialBinding>,

    /// Headers the operator sets on every gate request of the selected
    /// namespaces; a plan that sets one is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = Rule::new("self.all(h, self.exists_one(g, g.name.lowerAscii() == h.name.lowerAscii()))").message("pinnedHeaders: header names must be unique (case-insensitive)"))]
    #[schemars(length(max = 16))]
    pub pinned_headers: Vec<PinnedHeader>,

    /// Where the plans' routes may attach.
    #[serde(default)]
    pub routes: RoutePolicy,

    /// What the selected namespaces' Job gates may run.
    #[serde(default, skip_serializing_if = "JobPolicy::is_empty")]
    pub jobs: JobPolicy,
}

/// What Job gates of the selected namespaces may run.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct JobPolicy {
    /// The Pod Security Standard level a plan's (or a namespaced
    /// GateTemplate's) Job gate pod must meet, in place of the operator's
    /// `--gate-job-pod-security`; with several policies setting it, the most
    /// permissive wins (policies add up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security: Option<PodSecurityLevel>,
}

impl JobPolicy {
    /// Nothing set (not written back).
    pub fn is_empty(&self) -> bool {
        self.pod_security.is_none()
    }
}

/// A Pod Security Standard level, as Kubernetes names it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum PodSecurityLevel {
    /// Kubernetes' restricted level.
    Restricted,
    /// Kubernetes' baseline level.
    Baseline,
    /// No check.
    Privileged,
}

/// Where gates may send requests: the union of what is set.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Destinations {
    /// Host patterns gates may call: `prometheus.monitoring.svc`,
    /// `*.hooks.example.com` (names under it, not itself), `10.0.0.0/8` (URLs
    /// written with an address), each with an optional `:port` (else any
    /// port). Names are matched as written in the URL.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "host_patterns_schema")]
    pub hosts: Vec<String>,

    /// Also any Service of the plan's own namespace:
    /// `*.<namespace>.svc` and `*.<namespace>.svc.cluster.local`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub own_namespace_services: bool,

    /// Any host but the ones the operator always refuses (link-local and
    /// cloud metadata addresses, `--gate-deny-cidrs`): for clusters whose plan
    /// authors are trusted as much as the operator.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any_but_metadata: bool,
}

/// A shared gate Secret and the hosts its values may be sent to.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CredentialBinding {
    /// Name of the Secret, in the operator's namespace.
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')").message("secretName must be a Secret name (a DNS subdomain)"))]
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,

    /// Host patterns (as in `destinations.hosts`) the Secret's values may be sent to.
    #[schemars(schema_with = "host_patterns_schema")]
    pub hosts: Vec<String>,
}

/// A header the administrator sets for the selected namespaces.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PinnedHeader {
    /// Header name, such as `X-Scope-OrgID`.
    #[x_kube(
        validation = Rule::new("self.matches('^[-!#$%&*+.^_|~0-9A-Za-z]+$')").message("pinnedHeaders[].name must be an HTTP token"),
        validation = Rule::new("!(self.lowerAscii() in ['host', 'content-length', 'content-type', 'transfer-encoding', 'connection', 'te', 'upgrade', 'accept'])").message("pinnedHeaders[].name: Host, Content-Length, Content-Type, Transfer-Encoding, Connection, TE, Upgrade and Accept are set by the operator")
    )]
    #[schemars(length(min = 1, max = 128))]
    pub name: String,

    /// The value sent (plain text, not a secret: for a tenant id).
    #[x_kube(validation = Rule::new("self.matches('^[ -~\\t]*$')").message("pinnedHeaders[].value must be printable ASCII"))]
    #[schemars(length(max = 1024))]
    pub value: String,
}

/// Where routes of the selected namespaces may attach.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RoutePolicy {
    /// Gateways an HTTPRoute may name in `parentRefs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_POLICY_ENTRIES))]
    pub parent_refs: Vec<AllowedParent>,

    /// Traefik entry points an IngressRoute may name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_POLICY_ENTRIES))]
    pub entry_points: Vec<String>,

    /// Any Gateway and any entry point (the Gateway's own `allowedRoutes` still applies).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any: bool,
}

/// A Gateway routes may attach to.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AllowedParent {
    /// Namespace of the Gateway; absent: the plan's own namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,

    /// Name of the Gateway; absent: any Gateway of that namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,
}

/// The GatePolicy CRD as installed.
pub fn gate_policy_crd() -> CustomResourceDefinition {
    GatePolicy::crd()
}
