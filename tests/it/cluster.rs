//! Proves that the local control plane of `make test` is a real one: the
//! controllers run Deployments, kwok plays pods (and the failures of
//! docs/control-plane.md on demand), and the API server enforces CEL rules.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::json;
use support::cluster::{client, test_namespace};
use support::{WAIT, wait_until};

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{ "name": "app", "image": "example.invalid/app:v1" }] }
            }
        }
    }))
    .expect("deployment object")
}

/// Creates a pod carrying the fault annotation and returns its API.
async fn faulty_pod(client: &Client, prefix: &str, fault: &str) -> Api<Pod> {
    let ns = test_namespace(client, prefix).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": "faulty",
            "annotations": { "kwok.releaseplan.io/fault": fault }
        },
        "spec": { "containers": [{ "name": "app", "image": "example.invalid/app:v1" }] }
    }))
    .expect("pod object");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    pods
}

fn container(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.first()
}

fn waiting_reason(pod: &Pod) -> Option<&str> {
    container(pod)?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .as_deref()
}

fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let found = conditions.iter().find(|c| c.type_ == type_)?;
    Some(found.status.as_str())
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

/// The matrix of `.ci/run` (`make test` on the newest supported Kubernetes,
/// `make test-oldest` on the oldest) tests two versions only if each run's
/// cluster is the version it asked for: a cluster of another version (a
/// K8S_VERSION lost on the way, RP_KUBECONFIG naming another cluster, a cache
/// folder holding other binaries) fails here instead of passing as the asked one.
#[tokio::test]
async fn api_server_is_the_kubernetes_version_the_run_asked_for() {
    let client = client().await;
    let asked = support::tools::k8s_version();
    let info = client.apiserver_version().await.expect("GET /version");
    eprintln!(
        "cluster: Kubernetes {} (asked for {asked})",
        info.git_version
    );
    assert_eq!(
        info.git_version,
        format!("v{asked}"),
        "the API server is not the Kubernetes version this run asked for \
         (RP_K8S_VERSION, else K8S_VERSION, else e2e/versions.env's default): run the tests \
         through `make test K8S_VERSION=...` or e2e/with-cluster.sh, or set K8S_VERSION to \
         the version of the RP_KUBECONFIG cluster"
    );
}

#[tokio::test]
async fn deployment_of_three_replicas_becomes_ready() {
    let client = client().await;
    let ns = test_namespace(&client, "cluster-deploy").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .create(&PostParams::default(), &deployment("web", 3))
        .await
        .expect("create deployment");

    wait_until(WAIT, "3 ready replicas of deployment web", || {
        let deployments = deployments.clone();
        async move {
            let d = deployments.get("web").await.ok()?;
            (d.status?.ready_replicas? == 3).then_some(())
        }
    })
    .await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let list = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list pods");
    assert_eq!(list.items.len(), 3, "pods of deployment web");
    for pod in &list.items {
        assert_eq!(phase(pod), Some("Running"));
        assert_eq!(condition(pod, "Ready"), Some("True"));
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        assert!(
            node.is_some_and(|n| n.starts_with("kwok-node-")),
            "scheduled on {node:?}"
        );
    }
}

#[tokio::test]
async fn crash_loop_fault_restarts_the_container() {
    let client = client().await;
    let pods = faulty_pod(&client, "fault-crash-loop", "crash-loop").await;
    let pod = wait_until(WAIT, "restartCount > 2 in CrashLoopBackOff", || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("faulty").await.ok()?;
            let restarts = container(&pod)?.restart_count;
            (restarts > 2 && waiting_reason(&pod) == Some("CrashLoopBackOff")).then_some(pod)
        }
    })
    .await;
    let status = container(&pod).expect("container status");
    assert!(!status.ready, "a crash-looping container is not ready");
    assert_eq!(condition(&pod, "Ready"), Some("False"));
    assert_eq!(phase(&pod), Some("Running"));
    // kwok would keep restarting it every 2s for as long as the cluster runs.
    pods.delete("faulty", &Default::default())
        .await
        .expect("delete pod");
}

