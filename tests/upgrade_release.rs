//! Upgrading from any earlier release changes nothing that runs: for each
//! release releases.txt records a commit for, its operator (built from that
//! commit by e2e/build-release.sh, which `make test` runs) drives plans into
//! each phase under that release's CRDs: Stable after a rollout,
//! RollingOut held at a pause, RolledBack by a failing gate, each with two
//! components and a webhook gate. It is stopped, the current CRDs are
//! applied and the current operator starts. Then no Deployment or
//! ControllerRevision is created or deleted, no Deployment's generation moves,
//! no pod is replaced, each plan's status keeps every field it had (new
//! fields may be added) and no Event is published; the held rollout then
//! resumes on request and promotes.
//!
//! A test binary of its own, as tests/upgrade.rs: it installs an older CRD on
//! the cluster every other test uses (put back whatever the outcome), and
//! cargo runs test binaries one at a time.

// Test code may unwrap, expect and panic (the lint policy of Cargo.toml).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic
)]

#[path = "it/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use futures::FutureExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use releaseplan::api::ReleasePlan;
use serde_json::{Value, json};
use support::fixtures::template;
use support::servers::serve;
use support::{Harness, WAIT, crd, plans, wait_until};

/// Each release releases.txt records a commit for, with the folder
/// e2e/build-release.sh built it into.
fn releases() -> Vec<(String, PathBuf)> {
    let root = support::cluster::repo_root();
    let text = std::fs::read_to_string(root.join("releases.txt")).expect("releases.txt");
    let cache = std::env::var_os("RP_CACHE").map_or_else(
        || PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/releaseplan"),
        PathBuf::from,
    );
    let releases: Vec<(String, PathBuf)> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, commit)| *commit != "pending")
        .map(|(version, commit)| {
            let dir = cache.join("releases").join(format!("{version}-{commit}"));
            assert!(
                dir.join("releaseplan").is_file(),
                "release {version} is not built in {}: run `e2e/build-release.sh all` (make test does)",
                dir.display()
            );
            (version.to_string(), dir)
        })
        .collect();
    assert!(
        !releases.is_empty(),
        "releases.txt records no release with a commit"
    );
    releases
}

/// The CRDs the release installs (its crds/ folder).
fn release_crds(dir: &std::path::Path) -> Vec<CustomResourceDefinition> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("crds"))
        .expect("the release's crds/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no CRD in {}", dir.display());
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            yaml_serde::Deserializer::from_str(&text)
                .map(|doc| {
                    use serde::Deserialize;
                    CustomResourceDefinition::deserialize(doc).expect("a CRD")
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

type Calls = Arc<Mutex<Vec<String>>>;

async fn answer(State(calls): State<Calls>, uri: axum::http::Uri) -> StatusCode {
    let path = uri.path().to_string();
    calls.lock().unwrap().push(path.clone());
    if path.starts_with("/fail/") {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    }
}

#[tokio::test]
async fn plans_in_every_phase_keep_running_untouched_across_the_upgrade_from_each_release() {
    // One release after another, each in a namespace of its own, under its
    // own CRDs.
    for (version, dir) in releases() {
        let h = Harness::new(&format!("upgrade-from-{}", version.replace('.', "-"))).await;
        crd::apply(&h.client, &release_crds(&dir)).await;
        let outcome = AssertUnwindSafe(upgrade(&h, &version, &dir))
            .catch_unwind()
            .await;
        // The current CRDs back for the next release and the binaries that
        // run after this one.
        crd::install(&h.client).await;
        if let Err(panic) = outcome {
            eprintln!("the upgrade from release {version} failed");
            std::panic::resume_unwind(panic);
        }
    }
}

/// Two components of `tag`, in the shape every release reads.
fn components(tag: &str) -> Value {
    json!([
        {"name": "web", "replicas": 2, "template": template(&format!("web:{tag}"))},
        {"name": "api", "replicas": 1, "template": template(&format!("api:{tag}"))}
    ])
}

/// A plan with a webhook gate calling `path`, in the previous release's
/// shape (`health.webhooks`, the list the current API still reads).
fn plan_object(name: &str, steps: Value, hook: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": ReleasePlan::api_version(&()), "kind": ReleasePlan::kind(&()),
        "metadata": {"name": name},
        "spec": {
            "components": components("1"),
            "strategy": {"steps": steps},
            "health": webhooks(hook)
        }
    }))
    .unwrap()
}

/// One webhook gate calling `url`, in the list every release reads.
fn webhooks(url: &str) -> Value {
    json!({"webhooks": [{"name": "hook", "url": url, "timeoutSeconds": 2, "retries": 0}]})
}

/// The state that must not move: each Deployment's uid and generation, the
/// ControllerRevisions and pods by uid, and the Events.
#[derive(Debug)]
struct Running {
    deployments: BTreeMap<String, (String, i64)>,
    revisions: BTreeMap<String, String>,
    pods: BTreeMap<String, String>,
    events: BTreeMap<String, (String, i32)>,
}

