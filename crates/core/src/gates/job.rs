//! Job gates: a Kubernetes Job run once in every step of a rollout.
//!
//! Everything here is pure. The core decides from the observed Jobs
//! ([`JobObs`]) what each Job gate's verdict is ([`verdict`]), which Job to
//! create and which to delete ([`intents`]); the controller only creates and
//! deletes them (`controller::jobs`), with the Job built here ([`build`]).
//!
//! A Job's name is a function of (plan, gate, rollout, step, when the step
//! started), all persisted in status: an operator that restarts, or a new
//! leader, computes the same name, finds the Job in its cache (or gets
//! AlreadyExists when it creates it) and never starts a second one for the
//! same step. A `retry` restarts the step (a new `stepStartedAt`), so it gets
//! a new Job.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::{Job, JobTemplateSpec};
use k8s_openapi::api::core::v1::EnvVar;
use kube::{Resource, ResourceExt};

use crate::api::{
    DEFAULT_JOB_TIMEOUT_SECONDS, GateStatus, JobGate, LABEL_GATE, LABEL_PLAN, LABEL_ROLLOUT,
    LABEL_STEP, Phase, ReleasePlan, ReleasePlanStatus, Verdict, revision,
};

/// A Job gate, parsed once from the spec.
#[derive(Debug, Clone, PartialEq)]
pub struct JobGateSpec {
    /// Gate name, unique in the plan.
    pub name: String,
    /// The Job template, as written (the operator adds labels, env and defaults).
    pub template: JobTemplateSpec,
    /// How long the Job may run before the gate fails.
    pub timeout: Duration,
    /// The component the Job is told about; `None`: the first that changes.
    pub component: Option<String>,
}

impl JobGateSpec {
    /// The gate of a tenant (a plan or a namespaced GateTemplate), its pod
    /// held to the Pod Security Standard `level` ([`super::pod_security::secure`]:
    /// refused fields, restricted defaults filled in). The error is the path
    /// below the Job template and its message.
    pub fn secured(mut self, level: super::pod_security::Level) -> Result<Self, (String, String)> {
        // The pod template's annotations can turn AppArmor off as its
        // fields can (the baseline level forbids both).
        if level != super::pod_security::Level::Privileged
            && let Some((field, why)) = self
                .template
                .spec
                .as_ref()
                .and_then(|s| s.template.metadata.as_ref())
                .and_then(|m| m.annotations.as_ref())
                .and_then(super::pod_security::baseline_annotations)
        {
            return Err((
                format!("template.spec.template.{field}"),
                super::pod_security::refusal(&why, level),
            ));
        }
        if let Some(pod) = self
            .template
            .spec
            .as_mut()
            .and_then(|s| s.template.spec.as_mut())
        {
            super::pod_security::secure(pod, level).map_err(|(field, why)| {
                (
                    format!("template.spec.template.spec.{field}"),
                    super::pod_security::refusal(&why, level),
                )
            })?;
        }
        Ok(self)
    }

    /// Parses a gate of the spec; the error names the field under the gate.
    pub fn parse(g: &JobGate) -> Result<JobGateSpec, (String, String)> {
        let template: JobTemplateSpec = serde_json::from_value(g.check.template.clone())
            .map_err(|e| ("template".to_string(), format!("not a Job template: {e}")))?;
        let Some(pod) = template
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
        else {
            return Err((
                "template.spec.template.spec".into(),
                "a pod spec is required".into(),
            ));
        };
        if pod.containers.is_empty() {
            return Err((
                "template.spec.template.spec.containers".into(),
                "at least one container is required".into(),
            ));
        }
        if let Some(p) = pod.restart_policy.as_deref()
            && p != "Never"
            && p != "OnFailure"
        {
            return Err((
                "template.spec.template.spec.restartPolicy".into(),
                format!("must be Never or OnFailure for a Job, not {p:?}"),
            ));
        }
        let secs = g
            .check
            .timeout_seconds
            .unwrap_or(DEFAULT_JOB_TIMEOUT_SECONDS)
            .max(1);
        Ok(JobGateSpec {
            name: g.name.clone(),
            template,
            timeout: Duration::from_secs(u64::try_from(secs).unwrap_or(1)),
            component: g.component.clone(),
        })
    }
}

