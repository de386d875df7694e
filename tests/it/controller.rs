//! The operator against the real local control plane: each test runs its own
//! operator process on its own namespace.

use crate::support;

use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use releaseplan::api::{
    FINALIZER, LABEL_COMPONENT, LABEL_PLAN, LABEL_REVISION, Phase, ReleasePlan,
};
use serde_json::json;
use std::time::Duration;
use support::fixtures::{plan, template, web};
use support::operator::{Operator, sum_metric};
use support::plans::{
    by_image, condition, create, create_stable, get, revisions, set_components, wait_phase,
};
use support::{Harness, WAIT, cluster, plans, wait_until};

#[tokio::test]
async fn first_release_reaches_stable() {
    let (Harness { client, ns }, op) = Harness::with_operator("first").await;
    create(
        &client,
        &ns,
        &plan("shop", json!({"components": [web("shop:1", 3)]})),
    )
    .await;
    let p = wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let s = p.status.clone().unwrap();
    assert_eq!(s.observed_generation, p.metadata.generation);
    assert_eq!(s.stable_revision, s.current_revision);
    assert_eq!(condition(&p, "Ready").map(|c| c.0).as_deref(), Some("True"));
    assert_eq!(
        condition(&p, "Reconciling").map(|c| c.0).as_deref(),
        Some("False")
    );
    assert!(p.finalizers().iter().any(|f| f == FINALIZER));
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(revs.len(), 1, "{revs:?}");
    let hash = s.components[0].current_hash.clone().unwrap();
    assert_eq!(
        revs.get(&format!("shop-web-{hash}")),
        Some(&(3, 3, "shop:1".to_string()))
    );
    // The Deployment is owned by the plan.
    let d = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get(&format!("shop-web-{hash}"))
        .await
        .unwrap();
    assert_eq!(d.owner_references()[0].kind, "ReleasePlan");
    // CI pipelines can wait on the Ready condition with plain kubectl.
    let kubectl = cluster::repo_root().join("e2e/kubectl.sh");
    let out = std::process::Command::new(kubectl)
        .args([
            "wait",
            "--for=condition=Ready",
            "rp/shop",
            "-n",
            &ns,
            "--timeout=30s",
        ])
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl wait: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(op);
}

#[tokio::test]
async fn image_change_walks_the_steps_and_pause_holds_until_promoted() {
    let (Harness { client, ns }, op) = Harness::with_operator("steps").await;
    let steps = json!([{"setWeight": 25}, {"setWeight": 50}, {"pause": {}}]);
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 4)], "strategy": {"steps": steps}}),
    )
    .await;

    set_components(&client, &ns, "shop", json!([web("shop:2", 4)])).await;
    // The rollout reaches the indefinite pause: half the replicas on each revision.
    let p = wait_until(
        WAIT,
        "the pause step with 2 new and 2 old pods ready",
        || async {
            let p = get(&client, &ns, "shop").await?;
            let s = p.status.clone()?;
            let revs = revisions(&client, &ns, "shop").await;
            (s.phase == Phase::RollingOut
                && s.current_step == 2
                && by_image(&revs, "shop:2") == Some((2, 2))
                && by_image(&revs, "shop:1").map(|x| x.0) == Some(2))
            .then_some(p)
        },
    )
    .await;
    assert_eq!(p.status.as_ref().unwrap().weight, 50);
    assert_eq!(
        condition(&p, "Paused").map(|c| c.0).as_deref(),
        Some("True")
    );
    // It holds there.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s = get(&client, &ns, "shop").await.unwrap().status.unwrap();
    assert_eq!((s.phase, s.current_step), (Phase::RollingOut, 2));

    plans::request(&client, &ns, "shop", "promote").await;
    let p = wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(by_image(&revs, "shop:2"), Some((4, 4)));
    assert_eq!(by_image(&revs, "shop:1").map(|x| x.0), Some(0));
    let s = p.status.unwrap();
    assert_eq!(s.history.len(), 2);
    assert!(s.acknowledged_request.is_some());
    assert!(op.counter("releaseplan_rollouts_total").await >= 2.0);

    // The operator's requests to the API server, by verb, resource and
    // answer: Deployments applied (server-side apply is a PATCH), the status
    // written whole (a PUT on the subresource), the caches fed by watches.
    let text = op.metrics().await;
    for series in [
        r#"releaseplan_kube_requests_total{verb="patch",resource="deployments",code="200"}"#,
        r#"releaseplan_kube_requests_total{verb="update",resource="releaseplans/status",code="200"}"#,
        r#"releaseplan_kube_requests_total{verb="watch",resource="deployments",code="200"}"#,
        r#"releaseplan_kube_request_duration_seconds_count{verb="patch"}"#,
    ] {
        assert!(sum_metric(&text, series) >= 1.0, "{series} in\n{text}");
    }
    assert_eq!(
        sum_metric(
            &text,
            r#"releaseplan_kube_request_duration_seconds_count{verb="watch"}"#
        ),
        0.0,
        "a watch streams for minutes: its duration is not a latency"
    );
    // Every change waited for its reconcile, and once the plan is Stable
    // and idle nothing waits any more.
    assert!(sum_metric(&text, "releaseplan_reconcile_queue_wait_seconds_count") >= 3.0);
    wait_until(WAIT, "an empty reconcile queue", || async {
        (op.counter("releaseplan_reconcile_queue_depth").await == 0.0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn spec_changed_twice_converges_on_the_newest() {
    let (Harness { client, ns }, _op) = Harness::with_operator("twice").await;
    let steps = json!([{"setWeight": 50}, {"pause": {"duration": "1s"}}]);
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 2)], "strategy": {"steps": steps}}),
    )
    .await;
    set_components(&client, &ns, "shop", json!([web("shop:2", 2)])).await;
    set_components(&client, &ns, "shop", json!([web("shop:3", 2)])).await;
    let p = wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    assert_eq!(
        p.status.as_ref().unwrap().observed_generation,
        p.metadata.generation
    );
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(by_image(&revs, "shop:3"), Some((2, 2)), "{revs:?}");
    for (name, (replicas, _, image)) in &revs {
        if image != "shop:3" {
            assert_eq!(*replicas, 0, "{name} ({image}) still runs");
        }
    }
}

