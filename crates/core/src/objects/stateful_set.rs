//! The StatefulSet of a StatefulSet component, what the core reads of one,
//! and of its pods. Pure: the controller does the I/O.

use super::deployment::MANAGED_BY;
use crate::api::cached::CachedPod;
use crate::api::{LABEL_COMPONENT, LABEL_PLAN, LABEL_REVISION, ReleasePlan};
use crate::plan::stateful::{StatefulSetIntent, StatefulSetObs, WorkloadObs, WorkloadPod, ordinal};
use k8s_openapi::api::apps::v1::{
    RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy,
    StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use std::collections::BTreeMap;

/// Label on the pods of a StatefulSet component: their readiness is read
/// from the pods themselves, so their changes wake the plan.
pub const LABEL_WORKLOAD: &str = "releaseplan.io/workload";

/// The labels that select a component's pods: plan and component, never the
/// revision (one set runs every revision of its component).
fn selector(plan: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_PLAN.to_string(), plan.to_string()),
        (LABEL_COMPONENT.to_string(), component.to_string()),
    ])
}

/// Builds the StatefulSet for an intent from the template of its revision.
pub fn build(
    plan: &ReleasePlan,
    intent: &StatefulSetIntent,
    template: &PodTemplateSpec,
    owned: bool,
) -> StatefulSet {
    let name = plan.metadata.name.clone().unwrap_or_default();
    let selector = selector(&name, &intent.component);
    let mut template = template.clone();
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    labels.extend(selector.clone());
    labels.insert(LABEL_REVISION.into(), intent.hash.clone());
    labels.insert(LABEL_WORKLOAD.into(), "StatefulSet".into());
    let mut own_labels = selector.clone();
    own_labels.insert(MANAGED_BY.into(), "releaseplan".into());
    let s = &intent.settings;
    let claims = s
        .volume_claim_templates
        .iter()
        .cloned()
        .map(|mut c| {
            c.status = None;
            c
        })
        .collect::<Vec<_>>();
    StatefulSet {
        metadata: super::plan_meta(plan, &intent.name, own_labels, owned),
        spec: Some(StatefulSetSpec {
            replicas: Some(intent.replicas),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..LabelSelector::default()
            },
            template,
            service_name: s.service_name.clone(),
            volume_claim_templates: (!claims.is_empty()).then_some(claims),
            pod_management_policy: s.pod_management_policy.map(|p| p.as_str().to_string()),
            persistent_volume_claim_retention_policy: s
                .persistent_volume_claim_retention_policy
                .as_ref()
                .map(|r| StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: r.when_deleted.map(|w| w.as_str().to_string()),
                    when_scaled: r.when_scaled.map(|w| w.as_str().to_string()),
                }),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateStatefulSetStrategy {
                    partition: Some(intent.partition),
                    max_unavailable: None,
                }),
            }),
            // The operator keeps each revision's template itself.
            revision_history_limit: Some(2),
            ..StatefulSetSpec::default()
        }),
        status: None,
    }
}

/// Whether an observed StatefulSet already has every field of the desired one.
pub fn up_to_date(desired: &StatefulSet, observed: &StatefulSet) -> bool {
    super::has_desired(desired, observed)
}

/// The StatefulSet as the core reads it; `None` without our component label.
pub fn observe(s: &StatefulSet) -> Option<StatefulSetObs> {
    let labels = s.metadata.labels.as_ref()?;
    let component = labels.get(LABEL_COMPONENT)?.clone();
    let spec = s.spec.as_ref();
    Some(StatefulSetObs {
        name: s.metadata.name.clone().unwrap_or_default(),
        component,
        hash: spec
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.labels.as_ref())
            .and_then(|l| l.get(LABEL_REVISION))
            .cloned(),
        replicas: spec.and_then(|s| s.replicas).unwrap_or(1),
        partition: spec
            .and_then(|s| s.update_strategy.as_ref())
            .and_then(|u| u.rolling_update.as_ref())
            .and_then(|r| r.partition)
            .unwrap_or(0),
    })
}

