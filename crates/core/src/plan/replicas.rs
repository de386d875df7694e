//! Replica arithmetic shared by the desired Deployments and the traffic
//! split: the new revision's share of a component's replicas.

/// Replicas of the new revision at a weight: rounded up, so any weight above
/// zero moves at least one pod.
pub fn canary_replicas(replicas: i32, weight: i32) -> i32 {
    let r = i64::from(replicas.max(0));
    let w = i64::from(weight.clamp(0, 100));
    i32::try_from((r * w + 99) / 100).unwrap_or(replicas)
}
