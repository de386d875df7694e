//! The DaemonSet of one revision of a DaemonSet component, and what the core
//! reads of one. Pure: the controller does the I/O.
//!
//! The nodes a revision may run on are requirements on `metadata.name`
//! (`matchFields`) added to the required node selector terms of the
//! template, so the template's own affinity still applies (terms are ORed,
//! requirements within a term ANDed). Kubernetes takes one value per such
//! requirement: "only these nodes" is one copy of each term per node
//! (`In [node]`), "all but these" one `NotIn [node]` per node in every
//! term. The operator owns `metadata.name` requirements in a DaemonSet
//! component's template: any there are replaced.

use super::deployment::{MANAGED_BY, revision_labels};
use super::stateful_set::LABEL_WORKLOAD;
use crate::api::{LABEL_COMPONENT, LABEL_REVISION, ReleasePlan};
use crate::plan::daemon::{DaemonSetIntent, DaemonSetObs, NodeScope};
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use std::collections::BTreeMap;

/// The field the node requirement is on.
const NODE_NAME: &str = "metadata.name";

/// The template limited to `nodes`.
fn scoped(template: &PodTemplateSpec, nodes: &NodeScope) -> PodTemplateSpec {
    let mut t = template.clone();
    let spec = t.spec.get_or_insert_with(Default::default);
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let node = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    let mut terms = node
        .required_during_scheduling_ignored_during_execution
        .take()
        .map(|s| s.node_selector_terms)
        .unwrap_or_default();
    for term in &mut terms {
        if let Some(fields) = term.match_fields.as_mut() {
            fields.retain(|f| f.key != NODE_NAME);
        }
    }
    for term in &mut terms {
        if term.match_fields.as_ref().is_some_and(Vec::is_empty) {
            term.match_fields = None;
        }
    }
    // A term left with nothing was ours alone (an empty term matches no node);
    // copies of one term (one per node) are one again.
    terms.retain(|t| {
        t.match_fields.is_some() || t.match_expressions.as_ref().is_some_and(|e| !e.is_empty())
    });
    terms.dedup();
    let one = |op: &str, node: &String| NodeSelectorRequirement {
        key: NODE_NAME.into(),
        operator: op.into(),
        values: Some(vec![node.clone()]),
    };
    match nodes {
        NodeScope::Only(n) if !n.is_empty() => {
            if terms.is_empty() {
                terms.push(NodeSelectorTerm::default());
            }
            terms = terms
                .iter()
                .flat_map(|t| {
                    n.iter().map(move |node| {
                        let mut t = t.clone();
                        t.match_fields
                            .get_or_insert_with(Vec::new)
                            .push(one("In", node));
                        t
                    })
                })
                .collect();
        }
        NodeScope::Except(n) if !n.is_empty() => {
            if terms.is_empty() {
                terms.push(NodeSelectorTerm::default());
            }
            for t in &mut terms {
                t.match_fields
                    .get_or_insert_with(Vec::new)
                    .extend(n.iter().map(|node| one("NotIn", node)));
            }
        }
        _ => {}
    }
    node.required_during_scheduling_ignored_during_execution =
        (!terms.is_empty()).then_some(NodeSelector {
            node_selector_terms: terms,
        });
    if node
        .required_during_scheduling_ignored_during_execution
        .is_none()
        && node
            .preferred_during_scheduling_ignored_during_execution
            .is_none()
    {
        affinity.node_affinity = None;
    }
    if affinity.node_affinity.is_none()
        && affinity.pod_affinity.is_none()
        && affinity.pod_anti_affinity.is_none()
    {
        spec.affinity = None;
    }
    t
}

/// Builds the DaemonSet for an intent from the template of its revision.
pub fn build(
    plan: &ReleasePlan,
    intent: &DaemonSetIntent,
    template: &PodTemplateSpec,
    owned: bool,
) -> DaemonSet {
    let name = plan.metadata.name.clone().unwrap_or_default();
    let selector = revision_labels(&name, &intent.component, &intent.hash);
    let mut template = scoped(template, &intent.nodes);
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    labels.extend(selector.clone());
    labels.insert(LABEL_WORKLOAD.into(), "DaemonSet".into());
    let mut own_labels = selector.clone();
    own_labels.insert(MANAGED_BY.into(), "releaseplan".into());
    DaemonSet {
        metadata: super::plan_meta(plan, &intent.name, own_labels, owned),
        spec: Some(DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(selector),
                ..LabelSelector::default()
            },
            template,
            // A change of the node lists must never restart a pod on a node
            // it stays on: pods are replaced only by leaving the affinity.
            update_strategy: Some(DaemonSetUpdateStrategy {
                type_: Some("OnDelete".into()),
                rolling_update: None,
            }),
            revision_history_limit: Some(1),
            ..DaemonSetSpec::default()
        }),
        status: None,
    }
}

/// Whether an observed DaemonSet already has every field of the desired one
/// (and no node requirement the desired one lacks).
pub fn up_to_date(desired: &DaemonSet, observed: &DaemonSet) -> bool {
    super::has_desired(desired, observed) && scope_of(observed) == scope_of(desired)
}

