use super::config::{ConfigError, Format, NotifyConfig, ReceiverKind};
use super::payload::{Message, PlanRef, check_template, link};
use super::*;
use chrono::TimeZone;
use std::collections::BTreeMap;

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

const RECEIVERS: &str = r"
- name: team-slack
  type: slack
  urlFrom: {secretKeyRef: {name: hooks, key: slack}}
- name: audit
  type: webhook
  format: cloudEvents
  urlFrom: {secretKeyRef: {name: hooks, key: audit}}
  tokenFrom: {secretKeyRef: {name: hooks, key: token}}
";

fn config() -> NotifyConfig {
    NotifyConfig::parse(&data(&[
        ("receivers", RECEIVERS),
        (
            "subscriptions",
            "- triggers: [rolledBack, promoted]\n  receivers: [team-slack]\n",
        ),
        (
            "template.promoted",
            "{{ plan.name }} is live ({{ revision }})",
        ),
    ]))
    .unwrap()
}

fn names(r: &[&config::Receiver]) -> Vec<String> {
    r.iter().map(|r| r.name.clone()).collect()
}

#[test]
fn a_config_parses_receivers_subscriptions_and_templates() {
    let c = config();
    assert_eq!(c.receivers["audit"].kind, ReceiverKind::Webhook);
    assert_eq!(c.receivers["audit"].format, Format::CloudEvents);
    assert_eq!(c.receivers["team-slack"].format, Format::Json);
    assert_eq!(
        c.receivers["audit"]
            .token_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .key,
        "token"
    );
    assert!(c.templates.contains_key(&Trigger::Promoted));
    let none = BTreeMap::new();
    assert_eq!(
        names(&c.receivers_for(&none, Trigger::Promoted).0),
        ["team-slack"]
    );
    assert!(c.receivers_for(&none, Trigger::StepAdvanced).0.is_empty());
}

#[test]
fn annotations_subscribe_a_plan_and_any_means_every_trigger() {
    let c = config();
    let ann = data(&[
        (
            "notifications.releaseplan.io/subscribe.paused.team-slack",
            "",
        ),
        ("notifications.releaseplan.io/subscribe.any.audit", ""),
        ("unrelated", "x"),
    ]);
    let (r, problems) = c.receivers_for(&ann, Trigger::Paused);
    assert_eq!(names(&r), ["audit", "team-slack"]);
    assert!(problems.is_empty());
    let (r, _) = c.receivers_for(&ann, Trigger::Promoted);
    // team-slack by the namespace and audit by `any`: each once.
    assert_eq!(names(&r), ["audit", "team-slack"]);
    let (r, _) = c.receivers_for(&ann, Trigger::StepAdvanced);
    assert_eq!(names(&r), ["audit"]);
}

#[test]
fn a_bad_annotation_is_reported_and_does_not_silence_the_others() {
    let c = config();
    let ann = data(&[
        (
            "notifications.releaseplan.io/subscribe.promotd.team-slack",
            "",
        ),
        ("notifications.releaseplan.io/subscribe.promoted.pager", ""),
        ("notifications.releaseplan.io/subscribe.promoted.audit", ""),
    ]);
    let (r, problems) = c.receivers_for(&ann, Trigger::Promoted);
    assert_eq!(names(&r), ["audit", "team-slack"]);
    assert_eq!(problems.len(), 2);
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(text[0].contains("unknown trigger \"promotd\""), "{text:?}");
    assert!(text[1].contains("no receiver \"pager\""), "{text:?}");
}

