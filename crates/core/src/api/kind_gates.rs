//! Each gate kind's own settings (`PrometheusCheck`, `WebhookCheck`,
//! `JobCheck`), written once: under its key in `health.gates`, and
//! flattened beside the name, component and access in the per-kind shapes
//! (`PrometheusGate`, ...) of the deprecated lists and of gate templates,
//! which are also what each kind's parser reads ([`super::GateEntry`]).

use super::{DURATION_RULE, IMAGE_PATTERN, access};
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// CEL on a threshold: an operator and a number.
pub(super) const THRESHOLD_RULE: &str =
    "self.matches('^\\\\s*(<|<=|>|>=|==|!=)\\\\s*-?[0-9]+(\\\\.[0-9]+)?([eE][-+]?[0-9]+)?\\\\s*$')";

/// A Prometheus gate's query and how it is judged.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusCheck {
    /// Base URL of the Prometheus HTTP API, e.g. `http://prometheus.monitoring:9090`.
    #[x_kube(validation = Rule::new("self.matches('^https?://[^ ]+$')").message("prometheus address must be an http:// or https:// URL"))]
    #[schemars(length(max = 512))]
    pub address: String,

    /// PromQL query returning one number. `{{plan}}`, `{{namespace}}`, `{{component}}` and
    /// `{{revision}}` are replaced before it is sent.
    #[schemars(length(min = 1, max = 4096))]
    pub query: String,

    /// Pass condition on the query's value: an operator and a number, e.g. `< 0.05`,
    /// `>= 0.99`, `== 0`.
    #[x_kube(validation = Rule::new(THRESHOLD_RULE).message("threshold must be an operator (<, <=, >, >=, ==, !=) followed by a number, e.g. '< 0.05'"))]
    #[schemars(length(max = 64))]
    pub threshold: String,

    /// How often the query is evaluated. Default `30s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(DURATION_RULE).message("interval must be a duration such as 30s, 5m or 1h30m"))]
    #[schemars(length(max = 32))]
    pub interval: Option<String>,

    /// Failed evaluations (value outside the threshold, or query error) tolerated before
    /// the rollout fails: the gate fails at failureLimit + 1. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub failure_limit: Option<i32>,

    /// Inconclusive evaluations (no data, NaN, several series) tolerated in a step;
    /// one more pauses the rollout until a human promotes or aborts it (never a
    /// rollback, never a promotion). Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub inconclusive_limit: Option<i32>,

    /// Timeout of one query, in seconds. Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 300))]
    pub timeout_seconds: Option<i32>,
}

/// A webhook gate's call.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct WebhookCheck {
    /// URL the JSON body is POSTed to.
    #[x_kube(validation = Rule::new("self.matches('^https?://[^ ]+$')").message("webhook url must be an http:// or https:// URL"))]
    #[schemars(length(max = 1024))]
    pub url: String,

    /// Timeout of one call, in seconds. Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 60))]
    pub timeout_seconds: Option<i32>,

    /// Calls retried after a failure before the gate fails. Default 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10))]
    pub retries: Option<i32>,

    /// Inconclusive answers (a 2xx with the JSON body `{"verdict": "Inconclusive"}`)
    /// tolerated in a step; one more pauses the rollout until a human promotes or
    /// aborts it. Default 0: the first inconclusive answer asks a human.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub inconclusive_limit: Option<i32>,
}

/// A Job gate's Job.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct JobCheck {
    /// The Job to run, as in a CronJob's `jobTemplate`: `metadata` (labels,
    /// annotations) and a batch/v1 `spec`. Its containers get the environment
    /// variables RELEASEPLAN_PLAN, RELEASEPLAN_NAMESPACE, RELEASEPLAN_COMPONENT,
    /// RELEASEPLAN_COMPONENT_REVISION, RELEASEPLAN_REVISION, RELEASEPLAN_ROLLOUT,
    /// RELEASEPLAN_STEP and RELEASEPLAN_WEIGHT. `restartPolicy` defaults to Never and
    /// `backoffLimit` to 0.
    #[schemars(schema_with = "job_template_schema")]
    pub template: serde_json::Value,

    /// Seconds the Job may run before the gate fails (also the Job's
    /// `activeDeadlineSeconds` unless the template sets a shorter one). Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub timeout_seconds: Option<i32>,
}

/// A gate of the deprecated `health.prometheus` list, and the `prometheus` of a
/// gate template: a PromQL query evaluated at an interval.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(validation = Rule::new(access::AUTH_HEADER_RULE).message(access::AUTH_HEADER_MESSAGE))]
#[serde(rename_all = "camelCase")]
pub struct PrometheusGate {
    /// Name of the gate, shown in status, events and metrics.
    #[x_kube(validation = Rule::new(super::GATE_NAME_RULE).message("gate name must be a DNS label"))]
    #[schemars(length(min = 1, max = 40))]
    pub name: String,

    /// The query and how it is judged.
    #[serde(flatten)]
    pub check: PrometheusCheck,

    /// Credentials sent with every call (bearer token or basic auth), read
    /// from Secrets in the operator's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<access::GateAuth>,

