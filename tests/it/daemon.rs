//! DaemonSet components on the local control plane: kube-controller-manager's
//! own DaemonSet controller on kwok's nodes. The canary is a share of the
//! nodes (the first by name), a node that joins mid-rollout gets the stable
//! revision, promotion takes every node, a crash-looping canary goes back
//! to the stable revision on every node, and no more nodes than
//! `maxUnavailable` are ever without a ready pod while nodes move.
//!
//! The node a test adds carries a taint of its own, tolerated only by its
//! test's DaemonSet, so no other test's pods land there; it is deleted at
//! the end.

use crate::support;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use releaseplan::api::Phase;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use support::fixtures::plan;
use support::operator::Operator;
use support::plans::{create, request, set_components, wait_phase};
use support::{Harness, WAIT, wait_until};

/// The `agent` component: a DaemonSet of `image`, tolerating the taint
/// `releaseplan.io/test=<ns>` (a node a test adds).
fn agent(image: &str, ns: &str, fault: Option<&str>, max_unavailable: Option<i32>) -> Value {
    let mut c = json!({
        "name": "agent", "kind": "DaemonSet",
        "template": {
            "metadata": {"labels": {"app": "agent"}},
            "spec": {
                "containers": [{"name": "agent", "image": image}],
                "tolerations": [{"key": "releaseplan.io/test", "operator": "Equal", "value": ns, "effect": "NoSchedule"}]
            }
        }
    });
    if let Some(f) = fault {
        c["template"]["metadata"]["annotations"] = json!({"kwok.releaseplan.io/fault": f});
    }
    if let Some(m) = max_unavailable {
        c["daemonSet"] = json!({"maxUnavailable": m});
    }
    c
}

/// The node of each of the plan's agent pods: node → (image, ready).
async fn agent_pods(client: &Client, ns: &str) -> BTreeMap<String, (String, bool)> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("releaseplan.io/component=agent"))
        .await
        .unwrap();
    pods.items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let spec = p.spec.as_ref()?;
            let node = spec.node_name.clone()?;
            let image = spec.containers.first()?.image.clone().unwrap_or_default();
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            Some((node, (image, ready)))
        })
        .collect()
}

/// The cluster's kwok nodes without a taint (those every DaemonSet runs on).
async fn plain_nodes(client: &Client) -> Vec<String> {
    let mut nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("type=kwok"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_none_or(Vec::is_empty)
        })
        .map(|n| n.name_any())
        .collect();
    nodes.sort();
    nodes
}

/// Waits until every node of `nodes` runs one Ready agent pod of the image
/// `images` gives it (and no other node runs one).
async fn wait_images(client: &Client, ns: &str, want: &BTreeMap<String, String>, what: &str) {
    wait_until(WAIT, what, || async {
        let pods = agent_pods(client, ns).await;
        let seen: BTreeMap<String, String> = pods
            .iter()
            .map(|(n, (i, _))| (n.clone(), i.clone()))
            .collect();
        (&seen == want && pods.values().all(|(_, r)| *r)).then_some(())
    })
    .await;
}

/// A kwok node of the test's own, tainted for its DaemonSet only.
async fn add_node(client: &Client, ns: &str) -> String {
    let name = format!("kwok-node-{ns}");
    let node: Node = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok-test"}
        },
        "spec": {"taints": [{"key": "releaseplan.io/test", "value": ns, "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "20"},
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "20"}
        }
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    name
}

/// Deletes the node when dropped (the test's end, pass or fail), with a
/// client of its own: the test's runtime is blocked in the drop.
struct NodeGuard(String);

impl Drop for NodeGuard {
    fn drop(&mut self) {
        let name = self.0.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let client = support::cluster::client().await;
                let _ = Api::<Node>::all(client)
                    .delete(&name, &DeleteParams::default())
                    .await;
            });
        })
        .join();
    }
}

