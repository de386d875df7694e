//! The offline checks of `lint`: a plan file against the CRD's structural
//! schema (types, unknown and required fields, bounds), then the CRD's CEL
//! rules (`x-kubernetes-validations`, evaluated by kube-cel as the API
//! server evaluates them, defaults applied first), then through serde into
//! the typed spec, then the operator's own `check_spec`. The same order as
//! the API server and the operator, so a file that passes here fails only on
//! what needs a cluster (admission webhooks and policies, quotas): the
//! server-side dry run that `run` adds covers those when a cluster is
//! reachable. tests/it/admission.rs checks that lint refuses every plan the
//! API server refuses, and accepts the ones it accepts.

use super::connect::{Ctx, Global};
use super::error::{CliError, chain};
use super::wait::EXIT_ERROR;
use crate::api::ReleasePlan;
use crate::plan::spec::check_spec;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::Value;
use std::path::PathBuf;

/// One problem, at a field path like `spec.components[0].replicas`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where: a JSON path from the object's root.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn problem(field: &str, message: impl Into<String>) -> Problem {
    Problem {
        field: field.to_string(),
        message: message.into(),
    }
}

/// The served version's OpenAPI schema of the ReleasePlan CRD, as JSON;
/// built once (generating the CRD takes longer than checking a plan).
fn crd_schema() -> &'static Value {
    static SCHEMA: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(build_crd_schema)
}

