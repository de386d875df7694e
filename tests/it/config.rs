//! Config released with the code, on the local control plane: a ConfigMap
//! or Secret change is a rollout through the steps, each revision's pods
//! read their own immutable copy, a failed release rolls back config and
//! image together, a missing object holds the plan until it appears, a
//! GitOps re-apply of unchanged content is no release, and no Secret value
//! reaches status, Events or the operator's log.

use crate::support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use releaseplan::api::{Phase, ReleasePlan};
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::{faulty_template, plan, template, web_with};
use support::operator::Operator;
use support::plans::{condition, create, create_stable, plan_events, set_components, wait_phase};
use support::{Harness, WAIT, plans, wait_until};

/// The field manager of the tests' own applies: a GitOps tool's.
const GITOPS: &str = "argocd-controller";

/// Applies ConfigMap `name` with `data`, as a GitOps tool would.
async fn apply_config_map(client: &Client, ns: &str, name: &str, data: Value) {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply(GITOPS).force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name}, "data": data})),
        )
        .await
        .expect("apply the ConfigMap");
}

/// Applies Secret `name` with `string_data`.
async fn apply_secret(client: &Client, ns: &str, name: &str, string_data: Value) {
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply(GITOPS).force(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name}, "stringData": string_data}),
            ),
        )
        .await
        .expect("apply the Secret");
}

