//! Template gates, resolved purely: a plan's references
//! (`spec.health.templates`), the templates the controller observed, the
//! plan's copies of the content read earlier and the persisted status in; the
//! concrete gates, what to record in `status.resolvedGates` (name, generation
//! and content hash, never the content), the content to keep in a copy, and
//! what is wrong out.
//!
//! A reference is resolved from the record in status while the step it was
//! read in lasts (same rollout, same step, same reference), its content from
//! the plan's copy, so a template edited or deleted mid-step changes nothing
//! until the next step; otherwise from the template as observed now.

use std::collections::BTreeMap;

use serde_json::Value;

use super::job::JobGateSpec;
use super::pod_security::Level;
use super::{GateSpec, prometheus, webhook};
use crate::api::template::{
    GateTemplateRef, GateTemplateSpec, ResolvedGate, TemplateKind, content_hash,
};
use crate::api::{Phase, ReleasePlanStatus};

/// A template as the controller observed it (from its cache).
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedTemplate {
    /// Its kind.
    pub kind: TemplateKind,
    /// Its name.
    pub name: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// Its content.
    pub spec: GateTemplateSpec,
    /// A ClusterGateTemplate whose `releaseplan.io/gate-namespaces` annotation
    /// lists the plan's namespace by name ([`lists_namespace`]): its Job may run
    /// as the service account it names there.
    pub lists_namespace: bool,
}

/// Why a template gate cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// The referenced template does not exist.
    NotFound,
    /// The template and the reference do not fit: a missing or unknown
    /// argument, an unusable value after substitution.
    Invalid,
}

/// A template gate that cannot run, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateProblem {
    /// Name of the gate in the plan.
    pub gate: String,
    /// What kind of problem.
    pub kind: ProblemKind,
    /// What is wrong, naming the template.
    pub message: String,
}

/// A template's gate, instantiated: which path runs it depends on its kind.
/// Both variants are large and few (at most 8 a plan, moved once into the
/// `Target`), so neither is boxed.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum TemplateGate {
    /// A Prometheus or webhook gate: the gate runner evaluates it.
    Runner(GateSpec),
    /// A Job gate: the core judges its Job (`gates::job`).
    Job(JobGateSpec),
}

impl TemplateGate {
    /// The gate's name (the reference's).
    pub fn name(&self) -> &str {
        match self {
            TemplateGate::Runner(g) => g.name(),
            TemplateGate::Job(j) => &j.name,
        }
    }
}

/// One template gate, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedTemplateGate {
    /// The gate, parsed, placeholders `{{args.*}}` replaced.
    pub gate: TemplateGate,
    /// What is recorded in status for the step.
    pub record: ResolvedGate,
    /// The template's content as read (placeholders not replaced): kept in
    /// the plan's copy named by `record.content_hash`.
    pub content: GateTemplateSpec,
}

/// Every template gate of a plan, resolved or not.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Resolution {
    /// Gates that can run, in reference order.
    pub gates: Vec<ResolvedTemplateGate>,
    /// Gates that cannot, in reference order.
    pub problems: Vec<TemplateProblem>,
}

/// Resolves every reference with no template copy observed and tenants' Job
/// gates at the default Pod Security Standard level; see [`resolve_with`].
pub fn resolve(
    refs: &[GateTemplateRef],
    status: &ReleasePlanStatus,
    observed: &[ObservedTemplate],
) -> Resolution {
    resolve_with(
        refs,
        status,
        &Inputs {
            observed,
            copies: &BTreeMap::new(),
            pod_security: Level::default(),
        },
    )
}

/// What resolving reads besides the references and the persisted status.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The templates the references name, as observed now.
    pub observed: &'a [ObservedTemplate],
    /// The plan's template copies (the content of earlier reads), by content hash.
    pub copies: &'a BTreeMap<String, GateTemplateSpec>,
    /// The Pod Security Standard level of the Job gates of the plan's own
    /// namespace's GateTemplates.
    pub pod_security: Level,
}

/// Resolves every reference; see the module docs. Pure.
///
/// A record of the running step names the content it read by hash: the
/// content is taken from the plan's copy of that hash, from the record itself
/// when an operator before 0.2.0 wrote it there, or from the template when
/// its content still has that hash. When none has it (the copy was deleted
/// and the template changed), the template is read anew.
pub fn resolve_with(
    refs: &[GateTemplateRef],
    status: &ReleasePlanStatus,
    inputs: &Inputs<'_>,
) -> Resolution {
    let mut out = Resolution::default();
    for r in refs {
        let observed = inputs
            .observed
            .iter()
            .find(|t| t.kind == r.template_ref.kind && t.name == r.template_ref.name);
        let recorded = status
            .resolved_gates
            .iter()
            .find(|g| {
                status.phase == Phase::RollingOut
                    && g.rollout == status.rollout_count
                    && g.step == status.current_step
                    && g.name == r.name
                    && g.template_ref == r.template_ref
                    && g.args == r.args
                    && g.component == r.component
            })
            .and_then(|g| recorded_content(g, inputs.copies, observed));
        let (content, generation, fresh) = if let Some((content, generation)) = recorded {
            (content, generation, None)
        } else if let Some(t) = observed {
            (t.spec.clone(), t.generation, Some(t))
        } else {
            out.problems.push(TemplateProblem {
                gate: r.name.clone(),
                kind: ProblemKind::NotFound,
                message: format!(
                    "gate {}: {} {} not found",
                    r.name, r.template_ref.kind, r.template_ref.name
                ),
            });
            continue;
        };
        let instantiated = instantiate(r, &content).and_then(|gate| match gate {
            // A namespaced GateTemplate is a tenant's, as the plan is: its
            // Job's pod meets the tenants' Pod Security Standard level.
            TemplateGate::Job(j) if r.template_ref.kind == TemplateKind::GateTemplate => j
                .secured(inputs.pod_security)
                .map(TemplateGate::Job)
                .map_err(|(field, message)| format!("job.{field}: {message}")),
            // An administrator's: its Job runs as the service account it
            // names only where the administrator listed the namespace (the
            // record of a running step passed this when it was read).
            TemplateGate::Job(j) => match (fresh, service_account(&j)) {
                (Some(t), Some((field, sa))) if !t.lists_namespace => Err(format!(
                    "job.template.spec.template.spec.{field}: the Job of a ClusterGateTemplate runs as its service account {sa:?} only in the namespaces its annotation {} lists by name, and it does not list this one",
                    crate::api::access::ANNOTATION_GATE_NAMESPACES
                )),
                _ => Ok(TemplateGate::Job(j)),
            },
            other @ TemplateGate::Runner(_) => Ok(other),
        });
        match instantiated {
            Ok(gate) => out.gates.push(ResolvedTemplateGate {
                gate,
                record: ResolvedGate {
                    name: r.name.clone(),
                    template_ref: r.template_ref.clone(),
                    template_generation: generation,
                    rollout: status.rollout_count,
                    step: status.current_step,
                    args: r.args.clone(),
                    component: r.component.clone(),
                    content_hash: Some(content_hash(&content)),
                    template: None,
                },
                content,
            }),
            Err(message) => out.problems.push(TemplateProblem {
                gate: r.name.clone(),
                kind: ProblemKind::Invalid,
                message: format!(
                    "gate {}: {} {}: {message}",
                    r.name, r.template_ref.kind, r.template_ref.name
                ),
            }),
        }
    }
    out
}

