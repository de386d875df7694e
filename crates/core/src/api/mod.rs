//! The `releaseplan.io/v1alpha1` API: the `ReleasePlan` custom resource.
//!
//! The doc comments on these types become the CRD's descriptions, so
//! `kubectl explain releaseplan.spec...` reads them. Validation that the
//! schema cannot express lives in CEL rules (`x-kubernetes-validations`)
//! beside each field, so the API server refuses a bad spec before any
//! reconcile runs.

pub mod access;
pub mod adopt;
pub mod analysis;
pub mod cached;
pub mod capacity;
pub mod config;
pub mod foreign;
pub mod gate;
pub mod gateway;
pub mod inference;
pub mod kind_gates;
pub mod order;
pub mod policy;
pub mod revision;
pub mod scale;
pub mod serving;
pub mod template;
pub mod time;
pub mod traefik;
pub mod window;
pub mod workload;

#[cfg(test)]
mod crd_tests;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSON, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use serde::{Deserialize, Serialize};

/// Most template gates of a plan: all of `health.gates` and the deprecated
/// `health.templates` list (`status.resolvedGates` holds one entry each).
pub const MAX_TEMPLATE_GATES: u32 = gate::MAX_GATES + 8;

pub use adopt::{ANNOTATION_ADOPTED_REPLICAS, Adopt, AdoptedStatus};
pub use gate::{
    DEFAULT_CONSECUTIVE_ERRORS, Gate, GateAt, GateEntry, Health, NotOneKind, TemplateUse, Trial,
};
pub use kind_gates::{
    DEFAULT_JOB_TIMEOUT_SECONDS, JobCheck, JobGate, MAX_JOB_CONTAINERS, PrometheusCheck,
    PrometheusGate, WebhookCheck, WebhookGate,
};
pub use scale::{Autoscaling, ComponentScale, ComponentScaleSpec, ComponentScaleStatus};

/// API group of the ReleasePlan resource.
pub const GROUP: &str = "releaseplan.io";
/// Finalizer that holds deletion until an active rollout has been rolled back.
pub const FINALIZER: &str = "releaseplan.io/finalizer";
/// Pod, Deployment and ControllerRevision label: name of the owning ReleasePlan.
pub const LABEL_PLAN: &str = "releaseplan.io/plan";
/// Pod, Deployment and ControllerRevision label: name of the component.
pub const LABEL_COMPONENT: &str = "releaseplan.io/component";
/// Pod, Deployment and ControllerRevision label: template hash of the component revision.
pub const LABEL_REVISION: &str = "releaseplan.io/revision";
/// Service label: `stable` or `canary`, the role of a Service the operator owns.
pub const LABEL_ROLE: &str = "releaseplan.io/role";
/// Job label: name of the Job gate that runs it.
pub const LABEL_GATE: &str = "releaseplan.io/gate";
/// Job label: number of the rollout (`status.rolloutCount`) it belongs to.
pub const LABEL_ROLLOUT: &str = "releaseplan.io/rollout";
/// Job label: index of the step it judges (`status.currentStep`).
pub const LABEL_STEP: &str = "releaseplan.io/step";
/// Annotation through which the plugin asks for an action (promote, abort, ...).
pub const ANNOTATION_REQUEST: &str = "releaseplan.io/request";

/// Default deadline for a step's pods to become ready.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;
/// Default seconds a blue-green plan keeps the old revision after promotion.
pub const DEFAULT_SCALE_DOWN_DELAY_SECONDS: i32 = 30;
/// Default number of container restarts tolerated on new-revision pods.
pub const DEFAULT_MAX_RESTARTS: i32 = 3;
/// Default number of old revision Deployments kept at zero replicas.
pub const DEFAULT_REVISION_HISTORY_LIMIT: i32 = 3;

/// CEL on a gate's name: a DNS label (it is part of a Job gate's Job name
/// and a metric label), the same in every place a gate is named.
const GATE_NAME_RULE: &str = "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')";

/// Duration pattern (Go style, e.g. `30s`, `5m`, `1h30m`) checked by CEL.
const DURATION_RULE: &str = "self.matches('^([0-9]{1,7}(\\\\.[0-9]+)?(ms|s|m|h))+$')";

/// The ReleasePlan CRD as installed (`make crds` prints it): [`ReleasePlan::crd`]
/// with `metadata.name` declared in the root schema. The API server accepts a
/// rule's `fieldPath` only when it names a property of the schema, and the
/// plan-name rule reports `metadata.name`; `ReleasePlan::crd()` alone is refused.
///
/// `status` defaults to `{observedGeneration: 0}` (the API server applies it
/// when it reads a plan that has no status yet): a plan the operator has not
/// seen then reads as "generation not observed", which kstatus, Flux and
/// `kubectl wait` treat as in progress, not as Current.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = ReleasePlan::crd();
    let name = JSONSchemaProps {
        type_: Some("string".into()),
        // Bounds the cost of the root rules that read the name.
        max_length: Some(63),
        ..JSONSchemaProps::default()
    };
    let metadata = JSONSchemaProps {
        type_: Some("object".into()),
        properties: Some([("name".to_string(), name)].into()),
        ..JSONSchemaProps::default()
    };
    for version in &mut crd.spec.versions {
        if let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            let properties = root.properties.get_or_insert_with(Default::default);
            properties.insert("metadata".into(), metadata.clone());
            if let Some(status) = properties.get_mut("status") {
                status.default = Some(JSON(serde_json::json!({ "observedGeneration": 0 })));
            }
        }
    }
    crd
}

