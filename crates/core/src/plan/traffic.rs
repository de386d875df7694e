//! The traffic layer, decided purely: which revision each component's stable
//! and canary Service select, and the weights and header route of its
//! route. Which router carries the route (a Gateway API HTTPRoute, a Traefik
//! IngressRoute) is the controller's business (`controller::router`): the
//! core reads and decides a [`RouteObs`], whatever object shows it.
//!
//! Three rules keep requests safe, each checked against what was observed
//! (the cluster), never against what was only decided:
//!
//! - traffic goes to a revision only once it has ready pods, and the step's
//!   full weight only once the step's pods are all ready;
//! - a revision that observed traffic still reaches keeps its pods (see
//!   [`held`]): on rollback the route returns to stable first, then the
//!   canary scales down; at promotion the stable Service moves to the new
//!   revision before the route leaves the canary Service;
//! - weights always sum to 100.

use super::replicas::canary_replicas;
use super::steps::{CanaryScale, Step, in_force};
use super::{ByHash, Observation, Target, order, revisions_of};
use crate::api::{ComponentStatus, Phase, ReleasePlanStatus, RouterKind};
use std::time::Duration;

/// A component's traffic settings from the spec (names not yet defaulted).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TrafficTarget {
    /// `traffic.stableService`.
    pub stable_service: Option<String>,
    /// `traffic.canaryService`.
    pub canary_service: Option<String>,
    /// The router, when the component has one.
    pub router: Option<RouteRef>,
    /// `traffic.drainSeconds`.
    pub drain: Duration,
    /// The component runs a baseline (`baseline`): with a router, a third
    /// Service and backend.
    pub baseline: bool,
}

/// A component's router: its kind and the route's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteRef {
    /// The kind of object that carries the route.
    pub kind: RouterKind,
    /// The route's name; `None`: the default, `<plan>-<component>`.
    pub name: Option<String>,
}

/// Default of `traffic.drainSeconds`.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

impl TrafficTarget {
    /// From the spec's `traffic`.
    pub fn of(t: &crate::api::Traffic) -> TrafficTarget {
        TrafficTarget {
            stable_service: t.stable_service.clone(),
            canary_service: t.canary_service.clone(),
            router: t.router().map(|(kind, name)| RouteRef {
                kind,
                name: name.map(str::to_string),
            }),
            drain: t
                .drain_seconds
                .and_then(|d| u64::try_from(d).ok())
                .map_or(DEFAULT_DRAIN, Duration::from_secs),
            baseline: false,
        }
    }

    /// With the component's `baseline` setting.
    #[must_use]
    pub fn with_baseline(mut self, baseline: bool) -> TrafficTarget {
        self.baseline = baseline;
        self
    }

    /// A router splits this component's requests by weight.
    pub fn routed(&self) -> bool {
        self.router.is_some()
    }

    /// The names of the Services and the route, defaults applied.
    pub fn names(&self, plan: &str, component: &str) -> Names {
        Names {
            stable: self
                .stable_service
                .clone()
                .unwrap_or_else(|| format!("{plan}-{component}-stable")),
            canary: self
                .canary_service
                .clone()
                .unwrap_or_else(|| format!("{plan}-{component}-canary")),
            route: self.router.as_ref().map(|r| {
                r.name
                    .clone()
                    .unwrap_or_else(|| format!("{plan}-{component}"))
            }),
            baseline: (self.baseline && self.routed())
                .then(|| format!("{plan}-{component}-baseline")),
        }
    }
}

/// The names of a component's traffic objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// The stable Service.
    pub stable: String,
    /// The canary Service.
    pub canary: String,
    /// The route, with a router.
    pub route: Option<String>,
    /// The baseline Service, with a router and a baseline:
    /// `<plan>-<component>-baseline`.
    pub baseline: Option<String>,
}

/// A component's traffic objects as observed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TrafficObs {
    /// Component.
    pub component: String,
    /// Revision the stable Service selects; `None` when it does not exist.
    pub stable: Option<String>,
    /// Revision the canary Service selects; `None` when it does not exist.
    pub canary: Option<String>,
    /// The route; `None` when it does not exist.
    pub route: Option<RouteObs>,
    /// Revision the baseline Service selects; `None` when it does not exist.
    pub baseline: Option<String>,
}

/// A route as observed, whatever its router: the weights of the stable and
/// canary Services and its header route.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteObs {
    /// Weight of the stable Service.
    pub stable_weight: i32,
    /// Weight of the canary Service.
    pub canary_weight: i32,
    /// Headers of the header route to the canary Service; empty: none.
    pub headers: Vec<(String, String)>,
    /// Weight of the baseline Service (0 without one).
    pub baseline_weight: i32,
}

