//! Admission of ReleasePlans by a real API server: the CRD of
//! `crds/releaseplan.yaml` is installed, valid plans (the examples among them)
//! are accepted, and each invalid plan is refused with a message that names
//! the field and the rule. Run against the cluster of `make test`, or alone:
//! `e2e/cluster-up.sh adm && . .e2e-run/adm/env && cargo test --test it -- admission:: --skip template_admission::`.

use crate::support;

use std::collections::BTreeSet;
use support::{cluster, crd};

use cluster::{client, repo_root, test_namespace};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use releaseplan::api::{MAX_CONTAINERS, MAX_TEMPLATE_LABELS, ReleasePlan, ReleasePlanStatus};
use releaseplan::plan::spec::check_spec;
use serde_json::{Value, json};

/// The smallest valid plan: one component, everything else defaulted.
fn minimal(name: &str) -> Value {
    json!({
        "apiVersion": ReleasePlan::api_version(&()),
        "kind": ReleasePlan::kind(&()),
        "metadata": { "name": name },
        "spec": {
            "components": [{
                "name": "web",
                "replicas": 2,
                "template": {
                    "metadata": { "labels": { "app": "web" } },
                    "spec": { "containers": [{ "name": "web", "image": "nginx:1.27" }] }
                }
            }]
        }
    })
}

/// A plan with two components, steps, pauses, health settings and both kinds of gates.
fn full(name: &str) -> Value {
    let mut plan = minimal(name);
    plan["spec"]["components"]
        .as_array_mut()
        .expect("components")
        .push(json!({
            "name": "worker",
            "replicas": 1,
            "template": {
                "metadata": { "labels": { "app": "worker" } },
                "spec": { "containers": [{ "name": "worker", "image": "worker:1" }] }
            }
        }));
    plan["spec"]["strategy"] = json!({ "steps": [
        { "setWeight": 10 },
        { "pause": { "duration": "1m" } },
        { "setWeight": 50 },
        { "pause": {} },
    ]});
    plan["spec"]["health"] = json!({
        "progressDeadlineSeconds": 300,
        "maxRestarts": 1,
        "detectPodFailures": true,
        "prometheus": [prometheus_gate("errors")],
        "webhooks": [webhook_gate("smoke")],
        "jobs": [job_gate("load")],
    });
    plan["spec"]["rollback"] = json!({ "automatic": false });
    plan["spec"]["paused"] = json!(true);
    plan["spec"]["revisionHistoryLimit"] = json!(5);
    plan
}

/// [`full`] with its gates written in `health.gates`, one of each kind and a
/// template gate, the HTTP ones with auth, headers and a CA.
fn full_in_gates(name: &str) -> Value {
    let mut plan = full(name);
    plan["spec"]["health"] = json!({
        "progressDeadlineSeconds": 300,
        "gates": [
            in_gates(prometheus_gate("errors"), "prometheus"),
            in_gates(webhook_gate("smoke"), "webhook"),
            in_gates(job_gate("load"), "job"),
            { "name": "latency", "component": "worker",
              "template": { "kind": "ClusterGateTemplate", "name": "p99", "args": { "max": "0.5" } } },
        ],
    });
    let access = json!({
        "auth": { "bearer": { "secretKeyRef": { "name": "prom", "key": "token" } } },
        "headers": [{ "name": "X-Scope-OrgID", "value": "team-a" }],
        "tls": { "ca": { "configMapKeyRef": { "name": "ca", "key": "ca.crt" } } },
    });
    for (k, v) in access.as_object().unwrap() {
        plan["spec"]["health"]["gates"][0][k] = v.clone();
    }
    plan
}

/// A gate of the deprecated lists written as an entry of `health.gates`:
/// its name at the top, its settings under `kind`.
fn in_gates(mut old: Value, kind: &str) -> Value {
    let name = old.as_object_mut().unwrap().remove("name").unwrap();
    json!({ "name": name, kind: old })
}

fn prometheus_gate(name: &str) -> Value {
    json!({
        "name": name,
        "address": "http://prometheus.monitoring:9090",
        "query": "sum(rate(errors_total{namespace=\"{{namespace}}\"}[1m]))",
        "threshold": "< 0.05",
        "interval": "30s",
        "failureLimit": 1,
        "inconclusiveLimit": 2,
        "timeoutSeconds": 5,
    })
}

/// An analysis gate of one metric.
fn analysis_gate(metric: Value) -> Value {
    json!({"name": "judge", "analysis": {
        "address": "http://prometheus.monitoring:9090", "metrics": [metric]
    }})
}

fn webhook_gate(name: &str) -> Value {
    json!({
        "name": name,
        "url": "https://hooks.example.com/check",
        "timeoutSeconds": 10,
        "retries": 2,
    })
}

fn job_gate(name: &str) -> Value {
    json!({
        "name": name,
        "timeoutSeconds": 300,
        "template": {
            "metadata": {"labels": {"team": "qa"}},
            "spec": {"backoffLimit": 1, "template": {"spec": {
                "restartPolicy": "OnFailure",
                "containers": [{"name": "load", "image": "hey:1", "args": ["-z", "30s"]}]
            }}}
        }
    })
}

fn with_job(p: &mut Value, edit: impl Fn(&mut Value)) {
    let mut g = job_gate("load");
    edit(&mut g);
    p["spec"]["health"] = json!({ "jobs": [g] });
}

/// The example of docs/api.md, in `examples/full.yaml`.
fn example(file: &str) -> Value {
    let path = repo_root().join("examples").join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()))
}

fn plans(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<ReleasePlan>(&()))
}

fn object(v: &Value) -> DynamicObject {
    serde_json::from_value(v.clone()).expect("a ReleasePlan object")
}

fn name_of(v: &Value) -> String {
    v["metadata"]["name"]
        .as_str()
        .expect("metadata.name")
        .to_string()
}

/// How a case is sent: POST (kubectl create), or server-side apply with strict
/// field validation (kubectl apply --server-side, Argo CD, Flux).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Via {
    Create,
    Apply,
}

async fn submit(
    api: &Api<DynamicObject>,
    v: &Value,
    via: Via,
) -> Result<DynamicObject, kube::Error> {
    match via {
        Via::Create => api.create(&PostParams::default(), &object(v)).await,
        Via::Apply => {
            let params = PatchParams::apply(crd::MANAGER).validation_strict();
            api.patch(&name_of(v), &params, &Patch::Apply(&object(v)))
                .await
        }
    }
}

/// Accepted by the API server, and acceptable to the operator too: a plan the
/// CRD lets in must never be one the controller then calls invalid.
async fn assert_accepted(api: &Api<DynamicObject>, v: &Value, via: Via) {
    let name = name_of(v);
    let stored = submit(api, v, via)
        .await
        .unwrap_or_else(|e| panic!("plan {name} must be accepted ({via:?}): {e}"));
    let plan: ReleasePlan = serde_json::from_value(serde_json::to_value(&stored).expect("json"))
        .unwrap_or_else(|e| panic!("stored plan {name} does not deserialize: {e}"));
    if let Err(e) = check_spec(&plan.spec) {
        panic!("plan {name} was accepted by the API server but the operator refuses it: {e}");
    }
}

