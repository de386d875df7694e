//! The core with template gates: a gate whose template is missing holds the
//! step, says so in `status.gates`, a `Stalled` condition and one Warning;
//! a resolved one is recorded for its step and then gates the step like any.

use super::*;
use crate::api::ReleasePlanSpec;
use crate::api::template::{
    GateTemplateRef, GateTemplateSpec, Parameter, TemplateKind, TemplateRef,
};
use crate::api::{Component, JobCheck, JobGate, WebhookCheck, WebhookGate};
use crate::gates::job::{JobObs, JobState};
use crate::gates::template::{CopyIntents, CopyObs, Inputs, ObservedTemplate, resolve_with};
use chrono::TimeZone;
use chrono::{DateTime, Utc};
use serde_json::json;

fn spec() -> ReleasePlanSpec {
    let mut spec = ReleasePlanSpec {
        components: vec![Component {
            name: "web".into(),
            replicas: Some(1),
            template: serde_json::from_value(json!({
                "spec": {"containers": [{"name": "app", "image": "shop:1"}]}
            }))
            .unwrap(),
            traffic: None,
            autoscaling: None,
            config: None,
            adopt: None,
            depends_on: Vec::new(),
            kind: Default::default(),
            stateful_set: None,
            daemon_set: None,
            capacity: None,
            serving: None,
            baseline: false,
        }],
        ..Default::default()
    };
    spec.health.templates = vec![GateTemplateRef {
        name: "smoke".into(),
        template_ref: TemplateRef {
            kind: TemplateKind::GateTemplate,
            name: "smoke-test".into(),
        },
        args: [("suite".to_string(), "cart".to_string())].into(),
        component: None,
    }];
    spec
}

fn template(url: &str) -> ObservedTemplate {
    ObservedTemplate {
        kind: TemplateKind::GateTemplate,
        name: "smoke-test".into(),
        generation: Some(3),
        spec: GateTemplateSpec {
            parameters: vec![Parameter {
                name: "suite".into(),
                ..Default::default()
            }],
            webhook: Some(WebhookGate {
                name: "smoke".into(),
                check: WebhookCheck {
                    url: url.into(),
                    ..Default::default()
                },
                ..Default::default()
            }),
            prometheus: None,
            job: None,
            analysis: None,
        },
        lists_namespace: false,
    }
}