/// Where a Job is, as far as the gate is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Neither complete nor failed yet.
    Running,
    /// Condition `Complete` is True.
    Complete,
    /// Not in the cluster: the API server refused to create it (the
    /// controller remembers the last answer until a create succeeds).
    Refused {
        /// HTTP status code of the answer; 0 when there was none.
        code: u16,
        /// The API server's message.
        message: String,
    },
    /// Condition `Failed` is True.
    Failed {
        /// The condition's reason, e.g. `BackoffLimitExceeded`, `DeadlineExceeded`.
        reason: String,
        /// The condition's message.
        message: String,
    },
}

/// One Job of the plan, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobObs {
    /// Job name.
    pub name: String,
    /// Its `releaseplan.io/rollout` label (0 when missing or not a number).
    pub rollout: i64,
    /// When the API server created it.
    pub created: Option<DateTime<Utc>>,
    /// Complete, failed or still running.
    pub state: JobState,
}

impl JobObs {
    /// What the gate reads of a Job.
    pub fn of(job: &Job) -> JobObs {
        let conditions = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or(&[]);
        let is_true = |t: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == t && c.status == "True")
        };
        let state = if is_true("Complete").is_some() {
            JobState::Complete
        } else if let Some(c) = is_true("Failed") {
            JobState::Failed {
                reason: c.reason.clone().unwrap_or_default(),
                message: c.message.clone().unwrap_or_default(),
            }
        } else {
            JobState::Running
        };
        JobObs {
            name: job.name_any(),
            rollout: job
                .labels()
                .get(LABEL_ROLLOUT)
                .and_then(|r| r.parse().ok())
                .unwrap_or(0),
            created: job
                .meta()
                .creation_timestamp
                .as_ref()
                .map(crate::api::time::from_k8s),
            state,
        }
    }
}

/// Longest Job name: the Job controller puts it in a label of its pods.
const MAX_JOB_NAME: usize = 63;

/// The Job of `gate` for the step `status` is at: `<plan>-<gate>-<rollout>-<step>-<hash>`,
/// the prefix shortened when the whole would exceed 63 characters. The hash
/// covers every part and the step's start, so names never collide and a
/// retried step gets a new Job.
pub fn job_name(plan: &str, gate: &str, status: &ReleasePlanStatus) -> String {
    let started = status
        .step_started_at
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default();
    let (rollout, step) = (status.rollout_count, status.current_step);
    let hash = revision::hash_value(&serde_json::json!([plan, gate, rollout, step, started]));
    let prefix = format!("{plan}-{gate}-{rollout}-{step}");
    let keep = MAX_JOB_NAME - 1 - hash.len();
    let prefix: String = prefix.chars().take(keep).collect();
    format!("{}-{hash}", prefix.trim_end_matches(['-', '.']))
}