#[test]
fn bad_configs_name_the_key_and_the_item() {
    let bad = |pairs: &[(&str, &str)]| NotifyConfig::parse(&data(pairs)).unwrap_err();
    assert!(matches!(
        bad(&[("receivers", "- name: x\n  type: pager\n")]),
        ConfigError::Yaml { key, .. } if key == "receivers"
    ));
    assert!(matches!(
        bad(&[("receivers", RECEIVERS), ("subscriptions", "- triggers: [promoted]\n  receivers: [nobody]\n")]),
        ConfigError::UnknownReceiver { receiver, .. } if receiver == "nobody"
    ));
    assert!(matches!(
        bad(&[("template.promoted", "{{ plan.name ")]),
        ConfigError::Template { key, .. } if key == "template.promoted"
    ));
    assert!(matches!(
        bad(&[("template.launched", "x")]),
        ConfigError::UnknownTrigger { trigger, .. } if trigger == "launched"
    ));
    assert!(
        matches!(bad(&[("recievers", "[]")]), ConfigError::Yaml { key, .. } if key == "recievers")
    );
    let twice = format!(
        "{RECEIVERS}{}",
        RECEIVERS.lines().take(4).collect::<Vec<_>>().join("\n")
    );
    assert!(matches!(
        bad(&[("receivers", twice.as_str())]),
        ConfigError::Receivers(_)
    ));
}

fn notice(trigger: Trigger) -> Notice {
    Notice {
        trigger,
        rollout: 3,
        phase: Phase::RolledBack,
        revision: Some("abc123".into()),
        stable_revision: Some("old999".into()),
        step: 3,
        steps: 4,
        weight: 20,
        gate: Some("podHealth".into()),
        reason: Some("CrashLoopBackOff".into()),
        message: "component web pod web-1: back-off <restarting> & failing".into(),
        started_at: Some(Utc.with_ymd_and_hms(2026, 12, 2, 10, 0, 0).unwrap()),
        at: Utc.with_ymd_and_hms(2026, 12, 2, 10, 14, 5).unwrap(),
        duration_seconds: Some(845),
        analysis: None,
    }
}

fn plan() -> PlanRef {
    PlanRef {
        namespace: "prod".into(),
        name: "shop".into(),
        uid: "0a1b".into(),
    }
}

#[test]
fn built_in_texts_render_for_every_trigger() {
    for t in Trigger::ALL {
        let (m, problem) = Message::new(plan(), notice(*t), None, None);
        assert!(problem.is_none(), "{t}: {problem:?}");
        assert!(m.text.starts_with("prod/shop"), "{t}: {}", m.text);
    }
    let (m, _) = Message::new(plan(), notice(Trigger::RolledBack), None, None);
    assert_eq!(
        m.text,
        "prod/shop: rolled back (podHealth: CrashLoopBackOff); stable revision old999 serves"
    );
    let (m, _) = Message::new(plan(), notice(Trigger::Promoted), None, None);
    assert_eq!(m.text, "prod/shop: revision abc123 promoted in 14 min 5 s");
}

#[test]
fn a_template_sees_the_status_fields_and_a_broken_one_falls_back() {
    let (m, problem) = Message::new(
        plan(),
        notice(Trigger::Promoted),
        Some("{{ plan.name }} {{ revision }} step {{ step }}/{{ steps }} {{ link }}"),
        Some("https://dash/prod/shop".into()),
    );
    assert!(problem.is_none());
    assert_eq!(m.text, "shop abc123 step 3/4 https://dash/prod/shop");
    let (m, problem) = Message::new(plan(), notice(Trigger::Promoted), Some("{{ nope }}"), None);
    let problem = problem.unwrap();
    assert!(
        problem.contains(
            "ConfigMap releaseplan-notifications key \"template.promoted\" (template of promoted) does not render"
        ),
        "{problem}"
    );
    assert!(m.text.starts_with("prod/shop: revision abc123 promoted"));
    assert!(check_template("{% if %}").is_err());
}

#[test]
fn the_dashboard_link_is_a_template_over_the_plan() {
    assert_eq!(
        link(
            "https://argocd.example/applications/{{ namespace }}/{{ name }}?uid={{ uid }}",
            &plan()
        )
        .unwrap(),
        "https://argocd.example/applications/prod/shop?uid=0a1b"
    );
}

