//! `kubectl releaseplan preview` against the real control plane and the real
//! operator: a preview of a change, then the change applied and its rollout
//! compared with the preview step by step; and a Deployment the API server
//! refuses, caught by the preview's dry run before anything is applied.

use crate::support;

use kube::Client;
use releaseplan::api::Phase;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use support::fixtures::{plan, refused_template, template};
use support::plans::{create_stable, get, revisions, set_components};
use support::{Harness, WAIT, plans, wait_until};

/// Runs the plugin in namespace `ns`: (exit code, stdout, stderr).
async fn rp_in(ns: &str, args: &[&str]) -> (i32, String, String) {
    let mut args: Vec<String> = args.iter().map(ToString::to_string).collect();
    args.extend(["-n".to_string(), ns.to_string()]);
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-releaseplan"))
            .args(&args)
            .output()
            .expect("cannot run kubectl-releaseplan");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .expect("plugin thread")
}

fn components(version: &str) -> Value {
    json!([
        {"name": "web", "replicas": 4, "template": template(&format!("shop:{version}"))},
        {"name": "api", "replicas": 2, "template": template(&format!("api:{version}"))},
    ])
}

/// Two weights, each held by a pause until promoted, so that the real
/// rollout stays at each step long enough to be compared.
fn steps() -> Value {
    json!([{"setWeight": 25}, {"pause": {}}, {"setWeight": 50}, {"pause": {}}])
}

/// Writes a plan file and previews it from the live plan.
async fn preview(ns: &str, dir: &std::path::Path, spec: Value) -> (i32, Value, String) {
    preview_with(ns, dir, spec, &["--live"]).await
}

/// Writes a plan file and previews it with `extra` flags, as JSON.
async fn preview_with(
    ns: &str,
    dir: &std::path::Path,
    spec: Value,
    extra: &[&str],
) -> (i32, Value, String) {
    let file = dir.join("plan.yaml");
    let doc = serde_json::to_value(plan("shop", spec)).unwrap();
    std::fs::write(&file, yaml_serde::to_string(&doc).unwrap()).unwrap();
    let mut args = vec!["preview", "-f", file.to_str().unwrap(), "-o", "json"];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = rp_in(ns, &args).await;
    let v: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not a JSON document ({e}): exit {code}\n{stdout}\n{stderr}"));
    (code, v, stderr)
}

/// The replicas of each component's Deployments by image prefix: component
/// -> (replicas of version `new`, replicas of every other).
async fn live_split(client: &Client, ns: &str, new: &str) -> BTreeMap<String, (i64, i64)> {
    let mut out: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (_, (replicas, _, image)) in revisions(client, ns, "shop").await {
        let (component, version) = image.split_once(':').unwrap();
        let name = if component == "shop" { "web" } else { "api" };
        let e = out.entry(name.to_string()).or_default();
        if version == new {
            e.0 += i64::from(replicas);
        } else {
            e.1 += i64::from(replicas);
        }
    }
    out
}

fn preview_split(step: &Value) -> BTreeMap<String, (i64, i64)> {
    step["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                (
                    c["currentReplicas"].as_i64().unwrap(),
                    c["stableReplicas"].as_i64().unwrap(),
                ),
            )
        })
        .collect()
}

