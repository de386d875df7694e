//! What the operator ships for monitoring, checked by the monitoring stack's
//! own parts: the Grafana dashboard's every query runs on a real Prometheus
//! scraping a real operator (and names only metrics and labels the operator
//! exports), the chart's PrometheusRule carries the alerts of
//! integrations/prometheus for the release and passes `promtool check
//! rules`, and the API server accepts the chart's ServiceMonitor and
//! PrometheusRule against the prometheus-operator's own CRDs.
//!
//! Needs the local cluster (`make test`), Prometheus and promtool (Debian's
//! `prometheus` package, which `make test` installs) and the
//! prometheus-operator CRDs of `make tools` (e2e/build-control-plane.sh).

use crate::support;

use releaseplan::api::Phase;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use support::fixtures::{faulty_template, web, web_with};
use support::plans::{condition, create_stable, request, set_components, wait_phase};
use support::servers::{Prometheus, http_client};
use support::tools::{cached, helm_bin, k8s_version, kubectl_bin, output, run};
use support::{Harness, WAIT, cluster, wait_until};

fn root() -> PathBuf {
    cluster::repo_root()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `helm template` of the chart for release `rp` in `namespace`, with `sets`.
fn render(namespace: &str, sets: &[&str]) -> Vec<Value> {
    let chart = root().join("charts/releaseplan");
    let kube_version = k8s_version();
    let mut args = vec![
        "template",
        "rp",
        chart.to_str().unwrap(),
        "--namespace",
        namespace,
        "--kube-version",
        &kube_version,
        "--set",
        "image.repository=registry.example.com/releaseplan",
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    let text = run(&helm_bin(), &args, None);
    yaml_serde::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("the chart renders YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn of_kind<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<_> = objs.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} expected");
    found[0]
}

fn dashboard() -> Value {
    serde_json::from_str(&read("integrations/grafana/releaseplan-dashboard.json"))
        .expect("the dashboard is JSON")
}

/// Every query of the dashboard: (panel title, PromQL as Grafana sends it).
fn dashboard_queries(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().expect("every target has an expr");
            out.push((p["title"].as_str().unwrap_or_default().into(), expr.into()));
        }
    }
    out
}

/// The metric names a query reads (`releaseplan_...`, `process_...`).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for prefix in ["releaseplan_", "process_"] {
        let mut rest = expr;
        while let Some(i) = rest.find(prefix) {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                .collect();
            rest = &rest[i + name.len()..];
            out.insert(name);
        }
    }
    out
}

/// The labels of every `by (...)` clause of a query.
fn grouping_labels(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("by (") {
        rest = &rest[i + 4..];
        let end = rest.find(')').expect("a closed by clause");
        out.extend(rest[..end].split(',').map(|l| l.trim().to_string()));
        rest = &rest[end..];
    }
    out
}

/// The family a sample name belongs to (OpenMetrics suffixes removed).
fn family(sample: &str) -> &str {
    ["_bucket", "_count", "_sum", "_total", "_created"]
        .iter()
        .find_map(|s| sample.strip_suffix(s))
        .unwrap_or(sample)
}

/// The sample lines of a family in the operator's /metrics text.
fn samples<'a>(text: &'a str, family_name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            let name = l.split(['{', ' ']).next().unwrap_or_default();
            family(name) == family_name
        })
        .collect()
}

#[test]
fn the_charts_copies_are_the_integrations_files() {
    for (copy, original) in [
        (
            "charts/releaseplan/files/alerts.yaml",
            "integrations/prometheus/alerts.yaml",
        ),
        (
            "charts/releaseplan/files/releaseplan-dashboard.json",
            "integrations/grafana/releaseplan-dashboard.json",
        ),
        (
            "charts/releaseplan/files/vllm-gate-templates.yaml",
            "integrations/vllm/gate-templates.yaml",
        ),
    ] {
        assert!(
            read(copy) == read(original),
            "{copy} differs from {original}: cp {original} {copy}"
        );
    }
}