#[test]
fn the_webhook_body_is_versioned_and_carries_every_field() {
    let (m, _) = Message::new(plan(), notice(Trigger::RolledBack), None, None);
    let (body, ct) = m.body(ReceiverKind::Webhook, Format::Json);
    assert_eq!(ct, "application/json");
    assert_eq!(body["schema"], "releaseplan.io/notification/v1");
    assert_eq!(body["id"], m.id);
    assert!(m.id.starts_with("0a1b-3-rolledBack-3-"));
    assert_eq!(body["trigger"], "rolledBack");
    assert_eq!(body["plan"]["namespace"], "prod");
    assert_eq!(body["stableRevision"], "old999");
    assert_eq!(body["durationSeconds"], 845);
    assert_eq!(body["phase"], "RolledBack");
    assert_eq!(body["at"], "2026-12-02T10:14:05Z");
}

#[test]
fn the_cloud_event_is_structured_mode_with_the_body_as_data() {
    let (m, _) = Message::new(plan(), notice(Trigger::Paused), None, None);
    let (ev, ct) = m.body(ReceiverKind::Webhook, Format::CloudEvents);
    assert_eq!(ct, "application/cloudevents+json");
    assert_eq!(ev["specversion"], "1.0");
    assert_eq!(ev["id"], m.id);
    assert_eq!(ev["type"], "io.releaseplan.release.paused");
    assert_eq!(
        ev["source"],
        "/apis/releaseplan.io/v1alpha1/namespaces/prod/releaseplans/shop"
    );
    assert_eq!(ev["data"], m.json());
}

#[test]
fn the_slack_body_follows_block_kit() {
    let (m, _) = Message::new(
        plan(),
        notice(Trigger::RolledBack),
        None,
        Some("https://dash/prod/shop".into()),
    );
    let (b, _) = m.body(ReceiverKind::Slack, Format::Json);
    assert_eq!(b["text"], m.text);
    let blocks = b["blocks"].as_array().unwrap();
    let types: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        ["header", "section", "section", "context", "actions"]
    );
    // header: plain_text only, at most 150 characters.
    assert_eq!(blocks[0]["text"]["type"], "plain_text");
    assert!(blocks[0]["text"]["text"].as_str().unwrap().chars().count() <= 150);
    // fields: at most 10, each mrkdwn text of at most 2000 characters.
    let fields = blocks[2]["fields"].as_array().unwrap();
    assert!(!fields.is_empty() && fields.len() <= 10);
    for f in fields {
        assert_eq!(f["type"], "mrkdwn");
        assert!(f["text"].as_str().unwrap().len() <= 2000);
    }
    assert!(
        fields
            .iter()
            .any(|f| f["text"] == "*Reason*\npodHealth: CrashLoopBackOff")
    );
    assert_eq!(blocks[4]["elements"][0]["type"], "button");
    assert_eq!(blocks[4]["elements"][0]["url"], "https://dash/prod/shop");
    // Slack's control characters escaped in mrkdwn.
    let (m, _) = Message::new(plan(), notice(Trigger::Halted), None, None);
    let b = m.slack();
    let text = b["blocks"][1]["text"]["text"].as_str().unwrap();
    assert!(text.contains("&lt;restarting&gt; &amp; failing"), "{text}");
    assert_eq!(
        b["blocks"].as_array().unwrap().len(),
        4,
        "no link, no button"
    );
}

#[test]
fn the_teams_body_is_one_adaptive_card() {
    let (m, _) = Message::new(
        plan(),
        notice(Trigger::Promoted),
        None,
        Some("https://dash".into()),
    );
    let (b, _) = m.body(ReceiverKind::Teams, Format::Json);
    assert_eq!(b["type"], "message");
    let a = &b["attachments"][0];
    assert_eq!(a["contentType"], "application/vnd.microsoft.card.adaptive");
    assert_eq!(a["content"]["type"], "AdaptiveCard");
    assert_eq!(a["content"]["body"][1]["text"], m.text);
    assert_eq!(a["content"]["body"][2]["type"], "FactSet");
    assert_eq!(a["content"]["actions"][0]["url"], "https://dash");
}

