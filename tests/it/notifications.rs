//! Notifications with the real operator: receivers on 127.0.0.1 that record
//! what they get, configured the documented way (the namespace's ConfigMap
//! `releaseplan-notifications`, Secrets shared under the gates' rules, the
//! plan's subscription annotations). A promoted and a rolled-back release
//! each send their sequence exactly once per receiver, also across a SIGKILL
//! of the operator mid-rollout; the Slack body follows Block Kit; the
//! CloudEvent parses with the CloudEvents SDK; each Teams message parses with
//! the Adaptive Cards SDK; a receiver that never answers
//! delays nothing; neither the token nor a receiver URL is logged. With two
//! replicas under leader election, a leader killed mid-rollout hands over to
//! the follower without a notice repeated or lost.

use crate::support;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, PostParams};
use releaseplan::api::Phase;
use serde_json::{Value, json};
use support::fixtures::{faulty_template, plan, web, web_with};
use support::operator::Operator;
use support::plans::{create, plan_events, request, set_components, wait_phase};
use support::recorder::{self, Log, Received};
use support::{Harness, WAIT, wait_until};

const TOKEN: &str = "notify-token-4d61c2e8";
/// A Slack-like URL path: the secret part of an incoming webhook's URL.
const SLACK_PATH: &str = "slack-T0001-B0002-xoxsecret77";

async fn put_secret(client: &Client, ns: &str, data: &BTreeMap<&str, String>) {
    recorder::put_receivers_secret(client, ns, "hooks", json!(data)).await;
}

async fn put_config(client: &Client, ns: &str) {
    let receivers = r"
- name: hook
  type: webhook
  urlFrom: {secretKeyRef: {name: hooks, key: hook}}
  tokenFrom: {secretKeyRef: {name: hooks, key: token}}
- name: ce
  type: webhook
  format: cloudEvents
  urlFrom: {secretKeyRef: {name: hooks, key: ce}}
- name: slack
  type: slack
  urlFrom: {secretKeyRef: {name: hooks, key: slack}}
- name: teams
  type: teams
  urlFrom: {secretKeyRef: {name: hooks, key: teams}}
- name: hung
  type: webhook
  urlFrom: {secretKeyRef: {name: hooks, key: hung}}
";
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "releaseplan-notifications"},
        "data": {
            "receivers": receivers,
            "subscriptions": "- triggers: [any]\n  receivers: [hook, hung]\n",
            "template.paused": "{{ plan.name }} waits at step {{ step }}/{{ steps }} for you ({{ link }})",
        },
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create the ConfigMap");
}

