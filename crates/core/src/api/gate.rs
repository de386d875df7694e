//! Health gates in the API: `spec.health` and its one list of gates,
//! `health.gates`. A gate is `{name, component?, auth?, headers?, tls?}`
//! and exactly one kind: `prometheus`, `webhook`, `job`, `template` or
//! `analysis`.
//!
//! The four lists of the first API (`prometheus`, `webhooks`, `jobs`,
//! `templates`) stay in the schema, deprecated, so the API server never
//! prunes a gate that a plan written before `gates` holds.
//! [`Health::entries`] reads them as gates after `gates`; past this module
//! nothing knows there were two shapes.

use super::access;
use super::kind_gates::{
    JobCheck, JobGate, PrometheusCheck, PrometheusGate, WebhookCheck, WebhookGate,
};
use super::template::{GateTemplateRef, TemplateKind, TemplateRef};
use kube::KubeSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The CEL list of `$expr` over every gate of `health` (`$at` is the CEL path
/// of `health`): `gates` and the deprecated lists, each mapped with `$map`
/// (CEL's `map(g, [filter,] expr)` arguments). One list, so a rule over all
/// gates is written once, not pairwise.
macro_rules! all_gates {
    ($at:literal, $map:literal) => {
        concat!(
            "((has(",
            $at,
            ".gates) ? ",
            $at,
            ".gates.map(g, ",
            $map,
            ") : [])",
            " + (has(",
            $at,
            ".prometheus) ? ",
            $at,
            ".prometheus.map(g, ",
            $map,
            ") : [])",
            " + (has(",
            $at,
            ".webhooks) ? ",
            $at,
            ".webhooks.map(g, ",
            $map,
            ") : [])",
            " + (has(",
            $at,
            ".jobs) ? ",
            $at,
            ".jobs.map(g, ",
            $map,
            ") : [])",
            " + (has(",
            $at,
            ".templates) ? ",
            $at,
            ".templates.map(g, ",
            $map,
            ") : []))"
        )
    };
}

/// CEL on `health`: gate names are unique across `gates` and the deprecated lists.
pub const UNIQUE_GATE_NAMES_RULE: &str = concat!(
    all_gates!("self", "g.name"),
    ".all(n, ",
    all_gates!("self", "g.name"),
    ".exists_one(m, m == n))"
);

/// CEL on the plan's spec: every gate's `component` names one of `components`.
pub const GATE_COMPONENTS_RULE: &str = concat!(
    all_gates!("self.health", "has(g.component), g.component"),
    ".all(c, self.components.exists(d, d.name == c))"
);

/// Health gates, checked continuously while rolling out.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(validation = Rule::new(UNIQUE_GATE_NAMES_RULE).message("health: gate names must be unique across gates and the deprecated prometheus, webhooks, jobs and templates lists"))]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// Seconds a step may take for its pods to become ready before the rollout fails.
    /// Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub progress_deadline_seconds: Option<i32>,

    /// Container restarts tolerated on a new-revision pod before the rollout fails.
    /// Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub max_restarts: Option<i32>,

    /// Fail at once when a new-revision pod waits in CrashLoopBackOff, ErrImagePull,
    /// ImagePullBackOff, CreateContainerConfigError or InvalidImageName. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detect_pod_failures: Option<bool>,

    /// The health gates: each has a name and exactly one kind (`prometheus`,
    /// `webhook`, `job`, `template` or `analysis`). A rollout advances only
    /// while every gate passes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_GATES))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub gates: Vec<Gate>,

    /// Deprecated: write these in `gates` with `prometheus`. Still read, after `gates`.
    #[serde(default)]
    #[schemars(length(max = 8))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub prometheus: Vec<PrometheusGate>,

    /// Deprecated: write these in `gates` with `webhook`. Still read, after `gates`.
    #[serde(default)]
    #[schemars(length(max = 8))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub webhooks: Vec<WebhookGate>,

    /// Deprecated: write these in `gates` with `job`. Still read, after `gates`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub jobs: Vec<JobGate>,

    /// Deprecated: write these in `gates` with `template`. Still read, after `gates`.
    #[serde(default)]
    #[schemars(length(max = 8))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub templates: Vec<GateTemplateRef>,
}

/// Most gates in `health.gates`.
pub const MAX_GATES: u32 = 16;