#[test]
fn an_alertmanager_receiver_posts_to_the_alerts_api() {
    use super::alertmanager::alerts_url;
    assert_eq!(
        alerts_url("http://am.monitoring:9093"),
        "http://am.monitoring:9093/api/v2/alerts"
    );
    assert_eq!(
        alerts_url("https://am.example/alertmanager/"),
        "https://am.example/alertmanager/api/v2/alerts"
    );
}

#[test]
fn the_alertmanager_alert_names_the_trigger_plan_and_revision() {
    use super::alertmanager::{alertname, severity};
    assert_eq!(alertname(Trigger::RolledBack), "ReleasePlanRolledBack");
    assert_eq!(alertname(Trigger::Paused), "ReleasePlanPaused");
    for t in Trigger::ALL {
        let name = alertname(*t);
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric()), "{name}");
        // Every problem pages above info; progress does not.
        assert_eq!(
            severity(*t) == "info",
            !t.is_bad() && *t != Trigger::Paused,
            "{t}"
        );
    }
    assert_eq!(severity(Trigger::Halted), "critical");

    let (m, _) = Message::new(
        plan(),
        notice(Trigger::GateFailed),
        None,
        Some("https://dash.example/prod/shop".into()),
    );
    let (body, ct) = m.body(ReceiverKind::Alertmanager, Format::Json);
    assert_eq!(ct, "application/json");
    let alerts = body.as_array().expect("a list of alerts");
    assert_eq!(alerts.len(), 1, "gateFailed resolves nothing");
    let a = &alerts[0];
    assert_eq!(
        a["labels"],
        serde_json::json!({"alertname": "ReleasePlanGateFailed", "namespace": "prod",
            "releaseplan": "shop", "revision": "abc123", "severity": "warning"})
    );
    assert_eq!(a["annotations"]["summary"], m.text);
    let description = a["annotations"]["description"].as_str().unwrap();
    assert!(
        description.contains("step 3/4 (weight 20%)"),
        "{description}"
    );
    assert!(
        description.contains("podHealth: CrashLoopBackOff"),
        "{description}"
    );
    assert_eq!(a["annotations"]["id"], m.id);
    assert_eq!(a["startsAt"], "2026-12-02T10:14:05.000Z");
    assert!(
        a.get("endsAt").is_none(),
        "Alertmanager's resolve_timeout ends it"
    );
    assert_eq!(a["generatorURL"], "https://dash.example/prod/shop");

    let (m, _) = Message::new(plan(), notice(Trigger::Promoted), None, None);
    assert!(m.alertmanager()[0].get("generatorURL").is_none());
}

#[test]
fn promoted_and_rolled_back_resolve_the_rollouts_problems() {
    for end in [Trigger::Promoted, Trigger::RolledBack] {
        let (m, _) = Message::new(plan(), notice(end), None, None);
        let body = m.alertmanager();
        let alerts = body.as_array().unwrap();
        assert!(alerts[0].get("endsAt").is_none(), "{end} itself fires");
        let resolved: Vec<&str> = alerts[1..]
            .iter()
            .map(|a| {
                assert_eq!(a["endsAt"], "2026-12-02T10:14:05.000Z");
                assert_eq!(a["labels"]["revision"], "abc123");
                assert_eq!(a["labels"]["releaseplan"], "shop");
                a["labels"]["alertname"].as_str().unwrap()
            })
            .collect();
        assert_eq!(
            resolved,
            [
                "ReleasePlanPaused",
                "ReleasePlanGateFailed",
                "ReleasePlanHalted",
                "ReleasePlanRollbackStarted"
            ],
            "{end}"
        );
        // A resolution has the very labels the problem fired with.
        let (halted, _) = Message::new(plan(), notice(Trigger::Halted), None, None);
        assert_eq!(alerts[3]["labels"], halted.alertmanager()[0]["labels"]);
    }
}

