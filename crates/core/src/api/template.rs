//! Reusable gate templates: the namespaced `GateTemplate` and the
//! cluster-scoped `ClusterGateTemplate`, and how a plan refers to them.
//!
//! A template holds exactly one gate of any kind, built from the same structs
//! as a plan's own gates (so every field and rule a gate kind gains reaches
//! templates by construction), and declares the parameters a plan fills in
//! with `args`. The operator reads a referenced template when a step starts
//! and records what it read in `status.resolvedGates`, so an edit of the
//! template never changes a gate while its step runs: status keeps the
//! template's name, generation and content hash, and a Secret of the plan's
//! namespace keeps the content (see [`LABEL_TEMPLATE_COPY`]).

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use serde::{Deserialize, Serialize};

use super::{JobGate, PrometheusGate, WebhookGate};

/// Most parameters a template declares, and most args a reference passes.
pub const MAX_PARAMETERS: u32 = 16;

/// A parameter or argument name: what `{{args.NAME}}` may name.
const PARAMETER_NAME_RULE: &str = "self.matches('^[a-zA-Z][a-zA-Z0-9_]*$')";

/// One parameter of a template: a value the plan passes in `args`, used as
/// `{{args.NAME}}` in the gate's query, address or url, or in a Job gate's
/// container image, command, args and env values.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Parameter {
    /// Name of the parameter: a letter, then letters, digits or `_`; unique in the template.
    #[x_kube(validation = Rule::new(PARAMETER_NAME_RULE).message("parameter name must start with a letter and hold only letters, digits and '_'"))]
    #[schemars(length(min = 1, max = 40))]
    pub name: String,

    /// Value used when the plan passes none. Without a default the parameter is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub default: Option<String>,

    /// What the parameter means, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub description: Option<String>,

    /// In a ClusterGateTemplate, the parameter may be used in a Job gate's container
    /// `image` or `command`: a plan that passes it then chooses the code that runs with
    /// what the administrator gave the template's Job (its service account, volumes).
    /// Default false: such a use holds the step (`GateTemplateInvalid`). GateTemplates,
    /// written in the plan's own namespace, need no such declaration.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_image_or_command: bool,
}

/// A CEL rule: every `{{args.NAME}}` in the string field `$field` of the
/// optional gate `$gate` names a declared parameter. Parameter names are plain
/// (letters, digits, `_`), so one can be put into a regex as it is. Used on
/// URLs only: on a 4096-character query the API server estimates the rule at
/// 2.4 times its cost budget, so a query is checked when the step starts.
macro_rules! args_declared_rule {
    ($gate:literal, $field:literal) => {
        concat!(
            "!has(",
            $gate,
            ") || ",
            $gate,
            ".",
            $field,
            ".findAll('[{][{]\\\\s*args[.][A-Za-z0-9_]*\\\\s*[}][}]').all(m, self.parameters.exists(p, m.matches('^[{][{]\\\\s*args[.]' + p.name + '\\\\s*[}][}]$')))"
        )
    };
}