impl RouteObs {
    /// Requests reach the canary Service through this route.
    fn to_canary(&self) -> bool {
        self.canary_weight > 0 || !self.headers.is_empty()
    }
}

/// One component's Services and route as they must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrafficIntent {
    /// Component.
    pub component: String,
    /// Object names.
    pub names: Names,
    /// Revision the stable Service selects.
    pub stable: String,
    /// Revision the canary Service selects.
    pub canary: String,
    /// The route, with a router.
    pub route: Option<RouteObs>,
    /// Revision the baseline Service selects, with a router and a baseline.
    pub baseline: Option<String>,
}

fn observed<'a>(obs: &'a Observation, component: &str) -> Option<&'a TrafficObs> {
    obs.traffic.iter().find(|t| t.component == component)
}

fn ready(revs: &ByHash<'_>, hash: &str) -> i32 {
    revs.get(hash).map_or(0, |r| r.ready.max(0))
}

/// The component is moving between two revisions: a rollout with a stable
/// revision, or its rollback.
fn in_flight(status: &ReleasePlanStatus, c: &ComponentStatus) -> bool {
    matches!(status.phase, Phase::RollingOut | Phase::RollbackInProgress)
        && c.stable_hash.is_some()
        && c.is_changing()
}

/// Pods of the new revision of a routed component at the status's step: as the
/// setCanaryScale in force says, else as many as the weight asks, and at
/// least one while a header route sends testers there. The final step to
/// 100% runs them all.
pub fn canary_pods(
    target: &Target,
    status: &ReleasePlanStatus,
    component: &str,
    replicas: i32,
) -> i32 {
    let weight = order::weight(target, status, component);
    let step = order::step_index(target, status, component);
    match in_force(&target.steps, step, Step::canary_scale).unwrap_or_default() {
        CanaryScale::MatchTraffic if !headers_at(target, status, component).is_empty() => {
            canary_replicas(replicas, weight)
                .max(1)
                .min(replicas.max(0))
        }
        CanaryScale::MatchTraffic => canary_replicas(replicas, weight),
        CanaryScale::Replicas(n) => n.clamp(0, replicas.max(0)),
        CanaryScale::Weight(w) => canary_replicas(replicas, w),
    }
}

/// The header route in force at the status's step.
fn headers_at(
    target: &Target,
    status: &ReleasePlanStatus,
    component: &str,
) -> Vec<(String, String)> {
    let step = order::step_index(target, status, component);
    in_force(&target.steps, step, |s| s.header_route().map(<[_]>::to_vec)).unwrap_or_default()
}

/// The route a routed component's step asks for once its pods are ready.
fn step_route(target: &Target, status: &ReleasePlanStatus, c: &ComponentStatus) -> RouteObs {
    // Blue-green switches the active (stable) Service, never the weights.
    if status.phase == Phase::RollingOut && in_flight(status, c) && target.blue_green.is_none() {
        let w = order::weight(target, status, &c.name);
        // A baseline takes as large a share as the canary, from stable's.
        let b = if super::desired::baseline(target, status, c).is_some() {
            w
        } else {
            0
        };
        RouteObs {
            stable_weight: 100 - w - b,
            canary_weight: w,
            headers: headers_at(target, status, &c.name),
            baseline_weight: b,
        }
    } else {
        all_stable()
    }
}

/// Every request to the stable Service.
fn all_stable() -> RouteObs {
    RouteObs {
        stable_weight: 100,
        ..RouteObs::default()
    }
}

/// The route of a step whose new pods (and baseline) are coming up: no
/// request to a revision before it has ready pods, the step's weight once
/// they are all ready.
fn coming_up(
    obs: &Observation,
    target: &Target,
    status: &ReleasePlanStatus,
    c: &ComponentStatus,
    step: RouteObs,
    seen_route: Option<&RouteObs>,
) -> RouteObs {
    let revs = revisions_of(obs, &c.name);
    let Some(cur) = c.current_hash.as_deref() else {
        return step;
    };
    let have = ready(&revs, cur);
    let want = canary_pods(
        target,
        status,
        &c.name,
        target.component(&c.name).map_or(c.replicas, |t| t.replicas),
    );
    // The baseline's share only once its pods are all ready: until then
    // stable serves it.
    let baseline_up =
        super::desired::baseline(target, status, c).is_none_or(|(h, w)| ready(&revs, &h) >= w);
    if have == 0 {
        all_stable()
    } else if have >= want && baseline_up {
        step
    } else if have >= want {
        RouteObs {
            stable_weight: step.stable_weight + step.baseline_weight,
            baseline_weight: 0,
            ..step
        }
    } else {
        // Some pods ready: no more than the route has already, or, within a
        // capacity (where the new pods come up only as the stable ones go),
        // their ready share.
        let had = seen_route.map_or(0, |r| r.canary_weight);
        let w = super::capacity::ready_share(obs, target, &c.name, cur)
            .map_or(had, |share| had.max(share))
            .clamp(0, step.canary_weight);
        RouteObs {
            stable_weight: 100 - w,
            canary_weight: w,
            headers: step.headers,
            baseline_weight: 0,
        }
    }
}

