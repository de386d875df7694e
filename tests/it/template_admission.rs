//! Admission of GateTemplates, ClusterGateTemplates and of plans that refer
//! to them, by a real API server with the checked-in CRDs: valid objects
//! (the example among them) are accepted, each invalid one is refused with a
//! message naming the rule and, where the rule reports one, the field path.
//! `e2e/cluster-up.sh adm && . .e2e-run/adm/env && cargo test --test it template_admission::`.

use crate::support;

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::{Client, Resource};
use releaseplan::api::ReleasePlan;
use releaseplan::api::template::{ClusterGateTemplate, GateTemplate};
use releaseplan::plan::spec::check_spec;
use serde_json::{Value, json};
use support::cluster::{client, repo_root, test_namespace};
use support::crd;

fn hook_template(kind: &str, name: &str) -> Value {
    json!({
        "apiVersion": "releaseplan.io/v1alpha1",
        "kind": kind,
        "metadata": { "name": name },
        "spec": {
            "parameters": [
                { "name": "service", "description": "the service checked" },
                { "name": "region", "default": "eu" }
            ],
            "webhook": {
                "name": "smoke",
                "url": "https://hooks.example.com/{{args.service}}/{{args.region}}",
                "timeoutSeconds": 5
            }
        }
    })
}

fn prom_template(kind: &str, name: &str) -> Value {
    json!({
        "apiVersion": "releaseplan.io/v1alpha1",
        "kind": kind,
        "metadata": { "name": name },
        "spec": {
            "parameters": [{ "name": "job" }],
            "prometheus": {
                "name": "errors",
                "address": "http://prometheus.monitoring:9090",
                "query": "sum(rate(errors_total{job=\"{{args.job}}\",revision=\"{{revision}}\"}[1m]))",
                "threshold": "< 0.05"
            }
        }
    })
}

fn analysis_template(kind: &str, name: &str) -> Value {
    json!({
        "apiVersion": "releaseplan.io/v1alpha1",
        "kind": kind,
        "metadata": { "name": name },
        "spec": {
            "parameters": [{ "name": "service" }, { "name": "prom", "default": "prometheus.monitoring" }],
            "analysis": {
                "address": "http://{{args.prom}}:9090",
                "auth": { "bearer": { "secretKeyRef": { "name": "prom-token", "key": "token" } } },
                "metrics": [
                    { "name": "latency", "query": "avg(rate(latency_sum{svc=\"{{args.service}}\",revision=\"{{revision}}\"}[{{sampleInterval}}]))", "tolerance": "10%" },
                    { "name": "errors", "failed": "sum(increase(e{svc=\"{{args.service}}\"}[{{window}}]))", "total": "sum(increase(t{svc=\"{{args.service}}\"}[{{window}}]))", "critical": true }
                ]
            }
        }
    })
}

fn analysis_gate_template(name: &str) -> Value {
    analysis_template("GateTemplate", name)
}

fn job_template(kind: &str, name: &str) -> Value {
    json!({
        "apiVersion": "releaseplan.io/v1alpha1",
        "kind": kind,
        "metadata": { "name": name },
        "spec": {
            "parameters": [{ "name": "target" }, { "name": "rps", "default": "10" }],
            "job": {
                "name": "load",
                "timeoutSeconds": 300,
                "template": { "spec": { "template": { "spec": { "containers": [{
                    "name": "hey",
                    "image": "loadtest:1",
                    "args": ["-q", "{{args.rps}}", "http://{{args.target}}/"]
                }] } } } }
            }
        }
    })
}

fn gate_job_template(name: &str) -> Value {
    job_template("GateTemplate", name)
}

fn cluster_job_template(name: &str) -> Value {
    job_template("ClusterGateTemplate", name)
}

/// A plan with two components, a template gate per kind (the Job one for one
/// component), a per-component webhook gate and a per-component Job gate.
fn plan(name: &str) -> Value {
    json!({
        "apiVersion": ReleasePlan::api_version(&()),
        "kind": ReleasePlan::kind(&()),
        "metadata": { "name": name },
        "spec": {
            "components": [
                { "name": "web", "replicas": 1, "template": { "spec": { "containers": [{ "name": "web", "image": "web:1" }] } } },
                { "name": "worker", "replicas": 1, "template": { "spec": { "containers": [{ "name": "worker", "image": "worker:1" }] } } }
            ],
            "health": {
                "webhooks": [{ "name": "own", "url": "http://hooks.example.com/own", "component": "worker" }],
                "templates": [
                    { "name": "smoke-web", "templateRef": { "name": "smoke" }, "args": { "service": "web" }, "component": "web" },
                    { "name": "errors", "templateRef": { "kind": "ClusterGateTemplate", "name": "errors" }, "args": { "job": "api" } },
                    { "name": "load-worker", "templateRef": { "name": "load" }, "args": { "target": "worker" }, "component": "worker" }
                ],
                "jobs": [{
                    "name": "job-web",
                    "component": "web",
                    "template": { "spec": { "template": { "spec": { "containers": [{ "name": "t", "image": "smoke:1" }] } } } }
                }]
            }
        }
    })
}

