//! Commit statuses with the real operator, against a stand-in for GitHub's
//! and GitLab's APIs on 127.0.0.1 (`support::forge`) that checks each
//! request as they do. The commit a plan's annotation `releaseplan.io/commit`
//! names shows its release: pending (GitHub) or running (GitLab) while it
//! rolls out, error / canceled when a newer commit supersedes it, failure /
//! failed when it rolls back, success when promoted. A receiver whose token
//! the forge refuses fails each delivery, and after three in a row the plan
//! gets a Warning Event saying so; a plan without the annotation gets one at
//! once.

use crate::support;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use releaseplan::api::{Phase, ReleasePlan};
use serde_json::{Value, json};
use support::fixtures::{faulty_template, plan, web, web_with};
use support::forge::{self, Status};
use support::plans::{create, plan_events, wait_phase};
use support::{Harness, WAIT, wait_until};

const TOKEN: &str = "forge-token-9e1f";
const C1: &str = "1111111111111111111111111111111111111111";
const C2: &str = "2222222222222222222222222222222222222222";
const C3: &str = "3333333333333333333333333333333333333333";
const COMMIT: &str = "releaseplan.io/commit";

/// Sets the plan's components and its commit annotation in one patch, as a
/// pipeline applying a new image and the commit it was built from does.
async fn release(client: &Client, ns: &str, name: &str, commit: &str, components: Value) {
    Api::<ReleasePlan>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {COMMIT: commit}},
                "spec": {"components": components},
            })),
        )
        .await
        .expect("patch the plan");
}

async fn configure(client: &Client, ns: &str, api: &str) {
    support::recorder::put_receivers_secret(
        client,
        ns,
        "forge",
        json!({"github": api, "gitlab": format!("{api}/"), "token": TOKEN, "wrong": "not-the-token"}),
    )
    .await;
    let receivers = r"
- name: github
  type: githubStatus
  repository: acme/shop
  urlFrom: {secretKeyRef: {name: forge, key: github}}
  tokenFrom: {secretKeyRef: {name: forge, key: token}}
- name: gitlab
  type: gitlabStatus
  repository: acme/platform/shop
  urlFrom: {secretKeyRef: {name: forge, key: gitlab}}
  tokenFrom: {secretKeyRef: {name: forge, key: token}}
- name: github-wrong-token
  type: githubStatus
  repository: acme/cart
  urlFrom: {secretKeyRef: {name: forge, key: github}}
  tokenFrom: {secretKeyRef: {name: forge, key: wrong}}
";
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "releaseplan-notifications"},
        "data": {"receivers": receivers},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create the ConfigMap");
}

fn states(got: &[Status]) -> Vec<String> {
    got.iter().map(|s| s.state.clone()).collect()
}

/// Waits until the last status `forge` has for `sha` is `state`.
async fn wait_last(f: &forge::Forge, which: &str, sha: &str, state: &str) -> Vec<Status> {
    wait_until(WAIT, &format!("{which}: {sha} {state}"), || {
        let got = f.statuses(which, sha);
        async move {
            (got.last().map(|s| s.state.as_str()) == Some(state))
                .then(|| got.clone())
                .ok_or_else(|| format!("{:?}", states(&got)))
        }
    })
    .await
}

async fn warning_with(client: &Client, ns: &str, name: &str, text: &str) {
    wait_until(
        WAIT,
        &format!("a NotificationFailed Warning: {text}"),
        || async {
            let events = plan_events(client, ns, name).await;
            events
                .iter()
                .any(|(reason, type_, note, _)| {
                    reason == "NotificationFailed" && type_ == "Warning" && note.contains(text)
                })
                .then_some(())
                .ok_or_else(|| format!("{events:?}"))
        },
    )
    .await;
}