/// Desired state of a ReleasePlan: what runs, and how a new version goes live.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "releaseplan.io",
    version = "v1alpha1",
    kind = "ReleasePlan",
    namespaced,
    status = "ReleasePlanStatus",
    shortname = "rp",
    category = "all",
    doc = "A ReleasePlan releases one or more Deployments as one unit: canary steps, pauses and health gates, with automatic rollback to the last stable revision.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase", description = "Lifecycle phase"),
    printcolumn(name = "Step", type_ = "integer", json_path = ".status.currentStep", description = "Index of the current canary step"),
    printcolumn(name = "Weight", type_ = "integer", json_path = ".status.weight", description = "Percent the current step sets on the new revision"),
    printcolumn(name = "Traffic", type_ = "integer", json_path = ".status.trafficWeight", description = "Percent of routed requests on the current revision"),
    printcolumn(name = "Stable", type_ = "string", json_path = ".status.stableRevision", description = "Last revision that reached Stable"),
    printcolumn(name = "Current", type_ = "string", json_path = ".status.currentRevision", description = "Revision being rolled out or live"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("size(self.metadata.name) <= 63").message("metadata.name must be at most 63 characters: it is used as a label value").field_path(".metadata.name"),
    validation = Rule::new("self.spec.components.all(c, !has(c.traffic) || (has(c.traffic.stableService) && has(c.traffic.canaryService)) || size(self.metadata.name) + size(c.name) <= 55)").message("spec.components: the default Service names <plan>-<component>-stable and -canary must be at most 63 characters; set traffic.stableService and traffic.canaryService").field_path(".spec.components"),
    validation = Rule::new("!self.spec.components.exists(c, has(c.baseline) && c.baseline && has(c.traffic) && (has(c.traffic.gatewayAPI) || has(c.traffic.traefik)) && size(c.name) + size(self.metadata.name) > 53) && (self.metadata.name.matches('^[a-z]') || !self.spec.components.exists(c, has(c.baseline) && c.baseline && has(c.traffic) && (has(c.traffic.gatewayAPI) || has(c.traffic.traefik))))").message("spec.components: with a router, a baseline's Service <plan>-<component>-baseline must be a DNS-1035 name of at most 63 characters: a plan name starting with a letter, and plan and component names of at most 53 characters together").field_path(".spec.components"),
    validation = Rule::new("self.metadata.name.matches('^[a-z]') || self.spec.components.all(c, !has(c.traffic) || (has(c.traffic.stableService) && has(c.traffic.canaryService)))").message("spec.components: the default Service names <plan>-<component>-stable and -canary must start with a letter (DNS-1035); set traffic.stableService and traffic.canaryService").field_path(".spec.components")
)]
#[x_kube(
    validation = Rule::new("self.components.all(c, self.components.exists_one(d, d.name == c.name))").message("spec.components: component names must be unique").field_path(".components"),
    validation = Rule::new("!has(self.strategy.blueGreen) || self.components.all(c, !has(c.capacity))").message("strategy.blueGreen runs both revisions at full scale: capacity is for canary steps").field_path(".strategy.blueGreen"),
    validation = Rule::new(analysis::BASELINE_NOT_BLUE_GREEN_RULE).message(analysis::BASELINE_NOT_BLUE_GREEN_MESSAGE).field_path(".strategy.blueGreen"),
    validation = Rule::new("!has(self.strategy.blueGreen) || self.components.all(c, has(c.traffic))").message("strategy.blueGreen needs traffic on every component: its stable Service is the active one, its canary Service the preview").field_path(".strategy.blueGreen"),
    validation = Rule::new("!self.strategy.steps.exists(s, has(s.setCanaryScale) || has(s.setHeaderRoute)) || self.components.exists(c, has(c.traffic) && (has(c.traffic.gatewayAPI) || has(c.traffic.traefik)))").message("strategy.steps: setCanaryScale and setHeaderRoute need a router: set traffic.gatewayAPI or traffic.traefik on a component").field_path(".strategy.steps"),
    validation = Rule::new(gate::GATE_COMPONENTS_RULE).message("health: a gate's component must name one of spec.components").field_path(".health"),
    validation = Rule::new(order::KNOWN_RULE).message(order::KNOWN_MESSAGE).field_path(".components"),
    validation = Rule::new(order::NOT_SELF_RULE).message(order::NOT_SELF_MESSAGE).field_path(".components"),
    validation = Rule::new(order::MUTUAL_RULE).message(order::MUTUAL_MESSAGE).field_path(".components"),
    validation = Rule::new(order::LISTED_BEFORE_RULE).message(kube::core::Message::Expression(order::LISTED_BEFORE_MESSAGE.into())).field_path(".components"),
    validation = Rule::new(order::STEP_RULE).message(order::STEP_MESSAGE).field_path(".components"),
    validation = Rule::new(order::BLUE_GREEN_RULE).message(order::BLUE_GREEN_MESSAGE).field_path(".components")
)]
#[serde(rename_all = "camelCase")]
pub struct ReleasePlanSpec {
    /// Workloads released as one unit: they roll forward together and roll back together.
    /// A component whose template did not change keeps running its stable revision.
    #[schemars(length(min = 1, max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub components: Vec<Component>,

    /// How a new revision goes live. Without steps the new revision goes to 100% at once
    /// (still guarded by the health gates).
    #[serde(default)]
    pub strategy: Strategy,

    /// Health gates checked continuously while rolling out.
    #[serde(default)]
    pub health: Health,

    /// What happens when a health gate fails.
    #[serde(default)]
    pub rollback: RollbackPolicy,

    /// When true, the rollout holds at its current step (health gates still roll back).
    /// Default false.
    #[serde(default)]
    pub paused: bool,

    /// How many old revisions are kept once the plan is settled: their Deployments at zero
    /// replicas and their stored templates (ControllerRevisions, for `undo`). Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 50))]
    pub revision_history_limit: Option<i32>,
}

