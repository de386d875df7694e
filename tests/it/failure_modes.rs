//! The failure table of the reconcile journey (seed notes, section 4.10), one
//! test per row, against the local control plane and the real operator:
//!
//! | row | test |
//! | --- | --- |
//! | reconcile error forever | `reconcile_error_forever_is_visible_and_backs_off`, `reconcile_error_forever_when_status_cannot_be_written_is_a_warning_event` |
//! | CR stuck Terminating | `cr_stuck_terminating_namespace_deletion_never_hangs`, `cr_stuck_terminating_escape_hatch_removes_the_finalizer` |
//! | status not updating | `status_not_updating_a_refused_template_reaches_status` |
//! | duplicate operations | `duplicate_operations_twenty_requeues_change_nothing` |
//! | controller stuck | `controller_stuck_hung_gates_never_delay_a_rollback` |
//! | two replicas acting | `tests/leader.rs` `only_the_leader_writes_and_leadership_moves_on_kill_and_term` |
//! | drift | `tests/controller.rs` `drift_on_an_owned_deployment_is_corrected` |

use crate::support;

use axum::Router;
use axum::routing::post;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, ResourceQuota};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use releaseplan::api::{Phase, ReleasePlan, Verdict};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use support::fixtures::{faulty_template, plan, refused_template, template, web_with};
use support::operator::{Operator, sum_metric};
use support::plans::{
    condition, create, create_stable, get, plan_events, revisions, set_components, wait_phase,
};
use support::{Harness, WAIT, cluster, crd, plans, wait_until};

#[tokio::test]
async fn reconcile_error_forever_is_visible_and_backs_off() {
    let (Harness { client, ns }, op) = Harness::with_operator("fm-error").await;
    // No Deployment may be created in this namespace: every create is refused (403).
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-deployments"},
        "spec": {"hard": {"count/deployments.apps": "0"}}
    }))
    .unwrap();
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    create(
        &client,
        &ns,
        &plan(
            "shop",
            json!({"components": [web_with(template("shop:1"), 2)]}),
        ),
    )
    .await;

    // Status says what is wrong, at once, naming the Deployment and the API
    // server's answer; the plan is still trying (Reconciling, not Stalled).
    let p = wait_until(WAIT, "the refusal in status", || async {
        let p = get(&client, &ns, "shop").await?;
        let (st, reason, msg) = condition(&p, "Reconciling")?;
        (st == "True" && reason == "DeploymentWriteFailed").then_some((p, msg))
    })
    .await;
    let (p, msg) = p;
    assert!(msg.contains("shop-web-") && msg.contains("403"), "{msg}");
    assert!(msg.contains("quota"), "the API server's message: {msg}");
    let s = p.status.as_ref().unwrap();
    assert_eq!(s.observed_generation, p.metadata.generation);
    assert_eq!(condition(&p, "Ready").unwrap().0, "False");
    assert_eq!(condition(&p, "Stalled").unwrap().0, "False");

    // Backoff: failures grow slower and slower (1s, 2s, 4s, 8s ...), not every
    // 300ms. That failures go on is waited for; that they are few is a
    // negative check, so it keeps a bounded observation window: 14 s from the
    // refusal seen in status (about 5 failures with the backoff, dozens
    // without), ending no sooner than the wait.
    let window_end = tokio::time::Instant::now() + Duration::from_secs(14);
    let failures =
        || async { sum_metric(&op.metrics().await, "releaseplan_reconcile_failures_total") };
    let refused = || async {
        plan_events(&client, &ns, "shop")
            .await
            .iter()
            .filter(|e| e.0 == "DeploymentRefused" && e.1 == "Warning")
            .map(|e| e.3)
            .sum::<i32>()
    };
    wait_until(WAIT, "3 failed reconciles and a Warning", || async {
        let (n, warnings) = (failures().await, refused().await);
        (n >= 3.0 && warnings >= 1).then_some(()).ok_or(format!(
            "{n} failures, {warnings} DeploymentRefused Warnings"
        ))
    })
    .await;
    tokio::time::sleep_until(window_end).await;
    let failures = failures().await;
    assert!(
        (3.0..=7.0).contains(&failures),
        "about 5 failures in 15s with exponential backoff, got {failures}"
    );
    let refused = refused().await;
    let events = plan_events(&client, &ns, "shop").await;
    assert!(
        (1..=8).contains(&refused),
        "a Warning per failed attempt, spaced by the backoff: {events:?}"
    );

    // The cause goes away: the plan recovers on its own.
    quotas
        .delete("no-deployments", &DeleteParams::default())
        .await
        .unwrap();
    let p = wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    assert_eq!(condition(&p, "Ready").unwrap().0, "True");
    assert_eq!(condition(&p, "Reconciling").unwrap().0, "False");
}

