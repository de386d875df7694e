//! The resource metrics pipeline of the test cluster, end to end: the CPU
//! usage a test sets (kwok's ClusterResourceUsage, [`support::metrics`]) is
//! what kwok's simulated kubelet endpoint serves, metrics-server scrapes and
//! serves as `metrics.k8s.io` through the aggregator, and the real HPA
//! controller of kube-controller-manager scales a Deployment on it, up and
//! back down. Nothing fakes the HPA's status. See docs/control-plane.md,
//! "Resource metrics".

use crate::support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::cluster::{client, test_namespace};
use support::metrics::{cpu_millicores, set_cpu_usage, wait_pod_metrics};
use support::{WAIT, wait_until};

/// A Deployment `web` of `replicas` pods, each container requesting 100m of CPU.
fn deployment(replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{
                    "name": "app",
                    "image": "example.invalid/app:v1",
                    "resources": { "requests": { "cpu": "100m" } }
                }] }
            }
        }
    }))
    .expect("deployment object")
}

/// An HPA of Deployment `web`: 2 to 5 replicas, at 50% of the CPU request on
/// average, with no stabilization window either way (the default policies:
/// up by 4 pods or 100% per 15 s, down by 100% per 15 s).
fn autoscaler() -> HorizontalPodAutoscaler {
    serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "web" },
            "minReplicas": 2,
            "maxReplicas": 5,
            "metrics": [{
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": { "type": "Utilization", "averageUtilization": 50 }
                }
            }],
            "behavior": {
                "scaleUp": { "stabilizationWindowSeconds": 0 },
                "scaleDown": { "stabilizationWindowSeconds": 0 }
            }
        }
    }))
    .expect("HorizontalPodAutoscaler object")
}

/// Waits until Deployment `web` wants `replicas` pods and has them ready,
/// naming what the HPA says meanwhile.
async fn wait_replicas(client: &Client, ns: &str, replicas: i32) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
    let what = format!("deployment {ns}/web scaled by its HPA to {replicas} ready replicas");
    wait_until(WAIT, &what, || async {
        let d = deployments.get("web").await.map_err(|e| e.to_string())?;
        let want = d.spec.as_ref().and_then(|s| s.replicas);
        let ready = d.status.as_ref().and_then(|s| s.ready_replicas);
        if want == Some(replicas) && ready == Some(replicas) {
            return Ok(());
        }
        let hpa = hpas.get("web").await.map_err(|e| e.to_string())?;
        Err(format!(
            "replicas {want:?}, ready {ready:?}; HPA status {}",
            serde_json::to_string(&hpa.status).unwrap_or_default()
        ))
    })
    .await;
}

/// The average CPU utilization the HPA last saw, in percent of the request.
async fn hpa_utilization(client: &Client, ns: &str) -> Option<i32> {
    let hpa = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), ns)
        .get("web")
        .await
        .expect("get HPA web");
    hpa.status?
        .current_metrics?
        .first()?
        .resource
        .as_ref()?
        .current
        .average_utilization
}

#[tokio::test]
async fn hpa_scales_a_deployment_on_simulated_cpu_usage() {
    let client = client().await;
    let ns = test_namespace(&client, "metrics-hpa").await;
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &deployment(2))
        .await
        .expect("create deployment web");
    Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &autoscaler())
        .await
        .expect("create HPA web");
    wait_replicas(&client, &ns, 2).await;

    // 200m a pod: 200% of the request, 4 times the target, so the HPA wants
    // 8 pods and gets its maximum, 5.
    set_cpu_usage(&client, &ns, 200).await;
    wait_pod_metrics(&client, &ns, 2, 200).await;
    wait_replicas(&client, &ns, 5).await;
    let seen = hpa_utilization(&client, &ns).await;
    assert!(
        seen.is_some_and(|u| u > 50),
        "the HPA scaled up on a CPU utilization of {seen:?}%"
    );

    // 10m a pod: 10% of the request, so the HPA goes back to its minimum, 2.
    // (It need not wait for the metrics of all 5 pods: on a scale down it
    // counts a pod without metrics as using its target.)
    set_cpu_usage(&client, &ns, 10).await;
    wait_pod_metrics(&client, &ns, 2, 10).await;
    wait_replicas(&client, &ns, 2).await;
    let seen = hpa_utilization(&client, &ns).await;
    assert!(
        seen.is_some_and(|u| u < 50),
        "the HPA scaled down on a CPU utilization of {seen:?}%"
    );
}

#[test]
fn cpu_quantities_of_metrics_server_in_millicores() {
    let near = |q: &str, want: f64| {
        let got = cpu_millicores(q).unwrap_or_else(|| panic!("{q} not parsed"));
        assert!((got - want).abs() < 1e-9, "{q}: {got} != {want}");
    };
    near("250m", 250.0);
    near("2", 2000.0);
    near("200512345n", 200.512345);
    near("5u", 0.005);
    near("0", 0.0);
    assert_eq!(cpu_millicores("x"), None);
    assert_eq!(cpu_millicores(""), None);
}