/// A health gate: its name, the component it judges, how it reaches its
/// server, and exactly one kind.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("[has(self.prometheus), has(self.webhook), has(self.job), has(self.template), has(self.analysis)].filter(k, k).size() == 1").message("a gate holds exactly one kind: set one of prometheus, webhook, job, template and analysis"),
    validation = Rule::new("has(self.prometheus) || has(self.webhook) || has(self.analysis) || (!has(self.auth) && !has(self.headers) && !has(self.tls))").message("auth, headers and tls apply to prometheus, webhook and analysis gates only (a template gate takes them from its template)"),
    validation = Rule::new(access::AUTH_HEADER_RULE).message(access::AUTH_HEADER_MESSAGE),
    validation = Rule::new("!has(self.job) || (!has(self.consecutiveSuccesses) && !has(self.consecutiveErrors))").message("consecutiveSuccesses and consecutiveErrors apply to prometheus, webhook and template gates: a Job gate runs once per step")
)]
#[serde(rename_all = "camelCase")]
pub struct Gate {
    /// Name of the gate, shown in status, events and metrics (and part of a Job
    /// gate's Job name). Unique in the plan.
    #[x_kube(validation = Rule::new(super::GATE_NAME_RULE).message("gate name must be a DNS label"))]
    #[schemars(length(min = 1, max = 40))]
    pub name: String,

    /// The component the gate judges: a query's `{{component}}` and `{{revision}}`,
    /// a webhook body's `component` and `componentRevision`, a Job's
    /// RELEASEPLAN_COMPONENT and RELEASEPLAN_COMPONENT_REVISION name it. Default: the
    /// first component that changes in the rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 40))]
    pub component: Option<String>,

    /// Credentials sent with every call of a prometheus or webhook gate (bearer
    /// token or basic auth), read from Secrets in the operator's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<access::GateAuth>,

    /// Extra request headers of a prometheus or webhook gate, each a plain value or
    /// read from a Secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = Rule::new("self.all(h, self.exists_one(g, g.name.lowerAscii() == h.name.lowerAscii()))").message("headers: header names must be unique (case-insensitive)"))]
    #[schemars(length(max = 16))]
    pub headers: Vec<access::GateHeader>,

    /// TLS settings of a prometheus or webhook gate: a CA bundle to trust for its server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<access::GateTls>,

    /// A PromQL query compared with a threshold at an interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusCheck>,

    /// A URL the rollout's state is POSTed to; a 2xx answer passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookCheck>,

    /// A Kubernetes Job run once in every step, once the step's pods are ready (smoke
    /// tests, load tests): it passes when the Job completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobCheck>,

    /// A gate made from a GateTemplate or ClusterGateTemplate, with arguments: read
    /// when a step starts and kept as read (`status.resolvedGates`) until the step ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<TemplateUse>,

    /// Canary analysis: each metric queried for the new revision and for the
    /// stable one, compared by a statistical judge (Mann-Whitney U for
    /// samples, Fisher's exact test for counts) and scored; see
    /// docs/gates.md, "Canary analysis".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<super::analysis::AnalysisCheck>,

    /// Trial the gate: it runs and its verdicts are recorded in status, Events and
    /// metrics as for any gate, but it never fails, holds or pauses the rollout.
    /// Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,

    /// Passing evaluations in a row the gate needs before its verdict is Passed
    /// (a failed, inconclusive or counted error evaluation starts the count again).
    /// Not for Job gates. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub consecutive_successes: Option<i32>,

    /// Errors in a row (timeout, connection refused, an error answer) before they
    /// count as one failed evaluation; a lone error keeps the previous verdict. Not
    /// for Job gates. Default 2: one flaky scrape is tolerated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub consecutive_errors: Option<i32>,
}

/// How a gate of `health.gates` is trialled and judged over time, whatever
/// its kind (`dryRun`, `consecutiveSuccesses`, `consecutiveErrors`), with
/// the defaults applied. Gates of the deprecated lists take the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trial {
    /// Verdicts are recorded but never fail, hold or pause the rollout.
    pub dry_run: bool,
    /// Passes in a row before the verdict is Passed.
    pub consecutive_successes: i32,
    /// Errors in a row that count as one failed evaluation.
    pub consecutive_errors: i32,
}

/// `consecutiveErrors` when unset: one flaky scrape is tolerated.
pub const DEFAULT_CONSECUTIVE_ERRORS: i32 = 2;

impl Default for Trial {
    fn default() -> Self {
        Trial {
            dry_run: false,
            consecutive_successes: 1,
            consecutive_errors: DEFAULT_CONSECUTIVE_ERRORS,
        }
    }
}