#[tokio::test]
async fn status_not_updating_a_refused_template_reaches_status() {
    let (Harness { client, ns }, _op) = Harness::with_operator("fm-status").await;

    // A new plan whose Deployment can never be created: status, not silence.
    create(
        &client,
        &ns,
        &plan(
            "fresh",
            json!({"components": [web_with(refused_template(), 2)]}),
        ),
    )
    .await;
    let (p, msg) = wait_until(WAIT, "the refusal of a new plan in status", || async {
        let p = get(&client, &ns, "fresh").await?;
        let (st, reason, msg) = condition(&p, "Stalled")?;
        (st == "True" && reason == "DeploymentRefused").then_some((p, msg))
    })
    .await;
    assert!(msg.contains("fresh-web-") && msg.contains("422"), "{msg}");
    assert!(msg.contains("limit"), "the API server's own words: {msg}");
    assert_eq!(p.status.as_ref().unwrap().observed_generation, Some(1));
    assert_eq!(condition(&p, "Ready").unwrap().0, "False");
    let events = plan_events(&client, &ns, "fresh").await;
    assert!(
        events
            .iter()
            .any(|e| e.0 == "DeploymentRefused" && e.1 == "Warning" && e.2.contains("limit")),
        "{events:?}"
    );

    // A Stable plan patched to such a template: Ready goes False on the new
    // generation, so `kubectl wait --for=condition=Ready` does not pass.
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web_with(template("shop:1"), 2)]}),
    )
    .await;
    set_components(
        &client,
        &ns,
        "shop",
        json!([web_with(refused_template(), 2)]),
    )
    .await;
    let p = wait_until(WAIT, "the refused generation observed", || async {
        let p = get(&client, &ns, "shop").await?;
        let s = p.status.as_ref()?;
        (s.observed_generation == Some(2)
            && condition(&p, "Stalled").is_some_and(|c| c.1 == "DeploymentRefused"))
        .then_some(p)
    })
    .await;
    let (ready, reason, _) = condition(&p, "Ready").unwrap();
    assert_eq!(ready, "False", "reason {reason}");
    // The stable revision keeps serving meanwhile.
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(plans::by_image(&revs, "shop:1"), Some((2, 2)), "{revs:?}");
}

#[tokio::test]
async fn duplicate_operations_twenty_requeues_change_nothing() {
    let (Harness { client, ns }, op) = Harness::with_operator("fm-dup").await;
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web_with(template("shop:1"), 2)]}),
    )
    .await;
    // The baseline is taken once the first release's writes have landed: its
    // last ones are its Events (RolloutStarted, Promoted), and the operator's
    // count of writes is the same at two polls in a row.
    let last_writes = std::cell::Cell::new(f64::NAN);
    wait_until(WAIT, "the first release's writes to land", || async {
        let writes = op.counter("releaseplan_api_writes_total").await;
        let steady = writes == last_writes.replace(writes);
        let events = plan_events(&client, &ns, "shop").await;
        let published = ["RolloutStarted", "Promoted"]
            .iter()
            .all(|r| events.iter().any(|e| e.0 == *r));
        (steady && published)
            .then_some(())
            .ok_or(format!("{writes} writes; Events {events:?}"))
    })
    .await;
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns);
    let before_deploys: Vec<String> = deployments
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let before_events = plan_events(&client, &ns, "shop").await;
    let before_writes = op.counter("releaseplan_api_writes_total").await;
    let before_runs = op.counter("releaseplan_reconcile_runs_total").await;
    let plans: Api<ReleasePlan> = Api::namespaced(client.clone(), &ns);
    for i in 0..20 {
        // Any change to the plan object triggers a reconcile.
        plans
            .patch(
                "shop",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"test/poke": i.to_string()}}})),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_until(WAIT, "the requeues to be reconciled", || async {
        (op.counter("releaseplan_reconcile_runs_total").await >= before_runs + 5.0).then_some(())
    })
    .await;
    // Nothing changes: a negative check, so a bounded observation window of
    // 2 s once the requeues were reconciled, for a late write to show.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_deploys: Vec<String> = deployments
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(after_deploys, before_deploys, "no Deployment created");
    assert_eq!(
        plan_events(&client, &ns, "shop").await,
        before_events,
        "no Event published or repeated"
    );
    assert_eq!(
        op.counter("releaseplan_api_writes_total").await,
        before_writes,
        "no write at all"
    );
}

