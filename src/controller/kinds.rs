//! The kinds of object the controller caches for plans (selected by the plan
//! label, each a watch, a cache on [`super::context::Context`] and a wake
//! source): one row each, read by the test only (the caches are of different
//! types, each a field of its own). Adding an owned kind starts with a row here;
//! `doc_lists::every_owned_kind_is_watched_cached_granted_and_documented`
//! then names every place that still lacks it (the watch in `run.rs`, the
//! cache's first list in `caches_synced`, the size gauge in `sweep.rs`, the
//! chart's RBAC and the docs' lists), and fails for a kind watched in
//! `run.rs` that has no row.

use super::queue::WakeSource;

/// One kind the controller caches for plans.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnedKind {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Resource, plural.
    pub plural: &'static str,
    /// Its cache on the context (field name).
    pub cache: &'static str,
    /// What a change of one wakes its plan as.
    pub wakes: WakeSource,
}

/// Every kind the controller caches for plans by their label.
pub(crate) const OWNED_KINDS: [OwnedKind; 9] = [
    OwnedKind {
        group: "apps",
        plural: "deployments",
        cache: "deployments",
        wakes: WakeSource::Deployment,
    },
    OwnedKind {
        group: "apps",
        plural: "statefulsets",
        cache: "stateful_sets",
        wakes: WakeSource::StatefulSet,
    },
    OwnedKind {
        group: "apps",
        plural: "daemonsets",
        cache: "daemon_sets",
        wakes: WakeSource::DaemonSet,
    },
    OwnedKind {
        group: "",
        plural: "pods",
        cache: "pods",
        wakes: WakeSource::Pod,
    },
    OwnedKind {
        group: "batch",
        plural: "jobs",
        cache: "jobs",
        wakes: WakeSource::Job,
    },
    OwnedKind {
        group: "",
        plural: "services",
        cache: "services",
        wakes: WakeSource::Service,
    },
    OwnedKind {
        group: "releaseplan.io",
        plural: "componentscales",
        cache: "scales",
        wakes: WakeSource::Scale,
    },
    OwnedKind {
        group: "autoscaling",
        plural: "horizontalpodautoscalers",
        cache: "hpas",
        wakes: WakeSource::Hpa,
    },
    OwnedKind {
        group: "apps",
        plural: "controllerrevisions",
        cache: "templates",
        wakes: WakeSource::Revision,
    },
];