/// One workload of the plan: a Deployment per revision of its template.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("has(self.replicas) || has(self.autoscaling) || (has(self.kind) && self.kind == 'DaemonSet')").message("replicas is required unless autoscaling is set (or kind is DaemonSet)").field_path(".replicas"),
    validation = Rule::new(workload::NO_DAEMON_REPLICAS_RULE).message(workload::NO_DAEMON_REPLICAS_MESSAGE).field_path(".replicas"),
    validation = Rule::new(workload::DAEMON_SET_ONLY_RULE).message(workload::DAEMON_SET_ONLY_MESSAGE).field_path(".daemonSet"),
    validation = Rule::new(workload::STATEFUL_SET_ONLY_RULE).message(workload::STATEFUL_SET_ONLY_MESSAGE).field_path(".statefulSet"),
    validation = Rule::new(capacity::CAPACITY_DEPLOYMENT_ONLY_RULE).message(capacity::CAPACITY_DEPLOYMENT_ONLY_MESSAGE).field_path(".capacity"),
    validation = Rule::new(analysis::BASELINE_DEPLOYMENT_ONLY_RULE).message(analysis::BASELINE_DEPLOYMENT_ONLY_MESSAGE).field_path(".baseline"),
    validation = Rule::new("!has(self.serving) || !has(self.template.spec.hostNetwork) || !self.template.spec.hostNetwork").message("serving asks each pod on its own IP: not with template.spec.hostNetwork (the node's address)").field_path(".serving"),
    validation = Rule::new(workload::DEPLOYMENT_ONLY_RULE).message(workload::DEPLOYMENT_ONLY_MESSAGE).field_path(".kind"),
    validation = Rule::new(workload::KIND_KEPT_RULE).message(workload::KIND_KEPT_MESSAGE).field_path(".kind"),
    validation = Rule::new("size(self.template.spec.containers) >= 1").message("template.spec.containers must hold at least one container").field_path(".template.spec.containers"),
    validation = Rule::new("!has(self.template.metadata) || !has(self.template.metadata.labels) || self.template.metadata.labels.all(k, !k.startsWith('releaseplan.io/'))").message("template.metadata.labels must not use the reserved prefix releaseplan.io/").field_path(".template.metadata.labels"),
    validation = Rule::new("self.template.spec.containers.all(c, self.template.spec.containers.exists_one(d, d.name == c.name))").message("template.spec.containers: container names must be unique").field_path(".template.spec.containers"),
    validation = Rule::new("!has(self.template.spec.initContainers) || self.template.spec.initContainers.all(c, self.template.spec.initContainers.exists_one(d, d.name == c.name) && !self.template.spec.containers.exists(d, d.name == c.name))").message("template.spec.initContainers: container names must be unique across containers and initContainers").field_path(".template.spec.initContainers")
)]
#[serde(rename_all = "camelCase")]
pub struct Component {
    /// Name of the component, unique in the plan; a DNS label of at most 40 characters.
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("component name must be a DNS label: lowercase letters, digits and '-', starting and ending with an alphanumeric character"))]
    #[schemars(length(min = 1, max = 40))]
    pub name: String,

    /// Number of pods the component runs once released. Capacity never drops below it
    /// during a rollout or a rollback. Required unless `autoscaling` is set; with
    /// `autoscaling`, the count the component starts at before its autoscaler first
    /// sets one (default `autoscaling.minReplicas`, else 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub replicas: Option<i32>,

    /// Autoscaling: an HPA (owned by the operator when `maxReplicas` is set) or KEDA
    /// sets the component's replicas through its ComponentScale `<plan>-<component>`,
    /// and every step splits that total.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,

    /// What runs the pods: `Deployment` (default; one per revision) or `StatefulSet`
    /// (one, named `<plan>-<component>`; the canary is its highest ordinals, moved by
    /// partition, and every pod keeps its name and volumes across revisions).
    #[serde(default, skip_serializing_if = "workload::WorkloadKind::is_default")]
    pub kind: workload::WorkloadKind,

    /// StatefulSet settings (`kind: StatefulSet` only): its headless Service, volume
    /// claim templates, pod management policy and claim retention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stateful_set: Option<workload::StatefulSetSettings>,

    /// DaemonSet settings (`kind: DaemonSet` only): how many nodes at most are
    /// without a ready pod while nodes move between revisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_set: Option<workload::DaemonSetSettings>,

    /// Pods the release may add above `replicas` and leave missing below it
    /// (`maxSurge`, `maxUnavailable`, as a Deployment's rolling update; Deployment
    /// components only). Without it a step adds the new pods before the stable ones
    /// go, as always; with `maxSurge: 0` a step takes stable pods away first and
    /// brings the new ones up in their place (nodes that are full, such as GPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<capacity::Capacity>,

    /// A request the operator sends to each pod (an OpenAI-compatible `/v1/models`
    /// naming the model): a pod counts as ready only once it answers, and a step's
    /// progress deadline grows by `warmup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<serving::Serving>,

    /// Runs a baseline beside the canary while a canary step runs: the stable
    /// revision's template started fresh at the canary's replica count, its pods
    /// labelled `releaseplan.io/revision: <stable>-baseline`, given the canary's
    /// share of requests (with a router a third backend, the Service
    /// `<plan>-<component>-baseline`; without one by its pods), removed once the
    /// release is promoted or rolled back. An `analysis` gate then compares the
    /// canary with it instead of the long-running stable pods. Deployment components
    /// only. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub baseline: bool,

    /// The pod template of the component. A change to it starts a new revision.
    #[schemars(schema_with = "pod_template_schema")]
    pub template: PodTemplateSpec,

    /// Traffic routing. Without it a step's weight is the share of replicas on the new
    /// revision (today's behaviour). With it the operator owns a stable and a canary
    /// Service, and with `gatewayAPI` an HTTPRoute whose weights follow the steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic: Option<Traffic>,

    /// How the ConfigMaps and Secrets the template references are released. By default
    /// each is versioned with the revision: a content change starts a rollout, and each
    /// revision's pods read an immutable copy `<name>-<hash>` the operator owns, so a
    /// rollback or `undo` returns to the revision's config. `live` lists references
    /// read live instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<config::ComponentConfig>,
    /// A running Deployment (not the plan's) that the component's first revision takes
    /// over from, with no gap and no double fleet: it is scaled down only as the first
    /// revision's pods become ready, then held at 0; never deleted, never owned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopt: Option<Adopt>,
    /// Components this one waits for: it starts its steps only once each has reached the
    /// given point (fully promoted, or past a named step), and in a rollback it returns to
    /// stable only after the components that started after it. May name only components
    /// listed before this one (so there are no cycles). Default: none, it starts at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub depends_on: Vec<order::Dependency>,
}

