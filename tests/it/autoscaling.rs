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

/// KEDA and `kubectl scale` write `/scale`: a paused canary grows to 7 on
/// both revisions with the split kept, the fixed component beside it is left
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
    // Load: the autoscaler asks for 7, in the middle of the paused canary:
    // the new revision gets ceil(7 * 50%) = 4, the stable one the other 3.
    scale_to(&client, &ns, "shop-web", 7).await;
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:2", (4, 4)), ("shop:1", (3, 3)), ("api:1", (2, 2))],
        "4 and 3 of 7, the fixed component untouched",
    )
    .await;
    let p: ReleasePlan = plans::get(&client, &ns, "shop").await.unwrap();
    let s = p.status.unwrap();
    assert_eq!(s.phase, Phase::RollingOut, "still paused: {:?}", s.message);
    let web_status = s.components.iter().find(|c| c.name == "web").unwrap();
    assert_eq!(web_status.replicas, 7);
    let a = web_status.autoscaling.as_ref().unwrap();
    assert_eq!(
        (a.scale.as_str(), a.hpa.as_deref(), a.owns_hpa),
        ("shop-web", None, false)
    );
    wait_until(WAIT, "the ComponentScale to count 7 pods", || async {
        let s = scales.get_opt("shop-web").await.ok()??;
        let st = s.status?;
        (st.replicas == 7 && st.ready_replicas == 7).then_some(())
    })
    .await;

    // Promotion keeps the autoscaled count: no drop to the starting 2.
    plans::request(&client, &ns, "shop", "promote").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:2", (7, 7)), ("shop:1", (0, 0))],
        "the new revision at 7 after promotion",
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

/// A pod template running `image` whose container requests 100m of CPU: the
/// HPA's utilization is the simulated usage over that request.
fn cpu_template(image: &str) -> Value {
    let mut t = template(image);
    t["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "100m"}});
    t
}

/// An owned HPA between `min` and `max` at 50% CPU, scaling at once both ways.
fn hpa(min: i32, max: i32) -> Value {
    json!({
        "minReplicas": min,
        "maxReplicas": max,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 50}}}],
        "behavior": {
            "scaleUp": {"stabilizationWindowSeconds": 0,
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 1}]},
            "scaleDown": {"stabilizationWindowSeconds": 0,
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 1}]}
        }
    })
}

fn web_hpa(image: &str, autoscaling: Value) -> Value {
    json!({"name": "web", "template": cpu_template(image), "autoscaling": autoscaling})
}

fn web_hpa_faulty(image: &str, fault: &str, autoscaling: Value) -> Value {
    let mut c = web_hpa(image, autoscaling);
    c["template"]["metadata"]["annotations"] = json!({"kwok.releaseplan.io/fault": fault});
    c
}

/// The owned HPA of `shop-web`, once it exists.
async fn owned_hpa(client: &kube::Client, ns: &str) -> HorizontalPodAutoscaler {
    wait_until(WAIT, "the owned HPA", || async {
        Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), ns)
            .get_opt("shop-web")
            .await
            .ok()?
    })
    .await
}

