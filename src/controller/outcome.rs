//! What a write of one of a plan's objects came to, and the field manager
//! every write is made under: shared by each kind's writer (Deployments,
//! routes, autoscalers, copies), below all of them.

use super::error::refusal_of;
use crate::kube_errors::namespace_terminating;
use crate::plan::Refusal;

/// The field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "releaseplan";

/// What a failed Deployment write comes to: nothing to report in a
/// terminating namespace, else a refusal for status.
pub(crate) fn failed_write(deployment: &str, e: &kube::Error) -> Acted {
    failed("Deployment", deployment, e)
}

/// What a failed write of an object of `kind` comes to.
pub(crate) fn failed(kind: &'static str, name: &str, e: &kube::Error) -> Acted {
    if namespace_terminating(e) {
        Acted::NamespaceTerminating
    } else {
        Acted::Refused(refusal_of(kind, name, e))
    }
}

/// What acting on a decision came to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Acted {
    /// Every write went through (or none was needed).
    Done,
    /// The first write that failed; the rest were not tried (they would most
    /// likely fail the same way).
    Refused(Refusal),
    /// The namespace is being deleted: the plan's deletion follows.
    NamespaceTerminating,
}