impl Component {
    /// The replicas the spec asks for: `replicas`, or for an autoscaled component
    /// the count it starts at (its autoscaler's count replaces it once observed).
    pub fn spec_replicas(&self) -> i32 {
        match &self.autoscaling {
            Some(a) => a.initial(self.replicas),
            None => self.replicas.unwrap_or(0),
        }
    }
}

/// Traffic routing of one component: Services the operator owns, and optionally an
/// HTTPRoute (Gateway API) it generates and owns.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("!has(self.stableService) || !has(self.canaryService) || self.stableService != self.canaryService").message("traffic: stableService and canaryService must differ").field_path(".canaryService"),
    validation = Rule::new("!has(self.gatewayAPI) || !has(self.traefik)").message("traffic: set one router, gatewayAPI or traefik, not both").field_path(".traefik"),
    validation = Rule::new("!has(self.gatewayAPI) || !has(self.gatewayAPI.inferencePool) || !has(self.targetPort) || self.targetPort.matches('^[0-9]+$')").message("traffic: an InferencePool names its target port by number: targetPort must be a number").field_path(".targetPort")
)]
#[serde(rename_all = "camelCase")]
pub struct Traffic {
    /// Port of the stable and canary Services (TCP).
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,

    /// Container port the Services send to: a number or a port name. Default: `port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]{1,5}|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$')").message("targetPort must be a port number or a port name"))]
    #[schemars(length(min = 1, max = 15))]
    pub target_port: Option<String>,

    /// Name of the Service that always selects the stable revision.
    /// Default `<plan>-<component>-stable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(SERVICE_NAME_RULE).message("stableService must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter"))]
    #[schemars(length(min = 1, max = 63))]
    pub stable_service: Option<String>,

    /// Name of the Service that selects the revision being rolled out (the stable one
    /// when nothing rolls out). Default `<plan>-<component>-canary`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(SERVICE_NAME_RULE).message("canaryService must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter"))]
    #[schemars(length(min = 1, max = 63))]
    pub canary_service: Option<String>,

    /// Seconds a revision keeps its pods after the routes and Services stopped sending it
    /// requests: routers and kube-proxy apply a change a moment after it is written, and
    /// requests in flight finish. Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub drain_seconds: Option<i32>,

    /// A Gateway API HTTPRoute (gateway.networking.k8s.io/v1) splitting requests between
    /// the two Services by the steps' weights. The operator generates and owns it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "gatewayAPI"
    )]
    pub gateway_api: Option<GatewayRoute>,

    /// A Traefik IngressRoute (traefik.io/v1alpha1) splitting requests between the two
    /// Services by the steps' weights, for Traefik's Kubernetes CRD provider. The
    /// operator generates and owns it. At most one of `gatewayAPI` and `traefik`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traefik: Option<TraefikRoute>,
}

/// The routers a component's requests can be split by (`traffic.gatewayAPI`,
/// `traffic.traefik`): the kinds of object the operator generates and owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouterKind {
    /// A Gateway API HTTPRoute.
    GatewayApi,
    /// A Traefik IngressRoute.
    Traefik,
}

impl RouterKind {
    /// Every router, in the order the operator checks them at start-up.
    pub const ALL: [RouterKind; 2] = [RouterKind::GatewayApi, RouterKind::Traefik];
}

impl Traffic {
    /// The router this component's traffic settings choose, and the route's
    /// name when set (else `<plan>-<component>`); `None`: no router, the
    /// Services only. CEL allows at most one.
    pub fn router(&self) -> Option<(RouterKind, Option<&str>)> {
        if let Some(g) = &self.gateway_api {
            return Some((RouterKind::GatewayApi, g.http_route.as_deref()));
        }
        if let Some(t) = &self.traefik {
            return Some((RouterKind::Traefik, t.ingress_route.as_deref()));
        }
        None
    }
}

/// The Traefik IngressRoute the operator generates for a component. Its rule is
/// ``PathPrefix(`<pathPrefix>`)``, and ``Host(`<name>`)`` with host names.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TraefikRoute {
    /// Name of the IngressRoute. Default `<plan>-<component>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("traefik.ingressRoute must be a DNS subdomain name"))]
    #[schemars(length(min = 1, max = 253))]
    pub ingress_route: Option<String>,

    /// Traefik entry points the route listens on; empty: all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "entry_points_schema")]
    pub entry_points: Vec<String>,

    /// Host names the route answers; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "hostnames_schema")]
    pub hostnames: Vec<String>,

    /// Path prefix the route matches. Default `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.startsWith('/') && !self.contains('`')").message("traefik.pathPrefix must start with '/' and have no backquote"))]
    #[schemars(length(min = 1, max = 1024))]
    pub path_prefix: Option<String>,
}

/// At most 16 Traefik entry point names.
fn entry_points_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": 16,
        "items": {
            "type": "string",
            "minLength": 1,
            "maxLength": 63,
            "pattern": "^[A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?$"
        }
    })
}

/// A Service name (DNS-1035 label); length bounded by `maxLength`.
const SERVICE_NAME_RULE: &str = "self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')";