#[tokio::test]
async fn a_commit_shows_its_release_on_github_and_gitlab() {
    let h = Harness::new("notify-forge").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let (addr, forge) = forge::start(TOKEN, &[C1, C2, C3]).await;
    configure(&client, &ns, &format!("http://127.0.0.1:{}", addr.port())).await;
    let op = h
        .operator()
        .args([
            "--gate-credentials-namespace",
            h.ns.as_str(),
            "--dashboard-url",
            "https://dash.example/plans/{{ namespace }}/{{ name }}",
        ])
        .start()
        .await;

    let mut p = plan(
        "shop",
        json!({"components": [web("shop:1", 2)],
               "strategy": {"steps": [{"setWeight": 50}, {"pause": {}}]}}),
    );
    p.metadata.annotations = Some(BTreeMap::from([
        (COMMIT.to_string(), C1.to_string()),
        (
            "notifications.releaseplan.io/subscribe.any.github".to_string(),
            String::new(),
        ),
        (
            "notifications.releaseplan.io/subscribe.any.gitlab".to_string(),
            String::new(),
        ),
    ]));
    create(&client, &ns, &p).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let gh1 = wait_last(&forge, "github", C1, "success").await;
    let gl1 = wait_last(&forge, "gitlab", C1, "success").await;
    assert_eq!(states(&gh1), ["pending", "success"]);
    assert_eq!(states(&gl1), ["running", "success"]);

    // C2 holds at its pause (pending / running), then C3 supersedes it.
    release(&client, &ns, "shop", C2, json!([web("shop:2", 2)])).await;
    wait_until(WAIT, "github: C2 waits at its pause", || {
        let got = forge.statuses("github", C2);
        async move {
            got.iter()
                .any(|s| s.description.starts_with("waits at step 2/2"))
                .then_some(())
                .ok_or_else(|| format!("{:?}", states(&got)))
        }
    })
    .await;
    release(
        &client,
        &ns,
        "shop",
        C3,
        json!([web_with(faulty_template("shop:3", "crash-loop"), 2)]),
    )
    .await;
    let gh2 = wait_last(&forge, "github", C2, "error").await;
    let gl2 = wait_last(&forge, "gitlab", C2, "canceled").await;
    assert!(
        gh2.last().unwrap().description.starts_with("superseded"),
        "{gh2:?}"
    );
    assert!(states(&gh2[..gh2.len() - 1]).iter().all(|s| s == "pending"));
    assert_eq!(states(&gl2), ["running", "canceled"]);

    // C3 crash-loops and rolls back.
    wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
    // The rollback's start already sets failure; its end follows, each
    // receiver's deliveries in order: wait for the end's description.
    let gh3 = wait_until(WAIT, "github: C3 rolled back", || {
        let got = forge.statuses("github", C3);
        async move {
            got.last()
                .is_some_and(|s| {
                    s.state == "failure"
                        && s.description
                            .starts_with("rolled back (podHealth: CrashLoopBackOff)")
                })
                .then(|| got.clone())
                .ok_or_else(|| format!("{got:?}"))
        }
    })
    .await;
    let gl3 = wait_last(&forge, "gitlab", C3, "failed").await;
    assert_eq!(states(&gh3)[0], "pending");
    assert_eq!(states(&gl3), ["running", "failed"]);

    // Every request as the APIs want it: nothing refused, the token, the
    // headers GitHub documents, one context per plan, the dashboard link.
    assert_eq!(forge.refused(), Vec::<String>::new());
    for s in gh1.iter().chain(&gh2).chain(&gh3) {
        assert_eq!(s.repository, "acme/shop");
        assert_eq!(s.context, format!("releaseplan/{ns}/shop"));
        assert_eq!(s.headers["authorization"], format!("Bearer {TOKEN}"));
        assert_eq!(s.headers["accept"], "application/vnd.github+json");
        assert_eq!(s.headers["x-github-api-version"], "2022-11-28");
        assert!(s.headers["user-agent"].starts_with("releaseplan/"));
        assert_eq!(s.headers["content-type"], "application/json");
        assert_eq!(
            s.target_url.as_deref(),
            Some(format!("https://dash.example/plans/{ns}/shop").as_str())
        );
    }
    for s in gl1.iter().chain(&gl2).chain(&gl3) {
        assert_eq!(s.repository, "acme/platform/shop", "the path, one segment");
        assert_eq!(s.context, format!("releaseplan/{ns}/shop"));
        assert_eq!(s.headers["authorization"], format!("Bearer {TOKEN}"));
    }
    // The token is never logged.
    assert!(
        !op.log_text().contains(TOKEN),
        "the operator logged the token"
    );
}

#[tokio::test]
async fn a_receiver_that_keeps_failing_and_a_plan_without_a_commit_are_warned_about() {
    let h = Harness::new("notify-forge-fail").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let (addr, forge) = forge::start(TOKEN, &[C1, C2]).await;
    configure(&client, &ns, &format!("http://127.0.0.1:{}", addr.port())).await;
    let op = h
        .operator()
        .args(["--gate-credentials-namespace", h.ns.as_str()])
        .start()
        .await;

    // The forge refuses the token: rollout 1's two notices and rollout 2's
    // first fail (401 is final: one try each); the third in a row warns.
    let mut cart = plan("cart", json!({"components": [web("cart:1", 1)]}));
    cart.metadata.annotations = Some(BTreeMap::from([
        (COMMIT.to_string(), C1.to_string()),
        (
            "notifications.releaseplan.io/subscribe.any.github-wrong-token".to_string(),
            String::new(),
        ),
    ]));
    create(&client, &ns, &cart).await;
    wait_phase(&client, &ns, "cart", Phase::Stable, WAIT).await;
    release(&client, &ns, "cart", C2, json!([web("cart:2", 1)])).await;
    warning_with(
        &client,
        &ns,
        "cart",
        "notification receiver github-wrong-token failed 3 times in a row, last: the receiver answered HTTP 401",
    )
    .await;
    assert!(forge.statuses("github", C1).is_empty());
    assert!(
        forge
            .refused()
            .iter()
            .all(|r| r.contains("Bad credentials"))
    );
    let failed = format!(
        "releaseplan_notifications_total{{namespace=\"{ns}\",receiver=\"github-wrong-token\",result=\"failed\"}}"
    );
    let m = op.metrics().await;
    assert!(support::operator::sum_metric(&m, &failed) >= 3.0, "{m}");

    // A plan subscribed without the annotation: warned at once, nothing sent.
    let mut bare = plan("bare", json!({"components": [web("bare:1", 1)]}));
    bare.metadata.annotations = Some(BTreeMap::from([(
        "notifications.releaseplan.io/subscribe.any.github".to_string(),
        String::new(),
    )]));
    create(&client, &ns, &bare).await;
    wait_phase(&client, &ns, "bare", Phase::Stable, WAIT).await;
    warning_with(
        &client,
        &ns,
        "bare",
        "notification receiver github marks the commit the plan's annotation releaseplan.io/commit names, and the plan has none",
    )
    .await;
}