/// `(rollout, trigger)` of each webhook body, in arrival order.
fn sequence(got: &[Received]) -> Vec<(i64, String)> {
    got.iter()
        .map(|r| {
            (
                r.body["rollout"].as_i64().unwrap_or(-1),
                r.body["trigger"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect()
}

/// The CloudEvents received, as `rollout:type` (what a timeout shows).
fn ce_types(got: &[Received]) -> String {
    let seen: Vec<String> = got
        .iter()
        .map(|r| format!("{}:{}", r.body["data"]["rollout"], r.body["type"]))
        .collect();
    format!("{seen:?}")
}

/// Waits until `path` of `log` has a body of `trigger` in `rollout`.
async fn wait_for(log: &Log, path: &str, rollout: i64, trigger: &str) -> Received {
    let what = format!("{path}: {trigger} of rollout {rollout}");
    wait_until(WAIT, &what, || {
        let got = log.at(path);
        let found = got
            .iter()
            .find(|r| r.body["rollout"] == rollout && r.body["trigger"] == trigger)
            .cloned();
        async move { found.ok_or_else(|| format!("{:?}", sequence(&got))) }
    })
    .await
}

async fn start_operator(h: &Harness) -> Operator {
    h.operator()
        .args([
            "--gate-credentials-namespace",
            h.ns.as_str(),
            "--dashboard-url",
            "https://dash.example/plans/{{ namespace }}/{{ name }}",
        ])
        .start()
        .await
}

/// Block Kit as Slack documents it for incoming webhooks, the parts we use.
fn assert_block_kit(body: &Value) {
    assert!(body["text"].as_str().is_some_and(|t| !t.is_empty()));
    let blocks = body["blocks"].as_array().expect("blocks");
    assert!(!blocks.is_empty() && blocks.len() <= 50);
    for b in blocks {
        match b["type"].as_str().unwrap() {
            "header" => {
                assert_eq!(b["text"]["type"], "plain_text");
                assert!(b["text"]["text"].as_str().unwrap().chars().count() <= 150);
            }
            "section" => {
                if let Some(t) = b.get("text") {
                    assert!(matches!(t["type"].as_str(), Some("mrkdwn" | "plain_text")));
                    assert!(t["text"].as_str().unwrap().chars().count() <= 3000);
                }
                if let Some(f) = b.get("fields") {
                    let f = f.as_array().unwrap();
                    assert!(f.len() <= 10);
                    for x in f {
                        assert!(x["text"].as_str().unwrap().chars().count() <= 2000);
                    }
                }
                assert!(b.get("text").is_some() || b.get("fields").is_some());
            }
            "context" => assert!(!b["elements"].as_array().unwrap().is_empty()),
            "actions" => {
                for e in b["elements"].as_array().unwrap() {
                    assert_eq!(e["type"], "button");
                    assert_eq!(e["text"]["type"], "plain_text");
                    assert!(e["url"].as_str().unwrap().starts_with("https://"));
                }
            }
            other => panic!("block type {other} is not one Slack knows"),
        }
    }
}

#[tokio::test]
async fn releases_notify_each_transition_once_per_receiver() {
    let h = Harness::new("notify").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let (addr, log) = recorder::start().await;
    let hung_addr = recorder::never_answering(&log).await;
    let url = |p: &str| format!("http://127.0.0.1:{}/{p}", addr.port());
    let data: BTreeMap<&str, String> = [
        ("hook", url("hook")),
        ("ce", url("ce")),
        ("slack", url(SLACK_PATH)),
        ("teams", url("teams")),
        (
            "hung",
            format!("http://127.0.0.1:{}/hung", hung_addr.port()),
        ),
        ("token", TOKEN.to_string()),
    ]
    .into_iter()
    .collect();
    put_secret(&client, &ns, &data).await;
    put_config(&client, &ns).await;
    let mut op = start_operator(&h).await;

    let mut p = plan(
        "shop",
        json!({"components": [web("shop:1", 2)],
               "strategy": {"steps": [{"setWeight": 50}, {"pause": {}}]}}),
    );
    p.metadata.annotations = Some(
        [
            ("notifications.releaseplan.io/subscribe.any.ce", ""),
            ("notifications.releaseplan.io/subscribe.promoted.slack", ""),
            (
                "notifications.releaseplan.io/subscribe.rolledBack.slack",
                "",
            ),
            ("notifications.releaseplan.io/subscribe.any.teams", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    create(&client, &ns, &p).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_for(&log, "hook", 1, "promoted").await;

    // Rollout 2 holds at `pause: {}`; the operator is killed there and a new
    // one takes over: nothing is sent again.
    set_components(&client, &ns, "shop", json!([web("shop:2", 2)])).await;
    let paused = wait_for(&log, "hook", 2, "paused").await;
    assert_eq!(
        paused.body["text"],
        "shop waits at step 2/2 for you (https://dash.example/plans/".to_string() + &ns + "/shop)",
        "the namespace's template, with the dashboard link"
    );
    // A crash between the status write and a send loses that notice (at
    // most once), so the kill waits until every receiver counted below has
    // what was sent so far: each receiver's worker runs on its own, and on a
    // busy machine the CloudEvents one can still be a message behind.
    wait_until(WAIT, "ce: the first five CloudEvents", || {
        let got = log.at("ce");
        async move { (got.len() >= 5).then_some(()).ok_or_else(|| ce_types(&got)) }
    })
    .await;
    wait_until(WAIT, "slack: rollout 1's promoted", || {
        let got = log.at(SLACK_PATH);
        async move {
            (!got.is_empty())
                .then_some(())
                .ok_or_else(|| "none".to_string())
        }
    })
    .await;
    op.kill();
    let op = start_operator(&h).await;
    request(&client, &ns, "shop", "promote").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_for(&log, "hook", 2, "promoted").await;

    // Rollout 3 crash-loops and rolls back.
    set_components(
        &client,
        &ns,
        "shop",
        json!([web_with(faulty_template("shop:3", "crash-loop"), 2)]),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
    let rolled_back = wait_for(&log, "hook", 3, "rolledBack").await;
    assert_eq!(rolled_back.body["gate"], "podHealth");
    assert_eq!(rolled_back.body["reason"], "CrashLoopBackOff");

    // Each receiver delivers in order, so a repeat of any earlier transition
    // would have arrived before this last one: the counts are final.
    let want: Vec<(i64, String)> = [
        (1, "rolloutStarted"),
        (1, "promoted"),
        (2, "rolloutStarted"),
        (2, "stepAdvanced"),
        (2, "paused"),
        (2, "stepAdvanced"),
        (2, "promoted"),
        (3, "rolloutStarted"),
        (3, "rollbackStarted"),
        (3, "rolledBack"),
    ]
    .into_iter()
    .map(|(r, t)| (r, t.to_string()))
    .collect();
    let hook = log.at("hook");
    assert_eq!(sequence(&hook), want, "the webhook receiver's sequence");
    let ids: std::collections::BTreeSet<&str> = hook
        .iter()
        .map(|r| r.body["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), hook.len(), "one id per transition");
    for r in &hook {
        assert_eq!(r.body["schema"], "releaseplan.io/notification/v1");
        assert_eq!(r.body["plan"]["namespace"], ns.as_str());
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        assert_eq!(r.header("idempotency-key"), r.body["id"].as_str());
    }

    // The CloudEvents receiver: the same sequence, each a structured-mode
    // event that the CloudEvents SDK parses.
    let n = want.len();
    let ce = wait_until(WAIT, "ce: every CloudEvent", || {
        let got = log.at("ce");
        async move {
            let seen = ce_types(&got);
            (got.len() >= n).then_some(got).ok_or(seen)
        }
    })
    .await;
    assert_eq!(ce.len(), want.len());
    for (r, (rollout, trigger)) in ce.iter().zip(&want) {
        assert_eq!(
            r.header("content-type"),
            Some("application/cloudevents+json")
        );
        let ev: cloudevents::Event =
            serde_json::from_value(r.body.clone()).expect("a CloudEvent the SDK parses");
        use cloudevents::AttributesReader as _;
        assert_eq!(ev.specversion(), cloudevents::event::SpecVersion::V10);
        assert_eq!(ev.ty(), format!("io.releaseplan.release.{trigger}"));
        assert_eq!(
            ev.source().to_string(),
            format!("/apis/releaseplan.io/v1alpha1/namespaces/{ns}/releaseplans/shop")
        );
        let data = match ev.data() {
            Some(cloudevents::Data::Json(v)) => v.clone(),
            other => panic!("data is not JSON: {other:?}"),
        };
        assert_eq!(data["rollout"], *rollout);
        assert_eq!(data["id"], ev.id());
    }

    // Slack: promoted twice and rolled back once, Block Kit bodies.
    let slack = wait_until(WAIT, "slack: 3 messages", || {
        let got = log.at(SLACK_PATH);
        async move { (got.len() >= 3).then_some(got) }
    })
    .await;
    let triggers: Vec<String> = slack
        .iter()
        .map(|r| {
            let ctx = r.body["blocks"][3]["elements"][0]["text"].as_str().unwrap();
            ctx.to_string()
        })
        .collect();
    assert_eq!(slack.len(), 3, "{triggers:?}");
    for r in &slack {
        assert_block_kit(&r.body);
    }
    assert!(
        slack[2].body["text"]
            .as_str()
            .unwrap()
            .contains("rolled back (podHealth: CrashLoopBackOff)")
    );
    assert_eq!(
        slack[2].body["blocks"][4]["elements"][0]["url"],
        format!("https://dash.example/plans/{ns}/shop")
    );

    // Teams: every message is one the Adaptive Cards SDK, Teams' renderer
    // on the web, parses without a complaint, and writes back whole.
    let teams = wait_until(WAIT, "teams: every message", || {
        let got = log.at("teams");
        async move { (got.len() >= n).then_some(got) }
    })
    .await;
    assert_eq!(teams.len(), n);
    for r in &teams {
        if let Err(report) = support::tools::check_teams_card(&r.body) {
            panic!("a Teams message the SDK refuses: {report}\n{}", r.body);
        }
    }
    let last = &teams[n - 1].body["attachments"][0]["content"];
    assert!(
        last["body"][0]["text"]
            .as_str()
            .unwrap()
            .ends_with("rolledBack"),
        "{last}"
    );
    assert_eq!(last["body"][0]["color"], "Attention");
    // The check can fail: a schema 1.5 property in this 1.4 card is refused.
    let mut newer = teams[0].body.clone();
    newer["attachments"][0]["content"]["body"][0]["style"] = json!("heading");
    let refused = support::tools::check_teams_card(&newer).expect_err("a 1.5 property refused");
    assert!(refused.contains("style"), "{refused}");

    // The receiver that never answers held nothing up: each of its
    // deliveries waits 10 s for an answer, and the webhook receiver, fed by
    // the same transitions, got the rollback's end before it did.
    let is = |rollout: i64, trigger: &'static str| {
        move |b: &Value| b["rollout"] == rollout && b["trigger"] == trigger
    };
    let hook_done = log.position("hook", is(3, "rolledBack")).unwrap();
    let hung_done = log.position("hung", is(3, "rolledBack"));
    assert!(
        hung_done.is_none_or(|h| h > hook_done),
        "the hung receiver got rolledBack (#{hung_done:?}) before the webhook (#{hook_done})"
    );
    assert!(!log.at("hung").is_empty(), "the hung receiver was called");
    let metrics = op.metrics().await;
    let sent = |r: &str| {
        support::operator::sum_metric(
            &metrics,
            &format!(
                "releaseplan_notifications_total{{namespace=\"{ns}\",receiver=\"{r}\",result=\"sent\"}}"
            ),
        )
    };
    // The second operator sent rollout 2's last two and rollout 3's.
    assert_eq!(sent("hook"), 5.0, "{metrics}");
    assert_eq!(sent("hung"), 0.0, "{metrics}");
    let failed = format!(
        "releaseplan_notifications_total{{namespace=\"{ns}\",receiver=\"hung\",result=\"failed\"}}"
    );
    wait_until(WAIT, "a failed delivery to the hung receiver", || {
        let m = op.metrics();
        let failed = failed.clone();
        async move { (support::operator::sum_metric(&m.await, &failed) >= 1.0).then_some(()) }
    })
    .await;

    // Secrets stay secret: neither the token nor a URL in the log or Events.
    let logs = op.log_text();
    for secret in [TOKEN, SLACK_PATH] {
        assert!(!logs.contains(secret), "the operator logged {secret}");
        let events = plan_events(&client, &ns, "shop").await;
        assert!(
            events.iter().all(|(_, _, note, _)| !note.contains(secret)),
            "an Event names {secret}"
        );
    }
}

#[tokio::test]
async fn a_subscription_without_its_receiver_is_a_warning_event() {
    let h = Harness::new("notify-bad").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let _op = start_operator(&h).await;
    let mut p = plan(
        "shop",
        json!({"components": [web("shop:1", 1)], "strategy": {"steps": []}}),
    );
    p.metadata.annotations = Some(
        [(
            "notifications.releaseplan.io/subscribe.promoted.pager".to_string(),
            String::new(),
        )]
        .into_iter()
        .collect(),
    );
    create(&client, &ns, &p).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_until(
        WAIT,
        "a NotificationFailed Event naming the ConfigMap",
        || {
            let client = client.clone();
            let ns = ns.clone();
            async move {
                let events = plan_events(&client, &ns, "shop").await;
                events
                    .iter()
                    .find(|(reason, type_, note, _)| {
                        reason == "NotificationFailed"
                            && type_ == "Warning"
                            && note.contains("releaseplan-notifications")
                    })
                    .cloned()
                    .ok_or_else(|| format!("{events:?}"))
            }
        },
    )
    .await;
}

/// The lease of the failover test: short, so the follower takes over soon.
const LEASE_SECONDS: &str = "10";
/// The timed pause the leader is killed in. Longer than a takeover
/// (`LEASE_SECONDS` and a reconcile), so the follower finishes it; and so
/// long that the kill, right after the pause's notice arrived, lands while
/// the plan waits (checked below, not assumed).
const PAUSE: &str = "30s";

async fn lease_holder(client: &Client, ns: &str) -> Option<String> {
    use k8s_openapi::api::coordination::v1::Lease;
    let lease = Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt("rp-notify")
        .await
        .ok()??;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

async fn wait_lease_holder(client: &Client, ns: &str, want: &str) {
    wait_until(WAIT, &format!("{want} to hold the lease"), || async {
        let got = lease_holder(client, ns).await;
        (got.as_deref() == Some(want))
            .then_some(())
            .ok_or(format!("{got:?}"))
    })
    .await;
}

/// How many notices `op` sent to the receiver `hook` of `ns`.
async fn sent_to_hook(op: &Operator, ns: &str) -> f64 {
    let name = format!(
        "releaseplan_notifications_total{{namespace=\"{ns}\",receiver=\"hook\",result=\"sent\"}}"
    );
    support::operator::sum_metric(&op.metrics().await, &name)
}

/// A replica under leader election that reads receivers' Secrets from `ns`.
async fn start_replica(ns: &str, id: &str) -> Operator {
    Operator::launcher(ns)
        .leader_election(ns)
        .args([
            "--lease-name",
            "rp-notify",
            "--lease-seconds",
            LEASE_SECONDS,
            "--identity",
            id,
            "--gate-credentials-namespace",
            ns,
        ])
        .start()
        .await
}

/// The promise is at most once (docs/decisions.md, "Notifications"): a
/// notice is sent by the replica whose status write recorded the
/// transition. A leader SIGKILLed while the plan waits out a timed pause has
/// sent everything it wrote; the follower takes the lease, reads a status
/// that records the pause, finishes the rollout and sends only what it
/// writes. So here every transition arrives exactly once. (A kill between a
/// status write and its send would lose that one notice, never repeat it;
/// the test checks the kill did not land in such a window.)
#[tokio::test]
async fn a_leader_killed_mid_rollout_hands_over_and_each_notice_arrives_once() {
    let h = Harness::new("notify-leader").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let (addr, log) = recorder::start().await;
    let data: BTreeMap<&str, String> = [
        ("hook", format!("http://127.0.0.1:{}/hook", addr.port())),
        ("token", TOKEN.to_string()),
    ]
    .into_iter()
    .collect();
    put_secret(&client, &ns, &data).await;
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "releaseplan-notifications"},
        "data": {"receivers": "- name: hook\n  type: webhook\n  urlFrom: {secretKeyRef: {name: hooks, key: hook}}\n"},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create the ConfigMap");

    let mut a = start_replica(&ns, "op-a").await;
    wait_lease_holder(&client, &ns, "op-a").await;
    let b = start_replica(&ns, "op-b").await;

    let mut p = plan(
        "shop",
        json!({"components": [web("shop:1", 2)],
               "strategy": {"steps": [{"setWeight": 50}, {"pause": {"duration": PAUSE}}]}}),
    );
    p.metadata.annotations = Some(
        [(
            "notifications.releaseplan.io/subscribe.any.hook".to_string(),
            String::new(),
        )]
        .into_iter()
        .collect(),
    );
    create(&client, &ns, &p).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_for(&log, "hook", 1, "promoted").await;

    // Rollout 2 reaches the timed pause (step 2 of 2): the leader is killed.
    set_components(&client, &ns, "shop", json!([web("shop:2", 2)])).await;
    let at_pause = wait_until(WAIT, "hook: rollout 2 at its pause", || {
        let got = log.at("hook");
        let found = got
            .iter()
            .find(|r| r.body["rollout"] == 2 && r.body["trigger"] == "stepAdvanced")
            .cloned();
        async move { found.ok_or_else(|| format!("{:?}", sequence(&got))) }
    })
    .await;
    assert_eq!(at_pause.body["step"], 2, "{:?}", at_pause.body);
    a.kill();
    // What the killed leader wrote last: still the pause it announced, so it
    // died with nothing written and unsent (otherwise the test's premise,
    // not the product, failed: the machine stalled for the whole pause).
    let status = support::plans::get(&client, &ns, "shop")
        .await
        .and_then(|p| p.status)
        .expect("the plan's status");
    assert_eq!(
        (status.phase, status.current_step),
        (Phase::RollingOut, 1),
        "the kill landed during the pause"
    );
    assert_eq!(
        sent_to_hook(&b, &ns).await,
        0.0,
        "the follower sent nothing"
    );

    // The follower takes over and finishes the pause and the rollout.
    wait_lease_holder(&client, &ns, "op-b").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_for(&log, "hook", 2, "promoted").await;

    // One receiver delivers in order: a repeat of an earlier transition
    // would have arrived before the last one, so the counts are final.
    let want: Vec<(i64, String)> = [
        (1, "rolloutStarted"),
        (1, "promoted"),
        (2, "rolloutStarted"),
        (2, "stepAdvanced"),
        (2, "stepAdvanced"),
        (2, "promoted"),
    ]
    .into_iter()
    .map(|(r, t)| (r, t.to_string()))
    .collect();
    let hook = log.at("hook");
    assert_eq!(sequence(&hook), want, "the webhook receiver's sequence");
    let steps: Vec<&Value> = hook[3..5].iter().map(|r| &r.body["step"]).collect();
    assert_eq!(
        steps,
        [&json!(2), &json!(3)],
        "the pause, then the final step"
    );
    let ids: std::collections::BTreeSet<&str> = hook
        .iter()
        .map(|r| r.body["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), hook.len(), "one id per transition");
    // The follower sent the two transitions it wrote, and only those.
    assert_eq!(sent_to_hook(&b, &ns).await, 2.0, "{}", b.metrics().await);
}

/// The peak resident memory of a process (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the operator runs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM")
        * 1024
}

/// Issue #50, part 1: a tenant's `template.rolloutStarted` of two nested
/// loops of 100,000 grew the operator past 1.3 GiB in 5 s and got it
/// killed, for every namespace. Within the budget the notice still arrives,
/// with the built-in text; a Warning on the plan names the ConfigMap and
/// key; a template refused when the ConfigMap is read (`set` doubling a
/// string) does the same for its trigger; the operator's peak memory stays
/// small and another plan keeps releasing.
#[tokio::test]
async fn a_template_over_budget_is_refused_and_the_notice_goes_out_with_the_default_text() {
    let h = Harness::new("notify-budget").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let (addr, log) = recorder::start().await;
    let data: BTreeMap<&str, String> = [("hook", format!("http://127.0.0.1:{}/hook", addr.port()))]
        .into_iter()
        .collect();
    put_secret(&client, &ns, &data).await;
    let receivers =
        "- name: hook\n  type: webhook\n  urlFrom: {secretKeyRef: {name: hooks, key: hook}}\n";
    let nested = "{% for i in range(100000) %}{% for j in range(100000) %}{{ plan.namespace }}/{{ plan.name }}: {{ message }} {% endfor %}{% endfor %}";
    let doubling =
        "{% set a = message %}{% for i in range(60) %}{% set a = a ~ a %}{% endfor %}{{ a }}";
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "releaseplan-notifications"},
        "data": {
            "receivers": receivers,
            "subscriptions": "- triggers: [rolloutStarted, promoted]\n  receivers: [hook]\n",
            "template.rolloutStarted": nested,
            "template.promoted": doubling,
        },
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create the ConfigMap");
    let mut op = start_operator(&h).await;
    let pid = op.pid().expect("the operator's pid");
    let before = peak_rss(pid);

    for name in ["shop", "other"] {
        create(
            &client,
            &ns,
            &plan(name, json!({"components": [web("shop:1", 1)]})),
        )
        .await;
    }
    // Both notices of `shop` arrive, with the built-in texts.
    let started = wait_until(WAIT, "shop's rolloutStarted notice", || {
        let got = log.at("hook");
        let found = got
            .iter()
            .find(|r| r.body["plan"]["name"] == "shop" && r.body["trigger"] == "rolloutStarted")
            .cloned();
        async move { found.ok_or_else(|| format!("{:?}", sequence(&got))) }
    })
    .await;
    let text = started.body["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with(&format!("{ns}/shop: "))
            && !text.contains(&format!("{ns}/shop: {ns}/shop")),
        "the built-in text: {text}"
    );
    let promoted = wait_until(WAIT, "shop's promoted notice", || {
        let got = log.at("hook");
        let found = got
            .iter()
            .find(|r| r.body["plan"]["name"] == "shop" && r.body["trigger"] == "promoted")
            .cloned();
        async move { found.ok_or_else(|| format!("{:?}", sequence(&got))) }
    })
    .await;
    let text = promoted.body["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with(&format!("{ns}/shop: revision ")) && text.contains(" promoted"),
        "the built-in text: {text}"
    );
    // Each refusal is a Warning on the plan naming the ConfigMap and key.
    for key in ["template.rolloutStarted", "template.promoted"] {
        let want = format!("ConfigMap releaseplan-notifications key \"{key}\"");
        wait_until(WAIT, &format!("a Warning naming {key}"), || {
            let client = client.clone();
            let ns = ns.clone();
            let want = want.clone();
            async move {
                let events = plan_events(&client, &ns, "shop").await;
                events
                    .iter()
                    .find(|(reason, type_, note, _)| {
                        reason == "NotificationFailed"
                            && type_ == "Warning"
                            && note.contains(&want)
                            && note.contains("notification budget")
                            && note.contains("the built-in text was sent")
                    })
                    .cloned()
                    .ok_or_else(|| format!("{events:?}"))
            }
        })
        .await;
    }
    // Another plan keeps releasing: its first release, then a new revision.
    wait_phase(&client, &ns, "other", Phase::Stable, WAIT).await;
    set_components(&client, &ns, "other", json!([web("shop:2", 1)])).await;
    wait_phase(&client, &ns, "other", Phase::Stable, WAIT).await;
    // The operator is alive and its memory did not grow with the template.
    let peak = peak_rss(pid);
    assert!(
        peak < before + (64 << 20),
        "peak RSS grew from {before} to {peak} bytes"
    );
    assert!(op.exit_status().is_none(), "the operator still runs");
}
