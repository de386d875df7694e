//! A memo of the plans' template hashes. Every reconcile works out each
//! component's revision: the hash of its template as written and, with
//! config versioning, of the template pointed at its config copies. With a
//! production-sized template that serialization and hash was a tenth of the
//! operator's CPU in a rollout, where a plan is reconciled about 18 times
//! per spec change. The hash is a pure function of the template, and the
//! template is one of the plan's spec (its uid and generation, which the API
//! server bumps at every spec change) and of where its references point: so
//! the memo answers for the same (uid, generation, component, names) and is
//! never wrong, only sometimes empty.

use crate::api::ReleasePlan;
use crate::api::revision::{HASH_LEN, TemplateHasher, template_hash};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{Mutex, PoisonError};

/// Hashes kept for one plan: a new generation (or uid) replaces them all.
/// Few per plan: one per component as written, one per config versioning
/// of it (its copies change with the content of their sources).
const MAX_PER_PLAN: usize = 8;

#[derive(Debug, Default)]
struct PlanHashes {
    /// The plan's uid and generation these are of.
    spec: u64,
    /// By (component, names), the hash.
    hashes: Vec<(u64, [u8; HASH_LEN])>,
}

/// The memo of every plan, by plan (namespace and name). Keys are hashed
/// with a per-process random key, so no tenant can make two templates share
/// a key on purpose.
#[derive(Debug, Default)]
pub(crate) struct HashMemo {
    plans: Mutex<HashMap<u64, PlanHashes>>,
    keys: RandomState,
}

impl HashMemo {
    fn key(&self, value: impl Hash) -> u64 {
        self.keys.hash_one(value)
    }

    /// The hasher of a reconcile of `plan`.
    pub fn of<'a>(&'a self, plan: &'a ReleasePlan) -> PlanHasher<'a> {
        let m = &plan.metadata;
        self.for_plan(
            (
                m.namespace.as_deref().unwrap_or_default(),
                m.name.as_deref().unwrap_or_default(),
            ),
            m.uid.as_deref(),
            m.generation,
        )
    }

    /// The hasher of one plan's reconcile: it memoizes only when the plan has
    /// a uid and a generation (any object read from the API server has both).
    pub fn for_plan<'a>(
        &'a self,
        (ns, name): (&str, &str),
        uid: Option<&'a str>,
        generation: Option<i64>,
    ) -> PlanHasher<'a> {
        PlanHasher {
            memo: self,
            plan: self.key((ns, name)),
            spec: uid
                .filter(|u| !u.is_empty())
                .zip(generation)
                .map(|g| self.key(g)),
        }
    }

    /// Drops what is kept of a plan whose deletion proceeds.
    pub fn forget(&self, (ns, name): (&str, &str)) {
        let plan = self.key((ns, name));
        self.lock().remove(&plan);
    }

    /// Plans with hashes kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, PlanHashes>> {
        self.plans.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, plan: u64, spec: u64, key: u64) -> Option<String> {
        let plans = self.lock();
        let entry = plans.get(&plan).filter(|e| e.spec == spec)?;
        let (_, hash) = entry.hashes.iter().find(|(k, _)| *k == key)?;
        String::from_utf8(hash.to_vec()).ok()
    }

    fn put(&self, plan: u64, spec: u64, key: u64, hash: &str) {
        let Ok(bytes) = <[u8; HASH_LEN]>::try_from(hash.as_bytes()) else {
            return;
        };
        let mut plans = self.lock();
        let entry = plans.entry(plan).or_default();
        if entry.spec != spec || entry.hashes.len() >= MAX_PER_PLAN {
            entry.spec = spec;
            entry.hashes.clear();
        }
        entry.hashes.push((key, bytes));
    }
}

/// [`HashMemo`] for one plan at one generation.
pub(crate) struct PlanHasher<'a> {
    memo: &'a HashMemo,
    plan: u64,
    /// None: the plan has no uid or generation, nothing is memoized.
    spec: Option<u64>,
}

impl TemplateHasher for PlanHasher<'_> {
    fn hash(
        &self,
        component: &str,
        renamed: Option<&[String]>,
        template: &PodTemplateSpec,
    ) -> String {
        let Some(spec) = self.spec else {
            return template_hash(template);
        };
        let key = self.memo.key((component, renamed));
        if let Some(hash) = self.memo.get(self.plan, spec, key) {
            return hash;
        }
        let hash = template_hash(template);
        self.memo.put(self.plan, spec, key, &hash);
        hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({"spec": {"containers": [{"name": "app", "image": image}]}}))
            .unwrap()
    }

    #[test]
    fn a_template_is_hashed_once_per_generation_and_names() {
        let memo = HashMemo::default();
        let (a, b) = (template("shop:1"), template("shop:2"));
        let at = |generation| memo.for_plan(("prod", "shop"), Some("u-1"), Some(generation));
        assert_eq!(at(1).hash("web", None, &a), template_hash(&a));
        // The memo answers: the same key is not hashed again (a template that
        // differs under the same key can only come from a test).
        assert_eq!(at(1).hash("web", None, &b), template_hash(&a));
        // Another generation, component or set of names is another template.
        assert_eq!(at(2).hash("web", None, &b), template_hash(&b));
        assert_eq!(at(2).hash("api", None, &a), template_hash(&a));
        let names = ["settings-abc".to_string()];
        assert_eq!(at(2).hash("web", Some(&names), &a), template_hash(&a));
        assert_eq!(at(2).hash("web", Some(&[]), &b), template_hash(&b));
        // Another plan (or the same name, recreated) does not share it.
        let other = memo.for_plan(("prod", "shop"), Some("u-2"), Some(2));
        assert_eq!(other.hash("web", None, &a), template_hash(&a));
        let other = memo.for_plan(("prod", "cart"), Some("u-1"), Some(2));
        assert_eq!(other.hash("web", None, &a), template_hash(&a));
    }

    #[test]
    fn without_a_uid_or_generation_nothing_is_kept() {
        let memo = HashMemo::default();
        let (a, b) = (template("shop:1"), template("shop:2"));
        let no_generation = memo.for_plan(("prod", "shop"), Some("u-1"), None);
        assert_eq!(no_generation.hash("web", None, &a), template_hash(&a));
        assert_eq!(no_generation.hash("web", None, &b), template_hash(&b));
        let no_uid = memo.for_plan(("prod", "shop"), None, Some(1));
        assert_eq!(no_uid.hash("web", None, &a), template_hash(&a));
        assert_eq!(no_uid.hash("web", None, &b), template_hash(&b));
        assert_eq!(memo.len(), 0);
    }

    #[test]
    fn a_plan_keeps_few_hashes_and_none_once_forgotten() {
        let memo = HashMemo::default();
        let t = template("shop:1");
        let h = memo.for_plan(("prod", "shop"), Some("u-1"), Some(1));
        for i in 0..(3 * MAX_PER_PLAN) {
            h.hash(&format!("c{i}"), None, &t);
        }
        let kept = memo.lock().values().map(|e| e.hashes.len()).sum::<usize>();
        assert!(kept <= MAX_PER_PLAN, "{kept} hashes kept");
        memo.forget(("prod", "shop"));
        assert_eq!(memo.len(), 0);
    }
}