    /// Extra request headers, each a plain value or read from a Secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = Rule::new("self.all(h, self.exists_one(g, g.name.lowerAscii() == h.name.lowerAscii()))").message("headers: header names must be unique (case-insensitive)"))]
    #[schemars(length(max = 16))]
    pub headers: Vec<access::GateHeader>,

    /// TLS settings: a CA bundle to trust for this gate's server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<access::GateTls>,

    /// The component the gate judges: `{{component}}` and `{{revision}}` name it.
    /// Default: the first component that changes in the rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 40))]
    pub component: Option<String>,
}

/// A gate that POSTs the rollout's state to a URL; a 2xx answer passes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(validation = Rule::new(access::AUTH_HEADER_RULE).message(access::AUTH_HEADER_MESSAGE))]
#[serde(rename_all = "camelCase")]
pub struct WebhookGate {
    /// Name of the gate, shown in status, events and metrics.
    #[x_kube(validation = Rule::new(super::GATE_NAME_RULE).message("gate name must be a DNS label"))]
    #[schemars(length(min = 1, max = 40))]
    pub name: String,

    /// The call.
    #[serde(flatten)]
    pub check: WebhookCheck,

    /// Credentials sent with every call (bearer token or basic auth), read
    /// from Secrets in the operator's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<access::GateAuth>,

    /// Extra request headers, each a plain value or read from a Secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = Rule::new("self.all(h, self.exists_one(g, g.name.lowerAscii() == h.name.lowerAscii()))").message("headers: header names must be unique (case-insensitive)"))]
    #[schemars(length(max = 16))]
    pub headers: Vec<access::GateHeader>,

    /// TLS settings: a CA bundle to trust for this gate's server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<access::GateTls>,

    /// The component the gate judges: the body's `component` and `componentRevision`
    /// name it. Default: the first component that changes in the rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 40))]
    pub component: Option<String>,
}

/// Default `timeoutSeconds` of a Job gate.
pub const DEFAULT_JOB_TIMEOUT_SECONDS: i32 = 600;

/// A gate that runs a Kubernetes Job once per step: it passes when the Job
/// completes, fails when the Job fails or does not finish within
/// `timeoutSeconds`. The Job is owned by the plan.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct JobGate {
    /// Name of the gate, shown in status, events and metrics, and part of the Job's name.
    #[x_kube(validation = Rule::new(super::GATE_NAME_RULE).message("gate name must be a DNS label"))]
    #[schemars(length(min = 1, max = 40))]
    pub name: String,

    /// The Job and how long it may run.
    #[serde(flatten)]
    pub check: JobCheck,

    /// The component the gate judges: RELEASEPLAN_COMPONENT and
    /// RELEASEPLAN_COMPONENT_REVISION name it. Default: the first component that
    /// changes in the rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 40))]
    pub component: Option<String>,
}

/// Most containers in a Job gate's pod template.
pub const MAX_JOB_CONTAINERS: u32 = 16;

/// The schema of a Job gate's template: the fields the operator reads are
/// typed and checked (containers with a name and an image, `restartPolicy`
/// Never or OnFailure), the rest of the JobSpec is kept as written
/// (`x-kubernetes-preserve-unknown-fields`) and checked by the API server
/// when the Job is created: the full JobSpec schema would double the CRD.
pub(super) fn job_template_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let open = |extra: serde_json::Value| {
        let mut v =
            serde_json::json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        if let (Some(o), serde_json::Value::Object(e)) = (v.as_object_mut(), extra) {
            o.extend(e);
        }
        v
    };
    let container = open(serde_json::json!({
        "required": ["name", "image"],
        "properties": {
            "name": {"type": "string", "maxLength": 63, "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
            "image": {"type": "string", "minLength": 1, "pattern": IMAGE_PATTERN},
        },
    }));
    let pod_spec = open(serde_json::json!({
        "required": ["containers"],
        "properties": {
            "restartPolicy": {"type": "string", "enum": ["Never", "OnFailure"]},
            "containers": {"type": "array", "minItems": 1, "maxItems": MAX_JOB_CONTAINERS, "items": container},
        },
    }));
    let pod_template = open(serde_json::json!({
        "required": ["spec"],
        "properties": {"metadata": open(serde_json::json!({})), "spec": pod_spec},
    }));
    let job_spec = open(serde_json::json!({
        "required": ["template"],
        "properties": {"template": pod_template},
    }));
    // The Job runs in the plan's namespace: a namespace here would be
    // stored and then ignored, so it is refused (`namespace` is a CEL
    // keyword, escaped as `__namespace__`).
    let job_metadata = open(serde_json::json!({
        "properties": {"namespace": {"type": "string"}},
        "x-kubernetes-validations": [{
            "rule": "!has(self.__namespace__)",
            "message": "a Job gate's template.metadata.namespace must not be set: the Job runs in the plan's namespace",
            "fieldPath": ".namespace",
        }],
    }));
    let mut schema = open(serde_json::json!({
        "required": ["spec"],
        "properties": {"metadata": job_metadata, "spec": job_spec},
    }));
    if let Some(o) = schema.as_object_mut() {
        o.remove("x-kubernetes-preserve-unknown-fields");
        o.insert(
            "description".into(),
            "The Job to run: metadata (labels, annotations) and a batch/v1 JobSpec.".into(),
        );
    }
    schemars::Schema::try_from(schema).unwrap_or_default()
}
