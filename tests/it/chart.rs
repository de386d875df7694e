//! The Helm chart in charts/releaseplan: its CRD copy, `helm lint`, what it
//! renders, that the API server accepts every rendered object (server-side
//! apply), and that the operator completes rollouts holding nothing but the
//! chart's RBAC (a token of the chart's ServiceAccount), storing and pruning
//! the revisions' templates (ControllerRevisions) with it.
//!
//! The cluster tests need the local cluster (`e2e/cluster-up.sh chart` then
//! `. .e2e-run/chart/env`, or `make test`), and helm and kubectl from
//! `make tools` (on PATH, or in ~/.cache/releaseplan).

use crate::support;

use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use releaseplan::api::Phase;
use releaseplan::controller::router::Dispatch as _;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;
use support::fixtures::{plan, template, web};
use support::operator::Operator;
use support::plans::{by_image, create, revisions, set_components, wait_phase};
use support::tools::{helm_bin, k8s_version, kubectl_bin, output, run};
use support::{WAIT, cluster, crd, plans, wait_until};

/// Field manager of the tests' server-side applies of the rendered chart.
const MANAGER: &str = "releaseplan-chart-tests";

fn chart_dir() -> PathBuf {
    cluster::repo_root().join("charts/releaseplan")
}

/// The Kubernetes version `helm template` renders for: the local control
/// plane's. (A helm built from source without its release ldflags assumes
/// v1.20, below the chart's kubeVersion; Argo CD passes `--kube-version` too.)
fn kube_version() -> String {
    k8s_version()
}

/// The image repository the tests render with: the chart requires one.
const REPOSITORY: &str = "image.repository=registry.example.com/releaseplan";

fn helm(args: &[&str]) -> String {
    run(&helm_bin(), args, None)
}

/// `helm template` arguments: for the local control plane's Kubernetes
/// version, with an image repository unless `sets` name one.
fn template_args(release: &str, namespace: &str, sets: &[&str], include_crds: bool) -> Vec<String> {
    let chart = chart_dir();
    let chart = chart.to_str().expect("utf-8 path");
    let mut args: Vec<String> = ["template", release, chart, "--namespace", namespace]
        .iter()
        .map(|a| (*a).to_string())
        .collect();
    args.extend(["--kube-version".to_string(), kube_version()]);
    if include_crds {
        args.push("--include-crds".into());
    }
    if !sets.iter().any(|s| s.starts_with("image.repository=")) {
        args.extend(["--set".to_string(), REPOSITORY.to_string()]);
    }
    for s in sets {
        args.extend(["--set".to_string(), (*s).to_string()]);
    }
    args
}

/// `helm template` of the chart: the manifest text.
fn render_text(release: &str, namespace: &str, sets: &[&str], include_crds: bool) -> String {
    let args = template_args(release, namespace, sets, include_crds);
    helm(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// `helm template` that must fail: its error output.
fn render_error(sets: &[&str]) -> String {
    let args = template_args("rp", "rp-system", sets, false);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = output(&helm_bin(), &args, None);
    assert!(
        !out.status.success(),
        "helm {} rendered, but should have failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The rendered objects (templates only, not the CRD), as JSON values.
fn render(release: &str, namespace: &str, sets: &[&str]) -> Vec<Value> {
    parse_docs(&render_text(release, namespace, sets, false))
}

fn parse_docs(text: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(text)
        .map(|d| {
            serde::Deserialize::deserialize(d)
                .unwrap_or_else(|e| panic!("the chart renders invalid YAML: {e}"))
        })
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn kind_of(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or_default()
}

fn of_kind<'a>(objs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objs.iter().filter(|o| kind_of(o) == kind).collect()
}

fn one<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(objs, kind);
    assert_eq!(found.len(), 1, "expected one {kind}, got {}", found.len());
    found[0]
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

/// (apiGroup, resource) -> sorted verbs, of every rule of a (Cluster)Role.
fn rules(role: &Value) -> Vec<(String, String, Vec<String>)> {
    let mut out = Vec::new();
    for rule in role["rules"].as_array().into_iter().flatten() {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                let mut verbs = strings(&rule["verbs"]);
                verbs.sort();
                out.push((group.clone(), resource, verbs));
            }
        }
    }
    out.sort();
    out
}

/// The verbs on ConfigMaps and Secrets of config versioning: cached
/// (list, watch), a source read to copy it (get), copies created and pruned.
const CONFIG_VERBS: &[&str] = &["create", "delete", "get", "list", "watch"];

fn expected_rules() -> Vec<(String, String, Vec<String>)> {
    let mut want: Vec<(String, String, Vec<String>)> = [
        (
            "releaseplan.io",
            "releaseplans",
            &["get", "list", "patch", "watch"][..],
        ),
        ("releaseplan.io", "releaseplans/status", &["update"]),
        ("releaseplan.io", "gatetemplates", &["get", "list", "watch"]),
        (
            "apps",
            "deployments",
            // get: a Deployment a component adopts, read by name until it is marked.
            &["create", "delete", "get", "list", "patch", "watch"],
        ),
        (
            "apps",
            "statefulsets",
            &["create", "delete", "get", "list", "patch", "watch"],
        ),
        (
            "apps",
            "daemonsets",
            &["create", "delete", "get", "list", "patch", "watch"],
        ),
        (
            "apps",
            "controllerrevisions",
            &["create", "delete", "list", "patch", "watch"],
        ),
        ("", "pods", &["delete", "list", "watch"]),
        ("", "services", &["create", "get", "list", "patch", "watch"]),
        (
            "inference.networking.k8s.io",
            "inferencepools",
            &["create", "get", "patch"],
        ),
        ("batch", "jobs", &["create", "delete", "list", "watch"]),
        ("events.k8s.io", "events", &["create"]),
        (
            "releaseplan.io",
            "componentscales",
            &["create", "delete", "get", "list", "watch"],
        ),
        ("releaseplan.io", "componentscales/status", &["patch"]),
        (
            "autoscaling",
            "horizontalpodautoscalers",
            &["create", "delete", "get", "list", "patch", "watch"],
        ),
        // Each namespace's notification settings, by name (resourceNames):
        // config versioning's rules are in a ClusterRole of their own, bound
        // only in the namespaces `config.namespaces` lists.
        ("", "configmaps", &["get"]),
    ]
    .iter()
    .map(|(g, r, v)| {
        (
            g.to_string(),
            r.to_string(),
            v.iter().map(std::string::ToString::to_string).collect(),
        )
    })
    .collect();
    // One rule per router, as the code declares it.
    for kind in releaseplan::api::RouterKind::ALL {
        let (group, resource) = kind.rbac();
        let mut verbs: Vec<String> = releaseplan::controller::router::VERBS
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        verbs.sort();
        want.push((group, resource, verbs));
    }
    want.sort();
    want
}

/// Reading ClusterGateTemplates: the operator's one cluster-wide rule when it
/// watches one namespace.
fn cluster_template_rules() -> Vec<(String, String, Vec<String>)> {
    let read = || vec!["get".to_string(), "list".to_string(), "watch".to_string()];
    let mut rules = vec![
        (
            "releaseplan.io".to_string(),
            "clustergatetemplates".to_string(),
            read(),
        ),
        (
            "releaseplan.io".to_string(),
            "gatepolicies".to_string(),
            read(),
        ),
        (
            "releaseplan.io".to_string(),
            "releasefreezes".to_string(),
            read(),
        ),
        (
            String::new(),
            "namespaces".to_string(),
            vec!["list".to_string(), "watch".to_string()],
        ),
    ];
    rules.sort();
    rules
}

/// What the operator's ClusterRole holds when it watches every namespace.
fn expected_cluster_rules() -> Vec<(String, String, Vec<String>)> {
    let mut want = expected_rules();
    want.extend(cluster_template_rules());
    want.sort();
    want
}

/// The ClusterRole bound to the operator (not one of the aggregated ones).
fn operator_cluster_role(objs: &[Value]) -> &Value {
    let found: Vec<&Value> = of_kind(objs, "ClusterRole")
        .into_iter()
        .filter(|r| aggregated_to(r).is_empty())
        .collect();
    assert_eq!(found.len(), 1, "one operator ClusterRole: {found:?}");
    found[0]
}

/// The built-in roles (`view`, `edit`, `admin`) a ClusterRole aggregates
/// into, by its `rbac.authorization.k8s.io/aggregate-to-*` labels.
fn aggregated_to(role: &Value) -> Vec<String> {
    let mut to: Vec<String> = role["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| v.as_str() == Some("true"))
        .filter_map(|(k, _)| k.strip_prefix("rbac.authorization.k8s.io/aggregate-to-"))
        .map(String::from)
        .collect();
    to.sort();
    to
}

/// The rules of the gate credentials Role: get, by name, in the release namespace.
fn credential_rules() -> Vec<(String, String, Vec<String>)> {
    vec![
        ("".into(), "configmaps".into(), vec!["get".into()]),
        ("".into(), "secrets".into(), vec!["get".into()]),
    ]
}

/// The object of `kind` whose name ends with `suffix`.
fn named<'a>(objs: &'a [Value], kind: &str, suffix: &str) -> &'a Value {
    let found: Vec<&Value> = of_kind(objs, kind)
        .into_iter()
        .filter(|o| {
            o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with(suffix))
        })
        .collect();
    assert_eq!(found.len(), 1, "one {kind} named *{suffix}: {found:?}");
    found[0]
}

fn lease_rules() -> Vec<(String, String, Vec<String>)> {
    vec![(
        "coordination.k8s.io".into(),
        "leases".into(),
        ["create", "get", "list", "patch", "watch"]
            .iter()
            .map(std::string::ToString::to_string)
            .collect(),
    )]
}

// ------------------------------------------------------------ no cluster

#[test]
fn the_charts_crd_is_the_checked_in_crd() {
    let root = cluster::repo_root();
    for file in [
        "releaseplan.yaml",
        "gatetemplates.yaml",
        "componentscales.yaml",
        "gatepolicies.yaml",
        "releasefreezes.yaml",
    ] {
        let checked_in = std::fs::read(root.join("crds").join(file))
            .unwrap_or_else(|e| panic!("cannot read crds/{file}: {e}"));
        let copy = std::fs::read(root.join("charts/releaseplan/crds").join(file))
            .unwrap_or_else(|e| panic!("cannot read charts/releaseplan/crds/{file}: {e}"));
        assert!(
            checked_in == copy,
            "charts/releaseplan/crds/{file} differs from crds/{file}: \
             run `make chart-crd` and commit it"
        );
    }
}