/// The process's peak resident memory (VmHWM), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// The issue's attack: two nested loops of 100,000 in `template.rolloutStarted`
/// grew the operator past 1.3 GiB in 5 s. Within the budget it fails at
/// once, with the process's peak memory unchanged, and the built-in text is
/// what is sent; the problem names the ConfigMap and key.
#[test]
fn two_nested_loops_of_100000_fail_fast_in_bounded_memory_with_the_default_text() {
    let attack = "{% for i in range(100000) %}{% for j in range(100000) %}{{ plan.namespace }}/{{ plan.name }} {{ message }} {% endfor %}{% endfor %}";
    let peak = peak_rss();
    let started = std::time::Instant::now();
    let (m, problem) = Message::new(plan(), notice(Trigger::RolloutStarted), Some(attack), None);
    let took = started.elapsed();
    let grown = peak_rss().saturating_sub(peak);
    assert!(took < std::time::Duration::from_secs(1), "took {took:?}");
    assert!(grown < 64 << 20, "peak memory grew by {grown} bytes");
    let (default, none) = Message::new(plan(), notice(Trigger::RolloutStarted), None, None);
    assert!(none.is_none());
    assert_eq!(m.text, default.text, "the built-in text");
    let problem = problem.unwrap();
    assert!(
        problem.contains("ConfigMap releaseplan-notifications key \"template.rolloutStarted\""),
        "{problem}"
    );
    assert!(problem.contains("notification budget"), "{problem}");
}

/// Each budget on its own: the fuel (ten thousand loop iterations), the
/// size of `range()`, the output (a long text), and what could build text
/// out of the output's reach (repetition, `set`, macros, filters that join
/// or pad) is refused; a template within the budget renders.
#[test]
fn each_notification_budget_stops_a_render() {
    let render = |t: &str| Message::new(plan(), notice(Trigger::Promoted), Some(t), None).1;
    let fuel = render("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}");
    assert!(
        fuel.as_deref()
            .is_some_and(|p| p.contains("more than 10000 template instructions")),
        "{fuel:?}"
    );
    let wide = render("{% for i in range(101) %}{% endfor %}");
    assert!(
        wide.as_deref()
            .is_some_and(|p| p.contains("range() of more than 100 items")),
        "{wide:?}"
    );
    let long = render(
        "{% for i in range(100) %}{% for j in range(100) %}{{ message }}{% endfor %}{% endfor %}",
    );
    assert!(
        long.as_deref()
            .is_some_and(|p| p.contains("longer than 16384 bytes")),
        "{long:?}"
    );
    for (t, why) in [
        ("{{ 'x' * 100000000 }}", "the * operator"),
        ("{{ [1] * 1000 }}", "the * operator"),
        (
            "{% set a = message %}{% set a = a ~ a %}{{ a }}",
            "statement {% set %}",
        ),
        (
            "{%- macro f() %}x{% endmacro %}{{ f() }}",
            "statement {% macro %}",
        ),
        (
            "{% filter upper %}x{% endfilter %}",
            "statement {% filter %}",
        ),
        ("{% raw %}{{ x }}{% endraw %}", "statement {% raw %}"),
    ] {
        let p = render(t);
        assert!(p.as_deref().is_some_and(|p| p.contains(why)), "{t}: {p:?}");
        assert!(check_template(t).unwrap_err().contains(why), "{t}");
    }
    let big = format!(
        "{}{{{{ plan.name }}}}",
        "x".repeat(payload::MAX_TEMPLATE_BYTES)
    );
    assert!(
        check_template(&big)
            .unwrap_err()
            .contains("more than the 4096 allowed")
    );
    // Filters that join, repeat or pad are not there at all.
    for t in [
        "{{ range(10) | join(message) }}",
        "{{ message | indent(100000000) }}",
        "{{ message | replace('a', message) }}",
    ] {
        assert!(render(t).is_some(), "{t}");
    }
    // A `*` or a statement name inside a string literal is text.
    let (m, p) = Message::new(
        plan(),
        notice(Trigger::Promoted),
        Some(
            "{{ '*' }} {{ \"{% set %}\" }}{% if step > 1 %} {{ plan.name | upper }}{% endif %}{% for c in range(3) %}{{ c }}{% endfor %}{% if durationSeconds is not none %} {{ durationSeconds // 60 }}{% endif %}",
        ),
        None,
    );
    assert!(p.is_none(), "{p:?}");
    assert_eq!(m.text, "* {% set %} SHOP012 14");
}