/// The real HPA controller, over real resource metrics, scales a canary
/// paused at 50%: both revisions grow and the split holds; the plan says
/// why the HPA stops at its maximum; promotion keeps its 6; after the load
/// goes it scales the promoted revision down.
#[tokio::test]
async fn an_hpa_scales_a_paused_canary_and_promotion_keeps_its_count() {
    let Harness { client, ns } = Harness::new("scale-hpa").await;
    let _op = Operator::start(&ns, &[]).await;
    // 10m of 100m: 10%, below the 50% target: the HPA holds its minimum.
    support::metrics::set_cpu_usage(&client, &ns, 10).await;
    let steps = json!([{"setWeight": 50}, {"pause": {}}]);
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web_hpa("shop:1", hpa(2, 6))], "strategy": {"steps": steps}}),
    )
    .await;
    let h = owned_hpa(&client, &ns).await.spec.expect("HPA spec");
    assert_eq!(h.scale_target_ref.kind, "ComponentScale");
    assert_eq!(h.scale_target_ref.name, "shop-web");
    assert_eq!((h.min_replicas, h.max_replicas), (Some(2), 6));
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:1", (2, 2))],
        "the minimum, 2",
    )
    .await;

    set_components(&client, &ns, "shop", json!([web_hpa("shop:2", hpa(2, 6))])).await;
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:2", (1, 1)), ("shop:1", (1, 1))],
        "the canary at 50% of 2",
    )
    .await;
    // Load: 100m of 100m is 200% of the target; the HPA goes to its maximum.
    support::metrics::set_cpu_usage(&client, &ns, 100).await;
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:2", (3, 3)), ("shop:1", (3, 3))],
        "the HPA's 6, split 3 and 3 in the paused canary",
    )
    .await;
    let p = wait_until(WAIT, "status to say the HPA is at its maximum", || async {
        let p = plans::get(&client, &ns, "shop").await?;
        let s = p.status.clone()?;
        let c = s.components.iter().find(|c| c.name == "web")?;
        let a = c.autoscaling.as_ref()?;
        (c.replicas == 6 && a.message.as_deref()?.contains("TooManyReplicas")).then_some(p)
    })
    .await;
    let s = p.status.unwrap();
    assert_eq!(s.phase, Phase::RollingOut, "still paused: {:?}", s.message);
    assert_eq!(s.current_step, 1);
    assert_eq!(
        s.components[0].autoscaling.as_ref().unwrap().hpa.as_deref(),
        Some("shop-web")
    );

    // Promotion at the autoscaled count keeps it.
    plans::request(&client, &ns, "shop", "promote").await;
    wait_phase(&client, &ns, "shop", Phase::Stable, WAIT).await;
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:2", (6, 6)), ("shop:1", (0, 0))],
        "6 on the promoted revision",
    )
    .await;
    // The load goes: the HPA scales the settled component down.
    support::metrics::set_cpu_usage(&client, &ns, 10).await;
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:2", (2, 2))],
        "back to the minimum",
    )
    .await;
}

/// An HPA change released with a revision that fails goes back with it: the
/// HPA keeps its old maximum, the rollback keeps the autoscaled count, and
/// the HPA goes on scaling the rolled-back plan.
#[tokio::test]
async fn an_hpa_change_is_rolled_back_with_its_failing_revision() {
    let Harness { client, ns } = Harness::new("scale-back").await;
    let _op = Operator::start(&ns, &[]).await;
    support::metrics::set_cpu_usage(&client, &ns, 100).await;
    let steps = json!([{"setWeight": 50}, {"pause": {"duration": "5s"}}]);
    create_stable(
        &client,
        &ns,
        "shop",
        json!({"components": [web_hpa("shop:1", hpa(2, 3))], "strategy": {"steps": steps}}),
    )
    .await;
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:1", (3, 3))],
        "the maximum, 3",
    )
    .await;

    // A crash-looping image and a higher maximum, in one change.
    set_components(
        &client,
        &ns,
        "shop",
        json!([web_hpa_faulty("shop:2", "crash-loop", hpa(2, 5))]),
    )
    .await;
    let p = wait_phase(&client, &ns, "shop", Phase::RolledBack, WAIT).await;
    assert_eq!(p.status.unwrap().components[0].replicas, 3);
    let h = owned_hpa(&client, &ns).await.spec.expect("HPA spec");
    assert_eq!(h.max_replicas, 3, "the HPA went back with the revision");
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:1", (3, 3)), ("shop:2", (0, 0))],
        "the stable revision at the autoscaled 3",
    )
    .await;
    // Still under load, it never went past the old maximum.
    let scale = Api::<ComponentScale>::namespaced(client.clone(), &ns)
        .get("shop-web")
        .await
        .unwrap();
    assert_eq!(scale.spec.replicas, 3);

    // Scaling goes on while rolled back: the load goes, the stable revision shrinks.
    support::metrics::set_cpu_usage(&client, &ns, 10).await;
    wait_split(
        &client,
        &ns,
        "shop",
        &[("shop:1", (2, 2))],
        "the minimum while rolled back",
    )
    .await;
    let p = plans::get(&client, &ns, "shop").await.unwrap();
    assert_eq!(p.status.unwrap().phase, Phase::RolledBack);
}
