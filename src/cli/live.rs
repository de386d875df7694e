//! What `get` and the dashboard read beside a plan to show its revisions: its
//! revision Deployments, and for StatefulSet components their StatefulSets
//! (and, in `get`, their pods).
//!
//! A StatefulSet runs every revision of its component: the ordinals at and
//! above its partition run the revision of its template, those below it the
//! older one. With the pods at hand each revision is counted from them (as
//! the operator counts it); without (the dashboard watches no pods) the
//! ordinals come from the partition and the counts from the plan's status.

use crate::api::{LABEL_COMPONENT, LABEL_REVISION, ReleasePlanStatus};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use releaseplan_core::objects::{daemon_set, stateful_set};
use releaseplan_core::plan::stateful::ordinal;
use std::collections::BTreeMap;

/// The objects of a plan beside it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Live<'a> {
    /// Its revision Deployments.
    pub deployments: &'a [Deployment],
    /// The StatefulSets of its StatefulSet components.
    pub stateful_sets: &'a [StatefulSet],
    /// The DaemonSets of its DaemonSet components.
    pub daemon_sets: &'a [DaemonSet],
    /// The pods of those StatefulSets (empty: counted from status).
    pub pods: &'a [Pod],
}

/// One revision of a StatefulSet component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetRevision {
    /// The StatefulSet.
    pub set: String,
    /// Its component.
    pub component: String,
    /// The revision.
    pub hash: String,
    /// Its pods.
    pub replicas: i32,
    /// Its ready pods.
    pub ready: i32,
    /// The ordinals of its pods (a StatefulSet's).
    pub ordinals: Vec<i32>,
    /// The nodes of its pods (a DaemonSet's; without pods, the nodes it is
    /// limited to, when it is).
    pub nodes: Vec<String>,
    /// `StatefulSet` or `DaemonSet`.
    pub kind: &'static str,
    /// Its container images.
    pub images: Vec<String>,
}