/// Key paths of values.yaml down to leaves (and empty maps), e.g. `image.tag`.
fn value_paths(prefix: &str, v: &yaml_serde::Value, out: &mut Vec<String>) {
    match v {
        yaml_serde::Value::Mapping(m) if !m.is_empty() => {
            for (k, child) in m {
                let k = k.as_str().expect("string keys in values.yaml");
                let path = if prefix.is_empty() {
                    k.to_string()
                } else {
                    format!("{prefix}.{k}")
                };
                value_paths(&path, child, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

#[test]
fn every_value_is_documented_in_the_readme_and_values_yaml() {
    let dir = chart_dir();
    let text = std::fs::read_to_string(dir.join("values.yaml")).expect("values.yaml");
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("README.md");
    let values: yaml_serde::Value = yaml_serde::from_str(&text).expect("values.yaml is YAML");
    let mut paths = Vec::new();
    value_paths("", &values, &mut paths);
    assert!(paths.len() > 30, "{paths:?}");
    // A value is documented by its own row, or by a row of a parent map
    // (`resources`, `securityContext`: documented whole).
    let undocumented: Vec<&String> = paths
        .iter()
        .filter(|p| {
            let parts: Vec<&str> = p.split('.').collect();
            !(1..=parts.len()).any(|n| readme.contains(&format!("| `{}` |", parts[..n].join("."))))
        })
        .collect();
    assert!(
        undocumented.is_empty(),
        "values missing from the Values table of charts/releaseplan/README.md: {undocumented:?}"
    );
    // Every top-level key has a comment right above it (or above its first child).
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with(|c: char| c.is_ascii_alphabetic()) {
            let above = i.checked_sub(1).map_or("", |j| lines[j].trim_start());
            let below = lines.get(i + 1).map_or("", |l| l.trim_start());
            assert!(
                above.starts_with('#') || below.starts_with('#'),
                "values.yaml line {}: `{line}` has no comment",
                i + 1
            );
        }
    }
}

#[test]
fn helm_lint_passes() {
    let chart = chart_dir();
    let chart = chart.to_str().expect("utf-8 path");
    helm(&["lint", "--strict", chart]);
    helm(&[
        "lint",
        "--strict",
        chart,
        "--set",
        "watchNamespace=apps",
        "--set",
        "serviceMonitor.enabled=true",
    ]);
}

#[test]
fn default_values_render_least_privilege_rbac_and_a_restricted_deployment() {
    let objs = render("rp", "rp-system", &[]);
    let mut kinds: Vec<&str> = objs.iter().map(kind_of).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "GatePolicy",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ],
        "no CRD among the templates, no ServiceMonitor by default"
    );
    for o in &objs {
        if !matches!(
            kind_of(o),
            "ClusterRole" | "ClusterRoleBinding" | "GatePolicy"
        ) {
            assert_eq!(o["metadata"]["namespace"], "rp-system", "{o}");
        }
    }

    // RBAC: exactly what the operator uses; leases only in the release namespace.
    assert_eq!(
        rules(operator_cluster_role(&objs)),
        expected_cluster_rules()
    );
    let role = named(&objs, "Role", "-leader-election");
    assert_eq!(role["metadata"]["namespace"], "rp-system");
    assert_eq!(rules(role), lease_rules());
    // Secrets and ConfigMaps: get only, in the release namespace only, in
    // the gate credentials Role only.
    let credentials = named(&objs, "Role", "-gate-credentials");
    assert_eq!(credentials["metadata"]["namespace"], "rp-system");
    assert_eq!(rules(credentials), credential_rules());
    for rule in credentials["rules"].as_array().unwrap() {
        assert!(rule.get("resourceNames").is_none(), "any name by default");
    }
    for r in of_kind(&objs, "ClusterRole")
        .into_iter()
        .chain(of_kind(&objs, "Role"))
    {
        for (_, resource, verbs) in rules(r) {
            assert!(!verbs.contains(&"*".to_string()), "{verbs:?}");
            assert_ne!(resource, "*");
            if std::ptr::eq(r, credentials) {
                continue;
            }
            // No Secret anywhere by default (`config.namespaces` is empty);
            // of ConfigMaps, the notification settings' by name only.
            assert_ne!(resource, "secrets", "{}", r["metadata"]["name"]);
            if resource == "configmaps" {
                assert_eq!(verbs, ["get"], "{resource}");
            }
        }
        for rule in r["rules"].as_array().into_iter().flatten() {
            if !std::ptr::eq(r, credentials) && strings(&rule["resources"]) == ["configmaps"] {
                assert_eq!(rule["resourceNames"], json!(["releaseplan-notifications"]));
            }
        }
    }
    assert!(
        !objs.iter().any(|o| o["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("-config"))),
        "no config access rendered by default"
    );
    let sa = one(&objs, "ServiceAccount")["metadata"]["name"].clone();
    for b in of_kind(&objs, "ClusterRoleBinding")
        .into_iter()
        .chain(of_kind(&objs, "RoleBinding"))
    {
        let subjects = &b["subjects"];
        assert_eq!(subjects[0]["name"], sa, "{b}");
        assert_eq!(subjects[0]["namespace"], "rp-system", "{b}");
    }
    assert_eq!(
        named(&objs, "RoleBinding", "-gate-credentials")["roleRef"]["name"],
        credentials["metadata"]["name"]
    );

    // The Deployment: 2 replicas, leader election, probes, restricted security.
    let d = one(&objs, "Deployment");
    let spec = &d["spec"]["template"]["spec"];
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(spec["serviceAccountName"], sa);
    assert_eq!(spec["terminationGracePeriodSeconds"], 30);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(spec["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = &spec["containers"][0];
    let args = strings(&c["args"]);
    for want in [
        "--gate-policy=required",
        "--leader-election",
        "--lease-namespace=$(POD_NAMESPACE)",
        "--metrics-addr=[::]:8080",
        "--log-json",
        "--concurrency=32",
        "--worker-threads=0",
        "--qps=200",
        "--burst=400",
        "--gate-max-answer-bytes=262144",
        "--gate-calls-in-flight=32",
        "--gate-calls-in-flight-per-namespace=8",
        "--gate-calls-per-second=50",
        "--gate-calls-per-second-per-namespace=10",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
    }
    assert!(
        !args.iter().any(|a| a.starts_with("--namespace")),
        "{args:?}"
    );
    let env = c["env"].as_array().expect("env");
    for (name, path) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        assert!(
            env.iter()
                .any(|e| e["name"] == name && e["valueFrom"]["fieldRef"]["fieldPath"] == path),
            "{name} from the downward API"
        );
    }
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["ports"][0]["containerPort"], 8080);
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["runAsUser"], 65532);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(c["resources"]["requests"]["cpu"], "10m");
    assert_eq!(c["resources"]["requests"]["memory"], "32Mi");
    assert_eq!(c["resources"]["limits"]["memory"], "256Mi");
    assert!(
        spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            .is_array()
    );
    assert_eq!(
        spec["topologySpreadConstraints"][0]["whenUnsatisfiable"],
        "ScheduleAnyway"
    );

    assert_eq!(one(&objs, "PodDisruptionBudget")["spec"]["minAvailable"], 1);
    let np = one(&objs, "NetworkPolicy");
    // No pod may reach the metrics port until a namespace is named.
    assert_eq!(np["spec"]["ingress"], json!([]));
    assert_eq!(np["spec"]["egress"], json!([{}]));
    assert_eq!(
        one(&objs, "Service")["spec"]["ports"][0]["targetPort"],
        "http-metrics"
    );

    // The CRD is only in crds/ (never in an annotation, never templated).
    let text = render_text("rp", "rp-system", &[], false);
    assert!(
        text.len() < 50_000,
        "rendered templates are {} bytes",
        text.len()
    );
    assert!(!text.contains("CustomResourceDefinition"));
}

#[test]
fn watch_namespace_renders_roles_only_and_the_service_monitor_on_request() {
    let objs = render(
        "rp",
        "rp-system",
        &["watchNamespace=apps", "serviceMonitor.enabled=true"],
    );
    // No cluster-wide permission for the operator but reading
    // ClusterGateTemplates (cluster-scoped); the aggregated ClusterRoles for
    // users are bound by nothing.
    let role = operator_cluster_role(&objs);
    assert_eq!(rules(role), cluster_template_rules());
    let bindings = of_kind(&objs, "ClusterRoleBinding");
    assert_eq!(bindings.len(), 1);
    assert_eq!(bindings[0]["roleRef"]["name"], role["metadata"]["name"]);
    let roles = of_kind(&objs, "Role");
    assert_eq!(roles.len(), 3);
    let in_ns = |ns: &str| {
        *roles
            .iter()
            .find(|r| r["metadata"]["namespace"] == ns)
            .unwrap_or_else(|| panic!("no Role in {ns}"))
    };
    assert_eq!(rules(in_ns("apps")), expected_rules());
    assert_eq!(
        rules(named(&objs, "Role", "-leader-election")),
        lease_rules()
    );
    // Gate credentials stay in the release namespace, not the watched one.
    let credentials = named(&objs, "Role", "-gate-credentials");
    assert_eq!(credentials["metadata"]["namespace"], "rp-system");
    assert_eq!(rules(credentials), credential_rules());
    let bindings = of_kind(&objs, "RoleBinding");
    assert_eq!(bindings.len(), 3);
    for b in bindings {
        assert_eq!(b["subjects"][0]["namespace"], "rp-system");
    }
    let args =
        strings(&one(&objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(args.iter().any(|a| a == "--namespace=apps"), "{args:?}");
    let sm = one(&objs, "ServiceMonitor");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "http-metrics");
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");

    // Without config versioning: no access to ConfigMaps and Secrets in the
    // watched namespace, and the operator is told so.
    let objs = render(
        "rp",
        "rp-system",
        &["watchNamespace=apps", "config.versioning=false"],
    );
    let apps_role = of_kind(&objs, "Role")
        .into_iter()
        .find(|r| r["metadata"]["namespace"] == "apps")
        .expect("a Role in apps");
    // The namespace's notification ConfigMap only, by name.
    assert_eq!(rules(apps_role), expected_rules());
    let named: Vec<&Value> = apps_role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| strings(&r["resources"]) == ["configmaps"])
        .collect();
    assert_eq!(named.len(), 1);
    assert_eq!(
        named[0]["resourceNames"],
        json!(["releaseplan-notifications"])
    );
    let args =
        strings(&one(&objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(
        args.iter().any(|a| a == "--config-versioning=false"),
        "{args:?}"
    );

    // Without leader election (one replica) there is no lease Role.
    let objs = render(
        "rp",
        "rp-system",
        &["leaderElection.enabled=false", "replicaCount=1"],
    );
    assert_eq!(
        rules(one(&objs, "Role")),
        credential_rules(),
        "only the gate credentials Role"
    );
    let args =
        strings(&one(&objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(
        !args
            .iter()
            .any(|a| a.contains("lease") || a.contains("leader"))
    );
}

/// The objects of `objs` that grant config versioning's access: the
/// ClusterRole `<release>-config` and what binds it (kind, namespace).
fn config_grants(objs: &[Value]) -> (Option<&Value>, Vec<(String, String)>) {
    let role = of_kind(objs, "ClusterRole").into_iter().find(|r| {
        r["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("-config"))
    });
    let bindings = objs
        .iter()
        .filter(|o| matches!(kind_of(o), "RoleBinding" | "ClusterRoleBinding"))
        .filter(|b| {
            b["roleRef"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-config"))
        })
        .map(|b| {
            (
                kind_of(b).to_string(),
                b["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect();
    (role, bindings)
}

#[test]
fn config_access_is_granted_only_in_the_namespaces_listed() {
    let config_rules = || {
        let v = |verbs: &[&str]| verbs.iter().map(|x| (*x).to_string()).collect::<Vec<_>>();
        vec![
            (String::new(), "configmaps".to_string(), v(CONFIG_VERBS)),
            (String::new(), "secrets".to_string(), v(CONFIG_VERBS)),
        ]
    };
    let args = |objs: &[Value]| {
        strings(&one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"])
    };
    // Listed: a RoleBinding in each, to a ClusterRole bound nowhere else.
    let objs = render("rp", "rp-system", &["config.namespaces={shop,pay}"]);
    let (role, bindings) = config_grants(&objs);
    assert_eq!(rules(role.expect("the config ClusterRole")), config_rules());
    assert_eq!(
        bindings,
        [
            ("RoleBinding".to_string(), "shop".to_string()),
            ("RoleBinding".to_string(), "pay".to_string())
        ]
    );
    assert!(
        args(&objs)
            .iter()
            .any(|a| a == "--config-namespaces=shop,pay")
    );
    // Every namespace, by name: the one cluster-wide grant.
    let objs = render("rp", "rp-system", &["config.namespaces={*}"]);
    let (_, bindings) = config_grants(&objs);
    assert_eq!(
        bindings,
        [("ClusterRoleBinding".to_string(), String::new())]
    );
    assert!(args(&objs).iter().any(|a| a == "--config-namespaces=*"));
    // Watching one namespace: only there, whatever else is listed.
    for listed in ["config.namespaces={*}", "config.namespaces={apps,shop}"] {
        let objs = render("rp", "rp-system", &["watchNamespace=apps", listed]);
        assert_eq!(
            config_grants(&objs).1,
            [("RoleBinding".to_string(), "apps".to_string())],
            "{listed}"
        );
    }
    // Versioning off: nothing, whatever is listed, and the operator is told.
    let objs = render(
        "rp",
        "rp-system",
        &["config.versioning=false", "config.namespaces={shop}"],
    );
    let (role, bindings) = config_grants(&objs);
    assert!(role.is_none() && bindings.is_empty());
    assert!(args(&objs).iter().any(|a| a == "--config-versioning=false"));
    assert!(
        !args(&objs)
            .iter()
            .any(|a| a.starts_with("--config-namespaces"))
    );
    // None by default: no flag, the binary's default is none too.
    assert!(
        !args(&render("rp", "rp-system", &[]))
            .iter()
            .any(|a| a.starts_with("--config-namespaces"))
    );
    let err = render_error(&["config.namespaces={Shop}"]);
    assert!(err.contains("schema"), "{err}");
}

#[test]
fn gate_credentials_can_be_limited_to_named_objects_or_turned_off() {
    let objs = render(
        "rp",
        "rp-system",
        &[
            "gates.credentials.secretNames={prom-token,hooks}",
            "gates.credentials.configMapNames={internal-ca}",
        ],
    );
    let role = named(&objs, "Role", "-gate-credentials");
    assert_eq!(rules(role), credential_rules());
    for rule in role["rules"].as_array().unwrap() {
        let want = if strings(&rule["resources"]) == ["secrets"] {
            json!(["prom-token", "hooks"])
        } else {
            json!(["internal-ca"])
        };
        assert_eq!(rule["resourceNames"], want, "{rule}");
    }
    let objs = render(
        "rp",
        "rp-system",
        &["gates.credentials.enabled=false", "config.versioning=false"],
    );
    assert!(of_kind(&objs, "Role").iter().all(|r| {
        !r["metadata"]["name"]
            .as_str()
            .unwrap()
            .ends_with("-gate-credentials")
    }),);
    for r in of_kind(&objs, "Role")
        .into_iter()
        .chain(of_kind(&objs, "ClusterRole"))
    {
        for rule in r["rules"].as_array().into_iter().flatten() {
            let resources = strings(&rule["resources"]);
            // Only the namespaces' notification ConfigMap, by name.
            if resources == ["configmaps"] {
                assert_eq!(rule["resourceNames"], json!(["releaseplan-notifications"]));
                assert_eq!(strings(&rule["verbs"]), ["get"]);
                continue;
            }
            assert!(
                !resources
                    .iter()
                    .any(|x| x == "secrets" || x == "configmaps")
            );
        }
    }
    let err = render_error(&["gates.credentials.secretNames={Not_A_Name}"]);
    assert!(err.contains("schema"), "{err}");
}

#[test]
fn one_replica_renders_no_pod_disruption_budget() {
    // minAvailable 1 of 1 replica would block every node drain.
    for sets in [
        &["replicaCount=1"][..],
        &["replicaCount=1", "leaderElection.enabled=false"],
    ] {
        let objs = render("rp", "rp-system", sets);
        assert!(of_kind(&objs, "PodDisruptionBudget").is_empty(), "{sets:?}");
        assert_eq!(one(&objs, "Deployment")["spec"]["replicas"], 1);
    }
    let objs = render("rp", "rp-system", &["replicaCount=3"]);
    assert_eq!(one(&objs, "PodDisruptionBudget")["spec"]["minAvailable"], 1);
    let objs = render("rp", "rp-system", &["podDisruptionBudget.minAvailable=50%"]);
    assert_eq!(
        one(&objs, "PodDisruptionBudget")["spec"]["minAvailable"],
        "50%"
    );
    // A budget that keeps every replica blocks drains just the same.
    let err = render_error(&["podDisruptionBudget.minAvailable=2"]);
    assert!(
        err.contains(
            "podDisruptionBudget.minAvailable=2 with replicaCount=2 would block every node drain"
        ),
        "{err}"
    );
}

#[test]
fn more_than_one_replica_without_leader_election_is_refused() {
    let err = render_error(&["replicaCount=2", "leaderElection.enabled=false"]);
    assert!(
        err.contains(
            "replicaCount=2 needs leaderElection.enabled=true: without leader election \
             every replica reconciles and writes"
        ),
        "{err}"
    );
    let err = render_error(&["leaderElection.enabled=false"]);
    assert!(
        err.contains("replicaCount=2 needs leaderElection.enabled=true"),
        "{err}"
    );
}

#[test]
fn shards_render_the_flag_and_need_election_and_enough_replicas() {
    let args = |sets: &[&str]| {
        let objs = render("rp", "rp-system", sets);
        strings(&one(&objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"])
    };
    assert!(!args(&[]).iter().any(|a| a.starts_with("--shards")));
    let sharded = args(&["replicaCount=3", "leaderElection.shards=2"]);
    assert!(sharded.contains(&"--shards=2".to_string()), "{sharded:?}");
    assert!(sharded.contains(&"--leader-election".to_string()));

    let err = render_error(&["replicaCount=2", "leaderElection.shards=3"]);
    assert!(
        err.contains("replicaCount=2 is below leaderElection.shards=3"),
        "{err}"
    );
    let err = render_error(&[
        "replicaCount=1",
        "leaderElection.enabled=false",
        "leaderElection.shards=2",
    ]);
    assert!(
        err.contains("leaderElection.shards=2 needs leaderElection.enabled=true"),
        "{err}"
    );
    let err = render_error(&["leaderElection.shards=0"]);
    assert!(err.contains("schema"), "{err}");
}

/// The notes `helm install` prints name the Leases the replicas hold: the
/// leader Lease, or with shards one per shard (`<leaseName>-<i>-of-<N>`);
/// while `gatePolicy.hosts` is empty they show how to list a host.
/// `helm template` leaves NOTES.txt out, and `helm install --dry-run` asks
/// the cluster's discovery (which other tests' CRD installs disturb), so the
/// notes are rendered offline from a copy of the chart where they are the
/// data of a ConfigMap.
#[test]
fn the_install_notes_name_each_shards_lease() {
    let copy = tempfile::tempdir().unwrap();
    let chart = copy.path().join("releaseplan");
    run(
        std::path::Path::new("cp"),
        &["-r", chart_dir().to_str().unwrap(), chart.to_str().unwrap()],
        None,
    );
    let notes = std::fs::read_to_string(chart.join("templates/NOTES.txt")).unwrap();
    std::fs::remove_file(chart.join("templates/NOTES.txt")).unwrap();
    std::fs::write(
        chart.join("templates/_notes.tpl"),
        format!("{{{{- define \"test.notes\" -}}}}\n{notes}{{{{- end }}}}\n"),
    )
    .unwrap();
    std::fs::write(
        chart.join("templates/notes.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: |\n\
         {{ include \"test.notes\" . | indent 4 }}\n",
    )
    .unwrap();
    let render = |sets: &[&str]| {
        let mut args: Vec<String> = [
            "template",
            "rp",
            chart.to_str().unwrap(),
            "--namespace",
            "rp-system",
            "--show-only",
            "templates/notes.yaml",
            "--kube-version",
            &kube_version(),
            "--set",
            REPOSITORY,
        ]
        .iter()
        .map(|a| (*a).to_string())
        .collect();
        for set in sets {
            args.extend(["--set".to_string(), (*set).to_string()]);
        }
        let out = helm(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let cm: Value = yaml_serde::from_str(&out).expect("the notes ConfigMap");
        cm["data"]["notes"].as_str().unwrap_or_default().to_string()
    };
    let one = render(&[]);
    assert!(
        one.contains("kubectl -n rp-system get lease releaseplan-leader -o jsonpath"),
        "{one}"
    );
    let sharded = render(&["replicaCount=4", "leaderElection.shards=3"]);
    assert!(
        sharded.contains(
            "kubectl -n rp-system get lease releaseplan-leader-0-of-3 \
             releaseplan-leader-1-of-3 releaseplan-leader-2-of-3 -o custom-columns="
        ),
        "{sharded}"
    );
    assert!(sharded.contains("3 shards"), "{sharded}");
    // With the default policy, the one value a first gated plan needs.
    assert!(
        one.contains("--set 'gatePolicy.hosts={prometheus.monitoring.svc:9090}'")
            && one.contains("GatePolicyRefused"),
        "{one}"
    );
    for set in [
        "gatePolicy.hosts={prometheus.monitoring.svc:9090}",
        "gatePolicy.singleTenant=true",
    ] {
        let notes = render(&[set]);
        assert!(
            !notes.contains("gatePolicy.hosts is empty"),
            "{set}: {notes}"
        );
    }
    // Config versioned nowhere by default: the value that grants it.
    assert!(
        one.contains("--set 'config.namespaces={shop,payments}'")
            && one.contains("ConfigVersioned"),
        "{one}"
    );
    for set in ["config.namespaces={shop}", "config.versioning=false"] {
        let notes = render(&[set]);
        assert!(
            !notes.contains("config.namespaces is empty"),
            "{set}: {notes}"
        );
    }
}

#[test]
fn a_misspelt_value_is_refused_by_the_schema() {
    for (set, key) in [
        ("replicaCont=3", "'replicaCont'"),
        ("image.tga=1.0", "'tga'"),
        ("leaderElection.enable=false", "'enable'"),
        ("podDisruptionBudget.minAvialable=1", "'minAvialable'"),
    ] {
        let err = render_error(&[set]);
        assert!(
            err.contains("values don't meet the specifications of the schema")
                && err.contains(&format!("additional properties {key} not allowed")),
            "{set}: {err}"
        );
    }
    // Types and formats too.
    for set in [
        "replicaCount=0",
        "image.pullPolicy=Sometimes",
        "image.digest=latest",
    ] {
        let err = render_error(&[set]);
        assert!(err.contains("schema"), "{set}: {err}");
    }
    // Maps of Kubernetes objects are passed through as written.
    let objs = render(
        "rp",
        "rp-system",
        &["resources.limits.cpu=1", "podAnnotations.a=b"],
    );
    let d = one(&objs, "Deployment");
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        1
    );
}

#[test]
fn the_image_needs_a_repository_and_takes_a_digest() {
    let image = |sets: &[&str]| {
        let objs = render("rp", "rp-system", sets);
        one(&objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .expect("image")
            .to_string()
    };
    // No published image: an install without a repository says what to do.
    let err = render_error(&["image.repository="]);
    assert!(
        err.contains("image.repository is required: there is no published releaseplan image"),
        "{err}"
    );
    assert_eq!(image(&[]), "registry.example.com/releaseplan:0.2.0");
    assert_eq!(
        image(&["image.tag=1.2.3"]),
        "registry.example.com/releaseplan:1.2.3"
    );
    let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
    assert_eq!(
        image(&[&format!("image.digest={digest}"), "image.tag=1.2.3"]),
        format!("registry.example.com/releaseplan@{digest}")
    );
}

#[test]
fn aggregated_cluster_roles_let_namespace_users_read_and_promote_plans() {
    let objs = render("rp", "rp-system", &[]);
    let aggregated: Vec<&Value> = of_kind(&objs, "ClusterRole")
        .into_iter()
        .filter(|r| !aggregated_to(r).is_empty())
        .collect();
    assert_eq!(aggregated.len(), 2);
    let by_target = |to: &[&str]| {
        *aggregated
            .iter()
            .find(|r| aggregated_to(r) == to)
            .unwrap_or_else(|| panic!("no ClusterRole aggregated to {to:?}"))
    };
    let all = |verbs: &[&str]| -> Vec<String> { verbs.iter().map(|v| (*v).to_string()).collect() };
    let view = by_target(&["view"]);
    assert_eq!(
        rules(view),
        vec![
            (
                "releaseplan.io".to_string(),
                "clustergatetemplates".to_string(),
                all(&["get", "list", "watch"])
            ),
            (
                "releaseplan.io".to_string(),
                "componentscales".to_string(),
                all(&["get", "list", "watch"])
            ),
            (
                "releaseplan.io".to_string(),
                "componentscales/scale".to_string(),
                all(&["get", "list", "watch"])
            ),
            (
                "releaseplan.io".to_string(),
                "gatetemplates".to_string(),
                all(&["get", "list", "watch"])
            ),
            (
                "releaseplan.io".to_string(),
                "releaseplans".to_string(),
                all(&["get", "list", "watch"])
            ),
            (
                "releaseplan.io".to_string(),
                "releaseplans/status".to_string(),
                all(&["get", "list", "watch"])
            ),
        ]
    );
    // edit (and admin, which holds edit's rules too): promote, pause, abort
    // and undo are patches of the plan; the status stays the operator's.
    let edit = by_target(&["admin", "edit"]);
    // GateTemplates of the namespace too, not the cluster-wide ones.
    assert_eq!(
        rules(edit),
        vec![
            (
                "releaseplan.io".to_string(),
                "componentscales/scale".to_string(),
                all(&["patch", "update"])
            ),
            (
                "releaseplan.io".to_string(),
                "gatetemplates".to_string(),
                all(&["create", "delete", "deletecollection", "patch", "update"])
            ),
            (
                "releaseplan.io".to_string(),
                "releaseplans".to_string(),
                all(&["create", "delete", "deletecollection", "patch", "update"])
            )
        ]
    );
    // Nothing binds them, and they reach nothing but ReleasePlans.
    for r in [view, edit] {
        assert!(r["aggregationRule"].is_null());
        assert!(
            r["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("rp-releaseplan-")),
            "{r}"
        );
    }
    let bindings = of_kind(&objs, "ClusterRoleBinding");
    assert_eq!(bindings.len(), 1);
    assert_eq!(
        bindings[0]["roleRef"]["name"],
        operator_cluster_role(&objs)["metadata"]["name"]
    );

    let objs = render("rp", "rp-system", &["rbac.aggregateToDefaultRoles=false"]);
    assert_eq!(of_kind(&objs, "ClusterRole").len(), 1);
    let objs = render("rp", "rp-system", &["rbac.create=false"]);
    assert!(of_kind(&objs, "ClusterRole").is_empty());
}

#[test]
fn the_default_gate_policy_is_multi_tenant_and_one_value_makes_it_single_tenant() {
    let args = |objs: &[Value]| {
        strings(&one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"])
    };
    // Default: required, and one GatePolicy for every namespace that lists
    // nothing (gates call nothing, routes attach nowhere).
    let objs = render("rp", "rp-system", &[]);
    assert!(args(&objs).iter().any(|a| a == "--gate-policy=required"));
    let p = one(&objs, "GatePolicy");
    assert_eq!(p["metadata"]["name"], "rp-releaseplan-default");
    assert!(
        p["spec"]["namespaceSelector"].is_null(),
        "every namespace: {p}"
    );
    assert_eq!(p["spec"]["destinations"]["hosts"], json!([]));
    assert_eq!(p["spec"]["destinations"]["ownNamespaceServices"], false);
    assert_eq!(
        p["spec"]["routes"],
        json!({"parentRefs": [], "entryPoints": []})
    );
    // The values fill it.
    let objs = render(
        "rp",
        "rp-system",
        &[
            "gatePolicy.hosts[0]=prometheus.monitoring.svc:9090",
            "gatePolicy.ownNamespaceServices=true",
            "gatePolicy.credentials[0].secretName=prom-token",
            "gatePolicy.credentials[0].hosts[0]=prometheus.monitoring.svc:9090",
            "gatePolicy.parentRefs[0].namespace=infra",
            "gatePolicy.namespaceSelector.matchLabels.team=a",
        ],
    );
    let p = one(&objs, "GatePolicy");
    assert_eq!(
        p["spec"]["destinations"],
        json!({"hosts": ["prometheus.monitoring.svc:9090"], "ownNamespaceServices": true})
    );
    assert_eq!(
        p["spec"]["credentials"],
        json!([{"secretName": "prom-token", "hosts": ["prometheus.monitoring.svc:9090"]}])
    );
    assert_eq!(
        p["spec"]["routes"]["parentRefs"],
        json!([{"namespace": "infra"}])
    );
    assert_eq!(
        p["spec"]["namespaceSelector"],
        json!({"matchLabels": {"team": "a"}})
    );
    // One value: no policy, the operator's optional mode.
    let objs = render("rp", "rp-system", &["gatePolicy.singleTenant=true"]);
    assert!(of_kind(&objs, "GatePolicy").is_empty());
    assert!(args(&objs).iter().any(|a| a == "--gate-policy=optional"));
    // A host that is not a pattern is refused by the chart's schema.
    let e = render_error(&["gatePolicy.hosts[0]=http://x"]);
    assert!(e.contains("gatePolicy"), "{e}");
}

/// The minor of a Kubernetes version `1.M.P`.
fn minor(version: &str) -> u32 {
    version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("not a Kubernetes version: {version}"))
}

/// The versions the chart claims are the versions tested: `kubeVersion` is
/// the range from the oldest minor `make test-oldest` runs on to the newest
/// `make test` runs on (e2e/versions.env's defaults), and the operator is
/// compiled for the oldest (k8s-openapi's feature, whose PodSpec the CRD
/// embeds). Raising the floor or adding a newer minor changes them together.
#[test]
fn kube_version_is_the_tested_range() {
    let default = |key: &str| {
        support::tools::pinned_default(key)
            .unwrap_or_else(|| panic!("{key} in e2e/versions.env"))
            .0
    };
    let oldest = default("K8S_OLDEST_VERSION");
    let newest = default("K8S_VERSION");
    let (low, high) = (minor(&oldest), minor(&newest));
    assert!(
        low < high,
        "oldest {oldest} is not older than newest {newest}"
    );
    let range = format!(">=1.{low}.0-0 <1.{}.0-0", high + 1);
    let chart: yaml_serde::Value = yaml_serde::from_str(
        &std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml is YAML");
    assert_eq!(chart["kubeVersion"].as_str(), Some(range.as_str()));
    for manifest in ["Cargo.toml", "crates/core/Cargo.toml"] {
        let text = std::fs::read_to_string(cluster::repo_root().join(manifest)).expect(manifest);
        let line = text
            .lines()
            .find(|l| l.starts_with("k8s-openapi "))
            .unwrap_or_else(|| panic!("k8s-openapi in {manifest}"));
        assert!(
            line.contains(&format!("\"v1_{low}\"")),
            "{manifest} compiles for another Kubernetes than the oldest tested 1.{low}: {line}"
        );
    }
    let chart = chart_dir();
    let chart = chart.to_str().expect("utf-8 path");
    let template = |version: &str| {
        output(
            &helm_bin(),
            &[
                "template",
                "rp",
                chart,
                "--kube-version",
                version,
                "--set",
                REPOSITORY,
            ],
            None,
        )
    };
    for version in [format!("1.{}.9", low - 1), format!("1.{}.0", high + 1)] {
        let out = template(&version);
        assert!(!out.status.success(), "rendered for {version}");
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains(&format!("incompatible with Kubernetes v{version}")),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for version in [format!("1.{low}.0"), oldest, newest] {
        let out = template(&version);
        assert!(
            out.status.success(),
            "{version}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

// ------------------------------------------------------------ cluster

/// The chart installed from its rendered manifests, and a client holding a
/// token of its ServiceAccount.
struct Install {
    release: String,
    namespace: String,
    service_account: String,
    /// A kubeconfig with the ServiceAccount's token (same server and CA).
    kubeconfig: PathBuf,
    /// A client that holds only the chart's permissions.
    sa_client: Client,
    _dir: tempfile::TempDir,
}

/// Creates a namespace enforcing the restricted Pod Security Standard,
/// renders the chart into it (with the CRD) and applies every object
/// server-side; waits until the Deployment's 2 pods are ready (so the pod
/// security admission accepted them); makes a token for the ServiceAccount.
async fn install(client: &Client, prefix: &str, sets: &[&str]) -> Install {
    crd::install(client).await;
    let namespace = cluster::test_namespace(client, prefix).await;
    Api::<Namespace>::all(client.clone())
        .patch(
            &namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            }}})),
        )
        .await
        .expect("cannot label the namespace");
    // The namespace name is unique, so it keeps cluster-scoped names apart.
    let release = namespace.clone();
    // The chart's GatePolicy serves every namespace by default: here only
    // namespaces labelled for this install (a test's `sets` may name others),
    // so the tests run beside this one are not governed by it.
    let own = format!("gatePolicy.namespaceSelector.matchLabels.rptenant={namespace}");
    let sets: Vec<&str> = std::iter::once(own.as_str())
        .chain(sets.iter().copied())
        .collect();
    let manifest = render_text(&release, &namespace, &sets, true);
    let applied = run(
        &kubectl_bin(),
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            MANAGER,
            "-f",
            "-",
        ],
        Some(&manifest),
    );
    let objs = parse_docs(&manifest);
    assert_eq!(
        applied
            .lines()
            .filter(|l| l.contains("serverside-applied"))
            .count(),
        objs.len(),
        "every rendered object is applied:\n{applied}"
    );
    let deployment = one(&objs, "Deployment")["metadata"]["name"]
        .as_str()
        .expect("Deployment name")
        .to_string();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    wait_until(
        Duration::from_secs(60),
        "the chart's Deployment to have 2 ready pods in a restricted namespace",
        || async {
            let d = deployments.get(&deployment).await.ok()?;
            (d.status?.ready_replicas? == 2).then_some(())
        },
    )
    .await;

    let service_account = one(&objs, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .expect("ServiceAccount name")
        .to_string();
    let token = run(
        &kubectl_bin(),
        &[
            "create",
            "token",
            &service_account,
            "--namespace",
            &namespace,
            "--duration",
            "1h",
        ],
        None,
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, token_kubeconfig(token.trim())).expect("write kubeconfig");
    let config = Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig).expect("the token kubeconfig"),
        &KubeConfigOptions::default(),
    )
    .await
    .expect("load the token kubeconfig");
    let sa_client = Client::try_from(config).expect("client with the token");
    Install {
        release,
        namespace,
        service_account,
        kubeconfig,
        sa_client,
        _dir: dir,
    }
}

/// A kubeconfig with the server and CA of the admin kubeconfig ($KUBECONFIG)
/// and `token` as the only credential.
fn token_kubeconfig(token: &str) -> String {
    let admin = Kubeconfig::read().expect("cannot read the kubeconfig of KUBECONFIG");
    let context = admin
        .current_context
        .as_ref()
        .and_then(|c| admin.contexts.iter().find(|n| &n.name == c))
        .and_then(|n| n.context.as_ref())
        .expect("the admin kubeconfig has a current context");
    let cluster = admin
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .expect("the current context's cluster");
    let server = cluster.server.as_deref().expect("the cluster has a server");
    let ca = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => format!("certificate-authority-data: {data}"),
        (None, Some(file)) => format!("certificate-authority: {file}"),
        (None, None) => panic!("the admin kubeconfig has no CA"),
    };
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {server}
    {ca}
users:
- name: chart-service-account
  user:
    token: {token}
contexts:
- name: test
  context:
    cluster: test
    user: chart-service-account
current-context: test
"
    )
}

/// Whether the client may do `verb` on `resource` (SelfSubjectAccessReview).
async fn may(client: &Client, verb: &str, group: &str, resource: &str, ns: Option<&str>) -> bool {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                namespace: ns.map(String::from),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SelfSubjectAccessReview")
        .status
        .is_some_and(|s| s.allowed)
}

fn is_forbidden<T: std::fmt::Debug>(r: &Result<T, kube::Error>) -> bool {
    matches!(r, Err(kube::Error::Api(s)) if s.code == 403)
}

/// Secrets and ConfigMaps with `config.versioning=false`: `get` by name in
/// the release namespace (gate credentials), nothing else anywhere: no list
/// or watch, not even there, nothing in the watched namespace or any other,
/// no list cluster-wide.
async fn assert_secrets_only_got_by_name_in_the_release_namespace(
    client: &Client,
    i: &Install,
    apps: &str,
) {
    let c = &i.sa_client;
    for ns in [i.namespace.as_str(), apps, "default", "kube-system"] {
        for verb in [
            "get", "list", "watch", "create", "update", "patch", "delete",
        ] {
            for resource in ["secrets", "configmaps"] {
                let allowed = ns == i.namespace && verb == "get";
                assert_eq!(
                    may(c, verb, "", resource, Some(ns)).await,
                    allowed,
                    "{} may {verb} {resource} in {ns}: expected {allowed}",
                    i.service_account
                );
            }
        }
    }
    for verb in ["get", "list", "watch"] {
        for resource in ["secrets", "configmaps"] {
            assert!(
                !may(c, verb, "", resource, None).await,
                "{verb} {resource} cluster-wide"
            );
        }
    }
    let secrets = Api::<Secret>::namespaced(c.clone(), &i.namespace);
    let list = secrets.list(&ListParams::default()).await;
    assert!(is_forbidden(&list), "list secrets: {list:?}");
    let all = Api::<Secret>::all(c.clone())
        .list(&ListParams::default())
        .await;
    assert!(is_forbidden(&all), "list secrets cluster-wide: {all:?}");
    let cms = Api::<ConfigMap>::namespaced(c.clone(), apps)
        .list(&ListParams::default())
        .await;
    assert!(is_forbidden(&cms), "list configmaps: {cms:?}");
    // What it needs: a gate's Secret in the release namespace, by name.
    let name = "gate-rbac-check";
    Api::<Secret>::namespaced(client.clone(), &i.namespace)
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name}, "stringData": {"token": "t"}})),
        )
        .await
        .expect("create a Secret as admin");
    let got = secrets.get(name).await;
    assert!(got.is_ok(), "get a gate Secret by name: {got:?}");
    let other = Api::<Secret>::namespaced(c.clone(), apps).get(name).await;
    assert!(
        is_forbidden(&other),
        "get a Secret of the apps namespace: {other:?}"
    );
}

/// Secrets and ConfigMaps with config versioning in `apps` only
/// (`config.namespaces`): in `apps`, what copying config takes (list, watch, get,
/// create, delete), never update or patch (the user's objects are only
/// read); in any other namespace but the release one (gate credentials),
/// nothing.
async fn assert_config_access_only_in_the_watched_namespace(i: &Install, apps: &str) {
    let c = &i.sa_client;
    for ns in [apps, "default", "kube-system"] {
        for verb in [
            "get", "list", "watch", "create", "update", "patch", "delete",
        ] {
            for resource in ["secrets", "configmaps"] {
                let allowed = ns == apps && CONFIG_VERBS.contains(&verb);
                assert_eq!(
                    may(c, verb, "", resource, Some(ns)).await,
                    allowed,
                    "{} may {verb} {resource} in {ns}: expected {allowed}",
                    i.service_account
                );
            }
        }
    }
    for resource in ["secrets", "configmaps"] {
        assert!(
            !may(c, "list", "", resource, None).await,
            "list {resource} cluster-wide"
        );
    }
}

#[tokio::test]
async fn the_service_account_cannot_read_secrets() {
    let client = cluster::client().await;
    let i = install(&client, "chart-rbac", &["config.versioning=false"]).await;
    let apps = cluster::test_namespace(&client, "chart-rbac-apps").await;
    assert_secrets_only_got_by_name_in_the_release_namespace(&client, &i, &apps).await;

    // What it may do, and that leases are limited to the release namespace.
    let c = &i.sa_client;
    for (verb, group, resource) in [
        ("watch", "releaseplan.io", "releaseplans"),
        ("update", "releaseplan.io", "releaseplans/status"),
        ("delete", "apps", "deployments"),
        ("get", "apps", "deployments"),
        ("watch", "apps", "controllerrevisions"),
        ("create", "apps", "controllerrevisions"),
        ("patch", "apps", "controllerrevisions"),
        ("delete", "apps", "controllerrevisions"),
        ("list", "", "pods"),
        ("watch", "batch", "jobs"),
        ("create", "batch", "jobs"),
        ("delete", "batch", "jobs"),
        ("create", "events.k8s.io", "events"),
        ("watch", "releaseplan.io", "gatetemplates"),
    ] {
        assert!(
            may(c, verb, group, resource, Some(&apps)).await,
            "{verb} {resource}"
        );
    }
    // Events are created, never patched.
    assert!(!may(c, "patch", "events.k8s.io", "events", Some(&apps)).await);
    // Templates are read, never written.
    assert!(may(c, "watch", "releaseplan.io", "clustergatetemplates", None).await);
    assert!(!may(c, "patch", "releaseplan.io", "gatetemplates", Some(&apps)).await);
    assert!(!may(c, "create", "releaseplan.io", "clustergatetemplates", None).await);
    assert!(!may(c, "delete", "releaseplan.io", "releaseplans", Some(&apps)).await);
    // Nothing the operator never calls.
    assert!(
        !may(
            c,
            "update",
            "releaseplan.io",
            "releaseplans/finalizers",
            Some(&apps)
        )
        .await
    );
    assert!(!may(c, "update", "apps", "deployments", Some(&apps)).await);
    assert!(!may(c, "get", "", "pods", Some(&apps)).await);
    // Jobs of Job gates come from the cache and are never changed in place.
    for verb in ["get", "patch", "update"] {
        assert!(
            !may(c, verb, "batch", "jobs", Some(&apps)).await,
            "{verb} jobs"
        );
    }
    // Stored templates are never rewritten in place (their data is immutable).
    assert!(!may(c, "update", "apps", "controllerrevisions", Some(&apps)).await);
    assert!(!may(c, "create", "", "pods", Some(&apps)).await);
    assert!(!may(c, "create", "", "events", Some(&apps)).await);
    for (verb, allowed) in [("patch", true), ("create", true), ("update", false)] {
        assert_eq!(
            may(c, verb, "coordination.k8s.io", "leases", Some(&i.namespace)).await,
            allowed,
            "{verb} leases"
        );
    }
    assert!(
        !may(
            c,
            "delete",
            "coordination.k8s.io",
            "leases",
            Some(&i.namespace)
        )
        .await
    );
    assert!(!may(c, "get", "coordination.k8s.io", "leases", Some(&apps)).await);
}

/// Whether `user` may do `verb` on `resource` in `ns` (SubjectAccessReview).
async fn user_may(client: &Client, user: &str, verb: &str, resource: &str, ns: &str) -> bool {
    // `componentscales/scale`: a resource and its subresource.
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_string())),
        None => (resource, None),
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some("releaseplan.io".into()),
                resource: Some(resource.into()),
                subresource,
                namespace: Some(ns.into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview")
        .status
        .is_some_and(|s| s.allowed)
}

#[tokio::test]
async fn namespace_users_read_and_promote_plans_through_the_built_in_roles() {
    let client = cluster::client().await;
    let i = install(&client, "chart-users", &[]).await;
    let apps = cluster::test_namespace(&client, "chart-users-apps").await;
    // Users suffixed with the release, so that other runs' bindings do not count.
    let (editor, viewer) = (
        format!("editor-{}", i.release),
        format!("viewer-{}", i.release),
    );
    for (user, role) in [(&editor, "edit"), (&viewer, "view")] {
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }))
        .expect("a RoleBinding");
        Api::<RoleBinding>::namespaced(client.clone(), &apps)
            .create(&PostParams::default(), &binding)
            .await
            .expect("create the RoleBinding");
    }
    // The aggregation controller copies the rules into edit and view.
    wait_until(
        WAIT,
        "edit and view to include the chart's ReleasePlan rules",
        || async {
            (user_may(&client, &editor, "patch", "releaseplans", &apps).await
                && user_may(&client, &viewer, "list", "releaseplans", &apps).await)
                .then_some(())
        },
    )
    .await;
    for verb in [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ] {
        assert!(
            user_may(&client, &editor, verb, "releaseplans", &apps).await,
            "edit: {verb}"
        );
    }
    for verb in ["get", "list", "watch"] {
        assert!(
            user_may(&client, &viewer, verb, "releaseplans", &apps).await,
            "view: {verb}"
        );
    }
    for verb in ["patch", "update", "create", "delete"] {
        assert!(
            !user_may(&client, &viewer, verb, "releaseplans", &apps).await,
            "view: {verb}"
        );
    }
    // The status stays the operator's; nothing outside the bound namespace.
    for verb in ["update", "patch"] {
        assert!(!user_may(&client, &editor, verb, "releaseplans/status", &apps).await);
    }
    assert!(!user_may(&client, &editor, "patch", "releaseplans", &i.namespace).await);
    // GateTemplates of the namespace: written by editors, read by viewers;
    // ClusterGateTemplates are for cluster administrators.
    for verb in ["create", "patch", "delete", "list"] {
        assert!(
            user_may(&client, &editor, verb, "gatetemplates", &apps).await,
            "edit: {verb} gatetemplates"
        );
    }
    assert!(user_may(&client, &viewer, "list", "gatetemplates", &apps).await);
    assert!(!user_may(&client, &viewer, "create", "gatetemplates", &apps).await);
    // ComponentScales: `kubectl scale` for editors, reading for viewers; the
    // object itself belongs to its plan.
    for verb in ["patch", "update"] {
        assert!(
            user_may(&client, &editor, verb, "componentscales/scale", &apps).await,
            "edit: {verb} componentscales/scale"
        );
        assert!(!user_may(&client, &editor, verb, "componentscales", &apps).await);
    }
    assert!(user_may(&client, &viewer, "get", "componentscales/scale", &apps).await);
    assert!(user_may(&client, &viewer, "list", "componentscales", &apps).await);
    assert!(!user_may(&client, &viewer, "update", "componentscales/scale", &apps).await);
    for verb in ["create", "patch", "delete"] {
        assert!(
            !user_may(&client, &editor, verb, "clustergatetemplates", &apps).await,
            "edit: {verb} clustergatetemplates"
        );
    }
}

/// Waits until the plan is Stable with its generation observed; fails at
/// once, with the log lines, when the operator was refused a request.
async fn wait_stable(client: &Client, op: &Operator, ns: &str, name: &str) {
    wait_until(WAIT, &format!("plan {ns}/{name} to be Stable"), || {
        let log = op.log_text();
        let refused: Vec<&str> = log
            .lines()
            .filter(|l| l.to_lowercase().contains("forbidden"))
            .take(5)
            .collect();
        assert!(
            refused.is_empty(),
            "the chart's RBAC refused the operator a request:\n{}",
            refused.join("\n")
        );
        async move {
            let p = plans::get(client, ns, name).await?;
            let s = p.status.as_ref()?;
            (s.phase == Phase::Stable && s.observed_generation == p.metadata.generation)
                .then_some(())
        }
    })
    .await;
}

/// Runs the operator with the chart's ServiceAccount token, as the chart's
/// Deployment does (leader election, lease in the release namespace,
/// POD_NAME and POD_NAMESPACE), and walks a plan through a first release and
/// a canary rollout to Stable: each revision's template stored, the pruned
/// one's deleted (every verb on controllerrevisions used).
async fn rollout_with_chart_rbac(prefix: &str, watch_namespace: bool) {
    let client = cluster::client().await;
    let apps = cluster::test_namespace(&client, &format!("{prefix}-apps")).await;
    let set = format!("watchNamespace={apps}");
    // Config versioning in the apps namespace, and nowhere else.
    let config = format!("config.namespaces[0]={apps}");
    // The chart's GatePolicy for the apps namespace: the test's webhook on
    // 127.0.0.1, its bearer Secret bound there, its Gateway in the namespace.
    let tenant = format!("gatePolicy.namespaceSelector.matchLabels.rptenant={apps}");
    let mut sets: Vec<&str> = vec![
        &tenant,
        "gatePolicy.hosts[0]=127.0.0.1",
        "gatePolicy.credentials[0].secretName=hooks-token",
        "gatePolicy.credentials[0].hosts[0]=127.0.0.1",
        "gatePolicy.parentRefs[0].name=gw",
        &config,
    ];
    if watch_namespace {
        sets.push(&set);
    }
    Api::<Namespace>::all(client.clone())
        .patch(
            &apps,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"rptenant": apps.clone()}}})),
        )
        .await
        .expect("label the apps namespace");
    let i = install(&client, prefix, &sets).await;
    // With the cluster role too: Secrets only where config.namespaces lists.
    assert_config_access_only_in_the_watched_namespace(&i, &apps).await;
    if watch_namespace {
        // Namespaced RBAC: nothing in the other namespaces.
        let other = cluster::test_namespace(&client, &format!("{prefix}-other")).await;
        assert!(!may(&i.sa_client, "list", "releaseplan.io", "releaseplans", None).await);
        assert!(!may(&i.sa_client, "list", "apps", "deployments", Some(&other)).await);
    }

    // Before the operator starts: it watches HTTPRoutes only if it can list them then.
    support::crd::install_gateway_api(&client).await;
    let pod_name = format!("{}-0", i.release);
    let kubeconfig = i.kubeconfig.to_str().expect("utf-8 path");
    let mut op = Operator::launcher(&apps)
        .args([
            "--gate-policy=required",
            &format!("--config-namespaces={apps}"),
        ])
        .leader_election(&i.namespace)
        .env("KUBECONFIG", kubeconfig)
        .env("POD_NAME", &pod_name)
        .env("POD_NAMESPACE", &i.namespace)
        .start()
        .await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &i.namespace);
    wait_until(WAIT, "the operator to hold the lease", || async {
        let lease = leases.get_opt("releaseplan-leader").await.ok()??;
        (lease.spec?.holder_identity? == pod_name).then_some(())
    })
    .await;

    // A webhook gate whose bearer token is a Secret of the release namespace,
    // shared with the apps namespace: the operator gets it with the chart's
    // rules (the server counts calls with and without the token).
    let token = "chart-gate-token-4e1b";
    let calls = std::sync::Arc::new(std::sync::Mutex::new((0u32, 0u32)));
    let seen = calls.clone();
    let hook = support::servers::serve(axum::Router::new().route(
        "/hook",
        axum::routing::post(move |h: axum::http::HeaderMap| {
            let seen = seen.clone();
            async move {
                let ok = h.get("authorization").and_then(|v| v.to_str().ok())
                    == Some(&format!("Bearer {token}"));
                let mut c = seen.lock().unwrap();
                if ok {
                    c.0 += 1;
                    axum::http::StatusCode::OK
                } else {
                    c.1 += 1;
                    axum::http::StatusCode::UNAUTHORIZED
                }
            }
        }),
    ))
    .await;
    Api::<Secret>::namespaced(client.clone(), &i.namespace)
        .patch(
            "hooks-token",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "hooks-token",
                             "annotations": {"releaseplan.io/gate-namespaces": apps}},
                "stringData": {"token": token}})),
        )
        .await
        .expect("create the gate's Secret");
    let health = json!({"webhooks": [{"name": "smoke", "retries": 0,
        "url": format!("http://127.0.0.1:{}/hook", hook.port()),
        "auth": {"bearer": {"secretKeyRef": {"name": "hooks-token", "key": "token"}}}}]});

    let steps = json!([{"setWeight": 50}, {"pause": {"duration": "1s"}}]);
    // Routed: the Services and the HTTPRoute are written with the chart's
    // rules too (a missing verb holds the rollout at its first step).
    // And an autoscaled component: its ComponentScale and HPA are written
    // with the chart's rules too.
    // And config released with the code: a ConfigMap and a Secret the
    // template reads are copied per revision (get, create) from the caches
    // (list, watch), and the first revision's copies are pruned with it
    // (delete).
    for (kind, body) in [
        ("ConfigMap", json!({"data": {"GREETING": "hello"}})),
        (
            "Secret",
            json!({"stringData": {"TOKEN": "chart-config-secret"}}),
        ),
    ] {
        let mut obj =
            json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "shop-config"}});
        obj.as_object_mut()
            .expect("object")
            .extend(body.as_object().expect("object").clone());
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            client.clone(),
            &apps,
            &kube::discovery::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                "", "v1", kind,
            )),
        );
        api.patch(
            "shop-config",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await
        .expect("create the config");
    }
    let web = |image: &str| {
        let mut c = web(image, 2);
        c["template"]["spec"]["containers"][0]["envFrom"] = json!([
            {"configMapRef": {"name": "shop-config"}},
            {"secretRef": {"name": "shop-config"}}]);
        c["traffic"] = json!({"port": 80, "gatewayAPI": {"parentRefs": [{"name": "gw"}]}});
        let worker = json!({"name": "worker", "template": template("worker:1"),
            "autoscaling": {"minReplicas": 1, "maxReplicas": 3}});
        json!([c, worker])
    };
    // No old revision kept: the first one is pruned, its stored template too.
    create(
        &client,
        &apps,
        &plan(
            "shop",
            json!({"components": web("shop:1"), "strategy": {"steps": steps},
                   "revisionHistoryLimit": 0, "health": health}),
        ),
    )
    .await;
    wait_stable(&client, &op, &apps, "shop").await;
    let done = wait_phase(&client, &apps, "shop", Phase::Stable, WAIT).await;
    assert!(
        done.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == releaseplan::api::FINALIZER),
        "the finalizer was added"
    );
    let hash = |p: &releaseplan::api::ReleasePlan| {
        p.status.as_ref().expect("status").components[0]
            .current_hash
            .clone()
            .expect("a current hash")
    };
    let first = format!("shop-web-{}", hash(&done));
    let stored: Api<ControllerRevision> = Api::namespaced(client.clone(), &apps);
    wait_until(
        WAIT,
        "the first revision's template to be stored",
        || async { stored.get_opt(&first).await.ok()?.map(|_| ()) },
    )
    .await;
    let scales = Api::<releaseplan::api::ComponentScale>::namespaced(client.clone(), &apps);
    wait_until(
        WAIT,
        "the worker's ComponentScale status and HPA",
        || async {
            let s = scales.get_opt("shop-worker").await.ok()??;
            let hpa =
                Api::<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>::namespaced(
                    client.clone(),
                    &apps,
                )
                .get_opt("shop-worker")
                .await
                .ok()??;
            (s.status?.ready_replicas == 1 && hpa.spec?.max_replicas == 3).then_some(())
        },
    )
    .await;
    set_components(&client, &apps, "shop", web("shop:2")).await;
    wait_stable(&client, &op, &apps, "shop").await;
    let revs = revisions(&client, &apps, "shop").await;
    assert_eq!(by_image(&revs, "shop:2"), Some((2, 2)), "{revs:?}");
    // Right after the promotion the route still sends everything to the
    // canary Service; it returns to the stable one once that one selects the
    // new revision and the change has drained (traffic.drainSeconds).
    let routes = Api::<releaseplan::api::gateway::HTTPRoute>::namespaced(client.clone(), &apps);
    wait_until(WAIT, "the route back on the stable Service", || async {
        let route = routes.get_opt("shop-web").await.ok()??;
        let weights: Vec<(String, Option<i32>)> = route.spec.rules[0]
            .backend_refs
            .iter()
            .map(|b| (b.name.clone(), b.weight))
            .collect();
        (weights
            == vec![
                ("shop-web-stable".to_string(), Some(100)),
                ("shop-web-canary".to_string(), Some(0)),
            ])
        .then_some(())
    })
    .await;
    let (ok, denied) = *calls.lock().unwrap();
    assert!(
        ok >= 2 && denied == 0,
        "gate calls with the token: {ok}, without: {denied}"
    );
    let second = format!(
        "shop-web-{}",
        hash(&wait_phase(&client, &apps, "shop", Phase::Stable, WAIT).await)
    );
    wait_until(
        WAIT,
        "the first revision pruned with its stored template, the second stored",
        || async {
            let revs = revisions(&client, &apps, "shop").await;
            let first_gone = stored.get_opt(&first).await.ok()?.is_none();
            let second_kept = stored.get_opt(&second).await.ok()?.is_some();
            (first_gone && second_kept && !revs.contains_key(&first)).then_some(())
        },
    )
    .await;
    // Config: the template changed (not the config), so both revisions read
    // the same copies; one ConfigMap and one Secret copy, named by content.
    let by_plan = ListParams::default().labels("releaseplan.io/plan=shop");
    let map_copies = Api::<ConfigMap>::namespaced(client.clone(), &apps)
        .list(&by_plan)
        .await
        .expect("list copies");
    let secret_copies = Api::<Secret>::namespaced(client.clone(), &apps)
        .list(&by_plan)
        .await
        .expect("list copies");
    assert_eq!(
        (map_copies.items.len(), secret_copies.items.len()),
        (1, 1),
        "{}",
        op.log_text()
    );
    assert_eq!(map_copies.items[0].immutable, Some(true));
    // A config-only change is a release too; the copy only the pruned
    // revision read goes with it.
    Api::<ConfigMap>::namespaced(client.clone(), &apps)
        .patch(
            "shop-config",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "shop-config"}, "data": {"GREETING": "bye"}})),
        )
        .await
        .expect("change the config");
    wait_until(
        WAIT,
        "the config change released and the old copy pruned",
        || async {
            let p = plans::get(&client, &apps, "shop").await?;
            let third = format!("shop-web-{}", hash(&p));
            if third == second || p.status.as_ref()?.phase != Phase::Stable {
                return None;
            }
            let copies = Api::<ConfigMap>::namespaced(client.clone(), &apps)
                .list(&by_plan)
                .await
                .ok()?;
            (copies.items.len() == 1
                && copies.items[0]
                    .data
                    .as_ref()?
                    .get("GREETING")
                    .map(String::as_str)
                    == Some("bye"))
            .then_some(())
        },
    )
    .await;

    let events = Api::<Event>::namespaced(client.clone(), &apps)
        .list(&ListParams::default())
        .await
        .expect("list events");
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reporting_controller.as_deref() == Some("releaseplan")),
        "the operator recorded events"
    );
    // Deleting the plan: the operator's finalizer comes off (a merge patch)
    // with the same rules.
    Api::<releaseplan::api::ReleasePlan>::namespaced(client.clone(), &apps)
        .delete("shop", &kube::api::DeleteParams::default())
        .await
        .expect("delete the plan");
    wait_until(WAIT, "the deleted plan to be gone", || async {
        plans::get(&client, &apps, "shop")
            .await
            .is_none()
            .then_some(())
    })
    .await;

    let log = op.log_text();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "a request was forbidden:\n{log}"
    );
    assert!(op.counter("releaseplan_api_writes_total").await > 0.0);

    let status = op.terminate().await;
    assert!(
        status.is_some_and(|s| s.success()),
        "clean exit on SIGTERM: {status:?}\n{}",
        op.log_text()
    );
    let holder = leases
        .get("releaseplan-leader")
        .await
        .expect("the lease")
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(
        holder.is_empty(),
        "the lease was released, held by {holder:?}"
    );
}