/// `t` reading ConfigMap `web-config` through envFrom and Secret `web-db`
/// through a volume.
fn with_config(mut t: Value) -> Value {
    t["spec"]["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "web-config"}}]);
    t["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "db", "mountPath": "/db"}]);
    t["spec"]["volumes"] = json!([{"name": "db", "secret": {"secretName": "web-db"}}]);
    t
}

/// The ConfigMap and Secret a revision Deployment's pods read.
fn reads(d: &Deployment) -> (String, String) {
    let spec = d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a pod spec");
    let cm = spec.containers[0].env_from.as_ref().expect("envFrom")[0]
        .config_map_ref
        .as_ref()
        .expect("configMapRef")
        .name
        .clone();
    let secret = spec.volumes.as_ref().expect("volumes")[0]
        .secret
        .as_ref()
        .and_then(|s| s.secret_name.clone())
        .expect("secretName");
    (cm, secret)
}

async fn deployment(client: &Client, ns: &str, name: &str) -> Deployment {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("the revision Deployment")
}

async fn greeting(client: &Client, ns: &str, copy: &str) -> String {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(copy)
        .await
        .expect("the copy");
    assert_eq!(cm.immutable, Some(true), "copies are immutable");
    cm.data
        .and_then(|d| d.get("GREETING").cloned())
        .unwrap_or_default()
}

/// The uids of plan `shop`'s pods, sorted: the same list later means no pod
/// was replaced.
async fn pod_uids(client: &Client, ns: &str) -> Vec<String> {
    let mut uids: Vec<String> =
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
            .list(&ListParams::default().labels("releaseplan.io/plan=shop"))
            .await
            .expect("pods")
            .items
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
    uids.sort();
    uids
}

fn hashes(p: &ReleasePlan) -> (String, Option<String>) {
    let c = &p.status.as_ref().expect("status").components[0];
    (
        c.current_hash.clone().expect("current hash"),
        c.stable_hash.clone(),
    )
}

/// The plan `shop` reading config, at one pause step after its first release.
async fn stable_with_config(h: &Harness, template: Value) -> ReleasePlan {
    apply_config_map(&h.client, &h.ns, "web-config", json!({"GREETING": "hello"})).await;
    apply_secret(&h.client, &h.ns, "web-db", json!({"PASSWORD": "first"})).await;
    let steps = json!([{"setWeight": 50}, {"pause": {}}]);
    create_stable(
        &h.client,
        &h.ns,
        "shop",
        json!({"components": [web_with(with_config(template), 2)],
               "strategy": {"steps": steps}}),
    )
    .await
}

#[tokio::test]
async fn a_config_change_rolls_out_in_steps_and_old_pods_keep_their_copy() {
    let h = Harness::new("config-steps").await;
    let op = Operator::start(&h.ns, &[]).await;
    let first = stable_with_config(&h, template("shop:1")).await;
    let (old, _) = hashes(&first);
    let old_dep = deployment(&h.client, &h.ns, &format!("shop-web-{old}")).await;
    let (old_cm, old_secret) = reads(&old_dep);
    assert!(old_cm.starts_with("web-config-") && old_secret.starts_with("web-db-"));
    assert_eq!(greeting(&h.client, &h.ns, &old_cm).await, "hello");
    let carried = &first.status.as_ref().expect("status").components[0].config;
    assert_eq!(carried.len(), 2, "{carried:?}");
    assert!(
        carried
            .iter()
            .any(|c| c.name == "web-config" && c.copy.as_deref() == Some(old_cm.as_str())),
        "{carried:?}"
    );
    // The user's objects are only read: no owner, no label, no annotation added.
    let source = Api::<ConfigMap>::namespaced(h.client.clone(), &h.ns)
        .get("web-config")
        .await
        .expect("source");
    assert!(source.metadata.owner_references.is_none());
    assert!(source.labels().is_empty(), "{:?}", source.labels());
    let source_version = source.resource_version();

    // A GitOps re-apply of the same content is no release.
    apply_config_map(&h.client, &h.ns, "web-config", json!({"GREETING": "hello"})).await;
    apply_secret(&h.client, &h.ns, "web-db", json!({"PASSWORD": "first"})).await;
    // Bounded window: nothing must happen, so there is nothing to wait for.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p = plans::get(&h.client, &h.ns, "shop").await.expect("plan");
    assert_eq!(p.status.as_ref().expect("status").phase, Phase::Stable);
    assert_eq!(hashes(&p).0, old, "same content, same revision");

    // A config-only change: a new revision, held at the pause with half the pods.
    apply_config_map(&h.client, &h.ns, "web-config", json!({"GREETING": "bye"})).await;
    let paused = wait_until(WAIT, "the config change held at the pause", || async {
        let p = plans::get(&h.client, &h.ns, "shop").await?;
        let s = p.status.as_ref()?;
        (s.phase == Phase::RollingOut && s.current_step == 1 && s.components[0].current_ready == 1)
            .then_some(p)
    })
    .await;
    let (new, stable) = hashes(&paused);
    assert_eq!(stable.as_deref(), Some(old.as_str()));
    assert_ne!(new, old);
    let new_dep = deployment(&h.client, &h.ns, &format!("shop-web-{new}")).await;
    let (new_cm, new_secret) = reads(&new_dep);
    assert_eq!(greeting(&h.client, &h.ns, &new_cm).await, "bye");
    assert_eq!(
        new_secret, old_secret,
        "the unchanged Secret: the same copy"
    );
    // The old revision's pods still read the old copy.
    let old_dep = deployment(&h.client, &h.ns, &format!("shop-web-{old}")).await;
    assert_eq!(reads(&old_dep).0, old_cm);
    assert_eq!(greeting(&h.client, &h.ns, &old_cm).await, "hello");
    let source = Api::<ConfigMap>::namespaced(h.client.clone(), &h.ns)
        .get("web-config")
        .await
        .expect("source");
    assert_ne!(source.resource_version(), source_version);
    assert!(source.metadata.owner_references.is_none());
    drop(op);
}

#[tokio::test]
async fn a_failed_release_of_config_and_image_rolls_back_both() {
    let h = Harness::new("config-rollback").await;
    let _op = Operator::start(&h.ns, &[]).await;
    let first = stable_with_config(&h, template("shop:1")).await;
    let (old, _) = hashes(&first);
    let (old_cm, _) = reads(&deployment(&h.client, &h.ns, &format!("shop-web-{old}")).await);
    // Image and config change together; the new pods crash.
    apply_config_map(
        &h.client,
        &h.ns,
        "web-config",
        json!({"GREETING": "broken"}),
    )
    .await;
    set_components(
        &h.client,
        &h.ns,
        "shop",
        json!([web_with(
            with_config(faulty_template("shop:2", "crash-loop")),
            2
        )]),
    )
    .await;
    let p = wait_phase(&h.client, &h.ns, "shop", Phase::RolledBack, WAIT).await;
    let s = p.status.as_ref().expect("status");
    assert_eq!(s.components[0].stable_hash.as_deref(), Some(old.as_str()));
    // The stable revision serves, with its own config, at full scale.
    let stable = deployment(&h.client, &h.ns, &format!("shop-web-{old}")).await;
    assert_eq!(stable.spec.as_ref().and_then(|s| s.replicas), Some(2));
    assert_eq!(reads(&stable).0, old_cm);
    assert_eq!(greeting(&h.client, &h.ns, &old_cm).await, "hello");
    let image = stable
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers[0].image.clone());
    assert_eq!(image.as_deref(), Some("shop:1"));
}

#[tokio::test]
async fn a_missing_config_map_holds_the_plan_until_it_exists() {
    let h = Harness::new("config-missing").await;
    let op = Operator::start(&h.ns, &[]).await;
    apply_secret(&h.client, &h.ns, "web-db", json!({"PASSWORD": "first"})).await;
    create(
        &h.client,
        &h.ns,
        &plan(
            "shop",
            json!({"components": [web_with(with_config(template("shop:1")), 2)]}),
        ),
    )
    .await;
    let held = wait_until(WAIT, "the plan held for its ConfigMap", || async {
        let p = plans::get(&h.client, &h.ns, "shop").await?;
        let (status, reason, message) = condition(&p, "Reconciling")?;
        (status == "True" && reason == "ConfigMissing").then_some(message)
    })
    .await;
    assert!(held.contains("ConfigMap \"web-config\""), "{held}");
    let p = plans::get(&h.client, &h.ns, "shop").await.expect("plan");
    assert_eq!(
        condition(&p, "Stalled").map(|c| c.0).as_deref(),
        Some("False")
    );
    let deployments = Api::<Deployment>::namespaced(h.client.clone(), &h.ns)
        .list(&ListParams::default())
        .await
        .expect("list");
    assert!(
        deployments.items.is_empty(),
        "no revision whose pods cannot start"
    );
    wait_until(WAIT, "one ConfigMissing Event", || async {
        let events = plan_events(&h.client, &h.ns, "shop").await;
        events
            .iter()
            .any(|e| e.0 == "ConfigMissing" && e.2.contains("web-config"))
            .then_some(())
    })
    .await;
    // It appears: the plan goes on by itself.
    apply_config_map(&h.client, &h.ns, "web-config", json!({"GREETING": "hello"})).await;
    let p = wait_phase(&h.client, &h.ns, "shop", Phase::Stable, WAIT).await;
    assert_eq!(
        condition(&p, "Ready").map(|c| c.0).as_deref(),
        Some("True"),
        "{}",
        op.log_text()
    );
}

#[tokio::test]
async fn a_secret_value_never_reaches_status_events_or_logs() {
    let h = Harness::new("config-secret").await;
    let op = Operator::start(&h.ns, &[]).await;
    let value = "s3cr3t-7f4e9a-never-printed";
    let rotated = "s3cr3t-b81c02-never-printed";
    apply_config_map(&h.client, &h.ns, "web-config", json!({"GREETING": "hello"})).await;
    apply_secret(&h.client, &h.ns, "web-db", json!({"PASSWORD": value})).await;
    create_stable(
        &h.client,
        &h.ns,
        "shop",
        json!({"components": [web_with(with_config(template("shop:1")), 1)]}),
    )
    .await;
    apply_secret(&h.client, &h.ns, "web-db", json!({"PASSWORD": rotated})).await;
    let p = wait_until(WAIT, "the Secret change released", || async {
        let p = plans::get(&h.client, &h.ns, "shop").await?;
        let s = p.status.as_ref()?;
        (s.phase == Phase::Stable && s.history.len() >= 2).then_some(p)
    })
    .await;
    // The copy: same type, same keys, the value it had.
    let copies = Api::<Secret>::namespaced(h.client.clone(), &h.ns)
        .list(&ListParams::default().labels("releaseplan.io/plan=shop"))
        .await
        .expect("list copies");
    let current = copies
        .items
        .iter()
        .find(|s| {
            s.data
                .as_ref()
                .and_then(|d| d.get("PASSWORD"))
                .is_some_and(|v| v.0 == rotated.as_bytes())
        })
        .expect("a copy of the rotated Secret");
    assert_eq!(current.type_.as_deref(), Some("Opaque"));
    assert_eq!(current.data.as_ref().map(|d| d.len()), Some(1));
    assert_eq!(current.immutable, Some(true));

    let b64 = |v: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(v)
    };
    let status = serde_json::to_string(&p).expect("plan as JSON");
    let events = Api::<Event>::namespaced(h.client.clone(), &h.ns)
        .list(&ListParams::default())
        .await
        .expect("events");
    let events = serde_json::to_string(&events.items).expect("events as JSON");
    let log = op.log_text();
    let metrics = op.metrics().await;
    for (what, text) in [
        ("the plan", &status),
        ("Events", &events),
        ("the operator's log", &log),
        ("metrics", &metrics),
    ] {
        for secret in [value, rotated] {
            assert!(
                !text.contains(secret) && !text.contains(&b64(secret)),
                "{what} show a Secret value"
            );
        }
    }
    assert!(log.contains("config copied"), "the log says what it did");
}