fn build_crd_schema() -> Value {
    let crd = crate::api::crd();
    crd.spec
        .versions
        .iter()
        .find(|v| v.served && v.storage)
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_fits(v: &Value, wanted: &str, schema: &Value) -> bool {
    if schema["x-kubernetes-int-or-string"] == true {
        return matches!(v, Value::String(_)) || v.is_i64() || v.is_u64();
    }
    let got = type_name(v);
    got == wanted || (wanted == "number" && got == "integer")
}

/// Checks `v` against a structural schema: `type`, `properties` (unknown
/// fields refused unless `x-kubernetes-preserve-unknown-fields`),
/// `additionalProperties`, `items`, `required`, `enum`, and the numeric,
/// length and item-count bounds. Not CEL (`x-kubernetes-validations`): that
/// needs the API server.
fn walk(v: &Value, schema: &Value, path: &str, out: &mut Vec<Problem>) {
    if v.is_null() {
        if schema["nullable"] != true && !schema["type"].is_null() {
            out.push(problem(path, "must not be null"));
        }
        return;
    }
    if let Some(t) = schema["type"].as_str()
        && !type_fits(v, t, schema)
    {
        out.push(problem(
            path,
            format!("must be of type {t}, not {}", type_name(v)),
        ));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        out.push(problem(
            path,
            format!("{v} is not one of {}", list.join(", ")),
        ));
    }
    bounds(v, schema, path, out);
    match v {
        Value::Object(map) => {
            if let Some(required) = schema["required"].as_array() {
                for r in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(r) {
                        out.push(problem(&join(path, r), "required field is missing"));
                    }
                }
            }
            let props = schema["properties"].as_object();
            let extra = &schema["additionalProperties"];
            let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
            for (k, child) in map {
                let at = join(path, k);
                if let Some(s) = props.and_then(|p| p.get(k)) {
                    walk(child, s, &at, out);
                } else if extra.is_object() {
                    walk(child, extra, &at, out);
                } else if props.is_some() && !preserve && *extra != true {
                    let known: Vec<&str> = props
                        .map(|p| p.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    out.push(problem(
                        &at,
                        format!("unknown field (known here: {})", known.join(", ")),
                    ));
                }
            }
        }
        Value::Array(items) if schema["items"].is_object() => {
            for (i, item) in items.iter().enumerate() {
                walk(item, &schema["items"], &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn bounds(v: &Value, schema: &Value, path: &str, out: &mut Vec<Problem>) {
    if let Some(n) = v.as_f64() {
        if let Some(min) = schema["minimum"].as_f64().filter(|m| n < *m) {
            out.push(problem(path, format!("must be at least {min}")));
        }
        if let Some(max) = schema["maximum"].as_f64().filter(|m| n > *m) {
            out.push(problem(path, format!("must be at most {max}")));
        }
    }
    if let (Value::String(s), Some(pattern)) = (v, schema["pattern"].as_str()) {
        // The API server's patterns are ECMA 262 ones that the regex crate
        // reads alike (no lookaround in the CRD).
        match regex::Regex::new(pattern) {
            Ok(re) if !re.is_match(s) => {
                out.push(problem(path, format!("must match the pattern {pattern}")));
            }
            Ok(_) => {}
            Err(_) => out.push(problem(
                path,
                format!("the CRD's pattern {pattern} cannot be read"),
            )),
        }
    }
    let (len, what) = match v {
        Value::String(s) => (
            Some(s.chars().count() as u64),
            ("minLength", "maxLength", "characters"),
        ),
        Value::Array(a) => (Some(a.len() as u64), ("minItems", "maxItems", "items")),
        Value::Object(o) => (
            Some(o.len() as u64),
            ("minProperties", "maxProperties", "entries"),
        ),
        _ => (None, ("", "", "")),
    };
    if let Some(len) = len {
        if let Some(min) = schema[what.0].as_u64().filter(|m| len < *m) {
            out.push(problem(
                path,
                format!("must have at least {min} {}", what.2),
            ));
        }
        if let Some(max) = schema[what.1].as_u64().filter(|m| len > *m) {
            out.push(problem(path, format!("must have at most {max} {}", what.2)));
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// What the offline checks found in one document.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Valid; the typed plan (for the dry run).
    Valid(Box<ReleasePlan>),
    /// Invalid: the problems, each at its field path.
    Invalid(Vec<Problem>),
    /// Not a ReleasePlan (`kind` says what), skipped.
    Other(String),
}

/// Checks one document of a plan file offline: apiVersion and kind, then the
/// CRD's structural schema, then serde into the typed plan, then `check_spec`.
/// Each stage runs only when the one before found nothing, so a problem is
/// reported once, at its field.
pub fn check_document(doc: &Value) -> Verdict {
    let kind = doc["kind"].as_str().unwrap_or_default();
    let group = doc["apiVersion"]
        .as_str()
        .and_then(|a| a.split_once('/'))
        .map(|(g, _)| g);
    if kind != "ReleasePlan" || group != Some("releaseplan.io") {
        if kind == "ReleasePlan" {
            return Verdict::Invalid(vec![problem(
                "apiVersion",
                format!(
                    "must be releaseplan.io/v1alpha1, not {}",
                    doc["apiVersion"].as_str().unwrap_or("missing")
                ),
            )]);
        }
        return Verdict::Other(if kind.is_empty() {
            "(no kind)".into()
        } else {
            kind.into()
        });
    }
    let mut out = Vec::new();
    if let Some(v) = doc["apiVersion"].as_str()
        && v != "releaseplan.io/v1alpha1"
    {
        out.push(problem(
            "apiVersion",
            format!("must be releaseplan.io/v1alpha1, not {v}"),
        ));
    }
    if doc["metadata"]["name"].as_str().is_none_or(str::is_empty)
        && doc["metadata"]["generateName"]
            .as_str()
            .is_none_or(str::is_empty)
    {
        out.push(problem("metadata.name", "required field is missing"));
    }
    let schema = crd_schema();
    // apiVersion, kind and metadata (the API server's ObjectMeta) are checked
    // above, not by the CRD schema.
    let mut body = doc.clone();
    if let Some(m) = body.as_object_mut() {
        for k in ["apiVersion", "kind", "metadata"] {
            m.remove(k);
        }
    }
    walk(&body, schema, "", &mut out);
    if !out.is_empty() {
        return Verdict::Invalid(out);
    }
    let cel = cel_problems(doc, schema);
    let plan: ReleasePlan = match serde_json::from_value(doc.clone()) {
        Ok(p) => p,
        Err(e) if cel.is_empty() => {
            return Verdict::Invalid(vec![problem("spec", e.to_string())]);
        }
        Err(_) => return Verdict::Invalid(cel),
    };
    if !cel.is_empty() {
        return Verdict::Invalid(with_cycles(cel, &plan));
    }
    match check_spec(&plan.spec) {
        Ok(_) => Verdict::Valid(Box::new(plan)),
        Err(e) => Verdict::Invalid(vec![problem(&e.field, e.message)]),
    }
}

/// The CRD's CEL rules on the whole object (root rules read
/// `self.metadata.name`), defaults applied as the API server applies them.
/// A rule kube-cel cannot evaluate is a problem too (fail closed, as the API
/// server would refuse what it cannot check), naming the rule.
fn cel_problems(doc: &Value, schema: &Value) -> Vec<Problem> {
    thread_local! {
        // Compiling the CRD's rules takes longer than running them: once a
        // thread (a file of many plans, the tests' hundreds).
        static COMPILED: (kube_cel::Validator, kube_cel::CompiledSchema) = (
            kube_cel::Validator::new(),
            kube_cel::compile_schema(crd_schema()),
        );
    }
    let doc = kube_cel::apply_defaults(schema, doc);
    let checked =
        COMPILED.with(|(validator, compiled)| validator.validate_compiled(compiled, &doc, None));
    match checked {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .into_iter()
            .map(|e| {
                let field = if e.field_path.is_empty() {
                    "spec".to_string()
                } else {
                    e.field_path.clone()
                };
                // The rules' messages often start with their field already.
                let message = e
                    .message
                    .strip_prefix(&format!("{field}: "))
                    .unwrap_or(&e.message)
                    .to_string();
                problem(&field, message)
            })
            .collect(),
    }
}

/// The cycle `dependsOn` forms, when it forms one, beside the admission
/// rule's message (which cannot name it: CEL cannot walk a graph).
fn with_cycles(mut out: Vec<Problem>, plan: &ReleasePlan) -> Vec<Problem> {
    for (i, c) in plan.spec.components.iter().enumerate() {
        if let Some(path) = crate::plan::order::cycle_through(&plan.spec, &c.name) {
            out.push(problem(
                &format!("spec.components[{i}].dependsOn"),
                format!("dependsOn forms a cycle: {}", path.join(" -> ")),
            ));
            break;
        }
    }
    out
}

/// What a valid plan should still change, printed under its verdict without
/// failing it: gates written in the deprecated per-kind lists.
pub fn notes(plan: &ReleasePlan) -> Vec<String> {
    let lists = plan.spec.health.deprecated_lists();
    if lists.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "note: spec.health.{} {} deprecated: write these gates in spec.health.gates (each list is still read; docs/api.md, \"Deprecated lists\")",
        lists.join(", spec.health."),
        if lists.len() == 1 { "is" } else { "are" }
    )]
}

/// Reads the documents of a plan file (`-`: stdin), YAML or JSON.
pub(super) fn read_documents(path: &std::path::Path) -> Result<Vec<serde_json::Value>, CliError> {
    use serde::Deserialize as _;
    let name = path.display().to_string();
    let file_error = |reason: String| CliError::File {
        path: name.clone(),
        reason,
    };
    let text = if name == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| file_error(e.to_string()))?;
    let mut docs = Vec::new();
    for de in yaml_serde::Deserializer::from_str(&text) {
        let doc = serde_json::Value::deserialize(de).map_err(|e| file_error(e.to_string()))?;
        if !doc.is_null() {
            docs.push(doc);
        }
    }
    Ok(docs)
}

/// The cluster of the kubeconfig, when it answers; else a note on stderr
/// and `None` (offline checks only).
async fn reachable(global: &Global) -> Option<Ctx> {
    match Ctx::connect(global).await {
        Ok(ctx) => match ctx.client.apiserver_version().await {
            Ok(_) => Some(ctx),
            Err(e) => {
                eprintln!(
                    "note: no cluster reachable ({}): offline checks only",
                    chain(&e)
                );
                None
            }
        },
        Err(e) => {
            eprintln!("note: no cluster configured ({e}): offline checks only");
            None
        }
    }
}

/// `lint`: the offline checks of [`check_document`] on every document,
/// then a server-side apply dry run of the valid plans when a cluster answers.
pub(super) async fn run(
    global: &Global,
    files: &[PathBuf],
    offline: bool,
) -> Result<i32, CliError> {
    let mut valid = Vec::new();
    let mut invalid = 0;
    for path in files {
        for (i, doc) in read_documents(path)?.iter().enumerate() {
            let name = doc["metadata"]["name"].as_str().unwrap_or("(no name)");
            let at = format!("{} document {} ({name})", path.display(), i + 1);
            match check_document(doc) {
                Verdict::Valid(plan) => valid.push((at, plan, doc.clone())),
                Verdict::Invalid(problems) => {
                    invalid += 1;
                    println!("{at}: invalid");
                    for p in problems {
                        println!("  {p}");
                    }
                }
                Verdict::Other(kind) => eprintln!("{at}: skipped, kind {kind}"),
            }
        }
    }
    if valid.is_empty() && invalid == 0 {
        return Err(CliError::File {
            path: files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            reason: "no ReleasePlan in the file(s)".into(),
        });
    }
    let ctx = if offline {
        None
    } else {
        reachable(global).await
    };
    let mut error = false;
    for (at, plan, doc) in valid {
        let notes = notes(&plan);
        let Some(ctx) = &ctx else {
            println!("{at}: valid (offline checks)");
            for n in &notes {
                println!("  {n}");
            }
            continue;
        };
        let ns = plan.namespace().unwrap_or_else(|| ctx.namespace.clone());
        let api: Api<ReleasePlan> = Api::namespaced(ctx.client.clone(), &ns);
        let mut params = PatchParams::apply("kubectl-releaseplan-lint")
            .dry_run()
            .force();
        params.field_validation = Some(kube::api::ValidationDirective::Strict);
        // The document as written: the server sees exactly the file.
        match api
            .patch(&plan.name_any(), &params, &Patch::Apply(&doc))
            .await
        {
            Ok(_) => {
                println!(
                    "{at}: valid (offline checks and a server-side dry run in namespace {ns})"
                );
                for n in &notes {
                    println!("  {n}");
                }
            }
            Err(kube::Error::Api(s)) if matches!(s.code, 400 | 422) => {
                invalid += 1;
                println!(
                    "{at}: refused by the API server's dry run ({} {})",
                    s.code, s.reason
                );
                println!("  {}", s.message);
            }
            Err(e) => {
                error = true;
                eprintln!(
                    "error: {at}: {}",
                    ctx.error(&format!("dry-run releaseplan {ns}/{}", plan.name_any()), e)
                );
            }
        }
    }
    Ok(if invalid > 0 {
        LINT_INVALID
    } else if error {
        EXIT_ERROR
    } else {
        0
    })
}

/// Exit code of `lint` when a plan is invalid.
pub const LINT_INVALID: i32 = 2;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(spec: Value) -> Value {
        json!({"apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
               "metadata": {"name": "shop"}, "spec": spec})
    }

    fn web() -> Value {
        json!({"name": "web", "replicas": 2, "template": {"spec": {"containers": [{"name": "app", "image": "shop:1"}]}}})
    }

    fn problems(d: &Value) -> Vec<String> {
        match check_document(d) {
            Verdict::Invalid(p) => p.iter().map(ToString::to_string).collect(),
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn deprecated_gate_lists_get_a_note_and_gates_none() {
        let hook = json!({"name": "smoke", "url": "http://h/ok"});
        let valid = |health: Value| {
            let mut spec = json!({"components": [web()]});
            spec["health"] = health;
            match check_document(&doc(spec)) {
                Verdict::Valid(plan) => notes(&plan),
                other => panic!("not valid: {other:?}"),
            }
        };
        let old = valid(json!({"webhooks": [hook]}));
        assert_eq!(old.len(), 1);
        assert!(
            old[0].contains("spec.health.webhooks is deprecated")
                && old[0].contains("spec.health.gates"),
            "{old:?}"
        );
        let two = valid(json!({"webhooks": [hook], "prometheus": [{"name": "p",
            "address": "http://p:9090", "query": "up", "threshold": "< 1"}]}));
        assert!(
            two[0].contains("spec.health.prometheus, spec.health.webhooks are deprecated"),
            "{two:?}"
        );
        let new = valid(json!({"gates": [{"name": "smoke", "webhook": {"url": "http://h/ok"}}]}));
        assert!(new.is_empty(), "{new:?}");
    }

    #[test]
    fn a_valid_plan_passes() {
        let d = doc(
            json!({"components": [web()], "strategy": {"steps": [{"setWeight": 50}, {"pause": {"duration": "1m"}}]}}),
        );
        assert!(matches!(check_document(&d), Verdict::Valid(_)));
    }

    #[test]
    fn schema_problems_have_field_paths() {
        let mut c = web();
        c["replicas"] = json!("two");
        c["color"] = json!("blue");
        let p = problems(&doc(json!({"components": [c], "stratgy": {}})));
        assert!(
            p.contains(
                &"spec.components[0].replicas: must be of type integer, not string".to_string()
            ),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|l| l.starts_with("spec.components[0].color: unknown field (known here: ")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|l| l.starts_with("spec.stratgy: unknown field")),
            "{p:?}"
        );
        let mut c = web();
        c["replicas"] = json!(-1);
        let p = problems(&doc(json!({"components": [c]})));
        assert_eq!(p, ["spec.components[0].replicas: must be at least 0"]);
    }

    #[test]
    fn check_spec_problems_come_last() {
        // The CRD's rule says it first, as the API server would.
        let p = problems(&doc(json!({"components": [web(), web()]})));
        assert_eq!(p, ["spec.components: component names must be unique"]);
        let p = problems(&doc(
            json!({"components": [web()], "strategy": {"steps": [{"pause": {"duration": "soon"}}]}}),
        ));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("spec.strategy.steps[0].pause.duration: "),
            "{p:?}"
        );
    }

    /// The CRD's CEL rules run offline: a rule the structural schema cannot
    /// express (a component listed twice, a 3-cycle of dependsOn) is
    /// refused with the API server's message, and the cycle named.
    #[test]
    fn cel_rules_run_offline() {
        let named = |n: &str, deps: &[&str]| {
            let mut c = web();
            c["name"] = json!(n);
            c["dependsOn"] = json!(
                deps.iter()
                    .map(|d| json!({"component": d}))
                    .collect::<Vec<_>>()
            );
            c
        };
        let p = problems(&doc(json!({"components": [
            named("a", &["c"]), named("b", &["a"]), named("c", &["b"])]})));
        assert!(
            p.iter()
                .any(|l| l.contains("a depends on a component that is not listed before it")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|l| l.ends_with("dependsOn forms a cycle: a -> c -> b -> a")),
            "{p:?}"
        );
        let p = problems(&doc(json!({"components": [web(), web()]})));
        assert!(
            p.iter()
                .any(|l| l.contains("component names must be unique")),
            "{p:?}"
        );
        // In dependency order: valid.
        let ok = doc(
            json!({"components": [named("a", &[]), named("b", &["a"]), named("c", &["b", "a"])]}),
        );
        assert!(
            matches!(check_document(&ok), Verdict::Valid(_)),
            "{:?}",
            check_document(&ok)
        );
    }

    #[test]
    fn other_kinds_and_versions() {
        assert!(matches!(
            check_document(&json!({"apiVersion": "v1", "kind": "Service"})),
            Verdict::Other(k) if k == "Service"
        ));
        let mut d = doc(json!({"components": [web()]}));
        d["apiVersion"] = json!("releaseplan.io/v9");
        assert_eq!(
            problems(&d),
            ["apiVersion: must be releaseplan.io/v1alpha1, not releaseplan.io/v9"]
        );
        let mut d = doc(json!({"components": [web()]}));
        d["metadata"] = json!({});
        assert_eq!(problems(&d), ["metadata.name: required field is missing"]);
    }
}
