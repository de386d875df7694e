//! Releases within a fixed capacity (`capacity.maxSurge`,
//! `capacity.maxUnavailable`).
//!
//! Without `capacity` the new revision's pods come up beside the stable ones
//! and the stable revision gives up only what the new one has ready
//! ([`super::desired`]). On nodes that are full (every GPU taken) that canary
//! stays Pending for ever. With `capacity` the revisions replace each other as
//! a Deployment's rolling update does: the revisions being left give up pods
//! first, as far as `maxUnavailable` allows (pods that are not ready first:
//! they serve nothing), and the revision coming up takes the room freed, as
//! far as `maxSurge` allows. The same rule runs both ways: a rollout brings
//! the new revision up, a rollback the stable one.

use super::{Observation, RevisionObs, Target, order, revisions_of};
use crate::api::capacity::Limits;
use crate::api::revision::is_baseline;
use crate::api::workload::WorkloadKind;
use crate::api::{ComponentStatus, Phase, ReleasePlanStatus};
use std::collections::BTreeMap;

/// A revision and the replicas it moves towards.
type Move<'a> = (&'a str, i32);

/// The wanted replicas of every revision of a component, within its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limited {
    /// The revision coming up and the ones being left, by hash.
    pub want: BTreeMap<String, i32>,
}

/// The limits of a component released within a capacity: a Deployment
/// component with `capacity`, outside blue-green (which the CRD refuses).
pub fn limits(target: &Target, component: &str) -> Option<Limits> {
    let t = target.component(component)?;
    if t.kind != WorkloadKind::Deployment || target.blue_green.is_some() {
        return None;
    }
    t.capacity.as_ref().map(|c| c.limits(t.replicas))
}

/// The wanted replicas of a component's revisions within its capacity, from
/// the targets [`super::desired`] computed (`want`); `None` when the
/// component has no capacity or nothing moves between revisions.
pub fn limit(
    obs: &Observation,
    target: &Target,
    status: &ReleasePlanStatus,
    c: &ComponentStatus,
    want: &BTreeMap<String, i32>,
) -> Option<Limited> {
    let limits = limits(target, &c.name)?;
    let r = target.component(&c.name)?.replicas.max(0);
    let revs = revisions_of(obs, &c.name);
    // A baseline comes up after the canary, in the stable revision's room:
    // the three together run `replicas`.
    let baseline = want
        .iter()
        .find(|(h, _)| is_baseline(h))
        .map(|(h, w)| (h.as_str(), (*w).clamp(0, r)));
    let (ups, kept) = match (status.phase, &c.current_hash, &c.stable_hash) {
        (Phase::RollingOut, Some(cur), Some(st)) if cur != st => {
            // The stable revision gives up its share whatever traffic still
            // reaches it: within a capacity the new pods need its room, and
            // the Services and route follow the ready pods instead
            // ([`super::traffic`]).
            let new = want.get(cur).copied().unwrap_or(0).clamp(0, r);
            let beside = baseline.map_or(0, |b| b.1);
            let ups: Vec<(&str, i32)> = std::iter::once((cur.as_str(), new))
                .chain(baseline)
                .collect();
            (ups, Some((st.as_str(), (r - new - beside).max(0))))
        }
        (Phase::RollbackInProgress, _, Some(st))
            if order::rollback_waits_on(obs, target, status, &c.name).is_empty() =>
        {
            (vec![(st.as_str(), r)], None)
        }
        (Phase::RolledBack, _, Some(st)) => (vec![(st.as_str(), r)], None),
        _ => return None,
    };
    // Every other revision is being left, down to zero (the stable one, in
    // a rollout, down to its share).
    let mut left: Vec<(&str, i32)> = revs
        .keys()
        .filter(|h| !ups.iter().any(|u| u.0 == **h) && Some(**h) != kept.map(|k| k.0))
        .map(|h| (*h, 0))
        .collect();
    // A revision coming up with more pods than its target now (a baseline at
    // a step that gives it fewer) goes down as the left ones do: within the
    // budget of ready pods.
    let (ups, shrinking): (Vec<Move<'_>>, Vec<Move<'_>>) = ups
        .into_iter()
        .partition(|(h, target)| replicas(&revs, h) <= *target);
    left.extend(shrinking);
    // The stable revision last: older revisions go first.
    left.extend(kept);
    Some(Limited {
        want: replace(&revs, limits, r, &ups, &left),
    })
}