/// The HTTPRoute the operator generates for a component.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GatewayRoute {
    /// Name of the HTTPRoute. Default `<plan>-<component>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("httpRoute must be a DNS subdomain name"))]
    #[schemars(length(min = 1, max = 253))]
    pub http_route: Option<String>,

    /// The Gateways (or their listeners) the route attaches to.
    #[schemars(length(min = 1, max = 32))]
    pub parent_refs: Vec<ParentRef>,

    /// Host names the route answers; empty: those of the listeners.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "hostnames_schema")]
    pub hostnames: Vec<String>,

    /// Path prefix the route matches. Default `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.startsWith('/')").message("pathPrefix must start with '/'"))]
    #[schemars(length(min = 1, max = 1024))]
    pub path_prefix: Option<String>,

    /// Route to InferencePools (inference.networking.k8s.io/v1) instead of the
    /// Services: the operator owns a stable and a canary pool named as the Services,
    /// each selecting its revision's pods, and the route weights the two pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference_pool: Option<inference::InferencePoolBackend>,
}

/// At most 16 host names, each a DNS name of at most 253 characters (a
/// wildcard only as the first label): a `pattern`, not a CEL rule, since a
/// regex over a list costs the CRD's whole CEL budget.
fn hostnames_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": 16,
        "items": {
            "type": "string",
            "minLength": 1,
            "maxLength": 253,
            "pattern": "^([*][.])?[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
        }
    })
}

/// A reference to a Gateway (Gateway API `ParentReference`, the fields used here).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ParentRef {
    /// Name of the Gateway.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the Gateway. Default: the plan's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
    /// Name of one listener of the Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub section_name: Option<String>,
    /// Port of the listener(s) of the Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
}

/// Most labels a component's pod template may carry. The bound keeps the estimated
/// cost of the label CEL rules within the API server's budget: without it the
/// API server refuses the CRD (estimated rule cost 4.4x over budget).
pub const MAX_TEMPLATE_LABELS: u32 = 128;

/// Most entries of `containers`, and of `initContainers`, in a component's pod
/// template. Kubernetes sets no limit, but the unique-name rules compare every pair
/// of names and their estimated cost must fit the API server's budget: at 64 the
/// init-container rule is estimated at about 43% of the per-rule limit, from 98 on
/// the CRD is refused. Real pods have a handful of containers.
pub const MAX_CONTAINERS: u32 = 64;

/// Longest label value, and longest name part of a label key (Kubernetes' limit).
pub const MAX_LABEL_VALUE_LENGTH: u32 = 63;

/// A label value as Kubernetes accepts it; the length is bounded by `maxLength`.
const LABEL_VALUE_RULE: &str = "self.matches('^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$')";

/// Every key a qualified name: an optional DNS subdomain prefix (at most 253
/// characters) and `/`, then a name of at most 63 characters.
const LABEL_KEYS_RULE: &str = "self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && k.indexOf('/') <= 253)";

/// A container name as Kubernetes accepts it (a DNS label); length bounded by `maxLength`.
const CONTAINER_NAME_RULE: &str = "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')";

/// No leading or trailing whitespace in an image: Kubernetes refuses such a pod
/// (not the Deployment), so the rollout would wait for pods that never come.
const IMAGE_PATTERN: &str = r"^(\S(.*\S)?)?$";

/// The PodTemplateSpec schema, tightened so that a template the API server would
/// refuse in a Deployment is refused in the plan already, naming its field:
/// `spec` required; labels bounded and valid; containers and init containers
/// bounded, each with a DNS-label name, an image, and ports in range; no
/// ephemeral containers.
fn pod_template_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<PodTemplateSpec>();
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("required".into(), serde_json::json!(["spec"]));
    }
    if let Some(labels) = object_at(&mut schema, "/properties/metadata/properties/labels") {
        labels.insert("maxProperties".into(), MAX_TEMPLATE_LABELS.into());
        add_rule(
            labels,
            LABEL_KEYS_RULE,
            "template.metadata.labels: each key must be a qualified name: an optional DNS subdomain prefix of at most 253 characters and '/', then at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
        );
    }
    if let Some(value) = object_at(
        &mut schema,
        "/properties/metadata/properties/labels/additionalProperties",
    ) {
        value.insert("maxLength".into(), MAX_LABEL_VALUE_LENGTH.into());
        add_rule(
            value,
            LABEL_VALUE_RULE,
            "label value must be empty or at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
        );
    }
    // Kubernetes refuses ephemeral containers in a pod template.
    if let Some(obj) = object_at(
        &mut schema,
        "/properties/spec/properties/ephemeralContainers",
    ) {
        obj.insert("maxItems".into(), 0.into());
    }
    // Kubernetes' own list types (k8s.io/api core/v1), which k8s-openapi's
    // schemas lack: under server-side apply two field managers each own their
    // containers, volumes, env entries and mounts instead of replacing the
    // whole list. Ports stay atomic: their key (containerPort, protocol) needs
    // a default for protocol, which would change stored templates' hashes.
    set_map_list(&mut schema, "/properties/spec/properties/volumes", "name");
    for list in ["containers", "initContainers"] {
        let list = format!("/properties/spec/properties/{list}");
        set_map_list(&mut schema, &list, "name");
        set_map_list(&mut schema, &format!("{list}/items/properties/env"), "name");
        set_map_list(
            &mut schema,
            &format!("{list}/items/properties/volumeMounts"),
            "mountPath",
        );
        if let Some(obj) = object_at(&mut schema, &list) {
            obj.insert("maxItems".into(), MAX_CONTAINERS.into());
        }
        if let Some(obj) = object_at(&mut schema, &format!("{list}/items")) {
            obj.insert("required".into(), serde_json::json!(["name", "image"]));
        }
        if let Some(obj) = object_at(&mut schema, &format!("{list}/items/properties/name")) {
            obj.insert("maxLength".into(), 63.into());
            add_rule(
                obj,
                CONTAINER_NAME_RULE,
                "container name must be a DNS label: at most 63 lowercase letters, digits and '-', starting and ending with an alphanumeric character",
            );
        }
        if let Some(obj) = object_at(&mut schema, &format!("{list}/items/properties/image")) {
            obj.insert("minLength".into(), 1.into());
            // A pattern, not CEL: images have no length bound to keep a rule's cost down.
            obj.insert("pattern".into(), IMAGE_PATTERN.into());
        }
        let port = format!("{list}/items/properties/ports/items/properties");
        for (field, min) in [("containerPort", 1), ("hostPort", 0)] {
            if let Some(obj) = object_at(&mut schema, &format!("{port}/{field}")) {
                obj.insert("minimum".into(), min.into());
                obj.insert("maximum".into(), 65535.into());
            }
        }
    }
    schema
}