/// A pod of a StatefulSet or DaemonSet component of `seen` as the core
/// reads it; `None` when it belongs to none of them or lacks our labels.
pub fn pod(p: &CachedPod, seen: &WorkloadObs) -> Option<WorkloadPod> {
    let component = p.labels.get(LABEL_COMPONENT)?;
    let hash = p.labels.get(LABEL_REVISION)?;
    p.labels.get(LABEL_WORKLOAD)?;
    let set = seen.stateful_sets.iter().find(|s| s.component == component);
    let daemon = seen.daemon_sets.iter().any(|d| d.component == component);
    if set.is_none() && !daemon {
        return None;
    }
    let name = p.metadata.name.clone().unwrap_or_default();
    Some(WorkloadPod {
        ordinal: set.and_then(|s| ordinal(&s.name, &name)),
        node: p.node.clone(),
        name,
        component: component.to_string(),
        hash: hash.to_string(),
        ready: p.status.as_ref().is_some_and(|s| s.ready),
        terminating: p.metadata.deletion_timestamp.is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::workload::StatefulSetSettings;
    use crate::plan::TemplateSource;
    use serde_json::json;

    fn plan() -> ReleasePlan {
        serde_json::from_value(json!({
            "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
            "metadata": {"name": "shop", "namespace": "prod", "uid": "u-1"},
            "spec": {"components": [{"name": "db", "kind": "StatefulSet", "replicas": 3,
                "template": {"spec": {"containers": [{"name": "db", "image": "db:1"}]}}}]}
        }))
        .unwrap()
    }

    #[test]
    fn the_set_selects_every_revision_and_its_pods_carry_theirs() {
        let p = plan();
        let template: PodTemplateSpec = serde_json::from_value(
            json!({"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": "db:2"}]}}),
        )
        .unwrap();
        let intent = StatefulSetIntent {
            name: "shop-db".into(),
            component: "db".into(),
            hash: "h2".into(),
            template: TemplateSource::Existing,
            replicas: 3,
            partition: 2,
            settings: serde_json::from_value::<StatefulSetSettings>(json!({
                "serviceName": "db", "podManagementPolicy": "Parallel",
                "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]
            }))
            .unwrap(),
            revisions: BTreeMap::new(),
        };
        let s = build(&p, &intent, &template, true);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v["spec"]["selector"]["matchLabels"],
            json!({LABEL_PLAN: "shop", LABEL_COMPONENT: "db"})
        );
        assert_eq!(
            v["spec"]["template"]["metadata"]["labels"][LABEL_REVISION],
            "h2"
        );
        assert_eq!(v["spec"]["template"]["metadata"]["labels"]["app"], "db");
        assert_eq!(v["spec"]["updateStrategy"]["rollingUpdate"]["partition"], 2);
        assert_eq!(v["spec"]["serviceName"], "db");
        assert_eq!(v["spec"]["podManagementPolicy"], "Parallel");
        assert_eq!(
            v["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
            "data"
        );
        assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "u-1");
        let seen = observe(&s).unwrap();
        assert_eq!(
            (seen.hash.as_deref(), seen.replicas, seen.partition),
            (Some("h2"), 3, 2)
        );
        assert!(up_to_date(&s, &s));
        let mut moved = s.clone();
        moved.spec.as_mut().unwrap().update_strategy = None;
        assert!(!up_to_date(&s, &moved));
    }

    #[test]
    fn a_pod_is_read_with_its_ordinal_and_readiness() {
        let sets = WorkloadObs {
            stateful_sets: vec![StatefulSetObs {
                name: "shop-db".into(),
                component: "db".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let p: CachedPod = serde_json::from_value(json!({
            "metadata": {"name": "shop-db-2", "labels": {LABEL_PLAN: "shop", LABEL_COMPONENT: "db", LABEL_REVISION: "h2", LABEL_WORKLOAD: "StatefulSet"}},
            "status": {"conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let w = pod(&p, &sets).unwrap();
        assert_eq!((w.ordinal, w.ready, w.hash.as_str()), (Some(2), true, "h2"));
        let not_ready: CachedPod = serde_json::from_value(json!({
            "metadata": {"name": "shop-db-0", "labels": {LABEL_PLAN: "shop", LABEL_COMPONENT: "db", LABEL_REVISION: "h2", LABEL_WORKLOAD: "StatefulSet"}},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}
        }))
        .unwrap();
        assert!(!pod(&not_ready, &sets).unwrap().ready);
    }
}