#[tokio::test]
async fn deleting_mid_rollout_rolls_back_first() {
    let (Harness { client, ns }, _op) = Harness::with_operator("delete").await;
    let steps = json!([{"setWeight": 50}, {"pause": {}}]);
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 2)], "strategy": {"steps": steps}}),
    )
    .await;
    set_components(&client, &ns, "shop", json!([web("shop:2", 2)])).await;
    wait_until(WAIT, "the canary to be ready", || async {
        let revs = revisions(&client, &ns, "shop").await;
        (by_image(&revs, "shop:2") == Some((1, 1))).then_some(())
    })
    .await;
    // Orphan the Deployments so we can see what the operator left behind.
    Api::<ReleasePlan>::namespaced(client.clone(), &ns)
        .delete("shop", &DeleteParams::orphan())
        .await
        .unwrap();
    // While the object lingers, it is rolling back.
    let lingering = get(&client, &ns, "shop").await;
    if let Some(p) = lingering {
        assert!(p.metadata.deletion_timestamp.is_some());
    }
    wait_until(WAIT, "the plan to be gone", || async {
        get(&client, &ns, "shop").await.is_none().then_some(())
    })
    .await;
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(
        by_image(&revs, "shop:1"),
        Some((2, 2)),
        "stable back at full: {revs:?}"
    );
    assert_eq!(
        by_image(&revs, "shop:2").map(|x| x.0),
        Some(0),
        "canary at zero: {revs:?}"
    );
}