/// Marks the list at `pointer` a map list keyed by `key`
/// (`x-kubernetes-list-type: map`): server-side apply merges its entries by
/// key, and the API server refuses two entries with the same key. The key
/// must be required in the items' schema.
fn set_map_list(schema: &mut schemars::Schema, pointer: &str, key: &str) {
    if let Some(obj) = object_at(schema, pointer) {
        obj.insert("x-kubernetes-list-type".into(), "map".into());
        obj.insert(
            "x-kubernetes-list-map-keys".into(),
            serde_json::json!([key]),
        );
    }
}

/// The JSON object at `pointer` in `schema`, if there is one.
fn object_at<'a>(
    schema: &'a mut schemars::Schema,
    pointer: &str,
) -> Option<&'a mut serde_json::Map<String, serde_json::Value>> {
    schema.pointer_mut(pointer).and_then(|v| v.as_object_mut())
}

/// Appends a CEL rule to a schema object's `x-kubernetes-validations`.
fn add_rule(obj: &mut serde_json::Map<String, serde_json::Value>, rule: &str, message: &str) {
    let rule = serde_json::json!({ "rule": rule, "message": message });
    match obj.get_mut("x-kubernetes-validations") {
        Some(serde_json::Value::Array(rules)) => rules.push(rule),
        _ => {
            obj.insert("x-kubernetes-validations".into(), serde_json::json!([rule]));
        }
    }
}

/// The canary strategy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("self.steps.filter(s, has(s.setWeight)).map(s, s.setWeight).isSorted()").message("strategy.steps: setWeight values must never decrease").field_path(".steps"),
    validation = Rule::new("!has(self.blueGreen) || size(self.steps) == 0").message("strategy: blueGreen and steps exclude each other").field_path(".blueGreen"),
    validation = Rule::new(order::STEP_NAMES_RULE).message("strategy.steps: step names must be unique").field_path(".steps")
)]
#[serde(rename_all = "camelCase")]
pub struct Strategy {
    /// Ordered canary steps. The final step to 100% is implicit.
    #[serde(default)]
    #[schemars(length(max = 32))]
    pub steps: Vec<Step>,

    /// Blue-green instead of canary steps: the new revision comes up at full scale behind
    /// the canary (preview) Service while the stable (active) Service keeps serving the old
    /// one; promotion switches the active Service at once. Needs `traffic` on every component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blue_green: Option<BlueGreen>,

    /// When a rollout may start or take its next step: weekly time ranges with a time
    /// zone. Outside every window a new revision waits before its first step and a
    /// rollout waits at its next one (condition `Progressing`, reason
    /// `OutsideReleaseWindow`, says until when); rollback, abort and deletion are never
    /// held. Empty or absent: always.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = window::MAX_WINDOWS))]
    pub windows: Vec<window::ReleaseWindow>,
}

/// Settings of a blue-green release.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BlueGreen {
    /// Promote by itself once the preview has run this long with its pods ready and its
    /// gates passed. Unset: wait for `kubectl releaseplan promote`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub auto_promotion_seconds: Option<i32>,

    /// Seconds the old revision keeps all its pods after the switch, so that going back is
    /// instant; then it scales down. Default 30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub scale_down_delay_seconds: Option<i32>,
}

/// One canary step: exactly one of `setWeight`, `pause`, `setCanaryScale` and
/// `setHeaderRoute`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("[has(self.setWeight), has(self.pause), has(self.setCanaryScale), has(self.setHeaderRoute)].filter(k, k).size() == 1").message("each step must set exactly one of setWeight, pause, setCanaryScale and setHeaderRoute")
)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// A name for the step, unique in `steps`, so that `components[].dependsOn[].step` can
    /// name it. Optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("step name must be a DNS label: lowercase letters, digits and '-', starting and ending with an alphanumeric character"))]
    #[schemars(length(min = 1, max = 63))]
    pub name: Option<String>,

    /// Percent (0 to 100) of the new revision: of each changed component's requests when
    /// it has a router (`traffic.gatewayAPI`), else of its replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub set_weight: Option<i32>,

    /// Hold the rollout: for `duration`, or until promoted when no duration is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<Pause>,

    /// How many pods the new revision runs from this step on, independent of its traffic
    /// weight (components with a router only). Until the first one, and after one with
    /// `matchTrafficWeight`, the pods follow the weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_canary_scale: Option<CanaryScale>,

    /// Send requests carrying these headers to the new revision, whatever the weight
    /// (components with a router only), until promotion or rollback. An empty list
    /// removes the header route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_header_route: Option<HeaderRoute>,
}

/// The new revision's pod count: exactly one of `replicas`, `weight` and `matchTrafficWeight`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("[has(self.replicas), has(self.weight), has(self.matchTrafficWeight)].filter(k, k).size() == 1").message("setCanaryScale must set exactly one of replicas, weight and matchTrafficWeight"),
    validation = Rule::new("!has(self.matchTrafficWeight) || self.matchTrafficWeight").message("setCanaryScale.matchTrafficWeight can only be true").field_path(".matchTrafficWeight")
)]
#[serde(rename_all = "camelCase")]
pub struct CanaryScale {
    /// A fixed number of pods (at most the component's replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub replicas: Option<i32>,
    /// A percent of the component's replicas, rounded up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub weight: Option<i32>,
    /// Follow the traffic weight again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_traffic_weight: Option<bool>,
}

/// A header route to the new revision.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HeaderRoute {
    /// Headers a request must all carry (exact values) to reach the new revision.
    #[serde(default)]
    #[schemars(length(max = 8))]
    pub headers: Vec<HeaderMatch>,
}

