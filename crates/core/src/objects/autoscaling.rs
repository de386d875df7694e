//! The ComponentScale of an autoscaled component and the HPA the operator
//! owns for it, built purely from the core's intent.

use crate::api::scale::{Autoscaling, ComponentScale, ComponentScaleSpec, ComponentScaleStatus};
use crate::api::{GROUP, LABEL_COMPONENT, LABEL_PLAN};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The label selector (as text) of every pod of a component, whatever its
/// revision: what the autoscaler averages its metrics over.
pub fn selector(plan: &str, component: &str) -> String {
    format!("{LABEL_PLAN}={plan},{LABEL_COMPONENT}={component}")
}

/// A new ComponentScale at `initial` replicas (its status is written apart,
/// through the status subresource).
pub fn scale(meta: ObjectMeta, initial: i32) -> ComponentScale {
    let name = meta.name.clone().unwrap_or_default();
    let mut s = ComponentScale::new(&name, ComponentScaleSpec { replicas: initial });
    s.metadata = meta;
    s
}

/// The status of a component's ComponentScale.
pub fn scale_status(plan: &str, component: &str, pods: i32, ready: i32) -> ComponentScaleStatus {
    ComponentScaleStatus {
        replicas: pods,
        ready_replicas: ready,
        selector: Some(selector(plan, component)),
    }
}

/// The HPA of an autoscaled component: the spec's bounds, metrics and
/// behavior, scaling the component's ComponentScale `meta.name`.
pub fn hpa(meta: ObjectMeta, spec: &Autoscaling) -> HorizontalPodAutoscaler {
    let name = meta.name.clone().unwrap_or_default();
    HorizontalPodAutoscaler {
        metadata: meta,
        spec: Some(HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some(format!("{GROUP}/v1alpha1")),
                kind: "ComponentScale".into(),
                name,
            },
            min_replicas: spec.min_replicas,
            max_replicas: spec.max_replicas.unwrap_or(1),
            metrics: spec.metrics.clone(),
            behavior: spec.behavior.clone(),
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hpa_targets_the_component_scale_of_its_own_name() {
        let meta = ObjectMeta {
            name: Some("shop-web".into()),
            ..ObjectMeta::default()
        };
        let spec = Autoscaling {
            min_replicas: Some(2),
            max_replicas: Some(9),
            ..Autoscaling::default()
        };
        let h = hpa(meta, &spec);
        let s = h.spec.expect("an HPA spec");
        assert_eq!(s.scale_target_ref.kind, "ComponentScale");
        assert_eq!(s.scale_target_ref.name, "shop-web");
        assert_eq!(
            s.scale_target_ref.api_version.as_deref(),
            Some("releaseplan.io/v1alpha1")
        );
        assert_eq!((s.min_replicas, s.max_replicas), (Some(2), 9));
        assert_eq!(
            selector("shop", "web"),
            "releaseplan.io/plan=shop,releaseplan.io/component=web"
        );
    }
}