/// `want` within the component's capacity, and every revision's count
/// (the revisions being left included) when it has one: all come from the
/// one rolling replacement.
pub fn within(
    obs: &Observation,
    target: &Target,
    status: &ReleasePlanStatus,
    c: &ComponentStatus,
    want: BTreeMap<String, i32>,
) -> (BTreeMap<String, i32>, Option<BTreeMap<String, i32>>) {
    let Some(limited) = limit(obs, target, status, c, &want).map(|l| l.want) else {
        return (want, None);
    };
    let want = want
        .keys()
        .map(|h| (h.clone(), limited.get(h).copied().unwrap_or(0)))
        .collect();
    (want, Some(limited))
}

fn replicas(revs: &BTreeMap<&str, &RevisionObs>, hash: &str) -> i32 {
    revs.get(hash).map_or(0, |r| r.replicas.max(0))
}

/// The pods of a revision that exist and are not terminating
/// (`status.replicas`).
fn existing(revs: &BTreeMap<&str, &RevisionObs>, hash: &str) -> i32 {
    revs.get(hash).map_or(0, |r| r.current.max(0))
}

fn ready(revs: &BTreeMap<&str, &RevisionObs>, hash: &str) -> i32 {
    revs.get(hash)
        .map_or(0, |r| r.ready.clamp(0, r.replicas.max(0)))
}

/// One move of a rolling replacement: `left` revisions go down towards their
/// targets (their not-ready pods first, then ready ones while the ready pods
/// stay at `replicas - unavailable`), then the `ups` come up, in order, in the
/// room left under `replicas + surge` by the pods that still exist. A revision
/// is never scaled past its target, and one coming up never down (unless its
/// target is lower).
fn replace(
    revs: &BTreeMap<&str, &RevisionObs>,
    limits: Limits,
    r: i32,
    ups: &[(&str, i32)],
    left: &[(&str, i32)],
) -> BTreeMap<String, i32> {
    let mut out = BTreeMap::new();
    let up_ready: i32 = ups.iter().map(|(h, _)| ready(revs, h)).sum();
    let left_ready: i32 = left.iter().map(|(h, _)| ready(revs, h)).sum();
    // Ready pods that may go: what is ready beyond `replicas - unavailable`.
    let mut budget = (up_ready + left_ready - (r - limits.unavailable)).max(0);
    let mut after = 0;
    for (h, target) in left {
        let have = replicas(revs, h);
        let excess = (have - target).max(0);
        // Not-ready pods serve nothing: they go first and cost no budget
        // (a ReplicaSet deletes its not-ready pods first).
        let unready = (have - ready(revs, h)).clamp(0, excess);
        let ready_gone = budget.min(excess - unready);
        budget -= ready_gone;
        let w = have - unready - ready_gone;
        // Room is counted from the pods that still exist: a pod the
        // ReplicaSet has not yet deleted holds its GPU, and a new pod made
        // beside it would only wait (or briefly be one too many).
        after += w.max(existing(revs, h));
        out.insert((*h).to_string(), w);
    }
    // Each revision coming up keeps the pods it has; the room beyond them
    // goes to the first that wants it.
    let held: i32 = ups.iter().map(|(h, _)| existing(revs, h)).sum();
    let mut room = r + limits.surge - after - held;
    for (up, up_target) in ups {
        let up_have = replicas(revs, up);
        let room_of = room + existing(revs, up);
        let up_want = room_of.clamp(up_have.min(*up_target), (*up_target).max(0));
        room = room_of - up_want.max(existing(revs, up));
        out.insert((*up).to_string(), up_want);
    }
    out
}

/// The ready pods of revision `hash` as a share (0-100) of the component's
/// replicas, rounded down; `None` without a capacity.
pub fn ready_share(obs: &Observation, target: &Target, component: &str, hash: &str) -> Option<i32> {
    limits(target, component)?;
    let r = target.component(component)?.replicas.max(0);
    if r == 0 {
        return Some(100);
    }
    let revs = revisions_of(obs, component);
    i32::try_from(i64::from(ready(&revs, hash)) * 100 / i64::from(r)).ok()
}

/// During a rollback within a capacity, the share of requests a router may
/// still send to the new revision: no more than it had, and no less than the
/// stable revision cannot yet serve (its ready pods of `replicas`), so an
/// abort never sends every request to pods that are not ready.
pub fn rollback_canary_weight(
    obs: &Observation,
    target: &Target,
    c: &ComponentStatus,
    had: i32,
) -> Option<i32> {
    limits(target, &c.name)?;
    let r = target.component(&c.name)?.replicas.max(0);
    let st = c.stable_hash.as_ref()?;
    let revs = revisions_of(obs, &c.name);
    if r == 0 {
        return Some(0);
    }
    let stable_share = i32::try_from(i64::from(ready(&revs, st)) * 100 / i64::from(r)).ok()?;
    Some((100 - stable_share).clamp(0, had.clamp(0, 100)))
}