fn api(client: &Client, ns: Option<&str>, kind: &str) -> Api<DynamicObject> {
    let resource = match kind {
        "GateTemplate" => ApiResource::erase::<GateTemplate>(&()),
        "ClusterGateTemplate" => ApiResource::erase::<ClusterGateTemplate>(&()),
        _ => ApiResource::erase::<ReleasePlan>(&()),
    };
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

async fn create(api: &Api<DynamicObject>, v: &Value) -> Result<DynamicObject, kube::Error> {
    api.create(
        &PostParams::default(),
        &serde_json::from_value(v.clone()).unwrap(),
    )
    .await
}

/// One invalid object and what its refusal must say.
struct Case {
    name: &'static str,
    base: fn(&str) -> Value,
    edit: Box<dyn Fn(&mut Value)>,
    expect: &'static [&'static str],
    path: Option<&'static str>,
}

fn case(
    name: &'static str,
    base: fn(&str) -> Value,
    path: Option<&'static str>,
    expect: &'static [&'static str],
    edit: impl Fn(&mut Value) + 'static,
) -> Case {
    Case {
        name,
        base,
        edit: Box::new(edit),
        expect,
        path,
    }
}

fn gate_template(name: &str) -> Value {
    hook_template("GateTemplate", name)
}

fn cluster_template(name: &str) -> Value {
    prom_template("ClusterGateTemplate", name)
}

