//! StatefulSet components on the local control plane: kube-controller-manager's
//! own StatefulSet and PersistentVolume controllers, kwok pods, claims bound to
//! PersistentVolumes made for each test. The canary is the highest ordinals
//! by partition, each pod keeps its claim across revisions, a crash-looping
//! canary is rolled back past the pod the StatefulSet controller alone would
//! never replace, and a StatefulSet and a Deployment roll back as one.

use crate::support;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use releaseplan::api::Phase;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use support::fixtures::{faulty_template, plan, template, web_with};
use support::operator::Operator;
use support::plans::{create, request, set_components, wait_phase};
use support::{Harness, WAIT, wait_until};

/// Runs the plugin; its standard output (it must succeed).
async fn plugin(args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(ToString::to_string).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-releaseplan"))
            .args(&args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    })
    .await
    .unwrap()
}

/// `count` PersistentVolumes of a storage class of the namespace's own, so
/// its claims bind to them and to nothing else.
async fn volumes(client: &Client, ns: &str, count: usize) -> String {
    let class = format!("rp-{ns}");
    let api: Api<PersistentVolume> = Api::all(client.clone());
    for i in 0..count {
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": format!("{ns}-pv-{i}")},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": class,
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": format!("/tmp/releaseplan-it/{ns}/{i}")}
            }
        }))
        .unwrap();
        api.create(&PostParams::default(), &pv).await.unwrap();
    }
    class
}

/// The `db` component: a StatefulSet of `replicas` pods, each with a 1Gi claim.
fn db(template: Value, replicas: i32, class: &str) -> Value {
    json!({
        "name": "db", "kind": "StatefulSet", "replicas": replicas,
        "template": template,
        "statefulSet": {
            "serviceName": "db",
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                         "resources": {"requests": {"storage": "1Gi"}}}
            }]
        }
    })
}

/// The pods of the plan's `db` component: name → (image, ready, uid).
async fn db_pods(client: &Client, ns: &str) -> BTreeMap<String, (String, bool, String)> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("releaseplan.io/component=db"))
        .await
        .unwrap();
    pods.items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let image = p
                .spec
                .as_ref()
                .and_then(|s| s.containers.first()?.image.clone())
                .unwrap_or_default();
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            (p.name_any(), (image, ready, p.uid().unwrap_or_default()))
        })
        .collect()
}

/// Waits until the `db` pods are exactly `want` (name → image), all Ready.
async fn wait_pods(client: &Client, ns: &str, want: &[(&str, &str)], what: &str) {
    let want: BTreeMap<String, String> = want
        .iter()
        .map(|(n, i)| ((*n).to_string(), (*i).to_string()))
        .collect();
    wait_until(WAIT, what, || async {
        let pods = db_pods(client, ns).await;
        let seen: BTreeMap<String, String> = pods
            .iter()
            .map(|(n, (i, _, _))| (n.clone(), i.clone()))
            .collect();
        (seen == want && pods.values().all(|(_, ready, _)| *ready)).then_some(())
    })
    .await;
}

/// Each claim's uid, by name, once all are Bound.
async fn bound_claims(client: &Client, ns: &str, count: usize) -> BTreeMap<String, String> {
    wait_until(WAIT, "every claim bound", || async {
        let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .ok()?;
        let bound: BTreeMap<String, String> = claims
            .items
            .iter()
            .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
            .map(|c| (c.name_any(), c.uid().unwrap_or_default()))
            .collect();
        (bound.len() == count).then_some(bound)
    })
    .await
}