#[tokio::test]
async fn the_operator_rolls_out_with_the_chart_cluster_role_only() {
    rollout_with_chart_rbac("chart-op", false).await;
}

#[tokio::test]
async fn the_operator_rolls_out_with_the_chart_namespaced_role_only() {
    rollout_with_chart_rbac("chart-opns", true).await;
}

/// A tenant's plan in a namespace `config.namespaces` does not list: the
/// operator, with nothing but the chart's RBAC, never reads or copies the
/// Secret the plan's template names; the pods read it live, and the plan
/// says why. The namespace that is listed is the only one whose Secrets the
/// operator may list.
#[tokio::test]
async fn a_tenant_cannot_make_the_operator_read_or_copy_a_secret_of_a_namespace_not_listed() {
    let client = cluster::client().await;
    let tenant = cluster::test_namespace(&client, "chart-tenant").await;
    let granted = cluster::test_namespace(&client, "chart-granted").await;
    let listed = format!("config.namespaces[0]={granted}");
    let i = install(&client, "chart-cfgns", &[listed.as_str()]).await;
    let c = &i.sa_client;
    // RBAC: the listed namespace's Secrets, nobody else's.
    assert!(may(c, "list", "", "secrets", Some(&granted)).await);
    for ns in [tenant.as_str(), "default", "kube-system"] {
        for verb in ["get", "list", "watch", "create"] {
            assert!(
                !may(c, verb, "", "secrets", Some(ns)).await,
                "{verb} secrets in {ns}"
            );
        }
    }
    assert!(!may(c, "list", "", "secrets", None).await);
    let read = Api::<Secret>::namespaced(c.clone(), &tenant)
        .get("shop-secret")
        .await;
    assert!(is_forbidden(&read), "{read:?}");

    // The tenant's plan names a Secret and a ConfigMap of its namespace.
    Api::<Secret>::namespaced(client.clone(), &tenant)
        .patch(
            "shop-secret",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "shop-secret"}, "stringData": {"TOKEN": "t"}})),
        )
        .await
        .expect("create the tenant's Secret");
    Api::<ConfigMap>::namespaced(client.clone(), &tenant)
        .patch(
            "shop-config",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "shop-config"}, "data": {"GREETING": "hi"}})),
        )
        .await
        .expect("create the tenant's ConfigMap");
    let kubeconfig = i.kubeconfig.to_str().expect("utf-8 path");
    let op = Operator::launcher(&tenant)
        .args([format!("--config-namespaces={granted}")])
        .env("KUBECONFIG", kubeconfig)
        .env("POD_NAMESPACE", &i.namespace)
        .start()
        .await;
    let mut web = web("shop:1", 2);
    web["template"]["spec"]["containers"][0]["envFrom"] = json!([
        {"configMapRef": {"name": "shop-config"}},
        {"secretRef": {"name": "shop-secret"}}]);
    create(
        &client,
        &tenant,
        &plan("shop", json!({"components": [web]})),
    )
    .await;
    // Not held: Stable, with no request refused (wait_stable reads the log).
    wait_stable(&client, &op, &tenant, "shop").await;
    let p = plans::get(&client, &tenant, "shop")
        .await
        .expect("the plan");
    let (status, reason, message) =
        plans::condition(&p, "ConfigVersioned").expect("the ConfigVersioned condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ConfigAccessDenied")
    );
    for part in [
        "web: Secret shop-secret",
        "web: ConfigMap shop-config",
        "config.namespaces",
    ] {
        assert!(message.contains(part), "{part} in {message}");
    }
    // The pods read the tenant's objects themselves: nothing was copied.
    let deployments = Api::<Deployment>::namespaced(client.clone(), &tenant)
        .list(&ListParams::default().labels(releaseplan::api::LABEL_PLAN))
        .await
        .expect("list Deployments");
    assert_eq!(deployments.items.len(), 1);
    let env_from = serde_json::to_value(
        &deployments.items[0]
            .spec
            .as_ref()
            .expect("spec")
            .template
            .spec
            .as_ref()
            .expect("pod spec")
            .containers[0]
            .env_from,
    )
    .expect("json");
    assert_eq!(
        env_from,
        json!([{"configMapRef": {"name": "shop-config"}}, {"secretRef": {"name": "shop-secret"}}])
    );
    let copies = Api::<Secret>::namespaced(client.clone(), &tenant)
        .list(&ListParams::default().labels(releaseplan::api::LABEL_PLAN))
        .await
        .expect("list Secrets");
    assert!(
        copies.items.is_empty(),
        "no copy of a Secret: {:?}",
        copies.items.len()
    );
    let events = plans::plan_events(&client, &tenant, "shop").await;
    assert_eq!(
        events
            .iter()
            .filter(|e| e.0 == "ConfigNotVersioned")
            .count(),
        1,
        "{events:?}"
    );
}