fn template_cases() -> Vec<Case> {
    vec![
        case(
            "analysis-and-webhook",
            analysis_gate_template,
            Some("spec"),
            &[
                "a gate template must hold exactly one gate: set one of prometheus, webhook, job and analysis",
            ],
            |t| t["spec"]["webhook"] = json!({ "name": "x", "url": "https://hooks.example.com/" }),
        ),
        case(
            "analysis-address-undeclared-argument",
            analysis_gate_template,
            Some("spec.analysis.address"),
            &["analysis.address: each {{args.NAME}} must name one of parameters"],
            |t| t["spec"]["analysis"]["address"] = json!("http://{{args.host}}:9090"),
        ),
        case(
            "no-gate",
            gate_template,
            Some("spec"),
            &["a gate template must hold exactly one gate"],
            |t| {
                t["spec"].as_object_mut().unwrap().remove("webhook");
            },
        ),
        case(
            "two-gates",
            gate_template,
            Some("spec"),
            &["a gate template must hold exactly one gate"],
            |t| {
                t["spec"]["prometheus"] =
                    prom_template("GateTemplate", "x")["spec"]["prometheus"].clone()
            },
        ),
        case(
            "cluster-no-gate",
            cluster_template,
            Some("spec"),
            &["a gate template must hold exactly one gate"],
            |t| {
                t["spec"].as_object_mut().unwrap().remove("prometheus");
            },
        ),
        case(
            "parameter-name",
            gate_template,
            Some("spec.parameters[0].name"),
            &["parameter name must start with a letter"],
            |t| t["spec"]["parameters"][0]["name"] = json!("1service"),
        ),
        case(
            "parameter-name-dash",
            cluster_template,
            Some("spec.parameters[0].name"),
            &["parameter name must start with a letter"],
            |t| t["spec"]["parameters"][0]["name"] = json!("my-job"),
        ),
        case(
            "parameter-duplicate",
            gate_template,
            Some("spec.parameters"),
            &["parameter names must be unique"],
            |t| t["spec"]["parameters"][1]["name"] = json!("service"),
        ),
        case(
            "parameter-too-many",
            gate_template,
            Some("spec.parameters"),
            &["must have at most 16 items"],
            |t| {
                t["spec"]["parameters"] = json!(
                    (0..17)
                        .map(|i| json!({ "name": format!("p{i}") }))
                        .collect::<Vec<_>>()
                )
            },
        ),
        case(
            "parameter-default-too-long",
            gate_template,
            Some("spec.parameters[1].default"),
            &["may not be more than 256"],
            |t| t["spec"]["parameters"][1]["default"] = json!("x".repeat(257)),
        ),
        case(
            "component-in-template",
            gate_template,
            Some("spec.webhook"),
            &["a template does not name a component"],
            |t| t["spec"]["webhook"]["component"] = json!("web"),
        ),
        case(
            "component-in-cluster-template",
            cluster_template,
            Some("spec.prometheus"),
            &["a template does not name a component"],
            |t| t["spec"]["prometheus"]["component"] = json!("web"),
        ),
        // The gate structs' own rules, the same as in a plan.
        case(
            "webhook-url",
            gate_template,
            Some("spec.webhook.url"),
            &["webhook url must be an http:// or https:// URL"],
            |t| t["spec"]["webhook"]["url"] = json!("ftp://x/{{args.service}}"),
        ),
        case(
            "prometheus-threshold",
            cluster_template,
            Some("spec.prometheus.threshold"),
            &["threshold must be an operator"],
            |t| t["spec"]["prometheus"]["threshold"] = json!("about 3"),
        ),
        case(
            "prometheus-interval",
            cluster_template,
            Some("spec.prometheus.interval"),
            &["interval must be a duration"],
            |t| t["spec"]["prometheus"]["interval"] = json!("soon"),
        ),
        case(
            "webhook-retries",
            gate_template,
            Some("spec.webhook.retries"),
            &["should be less than or equal to 10"],
            |t| t["spec"]["webhook"]["retries"] = json!(11),
        ),
        case(
            "undeclared-arg-in-url",
            gate_template,
            Some("spec.webhook.url"),
            &["webhook.url: each {{args.NAME}} must name one of parameters"],
            |t| t["spec"]["webhook"]["url"] = json!("https://h/{{args.service}}/{{args.suite}}"),
        ),
        case(
            "undeclared-arg-in-address",
            cluster_template,
            Some("spec.prometheus.address"),
            &["prometheus.address: each {{args.NAME}} must name one of parameters"],
            |t| t["spec"]["prometheus"]["address"] = json!("http://{{args.host}}:9090"),
        ),
        case(
            "job-and-webhook",
            gate_job_template,
            Some("spec"),
            &[
                "a gate template must hold exactly one gate: set one of prometheus, webhook, job and analysis",
            ],
            |t| {
                t["spec"]["webhook"] = hook_template("GateTemplate", "x")["spec"]["webhook"].clone()
            },
        ),
        case(
            "job-and-prometheus",
            cluster_job_template,
            Some("spec"),
            &["a gate template must hold exactly one gate"],
            |t| {
                t["spec"]["prometheus"] =
                    prom_template("GateTemplate", "x")["spec"]["prometheus"].clone()
            },
        ),
        case(
            "component-in-job-template",
            gate_job_template,
            Some("spec.job"),
            &["job.component: a template does not name a component"],
            |t| t["spec"]["job"]["component"] = json!("web"),
        ),
        case(
            "job-no-containers",
            gate_job_template,
            Some("spec.job.template.spec.template.spec.containers"),
            &["should have at least 1 items"],
            |t| t["spec"]["job"]["template"]["spec"]["template"]["spec"]["containers"] = json!([]),
        ),
        case(
            "job-no-pod-spec",
            cluster_job_template,
            Some("spec.job.template.spec.template.spec"),
            &["Required value"],
            |t| {
                t["spec"]["job"]["template"]["spec"]["template"]
                    .as_object_mut()
                    .unwrap()
                    .remove("spec");
            },
        ),
        case(
            "job-container-without-image",
            gate_job_template,
            Some("spec.job.template.spec.template.spec.containers[0].image"),
            &["Required value"],
            |t| {
                t["spec"]["job"]["template"]["spec"]["template"]["spec"]["containers"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("image");
            },
        ),
        case(
            "job-restart-always",
            cluster_job_template,
            Some("spec.job.template.spec.template.spec.restartPolicy"),
            &["Unsupported value", "Never", "OnFailure"],
            |t| {
                t["spec"]["job"]["template"]["spec"]["template"]["spec"]["restartPolicy"] =
                    json!("Always")
            },
        ),
        case(
            "job-namespace",
            cluster_job_template,
            Some("spec.job.template.metadata.namespace"),
            &["template.metadata.namespace must not be set"],
            |t| t["spec"]["job"]["template"]["metadata"] = json!({"namespace": "kube-system"}),
        ),
        case(
            "job-timeout",
            gate_job_template,
            Some("spec.job.timeoutSeconds"),
            &["should be less than or equal to 86400"],
            |t| t["spec"]["job"]["timeoutSeconds"] = json!(86401),
        ),
        case(
            "job-gate-name",
            gate_job_template,
            Some("spec.job.name"),
            &["gate name must be a DNS label"],
            |t| t["spec"]["job"]["name"] = json!("Load"),
        ),
        case(
            "spec-missing",
            gate_template,
            None,
            &["spec: Required value"],
            |t| {
                t.as_object_mut().unwrap().remove("spec");
            },
        ),
    ]
}

fn plan_cases() -> Vec<Case> {
    vec![
        case(
            "template-component-unknown",
            plan,
            Some("spec.health"),
            &["a gate's component must name one of spec.components"],
            |p| p["spec"]["health"]["templates"][0]["component"] = json!("db"),
        ),
        case(
            "webhook-component-unknown",
            plan,
            Some("spec.health"),
            &["a gate's component must name one of spec.components"],
            |p| p["spec"]["health"]["webhooks"][0]["component"] = json!("db"),
        ),
        case(
            "job-component-unknown",
            plan,
            Some("spec.health"),
            &["a gate's component must name one of spec.components"],
            |p| {
                p["spec"]["health"]["jobs"] = json!([{
                    "name": "smoke",
                    "component": "db",
                    "template": { "spec": { "template": { "spec": { "containers": [{ "name": "t", "image": "smoke:1" }] } } } }
                }])
            },
        ),
        case(
            "template-name-clash",
            plan,
            Some("spec.health"),
            &[
                "gate names must be unique across gates and the deprecated prometheus, webhooks, jobs and templates lists",
            ],
            |p| p["spec"]["health"]["templates"][0]["name"] = json!("own"),
        ),
        case(
            "template-name-duplicate",
            plan,
            Some("spec.health"),
            &[
                "gate names must be unique across gates and the deprecated prometheus, webhooks, jobs and templates lists",
            ],
            |p| p["spec"]["health"]["templates"][1]["name"] = json!("smoke-web"),
        ),
        case(
            "template-gate-name",
            plan,
            Some("spec.health.templates[0].name"),
            &["gate name must be a DNS label"],
            |p| p["spec"]["health"]["templates"][0]["name"] = json!("Smoke"),
        ),
        case(
            "template-kind",
            plan,
            Some("spec.health.templates[1].templateRef.kind"),
            &["Unsupported value", "ClusterGateTemplate"],
            |p| p["spec"]["health"]["templates"][1]["templateRef"]["kind"] = json!("Template"),
        ),
        case(
            "template-ref-name",
            plan,
            Some("spec.health.templates[0].templateRef.name"),
            &["templateRef.name must be a lowercase DNS subdomain name"],
            |p| p["spec"]["health"]["templates"][0]["templateRef"]["name"] = json!("Smoke_1"),
        ),
        case(
            "template-ref-missing",
            plan,
            Some("spec.health.templates[0].templateRef"),
            &["Required value"],
            |p| {
                p["spec"]["health"]["templates"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("templateRef");
            },
        ),
        case(
            "args-name",
            plan,
            Some("spec.health.templates[0].args"),
            &["args: each name must start with a letter"],
            |p| p["spec"]["health"]["templates"][0]["args"]["my-service"] = json!("x"),
        ),
        case(
            "args-value-too-long",
            plan,
            Some("spec.health.templates[0].args"),
            &["args: each value must be at most 256 characters"],
            |p| p["spec"]["health"]["templates"][0]["args"]["service"] = json!("x".repeat(257)),
        ),
        case(
            "too-many-templates",
            plan,
            Some("spec.health.templates"),
            &["must have at most 8 items"],
            |p| {
                p["spec"]["health"]["templates"] = json!(
                    (0..9)
                        .map(|i| json!({ "name": format!("t{i}"), "templateRef": { "name": "smoke" } }))
                        .collect::<Vec<_>>()
                )
            },
        ),
    ]
}

async fn refusals(client: &Client, ns: &str, suffix: &str, cases: Vec<Case>) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let mut v = (c.base)(&format!("invalid-{i}-{suffix}"));
        (c.edit)(&mut v);
        let kind = v["kind"].as_str().unwrap().to_string();
        let scoped = (kind != "ClusterGateTemplate").then_some(ns);
        match create(&api(client, scoped, &kind), &v).await {
            Ok(_) => problems.push(format!("{}: accepted, expected a refusal", c.name)),
            Err(kube::Error::Api(status)) => {
                let missing: Vec<&str> = c
                    .expect
                    .iter()
                    .copied()
                    .filter(|e| !status.message.contains(e))
                    .collect();
                if !missing.is_empty() {
                    problems.push(format!(
                        "{}: message lacks {missing:?}: {}",
                        c.name, status.message
                    ));
                }
                if let Some(path) = c.path {
                    let fields: Vec<&str> = status
                        .details
                        .iter()
                        .flat_map(|d| &d.causes)
                        .map(|cause| cause.field.as_str())
                        .collect();
                    if !fields.contains(&path) {
                        problems.push(format!(
                            "{}: the refusal names the fields {fields:?}, not {path}: {}",
                            c.name, status.message
                        ));
                    }
                }
                if status.code != 422 {
                    problems.push(format!("{}: HTTP {} instead of 422", c.name, status.code));
                }
            }
            Err(e) => problems.push(format!("{}: not an API refusal: {e}", c.name)),
        }
    }
    problems
}