#[tokio::test]
async fn a_stateful_canary_moves_the_highest_ordinals_keeps_the_volumes_and_survives_a_restart() {
    let Harness { client, ns } = Harness::new("sts-canary").await;
    let class = volumes(&client, &ns, 3).await;
    let mut op = Operator::start(&ns, &[]).await;
    // 33% of 3: one pod (ceil(0.99)).
    let steps = json!([{"setWeight": 33}, {"pause": {}}, {"setWeight": 100}]);
    let spec =
        json!({"components": [db(template("db:1"), 3, &class)], "strategy": {"steps": steps}});
    create(&client, &ns, &plan("shop", spec)).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_pods(
        &client,
        &ns,
        &[
            ("shop-db-0", "db:1"),
            ("shop-db-1", "db:1"),
            ("shop-db-2", "db:1"),
        ],
        "three db:1 pods",
    )
    .await;
    let claims = bound_claims(&client, &ns, 3).await;
    assert_eq!(
        claims.keys().cloned().collect::<Vec<_>>(),
        ["data-shop-db-0", "data-shop-db-1", "data-shop-db-2"]
    );
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let set = sets.get("shop-db").await.unwrap();
    let plan_uid = support::plans::get(&client, &ns, "shop")
        .await
        .unwrap()
        .uid();
    assert_eq!(
        set.owner_references().first().map(|o| Some(o.uid.clone())),
        Some(plan_uid)
    );
    // No Deployment for a StatefulSet component.
    let deployments =
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .unwrap();
    assert!(deployments.items.is_empty());

    // The canary: the highest ordinal, replaced in place (no fourth pod).
    set_components(
        &client,
        &ns,
        "shop",
        json!([db(template("db:2"), 3, &class)]),
    )
    .await;
    wait_pods(
        &client,
        &ns,
        &[
            ("shop-db-0", "db:1"),
            ("shop-db-1", "db:1"),
            ("shop-db-2", "db:2"),
        ],
        "db-2 on the new revision",
    )
    .await;
    let p = wait_until(WAIT, "the pause step", || async {
        let p = support::plans::get(&client, &ns, "shop").await?;
        let s = p.status.clone()?;
        (s.phase == Phase::RollingOut && s.current_step == 1).then_some(p)
    })
    .await;
    let c = &p.status.unwrap().components[0];
    assert_eq!((c.current_ready, c.stable_ready, c.replicas), (1, 2, 3));
    let set = sets.get("shop-db").await.unwrap();
    let partition = set
        .spec
        .and_then(|s| s.update_strategy?.rolling_update?.partition);
    assert_eq!(partition, Some(2));

    // The plugin shows the kind and each revision's ordinals.
    let get = plugin(&["get", "shop", "-n", &ns, "-o", "json"]).await;
    let v: Value = serde_json::from_str(&get).unwrap();
    let component = &v["components"][0];
    assert_eq!(component["kind"], "StatefulSet", "{get}");
    let revs = component["revisions"].as_array().unwrap();
    let by_role = |role: &str| revs.iter().find(|r| r["role"] == role).cloned().unwrap();
    assert_eq!(by_role("current")["ordinals"], json!([2]), "{get}");
    assert_eq!(by_role("current")["images"], json!(["db:2"]), "{get}");
    assert_eq!(by_role("stable")["ordinals"], json!([0, 1]), "{get}");
    assert_eq!(by_role("stable")["deployment"], "shop-db");
    let tree = plugin(&["get", "shop", "-n", &ns]).await;
    assert!(
        tree.contains("db  StatefulSet") && tree.contains("ordinals 0-1"),
        "{tree}"
    );
    // A preview of db:3 from the live plan starts from its pods and the
    // one set: it ends Stable with never a pod more than the replicas.
    let next = plan(
        "shop",
        json!({"components": [db(template("db:3"), 3, &class)], "strategy": {"steps": steps}}),
    );
    let file = std::env::temp_dir().join(format!("{ns}-shop.json"));
    std::fs::write(&file, serde_json::to_string(&next).unwrap()).unwrap();
    let preview = plugin(&[
        "preview",
        "-f",
        file.to_str().unwrap(),
        "--live",
        "-n",
        &ns,
        "-o",
        "json",
    ])
    .await;
    let v: Value = serde_json::from_str(&preview).unwrap();
    assert_eq!(
        (v["result"].as_str(), v["fromLive"].as_bool()),
        (Some("Stable"), Some(true)),
        "{preview}"
    );
    assert_eq!(v["peak"][0]["pods"], 3, "{preview}");
    assert_eq!(v["peak"][0]["extraPods"], 0, "{preview}");

    // The operator dies at the pause; a new one carries on from status.
    op.kill();
    let _op = Operator::start(&ns, &[]).await;
    request(&client, &ns, "shop", "promote").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_pods(
        &client,
        &ns,
        &[
            ("shop-db-0", "db:2"),
            ("shop-db-1", "db:2"),
            ("shop-db-2", "db:2"),
        ],
        "every pod on db:2",
    )
    .await;
    // Each pod kept its claim: the same objects, still bound.
    assert_eq!(bound_claims(&client, &ns, 3).await, claims);
    let set = sets.get("shop-db").await.unwrap();
    let partition = set
        .spec
        .and_then(|s| s.update_strategy?.rolling_update?.partition);
    assert_eq!(partition, Some(0));
}

