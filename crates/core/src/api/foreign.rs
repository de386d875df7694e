//! Decoding that leaves another shard's objects as their metadata.
//!
//! With `--shards`, the API server sends every replica every plan and every
//! object labelled with one (a label selector cannot select by hash), and the
//! replica drops the other shards' after decoding them. Decoding them whole
//! was wasted: a plan is decoded into its typed spec and packed again, a
//! Deployment's pod spec parsed for its config references, a revision's
//! template hashed. Under [`decoding_for`], the cached types decode an object
//! of another shard's plan as its metadata only (the watch and the shard
//! filter read nothing else), and skip the rest of its text unparsed.
//!
//! The scope is a thread-local set around one poll of a watch stream: kube
//! decodes list pages and watch events synchronously inside that poll, and no
//! decoding outside it (another watch, a reconcile's reads) is affected.
//! Within an object the API server sends `metadata` before `spec`, `status`
//! and `data` (typed objects in struct order, custom resources with sorted
//! keys); an object whose metadata came later would simply be decoded whole.

use crate::shard::Shard;
use serde::Deserialize;
use std::cell::Cell;

thread_local! {
    /// The shard of the decoding under way on this thread, if sharded.
    static KEEP: Cell<Option<Shard>> = const { Cell::new(None) };
    /// Whether the rest of the object being decoded is another shard's.
    static SKIP: Cell<bool> = const { Cell::new(false) };
}

/// Restores the thread's scope when `decoding_for` ends, even by a panic.
struct Restore(Option<Shard>);

impl Drop for Restore {
    fn drop(&mut self) {
        KEEP.with(|k| k.set(self.0));
        SKIP.with(|s| s.set(false));
    }
}

/// Runs `f` (a poll of a watch stream) with the objects of plans `shard`
/// does not own decoded as their metadata only.
pub fn decoding_for<R>(shard: Shard, f: impl FnOnce() -> R) -> R {
    let _restore = Restore(KEEP.with(|k| k.replace(Some(shard))));
    SKIP.with(|s| s.set(false));
    f()
}

/// Called with an object's metadata as soon as it is decoded: the plan it
/// belongs to (its own name for a plan, the plan label for an object made
/// for one; `None` for neither). Decides whether the rest of the object is
/// skipped: only under [`decoding_for`], for another shard's plan or none.
pub(crate) fn metadata_seen(namespace: Option<&str>, plan: Option<&str>) {
    let skip = KEEP
        .with(Cell::get)
        .is_some_and(|shard| plan.is_none_or(|p| !shard.owns(namespace.unwrap_or_default(), p)));
    SKIP.with(|s| s.set(skip));
}

/// Whether the rest of the object being decoded is another shard's.
pub(crate) fn skipping() -> bool {
    SKIP.with(Cell::get)
}

/// Called when an object is complete: what follows is another object.
pub(crate) fn object_done() {
    SKIP.with(|s| s.set(false));
}