#[tokio::test]
async fn an_operator_upgrade_starts_no_rollout_for_plans_reading_config() {
    let h = Harness::new("config-upgrade").await;
    // The release before config versioning read every reference in place:
    // as the operator does with versioning off.
    let before = Operator::start(&h.ns, &["--config-versioning=false"]).await;
    let first = stable_with_config(&h, template("shop:1")).await;
    let (hash, _) = hashes(&first);
    let dep = deployment(&h.client, &h.ns, &format!("shop-web-{hash}")).await;
    assert_eq!(
        reads(&dep),
        ("web-config".to_string(), "web-db".to_string()),
        "read in place"
    );
    let uids = pod_uids(&h.client, &h.ns).await;
    drop(before);

    // The upgrade: the plan's revision stays, its content is recorded.
    let after = Operator::start(&h.ns, &[]).await;
    let recorded = wait_until(WAIT, "the content recorded by the new operator", || async {
        let p = plans::get(&h.client, &h.ns, "shop").await?;
        let c = p.status.as_ref()?.components.first()?.clone();
        c.config
            .iter()
            .any(|k| k.name == "web-config" && k.digest.is_some() && k.copy.is_none())
            .then_some(p)
    })
    .await;
    let s = recorded.status.as_ref().expect("status");
    assert_eq!(s.phase, Phase::Stable);
    assert_eq!(
        hashes(&recorded).0,
        hash,
        "no new revision after the upgrade"
    );
    assert_eq!(
        s.history.len(),
        first.status.as_ref().expect("status").history.len()
    );
    assert_eq!(pod_uids(&h.client, &h.ns).await, uids, "no pod replaced");

    // The first content change after the upgrade is released, with copies.
    apply_config_map(&h.client, &h.ns, "web-config", json!({"GREETING": "bye"})).await;
    let rolling = wait_phase(&h.client, &h.ns, "shop", Phase::RollingOut, WAIT).await;
    let (new, stable) = hashes(&rolling);
    assert_eq!(stable.as_deref(), Some(hash.as_str()));
    let new_dep = wait_until(WAIT, "the new revision's Deployment", || async {
        Api::<Deployment>::namespaced(h.client.clone(), &h.ns)
            .get_opt(&format!("shop-web-{new}"))
            .await
            .ok()?
    })
    .await;
    assert!(
        reads(&new_dep).0.starts_with("web-config-"),
        "{}",
        after.log_text()
    );
}