/// The verdict of one Job gate in the step of the persisted `status`:
///
/// - a verdict already `Passed` or `Failed` in `status.gates` is final for the step;
/// - no Job yet: `Pending` (it is created once the step's pods are ready);
/// - the Job runs: `Pending`, or `Failed` once it has run for the gate's timeout;
/// - `Complete`: `Passed`; `Failed`: `Failed`, with the Job's reason
///   (`DeadlineExceeded` reads as a timeout).
pub fn verdict(
    plan: &str,
    gate: &JobGateSpec,
    status: &ReleasePlanStatus,
    jobs: &[JobObs],
    now: DateTime<Utc>,
) -> GateStatus {
    if let Some(prev) = status
        .gates
        .iter()
        .find(|g| g.name == gate.name && matches!(g.verdict, Verdict::Passed | Verdict::Failed))
    {
        return prev.clone();
    }
    let name = job_name(plan, &gate.name, status);
    let timeout = gate.timeout.as_secs();
    let pending = |message: String, at: Option<DateTime<Utc>>| GateStatus {
        name: gate.name.clone(),
        verdict: Verdict::Pending,
        last_evaluated: at,
        message: Some(message),
        ..GateStatus::default()
    };
    let failed = |message: String| GateStatus {
        name: gate.name.clone(),
        verdict: Verdict::Failed,
        failures: 1,
        last_evaluated: Some(now),
        message: Some(message),
        ..GateStatus::default()
    };
    let Some(job) = jobs.iter().find(|j| j.name == name) else {
        return pending(
            format!("Job {name} starts once the step's pods are ready"),
            None,
        );
    };
    match &job.state {
        JobState::Complete => GateStatus {
            name: gate.name.clone(),
            verdict: Verdict::Passed,
            last_evaluated: Some(now),
            message: Some(format!("Job {name} completed")),
            ..GateStatus::default()
        },
        JobState::Failed { reason, .. } if reason == "DeadlineExceeded" => failed(format!(
            "Job {name} did not finish within {timeout}s (DeadlineExceeded)"
        )),
        JobState::Failed { reason, message } => {
            failed(format!("Job {name} failed: {reason}: {message}"))
        }
        // Invalid: no retry can fix it (a field of the template the CRD keeps as written).
        JobState::Refused { code, message } if is_permanent(*code) => failed(format!(
            "the API server refused Job {name} (HTTP {code}): {message}"
        )),
        JobState::Refused { code, message } => pending(
            format!("creating Job {name} failed (HTTP {code}): {message}; retrying"),
            None,
        ),
        JobState::Running => {
            if time_left(job, gate.timeout, now) == Some(Duration::ZERO) {
                failed(format!("Job {name} did not finish within {timeout}s"))
            } else {
                pending(
                    format!("Job {name} is running (timeout {timeout}s)"),
                    job.created,
                )
            }
        }
    }
}

/// A refusal no retry can fix: the Job itself is invalid (400, 422). Quota,
/// RBAC, admission webhooks and outages may clear, so they are retried.
fn is_permanent(code: u16) -> bool {
    matches!(code, 400 | 422)
}

/// Time until a running Job reaches the gate's timeout (`ZERO` once it has);
/// `None` before the API server gave it a creation time.
fn time_left(job: &JobObs, timeout: Duration, now: DateTime<Utc>) -> Option<Duration> {
    let created = job.created?;
    let elapsed = (now - created).to_std().unwrap_or(Duration::ZERO);
    Some(timeout.saturating_sub(elapsed))
}

/// How long until the first running Job of the step times out, for the
/// requeue: the core looks again then even if no Job changes.
pub fn next_timeout(
    plan: &str,
    gates: &[JobGateSpec],
    status: &ReleasePlanStatus,
    jobs: &[JobObs],
    now: DateTime<Utc>,
) -> Option<Duration> {
    gates
        .iter()
        .filter_map(|g| {
            let name = job_name(plan, &g.name, status);
            let job = jobs
                .iter()
                .find(|j| j.name == name && j.state == JobState::Running)?;
            time_left(job, g.timeout, now)
        })
        .min()
}

/// A Job to create: everything [`build`] needs besides the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct JobIntent {
    /// Job name (see [`job_name`]).
    pub name: String,
    /// The gate, as parsed.
    pub gate: JobGateSpec,
    /// `status.rolloutCount`.
    pub rollout: i64,
    /// `status.currentStep`.
    pub step: i32,
    /// Environment variables given to every container, in order.
    pub env: Vec<(&'static str, String)>,
}

/// The Jobs a decision creates and deletes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobIntents {
    /// Jobs to create (an existing one of that name is adopted).
    pub create: Vec<JobIntent>,
    /// Jobs to delete, with their pods.
    pub delete: Vec<String>,
}