/// A template over the budget is refused alone: the rest of the ConfigMap
/// is used, the trigger gets the built-in text, and the refusal names the
/// ConfigMap and key.
#[test]
fn a_config_with_a_template_over_budget_refuses_that_template_only() {
    let c = NotifyConfig::parse(&data(&[
        ("receivers", RECEIVERS),
        ("template.promoted", "{{ plan.name }} is live"),
        ("template.rolloutStarted", "{% set a = 'x' %}{{ a }}"),
    ]))
    .unwrap();
    assert!(c.templates.contains_key(&Trigger::Promoted));
    assert!(!c.templates.contains_key(&Trigger::RolloutStarted));
    let why = &c.refused_templates[&Trigger::RolloutStarted];
    assert!(
        why.contains("ConfigMap releaseplan-notifications key \"template.rolloutStarted\" is over the notification budget"),
        "{why}"
    );
}

/// The time budget is the fuel: the slowest templates found within the
/// budget (a 4 KiB template concatenating 300 ranges, uppercased at each
/// step of a loop; a loop asking a range's last item) stop in milliseconds
/// (about 150 ms and 15 ms in a debug build, a tenth of it optimised).
#[test]
fn the_slowest_templates_within_the_budget_stop_in_milliseconds() {
    let cat = (0..300)
        .map(|_| "range(100)")
        .collect::<Vec<_>>()
        .join(" ~ ");
    let slow = [
        format!(
            "{{% for i in range(100) %}}{{% for j in range(100) %}}{{% if ({cat})|upper|length > 0 %}}{{% endif %}}{{% endfor %}}{{% endfor %}}"
        ),
        "{% for i in range(100) %}{% for j in range(100) %}{% if range(100)|last > 0 %}{% endif %}{% endfor %}{% endfor %}".to_string(),
    ];
    for t in &slow {
        assert!(t.len() <= payload::MAX_TEMPLATE_BYTES, "{}", t.len());
        let started = std::time::Instant::now();
        let (_, p) = Message::new(plan(), notice(Trigger::Promoted), Some(t), None);
        let took = started.elapsed();
        assert!(
            p.as_deref()
                .is_some_and(|p| p.contains("more than 10000 template instructions")),
            "{p:?}"
        );
        assert!(took < std::time::Duration::from_secs(2), "took {took:?}");
    }
}

