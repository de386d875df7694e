//! Simulated CPU usage for the resource metrics pipeline of the test cluster
//! (docs/control-plane.md, "Resource metrics"): kwok serves each fake
//! node's kubelet `/metrics/resource` from the usage that kwok's
//! ClusterResourceUsage objects give the pods, metrics-server scrapes it every
//! 10 s and serves `metrics.k8s.io`, and the HPA controller of
//! kube-controller-manager scales from that.
//!
//! Each test namespace has one ClusterResourceUsage, named after it, that
//! selects the namespace: every container of every pod in it, those created
//! later included, uses what it says. [`cluster::test_namespace`] creates it
//! with [`DEFAULT_CPU_MILLICORES`]; [`set_cpu_usage`] changes it, one write
//! for the whole namespace. Two objects selecting the same pod would make
//! kwok pick either at random, hence one per namespace and none for the
//! whole cluster (pods of other namespaces have no usage, so no metrics).
//!
//! [`cluster::test_namespace`]: super::cluster::test_namespace

use std::collections::BTreeMap;

use kube::Client;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::json;

use super::{WAIT, crd, wait_until};

/// The CPU usage of every container of a test namespace until a test sets
/// another: metrics-server leaves out a container whose usage is 0.
pub const DEFAULT_CPU_MILLICORES: u32 = 1;

/// The memory working set of every container of a test namespace (likewise
/// not 0).
pub const MEMORY: &str = "16Mi";

/// kwok's ClusterResourceUsage (kwok.x-k8s.io/v1alpha1, cluster-scoped).
fn usage_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kwok.x-k8s.io", "v1alpha1", "ClusterResourceUsage"),
        "clusterresourceusages",
    )
}

/// metrics-server's PodMetrics (metrics.k8s.io/v1beta1), through the aggregator.
fn pod_metrics_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "PodMetrics"),
        "pods",
    )
}

/// Applies the ClusterResourceUsage of `namespace`: `millicores` of CPU and
/// [`MEMORY`] for every container of its pods.
pub(super) async fn apply_usage(
    client: &Client,
    namespace: &str,
    millicores: u32,
) -> Result<(), kube::Error> {
    let usages: Api<DynamicObject> = Api::all_with(client.clone(), &usage_resource());
    let object = json!({
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterResourceUsage",
        "metadata": { "name": namespace, "labels": { "releaseplan.io/test": "true" } },
        "spec": {
            "selector": { "matchNamespaces": [namespace] },
            "usages": [{ "usage": {
                "cpu": { "value": format!("{millicores}m") },
                "memory": { "value": MEMORY }
            } }]
        }
    });
    usages
        .patch(
            namespace,
            &PatchParams::apply(crd::MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
        .map(drop)
}

/// Sets the simulated CPU usage of every container of every pod of
/// `namespace` (a namespace of [`super::cluster::test_namespace`]), now and
/// for pods created later, to `millicores`. One write; kwok serves it at
/// once, metrics-server shows it after its next scrape (within 10 s), the
/// HPA controller within 2 s after that.
///
/// Panics when the API server refuses the write (e.g. a cluster started
/// before the metrics pipeline: no ClusterResourceUsage CRD).
pub async fn set_cpu_usage(client: &Client, namespace: &str, millicores: u32) {
    apply_usage(client, namespace, millicores)
        .await
        .unwrap_or_else(|e| {
            panic!("cannot set the CPU usage of namespace {namespace} to {millicores}m: {e}")
        });
}

/// The CPU usage in millicores (rounded) that `metrics.k8s.io` reports for
/// each pod of `namespace` it has metrics for, summed over the containers,
/// by pod name. A pod has metrics from its second scrape on (10-20 s after it
/// starts).
pub async fn pod_cpu_usage(
    client: &Client,
    namespace: &str,
) -> Result<BTreeMap<String, u32>, String> {
    let metrics: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &pod_metrics_resource());
    let list = metrics
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("cannot list the pod metrics of namespace {namespace}: {e}"))?;
    list.items
        .iter()
        .map(|pod| {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let containers = pod.data["containers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut total = 0.0;
            for c in &containers {
                let cpu = &c["usage"]["cpu"];
                total += cpu
                    .as_str()
                    .and_then(cpu_millicores)
                    .ok_or_else(|| format!("pod {name}: CPU usage {cpu} is not a CPU quantity"))?;
            }
            Ok((name, total.round() as u32))
        })
        .collect()
}

/// Waits (up to [`WAIT`]) until `metrics.k8s.io` reports at least `pods`
/// pods of `namespace`, each using `millicores` of CPU in all (within 10%,
/// and 2m: kwok's usage is sampled at each scrape), and returns the usage by
/// pod. For a test to see that its [`set_cpu_usage`] got through before it
/// waits for what follows from it.
pub async fn wait_pod_metrics(
    client: &Client,
    namespace: &str,
    pods: usize,
    millicores: u32,
) -> BTreeMap<String, u32> {
    let slack = (millicores / 10).max(2);
    let what = format!(
        "metrics.k8s.io to report {pods} pods of namespace {namespace} using {millicores}m of CPU"
    );
    wait_until(WAIT, &what, || async {
        let usage = pod_cpu_usage(client, namespace).await?;
        let near = usage.values().all(|&m| m.abs_diff(millicores) <= slack);
        if near && usage.len() >= pods {
            Ok(usage)
        } else {
            Err(format!("{usage:?}"))
        }
    })
    .await
}

/// A CPU quantity as metrics-server writes it (`250m`, `1`, `123456789n`,
/// `5u`) in millicores.
pub fn cpu_millicores(quantity: &str) -> Option<f64> {
    let (number, scale) = match quantity.char_indices().last()? {
        (i, 'n') => (&quantity[..i], 1e-6),
        (i, 'u') => (&quantity[..i], 1e-3),
        (i, 'm') => (&quantity[..i], 1.0),
        (i, 'k') => (&quantity[..i], 1e6),
        _ => (quantity, 1e3),
    };
    number.parse::<f64>().ok().map(|n| n * scale)
}
