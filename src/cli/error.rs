//! The plugin's errors: [`CliError`], what every command returns, and the
//! errors of the pure parts it wraps ([`UndoError`], [`EditError`]), each
//! with a message that says what to do.

use crate::objects::controller_revision::StoredError;

/// Errors of the plugin, each with a message that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// No kubeconfig or in-cluster configuration.
    #[error("no Kubernetes configuration: {0}")]
    Config(String),
    /// The plan does not exist.
    #[error("releaseplan {name} not found in namespace {namespace}")]
    NotFound {
        /// Plan name.
        name: String,
        /// Namespace looked in.
        namespace: String,
    },
    /// The CRD is missing.
    #[error(
        "the ReleasePlan CRD (releaseplans.releaseplan.io) is not installed in the cluster at {0}: install it with `kubectl apply --server-side -f crds/releaseplan.yaml`"
    )]
    CrdMissing(String),
    /// The API server cannot be reached.
    #[error("cannot reach the Kubernetes API at {url}: {reason}")]
    Unreachable {
        /// Cluster URL.
        url: String,
        /// The error chain.
        reason: String,
    },
    /// The API server refused a request.
    #[error("the Kubernetes API refused to {what}: {reason}")]
    Refused {
        /// What was attempted.
        what: String,
        /// The API server's message.
        reason: String,
    },
    /// The plan was deleted while watching it.
    #[error("releaseplan {0} was deleted")]
    Deleted(String),
    /// The operator did not acknowledge a request in time.
    #[error(
        "the operator did not acknowledge request {value} within {seconds}s: is it running and watching namespace {namespace}? The annotation stays set; the operator applies it when it runs"
    )]
    NotAcknowledged {
        /// The annotation value.
        value: String,
        /// The wait.
        seconds: u64,
        /// Namespace of the plan.
        namespace: String,
    },
    /// The request was acknowledged but does not apply.
    #[error("the operator ignored the request: {0}")]
    Ignored(String),
    /// Undo cannot be built.
    #[error(transparent)]
    Undo(#[from] UndoError),
    /// A spec edit cannot be built (unknown component or container).
    #[error(transparent)]
    Edit(#[from] EditError),
    /// The plan kept changing under a guarded patch.
    #[error("releaseplan {0} changed while it was being patched ({1} attempts): try again")]
    Conflict(String, u32),
    /// A file given to `lint` cannot be read or parsed.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// Writing output failed.
    #[error("cannot write output: {0}")]
    Io(#[from] std::io::Error),
}

/// Why no undo patch can be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UndoError {
    /// The plan has no finished rollout.
    #[error("releaseplan {0} has no rollout history yet: nothing to undo")]
    NoHistory(String),
    /// `--to-revision N` names no history entry.
    #[error("no history entry number {0}; the history holds {1}")]
    NoEntry(i64, String),
    /// No `Promoted` entry other than the current revision.
    #[error(
        "no earlier promoted revision in the history (current revision {0}); pick one with --to-revision"
    )]
    NoEarlierPromoted(String),
    /// The chosen entry is the revision the spec already asks for.
    #[error("history entry {0} is revision {1}, which is already the current revision")]
    AlreadyCurrent(i64, String),
    /// The entry lists no component hashes.
    #[error("history entry {0} records no component templates")]
    NoComponents(i64),
    /// A `name=hash` item of the entry cannot be read.
    #[error("history entry {0} has a malformed component {1:?} (expected name=hash)")]
    Malformed(i64, String),
    /// No ControllerRevision stores the template of a component revision.
    #[error(
        "component {component} at template {hash} has no stored template (its ControllerRevision is gone: pruned beyond revisionHistoryLimit, now {limit}, or rolled out before the operator stored templates): revision {revision} cannot be rebuilt from the cluster; take its templates from your git history"
    )]
    NotStored {
        /// Component name.
        component: String,
        /// Its template hash at that revision.
        hash: String,
        /// Plan revision of the entry.
        revision: String,
        /// The plan's revision history limit.
        limit: usize,
    },
    /// A ControllerRevision holds something else than the revision's template.
    #[error(
        "{0}: revision cannot be rebuilt from the cluster; take its templates from your git history"
    )]
    Unusable(StoredError),
}

/// Why an edit cannot be built; each says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// An argument is not `COMPONENT=IMAGE` or `COMPONENT/CONTAINER=IMAGE`.
    #[error("cannot read {0:?}: write COMPONENT=IMAGE or COMPONENT/CONTAINER=IMAGE")]
    BadPair(String),
    /// No component of that name.
    #[error("releaseplan {plan} has no component {component:?} (components: {known})")]
    NoComponent {
        /// Plan name.
        plan: String,
        /// The name asked for.
        component: String,
        /// The names the plan has.
        known: String,
    },
    /// No container of that name in the component.
    #[error(
        "component {component} has no container {container:?} (containers: {known}; init containers are not set by this command)"
    )]
    NoContainer {
        /// Component name.
        component: String,
        /// The name asked for.
        container: String,
        /// The container names the component has.
        known: String,
    },
    /// The component has several containers and none was named.
    #[error(
        "component {component} has {count} containers ({known}): name one, as {component}/CONTAINER=IMAGE"
    )]
    WhichContainer {
        /// Component name.
        component: String,
        /// Number of containers.
        count: usize,
        /// The container names.
        known: String,
    },
    /// The spec read from the API server does not have the expected shape.
    #[error("the plan's spec has no {0}")]
    Shape(String),
}

/// An error and its sources, joined with `: `.
pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages() {
        let e = CliError::NotFound {
            name: "shop".into(),
            namespace: "x".into(),
        };
        assert_eq!(e.to_string(), "releaseplan shop not found in namespace x");
        assert!(
            CliError::CrdMissing("https://127.0.0.1:6443/".into())
                .to_string()
                .starts_with("the ReleasePlan CRD (releaseplans.releaseplan.io) is not installed")
        );
    }
}