/// The Services and routes of every component with traffic settings, for the
/// next status.
pub fn intents(
    obs: &Observation,
    target: &Target,
    status: &ReleasePlanStatus,
) -> Vec<TrafficIntent> {
    status
        .components
        .iter()
        .filter_map(|c| {
            let t = target.component(&c.name)?.traffic.as_ref()?;
            let stable = if stable_service_moves(obs, target, status, c) {
                c.current_hash.clone()?
            } else {
                c.stable_hash.clone().or_else(|| c.current_hash.clone())?
            };
            let seen = observed(obs, &c.name);
            let seen_route = seen.and_then(|s| s.route.as_ref());
            let cur = c.current_hash.as_deref().unwrap_or(&stable);
            let route = t.routed().then(|| {
                // Rolled back after the components that started after it
                // (`dependsOn`): its route holds until they are back.
                if let Some(r) = seen_route
                    && !order::rollback_waits_on(obs, target, status, &c.name).is_empty()
                {
                    return r.clone();
                }
                let step = step_route(target, status, c);
                // Within a capacity the stable revision comes back pod by
                // pod: the route leaves the new one only as fast as the
                // stable pods are ready to take its requests.
                if status.phase == Phase::RollbackInProgress
                    && let Some(r) = seen_route
                    && let Some(w) =
                        super::capacity::rollback_canary_weight(obs, target, c, r.canary_weight)
                {
                    return RouteObs {
                        stable_weight: 100 - w,
                        canary_weight: w,
                        ..RouteObs::default()
                    };
                }
                if status.phase == Phase::Stable {
                    // Leave the canary Service only once the stable one
                    // selects the promoted revision, and that change has
                    // drained (its endpoints follow the selector a moment
                    // later, as routers follow routes).
                    let moved = seen.and_then(|s| s.stable.as_deref()) == Some(stable.as_str())
                        && draining(obs, target, &c.name).is_none();
                    match seen_route {
                        Some(r) if !moved && r.canary_weight > 0 => RouteObs {
                            headers: Vec::new(),
                            ..r.clone()
                        },
                        _ => step,
                    }
                } else if step.canary_weight == 0 && step.headers.is_empty() {
                    step
                } else {
                    coming_up(obs, target, status, c, step, seen_route)
                }
            });
            // The canary Service follows the new revision while it may get
            // requests; during a rollback it returns to stable once the route
            // sends it nothing.
            let follows_new = match status.phase {
                Phase::RollingOut => true,
                Phase::RollbackInProgress => {
                    t.routed() && seen_route.is_some_and(RouteObs::to_canary)
                }
                _ => false,
            };
            let canary = if follows_new && in_flight(status, c) {
                cur.to_string()
            } else {
                stable.clone()
            };
            let names = t.names(&obs.plan, &c.name);
            // The baseline Service selects the baseline of the revision the
            // stable one selects (no pods outside a canary step).
            let baseline = names
                .baseline
                .as_ref()
                .map(|_| crate::api::revision::baseline_of(&stable));
            Some(TrafficIntent {
                component: c.name.clone(),
                names,
                stable,
                canary,
                route,
                baseline,
            })
        })
        .collect()
}

/// Without a router, a canary that has taken every pod (the final step, or a
/// weight that rounds up to all replicas) takes the stable Service too,
/// before the stable revision's last pods go: Service clients never meet a
/// Service without pods.
pub fn stable_service_moves(
    obs: &Observation,
    target: &Target,
    status: &ReleasePlanStatus,
    c: &ComponentStatus,
) -> bool {
    let Some(t) = target.component(&c.name) else {
        return false;
    };
    if t.traffic.as_ref().is_none_or(TrafficTarget::routed)
        || target.blue_green.is_some()
        || status.phase != Phase::RollingOut
        || !in_flight(status, c)
    {
        return false;
    }
    let r = t.replicas;
    let cur = c.current_hash.as_deref().unwrap_or_default();
    // Within a capacity the new revision has every pod only once the stable
    // one has none: the Service moves once it may be that short.
    let short = super::capacity::limits(target, &c.name).map_or(0, |l| l.unavailable);
    canary_replicas(r, order::weight(target, status, &c.name)) >= r
        && ready(&revisions_of(obs, &c.name), cur) >= r - short
}