#[tokio::test]
async fn drift_on_an_owned_deployment_is_corrected() {
    let (Harness { client, ns }, _op) = Harness::with_operator("drift").await;
    create(
        &client,
        &ns,
        &plan("shop", json!({"components": [web("shop:1", 3)]})),
    )
    .await;
    let p = wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let hash = p.status.unwrap().components[0]
        .current_hash
        .clone()
        .unwrap();
    let name = format!("shop-web-{hash}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    // Someone scales it and changes its image by hand.
    let patch = json!({"spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "app", "image": "shop:hacked"}]}}}});
    deployments
        .patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
    wait_until(WAIT, "the drift to be put back", || async {
        let revs = revisions(&client, &ns, "shop").await;
        (revs.get(&name) == Some(&(3, 3, "shop:1".to_string()))).then_some(())
    })
    .await;
    // A label taken off changes no generation (the operator's check of a
    // Deployment it found up to date is keyed on the generation and the
    // metadata it sets): it is put back too.
    let managed_by = "app.kubernetes.io/managed-by";
    deployments
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {managed_by: null}}})),
        )
        .await
        .unwrap();
    wait_until(WAIT, "the label to be put back", || async {
        let d = deployments.get(&name).await.ok()?;
        (d.labels().get(managed_by).map(String::as_str) == Some("releaseplan")).then_some(())
    })
    .await;
    // A deleted one is recreated.
    deployments
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(WAIT, "the deleted Deployment to be recreated", || async {
        let d = deployments.get_opt(&name).await.ok()??;
        let fresh = d.metadata.deletion_timestamp.is_none();
        (fresh && d.spec?.replicas == Some(3)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_killed_operator_resumes_without_duplicates() {
    let Harness { client, ns } = Harness::new("kill").await;
    let mut op = Operator::start(&ns, &[]).await;
    let steps = json!([{"setWeight": 50}, {"pause": {"duration": "3s"}}]);
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 4)], "strategy": {"steps": steps}}),
    )
    .await;
    set_components(&client, &ns, "shop", json!([web("shop:2", 4)])).await;
    wait_until(WAIT, "the rollout to start", || async {
        let s = get(&client, &ns, "shop").await?.status?;
        (s.phase == Phase::RollingOut).then_some(())
    })
    .await;
    op.kill();
    let _op = Operator::start(&ns, &[]).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(revs.len(), 2, "one Deployment per revision: {revs:?}");
    assert_eq!(by_image(&revs, "shop:2"), Some((4, 4)));
}

#[tokio::test]
async fn two_components_promote_together() {
    let (Harness { client, ns }, _op) = Harness::with_operator("multi").await;
    let api = |image: &str| json!({"name": "api", "replicas": 2, "template": template(image)});
    let steps = json!([{"setWeight": 50}, {"pause": {}}]);
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("web:1", 2), api("api:1")], "strategy": {"steps": steps}}),
    )
    .await;
    set_components(&client, &ns, "shop", json!([web("web:2", 2), api("api:2")])).await;
    wait_until(
        WAIT,
        "both canaries at one ready pod, held at the pause",
        || async {
            let revs = revisions(&client, &ns, "shop").await;
            let s = get(&client, &ns, "shop").await?.status?;
            // Promote only once at the pause: a promote at step 0 would only move to the pause.
            (s.current_step == 1
                && by_image(&revs, "web:2") == Some((1, 1))
                && by_image(&revs, "api:2") == Some((1, 1)))
            .then_some(())
        },
    )
    .await;
    plans::request(&client, &ns, "shop", "promote").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(by_image(&revs, "web:2"), Some((2, 2)));
    assert_eq!(by_image(&revs, "api:2"), Some((2, 2)));
    assert_eq!(by_image(&revs, "web:1").map(|x| x.0), Some(0));
    assert_eq!(by_image(&revs, "api:1").map(|x| x.0), Some(0));
}

#[tokio::test]
async fn foreground_deletion_removes_the_plan_and_its_deployments() {
    let (Harness { client, ns }, _op) = Harness::with_operator("foreground").await;
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 2)]}),
    )
    .await;
    set_components(&client, &ns, "shop", json!([web("shop:2", 2)])).await;
    Api::<ReleasePlan>::namespaced(client.clone(), &ns)
        .delete("shop", &DeleteParams::foreground())
        .await
        .unwrap();
    wait_until(WAIT, "the plan and its Deployments to be gone", || async {
        let gone = get(&client, &ns, "shop").await.is_none();
        (gone && revisions(&client, &ns, "shop").await.is_empty()).then_some(())
    })
    .await;
}

/// The ControllerRevision storing the template of `hash`, if any.
async fn stored_template(client: &Client, ns: &str, hash: &str) -> Option<ControllerRevision> {
    Api::<ControllerRevision>::namespaced(client.clone(), ns)
        .get_opt(&format!("shop-web-{hash}"))
        .await
        .expect("cannot read ControllerRevisions")
}

fn current_hash(p: &ReleasePlan) -> String {
    p.status.as_ref().unwrap().components[0]
        .current_hash
        .clone()
        .unwrap()
}

