//! Installs the ReleasePlan CRD of `crds/releaseplan.yaml` on the test cluster.
//! `crd::install(&client).await`, or [`super::Harness::new`]. Its apply and
//! wait also install other CRDs (the Gateway API's, [`super::traffic`]).
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
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{} is not a CRD: {e}", path.display()))
}

/// The GateTemplate and ClusterGateTemplate CRDs as checked in
/// (`crds/gatetemplates.yaml`).
pub fn checked_in_templates() -> Vec<CustomResourceDefinition> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/gatetemplates.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; run `make crds`", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            use serde::Deserialize;
            CustomResourceDefinition::deserialize(doc)
                .unwrap_or_else(|e| panic!("{} holds a non-CRD: {e}", path.display()))
        })
        .collect()
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
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut all = vec![checked_in()];
    all.extend(checked_in_templates());
    for crd in &all {
        let name = crd.metadata.name.clone().expect("CRD name");
        apply_retrying(&crds, &name, crd, MANAGER).await;
        established(&crds, &name).await;
    }

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

/// Server-side applies `obj` as `name` with field manager `manager`
/// (forced), retrying the transient errors of concurrent applies.
pub async fn apply_retrying<K, T>(api: &Api<K>, name: &str, obj: &T, manager: &str)
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    T: serde::Serialize + std::fmt::Debug,
{
    let params = PatchParams::apply(manager).force();
    let mut attempt = 0;
    loop {
        match api.patch(name, &params, &Patch::Apply(obj)).await {
            Ok(_) => return,
            Err(e) if transient(&e) && attempt < 20 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("cannot apply {name}: {e}"),
        }
    }
}

/// Waits until the CRD `name` is Established with its names accepted.
pub async fn established(crds: &Api<CustomResourceDefinition>, name: &str) {
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
