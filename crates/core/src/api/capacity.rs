//! How much room a release may take: pods above `replicas` (surge) and pods
//! missing below it (unavailable), the two numbers every Kubernetes user knows
//! from a Deployment's rolling update.
//!
//! Without `capacity` a step adds the new pods before the stable ones go
//! (capacity never below `replicas`, as it always was). With it, a component on
//! nodes that are full (GPUs) releases within a fixed budget: a step takes
//! stable pods away first and brings the new ones up in their place.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The capacity a component's release may use.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    /// Pods allowed above `replicas` while revisions replace each other: a
    /// count, or a percent of `replicas` rounded up. Default `25%`. `0` on
    /// nodes with no spare room (full GPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_percent_from_zero")]
    pub max_surge: Option<IntOrString>,
    /// Pods allowed missing (not ready) below `replicas` while revisions
    /// replace each other: a count, or a percent of `replicas` rounded down.
    /// Default `25%`. When both resolve to 0, one pod may be missing (as a
    /// Deployment does), or no release could ever move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_percent_from_zero")]
    pub max_unavailable: Option<IntOrString>,
}

/// The default of both fields, as a Deployment's.
const DEFAULT_PERCENT: i64 = 25;

/// The two limits as counts of pods, for one count of replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Pods allowed above the replicas.
    pub surge: i32,
    /// Pods allowed missing below the replicas.
    pub unavailable: i32,
}

impl Capacity {
    /// The limits for `replicas` pods.
    pub fn limits(&self, replicas: i32) -> Limits {
        let surge = resolve(self.max_surge.as_ref(), replicas, true);
        let unavailable = resolve(self.max_unavailable.as_ref(), replicas, false);
        if surge == 0 && unavailable == 0 {
            return Limits {
                surge: 0,
                unavailable: 1,
            };
        }
        Limits { surge, unavailable }
    }
}

/// A count or a percent of `replicas` (up or down), never negative.
fn resolve(v: Option<&IntOrString>, replicas: i32, round_up: bool) -> i32 {
    let r = i64::from(replicas.max(0));
    let percent = |p: i64| {
        let p = p.clamp(0, 100);
        let n = if round_up {
            (r * p + 99) / 100
        } else {
            r * p / 100
        };
        i32::try_from(n).unwrap_or(0)
    };
    match v {
        None => percent(DEFAULT_PERCENT),
        Some(IntOrString::Int(i)) => (*i).max(0),
        Some(IntOrString::String(s)) => s
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<i64>().ok())
            .map_or(0, percent),
    }
}

/// Schema of an int-or-percent that may be zero (`0`, `2`, `"0%"`, `"25%"`).
fn int_or_percent_from_zero(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "x-kubernetes-int-or-string": true,
        "anyOf": [
            {"type": "integer", "minimum": 0, "maximum": 10000},
            {"type": "string", "pattern": "^([0-9]|[1-9][0-9]|100)%$"}
        ]
    })
}

/// CEL: capacity is for Deployment components (a StatefulSet replaces its
/// pods one by one and never surges; a DaemonSet has `daemonSet.maxUnavailable`).
pub const CAPACITY_DEPLOYMENT_ONLY_RULE: &str =
    "!has(self.capacity) || !has(self.kind) || self.kind == 'Deployment'";
/// Message of [`CAPACITY_DEPLOYMENT_ONLY_RULE`].
pub const CAPACITY_DEPLOYMENT_ONLY_MESSAGE: &str = "capacity is for Deployment components only: a StatefulSet replaces its pods in place and a DaemonSet has daemonSet.maxUnavailable";

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(s: Option<IntOrString>, u: Option<IntOrString>) -> Capacity {
        Capacity {
            max_surge: s,
            max_unavailable: u,
        }
    }

    #[test]
    fn percents_round_as_a_deployment_does() {
        let c = Capacity::default();
        assert_eq!(
            c.limits(4),
            Limits {
                surge: 1,
                unavailable: 1
            }
        );
        assert_eq!(
            c.limits(10),
            Limits {
                surge: 3,
                unavailable: 2
            }
        );
        let c = cap(
            Some(IntOrString::String("0%".into())),
            Some(IntOrString::String("50%".into())),
        );
        assert_eq!(
            c.limits(5),
            Limits {
                surge: 0,
                unavailable: 2
            }
        );
    }

    #[test]
    fn both_zero_lets_one_pod_be_missing() {
        let c = cap(Some(IntOrString::Int(0)), Some(IntOrString::Int(0)));
        assert_eq!(
            c.limits(4),
            Limits {
                surge: 0,
                unavailable: 1
            }
        );
        // 25% of 1 replica rounds down to 0 unavailable, but 1 up for surge.
        assert_eq!(
            Capacity::default().limits(1),
            Limits {
                surge: 1,
                unavailable: 0
            }
        );
    }
}
