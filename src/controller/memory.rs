//! What the controller keeps about a plan between its reconciles, in one
//! place: one [`PlanMemory`] per plan, dropped as a whole when the plan goes
//! (or when nothing is left in it), so no map can be forgotten by `forget`.
//!
//! Everything here is a cache of facts the API server cannot give back
//! cheaply: a write's answer that the watch has not delivered yet, the last
//! failed write, the backoff schedule, a transition whose status write got no
//! answer. Losing it (a restart) costs a redundant write or a retried
//! Event, never a wrong decision.

use crate::api::cached::{CachedDeployment, CachedPlan, CachedRevision};
use crate::api::{ReleasePlan, ReleasePlanStatus};
use crate::gates::job::JobObs;
use crate::plan::{Decision, Refusal};
use kube::runtime::reflector::ObjectRef;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// Failures in a row of one plan and when it is retried.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    /// Failures in a row.
    pub failures: u32,
    /// The scheduled retry.
    pub retry_at: Instant,
}

/// A transition whose status write got no answer (it may have landed): its
/// Events and metrics wait until a later read says whether it did.
#[derive(Debug, Clone)]
pub(crate) struct Unconfirmed {
    /// The resourceVersion the write was made on: a plan still at it says
    /// nothing yet (the cache may lag).
    pub base_version: Option<String>,
    /// The status before the write.
    pub before: ReleasePlanStatus,
    /// The decision whose status was written.
    pub decision: Decision,
}

/// What a read of the plan says of an [`Unconfirmed`] write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The plan is still at the version the write was made on.
    NotYet,
    /// The plan moved on with exactly the written status: it landed.
    Landed,
    /// The plan moved on with another status: it did not land.
    Lost,
}

impl Unconfirmed {
    /// Whether `plan`, read after the write, shows that it landed.
    pub fn settle(&self, plan: &ReleasePlan) -> Settled {
        if plan.metadata.resource_version == self.base_version {
            Settled::NotYet
        } else if plan.status.as_ref() == Some(&self.decision.status) {
            Settled::Landed
        } else {
            Settled::Lost
        }
    }
}

/// Everything kept about one plan.
#[derive(Debug, Default)]
pub(crate) struct PlanMemory {
    /// Consecutive failures, for exponential backoff.
    pub backoff: Option<Backoff>,
    /// The newest version of the plan this process wrote or read back, until
    /// the cache has caught up with it: a reconcile never decides on an
    /// older one (deciding on a stale cache repeats transitions and ends in a
    /// conflict).
    pub fresh: Option<Arc<CachedPlan>>,
    /// The last failed Deployment, Service or route write, until one succeeds.
    pub refusal: Option<Refusal>,
    /// The Job creates the API server refused in the last reconcile.
    pub job_refusals: Vec<JobObs>,
    /// Transitions whose status writes got no answer, all made on the same
    /// version (so at most one can have landed: the others would have
    /// conflicted). Each retry that gets no answer adds one; keeping only the
    /// last would lose a first one that did land.
    pub unconfirmed: Vec<Unconfirmed>,
    /// ControllerRevisions this process applied, by name, until the cache
    /// holds them: a reconcile right after a write must not write again.
    pub written_templates: BTreeMap<String, (Instant, Arc<CachedRevision>)>,
    /// The same for Deployments: the answer to this process's last apply of
    /// each, until the cache holds that version (`stand_in::latest_deployments`).
    pub written_deployments: BTreeMap<String, (Instant, Arc<CachedDeployment>)>,
    /// The config copies this process created, until their cache holds them
    /// (`config::observe`): the decision right after must not create them
    /// again, nor hold their revision back.
    pub written_copies:
        BTreeMap<crate::plan::config::ConfigRef, (Instant, crate::plan::config::ConfigObs)>,
    /// The Deployments last found up to date, each with the key of that
    /// check (`act::checked_key`): a reconcile in which neither the intent
    /// nor the object moved skips parsing and comparing its template.
    checked: Vec<(Box<str>, u64)>,
}