/// The nodes a DaemonSet's template allows, as far as the operator limits
/// them.
fn scope_of(d: &DaemonSet) -> NodeScope {
    let terms = d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|s| s.node_selector_terms.as_slice())
        .unwrap_or_default();
    let names = |op: &str| -> Vec<String> {
        let mut n: Vec<String> = terms
            .iter()
            .flat_map(|t| t.match_fields.iter().flatten())
            .filter(|f| f.key == NODE_NAME && f.operator == op)
            .flat_map(|f| f.values.iter().flatten().cloned())
            .collect();
        n.sort();
        n.dedup();
        n
    };
    let (only, except) = (names("In"), names("NotIn"));
    if !only.is_empty() {
        NodeScope::Only(only)
    } else if !except.is_empty() {
        NodeScope::Except(except)
    } else {
        NodeScope::All
    }
}

/// The DaemonSet as the core reads it; `None` without our labels.
pub fn observe(d: &DaemonSet) -> Option<DaemonSetObs> {
    let labels = d.metadata.labels.as_ref()?;
    Some(DaemonSetObs {
        name: d.metadata.name.clone().unwrap_or_default(),
        component: labels.get(LABEL_COMPONENT)?.clone(),
        hash: labels.get(LABEL_REVISION)?.clone(),
        nodes: scope_of(d),
        scheduled: d.status.as_ref().map_or(0, |s| s.desired_number_scheduled),
        counted: d
            .status
            .as_ref()
            .and_then(|s| s.observed_generation)
            .is_some_and(|g| Some(g) >= d.metadata.generation),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::TemplateSource;
    use serde_json::json;

    fn plan() -> ReleasePlan {
        serde_json::from_value(json!({
            "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
            "metadata": {"name": "shop", "namespace": "prod", "uid": "u-1"},
            "spec": {"components": [{"name": "agent", "kind": "DaemonSet",
                "template": {"spec": {"containers": [{"name": "a", "image": "a:1"}]}}}]}
        }))
        .unwrap()
    }

    fn intent(nodes: NodeScope) -> DaemonSetIntent {
        DaemonSetIntent {
            name: "shop-agent-h2".into(),
            component: "agent".into(),
            hash: "h2".into(),
            template: TemplateSource::Existing,
            nodes,
        }
    }

    #[test]
    fn the_node_list_is_added_to_every_term_of_the_templates_own_affinity() {
        let template: PodTemplateSpec = serde_json::from_value(json!({
            "spec": {"containers": [{"name": "a", "image": "a:2"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                    {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["edge"]}]}
                ]}}}}
        }))
        .unwrap();
        let d = build(
            &plan(),
            &intent(NodeScope::Only(vec!["n1".into(), "n2".into()])),
            &template,
            true,
        );
        let v = serde_json::to_value(&d).unwrap();
        let terms = &v["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        // Kubernetes takes one node per requirement: each term once per node.
        let terms = terms.as_array().unwrap();
        assert_eq!(terms.len(), 4);
        let one =
            |node: &str| json!([{"key": "metadata.name", "operator": "In", "values": [node]}]);
        assert_eq!(terms[0]["matchFields"], one("n1"));
        assert_eq!(terms[1]["matchFields"], one("n2"));
        assert_eq!(terms[0]["matchExpressions"], terms[1]["matchExpressions"]);
        assert_eq!(terms[2]["matchExpressions"][0]["key"], "tier");
        assert_eq!(v["spec"]["updateStrategy"]["type"], "OnDelete");
        assert_eq!(
            v["spec"]["template"]["metadata"]["labels"][LABEL_WORKLOAD],
            "DaemonSet"
        );
        let seen = observe(&d).unwrap();
        assert_eq!(seen.nodes, NodeScope::Only(vec!["n1".into(), "n2".into()]));
        // Its own template taken back and scoped again: one requirement, not two.
        let again = build(
            &plan(),
            &intent(NodeScope::Except(vec!["n3".into()])),
            &d.spec.clone().unwrap().template,
            true,
        );
        assert_eq!(
            observe(&again).unwrap().nodes,
            NodeScope::Except(vec!["n3".into()])
        );
        let two = build(
            &plan(),
            &intent(NodeScope::Except(vec!["n3".into(), "n4".into()])),
            &again.spec.clone().unwrap().template,
            true,
        );
        let v = serde_json::to_value(&two).unwrap();
        let terms = v["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(
            terms.len(),
            2,
            "the template's own two terms, each without n3 and n4"
        );
        assert_eq!(terms[0]["matchFields"].as_array().unwrap().len(), 2);
        assert_eq!(
            observe(&two).unwrap().nodes,
            NodeScope::Except(vec!["n3".into(), "n4".into()])
        );
        let all = build(
            &plan(),
            &intent(NodeScope::All),
            &d.spec.unwrap().template,
            true,
        );
        assert_eq!(observe(&all).unwrap().nodes, NodeScope::All);
        let v = serde_json::to_value(&all).unwrap();
        assert_eq!(v["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"].as_array().unwrap().len(), 2);
        assert!(!up_to_date(&all, &again));
        assert!(up_to_date(&all, &all));
    }

    #[test]
    fn a_template_without_affinity_gets_one_term_and_loses_it_at_promotion() {
        let template: PodTemplateSpec = serde_json::from_value(
            json!({"spec": {"containers": [{"name": "a", "image": "a:2"}]}}),
        )
        .unwrap();
        let only = build(
            &plan(),
            &intent(NodeScope::Only(vec!["n1".into()])),
            &template,
            true,
        );
        assert_eq!(
            observe(&only).unwrap().nodes,
            NodeScope::Only(vec!["n1".into()])
        );
        let all = build(
            &plan(),
            &intent(NodeScope::All),
            &only.spec.unwrap().template,
            true,
        );
        assert!(all.spec.unwrap().template.spec.unwrap().affinity.is_none());
    }
}
