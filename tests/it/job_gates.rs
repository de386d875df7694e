//! Job gates against the real control plane: the Job controller of the test
//! cluster's kube-controller-manager runs the Jobs, kwok finishes their pods
//! after the delay their annotation asks for (e2e/kwok/job-finish.yaml), and
//! the garbage collector removes them with their plan.

use crate::support;

use k8s_openapi::api::batch::v1::Job;
use kube::api::PostParams;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use releaseplan::api::template::{ClusterGateTemplate, GateTemplate};
use releaseplan::api::{LABEL_GATE, LABEL_PLAN, LABEL_ROLLOUT, LABEL_STEP, Phase, ReleasePlan};
use serde_json::{Value, json};
use support::fixtures::{plan, web};
use support::plans::{self, create, plan_events, wait_phase};
use support::{Harness, JOB_WAIT, wait_until};

/// A Job gate named `smoke` whose pod kwok finishes with `outcome`
/// (`succeed` or `fail`) after `after`.
fn smoke(outcome: &str, after: &str, timeout: i32) -> Value {
    json!({
        "name": "smoke",
        "timeoutSeconds": timeout,
        "template": {
            "metadata": {"labels": {"team": "qa"}},
            "spec": {"template": {
                "metadata": {"annotations": {format!("kwok.releaseplan.io/job-{outcome}-after"): after}},
                "spec": {"containers": [{"name": "smoke", "image": "curlimages/curl:8",
                    "args": ["http://web.shop/healthz"]}]}
            }}
        }
    })
}

/// A plan whose one gate is the Job gate `gate`, written in `health.gates`
/// (the deprecated `health.jobs` shape runs in tests/upgrade.rs).
fn spec(image: &str, mut gate: Value) -> Value {
    let name = gate.as_object_mut().unwrap().remove("name").unwrap();
    json!({
        "components": [web(image, 2)],
        "strategy": {"steps": [{"setWeight": 50}]},
        "health": {"gates": [{"name": name, "job": gate}]}
    })
}

/// The plan's Jobs: (rollout, step, name, finished as Complete/Failed/"").
async fn jobs(client: &Client, ns: &str, plan: &str) -> Vec<(String, String, String, String)> {
    let list = Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{LABEL_PLAN}={plan},{LABEL_GATE}=smoke")))
        .await
        .expect("cannot list Jobs");
    let mut out: Vec<_> = list
        .items
        .iter()
        .map(|j| {
            let l = j.labels();
            let state = j
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| {
                    c.iter().find(|c| {
                        (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True"
                    })
                })
                .map(|c| c.type_.clone())
                .unwrap_or_default();
            (
                l.get(LABEL_ROLLOUT).cloned().unwrap_or_default(),
                l.get(LABEL_STEP).cloned().unwrap_or_default(),
                j.name_any(),
                state,
            )
        })
        .collect();
    out.sort();
    out
}

/// Waits until the plan settles (Stable or RolledBack) at its generation.
async fn settled(client: &Client, ns: &str, name: &str) -> ReleasePlan {
    wait_until(JOB_WAIT, "the rollout to settle", || async {
        let p = plans::get(client, ns, name).await?;
        let s = p.status.as_ref()?;
        (matches!(s.phase, Phase::Stable | Phase::RolledBack)
            && s.observed_generation == p.metadata.generation)
            .then_some(p.clone())
    })
    .await
}