/// Generates the spec struct of a template kind: both kinds have the same
/// fields and rules, and `kube`'s derive needs one struct per kind.
macro_rules! template_spec {
    ($(#[$meta:meta])* $name:ident) => {
        #[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
        $(#[$meta])*
        #[x_kube(
            validation = Rule::new("[has(self.prometheus), has(self.webhook), has(self.job), has(self.analysis)].filter(k, k).size() == 1").message("a gate template must hold exactly one gate: set one of prometheus, webhook, job and analysis"),
            validation = Rule::new("self.parameters.all(p, self.parameters.exists_one(q, q.name == p.name))").message("parameters: parameter names must be unique").field_path(".parameters"),
            validation = Rule::new("!has(self.prometheus) || !has(self.prometheus.component)").message("prometheus.component: a template does not name a component; set component on the plan's reference").field_path(".prometheus"),
            validation = Rule::new("!has(self.webhook) || !has(self.webhook.component)").message("webhook.component: a template does not name a component; set component on the plan's reference").field_path(".webhook"),
            validation = Rule::new("!has(self.job) || !has(self.job.component)").message("job.component: a template does not name a component; set component on the plan's reference").field_path(".job"),
            validation = Rule::new(args_declared_rule!("self.webhook", "url")).message("webhook.url: each {{args.NAME}} must name one of parameters").field_path(".webhook.url"),
            validation = Rule::new(args_declared_rule!("self.prometheus", "address")).message("prometheus.address: each {{args.NAME}} must name one of parameters").field_path(".prometheus.address"),
            validation = Rule::new(args_declared_rule!("self.analysis", "address")).message("analysis.address: each {{args.NAME}} must name one of parameters").field_path(".analysis.address")
        )]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            /// Values a plan passes in `args`; `{{args.NAME}}` in the gate's query, address
            /// or url, or in a Job gate's container image, command, args and env values, is
            /// replaced by them.
            #[serde(default)]
            #[schemars(length(max = MAX_PARAMETERS))]
            pub parameters: Vec<Parameter>,

            /// A Prometheus query gate. Its `name` is required by the shared schema but the
            /// plan's reference names the gate.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub prometheus: Option<PrometheusGate>,

            /// A webhook gate. Its `name` is required by the shared schema but the plan's
            /// reference names the gate.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub webhook: Option<WebhookGate>,

            /// A Job gate, run in the plan's namespace. `{{args.NAME}}` is replaced only in
            /// its containers' `image`, `command`, `args` and `env[].value` (checked when
            /// the step starts); its `name` is required by the shared schema but the plan's
            /// reference names the gate.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub job: Option<JobGate>,

            /// A canary analysis gate. `{{args.NAME}}` is replaced in its `address` and
            /// in each metric's `query`, `failed` and `total`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub analysis: Option<super::analysis::TemplateAnalysis>,
        }
    };
}

template_spec! {
    /// A reusable gate of one namespace: plans of that namespace refer to it by name.
    #[kube(
        group = "releaseplan.io",
        version = "v1alpha1",
        kind = "GateTemplate",
        namespaced,
        shortname = "gt",
        doc = "A GateTemplate holds one health gate with parameters; ReleasePlans of its namespace use it from spec.health.gates[].template.",
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
    )]
    GateTemplateSpec
}

template_spec! {
    /// A reusable gate of the whole cluster: plans of every namespace refer to it by name
    /// (or of the namespaces its annotation `releaseplan.io/gate-namespaces` lists).
    #[kube(
        group = "releaseplan.io",
        version = "v1alpha1",
        kind = "ClusterGateTemplate",
        shortname = "cgt",
        doc = "A ClusterGateTemplate holds one health gate with parameters; ReleasePlans of any namespace (or of those its annotation releaseplan.io/gate-namespaces lists) use it from spec.health.gates[].template.",
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
    )]
    ClusterGateTemplateSpec
}

impl From<ClusterGateTemplateSpec> for GateTemplateSpec {
    fn from(c: ClusterGateTemplateSpec) -> Self {
        GateTemplateSpec {
            parameters: c.parameters,
            prometheus: c.prometheus,
            webhook: c.webhook,
            job: c.job,
            analysis: c.analysis,
        }
    }
}

/// Which kind of template a reference names.
#[derive(
    schemars::JsonSchema,
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
)]
pub enum TemplateKind {
    /// A `GateTemplate` in the plan's namespace.
    #[default]
    GateTemplate,
    /// A cluster-scoped `ClusterGateTemplate`.
    ClusterGateTemplate,
}

impl TemplateKind {
    /// The kind's name, as written in `templateRef.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            TemplateKind::GateTemplate => "GateTemplate",
            TemplateKind::ClusterGateTemplate => "ClusterGateTemplate",
        }
    }
}

impl std::fmt::Display for TemplateKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The template a gate of the plan is made from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "camelCase")]
pub struct TemplateRef {
    /// `GateTemplate` (in the plan's namespace, the default) or `ClusterGateTemplate`.
    #[serde(default)]
    pub kind: TemplateKind,