/// Whether observed traffic still reaches revision `hash` of a component:
/// such a revision keeps its pods. A Service without a router may be called
/// directly, so it counts as carrying traffic.
pub fn held(obs: &Observation, target: &Target, component: &str, hash: &str) -> bool {
    let Some(t) = target.component(component).and_then(|c| c.traffic.as_ref()) else {
        return false;
    };
    let Some(seen) = observed(obs, component) else {
        return false;
    };
    let route = seen.route.as_ref().filter(|_| t.routed());
    let stable_carries = route.is_none_or(|r| r.stable_weight > 0);
    let canary_carries = route.is_none_or(RouteObs::to_canary);
    let baseline_carries = route.is_some_and(|r| r.baseline_weight > 0);
    (seen.stable.as_deref() == Some(hash) && stable_carries)
        || (seen.canary.as_deref() == Some(hash) && canary_carries)
        || (seen.baseline.as_deref() == Some(hash) && baseline_carries)
}

/// Whether a routed component's route sends the new revision nothing at all
/// (observed): then the stable revision may give up pods.
pub fn stable_released(obs: &Observation, component: &str) -> bool {
    observed(obs, component)
        .and_then(|s| s.route.as_ref())
        .is_some_and(|r| r.stable_weight == 0 && r.canary_weight > 0)
}

/// Whether the Services and routes are observed as the step asks (its full
/// weight and header route): a step is not done before its traffic is.
pub fn step_in_place(obs: &Observation, target: &Target, status: &ReleasePlanStatus) -> bool {
    status.components.iter().all(|c| {
        let Some(t) = target.component(&c.name).and_then(|t| t.traffic.as_ref()) else {
            return true;
        };
        let Some(cur) = c.current_hash.as_deref() else {
            return true;
        };
        let seen = observed(obs, &c.name);
        let canary_ok =
            !in_flight(status, c) || seen.and_then(|s| s.canary.as_deref()) == Some(cur);
        let route_ok = !t.routed()
            || seen
                .and_then(|s| s.route.as_ref())
                .is_some_and(|r| *r == step_route(target, status, c));
        canary_ok && route_ok
    })
}

/// `status.trafficWeight`: the share of routed requests on the current
/// revision, by the routes this decision sets; `None` without a router.
pub fn weight(intents: &[TrafficIntent], status: &ReleasePlanStatus) -> Option<i32> {
    if status.phase == Phase::Pending {
        return None;
    }
    let routed: Vec<(&TrafficIntent, &RouteObs)> = intents
        .iter()
        .filter_map(|i| Some((i, i.route.as_ref()?)))
        .collect();
    if routed.is_empty() {
        return None;
    }
    let changing = routed.iter().filter(|(i, _)| {
        status
            .components
            .iter()
            .any(|c| c.name == i.component && c.stable_hash.is_some() && c.is_changing())
    });
    Some(changing.map(|(_, r)| r.canary_weight).min().unwrap_or(100))
}

/// How long the last traffic change still drains: revisions of the
/// component keep their pods until then. `None` once drained (or never
/// changed, or no traffic settings).
pub fn draining(obs: &Observation, target: &Target, component: &str) -> Option<Duration> {
    let drain = target.component(component)?.traffic.as_ref()?.drain;
    let changed = obs.status.traffic_changed_at?;
    let since = (obs.now - changed).to_std().unwrap_or_default();
    drain.checked_sub(since).filter(|left| !left.is_zero())
}

/// The longest drain still running over the plan's components.
pub fn drain_left(obs: &Observation, target: &Target) -> Option<Duration> {
    target
        .components
        .iter()
        .filter_map(|c| draining(obs, target, &c.name))
        .max()
}

/// The new `status.trafficChangedAt`, when this decision changes traffic:
/// the intents differ from what the cluster shows and the change is new.
/// A write that does not show yet (the cache lags, or the API server keeps
/// refusing it) is the same change: stamping it again at every reconcile
/// would write status, wake the plan and loop. So it is stamped again only
/// once its drain is over, or when the phase, step or weight moved on.
pub fn changed_at(
    obs: &Observation,
    target: &Target,
    status: &ReleasePlanStatus,
    intents: &[TrafficIntent],
) -> Option<chrono::DateTime<chrono::Utc>> {
    if !changes(obs, intents) {
        return None;
    }
    let before = &obs.status;
    let moved_on = before.phase != status.phase
        || before.current_step != status.current_step
        || before.traffic_weight != status.traffic_weight;
    (moved_on || drain_left(obs, target).is_none()).then_some(obs.now)
}

/// Whether the intents change anything the cluster shows (a write follows).
fn changes(obs: &Observation, intents: &[TrafficIntent]) -> bool {
    intents.iter().any(|i| {
        observed(obs, &i.component).is_none_or(|o| {
            o.stable.as_deref() != Some(i.stable.as_str())
                || o.canary.as_deref() != Some(i.canary.as_str())
                || o.route != i.route
                || o.baseline != i.baseline
        })
    })
}