#[tokio::test]
async fn accepts_templates_plans_using_them_and_the_example() {
    let client = client().await;
    crd::install(&client).await;
    let ns = test_namespace(&client, "tadm-ok").await;
    create(
        &api(&client, Some(&ns), "GateTemplate"),
        &gate_template("smoke"),
    )
    .await
    .expect("a GateTemplate with a webhook gate");
    create(
        &api(&client, Some(&ns), "GateTemplate"),
        &gate_job_template("load"),
    )
    .await
    .expect("a GateTemplate with a Job gate");
    create(
        &api(&client, Some(&ns), "GateTemplate"),
        &analysis_gate_template("judge"),
    )
    .await
    .expect("a GateTemplate with an analysis gate");
    let cluster_name = format!("errors-{ns}");
    let cluster = api(&client, None, "ClusterGateTemplate");
    create(&cluster, &cluster_template(&cluster_name))
        .await
        .expect("a ClusterGateTemplate with a Prometheus gate");
    let stored = create(&api(&client, Some(&ns), "ReleasePlan"), &plan("uses"))
        .await
        .expect("a plan with template gates and per-component gates");
    let stored: ReleasePlan =
        serde_json::from_value(serde_json::to_value(&stored).unwrap()).unwrap();
    check_spec(&stored.spec).expect("the operator accepts what the API server accepts");
    assert_eq!(stored.spec.health.templates.len(), 3);
    assert_eq!(stored.spec.health.jobs[0].component.as_deref(), Some("web"));
    let load_name = format!("load-{ns}");
    create(&cluster, &cluster_job_template(&load_name))
        .await
        .expect("a ClusterGateTemplate with a Job gate");

    // examples/gate-templates.yaml: templates and a plan using them.
    let text = std::fs::read_to_string(repo_root().join("examples/gate-templates.yaml")).unwrap();
    let mut cleanup = vec![cluster_name, load_name];
    for doc in yaml_serde::Deserializer::from_str(&text) {
        use serde::Deserialize;
        let mut v = Value::deserialize(doc).unwrap();
        let kind = v["kind"].as_str().unwrap().to_string();
        v["metadata"].as_object_mut().unwrap().remove("namespace");
        if kind == "ClusterGateTemplate" {
            let name = format!("{}-{ns}", v["metadata"]["name"].as_str().unwrap());
            v["metadata"]["name"] = json!(name);
            cleanup.push(name);
        }
        let scoped = (kind != "ClusterGateTemplate").then_some(ns.as_str());
        create(&api(&client, scoped, &kind), &v)
            .await
            .unwrap_or_else(|e| panic!("example {kind} refused: {e}"));
    }
    for name in cleanup {
        cluster
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn refuses_invalid_templates_and_references_naming_field_and_rule() {
    let client = client().await;
    crd::install(&client).await;
    let ns = test_namespace(&client, "tadm-bad").await;
    let cases = template_cases();
    let n = cases.len();
    let mut problems = refusals(&client, &ns, &ns, cases).await;
    let plans = plan_cases();
    let m = plans.len();
    problems.extend(refusals(&client, &ns, &ns, plans).await);
    assert!(
        problems.is_empty(),
        "{} of {} invalid objects were not refused as expected:\n{}",
        problems.len(),
        n + m,
        problems.join("\n")
    );
}