#[tokio::test]
async fn a_crash_looping_stateful_canary_is_rolled_back_past_the_pod_the_set_would_wait_on() {
    let Harness { client, ns } = Harness::new("sts-crash").await;
    let class = volumes(&client, &ns, 3).await;
    let _op = Operator::start(&ns, &[]).await;
    let steps = json!([{"setWeight": 34}, {"pause": {}}, {"setWeight": 100}]);
    let spec = json!({"components": [db(template("db:1"), 3, &class)], "strategy": {"steps": steps},
                      "health": {"progressDeadlineSeconds": 600}});
    create(&client, &ns, &plan("shop", spec)).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_pods(
        &client,
        &ns,
        &[
            ("shop-db-0", "db:1"),
            ("shop-db-1", "db:1"),
            ("shop-db-2", "db:1"),
        ],
        "three db:1 pods",
    )
    .await;
    let claims = bound_claims(&client, &ns, 3).await;
    let before = db_pods(&client, &ns).await;

    // The new revision's pod crash-loops: Running, never Ready. With the
    // default OrderedReady policy the StatefulSet controller never moves
    // past it, even once the template is reverted.
    set_components(
        &client,
        &ns,
        "shop",
        json!([db(faulty_template("db:2", "crash-loop"), 3, &class)]),
    )
    .await;
    let p = wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
    wait_pods(
        &client,
        &ns,
        &[
            ("shop-db-0", "db:1"),
            ("shop-db-1", "db:1"),
            ("shop-db-2", "db:1"),
        ],
        "every pod back on db:1 and Ready",
    )
    .await;
    let after = db_pods(&client, &ns).await;
    // Only the canary's ordinal was replaced; the stable pods never moved.
    assert_eq!(after["shop-db-0"].2, before["shop-db-0"].2);
    assert_eq!(after["shop-db-1"].2, before["shop-db-1"].2);
    assert_ne!(after["shop-db-2"].2, before["shop-db-2"].2);
    assert_eq!(
        bound_claims(&client, &ns, 3).await,
        claims,
        "the claims are kept"
    );
    let stalled = p
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled")
        .cloned()
        .unwrap();
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "RolledBack")
    );
}