#[tokio::test]
async fn a_daemon_canary_is_a_share_of_the_nodes_and_a_node_that_joins_gets_stable() {
    let Harness { client, ns } = Harness::new("ds-canary").await;
    let nodes = plain_nodes(&client).await;
    assert!(
        nodes.len() >= 3,
        "the test cluster has three kwok nodes: {nodes:?}"
    );
    let _op = Operator::start(&ns, &[]).await;
    // 25% of 3 nodes, and of 4 once a node joins: one (a step's weight is
    // a share of the eligible nodes, counted again as they come and go).
    let steps = json!([{"setWeight": 25}, {"pause": {}}, {"setWeight": 100}]);
    let spec =
        json!({"components": [agent("agent:1", &ns, None, None)], "strategy": {"steps": steps}});
    create(&client, &ns, &plan("shop", spec)).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let all = |image: &str, nodes: &[String]| -> BTreeMap<String, String> {
        nodes
            .iter()
            .map(|n| (n.clone(), image.to_string()))
            .collect()
    };
    wait_images(
        &client,
        &ns,
        &all("agent:1", &nodes),
        "agent:1 on every node",
    )
    .await;

    set_components(
        &client,
        &ns,
        "shop",
        json!([agent("agent:2", &ns, None, None)]),
    )
    .await;
    let mut want = all("agent:1", &nodes);
    want.insert(nodes[0].clone(), "agent:2".into());
    wait_images(&client, &ns, &want, "agent:2 on the first node only").await;
    wait_until(WAIT, "the pause step", || async {
        let s = support::plans::get(&client, &ns, "shop").await?.status?;
        (s.phase == Phase::RollingOut && s.current_step == 1).then_some(())
    })
    .await;
    // The plugin shows each revision's nodes.
    let out = tokio::task::spawn_blocking({
        let ns = ns.clone();
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-releaseplan"))
                .args(["get", "shop", "-n", &ns, "-o", "json"])
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["components"][0]["kind"], "DaemonSet", "{v}");
    let revs = v["components"][0]["revisions"].as_array().unwrap();
    let current = revs.iter().find(|r| r["role"] == "current").unwrap();
    assert_eq!(current["nodes"], json!([nodes[0]]), "{v}");

    // A node joins mid-rollout: it gets the stable revision.
    let node = add_node(&client, &ns).await;
    let _guard = NodeGuard(node.clone());
    want.insert(node.clone(), "agent:1".into());
    wait_images(&client, &ns, &want, "the new node on agent:1").await;

    request(&client, &ns, "shop", "promote").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let mut every: Vec<String> = nodes.clone();
    every.push(node.clone());
    wait_images(
        &client,
        &ns,
        &all("agent:2", &every),
        "agent:2 on every node, the new one too",
    )
    .await;
    // One DaemonSet left, limited to no node list.
    let sets = Api::<DaemonSet>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(sets.items.len(), 1);
    let affinity = sets.items[0]
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref()?.affinity.clone()?.node_affinity);
    assert!(affinity.is_none(), "{affinity:?}");
}