#[tokio::test]
async fn a_deleted_stable_deployment_is_recreated_from_its_stored_template() {
    let (Harness { client, ns }, op) = Harness::with_operator("recreate").await;
    let steps = json!([{"setWeight": 50}, {"pause": {}}]);
    let p = create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 2)], "strategy": {"steps": steps}}),
    )
    .await;
    let stable = format!("shop-web-{}", current_hash(&p));
    set_components(&client, &ns, "shop", json!([web("shop:2", 2)])).await;
    wait_until(WAIT, "the pause with one pod on each revision", || async {
        let s = get(&client, &ns, "shop").await?.status?;
        let revs = revisions(&client, &ns, "shop").await;
        (s.current_step == 1
            && by_image(&revs, "shop:2") == Some((1, 1))
            && by_image(&revs, "shop:1") == Some((1, 1)))
        .then_some(())
    })
    .await;

    // The stable revision's template is only in its Deployment and its
    // ControllerRevision now: the spec has moved on. Delete the Deployment.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let old_uid = deployments.get(&stable).await.unwrap().metadata.uid;
    deployments
        .delete(&stable, &DeleteParams::background())
        .await
        .unwrap();
    let d = wait_until(
        WAIT,
        "the stable Deployment to be recreated with a ready pod",
        || async {
            let d = deployments.get_opt(&stable).await.ok()??;
            let ready = d.status.as_ref()?.ready_replicas? == 1;
            (d.metadata.uid != old_uid && d.metadata.deletion_timestamp.is_none() && ready)
                .then_some(d)
        },
    )
    .await;
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(1));
    let containers = spec.template.spec.unwrap().containers;
    assert_eq!(containers[0].image.as_deref(), Some("shop:1"));
    assert_eq!(d.metadata.owner_references.unwrap()[0].kind, "ReleasePlan");
    assert!(
        op.log_text().contains("from its stored template"),
        "{}",
        op.log_text()
    );

    // And the rollout can go back to it.
    plans::request(&client, &ns, "shop", "abort").await;
    wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
    let revs = revisions(&client, &ns, "shop").await;
    assert_eq!(revs.get(&stable), Some(&(2, 2, "shop:1".to_string())));
    assert_eq!(by_image(&revs, "shop:2").map(|x| x.0), Some(0));
}

#[tokio::test]
async fn each_revision_stores_its_template_until_pruned() {
    let (Harness { client, ns }, _op) = Harness::with_operator("stored").await;
    let p = create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1", 1)], "revisionHistoryLimit": 1}),
    )
    .await;
    let h1 = current_hash(&p);
    let cr = wait_until(WAIT, "the first template to be stored", || async {
        stored_template(&client, &ns, &h1).await
    })
    .await;
    let labels = cr.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(LABEL_PLAN).map(String::as_str), Some("shop"));
    assert_eq!(labels.get(LABEL_COMPONENT).map(String::as_str), Some("web"));
    assert_eq!(
        labels.get(LABEL_REVISION).map(String::as_str),
        Some(h1.as_str())
    );
    let owner = &cr.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), Some(&owner.uid), owner.controller),
        ("ReleasePlan", p.metadata.uid.as_ref(), Some(true))
    );
    // The spec's template as written: what hashes to the revision.
    assert_eq!(cr.data.unwrap().0, template("shop:1"));
    assert_eq!(cr.revision, 1, "numbered by the rollout that made it");
    let managers: Vec<String> = cr
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, ["releaseplan"]);

    set_components(&client, &ns, "shop", json!([web("shop:2", 1)])).await;
    let p = wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let h2 = current_hash(&p);
    let cr2 = stored_template(&client, &ns, &h2).await.expect("stored");
    assert_eq!(cr2.revision, 2);
    assert!(
        stored_template(&client, &ns, &h1).await.is_some(),
        "kept: limit 1"
    );

    // A third revision: the first is beyond the limit, Deployment and template go.
    set_components(&client, &ns, "shop", json!([web("shop:3", 1)])).await;
    let p = wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let h3 = current_hash(&p);
    wait_until(WAIT, "the first revision to be pruned", || async {
        let revs = revisions(&client, &ns, "shop").await;
        let gone = stored_template(&client, &ns, &h1).await.is_none()
            && !revs.contains_key(&format!("shop-web-{h1}"));
        gone.then_some(())
    })
    .await;
    assert!(stored_template(&client, &ns, &h2).await.is_some());
    assert!(stored_template(&client, &ns, &h3).await.is_some());

    // Owned by the plan: collected with it.
    Api::<ReleasePlan>::namespaced(client.clone(), &ns)
        .delete("shop", &DeleteParams::background())
        .await
        .unwrap();
    wait_until(WAIT, "the stored templates to be collected", || async {
        let left = Api::<ControllerRevision>::namespaced(client.clone(), &ns)
            .list(&ListParams::default().labels(&format!("{LABEL_PLAN}=shop")))
            .await
            .ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
}