/// One exact header match.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HeaderMatch {
    /// Header name.
    #[x_kube(validation = Rule::new("self.matches('^[-A-Za-z0-9!#$%&*+.^_|~]+$')").message("header name must be an HTTP token: letters, digits and !#$%&*+-.^_|~"))]
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Exact value.
    #[schemars(length(min = 1, max = 4096))]
    pub value: String,
}

/// A pause step.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Pause {
    /// How long to hold, as a Go duration (`30s`, `5m`, `1h30m`). Omit to hold until
    /// promoted (`kubectl releaseplan promote`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(DURATION_RULE).message("pause.duration must be a duration such as 30s, 5m or 1h30m"))]
    #[schemars(length(max = 32))]
    pub duration: Option<String>,
}

/// Rollback policy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RollbackPolicy {
    /// Roll back to the last stable revision by itself when a gate fails. Default true.
    /// When false, a failed rollout holds until `abort` or `retry`.
    #[serde(default = "default_true")]
    pub automatic: bool,
}

impl Default for RollbackPolicy {
    fn default() -> Self {
        Self { automatic: true }
    }
}

fn default_true() -> bool {
    true
}

/// Lifecycle phase of a ReleasePlan; the state of the rollout state machine.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default,
)]
pub enum Phase {
    /// Never reconciled.
    #[default]
    Pending,
    /// A new revision goes live step by step.
    RollingOut,
    /// Every component returns to the stable revision.
    RollbackInProgress,
    /// The stable revision serves; the desired revision failed and is not retried until
    /// the spec changes or a retry is requested.
    RolledBack,
    /// The desired revision is fully live and healthy.
    Stable,
}

impl Phase {
    /// Every phase, for metrics that report a gauge per phase.
    pub const ALL: [Phase; 5] = [
        Phase::Pending,
        Phase::RollingOut,
        Phase::RollbackInProgress,
        Phase::RolledBack,
        Phase::Stable,
    ];

    /// The phase's name as written in `status.phase`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::RollingOut => "RollingOut",
            Phase::RollbackInProgress => "RollbackInProgress",
            Phase::RolledBack => "RolledBack",
            Phase::Stable => "Stable",
        }
    }

    /// True while the operator is moving pods (a rollout or a rollback).
    pub fn is_active(self) -> bool {
        matches!(self, Phase::RollingOut | Phase::RollbackInProgress)
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Verdict of a health gate in the current step. Tools read the names, so
/// they are part of the API: one enum, never a string literal elsewhere.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default,
)]
pub enum Verdict {
    /// Not decided yet: never evaluated, or failed within its `failureLimit`.
    #[default]
    Pending,
    /// The last evaluation passed.
    Passed,
    /// Over one of its limits: the rollout fails.
    Failed,
    /// The last evaluation gave no usable number, within its `inconclusiveLimit`.
    Inconclusive,
}

impl Verdict {
    /// The verdict's name as written in `status.gates[].verdict`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pending => "Pending",
            Verdict::Passed => "Passed",
            Verdict::Failed => "Failed",
            Verdict::Inconclusive => "Inconclusive",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a finished rollout ended (`status.history[].outcome`; also the
/// rollouts metric's label).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The revision became stable.
    Promoted,
    /// The revision failed and every component returned to the stable one.
    RolledBack,
    /// A newer spec replaced the revision before it finished.
    Superseded,
}

impl Outcome {
    /// Every outcome.
    pub const ALL: [Outcome; 3] = [Outcome::Promoted, Outcome::RolledBack, Outcome::Superseded];