/// The most unanswered status writes kept for one plan: a write is retried
/// with backoff, so this many fill only during minutes of lost answers.
const MAX_UNCONFIRMED: usize = 16;

impl PlanMemory {
    /// Keeps a transition whose status write got no answer.
    pub fn unanswered(&mut self, u: Unconfirmed) {
        if self.unconfirmed.len() >= MAX_UNCONFIRMED {
            self.unconfirmed.remove(0);
        }
        self.unconfirmed.push(u);
    }

    /// Settles the unanswered writes against `plan`, read after them: the
    /// one that landed, if any (the others are dropped); those the read says
    /// nothing about yet are kept.
    pub fn settle_unanswered(&mut self, plan: &ReleasePlan) -> Option<Unconfirmed> {
        let mut landed = None;
        let mut waiting = Vec::new();
        for u in std::mem::take(&mut self.unconfirmed) {
            match u.settle(plan) {
                Settled::NotYet => waiting.push(u),
                Settled::Landed if landed.is_none() => landed = Some(u),
                Settled::Landed | Settled::Lost => {}
            }
        }
        self.unconfirmed = if landed.is_some() {
            Vec::new()
        } else {
            waiting
        };
        landed
    }

    /// Nothing worth keeping: the entry can go.
    /// The key Deployment `name` was last found up to date with.
    pub fn checked(&self, name: &str) -> Option<u64> {
        self.checked
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, k)| *k)
    }

    /// Records that Deployment `name` was found up to date with `key`.
    pub fn set_checked(&mut self, name: &str, key: u64) {
        match self.checked.iter_mut().find(|(n, _)| &**n == name) {
            Some(entry) => entry.1 = key,
            None => self.checked.push((name.into(), key)),
        }
    }

    /// Forgets the checks of Deployments `keep` does not name.
    pub fn keep_checked(&mut self, keep: impl Fn(&str) -> bool) {
        self.checked.retain(|(n, _)| keep(n));
    }

    fn is_empty(&self) -> bool {
        self.backoff.is_none()
            && self.fresh.is_none()
            && self.refusal.is_none()
            && self.job_refusals.is_empty()
            && self.unconfirmed.is_empty()
            && self.written_templates.is_empty()
            && self.written_deployments.is_empty()
            && self.written_copies.is_empty()
            && self.checked.is_empty()
    }
}

/// The memories of every plan.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    plans: Mutex<HashMap<ObjectRef<ReleasePlan>, PlanMemory>>,
}

impl Memory {
    /// Runs `f` on the plan's memory (empty if none), and drops the entry
    /// when `f` leaves it empty.
    pub fn with<R>(&self, key: &ObjectRef<ReleasePlan>, f: impl FnOnce(&mut PlanMemory) -> R) -> R {
        let mut plans = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = plans.entry(key.clone()).or_default();
        let out = f(entry);
        if entry.is_empty() {
            plans.remove(key);
        }
        out
    }

    /// Reads the plan's memory, if any, without creating an entry.
    pub fn read<R>(
        &self,
        key: &ObjectRef<ReleasePlan>,
        f: impl FnOnce(&PlanMemory) -> R,
    ) -> Option<R> {
        let plans = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        plans.get(key).map(f)
    }

    /// The newest copy of the plan: the one the reconcile was dispatched
    /// with, the plan cache's copy now, or the written copy kept here.
    /// The cache's copy counts because a kept write is dropped once the cache
    /// holds it ([`Memory::cache_caught_up`]), which can happen between the
    /// dispatch (an older copy) and this read: without it, that reconcile
    /// would write on the older copy and meet a conflict. A copy of another
    /// object (another uid) never wins; a kept one is then dropped.
    pub fn freshest(
        &self,
        key: &ObjectRef<ReleasePlan>,
        dispatched: Arc<CachedPlan>,
        stored: Option<Arc<CachedPlan>>,
    ) -> Arc<CachedPlan> {
        use kube::ResourceExt;
        let mut best = dispatched;
        if let Some(s) = stored
            && s.uid() == best.uid()
            && super::keys::newer(&s, &best)
        {
            best = s;
        }
        self.with(key, |m| match &m.fresh {
            Some(f) if f.uid() == best.uid() && super::keys::newer(f, &best) => Arc::clone(f),
            Some(_) => {
                m.fresh = None;
                best
            }
            None => best,
        })
    }

