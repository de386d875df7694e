//! A kube client over canned answers, for the unit tests of what the
//! operator does when the API server is away: each request gets the next
//! answer, the last one again when they run out, and the client counts them.

use kube::Client;
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// The client, and how many requests it has answered.
pub(crate) fn answering(answers: Vec<(u16, Value)>) -> (Client, Arc<Mutex<usize>>) {
    let count: Arc<Mutex<usize>> = Arc::default();
    let seen = Arc::clone(&count);
    let svc = tower::service_fn(move |_req: http::Request<kube::client::Body>| {
        let mut n = seen.lock().unwrap();
        let (code, body) = answers[(*n).min(answers.len() - 1)].clone();
        *n += 1;
        async move {
            http::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
        }
    });
    (Client::new(svc, "ns"), count)
}

/// A failure answer: `code` with its Status body.
pub(crate) fn status(code: u16) -> (u16, Value) {
    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": "canned", "reason": "Canned", "code": code});
    (code, body)
}

/// An empty list of objects' metadata, as a `limit=1` list answers.
pub(crate) fn empty_list() -> (u16, Value) {
    let body = serde_json::json!({"kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": "1"}, "items": []});
    (200, body)
}