fn images_of(spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> Vec<String> {
    spec.map(|s| {
        s.containers
            .iter()
            .filter_map(|c| c.image.clone())
            .collect()
    })
    .unwrap_or_default()
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The revisions of each StatefulSet component, newest template first, then
/// those of each DaemonSet component.
pub fn set_revisions(live: Live<'_>, status: &ReleasePlanStatus) -> Vec<SetRevision> {
    let mut out = stateful_revisions(live, status);
    out.extend(daemon_revisions(live, status));
    out
}

/// One revision per DaemonSet: its pods' nodes, or without pods the nodes
/// it is limited to and the counts of status.
fn daemon_revisions(live: Live<'_>, status: &ReleasePlanStatus) -> Vec<SetRevision> {
    use releaseplan_core::plan::daemon::NodeScope;
    let mut out = Vec::new();
    for d in live.daemon_sets {
        let Some(seen) = daemon_set::observe(d) else {
            continue;
        };
        let c = status.components.iter().find(|c| c.name == seen.component);
        let pods: Vec<&Pod> = live
            .pods
            .iter()
            .filter(|p| p.labels().get(LABEL_COMPONENT) == Some(&seen.component))
            .filter(|p| p.labels().get(LABEL_REVISION) == Some(&seen.hash))
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let images = images_of(d.spec.as_ref().and_then(|s| s.template.spec.as_ref()));
        let (replicas, ready, mut nodes) = if pods.is_empty() {
            let (replicas, ready) = c.map_or((0, 0), |c| {
                if c.current_hash.as_deref() == Some(seen.hash.as_str()) {
                    (c.current_replicas, c.current_ready)
                } else if c.stable_hash.as_deref() == Some(seen.hash.as_str()) {
                    (c.stable_replicas, c.stable_ready)
                } else {
                    (0, 0)
                }
            });
            let nodes = match &seen.nodes {
                NodeScope::Only(n) => n.clone(),
                NodeScope::All | NodeScope::Except(_) => Vec::new(),
            };
            (replicas, ready, nodes)
        } else {
            let n = i32::try_from(pods.len()).unwrap_or(i32::MAX);
            let r = pods.iter().filter(|p| ready(p)).count();
            let nodes = pods
                .iter()
                .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                .collect();
            (n, i32::try_from(r).unwrap_or(i32::MAX), nodes)
        };
        nodes.sort();
        out.push(SetRevision {
            set: d.name_any(),
            component: seen.component.clone(),
            hash: seen.hash.clone(),
            replicas,
            ready,
            ordinals: Vec::new(),
            nodes,
            kind: "DaemonSet",
            images,
        });
    }
    out
}

/// The revisions of each StatefulSet component, newest template first.
fn stateful_revisions(live: Live<'_>, status: &ReleasePlanStatus) -> Vec<SetRevision> {
    let mut out = Vec::new();
    for set in live.stateful_sets {
        let Some(seen) = stateful_set::observe(set) else {
            continue;
        };
        let name = set.name_any();
        let c = status.components.iter().find(|c| c.name == seen.component);
        let template_images = images_of(set.spec.as_ref().and_then(|s| s.template.spec.as_ref()));
        let pods: Vec<&Pod> = live
            .pods
            .iter()
            .filter(|p| p.labels().get(LABEL_COMPONENT) == Some(&seen.component))
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        if pods.is_empty() {
            out.extend(from_partition(&name, &seen, c, template_images));
            continue;
        }
        let mut by: BTreeMap<String, SetRevision> = BTreeMap::new();
        for p in pods {
            let Some(hash) = p.labels().get(LABEL_REVISION) else {
                continue;
            };
            let r = by.entry(hash.clone()).or_insert_with(|| SetRevision {
                set: name.clone(),
                component: seen.component.clone(),
                hash: hash.clone(),
                replicas: 0,
                ready: 0,
                ordinals: Vec::new(),
                nodes: Vec::new(),
                kind: "StatefulSet",
                images: images_of(p.spec.as_ref()),
            });
            r.replicas += 1;
            r.ready += i32::from(ready(p));
            r.ordinals.extend(ordinal(&name, &p.name_any()));
        }
        let mut revs: Vec<SetRevision> = by.into_values().collect();
        for r in &mut revs {
            r.ordinals.sort_unstable();
        }
        revs.sort_by_key(|r| std::cmp::Reverse(r.ordinals.last().copied()));
        out.extend(revs);
    }
    out
}

/// The revisions as the partition splits the ordinals; counts from status.
fn from_partition(
    name: &str,
    seen: &releaseplan_core::plan::stateful::StatefulSetObs,
    c: Option<&crate::api::ComponentStatus>,
    images: Vec<String>,
) -> Vec<SetRevision> {
    let n = seen.replicas.max(0);
    let p = seen.partition.clamp(0, n);
    let counts = |hash: &str| {
        c.map_or((0, 0), |c| {
            if c.current_hash.as_deref() == Some(hash) {
                (c.current_replicas, c.current_ready)
            } else if c.stable_hash.as_deref() == Some(hash) {
                (c.stable_replicas, c.stable_ready)
            } else {
                (0, 0)
            }
        })
    };
    let mut out = Vec::new();
    if let Some(hash) = &seen.hash {
        let (replicas, ready) = counts(hash);
        out.push(SetRevision {
            set: name.to_string(),
            component: seen.component.clone(),
            hash: hash.clone(),
            replicas,
            ready,
            ordinals: (p..n).collect(),
            nodes: Vec::new(),
            kind: "StatefulSet",
            images,
        });
    }
    let older = c.and_then(|c| {
        [&c.stable_hash, &c.current_hash]
            .into_iter()
            .flatten()
            .find(|h| Some(*h) != seen.hash.as_ref())
            .cloned()
    });
    if let Some(hash) = older.filter(|_| p > 0) {
        let (replicas, ready) = counts(&hash);
        out.push(SetRevision {
            set: name.to_string(),
            component: seen.component.clone(),
            hash,
            replicas,
            ready,
            ordinals: (0..p).collect(),
            nodes: Vec::new(),
            kind: "StatefulSet",
            images: Vec::new(),
        });
    }
    out
}

/// The StatefulSets, DaemonSets and their pods as the operator's core reads
/// them (what `preview` starts a live plan's simulation from).
pub fn workloads(
    sets: &[StatefulSet],
    daemons: &[DaemonSet],
    pods: &[Pod],
) -> releaseplan_core::plan::stateful::WorkloadObs {
    let mut seen = releaseplan_core::plan::stateful::WorkloadObs {
        stateful_sets: sets.iter().filter_map(stateful_set::observe).collect(),
        daemon_sets: daemons.iter().filter_map(daemon_set::observe).collect(),
        pods: Vec::new(),
    };
    seen.pods = pods
        .iter()
        .filter_map(|p| {
            let cached: crate::api::cached::CachedPod = serde_json::to_value(p)
                .ok()
                .and_then(|v| serde_json::from_value(v).ok())?;
            stateful_set::pod(&cached, &seen)
        })
        .collect();
    seen
}

/// `0-2,4`: ordinals as ranges.
pub fn ordinals_text(ordinals: &[i32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ordinals.len() {
        let start = ordinals[i];
        let mut end = start;
        while i + 1 < ordinals.len() && ordinals[i + 1] == end + 1 {
            i += 1;
            end = ordinals[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(partition: i32) -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "shop-db", "labels": {LABEL_COMPONENT: "db"}},
            "spec": {"replicas": 3, "selector": {}, "serviceName": "db",
                "updateStrategy": {"rollingUpdate": {"partition": partition}},
                "template": {"metadata": {"labels": {LABEL_REVISION: "v2"}},
                             "spec": {"containers": [{"name": "db", "image": "db:2"}]}}}
        }))
        .unwrap()
    }

    fn pod(ordinal: i32, hash: &str, image: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": format!("shop-db-{ordinal}"), "labels": {LABEL_COMPONENT: "db", LABEL_REVISION: hash}},
            "spec": {"containers": [{"name": "db", "image": image}]},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap()
    }

    fn status() -> ReleasePlanStatus {
        serde_json::from_value(json!({"phase": "RollingOut", "components": [{
            "name": "db", "currentHash": "v2", "stableHash": "v1", "replicas": 3,
            "currentReplicas": 1, "currentReady": 1, "stableReplicas": 2, "stableReady": 2
        }]}))
        .unwrap()
    }

    #[test]
    fn revisions_are_counted_from_the_pods_with_their_ordinals() {
        let sets = [set(2)];
        let pods = [
            pod(0, "v1", "db:1", true),
            pod(1, "v1", "db:1", false),
            pod(2, "v2", "db:2", true),
        ];
        let live = Live {
            stateful_sets: &sets,
            pods: &pods,
            ..Live::default()
        };
        let revs = set_revisions(live, &status());
        assert_eq!(revs.len(), 2);
        assert_eq!(
            (
                revs[0].hash.as_str(),
                revs[0].ordinals.clone(),
                revs[0].ready
            ),
            ("v2", vec![2], 1)
        );
        assert_eq!(
            (
                revs[1].hash.as_str(),
                revs[1].ordinals.clone(),
                revs[1].ready
            ),
            ("v1", vec![0, 1], 1)
        );
        assert_eq!(revs[1].images, ["db:1"]);
    }

    #[test]
    fn without_pods_the_partition_splits_the_ordinals() {
        let sets = [set(2)];
        let live = Live {
            stateful_sets: &sets,
            ..Live::default()
        };
        let revs = set_revisions(live, &status());
        assert_eq!(
            (
                revs[0].hash.as_str(),
                revs[0].ordinals.clone(),
                revs[0].replicas
            ),
            ("v2", vec![2], 1)
        );
        assert_eq!(
            (
                revs[1].hash.as_str(),
                revs[1].ordinals.clone(),
                revs[1].replicas
            ),
            ("v1", vec![0, 1], 2)
        );
        assert_eq!(ordinals_text(&[0, 1, 2, 4, 6, 7]), "0-2,4,6-7");
    }
}