/// Decodes a field of an object, or skips its text (no allocation, nothing
/// built) and gives the default when the object is another shard's.
pub(crate) fn unless_foreign<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    if skipping() {
        serde::de::IgnoredAny::deserialize(d)?;
        Ok(T::default())
    } else {
        T::deserialize(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::cached::{CachedDeployment, CachedPlan, CachedPod, CachedRevision};
    use serde_json::{Value, json};

    /// Shard 0 of 2, which owns plan `ns/mine` and not `ns/other`.
    fn shard() -> Shard {
        let shard = Shard { index: 0, count: 2 };
        assert!(shard.owns("ns", "mine") && !shard.owns("ns", "other"));
        shard
    }

    fn pod(plan: Option<&str>) -> Value {
        let labels = plan.map_or_else(|| json!({}), |p| json!({"releaseplan.io/plan": p}));
        json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7", "labels": labels},
            "spec": {"containers": [{"name": "app", "image": "app:1"}]},
            "status": {"containerStatuses": [{"name": "app", "ready": true, "restartCount": 3}]}})
    }

    fn deployment(plan: &str) -> Value {
        json!({"kind": "Deployment", "apiVersion": "apps/v1",
            "metadata": {"name": "d", "namespace": "ns", "labels": {"releaseplan.io/plan": plan}},
            "spec": {"replicas": 2, "selector": {}, "template": {"spec": {"containers": [
                {"name": "app", "envFrom": [{"configMapRef": {"name": "cfg"}}]}]}}},
            "status": {"replicas": 2, "readyReplicas": 1}})
    }

    fn plan(name: &str) -> Value {
        json!({"apiVersion": "releaseplan.io/v1alpha1", "kind": "ReleasePlan",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "9"},
            "spec": {"components": [{"name": "web", "replicas": 1, "template": {"spec": {
                "containers": [{"name": "app", "image": "app:1",
                    "envFrom": [{"configMapRef": {"name": "cfg"}}]}]}}}]},
            "status": {"phase": "RollingOut"}})
    }

    /// As the API server sends it: metadata before data (a `json!` object
    /// would sort its keys, data first).
    fn revision(plan: &str) -> String {
        format!(
            r#"{{"kind": "ControllerRevision", "apiVersion": "apps/v1",
            "metadata": {{"name": "r", "namespace": "ns", "labels": {{"releaseplan.io/plan": "{plan}"}}}},
            "data": {{"spec": {{"containers": [{{"name": "app", "image": "app:1"}}]}}}},
            "revision": 2}}"#
        )
    }

    fn decode<T: serde::de::DeserializeOwned>(v: &Value) -> T {
        serde_json::from_str(&v.to_string()).expect("decodes")
    }

    fn decode_text<T: serde::de::DeserializeOwned>(text: &str) -> T {
        serde_json::from_str(text).expect("decodes")
    }

    fn status_of(p: &CachedPod) -> Option<i32> {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.first())
            .map(|c| c.restart_count)
    }

    #[test]
    fn outside_a_shard_scope_every_object_is_decoded_whole() {
        let foreign: CachedPod = decode(&pod(Some("other")));
        assert_eq!(status_of(&foreign), Some(3));
        let d: CachedDeployment = decode(&deployment("other"));
        assert_eq!(d.spec.as_ref().and_then(|s| s.replicas), Some(2));
    }

    #[test]
    fn another_shards_objects_keep_their_metadata_only() {
        decoding_for(shard(), || {
            let other: CachedPod = decode(&pod(Some("other")));
            assert_eq!(other.status, None, "the status is skipped");
            assert_eq!(other.labels.get("releaseplan.io/plan"), Some("other"));
            assert_eq!(other.metadata.resource_version.as_deref(), Some("7"));
            let unlabelled: CachedPod = decode(&pod(None));
            assert_eq!(unlabelled.status, None, "no plan is no shard's");

            let d: CachedDeployment = decode(&deployment("other"));
            assert!(d.spec.is_none() && d.status.is_none(), "{d:?}");
            let r: CachedRevision = decode_text(&revision("other"));
            assert_eq!(r.stored, crate::api::cached::StoredTemplate::Missing);
            let p: CachedPlan = decode(&plan("other"));
            assert_eq!(p.metadata.name.as_deref(), Some("other"));
            assert!(p.spec_text().is_empty() && !p.reads("cfg"));
        });
    }

    #[test]
    fn this_shards_objects_are_decoded_whole() {
        decoding_for(shard(), || {
            let mine: CachedPod = decode(&pod(Some("mine")));
            assert_eq!(status_of(&mine), Some(3));
            let d: CachedDeployment = decode(&deployment("mine"));
            let spec = d.spec.expect("spec kept");
            assert_eq!((spec.replicas, spec.refs.len()), (Some(2), 1));
            assert_eq!(d.status.and_then(|s| s.ready_replicas), Some(1));
            let r: CachedRevision = decode_text(&revision("mine"));
            assert!(matches!(
                r.stored,
                crate::api::cached::StoredTemplate::Template { .. }
            ));
            let p: CachedPlan = decode(&plan("mine"));
            assert!(p.reads("cfg"));
            assert!(p.decode().expect("unpacks").status.is_some());
        });
    }

    /// A list page: each object is judged by its own metadata, whatever the
    /// one before it was.
    #[test]
    fn a_page_mixing_shards_decodes_each_object_by_its_own_plan() {
        let page = json!([pod(Some("other")), pod(Some("mine")), pod(Some("other"))]);
        let pods: Vec<CachedPod> = decoding_for(shard(), || decode(&page));
        let statuses: Vec<_> = pods.iter().map(status_of).collect();
        assert_eq!(statuses, [None, Some(3), None]);
    }

    /// Metadata sent after the rest cannot be known in time: such an object
    /// is decoded whole, never cut short wrongly.
    #[test]
    fn an_object_whose_metadata_comes_last_is_decoded_whole() {
        let text = r#"{"status": {"containerStatuses": [{"name": "app", "restartCount": 3}]},
            "metadata": {"name": "p", "namespace": "ns", "labels": {"releaseplan.io/plan": "other"}}}"#;
        let after_foreign = json!([pod(Some("other"))]).to_string();
        decoding_for(shard(), || {
            let _: Vec<CachedPod> = serde_json::from_str(&after_foreign).expect("decodes");
            let p: CachedPod = serde_json::from_str(text).expect("decodes");
            assert_eq!(status_of(&p), Some(3));
        });
    }

    #[test]
    fn the_scope_ends_with_the_call() {
        decoding_for(shard(), || {
            let _: CachedPod = decode(&pod(Some("other")));
        });
        let after: CachedPod = decode(&pod(Some("other")));
        assert_eq!(status_of(&after), Some(3));
    }
}
