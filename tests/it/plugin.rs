//! The `kubectl-releaseplan` binary against the real local control plane, with
//! the real operator running: each test has its own namespace and operator.

use crate::support;

use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use kube::Client;
use kube::api::{Api, DeleteParams};
use releaseplan::api::{Phase, ReleasePlan};
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::{faulty_template, plan, template, web};
use support::plans::{by_image, create, create_stable, get, revisions, set_components, wait_phase};
use support::{Harness, WAIT, plans, wait_until};

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
    wait_phase(client, ns, "shop", Phase::Stable, WAIT).await;
    set_components(client, ns, "shop", json!([web("shop:2", 2)])).await;
    wait_until(WAIT, "the rollout to hold at the pause step", || async {
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
        yaml_serde::from_str(&std::fs::read_to_string(&kubeconfig).expect("kubeconfig"))
            .expect("kubeconfig yaml");
    for c in config["contexts"].as_array_mut().expect("contexts") {
        c["context"]["namespace"] = json!(ns);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, yaml_serde::to_string(&config).expect("yaml")).expect("write");
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
    std::fs::write(&dead_path, yaml_serde::to_string(&dead).expect("yaml")).expect("write");
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
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
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
    let held = wait_until(WAIT, "the paused rollout to start", || async {
        let p = get(&client, &ns, "shop").await?;
        let s = status_of(&p);
        (s.phase == Phase::RollingOut && s.observed_generation == p.metadata.generation)
            .then_some(p)
    })
    .await;
    // The pause request holds the rollout where it is: a negative check, so a
    // bounded observation window of 4 s.
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

/// `web` with 2 pods of `image`, reading ConfigMap `web-config` (envFrom).
fn web_reading_config(image: &str) -> Value {
    let mut t = template(image);
    t["spec"]["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "web-config"}}]);
    json!({"name": "web", "replicas": 2, "template": t})
}

async fn set_greeting(client: &Client, ns: &str, greeting: &str) {
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            "web-config",
            &kube::api::PatchParams::apply("plugin-tests").force(),
            &kube::api::Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "web-config"}, "data": {"GREETING": greeting}})),
        )
        .await
        .expect("apply the ConfigMap");
}

/// The GREETING the Deployment of revision `hash` reads, through its copy.
async fn greeting_of(client: &Client, ns: &str, hash: &str) -> String {
    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(&format!("shop-web-{hash}"))
        .await
        .expect("revision Deployment");
    let copy = d
        .spec
        .and_then(|s| s.template.spec)
        .expect("pod spec")
        .containers[0]
        .env_from
        .clone()
        .expect("envFrom")[0]
        .config_map_ref
        .clone()
        .expect("configMapRef")
        .name;
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .get(&copy)
        .await
        .expect("copy")
        .data
        .and_then(|d| d.get("GREETING").cloned())
        .unwrap_or_default()
}

