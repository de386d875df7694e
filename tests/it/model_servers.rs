//! Model servers on the local control plane: kwok nodes advertising
//! `nvidia.com/gpu`, filled to the last GPU, the real kube-scheduler placing
//! pods on them, and stand-in vLLM servers (`e2e/model-server.py`) on the
//! pods' own loopback IPs (support::gpu).
//!
//! - Without `capacity`, a canary on full GPUs stays Pending (the scheduler
//!   finds no GPU) and the release fails on its progress deadline; with
//!   `capacity: {maxSurge: 0, maxUnavailable: 1}` the same release completes,
//!   never more pods than GPUs, never fewer than three of four ready.
//! - With `serving`, a pod that is Ready but still loading its model does
//!   not count, and `serving.warmup` keeps a short progress deadline from
//!   failing a model that loads for longer.
//! - The ready-made vLLM gate (integrations/vllm) against a real Prometheus
//!   scraping the stand-ins rolls back a version whose time to first token
//!   is three times the stable one's, and lets an equal one through.

use crate::support;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use releaseplan::api::Phase;
use releaseplan::api::template::ClusterGateTemplate;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::fixtures::plan;
use support::gpu::{GpuNodes, ModelServers, model_server_template};
use support::operator::Operator;
use support::plans::{create, get, set_components, wait_phase};
use support::servers::Prometheus;
use support::{Harness, WAIT, wait_until};

/// The `llama` component: `replicas` pods of `image` with the stand-in's
/// settings `env`, and the extra fields `extra` (capacity, serving).
fn llama(ns: &str, image: &str, replicas: i32, env: &[(&str, &str)], extra: &Value) -> Value {
    let mut c = json!({
        "name": "llama", "replicas": replicas,
        "template": model_server_template(ns, image, env)
    });
    if let Some(m) = extra.as_object() {
        for (k, v) in m {
            c[k] = v.clone();
        }
    }
    c
}

/// The plan's pods that are not terminating: (image, scheduled, ready).
async fn llama_pods(client: &Client, ns: &str) -> Vec<(String, bool, bool)> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("releaseplan.io/component=llama"))
        .await
        .unwrap();
    pods.items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let image = p
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default();
            let scheduled = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            (image, scheduled, ready)
        })
        .collect()
}

/// Whether a pod of `image` is Pending because no node has a GPU free.
async fn unschedulable(client: &Client, ns: &str, image: &str) -> bool {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("releaseplan.io/component=llama"))
        .await
        .unwrap();
    pods.items.iter().any(|p| {
        let img = p
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.image.as_deref());
        let cond = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
        img == Some(image)
            && cond.is_some_and(|c| {
                c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
                    && c.message
                        .as_deref()
                        .is_some_and(|m| m.contains("nvidia.com/gpu"))
            })
    })
}