#[tokio::test]
async fn a_crash_looping_daemon_canary_goes_back_on_every_node_never_more_than_max_unavailable_down()
 {
    let Harness { client, ns } = Harness::new("ds-crash").await;
    let nodes = plain_nodes(&client).await;
    let _op = Operator::start(&ns, &[]).await;
    // The last step moves every node, one at a time (maxUnavailable 1).
    let spec = json!({"components": [agent("agent:1", &ns, None, Some(1))],
                      "health": {"progressDeadlineSeconds": 600}});
    create(&client, &ns, &plan("shop", spec)).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let all = |image: &str| -> BTreeMap<String, String> {
        nodes
            .iter()
            .map(|n| (n.clone(), image.to_string()))
            .collect()
    };
    wait_images(&client, &ns, &all("agent:1"), "agent:1 on every node").await;

    // A good release with no steps: every node moves, never two at once
    // without a ready pod.
    set_components(
        &client,
        &ns,
        "shop",
        json!([agent("agent:2", &ns, None, Some(1))]),
    )
    .await;
    let mut worst = 0;
    let started = std::time::Instant::now();
    loop {
        let pods = agent_pods(&client, &ns).await;
        let down = nodes
            .iter()
            .filter(|n| !pods.get(*n).is_some_and(|(_, r)| *r))
            .count();
        worst = worst.max(down);
        if nodes
            .iter()
            .all(|n| pods.get(n).is_some_and(|(i, r)| i == "agent:2" && *r))
        {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "agent:2 not on every node: {pods:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        worst <= 1,
        "{worst} nodes were without a ready pod at once (maxUnavailable 1)"
    );
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;

    // A crash-looping release: rolled back, every node on agent:2 again.
    set_components(
        &client,
        &ns,
        "shop",
        json!([agent("agent:3", &ns, Some("crash-loop"), Some(1))]),
    )
    .await;
    let p = wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
    wait_images(&client, &ns, &all("agent:2"), "agent:2 back on every node").await;
    let s = p.status.unwrap();
    assert_eq!(s.failure.map(|f| f.gate).as_deref(), Some("podHealth"));
    let sets = Api::<DaemonSet>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(
        sets.items.len(),
        1,
        "only the stable revision's DaemonSet is left"
    );
}

/// A StatefulSet and a DaemonSet behind a webhook gate: a gate that answers
/// 503 rolls both back, one that answers 204 lets both through.
#[tokio::test]
async fn a_webhook_gate_holds_and_rolls_back_a_stateful_set_and_a_daemon_set_as_one() {
    use axum::Router;
    use axum::http::StatusCode;
    use axum::routing::post;
    let Harness { client, ns } = Harness::new("ds-gated").await;
    let nodes = plain_nodes(&client).await;
    let code = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(503));
    let addr = support::servers::serve(Router::new().route(
        "/check",
        post({
            let code = code.clone();
            move || {
                let code = code.clone();
                async move {
                    StatusCode::from_u16(code.load(std::sync::atomic::Ordering::SeqCst)).unwrap()
                }
            }
        }),
    ))
    .await;
    let _op = Operator::start(&ns, &[]).await;
    let components = |v: &str| {
        json!([
            {"name": "db", "kind": "StatefulSet", "replicas": 2,
             "template": support::fixtures::template(&format!("db:{v}"))},
            agent(&format!("agent:{v}"), &ns, None, None),
        ])
    };
    create(
        &client,
        &ns,
        &plan("shop", json!({"components": components("1")})),
    )
    .await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    let hooks = json!([{"name": "smoke", "url": format!("http://{addr}/check"), "timeoutSeconds": 2, "retries": 0}]);
    support::plans::patch_spec(
        &client,
        &ns,
        "shop",
        json!({"components": components("2"), "strategy": {"steps": [{"setWeight": 50}]}, "health": {"webhooks": hooks}}),
    )
    .await;
    let p = wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
    assert_eq!(
        p.status.unwrap().failure.map(|f| f.gate).as_deref(),
        Some("smoke")
    );
    let all = |image: &str| -> BTreeMap<String, String> {
        nodes
            .iter()
            .map(|n| (n.clone(), image.to_string()))
            .collect()
    };
    wait_images(&client, &ns, &all("agent:1"), "agent:1 back on every node").await;
    let images = |pods: Vec<Pod>| -> Vec<String> {
        let mut v: Vec<String> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.spec.as_ref()?.containers.first()?.image.clone())
            .collect();
        v.sort();
        v
    };
    wait_until(WAIT, "db back on db:1", || async {
        let pods = Api::<Pod>::namespaced(client.clone(), &ns)
            .list(&ListParams::default().labels("releaseplan.io/component=db"))
            .await
            .ok()?;
        (images(pods.items) == ["db:1", "db:1"]).then_some(())
    })
    .await;

    // The gate passes now: a new revision goes through.
    code.store(204, std::sync::atomic::Ordering::SeqCst);
    support::plans::patch_spec(&client, &ns, "shop", json!({"components": components("3")})).await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_images(&client, &ns, &all("agent:3"), "agent:3 on every node").await;
}