#[test]
fn gate_outbound_values_become_flags() {
    let args_of = |objs: &[Value]| {
        strings(&one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"])
    };
    // Defaults: no outbound flag, the operator's defaults (link-local and
    // metadata refused); the gate policy and the budget of gate calls, at
    // the operator's defaults too.
    let args = args_of(&render("rp", "rp-system", &[]));
    let gate_flags: Vec<&String> = args.iter().filter(|a| a.starts_with("--gate-")).collect();
    assert_eq!(
        gate_flags,
        [
            "--gate-policy=required",
            "--gate-max-answer-bytes=262144",
            "--gate-calls-in-flight=32",
            "--gate-calls-in-flight-per-namespace=8",
            "--gate-calls-per-second=50",
            "--gate-calls-per-second-per-namespace=10"
        ],
        "{args:?}"
    );
    let args = args_of(&render(
        "rp",
        "rp-system",
        &[
            "gates.denyCidrs={10.0.0.0/8,fd00::/8}",
            "gates.allowHosts={prometheus.monitoring.svc,*.svc.cluster.local}",
            "gates.errorBodyChars=120",
        ],
    ));
    for want in [
        "--gate-deny-cidrs=10.0.0.0/8,fd00::/8",
        "--gate-allow-hosts=prometheus.monitoring.svc,*.svc.cluster.local",
        "--gate-error-body-chars=120",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
    }
    for set in [
        "gates.errorBodyChars=5000",
        "gates.denyCidrs={not a cidr}",
        "gates.denyCidr={10.0.0.0/8}",
    ] {
        let err = render_error(&[set]);
        assert!(err.contains("schema"), "{set}: {err}");
    }
}

#[test]
fn network_policy_lets_only_the_named_namespaces_scrape_metrics() {
    let objs = render(
        "rp",
        "rp-system",
        &["networkPolicy.metricsNamespaces={monitoring,observability}"],
    );
    assert_eq!(
        one(&objs, "NetworkPolicy")["spec"]["ingress"],
        serde_json::json!([{
            "ports": [{"port": "http-metrics", "protocol": "TCP"}],
            "from": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}}
            ]
        }])
    );
    // Peers of its own beside them.
    let objs = render(
        "rp",
        "rp-system",
        &[
            "networkPolicy.metricsNamespaces={monitoring}",
            "networkPolicy.metricsFrom[0].podSelector.matchLabels.app=vm",
        ],
    );
    assert_eq!(
        one(&objs, "NetworkPolicy")["spec"]["ingress"][0]["from"],
        serde_json::json!([
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
            {"podSelector": {"matchLabels": {"app": "vm"}}}
        ])
    );
    let err = render_error(&["networkPolicy.metricsNamespaces={Not_A_Name}"]);
    assert!(err.contains("schema"), "{err}");
}