/// What the controller does about Job gates after this decision:
///
/// - create the step's Job of every gate without a final verdict, once the
///   step's pods are ready, and only when the decision stays in the step it
///   observed (a step that starts now gets its Jobs on the next reconcile,
///   once its start is persisted: a status write that fails must not leave a
///   Job of a step that never was);
/// - delete every Job of an earlier rollout, and every running Job that is not
///   the current step's (the step moved on, the rollout failed, rolls back or
///   settled). Finished Jobs of the latest rollout are kept for debugging.
///
/// Nothing while the plan is deleted: its Jobs go with it (owner references).
pub fn intents(
    plan: &str,
    gates: &[JobGateSpec],
    before: &ReleasePlanStatus,
    after: &ReleasePlanStatus,
    jobs: &[JobObs],
    step_ready: bool,
    deleting: bool,
) -> JobIntents {
    let mut out = JobIntents::default();
    if deleting {
        return out;
    }
    let same_step = before.phase == Phase::RollingOut
        && after.phase == Phase::RollingOut
        && after.failure.is_none()
        && before.rollout_count == after.rollout_count
        && before.current_step == after.current_step
        && before.step_started_at == after.step_started_at;
    let mut wanted = Vec::new();
    if same_step {
        for g in gates {
            let name = job_name(plan, &g.name, after);
            let decided = after.gates.iter().any(|s| {
                s.name == g.name && matches!(s.verdict, Verdict::Passed | Verdict::Failed)
            });
            // A refused create is tried again (the controller's backoff spaces the tries).
            let exists = jobs
                .iter()
                .any(|j| j.name == name && !matches!(j.state, JobState::Refused { .. }));
            if step_ready && !decided && !exists {
                out.create.push(JobIntent {
                    name: name.clone(),
                    gate: g.clone(),
                    rollout: after.rollout_count,
                    step: after.current_step,
                    env: env(plan, g, after),
                });
            }
            wanted.push(name);
        }
    }
    out.delete = jobs
        .iter()
        .filter(|j| !matches!(j.state, JobState::Refused { .. }))
        .filter(|j| {
            j.rollout < after.rollout_count
                || (j.state == JobState::Running && !wanted.contains(&j.name))
        })
        .map(|j| j.name.clone())
        .collect();
    out
}

/// The variables a Job is told, without the namespace (the controller's).
/// The component is the gate's own, else the first that changes.
fn env(plan: &str, gate: &JobGateSpec, status: &ReleasePlanStatus) -> Vec<(&'static str, String)> {
    let changed = match &gate.component {
        Some(name) => status.components.iter().find(|c| &c.name == name),
        None => status
            .components
            .iter()
            .find(|c| c.is_changing())
            .or_else(|| status.components.first()),
    };
    vec![
        ("RELEASEPLAN_PLAN", plan.to_string()),
        (
            "RELEASEPLAN_COMPONENT",
            changed.map(|c| c.name.clone()).unwrap_or_default(),
        ),
        (
            "RELEASEPLAN_COMPONENT_REVISION",
            changed
                .and_then(|c| c.current_hash.clone())
                .unwrap_or_default(),
        ),
        (
            "RELEASEPLAN_REVISION",
            status.current_revision.clone().unwrap_or_default(),
        ),
        ("RELEASEPLAN_ROLLOUT", status.rollout_count.to_string()),
        ("RELEASEPLAN_STEP", status.current_step.to_string()),
        ("RELEASEPLAN_WEIGHT", status.weight.to_string()),
    ]
}