#[tokio::test]
async fn never_ready_fault_runs_without_becoming_ready() {
    let client = client().await;
    let pods = faulty_pod(&client, "fault-never-ready", "never-ready").await;
    wait_until(WAIT, "the never-ready pod to run", || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("faulty").await.ok()?;
            (phase(&pod) == Some("Running")).then_some(())
        }
    })
    .await;
    // A normal pod turns Ready at once; this one must stay unready.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pod = pods.get("faulty").await.expect("get pod");
    assert_eq!(phase(&pod), Some("Running"));
    assert_eq!(condition(&pod, "Ready"), Some("False"));
    let status = container(&pod).expect("container status");
    assert!(!status.ready);
    assert_eq!(status.restart_count, 0);
}

#[tokio::test]
async fn image_pull_fault_fails_to_pull() {
    let client = client().await;
    let pods = faulty_pod(&client, "fault-image-pull", "image-pull").await;
    let pod = wait_until(WAIT, "ErrImagePull or ImagePullBackOff", || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("faulty").await.ok()?;
            matches!(
                waiting_reason(&pod),
                Some("ErrImagePull" | "ImagePullBackOff")
            )
            .then_some(pod)
        }
    })
    .await;
    assert_eq!(phase(&pod), Some("Pending"));
    assert_eq!(condition(&pod, "Ready"), Some("False"));
}

const CEL_MESSAGE: &str = "maxSurge must not exceed replicas";

#[tokio::test]
async fn api_server_enforces_crd_cel_rules() {
    let client = client().await;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.e2e.releaseplan.io" },
        "spec": {
            "group": "e2e.releaseplan.io",
            "names": { "kind": "Widget", "plural": "widgets", "singular": "widget" },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": { "spec": {
                        "type": "object",
                        "required": ["replicas", "maxSurge"],
                        "properties": {
                            "replicas": { "type": "integer", "minimum": 0 },
                            "maxSurge": { "type": "integer", "minimum": 0 }
                        },
                        "x-kubernetes-validations": [
                            { "rule": "self.maxSurge <= self.replicas", "message": CEL_MESSAGE }
                        ]
                    }}
                }}
            }]
        }
    }))
    .expect("crd object");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        "widgets.e2e.releaseplan.io",
        &PatchParams::apply("releaseplan-tests").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("apply crd");
    wait_until(WAIT, "crd widgets to be established", || {
        let crds = crds.clone();
        async move {
            let crd = crds.get("widgets.e2e.releaseplan.io").await.ok()?;
            let established = crd
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(())
        }
    })
    .await;

    let ns = test_namespace(&client, "cluster-cel").await;
    let gvk = GroupVersionKind::gvk("e2e.releaseplan.io", "v1", "Widget");
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk(&gvk));
    let widget = |name: &str, replicas: i64, max_surge: i64| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "e2e.releaseplan.io/v1",
            "kind": "Widget",
            "metadata": { "name": name },
            "spec": { "replicas": replicas, "maxSurge": max_surge }
        }))
        .expect("widget object")
    };

    // A valid object is accepted (retried: the new resource may take a
    // moment to be served).
    wait_until(WAIT, "a valid widget to be accepted", || {
        let widgets = widgets.clone();
        let valid = widget("valid", 3, 1);
        async move { widgets.create(&PostParams::default(), &valid).await.ok() }
    })
    .await;

    let err = widgets
        .create(&PostParams::default(), &widget("invalid", 1, 3))
        .await
        .expect_err("the API server must refuse an object that breaks the CEL rule");
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(
                status.message.contains(CEL_MESSAGE),
                "the error names the rule's message: {}",
                status.message
            );
        }
        other => panic!("expected an API error, got {other:?}"),
    }
}
