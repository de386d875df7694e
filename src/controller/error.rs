//! The errors of a reconcile and of the start-up check, and how a failed
//! request is read: no answer (transport), a conflict, a refusal.

use crate::plan::Refusal;

///one re None of them stops the process.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the API server failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Someone else wrote the plan first: read again.
    #[error("conflict writing {0}: the object changed, reading again")]
    Conflict(String),
    /// The object has no namespace (ReleasePlans are namespaced).
    #[error("object has no namespace")]
    NoNamespace,
    /// Serialization failed.
    #[error("serialization: {0}")]
    Json(#[from] serde_json::Error),
    /// The API server refused a write of a Deployment, Service or route
    /// (a 4xx answer); status and an Event say why.
    #[error("{0} could not be written (see the plan's status)")]
    Refused(String),
    /// A write of a Deployment, Service or route got no answer (connection
    /// reset, timeout; it may have landed) or a 5xx one: retried with
    /// backoff; status and an `ApiUnavailable` Event say so.
    #[error(
        "{object} could not be written: the API server did not take it (see the plan's status)"
    )]
    Unavailable {
        /// The object.
        object: String,
        /// Whether any answer came (a 5xx) or none (the transport failed).
        answered: bool,
    },
    /// A ControllerRevision (a revision's stored template) could not be
    /// written or deleted. It never holds the rollout: the Deployments were
    /// written, and the reconcile is retried with backoff.
    #[error(
        "ControllerRevision {name} (the stored template of a revision) could not be written: {source}"
    )]
    Template {
        /// The ControllerRevision.
        name: String,
        /// The API server's answer.
        source: kube::Error,
    },
    /// A template gate's copy (the Secret that keeps the content its step
    /// read) could not be created or deleted: the reconcile is retried with
    /// backoff. The message names the Secret, never its content.
    #[error("Secret {name} (a template gate's copy) could not be written: {source}")]
    TemplateCopy {
        /// The Secret.
        name: String,
        /// The API server's answer.
        source: kube::Error,
    },
    /// A Job of a Job gate could not be created or deleted. The gate waits
    /// (its verdict comes from the Job); the reconcile is retried with backoff.
    #[error("Job {name} (of a Job gate) could not be written: {source}")]
    Job {
        /// The Job.
        name: String,
        /// The API server's answer.
        source: kube::Error,
    },
    /// An unused copy of a ConfigMap or Secret could not be deleted: the
    /// reconcile is retried with backoff. (A copy that could not be created
    /// is a refusal, as for a Deployment.) The message names the copy, never
    /// its content.
    #[error(
        "{name} (an unused copy of config released with the plan) could not be deleted: {source}"
    )]
    Config {
        /// Kind and name of the copy.
        name: String,
        /// The API server's answer.
        source: kube::Error,
    },
    /// The reconcile panicked (a bug, ours or a dependency's). Caught so
    /// that one plan cannot take the process and every other plan down; it
    /// is retried with backoff and reported like any failure.
    #[error("internal error (a bug; please report it): {0}")]
    Panic(String),
    /// The reconcile ran past its deadline (`--reconcile-timeout-seconds`)
    /// and was given up: something it waited on never ended. Retried with
    /// backoff; what the plan's memory holds (writes whose answer was lost,
    /// their Events) is kept for the retry.
    #[error("the reconcile did not finish within {0:?} and was given up (retrying)")]
    Deadline(std::time::Duration),
}

impl Error {
    /// Every [`Error::kind`]: the failures metric exports each at 0 from the
    /// start, so `rate()` and `increase()` see the first failure of a kind.
    pub const KINDS: [&'static str; 13] = [
        "api",
        "transport",
        "unavailable",
        "client",
        "conflict",
        "invalid",
        "serialization",
        "refused",
        "template",
        "job",
        "config",
        "panic",
        "deadline",
    ];