#[tokio::test]
async fn cr_stuck_terminating_namespace_deletion_never_hangs() {
    let client = cluster::client().await;
    crd::install(&client).await;
    let mut namespaces = Vec::new();
    let mut ops = Vec::new();
    for i in 0..3 {
        let ns = cluster::test_namespace(&client, &format!("fm-nsdel{i}")).await;
        ops.push(Operator::start(&ns, &[]).await);
        for name in ["a", "b"] {
            create_stable(
                &client,
                &ns,
                name,
                json!({"components": [web_with(template("shop:1"), 2)]}),
            )
            .await;
        }
        // One plan mid-rollout too: deletion must not wait for a rollback that
        // can no longer finish.
        create_stable(
            &client,
            &ns,
            "c",
            json!({"components": [web_with(template("shop:1"), 2)],
            "strategy": {"steps": [{"setWeight": 50}, {"pause": {}}]}}),
        )
        .await;
        set_components(&client, &ns, "c", json!([web_with(template("shop:2"), 2)])).await;
        namespaces.push(ns);
    }
    let api: Api<Namespace> = Api::all(client.clone());
    for ns in &namespaces {
        api.delete(ns, &DeleteParams::default()).await.unwrap();
    }
    for ns in &namespaces {
        wait_until(
            Duration::from_secs(90),
            &format!("namespace {ns} to be gone"),
            || async { api.get_opt(ns).await.ok()?.is_none().then_some(()) },
        )
        .await;
    }
    for op in &ops {
        let log = op.log_text();
        assert!(
            !log.contains("Deployment write failed"),
            "the operator never writes Deployments of a plan being deleted:\n{log}"
        );
    }
}