#[test]
fn the_prometheus_rule_carries_the_alerts_for_the_release_and_passes_promtool() {
    let objs = render(
        "ops",
        &[
            "prometheusRule.enabled=true",
            "prometheusRule.labels.release=kube-prometheus",
            "leaderElection.leaseName=rp-lease",
        ],
    );
    let rule = of_kind(&objs, "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["namespace"], "ops");
    assert_eq!(rule["metadata"]["labels"]["release"], "kube-prometheus");
    // The same rules as the shipped file, for this release: its namespace,
    // its Lease and its metrics Service (the ServiceMonitor's job label).
    let expected = read("integrations/prometheus/alerts.yaml")
        .replace(r#"namespace="releaseplan-system""#, r#"namespace="ops""#)
        .replace(r#"lease="releaseplan-leader""#, r#"lease="rp-lease""#)
        .replace(
            r#"job="releaseplan-metrics""#,
            r#"job="rp-releaseplan-metrics""#,
        );
    assert_ne!(expected, read("integrations/prometheus/alerts.yaml"));
    let expected: Value = yaml_serde::from_str(&expected).unwrap();
    assert_eq!(rule["spec"], expected);
    let text = serde_json::to_string(&rule["spec"]).unwrap();
    assert!(!text.contains("releaseplan-system") && !text.contains("releaseplan-leader"));
    // promtool parses every expression and template of the rendered rules.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.yaml");
    std::fs::write(&file, yaml_serde::to_string(&rule["spec"]).unwrap()).unwrap();
    let out = output(
        std::path::Path::new("promtool"),
        &["check", "rules", file.to_str().unwrap()],
        None,
    );
    assert!(
        out.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Off by default.
    assert!(
        !render("ops", &[])
            .iter()
            .any(|o| o["kind"] == "PrometheusRule")
    );
}

#[test]
fn the_dashboard_config_map_holds_the_dashboard_for_grafanas_sidecar() {
    let objs = render(
        "ops",
        &[
            "grafanaDashboard.enabled=true",
            "grafanaDashboard.namespace=monitoring",
        ],
    );
    let cm = objs
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "rp-releaseplan-dashboard")
        .expect("the dashboard ConfigMap");
    assert_eq!(cm["metadata"]["namespace"], "monitoring");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let held: Value =
        serde_json::from_str(cm["data"]["releaseplan-dashboard.json"].as_str().unwrap()).unwrap();
    assert_eq!(held, dashboard());
    assert!(
        !render("ops", &[])
            .iter()
            .any(|o| o["metadata"]["name"] == "rp-releaseplan-dashboard")
    );
}

#[test]
fn the_dashboards_queries_read_only_metrics_the_operator_registers() {
    // Offline half of the live test below: every family a query names is
    // registered by the operator (its HELP is in the source).
    let source = read("src/ops/metrics.rs") + &read("src/ops/process.rs");
    let queries = dashboard_queries(&dashboard());
    assert!(queries.len() >= 15, "{} queries", queries.len());
    for (title, expr) in &queries {
        for name in metric_names(expr) {
            let registered = family(&name).trim_start_matches("releaseplan_");
            assert!(
                source.contains(&format!("\"{registered}\"")),
                "panel {title:?} reads {name}, which src/ops/metrics.rs does not register"
            );
        }
    }
}

/// Runs an instant query; panics unless Prometheus accepts it.
async fn query(prom: &str, expr: &str) -> Vec<Value> {
    let resp: Value = http_client()
        .get(format!("{prom}/api/v1/query"))
        .query(&[("query", expr)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(resp["status"], "success", "{expr}: {resp}");
    resp["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn every_dashboard_query_runs_on_a_real_prometheus_scraping_the_operator() {
    let (Harness { client, ns }, op) = Harness::with_operator("dashboard").await;
    // A first release and a promoted rollout: plans, rollouts, their
    // durations, writes and requests all have samples.
    let steps = json!([{"setWeight": 50}, {"pause": {}}]);
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 2)], "strategy": {"steps": steps}}),
    )
    .await;
    // A second plan whose new version crash-loops: rolled back, it is one
    // "needing attention", and its rollback counts against podHealth.
    create_stable(
        &client,
        &ns,
        "cart",
        json!({"components": [web("cart:1", 2)]}),
    )
    .await;
    set_components(
        &client,
        &ns,
        "cart",
        json!([web_with(faulty_template("cart:2", "crash-loop"), 2)]),
    )
    .await;
    set_components(&client, &ns, "shop", json!([web("shop:2", 2)])).await;
    wait_until(WAIT, "the rollout to hold at its pause", || async {
        let p = support::plans::get(&client, &ns, "shop").await?;
        let held = condition(&p, "Paused").map(|c| c.0).as_deref() == Some("True");
        (p.status?.phase == Phase::RollingOut && held).then_some(())
    })
    .await;
    request(&client, &ns, "shop", "promote").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_phase(&client, &ns, "cart", Phase::RolledBack, WAIT).await;

    let target: SocketAddr = format!("127.0.0.1:{}", op.port).parse().unwrap();
    // Scraped as the chart's ServiceMonitor has the prometheus-operator
    // scrape it: the target carries the operator's namespace, which must not
    // replace the plans' own `namespace` label (the alerts and the
    // dashboard group plans by it).
    let objs = render("releaseplan-system", &["serviceMonitor.enabled=true"]);
    let monitor = of_kind(&objs, "ServiceMonitor");
    let service = objs
        .iter()
        .find(|o| o["kind"] == "Service" && o["spec"]["ports"][0]["name"] == "http-metrics")
        .expect("the metrics Service");
    let service = service["metadata"]["name"].as_str().unwrap();
    let prom = Prometheus::start_as_service_monitor(
        target,
        &monitor["spec"]["endpoints"][0],
        &[
            ("namespace", "releaseplan-system"),
            ("service", service),
            ("job", service),
            ("endpoint", "http-metrics"),
        ],
    );
    // Enough scrapes (one a second) for rate() over the 30s the test gives
    // Grafana's $__rate_interval.
    wait_until(
        WAIT,
        "Prometheus to have scraped the operator 5 times",
        || async {
            let r = query(&prom.url, "count_over_time(up[1m])").await;
            let n: f64 = r.first()?["value"][1].as_str()?.parse().ok()?;
            (n >= 5.0).then_some(())
        },
    )
    .await;

    let text = op.metrics().await;
    let queries = dashboard_queries(&dashboard());
    let mut with_data = 0;
    for (title, expr) in &queries {
        let promql = expr
            .replace("$__rate_interval", "30s")
            .replace("$namespace", ".*");
        let families: BTreeSet<String> = metric_names(expr)
            .iter()
            .map(|n| family(n).to_string())
            .collect();
        // Families without a sample are not rendered at all: only the
        // gate families may lack one here (this test runs no gate).
        for f in &families {
            assert!(
                text.contains(&format!("# TYPE {f} "))
                    || ["releaseplan_gate_value", "releaseplan_gate_failures"]
                        .contains(&f.as_str()),
                "panel {title:?}: the operator exports no {f}"
            );
        }
        // Every label a panel groups by is one the metrics carry.
        let lines: Vec<&str> = families.iter().flat_map(|f| samples(&text, f)).collect();
        for label in grouping_labels(expr) {
            if label == "le" {
                continue;
            }
            assert!(
                lines.is_empty() || lines.iter().any(|l| l.contains(&format!("{label}=\""))),
                "panel {title:?} groups by {label}, which {families:?} do not carry"
            );
        }
        let result = query(&prom.url, &promql).await;
        // A query over families that all have samples shows something.
        if families.iter().all(|f| !samples(&text, f).is_empty()) {
            assert!(!result.is_empty(), "panel {title:?}: no data for {promql}");
            with_data += 1;
        }
    }
    // Only the two gate panels (no gates here) may lack samples.
    assert!(
        with_data >= queries.len() - 2,
        "{with_data} of {} queries had data",
        queries.len()
    );
    // The namespace variable lists the test's namespace.
    let values: Value = http_client()
        .get(format!("{}/api/v1/label/namespace/values", prom.url))
        .query(&[("match[]", "releaseplan_plan_info")])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        values["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == &Value::String(ns.clone())),
        "{values}"
    );
    // The plans keep their namespace (no `exported_namespace`), and what
    // has no namespace of its own gets the operator's.
    let plan = query(
        &prom.url,
        &format!("releaseplan_plan_info{{plan=\"shop\", namespace=\"{ns}\"}}"),
    )
    .await;
    assert_eq!(plan.len(), 1, "{plan:?}");
    assert!(
        plan[0]["metric"].get("exported_namespace").is_none(),
        "{plan:?}"
    );
    let up = query(&prom.url, "up").await;
    assert_eq!(up[0]["metric"]["namespace"], "releaseplan-system", "{up:?}");
}

#[tokio::test]
async fn the_api_server_accepts_the_monitoring_objects_against_the_prometheus_operator_crds() {
    let Harness { client, ns } = Harness::new("monitoring").await;
    let crds = cached("prometheus-operator-crds", "PROMETHEUS_OPERATOR_VERSION")
        .filter(|d| d.is_dir())
        .expect("the prometheus-operator CRDs: run `make tools`");
    for kind in ["servicemonitors", "prometheusrules"] {
        let file = crds.join(format!("monitoring.coreos.com_{kind}.yaml"));
        run(
            &kubectl_bin(),
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                file.to_str().unwrap(),
            ],
            None,
        );
        // Polled: `kubectl wait` right after the apply can find no
        // conditions yet, and errors instead of waiting.
        let crds: kube::Api<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        > = kube::Api::all(client.clone());
        let name = format!("{kind}.monitoring.coreos.com");
        wait_until(WAIT, &format!("{name} to be Established"), || async {
            let crd = crds.get(&name).await.ok()?;
            crd.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        })
        .await;
    }
    let objs = render(
        &ns,
        &[
            "serviceMonitor.enabled=true",
            "prometheusRule.enabled=true",
            "grafanaDashboard.enabled=true",
        ],
    );
    let monitoring: Vec<&Value> = objs
        .iter()
        .filter(|o| {
            o["kind"] == "ServiceMonitor"
                || o["kind"] == "PrometheusRule"
                || o["metadata"]["name"] == "rp-releaseplan-dashboard"
        })
        .collect();
    assert_eq!(monitoring.len(), 3);
    let manifest: String = monitoring
        .iter()
        .map(|o| format!("---\n{}", yaml_serde::to_string(o).unwrap()))
        .collect();
    // Strict field validation: an unknown or misplaced field is an error,
    // not a warning, as the schema of the real CRDs has it.
    let out = output(
        &kubectl_bin(),
        &[
            "apply",
            "--server-side",
            "--field-manager=releaseplan-monitoring-tests",
            "--validate=strict",
            "-f",
            "-",
        ],
        Some(&manifest),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches("serverside-applied").count(), 3, "{stdout}");
    // A field the CRD does not know is refused: the check can fail.
    let mut bad = (*monitoring
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .unwrap())
    .clone();
    bad["spec"]["groups"][0]["rules"][0]["severity"] = json!("page");
    let out = output(
        &kubectl_bin(),
        &[
            "apply",
            "--server-side",
            "--dry-run=server",
            "--validate=strict",
            "-f",
            "-",
        ],
        Some(&yaml_serde::to_string(&bad).unwrap()),
    );
    assert!(!out.status.success(), "an unknown rule field was accepted");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("severity"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_vllm_gates_are_installed_only_when_asked_and_read_as_templates() {
    let objs = render("ops", &["modelServerGates.enabled=true"]);
    let mut names: Vec<String> = objs
        .iter()
        .filter(|o| o["kind"] == "ClusterGateTemplate")
        .map(|o| {
            // Each one is a template the operator reads.
            let _: releaseplan::api::template::ClusterGateTemplate =
                serde_json::from_value(o.clone()).expect("a ClusterGateTemplate");
            o["metadata"]["name"].as_str().unwrap().to_string()
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "vllm-e2e-latency",
            "vllm-error-rate",
            "vllm-inter-token-latency",
            "vllm-kv-cache-usage",
            "vllm-requests-waiting",
            "vllm-time-to-first-token"
        ]
    );
    assert!(
        !render("ops", &[])
            .iter()
            .any(|o| o["kind"] == "ClusterGateTemplate")
    );
}