/// The content a record of the running step read, and the template's
/// generation then; `None` when no copy, record or template holds it any more.
fn recorded_content(
    g: &ResolvedGate,
    copies: &BTreeMap<String, GateTemplateSpec>,
    observed: Option<&ObservedTemplate>,
) -> Option<(GateTemplateSpec, Option<i64>)> {
    if let Some(t) = &g.template {
        return Some((t.clone(), g.template_generation));
    }
    let hash = g.content_hash.as_ref()?;
    copies
        .get(hash)
        .cloned()
        .or_else(|| {
            observed
                .filter(|t| content_hash(&t.spec) == *hash)
                .map(|t| t.spec.clone())
        })
        .map(|c| (c, g.template_generation))
}

/// The service account a Job gate's pod names (`serviceAccountName`, or the
/// deprecated `serviceAccount`), other than the namespace's `default`: the
/// field and the name.
fn service_account(j: &JobGateSpec) -> Option<(&'static str, String)> {
    let pod = j.template.spec.as_ref()?.template.spec.as_ref()?;
    [
        ("serviceAccountName", pod.service_account_name.as_ref()),
        ("serviceAccount", pod.service_account.as_ref()),
    ]
    .into_iter()
    .find_map(|(field, name)| {
        name.filter(|n| !n.is_empty() && *n != "default")
            .map(|n| (field, n.clone()))
    })
}

/// Whether a ClusterGateTemplate's `releaseplan.io/gate-namespaces`
/// annotation lists namespace `ns` by name (`*` or no annotation serve every
/// namespace but name none).
pub fn lists_namespace(annotations: Option<&BTreeMap<String, String>>, ns: &str) -> bool {
    annotations
        .and_then(|a| a.get(crate::api::access::ANNOTATION_GATE_NAMESPACES))
        .is_some_and(|list| list.split(',').any(|n| n.trim() == ns))
}

/// One of the plan's template copies, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyObs {
    /// The Secret's name.
    pub name: String,
    /// The hash of the content it keeps (its label's value).
    pub hash: String,
}

/// A template copy to create: a Secret of the plan's namespace, owned by the
/// plan, that keeps the content a step read.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyIntent {
    /// The Secret's name ([`crate::api::template::copy_name`]).
    pub name: String,
    /// The content's hash.
    pub hash: String,
    /// The content.
    pub content: GateTemplateSpec,
}

/// The template copies a decision creates and deletes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CopyIntents {
    /// Copies to create (before status records their hash).
    pub create: Vec<CopyIntent>,
    /// Copies to delete, by name.
    pub delete: Vec<String>,
}

/// Which copies to create and delete: a copy is wanted for every hash the
/// next status records and, while the plan rolls out, for every content
/// resolved now (the next step most likely records it again); every other
/// copy of the plan is deleted. Nothing while the plan is deleted: its copies
/// go with it (owner references).
pub fn copy_intents(
    plan: &str,
    contents: &BTreeMap<String, GateTemplateSpec>,
    recorded: &[ResolvedGate],
    rolling_out: bool,
    copies: &[CopyObs],
    deleting: bool,
) -> CopyIntents {
    let mut out = CopyIntents::default();
    if deleting {
        return out;
    }
    let mut wanted: Vec<&String> = recorded
        .iter()
        .filter_map(|g| g.content_hash.as_ref())
        .collect();
    if rolling_out {
        wanted.extend(contents.keys());
    }
    for hash in &wanted {
        let exists = copies.iter().any(|c| &c.hash == *hash);
        let planned = out.create.iter().any(|c| &c.hash == *hash);
        if let (false, false, Some(content)) = (exists, planned, contents.get(*hash)) {
            out.create.push(CopyIntent {
                name: crate::api::template::copy_name(plan, hash),
                hash: (*hash).clone(),
                content: content.clone(),
            });
        }
    }
    out.delete = copies
        .iter()
        .filter(|c| !wanted.contains(&&c.hash))
        .map(|c| c.name.clone())
        .collect();
    out
}