impl Trial {
    /// The trial settings of `gate`, defaults applied (each at least 1).
    pub fn of(gate: &Gate) -> Trial {
        let d = Trial::default();
        Trial {
            dry_run: gate.dry_run.unwrap_or(d.dry_run),
            consecutive_successes: gate
                .consecutive_successes
                .unwrap_or(d.consecutive_successes)
                .max(1),
            consecutive_errors: gate
                .consecutive_errors
                .unwrap_or(d.consecutive_errors)
                .max(1),
        }
    }
}

/// The template a gate is made from, and its arguments.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(
    validation = Rule::new("self.args.all(k, k.matches('^[a-zA-Z][a-zA-Z0-9_]*$'))").message("args: each name must start with a letter and hold only letters, digits and '_'").field_path(".args"),
    validation = Rule::new("self.args.all(k, size(self.args[k]) <= 256)").message("args: each value must be at most 256 characters").field_path(".args")
)]
#[serde(rename_all = "camelCase")]
pub struct TemplateUse {
    /// `GateTemplate` (in the plan's namespace, the default) or `ClusterGateTemplate`.
    #[serde(default)]
    pub kind: TemplateKind,

    /// Name of the template.
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$')").message("template.name must be a lowercase DNS subdomain name"))]
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Values of the template's parameters, by name.
    #[serde(default)]
    #[schemars(extend("maxProperties" = super::template::MAX_PARAMETERS))]
    pub args: BTreeMap<String, String>,
}

/// One gate of the plan, whichever list it was written in, in the shape each
/// kind's parser reads: the kind's settings with the gate's name, component
/// and access. A new gate kind is one arm here and one block in [`Gate`].
#[derive(Clone, Debug, PartialEq)]
pub enum GateEntry {
    /// A Prometheus query gate.
    Prometheus(PrometheusGate),
    /// A webhook gate.
    Webhook(WebhookGate),
    /// A Job gate.
    Job(JobGate),
    /// A gate made from a template, read when a step starts.
    Template(GateTemplateRef),
    /// A canary analysis gate.
    Analysis(super::analysis::AnalysisGate),
}

/// A gate and where the user wrote it, so an error names the field.
#[derive(Clone, Debug, PartialEq)]
pub struct GateAt {
    /// JSON path of the gate, e.g. `spec.health.gates[2]`.
    pub path: String,
    /// Where the kind's own settings sit under the gate: `prometheus`, ... in
    /// `gates`; `None` in a deprecated list, where they sit beside the name.
    pub kind_key: Option<&'static str>,
    /// The gate.
    pub entry: GateEntry,
    /// Its trial settings (defaults in the deprecated lists).
    pub trial: Trial,
}

impl GateAt {
    /// The JSON path of `field` of this gate, a path as the kind's parser
    /// names it (`threshold`, `auth.basic`, `template.spec...`): the fields
    /// every gate has sit on the gate, the kind's own under its key.
    pub fn field(&self, field: &str) -> String {
        if field.is_empty() {
            return self.path.clone();
        }
        let first = field.split(['.', '[']).next().unwrap_or(field);
        match self.kind_key {
            Some(key)
                if !matches!(
                    first,
                    "name"
                        | "component"
                        | "auth"
                        | "headers"
                        | "tls"
                        | "dryRun"
                        | "consecutiveSuccesses"
                        | "consecutiveErrors"
                ) =>
            {
                format!("{}.{key}.{field}", self.path)
            }
            _ => format!("{}.{field}", self.path),
        }
    }

    /// The gate's name, unique in the plan.
    pub fn name(&self) -> &str {
        match &self.entry {
            GateEntry::Prometheus(g) => &g.name,
            GateEntry::Webhook(g) => &g.name,
            GateEntry::Job(g) => &g.name,
            GateEntry::Template(g) => &g.name,
            GateEntry::Analysis(g) => &g.name,
        }
    }

    /// The component the gate names, if any.
    pub fn component(&self) -> Option<&str> {
        match &self.entry {
            GateEntry::Prometheus(g) => g.component.as_deref(),
            GateEntry::Webhook(g) => g.component.as_deref(),
            GateEntry::Job(g) => g.component.as_deref(),
            GateEntry::Template(g) => g.component.as_deref(),
            GateEntry::Analysis(g) => g.component.as_deref(),
        }
    }
}