#[tokio::test]
async fn cr_stuck_terminating_escape_hatch_removes_the_finalizer() {
    let (Harness { client, ns }, mut op) = Harness::with_operator("fm-escape").await;
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web_with(template("shop:1"), 2)]}),
    )
    .await;
    // The operator is gone (uninstalled first, or crashed for good): the plan's
    // finalizer holds the deletion.
    op.kill();
    let plans: Api<ReleasePlan> = Api::namespaced(client.clone(), &ns);
    plans
        .delete("shop", &DeleteParams::default())
        .await
        .unwrap();
    // Marked for deletion (waited for), and still there after a bounded
    // observation window of 2 s: that nothing removes it while the operator is
    // gone is a negative check.
    wait_until(WAIT, "the plan to be marked for deletion", || async {
        plans
            .get_opt("shop")
            .await
            .ok()??
            .metadata
            .deletion_timestamp
            .map(|_| ())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let p = plans.get("shop").await.unwrap();
    assert!(
        p.metadata.deletion_timestamp.is_some(),
        "held by the finalizer"
    );
    // The documented escape (docs/troubleshooting.md):
    //   kubectl patch rp shop --type merge -p '{"metadata":{"finalizers":null}}'
    plans
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    wait_until(WAIT, "the plan to be gone", || async {
        plans.get_opt("shop").await.ok()?.is_none().then_some(())
    })
    .await;
    // Its Deployments are owned by the plan: the garbage collector removes them.
    wait_until(WAIT, "the plan's Deployments to be collected", || async {
        revisions(&client, &ns, "shop")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
}

/// A webhook that never answers; counts the calls it holds.
async fn hang(calls: Arc<AtomicUsize>) -> &'static str {
    calls.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    "late"
}

#[tokio::test]
async fn controller_stuck_hung_gates_never_delay_a_rollback() {
    let (Harness { client, ns }, op) = Harness::with_operator("fm-stuck").await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let held = Arc::clone(&calls);
    tokio::spawn(async move {
        let check = post(move || hang(Arc::clone(&held)));
        let _ = axum::serve(listener, Router::new().route("/check", check)).await;
    });
    // Each gate call waits 30s, three times: without a gate runner one such
    // plan holds a reconcile worker for 90s, and 8 of them hold all 8.
    let hooks = json!([{"name": "smoke", "url": format!("http://{addr}/check"), "timeoutSeconds": 30, "retries": 2}]);
    let steps = json!([{"setWeight": 50}, {"pause": {}}]);
    let names: Vec<String> = (0..9).map(|i| format!("p{i}")).collect();
    for name in &names {
        create_stable(
            &client,
            &ns,
            name,
            json!({"components": [web_with(template("shop:1"), 2)], "strategy": {"steps": steps}}),
        )
        .await;
    }
    for name in &names[..8] {
        plans::patch_spec(
            &client,
            &ns,
            name,
            json!({"components": [web_with(template("shop:2"), 2)], "health": {"webhooks": hooks}}),
        )
        .await;
    }
    // Each of the 8 plans has a gate call hanging before p8 changes.
    wait_until(WAIT, "a hung gate call of each of the 8 plans", || async {
        let n = calls.load(Ordering::SeqCst);
        (n >= 8).then_some(()).ok_or(format!("{n} calls"))
    })
    .await;
    plans::patch_spec(&client, &ns, "p8", json!({"components": [web_with(faulty_template("shop:2", "crash-loop"), 2)], "health": {"webhooks": hooks}})).await;

    // The clock starts when the first new pod of p8 is seen crash-looping; the
    // rollback may even beat the poll (then the pod is gone before it is seen).
    let patched = Instant::now();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let crash_seen: std::cell::Cell<Option<Instant>> = std::cell::Cell::new(None);
    let rollback_seen = wait_until(WAIT, "p8's rollback to start", || async {
        if crash_seen.get().is_none() {
            let list = pods
                .list(&ListParams::default().labels("releaseplan.io/plan=p8"))
                .await
                .ok()?;
            let crashing = list
                .items
                .iter()
                .flat_map(|p| {
                    p.status
                        .iter()
                        .flat_map(|s| s.container_statuses.iter().flatten())
                })
                .any(|c| {
                    c.restart_count > 0
                        || c.state
                            .as_ref()
                            .and_then(|s| s.waiting.as_ref())
                            .and_then(|w| w.reason.as_deref())
                            == Some("CrashLoopBackOff")
                });
            if crashing {
                crash_seen.set(Some(Instant::now()));
            }
        }
        let p = get(&client, &ns, "p8").await?;
        matches!(
            p.status?.phase,
            Phase::RollbackInProgress | Phase::RolledBack
        )
        .then(Instant::now)
    })
    .await;
    let crash_seen = crash_seen.get();
    let took = crash_seen.map_or(Duration::ZERO, |c| {
        rollback_seen.saturating_duration_since(c)
    });
    println!(
        "crash-loop seen -> rollback started with 8 hung-gate plans: {took:?} (crash seen by the test: {}; spec patch -> rollback {:?})",
        crash_seen.is_some(),
        rollback_seen - patched
    );
    // The bounds are set against one hung gate call (30s, three tries), not
    // against speed: a reconcile held by a gate would take 30s or more, while
    // a busy machine (load 15 on 2 cores) stretches a free one to seconds.
    assert!(
        took < Duration::from_secs(20),
        "rollback started {took:?} after the crash-loop"
    );
    // kwok crash-loops a pod 1.5 to 4s after it runs: the whole way from the
    // spec change to the rollback stays below one hung gate call (30s).
    assert!(
        rollback_seen - patched < Duration::from_secs(28),
        "spec patch -> rollback took {:?}",
        rollback_seen - patched
    );

    // The 8 other plans are still waiting on their gates, and no reconcile
    // ever took anywhere near a gate call (10s, the histogram's bucket
    // below 30s).
    for name in &names[..8] {
        let p = get(&client, &ns, name).await.unwrap();
        let s = p.status.unwrap();
        assert_eq!(s.phase, Phase::RollingOut, "{name}: {:?}", s.message);
        let g = &s.gates[0];
        assert_eq!(g.verdict, Verdict::Pending, "{name}: {g:?}");
    }
    let text = op.metrics().await;
    let count = sum_metric(&text, "releaseplan_reconcile_duration_seconds_count");
    let under_10s: f64 = text
        .lines()
        .filter(|l| l.starts_with("releaseplan_reconcile_duration_seconds_bucket{le=\"10.0\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(count > 20.0, "reconciles ran: {count}");
    assert_eq!(under_10s, count, "every reconcile took under 10s:\n{text}");
    let failures = sum_metric(&text, "releaseplan_reconcile_failures_total");
    assert_eq!(failures, 0.0, "{text}");
}

#[tokio::test]
async fn reconcile_error_forever_when_status_cannot_be_written_is_a_warning_event() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let (Harness { client, ns }, op) = Harness::with_operator("fm-frozen").await;
    // An admission policy refuses every status write of plans in this namespace.
    let name = format!("freeze-{ns}");
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["releaseplan.io"], "apiVersions": ["*"],
                "operations": ["UPDATE"], "resources": ["releaseplans/status"]}]},
            "validations": [{"expression": "false", "message": "status writes are frozen by policy"}]
        }
    }))
    .unwrap();
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}
    }))
    .unwrap();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    // The API server loads policies asynchronously: wait until one status write is refused.
    let plans: Api<ReleasePlan> = Api::namespaced(client.clone(), &ns);
    create(
        &client,
        &ns,
        &plan(
            "probe",
            json!({"components": [web_with(template("shop:1"), 1)]}),
        ),
    )
    .await;
    wait_until(WAIT, "the policy to refuse a status write", || async {
        let mut p = plans.get("probe").await.ok()?;
        p.metadata.managed_fields = None;
        let mut s = p.status.clone().unwrap_or_default();
        s.message = Some(format!("probe {:?}", Instant::now()));
        p.status = Some(s);
        // Only the policy's own refusal counts: the operator writes this
        // plan's status too, so a 409 proves nothing.
        match plans
            .replace_status("probe", &PostParams::default(), &p)
            .await
        {
            Err(kube::Error::Api(e)) if e.message.contains("frozen by policy") => Some(()),
            _ => None,
        }
    })
    .await;

    create(
        &client,
        &ns,
        &plan(
            "shop",
            json!({"components": [web_with(template("shop:1"), 2)]}),
        ),
    )
    .await;
    let events = wait_until(WAIT, "a ReconcileError Warning on the plan", || async {
        let events = plan_events(&client, &ns, "shop").await;
        events
            .iter()
            .any(|e| {
                e.0 == "ReconcileError" && e.1 == "Warning" && e.2.contains("frozen by policy")
            })
            .then_some(events)
    })
    .await;
    assert!(
        !events.iter().any(|e| e.0 == "RolloutStarted"),
        "no Event for a transition whose status was not written: {events:?}"
    );
    // Rate-limited: at the 1st, 2nd, 4th, 8th failure, not at each. Failures
    // are waited for; that the Warnings stay fewer is a negative check, so it
    // keeps a bounded observation window: 12 s from the first Warning, ending
    // no sooner than the wait.
    let window_end = tokio::time::Instant::now() + Duration::from_secs(12);
    let failures =
        || async { sum_metric(&op.metrics().await, "releaseplan_reconcile_failures_total") };
    wait_until(WAIT, "3 failed reconciles", || async {
        let n = failures().await;
        (n >= 3.0).then_some(()).ok_or(format!("{n} failures"))
    })
    .await;
    tokio::time::sleep_until(window_end).await;
    let failures = failures().await;
    let warnings: i32 = plan_events(&client, &ns, "shop")
        .await
        .iter()
        .filter(|e| e.0 == "ReconcileError")
        .map(|e| e.3)
        .sum();
    assert!(failures >= 3.0, "{failures}");
    assert!(
        f64::from(warnings) < failures,
        "{warnings} ReconcileError events for {failures} failures"
    );
    policies
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    bindings
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    // Once status can be written again, the plan goes on to Stable.
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
}