    /// The outcome's name as written in `status.history[].outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Promoted => "Promoted",
            Outcome::RolledBack => "RolledBack",
            Outcome::Superseded => "Superseded",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Observed state of a ReleasePlan, written only by the operator.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReleasePlanStatus {
    /// Lifecycle phase.
    #[serde(default)]
    pub phase: Phase,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Revision being rolled out (or live when Stable): a hash over every component's
    /// template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,
    /// Last revision that reached Stable; rollbacks return here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_revision: Option<String>,
    /// Index of the current step in `spec.strategy.steps`; equal to the number of steps
    /// during the implicit final step to 100%.
    #[serde(default)]
    pub current_step: i32,
    /// Percent of each changed component's replicas targeted at the current revision.
    #[serde(default)]
    pub weight: i32,
    /// Percent of routed requests the operator sends to the current revision (components
    /// with `traffic.gatewayAPI`); absent when no component has a router. Can lag `weight`
    /// while the new revision's pods are not ready: traffic never goes to missing pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_weight: Option<i32>,
    /// When the operator last changed a Service or route of the plan; revisions the change
    /// took requests from keep their pods for `traffic.drainSeconds` after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_changed_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When the current step started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_started_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When the current rollout or rollback started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_started_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Per-component revisions and replica counts.
    #[serde(default)]
    pub components: Vec<ComponentStatus>,
    /// Last verdict of each health gate in the current step.
    #[serde(default)]
    pub gates: Vec<GateStatus>,
    /// The template gates of the current step as read when it started; used until the
    /// step ends, whatever happens to the templates meanwhile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_TEMPLATE_GATES))]
    pub resolved_gates: Vec<template::ResolvedGate>,
    /// Why the current or last rollout failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// True while held by a `pause` request from the plugin (spec.paused is the other way).
    #[serde(default)]
    pub pause_requested: bool,
    /// Id of the last plugin request applied, so each is applied exactly once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_request: Option<String>,
    /// Number of rollouts started so far; each history entry carries its number.
    #[serde(default)]
    pub rollout_count: i64,
    /// Standard conditions: Ready, Reconciling, Stalled, Progressing, RollbackInProgress,
    /// Paused. A map list keyed by `type`, as Kubernetes' own conditions: server-side
    /// apply merges them by type, and the API server refuses two of one type.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Finished rollouts, newest last.
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
    /// One line for humans: what is happening now, or what went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Revisions and replica counts of one component.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ComponentStatus {
    /// Component name.
    pub name: String,
    /// Template hash the component is rolling to (or runs, when Stable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_hash: Option<String>,
    /// Template hash of the last stable revision of this component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_hash: Option<String>,
    /// Replicas the component runs once released.
    #[serde(default)]
    pub replicas: i32,
    /// Replicas wanted on the current revision now.
    #[serde(default)]
    pub current_replicas: i32,
    /// Ready pods of the current revision.
    #[serde(default)]
    pub current_ready: i32,
    /// Replicas wanted on the stable revision now.
    #[serde(default)]
    pub stable_replicas: i32,
    /// Ready pods of the stable revision.
    #[serde(default)]
    pub stable_ready: i32,
    /// Autoscaling of the component, when it is autoscaled: `replicas` is then the
    /// autoscaler's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<ComponentAutoscaling>,
    /// The ConfigMaps and Secrets the spec's revision reads: names, content digests and
    /// the immutable copies its pods read (never a value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<config::CarriedConfig>,
    /// The hand-over of the Deployment the component adopts (`adopt`), when it adopts one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted: Option<AdoptedStatus>,
    /// The components this one waits for (`dependsOn`): while rolling out, those that have
    /// not yet reached the point it starts at; while rolling back, the components that
    /// started after it and are not yet back on stable. Empty when it waits for none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_for: Vec<String>,
    /// The component's baseline (`baseline: true`) while a canary step runs or its
    /// pods are still going.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineStatus>,
}

/// A baseline beside the canary: the stable template started fresh.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BaselineStatus {
    /// Its revision, `<stable>-baseline`: the `releaseplan.io/revision` label of its pods.
    pub revision: String,
    /// Replicas wanted now (the canary's count while a step runs, 0 once it is removed).
    #[serde(default)]
    pub replicas: i32,
    /// Ready pods.
    #[serde(default)]
    pub ready: i32,
}

/// The autoscaling of one component, as observed.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ComponentAutoscaling {
    /// The ComponentScale its autoscaler writes (`kubectl get componentscale`).
    pub scale: String,
    /// The HPA the operator owns for it, once it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hpa: Option<String>,
    /// The spec asks the operator for an HPA (`autoscaling.maxReplicas` is set).
    #[serde(default)]
    pub owns_hpa: bool,
    /// Why the owned HPA cannot scale as its metrics ask (its AbleToScale or
    /// ScalingLimited condition), when it cannot: it may explain a rollout that waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ReleasePlanStatus {
    /// Rolling out but held by a failure with automatic rollback off: it
    /// needs a human (`retry`, `abort` or a spec change).
    pub fn is_halted(&self) -> bool {
        self.phase == Phase::RollingOut && self.failure.is_some()
    }

    /// Rolling out and paused on a gate (not a dry run) over its
    /// `inconclusiveLimit`: it needs a human (`promote`, `retry` or `abort`).
    pub fn awaits_decision(&self) -> bool {
        self.phase == Phase::RollingOut
            && !self.is_halted()
            && self.gates.iter().any(|g| g.awaiting_decision && !g.dry_run)
    }
}

impl ComponentStatus {
    /// The component rolls out a revision other than its stable one (the one
    /// predicate the machine, pod checks and gates use).
    pub fn is_changing(&self) -> bool {
        self.current_hash.is_some() && self.current_hash != self.stable_hash
    }
}

/// Last result of one health gate.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GateStatus {
    /// Gate name.
    pub name: String,
    /// `Pending`, `Passed`, `Failed` or `Inconclusive`.
    pub verdict: Verdict,
    /// Last measured value, as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Failed evaluations in this step.
    #[serde(default)]
    pub failures: i32,
    /// Inconclusive evaluations in this step.
    #[serde(default)]
    pub inconclusive: i32,
    /// When the gate was last evaluated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_evaluated: Option<chrono::DateTime<chrono::Utc>>,
    /// Why the gate has its verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The gate is a trial (`dryRun`): its verdict never fails, holds or pauses the rollout.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// Passing evaluations in a row (counted against `consecutiveSuccesses`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub consecutive_successes: i32,
    /// Errors in a row not yet counted as a failure (see `consecutiveErrors`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub consecutive_errors: i32,
    /// More inconclusive evaluations than its `inconclusiveLimit`: the rollout is
    /// paused until a human promotes, retries or aborts it (unless the gate is a dry run).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaiting_decision: bool,
    /// An analysis gate's last judgement: the score, and per metric the
    /// samples on each side, the statistic, p-value, effect and verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<analysis::AnalysisStatus>,
}

// serde's skip_serializing_if takes a reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// Why a rollout failed.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// The revision that failed.
    pub revision: String,
    /// The gate that failed: `progressDeadline`, `podHealth`, `abort`, `deletion`, or a
    /// gate's name.
    pub gate: String,
    /// Short machine-readable reason, e.g. `CrashLoopBackOff`.
    pub reason: String,
    /// What happened, for humans.
    pub message: String,
}

/// One finished rollout.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// Sequence number of the rollout (1 for the first).
    pub number: i64,
    /// Revision that was rolled out.
    pub revision: String,
    /// `Promoted`, `RolledBack` or `Superseded`.
    pub outcome: Outcome,
    /// When the rollout started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Why it ended this way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Template hash per component at that revision (`name=hash`).
    #[serde(default)]
    pub components: Vec<String>,
    /// The versioned ConfigMaps and Secrets each component read at that
    /// revision (`component: kind/name@digest`); never a value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<String>,
}

impl ReleasePlanSpec {
    /// Progress deadline with its default applied.
    pub fn progress_deadline_seconds(&self) -> i64 {
        i64::from(
            self.health
                .progress_deadline_seconds
                .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS),
        )
    }

    /// Revision history limit with its default applied.
    pub fn revision_history_limit(&self) -> usize {
        usize::try_from(
            self.revision_history_limit
                .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT),
        )
        .unwrap_or(0)
    }
}