/// The chart upgrade that made "no namespace" the default of
/// `config.namespaces`: the plan's revision reads copies, the operator
/// restarted without access to its namespace keeps that revision (no pod
/// replaced); a new reference is read live and the plan says so, once.
#[tokio::test]
async fn losing_config_access_replaces_no_pod_and_a_new_reference_is_read_live() {
    let h = Harness::new("config-denied").await;
    let before = Operator::start(&h.ns, &[]).await;
    let first = stable_with_config(&h, template("shop:1")).await;
    let (hash, _) = hashes(&first);
    let dep = deployment(&h.client, &h.ns, &format!("shop-web-{hash}")).await;
    let (cm_copy, secret_copy) = reads(&dep);
    assert!(cm_copy.starts_with("web-config-") && secret_copy.starts_with("web-db-"));
    let uids = pod_uids(&h.client, &h.ns).await;
    drop(before);

    // Without access (the binary's default: no namespace).
    let after = Operator::launcher(&h.ns)
        .env("RELEASEPLAN_CONFIG_NAMESPACES", "")
        .start()
        .await;
    // Its first reconcile of the plan, finished (a Stable plan whose status
    // does not change gets one): the revision stays.
    wait_until(
        WAIT,
        "the new operator's first reconcile to end",
        || async {
            (after
                .counter("releaseplan_reconcile_duration_seconds_count")
                .await
                >= 1.0)
                .then_some(())
        },
    )
    .await;
    let p = wait_phase(&h.client, &h.ns, "shop", Phase::Stable, WAIT).await;
    assert_eq!(hashes(&p).0, hash, "no new revision: {}", after.log_text());
    assert_eq!(pod_uids(&h.client, &h.ns).await, uids, "no pod replaced");
    assert!(
        condition(&p, "ConfigVersioned").is_none(),
        "every reference keeps its copy"
    );
    let dep = deployment(&h.client, &h.ns, &format!("shop-web-{hash}")).await;
    assert_eq!(reads(&dep), (cm_copy.clone(), secret_copy.clone()));

    // A new reference: read live, said once; the recorded copies kept.
    let mut t = with_config(template("shop:2"));
    t["spec"]["containers"][0]["envFrom"] = json!([
        {"configMapRef": {"name": "web-config"}},
        {"secretRef": {"name": "web-extra"}}]);
    apply_secret(&h.client, &h.ns, "web-extra", json!({"X": "1"})).await;
    set_components(&h.client, &h.ns, "shop", json!([web_with(t, 2)])).await;
    let said = wait_until(WAIT, "ConfigVersioned False", || async {
        let p = plans::get(&h.client, &h.ns, "shop").await?;
        condition(&p, "ConfigVersioned").filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(said.1, "ConfigAccessDenied");
    assert!(said.2.contains("web: Secret web-extra"), "{}", said.2);
    let rolling = plans::get(&h.client, &h.ns, "shop").await.expect("plan");
    let (new, _) = hashes(&rolling);
    let new_dep = wait_until(WAIT, "the new revision's Deployment", || async {
        Api::<Deployment>::namespaced(h.client.clone(), &h.ns)
            .get_opt(&format!("shop-web-{new}"))
            .await
            .ok()?
    })
    .await;
    let spec = new_dep
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec");
    let env_from = serde_json::to_value(&spec.containers[0].env_from).expect("json");
    assert_eq!(
        env_from,
        json!([{"configMapRef": {"name": cm_copy}}, {"secretRef": {"name": "web-extra"}}]),
        "the recorded copy, and the new Secret itself"
    );
    let events = plan_events(&h.client, &h.ns, "shop").await;
    assert_eq!(
        events
            .iter()
            .filter(|e| e.0 == "ConfigNotVersioned")
            .count(),
        1,
        "{events:?}"
    );
}

#[tokio::test]
async fn a_copy_the_quota_refuses_holds_only_its_revision_and_status_says_so() {
    let h = Harness::new("config-quota").await;
    let op = Operator::start(&h.ns, &[]).await;
    let first = stable_with_config(&h, template("shop:1")).await;
    let (old, _) = hashes(&first);
    // No room for one more ConfigMap: a new copy is refused (403, quota).
    let quotas =
        Api::<k8s_openapi::api::core::v1::ResourceQuota>::namespaced(h.client.clone(), &h.ns);
    let quota = |n: &str| {
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "cm"},
               "spec": {"hard": {"count/configmaps": n}}})
    };
    let used = Api::<ConfigMap>::namespaced(h.client.clone(), &h.ns)
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .len()
        .to_string();
    quotas
        .patch(
            "cm",
            &PatchParams::apply(GITOPS).force(),
            &Patch::Apply(quota(&used)),
        )
        .await
        .expect("quota");
    wait_until(WAIT, "the quota's usage counted", || async {
        let q = quotas.get("cm").await.ok()?;
        let used = q.status?.used?;
        used.get("count/configmaps").map(|_| ())
    })
    .await;
    apply_config_map(&h.client, &h.ns, "web-config", json!({"GREETING": "bye"})).await;
    let refused = wait_until(WAIT, "the refused copy in status", || async {
        let p = plans::get(&h.client, &h.ns, "shop").await?;
        let (status, reason, message) = condition(&p, "Reconciling")?;
        (status == "True" && reason == "ConfigWriteFailed").then_some((p, message))
    })
    .await;
    assert!(refused.1.contains("ConfigMap web-config-"), "{}", refused.1);
    assert!(refused.1.contains("exceeded quota"), "{}", refused.1);
    // The stable revision keeps serving; the new one has no Deployment yet.
    let (new, _) = hashes(&refused.0);
    assert_ne!(new, old);
    let stable = deployment(&h.client, &h.ns, &format!("shop-web-{old}")).await;
    assert_eq!(stable.spec.as_ref().and_then(|s| s.replicas), Some(2));
    let missing = Api::<Deployment>::namespaced(h.client.clone(), &h.ns)
        .get_opt(&format!("shop-web-{new}"))
        .await
        .expect("get");
    assert!(
        missing.is_none(),
        "a revision whose copy is missing is not created"
    );
    wait_until(WAIT, "a ConfigRefused Event", || async {
        plan_events(&h.client, &h.ns, "shop")
            .await
            .iter()
            .any(|e| e.0 == "ConfigRefused")
            .then_some(())
    })
    .await;
    // Room again: the release goes on by itself.
    quotas
        .patch(
            "cm",
            &PatchParams::apply(GITOPS).force(),
            &Patch::Apply(quota("100")),
        )
        .await
        .expect("quota");
    wait_until(WAIT, "the new revision at its first step", || async {
        let p = plans::get(&h.client, &h.ns, "shop").await?;
        let s = p.status.as_ref()?;
        (s.phase == Phase::RollingOut && s.components[0].current_ready == 1).then_some(())
    })
    .await;
    let p = plans::get(&h.client, &h.ns, "shop").await.expect("plan");
    assert_eq!(
        condition(&p, "Reconciling").map(|c| c.1).as_deref(),
        Some("RollingOut"),
        "{}",
        op.log_text()
    );
}
