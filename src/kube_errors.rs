//! What an answer of the API server (or its absence) means: away and worth
//! asking again, a race, a refusal. One classification for every caller
//! (the controller, leader election, gates' credential reads), below all of
//! them, so nothing imports it through the controller.

/// Whether a request failed on the way (connection refused or reset, TLS,
/// timeout, a body cut short): no answer came, and the write may have landed.
pub(crate) fn is_transport(e: &kube::Error) -> bool {
    matches!(
        e,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_)
    )
}

/// Whether the API server was away for this request (no answer, a 5xx, a
/// 429): worth asking again, unlike an answer (404, 403, 401, 422...).
pub(crate) fn is_transient(e: &kube::Error) -> bool {
    is_transport(e) || matches!(e, kube::Error::Api(s) if away_status(s.code))
}

/// Whether an API server's status code says it was away (a 5xx, a 429)
/// rather than answering: the one rule of [`is_transient`], for callers
/// that hold the code.
pub(crate) fn away_status(code: u16) -> bool {
    code == 429 || code >= 500
}

/// Whether the write lost a race: the object changed since it was read (409).
pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Whether the object does not exist (404).
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether a failed write may still have been applied: it got no answer, or
/// a 5xx one (a timeout of the API server's own may come after etcd wrote).
pub(crate) fn may_have_landed(e: &kube::Error) -> bool {
    is_transport(e) || matches!(e, kube::Error::Api(s) if s.code >= 500)
}

/// Whether the API server refused a write because the namespace is being
/// deleted: nothing to report then, the plan's own deletion follows.
pub(crate) fn namespace_terminating(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403
        && s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("x", "x").with_code(code),
        ))
    }

    #[test]
    fn away_is_no_answer_a_5xx_or_a_429_and_nothing_else() {
        assert!(is_transient(&kube::Error::Service("reset".into())));
        for code in [429, 500, 503, 504] {
            assert!(is_transient(&api(code)), "{code}");
            assert!(away_status(code));
        }
        for code in [400, 401, 403, 404, 409, 422] {
            assert!(!is_transient(&api(code)), "{code}");
        }
        assert!(may_have_landed(&api(504)) && !may_have_landed(&api(429)));
        assert!(is_conflict(&api(409)) && is_not_found(&api(404)));
        assert!(!namespace_terminating(&api(403)));
    }
}
