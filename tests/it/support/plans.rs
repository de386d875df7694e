//! ReleasePlans on the cluster: create, patch, request actions, wait for a
//! phase, and read the revision Deployments the operator made.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use releaseplan::api::{LABEL_PLAN, Phase, ReleasePlan};
use serde_json::{Value, json};

use super::fixtures::plan;
use super::wait_until;

/// Creates a plan.
pub async fn create(client: &Client, ns: &str, p: &ReleasePlan) {
    Api::<ReleasePlan>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), p)
        .await
        .expect("cannot create the ReleasePlan");
}

/// Merge-patches a plan's spec (as a user or GitOps tool would).
pub async fn patch_spec(client: &Client, ns: &str, name: &str, spec: Value) {
    patch_spec_result(client, ns, name, spec)
        .await
        .expect("cannot patch the ReleasePlan");
}

/// [`patch_spec`], the API server's answer returned (a refusal to check).
pub async fn patch_spec_result(
    client: &Client,
    ns: &str,
    name: &str,
    spec: Value,
) -> Result<ReleasePlan, kube::Error> {
    Api::<ReleasePlan>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
}

/// Sets the component list of a plan (a JSON merge patch replaces lists whole).
pub async fn set_components(client: &Client, ns: &str, name: &str, components: Value) {
    patch_spec(client, ns, name, json!({ "components": components })).await;
}

/// Asks for an action through the request annotation, as the plugin does.
pub async fn request(client: &Client, ns: &str, name: &str, action: &str) {
    let id = format!(
        "{action}/{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    Api::<ReleasePlan>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"releaseplan.io/request": id}}})),
        )
        .await
        .expect("cannot annotate the ReleasePlan");
}

/// The plan as stored.
pub async fn get(client: &Client, ns: &str, name: &str) -> Option<ReleasePlan> {
    Api::<ReleasePlan>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .expect("cannot read the ReleasePlan")
}

/// Waits until the plan is in `phase` with its current generation observed.
pub async fn wait_phase(
    client: &Client,
    ns: &str,
    name: &str,
    phase: Phase,
    timeout: Duration,
) -> ReleasePlan {
    wait_until(
        timeout,
        &format!("plan {ns}/{name} to be {phase}"),
        || async {
            let p = get(client, ns, name).await?;
            let s = p.status.as_ref()?;
            (s.phase == phase && s.observed_generation == p.metadata.generation)
                .then_some(p.clone())
        },
    )
    .await
}

/// Revision Deployments of a plan: name -> (spec replicas, ready replicas, image).
pub async fn revisions(
    client: &Client,
    ns: &str,
    plan: &str,
) -> BTreeMap<String, (i32, i32, String)> {
    let list = Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{LABEL_PLAN}={plan}")))
        .await
        .expect("cannot list Deployments");
    list.items
        .into_iter()
        .map(|d| {
            let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
            let ready = d
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            let image = d
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default();
            (d.name_any(), (replicas, ready, image))
        })
        .collect()
}

/// The revision Deployment running `image`: (replicas, ready).
pub fn by_image(revs: &BTreeMap<String, (i32, i32, String)>, image: &str) -> Option<(i32, i32)> {
    revs.values()
        .find(|(_, _, i)| i == image)
        .map(|(r, ready, _)| (*r, *ready))
}

/// Creates a plan and waits until its first release is Stable.
pub async fn create_stable(client: &Client, ns: &str, name: &str, spec: Value) -> ReleasePlan {
    create(client, ns, &plan(name, spec)).await;
    wait_phase(client, ns, name, Phase::Stable, super::WAIT).await
}

/// The condition `type_` of a plan: (status, reason, message).
pub fn condition(p: &ReleasePlan, type_: &str) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Events recorded on the plan: (reason, type, note, count).
pub async fn plan_events(
    client: &Client,
    ns: &str,
    name: &str,
) -> Vec<(String, String, String, i32)> {
    let list = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind=ReleasePlan,involvedObject.name={name}"
        )))
        .await
        .expect("cannot list events");
    list.items
        .into_iter()
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.type_.unwrap_or_default(),
                e.message.unwrap_or_default(),
                e.count.unwrap_or(1),
            )
        })
        .collect()
}