#[tokio::test]
async fn on_full_gpus_the_default_leaves_the_canary_pending_and_no_surge_completes() {
    let Harness { client, ns } = Harness::new("gpu-full").await;
    // Two nodes of two GPUs: four GPUs for four replicas, none spare.
    let _nodes = GpuNodes::add(&client, &ns, 2, 2, None).await;
    let _op = Operator::start(&ns, &[]).await;
    let steps = json!([{"setWeight": 50}, {"pause": {"duration": "2s"}}]);
    let spec = json!({
        "components": [llama(&ns, "vllm:0.6.3", 4, &[], &json!({}))],
        "strategy": {"steps": steps},
        "health": {"progressDeadlineSeconds": 20}
    });
    create(&client, &ns, &plan("llama", spec)).await;
    wait_phase(&client, &ns, "llama", Phase::Stable, WAIT).await;

    // Without capacity: the canary comes up beside the stable pods, which
    // hold every GPU. The real scheduler leaves it Pending, and the release
    // fails on its progress deadline although nothing is wrong with it.
    set_components(
        &client,
        &ns,
        "llama",
        json!([llama(&ns, "vllm:0.7.0", 4, &[], &json!({}))]),
    )
    .await;
    wait_until(WAIT, "a canary pod Pending for want of a GPU", || async {
        unschedulable(&client, &ns, "vllm:0.7.0")
            .await
            .then_some(())
    })
    .await;
    let p = wait_phase(&client, &ns, "llama", Phase::RolledBack, WAIT).await;
    let failure = p.status.unwrap().failure.unwrap();
    assert_eq!(failure.reason, "ProgressDeadlineExceeded", "{failure:?}");

    // With no surge: a stable pod goes first, the canary takes its GPU.
    let capacity = json!({"capacity": {"maxSurge": 0, "maxUnavailable": 1}});
    set_components(
        &client,
        &ns,
        "llama",
        json!([llama(&ns, "vllm:0.7.1", 4, &[], &capacity)]),
    )
    .await;
    wait_phase(&client, &ns, "llama", Phase::RollingOut, WAIT).await;
    let started = Instant::now();
    let mut worst = (0usize, 4usize);
    loop {
        let pods = llama_pods(&client, &ns).await;
        worst.0 = worst.0.max(pods.len());
        // Ready pods counted once the release began replacing them.
        if pods.iter().any(|(i, _, _)| i == "vllm:0.7.1") {
            worst.1 = worst.1.min(pods.iter().filter(|(_, _, r)| *r).count());
        }
        let phase = get(&client, &ns, "llama")
            .await
            .and_then(|p| p.status)
            .map(|s| s.phase);
        if phase == Some(Phase::Stable)
            && pods.len() == 4
            && pods.iter().all(|(i, s, r)| i == "vllm:0.7.1" && *s && *r)
        {
            break;
        }
        assert_ne!(
            phase,
            Some(Phase::RolledBack),
            "the release within capacity failed"
        );
        assert!(
            started.elapsed() < WAIT,
            "not released within {WAIT:?}: {pods:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        worst.0 <= 4,
        "never more pods than replicas + maxSurge: {}",
        worst.0
    );
    assert!(
        worst.1 >= 3,
        "never fewer ready than replicas - maxUnavailable: {}",
        worst.1
    );
}

#[tokio::test]
async fn a_loading_model_server_does_not_count_and_its_warmup_holds_the_deadline_off() {
    let Harness { client, ns } = Harness::new("model-ready").await;
    let _nodes = GpuNodes::add(&client, &ns, 2, 1, Some(101)).await;
    let servers = ModelServers::start(&client, &ns, None);
    let _op = Operator::start(&ns, &[]).await;
    let extra = json!({
        "capacity": {"maxSurge": 0, "maxUnavailable": 1},
        "serving": {"port": 8000, "model": "llama", "warmup": "2m"}
    });
    let spec = json!({
        "components": [llama(&ns, "vllm:0.6.3", 2, &[("LOAD_SECONDS", "1")], &extra)],
        "strategy": {"steps": [{"setWeight": 50}]},
        // Shorter than the new model's load: only the warm-up makes room.
        "health": {"progressDeadlineSeconds": 5}
    });
    create(&client, &ns, &plan("llama", spec)).await;
    wait_phase(&client, &ns, "llama", Phase::Stable, WAIT).await;
    assert_eq!(servers.running().len(), 2, "a stand-in per pod");

    let load = 15;
    set_components(
        &client,
        &ns,
        "llama",
        json!([llama(
            &ns,
            "vllm:0.7.0",
            2,
            &[("LOAD_SECONDS", &load.to_string())],
            &extra
        )]),
    )
    .await;
    // The canary pod is Ready (kwok says so at once) but still loading.
    wait_until(WAIT, "a Ready canary pod", || async {
        llama_pods(&client, &ns)
            .await
            .iter()
            .any(|(i, _, r)| i == "vllm:0.7.0" && *r)
            .then_some(())
    })
    .await;
    let ready_at = Instant::now();
    // While it loads, the plan counts no ready canary pod.
    while ready_at.elapsed() < Duration::from_secs(load - 5) {
        let s = get(&client, &ns, "llama").await.unwrap().status.unwrap();
        assert_eq!(
            s.components[0].current_ready, 0,
            "a pod that does not serve yet is not ready"
        );
        assert_eq!(s.phase, Phase::RollingOut);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Loaded, it counts; the release completes past the 5 s deadline.
    let p = wait_phase(&client, &ns, "llama", Phase::Stable, WAIT).await;
    assert!(ready_at.elapsed() >= Duration::from_secs(load - 5));
    let s = p.status.unwrap();
    assert_eq!(s.components[0].current_ready, 2);
    assert!(s.failure.is_none(), "{:?}", s.failure);
}

/// The shipped vLLM gate templates, each renamed `<name>-<ns>` (cluster
/// scoped, so that tests do not share them); deleted by the caller.
async fn apply_vllm_templates(client: &Client, ns: &str) -> Vec<String> {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("integrations/vllm/gate-templates.yaml"),
    )
    .unwrap();
    let api: Api<ClusterGateTemplate> = Api::all(client.clone());
    let mut names = Vec::new();
    for doc in yaml_serde::Deserializer::from_str(&text) {
        let mut v: Value = serde::Deserialize::deserialize(doc).unwrap();
        let name = format!("{}-{ns}", v["metadata"]["name"].as_str().unwrap());
        v["metadata"]["name"] = json!(name);
        let t: ClusterGateTemplate = serde_json::from_value(v).unwrap();
        api.patch(
            &name,
            &PatchParams::apply("releaseplan-tests").force(),
            &Patch::Apply(&t),
        )
        .await
        .unwrap();
        names.push(name);
    }
    names
}

#[tokio::test]
async fn the_vllm_time_to_first_token_gate_rolls_back_a_slower_version_and_lets_an_equal_one_through()
 {
    let Harness { client, ns } = Harness::new("vllm-gate").await;
    let _nodes = GpuNodes::add(&client, &ns, 2, 2, Some(102)).await;
    let dir = tempfile::tempdir().unwrap();
    let targets = dir.path().join("targets.json");
    let _servers = ModelServers::start(&client, &ns, Some(targets.clone()));
    let prometheus = Prometheus::start_file_sd(&targets);
    let templates = apply_vllm_templates(&client, &ns).await;
    let _op = Operator::start(&ns, &[]).await;
    let gate = json!([{
        "name": "ttft", "component": "llama",
        "template": {
            "kind": "ClusterGateTemplate", "name": format!("vllm-time-to-first-token-{ns}"),
            "args": {"prometheus": prometheus.url.trim_start_matches("http://"), "window": "5s"}
        }
    }]);
    let extra = json!({
        "capacity": {"maxSurge": 0, "maxUnavailable": 1},
        "serving": {"port": 8000, "model": "llama"}
    });
    // The last step outlasts the rate window once the stable pods are gone:
    // the comparison then has no stable side (it passes without a query).
    let env = |ttft: &'static str| [("TTFT_MS", ttft), ("LOAD_SECONDS", "8"), ("RPS", "20")];
    let spec = json!({
        "components": [llama(&ns, "vllm:0.6.3", 4, &env("50"), &extra)],
        "strategy": {"steps": [{"setWeight": 50}, {"pause": {"duration": "25s"}}]},
        "health": {"gates": gate, "progressDeadlineSeconds": 120}
    });
    create(&client, &ns, &plan("llama", spec)).await;
    wait_phase(&client, &ns, "llama", Phase::Stable, WAIT).await;

    // Three times the time to first token: the gate fails, the rollback
    // names it.
    set_components(
        &client,
        &ns,
        "llama",
        json!([llama(&ns, "vllm:0.7.0", 4, &env("150"), &extra)]),
    )
    .await;
    let p = wait_phase(&client, &ns, "llama", Phase::RolledBack, support::WAIT * 2).await;
    let failure = p.status.unwrap().failure.unwrap();
    assert_eq!(failure.gate, "ttft", "{failure:?}");
    // The message carries the ratio itself.
    assert!(failure.message.contains("is not <= 1.5"), "{failure:?}");

    // The same time to first token: the gate passes, the release completes.
    set_components(
        &client,
        &ns,
        "llama",
        json!([llama(&ns, "vllm:0.7.1", 4, &env("50"), &extra)]),
    )
    .await;
    let p = wait_phase(&client, &ns, "llama", Phase::Stable, support::WAIT * 2).await;
    let s = p.status.unwrap();
    assert!(s.failure.is_none(), "{:?}", s.failure);
    assert!(
        s.history
            .last()
            .is_some_and(|h| h.outcome == releaseplan::api::Outcome::Promoted),
        "{:?}",
        s.history
    );
    let api: Api<ClusterGateTemplate> = Api::all(client.clone());
    for t in templates {
        let _ = api.delete(&t, &Default::default()).await;
    }
}

/// The revision each InferencePool selects, its target port and picker:
/// (stable pool, canary pool).
async fn pools(client: &Client, ns: &str) -> Option<(String, String)> {
    let api = Api::<releaseplan::api::inference::InferencePool>::namespaced(client.clone(), ns);
    let rev = |p: &releaseplan::api::inference::InferencePool| {
        p.spec
            .selector
            .match_labels
            .get("releaseplan.io/revision")
            .cloned()
    };
    let stable = api.get_opt("shop-web-stable").await.ok()??;
    let canary = api.get_opt("shop-web-canary").await.ok()??;
    Some((rev(&stable)?, rev(&canary)?))
}

/// The route's weights by backend name, each backend an InferencePool
/// (group, kind, no port), else `None`.
async fn pool_weights(client: &Client, ns: &str) -> Option<(i32, i32)> {
    let route = Api::<releaseplan::api::gateway::HTTPRoute>::namespaced(client.clone(), ns)
        .get_opt("shop-web")
        .await
        .ok()??;
    let mut out = (0, 0);
    for b in route.spec.rules.iter().flat_map(|r| &r.backend_refs) {
        if b.group.as_deref() != Some("inference.networking.k8s.io")
            || b.kind.as_deref() != Some("InferencePool")
            || b.port.is_some()
        {
            return None;
        }
        match b.name.as_str() {
            "shop-web-stable" => out.0 += b.weight.unwrap_or(1),
            "shop-web-canary" => out.1 += b.weight.unwrap_or(1),
            _ => return None,
        }
    }
    Some(out)
}

#[tokio::test]
async fn an_inference_pool_route_weights_a_stable_and_a_canary_pool_through_the_steps() {
    let h = Harness::new("infpool").await;
    support::crd::install_gateway_api(&h.client).await;
    support::crd::install_inference_pool(&h.client).await;
    // Started after the CRDs: the operator watches HTTPRoutes only when it
    // can list them at start-up.
    let _op = h.operator().start().await;
    let (client, ns) = (h.client.clone(), h.ns.clone());
    let web = |image: &str| {
        json!({
            "name": "web", "replicas": 2,
            "template": support::fixtures::template(image),
            "traffic": {
                "port": 8000,
                "gatewayAPI": {
                    "parentRefs": [{"name": "inference-gateway"}],
                    "inferencePool": {"endpointPickerRef": {"name": "llama-epp", "port": {"number": 9002}, "failureMode": "FailClose"}}
                }
            }
        })
    };
    let spec = json!({
        "components": [web("vllm:0.6.3")],
        "strategy": {"steps": [{"setWeight": 30}, {"pause": {}}]}
    });
    let p = support::plans::create_stable(&client, &ns, "shop", spec).await;
    let v1 = p.status.unwrap().components[0]
        .current_hash
        .clone()
        .unwrap();
    wait_until(
        WAIT,
        "both pools on v1, the route 100/0 to the pools",
        || async {
            (pools(&client, &ns).await == Some((v1.clone(), v1.clone()))
                && pool_weights(&client, &ns).await == Some((100, 0)))
            .then_some(())
        },
    )
    .await;
    let pool = Api::<releaseplan::api::inference::InferencePool>::namespaced(client.clone(), &ns)
        .get("shop-web-stable")
        .await
        .unwrap();
    assert_eq!(pool.spec.target_ports[0].number, 8000);
    let picker = pool.spec.endpoint_picker_ref.unwrap();
    assert_eq!(
        (picker.name.as_str(), picker.port.map(|p| p.number)),
        ("llama-epp", Some(9002))
    );
    assert_eq!(
        pool.metadata.owner_references.unwrap()[0].kind,
        "ReleasePlan"
    );

    // The new version: the canary pool selects it, the route weights 70/30.
    set_components(&client, &ns, "shop", json!([web("vllm:0.7.0")])).await;
    let v2 = wait_until(WAIT, "the canary pool on v2 at 70/30", || async {
        let (st, ca) = pools(&client, &ns).await?;
        (st == v1 && ca != v1 && pool_weights(&client, &ns).await == Some((70, 30))).then_some(ca)
    })
    .await;
    // The route is at 70/30 from the step's start, before the canary's pods
    // are ready: a promote then would only skip to the pause. It is sent
    // once the plan waits at the pause (seen on a busy machine).
    wait_until(WAIT, "the plan to wait at its pause", || async {
        let p = support::plans::get(&client, &ns, "shop").await?;
        let held = support::plans::condition(&p, "Paused").map(|c| c.0);
        (held.as_deref() == Some("True")).then_some(())
    })
    .await;
    support::plans::request(&client, &ns, "shop", "promote").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_until(WAIT, "both pools on v2, the route 100/0", || async {
        (pools(&client, &ns).await == Some((v2.clone(), v2.clone()))
            && pool_weights(&client, &ns).await == Some((100, 0)))
        .then_some(())
    })
    .await;
    // Settled, a reconcile writes neither a Service nor a pool again (the
    // cached Service keeps the record of its pool).
    let versions = || async {
        let svc = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), &ns)
            .get("shop-web-stable")
            .await
            .unwrap();
        let pool =
            Api::<releaseplan::api::inference::InferencePool>::namespaced(client.clone(), &ns)
                .get("shop-web-stable")
                .await
                .unwrap();
        (
            svc.metadata.resource_version,
            pool.metadata.resource_version,
        )
    };
    let before = versions().await;
    Api::<releaseplan::api::ReleasePlan>::namespaced(client.clone(), &ns)
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "1"}}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        versions().await,
        before,
        "a settled plan rewrote its Service or pool"
    );
}
