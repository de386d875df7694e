//! Autoscaled components: their ComponentScale (the scale target an HPA or
//! KEDA writes) and the HPA the operator owns, decided from the spec, the
//! phase and what is observed.
//!
//! The replicas an autoscaler sets replace the spec's before any arithmetic
//! ([`super::Target::with_scales`]), so every step, the capacity rule and the
//! rollback work on the autoscaled total unchanged. The owned HPA's own spec
//! (min, max, metrics, behavior) is released with the revision: it is written
//! only once the component is settled on the spec's revision, so a rollout
//! that fails leaves the HPA as the stable revision had it, and a rollback
//! needs no record of the old one (docs/decisions.md, "Autoscaling").

use super::{Observation, Target};
use crate::api::scale::scale_name;
use crate::api::{Autoscaling, ComponentAutoscaling, Phase, ReleasePlanStatus};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerCondition;
use std::collections::BTreeSet;

/// What is observed of one component's autoscaling objects.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScaleObs {
    /// Component.
    pub component: String,
    /// `spec.replicas` of its ComponentScale; `None`: there is none.
    pub replicas: Option<i32>,
    /// An HPA the plan owns targets it.
    pub hpa: bool,
    /// Why that HPA cannot scale as its metrics ask (its `AbleToScale` or
    /// `ScalingLimited` condition), when it cannot.
    pub hpa_message: Option<String>,
}

/// The ComponentScale of a component: kept (created when missing) with this
/// status, or deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScaleState {
    /// Create it at `initial` replicas when missing (never overwrite the
    /// autoscaler's), and record the pods of every revision in its status.
    Keep {
        /// `spec.replicas` of a new ComponentScale.
        initial: i32,
        /// Pods of every revision (`status.replicas`).
        pods: i32,
        /// Ready pods of every revision (`status.readyReplicas`).
        ready: i32,
    },
    /// Autoscaling was removed from the component: the ComponentScale goes.
    Delete,
}

/// The HPA the plan owns for a component.
#[derive(Debug, Clone, PartialEq)]
pub enum AutoscalerIntent {
    /// Settled on the spec's revision: the HPA is the spec's.
    Apply(Autoscaling),
    /// A release in flight: the HPA keeps the spec it has (the stable
    /// revision's); made from the spec only when there is none yet.
    CreateOnly(Autoscaling),
    /// Leave it as it is (a release in flight, and the spec owns none).
    Keep,
    /// No HPA is owned for the component any more.
    Delete,
}

/// The autoscaling objects of one component.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleIntent {
    /// Component.
    pub component: String,
    /// Name of the ComponentScale and of the owned HPA.
    pub name: String,
    /// The ComponentScale.
    pub scale: ScaleState,
    /// The owned HPA.
    pub autoscaler: AutoscalerIntent,
}

/// The autoscaling objects of every component that is autoscaled or still
/// has one of them.
pub fn intents(obs: &Observation, target: &Target, status: &ReleasePlanStatus) -> Vec<ScaleIntent> {
    let names: BTreeSet<&str> = target
        .components
        .iter()
        .filter(|c| c.autoscaling.is_some())
        .map(|c| c.name.as_str())
        .chain(obs.scales.iter().map(|s| s.component.as_str()))
        .collect();
    names
        .into_iter()
        .map(|name| {
            let t = target.component(name);
            let auto = t.and_then(|t| t.autoscaling.as_ref());
            let seen = obs.scales.iter().find(|s| s.component == name);
            let settled = status.phase == Phase::Stable
                && t.is_some_and(|t| {
                    status
                        .components
                        .iter()
                        .any(|c| c.name == name && c.current_hash.as_deref() == Some(&t.hash))
                });
            let scale = match (t, auto) {
                (Some(t), Some(_)) => {
                    let (pods, ready) = obs
                        .revisions
                        .iter()
                        // A baseline's pods stand beside the component's, never
                        // among what its autoscaler scales.
                        .filter(|r| {
                            r.component == name && !crate::api::revision::is_baseline(&r.hash)
                        })
                        .fold((0, 0), |(p, r), rev| {
                            (p + rev.current.max(0), r + rev.ready.max(0))
                        });
                    ScaleState::Keep {
                        initial: t.spec_replicas,
                        pods,
                        ready,
                    }
                }
                _ => ScaleState::Delete,
            };
            let autoscaler = match auto {
                // Its scale target goes: so does the HPA.
                None => AutoscalerIntent::Delete,
                Some(a) if a.owns_hpa() && settled => AutoscalerIntent::Apply(a.clone()),
                Some(a) if a.owns_hpa() => AutoscalerIntent::CreateOnly(a.clone()),
                Some(_) if settled => AutoscalerIntent::Delete,
                Some(_) => AutoscalerIntent::Keep,
            };
            // Nothing to delete that is not there.
            let autoscaler = match autoscaler {
                AutoscalerIntent::Delete if !seen.is_some_and(|s| s.hpa) => AutoscalerIntent::Keep,
                other => other,
            };
            ScaleIntent {
                component: name.to_string(),
                name: scale_name(&obs.plan, name),
                scale,
                autoscaler,
            }
        })
        .collect()
}

/// What status says of a component's autoscaling.
pub fn component_autoscaling(
    obs: &Observation,
    target: &Target,
    component: &str,
) -> Option<ComponentAutoscaling> {
    let auto = target.component(component)?.autoscaling.as_ref()?;
    let seen = obs.scales.iter().find(|s| s.component == component);
    Some(ComponentAutoscaling {
        scale: scale_name(&obs.plan, component),
        hpa: seen
            .is_some_and(|s| s.hpa)
            .then(|| scale_name(&obs.plan, component)),
        owns_hpa: auto.owns_hpa(),
        message: seen.and_then(|s| s.hpa_message.clone()),
    })
}

/// Why an HPA cannot scale as its metrics ask, from its conditions:
/// `AbleToScale` false (it cannot read or write the scale), or
/// `ScalingLimited` true (min or max holds it); `ScalingActive` false (no
/// metrics) too. `None` when it scales freely.
pub fn hpa_message(conditions: &[HorizontalPodAutoscalerCondition]) -> Option<String> {
    let says = |type_: &str, status: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
    };
    let c = says("AbleToScale", "False")
        .or_else(|| says("ScalingActive", "False"))
        .or_else(|| says("ScalingLimited", "True"))?;
    let reason = c.reason.as_deref().unwrap_or(&c.type_);
    Some(match c.message.as_deref() {
        Some(m) if !m.is_empty() => format!("{reason}: {m}"),
        _ => reason.to_string(),
    })
}
