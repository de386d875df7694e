//! Autoscaled components on the local control plane: the ComponentScale the
//! operator owns per component, written through its `/scale` subresource by
//! a plain client (as KEDA and `kubectl scale` do) and by the real HPA
//! controller of kube-controller-manager over a real metrics pipeline
//! (metrics-server scraping kwok's simulated kubelet metrics).

use crate::support;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{Api, Patch, PatchParams};
use releaseplan::api::{ComponentScale, Phase, ReleasePlan};
use serde_json::{Value, json};
use support::fixtures::template;
use support::operator::Operator;
use support::plans::{by_image, create_stable, revisions, set_components, wait_phase};
use support::{Harness, WAIT, plans, wait_until};

/// Writes `replicas` through the ComponentScale's `/scale` subresource, as
/// KEDA and `kubectl scale` do.
async fn scale_to(client: &kube::Client, ns: &str, name: &str, replicas: i32) {
    Api::<ComponentScale>::namespaced(client.clone(), ns)
        .patch_scale(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("cannot write the ComponentScale's scale");
}

/// Waits until the revisions running `images` have these (replicas, ready).
async fn wait_split(
    client: &kube::Client,
    ns: &str,
    plan: &str,
    want: &[(&str, (i32, i32))],
    what: &str,
) {
    wait_until(WAIT, what, || async {
        let revs = revisions(client, ns, plan).await;
        want.iter()
            .all(|(image, counts)| by_image(&revs, image) == Some(*counts))
            .then_some(())
    })
    .await;
}

/// A component `name` of `image`, autoscaled by `autoscaling`, starting at
/// `replicas` when given.
fn autoscaled(name: &str, image: &str, replicas: Option<i32>, autoscaling: Value) -> Value {
    let mut c = json!({"name": name, "template": template(image), "autoscaling": autoscaling});
    if let Some(r) = replicas {
        c["replicas"] = json!(r);
    }
    c
}

fn fixed(name: &str, image: &str, replicas: i32) -> Value {
    json!({"name": name, "replicas": replicas, "template": template(image)})
}

/// KEDA and `kubectl scale` write `/scale`: a paused canary grows on both
/// revisions with the split kept, the fixed component beside it is left
/// alone, promotion keeps the count, and status and the ComponentScale say
/// what runs.
#[tokio::test]
async fn scale_writes_by_a_plain_client_resize_a_paused_canary() {
    let Harness { client, ns } = Harness::new("scale-plain").await;
    let _op = Operator::start(&ns, &[]).await;
    let steps = json!([{"setWeight": 50}, {"pause": {}}]);
    let web = |image: &str| autoscaled("web", image, Some(2), json!({}));
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web("shop:1"), fixed("api", "api:1", 2)], "strategy": {"steps": steps}}),
    )
    .await;
    let scales = Api::<ComponentScale>::namespaced(client.clone(), &ns);
    // The scale target: spec at the starting count, status with the pods of
    // the component and a selector over every revision.
    let scale = wait_until(WAIT, "the ComponentScale's status", || async {
        let s = scales.get_opt("shop-web").await.ok()??;
        (s.status.as_ref()?.replicas == 2).then_some(s)
    })
    .await;
    assert_eq!(scale.spec.replicas, 2);
    assert_eq!(
        scale.status.unwrap().selector.as_deref(),
        Some("releaseplan.io/plan=shop,releaseplan.io/component=web")
    );
    let owner = &scale.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("ReleasePlan", "shop")
    );
    assert!(
        scales.get_opt("shop-api").await.unwrap().is_none(),
        "a fixed component has none"
    );
    // The HPA's view, through /scale.
    let s = scales.get_scale("shop-web").await.unwrap();
    assert_eq!(
        s.status.as_ref().and_then(|s| s.selector.as_deref()),
        Some("releaseplan.io/plan=shop,releaseplan.io/component=web")
    );
    assert!(
        Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), &ns)
            .get_opt("shop-web")
            .await
            .unwrap()
            .is_none(),
        "no maxReplicas: no owned HPA"
    );

    // A canary at 50%, paused for a human.
    set_components(
        &client,
        &ns,
        "shop",
        json!([web("shop:2"), fixed("api", "api:1", 2)]),
    )
    .await;
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:2", (1, 1)), ("shop:1", (1, 1))],
        "the canary at 50% of 2",
    )
    .await;
    // Load: the autoscaler asks for 6, in the middle of the paused canary.
    scale_to(&client, &ns, "shop-web", 6).await;
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:2", (3, 3)), ("shop:1", (3, 3)), ("api:1", (2, 2))],
        "both revisions at 3 of 6, the fixed component untouched",
    )
    .await;
    let p: ReleasePlan = plans::get(&client, &ns, "shop").await.unwrap();
    let s = p.status.unwrap();
    assert_eq!(s.phase, Phase::RollingOut, "still paused: {:?}", s.message);
    let web_status = s.components.iter().find(|c| c.name == "web").unwrap();
    assert_eq!(web_status.replicas, 6);
    let a = web_status.autoscaling.as_ref().unwrap();
    assert_eq!(
        (a.scale.as_str(), a.hpa.as_deref(), a.owns_hpa),
        ("shop-web", None, false)
    );
    wait_until(WAIT, "the ComponentScale to count 6 pods", || async {
        let s = scales.get_opt("shop-web").await.ok()??;
        let st = s.status?;
        (st.replicas == 6 && st.ready_replicas == 6).then_some(())
    })
    .await;

    // Promotion keeps the autoscaled count: no drop to the starting 2.
    plans::request(&client, &ns, "shop", "promote").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:2", (6, 6)), ("shop:1", (0, 0))],
        "the new revision at 6 after promotion",
    )
    .await;
    // Scaling down a settled component: no rollout, the revision follows.
    scale_to(&client, &ns, "shop-web", 4).await;
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:2", (4, 4))],
        "4 after scaling down",
    )
    .await;
    let p = plans::get(&client, &ns, "shop").await.unwrap();
    assert_eq!(
        p.status.unwrap().rollout_count,
        2,
        "scaling starts no rollout"
    );

    // Autoscaling removed: the ComponentScale goes, `replicas` rules again.
    set_components(
        &client,
        &ns,
        "shop",
        json!([fixed("web", "shop:2", 3), fixed("api", "api:1", 2)]),
    )
    .await;
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:2", (3, 3))],
        "back to replicas: 3",
    )
    .await;
    wait_until(WAIT, "the ComponentScale to be deleted", || async {
        scales
            .get_opt("shop-web")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
}

/// The CRD says what an autoscaled component needs, with the field named.
#[tokio::test]
async fn replicas_or_autoscaling_is_required_at_admission() {
    let Harness { client, ns } = Harness::new("scale-admit").await;
    let api = Api::<ReleasePlan>::namespaced(client.clone(), &ns);
    let refused = |spec: Value| {
        let api = api.clone();
        async move {
            match api
                .create(&Default::default(), &support::fixtures::plan("shop", spec))
                .await
            {
                Err(kube::Error::Api(s)) => s.message,
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
    };
    let m = refused(json!({"components": [{"name": "web", "template": template("shop:1")}]})).await;
    assert!(
        m.contains("spec.components[0].replicas")
            && m.contains("replicas is required unless autoscaling is set"),
        "{m}"
    );
    let m = refused(
        json!({"components": [autoscaled("web", "shop:1", None, json!({"minReplicas": 2}))]}),
    )
    .await;
    assert!(
        m.contains("spec.components[0].autoscaling.maxReplicas") && m.contains("need maxReplicas"),
        "{m}"
    );
    let m = refused(json!({"components": [autoscaled("web", "shop:1", None, json!({"minReplicas": 5, "maxReplicas": 3}))]})).await;
    assert!(
        m.contains("spec.components[0].autoscaling.minReplicas")
            && m.contains("must not exceed maxReplicas"),
        "{m}"
    );
}