#[tokio::test]
async fn undo_restores_the_config_of_the_older_revision() {
    let (Harness { client, ns }, op) = Harness::with_operator("plugin-undo-config").await;
    set_greeting(&client, &ns, "hello").await;
    create(
        &client,
        &ns,
        &plan(
            "shop",
            json!({"components": [web_reading_config("shop:1")]}),
        ),
    )
    .await;
    let first = wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let rev1 = status_of(&first).current_revision.expect("revision");
    // A config-only release.
    set_greeting(&client, &ns, "bye").await;
    let second = wait_until(WAIT, "the config change released", || async {
        let p = get(&client, &ns, "shop").await?;
        let s = status_of(&p);
        (s.phase == Phase::Stable && s.current_revision.as_deref() != Some(rev1.as_str()))
            .then_some(p)
    })
    .await;
    let h2 = status_of(&second).components[0]
        .current_hash
        .clone()
        .expect("hash");
    assert_eq!(greeting_of(&client, &ns, &h2).await, "bye");

    // Undo: the first revision comes back with its config, though the
    // ConfigMap still says "bye" (git has not changed).
    let out = rp_in(&ns, &["undo", "shop", "--apply"]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.show(), op.log_text());
    let out = rp_in(&ns, &["wait", "shop", "--timeout", "90s"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    let p = get(&client, &ns, "shop").await.expect("plan");
    assert_eq!(
        status_of(&p).current_revision.as_deref(),
        Some(rev1.as_str()),
        "the very same revision"
    );
    let h1 = status_of(&p).components[0]
        .current_hash
        .clone()
        .expect("hash");
    assert_eq!(greeting_of(&client, &ns, &h1).await, "hello");
    let carried = &status_of(&p).components[0].config;
    assert!(
        carried
            .iter()
            .any(|c| c.name == "web-config" && c.copy.is_some()),
        "{carried:?}"
    );
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
    let first = wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let rev1 = status_of(&first).current_revision.expect("revision");
    let h1 = status_of(&first).components[0]
        .current_hash
        .clone()
        .expect("hash");
    set_components(&client, &ns, "shop", json!([web_cpu("shop:2")])).await;
    let second = wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
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

/// Two components: `web` with one container, `api` with two (`app`, `proxy`).
fn two_components(web_image: &str, api_image: &str) -> Value {
    json!([
        web(web_image, 2),
        {"name": "api", "replicas": 1, "template": {
            "metadata": {"labels": {"app": "api"}},
            "spec": {"containers": [
                {"name": "app", "image": api_image},
                {"name": "proxy", "image": "proxy:1"}]}}}
    ])
}

fn components_of(p: &ReleasePlan) -> Value {
    serde_json::to_value(&p.spec.components).unwrap()
}

#[tokio::test]
async fn set_image_patches_the_component_by_name_and_waits() {
    let (Harness { client, ns }, op) = Harness::with_operator("plugin-setimage").await;
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": two_components("shop:1", "api:1")}),
    )
    .await;

    // The only container of web; api's container named; --wait with wait's exit codes.
    let out = rp_in(
        &ns,
        &[
            "set",
            "image",
            "shop",
            "web=shop:2",
            "api/proxy=proxy:2",
            "--wait",
            "--timeout",
            "90s",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}\n{}", out.show(), op.log_text());
    assert!(
        out.stdout.contains("web/app: shop:1 -> shop:2"),
        "{}",
        out.show()
    );
    assert!(
        out.stdout.contains("api/proxy: proxy:1 -> proxy:2"),
        "{}",
        out.show()
    );
    assert!(out.stdout.contains("done (exit 0)"), "{}", out.show());
    let p = get(&client, &ns, "shop").await.expect("plan");
    assert_eq!(status_of(&p).phase, Phase::Stable);
    assert_eq!(
        components_of(&p),
        serde_json::to_value(
            serde_json::from_value::<Vec<releaseplan::api::Component>>(two_components(
                "shop:2", "api:1"
            ))
            .unwrap()
            .into_iter()
            .map(|mut c| {
                if c.name == "api" {
                    c.template.spec.as_mut().unwrap().containers[1].image = Some("proxy:2".into());
                }
                c
            })
            .collect::<Vec<_>>()
        )
        .unwrap()
    );
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(by_image(&revs, "shop:2"), Some((2, 2)), "{revs:?}");

    // A patch built before a concurrent reorder is refused by the API server
    // (its `test` of the name fails) instead of changing api's image.
    let spec_before = serde_json::to_value(&get(&client, &ns, "shop").await.unwrap().spec).unwrap();
    let stale = releaseplan::cli::edit::set_image_patch(
        "shop",
        &spec_before,
        &["web=shop:stale".parse().unwrap()],
    )
    .unwrap();
    let mut reordered = two_components("shop:2", "api:1");
    reordered.as_array_mut().unwrap().reverse();
    set_components(&client, &ns, "shop", reordered).await;
    let refused = Api::<ReleasePlan>::namespaced(client.clone(), &ns)
        .patch(
            "shop",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::<()>::Json(serde_json::from_value(stale.patch).unwrap()),
        )
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422),
        "{refused:?}"
    );
    let p = get(&client, &ns, "shop").await.expect("plan");
    assert_eq!(
        components_of(&p)[0]["template"]["spec"]["containers"][0]["image"],
        "api:1"
    );

    // Reordered list: the plugin reads it again, and the name decides.
    let out = rp_in(
        &ns,
        &[
            "set",
            "image",
            "shop",
            "web=shop:3",
            "--wait",
            "--timeout",
            "90s",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.show());
    let p = get(&client, &ns, "shop").await.expect("plan");
    let c = components_of(&p);
    assert_eq!(c[0]["name"], "api");
    assert_eq!(c[0]["template"]["spec"]["containers"][0]["image"], "api:1");
    assert_eq!(c[1]["template"]["spec"]["containers"][0]["image"], "shop:3");

    // Errors: several containers, unknown component, bad pair; nothing changes.
    let generation = p.metadata.generation;
    for (args, message) in [
        (
            &["set", "image", "shop", "api=api:9"][..],
            "component api has 2 containers (app, proxy): name one, as api/CONTAINER=IMAGE",
        ),
        (
            &["set", "image", "shop", "db=db:9"],
            "releaseplan shop has no component \"db\" (components: api, web)",
        ),
        (
            &["set", "image", "shop", "web/sidecar=x:1"],
            "component web has no container \"sidecar\"",
        ),
        (
            &["set", "image", "shop", "web"],
            "write COMPONENT=IMAGE or COMPONENT/CONTAINER=IMAGE",
        ),
    ] {
        let out = rp_in(&ns, args).await;
        assert_eq!(out.code, 1, "{args:?}: {}", out.show());
        assert!(out.stderr.contains(message), "{args:?}: {}", out.show());
    }
    let p = get(&client, &ns, "shop").await.expect("plan");
    assert_eq!(p.metadata.generation, generation);

    // The same image: no new generation.
    let out = rp_in(
        &ns,
        &[
            "set",
            "image",
            "shop",
            "web=shop:3",
            "--wait",
            "--timeout",
            "90s",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.show());
    assert!(out.stdout.contains("(unchanged)"), "{}", out.show());
    assert!(
        out.stdout.contains("unchanged (generation"),
        "{}",
        out.show()
    );

    // --wait returns wait's exit codes: held at an indefinite pause, it times
    // out (4); with -o json, stdout is one result document, the log on stderr.
    plans::patch_spec(
        &client,
        &ns,
        "shop",
        json!({"strategy": {"steps": [{"setWeight": 50}, {"pause": {}}]}}),
    )
    .await;
    wait_until(WAIT, "the new steps to be observed", || async {
        let p = get(&client, &ns, "shop").await?;
        (status_of(&p).observed_generation == p.metadata.generation
            && status_of(&p).phase == Phase::Stable)
            .then_some(())
    })
    .await;
    let out = rp_in(
        &ns,
        &[
            "set",
            "image",
            "shop",
            "web=shop:4",
            "--wait",
            "--timeout",
            "5s",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(out.code, 4, "{}", out.show());
    let doc: Value = serde_json::from_str(&out.stdout).expect("one JSON document on stdout");
    assert_eq!(doc["kind"], "WaitResult", "{doc}");
    assert_eq!(doc["exitCode"], 4, "{doc}");
    assert_eq!(doc["result"], "TimedOut", "{doc}");
    assert_eq!(doc["plan"]["phase"], "RollingOut", "{doc}");
    assert_eq!(doc["plan"]["step"]["total"], 2, "{doc}");
    assert!(
        out.stderr.contains("web/app: shop:3 -> shop:4"),
        "{}",
        out.show()
    );
    assert!(out.stderr.contains("timed out after 5s"), "{}", out.show());
}

#[tokio::test]
async fn list_restart_and_documents_for_scripts() {
    let (Harness { client, ns }, op) = Harness::with_operator("plugin-list").await;
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": two_components("shop:1", "api:1")}),
    )
    .await;
    // A second plan that rolls back: its failing gate shows in the list.
    let spec = |t: Value| {
        json!({"components": [{"name": "web", "replicas": 2, "template": t}],
               "strategy": {"steps": [{"setWeight": 50}]},
               "health": {"progressDeadlineSeconds": 3}})
    };
    create_stable(&client, &ns, "cart", spec(template("cart:1"))).await;
    plans::patch_spec(
        &client,
        &ns,
        "cart",
        json!({"components": [{"name": "web", "replicas": 2,
               "template": faulty_template("cart:2", "never-ready")}]}),
    )
    .await;
    wait_until(WAIT, "cart to roll back", || async {
        let p = get(&client, &ns, "cart").await?;
        (status_of(&p).phase == Phase::RolledBack).then_some(())
    })
    .await;

    let out = rp_in(&ns, &["list"]).await;
    assert_eq!(out.code, 0, "{}\n{}", out.show(), op.log_text());
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.show());
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "NAME", "PHASE", "STEP", "WEIGHT", "STABLE", "CURRENT", "READY", "AGE", "FAILED"
        ],
        "{}",
        out.show()
    );
    assert!(lines[1].starts_with("cart  RolledBack"), "{}", out.show());
    assert!(
        lines[1].ends_with("progressDeadline (ProgressDeadlineExceeded)"),
        "{}",
        out.show()
    );
    assert!(
        lines[2].starts_with("shop  Stable      no steps"),
        "{}",
        out.show()
    );
    assert!(lines[2].ends_with("  -"), "{}", out.show());

    // -A adds the namespace column and sees this namespace's plans.
    let out = rp(&["list", "-A"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    assert!(out.stdout.starts_with("NAMESPACE"), "{}", out.show());
    assert!(
        out.stdout.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() > 2 && w[0] == ns && w[1] == "shop" && w[2] == "Stable"
        }),
        "{}",
        out.show()
    );

    // list -o json / get -o yaml / history -o json.
    let out = rp_in(&ns, &["list", "-o", "json"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    let doc: Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(doc["kind"], "PlanList");
    assert_eq!(doc["items"][0]["name"], "cart");
    assert_eq!(doc["items"][0]["failure"]["gate"], "progressDeadline");
    assert_eq!(doc["items"][1]["phase"], "Stable");
    assert_eq!(doc["items"][1]["components"][0]["revisions"], Value::Null);
    let out = rp_in(&ns, &["get", "shop", "-o", "yaml"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    let doc: Value = yaml_serde::from_str(&out.stdout).expect("YAML");
    assert_eq!(doc["apiVersion"], "plugin.releaseplan.io/v1");
    assert_eq!(doc["kind"], "Plan");
    assert_eq!(doc["namespace"], ns.as_str());
    assert_eq!(doc["components"][0]["name"], "web");
    assert_eq!(
        doc["components"][0]["revisions"][0]["role"],
        "current,stable"
    );
    assert_eq!(
        doc["components"][0]["revisions"][0]["images"],
        json!(["shop:1"])
    );
    let out = rp_in(&ns, &["history", "cart", "-o", "json"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    let doc: Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(doc["kind"], "History");
    assert_eq!(doc["items"][0]["outcome"], "Promoted");
    assert_eq!(doc["items"][1]["outcome"], "RolledBack");
    let out = rp_in(&ns, &["wait", "cart", "-o", "json"]).await;
    assert_eq!(out.code, 2, "{}", out.show());
    let doc: Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(doc["result"], "RolledBack");
    assert_eq!(doc["exitCode"], 2);

    // list -w: the table, then a row per change.
    let mut watch = Watch::start(&["list", "-w", "-n", &ns]);
    assert!(watch.next_line().await.starts_with("NAME"));
    watch.next_line().await;
    watch.next_line().await;

    // restart: the same images roll out again through the normal steps.
    let before = get(&client, &ns, "shop").await.expect("plan");
    let out = rp_in(
        &ns,
        &["restart", "shop", "web", "--wait", "--timeout", "90s"],
    )
    .await;
    assert_eq!(out.code, 0, "{}\n{}", out.show(), op.log_text());
    assert!(
        out.stdout.contains("releaseplan.io/restartedAt="),
        "{}",
        out.show()
    );
    assert!(out.stdout.contains("done (exit 0)"), "{}", out.show());
    let after = get(&client, &ns, "shop").await.expect("plan");
    let (b, a) = (status_of(&before), status_of(&after));
    assert_ne!(a.current_revision, b.current_revision);
    assert_eq!(a.rollout_count, b.rollout_count + 1);
    // Only web changed revision; api kept its template and annotations.
    assert_ne!(a.components[0].current_hash, b.components[0].current_hash);
    assert_eq!(a.components[1].current_hash, b.components[1].current_hash);
    let c = components_of(&after);
    assert!(c[0]["template"]["metadata"]["annotations"]["releaseplan.io/restartedAt"].is_string());
    assert_eq!(
        c[0]["template"]["metadata"]["labels"],
        json!({"app": "shop"})
    );
    assert_eq!(c[0]["template"]["spec"]["containers"][0]["image"], "shop:1");
    assert!(c[1]["template"]["metadata"].get("annotations").is_none());
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(
        revs.values()
            .filter(|(r, _, i)| i == "shop:1" && *r == 2)
            .count(),
        1,
        "{revs:?}"
    );

    // The watch printed shop's rollout.
    loop {
        let line = watch.next_line().await;
        if line.starts_with("shop  RollingOut") {
            break;
        }
    }
    watch.stop();

    // Restarting every component.
    let out = rp_in(&ns, &["restart", "shop"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    assert!(out.stdout.contains("every component"), "{}", out.show());
    let p = get(&client, &ns, "shop").await.expect("plan");
    let c = components_of(&p);
    assert!(c[1]["template"]["metadata"]["annotations"]["releaseplan.io/restartedAt"].is_string());
}

/// A running `list -w`: its stdout lines arrive through a channel.
struct Watch {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Watch {
    fn start(args: &[&str]) -> Watch {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-releaseplan"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("list -w");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Watch { child, lines }
    }

    /// The next line, within [`WAIT`]. Blocks the test's thread: the operator
    /// and the plugin are other processes.
    async fn next_line(&mut self) -> String {
        self.lines
            .recv_timeout(WAIT)
            .expect("a line of list -w in time")
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `text` to `name` in `dir` and returns the path.
fn file_in(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    path.to_string_lossy().into_owned()
}

/// A kubeconfig whose server is a closed port: no cluster reachable.
fn dead_kubeconfig(dir: &tempfile::TempDir) -> String {
    let kubeconfig = std::env::var("KUBECONFIG").expect("KUBECONFIG");
    let mut config: Value =
        yaml_serde::from_str(&std::fs::read_to_string(&kubeconfig).expect("kubeconfig"))
            .expect("kubeconfig yaml");
    let port = support::operator::free_port();
    for c in config["clusters"].as_array_mut().expect("clusters") {
        c["cluster"]["server"] = json!(format!("https://127.0.0.1:{port}"));
    }
    file_in(dir, "dead", &yaml_serde::to_string(&config).expect("yaml"))
}

/// A ValidatingAdmissionPolicy refusing ReleasePlans without a `team`
/// label in `ns` (cluster-scoped, deleted at the end of the test).
struct Policy(String);

impl Policy {
    async fn delete(self, client: &Client) {
        use k8s_openapi::api::admissionregistration::v1::{
            ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
        };
        let _ = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
            .delete(&self.0, &DeleteParams::default())
            .await;
        let _ = Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .delete(&self.0, &DeleteParams::default())
            .await;
    }
}

async fn admission_policy(client: &Client, ns: &str) -> Policy {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use kube::api::PostParams;
    let name = format!("{ns}-team-label");
    let vap: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["releaseplan.io"],
                "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                "resources": ["releaseplans"]}]},
            "validations": [{"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
                             "message": "plans here need a team label"}]
        }}))
    .unwrap();
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&PostParams::default(), &vap)
        .await
        .expect("create the ValidatingAdmissionPolicy");
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
        }}))
    .unwrap();
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("create the binding");
    Policy(name)
}

#[tokio::test]
async fn lint_checks_offline_and_with_a_server_side_dry_run() {
    let Harness { client, ns } = Harness::new("plugin-lint").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let valid = file_in(
        &dir,
        "valid.yaml",
        "apiVersion: releaseplan.io/v1alpha1\nkind: ReleasePlan\nmetadata:\n  name: shop\nspec:\n  components:\n  - name: web\n    replicas: 2\n    template:\n      spec:\n        containers:\n        - name: app\n          image: shop:1\n  strategy:\n    steps:\n    - setWeight: 50\n    - pause: {duration: 1m}\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: shop\n",
    );
    let out = rp_in(&ns, &["lint", "-f", &valid]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    assert!(
        out.stdout.contains(&format!(
            "document 1 (shop): valid (offline checks and a server-side dry run in namespace {ns})"
        )),
        "{}",
        out.show()
    );
    assert!(
        out.stderr
            .contains("document 2 (shop): skipped, kind Service"),
        "{}",
        out.show()
    );
    // A dry run: nothing was created.
    assert!(get(&client, &ns, "shop").await.is_none());

    // Schema and check_spec problems, with field paths, exit 2.
    let invalid = file_in(
        &dir,
        "invalid.yaml",
        "apiVersion: releaseplan.io/v1alpha1\nkind: ReleasePlan\nmetadata:\n  name: shop\nspec:\n  components:\n  - name: web\n    replicas: two\n    template:\n      spec:\n        containers:\n        - name: app\n          image: shop:1\n  stratgy: {}\n",
    );
    let out = rp_in(&ns, &["lint", "-f", &invalid]).await;
    assert_eq!(out.code, 2, "{}", out.show());
    assert!(
        out.stdout
            .contains("invalid.yaml document 1 (shop): invalid"),
        "{}",
        out.show()
    );
    assert!(
        out.stdout
            .contains("  spec.components[0].replicas: must be of type integer, not string"),
        "{}",
        out.show()
    );
    assert!(
        out.stdout.contains("  spec.stratgy: unknown field"),
        "{}",
        out.show()
    );
    let dup = file_in(
        &dir,
        "dup.json",
        &json!({"apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
                "metadata": {"name": "shop"},
                "spec": {"components": [web("shop:1", 1), web("shop:2", 1)]}})
        .to_string(),
    );
    let out = rp_in(&ns, &["lint", "-f", &dup, "--offline"]).await;
    assert_eq!(out.code, 2, "{}", out.show());
    assert!(
        out.stdout
            .contains("  spec.components: component names must be unique"),
        "{}",
        out.show()
    );

    // The CRD's CEL rules run offline too, with the API server's words.
    let cel = file_in(
        &dir,
        "cel.yaml",
        "apiVersion: releaseplan.io/v1alpha1\nkind: ReleasePlan\nmetadata:\n  name: shop\nspec:\n  components:\n  - name: Web_1\n    replicas: 1\n    template:\n      spec:\n        containers:\n        - name: app\n          image: shop:1\n",
    );
    let out = rp_in(&ns, &["lint", "-f", &cel, "--offline"]).await;
    assert_eq!(out.code, 2, "{}", out.show());
    assert!(
        out.stdout.contains("component name must be a DNS label"),
        "{}",
        out.show()
    );

    // What only the cluster knows, an admission policy of the namespace's
    // owners, is the dry run's: valid offline, refused with the policy's words.
    let policy = admission_policy(&client, &ns).await;
    let out = rp_in(&ns, &["lint", "-f", &valid, "--offline"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    let out = wait_until(WAIT, "the policy to refuse the dry run", || {
        let (ns, valid) = (ns.clone(), valid.clone());
        async move {
            let out = rp_in(&ns, &["lint", "-f", &valid]).await;
            if out.code == 2 {
                Ok(out)
            } else {
                Err(out.show())
            }
        }
    })
    .await;
    assert!(
        out.stdout
            .contains("refused by the API server's dry run (422"),
        "{}",
        out.show()
    );
    assert!(
        out.stdout.contains("plans here need a team label"),
        "{}",
        out.show()
    );
    policy.delete(&client).await;

    // No cluster: the offline checks, and a note.
    let dead = dead_kubeconfig(&dir);
    let out = rp(&["lint", "-f", &valid, "--kubeconfig", &dead]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    assert!(
        out.stderr.contains("note: no cluster reachable"),
        "{}",
        out.show()
    );
    assert!(
        out.stdout.contains("valid (offline checks)"),
        "{}",
        out.show()
    );

    // Unreadable or plan-less files: exit 1.
    let out = rp(&["lint", "-f", "/nonexistent.yaml", "--offline"]).await;
    assert_eq!(out.code, 1, "{}", out.show());
    assert!(
        out.stderr.contains("error: /nonexistent.yaml: "),
        "{}",
        out.show()
    );
    let svc = file_in(
        &dir,
        "svc.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n",
    );
    let out = rp(&["lint", "-f", &svc, "--offline"]).await;
    assert_eq!(out.code, 1, "{}", out.show());
    assert!(
        out.stderr.contains("no ReleasePlan in the file(s)"),
        "{}",
        out.show()
    );
}

#[tokio::test]
async fn completion_offers_plan_names_from_the_cluster() {
    let Harness { client, ns } = Harness::new("plugin-complete").await;
    for name in ["shop", "cart"] {
        create(
            &client,
            &ns,
            &plan(name, json!({"components": [web("x:1", 1)]})),
        )
        .await;
    }

    // kubectl's plugin completion (kubectl_complete-releaseplan).
    let out = rp(&["__complete", "get", "-n", &ns, ""]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    // Plan names first, then the flags clap offers for an empty word.
    assert!(out.stdout.starts_with("cart\nshop\n--"), "{}", out.show());
    assert!(out.stdout.ends_with("\n:4\n"), "{}", out.show());
    let out = rp(&["__complete", "set", "image", "-n", &ns, "sh"]).await;
    assert_eq!(out.stdout, "shop\n:4\n", "{}", out.show());
    let out = rp(&["__complete", "li"]).await;
    assert!(
        out.stdout.starts_with("lint\t") || out.stdout.starts_with("list\t"),
        "{}",
        out.show()
    );

    // The shells' protocol (fish is the simplest to drive).
    let exe = env!("CARGO_BIN_EXE_kubectl-releaseplan");
    let out = std::process::Command::new(exe)
        .env("COMPLETE", "fish")
        .args(["--", exe, "wait", "--namespace", &ns, "c"])
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.trim(), "cart", "{stdout}");

    for shell in ["bash", "zsh", "fish", "kubectl"] {
        let out = rp(&["completion", shell]).await;
        assert_eq!(out.code, 0, "{shell}: {}", out.show());
        assert!(
            out.stdout.contains("kubectl-releaseplan"),
            "{shell}: {}",
            out.show()
        );
    }
}

/// Runs the plugin with no kubeconfig at all.
async fn rp_bare(args: Vec<String>) -> Run {
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-releaseplan"))
            .args(&args)
            .env_remove("KUBECONFIG")
            .env("HOME", "/nonexistent")
            .output()
            .expect("run");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .expect("plugin thread")
}

#[tokio::test]
async fn kubectl_global_flags_reach_the_api_server() {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use kube::api::PostParams;
    let Harness { client, ns } = Harness::new("plugin-flags").await;
    create(
        &client,
        &ns,
        &plan("shop", json!({"components": [web("shop:1", 1)]})),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = std::env::var("KUBECONFIG").expect("KUBECONFIG");
    let config: Value =
        yaml_serde::from_str(&std::fs::read_to_string(&kubeconfig).expect("kubeconfig"))
            .expect("kubeconfig yaml");
    let cluster = &config["clusters"][0]["cluster"];
    let server = cluster["server"].as_str().expect("server").to_string();
    // k8s-openapi's ByteString decodes base64.
    let ca_pem = serde_json::from_value::<k8s_openapi::ByteString>(
        cluster["certificate-authority-data"].clone(),
    )
    .expect("CA data")
    .0;
    let ca = file_in(&dir, "ca.crt", &String::from_utf8(ca_pem).expect("PEM"));

    // A service account allowed to read plans in the namespace, and a token for it.
    let pp = PostParams::default();
    Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "reader"}})).unwrap(),
        )
        .await
        .expect("service account");
    Api::<Role>::namespaced(client.clone(), &ns)
        .create(&pp, &serde_json::from_value(json!({"metadata": {"name": "reader"},
            "rules": [{"apiGroups": ["releaseplan.io"], "resources": ["releaseplans"], "verbs": ["get", "list", "watch"]},
                      {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}]})).unwrap())
        .await
        .expect("role");
    Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]}))
            .unwrap(),
        )
        .await
        .expect("role binding");
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let token = Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create_subresource::<TokenRequest, TokenRequest>("token", "reader", &pp, &request)
        .await
        .expect("token")
        .status
        .expect("token status")
        .token;

    // --server, --token and --certificate-authority without any kubeconfig.
    let base = |verb: &str, extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            verb, "shop", "-n", &ns, "--server", &server, "--token", &token,
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        v.extend(extra.iter().map(ToString::to_string));
        v
    };
    let out = rp_bare(base("get", &["--certificate-authority", &ca])).await;
    assert_eq!(out.code, 0, "{}", out.show());
    assert!(
        out.stdout.starts_with(&format!("ReleasePlan {ns}/shop")),
        "{}",
        out.show()
    );
    let out = rp_bare(base("get", &["--insecure-skip-tls-verify"])).await;
    assert_eq!(out.code, 0, "{}", out.show());
    // Without a CA the server's certificate is not trusted.
    let out = rp_bare(base("get", &[])).await;
    assert_eq!(out.code, 1, "{}", out.show());
    // The token's identity is what the API server sees: no patch right.
    let out = rp_bare(base("pause", &["--insecure-skip-tls-verify"])).await;
    assert_eq!(out.code, 1, "{}", out.show());
    assert!(out.stderr.contains("(403 Forbidden)"), "{}", out.show());
    assert!(
        out.stderr
            .contains(&format!("system:serviceaccount:{ns}:reader")),
        "{}",
        out.show()
    );

    // --as / --as-group: the admin impersonates someone without rights, then a group with them.
    let out = rp_in(&ns, &["get", "shop", "--as", "nobody"]).await;
    assert_eq!(out.code, 1, "{}", out.show());
    assert!(
        out.stderr
            .contains("User \"nobody\" cannot get resource \"releaseplans\""),
        "{}",
        out.show()
    );
    let out = rp_in(
        &ns,
        &[
            "get",
            "shop",
            "--as",
            "nobody",
            "--as-group",
            "system:masters",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.show());
    let sa = format!("system:serviceaccount:{ns}:reader");
    let out = rp_in(&ns, &["list", "--as", &sa]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    assert!(out.stdout.contains("shop"), "{}", out.show());

    // --request-timeout: a server that accepts connections and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent = format!("https://{}", listener.local_addr().expect("addr"));
    let start = std::time::Instant::now();
    let out = rp(&[
        "get",
        "shop",
        "-n",
        &ns,
        "--server",
        &silent,
        "--insecure-skip-tls-verify",
        "--request-timeout",
        "2s",
    ])
    .await;
    assert_eq!(out.code, 1, "{}", out.show());
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    drop(listener);

    // --context picks a context of the kubeconfig.
    let out = rp_in(&ns, &["get", "shop", "--context", "nope"]).await;
    assert_eq!(out.code, 1, "{}", out.show());
    assert!(
        out.stderr.contains("no Kubernetes configuration"),
        "{}",
        out.show()
    );
}

#[tokio::test]
async fn adopt_prints_the_plan_that_takes_a_deployment_and_its_hpa_over() {
    let (Harness { client, ns }, op) = Harness::with_operator("plugin-adopt").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]}}}
    }))
    .expect("a Deployment");
    deployments
        .create(&Default::default(), &d)
        .await
        .expect("create the Deployment");
    let hpas = Api::<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>::namespaced(
        client.clone(),
        &ns,
    );
    let hpa = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"minReplicas": 2, "maxReplicas": 5,
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}
    }))
    .expect("an HPA");
    hpas.create(&Default::default(), &hpa)
        .await
        .expect("create the HPA");

    let out = rp_in(&ns, &["adopt", "deployment/web"]).await;
    assert_eq!(out.code, 0, "{}", out.show());
    assert!(out.stderr.contains("delete hpa/web"), "{}", out.show());
    let mut p: ReleasePlan = yaml_serde::from_str(&out.stdout).expect("a ReleasePlan");
    let c = &p.spec.components[0];
    assert_eq!(c.adopt.as_ref().map(|a| a.deployment.as_str()), Some("web"));
    assert_eq!(c.replicas, Some(3));
    assert_eq!(c.autoscaling.as_ref().and_then(|a| a.max_replicas), Some(5));
    assert!(!out.stdout.contains("pod-template-hash"), "{}", out.show());

    // Applied as printed (the HPA deleted, as told): the Deployment is handed over.
    hpas.delete("web", &DeleteParams::default())
        .await
        .expect("delete the HPA");
    p.metadata.namespace = None;
    create(&client, &ns, &p).await;
    wait_until(WAIT, "the hand-over", || async {
        let p = get(&client, &ns, "web").await?;
        let (status, reason, _) = plans::condition(&p, "Adopted")?;
        (status == "True" && reason == "HandedOver").then_some(())
    })
    .await;
    let old = deployments
        .get("web")
        .await
        .expect("the adopted Deployment");
    assert_eq!(
        old.spec.and_then(|s| s.replicas),
        Some(0),
        "{}",
        op.log_text()
    );
    // Adopted again: refused, it is a plan's now.
    let out = rp_in(&ns, &["adopt", "web"]).await;
    assert_eq!(out.code, 1, "{}", out.show());
    assert!(out.stderr.contains("already a plan's"), "{}", out.show());
}

/// `--version` of both binaries: `<name> <version> (<commit>)`, the commit
/// from build.rs (the same constant the operator's build_info metric uses).
#[test]
fn both_binaries_print_version_and_commit() {
    use releaseplan::build_info::VERSION_LINE;
    for (bin, name) in [
        (
            env!("CARGO_BIN_EXE_kubectl-releaseplan"),
            "kubectl-releaseplan",
        ),
        (env!("CARGO_BIN_EXE_releaseplan"), "releaseplan"),
    ] {
        let out = std::process::Command::new(bin)
            .arg("--version")
            .output()
            .unwrap();
        assert!(out.status.success(), "{bin} --version: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim_end(),
            format!("{name} {VERSION_LINE}")
        );
    }
    assert!(VERSION_LINE.starts_with(concat!(env!("CARGO_PKG_VERSION"), " (")));
}