/// The concrete gate a reference makes of a template's content: arguments
/// checked against the parameters, `{{args.NAME}}` replaced, the gate named
/// by the reference and parsed as a plan's own gate would be.
pub fn instantiate(r: &GateTemplateRef, t: &GateTemplateSpec) -> Result<TemplateGate, String> {
    let names: Vec<&str> = t.parameters.iter().map(|p| p.name.as_str()).collect();
    if let Some(unknown) = r.args.keys().find(|k| !names.contains(&k.as_str())) {
        return Err(format!(
            "argument {unknown} is not a parameter of the template (parameters: {})",
            list(&names)
        ));
    }
    let mut values = BTreeMap::new();
    for p in &t.parameters {
        match r.args.get(&p.name).or(p.default.as_ref()) {
            Some(v) => {
                values.insert(p.name.as_str(), v.as_str());
            }
            None => {
                return Err(format!(
                    "argument {} is required (it has no default)",
                    p.name
                ));
            }
        }
    }
    match (&t.prometheus, &t.webhook, &t.job, &t.analysis) {
        (None, None, None, Some(a)) => analysis_of(r, a, &values),
        (Some(p), None, None, None) => {
            let mut g = p.clone();
            g.name.clone_from(&r.name);
            g.component.clone_from(&r.component);
            g.check.query = substitute(&g.check.query, &values)
                .map_err(|e| format!("prometheus.query: {e}"))?;
            g.check.address = substitute(&g.check.address, &values)
                .map_err(|e| format!("prometheus.address: {e}"))?;
            check_url("prometheus.address", &g.check.address, 512)?;
            if g.check.query.is_empty() || g.check.query.chars().count() > 4096 {
                return Err(
                    "prometheus.query: must hold 1 to 4096 characters once its arguments are in"
                        .into(),
                );
            }
            prometheus::PrometheusSpec::parse(&g)
                .map(|p| TemplateGate::Runner(GateSpec::Prometheus(p)))
                .map_err(|(field, message)| format!("prometheus.{field}: {message}"))
        }
        (None, Some(w), None, None) => {
            let mut g = w.clone();
            g.name.clone_from(&r.name);
            g.component.clone_from(&r.component);
            g.check.url =
                substitute(&g.check.url, &values).map_err(|e| format!("webhook.url: {e}"))?;
            check_url("webhook.url", &g.check.url, 1024)?;
            Ok(TemplateGate::Runner(GateSpec::Webhook(
                webhook::WebhookSpec::parse(&g),
            )))
        }
        (None, None, Some(j), None) => {
            let mut g = j.clone();
            g.name.clone_from(&r.name);
            g.component.clone_from(&r.component);
            // A cluster template's Job runs with what its administrator gave
            // it: a plan chooses its image or command only through the
            // parameters that say so.
            let code: BTreeMap<&str, &str> = values
                .iter()
                .filter(|(name, _)| {
                    r.template_ref.kind != TemplateKind::ClusterGateTemplate
                        || t.parameters
                            .iter()
                            .any(|p| p.name == **name && p.in_image_or_command)
                })
                .map(|(k, v)| (*k, *v))
                .collect();
            g.check.template = substitute_job(&g.check.template, &values, &code)?;
            JobGateSpec::parse(&g)
                .map(TemplateGate::Job)
                .map_err(|(field, message)| format!("job.{field}: {message}"))
        }
        _ => Err(
            "the template must hold exactly one gate (prometheus, webhook, job or analysis)".into(),
        ),
    }
}

/// The analysis gate a reference makes of a template's `analysis`:
/// `{{args.NAME}}` replaced in the address and every metric's queries.
fn analysis_of(
    r: &GateTemplateRef,
    a: &crate::api::analysis::TemplateAnalysis,
    values: &BTreeMap<&str, &str>,
) -> Result<TemplateGate, String> {
    let mut check = a.check.clone();
    check.address =
        substitute(&check.address, values).map_err(|e| format!("analysis.address: {e}"))?;
    check_url("analysis.address", &check.address, 512)?;
    for m in &mut check.metrics {
        for (field, q) in [
            ("query", &mut m.query),
            ("failed", &mut m.failed),
            ("total", &mut m.total),
        ] {
            if let Some(q) = q.as_mut() {
                *q = substitute(q, values)
                    .map_err(|e| format!("analysis.metrics[{}].{field}: {e}", m.name))?;
                if q.is_empty() || q.chars().count() > 4096 {
                    return Err(format!(
                        "analysis.metrics[{}].{field}: must hold 1 to 4096 characters once its arguments are in",
                        m.name
                    ));
                }
            }
        }
    }
    let gate = crate::api::analysis::AnalysisGate {
        name: r.name.clone(),
        check,
        auth: a.auth.clone(),
        headers: a.headers.clone(),
        tls: a.tls.clone(),
        component: r.component.clone(),
    };
    super::analysis::AnalysisSpec::parse(&gate)
        .map(|s| TemplateGate::Runner(GateSpec::Analysis(s)))
        .map_err(|(field, message)| format!("analysis.{field}: {message}"))
}

/// The fields of a Job gate's containers where `{{args.NAME}}` is replaced:
/// what a smoke or load test is told (which image, what to call, with which
/// settings). Nowhere else: an argument must not reach the pod's service
/// account, volumes, security context or the Job's labels, which the
/// template's author fixes.
const JOB_ARG_FIELDS: &str = "containers' and initContainers' image, command, args and env[].value";

/// A Job gate's template with `{{args.NAME}}` replaced in [`JOB_ARG_FIELDS`];
/// a placeholder anywhere else is an error (it would reach the Job as
/// written), and so is an image an argument left empty or with spaces.
/// `code` are the values an image or a command may take (a cluster
/// template's parameters that declare `inImageOrCommand`).
fn substitute_job(
    template: &Value,
    values: &BTreeMap<&str, &str>,
    code: &BTreeMap<&str, &str>,
) -> Result<Value, String> {
    // Placeholders outside the fields, looked for before any argument is in
    // (an argument's value is not read as a placeholder).
    let mut rest = template.clone();
    for_each_arg_field(&mut rest, |v, _, _| {
        *v = Value::Null;
        Ok(())
    })?;
    if let Some(path) = find_placeholder(&rest, "job.template") {
        return Err(format!(
            "{path}: {{{{args.NAME}}}} is replaced only in the {JOB_ARG_FIELDS}"
        ));
    }
    let mut out = template.clone();
    for_each_arg_field(&mut out, |v, at, is_image| {
        if let Value::String(s) = v {
            let sets_code = is_image || at.contains(".command[");
            let allowed = if sets_code { code } else { values };
            *s = substitute(s, allowed).map_err(|e| {
                if sets_code && substitute(s, values).is_ok() {
                    format!(
                        "{at}: an argument sets the Job's image or command only through a parameter that declares inImageOrCommand: true (the Job runs with what the ClusterGateTemplate's administrator gave it)"
                    )
                } else {
                    format!("{at}: {e}")
                }
            })?;
            if is_image && (s.is_empty() || s.contains(char::is_whitespace)) {
                return Err(format!(
                    "{at}: {s:?} is not an image reference without spaces once its arguments are in"
                ));
            }
        }
        Ok(())
    })?;
    Ok(out)
}