/// The Job of an intent: the gate's template with the operator's labels
/// (plan, gate, rollout, step), the plan as controlling owner (the garbage
/// collector deletes it with the plan), the variables in every container,
/// `restartPolicy` Never and `backoffLimit` 0 unless the template says
/// otherwise, and `activeDeadlineSeconds` at most the gate's timeout.
pub fn build(plan: &ReleasePlan, intent: &JobIntent) -> Job {
    let template = intent.gate.template.clone();
    let mut meta = template.metadata.unwrap_or_default();
    meta.name = Some(intent.name.clone());
    meta.namespace = plan.namespace();
    meta.owner_references = plan.controller_owner_ref(&()).map(|o| vec![o]);
    let labels = meta.labels.get_or_insert_with(Default::default);
    labels.retain(|k, _| !k.starts_with("releaseplan.io/"));
    labels.insert(LABEL_PLAN.into(), plan.name_any());
    labels.insert(LABEL_GATE.into(), intent.gate.name.clone());
    labels.insert(LABEL_ROLLOUT.into(), intent.rollout.to_string());
    labels.insert(LABEL_STEP.into(), intent.step.to_string());
    let mut spec = template.spec.unwrap_or_default();
    spec.backoff_limit.get_or_insert(0);
    let timeout = i64::try_from(intent.gate.timeout.as_secs()).unwrap_or(i64::MAX);
    spec.active_deadline_seconds = Some(
        spec.active_deadline_seconds
            .map_or(timeout, |d| d.min(timeout)),
    );
    let mut vars: Vec<EnvVar> = intent
        .env
        .iter()
        .map(|(k, v)| EnvVar {
            name: (*k).to_string(),
            value: Some(v.clone()),
            ..EnvVar::default()
        })
        .collect();
    vars.insert(
        1,
        EnvVar {
            name: "RELEASEPLAN_NAMESPACE".into(),
            value: plan.namespace(),
            ..EnvVar::default()
        },
    );
    if let Some(pod) = spec.template.spec.as_mut() {
        pod.restart_policy.get_or_insert_with(|| "Never".into());
        let containers = pod
            .containers
            .iter_mut()
            .chain(pod.init_containers.iter_mut().flatten());
        for c in containers {
            let env = c.env.get_or_insert_with(Vec::new);
            env.retain(|e| !vars.iter().any(|v| v.name == e.name));
            env.extend(vars.iter().cloned());
        }
    }
    Job {
        metadata: meta,
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ComponentStatus, JobCheck};
    use chrono::TimeZone;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    fn gate(timeout: i32) -> JobGateSpec {
        JobGateSpec::parse(&JobGate {
            name: "smoke".into(),
            check: JobCheck {
                template: serde_json::json!({
                "metadata": {"labels": {"team": "qa", "releaseplan.io/plan": "forged"}},
                "spec": {"template": {
                    "metadata": {"annotations": {"kwok.releaseplan.io/job-succeed-after": "1s"}},
                    "spec": {"containers": [{"name": "t", "image": "curl",
                        "env": [{"name": "RELEASEPLAN_STEP", "value": "forged"}, {"name": "URL", "value": "x"}]}]}
                }}
            }),
                timeout_seconds: Some(timeout),
            },
            component: None,
        })
        .unwrap()
    }

    fn status(step: i32) -> ReleasePlanStatus {
        ReleasePlanStatus {
            phase: Phase::RollingOut,
            rollout_count: 2,
            current_step: step,
            weight: 20,
            step_started_at: Some(t(0)),
            current_revision: Some("planrev".into()),
            components: vec![ComponentStatus {
                name: "web".into(),
                current_hash: Some("new".into()),
                stable_hash: Some("old".into()),
                ..ComponentStatus::default()
            }],
            ..ReleasePlanStatus::default()
        }
    }

    fn job(name: &str, rollout: i64, created: i64, state: JobState) -> JobObs {
        JobObs {
            name: name.into(),
            rollout,
            created: Some(t(created)),
            state,
        }
    }

    #[test]
    fn parse_refuses_what_a_job_cannot_run() {
        let bad = |template: serde_json::Value| {
            JobGateSpec::parse(&JobGate {
                name: "g".into(),
                check: JobCheck {
                    template,
                    timeout_seconds: None,
                },
                component: None,
            })
            .unwrap_err()
        };
        assert_eq!(bad(serde_json::json!({"spec": 3})).0, "template");
        let no_containers = serde_json::json!({"spec": {"template": {"spec": {"containers": []}}}});
        assert_eq!(
            bad(no_containers).0,
            "template.spec.template.spec.containers"
        );
        let always = serde_json::json!({"spec": {"template": {"spec": {
            "restartPolicy": "Always", "containers": [{"name": "c", "image": "i"}]}}}});
        let (field, message) = bad(always);
        assert_eq!(field, "template.spec.template.spec.restartPolicy");
        assert!(message.contains("Never or OnFailure"), "{message}");
        assert_eq!(gate(30).timeout, Duration::from_secs(30));
    }

    #[test]
    fn an_unconfined_apparmor_annotation_is_refused_below_privileged() {
        let spec = JobGateSpec::parse(&JobGate {
            name: "g".into(),
            check: JobCheck {
                template: serde_json::json!({"spec": {"template": {
                    "metadata": {"annotations": {
                        "container.apparmor.security.beta.kubernetes.io/c": "unconfined"}},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}),
                timeout_seconds: None,
            },
            component: None,
        })
        .unwrap();
        use super::super::pod_security::Level;
        for level in [Level::Restricted, Level::Baseline] {
            let (field, message) = spec.clone().secured(level).unwrap_err();
            assert_eq!(
                field,
                "template.spec.template.metadata.annotations[\"container.apparmor.security.beta.kubernetes.io/c\"]"
            );
            assert!(message.contains("AppArmor"), "{message}");
        }
        assert!(spec.secured(Level::Privileged).is_ok());
    }

    #[test]
    fn names_are_deterministic_bounded_and_change_with_the_step() {
        let a = job_name("shop", "smoke", &status(1));
        assert_eq!(a, job_name("shop", "smoke", &status(1)));
        assert!(a.starts_with("shop-smoke-2-1-"), "{a}");
        assert_ne!(a, job_name("shop", "smoke", &status(2)));
        let mut retried = status(1);
        retried.step_started_at = Some(t(50));
        assert_ne!(a, job_name("shop", "smoke", &retried));
        let long = job_name(&"p".repeat(63), &"g".repeat(40), &status(1));
        assert!(long.len() <= 63, "{long}");
        let other = job_name(&"p".repeat(63), &"h".repeat(40), &status(1));
        assert_ne!(long, other);
    }

    #[test]
    fn verdicts_follow_the_job() {
        let g = gate(30);
        let s = status(1);
        let name = job_name("shop", "smoke", &s);
        let v = |jobs: &[JobObs], now| verdict("shop", &g, &s, jobs, now);
        let none = v(&[], t(5));
        assert_eq!(none.verdict, Verdict::Pending);
        assert!(none.message.unwrap().contains("starts once"));
        let running = v(&[job(&name, 2, 2, JobState::Running)], t(10));
        assert_eq!(running.verdict, Verdict::Pending);
        // The same while it runs: no status write per reconcile.
        assert_eq!(running, v(&[job(&name, 2, 2, JobState::Running)], t(20)));
        let late = v(&[job(&name, 2, 2, JobState::Running)], t(32));
        assert_eq!(late.verdict, Verdict::Failed);
        assert_eq!(
            late.message.as_deref(),
            Some(format!("Job {name} did not finish within 30s").as_str())
        );
        assert_eq!(
            v(&[job(&name, 2, 2, JobState::Complete)], t(9)).verdict,
            Verdict::Passed
        );
        let failed = v(
            &[job(
                &name,
                2,
                2,
                JobState::Failed {
                    reason: "BackoffLimitExceeded".into(),
                    message: "Job has reached the specified backoff limit".into(),
                },
            )],
            t(9),
        );
        assert_eq!(failed.verdict, Verdict::Failed);
        assert!(failed.message.unwrap().contains("BackoffLimitExceeded"));
        let deadline = JobState::Failed {
            reason: "DeadlineExceeded".into(),
            message: String::new(),
        };
        let timed_out = v(&[job(&name, 2, 2, deadline)], t(9));
        assert!(
            timed_out
                .message
                .unwrap()
                .contains("did not finish within 30s")
        );
        // Another step's Job says nothing about this one.
        let other = job_name("shop", "smoke", &status(0));
        assert_eq!(
            v(&[job(&other, 2, 2, JobState::Complete)], t(9)).verdict,
            Verdict::Pending
        );
    }

    #[test]
    fn a_refused_job_is_retried_unless_it_is_invalid() {
        let g = gate(30);
        let s = status(1);
        let name = job_name("shop", "smoke", &s);
        let refused = |code| JobObs {
            name: name.clone(),
            rollout: 2,
            created: None,
            state: JobState::Refused {
                code,
                message: "nope".into(),
            },
        };
        let quota = verdict("shop", &g, &s, &[refused(403)], t(5));
        assert_eq!(quota.verdict, Verdict::Pending);
        assert!(quota.message.unwrap().contains("retrying"));
        let i = intents(
            "shop",
            std::slice::from_ref(&g),
            &s,
            &s,
            &[refused(403)],
            true,
            false,
        );
        assert_eq!(i.create.len(), 1, "tried again");
        assert!(i.delete.is_empty(), "nothing to delete");
        let invalid = verdict("shop", &g, &s, &[refused(422)], t(5));
        assert_eq!(invalid.verdict, Verdict::Failed);
        assert_eq!(
            invalid.message.as_deref(),
            Some(format!("the API server refused Job {name} (HTTP 422): nope").as_str())
        );
    }

    #[test]
    fn a_final_verdict_is_kept_for_the_step() {
        let g = gate(30);
        let mut s = status(1);
        let passed = verdict(
            "shop",
            &g,
            &s,
            &[job(
                &job_name("shop", "smoke", &s),
                2,
                0,
                JobState::Complete,
            )],
            t(3),
        );
        s.gates = vec![passed.clone()];
        // The Job is gone (deleted by someone): the pass stands.
        assert_eq!(verdict("shop", &g, &s, &[], t(100)), passed);
    }

    #[test]
    fn next_timeout_of_the_running_job() {
        let g = gate(30);
        let s = status(1);
        let name = job_name("shop", "smoke", &s);
        let jobs = [job(&name, 2, 2, JobState::Running)];
        assert_eq!(
            next_timeout("shop", std::slice::from_ref(&g), &s, &jobs, t(12)),
            Some(Duration::from_secs(20))
        );
        let done = [job(&name, 2, 2, JobState::Complete)];
        assert_eq!(next_timeout("shop", &[g], &s, &done, t(12)), None);
    }

    #[test]
    fn intents_create_once_and_clean_up() {
        let g = gate(30);
        let s = status(1);
        let name = job_name("shop", "smoke", &s);
        let gates = [g];
        // Not ready: nothing yet.
        let i = intents("shop", &gates, &s, &s, &[], false, false);
        assert!(i.create.is_empty() && i.delete.is_empty());
        // Ready: create the step's Job.
        let i = intents("shop", &gates, &s, &s, &[], true, false);
        assert_eq!(i.create.len(), 1);
        assert_eq!(i.create[0].name, name);
        // It exists: nothing more, whatever its state.
        let running = job(&name, 2, 0, JobState::Running);
        let i = intents(
            "shop",
            &gates,
            &s,
            &s,
            std::slice::from_ref(&running),
            true,
            false,
        );
        assert_eq!(i, JobIntents::default());
        // The step moves on in this decision: no Job for the new step yet, and
        // the running one of the old step goes.
        let next = status(2);
        let i = intents(
            "shop",
            &gates,
            &s,
            &next,
            std::slice::from_ref(&running),
            true,
            false,
        );
        assert!(i.create.is_empty());
        assert_eq!(i.delete, vec![name.clone()]);
        // Finished Jobs of this rollout stay; those of earlier rollouts go.
        let old = job("shop-smoke-1-0-x", 1, 0, JobState::Complete);
        let kept = job(
            "shop-smoke-2-0-y",
            2,
            0,
            JobState::Failed {
                reason: "BackoffLimitExceeded".into(),
                message: String::new(),
            },
        );
        let i = intents(
            "shop",
            &gates,
            &s,
            &s,
            &[old, kept, running.clone()],
            true,
            false,
        );
        assert_eq!(i.delete, vec!["shop-smoke-1-0-x".to_string()]);
        // A rollback: the running Job goes.
        let mut failing = s.clone();
        failing.phase = Phase::RollbackInProgress;
        let i = intents(
            "shop",
            &gates,
            &s,
            &failing,
            std::slice::from_ref(&running),
            true,
            false,
        );
        assert_eq!(i.delete, vec![name]);
        // Deleting: the garbage collector's job.
        let i = intents("shop", &gates, &s, &failing, &[running], true, true);
        assert_eq!(i, JobIntents::default());
    }

    #[test]
    fn a_job_gate_with_a_component_is_told_that_component() {
        let mut s = status(1);
        s.components.insert(
            0,
            ComponentStatus {
                name: "worker".into(),
                current_hash: Some("w-new".into()),
                stable_hash: Some("w-new".into()),
                ..ComponentStatus::default()
            },
        );
        let told = |component: Option<&str>| {
            let mut g = gate(30);
            g.component = component.map(Into::into);
            let i = intents("shop", &[g], &s, &s, &[], true, false);
            let var = |k: &str| {
                i.create[0]
                    .env
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.clone())
            };
            (
                var("RELEASEPLAN_COMPONENT").unwrap_or_default(),
                var("RELEASEPLAN_COMPONENT_REVISION").unwrap_or_default(),
            )
        };
        // Default: the first component that changes (web, after the unchanged
        // worker); named: the one named,
        // changing or not.
        assert_eq!(told(None), ("web".into(), "new".into()));
        assert_eq!(told(Some("worker")), ("worker".into(), "w-new".into()));
        assert_eq!(told(Some("web")), ("web".into(), "new".into()));
    }

    #[test]
    fn build_labels_owns_and_tells_the_job() {
        let mut plan = ReleasePlan::new("shop", Default::default());
        plan.metadata.namespace = Some("ns".into());
        plan.metadata.uid = Some("u-1".into());
        let s = status(1);
        let i = intents("shop", &[gate(30)], &s, &s, &[], true, false);
        let job = build(&plan, &i.create[0]);
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_PLAN], "shop");
        assert_eq!(labels[LABEL_GATE], "smoke");
        assert_eq!(labels[LABEL_ROLLOUT], "2");
        assert_eq!(labels[LABEL_STEP], "1");
        assert_eq!(labels["team"], "qa");
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.uid.as_str(), owner.controller), ("u-1", Some(true)));
        let spec = job.spec.unwrap();
        assert_eq!(spec.backoff_limit, Some(0));
        assert_eq!(spec.active_deadline_seconds, Some(30));
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let env: Vec<(String, String)> = pod.containers[0]
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("URL"), Some("x"));
        assert_eq!(get("RELEASEPLAN_PLAN"), Some("shop"));
        assert_eq!(get("RELEASEPLAN_NAMESPACE"), Some("ns"));
        assert_eq!(get("RELEASEPLAN_COMPONENT"), Some("web"));
        assert_eq!(get("RELEASEPLAN_COMPONENT_REVISION"), Some("new"));
        assert_eq!(get("RELEASEPLAN_REVISION"), Some("planrev"));
        assert_eq!(get("RELEASEPLAN_ROLLOUT"), Some("2"));
        assert_eq!(get("RELEASEPLAN_STEP"), Some("1"));
        assert_eq!(get("RELEASEPLAN_WEIGHT"), Some("20"));
        assert_eq!(
            env.iter().filter(|(n, _)| n == "RELEASEPLAN_STEP").count(),
            1
        );
    }

    #[test]
    fn observes_job_conditions() {
        let cond = |t: &str, reason: &str| JobCondition {
            type_: t.into(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some("m".into()),
            ..JobCondition::default()
        };
        let mut j = Job::default();
        j.metadata.name = Some("j".into());
        j.metadata.labels = Some([(LABEL_ROLLOUT.to_string(), "4".to_string())].into());
        j.metadata.creation_timestamp = Some(crate::api::time::to_k8s(t(0)));
        assert_eq!(JobObs::of(&j).state, JobState::Running);
        assert_eq!(JobObs::of(&j).rollout, 4);
        j.status = Some(JobStatus {
            conditions: Some(vec![cond("SuccessCriteriaMet", "CompletionsReached")]),
            ..JobStatus::default()
        });
        assert_eq!(JobObs::of(&j).state, JobState::Running);
        j.status = Some(JobStatus {
            conditions: Some(vec![cond("Complete", "CompletionsReached")]),
            ..JobStatus::default()
        });
        assert_eq!(JobObs::of(&j).state, JobState::Complete);
        j.status = Some(JobStatus {
            conditions: Some(vec![cond("Failed", "DeadlineExceeded")]),
            ..JobStatus::default()
        });
        assert_eq!(
            JobObs::of(&j).state,
            JobState::Failed {
                reason: "DeadlineExceeded".into(),
                message: "m".into()
            }
        );
    }
}