#[tokio::test]
async fn a_stateful_set_and_a_deployment_roll_back_as_one() {
    let Harness { client, ns } = Harness::new("sts-mixed").await;
    let class = volumes(&client, &ns, 2).await;
    let _op = Operator::start(&ns, &[]).await;
    let steps = json!([{"setWeight": 50}, {"pause": {"duration": "2s"}}, {"setWeight": 100}]);
    let spec = json!({
        "components": [db(template("db:1"), 2, &class), web_with(template("web:1"), 2)],
        "strategy": {"steps": steps},
        "health": {"progressDeadlineSeconds": 600}
    });
    create(&client, &ns, &plan("shop", spec)).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_pods(
        &client,
        &ns,
        &[("shop-db-0", "db:1"), ("shop-db-1", "db:1")],
        "two db:1 pods",
    )
    .await;

    // Both change; the web Deployment's new pods crash: the StatefulSet,
    // whose own new pod is healthy, goes back with it.
    set_components(
        &client,
        &ns,
        "shop",
        json!([
            db(template("db:2"), 2, &class),
            web_with(faulty_template("web:2", "crash-loop"), 2)
        ]),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
    wait_pods(
        &client,
        &ns,
        &[("shop-db-0", "db:1"), ("shop-db-1", "db:1")],
        "db back on db:1",
    )
    .await;
    let revs = support::plans::revisions(&client, &ns, "shop").await;
    assert_eq!(
        support::plans::by_image(&revs, "web:1"),
        Some((2, 2)),
        "{revs:?}"
    );
    let history = support::plans::get(&client, &ns, "shop")
        .await
        .unwrap()
        .status
        .unwrap()
        .history;
    let last = history.last().unwrap();
    assert_eq!(last.outcome, releaseplan::api::Outcome::RolledBack);
}

#[tokio::test]
async fn the_api_server_refuses_what_a_stateful_set_cannot_have_or_change() {
    let Harness { client, ns } = Harness::new("sts-admission").await;
    let api: Api<releaseplan::api::ReleasePlan> = Api::namespaced(client.clone(), &ns);
    let refused = |spec: Value| {
        let api = api.clone();
        async move {
            match api.create(&PostParams::default(), &plan("bad", spec)).await {
                Err(kube::Error::Api(e)) => e.message,
                other => panic!("created: {other:?}"),
            }
        }
    };
    let mut routed = db(template("db:1"), 1, "x");
    routed["traffic"] = json!({"port": 80});
    let msg = refused(json!({"components": [routed]})).await;
    assert!(
        msg.contains("spec.components[0].kind") && msg.contains("Deployment components only"),
        "{msg}"
    );
    let mut stray = web_with(template("web:1"), 1);
    stray["statefulSet"] = json!({"serviceName": "web"});
    let msg = refused(json!({"components": [stray]})).await;
    assert!(
        msg.contains("spec.components[0].statefulSet")
            && msg.contains("only with kind: StatefulSet"),
        "{msg}"
    );
    // A component keeps its kind.
    create(
        &client,
        &ns,
        &plan(
            "shop",
            json!({"components": [web_with(template("web:1"), 1)]}),
        ),
    )
    .await;
    let mut moved = db(template("web:1"), 1, "x");
    moved["name"] = json!("web");
    let change =
        support::plans::patch_spec_result(&client, &ns, "shop", json!({"components": [moved]}))
            .await;
    let msg = change.expect_err("kind changed").to_string();
    assert!(msg.contains("kind cannot change"), "{msg}");
}

#[tokio::test]
async fn a_change_kubernetes_keeps_immutable_is_reported_as_refused() {
    let Harness { client, ns } = Harness::new("sts-immutable").await;
    let class = volumes(&client, &ns, 1).await;
    let _op = Operator::start(&ns, &[]).await;
    let spec = json!({"components": [db(template("db:1"), 1, &class)]});
    create(&client, &ns, &plan("shop", spec)).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    // A new image and another headless Service: the API server refuses the
    // StatefulSet's new serviceName, and the plan says so.
    let mut moved = db(template("db:2"), 1, &class);
    moved["statefulSet"]["serviceName"] = json!("db-2");
    set_components(&client, &ns, "shop", json!([moved])).await;
    let (status, reason, message) = wait_until(WAIT, "the refusal in status", || async {
        let p = support::plans::get(&client, &ns, "shop").await?;
        support::plans::condition(&p, "Stalled").filter(|(s, _, _)| s == "True")
    })
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "DeploymentRefused"),
        "{message}"
    );
    assert!(message.contains("StatefulSet shop-db"), "{message}");
    // Nothing moved: the pod still runs db:1.
    wait_pods(&client, &ns, &[("shop-db-0", "db:1")], "db-0 untouched").await;
}
