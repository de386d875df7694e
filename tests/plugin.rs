//! The `kubectl-releaseplan` binary against the real local control plane, with
//! the real operator running: each test has its own namespace and operator.

// Test code may unwrap, expect and panic (the lint policy of Cargo.toml).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::pedantic
)]

mod support;

use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use kube::Client;
use kube::api::{Api, DeleteParams};
use releaseplan::api::{Phase, ReleasePlan};
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::{faulty_template, plan, template, web};
use support::plans::{by_image, create, create_stable, get, revisions, set_components, wait_phase};
use support::{Harness, plans, wait_until};

const T: Duration = Duration::from_secs(90);

/// What one plugin run did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn show(&self) -> String {
        format!(
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs the plugin with `args` (KUBECONFIG comes from the environment).
async fn rp(args: &[&str]) -> Run {
    let args: Vec<String> = args.iter().map(std::string::ToString::to_string).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-releaseplan"))
            .args(&args)
            .output()
            .expect("cannot run kubectl-releaseplan");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .expect("plugin thread")
}

/// Runs the plugin in namespace `ns`.
async fn rp_in(ns: &str, args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.extend(["-n", ns]);
    rp(&all).await
}

fn status_of(p: &ReleasePlan) -> releaseplan::api::ReleasePlanStatus {
    p.status.clone().unwrap_or_default()
}

/// Creates plan `shop` with `steps`, waits for the first release of `shop:1`,
/// then changes the image to `shop:2` and waits for the indefinite pause at step 1.
async fn at_pause(client: &Client, ns: &str) -> ReleasePlan {
    let steps = json!([{"setWeight": 50}, {"pause": {}}]);
    create(
        client,
        ns,
        &plan(
            "shop",
            json!({"components": [web("shop:1", 2)], "strategy": {"steps": steps}}),
        ),
    )
    .await;
    wait_phase(client, ns, "shop", Phase::Stable, T).await;
    set_components(client, ns, "shop", json!([web("shop:2", 2)])).await;
    wait_until(T, "the rollout to hold at the pause step", || async {
        let p = get(client, ns, "shop").await?;
        let s = status_of(&p);
        (s.phase == Phase::RollingOut
            && s.current_step == 1
            && s.observed_generation == p.metadata.generation)
            .then_some(p)
    })
    .await
}

#[tokio::test]
async fn get_wait_history_and_errors() {
    let (Harness { client, ns }, op) = Harness::with_operator("plugin-get").await;
    create(
        &client,
        &ns,
        &plan("shop", json!({"components": [web("shop:1", 2)]})),
    )
    .await;

    let wait = rp_in(&ns, &["wait", "shop", "--timeout", "90s"]).await;
    assert_eq!(wait.code, 0, "{}\n{}", wait.show(), op.log_text());
    assert!(wait.stdout.contains("done (exit 0)"), "{}", wait.show());
    assert!(wait.stdout.contains("Stable"), "{}", wait.show());

    let p = get(&client, &ns, "shop").await.expect("plan");
    let s = status_of(&p);
    let hash = s.components[0].current_hash.clone().expect("hash");
    let out = rp_in(&ns, &["get", "shop"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    let first = format!("ReleasePlan {ns}/shop  Stable  no steps  weight 100%");
    assert!(out.stdout.starts_with(&first), "{}", out.show());
    assert!(
        out.stdout.contains(&format!(
            "current     {}",
            s.current_revision.clone().unwrap()
        )),
        "{}",
        out.show()
    );
    assert!(out.stdout.contains("├── components"), "{}", out.show());
    assert!(out.stdout.contains("web  replicas 2"), "{}", out.show());
    assert!(
        out.stdout.contains(&format!(
            "shop-web-{hash}  {hash}  2/2 ready  current, stable  shop:1"
        )),
        "{}",
        out.show()
    );
    assert!(out.stdout.contains("Ready"), "{}", out.show());
    assert!(out.stdout.contains("Stalled"), "{}", out.show());

    let history = rp_in(&ns, &["history", "shop"]).await;
    assert_eq!(history.code, 0, "{}", history.show());
    assert!(history.stdout.starts_with("NUMBER"), "{}", history.show());
    assert!(history.stdout.contains("Promoted"), "{}", history.show());
    assert!(
        history.stdout.contains("all steps passed"),
        "{}",
        history.show()
    );

    // The namespace of the kubeconfig context is the default.
    let kubeconfig = std::env::var("KUBECONFIG").expect("KUBECONFIG");
    let mut config: Value =
        serde_yaml::from_str(&std::fs::read_to_string(&kubeconfig).expect("kubeconfig"))
            .expect("kubeconfig yaml");
    for c in config["contexts"].as_array_mut().expect("contexts") {
        c["context"]["namespace"] = json!(ns);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&config).expect("yaml")).expect("write");
    let path = path.to_string_lossy().into_owned();
    let out = rp(&["get", "shop", "--kubeconfig", &path]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    assert!(out.stdout.starts_with(&first), "{}", out.show());

    // A missing plan.
    for args in [
        &["get", "nope"][..],
        &["wait", "nope"],
        &["promote", "nope"],
    ] {
        let out = rp_in(&ns, args).await;
        assert_eq!(out.code, 1, "{args:?}: {}", out.show());
        assert!(
            out.stderr
                .contains(&format!("releaseplan nope not found in namespace {ns}")),
            "{args:?}: {}",
            out.show()
        );
    }

    // No cluster: a kubeconfig that points at a closed port.
    let port = support::operator::free_port();
    let mut dead = config.clone();
    for c in dead["clusters"].as_array_mut().expect("clusters") {
        c["cluster"]["server"] = json!(format!("https://127.0.0.1:{port}"));
    }
    let dead_path = dir.path().join("dead");
    std::fs::write(&dead_path, serde_yaml::to_string(&dead).expect("yaml")).expect("write");
    let dead_path = dead_path.to_string_lossy().into_owned();
    let out = rp(&[
        "wait",
        "shop",
        "--kubeconfig",
        &dead_path,
        "--timeout",
        "5s",
    ])
    .await;
    assert_eq!(out.code, 1, "{}", out.show());
    assert!(
        out.stderr.contains(&format!(
            "cannot reach the Kubernetes API at https://127.0.0.1:{port}/"
        )),
        "{}",
        out.show()
    );

    // Usage errors exit 1 (clap's 2 would read as "rolled back").
    let out = rp(&["wait"]).await;
    assert_eq!(out.code, 1, "{}", out.show());
}

#[tokio::test]
async fn promote_moves_an_indefinite_pause_forward() {
    let (Harness { client, ns }, op) = Harness::with_operator("plugin-promote").await;
    let before = at_pause(&client, &ns).await;
    assert_eq!(status_of(&before).weight, 50);

    let out = rp_in(&ns, &["get", "shop"]).await;
    assert!(
        out.stdout.contains("RollingOut  step 2/2  weight 50%"),
        "{}",
        out.show()
    );
    assert!(
        out.stdout.contains("waiting for promotion"),
        "{}",
        out.show()
    );

    // Held at the pause: wait times out with 4.
    let out = rp_in(&ns, &["wait", "shop", "--timeout", "2s"]).await;
    assert_eq!(out.code, 4, "{}", out.show());
    assert!(out.stdout.contains("timed out"), "{}", out.show());

    let out = rp_in(&ns, &["promote", "shop"]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.show(), op.log_text());
    assert!(out.stdout.contains("requested promote/"), "{}", out.show());
    assert!(
        out.stdout.contains("acknowledged by the operator"),
        "{}",
        out.show()
    );
    assert!(
        out.stdout
            .contains("before: RollingOut, step 2/2, weight 50%"),
        "{}",
        out.show()
    );
    let p = get(&client, &ns, "shop").await.expect("plan");
    assert!(status_of(&p).current_step >= 2, "{:?}", p.status);
    // Only metadata changed: the spec generation is the same.
    assert_eq!(p.metadata.generation, before.metadata.generation);

    let out = rp_in(&ns, &["wait", "shop", "--timeout", "90s"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(by_image(&revs, "shop:2"), Some((2, 2)), "{revs:?}");

    // Promote while Stable: warned, ignored, exit 1.
    let out = rp_in(&ns, &["promote", "shop"]).await;
    assert_eq!(out.code, 1, "{}", out.show());
    assert!(
        out.stderr
            .contains("warning: promote applies only while RollingOut; the plan is Stable"),
        "{}",
        out.show()
    );
    assert!(
        out.stderr.contains("the operator ignored the request"),
        "{}",
        out.show()
    );
}

#[tokio::test]
async fn abort_rolls_back_and_wait_exits_2() {
    let (Harness { client, ns }, op) = Harness::with_operator("plugin-abort").await;
    at_pause(&client, &ns).await;

    let out = rp_in(&ns, &["abort", "shop"]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.show(), op.log_text());
    assert!(
        out.stdout.contains("acknowledged by the operator"),
        "{}",
        out.show()
    );

    let out = rp_in(&ns, &["wait", "shop", "--timeout", "90s"]).await;
    assert_eq!(out.code, 2, "{}", out.show());
    assert!(out.stdout.contains("rolled back"), "{}", out.show());
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(by_image(&revs, "shop:1"), Some((2, 2)), "{revs:?}");
    assert_eq!(by_image(&revs, "shop:2").map(|r| r.0), Some(0), "{revs:?}");

    let out = rp_in(&ns, &["get", "shop"]).await;
    assert!(
        out.stdout
            .contains(&format!("ReleasePlan {ns}/shop  RolledBack")),
        "{}",
        out.show()
    );
    assert!(out.stdout.contains("failure     abort"), "{}", out.show());

    let out = rp_in(&ns, &["history", "shop"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.show());
    assert!(lines[1].contains("Promoted"), "{}", out.show());
    assert!(lines[2].contains("RolledBack"), "{}", out.show());
}

#[tokio::test]
async fn a_halted_rollout_makes_wait_exit_3() {
    let (Harness { client, ns }, op) = Harness::with_operator("plugin-halt").await;
    let spec = |t: Value| {
        json!({"components": [{"name": "web", "replicas": 2, "template": t}],
               "strategy": {"steps": [{"setWeight": 50}]},
               "health": {"progressDeadlineSeconds": 3},
               "rollback": {"automatic": false}})
    };
    create(&client, &ns, &plan("shop", spec(template("shop:1")))).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, T).await;
    plans::patch_spec(
        &client,
        &ns,
        "shop",
        json!({"components": [{"name": "web", "replicas": 2,
               "template": faulty_template("shop:2", "never-ready")}]}),
    )
    .await;

    let out = rp_in(&ns, &["wait", "shop", "--timeout", "90s"]).await;
    assert_eq!(out.code, 3, "{}\n{}", out.show(), op.log_text());
    assert!(
        out.stdout
            .contains("done (exit 3): stalled (RolloutHalted)"),
        "{}",
        out.show()
    );
    let out = rp_in(&ns, &["get", "shop"]).await;
    assert!(
        out.stdout
            .contains("failure     progressDeadline (ProgressDeadlineExceeded)"),
        "{}",
        out.show()
    );

    // Promote does not apply to a halted rollout; abort does.
    let out = rp_in(&ns, &["promote", "shop"]).await;
    assert_eq!(out.code, 1, "{}", out.show());
    assert!(
        out.stderr.contains("the rollout is halted"),
        "{}",
        out.show()
    );
    let out = rp_in(&ns, &["abort", "shop"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    let out = rp_in(&ns, &["wait", "shop", "--timeout", "90s"]).await;
    assert_eq!(out.code, 2, "{}", out.show());
}

#[tokio::test]
async fn pause_holds_and_resume_lets_it_finish() {
    let (Harness { client, ns }, op) = Harness::with_operator("plugin-pause").await;
    let steps = json!([{"setWeight": 50}, {"pause": {"duration": "1s"}}]);
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 2)], "strategy": {"steps": steps}}),
    )
    .await;

    let out = rp_in(&ns, &["pause", "shop"]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.show(), op.log_text());
    assert!(out.stdout.contains("pause requested"), "{}", out.show());
    let p = get(&client, &ns, "shop").await.expect("plan");
    assert!(status_of(&p).pause_requested);

    set_components(&client, &ns, "shop", json!([web("shop:2", 2)])).await;
    let held = wait_until(T, "the paused rollout to start", || async {
        let p = get(&client, &ns, "shop").await?;
        let s = status_of(&p);
        (s.phase == Phase::RollingOut && s.observed_generation == p.metadata.generation)
            .then_some(p)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let p = get(&client, &ns, "shop").await.expect("plan");
    let s = status_of(&p);
    assert_eq!(s.phase, Phase::RollingOut, "{s:?}");
    assert_eq!(s.current_step, status_of(&held).current_step, "{s:?}");
    let out = rp_in(&ns, &["get", "shop"]).await;
    assert!(
        out.stdout.contains("a pause request holds the rollout"),
        "{}",
        out.show()
    );
    assert!(out.stdout.contains("PauseRequested"), "{}", out.show());

    let out = rp_in(&ns, &["resume", "shop"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    assert!(
        out.stdout.contains("acknowledged by the operator"),
        "{}",
        out.show()
    );
    let p = get(&client, &ns, "shop").await.expect("plan");
    assert!(!status_of(&p).pause_requested);

    let out = rp_in(&ns, &["wait", "shop", "--timeout", "90s"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
}

/// A component whose template the API server would store differently in a
/// Deployment (the quantity `0.1` becomes `100m`).
fn web_cpu(image: &str) -> Value {
    let mut t = template(image);
    t["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "0.1"}});
    json!({"name": "web", "replicas": 2, "template": t})
}

#[tokio::test]
async fn undo_looks_up_the_stored_template_of_the_previous_revision() {
    let (Harness { client, ns }, op) = Harness::with_operator("plugin-undo").await;
    create(
        &client,
        &ns,
        &plan("shop", json!({"components": [web_cpu("shop:1")]})),
    )
    .await;
    let first = wait_phase(&client, &ns, "shop", Phase::Stable, T).await;
    let rev1 = status_of(&first).current_revision.expect("revision");
    let h1 = status_of(&first).components[0]
        .current_hash
        .clone()
        .expect("hash");
    set_components(&client, &ns, "shop", json!([web_cpu("shop:2")])).await;
    let second = wait_phase(&client, &ns, "shop", Phase::Stable, T).await;
    let h2 = status_of(&second).components[0]
        .current_hash
        .clone()
        .expect("hash");
    // The old revision's Deployment is gone: its stored template is enough.
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .delete(&format!("shop-web-{h1}"), &DeleteParams::background())
        .await
        .expect("delete the old Deployment");

    // Printed only: the patch restores shop:1 exactly as written, nothing changes.
    let out = rp_in(&ns, &["undo", "shop"]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.show(), op.log_text());
    let patch: Value = serde_json::from_str(&out.stdout).expect("a JSON patch on stdout");
    assert_eq!(
        patch,
        json!({"spec": {"components": [web_cpu("shop:1")]}}),
        "{}",
        out.show()
    );
    assert!(
        out.stderr.contains("to history entry 1 (revision"),
        "{}",
        out.show()
    );
    assert!(!out.stderr.contains("note:"), "{}", out.show());
    let p = get(&client, &ns, "shop").await.expect("plan");
    assert_ne!(
        status_of(&p).current_revision.as_deref(),
        Some(rev1.as_str())
    );

    let out = rp_in(&ns, &["undo", "shop", "--to-revision", "9"]).await;
    assert_eq!(out.code, 1, "{}", out.show());
    assert!(
        out.stderr.contains("no history entry number 9"),
        "{}",
        out.show()
    );

    // Applied: the operator goes back to the very same revision.
    let out = rp_in(&ns, &["undo", "shop", "--apply"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    let out = rp_in(&ns, &["wait", "shop", "--timeout", "90s"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    let p = get(&client, &ns, "shop").await.expect("plan");
    assert_eq!(
        status_of(&p).current_revision.as_deref(),
        Some(rev1.as_str())
    );
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(revs.len(), 2, "{revs:?}");
    assert_eq!(by_image(&revs, "shop:1"), Some((2, 2)), "{revs:?}");

    // A revision whose template is not stored cannot be rebuilt, and says so.
    Api::<ControllerRevision>::namespaced(client.clone(), &ns)
        .delete(&format!("shop-web-{h2}"), &DeleteParams::background())
        .await
        .expect("delete a stored template");
    let out = rp_in(&ns, &["undo", "shop"]).await;
    assert_eq!(out.code, 1, "{}", out.show());
    assert!(
        out.stderr.contains(&format!(
            "component web at template {h2} has no stored template"
        )),
        "{}",
        out.show()
    );
    assert!(
        out.stderr
            .contains("take its templates from your git history"),
        "{}",
        out.show()
    );
}