    /// Short label for the failures metric.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code >= 500 => "unavailable",
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(e) if is_transport(e) => "transport",
            Error::Kube(_) => "client",
            Error::Conflict(_) => "conflict",
            Error::NoNamespace => "invalid",
            Error::Json(_) => "serialization",
            Error::Unavailable {
                answered: false, ..
            } => "transport",
            Error::Unavailable { answered: true, .. } => "unavailable",
            Error::Refused(_) => "refused",
            Error::Template { .. } | Error::TemplateCopy { .. } => "template",
            Error::Job { .. } => "job",
            Error::Config { .. } => "config",
            Error::Panic(_) => "panic",
            Error::Deadline(_) => "deadline",
        }
    }
}

/// Errors that stop the operator from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The CRD is not installed in the cluster.
    #[error(
        "the ReleasePlan CRD (releaseplans.releaseplan.io) is not installed: run `kubectl apply --server-side -f crds/releaseplan.yaml`"
    )]
    CrdMissing,
    /// The GateTemplate or ClusterGateTemplate CRD is not installed.
    #[error(
        "the GateTemplate and ClusterGateTemplate CRDs (gatetemplates.releaseplan.io, clustergatetemplates.releaseplan.io) are not installed: run `kubectl apply --server-side -f crds/gatetemplates.yaml`"
    )]
    TemplateCrdMissing,
    /// The ComponentScale CRD is not installed.
    #[error(
        "the ComponentScale CRD (componentscales.releaseplan.io) is not installed: run `kubectl apply --server-side -f crds/componentscales.yaml`"
    )]
    ScaleCrdMissing,
    /// The API server could not be reached.
    #[error("cannot reach the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// The error of a reconcile whose write of one of the plan's objects failed.
pub(crate) fn of_refusal(r: &Refusal) -> Error {
    let object = format!("{} {}", r.kind, r.name);
    if r.is_unavailable() {
        Error::Unavailable {
            object,
            answered: r.code != 0,
        }
    } else {
        Error::Refused(object)
    }
}

/// The refusal a failed write of an object of `kind` becomes.
pub(crate) fn refusal_of(kind: &'static str, name: &str, e: &kube::Error) -> Refusal {
    match e {
        kube::Error::Api(s) => Refusal {
            kind,
            name: name.to_string(),
            code: s.code,
            message: s.message.clone(),
        },
        other => Refusal {
            kind,
            name: name.to_string(),
            code: 0,
            message: other.to_string(),
        },
    }
}

// The answers of the API server, classified below the controller, so `ops`
// and `gates` need not import it.
pub(crate) use crate::kube_errors::{
    is_conflict, is_not_found, is_transient, is_transport, may_have_landed, namespace_terminating,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_kind_is_exported_from_the_start() {
        let api = kube::Error::Api(Box::new(kube::core::Status::failure("no", "Forbidden")));
        let errors = [
            Error::Kube(kube::Error::Api(Box::new(kube::core::Status::failure(
                "no", "x",
            )))),
            Error::Kube(kube::Error::Service("connection reset".into())),
            Error::Kube(kube::Error::Api(Box::new(
                kube::core::Status::failure("etcd", "x").with_code(503),
            ))),
            Error::Kube(kube::Error::LinesCodecMaxLineLengthExceeded),
            Error::Conflict("p".into()),
            Error::NoNamespace,
            Error::Json(serde_json::from_str::<u8>("x").unwrap_err()),
            Error::Refused("d".into()),
            Error::Template {
                name: "t".into(),
                source: api,
            },
            Error::Job {
                name: "j".into(),
                source: kube::Error::LinesCodecMaxLineLengthExceeded,
            },
            Error::Config {
                name: "ConfigMap c".into(),
                source: kube::Error::LinesCodecMaxLineLengthExceeded,
            },
            Error::Panic("boom".into()),
            Error::Deadline(std::time::Duration::from_secs(100)),
        ];
        let kinds: Vec<&str> = errors.iter().map(Error::kind).collect();
        assert_eq!(kinds, Error::KINDS);
    }
}