/// Calls `f` on each of [`JOB_ARG_FIELDS`] of a Job template, with its path
/// and whether it is an image.
fn for_each_arg_field(
    template: &mut Value,
    mut f: impl FnMut(&mut Value, &str, bool) -> Result<(), String>,
) -> Result<(), String> {
    for list in ["containers", "initContainers"] {
        let Some(containers) = template
            .pointer_mut(&format!("/spec/template/spec/{list}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for (i, c) in containers.iter_mut().enumerate() {
            let at = format!("job.template.spec.template.spec.{list}[{i}]");
            if let Some(image) = c.get_mut("image") {
                f(image, &format!("{at}.image"), true)?;
            }
            for field in ["command", "args"] {
                if let Some(items) = c.get_mut(field).and_then(Value::as_array_mut) {
                    for (k, item) in items.iter_mut().enumerate() {
                        f(item, &format!("{at}.{field}[{k}]"), false)?;
                    }
                }
            }
            if let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) {
                for (k, var) in env.iter_mut().enumerate() {
                    if let Some(v) = var.get_mut("value") {
                        f(v, &format!("{at}.env[{k}].value"), false)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The path of the first string (or object key) still holding an
/// `{{args.` placeholder.
fn find_placeholder(v: &Value, at: &str) -> Option<String> {
    match v {
        Value::String(s) => has_arg_placeholder(s).then(|| at.to_string()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| find_placeholder(item, &format!("{at}[{i}]"))),
        Value::Object(map) => map.iter().find_map(|(k, item)| {
            let here = format!("{at}.{k}");
            if has_arg_placeholder(k) {
                Some(here)
            } else {
                find_placeholder(item, &here)
            }
        }),
        _ => None,
    }
}

/// `{{ args.` with any spaces inside the braces, as [`substitute`] reads it.
fn has_arg_placeholder(s: &str) -> bool {
    let mut rest = s;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        if after.trim_start().starts_with("args.") && after.contains("}}") {
            return true;
        }
        rest = after;
    }
    false
}

fn list(names: &[&str]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// An http(s) URL without spaces, as the CRD asks of a plan's own gates: an
/// argument could have broken it.
fn check_url(field: &str, url: &str, max: usize) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && !r.contains(char::is_whitespace) && url.len() <= max => Ok(()),
        _ => Err(format!(
            "{field}: {url:?} is not an http:// or https:// URL without spaces of at most {max} characters once its arguments are in"
        )),
    }
}

/// Replaces every `{{args.NAME}}` (spaces inside the braces allowed) with the
/// argument's value; an argument that is not a parameter is an error. Other
/// `{{...}}` (`{{revision}}`...) are left for the gate runner.
pub fn substitute(text: &str, values: &BTreeMap<&str, &str>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let inner = after[..end].trim();
        match inner.strip_prefix("args.") {
            Some(name) => match values.get(name) {
                Some(v) => out.push_str(v),
                None => {
                    return Err(format!(
                        "{{{{args.{name}}}}} names no parameter of the template"
                    ));
                }
            },
            None => out.push_str(&rest[start..start + 2 + end + 2]),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::template::{Parameter, TemplateRef};
    use crate::api::{
        JobCheck, JobGate, PrometheusCheck, PrometheusGate, WebhookCheck, WebhookGate,
    };
    use serde_json::json;

    fn hook_template(url: &str, params: &[(&str, Option<&str>)]) -> GateTemplateSpec {
        GateTemplateSpec {
            parameters: params
                .iter()
                .map(|(n, d)| Parameter {
                    name: (*n).into(),
                    default: d.map(Into::into),
                    description: None,
                    in_image_or_command: false,
                })
                .collect(),
            webhook: Some(WebhookGate {
                name: "template-name".into(),
                check: WebhookCheck {
                    url: url.into(),
                    ..Default::default()
                },
                ..Default::default()
            }),
            prometheus: None,
            job: None,
            analysis: None,
        }
    }

    fn observed(name: &str, generation: i64, spec: GateTemplateSpec) -> ObservedTemplate {
        ObservedTemplate {
            kind: TemplateKind::ClusterGateTemplate,
            name: name.into(),
            generation: Some(generation),
            spec,
            lists_namespace: false,
        }
    }

    fn reference(name: &str, template: &str, args: &[(&str, &str)]) -> GateTemplateRef {
        GateTemplateRef {
            name: name.into(),
            template_ref: TemplateRef {
                kind: TemplateKind::ClusterGateTemplate,
                name: template.into(),
            },
            args: args
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            component: None,
        }
    }

    fn rolling(rollout: i64, step: i32) -> ReleasePlanStatus {
        ReleasePlanStatus {
            phase: Phase::RollingOut,
            rollout_count: rollout,
            current_step: step,
            ..Default::default()
        }
    }

    fn url_of(g: &TemplateGate) -> &str {
        match g {
            TemplateGate::Runner(g) => g.url(),
            TemplateGate::Job(j) => &j.name,
        }
    }

    #[test]
    fn args_and_defaults_are_substituted_and_the_reference_names_the_gate() {
        let t = observed(
            "smoke",
            1,
            hook_template(
                "http://127.0.0.1:9/{{ args.service }}/{{args.region}}?r={{revision}}",
                &[("service", None), ("region", Some("eu"))],
            ),
        );
        let r = reference("smoke-checkout", "smoke", &[("service", "checkout")]);
        let res = resolve(&[r], &rolling(1, 0), &[t]);
        assert!(res.problems.is_empty(), "{:?}", res.problems);
        let g = &res.gates[0];
        assert_eq!(g.gate.name(), "smoke-checkout");
        assert_eq!(
            url_of(&g.gate),
            "http://127.0.0.1:9/checkout/eu?r={{revision}}"
        );
        assert_eq!(g.record.template_generation, Some(1));
        assert_eq!((g.record.rollout, g.record.step), (1, 0));
    }

    #[test]
    fn a_missing_template_is_a_problem_naming_it() {
        let r = reference("smoke", "nowhere", &[]);
        let res = resolve(&[r], &rolling(1, 0), &[]);
        assert!(res.gates.is_empty());
        assert_eq!(res.problems[0].kind, ProblemKind::NotFound);
        assert_eq!(
            res.problems[0].message,
            "gate smoke: ClusterGateTemplate nowhere not found"
        );
    }

    #[test]
    fn missing_and_unknown_arguments_are_problems() {
        let t = observed(
            "smoke",
            1,
            hook_template("http://h/{{args.service}}", &[("service", None)]),
        );
        let res = resolve(
            &[reference("a", "smoke", &[])],
            &rolling(1, 0),
            std::slice::from_ref(&t),
        );
        assert_eq!(res.problems[0].kind, ProblemKind::Invalid);
        assert!(
            res.problems[0]
                .message
                .contains("argument service is required"),
            "{:?}",
            res.problems
        );
        let res = resolve(
            &[reference("a", "smoke", &[("service", "x"), ("extra", "y")])],
            &rolling(1, 0),
            &[t],
        );
        assert!(
            res.problems[0].message.contains(
                "argument extra is not a parameter of the template (parameters: service)"
            ),
            "{:?}",
            res.problems
        );
    }

    #[test]
    fn a_placeholder_without_parameter_is_a_problem() {
        let t = observed("smoke", 1, hook_template("http://h/{{args.nope}}", &[]));
        let res = resolve(&[reference("a", "smoke", &[])], &rolling(1, 0), &[t]);
        assert!(
            res.problems[0]
                .message
                .contains("webhook.url: {{args.nope}} names no parameter"),
            "{:?}",
            res.problems
        );
    }

    #[test]
    fn an_argument_that_breaks_the_url_is_a_problem() {
        let t = observed(
            "smoke",
            1,
            hook_template("http://h/{{args.p}}", &[("p", None)]),
        );
        let res = resolve(
            &[reference("a", "smoke", &[("p", "a b")])],
            &rolling(1, 0),
            &[t],
        );
        assert!(
            res.problems[0]
                .message
                .contains("not an http:// or https://"),
            "{:?}",
            res.problems
        );
    }

    #[test]
    fn the_record_of_the_running_step_wins_over_an_edited_template() {
        let r = reference("a", "smoke", &[]);
        let first = resolve(
            std::slice::from_ref(&r),
            &rolling(2, 1),
            &[observed("smoke", 1, hook_template("http://old/", &[]))],
        );
        let mut status = rolling(2, 1);
        let record = first.gates[0].record.clone();
        status.resolved_gates = vec![record.clone()];
        let edited = [observed("smoke", 2, hook_template("http://new/", &[]))];
        let hash = record.content_hash.clone().unwrap();
        let copies = BTreeMap::from([(hash.clone(), first.gates[0].content.clone())]);
        let with_copy = |observed: &[ObservedTemplate]| {
            resolve_with(
                std::slice::from_ref(&r),
                &status,
                &Inputs {
                    observed,
                    copies: &copies,
                    pod_security: Level::default(),
                },
            )
        };
        // Same step: the record's content from the copy, even with the template gone.
        let same = with_copy(&edited);
        assert_eq!(url_of(&same.gates[0].gate), "http://old/");
        assert_eq!(same.gates[0].record.template_generation, Some(1));
        assert_eq!(same.gates[0].record.content_hash.as_ref(), Some(&hash));
        assert_eq!(url_of(&with_copy(&[]).gates[0].gate), "http://old/");
        // No copy yet (its watch event not in): the template still has the
        // recorded content.
        let unchanged = [observed("smoke", 1, hook_template("http://old/", &[]))];
        let same = resolve(std::slice::from_ref(&r), &status, &unchanged);
        assert_eq!(url_of(&same.gates[0].gate), "http://old/");
        // The copy deleted and the template changed: read anew.
        assert_eq!(
            url_of(&resolve(std::slice::from_ref(&r), &status, &edited).gates[0].gate),
            "http://new/"
        );
        // A record an operator before 0.2.0 wrote holds the content itself:
        // read as before, recorded in the new shape.
        let mut old_shape = record.clone();
        old_shape.content_hash = None;
        old_shape.template = Some(first.gates[0].content.clone());
        let mut upgraded = status.clone();
        upgraded.resolved_gates = vec![old_shape];
        let same = resolve(std::slice::from_ref(&r), &upgraded, &edited);
        assert_eq!(url_of(&same.gates[0].gate), "http://old/");
        assert_eq!(same.gates[0].record, record, "recorded without the content");
        assert_eq!(same.gates[0].content, first.gates[0].content);
        // The next step, the next rollout, or another reference: read anew.
        let mut next = status.clone();
        next.current_step = 2;
        assert_eq!(
            url_of(&resolve(std::slice::from_ref(&r), &next, &edited).gates[0].gate),
            "http://new/"
        );
        let mut later = status.clone();
        later.rollout_count = 3;
        assert_eq!(
            url_of(&resolve(std::slice::from_ref(&r), &later, &edited).gates[0].gate),
            "http://new/"
        );
        let mut other = r.clone();
        other.component = Some("web".into());
        assert_eq!(
            url_of(&resolve(&[other], &status, &edited).gates[0].gate),
            "http://new/"
        );
        // Not rolling out: nothing recorded counts.
        let mut settled = status;
        settled.phase = Phase::Stable;
        assert_eq!(
            url_of(&resolve(&[r], &settled, &edited).gates[0].gate),
            "http://new/"
        );
    }

    #[test]
    fn a_prometheus_template_is_parsed_like_a_plan_gate() {
        let spec = GateTemplateSpec {
            parameters: vec![Parameter {
                name: "job".into(),
                default: Some("api".into()),
                description: None,
                in_image_or_command: false,
            }],
            prometheus: Some(PrometheusGate {
                name: "x".into(),
                check: PrometheusCheck {
                    address: "http://127.0.0.1:9090".into(),
                    query: r#"up{job="{{args.job}}",rev="{{revision}}"}"#.into(),
                    threshold: "> 0".into(),
                    ..Default::default()
                },
                ..Default::default()
            }),
            webhook: None,
            job: None,
            analysis: None,
        };
        let mut r = reference("up", "up", &[]);
        r.component = Some("api".into());
        let g = instantiate(&r, &spec).unwrap();
        let TemplateGate::Runner(GateSpec::Prometheus(p)) = g else {
            panic!("not prometheus")
        };
        assert_eq!(p.query, r#"up{job="api",rev="{{revision}}"}"#);
        assert_eq!(p.name, "up");
        let mut bad = spec.clone();
        bad.prometheus.as_mut().unwrap().check.threshold = "about 3".into();
        assert!(
            instantiate(&r, &bad)
                .unwrap_err()
                .starts_with("prometheus.threshold")
        );
        let mut neither = spec;
        neither.prometheus = None;
        assert!(
            instantiate(&r, &neither)
                .unwrap_err()
                .contains("exactly one gate")
        );
    }

    #[test]
    fn an_analysis_template_is_parsed_like_a_plan_gate_with_its_queries_filled_in() {
        let spec: GateTemplateSpec = serde_json::from_value(serde_json::json!({
            "parameters": [{"name": "service"}, {"name": "prom", "default": "http://127.0.0.1:9090"}],
            "analysis": {
                "address": "{{args.prom}}",
                "lookback": "2m",
                "metrics": [
                    {"name": "latency", "query": "avg(rate(x{svc=\"{{args.service}}\",revision=\"{{revision}}\"}[{{sampleInterval}}]))"},
                    {"name": "errors", "failed": "sum(increase(e{svc=\"{{args.service}}\"}[{{window}}]))",
                     "total": "sum(increase(t{svc=\"{{args.service}}\"}[{{window}}]))", "critical": true}
                ]
            }
        }))
        .unwrap();
        let mut r = reference("judge", "judge", &[("service", "shop")]);
        r.component = Some("web".into());
        let TemplateGate::Runner(GateSpec::Analysis(a)) = instantiate(&r, &spec).unwrap() else {
            panic!("not an analysis")
        };
        assert_eq!(
            (a.name.as_str(), a.address.as_str()),
            ("judge", "http://127.0.0.1:9090")
        );
        assert_eq!(a.lookback, std::time::Duration::from_secs(120));
        let super::super::analysis::Queries::Values(q) = &a.metrics[0].queries else {
            panic!("a values metric")
        };
        assert_eq!(
            q, r#"avg(rate(x{svc="shop",revision="{{revision}}"}[{{sampleInterval}}]))"#,
            "the template's arguments in, the judge's placeholders kept"
        );
        assert!(a.metrics[1].metric.critical);
        // A missing argument names the parameter; a bad setting its field.
        let bare = reference("judge", "judge", &[]);
        assert!(
            instantiate(&bare, &spec)
                .unwrap_err()
                .contains("argument service is required")
        );
        let mut bad = spec;
        bad.analysis.as_mut().unwrap().check.significance = Some("0%".into());
        assert_eq!(
            instantiate(&r, &bad).unwrap_err(),
            "analysis.significance: 0% is not a percentage between 0 and 100"
        );
    }

    /// A Job template: `{{args.*}}` in image, command, args and env values.
    fn job_template(template: serde_json::Value) -> GateTemplateSpec {
        GateTemplateSpec {
            parameters: ["target", "tag", "rps"]
                .iter()
                .map(|n| Parameter {
                    name: (*n).into(),
                    default: (*n == "rps").then(|| "10".into()),
                    description: None,
                    // An administrator's template that lets plans pick them.
                    in_image_or_command: true,
                })
                .collect(),
            job: Some(JobGate {
                name: "template-name".into(),
                check: JobCheck {
                    template,
                    timeout_seconds: Some(90),
                },
                component: None,
            }),
            ..Default::default()
        }
    }

    fn load_test() -> serde_json::Value {
        json!({
            "metadata": {"labels": {"team": "qa"}},
            "spec": {"template": {"spec": {
                "initContainers": [{"name": "wait", "image": "busybox:{{args.tag}}",
                    "command": ["sh", "-c", "until nc -z {{ args.target }} 80; do sleep 1; done"]}],
                "containers": [{"name": "hey", "image": "loadtest:{{args.tag}}",
                    "args": ["-q", "{{args.rps}}", "http://{{args.target}}/"],
                    "env": [{"name": "TARGET", "value": "{{args.target}}"},
                            {"name": "FROM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]
            }}}
        })
    }

    #[test]
    fn a_cluster_templates_job_takes_an_image_or_command_only_from_declared_parameters() {
        let mut r = reference("load", "load", &[("target", "web.shop"), ("tag", "1.2")]);
        r.template_ref.kind = TemplateKind::ClusterGateTemplate;
        let mut undeclared = job_template(load_test());
        for p in &mut undeclared.parameters {
            p.in_image_or_command = false;
        }
        let e = instantiate(&r, &undeclared).unwrap_err();
        assert!(
            e.starts_with("job.template.spec.template.spec.containers[0].image: an argument sets the Job's image or command only through a parameter that declares inImageOrCommand: true"),
            "{e}"
        );
        // Declared: the image and the command take them; args and env
        // values never needed it.
        let mut t = job_template(load_test());
        for p in &mut t.parameters {
            p.in_image_or_command = p.name == "tag" || p.name == "target";
        }
        assert!(instantiate(&r, &t).is_ok());
        for p in &mut t.parameters {
            p.in_image_or_command = p.name == "tag";
        }
        let e = instantiate(&r, &t).unwrap_err();
        assert!(e.contains("initContainers[0].command[2]"), "{e}");
        // A namespace's own GateTemplate needs no declaration.
        r.template_ref.kind = TemplateKind::GateTemplate;
        assert!(instantiate(&r, &undeclared).is_ok());
    }

    #[test]
    fn a_job_template_becomes_a_job_gate_with_its_args_in_the_containers() {
        let mut r = reference("load", "load", &[("target", "web.shop"), ("tag", "1.2")]);
        r.component = Some("web".into());
        let g = instantiate(&r, &job_template(load_test())).unwrap();
        let TemplateGate::Job(j) = g else {
            panic!("not a Job gate: {g:?}")
        };
        assert_eq!(j.name, "load");
        assert_eq!(j.component.as_deref(), Some("web"));
        assert_eq!(j.timeout, std::time::Duration::from_secs(90));
        let pod = j.template.spec.unwrap().template.spec.unwrap();
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some("loadtest:1.2"));
        assert_eq!(c.args.as_deref().unwrap(), ["-q", "10", "http://web.shop/"]);
        let env = c.env.as_deref().unwrap();
        assert_eq!(env[0].value.as_deref(), Some("web.shop"));
        assert!(env[1].value_from.is_some());
        let init = &pod.init_containers.as_deref().unwrap()[0];
        assert_eq!(init.image.as_deref(), Some("busybox:1.2"));
        assert_eq!(
            init.command.as_deref().unwrap()[2],
            "until nc -z web.shop 80; do sleep 1; done"
        );
    }

    #[test]
    fn a_job_template_resolves_onto_the_job_path_and_is_recorded() {
        let t = ObservedTemplate {
            kind: TemplateKind::GateTemplate,
            name: "load".into(),
            generation: Some(4),
            spec: job_template(load_test()),
            lists_namespace: false,
        };
        let mut r = reference("load", "load", &[("target", "web"), ("tag", "1")]);
        r.template_ref.kind = TemplateKind::GateTemplate;
        let res = resolve(std::slice::from_ref(&r), &rolling(3, 1), &[t]);
        assert!(res.problems.is_empty(), "{:?}", res.problems);
        assert!(matches!(res.gates[0].gate, TemplateGate::Job(_)));
        assert_eq!(res.gates[0].gate.name(), "load");
        let record = &res.gates[0].record;
        assert_eq!(record.template_generation, Some(4));
        assert!(record.template.is_none(), "no content in status");
        assert!(
            res.gates[0].content.job.is_some(),
            "the Job template is kept"
        );
        // The record keeps the gate for the step with the template gone,
        // its content from the plan's copy.
        let mut status = rolling(3, 1);
        status.resolved_gates = vec![record.clone()];
        let copies = BTreeMap::from([(
            record.content_hash.clone().unwrap(),
            res.gates[0].content.clone(),
        )]);
        let inputs = Inputs {
            observed: &[],
            copies: &copies,
            pod_security: Level::default(),
        };
        let again = resolve_with(&[r], &status, &inputs);
        assert_eq!(again.gates, res.gates);
    }

    #[test]
    fn a_cluster_templates_service_account_serves_only_the_namespaces_it_lists() {
        let mut t = load_test();
        t["spec"]["template"]["spec"]["serviceAccountName"] = json!("load-runner");
        let observed = |kind, lists_namespace, t: &serde_json::Value| ObservedTemplate {
            kind,
            name: "load".into(),
            generation: Some(1),
            spec: job_template(t.clone()),
            lists_namespace,
        };
        let mut r = reference("load", "load", &[("target", "web"), ("tag", "1")]);
        r.template_ref.kind = TemplateKind::ClusterGateTemplate;
        let refs = std::slice::from_ref(&r);
        let res = resolve(
            refs,
            &rolling(3, 1),
            &[observed(TemplateKind::ClusterGateTemplate, false, &t)],
        );
        assert!(res.gates.is_empty());
        assert_eq!(res.problems[0].kind, ProblemKind::Invalid);
        assert_eq!(
            res.problems[0].message,
            "gate load: ClusterGateTemplate load: job.template.spec.template.spec.serviceAccountName: the Job of a ClusterGateTemplate runs as its service account \"load-runner\" only in the namespaces its annotation releaseplan.io/gate-namespaces lists by name, and it does not list this one"
        );
        let res = resolve(
            refs,
            &rolling(3, 1),
            &[observed(TemplateKind::ClusterGateTemplate, true, &t)],
        );
        assert!(res.problems.is_empty(), "{:?}", res.problems);
        // The namespace's own default, and a tenant's GateTemplate (its
        // service accounts are the namespace's), need no listing.
        t["spec"]["template"]["spec"]["serviceAccountName"] = json!("default");
        let res = resolve(
            refs,
            &rolling(3, 1),
            &[observed(TemplateKind::ClusterGateTemplate, false, &t)],
        );
        assert!(res.problems.is_empty(), "{:?}", res.problems);
        t["spec"]["template"]["spec"]["serviceAccount"] = json!("old-style");
        let res = resolve(
            refs,
            &rolling(3, 1),
            &[observed(TemplateKind::ClusterGateTemplate, false, &t)],
        );
        assert!(
            res.problems[0].message.contains("spec.serviceAccount: "),
            "{:?}",
            res.problems
        );
        r.template_ref.kind = TemplateKind::GateTemplate;
        let res = resolve(
            &[r],
            &rolling(3, 1),
            &[observed(TemplateKind::GateTemplate, false, &t)],
        );
        assert!(res.problems.is_empty(), "{:?}", res.problems);
        let listed = |v: &str| {
            BTreeMap::from([(
                crate::api::access::ANNOTATION_GATE_NAMESPACES.to_string(),
                v.to_string(),
            )])
        };
        assert!(lists_namespace(Some(&listed("a, shop")), "shop"));
        assert!(!lists_namespace(Some(&listed("*")), "shop"));
        assert!(!lists_namespace(None, "shop"));
    }

    #[test]
    fn a_tenants_job_template_gets_the_restricted_defaults_and_its_level() {
        let t = ObservedTemplate {
            kind: TemplateKind::GateTemplate,
            name: "load".into(),
            generation: Some(1),
            spec: job_template(load_test()),
            lists_namespace: false,
        };
        let mut r = reference("load", "load", &[("target", "web"), ("tag", "1")]);
        r.template_ref.kind = TemplateKind::GateTemplate;
        let at = |level, t: &ObservedTemplate| {
            resolve_with(
                std::slice::from_ref(&r),
                &rolling(3, 1),
                &Inputs {
                    observed: std::slice::from_ref(t),
                    copies: &BTreeMap::new(),
                    pod_security: level,
                },
            )
        };
        let res = at(Level::Restricted, &t);
        let TemplateGate::Job(j) = &res.gates[0].gate else {
            panic!("not a Job gate")
        };
        let pod = j
            .template
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap();
        let sc = pod.containers[0].security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(
            pod.security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
        // The copy keeps the template as written, not the filled pod.
        assert_eq!(res.gates[0].content, t.spec);
        let mut root = t.clone();
        root.spec.job.as_mut().unwrap().check.template["spec"]["template"]["spec"]["securityContext"] =
            json!({"runAsUser": 0});
        let res = at(Level::Restricted, &root);
        assert!(
            res.problems[0].message.contains("job.template.spec.template.spec.securityContext.runAsUser: running as root (user 0) is not allowed in a Job gate's pod: plans' and GateTemplates' Job gates run at the restricted Pod Security Standard"),
            "{:?}",
            res.problems
        );
        let res = at(Level::Baseline, &root);
        assert!(res.problems.is_empty(), "{:?}", res.problems);
    }

    #[test]
    fn copies_are_made_for_what_status_records_and_pruned_after() {
        let content = hook_template("http://h/", &[]);
        let hash = content_hash(&content);
        let contents = BTreeMap::from([(hash.clone(), content.clone())]);
        let record = ResolvedGate {
            content_hash: Some(hash.clone()),
            ..ResolvedGate::default()
        };
        let recorded = std::slice::from_ref(&record);
        let name = crate::api::template::copy_name("shop", &hash);
        assert_eq!(name, format!("shop-gate-template-{hash}"));
        // Recorded, no copy yet: created once, with the content.
        let out = copy_intents("shop", &contents, recorded, true, &[], false);
        assert_eq!(out.create.len(), 1);
        assert_eq!(out.create[0].name, name);
        assert_eq!(out.create[0].content, content);
        assert!(out.delete.is_empty());
        let mine = CopyObs {
            name: name.clone(),
            hash: hash.clone(),
        };
        let stale = CopyObs {
            name: "shop-gate-template-old".into(),
            hash: "old".into(),
        };
        let both = [mine.clone(), stale.clone()];
        let out = copy_intents("shop", &contents, recorded, true, &both, false);
        assert!(out.create.is_empty());
        assert_eq!(out.delete, vec![stale.name.clone()]);
        // Between steps (nothing recorded) the content resolved now is kept.
        let out = copy_intents("shop", &contents, &[], true, &both, false);
        assert_eq!(out.delete, vec![stale.name.clone()]);
        // Settled: every copy goes; deleted plan: owner references do it.
        let out = copy_intents("shop", &contents, &[], false, &both, false);
        assert_eq!(out.delete, vec![name, stale.name.clone()]);
        let out = copy_intents("shop", &contents, recorded, true, &[stale], true);
        assert_eq!(out, CopyIntents::default());
        let long = "p".repeat(253);
        assert_eq!(crate::api::template::copy_name(&long, &hash).len(), 253);
    }

    #[test]
    fn a_tenants_job_template_meets_the_baseline_pod_security_an_administrators_need_not() {
        let mut t = load_test();
        t["spec"]["template"]["spec"]["hostNetwork"] = json!(true);
        let observed = |kind| ObservedTemplate {
            kind,
            name: "load".into(),
            generation: Some(1),
            spec: job_template(t.clone()),
            lists_namespace: false,
        };
        let mut r = reference("load", "load", &[("target", "web"), ("tag", "1")]);
        r.template_ref.kind = TemplateKind::GateTemplate;
        let res = resolve(
            std::slice::from_ref(&r),
            &rolling(3, 1),
            &[observed(TemplateKind::GateTemplate)],
        );
        assert!(res.gates.is_empty());
        assert_eq!(res.problems[0].kind, ProblemKind::Invalid);
        assert!(
            res.problems[0]
                .message
                .contains("job.template.spec.template.spec.hostNetwork: the node's network namespace is not allowed in a Job gate's pod"),
            "{}",
            res.problems[0].message
        );
        r.template_ref.kind = TemplateKind::ClusterGateTemplate;
        let res = resolve(
            &[r],
            &rolling(3, 1),
            &[observed(TemplateKind::ClusterGateTemplate)],
        );
        assert!(res.problems.is_empty(), "{:?}", res.problems);
    }

    #[test]
    fn a_job_template_refuses_placeholders_outside_the_container_fields() {
        let r = reference("load", "load", &[("target", "web"), ("tag", "1")]);
        let mut t = load_test();
        t["spec"]["template"]["spec"]["serviceAccountName"] = json!("{{args.target}}");
        let e = instantiate(&r, &job_template(t)).unwrap_err();
        assert_eq!(
            e,
            "job.template.spec.template.spec.serviceAccountName: {{args.NAME}} is replaced only in the containers' and initContainers' image, command, args and env[].value"
        );
        let mut t = load_test();
        t["metadata"]["labels"]["target"] = json!("{{ args.target }}");
        let e = instantiate(&r, &job_template(t)).unwrap_err();
        assert!(e.starts_with("job.template.metadata.labels.target:"), "{e}");
        // An argument's value is not read as a placeholder.
        let r = reference("load", "load", &[("target", "{{args.tag}}"), ("tag", "1")]);
        assert!(instantiate(&r, &job_template(load_test())).is_ok());
    }

    #[test]
    fn a_job_template_with_a_bad_argument_or_placeholder_is_a_problem() {
        let r = reference("load", "load", &[("target", "web"), ("tag", "1 2")]);
        let e = instantiate(&r, &job_template(load_test())).unwrap_err();
        assert!(
            e.starts_with("job.template.spec.template.spec.containers[0].image: \"loadtest:1 2\" is not an image reference"),
            "{e}"
        );
        let mut t = load_test();
        t["spec"]["template"]["spec"]["containers"][0]["args"][0] = json!("{{args.nope}}");
        let r = reference("load", "load", &[("target", "web"), ("tag", "1")]);
        let e = instantiate(&r, &job_template(t)).unwrap_err();
        assert_eq!(
            e,
            "job.template.spec.template.spec.containers[0].args[0]: {{args.nope}} names no parameter of the template"
        );
        // Parsed as a plan's own Job gate: its rules hold.
        let mut t = load_test();
        t["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        let e = instantiate(&r, &job_template(t)).unwrap_err();
        assert!(
            e.starts_with(
                "job.template.spec.template.spec.restartPolicy: must be Never or OnFailure"
            ),
            "{e}"
        );
        // Two kinds at once: not a gate.
        let mut two = job_template(load_test());
        two.webhook = hook_template("http://h/", &[]).webhook;
        assert!(
            instantiate(&r, &two)
                .unwrap_err()
                .contains("exactly one gate")
        );
    }
}