    /// The plan cache now holds `version` of the plan: a kept written copy
    /// no newer than it is dropped, so it is not held beside the cache's
    /// own until the plan's next reconcile (which, after a quiet write,
    /// may never come). Reads the map without creating an entry.
    pub fn cache_caught_up(&self, key: &ObjectRef<ReleasePlan>, version: Option<&str>) {
        let Some(cached) = super::keys::version_number(version) else {
            return;
        };
        let mut plans = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = plans.get_mut(key) else {
            return;
        };
        let kept = entry.fresh.as_deref().map(super::keys::version_of);
        if let Some(kept) = kept
            && kept.is_none_or(|kept| kept <= cached)
        {
            entry.fresh = None;
            if entry.is_empty() {
                plans.remove(key);
            }
        }
    }

    /// Drops everything kept about the plan.
    pub fn forget(&self, key: &ObjectRef<ReleasePlan>) {
        self.plans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    /// The plans with a memory.
    pub fn keys(&self) -> Vec<ObjectRef<ReleasePlan>> {
        self.plans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    /// How many plans have a memory (the `releaseplan_plan_memory_entries` gauge).
    pub fn len(&self) -> usize {
        self.plans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectRef<ReleasePlan> {
        ObjectRef::new(name).within("ns")
    }

    #[test]
    fn an_entry_left_empty_goes() {
        let m = Memory::default();
        m.with(&key("a"), |p| {
            p.backoff = Some(Backoff {
                failures: 1,
                retry_at: Instant::now(),
            });
        });
        m.with(&key("b"), |p| p.refusal.is_some());
        assert_eq!(m.len(), 1, "reading b made no entry");
        m.with(&key("a"), |p| p.backoff = None);
        assert_eq!(m.len(), 0);
        m.with(&key("c"), |p| {
            p.refusal = Some(Refusal {
                kind: "Deployment",
                name: "d".into(),
                code: 0,
                message: "reset".into(),
            });
        });
        assert_eq!(m.len(), 1);
        m.forget(&key("c"));
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn a_reconcile_dispatched_before_its_write_landed_reads_the_newest_copy() {
        let plan = |uid: &str, rv: &str| -> Arc<CachedPlan> {
            let p: ReleasePlan = serde_json::from_value(serde_json::json!({
                "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
                "metadata": {"name": "a", "namespace": "ns", "uid": uid, "resourceVersion": rv},
                "spec": {"components": []}
            }))
            .unwrap();
            Arc::new(CachedPlan::new(&p).unwrap())
        };
        let version = |p: &CachedPlan| p.metadata.resource_version.clone().unwrap();
        let m = Memory::default();
        // A reconcile wrote version 7 and kept it; the next one was
        // dispatched with the cache's 6; then the watch delivered 7, which
        // dropped the kept copy before that reconcile read it.
        m.with(&key("a"), |p| p.fresh = Some(plan("u", "7")));
        m.cache_caught_up(&key("a"), Some("7"));
        let read = m.freshest(&key("a"), plan("u", "6"), Some(plan("u", "7")));
        assert_eq!(
            version(&read),
            "7",
            "the cache's copy, newer than the dispatched one"
        );
        // The kept copy still wins when it is the newest of the three.
        m.with(&key("a"), |p| p.fresh = Some(plan("u", "9")));
        let read = m.freshest(&key("a"), plan("u", "6"), Some(plan("u", "8")));
        assert_eq!(version(&read), "9");
        // An older cache copy, or one of another object, never wins.
        let read = m.freshest(&key("a"), plan("u", "10"), Some(plan("u", "8")));
        assert_eq!(version(&read), "10");
        assert_eq!(
            m.len(),
            0,
            "the kept copy, older than the dispatched one, went"
        );
        let read = m.freshest(&key("a"), plan("u", "10"), Some(plan("other", "12")));
        assert_eq!(version(&read), "10");
    }

    #[test]
    fn a_kept_write_goes_once_the_cache_holds_its_version() {
        let plan = |rv: &str| -> Arc<CachedPlan> {
            let p: ReleasePlan = serde_json::from_value(serde_json::json!({
                "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
                "metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv},
                "spec": {"components": []}
            }))
            .unwrap();
            Arc::new(CachedPlan::new(&p).unwrap())
        };
        let m = Memory::default();
        m.with(&key("a"), |p| p.fresh = Some(plan("7")));
        m.cache_caught_up(&key("a"), Some("6"));
        assert!(
            m.read(&key("a"), |p| p.fresh.is_some()).unwrap(),
            "an older cache keeps it"
        );
        m.cache_caught_up(&key("a"), None);
        assert_eq!(m.len(), 1, "a version that does not parse says nothing");
        m.cache_caught_up(&key("b"), Some("9"));
        assert_eq!(m.len(), 1, "no entry is made for another plan");
        m.cache_caught_up(&key("a"), Some("7"));
        assert_eq!(
            m.len(),
            0,
            "the cache holds it: the entry, left empty, goes"
        );
        m.with(&key("a"), |p| {
            p.fresh = Some(plan("7"));
            p.refusal = Some(Refusal {
                kind: "Deployment",
                name: "d".into(),
                code: 0,
                message: "m".into(),
            });
        });
        m.cache_caught_up(&key("a"), Some("8"));
        assert_eq!(
            m.read(&key("a"), |p| (p.fresh.is_none(), p.refusal.is_some())),
            Some((true, true)),
            "the rest of the memory stays"
        );
    }

    #[test]
    fn a_landed_write_is_found_among_later_unanswered_retries() {
        let mut plan: ReleasePlan = serde_json::from_value(serde_json::json!({
            "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "5"},
            "spec": {"components": []}
        }))
        .unwrap();
        let unanswered = |step: i32| {
            let mut decision = crate::plan::Decision::default();
            decision.status.current_step = step;
            decision.status.message = Some(format!("try {step}"));
            Unconfirmed {
                base_version: Some("5".into()),
                before: ReleasePlanStatus::default(),
                decision,
            }
        };
        let mut m = PlanMemory::default();
        // The first write landed; two retries on the same version got no
        // answer either (and could not have landed).
        m.unanswered(unanswered(1));
        m.unanswered(unanswered(2));
        m.unanswered(unanswered(3));
        assert!(m.settle_unanswered(&plan).is_none(), "not read yet");
        assert_eq!(m.unconfirmed.len(), 3);
        plan.metadata.resource_version = Some("6".into());
        plan.status = Some(unanswered(1).decision.status);
        let landed = m.settle_unanswered(&plan).expect("the first one landed");
        assert_eq!(landed.decision.status.current_step, 1);
        assert!(m.unconfirmed.is_empty());
        for _ in 0..40 {
            m.unanswered(unanswered(9));
        }
        assert_eq!(m.unconfirmed.len(), MAX_UNCONFIRMED);
    }

    #[test]
    fn an_unanswered_write_settles_by_version_and_status() {
        let mut plan: ReleasePlan = serde_json::from_value(serde_json::json!({
            "apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "5"},
            "spec": {"components": []}
        }))
        .unwrap();
        let mut decision = crate::plan::Decision::default();
        decision.status.current_step = 3;
        let u = Unconfirmed {
            base_version: Some("5".into()),
            before: ReleasePlanStatus::default(),
            decision: decision.clone(),
        };
        assert_eq!(u.settle(&plan), Settled::NotYet);
        plan.metadata.resource_version = Some("6".into());
        plan.status = Some(ReleasePlanStatus::default());
        assert_eq!(u.settle(&plan), Settled::Lost);
        plan.status = Some(decision.status);
        assert_eq!(u.settle(&plan), Settled::Landed);
    }
}