impl Gate {
    /// The gate as its kind's parser reads it, `None` when it holds no kind
    /// or several (which the CRD refuses).
    pub fn entry(&self) -> Option<(&'static str, GateEntry)> {
        let name = self.name.clone();
        let component = self.component.clone();
        let kinds = [
            self.prometheus.is_some(),
            self.webhook.is_some(),
            self.job.is_some(),
            self.template.is_some(),
            self.analysis.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return None;
        }
        if let Some(p) = &self.prometheus {
            return Some((
                "prometheus",
                GateEntry::Prometheus(PrometheusGate {
                    name,
                    check: p.clone(),
                    auth: self.auth.clone(),
                    headers: self.headers.clone(),
                    tls: self.tls.clone(),
                    component,
                }),
            ));
        }
        if let Some(w) = &self.webhook {
            return Some((
                "webhook",
                GateEntry::Webhook(WebhookGate {
                    name,
                    check: w.clone(),
                    auth: self.auth.clone(),
                    headers: self.headers.clone(),
                    tls: self.tls.clone(),
                    component,
                }),
            ));
        }
        if let Some(a) = &self.analysis {
            return Some((
                "analysis",
                GateEntry::Analysis(super::analysis::AnalysisGate {
                    name,
                    check: a.clone(),
                    auth: self.auth.clone(),
                    headers: self.headers.clone(),
                    tls: self.tls.clone(),
                    component,
                }),
            ));
        }
        if let Some(j) = &self.job {
            return Some((
                "job",
                GateEntry::Job(JobGate {
                    name,
                    check: j.clone(),
                    component,
                }),
            ));
        }
        self.template.as_ref().map(|t| {
            (
                "template",
                GateEntry::Template(GateTemplateRef {
                    name,
                    template_ref: TemplateRef {
                        kind: t.kind,
                        name: t.name.clone(),
                    },
                    args: t.args.clone(),
                    component,
                }),
            )
        })
    }
}

/// A gate of `health.gates` that holds no kind or several (the CRD refuses
/// it; an object stored before the rule could hold one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{path}: a gate holds exactly one kind: set one of prometheus, webhook, job, template and analysis"
)]
pub struct NotOneKind {
    /// JSON path of the gate.
    pub path: String,
}

impl Health {
    /// Every gate of the plan in one list, each with where it was written:
    /// `gates` first, then the deprecated `prometheus`, `webhooks`, `jobs`
    /// and `templates` lists (the order plans written before `gates` always
    /// had).
    pub fn entries(&self) -> Result<Vec<GateAt>, NotOneKind> {
        let mut out = Vec::with_capacity(
            self.gates.len()
                + self.prometheus.len()
                + self.webhooks.len()
                + self.jobs.len()
                + self.templates.len(),
        );
        for (i, g) in self.gates.iter().enumerate() {
            let path = format!("spec.health.gates[{i}]");
            let Some((key, entry)) = g.entry() else {
                return Err(NotOneKind { path });
            };
            out.push(GateAt {
                path,
                kind_key: Some(key),
                entry,
                trial: Trial::of(g),
            });
        }
        let old = |list: &str, i: usize, entry: GateEntry| GateAt {
            path: format!("spec.health.{list}[{i}]"),
            kind_key: None,
            entry,
            trial: Trial::default(),
        };
        for (i, g) in self.prometheus.iter().enumerate() {
            out.push(old("prometheus", i, GateEntry::Prometheus(g.clone())));
        }
        for (i, g) in self.webhooks.iter().enumerate() {
            out.push(old("webhooks", i, GateEntry::Webhook(g.clone())));
        }
        for (i, g) in self.jobs.iter().enumerate() {
            out.push(old("jobs", i, GateEntry::Job(g.clone())));
        }
        for (i, g) in self.templates.iter().enumerate() {
            out.push(old("templates", i, GateEntry::Template(g.clone())));
        }
        Ok(out)
    }

    /// The plan's gates made from templates, in spec order: only those are
    /// converted (this runs in every reconcile's observation, and for every
    /// plan when a template changes). A gate of several kinds is left out:
    /// the plan is stalled on it anyway.
    pub fn template_refs(&self) -> Vec<GateTemplateRef> {
        let in_gates = self
            .gates
            .iter()
            .filter(|g| g.template.is_some())
            .filter_map(|g| match g.entry()?.1 {
                GateEntry::Template(r) => Some(r),
                _ => None,
            });
        in_gates.chain(self.templates.iter().cloned()).collect()
    }

    /// The deprecated lists this plan writes gates in (the plugin's `lint`
    /// names them), in the order they are read.
    pub fn deprecated_lists(&self) -> Vec<&'static str> {
        [
            ("prometheus", self.prometheus.is_empty()),
            ("webhooks", self.webhooks.is_empty()),
            ("jobs", self.jobs.is_empty()),
            ("templates", self.templates.is_empty()),
        ]
        .into_iter()
        .filter(|(_, empty)| !empty)
        .map(|(list, _)| list)
        .collect()
    }
}