#[tokio::test]
async fn accepts_minimal_and_full_plans_and_the_example() {
    let client = client().await;
    crd::install(&client).await;
    let ns = test_namespace(&client, "adm-valid").await;
    let api = plans(&client, &ns);

    assert_accepted(&api, &minimal("minimal"), Via::Create).await;
    assert_accepted(&api, &full("full"), Via::Create).await;
    assert_accepted(&api, &full("full-applied"), Via::Apply).await;
    assert_accepted(&api, &full_in_gates("full-gates"), Via::Create).await;
    assert_accepted(&api, &full_in_gates("full-gates-applied"), Via::Apply).await;

    for file in [
        "full.yaml",
        "job-gate.yaml",
        "traffic-canary.yaml",
        "blue-green.yaml",
        "autoscaled.yaml",
    ] {
        let mut ex = example(file);
        ex["metadata"]["namespace"] = json!(ns);
        ex["metadata"]["name"] = json!(format!("example-{}", file.trim_end_matches(".yaml")));
        assert_accepted(&api, &ex, Via::Apply).await;
    }

    // Defaults are filled in by the API server, as docs/api.md says.
    let stored = api.get("minimal").await.expect("get minimal");
    let spec = &stored.data["spec"];
    assert_eq!(spec["strategy"], json!({ "steps": [] }));
    assert_eq!(spec["rollback"], json!({ "automatic": true }));
    assert_eq!(spec["paused"], json!(false));
    assert_eq!(
        spec["health"],
        json!({ "prometheus": [], "webhooks": [], "templates": [] })
    );
}

/// The CRD embeds the PodSpec of the oldest supported Kubernetes (1.33,
/// k8s-openapi's feature), so on every cluster, the newest too, a pod field
/// added after it is not part of a plan (docs/api.md, "Kubernetes versions
/// and the pod template"): strict field validation (kubectl, Argo CD, Flux)
/// refuses it naming the field; without it the API server drops it.
#[tokio::test]
async fn pod_fields_newer_than_the_oldest_supported_kubernetes_are_not_stored() {
    let client = client().await;
    crd::install(&client).await;
    let ns = test_namespace(&client, "adm-newer-pod").await;
    let api = plans(&client, &ns);
    // Kubernetes 1.34's hostnameOverride, and a container's restartPolicyRules.
    let hostname = |v: &mut Value| {
        v["spec"]["components"][0]["template"]["spec"]["hostnameOverride"] = json!("web-0");
    };
    let rules = |v: &mut Value| {
        let c = &mut v["spec"]["components"][0]["template"]["spec"]["containers"][0];
        c["restartPolicy"] = json!("Never");
        c["restartPolicyRules"] =
            json!([{ "action": "Restart", "exitCodes": { "operator": "In", "values": [42] } }]);
    };
    let newer = |name: &str| {
        let mut v = minimal(name);
        hostname(&mut v);
        rules(&mut v);
        v
    };

    // One field per plan: the API server may stop at the first undeclared
    // field it meets, and the order it walks a pod spec's fields in is not
    // fixed (seen on 1.36.3: one run named both, the next only the first).
    type Edit<'a> = &'a dyn Fn(&mut Value);
    let cases: [(&str, Edit, &str); 2] = [
        (
            "strict-hostname",
            &hostname,
            r#".spec.components[name="web"].template.spec.hostnameOverride: field not declared in schema"#,
        ),
        (
            "strict-rules",
            &rules,
            r#".template.spec.containers[name="web"].restartPolicyRules: field not declared in schema"#,
        ),
    ];
    for (name, edit, field) in cases {
        let mut v = minimal(name);
        edit(&mut v);
        let err = submit(&api, &v, Via::Apply)
            .await
            .expect_err("a pod field newer than 1.33 must be refused under strict validation");
        let msg = err.to_string();
        assert!(msg.contains(field), "{field} not named: {msg}");
    }

    let stored = submit(&api, &newer("lenient"), Via::Create)
        .await
        .expect("created without strict validation");
    let spec = &stored.data["spec"]["components"][0]["template"]["spec"];
    assert!(spec.get("hostnameOverride").is_none(), "{spec}");
    assert!(
        spec["containers"][0].get("restartPolicyRules").is_none(),
        "{spec}"
    );
    assert_eq!(spec["containers"][0]["restartPolicy"], json!("Never"));
}

/// Values at the edge of every rule, which must pass.
type Edit = fn(&mut Value);

/// Valid plans at the schema's limits.
fn limit_cases() -> Vec<(&'static str, Edit)> {
    vec![
        ("zero-replicas", |p| {
            p["spec"]["components"][0]["replicas"] = json!(0);
        }),
        ("max-replicas", |p| {
            p["spec"]["components"][0]["replicas"] = json!(10000);
        }),
        ("name-40", |p| {
            p["spec"]["components"][0]["name"] = json!("a".repeat(40));
        }),
        ("name-digits", |p| {
            p["spec"]["components"][0]["name"] = json!("0-9");
        }),
        ("plan-name-63", |p| {
            p["metadata"]["name"] = json!("p".repeat(63));
        }),
        ("sixteen-components", |p| {
            let c = p["spec"]["components"][0].clone();
            p["spec"]["components"] = (0..16)
                .map(|i| {
                    let mut c = c.clone();
                    c["name"] = json!(format!("c{i}"));
                    c
                })
                .collect();
        }),
        ("weights-0-to-100-repeated", |p| {
            p["spec"]["strategy"] = json!({ "steps": [
                { "setWeight": 0 }, { "setWeight": 20 }, { "pause": {} }, { "setWeight": 20 },
                { "setWeight": 100 }
            ]});
        }),
        ("thirty-two-steps", |p| {
            let steps: Vec<Value> = (0..32).map(|i| json!({ "setWeight": i * 3 })).collect();
            p["spec"]["strategy"] = json!({ "steps": steps });
        }),
        ("go-durations", |p| {
            p["spec"]["strategy"] = json!({ "steps": [
                { "pause": { "duration": "0s" } }, { "pause": { "duration": "250ms" } },
                { "pause": { "duration": "1h30m" } }, { "pause": { "duration": "1.5h" } }
            ]});
        }),
        ("thresholds", |p| {
            let gates: Vec<Value> = [">= 0.99", "==0", "!= 3e2", " < -1.5 ", "<=1E-3", "> 10"]
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let mut g = prometheus_gate(&format!("g{i}"));
                    g["threshold"] = json!(t);
                    g
                })
                .collect();
            p["spec"]["health"] = json!({ "prometheus": gates });
        }),
        ("eight-and-eight-gates", |p| {
            let prom: Vec<Value> = (0..8).map(|i| prometheus_gate(&format!("p{i}"))).collect();
            let hooks: Vec<Value> = (0..8).map(|i| webhook_gate(&format!("w{i}"))).collect();
            p["spec"]["health"] = json!({ "prometheus": prom, "webhooks": hooks });
        }),
        ("gate-limits", |p| {
            let mut g = prometheus_gate("edge");
            g["failureLimit"] = json!(0);
            g["inconclusiveLimit"] = json!(100);
            g["timeoutSeconds"] = json!(300);
            let mut w = webhook_gate("edge-hook");
            w["timeoutSeconds"] = json!(60);
            w["retries"] = json!(0);
            w["url"] = json!("http://10.0.0.1:8080/x?y=z");
            p["spec"]["health"] = json!({
                "progressDeadlineSeconds": 86400, "maxRestarts": 0,
                "prometheus": [g], "webhooks": [w]
            });
        }),
        ("history-limits", |p| {
            p["spec"]["revisionHistoryLimit"] = json!(0);
        }),
        ("history-limit-50", |p| {
            p["spec"]["revisionHistoryLimit"] = json!(50);
        }),
        ("labels-near-the-prefix", |p| {
            p["spec"]["components"][0]["template"]["metadata"]["labels"] = json!({
                "app.releaseplan.io/tier": "web", "releaseplan.io": "x", "app": "web"
            });
        }),
        ("max-labels", |p| {
            let labels: serde_json::Map<String, Value> = (0..MAX_TEMPLATE_LABELS)
                .map(|i| (format!("l{i}"), json!("v")))
                .collect();
            p["spec"]["components"][0]["template"]["metadata"]["labels"] = Value::Object(labels);
        }),
        ("ports-at-the-limits", |p| {
            p["spec"]["components"][0]["template"]["spec"]["containers"][0]["ports"] = json!([
                { "containerPort": 1 },
                { "containerPort": 65535, "hostPort": 65535 },
                { "containerPort": 8080, "hostPort": 0 },
            ]);
        }),
        ("labels-at-the-limits", |p| {
            p["spec"]["components"][0]["template"]["metadata"]["labels"] = json!({
                "app": "v".repeat(63),
                "empty": "",
                "a.b_c-D": "A.b_c-9",
                "app.kubernetes.io/name": "shop",
                format!("{}/{}", "p".repeat(253), "n".repeat(63)): "x",
            });
        }),
        ("container-name-63", |p| {
            p["spec"]["components"][0]["template"]["spec"]["containers"][0]["name"] =
                json!("w".repeat(63));
        }),
        ("max-containers-and-init-containers", |p| {
            let named = |prefix: &str| -> Vec<Value> {
                (0..MAX_CONTAINERS)
                    .map(|i| json!({ "name": format!("{prefix}{i}"), "image": "nginx:1.27" }))
                    .collect()
            };
            let spec = &mut p["spec"]["components"][0]["template"]["spec"];
            spec["containers"] = Value::Array(named("c"));
            spec["initContainers"] = Value::Array(named("i"));
        }),
        ("template-without-metadata", |p| {
            p["spec"]["components"][0]["template"]
                .as_object_mut()
                .expect("template")
                .remove("metadata");
        }),
    ]
}