#[test]
fn network_policy_egress_can_be_limited_to_cidrs() {
    // Default: all egress.
    let objs = render("rp", "rp-system", &[]);
    assert_eq!(
        one(&objs, "NetworkPolicy")["spec"]["egress"],
        serde_json::json!([{}])
    );
    let objs = render(
        "rp",
        "rp-system",
        &["networkPolicy.egressCidrs={10.0.0.1/32,10.96.5.0/24}"],
    );
    assert_eq!(
        one(&objs, "NetworkPolicy")["spec"]["egress"],
        serde_json::json!([
            {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
            {"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}, {"ipBlock": {"cidr": "10.96.5.0/24"}}]}
        ])
    );
    let err = render_error(&["networkPolicy.egressCidrs={10.0.0.1}"]);
    assert!(err.contains("schema"), "{err}");
}

/// What Artifact Hub shows of the chart is true: the CRDs its annotation
/// lists are the chart's `crds/` (kind, version, name), each example is a
/// plan `lint` finds valid offline (the CRD's schema and CEL rules, the
/// operator's checks), the license is Cargo.toml's, and the repository's
/// URLs are left to `make dist` (which knows them), not made up here.
#[test]
fn the_charts_artifact_hub_annotations_are_true() {
    use releaseplan::cli::lint::{Verdict, check_document};
    use std::collections::BTreeSet;
    let chart: yaml_serde::Value = yaml_serde::from_str(
        &std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml is YAML");
    let ann = &chart["annotations"];
    let listed: Vec<serde_json::Value> =
        yaml_serde::from_str(ann["artifacthub.io/crds"].as_str().expect("crds")).expect("YAML");
    let listed: BTreeSet<(String, String, String)> = listed
        .iter()
        .map(|c| {
            assert!(
                c["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{c}"
            );
            (
                c["kind"].as_str().unwrap().to_string(),
                c["version"].as_str().unwrap().to_string(),
                c["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut shipped = BTreeSet::new();
    for entry in std::fs::read_dir(chart_dir().join("crds")).expect("crds/") {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for doc in yaml_serde::Deserializer::from_str(&text) {
            let crd: serde_json::Value = serde::Deserialize::deserialize(doc).expect("a CRD");
            for v in crd["spec"]["versions"].as_array().unwrap() {
                shipped.insert((
                    crd["spec"]["names"]["kind"].as_str().unwrap().to_string(),
                    v["name"].as_str().unwrap().to_string(),
                    crd["metadata"]["name"].as_str().unwrap().to_string(),
                ));
            }
        }
    }
    assert_eq!(
        listed, shipped,
        "artifacthub.io/crds against charts/releaseplan/crds"
    );
    let examples: Vec<serde_json::Value> = yaml_serde::from_str(
        ann["artifacthub.io/crdsExamples"]
            .as_str()
            .expect("examples"),
    )
    .expect("YAML");
    assert!(!examples.is_empty());
    for ex in &examples {
        assert!(
            matches!(check_document(ex), Verdict::Valid(_)),
            "an invalid example: {:?}",
            check_document(ex)
        );
    }
    let cargo = std::fs::read_to_string(cluster::repo_root().join("Cargo.toml")).unwrap();
    let license = cargo
        .lines()
        .find_map(|l| l.strip_prefix("license = "))
        .expect("license in Cargo.toml")
        .trim_matches('"');
    assert_eq!(ann["artifacthub.io/license"].as_str(), Some(license));
    assert!(chart.get("home").is_none() && chart.get("sources").is_none());
    assert!(cluster::repo_root().join("docs/images/icon.svg").is_file());
}
