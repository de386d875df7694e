//! Installs the ReleasePlan CRD of `crds/releaseplan.yaml` on the test cluster.
//! `crd::install(&client).await`, or [`super::Harness::new`].
//!
//! Idempotent and safe to run from many tests and test binaries at once:
//! every caller server-side applies the same object with the same field
//! manager, transient conflicts are retried, and each caller waits until the
//! API server serves the resource before it returns.
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use releaseplan::api::ReleasePlan;

use super::wait_until;

/// Name of the CRD.
pub const NAME: &str = "releaseplans.releaseplan.io";
/// Field manager of the tests' server-side applies.
pub const MANAGER: &str = "releaseplan-tests";

/// The CRD as checked in (what users apply), not as generated now: the unit
/// test `api::crd_tests::checked_in_crd_is_current` keeps the two equal.
pub fn checked_in() -> CustomResourceDefinition {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/releaseplan.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; run `make crds`", path.display()));
    yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{} is not a CRD: {e}", path.display()))
}

/// The GateTemplate and ClusterGateTemplate CRDs as checked in
/// (`crds/gatetemplates.yaml`).
pub fn checked_in_templates() -> Vec<CustomResourceDefinition> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/gatetemplates.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; run `make crds`", path.display()));
    yaml_serde::Deserializer::from_str(&text)
        .map(|doc| {
            use serde::Deserialize;
            CustomResourceDefinition::deserialize(doc)
                .unwrap_or_else(|e| panic!("{} holds a non-CRD: {e}", path.display()))
        })
        .collect()
}

/// The ComponentScale CRD as checked in (`crds/componentscales.yaml`).
pub fn checked_in_scales() -> CustomResourceDefinition {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/componentscales.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; run `make crds`", path.display()));
    yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{} is not a CRD: {e}", path.display()))
}

/// The GatePolicy CRD as checked in (`crds/gatepolicies.yaml`).
pub fn checked_in_policies() -> CustomResourceDefinition {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/gatepolicies.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; run `make crds`", path.display()));
    yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{} is not a CRD: {e}", path.display()))
}

/// The ReleaseFreeze CRD as checked in (`crds/releasefreezes.yaml`).
pub fn checked_in_freezes() -> CustomResourceDefinition {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/releasefreezes.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; run `make crds`", path.display()));
    yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{} is not a CRD: {e}", path.display()))
}

/// Whether an API error is worth another try: conflicts and AlreadyExists
/// from concurrent installs, and the API server being briefly unavailable.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 409 | 429 | 500 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Applies the CRD, waits until it is Established, and until a ReleasePlan
/// can be created (dry run): only then is the resource served.
pub async fn install(client: &Client) {
    let mut all = vec![checked_in()];
    all.extend(checked_in_templates());
    all.push(checked_in_scales());
    all.push(checked_in_policies());
    all.push(checked_in_freezes());
    apply(client, &all).await;

    // Established can precede the first request that the new handler serves.
    let probe: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": ReleasePlan::api_version(&()),
        "kind": ReleasePlan::kind(&()),
        "metadata": { "name": "crd-install-probe" },
        "spec": { "components": [{
            "name": "app",
            "replicas": 1,
            "template": { "spec": { "containers": [{ "name": "app", "image": "app:1" }] } }
        }] }
    }))
    .expect("probe object");
    let plans: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::erase::<ReleasePlan>(&()),
    );
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_until(
        Duration::from_secs(60),
        "the API server to serve ReleasePlans",
        || {
            let plans = plans.clone();
            let probe = probe.clone();
            let dry_run = dry_run.clone();
            async move { plans.create(&dry_run, &probe).await.ok() }
        },
    )
    .await;
}

/// Applies CRDs (server-side, retrying transient errors) and waits until
/// each is Established.
pub async fn apply(client: &Client, all: &[CustomResourceDefinition]) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(MANAGER).force();
    for crd in all {
        let name = crd.metadata.name.clone().expect("CRD name");
        let mut attempt = 0;
        loop {
            match crds.patch(&name, &params, &Patch::Apply(crd)).await {
                Ok(_) => break,
                Err(e) if transient(&e) && attempt < 20 => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => panic!("cannot apply the CRD {name}: {e}"),
            }
        }
        established(&crds, &name).await;
    }
}

/// The Gateway API standard-channel CRDs of `make tools` (part
/// `gateway-api-crds`, version pinned in e2e/versions.env), applied.
pub async fn install_gateway_api(client: &Client) {
    let dir = super::tools::cached("gateway-api-crds", "GATEWAY_API_VERSION")
        .filter(|d| d.is_dir())
        .expect("the Gateway API CRDs are not in the cache: run `make tools`");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("Gateway API CRD folder")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let all = crds_in(&files);
    assert!(!all.is_empty(), "no CRD in {}", dir.display());
    apply(client, &all).await;
}

/// The Gateway API Inference Extension's InferencePool CRD of `make tools`
/// (part `gateway-api-inference-extension-crds`, version pinned in
/// e2e/versions.env), applied.
pub async fn install_inference_pool(client: &Client) {
    let file = super::tools::cached(
        "gateway-api-inference-extension-crds",
        "INFERENCE_EXTENSION_VERSION",
    )
    .map(|d| d.join("inference.networking.k8s.io_inferencepools.yaml"))
    .filter(|f| f.is_file())
    .expect("the InferencePool CRD is not in the cache: run `make tools`");
    let all = crds_in(std::slice::from_ref(&file));
    assert!(!all.is_empty(), "no CRD in {}", file.display());
    apply(client, &all).await;
}

/// Traefik's own CRDs of `make tools` (part `traffic-crds`, Traefik's
/// version pinned in e2e/versions.env: IngressRoute and every other kind
/// its Kubernetes CRD provider watches), applied.
pub async fn install_traefik(client: &Client) {
    let file = super::tools::cached("traefik-crds", "TRAEFIK_VERSION")
        .map(|d| d.join("kubernetes-crd-definition-v1.yml"))
        .filter(|f| f.is_file())
        .expect("Traefik's CRDs are not in the cache: run `make tools`");
    let all = crds_in(std::slice::from_ref(&file));
    assert!(!all.is_empty(), "no CRD in {}", file.display());
    apply(client, &all).await;
}

/// The CustomResourceDefinitions of YAML files (other documents skipped).
fn crds_in(files: &[std::path::PathBuf]) -> Vec<CustomResourceDefinition> {
    let mut all = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(path).expect("CRD file");
        for doc in yaml_serde::Deserializer::from_str(&text) {
            use serde::Deserialize;
            let value = yaml_serde::Value::deserialize(doc).expect("YAML");
            if value.get("kind").and_then(|k| k.as_str()) == Some("CustomResourceDefinition") {
                all.push(yaml_serde::from_value(value).expect("a CRD"));
            }
        }
    }
    all
}

/// Waits until the CRD `name` is Established with its names accepted.
async fn established(crds: &Api<CustomResourceDefinition>, name: &str) {
    wait_until(
        Duration::from_secs(60),
        &format!("the CRD {name} to be Established with its names accepted"),
        || {
            let crds = crds.clone();
            async move {
                let status = crds.get(name).await.ok()?.status?;
                let is_true = |t: &str| {
                    status
                        .conditions
                        .iter()
                        .flatten()
                        .any(|c| c.type_ == t && c.status == "True")
                };
                (is_true("Established") && is_true("NamesAccepted")).then_some(())
            }
        },
    )
    .await;
}