#[tokio::test]
async fn a_passing_job_gate_runs_one_job_per_step_and_goes_with_the_plan() {
    let (Harness { client, ns }, _op) = Harness::with_operator("job-pass").await;
    create(
        &client,
        &ns,
        &plan("shop", spec("shop:1", smoke("succeed", "2s", 120))),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::Stable, JOB_WAIT).await;
    // The first release goes to 100% at once: one Job, for its final step.
    let first = jobs(&client, &ns, "shop").await;
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(
        (
            first[0].0.as_str(),
            first[0].1.as_str(),
            first[0].3.as_str()
        ),
        ("1", "1", "Complete")
    );

    plans::set_components(&client, &ns, "shop", json!([web("shop:2", 2)])).await;
    let p = settled(&client, &ns, "shop").await;
    let s = p.status.clone().unwrap();
    assert_eq!(s.phase, Phase::Stable, "{:?}", s.message);
    assert_eq!(
        s.history.last().unwrap().outcome,
        releaseplan::api::Outcome::Promoted
    );
    // One Job per step of the second rollout, each complete; the first
    // rollout's Job is deleted.
    let second = jobs(&client, &ns, "shop").await;
    let steps: Vec<(&str, &str, &str)> = second
        .iter()
        .map(|(r, s, _, st)| (r.as_str(), s.as_str(), st.as_str()))
        .collect();
    assert_eq!(
        steps,
        [("2", "0", "Complete"), ("2", "1", "Complete")],
        "{second:?}"
    );

    // The Job is the template's, told about the rollout, and owned by the plan.
    let job = Api::<Job>::namespaced(client.clone(), &ns)
        .get(&second[0].2)
        .await
        .unwrap();
    assert_eq!(job.labels().get("team").map(String::as_str), Some("qa"));
    let owner = &job.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("ReleasePlan", "shop")
    );
    assert_eq!(owner.uid, p.uid().unwrap());
    let spec = job.spec.unwrap();
    assert_eq!(spec.backoff_limit, Some(0));
    assert_eq!(spec.active_deadline_seconds, Some(120));
    let pod = spec.template.spec.unwrap();
    let env: Vec<(String, String)> = pod.containers[0]
        .env
        .clone()
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect();
    let var = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(var("RELEASEPLAN_PLAN").as_deref(), Some("shop"));
    assert_eq!(var("RELEASEPLAN_NAMESPACE"), Some(ns.clone()));
    assert_eq!(var("RELEASEPLAN_COMPONENT").as_deref(), Some("web"));
    assert_eq!(var("RELEASEPLAN_REVISION"), s.current_revision.clone());
    assert_eq!(
        var("RELEASEPLAN_COMPONENT_REVISION"),
        s.components[0].current_hash.clone()
    );
    assert_eq!(var("RELEASEPLAN_ROLLOUT").as_deref(), Some("2"));
    assert_eq!(var("RELEASEPLAN_STEP").as_deref(), Some("0"));
    assert_eq!(var("RELEASEPLAN_WEIGHT").as_deref(), Some("50"));
    // Measured, not asserted (the machine is shared): from the last Job's
    // completion to the promotion the operator wrote.
    let last = Api::<Job>::namespaced(client.clone(), &ns)
        .get(&second[1].2)
        .await
        .unwrap();
    let completed = last
        .status
        .as_ref()
        .and_then(|s| s.completion_time.as_ref());
    if let (Some(c), Some(p)) = (completed, s.history.last().and_then(|h| h.finished_at)) {
        let c = releaseplan::api::time::from_k8s(c);
        eprintln!(
            "job gate: Job complete -> plan promoted in {} ms (completionTime has 1 s resolution)",
            (p - c).num_milliseconds()
        );
    }
    let events = plan_events(&client, &ns, "shop").await;
    assert!(
        events
            .iter()
            .any(|(reason, _, note, _)| reason == "GatePassed" && note.contains("gate smoke: Job")),
        "{events:?}"
    );

    // Deleting the plan deletes its Jobs (the garbage collector, by owner).
    Api::<ReleasePlan>::namespaced(client.clone(), &ns)
        .delete("shop", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        JOB_WAIT,
        "the plan's Jobs to be deleted with it",
        || async { jobs(&client, &ns, "shop").await.is_empty().then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn a_failing_job_rolls_back() {
    let (Harness { client, ns }, _op) = Harness::with_operator("job-fail").await;
    create(
        &client,
        &ns,
        &plan("shop", spec("shop:1", smoke("succeed", "1s", 120))),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::Stable, JOB_WAIT).await;
    plans::patch_spec(
        &client,
        &ns,
        "shop",
        spec("shop:2", smoke("fail", "2s", 120)),
    )
    .await;
    let p = settled(&client, &ns, "shop").await;
    let s = p.status.unwrap();
    assert_eq!(s.phase, Phase::RolledBack, "{:?}", s.message);
    let f = s.failure.unwrap();
    assert_eq!(
        (f.gate.as_str(), f.reason.as_str()),
        ("smoke", "GateFailed")
    );
    assert!(
        f.message.contains("failed: BackoffLimitExceeded"),
        "{}",
        f.message
    );
    // One Job for the failed step, failed; nothing started after it.
    let all = jobs(&client, &ns, "shop").await;
    let second: Vec<_> = all.iter().filter(|j| j.0 == "2").collect();
    assert_eq!(second.len(), 1, "{all:?}");
    assert_eq!(
        (second[0].1.as_str(), second[0].3.as_str()),
        ("0", "Failed")
    );
    let events = plan_events(&client, &ns, "shop").await;
    assert!(
        events
            .iter()
            .any(|(r, t, _, _)| r == "GateFailed" && t == "Warning"),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_job_past_its_timeout_rolls_back_and_is_deleted() {
    let (Harness { client, ns }, _op) = Harness::with_operator("job-timeout").await;
    create(
        &client,
        &ns,
        &plan("shop", spec("shop:1", smoke("succeed", "1s", 120))),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::Stable, JOB_WAIT).await;
    // The Job would run for an hour; the gate allows 5 seconds.
    plans::patch_spec(
        &client,
        &ns,
        "shop",
        spec("shop:2", smoke("succeed", "1h", 5)),
    )
    .await;
    let p = settled(&client, &ns, "shop").await;
    let s = p.status.unwrap();
    assert_eq!(s.phase, Phase::RolledBack, "{:?}", s.message);
    let f = s.failure.unwrap();
    assert_eq!(f.gate, "smoke");
    assert!(
        f.message.contains("did not finish within 5s"),
        "{}",
        f.message
    );
    // The timed-out Job does not run on: deleted by the operator, or failed
    // by the Job controller's activeDeadlineSeconds (the same timeout).
    wait_until(JOB_WAIT, "the timed-out Job to stop", || async {
        let all = jobs(&client, &ns, "shop").await;
        all.iter()
            .filter(|j| j.0 == "2")
            .all(|j| j.3 == "Failed")
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_operator_restarted_while_the_job_runs_starts_no_second_job() {
    let h = Harness::new("job-restart").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let mut op = h.operator().start().await;
    create(
        &client,
        &ns,
        &plan("shop", spec("shop:1", smoke("succeed", "1s", 120))),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::Stable, JOB_WAIT).await;
    plans::patch_spec(
        &client,
        &ns,
        "shop",
        spec("shop:2", smoke("succeed", "10s", 120)),
    )
    .await;
    // The first step's Job runs...
    let running = wait_until(JOB_WAIT, "the first step's Job to run", || async {
        let all = jobs(&client, &ns, "shop").await;
        all.into_iter()
            .find(|j| j.0 == "2" && j.1 == "0" && j.3.is_empty())
    })
    .await;
    // ...when the operator dies, and another one takes over.
    op.kill();
    let _op = h.operator().start().await;
    let p = settled(&client, &ns, "shop").await;
    assert_eq!(p.status.as_ref().unwrap().phase, Phase::Stable);
    let all = jobs(&client, &ns, "shop").await;
    let step0: Vec<_> = all.iter().filter(|j| j.0 == "2" && j.1 == "0").collect();
    assert_eq!(step0.len(), 1, "exactly one Job for the step: {all:?}");
    assert_eq!(step0[0].2, running.2, "the same Job, adopted");
    assert_eq!(step0[0].3, "Complete");
}

#[tokio::test]
async fn a_job_the_api_server_refuses_rolls_back_with_its_answer() {
    let (Harness { client, ns }, _op) = Harness::with_operator("job-refused").await;
    create(
        &client,
        &ns,
        &plan("shop", spec("shop:1", smoke("succeed", "1s", 120))),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::Stable, JOB_WAIT).await;
    // The CRD keeps the JobSpec as written; Job validation refuses a CPU
    // request above its limit.
    let mut gate = smoke("succeed", "1s", 120);
    gate["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}});
    plans::patch_spec(&client, &ns, "shop", spec("shop:2", gate)).await;
    let p = settled(&client, &ns, "shop").await;
    let s = p.status.unwrap();
    assert_eq!(s.phase, Phase::RolledBack, "{:?}", s.message);
    let f = s.failure.unwrap();
    assert_eq!(f.gate, "smoke");
    assert!(
        f.message
            .contains("the API server refused Job shop-smoke-2-0-")
            && f.message.contains("(HTTP 422)"),
        "{}",
        f.message
    );
    let all = jobs(&client, &ns, "shop").await;
    assert!(
        all.iter().all(|j| j.0 != "2"),
        "no Job was created: {all:?}"
    );
}

/// A gate template (`kind` GateTemplate or ClusterGateTemplate) holding a Job
/// gate whose pod kwok finishes with `outcome` after 2s; the parameters
/// `suite` and `tag` go into the container's image, args and env.
fn job_template(kind: &str, name: &str, outcome: &str) -> Value {
    json!({
        "apiVersion": "releaseplan.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {
            "parameters": [{"name": "suite"}, {"name": "tag", "default": "8", "inImageOrCommand": true}],
            "job": {
                "name": "ignored",
                "timeoutSeconds": 120,
                "template": {"spec": {"template": {
                    "metadata": {"annotations": {format!("kwok.releaseplan.io/job-{outcome}-after"): "2s"}},
                    "spec": {"containers": [{"name": "smoke", "image": "curlimages/curl:{{args.tag}}",
                        "args": ["http://web.shop/{{args.suite}}"],
                        "env": [{"name": "SUITE", "value": "{{ args.suite }}"}]}]}
                }}}
            }
        }
    })
}

/// Two components; the gate `smoke` is the template reference `reference`.
fn template_spec(image: &str, reference: Value) -> Value {
    json!({
        "components": [web(image, 1),
            {"name": "worker", "replicas": 1, "template": {"spec": {"containers": [{"name": "w", "image": image}]}}}],
        "strategy": {"steps": [{"setWeight": 50}]},
        "health": {"templates": [reference]}
    })
}

/// The env of the first container of a Job, by name.
fn job_env(job: &Job) -> Vec<(String, String)> {
    job.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

/// A gate made from a GateTemplate that holds a Job runs that Job (its
/// arguments in the container, told the component the reference names) and
/// its success promotes each rollout.
#[tokio::test]
async fn a_job_template_gate_runs_its_job_for_the_named_component() {
    let (Harness { client, ns }, _op) = Harness::with_operator("job-tmpl-pass").await;
    Api::<GateTemplate>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(job_template("GateTemplate", "smoke-test", "succeed")).unwrap(),
        )
        .await
        .unwrap();
    let reference = json!({"name": "smoke", "templateRef": {"name": "smoke-test"},
        "args": {"suite": "checkout"}, "component": "worker"});
    create(
        &client,
        &ns,
        &plan("shop", template_spec("shop:1", reference.clone())),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::Stable, JOB_WAIT).await;
    patch_template_spec(&client, &ns, "shop:2", reference).await;
    let p = settled(&client, &ns, "shop").await;
    let s = p.status.clone().unwrap();
    assert_eq!(s.phase, Phase::Stable, "{:?}", s.message);
    assert_eq!(
        s.history.last().unwrap().outcome,
        releaseplan::api::Outcome::Promoted
    );
    assert!(s.resolved_gates.is_empty(), "nothing recorded once settled");
    let second: Vec<_> = jobs(&client, &ns, "shop")
        .await
        .into_iter()
        .filter(|j| j.0 == "2")
        .collect();
    assert_eq!(
        second
            .iter()
            .map(|j| (j.1.as_str(), j.3.as_str()))
            .collect::<Vec<_>>(),
        [("0", "Complete"), ("1", "Complete")],
        "{second:?}"
    );
    let job = Api::<Job>::namespaced(client.clone(), &ns)
        .get(&second[0].2)
        .await
        .unwrap();
    let c = &job
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(c.image.as_deref(), Some("curlimages/curl:8"));
    assert_eq!(
        c.args.as_deref().unwrap(),
        ["http://web.shop/checkout".to_string()]
    );
    let env = job_env(&job);
    let var = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(var("SUITE").as_deref(), Some("checkout"));
    assert_eq!(var("RELEASEPLAN_COMPONENT").as_deref(), Some("worker"));
    let worker = s.components.iter().find(|c| c.name == "worker").unwrap();
    assert_eq!(var("RELEASEPLAN_COMPONENT_REVISION"), worker.current_hash);
    let owner = &job.owner_references()[0];
    assert_eq!(owner.name, "shop");
}

async fn patch_template_spec(client: &Client, ns: &str, image: &str, reference: Value) {
    plans::patch_spec(client, ns, "shop", template_spec(image, reference)).await;
}

/// A gate made from a ClusterGateTemplate whose Job fails rolls the
/// rollout back, the failure naming the gate and the Job's reason.
#[tokio::test]
async fn a_failing_job_template_gate_rolls_back() {
    let (Harness { client, ns }, _op) = Harness::with_operator("job-tmpl-fail").await;
    Api::<GateTemplate>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(job_template("GateTemplate", "smoke-test", "succeed")).unwrap(),
        )
        .await
        .unwrap();
    let cluster_name = format!("smoke-fail-{ns}");
    let cluster: Api<ClusterGateTemplate> = Api::all(client.clone());
    cluster
        .create(
            &PostParams::default(),
            &serde_json::from_value(job_template("ClusterGateTemplate", &cluster_name, "fail"))
                .unwrap(),
        )
        .await
        .unwrap();
    let passing = json!({"name": "smoke", "templateRef": {"name": "smoke-test"},
        "args": {"suite": "checkout"}});
    create(
        &client,
        &ns,
        &plan("shop", template_spec("shop:1", passing)),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::Stable, JOB_WAIT).await;
    let failing = json!({"name": "smoke",
        "templateRef": {"kind": "ClusterGateTemplate", "name": cluster_name},
        "args": {"suite": "checkout", "tag": "9"}});
    patch_template_spec(&client, &ns, "shop:2", failing).await;
    let p = settled(&client, &ns, "shop").await;
    let s = p.status.unwrap();
    assert_eq!(s.phase, Phase::RolledBack, "{:?}", s.message);
    let f = s.failure.unwrap();
    assert_eq!(
        (f.gate.as_str(), f.reason.as_str()),
        ("smoke", "GateFailed")
    );
    assert!(
        f.message.contains("failed: BackoffLimitExceeded"),
        "{}",
        f.message
    );
    let all = jobs(&client, &ns, "shop").await;
    let second: Vec<_> = all.iter().filter(|j| j.0 == "2").collect();
    assert_eq!(second.len(), 1, "{all:?}");
    assert_eq!(
        (second[0].1.as_str(), second[0].3.as_str()),
        ("0", "Failed")
    );
    let job = Api::<Job>::namespaced(client.clone(), &ns)
        .get(&second[0].2)
        .await
        .unwrap();
    let c = &job
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(
        c.image.as_deref(),
        Some("curlimages/curl:9"),
        "the cluster template's Job"
    );
    cluster
        .delete(&cluster_name, &DeleteParams::default())
        .await
        .unwrap();
}

/// A tenant cannot get a privileged or host-network pod through the
/// operator: a plan's Job gate past the baseline Pod Security Standard (and
/// so past the restricted one, the default) is an
/// invalid spec naming the field, a namespaced GateTemplate's is an invalid
/// template, and neither ever becomes a Job; a ClusterGateTemplate, which a
/// cluster administrator writes, still runs its Job as written.
#[tokio::test]
async fn a_tenants_job_gate_pod_meets_the_baseline_pod_security_standard() {
    let (Harness { client, ns }, _op) = Harness::with_operator("job-pss").await;
    let mut gate = smoke("succeed", "1s", 120);
    gate["template"]["spec"]["template"]["spec"]["containers"][0]["securityContext"] =
        json!({"privileged": true});
    create(&client, &ns, &plan("shop", spec("shop:1", gate))).await;
    let p = wait_until(JOB_WAIT, "the plan to be an invalid spec", || async {
        let p = plans::get(&client, &ns, "shop").await?;
        let (status, reason, message) = plans::condition(&p, "Stalled")?;
        (status == "True" && reason == "InvalidSpec").then_some(message)
    })
    .await;
    assert!(
        p.contains("spec.health.gates[0].job.template.spec.template.spec.containers[0].securityContext.privileged: a privileged container is not allowed in a Job gate's pod"),
        "{p}"
    );

    // The same through a namespaced GateTemplate, with the host's network.
    let mut tenant = job_template("GateTemplate", "tenant-smoke", "succeed");
    tenant["spec"]["job"]["template"]["spec"]["template"]["spec"]["hostNetwork"] = json!(true);
    let mut admin = job_template(
        "ClusterGateTemplate",
        &format!("{ns}-admin-smoke"),
        "succeed",
    );
    admin["spec"]["job"]["template"]["spec"]["template"]["spec"]["hostNetwork"] = json!(true);
    let tenant: GateTemplate = serde_json::from_value(tenant).unwrap();
    let admin: ClusterGateTemplate = serde_json::from_value(admin).unwrap();
    Api::<GateTemplate>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &tenant)
        .await
        .unwrap();
    Api::<ClusterGateTemplate>::all(client.clone())
        .create(&PostParams::default(), &admin)
        .await
        .unwrap();
    let reference = |kind: &str, name: &str| {
        json!({"name": "smoke", "templateRef": {"kind": kind, "name": name},
            "args": {"suite": "smoke"}})
    };
    let admin_ref = reference("ClusterGateTemplate", &format!("{ns}-admin-smoke"));
    create(
        &client,
        &ns,
        &plan("cart", template_spec("cart:1", admin_ref.clone())),
    )
    .await;
    wait_phase(&client, &ns, "cart", Phase::Stable, JOB_WAIT).await;
    plans::patch_spec(
        &client,
        &ns,
        "cart",
        template_spec("cart:2", reference("GateTemplate", "tenant-smoke")),
    )
    .await;
    let message = wait_until(JOB_WAIT, "the tenant's template to be refused", || async {
        let p = plans::get(&client, &ns, "cart").await?;
        let (status, reason, message) = plans::condition(&p, "Stalled")?;
        (status == "True" && reason == "GateTemplateInvalid").then_some(message)
    })
    .await;
    assert!(
        message.contains("job.template.spec.template.spec.hostNetwork: the node's network namespace is not allowed in a Job gate's pod"),
        "{message}"
    );
    let cart_jobs = jobs(&client, &ns, "cart").await;
    assert!(
        jobs(&client, &ns, "shop").await.is_empty() && cart_jobs.iter().all(|j| j.0 != "2"),
        "no Job was created for the tenant's gates: {cart_jobs:?}"
    );

    // The administrator's template runs its Job.
    plans::patch_spec(&client, &ns, "cart", template_spec("cart:3", admin_ref)).await;
    let p = settled(&client, &ns, "cart").await;
    assert_eq!(p.status.unwrap().phase, Phase::Stable);
    assert!(
        jobs(&client, &ns, "cart").await.iter().any(|j| j.0 == "3"),
        "the admin's Job ran: {:?}",
        jobs(&client, &ns, "cart").await
    );
    Api::<ClusterGateTemplate>::all(client.clone())
        .delete(&format!("{ns}-admin-smoke"), &DeleteParams::default())
        .await
        .unwrap();
}

/// The pod spec of a Job.
fn pod_of(job: &Job) -> &k8s_openapi::api::core::v1::PodSpec {
    job.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

/// A passing Job gate whose container asks for privilege escalation (the
/// baseline level allows it, the restricted one does not).
fn escalating() -> Value {
    let mut gate = smoke("succeed", "1s", 120);
    gate["template"]["spec"]["template"]["spec"]["containers"][0]["securityContext"] =
        json!({"allowPrivilegeEscalation": true});
    gate
}

/// `allowPrivilegeEscalation` of the first container of the plan's Job, as
/// the Job was made.
async fn escalation_asked(client: &Client, ns: &str, plan: &str) -> Option<bool> {
    let list = Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{LABEL_PLAN}={plan}")))
        .await
        .unwrap();
    pod_of(&list.items[0]).containers[0]
        .security_context
        .as_ref()
        .and_then(|c| c.allow_privilege_escalation)
}

/// Waits until the plan is Stalled with reason InvalidSpec: its message.
async fn refused(client: &Client, ns: &str, name: &str) -> String {
    wait_until(
        JOB_WAIT,
        &format!("plan {name}'s gate to be refused"),
        || async {
            let p = plans::get(client, ns, name).await?;
            let (status, reason, message) = plans::condition(&p, "Stalled")?;
            (status == "True" && reason == "InvalidSpec").then_some(message)
        },
    )
    .await
}

/// A tenant's Job gate runs at the restricted Pod Security Standard by
/// default: one that leaves the fields unset runs with the restricted values
/// filled in; one that asks for privilege escalation is an invalid spec
/// naming the field (condition and Warning), and no Job is made; an operator
/// started with `--gate-job-pod-security=baseline` runs it.
#[tokio::test]
async fn a_tenants_job_gate_runs_restricted_unless_the_operator_allows_baseline() {
    let h = Harness::new("job-restricted").await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let mut op = h.operator().start().await;
    create(
        &client,
        &ns,
        &plan("shop", spec("shop:1", smoke("succeed", "1s", 120))),
    )
    .await;
    create(&client, &ns, &plan("cart", spec("cart:1", escalating()))).await;
    let field = "spec.health.gates[0].job.template.spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation";
    let message = refused(&client, &ns, "cart").await;
    assert!(
        message.contains(&format!("{field}: privilege escalation is not allowed in a Job gate's pod: plans' and GateTemplates' Job gates run at the restricted Pod Security Standard")),
        "{message}"
    );
    let warned =
        plan_events(&client, &ns, "cart")
            .await
            .into_iter()
            .any(|(reason, type_, note, _)| {
                reason == "InvalidSpec" && type_ == "Warning" && note.contains(field)
            });
    assert!(warned, "{:?}", plan_events(&client, &ns, "cart").await);

    // The plain gate ran, its pod given the restricted values.
    wait_phase(&client, &ns, "shop", Phase::Stable, JOB_WAIT).await;
    let list = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{LABEL_PLAN}=shop")))
        .await
        .unwrap();
    let pod = pod_of(&list.items[0]);
    let sc = pod.security_context.as_ref().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
    let c = pod.containers[0].security_context.as_ref().unwrap();
    assert_eq!(c.allow_privilege_escalation, Some(false));
    assert_eq!(
        c.capabilities.as_ref().unwrap().drop,
        Some(vec!["ALL".to_string()])
    );
    assert!(
        jobs(&client, &ns, "cart").await.is_empty(),
        "no Job for the refused gate"
    );

    // The administrator allows the baseline level: the gate runs as written.
    op.terminate().await;
    let _op = h
        .operator()
        .args(["--gate-job-pod-security=baseline"])
        .start()
        .await;
    let p = settled(&client, &ns, "cart").await;
    assert_eq!(p.status.unwrap().phase, Phase::Stable);
    assert_eq!(escalation_asked(&client, &ns, "cart").await, Some(true));
}

/// A GatePolicy allows more than the operator's level for the namespaces it
/// selects, and only for them: a policy for another namespace changes
/// nothing, one selecting the plan's namespace with `jobs.podSecurity:
/// baseline` lets the refused gate run as written (the policy's creation
/// wakes the plan).
#[tokio::test]
async fn a_gate_policy_allows_baseline_job_gates_in_the_namespaces_it_selects() {
    use releaseplan::api::policy::GatePolicy;
    let (Harness { client, ns }, _op) = Harness::with_operator("job-policy").await;
    let policies: Api<GatePolicy> = Api::all(client.clone());
    let policy = |name: &str, namespace: &str, level: &str| -> GatePolicy {
        serde_json::from_value(json!({
            "apiVersion": "releaseplan.io/v1alpha1", "kind": "GatePolicy",
            "metadata": {"name": name},
            "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                     "jobs": {"podSecurity": level}}
        }))
        .unwrap()
    };
    let elsewhere = format!("{ns}-elsewhere");
    policies
        .create(
            &PostParams::default(),
            &policy(&elsewhere, "no-such-namespace", "privileged"),
        )
        .await
        .unwrap();
    create(&client, &ns, &plan("cart", spec("cart:1", escalating()))).await;
    let message = refused(&client, &ns, "cart").await;
    assert!(
        message.contains("restricted Pod Security Standard")
            && message.contains("GatePolicy spec.jobs.podSecurity"),
        "{message}"
    );
    assert!(jobs(&client, &ns, "cart").await.is_empty());

    policies
        .create(&PostParams::default(), &policy(&ns, &ns, "baseline"))
        .await
        .unwrap();
    let p = settled(&client, &ns, "cart").await;
    for name in [ns.as_str(), elsewhere.as_str()] {
        let _ = policies.delete(name, &DeleteParams::default()).await;
    }
    assert_eq!(p.status.unwrap().phase, Phase::Stable);
    assert_eq!(escalation_asked(&client, &ns, "cart").await, Some(true));
}

/// Where a Job gate runs and as whom: always in the plan's namespace (a
/// template naming another is refused by the API server), as a service
/// account of that namespace; a ClusterGateTemplate's Job runs as the
/// service account it names only in the namespaces its annotation lists by
/// name (elsewhere GateTemplateInvalid names the field, and no Job is made).
#[tokio::test]
async fn a_job_gate_never_runs_as_another_namespaces_service_account() {
    let (Harness { client, ns }, _op) = Harness::with_operator("job-sa").await;
    let other = support::cluster::test_namespace(&client, "job-sa-other").await;
    let pp = PostParams::default();
    let runner: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "runner"}})).unwrap();
    for n in [&ns, &other] {
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), n)
            .create(&pp, &runner)
            .await
            .unwrap();
    }
    // Another namespace in the Job's template: refused at admission.
    let mut elsewhere = smoke("succeed", "1s", 120);
    elsewhere["template"]["metadata"]["namespace"] = json!(other);
    let refused = Api::<ReleasePlan>::namespaced(client.clone(), &ns)
        .create(&pp, &plan("shop", spec("shop:1", elsewhere)))
        .await;
    match refused {
        Err(kube::Error::Api(s)) => assert!(
            s.message
                .contains("template.metadata.namespace must not be set"),
            "{}",
            s.message
        ),
        other => panic!("accepted: {other:?}"),
    }

    // An administrator's template that runs as `runner`, serving every namespace.
    let name = format!("{ns}-as-runner");
    let mut t = job_template("ClusterGateTemplate", &name, "succeed");
    t["spec"]["job"]["template"]["spec"]["template"]["spec"]["serviceAccountName"] =
        json!("runner");
    let templates = Api::<ClusterGateTemplate>::all(client.clone());
    templates
        .create(&pp, &serde_json::from_value(t).unwrap())
        .await
        .unwrap();
    let reference = json!({"name": "smoke",
        "templateRef": {"kind": "ClusterGateTemplate", "name": name},
        "args": {"suite": "smoke"}});
    create(
        &client,
        &ns,
        &plan("shop", template_spec("shop:1", reference)),
    )
    .await;
    let message = wait_until(JOB_WAIT, "the template to be refused here", || async {
        let p = plans::get(&client, &ns, "shop").await?;
        let (status, reason, message) = plans::condition(&p, "Stalled")?;
        (status == "True" && reason == "GateTemplateInvalid").then_some(message)
    })
    .await;
    assert!(
        message.contains("job.template.spec.template.spec.serviceAccountName: the Job of a ClusterGateTemplate runs as its service account \"runner\" only in the namespaces its annotation releaseplan.io/gate-namespaces lists by name"),
        "{message}"
    );
    assert!(jobs(&client, &ns, "shop").await.is_empty());

    // The administrator lists the namespace: the Job runs there, as its `runner`.
    templates
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "releaseplan.io/gate-namespaces": format!("{other}, {ns}")}}})),
        )
        .await
        .unwrap();
    let p = settled(&client, &ns, "shop").await;
    assert_eq!(p.status.unwrap().phase, Phase::Stable);
    let made = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{LABEL_PLAN}=shop")))
        .await
        .unwrap();
    assert_eq!(made.items.len(), 1);
    assert_eq!(made.items[0].namespace().as_deref(), Some(ns.as_str()));
    assert_eq!(
        pod_of(&made.items[0]).service_account_name.as_deref(),
        Some("runner")
    );
    let there = Api::<Job>::namespaced(client.clone(), &other)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(there.items.is_empty(), "a Job in {other}");
    templates
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}