impl Running {
    /// What differs in `after`, one line per object.
    fn moved_in(&self, after: &Running) -> Vec<String> {
        fn diff<V: std::fmt::Debug + PartialEq>(
            what: &str,
            before: &BTreeMap<String, V>,
            after: &BTreeMap<String, V>,
            out: &mut Vec<String>,
        ) {
            for (name, v) in before {
                match after.get(name) {
                    None => out.push(format!("{what} {name} is gone")),
                    Some(a) if a != v => out.push(format!("{what} {name}: {v:?} became {a:?}")),
                    Some(_) => {}
                }
            }
            for (name, a) in after {
                if !before.contains_key(name) {
                    out.push(format!("{what} {name} is new: {a:?}"));
                }
            }
        }
        let mut out = Vec::new();
        diff(
            "Deployment",
            &self.deployments,
            &after.deployments,
            &mut out,
        );
        diff(
            "ControllerRevision",
            &self.revisions,
            &after.revisions,
            &mut out,
        );
        diff("Pod", &self.pods, &after.pods, &mut out);
        diff("Event", &self.events, &after.events, &mut out);
        out
    }
}

async fn running(client: &Client, ns: &str) -> Running {
    let lp = ListParams::default();
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|d| {
            let generation = d.metadata.generation.unwrap_or(0);
            (d.name_any(), (d.uid().unwrap_or_default(), generation))
        })
        .collect();
    let revisions = Api::<ControllerRevision>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|r| (r.name_any(), r.uid().unwrap_or_default()))
        .collect();
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect();
    // The operator's Events (on plans); the Deployment controller's would
    // show as moved Deployments.
    let events = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields("involvedObject.kind=ReleasePlan"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| {
            let what = format!(
                "{}: {}",
                e.involved_object.name.clone().unwrap_or_default(),
                e.reason.clone().unwrap_or_default()
            );
            (e.name_any(), (what, e.count.unwrap_or(1)))
        })
        .collect();
    Running {
        deployments,
        revisions,
        pods,
        events,
    }
}

/// Where `new` lost or changed what `old` holds, pushed to `out`: objects
/// may gain keys and condition lists conditions; everything else is equal
/// (lists keep their length and order).
fn lost(old: &Value, new: &Value, path: &str, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            for (k, v) in o {
                match n.get(k) {
                    Some(nv) => lost(v, nv, &format!("{path}.{k}"), out),
                    None if v.is_null() => {}
                    None => out.push(format!("{path}.{k}: {v} is gone")),
                }
            }
        }
        // Conditions by type: a new release may add a condition type.
        (Value::Array(o), Value::Array(n)) if o.iter().all(|c| c["type"].is_string()) => {
            for c in o {
                let t = &c["type"];
                match n.iter().find(|nc| nc["type"] == *t) {
                    Some(nc) => lost(c, nc, &format!("{path}[type={t}]"), out),
                    None => out.push(format!("{path}[type={t}] is gone")),
                }
            }
        }
        (Value::Array(o), Value::Array(n)) if o.len() == n.len() => {
            for (i, (ov, nv)) in o.iter().zip(n).enumerate() {
                lost(ov, nv, &format!("{path}[{i}]"), out);
            }
        }
        _ if old == new => {}
        _ => out.push(format!("{path}: {old} became {new}")),
    }
}

async fn status_of(raw: &Api<DynamicObject>, name: &str) -> Value {
    raw.get(name).await.unwrap().data["status"].clone()
}

async fn wait_phase_raw(raw: &Api<DynamicObject>, name: &str, phase: &str) -> Value {
    wait_until(
        support::JOB_WAIT,
        &format!("plan {name} to be {phase}"),
        || async {
            let p = raw.get(name).await.ok()?;
            let s = &p.data["status"];
            (s["phase"] == phase && s["observedGeneration"].as_i64() == p.metadata.generation)
                .then(|| s.clone())
        },
    )
    .await
}