#[tokio::test]
async fn preview_matches_the_real_rollout_step_by_step() {
    let (h, _op) = Harness::with_operator("preview").await;
    let (client, ns) = (&h.client, h.ns.as_str());
    create_stable(
        client,
        ns,
        "shop",
        json!({"components": components("1"), "strategy": {"steps": steps()}}),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (code, v, stderr) = preview(
        ns,
        dir.path(),
        json!({"components": components("2"), "strategy": {"steps": steps()}}),
    )
    .await;
    assert_eq!(code, 0, "{v:#}\n{stderr}");
    assert_eq!(v["kind"], "Preview");
    assert_eq!(v["result"], "Stable");
    assert_eq!(v["rollout"], true);
    assert_eq!(v["fromLive"], true);
    for c in v["changes"].as_array().unwrap() {
        assert_eq!(c["newRevision"], true, "{c}");
        assert_eq!(
            c["fields"],
            json!(["template.spec.containers[app].image"]),
            "{c}"
        );
    }
    let dry = &v["dryRun"];
    assert_eq!(dry["plan"]["result"], "accepted", "{dry}");
    assert_eq!(dry["deployments"].as_array().unwrap().len(), 2, "{dry}");
    assert!(
        dry["deployments"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["result"] == "accepted"),
        "{dry}"
    );
    // The dry run stored nothing: the plan is as it was.
    assert_eq!(
        live_split(client, ns, "2")
            .await
            .values()
            .map(|s| s.0)
            .sum::<i64>(),
        0
    );
    let steps = v["steps"].as_array().unwrap().clone();
    let held: Vec<&Value> = steps
        .iter()
        .filter(|s| s["waitsForPromotion"] == true)
        .collect();
    assert_eq!(held.len(), 2, "{v:#}");

    set_components(client, ns, "shop", components("2")).await;
    // At each step that holds for a promotion, the real rollout settles where
    // the preview said: the step, its weight, and every component's split.
    for step in held {
        let index = step["index"].as_i64().unwrap();
        let want = preview_split(step);
        let got = wait_until(
            WAIT,
            &format!("the rollout to hold at step {index} as previewed ({want:?})"),
            || async {
                let p = get(client, ns, "shop").await?;
                let s = p.status.clone()?;
                if s.phase != Phase::RollingOut
                    || i64::from(s.current_step) != index
                    || i64::from(s.weight) != step["weight"].as_i64()?
                {
                    return None;
                }
                let got = live_split(client, ns, "2").await;
                (got == want).then_some(got)
            },
        )
        .await;
        assert_eq!(got, want);
        plans::request(client, ns, "shop", "promote").await;
    }
    let last = steps.last().unwrap();
    assert_eq!(last["text"], "stable");
    let want = preview_split(last);
    plans::wait_phase(client, ns, "shop", Phase::Stable, WAIT).await;
    wait_until(
        WAIT,
        "the old revisions to be scaled down as previewed",
        || async { (live_split(client, ns, "2").await == want).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn preview_dry_run_catches_a_deployment_the_api_server_refuses() {
    let (h, _op) = Harness::with_operator("preview-refused").await;
    let (client, ns) = (&h.client, h.ns.as_str());
    create_stable(
        client,
        ns,
        "shop",
        json!({"components": components("1"), "strategy": {"steps": steps()}}),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut bad = components("1");
    bad[0]["template"] = refused_template();
    let (code, v, stderr) = preview(
        ns,
        dir.path(),
        json!({"components": bad, "strategy": {"steps": steps()}}),
    )
    .await;
    assert_eq!(code, 2, "{v:#}\n{stderr}");
    let deployments = v["dryRun"]["deployments"].as_array().unwrap();
    assert_eq!(deployments.len(), 1, "only web changes: {v:#}");
    assert_eq!(deployments[0]["result"], "refused", "{v:#}");
    assert!(
        deployments[0]["message"].as_str().unwrap().contains("cpu"),
        "{v:#}"
    );
    // Nothing changed on the cluster.
    let p = get(client, ns, "shop").await.unwrap();
    assert_eq!(p.status.unwrap().phase, Phase::Stable);
}

/// `--with-gates`: each gate of the plan asked once, now, against live
/// endpoints, and nothing acted on. Three webhooks on 127.0.0.1: one that
/// passes, one that answers Inconclusive, one that fails with a 500; each is
/// named with its verdict, the answering ones were called exactly once, and
/// no plan was created.
#[tokio::test]
async fn preview_with_gates_asks_each_gate_once_and_acts_on_nothing() {
    use axum::response::IntoResponse;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    /// A route that answers `answer` to every POST and counts them.
    fn counted<T: IntoResponse + Clone + Send + Sync + 'static>(
        answer: T,
    ) -> (axum::routing::MethodRouter, Arc<AtomicUsize>) {
        let n = Arc::new(AtomicUsize::new(0));
        let calls = Arc::clone(&n);
        let route = axum::routing::post(move || {
            n.fetch_add(1, Ordering::SeqCst);
            let answer = answer.clone();
            async move { answer }
        });
        (route, calls)
    }
    let (ok, ok_calls) = counted("fine");
    let (unsure, unsure_calls) = counted(axum::Json(
        json!({"verdict": "Inconclusive", "reason": "no traffic yet"}),
    ));
    let app = axum::Router::new()
        .route("/ok", ok)
        .route("/unsure", unsure)
        .route(
            "/down",
            axum::routing::post(|| async {
                (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "down")
            }),
        );
    let addr = support::servers::serve(app).await;
    let h = Harness::new("preview-gates").await;
    let hook = |name: &str, path: &str| json!({"name": name, "webhook": {"url": format!("http://{addr}{path}"), "retries": 0}});
    let spec = json!({
        "components": components("1"),
        "strategy": {"steps": steps()},
        "health": {"gates": [hook("ok", "/ok"), hook("unsure", "/unsure"), hook("down", "/down")]},
    });
    let dir = tempfile::tempdir().unwrap();
    let (code, v, stderr) = preview_with(&h.ns, dir.path(), spec, &["--with-gates"]).await;
    assert_eq!(code, 0, "{v:#}\n{stderr}");
    let now: BTreeMap<String, (String, Value)> = v["gatesNow"]
        .as_array()
        .unwrap_or_else(|| panic!("gatesNow must be a list with --with-gates: {v:#}"))
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap().to_string(),
                (
                    g["verdict"].as_str().unwrap().to_string(),
                    g["value"].clone(),
                ),
            )
        })
        .collect();
    assert_eq!(now.len(), 3, "{v:#}");
    assert_eq!(now["ok"], ("Passed".to_string(), json!(200.0)), "{v:#}");
    assert_eq!(now["unsure"].0, "Inconclusive", "{v:#}");
    assert_eq!(now["down"].0, "Failed", "{v:#}");
    assert_eq!(ok_calls.load(Ordering::SeqCst), 1);
    assert_eq!(unsure_calls.load(Ordering::SeqCst), 1);
    // A preview applies nothing.
    assert!(get(&h.client, &h.ns, "shop").await.is_none());

    // Without the flag no gate is asked.
    let (code, v, stderr) = preview_with(
        &h.ns,
        dir.path(),
        json!({"components": components("1"), "health": {"gates": [hook("ok", "/ok")]}}),
        &[],
    )
    .await;
    assert_eq!(code, 0, "{v:#}\n{stderr}");
    assert!(v["gatesNow"].is_null(), "{v:#}");
    assert_eq!(ok_calls.load(Ordering::SeqCst), 1);
}

/// A plan that reads a ConfigMap (config versioned, the default): preview
/// runs the operator's config versioning, so an unchanged plan previews as no
/// change, and a change of the ConfigMap alone as a new revision naming it,
/// the very revision the operator then rolls out.
#[tokio::test]
async fn preview_versions_config_as_the_operator_does() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let (h, op) = Harness::with_operator("preview-config").await;
    let (client, ns) = (&h.client, h.ns.as_str());
    let maps = kube::Api::<ConfigMap>::namespaced(client.clone(), ns);
    let config = |value: &str| -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": "shop-config"},
            "data": {"GREETING": value}
        }))
        .unwrap()
    };
    maps.create(&Default::default(), &config("hello"))
        .await
        .unwrap();
    let mut web = template("shop:1");
    web["spec"]["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "shop-config"}}]);
    let spec = json!({
        "components": [{"name": "web", "replicas": 2, "template": web}],
        "strategy": {"steps": [{"setWeight": 50}]}
    });
    let live = create_stable(client, ns, "shop", spec.clone()).await;
    let live_hash = live.status.unwrap().components[0]
        .current_hash
        .clone()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();

    // Unchanged: no rollout, the live revision kept.
    let (code, v, stderr) = preview(ns, dir.path(), spec.clone()).await;
    assert_eq!(code, 0, "{v:#}\n{stderr}");
    assert_eq!(v["rollout"], false, "{v:#}\n{stderr}");
    let web = &v["changes"][0];
    assert_eq!(web["newRevision"], false, "{v:#}");
    assert_eq!(web["hash"].as_str(), Some(live_hash.as_str()), "{v:#}");

    // The ConfigMap alone changes: a new revision, naming it. The operator
    // is stopped meanwhile, or it would roll the change out before the
    // preview reads the live plan.
    drop(op);
    maps.replace("shop-config", &Default::default(), &{
        let mut m = maps.get("shop-config").await.unwrap();
        m.data = config("bonjour").data;
        m
    })
    .await
    .unwrap();
    let (code, v, stderr) = preview(ns, dir.path(), spec).await;
    assert_eq!(code, 0, "{v:#}\n{stderr}");
    assert_eq!(v["rollout"], true, "{v:#}");
    let web = &v["changes"][0];
    assert_eq!(web["change"], "unchanged", "the spec is the same: {v:#}");
    assert_eq!(web["newRevision"], true, "{v:#}");
    assert_eq!(web["config"], json!(["ConfigMap shop-config"]), "{v:#}");
    let previewed = web["hash"].as_str().unwrap().to_string();
    assert_ne!(previewed, live_hash);
    // The operator rolls out the revision the preview announced.
    let _op = h.operator().start().await;
    let rolled = wait_until(WAIT, "the operator rolls the new config out", || async {
        let p = get(client, ns, "shop").await?;
        let h = p.status?.components[0].current_hash.clone()?;
        (h != live_hash).then_some(h)
    })
    .await;
    assert_eq!(rolled, previewed);
}