#[tokio::test]
async fn accepts_values_at_the_limits() {
    let client = client().await;
    crd::install(&client).await;
    let ns = test_namespace(&client, "adm-limits").await;
    let api = plans(&client, &ns);

    let cases = limit_cases();
    for (name, edit) in cases {
        let mut plan = minimal(name);
        edit(&mut plan);
        assert_accepted(&api, &plan, Via::Create).await;
    }
}

/// One invalid plan and what the refusal must say.
struct Case {
    name: &'static str,
    via: Via,
    edit: Box<dyn Fn(&mut Value)>,
    expect: Vec<&'static str>,
    /// The field path one of the refusal's causes must carry
    /// (`status.details.causes[].field`), when the case checks it.
    path: Option<&'static str>,
}

fn case(name: &'static str, expect: &[&'static str], edit: impl Fn(&mut Value) + 'static) -> Case {
    Case {
        name,
        via: Via::Create,
        edit: Box::new(edit),
        expect: expect.to_vec(),
        path: None,
    }
}

/// A case whose refusal must name `path` as the field, not only in the message.
fn at(
    path: &'static str,
    name: &'static str,
    expect: &[&'static str],
    edit: impl Fn(&mut Value) + 'static,
) -> Case {
    Case {
        path: Some(path),
        ..case(name, expect, edit)
    }
}

fn applied(mut c: Case) -> Case {
    c.via = Via::Apply;
    c
}

fn component(p: &mut Value) -> &mut Value {
    &mut p["spec"]["components"][0]
}

fn container(p: &mut Value, i: usize) -> &mut Value {
    &mut component(p)["template"]["spec"]["containers"][i]
}

fn labels(p: &mut Value) -> &mut Value {
    &mut component(p)["template"]["metadata"]["labels"]
}

/// A minimal container spec.
fn container_named(name: &str) -> Value {
    json!({ "name": name, "image": "nginx:1.27" })
}

fn steps(p: &mut Value, steps: Value) {
    p["spec"]["strategy"] = json!({ "steps": steps });
}

fn with_prometheus(p: &mut Value, edit: impl Fn(&mut Value)) {
    let mut g = prometheus_gate("errors");
    edit(&mut g);
    p["spec"]["health"] = json!({ "prometheus": [g] });
}

fn with_webhook(p: &mut Value, edit: impl Fn(&mut Value)) {
    let mut g = webhook_gate("smoke");
    edit(&mut g);
    p["spec"]["health"] = json!({ "webhooks": [g] });
}

fn invalid_cases() -> Vec<Case> {
    vec![
        // components
        case("no-components", &["spec.components: Required value"], |p| {
            p["spec"]
                .as_object_mut()
                .expect("spec")
                .remove("components");
        }),
        case(
            "empty-components",
            &["spec.components", "should have at least 1 items"],
            |p| p["spec"]["components"] = json!([]),
        ),
        case(
            "duplicate-component",
            &["spec.components", "component names must be unique"],
            |p| {
                let c = p["spec"]["components"][0].clone();
                p["spec"]["components"]
                    .as_array_mut()
                    .expect("list")
                    .push(c);
            },
        ),
        case(
            "duplicate-component-other-settings",
            &["spec.components", "component names must be unique"],
            |p| {
                let mut c = p["spec"]["components"][0].clone();
                c["replicas"] = json!(7);
                c["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
                p["spec"]["components"]
                    .as_array_mut()
                    .expect("list")
                    .push(c);
            },
        ),
        case(
            "too-many-components",
            &["spec.components", "must have at most 16 items"],
            |p| {
                let c = p["spec"]["components"][0].clone();
                p["spec"]["components"] = (0..17)
                    .map(|i| {
                        let mut c = c.clone();
                        c["name"] = json!(format!("c{i}"));
                        c
                    })
                    .collect();
            },
        ),
        case(
            "component-name-not-dns-label",
            &[
                "spec.components[0].name",
                "component name must be a DNS label",
            ],
            |p| component(p)["name"] = json!("Web_1"),
        ),
        case(
            "component-name-trailing-dash",
            &[
                "spec.components[0].name",
                "component name must be a DNS label",
            ],
            |p| component(p)["name"] = json!("web-"),
        ),
        case(
            "component-name-too-long",
            &["spec.components[0].name", "Too long", "40"],
            |p| component(p)["name"] = json!("a".repeat(41)),
        ),
        case(
            "component-name-empty",
            &["spec.components[0].name", "at least 1 chars"],
            |p| component(p)["name"] = json!(""),
        ),
        case(
            "negative-replicas",
            &["spec.components[0].replicas", "greater than or equal to 0"],
            |p| component(p)["replicas"] = json!(-1),
        ),
        case(
            "replicas-too-large",
            &["spec.components[0].replicas", "less than or equal to 10000"],
            |p| component(p)["replicas"] = json!(10001),
        ),
        case(
            "replicas-as-string",
            &["spec.components[0].replicas", "must be of type integer"],
            |p| component(p)["replicas"] = json!("2"),
        ),
        case(
            "replicas-missing",
            &[
                "spec.components[0].replicas",
                "replicas is required unless autoscaling is set",
            ],
            |p| {
                component(p)
                    .as_object_mut()
                    .expect("component")
                    .remove("replicas");
            },
        ),
        case(
            "template-without-containers",
            &[
                "spec.components[0].template.spec.containers",
                "must hold at least one container",
            ],
            |p| component(p)["template"]["spec"]["containers"] = json!([]),
        ),
        case(
            "template-without-spec",
            &["spec.components[0].template.spec: Required value"],
            |p| {
                component(p)["template"]
                    .as_object_mut()
                    .expect("template")
                    .remove("spec");
            },
        ),
        case(
            "reserved-label-plan",
            &[
                "spec.components[0].template.metadata.labels",
                "reserved prefix releaseplan.io/",
            ],
            |p| component(p)["template"]["metadata"]["labels"]["releaseplan.io/plan"] = json!("x"),
        ),
        case(
            "reserved-label-any-key-second-component",
            &[
                "spec.components[1].template.metadata.labels",
                "reserved prefix releaseplan.io/",
            ],
            |p| {
                let mut c = p["spec"]["components"][0].clone();
                c["name"] = json!("api");
                c["template"]["metadata"]["labels"]["releaseplan.io/anything"] = json!("x");
                p["spec"]["components"]
                    .as_array_mut()
                    .expect("list")
                    .push(c);
            },
        ),
        case(
            "too-many-template-labels",
            &[
                "spec.components[0].template.metadata.labels",
                "must have at most 128 items",
            ],
            |p| {
                let labels: serde_json::Map<String, Value> = (0..=MAX_TEMPLATE_LABELS)
                    .map(|i| (format!("l{i}"), json!("v")))
                    .collect();
                component(p)["template"]["metadata"]["labels"] = Value::Object(labels);
            },
        ),
        case(
            "container-without-name",
            &["spec.components[0].template.spec.containers[0].name: Required value"],
            |p| {
                component(p)["template"]["spec"]["containers"][0]
                    .as_object_mut()
                    .expect("container")
                    .remove("name");
            },
        ),
        case(
            "container-port-as-string",
            &[
                "spec.components[0].template.spec.containers[0].ports[0].containerPort",
                "must be of type integer",
            ],
            |p| {
                component(p)["template"]["spec"]["containers"][0]["ports"] =
                    json!([{ "containerPort": "http" }]);
            },
        ),
        // what the API server would refuse in the Deployment made of the template
        at(
            "spec.components[0].template.spec.containers[0].ports[0].containerPort",
            "container-port-over-65535",
            &["less than or equal to 65535"],
            |p| container(p, 0)["ports"] = json!([{ "containerPort": 70000 }]),
        ),
        at(
            "spec.components[0].template.spec.containers[0].ports[1].containerPort",
            "container-port-zero",
            &["greater than or equal to 1"],
            |p| container(p, 0)["ports"] = json!([{ "containerPort": 80 }, { "containerPort": 0 }]),
        ),
        at(
            "spec.components[0].template.spec.containers[0].ports[0].hostPort",
            "host-port-over-65535",
            &["less than or equal to 65535"],
            |p| container(p, 0)["ports"] = json!([{ "containerPort": 80, "hostPort": 70000 }]),
        ),
        at(
            "spec.components[0].template.spec.containers[0].ports[0].hostPort",
            "host-port-negative",
            &["greater than or equal to 0"],
            |p| container(p, 0)["ports"] = json!([{ "containerPort": 80, "hostPort": -1 }]),
        ),
        at(
            "spec.components[0].template.spec.initContainers[0].ports[0].containerPort",
            "init-container-port-over-65535",
            &["less than or equal to 65535"],
            |p| {
                let mut init = container_named("init");
                init["ports"] = json!([{ "containerPort": 65536 }]);
                component(p)["template"]["spec"]["initContainers"] = json!([init]);
            },
        ),
        at(
            "spec.components[0].template.metadata.labels[app]",
            "label-value-with-space",
            &["label value must be empty or at most 63 alphanumerics"],
            |p| labels(p)["app"] = json!("my shop"),
        ),
        at(
            "spec.components[0].template.metadata.labels[app]",
            "label-value-trailing-dash",
            &["label value must be empty or at most 63 alphanumerics"],
            |p| labels(p)["app"] = json!("shop-"),
        ),
        at(
            "spec.components[0].template.metadata.labels.app",
            "label-value-64-chars",
            &["Too long", "63"],
            |p| labels(p)["app"] = json!("v".repeat(64)),
        ),
        at(
            "spec.components[0].template.metadata.labels",
            "label-key-with-space",
            &["each key must be a qualified name"],
            |p| labels(p)["my app"] = json!("shop"),
        ),
        at(
            "spec.components[0].template.metadata.labels",
            "label-key-name-64-chars",
            &["each key must be a qualified name"],
            |p| labels(p)["n".repeat(64)] = json!("shop"),
        ),
        at(
            "spec.components[0].template.metadata.labels",
            "label-key-prefix-uppercase",
            &["each key must be a qualified name"],
            |p| labels(p)["Example.com/tier"] = json!("web"),
        ),
        at(
            "spec.components[0].template.metadata.labels",
            "label-key-prefix-254-chars",
            &["each key must be a qualified name"],
            |p| labels(p)[format!("{}/tier", "p".repeat(254))] = json!("web"),
        ),
        at(
            "spec.components[0].template.metadata.labels",
            "label-key-empty-name",
            &["each key must be a qualified name"],
            |p| labels(p)["example.com/"] = json!("web"),
        ),
        at(
            "spec.components[0].template.spec.containers[0].image",
            "container-without-image",
            &["Required value"],
            |p| {
                container(p, 0)
                    .as_object_mut()
                    .expect("container")
                    .remove("image");
            },
        ),
        at(
            "spec.components[0].template.spec.containers[1].image",
            "second-container-with-empty-image",
            &["at least 1 chars long"],
            |p| {
                component(p)["template"]["spec"]["containers"] =
                    json!([container_named("web"), { "name": "side", "image": "" }]);
            },
        ),
        at(
            "spec.components[0].template.spec.initContainers[0].image",
            "init-container-without-image",
            &["Required value"],
            |p| component(p)["template"]["spec"]["initContainers"] = json!([{ "name": "init" }]),
        ),
        at(
            "spec.components[0].template.spec.containers[0].image",
            "image-with-trailing-space",
            &["should match"],
            |p| container(p, 0)["image"] = json!("nginx:1.27 "),
        ),
        at(
            "spec.components[0].template.spec.containers",
            "duplicate-container-names",
            &["container names must be unique"],
            |p| {
                component(p)["template"]["spec"]["containers"] = json!([
                    container_named("web"),
                    container_named("side"),
                    { "name": "web", "image": "other:1" }
                ]);
            },
        ),
        at(
            "spec.components[0].template.spec.initContainers",
            "init-container-named-like-a-container",
            &["container names must be unique across containers and initContainers"],
            |p| {
                component(p)["template"]["spec"]["initContainers"] =
                    json!([container_named("web")]);
            },
        ),
        at(
            "spec.components[0].template.spec.initContainers",
            "duplicate-init-container-names",
            &["container names must be unique across containers and initContainers"],
            |p| {
                component(p)["template"]["spec"]["initContainers"] =
                    json!([container_named("init"), container_named("init")]);
            },
        ),
        at(
            "spec.components[0].template.spec.containers[0].name",
            "container-name-not-dns-label",
            &["container name must be a DNS label"],
            |p| container(p, 0)["name"] = json!("Web_1"),
        ),
        at(
            "spec.components[0].template.spec.containers[0].name",
            "container-name-64-chars",
            &["Too long", "63"],
            |p| container(p, 0)["name"] = json!("w".repeat(64)),
        ),
        at(
            "spec.components[0].template.spec.containers",
            "too-many-containers",
            &["must have at most 64 items"],
            |p| {
                component(p)["template"]["spec"]["containers"] = (0..=MAX_CONTAINERS)
                    .map(|i| container_named(&format!("c{i}")))
                    .collect();
            },
        ),
        at(
            "spec.components[0].template.spec.ephemeralContainers",
            "ephemeral-container-in-template",
            &["must have at most 0 items"],
            |p| {
                component(p)["template"]["spec"]["ephemeralContainers"] =
                    json!([container_named("debug")]);
            },
        ),
        // steps
        case(
            "weight-over-100",
            &[
                "spec.strategy.steps[0].setWeight",
                "less than or equal to 100",
            ],
            |p| steps(p, json!([{ "setWeight": 101 }])),
        ),
        case(
            "weight-negative",
            &[
                "spec.strategy.steps[1].setWeight",
                "greater than or equal to 0",
            ],
            |p| steps(p, json!([{ "pause": {} }, { "setWeight": -5 }])),
        ),
        case(
            "weight-as-string",
            &[
                "spec.strategy.steps[0].setWeight",
                "must be of type integer",
            ],
            |p| steps(p, json!([{ "setWeight": "50%" }])),
        ),
        case(
            "weights-decrease",
            &[
                "spec.strategy.steps",
                "setWeight values must never decrease",
            ],
            |p| {
                steps(
                    p,
                    json!([{ "setWeight": 50 }, { "pause": {} }, { "setWeight": 20 }]),
                );
            },
        ),
        case(
            "step-with-weight-and-pause",
            &[
                "spec.strategy.steps[0]",
                "each step must set exactly one of setWeight, pause, setCanaryScale and setHeaderRoute",
            ],
            |p| steps(p, json!([{ "setWeight": 50, "pause": {} }])),
        ),
        case(
            "empty-step",
            &[
                "spec.strategy.steps[1]",
                "each step must set exactly one of setWeight, pause, setCanaryScale and setHeaderRoute",
            ],
            |p| steps(p, json!([{ "setWeight": 10 }, {}])),
        ),
        case(
            "pause-duration-word",
            &[
                "spec.strategy.steps[0].pause.duration",
                "pause.duration must be a duration",
            ],
            |p| steps(p, json!([{ "pause": { "duration": "soon" } }])),
        ),
        case(
            "pause-duration-without-unit",
            &[
                "spec.strategy.steps[0].pause.duration",
                "pause.duration must be a duration",
            ],
            |p| steps(p, json!([{ "pause": { "duration": "10" } }])),
        ),
        case(
            "pause-duration-negative",
            &[
                "spec.strategy.steps[0].pause.duration",
                "pause.duration must be a duration",
            ],
            |p| steps(p, json!([{ "pause": { "duration": "-5s" } }])),
        ),
        case(
            "pause-duration-overflowing",
            &[
                "spec.strategy.steps[0].pause.duration",
                "pause.duration must be a duration",
            ],
            |p| {
                steps(
                    p,
                    json!([{ "pause": { "duration": "99999999999999999999h" } }]),
                )
            },
        ),
        case(
            "pause-duration-days",
            &[
                "spec.strategy.steps[0].pause.duration",
                "pause.duration must be a duration",
            ],
            |p| steps(p, json!([{ "pause": { "duration": "1d" } }])),
        ),
        case(
            "too-many-steps",
            &["spec.strategy.steps", "must have at most 32 items"],
            |p| {
                let s: Vec<Value> = (0..33).map(|_| json!({ "setWeight": 10 })).collect();
                steps(p, Value::Array(s));
            },
        ),
        // health
        case(
            "progress-deadline-zero",
            &[
                "spec.health.progressDeadlineSeconds",
                "greater than or equal to 1",
            ],
            |p| p["spec"]["health"] = json!({ "progressDeadlineSeconds": 0 }),
        ),
        case(
            "progress-deadline-over-a-day",
            &[
                "spec.health.progressDeadlineSeconds",
                "less than or equal to 86400",
            ],
            |p| p["spec"]["health"] = json!({ "progressDeadlineSeconds": 86401 }),
        ),
        case(
            "max-restarts-negative",
            &["spec.health.maxRestarts", "greater than or equal to 0"],
            |p| p["spec"]["health"] = json!({ "maxRestarts": -1 }),
        ),
        case(
            "detect-pod-failures-as-string",
            &["spec.health.detectPodFailures", "must be of type boolean"],
            |p| p["spec"]["health"] = json!({ "detectPodFailures": "yes" }),
        ),
        // prometheus gates
        case(
            "prometheus-address-without-scheme",
            &[
                "spec.health.prometheus[0].address",
                "prometheus address must be an http:// or https:// URL",
            ],
            |p| with_prometheus(p, |g| g["address"] = json!("prometheus:9090")),
        ),
        case(
            "prometheus-empty-query",
            &["spec.health.prometheus[0].query", "at least 1 chars"],
            |p| with_prometheus(p, |g| g["query"] = json!("")),
        ),
        case(
            "prometheus-threshold-without-operator",
            &[
                "spec.health.prometheus[0].threshold",
                "threshold must be an operator",
            ],
            |p| with_prometheus(p, |g| g["threshold"] = json!("0.05")),
        ),
        case(
            "prometheus-threshold-unknown-operator",
            &[
                "spec.health.prometheus[0].threshold",
                "threshold must be an operator",
            ],
            |p| with_prometheus(p, |g| g["threshold"] = json!("~ 3")),
        ),
        case(
            "prometheus-threshold-not-a-number",
            &[
                "spec.health.prometheus[0].threshold",
                "threshold must be an operator",
            ],
            |p| with_prometheus(p, |g| g["threshold"] = json!("< lots")),
        ),
        case(
            "prometheus-threshold-missing",
            &["spec.health.prometheus[0].threshold: Required value"],
            |p| {
                with_prometheus(p, |g| {
                    g.as_object_mut().expect("gate").remove("threshold");
                });
            },
        ),
        case(
            "prometheus-interval-word",
            &[
                "spec.health.prometheus[0].interval",
                "interval must be a duration",
            ],
            |p| with_prometheus(p, |g| g["interval"] = json!("often")),
        ),
        case(
            "prometheus-interval-without-unit",
            &[
                "spec.health.prometheus[0].interval",
                "interval must be a duration",
            ],
            |p| with_prometheus(p, |g| g["interval"] = json!("30")),
        ),
        case(
            "prometheus-failure-limit-negative",
            &[
                "spec.health.prometheus[0].failureLimit",
                "greater than or equal to 0",
            ],
            |p| with_prometheus(p, |g| g["failureLimit"] = json!(-1)),
        ),
        case(
            "prometheus-inconclusive-limit-too-large",
            &[
                "spec.health.prometheus[0].inconclusiveLimit",
                "less than or equal to 100",
            ],
            |p| with_prometheus(p, |g| g["inconclusiveLimit"] = json!(101)),
        ),
        case(
            "prometheus-timeout-zero",
            &[
                "spec.health.prometheus[0].timeoutSeconds",
                "greater than or equal to 1",
            ],
            |p| with_prometheus(p, |g| g["timeoutSeconds"] = json!(0)),
        ),
        case(
            "job-gate-namespace",
            &[
                "spec.health.jobs[0].template.metadata.namespace",
                "template.metadata.namespace must not be set",
            ],
            |p| {
                with_job(p, |g| {
                    g["template"]["metadata"] = json!({"namespace": "other"})
                })
            },
        ),
        case(
            "job-gate-name-not-dns-label",
            &["spec.health.jobs[0].name", "gate name must be a DNS label"],
            |p| with_job(p, |g| g["name"] = json!("Load Test")),
        ),
        case(
            "job-gate-without-template",
            &["spec.health.jobs[0].template", "Required value"],
            |p| {
                with_job(p, |g| {
                    g.as_object_mut().expect("gate").remove("template");
                })
            },
        ),
        case(
            "job-gate-without-containers",
            &[
                "spec.health.jobs[0].template.spec.template.spec.containers",
                "should have at least 1 items",
            ],
            |p| {
                with_job(p, |g| {
                    g["template"]["spec"]["template"]["spec"]["containers"] = json!([])
                })
            },
        ),
        case(
            "job-gate-container-without-image",
            &[
                "spec.health.jobs[0].template.spec.template.spec.containers[0].image",
                "Required value",
            ],
            |p| {
                with_job(p, |g| {
                    g["template"]["spec"]["template"]["spec"]["containers"][0]
                        .as_object_mut()
                        .expect("container")
                        .remove("image");
                })
            },
        ),
        case(
            "job-gate-restart-always",
            &[
                "spec.health.jobs[0].template.spec.template.spec.restartPolicy",
                "Unsupported value",
            ],
            |p| {
                with_job(p, |g| {
                    g["template"]["spec"]["template"]["spec"]["restartPolicy"] = json!("Always")
                })
            },
        ),
        case(
            "job-gate-timeout-zero",
            &[
                "spec.health.jobs[0].timeoutSeconds",
                "greater than or equal to 1",
            ],
            |p| with_job(p, |g| g["timeoutSeconds"] = json!(0)),
        ),
        at(
            "spec.health",
            "job-gate-name-of-a-webhook",
            &[
                "health: gate names must be unique across gates and the deprecated prometheus, webhooks, jobs and templates lists",
            ],
            |p| {
                p["spec"]["health"] =
                    json!({ "webhooks": [webhook_gate("smoke")], "jobs": [job_gate("smoke")] });
            },
        ),
        at(
            "spec.health.gates[0]",
            "gate-with-two-kinds",
            &[
                "a gate holds exactly one kind: set one of prometheus, webhook, job, template and analysis",
            ],
            |p| {
                let mut g = in_gates(webhook_gate("smoke"), "webhook");
                g["job"] = job_gate("x");
                g["job"].as_object_mut().unwrap().remove("name");
                p["spec"]["health"] = json!({ "gates": [g] });
            },
        ),
        at(
            "spec.health.gates[0].analysis.metrics[0]",
            "analysis-metric-with-query-and-counts",
            &["a metric is either a query or failed and total"],
            |p| {
                p["spec"]["health"] = json!({ "gates": [analysis_gate(json!(
                    {"name": "latency", "query": "q", "failed": "f", "total": "t"}
                ))] });
            },
        ),
        at(
            "spec.health.gates[0].analysis.metrics[0].tolerance",
            "analysis-tolerance-not-a-percentage",
            &["tolerance must be a percentage such as 10% or 0.5%"],
            |p| {
                p["spec"]["health"] = json!({ "gates": [analysis_gate(json!(
                    {"name": "latency", "query": "q", "tolerance": "0.1"}
                ))] });
            },
        ),
        at(
            "spec.health.gates[0].analysis",
            "analysis-marginal-above-pass",
            &["analysis.marginal must not be above analysis.pass"],
            |p| {
                let mut g = analysis_gate(json!({"name": "latency", "query": "q"}));
                g["analysis"]["pass"] = json!(80);
                g["analysis"]["marginal"] = json!(90);
                p["spec"]["health"] = json!({ "gates": [g] });
            },
        ),
        at(
            "spec.health.gates[0]",
            "gate-without-kind",
            &["a gate holds exactly one kind"],
            |p| p["spec"]["health"] = json!({ "gates": [{ "name": "nothing" }] }),
        ),
        at(
            "spec.health.gates[0]",
            "job-gate-with-auth",
            &["auth, headers and tls apply to prometheus, webhook and analysis gates only"],
            |p| {
                let mut g = in_gates(job_gate("load"), "job");
                g["headers"] = json!([{ "name": "X-Team", "value": "a" }]);
                p["spec"]["health"] = json!({ "gates": [g] });
            },
        ),
        at(
            "spec.health",
            "gate-name-in-gates-and-webhooks",
            &[
                "health: gate names must be unique across gates and the deprecated prometheus, webhooks, jobs and templates lists",
            ],
            |p| {
                p["spec"]["health"] = json!({
                    "gates": [in_gates(prometheus_gate("check"), "prometheus")],
                    "webhooks": [webhook_gate("check")],
                });
            },
        ),
        at(
            "spec.health",
            "duplicate-names-in-gates",
            &[
                "health: gate names must be unique across gates and the deprecated prometheus, webhooks, jobs and templates lists",
            ],
            |p| {
                p["spec"]["health"] = json!({ "gates": [
                    in_gates(webhook_gate("check"), "webhook"),
                    in_gates(job_gate("check"), "job"),
                ]});
            },
        ),
        at(
            "spec.health",
            "gate-component-unknown",
            &["health: a gate's component must name one of spec.components"],
            |p| {
                let mut g = in_gates(webhook_gate("smoke"), "webhook");
                g["component"] = json!("nope");
                p["spec"]["health"] = json!({ "gates": [g] });
            },
        ),
        at(
            "spec.health.gates[0].prometheus.threshold",
            "gate-threshold-without-operator",
            &["threshold must be an operator"],
            |p| {
                let mut g = in_gates(prometheus_gate("errors"), "prometheus");
                g["prometheus"]["threshold"] = json!("0.05");
                p["spec"]["health"] = json!({ "gates": [g] });
            },
        ),
        at(
            "spec.health.gates[0].job.template.metadata.namespace",
            "gate-job-in-another-namespace",
            &["template.metadata.namespace must not be set"],
            |p| {
                let mut g = in_gates(job_gate("load"), "job");
                g["job"]["template"]["metadata"]["namespace"] = json!("other");
                p["spec"]["health"] = json!({ "gates": [g] });
            },
        ),
        case(
            "too-many-gates",
            &["spec.health.gates", "must have at most 16 items"],
            |p| {
                let gates: Vec<Value> = (0..17)
                    .map(|i| in_gates(webhook_gate(&format!("g{i}")), "webhook"))
                    .collect();
                p["spec"]["health"] = json!({ "gates": gates });
            },
        ),
        case(
            "prometheus-gate-name-not-dns-label",
            &[
                "spec.health.prometheus[0].name",
                "gate name must be a DNS label",
            ],
            |p| with_prometheus(p, |g| g["name"] = json!("Error Rate")),
        ),
        case(
            "duplicate-prometheus-gates",
            &[
                "spec.health",
                "gate names must be unique across gates and the deprecated prometheus, webhooks, jobs and templates lists",
            ],
            |p| {
                p["spec"]["health"] =
                    json!({ "prometheus": [prometheus_gate("errors"), prometheus_gate("errors")] });
            },
        ),
        case(
            "too-many-prometheus-gates",
            &["spec.health.prometheus", "must have at most 8 items"],
            |p| {
                let gates: Vec<Value> = (0..9).map(|i| prometheus_gate(&format!("g{i}"))).collect();
                p["spec"]["health"] = json!({ "prometheus": gates });
            },
        ),
        // webhook gates
        case(
            "duplicate-webhook-gates",
            &[
                "spec.health",
                "gate names must be unique across gates and the deprecated prometheus, webhooks, jobs and templates lists",
            ],
            |p| {
                p["spec"]["health"] =
                    json!({ "webhooks": [webhook_gate("smoke"), webhook_gate("smoke")] });
            },
        ),
        case(
            "gate-name-shared-by-prometheus-and-webhook",
            &[
                "spec.health",
                "gate names must be unique across gates and the deprecated prometheus, webhooks, jobs and templates lists",
            ],
            |p| {
                p["spec"]["health"] = json!({
                    "prometheus": [prometheus_gate("check")], "webhooks": [webhook_gate("check")]
                });
            },
        ),
        case(
            "webhook-url-ftp",
            &[
                "spec.health.webhooks[0].url",
                "webhook url must be an http:// or https:// URL",
            ],
            |p| with_webhook(p, |g| g["url"] = json!("ftp://hooks.example.com/check")),
        ),
        case(
            "webhook-url-with-space",
            &[
                "spec.health.webhooks[0].url",
                "webhook url must be an http:// or https:// URL",
            ],
            |p| with_webhook(p, |g| g["url"] = json!("https://hooks.example.com/a check")),
        ),
        case(
            "webhook-timeout-zero",
            &[
                "spec.health.webhooks[0].timeoutSeconds",
                "greater than or equal to 1",
            ],
            |p| with_webhook(p, |g| g["timeoutSeconds"] = json!(0)),
        ),
        case(
            "webhook-timeout-100",
            &[
                "spec.health.webhooks[0].timeoutSeconds",
                "less than or equal to 60",
            ],
            |p| with_webhook(p, |g| g["timeoutSeconds"] = json!(100)),
        ),
        case(
            "webhook-retries-11",
            &[
                "spec.health.webhooks[0].retries",
                "less than or equal to 10",
            ],
            |p| with_webhook(p, |g| g["retries"] = json!(11)),
        ),
        case(
            "webhook-retries-negative",
            &[
                "spec.health.webhooks[0].retries",
                "greater than or equal to 0",
            ],
            |p| with_webhook(p, |g| g["retries"] = json!(-1)),
        ),
        case(
            "webhook-gate-name-too-long",
            &["spec.health.webhooks[0].name", "Too long", "40"],
            |p| with_webhook(p, |g| g["name"] = json!("w".repeat(41))),
        ),
        // the rest of the spec, and the plan itself
        case(
            "revision-history-limit-negative",
            &["spec.revisionHistoryLimit", "greater than or equal to 0"],
            |p| p["spec"]["revisionHistoryLimit"] = json!(-1),
        ),
        case(
            "revision-history-limit-too-large",
            &["spec.revisionHistoryLimit", "less than or equal to 50"],
            |p| p["spec"]["revisionHistoryLimit"] = json!(51),
        ),
        case(
            "paused-as-string",
            &["spec.paused", "must be of type boolean"],
            |p| p["spec"]["paused"] = json!("true"),
        ),
        case(
            "rollback-automatic-as-string",
            &["spec.rollback.automatic", "must be of type boolean"],
            |p| p["spec"]["rollback"] = json!({ "automatic": "no" }),
        ),
        at(
            "spec.components[0].baseline",
            "baseline-on-a-stateful-set",
            &["baseline is for Deployment components only"],
            |p| {
                component(p)["baseline"] = json!(true);
                component(p)["kind"] = json!("StatefulSet");
            },
        ),
        at(
            "spec.strategy.blueGreen",
            "baseline-with-blue-green",
            &["a baseline stands beside canary steps"],
            |p| {
                component(p)["baseline"] = json!(true);
                component(p)["traffic"] = json!({ "port": 80 });
                p["spec"]["strategy"] = json!({ "blueGreen": {} });
            },
        ),
        at(
            "spec.components",
            "baseline-service-name-too-long",
            &["a baseline's Service <plan>-<component>-baseline must be a DNS-1035 name"],
            |p| {
                p["metadata"]["name"] = json!(format!("b{}", "x".repeat(40)));
                component(p)["name"] = json!("w".repeat(13));
                component(p)["baseline"] = json!(true);
                component(p)["traffic"] = json!({
                    "port": 80, "stableService": "s", "canaryService": "c",
                    "gatewayAPI": { "parentRefs": [{ "name": "gw" }] }
                });
            },
        ),
        at(
            "spec.strategy.steps",
            "canary-scale-without-router",
            &["setCanaryScale and setHeaderRoute need a router"],
            |p| steps(p, json!([{ "setCanaryScale": { "replicas": 1 } }])),
        ),
        case(
            "canary-scale-two-ways",
            &["setCanaryScale must set exactly one of replicas, weight and matchTrafficWeight"],
            |p| {
                component(p)["traffic"] =
                    json!({ "port": 80, "gatewayAPI": { "parentRefs": [{ "name": "gw" }] } });
                steps(
                    p,
                    json!([{ "setCanaryScale": { "replicas": 1, "weight": 5 } }]),
                );
            },
        ),
        case(
            "header-name-not-a-token",
            &["header name must be an HTTP token"],
            |p| {
                component(p)["traffic"] =
                    json!({ "port": 80, "gatewayAPI": { "parentRefs": [{ "name": "gw" }] } });
                steps(
                    p,
                    json!([{ "setHeaderRoute": { "headers": [{ "name": "x canary", "value": "1" }] } }]),
                );
            },
        ),
        at(
            "spec.components[0].traffic.canaryService",
            "same-stable-and-canary-service",
            &["stableService and canaryService must differ"],
            |p| {
                component(p)["traffic"] =
                    json!({ "port": 80, "stableService": "web", "canaryService": "web" })
            },
        ),
        at(
            "spec.components[0].traffic.traefik",
            "two-routers",
            &["traffic: set one router, gatewayAPI or traefik, not both"],
            |p| {
                component(p)["traffic"] = json!({
                    "port": 80,
                    "gatewayAPI": { "parentRefs": [{ "name": "gw" }] },
                    "traefik": {}
                })
            },
        ),
        case(
            "traefik-path-prefix-with-backquote",
            &[
                "spec.components[0].traffic.traefik.pathPrefix",
                "traefik.pathPrefix must start with '/' and have no backquote",
            ],
            |p| {
                component(p)["traffic"] =
                    json!({ "port": 80, "traefik": { "pathPrefix": "/a`) || Path(`/b" } })
            },
        ),
        case(
            "traefik-ingress-route-not-a-dns-name",
            &[
                "spec.components[0].traffic.traefik.ingressRoute",
                "traefik.ingressRoute must be a DNS subdomain name",
            ],
            |p| {
                component(p)["traffic"] =
                    json!({ "port": 80, "traefik": { "ingressRoute": "Shop_Web" } })
            },
        ),
        case(
            "hostname-not-a-dns-name",
            &[
                "spec.components[0].traffic.gatewayAPI.hostnames[0]",
                "should match",
            ],
            |p| component(p)["traffic"] = json!({ "port": 80, "gatewayAPI": { "parentRefs": [{ "name": "gw" }], "hostnames": ["Shop_Example"] } }),
        ),
        at(
            "spec.components",
            "default-service-names-too-long",
            &["the default Service names"],
            |p| {
                p["metadata"]["name"] = json!("p".repeat(60));
                component(p)["traffic"] = json!({ "port": 80 });
            },
        ),
        at(
            "metadata.name",
            "plan-name-over-63",
            // The schema's maxLength answers before the CEL rule can.
            &["metadata.name: Too long: may not be more than 63 bytes"],
            |p| p["metadata"]["name"] = json!("p".repeat(64)),
        ),
        case("spec-missing", &["spec: Required value"], |p| {
            p.as_object_mut().expect("plan").remove("spec");
        }),
        applied(case(
            "unknown-field-applied-strictly",
            &[".spec.strategy.canary", "field not declared in schema"],
            |p| p["spec"]["strategy"]["canary"] = json!({ "steps": [] }),
        )),
        applied(case(
            "replicas-as-string-applied",
            // components is a map list: server-side apply names an entry by its key
            &[
                ".spec.components[name=\"web\"].replicas",
                "expected numeric",
            ],
            |p| component(p)["replicas"] = json!("two"),
        )),
    ]
}

#[tokio::test]
async fn refuses_invalid_plans_naming_field_and_rule() {
    let client = client().await;
    crd::install(&client).await;
    let ns = test_namespace(&client, "adm-invalid").await;
    let api = plans(&client, &ns);

    let cases = invalid_cases();
    // Distinct cases: distinct names and distinct documents.
    let names: BTreeSet<&str> = cases.iter().map(|c| c.name).collect();
    assert_eq!(names.len(), cases.len(), "case names must be unique");
    let mut docs = BTreeSet::new();
    for c in &cases {
        let mut plan = minimal("same-name");
        (c.edit)(&mut plan);
        if plan["metadata"]["name"] == json!("same-name") {
            plan["metadata"]["name"] = json!("x");
        }
        assert!(
            docs.insert(plan.to_string()),
            "case {} repeats another case",
            c.name
        );
    }
    assert!(cases.len() >= 30, "only {} invalid cases", cases.len());

    let mut problems = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let mut plan = minimal(&format!("invalid-{i}"));
        (c.edit)(&mut plan);
        match submit(&api, &plan, c.via).await {
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
                if c.via == Via::Create && status.code != 422 {
                    problems.push(format!(
                        "{}: HTTP {} instead of 422 Unprocessable Entity: {}",
                        c.name, status.code, status.message
                    ));
                }
            }
            Err(e) => problems.push(format!("{}: not an API refusal: {e}", c.name)),
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {} invalid plans were not refused as expected:\n{}",
        problems.len(),
        cases.len(),
        problems.join("\n")
    );
}

/// Status lives in a subresource: the operator's status writes never bump
/// `metadata.generation` (so never start a rollout), and status sent with the
/// main resource is ignored.
#[tokio::test]
async fn status_is_a_subresource() {
    let client = client().await;
    crd::install(&client).await;
    let ns = test_namespace(&client, "adm-status").await;
    let api: Api<ReleasePlan> = Api::namespaced(client.clone(), &ns);
    let plan: ReleasePlan = serde_json::from_value(minimal("status")).expect("plan");
    let created = api
        .create(&PostParams::default(), &plan)
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    // No status is written on create: the plan reads with the CRD's default
    // one, "generation 0 observed", which tools take as not yet reconciled.
    let status = created.status.as_ref().expect("the CRD defaults status");
    assert_eq!(status.observed_generation, Some(0));
    assert_eq!(status.phase, releaseplan::api::Phase::Pending);
    assert!(status.conditions.is_empty());

    let status = ReleasePlanStatus {
        phase: releaseplan::api::Phase::RollingOut,
        observed_generation: Some(1),
        current_revision: Some("abc".into()),
        current_step: 1,
        weight: 10,
        ..ReleasePlanStatus::default()
    };
    let patched = api
        .patch_status(
            "status",
            &PatchParams::apply(crd::MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": ReleasePlan::api_version(&()),
                "kind": ReleasePlan::kind(&()),
                "status": status,
            })),
        )
        .await
        .expect("status patch");
    assert_eq!(
        patched.metadata.generation,
        Some(1),
        "status writes keep the generation"
    );
    let stored = patched.status.expect("status stored");
    assert_eq!(stored.phase, releaseplan::api::Phase::RollingOut);
    assert_eq!(stored.weight, 10);

    // A spec change bumps the generation; status sent along with it is ignored.
    let mut changed = api.get("status").await.expect("get");
    changed.spec.paused = true;
    changed.status = Some(ReleasePlanStatus::default());
    let replaced = api
        .replace("status", &PostParams::default(), &changed)
        .await
        .expect("replace");
    assert_eq!(replaced.metadata.generation, Some(2));
    assert_eq!(
        replaced.status.map(|s| s.phase),
        Some(releaseplan::api::Phase::RollingOut),
        "status is only written through the status subresource"
    );
}