async fn upgrade(h: &Harness, version: &str, dir: &std::path::Path) {
    let (client, ns) = (&h.client, h.ns.as_str());
    let calls: Calls = Arc::default();
    let addr = serve(
        Router::new()
            .route("/ok/{plan}", post(answer))
            .route("/fail/{plan}", post(answer))
            .with_state(calls.clone()),
    )
    .await;
    let raw: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<ReleasePlan>(&()));

    // The previous release drives three plans into their phases.
    let old = h.operator().binary(dir.join("releaseplan")).start().await;
    let pause_1s = json!([{"setWeight": 50}, {"pause": {"duration": "1s"}}]);
    let held = json!([{"setWeight": 50}, {"pause": {}}]);
    let ok = |plan: &str| format!("http://{addr}/ok/{plan}");
    let fail = |plan: &str| format!("http://{addr}/fail/{plan}");
    for (name, steps) in [
        ("stable", &pause_1s),
        ("held", &held),
        ("rolled-back", &pause_1s),
    ] {
        raw.create(
            &PostParams::default(),
            &plan_object(name, steps.clone(), &ok(name)),
        )
        .await
        .unwrap_or_else(|e| panic!("plan {name} under release {version}'s CRD: {e}"));
    }
    let mut first = BTreeMap::new();
    for name in ["stable", "held", "rolled-back"] {
        let s = wait_phase_raw(&raw, name, "Stable").await;
        first.insert(name, s["stableRevision"].clone());
        // The second release of rolled-back meets a failing gate.
        let hook = if name == "rolled-back" {
            fail(name)
        } else {
            ok(name)
        };
        plans::patch_spec(
            client,
            ns,
            name,
            json!({"components": components("2"), "health": webhooks(&hook)}),
        )
        .await;
    }
    wait_until(
        support::JOB_WAIT,
        "plan stable to promote its second release",
        || async {
            let s = status_of(&raw, "stable").await;
            (s["phase"] == "Stable" && s["stableRevision"] != first["stable"]).then_some(())
        },
    )
    .await;
    wait_phase_raw(&raw, "rolled-back", "RolledBack").await;
    let held_before = wait_until(
        WAIT,
        "plan held to hold at its pause with its gate passed",
        || async {
            let s = status_of(&raw, "held").await;
            let passed = s["gates"]
                .as_array()
                .is_some_and(|g| g.iter().any(|g| g["verdict"] == "Passed"));
            (s["phase"] == "RollingOut" && s["currentStep"] == 1 && passed).then_some(s)
        },
    )
    .await;
    assert_eq!(
        held_before["currentStep"], 1,
        "release {version} held the plan"
    );
    // The previous release settles, then stops as an upgrade stops it.
    let mut old = old;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        old.terminate().await.is_some_and(|s| s.success()),
        "release {version} stopped cleanly:\n{}",
        old.log_text()
    );
    let before = running(client, ns).await;
    let mut statuses = BTreeMap::new();
    for name in ["stable", "held", "rolled-back"] {
        statuses.insert(name, status_of(&raw, name).await);
    }
    assert!(
        before.deployments.len() >= 6,
        "two components of two revisions per plan: {:?}",
        before.deployments
    );
    let calls_before = calls.lock().unwrap().clone();
    let hooks_before = calls_before.len();

    // The upgrade: the current CRDs, then the current operator.
    crd::install(client).await;
    let new = h.operator().start().await;
    // Every plan reconciled by the new operator (each reconcile ends by
    // recording the plan's `releaseplan_plan_info`), then a quiet window in
    // which nothing may move.
    wait_until(WAIT, "the new operator to reconcile each plan", || async {
        let metrics = new.metrics().await;
        ["stable", "held", "rolled-back"]
            .iter()
            .all(|p| {
                metrics.lines().any(|l| {
                    l.starts_with("releaseplan_plan_info{")
                        && l.contains(&format!("namespace=\"{ns}\""))
                        && l.contains(&format!("plan=\"{p}\""))
                })
            })
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = running(client, ns).await;
    let moved = before.moved_in(&after);
    assert!(
        moved.is_empty(),
        "the upgrade from release {version} moved running objects or published Events:\n{}",
        moved.join("\n")
    );
    for (name, old_status) in &statuses {
        let mut diffs = Vec::new();
        lost(
            old_status,
            &status_of(&raw, name).await,
            &format!("{name}.status"),
            &mut diffs,
        );
        // The held rollout's gate is evaluated again all through its pause.
        diffs.retain(|d| !(d.starts_with("held.status.gates[") && d.contains("].lastEvaluated: ")));
        assert!(
            diffs.is_empty(),
            "the upgrade changed what release {version} wrote in the status:\n{}",
            diffs.join("\n")
        );
    }
    // The held rollout's gate is checked all through its pause; the others'
    // gates are called only while they roll out.
    let calls_now = calls.lock().unwrap().clone();
    assert_eq!(
        calls_now[..hooks_before],
        calls_before[..],
        "the calls before the upgrade"
    );
    let settled: Vec<&String> = calls_now[hooks_before..]
        .iter()
        .filter(|p| !p.ends_with("/held"))
        .collect();
    assert!(
        settled.is_empty(),
        "gates of settled plans called after the upgrade: {settled:?}"
    );

    // The held rollout resumes on request and promotes under the new operator.
    plans::request(client, ns, "held", "promote").await;
    let promoted = wait_phase_raw(&raw, "held", "Stable").await;
    assert_ne!(
        promoted["stableRevision"], statuses["held"]["stableRevision"],
        "the held rollout promoted its new revision"
    );
    let history = promoted["history"].as_array().cloned().unwrap_or_default();
    let old_history = statuses["held"]["history"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        history.len() > old_history.len(),
        "history kept and extended: {history:?}"
    );
    // Only the promoted plan moved.
    let last = running(client, ns).await;
    for (name, (uid, generation)) in &before.deployments {
        if !name.starts_with("held") {
            assert_eq!(
                last.deployments.get(name),
                Some(&(uid.clone(), *generation)),
                "{name} moved when another plan promoted"
            );
        }
    }
}