/// A first release at its final step whose pods are all ready: only gates
/// hold it.
fn rolling(spec: &ReleasePlanSpec) -> ReleasePlanStatus {
    let t = Target::from_spec(spec).unwrap();
    ReleasePlanStatus {
        phase: Phase::RollingOut,
        observed_generation: Some(1),
        current_revision: Some(t.revision.clone()),
        rollout_count: 1,
        current_step: 0,
        step_started_at: Some(now()),
        rollout_started_at: Some(now()),
        components: vec![ComponentStatus {
            name: "web".into(),
            current_hash: Some(t.components[0].hash.clone()),
            replicas: 1,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
}

fn observe(
    spec: &ReleasePlanSpec,
    status: &ReleasePlanStatus,
    observed: &[ObservedTemplate],
    gates: Vec<GateStatus>,
) -> Observation {
    observe_with_copies(spec, status, observed, gates, &CopyIntents::default())
}

/// [`observe`] with the template copies an earlier decision asked for made.
fn observe_with_copies(
    spec: &ReleasePlanSpec,
    status: &ReleasePlanStatus,
    observed: &[ObservedTemplate],
    gates: Vec<GateStatus>,
    made: &CopyIntents,
) -> Observation {
    let copies: BTreeMap<String, GateTemplateSpec> = made
        .create
        .iter()
        .map(|c| (c.hash.clone(), c.content.clone()))
        .collect();
    let inputs = Inputs {
        observed,
        copies: &copies,
        pod_security: crate::gates::pod_security::Level::default(),
    };
    let resolution = resolve_with(&spec.health.templates, status, &inputs);
    let target = Target::from_spec(spec).map(|t| t.with_templates(resolution));
    let hash = status.components[0].current_hash.clone().unwrap();
    Observation {
        plan: "shop".into(),
        now: now(),
        generation: 1,
        target,
        status: status.clone(),
        revisions: vec![RevisionObs {
            name: format!("shop-web-{hash}"),
            component: "web".into(),
            hash,
            replicas: 1,
            ready: 1,
            current: 1,
            created: Some(now()),
        }],
        pod_failures: Vec::new(),
        gates,
        jobs: Vec::new(),
        traffic: Vec::new(),
        scales: Vec::new(),
        config: Default::default(),
        adopted: Vec::new(),
        request: None,
        invalid_request: None,
        refusal: None,
        template_copies: made
            .create
            .iter()
            .map(|c| CopyObs {
                name: c.name.clone(),
                hash: c.hash.clone(),
            })
            .collect(),
        workloads: Default::default(),
        deleting: false,
    }
}

fn templates_of(spec: &ReleasePlanSpec) -> crate::plan::Templates {
    spec.components
        .iter()
        .map(|c| (c.name.clone(), std::sync::Arc::new(c.template.clone())))
        .collect()
}

fn stalled(d: &Decision) -> (String, String, String) {
    let c = d
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled")
        .unwrap();
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn warnings(d: &Decision, reason: EventReason) -> usize {
    d.events
        .iter()
        .filter(|e| e.reason == reason && e.type_ == EventType::Warning)
        .count()
}

#[test]
fn a_missing_template_holds_the_step_and_stalls_once() {
    let spec = spec();
    let status = rolling(&spec);
    let d = decide(
        &observe(&spec, &status, &[], Vec::new()),
        &templates_of(&spec),
    );
    // The pods are ready, but the gate that cannot run holds the step.
    assert_eq!(d.status.phase, Phase::RollingOut);
    let gate = d.status.gates.iter().find(|g| g.name == "smoke").unwrap();
    assert_eq!(gate.verdict, Verdict::Pending);
    assert_eq!(
        gate.message.as_deref(),
        Some("gate smoke: GateTemplate smoke-test not found")
    );
    let (s, reason, message) = stalled(&d);
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "GateTemplateNotFound")
    );
    assert!(
        message.contains("GateTemplate smoke-test not found"),
        "{message}"
    );
    assert_eq!(warnings(&d, EventReason::GateTemplateNotFound), 1);
    assert!(d.status.resolved_gates.is_empty());

    // The next reconcile, nothing changed: no second Warning, same status.
    let again = decide(
        &observe(&spec, &d.status, &[], d.status.gates.clone()),
        &templates_of(&spec),
    );
    assert_eq!(warnings(&again, EventReason::GateTemplateNotFound), 0);
    assert_eq!(again.status, d.status);

    // The template appears: the gate is resolved, recorded for the step, and
    // once it passed the release is promoted.
    let observed = [template("http://127.0.0.1:9/{{args.cart}}")];
    let bad = decide(
        &observe(&spec, &d.status, &observed, d.status.gates.clone()),
        &templates_of(&spec),
    );
    let (_, reason, message) = stalled(&bad);
    assert_eq!(reason, "GateTemplateInvalid", "{message}");
    assert!(
        message.contains("{{args.cart}} names no parameter"),
        "{message}"
    );
    assert_eq!(warnings(&bad, EventReason::GateTemplateInvalid), 1);

    let observed = [template("http://127.0.0.1:9/{{args.suite}}")];
    let ok = decide(
        &observe(&spec, &bad.status, &observed, Vec::new()),
        &templates_of(&spec),
    );
    assert_eq!(stalled(&ok).0, "False");
    assert_eq!(
        ok.status.phase,
        Phase::RollingOut,
        "the gate has not passed"
    );
    assert_eq!(ok.status.resolved_gates.len(), 1);
    let recorded = &ok.status.resolved_gates[0];
    assert_eq!((recorded.rollout, recorded.step), (1, 0));
    assert_eq!(recorded.template_generation, Some(3));
    let passed = vec![GateStatus {
        name: "smoke".into(),
        verdict: Verdict::Passed,
        ..Default::default()
    }];
    // No content in status: a copy is made for the recorded hash.
    assert!(recorded.template.is_none());
    assert_eq!(ok.template_copies.create.len(), 1);
    assert_eq!(
        Some(&ok.template_copies.create[0].hash),
        recorded.content_hash.as_ref()
    );
    // The template is gone meanwhile: the record of the step and its copy serve.
    let promoted = decide(
        &observe_with_copies(&spec, &ok.status, &[], passed, &ok.template_copies),
        &templates_of(&spec),
    );
    assert_eq!(promoted.status.phase, Phase::Stable);
    assert!(promoted.status.resolved_gates.is_empty(), "settled");
    assert_eq!(
        promoted.template_copies.delete,
        vec![ok.template_copies.create[0].name.clone()],
        "settled: the copy goes"
    );
    assert_eq!(stalled(&promoted).0, "False");
}

#[test]
fn a_settled_plan_needs_no_template() {
    let spec = spec();
    let mut status = rolling(&spec);
    status.phase = Phase::Stable;
    status.stable_revision = status.current_revision.clone();
    status.components[0].stable_hash = status.components[0].current_hash.clone();
    let d = decide(
        &observe(&spec, &status, &[], Vec::new()),
        &templates_of(&spec),
    );
    assert_eq!(d.status.phase, Phase::Stable);
    assert_eq!(stalled(&d).0, "False");
    assert_eq!(warnings(&d, EventReason::GateTemplateNotFound), 0);
    assert!(d.status.gates.is_empty());
}

#[test]
fn a_gate_component_must_be_a_component_of_the_plan() {
    let mut spec = spec();
    spec.health.templates[0].component = Some("db".into());
    let e = Target::from_spec(&spec).unwrap_err();
    assert_eq!(e.field, "spec.health.templates[0].component");
    spec.health.templates[0].component = Some("web".into());
    let t = Target::from_spec(&spec).unwrap();
    assert_eq!(
        t.gate_components.get("smoke").map(String::as_str),
        Some("web")
    );
}

#[test]
fn a_first_release_warns_once_about_a_missing_template() {
    let spec = spec();
    let mut status = ReleasePlanStatus::default();
    let mut obs = observe(&spec, &rolling(&spec), &[], Vec::new());
    obs.status = status.clone();
    // The decision that starts the rollout: Stalled already, no entry, no
    // Warning yet (the next reconcile writes the entry and warns).
    let start = decide(&obs, &templates_of(&spec));
    assert_eq!(start.status.phase, Phase::RollingOut);
    assert_eq!(stalled(&start).1, "GateTemplateNotFound");
    assert_eq!(warnings(&start, EventReason::GateTemplateNotFound), 0);
    let mut total = 0;
    status = start.status;
    for _ in 0..3 {
        let d = decide(
            &observe(&spec, &status, &[], status.gates.clone()),
            &templates_of(&spec),
        );
        total += warnings(&d, EventReason::GateTemplateNotFound);
        status = d.status;
    }
    assert_eq!(total, 1, "one Warning over the reconciles that follow");
}

/// A template holding a Job gate, with one parameter used in the image.
fn job_template() -> ObservedTemplate {
    ObservedTemplate {
        kind: TemplateKind::GateTemplate,
        name: "smoke-test".into(),
        generation: Some(5),
        spec: GateTemplateSpec {
            parameters: vec![Parameter {
                name: "suite".into(),
                ..Default::default()
            }],
            job: Some(JobGate {
                name: "x".into(),
                check: JobCheck {
                    template: json!({"spec": {"template": {"spec": {"containers": [
                        {"name": "t", "image": "smoke:{{args.suite}}"}]}}}}),
                    timeout_seconds: Some(60),
                },
                component: None,
            }),
            ..Default::default()
        },
        lists_namespace: false,
    }
}

#[test]
fn a_job_template_gate_runs_a_job_and_its_verdict_decides() {
    let spec = spec();
    let status = rolling(&spec);
    let observed = [job_template()];
    // The step's pods are ready: the core asks for the step's Job, built from
    // the template with the argument in, and records the template for the step.
    let d = decide(
        &observe(&spec, &status, &observed, Vec::new()),
        &templates_of(&spec),
    );
    assert_eq!(d.status.phase, Phase::RollingOut);
    assert_eq!(stalled(&d).0, "False");
    assert_eq!(d.jobs.create.len(), 1, "{:?}", d.jobs);
    let intent = &d.jobs.create[0];
    assert_eq!(intent.gate.name, "smoke");
    let pod = intent
        .gate
        .template
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(pod.containers[0].image.as_deref(), Some("smoke:cart"));
    assert_eq!(d.status.resolved_gates.len(), 1);
    assert_eq!(d.status.resolved_gates[0].template_generation, Some(5));
    let gate = d.status.gates.iter().find(|g| g.name == "smoke").unwrap();
    assert_eq!(gate.verdict, Verdict::Pending);

    // Its Job completes: promoted, with the template gone meanwhile (the
    // record of the step serves).
    let job = |state: JobState| JobObs {
        name: intent.name.clone(),
        rollout: 1,
        created: Some(now()),
        state,
    };
    let mut obs = observe_with_copies(&spec, &d.status, &[], Vec::new(), &d.template_copies);
    obs.jobs = vec![job(JobState::Complete)];
    let passed = decide(&obs, &templates_of(&spec));
    assert_eq!(passed.status.phase, Phase::Stable);

    // It fails instead: the rollout fails on that gate.
    let mut obs = observe_with_copies(&spec, &d.status, &[], Vec::new(), &d.template_copies);
    obs.jobs = vec![job(JobState::Failed {
        reason: "BackoffLimitExceeded".into(),
        message: "Job has reached the specified backoff limit".into(),
    })];
    let failed = decide(&obs, &templates_of(&spec));
    let f = failed.status.failure.as_ref().expect("a failure");
    assert_eq!(f.gate, "smoke");
    assert!(f.message.contains("BackoffLimitExceeded"), "{}", f.message);
}

#[test]
fn a_job_gate_component_must_be_a_component_of_the_plan() {
    let mut spec = spec();
    spec.health.templates.clear();
    spec.health.jobs = vec![JobGate {
        name: "smoke".into(),
        check: JobCheck {
            template: json!({"spec": {"template": {"spec": {"containers": [{"name": "t", "image": "i"}]}}}}),
            timeout_seconds: None,
        },
        component: Some("db".into()),
    }];
    let e = Target::from_spec(&spec).unwrap_err();
    assert_eq!(e.field, "spec.health.jobs[0].component");
    spec.health.jobs[0].component = Some("web".into());
    let t = Target::from_spec(&spec).unwrap();
    assert_eq!(t.jobs[0].component.as_deref(), Some("web"));
}