    /// Name of the template.
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$')").message("templateRef.name must be a lowercase DNS subdomain name"))]
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A gate of the plan made from a template.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("self.args.all(k, k.matches('^[a-zA-Z][a-zA-Z0-9_]*$'))").message("args: each name must start with a letter and hold only letters, digits and '_'").field_path(".args"),
    validation = Rule::new("self.args.all(k, size(self.args[k]) <= 256)").message("args: each value must be at most 256 characters").field_path(".args")
)]
#[serde(rename_all = "camelCase")]
pub struct GateTemplateRef {
    /// Name of the gate in this plan, shown in status, events and metrics; unique among
    /// the plan's gates.
    #[x_kube(validation = Rule::new(super::GATE_NAME_RULE).message("gate name must be a DNS label"))]
    #[schemars(length(min = 1, max = 40))]
    pub name: String,

    /// The template.
    pub template_ref: TemplateRef,

    /// Values of the template's parameters, by name.
    #[serde(default)]
    #[schemars(extend("maxProperties" = MAX_PARAMETERS))]
    pub args: BTreeMap<String, String>,

    /// The component the gate judges: `{{component}}` and `{{revision}}` (the webhook
    /// body's `component` and `componentRevision`, a Job's RELEASEPLAN_COMPONENT and
    /// RELEASEPLAN_COMPONENT_REVISION) name it. Default: the first component that
    /// changes in the rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 40))]
    pub component: Option<String>,
}

/// A template gate as read at the start of a step: the reference and the
/// hash of the template's content (the content is in a Secret the plan owns),
/// so the gate keeps running as read while its step lasts, whatever happens
/// to the template meanwhile.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedGate {
    /// Name of the gate in the plan.
    pub name: String,
    /// The template it was read from.
    pub template_ref: TemplateRef,
    /// `metadata.generation` of the template when it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_generation: Option<i64>,
    /// The rollout (`status.rolloutCount`) it was read in.
    pub rollout: i64,
    /// The step (`status.currentStep`) it was read in.
    pub step: i32,
    /// The arguments it was read with.
    #[serde(default)]
    pub args: BTreeMap<String, String>,
    /// The component the reference names, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// Hash of the template's content as read: the content itself is kept in the
    /// Secret `<plan>-gate-template-<hash>` of the plan's namespace, which the plan's
    /// readers (`view`) cannot read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// The template's content as read, written by operators before 0.2.0 (which
    /// kept it here, readable by `view`): still read, never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "opaque_object")]
    pub template: Option<GateTemplateSpec>,
}

/// Label of the Secrets that keep a template gate's content for a step, with the
/// content's hash as value (the operator watches only Secrets that carry it).
pub const LABEL_TEMPLATE_COPY: &str = "releaseplan.io/gate-template-copy";

/// Key of a template copy's Secret that holds the content (JSON).
pub const TEMPLATE_COPY_KEY: &str = "template.json";

/// Longest Secret name (a DNS subdomain).
const MAX_SECRET_NAME: usize = 253;

/// Hash of a template's content: what status records instead of the content.
pub fn content_hash(spec: &GateTemplateSpec) -> String {
    super::revision::hash_owned(serde_json::to_value(spec).unwrap_or(serde_json::Value::Null))
}

/// Name of the Secret that keeps content `hash` for plan `plan`:
/// `<plan>-gate-template-<hash>`, the plan's part shortened when too long.
pub fn copy_name(plan: &str, hash: &str) -> String {
    let suffix = format!("-gate-template-{hash}");
    let keep = MAX_SECRET_NAME.saturating_sub(suffix.len());
    let prefix: String = plan.chars().take(keep).collect();
    format!("{}{suffix}", prefix.trim_end_matches(['-', '.']))
}

/// An object whose fields the API server keeps as they are, unchecked.
fn opaque_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// The GateTemplate CRD as installed.
pub fn gate_template_crd() -> CustomResourceDefinition {
    GateTemplate::crd()
}

/// The ClusterGateTemplate CRD as installed.
pub fn cluster_gate_template_crd() -> CustomResourceDefinition {
    ClusterGateTemplate::crd()
}