/// `kubectl releaseplan lint` offline (the CRD's structural schema, its CEL
/// rules evaluated by kube-cel, then the operator's `check_spec`) and the
/// API server agree: every plan the API server refuses above, lint refuses;
/// every plan it accepts above, lint accepts. Lint says the API server's
/// words (every expected phrase) for at least half of the refusals: the CEL
/// rules' messages are the same; the structural schema's are lint's own.
#[test]
fn lint_offline_agrees_with_the_api_server_on_every_plan() {
    use releaseplan::cli::lint::{Verdict, check_document};
    let mut problems = Vec::new();
    let cases = invalid_cases();
    let mut same_words = 0;
    for (i, c) in cases.iter().enumerate() {
        let mut plan = minimal(&format!("invalid-{i}"));
        (c.edit)(&mut plan);
        match check_document(&plan) {
            Verdict::Invalid(found) => {
                let text: Vec<String> = found.iter().map(ToString::to_string).collect();
                let text = text.join("; ");
                if c.expect.iter().all(|e| text.contains(e)) {
                    same_words += 1;
                }
            }
            other => problems.push(format!(
                "{}: the API server refuses it, lint says {other:?}",
                c.name
            )),
        }
    }
    let mut valid: Vec<(String, Value)> = vec![
        ("minimal".into(), minimal("minimal")),
        ("full".into(), full("full")),
        ("full-gates".into(), full_in_gates("full-gates")),
    ];
    for file in [
        "full.yaml",
        "job-gate.yaml",
        "traffic-canary.yaml",
        "blue-green.yaml",
        "autoscaled.yaml",
    ] {
        valid.push((file.into(), example(file)));
    }
    for (name, edit) in limit_cases() {
        let mut plan = minimal(name);
        edit(&mut plan);
        valid.push((name.into(), plan));
    }
    for (name, plan) in &valid {
        if let Verdict::Invalid(p) = check_document(plan) {
            problems.push(format!(
                "{name}: the API server accepts it, lint refuses it: {p:?}"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "lint and the API server disagree on {} plans:\n{}",
        problems.len(),
        problems.join("\n")
    );
    // Most refusals are CEL rules' or the schema's, said the same way.
    assert!(
        same_words * 2 >= cases.len(),
        "lint says the API server's words for only {same_words} of {} plans",
        cases.len()
    );
}