#[test]
fn a_notice_about_an_analysis_gate_carries_its_judgement_to_every_receiver() {
    use crate::api::analysis::{AnalysisStatus, MetricVerdict};
    use crate::api::{Failure, GateStatus, ReleasePlanStatus};
    use crate::plan::machine::Cause;
    let judgement = AnalysisStatus {
        score: 50.0,
        outcome: "Fail".into(),
        compared_with: Some("old999-baseline".into()),
        metrics: vec![
            MetricVerdict {
                name: "ttft".into(),
                verdict: "Failed".into(),
                canary_samples: 12,
                baseline_samples: 12,
                p_value: Some(9.13e-5),
                effect: Some(0.294),
                ..MetricVerdict::default()
            },
            MetricVerdict {
                name: "errors".into(),
                verdict: "Passed".into(),
                canary_samples: 590,
                baseline_samples: 606,
                p_value: Some(1.0),
                effect: Some(0.0),
                ..MetricVerdict::default()
            },
        ],
    };
    let failure = Failure {
        gate: "judge".into(),
        reason: "GateFailed".into(),
        message: "score 50 below the marginal 75".into(),
        revision: "abc123".into(),
    };
    let status = ReleasePlanStatus {
        phase: Phase::RollbackInProgress,
        gates: vec![GateStatus {
            name: "judge".into(),
            analysis: Some(judgement.clone()),
            ..GateStatus::default()
        }],
        failure: Some(failure.clone()),
        ..ReleasePlanStatus::default()
    };
    let spec: crate::api::ReleasePlanSpec = serde_json::from_value(serde_json::json!({
        "components": [{"name": "web", "replicas": 2,
            "template": {"spec": {"containers": [{"name": "app", "image": "shop:1"}]}}}]
    }))
    .unwrap();
    let target = crate::plan::Target::from_spec(&spec).unwrap();
    let now = Utc.with_ymd_and_hms(2026, 12, 7, 12, 0, 0).unwrap();
    let out = notices(
        now,
        &ReleasePlanStatus::default(),
        &target,
        &Cause::RollbackStarted(failure),
        &status,
        &[],
    );
    let triggers: Vec<Trigger> = out.iter().map(|n| n.trigger).collect();
    assert_eq!(triggers, [Trigger::GateFailed, Trigger::RollbackStarted]);
    assert!(out.iter().all(|n| n.analysis.as_ref() == Some(&judgement)));
    let (m, _) = Message::new(plan(), out[1].clone(), None, None);
    let line = "score 50 Fail against old999-baseline: ttft Failed (12/12 samples, change +29.4%, p 9.13e-5); errors Passed (590/606 samples, change +0.0%, p 1.00e0)";
    assert_eq!(m.json()["analysis"]["comparedWith"], "old999-baseline");
    assert_eq!(m.json()["analysis"]["metrics"][0]["pValue"], 9.13e-5);
    let slack = m.slack();
    let fields = slack["blocks"][2]["fields"].as_array().unwrap();
    assert!(
        fields
            .iter()
            .any(|f| f["text"] == format!("*Analysis*\n{line}")),
        "{fields:?}"
    );
    let teams = m.teams();
    let facts = teams["attachments"][0]["content"]["body"][2]["facts"]
        .as_array()
        .unwrap();
    assert!(
        facts
            .iter()
            .any(|f| f["title"] == "Analysis" && f["value"] == line),
        "{facts:?}"
    );
    // Other notices carry none.
    let (m, _) = Message::new(plan(), notice(Trigger::RolledBack), None, None);
    assert!(m.json().get("analysis").is_none());
}

#[test]
fn commit_status_receivers_need_a_repository_and_a_token() {
    let parse = |r: &str| NotifyConfig::parse(&data(&[("receivers", r)]));
    let ok = parse(
        "- name: gh\n  type: githubStatus\n  repository: acme/shop\n  urlFrom: {secretKeyRef: {name: gh, key: api}}\n  tokenFrom: {secretKeyRef: {name: gh, key: token}}\n- name: gl\n  type: gitlabStatus\n  repository: group/sub/shop\n  urlFrom: {secretKeyRef: {name: gl, key: url}}\n  tokenFrom: {secretKeyRef: {name: gl, key: token}}\n",
    )
    .unwrap();
    assert_eq!(ok.receivers["gh"].kind, ReceiverKind::GithubStatus);
    assert_eq!(
        ok.receivers["gl"].repository.as_deref(),
        Some("group/sub/shop")
    );
    for (yaml, why) in [
        (
            "- name: gh\n  type: githubStatus\n  urlFrom: {secretKeyRef: {name: gh, key: api}}\n  tokenFrom: {secretKeyRef: {name: gh, key: token}}\n",
            "needs repository",
        ),
        (
            "- name: gh\n  type: githubStatus\n  repository: acme/shop\n  urlFrom: {secretKeyRef: {name: gh, key: api}}\n",
            "needs tokenFrom",
        ),
        (
            "- name: gh\n  type: githubStatus\n  repository: acme\n  urlFrom: {secretKeyRef: {name: gh, key: api}}\n  tokenFrom: {secretKeyRef: {name: gh, key: token}}\n",
            "repository \"acme\" is not owner/name",
        ),
        (
            "- name: hook\n  type: webhook\n  repository: acme/shop\n  urlFrom: {secretKeyRef: {name: h, key: url}}\n",
            "only for githubStatus and gitlabStatus",
        ),
    ] {
        let err = parse(yaml).unwrap_err().to_string();
        assert!(err.contains(why), "{err}");
        assert!(err.contains("key \"receivers\""), "{err}");
    }
}
